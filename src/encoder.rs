//! [`Encoder`]: a checkpoint's tokenizer plus what reproduces its chat formatting, on one of
//! two routes: a native format that reproduces the checkpoint's Hugging Face chat template
//! (exact against transformers' `apply_chat_template`), or, for checkpoints that ship
//! mistral-common's tokenizer files, the mistral-common route (exact against
//! `MistralTokenizer.encode_chat_completion`).

use std::path::Path;

use crate::batch::{self, Batch};
use crate::checkpoint::Checkpoint;
use crate::control_tokens::ControlTokens;
use crate::encoding::{EncodedChat, PieceEncoder, Tracking};
use crate::error::{Error, Result, TemplateError};
use crate::formats::{self, ChatFormat, RenderRequest, SystemPolicy, TemplateArgs};
use crate::message::Message;
use crate::mistral_common::MistralCommon;
use crate::pieces::Pieces;
use crate::policies;
use crate::text::{HfTextEncoder, TextEncoder, TextOptions};

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
    /// Join consecutive messages of the same role before rendering (see [`crate::policies`]).
    pub merge_consecutive: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            add_generation_prompt: false,
            sanitize_control_tokens: true,
            kwargs: TemplateArgs::new(),
            system: SystemPolicy::Template,
            merge_consecutive: false,
        }
    }
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

/// How the format of an [`Encoder`] was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatChoice {
    /// The checkpoint's template is byte-for-byte the official template of the format.
    TemplateMatch {
        /// Where that official template comes from.
        source: &'static str,
    },
    /// The caller named the format; the checkpoint's template was not verified against it.
    Explicit {
        /// Whether the checkpoint's template is the format's official one after all.
        template_matches: bool,
    },
}

/// The transformers route: a native format over the checkpoint's tokenizer.json.
struct TemplateRoute {
    format: Box<dyn ChatFormat>,
    format_choice: FormatChoice,
    text: HfTextEncoder,
    control_tokens: ControlTokens,
    newline_ids: Vec<u32>,
    post_processor_bos: Option<u32>,
    checkpoint_note: Option<String>,
    template_fingerprint: String,
}

enum Backend {
    Template(Box<TemplateRoute>),
    MistralCommon(Box<MistralCommon>),
}

/// Encodes conversations for one checkpoint.
pub struct Encoder {
    backend: Backend,
    stop_token_ids: Vec<u32>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("format", &self.format_name())
            .finish()
    }
}

impl Encoder {
    /// Load the checkpoint in `dir`. A directory with mistral-common's tokenizer file
    /// (`tekken.json`, `tokenizer.model.v*`) takes the mistral-common route; any other the
    /// transformers route, where the native format is chosen by the checkpoint's chat template
    /// (it must be one of the official templates chatids reproduces) or forced by `format`.
    pub fn from_dir(dir: impl AsRef<Path>, format: Option<&str>) -> Result<Self> {
        Self::load(dir, format, None)
    }

    /// Like [`Encoder::from_dir`], choosing the route explicitly with `reference`.
    pub fn load(
        dir: impl AsRef<Path>,
        format: Option<&str>,
        reference: Option<Route>,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        let mistral_file = MistralCommon::find_in(dir)?;
        let route = match (reference, &mistral_file, format) {
            (Some(r), _, _) => r,
            (None, Some(_), None) => Route::MistralCommon,
            _ => Route::Transformers,
        };
        match route {
            Route::Transformers => Self::from_checkpoint(Checkpoint::load(dir)?, format),
            Route::MistralCommon => {
                if let Some(f) = format {
                    return Err(Error::Load(format!(
                        "format={f:?} applies to the transformers route; pass reference=\"transformers\" to use it"
                    )));
                }
                let file = mistral_file.ok_or_else(|| {
                    Error::Load(format!(
                        "{} has no mistral-common tokenizer file (tekken.json or tokenizer.model.v1/v2/v3/v7)",
                        dir.display()
                    ))
                })?;
                let mc = MistralCommon::load(&file)?;
                let stop_token_ids = vec![mc.eos()];
                Ok(Encoder {
                    backend: Backend::MistralCommon(Box::new(mc)),
                    stop_token_ids,
                })
            }
        }
    }

    /// Build a transformers-route encoder from a loaded checkpoint (see [`Encoder::from_dir`]).
    pub fn from_checkpoint(checkpoint: Checkpoint, format: Option<&str>) -> Result<Self> {
        let identified = formats::identify(&checkpoint.chat_template);
        let (name, format_choice) = match (format, identified) {
            (Some(name), found) => (
                name.to_string(),
                FormatChoice::Explicit {
                    template_matches: found.is_some_and(|(n, _)| n == name),
                },
            ),
            (None, Some((name, source))) => {
                (name.to_string(), FormatChoice::TemplateMatch { source })
            }
            (None, None) => {
                return Err(Error::Load(format!(
                "the chat template of {} (sha256 {}) is not one that chatids reproduces natively; \
                     pass format=... (one of {}) to force a native format",
                checkpoint.dir.display(),
                formats::template_fingerprint(&checkpoint.chat_template),
                formats::FORMAT_NAMES.join(", ")
            )))
            }
        };
        let format = formats::build(&name, &checkpoint)?;
        let control_tokens =
            ControlTokens::for_template(&checkpoint.added_tokens, &checkpoint.chat_template);
        let text = HfTextEncoder::new(checkpoint.tokenizer.clone());
        let mut newline_ids = Vec::new();
        text.encode(
            "\n",
            TextOptions {
                added_tokens: true,
                at_start: true,
            },
            &mut newline_ids,
        )?;
        let token_id = |t: &str| checkpoint.tokenizer.token_to_id(t);
        let mut stop_token_ids: Vec<u32> = format
            .stop_tokens()
            .iter()
            .filter_map(|t| token_id(t))
            .chain(checkpoint.special_tokens.eos.as_deref().and_then(token_id))
            .chain(checkpoint.generation_eos_ids.iter().copied())
            .collect();
        stop_token_ids.sort_unstable();
        stop_token_ids.dedup();
        let bos_id = checkpoint.special_tokens.bos.as_deref().and_then(token_id);
        let post_processor_bos = checkpoint
            .tokenizer
            .encode("x", true)
            .ok()
            .and_then(|e| e.get_ids().first().copied())
            .filter(|&first| Some(first) == bos_id);
        let route = TemplateRoute {
            format,
            format_choice,
            text,
            control_tokens,
            newline_ids,
            post_processor_bos,
            checkpoint_note: checkpoint.compat_note.clone(),
            template_fingerprint: formats::template_fingerprint(&checkpoint.chat_template),
        };
        Ok(Encoder {
            backend: Backend::Template(Box::new(route)),
            stop_token_ids,
        })
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
            Backend::Template(t) => t.format.name(),
            Backend::MistralCommon(mc) => mc.name(),
        }
    }

    /// The native format (transformers route only).
    pub fn format(&self) -> Option<&dyn ChatFormat> {
        self.template().map(|t| t.format.as_ref())
    }

    /// How the format was chosen (transformers route only).
    pub fn format_choice(&self) -> Option<&FormatChoice> {
        self.template().map(|t| &t.format_choice)
    }

    /// Why this format was chosen, and what was adjusted to match the reference.
    pub fn explain(&self) -> String {
        let t = match &self.backend {
            Backend::MistralCommon(mc) => {
                return format!(
                    "format {}: the checkpoint ships mistral-common's tokenizer file {}; chatids encodes as \
                     mistral-common's encode_chat_completion does (pass reference=\"transformers\" for the \
                     Hugging Face template route)",
                    mc.name(),
                    mc.file().display()
                )
            }
            Backend::Template(t) => t,
        };
        let name = t.format.name();
        let mut lines = vec![match t.format_choice {
            FormatChoice::TemplateMatch { source } => format!(
                "format {name}: the checkpoint's chat template (sha256 {}) is byte-for-byte the official template of {source}",
                t.template_fingerprint
            ),
            FormatChoice::Explicit { template_matches: true } => format!(
                "format {name}: chosen by the caller; the checkpoint's template is this format's official template"
            ),
            FormatChoice::Explicit { template_matches: false } => format!(
                "format {name}: chosen by the caller; the checkpoint's template (sha256 {}) is NOT this format's official \
                 template, so the output is not verified against it",
                t.template_fingerprint
            ),
        }];
        if let Some(note) = &t.checkpoint_note {
            lines.push(format!("tokenizer: {note}"));
        }
        lines.join("\n")
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

    /// The control tokens (special tokens plus added tokens in the template's text).
    pub fn control_tokens(&self) -> &ControlTokens {
        match &self.backend {
            Backend::Template(t) => &t.control_tokens,
            Backend::MistralCommon(mc) => mc.control_tokens(),
        }
    }

    /// Template arguments the template fills from the clock when absent, with their
    /// `strftime` format. The caller must supply them; the core never reads the clock.
    pub fn clock_defaults(&self) -> &'static [(&'static str, &'static str)] {
        self.template().map_or(&[], |t| t.format.clock_defaults())
    }

    /// The text encoder (the checkpoint's tokenizer.json), on the transformers route.
    pub fn text_encoder(&self) -> Option<&HfTextEncoder> {
        self.template().map(|t| &t.text)
    }

    /// Report the silent failures `messages` would meet (see [`crate::lint`]).
    pub fn lint(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        context: crate::lint::LintContext,
    ) -> Vec<crate::lint::Finding> {
        crate::lint::lint(self, messages, options, context)
    }

    /// Render `messages` with the native format into pieces.
    fn render_pieces<'a>(
        t: &'a TemplateRoute,
        messages: &'a [Message],
        options: &'a EncodeOptions,
    ) -> Result<Pieces<'a>, TemplateError> {
        let request = RenderRequest {
            messages,
            add_generation_prompt: options.add_generation_prompt,
            kwargs: &options.kwargs,
            system: options.system,
        };
        let mut pieces = Pieces::new();
        t.format.render(&request, &mut pieces)?;
        Ok(pieces)
    }

    /// Apply the input policies of `options`, render with the native format, and hand the
    /// pieces to `f`.
    fn with_pieces<R>(
        t: &TemplateRoute,
        messages: &[Message],
        options: &EncodeOptions,
        f: impl FnOnce(&Pieces<'_>) -> Result<R>,
    ) -> Result<R> {
        if !options.merge_consecutive {
            return f(&Self::render_pieces(t, messages, options)?);
        }
        let (merged, origin) = policies::merge_consecutive(messages)?;
        let mut pieces = Self::render_pieces(t, &merged, options)
            .map_err(|e| policies::remap_error(e, &origin))?;
        pieces.remap_messages(&origin);
        f(&pieces)
    }

    /// Checks of `options` that only the mistral-common route makes.
    fn mistral_common_options(options: &EncodeOptions) -> Result<()> {
        if let Some(name) = options.kwargs.keys().next() {
            return Err(TemplateError::whole(format!(
                "the mistral-common route has no template argument {name:?}; an unknown argument would be ignored silently"
            ))
            .into());
        }
        if options.system != SystemPolicy::Template {
            return Err(TemplateError::whole(
                "system= applies to template formats; mistral-common places system prompts itself",
            )
            .into());
        }
        Ok(())
    }

    /// The prompt as text: on the transformers route exactly
    /// `apply_chat_template(..., tokenize=False)`; on the mistral-common route what it encodes,
    /// special tokens as text (see [`MistralCommon::render`]).
    pub fn render(&self, messages: &[Message], options: &EncodeOptions) -> Result<String> {
        match &self.backend {
            Backend::Template(t) => {
                Self::with_pieces(t, messages, options, |pieces| Ok(pieces.render()))
            }
            Backend::MistralCommon(mc) => {
                Self::mistral_common_options(options)?;
                mc.render(messages)
            }
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
        match &self.backend {
            Backend::Template(t) => {
                let encoder = PieceEncoder {
                    text: &t.text,
                    sanitizer: options.sanitize_control_tokens.then_some(&t.control_tokens),
                    newline_ids: &t.newline_ids,
                };
                Self::with_pieces(t, messages, options, |pieces| {
                    encoder.encode(pieces.as_slice(), tracking, out)
                })
            }
            Backend::MistralCommon(mc) => {
                Self::mistral_common_options(options)?;
                mc.encode_into(messages, tracking, out)
            }
        }
    }

    /// Encode many conversations in parallel (rayon) into one flat batch. `num_threads`:
    /// `None` uses rayon's global pool (all cores, or `RAYON_NUM_THREADS`).
    pub fn encode_batch(
        &self,
        conversations: &[Vec<Message>],
        options: &EncodeOptions,
        num_threads: Option<usize>,
    ) -> Result<Batch> {
        batch::encode_batch(self, conversations, options, num_threads)
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
