//! mistral-common's request handling before tokenization: conversion of OpenAI-style dicts
//! (`ChatCompletionRequest.from_openai`), validation (its `test` mode for prompts, `finetuning`
//! mode for conversations that end with an assistant turn) and normalization (system prompts
//! collected, consecutive same-role messages joined with a blank line, tool calls and results
//! normalized, an empty user turn inserted where a conversation does not start with one).

use super::json::{self, LoadError, PyJson};
use super::schema;
use super::Version;
use crate::error::TemplateError;
use crate::message::{Content, ContentPart, Message};

/// The separator mistral-common joins aggregated contents with.
const JOIN: &str = "\n\n";

/// What `continue_final_message=True` requires (mistral-common's words).
pub const CONTINUE_FINAL_MESSAGE_ERROR: &str =
    "continue_final_message=True requires final message to be an assistant.";

/// A message role mistral-common knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `system` (or OpenAI's `developer`).
    System,
    /// `user`.
    User,
    /// `assistant`.
    Assistant,
    /// `tool`.
    Tool,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One tool call of an assistant message, normalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The function name.
    pub name: String,
    /// The arguments: the parsed JSON, or the string itself when it is not JSON.
    pub arguments: PyJson,
    /// The call id (`"null"` when the caller gave none, as mistral-common defaults it).
    pub id: String,
}

impl Call {
    /// The call as mistral-common writes it: `{"name", "arguments"}`, plus `"id"` from v3 on
    /// when there is one.
    pub fn to_json(&self, with_id: bool) -> PyJson {
        let mut items = vec![
            ("name".to_string(), PyJson::Str(self.name.clone())),
            ("arguments".to_string(), self.arguments.clone()),
        ];
        if with_id && !self.id.is_empty() && self.id != "null" {
            items.push(("id".to_string(), PyJson::Str(self.id.clone())));
        }
        PyJson::Dict(items)
    }
}

/// A message after normalization.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// Its role.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// The index of the first original message it comes from (`None` for the empty user turn
    /// mistral-common inserts).
    pub origin: Option<usize>,
    /// An assistant turn's tool calls (of all the messages joined into it).
    pub tool_calls: Vec<Call>,
    /// A tool result's `tool_call_id`.
    pub call_id: Option<String>,
    /// A tool result's `name`.
    pub name: Option<String>,
    /// The assistant turn is continued (`continue_final_message`): no `</s>`.
    pub prefix: bool,
}

impl Normalized {
    fn new(role: Role, content: String, origin: Option<usize>) -> Self {
        Normalized {
            role,
            content,
            origin,
            tool_calls: Vec::new(),
            call_id: None,
            name: None,
            prefix: false,
        }
    }
}

/// A normalized request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The messages (system messages are kept only by v7).
    pub messages: Vec<Normalized>,
    /// The system prompts joined with a blank line (versions before v7), if any.
    pub system_prompt: Option<String>,
    /// The available tools as mistral-common dumps them (`{"type": "function", "function":
    /// {"name", "description", "parameters"}}`); empty when there are none.
    pub tools: Vec<PyJson>,
}

/// What a request is built from besides the messages.
#[derive(Debug, Clone, Copy)]
pub struct RequestOptions<'a> {
    /// The tokenizer version.
    pub version: Version,
    /// The conversation-level `tools` list (`None`: no tools).
    pub tools: Option<&'a serde_json::Value>,
    /// `continue_final_message=True`: the last (assistant) message is left open.
    pub continue_final_message: bool,
}

/// One message as mistral-common's `from_openai` converts it.
struct Parsed {
    role: Role,
    /// The text (parts joined with a blank line, empty parts skipped); `None` without content.
    text: Option<String>,
    /// Python's truthiness of the content (a list of parts is true when it has any part).
    has_content: bool,
    /// `tool_calls` (`None` when the key is absent).
    tool_calls: Option<Vec<Call>>,
    call_id: Option<String>,
    name: Option<String>,
}

/// One message's text as mistral-common aggregates it: a string as is; text parts joined with
/// a blank line, empty parts skipped.
fn text_of(message: &Message, i: usize) -> Result<Option<String>, TemplateError> {
    Ok(match &message.content {
        None => None,
        Some(Content::Text(s)) => Some(s.clone()),
        Some(Content::Parts(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                match part {
                    ContentPart::Text(t) if t.is_empty() => {}
                    ContentPart::Text(t) => texts.push(t.as_str()),
                    ContentPart::Other { kind } => {
                        return Err(TemplateError::at(
                            i,
                            format!("content part {j} has type {kind:?}; chatids' mistral-common route encodes text only"),
                        ))
                    }
                }
            }
            Some(texts.join(JOIN))
        }
    })
}

/// Python's `re.match(r"^[...]{n,m}$", s)`: `$` also matches before one final newline.
fn matches_name(
    s: &str,
    allowed: impl Fn(char) -> bool,
    lengths: std::ops::RangeInclusive<usize>,
) -> bool {
    let s = s.strip_suffix('\n').unwrap_or(s);
    lengths.contains(&s.chars().count()) && s.chars().all(allowed)
}

/// A function name: `^[a-zA-Z0-9_-]{1,64}$`.
fn valid_function_name(s: &str) -> bool {
    matches_name(
        s,
        |c| c.is_ascii_alphanumeric() || c == '_' || c == '-',
        1..=64,
    )
}

/// A tool call id: `^[a-zA-Z0-9]{9}$`.
fn valid_call_id(s: &str) -> bool {
    matches_name(s, |c| c.is_ascii_alphanumeric(), 9..=9)
}

fn function_name_error(name: &str) -> String {
    format!(
        "Function name was {name} but must be a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum length of 64. (mistral-common)"
    )
}

/// A JSON string as mistral-common normalizes tool arguments and (before v7) tool results:
/// empty is `{}`, JSON is parsed, anything else stays a string.
pub(super) fn parse_json_content(s: &str, i: usize) -> Result<PyJson, TemplateError> {
    if s.is_empty() {
        return Ok(PyJson::Dict(Vec::new()));
    }
    match json::loads(s) {
        Ok(v) => Ok(v),
        Err(LoadError::NotJson) => Ok(PyJson::Str(s.to_string())),
        Err(LoadError::Unsupported(why)) => Err(TemplateError::at(
            i,
            format!("chatids cannot reproduce Python's json.loads here: {why}"),
        )),
    }
}

fn raw_of<'m>(
    m: &'m Message,
    i: usize,
    what: &str,
) -> Result<&'m serde_json::Map<String, serde_json::Value>, TemplateError> {
    m.raw.as_deref().ok_or_else(|| {
        TemplateError::at(
            i,
            format!("the mistral-common route reads {what} from the message dict; this message was passed without it (Message::raw)"),
        )
    })
}

fn parse_calls(m: &Message, i: usize) -> Result<Option<Vec<Call>>, TemplateError> {
    match m.tool_calls {
        None => return Ok(None),
        Some(None) => {
            return Err(TemplateError::at(
                i,
                "tool_calls must be a list (mistral-common)",
            ))
        }
        Some(Some(_)) => {}
    }
    let raw = raw_of(m, i, "'tool_calls'")?;
    let Some(serde_json::Value::Array(calls)) = raw.get("tool_calls") else {
        return Err(TemplateError::at(
            i,
            "tool_calls must be a list (mistral-common)",
        ));
    };
    let mut out = Vec::with_capacity(calls.len());
    for (j, call) in calls.iter().enumerate() {
        let bad = |what: &str| {
            TemplateError::at(
                i,
                format!("tool call {j}: {what} (mistral-common's ToolCall)"),
            )
        };
        let serde_json::Value::Object(call) = call else {
            return Err(bad("not a dict"));
        };
        let id = match call.get("id") {
            None => "null".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(_) => return Err(bad("'id' must be a string")),
        };
        match call.get("type") {
            None => {}
            Some(serde_json::Value::String(t)) if t == "function" => {}
            Some(_) => return Err(bad("'type' must be \"function\"")),
        }
        let Some(serde_json::Value::Object(function)) = call.get("function") else {
            return Err(bad("'function' must be a dict"));
        };
        let Some(serde_json::Value::String(name)) = function.get("name") else {
            return Err(bad("'function.name' must be a string"));
        };
        let arguments = match function.get("arguments") {
            None => return Err(bad("'function.arguments' is required")),
            Some(serde_json::Value::Null) => PyJson::Dict(Vec::new()),
            Some(v @ serde_json::Value::Object(_)) => PyJson::from_value(v),
            Some(serde_json::Value::String(s)) => parse_json_content(s, i)?,
            Some(_) => return Err(bad("'function.arguments' must be a dict or a JSON string")),
        };
        out.push(Call {
            name: name.clone(),
            arguments,
            id,
        });
    }
    Ok(Some(out))
}

fn parse(m: &Message, i: usize) -> Result<Parsed, TemplateError> {
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(TemplateError::at(
                i,
                format!("Unknown message role: {other} (mistral-common knows system, developer, user, assistant, tool)"),
            ))
        }
    };
    if m.reasoning_content.is_some() {
        return Err(TemplateError::at(
            i,
            "mistral-common does not take reasoning content for these tokenizer versions",
        ));
    }
    let has_content = match &m.content {
        None => false,
        Some(Content::Text(s)) => !s.is_empty(),
        Some(Content::Parts(p)) => !p.is_empty(),
    };
    let mut parsed = Parsed {
        role,
        text: text_of(m, i)?,
        has_content,
        tool_calls: None,
        call_id: None,
        name: None,
    };
    match role {
        Role::Assistant => parsed.tool_calls = parse_calls(m, i)?,
        Role::Tool => {
            let raw = raw_of(m, i, "'tool_call_id'")?;
            parsed.call_id = match raw.get("tool_call_id") {
                None => {
                    return Err(TemplateError::at(
                        i,
                        "a tool message needs 'tool_call_id' (mistral-common's ToolMessage.from_openai)",
                    ))
                }
                Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(TemplateError::at(i, "'tool_call_id' must be a string")),
            };
            parsed.name = match raw.get("name") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    return Err(TemplateError::at(
                        i,
                        "a tool message's 'name' must be a string",
                    ))
                }
            };
            if parsed.text.is_none() {
                return Err(TemplateError::at(
                    i,
                    "a tool message needs 'content' (mistral-common)",
                ));
            }
        }
        // A message with `tool_calls` that is not an assistant's: mistral-common ignores the key
        // for these roles; so does chatids.
        _ => {}
    }
    Ok(parsed)
}

/// The `tools` list as mistral-common converts, validates and dumps it.
fn parse_tools(tools: Option<&serde_json::Value>) -> Result<Vec<PyJson>, TemplateError> {
    use serde_json::Value;
    let list = match tools {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(TemplateError::whole(format!(
                "tools must be a list of {{\"type\": \"function\", \"function\": {{...}}}} dicts, not {other}"
            )))
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for (j, tool) in list.iter().enumerate() {
        let bad =
            |what: String| TemplateError::whole(format!("tools[{j}]: {what} (mistral-common)"));
        let Value::Object(tool) = tool else {
            return Err(bad("not a dict".into()));
        };
        match tool.get("type") {
            None => {}
            Some(Value::String(t)) if t == "function" => {}
            Some(_) => return Err(bad("'type' must be \"function\"".into())),
        }
        let function = match tool.get("function") {
            Some(Value::Object(f)) if !f.is_empty() => f,
            _ => return Err(bad("'function' must be a dict with a 'name'".into())),
        };
        let Some(Value::String(name)) = function.get("name") else {
            return Err(bad("'function.name' must be a string".into()));
        };
        let description = match function.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(bad("'function.description' must be a string".into())),
        };
        let parameters = match function.get("parameters") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(bad("'function.parameters' must be a dict".into())),
        };
        match function.get("strict") {
            None | Some(Value::Null) | Some(Value::Bool(_)) => {}
            Some(_) => return Err(bad("'function.strict' must be a bool".into())),
        }
        schema::check_schema(&parameters).map_err(|e| bad(format!("Invalid tool schema: {e}")))?;
        if !valid_function_name(name) {
            return Err(bad(function_name_error(name)));
        }
        out.push(PyJson::Dict(vec![
            ("type".into(), PyJson::Str("function".into())),
            (
                "function".into(),
                PyJson::Dict(vec![
                    ("name".into(), PyJson::Str(name.clone())),
                    ("description".into(), PyJson::Str(description)),
                    ("parameters".into(), PyJson::from_value(&parameters)),
                ]),
            ),
        ]));
    }
    Ok(out)
}

/// Convert, validate and normalize `messages` the way mistral-common's
/// `encode_chat_completion(ChatCompletionRequest.from_openai(messages, tools,
/// continue_final_message))` does, in `finetuning` mode when the conversation ends with an
/// assistant turn that is not continued and `test` mode otherwise.
pub fn normalize(
    messages: &[Message],
    options: RequestOptions<'_>,
) -> Result<Request, TemplateError> {
    let version = options.version;
    let v7 = version == Version::V7;
    if options.continue_final_message && messages.last().is_none_or(|m| m.role != "assistant") {
        return Err(match messages.len() {
            0 => TemplateError::whole(CONTINUE_FINAL_MESSAGE_ERROR),
            n => TemplateError::at(n - 1, CONTINUE_FINAL_MESSAGE_ERROR),
        });
    }
    let parsed = messages
        .iter()
        .enumerate()
        .map(|(i, m)| parse(m, i))
        .collect::<Result<Vec<_>, _>>()?;
    let tools = parse_tools(options.tools)?;
    if messages.is_empty() {
        return Err(TemplateError::whole(
            "the conversation is empty; provide at least one message",
        ));
    }
    let finetuning =
        parsed[parsed.len() - 1].role == Role::Assistant && !options.continue_final_message;
    validate(&parsed, version, finetuning)?;
    if version == Version::V1 && !tools.is_empty() {
        return Err(TemplateError::whole(
            "mistral-common's v1 tokenizer has no tools: it would drop the tools list silently; pass no tools for v1",
        ));
    }

    let system_prompt = if v7 {
        None
    } else {
        let prompts: Vec<&str> = parsed
            .iter()
            .filter(|p| p.role == Role::System && p.text.as_deref().is_some_and(|t| !t.is_empty()))
            .map(|p| p.text.as_deref().unwrap_or_default())
            .collect();
        (!prompts.is_empty()).then(|| prompts.join(JOIN))
    };
    // Group consecutive messages of the same role.
    let mut out: Vec<Normalized> = Vec::new();
    let mut i = 0;
    while i < parsed.len() {
        let role = parsed[i].role;
        let mut j = i;
        while j < parsed.len() && parsed[j].role == role {
            j += 1;
        }
        match role {
            Role::System if v7 => {
                for (k, p) in parsed.iter().enumerate().take(j).skip(i) {
                    out.push(Normalized::new(
                        role,
                        p.text.clone().unwrap_or_default(),
                        Some(k),
                    ));
                }
            }
            Role::System => {}
            Role::Tool => {
                for (k, p) in parsed.iter().enumerate().take(j).skip(i) {
                    let mut n = Normalized::new(role, p.text.clone().unwrap_or_default(), Some(k));
                    n.call_id = p.call_id.clone();
                    n.name = p.name.clone();
                    out.push(n);
                }
            }
            Role::User | Role::Assistant => {
                let joined: Vec<&str> = parsed[i..j]
                    .iter()
                    .filter_map(|p| p.text.as_deref())
                    .filter(|t| !t.is_empty())
                    .collect();
                let mut n = Normalized::new(role, joined.join(JOIN), Some(i));
                for p in &parsed[i..j] {
                    n.tool_calls.extend(p.tool_calls.iter().flatten().cloned());
                }
                n.prefix =
                    role == Role::Assistant && j == parsed.len() && options.continue_final_message;
                out.push(n);
            }
        }
        i = j;
    }
    for n in out.iter().filter(|n| n.role == Role::Assistant) {
        let at = n.origin.unwrap_or_default();
        if !v7 && !n.tool_calls.is_empty() && !n.content.is_empty() {
            return Err(TemplateError::at(
                at,
                "Cannot have tool calls and content defined in the same assistant message (mistral-common; the messages joined into this turn have both)",
            ));
        }
        if n.tool_calls.is_empty() && n.content.is_empty() {
            return Err(TemplateError::at(
                at,
                "Invalid assistant message: no content (mistral-common)",
            ));
        }
    }
    if out.is_empty() || (!v7 && out[0].role != Role::User) {
        out.insert(0, Normalized::new(Role::User, String::new(), None));
    }
    if version == Version::V2 {
        validate_v2_tool_results(&out)?;
    }
    Ok(Request {
        messages: out,
        system_prompt,
        tools,
    })
}

/// v2 writes one tool result per assistant turn after the last user message.
fn validate_v2_tool_results(messages: &[Normalized]) -> Result<(), TemplateError> {
    let last_user = messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(0);
    let mut calls = false;
    let mut results = 0;
    for m in &messages[last_user..] {
        match m.role {
            Role::Assistant => {
                calls = !m.tool_calls.is_empty();
                results = 0;
            }
            Role::Tool if calls => {
                results += 1;
                if results > 1 {
                    return Err(TemplateError::at(
                        m.origin.unwrap_or_default(),
                        "Tokenizer v2 does not support multiple tool results for one assistant turn. (mistral-common)",
                    ));
                }
            }
            Role::Tool => {}
            _ => {
                calls = false;
                results = 0;
            }
        }
    }
    Ok(())
}

/// mistral-common's structural and content checks (`MistralRequestValidator` for v1/v2, `V3`
/// for v3, `V5` for v7) on the messages as given.
fn validate(messages: &[Parsed], version: Version, finetuning: bool) -> Result<(), TemplateError> {
    let n = messages.len();
    if n == 1 && !matches!(messages[0].role, Role::User | Role::System) {
        return Err(TemplateError::at(
            0,
            "Conversation must start with a user message or system message (mistral-common)",
        ));
    }
    // The last-role rule: finetuning mode is chosen only when the conversation ends with an
    // assistant turn, and test mode accepts any other last message (or a continued assistant).
    for k in 1..n {
        let (prev, cur) = (messages[k - 1].role, messages[k].role);
        let allowed = match prev {
            Role::System => matches!(cur, Role::User | Role::Assistant | Role::System),
            Role::User => matches!(cur, Role::Assistant | Role::System | Role::User),
            Role::Assistant => matches!(cur, Role::Assistant | Role::User | Role::Tool),
            Role::Tool => matches!(cur, Role::Assistant | Role::Tool | Role::User),
        };
        if !allowed {
            return Err(TemplateError::at(
                k,
                format!(
                    "Unexpected role '{}' after role '{}' (mistral-common)",
                    cur.name(),
                    prev.name()
                ),
            ));
        }
    }
    // Every tool call answered by one tool message before the next assistant message (the
    // first message is not looked at).
    let mut expected: i64 = 0;
    for (k, m) in messages.iter().enumerate().skip(1) {
        match m.role {
            Role::Tool => expected -= 1,
            Role::Assistant => {
                if expected != 0 {
                    return Err(TemplateError::at(
                        k,
                        "Not the same number of function calls and responses (mistral-common)",
                    ));
                }
                if let Some(calls) = &m.tool_calls {
                    expected = calls.len() as i64;
                }
            }
            _ => {}
        }
    }
    if finetuning && expected < 0 {
        return Err(TemplateError::at(
            n - 1,
            "More tool responses than tool calls (mistral-common)",
        ));
    }
    let ids = matches!(version, Version::V3 | Version::V7);
    for (k, m) in messages.iter().enumerate() {
        match m.role {
            Role::System if m.text.is_none() => {
                return Err(TemplateError::at(
                    k,
                    "System prompt must have content (mistral-common)",
                ))
            }
            Role::User if m.text.is_none() => {
                return Err(TemplateError::at(
                    k,
                    "the message has no 'content' (or it is None)",
                ))
            }
            Role::Tool if version == Version::V1 => {
                return Err(TemplateError::at(
                    k,
                    "Tools not implemented for tokenizer V1 (mistral-common)",
                ))
            }
            Role::Tool => {
                if let Some(name) = m.name.as_deref().filter(|n| !valid_function_name(n)) {
                    return Err(TemplateError::at(k, function_name_error(name)));
                }
                if ids {
                    match m.call_id.as_deref() {
                        None => return Err(TemplateError::at(k, "Tool call id has to be defined. (mistral-common)")),
                        Some(id) if !valid_call_id(id) => {
                            return Err(TemplateError::at(
                                k,
                                format!("Tool call id was {id} but must be a-z, A-Z, 0-9, with a length of 9. (mistral-common)"),
                            ))
                        }
                        Some(_) => {}
                    }
                }
            }
            Role::Assistant => {
                let calls = m.tool_calls.as_deref().unwrap_or_default();
                if version == Version::V1 && !calls.is_empty() {
                    return Err(TemplateError::at(
                        k,
                        "Tools not implemented for tokenizer V1 (mistral-common)",
                    ));
                }
                if version != Version::V7 && m.has_content != calls.is_empty() {
                    return Err(TemplateError::at(
                        k,
                        "Assistant message must have either content or tool_calls, but not both. (mistral-common)",
                    ));
                }
                for call in calls {
                    if ids {
                        if call.id == "null" {
                            if !(finetuning && k == n - 1) {
                                return Err(TemplateError::at(
                                    k,
                                    "Tool call id 'null' is only allowed for the last assistant message in finetuning mode. (mistral-common; the call has no 'id')",
                                ));
                            }
                        } else if !valid_call_id(&call.id) {
                            return Err(TemplateError::at(
                                k,
                                format!("Tool call id was {} but must be a-z, A-Z, 0-9, with a length of 9. (mistral-common)", call.id),
                            ));
                        }
                    }
                    if !valid_function_name(&call.name) {
                        return Err(TemplateError::at(k, function_name_error(&call.name)));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn m(role: &str, content: &str) -> Message {
        Message::new(role, content)
    }

    /// A message built from its dict, as the Python layer passes tool conversations.
    fn raw(v: serde_json::Value) -> Message {
        let map = v.as_object().unwrap().clone();
        let mut msg = Message {
            role: map["role"].as_str().unwrap().to_string(),
            ..Default::default()
        };
        if let Some(c) = map.get("content").and_then(|c| c.as_str()) {
            msg.content = Some(Content::Text(c.to_string()));
        }
        if let Some(calls) = map.get("tool_calls") {
            msg.tool_calls = Some(calls.as_array().map(|a| a.len()));
        }
        msg.raw = Some(Arc::new(map));
        msg
    }

    fn opts(version: Version) -> RequestOptions<'static> {
        RequestOptions {
            version,
            tools: None,
            continue_final_message: false,
        }
    }

    fn norm(messages: &[Message], v7: bool) -> Result<Request, TemplateError> {
        normalize(messages, opts(if v7 { Version::V7 } else { Version::V3 }))
    }

    fn call(id: &str, args: serde_json::Value) -> Message {
        raw(json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "get", "arguments": args}}]}))
    }

    fn result(id: &str, content: &str) -> Message {
        raw(json!({"role": "tool", "tool_call_id": id, "name": "get", "content": content}))
    }

    #[test]
    fn collects_system_prompts_and_joins_same_role_runs() {
        let r = norm(
            &[
                m("system", "S1"),
                m("user", "a"),
                m("user", ""),
                m("user", "b"),
                m("system", "S2"),
                m("user", "c"),
            ],
            false,
        )
        .unwrap();
        assert_eq!(r.system_prompt.as_deref(), Some("S1\n\nS2"));
        let got: Vec<_> = r
            .messages
            .iter()
            .map(|n| (n.role, n.content.as_str(), n.origin))
            .collect();
        // The system message between the user runs keeps them apart.
        assert_eq!(
            got,
            vec![(Role::User, "a\n\nb", Some(1)), (Role::User, "c", Some(5))]
        );
    }

    #[test]
    fn inserts_an_empty_user_turn_where_needed() {
        let r = norm(&[m("system", "S"), m("assistant", "hi")], false).unwrap();
        assert_eq!(
            r.messages[0],
            Normalized::new(Role::User, String::new(), None)
        );
        let v7 = norm(&[m("system", "S"), m("assistant", "hi")], true).unwrap();
        assert_eq!(v7.messages[0].role, Role::System);
    }

    #[test]
    fn validates_like_mistral_common() {
        assert!(norm(&[m("assistant", "x")], false).is_err());
        // test mode accepts a trailing system message (v3 puts it in the last user turn)
        assert!(norm(&[m("user", "q"), m("system", "s")], false).is_ok());
        assert!(norm(
            &[
                m("user", "q"),
                m("assistant", "a"),
                m("system", "s"),
                m("user", "q")
            ],
            false
        )
        .is_err());
        assert!(norm(&[m("user", "q"), m("assistant", "")], false).is_err());
        assert!(norm(&[m("user", "q"), m("assistant", "a")], false).is_ok()); // finetuning mode
        assert!(norm(&[m("system", "s")], false).is_ok());
        assert!(norm(&[m("developer", "s"), m("user", "q")], false).is_ok());
    }

    #[test]
    fn tool_calls_and_results_are_normalized() {
        let conv = [
            m("user", "q"),
            call("abcDEF123", json!("{\"x\": 1.50, \"y\": \"é\"}")),
            result("abcDEF123", "{\"t\":20}"),
        ];
        let r = norm(&conv, false).unwrap();
        let a = &r.messages[1];
        assert_eq!(a.role, Role::Assistant);
        assert_eq!(a.content, "");
        assert_eq!(
            a.tool_calls[0].to_json(true).dumps(),
            r#"{"name": "get", "arguments": {"x": 1.5, "y": "é"}, "id": "abcDEF123"}"#
        );
        assert_eq!(
            a.tool_calls[0].to_json(false).dumps(),
            r#"{"name": "get", "arguments": {"x": 1.5, "y": "é"}}"#
        );
        let t = &r.messages[2];
        assert_eq!(
            (t.role, t.call_id.as_deref(), t.origin),
            (Role::Tool, Some("abcDEF123"), Some(2))
        );
        // arguments that are not JSON stay a string; empty ones are {}
        let r = norm(
            &[
                m("user", "q"),
                call("abcDEF123", json!("not json")),
                result("abcDEF123", ""),
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            r.messages[1].tool_calls[0].arguments,
            PyJson::Str("not json".into())
        );
        let r = norm(
            &[
                m("user", "q"),
                call("abcDEF123", json!("")),
                result("abcDEF123", ""),
            ],
            false,
        )
        .unwrap();
        assert_eq!(r.messages[1].tool_calls[0].arguments, PyJson::Dict(vec![]));
    }

    #[test]
    fn call_ids_are_checked_from_v3() {
        let bad_id = [
            m("user", "q"),
            call("short", json!({})),
            result("short", "x"),
        ];
        assert!(norm(&bad_id, false).is_err());
        assert!(
            normalize(&bad_id, opts(Version::V2)).is_ok(),
            "v2 writes no ids"
        );
        let bad_result = [
            m("user", "q"),
            call("abcDEF123", json!({})),
            result("abc", "x"),
        ];
        assert!(norm(&bad_result, true).is_err());
        // Python's `$` matches before a final newline
        let newline = [
            m("user", "q"),
            call("abcDEF123\n", json!({})),
            result("abcDEF123\n", "x"),
        ];
        assert!(norm(&newline, false).is_ok());
        // "null" (no id) only for the last assistant message in finetuning mode
        let no_id = raw(
            json!({"role": "assistant", "tool_calls": [{"function": {"name": "get", "arguments": "{}"}}]}),
        );
        assert!(norm(&[m("user", "q"), no_id.clone()], false).is_ok());
        assert!(norm(&[m("user", "q"), no_id, result("abcDEF123", "x")], false).is_err());
    }

    #[test]
    fn tool_results_must_follow_calls() {
        // a result with no call before the next assistant message
        let orphan = [
            m("user", "q"),
            m("assistant", "a"),
            result("abcDEF123", "x"),
            m("assistant", "b"),
        ];
        assert!(norm(&orphan, false).is_err());
        // a missing result before the next assistant message
        let missing = [
            m("user", "q"),
            call("abcDEF123", json!({})),
            m("assistant", "b"),
        ];
        assert!(norm(&missing, false).is_err());
        // tool after user is out of order
        assert!(norm(&[m("user", "q"), result("abcDEF123", "x")], false).is_err());
        // content and tool calls together: only v7
        let both = raw(json!({"role": "assistant", "content": "c", "tool_calls": [
            {"id": "abcDEF123", "function": {"name": "get", "arguments": {}}}]}));
        let conv = [m("user", "q"), both, result("abcDEF123", "x")];
        assert!(norm(&conv, false).is_err());
        assert!(norm(&conv, true).is_ok());
        // v1 has no tools
        let conv = [
            m("user", "q"),
            call("abcDEF123", json!({})),
            result("abcDEF123", "x"),
        ];
        assert!(normalize(&conv, opts(Version::V1)).is_err());
    }

    #[test]
    fn v2_takes_one_result_per_call_turn_after_the_last_user_message() {
        let two = raw(json!({"role": "assistant", "tool_calls": [
            {"id": "abcDEF123", "function": {"name": "get", "arguments": {}}},
            {"id": "abcDEF124", "function": {"name": "get", "arguments": {}}}]}));
        let conv = [
            m("user", "q"),
            two,
            result("abcDEF123", "x"),
            result("abcDEF124", "y"),
        ];
        assert!(normalize(&conv, opts(Version::V2)).is_err());
        assert!(normalize(&conv, opts(Version::V3)).is_ok());
    }

    #[test]
    fn tools_are_dumped_in_mistral_commons_order_and_checked() {
        let tools = json!([{"function": {"parameters": {"type": "object"}, "name": "f", "strict": true}, "type": "function"}]);
        let r = normalize(
            &[m("user", "q")],
            RequestOptions {
                tools: Some(&tools),
                ..opts(Version::V3)
            },
        )
        .unwrap();
        assert_eq!(
            r.tools[0].dumps(),
            r#"{"type": "function", "function": {"name": "f", "description": "", "parameters": {"type": "object"}}}"#
        );
        let bad = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "dict"}}}]);
        assert!(normalize(
            &[m("user", "q")],
            RequestOptions {
                tools: Some(&bad),
                ..opts(Version::V3)
            }
        )
        .is_err());
        let bad = json!([{"type": "function", "function": {"name": "f g"}}]);
        assert!(normalize(
            &[m("user", "q")],
            RequestOptions {
                tools: Some(&bad),
                ..opts(Version::V3)
            }
        )
        .is_err());
        assert!(normalize(
            &[m("user", "q")],
            RequestOptions {
                tools: Some(&tools),
                ..opts(Version::V1)
            }
        )
        .is_err());
    }

    #[test]
    fn continue_final_message_leaves_the_last_assistant_turn_open() {
        let o = RequestOptions {
            continue_final_message: true,
            ..opts(Version::V3)
        };
        let r = normalize(
            &[m("user", "q"), m("assistant", "a"), m("assistant", "b")],
            o,
        )
        .unwrap();
        assert!(r.messages[1].prefix);
        assert_eq!(r.messages[1].content, "a\n\nb");
        let e = normalize(&[m("user", "q")], o).unwrap_err();
        assert_eq!(e.message, Some(0));
        assert!(e.rule.contains("requires final message to be an assistant"));
    }
}
