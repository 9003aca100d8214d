//! Fuzz target for the SSE framing and the provider adapters; the checks live in `harness.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::sse_stream(data));
