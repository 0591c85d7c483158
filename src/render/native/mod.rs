//! Native chat formats: Rust renderers that reproduce a checkpoint's chat template exactly.
//!
//! A format walks the messages and emits [`Pieces`]; it never encodes text itself. Each format
//! documents the template it reproduces and every place where chatids refuses an input that
//! the template would silently drop or mangle.
//!
//! Which format a checkpoint gets is decided by [`identify`]: its chat template must be
//! byte-for-byte one of the official templates the format was written from (one trailing
//! newline aside, which Jinja ignores). Any other template needs an explicit `format=`.

mod chatml;
mod gemma;
mod llama2;
mod llama3;
mod mistral;

use sha2::{Digest, Sha256};

use crate::checkpoint::Checkpoint;
use crate::completion::Grammar;
use crate::error::{Error, Refusal, Result, TemplateError};
use crate::message::{Content, Message, TemplateValue};
use crate::pieces::{PieceKind, Pieces, TemplateToken};
use crate::template::DateTime;

pub use chatml::{Chatml, ChatmlVariant};
pub use gemma::{Gemma, GemmaVariant};
pub use llama2::Llama2;
pub use llama3::{Llama3, Llama3Variant};
pub use mistral::{Mistral, MistralVariant};

pub use crate::message::TemplateArgs;

/// What to render.
#[derive(Debug, Clone, Copy)]
pub struct RenderRequest<'a> {
    /// The conversation.
    pub messages: &'a [Message],
    /// Append the header of a new assistant turn.
    pub add_generation_prompt: bool,
    /// Template keyword arguments.
    pub kwargs: &'a TemplateArgs,
    /// What to do with a system message the format has no slot for.
    pub system: SystemPolicy,
    /// What the template's clock (`strftime_now()`) returns, for formats whose template reads
    /// it ([`ChatFormat::clock_defaults`]); the core never reads the clock itself.
    pub now: Option<DateTime>,
}

/// The type of a template argument a native format models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// A string (`date_string`).
    Str,
    /// A boolean (`enable_thinking`).
    Bool,
}

/// What to do with a leading system message (the `system=` option).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SystemPolicy {
    /// Whatever the template does: use its slot, fold it the template's way, or raise.
    #[default]
    Template,
    /// Raise if the format has no system slot of its own (instead of folding it).
    Error,
    /// Fold it into the first user message, for formats whose template raises on it
    /// (Gemma 1/2: `system + "\n\n" + user`, then the template's own handling).
    Fold,
}

impl SystemPolicy {
    /// Parse `"error"` / `"fold"` (`None` is [`SystemPolicy::Template`]).
    pub fn parse(value: Option<&str>) -> Result<Self, TemplateError> {
        match value {
            None => Ok(SystemPolicy::Template),
            Some("error") => Ok(SystemPolicy::Error),
            Some("fold") => Ok(SystemPolicy::Fold),
            Some(other) => Err(TemplateError::whole(format!(
                "system must be None, \"error\" or \"fold\", not {other:?}"
            ))),
        }
    }
}

/// Where a format puts a system message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemSlot {
    /// It has a system turn of its own.
    Native,
    /// The template folds it into a user turn (Llama 2, Mistral v1/v3, Gemma 3).
    FoldedByTemplate,
    /// The template raises on it (Gemma 1/2).
    Unsupported,
}

/// A native chat format.
pub trait ChatFormat: Send + Sync {
    /// The format's name (`"llama-3.1"`, `"qwen3"`, ...).
    fn name(&self) -> &'static str;

    /// Emit the pieces of `request` into `out`. The checks every format declares rather than
    /// repeats have passed ([`ChatFormat::render`]): the conversation has a message, every
    /// template argument is one of [`ChatFormat::template_args`], and the `system=` option
    /// fits [`ChatFormat::system_slot`].
    fn write<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError>;

    /// Check `request` against what the format declares, then [`ChatFormat::write`] it. Formats
    /// implement `write`, never this.
    fn render<'a>(
        &'a self,
        request: &RenderRequest<'a>,
        out: &mut Pieces<'a>,
    ) -> Result<(), TemplateError> {
        rules::not_empty(request.messages)?;
        rules::known_kwargs(request.kwargs, self.template_args(), self.name())?;
        rules::system_policy(request, self.system_slot(), self.name())?;
        self.write(request, out)
    }

    /// The token texts that end an assistant turn in this format (resolved against the
    /// vocabulary; missing ones are skipped).
    fn stop_tokens(&self) -> &'static [&'static str];

    /// How the format writes an assistant turn, for reading a completion back
    /// ([`crate::completion`]). `token` resolves a control token's text to its id (`None`
    /// when the vocabulary lacks it: the format then reads no calls of that syntax). The
    /// encoder adds the stop tokens and the control-token set.
    fn grammar(&self, token: &dyn Fn(&str) -> Option<u32>) -> Grammar;

    /// The template arguments the format models, with their type. Any other argument the
    /// template reads is rendered by the template itself (the format refuses it as
    /// [`crate::error::Refusal::Unmodeled`]).
    fn template_args(&self) -> &'static [(&'static str, ArgKind)] {
        &[]
    }

    /// Values the template takes from its clock (`strftime_now()`), with the `strftime` format
    /// it uses: the format fills them from [`RenderRequest::now`] (where the name is also one of
    /// [`ChatFormat::template_args`], only when the caller did not pass it).
    fn clock_defaults(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Where the format puts a system message.
    fn system_slot(&self) -> SystemSlot {
        SystemSlot::Native
    }

    /// Whether the template requires user/assistant alternation.
    fn alternates(&self) -> bool {
        false
    }

    /// Whether the template ignores `add_generation_prompt` (Llama 2, Mistral).
    fn ignores_generation_prompt(&self) -> bool {
        false
    }

    /// Roles the template writes under another name (`assistant` -> `model`).
    fn role_renames(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
}

/// The names of all native formats.
pub const FORMAT_NAMES: &[&str] = &[
    "llama-3",
    "llama-3.1",
    "llama-3.2",
    "chatml",
    "qwen2",
    "qwen2.5",
    "qwen3",
    "llama-2",
    "mistral-v1",
    "mistral-v3",
    "mistral-v3-tekken",
    "mistral-v7",
    "mistral-v7-tekken",
    "gemma",
    "gemma-3",
];

/// Official templates each format reproduces: sha256 of the template (one trailing newline
/// removed), the format, and where the template comes from.
const KNOWN_TEMPLATES: &[(&str, &str, &str)] = &[
    (
        "ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122",
        "llama-3",
        "meta-llama/Meta-Llama-3-8B-Instruct",
    ),
    (
        "93c0e9aa3629bbd77e68dbc0f5621f6e6b23aa8d74b932595cdb8d64684526d7",
        "llama-3.1",
        "meta-llama/Llama-3.1-8B-Instruct (also Llama-3.3-70B-Instruct)",
    ),
    (
        "d82792f95932f1c9cef5c4bd992f171225e3bf8c7b609b4557c9e1ec96be819f",
        "llama-3.2",
        "meta-llama/Llama-3.2-3B-Instruct",
    ),
    (
        "153280e3ff55d19da1398bdb3914ee2a51b80429bfaedde11d7d216c39db80f3",
        "chatml",
        "teknium/OpenHermes-2.5-Mistral-7B",
    ),
    (
        "793202280c0910ab26bc6eb57c8212c2417324c6d8c4efd0d10d59092ab3e3eb",
        "qwen2",
        "Qwen/Qwen2-7B-Instruct",
    ),
    (
        "55b2f4a26ac9ee719330a61a0c39d9e538b0e9322212f048326318cff4f8674a",
        "qwen2.5",
        "Qwen/Qwen2.5-7B-Instruct",
    ),
    (
        "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
        "qwen3",
        "Qwen/Qwen3-0.6B",
    ),
    (
        "e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf",
        "llama-2",
        "meta-llama/Llama-2-7b-chat-hf",
    ),
    (
        "bbc58aad99454df60138be9530c9601a0adfe3d8932cda975e1f10b2410ddc51",
        "mistral-v1",
        "mistralai/Mistral-7B-Instruct-v0.1 (also v0.2 and Mixtral-8x7B-Instruct)",
    ),
    (
        "cafb64e0e9e5fd2503054b3479593fae39cbdfd52338ce8af9bb4664a8eb05bd",
        "mistral-v3",
        "mistralai/Mistral-7B-Instruct-v0.3",
    ),
    (
        "e7deee034838db2bfc7487788a3013d8a307ab69f72f3c54a85f06fd76007d4e",
        "mistral-v3-tekken",
        "mistralai/Mistral-Nemo-Instruct-2407",
    ),
    (
        "3c4ad5fa60dd8c7ccdf82fa4225864c903e107728fcaf859fa6052cb80c92ee9",
        "mistral-v7",
        "mistralai/Mistral-Large-Instruct-2411",
    ),
    (
        "3934d199bfe5b6fab5cba1b5f8ee475e8d5738ac315f21cb09545b4e665cc005",
        "mistral-v7-tekken",
        "mistralai/Mistral-Small-24B-Instruct-2501",
    ),
    (
        "ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6",
        "gemma",
        "google/gemma-2-2b-it (the Gemma 1/2 template)",
    ),
    (
        "8d9e3a3c114fb2053ec500184677af4f7e5f8ec2582443cd535834e68b3ade29",
        "gemma-3",
        "google/gemma-3-it",
    ),
];

/// The sha256 (hex) by which a template is recognised: of its text with one trailing
/// newline removed (Jinja drops a single trailing newline, so both render the same).
pub fn template_fingerprint(template: &str) -> String {
    let text = template.strip_suffix('\n').unwrap_or(template);
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The native format whose official template is exactly `template`, and where that
/// template comes from.
pub fn identify(template: &str) -> Option<(&'static str, &'static str)> {
    let fp = template_fingerprint(template);
    KNOWN_TEMPLATES
        .iter()
        .find(|(hash, _, _)| *hash == fp)
        .map(|&(_, name, source)| (name, source))
}

/// Build format `name` for `checkpoint`, resolving its control tokens.
pub fn build(name: &str, checkpoint: &Checkpoint) -> Result<Box<dyn ChatFormat>> {
    let tokens = TokenResolver {
        checkpoint,
        format: name,
    };
    Ok(match name {
        "llama-3" => Box::new(Llama3::new(Llama3Variant::Llama3, &tokens)?),
        "llama-3.1" => Box::new(Llama3::new(Llama3Variant::Llama31, &tokens)?),
        "llama-3.2" => Box::new(Llama3::new(Llama3Variant::Llama32, &tokens)?),
        "chatml" => Box::new(Chatml::new(ChatmlVariant::Plain, &tokens)?),
        "qwen2" => Box::new(Chatml::new(ChatmlVariant::Qwen2, &tokens)?),
        "qwen2.5" => Box::new(Chatml::new(ChatmlVariant::Qwen25, &tokens)?),
        "qwen3" => Box::new(Chatml::new(ChatmlVariant::Qwen3, &tokens)?),
        "llama-2" => Box::new(Llama2::new(&tokens)?),
        "mistral-v1" => Box::new(Mistral::new(MistralVariant::V1, &tokens)?),
        "mistral-v3" => Box::new(Mistral::new(MistralVariant::V3, &tokens)?),
        "mistral-v3-tekken" => Box::new(Mistral::new(MistralVariant::V3Tekken, &tokens)?),
        "mistral-v7" => Box::new(Mistral::new(MistralVariant::V7, &tokens)?),
        "mistral-v7-tekken" => Box::new(Mistral::new(MistralVariant::V7Tekken, &tokens)?),
        "gemma" => Box::new(Gemma::new(GemmaVariant::Gemma, &tokens)?),
        "gemma-3" => Box::new(Gemma::new(GemmaVariant::Gemma3, &tokens)?),
        other => {
            return Err(Error::Load(format!(
                "unknown format {other:?}; the native formats are {}",
                FORMAT_NAMES.join(", ")
            )))
        }
    })
}

/// Looks up the control tokens a format writes, and checks that emitting each as an id is
/// exactly what the tokenizer would do with the token's text in the rendered prompt.
pub struct TokenResolver<'c> {
    checkpoint: &'c Checkpoint,
    format: &'c str,
}

impl TokenResolver<'_> {
    /// The token with text `text`.
    ///
    /// It must be an added token that matches by itself: no `lstrip`/`rstrip`/`single_word`
    /// (those would absorb or depend on neighbouring text), and no other added token may
    /// overlap it (one that contains it, or one whose tail is a prefix of it), since then the
    /// tokenizer could match that one across the token's boundary.
    pub fn token(&self, text: &str) -> Result<TemplateToken> {
        let cp = self.checkpoint;
        let token = cp.added_token(text).ok_or_else(|| {
            Error::Load(format!(
                "format {} needs the added token {text:?}, which {} does not have",
                self.format,
                cp.dir.display()
            ))
        })?;
        if token.lstrip || token.rstrip || token.single_word {
            return Err(Error::Load(format!(
                "format {}: added token {text:?} has lstrip/rstrip/single_word set, so it cannot be emitted as an id",
                self.format
            )));
        }
        for other in &cp.added_tokens {
            if other.content == text {
                continue;
            }
            let contains = other.content.len() > text.len() && other.content.contains(text);
            let tail_is_prefix = (1..other.content.len())
                .filter(|&k| other.content.is_char_boundary(k))
                .any(|k| text.starts_with(&other.content[k..]));
            if contains || tail_is_prefix {
                return Err(Error::Load(format!(
                    "format {}: added token {:?} overlaps template token {text:?}; the native format cannot guarantee transformers' split",
                    self.format, other.content
                )));
            }
        }
        Ok(TemplateToken {
            id: token.id,
            text: text.to_string(),
        })
    }

    /// The token named by the config's `eos_token`.
    pub fn eos(&self) -> Result<TemplateToken> {
        let eos = self
            .checkpoint
            .special_tokens
            .eos
            .as_deref()
            .ok_or_else(|| {
                Error::Load(format!(
                    "format {} writes eos_token, which the tokenizer config does not set",
                    self.format
                ))
            })?;
        self.token(eos)
    }

    /// The token named by the config's `bos_token`.
    pub fn bos(&self) -> Result<TemplateToken> {
        let bos = self
            .checkpoint
            .special_tokens
            .bos
            .as_deref()
            .ok_or_else(|| {
                Error::Load(format!(
                    "format {} writes bos_token, which the tokenizer config does not set",
                    self.format
                ))
            })?;
        self.token(bos)
    }
}

/// Shared input rules of the formats.
pub(crate) mod rules {
    use super::*;

    /// A conversation needs at least one message (transformers raises too).
    pub fn not_empty(messages: &[Message]) -> Result<(), TemplateError> {
        if messages.is_empty() {
            return Err(TemplateError::whole(
                "the conversation is empty; provide at least one message",
            ));
        }
        Ok(())
    }

    /// The message's content as a string.
    ///
    /// A missing content is an error (templates either raise or render an empty string for
    /// it; chatids never guesses). A list of parts is an error for formats whose template
    /// does not read parts (it would raise, or render the list's Python repr).
    pub fn text<'m>(
        messages: &'m [Message],
        i: usize,
        format: &str,
    ) -> Result<&'m str, TemplateError> {
        match &messages[i].content {
            Some(Content::Text(s)) => Ok(s),
            None => Err(TemplateError::at(
                i,
                format!("format {format} does not model a message without 'content'"),
            )
            .with(Refusal::Unmodeled)),
            Some(Content::Parts(_)) => Err(TemplateError::at(
                i,
                format!("format {format} does not model a list of content parts"),
            )
            .with(Refusal::Unmodeled)),
        }
    }

    /// Tool calls are not rendered yet; never drop them silently. An empty `tool_calls`
    /// list is accepted (there is nothing to drop).
    pub fn no_tool_calls(
        messages: &[Message],
        i: usize,
        format: &str,
    ) -> Result<(), TemplateError> {
        if matches!(messages[i].tool_calls, Some(None) | Some(Some(1..))) {
            return Err(TemplateError::at(
                i,
                format!("format {format} does not model 'tool_calls' (the checkpoint's template renders them)"),
            )
            .with(Refusal::Unmodeled));
        }
        Ok(())
    }

    /// Check that `kwargs` only holds the arguments the format models.
    pub fn known_kwargs(
        kwargs: &TemplateArgs,
        allowed: &[(&str, ArgKind)],
        format: &str,
    ) -> Result<(), TemplateError> {
        for (name, value) in kwargs {
            // `apply_chat_template` always passes `tools` and `documents` (None by default).
            let absent =
                *value == TemplateValue::None && ["tools", "documents"].contains(&name.as_str());
            if !allowed.iter().any(|(a, _)| a == name) && !absent {
                let accepted = if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed
                        .iter()
                        .map(|(a, _)| *a)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(TemplateError::whole(format!(
                    "format {format} does not model the template argument {name:?} (it models: {accepted})"
                ))
                .with(Refusal::Unmodeled));
            }
        }
        Ok(())
    }

    /// The value the template takes from its clock for `name` (`strftime(fmt, now)`), unless
    /// `from_caller` and the caller passed it.
    pub fn clock_value<'k>(
        request: &RenderRequest<'k>,
        name: &str,
        fmt: &str,
        from_caller: bool,
        format: &str,
    ) -> Result<std::borrow::Cow<'k, str>, TemplateError> {
        if from_caller {
            if let Some(value) = str_kwarg(request.kwargs, name)? {
                return Ok(std::borrow::Cow::Borrowed(value));
            }
        }
        let now = request.now.ok_or_else(|| {
            TemplateError::whole(format!(
                "format {format} writes the date from the template's clock ({name}): pass now= (the chatids core never \
                 reads the clock; the Python API passes the current time unless you give one)"
            ))
        })?;
        crate::template::strftime(fmt, &now)
            .map(std::borrow::Cow::Owned)
            .map_err(TemplateError::whole)
    }

    /// A string template argument.
    pub fn str_kwarg<'k>(
        kwargs: &'k TemplateArgs,
        name: &str,
    ) -> Result<Option<&'k str>, TemplateError> {
        match kwargs.get(name) {
            None => Ok(None),
            Some(TemplateValue::Str(s)) => Ok(Some(s)),
            Some(other) => Err(TemplateError::whole(format!(
                "the native format models template argument {name} as a str, not {}",
                other.type_name()
            ))
            .with(Refusal::Unmodeled)),
        }
    }

    /// The templates' alternation rule: from `offset` on, a message is `user` exactly when its
    /// position (counted from `offset`) is even.
    pub fn alternation(
        messages: &[Message],
        offset: usize,
        rule: &str,
    ) -> Result<(), TemplateError> {
        for (k, m) in messages.iter().enumerate().skip(offset) {
            if (m.role == "user") != ((k - offset) % 2 == 0) {
                return Err(
                    TemplateError::at(k, format!("{rule} (the template raises)"))
                        .with(Refusal::TemplateRaises),
                );
            }
        }
        Ok(())
    }

    /// Whether the conversation starts with a system message.
    pub fn starts_with_system(messages: &[Message]) -> bool {
        messages.first().is_some_and(|m| m.role == "system")
    }

    /// The turns of a template that folds a leading system message into the first user turn
    /// and requires alternation after it (`rule`: the template's own message). Returns the
    /// index of the first turn (1 after a system message). A system message with no user turn
    /// to be folded into is refused: the template would drop it.
    pub fn folded_system_turns(messages: &[Message], rule: &str) -> Result<usize, TemplateError> {
        let first = usize::from(starts_with_system(messages));
        alternation(messages, first, rule)?;
        if first == messages.len() {
            return Err(TemplateError::at(
                0,
                "a system message needs a user message to be folded into; the template would drop it",
            )
            .with(Refusal::Dropped));
        }
        Ok(first)
    }

    /// Apply the `system=` option's checks common to all formats (see [`ChatFormat::render`]).
    /// Returns whether the conversation starts with a system message.
    pub fn system_policy(
        request: &RenderRequest<'_>,
        slot: SystemSlot,
        format: &str,
    ) -> Result<bool, TemplateError> {
        let has_system = starts_with_system(request.messages);
        match (request.system, slot) {
            (SystemPolicy::Fold, SystemSlot::Native) => Err(TemplateError::whole(format!(
                "format {format} has a system turn; system=\"fold\" is for formats without one"
            ))),
            (SystemPolicy::Error, SystemSlot::FoldedByTemplate | SystemSlot::Unsupported) if has_system => {
                Err(TemplateError::at(
                    0,
                    format!("format {format} has no system turn (system=\"error\"); its template would fold or reject it"),
                ))
            }
            _ => Ok(has_system),
        }
    }

    /// Emit `parts` (kind, text, message) as if their concatenation were passed through
    /// Python's `str.strip()`: the leading and trailing whitespace of the whole is dropped,
    /// each remaining piece keeps its kind and message.
    pub fn emit_stripped<'a>(out: &mut Pieces<'a>, parts: &[(PieceKind, &'a str, Option<usize>)]) {
        let whole: String = parts.iter().map(|p| p.1).collect();
        let start = whole.len()
            - whole
                .trim_start_matches(crate::pystr::is_python_whitespace)
                .len();
        let end = whole
            .trim_end_matches(crate::pystr::is_python_whitespace)
            .len()
            .max(start);
        let mut offset = 0;
        let body = out.in_body();
        for &(kind, text, message) in parts {
            let (a, b) = (offset, offset + text.len());
            offset = b;
            let (lo, hi) = (start.max(a), end.min(b));
            if lo >= hi {
                continue;
            }
            out.set_message(message);
            if body {
                out.begin_body();
            }
            let slice = &text[lo - a..hi - a];
            match kind {
                PieceKind::Content => out.content(slice),
                _ => out.text(slice),
            }
        }
    }

    /// A boolean template argument.
    pub fn bool_kwarg(kwargs: &TemplateArgs, name: &str) -> Result<Option<bool>, TemplateError> {
        match kwargs.get(name) {
            None => Ok(None),
            Some(TemplateValue::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(TemplateError::whole(format!(
                "the native format models template argument {name} as a bool, not {}",
                other.type_name()
            ))
            .with(Refusal::Unmodeled)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_ignores_one_trailing_newline() {
        assert_eq!(template_fingerprint("abc\n"), template_fingerprint("abc"));
        assert_ne!(template_fingerprint("abc\n\n"), template_fingerprint("abc"));
    }

    #[test]
    fn every_known_template_names_a_format() {
        for (_, name, _) in KNOWN_TEMPLATES {
            assert!(FORMAT_NAMES.contains(name), "{name}");
        }
    }
}
