//! Reading a baseline window back from storage at start, an hour at a time, so a start never
//! holds a week of rollups at once.

use super::{RollupStore, StoreError};
use crate::decide::baseline::{Baselines, LoadReport};
use chrono::{DateTime, Duration, Utc};

/// Loads the window ending at `now` into `baselines` from `store` (this `region`'s rollups, or
/// every region's with `None`), one stored hour per query.
pub async fn load_window(
    store: &dyn RollupStore,
    baselines: &mut Baselines,
    region: Option<&str>,
    now: DateTime<Utc>,
) -> Result<LoadReport, StoreError> {
    let mut report = LoadReport::default();
    let (mut hour, until) = baselines.window_hours(now);
    while hour < until {
        let next = hour + Duration::hours(1);
        let rollups = store.rollups_between(region, hour, Some(next)).await?;
        let part = baselines.load_hour(&rollups, now);
        report.loaded += part.loaded;
        report.skipped.extend(part.skipped);
        hour = next;
    }
    Ok(report)
}
