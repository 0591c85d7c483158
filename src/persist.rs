//! An [`Encoder`]'s state: what it was built from, as bytes, so that another process rebuilds
//! the same encoder without the checkpoint's files (`chatids.Encoder` pickles by value with
//! it: nothing is read from disk or downloaded when unpickling).
//!
//! Layout: [`MAGIC`], the state format version ([`STATE_VERSION`], one byte), the length of the
//! header (u64, little endian), the header (JSON), the payload.
//!
//! * Transformers route (checkpoint directories and GGUF files alike): the header holds the
//!   checkpoint as loaded, without its tokenizer (templates, special tokens, added tokens,
//!   generation eos ids, ...), and the load options (`format`, `allow_external`); the payload
//!   is the tokenizer serialized by the tokenizers crate (a `tokenizer.json`, after chatids'
//!   transformers adjustments), written at save time from the encoder's own tokenizer. The
//!   encoder is rebuilt with [`Encoder::from_checkpoint_with`], so the format is chosen again
//!   from the same inputs, with the same result.
//! * mistral-common route: the header holds the tokenizer file's path (its name decides the
//!   kind and version; [`Encoder::explain`] reports it); the payload is the file's content:
//!   a SentencePiece model's bytes as read (the encoder keeps them, about 0.5 MB), or a
//!   `tekken.json` written from the loaded tokenizer ([`crate::text::tekken::Tekken::to_json`]).

use std::path::Path;

use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::encoder::{ArgsPolicy, Encoder};
use crate::error::{Error, Result};
use crate::mistral_common::MistralCommon;
use crate::origin::{CheckpointState, Origin};

/// The first bytes of every state.
pub const MAGIC: &[u8; 8] = b"chatids\x00";

/// The version of the state's layout; a state of another version is refused.
pub const STATE_VERSION: u8 = 1;

/// The state's header (`C` is the checkpoint, borrowed when writing, owned when reading).
#[derive(Serialize, Deserialize)]
#[serde(tag = "route", rename_all = "kebab-case")]
enum Header<C> {
    /// The payload is the tokenizer (`tokenizer.json`).
    Transformers {
        /// The chatids version that wrote the state (informative).
        chatids: String,
        checkpoint: C,
        /// The encoder's policy for template arguments the template does not read.
        #[serde(default)]
        unknown_template_args: ArgsPolicy,
    },
    /// The payload is the mistral-common tokenizer file.
    MistralCommon {
        chatids: String,
        file: String,
        #[serde(default)]
        unknown_template_args: ArgsPolicy,
    },
}

/// Rebuild the encoder of a transformers-route state: the format is chosen again from the
/// same inputs, with the same result.
fn rebuild(state: CheckpointState, tokenizer: Tokenizer) -> Result<Encoder> {
    let (format, allow_external) = (state.format().map(str::to_string), state.allow_external());
    Encoder::from_checkpoint_with(
        state.to_checkpoint(tokenizer),
        format.as_deref(),
        allow_external,
    )
}

fn invalid(what: impl std::fmt::Display) -> Error {
    Error::Load(format!("invalid chatids Encoder state: {what}"))
}

impl Encoder {
    /// The encoder's state: everything [`Encoder::from_bytes`] needs to rebuild it, in this or
    /// another process, without the checkpoint's files (see [`crate::persist`]). The tokenizer
    /// is serialized now, from the encoder's own copy.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let chatids = env!("CARGO_PKG_VERSION").to_string();
        let tekken_json;
        let (header, payload): (Header<&CheckpointState>, Vec<u8>) = match self.origin() {
            Origin::Checkpoint(checkpoint) => {
                let tokenizer = self
                    .text_encoder()
                    .expect("an encoder built from a checkpoint has its tokenizer")
                    .tokenizer()
                    .to_string(false)
                    .map_err(|e| {
                        Error::Tokenizer(format!("cannot serialize the tokenizer: {e}"))
                    })?;
                (
                    Header::Transformers {
                        chatids,
                        checkpoint,
                        unknown_template_args: self.unknown_template_args(),
                    },
                    tokenizer.into_bytes(),
                )
            }
            Origin::MistralCommon { file, bytes } => {
                let content: &[u8] = match bytes {
                    Some(b) => b,
                    None => {
                        tekken_json = self
                            .mistral_common()
                            .and_then(MistralCommon::tekken)
                            .expect("a mistral-common file without its bytes is tekken.json")
                            .to_json();
                        tekken_json.as_bytes()
                    }
                };
                (
                    Header::MistralCommon {
                        chatids,
                        file: file.to_string_lossy().into_owned(),
                        unknown_template_args: self.unknown_template_args(),
                    },
                    content.to_vec(),
                )
            }
        };
        let header = serde_json::to_vec(&header).map_err(invalid)?;
        let mut out = Vec::with_capacity(MAGIC.len() + 9 + header.len() + payload.len());
        out.extend_from_slice(MAGIC);
        out.push(STATE_VERSION);
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// Rebuild an encoder from [`Encoder::to_bytes`]. Reads no file. Fails with
    /// [`Error::Load`] on bytes that are not a state, or a state of another format version.
    pub fn from_bytes(bytes: &[u8]) -> Result<Encoder> {
        let rest = bytes.strip_prefix(MAGIC.as_slice()).ok_or_else(|| {
            Error::Load(
                "not a chatids Encoder state (it does not start with chatids' marker)".into(),
            )
        })?;
        let (&version, rest) = rest
            .split_first()
            .ok_or_else(|| invalid("it ends after the marker"))?;
        if version != STATE_VERSION {
            return Err(Error::Load(format!(
                "the chatids Encoder state has format version {version}, and chatids {} reads \
                 version {STATE_VERSION} only: load it with the chatids version that saved it, or \
                 build the encoder again with from_pretrained",
                env!("CARGO_PKG_VERSION")
            )));
        }
        let (len, rest) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| invalid("truncated header"))?;
        let len = usize::try_from(u64::from_le_bytes(*len))
            .ok()
            .filter(|&n| n <= rest.len())
            .ok_or_else(|| invalid("truncated header"))?;
        let (header, payload) = rest.split_at(len);
        let header: Header<CheckpointState> = serde_json::from_slice(header).map_err(invalid)?;
        match header {
            Header::Transformers {
                checkpoint,
                unknown_template_args,
                ..
            } => {
                let tokenizer = Tokenizer::from_bytes(payload)
                    .map_err(|e| invalid(format!("the tokenizer: {e}")))?;
                rebuild(checkpoint, tokenizer)
                    .map(|e| e.with_unknown_template_args(unknown_template_args))
            }
            Header::MistralCommon {
                file,
                unknown_template_args,
                ..
            } => Encoder::from_mistral_common_bytes(Path::new(&file), payload.to_vec())
                .map(|e| e.with_unknown_template_args(unknown_template_args)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EncodeOptions, Message};
    use std::path::PathBuf;

    /// A temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("chatids-persist-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const CHATML: &str = concat!(
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + ",
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    );

    /// A checkpoint directory with a small byte-level BPE (ChatML tokens, a few merges).
    fn tiny_checkpoint(dir: &Path) {
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        let mut alphabet: Vec<char> = ByteLevel::alphabet().into_iter().collect();
        alphabet.sort_unstable();
        let mut vocab = serde_json::Map::new();
        for (i, c) in alphabet.iter().enumerate() {
            vocab.insert(c.to_string(), (i as u32 + 2).into());
        }
        let merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o")];
        for (a, b) in merges {
            let id = vocab.len() as u32 + 2;
            vocab.insert(format!("{a}{b}"), id.into());
        }
        let added = |id: u32, content: &str| {
            serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        };
        let tokenizer = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [added(0, "<|im_start|>"), added(1, "<|im_end|>")],
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": merges.iter().map(|(a, b)| format!("{a} {b}")).collect::<Vec<_>>()},
        });
        let config = serde_json::json!({
            "eos_token": "<|im_end|>",
            "chat_template": CHATML,
            "tokenizer_class": "PreTrainedTokenizerFast",
        });
        std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
        std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    }

    /// A tekken.json with the deprecated special tokens (`<s>`, `[INST]`, ...) and bytes.
    fn tiny_tekken(dir: &Path) -> PathBuf {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut vocab: Vec<serde_json::Value> = (0..=255u8)
            .map(|b| serde_json::json!({"rank": b, "token_bytes": b64(&[b])}))
            .collect();
        for (i, t) in ["he", "ll", "hell", "hello"].iter().enumerate() {
            vocab.push(serde_json::json!({"rank": 256 + i, "token_bytes": b64(t.as_bytes())}));
        }
        let json = serde_json::json!({
            "config": {"pattern": r"\w+|\s+|[^\w\s]+", "default_vocab_size": 260 + 100,
                "default_num_special_tokens": 100, "version": "v3"},
            "vocab": vocab,
        });
        let file = dir.join("tekken.json");
        std::fs::write(&file, json.to_string()).unwrap();
        file
    }

    fn conversation() -> Vec<Message> {
        vec![
            Message::new("system", "Be brief."),
            Message::new("user", "hello <|im_end|> [INST] there"),
            Message::new("assistant", "hello!"),
            Message::new("user", "and again"),
        ]
    }

    /// `to_bytes`/`from_bytes` give an encoder with the same outputs, and the same state again.
    fn assert_round_trip(enc: &Encoder) -> Encoder {
        let state = enc.to_bytes().unwrap();
        let back = Encoder::from_bytes(&state).unwrap();
        for add_generation_prompt in [false, true] {
            let options = EncodeOptions {
                add_generation_prompt,
                ..Default::default()
            };
            let messages = conversation();
            let ids = enc.encode(&messages, &options).unwrap();
            assert!(!ids.is_empty());
            assert_eq!(back.encode(&messages, &options).unwrap(), ids);
            assert_eq!(
                back.render(&messages, &options).unwrap(),
                enc.render(&messages, &options).unwrap()
            );
        }
        assert_eq!(back.format_name(), enc.format_name());
        assert_eq!(back.explain(), enc.explain());
        assert_eq!(back.stop_token_ids(), enc.stop_token_ids());
        assert_eq!(
            back.control_tokens().tokens(),
            enc.control_tokens().tokens()
        );
        assert_eq!(back.to_bytes().unwrap(), state, "the state is a fixpoint");
        back
    }

    #[test]
    fn transformers_route_round_trips() {
        let tmp = TempDir::new("hf");
        tiny_checkpoint(&tmp.0);
        let enc = Encoder::from_dir(&tmp.0, None).unwrap();
        assert_round_trip(&enc);
        let generic = Encoder::from_dir(&tmp.0, Some("jinja")).unwrap();
        assert!(generic.is_jinja());
        let back = assert_round_trip(&generic);
        assert!(back.is_jinja());
        // Nothing is read from the directory when loading the state.
        let state = enc.to_bytes().unwrap();
        drop(tmp);
        let back = Encoder::from_bytes(&state).unwrap();
        assert_eq!(back.explain(), enc.explain());
    }

    #[test]
    fn mistral_common_tekken_round_trips() {
        let tmp = TempDir::new("tekken");
        let file = tiny_tekken(&tmp.0);
        let enc = Encoder::from_dir(&tmp.0, None).unwrap();
        assert_eq!(enc.format_name(), "mistral-common-v3-tekken");
        // The tekken file is written from the loaded tokenizer, not kept.
        assert!(matches!(
            enc.origin(),
            Origin::MistralCommon { bytes: None, .. }
        ));
        std::fs::remove_file(&file).unwrap();
        drop(tmp);
        let back = assert_round_trip(&enc);
        assert!(back.explain().contains("tekken.json"));
    }

    #[test]
    fn garbage_and_other_versions_are_refused() {
        let err = |bytes: &[u8]| match Encoder::from_bytes(bytes) {
            Err(Error::Load(msg)) => msg,
            Err(other) => panic!("not a load error: {other}"),
            Ok(_) => panic!("accepted {bytes:?}"),
        };
        assert!(err(b"").contains("not a chatids Encoder state"));
        assert!(err(b"\x80\x04\x95garbage").contains("not a chatids Encoder state"));
        assert!(err(MAGIC).contains("ends after the marker"));
        let mut other = MAGIC.to_vec();
        other.push(STATE_VERSION + 1);
        assert!(err(&other).contains(&format!("format version {}", STATE_VERSION + 1)));
        let mut truncated = MAGIC.to_vec();
        truncated.push(STATE_VERSION);
        truncated.extend_from_slice(&1000u64.to_le_bytes());
        truncated.extend_from_slice(b"{}");
        assert!(err(&truncated).contains("truncated header"));
        let with_header = |header: &str, payload: &[u8]| {
            let mut out = MAGIC.to_vec();
            out.push(STATE_VERSION);
            out.extend_from_slice(&(header.len() as u64).to_le_bytes());
            out.extend_from_slice(header.as_bytes());
            out.extend_from_slice(payload);
            out
        };
        assert!(err(&with_header("{not json", b"")).contains("invalid chatids Encoder state"));
        assert!(err(&with_header(r#"{"route": "elsewhere"}"#, b"")).contains("invalid"));
        // A valid header with a broken payload.
        let tmp = TempDir::new("garbage");
        tiny_checkpoint(&tmp.0);
        let state = Encoder::from_dir(&tmp.0, None).unwrap().to_bytes().unwrap();
        let header_len = u64::from_le_bytes(state[9..17].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&state[17..17 + header_len]).unwrap();
        assert!(err(&with_header(header, b"{\"model\": 1}")).contains("the tokenizer"));
        assert!(err(&state[..state.len() / 2]).contains("the tokenizer"));
        let tekken = with_header(
            r#"{"route": "mistral-common", "chatids": "0", "file": "/x/tekken.json"}"#,
            b"not json",
        );
        assert!(err(&tekken).contains("tekken.json"));
    }
}
