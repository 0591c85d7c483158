//! `lint`: report, without raising, the silent failures a conversation would meet
//! ([`Encoder::lint`] lives here, above the encoder).
//!
//! Every finding has a stable code, the index of the message it is about (if any) and a
//! one-line explanation. Codes:
//!
//! | code | meaning |
//! |---|---|
//! | `system-unsupported` | a system message the format has no room for (its template raises) |
//! | `system-folded` | the template folds the system message into a user turn |
//! | `role-renamed` | the template writes this role under another name (`assistant` -> `model`) |
//! | `alternation` | user/assistant alternation breaks here, and the template demands it |
//! | `ends-with-assistant` | `add_generation_prompt=True` after an assistant turn: a second assistant header follows |
//! | `missing-generation-prompt` | a prompt for generation without the assistant header |
//! | `generation-prompt-ignored` | `add_generation_prompt=True`, but this template never writes one |
//! | `double-bos` | the prompt starts with BOS and tokenizing the rendered text with `add_special_tokens=True` adds another |
//! | `control-token-in-content` | content holds a control token: sanitized by default, a forged turn with `sanitize_control_tokens=False` |
//! | `content-missing` | a message without content (and without tool calls): the template renders it as it renders a missing value, usually an empty turn |
//! | `content-repr` | the template writes a list of content parts as its Python repr (`[{'type': 'text', ...}]`), not as text |
//! | `refused` | chatids would raise `ChatTemplateError` for this conversation (the explanation says why) |

use crate::encoder::{EncodeOptions, Encoder};
use crate::error::Error;
use crate::message::{Content, Message};
use crate::render::native::{SystemPolicy, SystemSlot};

/// One problem `lint` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// A stable code (see the module documentation).
    pub code: &'static str,
    /// The message it is about, if one.
    pub message: Option<usize>,
    /// What happens, in one line.
    pub explanation: String,
}

/// How the caller will use the prompt, for the checks that depend on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LintContext {
    /// The prompt is for generation (serving): it should end with the assistant header.
    pub for_generation: bool,
    /// The caller will tokenize the rendered text with `add_special_tokens=True`.
    pub add_special_tokens: bool,
}

fn finding(code: &'static str, message: Option<usize>, explanation: impl Into<String>) -> Finding {
    Finding {
        code,
        message,
        explanation: explanation.into(),
    }
}

impl Encoder {
    /// Report the silent failures `messages` would meet (see the [module documentation](self)).
    pub fn lint(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        context: LintContext,
    ) -> Vec<Finding> {
        lint(self, messages, options, context)
    }
}

/// Lint `messages` for `encoder` with `options`.
fn lint(
    encoder: &Encoder,
    messages: &[Message],
    options: &EncodeOptions,
    context: LintContext,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let Some(format) = encoder.format() else {
        // The Jinja path and the mistral-common route: only what applies to any route.
        content_findings(encoder, messages, &mut out);
        rendering_findings(encoder, messages, options, &mut out);
        refusal(encoder, messages, options, &mut out);
        return out;
    };
    let name = format.name();
    let has_system = messages.first().is_some_and(|m| m.role == "system");
    match (format.system_slot(), has_system, options.system) {
        (SystemSlot::Unsupported, true, SystemPolicy::Fold) => out.push(finding(
            "system-folded",
            Some(0),
            format!("format {name} has no system turn; system=\"fold\" prepends it to the first user message"),
        )),
        (SystemSlot::Unsupported, true, _) => out.push(finding(
            "system-unsupported",
            Some(0),
            format!("format {name} has no system turn and its template raises; pass system=\"fold\" to fold it into the first user message"),
        )),
        (SystemSlot::FoldedByTemplate, true, _) => out.push(finding(
            "system-folded",
            Some(0),
            format!("format {name} has no system turn: its template folds the system message into a user turn"),
        )),
        _ => {}
    }
    for (from, to) in format.role_renames() {
        if let Some(i) = messages.iter().position(|m| m.role == *from) {
            out.push(finding(
                "role-renamed",
                Some(i),
                format!("format {name} writes role {from:?} as {to:?}"),
            ));
        }
    }
    if format.alternates() {
        let first = usize::from(has_system);
        let mut expected_user = true;
        let mut previous_role: Option<&str> = None;
        for (i, m) in messages.iter().enumerate().skip(first) {
            let merged = options.merge_consecutive && previous_role == Some(m.role.as_str());
            if !merged {
                if (m.role == "user") != expected_user {
                    out.push(finding(
                        "alternation",
                        Some(i),
                        format!(
                            "format {name} needs user/assistant alternation; a {:?} message here breaks it{}",
                            m.role,
                            if previous_role == Some(m.role.as_str()) { " (merge_consecutive=True would join it with the previous one)" } else { "" }
                        ),
                    ));
                }
                expected_user = m.role != "user";
            }
            previous_role = Some(m.role.as_str());
        }
    }
    let last_is_assistant = messages.last().is_some_and(|m| m.role == "assistant");
    if options.add_generation_prompt && format.ignores_generation_prompt() {
        out.push(finding(
            "generation-prompt-ignored",
            None,
            format!("the {name} template ignores add_generation_prompt; a prompt ending with a user turn is already ready to generate"),
        ));
    } else if options.add_generation_prompt && last_is_assistant {
        out.push(finding(
            "ends-with-assistant",
            Some(messages.len() - 1),
            "add_generation_prompt=True after an assistant turn starts a second assistant turn; to continue this one, prefill instead",
        ));
    } else if context.for_generation
        && !options.add_generation_prompt
        && !format.ignores_generation_prompt()
        && !last_is_assistant
    {
        out.push(finding(
            "missing-generation-prompt",
            None,
            "a prompt for generation without add_generation_prompt=True lacks the assistant header; the model may continue the user turn",
        ));
    }
    if context.add_special_tokens {
        if let Some(bos) = encoder.post_processor_bos() {
            if let Ok(ids) = encoder.encode(messages, options) {
                if ids.first() == Some(&bos) {
                    out.push(finding(
                        "double-bos",
                        None,
                        format!("the prompt already starts with BOS (id {bos}); tokenizing its text with add_special_tokens=True adds a second one"),
                    ));
                }
            }
        }
    }
    content_findings(encoder, messages, &mut out);
    rendering_findings(encoder, messages, options, &mut out);
    refusal(encoder, messages, options, &mut out);
    out
}

/// What the rendered prompt shows about messages the template renders oddly.
fn rendering_findings(
    encoder: &Encoder,
    messages: &[Message],
    options: &EncodeOptions,
    out: &mut Vec<Finding>,
) {
    for (i, m) in messages.iter().enumerate() {
        if m.content.is_none() && m.tool_calls.is_none() {
            out.push(finding(
                "content-missing",
                Some(i),
                "the message has no content; the template renders it as it renders a missing value (usually an empty turn)",
            ));
        }
    }
    if !messages
        .iter()
        .any(|m| matches!(m.content, Some(Content::Parts(_))))
    {
        return;
    }
    let Ok(rendered) = encoder.render(messages, options) else {
        return;
    };
    for (i, m) in messages.iter().enumerate() {
        let Some(Content::Parts(parts)) = &m.content else {
            continue;
        };
        let kind = parts.first().map(|p| match p {
            crate::message::ContentPart::Text(_) => "text",
            crate::message::ContentPart::Other { kind } => kind.as_str(),
        });
        if let Some(kind) = kind {
            if rendered.contains(&format!("[{{'type': '{kind}'")) {
                out.push(finding(
                    "content-repr",
                    Some(i),
                    "the template writes this message's list of content parts as its Python repr, not as text; pass the content as a string",
                ));
            }
        }
    }
}

fn content_findings(encoder: &Encoder, messages: &[Message], out: &mut Vec<Finding>) {
    for (i, m) in messages.iter().enumerate() {
        let found: Vec<&str> = m
            .texts()
            .chain(std::iter::once(m.role.as_str()))
            .flat_map(|t| {
                encoder
                    .control_tokens()
                    .find_iter(t)
                    .map(move |hit| &t[hit.start..hit.end])
            })
            .collect();
        if let Some(token) = found.first() {
            out.push(finding(
                "control-token-in-content",
                Some(i),
                format!(
                    "the message contains the control token {token:?}{}; encoded as text by default, a real control token with sanitize_control_tokens=False",
                    if found.len() > 1 { format!(" (and {} more)", found.len() - 1) } else { String::new() }
                ),
            ));
        }
    }
}

fn refusal(
    encoder: &Encoder,
    messages: &[Message],
    options: &EncodeOptions,
    out: &mut Vec<Finding>,
) {
    if let Err(Error::Template(e)) = encoder.render(messages, options) {
        let already = out
            .iter()
            .any(|f| f.code == "system-unsupported" || f.code == "alternation");
        if !already {
            out.push(finding("refused", e.message, e.rule));
        }
    }
}
