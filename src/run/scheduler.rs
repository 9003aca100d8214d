//! Rounds of probes: every target once per interval, at a stable offset inside the interval,
//! due on a tick of the probe thread's grid ([`grid`]).
//!
//! tokio-cron-scheduler ticks once per interval and each tick arms the round *after* the
//! current one, so every probe is queued a full interval ahead and the scheduler's own tick
//! jitter never shows up as probe lag. One dispatcher sleeps until the earliest armed probe and
//! spawns it then: one timer for the whole fleet, not a parked task and timer per target and
//! round (at 1,000 targets those wake-ups were a visible share of the daemon's CPU). A target
//! still running when it is due again is skipped (and counted), never probed twice at once. With an adaptive plan
//! ([`crate::decide::adaptive`]) a stretched target is armed only in one round of every `stretch`, and a
//! target in trouble `burst` times per round, evenly spaced from its offset. Rounds start on
//! multiples of the interval since the Unix epoch; with replicas ([`crate::decide::roster`]) each
//! instance starts only the probes the roster gives it at their scheduled time.

use crate::io::metrics::Metrics;
use crate::io::probe::{grid, Planned, Prober};
use crate::vocab::sample::Sample;
use chrono::{DateTime, Utc};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_cron_scheduler::{Job, JobScheduler};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The scheduler could not start.
#[derive(Debug, Error)]
#[error("scheduler: {0}")]
pub struct SchedulerError(String);

/// One target with its offset and its in-flight flag.
struct Slot {
    plan: Planned,
    offset: Duration,
    busy: AtomicBool,
    /// Target id, for the adaptive plan.
    id: String,
    /// Its phase among stretched rounds.
    phase: u64,
}

/// One probe armed for its due time: slot `slot` at `position` of `positions` in round `round`.
/// `at` is when it is scheduled on the wall clock, computed from the round's number and the
/// target's offset only: every replica of the region gets the same `at` for the same probe
/// whatever its own clock says, and asks the roster who owns the target then.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Arm {
    due: Instant,
    at: DateTime<Utc>,
    slot: usize,
    round: u64,
    position: u32,
    positions: u32,
}

/// The probes armed for the coming rounds, earliest first.
#[derive(Default)]
struct Armed(BinaryHeap<Reverse<Arm>>);

impl Armed {
    fn next_due(&self) -> Option<Instant> {
        self.0.peek().map(|Reverse(a)| a.due)
    }

    /// Takes the next probe due by `now`.
    fn pop_due(&mut self, now: Instant) -> Option<Arm> {
        if self.next_due()? <= now {
            self.0.pop().map(|Reverse(a)| a)
        } else {
            None
        }
    }
}

/// The thread the daemon's scheduler and its probes run on: a single-threaded runtime of their
/// own. A probe's clocks are then never held up by the pipeline's work on the daemon's workers,
/// and each socket wake-up of a streamed probe (about fifteen per probe) wakes one thread, not
/// also a second worker looking for work to steal (with one worker instead of two the whole
/// daemon used 7–8 % less CPU at 1,000 targets, docs/BENCHMARKS.md). One thread is plenty: a
/// probe is mostly waiting.
pub struct ProbeThread {
    handle: tokio::runtime::Handle,
    /// Dropping it ends the thread; probe tasks still there (after the drain) are dropped.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl ProbeThread {
    /// Starts the thread.
    pub fn start() -> Result<Self, SchedulerError> {
        let failed = |e: std::io::Error| SchedulerError(format!("cannot start the probe thread: {e}"));
        // Sockets and timers only: the process and signal drivers would be checked at every park.
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().map_err(failed)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("vigil-probes".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(failed)?;
        Ok(ProbeThread { handle, _stop: stop })
    }

    /// Runs the scheduler's rounds ([`Scheduler::run`]) on this thread until `shutdown` and the
    /// drain of the probes in flight.
    pub async fn run(
        &self,
        scheduler: Scheduler,
        tx: mpsc::Sender<Sample>,
        shutdown: CancellationToken,
    ) -> Result<(), SchedulerError> {
        let rounds = self.handle.spawn(async move { scheduler.run(tx, shutdown).await });
        rounds.await.unwrap_or_else(|e| Err(SchedulerError(format!("the scheduler task ended: {e}"))))
    }
}

/// Plans rounds and runs probes; cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    slots: Arc<Vec<Slot>>,
    prober: Prober,
    interval: Duration,
    permits: Arc<Semaphore>,
    metrics: Arc<Metrics>,
    tracker: TaskTracker,
    /// Cuts in-flight probes short when a stop must finish within its bound.
    abort: CancellationToken,
    /// The adaptive plan, when probing is cost-aware.
    adaptive: Option<crate::decide::adaptive::SharedPlan>,
    /// The region's members, when this instance shares its targets with replicas: it probes
    /// only the targets the roster gives it at each probe's scheduled time.
    roster: Option<crate::decide::roster::SharedRoster>,
    /// Probe positions per round under a plan (`probe.interval / probe.incident_interval`).
    max_burst: u32,
}

/// A stable offset in `[0, interval)` from the target id, so a fleet's probes spread evenly and
/// each target keeps its slot across restarts; whole ticks of the probe thread's grid
/// ([`grid`]), so targets sharing a tick start on one wake-up.
pub fn offset_for(id: &str, interval: Duration) -> Duration {
    // FNV-1a: unlike std's hasher, its output is fixed across Rust versions and builds.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let nanos = interval.as_nanos().clamp(1, u128::from(u64::MAX)) as u64;
    grid::floor(Duration::from_nanos(hash % nanos))
}

/// The number of the round `at` falls in: whole intervals since the Unix epoch.
fn round_of(at: DateTime<Utc>, interval: Duration) -> u64 {
    let period = interval.as_millis().max(1);
    u64::try_from(u128::try_from(at.timestamp_millis()).unwrap_or(0) / period).unwrap_or(0)
}

/// When round `round` starts on the wall clock.
fn round_wall_start(round: u64, interval: Duration) -> DateTime<Utc> {
    let ms = u128::from(round).saturating_mul(interval.as_millis().max(1));
    DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or_default()
}

impl Scheduler {
    /// A scheduler for `plans`, with at most `concurrency` probes in flight.
    pub fn new(
        plans: Vec<Planned>,
        prober: Prober,
        interval: Duration,
        concurrency: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        let slots = plans
            .into_iter()
            .map(|plan| {
                metrics.register_target(&plan.target);
                let id = plan.target.id();
                Slot {
                    offset: offset_for(&id, interval),
                    plan,
                    busy: AtomicBool::new(false),
                    phase: crate::decide::adaptive::plan::phase_for(&id),
                    id,
                }
            })
            .collect();
        Scheduler {
            slots: Arc::new(slots),
            prober,
            interval,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            metrics,
            tracker: TaskTracker::new(),
            abort: CancellationToken::new(),
            adaptive: None,
            roster: None,
            max_burst: 1,
        }
    }

    /// Follows the adaptive plan published in `plan` (targets it does not name keep the base
    /// interval), with up to `max_burst` probes a round for targets in trouble.
    pub fn with_plan(mut self, plan: crate::decide::adaptive::SharedPlan, max_burst: u32) -> Self {
        self.adaptive = Some(plan);
        self.max_burst = max_burst.max(1);
        self
    }

    /// Probes only the targets `roster` gives this member (replicas of a region).
    pub fn with_roster(mut self, roster: crate::decide::roster::SharedRoster) -> Self {
        self.roster = Some(roster);
        self
    }

    /// Cancelling this ends probes still in flight during a drain: they become a gap, not samples.
    pub fn abort_token(&self) -> CancellationToken {
        self.abort.clone()
    }

    /// The targets, in slot order.
    pub fn targets(&self) -> Vec<crate::vocab::target::Target> {
        self.slots.iter().map(|s| s.plan.target.clone()).collect()
    }

    /// Number of targets.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when there is nothing to probe.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// One round now, all targets at once (bounded by the concurrency limit), for `vigil probe`.
    pub async fn run_round(&self, only: Option<&str>) -> Vec<Sample> {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, slot) in self.slots.iter().enumerate() {
            if only.is_some_and(|id| id != slot.plan.target.id()) {
                continue;
            }
            let this = self.clone();
            tasks.spawn(async move {
                let _permit = this.permits.acquire().await.ok();
                let slot = &this.slots[i];
                (i, this.prober.probe(&slot.plan, Utc::now()).await)
            });
        }
        let mut out: Vec<(usize, Sample)> = Vec::new();
        while let Some(res) = tasks.join_next().await {
            if let Ok(pair) = res {
                out.push(pair);
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, s)| s).collect()
    }

    /// Arms one probe per target (per burst position under an adaptive plan) for round number
    /// `round` (counted from the Unix epoch), which starts at `round_start` on this process's
    /// clock; positions due before `not_before` (the part of a round already gone at a start)
    /// are left out.
    fn arm_round(&self, round: u64, round_start: Instant, not_before: Instant, armed: &mut Armed) {
        let round_wall = round_wall_start(round, self.interval);
        // Without a plan each target has one position a round; with one, every target has the
        // incident burst's positions and the plan, read when each comes due, says which probe.
        let positions = if self.adaptive.is_some() { self.max_burst } else { 1 };
        for (slot, s) in self.slots.iter().enumerate() {
            let offsets = crate::decide::adaptive::plan::burst_offsets(s.offset, self.interval, positions);
            for (position, offset) in (0..positions).zip(offsets) {
                // On a tick even when the interval or a burst's spacing is not whole ticks.
                let due = grid::at_or_after(round_start + offset);
                if due < not_before {
                    continue;
                }
                let at = round_wall + chrono::Duration::from_std(offset).unwrap_or_default();
                armed.0.push(Reverse(Arm { due, at, slot, round, position, positions }));
            }
        }
    }

    /// Starts every armed probe that is due, each in its own task.
    fn start_due(&self, armed: &mut Armed, tx: &mpsc::Sender<Sample>) {
        self.take_due(armed, Instant::now(), |arm| {
            let this = self.clone();
            let tx = tx.clone();
            self.tracker.spawn(async move { this.run_slot(arm.slot, arm.due, &tx).await });
        });
    }

    /// Hands `start` every armed probe due by `now` that the current plan wants; the rest of
    /// the positions due by then are dropped. The whole decision, with time passed in (tests
    /// step it through rounds and plan changes without waiting).
    fn take_due(&self, armed: &mut Armed, now: Instant, mut start: impl FnMut(Arm)) {
        while let Some(arm) = armed.pop_due(now) {
            if self.wanted(arm.slot, arm.round, arm.position, arm.positions) && self.owned(arm.slot, arm.at) {
                start(arm);
            }
        }
    }

    /// Sleeps until each armed probe is due and starts it, until none is left or `shutdown`.
    async fn dispatch(&self, armed: &mut Armed, tx: &mpsc::Sender<Sample>, shutdown: &CancellationToken) {
        while let Some(due) = armed.next_due() {
            // A stop wins over a probe due at the same moment: once the stop fires this member's
            // row goes, and its peers take what is due after they read that.
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(due) => self.start_due(armed, tx),
            }
        }
    }

    /// One round starting at `round_start`, each target at its offset as the daemon runs it:
    /// returns once every probe has started; the samples go to `tx`.
    #[cfg(any(test, feature = "test-support"))]
    pub async fn run_one_round(&self, round_start: Instant, tx: mpsc::Sender<Sample>, shutdown: &CancellationToken) {
        let mut armed = Armed::default();
        self.arm_round(0, round_start, round_start, &mut armed);
        self.dispatch(&mut armed, &tx, shutdown).await;
    }

    /// Whether this member probes slot `i` at `at` (always, without replicas).
    fn owned(&self, i: usize, at: DateTime<Utc>) -> bool {
        let Some(roster) = &self.roster else { return true };
        roster.read().map_or(true, |r| r.owns(&self.slots[i].id, at))
    }

    /// Whether the current plan probes slot `i` at this position of round `round`.
    fn wanted(&self, i: usize, round: u64, position: u32, positions: u32) -> bool {
        let slot = &self.slots[i];
        let cadence = self.adaptive.as_ref().and_then(|p| {
            let plan = p.read().ok()?;
            // The planner lists targets in slot order; the search covers a plan made otherwise.
            let entry = plan.targets.get(i).filter(|t| t.target == slot.id).or_else(|| plan.get(&slot.id));
            entry.map(|t| (t.stretch, t.burst))
        });
        let (stretch, burst) = cadence.unwrap_or((1, 1));
        crate::decide::adaptive::plan::due(round, slot.phase, stretch, burst, position, positions)
    }

    async fn run_slot(&self, i: usize, due: Instant, tx: &mpsc::Sender<Sample>) {
        let slot = &self.slots[i];
        let target = &slot.plan.target;
        if slot.busy.swap(true, Ordering::AcqRel) {
            tracing::warn!(target = %target, provider = %target.provider, model = %target.model,
                "previous probe still running; skipping this round");
            self.metrics.skipped(target);
            return;
        }
        let _permit = self.permits.acquire().await.ok();
        // Wall-clock due time derived from the monotonic one, so lag is measured, not hidden.
        let scheduled_at = Utc::now() - chrono::Duration::from_std(due.elapsed()).unwrap_or_default();
        let sample = tokio::select! {
            s = self.prober.probe(&slot.plan, scheduled_at) => s,
            _ = self.abort.cancelled() => {
                slot.busy.store(false, Ordering::Release);
                tracing::info!(target = %target, "probe cut short: stopping within the shutdown bound");
                return;
            }
        };
        slot.busy.store(false, Ordering::Release);
        tracing::debug!(target = %target, outcome = %sample.outcome, ttft_ms = ?sample.ttft_ms, "probe done");
        if tx.send(sample).await.is_err() {
            tracing::warn!(target = %target, "sample channel closed; sample dropped during shutdown");
        }
    }

    /// Runs rounds until `shutdown`, then waits for in-flight probes to finish.
    pub async fn run(&self, tx: mpsc::Sender<Sample>, shutdown: CancellationToken) -> Result<(), SchedulerError> {
        // Rounds start on multiples of the interval since the Unix epoch, so replicas of a
        // region (and this instance across restarts) agree on when each target is due.
        let (now, wall) = (Instant::now(), Utc::now());
        let round = round_of(wall, self.interval);
        let into = (wall - round_wall_start(round, self.interval)).to_std().unwrap_or_default();
        let start = now.checked_sub(into).unwrap_or(now);
        let mut armed = Armed::default();
        // The current round (what is left of it) and the next two: each tick, an interval from
        // now, arms a round that starts at least an interval later, so the tick's own jitter
        // never delays a probe.
        for r in 0..3 {
            self.arm_round(round + r, start + self.interval * r as u32, now, &mut armed);
        }
        let mut next = (round + 3, start + self.interval * 3);
        // The cron job only signals ticks; this loop owns the sample sender, so the channel
        // closes (and the pipeline drains) once the loop and every probe task have ended.
        let (tick_tx, mut tick_rx) = mpsc::unbounded_channel::<()>();
        let mut cron = JobScheduler::new().await.map_err(|e| SchedulerError(e.to_string()))?;
        let job = Job::new_repeated_async(self.interval, move |_id, _lock| {
            let _ = tick_tx.send(());
            Box::pin(async {})
        })
        .map_err(|e| SchedulerError(e.to_string()))?;
        cron.add(job).await.map_err(|e| SchedulerError(e.to_string()))?;
        cron.start().await.map_err(|e| SchedulerError(e.to_string()))?;
        tracing::info!(targets = self.slots.len(), interval = %humantime::format_duration(self.interval), "probing");
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                tick = tick_rx.recv() => {
                    if tick.is_none() {
                        break;
                    }
                    self.arm_round(next.0, next.1, next.1, &mut armed);
                    next = (next.0 + 1, next.1 + self.interval);
                }
                // Rounds are queued before they start; only an empty fleet leaves nothing to dispatch.
                _ = self.dispatch(&mut armed, &tx, &shutdown), if armed.next_due().is_some() => {}
            }
        }
        let _ = cron.shutdown().await;
        self.tracker.close();
        let in_flight = self.slots.iter().filter(|s| s.busy.load(Ordering::Acquire)).count();
        if in_flight > 0 {
            tracing::info!(in_flight, "draining in-flight probes");
        }
        self.tracker.wait().await;
        drop(tx);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::adaptive::{PlanSettings, Planner, SharedPlan};
    use crate::vocab::target::Target;

    /// A scheduler over `n` plain HTTP targets (never dialled here) following a plan with
    /// `probe.interval = 60s` and `probe.incident_interval = incident`, and the planner writing it.
    fn planned(n: usize, incident: Duration) -> (Scheduler, Planner) {
        let mut toml = String::from("[probe]\ninterval = \"60s\"\n");
        for i in 0..n {
            toml.push_str(&format!(
                "[[provider]]\nname = \"t{i}\"\nkind = \"http\"\nbase_url = \"http://127.0.0.1:9/\"\n"
            ));
        }
        let config = crate::config::Config::from_toml(&toml, &std::collections::BTreeMap::new()).expect("config");
        let plans = Planned::all(&config.providers, "test-1");
        let targets: Vec<Target> = plans.iter().map(|p| p.target.clone()).collect();
        let metrics = Arc::new(Metrics::new("test-1").expect("registry"));
        let interval = config.probe.interval;
        let settings = PlanSettings {
            base: interval,
            max_interval: interval * 5,
            incident_interval: incident,
            daily_budget_usd: 1.0,
        };
        let shared = SharedPlan::default();
        let planner = Planner::with_settings(settings, targets, shared.clone());
        let scheduler = Scheduler::new(plans, Prober::new(config.probe.clone(), &[]), interval, 8, metrics)
            .with_plan(shared, settings.burst());
        (scheduler, planner)
    }

    /// Replans with the targets whose slot `trouble` names in trouble (the rest calm).
    fn replan(planner: &mut Planner, trouble: &dyn Fn(usize) -> bool) {
        let targets = planner.targets().to_vec();
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z").expect("time").to_utc();
        planner.replan(0.0, &|t| targets.iter().position(|x| x == t).is_some_and(trouble), at);
    }

    /// Runs `rounds` rounds from `t0` as the daemon does, with injected time stepped tick by
    /// tick instead of slept; `change(now)` may replan before each tick's starts. Returns every
    /// start as (slot, due).
    fn simulate(s: &Scheduler, t0: Instant, rounds: u32, mut change: impl FnMut(Instant)) -> Vec<(usize, Instant)> {
        let mut armed = Armed::default();
        for r in 0..rounds {
            s.arm_round(u64::from(r), t0 + s.interval * r, t0, &mut armed);
        }
        let mut started = Vec::new();
        let mut now = t0;
        while now < t0 + s.interval * rounds {
            change(now);
            s.take_due(&mut armed, now, |arm| started.push((arm.slot, arm.due)));
            now += grid::TICK;
        }
        assert!(armed.next_due().is_none(), "every armed position came due");
        started
    }

    /// The starts of slot `i`, in order.
    fn starts_of(started: &[(usize, Instant)], i: usize) -> Vec<Instant> {
        let mut v: Vec<Instant> = started.iter().filter(|(s, _)| *s == i).map(|(_, d)| *d).collect();
        v.sort();
        v
    }

    #[test]
    fn a_mode_change_at_the_same_interval_neither_moves_a_target_nor_adds_a_probe() {
        let (s, mut planner) = planned(40, Duration::from_secs(60));
        assert_eq!(s.max_burst, 1);
        replan(&mut planner, &|_| false);
        let t0 = grid::at_or_after(Instant::now());
        // Half the fleet falls into trouble 90.05 s in (mid-round: some have had this round's
        // probe, some not), and recovers at 210.05 s; each switch is logged as a mode change.
        let (fail, recover) = (t0 + Duration::from_millis(90_050), t0 + Duration::from_millis(210_050));
        let (mut failed, mut recovered) = (false, false);
        let started = simulate(&s, t0, 5, |now| {
            if now >= fail && !failed {
                failed = true;
                replan(&mut planner, &|i| i % 2 == 0);
                assert_eq!(planner.current().targets[0].mode, crate::decide::adaptive::Mode::Incident);
            }
            if now >= recover && !recovered {
                recovered = true;
                replan(&mut planner, &|_| false);
            }
        });
        assert!(failed && recovered);
        for (i, slot) in s.slots.iter().enumerate() {
            let due: Vec<Instant> = (0..5).map(|r| t0 + slot.offset + s.interval * r).collect();
            assert_eq!(starts_of(&started, i), due, "slot {i}: once a round at its own offset, whatever its mode");
        }
        assert_eq!(started.len(), 40 * 5);
    }

    #[test]
    fn two_members_start_every_probe_once_and_a_joiner_takes_its_share_at_one_probe() {
        use crate::decide::roster::Roster;
        use crate::vocab::member::Member;
        let epoch = DateTime::UNIX_EPOCH;
        let member = |id: &str, active_s: i64| Member {
            region: "test-1".into(),
            id: id.into(),
            host: "h".into(),
            started_at: epoch,
            heartbeat_at: epoch,
            active_from: epoch + chrono::Duration::seconds(active_s),
        };
        // b joins 150 s in: mid round 2, so some of its targets change hands in that round.
        let rows = vec![member("a", 0), member("b", 150)];
        let view = |me: Member| Arc::new(std::sync::RwLock::new(Roster::read(me, rows.clone(), epoch, Duration::MAX)));
        let (a, _) = planned(40, Duration::from_secs(60));
        let (b, _) = planned(40, Duration::from_secs(60));
        let (a, b) = (a.with_roster(view(member("a", 0))), b.with_roster(view(member("b", 150))));
        let t0 = grid::at_or_after(Instant::now());
        let (by_a, by_b) = (simulate(&a, t0, 5, |_| ()), simulate(&b, t0, 5, |_| ()));
        let join = t0 + Duration::from_secs(150);
        assert!(by_b.iter().all(|(_, due)| *due >= join), "nothing before its start");
        for (i, slot) in a.slots.iter().enumerate() {
            let mut starts = starts_of(&by_a, i);
            starts.extend(starts_of(&by_b, i));
            starts.sort();
            let due: Vec<Instant> = (0..5).map(|r| t0 + slot.offset + a.interval * r).collect();
            assert_eq!(starts, due, "slot {i}: once a round between the two, never twice, never skipped");
        }
        let moved = (0..40).filter(|i| !starts_of(&by_b, *i).is_empty()).count();
        assert!(moved > 5 && moved < 35, "b takes about half: {moved}");
    }

    #[test]
    fn a_shorter_incident_interval_adds_only_the_bursts_positions_at_the_targets_own_offset() {
        let incident = Duration::from_secs(20);
        let (s, mut planner) = planned(40, incident);
        assert_eq!(s.max_burst, 3);
        replan(&mut planner, &|_| false);
        let t0 = grid::at_or_after(Instant::now());
        let (fail, recover) = (t0 + Duration::from_millis(90_050), t0 + Duration::from_millis(210_050));
        let (mut failed, mut recovered) = (false, false);
        let started = simulate(&s, t0, 5, |now| {
            if now >= fail && !failed {
                failed = true;
                replan(&mut planner, &|i| i % 2 == 0);
            }
            if now >= recover && !recovered {
                recovered = true;
                replan(&mut planner, &|_| false);
            }
        });
        for (i, slot) in s.slots.iter().enumerate() {
            let calm = (0..5).map(|r| t0 + slot.offset + s.interval * r);
            let mut due: Vec<Instant> = calm.collect();
            if i % 2 == 0 {
                // While in trouble: every 20 s on the target's own offset (its calm probes among them).
                let first = slot.offset.as_nanos() % incident.as_nanos();
                let mut at = t0 + Duration::from_nanos(u64::try_from(first).expect("small"));
                while at < t0 + s.interval * 5 {
                    if at > fail && at < recover && !due.contains(&at) {
                        due.push(at);
                    }
                    at += incident;
                }
                due.sort();
            }
            assert_eq!(starts_of(&started, i), due, "slot {i}");
        }
    }

    #[test]
    fn offsets_are_stable_and_inside_the_interval() {
        let i = Duration::from_secs(60);
        let a = offset_for("openrouter/m@DeepInfra", i);
        assert_eq!(a, offset_for("openrouter/m@DeepInfra", i));
        assert!(a < i);
        let offsets: Vec<Duration> = (0..1000).map(|n| offset_for(&format!("p/m{n}"), i)).collect();
        let spread: std::collections::HashSet<u64> = offsets.iter().map(|o| o.as_secs() / 6).collect();
        assert_eq!(spread.len(), 10, "1,000 targets fill every tenth of the interval");
        assert!(offsets.iter().all(|o| grid::floor(*o) == *o), "every offset is whole ticks, so starts share wake-ups");
        let mut per_tick: std::collections::HashMap<&Duration, usize> = std::collections::HashMap::new();
        for o in &offsets {
            *per_tick.entry(o).or_default() += 1;
        }
        let most = per_tick.values().max().copied().unwrap_or(0);
        assert!(most <= 10, "no tick starts more than 1 % of the fleet at once: {most}");
    }
}
