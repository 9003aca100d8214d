//! The probe thread's wake-up grid: probe starts and parked reads ([`super::socket`]) fall on
//! the same ticks, so one wake-up of the thread serves every probe due on it.
//!
//! Waking costs the probe thread more than most of the work it wakes for (a context switch, an
//! `epoll_wait`, timer upkeep: tens of µs on a virtual machine). At 1,000 targets the thread
//! woke about 140 times a second, once per probe start and once per streamed event, and those
//! wake-ups were the largest share of the daemon's CPU (docs/BENCHMARKS.md). Probe timings do
//! not depend on when the thread wakes: starts are due on a tick (and their lag is measured from
//! it), and reads carry the instant the kernel received their bytes.

use std::sync::OnceLock;
use std::time::Duration;
use tokio::time::Instant;

/// Spacing of the ticks. A start is at most this late against an unrounded offset, and a parked
/// stream's end is *seen* at most this late (it is stamped exactly): nothing a probe every
/// second or slower can notice, and few enough ticks (ten a second) to share.
pub const TICK: Duration = Duration::from_millis(100);

/// The instant every tick is counted from: the first use in this process.
fn epoch() -> Instant {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    Instant::from_std(*EPOCH.get_or_init(std::time::Instant::now))
}

/// The first tick at or after `t`.
pub fn at_or_after(t: Instant) -> Instant {
    let epoch = epoch();
    let since = t.saturating_duration_since(epoch);
    let ticks = since.as_nanos().div_ceil(TICK.as_nanos());
    epoch + TICK * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// The first tick after `t` (a parked read that found nothing waits for this one).
pub fn after(t: Instant) -> Instant {
    at_or_after(t + Duration::from_nanos(1))
}

/// `d` rounded down to whole ticks (stable per-target offsets that keep starts on the grid).
pub fn floor(d: Duration) -> Duration {
    let ticks = d.as_nanos() / TICK.as_nanos();
    TICK * u32::try_from(ticks).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_round_up_to_a_shared_tick_and_offsets_down() {
        let e = epoch();
        assert_eq!(at_or_after(e), e, "the epoch is a tick");
        assert_eq!(at_or_after(e + Duration::from_millis(1)), e + TICK);
        assert_eq!(at_or_after(e + TICK), e + TICK, "a tick is its own");
        assert_eq!(after(e + TICK), e + TICK * 2, "after a tick comes the next");
        assert_eq!(at_or_after(e + Duration::from_millis(250)), e + Duration::from_millis(300));
        // Two instants inside one tick share the next one: one wake-up serves both.
        let (a, b) = (e + Duration::from_millis(1_203), e + Duration::from_millis(1_288));
        assert_eq!(at_or_after(a), at_or_after(b));
        assert_eq!(floor(Duration::from_millis(59_999)), Duration::from_millis(59_900));
        assert_eq!(floor(Duration::from_millis(40)), Duration::ZERO);
        assert_eq!(floor(TICK * 3), TICK * 3);
    }
}
