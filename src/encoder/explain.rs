//! [`Encoder::explain`]: why this format was chosen, what was adjusted to match the reference,
//! and which text encoder runs, in a few lines a person reads.

use super::*;

impl Encoder {
    /// Why this format was chosen, and what was adjusted to match the reference.
    pub fn explain(&self) -> String {
        match &self.backend {
            Backend::Template(t) => t.explain(self.format_name()),
            Backend::MistralCommon(mc) => mc.explain(),
        }
    }
}

impl TemplateRoute {
    /// [`Encoder::explain`] on the transformers route; `name` is the format's name.
    fn explain(&self, name: &str) -> String {
        let mut lines = vec![format!(
            "chat template: {} (sha256 {})",
            self.template_source, self.template_fingerprint
        )];
        let refused = |report: &ProbeReport, lines: &mut Vec<String>| {
            for (probe, why) in &report.refused {
                lines.push(format!(
                    "  refuses probe \"{probe}\" (the template drops a message silently): {why}"
                ));
            }
            let mut kinds: Vec<&str> = Vec::new();
            for (_, why) in &report.delegated {
                if !kinds.contains(&why.as_str()) {
                    kinds.push(why);
                }
            }
            if !kinds.is_empty() {
                lines.push(format!(
                    "  hands {} probe conversations to the checkpoint's template (rendered on the jinja path): {}",
                    report.delegated.len(),
                    kinds.join("; ")
                ));
            }
        };
        match &self.format_choice {
            FormatChoice::Probed {
                report,
                official,
                rejected,
            } => {
                lines.push(format!(
                    "format {name}: renders all {} probe conversations exactly as the checkpoint's template does{}",
                    report.compared,
                    official
                        .map(|s| format!(" (the template is byte-for-byte the official one of {s})"))
                        .unwrap_or_default()
                ));
                refused(report, &mut lines);
                for (format, why) in rejected {
                    lines.push(format!("  not {format}: {why}"));
                }
            }
            FormatChoice::Jinja { rejected } => {
                lines.push(format!(
                    "format {name}: the Jinja path renders the checkpoint's template with chatids' Jinja engine; \
                     no native format reproduces it"
                ));
                for (format, why) in rejected {
                    lines.push(format!("  not {format}: {why}"));
                }
            }
            FormatChoice::Explicit { report: Some(report) } if report.matches() => {
                lines.push(format!(
                    "format {name}: chosen by the caller; it renders all {} probes as the checkpoint's template does",
                    report.compared
                ));
                refused(report, &mut lines);
            }
            FormatChoice::Explicit { report: Some(report) } => lines.push(format!(
                "format {name}: chosen by the caller; it does NOT reproduce the checkpoint's template (probe \"{}\" differs {}), \
                 so the output is not verified against it",
                report.difference.as_ref().map_or("", |d| d.probe.as_str()),
                report.difference.as_ref().map_or("", |d| d.detail.as_str()),
            )),
            FormatChoice::Explicit { report: None } => lines.push(format!(
                "format {name}: chosen by the caller; the checkpoint's template cannot be compiled, so it was not checked"
            )),
            FormatChoice::External => lines.push(format!(
                "format {name}: chatids' Jinja engine cannot compile the template ({}); the Python layer renders it with \
                 jinja2 (as transformers does) and chatids encodes the text",
                match &self.renderer {
                    Renderer::External { reason } => reason.as_str(),
                    _ => "",
                }
            )),
            FormatChoice::ExplicitJinja => lines.push(format!(
                "format {name}: the caller asked for the Jinja path (the checkpoint's template rendered by chatids' Jinja engine)"
            )),
        }
        if let Some(note) = &self.checkpoint_note {
            lines.push(format!("tokenizer: {note}"));
        }
        lines.push(self.text.describe());
        lines.join("\n")
    }
}
