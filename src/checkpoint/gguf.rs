//! Loading a GGUF file (llama.cpp's format) as a [`Checkpoint`]: its tokenizer and chat template.
//!
//! A GGUF has no `tokenizer.json`; llama.cpp stores the vocabulary, scores, token types, merges
//! and special token ids as metadata (`tokenizer.ggml.*`). transformers rebuilds a tokenizer from
//! them when it is given `gguf_file=` (`transformers/integrations/gguf/gguf_tokenizer_mapping.py`),
//! and this module rebuilds the very same one, step for step:
//!
//! 1. a builder chosen by `tokenizer.ggml.model` (and, for SentencePiece vocabularies, by
//!    `general.architecture`): byte-level BPE (`GPT2Tokenizer`), SentencePiece BPE
//!    (`LlamaTokenizer`), Gemma's respelled SentencePiece BPE, or Phi-3's. Each builder class adds
//!    its own default special tokens (`GPT2Tokenizer` adds `<|endoftext|>`, appended past the file's
//!    vocabulary when the file does not have it, as transformers does).
//! 2. Tokens typed CONTROL (3) become special added tokens (in a byte-level vocabulary only those
//!    spelled in the byte alphabet), USER_DEFINED (4) ones plain added tokens.
//! 3. A known `tokenizer.ggml.pre` replaces the pre-tokenizer by its split regex + byte level.
//! 4. The class transformers picks for the architecture (`TokenizersBackend`, `Qwen2Tokenizer`,
//!    `GemmaTokenizer`) adds the named special tokens (`bos`/`eos`/`unk`/`pad` from the file) and
//!    sets the BOS/EOS post-processor from `tokenizer.ggml.add_bos_token`/`add_eos_token`
//!    (SentencePiece vocabularies default to adding BOS).
//!
//! Where transformers would silently build a tokenizer unlike the model's own (a byte-level file
//! whose `tokenizer.ggml.pre` it does not know falls back to GPT-2's regex), or cannot build one
//! at all, loading fails with [`Error::Load`] naming what is unsupported.
//!
//! The metadata parser reads the header and the key/value section only (GGUF v2 and v3,
//! little-endian), through a buffered reader: the tensor data of a many-GB file is never read.
//! Every length is checked against the bytes left in the file before anything is allocated.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::json;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    Tokenizer,
};

use super::{Checkpoint, SpecialTokens};
use crate::control_tokens::AddedTokenInfo;
use crate::error::{Error, Result};
use crate::pystr;

/// Load the tokenizer and chat template stored in a GGUF file's metadata (tensors are not read).
pub fn load(path: &Path) -> Result<Checkpoint> {
    let metadata = read_metadata(path)?;
    let origin = path.display().to_string();
    let built = build_tokenizer(&metadata, &origin)?;
    let chat_template = match metadata.get("tokenizer.chat_template") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Error::Load(format!(
                "{origin}: tokenizer.chat_template is {}, not a string",
                other.type_name()
            )))
        }
        None => {
            return Err(Error::Load(format!(
                "{origin}: the GGUF file has no chat template (no tokenizer.chat_template in its metadata)"
            )))
        }
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut added_tokens: Vec<AddedTokenInfo> = built
        .tokenizer
        .get_added_tokens_decoder()
        .into_iter()
        .map(|(id, t)| AddedTokenInfo {
            id,
            content: t.content,
            special: t.special,
            lstrip: t.lstrip,
            rstrip: t.rstrip,
            single_word: t.single_word,
            normalized: t.normalized,
        })
        .collect();
    added_tokens.sort_by_key(|t| t.id);
    let named = &built.named;
    let special_tokens = SpecialTokens {
        bos: named.bos.clone(),
        eos: named.eos.clone(),
        unk: named.unk.clone(),
        pad: named.pad.clone(),
    };
    let special_tokens_map = named
        .in_order()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut generation_eos_ids = Vec::new();
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        // transformers reads only the eos id (checked above); a malformed eot/eom id is ignored.
        let id = metadata.token_id(key, &origin).ok().flatten();
        if let Some(id) = id.and_then(|id| u32::try_from(id).ok()) {
            if !generation_eos_ids.contains(&id) {
                generation_eos_ids.push(id);
            }
        }
    }
    Ok(Checkpoint {
        dir,
        tokenizer: crate::text::LazyTokenizer::built(built.tokenizer),
        added_tokens,
        chat_templates: vec![("default".to_string(), chat_template.clone())],
        chat_template,
        chat_template_source: "the GGUF file's tokenizer.chat_template".to_string(),
        special_tokens_map,
        special_tokens,
        tokenizer_class: None,
        compat_note: Some(built.note),
        generation_eos_ids,
        native_model: None,
    })
}

// ---------------------------------------------------------------------------------------------
// The metadata parser.

/// A metadata value of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `GGUF_TYPE_UINT8` (0).
    U8(u8),
    /// `GGUF_TYPE_INT8` (1).
    I8(i8),
    /// `GGUF_TYPE_UINT16` (2).
    U16(u16),
    /// `GGUF_TYPE_INT16` (3).
    I16(i16),
    /// `GGUF_TYPE_UINT32` (4).
    U32(u32),
    /// `GGUF_TYPE_INT32` (5).
    I32(i32),
    /// `GGUF_TYPE_FLOAT32` (6).
    F32(f32),
    /// `GGUF_TYPE_BOOL` (7).
    Bool(bool),
    /// `GGUF_TYPE_STRING` (8): a UTF-8 string.
    String(String),
    /// `GGUF_TYPE_ARRAY` (9): values of one type (possibly arrays themselves).
    Array(Vec<Value>),
    /// `GGUF_TYPE_UINT64` (10).
    U64(u64),
    /// `GGUF_TYPE_INT64` (11).
    I64(i64),
    /// `GGUF_TYPE_FLOAT64` (12).
    F64(f64),
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "a uint8",
            Value::I8(_) => "an int8",
            Value::U16(_) => "a uint16",
            Value::I16(_) => "an int16",
            Value::U32(_) => "a uint32",
            Value::I32(_) => "an int32",
            Value::F32(_) => "a float32",
            Value::Bool(_) => "a bool",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::U64(_) => "a uint64",
            Value::I64(_) => "an int64",
            Value::F64(_) => "a float64",
        }
    }

    /// The value as an integer, if it is one.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as a float, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_i128().map(|v| v as f64),
        }
    }
}

/// The header and key/value metadata of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    /// The format version (2 or 3).
    pub version: u32,
    /// How many tensors the file declares (their table and data are not read).
    pub tensor_count: u64,
    /// The key/value pairs, in file order.
    pub entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// The value of `key` (the last one, if a file repeats a key).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    fn string(&self, key: &str, origin: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong_type(origin, key, v, "a string")),
        }
    }

    fn bool(&self, key: &str, origin: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => match v.as_i128() {
                Some(i) => Ok(Some(i != 0)),
                None => Err(wrong_type(origin, key, v, "a bool")),
            },
        }
    }

    fn token_id(&self, key: &str, origin: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_i128().and_then(|i| u64::try_from(i).ok()) {
                Some(i) => Ok(Some(i)),
                None => Err(wrong_type(origin, key, v, "a non-negative integer")),
            },
        }
    }

    fn array(&self, key: &str, origin: &str) -> Result<Option<&[Value]>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(v) => Err(wrong_type(origin, key, v, "an array")),
        }
    }

    fn strings(&self, key: &str, origin: &str) -> Result<Option<Vec<&str>>> {
        let Some(items) = self.array(key, origin)? else {
            return Ok(None);
        };
        items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.as_str()),
                other => Err(wrong_type(origin, key, other, "an array of strings")),
            })
            .collect::<Result<_>>()
            .map(Some)
    }

    fn numbers<T>(
        &self,
        key: &str,
        origin: &str,
        what: &str,
        f: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        let Some(items) = self.array(key, origin)? else {
            return Ok(None);
        };
        items
            .iter()
            .map(|v| f(v).ok_or_else(|| wrong_type(origin, key, v, what)))
            .collect::<Result<_>>()
            .map(Some)
    }
}

fn wrong_type(origin: &str, key: &str, value: &Value, expected: &str) -> Error {
    Error::Load(format!(
        "{origin}: GGUF metadata {key} holds {}, not {expected}",
        value.type_name()
    ))
}

/// Read the header and metadata of the GGUF file at `path` (not its tensor table or data).
pub fn read_metadata(path: &Path) -> Result<Metadata> {
    let origin = path.display().to_string();
    let file = File::open(path).map_err(|e| Error::Load(format!("cannot read {origin}: {e}")))?;
    let len = file
        .metadata()
        .map_err(|e| Error::Load(format!("cannot read {origin}: {e}")))?
        .len();
    parse_metadata(BufReader::with_capacity(1 << 16, file), len, &origin)
}

/// Parse GGUF metadata from `reader`, whose total length is `len` bytes.
pub fn parse_metadata(reader: impl Read, len: u64, origin: &str) -> Result<Metadata> {
    let mut r = Reader {
        inner: reader,
        pos: 0,
        len,
        origin,
    };
    let magic: [u8; 4] = r.array("the GGUF magic")?;
    if &magic != b"GGUF" {
        return Err(Error::Load(format!(
            "{origin} is not a GGUF file (it starts with {magic:?}, not \"GGUF\")"
        )));
    }
    let raw_version: [u8; 4] = r.array("the GGUF version")?;
    let version = u32::from_le_bytes(raw_version);
    if !matches!(version, 2 | 3) {
        let swapped = u32::from_be_bytes(raw_version);
        return Err(Error::Load(if matches!(swapped, 1..=3) {
            format!("{origin} is a big-endian GGUF file (v{swapped}); only little-endian GGUF files are supported")
        } else if version == 1 {
            format!("{origin} is GGUF v1, which is not supported (only v2 and v3)")
        } else {
            format!("{origin}: unknown GGUF version {version} (only v2 and v3 are supported)")
        }));
    }
    let tensor_count = r.u64("the tensor count")?;
    let kv_count = r.u64("the metadata count")?;
    // Each entry is at least a key length (8), a type (4) and a one-byte value.
    r.check_room(kv_count, 13, "metadata entries")?;
    let mut entries = Vec::with_capacity(kv_count.min(4096) as usize);
    let mut index = HashMap::new();
    for _ in 0..kv_count {
        let key = r.string("a metadata key")?;
        let value_type = r.u32(&key)?;
        let value = r.value(value_type, &key, 0)?;
        index.insert(key.clone(), entries.len());
        entries.push((key, value));
    }
    Ok(Metadata {
        version,
        tensor_count,
        entries,
        index,
    })
}

/// How deep arrays may nest (llama.cpp writes none; this only bounds the recursion).
const MAX_ARRAY_DEPTH: usize = 16;

struct Reader<'a, R> {
    inner: R,
    pos: u64,
    len: u64,
    origin: &'a str,
}

impl<R: Read> Reader<'_, R> {
    fn truncated(&self, what: &str) -> Error {
        Error::Load(format!(
            "{}: the GGUF file is truncated or corrupt: it ends inside {what} (at byte {} of {})",
            self.origin, self.pos, self.len
        ))
    }

    /// Fail unless `count` items of at least `size` bytes each fit in what is left of the file.
    fn check_room(&self, count: u64, size: u64, what: &str) -> Result<()> {
        let left = self.len.saturating_sub(self.pos);
        match count.checked_mul(size) {
            Some(need) if need <= left => Ok(()),
            _ => Err(Error::Load(format!(
                "{}: the GGUF file is corrupt: {count} {what} at byte {} cannot fit in the {left} bytes left",
                self.origin, self.pos
            ))),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut buf = [0u8; N];
        self.inner
            .read_exact(&mut buf)
            .map_err(|_| self.truncated(what))?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        self.check_room(n, 1, &format!("string bytes in {what}"))?;
        let mut buf = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|_| self.truncated(what))?;
        self.pos += n;
        String::from_utf8(buf).map_err(|e| {
            Error::Load(format!(
                "{}: GGUF metadata {what} is not valid UTF-8: {e}",
                self.origin
            ))
        })
    }

    fn value(&mut self, value_type: u32, key: &str, depth: usize) -> Result<Value> {
        Ok(match value_type {
            0 => Value::U8(u8::from_le_bytes(self.array(key)?)),
            1 => Value::I8(i8::from_le_bytes(self.array(key)?)),
            2 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            4 => Value::U32(u32::from_le_bytes(self.array(key)?)),
            5 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            7 => Value::Bool(self.array::<1>(key)?[0] != 0),
            8 => Value::String(self.string(key)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Error::Load(format!(
                        "{}: GGUF metadata {key} nests arrays more than {MAX_ARRAY_DEPTH} deep",
                        self.origin
                    )));
                }
                let item_type = self.u32(key)?;
                let count = self.u64(key)?;
                let min_size = match item_type {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    other => return Err(self.unknown_type(other, key)),
                };
                self.check_room(count, min_size, &format!("array items of {key}"))?;
                let mut items = Vec::with_capacity(count.min(1 << 16) as usize);
                for _ in 0..count {
                    items.push(self.value(item_type, key, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(u64::from_le_bytes(self.array(key)?)),
            11 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            other => return Err(self.unknown_type(other, key)),
        })
    }

    fn unknown_type(&self, value_type: u32, key: &str) -> Error {
        Error::Load(format!(
            "{}: GGUF metadata {key} has unknown value type {value_type} (the file is corrupt or newer than this reader)",
            self.origin
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Rebuilding the tokenizer as transformers does.

/// Token types of `tokenizer.ggml.token_type` (llama.cpp's `llama_token_type`).
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// The named special tokens of the tokenizer transformers builds, in its attribute order.
#[derive(Debug, Default, Clone)]
struct NamedTokens {
    bos: Option<String>,
    eos: Option<String>,
    unk: Option<String>,
    pad: Option<String>,
    mask: Option<String>,
}

impl NamedTokens {
    /// `(attribute, token)` in transformers' `SPECIAL_TOKENS_ATTRIBUTES` order.
    fn in_order(&self) -> Vec<(&'static str, &str)> {
        [
            ("bos_token", &self.bos),
            ("eos_token", &self.eos),
            ("unk_token", &self.unk),
            ("pad_token", &self.pad),
            ("mask_token", &self.mask),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
        .collect()
    }
}

/// The tokenizer class transformers instantiates for a GGUF's architecture (the outer class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OuterClass {
    /// `TokenizersBackend` (architectures with no class of their own: llama, phi3).
    Backend,
    /// `Qwen2Tokenizer`: re-adds its special tokens as special after initialization.
    Qwen2,
    /// `GemmaTokenizer`: names `<mask>` as its mask token.
    Gemma,
}

fn outer_class(architecture: &str) -> Option<OuterClass> {
    match architecture {
        "llama" | "phi3" => Some(OuterClass::Backend),
        "qwen2" | "qwen2moe" | "qwen3" | "qwen3moe" => Some(OuterClass::Qwen2),
        "gemma2" | "gemma3" => Some(OuterClass::Gemma),
        _ => None,
    }
}

const SUPPORTED_ARCHITECTURES: &str =
    "llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, phi3";

/// The builder transformers picks (`select_tokenizer_builder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Builder {
    /// `byte_level_tokenizer`: `GPT2Tokenizer` over the byte-level vocabulary.
    ByteLevel,
    /// `sentencepiece_tokenizer`: `LlamaTokenizer`.
    SentencePiece,
    /// `gemma_tokenizer`: respelled whitespace tokens, merges in file order, `GemmaTokenizer`.
    Gemma,
    /// `phi3_tokenizer`: `LlamaTokenizer` with the prefix space from a normalizer.
    Phi3,
}

const LLAMA3_SPLIT: &str = crate::text::native::split::LLAMA3;
const QWEN2_SPLIT: &str = crate::text::native::split::QWEN2;
const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_SPLIT: &str = crate::text::native::split::TEKKEN;
const GPT4O_SPLIT: &str = crate::text::native::split::O200K;

/// transformers' `GGUF_PRE_TOKENIZER_SPLITS`: `tokenizer.ggml.pre` -> split regex.
fn pre_tokenizer_split(pre: &str) -> Option<&'static str> {
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3_SPLIT,
        "tekken" => TEKKEN_SPLIT,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2_SPLIT,
        "qwen35" => QWEN35_SPLIT,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O_SPLIT,
        _ => return None,
    })
}

struct Built {
    tokenizer: Tokenizer,
    named: NamedTokens,
    note: String,
}

fn load_err(origin: &str, msg: impl std::fmt::Display) -> Error {
    Error::Load(format!("{origin}: {msg}"))
}

/// A tokenizer component (normalizer, pre-tokenizer, ...) from its `tokenizer.json` form.
macro_rules! component {
    ($ty:ty, $value:expr, $origin:expr $(,)?) => {
        serde_json::from_value::<$ty>($value)
            .map_err(|e| load_err($origin, format!("cannot build a tokenizer component: {e}")))
    };
}

fn tk_err(origin: &str) -> impl Fn(tokenizers::Error) -> Error + '_ {
    move |e| load_err(origin, format!("cannot build the tokenizer: {e}"))
}

/// Rebuild the tokenizer of a GGUF file as transformers' GGUF loader does.
fn build_tokenizer(metadata: &Metadata, origin: &str) -> Result<Built> {
    let architecture = metadata
        .string("general.architecture", origin)?
        .ok_or_else(|| load_err(origin, "the GGUF file has no general.architecture"))?;
    let model = metadata
        .string("tokenizer.ggml.model", origin)?
        .ok_or_else(|| {
            load_err(
                origin,
                "the GGUF file has no tokenizer (no tokenizer.ggml.model)",
            )
        })?;
    let pre = metadata.string("tokenizer.ggml.pre", origin)?;
    let tokens = metadata
        .strings("tokenizer.ggml.tokens", origin)?
        .ok_or_else(|| load_err(origin, "the GGUF file has no tokenizer.ggml.tokens"))?;
    let token_types = metadata
        .numbers(
            "tokenizer.ggml.token_type",
            origin,
            "an array of integers",
            |v| v.as_i128().map(|i| i as i64),
        )?
        .unwrap_or_default();
    let merges = metadata.strings("tokenizer.ggml.merges", origin)?;

    let outer = outer_class(architecture).ok_or_else(|| {
        load_err(
            origin,
            format!(
                "GGUF architecture {architecture:?} is not supported (chatids rebuilds GGUF tokenizers for: {SUPPORTED_ARCHITECTURES})"
            ),
        )
    })?;
    let builder = match (model, architecture) {
        ("gpt2", _) => Builder::ByteLevel,
        ("llama", "gemma2" | "gemma3") => Builder::Gemma,
        ("llama", "phi3") => Builder::Phi3,
        ("llama", _) => Builder::SentencePiece,
        (other, _) => {
            return Err(load_err(
                origin,
                format!(
                    "GGUF tokenizer.ggml.model {other:?} is not supported (chatids rebuilds \"gpt2\" byte-level BPE and \"llama\" SentencePiece BPE vocabularies)"
                ),
            ))
        }
    };
    let split = pre.and_then(pre_tokenizer_split);
    if builder == Builder::ByteLevel && split.is_none() && pre != Some("gpt-2") {
        return Err(load_err(
            origin,
            format!(
                "GGUF tokenizer.ggml.pre {} is not supported: transformers would split this byte-level vocabulary with GPT-2's regex, \
                 which is not how its model was trained; supported: gpt-2, llama-bpe/llama3, qwen2, tekken, gpt-4o and their aliases",
                pre.map_or("(missing)".to_string(), |p| format!("{p:?}"))
            ),
        ));
    }

    // 1. The builder's tokenizer, with its class's default special tokens.
    let mut tokenizer = match builder {
        Builder::ByteLevel => {
            let merges = merges.ok_or_else(|| {
                load_err(
                    origin,
                    "the byte-level GGUF vocabulary has no tokenizer.ggml.merges",
                )
            })?;
            byte_level(&tokens, &merges, origin)?
        }
        Builder::SentencePiece | Builder::Phi3 | Builder::Gemma => {
            let scores = metadata.numbers(
                "tokenizer.ggml.scores",
                origin,
                "an array of numbers",
                Value::as_f64,
            )?;
            sentencepiece(
                builder,
                &tokens,
                scores.as_deref(),
                merges.as_deref(),
                origin,
            )?
        }
    };
    let base_size = tokens.len();
    let class_defaults: &[&str] = match builder {
        Builder::ByteLevel => &["<|endoftext|>"],
        Builder::SentencePiece | Builder::Phi3 => &["<s>", "</s>", "<unk>"],
        Builder::Gemma => &["<bos>", "<eos>", "<unk>", "<pad>", "<mask>"],
    };
    add_named(&mut tokenizer, class_defaults.iter().copied(), origin)?;
    if builder == Builder::Phi3 {
        let normalizer = component!(
            NormalizerWrapper,
            json!({"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u{2581}"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}
            ]}),
            origin,
        )?;
        tokenizer
            .with_normalizer(Some(normalizer))
            .map_err(tk_err(origin))?;
        tokenizer.with_pre_tokenizer(None::<PreTokenizerWrapper>);
    }

    // 2. CONTROL tokens as special added tokens, USER_DEFINED ones as plain added tokens.
    let alphabet = crate::text::bytes_to_unicode();
    let mut control = Vec::new();
    for (&t, &ty) in tokens.iter().zip(&token_types) {
        let spelled = builder != Builder::ByteLevel || t.chars().all(|c| alphabet.contains(&c));
        if ty == CONTROL && spelled {
            control.push(AddedToken::from(t, true).normalized(false));
        }
    }
    if !control.is_empty() {
        tokenizer
            .add_special_tokens(control)
            .map_err(tk_err(origin))?;
    }
    let vocab = tokenizer.get_vocab(true);
    let mut user_defined = Vec::new();
    for (&t, &ty) in tokens.iter().zip(&token_types) {
        if ty == USER_DEFINED && vocab.contains_key(t) {
            user_defined.push(AddedToken::from(t, false).normalized(false));
        }
    }
    if !user_defined.is_empty() {
        tokenizer.add_tokens(user_defined).map_err(tk_err(origin))?;
    }

    // 3. The split regex of a known `tokenizer.ggml.pre`.
    if let Some(split) = split {
        let pre_tokenizer = component!(
            PreTokenizerWrapper,
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
            ]}),
            origin,
        )?;
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    }

    // 4. The outer class: the file's named special tokens and the BOS/EOS post-processor.
    let token_of = |key: &str| -> Result<Option<String>> {
        match metadata.token_id(key, origin)? {
            None => Ok(None),
            Some(id) => tokens
                .get(id as usize)
                .map(|t| Some(t.to_string()))
                .ok_or_else(|| {
                    load_err(
                        origin,
                        format!(
                            "{key} is {id}, past the {} tokens of the vocabulary",
                            tokens.len()
                        ),
                    )
                }),
        }
    };
    let named = NamedTokens {
        bos: token_of("tokenizer.ggml.bos_token_id")?,
        eos: token_of("tokenizer.ggml.eos_token_id")?,
        unk: token_of("tokenizer.ggml.unknown_token_id")?,
        pad: token_of("tokenizer.ggml.padding_token_id")?,
        mask: (outer == OuterClass::Gemma).then(|| "<mask>".to_string()),
    };
    let names: Vec<&str> = named.in_order().into_iter().map(|(_, t)| t).collect();
    add_named(&mut tokenizer, names.iter().copied(), origin)?;
    if outer == OuterClass::Qwen2 {
        let mut unique: Vec<&str> = Vec::new();
        for t in &names {
            if !unique.contains(t) {
                unique.push(t);
            }
        }
        tokenizer
            .add_tokens(unique.into_iter().map(|t| AddedToken::from(t, true)))
            .map_err(tk_err(origin))?;
    }
    let add_bos = metadata
        .bool("tokenizer.ggml.add_bos_token", origin)?
        // transformers: llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise.
        .unwrap_or(model == "llama");
    let add_eos = metadata
        .bool("tokenizer.ggml.add_eos_token", origin)?
        .unwrap_or(false);
    let bos = named.bos.as_deref().filter(|_| add_bos);
    let eos = named.eos.as_deref().filter(|_| add_eos);
    let post_processor = template_processing(&tokenizer, bos, eos, origin)?;
    tokenizer.with_post_processor(Some(post_processor));

    let mut appended: Vec<(u32, String)> = tokenizer
        .get_added_tokens_decoder()
        .into_iter()
        .filter(|(id, _)| *id as usize >= base_size)
        .map(|(id, t)| (id, t.content))
        .collect();
    appended.sort();
    let mut note = format!(
        "tokenizer rebuilt from the GGUF metadata (tokenizer.ggml.model {model:?}, pre {}, architecture {architecture:?}) \
         as transformers' GGUF loader builds it",
        pre.map_or("(none)".to_string(), |p| format!("{p:?}"))
    );
    if !appended.is_empty() {
        let list: Vec<String> = appended
            .iter()
            .map(|(id, t)| format!("{t} = {id}"))
            .collect();
        note.push_str(&format!(
            "; like transformers it appends {} past the file's {base_size} tokens (a default special token of the \
             tokenizer class that the file lacks)",
            list.join(", ")
        ));
    }
    Ok(Built {
        tokenizer,
        named,
        note,
    })
}

/// Add the named special tokens `names` that are not added tokens yet, as transformers'
/// `TokenizersBackend.__init__` does (`AddedToken(token, special=True)`, first occurrence only).
fn add_named<'a>(
    tokenizer: &mut Tokenizer,
    names: impl Iterator<Item = &'a str>,
    origin: &str,
) -> Result<()> {
    let added: Vec<String> = tokenizer
        .get_added_tokens_decoder()
        .into_values()
        .map(|t| t.content)
        .collect();
    let mut to_add: Vec<&str> = Vec::new();
    for name in names {
        if !added.iter().any(|a| a == name) && !to_add.contains(&name) {
            to_add.push(name);
        }
    }
    if !to_add.is_empty() {
        tokenizer
            .add_tokens(to_add.into_iter().map(|t| AddedToken::from(t, true)))
            .map_err(tk_err(origin))?;
    }
    Ok(())
}

/// transformers' `update_post_processor`: `[bos] $A [eos]`, and for pairs `[bos] $A [eos] [bos] $B [eos]`.
fn template_processing(
    tokenizer: &Tokenizer,
    bos: Option<&str>,
    eos: Option<&str>,
    origin: &str,
) -> Result<PostProcessorWrapper> {
    let special = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let sequence = |s: &str, type_id: u32| json!({"Sequence": {"id": s, "type_id": type_id}});
    let mut single = Vec::new();
    let mut pair = Vec::new();
    for (seq, type_id) in [("A", 0), ("B", 1)] {
        if let Some(b) = bos {
            pair.push(special(b, type_id));
        }
        pair.push(sequence(seq, type_id));
        if let Some(e) = eos {
            pair.push(special(e, type_id));
        }
    }
    if let Some(b) = bos {
        single.push(special(b, 0));
    }
    single.push(sequence("A", 0));
    if let Some(e) = eos {
        single.push(special(e, 0));
    }
    let mut special_tokens = serde_json::Map::new();
    for t in bos.into_iter().chain(eos) {
        let id = tokenizer.token_to_id(t).ok_or_else(|| {
            load_err(
                origin,
                format!("the special token {t:?} is not in the vocabulary"),
            )
        })?;
        special_tokens.insert(t.to_string(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }
    component!(
        PostProcessorWrapper,
        json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special_tokens}),
        origin,
    )
}

/// `byte_level_tokenizer`: `GPT2Tokenizer(vocab, merges)` over the byte-level vocabulary.
fn byte_level(tokens: &[&str], merges: &[&str], origin: &str) -> Result<Tokenizer> {
    let table = crate::text::bytes_to_unicode();
    let mut vocab = Vocab::default();
    for (i, t) in tokens.iter().enumerate() {
        let key = if t.chars().all(|c| table.contains(&c)) {
            t.to_string()
        } else {
            t.bytes().map(|b| table[b as usize]).collect()
        };
        vocab.insert(key, i as u32);
    }
    let merges = split_merges(merges, origin)?;
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(String::new())
        .fuse_unk(false)
        .build()
        .map_err(|e| load_err(origin, format!("cannot build the BPE model: {e}")))?;
    let mut tokenizer = Tokenizer::new(model);
    let pre = component!(
        PreTokenizerWrapper,
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
        origin,
    )?;
    let decoder = component!(
        DecoderWrapper,
        json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
        origin,
    )?;
    tokenizer.with_pre_tokenizer(Some(pre));
    tokenizer.with_decoder(Some(decoder));
    Ok(tokenizer)
}

/// Merges as the file spells them (`"a b"`), split as transformers does (`merge.split(" ")`).
fn split_merges(merges: &[&str], origin: &str) -> Result<Vec<(String, String)>> {
    merges
        .iter()
        .map(|m| {
            let mut parts = m.split(' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(a), Some(b), None) => Ok((a.to_string(), b.to_string())),
                _ => Err(load_err(
                    origin,
                    format!(
                        "tokenizer.ggml.merges holds {m:?}, not two tokens separated by one space"
                    ),
                )),
            }
        })
        .collect()
}

/// The SentencePiece builders: `LlamaTokenizer` (also for Phi-3) and `GemmaTokenizer`.
fn sentencepiece(
    builder: Builder,
    tokens: &[&str],
    scores: Option<&[f64]>,
    merges: Option<&[&str]>,
    origin: &str,
) -> Result<Tokenizer> {
    let gemma = builder == Builder::Gemma;
    // Gemma files store tokens of two or more spaces as spaces; GemmaTokenizer spells them with "▁".
    let spelled: Vec<String> = tokens
        .iter()
        .map(|t| {
            if gemma && t.contains(' ') && pystr::strip(t).is_empty() {
                "\u{2581}".repeat(t.chars().count())
            } else {
                t.to_string()
            }
        })
        .collect();
    let mut vocab = Vocab::default();
    for (i, t) in spelled.iter().enumerate() {
        vocab.insert(t.clone(), i as u32);
    }
    let merges = match merges {
        Some(m) => split_merges(m, origin)?,
        None => {
            let keyed: Vec<(&str, f64)> = if gemma {
                // Gemma's merges follow the order of the tokens in the file, not their scores.
                spelled
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (t.as_str(), -(i as f64)))
                    .collect()
            } else {
                let scores = scores.ok_or_else(|| {
                    load_err(
                        origin,
                        "the SentencePiece GGUF vocabulary has neither tokenizer.ggml.merges nor tokenizer.ggml.scores",
                    )
                })?;
                spelled
                    .iter()
                    .map(String::as_str)
                    .zip(scores.iter().copied())
                    .collect()
            };
            generate_merges(&vocab, &keyed)
        }
    };
    let mut bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .fuse_unk(true)
        .byte_fallback(true);
    if gemma {
        bpe = bpe.unk_token("<unk>".to_string());
    }
    let model = bpe
        .build()
        .map_err(|e| load_err(origin, format!("cannot build the BPE model: {e}")))?;
    let mut tokenizer = Tokenizer::new(model);
    if gemma {
        let normalizer = component!(
            NormalizerWrapper,
            json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}),
            origin,
        )?;
        tokenizer
            .with_normalizer(Some(normalizer))
            .map_err(tk_err(origin))?;
        tokenizer.with_pre_tokenizer(Some(component!(PreTokenizerWrapper,
            json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}),
            origin,
        )?));
        tokenizer.with_decoder(Some(component!(
            DecoderWrapper,
            json!({"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"}
            ]}),
            origin,
        )?));
    } else {
        tokenizer.with_pre_tokenizer(Some(component!(PreTokenizerWrapper,
            json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false}),
            origin,
        )?));
        tokenizer.with_decoder(Some(component!(
            DecoderWrapper,
            json!({"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}
            ]}),
            origin,
        )?));
    }
    Ok(tokenizer)
}

/// transformers' `generate_merges(vocab, vocab_scores)`: every split of every scored piece into
/// two vocabulary pieces, best score first (ties: longer left piece, then longer right piece,
/// then the order found), the splits of one piece ordered by the ids of their halves.
///
/// `scored` holds `(piece, score)` in token order; a repeated piece keeps its first position and
/// its last score, as a Python `dict` built from the pairs does.
fn generate_merges(vocab: &Vocab, scored: &[(&str, f64)]) -> Vec<(String, String)> {
    let mut position: HashMap<&str, usize> = HashMap::with_capacity(scored.len());
    let mut unique: Vec<(&str, f64)> = Vec::with_capacity(scored.len());
    for &(piece, score) in scored {
        match position.get(piece) {
            Some(&i) => unique[i].1 = score,
            None => {
                position.insert(piece, unique.len());
                unique.push((piece, score));
            }
        }
    }
    struct Merge<'a> {
        left: &'a str,
        right: &'a str,
        score: f64,
        left_chars: usize,
        right_chars: usize,
    }
    let mut merges: Vec<Merge<'_>> = Vec::new();
    for &(piece, score) in &unique {
        let mut local: Vec<(u32, u32, &str, &str)> = piece
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (left, right) = piece.split_at(at);
                Some((*vocab.get(left)?, *vocab.get(right)?, left, right))
            })
            .collect();
        local.sort_by_key(|&(l, r, _, _)| (l, r));
        merges.extend(local.into_iter().map(|(_, _, left, right)| Merge {
            left,
            right,
            score,
            left_chars: left.chars().count(),
            right_chars: right.chars().count(),
        }));
    }
    // Python's sorted(..., reverse=True) is stable: equal keys keep their order.
    merges.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.left_chars.cmp(&a.left_chars))
            .then(b.right_chars.cmp(&a.right_chars))
    });
    merges
        .into_iter()
        .map(|m| (m.left.to_string(), m.right.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small GGUF writer for the tests.
    #[derive(Default)]
    struct Writer {
        entries: Vec<(String, u32, Vec<u8>)>,
    }

    fn gguf_string(s: &str) -> Vec<u8> {
        let mut out = (s.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(s.as_bytes());
        out
    }

    impl Writer {
        fn raw(mut self, key: &str, value_type: u32, bytes: Vec<u8>) -> Self {
            self.entries.push((key.to_string(), value_type, bytes));
            self
        }
        fn string(self, key: &str, value: &str) -> Self {
            self.raw(key, 8, gguf_string(value))
        }
        fn u32(self, key: &str, value: u32) -> Self {
            self.raw(key, 4, value.to_le_bytes().to_vec())
        }
        fn bool(self, key: &str, value: bool) -> Self {
            self.raw(key, 7, vec![value as u8])
        }
        fn strings(self, key: &str, values: &[&str]) -> Self {
            let mut bytes = 8u32.to_le_bytes().to_vec();
            bytes.extend_from_slice(&(values.len() as u64).to_le_bytes());
            for v in values {
                bytes.extend(gguf_string(v));
            }
            self.raw(key, 9, bytes)
        }
        fn i32s(self, key: &str, values: &[i32]) -> Self {
            let mut bytes = 5u32.to_le_bytes().to_vec();
            bytes.extend_from_slice(&(values.len() as u64).to_le_bytes());
            for v in values {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            self.raw(key, 9, bytes)
        }
        fn f32s(self, key: &str, values: &[f32]) -> Self {
            let mut bytes = 6u32.to_le_bytes().to_vec();
            bytes.extend_from_slice(&(values.len() as u64).to_le_bytes());
            for v in values {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            self.raw(key, 9, bytes)
        }
        fn bytes(&self, version: u32) -> Vec<u8> {
            let mut out = b"GGUF".to_vec();
            out.extend_from_slice(&version.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
            out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
            for (key, value_type, bytes) in &self.entries {
                out.extend(gguf_string(key));
                out.extend_from_slice(&value_type.to_le_bytes());
                out.extend_from_slice(bytes);
            }
            out
        }
    }

    fn parse(bytes: &[u8]) -> Result<Metadata> {
        parse_metadata(bytes, bytes.len() as u64, "test.gguf")
    }

    fn every_type() -> Writer {
        let mut nested = 9u32.to_le_bytes().to_vec(); // array of arrays
        nested.extend_from_slice(&2u64.to_le_bytes());
        for row in [[1u16, 2], [3, 4]] {
            nested.extend_from_slice(&2u32.to_le_bytes());
            nested.extend_from_slice(&2u64.to_le_bytes());
            for v in row {
                nested.extend_from_slice(&v.to_le_bytes());
            }
        }
        Writer::default()
            .raw("u8", 0, vec![200])
            .raw("i8", 1, vec![0xFF])
            .raw("u16", 2, 60000u16.to_le_bytes().to_vec())
            .raw("i16", 3, (-300i16).to_le_bytes().to_vec())
            .u32("u32", 4_000_000_000)
            .raw("i32", 5, (-5i32).to_le_bytes().to_vec())
            .raw("f32", 6, 1.5f32.to_le_bytes().to_vec())
            .bool("bool", true)
            .string("string", "héllo ▁")
            .raw("u64", 10, u64::MAX.to_le_bytes().to_vec())
            .raw("i64", 11, i64::MIN.to_le_bytes().to_vec())
            .raw("f64", 12, (-0.25f64).to_le_bytes().to_vec())
            .strings("strings", &["a", "", "ü"])
            .raw("nested", 9, nested)
    }

    #[test]
    fn parses_every_value_type() {
        for version in [2, 3] {
            let m = parse(&every_type().bytes(version)).unwrap();
            assert_eq!(m.version, version);
            assert_eq!(m.entries.len(), 14);
            assert_eq!(m.get("u8"), Some(&Value::U8(200)));
            assert_eq!(m.get("i8"), Some(&Value::I8(-1)));
            assert_eq!(m.get("u16"), Some(&Value::U16(60000)));
            assert_eq!(m.get("i16"), Some(&Value::I16(-300)));
            assert_eq!(m.get("u32"), Some(&Value::U32(4_000_000_000)));
            assert_eq!(m.get("i32"), Some(&Value::I32(-5)));
            assert_eq!(m.get("f32"), Some(&Value::F32(1.5)));
            assert_eq!(m.get("bool"), Some(&Value::Bool(true)));
            assert_eq!(m.get("string"), Some(&Value::String("héllo ▁".into())));
            assert_eq!(m.get("u64"), Some(&Value::U64(u64::MAX)));
            assert_eq!(m.get("i64"), Some(&Value::I64(i64::MIN)));
            assert_eq!(m.get("f64"), Some(&Value::F64(-0.25)));
            assert_eq!(
                m.strings("strings", "t").unwrap().unwrap(),
                vec!["a", "", "ü"]
            );
            let row = |a, b| Value::Array(vec![Value::U16(a), Value::U16(b)]);
            assert_eq!(
                m.get("nested"),
                Some(&Value::Array(vec![row(1, 2), row(3, 4)]))
            );
        }
    }

    #[test]
    fn every_truncation_is_a_clean_error() {
        let bytes = every_type().bytes(3);
        for cut in 0..bytes.len() {
            let err = parse(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(&err, Error::Load(m) if m.contains("truncated") || m.contains("corrupt")),
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn rejects_other_magic_versions_and_endianness() {
        let mut bytes = every_type().bytes(3);
        let err = parse(b"GGML\x03\0\0\0").unwrap_err().to_string();
        assert!(err.contains("not a GGUF file"), "{err}");
        bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
        let err = parse(&bytes).unwrap_err().to_string();
        assert!(err.contains("big-endian"), "{err}");
        bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
        let err = parse(&bytes).unwrap_err().to_string();
        assert!(err.contains("v1"), "{err}");
        bytes[4..8].copy_from_slice(&7u32.to_le_bytes());
        let err = parse(&bytes).unwrap_err().to_string();
        assert!(err.contains("unknown GGUF version 7"), "{err}");
    }

    #[test]
    fn absurd_lengths_error_before_allocating() {
        let huge = u64::MAX / 2;
        // A metadata count no file could hold.
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&huge.to_le_bytes());
        assert!(parse(&bytes)
            .unwrap_err()
            .to_string()
            .contains("cannot fit"));
        // A string length, an array count, a count whose byte size overflows.
        let string = Writer::default().raw("k", 8, huge.to_le_bytes().to_vec());
        let mut array = 4u32.to_le_bytes().to_vec();
        array.extend_from_slice(&huge.to_le_bytes());
        let array = Writer::default().raw("k", 9, array);
        let mut overflow = 9u32.to_le_bytes().to_vec();
        overflow.extend_from_slice(&(u64::MAX / 3).to_le_bytes());
        let overflow = Writer::default().raw("k", 9, overflow);
        let mut key = b"GGUF".to_vec();
        key.extend_from_slice(&3u32.to_le_bytes());
        key.extend_from_slice(&0u64.to_le_bytes());
        key.extend_from_slice(&1u64.to_le_bytes());
        key.extend_from_slice(&huge.to_le_bytes());
        key.extend_from_slice(&[0; 16]);
        for bytes in [string.bytes(3), array.bytes(3), overflow.bytes(3), key] {
            let err = parse(&bytes).unwrap_err().to_string();
            assert!(err.contains("cannot fit"), "{err}");
        }
        // Unknown value types, arrays nested past the limit, invalid UTF-8.
        let err = parse(&Writer::default().raw("k", 13, vec![0; 8]).bytes(3)).unwrap_err();
        assert!(err.to_string().contains("unknown value type 13"), "{err}");
        let mut deep = Vec::new();
        for _ in 0..=MAX_ARRAY_DEPTH {
            deep.extend_from_slice(&9u32.to_le_bytes());
            deep.extend_from_slice(&1u64.to_le_bytes());
        }
        deep.extend_from_slice(&0u32.to_le_bytes());
        deep.extend_from_slice(&0u64.to_le_bytes());
        let err = parse(&Writer::default().raw("k", 9, deep).bytes(3)).unwrap_err();
        assert!(err.to_string().contains("nests arrays"), "{err}");
        let bad = Writer::default().raw(
            "k",
            8,
            [2u64.to_le_bytes().to_vec(), vec![0xC3, 0x28]].concat(),
        );
        let err = parse(&bad.bytes(3)).unwrap_err();
        assert!(err.to_string().contains("UTF-8"), "{err}");
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("chatids-gguf-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A tiny SentencePiece-style vocabulary: <unk> <s> </s>, bytes, pieces.
    fn spm_writer() -> Writer {
        let mut tokens = vec!["<unk>", "<s>", "</s>"];
        let bytes: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        tokens.extend(bytes.iter().map(String::as_str));
        tokens.extend(["▁", "h", "i", "▁h", "▁hi", "<tool>"]);
        let mut types = vec![2, 3, 3];
        types.extend(std::iter::repeat_n(6, 256));
        types.extend([1, 1, 1, 1, 1, 4]);
        let mut scores = vec![0.0f32; 259];
        scores.extend([-1.0, -2.0, -3.0, -4.0, -5.0, -1000.0]);
        Writer::default()
            .string("general.architecture", "llama")
            .string("tokenizer.ggml.model", "llama")
            .string("tokenizer.ggml.pre", "default")
            .strings("tokenizer.ggml.tokens", &tokens)
            .f32s("tokenizer.ggml.scores", &scores)
            .i32s("tokenizer.ggml.token_type", &types)
            .u32("tokenizer.ggml.bos_token_id", 1)
            .u32("tokenizer.ggml.eos_token_id", 2)
            .u32("tokenizer.ggml.unknown_token_id", 0)
    }

    #[test]
    fn loads_a_sentencepiece_vocabulary() {
        let dir = temp_dir("spm");
        let w = spm_writer().string("tokenizer.chat_template", "{{ bos_token }}");
        let path = write(&dir, "m.gguf", &w.bytes(3));
        let c = load(&path).unwrap();
        assert_eq!(c.dir, dir);
        assert_eq!(c.chat_template, "{{ bos_token }}");
        assert_eq!(c.special_tokens.bos.as_deref(), Some("<s>"));
        assert_eq!(c.special_tokens.unk.as_deref(), Some("<unk>"));
        assert_eq!(c.generation_eos_ids, vec![2]);
        let ids = c
            .tokenizer
            .get()
            .unwrap()
            .encode("hi<tool>h\n", true)
            .unwrap();
        // BOS (added by default for SentencePiece), ▁hi, <tool>, h, and the newline's byte.
        assert_eq!(ids.get_ids(), &[1, 263, 264, 260, 13]);
        let tool = c.added_token("<tool>").unwrap();
        assert!(!tool.special);
        assert!(c.added_token("<s>").unwrap().special);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn refuses_what_it_cannot_rebuild() {
        let dir = temp_dir("refuse");
        let no_template = write(&dir, "a.gguf", &spm_writer().bytes(3));
        let err = load(&no_template).unwrap_err().to_string();
        assert!(err.contains("the GGUF file has no chat template"), "{err}");
        let t5 = spm_writer()
            .string("tokenizer.ggml.model", "t5")
            .string("tokenizer.chat_template", "x");
        let err = load(&write(&dir, "b.gguf", &t5.bytes(3)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tokenizer.ggml.model \"t5\" is not supported"),
            "{err}"
        );
        let arch = spm_writer()
            .string("general.architecture", "rwkv6")
            .string("tokenizer.chat_template", "x");
        let err = load(&write(&dir, "c.gguf", &arch.bytes(3)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("architecture \"rwkv6\" is not supported"),
            "{err}"
        );
        let gpt2 = Writer::default()
            .string("general.architecture", "llama")
            .string("tokenizer.ggml.model", "gpt2")
            .string("tokenizer.ggml.pre", "deepseek-llm")
            .strings("tokenizer.ggml.tokens", &["a", "b", "ab"])
            .strings("tokenizer.ggml.merges", &["a b"])
            .string("tokenizer.chat_template", "x");
        let err = load(&write(&dir, "d.gguf", &gpt2.bytes(3)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tokenizer.ggml.pre \"deepseek-llm\" is not supported"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn byte_level_vocabulary_gets_the_class_default_token() {
        let dir = temp_dir("bpe");
        let w = Writer::default()
            .string("general.architecture", "llama")
            .string("tokenizer.ggml.model", "gpt2")
            .string("tokenizer.ggml.pre", "llama-bpe")
            .strings(
                "tokenizer.ggml.tokens",
                &["a", "b", "ab", "Ġ", "<|eot|>", " x"],
            )
            .i32s("tokenizer.ggml.token_type", &[1, 1, 1, 1, 3, 3])
            .strings("tokenizer.ggml.merges", &["a b"])
            .u32("tokenizer.ggml.eos_token_id", 4)
            .string("tokenizer.chat_template", "x");
        let c = load(&write(&dir, "e.gguf", &w.bytes(2))).unwrap();
        let ids = c
            .tokenizer
            .get()
            .unwrap()
            .encode("ab<|eot|> x", false)
            .unwrap();
        // " x" is a control token spelled outside the byte alphabet: skipped, as transformers does.
        assert_eq!(ids.get_ids()[..2], [2, 4]);
        assert_eq!(c.tokenizer.token_to_id("<|endoftext|>"), Some(6));
        assert!(c.compat_note.unwrap().contains("<|endoftext|> = 6"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn merges_follow_scores_then_lengths() {
        let mut vocab = Vocab::default();
        for (i, t) in ["a", "b", "c", "ab", "bc", "abc"].iter().enumerate() {
            vocab.insert(t.to_string(), i as u32);
        }
        let scored = [
            ("a", 0.0),
            ("ab", -1.0),
            ("bc", -1.0),
            ("abc", -0.5),
            ("ab", -2.0),
        ];
        let merges = generate_merges(&vocab, &scored);
        let pairs: Vec<(&str, &str)> = merges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        // abc (-0.5): "a"+"bc" and "ab"+"c" (ids 0,4 then 3,2; ties broken by left length: ab+c first);
        // then bc (-1.0); then ab with its last score (-2.0).
        assert_eq!(pairs, [("ab", "c"), ("a", "bc"), ("b", "c"), ("a", "b")]);
    }
}
