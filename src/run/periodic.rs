//! The one loop behind every task that does something every so often (credit, prices, status
//! pages, models lists, store upkeep, the canary): wait for the tick or the stop, run one round,
//! and drop a round still in flight at the stop. A round of the region's once-only work is run
//! only while this replica leads. The adapters only know how to do one round.

use crate::decide::roster::LeaderGate;
use std::future::Future;
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// When a periodic task's rounds come due, and whether here.
#[derive(Debug, Clone)]
pub struct Schedule {
    first: Instant,
    every: Duration,
    missed: MissedTickBehavior,
    /// Rounds due while it is closed are skipped (the region's once-only work on a follower).
    gate: LeaderGate,
}

impl Schedule {
    /// A round now and then one every `every`; a round that ran late is not caught up in a burst,
    /// the next one is an interval after it.
    pub fn every(every: Duration) -> Self {
        Schedule { first: Instant::now(), every, missed: MissedTickBehavior::Delay, gate: LeaderGate::default() }
    }

    /// The first round `delay` from now instead of at once.
    pub fn first_after(self, delay: Duration) -> Self {
        Schedule { first: Instant::now() + delay, ..self }
    }

    /// The first round at `at` (a stable phase shared with other tasks started together).
    pub fn first_at(self, at: Instant) -> Self {
        Schedule { first: at, ..self }
    }

    /// A side job's schedule (a canary, a check, a long-prompt size): every `every` from
    /// `start`, first at the stable offset of `key` within `first_within` (at most `every`), so
    /// the jobs started together spread out and keep their phases; missed rounds are skipped.
    pub fn spread(key: &str, every: Duration, start: Instant, first_within: Option<Duration>) -> Self {
        let span = first_within.map_or(every, |s| s.min(every));
        Schedule::every(every).first_at(start + crate::run::scheduler::offset_for(key, span)).skipping_missed()
    }

    /// Rounds missed while one ran long are skipped, so later rounds keep their phase.
    pub fn skipping_missed(self) -> Self {
        Schedule { missed: MissedTickBehavior::Skip, ..self }
    }

    /// Rounds run only while `gate` is open: on the region's leader (always without replicas).
    pub fn led_by(self, gate: LeaderGate) -> Self {
        Schedule { gate, ..self }
    }
}

/// Runs `round` on `schedule` until `shutdown` (a round in flight then is dropped: rounds are
/// reads and idempotent writes that the next start repeats) or until a round returns `None`.
/// `state` is handed from each round to the next.
pub async fn every<S, F, Fut>(schedule: Schedule, shutdown: &CancellationToken, mut state: S, mut round: F)
where
    F: FnMut(S) -> Fut,
    Fut: Future<Output = Option<S>>,
{
    // A zero period would spin; the config never gives one, a test might.
    let period = schedule.every.max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(schedule.first, period);
    tick.set_missed_tick_behavior(schedule.missed);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !schedule.gate.open(chrono::Utc::now()) {
            continue;
        }
        state = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = round(state) => match next {
                Some(s) => s,
                None => return,
            },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn rounds_come_on_schedule_carry_state_and_stop_when_a_round_says_so() {
        let seen = Arc::new(AtomicU32::new(0));
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        let s = seen.clone();
        every(Schedule::every(Duration::from_secs(10)).first_after(Duration::from_secs(3)), &shutdown, 0u32, |n| {
            let s = s.clone();
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                (n < 2).then_some(n + 1)
            }
        })
        .await;
        assert_eq!(seen.load(Ordering::SeqCst), 3, "rounds 0, 1 and 2; the third said stop");
        assert_eq!(started.elapsed(), Duration::from_secs(23), "first after 3 s, then every 10 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_skips_the_rounds_of_the_regions_once_only_work() {
        use crate::decide::roster::{LeaderGate, Roster};
        use crate::vocab::member::Member;
        let t0 = chrono::DateTime::UNIX_EPOCH;
        let member = |id: &str, started_s: i64| Member {
            region: "eu".into(),
            id: id.into(),
            host: "h".into(),
            started_at: t0 + chrono::Duration::seconds(started_s),
            heartbeat_at: chrono::Utc::now(),
            active_from: t0,
        };
        let rows = vec![member("old", 0), member("new", 10)];
        let gate = |me: Member| {
            let roster = Roster::read(me, rows.clone(), chrono::Utc::now(), Duration::from_secs(3600));
            LeaderGate::of(Arc::new(std::sync::RwLock::new(roster)))
        };
        for (me, expected) in [(member("new", 10), 0), (member("old", 0), 3)] {
            let (seen, shutdown) = (Arc::new(AtomicU32::new(0)), CancellationToken::new());
            let stop = shutdown.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(25)).await;
                stop.cancel();
            });
            let s = seen.clone();
            let schedule = Schedule::every(Duration::from_secs(10)).led_by(gate(me));
            every(schedule, &shutdown, (), |()| {
                let s = s.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    Some(())
                }
            })
            .await;
            assert_eq!(seen.load(Ordering::SeqCst), expected, "rounds at 0, 10 and 20 s run on the leader only");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_drops_the_round_in_flight_and_ends_the_wait() {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop.cancel();
        });
        let started = Instant::now();
        every(Schedule::every(Duration::from_secs(60)), &shutdown, (), |()| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Some(())
        })
        .await;
        assert_eq!(started.elapsed(), Duration::from_secs(5), "the hour-long round is dropped at the stop");
    }
}
