//! `continue_final_message`: a prompt that ends inside the final message, so the model
//! continues it ("prefill" the assistant's answer).
//!
//! transformers appends a tag (`"CONTINUE_FINAL_MESSAGE_TAG "`) to the final message's text,
//! renders the template, and cuts the prompt where the tag starts; if the template stripped the
//! tag's trailing space (a template that trims content), it also strips the whitespace before
//! the cut. chatids does the same on the piece stream of every template-route renderer (native
//! formats and the Jinja path), so the text before the cut is encoded exactly as transformers
//! tokenizes its cut prompt, and the template's end-of-turn token after the message is gone.

use std::sync::Arc;

use serde_json::Value;

use crate::error::TemplateError;
use crate::message::{Content, ContentPart, Message};
use crate::pieces::Pieces;

/// What transformers appends to the final message before rendering.
pub const TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// The conversation with [`TAG`] appended to the final message's text (its content string, or
/// the last text part of a content list), and that text before tagging.
pub fn tag_final_message(messages: &[Message]) -> Result<(Vec<Message>, String), TemplateError> {
    let Some(last) = messages.len().checked_sub(1) else {
        return Err(TemplateError::whole(
            "continue_final_message is set but the conversation is empty",
        ));
    };
    let mut tagged = messages.to_vec();
    let message = &mut tagged[last];
    let no_text = || {
        TemplateError::at(
            last,
            "continue_final_message is set but the final message has no text to continue",
        )
    };
    let original =
        match &mut message.content {
            None => return Err(TemplateError::at(
                last,
                "continue_final_message is set but the final message has no 'content' to continue",
            )),
            Some(Content::Text(s)) => {
                let original = s.clone();
                s.push_str(TAG);
                original
            }
            Some(Content::Parts(parts)) => {
                let text = parts
                    .iter_mut()
                    .rev()
                    .find_map(|p| match p {
                        ContentPart::Text(t) => Some(t),
                        ContentPart::Other { .. } => None,
                    })
                    .ok_or_else(no_text)?;
                let original = text.clone();
                text.push_str(TAG);
                original
            }
        };
    if let Some(raw) = &message.raw {
        let mut map = (**raw).clone();
        match map.get_mut("content") {
            Some(Value::String(s)) => s.push_str(TAG),
            Some(Value::Array(parts)) => {
                let text = parts
                    .iter_mut()
                    .rev()
                    .find_map(|p| p.get_mut("text"))
                    .and_then(|t| match t {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .ok_or_else(no_text)?;
                text.push_str(TAG);
            }
            _ => return Err(no_text()),
        }
        message.raw = Some(Arc::new(map));
    }
    Ok((tagged, original))
}

/// Cut the rendered `pieces` of a tagged conversation where the tag starts (transformers'
/// rule: the last occurrence; strip trailing whitespace if the template trimmed the tag).
pub fn cut_at_tag(pieces: &mut Pieces<'_>, final_text: &str) -> Result<(), TemplateError> {
    let rendered = pieces.render();
    let tag = TAG.trim_end();
    let (Some(at), true) = (
        rendered.rfind(tag),
        rendered.contains(crate::pystr::strip(final_text)),
    ) else {
        return Err(TemplateError::whole(
            "continue_final_message is set but the final message does not appear in the prompt the template \
             renders (the template deletes part of it)",
        ));
    };
    let intact = rendered[at..].starts_with(TAG);
    pieces.truncate_rendered(at);
    if !intact {
        pieces.rstrip_python();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_goes_after_the_last_text() {
        let messages = vec![
            Message::new("user", "q"),
            Message {
                role: "assistant".into(),
                content: Some(Content::Parts(vec![
                    ContentPart::Text("a".into()),
                    ContentPart::Text("b".into()),
                    ContentPart::Other {
                        kind: "image".into(),
                    },
                ])),
                ..Default::default()
            },
        ];
        let (tagged, original) = tag_final_message(&messages).unwrap();
        assert_eq!(original, "b");
        assert_eq!(
            tagged[1].content,
            Some(Content::Parts(vec![
                ContentPart::Text("a".into()),
                ContentPart::Text(format!("b{TAG}")),
                ContentPart::Other {
                    kind: "image".into()
                },
            ]))
        );
        assert_eq!(tagged[0], messages[0]);
        let missing = [Message {
            role: "assistant".into(),
            ..Default::default()
        }];
        assert!(tag_final_message(&missing)
            .unwrap_err()
            .to_string()
            .contains("no 'content'"));
        assert!(tag_final_message(&[]).is_err());
    }

    #[test]
    fn the_cut_follows_transformers() {
        let mut p = Pieces::new();
        p.text("<user>q</user><bot>");
        p.content(format!("Sure {TAG}"));
        p.text("</bot>");
        cut_at_tag(&mut p, "Sure ").unwrap();
        assert_eq!(
            p.render(),
            "<user>q</user><bot>Sure ",
            "tag intact: cut exactly"
        );
        let mut p = Pieces::new();
        p.text("<bot>");
        p.content(format!("Sure {}", TAG.trim_end()));
        p.text("</bot>");
        cut_at_tag(&mut p, "Sure ").unwrap();
        assert_eq!(
            p.render(),
            "<bot>Sure",
            "tag trimmed: whitespace before it stripped"
        );
        let mut p = Pieces::new();
        p.text("<bot></bot>");
        assert!(cut_at_tag(&mut p, "Sure").is_err());
    }
}
