//! Loading a checkpoint directory: its tokenizer, special tokens and chat template.
//!
//! Reads `tokenizer.json` and `tokenizer_config.json` (plus `chat_template.jinja` and
//! `generation_config.json` when present). The tokenizer is adjusted to encode as
//! transformers loads it (see [`compat`]).

pub mod compat;
pub mod gguf;

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::Tokenizer;

use crate::control_tokens::AddedTokenInfo;
use crate::error::{Error, Result};

/// The special tokens named in `tokenizer_config.json`, which templates see as variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `bos_token`.
    pub bos: Option<String>,
    /// `eos_token`.
    pub eos: Option<String>,
    /// `unk_token`.
    pub unk: Option<String>,
    /// `pad_token`.
    pub pad: Option<String>,
}

/// A loaded checkpoint directory.
pub struct Checkpoint {
    /// The directory it was loaded from.
    pub dir: PathBuf,
    /// The tokenizer, as transformers would build it.
    pub tokenizer: crate::text::LazyTokenizer,
    /// Every added token with its effective flags.
    pub added_tokens: Vec<AddedTokenInfo>,
    /// The chat template in use: the default one (see [`Checkpoint::chat_templates`]), or the
    /// one chosen with [`Checkpoint::select_template`].
    pub chat_template: String,
    /// Every template the checkpoint ships, by name (`"default"`, `"tool_use"`, ...), in the
    /// order transformers reads them: `chat_template.jinja`, `chat_template.json`,
    /// `additional_chat_templates/*.jinja`, the config's `chat_template` (string or list).
    pub chat_templates: Vec<(String, String)>,
    /// Where the template in use comes from (file, config, named entry, or the caller).
    pub chat_template_source: String,
    /// The special-token variables templates see (`bos_token`, `eos_token`, ...), as
    /// transformers' `special_tokens_map`.
    pub special_tokens_map: Vec<(String, String)>,
    /// The special tokens the config names.
    pub special_tokens: SpecialTokens,
    /// The config's `tokenizer_class`.
    pub tokenizer_class: Option<String>,
    /// What chatids changed in tokenizer.json to match transformers, if anything.
    pub compat_note: Option<String>,
    /// End-of-generation ids from `generation_config.json` (`eos_token_id`), if present.
    pub generation_eos_ids: Vec<u32>,
    /// The BPE model as read from the tokenizer.json, for the native core (taken when the
    /// encoder is built; see [`crate::text::native::ModelJson`]).
    pub(crate) native_model: Option<crate::text::native::ModelJson>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.dir)
            .field("tokenizer_class", &self.tokenizer_class)
            .field("special_tokens", &self.special_tokens)
            .field("compat_note", &self.compat_note)
            .finish_non_exhaustive()
    }
}

impl Checkpoint {
    /// Load the checkpoint in directory `dir`.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::Load(format!("{} is not a directory", dir.display())));
        }
        let config = read_json(&dir.join("tokenizer_config.json"))?;
        let raw_tokenizer = read_text(&dir.join("tokenizer.json"))?;
        let mut tokenizer_json: Value = serde_json::from_str(&raw_tokenizer).map_err(|e| {
            Error::Load(format!(
                "{}: invalid JSON: {e}",
                dir.join("tokenizer.json").display()
            ))
        })?;

        let special_tokens = SpecialTokens {
            bos: token_string(config.get("bos_token")),
            eos: token_string(config.get("eos_token")),
            unk: token_string(config.get("unk_token")),
            pad: token_string(config.get("pad_token")),
        };
        let named_special = named_special_tokens(&config);
        let compat_note =
            compat::apply_transformers_class(&mut tokenizer_json, &config, &raw_tokenizer);
        compat::apply_added_token_flags(&mut tokenizer_json, &config, &named_special);
        let added_tokens = added_tokens(&tokenizer_json);
        let native_model = crate::text::native::ModelJson::from_tokenizer_json(&tokenizer_json);
        let tokenizer = Tokenizer::from_bytes(tokenizer_json.to_string().as_bytes())
            .map_err(|e| Error::Load(format!("{}: cannot build tokenizer: {e}", dir.display())))?;
        let tokenizer = crate::text::LazyTokenizer::built(tokenizer);

        let chat_templates = chat_templates(&dir, &config)?;
        let (chat_template_source, chat_template) = default_template(&dir, &chat_templates)?;
        let special_tokens_map = special_tokens_map(&config);
        let generation_eos_ids = generation_eos_ids(&dir)?;
        Ok(Checkpoint {
            dir,
            tokenizer,
            added_tokens,
            chat_template,
            chat_templates,
            chat_template_source,
            special_tokens_map,
            special_tokens,
            tokenizer_class: config
                .get("tokenizer_class")
                .and_then(Value::as_str)
                .map(str::to_string),
            compat_note,
            generation_eos_ids,
            native_model,
        })
    }

    /// Use another template: a name from [`Checkpoint::chat_templates`], or, if no template has
    /// that name and it contains Jinja syntax, the text itself (as transformers'
    /// `chat_template=` argument does).
    pub fn select_template(&mut self, name_or_text: &str) -> Result<()> {
        if let Some((name, text)) = self.chat_templates.iter().find(|(n, _)| n == name_or_text) {
            self.chat_template = text.clone();
            self.chat_template_source = format!("the checkpoint's template named {name:?}");
            return Ok(());
        }
        if name_or_text.contains("{{") || name_or_text.contains("{%") {
            self.chat_template = name_or_text.to_string();
            self.chat_template_source = "the template text passed as chat_template=".into();
            return Ok(());
        }
        let names: Vec<&str> = self
            .chat_templates
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        Err(Error::Load(format!(
            "{}: no chat template named {name_or_text:?} (the checkpoint has: {}); pass a name or the template text",
            self.dir.display(),
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        )))
    }

    /// The added token with text `content`, if any.
    pub fn added_token(&self, content: &str) -> Option<&AddedTokenInfo> {
        self.added_tokens.iter().find(|t| t.content == content)
    }
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::Load(format!("cannot read {}: {e}", path.display())))
}

fn read_json(path: &Path) -> Result<Value> {
    serde_json::from_str(&read_text(path)?)
        .map_err(|e| Error::Load(format!("{}: invalid JSON: {e}", path.display())))
}

/// A special token given as a string or as an `AddedToken` dict.
fn token_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// The special tokens the config names (`bos_token`, ...), with the tokenizer class's defaults
/// for the names the config leaves out, and the additional/extra special tokens.
fn named_special_tokens(config: &Value) -> Vec<String> {
    let defaults = compat::class_default_special_tokens(config);
    let mut out: Vec<String> = [
        "bos_token",
        "eos_token",
        "unk_token",
        "pad_token",
        "sep_token",
        "cls_token",
        "mask_token",
    ]
    .iter()
    .filter_map(|k| match config.get(*k) {
        Some(v) => token_string(Some(v)),
        None => defaults
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, t)| t.to_string()),
    })
    .collect();
    for key in ["additional_special_tokens", "extra_special_tokens"] {
        if let Some(list) = config.get(key).and_then(Value::as_array) {
            out.extend(list.iter().filter_map(|v| token_string(Some(v))));
        }
    }
    out
}

fn added_tokens(tokenizer_json: &Value) -> Vec<AddedTokenInfo> {
    let flag = |t: &Value, k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
    tokenizer_json
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|t| {
                    Some(AddedTokenInfo {
                        id: t.get("id")?.as_u64()? as u32,
                        content: t.get("content")?.as_str()?.to_string(),
                        special: flag(t, "special"),
                        lstrip: flag(t, "lstrip"),
                        rstrip: flag(t, "rstrip"),
                        single_word: flag(t, "single_word"),
                        normalized: flag(t, "normalized"),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every template the checkpoint ships, with its name, in transformers' order of precedence.
fn chat_templates(dir: &Path, config: &Value) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let add = |name: &str, text: String, out: &mut Vec<(String, String)>| {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), text));
        }
    };
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        add("default", read_text(&jinja)?, &mut out);
    }
    let json = dir.join("chat_template.json");
    if json.is_file() {
        if let Some(Value::String(s)) = read_json(&json)?.get("chat_template") {
            add("default", s.clone(), &mut out);
        }
    }
    let extra = dir.join("additional_chat_templates");
    if extra.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(&extra)
            .map_err(|e| Error::Load(format!("cannot list {}: {e}", extra.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
            .collect();
        files.sort();
        for file in files {
            let name = file
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            add(&name, read_text(&file)?, &mut out);
        }
    }
    match config.get("chat_template") {
        Some(Value::String(s)) => add("default", s.clone(), &mut out),
        Some(Value::Array(list)) => {
            for t in list {
                if let (Some(name), Some(text)) = (
                    t.get("name").and_then(Value::as_str),
                    t.get("template").and_then(Value::as_str),
                ) {
                    add(name, text.to_string(), &mut out);
                }
            }
        }
        _ => {}
    }
    Ok(out)
}

/// The template transformers uses when none is named: the one called `"default"`.
fn default_template(dir: &Path, templates: &[(String, String)]) -> Result<(String, String)> {
    match templates.iter().find(|(n, _)| n == "default") {
        Some((_, text)) => Ok(("the checkpoint's default template".to_string(), text.clone())),
        None if templates.is_empty() => Err(Error::Load(format!(
            "{}: the checkpoint has no chat template",
            dir.display()
        ))),
        None => Err(Error::Load(format!(
            "{}: the checkpoint's chat templates have no \"default\"; pick one with chat_template= ({})",
            dir.display(),
            templates.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// transformers' standard special-token names (`SPECIAL_TOKENS_ATTRIBUTES`).
pub const SPECIAL_TOKEN_NAMES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// transformers' `special_tokens_map`: the standard special-token names (config value, or the
/// tokenizer class's default when the config leaves the key out; `None` means unset), then the
/// config's `extra_special_tokens` dict and other string-valued `*_token` keys.
fn special_tokens_map(config: &Value) -> Vec<(String, String)> {
    let defaults = compat::class_default_special_tokens(config);
    let mut out: Vec<(String, String)> = Vec::new();
    for key in SPECIAL_TOKEN_NAMES {
        let value = match config.get(key) {
            Some(v) => token_string(Some(v)),
            None => defaults
                .iter()
                .find(|(n, _)| *n == key)
                .map(|(_, t)| t.to_string()),
        };
        if let Some(v) = value {
            out.push((key.to_string(), v));
        }
    }
    let push = |k: &str, v: &Value, out: &mut Vec<(String, String)>| {
        if let Some(s) = token_string(Some(v)) {
            if !out.iter().any(|(n, _)| n == k) {
                out.push((k.to_string(), s));
            }
        }
    };
    if let Some(extra) = config
        .get("extra_special_tokens")
        .and_then(Value::as_object)
    {
        for (k, v) in extra {
            push(k, v, &mut out);
        }
    }
    if let Some(all) = config.as_object() {
        for (k, v) in all {
            if k.ends_with("_token") && !SPECIAL_TOKEN_NAMES.contains(&k.as_str()) && v.is_string()
            {
                push(k, v, &mut out);
            }
        }
    }
    out
}

fn generation_eos_ids(dir: &Path) -> Result<Vec<u32>> {
    let path = dir.join("generation_config.json");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let config = read_json(&path)?;
    Ok(match config.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().map(|i| vec![i as u32]).unwrap_or_default(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|v| v.as_u64().map(|i| i as u32))
            .collect(),
        _ => Vec::new(),
    })
}
