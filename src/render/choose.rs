//! The format choice: which native format, if any, serves a checkpoint's template. The one
//! that reproduces it on every probe conversation ([`super::probes`]), with the fewest
//! refusals; otherwise the Jinja path.

use crate::checkpoint::Checkpoint;

use super::jinja::JinjaFormat;
use super::native::{self, ChatFormat};
use super::probes::{self, DifferenceKind, ProbeReport};

/// How the format of an encoder was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatChoice {
    /// The native format renders every probe conversation exactly as the checkpoint's template
    /// does (see [`crate::render::probes`]).
    Probed {
        /// The probe results (including inputs the native format refuses or delegates).
        report: ProbeReport,
        /// Where the official template comes from, when the checkpoint's template is
        /// byte-for-byte that one.
        official: Option<&'static str>,
        /// The other native formats probed, and why each was not chosen.
        rejected: Vec<(&'static str, String)>,
    },
    /// No native format reproduces the template: the Jinja path renders it. For each native
    /// format whose tokens the vocabulary has, the first probe where it differs.
    Jinja {
        /// `(format, why it was not used)`.
        rejected: Vec<(&'static str, String)>,
    },
    /// The caller named the native format.
    Explicit {
        /// The probe results against the checkpoint's template (`None`: the template cannot
        /// be compiled, so it was not checked).
        report: Option<ProbeReport>,
    },
    /// The caller asked for the Jinja path (`format="jinja"`).
    ExplicitJinja,
    /// The template cannot be compiled; the caller renders it (see `Encoder::encode_rendered`).
    External,
}

/// Why a probed native format was not chosen, in one line.
pub fn rejection(report: &ProbeReport) -> String {
    match &report.difference {
        Some(d) => match d.kind {
            DifferenceKind::Refuses => format!(
                "it refuses probe \"{}\" that the template renders: {}",
                d.probe, d.detail
            ),
            DifferenceKind::TemplateRaises => format!("probe \"{}\": {}", d.probe, d.detail),
            DifferenceKind::Text => format!("probe \"{}\" differs {}", d.probe, d.detail),
        },
        None => format!(
            "it reproduces the template too, but refuses {} and hands {} probes to the template",
            report.refused.len(),
            report.delegated.len()
        ),
    }
}

/// Probe the native formats against the checkpoint's template. The format whose official
/// template it is byte for byte serves if it reproduces it; otherwise every native format
/// whose tokens the vocabulary has is probed, and of those that reproduce the template the
/// one with the fewest refusals wins, then the one that hands the fewest probes to the
/// template, then the first in [`native::FORMAT_NAMES`]. If none does (`None`), the Jinja path.
pub fn choose(
    checkpoint: &Checkpoint,
    jinja: &JinjaFormat,
    official: Option<&'static str>,
) -> (Option<Box<dyn ChatFormat>>, FormatChoice) {
    let mut rejected = Vec::new();
    if let Some(name) = official {
        if let Ok(native) = native::build(name, checkpoint) {
            let report = probes::check(native.as_ref(), jinja);
            if report.matches() {
                let choice = FormatChoice::Probed {
                    report,
                    official: None,
                    rejected,
                };
                return (Some(native), choice);
            }
            rejected.push((name, rejection(&report)));
        }
    }
    let mut best: Option<(Box<dyn ChatFormat>, ProbeReport)> = None;
    let rank = |r: &ProbeReport| (r.refused.len(), r.delegated.len());
    for name in native::FORMAT_NAMES
        .iter()
        .copied()
        .filter(|n| Some(*n) != official)
    {
        let Ok(native) = native::build(name, checkpoint) else {
            continue; // the vocabulary lacks the format's tokens
        };
        let report = probes::check(native.as_ref(), jinja);
        if !report.matches() {
            rejected.push((name, rejection(&report)));
            continue;
        }
        match &best {
            Some((_, b)) if rank(b) <= rank(&report) => rejected.push((name, rejection(&report))),
            _ => {
                if let Some((f, r)) = best.replace((native, report)) {
                    rejected.push((f.name(), rejection(&r)));
                }
            }
        }
    }
    match best {
        Some((native, report)) => (
            Some(native),
            FormatChoice::Probed {
                report,
                official: None,
                rejected,
            },
        ),
        None => (None, FormatChoice::Jinja { rejected }),
    }
}
