//! The weekly summary from a seeded fortnight of samples, breaker transitions, alerts and balance
//! readings for two providers in two regions, on a real SQLite file and a real PostgreSQL
//! database: every figure in the HTML is checked against a computation of its own over a query
//! of the same samples, the charts decode as PNGs, and the email goes through a real SMTP server.

use crate::support::smtp_server;
use crate::support::store as store_support;

use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use rand::{RngExt, SeedableRng};
use smtp_server::SmtpServer;
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use store_support::Fixture;
use tokio_util::sync::CancellationToken;
use vigil::config::Config;
use vigil::decide::alert::{Alert, AlertKind, AlertStatus, Notification};
use vigil::io::notify::outbox::items_for;
use vigil::io::store::{SampleQuery, Store};
use vigil::io::weekly::html::ImageSource;
use vigil::io::weekly::{self, mail};
use vigil::run::weekly_job;
use vigil::vocab::records::{BalanceReading, BreakerTransition};
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

const EU: &str = "eu-west-1";
const US: &str = "us-east-1";

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T09:00:00Z").expect("time").with_timezone(&Utc)
}

fn targets() -> Vec<(Target, f64)> {
    let t = |provider: &str, model: &str, route: Option<&str>, region: &str| {
        Target::new(provider.into(), model.into(), route.map(Into::into), region.into())
    };
    // Bases far enough apart that each line keeps its own pixels on the chart.
    vec![
        (t("openai", "gpt-4o-mini", None, EU), 300.0),
        (t("openai", "gpt-4o-mini", None, US), 420.0),
        (t("openrouter", "meta-llama/llama-3-70b-instruct", Some("DeepInfra"), EU), 180.0),
        (t("openrouter", "meta-llama/llama-3-70b-instruct", Some("DeepInfra"), US), 260.0),
        (t("openrouter", "meta-llama/llama-3-70b-instruct", Some("Together"), EU), 520.0),
        (t("openrouter", "meta-llama/llama-3-70b-instruct", Some("Together"), US), 800.0),
    ]
}

/// Two weeks (and a bit either side) of a probe every 30 minutes per target.
async fn seed_samples(store: &dyn Store, now: DateTime<Utc>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261130);
    let mut batch = Vec::new();
    for (target, base) in targets() {
        for step in -2..=(15 * 48) {
            let at = now - Duration::minutes(30 * step);
            let this_week = at > now - Duration::days(7);
            // One target got slower this week, another faster.
            let factor = match (target.route.as_deref(), target.region.as_str(), this_week) {
                (Some("Together"), EU, true) => 1.25,
                (None, US, true) => 0.9,
                _ => 1.0,
            };
            let mut s = Sample::new(target.clone(), at, at);
            s.ttft_ms = Some((base * factor + rng.random_range(0.0..30.0_f64)).round());
            s.tokens_per_s = Some(60.0);
            let failure_rate =
                if target.provider == "openai" && target.region == EU && this_week { 0.10 } else { 0.03 };
            if rng.random_bool(failure_rate) {
                s.outcome = if rng.random_bool(0.5) { Outcome::ServerError } else { Outcome::Timeout };
                // A failure's timing must never reach the percentiles.
                s.ttft_ms = Some(99_999.0);
            }
            batch.push(s);
        }
    }
    assert_eq!(store.insert_samples(&batch).await.expect("insert samples"), batch.len() as u64);
}

fn transition(provider_target: &Target, from: &str, to: &str, at: DateTime<Utc>) -> BreakerTransition {
    BreakerTransition {
        target: provider_target.clone(),
        from_state: from.parse().expect("breaker state"),
        to_state: to.parse().expect("breaker state"),
        at,
        reason: "3 failed probes in 120s: server_error, server_error, timeout".into(),
    }
}

fn notification(key: &str, region: &str, provider: &str, kinds: &[AlertKind], at: DateTime<Utc>) -> Notification {
    let alerts = kinds
        .iter()
        .map(|k| {
            let mut a = Alert::new(*k, region, provider, None, format!("{k} seeded"));
            a.since = at;
            a
        })
        .collect();
    Notification::firing(key, region, provider, alerts, at)
}

/// Breaker transitions, alerts (each on two channels) and balance readings, with ones that must
/// not count: outside the week, not an opening, reminders, resolves, tests.
async fn seed_events(store: &dyn Store, now: DateTime<Utc>) {
    let ago = |h: i64| now - Duration::hours(h);
    let all = targets();
    let (openai_eu, openai_us, deepinfra_eu) = (&all[0].0, &all[1].0, &all[2].0);
    for t in [
        transition(openai_eu, "closed", "open", ago(100)),
        transition(openai_eu, "open", "half_open", ago(99)),
        transition(openai_eu, "half_open", "open", ago(98)),
        transition(openai_eu, "half_open", "closed", ago(97)),
        transition(openai_eu, "closed", "open", ago(20)),
        transition(openai_eu, "closed", "open", ago(200)),
        transition(openai_us, "closed", "open", ago(5)),
        transition(deepinfra_eu, "closed", "open", ago(7 * 24 + 1)),
    ] {
        store.append_transition(&t).await.expect("transition");
    }

    let mut notes = vec![
        notification("a", EU, "openai", &[AlertKind::Errors, AlertKind::BreakerOpen], ago(100)),
        notification("b", US, "openrouter", &[AlertKind::LatencyDegraded], ago(30)),
        notification("c", EU, "", &[AlertKind::RegionUnhealthy], ago(50)),
        notification("old", EU, "openai", &[AlertKind::Errors], ago(8 * 24)),
    ];
    let mut reminder = notification("d", EU, "openai", &[AlertKind::Errors], ago(90));
    reminder.reminder = true;
    let mut resolved = notification("e", EU, "openai", &[AlertKind::Errors], ago(80));
    resolved.status = AlertStatus::Resolved;
    resolved.alerts[0].status = AlertStatus::Resolved;
    let mut test = notification("f", US, "vigil", &[AlertKind::Errors], ago(10));
    test.test = true;
    notes.extend([reminder, resolved, test]);
    for n in &notes {
        let items = items_for(std::slice::from_ref(n), &["email".into(), "slack".into()], n.created_at);
        store.enqueue(&items).await.expect("enqueue");
    }

    let reading = |provider: &str, region: &str, hours: i64, usd: f64| BalanceReading {
        provider: provider.into(),
        region: region.into(),
        at: ago(hours),
        remaining_usd: usd,
    };
    for r in [
        reading("openai", EU, 9 * 24, 500.0),
        reading("openai", EU, 150, 100.0),
        reading("openai", EU, 100, 90.0),
        reading("openai", EU, 60, 95.0),
        reading("openai", EU, 2, 80.0),
        reading("openai", US, 120, 100.0),
        reading("openai", US, 10, 97.5),
        reading("openrouter", EU, 10, 41.0),
    ] {
        store.insert_balance(&r).await.expect("balance");
    }
}

/// What the report must say for one provider in one region, computed here from a plain query.
#[derive(Debug, PartialEq)]
struct Expected {
    probes: u64,
    p50: String,
    p50_last: String,
    p95: String,
    p95_last: String,
    error_rate: String,
    error_rate_last: String,
}

fn percentile(sorted: &[f64], q: f64) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    format!("{:.0}", sorted[rank.max(1) - 1])
}

async fn expected(store: &dyn Store, provider: &str, region: &str, now: DateTime<Utc>) -> Expected {
    let week = |since: DateTime<Utc>, until: DateTime<Utc>| SampleQuery {
        region: Some(region.into()),
        since: Some(since),
        until: Some(until),
        ..SampleQuery::default()
    };
    let mut figures = Vec::new();
    for (since, until) in [(now - Duration::days(7), now), (now - Duration::days(14), now - Duration::days(7))] {
        let samples: Vec<Sample> = store
            .samples(&week(since, until))
            .await
            .expect("query")
            .into_iter()
            .filter(|s| s.target.provider == provider)
            .collect();
        let mut ok: Vec<f64> = samples.iter().filter(|s| s.outcome == Outcome::Ok).filter_map(|s| s.ttft_ms).collect();
        ok.sort_by(f64::total_cmp);
        let errors = samples.iter().filter(|s| s.outcome != Outcome::Ok).count();
        let rate = format!("{:.2}%", errors as f64 * 100.0 / samples.len() as f64);
        figures.push((samples.len() as u64, percentile(&ok, 0.5), percentile(&ok, 0.95), rate));
    }
    let (this, last) = (&figures[0], &figures[1]);
    Expected {
        probes: this.0,
        p50: this.1.clone(),
        p50_last: last.1.clone(),
        p95: this.2.clone(),
        p95_last: last.2.clone(),
        error_rate: this.3.clone(),
        error_rate_last: last.3.clone(),
    }
}

/// The text of one figure cell of the summary table.
fn cell(html: &str, provider: &str, region: &str, col: &str) -> String {
    let start = html
        .find(&format!("<tr data-provider=\"{provider}\" data-region=\"{region}\">"))
        .unwrap_or_else(|| panic!("no row for {provider} in {region}"));
    let row = &html[start..];
    let row = &row[..row.find("</tr>").expect("row end")];
    let at = row.find(&format!("data-col=\"{col}\"")).unwrap_or_else(|| panic!("no {col} cell"));
    let rest = &row[at..];
    let open = rest.find('>').expect("cell open") + 1;
    rest[open..rest.find("</td>").expect("cell close")].to_string()
}

fn figures_in(html: &str, provider: &str, region: &str) -> Expected {
    let c = |col| cell(html, provider, region, col);
    Expected {
        probes: c("samples").parse().expect("probes is a number"),
        p50: c("ttft_p50"),
        p50_last: c("ttft_p50_last"),
        p95: c("ttft_p95"),
        p95_last: c("ttft_p95_last"),
        error_rate: c("error_rate"),
        error_rate_last: c("error_rate_last"),
    }
}

/// Events seeded in `seed_events`: (breaker openings, alerts, credit spent) this week.
fn expected_events(provider: &str, region: &str) -> (&'static str, &'static str, &'static str) {
    match (provider, region) {
        // Closed→open 100 h and 20 h ago plus a failed half-open probe; the 200 h one is last week's.
        ("openai", EU) => ("3", "2", "$25.00"),
        ("openai", US) => ("1", "0", "$2.50"),
        ("openrouter", US) => ("0", "1", "-"),
        // DeepInfra's opening was 7 days and an hour ago; one balance reading spends nothing known.
        ("openrouter", EU) => ("0", "0", "-"),
        other => panic!("unexpected row {other:?}"),
    }
}

fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("a valid PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("a valid PNG frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// The legend colours listed under each chart image, in document order.
fn legend_colours(html: &str, chart: usize) -> Vec<[u8; 3]> {
    let start = html.find(&format!("<img id=\"chart-{chart}\"")).expect("chart image");
    let section = &html[start..];
    let section = &section[..section.find("</table>").expect("legend end")];
    section
        .match_indices("background:#")
        .map(|(i, m)| {
            let hex = &section[i + m.len()..i + m.len() + 6];
            let v = u32::from_str_radix(hex, 16).expect("hex colour");
            [(v >> 16) as u8, (v >> 8) as u8, v as u8]
        })
        .collect()
}

fn assert_chart(png_bytes: &[u8], colours: &[[u8; 3]]) {
    let (w, h, rgb) = decode_png(png_bytes);
    assert_eq!((w, h), (weekly::chart::WIDTH, weekly::chart::HEIGHT));
    assert!(!colours.is_empty(), "a legend entry per line");
    for c in colours {
        assert!(rgb.chunks(3).any(|p| p == c), "the line coloured {c:?} in the legend is drawn");
    }
}

async fn seeded(fx: &Fixture) {
    seed_samples(fx.store.as_ref(), now()).await;
    seed_events(fx.store.as_ref(), now()).await;
}

async fn the_summary_matches_a_computation_over_the_same_samples(fx: Fixture) {
    seeded(&fx).await;
    let store = fx.store.as_ref();
    let all = weekly::build(store, None, now()).await.expect("report of every region");
    let rows: Vec<(&str, &str)> = all.rows.iter().map(|r| (r.provider.as_str(), r.region.as_str())).collect();
    assert_eq!(rows, [("openai", EU), ("openai", US), ("openrouter", EU), ("openrouter", US)]);
    let pictures = weekly::chart::pictures(&all).expect("charts");
    let html = weekly::html::document(&all, &pictures, ImageSource::DataUri);
    for (provider, region) in rows {
        assert_eq!(
            figures_in(&html, provider, region),
            expected(store, provider, region, now()).await,
            "{provider} in {region}"
        );
        let (openings, alerts, credit) = expected_events(provider, region);
        assert_eq!(cell(&html, provider, region, "breaker_openings"), openings, "{provider} in {region}");
        assert_eq!(cell(&html, provider, region, "alerts"), alerts, "{provider} in {region}");
        assert_eq!(cell(&html, provider, region, "credit_spent"), credit, "{provider} in {region}");
    }
    let slower = all.rows.iter().find(|r| r.provider == "openrouter" && r.region == EU).expect("row");
    assert!(cell(&html, "openrouter", EU, "ttft_p95_change").starts_with('+'), "Together got slower in {EU}");
    assert_eq!(slower.targets.len(), 2, "both routes pooled");
    assert!(html.contains("region_unhealthy, probe_budget_exceeded): eu-west-1: 1."), "instance-wide alert counted");

    assert_eq!(all.charts.iter().map(|c| c.series.len()).collect::<Vec<_>>(), [2, 4], "a line per target and region");
    for (i, picture) in pictures.iter().enumerate() {
        let src =
            format!("src=\"data:image/png;base64,{}\"", base64::engine::general_purpose::STANDARD.encode(&picture.png));
        assert!(html.contains(&src), "chart {i} is inline in the file");
        assert_chart(&picture.png, &legend_colours(&html, i));
    }

    let eu = weekly::build(store, Some(EU), now()).await.expect("report of one region");
    assert!(eu.rows.iter().all(|r| r.region == EU) && eu.rows.len() == 2, "{:?}", eu.rows);
    assert_eq!(eu.charts.iter().map(|c| c.series.len()).collect::<Vec<_>>(), [1, 2]);
    let eu_html = weekly::html::document(&eu, &weekly::chart::pictures(&eu).expect("charts"), ImageSource::DataUri);
    assert_eq!(figures_in(&eu_html, "openai", EU), expected(store, "openai", EU, now()).await);
    assert!(!eu_html.contains(US), "another region's rows and alerts stay out");
}

store_support::on_both_stores!(the_summary_matches_a_computation_over_the_same_samples);

fn config(fx: &Fixture, smtp_url: Option<&str>, extra: &str) -> Config {
    let mut text = format!("region = \"{EU}\"\n[storage]\nurl = \"{}\"\n{extra}\n", fx.url);
    let mut env = BTreeMap::new();
    if let Some(url) = smtp_url {
        text.push_str(
            "[[alerts.email]]\nsmtp_url_env = \"SMTP_URL\"\nfrom = \"vigil@example.com\"\nto = [\"oncall@example.com\"]\n",
        );
        env.insert("SMTP_URL".to_string(), url.to_string());
    }
    Config::from_toml(&text, &env).expect("valid config")
}

fn recipients(config: &Config) -> Vec<Arc<mail::Recipient>> {
    mail::recipients(&config.alerts.email, &config.report.weekly_to, std::time::Duration::from_secs(5))
        .expect("recipients")
        .into_iter()
        .map(Arc::new)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_email_reaches_a_real_smtp_server_with_inline_charts() {
    if !smtp_server::available() {
        return;
    }
    let fx = Fixture::sqlite().await;
    seeded(&fx).await;
    let server = SmtpServer::start(None);
    let cfg = config(
        &fx,
        Some(&server.url()),
        "[report]\nweekly_to = [\"Platform <platform@example.com>\", \"cto@example.com\"]",
    );
    let report = weekly::build(fx.store.as_ref(), Some(EU), now()).await.expect("report");
    let email = mail::compose(&report).expect("compose");
    let to = recipients(&cfg);
    assert_eq!(to.len(), 1, "weekly_to goes out once, through the first email channel");
    to[0].send(&email).await.expect("accepted by the SMTP server");

    let m = server.message(0).await;
    assert_eq!(m["subject"], "vigil weekly summary: eu-west-1, 2026-11-23 to 2026-11-30");
    assert_eq!(m["rcpt_tos"], serde_json::json!(["platform@example.com", "cto@example.com"]));
    assert_eq!(m["message_id"], "<weekly.20261130T090000Z.eu-west-1@vigil>");
    assert_eq!(m["multiparts"], serde_json::json!(["multipart/alternative", "multipart/related"]));
    let parts = m["parts"].as_array().expect("parts");
    assert_eq!(parts.len(), 2 + report.charts.len(), "text, html and one image per chart");
    assert_eq!(parts[0]["content_type"], "text/plain");
    let text = parts[0]["text"].as_str().expect("text part");
    assert!(text.lines().any(|l| l.starts_with("openai") && l.contains(EU)), "{text}");
    assert_eq!(parts[1]["content_type"], "text/html");
    let html = parts[1]["text"].as_str().expect("html part");
    for provider in ["openai", "openrouter"] {
        assert_eq!(figures_in(html, provider, EU), expected(fx.store.as_ref(), provider, EU, now()).await);
    }
    for (i, part) in parts[2..].iter().enumerate() {
        assert_eq!(part["content_type"], "image/png");
        assert_eq!(part["disposition"], "inline");
        let cid = part["content_id"].as_str().expect("Content-ID");
        let bare = cid.trim_start_matches('<').trim_end_matches('>');
        assert!(html.contains(&format!("src=\"cid:{bare}\"")), "the HTML shows image {cid}");
        assert!(html.contains(&format!("<img id=\"chart-{i}\" src=\"cid:{bare}\"")), "in document order");
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(part["base64"].as_str().expect("data")).expect("b64");
        assert_eq!(part["size"].as_u64(), Some(bytes.len() as u64));
        assert_chart(&bytes, &legend_colours(html, i));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_is_retried_and_arrives_once_the_server_is_up() {
    if !smtp_server::available() {
        return;
    }
    let fx = Fixture::sqlite().await;
    seeded(&fx).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let cfg = config(&fx, Some(&format!("smtp://127.0.0.1:{port}?tls=none")), "");
    let report = weekly::build(fx.store.as_ref(), Some(EU), now()).await.expect("report");
    let email = mail::compose(&report).expect("compose");
    let policy = weekly_job::retry_policy(std::time::Duration::from_secs(3600));
    let t0 = Utc::now();
    let mut delivery = weekly_job::Delivery::new(email, &recipients(&cfg), policy, t0);

    let first = delivery.step(t0).await;
    assert_eq!(first.retrying, ["email"], "nobody listens yet: {first:?}");
    let next = delivery.next_attempt().expect("a retry is planned");
    assert!(next > t0 && next <= t0 + Duration::seconds(60), "first retry within the base backoff: {next}");
    assert_eq!(delivery.step(t0).await, weekly_job::StepReport::default(), "nothing is due before the retry time");

    let server = SmtpServer::start_on(port);
    let second = delivery.step(next).await;
    assert_eq!(second.delivered, ["email"], "{second:?}");
    assert!(delivery.is_done());
    assert_eq!(server.message(0).await["subject"], "vigil weekly summary: eu-west-1, 2026-11-23 to 2026-11-30");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_summary_is_given_up_not_retried() {
    if !smtp_server::available() {
        return;
    }
    let fx = Fixture::sqlite().await;
    let server = SmtpServer::start(Some(("vigil", "right")));
    let cfg = config(&fx, Some(&server.url()), "");
    let report = weekly::build(fx.store.as_ref(), Some(EU), now()).await.expect("an empty week still reports");
    assert!(report.rows.is_empty());
    let mut delivery = weekly_job::Delivery::new(
        mail::compose(&report).expect("compose"),
        &recipients(&cfg),
        weekly_job::retry_policy(std::time::Duration::from_secs(60)),
        Utc::now(),
    );
    let step = delivery.step(Utc::now()).await;
    assert_eq!(step.abandoned, ["email"], "an anonymous sender is refused for good: {step:?}");
    assert!(delivery.is_done());
    assert_eq!(server.received(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_job_sends_its_regions_summary_on_the_cron_schedule() {
    if !smtp_server::available() {
        return;
    }
    let fx = Fixture::sqlite().await;
    seed_samples(fx.store.as_ref(), Utc::now()).await;
    let server = SmtpServer::start(None);
    // Every second, so the test need not wait for a Monday.
    let cfg = config(&fx, Some(&server.url()), "[report]\nweekly = \"* * * * * *\"");
    let stop = CancellationToken::new();
    let job = tokio::spawn(weekly_job::run(fx.store.clone(), cfg, Default::default(), stop.clone()));
    let m = server.message(0).await;
    stop.cancel();
    job.await.expect("the job stops on shutdown");
    assert!(m["subject"].as_str().expect("subject").starts_with("vigil weekly summary: eu-west-1, "), "{m}");
    assert_eq!(m["rcpt_tos"], serde_json::json!(["oncall@example.com"]));
    let html = m["parts"][1]["text"].as_str().expect("html");
    assert!(html.contains("data-region=\"eu-west-1\"") && !html.contains("data-region=\"us-east-1\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_email_channel_the_job_does_nothing_and_returns() {
    let fx = Fixture::sqlite().await;
    let never = CancellationToken::new();
    weekly_job::run(
        fx.store.clone(),
        config(&fx, None, "[report]\nweekly = \"* * * * * *\""),
        Default::default(),
        never.clone(),
    )
    .await;
    weekly_job::run(fx.store.clone(), config(&fx, None, "[report]\nweekly = \"off\""), Default::default(), never).await;
}

fn vigil(dir: &std::path::Path, db: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vigil"));
    cmd.current_dir(dir).env("DATABASE_URL", db).env("VIGIL_REGION", EU).env("VIGIL_LOG", "warn");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vigil_report_weekly_out_writes_a_self_contained_html_file() {
    let fx = Fixture::sqlite().await;
    let now = Utc::now();
    seed_samples(fx.store.as_ref(), now).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.html");
    let run = vigil(dir.path(), &fx.url).args(["report", "--weekly", "--out"]).arg(&out).output().expect("run vigil");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let html = std::fs::read_to_string(&out).expect("the file was written");
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert_eq!(html.matches("src=\"data:image/png;base64,").count(), 2, "both charts inline, nothing linked");
    assert!(!html.contains("cid:"));
    // The binary's clock reads a little later than `now`; with a probe every 30 minutes, any
    // moment in the next half hour selects the same samples as `now` + 1 s.
    let later = now + Duration::seconds(1);
    for provider in ["openai", "openrouter"] {
        assert_eq!(figures_in(&html, provider, EU), expected(fx.store.as_ref(), provider, EU, later).await);
    }
    assert!(!html.contains("data-region=\"us-east-1\""), "the instance's own region by default");

    let all = vigil(dir.path(), &fx.url).args(["report", "--weekly", "--region", "all"]).output().expect("run vigil");
    assert!(all.status.success(), "{}", String::from_utf8_lossy(&all.stderr));
    let stdout = String::from_utf8(all.stdout).expect("utf-8");
    assert!(stdout.starts_with("<!DOCTYPE html>") && stdout.contains("data-region=\"us-east-1\""));

    for bad in [&["report", "--out", "x.html"][..], &["report", "--weekly", "--json"][..]] {
        let run = vigil(dir.path(), &fx.url).args(bad).output().expect("run vigil");
        assert_eq!(run.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&run.stderr));
    }
    let bad_cron = vigil(dir.path(), &fx.url).env("VIGIL_REPORT_WEEKLY", "every monday").arg("check-config").output();
    let bad_cron = bad_cron.expect("run vigil");
    assert_eq!(bad_cron.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_cron.stderr).contains("report.weekly: \"every monday\""));
}
