//! libFuzzer entry of the `encode_messages` target; the input format and the invariants are in
//! fuzz/encode_messages.rs. `make fuzz-encode` (CONTRIBUTING.md, "Fuzzing").
#![no_main]

#[path = "../encode_messages.rs"]
mod encode_messages;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    encode_messages::check(data);
});
