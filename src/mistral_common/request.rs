//! mistral-common's request handling before tokenization: validation (its `test` mode for
//! prompts, `finetuning` mode for conversations that end with an assistant turn) and
//! normalization (system prompts collected, consecutive same-role messages joined with a
//! blank line, an empty user turn inserted where a conversation does not start with one).

use crate::error::TemplateError;
use crate::message::{Content, ContentPart, Message};

/// The separator mistral-common joins aggregated contents with.
const JOIN: &str = "\n\n";

/// A message role mistral-common knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `system`.
    System,
    /// `user`.
    User,
    /// `assistant`.
    Assistant,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A message after normalization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// Its role.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// The index of the first original message it comes from (`None` for the empty user turn
    /// mistral-common inserts).
    pub origin: Option<usize>,
}

/// A normalized request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The messages (system messages are kept only when `keep_system` was set).
    pub messages: Vec<Normalized>,
    /// The system prompts joined with a blank line (versions before v7), if any.
    pub system_prompt: Option<String>,
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

/// Validate and normalize `messages` the way mistral-common's `encode_chat_completion` does
/// for plain-text conversations. `v7`: version 7 keeps system messages in place instead of
/// collecting them into one system prompt, and its validator accepts an empty assistant
/// message (the encoder then rejects an assistant turn that is still empty after merging).
pub fn normalize(messages: &[Message], v7: bool) -> Result<Request, TemplateError> {
    let keep_system = v7;
    if messages.is_empty() {
        return Err(TemplateError::whole(
            "the conversation is empty; provide at least one message",
        ));
    }
    let mut roles = Vec::with_capacity(messages.len());
    let mut texts = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => {
                return Err(TemplateError::at(
                    i,
                    "'tool' messages are not rendered by chatids' mistral-common route yet",
                ))
            }
            other => {
                return Err(TemplateError::at(
                    i,
                    format!("mistral-common has no role {other:?} (system, user, assistant, tool)"),
                ))
            }
        };
        if matches!(m.tool_calls, Some(None) | Some(Some(1..))) {
            return Err(TemplateError::at(i, "the message has 'tool_calls', which chatids' mistral-common route does not render yet"));
        }
        if m.reasoning_content.is_some() {
            return Err(TemplateError::at(
                i,
                "mistral-common does not take reasoning content for these tokenizer versions",
            ));
        }
        roles.push(role);
        texts.push(text_of(m, i)?);
    }
    validate(&roles, &texts, v7)?;

    let system_prompt = if keep_system {
        None
    } else {
        let prompts: Vec<&str> = roles
            .iter()
            .zip(&texts)
            .filter(|(r, t)| **r == Role::System && t.as_deref().is_some_and(|t| !t.is_empty()))
            .map(|(_, t)| t.as_deref().unwrap_or_default())
            .collect();
        (!prompts.is_empty()).then(|| prompts.join(JOIN))
    };
    // Group consecutive messages of the same role.
    let mut out: Vec<Normalized> = Vec::new();
    let mut i = 0;
    while i < roles.len() {
        let role = roles[i];
        let mut j = i;
        while j < roles.len() && roles[j] == role {
            j += 1;
        }
        match role {
            Role::System if keep_system => {
                for (k, text) in texts.iter().enumerate().take(j).skip(i) {
                    out.push(Normalized {
                        role,
                        content: text.clone().unwrap_or_default(),
                        origin: Some(k),
                    });
                }
            }
            Role::System => {}
            _ => {
                let joined: Vec<&str> = texts[i..j]
                    .iter()
                    .filter_map(|t| t.as_deref())
                    .filter(|t| !t.is_empty())
                    .collect();
                out.push(Normalized {
                    role,
                    content: joined.join(JOIN),
                    origin: Some(i),
                });
            }
        }
        i = j;
    }
    if let Some(empty) = out
        .iter()
        .find(|n| n.role == Role::Assistant && n.content.is_empty())
    {
        return Err(TemplateError::at(
            empty.origin.unwrap_or_default(),
            "Invalid assistant message: no content (mistral-common)",
        ));
    }
    if out.is_empty() || (!keep_system && out[0].role != Role::User) {
        out.insert(
            0,
            Normalized {
                role: Role::User,
                content: String::new(),
                origin: None,
            },
        );
    }
    Ok(Request {
        messages: out,
        system_prompt,
    })
}

/// mistral-common's structural and content checks, in `finetuning` mode when the last message
/// is an assistant turn and `test` mode otherwise.
fn validate(roles: &[Role], texts: &[Option<String>], v7: bool) -> Result<(), TemplateError> {
    let last = roles.len() - 1;
    let finetuning = roles[last] == Role::Assistant;
    if roles.len() == 1 && !matches!(roles[0], Role::User | Role::System) {
        return Err(TemplateError::at(
            0,
            "Conversation must start with a user message or system message (mistral-common)",
        ));
    }
    if !finetuning && roles.len() > 1 && roles[last] != Role::User {
        return Err(TemplateError::at(
            last,
            format!("Expected last role User or Tool (or Assistant with prefix) for serving but got {} (mistral-common)", roles[last].name()),
        ));
    }
    for k in 1..roles.len() {
        let allowed = match roles[k - 1] {
            Role::System => true,
            Role::User => true,
            Role::Assistant => roles[k] != Role::System,
        };
        if !allowed {
            return Err(TemplateError::at(
                k,
                format!(
                    "Unexpected role '{}' after role '{}' (mistral-common)",
                    roles[k].name(),
                    roles[k - 1].name()
                ),
            ));
        }
    }
    for (k, (role, text)) in roles.iter().zip(texts).enumerate() {
        match (role, text) {
            (Role::System, None) => {
                return Err(TemplateError::at(
                    k,
                    "System prompt must have content (mistral-common)",
                ))
            }
            (Role::User, None) => {
                return Err(TemplateError::at(
                    k,
                    "the message has no 'content' (or it is None)",
                ))
            }
            (Role::Assistant, t) if !v7 && t.as_deref().is_none_or(str::is_empty) => {
                return Err(TemplateError::at(
                    k,
                    "Assistant message must have either content or tool_calls (mistral-common)",
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, content: &str) -> Message {
        Message::new(role, content)
    }

    #[test]
    fn collects_system_prompts_and_joins_same_role_runs() {
        let r = normalize(
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
        let r = normalize(&[m("system", "S"), m("assistant", "hi")], false).unwrap();
        assert_eq!(
            r.messages[0],
            Normalized {
                role: Role::User,
                content: String::new(),
                origin: None
            }
        );
        let v7 = normalize(&[m("system", "S"), m("assistant", "hi")], true).unwrap();
        assert_eq!(v7.messages[0].role, Role::System);
    }

    #[test]
    fn validates_like_mistral_common() {
        assert!(normalize(&[m("assistant", "x")], false).is_err());
        assert!(normalize(&[m("user", "q"), m("system", "s")], false).is_err()); // test mode: last must be user
        assert!(normalize(
            &[
                m("user", "q"),
                m("assistant", "a"),
                m("system", "s"),
                m("user", "q")
            ],
            false
        )
        .is_err());
        assert!(normalize(&[m("user", "q"), m("assistant", "")], false).is_err());
        assert!(normalize(&[m("user", "q"), m("assistant", "a")], false).is_ok()); // finetuning mode
        assert!(normalize(&[m("system", "s")], false).is_ok());
    }
}
