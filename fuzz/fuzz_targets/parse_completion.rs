//! libFuzzer entry of the `parse_completion` target; the input format and the invariants are in
//! fuzz/parse_completion.rs. `make fuzz-parse` (CONTRIBUTING.md, "Fuzzing").
#![no_main]

#[path = "../parse_completion.rs"]
mod parse_completion;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    parse_completion::check(data);
});
