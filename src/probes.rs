//! Choosing a native format by behaviour: a native format serves a checkpoint only if it
//! renders a fixed, varied set of probe conversations exactly as the checkpoint's own
//! template does (rendered by the generic path, [`crate::generic`]).
//!
//! The probes cover a system message or none, one to four turns, conversations ending with
//! the user or the assistant, each with and without the generation prompt, whitespace and
//! Unicode edge cases, reasoning fields, the template arguments the format takes, and no
//! template arguments at all (so a template's own defaults, like a date or a default system
//! prompt, are compared too). Template arguments that the template fills from the clock are
//! given to the native format the way the Python layer gives them (formatted from the same
//! fixed time the template's `strftime_now()` returns).
//!
//! Outcomes per probe: the same string, or both raise (the same); the native format refuses
//! an input the template renders (chatids' deliberate refusals, e.g. tool calls: accepted,
//! and reported); anything else (different strings, or the template raises where the native
//! format renders) disqualifies the format.

use crate::formats::{ChatFormat, RenderRequest, SystemPolicy, TemplateArgs};
use crate::generic::{JinjaFormat, JinjaRequest};
use crate::message::{Message, TemplateValue};
use crate::pieces::Pieces;
use crate::template::{strftime, DateTime};

/// The time the probes' `strftime_now()` returns (any fixed date that is not a template's
/// hard-coded default).
pub const PROBE_NOW: DateTime = DateTime {
    year: 2025,
    month: 3,
    day: 14,
    hour: 9,
    minute: 26,
    second: 53,
};

/// One probe conversation.
#[derive(Debug, Clone)]
pub struct Probe {
    /// A short name for reports.
    pub name: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The generation-prompt flag.
    pub add_generation_prompt: bool,
    /// Template arguments.
    pub kwargs: TemplateArgs,
    /// What the template's `strftime_now()` returns (and what clock-filled arguments are
    /// formatted from for the native format).
    pub now: DateTime,
}

/// Where a native format and the template part ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The probe's name.
    pub probe: String,
    /// What happened, e.g. `at byte 57: native "...\n\n" vs template "...\n"`.
    pub detail: String,
}

/// The result of probing one native format against a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeReport {
    /// Probes run.
    pub compared: usize,
    /// Probes the native format refuses while the template renders them (name, reason).
    pub refused: Vec<(String, String)>,
    /// The first disqualifying difference, if any.
    pub difference: Option<Difference>,
}

impl ProbeReport {
    /// Whether the native format reproduces the template on every probe.
    pub fn matches(&self) -> bool {
        self.difference.is_none()
    }
}

fn text(role: &str, content: &str) -> Message {
    Message::new(role, content)
}

fn with_reasoning(content: &str, reasoning: &str) -> Message {
    let mut m = Message::new("assistant", content);
    m.reasoning_content = Some(reasoning.to_string());
    m
}

/// The probe conversations (before the generation-prompt flag is applied).
fn conversations() -> Vec<(&'static str, Vec<Message>)> {
    vec![
        ("one user turn", vec![text("user", "Hello!")]),
        (
            "system and user",
            vec![
                text("system", "You are terse."),
                text("user", "Name a prime."),
            ],
        ),
        (
            "two user turns",
            vec![
                text("user", "Hi"),
                text("assistant", "Hello! How can I help?"),
                text("user", "Tell me a joke."),
            ],
        ),
        (
            "system and four turns",
            vec![
                text("system", "S"),
                text("user", "a"),
                text("assistant", "b"),
                text("user", "c"),
                text("assistant", "d"),
                text("user", "e"),
                text("assistant", "f"),
                text("user", "g"),
            ],
        ),
        (
            "ends with the assistant",
            vec![text("user", "2+2?"), text("assistant", "4")],
        ),
        (
            "system, ends with the assistant",
            vec![
                text("system", "Be exact."),
                text("user", "2+2?"),
                text("assistant", "4"),
            ],
        ),
        (
            "whitespace",
            vec![
                text("user", "  padded  \n"),
                text("assistant", "\n\nindented\n    code\n\t\n"),
                text("user", "\ttab and  two spaces "),
            ],
        ),
        (
            "multi-line system",
            vec![
                text("system", "Line one.\n\nLine two.  "),
                text("user", "x"),
            ],
        ),
        ("unicode", vec![text("user", "Grüße, 你好 🙂 — ok\u{200b}")]),
        ("empty user content", vec![text("user", "")]),
        (
            "template-like content",
            vec![text(
                "user",
                "{{ not jinja }} {% raw %} <b>html</b> [INST] <<SYS>>",
            )],
        ),
        (
            "reasoning",
            vec![
                text("user", "q1"),
                with_reasoning("a1", "thinking one"),
                text("user", "q2"),
                with_reasoning("a2", "thinking two"),
            ],
        ),
        ("system only", vec![text("system", "Only a system prompt.")]),
    ]
}

/// Another time, for the probes that pass the clock-filled arguments explicitly.
const OTHER_NOW: DateTime = DateTime {
    year: 2030,
    month: 1,
    day: 1,
    hour: 0,
    minute: 0,
    second: 0,
};

/// Extra template arguments worth probing for `format` (beyond none at all), with the time
/// the template sees.
fn feature_kwargs(format: &dyn ChatFormat) -> Vec<(&'static str, TemplateArgs, DateTime)> {
    let mut out = Vec::new();
    if !format.clock_defaults().is_empty() {
        // The arguments given explicitly, as the caller (or the Python layer) does.
        let mut args = TemplateArgs::new();
        for (name, fmt) in format.clock_defaults() {
            if let Ok(value) = strftime(fmt, &OTHER_NOW) {
                args.insert(name.to_string(), TemplateValue::Str(value));
            }
        }
        out.push(("explicit date arguments", args, OTHER_NOW));
    }
    if format.name() == "qwen3" {
        for flag in [false, true] {
            let mut args = TemplateArgs::new();
            args.insert("enable_thinking".into(), TemplateValue::Bool(flag));
            let name = if flag {
                "enable_thinking=True"
            } else {
                "enable_thinking=False"
            };
            out.push((name, args, PROBE_NOW));
        }
    }
    out
}

/// Every probe for `format`.
pub fn probes(format: &dyn ChatFormat) -> Vec<Probe> {
    let mut kwarg_sets = vec![("", TemplateArgs::new(), PROBE_NOW)];
    kwarg_sets.extend(feature_kwargs(format));
    let mut out = Vec::new();
    for (kw_name, kwargs, now) in &kwarg_sets {
        for (name, messages) in conversations() {
            for add_generation_prompt in [false, true] {
                let mut label = name.to_string();
                if add_generation_prompt {
                    label.push_str(", generation prompt");
                }
                if !kw_name.is_empty() {
                    label = format!("{label}, {kw_name}");
                }
                out.push(Probe {
                    name: label,
                    messages: messages.clone(),
                    add_generation_prompt,
                    kwargs: kwargs.clone(),
                    now: *now,
                });
            }
        }
    }
    out
}

/// The template arguments the native format gets for `probe`: the probe's, plus the clock
/// defaults filled from the probe's time as the Python layer fills them from the clock.
fn native_kwargs(format: &dyn ChatFormat, probe: &Probe) -> TemplateArgs {
    let mut kwargs = probe.kwargs.clone();
    for (name, fmt) in format.clock_defaults() {
        if !kwargs.contains_key(*name) {
            if let Ok(value) = strftime(fmt, &probe.now) {
                kwargs.insert(name.to_string(), TemplateValue::Str(value));
            }
        }
    }
    kwargs
}

fn render_native(format: &dyn ChatFormat, probe: &Probe) -> Result<String, String> {
    let kwargs = native_kwargs(format, probe);
    let request = RenderRequest {
        messages: &probe.messages,
        add_generation_prompt: probe.add_generation_prompt,
        kwargs: &kwargs,
        system: SystemPolicy::Template,
    };
    let mut pieces = Pieces::new();
    format
        .render(&request, &mut pieces)
        .map(|()| pieces.render())
        .map_err(|e| e.to_string())
}

fn render_template(template: &JinjaFormat, probe: &Probe) -> Result<String, String> {
    template
        .render(
            &probe.messages,
            &JinjaRequest {
                add_generation_prompt: probe.add_generation_prompt,
                kwargs: &probe.kwargs,
                now: Some(probe.now),
            },
        )
        .map_err(|e| e.to_string())
}

/// Where two strings first differ, with a little context on each side.
pub fn describe_difference(native: &str, template: &str) -> String {
    let common = native
        .char_indices()
        .zip(template.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or_else(|| native.len().min(template.len()));
    let window = |s: &str| -> String {
        let mut start = common.saturating_sub(30);
        while !s.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (common + 30).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        format!("{:?}", &s[start..end])
    };
    format!(
        "at byte {common}: native {} vs template {}",
        window(native),
        window(template)
    )
}

/// Run every probe through `format` and `template`.
pub fn check(format: &dyn ChatFormat, template: &JinjaFormat) -> ProbeReport {
    let mut report = ProbeReport::default();
    for probe in probes(format) {
        report.compared += 1;
        let native = render_native(format, &probe);
        let expected = render_template(template, &probe);
        let detail = match (&native, &expected) {
            (Ok(a), Ok(b)) if a == b => continue,
            (Err(_), Err(_)) => continue,
            (Err(refusal), Ok(_)) => {
                report.refused.push((probe.name.clone(), refusal.clone()));
                continue;
            }
            (Ok(a), Ok(b)) => describe_difference(a, b),
            (Ok(_), Err(e)) => format!("the template raises ({e}) where the native format renders"),
        };
        report.difference = Some(Difference {
            probe: probe.name,
            detail,
        });
        return report;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_located() {
        let d = describe_difference("abc\n\nxyz", "abc\nxyz");
        assert!(d.starts_with("at byte 4:"), "{d}");
    }
}
