//! The pipeline's only road to storage besides the sample writer: every store call the decision
//! stages need (breaker history and state, rollups, alert state, the outbox, reading other regions'
//! samples and credit readings, reading baselines back) runs here, in its own task, with a short
//! timeout. The pipeline sends [`Record`]s and [`Query`]s and picks up [`Reply`]s between
//! samples; it never awaits the database, so a database that hangs or refuses cannot stop probes
//! from being counted, judged and alerted on.
//!
//! Nothing is lost while storage is down: breaker transitions and outbox items that cannot be
//! written go to an fsync'd spool (`data_dir/spool-records`) at once and are replayed in order;
//! states where only the newest matters (breaker states, rollups, alert state) are kept in memory,
//! newest wins, retried with backoff, and spooled at shutdown.

use super::spool::SpoolError;
use super::spool::SpoolOf;
use super::SampleQuery;
use super::Store;
use super::StoreError;
use crate::vocab::records::BalanceReading;
use crate::vocab::records::BreakerRecord;
use crate::vocab::records::BreakerTransition;
use crate::vocab::records::OutboxItem;
use crate::vocab::records::Rollup;
use crate::vocab::records::TargetStatus;
use crate::vocab::sample::Sample;
use crate::vocab::target::{Name, Target};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_util::sync::CancellationToken;

/// Stored hours a load holds at once, read but not yet folded in by the pipeline: one folding
/// and one read ahead. Unpaced, a link that reads faster than the pipeline folds (a fast
/// database beside a busy pipeline) queued every hour of the week it had read, tens of MB each
/// at 10,000 targets.
pub const HOURS_AHEAD: usize = 2;
/// Longest one store call of the link may take; a hanging database costs this, not a stall.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// First and longest wait between attempts to write what is pending.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Context reads skipped in a row while the link's store calls are failing.
const CONTEXT_SKIPS_WHILE_FAILING: u32 = 3;
/// Longest a store call may take while stopping.
const STOP_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Most long-prompt probe runs a load reads back (a week of 96 a day for 100 target-sizes).
pub const WORKLOAD_LOAD_LIMIT: i64 = 100_000;
/// Targets whose newest samples go in one reply ([`Reply::LoadedNewest`]): the pipeline takes
/// them in while the rest are read, and never holds every target's at once.
pub const NEWEST_PER_REPLY: usize = 256;
/// Most spooled records read back at once in a replay: a line can carry a whole part's rollups.
const REPLAY_PART: usize = 64;
/// Most ordered records held in memory while neither the store nor the spool takes them (the
/// spool's disk full while the store is down). An older evaluation's engine state is dropped
/// when a newer one of its region is held (its notifications stay), so what is held is small
/// records; past this the newest are reported lost.
pub const HELD_MAX: usize = 10_000;
/// Store calls failing for longer than this make the instance not ready.
const UNHEALTHY_AFTER: Duration = Duration::from_secs(60);

/// A record the link stores on the pipeline's behalf (also the spool's line format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// One breaker transition (history; appended).
    Transition(BreakerTransition),
    /// Notifications for the delivery worker.
    Outbox(#[serde(with = "items")] Vec<OutboxItem>),
    /// A breaker's current state (newest wins).
    Breaker(BreakerRecord),
    /// Hourly rollups (newest per target × metric × hour wins).
    Rollups(#[serde(with = "items")] Vec<Rollup>),
    /// The alert engine's state of a region (newest wins).
    AlertState {
        /// Region.
        region: String,
        /// Engine state.
        state: crate::vocab::records::StateJson,
    },
    /// What this region sees of each target, for the other regions' scope (newest wins; not
    /// kept across a stop: it is stale by the next start).
    TargetStatus(#[serde(with = "items")] Vec<TargetStatus>),
    /// Canary runs (appended; idempotent on their ids).
    Canary(#[serde(with = "items")] Vec<crate::vocab::canary::CanaryRun>),
    /// Golden check runs (appended; idempotent on their ids).
    Check(#[serde(with = "items")] Vec<crate::vocab::check::CheckRun>),
    /// Long-prompt probe runs (appended; idempotent on their ids).
    Workload(#[serde(with = "items")] Vec<crate::vocab::workload::WorkloadRun>),
    /// Chain heads as they moved (appended; idempotent on region, chain and time).
    ChainHeads(#[serde(with = "items")] Vec<crate::vocab::chain_head::ChainHead>),
    /// Notifications a replica held while it followed, handed over when it takes the region's
    /// lead: each is enqueued unless an item of the same incident, status and channel was
    /// enqueued by the region since `since` (the old leader sent it before it died).
    Takeover {
        /// Region.
        region: String,
        /// How far back the old leader's items are looked for.
        since: DateTime<Utc>,
        /// The held notifications' items.
        items: Vec<OutboxItem>,
    },
    /// One evaluation's notifications with the engine state that made them, stored in one
    /// transaction: a kill between the two would leave a page without the incident it opened
    /// (never resolved) or an incident without its page.
    Evaluated {
        /// Region.
        region: String,
        /// Engine state after the evaluation.
        state: crate::vocab::records::StateJson,
        /// Its notifications.
        items: Vec<OutboxItem>,
    },
}

/// Enqueues the `items` of `region` that the region has not enqueued since `since`: the same
/// incident (`dedup_key`), status and channel counts as sent.
async fn enqueue_unsent(
    store: &dyn Store,
    region: &str,
    since: DateTime<Utc>,
    items: Vec<OutboxItem>,
) -> Result<(), StoreError> {
    let key = |i: &OutboxItem| (i.dedup_key.clone(), i.payload.get("status").cloned(), i.channel.clone());
    let until = Utc::now() + chrono::Duration::days(1);
    let sent: std::collections::HashSet<_> =
        store.outbox_between(Some(region), since, until).await?.iter().map(key).collect();
    let unsent: Vec<OutboxItem> = items.into_iter().filter(|i| !sent.contains(&key(i))).collect();
    if unsent.is_empty() {
        return Ok(());
    }
    tracing::info!(region, items = unsent.len(), "sending what the region's old leader had not sent");
    store.enqueue(&unsent).await
}

/// The newest alert state of `region` in the record spool an earlier run left (`AlertState` or
/// `Evaluated`), if any. It is newer than the stored one: the link writes nothing past a
/// non-empty spool. A start restores it rather than the stored state, or the spooled pages would
/// be replayed for incidents its engine never heard of (paged, never resolved).
pub fn newest_spooled_alert_state(spool: &SpoolOf<Record>, region: &str) -> Option<crate::vocab::records::StateJson> {
    if spool.is_empty() {
        return None;
    }
    spool.peek_all().iter().rev().find_map(|r| alert_state_of(r, region)).cloned()
}

/// The engine state of `region` that `record` carries, if any.
pub fn alert_state_of<'a>(record: &'a Record, region: &str) -> Option<&'a crate::vocab::records::StateJson> {
    match record {
        Record::AlertState { region: r, state } | Record::Evaluated { region: r, state, .. } if r == region => {
            Some(state)
        }
        _ => None,
    }
}

/// A list record's spool line: `{"record": "rollups", "items": […]}`. A tagged line must be an
/// object, and serde refuses to tag a bare list: before this, outbox items, rollups and canary
/// runs that had to be spooled were logged as lost ("cannot serialize tagged newtype variant").
mod items {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    struct Out<'a, T> {
        items: &'a [T],
    }

    #[derive(Deserialize)]
    struct In<T> {
        items: Vec<T>,
    }

    #[allow(clippy::ptr_arg)] // serde hands `with` functions the field's own type
    pub fn serialize<S: Serializer, T: Serialize>(v: &Vec<T>, s: S) -> Result<S::Ok, S::Error> {
        Out { items: v.as_slice() }.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        In::deserialize(d).map(|i| i.items)
    }
}

/// A question the pipeline asks; answered later by a [`Reply`].
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// This region's newest samples of each target (when `newest` is given), its stored rollups
    /// of `[from, until)` hour by hour, its long-prompt runs, then its breakers (none read when
    /// `breakers` is false: the start restored them).
    Load {
        /// Region.
        region: String,
        /// First hour of the window.
        from: DateTime<Utc>,
        /// End of the window.
        until: DateTime<Utc>,
        /// Whether to read the stored breakers too.
        breakers: bool,
        /// The targets whose newest samples to read first (none once they were).
        newest: Option<Newest>,
    },
    /// Rollups of hours leaving the baseline window, `[from, until)`.
    Expiring {
        /// Region.
        region: String,
        /// First hour.
        from: DateTime<Utc>,
        /// End.
        until: DateTime<Utc>,
    },
    /// This region's saved alert engine state (asked again while a start could not read it).
    AlertState {
        /// Region.
        region: String,
    },
}

/// Which targets' newest samples a [`Query::Load`] reads, and how many of each.
#[derive(Debug, Clone, PartialEq)]
pub struct Newest {
    /// The targets, in the order their replies come.
    pub targets: Vec<Target>,
    /// Samples of each, newest first.
    pub per_target: i64,
}

/// What the link answers.
#[derive(Debug)]
pub enum Reply {
    /// The newest stored samples of up to [`NEWEST_PER_REPLY`] targets ([`Query::Load`]), each
    /// newest first; `done` on the last of them.
    LoadedNewest {
        /// Each target with its samples (none for a target never stored).
        samples: Vec<(Target, Vec<Sample>)>,
        /// Whether every target asked has now been answered.
        done: bool,
    },
    /// One hour of the stored window ([`Query::Load`]), oldest first.
    LoadedHour {
        /// The end of that hour: a load cut short resumes here.
        until: DateTime<Utc>,
        /// Its rollups.
        rollups: Vec<Rollup>,
        /// Held until this reply is dropped, after the hour is folded in: the link reads on only
        /// while fewer than [`HOURS_AHEAD`] hours wait.
        read_ahead: ReadAhead,
    },
    /// The long-prompt probe runs of the stored window ([`Query::Load`]), oldest first.
    LoadedWorkloads(Vec<crate::vocab::workload::WorkloadRun>),
    /// The end of a load: this region's stored breakers.
    Loaded(Vec<BreakerRecord>),
    /// A load failed part-way; ask again later (what arrived is kept).
    LoadFailed(String),
    /// Rollups leaving the window ([`Query::Expiring`]).
    Expiring {
        /// The stored rollups of those hours.
        rollups: Vec<Rollup>,
        /// End of the range asked.
        until: DateTime<Utc>,
    },
    /// Reading hours leaving the window failed; ask again later.
    ExpiringFailed(String),
    /// The saved alert state ([`Query::AlertState`]); `None` when none was ever saved.
    AlertState(Option<crate::vocab::records::StateJson>),
    /// Reading the saved alert state failed; ask again later.
    AlertStateFailed(String),
    /// Other regions' latest samples and credit readings, refreshed every interval.
    Context(Context),
}

/// What other instances and the credit poller stored, as of one read.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// When it was read.
    pub read_at: Option<DateTime<Utc>>,
    /// The latest sample of each target in every other region (recent ones only).
    pub elsewhere: Vec<Sample>,
    /// Credit readings of the last day per watched provider, oldest first.
    pub credits: BTreeMap<String, Vec<BalanceReading>>,
    /// Every region's recent `target_status` rows (this one's included).
    pub statuses: Vec<TargetStatus>,
    /// The drills still running (every region's); `None` when they could not be read, so the
    /// last known ones stay honoured (each runs out by its own time).
    pub drills: Option<Vec<crate::vocab::drill::Drill>>,
}

/// Whether the link's store calls succeed, for `/readyz` and the log.
#[derive(Debug, Default)]
pub struct LinkHealth {
    state: Mutex<LinkState>,
}

#[derive(Debug, Default)]
struct LinkState {
    failing_since: Option<DateTime<Utc>>,
    last_error: Option<String>,
    spooled: u64,
    held: u64,
}

impl LinkHealth {
    /// `Ok` unless store calls have failed for over a minute; else why.
    pub fn ready_at(&self, now: DateTime<Utc>) -> Result<(), String> {
        let s = self.state.lock().map_err(|_| "link health lock poisoned".to_owned())?;
        match s.failing_since {
            Some(since) if (now - since).to_std().unwrap_or_default() >= UNHEALTHY_AFTER => Err(format!(
                "storage calls failing since {}: {}; {} records spooled{}",
                since.to_rfc3339_opts(SecondsFormat::Secs, true),
                s.last_error.as_deref().unwrap_or("unknown error"),
                s.spooled,
                super::writer::held_note(s.held)
            )),
            _ => Ok(()),
        }
    }

    /// True while the last store call failed.
    pub fn is_failing(&self) -> bool {
        self.state.lock().map(|s| s.failing_since.is_some()).unwrap_or(true)
    }

    /// Records waiting in the record spool.
    pub fn spooled(&self) -> u64 {
        self.state.lock().map(|s| s.spooled).unwrap_or(0)
    }

    /// Ordered records held in memory because the spool refused them while storage was down.
    pub fn held(&self) -> u64 {
        self.state.lock().map(|s| s.held).unwrap_or(0)
    }

    fn ok(&self) {
        if let Ok(mut s) = self.state.lock() {
            if s.failing_since.take().is_some() {
                tracing::info!("storage calls succeed again");
            }
        }
    }

    fn failed(&self, error: &StoreError) {
        if let Ok(mut s) = self.state.lock() {
            s.failing_since.get_or_insert_with(Utc::now);
            s.last_error = Some(error.to_string());
        }
    }

    fn set_spooled(&self, n: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.spooled = n;
        }
    }

    fn set_held(&self, n: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.held = n as u64;
        }
    }
}

/// The pipeline's end of the link.
pub struct LinkHandle {
    records: mpsc::UnboundedSender<Record>,
    queries: mpsc::UnboundedSender<Query>,
    replies: mpsc::UnboundedReceiver<Reply>,
}

impl LinkHandle {
    /// Queues a record for storage; never waits.
    pub fn store(&self, record: Record) {
        if self.records.send(record).is_err() {
            tracing::error!("storage link stopped; record not stored");
        }
    }

    /// Asks a question; the answer arrives through [`LinkHandle::reply`].
    pub fn ask(&self, query: Query) {
        if self.queries.send(query).is_err() {
            tracing::error!("storage link stopped; query dropped");
        }
    }

    /// The next answer (cancel-safe, for `select!`).
    pub async fn reply(&mut self) -> Option<Reply> {
        self.replies.recv().await
    }

    /// An answer already waiting, if any.
    pub fn try_reply(&mut self) -> Option<Reply> {
        self.replies.try_recv().ok()
    }
}

/// One of a load's [`HOURS_AHEAD`] places, taken while its hour is read and given back when the
/// reply carrying it is dropped; `ReadAhead::default()` holds none (a reply built elsewhere).
#[derive(Debug, Default)]
pub struct ReadAhead {
    /// Given back on drop; never read.
    _place: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// What the link reads every interval for the alert stage and the status page.
#[derive(Debug, Clone)]
pub struct ContextPlan {
    /// This instance's region (its own samples are not "elsewhere").
    pub region: String,
    /// How often to read, and how far back other regions' samples count as recent (3 ×).
    pub every: Duration,
    /// Providers whose credit is watched.
    pub credit_providers: Vec<String>,
}

/// The task side of the link. Build with [`Link::new`], run with [`Link::run`].
pub struct Link {
    store: Arc<dyn Store>,
    spool: Arc<Mutex<SpoolOf<Record>>>,
    health: Arc<LinkHealth>,
    plan: Option<ContextPlan>,
    call_timeout: Duration,
    records: mpsc::UnboundedReceiver<Record>,
    queries: mpsc::UnboundedReceiver<Query>,
    replies: mpsc::UnboundedSender<Reply>,
    pending: Pending,
    /// Ordered records the spool refused (its disk full) while storage was down, oldest first:
    /// behind the spool's and ahead of any later ones.
    held: Held,
    backoff: Duration,
    next_attempt: Instant,
    /// Context reads skipped since the last one made while calls were failing.
    context_skipped: u32,
    /// Fires when the daemon's stop begins, before the channels close (see `with_stop_signal`).
    stop_signal: Option<CancellationToken>,
    /// The process's slot for held records across reloads (see `with_carry`).
    carry: Option<super::carry::Slot<Record>>,
}

/// Newest-wins states not yet stored, and whether the spool must be replayed first.
#[derive(Default)]
struct Pending {
    breakers: BTreeMap<String, BreakerRecord>,
    rollups: BTreeMap<(Target, Name, DateTime<Utc>), Rollup>,
    alert_states: BTreeMap<String, crate::vocab::records::StateJson>,
    statuses: Option<Vec<TargetStatus>>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.breakers.is_empty() && self.rollups.is_empty() && self.alert_states.is_empty() && self.statuses.is_none()
    }

    /// Queues a state (newest wins) and hands an ordered record back.
    fn take(&mut self, r: Record) -> Option<Record> {
        self.queue(r, true)
    }

    /// As [`Pending::take`] for a record read back from the spool: older than anything queued
    /// since, so it fills only keys with nothing newer waiting.
    fn take_spooled(&mut self, r: Record) -> Option<Record> {
        self.queue(r, false)
    }

    fn queue(&mut self, r: Record, newest: bool) -> Option<Record> {
        fn put<K: Ord, V>(map: &mut BTreeMap<K, V>, k: K, v: V, newest: bool) {
            if newest {
                map.insert(k, v);
            } else {
                map.entry(k).or_insert(v);
            }
        }
        match r {
            Record::Breaker(b) => {
                put(&mut self.breakers, format!("{}|{}", b.target.region, b.target.id()), b, newest);
                None
            }
            Record::Rollups(rs) => {
                for r in rs {
                    let key = (r.target.clone(), r.metric.clone(), r.hour);
                    put(&mut self.rollups, key, r, newest);
                }
                None
            }
            Record::AlertState { region, state } => {
                put(&mut self.alert_states, region, state, newest);
                None
            }
            Record::TargetStatus(rows) => {
                self.statuses = Some(rows);
                None
            }
            Record::Evaluated { region, state, items } => {
                // It carries the region's newest state: an older one still waiting is superseded
                // (a spooled one, replayed, never overwrites what is queued: it goes first).
                if newest {
                    self.alert_states.remove(&region);
                }
                Some(Record::Evaluated { region, state, items })
            }
            other => Some(other),
        }
    }

    /// Everything pending as records, for the spool at shutdown.
    fn drain(&mut self) -> Vec<Record> {
        let mut out: Vec<Record> = std::mem::take(&mut self.breakers).into_values().map(Record::Breaker).collect();
        let rollups: Vec<Rollup> = std::mem::take(&mut self.rollups).into_values().collect();
        if !rollups.is_empty() {
            out.push(Record::Rollups(rollups));
        }
        out.extend(
            std::mem::take(&mut self.alert_states)
                .into_iter()
                .map(|(region, state)| Record::AlertState { region, state }),
        );
        self.statuses = None;
        out
    }
}

/// Ordered records held in memory, oldest first (see [`Link::spool`]).
#[derive(Default)]
struct Held(std::collections::VecDeque<Record>);

impl Held {
    /// Holds `records` behind those held; returns how many did not fit under [`HELD_MAX`]. An
    /// evaluation's engine state supersedes the state of an older one of its region still held,
    /// which keeps only its notifications: held records never reach storage if the process dies,
    /// so nothing is given up that a kill would not lose anyway.
    fn hold(&mut self, records: Vec<Record>) -> usize {
        let mut lost = 0;
        for r in records {
            if let Record::Evaluated { region, .. } = &r {
                for older in self.0.iter_mut() {
                    if let Record::Evaluated { region: theirs, items, .. } = older {
                        if theirs == region {
                            *older = Record::Outbox(std::mem::take(items));
                        }
                    }
                }
                self.0.retain(|r| !matches!(r, Record::Outbox(items) if items.is_empty()));
            }
            if self.0.len() < HELD_MAX {
                self.0.push_back(r);
            } else {
                lost += 1;
            }
        }
        lost
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn take(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.0).into()
    }
}

impl Link {
    /// A link over `store`, spooling into `spool`; returns the task and the pipeline's handle.
    pub fn new(store: Arc<dyn Store>, spool: SpoolOf<Record>, plan: Option<ContextPlan>) -> (Link, LinkHandle) {
        let (rec_tx, rec_rx) = mpsc::unbounded_channel();
        let (q_tx, q_rx) = mpsc::unbounded_channel();
        let (r_tx, r_rx) = mpsc::unbounded_channel();
        let health = Arc::new(LinkHealth::default());
        health.set_spooled(spool.len());
        let link = Link {
            store,
            spool: Arc::new(Mutex::new(spool)),
            health,
            plan,
            call_timeout: CALL_TIMEOUT,
            records: rec_rx,
            queries: q_rx,
            replies: r_tx,
            pending: Pending::default(),
            held: Held::default(),
            backoff: RETRY_MIN,
            next_attempt: Instant::now(),
            context_skipped: 0,
            stop_signal: None,
            carry: None,
        };
        (link, LinkHandle { records: rec_tx, queries: q_tx, replies: r_rx })
    }

    /// Bounds every store call from the moment `stop` fires to [`STOP_CALL_TIMEOUT`], the call
    /// in flight included, and reads no more context. The link itself ends only when the
    /// pipeline's handle is dropped (after the probes drained); without this, a context read
    /// begun just before the stop (three calls of up to [`CALL_TIMEOUT`] each on a database
    /// gone dark) outlived the daemon's stop bound and the records pending were abandoned
    /// with the task instead of spooled.
    pub fn with_stop_signal(mut self, stop: CancellationToken) -> Self {
        self.stop_signal = Some(stop);
        self
    }

    /// Takes at its start the records an earlier link of this process left in `carry`, and
    /// leaves there at its stop what neither storage nor the spool took: a reload hands them
    /// on instead of losing them (see [`super::carry`]).
    pub fn with_carry(mut self, carry: super::carry::Slot<Record>) -> Self {
        self.carry = Some(carry);
        self
    }

    fn stop_begun(&self) -> bool {
        self.stop_signal.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Overrides [`CALL_TIMEOUT`] (tests use short ones).
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_call_timeout(mut self, d: Duration) -> Self {
        self.call_timeout = d;
        self
    }

    /// The shared health handle.
    pub fn health(&self) -> Arc<LinkHealth> {
        self.health.clone()
    }

    /// Runs until the pipeline drops its handle (after its last records) or `stop` fires; then
    /// makes one bounded attempt to store what is pending and spools the rest.
    pub async fn run(mut self, stop: CancellationToken) {
        // Behind what is spooled (older), ahead of anything this link is given.
        let carried = super::carry::Slot::take_over(self.carry.as_ref(), "records");
        if !carried.is_empty() {
            self.hold(carried, None);
        }
        let mut context = tokio::time::interval(self.plan.as_ref().map_or(Duration::from_secs(3600), |p| p.every));
        context.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut records_open = true;
        loop {
            let waiting = !self.pending.is_empty() || self.health.spooled() > 0 || !self.held.is_empty();
            let retry = waiting.then_some(self.next_attempt);
            tokio::select! {
                _ = stop.cancelled() => break,
                r = self.records.recv(), if records_open => match r {
                    Some(r) => {
                        self.accept(r).await;
                        self.take_queued().await;
                    }
                    None => records_open = false,
                },
                q = self.queries.recv() => match q {
                    Some(q) => self.answer(q).await,
                    None if !records_open => break,
                    None => {}
                },
                _ = sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => self.retry().await,
                _ = context.tick(), if self.plan.is_some() && !self.stop_begun() => self.read_context().await,
            }
            if !records_open && self.records.is_empty() && self.queries.is_closed() {
                break;
            }
        }
        self.finish().await;
    }

    /// Takes every record queued and writes what is pending when a write is due. Everything
    /// queued is taken before states are written, so a persist of a thousand breakers is one
    /// pass, not a thousand; and a state superseded while it waited is dropped, not written.
    async fn take_queued(&mut self) {
        while let Ok(r) = self.records.try_recv() {
            self.accept(r).await;
        }
        if !self.pending.is_empty() && Instant::now() >= self.next_attempt {
            self.retry().await;
        }
    }

    /// Stores an ordered record (transition, outbox items) now if nothing waits before it, else
    /// spools it; a newest-wins state joins the pending set for the next [`Link::retry`].
    pub async fn accept(&mut self, record: Record) {
        let Some(ordered) = self.pending.take(record) else { return };
        // Transitions and outbox items keep their order: behind the spool, and the records held
        // in memory, while they hold any.
        if self.health.spooled() == 0 && self.held.is_empty() && Instant::now() >= self.next_attempt {
            match self.write(&ordered).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "storage write failed; record spooled");
                    self.back_off();
                }
            }
        }
        self.spool(vec![ordered]).await;
    }

    /// Offers the records held in memory to the spool, replays the spool, writes what is still
    /// held, then writes pending states; backs off on failure.
    pub async fn retry(&mut self) {
        if !self.held.is_empty() && self.health.is_failing() {
            // While storage fails, the spool takes them once its disk has room (replayed in
            // order from there); while it answers, they go straight to it below.
            self.unhold().await;
        }
        let replayed = match self.replay().await {
            Ok(()) => self.write_held().await,
            Err(e) => Err(e),
        };
        if let Err(e) = replayed {
            tracing::warn!(error = %e, spooled = self.health.spooled(), held = self.health.held(),
                retry_in = ?self.backoff, "record spool replay failed");
            self.back_off();
            return;
        }
        let mut failed = None;
        // Each state is taken out while it is written and put back if the write fails: a copy of
        // everything pending was a third copy of every breaker after a region-wide trip.
        // Nothing can be queued meanwhile: records are taken only between calls.
        let keys: Vec<String> = self.pending.breakers.keys().cloned().collect();
        for key in keys {
            let Some(b) = self.pending.breakers.remove(&key) else { continue };
            let record = &b;
            if let Err(e) = self.call(|s| async move { s.save_breaker(record).await }).await {
                self.pending.breakers.insert(key, b);
                failed = Some(e);
                break;
            }
        }
        if failed.is_none() && !self.pending.rollups.is_empty() {
            let rollups: Vec<Rollup> = std::mem::take(&mut self.pending.rollups).into_values().collect();
            let all = &rollups;
            if let Err(e) = self.call(|s| async move { s.upsert_rollups(all).await }).await {
                self.pending.queue(Record::Rollups(rollups), true);
                failed = Some(e);
            }
        }
        if failed.is_none() {
            let states: Vec<(String, crate::vocab::records::StateJson)> =
                self.pending.alert_states.iter().map(|(r, s)| (r.clone(), s.clone())).collect();
            for (region, state) in states {
                let r = region.clone();
                match self.call(|s| async move { s.save_alert_state(&r, &state).await }).await {
                    Ok(()) => {
                        self.pending.alert_states.remove(&region);
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
        }
        if failed.is_none() {
            if let Some(rows) = self.pending.statuses.take() {
                let sent = &rows;
                if let Err(e) = self.call(|s| async move { s.publish_target_status(sent).await }).await {
                    // Records are taken only between calls, so nothing newer arrived meanwhile.
                    self.pending.statuses = Some(rows);
                    failed = Some(e);
                }
            }
        }
        match failed {
            None => {
                self.backoff = RETRY_MIN;
                self.next_attempt = Instant::now();
            }
            Some(e) => {
                tracing::warn!(error = %e, retry_in = ?self.backoff, "storage write failed; kept in memory for the next try");
                self.back_off();
            }
        }
    }

    async fn replay(&mut self) -> Result<(), StoreError> {
        while self.health.spooled() > 0 {
            let mut replay = super::spool::Replay::oldest(&self.spool, REPLAY_PART);
            while let Some(records) = replay.next().await? {
                self.health.set_spooled(replay.spooled());
                for r in records {
                    // Spooled states rejoin the newest-wins queue, behind anything newer already queued.
                    if let Some(ordered) = self.pending.take_spooled(r) {
                        self.write(&ordered).await?;
                    }
                }
            }
            self.health.set_spooled(replay.spooled());
            let Some(n) = replay.replayed() else { break };
            tracing::info!(replayed = n, spooled = replay.spooled(), "replayed spooled records");
        }
        Ok(())
    }

    /// Writes the records held in memory, oldest first (the spool ahead of them is empty).
    async fn write_held(&mut self) -> Result<(), StoreError> {
        while let Some(r) = self.held.0.front() {
            self.write(r).await?;
            self.held.0.pop_front();
            self.health.set_held(self.held.0.len());
        }
        Ok(())
    }

    /// Stores one record. The calls borrow it: a copy of a round's statuses or a part's rollups
    /// for the call was megabytes at 10,000 targets, held while it ran.
    async fn write(&self, r: &Record) -> Result<(), StoreError> {
        match r {
            Record::Transition(t) => self.call(|s| async move { s.append_transition(t).await }).await,
            Record::Outbox(items) => self.call(|s| async move { s.enqueue(items).await }).await,
            Record::Breaker(b) => self.call(|s| async move { s.save_breaker(b).await }).await,
            Record::Rollups(rs) => self.call(|s| async move { s.upsert_rollups(rs).await }).await,
            Record::AlertState { region, state } => {
                self.call(|s| async move { s.save_alert_state(region, state).await }).await
            }
            Record::Evaluated { region, state, items } => {
                self.call(|s| async move { s.enqueue_with_state(items, region, state).await }).await
            }
            Record::TargetStatus(rows) => self.call(|s| async move { s.publish_target_status(rows).await }).await,
            Record::Takeover { region, since, items } => {
                let (since, items) = (*since, items.clone());
                self.call(|s| async move { enqueue_unsent(s.as_ref(), region, since, items).await }).await
            }
            Record::Canary(runs) => self.call(|s| async move { s.insert_canary_runs(runs).await.map(|_| ()) }).await,
            Record::Check(runs) => self.call(|s| async move { s.insert_check_runs(runs).await.map(|_| ()) }).await,
            Record::Workload(runs) => {
                self.call(|s| async move { s.insert_workload_runs(runs).await.map(|_| ()) }).await
            }
            Record::ChainHeads(heads) => self.call(|s| async move { s.record_chain_heads(heads).await }).await,
        }
    }

    /// One store call, bounded by the call timeout; the outcome feeds the health handle.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let result = tokio::select! {
            r = timeout(self.call_timeout, f(self.store.clone())) => match r {
                Ok(r) => r,
                Err(_) => Err(StoreError::Unavailable(format!("store call timed out after {:?}", self.call_timeout))),
            },
            () = super::cut_after_stop(self.stop_signal.as_ref(), STOP_CALL_TIMEOUT) => {
                Err(StoreError::Unavailable(format!("store call cut {STOP_CALL_TIMEOUT:?} into the daemon's stop")))
            }
        };
        match &result {
            Ok(_) => self.health.ok(),
            Err(e) => self.health.failed(e),
        }
        result
    }

    fn back_off(&mut self) {
        self.next_attempt = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(RETRY_MAX);
    }

    /// Reads each target's newest samples (one read each) and hands them to the pipeline
    /// [`NEWEST_PER_REPLY`] targets at a time; false when a read failed (told) or nobody reads.
    async fn read_newest(&mut self, region: &str, newest: Newest) -> bool {
        let parts = newest.targets.len().div_ceil(NEWEST_PER_REPLY).max(1);
        let mut chunks = newest.targets.chunks(NEWEST_PER_REPLY);
        for part in 1..=parts {
            if self.replies.is_closed() {
                return false;
            }
            // Probes are judged meanwhile: what they store goes in between the reads.
            self.take_queued().await;
            let chunk = chunks.next().unwrap_or_default();
            let mut samples = Vec::with_capacity(chunk.len());
            for t in chunk {
                let q = SampleQuery::newest_of(region, t, newest.per_target);
                match self.call(|s| async move { s.samples(&q).await }).await {
                    Ok(read) => samples.push((t.clone(), read)),
                    Err(e) => {
                        let _ = self.replies.send(Reply::LoadFailed(e.to_string()));
                        return false;
                    }
                }
            }
            let _ = self.replies.send(Reply::LoadedNewest { samples, done: part == parts });
        }
        true
    }

    async fn answer(&mut self, q: Query) {
        let reply = match q {
            Query::Load { region, from, until, breakers, newest } => {
                if let Some(newest) = newest {
                    if !self.read_newest(&region, newest).await {
                        return;
                    }
                }
                let places = Arc::new(tokio::sync::Semaphore::new(HOURS_AHEAD));
                let mut hour = from;
                while hour < until {
                    let next = hour + chrono::Duration::hours(1);
                    // The pipeline gives a place back once it has folded an hour in; once it has
                    // dropped its end (the daemon stopping) nothing reads the rest.
                    let place = tokio::select! {
                        biased;
                        () = self.replies.closed() => None,
                        p = places.clone().acquire_owned() => p.ok(),
                    };
                    let Some(place) = place else {
                        tracing::debug!(until = %hour, "stored window's read-back abandoned: nobody reads the rest");
                        return;
                    };
                    // Probes are judged while a start reads its week back (minutes at 10,000
                    // targets): their pages go out now, not after it, and each minute's alert
                    // state and region view replace the last instead of piling up behind it.
                    self.take_queued().await;
                    let r = region.clone();
                    match self.call(|s| async move { s.rollups_between(Some(&r), hour, Some(next)).await }).await {
                        Ok(rollups) => {
                            let read_ahead = ReadAhead { _place: Some(place) };
                            let _ = self.replies.send(Reply::LoadedHour { until: next, rollups, read_ahead });
                        }
                        Err(e) => {
                            let _ = self.replies.send(Reply::LoadFailed(e.to_string()));
                            return;
                        }
                    }
                    hour = next;
                }
                let r = region.clone();
                let read =
                    |s: Arc<dyn Store>| async move { s.workload_runs(Some(&r), from, WORKLOAD_LOAD_LIMIT).await };
                match self.call(read).await {
                    Ok(runs) => {
                        let _ = self.replies.send(Reply::LoadedWorkloads(runs));
                    }
                    Err(e) => {
                        let _ = self.replies.send(Reply::LoadFailed(e.to_string()));
                        return;
                    }
                }
                if !breakers {
                    Reply::Loaded(Vec::new())
                } else {
                    match self.call(|s| async move { s.load_breakers(Some(&region)).await }).await {
                        Ok(b) => Reply::Loaded(b),
                        Err(e) => Reply::LoadFailed(e.to_string()),
                    }
                }
            }
            Query::Expiring { region, from, until } => {
                match self.call(|s| async move { s.rollups_between(Some(&region), from, Some(until)).await }).await {
                    Ok(rollups) => Reply::Expiring { rollups, until },
                    Err(e) => Reply::ExpiringFailed(e.to_string()),
                }
            }
            Query::AlertState { region } => {
                match self.call(|s| async move { s.load_alert_state(&region).await }).await {
                    Ok(state) => Reply::AlertState(state),
                    Err(e) => Reply::AlertStateFailed(e.to_string()),
                }
            }
        };
        let _ = self.replies.send(reply);
    }

    /// Reads other regions' latest samples and status, the watched providers' credit readings and the running drills.
    pub async fn read_context(&mut self) {
        let Some(plan) = self.plan.clone() else { return };
        // While calls fail, read only every fourth interval: each failing read costs its
        // timeouts, and records wait behind it.
        if self.health.is_failing() && self.context_skipped < CONTEXT_SKIPS_WHILE_FAILING {
            self.context_skipped += 1;
            return;
        }
        self.context_skipped = 0;
        let now = Utc::now();
        let since = now - chrono::Duration::from_std(plan.every * 3).unwrap_or_default();
        let region = plan.region.clone();
        let elsewhere = match self.call(|s| async move { latest_elsewhere(s.as_ref(), &region, since).await }).await {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "other regions' samples not read; alerts are scoped regional");
                Vec::new()
            }
        };
        // Once the stop has begun nobody reads this context, and each call left would cost up to
        // the stop's call bound on a dark database, outliving the link's share of the stop.
        if self.stop_begun() {
            return;
        }
        let mut credits = BTreeMap::new();
        for provider in &plan.credit_providers {
            if self.stop_begun() {
                return;
            }
            let p = provider.clone();
            // A day of readings is enough to measure the burn rate the projection needs.
            let day = now - chrono::Duration::hours(24);
            match self.call(|s| async move { s.balances(&p, day).await }).await {
                Ok(r) if !r.is_empty() => {
                    credits.insert(provider.clone(), r);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(provider = %provider, error = %e, "credit readings not read"),
            }
        }
        if self.stop_begun() {
            return;
        }
        let region = plan.region.clone();
        let statuses = match self.call(|s| async move { s.target_statuses(since, Some(&region)).await }).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "other regions' target status not read; alerts are scoped regional");
                Vec::new()
            }
        };
        if self.stop_begun() {
            return;
        }
        let drills = match self.call(|s| async move { s.drills(now).await }).await {
            Ok(rows) => Some(rows),
            Err(e) => {
                tracing::warn!(error = %e, "drills not read; the last known ones stay honoured until they run out");
                None
            }
        };
        let _ = self.replies.send(Reply::Context(Context { read_at: Some(now), elsewhere, credits, statuses, drills }));
    }

    async fn finish(&mut self) {
        // One short last chance, and none for a database already failing: a stop has a bound.
        self.call_timeout = self.call_timeout.min(STOP_CALL_TIMEOUT);
        let failing = self.health.is_failing();
        let mut ordered = Vec::new();
        while let Ok(r) = self.records.try_recv() {
            ordered.extend(self.pending.take(r));
        }
        for r in ordered {
            if failing || self.health.spooled() > 0 || !self.held.is_empty() || self.write(&r).await.is_err() {
                self.spool(vec![r]).await;
            }
        }
        if (!self.pending.is_empty() || !self.held.is_empty()) && !failing {
            self.retry().await;
        }
        let rest = self.pending.drain();
        if !rest.is_empty() {
            let n = rest.len();
            self.spool(rest).await;
            tracing::info!(records = n, "states not stored before stopping were spooled");
        }
        if !self.held.is_empty() {
            self.unhold().await;
        }
        if !self.held.is_empty() {
            self.health.set_held(0);
            super::carry::Slot::hand_on(self.carry.as_ref(), self.held.take(), "records");
        }
    }

    /// Appends `records` to the spool, or holds them in memory behind those already held: when
    /// the spool refuses (its disk full) they wait, in order, until the spool or the store takes
    /// them ([`Link::retry`]); only past [`HELD_MAX`] are the newest lost.
    async fn spool(&mut self, records: Vec<Record>) {
        if records.is_empty() {
            return;
        }
        if !self.held.is_empty() {
            // Behind the held ones; the next retry offers them all to the spool at once.
            self.hold(records, None);
            return;
        }
        let n = records.len();
        match self.append(records).await {
            Ok(()) => {}
            Err((e, records)) => {
                tracing::warn!(error = %e, records = n, "cannot spool records; held in memory until the spool or storage takes them");
                self.hold(records, Some(&e));
            }
        }
    }

    /// Offers the records held in memory to the spool; they stay held if it still refuses.
    async fn unhold(&mut self) {
        let held = self.held.take();
        if let Err((e, held)) = self.append(held).await {
            tracing::debug!(error = %e, held = held.len(), "the spool still refuses the records held in memory");
            self.hold(held, None);
        }
        self.health.set_held(self.held.0.len());
    }

    /// Appends to the spool; the records come back when it refuses them (a refused batch leaves
    /// no line). Records are lost only where the spool's thread itself failed.
    async fn append(&mut self, records: Vec<Record>) -> Result<(), (String, Vec<Record>)> {
        let n = records.len();
        match self.with_spool(move |s| Ok(s.append(&records).map(|_| s.len()).map_err(|e| (e, records)))).await {
            Ok(Ok(len)) => self.health.set_spooled(len),
            Ok(Err((e, records))) => return Err((e.to_string(), records)),
            Err(e) => tracing::error!(error = %e, lost = n, "cannot spool records; they are lost"),
        }
        Ok(())
    }

    /// Holds `records` behind those held, reporting any past [`HELD_MAX`] as lost.
    fn hold(&mut self, records: Vec<Record>, error: Option<&str>) {
        let lost = self.held.hold(records);
        let held = self.held.0.len();
        self.health.set_held(held);
        if lost > 0 {
            tracing::error!(
                error = error.unwrap_or("the spool refuses records"),
                lost,
                held,
                "cannot spool records and memory holds its most; they are lost"
            );
        }
    }

    /// Runs blocking spool I/O (fsync) off the async worker threads.
    async fn with_spool<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut SpoolOf<Record>) -> Result<R, SpoolError> + Send + 'static,
    ) -> Result<R, SpoolError> {
        super::spool::off_thread(&self.spool, f).await
    }
}

/// The latest sample of each target in every region but `region`, among those started since
/// `since`: what other instances sharing this store saw. Read from shared storage, never pushed.
pub async fn latest_elsewhere(
    store: &dyn Store,
    region: &str,
    since: DateTime<Utc>,
) -> Result<Vec<Sample>, StoreError> {
    // Filtered by the database: this region's own samples are most of the window (3,000 rows
    // a minute at 1,000 targets), and they were decoded only to be dropped; and only each
    // target's newest leaves it (at 20 regions × 10,000 targets, 190,000 rows instead of 570,000).
    let q = SampleQuery {
        since: Some(since),
        except_region: Some(region.to_string()),
        latest: true,
        ..SampleQuery::default()
    };
    let samples = store.samples(&q).await?;
    // Samples come oldest first, so the last one seen per (target, region) is its latest.
    let mut latest: std::collections::HashMap<crate::vocab::target::Target, Sample> = Default::default();
    for s in samples {
        latest.insert(s.target.clone(), s);
    }
    let mut out: Vec<Sample> = latest.into_values().collect();
    out.sort_by(|a, b| a.target.cmp(&b.target));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::breaker::State;
    use crate::vocab::health::{Health, HealthState};
    use crate::vocab::target::Target;

    /// Outbox item `n` of an `errors` incident in region eu, made now.
    fn test_item(n: u128) -> OutboxItem {
        let now = Utc::now();
        OutboxItem {
            id: uuid::Uuid::from_u128(n),
            region: "eu".into(),
            channel: "slack".into(),
            kind: "errors".into(),
            dedup_key: "vigil:p:a:".into(),
            payload: serde_json::json!({}),
            created_at: now,
            next_attempt_at: now,
            attempts: 0,
            last_error: None,
        }
    }

    /// A start's read-back holds at most [`HOURS_AHEAD`] stored hours the pipeline has not folded
    /// in: the link reads the next hour only once a reply is dropped, writes what was stored
    /// meanwhile between hours, and gives the rest up once the pipeline's end is gone (a stop
    /// during the read-back), instead of reading on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_load_reads_ahead_only_as_far_as_the_pipeline_has_folded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = super::super::open(&format!("sqlite://{}", dir.path().join("v.db").display())).await.expect("open");
        store.migrate().await.expect("migrate");
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let from = "2026-12-01T00:00:00Z".parse::<DateTime<Utc>>().expect("time");
        let rollups: Vec<Rollup> = (0..6)
            .map(|h| Rollup {
                target: t.clone(),
                metric: "ttfb".into(),
                hour: from + chrono::Duration::hours(h),
                count: 1,
                histogram: vec![h as u8],
            })
            .collect();
        store.upsert_rollups(&rollups).await.expect("stored");
        let reader = store.clone();
        let spool = SpoolOf::open(dir.path(), 1 << 20).expect("spool");
        let (link, mut handle) = Link::new(store, spool, None);
        let stop = CancellationToken::new();
        let task = tokio::spawn(link.run(stop.clone()));
        let until = from + chrono::Duration::hours(6);
        handle.ask(Query::Load { region: "eu".into(), from, until, breakers: false, newest: None });

        let hour_of = |r: &Reply| match r {
            Reply::LoadedHour { rollups, .. } => rollups.iter().map(|r| r.hour).collect::<Vec<_>>(),
            other => panic!("an hour, not {other:?}"),
        };
        let first =
            tokio::time::timeout(Duration::from_secs(10), handle.reply()).await.expect("in time").expect("reply");
        let second =
            tokio::time::timeout(Duration::from_secs(10), handle.reply()).await.expect("in time").expect("reply");
        assert_eq!((hour_of(&first), hour_of(&second)), (vec![rollups[0].hour], vec![rollups[1].hour]));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(handle.try_reply().is_none(), "no third hour is read while two wait");
        // What the pipeline stores meanwhile is written between hours, not after the whole load.
        let state = crate::vocab::records::StateJson::of(&serde_json::json!({ "v": 1 })).expect("json");
        handle.store(Record::AlertState { region: "eu".into(), state: state.clone() });
        drop(first);
        let third =
            tokio::time::timeout(Duration::from_secs(10), handle.reply()).await.expect("in time").expect("reply");
        assert_eq!(hour_of(&third), vec![rollups[2].hour], "the next hour once one was folded");
        let saved = reader.load_alert_state("eu").await.expect("read").map(|s| s.text().expect("text"));
        assert_eq!(saved.as_deref(), Some(state.text().expect("text").as_str()), "stored before the load's end");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(handle.try_reply().is_none(), "still two at most");

        // The pipeline ends mid-load: its end dropped, the link gives the rest up and stops.
        drop((second, third, handle));
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("the link ends").expect("no panic");
    }

    /// A start restores the newest spooled alert state of its own region, whichever record
    /// carried it, from a spool a stopped run left on disk; none when the spool holds none.
    #[test]
    fn the_newest_spooled_alert_state_of_a_region_is_found_across_segments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = |v: u32| crate::vocab::records::StateJson::of(&serde_json::json!({ "v": v })).expect("json");
        let newest = |spool: &SpoolOf<Record>, region: &str| {
            newest_spooled_alert_state(spool, region).map(|s| s.text().expect("text"))
        };
        let text = |v: u32| Some(state(v).text().expect("text"));
        let mut spool = SpoolOf::<Record>::open(dir.path(), 1 << 20).expect("spool").with_segment_bytes(64);
        assert_eq!(newest(&spool, "eu"), None, "an empty spool");
        spool.append(&[Record::Outbox(Vec::new())]).expect("append");
        assert_eq!(newest(&spool, "eu"), None, "no state spooled");
        spool.append(&[Record::AlertState { region: "eu".into(), state: state(1) }]).expect("append");
        spool.append(&[Record::Evaluated { region: "eu".into(), state: state(2), items: Vec::new() }]).expect("append");
        spool.append(&[Record::AlertState { region: "us".into(), state: state(3) }]).expect("append");
        spool.append(&[Record::Outbox(Vec::new())]).expect("append");
        drop(spool);
        let spool = SpoolOf::<Record>::open(dir.path(), 1 << 20).expect("reopened");
        assert_eq!(newest(&spool, "eu"), text(2), "the evaluation's state, newest of eu");
        assert_eq!(newest(&spool, "us"), text(3));
        assert_eq!(newest(&spool, "ap"), None);
    }

    /// Every kind of record survives a spool line: the spool is how nothing is lost while the
    /// database is down.
    #[test]
    fn every_record_round_trips_through_a_spool_line() {
        let now = Utc::now();
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let records = vec![
            Record::Rollups(vec![Rollup {
                target: t.clone(),
                metric: "ttft".into(),
                hour: now,
                count: 3,
                histogram: vec![1, 2],
            }]),
            Record::Outbox(vec![OutboxItem {
                id: uuid::Uuid::nil(),
                region: "eu".into(),
                channel: "slack".into(),
                kind: "errors".into(),
                dedup_key: "k".into(),
                payload: serde_json::json!({"summary": "down"}),
                created_at: now,
                next_attempt_at: now,
                attempts: 1,
                last_error: None,
            }]),
            Record::TargetStatus(vec![TargetStatus {
                target: t.clone(),
                health: Health {
                    state: HealthState::Down,
                    flapping: false,
                    reason: Some("breaker open".into()),
                    ..Health::default()
                },
                over_latency: false,
                breaker: State::Open,
                updated_at: now,
            }]),
            Record::Canary(Vec::new()),
            Record::Check(Vec::new()),
            Record::Workload(Vec::new()),
            Record::ChainHeads(vec![crate::vocab::chain_head::ChainHead {
                region: "eu".into(),
                chain: "chat".into(),
                at: now,
                target: Some(t.id()),
                price: Some(crate::vocab::chain_head::PerMtok { input: 3.0, output: 15.0 }),
            }]),
            Record::AlertState {
                region: "eu".into(),
                state: crate::vocab::records::StateJson::of(&serde_json::json!({"a": 1})).expect("json"),
            },
            Record::Takeover { region: "eu".into(), since: now, items: Vec::new() },
        ];
        for r in records {
            let line = serde_json::to_string(&r).unwrap_or_else(|e| panic!("{r:?} does not spool: {e}"));
            let back: Record = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line} does not read back: {e}"));
            assert_eq!(back, r, "{line}");
        }
        let line = serde_json::to_string(&Record::Canary(Vec::new())).expect("spools");
        assert_eq!(line, r#"{"record":"canary","items":[]}"#);
    }

    /// A new leader sends what it held while following only where the region's outbox has no
    /// item of the same incident, status and channel: the old leader's page is not sent twice,
    /// what the old leader never sent goes out.
    #[test]
    fn held_evaluations_keep_one_state_per_region_and_every_notification() {
        let item = test_item;
        let evaluated = |region: &str, v: u32, items: Vec<OutboxItem>| Record::Evaluated {
            region: region.into(),
            state: crate::vocab::records::StateJson::of(&serde_json::json!({ "v": v })).expect("json"),
            items,
        };
        let mut held = Held::default();
        let lost = held.hold(vec![
            evaluated("eu", 1, vec![item(1)]),
            evaluated("us", 2, vec![item(2)]),
            evaluated("eu", 3, Vec::new()),
            evaluated("eu", 4, vec![item(4)]),
        ]);
        assert_eq!(lost, 0);
        let kinds: Vec<String> = held
            .0
            .iter()
            .map(|r| match r {
                Record::Outbox(items) => format!("outbox {}", items[0].id.as_u128()),
                Record::Evaluated { region, state, items } => {
                    format!("evaluated {region} {} {}", state.text().expect("text"), items.len())
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            ["outbox 1", r#"evaluated us {"v":2} 1"#, r#"evaluated eu {"v":4} 1"#],
            "the older eu states go, their notifications stay in order, an evaluation without any goes"
        );

        let mut full = Held::default();
        let many: Vec<Record> = (0..HELD_MAX + 3).map(|n| Record::Outbox(vec![item(n as u128)])).collect();
        assert_eq!(full.hold(many), 3, "past the bound the newest are lost");
        assert_eq!(full.0.len(), HELD_MAX);
        assert_eq!(full.take().len(), HELD_MAX);
        assert!(full.is_empty());
    }

    #[tokio::test]
    async fn a_takeover_enqueues_only_what_the_old_leader_had_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = super::super::open(&format!("sqlite://{}/vigil.db", dir.path().display())).await.expect("open");
        store.migrate().await.expect("migrate");
        let now = Utc::now();
        let item = |n: u128, incident: &str, status: &str, channel: &str| OutboxItem {
            id: uuid::Uuid::from_u128(n),
            region: "eu".into(),
            channel: channel.into(),
            kind: "errors".into(),
            dedup_key: incident.into(),
            payload: serde_json::json!({"status": status, "incident": incident}),
            created_at: now,
            next_attempt_at: now,
            attempts: 0,
            last_error: None,
        };
        store.enqueue(&[item(1, "vigil:p:a:", "firing", "slack")]).await.expect("the old leader's page");
        let held = vec![
            item(2, "vigil:p:a:", "firing", "slack"),
            item(3, "vigil:p:a:", "firing", "pagerduty"),
            item(4, "vigil:p:a:", "resolved", "slack"),
            item(5, "vigil:p:b:", "firing", "slack"),
        ];
        let since = now - chrono::Duration::minutes(3);
        enqueue_unsent(store.as_ref(), "eu", since, held.clone()).await.expect("takeover");
        let ids: Vec<u128> = store
            .outbox_between(Some("eu"), since, now + chrono::Duration::minutes(1))
            .await
            .expect("read")
            .iter()
            .map(|i| i.id.as_u128())
            .collect();
        assert_eq!(ids.len(), 4, "{ids:?}");
        assert!(!ids.contains(&2) && [1, 3, 4, 5].iter().all(|n| ids.contains(n)), "{ids:?}");
        enqueue_unsent(store.as_ref(), "eu", since, held).await.expect("again");
        let again = store.outbox_between(Some("eu"), since, now + chrono::Duration::minutes(1)).await.expect("read");
        assert_eq!(again.len(), 4, "a replayed takeover adds nothing");
    }

    /// A state read back from the spool is older than one queued since: it never replaces it.
    #[test]
    fn a_spooled_state_never_replaces_a_newer_one_already_queued() {
        let now = Utc::now();
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let breaker =
            |state| BreakerRecord { target: t.clone(), state, since: now, detail: serde_json::json!({}).into() };
        let rollup = |count| Rollup { target: t.clone(), metric: "ttft".into(), hour: now, count, histogram: vec![] };
        let mut p = Pending::default();
        assert_eq!(p.take(Record::Breaker(breaker(State::Closed))), None);
        assert_eq!(p.take(Record::Rollups(vec![rollup(9)])), None);
        assert_eq!(p.take_spooled(Record::Breaker(breaker(State::Open))), None);
        assert_eq!(p.take_spooled(Record::Rollups(vec![rollup(3)])), None);
        let other = {
            let mut n = t.clone();
            n.model = "n".into();
            n
        };
        let spooled_only =
            BreakerRecord { target: other, state: State::Open, since: now, detail: serde_json::json!({}).into() };
        assert_eq!(p.take_spooled(Record::Breaker(spooled_only.clone())), None);
        let states: Vec<Record> = p.drain();
        assert!(states.contains(&Record::Breaker(breaker(State::Closed))), "{states:?}");
        assert!(states.contains(&Record::Breaker(spooled_only)), "a key with nothing newer is filled: {states:?}");
        assert!(states.contains(&Record::Rollups(vec![rollup(9)])), "{states:?}");
        assert_eq!(states.len(), 3, "{states:?}");
        let ordered = Record::Transition(BreakerTransition {
            target: t.clone(),
            from_state: State::Closed,
            to_state: State::Open,
            at: now,
            reason: "r".into(),
        });
        assert_eq!(p.take_spooled(ordered.clone()), Some(ordered), "ordered records are written, not queued");
    }
}
