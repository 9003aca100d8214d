//! A plain connection's accept grace: the request waits until the server has had time to accept
//! the connection, and the wait ends on a wake-up the probe thread has anyway.
//!
//! A request written at once after the connect waits in the server's queue while it accepts (a
//! busy event loop takes a while), and that wait would count in the TTFB though it is the
//! connection's set-up, not the answer: a pooled connection never pays it, and over TLS the
//! handshake has already waited for it. So the request goes at least [`ACCEPT_GRACE`] after the
//! connect. A timer of its own for that millisecond woke the probe thread once per tick with
//! starts (about ten times a second at 1,000 targets, docs/BENCHMARKS.md); the grace instead
//! ends on the first bytes another watched connection brings after it, or at the latest on the
//! grid's first tick after it ([`super::grid`]). Bytes arriving mean the thread is awake, and
//! mean a server has just written rather than accepted: a tick is when the probes due on it
//! connect, so a request written there waits behind their accepts.

use super::grid;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The least time a plain connection is left between its connect and its request.
pub const ACCEPT_GRACE: Duration = Duration::from_millis(1);

thread_local! {
    /// How many reads on this thread have returned bytes a socket's own readiness woke it for.
    static ARRIVALS: Cell<u64> = const { Cell::new(0) };
    /// Graces on this thread waiting for the next such read.
    static WAITING: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
}

/// A watched socket's read returned bytes: wakes the graces waiting on this thread (they run in
/// this same turn of the runtime, before it sleeps again).
pub fn arrived() {
    ARRIVALS.with(|a| a.set(a.get().wrapping_add(1)));
    let waiting = WAITING.with(|w| std::mem::take(&mut *w.borrow_mut()));
    for waker in waiting {
        waker.wake();
    }
}

/// Ends at the first arrival ([`arrived`]) at least [`ACCEPT_GRACE`] after `connected`, or on
/// the grid's first tick from then, whichever comes first.
pub fn after_connect(connected: Instant) -> Grace {
    let ready = connected + ACCEPT_GRACE;
    Grace {
        ready,
        seen: ARRIVALS.with(Cell::get),
        latest: Box::pin(tokio::time::sleep_until(grid::at_or_after(ready))),
    }
}

/// The wait returned by [`after_connect`].
pub struct Grace {
    ready: Instant,
    /// [`ARRIVALS`] when last looked at: an arrival is a count past it.
    seen: u64,
    latest: Pin<Box<Sleep>>,
}

impl Future for Grace {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.latest.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        let arrivals = ARRIVALS.with(Cell::get);
        if arrivals != self.seen {
            if Instant::now() >= self.ready {
                return Poll::Ready(());
            }
            // Too soon after the connect: the next one ends it.
            self.seen = arrivals;
        }
        WAITING.with(|w| w.borrow_mut().push(cx.waker().clone()));
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(g: &mut Grace) -> bool {
        Pin::new(g).poll(&mut Context::from_waker(Waker::noop())).is_ready()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_grace_ends_on_an_arrival_after_its_millisecond_not_before() {
        // Right after a tick, so the next one is a tick away.
        tokio::time::sleep_until(grid::after(Instant::now())).await;
        let connected = Instant::now();
        let mut grace = after_connect(connected);
        assert!(!poll(&mut grace), "nothing has arrived");
        arrived();
        if Instant::now() < connected + ACCEPT_GRACE {
            assert!(!poll(&mut grace), "an arrival inside the grace does not end it");
        }
        std::thread::sleep(ACCEPT_GRACE * 2);
        assert!(!poll(&mut grace), "time alone ends it only on the tick");
        arrived();
        assert!(poll(&mut grace), "the first arrival after the grace ends it");
        let t = Instant::now();
        assert!(t < grid::at_or_after(connected + ACCEPT_GRACE), "before the tick ({t:?})");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_arrivals_the_grace_ends_on_the_grid_tick() {
        tokio::time::sleep_until(grid::after(Instant::now())).await;
        let connected = Instant::now();
        after_connect(connected).await;
        let t = Instant::now();
        assert!(t >= grid::at_or_after(connected + ACCEPT_GRACE), "not before the tick ({t:?})");
        assert!(t - connected < grid::TICK + ACCEPT_GRACE * 20, "within a tick of the grace ({:?})", t - connected);
    }
}
