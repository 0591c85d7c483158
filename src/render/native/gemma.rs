//! Gemma: `<bos><start_of_turn>user\n{content | trim}<end_of_turn>\n<start_of_turn>model\n...`.
//!
//! * `gemma` (Gemma 1 and 2 instruct): `assistant` is written as `model`, other roles as
//!   given; roles must alternate user/assistant; a system message makes the template raise
//!   (`system="fold"` folds it into the first user message as `system + "\n\n" + user`
//!   instead, then trims the whole as the template trims content).
//! * `gemma-3` (Gemma 3 instruct): a leading system message is prepended to the first user
//!   turn as `system + "\n\n"` (untrimmed); content may be a string or a list of parts
//!   (text parts trimmed one by one, image parts as `<start_of_image>`).
//!
//! Refused, where the template would silently drop input: a system message with no user turn
//! after it (Gemma 3), a system content list with more than its first part, and content parts
//! other than text and image.

use super::{rules, ChatFormat, RenderRequest, SystemPolicy, SystemSlot, TokenResolver};
use crate::completion::{Grammar, Trim};
use crate::error::{Refusal, Result, TemplateError};
use crate::message::{Content, ContentPart, Message};
use crate::pieces::{PieceKind, Pieces, TemplateToken};
use crate::pystr;

const ALTERNATION: &str = "Conversation roles must alternate user/assistant/user/assistant/...";

/// Which Gemma template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmaVariant {
    /// Gemma 1 and 2.
    Gemma,
    /// Gemma 3.
    Gemma3,
}

/// The Gemma formats.
pub struct Gemma {
    variant: GemmaVariant,
    bos: TemplateToken,
    start_of_turn: TemplateToken,
    end_of_turn: TemplateToken,
    /// `<start_of_image>` (Gemma 3).
    start_of_image: Option<TemplateToken>,
}

impl Gemma {
    /// Resolve the format's tokens against a checkpoint.
    pub fn new(variant: GemmaVariant, tokens: &TokenResolver<'_>) -> Result<Self> {
        Ok(Gemma {
            variant,
            bos: tokens.bos()?,
            start_of_turn: tokens.token("<start_of_turn>")?,
            end_of_turn: tokens.token("<end_of_turn>")?,
            start_of_image: match variant {
                GemmaVariant::Gemma3 => Some(tokens.token("<start_of_image>")?),
                GemmaVariant::Gemma => None,
            },
        })
    }

    fn open<'a>(&'a self, out: &mut Pieces<'a>, role: &'a str) {
        out.token(&self.start_of_turn);
        if role == "assistant" {
            out.text("model");
        } else {
            out.content(role);
        }
        out.text("\n");
        out.begin_body();
    }

    /// `<end_of_turn>` ends the body; the `\n` after it does not belong to it.
    fn close<'a>(&'a self, out: &mut Pieces<'a>) {
        out.token(&self.end_of_turn);
        out.end_body();
        out.text("\n");
    }

    /// The body of a Gemma 3 turn: a string trimmed, or parts one by one.
    fn gemma3_body<'a>(
        &'a self,
        out: &mut Pieces<'a>,
        messages: &'a [Message],
        i: usize,
    ) -> Result<(), TemplateError> {
        match &messages[i].content {
            Some(Content::Text(s)) => out.content(pystr::strip(s)),
            Some(Content::Parts(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    match part {
                        ContentPart::Text(t) => out.content(pystr::strip(t)),
                        ContentPart::Other { kind } if kind == "image" => {
                            out.token(self.start_of_image.as_ref().expect("gemma-3 resolves <start_of_image>"))
                        }
                        ContentPart::Other { kind } => {
                            return Err(TemplateError::at(
                                i,
                                format!("content part {j} has type {kind:?}, which the gemma-3 template drops silently"),
                            )
                            .with(Refusal::Dropped))
                        }
                    }
                }
            }
            None => {
                return Err(TemplateError::at(
                    i,
                    "format gemma-3 does not model a message without 'content'",
                )
                .with(Refusal::Unmodeled))
            }
        }
        Ok(())
    }

    fn render_gemma<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        let has_system = rules::starts_with_system(messages);
        if has_system && request.system != SystemPolicy::Fold {
            return Err(TemplateError::at(
                0,
                "System role not supported (the template raises; system=\"fold\" folds it into the first user message)",
            )
            .with(Refusal::TemplateRaises));
        }
        let first = usize::from(has_system);
        rules::alternation(messages, first, ALTERNATION)?;
        if first == messages.len() {
            return Err(TemplateError::at(
                0,
                "a system message needs a user message to be folded into",
            ));
        }
        for i in 0..messages.len() {
            rules::no_tool_calls(messages, i, self.name())?;
            rules::text(messages, i, self.name())?;
        }
        for i in first..messages.len() {
            let content = rules::text(messages, i, self.name())?;
            out.set_message(Some(i));
            self.open(out, &messages[i].role);
            if i == first && has_system {
                let system = rules::text(messages, 0, self.name())?;
                rules::emit_stripped(
                    out,
                    &[
                        (PieceKind::Content, system, Some(0)),
                        (PieceKind::TemplateText, "\n\n", Some(0)),
                        (PieceKind::Content, content, Some(i)),
                    ],
                );
                out.set_message(Some(i));
                out.begin_body();
            } else {
                out.content(pystr::strip(content));
            }
            self.close(out);
        }
        Ok(())
    }

    fn render_gemma3<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        let first = rules::folded_system_turns(messages, ALTERNATION)?;
        let has_system = first == 1;
        let system = if has_system {
            rules::no_tool_calls(messages, 0, self.name())?;
            Some(match &messages[0].content {
                Some(Content::Text(s)) => s.as_str(),
                Some(Content::Parts(parts)) => match parts.as_slice() {
                    [ContentPart::Text(t)] => t.as_str(),
                    [ContentPart::Text(_), ..] => {
                        return Err(TemplateError::at(0, "the gemma-3 template keeps only the first part of a system message; pass one text part")
                            .with(Refusal::Dropped))
                    }
                    _ => {
                        return Err(TemplateError::at(0, "format gemma-3 models a system message whose first content part is text")
                            .with(Refusal::Unmodeled))
                    }
                },
                None => {
                    return Err(TemplateError::at(0, "format gemma-3 does not model a message without 'content'")
                        .with(Refusal::Unmodeled))
                }
            })
        } else {
            None
        };
        for i in first..messages.len() {
            rules::no_tool_calls(messages, i, self.name())?;
            out.set_message(Some(i));
            self.open(out, &messages[i].role);
            if i == first {
                if let Some(system) = system {
                    out.set_message(Some(0));
                    out.begin_body();
                    out.content(system);
                    out.text("\n\n");
                    out.set_message(Some(i));
                    out.begin_body();
                }
            }
            self.gemma3_body(out, messages, i)?;
            self.close(out);
        }
        Ok(())
    }
}

impl ChatFormat for Gemma {
    fn name(&self) -> &'static str {
        match self.variant {
            GemmaVariant::Gemma => "gemma",
            GemmaVariant::Gemma3 => "gemma-3",
        }
    }

    fn write<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        out.token(&self.bos);
        match self.variant {
            GemmaVariant::Gemma => self.render_gemma(request, out)?,
            GemmaVariant::Gemma3 => self.render_gemma3(request, out)?,
        }
        if request.add_generation_prompt {
            out.set_message(None);
            out.token(&self.start_of_turn);
            out.text("model\n");
        }
        Ok(())
    }

    fn stop_tokens(&self) -> &'static [&'static str] {
        &["<end_of_turn>", "<eos>"]
    }

    /// `content | trim` after `<start_of_turn>model\n`; no tool calls.
    fn grammar(&self, _token: &dyn Fn(&str) -> Option<u32>) -> Grammar {
        Grammar::plain(self.name(), Trim::Whitespace)
    }

    fn system_slot(&self) -> SystemSlot {
        match self.variant {
            GemmaVariant::Gemma => SystemSlot::Unsupported,
            GemmaVariant::Gemma3 => SystemSlot::FoldedByTemplate,
        }
    }

    fn alternates(&self) -> bool {
        true
    }

    fn role_renames(&self) -> &'static [(&'static str, &'static str)] {
        &[("assistant", "model")]
    }
}
