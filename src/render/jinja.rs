//! The Jinja path: any Hugging Face chat template, rendered by chatids' own Jinja engine
//! ([`crate::template`]) and encoded exactly as transformers encodes the rendered prompt.
//!
//! * Rendering sees what `apply_chat_template` gives the template: `messages` (the caller's
//!   dicts, `None` values dropped, reasoning aliases filled), `tools`, `documents`,
//!   `add_generation_prompt`, the tokenizer's special tokens (`bos_token`, ...) and the
//!   template keyword arguments.
//! * With `sanitize_control_tokens`, every control token inside a caller string is wrapped in
//!   private-use markers before rendering (transformers' `mark_control_tokens`); after
//!   rendering, marked tokens become content pieces that the [`crate::piece_encoder`] sanitizer
//!   encodes as plain text, everything else is template text with added tokens matched. One
//!   deliberate difference: transformers deletes marker characters (U+F0000, U+F0001) that
//!   the caller's text already contains; chatids keeps them as text.
//! * Provenance: each message's content is looked up in the rendered prompt, in message order;
//!   where the template passed it through unchanged (or trimmed), its tokens carry the
//!   message index. Template text carries none on this path, except a message's *body*
//!   (what a loss mask trains, see [`message_bodies`]): from the end of the generation prompt
//!   text before its content (`<|im_start|>assistant\n`), or from the content if there is
//!   none, through the first stop token after it (`<|im_end|>`), or the content's end.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::checkpoint::Checkpoint;
use crate::control_tokens::ControlTokens;
use crate::error::TemplateError;
use crate::message::{Content, ContentPart, Message, REASONING_KEYS};
use crate::pieces::Pieces;
use crate::template::{ChatTemplate, Data, DateTime, JsonMemo, RenderError};

/// The time the probes' (and the generation-prompt detection's) `strftime_now()` returns.
pub use crate::template::PROBE_NOW;

/// The name [`crate::Encoder::format_name`] reports for the Jinja path.
pub const FORMAT_NAME: &str = "jinja";
/// The name it reports when the template is rendered outside the core (Python's jinja2).
pub const EXTERNAL_FORMAT_NAME: &str = "jinja2-fallback";

/// transformers' marker before a control token found in caller text.
const MARK_START: char = '\u{F0000}';
/// transformers' marker after it.
const MARK_END: char = '\u{F0001}';

/// What one render needs besides the messages.
#[derive(Debug, Clone, Copy)]
pub struct JinjaRequest<'a> {
    /// Append the header of a new assistant turn.
    pub add_generation_prompt: bool,
    /// Template keyword arguments (`tools` and `documents` are passed as those variables).
    pub kwargs: &'a crate::render::native::TemplateArgs,
    /// What `strftime_now()` returns; `None` makes a template that reads the clock fail.
    pub now: Option<DateTime>,
    /// Conversions kept from earlier renders of the same conversation (a session's).
    pub memo: Option<&'a RenderMemo>,
}

/// What renders of one growing conversation share (a [`crate::session::Session`] keeps one):
/// each message converted into the template's values once, the template arguments converted
/// once, and the JSON `tojson` wrote ([`JsonMemo`]). A message is recognized by its
/// caller-given dict ([`Message::raw`], shared, never modified); messages without one are
/// converted on every render.
#[derive(Debug, Default)]
pub struct RenderMemo {
    state: std::sync::Mutex<MemoState>,
    /// Searchers for the last texts [`RenderMemo::contains`] looked for, in the order it first
    /// looked for them (the oldest is dropped first).
    searchers: std::sync::Mutex<Vec<memchr::memmem::Finder<'static>>>,
}

/// How many texts' searchers a [`RenderMemo`] keeps.
const SEARCHERS: usize = 4;

/// A message's dict and its converted value.
type KeptMessage = (std::sync::Arc<Map<String, Value>>, Data);

#[derive(Debug, Default)]
struct MemoState {
    /// Whether the kept values have control tokens marked (they differ with sanitizing).
    marked: bool,
    /// By message index: the dict the value was converted from, and the value.
    messages: Vec<Option<KeptMessage>>,
    /// The template arguments the kept ones were converted from, and their values.
    kwargs: Option<(crate::render::native::TemplateArgs, Vec<(String, Data)>)>,
    json: JsonMemo,
    /// The last resumable render's state ([`ChatTemplate::render_data_resume`]), with the
    /// messages' dicts and the date-time it was rendered with.
    resume: Option<KeptLoop>,
}

/// A resumable render's state and what it was rendered from.
#[derive(Debug)]
struct KeptLoop {
    messages: Vec<std::sync::Arc<Map<String, Value>>>,
    now: Option<DateTime>,
    /// The render the state is from.
    id: RenderId,
    state: crate::template::LoopState,
}

/// Names one render a [`RenderMemo`] kept, so that a later render can say which text it took
/// bytes from. Unique in the process (copies of a session share none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderId(u64);

impl RenderId {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        RenderId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// One render of a conversation as pieces without and with the generation prompt
/// ([`JinjaFormat::pieces_split`]).
#[derive(Debug)]
pub struct SplitPieces {
    /// The two renders' pieces, or their one text.
    pub text: SplitText,
    /// `(render, bytes)`: the first `bytes` of the text without the prompt are known to be
    /// those of the text of `render` (this render resumed that one, taking them from its kept
    /// state).
    pub resumed: Option<(RenderId, usize)>,
    /// This render, where its state is kept for the next to resume.
    pub id: Option<RenderId>,
}

/// The pieces of [`SplitPieces`].
#[derive(Debug)]
pub enum SplitText {
    /// Nothing in the render is marked, so each render's pieces are its text alone, as one
    /// piece of template text with no message: the text with the prompt, the text without it
    /// being its first `at` bytes (one buffer for both, not a copy).
    Whole {
        text: std::sync::Arc<String>,
        at: usize,
    },
    /// The pieces of each (marked caller text split them).
    Pieces {
        without: Pieces<'static>,
        with: Pieces<'static>,
    },
}

impl KeptLoop {
    /// Whether `messages` begin with the kept render's messages (the same dicts), rendered
    /// at the same date-time.
    fn extended_by(&self, messages: &[Message], now: Option<DateTime>) -> bool {
        self.now == now
            && self.messages.len() <= messages.len()
            && self.messages.iter().zip(messages).all(|(kept, m)| {
                m.raw
                    .as_ref()
                    .is_some_and(|raw| std::sync::Arc::ptr_eq(kept, raw))
            })
    }
}

impl RenderMemo {
    /// How many leading `messages` this memo converted from their very dicts (the same
    /// shared maps, by pointer). Only a render prepared with the tool-call check
    /// ([`crate::input::prepare`]) converts into a memo, and a dict is never modified, so
    /// these messages' tool calls are known to pass that check.
    pub fn converted_prefix(&self, messages: &[Message]) -> usize {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        messages
            .iter()
            .zip(&state.messages)
            .take_while(|(m, kept)| match (&m.raw, kept) {
                (Some(raw), Some((dict, _))) => std::sync::Arc::ptr_eq(raw, dict),
                _ => false,
            })
            .count()
    }

    /// Whether `haystack` contains `needle`, searched with a searcher built once per needle
    /// (a session looks for the same system prompt in every render: building the searcher
    /// of a long text costs about what a search does).
    pub fn contains(&self, haystack: &[u8], needle: &[u8]) -> bool {
        let mut searchers = self.searchers.lock().unwrap_or_else(|e| e.into_inner());
        let at = match searchers.iter().position(|f| f.needle() == needle) {
            Some(at) => at,
            None => {
                if searchers.len() == SEARCHERS {
                    searchers.remove(0);
                }
                searchers.push(memchr::memmem::Finder::new(needle).into_owned());
                searchers.len() - 1
            }
        };
        searchers[at].find(haystack).is_some()
    }
}

impl Clone for RenderMemo {
    /// A fresh memo: a copy of a session starts converting anew (the values would be
    /// shareable, but a memo is a cache, not state).
    fn clone(&self) -> Self {
        RenderMemo::default()
    }
}

/// A checkpoint's chat template on the Jinja path.
pub struct JinjaFormat {
    template: ChatTemplate,
    /// The special-token variables (`bos_token`, ...), converted once.
    special_tokens: Vec<(String, Data)>,
    /// What `add_generation_prompt=True` appends to a one-user-message conversation, if the
    /// template appends anything (the header of an assistant turn).
    generation_prompt: Option<String>,
    /// The texts of the checkpoint's end-of-turn tokens (`eos_token`, `generation_config`).
    stop_texts: Vec<String>,
    /// The texts of its special tokens: one right after a message's text ends its body when
    /// no stop token does (gpt-oss closes earlier turns with `<|end|>`, not a stop token).
    special_texts: Vec<String>,
    /// `stop_texts` and the vocabulary's tokens that end a turn with a tool call
    /// ([`crate::message::TOOL_CALL_STOP_TOKENS`]: gpt-oss `<|call|>`), which end a call turn.
    call_stop_texts: Vec<String>,
}

impl JinjaFormat {
    /// Wrap a compiled template; `checkpoint` supplies the special-token variables.
    pub fn new(template: ChatTemplate, checkpoint: &Checkpoint) -> Self {
        let special_tokens = checkpoint
            .special_tokens_map
            .iter()
            .map(|(k, v)| (k.clone(), Data::string(v, &mut |_| None)))
            .collect();
        let mut stop_texts: Vec<String> = checkpoint
            .special_tokens
            .eos
            .iter()
            .cloned()
            .chain(
                checkpoint
                    .generation_eos_ids
                    .iter()
                    .filter_map(|&id| checkpoint.tokenizer.id_to_token(id)),
            )
            .filter(|t| !t.is_empty())
            .collect();
        stop_texts.sort();
        stop_texts.dedup();
        let special_texts = checkpoint
            .added_tokens
            .iter()
            .filter(|t| t.special && !t.content.is_empty())
            .map(|t| t.content.clone())
            .collect();
        let call_stop_texts = stop_texts
            .iter()
            .cloned()
            .chain(
                crate::message::TOOL_CALL_STOP_TOKENS
                    .iter()
                    .filter(|t| checkpoint.tokenizer.token_to_id(t).is_some())
                    .map(|t| t.to_string()),
            )
            .collect();
        let mut format = JinjaFormat {
            template,
            special_tokens,
            generation_prompt: None,
            stop_texts,
            special_texts,
            call_stop_texts,
        };
        format.generation_prompt = format.find_generation_prompt();
        format
    }

    /// The text `add_generation_prompt=True` appends to `[{"role": "user", ...}]`.
    fn find_generation_prompt(&self) -> Option<String> {
        let messages = [Message::new("user", "Hi")];
        let render = |add_generation_prompt| {
            let kwargs = crate::render::native::TemplateArgs::new();
            let request = JinjaRequest {
                add_generation_prompt,
                kwargs: &kwargs,
                now: Some(PROBE_NOW),
                memo: None,
            };
            self.render(&messages, &request).ok()
        };
        let (without, with) = (render(false)?, render(true)?);
        let prompt = with.strip_prefix(without.as_str())?;
        (!prompt.is_empty()).then(|| prompt.to_string())
    }

    /// The compiled template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The prompt as text: `apply_chat_template(..., tokenize=False)`.
    pub fn render(
        &self,
        messages: &[Message],
        request: &JinjaRequest<'_>,
    ) -> Result<String, TemplateError> {
        self.render_messages(messages, request, None, false)
    }

    /// Render and split into pieces: template text (added tokens matched) and content (each
    /// message's text where it was found; with `sanitizer`, also every control token that
    /// came from caller text, which the encoder then encodes as plain text).
    ///
    /// With `provenance`, the template is rendered a second time with each message's texts
    /// wrapped in span markers; where that render, markers removed, lines up with the real one
    /// (the template passed the text through, possibly trimmed), those bytes become content
    /// pieces tagged with their message. Otherwise nothing is tagged: never a wrong index.
    pub fn pieces(
        &self,
        messages: &[Message],
        request: &JinjaRequest<'_>,
        sanitizer: Option<&ControlTokens>,
        provenance: bool,
    ) -> Result<Pieces<'static>, TemplateError> {
        let rendered = self.render_messages(messages, request, sanitizer, false)?;
        let spans = if provenance {
            self.render_messages(messages, request, sanitizer, true)
                .ok()
                .and_then(|t| align_spans(&t, &rendered))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        self.pieces_of(&rendered, spans, messages, sanitizer, provenance)
    }

    /// [`JinjaFormat::pieces`] without provenance of `messages` with and without the
    /// generation prompt, from one render (`request.add_generation_prompt` is ignored).
    /// `None` where the template's renders do not split ([`ChatTemplate::render_data_split`]);
    /// then render each.
    pub fn pieces_split(
        &self,
        messages: &[Message],
        request: &JinjaRequest<'_>,
        sanitizer: Option<&ControlTokens>,
    ) -> Result<Option<SplitPieces>, TemplateError> {
        if !self.template.splits() {
            return Ok(None);
        }
        let request = JinjaRequest {
            add_generation_prompt: true,
            ..*request
        };
        let split =
            self.render_messages_with(messages, &request, sanitizer, false, |t, c, n, state| {
                let state = match state {
                    Some(state) if t.resumes() => state,
                    other => {
                        let split = t.render_data_split(c, n, other.map(|s| &mut s.json))?;
                        return Ok(split.map(|(text, at)| (text, at, None, None)));
                    }
                };
                // Keep the loop's state where every message has its dict (recognized by it).
                let raws: Option<Vec<_>> = messages.iter().map(|m| m.raw.clone()).collect();
                let kept = state.resume.take().filter(|k| k.extended_by(messages, n));
                let from = kept.as_ref().map(|k| k.id);
                let resumed =
                    t.render_data_resume(c, n, Some(&mut state.json), kept.map(|k| k.state))?;
                Ok(resumed.map(|r| {
                    let resumption = from.filter(|_| r.known > 0).map(|from| (from, r.known));
                    let id = raws.is_some().then(RenderId::new);
                    state.resume = raws.zip(id).map(|(messages, id)| KeptLoop {
                        messages,
                        now: n,
                        id,
                        state: r.state,
                    });
                    (r.text, r.at, resumption, id)
                }))
            })?;
        let Some((whole, at, resumed, id)) = split else {
            return Ok(None);
        };
        // Without provenance, a render's pieces are those of its text alone: where nothing in
        // it is marked, the text itself is the one piece (the render moved, not copied).
        if sanitizer.is_some() && find_marker(&whole).is_some() {
            return Ok(Some(SplitPieces {
                text: SplitText::Pieces {
                    without: split_rendered(&whole[..at], &[], sanitizer)?,
                    with: split_rendered(&whole, &[], sanitizer)?,
                },
                resumed: None,
                // The pieces' text is not the render's (the marks are removed).
                id: None,
            }));
        }
        Ok(Some(SplitPieces {
            text: SplitText::Whole {
                text: std::sync::Arc::new(whole),
                at,
            },
            resumed,
            id,
        }))
    }

    /// The pieces of a render (`spans`: its aligned provenance spans, `provenance`: whether
    /// they were asked for).
    fn pieces_of(
        &self,
        rendered: &str,
        spans: Vec<ContentSpan>,
        messages: &[Message],
        sanitizer: Option<&ControlTokens>,
        provenance: bool,
    ) -> Result<Pieces<'static>, TemplateError> {
        // A span holding a lone marker is caller text the template cut at a marked token
        // (`split('</think>')`): its alignment may cover template text between the halves, so
        // it is dropped (no index rather than a wrong one, and the same ids as without
        // provenance, which renders no spans).
        let spans = match sanitizer {
            Some(control) => spans
                .into_iter()
                .filter(|s| {
                    !marked_parts(&rendered[s.start..s.end], control).any(|p| p == Marked::Lone)
                })
                .collect(),
            None => spans,
        };
        // Bodies come with provenance only (without it nothing is located).
        let calls = if provenance {
            call_turns(
                rendered,
                &spans,
                messages,
                self.generation_prompt.as_deref(),
                &self.call_stop_texts,
            )
        } else {
            Vec::new()
        };
        let mut bodies = message_bodies(
            rendered,
            &spans,
            |i| messages.get(i).is_some_and(|m| m.role == "assistant"),
            self.generation_prompt.as_deref(),
            |i| match messages.get(i) {
                Some(m) if m.role == "assistant" && m.tool_calls.is_some() => {
                    &self.call_stop_texts[..]
                }
                _ => &self.stop_texts[..],
            },
            &self.special_texts,
            &calls,
        );
        bodies.extend(calls);
        bodies.sort_by_key(|b| b.start);
        split_rendered_with_bodies(rendered, &spans, &bodies, sanitizer)
    }

    /// Render with the template's variables as transformers builds them: the special
    /// tokens, the template arguments, `messages`, `tools`, `documents` and
    /// `add_generation_prompt`. With `sanitizer`, every caller string has its control tokens
    /// marked ([`mark_str`]); with `tag`, every message text is wrapped in provenance span
    /// markers (see [`JinjaFormat::pieces`]).
    fn render_messages(
        &self,
        messages: &[Message],
        request: &JinjaRequest<'_>,
        sanitizer: Option<&ControlTokens>,
        tag: bool,
    ) -> Result<String, TemplateError> {
        self.render_messages_with(
            messages,
            request,
            sanitizer,
            tag,
            |template, context, now, state| {
                template.render_data(context, now, state.map(|s| &mut s.json))
            },
        )
    }

    /// [`JinjaFormat::render_messages`] through `render` (given the template, its variables,
    /// the date-time and the kept `tojson` output).
    fn render_messages_with<T>(
        &self,
        messages: &[Message],
        request: &JinjaRequest<'_>,
        sanitizer: Option<&ControlTokens>,
        tag: bool,
        render: impl FnOnce(
            &ChatTemplate,
            Vec<(&str, Data)>,
            Option<crate::template::DateTime>,
            Option<&mut MemoState>,
        ) -> Result<T, RenderError>,
    ) -> Result<T, TemplateError> {
        let mut mark = |s: &str| match sanitizer {
            Some(control) if needs_mark(s, control) => Some(mark_str(s, control)),
            _ => None,
        };
        let mut guard = match request.memo {
            Some(memo) => {
                let mut state = memo.state.lock().unwrap_or_else(|e| e.into_inner());
                if state.marked != sanitizer.is_some() {
                    *state = MemoState {
                        marked: sanitizer.is_some(),
                        ..MemoState::default()
                    };
                }
                Some(state)
            }
            None => None,
        };
        let mut context: Vec<(&str, Data)> = self
            .special_tokens
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let mut tools = Data::none();
        let mut documents = Data::none();
        for name in request.kwargs.keys() {
            if name == "messages" || name == "add_generation_prompt" {
                return Err(TemplateError::whole(format!(
                    "{name} cannot be a template argument: chatids sets it"
                )));
            }
        }
        let kept_kwargs = guard
            .as_deref()
            .and_then(|state| state.kwargs.as_ref())
            .filter(|(args, _)| args == request.kwargs)
            .map(|(_, values)| values.clone());
        let kwargs = match kept_kwargs {
            Some(values) => values,
            None => {
                let values: Vec<(String, Data)> = request
                    .kwargs
                    .iter()
                    .map(|(name, value)| {
                        (name.clone(), Data::from_json(&value.to_json(), &mut mark))
                    })
                    .collect();
                if let Some(state) = guard.as_deref_mut() {
                    state.kwargs = Some((request.kwargs.clone(), values.clone()));
                    // A render with other arguments does not resume one with these.
                    state.resume = None;
                }
                values
            }
        };
        for (name, value) in &kwargs {
            match name.as_str() {
                "tools" => tools = value.clone(),
                "documents" => documents = value.clone(),
                _ => context.push((name.as_str(), value.clone())),
            }
        }
        let mut values = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let kept = match (&m.raw, guard.as_deref()) {
                (Some(raw), Some(state)) if !tag => state
                    .messages
                    .get(i)
                    .and_then(Option::as_ref)
                    .filter(|(from, _)| std::sync::Arc::ptr_eq(from, raw))
                    .map(|(_, data)| data.clone()),
                _ => None,
            };
            let value = match kept {
                Some(data) => data,
                None => {
                    let data = message_data(m, i, &mut mark, tag)?;
                    if let (Some(raw), Some(state), false) = (&m.raw, guard.as_deref_mut(), tag) {
                        if state.messages.len() <= i {
                            state.messages.resize(i + 1, None);
                        }
                        state.messages[i] = Some((raw.clone(), data.clone()));
                    }
                    data
                }
            };
            values.push(value);
        }
        context.push(("messages", Data::list(values)));
        context.push(("tools", tools));
        context.push(("documents", documents));
        context.push((
            "add_generation_prompt",
            Data::bool(request.add_generation_prompt),
        ));
        render(&self.template, context, request.now, guard.as_deref_mut()).map_err(|e| match e {
            RenderError::Raised(msg) => {
                TemplateError::whole(format!("the chat template raised: {msg}"))
            }
            RenderError::Failed(msg) => {
                TemplateError::whole(format!("the chat template failed to render: {msg}"))
            }
            RenderError::NeedsClock => TemplateError::whole(
                "the chat template calls strftime_now(): pass now= (the chatids core never reads the clock; \
                 the Python API passes the current time unless you give one)",
            ),
        })
    }
}

/// The message's keys as the template sees them, in order: the caller's dict (or one built
/// from the fields, in `built`), with transformers' reasoning aliases (`thinking` first,
/// `reasoning_content` last, both holding the first of `reasoning_content`, `thinking`,
/// `reasoning` that is set).
fn message_entries<'m>(
    message: &'m Message,
    index: usize,
    built: &'m mut Map<String, Value>,
) -> Result<Vec<(&'m str, &'m Value)>, TemplateError> {
    let base: &Map<String, Value> = match &message.raw {
        Some(raw) => raw,
        None => {
            if message.tool_calls.is_some() {
                return Err(TemplateError::at(
                    index,
                    "tool_calls need the message as a dict (Message::raw) on the jinja path",
                ));
            }
            built.insert("role".into(), Value::String(message.role.clone()));
            match &message.content {
                Some(Content::Text(s)) => {
                    built.insert("content".into(), Value::String(s.clone()));
                }
                Some(Content::Parts(parts)) => {
                    let parts = parts
                        .iter()
                        .map(|p| match p {
                            ContentPart::Text(t) => {
                                serde_json::json!({"type": "text", "text": t})
                            }
                            ContentPart::Other { kind } => serde_json::json!({ "type": kind }),
                        })
                        .collect();
                    built.insert("content".into(), Value::Array(parts));
                }
                None => {}
            }
            if let Some(r) = &message.reasoning_content {
                built.insert("reasoning_content".into(), Value::String(r.clone()));
            }
            built
        }
    };
    // The first of the three keys that is set, in one pass over the (few) keys: a lookup in
    // the map would hash each key with SipHash.
    let mut reasoning: Option<(usize, &Value)> = None;
    for (k, v) in base {
        let Some(rank) = REASONING_KEYS.iter().position(|r| r == k) else {
            continue;
        };
        if !v.is_null() && reasoning.is_none_or(|(r, _)| rank < r) {
            reasoning = Some((rank, v));
        }
    }
    let reasoning = reasoning.map(|(_, v)| v);
    let mut entries: Vec<(&str, &Value)> = Vec::with_capacity(base.len() + 2);
    let set =
        |entries: &mut Vec<(&'m str, &'m Value)>, key: &'m str, value: &'m Value| match entries
            .iter_mut()
            .find(|(k, _)| *k == key)
        {
            Some(entry) => entry.1 = value,
            None => entries.push((key, value)),
        };
    if let Some(r) = reasoning {
        set(&mut entries, "thinking", r);
    }
    for (k, v) in base {
        set(&mut entries, k, v);
    }
    if let Some(r) = reasoning {
        set(&mut entries, "reasoning_content", r);
    }
    Ok(entries)
}

/// The keys whose text provenance locates ([`JinjaFormat::pieces`]).
const TEXT_KEYS: [&str; 4] = [
    "content",
    REASONING_KEYS[0],
    REASONING_KEYS[1],
    REASONING_KEYS[2],
];

/// A message as the template's value, strings through `mark`; with `tag`, each message text
/// (string content, text parts, reasoning fields) wrapped in provenance span markers. An
/// empty text is not tagged: the markers would make it truthy (`{% if m.content %}`) in the
/// tagged render only, and there is nothing to locate anyway.
fn message_data(
    message: &Message,
    index: usize,
    mark: &mut dyn FnMut(&str) -> Option<String>,
    tag: bool,
) -> Result<Data, TemplateError> {
    let mut built = Map::new();
    let entries = message_entries(message, index, &mut built)?;
    let tagged = |s: &str, mark: &mut dyn FnMut(&str) -> Option<String>| {
        let s = mark(s).unwrap_or_else(|| s.to_string());
        if s.is_empty() {
            s
        } else {
            format!("{SPAN_OPEN}{index}{SPAN_INDEX_END}{s}{SPAN_CLOSE}")
        }
    };
    let values = entries
        .into_iter()
        .map(|(k, v)| {
            let data = match v {
                Value::String(s) if tag && TEXT_KEYS.contains(&k) => {
                    Data::string(s, &mut |s| Some(tagged(s, mark)))
                }
                Value::Array(parts) if tag && k == "content" => Data::list(
                    parts
                        .iter()
                        .map(|part| match part {
                            Value::Object(p) => Data::dict(
                                p.iter()
                                    .map(|(pk, pv)| match pv {
                                        Value::String(s) if pk == "text" => (
                                            pk.as_str(),
                                            Data::string(s, &mut |s| Some(tagged(s, mark))),
                                        ),
                                        other => (pk.as_str(), Data::from_json(other, mark)),
                                    })
                                    .collect(),
                            ),
                            other => Data::from_json(other, mark),
                        })
                        .collect(),
                ),
                other => Data::from_json(other, mark),
            };
            (k, data)
        })
        .collect();
    Ok(Data::dict(values))
}

/// Whether [`mark_str`] changes `text`: it holds a control token or a marker character.
fn needs_mark(text: &str, control: &ControlTokens) -> bool {
    control.find_iter(text).next().is_some() || find_marker(text).is_some()
}

/// Wrap the control tokens in `text` in markers. Marker characters already in the text are
/// wrapped too, so they stay text (transformers deletes them).
fn mark_str(text: &str, control: &ControlTokens) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut cursor = 0;
    let wrap_markers = |out: &mut String, s: &str| {
        if find_marker(s).is_none() {
            out.push_str(s);
            return;
        }
        for c in s.chars() {
            if c == MARK_START || c == MARK_END {
                out.push(MARK_START);
                out.push(c);
                out.push(MARK_END);
            } else {
                out.push(c);
            }
        }
    };
    for m in control.find_iter(text) {
        wrap_markers(&mut out, &text[cursor..m.start]);
        out.push(MARK_START);
        out.push_str(&text[m.start..m.end]);
        out.push(MARK_END);
        cursor = m.end;
    }
    wrap_markers(&mut out, &text[cursor..]);
    out
}

/// A byte range of the rendered prompt that holds one message's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentSpan {
    start: usize,
    end: usize,
    message: usize,
}

/// Start of a provenance span: `SPAN_OPEN index SPAN_INDEX_END text SPAN_CLOSE`.
const SPAN_OPEN: char = '\u{F0002}';
/// End of the span's message index.
const SPAN_INDEX_END: char = '\u{F0003}';
/// End of a provenance span.
const SPAN_CLOSE: char = '\u{F0004}';

/// Line the tagged render up with the real one: outside spans both must be equal; a span's
/// text must appear as is, or stripped of Python whitespace on one or both sides (templates
/// trim content). Returns the spans in the real render, or `None` if they do not line up.
fn align_spans(tagged: &str, real: &str) -> Option<Vec<ContentSpan>> {
    use crate::pystr::is_python_whitespace as ws;
    let mut spans = Vec::new();
    let (mut t, mut r) = (0, 0);
    while t < tagged.len() {
        let rest = &tagged[t..];
        let c = rest.chars().next()?;
        if c == SPAN_OPEN {
            let index_end = rest.find(SPAN_INDEX_END)?;
            let message: usize = rest[SPAN_OPEN.len_utf8()..index_end].parse().ok()?;
            let text_start = index_end + SPAN_INDEX_END.len_utf8();
            let close = rest[text_start..].find(SPAN_CLOSE)? + text_start;
            let inner = &rest[text_start..close];
            if inner.contains([SPAN_OPEN, SPAN_INDEX_END]) {
                return None;
            }
            let variants = [
                inner,
                inner.trim_matches(ws),
                inner.trim_start_matches(ws),
                inner.trim_end_matches(ws),
            ];
            // The template text after the span must follow the variant in the real render too
            // (Llama 2 writes content.strip() + ' ': the untrimmed "a " would match first).
            let literal = &rest[close + SPAN_CLOSE.len_utf8()..];
            let literal = &literal[..literal.find(SPAN_OPEN).unwrap_or(literal.len())];
            let text = variants
                .into_iter()
                .find(|v| real[r..].starts_with(v) && real[r + v.len()..].starts_with(literal))?;
            if !text.is_empty() {
                spans.push(ContentSpan {
                    start: r,
                    end: r + text.len(),
                    message,
                });
            }
            r += text.len();
            t += close + SPAN_CLOSE.len_utf8();
        } else if c == SPAN_CLOSE || c == SPAN_INDEX_END {
            return None;
        } else {
            if !real[r..].starts_with(c) {
                return None;
            }
            r += c.len_utf8();
            t += c.len_utf8();
        }
    }
    (r == real.len()).then_some(spans)
}

/// The body of each message whose text was found (`spans`), as byte ranges of `rendered`:
/// for an assistant message from the end of the last `generation_prompt` text between the
/// previous message's text and this one's (else from the whitespace right before its text),
/// for other roles from its text, through the end of the first stop token after its text
/// and before the next message's text, else through a special token that directly follows
/// its text, else to its text's end. Tokens that came from caller text (marked) do not count.
/// `stops(message)` are the stop texts of a message (an assistant message with tool calls
/// also ends at gpt-oss's `<|call|>`). `call_turns` are the bodies of assistant turns with only
/// tool calls ([`call_turns`]); a body before one ends before it.
fn message_bodies<'s>(
    rendered: &str,
    spans: &[ContentSpan],
    is_assistant: impl Fn(usize) -> bool,
    generation_prompt: Option<&str>,
    stops: impl Fn(usize) -> &'s [String],
    special_texts: &[String],
    call_turns: &[ContentSpan],
) -> Vec<ContentSpan> {
    let extents = extents(spans);
    let mut bodies = Vec::with_capacity(extents.len());
    for (k, &(message, first, last)) in extents.iter().enumerate() {
        let before = if k == 0 { 0 } else { extents[k - 1].2 };
        let next_call = call_turns
            .iter()
            .map(|c| c.start)
            .filter(|&s| s >= last)
            .min();
        let after = extents
            .get(k + 1)
            .map_or(rendered.len(), |e| e.1)
            .min(next_call.unwrap_or(usize::MAX));
        if bodies.iter().any(|b: &ContentSpan| b.message == message) || before > first {
            // The template wrote this message's texts apart or out of order: no body.
            continue;
        }
        let between = &rendered[before..first];
        let start = if is_assistant(message) {
            // After the generation prompt; without one (Llama 2, Mistral: the user turn ends with
            // [/INST]), the whitespace the template writes right before the text is the
            // assistant's (`[/INST] ` + content: the model generates the space).
            generation_prompt
                .and_then(|gp| between.rfind(gp).map(|i| before + i + gp.len()))
                .unwrap_or_else(|| before + between.trim_end_matches(char::is_whitespace).len())
        } else {
            first
        }
        .max(bodies.last().map_or(0, |b: &ContentSpan| b.end));
        let tail = &rendered[last..after];
        let end = stops(message)
            .iter()
            .filter_map(|stop| {
                tail.match_indices(stop.as_str())
                    .find(|(i, _)| !tail[..*i].ends_with(MARK_START))
                    .map(|(i, _)| i + stop.len())
            })
            .min()
            .or_else(|| {
                special_texts
                    .iter()
                    .filter(|t| tail.starts_with(t.as_str()))
                    .map(String::len)
                    .max()
            })
            .map_or(last, |e| last + e);
        bodies.push(ContentSpan {
            start,
            end,
            message,
        });
    }
    bodies
}

/// `(message, first byte, last byte)` of each message's texts, in rendered order.
fn extents(spans: &[ContentSpan]) -> Vec<(usize, usize, usize)> {
    let mut extents: Vec<(usize, usize, usize)> = Vec::new();
    for s in spans {
        match extents.last_mut() {
            Some(e) if e.0 == s.message => e.2 = s.end,
            _ => extents.push((s.message, s.start, s.end)),
        }
    }
    extents
}

/// The function names of a message's `tool_calls` (`None`: it has none).
fn call_names(message: &Message) -> Option<Vec<&str>> {
    let Value::Array(calls) = message.raw.as_deref()?.get("tool_calls")? else {
        return None;
    };
    let names: Vec<&str> = calls
        .iter()
        .filter_map(|c| {
            let f = c.get("function").unwrap_or(c);
            f.get("name")?.as_str()
        })
        .collect();
    (!names.is_empty() && names.len() == calls.len()).then_some(names)
}

/// The bodies of assistant turns that hold only tool calls (no text to locate): between two
/// located messages (or the start or end of the prompt), when exactly one message in between
/// is an assistant message and it has calls, and exactly one generation prompt in the
/// template's text there is followed, through the first stop token after it, by text that
/// holds every call's function name: from the end of that generation prompt through that stop
/// token. Anything else: no body (a mask that needs it refuses, as before).
fn call_turns(
    rendered: &str,
    spans: &[ContentSpan],
    messages: &[Message],
    generation_prompt: Option<&str>,
    stop_texts: &[String],
) -> Vec<ContentSpan> {
    let Some(gp) = generation_prompt.filter(|g| !g.is_empty()) else {
        return Vec::new();
    };
    if !messages
        .iter()
        .any(|m| m.role == "assistant" && m.tool_calls.is_some())
    {
        return Vec::new();
    }
    let extents = extents(spans);
    let located: std::collections::HashSet<usize> = extents.iter().map(|e| e.0).collect();
    let mut turns = Vec::new();
    // Gaps: (first message after, message of the next extent (or the end), bytes).
    let mut gaps = Vec::with_capacity(extents.len() + 1);
    let mut from = (0usize, 0usize);
    for &(message, first, last) in &extents {
        gaps.push((from.0, message, from.1, first));
        from = (message + 1, last);
    }
    gaps.push((from.0, messages.len(), from.1, rendered.len()));
    for (lo, hi, start, end) in gaps {
        if lo >= hi || start > end {
            continue;
        }
        let assistants: Vec<usize> = (lo..hi)
            .filter(|&i| messages[i].role == "assistant" && !located.contains(&i))
            .collect();
        let [message] = assistants[..] else { continue };
        let Some(names) = call_names(&messages[message]) else {
            continue;
        };
        let gap = &rendered[start..end];
        // Each generation prompt in the gap through the first stop token after it, where that
        // holds every call's name: exactly one such turn, or none is located.
        let mut found = gap.match_indices(gp).filter_map(|(at, _)| {
            let body_start = start + at + gp.len();
            let tail = &rendered[body_start..end];
            let stop_end = stop_texts
                .iter()
                .filter_map(|stop| {
                    tail.match_indices(stop.as_str())
                        .find(|(i, _)| !tail[..*i].ends_with(MARK_START))
                        .map(|(i, _)| i + stop.len())
                })
                .min()?;
            names
                .iter()
                .all(|n| tail[..stop_end].contains(n))
                .then_some(ContentSpan {
                    start: body_start,
                    end: body_start + stop_end,
                    message,
                })
        });
        if let (Some(turn), None) = (found.next(), found.next()) {
            turns.push(turn);
        }
    }
    turns
}

/// Cut the rendered prompt into pieces: content spans become content pieces tagged with
/// their message, the rest template text. With `marked` (the control tokens the inputs were
/// marked with), every `START token END` becomes a content piece holding the token (so the
/// sanitizer encodes it as text), and a lone marker, which the template left by cutting caller
/// text at a marked token (`content.split('</think>')[-1]`), becomes a
/// [`crate::pieces::PieceKind::Break`]: dropped, but a hard boundary, as transformers'
/// `encode_marked_chat` reads its marker pattern `START(token)END|[START END]`.
pub fn split_rendered(
    rendered: &str,
    spans: &[ContentSpan],
    marked: Option<&ControlTokens>,
) -> Result<Pieces<'static>, TemplateError> {
    split_rendered_with_bodies(rendered, spans, &[], marked)
}

/// Rendered text as its one piece: what [`split_rendered`] gives without spans where nothing
/// in the text is marked (or nothing is sanitized), without copying the text (the pieces of
/// [`SplitText::Whole`]).
pub fn one_piece<'a>(rendered: impl Into<Cow<'a, str>>) -> Pieces<'a> {
    let mut pieces = Pieces::new();
    pieces.text(rendered);
    pieces
}

/// [`split_rendered`], with the pieces inside `bodies` marked as their message's body
/// (template text there is tagged with the body's message).
fn split_rendered_with_bodies(
    rendered: &str,
    spans: &[ContentSpan],
    bodies: &[ContentSpan],
    marked: Option<&ControlTokens>,
) -> Result<Pieces<'static>, TemplateError> {
    let mut pieces = Pieces::new();
    // `text` under `(message, content, body)`; `None`: a boundary there.
    let mut emit = |text: Option<&str>, (message, content, body): (Option<usize>, bool, bool)| {
        if text == Some("") {
            return;
        }
        pieces.set_message(message);
        if body {
            pieces.begin_body();
        }
        match text {
            None => pieces.boundary(),
            Some(text) if content => pieces.content(text.to_string()),
            Some(text) => pieces.text(text.to_string()),
        }
    };
    // Split at span and body boundaries first, then each part at markers.
    let mut cuts: Vec<usize> = spans
        .iter()
        .chain(bodies)
        .flat_map(|s| [s.start, s.end])
        .chain([0, rendered.len()])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    // Both lists are sorted and do not overlap.
    let covering = |ranges: &[ContentSpan], at: usize| {
        let i = ranges.partition_point(|s| s.end <= at);
        ranges.get(i).filter(|s| s.start <= at).map(|s| s.message)
    };
    let parts = cuts.windows(2).map(|w| {
        let span = covering(spans, w[0]);
        let body = covering(bodies, w[0]);
        (
            &rendered[w[0]..w[1]],
            (span.or(body), span.is_some(), body.is_some()),
        )
    });
    for (text, origin) in parts {
        let (message, _, body) = origin;
        let Some(control) = marked else {
            emit(Some(text), origin);
            continue;
        };
        for part in marked_parts(text, control) {
            match part {
                Marked::Text(t) => emit(Some(t), origin),
                Marked::Caller(t) => emit(Some(t), (message, true, body)),
                Marked::Lone => emit(None, origin),
            }
        }
    }
    Ok(pieces)
}

/// One part of rendered text that was rendered from marked inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marked<'a> {
    /// Text as rendered.
    Text(&'a str),
    /// A marked control token, or a marker character the caller's text held: caller text.
    Caller(&'a str),
    /// A lone marker: the template cut caller text at a marked token.
    Lone,
}

/// The first [`MARK_START`] or [`MARK_END`] in `text`. Both encode as `F3 B0 80 8x` in UTF-8,
/// and `F3` starts only characters of planes 12 to 15, so a byte search finds them fast.
fn find_marker(text: &str) -> Option<usize> {
    const _: () = assert!(MARK_START as u32 == 0xF0000 && MARK_END as u32 == 0xF0001);
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = memchr::memchr(0xF3, &bytes[from..]) {
        let at = from + i;
        if let [0xB0, 0x80, 0x80 | 0x81, ..] = bytes[at + 1..] {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `text` read as transformers' `encode_marked_chat` reads it (`START(token)END|[START END]`),
/// plus chatids' kept marker characters (`START marker END`).
fn marked_parts<'a>(
    text: &'a str,
    control: &'a ControlTokens,
) -> impl Iterator<Item = Marked<'a>> + 'a {
    let mut rest = text;
    let mut pending: Option<Marked<'a>> = None;
    std::iter::from_fn(move || {
        if let Some(p) = pending.take() {
            return Some(p);
        }
        if rest.is_empty() {
            return None;
        }
        let Some(start) = find_marker(rest) else {
            let all = rest;
            rest = "";
            return Some(Marked::Text(all));
        };
        let before = &rest[..start];
        let after = &rest[start..];
        let wrapped = &after[MARK_START.len_utf8()..];
        let part = if !after.starts_with(MARK_START) {
            rest = &after[MARK_END.len_utf8()..];
            Marked::Lone
        } else if let Some(kept) = [MARK_START, MARK_END]
            .into_iter()
            .find(|&m| wrapped.starts_with(m) && wrapped[m.len_utf8()..].starts_with(MARK_END))
        {
            let len = kept.len_utf8();
            rest = &wrapped[len + MARK_END.len_utf8()..];
            Marked::Caller(&wrapped[..len])
        } else {
            // `START token END` (a token holds no marker): the token, as caller text.
            let token = find_marker(wrapped).and_then(|end| {
                let inner = &wrapped[..end];
                let known = control
                    .tokens()
                    .binary_search_by(|(t, _)| t.as_str().cmp(inner))
                    .is_ok();
                (known && wrapped[end..].starts_with(MARK_END)).then_some(inner)
            });
            match token {
                Some(inner) => {
                    rest = &wrapped[inner.len() + MARK_END.len_utf8()..];
                    Marked::Caller(inner)
                }
                None => {
                    rest = wrapped;
                    Marked::Lone
                }
            }
        };
        if before.is_empty() {
            Some(part)
        } else {
            pending = Some(part);
            Some(Marked::Text(before))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control() -> ControlTokens {
        ControlTokens::new(vec![("<|eot_id|>".into(), 1), ("<|im_end|>".into(), 2)])
    }

    #[test]
    fn one_piece_is_split_rendered_of_unmarked_text() {
        let control = control();
        let texts = [
            ("", false),
            ("plain text", false),
            ("a<|eot_id|>b", false),
            ("\u{F0002}\u{F3000}\u{10FFFF} not markers", false),
            ("a\u{F0000}<|eot_id|>\u{F0001}b", true),
            ("cut \u{F0001} here", true),
            ("\u{F0000}\u{F0000}\u{F0001}", true),
        ];
        for (text, marked) in texts {
            assert_eq!(find_marker(text).is_some(), marked, "{text:?}");
            let plain = one_piece(text.to_string());
            assert_eq!(
                plain.as_slice(),
                split_rendered(text, &[], None).unwrap().as_slice()
            );
            if !marked {
                let control = Some(&control);
                let split = split_rendered(text, &[], control).unwrap();
                assert_eq!(plain.as_slice(), split.as_slice(), "{text:?}");
            }
        }
    }

    #[test]
    fn bodies_run_from_the_generation_prompt_through_the_stop_token() {
        let r = "<s>U:hi<e>\nA:ok<e>\nA:x<end>U:y";
        let at = |t: &str| r.find(t).unwrap();
        let span = |t: &str, message| ContentSpan {
            start: at(t),
            end: at(t) + t.len(),
            message,
        };
        let spans = [span("hi", 0), span("ok", 1), span("x", 2), span("y", 3)];
        let stops = ["<e>".to_string()];
        let specials = ["<end>".to_string(), "<e>".to_string()];
        let bodies = message_bodies(
            r,
            &spans,
            |m| m == 1 || m == 2,
            Some("A:"),
            |_| &stops[..],
            &specials,
            &[],
        );
        let texts: Vec<(&str, usize)> = bodies
            .iter()
            .map(|b| (&r[b.start..b.end], b.message))
            .collect();
        assert_eq!(
            texts,
            vec![("hi<e>", 0), ("ok<e>", 1), ("x<end>", 2), ("y", 3)]
        );
        // A stop token that came from caller text (marked) does not end a body.
        let marked = "A:ok\u{F0000}<e>\u{F0001}z<e>";
        let spans = [ContentSpan {
            start: 2,
            end: 4,
            message: 0,
        }];
        let bodies = message_bodies(
            marked,
            &spans,
            |_| true,
            Some("A:"),
            |_| &stops[..],
            &[],
            &[],
        );
        assert_eq!(
            &marked[bodies[0].start..bodies[0].end],
            "ok\u{F0000}<e>\u{F0001}z<e>"
        );
        // Without a generation prompt (Llama 2) an answer's body takes the space before it.
        let r = "[INST] q [/INST] a </s>";
        let spans = [
            ContentSpan {
                start: 7,
                end: 8,
                message: 0,
            },
            ContentSpan {
                start: 17,
                end: 18,
                message: 1,
            },
        ];
        let eos = ["</s>".to_string()];
        let bodies = message_bodies(r, &spans, |m| m == 1, None, |_| &eos[..], &[], &[]);
        let texts: Vec<&str> = bodies.iter().map(|b| &r[b.start..b.end]).collect();
        assert_eq!(texts, vec!["q", " a </s>"]);
    }

    #[test]
    fn call_turns_are_located_by_generation_prompt_name_and_stop() {
        use crate::render::probes::from_json;
        let r = "U:hi<e>A:<call>f</call><e>T:r<e>A:ok<e>";
        let at = |t: &str| r.find(t).unwrap();
        let span = |t: &str, message| ContentSpan {
            start: at(t),
            end: at(t) + t.len(),
            message,
        };
        let spans = [span("hi", 0), span("r", 2), span("ok", 3)];
        let messages = |name: &str| {
            vec![
                from_json(serde_json::json!({"role": "user", "content": "hi"})),
                from_json(serde_json::json!({"role": "assistant", "content": "",
                    "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {}}}]})),
                from_json(serde_json::json!({"role": "tool", "content": "r"})),
                from_json(serde_json::json!({"role": "assistant", "content": "ok"})),
            ]
        };
        let stops = ["<e>".to_string()];
        let turns = call_turns(r, &spans, &messages("f"), Some("A:"), &stops);
        let texts: Vec<(&str, usize)> = turns
            .iter()
            .map(|b| (&r[b.start..b.end], b.message))
            .collect();
        assert_eq!(texts, vec![("<call>f</call><e>", 1)]);
        // The name is not written there, no generation prompt, or no stop token: no body.
        assert!(call_turns(r, &spans, &messages("g"), Some("A:"), &stops).is_empty());
        assert!(call_turns(r, &spans, &messages("f"), None, &stops).is_empty());
        assert!(call_turns(r, &spans, &messages("f"), Some("A:"), &[]).is_empty());
        // Two turns in the gap that both hold the name: ambiguous, no body.
        let r2 = "U:hi<e>A:<call>f</call><e>A:<call>f</call><e>T:r<e>A:ok<e>";
        let at2 = |t: &str| r2.rfind(t).unwrap();
        let spans2 = [
            ContentSpan {
                start: 2,
                end: 4,
                message: 0,
            },
            ContentSpan {
                start: at2("r<e>"),
                end: at2("r<e>") + 1,
                message: 2,
            },
            ContentSpan {
                start: at2("ok"),
                end: at2("ok") + 2,
                message: 3,
            },
        ];
        assert!(call_turns(r2, &spans2, &messages("f"), Some("A:"), &stops).is_empty());
    }

    #[test]
    fn finds_marker_characters_by_bytes() {
        for text in [
            "",
            "abc",
            "\u{F0002}x\u{FFFFF}",
            "日本\u{F0000}",
            "a\u{F0001}\u{F0000}",
            "\u{F0080}\u{F0001}",
        ] {
            assert_eq!(
                find_marker(text),
                text.find([MARK_START, MARK_END]),
                "{text:?}"
            );
        }
    }

    #[test]
    fn marks_control_tokens_and_keeps_marker_characters() {
        let c = control();
        assert_eq!(
            mark_str("a<|eot_id|>b\u{F0000}", &c),
            "a\u{F0000}<|eot_id|>\u{F0001}b\u{F0000}\u{F0000}\u{F0001}"
        );
        // Values are marked, keys are not.
        let value = serde_json::json!({"<|eot_id|>": ["<|im_end|>", 3]});
        let mut mark = |s: &str| needs_mark(s, &c).then(|| mark_str(s, &c));
        let data = Data::from_json(&value, &mut mark);
        let t = ChatTemplate::compile(
            "{% for k, v in x.items() %}{{ k }}={{ v[0] }},{{ v[1] }}{% endfor %}",
        )
        .unwrap();
        assert_eq!(
            t.render_data(vec![("x", data)], None, None).unwrap(),
            "<|eot_id|>=\u{F0000}<|im_end|>\u{F0001},3"
        );
    }

    #[test]
    fn splits_marked_tokens_into_content_pieces() {
        let control = control();
        let marked = Some(&control);
        let rendered = "<s>[U] hi \u{F0000}<|eot_id|>\u{F0001} there [/U]";
        let pieces = split_rendered(rendered, &[], marked).unwrap();
        let kinds: Vec<_> = pieces
            .as_slice()
            .iter()
            .map(|p| (p.kind, p.text.to_string()))
            .collect();
        use crate::pieces::PieceKind::*;
        assert_eq!(
            kinds,
            vec![
                (TemplateText, "<s>[U] hi ".to_string()),
                (Content, "<|eot_id|>".to_string()),
                (TemplateText, " there [/U]".to_string()),
            ]
        );
        let kept = split_rendered(
            "a\u{F0000}\u{F0000}\u{F0001}b\u{F0000}\u{F0001}\u{F0001}",
            &[],
            marked,
        )
        .unwrap();
        assert_eq!(kept.render(), "a\u{F0000}b\u{F0001}");
    }

    #[test]
    fn a_lone_marker_is_a_boundary_without_text() {
        use crate::pieces::PieceKind::*;
        let control = control();
        let split = |rendered: &str| -> Vec<(crate::pieces::PieceKind, String)> {
            split_rendered(rendered, &[], Some(&control))
                .unwrap()
                .as_slice()
                .iter()
                .map(|p| (p.kind, p.text.to_string()))
                .collect()
        };
        let piece = |kind, text: &str| (kind, text.to_string());
        // `content.split('<|im_end|>')[-1]` leaves the end marker; `[0]` leaves the start.
        assert_eq!(
            split("a\u{F0001}b"),
            vec![
                piece(TemplateText, "a"),
                piece(Break, ""),
                piece(TemplateText, "b")
            ]
        );
        assert_eq!(
            split("a\u{F0000}b"),
            vec![
                piece(TemplateText, "a"),
                piece(Break, ""),
                piece(TemplateText, "b")
            ]
        );
        // A marked text that is not a control token (`|upper` of a marked token): two lone markers.
        assert_eq!(
            split("\u{F0000}<|IM_END|>\u{F0001}"),
            vec![
                piece(Break, ""),
                piece(TemplateText, "<|IM_END|>"),
                piece(Break, "")
            ]
        );
        // Unmarked: the markers are text.
        assert_eq!(
            split_rendered("a\u{F0001}b", &[], None).unwrap().render(),
            "a\u{F0001}b"
        );
    }

    #[test]
    fn aligns_spans_passed_through_or_trimmed() {
        let tag = |i: usize, s: &str| format!("{SPAN_OPEN}{i}{SPAN_INDEX_END}{s}{SPAN_CLOSE}");
        // Llama 2 writes content.strip() + ' ': "a " matches first but " </s>" must follow.
        let spans =
            align_spans(&format!("[/INST] {} </s>", tag(1, "a ")), "[/INST] a </s>").unwrap();
        assert_eq!(
            spans,
            vec![ContentSpan {
                start: 8,
                end: 9,
                message: 1
            }]
        );
        // "<" as content must not be found inside the template's own "<|start|>".
        let tagged = format!("<|start|>user:{}|{}", tag(0, "<"), tag(1, " hi "));
        let spans = align_spans(&tagged, "<|start|>user:<|hi").unwrap();
        assert_eq!(
            spans,
            vec![
                ContentSpan {
                    start: 14,
                    end: 15,
                    message: 0
                },
                ContentSpan {
                    start: 16,
                    end: 18,
                    message: 1
                }
            ]
        );
        // A template that changed the text (upper-cased it) gives no spans at all.
        assert_eq!(align_spans(&format!("a{}", tag(0, "x")), "aX"), None);
    }

    #[test]
    fn aliases_reasoning_like_transformers() {
        let mut m = Message::new("assistant", "a");
        m.reasoning_content = Some("r".into());
        let mut built = Map::new();
        let entries = message_entries(&m, 0, &mut built).unwrap();
        let keys: Vec<_> = entries.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["thinking", "role", "content", "reasoning_content"]);
        assert!(entries
            .iter()
            .all(|(k, v)| *k == "role" || *k == "content" || *v == "r"));
    }
}
