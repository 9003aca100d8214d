//! Row decoding shared by both backends. Column names and meanings are the same everywhere; a
//! backend only says how it reads the column kinds it stores differently (ids, times).

use crate::vocab::breaker::State;
use crate::vocab::canary::{CanaryRun, Logprobs, ModelIdentity};
use crate::vocab::check::{CheckRun, CheckVerdict};
use crate::vocab::health::{Health, HealthState};
use crate::vocab::provider_status::{ProviderComponent, ProviderIncident};
use crate::vocab::ratelimit::{Allowance, Headroom};
use crate::vocab::records::BalanceReading;
use crate::vocab::records::BreakerRecord;
use crate::vocab::records::BreakerTransition;
use crate::vocab::records::JsonText;
use crate::vocab::records::OutboxItem;
use crate::vocab::records::Rollup;
use crate::vocab::records::Sighting;
use crate::vocab::records::TargetStatus;
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Decode, Row, Type};
use std::str::FromStr;
use uuid::Uuid;

/// The column reads that differ between backends (native types on PostgreSQL, text on SQLite).
pub(crate) trait DialectRow: Row {
    /// A UUID column.
    fn uuid(&self, col: &str) -> Result<Uuid, sqlx::Error>;
    /// A UTC timestamp column.
    fn time(&self, col: &str) -> Result<DateTime<Utc>, sqlx::Error>;
    /// A nullable UTC timestamp column.
    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error>;
}

/// Every column read the decoders below make, so they need no driver bounds of their own.
pub(crate) trait StoredRow: DialectRow {
    /// A text column.
    fn text(&self, col: &str) -> Result<String, sqlx::Error>;
    /// A text column, borrowed from the row.
    fn text_ref(&self, col: &str) -> Result<&str, sqlx::Error>;
    /// A nullable text column.
    fn opt_text(&self, col: &str) -> Result<Option<String>, sqlx::Error>;
    /// A 64-bit integer column.
    fn int(&self, col: &str) -> Result<i64, sqlx::Error>;
    /// A nullable 64-bit integer column.
    fn opt_int(&self, col: &str) -> Result<Option<i64>, sqlx::Error>;
    /// A 32-bit integer column.
    fn int4(&self, col: &str) -> Result<i32, sqlx::Error>;
    /// A nullable 32-bit integer column.
    fn opt_int4(&self, col: &str) -> Result<Option<i32>, sqlx::Error>;
    /// A double column.
    fn float(&self, col: &str) -> Result<f64, sqlx::Error>;
    /// A nullable double column.
    fn opt_float(&self, col: &str) -> Result<Option<f64>, sqlx::Error>;
    /// A boolean column.
    fn flag(&self, col: &str) -> Result<bool, sqlx::Error>;
    /// A nullable boolean column.
    fn opt_flag(&self, col: &str) -> Result<Option<bool>, sqlx::Error>;
    /// A bytes column.
    fn bytes(&self, col: &str) -> Result<Vec<u8>, sqlx::Error>;
    /// A nullable bytes column.
    fn opt_bytes(&self, col: &str) -> Result<Option<Vec<u8>>, sqlx::Error>;
}

impl<R> StoredRow for R
where
    R: DialectRow,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> &'r str: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> f64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
{
    fn text(&self, col: &str) -> Result<String, sqlx::Error> {
        self.try_get(col)
    }
    fn text_ref(&self, col: &str) -> Result<&str, sqlx::Error> {
        self.try_get(col)
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, sqlx::Error> {
        self.try_get(col)
    }
    fn int(&self, col: &str) -> Result<i64, sqlx::Error> {
        self.try_get(col)
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(col)
    }
    fn int4(&self, col: &str) -> Result<i32, sqlx::Error> {
        self.try_get(col)
    }
    fn opt_int4(&self, col: &str) -> Result<Option<i32>, sqlx::Error> {
        self.try_get(col)
    }
    fn float(&self, col: &str) -> Result<f64, sqlx::Error> {
        self.try_get(col)
    }
    fn opt_float(&self, col: &str) -> Result<Option<f64>, sqlx::Error> {
        self.try_get(col)
    }
    fn flag(&self, col: &str) -> Result<bool, sqlx::Error> {
        self.try_get(col)
    }
    fn opt_flag(&self, col: &str) -> Result<Option<bool>, sqlx::Error> {
        self.try_get(col)
    }
    fn bytes(&self, col: &str) -> Result<Vec<u8>, sqlx::Error> {
        self.try_get(col)
    }
    fn opt_bytes(&self, col: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
        self.try_get(col)
    }
}

/// A decode failure of column `col`.
fn bad(col: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> sqlx::Error {
    sqlx::Error::ColumnDecode { index: col.to_owned(), source: source.into() }
}

/// The `provider, model, route, region` columns; the stored route is `''` when there is none.
pub(crate) fn target_of(row: &impl StoredRow) -> Result<Target, sqlx::Error> {
    let (provider, model, route, region) = target_columns(row)?;
    Ok(target_named(provider, model, route, region))
}

/// The four name columns, borrowed from the row.
fn target_columns(row: &impl StoredRow) -> Result<(&str, &str, &str, &str), sqlx::Error> {
    Ok((row.text_ref("provider")?, row.text_ref("model")?, row.text_ref("route")?, row.text_ref("region")?))
}

/// The target the stored names make (a stored route `''` is none).
fn target_named(provider: &str, model: &str, route: &str, region: &str) -> Target {
    Target::new(provider.into(), model.into(), (!route.is_empty()).then(|| route.into()), region.into())
}

/// A JSON column read as text, so neither driver needs a JSON feature.
pub(crate) fn json_of(row: &impl StoredRow, col: &str) -> Result<serde_json::Value, sqlx::Error> {
    serde_json::from_str(&row.text(col)?).map_err(|e| bad(col, e))
}

/// A breaker state column (`closed`, `half_open`, `open`); anything else is a decode error
/// naming the stored value, never a guess.
pub(crate) fn breaker_state(row: &impl StoredRow, col: &str) -> Result<State, sqlx::Error> {
    row.text(col)?.parse().map_err(|e: String| bad(col, e))
}

/// One row of `SAMPLE_COLUMNS`.
pub(crate) fn sample_of(row: &impl StoredRow) -> Result<Sample, sqlx::Error> {
    let tokens = |col: &str| -> Result<Option<u32>, sqlx::Error> {
        Ok(row.opt_int(col)?.map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)))
    };
    Ok(Sample {
        id: row.uuid("id")?,
        target: target_of(row)?,
        scheduled_at: row.time("scheduled_at")?,
        started_at: row.time("started_at")?,
        dns_ms: row.opt_float("dns_ms")?,
        connect_ms: row.opt_float("connect_ms")?,
        tls_ms: row.opt_float("tls_ms")?,
        proxy_ms: row.opt_float("proxy_ms")?,
        ttfb_ms: row.opt_float("ttfb_ms")?,
        ttft_ms: row.opt_float("ttft_ms")?,
        ttfr_ms: row.opt_float("ttfr_ms")?,
        total_ms: row.opt_float("total_ms")?,
        input_tokens: tokens("input_tokens")?,
        output_tokens: tokens("output_tokens")?,
        tokens_per_s: row.opt_float("tokens_per_s")?,
        status: row.opt_int4("status")?.and_then(|s| u16::try_from(s).ok()),
        outcome: Outcome::from_str(&row.text("outcome")?).map_err(|e| sqlx::Error::Decode(e.into()))?,
        error: row.opt_text("error")?,
        request_id: row.opt_text("request_id")?,
        adherence_ok: row.opt_flag("adherence_ok")?,
        cost_usd: row.opt_float("cost_usd")?,
        retry_after_s: row.opt_float("retry_after_s")?,
        ratelimit: Headroom { requests: allowance_of(row, "requests")?, tokens: allowance_of(row, "tokens")? },
        rejected: Vec::new(),
        deprecation: Vec::new(),
    })
}

/// One allowance of a sample row (`ratelimit_<kind>_*`), `None` when the row has none of it.
fn allowance_of(row: &impl StoredRow, kind: &str) -> Result<Option<Allowance>, sqlx::Error> {
    let count = |part: &str| -> Result<Option<u64>, sqlx::Error> {
        Ok(row.opt_int(&format!("ratelimit_{kind}_{part}"))?.and_then(|n| u64::try_from(n).ok()))
    };
    let a = Allowance {
        remaining: count("remaining")?,
        limit: count("limit")?,
        reset_at: row.opt_time(&format!("ratelimit_{kind}_reset_at"))?,
    };
    Ok((!a.is_empty()).then_some(a))
}

/// Decodes `rollups` rows, sharing the names consecutive rows repeat: a start reads an hour of
/// 50,000 rows at 10,000 targets, five metrics of each target in a row, and each row's own target
/// and metric were six small allocations apiece, tens of megabytes an hour that the week's
/// read-back scattered between the daemon's lasting state.
#[derive(Default)]
pub(crate) struct RollupNames {
    target: Option<Target>,
    metrics: Vec<crate::vocab::target::Name>,
}

impl RollupNames {
    /// One `rollups` row.
    pub(crate) fn rollup_of(&mut self, row: &impl StoredRow) -> Result<Rollup, sqlx::Error> {
        Ok(Rollup {
            target: self.target(row)?,
            metric: self.metric(row.text_ref("metric")?),
            hour: row.time("hour")?,
            count: row.int("count")?,
            histogram: row.bytes("histogram")?,
        })
    }

    /// The row's target: the last row's when the names are the same.
    fn target(&mut self, row: &impl StoredRow) -> Result<Target, sqlx::Error> {
        let (provider, model, route, region) = target_columns(row)?;
        if let Some(t) = self.target.as_ref().filter(|t| {
            *t.provider == *provider
                && *t.model == *model
                && t.route.as_deref().unwrap_or("") == route
                && *t.region == *region
        }) {
            return Ok(t.clone());
        }
        let t = target_named(provider, model, route, region);
        self.target = Some(t.clone());
        Ok(t)
    }

    /// The metric's name, shared by every row of that metric.
    fn metric(&mut self, metric: &str) -> crate::vocab::target::Name {
        if let Some(m) = self.metrics.iter().find(|m| m.as_str() == metric) {
            return m.clone();
        }
        let m = crate::vocab::target::Name::from(metric);
        // Five metrics are stored; a table holding other names still cannot grow this.
        if self.metrics.len() < 16 {
            self.metrics.push(m.clone());
        }
        m
    }
}

/// One `breaker_state` row (`detail` selected as text).
pub(crate) fn breaker_of(row: &impl StoredRow) -> Result<BreakerRecord, sqlx::Error> {
    Ok(BreakerRecord {
        target: target_of(row)?,
        state: breaker_state(row, "state")?,
        since: row.time("since")?,
        detail: JsonText::from_text(&row.text("detail")?).map_err(|e| bad("detail", e))?,
    })
}

/// One `breaker_transitions` row.
pub(crate) fn transition_of(row: &impl StoredRow) -> Result<BreakerTransition, sqlx::Error> {
    Ok(BreakerTransition {
        target: target_of(row)?,
        from_state: breaker_state(row, "from_state")?,
        to_state: breaker_state(row, "to_state")?,
        at: row.time("at")?,
        reason: row.text("reason")?,
    })
}

/// One `alert_outbox` row (`payload` selected as text).
pub(crate) fn outbox_of(row: &impl StoredRow) -> Result<OutboxItem, sqlx::Error> {
    Ok(OutboxItem {
        id: row.uuid("id")?,
        region: row.text("region")?,
        channel: row.text("channel")?,
        kind: row.text("kind")?,
        dedup_key: row.text("dedup_key")?,
        payload: json_of(row, "payload")?,
        created_at: row.time("created_at")?,
        next_attempt_at: row.time("next_attempt_at")?,
        attempts: row.int4("attempts")?,
        last_error: row.opt_text("last_error")?,
    })
}

/// One `credit_balances` row.
pub(crate) fn balance_of(row: &impl StoredRow) -> Result<BalanceReading, sqlx::Error> {
    Ok(BalanceReading {
        provider: row.text("provider")?,
        region: row.text("region")?,
        at: row.time("at")?,
        remaining_usd: row.float("remaining_usd")?,
    })
}

/// One `target_status` row.
pub(crate) fn target_status_of(row: &impl StoredRow) -> Result<TargetStatus, sqlx::Error> {
    Ok(TargetStatus {
        target: target_of(row)?,
        health: {
            let state = row.text("state")?;
            Health {
                state: HealthState::parse(&state),
                // `flapping` was a state before it was a mark of its own: rows of older peers.
                flapping: row.flag("flapping")? || state == "flapping",
                reason: row.opt_text("reason")?,
                // Not stored: only this region's status page marks the metric over.
                over: Vec::new(),
                // Not stored: the reason names it, and only this region ranks on it.
                failing: Vec::new(),
                // Not stored: the reason says until when, and only this region exports it.
                backoff_until: None,
                last_failure_class: None,
            }
        },
        over_latency: row.flag("over_latency")?,
        breaker: breaker_state(row, "breaker")?,
        updated_at: row.time("updated_at")?,
    })
}

/// One `incident_sightings` row.
pub(crate) fn sighting_of(row: &impl StoredRow) -> Result<Sighting, sqlx::Error> {
    Ok(Sighting { region: row.text("region")?, firing: row.flag("firing")?, updated_at: row.time("updated_at")? })
}

/// One `drills` row.
pub(crate) fn drill_of(row: &impl StoredRow) -> Result<crate::vocab::drill::Drill, sqlx::Error> {
    Ok(crate::vocab::drill::Drill {
        id: row.uuid("id")?,
        chain: row.text("chain")?,
        target: row.text("target")?,
        region: row.text("region")?,
        started_at: row.time("started_at")?,
        until: row.time("until_at")?,
        ended_at: row.opt_time("ended_at")?,
    })
}

/// One `chain_heads` row (a price only when both halves are stored).
pub(crate) fn chain_head_of(row: &impl StoredRow) -> Result<crate::vocab::chain_head::ChainHead, sqlx::Error> {
    let price = match (row.opt_float("input_per_mtok")?, row.opt_float("output_per_mtok")?) {
        (Some(input), Some(output)) => Some(crate::vocab::chain_head::PerMtok { input, output }),
        _ => None,
    };
    Ok(crate::vocab::chain_head::ChainHead {
        region: row.text("region")?,
        chain: row.text("chain")?,
        at: row.time("at")?,
        target: row.opt_text("target")?,
        price,
    })
}

/// One `provider_incidents` row.
pub(crate) fn incident_of(row: &impl StoredRow) -> Result<ProviderIncident, sqlx::Error> {
    Ok(ProviderIncident {
        provider: row.text("provider")?,
        id: row.text("incident_id")?,
        name: row.text("name")?,
        status: row.text("status")?,
        impact: row.text("impact")?,
        created_at: row.time("created_at")?,
        updated_at: row.opt_time("updated_at")?,
        resolved_at: row.opt_time("resolved_at")?,
        components: serde_json::from_str(&row.text("components")?).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        shortlink: row.opt_text("shortlink")?,
    })
}

/// One `provider_components` row.
pub(crate) fn component_of(row: &impl StoredRow) -> Result<ProviderComponent, sqlx::Error> {
    Ok(ProviderComponent {
        provider: row.text("provider")?,
        id: row.text("component_id")?,
        name: row.text("name")?,
        status: row.text("status")?,
        updated_at: row.opt_time("updated_at")?,
    })
}

/// One row of `CHECK_COLUMNS`: the sample's columns through [`sample_of`], then the check's.
pub(crate) fn check_of(row: &impl StoredRow) -> Result<CheckRun, sqlx::Error> {
    let verdict = row.text("verdict")?;
    Ok(CheckRun {
        sample: sample_of(row)?,
        check: row.text("check_name")?,
        verdict: CheckVerdict::parse(&verdict).ok_or_else(|| bad("verdict", format!("unknown verdict {verdict:?}")))?,
        why: row.text("why")?,
        answer: row.text("answer")?,
    })
}

/// One row of `WORKLOAD_COLUMNS`: the sample's columns through [`sample_of`], then the size asked.
pub(crate) fn workload_of(row: &impl StoredRow) -> Result<crate::vocab::workload::WorkloadRun, sqlx::Error> {
    let size = row.int("workload_tokens")?;
    Ok(crate::vocab::workload::WorkloadRun {
        sample: sample_of(row)?,
        input_tokens: u32::try_from(size).map_err(|e| bad("workload_tokens", e))?,
    })
}

/// One row of `CANARY_COLUMNS`: the sample's columns through [`sample_of`], then the canary's.
pub(crate) fn canary_of(row: &impl StoredRow) -> Result<CanaryRun, sqlx::Error> {
    let count = |col: &str| -> Result<u32, sqlx::Error> { Ok(u32::try_from(row.int4(col)?.max(0)).unwrap_or(0)) };
    let answers: Vec<String> = serde_json::from_value(json_of(row, "answers")?).map_err(|e| bad("answers", e))?;
    Ok(CanaryRun {
        sample: sample_of(row)?,
        prompt_version: count("prompt_version")?,
        correct: count("correct")?,
        total: count("total")?,
        answers_fingerprint: row.text("answers_fingerprint")?,
        answers,
        identity: ModelIdentity {
            model: row.opt_text("echo_model")?,
            system_fingerprint: row.opt_text("system_fingerprint")?,
            upstream: row.opt_text("upstream_provider")?,
        },
        logprobs: match (row.opt_int("logprob_tokens")?, row.opt_float("logprob_sum")?) {
            (Some(n), Some(sum)) => Some(Logprobs { tokens: u32::try_from(n.max(0)).unwrap_or(u32::MAX), sum }),
            _ => None,
        },
    })
}

/// One `members` row.
pub(crate) fn member_of(row: &impl StoredRow) -> Result<crate::vocab::member::Member, sqlx::Error> {
    Ok(crate::vocab::member::Member {
        region: row.text("region")?,
        id: row.text("member")?,
        host: row.text("host")?,
        started_at: row.time("started_at")?,
        heartbeat_at: row.time("heartbeat_at")?,
        active_from: row.time("active_from")?,
    })
}
