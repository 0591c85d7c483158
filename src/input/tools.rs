//! Tool use: which inputs make a conversation a *tool conversation*, and which tokens a model
//! emits to stop for a tool call.
//!
//! Native formats render plain conversations. A tool conversation — a non-`None` template
//! argument in [`TOOL_ARGUMENTS`] (`tools=`...), an assistant message with `tool_calls`, or a
//! tool result message (role in [`TOOL_RESULT_ROLES`]) — is rendered by the checkpoint's own
//! template on the Jinja path ([`crate::render::jinja`]) whenever the native format was verified
//! against that template: the template is the authority on how a checkpoint writes tool
//! definitions, calls and results (JSON layout, `Environment: ipython`, call ids, grouping of
//! results), and the Jinja path reproduces `apply_chat_template` exactly, tool results and
//! arguments sanitized like any content. The mistral-common route encodes tools itself.

use serde_json::Value;

use crate::error::{Refusal, TemplateError};
use crate::message::Message;
use crate::render::jinja::RenderMemo;

pub use crate::message::{
    is_tool_message, uses_tools, TOOL_ARGUMENTS, TOOL_CALL_STOP_TOKENS, TOOL_RESULT_ROLES,
};

/// Refuse what a template silently leaves out of the prompt, which native formats refuse
/// too: a system message (Mistral v3 and Nemo write it only when the conversation ends with
/// a user turn), and an assistant message's tool calls (DeepSeek V3 writes them only when
/// `content` is absent). A tool call counts as written when its function name is in the
/// prompt.
pub fn check_nothing_dropped(messages: &[Message], rendered: &str) -> Result<(), TemplateError> {
    check_nothing_dropped_before(messages, rendered, rendered.len(), None)
}

/// [`check_nothing_dropped`] of `rendered` and of its first `end` bytes at once (a render with
/// the generation prompt and the same render without it): passes only where both would,
/// every text and name being found before `end`, a name as a word in `rendered` (then it is
/// one in the first `end` bytes too). A name that is a word in each only through different
/// occurrences fails here; check each alone to tell. `memo`, a session's, keeps the searchers
/// of the system texts for its next renders.
pub fn check_nothing_dropped_before(
    messages: &[Message],
    rendered: &str,
    end: usize,
    memo: Option<&RenderMemo>,
) -> Result<(), TemplateError> {
    let before = &rendered[..end];
    let needs_check = messages
        .iter()
        .any(|m| m.role == "system" || m.tool_calls.is_some());
    if !needs_check {
        return Ok(());
    }
    // A session's memo keeps the searcher of its system text for its next renders.
    let written_before = |text: &str| match memo {
        Some(memo) => memo.contains(before.as_bytes(), text.as_bytes()),
        None => memchr::memmem::find(before.as_bytes(), text.as_bytes()).is_some(),
    };
    // Each name is searched for once (an agent calls the same few tools again and again).
    let mut found: Vec<&str> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        if message.role == "system" {
            let text = message.text().map(crate::pystr::strip).unwrap_or_default();
            if !text.is_empty() && !written_before(text) {
                return Err(TemplateError::at(
                    i,
                    "the checkpoint's template drops this system message here (chatids refuses to drop it silently)",
                )
                .with(Refusal::Dropped));
            }
        }
        let missing = call_names(message).find(|&n| {
            if found.contains(&n) {
                return false;
            }
            let written = contains_word(rendered, n, end);
            if written {
                found.push(n);
            }
            !written
        });
        if let Some(name) = missing {
            return Err(TemplateError::at(
                i,
                format!(
                    "the checkpoint's template drops this message's tool call {name:?} here (chatids refuses to drop \
                     it silently)"
                ),
            )
            .with(Refusal::Dropped));
        }
    }
    Ok(())
}

/// What [`check_tool_calls`] requires of `function.arguments`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgumentsCheck {
    /// A dict or a string holding valid JSON (what every Jinja template assumes: it writes
    /// the string into the prompt as JSON, or calls `tojson` on the dict).
    DictOrJson,
    /// Not checked here: the route validates arguments itself, the way its reference does
    /// (mistral-common keeps a string that is not JSON verbatim and accepts `None`).
    LeftToRoute,
}

/// Refuse malformed tool calls before any template sees them (a template would render
/// `Undefined`, fail without naming the message, or write invalid JSON into the prompt).
/// Each message's `tool_calls`, when present, must be a list; each call a dict whose
/// function (`call["function"]`, or the call itself in the flat form some templates accept)
/// is a dict with a non-empty string `name`; with [`ArgumentsCheck::DictOrJson`],
/// `arguments`, when present, a dict or a string holding valid JSON.
pub fn check_tool_calls(
    messages: &[Message],
    arguments: ArgumentsCheck,
) -> Result<(), TemplateError> {
    check_tool_calls_from(messages, 0, arguments)
}

/// [`check_tool_calls`] of the messages from index `from` on (the ones before are known to
/// pass it).
pub fn check_tool_calls_from(
    messages: &[Message],
    from: usize,
    arguments: ArgumentsCheck,
) -> Result<(), TemplateError> {
    for (i, message) in messages.iter().enumerate().skip(from) {
        let Some(raw) = message.raw.as_deref() else {
            continue;
        };
        let Some(calls) = raw.get("tool_calls") else {
            continue;
        };
        let Value::Array(calls) = calls else {
            return Err(TemplateError::at(
                i,
                format!(
                    "'tool_calls' must be a list of calls, not {}",
                    json_type(calls)
                ),
            ));
        };
        for (j, call) in calls.iter().enumerate() {
            let field = |rest: &str| format!("tool_calls[{j}]{rest}");
            let Value::Object(call) = call else {
                return Err(TemplateError::at(
                    i,
                    format!(
                        "{} must be a dict {{\"type\": \"function\", \"function\": {{\"name\": ..., \"arguments\": ...}}}}, not {}",
                        field(""),
                        json_type(call)
                    ),
                ));
            };
            let (function, at) = match call.get("function") {
                Some(Value::Object(f)) => (f, ".function"),
                Some(other) => {
                    return Err(TemplateError::at(
                        i,
                        format!(
                            "{} must be a dict, not {}",
                            field(".function"),
                            json_type(other)
                        ),
                    ))
                }
                None => (call, ""),
            };
            match function.get("name") {
                Some(Value::String(n)) if !n.is_empty() => {}
                Some(Value::String(_)) => {
                    return Err(TemplateError::at(i, format!("{}.name is empty", field(at))))
                }
                Some(other) => {
                    return Err(TemplateError::at(
                        i,
                        format!("{}.name must be a str, not {}", field(at), json_type(other)),
                    ))
                }
                None => return Err(TemplateError::at(i, format!("{} has no 'name'", field(at)))),
            }
            if arguments == ArgumentsCheck::LeftToRoute {
                continue;
            }
            match function.get("arguments") {
                None | Some(Value::Object(_)) => {}
                Some(Value::String(text)) => {
                    if let Err(e) = serde_json::from_str::<Value>(text) {
                        return Err(TemplateError::at(
                            i,
                            format!("{}.arguments is not valid JSON ({e})", field(at)),
                        ));
                    }
                }
                Some(other) => {
                    return Err(TemplateError::at(
                        i,
                        format!(
                            "{}.arguments must be a dict or a JSON string, not {}",
                            field(at),
                            json_type(other)
                        ),
                    ))
                }
            }
        }
    }
    Ok(())
}

/// Python's name for the type of a JSON value, for error messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "None",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Whether `word` occurs in the first `end` bytes of `text` with no identifier character
/// (letter, digit, `_`) right before or after it in `text` (`f` is not in `begin_of_text`, it
/// is in `{"name": "f"}`).
fn contains_word(text: &str, word: &str, end: usize) -> bool {
    let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    memchr::memmem::find_iter(&text.as_bytes()[..end], word).any(|at| {
        !is_ident(text[..at].chars().next_back())
            && !is_ident(text[at + word.len()..].chars().next())
    })
}

/// The function names of a message's tool calls (OpenAI's `{"function": {"name": ...}}` or a
/// flat `{"name": ...}`), from the caller's dict.
fn call_names(message: &Message) -> impl Iterator<Item = &str> {
    let calls = match message.raw.as_deref().and_then(|raw| raw.get("tool_calls")) {
        Some(Value::Array(list)) => list.as_slice(),
        _ => &[],
    };
    calls.iter().filter_map(|call| {
        let function = call.get("function").unwrap_or(call);
        function.get("name")?.as_str().filter(|n| !n.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{TemplateArgs, TemplateValue};

    fn with_calls(calls: Value) -> Vec<Message> {
        let mut raw = serde_json::Map::new();
        raw.insert("role".into(), "assistant".into());
        raw.insert("tool_calls".into(), calls);
        vec![
            Message::new("user", "hi"),
            Message {
                role: "assistant".into(),
                tool_calls: Some(None),
                raw: Some(std::sync::Arc::new(raw)),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn malformed_tool_calls_are_refused_naming_message_and_field() {
        let ok = serde_json::json!([
            {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
            {"function": {"name": "g", "arguments": "{\"a\": [1, 2]}"}},
            {"name": "h", "arguments": "{}"},
            {"function": {"name": "k"}},
        ]);
        assert!(check_tool_calls(&with_calls(ok), ArgumentsCheck::DictOrJson).is_ok());
        let left_to_route = serde_json::json!([{"function": {"name": "f", "arguments": "city=Paris"}}, {"name": "g", "arguments": null}]);
        assert!(check_tool_calls(
            &with_calls(left_to_route.clone()),
            ArgumentsCheck::LeftToRoute
        )
        .is_ok());
        assert!(check_tool_calls(&with_calls(left_to_route), ArgumentsCheck::DictOrJson).is_err());
        for (calls, expected) in [
            (serde_json::json!("f()"), "message 1: 'tool_calls' must be a list of calls, not str"),
            (serde_json::json!([["f"]]), "message 1: tool_calls[0] must be a dict"),
            (serde_json::json!([{"function": "f"}]), "message 1: tool_calls[0].function must be a dict, not str"),
            (serde_json::json!([{"function": {"arguments": {}}}]), "message 1: tool_calls[0].function has no 'name'"),
            (serde_json::json!([{"function": {"name": 3}}]), "message 1: tool_calls[0].function.name must be a str, not int"),
            (serde_json::json!([{"function": {"name": ""}}]), "message 1: tool_calls[0].function.name is empty"),
            (
                serde_json::json!([{"function": {"name": "f", "arguments": "{not json"}}]),
                "message 1: tool_calls[0].function.arguments is not valid JSON (key must be a string at line 1 column 2)",
            ),
            (serde_json::json!([{"name": "f", "arguments": [1]}]), "message 1: tool_calls[0].arguments must be a dict or a JSON string, not list"),
        ] {
            let error = check_tool_calls(&with_calls(calls.clone()), ArgumentsCheck::DictOrJson).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{error}");
            if !expected.contains(".arguments") {
                let error = check_tool_calls(&with_calls(calls), ArgumentsCheck::LeftToRoute).unwrap_err().to_string();
                assert!(error.starts_with(expected), "{error}");
            }
        }
    }

    /// Checking a render and its first bytes at once passes only where checking each passes,
    /// and does pass where one occurrence of each text and name serves both.
    #[test]
    fn checking_a_render_and_its_prefix_at_once() {
        let mut messages = with_calls(serde_json::json!([{"function": {"name": "get_weather"}}]));
        messages.insert(0, Message::new("system", "Be brief."));
        let texts = [
            "Be brief. {\"name\": \"get_weather\"} then",
            "Be brief. x get_weather_now",
            "x get_weather Be brief.",
            "get_weather Be brief. get_weather",
        ];
        let mut passed = 0;
        let memo = RenderMemo::default();
        for text in texts {
            for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
                let both = check_nothing_dropped(&messages, text).is_ok()
                    && check_nothing_dropped(&messages, &text[..end]).is_ok();
                let at_once = check_nothing_dropped_before(&messages, text, end, None).is_ok();
                assert!(!at_once || both, "{text:?} before {end}");
                // A session's kept searchers find what a new one does.
                let kept = check_nothing_dropped_before(&messages, text, end, Some(&memo));
                assert_eq!(
                    kept.is_ok(),
                    at_once,
                    "{text:?} before {end}, searchers kept"
                );
                passed += usize::from(at_once);
            }
        }
        // The name ending right where the prefix ends, an identifier character after it.
        let cut = "Be brief. x get_weather";
        assert!(check_nothing_dropped(&messages, cut).is_ok());
        assert!(check_nothing_dropped_before(&messages, texts[1], cut.len(), None).is_err());
        // Both found before the end.
        assert!(check_nothing_dropped_before(&messages, texts[0], 33, None).is_ok());
        assert!(check_nothing_dropped_before(&messages, texts[3], 21, None).is_ok());
        assert!(passed > 20, "{passed}");
    }

    #[test]
    fn tool_call_names_are_found_as_words() {
        let contains_word = |text: &str, word: &str| contains_word(text, word, text.len());
        assert!(!contains_word("<|begin_of_text|>", "f"));
        assert!(contains_word(r#"{"name": "f", "x": 1}"#, "f"));
        assert!(contains_word(
            "to=functions.get_weather<|channel|>",
            "get_weather"
        ));
        assert!(!contains_word("get_weather_now", "get_weather"));
    }

    #[test]
    fn tool_conversations_are_recognised() {
        let mut kwargs = TemplateArgs::new();
        let plain = [Message::new("user", "hi")];
        assert!(!uses_tools(&plain, &kwargs));
        kwargs.insert("tools".into(), TemplateValue::None);
        assert!(!uses_tools(&plain, &kwargs), "tools=None is no tools");
        kwargs.insert(
            "tools".into(),
            TemplateValue::Json(std::sync::Arc::new(serde_json::json!([]))),
        );
        assert!(uses_tools(&plain, &kwargs));
        let kwargs = TemplateArgs::new();
        assert!(uses_tools(&[Message::new("ipython", "42")], &kwargs));
        let call = Message {
            role: "assistant".into(),
            tool_calls: Some(Some(1)),
            ..Default::default()
        };
        assert!(uses_tools(&[Message::new("user", "x"), call], &kwargs));
    }
}
