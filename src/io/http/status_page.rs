//! `GET /`: the status page people open — every target × region with its current state, the
//! last TTFB/TTFT against the baseline, the breaker, a 7-day TTFT trend and credit balances.
//!
//! Server-rendered HTML with inline CSS and inline SVG only (no script, no external asset), so
//! it works offline and on a phone. The handler gathers [`StatusData`] from the published
//! snapshot (this region, and the other regions' latest samples and the credit readings the
//! pipeline read from shared storage) and the trend cache; [`render`] (the markup, in
//! `status_html`) is a pure function of it.

use super::trend::TrendCache;
use super::trend::Trends;
use super::HttpState;
use crate::decide::snapshot::Snapshot;
use crate::io::store::RollupStore;
use crate::vocab::target::{Name, Target};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Duration, Utc};
use std::collections::HashMap;
use std::sync::Arc;

use super::status_data::{Cell, Credit, ShownProbe, StatusData, StatusRow};
use super::status_html::render;

/// Bounds of the automatic reload period (it follows the probe interval in between).
const REFRESH_MIN_S: u64 = 10;
const REFRESH_MAX_S: u64 = 60;

/// What the page needs from the config: this region, the baseline's window and minimum count,
/// the probe interval (the page reloads with it) and the watched credits.
#[derive(Debug, Clone)]
pub struct PageSettings {
    /// This instance's region.
    pub region: String,
    /// `baseline.min_samples_p95`.
    pub min_samples: u64,
    /// `baseline.window`: how far the trend sparklines reach back.
    pub window: std::time::Duration,
    /// `probe.interval`.
    pub interval: std::time::Duration,
    /// Providers whose credit is watched, with their `balance.min_usd`.
    pub credit: Vec<(String, f64)>,
}

/// What the page needs from the config and the trend cache (the rest is in the snapshot).
pub struct StatusPage {
    region: String,
    min_samples: u64,
    refresh_s: u64,
    /// Providers whose credit is watched, with their `balance.min_usd`.
    credit: Vec<(String, f64)>,
    trends: Arc<TrendCache>,
}

impl StatusPage {
    /// The page for `settings`, reading trends from `store` (through the cache).
    pub fn new(settings: PageSettings, store: Arc<dyn RollupStore>) -> Self {
        StatusPage {
            trends: Arc::new(TrendCache::new(store, &settings.region, settings.window)),
            region: settings.region,
            min_samples: settings.min_samples,
            refresh_s: settings.interval.as_secs().clamp(REFRESH_MIN_S, REFRESH_MAX_S),
            credit: settings.credit,
        }
    }

    /// Rows and regions from a snapshot; trends and credits are added by the caller.
    pub fn gather(&self, snap: &Snapshot) -> StatusData {
        let mut data = StatusData {
            region: self.region.clone(),
            regions: vec![self.region.clone()],
            failover_factor: snap.thresholds.as_ref().map(|t| t.failover_factor),
            min_samples: self.min_samples,
            refresh_s: self.refresh_s,
            trend_hours: self.trends.hours(),
            probe_plan: snap.probe_plan.clone(),
            drills: snap.drills.to_vec(),
            ..StatusData::default()
        };
        let mut index: HashMap<(Name, Name, Option<Name>), usize> = HashMap::new();
        for v in &snap.targets {
            let k = &v.key;
            index.insert((k.provider.clone(), k.model.clone(), k.route.clone()), data.rows.len());
            data.rows.push(StatusRow {
                provider: k.provider.clone(),
                model: k.model.clone(),
                route: k.route.clone(),
                cells: vec![Some(Cell {
                    last: v.last_sample.as_deref().map(ShownProbe::from),
                    ttfb: Some(v.baselines.ttfb),
                    ttft: Some(v.baselines.ttft),
                    breaker: Some(v.breaker.clone()),
                    health: v.health.clone(),
                    probe: snap.probe_plan.as_ref().and_then(|p| p.get(&k.target).cloned()),
                    ratelimit: v.ratelimit.clone(),
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
                data.rows.push(StatusRow {
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
            cells[col] = Some(Cell { last: Some(ShownProbe::from(s)), ..Cell::default() });
        }
        // Their health as they published it; a region that published no row shows `waiting`.
        for st in snap.elsewhere_health.iter() {
            let t = &st.target;
            let (Some(&row), Some(&col)) =
                (index.get(&(t.provider.clone(), t.model.clone(), t.route.clone())), column.get(t.region.as_str()))
            else {
                continue;
            };
            if let Some(cell) = data.rows[row].cells.get_mut(col).and_then(Option::as_mut) {
                cell.health = st.health.clone();
            }
        }
        for row in &mut data.rows {
            row.cells.resize(data.regions.len(), None);
        }
        data
    }

    /// Attaches this region's trend to each row.
    pub fn attach_trends(&self, data: &mut StatusData, trends: &Trends) {
        // One string for every row's key, as the rows share theirs.
        let region = Name::from(self.region.as_str());
        for row in &mut data.rows {
            let key = Target::new(row.provider.clone(), row.model.clone(), row.route.clone(), region.clone());
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

/// Each target's long-prompt probe sizes as the last publish built them (target id, size).
fn workloads_of(snap: &Snapshot) -> Vec<(String, crate::decide::workload::WorkloadDeadline)> {
    snap.targets.iter().flat_map(|v| v.workloads.iter().map(|w| (v.key.target.to_string(), w.clone()))).collect()
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
        data.workloads = workloads_of(&snap);
        data
    };
    let trends = page.trends.current(now).await;
    page.attach_trends(&mut data, &trends);
    data.providers = s.provider_status.read().map(|p| p.providers.values().cloned().collect()).unwrap_or_default();
    data.canary = s.canary.latest();
    data.checks = s.golden.latest();
    ([(header::CACHE_CONTROL, "no-store")], Html(render(&data, now))).into_response()
}

#[cfg(test)]
mod tests {
    use super::super::status_html::{cell_html, spark_points, SPARK_H, SPARK_PAD, SPARK_W};
    use super::*;
    use crate::config::Config;
    use crate::decide::baseline::Baseline;
    use crate::decide::breaker::Explanation;
    use crate::decide::health::{self, BreakerView, Deadlines, Failover};
    use crate::vocab::breaker::State as BreakerState;
    use crate::vocab::health::{Health, HealthState};
    use crate::vocab::sample::{Outcome, Sample};
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).single().expect("valid time")
    }

    fn base(count: u64, p95: Option<f64>) -> Option<Baseline> {
        Some(Baseline { count, p50: p95.map(|v| v / 2.0), p95, p99: p95.map(|v| v * 2.0) })
    }

    fn probe(outcome: Outcome, ttfb: Option<f64>, ttft: Option<f64>) -> ShownProbe {
        ShownProbe {
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

    /// A cell of this region, its health judged by the one rule as the monitor judges it.
    fn local(last: Option<ShownProbe>, b: BreakerState) -> Cell {
        let (ttfb, ttft) = (base(1000, Some(150.0)), base(1000, Some(312.0)));
        let rule = Failover { factor: 2.0, provisional_min_samples: 30 };
        let deadlines = Deadlines {
            ttfb: rule.deadline(&ttfb.unwrap_or_default(), None),
            ttft: rule.deadline(&ttft.unwrap_or_default(), None),
        };
        let verdict = last.as_ref().map(|l| {
            let t = Target::new("p".into(), "m".into(), None, "eu".into());
            let mut s = Sample::new(t, l.at, l.at);
            (s.outcome, s.ttfb_ms, s.ttft_ms) = (l.outcome, l.ttfb_ms, l.ttft_ms);
            health::verdict(&s, &deadlines)
        });
        let explained = breaker(b);
        let health = health::judge(
            BreakerView { state: b, reason: explained.reason.as_deref() },
            verdict.as_ref(),
            &[],
            false,
            None,
            chrono::Utc::now(),
        );
        Cell { last, ttfb, ttft, breaker: Some(explained), health, probe: None, ratelimit: None }
    }

    fn data(rows: Vec<StatusRow>, regions: &[&str]) -> StatusData {
        StatusData {
            region: regions[0].into(),
            regions: regions.iter().map(|r| r.to_string()).collect(),
            rows,
            credits: Vec::new(),
            failover_factor: Some(2.0),
            min_samples: 300,
            refresh_s: 30,
            trend_hours: 168,
            providers: Vec::new(),
            probe_plan: None,
            canary: Vec::new(),
            checks: Vec::new(),
            drills: Vec::new(),
            workloads: Vec::new(),
        }
    }

    fn row(provider: &str, model: &str, cells: Vec<Option<Cell>>) -> StatusRow {
        StatusRow {
            provider: provider.into(),
            model: model.into(),
            route: Some("DeepInfra".into()),
            cells,
            trend: Vec::new(),
        }
    }

    #[test]
    fn each_cell_shows_the_health_it_was_given_and_marks_the_metric_over() {
        let shown = |c: &Cell| {
            let html = cell_html(c, &data(vec![], &["eu"]), now()).into_string();
            (c.health.state, html)
        };
        let (state, html) = shown(&local(Some(probe(Outcome::Ok, Some(100.0), Some(625.0))), BreakerState::Closed));
        assert_eq!(state, HealthState::Degraded, "625 ms > 2 × 312 ms");
        assert!(
            html.contains(r#"<span class="pill degraded" title="ttft p95 2.0x baseline">degraded</span>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<b class="v over">625 ms</b>"#) && html.contains(r#"<b class="v">100 ms</b>"#),
            "{html}"
        );
        let (state, _) = shown(&local(Some(probe(Outcome::Ok, Some(300.0), Some(624.0))), BreakerState::Closed));
        assert_eq!(state, HealthState::Ok, "at the limit is not over it");
        let (state, html) = shown(&local(Some(probe(Outcome::Ok, Some(10.0), Some(10.0))), BreakerState::Open));
        assert_eq!(state, HealthState::Down, "an open breaker is down whatever the last probe");
        assert!(html.contains(r#"title="breaker open: 3 failed probes in 120s: server_error""#), "{html}");
        let (state, html) = shown(&local(None, BreakerState::Closed));
        assert_eq!(state, HealthState::Waiting);
        assert!(html.contains(r#"<span class="pill waiting" title="not probed yet">waiting</span>"#), "{html}");
        // Whatever the cell's numbers, the page shows the judgement it was handed.
        let mut handed = local(Some(probe(Outcome::Ok, Some(100.0), Some(300.0))), BreakerState::Closed);
        handed.health =
            Health { state: HealthState::Degraded, reason: Some("judged elsewhere".into()), ..Health::default() };
        assert!(shown(&handed).1.contains(r#"<span class="pill degraded" title="judged elsewhere">"#));
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
        assert_eq!(
            crate::io::markup::escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
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
        let there = Cell {
            last: Some(probe(Outcome::Ok, Some(90.0), Some(250.0))),
            health: Health { state: HealthState::Ok, ..Health::default() },
            ..Cell::default()
        };
        let rows = vec![
            row(
                "a",
                "m",
                vec![Some(local(Some(probe(Outcome::Ok, Some(1.0), Some(1.0))), BreakerState::Closed)), Some(there)],
            ),
            row(
                "b",
                "m",
                vec![
                    None,
                    Some(Cell {
                        last: Some(probe(Outcome::Timeout, None, None)),
                        health: Health { state: HealthState::Down, ..Health::default() },
                        ..Cell::default()
                    }),
                ],
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
        use crate::vocab::provider_status::{ProviderComponent, ProviderIncident, ProviderStatus};
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
        let store = crate::io::store::open(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .expect("open sqlite");
        let text = "region = \"eu\"\n[probe]\ninterval = \"5s\"\ntimeout = \"5s\"\n[baseline]\nmin_samples_p95 = 50\n";
        let config = Config::from_toml(text, &std::collections::BTreeMap::new()).expect("valid config");
        let page = StatusPage::new(crate::run::app::page_settings(&config), store);
        let t = |route: &str, region: &str| Target::new("p".into(), "m".into(), Some(route.into()), region.into());
        let view = |target: Target, sample: Option<Sample>| crate::decide::snapshot::TargetView {
            key: crate::vocab::target::TargetKey::from(&target),
            region: target.region.clone(),
            last_sample: sample.map(Arc::new),
            baselines: crate::decide::snapshot::ViewBaselines {
                ttft: Baseline { count: 7, ..Baseline::default() },
                ..Default::default()
            },
            probes: 0,
            errors: 0,
            breaker: breaker(BreakerState::Closed),
            health: Health {
                state: HealthState::Ok,
                flapping: target.route.as_deref() == Some("B"),
                ..Health::default()
            },
            flapping: target.route.as_deref() == Some("B"),
            ratelimit: None,
            workloads: Vec::new(),
        };
        let mut seen = Sample::new(t("A", "eu"), now(), now());
        seen.ttft_ms = Some(210.0);
        let snap = Snapshot {
            thresholds: None,
            targets: vec![Arc::new(view(t("A", "eu"), Some(seen))), Arc::new(view(t("B", "eu"), None))],
            elsewhere: Arc::new(vec![
                Sample::new(t("A", "us"), now(), now()),
                Sample::new(t("C", "ap"), now(), now()),
                Sample::new(t("B", "ap"), now(), now()),
            ]),
            elsewhere_health: Arc::new(vec![crate::vocab::records::TargetStatus {
                target: t("A", "us"),
                health: Health {
                    state: HealthState::Degraded,
                    reason: Some("ttft p95 3.1x baseline".into()),
                    ..Health::default()
                },
                over_latency: true,
                breaker: BreakerState::Closed,
                updated_at: now(),
            }]),
            credits: Default::default(),
            flapping: Default::default(),
            probe_plan: None,
            drills: Default::default(),
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
        assert!(d.rows[1].cells[0].as_ref().is_some_and(|c| c.health.flapping) && !a.health.flapping, "B flaps here");
        let us = d.rows[0].cells[2].as_ref().expect("A in us");
        assert_eq!(us.health.state, HealthState::Degraded, "another region's cell shows the health it published");
        let ap = d.rows[1].cells[1].as_ref().expect("B in ap");
        assert_eq!(ap.health.state, HealthState::Waiting, "a region that published no row is waiting, not ok");
        let html = cell_html(d.rows[1].cells[0].as_ref().expect("B here"), &d, now()).into_string();
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
        let store = crate::io::store::open(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .expect("open sqlite");
        let mut text = String::from("region = \"eu\"\n");
        for (name, min_usd) in [("a", 5.0), ("b", 1.0), ("c", 2.0)] {
            text += &format!(
                "[[provider]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                 api_key_env = \"K\"\nmodels = [\"m\"]\nbalance = {{ min_usd = {min_usd:?} }}\n"
            );
        }
        let env = std::collections::BTreeMap::from([("K".to_string(), "sk-test-page".to_string())]);
        let config = Config::from_toml(&text, &env).expect("valid config");
        let page = StatusPage::new(crate::run::app::page_settings(&config), store);
        let reading = |provider: &str, hours: i64, usd: f64| crate::vocab::records::BalanceReading {
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
