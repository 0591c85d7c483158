//! `cargo test` runs two fuzz targets' invariants without libFuzzer. `encode_messages`
//! (fuzz/encode_messages.rs): on every committed regression input
//! (fuzz/regressions/encode_messages/, one file per input that once broke an invariant) and on
//! `CHATIDS_FUZZ_REPLAY_INPUTS` (default 600) inputs from a fixed-seed generator, on the
//! checkpoints named in `CHATIDS_FUZZ_MODELS` (default: one per format family,
//! [`REPLAY_MODELS`]; a debug build loads each in seconds). `parse_completion`
//! (fuzz/parse_completion.rs): as many generated completions, on one checkpoint per call syntax
//! ([`PARSE_REPLAY_MODELS`], with two mistral-common files when `CHATIDS_MISTRAL_COMMON_DATA`
//! names them, as `make test-rust` does; `CHATIDS_FUZZ_MODELS=all`: every checkpoint). This is the brief
//! fuzzing CI runs; `make fuzz-encode` and `make fuzz-parse` are the long runs. Needs
//! `CHATIDS_MODELS_DIR` (a CI run fails without it, elsewhere the test says it did nothing).

#[path = "encode_messages.rs"]
mod encode_messages;
#[path = "parse_completion.rs"]
mod parse_completion;

/// xorshift64*: the same inputs on every run.
struct Inputs(u64);

impl Inputs {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn input(&mut self) -> Vec<u8> {
        let len = (self.next_u64() % 400) as usize;
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// The checkpoints the generated inputs run on unless `CHATIDS_FUZZ_MODELS` says otherwise.
const REPLAY_MODELS: &str = "llama-3.1-8b-instruct,qwen3-0.6b,gemma-3-it,gpt-oss-120b";

/// The checkpoints the generated completions run on by default: one per call syntax (Llama 3
/// JSON and `<|python_tag|>`, Hermes `<tool_call>`, Qwen3 `<think>`, Mistral `[TOOL_CALLS]`,
/// harmony, DeepSeek V3).
const PARSE_REPLAY_MODELS: &str = "llama-3.1-8b-instruct,qwen2.5-7b-instruct,qwen3-0.6b,\
mistral-7b-instruct-v0.3,gpt-oss-120b,deepseek-v3,\
mistral-common:mistral_instruct_tokenizer_241114.model.v7,mistral-common:tekken_240718.json";

fn models_present() -> bool {
    if encode_messages::models_dir().is_some() {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "CI: set CHATIDS_MODELS_DIR (the fuzz replay needs the shared models)"
    );
    eprintln!("fuzz replay skipped: CHATIDS_MODELS_DIR is not set");
    false
}

/// Run `check` on every committed regression input of `target` (fuzz/regressions/<target>/,
/// one file per input that once broke an invariant); `check(file name, input)` is false when
/// the input's checkpoint does not load.
fn regressions(target: &str, check: impl Fn(&str, &[u8]) -> bool) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("the regressions folder exists") {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let data = std::fs::read(&path).unwrap();
        assert!(
            check(&file, &data),
            "{}: its checkpoint does not load",
            path.display()
        );
        n += 1;
    }
    assert!(n > 0, "no regression inputs in {}", dir.display());
}

#[test]
fn committed_regressions_hold() {
    if !models_present() {
        return;
    }
    // Every regression runs, on whichever checkpoint it picks.
    regressions("encode_messages", |_, data| {
        encode_messages::check_only(data, None)
    });
}

#[test]
fn committed_parse_regressions_hold() {
    if !models_present() {
        return;
    }
    // <checkpoint>--<what>: replayed on the checkpoint it ran on, whatever the list of targets.
    regressions("parse_completion", |file, data| {
        parse_completion::check_on(file.split("--").next().unwrap_or_default(), data)
    });
}

/// Run `check` on `CHATIDS_FUZZ_REPLAY_INPUTS` (default 600) generated inputs that it accepts
/// (it returns false for an input whose checkpoint is not among those run).
fn replay(seed: u64, check: impl Fn(&[u8]) -> bool) {
    let count = std::env::var("CHATIDS_FUZZ_REPLAY_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let mut inputs = Inputs(seed);
    let mut ran = 0;
    while ran < count {
        ran += usize::from(check(&inputs.input()));
    }
}

#[test]
fn generated_inputs_hold() {
    if !models_present() {
        return;
    }
    let only = std::env::var("CHATIDS_FUZZ_MODELS").unwrap_or_else(|_| REPLAY_MODELS.to_string());
    replay(0x9E37_79B9_7F4A_7C15, |data| {
        encode_messages::check_only(data, Some(&only))
    });
}

#[test]
fn generated_completions_hold() {
    if !models_present() {
        return;
    }
    // One checkpoint per call syntax by default (`CHATIDS_FUZZ_MODELS=all`: every one).
    let only =
        std::env::var("CHATIDS_FUZZ_MODELS").unwrap_or_else(|_| PARSE_REPLAY_MODELS.to_string());
    let only = (only != "all").then_some(only);
    replay(0x2545_F491_4F6C_DD1D, |data| {
        parse_completion::check_only(data, only.as_deref())
    });
}
