//! Bounded readers every section shares: a value is checked against its range once, at load,
//! with the key named in the error, so no later arithmetic on it can overflow and no loop spin.

use crate::config::{invalid, ConfigError};
use std::time::Duration;

/// One second, the shortest bound most durations take.
pub(super) const SECOND: Duration = Duration::from_secs(1);
/// One minute.
pub(super) const MINUTE: Duration = Duration::from_secs(60);
/// One hour.
pub(super) const HOUR: Duration = Duration::from_secs(3600);
/// One day, the longest bound most durations take.
pub(super) const DAY: Duration = Duration::from_secs(86_400);

/// Parses `1s`, `60s`, `5m`, `7d`, `1h30m`; zero is refused.
pub fn parse_duration(key: &str, s: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| invalid(key, format!("{s:?} is not a duration ({e}); use e.g. 1s, 60s, 5m, 7d")))?;
    if d.is_zero() {
        return Err(invalid(key, "must be greater than zero"));
    }
    Ok(d)
}

/// A duration within `min..=max` (both shown in the error), so no later arithmetic on it can
/// overflow and no loop over it can spin.
pub fn duration_in(key: &str, s: &str, min: Duration, max: Duration) -> Result<Duration, ConfigError> {
    let d = parse_duration(key, s)?;
    if d < min || d > max {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        return Err(invalid(key, format!("{s:?} is out of range: must be from {} to {}", show(min), show(max))));
    }
    Ok(d)
}

/// A count within `min..=max`.
pub(super) fn count_in<T: Copy + Into<u128>>(key: &str, v: T, min: u64, max: u64) -> Result<T, ConfigError> {
    let n: u128 = v.into();
    if n < u128::from(min) || n > u128::from(max) {
        return Err(invalid(key, format!("{n} is out of range: must be from {min} to {max}")));
    }
    Ok(v)
}

/// A `usize` count within `min..=max` (usize has no `Into<u128>`).
pub(super) fn size_in(key: &str, v: usize, min: u64, max: u64) -> Result<usize, ConfigError> {
    count_in(key, v as u64, min, max).map(|_| v)
}

/// A finite number within `min..=max`; with `above_min`, `min` itself is refused.
pub(super) fn number_in(key: &str, v: f64, min: f64, max: f64, above_min: bool) -> Result<f64, ConfigError> {
    let low_ok = if above_min { v > min } else { v >= min };
    if v.is_finite() && low_ok && v <= max {
        Ok(v)
    } else {
        let low = if above_min { "above" } else { "from" };
        Err(invalid(key, format!("{v} is out of range: must be a number {low} {min} up to {max}")))
    }
}

/// Refuses control characters (CR, LF, NUL, ESC, …) in a value that ends up in a request,
/// a label or a log line.
pub(super) fn no_controls(key: &str, v: &str) -> Result<(), ConfigError> {
    if v.chars().any(|c| c.is_control()) {
        return Err(invalid(key, "must not contain control characters (CR, LF, tab, NUL, …)"));
    }
    Ok(())
}

/// A "k of the last n" count and its "n in a row" shorthand, validated: `shorthand` = N alone is
/// k = n = N (1–1000, as before the pair existed); `k` and `n` go together, 2 <= k <= n <= 100 (a
/// single failure never counts as trouble); setting the shorthand beside them is an error naming
/// the pair's key. Shared by `[alerts]` (`error_probes`, `error_k`, `error_n`) and `[breaker]`
/// (`consecutive_failures`, `failure_k`, `failure_n`).
pub(super) fn k_of_n(
    (short_key, short, short_given): (&str, u32, bool),
    (k_key, k): (&str, u32),
    (n_key, n): (&str, u32),
) -> Result<(u32, u32), ConfigError> {
    match (k, n) {
        (0, 0) => {
            let n = count_in(short_key, short, 1, 1000)?;
            Ok((n, n))
        }
        (_, 0) => Err(invalid(n_key, format!("{k_key} needs {n_key} too (k of the last n probes)"))),
        (0, _) => Err(invalid(k_key, format!("{n_key} needs {k_key} too (k of the last n probes)"))),
        _ if short_given => Err(invalid(
            k_key,
            format!("set either {short_key} (n in a row) or {k_key} and {n_key} (k of the last n), not both"),
        )),
        (k, _) if k < 2 => Err(invalid(k_key, "must be at least 2: a single failure never counts as trouble")),
        (k, n) if n < k || n > 100 => Err(invalid(n_key, format!("needs 2 <= {k_key} <= {n_key} <= 100"))),
        (k, n) => Ok((k, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;

    #[test]
    fn durations_accept_seconds_to_days() {
        assert_eq!(parse_duration("k", "1s").ok(), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("k", "5m").ok(), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("k", "7d").ok(), Some(Duration::from_secs(604800)));
        assert!(parse_duration("k", "0s").is_err());
    }

    #[test]
    fn every_duration_has_a_range_named_in_the_error() {
        let cases = [
            ("probe", "interval", "500ms", "1000000000y"),
            ("probe", "timeout", "1ms", "2h"),
            ("probe", "connect_timeout", "1ms", "2h"),
            ("probe", "ttft_timeout", "1ms", "2h"),
            ("storage", "batch_age", "100us", "2m"),
            ("baseline", "window", "30s", "100000y"),
            ("breaker", "failure_window", "500ms", "2d"),
            ("breaker", "open_for", "500ms", "2d"),
            ("alerts", "renotify", "500ms", "31d"),
            ("alerts", "delivery_deadline", "500ms", "31d"),
        ];
        for (section, field, low, high) in cases {
            let key = format!("{section}.{field}");
            for bad in [low, high] {
                // A long interval keeps probe.timeout ≤ interval out of the way.
                let extra = if section == "probe" && field != "interval" { "interval = \"1d\"\n" } else { "" };
                let text = format!("[{section}]\n{extra}{field} = \"{bad}\"");
                let msg = err_at(&text, &[], &key);
                assert!(msg.contains("out of range") || msg.contains("not a duration"), "{msg}");
            }
        }
        let c =
            Config::from_toml("[probe]\ninterval = \"1s\"\ntimeout = \"1s\"\n[baseline]\nwindow = \"90d\"", &env(&[]))
                .expect("the bounds themselves are accepted");
        assert_eq!(c.baseline.window, Duration::from_secs(90 * 86_400));
    }

    #[test]
    fn every_count_and_size_has_a_range_named_in_the_error() {
        let cases: [(&str, &str, &str, &str); 16] = [
            ("storage", "retention_days", "0", "4000000000"),
            ("storage", "spool_max_mb", "0", "18014398509481984"),
            ("storage", "batch_size", "0", "100001"),
            ("probe", "max_tokens", "0", "100001"),
            ("probe", "concurrency", "0", "9223372036854775807"),
            ("probe", "max_body_kb", "0", "18014398509481984"),
            ("probe", "daily_budget_usd", "0.0", "1e300"),
            ("baseline", "failover_factor", "0.5", "1e9"),
            ("baseline", "min_samples_p50", "0", "100000001"),
            ("baseline", "min_samples_p95", "0", "100000001"),
            ("baseline", "min_samples_p99", "0", "100000001"),
            ("breaker", "consecutive_failures", "0", "1001"),
            ("breaker", "latency_trips", "0", "1001"),
            ("alerts", "error_probes", "0", "1001"),
            ("alerts", "resolve_after", "0", "1001"),
            ("probe", "daily_budget_usd", "-1.0", "nan"),
        ];
        for (section, field, low, high) in cases {
            let key = format!("{section}.{field}");
            for bad in [low, high] {
                err_at(&format!("[{section}]\n{field} = {bad}"), &[], &key);
            }
        }
        // The same bounds hold for environment overrides, named by the key.
        err_at("", &[("VIGIL_PROBE_CONCURRENCY", "9223372036854775807")], "probe.concurrency");
        err_at("", &[("VIGIL_PROBE_INTERVAL", "500ms")], "probe.interval");
    }
}
