//! The `sse_stream` fuzz harness, shared by the fuzz target and `tests/fuzz_regressions.rs`.
//!
//! Input layout: byte 0 picks the adapter (OpenAI, Anthropic, Gemini), byte 1 a small event cap
//! (1..=256 bytes), byte 2 seeds the sizes of the reads; the rest is the response body.

use vigil::config::ProviderKind;
use vigil::io::probe::sse::{SseError, SseEvent, SseParser};
use vigil::io::probe::{adapter_for, Signals};

/// A cap no fuzz input reaches, like the probe's body limit.
const BIG_CAP: usize = 1 << 20;

/// Everything one pass of the parser over a body produced.
#[derive(Debug, PartialEq)]
struct Parsed {
    events: Vec<SseEvent>,
    end: Result<(), SseError>,
    comments: u64,
}

/// Runs one input through the parser and the chosen adapter; panics when an invariant breaks.
pub fn sse_stream(data: &[u8]) {
    let [kind, cap, seed, body @ ..] = data else { return };
    let kind = [ProviderKind::Openai, ProviderKind::Anthropic, ProviderKind::Gemini][usize::from(*kind % 3)];
    let small_cap = 1 + usize::from(*cap);
    let reads = read_sizes(*seed, body.len());

    let whole = parse(body, BIG_CAP, &[body.len()]);
    let split = parse(body, BIG_CAP, &reads);
    assert_eq!(whole, split, "read boundaries {reads:?} changed what was parsed");

    // A small cap may only stop the stream early; up to that point it sees the same events.
    let small = parse(body, small_cap, &reads);
    assert!(whole.events.starts_with(&small.events), "cap {small_cap} changed the events before it was hit");
    match small.end {
        Ok(()) | Err(SseError::NotUtf8) => {
            assert_eq!(small, whole, "cap {small_cap} changed a stream it never refused")
        }
        Err(SseError::TooLarge(n)) => assert_eq!(n, small_cap, "TooLarge reports the wrong cap"),
    }
    for ev in &small.events {
        let held = ev.data.len() + ev.event.as_ref().map_or(0, String::len);
        assert!(held <= small_cap, "an event of {held} bytes got past the cap of {small_cap}: {ev:?}");
    }

    let adapter = adapter_for(kind);
    for ev in &whole.events {
        check(&adapter.interpret(ev));
    }
}

/// Invariants every adapter's signals keep, whatever the event held.
fn check(s: &Signals) {
    assert!(s.content.as_ref().is_none_or(|c| !c.is_empty()), "content is Some(\"\"): {s:?}");
}

/// Feeds `body` in pieces of the given sizes, as separate network reads would.
fn parse(body: &[u8], cap: usize, reads: &[usize]) -> Parsed {
    let mut parser = SseParser::new(cap);
    let mut events = Vec::new();
    let mut rest = body;
    let mut end = Ok(());
    for &n in reads {
        let (piece, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        end = parser.feed(piece, |ev| events.push(ev));
        if end.is_err() {
            break;
        }
    }
    if end.is_ok() {
        end = parser.finish().map(|last| events.extend(last));
    }
    Parsed { events, end, comments: parser.comments }
}

/// Read sizes from 0 to 32 bytes drawn from `seed` (seed 0: byte by byte), covering `len`.
fn read_sizes(seed: u8, len: usize) -> Vec<usize> {
    let mut state = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut sizes = Vec::new();
    let mut left = len;
    while left > 0 {
        // xorshift32: never reaches 0, so some size is non-zero and the loop ends.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = if seed == 0 { 1 } else { (state % 33) as usize }.min(left);
        sizes.push(n);
        left -= n;
    }
    sizes
}
