//! What an encoder was built from, kept so that its state can be written
//! ([`crate::persist`] turns it into bytes and back). Below the encoder: it names the
//! checkpoint and the mistral-common file, never the encoder itself.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, SpecialTokens};
use crate::control_tokens::AddedTokenInfo;
use crate::mistral_common::MistralCommon;

/// What an encoder was built from (kept by the encoder, serialized by
/// [`crate::Encoder::to_bytes`]).
pub(crate) enum Origin {
    /// A checkpoint on the transformers route; its tokenizer is the encoder's own.
    Checkpoint(Box<CheckpointState>),
    /// A mistral-common tokenizer file.
    MistralCommon {
        /// The file's path.
        file: PathBuf,
        /// The file's bytes, when they cannot be written back from the loaded tokenizer
        /// (SentencePiece models).
        bytes: Option<Box<[u8]>>,
    },
}

impl Origin {
    /// The origin of an encoder built from `checkpoint` (its tokenizer is dropped: the state
    /// is written from the encoder's copy).
    pub(crate) fn checkpoint(
        checkpoint: Checkpoint,
        format: Option<&str>,
        allow_external: bool,
    ) -> Self {
        let Checkpoint {
            dir,
            tokenizer: _,
            added_tokens,
            chat_template,
            chat_templates,
            chat_template_source,
            special_tokens_map,
            special_tokens,
            tokenizer_class,
            compat_note,
            generation_eos_ids,
            native_model: _,
        } = checkpoint;
        Origin::Checkpoint(Box::new(CheckpointState {
            dir: dir.to_string_lossy().into_owned(),
            added_tokens: added_tokens.into_iter().map(AddedToken::from).collect(),
            chat_template,
            chat_templates,
            chat_template_source,
            special_tokens_map,
            bos_token: special_tokens.bos,
            eos_token: special_tokens.eos,
            unk_token: special_tokens.unk,
            pad_token: special_tokens.pad,
            tokenizer_class,
            compat_note,
            generation_eos_ids,
            format: format.map(str::to_string),
            allow_external,
        }))
    }

    /// The origin of an encoder built from the mistral-common file `file` with content `bytes`.
    pub(crate) fn mistral_common(mc: &MistralCommon, bytes: Vec<u8>) -> Self {
        Origin::MistralCommon {
            file: mc.file().to_path_buf(),
            bytes: mc.tekken().is_none().then(|| bytes.into_boxed_slice()),
        }
    }
}

/// A [`Checkpoint`] without its tokenizer, plus the options it was loaded with.
#[derive(Serialize, Deserialize)]
pub(crate) struct CheckpointState {
    dir: String,
    added_tokens: Vec<AddedToken>,
    chat_template: String,
    chat_templates: Vec<(String, String)>,
    chat_template_source: String,
    special_tokens_map: Vec<(String, String)>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    unk_token: Option<String>,
    pad_token: Option<String>,
    tokenizer_class: Option<String>,
    compat_note: Option<String>,
    generation_eos_ids: Vec<u32>,
    format: Option<String>,
    allow_external: bool,
}

impl CheckpointState {
    /// The ids of the special added tokens.
    pub(crate) fn special_token_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.added_tokens.iter().filter(|t| t.special).map(|t| t.id)
    }

    /// The `format` the checkpoint was loaded with.
    pub(crate) fn format(&self) -> Option<&str> {
        self.format.as_deref()
    }

    /// The checkpoint again, with `tokenizer`.
    pub(crate) fn to_checkpoint(&self, tokenizer: crate::text::LazyTokenizer) -> Checkpoint {
        Checkpoint {
            dir: PathBuf::from(&self.dir),
            tokenizer,
            added_tokens: self
                .added_tokens
                .iter()
                .cloned()
                .map(AddedTokenInfo::from)
                .collect(),
            chat_template: self.chat_template.clone(),
            chat_templates: self.chat_templates.clone(),
            chat_template_source: self.chat_template_source.clone(),
            special_tokens_map: self.special_tokens_map.clone(),
            special_tokens: SpecialTokens {
                bos: self.bos_token.clone(),
                eos: self.eos_token.clone(),
                unk: self.unk_token.clone(),
                pad: self.pad_token.clone(),
            },
            tokenizer_class: self.tokenizer_class.clone(),
            compat_note: self.compat_note.clone(),
            generation_eos_ids: self.generation_eos_ids.clone(),
            native_model: None,
        }
    }

    /// Whether the encoder may leave rendering to the caller (`allow_external`).
    pub(crate) fn allow_external(&self) -> bool {
        self.allow_external
    }
}

/// [`AddedTokenInfo`] in the state.
#[derive(Clone, Serialize, Deserialize)]
struct AddedToken {
    id: u32,
    content: String,
    special: bool,
    lstrip: bool,
    rstrip: bool,
    single_word: bool,
    normalized: bool,
}

impl From<AddedTokenInfo> for AddedToken {
    fn from(t: AddedTokenInfo) -> Self {
        AddedToken {
            id: t.id,
            content: t.content,
            special: t.special,
            lstrip: t.lstrip,
            rstrip: t.rstrip,
            single_word: t.single_word,
            normalized: t.normalized,
        }
    }
}

impl From<AddedToken> for AddedTokenInfo {
    fn from(t: AddedToken) -> Self {
        AddedTokenInfo {
            id: t.id,
            content: t.content,
            special: t.special,
            lstrip: t.lstrip,
            rstrip: t.rstrip,
            single_word: t.single_word,
            normalized: t.normalized,
        }
    }
}
