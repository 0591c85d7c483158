//! The native BPE core against the tokenizers crate on arbitrary text, for every shared
//! tokenizer: the first input byte picks the tokenizer and the options, the rest is the text.
//! A difference in ids or token starts is a crash (and libFuzzer keeps the input).
//!
//! `CHATIDS_MODELS_DIR=../shared/models RUSTC_BOOTSTRAP=1 cargo fuzz run native_bpe -- -max_total_time=1800`
//! (from the repository root; CONTRIBUTING.md, "Fuzzing", has the corpus and the CI run).
#![no_main]

use std::sync::LazyLock;

use chatids::checkpoint::Checkpoint;
use chatids::text::{EncoderChoice, Selected, TextEncoder, TextOptions};
use libfuzzer_sys::fuzz_target;

#[path = "../checkpoints.rs"]
mod checkpoints;

/// Every tokenizer directory under `CHATIDS_MODELS_DIR`, with both encoders.
static ENCODERS: LazyLock<Vec<(String, Selected)>> = LazyLock::new(|| {
    let dir = checkpoints::models_dir().expect("set CHATIDS_MODELS_DIR to the shared models");
    let mut names = checkpoints::checkpoint_names(&dir);
    if let Ok(only) = std::env::var("CHATIDS_FUZZ_MODELS") {
        names.retain(|n| only.split(',').any(|o| o == n));
    }
    names
        .into_iter()
        .map(|name| {
            let checkpoint = Checkpoint::load(std::path::Path::new(&dir).join(&name)).expect("loads");
            let selected = Selected::with_model(checkpoint.tokenizer, EncoderChoice::Auto, None);
            assert!(selected.native().is_some(), "{name}: {}", selected.describe());
            (name, selected)
        })
        .collect()
});

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let encoders = &*ENCODERS;
    let (name, selected) = &encoders[(first as usize >> 2) % encoders.len()];
    let options = TextOptions {
        added_tokens: first & 1 != 0,
        at_start: first & 2 != 0,
    };
    let text = String::from_utf8_lossy(rest);
    let native = selected.native().expect("checked at load");
    let (mut a, mut b, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    native.encode_with_starts(&text, options, &mut a, &mut sa);
    selected.hf().expect("the crate builds").encode_with_starts(&text, options, &mut b, &mut sb).expect("the crate encodes");
    assert_eq!(a, b, "{name} {options:?}: ids differ on {text:?}");
    assert_eq!(sa, sb, "{name} {options:?}: starts differ on {text:?}");
    let mut c = Vec::new();
    native.encode(&text, options, &mut c);
    assert_eq!(a, c, "{name} {options:?}: encode and encode_with_starts differ on {text:?}");
});
