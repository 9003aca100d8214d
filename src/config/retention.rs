//! `[storage.retention]`: how long each table is kept. Checked against the baseline window,
//! because baselines are rebuilt from rollups at start and pruning inside it would shrink them.

use crate::config::parse::{count_in, duration_in, DAY, MINUTE};
use crate::config::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[storage.retention]`: days each table is kept, and how the job deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Hourly rollups (`rollups_days`, at least the baseline window).
    pub rollups_days: u32,
    /// Delivered and abandoned alert outbox items (`outbox_days`); pending ones are never removed.
    pub outbox_days: u32,
    /// Breaker transition history (`breaker_transitions_days`).
    pub breaker_transitions_days: u32,
    /// Credit balance readings (`credit_readings_days`).
    pub credit_readings_days: u32,
    /// Alert state, target status, incident leases and sightings of regions that stopped
    /// writing them (`alert_state_days`).
    pub alert_state_days: u32,
    /// Providers' status page incidents and components (`provider_status_days`).
    pub provider_status_days: u32,
    /// Most rows one delete statement removes (`batch_size`).
    pub batch_size: u32,
    /// Time between retention runs (`every`).
    pub every: Duration,
}

/// `[storage.retention]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRetention {
    rollups_days: u32,
    outbox_days: u32,
    breaker_transitions_days: u32,
    credit_readings_days: u32,
    alert_state_days: u32,
    provider_status_days: u32,
    batch_size: u32,
    every: String,
}

impl Default for RawRetention {
    fn default() -> Self {
        RawRetention {
            rollups_days: 400,
            outbox_days: 30,
            breaker_transitions_days: 180,
            credit_readings_days: 90,
            alert_state_days: 30,
            provider_status_days: 180,
            batch_size: 5_000,
            every: "1h".into(),
        }
    }
}

/// `[storage.retention]`, validated; rollups must outlive `baseline_window`.
pub(super) fn validate(raw: &RawRetention, baseline_window: Duration) -> Result<RetentionConfig, ConfigError> {
    let days = |key: &str, v: u32| count_in(&format!("storage.retention.{key}"), v, 1, 3650);
    let rollups_days = days("rollups_days", raw.rollups_days)?;
    // Baselines are rebuilt from rollups at start: pruning inside the window would shrink them.
    if Duration::from_secs(u64::from(rollups_days) * 86_400) < baseline_window {
        return Err(invalid(
            "storage.retention.rollups_days",
            format!(
                "{rollups_days} days is shorter than baseline.window ({}): baselines are built from rollups",
                humantime::format_duration(baseline_window)
            ),
        ));
    }
    Ok(RetentionConfig {
        rollups_days,
        outbox_days: days("outbox_days", raw.outbox_days)?,
        breaker_transitions_days: days("breaker_transitions_days", raw.breaker_transitions_days)?,
        credit_readings_days: days("credit_readings_days", raw.credit_readings_days)?,
        alert_state_days: days("alert_state_days", raw.alert_state_days)?,
        provider_status_days: days("provider_status_days", raw.provider_status_days)?,
        batch_size: count_in("storage.retention.batch_size", raw.batch_size, 100, 100_000)?,
        every: duration_in("storage.retention.every", &raw.every, MINUTE, DAY)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::parse::{HOUR, MINUTE};
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;

    #[test]
    fn retention_of_every_table_has_a_default_a_range_and_an_env_override() {
        let c = Config::from_toml("", &env(&[])).expect("defaults");
        let r = &c.storage.retention;
        assert_eq!(
            (r.rollups_days, r.outbox_days, r.breaker_transitions_days, r.credit_readings_days),
            (400, 30, 180, 90)
        );
        assert_eq!((r.alert_state_days, r.provider_status_days, r.batch_size), (30, 180, 5_000));
        assert_eq!(r.every, HOUR);
        let c = Config::from_toml(
            "[storage.retention]\noutbox_days = 7\nevery = \"10m\"",
            &env(&[("VIGIL_STORAGE_RETENTION_ROLLUPS_DAYS", "120")]),
        )
        .expect("set");
        assert_eq!((c.storage.retention.rollups_days, c.storage.retention.outbox_days), (120, 7));
        assert_eq!(c.storage.retention.every, 10 * MINUTE);
        for (key, bad) in [
            ("rollups_days", "0"),
            ("outbox_days", "3651"),
            ("breaker_transitions_days", "0"),
            ("credit_readings_days", "0"),
            ("alert_state_days", "0"),
            ("provider_status_days", "0"),
            ("batch_size", "99"),
            ("every", "\"10s\""),
        ] {
            err_at(&format!("[storage.retention]\n{key} = {bad}"), &[], &format!("storage.retention.{key}"));
        }
        err_at("[storage.retention]\nforever = true", &[], "storage.retention.forever");
        err_at("", &[("VIGIL_STORAGE_RETENTION_BATCH_SIZE", "many")], "VIGIL_STORAGE_RETENTION_BATCH_SIZE");
        let e = err_at(
            "[baseline]\nwindow = \"30d\"\n[storage.retention]\nrollups_days = 20",
            &[],
            "storage.retention.rollups_days",
        );
        assert!(e.contains("shorter than baseline.window"), "{e}");
        // The printed config carries the section and reads back.
        let shown = c.redacted_toml();
        assert!(shown.contains("[storage.retention]") && shown.contains("rollups_days = 120"), "{shown}");
        Config::from_toml(&shown, &env(&[])).expect("reads back");
    }
}
