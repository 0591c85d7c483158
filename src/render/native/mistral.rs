//! Mistral's Hugging Face chat templates, one format per template version.
//!
//! * `mistral-v1` (Mistral-7B-Instruct v0.1/v0.2, Mixtral-8x7B):
//!   `<s> [INST] {system}\n\n{user} [/INST] {assistant}</s> [INST] ...`; `[INST]` is plain text
//!   (the v1 vocabulary has no control tokens); a system message goes into the first user turn.
//! * `mistral-v3` (Mistral-7B-Instruct v0.3): `<s>[INST] {user}[/INST] {assistant | trim}</s>`
//!   with `[INST]`/`[/INST]` as ids; the system message goes into the *last* user turn.
//! * `mistral-v3-tekken` (Mistral-Nemo-Instruct-2407): the same without the spaces:
//!   `<s>[INST]{user}[/INST]{assistant}</s>`.
//! * `mistral-v7` (Mistral-Large-Instruct-2411): `[SYSTEM_PROMPT] {system}[/SYSTEM_PROMPT]`
//!   wherever a system message appears, `[INST] {user}[/INST]`, ` {assistant}</s>`; no
//!   alternation rule.
//! * `mistral-v7-tekken` (Mistral-Small-24B-Instruct-2501): `[SYSTEM_PROMPT]...` without
//!   spaces, and a default system prompt that contains today's date when the conversation has
//!   no system message. The date is the template argument `today` (`YYYY-MM-DD`); the Python
//!   layer fills it from the clock as transformers does, the core never reads the clock.
//!
//! The templates ignore `add_generation_prompt`. Refused, where a template would silently drop
//! input: a system message with no user turn to carry it (v1, v3), a v3 system message when the
//! conversation ends with an assistant turn (the template puts it in the last user turn only
//! when that turn is the final message), tool calls and tool results (not rendered yet).

use super::{rules, ChatFormat, RenderRequest, SystemSlot, TokenResolver};
use crate::completion::{CallSyntax, Grammar, Trim};
use crate::error::{Refusal, Result, TemplateError};
use crate::pieces::{Pieces, TemplateToken};
use crate::pystr;

const ALTERNATION: &str =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
const ONLY_USER_ASSISTANT: &str =
    "Only user and assistant roles are supported, with the exception of an initial optional system message! (the template raises)";
const ONLY_USER_SYSTEM_ASSISTANT: &str =
    "Only user, system and assistant roles are supported! (the template raises)";

/// The first line of Mistral-Small-24B-Instruct-2501's default system prompt, up to the date.
const SMALL_2501_DEFAULT_SYSTEM_HEAD: &str = "You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\nYour knowledge base was last updated on 2023-10-01. The current date is ";
/// The rest of that default system prompt, after the date.
const SMALL_2501_DEFAULT_SYSTEM_TAIL: &str = ".\n\nWhen you're not sure about some information, you say that you don't have the information and don't make up anything.\nIf the user's question is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do not try to answer it right away and you rather ask the user to clarify their request (e.g. \"What are some good restaurants around me?\" => \"Where are you?\" or \"When is the next flight to Tokyo\" => \"Where do you travel from?\")";

/// Which Mistral template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MistralVariant {
    /// v1 (7B v0.1/v0.2, Mixtral 8x7B).
    V1,
    /// v3 (7B v0.3), SentencePiece.
    V3,
    /// v3 with tekken (Nemo 2407).
    V3Tekken,
    /// v7 (Large 2411), SentencePiece.
    V7,
    /// v7 with tekken (Small 24B 2501).
    V7Tekken,
}

/// How an `[INST]`-style marker is written: as an id, or as plain text (v1).
enum Marker {
    Token(TemplateToken),
    Text(&'static str),
}

/// The Mistral formats (Hugging Face template route).
pub struct Mistral {
    variant: MistralVariant,
    bos: TemplateToken,
    eos: TemplateToken,
    inst: Marker,
    inst_end: Marker,
    /// `[SYSTEM_PROMPT]` and `[/SYSTEM_PROMPT]` (v7).
    system: Option<(TemplateToken, TemplateToken)>,
}

impl Mistral {
    /// Resolve the format's tokens against a checkpoint.
    pub fn new(variant: MistralVariant, tokens: &TokenResolver<'_>) -> Result<Self> {
        let (inst, inst_end) = match variant {
            MistralVariant::V1 => (Marker::Text("[INST]"), Marker::Text("[/INST]")),
            _ => (
                Marker::Token(tokens.token("[INST]")?),
                Marker::Token(tokens.token("[/INST]")?),
            ),
        };
        let system = match variant {
            MistralVariant::V7 | MistralVariant::V7Tekken => Some((
                tokens.token("[SYSTEM_PROMPT]")?,
                tokens.token("[/SYSTEM_PROMPT]")?,
            )),
            _ => None,
        };
        Ok(Mistral {
            variant,
            bos: tokens.bos()?,
            eos: tokens.eos()?,
            inst,
            inst_end,
            system,
        })
    }

    fn marker<'a>(out: &mut Pieces<'a>, marker: &'a Marker) {
        match marker {
            Marker::Token(t) => out.token(t),
            Marker::Text(t) => out.text(*t),
        }
    }

    /// v1, v3 and v3-tekken: alternating turns, system folded into a user turn.
    fn render_v1_v3<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        let name = self.name();
        let has_system = rules::starts_with_system(messages);
        let first = usize::from(has_system);
        for i in 0..messages.len() {
            rules::no_tool_calls(messages, i, name)?;
            let role = messages[i].role.as_str();
            if self.variant != MistralVariant::V1 && (role == "tool" || role == "tool_results") {
                return Err(TemplateError::at(
                    i,
                    format!("format {name} does not model 'tool' messages"),
                )
                .with(Refusal::Unmodeled));
            }
        }
        rules::alternation(messages, first, ALTERNATION)?;
        for i in 0..messages.len() {
            if i >= first && messages[i].role != "user" && messages[i].role != "assistant" {
                return Err(TemplateError::at(i, ONLY_USER_ASSISTANT).with(Refusal::TemplateRaises));
            }
            rules::text(messages, i, name)?;
        }
        let last = messages.len() - 1;
        // v1 folds the system into the first user turn, v3 into the last one (if it ends the
        // conversation).
        let system_turn = match self.variant {
            MistralVariant::V1 => first,
            _ => last,
        };
        if has_system && (messages.len() <= first || messages[system_turn].role != "user") {
            return Err(TemplateError::at(
                0,
                match self.variant {
                    MistralVariant::V1 => "a system message needs a user message after it; the template would drop it",
                    _ => "the template writes the system message into the last user turn only when the conversation ends with it; here it would be dropped",
                },
            )
            .with(Refusal::Dropped));
        }
        let system = if has_system {
            Some(rules::text(messages, 0, name)?)
        } else {
            None
        };
        let spaced = self.variant != MistralVariant::V3Tekken;
        out.token(&self.bos);
        for i in first..messages.len() {
            let content = rules::text(messages, i, name)?;
            out.set_message(Some(i));
            if messages[i].role == "user" {
                if self.variant == MistralVariant::V1 {
                    out.text(" ");
                }
                Self::marker(out, &self.inst);
                if spaced {
                    out.text(" ");
                }
                out.begin_body();
                if let (Some(system), true) = (system, i == system_turn) {
                    out.set_message(Some(0));
                    out.begin_body();
                    out.content(system);
                    out.text("\n\n");
                    out.set_message(Some(i));
                    out.begin_body();
                }
                out.content(content);
                if self.variant == MistralVariant::V1 {
                    out.text(" ");
                }
                Self::marker(out, &self.inst_end);
                out.end_body();
            } else {
                // No header: the model writes everything after [/INST].
                out.begin_body();
                match self.variant {
                    MistralVariant::V1 => {
                        out.text(" ");
                        out.content(content);
                    }
                    MistralVariant::V3 => {
                        out.text(" ");
                        out.content(pystr::strip(content));
                    }
                    _ => out.content(content),
                }
                out.token(&self.eos);
                out.end_body();
            }
        }
        Ok(())
    }

    /// v7 and v7-tekken: any order, system turns where they appear.
    fn render_v7<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        let messages = request.messages;
        let name = self.name();
        for i in 0..messages.len() {
            rules::no_tool_calls(messages, i, name)?;
            if !matches!(messages[i].role.as_str(), "user" | "system" | "assistant") {
                return Err(
                    TemplateError::at(i, ONLY_USER_SYSTEM_ASSISTANT).with(Refusal::TemplateRaises)
                );
            }
            rules::text(messages, i, name)?;
        }
        let (system_start, system_end) = self.system.as_ref().expect("v7 resolves [SYSTEM_PROMPT]");
        let spaced = self.variant == MistralVariant::V7;
        out.token(&self.bos);
        if self.variant == MistralVariant::V7Tekken && messages[0].role != "system" {
            let today = rules::clock_value(request, "today", "%Y-%m-%d", false, name)?;
            out.token(system_start);
            out.text(SMALL_2501_DEFAULT_SYSTEM_HEAD);
            out.content(today);
            out.text(SMALL_2501_DEFAULT_SYSTEM_TAIL);
            out.token(system_end);
        }
        for (i, m) in messages.iter().enumerate() {
            let content = rules::text(messages, i, name)?;
            out.set_message(Some(i));
            match m.role.as_str() {
                "user" => {
                    Self::marker(out, &self.inst);
                    if spaced {
                        out.text(" ");
                    }
                    out.begin_body();
                    out.content(content);
                    Self::marker(out, &self.inst_end);
                    out.end_body();
                }
                "system" => {
                    out.token(system_start);
                    if spaced {
                        out.text(" ");
                    }
                    out.begin_body();
                    out.content(content);
                    out.token(system_end);
                    out.end_body();
                }
                _ => {
                    // No header: the model writes everything after [/INST].
                    out.begin_body();
                    if spaced {
                        out.text(" ");
                    }
                    out.content(content);
                    out.token(&self.eos);
                    out.end_body();
                }
            }
        }
        Ok(())
    }
}

impl ChatFormat for Mistral {
    fn name(&self) -> &'static str {
        match self.variant {
            MistralVariant::V1 => "mistral-v1",
            MistralVariant::V3 => "mistral-v3",
            MistralVariant::V3Tekken => "mistral-v3-tekken",
            MistralVariant::V7 => "mistral-v7",
            MistralVariant::V7Tekken => "mistral-v7-tekken",
        }
    }

    fn write<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        match self.variant {
            MistralVariant::V7 | MistralVariant::V7Tekken => self.render_v7(request, out),
            _ => self.render_v1_v3(request, out),
        }
    }

    fn stop_tokens(&self) -> &'static [&'static str] {
        &["</s>"]
    }

    /// v3 writes `" " + content | trim`, v1 and v7 `" " + content` (the decoder drops the
    /// space), the tekken variants `content` as given. v3 and v3-tekken write calls as
    /// `[TOOL_CALLS]` and a JSON list of `{"name", "arguments", "id"}` (and drop the content of
    /// such a message); the v1 and v7 templates write no calls.
    fn grammar(&self, token: &dyn Fn(&str) -> Option<u32>) -> Grammar {
        let trim = match self.variant {
            MistralVariant::V3 => Trim::Whitespace,
            _ => Trim::None,
        };
        let mut g = Grammar::plain(self.name(), trim);
        if matches!(self.variant, MistralVariant::V1 | MistralVariant::V7) {
            g.content_prefix = " ";
        }
        if matches!(self.variant, MistralVariant::V3 | MistralVariant::V3Tekken) {
            if let Some(marker) = token("[TOOL_CALLS]") {
                g.calls = CallSyntax::List { marker };
                g.writes_call_ids = true;
            }
        }
        g
    }

    fn clock_defaults(&self) -> &'static [(&'static str, &'static str)] {
        match self.variant {
            MistralVariant::V7Tekken => &[("today", "%Y-%m-%d")],
            _ => &[],
        }
    }

    fn ignores_generation_prompt(&self) -> bool {
        true
    }

    fn system_slot(&self) -> SystemSlot {
        match self.variant {
            MistralVariant::V7 | MistralVariant::V7Tekken => SystemSlot::Native,
            _ => SystemSlot::FoldedByTemplate,
        }
    }

    fn alternates(&self) -> bool {
        !matches!(self.variant, MistralVariant::V7 | MistralVariant::V7Tekken)
    }
}
