//! An [`Encoder`]'s state: what it was built from, as bytes, so that another process rebuilds
//! the same encoder without the checkpoint's files (`chatids.Encoder` pickles by value with
//! it: nothing is read from disk or downloaded when unpickling).
//!
//! Layout: [`MAGIC`], the state format version ([`STATE_VERSION`], one byte), the length of the
//! header (u64, little endian), the header (JSON), the payload, and (since version 2) a
//! checksum of everything before it ([`crate::text::image::checksum`]): a damaged state is
//! refused, never half read. Version 1 states (no checksum, the payload a `tokenizer.json`
//! only) are still read, and version 2 states (the native core's image without the
//! longest-token tables of [`crate::text::native`], which are then built).
//!
//! * Transformers route (checkpoint directories and GGUF files alike): the header holds the
//!   checkpoint as loaded, without its tokenizer (templates, special tokens, added tokens,
//!   generation eos ids, ...), and the load options (`format`, `allow_external`). The payload
//!   is an image ([`crate::text::image`]): the tokenizer serialized by the tokenizers crate (a
//!   `tokenizer.json`, after chatids' transformers adjustments), then, when the native core
//!   runs, the core's built tables ([`NativeBpe::write_image`]) and the vocabulary's lookup
//!   index ([`TokenIndex`]). The encoder is rebuilt with the same steps as a load, so the
//!   format is chosen again from the same inputs, with the same result; with the native
//!   core's tables, nothing is parsed or built from the JSON, and the `tokenizers` crate's
//!   tokenizer is built only when something needs it ([`crate::text::lazy`]). This is what
//!   makes a compiled cache ([`crate::compiled`]) and an unpickled encoder load in
//!   milliseconds.
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
use crate::text::image::{checksum, Reader, Writer};
use crate::text::{EncoderChoice, LazyTokenizer, NativeBpe, Selected, TokenIndex};

/// The first bytes of every state.
pub const MAGIC: &[u8; 8] = b"chatids\x00";

/// The version of the state's layout; a state of another version is refused (versions 1 and
/// 2 are still read).
pub const STATE_VERSION: u8 = 3;

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
fn rebuild(state: CheckpointState, tokenizer: LazyTokenizer) -> Result<Encoder> {
    let (format, allow_external) = (state.format().map(str::to_string), state.allow_external());
    Encoder::from_checkpoint_with(
        state.to_checkpoint(tokenizer),
        format.as_deref(),
        allow_external,
    )
}

/// Rebuild the encoder of a version-2 or later transformers-route state from its image: with the
/// native core's tables when it has them (and the environment does not ask for the
/// `tokenizers` crate), the crate's tokenizer left unbuilt until needed.
fn from_image(state: CheckpointState, payload: &[u8], version: u8) -> Result<Encoder> {
    let mut r = Reader::new(payload);
    let image = |e: String| invalid(format!("the tokenizer: {e}"));
    let with_native = r.bool().map_err(image)?;
    if !with_native {
        let json = r.str().map_err(image)?;
        return rebuild(state, tokenizer_from_json(json.as_bytes())?);
    }
    let json = r.bytes().map_err(image)?.to_vec();
    let native = NativeBpe::read_image_of(&mut r, version >= 3).map_err(image)?;
    let index = TokenIndex::read(&mut r).map_err(image)?;
    if !r.is_done() {
        return Err(image("bytes after the end".into()));
    }
    let tokenizer = LazyTokenizer::from_compressed_json(json, index);
    if EncoderChoice::from_env() != EncoderChoice::Auto {
        return rebuild(state, tokenizer);
    }
    let (format, allow_external) = (state.format().map(str::to_string), state.allow_external());
    let text = std::sync::Arc::new(Selected::from_native(tokenizer.clone(), native));
    Encoder::build_with_text(
        state.to_checkpoint(tokenizer),
        format.as_deref(),
        allow_external,
        text,
    )
}

/// A built tokenizer of a state's `tokenizer.json`.
fn tokenizer_from_json(json: &[u8]) -> Result<LazyTokenizer> {
    Tokenizer::from_bytes(json)
        .map(LazyTokenizer::built)
        .map_err(|e| invalid(format!("the tokenizer: {e}")))
}

fn invalid(what: impl std::fmt::Display) -> Error {
    Error::Load(format!("invalid chatids Encoder state: {what}"))
}

impl Encoder {
    /// The encoder's state: everything [`Encoder::from_bytes`] needs to rebuild it, in this or
    /// another process, without the checkpoint's files (see [`crate::persist`]), compressed
    /// (what pickles carry). The tokenizer is serialized now, from the encoder's own copy.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.to_state(true)
    }

    /// [`Encoder::to_bytes`], compressed with zstd or not (the compiled cache is not: it is
    /// read more often than it is moved).
    pub fn to_state(&self, compress: bool) -> Result<Vec<u8>> {
        let chatids = env!("CARGO_PKG_VERSION").to_string();
        let tekken_json;
        let (header, payload): (Header<&CheckpointState>, Vec<u8>) = match self.origin() {
            Origin::Checkpoint(checkpoint) => {
                let text = self
                    .text_encoder()
                    .expect("an encoder built from a checkpoint has its tokenizer");
                let mut image = Writer::new();
                match text.native() {
                    Some(native) => {
                        image.u8(1);
                        image.bytes(text.lazy_tokenizer().compressed_json()?);
                        native.write_image(&mut image);
                        text.lazy_tokenizer().write_index(&mut image)?;
                    }
                    None => {
                        image.u8(0);
                        image.str(&text.lazy_tokenizer().to_json()?);
                    }
                }
                (
                    Header::Transformers {
                        chatids,
                        checkpoint,
                        unknown_template_args: self.unknown_template_args(),
                    },
                    image.into_bytes(),
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
        let mut body = Vec::with_capacity(8 + header.len() + payload.len());
        body.extend_from_slice(&(header.len() as u64).to_le_bytes());
        body.extend_from_slice(&header);
        body.extend_from_slice(&payload);
        drop(payload);
        let mut out = Vec::with_capacity(MAGIC.len() + 2 + body.len() + 8);
        out.extend_from_slice(MAGIC);
        out.push(STATE_VERSION);
        if compress {
            out.push(1);
            let packed = zstd::bulk::compress(&body, 1)
                .map_err(|e| Error::Tokenizer(format!("cannot compress the state: {e}")))?;
            out.extend_from_slice(&(body.len() as u64).to_le_bytes());
            out.extend_from_slice(&packed);
        } else {
            out.push(0);
            out.extend_from_slice(&body);
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
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
        if !(1..=STATE_VERSION).contains(&version) {
            return Err(Error::Load(format!(
                "the chatids Encoder state has format version {version}, and chatids {} reads \
                 versions 1 to {STATE_VERSION} only: load it with the chatids version that saved \
                 it, or build the encoder again with from_pretrained",
                env!("CARGO_PKG_VERSION")
            )));
        }
        let unpacked;
        let rest = if version >= 2 {
            let end = bytes
                .len()
                .checked_sub(8)
                .ok_or_else(|| invalid("truncated"))?;
            let (body, sum) = bytes.split_at(end);
            if body.len() < MAGIC.len() + 2
                || checksum(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes"))
            {
                return Err(invalid(
                    "it is damaged (its checksum does not match: truncated or overwritten)",
                ));
            }
            let (&compressed, rest) = rest[..rest.len() - 8]
                .split_first()
                .ok_or_else(|| invalid("truncated"))?;
            match compressed {
                0 => rest,
                1 => {
                    let (len, packed) = rest
                        .split_first_chunk::<8>()
                        .ok_or_else(|| invalid("truncated"))?;
                    let len = usize::try_from(u64::from_le_bytes(*len))
                        .ok()
                        .filter(|&n| n <= 1 << 34)
                        .ok_or_else(|| invalid("impossible size"))?;
                    let mut out = Vec::with_capacity(len.min(packed.len().saturating_mul(16)));
                    zstd::stream::copy_decode(packed, &mut out)
                        .map_err(|e| invalid(format!("cannot decompress it: {e}")))?;
                    if out.len() != len {
                        return Err(invalid("its decompressed size is not the one it states"));
                    }
                    unpacked = out;
                    &unpacked[..]
                }
                c => return Err(invalid(format!("unknown compression {c}"))),
            }
        } else {
            rest
        };
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
                let encoder = if version == 1 {
                    rebuild(checkpoint, tokenizer_from_json(payload)?)?
                } else {
                    from_image(checkpoint, payload, version)?
                };
                Ok(encoder.with_unknown_template_args(unknown_template_args))
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
        tiny_checkpoint_with(
            dir,
            serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
        );
    }

    /// Llama 3's pre-tokenizer, which the native core runs.
    fn llama3_pre_tokenizer() -> serde_json::Value {
        serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": crate::text::native::split::LLAMA3},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})
    }

    /// [`tiny_checkpoint`] with another pre-tokenizer.
    fn tiny_checkpoint_with(dir: &Path, pre_tokenizer: serde_json::Value) {
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
            "pre_tokenizer": pre_tokenizer,
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
        let native = TempDir::new("hf-native");
        tiny_checkpoint_with(&native.0, llama3_pre_tokenizer());
        let with_core = Encoder::from_dir(&native.0, None).unwrap();
        assert!(with_core.text_encoder().unwrap().native().is_some());
        let back = assert_round_trip(&with_core);
        assert_eq!(
            back.to_state(false).unwrap(),
            with_core.to_state(false).unwrap()
        );
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

    /// A state of today's version around `body` (uncompressed), with a valid checksum.
    fn framed(body: &[u8]) -> Vec<u8> {
        framed_as(STATE_VERSION, body)
    }

    /// A state of `version` (2 or later) around `body` (uncompressed), with a valid checksum.
    fn framed_as(version: u8, body: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.push(version);
        out.push(0);
        out.extend_from_slice(body);
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// A header and payload as a state's body.
    fn body(header: &str, payload: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn garbage_damage_and_other_versions_are_refused() {
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
        assert!(err(&framed(&1000u64.to_le_bytes())).contains("truncated header"));
        assert!(err(&framed(&body("{not json", b""))).contains("invalid chatids Encoder state"));
        assert!(err(&framed(&body(r#"{"route": "elsewhere"}"#, b""))).contains("invalid"));
        let tmp = TempDir::new("garbage");
        tiny_checkpoint(&tmp.0);
        let enc = Encoder::from_dir(&tmp.0, None).unwrap();
        let state = enc.to_state(false).unwrap();
        // Any damage is seen before anything is read: a cut, a changed byte, a changed checksum.
        let damaged = |bytes: &[u8]| err(bytes).contains("damaged");
        assert!(damaged(&state[..state.len() / 2]));
        assert!(damaged(&state[..state.len() - 1]));
        for at in [10, state.len() / 2, state.len() - 9, state.len() - 1] {
            let mut bad = state.clone();
            bad[at] ^= 0x20;
            assert!(damaged(&bad), "a change at byte {at}");
        }
        let compressed = enc.to_bytes().unwrap();
        let mut bad = compressed.clone();
        bad[12] ^= 1;
        assert!(damaged(&bad));
        // A valid header with a broken payload.
        let header_len = u64::from_le_bytes(state[10..18].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&state[18..18 + header_len]).unwrap();
        assert!(err(&framed(&body(header, b"\x01junk"))).contains("the tokenizer"));
        assert!(err(&framed(&body(header, b""))).contains("the tokenizer"));
        // A compressed state whose stated size is not its size.
        let mut lying = MAGIC.to_vec();
        lying.push(STATE_VERSION);
        lying.push(1);
        lying.extend_from_slice(&5u64.to_le_bytes());
        lying.extend_from_slice(&zstd::bulk::compress(&body(header, b""), 1).unwrap());
        let sum = checksum(&lying);
        lying.extend_from_slice(&sum.to_le_bytes());
        assert!(err(&lying).contains("size"));
        let tekken = framed(&body(
            r#"{"route": "mistral-common", "chatids": "0", "file": "/x/tekken.json"}"#,
            b"not json",
        ));
        assert!(err(&tekken).contains("tekken.json"));
    }

    #[test]
    fn version_1_states_are_still_read() {
        let tmp = TempDir::new("v1");
        tiny_checkpoint(&tmp.0);
        let enc = Encoder::from_dir(&tmp.0, None).unwrap();
        let state = enc.to_state(false).unwrap();
        let header_len = u64::from_le_bytes(state[10..18].try_into().unwrap()) as usize;
        let mut v1 = MAGIC.to_vec();
        v1.push(1);
        v1.extend_from_slice(&body(
            std::str::from_utf8(&state[18..18 + header_len]).unwrap(),
            enc.text_encoder()
                .unwrap()
                .lazy_tokenizer()
                .to_json()
                .unwrap()
                .as_bytes(),
        ));
        let back = Encoder::from_bytes(&v1).unwrap();
        let options = EncodeOptions::default();
        assert_eq!(
            back.encode(&conversation(), &options).unwrap(),
            enc.encode(&conversation(), &options).unwrap()
        );
        assert_eq!(back.to_state(false).unwrap(), state);
        let mut broken = v1[..v1.len() - 10].to_vec();
        broken.extend_from_slice(b"{\"model\"}");
        assert!(
            matches!(Encoder::from_bytes(&broken), Err(Error::Load(m)) if m.contains("the tokenizer"))
        );
    }

    /// A version-2 state (the native core's image without its longest-token tables) still
    /// reads: the tables are built, and the encoder is the one of today's state.
    #[test]
    fn version_2_states_are_still_read() {
        let tmp = TempDir::new("v2");
        tiny_checkpoint_with(&tmp.0, llama3_pre_tokenizer());
        let enc = Encoder::from_dir(&tmp.0, None).unwrap();
        let state = enc.to_state(false).unwrap();
        let header_len = u64::from_le_bytes(state[10..18].try_into().unwrap()) as usize;
        let text = enc.text_encoder().unwrap();
        let mut image = Writer::new();
        image.u8(1);
        image.bytes(text.lazy_tokenizer().compressed_json().unwrap());
        text.native()
            .expect("the native core runs")
            .write_image_layout(&mut image, false);
        text.lazy_tokenizer().write_index(&mut image).unwrap();
        let v2 = framed_as(
            2,
            &body(
                std::str::from_utf8(&state[18..18 + header_len]).unwrap(),
                &image.into_bytes(),
            ),
        );
        let back = Encoder::from_bytes(&v2).unwrap();
        let options = EncodeOptions::default();
        assert_eq!(
            back.encode(&conversation(), &options).unwrap(),
            enc.encode(&conversation(), &options).unwrap()
        );
        assert_eq!(back.to_state(false).unwrap(), state);
    }

    /// A state read back builds the `tokenizers` crate's tokenizer only when something needs it,
    /// and that tokenizer is the one the state was written from.
    #[test]
    fn the_tokenizer_is_built_on_first_use_and_is_the_same() {
        let tmp = TempDir::new("lazy");
        tiny_checkpoint_with(&tmp.0, llama3_pre_tokenizer());
        let enc = Encoder::from_dir(&tmp.0, None).unwrap();
        assert!(enc.text_encoder().unwrap().native().is_some());
        let back = Encoder::from_bytes(&enc.to_bytes().unwrap()).unwrap();
        let lazy = back.text_encoder().unwrap().lazy_tokenizer();
        let options = EncodeOptions::default();
        back.encode(&conversation(), &options).unwrap();
        assert_eq!(back.stop_token_ids(), enc.stop_token_ids());
        assert!(!lazy.is_built(), "encoding and loading do not build it");
        let eager = enc.text_encoder().unwrap().lazy_tokenizer();
        for id in 0..eager.get().unwrap().get_vocab_size(true) as u32 + 2 {
            assert_eq!(lazy.id_to_token(id), eager.id_to_token(id), "id {id}");
            if let Some(t) = eager.id_to_token(id) {
                assert_eq!(lazy.token_to_id(&t), eager.token_to_id(&t), "{t:?}");
            }
        }
        assert_eq!(lazy.token_to_id("not a token"), None);
        assert_eq!(
            lazy.first_id_with_specials(),
            eager.first_id_with_specials()
        );
        assert!(!lazy.is_built(), "lookups do not build it");
        assert_eq!(lazy.to_json().unwrap(), eager.to_json().unwrap());
        // Text the native core hands to the crate builds it.
        let mut a = Vec::new();
        let which = crate::text::Which::Tokenizers;
        let text_options = crate::text::TextOptions {
            added_tokens: true,
            at_start: true,
        };
        back.text_encoder()
            .unwrap()
            .encode_with(which, "hello", text_options, &mut a, None)
            .unwrap();
        assert!(lazy.is_built());
        assert_eq!(
            lazy.get().unwrap().to_string(false).unwrap(),
            eager.to_json().unwrap()
        );
    }
}
