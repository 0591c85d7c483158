//! Input preparation: what happens to a conversation between the caller and the renderer, in
//! one step.
//!
//! [`prepare`] takes the caller's messages and [`EncodeOptions`] and returns the [`Prepared`]
//! conversation the renderer sees: tool calls checked ([`tools`]), the final message tagged
//! for `continue_final_message` ([`prefill`]), consecutive messages merged when asked
//! ([`policies`]). After rendering, [`Prepared::finish`] undoes what preparation did to the
//! piece stream: message indices point at the caller's messages again, and the prompt is cut
//! where transformers cuts a continued message. A caller's conversation that needs none of
//! this is borrowed, never copied.

use std::borrow::Cow;

use crate::error::TemplateError;
use crate::message::{Message, TemplateArgs};
use crate::pieces::Pieces;
use crate::render::native::SystemPolicy;
use crate::template::DateTime;

pub mod policies;
pub mod prefill;
pub mod tools;

/// Options of one `encode`/`render` call (transformers' argument names). The default is the
/// safe one: no generation prompt, control tokens in content sanitized, no template arguments.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Append the header of a new assistant turn.
    pub add_generation_prompt: bool,
    /// Encode control tokens that appear in content as plain text (transformers'
    /// `sanitize_control_tokens=True`). When false, content is parsed like template text, as
    /// plain `apply_chat_template` does, so content can forge turns.
    pub sanitize_control_tokens: bool,
    /// Template keyword arguments.
    pub kwargs: TemplateArgs,
    /// What to do with a system message the format has no slot for (`system=`).
    pub system: SystemPolicy,
    /// Join consecutive messages of the same role before rendering (see [`policies`]).
    pub merge_consecutive: bool,
    /// What the template's `strftime_now()` returns on the Jinja path (the core never reads
    /// the clock; a template that calls it without `now` fails).
    pub now: Option<DateTime>,
    /// Leave the final (assistant) message open so the model continues it: the prompt ends
    /// right after that message's text, as transformers' `continue_final_message=True` cuts
    /// it (see [`prefill`]). Excludes `add_generation_prompt`.
    pub continue_final_message: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            add_generation_prompt: false,
            sanitize_control_tokens: true,
            kwargs: TemplateArgs::new(),
            system: SystemPolicy::Template,
            merge_consecutive: false,
            now: None,
            continue_final_message: false,
        }
    }
}

/// A conversation ready for the renderer, and what [`Prepared::finish`] must undo.
#[derive(Debug)]
pub struct Prepared<'m> {
    /// The messages the renderer sees.
    pub messages: Cow<'m, [Message]>,
    /// The options it renders with (`continue_final_message` is done by the tag, so it is
    /// off here).
    pub options: Cow<'m, EncodeOptions>,
    /// For each merged message, the caller's message it starts with (`merge_consecutive`).
    merged_from: Option<Vec<usize>>,
    /// The final message's text, where the prompt is cut (`continue_final_message`).
    continued: Option<String>,
}

/// Prepare `messages` for the renderer: check tool calls, tag the final message for
/// `continue_final_message`, merge consecutive messages with `merge_consecutive`.
/// `kwargs`, when given, replaces the template arguments of `options` (what remains after
/// the template-argument rule left some out). The tool calls of the first `checked` messages
/// are known to pass the check (a session's render memo recognizes them: see
/// [`crate::render::jinja::RenderMemo::converted_prefix`]).
pub fn prepare<'m>(
    messages: &'m [Message],
    options: &'m EncodeOptions,
    kwargs: Option<TemplateArgs>,
    checked: usize,
) -> Result<Prepared<'m>, TemplateError> {
    let mut prepared = Prepared {
        messages: Cow::Borrowed(messages),
        options: Cow::Borrowed(options),
        merged_from: None,
        continued: None,
    };
    if let Some(kwargs) = kwargs {
        prepared.options.to_mut().kwargs = kwargs;
    }
    tools::check_tool_calls_from(messages, checked, tools::ArgumentsCheck::DictOrJson)?;
    if options.continue_final_message {
        if options.add_generation_prompt {
            return Err(TemplateError::whole(
                "continue_final_message and add_generation_prompt are not compatible: the first continues the \
                 final message, the second starts a new assistant message",
            ));
        }
        let (tagged, final_text) = prefill::tag_final_message(messages)?;
        prepared.messages = Cow::Owned(tagged);
        prepared.options.to_mut().continue_final_message = false;
        prepared.continued = Some(final_text);
    }
    if options.merge_consecutive {
        let (merged, origin) = policies::merge_consecutive(&prepared.messages)?;
        prepared.messages = Cow::Owned(merged);
        prepared.merged_from = Some(origin);
    }
    Ok(prepared)
}

impl Prepared<'_> {
    /// An error the renderer raised, pointed at the caller's message.
    pub fn error(&self, error: TemplateError) -> TemplateError {
        match &self.merged_from {
            Some(origin) => policies::remap_error(error, origin),
            None => error,
        }
    }

    /// Whether [`Prepared::finish`] may change text with no message (it cuts the prompt at
    /// the final message for `continue_final_message`; renumbering changes only tags).
    pub fn cuts_text(&self) -> bool {
        self.continued.is_some()
    }

    /// Undo preparation on the rendered pieces: message indices are the caller's again, and a
    /// continued message ends the prompt.
    pub fn finish(&self, pieces: &mut Pieces<'_>) -> Result<(), TemplateError> {
        if let Some(origin) = &self.merged_from {
            pieces.remap_messages(origin);
        }
        if let Some(final_text) = &self.continued {
            prefill::cut_at_tag(pieces, final_text)?;
        }
        Ok(())
    }
}
