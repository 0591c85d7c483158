//! The Rust entry point (`Encoder::encode*`, `render`, `encode_batch`) on random
//! conversations and random policies, for every shared checkpoint on its default route and on
//! the generic (Jinja) path.
//!
//! The input bytes are read as a small program (see [`Reader`]): which encoder, which
//! options (generation prompt, sanitizing, system policy, merging, continuing the final
//! message), then messages whose roles and contents are built from the model's control-token
//! strings, their prefixes and suffixes, common template words and raw bytes, with tool calls
//! of right and wrong shapes. Errors are fine; what must hold on every input:
//!
//! - nothing panics (a panic is a crash, and libFuzzer keeps the input);
//! - `encode`, `encode_tracked` (all provenance) and a one-conversation `encode_batch` give
//!   the same ids, and all three agree on success or failure;
//! - with `sanitize_control_tokens`, no control-token id starts inside caller text;
//! - `render` succeeds exactly when encoding without sanitizing does;
//! - a session that appends the messages in three steps holds the ids of one encode.
//!
//! `make fuzz-encode` runs it under libFuzzer (fuzz/fuzz_targets/encode_messages.rs); `cargo test`
//! replays the committed regressions and a few thousand generated inputs through it
//! (fuzz/replay.rs). `CHATIDS_FUZZ_MODELS=a,b` limits the models.
use std::sync::{LazyLock, OnceLock};

use chatids::encoder::{EncodeOptions, Encoder};
use chatids::message::{Content, ContentPart, Message};
use chatids::piece_encoder::Tracking;
use chatids::render::native::SystemPolicy;
use serde_json::{json, Map, Value};

#[path = "checkpoints.rs"]
mod checkpoints;
use checkpoints::checkpoint_names;
pub use checkpoints::models_dir;

/// An encoder, whether it renders from the raw message dicts (the Jinja path), and the
/// strings its control tokens are made of.
struct Target {
    name: String,
    encoder: Encoder,
    generic: bool,
    control_strings: Vec<String>,
}

/// Every shared checkpoint on its default route and on the Jinja path (`format="jinja"`;
/// the same as the default for checkpoints that have no native format), each loaded the first
/// time an input picks it (`None`: the directory does not load that way). The list does not
/// depend on `CHATIDS_FUZZ_MODELS`, so an input always means the same checkpoint.
static TARGETS: LazyLock<Vec<(String, Option<&'static str>, OnceLock<Option<Target>>)>> =
    LazyLock::new(|| {
        let dir = models_dir().expect("set CHATIDS_MODELS_DIR to the shared models");
        let names = checkpoint_names(&dir);
        assert!(!names.is_empty(), "no tokenizer.json under {dir}");
        names
            .into_iter()
            .flat_map(|name| {
                [
                    (name.clone(), None, OnceLock::new()),
                    (name, Some("jinja"), OnceLock::new()),
                ]
            })
            .collect()
    });

fn load(name: &str, format: Option<&str>) -> Option<Target> {
    let path = std::path::Path::new(&models_dir()?).join(name);
    let encoder = Encoder::from_dir(&path, format).ok()?;
    let control_strings = encoder
        .control_tokens()
        .tokens()
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    Some(Target {
        name: format!(
            "{name}{}",
            format.map_or(String::new(), |f| format!(" [{f}]"))
        ),
        generic: encoder.is_jinja(),
        encoder,
        control_strings,
    })
}

/// Words templates test roles and contents against.
const WORDS: &[&str] = &[
    "user",
    "assistant",
    "system",
    "tool",
    "ipython",
    "developer",
    "model",
    "function",
    "\n",
    "\n\n",
    " ",
    "<think>",
    "</think>",
    "[INST]",
    "[/INST]",
    "<<SYS>>",
    "<s>",
    "</s>",
    "<|",
    "|>",
    "｜",
    "\u{200b}",
    "\u{FF1C}",
    "\0",
];

/// Reads the fuzzer's bytes as choices; past the end every choice is 0.
struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn done(&self) -> bool {
        self.data.is_empty()
    }

    fn pick<'s, T>(&mut self, items: &'s [T]) -> &'s T {
        &items[self.byte() as usize % items.len()]
    }

    /// Up to `n` raw bytes as (lossy) UTF-8.
    fn raw(&mut self, n: usize) -> String {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        String::from_utf8_lossy(head).into_owned()
    }

    /// A text of a few atoms: control tokens, their halves, template words, raw bytes.
    fn text(&mut self, controls: &[String]) -> String {
        let atoms = self.byte() % 6;
        let mut text = String::new();
        for _ in 0..atoms {
            let kind = self.byte();
            match kind % 5 {
                0 | 1 if !controls.is_empty() => {
                    let token = self.pick(controls).clone();
                    let chars: Vec<char> = token.chars().collect();
                    let cut = self.byte() as usize % (chars.len() + 1);
                    match kind % 3 {
                        0 => text.push_str(&token),
                        1 => text.extend(&chars[..cut]),
                        _ => text.extend(&chars[cut..]),
                    }
                }
                2 => text.push_str(*self.pick(WORDS)),
                _ => {
                    let n = self.byte() as usize % 24;
                    text.push_str(&self.raw(n));
                }
            }
        }
        text
    }

    /// A `tool_calls` value: mostly well formed, sometimes not.
    fn tool_calls(&mut self, controls: &[String]) -> Value {
        let name = self.text(controls);
        let argument = self.text(controls);
        match self.byte() % 8 {
            0 => {
                json!([{"type": "function", "function": {"name": name, "arguments": {"x": argument}}}])
            }
            1 => {
                json!([{"type": "function", "function": {"name": name, "arguments": json!({"x": argument}).to_string()}}])
            }
            2 => json!([{"type": "function", "function": {"name": name, "arguments": argument}}]),
            3 => json!([{"name": name, "arguments": {"x": [argument, 1, null, {"y": true}]}}]),
            4 => {
                json!([{"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": argument}}}])
            }
            5 => json!(name),
            6 => json!([[name]]),
            _ => json!([{"function": {"name": null}}]),
        }
    }
}

/// The message as the Python layer builds it: typed fields, plus the raw dict on the generic
/// path (templates read keys the fields do not model).
fn message(
    role: String,
    content: Option<Content>,
    extra: Map<String, Value>,
    generic: bool,
) -> Message {
    let tool_calls = extra.get("tool_calls").map(|t| t.as_array().map(Vec::len));
    let raw = generic.then(|| {
        let mut map = extra.clone();
        map.insert("role".into(), Value::String(role.clone()));
        match &content {
            Some(Content::Text(t)) => {
                map.insert("content".into(), Value::String(t.clone()));
            }
            Some(Content::Parts(parts)) => {
                let parts = parts
                    .iter()
                    .map(|p| match p {
                        ContentPart::Text(t) => json!({"type": "text", "text": t}),
                        ContentPart::Other { kind } => json!({"type": kind}),
                    })
                    .collect();
                map.insert("content".into(), Value::Array(parts));
            }
            None => {}
        }
        std::sync::Arc::new(map)
    });
    Message {
        role,
        content,
        tool_calls,
        raw,
        ..Default::default()
    }
}

/// Run one input on the checkpoints `CHATIDS_FUZZ_MODELS` names (default: all); see
/// [`check_only`]. (The libFuzzer entry; the replay calls `check_only`.)
#[allow(dead_code)]
pub fn check(data: &[u8]) -> bool {
    check_only(data, std::env::var("CHATIDS_FUZZ_MODELS").ok().as_deref())
}

/// Run one input; panics on a broken invariant. `only`: comma-separated checkpoint names.
/// `false`: the input picks a checkpoint outside `only`, or one that does not load; nothing ran.
pub fn check_only(data: &[u8], only: Option<&str>) -> bool {
    let mut r = Reader { data };
    let (name, format, cell) = &TARGETS[r.byte() as usize % TARGETS.len()];
    if only.is_some_and(|only| !only.split(',').any(|o| o == name)) {
        return false;
    }
    let Some(target) = cell.get_or_init(|| load(name, *format)) else {
        return false;
    };
    let controls = &target.control_strings;
    let flags = r.byte();
    let options = EncodeOptions {
        add_generation_prompt: flags & 1 != 0,
        // Mostly the default (sanitized); one input in eight parses content like the template.
        sanitize_control_tokens: flags & 0b1110 != 0b1110,
        system: [
            SystemPolicy::Template,
            SystemPolicy::Error,
            SystemPolicy::Fold,
        ][(flags >> 4) as usize % 3],
        merge_consecutive: flags & 0x40 != 0,
        continue_final_message: flags & 0x80 != 0,
        ..Default::default()
    };
    let mut messages = Vec::new();
    while !r.done() && messages.len() < 12 {
        let kind = r.byte();
        let role = match kind % 8 {
            0..=2 => ["user", "assistant"][messages.len() % 2].to_string(),
            3 => "system".into(),
            4 => "tool".into(),
            5 => (*r.pick(WORDS)).to_string(),
            _ => r.text(controls),
        };
        let content = match (kind >> 3) % 4 {
            0 | 1 => Some(Content::Text(r.text(controls))),
            2 => Some(Content::Parts(vec![
                ContentPart::Text(r.text(controls)),
                ContentPart::Other {
                    kind: "image".into(),
                },
            ])),
            _ => None,
        };
        let mut extra = Map::new();
        if kind & 0x20 != 0 {
            extra.insert("tool_calls".into(), r.tool_calls(controls));
        }
        if kind & 0x40 != 0 {
            extra.insert("tool_call_id".into(), Value::String(r.text(controls)));
        }
        messages.push(message(role, content, extra, target.generic));
    }

    let encoder = &target.encoder;
    let plain = encoder.encode(&messages, &options);
    let tracked = encoder.encode_tracked(&messages, &options, Tracking::ALL);
    let batch = encoder.encode_batch(&[messages.clone()], &options, Some(1));
    let name = &target.name;
    match (&plain, &tracked, &batch) {
        (Ok(ids), Ok(tracked), Ok(batch)) => {
            assert_eq!(
                ids, &tracked.ids,
                "{name}: encode and encode_tracked differ"
            );
            assert_eq!(
                Some(ids.as_slice()),
                batch.get(0),
                "{name}: encode and encode_batch differ"
            );
            if options.sanitize_control_tokens {
                let control = encoder.control_tokens();
                for (i, (&id, &from_content)) in
                    tracked.ids.iter().zip(&tracked.from_content).enumerate()
                {
                    assert!(
                        !(from_content && control.contains_id(id)),
                        "{name}: control id {id} at {i} starts in caller text: {messages:?}"
                    );
                }
            }
        }
        (Err(_), Err(_), Err(_)) => {}
        _ => panic!(
            "{name}: encode {:?}, encode_tracked {:?}, encode_batch {:?} disagree",
            plain.as_ref().err().map(ToString::to_string),
            tracked.as_ref().err().map(ToString::to_string),
            batch.as_ref().err().map(ToString::to_string),
        ),
    }
    // `render` is the unsanitized prompt: it succeeds exactly when unsanitized encoding does
    // (sanitized encoding may differ where a template acts on marked text, docs/security.md).
    let unsanitized = EncodeOptions {
        sanitize_control_tokens: false,
        ..options.clone()
    };
    let rendered = encoder.render(&messages, &options);
    let encoded = encoder.encode(&messages, &unsanitized);
    assert_eq!(
        rendered.is_ok(),
        encoded.is_ok(),
        "{name}: render {:?} but unsanitized encode {:?}\n{options:?}\n{messages:?}",
        rendered.as_ref().err().map(ToString::to_string),
        encoded.as_ref().err().map(ToString::to_string),
    );
    check_session(encoder, &messages, &options, name);
    true
}

/// A session fed the messages in three appends (which re-renders the earlier messages from
/// what it kept of them on the Jinja path) holds exactly the ids of one encode, and its
/// generation prompt is the encode with `add_generation_prompt`. An append may fail (a
/// template that rewrites earlier ids, or refuses a prefix); then nothing is compared.
fn check_session(encoder: &Encoder, messages: &[Message], options: &EncodeOptions, name: &str) {
    use chatids::session::{OnRewrite, Session};
    let options = EncodeOptions {
        add_generation_prompt: false,
        continue_final_message: false,
        ..options.clone()
    };
    let mut session = Session::new(options.clone(), OnRewrite::Error);
    let (a, b) = (messages.len() / 3, 2 * messages.len() / 3);
    for part in [&messages[..a], &messages[a..b], &messages[b..]] {
        if session.append(encoder, part.to_vec()).is_err() {
            return;
        }
    }
    let whole = encoder.encode(messages, &options);
    assert_eq!(
        whole.as_ref().ok().map(Vec::as_slice),
        Some(session.ids()),
        "{name}: a session differs from encode\n{options:?}\n{messages:?}"
    );
    let with_prompt = EncodeOptions {
        add_generation_prompt: true,
        ..options
    };
    if let (Ok(prompt), Ok(expected)) = (
        session.generation_prompt(encoder),
        encoder.encode(messages, &with_prompt),
    ) {
        assert_eq!(
            prompt, expected,
            "{name}: a session's generation prompt differs from encode"
        );
    }
}
