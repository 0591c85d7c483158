//! The mistral-common route: Mistral checkpoints encoded exactly as Mistral's own library,
//! `mistral-common`, encodes them (`MistralTokenizer.from_file(...).encode_chat_completion`).
//!
//! mistral-common does not render a template and re-tokenize it: it encodes each message on its
//! own (a SentencePiece model adds its dummy-prefix space to every message) and puts control
//! tokens between them as ids. Hugging Face's Mistral templates only imitate this with literal
//! spaces, and differ from it on most real conversations; checkpoints that ship
//! mistral-common's files (`tekken.json`, `tokenizer.model.v1/v2/v3/v7`) use this route by
//! default (see [`crate::encoder::Route`]).
//!
//! Per version, for plain-text conversations:
//!
//! * v1: `<s>` + `encode("[INST] {user} [/INST]")` + `encode(assistant)` `</s>` ..., the system
//!   prompt prepended to the first user message (`system + "\n\n" + user`).
//! * v2, v3: `<s>[INST]` + `encode(user)` + `[/INST]` + `encode(assistant.rstrip(" "))` + `</s>`,
//!   the system prompt prepended to the last user message.
//! * v7: as v3, system messages in place as `[SYSTEM_PROMPT]` + `encode(system)` + `[/SYSTEM_PROMPT]`.
//!
//! Tools (v2 and later; v1 has none and chatids refuses a tools list there rather than drop it
//! as mistral-common does): `[AVAILABLE_TOOLS]` + `encode(json.dumps(tools))` +
//! `[/AVAILABLE_TOOLS]` before the last user turn's `[INST]`; an assistant turn's calls as
//! `[TOOL_CALLS]` + `encode(json.dumps([{"name", "arguments"(, "id" from v3)}]))` + `</s>`
//! (v2 leaves out calls and results before the last user message; v7 may write text before
//! the calls); results as `[TOOL_RESULTS]` + `encode(json.dumps(...))` + `[/TOOL_RESULTS]`
//! (v2: `[{"name", "content"}]`, v3: `{"content", "call_id"}`, v7:
//! `[TOOL_RESULTS]` + `encode(call_id)` + `[TOOL_CONTENT]` + `encode(content)` +
//! `[/TOOL_RESULTS]`), with Python's `json` semantics ([`json`]). `continue_final_message`
//! leaves out the final assistant turn's `</s>`.
//!
//! Control-token text in content is always encoded as text (mistral-common never parses it),
//! so `sanitize_control_tokens` makes no difference on this route.

pub mod json;
pub mod request;
pub mod schema;

use std::path::{Path, PathBuf};

use crate::completion::{CallSyntax, Grammar, StopToken, Trim};
use crate::control_tokens::ControlTokens;
use crate::error::{Error, Result, TemplateError};
use crate::message::Message;
use crate::piece_encoder::{EncodedChat, Tracking};
use crate::text::sentencepiece::SentencePieceBpe;
use crate::text::tekken::Tekken;
use crate::text::TokenText;
use json::PyJson;
use request::{Request, RequestOptions, Role};

/// What one encoding call asks of the route besides the messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// The conversation-level `tools` list (`[{"type": "function", "function": {...}}]`);
    /// `None` (or JSON `null`) means no tools.
    pub tools: Option<&'a serde_json::Value>,
    /// Leave the final assistant message open (mistral-common's `continue_final_message=True`:
    /// the message gets `prefix=True` and no `</s>`).
    pub continue_final_message: bool,
}

/// The tool-use control tokens (v2 and later).
#[derive(Debug, Clone, Copy)]
struct ToolTokens {
    available: (u32, u32),
    results: (u32, u32),
    calls: u32,
    /// `[TOOL_CONTENT]` (v7).
    content: Option<u32>,
}

/// The names of the mistral-common route's formats (see [`MistralCommon::name`]).
pub const FORMAT_NAMES: &[&str] = &[
    "mistral-common-v1",
    "mistral-common-v2",
    "mistral-common-v3",
    "mistral-common-v7",
    "mistral-common-v3-tekken",
    "mistral-common-v7-tekken",
];

/// mistral-common's instruct tokenizer versions chatids implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// v1 (Mistral 7B v0.1, Mixtral 8x7B).
    V1,
    /// v2.
    V2,
    /// v3 (Mistral 7B v0.3, Nemo with tekken).
    V3,
    /// v7 (Large 2411, Small 2501 with tekken).
    V7,
}

/// The raw text tokenizer behind a mistral-common checkpoint.
pub enum RawTokenizer {
    /// A SentencePiece `.model` file.
    SentencePiece(Box<SentencePieceBpe>),
    /// A `tekken.json` file.
    Tekken(Tekken),
}

impl RawTokenizer {
    fn encode(&self, text: &str, ids: &mut Vec<u32>) -> Result<()> {
        match self {
            RawTokenizer::SentencePiece(sp) => {
                sp.encode(text, ids);
                Ok(())
            }
            RawTokenizer::Tekken(t) => t.encode(text, ids),
        }
    }

    fn special(&self, text: &str) -> Option<u32> {
        match self {
            RawTokenizer::SentencePiece(sp) => sp.piece_to_id(text),
            RawTokenizer::Tekken(t) => t.special_id(text),
        }
    }
}

/// A checkpoint on the mistral-common route.
pub struct MistralCommon {
    version: Version,
    raw: RawTokenizer,
    file: PathBuf,
    bos: u32,
    eos: u32,
    /// `[INST]`, `[/INST]` (v2 and later).
    inst: Option<(u32, u32)>,
    /// `[SYSTEM_PROMPT]`, `[/SYSTEM_PROMPT]` (v7).
    system: Option<(u32, u32)>,
    /// The tool tokens, when the file has them all (mistral-common requires them from v2 on).
    tools: Option<ToolTokens>,
    control_tokens: ControlTokens,
}

impl MistralCommon {
    /// The mistral-common tokenizer file in `dir`, if there is exactly one: `tekken.json`, or a
    /// SentencePiece model named `*.model.v{N}` (mistral-common reads the version from the
    /// name). Several candidates are an error.
    pub fn find_in(dir: &Path) -> Result<Option<PathBuf>> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(None);
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                name == "tekken.json" || sp_version(name).is_some()
            })
            .collect();
        found.sort();
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop()),
            _ => Err(Error::Load(format!(
                "{} holds several mistral-common tokenizer files ({}); keep one",
                dir.display(),
                found
                    .iter()
                    .filter_map(|p| p.file_name()?.to_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Load a mistral-common tokenizer file.
    pub fn load(file: &Path) -> Result<Self> {
        let bytes = std::fs::read(file)
            .map_err(|e| Error::Load(format!("cannot read {}: {e}", file.display())))?;
        Self::from_bytes(file, &bytes)
    }

    /// Load a mistral-common tokenizer file from its bytes. `file` is only its name: the name
    /// decides the kind (`tekken.json` or a SentencePiece `*.model.v{N}`) and the version of a
    /// SentencePiece model, and it is what [`MistralCommon::file`] reports; nothing is read.
    pub fn from_bytes(file: &Path, bytes: &[u8]) -> Result<Self> {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let in_file = |e: &dyn std::fmt::Display| Error::Load(format!("{}: {e}", file.display()));
        let (raw, version_str) = if name.ends_with(".json") {
            let text = std::str::from_utf8(bytes).map_err(|e| in_file(&e))?;
            let tekken = Tekken::from_json(text).map_err(|e| in_file(&e))?;
            let v = tekken.version().to_string();
            (RawTokenizer::Tekken(tekken), v)
        } else {
            let v = sp_version(name).ok_or_else(|| {
                Error::Load(format!(
                    "{}: not a mistral-common model file",
                    file.display()
                ))
            })?;
            let sp = SentencePieceBpe::from_bytes(bytes).map_err(|e| match e {
                Error::Load(msg) => in_file(&msg),
                other => other,
            })?;
            (RawTokenizer::SentencePiece(Box::new(sp)), v.to_string())
        };
        let version = match version_str.as_str() {
            "v1" => Version::V1,
            "v2" => Version::V2,
            "v3" => Version::V3,
            "v7" => Version::V7,
            other => {
                return Err(Error::Load(format!(
                    "{}: mistral-common tokenizer version {other:?} is not implemented by chatids (v1, v2, v3, v7 are)",
                    file.display()
                )))
            }
        };
        if matches!(raw, RawTokenizer::Tekken(_)) && matches!(version, Version::V1 | Version::V2) {
            return Err(Error::Load(format!(
                "{}: a tekken file declaring {version_str} is not something mistral-common ships",
                file.display()
            )));
        }
        let special = |text: &str| {
            raw.special(text)
                .ok_or_else(|| Error::Load(format!("{}: no special token {text}", file.display())))
        };
        let (bos, eos) = match &raw {
            RawTokenizer::SentencePiece(sp) => (
                sp.bos_id()
                    .ok_or_else(|| Error::Load("model has no bos".into()))?,
                sp.eos_id()
                    .ok_or_else(|| Error::Load("model has no eos".into()))?,
            ),
            RawTokenizer::Tekken(_) => (special("<s>")?, special("</s>")?),
        };
        let inst = if version == Version::V1 {
            None
        } else {
            Some((special("[INST]")?, special("[/INST]")?))
        };
        let system = if version == Version::V7 {
            Some((special("[SYSTEM_PROMPT]")?, special("[/SYSTEM_PROMPT]")?))
        } else {
            None
        };
        let tools = (|| -> Option<ToolTokens> {
            if version == Version::V1 {
                return None;
            }
            Some(ToolTokens {
                available: (
                    raw.special("[AVAILABLE_TOOLS]")?,
                    raw.special("[/AVAILABLE_TOOLS]")?,
                ),
                results: (
                    raw.special("[TOOL_RESULTS]")?,
                    raw.special("[/TOOL_RESULTS]")?,
                ),
                calls: raw.special("[TOOL_CALLS]")?,
                content: if version == Version::V7 {
                    Some(raw.special("[TOOL_CONTENT]")?)
                } else {
                    None
                },
            })
        })();
        let control_tokens = match &raw {
            RawTokenizer::SentencePiece(sp) => ControlTokens::new(
                (0..sp.vocab_size() as u32)
                    .filter(|&i| sp.is_control(i))
                    .filter_map(|i| Some((sp.id_to_piece(i)?.to_string(), i)))
                    .collect(),
            ),
            RawTokenizer::Tekken(t) => ControlTokens::new(
                t.special_tokens()
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s.clone(), i as u32))
                    .collect(),
            ),
        };
        Ok(MistralCommon {
            version,
            raw,
            file: file.to_path_buf(),
            bos,
            eos,
            inst,
            system,
            tools,
            control_tokens,
        })
    }

    /// The route's name, e.g. `"mistral-common-v3-tekken"` (one of [`FORMAT_NAMES`]; tekken
    /// files only come as v3 and later).
    pub fn name(&self) -> &'static str {
        let tekken = matches!(self.raw, RawTokenizer::Tekken(_));
        match (self.version, tekken) {
            (Version::V1, _) => "mistral-common-v1",
            (Version::V2, _) => "mistral-common-v2",
            (Version::V3, false) => "mistral-common-v3",
            (Version::V7, false) => "mistral-common-v7",
            (Version::V3, true) => "mistral-common-v3-tekken",
            (Version::V7, true) => "mistral-common-v7-tekken",
        }
    }

    /// The tokenizer file in use.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Why this route encodes the checkpoint, in one line (`Encoder::explain`).
    pub fn explain(&self) -> String {
        format!(
            "format {}: the checkpoint ships mistral-common's tokenizer file {}; chatids encodes as \
             mistral-common's encode_chat_completion does (pass reference=\"transformers\" for the \
             Hugging Face template route)",
            self.name(),
            self.file.display()
        )
    }

    /// The tekken tokenizer, when the file is `tekken.json` (its state is written from it, see
    /// [`crate::persist`]).
    pub(crate) fn tekken(&self) -> Option<&Tekken> {
        match &self.raw {
            RawTokenizer::Tekken(t) => Some(t),
            RawTokenizer::SentencePiece(_) => None,
        }
    }

    /// How an assistant turn is written, for reading a completion back ([`crate::completion`]):
    /// the text as given (SentencePiece: after the space every message's encoding starts
    /// with), then from v2 on `[TOOL_CALLS]` and the JSON list of calls (`{"name",
    /// "arguments"}`, and `"id"` from v3 on), then `</s>`. Every special token is a control
    /// token. This is what mistral-common's own reader (`experimental.tools`) reads.
    pub fn grammar(&self) -> Grammar {
        let mut g = Grammar::plain(self.name(), Trim::None);
        if let RawTokenizer::SentencePiece(_) = self.raw {
            g.content_prefix = " ";
        }
        if let Some(tools) = self.tools {
            g.calls = CallSyntax::List {
                marker: tools.calls,
            };
            g.writes_call_ids = self.version != Version::V2;
        }
        g.stops = vec![StopToken {
            id: self.eos,
            awaits_tool: false,
        }];
        g.set_control(self.control_tokens.tokens().iter().map(|&(_, id)| id));
        g
    }

    /// `rendered` as ids: each special token's text as its id, and each text between two of
    /// them as mistral-common encodes a text on its own (SentencePiece adds its dummy-prefix
    /// space to each). What a model's output looks like on this route, for tests and fuzzing.
    pub fn encode_rendered(&self, rendered: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        let mut at = 0;
        for hit in self.control_tokens.find_iter(rendered) {
            if hit.start > at {
                self.raw.encode(&rendered[at..hit.start], &mut ids)?;
            }
            ids.push(hit.id);
            at = hit.end;
        }
        if at < rendered.len() {
            self.raw.encode(&rendered[at..], &mut ids)?;
        }
        Ok(ids)
    }

    /// Each id's text, as mistral-common's `decode` reads it (special tokens as their text).
    pub fn token_text(&self) -> TokenText {
        match &self.raw {
            RawTokenizer::SentencePiece(sp) => TokenText::from_sentencepiece(sp),
            RawTokenizer::Tekken(t) => TokenText::from_tekken(t),
        }
    }

    /// `</s>`, the id that ends an assistant turn.
    pub fn eos(&self) -> u32 {
        self.eos
    }

    /// The special (control) tokens.
    pub fn control_tokens(&self) -> &ControlTokens {
        &self.control_tokens
    }

    /// The units mistral-common encodes, in order: special ids and texts encoded on their own,
    /// with the message each comes from and whether it is in that message's body (after the
    /// role marker, through the token that ends the turn; v1 writes a user turn as one text,
    /// `[INST]` included, so all of it counts as body). An assistant turn is body throughout
    /// (its text, `[TOOL_CALLS]` and the calls, `</s>`); a tool result's body follows
    /// `[TOOL_RESULTS]`. The `[AVAILABLE_TOOLS]` block belongs to no message.
    fn units<'r>(&self, request: &'r Request) -> Result<Vec<(Unit<'r>, Option<usize>, bool)>> {
        let mut units = vec![(Unit::Special(self.bos, "<s>"), None, false)];
        let first_user = request.messages.iter().position(|m| m.role == Role::User);
        let last_user = request.messages.iter().rposition(|m| m.role == Role::User);
        let tool_tokens = || {
            self.tools.ok_or_else(|| {
                Error::Template(TemplateError::whole(format!(
                    "{} has no tool tokens ([AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]...)",
                    self.file.display()
                )))
            })
        };
        for (k, m) in request.messages.iter().enumerate() {
            let origin = m.origin;
            // v2 leaves out tool calls and results before the last user message.
            let before_last_user = last_user.is_some_and(|l| k < l);
            match (m.role, self.version) {
                (Role::User, Version::V1) => {
                    let content = match &request.system_prompt {
                        Some(s) if Some(k) == first_user => format!("{s}\n\n{}", m.content),
                        _ => m.content.clone(),
                    };
                    units.push((
                        Unit::Text(format!("[INST] {content} [/INST]").into()),
                        origin,
                        true,
                    ));
                }
                (Role::User, _) => {
                    if Some(k) == last_user && !request.tools.is_empty() {
                        let t = tool_tokens()?;
                        let tools = PyJson::List(request.tools.clone()).dumps();
                        units.push((
                            Unit::Special(t.available.0, "[AVAILABLE_TOOLS]"),
                            None,
                            false,
                        ));
                        units.push((Unit::Text(tools.into()), None, false));
                        units.push((
                            Unit::Special(t.available.1, "[/AVAILABLE_TOOLS]"),
                            None,
                            false,
                        ));
                    }
                    let (open, close) = self.inst.expect("v2+ resolves [INST]");
                    units.push((Unit::Special(open, "[INST]"), origin, false));
                    let content = match &request.system_prompt {
                        Some(s) if Some(k) == last_user => format!("{s}\n\n{}", m.content).into(),
                        _ => std::borrow::Cow::Borrowed(m.content.as_str()),
                    };
                    units.push((Unit::Text(content), origin, true));
                    units.push((Unit::Special(close, "[/INST]"), origin, true));
                }
                (Role::Assistant, Version::V1) => {
                    units.push((Unit::Text(m.content.as_str().into()), origin, true));
                    if !m.prefix {
                        units.push((Unit::Special(self.eos, "</s>"), origin, true));
                    }
                }
                (Role::Assistant, version) => {
                    if (m.tool_calls.is_empty() || version == Version::V7) && !m.content.is_empty()
                    {
                        units.push((
                            Unit::Text(m.content.trim_end_matches(' ').into()),
                            origin,
                            true,
                        ));
                    }
                    if !m.tool_calls.is_empty() {
                        if version == Version::V2 && before_last_user {
                            continue;
                        }
                        let t = tool_tokens()?;
                        let calls = PyJson::List(
                            m.tool_calls
                                .iter()
                                .map(|c| c.to_json(version != Version::V2))
                                .collect(),
                        );
                        units.push((Unit::Special(t.calls, "[TOOL_CALLS]"), origin, true));
                        units.push((Unit::Text(calls.dumps().into()), origin, true));
                    }
                    if !m.prefix {
                        units.push((Unit::Special(self.eos, "</s>"), origin, true));
                    }
                }
                (Role::Tool, Version::V1) => {
                    unreachable!("the request rejects tool messages for v1")
                }
                (Role::Tool, version) => {
                    if version == Version::V2 && before_last_user {
                        continue;
                    }
                    let t = tool_tokens()?;
                    units.push((Unit::Special(t.results.0, "[TOOL_RESULTS]"), origin, false));
                    match version {
                        Version::V7 => {
                            let id = m.call_id.as_deref().unwrap_or_default();
                            let content = t.content.expect("v7 resolves [TOOL_CONTENT]");
                            units.push((Unit::Text(id.into()), origin, true));
                            units.push((Unit::Special(content, "[TOOL_CONTENT]"), origin, true));
                            units.push((Unit::Text(m.content.as_str().into()), origin, true));
                        }
                        _ => {
                            let index = origin.unwrap_or_default();
                            let content = request::parse_json_content(&m.content, index)?;
                            let result = if version == Version::V2 {
                                let name = m.name.clone().map_or(PyJson::Null, PyJson::Str);
                                PyJson::List(vec![PyJson::Dict(vec![
                                    ("name".into(), name),
                                    ("content".into(), content),
                                ])])
                            } else {
                                let id = m.call_id.clone().map_or(PyJson::Null, PyJson::Str);
                                PyJson::Dict(vec![
                                    ("content".into(), content),
                                    ("call_id".into(), id),
                                ])
                            };
                            units.push((Unit::Text(result.dumps().into()), origin, true));
                        }
                    }
                    units.push((Unit::Special(t.results.1, "[/TOOL_RESULTS]"), origin, true));
                }
                (Role::System, _) => {
                    let (open, close) = self.system.expect("v7 resolves [SYSTEM_PROMPT]");
                    units.push((Unit::Special(open, "[SYSTEM_PROMPT]"), origin, false));
                    units.push((Unit::Text(m.content.as_str().into()), origin, true));
                    units.push((Unit::Special(close, "[/SYSTEM_PROMPT]"), origin, true));
                }
            }
        }
        Ok(units)
    }

    fn request(
        &self,
        messages: &[Message],
        options: Options<'_>,
    ) -> Result<Request, TemplateError> {
        request::normalize(
            messages,
            RequestOptions {
                version: self.version,
                tools: options.tools,
                continue_final_message: options.continue_final_message,
            },
        )
    }

    /// Encode `messages` exactly as mistral-common's `encode_chat_completion`.
    pub fn encode_into(
        &self,
        messages: &[Message],
        options: Options<'_>,
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        let request = self.request(messages, options)?;
        for (unit, origin, body) in self.units(&request)? {
            let before = out.ids.len();
            let is_text = matches!(unit, Unit::Text(_));
            match unit {
                Unit::Special(id, _) => out.ids.push(id),
                Unit::Text(text) => self.raw.encode(&text, &mut out.ids)?,
            }
            let count = out.ids.len() - before;
            if tracking.message_indices {
                let index = origin.map_or(-1, |o| o as i32);
                out.message_indices
                    .extend(std::iter::repeat_n(index, count));
            }
            if tracking.from_content {
                out.from_content.extend(std::iter::repeat_n(is_text, count));
            }
            if tracking.body {
                let index = match (body, origin) {
                    (true, Some(o)) => o as i32,
                    _ => -1,
                };
                out.body_messages.extend(std::iter::repeat_n(index, count));
            }
        }
        Ok(())
    }

    /// What mistral-common encodes, as one string: special tokens as their text, each message
    /// text as given (each is encoded on its own, so this string is not re-tokenizable).
    pub fn render(&self, messages: &[Message], options: Options<'_>) -> Result<String> {
        let request = self.request(messages, options)?;
        Ok(self
            .units(&request)?
            .into_iter()
            .map(|(u, _, _)| match u {
                Unit::Special(_, text) => text.to_string(),
                Unit::Text(t) => t.into_owned(),
            })
            .collect())
    }
}

/// One thing mistral-common encodes.
enum Unit<'r> {
    Special(u32, &'static str),
    Text(std::borrow::Cow<'r, str>),
}

/// The version in a SentencePiece file name (`tokenizer.model.v3`, `...model.v7m1` -> `v7`).
fn sp_version(name: &str) -> Option<&'static str> {
    let (_, suffix) = name.rsplit_once(".model.")?;
    let version = suffix.split('m').next()?;
    ["v1", "v2", "v3", "v7"].into_iter().find(|v| *v == version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentencepiece_versions_come_from_the_file_name() {
        assert_eq!(sp_version("tokenizer.model.v3"), Some("v3"));
        assert_eq!(
            sp_version("mistral_instruct_tokenizer_241114.model.v7m1"),
            Some("v7")
        );
        assert_eq!(sp_version("tokenizer.model"), None);
        assert_eq!(sp_version("tokenizer.json"), None);
    }
}
