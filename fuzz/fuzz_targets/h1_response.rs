//! Fuzz target for the probe's HTTP/1.1 response framing; the checks live in `h1_harness.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../h1_harness.rs"]
mod h1_harness;

fuzz_target!(|data: &[u8]| h1_harness::h1_response(data));
