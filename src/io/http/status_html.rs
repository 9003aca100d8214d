//! The status page's markup: [`render`] turns [`StatusData`] into one self-contained HTML document
//! (inline CSS and SVG, no script), written with `maud::html!` so every spliced text is escaped.

use super::canary::CanaryView;
use super::status_data::Cell;
use super::status_data::Credit;
use super::status_data::ShownProbe;
use super::status_data::StatusData;
use super::status_data::StatusRow;
use crate::decide::baseline::Baseline;
use crate::decide::breaker::Explanation;
use crate::io::markup::Text;
use crate::vocab::breaker::State as BreakerState;
use crate::vocab::canary::CanaryRun;
use crate::vocab::check::{CheckRun, CheckVerdict};
use crate::vocab::health::HealthState;
use crate::vocab::provider_status::ProviderStatus;
use chrono::{DateTime, Duration, DurationRound, Utc};
use maud::{html, Markup, PreEscaped, DOCTYPE};

/// Sparkline drawing area, in SVG user units.
pub(crate) const SPARK_W: f64 = 168.0;
pub(crate) const SPARK_H: f64 = 32.0;
pub(crate) const SPARK_PAD: f64 = 3.0;

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

/// "7 days", or "36 h" for a window that is not whole days.
fn window_span(hours: i64) -> String {
    match hours {
        h if h % 24 == 0 => format!("{} days", h / 24),
        h => format!("{h} h"),
    }
}

/// One metric's cell over its failover threshold (the single-metric case of
/// [`crate::decide::baseline::exceeds_failover`]).
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

fn sparkline(trend: &[(DateTime<Utc>, f64)], now: DateTime<Utc>, hours: i64) -> Markup {
    let start = now.duration_trunc(Duration::hours(1)).unwrap_or(now) - Duration::hours(hours - 1);
    let runs = spark_points(trend, start, hours);
    let Some(&(lx, ly)) = runs.last().and_then(|r| r.last()) else {
        return html! { span class="muted" { "no hourly data yet" } };
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
    html! {
        svg class="spark" viewBox={ "0 0 " (SPARK_W) " " (SPARK_H) } width=(SPARK_W) height=(SPARK_H) role="img"
            aria-label=(Text(&label)) {
            title { (Text(&label)) }
            // SVG shapes are written as self-closing tags, which maud has no form for; they
            // carry numbers only, so nothing in them needs escaping.
            @for run in runs.iter().filter(|r| r.len() > 1) {
                (PreEscaped(format!(r#"<polyline points="{}"/>"#, polyline(run))))
            }
            (PreEscaped(format!(r#"<circle cx="{lx:.1}" cy="{ly:.1}" r="2.5"/>"#)))
        }
        span class="spark-range" { (ms(lo)) " – " (ms(hi)) ", now " (ms(latest)) }
    }
}

/// SVG `points` of one run: `x,y` pairs with one decimal.
fn polyline(run: &[(f64, f64)]) -> String {
    run.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" ")
}

fn target_label(row: &StatusRow) -> Markup {
    html! {
        span class="provider" { (Text(&row.provider)) }
        @if !row.model.is_empty() {
            span class="model" { (Text(&row.model)) }
        }
        @if let Some(route) = &row.route {
            span class="route" { "via " (Text(route)) }
        }
    }
}

/// One metric of the last probe; `over` when the health judged it over its failover deadline.
fn metric_line(name: &str, value: Option<f64>, base: Option<Baseline>, min_samples: u64, over: bool) -> Markup {
    let shown = value.map_or_else(|| "—".to_string(), ms);
    let class = if over { "v over" } else { "v" };
    html! {
        div class="m" {
            span class="k" { (name) } " " b class=(class) { (shown) }
            @if let Some(b) = base.filter(|b| b.count > 0 || value.is_some()) {
                " " span class="base" { (Text(&baseline_text(&b, min_samples))) }
            }
        }
    }
}

fn breaker_line(b: &Explanation, now: DateTime<Utc>) -> Markup {
    let mut text = format!("breaker {}", b.state.as_str());
    if b.state != BreakerState::Closed || b.reason.is_some() {
        text.push_str(&format!(" since {}", ago(b.since, now)));
    }
    if let Some(next) = b.next_half_open.filter(|_| b.state == BreakerState::Open) {
        text.push_str(&format!("; trial probe at {}", next.format("%H:%M:%S UTC")));
    }
    let title = b.reason.as_deref().unwrap_or("never tripped");
    html! {
        div class={ "brk brk-" (b.state.as_str()) } title=(Text(title)) { (Text(&text)) }
    }
}

/// "server_error 503: upstream overloaded", the error cut at 120 characters.
fn failure_text(last: &ShownProbe) -> String {
    let mut why = last.outcome.as_str().to_string();
    if let Some(code) = last.status {
        why.push_str(&format!(" {code}"));
    }
    if let Some(e) = &last.error {
        let short: String = e.chars().take(120).collect();
        why.push_str(&format!(": {short}"));
    }
    why
}

/// What one target shows in one region's column.
pub(crate) fn cell_html(cell: &Cell, data: &StatusData, now: DateTime<Utc>) -> Markup {
    let health = cell.health.state.as_str();
    let over = |metric: &str| cell.health.over.iter().any(|m| m == metric);
    html! {
        span class={ "pill " (health) } title=[cell.health.reason.as_deref()] { (health) }
        @if cell.health.flapping {
            " " span class="pill half_open"
                title="its state changes too often: changes are not paged until it settles" { "flapping" }
        }
        @if let Some(p) = &cell.probe {
            (probe_line(p))
        }
        @match &cell.last {
            None => { " " span class="muted" { "no probe yet" } }
            Some(last) => {
                " " span class="age" title=(stamp(last.at)) { (ago(last.at, now)) }
                (metric_line("TTFT", last.ttft_ms, cell.ttft, data.min_samples, over("ttft")))
                (metric_line("TTFB", last.ttfb_ms, cell.ttfb, data.min_samples, over("ttfb")))
                @if last.outcome.is_failure() {
                    div class="err" { (Text(&failure_text(last))) }
                }
            }
        }
        @if let Some(b) = &cell.breaker {
            (breaker_line(b, now))
        }
        @if let Some(r) = &cell.ratelimit {
            (ratelimit_line(r))
        }
    }
}

/// The provider's rate-limit headroom as the last response said it: what is left of each
/// allowance and when it resets, marked when under `ratelimit.low_fraction`.
fn ratelimit_line(v: &crate::decide::ratelimit::HeadroomView) -> Markup {
    use crate::vocab::ratelimit::RateLimitKind;
    let text = |a: &crate::vocab::ratelimit::Allowance| {
        let left = match (a.remaining, a.limit) {
            (Some(r), Some(l)) => format!("{r}/{l}"),
            (Some(r), None) => format!("{r} left"),
            (None, Some(l)) => format!("?/{l}"),
            (None, None) => "?".to_string(),
        };
        let share = a.fraction().map(|f| format!(" ({:.0} %)", f * 100.0)).unwrap_or_default();
        let reset = a.reset_at.map(|r| format!(", resets {}", r.format("%H:%M:%S UTC"))).unwrap_or_default();
        format!("{left}{share}{reset}")
    };
    let parts: Vec<(RateLimitKind, String)> =
        [(RateLimitKind::Requests, v.requests), (RateLimitKind::Tokens, v.tokens)]
            .into_iter()
            .filter_map(|(k, a)| Some((k, text(&a?))))
            .collect();
    html! {
        div class={ "rl" @if v.low { " low" } } title={ "rate-limit headroom as of " (stamp(v.at)) } {
            span class="k" { "limit" }
            @for (i, (kind, t)) in parts.iter().enumerate() {
                @if i > 0 { " · " }
                (kind.as_str()) " " (t)
            }
            @if v.low {
                " " span class="pill degraded" title="headroom under ratelimit.low_fraction (ratelimit_low)" { "rate limit low" }
            }
        }
    }
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
.rl{font-size:12px;color:var(--muted)}.rl.low{color:var(--degraded);font-weight:600}
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

/// The day's probe spend against `probe.daily_budget_usd`, and how many targets the plan stretched.
fn probe_plan_html(plan: &crate::decide::adaptive::ProbePlan) -> Markup {
    use crate::decide::adaptive::Mode;
    let count = |m: Mode| plan.targets.iter().filter(|t| t.mode == m).count();
    let (stretched, fast) = (count(Mode::Stretched), count(Mode::Incident));
    html! {
        p class="muted plan" {
            (format!(
                "Probe spend today ${:.4}, projected ${:.4} of the ${:.2} daily budget",
                plan.spent_usd, plan.projected_usd, plan.budget_usd
            ))
            @if plan.over_budget {
                " " span class="pill down" { "over budget even at probe.max_interval" }
            }
            @if stretched > 0 {
                " · " (stretched) " target(s) probed less often to stay under it"
            }
            @if fast > 0 {
                " · " (fast) " target(s) in trouble probed at the incident interval"
            }
        }
    }
}

/// How often a target is probed, when the plan changed it from the base interval.
fn probe_line(p: &crate::decide::adaptive::TargetPlan) -> Markup {
    use crate::decide::adaptive::Mode;
    let every = humantime::format_duration(std::time::Duration::from_secs(p.every.as_secs().max(1))).to_string();
    html! {
        @match p.mode {
            Mode::Base | Mode::Unpriced => {}
            Mode::Stretched => {
                div class="muted" title="stretched so the day's probe spend stays under probe.daily_budget_usd" {
                    "probed every " (every) " (budget)"
                }
            }
            Mode::Incident => {
                div class="muted" title="in trouble: probed at probe.incident_interval until it recovers" {
                    "probed every " (every) " (in trouble)"
                }
            }
        }
    }
}

/// The credit table: the latest reading against `balance.min_usd`, highlighted below it.
fn credits_html(credits: &[Credit], now: DateTime<Utc>) -> Markup {
    html! {
        section {
            h2 { "Credit" }
            div class="scroll" { table class="credits" {
                thead { tr {
                    th scope="col" { "Provider" } th scope="col" { "Remaining" }
                    th scope="col" { "Minimum" } th scope="col" { "As of" }
                } }
                tbody {
                    @for c in credits {
                        @match c.reading {
                            Some((at, usd)) => {
                                @let low = usd < c.min_usd;
                                tr class=[low.then_some("low")] {
                                    th scope="row" { (Text(&c.provider)) }
                                    td class="usd" {
                                        (format!("${usd:.2}"))
                                        @if low { " " span class="pill down" { "below minimum" } }
                                    }
                                    td class="usd" { (format!("${:.2}", c.min_usd)) }
                                    td title=(stamp(at)) { (ago(at, now)) }
                                }
                            }
                            None => {
                                tr {
                                    th scope="row" { (Text(&c.provider)) }
                                    td class="muted" { "no reading yet" }
                                    td class="usd" { (format!("${:.2}", c.min_usd)) }
                                    td {}
                                }
                            }
                        }
                    }
                }
            } }
        }
        "\n"
    }
}

/// The drills running now: which chain drops what, until when, started where.
fn drills_html(drills: &[crate::vocab::drill::Drill], now: DateTime<Utc>) -> Markup {
    html! {
        section {
            h2 { "Drills" }
            div class="scroll" { table class="credits drills" {
                thead { tr {
                    th scope="col" { "Chain" } th scope="col" { "Dropped" }
                    th scope="col" { "Until" } th scope="col" { "Started" } th scope="col" { "Id" }
                } }
                tbody {
                    @for d in drills {
                        tr {
                            th scope="row" { (Text(&d.chain)) }
                            td { span class="pill degraded" { "drill" } " " (Text(&d.target)) }
                            td title=(stamp(d.until)) { (stamp(d.until)) }
                            td title=(stamp(d.started_at)) { (ago(d.started_at, now)) " in " (Text(&d.region)) }
                            td class="muted" { (d.id.to_string()) }
                        }
                    }
                }
            } }
        }
        "\n"
    }
}

/// One provider's reported status: the page's description (or indicator) and the components not
/// operational.
fn reported_status(p: &ProviderStatus) -> String {
    let status = if p.description.is_empty() { p.indicator.clone() } else { p.description.clone() };
    let hurt: Vec<String> = p
        .components
        .iter()
        .filter(|c| c.status != "operational")
        .map(|c| format!("{}: {}", c.name, c.status.replace('_', " ")))
        .collect();
    if hurt.is_empty() {
        status
    } else {
        format!("{status} ({})", hurt.join(", "))
    }
}

/// What each provider's own status page reports: overall status, components not operational,
/// and open incidents.
fn providers_html(providers: &[ProviderStatus], now: DateTime<Utc>) -> Markup {
    html! {
        section {
            h2 { "Providers' status pages" }
            div class="scroll" { table class="credits providers" {
                thead { tr {
                    th scope="col" { "Provider" } th scope="col" { "Reported status" }
                    th scope="col" { "Open incidents" } th scope="col" { "Read" }
                } }
                tbody {
                    @for p in providers {
                        @let pill = match p.indicator.as_str() {
                            "none" => "ok",
                            "minor" | "maintenance" => "degraded",
                            "major" | "critical" => "down",
                            _ => "pending",
                        };
                        @let open: Vec<_> = p.incidents.iter().filter(|i| i.is_open()).collect();
                        tr {
                            th scope="row" { a href=(Text(&p.page_url)) { (Text(&p.provider)) } }
                            td { span class={ "pill " (pill) } { (Text(&p.indicator)) } " " (Text(&reported_status(p))) }
                            td {
                                @for i in &open {
                                    div {
                                        @match &i.shortlink {
                                            // Only web links: a `javascript:` or other scheme from a
                                            // provider's page is shown as plain text.
                                            Some(link) if link.starts_with("https://") || link.starts_with("http://") => {
                                                a href=(Text(link)) { (Text(&i.name)) }
                                            }
                                            _ => { (Text(&i.name)) }
                                        }
                                        " " span class="muted" {
                                            "· " (Text(&i.status)) " · " (Text(&i.impact)) " impact · since "
                                            span title=(stamp(i.created_at)) { (ago(i.created_at, now)) }
                                        }
                                    }
                                }
                                @if open.is_empty() { span class="muted" { "none" } }
                            }
                            td {
                                @match (p.fetched_at, &p.last_error) {
                                    (_, Some(err)) => {
                                        span class="pill down" { "unreadable" } " " span class="muted" { (Text(err)) }
                                    }
                                    (Some(at), None) => { span title=(stamp(at)) { (ago(at, now)) } }
                                    (None, None) => { span class="muted" { "not yet" } }
                                }
                            }
                        }
                    }
                }
            } }
        }
        "\n"
    }
}

/// The grid: one row per target, one column per region, then this region's trend.
fn targets_html(data: &StatusData, now: DateTime<Utc>) -> Markup {
    let trend_label = format!("TTFT P50 · {} · {}", window_span(data.trend_hours), data.region);
    html! {
        section {
            h2 { "Targets" } "\n"
            div class="scroll" { table class="grid" {
                "\n"
                thead { tr {
                    th scope="col" { "Target" }
                    @for (i, r) in data.regions.iter().enumerate() {
                        th scope="col" {
                            (Text(r))
                            @if i == 0 { " " span class="muted" { "(this instance)" } }
                        }
                    }
                    th scope="col" { (Text(&trend_label)) }
                } }
                "\n"
                tbody {
                    @for row in &data.rows {
                        @let local = row.cells.first().and_then(Option::as_ref);
                        tr class=(local.map_or("", |c| c.health.state.as_str())) {
                            th scope="row" class="target" { (target_label(row)) }
                            @for (i, region) in data.regions.iter().enumerate() {
                                @match row.cells.get(i).and_then(Option::as_ref) {
                                    Some(cell) => {
                                        td class={ "cell " (cell.health.state.as_str()) }
                                            data-label=(Text(region)) { (cell_html(cell, data, now)) }
                                    }
                                    None => { td class="none" data-label=(Text(region)) { "not probed here" } }
                                }
                            }
                            td class="trend" data-label=(Text(&trend_label)) {
                                (sparkline(&row.trend, now, data.trend_hours.max(1)))
                            }
                        }
                        "\n"
                    }
                }
            } }
        }
        "\n"
    }
}

/// The status page's canary section: one row per target with its latest run's score, answers
/// fingerprint and the model identity the provider reported.
fn canary_html(runs: &[CanaryRun], now: DateTime<Utc>) -> Markup {
    html! {
        section {
            h2 { "Model canary" }
            div class="scroll" { table class="credits canary" {
                thead { tr {
                    th scope="col" { "Target" } th scope="col" { "Exact-match" } th scope="col" { "Answers" }
                    th scope="col" { "Reported model" } th scope="col" { "Output tokens" } th scope="col" { "Run" }
                } }
                tbody {
                    @for r in runs {
                        @let v = CanaryView::from(r);
                        @let (pill, score) = if r.sample.outcome.is_failure() {
                            ("down", v.outcome.clone())
                        } else {
                            (if v.correct == v.total { "ok" } else { "degraded" }, format!("{}/{}", v.correct, v.total))
                        };
                        tr {
                            th scope="row" { (Text(&v.key.target)) }
                            td { span class={ "pill " (pill) } { (Text(&score)) } }
                            td {
                                code title=(Text(&v.answers.join(" | "))) {
                                    (Text(if v.answers_fingerprint.is_empty() { "–" } else { &v.answers_fingerprint }))
                                }
                            }
                            td { (reported_model(&v)) }
                            td { (v.output_tokens.map_or_else(|| "–".to_string(), |n| n.to_string())) }
                            td {
                                span title=(v.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string()) {
                                    ((now - v.started_at).num_minutes().max(0)) " min ago"
                                }
                            }
                        }
                    }
                }
            } }
        }
        "\n"
    }
}

/// The status page's golden checks section: one row per target and check with its latest
/// verdict, why, the time to a first token and when it ran (never the prompt).
fn checks_html(runs: &[CheckRun], now: DateTime<Utc>) -> Markup {
    html! {
        section {
            h2 { "Golden checks and capabilities" }
            div class="scroll" { table class="credits checks" {
                thead { tr {
                    th scope="col" { "Target" } th scope="col" { "Check" } th scope="col" { "Verdict" }
                    th scope="col" { "Why" } th scope="col" { "TTFT" } th scope="col" { "Run" }
                } }
                tbody {
                    @for r in runs {
                        @let pill = match r.verdict {
                            CheckVerdict::Passed => "ok",
                            CheckVerdict::Failed => "degraded",
                            CheckVerdict::Error => "down",
                        };
                        tr {
                            th scope="row" { (Text(&r.target().id())) }
                            td { (Text(&r.check)) }
                            td { span class={ "pill " (pill) } { (r.verdict.as_str()) } }
                            td { span title=(Text(&r.answer)) { (Text(if r.why.is_empty() { "–" } else { &r.why })) } }
                            td { (r.sample.ttft_ms.map_or_else(|| "–".to_string(), |ms| format!("{ms:.0} ms"))) }
                            td {
                                span title=(r.sample.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string()) {
                                    ((now - r.sample.started_at).num_minutes().max(0)) " min ago"
                                }
                            }
                        }
                    }
                }
            } }
        }
        "\n"
    }
}

/// The status page's long-prompt probes section: one row per target and size with its TTFT
/// percentiles and its own failover deadline (`[[probe.workload]]`).
fn workloads_html(sizes: &[(String, crate::decide::workload::WorkloadDeadline)]) -> Markup {
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |ms| format!("{ms:.0} ms"));
    html! {
        section {
            h2 { "Long-prompt probes" }
            div class="scroll" { table class="credits workloads" {
                thead { tr {
                    th scope="col" { "Target" } th scope="col" { "Input tokens" } th scope="col" { "Runs" }
                    th scope="col" { "TTFT P50" } th scope="col" { "TTFT P95" } th scope="col" { "Deadline" }
                } }
                tbody {
                    @for (target, w) in sizes {
                        tr {
                            th scope="row" { (Text(target)) }
                            td { (w.input_tokens) }
                            td { (w.runs) @if w.errors > 0 { span class="muted" { " (" (w.errors) " failed)" } } }
                            td { (ms(w.ttft_ms.p50)) }
                            td { (ms(w.ttft_ms.p95)) }
                            td {
                                (ms(w.failover_ttft_ms))
                                @if w.provisional { span class="muted" { " provisional" } }
                            }
                        }
                    }
                }
            } }
        }
        "
    "
    }
}

/// The model, `system_fingerprint` and upstream a canary run's provider reported, space-separated.
fn reported_model(v: &CanaryView) -> Markup {
    let nothing = v.reported_model.is_none() && v.system_fingerprint.is_none() && v.upstream_provider.is_none();
    let parts = [
        v.reported_model.as_deref().map(|m| html! { (Text(m)) }),
        v.system_fingerprint.as_deref().map(|fp| html! { span class="muted" { (Text(fp)) } }),
        v.upstream_provider.as_deref().map(|u| html! { span class="muted" { "via " (Text(u)) } }),
    ];
    html! {
        @for (i, part) in parts.iter().flatten().enumerate() {
            @if i > 0 { " " }
            (part)
        }
        @if nothing { span class="muted" { "not reported" } }
    }
}

/// The page, as a complete HTML document.
pub fn render(data: &StatusData, now: DateTime<Utc>) -> String {
    let mut counts: Vec<(HealthState, usize)> =
        [HealthState::Ok, HealthState::Degraded, HealthState::HalfOpen, HealthState::Down, HealthState::Waiting]
            .map(|h| (h, 0))
            .to_vec();
    for cell in data.rows.iter().filter_map(|r| r.cells.first().and_then(Option::as_ref)) {
        let h = cell.health.state;
        if let Some(c) = counts.iter_mut().find(|(x, _)| *x == h) {
            c.1 += 1;
        }
    }
    let region = Text(&data.region);
    let targets = data.rows.iter().filter(|r| r.cells.first().is_some_and(Option::is_some)).count();
    let others = match data.regions.len() {
        0 | 1 => String::new(),
        n => format!(" · {} other region{} sharing storage", n - 1, if n > 2 { "s" } else { "" }),
    };
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8"; "\n"
                meta name="viewport" content="width=device-width, initial-scale=1"; "\n"
                meta http-equiv="refresh" content=(data.refresh_s); "\n"
                meta name="color-scheme" content="light dark"; "\n"
                title { "vigil · " (region) } "\n"
                // A constant of this file: nothing in it comes from outside.
                style { (PreEscaped(STYLE)) }
            }
            "\n"
            body {
                "\n"
                header {
                    h1 { "vigil " span class="muted" { "· " (region) } } "\n"
                    p class="summary" {
                        @for (h, n) in counts.iter().filter(|(h, n)| *n > 0 || *h == HealthState::Ok) {
                            span class={ "pill " (h.as_str()) } { (n) " " (h.as_str()) }
                        }
                    }
                    "\n"
                    p class="meta" {
                        (targets) " targets in " (region) (others) " · updated "
                        time datetime=(now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) { (stamp(now)) }
                        " · reloads every " (data.refresh_s) " s"
                        @if let Some(f) = data.failover_factor {
                            " · degraded = last TTFB or TTFT over " (f) "× the P95 of the last "
                            (window_span(data.trend_hours))
                        }
                    }
                    "\n"
                }
                "\n"
                main {
                    "\n"
                    @if !data.drills.is_empty() { (drills_html(&data.drills, now)) }
                    @if let Some(plan) = &data.probe_plan { (probe_plan_html(plan)) }
                    @if !data.credits.is_empty() { (credits_html(&data.credits, now)) }
                    @if !data.providers.is_empty() { (providers_html(&data.providers, now)) }
                    (targets_html(data, now))
                    @if !data.canary.is_empty() { (canary_html(&data.canary, now)) }
                    @if !data.checks.is_empty() { (checks_html(&data.checks, now)) }
                    @if !data.workloads.is_empty() { (workloads_html(&data.workloads)) }
                }
                "\n"
                footer {
                    "vigil · region " (region) " · " a href="/metrics" { "/metrics" }
                    " · " a href="/v1/thresholds" { "/v1/thresholds" }
                    " · " a href="/v1/targets" { "/v1/targets" }
                }
                "\n"
            }
        }
        "\n"
    };
    page.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::http::status_data::Credit;
    use chrono::TimeZone;

    use crate::io::markup::hostile::{ESCAPED, HOSTILE};

    #[test]
    fn a_cell_shows_each_allowance_and_marks_low_headroom() {
        use crate::vocab::ratelimit::{Allowance, Headroom};
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).single().expect("time");
        let h = Headroom {
            requests: Some(Allowance { remaining: Some(4), limit: Some(100), reset_at: Some(now) }),
            tokens: Some(Allowance { remaining: Some(900), limit: None, reset_at: None }),
        };
        let cell = |low_fraction| Cell {
            ratelimit: crate::decide::ratelimit::HeadroomView::of(&h, now, low_fraction).map(std::sync::Arc::new),
            ..Cell::default()
        };
        let data = StatusData::default();
        let low = cell_html(&cell(0.1), &data, now).into_string();
        assert!(low.contains("requests 4/100 (4 %), resets 12:20:00 UTC · tokens 900 left"), "{low}");
        assert!(low.contains(r#"class="rl low""#) && low.contains("rate limit low"), "{low}");
        let fine = cell_html(&cell(0.01), &data, now).into_string();
        assert!(fine.contains(r#"class="rl""#) && !fine.contains("rate limit low"), "{fine}");
        assert!(!cell_html(&Cell::default(), &data, now).into_string().contains("class=\"rl"), "none sent, none shown");
    }

    #[test]
    fn a_hostile_provider_name_is_escaped_everywhere_it_shows() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).single().expect("time");
        let data = StatusData {
            region: "eu".into(),
            regions: vec!["eu".into()],
            rows: vec![StatusRow {
                provider: HOSTILE.into(),
                model: HOSTILE.into(),
                route: Some(HOSTILE.into()),
                cells: vec![Some(Cell::default())],
                trend: vec![],
            }],
            credits: vec![Credit { provider: HOSTILE.into(), min_usd: 1.0, reading: None }],
            providers: vec![ProviderStatus {
                provider: HOSTILE.into(),
                page_url: format!("https://example.invalid/{HOSTILE}"),
                indicator: HOSTILE.into(),
                ..ProviderStatus::default()
            }],
            failover_factor: Some(2.0),
            refresh_s: 30,
            trend_hours: 168,
            drills: vec![crate::vocab::drill::Drill {
                id: uuid::Uuid::nil(),
                chain: HOSTILE.into(),
                target: HOSTILE.into(),
                region: HOSTILE.into(),
                started_at: now,
                until: now + chrono::Duration::minutes(10),
                ended_at: None,
            }],
            workloads: vec![(
                HOSTILE.into(),
                crate::decide::workload::WorkloadDeadline {
                    input_tokens: 8000,
                    runs: 3,
                    errors: 1,
                    ttft_ms: Default::default(),
                    failover_ttft_ms: Some(4000.0),
                    provisional: true,
                    ttft_p95_upper_ms: Some(2000.0),
                },
            )],
            ..StatusData::default()
        };
        let html = render(&data, now);
        assert!(html.contains("<h2>Drills</h2>"), "{html}");
        assert!(html.contains("<h2>Long-prompt probes</h2>") && html.contains("4000 ms"), "{html}");
        assert!(!html.contains("<script") && !html.contains("'x'"), "{html}");
        assert!(html.contains(&format!(r#"<span class="provider">{ESCAPED}</span>"#)), "{html}");
        assert!(html.contains(&format!(r#"<span class="route">via {ESCAPED}</span>"#)), "{html}");
        assert!(html.contains(&format!(r#"<a href="https://example.invalid/{ESCAPED}">{ESCAPED}</a>"#)), "{html}");
        // Target provider, model, route; credit row; providers' row: link, name, indicator, status.
        assert!(html.matches(ESCAPED).count() >= 11, "{html}");
    }
}
