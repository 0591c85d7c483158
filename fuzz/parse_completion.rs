//! The return path (`Encoder::parse_completion`, `Encoder::stream_parser`) on random model
//! output, for every shared checkpoint (native grammars and the ones the Jinja path derives),
//! and for the mistral-common route's files when `CHATIDS_MISTRAL_COMMON_DATA` names them.
//!
//! The input bytes are read as a small program: which checkpoint, then fragments of a
//! completion: the grammar's own marker and stop tokens, every control token, pieces of the
//! formats' call syntaxes (JSON objects, harmony headers, DeepSeek fences, `name.call(...)`),
//! words, whitespace and raw bytes, and now and then an id outside the vocabulary. The text is
//! encoded as the model would emit it (control tokens matched), then cut into random chunks.
//! What must hold on every input:
//!
//! - nothing panics;
//! - an id outside the vocabulary is an error naming its index, from both entries;
//! - the stream fed in any chunking gives the one-shot parse (its `after_stop` aside: a
//!   stream ends at its stop token), and both keep the ids after the stop token verbatim;
//! - nothing is lost: when the ids before the stop hold no control token, the content and the
//!   remainder together hold the decoded text (up to the whitespace a template trims), unless
//!   the text was read as a call;
//! - what is not read is named: a non-empty remainder comes with at least one problem.
//!
//! `make fuzz-parse` runs it under libFuzzer (fuzz/fuzz_targets/parse_completion.rs); `cargo
//! test` replays generated inputs through it (fuzz/replay.rs). `CHATIDS_FUZZ_MODELS=a,b` limits
//! the models.
use std::sync::{LazyLock, OnceLock};

use chatids::completion::{ParsedCompletion, Stop};
use chatids::encoder::Encoder;

#[path = "checkpoints.rs"]
mod checkpoints;
use checkpoints::{checkpoint_names, mistral_common_checkpoints, models_dir};
use std::path::PathBuf;

/// A checkpoint's encoder and the fragments its completions are made of.
struct Target {
    name: String,
    encoder: Encoder,
    /// Control-token strings (the grammar's markers and stops among them).
    controls: Vec<String>,
    vocab: u32,
}

/// Each checkpoint's name, folder and target (loaded on first use).
type Slot = (String, PathBuf, OnceLock<Option<Target>>);

static TARGETS: LazyLock<Vec<Slot>> = LazyLock::new(|| {
    let dir = models_dir().expect("set CHATIDS_MODELS_DIR to the shared models");
    checkpoint_names(&dir)
        .into_iter()
        .map(|n| {
            let path = PathBuf::from(&dir).join(&n);
            (n, path)
        })
        .chain(mistral_common_checkpoints())
        .map(|(n, path)| (n, path, OnceLock::new()))
        .collect()
});

fn load(name: &str, path: &std::path::Path) -> Option<Target> {
    let encoder = Encoder::from_dir(path, None).ok()?;
    let grammar = encoder.completion_grammar().ok()?;
    let mut controls: Vec<String> = encoder
        .control_tokens()
        .tokens()
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    let mut ids: Vec<u32> = grammar.calls.markers();
    ids.extend(grammar.stops.iter().map(|s| s.id));
    ids.extend(grammar.reasoning.iter().flat_map(|&(a, b)| [a, b]));
    for id in ids {
        if let Ok(text) = encoder.decode(&[id]) {
            controls.push(text);
        }
    }
    controls.sort();
    controls.dedup();
    // The vocabulary's size: the first id that does not decode (ids are contiguous).
    let (mut lo, mut hi) = (0u32, 1 << 24);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if encoder.decode(&[mid]).is_ok() {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let vocab = lo;
    Some(Target {
        name: name.to_string(),
        encoder,
        controls,
        vocab,
    })
}

/// Fragments of the formats' call syntaxes and of plain answers.
const FRAGMENTS: &[&str] = &[
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
    "{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}",
    "[{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcDEF123\"}]",
    "{\"arguments\": {\"x\": \"\\u00e9\"}, \"name\": \"g\"",
    "\"}",
    "]",
    "}",
    "{",
    ",",
    "\n",
    "\n\n",
    " ",
    "\t",
    "assistant",
    " to=functions.get_weather",
    "commentary",
    "analysis",
    "final",
    " json",
    "json",
    "function",
    "get_weather\n```json\n",
    "\n```",
    "brave_search.call(query=\"weather\")",
    "print(1)",
    "The answer is 4.",
    "Grüße, 日本語 🙂",
    "<tool_call>",
    "<think>",
];

/// Reads the input bytes.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

/// Run the invariants on `data`; false when the checkpoint it picks is not among `only` (a
/// comma-separated list) or does not load.
pub fn check_only(data: &[u8], only: Option<&str>) -> bool {
    let mut r = Reader { data, at: 0 };
    let (name, path, slot) = &TARGETS[r.byte() as usize % TARGETS.len()];
    if only.is_some_and(|o| !o.split(',').any(|n| n == name)) {
        return false;
    }
    let Some(target) = slot.get_or_init(|| load(name, path)) else {
        return false;
    };
    run(target, &mut r);
    true
}

/// Run the invariants on `data` on checkpoint `name`, whatever the list of targets (the first
/// byte, which picks the checkpoint under libFuzzer, is skipped): how committed regressions
/// replay. False when `name` is not a target or does not load. (The replay's entry.)
#[allow(dead_code)]
pub fn check_on(name: &str, data: &[u8]) -> bool {
    let Some((_, path, slot)) = TARGETS.iter().find(|(n, _, _)| n == name) else {
        return false;
    };
    let Some(target) = slot.get_or_init(|| load(name, path)) else {
        return false;
    };
    run(target, &mut Reader { data, at: 1 });
    true
}

/// The libFuzzer entry: every input runs. (The replay calls `check_only`.)
#[allow(dead_code)]
pub fn check(data: &[u8]) {
    check_only(data, None);
}

fn run(t: &Target, r: &mut Reader<'_>) {
    // The completion, as text the model writes (control tokens matched), plus a stray id.
    let mut text = String::new();
    let mut stray: Option<(usize, u32)> = None;
    let mut count = 0;
    while !r.done() && count < 64 {
        count += 1;
        match r.byte() % 8 {
            0..=2 => text.push_str(&t.controls[r.byte() as usize % t.controls.len()]),
            3..=5 => text.push_str(FRAGMENTS[r.byte() as usize % FRAGMENTS.len()]),
            6 => {
                let n = (r.byte() % 6) as usize;
                let bytes: Vec<u8> = (0..n).map(|_| r.byte()).collect();
                text.push_str(&String::from_utf8_lossy(&bytes));
            }
            _ => stray = Some((r.byte() as usize, t.vocab + u32::from(r.byte()) * 97)),
        }
    }
    let Ok(mut ids) = t.encoder.encode_rendered(&text, false) else {
        return;
    };
    let cuts: Vec<usize> = (0..r.byte() % 5)
        .map(|_| r.byte() as usize % (ids.len() + 1))
        .collect();
    let mut cuts = cuts;
    cuts.sort_unstable();
    if let Some((at, id)) = stray {
        let at = at % (ids.len() + 1);
        ids.insert(at, id);
        let one = t.encoder.parse_completion(&ids);
        let err = one.expect_err("an id outside the vocabulary is an error");
        assert!(
            err.to_string().contains(&format!("index {at}")),
            "{}: {err}",
            t.name
        );
        let mut s = t.encoder.stream_parser().unwrap();
        let fed = s.feed(&ids, 0);
        let bad = fed.expect_err("the stream rejects it too");
        assert_eq!((bad.index, bad.id), (at, id), "{}", t.name);
        return;
    }
    let one = t.encoder.parse_completion(&ids).unwrap();
    // Any chunking gives the one-shot parse.
    let mut s = t.encoder.stream_parser().unwrap();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&ids.len())) {
        s.feed(&ids[last..c], last).unwrap();
        s.take_deltas();
        last = c;
    }
    let streamed = s.finish();
    let stop_at = match one.stop {
        Stop::Token(id) => ids.iter().position(|&i| i == id).map(|p| p + 1),
        Stop::Length => None,
    };
    let after = stop_at.map_or(&[][..], |p| &ids[p..]);
    assert_eq!(one.after_stop, after, "{}: {text:?}", t.name);
    assert_eq!(
        ParsedCompletion {
            after_stop: after.to_vec(),
            ..streamed
        },
        one,
        "{}: stream and one-shot differ on {text:?} cut at {cuts:?}",
        t.name
    );
    // What is not read is named.
    assert!(
        one.remainder.is_empty() || !one.problems.is_empty(),
        "{}: a remainder without a problem on {text:?}",
        t.name
    );
    // Nothing lost where nothing is structure.
    let before = &ids[..stop_at.map_or(ids.len(), |p| p - 1)];
    let grammar = t.encoder.completion_grammar().unwrap();
    // The grammar's markers are among its control tokens.
    let plain = !before.iter().any(|&id| grammar.is_control(id));
    if plain && one.tool_calls.is_empty() && one.reasoning.is_none() {
        let decoded = t.encoder.decode(before).unwrap();
        let kept = format!("{}{}", one.content, one.remainder);
        // Up to the whitespace a template trims: Python's (`strip()`), which counts more
        // characters than Rust's `char::is_whitespace` (U+001C..U+001F).
        let visible = |s: &str| -> String {
            s.chars()
                .filter(|&c| !chatids::pystr::is_python_whitespace(c))
                .collect()
        };
        assert_eq!(
            visible(&kept),
            visible(&decoded),
            "{}: text lost from {decoded:?}",
            t.name
        );
    }
}
