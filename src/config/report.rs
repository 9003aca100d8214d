//! `[report]`: when the weekly summary goes out and to whom, checked at load so a typo in the
//! schedule fails the start rather than silently never sending.

use crate::config::{invalid, AlertsConfig, ConfigError};
use serde::{Deserialize, Serialize};

/// `[report]`.
#[derive(Debug, Clone)]
pub struct ReportConfig {
    /// When the weekly summary email goes out: a cron expression with seconds, in UTC
    /// (tokio-cron-scheduler syntax); `None` when set to `off`.
    pub weekly: Option<String>,
    /// Recipients of the weekly summary; empty sends it to each `[[alerts.email]]` channel's own `to`.
    pub weekly_to: Vec<String>,
}

/// `[report]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawReport {
    weekly: String,
    // A list, so it has no VIGIL_* override (those cover scalars only).
    #[serde(skip_serializing)]
    weekly_to: Vec<String>,
}

impl Default for RawReport {
    fn default() -> Self {
        RawReport { weekly: DEFAULT_WEEKLY.into(), weekly_to: vec![] }
    }
}

/// Default `report.weekly`: Mondays at 09:00:00 UTC.
pub const DEFAULT_WEEKLY: &str = "0 0 9 * * Mon";

/// Parses a cron expression the way tokio-cron-scheduler does (six fields, seconds first).
pub fn parse_cron(key: &str, expr: &str) -> Result<croner::Cron, ConfigError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(expr.trim())
        .map_err(|e| {
            invalid(
                key,
                format!(
                    "{expr:?} is not a cron expression with seconds (sec min hour day-of-month month day-of-week, \
                     e.g. \"{DEFAULT_WEEKLY}\"; or \"off\"): {e}"
                ),
            )
        })
}

/// `[report]`, validated; the recipients need an email channel to send through.
pub(super) fn validate(raw: RawReport, alerts: &AlertsConfig) -> Result<ReportConfig, ConfigError> {
    let weekly = match raw.weekly.trim() {
        "" | "off" => None,
        expr => {
            parse_cron("report.weekly", expr)?;
            Some(expr.to_string())
        }
    };
    for (i, to) in raw.weekly_to.iter().enumerate() {
        to.parse::<lettre::message::Mailbox>()
            .map_err(|e| invalid(format!("report.weekly_to[{i}]"), format!("{to:?} is not an email address: {e}")))?;
    }
    if !raw.weekly_to.is_empty() && alerts.email.is_empty() {
        return Err(invalid("report.weekly_to", "needs an [[alerts.email]] channel to send through"));
    }
    Ok(ReportConfig { weekly, weekly_to: raw.weekly_to })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_util::{env, err};
    use crate::config::Config;

    #[test]
    fn weekly_report_schedule_defaults_to_monday_0900_utc_and_can_be_turned_off() {
        let c = Config::from_toml("", &env(&[])).expect("valid");
        assert_eq!(c.report.weekly.as_deref(), Some("0 0 9 * * Mon"));
        assert!(c.report.weekly_to.is_empty());
        let cron = parse_cron("k", DEFAULT_WEEKLY).expect("default parses");
        let sunday = chrono::DateTime::parse_from_rfc3339("2026-11-29T23:00:00Z").expect("time");
        let next = cron.find_next_occurrence(&sunday.with_timezone(&chrono::Utc), false).expect("next");
        assert_eq!(next.to_rfc3339(), "2026-11-30T09:00:00+00:00", "the Monday after, 09:00 UTC");
        let off = Config::from_toml("[report]\nweekly = \"off\"", &env(&[])).expect("valid");
        assert_eq!(off.report.weekly, None);
        let every_friday = Config::from_toml("", &env(&[("VIGIL_REPORT_WEEKLY", "30 15 17 * * Fri")])).expect("env");
        assert_eq!(every_friday.report.weekly.as_deref(), Some("30 15 17 * * Fri"));
        assert!(c.redacted_toml().contains("weekly = \"0 0 9 * * Mon\""), "{}", c.redacted_toml());
    }

    #[test]
    fn a_bad_weekly_schedule_or_recipient_names_the_key() {
        let e = err("[report]\nweekly = \"0 9 * * Mon\"", &[]);
        assert!(e.starts_with("report.weekly: \"0 9 * * Mon\" is not a cron expression with seconds"), "{e}");
        let e = err("[report]\nweekly = \"0 0 25 * * Mon\"", &[]);
        assert!(e.starts_with("report.weekly: "), "{e}");
        let e = err("", &[("VIGIL_REPORT_WEEKLY", "mondays")]);
        assert!(e.starts_with("report.weekly: \"mondays\""), "{e}");
        let e = err("[report]\nweekly_to = [\"ops@example.com\"]", &[]);
        assert_eq!(e, "report.weekly_to: needs an [[alerts.email]] channel to send through");
        let with_email = "[[alerts.email]]\nsmtp_url_env = \"SMTP_URL\"\nfrom = \"vigil@example.com\"\nto = [\"a@example.com\"]\n[report]\nweekly_to = [\"ops@example.com\", \"not an address\"]";
        let e = err(with_email, &[("SMTP_URL", "smtp://127.0.0.1:25?tls=none")]);
        assert!(e.starts_with("report.weekly_to[1]: \"not an address\" is not an email address"), "{e}");
        assert!(err("[report]\nweekly = 5", &[]).starts_with("report.weekly:"));
        assert!(err("[report]\nmonthly = \"x\"", &[]).starts_with("report.monthly: unknown field"));
    }
}
