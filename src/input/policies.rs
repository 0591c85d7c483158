//! Input policies a caller opts into: transformations of the conversation that no template
//! performs on its own, each explicit and documented.
//!
//! * `merge_consecutive`: consecutive messages of the same role are joined into one, with a
//!   blank line (`"\n\n"`) between their contents, before the template sees them. Templates that
//!   enforce user/assistant alternation raise on such conversations otherwise. Messages with
//!   different `train` keys are not merged (an error).
//!
//! (`system="fold"` / `"error"` is a per-format decision and lives in [`crate::render::native`].)

use crate::error::TemplateError;
use crate::message::{Content, Message};

/// The separator `merge_consecutive` puts between merged contents.
pub const MERGE_SEPARATOR: &str = "\n\n";

/// Merge runs of consecutive same-role messages. Returns the merged conversation and, for
/// each merged message, the index of the first original message it came from.
///
/// Only plain string contents are merged; messages with tool calls, reasoning or content
/// parts inside a run are refused (there is no single right way to join them).
pub fn merge_consecutive(
    messages: &[Message],
) -> Result<(Vec<Message>, Vec<usize>), TemplateError> {
    let mut merged: Vec<Message> = Vec::with_capacity(messages.len());
    let mut origin: Vec<usize> = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let joins_previous = merged.last().is_some_and(|prev| prev.role == m.role);
        if !joins_previous {
            merged.push(m.clone());
            origin.push(i);
            continue;
        }
        let first = *origin.last().expect("a previous message");
        for (index, message) in [(first, merged.last().expect("previous")), (i, m)] {
            if message.tool_calls.is_some() || message.reasoning_content.is_some() {
                return Err(TemplateError::at(
                    index,
                    "merge_consecutive cannot merge a message that has tool_calls or reasoning",
                ));
            }
        }
        for (index, message) in [(first, merged.last().expect("previous")), (i, m)] {
            if let Some(key) = extra_key(message) {
                return Err(TemplateError::at(
                    index,
                    format!("merge_consecutive cannot merge a message with the key {key:?} (only role and content)"),
                ));
            }
        }
        let prev = merged.last_mut().expect("a previous message");
        if prev.train != m.train {
            return Err(TemplateError::at(
                i,
                "merge_consecutive cannot merge messages with different 'train' keys",
            ));
        }
        match (&mut prev.content, &m.content) {
            (Some(Content::Text(a)), Some(Content::Text(b))) => {
                a.push_str(MERGE_SEPARATOR);
                a.push_str(b);
                if let Some(raw) = &mut prev.raw {
                    std::sync::Arc::make_mut(raw)
                        .insert("content".into(), serde_json::Value::String(a.clone()));
                }
            }
            _ => {
                return Err(TemplateError::at(
                    i,
                    "merge_consecutive merges string contents only (this message or the one before it is not a string)",
                ))
            }
        }
    }
    Ok((merged, origin))
}

/// A key of the caller's message dict other than `role` and `content`, if any.
fn extra_key(message: &Message) -> Option<&str> {
    message
        .raw
        .as_ref()?
        .keys()
        .map(String::as_str)
        .find(|k| !matches!(*k, "role" | "content" | "train"))
}

/// Point an error about a merged message at the original message it starts with.
pub fn remap_error(mut error: TemplateError, origin: &[usize]) -> TemplateError {
    if let Some(m) = error.message {
        error.message = origin.get(m).copied().or(Some(m));
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_runs_of_the_same_role_with_a_blank_line() {
        let messages = vec![
            Message::new("user", "a"),
            Message::new("user", "b"),
            Message::new("assistant", "c"),
            Message::new("user", "d"),
            Message::new("user", "e"),
            Message::new("user", "f"),
        ];
        let (merged, origin) = merge_consecutive(&messages).unwrap();
        let texts: Vec<_> = merged
            .iter()
            .map(|m| (m.role.as_str(), m.text().unwrap()))
            .collect();
        assert_eq!(
            texts,
            vec![
                ("user", "a\n\nb"),
                ("assistant", "c"),
                ("user", "d\n\ne\n\nf")
            ]
        );
        assert_eq!(origin, vec![0, 2, 3]);
    }

    #[test]
    fn refuses_what_it_cannot_join() {
        let mut with_reasoning = Message::new("assistant", "b");
        with_reasoning.reasoning_content = Some("r".into());
        let err = merge_consecutive(&[Message::new("assistant", "a"), with_reasoning]).unwrap_err();
        assert_eq!(err.message, Some(1));
        let parts = Message {
            role: "user".into(),
            content: Some(Content::Parts(vec![])),
            ..Default::default()
        };
        assert!(merge_consecutive(&[Message::new("user", "a"), parts]).is_err());
    }

    #[test]
    fn errors_point_at_original_messages() {
        let err = remap_error(TemplateError::at(2, "x"), &[0, 2, 3]);
        assert_eq!(err.message, Some(3));
    }
}
