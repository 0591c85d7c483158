//! The return path: the ids a model generated after the generation prompt, back to the
//! assistant message that `encode` turns into those ids.
//!
//! A [`Grammar`] states how a format writes an assistant turn: the ids that end it (and which
//! of them mean "waiting for a tool result"), the reasoning block, the tool-call syntax
//! ([`CallSyntax`]) and what the template does to the content (its `trim`, ...). Each native
//! format declares its grammar next to its renderer (`ChatFormat::grammar`), so one file states
//! both directions of a family.
//!
//! [`StreamParser`] reads ids one at a time (or a few) with O(1) amortized work per id: the
//! tokenizer's own decoding made incremental ([`crate::text::decode`]), markers matched by id
//! (a marker is a control token; the same characters typed as text are text), and an
//! incremental JSON scanner for the calls ([`json`]). It emits [`Delta`]s in the shape servers
//! send and, at the end, the [`ParsedCompletion`]. One-shot parsing ([`parse`]) is the stream
//! fed everything at once, so any chunking gives the same final message.
//!
//! Nothing is guessed or dropped: a control token the grammar does not expect where it comes,
//! a malformed call, or text after the calls ends the parse of the turn, and everything from
//! there is kept verbatim in [`ParsedCompletion::remainder`]; ids after the stop token are kept
//! in [`ParsedCompletion::after_stop`].

mod families;
mod json;
mod syntax;

use std::sync::Arc;

pub use families::{deepseek_v3, harmony, hermes, llama3_json, mistral_list};
pub use syntax::{DeepSeekTokens, HarmonyTokens};

use json::ObjectScanner;
use syntax::HarmonyMessage;

use crate::text::{StreamState, TokenText};

/// A token that ends the assistant turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopToken {
    /// Its id.
    pub id: u32,
    /// It means "the turn ends in a call waiting for its result" (Llama 3.1 `<|eom_id|>`).
    pub awaits_tool: bool,
}

/// What the template does to a text before writing it, which the parser undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    /// Written as given.
    None,
    /// Jinja's `trim` / Python's `strip()`: whitespace at both ends removed.
    Whitespace,
    /// `strip('\n')`: newlines at both ends removed (Qwen3's reasoning).
    Newlines,
    /// `lstrip('\n')`: leading newlines removed (Qwen3's content).
    LeadingNewlines,
}

impl Trim {
    fn leading(self, c: char) -> bool {
        match self {
            Trim::None => false,
            Trim::Whitespace => crate::pystr::is_python_whitespace(c),
            Trim::Newlines | Trim::LeadingNewlines => c == '\n',
        }
    }

    fn trailing(self, c: char) -> bool {
        match self {
            Trim::None | Trim::LeadingNewlines => false,
            Trim::Whitespace => crate::pystr::is_python_whitespace(c),
            Trim::Newlines => c == '\n',
        }
    }
}

/// How a format writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallSyntax {
    /// The format writes no tool calls.
    None,
    /// Each call is `{"name": ..., "arguments": ...}` between two marker tokens, calls after the
    /// content, the template's `\n` before each block (Hermes, Qwen2/2.5/3:
    /// `\n<tool_call>\n{...}\n</tool_call>`).
    Tagged {
        /// `<tool_call>`.
        open: u32,
        /// `</tool_call>`.
        close: u32,
    },
    /// One marker token, then a JSON list of `{"name", "arguments", "id"}` (Mistral's
    /// `[TOOL_CALLS] [...]`).
    List {
        /// `[TOOL_CALLS]`.
        marker: u32,
    },
    /// Llama 3.1/3.2: the whole turn is one `{"name": ..., "parameters": ...}`, or
    /// `<|python_tag|>` and a built-in tool's `name.call(arg="value", ...)` (raw code after the
    /// tag is a `code_interpreter` call, as llama-models reads it).
    Llama3 {
        /// `<|python_tag|>`.
        python_tag: u32,
    },
    /// gpt-oss harmony: the turn is a run of messages, each a header then `<|message|>` and a
    /// body. `<|channel|>analysis` is the reasoning, `<|channel|>final` the content, and
    /// `to=functions.NAME` (before the channel, or after `commentary`) a call whose body is its
    /// arguments; `<|end|>` ends the analysis and `<|start|>assistant` opens the next message.
    Harmony(HarmonyTokens),
    /// DeepSeek V3: `<｜tool▁calls▁begin｜>`, then per call `<｜tool▁call▁begin｜>function
    /// <｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>` (`\n` between calls), then
    /// `<｜tool▁calls▁end｜>`.
    DeepSeek(DeepSeekTokens),
}

impl CallSyntax {
    /// The marker tokens of the syntax (control tokens the grammar places).
    pub fn markers(&self) -> Vec<u32> {
        match *self {
            CallSyntax::None => vec![],
            CallSyntax::Tagged { open, close } => vec![open, close],
            CallSyntax::List { marker } => vec![marker],
            CallSyntax::Llama3 { python_tag } => vec![python_tag],
            CallSyntax::Harmony(h) => h.markers(),
            CallSyntax::DeepSeek(d) => d.markers(),
        }
    }

    /// The markers that open a call (one of them is in every turn with a call).
    pub fn call_openers(&self) -> Vec<u32> {
        match *self {
            CallSyntax::None => vec![],
            CallSyntax::Tagged { open, .. } => vec![open],
            CallSyntax::List { marker } => vec![marker],
            // A JSON call has no marker.
            CallSyntax::Llama3 { .. } => vec![],
            CallSyntax::Harmony(h) => vec![h.message],
            CallSyntax::DeepSeek(d) => vec![d.calls_begin],
        }
    }
}

/// How a format writes an assistant turn: what [`StreamParser`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    /// The format's name (for messages).
    pub format: String,
    /// The ids that end the turn.
    pub stops: Vec<StopToken>,
    /// What the template does to the content.
    pub content: Trim,
    /// Text the template writes before the content, which the model generates with it
    /// (Mistral v1/v7: `" " + content`): removed once from the start.
    pub content_prefix: &'static str,
    /// The reasoning block's open and close tokens (Qwen3 `<think>`, `</think>`), at the start
    /// of the turn.
    pub reasoning: Option<(u32, u32)>,
    /// What the template does to the reasoning.
    pub reasoning_trim: Trim,
    /// The message key the template reads the reasoning from (`reasoning_content`).
    pub reasoning_key: &'static str,
    /// What the template does to the content after the reasoning block.
    pub content_after_reasoning: Trim,
    /// The tool-call syntax.
    pub calls: CallSyntax,
    /// Whether the format writes the call ids (Mistral); otherwise [`StreamParser`] makes them.
    pub writes_call_ids: bool,
    /// The template writes the calls only when the content is null (DeepSeek V3): a turn with
    /// calls and no content reads back with `content: None`.
    pub null_content_with_calls: bool,
    /// The template writes the arguments as a string (DeepSeek V3 concatenates them): they read
    /// back as the text the model wrote, never as a JSON value.
    pub arguments_as_text: bool,
    /// The control tokens, one bit per id: any of them that is not a stop or a marker where it
    /// comes ends the parse (see [`ParsedCompletion::remainder`]).
    pub control: Arc<Vec<u64>>,
}

impl Grammar {
    /// A grammar with only stops and a content trim; formats add the rest.
    pub fn plain(format: &str, content: Trim) -> Self {
        Grammar {
            format: format.to_string(),
            stops: Vec::new(),
            content,
            content_prefix: "",
            reasoning: None,
            reasoning_trim: Trim::Newlines,
            reasoning_key: "reasoning_content",
            content_after_reasoning: content,
            calls: CallSyntax::None,
            writes_call_ids: false,
            null_content_with_calls: false,
            arguments_as_text: false,
            control: Arc::default(),
        }
    }

    /// Whether `id` is a control token.
    pub fn is_control(&self, id: u32) -> bool {
        self.control
            .get(id as usize / 64)
            .is_some_and(|w| w >> (id % 64) & 1 == 1)
    }

    /// Mark `ids` as control tokens.
    pub fn set_control(&mut self, ids: impl IntoIterator<Item = u32>) {
        let bits = Arc::make_mut(&mut self.control);
        for id in ids {
            let word = id as usize / 64;
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            bits[word] |= 1 << (id % 64);
        }
    }

    fn stop(&self, id: u32) -> Option<StopToken> {
        self.stops.iter().find(|s| s.id == id).copied()
    }
}

/// One tool call of a parsed turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call id: the model's own where the format writes one, else made by the parser
    /// (9 letters and digits, from a hash of the ids before the call and its index).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments' text exactly as the model wrote it.
    pub arguments_text: String,
    /// The arguments as JSON when that text is valid JSON (`None`: keep the text).
    pub arguments: Option<serde_json::Value>,
    /// The model wrote the arguments before the name: the message's `function` dict keeps that
    /// order, since templates that dump it whole (`function | tojson`) write its keys in order.
    pub arguments_first: bool,
}

/// What ended the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A stop token.
    Token(u32),
    /// No stop token: the ids ran out (the length limit).
    Length,
}

/// A completion read back into an assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCompletion {
    /// The content, after undoing the template's trim.
    pub content: String,
    /// The reasoning, when the turn has a reasoning block.
    pub reasoning: Option<String>,
    /// The message key of the reasoning.
    pub reasoning_key: &'static str,
    /// The tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// What ended the turn.
    pub stop: Stop,
    /// The turn ends in calls that wait for their results.
    pub tool_call_pending: bool,
    /// Text the grammar does not read, verbatim, from the first thing it could not place
    /// (an unexpected control token, a malformed or unfinished call, text after the calls).
    pub remainder: String,
    /// Ids after the stop token.
    pub after_stop: Vec<u32>,
    /// The content is null, not empty: the turn has calls and no content, and the template
    /// writes calls only for a null content ([`Grammar::null_content_with_calls`]).
    pub content_null: bool,
    /// What the completion got wrong, in order (empty for a well-formed turn; a turn cut by
    /// the length limit says so in [`ParsedCompletion::stop`], and here only for what it left
    /// open).
    pub problems: Vec<Problem>,
}

/// What kind of thing a completion got wrong (see [`Problem`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// A control token the grammar does not place where it came.
    UnexpectedToken,
    /// A call block that is not a call: invalid JSON, no name, no arguments, unknown keys, a
    /// list that is not a list of calls.
    MalformedCall,
    /// The ids ended inside a call (the length limit, or a stop token inside it).
    UnclosedCall,
    /// The reasoning block never closed.
    UnclosedReasoning,
    /// Text after the calls, where the format writes none.
    TextAfterCalls,
    /// A harmony message the grammar does not read (a preamble, a built-in tool, a second
    /// analysis, text between messages).
    UnreadMessage,
    /// A call's arguments are not valid JSON (kept as text).
    InvalidArguments,
    /// A call names a function not among the tools offered.
    UnknownTool,
}

impl ProblemKind {
    /// Its name (`"unclosed_call"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::UnexpectedToken => "unexpected_token",
            ProblemKind::MalformedCall => "malformed_call",
            ProblemKind::UnclosedCall => "unclosed_call",
            ProblemKind::UnclosedReasoning => "unclosed_reasoning",
            ProblemKind::TextAfterCalls => "text_after_calls",
            ProblemKind::UnreadMessage => "unread_message",
            ProblemKind::InvalidArguments => "invalid_arguments",
            ProblemKind::UnknownTool => "unknown_tool",
        }
    }
}

/// Something the completion got wrong: what, where (the index of the id among those fed where
/// it starts), and a detail. The text stays in the message or the remainder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What.
    pub kind: ProblemKind,
    /// The index of the id where it starts.
    pub index: usize,
    /// A short description.
    pub detail: String,
}

/// What a stream sends as it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// More content.
    Content(String),
    /// More reasoning.
    Reasoning(String),
    /// A call started: its index, id (`None` where the format writes the id after the
    /// arguments; the final message has it) and name.
    ToolCallStart {
        index: usize,
        id: Option<String>,
        name: String,
    },
    /// More of a call's arguments text.
    ToolCallArguments { index: usize, text: String },
}

/// A text field that streams what its final, trimmed value will hold.
#[derive(Debug, Clone, Default)]
struct Field {
    raw: String,
    /// Where the value starts in `raw`, once a character the leading trim keeps was seen.
    start: Option<usize>,
    /// The end of what can be sent: before trailing characters the trim may remove.
    stable: usize,
    /// Bytes of `raw` already sent.
    sent: usize,
}

impl Field {
    fn push(&mut self, text: &str, trim: Trim, hold_newline: bool) {
        let base = self.raw.len();
        self.raw.push_str(text);
        if self.start.is_none() {
            if let Some((i, _)) = text.char_indices().find(|&(_, c)| !trim.leading(c)) {
                self.start = Some(base + i);
            }
        }
        let Some(start) = self.start else { return };
        if let Some((i, c)) = text.char_indices().rev().find(|&(_, c)| !trim.trailing(c)) {
            self.stable = (base + i + c.len_utf8()).max(start);
        }
        if hold_newline && self.raw.ends_with('\n') && self.stable == self.raw.len() {
            self.stable -= 1;
        }
        self.stable = self.stable.max(start);
    }

    /// The text that became sendable since the last call.
    fn take(&mut self) -> Option<String> {
        let start = self.start?;
        let from = self.sent.max(start);
        if self.stable > from {
            self.sent = self.stable;
            Some(self.raw[from..self.stable].to_string())
        } else {
            None
        }
    }

    /// The part of `value` (this field's final value) not sent yet.
    fn unsent<'v>(&self, value: &'v str) -> &'v str {
        let start = self.start.unwrap_or(0);
        &value[self.sent.saturating_sub(start).min(value.len())..]
    }

    /// The final value: trimmed, and without the template's `\n` before a call block.
    fn value(&self, trim: Trim, before_call: bool) -> String {
        let Some(start) = self.start else {
            return String::new();
        };
        let mut v = self.raw[start..].trim_end_matches(|c| trim.trailing(c));
        if before_call {
            v = v.strip_suffix('\n').unwrap_or(v);
        }
        v.to_string()
    }
}

/// Where the parser is in the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    Content,
    Reasoning,
    /// Inside a tagged call block.
    Call,
    /// Between or after tagged call blocks: only whitespace may come.
    BetweenCalls,
    /// After the list marker.
    List,
    /// After `<|python_tag|>`.
    Python,
    /// Harmony: a message header, up to `<|message|>`.
    Header,
    /// Harmony: a call's body (its arguments).
    HarmonyCall,
    /// Harmony: after `<|end|>`, before `<|start|>`.
    BetweenMessages,
    /// Harmony: a call a stop token ended.
    CallDone,
    /// DeepSeek: in the calls block, between calls (only whitespace).
    DsCalls,
    /// DeepSeek: a call's type, up to `<｜tool▁sep｜>`.
    DsType,
    /// DeepSeek: a call's `NAME\n```json\nARGS\n````.
    DsCall,
    /// DeepSeek: after `<｜tool▁calls▁end｜>` (only whitespace).
    DsClosed,
    /// Text the grammar does not read.
    Remainder,
}

/// One call being read.
#[derive(Debug, Clone)]
struct CallText {
    raw: String,
    scanner: ObjectScanner,
    started: bool,
    args_sent: usize,
    id: String,
    /// The index of the id where the call starts.
    opened_at: usize,
    /// The name, where the syntax writes it outside the JSON (harmony's header, DeepSeek's
    /// name line); the arguments are then `raw[span]` (all of `raw` when `span` is `None`).
    name: Option<String>,
    span: Option<(usize, usize)>,
}

/// Reads a completion's ids as they come.
#[derive(Debug, Clone)]
pub struct StreamParser {
    grammar: Arc<Grammar>,
    table: Arc<TokenText>,
    text: StreamState,
    region: Region,
    content: Field,
    reasoning: Option<Field>,
    reasoning_closed: bool,
    calls: Vec<CallText>,
    list: String,
    list_pos: usize,
    list_state: ListState,
    /// Where the list closed (just after its `]`).
    list_end: Option<usize>,
    python: String,
    remainder: String,
    stop: Option<u32>,
    after_stop: Vec<u32>,
    /// FNV-1a of the ids read, for call ids.
    hash: u64,
    deltas: Vec<Delta>,
    decoded: String,
    finished: Option<ParsedCompletion>,
    /// Bytes of the grammar's content prefix not yet seen.
    prefix_left: usize,
    /// Whitespace after a call block, kept until it is known to lead to another block.
    between: String,
    /// Whether to produce deltas (a one-shot parse does not).
    streaming: bool,
    /// Harmony: the header read so far; DeepSeek: the call's type.
    header: String,
    /// Harmony: the header starts with its author (not the first message).
    header_role: bool,
    /// Harmony: a final message was read.
    final_seen: bool,
    /// The current block verbatim (harmony: the message's header; DeepSeek: the calls block),
    /// which goes to the remainder if the block does not end as the grammar says.
    block: String,
    /// Ids read so far (the index of the next one).
    index: usize,
    /// Where the open block (reasoning, call, list, header) started.
    opened_at: usize,
    problems: Vec<Problem>,
    /// The names of the tools offered (`None`: not checked).
    tools: Option<Arc<Vec<String>>>,
    /// Where the text in `between` started.
    between_at: usize,
}

/// Where the list of a [`CallSyntax::List`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListState {
    /// Whitespace, then `[`.
    Open,
    /// Whitespace, then `{` (a call) or `]` (only when no call came yet).
    Item,
    /// Inside a call.
    InCall,
    /// Whitespace, then `,` or `]`.
    AfterItem,
    /// After `]`: only whitespace.
    Closed,
    Invalid,
}

/// An id the vocabulary does not have, at its index in the completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownToken {
    /// Its index among the ids fed.
    pub index: usize,
    /// The id.
    pub id: u32,
}

impl StreamParser {
    /// A parser of one turn by `grammar`, decoding with `table`.
    pub fn new(grammar: Arc<Grammar>, table: Arc<TokenText>) -> Self {
        StreamParser {
            grammar,
            table,
            text: StreamState::continuation(),
            region: Region::Content,
            content: Field::default(),
            reasoning: None,
            reasoning_closed: false,
            calls: Vec::new(),
            list: String::new(),
            list_pos: 0,
            list_state: ListState::Open,
            list_end: None,
            python: String::new(),
            remainder: String::new(),
            stop: None,
            after_stop: Vec::new(),
            hash: 0xcbf2_9ce4_8422_2325,
            deltas: Vec::new(),
            decoded: String::new(),
            finished: None,
            prefix_left: 0,
            between: String::new(),
            streaming: true,
            header: String::new(),
            header_role: false,
            final_seen: false,
            block: String::new(),
            index: 0,
            opened_at: 0,
            problems: Vec::new(),
            tools: None,
            between_at: 0,
        }
        .with_prefix()
    }

    fn with_prefix(mut self) -> Self {
        self.prefix_left = self.grammar.content_prefix.len();
        if let CallSyntax::Harmony(_) = self.grammar.calls {
            // The generation prompt ends with `<|start|>assistant`: the header comes first.
            self.region = Region::Header;
        }
        self
    }

    /// Check every call's name against the tools offered (a [`ProblemKind::UnknownTool`] for
    /// a name not among them).
    pub fn with_tools(mut self, names: Option<Arc<Vec<String>>>) -> Self {
        self.tools = names;
        self
    }

    /// The grammar it reads by.
    pub fn grammar(&self) -> &Grammar {
        &self.grammar
    }

    /// Whether `id` is in the vocabulary.
    pub fn knows(&self, id: u32) -> bool {
        self.table.knows(id)
    }

    /// Whether a stop token was read.
    pub fn stopped(&self) -> bool {
        self.stop.is_some()
    }

    /// Read `ids`; `index` is the position of the first among all ids fed (for errors).
    pub fn feed(&mut self, ids: &[u32], index: usize) -> Result<(), UnknownToken> {
        for (k, &id) in ids.iter().enumerate() {
            self.push(id).map_err(|_| UnknownToken {
                index: index + k,
                id,
            })?;
        }
        Ok(())
    }

    fn problem(&mut self, kind: ProblemKind, index: usize, detail: impl Into<String>) {
        self.problems.push(Problem {
            kind,
            index,
            detail: detail.into(),
        });
    }

    /// The index of the id being read.
    fn current(&self) -> usize {
        self.index.saturating_sub(1)
    }

    fn emit(&mut self, delta: Delta) {
        if self.streaming {
            self.deltas.push(delta);
        }
    }

    /// The deltas produced since the last call.
    pub fn take_deltas(&mut self) -> Vec<Delta> {
        std::mem::take(&mut self.deltas)
    }

    /// Read one id.
    pub fn push(&mut self, id: u32) -> Result<(), UnknownToken> {
        // Ids after the stop are kept, not read, but they must be ids too.
        if !self.table.knows(id) {
            return Err(UnknownToken { index: 0, id });
        }
        if self.stop.is_some() || self.finished.is_some() {
            self.after_stop.push(id);
            return Ok(());
        }
        let at = self.index;
        self.index += 1;
        for b in id.to_le_bytes() {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        if let Some(stop) = self.grammar.stop(id) {
            self.flush_text();
            if self.region == Region::HarmonyCall {
                self.region = Region::CallDone;
            }
            self.stop = Some(stop.id);
            return Ok(());
        }
        if self.region != Region::Remainder && self.grammar.is_control(id) {
            self.flush_text();
            let known = self.problems.len();
            let region = self.region;
            if self.marker(id) {
                if region != self.region {
                    self.opened_at = at;
                }
                return Ok(());
            }
            // A control token the grammar does not expect here: the rest is not read.
            if self.problems.len() == known && self.region != Region::Remainder {
                let detail = format!("{:?}", self.token_text(id));
                self.problem(ProblemKind::UnexpectedToken, at, detail);
            }
            self.settle();
            self.region = Region::Remainder;
        }
        let mut out = std::mem::take(&mut self.decoded);
        out.clear();
        self.text
            .push(&self.table, id, &mut out)
            .map_err(|_| UnknownToken { index: 0, id })?;
        self.text_in(&out);
        self.decoded = out;
        Ok(())
    }

    /// Write the text held by the decoder (before a marker or the end).
    fn flush_text(&mut self) {
        let mut out = String::new();
        self.text.finish(&self.table, &mut out);
        if !out.is_empty() {
            self.text_in(&out);
        }
    }

    /// A control token the grammar may place here; false when it may not.
    fn marker(&mut self, id: u32) -> bool {
        let g = Arc::clone(&self.grammar);
        if let Some((open, close)) = g.reasoning {
            if id == open
                && self.region == Region::Content
                && self.reasoning.is_none()
                && self.content.start.is_none()
            {
                self.region = Region::Reasoning;
                self.reasoning = Some(Field::default());
                return true;
            }
            if id == close && self.region == Region::Reasoning {
                self.region = Region::Content;
                self.reasoning_closed = true;
                return true;
            }
        }
        match g.calls {
            CallSyntax::Tagged { open, close } => {
                if id == open && matches!(self.region, Region::Content | Region::BetweenCalls) {
                    self.region = Region::Call;
                    self.between.clear();
                    self.open_call();
                    return true;
                }
                if id == close && self.region == Region::Call {
                    let call = self.calls.last().expect("a call is open");
                    let rest_ok = call
                        .scanner
                        .closed_at()
                        .is_some_and(|end| call.raw[end..].trim().is_empty());
                    if !rest_ok || !self.call_complete(self.calls.len() - 1) {
                        // A malformed call: it and everything after it are the remainder.
                        let (at, n) = (self.opened_at, self.calls.len() - 1);
                        self.problem(
                            ProblemKind::MalformedCall,
                            at,
                            format!("call {n} is not a JSON object with a name and arguments"),
                        );
                        let call = self.calls.pop().expect("a call is open");
                        self.remainder.push_str(&self.token_text(open));
                        self.remainder.push_str(&call.raw);
                        self.region = Region::Remainder;
                        return false;
                    }
                    self.region = Region::BetweenCalls;
                    return true;
                }
            }
            CallSyntax::List { marker } => {
                if id == marker && self.region == Region::Content {
                    self.region = Region::List;
                    return true;
                }
            }
            CallSyntax::Llama3 { python_tag } => {
                if id == python_tag && self.region == Region::Content {
                    self.region = Region::Python;
                    return true;
                }
            }
            CallSyntax::Harmony(h) => return self.harmony_marker(id, h),
            CallSyntax::DeepSeek(d) => return self.deepseek_marker(id, d),
            CallSyntax::None => {}
        }
        false
    }

    /// A harmony token where it may come: `<|channel|>` and `<|constrain|>` in a header,
    /// `<|message|>` after a header the grammar reads (at most one analysis, then the final
    /// answer or one call), `<|end|>` after the analysis, `<|start|>` after `<|end|>`.
    fn harmony_marker(&mut self, id: u32, h: HarmonyTokens) -> bool {
        match self.region {
            Region::Header if id == h.channel || Some(id) == h.constrain => {
                let text = self.token_text(id);
                self.header.push_str(&text);
                self.block.push_str(&text);
                true
            }
            Region::Header if id == h.message => {
                let channel = self.token_text(h.channel);
                let unread = |p: &mut Self| {
                    let (at, detail) = (p.opened_at, format!("header {:?}", p.block));
                    p.problem(ProblemKind::UnreadMessage, at, detail);
                    false
                };
                let Some(kind) = syntax::harmony_header(&self.header, self.header_role, &channel)
                else {
                    return unread(self);
                };
                let nothing_yet =
                    self.content.start.is_none() && !self.final_seen && self.calls.is_empty();
                match kind {
                    HarmonyMessage::Analysis if nothing_yet && self.reasoning.is_none() => {
                        self.reasoning = Some(Field::default());
                        self.region = Region::Reasoning;
                    }
                    HarmonyMessage::Final if nothing_yet => {
                        self.final_seen = true;
                        self.region = Region::Content;
                    }
                    HarmonyMessage::Call(name) if nothing_yet => {
                        self.open_call();
                        let index = self.calls.len() - 1;
                        let call = &mut self.calls[index];
                        call.name = Some(name.clone());
                        call.started = true;
                        let id = Some(call.id.clone());
                        self.emit(Delta::ToolCallStart { index, id, name });
                        self.region = Region::HarmonyCall;
                    }
                    _ => return unread(self),
                }
                let text = self.token_text(id);
                self.block.push_str(&text);
                true
            }
            Region::Reasoning if id == h.end => {
                self.region = Region::BetweenMessages;
                self.block.clear();
                true
            }
            Region::BetweenMessages if id == h.start => {
                self.region = Region::Header;
                self.header.clear();
                self.header_role = true;
                self.block = self.token_text(id);
                true
            }
            _ => false,
        }
    }

    /// A DeepSeek V3 tool-call token where it may come.
    fn deepseek_marker(&mut self, id: u32, d: DeepSeekTokens) -> bool {
        match self.region {
            Region::Content if id == d.calls_begin => {
                self.region = Region::DsCalls;
                self.block = self.token_text(id);
                true
            }
            Region::DsCalls if id == d.call_begin => {
                self.region = Region::DsType;
                self.header.clear();
                let text = self.token_text(id);
                self.block.push_str(&text);
                true
            }
            Region::DsType if id == d.sep && self.header == "function" => {
                let text = self.token_text(id);
                self.block.push_str(&text);
                self.open_call();
                self.region = Region::DsCall;
                true
            }
            Region::DsCall if id == d.call_end => {
                let index = self.calls.len() - 1;
                let call = &mut self.calls[index];
                let Some((name, a, b)) = deepseek_call(&call.raw) else {
                    let (at, n) = (self.opened_at, index);
                    self.problem(
                        ProblemKind::MalformedCall,
                        at,
                        format!("call {n} is not NAME, then a ```json fence"),
                    );
                    return false;
                };
                call.name = Some(name);
                call.span = Some((a, b));
                self.deepseek_deltas(index, true);
                let text = self.token_text(id);
                let call = &self.calls[index];
                self.block.push_str(&call.raw);
                self.block.push_str(&text);
                self.region = Region::DsCalls;
                true
            }
            Region::DsCalls if id == d.calls_end && !self.calls.is_empty() => {
                self.region = Region::DsClosed;
                self.block.clear();
                true
            }
            _ => false,
        }
    }

    /// Stream a DeepSeek call: its start once the name line is complete, then its arguments,
    /// holding back what may be the closing `\n```` until `last`.
    fn deepseek_deltas(&mut self, index: usize, last: bool) {
        const FENCE: &str = "\n```json\n";
        const CLOSE: &str = "\n```";
        let call = &mut self.calls[index];
        let Some(line) = call.raw.find('\n') else {
            return;
        };
        if !call.started {
            if call.raw.len() < line + FENCE.len() || !call.raw[line..].starts_with(FENCE) {
                return;
            }
            call.started = true;
            let (id, name) = (call.id.clone(), call.raw[..line].to_string());
            self.emit(Delta::ToolCallStart {
                index,
                id: Some(id),
                name,
            });
        }
        let call = &mut self.calls[index];
        let from = (line + FENCE.len()).max(call.args_sent);
        let end = match (last, call.span) {
            (true, Some((_, b))) => b,
            _ => {
                // Hold back a suffix that may start the closing fence.
                let raw = call.raw.as_str();
                let held = (1..=CLOSE.len().min(raw.len()))
                    .rev()
                    .find(|&k| {
                        raw.is_char_boundary(raw.len() - k)
                            && CLOSE.starts_with(&raw[raw.len() - k..])
                    })
                    .unwrap_or(0);
                raw.len() - held
            }
        };
        if end > from {
            let text = call.raw[from..end].to_string();
            call.args_sent = end;
            self.emit(Delta::ToolCallArguments { index, text });
        }
    }

    /// At the end: a problem for the block left open (a call, a list, a header, a reasoning
    /// block), where it started.
    fn open_block_problems(&mut self) {
        let why = if self.stop.is_some() {
            "a stop token came inside it"
        } else {
            "the ids ran out inside it"
        };
        let kind = match self.region {
            Region::Call
            | Region::HarmonyCall
            | Region::DsCalls
            | Region::DsType
            | Region::DsCall => Some(ProblemKind::UnclosedCall),
            Region::List if self.list_end.is_none() => Some(match self.list_state {
                ListState::Invalid => ProblemKind::MalformedCall,
                _ => ProblemKind::UnclosedCall,
            }),
            Region::List if !self.list[self.list_end.unwrap_or(0)..].is_empty() => {
                Some(ProblemKind::TextAfterCalls)
            }
            Region::BetweenCalls | Region::DsClosed if !self.between.is_empty() => {
                Some(ProblemKind::TextAfterCalls)
            }
            Region::Header if !self.block.is_empty() => Some(ProblemKind::UnreadMessage),
            // `<|python_tag|>` with nothing a call can be read from.
            Region::Python => Some(ProblemKind::MalformedCall),
            Region::Reasoning => Some(ProblemKind::UnclosedReasoning),
            _ => None,
        };
        if let Some(kind) = kind {
            let detail = match kind {
                ProblemKind::UnclosedReasoning => format!("the reasoning never closed: {why}"),
                ProblemKind::UnreadMessage => format!("a message header never ended: {why}"),
                ProblemKind::TextAfterCalls => {
                    format!("text after the calls: {:?}", self.list_tail())
                }
                ProblemKind::MalformedCall if self.region == Region::Python => {
                    "no call after the python tag".to_string()
                }
                ProblemKind::MalformedCall => {
                    "the list of calls is not a JSON list of calls".to_string()
                }
                _ => format!("the call never closed: {why}"),
            };
            let at = match self.region {
                Region::BetweenCalls | Region::DsClosed => self.between_at,
                _ => self.opened_at,
            };
            self.problem(kind, at, detail);
        }
    }

    /// What follows the calls at the end (after a closed list, or after the last call block).
    fn list_tail(&self) -> &str {
        match self.region {
            Region::List => &self.list[self.list_end.unwrap_or(0)..],
            _ => &self.between,
        }
    }

    /// Move what is unfinished in the current region into the remainder: an open call block,
    /// a list that did not close (its calls with it), text after a closed list or the last
    /// call block, `<|python_tag|>` text. Called when an unexpected control token ends the
    /// parse and at the end.
    fn settle(&mut self) {
        let g = Arc::clone(&self.grammar);
        let mut moved = String::new();
        match (self.region, g.calls) {
            (Region::Call, CallSyntax::Tagged { open, .. }) => {
                let call = self.calls.pop().expect("a call is open");
                moved.push_str(&self.token_text(open));
                moved.push_str(&call.raw);
            }
            (Region::List, CallSyntax::List { marker }) => match self.list_end {
                Some(end) => moved.push_str(&self.list[end..]),
                None => {
                    self.calls.clear();
                    moved.push_str(&self.token_text(marker));
                    moved.push_str(&self.list);
                }
            },
            (Region::Python, CallSyntax::Llama3 { python_tag }) => {
                moved.push_str(&self.token_text(python_tag));
                moved.push_str(&self.python);
                self.python.clear();
            }
            // Whitespace after the last call: the template writes none there.
            (Region::BetweenCalls | Region::DsClosed, _) => moved.push_str(&self.between),
            (Region::Header, _) => moved.push_str(&self.block),
            (Region::HarmonyCall, _) => {
                let call = self.calls.pop().expect("a call is open");
                moved.push_str(&self.block);
                moved.push_str(&call.raw);
            }
            // A DeepSeek calls block that did not close: its calls with it.
            (Region::DsCalls | Region::DsType | Region::DsCall, _) => {
                moved.push_str(&self.block);
                if self.region == Region::DsCall {
                    moved.push_str(&self.calls.last().expect("a call is open").raw);
                }
                self.calls.clear();
            }
            _ => {}
        }
        self.between.clear();
        if !moved.is_empty() {
            moved.push_str(&self.remainder);
            self.remainder = moved;
        }
    }

    /// The text of a token, as the decoder writes it alone.
    fn token_text(&self, id: u32) -> String {
        self.table.decode_continuation(&[id]).unwrap_or_default()
    }

    /// Start reading the next call (its text comes next).
    fn open_call(&mut self) {
        let id = self.call_id(self.calls.len());
        self.calls.push(CallText {
            raw: String::new(),
            scanner: ObjectScanner::new(0, "arguments"),
            started: false,
            args_sent: 0,
            id,
            opened_at: self.current(),
            name: None,
            span: None,
        });
    }

    /// An id for call `index`: 9 letters and digits from the ids read so far.
    fn call_id(&self, index: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut h = self.hash ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (0..9)
            .map(|_| {
                h = h.wrapping_mul(0x100_0000_01b3) ^ (h >> 29);
                ALPHABET[(h % ALPHABET.len() as u64) as usize] as char
            })
            .collect()
    }

    fn text_in(&mut self, text: &str) {
        // The grammar's plain fields, copied (no Arc clone: this runs once per id).
        let (prefix_all, calls) = (self.grammar.content_prefix, self.grammar.calls);
        let content_trim = if self.reasoning_closed {
            self.grammar.content_after_reasoning
        } else {
            self.grammar.content
        };
        let reasoning_trim = self.grammar.reasoning_trim;
        let mut text = text;
        if self.prefix_left > 0 && self.region == Region::Content {
            let prefix = &prefix_all[prefix_all.len() - self.prefix_left..];
            let common = prefix
                .bytes()
                .zip(text.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            if common == text.len() && common < prefix.len() {
                // All of this text is prefix, and more prefix may follow.
                self.prefix_left -= common;
                return;
            }
            // The prefix is complete, or the text is not it: stop looking (the prefix is one
            // ASCII space in every format, so nothing partial is lost).
            self.prefix_left = 0;
            text = &text[common..];
            if text.is_empty() {
                return;
            }
        }
        match self.region {
            Region::Content => {
                let hold = matches!(calls, CallSyntax::Tagged { .. });
                self.content.push(text, content_trim, hold);
                if self.streaming && !self.content_withheld() {
                    if let Some(d) = self.content.take() {
                        self.emit(Delta::Content(d));
                    }
                }
            }
            Region::Reasoning => {
                let field = self.reasoning.as_mut().expect("reasoning is open");
                field.push(text, reasoning_trim, false);
                if self.streaming {
                    if let Some(d) = field.take() {
                        self.emit(Delta::Reasoning(d));
                    }
                }
            }
            Region::Call => {
                let index = self.calls.len() - 1;
                let call = self.calls.last_mut().expect("a call is open");
                call.raw.push_str(text);
                call.scanner.feed(&call.raw);
                self.call_deltas(index);
            }
            Region::BetweenCalls => {
                if self.between.is_empty() {
                    self.between_at = self.current();
                }
                self.between.push_str(text);
                if !self.between.trim().is_empty() {
                    let at = self.between_at;
                    self.problem(ProblemKind::TextAfterCalls, at, "text after the last call");
                    self.region = Region::Remainder;
                    self.remainder.push_str(&std::mem::take(&mut self.between));
                }
            }
            Region::List => {
                self.list.push_str(text);
                self.scan_list();
            }
            Region::Python => self.python.push_str(text),
            Region::Header => {
                self.header.push_str(text);
                self.block.push_str(text);
            }
            Region::HarmonyCall => {
                let index = self.calls.len() - 1;
                self.calls[index].raw.push_str(text);
                self.emit(Delta::ToolCallArguments {
                    index,
                    text: text.to_string(),
                });
            }
            Region::DsType => {
                self.header.push_str(text);
                self.block.push_str(text);
            }
            Region::DsCall => {
                let index = self.calls.len() - 1;
                self.calls[index].raw.push_str(text);
                if self.streaming {
                    self.deepseek_deltas(index, false);
                }
            }
            Region::DsCalls | Region::DsClosed | Region::BetweenMessages => {
                let region = self.region;
                if region != Region::DsCalls && self.between.is_empty() {
                    self.between_at = self.current();
                }
                let held = if region == Region::DsCalls {
                    &mut self.block
                } else {
                    &mut self.between
                };
                held.push_str(text);
                if !text.trim().is_empty() || region == Region::BetweenMessages {
                    // Only whitespace may come here (nothing, between harmony messages).
                    let (kind, detail) = match region {
                        Region::BetweenMessages => {
                            (ProblemKind::UnreadMessage, "text between harmony messages")
                        }
                        Region::DsCalls => (ProblemKind::MalformedCall, "text between calls"),
                        _ => (ProblemKind::TextAfterCalls, "text after the calls"),
                    };
                    let at = if region == Region::DsClosed {
                        self.between_at
                    } else {
                        self.current()
                    };
                    self.problem(kind, at, detail);
                    if region == Region::BetweenMessages {
                        self.between.clear();
                    }
                    self.settle();
                    self.region = Region::Remainder;
                    if region == Region::BetweenMessages {
                        self.remainder.push_str(text);
                    }
                }
            }
            Region::CallDone => self.remainder.push_str(text),
            Region::Remainder => self.remainder.push_str(text),
        }
    }

    /// Llama 3's content may be a JSON call, decided at the end: it is not streamed when it
    /// starts with `{`.
    fn content_withheld(&self) -> bool {
        matches!(self.grammar.calls, CallSyntax::Llama3 { .. })
            && self
                .content
                .start
                .is_some_and(|s| self.content.raw[s..].starts_with('{'))
    }

    /// Whether call `index` has a name string and arguments.
    fn call_complete(&self, index: usize) -> bool {
        let call = &self.calls[index];
        let s = &call.scanner;
        s.name
            .is_some_and(|(a, b)| serde_json::from_str::<String>(&call.raw[a..b]).is_ok())
            && s.arguments.is_some_and(|(_, _, done)| done)
            && !s.duplicate
            && s.other_keys.is_empty()
            && (s.id.is_none() || self.grammar.writes_call_ids)
    }

    /// Send call `index`'s start once its name is known, then its arguments as they grow.
    fn call_deltas(&mut self, index: usize) {
        let writes_ids = self.grammar.writes_call_ids;
        let call = &mut self.calls[index];
        if !call.started {
            let Some((a, b)) = call.scanner.name else {
                return;
            };
            let Ok(name) = serde_json::from_str::<String>(&call.raw[a..b]) else {
                return;
            };
            call.started = true;
            let id = (!writes_ids).then(|| call.id.clone());
            self.emit(Delta::ToolCallStart { index, id, name });
        }
        let call = &mut self.calls[index];
        if let Some((a, b, _)) = call.scanner.arguments {
            let from = call.args_sent.max(a);
            if b > from {
                call.args_sent = b;
                let text = call.raw[from..b].to_string();
                self.emit(Delta::ToolCallArguments { index, text });
            }
        }
    }

    /// Advance the list scanner over what was added to the list text.
    fn scan_list(&mut self) {
        let len = self.list.len();
        while self.list_pos < len {
            match self.list_state {
                ListState::InCall => {
                    let index = self.calls.len() - 1;
                    let call = &mut self.calls[index];
                    call.raw.push_str(&self.list[self.list_pos..]);
                    call.scanner.feed(&call.raw);
                    let closed = call.scanner.closed_at();
                    let invalid = call.scanner.invalid();
                    self.call_deltas(index);
                    match closed {
                        Some(end) => {
                            // Give back what followed the object.
                            let call = &mut self.calls[index];
                            let extra = call.raw.len() - end;
                            call.raw.truncate(end);
                            self.list_pos = len - extra;
                            self.list_state = if self.call_complete(index) {
                                ListState::AfterItem
                            } else {
                                ListState::Invalid
                            };
                        }
                        None if invalid => self.list_state = ListState::Invalid,
                        None => self.list_pos = len,
                    }
                }
                ListState::Invalid | ListState::Closed => return,
                state => {
                    let b = self.list.as_bytes()[self.list_pos];
                    self.list_state = match (state, b) {
                        (_, b) if b.is_ascii_whitespace() => state,
                        (ListState::Open, b'[') => ListState::Item,
                        (ListState::Item, b'{') => {
                            self.open_call();
                            ListState::InCall
                        }
                        (ListState::Item, b']') if self.calls.is_empty() => ListState::Closed,
                        (ListState::AfterItem, b',') => ListState::Item,
                        (ListState::AfterItem, b']') => ListState::Closed,
                        _ => ListState::Invalid,
                    };
                    if self.list_state != ListState::InCall {
                        self.list_pos += 1;
                    }
                    if self.list_state == ListState::Closed {
                        self.list_end = Some(self.list_pos);
                    }
                }
            }
        }
    }

    /// End the turn (at a stop token, or when the ids ran out) and read it whole.
    pub fn finish(&mut self) -> ParsedCompletion {
        if let Some(done) = &self.finished {
            let mut done = done.clone();
            done.after_stop = self.after_stop.clone();
            return done;
        }
        self.flush_text();
        let g = Arc::clone(&self.grammar);
        let mut tool_calls = Vec::new();
        if let (Region::Python, CallSyntax::Llama3 { .. }) = (self.region, g.calls) {
            if let Some(call) = python_call(&self.python) {
                tool_calls.push(ToolCall {
                    id: self.call_id(0),
                    ..call
                });
                self.python.clear();
                self.region = Region::Content;
            }
        }
        self.open_block_problems();
        self.settle();
        let mut before_call = self.list_end.is_some();
        before_call |= !self.calls.is_empty() && matches!(g.calls, CallSyntax::Tagged { .. });
        // Where each call starts (the calls read from `self.calls` follow those before them).
        let mut starts = vec![self.opened_at; tool_calls.len()];
        for call in &self.calls {
            if let Some(name) = &call.name {
                let (a, b) = call.span.unwrap_or((0, call.raw.len()));
                let text = call.raw[a..b].to_string();
                starts.push(call.opened_at);
                tool_calls.push(ToolCall {
                    id: call.id.clone(),
                    name: name.clone(),
                    arguments: serde_json::from_str(&text).ok(),
                    arguments_text: text,
                    arguments_first: false,
                });
                continue;
            }
            let s = &call.scanner;
            let (Some((a, b)), Some((c, d, _))) = (s.name, s.arguments) else {
                continue;
            };
            let name: String = serde_json::from_str(&call.raw[a..b]).unwrap_or_default();
            let id = match s.id {
                Some((e, f)) => serde_json::from_str::<serde_json::Value>(&call.raw[e..f])
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| call.raw[e..f].to_string()),
                None => call.id.clone(),
            };
            let text = call.raw[c..d].to_string();
            starts.push(call.opened_at);
            tool_calls.push(ToolCall {
                id,
                name,
                arguments: serde_json::from_str(&text).ok(),
                arguments_text: text,
                arguments_first: c < a,
            });
        }
        let trim = if self.reasoning_closed {
            g.content_after_reasoning
        } else {
            g.content
        };
        let mut content = self.content.value(trim, before_call);
        if let CallSyntax::Llama3 { .. } = g.calls {
            if tool_calls.is_empty() && self.region == Region::Content {
                if let Some(call) = json_call(&content) {
                    tool_calls.push(ToolCall {
                        id: self.call_id(0),
                        ..call
                    });
                    content.clear();
                }
            }
        }
        if matches!(g.calls, CallSyntax::Llama3 { .. }) {
            for (index, call) in tool_calls.iter().enumerate() {
                self.emit(Delta::ToolCallStart {
                    index,
                    id: Some(call.id.clone()),
                    name: call.name.clone(),
                });
                self.emit(Delta::ToolCallArguments {
                    index,
                    text: call.arguments_text.clone(),
                });
            }
        }
        // What was held back: trailing text a trim might have removed, a `\n` a call might have
        // taken, Llama 3 content that might have been a call.
        let unsent = self.content.unsent(&content);
        if !unsent.is_empty() {
            self.emit(Delta::Content(unsent.to_string()));
        }
        let reasoning = self
            .reasoning
            .as_ref()
            .map(|f| f.value(g.reasoning_trim, false));
        if let (Some(field), Some(value)) = (&self.reasoning, &reasoning) {
            let unsent = field.unsent(value);
            if !unsent.is_empty() {
                self.emit(Delta::Reasoning(unsent.to_string()));
            }
        }
        if g.arguments_as_text {
            for call in &mut tool_calls {
                call.arguments = None;
            }
        } else {
            for (n, call) in tool_calls.iter().enumerate() {
                if call.arguments.is_none() {
                    let at = starts.get(n).copied().unwrap_or(self.opened_at);
                    self.problem(
                        ProblemKind::InvalidArguments,
                        at,
                        format!("call {n}'s arguments are not valid JSON (kept as text)"),
                    );
                }
            }
        }
        if let Some(tools) = self.tools.clone() {
            for (n, call) in tool_calls.iter().enumerate() {
                if !tools.contains(&call.name) {
                    let at = starts.get(n).copied().unwrap_or(self.opened_at);
                    self.problem(
                        ProblemKind::UnknownTool,
                        at,
                        format!(
                            "call {n} names {:?}, not among the tools offered",
                            call.name
                        ),
                    );
                }
            }
        }
        let content_null =
            g.null_content_with_calls && content.is_empty() && !tool_calls.is_empty();
        let remainder = self.remainder.clone();
        let stop = match self.stop {
            Some(id) => Stop::Token(id),
            None => Stop::Length,
        };
        let awaits = self
            .stop
            .and_then(|id| g.stop(id))
            .is_some_and(|s| s.awaits_tool);
        let done = ParsedCompletion {
            content,
            reasoning,
            reasoning_key: g.reasoning_key,
            tool_call_pending: stop != Stop::Length && (awaits || !tool_calls.is_empty()),
            tool_calls,
            stop,
            remainder,
            after_stop: self.after_stop.clone(),
            content_null,
            problems: self.problems.clone(),
        };
        self.finished = Some(done.clone());
        done
    }
}

/// Read a whole completion (the stream fed everything at once).
pub fn parse(
    grammar: Arc<Grammar>,
    table: Arc<TokenText>,
    ids: &[u32],
    tools: Option<Arc<Vec<String>>>,
) -> Result<ParsedCompletion, UnknownToken> {
    let mut parser = StreamParser::new(grammar, table).with_tools(tools);
    parser.streaming = false;
    parser.feed(ids, 0)?;
    Ok(parser.finish())
}

/// A DeepSeek V3 call's text after `<｜tool▁sep｜>`: `NAME\n```json\nARGS\n````, read into
/// the name and where the arguments are.
fn deepseek_call(raw: &str) -> Option<(String, usize, usize)> {
    let (name, rest) = raw.split_once("\n```json\n")?;
    let args = rest.strip_suffix("\n```")?;
    if name.is_empty() || name.contains('\n') {
        return None;
    }
    let a = name.len() + "\n```json\n".len();
    Some((name.to_string(), a, a + args.len()))
}

/// Llama 3's JSON call: the whole content is `{"name": "...", "parameters": {...}}` (as the
/// template writes it; llama-models also accepts a `"type": "function"` key).
fn json_call(content: &str) -> Option<ToolCall> {
    let mut scanner = ObjectScanner::new(0, "parameters");
    scanner.feed(content);
    let end = scanner.closed_at()?;
    if !content[end..].trim().is_empty() || scanner.duplicate || scanner.id.is_some() {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(content).ok()?;
    let object = value.as_object()?;
    let extra_ok = scanner.other_keys.iter().all(|k| k == "type")
        && object.get("type").is_none_or(|t| t == "function");
    let name = object.get("name")?.as_str()?.to_string();
    let (a, b, _) = scanner.arguments?;
    if !extra_ok {
        return None;
    }
    let text = content[a..b].to_string();
    Some(ToolCall {
        id: String::new(),
        name,
        arguments: serde_json::from_str(&text).ok(),
        arguments_text: text,
        arguments_first: false,
    })
}

/// Llama 3's `<|python_tag|>` text: `name.call(a="x", b="y")` is a built-in tool's call; any
/// other text is code for `code_interpreter` (llama-models' reading).
fn python_call(text: &str) -> Option<ToolCall> {
    if text.is_empty() {
        return None;
    }
    if let Some((name, args)) = builtin_call(text) {
        let arguments: serde_json::Map<String, serde_json::Value> = args
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        let value = serde_json::Value::Object(arguments);
        return Some(ToolCall {
            id: String::new(),
            name,
            arguments_text: value.to_string(),
            arguments: Some(value),
            arguments_first: false,
        });
    }
    let value = serde_json::json!({ "code": text });
    Some(ToolCall {
        id: String::new(),
        name: "code_interpreter".to_string(),
        arguments_text: value.to_string(),
        arguments: Some(value),
        arguments_first: false,
    })
}

/// `name.call(k="v", k2="v2")`, as Llama 3.1's template writes a built-in call (values are not
/// escaped, so a value ends at `"` followed by `, key="` or by the closing `)`).
fn builtin_call(text: &str) -> Option<(String, Vec<(String, String)>)> {
    let (name, rest) = text.split_once(".call(")?;
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident(name) {
        return None;
    }
    let mut body = rest.strip_suffix(')')?;
    let mut args = Vec::new();
    while !body.is_empty() {
        let (key, after) = body.split_once("=\"")?;
        if !ident(key) {
            return None;
        }
        // The value runs to the next `", key="` or to the final `"`.
        let mut end = None;
        let mut from = 0;
        while let Some(i) = after[from..].find("\", ") {
            let at = from + i;
            let next = &after[at + 3..];
            if next.split_once("=\"").is_some_and(|(k, _)| ident(k)) {
                end = Some((at, at + 3));
                break;
            }
            from = at + 1;
        }
        match end {
            Some((value_end, next)) => {
                args.push((key.to_string(), after[..value_end].to_string()));
                body = &after[next..];
            }
            None => {
                let value = after.strip_suffix('"')?;
                args.push((key.to_string(), value.to_string()));
                body = "";
            }
        }
    }
    Some((name.to_string(), args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_calls() {
        assert_eq!(
            builtin_call(r#"brave_search.call(query="a, b", n="2")"#),
            Some((
                "brave_search".into(),
                vec![("query".into(), "a, b".into()), ("n".into(), "2".into())]
            ))
        );
        assert_eq!(
            builtin_call("wolfram_alpha.call()"),
            Some(("wolfram_alpha".into(), vec![]))
        );
        assert_eq!(builtin_call("print(1)"), None);
        assert_eq!(python_call("print(1)").unwrap().name, "code_interpreter");
    }

    #[test]
    fn deepseek_calls() {
        let raw = "get_weather\n```json\n{\"city\": \"Paris\"}\n```";
        let (name, a, b) = deepseek_call(raw).unwrap();
        assert_eq!(
            (name.as_str(), &raw[a..b]),
            ("get_weather", "{\"city\": \"Paris\"}")
        );
        assert!(deepseek_call("get_weather\n{}").is_none());
        assert!(deepseek_call("\n```json\n{}\n```").is_none());
        assert!(deepseek_call("a\nb\n```json\n{}\n```").is_none());
    }

    #[test]
    fn llama3_json_calls() {
        let call = json_call(r#"{"name": "f", "parameters": {"a": 1}}"#).unwrap();
        assert_eq!(
            (call.name.as_str(), call.arguments_text.as_str()),
            ("f", r#"{"a": 1}"#)
        );
        assert!(json_call(r#"{"name": "f", "parameters": {"a": 1}} and more"#).is_none());
        assert!(json_call(r#"{"name": "f", "other": 1, "parameters": {}}"#).is_none());
        assert!(json_call("The answer is {1}").is_none());
    }

    #[test]
    fn fields_stream_their_trimmed_value() {
        let mut f = Field::default();
        let mut sent = String::new();
        for chunk in ["\n\n", " Hel", "lo ", "\n", "world", "\n\n"] {
            f.push(chunk, Trim::Whitespace, false);
            if let Some(d) = f.take() {
                sent.push_str(&d);
            }
        }
        assert_eq!(f.value(Trim::Whitespace, false), "Hello \nworld");
        assert_eq!(sent, "Hello \nworld");
        let mut f = Field::default();
        f.push("Sure.\n", Trim::None, true);
        assert_eq!(f.take().as_deref(), Some("Sure."));
        assert_eq!(f.value(Trim::None, true), "Sure.");
        assert_eq!(f.value(Trim::None, false), "Sure.\n");
    }
}
