//! [`Encoder`]: a checkpoint's tokenizer plus the native format that reproduces its template.

use std::path::Path;

use crate::batch::{self, Batch};
use crate::checkpoint::Checkpoint;
use crate::control_tokens::ControlTokens;
use crate::encoding::{EncodedChat, PieceEncoder, Tracking};
use crate::error::{Error, Result, TemplateError};
use crate::formats::{self, ChatFormat, RenderRequest, SystemPolicy, TemplateArgs};
use crate::message::Message;
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

/// Encodes conversations for one checkpoint.
pub struct Encoder {
    format: Box<dyn ChatFormat>,
    format_choice: FormatChoice,
    text: HfTextEncoder,
    control_tokens: ControlTokens,
    newline_ids: Vec<u32>,
    stop_token_ids: Vec<u32>,
    post_processor_bos: Option<u32>,
    checkpoint_note: Option<String>,
    template_fingerprint: String,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("format", &self.format.name())
            .field("format_choice", &self.format_choice)
            .finish()
    }
}

impl Encoder {
    /// Load the checkpoint in `dir`. With `format: None` the native format is chosen by the
    /// checkpoint's chat template (it must be one of the official templates chatids
    /// reproduces); naming a format forces it.
    pub fn from_dir(dir: impl AsRef<Path>, format: Option<&str>) -> Result<Self> {
        let checkpoint = Checkpoint::load(dir)?;
        Self::from_checkpoint(checkpoint, format)
    }

    /// Build an encoder from a loaded checkpoint (see [`Encoder::from_dir`]).
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
        let mut stop_token_ids: Vec<u32> = format
            .stop_tokens()
            .iter()
            .filter_map(|t| checkpoint.tokenizer.token_to_id(t))
            .chain(
                checkpoint
                    .special_tokens
                    .eos
                    .as_deref()
                    .and_then(|t| checkpoint.tokenizer.token_to_id(t)),
            )
            .chain(checkpoint.generation_eos_ids.iter().copied())
            .collect();
        stop_token_ids.sort_unstable();
        stop_token_ids.dedup();
        let bos_id = checkpoint
            .special_tokens
            .bos
            .as_deref()
            .and_then(|t| checkpoint.tokenizer.token_to_id(t));
        let post_processor_bos = checkpoint
            .tokenizer
            .encode("x", true)
            .ok()
            .and_then(|e| e.get_ids().first().copied())
            .filter(|&first| Some(first) == bos_id);
        Ok(Encoder {
            format,
            format_choice,
            text,
            control_tokens,
            newline_ids,
            stop_token_ids,
            post_processor_bos,
            checkpoint_note: checkpoint.compat_note.clone(),
            template_fingerprint: formats::template_fingerprint(&checkpoint.chat_template),
        })
    }

    /// The native format.
    pub fn format(&self) -> &dyn ChatFormat {
        self.format.as_ref()
    }

    /// The BOS id the tokenizer's post-processor adds with `add_special_tokens=True`, if any.
    pub fn post_processor_bos(&self) -> Option<u32> {
        self.post_processor_bos
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

    /// The native format's name.
    pub fn format_name(&self) -> &'static str {
        self.format.name()
    }

    /// How the format was chosen.
    pub fn format_choice(&self) -> &FormatChoice {
        &self.format_choice
    }

    /// What chatids changed in tokenizer.json to encode like transformers, if anything.
    pub fn checkpoint_note(&self) -> Option<&str> {
        self.checkpoint_note.as_deref()
    }

    /// The sha256 by which the checkpoint's template is recognised.
    pub fn template_fingerprint(&self) -> &str {
        &self.template_fingerprint
    }

    /// The ids that end an assistant turn: the format's end-of-turn tokens, the config's
    /// `eos_token`, and `generation_config.json`'s `eos_token_id`.
    pub fn stop_token_ids(&self) -> &[u32] {
        &self.stop_token_ids
    }

    /// The control tokens (special tokens plus added tokens in the template's text).
    pub fn control_tokens(&self) -> &ControlTokens {
        &self.control_tokens
    }

    /// Template arguments the template fills from the clock when absent, with their
    /// `strftime` format. The caller must supply them; the core never reads the clock.
    pub fn clock_defaults(&self) -> &'static [(&'static str, &'static str)] {
        self.format.clock_defaults()
    }

    /// The text encoder (the checkpoint's tokenizer).
    pub fn text_encoder(&self) -> &HfTextEncoder {
        &self.text
    }

    fn render_pieces<'a>(
        &'a self,
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
        self.format.render(&request, &mut pieces)?;
        Ok(pieces)
    }

    /// Apply the input policies of `options`, render, and hand the pieces to `f`.
    fn with_pieces<R>(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        f: impl FnOnce(&Pieces<'_>) -> Result<R>,
    ) -> Result<R> {
        if !options.merge_consecutive {
            return f(&self.render_pieces(messages, options)?);
        }
        let (merged, origin) = policies::merge_consecutive(messages)?;
        let mut pieces = self
            .render_pieces(&merged, options)
            .map_err(|e| policies::remap_error(e, &origin))?;
        pieces.remap_messages(&origin);
        f(&pieces)
    }

    /// The prompt as text: exactly `apply_chat_template(..., tokenize=False)`.
    pub fn render(&self, messages: &[Message], options: &EncodeOptions) -> Result<String> {
        self.with_pieces(messages, options, |pieces| Ok(pieces.render()))
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
        let encoder = PieceEncoder {
            text: &self.text,
            sanitizer: options
                .sanitize_control_tokens
                .then_some(&self.control_tokens),
            newline_ids: &self.newline_ids,
        };
        self.with_pieces(messages, options, |pieces| {
            encoder.encode(pieces.as_slice(), tracking, out)
        })
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
