//! The batch writer: drains the sample channel into the store in batches, and into the spool
//! (then back out, in order) whenever the store is unreachable or slow. A batch the spool
//! cannot take either (its disk full while the store is down) is held in memory, up to
//! [`HELD_MAX`] samples, and offered to the store or the spool again at each retry.

use super::spool::Spool;
use super::spool::SpoolError;
use super::SampleStore;
use super::StoreError;
use crate::vocab::sample::Sample;
use chrono::{DateTime, SecondsFormat, Utc};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::Receiver;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_util::sync::CancellationToken;

/// Longest a single store write may take before the batch goes to the spool instead.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest the last write at shutdown may take: past it the batch is spooled, so a stop stays
/// within its bound whatever the database does.
pub const STOP_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// First and longest wait between attempts to replay the spool.
pub const RETRY_MIN: Duration = Duration::from_secs(1);
/// See [`RETRY_MIN`].
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// Most samples held in memory while neither the store nor the spool takes them: an hour of
/// 800 targets every 60 s, tens of MB. Past it the newest are reported lost.
pub const HELD_MAX: usize = 50_000;

/// Shared view of the writer for `/readyz` and the `vigil_samples_spooled` gauge.
#[derive(Debug, Default)]
pub struct WriterHealth {
    spooled: AtomicU64,
    held: AtomicU64,
    written: AtomicU64,
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    last_error: Option<String>,
    down_since: Option<DateTime<Utc>>,
}

impl WriterHealth {
    /// Samples waiting in the spool.
    pub fn spooled(&self) -> u64 {
        self.spooled.load(Ordering::Relaxed)
    }

    /// Samples held in memory because the spool refused them (its disk full) while storage was down.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Samples stored so far by this writer (replays of already-stored ids not counted).
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// The last storage or spool error, kept after recovery for diagnosis.
    pub fn last_error(&self) -> Option<String> {
        self.state.lock().ok().and_then(|s| s.last_error.clone())
    }

    /// `Ok` while storage accepts writes; otherwise why not, e.g.
    /// `storage unreachable since 2026-11-30T10:42:03Z: …; 1,234 samples spooled`.
    pub fn ready(&self) -> Result<(), String> {
        let state = self.state.lock().map_err(|_| "writer health lock poisoned".to_owned())?;
        let Some(since) = state.down_since else { return Ok(()) };
        let error = state.last_error.as_deref().unwrap_or("unknown error");
        // A store that answers but takes no writes (a corrupt or vanished file) is not unreachable;
        // its own readiness line says why.
        let what = match ["storage corrupt: ", "storage file deleted: ", "storage file replaced: "]
            .iter()
            .any(|refusal| error.contains(refusal))
        {
            true => "storage refuses writes",
            false => "storage unreachable",
        };
        let held = held_note(self.held());
        Err(format!(
            "{what} since {}: {error}; {} samples spooled{held}",
            since.to_rfc3339_opts(SecondsFormat::Secs, true),
            thousands(self.spooled())
        ))
    }

    /// True while storage is known to be down.
    pub fn is_down(&self) -> bool {
        self.state.lock().map(|s| s.down_since.is_some()).unwrap_or(true)
    }

    fn stored(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
        if let Ok(mut s) = self.state.lock() {
            if s.down_since.take().is_some() {
                tracing::info!("storage reachable again");
            }
        }
    }

    /// Records that storage failed (the writer's own writes do; so does a start that found it down).
    pub fn failed(&self, error: String) {
        if let Ok(mut s) = self.state.lock() {
            s.down_since.get_or_insert_with(Utc::now);
            s.last_error = Some(error);
        }
    }

    fn spool_error(&self, error: String) {
        if let Ok(mut s) = self.state.lock() {
            s.last_error = Some(error);
        }
    }
}

/// What `/readyz` adds about records held in memory because the spool refused them (nothing
/// when none are): the sample writer's words and the storage link's.
pub(super) fn held_note(held: u64) -> String {
    match held {
        0 => String::new(),
        n => format!(", {} held in memory (the spool refused them)", thousands(n)),
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Batches samples into the store, spooling while it is unreachable. See the module docs.
pub struct Writer {
    store: Arc<dyn SampleStore>,
    spool: Arc<Mutex<Spool>>,
    batch_size: usize,
    batch_age: Duration,
    write_timeout: Duration,
    retry_min: Duration,
    retry_max: Duration,
    backoff: Duration,
    next_retry: Instant,
    buf: Vec<Sample>,
    /// Samples neither stored nor spooled yet (see [`HELD_MAX`]), oldest first.
    held: Vec<Sample>,
    health: Arc<WriterHealth>,
    liveness: Option<Arc<crate::vocab::ready::Liveness>>,
    stopping: bool,
    /// Fires when the daemon's stop begins, before the channel closes (see `with_stop_signal`).
    stop_signal: Option<CancellationToken>,
    /// The process's slot for held samples across reloads (see `with_carry`).
    carry: Option<super::carry::Slot<Sample>>,
}

impl Writer {
    /// A writer flushing every `batch_size` samples or `batch_age` after a batch's first sample.
    pub fn new(store: Arc<dyn SampleStore>, spool: Spool, batch_size: usize, batch_age: Duration) -> Self {
        let health = Arc::new(WriterHealth::default());
        health.spooled.store(spool.len(), Ordering::Relaxed);
        Writer {
            store,
            spool: Arc::new(Mutex::new(spool)),
            batch_size: batch_size.max(1),
            batch_age,
            write_timeout: WRITE_TIMEOUT,
            retry_min: RETRY_MIN,
            retry_max: RETRY_MAX,
            backoff: RETRY_MIN,
            next_retry: Instant::now(),
            buf: Vec::new(),
            held: Vec::new(),
            health,
            liveness: None,
            stopping: false,
            stop_signal: None,
            carry: None,
        }
    }

    /// Bounds every store write from the moment `stop` fires to [`STOP_WRITE_TIMEOUT`], the
    /// write in flight included. The writer itself ends only when its channel closes (after
    /// the probes drained); without this, a write to a database gone dark, begun just before
    /// the stop, could run its full [`WRITE_TIMEOUT`] past the daemon's stop bound and the
    /// batch it carried would be abandoned with the task instead of spooled.
    pub fn with_stop_signal(mut self, stop: CancellationToken) -> Self {
        self.stop_signal = Some(stop);
        self
    }

    /// Takes at its start the samples an earlier writer of this process left in `carry`, and
    /// leaves there at its stop what neither storage nor the spool took: a reload hands them
    /// on instead of losing them (see [`super::carry`]).
    pub fn with_carry(mut self, carry: super::carry::Slot<Sample>) -> Self {
        self.carry = Some(carry);
        self
    }

    /// True once the daemon's stop has begun.
    fn stop_begun(&self) -> bool {
        self.stopping || self.stop_signal.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Beats `liveness` whenever samples are stored or spooled (`/readyz`).
    pub fn with_liveness(mut self, liveness: Arc<crate::vocab::ready::Liveness>) -> Self {
        self.liveness = Some(liveness);
        self
    }

    fn beat(&self) {
        if let Some(l) = &self.liveness {
            l.kept(Utc::now());
        }
    }

    /// Overrides [`WRITE_TIMEOUT`].
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_write_timeout(mut self, d: Duration) -> Self {
        self.write_timeout = d;
        self
    }

    /// Overrides the spool replay backoff ([`RETRY_MIN`]..[`RETRY_MAX`]).
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_retry_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.retry_min = min;
        self.retry_max = max.max(min);
        self.backoff = min;
        self
    }

    /// The shared health handle; clone it before calling [`Writer::run`].
    pub fn health(&self) -> Arc<WriterHealth> {
        Arc::clone(&self.health)
    }

    /// Runs until `shutdown` fires or the channel closes, then flushes what it holds (to the
    /// store, or to the spool if the store is down) and returns. Replays any spool left over
    /// from a previous run first.
    pub async fn run(mut self, mut rx: Receiver<Sample>, shutdown: CancellationToken) {
        self.next_retry = Instant::now();
        let carried = super::carry::Slot::take_over(self.carry.as_ref(), "samples");
        if !carried.is_empty() {
            self.held = carried;
            self.health.held.store(self.held.len() as u64, Ordering::Relaxed);
        }
        let mut deadline: Option<Instant> = None;
        loop {
            // No replay once the stop has begun: what is spooled stays for the next start.
            let waiting = self.health.spooled() > 0 || !self.held.is_empty();
            let retry_at = (waiting && !self.stop_begun()).then_some(self.next_retry);
            tokio::select! {
                _ = shutdown.cancelled() => break,
                msg = rx.recv() => match msg {
                    Some(sample) => {
                        if self.buf.is_empty() {
                            deadline = Some(Instant::now() + self.batch_age);
                        }
                        self.buf.push(sample);
                        if self.buf.len() >= self.batch_size {
                            self.flush_once().await;
                            deadline = None;
                        }
                    }
                    None => break,
                },
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.flush_once().await;
                    deadline = None;
                }
                _ = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    self.replay_step().await;
                }
            }
        }
        rx.close();
        while let Ok(sample) = rx.try_recv() {
            self.buf.push(sample);
        }
        self.stopping = true;
        self.write_timeout = self.write_timeout.min(STOP_WRITE_TIMEOUT);
        self.flush_once().await;
        // One last offer of what memory holds: to the spool, and what its disk still refuses
        // straight to storage if it answers (a reload stops this writer too, and its held
        // samples would end with it). Only what neither takes ends with the process.
        if self.unhold().await.is_err() {
            self.store_held().await;
        }
        self.health.held.store(0, Ordering::Relaxed);
        super::carry::Slot::hand_on(self.carry.as_ref(), std::mem::take(&mut self.held), "samples");
        tracing::info!(written = self.health.written(), spooled = self.health.spooled(), "sample writer stopped");
    }

    /// Queues one sample without writing (tests pair it with [`Writer::flush_once`]).
    pub fn push(&mut self, sample: Sample) {
        self.buf.push(sample);
    }

    /// Writes everything buffered: to the store when the spool is empty, else behind the spool;
    /// a failed or slow store write sends the batch to the spool.
    pub async fn flush_once(&mut self) {
        let pending = std::mem::take(&mut self.buf);
        for batch in pending.chunks(self.batch_size) {
            if self.spool_first() {
                self.spool_append(batch.to_vec()).await;
                continue;
            }
            match self.write(batch).await {
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, samples = batch.len(), "storage write failed; spooling batch");
                    self.spool_append(batch.to_vec()).await;
                    self.backoff = self.retry_min;
                    self.next_retry = Instant::now() + self.backoff;
                }
            }
        }
    }

    /// Tries to replay the oldest spool segment once; returns samples still spooled afterwards.
    /// On failure the next attempt backs off (doubling up to the maximum).
    pub async fn replay_step(&mut self) -> u64 {
        // The spool is replayed even while its disk refuses the samples held in memory: the
        // replay is what frees that disk, and once the spool is empty they go to storage.
        let unheld = self.unhold().await;
        let result = match (unheld, self.replay_segment().await) {
            (_, Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
            (Err(_), Ok(())) => self.unhold().await,
        };
        match result {
            Ok(()) => {
                self.backoff = self.retry_min;
                self.next_retry = Instant::now();
            }
            Err(e) => {
                tracing::warn!(error = %e, spooled = self.health.spooled(), retry_in = ?self.backoff, "spool replay failed");
                self.next_retry = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(self.retry_max);
            }
        }
        self.health.spooled()
    }

    /// Whether a batch goes to the spool without trying the store: behind what is spooled
    /// already, and at a stop a store already down gets no last chance.
    fn spool_first(&self) -> bool {
        self.health.spooled() > 0 || (self.stop_begun() && self.health.is_down())
    }

    /// Offers the samples held in memory to the store (when nothing is spooled ahead of them)
    /// and else to the spool; an error while some are still held.
    async fn unhold(&mut self) -> Result<(), StoreError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let mut held = std::mem::take(&mut self.held);
        let total = held.len();
        self.health.held.store(0, Ordering::Relaxed);
        let stored = self.store_leading(&held, false).await;
        // What the store did not take goes to the spool, moved rather than copied.
        held.drain(..stored);
        if !held.is_empty() {
            self.spool_append(held).await;
        }
        match self.held.len() {
            0 => {
                tracing::info!(samples = total, "samples held in memory are stored or spooled");
                Ok(())
            }
            n => Err(StoreError::Other(format!("{n} samples still held in memory: the spool refuses them"))),
        }
    }

    /// Writes the samples held in memory straight to storage, ahead of anything spooled (the
    /// stop's last resort when the spool's disk refuses them: samples are keyed by id and
    /// time, so the order they are stored in changes nothing); what it does not take stays held.
    async fn store_held(&mut self) {
        let mut held = std::mem::take(&mut self.held);
        let stored = self.store_leading(&held, true).await;
        held.drain(..stored);
        self.held = held;
        self.health.held.store(self.held.len() as u64, Ordering::Relaxed);
        if stored > 0 {
            tracing::info!(samples = stored, "samples the spool refused at the stop are stored");
        }
    }

    /// Writes `samples` to storage a batch at a time from the first, until a write fails or
    /// (unless `ahead_of_spool`) anything waits in the spool before them; how many it stored.
    async fn store_leading(&self, samples: &[Sample], ahead_of_spool: bool) -> usize {
        let mut stored = 0;
        while stored < samples.len() && (ahead_of_spool || !self.spool_first()) {
            let n = (samples.len() - stored).min(self.batch_size);
            if self.write(&samples[stored..stored + n]).await.is_err() {
                break;
            }
            stored += n;
        }
        stored
    }

    async fn replay_segment(&mut self) -> Result<(), StoreError> {
        let mut replay = super::spool::Replay::oldest(&self.spool, self.batch_size);
        while let Some(samples) = replay.next().await? {
            self.health.spooled.store(replay.spooled(), Ordering::Relaxed);
            self.write(&samples).await?;
        }
        self.health.spooled.store(replay.spooled(), Ordering::Relaxed);
        if let Some(n) = replay.replayed() {
            tracing::info!(replayed = n, spooled = replay.spooled(), "replayed spooled samples");
        }
        Ok(())
    }

    /// One bounded store write; failures are recorded in the health handle.
    async fn write(&self, batch: &[Sample]) -> Result<u64, StoreError> {
        // The last flush (`stopping`) has its own short timeout already.
        let stop = self.stop_signal.as_ref().filter(|_| !self.stopping);
        let result = tokio::select! {
            r = timeout(self.write_timeout, self.store.insert_samples(batch)) => match r {
                Ok(r) => r,
                Err(_) => Err(StoreError::Unavailable(format!("write timed out after {:?}", self.write_timeout))),
            },
            () = super::cut_after_stop(stop, STOP_WRITE_TIMEOUT) => {
                Err(StoreError::Unavailable(format!("write cut {STOP_WRITE_TIMEOUT:?} into the daemon's stop")))
            }
        };
        match &result {
            Ok(n) => {
                self.health.stored(*n);
                self.beat();
            }
            Err(e) => self.health.failed(e.to_string()),
        }
        result
    }

    async fn spool_append(&mut self, batch: Vec<Sample>) {
        let n = batch.len();
        // Shared with the spool's thread so a refused batch comes back to be held.
        let batch = Arc::new(batch);
        let to_spool = Arc::clone(&batch);
        match self.with_spool(move |s| s.append(&to_spool).map(|dropped| (dropped, s.len()))).await {
            Ok((_, len)) => {
                self.health.spooled.store(len, Ordering::Relaxed);
                self.beat();
            }
            Err(e) => {
                self.health.spool_error(e.to_string());
                let room = HELD_MAX.saturating_sub(self.held.len());
                let lost = n.saturating_sub(room);
                let batch = Arc::try_unwrap(batch).unwrap_or_else(|shared| shared.as_ref().clone());
                self.held.extend(batch.into_iter().take(room));
                self.health.held.store(self.held.len() as u64, Ordering::Relaxed);
                self.next_retry = self.next_retry.min(Instant::now() + self.backoff);
                if lost > 0 {
                    tracing::error!(error = %e, lost, held = self.held.len(), "cannot spool samples and memory holds its most; they are lost");
                } else {
                    tracing::warn!(error = %e, held = self.held.len(), "cannot spool samples; held in memory until storage or the spool takes them");
                }
            }
        }
    }

    /// Runs blocking spool I/O (fsync) off the async worker threads.
    async fn with_spool<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Spool) -> Result<R, SpoolError> + Send + 'static,
    ) -> Result<R, SpoolError> {
        super::spool::off_thread(&self.spool, f).await
    }
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234), "1,234");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
