//! Fuzz target for what vigil reads from a provider's error answer (headers and body) and from
//! the JSON APIs it polls; the checks live in `error_harness.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../error_harness.rs"]
mod error_harness;

fuzz_target!(|data: &[u8]| error_harness::error_response(data));
