//! Hourly TTFT P50 of this region's targets over the baseline window, for the status page's
//! sparklines. Read from the stored hourly rollups and cached: the first read loads the window,
//! later ones only the last two hours, and never more often than [`REFRESH_EVERY`], so a page
//! load does not scan a week of rollups for thousands of targets.

use crate::decide::baseline::rollup_quantile;
use crate::io::store::{RollupStore, StoreError};
use crate::vocab::target::Target;
use chrono::{DateTime, Duration, DurationRound, Utc};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The rollup metric the trend follows.
pub const METRIC: &str = "ttft";
/// Minimum time between two reads of the store.
pub const REFRESH_EVERY: Duration = Duration::minutes(5);
/// A whole-window reload this often picks up hours rewritten since (`vigil baselines --rebuild`).
const FULL_RELOAD_EVERY: Duration = Duration::hours(6);
/// How long a page load waits for a refresh before showing what is cached (the refresh goes on).
const PAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Hourly P50 points of one target, oldest first: (start of the hour, milliseconds).
pub type TrendSeries = Vec<(DateTime<Utc>, f64)>;

/// Every target's series, shared with the pages being rendered.
pub type Trends = Arc<HashMap<Target, TrendSeries>>;

#[derive(Default)]
struct Cached {
    points: HashMap<Target, BTreeMap<DateTime<Utc>, f64>>,
    view: Trends,
    fetched_at: Option<DateTime<Utc>>,
    full_at: Option<DateTime<Utc>>,
}

/// The cache of one region's trends.
pub struct TrendCache {
    store: Arc<dyn RollupStore>,
    region: String,
    hours: i64,
    cached: Mutex<Cached>,
    /// Held while the store is read, so concurrent page loads never start a second read.
    refreshing: tokio::sync::Mutex<()>,
}

fn hour_floor(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(Duration::hours(1)).unwrap_or(t)
}

impl TrendCache {
    /// An empty cache for `region`'s targets covering `window` (rounded up to whole hours).
    pub fn new(store: Arc<dyn RollupStore>, region: &str, window: std::time::Duration) -> Self {
        TrendCache {
            store,
            region: region.to_string(),
            hours: i64::try_from(window.as_secs().div_ceil(3600)).unwrap_or(168).max(1),
            cached: Mutex::new(Cached::default()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// Hours the trend covers, the current one included.
    pub fn hours(&self) -> i64 {
        self.hours
    }

    /// Start of the oldest hour shown at `now`.
    pub fn window_start(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        hour_floor(now) - Duration::hours(self.hours - 1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cached.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What is cached now.
    pub fn series(&self) -> Trends {
        self.lock().view.clone()
    }

    fn is_stale(&self, now: DateTime<Utc>) -> bool {
        self.lock().fetched_at.is_none_or(|at| now - at >= REFRESH_EVERY || now < at)
    }

    /// Reads the rollups that changed when the cache is older than [`REFRESH_EVERY`] (the step
    /// tests drive directly). Returns whether the store was read.
    pub async fn refresh(&self, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let Ok(_reading) = self.refreshing.try_lock() else { return Ok(false) };
        if !self.is_stale(now) {
            return Ok(false);
        }
        let incremental_since = {
            let c = self.lock();
            match (c.full_at, c.fetched_at) {
                (Some(full), Some(fetched)) if now - full < FULL_RELOAD_EVERY && now >= full => {
                    // The hour before the last read may have gained its last minute since.
                    Some(hour_floor(fetched) - Duration::hours(1))
                }
                _ => None,
            }
        };
        let start = self.window_start(now);
        let since = incremental_since.map_or(start, |s| s.max(start));
        let rollups = self.store.rollups_since(Some(&self.region), since).await?;
        let mut fresh: HashMap<Target, BTreeMap<DateTime<Utc>, f64>> = HashMap::new();
        for r in rollups.iter().filter(|r| r.metric == METRIC) {
            if let Some(p50) = rollup_quantile(r, 0.5) {
                fresh.entry(r.target.clone()).or_default().insert(hour_floor(r.hour), p50);
            }
        }
        let mut c = self.lock();
        if incremental_since.is_some() {
            for (target, points) in fresh {
                c.points.entry(target).or_default().extend(points);
            }
        } else {
            c.points = fresh;
            c.full_at = Some(now);
        }
        for points in c.points.values_mut() {
            *points = points.split_off(&start);
        }
        c.points.retain(|_, p| !p.is_empty());
        let view = c.points.iter().map(|(t, p)| (t.clone(), p.iter().map(|(h, v)| (*h, *v)).collect())).collect();
        c.view = Arc::new(view);
        c.fetched_at = Some(now);
        tracing::debug!(targets = c.points.len(), incremental = incremental_since.is_some(), "status page trends read");
        Ok(true)
    }

    /// The series for a page rendered at `now`, refreshed first when stale. A slow read (the
    /// first one after a start, on a large fleet) is waited for only briefly: the page then
    /// shows what is cached and the read finishes in the background.
    pub async fn current(self: &Arc<Self>, now: DateTime<Utc>) -> Trends {
        if self.is_stale(now) {
            let cache = self.clone();
            let job = tokio::spawn(async move {
                if let Err(e) = cache.refresh(now).await {
                    tracing::warn!(error = %e, "status page trends not read; showing the cached ones");
                }
            });
            let _ = tokio::time::timeout(PAGE_WAIT, job).await;
        }
        self.series()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::baseline::{HIGHEST, LOWEST, SIGFIG};
    use crate::io::store::Store;
    use crate::vocab::records::Rollup;
    use chrono::TimeZone;
    use hdrhistogram::serialization::{Serializer, V2Serializer};
    use hdrhistogram::Histogram;

    fn target(route: &str, region: &str) -> Target {
        Target::new("demo".into(), "m".into(), Some(route.into()), region.into())
    }

    /// A stored rollup of `values_ms` and the P50 hdrhistogram itself reports for them.
    fn rollup(t: &Target, metric: &str, hour: DateTime<Utc>, values_ms: &[f64]) -> (Rollup, f64) {
        let mut h = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("histogram");
        for v in values_ms {
            h.record((v * 1000.0).round() as u64).expect("record");
        }
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&h, &mut bytes).expect("serialize");
        let p50 = h.value_at_quantile(0.5) as f64 / 1000.0;
        (
            Rollup { target: t.clone(), metric: metric.into(), hour, count: values_ms.len() as i64, histogram: bytes },
            p50,
        )
    }

    async fn sqlite() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::io::store::open(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .expect("open sqlite");
        store.migrate().await.expect("migrate");
        (dir, store)
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).single().expect("valid time")
    }

    #[test]
    fn rollup_quantile_agrees_with_hdrhistogram() {
        let t = target("A", "eu");
        let values: Vec<f64> = (0..500).map(|i| 120.0 + f64::from(i % 97) * 3.7).collect();
        let (r, p50) = rollup(&t, METRIC, now(), &values);
        assert_eq!(rollup_quantile(&r, 0.5), Some(p50));
        assert!(rollup_quantile(&r, 0.99) > rollup_quantile(&r, 0.5));
        let empty = rollup(&t, METRIC, now(), &[]).0;
        assert_eq!(rollup_quantile(&empty, 0.5), None, "an empty hour has no median");
        assert_eq!(rollup_quantile(&Rollup { histogram: vec![1, 2, 3], ..r }, 0.5), None);
    }

    #[tokio::test]
    async fn loads_the_window_once_then_only_recent_hours() {
        let (_dir, store) = sqlite().await;
        let (a, b, other) = (target("A", "eu"), target("B", "eu"), target("A", "us"));
        let hour0 = hour_floor(now());
        let mut want = BTreeMap::new();
        let mut rollups = Vec::new();
        // 170 hours back: the two oldest fall outside a 168-hour window.
        for back in 0..170 {
            let hour = hour0 - Duration::hours(back);
            let base = 200.0 + 50.0 * ((back % 24) as f64 / 24.0 * std::f64::consts::TAU).sin();
            let (r, p50) = rollup(&a, METRIC, hour, &[base * 0.8, base, base * 1.1, base * 1.3, base * 0.9]);
            rollups.push(r);
            if back < 168 {
                want.insert(hour, p50);
            }
            rollups.push(rollup(&a, "ttfb", hour, &[9999.0]).0);
            rollups.push(rollup(&other, METRIC, hour, &[9999.0]).0);
        }
        let (old_b, _) = rollup(&b, METRIC, hour0 - Duration::hours(3), &[300.0]);
        rollups.push(old_b);
        store.upsert_rollups(&rollups).await.expect("upsert");

        let cache = TrendCache::new(store.clone(), "eu", std::time::Duration::from_secs(7 * 86400));
        assert!(cache.refresh(now()).await.expect("refresh"));
        let series = cache.series();
        let got: BTreeMap<_, _> = series.get(&a).expect("A has a trend").iter().copied().collect();
        assert_eq!(got, want, "one P50 per hour of the window, from ttft rollups only");
        assert!(!series.contains_key(&other), "other regions' rollups are not this region's trend");
        assert_eq!(series.get(&b).map(Vec::len), Some(1));

        assert!(!cache.refresh(now() + Duration::minutes(1)).await.expect("refresh"), "cached for five minutes");

        // An hour later: the new hour arrives through an incremental read; the oldest leaves the window.
        let later = now() + Duration::hours(1);
        let (fresh, fresh_p50) = rollup(&a, METRIC, hour_floor(later), &[111.0]);
        let (rewritten, rewritten_p50) = rollup(&a, METRIC, hour0, &[222.0]);
        store.upsert_rollups(&[fresh, rewritten]).await.expect("upsert");
        assert!(cache.refresh(later).await.expect("refresh"));
        let series = cache.series();
        let got = series.get(&a).expect("A");
        assert_eq!(got.len(), 168);
        assert_eq!(got.last(), Some(&(hour_floor(later), fresh_p50)));
        assert_eq!(got[got.len() - 2], (hour0, rewritten_p50), "the hour of the last read is read again");
        assert_eq!(got.first().map(|p| p.0), Some(cache.window_start(later)));
    }

    #[tokio::test]
    async fn current_reads_a_stale_cache_before_answering() {
        let (_dir, store) = sqlite().await;
        let t = target("A", "eu");
        let (r, p50) = rollup(&t, METRIC, hour_floor(now()), &[150.0, 160.0, 170.0]);
        store.upsert_rollups(&[r]).await.expect("upsert");
        let cache = Arc::new(TrendCache::new(store, "eu", std::time::Duration::from_secs(86400)));
        assert!(cache.series().is_empty());
        let series = cache.current(now()).await;
        assert_eq!(series.get(&t), Some(&vec![(hour_floor(now()), p50)]));
        assert_eq!(cache.hours(), 24);
    }
}
