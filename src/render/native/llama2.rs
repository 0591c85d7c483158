//! Llama 2 chat (Llama-2-7b-chat-hf):
//! `<s>[INST] {user.strip()} [/INST] {assistant.strip()} </s><s>[INST] ...`.
//!
//! `<s>` and `</s>` are emitted as ids; `[INST]`, `[/INST]`, `<<SYS>>` are plain text in
//! Llama 2's vocabulary. A leading system message is folded into the first user turn as
//! `<<SYS>>\n{system}\n<</SYS>>\n\n{user}` (then the whole is stripped). Roles must alternate
//! user/assistant after it, as the template demands. The template ignores
//! `add_generation_prompt` (a prompt already ends with `[/INST]`).
//!
//! The tokenizer is a SentencePiece BPE; transformers 5 runs it with
//! `Metaspace(prepend_scheme="always")` for `legacy: true`, so every run of text between two
//! special tokens gets its own `▁` prefix (see `checkpoint::compat`).
//!
//! Refused, where the template would silently drop input: a conversation that is only a
//! system message, and messages of other roles in assistant position (rendered as nothing).

use super::{rules, ChatFormat, RenderRequest, SystemSlot, TokenResolver};
use crate::completion::{Grammar, Trim};
use crate::error::{Refusal, Result, TemplateError};
use crate::pieces::{PieceKind, Pieces, TemplateToken};
use crate::pystr;

const ALTERNATION: &str = "Conversation roles must alternate user/assistant/user/assistant/...";

/// The Llama 2 chat format.
pub struct Llama2 {
    bos: TemplateToken,
    eos: TemplateToken,
}

impl Llama2 {
    /// Resolve the format's tokens against a checkpoint.
    pub fn new(tokens: &TokenResolver<'_>) -> Result<Self> {
        Ok(Llama2 {
            bos: tokens.bos()?,
            eos: tokens.eos()?,
        })
    }
}

impl ChatFormat for Llama2 {
    fn name(&self) -> &'static str {
        "llama-2"
    }

    fn write<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        let first = rules::folded_system_turns(messages, ALTERNATION)?;
        let has_system = first == 1;
        for i in 0..messages.len() {
            rules::no_tool_calls(messages, i, self.name())?;
            rules::text(messages, i, self.name())?;
        }
        for i in first..messages.len() {
            let content = rules::text(messages, i, self.name())?;
            match messages[i].role.as_str() {
                "user" => {
                    out.set_message(Some(i));
                    out.token(&self.bos);
                    out.text("[INST] ");
                    out.begin_body();
                    if i == first && has_system {
                        let system = rules::text(messages, 0, self.name())?;
                        rules::emit_stripped(
                            out,
                            &[
                                (PieceKind::TemplateText, "<<SYS>>\n", Some(0)),
                                (PieceKind::Content, system, Some(0)),
                                (PieceKind::TemplateText, "\n<</SYS>>\n\n", Some(0)),
                                (PieceKind::Content, content, Some(i)),
                            ],
                        );
                        out.set_message(Some(i));
                        out.begin_body();
                    } else {
                        out.content(pystr::strip(content));
                    }
                    out.text(" [/INST]");
                    out.end_body();
                }
                "assistant" => {
                    // No header: the model writes everything after " [/INST]".
                    out.set_message(Some(i));
                    out.begin_body();
                    out.text(" ");
                    out.content(pystr::strip(content));
                    out.text(" ");
                    out.token(&self.eos);
                    out.end_body();
                }
                other => {
                    return Err(TemplateError::at(
                        i,
                        format!("role {other:?} is not rendered by the llama-2 template (it would drop the message silently)"),
                    )
                    .with(Refusal::Dropped))
                }
            }
        }
        Ok(())
    }

    fn stop_tokens(&self) -> &'static [&'static str] {
        &["</s>"]
    }

    /// `' ' + content.strip() + ' ' + eos_token`; the decoder drops the leading space.
    fn grammar(&self, _token: &dyn Fn(&str) -> Option<u32>) -> Grammar {
        Grammar::plain(self.name(), Trim::Whitespace)
    }

    fn ignores_generation_prompt(&self) -> bool {
        true
    }

    fn system_slot(&self) -> SystemSlot {
        SystemSlot::FoldedByTemplate
    }

    fn alternates(&self) -> bool {
        true
    }
}
