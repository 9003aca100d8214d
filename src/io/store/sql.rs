//! The SQL both backends run, written once: each statement is its text (with `$1`-style
//! placeholders, which sqlx-postgres and sqlx-sqlite both accept) plus its values as [`Arg`]s,
//! which each backend binds in its own column types (native on PostgreSQL, text on SQLite).

use super::SampleQuery;
use crate::vocab::canary::CanaryRun;
use crate::vocab::check::CheckRun;
use crate::vocab::provider_status::{ProviderComponent, ProviderIncident};
use crate::vocab::ratelimit::RateLimitKind;
use crate::vocab::records::BalanceReading;
use crate::vocab::records::BreakerRecord;
use crate::vocab::records::BreakerTransition;
use crate::vocab::records::OutboxItem;
use crate::vocab::records::Rollup;
use crate::vocab::records::TargetStatus;
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use crate::vocab::workload::WorkloadRun;
use chrono::{DateTime, Utc};
use std::borrow::Cow;
use std::fmt::Write as _;
use uuid::Uuid;

/// Every `samples` column, in table order (both backends use the same names).
pub(crate) const SAMPLE_COLUMNS: &str = "id, provider, model, route, region, scheduled_at, started_at, dns_ms, \
    connect_ms, tls_ms, ttfb_ms, ttft_ms, ttfr_ms, total_ms, input_tokens, output_tokens, tokens_per_s, status, \
    outcome, error, request_id, adherence_ok, cost_usd, retry_after_s, proxy_ms, ratelimit_requests_remaining, \
    ratelimit_requests_limit, ratelimit_requests_reset_at, ratelimit_tokens_remaining, ratelimit_tokens_limit, \
    ratelimit_tokens_reset_at";

/// The columns of `canary_runs`: the sample's, then the canary's own.
pub(crate) const CANARY_COLUMNS: &str = "id, provider, model, route, region, scheduled_at, started_at, dns_ms, \
    connect_ms, tls_ms, ttfb_ms, ttft_ms, ttfr_ms, total_ms, input_tokens, output_tokens, tokens_per_s, status, \
    outcome, error, request_id, adherence_ok, cost_usd, retry_after_s, proxy_ms, ratelimit_requests_remaining, \
    ratelimit_requests_limit, ratelimit_requests_reset_at, ratelimit_tokens_remaining, ratelimit_tokens_limit, \
    ratelimit_tokens_reset_at, prompt_version, correct, total, \
    answers_fingerprint, answers, echo_model, system_fingerprint, upstream_provider, logprob_tokens, logprob_sum";

/// The columns of `check_runs`: the sample's, then the golden check's own.
pub(crate) const CHECK_COLUMNS: &str = "id, provider, model, route, region, scheduled_at, started_at, dns_ms, \
    connect_ms, tls_ms, ttfb_ms, ttft_ms, ttfr_ms, total_ms, input_tokens, output_tokens, tokens_per_s, status, \
    outcome, error, request_id, adherence_ok, cost_usd, retry_after_s, proxy_ms, ratelimit_requests_remaining, \
    ratelimit_requests_limit, ratelimit_requests_reset_at, ratelimit_tokens_remaining, ratelimit_tokens_limit, \
    ratelimit_tokens_reset_at, check_name, verdict, why, answer";

/// The columns of `workload_runs`: the sample's, then the size asked.
pub(crate) const WORKLOAD_COLUMNS: &str = "id, provider, model, route, region, scheduled_at, started_at, dns_ms, \
    connect_ms, tls_ms, ttfb_ms, ttft_ms, ttfr_ms, total_ms, input_tokens, output_tokens, tokens_per_s, status, \
    outcome, error, request_id, adherence_ok, cost_usd, retry_after_s, proxy_ms, ratelimit_requests_remaining, \
    ratelimit_requests_limit, ratelimit_requests_reset_at, ratelimit_tokens_remaining, ratelimit_tokens_limit, \
    ratelimit_tokens_reset_at, workload_tokens";

/// Values per sample row (the columns of [`SAMPLE_COLUMNS`]).
const SAMPLE_VALUES: usize = 31;
/// Values per canary row (the columns of [`CANARY_COLUMNS`]).
const CANARY_VALUES: usize = 41;
/// Canary runs per multi-row INSERT: 20,500 values stays under SQLite's 32,766 and
/// PostgreSQL's 65,535 parameters per statement.
pub(crate) const CANARY_CHUNK: usize = 500;
const _: () = assert!(CANARY_CHUNK * CANARY_VALUES < 32_766);
/// Values per check row (the columns of [`CHECK_COLUMNS`]).
const CHECK_VALUES: usize = SAMPLE_VALUES + 4;
/// Check runs per multi-row INSERT, under both backends' parameter limits.
pub(crate) const CHECK_CHUNK: usize = 500;
const _: () = assert!(CHECK_CHUNK * CHECK_VALUES < 32_766);
/// Values per workload row (the columns of [`WORKLOAD_COLUMNS`]).
const WORKLOAD_VALUES: usize = SAMPLE_VALUES + 1;
/// Workload runs per multi-row INSERT, under both backends' parameter limits.
pub(crate) const WORKLOAD_CHUNK: usize = 500;
const _: () = assert!(WORKLOAD_CHUNK * WORKLOAD_VALUES < 32_766);

/// The columns of `alert_outbox` an [`OutboxItem`] is read from (JSON read back as text).
const OUTBOX_COLUMNS: &str = "id, region, channel, kind, dedup_key, CAST(payload AS TEXT) AS payload, created_at, \
    next_attempt_at, attempts, last_error";
/// The columns of `breaker_transitions` a [`BreakerTransition`] is read from.
const TRANSITION_COLUMNS: &str = "provider, model, route, region, from_state, to_state, at, reason";

/// One value bound to a placeholder. Kinds the backends store differently (times, ids, JSON)
/// are their own variants; the rest are plain SQL types, `None` binding NULL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    /// Text.
    Text(Option<String>),
    /// Text shared with its owner (a target's names), bound without a copy: a sample and a
    /// rollup carry four names each, a few thousand a second at 10,000 targets.
    SharedText(std::sync::Arc<str>),
    /// 64-bit integer.
    Int(Option<i64>),
    /// 32-bit integer (PostgreSQL `integer` columns).
    Int4(Option<i32>),
    /// Double.
    Float(Option<f64>),
    /// Boolean (SQLite stores 0/1).
    Bool(Option<bool>),
    /// Bytes.
    Bytes(Vec<u8>),
    /// Bytes shared with their owner, bound without a copy (a region's compressed alert state).
    SharedBytes(std::sync::Arc<[u8]>),
    /// A UTC time (`timestamptz` on PostgreSQL, fixed-width text on SQLite).
    Time(Option<DateTime<Utc>>),
    /// A UUID (`uuid` on PostgreSQL, hyphenated text on SQLite).
    Id(Uuid),
    /// A JSON document as text (`jsonb` on PostgreSQL, text on SQLite), shared so that it is
    /// bound without a copy (a breaker's stored detail).
    Json(std::sync::Arc<str>),
}

/// `From` conversions so statements read `.arg(&r.metric)`, `.arg(r.hour)`, `.arg(None::<&str>)`.
macro_rules! arg_from {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {
        $(impl From<$t> for Arg {
            fn from($v: $t) -> Self {
                $e
            }
        })*
    };
}

arg_from! {
    &str => |v| Arg::Text(Some(v.to_owned())),
    &String => |v| Arg::Text(Some(v.clone())),
    &crate::vocab::target::Name => |v| Arg::SharedText(v.shared()),
    String => |v| Arg::Text(Some(v)),
    Option<&str> => |v| Arg::Text(v.map(str::to_owned)),
    i64 => |v| Arg::Int(Some(v)),
    Option<i64> => |v| Arg::Int(v),
    i32 => |v| Arg::Int4(Some(v)),
    Option<i32> => |v| Arg::Int4(v),
    f64 => |v| Arg::Float(Some(v)),
    Option<f64> => |v| Arg::Float(v),
    bool => |v| Arg::Bool(Some(v)),
    Option<bool> => |v| Arg::Bool(v),
    DateTime<Utc> => |v| Arg::Time(Some(v)),
    Option<DateTime<Utc>> => |v| Arg::Time(v),
    Uuid => |v| Arg::Id(v),
}

/// One statement: its text and the values for `$1`, `$2`, … in order. `$` appears in the text
/// only as a placeholder (SQLite's binding turns each into `?`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stmt {
    /// The SQL text.
    pub sql: Cow<'static, str>,
    /// One value per placeholder number.
    pub args: Vec<Arg>,
    /// Kept prepared on its connection for the next use of the same text (the default), or
    /// prepared for this use alone. A multi-row insert's text differs with each batch size, and
    /// each one kept held megabytes of SQLite's compiled program: 50 MB at 10,000 targets.
    pub cached: bool,
}

impl Stmt {
    /// A statement whose text is fixed; add its values with [`Stmt::arg`].
    fn new(sql: impl Into<Cow<'static, str>>) -> Self {
        Stmt { sql: sql.into(), args: Vec::new(), cached: true }
    }

    /// Adds the value for the next placeholder number.
    fn arg(mut self, v: impl Into<Arg>) -> Self {
        self.args.push(v.into());
        self
    }

    /// Appends a new placeholder to the text and its value (for text built piece by piece).
    fn push_arg(&mut self, v: impl Into<Arg>) -> &mut Self {
        self.args.push(v.into());
        let _ = write!(self.sql.to_mut(), "${}", self.args.len());
        self
    }

    /// Appends text.
    fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.to_mut().push_str(sql);
        self
    }
}

/// `SELECT 1`: reachability.
pub(crate) fn ping() -> Stmt {
    Stmt::new("SELECT 1")
}

/// The row filters of a [`SampleQuery`]; dates compare as times in both backends.
fn push_sample_filters(st: &mut Stmt, q: &SampleQuery) {
    st.push(" WHERE 1 = 1");
    if let Some(region) = &q.region {
        st.push(" AND region = ").push_arg(region);
    }
    if let Some(region) = &q.except_region {
        st.push(" AND region <> ").push_arg(region);
    }
    if let Some(t) = &q.target {
        push_target_filter(st, t);
    }
    if let Some(since) = q.since {
        st.push(" AND started_at >= ").push_arg(since);
    }
    if let Some(until) = q.until {
        st.push(" AND started_at < ").push_arg(until);
    }
}

/// ` AND provider = … AND model = … AND route = …` for one target (its region is not used).
fn push_target_filter(st: &mut Stmt, t: &Target) {
    st.push(" AND provider = ").push_arg(&t.provider);
    st.push(" AND model = ").push_arg(&t.model);
    st.push(" AND route = ").push_arg(t.route_label());
}

/// Samples matching `q`: oldest first, or the newest `limit` newest first.
pub(crate) fn samples(q: &SampleQuery) -> Stmt {
    // `latest`: the filters apply inside, then each target's newest per region is kept.
    let (head, tail) = match q.latest {
        true => (
            format!(
                "SELECT {SAMPLE_COLUMNS} FROM (SELECT {SAMPLE_COLUMNS}, ROW_NUMBER() OVER \
                 (PARTITION BY region, provider, model, route ORDER BY started_at DESC, id DESC) AS newest FROM samples"
            ),
            ") latest WHERE newest = 1",
        ),
        false => (format!("SELECT {SAMPLE_COLUMNS} FROM samples"), ""),
    };
    let mut st = Stmt::new(head);
    push_sample_filters(&mut st, q);
    st.push(tail);
    match q.limit {
        Some(limit) => st.push(" ORDER BY started_at DESC, id DESC LIMIT ").push_arg(limit.max(0)),
        None => st.push(" ORDER BY started_at, id"),
    };
    st
}

/// How many samples match `q` (as `n`).
pub(crate) fn count_samples(q: &SampleQuery) -> Stmt {
    let mut st = Stmt::new("SELECT count(*) AS n FROM samples");
    push_sample_filters(&mut st, q);
    st
}

/// The values of one sample row, in [`SAMPLE_COLUMNS`] order.
fn sample_args(args: &mut Vec<Arg>, s: &Sample) {
    args.extend([
        Arg::Id(s.id),
        (&s.target.provider).into(),
        (&s.target.model).into(),
        route_arg(&s.target),
        (&s.target.region).into(),
        s.scheduled_at.into(),
        s.started_at.into(),
        s.dns_ms.into(),
        s.connect_ms.into(),
        s.tls_ms.into(),
        s.ttfb_ms.into(),
        s.ttft_ms.into(),
        s.ttfr_ms.into(),
        s.total_ms.into(),
        s.input_tokens.map(i64::from).into(),
        s.output_tokens.map(i64::from).into(),
        s.tokens_per_s.into(),
        s.status.map(i32::from).into(),
        s.outcome.as_str().into(),
        s.error.as_deref().into(),
        s.request_id.as_deref().into(),
        s.adherence_ok.into(),
        s.cost_usd.into(),
        s.retry_after_s.into(),
        s.proxy_ms.into(),
    ]);
    for kind in RateLimitKind::ALL {
        let a = s.ratelimit.get(kind);
        let count = |n: Option<u64>| Arg::Int(n.map(|n| i64::try_from(n).unwrap_or(i64::MAX)));
        args.extend([
            count(a.and_then(|a| a.remaining)),
            count(a.and_then(|a| a.limit)),
            a.and_then(|a| a.reset_at).into(),
        ]);
    }
}

/// `INSERT INTO table (columns) VALUES ($1, …), (…) ON CONFLICT (id) DO NOTHING` for `rows`
/// rows of `per_row` values each, given in `args`; not kept prepared (batches vary in size).
fn multi_row_insert(table: &str, columns: &str, rows: usize, per_row: usize, args: Vec<Arg>) -> Stmt {
    Stmt { cached: false, ..multi_row(table, columns, rows, per_row, args, "ON CONFLICT (id) DO NOTHING") }
}

/// `INSERT INTO table (columns) VALUES ($1, …), (…) {conflict}`.
fn multi_row(table: &str, columns: &str, rows: usize, per_row: usize, args: Vec<Arg>, conflict: &str) -> Stmt {
    let mut sql = String::with_capacity(64 + columns.len() + conflict.len() + rows * per_row * 7);
    let _ = write!(sql, "INSERT INTO {table} ({columns}) VALUES ");
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for col in 0..per_row {
            let sep = if col == 0 { "" } else { ", " };
            let _ = write!(sql, "{sep}${}", row * per_row + col + 1);
        }
        sql.push(')');
    }
    sql.push(' ');
    sql.push_str(conflict);
    Stmt { sql: sql.into(), args, cached: true }
}

/// Rows per multi-row upsert: 8 values each stays far under both backends' parameter limits.
pub(crate) const UPSERT_CHUNK: usize = 500;

/// The last of each key, in first-seen order: one statement may not touch a row twice
/// (PostgreSQL refuses), and of two writes to one key the later one is what sequential
/// upserts would have left.
fn last_per_key<'a, T, K: Eq + std::hash::Hash>(rows: &'a [T], key: impl Fn(&'a T) -> K) -> Vec<&'a T> {
    let mut at: std::collections::HashMap<K, usize> = std::collections::HashMap::with_capacity(rows.len());
    let mut out: Vec<&T> = Vec::with_capacity(rows.len());
    for r in rows {
        match at.entry(key(r)) {
            std::collections::hash_map::Entry::Occupied(e) => out[*e.get()] = r,
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(r);
            }
        }
    }
    out
}

/// One multi-row insert of `samples`, skipping ids already stored (SQLite's path; PostgreSQL
/// copies). Keep `samples.len()` × 31 under the backend's parameter limit.
pub(crate) fn insert_samples(samples: &[Sample]) -> Stmt {
    let mut args = Vec::with_capacity(samples.len() * SAMPLE_VALUES);
    for s in samples {
        sample_args(&mut args, s);
    }
    multi_row_insert("samples", SAMPLE_COLUMNS, samples.len(), SAMPLE_VALUES, args)
}

/// Deletes rollups whose hour is before `cutoff`.
pub(crate) fn purge_rollups_before(cutoff: DateTime<Utc>) -> Stmt {
    Stmt::new("DELETE FROM rollups WHERE hour < $1").arg(cutoff)
}

/// Inserts or replaces hourly rollups, [`UPSERT_CHUNK`] rows per statement: one round trip
/// per chunk, not per rollup (a persist writes one per target and metric every minute).
pub(crate) fn upsert_rollups(rollups: &[Rollup]) -> impl Iterator<Item = Stmt> + Send + '_ {
    upserts(
        rollups,
        |r| (target_key(&r.target), r.metric.as_str(), r.hour),
        "rollups",
        "provider, model, route, region, metric, hour, count, histogram",
        |r, args| {
            args.extend([
                Arg::from(&r.target.provider),
                Arg::from(&r.target.model),
                route_arg(&r.target),
                Arg::from(&r.target.region),
                Arg::from(&r.metric),
                Arg::from(r.hour),
                Arg::from(r.count),
                Arg::Bytes(r.histogram.clone()),
            ])
        },
        "ON CONFLICT (region, provider, model, route, metric, hour) \
         DO UPDATE SET count = excluded.count, histogram = excluded.histogram",
    )
}

/// A target's route as the tables store it: its shared name, or '' for none.
fn route_arg(t: &Target) -> Arg {
    t.route.as_ref().map_or(Arg::Text(Some(String::new())), Arg::from)
}

/// A target as the tables key it (no route is stored as '').
fn target_key(t: &Target) -> (&str, &str, &str, &str) {
    (&t.region, &t.provider, &t.model, t.route_label())
}

/// Multi-row upserts of `rows` into `table`, [`UPSERT_CHUNK`] rows per statement, each row's
/// values pushed by `values` in `columns` order; of rows with the same `key` only the last.
/// Each statement is built as it is run: a region's view of 10,000 targets is 20 of them with
/// 100,000 values, which built all at once were megabytes held for the whole write.
fn upserts<'a, T: Sync, K: Eq + std::hash::Hash>(
    rows: &'a [T],
    key: impl Fn(&'a T) -> K,
    table: &'static str,
    columns: &'static str,
    values: fn(&T, &mut Vec<Arg>),
    conflict: &'static str,
) -> impl Iterator<Item = Stmt> + Send + 'a {
    let per_row = columns.split(',').count();
    let kept = last_per_key(rows, key);
    let starts = (0..kept.len()).step_by(UPSERT_CHUNK);
    starts.map(move |start| {
        let chunk = &kept[start..kept.len().min(start + UPSERT_CHUNK)];
        let mut args = Vec::with_capacity(chunk.len() * per_row);
        for r in chunk {
            values(r, &mut args);
        }
        // Full chunks recur every persist; the last, shorter one is a new text each time.
        Stmt { cached: chunk.len() == UPSERT_CHUNK, ..multi_row(table, columns, chunk.len(), per_row, args, conflict) }
    })
}

/// Rollups with `since <= hour < until`, of one region or all.
pub(crate) fn rollups_between(region: Option<&str>, since: DateTime<Utc>, until: Option<DateTime<Utc>>) -> Stmt {
    let mut st =
        Stmt::new("SELECT provider, model, route, region, metric, hour, count, histogram FROM rollups WHERE hour >= ");
    st.push_arg(since);
    if let Some(u) = until {
        st.push(" AND hour < ").push_arg(u);
    }
    if let Some(region) = region {
        st.push(" AND region = ").push_arg(region);
    }
    st.push(" ORDER BY region, provider, model, route, metric, hour");
    st
}

/// Inserts or replaces a target's breaker state.
pub(crate) fn save_breaker(r: &BreakerRecord) -> Stmt {
    Stmt::new(
        "INSERT INTO breaker_state (provider, model, route, region, state, since, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (region, provider, model, route) \
         DO UPDATE SET state = excluded.state, since = excluded.since, detail = excluded.detail",
    )
    .arg(&r.target.provider)
    .arg(&r.target.model)
    .arg(r.target.route_label())
    .arg(&r.target.region)
    .arg(r.state.as_str())
    .arg(r.since)
    .arg(Arg::Json(r.detail.shared()))
}

/// Breaker states of one region or all.
pub(crate) fn load_breakers(region: Option<&str>) -> Stmt {
    let mut st = Stmt::new(
        "SELECT provider, model, route, region, state, since, CAST(detail AS TEXT) AS detail FROM breaker_state",
    );
    if let Some(region) = region {
        st.push(" WHERE region = ").push_arg(region);
    }
    st.push(" ORDER BY region, provider, model, route");
    st
}

/// Appends one breaker transition unless the same one (target, time, from, to) is stored.
pub(crate) fn append_transition(t: &BreakerTransition) -> Stmt {
    // Keyed by (region, target, at, from, to): a replayed spool line is stored once. No conflict
    // target named, so a database whose migrations are still pending takes the row as before.
    Stmt::new(
        "INSERT INTO breaker_transitions (provider, model, route, region, from_state, to_state, at, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
    )
    .arg(&t.target.provider)
    .arg(&t.target.model)
    .arg(t.target.route_label())
    .arg(&t.target.region)
    .arg(t.from_state.as_str())
    .arg(t.to_state.as_str())
    .arg(t.at)
    .arg(&t.reason)
}

/// The newest `limit` transitions of a region (and target), newest first.
pub(crate) fn transitions(region: &str, target: Option<&Target>, limit: i64) -> Stmt {
    let mut st = Stmt::new(format!("SELECT {TRANSITION_COLUMNS} FROM breaker_transitions WHERE region = "));
    st.push_arg(region);
    if let Some(t) = target {
        push_target_filter(&mut st, t);
    }
    st.push(" ORDER BY at DESC, id DESC LIMIT ").push_arg(limit.max(0));
    st
}

/// Transitions with `since <= at < until`, oldest first, of one region or all.
pub(crate) fn transitions_between(region: Option<&str>, since: DateTime<Utc>, until: DateTime<Utc>) -> Stmt {
    Stmt::new(format!(
        "SELECT {TRANSITION_COLUMNS} FROM breaker_transitions \
         WHERE at >= $1 AND at < $2 AND (CAST($3 AS TEXT) IS NULL OR region = $3) ORDER BY at, id"
    ))
    .arg(since)
    .arg(until)
    .arg(region)
}

/// Adds one outbox item unless its id is stored.
pub(crate) fn enqueue(i: &OutboxItem) -> Stmt {
    Stmt::new(
        "INSERT INTO alert_outbox (id, channel, kind, dedup_key, payload, created_at, next_attempt_at, attempts, \
         last_error, region) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (id) DO NOTHING",
    )
    .arg(i.id)
    .arg(&i.channel)
    .arg(&i.kind)
    .arg(&i.dedup_key)
    .arg(Arg::Json(i.payload.to_string().into()))
    .arg(i.created_at)
    .arg(i.next_attempt_at)
    .arg(i.attempts)
    .arg(i.last_error.as_deref())
    .arg(&i.region)
}

/// Pending items due at `now`, oldest first, of one region or all, of one channel or all.
pub(crate) fn due(region: Option<&str>, channel: Option<&str>, now: DateTime<Utc>, limit: i64) -> Stmt {
    Stmt::new(format!(
        "SELECT {OUTBOX_COLUMNS} FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL \
         AND next_attempt_at <= $1 AND (CAST($3 AS TEXT) IS NULL OR region = $3) \
         AND (CAST($4 AS TEXT) IS NULL OR channel = $4) ORDER BY created_at, id LIMIT $2"
    ))
    .arg(now)
    .arg(limit.max(0))
    .arg(region)
    .arg(channel)
}

/// The channels with pending items due at `now`, of one region or all.
pub(crate) fn due_channels(region: Option<&str>, now: DateTime<Utc>) -> Stmt {
    Stmt::new(
        "SELECT DISTINCT channel FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL \
         AND next_attempt_at <= $1 AND (CAST($2 AS TEXT) IS NULL OR region = $2) ORDER BY channel",
    )
    .arg(now)
    .arg(region)
}

/// Marks an outbox item delivered.
pub(crate) fn mark_delivered(id: Uuid, at: DateTime<Utc>) -> Stmt {
    Stmt::new("UPDATE alert_outbox SET delivered_at = $2, attempts = attempts + 1 WHERE id = $1").arg(id).arg(at)
}

/// Records a failed attempt.
pub(crate) fn mark_retry(id: Uuid, next_attempt_at: DateTime<Utc>, error: &str) -> Stmt {
    Stmt::new("UPDATE alert_outbox SET attempts = attempts + 1, next_attempt_at = $2, last_error = $3 WHERE id = $1")
        .arg(id)
        .arg(next_attempt_at)
        .arg(error)
}

/// Gives up on an outbox item.
pub(crate) fn mark_abandoned(id: Uuid, at: DateTime<Utc>, error: &str) -> Stmt {
    Stmt::new("UPDATE alert_outbox SET attempts = attempts + 1, abandoned_at = $2, last_error = $3 WHERE id = $1")
        .arg(id)
        .arg(at)
        .arg(error)
}

/// Pending outbox items (as `n`).
pub(crate) fn outbox_depth() -> Stmt {
    Stmt::new("SELECT count(*) AS n FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL")
}

/// Outbox items enqueued with `since <= created_at < until`, oldest first, of one region or all.
pub(crate) fn outbox_between(region: Option<&str>, since: DateTime<Utc>, until: DateTime<Utc>) -> Stmt {
    Stmt::new(format!(
        "SELECT {OUTBOX_COLUMNS} FROM alert_outbox WHERE created_at >= $1 AND created_at < $2 \
         AND (CAST($3 AS TEXT) IS NULL OR region = $3) ORDER BY created_at, id"
    ))
    .arg(since)
    .arg(until)
    .arg(region)
}

/// Replaces a region's alert engine state, written at `at`: its gzip bytes in `state_gz`, and
/// `state`, the JSON text earlier builds wrote, emptied.
pub(crate) fn save_alert_state(region: &str, state: &crate::vocab::records::StateJson, at: DateTime<Utc>) -> Stmt {
    Stmt::new(
        "INSERT INTO alert_state (region, state, state_gz, updated_at) VALUES ($1, NULL, $2, $3) \
         ON CONFLICT (region) DO UPDATE SET state = NULL, state_gz = excluded.state_gz, updated_at = excluded.updated_at",
    )
    .arg(region)
    .arg(Arg::SharedBytes(state.gzip()))
    .arg(at)
}

/// A region's alert engine state: `state_gz`, or in a row an earlier build wrote, `state` as text.
pub(crate) fn load_alert_state(region: &str) -> Stmt {
    Stmt::new("SELECT CAST(state AS TEXT) AS state, state_gz FROM alert_state WHERE region = $1").arg(region)
}

/// Stores one credit reading.
pub(crate) fn insert_balance(r: &BalanceReading) -> Stmt {
    Stmt::new("INSERT INTO credit_balances (provider, region, at, remaining_usd) VALUES ($1, $2, $3, $4)")
        .arg(&r.provider)
        .arg(&r.region)
        .arg(r.at)
        .arg(r.remaining_usd)
}

/// A provider's readings since a time, oldest first.
pub(crate) fn balances(provider: &str, since: DateTime<Utc>) -> Stmt {
    Stmt::new(
        "SELECT provider, region, at, remaining_usd FROM credit_balances WHERE provider = $1 AND at >= $2 \
         ORDER BY at, id",
    )
    .arg(provider)
    .arg(since)
}

/// Inserts or replaces region × target status rows, [`UPSERT_CHUNK`] per statement.
pub(crate) fn publish_target_status(rows: &[TargetStatus]) -> impl Iterator<Item = Stmt> + Send + '_ {
    upserts(
        rows,
        |r| target_key(&r.target),
        "target_status",
        "region, provider, model, route, state, flapping, reason, over_latency, breaker, updated_at",
        |r, args| {
            args.extend([
                Arg::from(&r.target.region),
                Arg::from(&r.target.provider),
                Arg::from(&r.target.model),
                route_arg(&r.target),
                Arg::from(r.health.state.as_str()),
                Arg::from(r.health.flapping),
                Arg::from(r.health.reason.as_deref()),
                Arg::from(r.over_latency),
                Arg::from(r.breaker.as_str()),
                Arg::from(r.updated_at),
            ])
        },
        "ON CONFLICT (region, provider, model, route) DO UPDATE SET state = excluded.state, \
         flapping = excluded.flapping, reason = excluded.reason, over_latency = excluded.over_latency, breaker = excluded.breaker, updated_at = excluded.updated_at",
    )
}

/// Status rows written at or after `since`.
pub(crate) fn target_statuses(since: DateTime<Utc>, except_region: Option<&str>) -> Stmt {
    let mut st = Stmt::new(
        "SELECT region, provider, model, route, state, flapping, reason, over_latency, breaker, updated_at \
         FROM target_status \
         WHERE updated_at >= ",
    );
    st.push_arg(since);
    if let Some(region) = except_region {
        st.push(" AND region <> ").push_arg(region);
    }
    st.push(" ORDER BY region, provider, model, route");
    st
}

/// Claims a lease in one statement: inserted when absent, taken over when expired at `now`,
/// renewed when `region` holds it. Returns the row's `owner` only when it changed hands or was renewed.
pub(crate) fn claim_incident(incident: &str, region: &str, now: DateTime<Utc>, expires_at: DateTime<Utc>) -> Stmt {
    Stmt::new(
        "INSERT INTO incident_lease (incident, owner, expires_at) VALUES ($1, $2, $3) \
         ON CONFLICT (incident) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
         WHERE incident_lease.owner = excluded.owner OR incident_lease.expires_at < $4 RETURNING owner",
    )
    .arg(incident)
    .arg(region)
    .arg(expires_at)
    .arg(now)
}

/// The current `owner` of a lease.
pub(crate) fn incident_owner(incident: &str) -> Stmt {
    Stmt::new("SELECT owner FROM incident_lease WHERE incident = $1").arg(incident)
}

/// Drops `region`'s lease (no-op when another holds it).
pub(crate) fn release_incident(incident: &str, region: &str) -> Stmt {
    Stmt::new("DELETE FROM incident_lease WHERE incident = $1 AND owner = $2").arg(incident).arg(region)
}

/// Inserts or refreshes one region's sighting.
pub(crate) fn record_sighting(incident: &str, region: &str, firing: bool, at: DateTime<Utc>) -> Stmt {
    Stmt::new(
        "INSERT INTO incident_sightings (incident, region, firing, updated_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (incident, region) DO UPDATE SET firing = excluded.firing, updated_at = excluded.updated_at",
    )
    .arg(incident)
    .arg(region)
    .arg(firing)
    .arg(at)
}

/// Every region's sighting of an incident, by region.
pub(crate) fn sightings(incident: &str) -> Stmt {
    Stmt::new("SELECT region, firing, updated_at FROM incident_sightings WHERE incident = $1 ORDER BY region")
        .arg(incident)
}

/// Forgets an incident: its sightings, then its lease (run in one transaction).
pub(crate) fn close_incident(incident: &str) -> [Stmt; 2] {
    [
        Stmt::new("DELETE FROM incident_sightings WHERE incident = $1").arg(incident),
        Stmt::new("DELETE FROM incident_lease WHERE incident = $1").arg(incident),
    ]
}

/// The columns of `drills` a [`Drill`](crate::vocab::drill::Drill) is read from.
const DRILL_COLUMNS: &str = "id, chain, target, region, started_at, until_at, ended_at";

/// Stores a new drill (its id is new: a repeat of the same id is ignored).
pub(crate) fn start_drill(d: &crate::vocab::drill::Drill) -> Stmt {
    Stmt::new(
        "INSERT INTO drills (id, chain, target, region, started_at, until_at, ended_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
    )
    .arg(d.id)
    .arg(&d.chain)
    .arg(&d.target)
    .arg(&d.region)
    .arg(d.started_at)
    .arg(d.until)
    .arg(d.ended_at)
}

/// Drills still running at `since` or started since, oldest first.
pub(crate) fn drills(since: DateTime<Utc>) -> Stmt {
    Stmt::new(format!(
        "SELECT {DRILL_COLUMNS} FROM drills WHERE until_at >= $1 OR started_at >= $1 ORDER BY started_at, id"
    ))
    .arg(since)
}

/// Ends a drill early at `at`, only while it runs (not ended, not run out).
pub(crate) fn end_drill(id: Uuid, at: DateTime<Utc>) -> Stmt {
    Stmt::new("UPDATE drills SET ended_at = $2 WHERE id = $1 AND ended_at IS NULL AND until_at > $2").arg(id).arg(at)
}

/// The columns of `chain_heads` a [`ChainHead`](crate::vocab::chain_head::ChainHead) is read from.
const CHAIN_HEAD_COLUMNS: &str = "region, chain, at, target, input_per_mtok, output_per_mtok";

/// Appends one chain-head record; the same region, chain and time again is ignored (a replay).
pub(crate) fn record_chain_head(h: &crate::vocab::chain_head::ChainHead) -> Stmt {
    Stmt::new(format!(
        "INSERT INTO chain_heads ({CHAIN_HEAD_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (region, chain, at) DO NOTHING"
    ))
    .arg(&h.region)
    .arg(&h.chain)
    .arg(h.at)
    .arg(h.target.as_deref())
    .arg(h.price.map(|p| p.input))
    .arg(h.price.map(|p| p.output))
}

/// The chain heads of `[since, until)` (one region or all) and each chain's newest before `since`.
pub(crate) fn chain_heads_between(region: Option<&str>, since: DateTime<Utc>, until: DateTime<Utc>) -> Stmt {
    Stmt::new(format!(
        "SELECT {CHAIN_HEAD_COLUMNS} FROM chain_heads c \
         WHERE (CAST($3 AS TEXT) IS NULL OR region = $3) AND at < $2 AND (at >= $1 OR at = \
         (SELECT MAX(d.at) FROM chain_heads d WHERE d.region = c.region AND d.chain = c.chain AND d.at < $1)) \
         ORDER BY region, chain, at"
    ))
    .arg(since)
    .arg(until)
    .arg(region)
}

/// Inserts or updates one provider incident; a stored resolution time is kept once set.
pub(crate) fn upsert_provider_incident(i: &ProviderIncident) -> Stmt {
    let components = serde_json::to_string(&i.components).unwrap_or_else(|_| "[]".into());
    Stmt::new(
        "INSERT INTO provider_incidents (provider, incident_id, name, status, impact, created_at, updated_at, \
         resolved_at, components, shortlink) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (provider, incident_id) DO UPDATE SET name = excluded.name, status = excluded.status, \
         impact = excluded.impact, updated_at = excluded.updated_at, \
         resolved_at = COALESCE(provider_incidents.resolved_at, excluded.resolved_at), \
         components = excluded.components, shortlink = excluded.shortlink",
    )
    .arg(&i.provider)
    .arg(&i.id)
    .arg(&i.name)
    .arg(&i.status)
    .arg(&i.impact)
    .arg(i.created_at)
    .arg(i.updated_at)
    .arg(i.resolved_at)
    .arg(components)
    .arg(i.shortlink.as_deref())
}

/// Provider incidents opened with `since <= created_at < until`, oldest first.
pub(crate) fn provider_incidents_between(provider: Option<&str>, since: DateTime<Utc>, until: DateTime<Utc>) -> Stmt {
    Stmt::new(
        "SELECT provider, incident_id, name, status, impact, created_at, updated_at, resolved_at, components, \
         shortlink FROM provider_incidents WHERE created_at >= $1 AND created_at < $2 \
         AND (CAST($3 AS TEXT) IS NULL OR provider = $3) ORDER BY created_at, provider, incident_id",
    )
    .arg(since)
    .arg(until)
    .arg(provider)
}

/// Inserts or replaces one provider component's state.
pub(crate) fn upsert_provider_component(c: &ProviderComponent) -> Stmt {
    Stmt::new(
        "INSERT INTO provider_components (provider, component_id, name, status, updated_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider, component_id) DO UPDATE SET name = excluded.name, \
         status = excluded.status, updated_at = excluded.updated_at",
    )
    .arg(&c.provider)
    .arg(&c.id)
    .arg(&c.name)
    .arg(&c.status)
    .arg(c.updated_at)
}

/// A provider's stored component states, by name.
pub(crate) fn provider_components(provider: &str) -> Stmt {
    Stmt::new(
        "SELECT provider, component_id, name, status, updated_at FROM provider_components \
         WHERE provider = $1 ORDER BY name, component_id",
    )
    .arg(provider)
}

/// One multi-row insert of canary runs (at most [`CANARY_CHUNK`]), skipping stored ids.
pub(crate) fn insert_canary_runs(runs: &[CanaryRun]) -> Stmt {
    let count = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let mut args = Vec::with_capacity(runs.len() * CANARY_VALUES);
    for r in runs {
        sample_args(&mut args, &r.sample);
        args.extend([
            count(r.prompt_version).into(),
            count(r.correct).into(),
            count(r.total).into(),
            (&r.answers_fingerprint).into(),
            serde_json::to_string(&r.answers).unwrap_or_else(|_| "[]".into()).into(),
            r.identity.model.as_deref().into(),
            r.identity.system_fingerprint.as_deref().into(),
            r.identity.upstream.as_deref().into(),
            r.logprobs.map(|l| i64::from(l.tokens)).into(),
            r.logprobs.map(|l| l.sum).into(),
        ]);
    }
    multi_row_insert("canary_runs", CANARY_COLUMNS, runs.len(), CANARY_VALUES, args)
}

/// The newest `limit` canary runs started at or after `since`, returned oldest first.
pub(crate) fn canary_runs(region: Option<&str>, since: DateTime<Utc>, limit: i64) -> Stmt {
    newest_runs("canary_runs", CANARY_COLUMNS, region, since, limit)
}

/// Deletes canary runs started before `cutoff`.
pub(crate) fn purge_canary_runs_before(cutoff: DateTime<Utc>) -> Stmt {
    Stmt::new("DELETE FROM canary_runs WHERE started_at < $1").arg(cutoff)
}

/// One multi-row insert of golden check runs (at most [`CHECK_CHUNK`]), skipping stored ids.
pub(crate) fn insert_check_runs(runs: &[CheckRun]) -> Stmt {
    let mut args = Vec::with_capacity(runs.len() * CHECK_VALUES);
    for r in runs {
        sample_args(&mut args, &r.sample);
        args.extend([(&r.check).into(), r.verdict.as_str().into(), (&r.why).into(), (&r.answer).into()]);
    }
    multi_row_insert("check_runs", CHECK_COLUMNS, runs.len(), CHECK_VALUES, args)
}

/// The newest `limit` golden check runs started at or after `since`, returned oldest first.
pub(crate) fn check_runs(region: Option<&str>, since: DateTime<Utc>, limit: i64) -> Stmt {
    newest_runs("check_runs", CHECK_COLUMNS, region, since, limit)
}

/// One multi-row insert of long-prompt probe runs (at most [`WORKLOAD_CHUNK`]), skipping stored ids.
pub(crate) fn insert_workload_runs(runs: &[WorkloadRun]) -> Stmt {
    let mut args = Vec::with_capacity(runs.len() * WORKLOAD_VALUES);
    for r in runs {
        sample_args(&mut args, &r.sample);
        args.push(i64::from(r.input_tokens).into());
    }
    multi_row_insert("workload_runs", WORKLOAD_COLUMNS, runs.len(), WORKLOAD_VALUES, args)
}

/// The newest `limit` long-prompt probe runs started at or after `since`, returned oldest first.
pub(crate) fn workload_runs(region: Option<&str>, since: DateTime<Utc>, limit: i64) -> Stmt {
    newest_runs("workload_runs", WORKLOAD_COLUMNS, region, since, limit)
}

/// Deletes long-prompt probe runs started before `cutoff`.
pub(crate) fn purge_workload_runs_before(cutoff: DateTime<Utc>) -> Stmt {
    Stmt::new("DELETE FROM workload_runs WHERE started_at < $1").arg(cutoff)
}

/// The newest `limit` rows of a run table (`canary_runs`, `check_runs`, `workload_runs`) started at or after
/// `since`, in `region` or every region, returned oldest first.
fn newest_runs(table: &str, columns: &str, region: Option<&str>, since: DateTime<Utc>, limit: i64) -> Stmt {
    Stmt::new(format!(
        "SELECT * FROM (SELECT {columns} FROM {table} WHERE started_at >= $1 \
         AND (CAST($2 AS TEXT) IS NULL OR region = $2) ORDER BY started_at DESC, id DESC LIMIT $3) AS newest \
         ORDER BY started_at, id"
    ))
    .arg(since)
    .arg(region)
    .arg(limit.max(0))
}

/// Deletes golden check runs started before `cutoff`.
pub(crate) fn purge_check_runs_before(cutoff: DateTime<Utc>) -> Stmt {
    Stmt::new("DELETE FROM check_runs WHERE started_at < $1").arg(cutoff)
}

/// The columns of `members` a [`Member`](crate::vocab::member::Member) is read from.
const MEMBER_COLUMNS: &str = "region, member, host, started_at, heartbeat_at, active_from";

/// Inserts a member's row or renews its heartbeat (its start and `active_from` stay as first written).
pub(crate) fn member_beat(m: &crate::vocab::member::Member) -> Stmt {
    Stmt::new(format!(
        "INSERT INTO members ({MEMBER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (region, member) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
    ))
    .arg(&m.region)
    .arg(&m.id)
    .arg(&m.host)
    .arg(m.started_at)
    .arg(m.heartbeat_at)
    .arg(m.active_from)
}

/// A region's members, by id.
pub(crate) fn members(region: &str) -> Stmt {
    Stmt::new(format!("SELECT {MEMBER_COLUMNS} FROM members WHERE region = $1 ORDER BY member")).arg(region)
}

/// Removes one member's row (a clean stop).
pub(crate) fn member_leave(region: &str, id: &str) -> Stmt {
    Stmt::new("DELETE FROM members WHERE region = $1 AND member = $2").arg(region).arg(id)
}

/// Removes the rows of members whose last heartbeat is before `cutoff` (any region).
pub(crate) fn members_prune(cutoff: DateTime<Utc>) -> Stmt {
    Stmt::new("DELETE FROM members WHERE heartbeat_at < $1").arg(cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Highest `$n` in the text.
    fn highest_placeholder(sql: &str) -> usize {
        let mut max = 0;
        let mut rest = sql;
        while let Some(at) = rest.find('$') {
            rest = &rest[at + 1..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            // SQLite's binding rewrites every `$`, so it may only start a placeholder.
            assert!(!digits.is_empty(), "a `$` that is not a placeholder in {sql}");
            max = max.max(digits.parse().unwrap_or(0));
        }
        max
    }

    #[test]
    fn the_alert_state_is_bound_as_the_gzip_it_shares_not_a_copy() {
        let state = crate::vocab::records::StateJson::deferred(std::collections::BTreeMap::from([("eu|a/m", 1)]));
        let st = save_alert_state("eu", &state, Utc::now());
        match &st.args[1] {
            Arg::SharedBytes(gz) => {
                assert!(std::sync::Arc::ptr_eq(gz, &state.gzip()), "the statement holds the state's own bytes");
                let mut text = String::new();
                std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text).expect("gzip");
                assert_eq!(text, r#"{"eu|a/m":1}"#);
            }
            other => panic!("the state is bound as shared bytes, not {other:?}"),
        }
    }

    #[test]
    fn built_filters_number_their_placeholders_in_order() {
        let q = SampleQuery {
            region: Some("eu".into()),
            except_region: Some("us".into()),
            target: Some(Target::new("p".into(), "m".into(), None, "eu".into())),
            since: Some(Utc::now()),
            until: Some(Utc::now()),
            limit: Some(5),
            latest: false,
        };
        let st = samples(&q);
        assert_eq!(highest_placeholder(&st.sql), st.args.len());
        assert!(st.sql.ends_with("LIMIT $8"), "{}", st.sql);
        assert!(st.sql.contains(" AND region <> $2"), "{}", st.sql);
        assert_eq!(st.args[4], Arg::Text(Some(String::new())), "no route is stored as ''");
        let st = count_samples(&SampleQuery::default());
        assert_eq!((st.sql.as_ref(), st.args.len()), ("SELECT count(*) AS n FROM samples WHERE 1 = 1", 0));
    }

    #[test]
    fn multi_row_inserts_bind_every_value_once() {
        let st = multi_row_insert("t", "a, b", 3, 2, vec![Arg::Int(None); 6]);
        assert_eq!(st.sql, "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6) ON CONFLICT (id) DO NOTHING");
        assert_eq!(SAMPLE_COLUMNS.split(',').count(), SAMPLE_VALUES);
        assert_eq!(CANARY_COLUMNS.split(',').count(), CANARY_VALUES);
    }

    #[test]
    fn upserts_go_in_chunks_with_one_row_per_key() {
        let hour = Utc::now();
        let t = |i: usize| Target::new("p".into(), format!("m{i}").into(), None, "eu".into());
        let mut rollups: Vec<Rollup> = (0..UPSERT_CHUNK + 3)
            .map(|i| Rollup { target: t(i), metric: "ttfb".into(), hour, count: 1, histogram: vec![] })
            .collect();
        rollups.push(Rollup { target: t(1), metric: "ttfb".into(), hour, count: 9, histogram: vec![] });
        let stmts: Vec<Stmt> = upsert_rollups(&rollups).collect();
        assert_eq!(stmts.len(), 2, "{} rows in chunks of {UPSERT_CHUNK}", rollups.len());
        assert_eq!(stmts.iter().map(|s| s.args.len() / 8).sum::<usize>(), UPSERT_CHUNK + 3, "the repeat folded");
        assert_eq!(stmts[0].args[8 + 6], Arg::Int(Some(9)), "m1 keeps its place and takes the later count");
        assert!(stmts[0].cached && !stmts[1].cached, "a full chunk's text recurs; the short last one's does not");
        for st in &stmts {
            assert_eq!(highest_placeholder(&st.sql), st.args.len());
        }
        assert_eq!(publish_target_status(&[]).count(), 0, "nothing to write is no statement");
    }

    #[test]
    fn fixed_statements_have_one_value_per_placeholder() {
        let now = Utc::now();
        let t = Target::new("p".into(), "m".into(), Some("r".into()), "eu".into());
        let stmts = [
            purge_rollups_before(now),
            rollups_between(Some("eu"), now, Some(now)),
            load_breakers(Some("eu")),
            transitions("eu", Some(&t), 3),
            transitions_between(None, now, now),
            due(Some("eu"), Some("slack"), now, 1),
            due_channels(Some("eu"), now),
            mark_delivered(Uuid::nil(), now),
            mark_retry(Uuid::nil(), now, "e"),
            mark_abandoned(Uuid::nil(), now, "e"),
            outbox_between(None, now, now),
            save_alert_state("eu", &super::super::StateJson::of(&serde_json::json!({})).expect("json"), now),
            load_alert_state("eu"),
            balances("p", now),
            target_statuses(now, Some("eu")),
            claim_incident("i", "eu", now, now),
            incident_owner("i"),
            release_incident("i", "eu"),
            record_sighting("i", "eu", true, now),
            sightings("i"),
            drills(now),
            end_drill(Uuid::nil(), now),
            chain_heads_between(Some("eu"), now, now),
            provider_incidents_between(None, now, now),
            provider_components("p"),
            canary_runs(None, now, 3),
            purge_canary_runs_before(now),
            check_runs(None, now, 3),
            purge_check_runs_before(now),
            workload_runs(None, now, 3),
            purge_workload_runs_before(now),
        ];
        for st in stmts {
            assert_eq!(highest_placeholder(&st.sql), st.args.len(), "{}", st.sql);
        }
    }
}
