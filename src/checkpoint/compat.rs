//! Make a `tokenizer.json` encode the way transformers loads it.
//!
//! transformers 5 does not always honour `tokenizer.json`: for some `tokenizer_class` values
//! it keeps only the vocabulary and merges and rebuilds the normalizer, pre-tokenizer and
//! model options from the class code and the config flags (`legacy`, `add_prefix_space`).
//! chatids promises the ids of `apply_chat_template`, so it applies the same rebuilds, as
//! edits of the parsed JSON before the tokenizer is built. Each rule names the class it
//! mirrors; `tests/test_checkpoint.py` compares the result with transformers' backend for
//! every shared checkpoint.

use serde_json::{json, Value};

/// transformers' `Qwen2Tokenizer` pre-tokenizer regex (it ignores the one in tokenizer.json).
const QWEN2_PRETOKENIZE_REGEX: &str = crate::text::native::split::QWEN2;

/// Rewrite `tokenizer` (the parsed tokenizer.json) as transformers' class for `config` (the
/// parsed tokenizer_config.json) would rebuild it. `raw_json` is the file's text (transformers
/// decides one rule by a substring test on it). Returns a note on what was changed, if anything.
pub fn apply_transformers_class(
    tokenizer: &mut Value,
    config: &Value,
    raw_json: &str,
) -> Option<String> {
    let class = config.get("tokenizer_class").and_then(Value::as_str)?;
    let class = class.strip_suffix("Fast").unwrap_or(class);
    match class {
        "LlamaTokenizer" => {
            // AutoTokenizer loads `TokenizersBackend` (tokenizer.json as is) when a
            // LlamaTokenizer checkpoint ships a byte-level tokenizer.json.
            if raw_json.contains("\"ByteLevel\"") {
                return None;
            }
            let add_prefix_space = config
                .get("add_prefix_space")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let legacy = config
                .get("legacy")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let scheme = match (add_prefix_space, legacy) {
                (false, _) => "never",
                (true, true) => "always",
                (true, false) => "first",
            };
            tokenizer["normalizer"] = Value::Null;
            tokenizer["pre_tokenizer"] = json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": scheme, "split": false});
            set_bpe_options(
                tokenizer,
                json!({"dropout": null, "unk_token": null, "fuse_unk": true, "byte_fallback": true}),
            );
            Some(format!(
                "LlamaTokenizer: normalizer removed, pre-tokenizer Metaspace(prepend_scheme=\"{scheme}\", split=False) \
                 (legacy={legacy}, add_prefix_space={add_prefix_space}), as transformers rebuilds it"
            ))
        }
        "Qwen2Tokenizer" => {
            let add_prefix_space = config
                .get("add_prefix_space")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            tokenizer["normalizer"] = json!({"type": "NFC"});
            tokenizer["pre_tokenizer"] = json!({
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": QWEN2_PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": false},
                    {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": true, "use_regex": false}
                ]
            });
            set_bpe_options(
                tokenizer,
                json!({"dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                       "fuse_unk": false, "byte_fallback": false, "ignore_merges": false}),
            );
            Some("Qwen2Tokenizer: NFC normalizer and the class's own Split+ByteLevel pre-tokenizer, as transformers rebuilds it".into())
        }
        "GemmaTokenizer" => {
            let unk = config
                .get("unk_token")
                .and_then(Value::as_str)
                .unwrap_or("<unk>");
            tokenizer["normalizer"] =
                json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"});
            tokenizer["pre_tokenizer"] = json!({
                "type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false
            });
            set_bpe_options(
                tokenizer,
                json!({"dropout": null, "unk_token": unk, "fuse_unk": true, "byte_fallback": true}),
            );
            Some("GemmaTokenizer: Replace(' ', '▁') normalizer and Split(' ') pre-tokenizer, as transformers rebuilds it".into())
        }
        _ => None,
    }
}

/// The special tokens a transformers tokenizer class names by default (`bos_token="<s>"`,
/// ...), used when the config does not set that name. transformers marks them special.
pub fn class_default_special_tokens(config: &Value) -> &'static [(&'static str, &'static str)] {
    let class = config
        .get("tokenizer_class")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match class.strip_suffix("Fast").unwrap_or(class) {
        "LlamaTokenizer" => &[
            ("unk_token", "<unk>"),
            ("bos_token", "<s>"),
            ("eos_token", "</s>"),
        ],
        "GemmaTokenizer" => &[
            ("unk_token", "<unk>"),
            ("bos_token", "<bos>"),
            ("eos_token", "<eos>"),
            ("pad_token", "<pad>"),
            ("mask_token", "<mask>"),
        ],
        "Qwen2Tokenizer" => &[
            ("unk_token", "<|endoftext|>"),
            ("eos_token", "<|endoftext|>"),
            ("pad_token", "<|endoftext|>"),
        ],
        _ => &[],
    }
}

fn set_bpe_options(tokenizer: &mut Value, options: Value) {
    if let (Some(model), Some(options)) = (
        tokenizer.get_mut("model").and_then(Value::as_object_mut),
        options.as_object(),
    ) {
        for (k, v) in options {
            model.insert(k.clone(), v.clone());
        }
    }
}

/// Apply the tokenizer_config's `added_tokens_decoder` flags and the named special tokens to
/// tokenizer.json's `added_tokens`, as transformers does when it loads the tokenizer.
pub fn apply_added_token_flags(tokenizer: &mut Value, config: &Value, named_special: &[String]) {
    let decoder = config
        .get("added_tokens_decoder")
        .and_then(Value::as_object);
    let Some(added) = tokenizer
        .get_mut("added_tokens")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for token in added.iter_mut() {
        let id = token
            .get("id")
            .and_then(Value::as_u64)
            .map(|i| i.to_string());
        if let (Some(decoder), Some(id)) = (decoder, id) {
            if let Some(entry) = decoder.get(&id).and_then(Value::as_object) {
                if entry.get("content") == token.get("content") {
                    for key in ["special", "lstrip", "rstrip", "normalized", "single_word"] {
                        if let Some(v) = entry.get(key) {
                            token[key] = v.clone();
                        }
                    }
                }
            }
        }
        let content = token
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if named_special.iter().any(|s| s == content) {
            token["special"] = Value::Bool(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_legacy_gets_always_prefix_and_loses_normalizer() {
        let mut t = json!({"normalizer": {"type": "Prepend"}, "pre_tokenizer": null, "model": {"type": "BPE", "unk_token": "<unk>"}});
        let note = apply_transformers_class(
            &mut t,
            &json!({"tokenizer_class": "LlamaTokenizer", "legacy": true}),
            "{}",
        );
        assert!(note.is_some());
        assert_eq!(t["normalizer"], Value::Null);
        assert_eq!(t["pre_tokenizer"]["prepend_scheme"], "always");
        assert_eq!(t["model"]["unk_token"], Value::Null);
    }

    #[test]
    fn llama_non_legacy_gets_first_prefix() {
        let mut t = json!({"model": {"type": "BPE"}});
        apply_transformers_class(
            &mut t,
            &json!({"tokenizer_class": "LlamaTokenizerFast", "legacy": false}),
            "{}",
        );
        assert_eq!(t["pre_tokenizer"]["prepend_scheme"], "first");
    }

    #[test]
    fn byte_level_llama_class_is_left_alone() {
        let mut t = json!({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE"}});
        let before = t.clone();
        let raw = t.to_string();
        assert!(apply_transformers_class(
            &mut t,
            &json!({"tokenizer_class": "LlamaTokenizerFast"}),
            &raw
        )
        .is_none());
        assert_eq!(t, before);
    }

    #[test]
    fn config_decoder_and_named_specials_set_flags() {
        let mut t = json!({"added_tokens": [
            {"id": 4, "content": "<mask>", "special": false, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false},
            {"id": 5, "content": "<x>", "special": false, "lstrip": false, "rstrip": false, "normalized": true, "single_word": false}
        ]});
        let config = json!({"added_tokens_decoder": {"5": {"content": "<x>", "special": true, "normalized": false}}});
        apply_added_token_flags(&mut t, &config, &["<mask>".to_string()]);
        assert_eq!(t["added_tokens"][0]["special"], true);
        assert_eq!(t["added_tokens"][1]["special"], true);
        assert_eq!(t["added_tokens"][1]["normalized"], false);
    }
}
