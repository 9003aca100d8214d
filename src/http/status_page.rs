//! `GET /`: the status page people open — every target × region with its current state, the
//! last TTFB/TTFT against the baseline, the breaker, a 7-day TTFT trend and credit balances.
//!
//! Server-rendered HTML with inline CSS and inline SVG only (no script, no external asset), so
//! it works offline and on a phone. The handler gathers [`StatusData`] from the published
//! snapshot (this region, and the other regions' latest samples and the credit readings the
//! pipeline read from shared storage) and the trend cache; [`render`] is a pure function of it.

use super::trend::{Series, TrendCache, Trends};
use super::HttpState;
use crate::baseline::{exceeds_failover, failover_threshold, Baseline, LatencyP95};
use crate::breaker::{Explanation, State as BreakerState};
use crate::config::Config;
use crate::monitor::Snapshot;
use crate::sample::{Outcome, Sample};
use crate::store::Store;
use crate::target::Target;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Duration, DurationRound, Utc};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

/// Bounds of the automatic reload period (it follows the probe interval in between).
const REFRESH_MIN_S: u64 = 10;
const REFRESH_MAX_S: u64 = 60;
/// Sparkline drawing area, in SVG user units.
const SPARK_W: f64 = 168.0;
const SPARK_H: f64 = 32.0;
const SPARK_PAD: f64 = 3.0;

/// What the page needs from the config and the trend cache (the rest is in the snapshot).
pub struct StatusPage {
    region: String,
    failover_factor: f64,
    min_samples: u64,
    refresh_s: u64,
    /// Providers whose credit is watched, with their `balance.min_usd`.
    credit: Vec<(String, f64)>,
    trends: Arc<TrendCache>,
}

impl StatusPage {
    /// The page for this instance's config, reading trends from `store` (through the cache).
    pub fn new(config: &Config, store: Arc<dyn Store>) -> Self {
        StatusPage {
            region: config.region.clone(),
            failover_factor: config.baseline.failover_factor,
            min_samples: config.baseline.min_samples_p95,
            refresh_s: config.probe.interval.as_secs().clamp(REFRESH_MIN_S, REFRESH_MAX_S),
            credit: config.credit_watch().map(|(p, b)| (p.name.clone(), b.min_usd)).collect(),
            trends: Arc::new(TrendCache::new(store, &config.region, config.baseline.window)),
        }
    }

    /// Rows and regions from a snapshot; trends and credits are added by the caller.
    pub fn gather(&self, snap: &Snapshot) -> StatusData {
        let mut data = StatusData {
            region: self.region.clone(),
            regions: vec![self.region.clone()],
            failover_factor: self.failover_factor,
            min_samples: self.min_samples,
            refresh_s: self.refresh_s,
            trend_hours: self.trends.hours(),
            probe_plan: snap.probe_plan.clone(),
            ..StatusData::default()
        };
        let mut index: HashMap<(String, String, Option<String>), usize> = HashMap::new();
        for v in &snap.targets {
            index.insert((v.provider.clone(), v.model.clone(), v.route.clone()), data.rows.len());
            data.rows.push(Row {
                provider: v.provider.clone(),
                model: v.model.clone(),
                route: v.route.clone(),
                cells: vec![Some(Cell {
                    last: v.last_sample.as_ref().map(LastProbe::from),
                    ttfb: Some(v.baselines.get("ttfb").copied().unwrap_or_default()),
                    ttft: Some(v.baselines.get("ttft").copied().unwrap_or_default()),
                    breaker: Some(v.breaker.clone()),
                    flapping: v.flapping,
                    probe: snap.probe_plan.as_ref().and_then(|p| p.get(&v.target).cloned()),
                })],
                trend: Vec::new(),
            });
        }
        let mut others: Vec<&str> = snap.elsewhere.iter().map(|s| s.target.region.as_str()).collect();
        others.sort_unstable();
        others.dedup();
        data.regions.extend(others.iter().map(|r| r.to_string()));
        let column: HashMap<&str, usize> = others.iter().enumerate().map(|(i, r)| (*r, i + 1)).collect();
        for s in snap.elsewhere.iter() {
            let t = &s.target;
            let row = *index.entry((t.provider.clone(), t.model.clone(), t.route.clone())).or_insert_with(|| {
                data.rows.push(Row {
                    provider: t.provider.clone(),
                    model: t.model.clone(),
                    route: t.route.clone(),
                    cells: Vec::new(),
                    trend: Vec::new(),
                });
                data.rows.len() - 1
            });
            let Some(&col) = column.get(t.region.as_str()) else { continue };
            let cells = &mut data.rows[row].cells;
            cells.resize(data.regions.len(), None);
            cells[col] = Some(Cell { last: Some(LastProbe::from(s)), ..Cell::default() });
        }
        for row in &mut data.rows {
            row.cells.resize(data.regions.len(), None);
        }
        data
    }

    /// Attaches this region's trend to each row.
    pub fn attach_trends(&self, data: &mut StatusData, trends: &Trends) {
        for row in &mut data.rows {
            let key = Target {
                provider: row.provider.clone(),
                model: row.model.clone(),
                route: row.route.clone(),
                region: self.region.clone(),
            };
            if let Some(series) = trends.get(&key) {
                row.trend = series.clone();
            }
        }
    }

    /// The latest credit reading of each watched provider (a day back at most), from the
    /// snapshot the pipeline publishes: no store query per request.
    pub fn credits(&self, snap: &Snapshot, now: DateTime<Utc>) -> Vec<Credit> {
        let day = now - Duration::hours(24);
        self.credit
            .iter()
            .map(|(provider, min_usd)| Credit {
                provider: provider.clone(),
                min_usd: *min_usd,
                reading: snap.credits.get(provider).filter(|b| b.at >= day).map(|b| (b.at, b.remaining_usd)),
            })
            .collect()
    }
}

/// Everything the page shows.
#[derive(Debug, Clone, Default)]
pub struct StatusData {
    /// This instance's region.
    pub region: String,
    /// Column order: this region first, then the others sharing the store.
    pub regions: Vec<String>,
    /// One row per target (provider, model, route).
    pub rows: Vec<Row>,
    /// Watched credit balances.
    pub credits: Vec<Credit>,
    /// A probe slower than this × the baseline P95 is degraded.
    pub failover_factor: f64,
    /// Samples a P95 needs before it is published.
    pub min_samples: u64,
    /// Seconds between automatic reloads.
    pub refresh_s: u64,
    /// Hours the trend covers.
    pub trend_hours: i64,
    /// What the providers' own status pages say (section shown when any is polled).
    pub providers: Vec<crate::provider_status::ProviderStatus>,
    /// The adaptive probe plan's budget line, when probing is cost-aware.
    pub probe_plan: Option<Arc<crate::adaptive::ProbePlan>>,
    /// The latest canary run of each target (section shown when the canary has run).
    pub canary: Vec<crate::canary::CanaryRun>,
}

/// One target across the regions.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Provider name.
    pub provider: String,
    /// Model (empty for plain HTTP targets).
    pub model: String,
    /// Pinned upstream route.
    pub route: Option<String>,
    /// One per entry of [`StatusData::regions`]; `None` where that region does not probe it.
    pub cells: Vec<Option<Cell>>,
    /// Hourly TTFT P50 in this region, oldest first.
    pub trend: Series,
}

/// One target in one region.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// The latest probe, if any yet.
    pub last: Option<LastProbe>,
    /// TTFB baseline (known for this region only).
    pub ttfb: Option<Baseline>,
    /// TTFT baseline (known for this region only).
    pub ttft: Option<Baseline>,
    /// Breaker (known for this region only).
    pub breaker: Option<Explanation>,
    /// Its state changes too often (known for this region only): changes are not paged.
    pub flapping: bool,
    /// Its interval in the adaptive plan (known for this region only).
    pub probe: Option<crate::adaptive::TargetPlan>,
}

/// What the page shows of a sample.
#[derive(Debug, Clone)]
pub struct LastProbe {
    /// When it started.
    pub at: DateTime<Utc>,
    /// How it ended.
    pub outcome: Outcome,
    /// HTTP status.
    pub status: Option<u16>,
    /// Time to first byte.
    pub ttfb_ms: Option<f64>,
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// The failure's detail.
    pub error: Option<String>,
}

impl From<&Sample> for LastProbe {
    fn from(s: &Sample) -> Self {
        LastProbe {
            at: s.started_at,
            outcome: s.outcome,
            status: s.status,
            ttfb_ms: s.ttfb_ms,
            ttft_ms: s.ttft_ms,
            error: s.error.clone(),
        }
    }
}

/// One provider's credit.
#[derive(Debug, Clone)]
pub struct Credit {
    /// Provider name.
    pub provider: String,
    /// `balance.min_usd`.
    pub min_usd: f64,
    /// The latest reading (when, USD left).
    pub reading: Option<(DateTime<Utc>, f64)>,
}

/// How a cell is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Answering within its baseline.
    Ok,
    /// TTFB or TTFT above the failover factor × P95.
    Degraded,
    /// Breaker half-open: the next probe decides.
    HalfOpen,
    /// Breaker open, or the latest probe failed.
    Down,
    /// Not probed yet.
    Pending,
}

impl Health {
    /// CSS class and label.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Ok => "ok",
            Health::Degraded => "degraded",
            Health::HalfOpen => "half_open",
            Health::Down => "down",
            Health::Pending => "waiting",
        }
    }
}

/// One metric's cell over its failover threshold (the single-metric case of
/// [`exceeds_failover`]).
fn over(value: Option<f64>, base: Option<Baseline>, factor: f64) -> bool {
    matches!((value, base.and_then(|b| b.p95)), (Some(v), Some(p95)) if v > failover_threshold(p95, factor))
}

impl Cell {
    /// The state shown: the breaker first, then the latest probe against the baseline.
    pub fn health(&self, factor: f64) -> Health {
        match self.breaker.as_ref().map(|b| b.state) {
            Some(BreakerState::Open) => return Health::Down,
            Some(BreakerState::HalfOpen) => return Health::HalfOpen,
            _ => {}
        }
        let Some(last) = &self.last else { return Health::Pending };
        if last.outcome.is_failure() {
            Health::Down
        } else if exceeds_failover(
            last.ttfb_ms,
            last.ttft_ms,
            LatencyP95 { ttfb: self.ttfb.and_then(|b| b.p95), ttft: self.ttft.and_then(|b| b.p95) },
            factor,
        ) {
            Health::Degraded
        } else {
            Health::Ok
        }
    }
}

/// `GET /`.
pub async fn page(State(s): State<HttpState>) -> Response {
    let Some(page) = s.status.clone() else {
        return (StatusCode::NOT_FOUND, "no status page\n").into_response();
    };
    let now = Utc::now();
    let mut data = {
        // A writer that panicked left a whole snapshot behind; showing it beats showing nothing.
        let snap = s.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut data = page.gather(&snap);
        data.credits = page.credits(&snap, now);
        data
    };
    let trends = page.trends.current(now).await;
    page.attach_trends(&mut data, &trends);
    data.providers = s.provider_status.read().map(|p| p.providers.values().cloned().collect()).unwrap_or_default();
    data.canary = s.canary.latest();
    ([(header::CACHE_CONTROL, "no-store")], Html(render(&data, now))).into_response()
}

/// Escapes text for HTML content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        format!("{v:.0} ms")
    }
}

fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - t).num_seconds().max(0);
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// "P95 312 ms", or "P95 — (42 samples, need 300)" while the baseline is too young.
fn baseline_text(b: &Baseline, min_samples: u64) -> String {
    match b.p95 {
        Some(p95) => format!("P95 {}", ms(p95)),
        None => format!("P95 — ({} samples, need {min_samples})", b.count),
    }
}

/// The sparkline's polyline runs (consecutive hours; a missing hour breaks the line), in SVG
/// coordinates: x by hour across the window starting at `start`, y scaled between the lowest
/// (bottom) and highest (top) value.
pub fn spark_points(points: &[(DateTime<Utc>, f64)], start: DateTime<Utc>, hours: i64) -> Vec<Vec<(f64, f64)>> {
    let inside: Vec<(i64, f64)> = points
        .iter()
        .map(|(t, v)| ((*t - start).num_hours(), *v))
        .filter(|(h, v)| (0..hours).contains(h) && v.is_finite())
        .collect();
    let (lo, hi) = inside.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, v)| (lo.min(*v), hi.max(*v)));
    let step = SPARK_W / (hours.max(2) - 1) as f64;
    let y = |v: f64| {
        if hi > lo {
            SPARK_PAD + (hi - v) / (hi - lo) * (SPARK_H - 2.0 * SPARK_PAD)
        } else {
            SPARK_H / 2.0
        }
    };
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut previous: Option<i64> = None;
    for (h, v) in inside {
        if previous != Some(h - 1) {
            runs.push(Vec::new());
        }
        if let Some(run) = runs.last_mut() {
            run.push((h as f64 * step, y(v)));
        }
        previous = Some(h);
    }
    runs
}

fn sparkline(trend: &[(DateTime<Utc>, f64)], now: DateTime<Utc>, hours: i64) -> String {
    let start = now.duration_trunc(Duration::hours(1)).unwrap_or(now) - Duration::hours(hours - 1);
    let runs = spark_points(trend, start, hours);
    let Some(&(lx, ly)) = runs.last().and_then(|r| r.last()) else {
        return r#"<span class="muted">no hourly data yet</span>"#.into();
    };
    let values: Vec<f64> = trend.iter().filter(|(t, _)| *t >= start).map(|(_, v)| *v).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let latest = values.last().copied().unwrap_or(lo);
    let label = format!(
        "TTFT P50 by hour, last {hours} h: {} hours with data, lowest {}, highest {}, latest {}",
        values.len(),
        ms(lo),
        ms(hi),
        ms(latest)
    );
    let mut svg = format!(
        r#"<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{l}"><title>{l}</title>"#,
        w = SPARK_W,
        h = SPARK_H,
        l = esc(&label)
    );
    for run in runs.iter().filter(|r| r.len() > 1) {
        let pts: Vec<String> = run.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(svg, r#"<polyline points="{}"/>"#, pts.join(" "));
    }
    let _ = write!(svg, r#"<circle cx="{lx:.1}" cy="{ly:.1}" r="2.5"/></svg>"#);
    let _ = write!(svg, r#"<span class="spark-range">{} – {}, now {}</span>"#, ms(lo), ms(hi), ms(latest));
    svg
}

fn target_label(row: &Row) -> String {
    let mut s = format!(r#"<span class="provider">{}</span>"#, esc(&row.provider));
    if !row.model.is_empty() {
        let _ = write!(s, r#"<span class="model">{}</span>"#, esc(&row.model));
    }
    if let Some(route) = &row.route {
        let _ = write!(s, r#"<span class="route">via {}</span>"#, esc(route));
    }
    s
}

fn metric_line(name: &str, value: Option<f64>, base: Option<Baseline>, min_samples: u64, factor: f64) -> String {
    let shown = value.map_or_else(|| "—".to_string(), ms);
    let class = if over(value, base, factor) { " over" } else { "" };
    let mut s = format!(r#"<div class="m"><span class="k">{name}</span> <b class="v{class}">{shown}</b>"#);
    if let Some(b) = base.filter(|b| b.count > 0 || value.is_some()) {
        let _ = write!(s, r#" <span class="base">{}</span>"#, esc(&baseline_text(&b, min_samples)));
    }
    s.push_str("</div>");
    s
}

fn breaker_line(b: &Explanation, now: DateTime<Utc>) -> String {
    let mut text = format!("breaker {}", b.state.as_str());
    if b.state != BreakerState::Closed || b.reason.is_some() {
        let _ = write!(text, " since {}", ago(b.since, now));
    }
    if let Some(next) = b.next_half_open.filter(|_| b.state == BreakerState::Open) {
        let _ = write!(text, "; trial probe at {}", next.format("%H:%M:%S UTC"));
    }
    let title = b.reason.as_deref().unwrap_or("never tripped");
    format!(r#"<div class="brk brk-{}" title="{}">{}</div>"#, b.state.as_str(), esc(title), esc(&text))
}

fn cell_html(cell: &Cell, data: &StatusData, now: DateTime<Utc>) -> String {
    let health = cell.health(data.failover_factor);
    let mut s = format!(r#"<span class="pill {c}">{c}</span>"#, c = health.as_str());
    if cell.flapping {
        s.push_str(r#" <span class="pill half_open" title="its state changes too often: changes are not paged until it settles">flapping</span>"#);
    }
    if let Some(p) = &cell.probe {
        s.push_str(&probe_line(p));
    }
    match &cell.last {
        None => s.push_str(r#" <span class="muted">no probe yet</span>"#),
        Some(last) => {
            let _ = write!(s, r#" <span class="age" title="{}">{}</span>"#, stamp(last.at), ago(last.at, now));
            let f = data.failover_factor;
            s.push_str(&metric_line("TTFT", last.ttft_ms, cell.ttft, data.min_samples, f));
            s.push_str(&metric_line("TTFB", last.ttfb_ms, cell.ttfb, data.min_samples, f));
            if last.outcome.is_failure() {
                let mut why = last.outcome.as_str().to_string();
                if let Some(code) = last.status {
                    let _ = write!(why, " {code}");
                }
                if let Some(e) = &last.error {
                    let short: String = e.chars().take(120).collect();
                    let _ = write!(why, ": {short}");
                }
                let _ = write!(s, r#"<div class="err">{}</div>"#, esc(&why));
            }
        }
    }
    if let Some(b) = &cell.breaker {
        s.push_str(&breaker_line(b, now));
    }
    s
}

const STYLE: &str = r#"
:root{--bg:#f6f8fa;--fg:#1f2328;--card:#fff;--line:#d0d7de;--muted:#656d76;
--ok:#1a7f37;--degraded:#9a6700;--half:#8250df;--down:#cf222e;--wait:#6e7781}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--card:#161b22;--line:#30363d;--muted:#8d96a0;
--ok:#3fb950;--degraded:#d29922;--half:#a371f7;--down:#f85149;--wait:#8d96a0}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
header,main,footer{padding:12px 16px;max-width:1600px;margin:0 auto}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:16px 0 8px}
.muted,.meta,.age,.base,.spark-range{color:var(--muted)}
.meta{margin:4px 0;font-size:13px}
.summary .pill{margin-right:4px}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff;background:var(--wait)}
.pill.ok{background:var(--ok)}.pill.degraded{background:var(--degraded)}.pill.half_open{background:var(--half)}
.pill.down{background:var(--down)}.pill.waiting{background:var(--wait)}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;background:var(--card);border:1px solid var(--line);width:100%}
table.credits{width:auto;min-width:min(100%,480px)}
th,td{border-bottom:1px solid var(--line);padding:8px 10px;text-align:left;vertical-align:top}
thead th{font-size:12px;text-transform:uppercase;letter-spacing:.03em;color:var(--muted);white-space:nowrap}
th.target{font-weight:400;min-width:200px}
.provider{font-weight:600;display:block}.model{display:block;word-break:break-all}.route{display:block;color:var(--muted)}
td.cell{min-width:190px;border-left:4px solid var(--wait)}
td.ok{border-left-color:var(--ok)}td.degraded{border-left-color:var(--degraded)}td.half_open{border-left-color:var(--half)}
td.down{border-left-color:var(--down)}
.m{white-space:nowrap}.k{display:inline-block;width:3.2em;color:var(--muted)}.v.over{color:var(--down)}
.brk{font-size:12px;color:var(--muted)}.brk-open{color:var(--down);font-weight:600}.brk-half_open{color:var(--half);font-weight:600}
.err{font-size:12px;color:var(--down);max-width:320px;overflow-wrap:anywhere}
svg.spark{display:block;max-width:100%;height:auto;overflow:visible}
svg.spark polyline{fill:none;stroke:var(--half);stroke-width:1.5;stroke-linejoin:round}
svg.spark circle{fill:var(--half)}
.spark-range{font-size:12px;white-space:nowrap}
tr.low td,tr.low th{background:rgba(207,34,46,.08)}tr.low .usd{color:var(--down);font-weight:700}
.usd{font-variant-numeric:tabular-nums}
td.none{color:var(--muted)}
footer{font-size:12px;color:var(--muted)}footer a{color:inherit}
@media (max-width:700px){
header,main,footer{padding:8px}
table.grid,table.grid tbody,table.grid tr,table.grid th,table.grid td{display:block;width:100%}
table.grid{border:0;background:none}
table.grid thead{display:none}
table.grid tr{background:var(--card);border:1px solid var(--line);border-radius:8px;margin:0 0 12px;overflow:hidden}
table.grid th.target{border-bottom:1px solid var(--line);min-width:0}
table.grid td{border-bottom:1px solid var(--line);min-width:0}
table.grid td::before{content:attr(data-label);display:block;font-size:11px;text-transform:uppercase;letter-spacing:.03em;color:var(--muted)}
table.grid td.none{display:none}
table.grid tr.degraded{border-color:var(--degraded)}table.grid tr.half_open{border-color:var(--half)}
table.grid tr.down{border-color:var(--down)}
.m{white-space:normal}
}
"#;

/// The credit table: the latest reading against `balance.min_usd`, highlighted below it.
/// The day's probe spend against `probe.daily_budget_usd`, and how many targets the plan stretched.
fn probe_plan_html(plan: &crate::adaptive::ProbePlan) -> String {
    use crate::adaptive::Mode;
    let count = |m: Mode| plan.targets.iter().filter(|t| t.mode == m).count();
    let (stretched, fast) = (count(Mode::Stretched), count(Mode::Incident));
    format!(
        r#"<p class="muted plan">Probe spend today ${:.4}, projected ${:.4} of the ${:.2} daily budget{}{}{}</p>"#,
        plan.spent_usd,
        plan.projected_usd,
        plan.budget_usd,
        if plan.over_budget { r#" <span class="pill down">over budget even at probe.max_interval</span>"# } else { "" },
        if stretched > 0 {
            format!(" · {stretched} target(s) probed less often to stay under it")
        } else {
            String::new()
        },
        if fast > 0 {
            format!(" · {fast} target(s) in trouble probed at the incident interval")
        } else {
            String::new()
        },
    )
}

/// How often a target is probed, when the plan changed it from the base interval.
fn probe_line(p: &crate::adaptive::TargetPlan) -> String {
    use crate::adaptive::Mode;
    let every = humantime::format_duration(std::time::Duration::from_secs(p.every.as_secs().max(1)));
    match p.mode {
        Mode::Base | Mode::Unpriced => String::new(),
        Mode::Stretched => format!(
            r#"<div class="muted" title="stretched so the day's probe spend stays under probe.daily_budget_usd">probed every {every} (budget)</div>"#
        ),
        Mode::Incident => format!(
            r#"<div class="muted" title="in trouble: probed at probe.incident_interval until it recovers">probed every {every} (in trouble)</div>"#
        ),
    }
}

fn credits_html(credits: &[Credit], now: DateTime<Utc>) -> String {
    let mut out = String::new();
    out.push_str(
        r#"<section><h2>Credit</h2><div class="scroll"><table class="credits"><thead><tr><th scope="col">Provider</th><th scope="col">Remaining</th><th scope="col">Minimum</th><th scope="col">As of</th></tr></thead><tbody>"#,
    );
    for c in credits {
        match c.reading {
            Some((at, usd)) => {
                let low = usd < c.min_usd;
                let _ = write!(
                    out,
                    r#"<tr{}><th scope="row">{}</th><td class="usd">${usd:.2}{}</td><td class="usd">${:.2}</td><td title="{}">{}</td></tr>"#,
                    if low { r#" class="low""# } else { "" },
                    esc(&c.provider),
                    if low { r#" <span class="pill down">below minimum</span>"# } else { "" },
                    c.min_usd,
                    stamp(at),
                    ago(at, now)
                );
            }
            None => {
                let _ = write!(
                    out,
                    r#"<tr><th scope="row">{}</th><td class="muted">no reading yet</td><td class="usd">${:.2}</td><td></td></tr>"#,
                    esc(&c.provider),
                    c.min_usd
                );
            }
        }
    }
    out.push_str("</tbody></table></div></section>\n");
    out
}

/// What each provider's own status page reports: overall status, components not operational,
/// and open incidents.
fn providers_html(providers: &[crate::provider_status::ProviderStatus], now: DateTime<Utc>) -> String {
    let mut out = String::new();
    out.push_str(
        r#"<section><h2>Providers' status pages</h2><div class="scroll"><table class="credits providers"><thead><tr><th scope="col">Provider</th><th scope="col">Reported status</th><th scope="col">Open incidents</th><th scope="col">Read</th></tr></thead><tbody>"#,
    );
    for p in providers {
        let pill = match p.indicator.as_str() {
            "none" => "ok",
            "minor" | "maintenance" => "degraded",
            "major" | "critical" => "down",
            _ => "pending",
        };
        let mut status = if p.description.is_empty() { p.indicator.clone() } else { p.description.clone() };
        let hurt: Vec<String> = p
            .components
            .iter()
            .filter(|c| c.status != "operational")
            .map(|c| format!("{}: {}", c.name, c.status.replace('_', " ")))
            .collect();
        if !hurt.is_empty() {
            status = format!("{status} ({})", hurt.join(", "));
        }
        let mut incidents = String::new();
        for i in p.incidents.iter().filter(|i| i.is_open()) {
            let title = match &i.shortlink {
                Some(link) if link.starts_with("https://") || link.starts_with("http://") => {
                    format!(r#"<a href="{}">{}</a>"#, esc(link), esc(&i.name))
                }
                _ => esc(&i.name),
            };
            let _ = write!(
                incidents,
                r#"<div>{title} <span class="muted">· {} · {} impact · since <span title="{}">{}</span></span></div>"#,
                esc(&i.status),
                esc(&i.impact),
                stamp(i.created_at),
                ago(i.created_at, now)
            );
        }
        if incidents.is_empty() {
            incidents.push_str(r#"<span class="muted">none</span>"#);
        }
        let read = match (p.fetched_at, &p.last_error) {
            (_, Some(err)) => {
                format!(r#"<span class="pill down">unreadable</span> <span class="muted">{}</span>"#, esc(err))
            }
            (Some(at), None) => format!(r#"<span title="{}">{}</span>"#, stamp(at), ago(at, now)),
            (None, None) => r#"<span class="muted">not yet</span>"#.to_string(),
        };
        let _ = write!(
            out,
            r#"<tr><th scope="row"><a href="{}">{}</a></th><td><span class="pill {pill}">{}</span> {}</td><td>{incidents}</td><td>{read}</td></tr>"#,
            esc(&p.page_url),
            esc(&p.provider),
            esc(&p.indicator),
            esc(&status),
        );
    }
    out.push_str("</tbody></table></div></section>\n");
    out
}

/// The grid: one row per target, one column per region, then this region's trend.
fn targets_html(data: &StatusData, now: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(1024 + data.rows.len() * (1200 + 600 * data.regions.len()));
    out.push_str(
        r#"<section><h2>Targets</h2>
<div class="scroll"><table class="grid">
<thead><tr><th scope="col">Target</th>"#,
    );
    for (i, r) in data.regions.iter().enumerate() {
        let note = if i == 0 { r#" <span class="muted">(this instance)</span>"# } else { "" };
        let _ = write!(out, r#"<th scope="col">{}{note}</th>"#, esc(r));
    }
    let trend_label = format!("TTFT P50 · {} · {}", window_span(data.trend_hours), data.region);
    let _ = write!(out, r#"<th scope="col">{}</th></tr></thead>{}<tbody>"#, esc(&trend_label), "\n");
    for row in &data.rows {
        let local = row.cells.first().and_then(Option::as_ref);
        let class = local.map_or("", |c| c.health(data.failover_factor).as_str());
        let _ = write!(out, r#"<tr class="{class}"><th scope="row" class="target">{}</th>"#, target_label(row));
        for (i, region) in data.regions.iter().enumerate() {
            match row.cells.get(i).and_then(Option::as_ref) {
                Some(cell) => {
                    let _ = write!(
                        out,
                        r#"<td class="cell {}" data-label="{}">{}</td>"#,
                        cell.health(data.failover_factor).as_str(),
                        esc(region),
                        cell_html(cell, data, now)
                    );
                }
                None => {
                    let _ = write!(out, r#"<td class="none" data-label="{}">not probed here</td>"#, esc(region));
                }
            }
        }
        let _ = write!(
            out,
            r#"<td class="trend" data-label="{}">{}</td></tr>{}"#,
            esc(&trend_label),
            sparkline(&row.trend, now, data.trend_hours.max(1)),
            "\n"
        );
    }
    out.push_str("</tbody></table></div></section>\n");
    out
}

/// "7 days", or "36 h" for a window that is not whole days.
fn window_span(hours: i64) -> String {
    match hours {
        h if h % 24 == 0 => format!("{} days", h / 24),
        h => format!("{h} h"),
    }
}

/// The page, as a complete HTML document.
pub fn render(data: &StatusData, now: DateTime<Utc>) -> String {
    let mut counts: Vec<(Health, usize)> =
        [Health::Ok, Health::Degraded, Health::HalfOpen, Health::Down, Health::Pending].map(|h| (h, 0)).to_vec();
    for cell in data.rows.iter().filter_map(|r| r.cells.first().and_then(Option::as_ref)) {
        let h = cell.health(data.failover_factor);
        if let Some(c) = counts.iter_mut().find(|(x, _)| *x == h) {
            c.1 += 1;
        }
    }
    let region = esc(&data.region);
    let mut out = String::with_capacity(8192 + data.rows.len() * (1200 + 600 * data.regions.len()));
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{refresh}">
<meta name="color-scheme" content="light dark">
<title>vigil · {region}</title>
<style>{STYLE}</style></head>
<body>
<header><h1>vigil <span class="muted">· {region}</span></h1>
<p class="summary">"#,
        refresh = data.refresh_s,
    );
    for (h, n) in counts.iter().filter(|(h, n)| *n > 0 || *h == Health::Ok) {
        let _ = write!(out, r#"<span class="pill {c}">{n} {c}</span>"#, c = h.as_str());
    }
    let _ = write!(
        out,
        r#"</p>
<p class="meta">{targets} targets in {region}{others} · updated <time datetime="{iso}">{stamp}</time> · reloads every {refresh} s · degraded = TTFB or TTFT over {factor}× the P95 of the last {span}</p>
</header>
<main>
"#,
        targets = data.rows.iter().filter(|r| r.cells.first().is_some_and(Option::is_some)).count(),
        others = match data.regions.len() {
            0 | 1 => String::new(),
            n => format!(" · {} other region{} sharing storage", n - 1, if n > 2 { "s" } else { "" }),
        },
        iso = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        stamp = stamp(now),
        refresh = data.refresh_s,
        factor = data.failover_factor,
        span = window_span(data.trend_hours),
    );
    if let Some(plan) = &data.probe_plan {
        out.push_str(&probe_plan_html(plan));
    }
    if !data.credits.is_empty() {
        out.push_str(&credits_html(&data.credits, now));
    }
    if !data.providers.is_empty() {
        out.push_str(&providers_html(&data.providers, now));
    }
    out.push_str(&targets_html(data, now));
    if !data.canary.is_empty() {
        out.push_str(&super::canary::section_html(&data.canary, now));
    }
    let _ = write!(
        out,
        r#"</main>
<footer>vigil · region {region} · <a href="/metrics">/metrics</a> · <a href="/v1/thresholds">/v1/thresholds</a> · <a href="/v1/targets">/v1/targets</a></footer>
</body></html>
"#
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).single().expect("valid time")
    }

    fn base(count: u64, p95: Option<f64>) -> Option<Baseline> {
        Some(Baseline { count, p50: p95.map(|v| v / 2.0), p95, p99: p95.map(|v| v * 2.0) })
    }

    fn probe(outcome: Outcome, ttfb: Option<f64>, ttft: Option<f64>) -> LastProbe {
        LastProbe {
            at: now() - Duration::seconds(4),
            outcome,
            status: Some(if outcome.is_failure() { 503 } else { 200 }),
            ttfb_ms: ttfb,
            ttft_ms: ttft,
            error: outcome.is_failure().then(|| "upstream <overloaded>".to_string()),
        }
    }

    fn breaker(state: BreakerState) -> Explanation {
        Explanation {
            state,
            since: now() - Duration::minutes(3),
            reason: (state != BreakerState::Closed).then(|| "3 failed probes in 120s: server_error".into()),
            tripped_by: Vec::new(),
            next_half_open: (state == BreakerState::Open).then(|| now() + Duration::minutes(2)),
        }
    }

    fn local(last: Option<LastProbe>, b: BreakerState) -> Cell {
        Cell {
            last,
            ttfb: base(1000, Some(150.0)),
            ttft: base(1000, Some(312.0)),
            breaker: Some(breaker(b)),
            flapping: false,
            probe: None,
        }
    }

    fn data(rows: Vec<Row>, regions: &[&str]) -> StatusData {
        StatusData {
            region: regions[0].into(),
            regions: regions.iter().map(|r| r.to_string()).collect(),
            rows,
            credits: Vec::new(),
            failover_factor: 2.0,
            min_samples: 300,
            refresh_s: 30,
            trend_hours: 168,
            providers: Vec::new(),
            probe_plan: None,
            canary: Vec::new(),
        }
    }

    fn row(provider: &str, model: &str, cells: Vec<Option<Cell>>) -> Row {
        Row {
            provider: provider.into(),
            model: model.into(),
            route: Some("DeepInfra".into()),
            cells,
            trend: Vec::new(),
        }
    }

    #[test]
    fn states_follow_breaker_then_outcome_then_baseline() {
        let f = 2.0;
        let ok = local(Some(probe(Outcome::Ok, Some(100.0), Some(300.0))), BreakerState::Closed);
        assert_eq!(ok.health(f), Health::Ok);
        let slow_ttft = local(Some(probe(Outcome::Ok, Some(100.0), Some(625.0))), BreakerState::Closed);
        assert_eq!(slow_ttft.health(f), Health::Degraded, "625 ms > 2 × 312 ms");
        let slow_ttfb = local(Some(probe(Outcome::Ok, Some(301.0), Some(300.0))), BreakerState::Closed);
        assert_eq!(slow_ttfb.health(f), Health::Degraded);
        let at_limit = local(Some(probe(Outcome::Ok, Some(300.0), Some(624.0))), BreakerState::Closed);
        assert_eq!(at_limit.health(f), Health::Ok, "not over the limit");
        let failed = local(Some(probe(Outcome::ServerError, None, None)), BreakerState::Closed);
        assert_eq!(failed.health(f), Health::Down);
        let open = local(Some(probe(Outcome::Ok, Some(10.0), Some(10.0))), BreakerState::Open);
        assert_eq!(open.health(f), Health::Down, "an open breaker is down whatever the last probe");
        let half = local(Some(probe(Outcome::ServerError, None, None)), BreakerState::HalfOpen);
        assert_eq!(half.health(f), Health::HalfOpen);
        assert_eq!(local(None, BreakerState::Closed).health(f), Health::Pending);
        let young = Cell { ttft: base(42, None), ..slow_ttft };
        assert_eq!(young.health(f), Health::Ok, "no P95 yet: nothing to be slow against");
    }

    #[test]
    fn text_from_config_and_providers_is_escaped() {
        let mut cell = local(Some(probe(Outcome::ServerError, None, None)), BreakerState::Open);
        cell.breaker.as_mut().expect("breaker").reason = Some("\"quoted\" & <b>bold</b>".into());
        let rows = vec![row("<script>alert(1)</script>", "m\"odel'&", vec![Some(cell)])];
        let html = render(&data(rows, &["eu<west>"]), now());
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("m&quot;odel&#39;&amp;"));
        assert!(html.contains("eu&lt;west&gt;") && !html.contains("eu<west>"));
        assert!(html.contains("upstream &lt;overloaded&gt;"), "provider error text is escaped");
        assert!(html.contains(r#"title="&quot;quoted&quot; &amp; &lt;b&gt;bold&lt;/b&gt;""#), "{html}");
        assert_eq!(esc(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }

    #[test]
    fn baselines_show_p95_or_a_dash_with_the_sample_count() {
        let known = local(Some(probe(Outcome::Ok, Some(120.0), Some(212.4))), BreakerState::Closed);
        let young = Cell {
            ttfb: base(42, None),
            ttft: base(42, None),
            ..local(Some(probe(Outcome::Ok, Some(120.0), Some(212.0))), BreakerState::Closed)
        };
        let html =
            render(&data(vec![row("a", "m1", vec![Some(known)]), row("b", "m2", vec![Some(young)])], &["eu"]), now());
        assert!(html.contains("<b class=\"v\">212 ms</b> <span class=\"base\">P95 312 ms</span>"), "{html}");
        assert!(html.contains("P95 150 ms"));
        assert!(html.contains("P95 — (42 samples, need 300)"), "{html}");
        assert!(!html.contains("NaN") && !html.contains("None"));
    }

    #[test]
    fn breaker_states_and_failures_are_spelled_out() {
        let rows = vec![
            row("a", "open", vec![Some(local(Some(probe(Outcome::ServerError, None, None)), BreakerState::Open))]),
            row("b", "half", vec![Some(local(Some(probe(Outcome::Ok, Some(1.0), Some(1.0))), BreakerState::HalfOpen))]),
            row("c", "new", vec![Some(local(None, BreakerState::Closed))]),
        ];
        let html = render(&data(rows, &["eu"]), now());
        assert!(html.contains("breaker open since 3 min ago; trial probe at 12:22:00 UTC"), "{html}");
        assert!(html.contains("breaker half_open since 3 min ago"));
        assert!(html.contains("server_error 503: upstream &lt;overloaded&gt;"));
        assert!(html.contains(r#"<td class="cell down""#) && html.contains(r#"<td class="cell half_open""#));
        assert!(html.contains("no probe yet"));
        assert!(html.contains(r#"<span class="pill down">1 down</span>"#), "summary counts this region's states");
    }

    #[test]
    fn other_regions_get_their_own_column_and_gaps_say_so() {
        let there = Cell { last: Some(probe(Outcome::Ok, Some(90.0), Some(250.0))), ..Cell::default() };
        let rows = vec![
            row(
                "a",
                "m",
                vec![Some(local(Some(probe(Outcome::Ok, Some(1.0), Some(1.0))), BreakerState::Closed)), Some(there)],
            ),
            row(
                "b",
                "m",
                vec![None, Some(Cell { last: Some(probe(Outcome::Timeout, None, None)), ..Cell::default() })],
            ),
        ];
        let html = render(&data(rows, &["eu-west-1", "us-east-1"]), now());
        assert!(html.contains(r#"<th scope="col">us-east-1</th>"#));
        assert!(
            html.contains(r#"<td class="cell ok" data-label="us-east-1"><span class="pill ok">ok</span>"#),
            "{html}"
        );
        assert!(html.contains("<b class=\"v\">250 ms</b></div>"), "no baseline is claimed for another region");
        assert!(html.contains(r#"<td class="none" data-label="eu-west-1">not probed here</td>"#));
        assert!(html.contains(r#"<td class="cell down" data-label="us-east-1">"#));
        assert!(html.contains("1 other region sharing storage"));
    }

    #[test]
    fn sparkline_spans_the_window_and_breaks_at_missing_hours() {
        let start = Utc.with_ymd_and_hms(2026, 11, 23, 13, 0, 0).single().expect("time");
        let at = |h: i64| start + Duration::hours(h);
        let points =
            vec![(at(-1), 999.0), (at(0), 100.0), (at(1), 300.0), (at(2), 200.0), (at(5), 100.0), (at(167), 300.0)];
        let runs = spark_points(&points, start, 168);
        let step = SPARK_W / 167.0;
        let (top, bottom) = (SPARK_PAD, SPARK_H - SPARK_PAD);
        assert_eq!(runs.len(), 3, "hours 0-2, 5, 167: an hour before the window is left out");
        assert_eq!(runs[0], vec![(0.0, bottom), (step, top), (2.0 * step, SPARK_H / 2.0)]);
        assert_eq!(runs[1], vec![(5.0 * step, bottom)]);
        assert_eq!(runs[2], vec![(SPARK_W, top)]);
        let flat = spark_points(&[(at(3), 50.0), (at(4), 50.0)], start, 168);
        assert_eq!(flat[0].iter().map(|p| p.1).collect::<Vec<_>>(), [SPARK_H / 2.0; 2], "a flat line sits mid-height");

        let now = at(167) + Duration::minutes(20);
        let mut r = row("a", "m", vec![Some(local(None, BreakerState::Closed))]);
        r.trend = points;
        let html = render(&data(vec![r], &["eu"]), now);
        assert!(html.contains("<svg class=\"spark\""), "{html}");
        assert_eq!(html.matches("<polyline").count(), 1, "single-hour runs are dots, not lines");
        assert!(html
            .contains(&format!(r#"<polyline points="0.0,{bottom:.1} {step:.1},{top:.1} {:.1},16.0"/>"#, 2.0 * step)));
        assert!(html.contains("5 hours with data, lowest 100 ms, highest 300 ms, latest 300 ms"), "{html}");
        assert!(html.contains(r#"<circle cx="168.0" cy="3.0""#));
        let empty = render(&data(vec![row("a", "m", vec![None])], &["eu"]), now);
        assert!(empty.contains("no hourly data yet") && !empty.contains("<svg"));
    }

    #[test]
    fn credits_highlight_balances_under_the_minimum() {
        let mut d = data(vec![], &["eu"]);
        d.credits = vec![
            Credit { provider: "rich".into(), min_usd: 5.0, reading: Some((now() - Duration::minutes(2), 17.5)) },
            Credit { provider: "poor".into(), min_usd: 20.0, reading: Some((now(), 4.25)) },
            Credit { provider: "new".into(), min_usd: 1.0, reading: None },
        ];
        let html = render(&d, now());
        assert!(
            html.contains(r#"<tr><th scope="row">rich</th><td class="usd">$17.50</td><td class="usd">$5.00</td>"#),
            "{html}"
        );
        assert!(html.contains(r#"<tr class="low"><th scope="row">poor</th><td class="usd">$4.25 <span class="pill down">below minimum</span>"#));
        assert!(html.contains("no reading yet"));
    }

    #[test]
    fn providers_section_shows_reported_status_open_incidents_and_unreadable_pages() {
        use crate::provider_status::{ProviderComponent, ProviderIncident, ProviderStatus};
        let mut d = data(vec![], &["eu"]);
        assert!(!render(&d, now()).contains("Providers' status pages"), "no section when no page is polled");
        d.providers = vec![
            ProviderStatus {
                provider: "openai".into(),
                page_name: "OpenAI".into(),
                page_url: "https://status.example.invalid".into(),
                indicator: "major".into(),
                description: "Partial System Outage".into(),
                components: vec![ProviderComponent {
                    provider: "openai".into(),
                    id: "c".into(),
                    name: "Chat Completions".into(),
                    status: "partial_outage".into(),
                    updated_at: None,
                }],
                incidents: vec![ProviderIncident {
                    provider: "openai".into(),
                    id: "i".into(),
                    name: "Errors <b>on</b> chat".into(),
                    status: "investigating".into(),
                    impact: "major".into(),
                    created_at: now() - Duration::minutes(18),
                    updated_at: None,
                    resolved_at: None,
                    components: vec![],
                    shortlink: Some("javascript:alert(1)".into()),
                }],
                fetched_at: Some(now() - Duration::minutes(1)),
                fresh_until: Some(now() + Duration::minutes(8)),
                last_error: None,
            },
            ProviderStatus {
                provider: "groq".into(),
                page_url: "https://groq.example.invalid".into(),
                indicator: "unknown".into(),
                last_error: Some("HTTP 503".into()),
                ..ProviderStatus::default()
            },
        ];
        let html = render(&d, now());
        assert!(html.contains("<h2>Providers' status pages</h2>"));
        assert!(
            html.contains(
                r#"<span class="pill down">major</span> Partial System Outage (Chat Completions: partial outage)"#
            ),
            "{html}"
        );
        assert!(html.contains("Errors &lt;b&gt;on&lt;/b&gt; chat"), "provider text is escaped");
        assert!(!html.contains("javascript:"), "only http(s) links are made");
        assert!(html.contains("investigating · major impact"));
        assert!(html.contains(r#"<span class="pill down">unreadable</span> <span class="muted">HTTP 503</span>"#));
    }

    #[tokio::test]
    async fn gather_puts_this_region_first_and_merges_other_regions_by_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            crate::store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await.expect("open sqlite");
        let text = "region = \"eu\"\n[probe]\ninterval = \"5s\"\ntimeout = \"5s\"\n[baseline]\nmin_samples_p95 = 50\n";
        let config = Config::from_toml(text, &std::collections::BTreeMap::new()).expect("valid config");
        let page = StatusPage::new(&config, store);
        let t = |route: &str, region: &str| Target {
            provider: "p".into(),
            model: "m".into(),
            route: Some(route.into()),
            region: region.into(),
        };
        let view = |target: Target, sample: Option<Sample>| crate::monitor::TargetView {
            target: target.id(),
            provider: target.provider.clone(),
            model: target.model.clone(),
            route: target.route.clone(),
            region: target.region.clone(),
            last_sample: sample,
            baselines: [("ttft".to_string(), Baseline { count: 7, ..Baseline::default() })].into(),
            probes: 0,
            errors: 0,
            breaker: breaker(BreakerState::Closed),
            flapping: target.route.as_deref() == Some("B"),
        };
        let mut seen = Sample::new(t("A", "eu"), now(), now());
        seen.ttft_ms = Some(210.0);
        let snap = Snapshot {
            thresholds: None,
            targets: vec![view(t("A", "eu"), Some(seen)), view(t("B", "eu"), None)],
            elsewhere: Arc::new(vec![
                Sample::new(t("A", "us"), now(), now()),
                Sample::new(t("C", "ap"), now(), now()),
                Sample::new(t("B", "ap"), now(), now()),
            ]),
            credits: Default::default(),
            flapping: Default::default(),
            probe_plan: None,
        };
        let d = page.gather(&snap);
        assert_eq!(d.regions, ["eu", "ap", "us"]);
        assert_eq!((d.min_samples, d.refresh_s, d.trend_hours), (50, 10, 168), "reload bounded below by 10 s");
        let routes: Vec<_> = d.rows.iter().map(|r| r.route.as_deref().unwrap_or("")).collect();
        assert_eq!(routes, ["A", "B", "C"], "this region's targets in config order, then targets only others probe");
        let probed: Vec<Vec<bool>> = d.rows.iter().map(|r| r.cells.iter().map(Option::is_some).collect()).collect();
        assert_eq!(probed, [[true, false, true], [true, true, false], [false, true, false]]);
        let a = d.rows[0].cells[0].as_ref().expect("A here");
        assert_eq!(a.last.as_ref().and_then(|l| l.ttft_ms), Some(210.0));
        assert_eq!(a.ttft.map(|b| b.count), Some(7));
        assert!(d.rows[0].cells[2].as_ref().is_some_and(|c| c.breaker.is_none() && c.ttft.is_none()));
        assert!(d.rows[1].cells[0].as_ref().is_some_and(|c| c.last.is_none()), "B not probed yet here");
        assert!(d.rows[1].cells[0].as_ref().is_some_and(|c| c.flapping) && !a.flapping, "B flaps here, A does not");
        let html = cell_html(d.rows[1].cells[0].as_ref().expect("B here"), &d, now());
        assert!(html.contains(">flapping</span>"), "{html}");

        let mut d = d;
        let trends: Trends = Arc::new([(t("B", "eu"), vec![(now(), 99.0)]), (t("C", "ap"), vec![(now(), 1.0)])].into());
        page.attach_trends(&mut d, &trends);
        let lens: Vec<usize> = d.rows.iter().map(|r| r.trend.len()).collect();
        assert_eq!(lens, [0, 1, 0], "only this region's trend is shown");
    }

    #[tokio::test]
    async fn credits_come_from_the_snapshot_a_day_back_at_most() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            crate::store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await.expect("open sqlite");
        let mut text = String::from("region = \"eu\"\n");
        for (name, min_usd) in [("a", 5.0), ("b", 1.0), ("c", 2.0)] {
            text += &format!(
                "[[provider]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                 api_key_env = \"K\"\nmodels = [\"m\"]\nbalance = {{ min_usd = {min_usd:?} }}\n"
            );
        }
        let env = std::collections::BTreeMap::from([("K".to_string(), "sk-test-page".to_string())]);
        let config = Config::from_toml(&text, &env).expect("valid config");
        let page = StatusPage::new(&config, store);
        let reading = |provider: &str, hours: i64, usd: f64| crate::store::BalanceReading {
            provider: provider.into(),
            region: "eu".into(),
            at: now() - Duration::hours(hours),
            remaining_usd: usd,
        };
        let snap = Snapshot {
            credits: Arc::new([("a".into(), reading("a", 1, 12.5)), ("b".into(), reading("b", 25, 3.0))].into()),
            ..Snapshot::default()
        };
        let shown: Vec<_> =
            page.credits(&snap, now()).into_iter().map(|c| (c.provider, c.min_usd, c.reading)).collect();
        assert_eq!(
            shown,
            [
                ("a".to_string(), 5.0, Some((now() - Duration::hours(1), 12.5))),
                ("b".to_string(), 1.0, None),
                ("c".to_string(), 2.0, None),
            ],
            "every watched provider, in config order; a reading over a day old is not shown"
        );
    }

    #[test]
    fn the_page_is_self_contained_and_reloads_itself() {
        let html = render(&data(vec![], &["eu"]), now());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains(r#"<meta http-equiv="refresh" content="30">"#));
        assert!(html.contains(r#"<meta name="viewport" content="width=device-width, initial-scale=1">"#));
        assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("<script"), "{html}");
        assert!(!html.contains("<link") && !html.contains("@import") && !html.contains("url("));
    }
}
