//! Row decoding shared by both backends. Column names and meanings are the same everywhere; a
//! backend only says how it reads the two column kinds it stores differently (ids, times).

use super::{BreakerTransition, OutboxItem};
use crate::sample::{Outcome, Sample};
use crate::target::Target;
use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Decode, Row, Type};
use std::str::FromStr;
use uuid::Uuid;

/// The column reads that differ between backends (native types on PostgreSQL, text on SQLite).
pub(crate) trait StoredRow: Row {
    /// A UUID column.
    fn uuid(&self, col: &str) -> Result<Uuid, sqlx::Error>;
    /// A UTC timestamp column.
    fn time(&self, col: &str) -> Result<DateTime<Utc>, sqlx::Error>;
    /// A nullable UTC timestamp column.
    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error>;
}

/// The stored route is `''` when the target has none.
fn route_of(route: String) -> Option<String> {
    (!route.is_empty()).then_some(route)
}

/// The `provider, model, route, region` columns.
pub(crate) fn target_of<R>(row: &R) -> Result<Target, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(Target {
        provider: row.try_get("provider")?,
        model: row.try_get("model")?,
        route: route_of(row.try_get("route")?),
        region: row.try_get("region")?,
    })
}

/// A JSON column read as text, so neither driver needs a JSON feature.
pub(crate) fn json_of<R>(row: &R, col: &str) -> Result<serde_json::Value, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let text: String = row.try_get(col)?;
    serde_json::from_str(&text).map_err(|e| sqlx::Error::ColumnDecode { index: col.to_owned(), source: Box::new(e) })
}

/// One row of `SAMPLE_COLUMNS`.
pub(crate) fn sample_of<R>(row: &R) -> Result<Sample, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> f64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let outcome: String = row.try_get("outcome")?;
    let tokens = |col: &str| -> Result<Option<u32>, sqlx::Error> {
        let v: Option<i64> = row.try_get(col)?;
        Ok(v.map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)))
    };
    let status: Option<i32> = row.try_get("status")?;
    Ok(Sample {
        id: row.uuid("id")?,
        target: target_of(row)?,
        scheduled_at: row.time("scheduled_at")?,
        started_at: row.time("started_at")?,
        dns_ms: row.try_get("dns_ms")?,
        connect_ms: row.try_get("connect_ms")?,
        tls_ms: row.try_get("tls_ms")?,
        proxy_ms: row.try_get("proxy_ms")?,
        ttfb_ms: row.try_get("ttfb_ms")?,
        ttft_ms: row.try_get("ttft_ms")?,
        ttfr_ms: row.try_get("ttfr_ms")?,
        total_ms: row.try_get("total_ms")?,
        input_tokens: tokens("input_tokens")?,
        output_tokens: tokens("output_tokens")?,
        tokens_per_s: row.try_get("tokens_per_s")?,
        status: status.and_then(|s| u16::try_from(s).ok()),
        outcome: Outcome::from_str(&outcome).map_err(|e| sqlx::Error::Decode(e.into()))?,
        error: row.try_get("error")?,
        request_id: row.try_get("request_id")?,
        adherence_ok: row.try_get("adherence_ok")?,
        cost_usd: row.try_get("cost_usd")?,
        retry_after_s: row.try_get("retry_after_s")?,
        rejected: Vec::new(),
        deprecation: Vec::new(),
    })
}

/// One `alert_outbox` row (`payload` selected as text).
pub(crate) fn outbox_of<R>(row: &R) -> Result<OutboxItem, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(OutboxItem {
        id: row.uuid("id")?,
        region: row.try_get("region")?,
        channel: row.try_get("channel")?,
        kind: row.try_get("kind")?,
        dedup_key: row.try_get("dedup_key")?,
        payload: json_of(row, "payload")?,
        created_at: row.time("created_at")?,
        next_attempt_at: row.time("next_attempt_at")?,
        attempts: row.try_get("attempts")?,
        last_error: row.try_get("last_error")?,
    })
}

/// A breaker state column (`closed`, `half_open`, `open`); anything else is a decode error.
pub(crate) fn breaker_state<R>(row: &R, col: &str) -> Result<crate::breaker::State, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let text: String = row.try_get(col)?;
    text.parse().map_err(|e: String| sqlx::Error::ColumnDecode { index: col.to_owned(), source: e.into() })
}

/// One `breaker_transitions` row.
pub(crate) fn transition_of<R>(row: &R) -> Result<BreakerTransition, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(BreakerTransition {
        target: target_of(row)?,
        from_state: breaker_state(row, "from_state")?,
        to_state: breaker_state(row, "to_state")?,
        at: row.time("at")?,
        reason: row.try_get("reason")?,
    })
}

/// One `target_status` row.
pub(crate) fn target_status_of<R>(row: &R) -> Result<super::TargetStatus, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let breaker: String = row.try_get("breaker")?;
    Ok(super::TargetStatus {
        target: target_of(row)?,
        state: super::TargetHealth::parse(&row.try_get::<String, _>("state")?),
        over_latency: row.try_get("over_latency")?,
        breaker: breaker.parse().unwrap_or(crate::breaker::State::Closed),
        updated_at: row.time("updated_at")?,
    })
}

/// One `provider_incidents` row.
pub(crate) fn incident_of<R>(row: &R) -> Result<crate::provider_status::ProviderIncident, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let components: String = row.try_get("components")?;
    Ok(crate::provider_status::ProviderIncident {
        provider: row.try_get("provider")?,
        id: row.try_get("incident_id")?,
        name: row.try_get("name")?,
        status: row.try_get("status")?,
        impact: row.try_get("impact")?,
        created_at: row.time("created_at")?,
        updated_at: row.opt_time("updated_at")?,
        resolved_at: row.opt_time("resolved_at")?,
        components: serde_json::from_str(&components).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        shortlink: row.try_get("shortlink")?,
    })
}

/// One `provider_components` row.
pub(crate) fn component_of<R>(row: &R) -> Result<crate::provider_status::ProviderComponent, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(crate::provider_status::ProviderComponent {
        provider: row.try_get("provider")?,
        id: row.try_get("component_id")?,
        name: row.try_get("name")?,
        status: row.try_get("status")?,
        updated_at: row.opt_time("updated_at")?,
    })
}

/// One row of `CANARY_COLUMNS`: the sample's columns through [`sample_of`], then the canary's.
pub(crate) fn canary_of<R>(row: &R) -> Result<crate::canary::CanaryRun, sqlx::Error>
where
    R: StoredRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> f64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let count = |col: &str| -> Result<u32, sqlx::Error> {
        let v: i32 = row.try_get(col)?;
        Ok(u32::try_from(v.max(0)).unwrap_or(0))
    };
    let answers: Vec<String> = serde_json::from_value(json_of(row, "answers")?)
        .map_err(|e| sqlx::Error::ColumnDecode { index: "answers".into(), source: Box::new(e) })?;
    let logprob_tokens: Option<i64> = row.try_get("logprob_tokens")?;
    let logprob_sum: Option<f64> = row.try_get("logprob_sum")?;
    Ok(crate::canary::CanaryRun {
        sample: sample_of(row)?,
        prompt_version: count("prompt_version")?,
        correct: count("correct")?,
        total: count("total")?,
        answers_fingerprint: row.try_get("answers_fingerprint")?,
        answers,
        identity: crate::canary::ModelIdentity {
            model: row.try_get("echo_model")?,
            system_fingerprint: row.try_get("system_fingerprint")?,
            upstream: row.try_get("upstream_provider")?,
        },
        logprobs: match (logprob_tokens, logprob_sum) {
            (Some(n), Some(sum)) => {
                Some(crate::canary::Logprobs { tokens: u32::try_from(n.max(0)).unwrap_or(u32::MAX), sum })
            }
            _ => None,
        },
    })
}
