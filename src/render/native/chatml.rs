//! ChatML: `<|im_start|>{role}\n{content}<|im_end|>\n`, and the Qwen templates built on it.
//!
//! * `chatml` (OpenHermes-2.5-Mistral-7B): every message as written, roles passed through.
//! * `qwen2` (Qwen2-7B-Instruct): the same, preceded by the default system prompt
//!   `You are a helpful assistant.` when the first message is not `system`.
//! * `qwen2.5` (Qwen2.5-7B-Instruct): default system prompt
//!   `You are Qwen, created by Alibaba Cloud. You are a helpful assistant.`; renders `user`,
//!   `assistant` and `system` messages.
//! * `qwen3` (Qwen3-0.6B and the Qwen3 family): no default system prompt; assistant turns
//!   after the last real user query carry a `<think>` block (from `reasoning_content`, or
//!   split from `<think>...</think>` in the content); earlier turns lose their reasoning;
//!   `enable_thinking=False` appends an empty think block to the generation prompt.
//!
//! Refused, where the template would silently mangle the input: missing content, content
//! parts, `tool_calls` and `tool` messages (not rendered by chatids yet), and for qwen2.5 and
//! qwen3 any role other than `user`, `assistant`, `system` (their templates drop such
//! messages without a word).

use super::{rules, ArgKind, ChatFormat, RenderRequest, TokenResolver};
use crate::completion::{CallSyntax, Grammar, Trim};
use crate::error::{Refusal, Result, TemplateError};
use crate::message::Message;
use crate::pieces::{Pieces, TemplateToken};
use crate::pystr;

const QWEN2_DEFAULT_SYSTEM: &str = "You are a helpful assistant.";
const QWEN25_DEFAULT_SYSTEM: &str =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// Which ChatML template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatmlVariant {
    /// Plain ChatML (OpenHermes 2.5).
    Plain,
    /// Qwen2 Instruct.
    Qwen2,
    /// Qwen2.5 Instruct.
    Qwen25,
    /// Qwen3.
    Qwen3,
}

/// The ChatML family of formats.
pub struct Chatml {
    variant: ChatmlVariant,
    im_start: TemplateToken,
    im_end: TemplateToken,
    /// `<think>` and `</think>` (Qwen3 only).
    think: Option<(TemplateToken, TemplateToken)>,
}

impl Chatml {
    /// Resolve the format's tokens against a checkpoint.
    pub fn new(variant: ChatmlVariant, tokens: &TokenResolver<'_>) -> Result<Self> {
        let think = match variant {
            ChatmlVariant::Qwen3 => Some((tokens.token("<think>")?, tokens.token("</think>")?)),
            _ => None,
        };
        Ok(Chatml {
            variant,
            im_start: tokens.token("<|im_start|>")?,
            im_end: tokens.token("<|im_end|>")?,
            think,
        })
    }

    /// `<|im_start|>{role}\n` ... the caller writes the body ... then [`Self::close`].
    fn open<'a>(&'a self, out: &mut Pieces<'a>, role: &'a str, role_is_template_text: bool) {
        out.token(&self.im_start);
        if role_is_template_text {
            out.text(role);
        } else {
            out.content(role);
        }
        out.text("\n");
        out.begin_body();
    }

    /// `<|im_end|>\n`: `<|im_end|>` ends the body, the `\n` after it does not belong to it.
    fn close<'a>(&'a self, out: &mut Pieces<'a>) {
        out.token(&self.im_end);
        out.end_body();
        out.text("\n");
    }

    fn system_block<'a>(
        &'a self,
        out: &mut Pieces<'a>,
        message: Option<(usize, &'a str)>,
        default: &'static str,
    ) {
        out.set_message(message.map(|(i, _)| i));
        self.open(out, "system", true);
        match message {
            Some((_, content)) => out.content(content),
            None => out.text(default),
        }
        self.close(out);
    }

    fn render_plain<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        if self.variant == ChatmlVariant::Qwen2 && messages[0].role != "system" {
            self.system_block(out, None, QWEN2_DEFAULT_SYSTEM);
        }
        for (i, m) in messages.iter().enumerate() {
            rules::no_tool_calls(messages, i, self.name())?;
            let content = rules::text(messages, i, self.name())?;
            out.set_message(Some(i));
            self.open(out, &m.role, false);
            out.content(content);
            self.close(out);
        }
        Ok(())
    }

    /// Qwen2.5 and Qwen3.
    fn render_qwen<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        let name = self.name();
        for i in 0..messages.len() {
            rules::no_tool_calls(messages, i, name)?;
            match messages[i].role.as_str() {
                "user" | "assistant" | "system" => {}
                "tool" => {
                    return Err(TemplateError::at(i, format!("format {name} does not model 'tool' messages"))
                        .with(Refusal::Unmodeled))
                }
                other => {
                    return Err(TemplateError::at(
                        i,
                        format!("role {other:?} is not rendered by the {name} template (it would drop the message silently)"),
                    )
                    .with(Refusal::Dropped))
                }
            }
            rules::text(messages, i, name)?;
        }
        let first_is_system = messages[0].role == "system";
        let first_system =
            first_is_system.then(|| (0, rules::text(messages, 0, name).unwrap_or_default()));
        match self.variant {
            ChatmlVariant::Qwen25 => self.system_block(out, first_system, QWEN25_DEFAULT_SYSTEM),
            _ => {
                if let Some(system) = first_system {
                    self.system_block(out, Some(system), "");
                }
            }
        }
        let last_query = self.last_query_index(messages);
        for (i, m) in messages.iter().enumerate() {
            let content = rules::text(messages, i, name)?;
            match m.role.as_str() {
                "system" if i == 0 => continue,
                "assistant" if self.variant == ChatmlVariant::Qwen3 => {
                    out.set_message(Some(i));
                    self.qwen3_assistant(out, m, content, i > last_query, i + 1 == messages.len());
                }
                role => {
                    out.set_message(Some(i));
                    self.open(out, role_literal(role), true);
                    out.content(content);
                    self.close(out);
                }
            }
        }
        Ok(())
    }

    /// Qwen3's `ns.last_query_index`: the last user message that is not a wrapped tool
    /// response (`<tool_response>...</tool_response>`); the last index if there is none.
    fn last_query_index(&self, messages: &[Message]) -> usize {
        messages
            .iter()
            .enumerate()
            .rev()
            .find(|(_, m)| {
                m.role == "user"
                    && !m.text().is_some_and(|c| {
                        c.starts_with("<tool_response>") && c.ends_with("</tool_response>")
                    })
            })
            .map_or(messages.len() - 1, |(i, _)| i)
    }

    fn qwen3_assistant<'a>(
        &'a self,
        out: &mut Pieces<'a>,
        message: &'a Message,
        raw_content: &'a str,
        after_last_query: bool,
        is_last: bool,
    ) {
        let (mut content, reasoning) = match &message.reasoning_content {
            Some(reasoning) => (raw_content, reasoning.as_str()),
            None if raw_content.contains("</think>") => {
                let content = pystr::after_last(raw_content, "</think>").trim_start_matches('\n');
                let before = pystr::before_first(raw_content, "</think>").trim_end_matches('\n');
                (
                    content,
                    pystr::after_last(before, "<think>").trim_start_matches('\n'),
                )
            }
            None => (raw_content, ""),
        };
        self.open(out, "assistant", true);
        if after_last_query && (is_last || !reasoning.is_empty()) {
            let (think, think_end) = self
                .think
                .as_ref()
                .expect("qwen3 resolves its think tokens");
            out.token(think);
            out.text("\n");
            out.content(reasoning.trim_matches('\n'));
            out.text("\n");
            out.token(think_end);
            out.text("\n\n");
            content = content.trim_start_matches('\n');
        }
        out.content(content);
        self.close(out);
    }

    fn generation_prompt<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        out.set_message(None);
        self.open(out, "assistant", true);
        if self.variant == ChatmlVariant::Qwen3
            && rules::bool_kwarg(request.kwargs, "enable_thinking")? == Some(false)
        {
            let (think, think_end) = self
                .think
                .as_ref()
                .expect("qwen3 resolves its think tokens");
            out.token(think);
            out.text("\n\n");
            out.token(think_end);
            out.text("\n\n");
        }
        Ok(())
    }
}

/// The role as the static string the Qwen templates write (`user`, `assistant`, `system`).
fn role_literal(role: &str) -> &'static str {
    match role {
        "user" => "user",
        "assistant" => "assistant",
        _ => "system",
    }
}

impl ChatFormat for Chatml {
    fn name(&self) -> &'static str {
        match self.variant {
            ChatmlVariant::Plain => "chatml",
            ChatmlVariant::Qwen2 => "qwen2",
            ChatmlVariant::Qwen25 => "qwen2.5",
            ChatmlVariant::Qwen3 => "qwen3",
        }
    }

    fn write<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        match self.variant {
            ChatmlVariant::Plain | ChatmlVariant::Qwen2 => self.render_plain(request, out)?,
            ChatmlVariant::Qwen25 | ChatmlVariant::Qwen3 => self.render_qwen(request, out)?,
        }
        if request.add_generation_prompt {
            self.generation_prompt(request, out)?;
        }
        Ok(())
    }

    fn template_args(&self) -> &'static [(&'static str, ArgKind)] {
        match self.variant {
            ChatmlVariant::Qwen3 => &[("enable_thinking", ArgKind::Bool)],
            _ => &[],
        }
    }

    /// The content as given (Qwen3: `lstrip('\n')`, after a `<think>` block whose text is
    /// `strip('\n')`ed); Qwen2.5 and Qwen3 write each call as `\n<tool_call>\n{"name": ...,
    /// "arguments": ...}\n</tool_call>` after the content. Plain ChatML and Qwen2 write no calls.
    fn grammar(&self, token: &dyn Fn(&str) -> Option<u32>) -> Grammar {
        let mut g = match self.variant {
            ChatmlVariant::Qwen3 => {
                let mut g = Grammar::plain(self.name(), Trim::LeadingNewlines);
                g.reasoning = self.think.as_ref().map(|(open, close)| (open.id, close.id));
                g.reasoning_trim = Trim::Newlines;
                g
            }
            _ => Grammar::plain(self.name(), Trim::None),
        };
        if matches!(self.variant, ChatmlVariant::Qwen25 | ChatmlVariant::Qwen3) {
            if let (Some(open), Some(close)) = (token("<tool_call>"), token("</tool_call>")) {
                g.calls = CallSyntax::Tagged { open, close };
            }
        }
        g
    }

    fn stop_tokens(&self) -> &'static [&'static str] {
        match self.variant {
            ChatmlVariant::Plain => &["<|im_end|>"],
            _ => &["<|im_end|>", "<|endoftext|>"],
        }
    }
}
