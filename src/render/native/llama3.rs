//! Llama 3.x: `<|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>`.
//!
//! * `llama-3` (Meta-Llama-3-8B-Instruct): BOS once, then every message with its role passed
//!   through as written.
//! * `llama-3.1` (Llama-3.1-8B-Instruct, Llama-3.3-70B-Instruct) and `llama-3.2`
//!   (Llama-3.2-3B-Instruct): a system block is always written, with
//!   `Cutting Knowledge Date: December 2023` and `Today Date: {date_string}`; a first
//!   `system` message goes into that block (trimmed). `date_string` defaults to
//!   `"26 Jul 2024"` for 3.1; 3.2's template reads today's date, so the caller must pass it
//!   (the Python layer fills it from the clock, as transformers does).
//!
//! Refused, where the template would silently mangle the input: a missing content (the
//! template renders an empty string), a list of content parts (it renders the list's repr),
//! `tool_calls` and `tool`/`ipython` messages (not rendered by chatids yet).

use super::{rules, ArgKind, ChatFormat, RenderRequest, TokenResolver};
use crate::completion::{CallSyntax, Grammar, Trim};
use crate::error::{Refusal, Result, TemplateError};
use crate::message::Message;
use crate::pieces::{Pieces, TemplateToken};
use crate::pystr;

/// Which Llama 3 template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Llama3Variant {
    /// Meta-Llama-3-8B-Instruct.
    Llama3,
    /// Llama-3.1 / 3.3 Instruct.
    Llama31,
    /// Llama-3.2 Instruct.
    Llama32,
}

/// The Llama 3 family of formats.
pub struct Llama3 {
    variant: Llama3Variant,
    bos: TemplateToken,
    start_header: TemplateToken,
    end_header: TemplateToken,
    eot: TemplateToken,
}

impl Llama3 {
    /// Resolve the format's tokens against a checkpoint.
    pub fn new(variant: Llama3Variant, tokens: &TokenResolver<'_>) -> Result<Self> {
        Ok(Llama3 {
            variant,
            bos: tokens.bos()?,
            start_header: tokens.token("<|start_header_id|>")?,
            end_header: tokens.token("<|end_header_id|>")?,
            eot: tokens.token("<|eot_id|>")?,
        })
    }

    /// `<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>` for message `i`.
    fn message<'a>(
        &'a self,
        out: &mut Pieces<'a>,
        messages: &'a [Message],
        i: usize,
    ) -> Result<(), TemplateError> {
        let content = rules::text(messages, i, self.name())?;
        out.set_message(Some(i));
        out.token(&self.start_header);
        out.content(messages[i].role.as_str());
        out.token(&self.end_header);
        out.text("\n\n");
        out.begin_body();
        out.content(pystr::strip(content));
        out.token(&self.eot);
        out.end_body();
        Ok(())
    }

    fn generation_prompt<'a>(&'a self, out: &mut Pieces<'a>) {
        out.set_message(None);
        out.token(&self.start_header);
        out.text("assistant");
        out.token(&self.end_header);
        out.text("\n\n");
    }

    fn render_llama3<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        out.token(&self.bos);
        for i in 0..request.messages.len() {
            rules::no_tool_calls(request.messages, i, self.name())?;
            self.message(out, request.messages, i)?;
        }
        Ok(())
    }

    fn render_llama31<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        let date = match self.variant {
            Llama3Variant::Llama32 => {
                rules::clock_value(request, "date_string", "%d %b %Y", true, self.name())?
            }
            _ => std::borrow::Cow::Borrowed(
                rules::str_kwarg(request.kwargs, "date_string")?.unwrap_or("26 Jul 2024"),
            ),
        };
        out.token(&self.bos);
        let (system, first) = if messages[0].role == "system" {
            rules::no_tool_calls(messages, 0, self.name())?;
            out.set_message(Some(0));
            (pystr::strip(rules::text(messages, 0, self.name())?), 1)
        } else {
            ("", 0)
        };
        out.token(&self.start_header);
        out.text("system");
        out.token(&self.end_header);
        out.text("\n\n");
        out.begin_body();
        out.text("Cutting Knowledge Date: December 2023\nToday Date: ");
        out.content(date);
        out.text("\n\n");
        out.content(system);
        out.token(&self.eot);
        out.end_body();
        for i in first..messages.len() {
            let role = messages[i].role.as_str();
            if role == "tool" || role == "ipython" {
                return Err(TemplateError::at(
                    i,
                    format!(
                        "format {} does not model {role:?} messages (tool results)",
                        self.name()
                    ),
                )
                .with(Refusal::Unmodeled));
            }
            if messages[i].tool_calls.is_some() {
                // The template raises for an empty list too ("only supports single tool-calls").
                return Err(TemplateError::at(
                    i,
                    format!("format {} does not model 'tool_calls'", self.name()),
                )
                .with(Refusal::Unmodeled));
            }
            self.message(out, messages, i)?;
        }
        Ok(())
    }
}

impl ChatFormat for Llama3 {
    fn name(&self) -> &'static str {
        match self.variant {
            Llama3Variant::Llama3 => "llama-3",
            Llama3Variant::Llama31 => "llama-3.1",
            Llama3Variant::Llama32 => "llama-3.2",
        }
    }

    fn write<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        match self.variant {
            Llama3Variant::Llama3 => self.render_llama3(request, out)?,
            Llama3Variant::Llama31 | Llama3Variant::Llama32 => self.render_llama31(request, out)?,
        }
        if request.add_generation_prompt {
            self.generation_prompt(out);
        }
        Ok(())
    }

    fn stop_tokens(&self) -> &'static [&'static str] {
        match self.variant {
            Llama3Variant::Llama3 => &["<|eot_id|>", "<|end_of_text|>"],
            _ => &["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
        }
    }

    /// The template writes `content | trim`; Llama 3.1/3.2 write a call as the whole turn,
    /// `{"name": ..., "parameters": ...}`, or `<|python_tag|>` and a built-in's `name.call(...)`.
    fn grammar(&self, token: &dyn Fn(&str) -> Option<u32>) -> Grammar {
        let mut g = Grammar::plain(self.name(), Trim::Whitespace);
        if self.variant != Llama3Variant::Llama3 {
            if let Some(python_tag) = token("<|python_tag|>") {
                g.calls = CallSyntax::Llama3 { python_tag };
            }
        }
        g
    }

    fn template_args(&self) -> &'static [(&'static str, ArgKind)] {
        match self.variant {
            Llama3Variant::Llama3 => &[],
            _ => &[("date_string", ArgKind::Str)],
        }
    }

    fn clock_defaults(&self) -> &'static [(&'static str, &'static str)] {
        match self.variant {
            Llama3Variant::Llama32 => &[("date_string", "%d %b %Y")],
            _ => &[],
        }
    }
}
