//! The grammar of a template on the Jinja path, derived by rendering probe turns through it.
//!
//! Each probe is a conversation and an assistant message with known parts: content, reasoning
//! (under `reasoning_content`, `thinking` or `reasoning`, whichever the template writes), one
//! tool call, two tool calls. The turn is what the full render adds to the prompt rendered with
//! the generation prompt: exactly the ids a model writes for that message. A probe is used when
//! the template writes all of its parts and closes the turn with a stop token (DeepSeek V3's
//! template leaves a turn with one call open, so there only the two-call probe proves the
//! calls).
//!
//! A candidate grammar serves if:
//! * it places calls exactly when the template writes them (the call probe's turn holds one of
//!   its call markers), and reasoning exactly when the template writes it, under the same key;
//! * it reads every usable probe turn back into the probe message: same content (or null),
//!   reasoning, call names and arguments, a stop token, nothing left over.
//!
//! The first candidate that serves is used, unless another one that serves reads calls or
//! reasoning differently: then the derivation is ambiguous and refuses. (Candidates that differ
//! only in trimming the content are ordered: the one that trims less comes first.) A template
//! that raises on every shape of the call probe is refused too: whether it writes calls is not
//! known.

use crate::completion::{self, CallSyntax, Grammar, ParsedCompletion, Trim};
use crate::error::{Error, Refusal};
use crate::input::EncodeOptions;
use crate::message::{Message, TemplateValue, REASONING_KEYS};
use crate::render::jinja::PROBE_NOW;
use crate::render::native::TemplateArgs;
use crate::text::TokenText;
use std::sync::Arc;

use super::super::Encoder;

const QUESTION: &str = "What is the capital of France?";
const ANSWER: &str = "The capital of France is Paris.";
const THOUGHT: &str = "The user asks for a capital city; France's is Paris.";
const WEATHER: &str = "What is the weather in Paris and in London?";

/// What a probe turn must read back into.
#[derive(Debug, Clone)]
struct Expected {
    content: Option<String>,
    reasoning: Option<(&'static str, String)>,
    calls: Vec<(String, serde_json::Value)>,
}

/// A probe turn: its name, its ids, the message it must read back into.
#[derive(Debug, Clone)]
struct ProbeTurn {
    name: String,
    ids: Vec<u32>,
    expected: Expected,
}

/// What the template writes of an assistant turn, learned from the probes.
struct Probed {
    turns: Vec<ProbeTurn>,
    /// The reasoning key the template writes (`None`: it writes no reasoning).
    reasoning_key: Option<&'static str>,
    /// The ids of the first call probe whose calls the template writes (`None`: it writes no
    /// calls).
    call_turn: Option<Vec<u32>>,
    /// The template raises on every shape of the call probe: whether it writes calls is
    /// unknown.
    calls_raise: bool,
    /// Probes not used, and why.
    skipped: Vec<String>,
}

fn message(value: serde_json::Value) -> Message {
    crate::render::probes::from_json(value)
}

fn call(city: &str, text_arguments: bool) -> serde_json::Value {
    let arguments = serde_json::json!({ "city": city });
    let arguments = if text_arguments {
        serde_json::Value::String(arguments.to_string())
    } else {
        arguments
    };
    // Nine letters and digits: the id shape the strictest templates (Mistral's) accept.
    let id = if city == "Paris" {
        "a1B2c3D4e"
    } else {
        "f5G6h7I8j"
    };
    serde_json::json!({"id": id, "type": "function",
        "function": {"name": "get_weather", "arguments": arguments}})
}

impl Encoder {
    /// The ids the template adds for `assistant` after `conversation` (rendered with the
    /// generation prompt), or `None` when it raises or the full render does not extend the
    /// prompt. `dropped` is set when the template renders the turn but leaves out part of it
    /// (chatids refuses that: [`Refusal::Dropped`]).
    fn probe_turn(
        &self,
        conversation: &[serde_json::Value],
        assistant: &serde_json::Value,
        kwargs: &TemplateArgs,
        dropped: &mut bool,
    ) -> Option<Vec<u32>> {
        let mut messages: Vec<Message> = conversation.iter().cloned().map(message).collect();
        let options = |gen| EncodeOptions {
            add_generation_prompt: gen,
            kwargs: kwargs.clone(),
            now: Some(PROBE_NOW),
            ..EncodeOptions::default()
        };
        let prompt = self.encode(&messages, &options(true)).ok()?;
        messages.push(message(assistant.clone()));
        let full = match self.encode(&messages, &options(false)) {
            Ok(full) => full,
            Err(Error::Template(e)) if e.refusal == Refusal::Dropped => {
                *dropped = true;
                return None;
            }
            Err(_) => return None,
        };
        full.strip_prefix(prompt.as_slice()).map(<[u32]>::to_vec)
    }

    fn probe(&self, table: &TokenText) -> Probed {
        let text = |ids: &[u32]| table.decode(ids).unwrap_or_default();
        let user = serde_json::json!({"role": "user", "content": QUESTION});
        let none = TemplateArgs::new();
        let mut probed = Probed {
            turns: Vec::new(),
            reasoning_key: None,
            call_turn: None,
            calls_raise: false,
            skipped: Vec::new(),
        };
        let answer = serde_json::json!({"role": "assistant", "content": ANSWER});
        match self.probe_turn(std::slice::from_ref(&user), &answer, &none, &mut false) {
            Some(ids) => probed.turns.push(ProbeTurn {
                name: "content".into(),
                ids,
                expected: Expected {
                    content: Some(ANSWER.into()),
                    reasoning: None,
                    calls: vec![],
                },
            }),
            None => probed.skipped.push(
                "content: the template does not render it as an extension of the prompt".into(),
            ),
        }
        for key in REASONING_KEYS {
            let mut assistant = answer.clone();
            assistant[key] = THOUGHT.into();
            let Some(ids) =
                self.probe_turn(std::slice::from_ref(&user), &assistant, &none, &mut false)
            else {
                continue;
            };
            if text(&ids).contains(THOUGHT) {
                probed.reasoning_key = Some(key);
                probed.turns.push(ProbeTurn {
                    name: format!("reasoning as {key}"),
                    ids,
                    expected: Expected {
                        content: Some(ANSWER.into()),
                        reasoning: Some((key, THOUGHT.into())),
                        calls: vec![],
                    },
                });
                break;
            }
        }
        let tool = serde_json::json!({"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}}});
        let mut tools = TemplateArgs::new();
        tools.insert(
            "tools".into(),
            TemplateValue::Json(std::sync::Arc::new(serde_json::json!([tool]))),
        );
        let weather = serde_json::json!({"role": "user", "content": WEATHER});
        for cities in [&["Paris"][..], &["Paris", "London"]] {
            // The shapes templates take: content empty or null, arguments a dict or a string.
            let mut found = false;
            let mut rendered = false;
            for (content, text_arguments) in [
                (Some(""), false),
                (None, false),
                (Some(""), true),
                (None, true),
            ] {
                let calls: Vec<_> = cities.iter().map(|c| call(c, text_arguments)).collect();
                let assistant = serde_json::json!({"role": "assistant", "content": content,
                    "tool_calls": calls});
                let mut dropped = false;
                let turn = self.probe_turn(
                    std::slice::from_ref(&weather),
                    &assistant,
                    &tools,
                    &mut dropped,
                );
                rendered |= dropped;
                let Some(ids) = turn else {
                    continue;
                };
                rendered = true;
                let written = text(&ids);
                if !written.contains("get_weather") {
                    continue;
                }
                found = true;
                let name = format!("{} call(s)", cities.len());
                if !cities.iter().all(|c| written.contains(c)) {
                    probed
                        .skipped
                        .push(format!("{name}: the template drops a call"));
                    break;
                }
                if !ids.iter().any(|id| self.stop_token_ids.contains(id)) {
                    probed.skipped.push(format!(
                        "{name}: the template leaves the turn open (no stop token)"
                    ));
                    break;
                }
                probed.call_turn.get_or_insert_with(|| ids.clone());
                probed.turns.push(ProbeTurn {
                    name,
                    ids,
                    expected: Expected {
                        content: content.map(str::to_string),
                        reasoning: None,
                        calls: calls
                            .iter()
                            .map(|c| {
                                let f = &c["function"];
                                (
                                    f["name"].as_str().unwrap_or_default().to_string(),
                                    f["arguments"].clone(),
                                )
                            })
                            .collect(),
                    },
                });
                break;
            }
            if !found {
                probed.calls_raise |= !rendered && cities.len() == 1;
                break;
            }
        }
        probed
    }
}

/// Why `parsed` is not what `turn` expects (`None`: it is).
fn mismatch(grammar: &Grammar, parsed: &ParsedCompletion, expected: &Expected) -> Option<String> {
    if parsed.stop == completion::Stop::Length {
        return Some("no stop token ends the turn".into());
    }
    if !parsed.remainder.is_empty() {
        return Some(format!("{:?} is left unread", parsed.remainder));
    }
    let content = (!parsed.content_null).then(|| parsed.content.clone());
    if content != expected.content {
        return Some(format!(
            "content {content:?} instead of {:?}",
            expected.content
        ));
    }
    // chatids reads the reasoning under any of the keys: the text is what must match (the
    // parse names it by the key the format's template reads).
    let reasoning = parsed.reasoning.as_ref().filter(|r| !r.is_empty());
    if reasoning != expected.reasoning.as_ref().map(|(_, r)| r) {
        return Some(format!(
            "reasoning {reasoning:?} instead of {:?}",
            expected.reasoning
        ));
    }
    let calls: Vec<(String, serde_json::Value)> = parsed
        .tool_calls
        .iter()
        .map(|c| {
            let value = match (&c.arguments, grammar.arguments_as_text) {
                (Some(v), false) => v.clone(),
                _ => serde_json::Value::String(c.arguments_text.clone()),
            };
            (c.name.clone(), value)
        })
        .collect();
    if calls != expected.calls {
        return Some(format!("calls {calls:?} instead of {:?}", expected.calls));
    }
    None
}

/// Whether two grammars read calls and reasoning the same way. (They may trim the content
/// differently: the first, which trims less, keeps more of the model's text.)
fn same_reading(a: &Grammar, b: &Grammar) -> bool {
    a.calls == b.calls && a.reasoning == b.reasoning && a.reasoning_key == b.reasoning_key
}

/// Derive the grammar of `encoder`'s template (on the Jinja path).
pub(super) fn derive(
    encoder: &Encoder,
    token: &dyn Fn(&str) -> Option<u32>,
    table: &Arc<TokenText>,
) -> std::result::Result<Grammar, String> {
    let route = encoder.template().ok_or("no template")?;
    let probed = encoder.probe(table);
    if probed.turns.is_empty() {
        return Err(
            "reading completions back needs the template's grammar, and the template does not \
             render a probe assistant turn as an extension of its generation prompt"
                .into(),
        );
    }
    let candidates = [
        completion::harmony(token),
        completion::deepseek_v3(token),
        completion::hermes(token, true, Trim::LeadingNewlines),
        completion::hermes(token, false, Trim::None),
        completion::mistral_list(token, Trim::None),
        completion::mistral_list(token, Trim::Whitespace),
        completion::llama3_json(token),
        Some(Grammar::plain("plain", Trim::None)),
        // Templates that write the content with spaces around it (Llama 2, Mistral).
        Some(Grammar::plain("plain, trimmed", Trim::Whitespace)),
    ];
    let mut served: Vec<Grammar> = Vec::new();
    let mut why = Vec::new();
    for candidate in candidates.into_iter().flatten() {
        let grammar = encoder.complete_grammar(route, candidate);
        let reads_reasoning =
            grammar.reasoning.is_some() || matches!(grammar.calls, CallSyntax::Harmony(_));
        let reason = match (&probed.call_turn, &probed.reasoning_key) {
            // Llama 3's JSON call has no marker: reading the call probes back is the proof.
            (Some(ids), _)
                if !matches!(grammar.calls, CallSyntax::Llama3 { .. })
                    && !grammar.calls.call_openers().iter().any(|m| ids.contains(m)) =>
            {
                Some("its call markers are not where the template writes calls".to_string())
            }
            (None, _) if grammar.calls != CallSyntax::None => {
                Some("the template writes no tool calls".to_string())
            }
            (None, _) if probed.calls_raise => Some(
                "the template raises on every probe tool call, so whether it writes calls is \
                 unknown"
                    .to_string(),
            ),
            (_, Some(key)) if !reads_reasoning => Some(format!(
                "the template writes reasoning (given as `{key}`), which it does not read"
            )),
            (_, None) if reads_reasoning && grammar.reasoning.is_some() => {
                Some("the template writes no reasoning".to_string())
            }
            _ => {
                let grammar = Arc::new(grammar.clone());
                probed.turns.iter().find_map(|turn| {
                    let parsed =
                        completion::parse(Arc::clone(&grammar), Arc::clone(table), &turn.ids, None)
                            .map_err(|e| format!("id {} unknown", e.id));
                    match parsed {
                        Ok(p) => mismatch(&grammar, &p, &turn.expected)
                            .map(|m| format!("the {} probe reads back with {m}", turn.name)),
                        Err(e) => Some(e),
                    }
                })
            }
        };
        match reason {
            Some(r) => why.push(format!("{}: {r}", grammar.format)),
            None => served.push(grammar),
        }
    }
    let Some(first) = served.first() else {
        return Err(format!(
            "reading completions back needs the template's grammar, and none could be derived from \
             its rendering of probe turns ({}{}); no native format serves this template ({})",
            why.join("; "),
            probed
                .skipped
                .iter()
                .map(|s| format!("; probe not used: {s}"))
                .collect::<String>(),
            route.template_source
        ));
    };
    if let Some(other) = served.iter().find(|g| !same_reading(first, g)) {
        return Err(format!(
            "reading completions back needs the template's grammar, and its probe turns read back \
             the same under two grammars that differ ({} and {}): chatids does not guess",
            first.format, other.format
        ));
    }
    let mut grammar = first.clone();
    grammar.format = format!("{} (derived from the template)", grammar.format);
    Ok(grammar)
}
