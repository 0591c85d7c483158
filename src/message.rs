//! The conversation model: messages as chat templates see them.
//!
//! A [`Message`] mirrors the dict that `apply_chat_template` receives after transformers'
//! own preprocessing: keys whose value is `None` are absent, and the reasoning aliases
//! (`reasoning_content`, `thinking`, `reasoning`) are folded into one field. Template
//! arguments ([`TemplateArgs`]) and what makes a conversation a tool conversation
//! ([`uses_tools`], see [`crate::input::tools`]) are defined here, below every renderer.

use std::collections::BTreeMap;

/// Keyword arguments for the template (`date_string`, `enable_thinking`, ...).
pub type TemplateArgs = BTreeMap<String, TemplateValue>;

/// One part of a multi-part message content (`[{"type": "text", "text": ...}, ...]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentPart {
    /// A `{"type": "text", "text": ...}` part.
    Text(String),
    /// Any other part (image, audio, ...); only its `type` is kept.
    Other { kind: String },
}

/// The `content` of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A plain string.
    Text(String),
    /// A list of typed parts.
    Parts(Vec<ContentPart>),
}

/// The reasoning aliases in the order transformers reads them: the first one set is a
/// message's reasoning ([`Message::reasoning_content`]), and templates read it under any of
/// them. Spelled once here; the binding's interned keys (`python/convert.rs`) follow it.
pub const REASONING_KEYS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// One chat message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    /// The role string, passed through as given (`"user"`, `"assistant"`, `"system"`, ...).
    pub role: String,
    /// The content; `None` when the key is missing or `None`.
    pub content: Option<Content>,
    /// Reasoning text: the first of `reasoning_content`, `thinking`, `reasoning` that is set
    /// (transformers copies it under all three names before rendering).
    pub reasoning_content: Option<String>,
    /// Whether the message carries a non-`None` `tool_calls` key, and how many calls it
    /// lists (`None` when `tool_calls` is not a list). Tool calls are rendered by a later
    /// version of the formats; today every format rejects them explicitly.
    pub tool_calls: Option<Option<usize>>,
    /// The message exactly as the caller passed it (every key, `None` values dropped), when
    /// the caller provided it. The Jinja path renders from this, so templates see
    /// keys the fields above do not model (`tool_call_id`, `name`, tool call arguments...).
    pub raw: Option<std::sync::Arc<serde_json::Map<String, serde_json::Value>>>,
    /// The caller's `train` key: whether a loss mask trains this message's body, overriding
    /// the `train_on` policy (see [`crate::training`]). Templates ignore it.
    pub train: Option<bool>,
}

impl Message {
    /// A message with a plain string content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: Some(Content::Text(content.into())),
            ..Default::default()
        }
    }

    /// Every text of the message a template writes from it: the string content or the text
    /// parts, then the reasoning.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        let (whole, parts) = match &self.content {
            Some(Content::Text(s)) => (Some(s.as_str()), &[][..]),
            Some(Content::Parts(parts)) => (None, parts.as_slice()),
            None => (None, &[][..]),
        };
        whole
            .into_iter()
            .chain(parts.iter().filter_map(|p| match p {
                ContentPart::Text(t) => Some(t.as_str()),
                ContentPart::Other { .. } => None,
            }))
            .chain(self.reasoning_content.as_deref())
    }

    /// The content as a string, or `None` if it is missing or a list of parts.
    pub fn text(&self) -> Option<&str> {
        match &self.content {
            Some(Content::Text(s)) => Some(s),
            _ => None,
        }
    }
}

/// A value passed to the template as a keyword argument (`date_string=...`,
/// `enable_thinking=...`).
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateValue {
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// Python's `None`.
    None,
    /// Any other JSON-like value (float, list, dict), passed through to the generic Jinja
    /// path; native formats reject it. Shared, not copied, by copies of the arguments (a
    /// session's, its renders' memo): two copies of one value compare equal by pointer.
    Json(std::sync::Arc<serde_json::Value>),
}

impl TemplateValue {
    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            TemplateValue::Str(_) => "str",
            TemplateValue::Bool(_) => "bool",
            TemplateValue::Int(_) => "int",
            TemplateValue::None => "None",
            TemplateValue::Json(v) => match **v {
                serde_json::Value::Number(_) => "float",
                serde_json::Value::Array(_) => "list",
                serde_json::Value::Object(_) => "dict",
                _ => "value",
            },
        }
    }
}

impl TemplateValue {
    /// The value as JSON, as the template sees it (borrowed where it is JSON already).
    pub fn to_json(&self) -> std::borrow::Cow<'_, serde_json::Value> {
        use std::borrow::Cow;
        match self {
            TemplateValue::Str(s) => Cow::Owned(serde_json::Value::String(s.clone())),
            TemplateValue::Bool(b) => Cow::Owned(serde_json::Value::Bool(*b)),
            TemplateValue::Int(i) => Cow::Owned(serde_json::Value::from(*i)),
            TemplateValue::None => Cow::Owned(serde_json::Value::Null),
            TemplateValue::Json(v) => Cow::Borrowed(v),
        }
    }
}

/// Token texts that end a turn *because the model called a tool*, where a format tells them
/// apart from the tokens that end an answer: Llama 3.1+ ends a built-in tool call
/// (`<|python_tag|>...`) with `<|eom_id|>` ("end of message, a tool result follows"), gpt-oss
/// ends a call with `<|call|>`. Formats whose tool calls end like any answer (ChatML/Qwen
/// `</tool_call><|im_end|>`, Mistral `[TOOL_CALLS]...</s>`) have none.
pub const TOOL_CALL_STOP_TOKENS: &[&str] = &["<|eom_id|>", "<|call|>"];

/// Template arguments that carry tool or retrieval definitions.
pub const TOOL_ARGUMENTS: &[&str] = &[
    "tools",
    "documents",
    "builtin_tools",
    "custom_tools",
    "tools_in_user_message",
];

/// Roles of messages that carry tool results (`ipython` is Llama 3.1's name for them).
pub const TOOL_RESULT_ROLES: &[&str] = &["tool", "ipython"];

/// Whether `message` calls a tool or carries a tool result.
pub fn is_tool_message(message: &Message) -> bool {
    message.tool_calls.is_some() || TOOL_RESULT_ROLES.contains(&message.role.as_str())
}

/// Whether the conversation uses tools: a tool message, or a tool argument that is not `None`.
pub fn uses_tools(messages: &[Message], kwargs: &TemplateArgs) -> bool {
    messages.iter().any(is_tool_message)
        || TOOL_ARGUMENTS
            .iter()
            .any(|name| kwargs.get(*name).is_some_and(|v| *v != TemplateValue::None))
}
