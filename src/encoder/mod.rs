//! [`Encoder`]: a checkpoint's tokenizer plus what reproduces its chat formatting, on one of
//! two routes: a native format that reproduces the checkpoint's Hugging Face chat template
//! (exact against transformers' `apply_chat_template`), or, for checkpoints that ship
//! mistral-common's tokenizer files, the mistral-common route (exact against
//! `MistralTokenizer.encode_chat_completion`).

use crate::checkpoint::Checkpoint;
use crate::control_tokens::{ControlTokens, TokenSplitter};
use crate::error::{Error, Refusal, Result, TemplateError};
use crate::input::tools;
use crate::message::Message;
use crate::mistral_common::MistralCommon;
use crate::origin::Origin;
use crate::piece_encoder::{EncodedChat, PieceEncoder, Tracking};
use crate::pieces::Pieces;
use crate::render::jinja::{JinjaFormat, JinjaRequest, RenderMemo, SplitPieces, SplitText};
use crate::render::native::{self, ChatFormat, RenderRequest, SystemPolicy, TemplateArgs};
use crate::render::probes::{self, ProbeReport};
use crate::template::ChatTemplate;
use crate::text::{EncoderChoice, Selected, TextEncoder, TextOptions};

mod completion;
mod explain;
mod load;
mod render;

pub use crate::input::EncodeOptions;
pub use crate::render::choose::FormatChoice;

/// The template arguments every template is given by transformers besides its special tokens
/// ([`crate::checkpoint::SPECIAL_TOKEN_NAMES`]), accepted whether or not the template reads them.
pub const ALWAYS_ACCEPTED: &[&str] = &["tools", "documents"];

/// Whether transformers gives every template the argument `name`.
fn always_accepted(name: &str) -> bool {
    ALWAYS_ACCEPTED.contains(&name) || crate::checkpoint::SPECIAL_TOKEN_NAMES.contains(&name)
}

/// What to do with a template argument the template does not read.
///
/// transformers passes every keyword argument to the template, which ignores the ones it does
/// not read, so a misspelled or misplaced argument (`enable_thinking` for a Llama template)
/// changes nothing without a word. chatids refuses it by default, naming it and the arguments
/// the template reads; pipelines that pass one set of arguments to many models choose
/// [`ArgsPolicy::Ignore`]. The names transformers gives every template (the special tokens,
/// `tools`, `documents`) are always accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgsPolicy {
    /// Raise [`TemplateError`] naming the argument (the default).
    #[default]
    Error,
    /// Leave it out, as transformers' template would ignore it.
    Ignore,
}

impl std::str::FromStr for ArgsPolicy {
    type Err = Error;

    /// Parse `"error"` / `"ignore"`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "error" => Ok(ArgsPolicy::Error),
            "ignore" => Ok(ArgsPolicy::Ignore),
            other => Err(Error::Load(format!(
                "unknown_template_args must be \"error\" or \"ignore\", not {other:?}"
            ))),
        }
    }
}

/// How to load a checkpoint (see [`Encoder::load_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions<'a> {
    /// Force a native format by name, or the Jinja path with `"jinja"`.
    pub format: Option<&'a str>,
    /// Choose the route (default: mistral-common when the directory ships its files).
    pub reference: Option<Route>,
    /// A named template of the checkpoint, or template text that replaces its template.
    pub chat_template: Option<&'a str>,
    /// Accept a template chatids' engine cannot compile (the caller renders it, see
    /// [`Encoder::encode_rendered`]) instead of failing.
    pub allow_external: bool,
    /// What to do with template arguments the template does not read.
    pub unknown_template_args: ArgsPolicy,
}

/// Which reference an [`Encoder`] reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The checkpoint's Hugging Face chat template with its `tokenizer.json`, exact against
    /// transformers' `apply_chat_template`.
    Transformers,
    /// mistral-common's own encoder, exact against `encode_chat_completion`.
    MistralCommon,
}

impl Route {
    /// Parse `"transformers"` / `"mistral-common"`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "transformers" => Ok(Route::Transformers),
            "mistral-common" => Ok(Route::MistralCommon),
            other => Err(Error::Load(format!(
                "reference must be \"transformers\" or \"mistral-common\", not {other:?}"
            ))),
        }
    }
}

/// What renders the conversation on the transformers route.
enum Renderer {
    /// A native format.
    Native(Box<dyn ChatFormat>),
    /// The checkpoint's template on the Jinja path.
    Jinja,
    /// The template cannot be compiled by chatids' engine: the caller renders it (the Python
    /// layer falls back to jinja2) and hands the rendered text to
    /// [`Encoder::encode_rendered`].
    External {
        /// Why the template could not be compiled.
        reason: String,
    },
}

/// The transformers route: a native format over the checkpoint's tokenizer.json.
struct TemplateRoute {
    renderer: Renderer,
    /// The checkpoint's template, compiled (`None` if it cannot be: then only an explicit
    /// native format is possible).
    jinja: Option<JinjaFormat>,
    template_source: String,
    template_text: String,
    special_tokens_map: Vec<(String, String)>,
    format_choice: FormatChoice,
    /// The text encoders (shared by the encoders [`Encoder::with_chat_template`] makes).
    text: std::sync::Arc<Selected>,
    control_tokens: ControlTokens,
    newline_ids: Vec<u32>,
    post_processor_bos: Option<u32>,
    checkpoint_note: Option<String>,
    template_fingerprint: String,
    /// The native format was verified against the checkpoint's template, which compiles: what
    /// the format does not model (tool conversations, content parts, arguments...) and what it
    /// refuses as the template's own error goes to that template on the Jinja path.
    verified: bool,
    /// The template arguments the checkpoint's template reads, plus the names transformers
    /// gives every template (`None`: the template cannot be compiled).
    template_args: Option<std::collections::BTreeSet<String>>,
    /// Where a session may resume encoding inside template text.
    token_splitter: TokenSplitter,
}

enum Backend {
    Template(Box<TemplateRoute>),
    MistralCommon(Box<MistralCommon>),
}

/// Encodes conversations for one checkpoint.
pub struct Encoder {
    backend: Backend,
    /// What to do with template arguments the template does not read.
    unknown_template_args: ArgsPolicy,
    stop_token_ids: Vec<u32>,
    stop_token_ids_for_tool_calls: Vec<u32>,
    /// What it was built from, for [`Encoder::to_bytes`] (see [`crate::persist`]).
    origin: Origin,
    /// The grammar and token table that read completions back, built on first use.
    completion: std::sync::OnceLock<completion::CompletionTables>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("format", &self.format_name())
            .finish()
    }
}

impl Encoder {
    /// The same encoder with `policy` for template arguments the template does not read.
    pub fn with_unknown_template_args(mut self, policy: ArgsPolicy) -> Self {
        self.unknown_template_args = policy;
        self
    }

    /// What the encoder does with template arguments the template does not read.
    pub fn unknown_template_args(&self) -> ArgsPolicy {
        self.unknown_template_args
    }

    /// What the encoder was built from (see [`crate::persist`]).
    pub(crate) fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The mistral-common backend, on that route.
    pub(crate) fn mistral_common(&self) -> Option<&MistralCommon> {
        match &self.backend {
            Backend::MistralCommon(mc) => Some(mc),
            Backend::Template(_) => None,
        }
    }

    fn template(&self) -> Option<&TemplateRoute> {
        match &self.backend {
            Backend::Template(t) => Some(t),
            Backend::MistralCommon(_) => None,
        }
    }

    /// Which reference this encoder reproduces.
    pub fn route(&self) -> Route {
        match &self.backend {
            Backend::Template(_) => Route::Transformers,
            Backend::MistralCommon(_) => Route::MistralCommon,
        }
    }

    /// The format's name (`"llama-3.1"`, or `"mistral-common-v3"` on the mistral-common route).
    pub fn format_name(&self) -> &'static str {
        match &self.backend {
            Backend::Template(t) => match &t.renderer {
                Renderer::Native(f) => f.name(),
                Renderer::Jinja => crate::render::jinja::FORMAT_NAME,
                Renderer::External { .. } => crate::render::jinja::EXTERNAL_FORMAT_NAME,
            },
            Backend::MistralCommon(mc) => mc.name(),
        }
    }

    /// The native format (transformers route with a native format only).
    pub fn format(&self) -> Option<&dyn ChatFormat> {
        match &self.template()?.renderer {
            Renderer::Native(f) => Some(f.as_ref()),
            Renderer::Jinja | Renderer::External { .. } => None,
        }
    }

    /// The chat template in use (transformers route).
    pub fn chat_template(&self) -> Option<&str> {
        self.template().map(|t| t.template_text.as_str())
    }

    /// The special-token variables the template sees (transformers' `special_tokens_map`).
    pub fn special_tokens_map(&self) -> &[(String, String)] {
        self.template().map_or(&[], |t| &t.special_tokens_map)
    }

    /// Whether the caller must render the template (see [`Encoder::encode_rendered`]).
    pub fn needs_external_renderer(&self) -> bool {
        self.template()
            .is_some_and(|t| matches!(t.renderer, Renderer::External { .. }))
    }

    /// Encode a prompt the caller rendered from the checkpoint's template, as transformers
    /// encodes `apply_chat_template`'s text: added tokens matched; with `marked`, the text was
    /// rendered from inputs marked as [`crate::render::jinja`] marks them, and every marked control
    /// token is encoded as plain text. Tokens carry no message index. On the mistral-common
    /// route (no template), special tokens are matched and each text between them is encoded
    /// on its own, as mistral-common encodes a text (`marked` does not apply).
    pub fn encode_rendered(&self, rendered: &str, marked: bool) -> Result<Vec<u32>> {
        let t = match &self.backend {
            Backend::Template(t) => t,
            // Special tokens by id, the text between them as mistral-common encodes a text.
            Backend::MistralCommon(mc) => return mc.encode_rendered(rendered),
        };
        let pieces = crate::render::jinja::split_rendered(
            rendered,
            &[],
            marked.then_some(&t.control_tokens),
        )?;
        let encoder = t.piece_encoder(marked);
        let mut out = EncodedChat::default();
        encoder.encode(pieces.as_slice(), Tracking::default(), &mut out)?;
        Ok(out.ids)
    }

    /// Whether the Jinja path renders the checkpoint's template.
    pub fn is_jinja(&self) -> bool {
        self.template()
            .is_some_and(|t| matches!(t.renderer, Renderer::Jinja))
    }

    /// Whether rendering needs [`EncodeOptions::now`]: the template calls `strftime_now()`
    /// (on the Jinja path, or a native format that writes the template's date).
    pub fn reads_clock(&self) -> bool {
        self.template().is_some_and(|t| match &t.renderer {
            Renderer::Native(f) => {
                !f.clock_defaults().is_empty()
                    || (t.verified && t.jinja.as_ref().is_some_and(|j| j.template().reads_clock()))
            }
            Renderer::Jinja => t.jinja.as_ref().is_some_and(|j| j.template().reads_clock()),
            Renderer::External { .. } => false,
        })
    }

    /// The template arguments the checkpoint's template reads (its undeclared variables, as
    /// jinja2's `meta.find_undeclared_variables` gives them), plus the names transformers gives
    /// every template (the special tokens, `tools`, `documents`). `None` where they are not
    /// known (a template chatids' engine cannot compile; the mistral-common route, whose only
    /// argument is `tools`).
    pub fn template_args(&self) -> Option<&std::collections::BTreeSet<String>> {
        self.template().and_then(|t| t.template_args.as_ref())
    }

    /// How the format was chosen (transformers route only).
    pub fn format_choice(&self) -> Option<&FormatChoice> {
        self.template().map(|t| &t.format_choice)
    }

    /// What chatids changed in tokenizer.json to encode like transformers, if anything.
    pub fn checkpoint_note(&self) -> Option<&str> {
        self.template().and_then(|t| t.checkpoint_note.as_deref())
    }

    /// The BOS id the tokenizer's post-processor adds with `add_special_tokens=True`, if any.
    pub fn post_processor_bos(&self) -> Option<u32> {
        self.template().and_then(|t| t.post_processor_bos)
    }

    /// The ids that end an assistant turn: the format's end-of-turn tokens, the config's
    /// `eos_token`, and `generation_config.json`'s `eos_token_id` (on the mistral-common route,
    /// `</s>`).
    pub fn stop_token_ids(&self) -> &[u32] {
        &self.stop_token_ids
    }

    /// The stop tokens that mean "the model called a tool" (a subset of
    /// [`Encoder::stop_token_ids`]): Llama 3.1+ `<|eom_id|>`, gpt-oss `<|call|>`; empty where
    /// the format ends a tool call like any answer (see [`crate::input::tools::TOOL_CALL_STOP_TOKENS`]).
    pub fn stop_token_ids_for_tool_calls(&self) -> &[u32] {
        &self.stop_token_ids_for_tool_calls
    }

    /// The control tokens (special tokens plus added tokens in the template's text).
    pub fn control_tokens(&self) -> &ControlTokens {
        match &self.backend {
            Backend::Template(t) => &t.control_tokens,
            Backend::MistralCommon(mc) => mc.control_tokens(),
        }
    }

    /// The text encoders (the checkpoint's tokenizer.json), on the transformers route.
    pub fn text_encoder(&self) -> Option<&Selected> {
        self.template().map(|t| &*t.text)
    }

    /// The prompt as text: on the transformers route exactly
    /// `apply_chat_template(..., tokenize=False)`; on the mistral-common route what it encodes,
    /// special tokens as text (see [`MistralCommon::render`]).
    pub fn render(&self, messages: &[Message], options: &EncodeOptions) -> Result<String> {
        let policy = self.unknown_template_args;
        match &self.backend {
            Backend::Template(t) => t.render(policy, messages, options),
            Backend::MistralCommon(mc) => mc.render(
                messages,
                render::mistral_common_options(messages, options, policy)?,
            ),
        }
    }

    /// The token ids of the conversation.
    pub fn encode(&self, messages: &[Message], options: &EncodeOptions) -> Result<Vec<u32>> {
        Ok(self
            .encode_tracked(messages, options, Tracking::default())?
            .ids)
    }

    /// The token ids with the per-token provenance asked for in `tracking`.
    pub fn encode_tracked(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        tracking: Tracking,
    ) -> Result<EncodedChat> {
        let mut out = EncodedChat::default();
        self.encode_into(messages, options, tracking, &mut out)?;
        Ok(out)
    }

    /// Like [`Encoder::encode_tracked`], appending to `out`.
    pub fn encode_into(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        let policy = self.unknown_template_args;
        match &self.backend {
            Backend::Template(t) => t.encode_into(policy, messages, options, tracking, out),
            Backend::MistralCommon(mc) => mc.encode_into(
                messages,
                render::mistral_common_options(messages, options, policy)?,
                tracking,
                out,
            ),
        }
    }

    /// Render `messages` and hand the pieces, with the encoder of this checkpoint's pieces, to
    /// `f` (what [`crate::session`] builds on); `memo` keeps conversions between renders of
    /// one conversation on the Jinja path. `None` on the mistral-common route, which has no
    /// piece stream.
    pub(crate) fn with_rendered_pieces<R>(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        memo: Option<&RenderMemo>,
        f: impl FnOnce(&Pieces<'_>, &PieceEncoder<'_>, &TokenSplitter) -> Result<R>,
    ) -> Result<Option<R>> {
        let Some((t, encoder, mode)) = self.session_route(options, memo) else {
            return Ok(None);
        };
        t.with_pieces(
            self.unknown_template_args,
            messages,
            options,
            mode,
            |pieces| f(pieces, &encoder, &t.token_splitter),
        )
        .map(Some)
    }

    /// [`Encoder::with_rendered_pieces`] of `messages` without and with the generation
    /// prompt, from one render where the template allows it (`options` ask for the prompt):
    /// `f` gets both piece lists and what is known of their text. `None` where it does not
    /// (see [`TemplateRoute::with_pieces_split`]): render each instead.
    pub(crate) fn with_rendered_pieces_split<R>(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        memo: Option<&RenderMemo>,
        f: impl FnOnce(SplitPieces, &PieceEncoder<'_>, &TokenSplitter) -> Result<R>,
    ) -> Result<Option<R>> {
        let Some((t, encoder, mode)) = self.session_route(options, memo) else {
            return Ok(None);
        };
        t.with_pieces_split(
            self.unknown_template_args,
            messages,
            options,
            mode,
            |split| f(split, &encoder, &t.token_splitter),
        )
    }

    /// `f` with the encoder of this checkpoint's pieces and its token splitter, for pieces a
    /// session rendered earlier with `options` (`None` on the mistral-common route).
    pub(crate) fn with_piece_encoder<R>(
        &self,
        options: &EncodeOptions,
        f: impl FnOnce(&PieceEncoder<'_>, &TokenSplitter) -> Result<R>,
    ) -> Option<Result<R>> {
        let (t, encoder, _) = self.session_route(options, None)?;
        Some(f(&encoder, &t.token_splitter))
    }

    /// The template route a session renders through, its piece encoder and render mode
    /// (`None` on the mistral-common route).
    fn session_route<'a>(
        &'a self,
        options: &EncodeOptions,
        memo: Option<&'a RenderMemo>,
    ) -> Option<(&'a TemplateRoute, PieceEncoder<'a>, render::RenderMode<'a>)> {
        let Backend::Template(t) = &self.backend else {
            return None;
        };
        let mode = render::RenderMode {
            sanitize: options.sanitize_control_tokens,
            provenance: false,
            memo,
        };
        Some((t, t.piece_encoder(options.sanitize_control_tokens), mode))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With sanitizing off, encoding the pieces must equal encoding the rendered string in
    /// one go, which is what transformers does. Runs on the real checkpoints when
    /// `CHATIDS_MODELS_DIR` is set (`make test` sets it).
    #[test]
    fn piece_encoding_equals_encoding_the_rendered_prompt() {
        let Ok(base) = std::env::var("CHATIDS_MODELS_DIR") else {
            eprintln!("CHATIDS_MODELS_DIR not set: skipped");
            return;
        };
        let conversations = vec![
            vec![Message::new("user", "Hello there!")],
            vec![
                Message::new("system", "  Be brief.\n"),
                Message::new("user", "\n\nWhy? <|eot_id|> <|im_end|>"),
                Message::new("assistant", "Because 你好 🙂\n"),
                Message::new("user", " trailing "),
            ],
        ];
        let mut checked = 0;
        for dir in [
            "meta-llama-3-8b-instruct",
            "llama-3.1-8b-instruct",
            "openhermes-2.5-mistral-7b",
            "qwen2.5-7b-instruct",
            "qwen3-0.6b",
        ] {
            let path = std::path::Path::new(&base).join(dir);
            if !path.is_dir() {
                continue;
            }
            let enc = Encoder::from_dir(&path, None).unwrap();
            for messages in &conversations {
                for agp in [false, true] {
                    let options = EncodeOptions {
                        add_generation_prompt: agp,
                        sanitize_control_tokens: false,
                        ..Default::default()
                    };
                    let text = enc.render(messages, &options).unwrap();
                    let whole = enc
                        .text_encoder()
                        .expect("a transformers-route checkpoint")
                        .tokenizer()
                        .unwrap()
                        .encode(text.as_str(), false)
                        .unwrap();
                    // Twice: the second time the short runs come from the cache.
                    for _ in 0..2 {
                        let ids = enc.encode(messages, &options).unwrap();
                        assert_eq!(ids, whole.get_ids(), "{dir}");
                    }
                    checked += 1;
                }
            }
        }
        eprintln!("checked {checked} conversations");
    }
}
