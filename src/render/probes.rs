//! Choosing a native format by behaviour: a native format serves a checkpoint only if it
//! renders a fixed, varied set of probe conversations exactly as the checkpoint's own
//! template does (rendered by the Jinja path, [`crate::render::jinja`]).
//!
//! The probes cover what templates branch on: a system message or none (single, multi-line,
//! system only), one to four turns, consecutive turns of one role, a conversation that starts
//! with the assistant, a role the template may not know, conversations ending with the user or
//! the assistant, each with and without the generation prompt; content as a string, as a list
//! of text parts, with image and video parts; a message without content; reasoning as a field
//! and inside the content; tool definitions, calls and results; whitespace, Unicode and
//! template-like text; no template arguments at all (so a template's own defaults, like a date
//! or a default system prompt, are compared too), each argument the format models that the
//! template reads, and the template's clock at two times.
//!
//! Outcomes per probe:
//! * the same string, or both raise: the same;
//! * the native format does not model the input ([`Refusal::Unmodeled`], and every tool
//!   conversation): the encoder hands it to the template, so it is *delegated*;
//! * the native format refuses a message as dropped ([`Refusal::Dropped`]) and the template's
//!   prompt indeed lacks that message's text: a *refusal*, the one kind chatids adds;
//! * anything else disqualifies the format: different strings, the template raises where the
//!   native format renders, or the native format refuses what the template renders.
//!
//! Among the formats that qualify, one without refusals wins over one with them, then the
//! one that delegates less.

use crate::error::{Refusal, TemplateError};
use crate::message::{Content, ContentPart, Message, TemplateValue, REASONING_KEYS};
use crate::pieces::Pieces;
use crate::render::jinja::{JinjaFormat, JinjaRequest, PROBE_NOW};
use crate::render::native::{ArgKind, ChatFormat, RenderRequest, SystemPolicy, TemplateArgs};
use crate::template::DateTime;

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
    /// What the template's clock (`strftime_now()`) returns.
    pub now: DateTime,
}

/// Why a native format does not reproduce the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DifferenceKind {
    /// Both render, differently.
    Text,
    /// The template raises where the native format renders.
    TemplateRaises,
    /// The native format refuses a conversation the template renders (and does not drop a
    /// message of).
    Refuses,
}

/// Where a native format and the template part ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The probe's name.
    pub probe: String,
    /// What kind of difference.
    pub kind: DifferenceKind,
    /// What happened, e.g. `at byte 57: native "...\n\n" vs template "...\n"`.
    pub detail: String,
}

/// The result of probing one native format against a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeReport {
    /// Probes run.
    pub compared: usize,
    /// Probes the native format refuses because the template drops a message (probe, reason).
    pub refused: Vec<(String, String)>,
    /// Probes the native format hands to the template (probe, what it does not model).
    pub delegated: Vec<(String, String)>,
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

/// A message built from a JSON dict the way the bindings build it for the Jinja path: the
/// whole dict kept (`raw`), the fields chatids reads parsed from it.
pub(crate) fn from_json(value: serde_json::Value) -> Message {
    let serde_json::Value::Object(map) = value else {
        panic!("a probe message is a dict");
    };
    let role = map["role"].as_str().unwrap_or_default().to_string();
    let content = match map.get("content") {
        Some(serde_json::Value::String(s)) => Some(Content::Text(s.clone())),
        Some(serde_json::Value::Array(parts)) => Some(Content::Parts(
            parts
                .iter()
                .map(|p| match (p["type"].as_str(), p.get("text")) {
                    (Some("text"), Some(serde_json::Value::String(t))) => {
                        ContentPart::Text(t.clone())
                    }
                    (kind, _) => ContentPart::Other {
                        kind: kind.unwrap_or_default().to_string(),
                    },
                })
                .collect(),
        )),
        _ => None,
    };
    let reasoning_content = REASONING_KEYS
        .iter()
        .find_map(|k| map.get(*k).and_then(|v| v.as_str()).map(str::to_string));
    let tool_calls = map.get("tool_calls").map(|t| t.as_array().map(Vec::len));
    Message {
        role,
        content,
        reasoning_content,
        tool_calls,
        raw: Some(std::sync::Arc::new(map)),
        train: None,
    }
}

fn parts(role: &str, parts: serde_json::Value) -> Message {
    from_json(serde_json::json!({"role": role, "content": parts}))
}

/// The probe conversations (before the generation-prompt flag is applied), with template
/// arguments of their own.
fn conversations() -> Vec<(&'static str, Vec<Message>, TemplateArgs)> {
    let plain = |name, messages| (name, messages, TemplateArgs::new());
    let tool = serde_json::json!({"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
    let call = serde_json::json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]});
    let result = serde_json::json!({"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C, sunny"});
    let mut with_tools = TemplateArgs::new();
    with_tools.insert(
        "tools".into(),
        TemplateValue::Json(std::sync::Arc::new(serde_json::json!([tool]))),
    );
    vec![
        plain("one user turn", vec![text("user", "Hello!")]),
        plain(
            "system and user",
            vec![
                text("system", "You are terse."),
                text("user", "Name a prime."),
            ],
        ),
        plain(
            "two user turns",
            vec![
                text("user", "Hi"),
                text("assistant", "Hello! How can I help?"),
                text("user", "Tell me a joke."),
            ],
        ),
        plain(
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
        plain(
            "ends with the assistant",
            vec![text("user", "2+2?"), text("assistant", "4")],
        ),
        plain(
            "system, ends with the assistant",
            vec![
                text("system", "Be exact."),
                text("user", "2+2?"),
                text("assistant", "4"),
            ],
        ),
        plain(
            "consecutive user turns",
            vec![
                text("user", "First question."),
                text("user", "Second question."),
            ],
        ),
        plain(
            "starts with the assistant",
            vec![
                text("assistant", "How can I help?"),
                text("user", "Say hi."),
            ],
        ),
        plain(
            "an unusual role",
            vec![
                text("user", "Hi"),
                text("observer", "Noted by the observer."),
                text("user", "Go on."),
            ],
        ),
        plain(
            "whitespace",
            vec![
                text("user", "  padded  \n"),
                text("assistant", "\n\nindented\n    code\n\t\n"),
                text("user", "\ttab and  two spaces "),
            ],
        ),
        plain(
            "multi-line system",
            vec![
                text("system", "Line one.\n\nLine two.  "),
                text("user", "x"),
            ],
        ),
        plain("unicode", vec![text("user", "Grüße, 你好 🙂 — ok\u{200b}")]),
        plain("empty user content", vec![text("user", "")]),
        plain(
            "template-like content",
            vec![text(
                "user",
                "{{ not jinja }} {% raw %} <b>html</b> [INST] <<SYS>>",
            )],
        ),
        plain(
            "reasoning",
            vec![
                text("user", "q1"),
                with_reasoning("a1", "thinking one"),
                text("user", "q2"),
                with_reasoning("a2", "thinking two"),
            ],
        ),
        plain(
            "reasoning in the content",
            vec![
                text("user", "q1"),
                text("assistant", "<think>\nfirst thought\n</think>\n\na1"),
                text("user", "q2"),
                text("assistant", "<think>\nsecond thought\n</think>\n\na2"),
            ],
        ),
        plain("system only", vec![text("system", "Only a system prompt.")]),
        plain(
            "content as text parts",
            vec![
                parts(
                    "system",
                    serde_json::json!([{"type": "text", "text": "You are terse."}]),
                ),
                parts(
                    "user",
                    serde_json::json!([{"type": "text", "text": "Hello!"}]),
                ),
                parts(
                    "assistant",
                    serde_json::json!([{"type": "text", "text": "Hi there."}]),
                ),
                parts(
                    "user",
                    serde_json::json!([{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]),
                ),
            ],
        ),
        plain(
            "an image part",
            vec![parts(
                "user",
                serde_json::json!([{"type": "image"}, {"type": "text", "text": "What is in this image?"}]),
            )],
        ),
        plain(
            "a video part",
            vec![parts(
                "user",
                serde_json::json!([{"type": "video"}, {"type": "text", "text": "What happens here?"}]),
            )],
        ),
        plain(
            "a message without content",
            vec![
                text("user", "Hi"),
                from_json(serde_json::json!({"role": "assistant", "reasoning_content": "hmm"})),
            ],
        ),
        (
            "tools, a call and its result",
            vec![
                text("user", "Weather in Paris?"),
                from_json(call.clone()),
                from_json(result.clone()),
                text("assistant", "It is 18 C and sunny."),
            ],
            with_tools.clone(),
        ),
        (
            "tools offered",
            vec![text("user", "Weather in Paris?")],
            with_tools,
        ),
        plain(
            "a call and its result without tools",
            vec![
                text("user", "Weather in Paris?"),
                from_json(call),
                from_json(result),
            ],
        ),
    ]
}

/// Another time, for the probes of the template's clock.
const OTHER_NOW: DateTime = DateTime {
    year: 2030,
    month: 1,
    day: 1,
    hour: 0,
    minute: 0,
    second: 0,
};

/// Extra template arguments worth probing for `format` (beyond none at all), with the time
/// the template sees: each argument the format models and the template reads, and another
/// time where the format fills values from the clock.
fn feature_kwargs(
    format: &dyn ChatFormat,
    template: &JinjaFormat,
) -> Vec<(String, TemplateArgs, DateTime)> {
    let mut out = Vec::new();
    if !format.clock_defaults().is_empty() {
        out.push(("another clock".to_string(), TemplateArgs::new(), OTHER_NOW));
    }
    for &(name, kind) in format.template_args() {
        if !template.template().variables().contains(name) {
            continue;
        }
        let values = match kind {
            ArgKind::Str => vec![
                TemplateValue::Str("01 Jan 2030".into()),
                TemplateValue::Str(String::new()),
            ],
            ArgKind::Bool => vec![TemplateValue::Bool(false), TemplateValue::Bool(true)],
        };
        for value in values {
            let label = format!("{name}={value:?}");
            let mut args = TemplateArgs::new();
            args.insert(name.to_string(), value);
            out.push((label, args, PROBE_NOW));
        }
    }
    out
}

/// Every probe for `format` against `template`.
pub fn probes(format: &dyn ChatFormat, template: &JinjaFormat) -> Vec<Probe> {
    let mut kwarg_sets = vec![(String::new(), TemplateArgs::new(), PROBE_NOW)];
    kwarg_sets.extend(feature_kwargs(format, template));
    let mut out = Vec::new();
    for (kw_name, kwargs, now) in &kwarg_sets {
        for (name, messages, own_kwargs) in conversations() {
            for add_generation_prompt in [false, true] {
                let mut label = name.to_string();
                if add_generation_prompt {
                    label.push_str(", generation prompt");
                }
                if !kw_name.is_empty() {
                    label = format!("{label}, {kw_name}");
                }
                let mut all = own_kwargs.clone();
                all.extend(kwargs.iter().map(|(k, v)| (k.clone(), v.clone())));
                out.push(Probe {
                    name: label,
                    messages: messages.clone(),
                    add_generation_prompt,
                    kwargs: all,
                    now: *now,
                });
            }
        }
    }
    out
}

fn render_native(format: &dyn ChatFormat, probe: &Probe) -> Result<String, TemplateError> {
    let request = RenderRequest {
        messages: &probe.messages,
        add_generation_prompt: probe.add_generation_prompt,
        kwargs: &probe.kwargs,
        system: SystemPolicy::Template,
        now: Some(probe.now),
    };
    let mut pieces = Pieces::new();
    format
        .render(&request, &mut pieces)
        .map(|()| pieces.render())
}

fn render_template(template: &JinjaFormat, probe: &Probe) -> Result<String, String> {
    template
        .render(
            &probe.messages,
            &JinjaRequest {
                add_generation_prompt: probe.add_generation_prompt,
                kwargs: &probe.kwargs,
                now: Some(probe.now),
                memo: None,
            },
        )
        .map_err(|e| e.to_string())
}

/// Whether the template leaves (part of) message `index` out of its prompt without a word:
/// the prompt is the same with other texts in the message, without the message, without one
/// of its content parts, or with only its first part.
fn drops(template: &JinjaFormat, probe: &Probe, index: Option<usize>, rendered: &str) -> bool {
    let Some(i) = index.filter(|&i| i < probe.messages.len()) else {
        return false;
    };
    let mut variants = Vec::new();
    let mut other_text = probe.messages.clone();
    let m = &mut other_text[i];
    let replaced = "Other text.";
    m.raw = None;
    m.reasoning_content = m.reasoning_content.as_ref().map(|_| replaced.to_string());
    m.content = match &m.content {
        Some(Content::Text(_)) => Some(Content::Text(replaced.into())),
        Some(Content::Parts(parts)) => Some(Content::Parts(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text(_) => ContentPart::Text(replaced.into()),
                    other => other.clone(),
                })
                .collect(),
        )),
        None => None,
    };
    variants.push(other_text);
    let mut without = probe.messages.clone();
    without.remove(i);
    variants.push(without);
    if let Some(raw) = &probe.messages[i].raw {
        if let Some(serde_json::Value::Array(parts)) = raw.get("content") {
            let mut keep: Vec<Vec<serde_json::Value>> = (0..parts.len())
                .map(|j| {
                    let mut p = parts.clone();
                    p.remove(j);
                    p
                })
                .collect();
            keep.push(parts[..1.min(parts.len())].to_vec());
            for parts in keep {
                let mut map = (**raw).clone();
                map.insert("content".into(), serde_json::Value::Array(parts));
                let mut messages = probe.messages.clone();
                messages[i] = from_json(serde_json::Value::Object(map));
                variants.push(messages);
            }
        }
    }
    variants.into_iter().any(|messages| {
        let variant = Probe {
            messages,
            ..probe.clone()
        };
        render_template(template, &variant).is_ok_and(|r| r == rendered)
    })
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
    for probe in probes(format, template) {
        report.compared += 1;
        if crate::message::uses_tools(&probe.messages, &probe.kwargs) {
            // The encoder renders every tool conversation with the template.
            report
                .delegated
                .push((probe.name, "tool definitions, calls and results".into()));
            continue;
        }
        let native = render_native(format, &probe);
        let expected = render_template(template, &probe);
        let (kind, detail) = match (&native, &expected) {
            (Ok(a), Ok(b)) if a == b => continue,
            (Err(_), Err(_)) => continue,
            (Err(e), Ok(_)) if e.refusal == Refusal::Unmodeled => {
                report.delegated.push((probe.name, e.to_string()));
                continue;
            }
            (Err(e), Ok(b))
                if e.refusal == Refusal::Dropped && drops(template, &probe, e.message, b) =>
            {
                report.refused.push((probe.name, e.to_string()));
                continue;
            }
            (Err(e), Ok(_)) => (DifferenceKind::Refuses, e.to_string()),
            (Ok(a), Ok(b)) => (DifferenceKind::Text, describe_difference(a, b)),
            (Ok(_), Err(e)) => (
                DifferenceKind::TemplateRaises,
                format!("the template raises ({e}) where the native format renders"),
            ),
        };
        report.difference = Some(Difference {
            probe: probe.name,
            kind,
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
