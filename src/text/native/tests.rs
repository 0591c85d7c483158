//! The native core against the `tokenizers` crate on small tokenizers written here (so the
//! rules run without the shared checkpoints), and on the shared checkpoints when
//! `CHATIDS_MODELS_DIR` is set. The full differential suite is `tests/test_native_bpe.py`.

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::NativeBpe;
use crate::text::image::{Reader, Writer};
use crate::text::{HfTextEncoder, TextEncoder, TextOptions};

const ALL_OPTIONS: [TextOptions; 4] = [
    TextOptions {
        added_tokens: true,
        at_start: true,
    },
    TextOptions {
        added_tokens: true,
        at_start: false,
    },
    TextOptions {
        added_tokens: false,
        at_start: true,
    },
    TextOptions {
        added_tokens: false,
        at_start: false,
    },
];

/// Assert both encoders give the same ids and starts for every text and option set, and the
/// native core read back from its image (see [`crate::text::image`]) too.
fn same(tokenizer: Tokenizer, texts: &[&str]) {
    let native = NativeBpe::from_tokenizer(&tokenizer).expect("supported");
    let mut image = Writer::new();
    native.write_image(&mut image);
    let image = image.into_bytes();
    let mut reader = Reader::new(&image);
    let read = NativeBpe::read_image(&mut reader).expect("its own image reads back");
    assert!(reader.is_done());
    let mut again = Writer::new();
    read.write_image(&mut again);
    assert!(again.into_bytes() == image, "the image is a fixpoint");
    let hf = HfTextEncoder::new(tokenizer);
    for text in texts {
        for options in ALL_OPTIONS {
            let (mut a, mut b, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            native.encode_with_starts(text, options, &mut a, &mut sa);
            read.encode_with_starts(text, options, &mut b, &mut sb);
            assert_eq!((&a, &sa), (&b, &sb), "read back: {text:?} {options:?}");
        }
        for options in ALL_OPTIONS {
            let (mut a, mut b, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            native.encode_with_starts(text, options, &mut a, &mut sa);
            hf.encode_with_starts(text, options, &mut b, &mut sb)
                .unwrap();
            assert_eq!((&a, &sa), (&b, &sb), "{text:?} {options:?}");
            let mut c = Vec::new();
            native.encode(text, options, &mut c);
            assert_eq!(a, c, "{text:?} {options:?}");
        }
    }
}

/// A SentencePiece-style tokenizer: characters, a few merges, byte fallback for the rest.
fn sentencepiece_style(normalizer: Value, pre_tokenizer: Value, added: Value) -> Tokenizer {
    let mut vocab = serde_json::Map::new();
    let mut push = |t: &str| {
        let id = vocab.len();
        vocab.insert(t.to_string(), json!(id));
    };
    push("<unk>");
    for b in 0..=255u8 {
        push(&format!("<0x{b:02X}>"));
    }
    for t in [
        "▁", "a", "b", "c", "<", ">", "/", "▁a", "ab", "▁ab", "▁▁", ">▁", ">▁<", "bc", "<0x78>a",
        "<0x78>ab",
    ] {
        push(t);
    }
    // (The last two merge a byte-fallback token: tokens whose text is longer than the bytes
    // they stand for, listed before the merge that makes their half.)
    let merges = json!([
        ["<0x78>a", "b"],
        ["<0x78>", "a"],
        ["▁", "a"],
        ["a", "b"],
        ["▁a", "b"],
        ["▁", "▁"],
        [">", "▁"],
        [">▁", "<"],
        ["b", "c"]
    ]);
    let config = json!({
        "version": "1.0",
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    });
    Tokenizer::from_bytes(config.to_string().as_bytes()).unwrap()
}

fn added(content: &str, id: u32, flags: (bool, bool, bool, bool)) -> Value {
    let (single_word, lstrip, rstrip, normalized) = flags;
    json!({"id": id, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
           "normalized": normalized, "special": false})
}

const TEXTS: &[&str] = &[
    "ab abc  ab",
    " ab",
    "▁ab",
    "a<b>▁</b>c",
    "x>  <y",
    "dé😀 a",
    "",
    " ",
    "  ab <t> ab<t>ab <t>",
    "<t><t> <u>x <u> y<u>",
    "a b\u{3000}c\t",
    "xab xa xxab ab xab",
];

#[test]
fn metaspace_schemes_match_the_crate() {
    for scheme in ["first", "always", "never"] {
        let pre = json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": false});
        let tokens = json!([
            added("<t>", 400, (false, false, false, false)),
            added("<u>", 401, (true, true, true, false)),
        ]);
        same(sentencepiece_style(Value::Null, pre, tokens), TEXTS);
    }
}

#[test]
fn prepend_and_replace_normalizers_match_the_crate() {
    let normalizer = json!({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    ]});
    let tokens = json!([
        added("<t>", 400, (false, false, false, true)),
        added("<u>", 401, (false, true, false, false)),
    ]);
    same(sentencepiece_style(normalizer, Value::Null, tokens), TEXTS);
    let gemma_like = json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"});
    let split = json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false});
    same(
        sentencepiece_style(
            gemma_like,
            split,
            json!([added("<t>", 400, (false, false, true, false))]),
        ),
        TEXTS,
    );
}

#[test]
fn unsupported_configurations_are_refused_with_a_reason() {
    let pre =
        json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true});
    let why = NativeBpe::from_tokenizer(&sentencepiece_style(Value::Null, pre, json!([])))
        .err()
        .unwrap();
    assert!(why.contains("Metaspace"), "{why}");
    let lower = json!({"type": "Lowercase"});
    assert!(
        NativeBpe::from_tokenizer(&sentencepiece_style(lower, Value::Null, json!([]))).is_err()
    );
}

/// Five shared checkpoints (one per tokenizer family), when present; tests/test_native_bpe.py
/// runs all of them on far more text.
#[test]
fn shared_checkpoints_match_the_crate() {
    let Some(base) = std::env::var_os("CHATIDS_MODELS_DIR") else {
        return;
    };
    let texts = [
        "Hello, world! It's 2024 — naïve café, 日本語のテキスト, 1234567 <|eot_id|> <|im_start|> [INST]",
        "   indented\n\n\tcode() {\r\n  return x/y;\n}\n",
        "ǅungla ÜBERstraße don'T WE'LL 'ſ ʰʰ \u{301}\u{301}",
        "<start_of_turn>user\nhi<end_of_turn>\n<|fim▁hole|> <｜User｜>",
    ];
    for name in [
        "llama-3.1-8b-instruct",
        "qwen2.5-7b-instruct",
        "deepseek-v3",
        "mistral-7b-instruct-v0.3",
        "gemma-3-it",
    ] {
        let dir = std::path::Path::new(&base).join(name);
        if !dir.join("tokenizer.json").is_file() {
            continue;
        }
        let checkpoint = crate::checkpoint::Checkpoint::load(&dir).unwrap();
        let mut all: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        all.extend(
            checkpoint
                .added_tokens
                .iter()
                .take(50)
                .map(|t| format!("a{} b", t.content)),
        );
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        same(checkpoint.tokenizer.get().unwrap().clone(), &refs);
    }
}

/// NFC's output and where each output byte starts, as `NormalizedString::transform` aligns them:
/// a composed character starts at the first character it replaces, one NFC adds (U+0344 is
/// U+0308 U+0301, and the second is new) at the last original character used.
#[test]
fn nfc_output_and_origins_follow_the_crate_alignments() {
    let (mut out, mut origins) = (String::new(), Vec::new());
    super::nfc("e\u{301}x", 10, &mut out, Some(&mut origins));
    assert_eq!(
        (out.as_str(), origins.as_slice()),
        ("\u{e9}x", &[10, 10, 13][..])
    );
    super::nfc("\u{344}a", 0, &mut out, Some(&mut origins));
    assert_eq!(
        (out.as_str(), origins.as_slice()),
        ("\u{308}\u{301}a", &[0, 0, 0, 0, 2][..])
    );
    super::nfc("x\u{f981}", 0, &mut out, None);
    assert_eq!(out, "x\u{5973}");
}

/// A merge reads as `["a", "b"]` or `"a b"`, and nothing else (a file with another form is read
/// from the crate's tokenizer instead).
#[test]
fn merges_read_as_pairs_or_joined_strings() {
    use super::MergeJson;
    let read = |v: Value| serde_json::from_value::<MergeJson>(v);
    assert!(
        matches!(read(json!(["a", "b c"])), Ok(MergeJson::Pair(a, b)) if a == "a" && b == "b c")
    );
    assert!(matches!(read(json!("a b")), Ok(MergeJson::Joined(s)) if s == "a b"));
    assert_eq!(MergeJson::Joined("a b".into()).pair(), Ok(("a", "b")));
    assert_eq!(
        MergeJson::Pair("a".into(), "b c".into()).pair(),
        Ok(("a", "b c"))
    );
    for joined in ["a b c", "ab", "a  b"] {
        assert_eq!(MergeJson::Joined(joined.into()).pair(), Err(joined));
    }
    for bad in [
        json!(["a"]),
        json!(["a", "b", "c"]),
        json!([]),
        json!(3),
        json!(["a", 1]),
    ] {
        assert!(read(bad.clone()).is_err(), "{bad}");
    }
}

/// `find_byte` (eight bytes at a time up to the 32nd, `memchr` after) finds what `memchr`
/// finds, with the needle in each eight-byte step, past the 32nd byte, in the tail, and absent.
#[test]
fn find_byte_equals_memchr() {
    let mut rng = crate::text::TestRng(7);
    for _ in 0..5_000 {
        let len = rng.below(80);
        let hay: Vec<u8> = (0..len).map(|_| [b'a', b' ', 0xE2][rng.below(3)]).collect();
        // In half the texts the spaces before a random position become `a`, so that the first
        // space falls on every position, late ones included.
        let hay: Vec<u8> = match rng.below(2) {
            0 => hay,
            _ => {
                let at = rng.below(len + 1);
                hay.iter()
                    .enumerate()
                    .map(|(i, &b)| if i < at && b == b' ' { b'a' } else { b })
                    .collect()
            }
        };
        for needle in [b' ', 0xE2, b'z'] {
            assert_eq!(
                super::find_byte(needle, &hay),
                memchr::memchr(needle, &hay),
                "{hay:?} {needle}"
            );
        }
    }
}

/// `utf8_char` reads every character as `str::chars` does: all lengths, the first and last
/// scalar value of each length, and random scalar values of each length.
#[test]
fn utf8_char_equals_chars() {
    let mut rng = crate::text::TestRng(11);
    let mut chars: Vec<char> = ['\0', '\u{7F}', '\u{80}', '\u{7FF}', '\u{800}', '\u{FFFF}']
        .into_iter()
        .chain(['\u{10000}', '\u{10FFFF}', '▁', 'é', '😀'])
        .collect();
    while chars.len() < 20_000 {
        let below = [0x80, 0x800, 0x1_0000, 0x11_0000][rng.below(4)];
        if let Some(c) = char::from_u32(rng.below(below) as u32) {
            chars.push(c);
        }
    }
    let text: String = chars.iter().collect();
    let bytes = text.as_bytes();
    let mut at = 0;
    for c in text.chars() {
        assert_eq!(
            super::bpe::utf8_char(bytes, at),
            (c as u32, c.len_utf8()),
            "{c:?}"
        );
        at += c.len_utf8();
    }
    assert_eq!(at, bytes.len());
}
