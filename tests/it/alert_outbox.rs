//! The durable outbox on real stores (an SQLite file and a throw-away PostgreSQL database)
//! delivering to real HTTP receivers on loopback: outages, rate limits, hangs, rejections,
//! deadlines and restarts lose nothing and deliver each alert once.

use crate::support::alert_receiver as receiver;
use crate::support::store as store_support;
use crate::support::until;

use chrono::{DateTime, Utc};
use receiver::{Receiver, Reply};
use secrecy::SecretString;
use std::sync::Arc;
use std::time::Duration;
use store_support::Fixture;
use vigil::config::{PagerDutyConfig, SlackConfig, WebhookConfig};
use vigil::decide::alert::rules::{AlertEngine, BaselineP95, BreakerChange, Elsewhere, Round, RoundProbe};
use vigil::decide::alert::settings::RuleConfig;
use vigil::decide::alert::{Alert, AlertKind, Notification};
use vigil::io::metrics::Metrics;
use vigil::io::notify::notifier::Notifier;
use vigil::io::notify::outbox::{enqueue, item_id, Outbox, OutboxConfig};
use vigil::io::notify::pagerduty::PagerDutyNotifier;
use vigil::io::notify::slack::SlackNotifier;
use vigil::io::notify::webhook::WebhookNotifier;
use vigil::io::store::Store;
use vigil::vocab::breaker::State;
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z").expect("time").with_timezone(&Utc)
}

fn after(secs: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(secs)
}

const HOUR: i64 = 3600;

fn target() -> Target {
    target_in("eu-west-1")
}

fn target_in(region: &str) -> Target {
    Target::new("openrouter".into(), "m".into(), None, region.into())
}

fn note(key: &str) -> Notification {
    let mut a =
        Alert::new(AlertKind::Errors, "eu-west-1", "openrouter", Some(&target()), "2 consecutive failed probes".into());
    a.since = t0();
    Notification::firing(key, "eu-west-1", "openrouter", vec![a], t0())
}

fn webhook(r: &Receiver, timeout: Duration) -> Arc<dyn Notifier> {
    let cfg = WebhookConfig {
        name: "webhook".into(),
        url: SecretString::from(r.url("/hook")),
        secret: Some(SecretString::from("whsec-test".to_string())),
    };
    Arc::new(WebhookNotifier::new(&cfg, timeout).expect("webhook"))
}

fn slack(r: &Receiver) -> Arc<dyn Notifier> {
    let cfg = SlackConfig { name: "slack".into(), webhook_url: SecretString::from(r.url("/services/T/B/X")) };
    Arc::new(SlackNotifier::new(&cfg, Duration::from_secs(5)).expect("slack"))
}

fn pagerduty(r: &Receiver) -> Arc<dyn Notifier> {
    let cfg = PagerDutyConfig {
        name: "pagerduty".into(),
        routing_key: SecretString::from("pd-routing-key-test".to_string()),
        events_url: r.url("/v2/enqueue").parse().expect("url"),
    };
    Arc::new(PagerDutyNotifier::new(&cfg, Duration::from_secs(5)).expect("pagerduty"))
}

fn outbox(store: &Arc<dyn Store>, channels: Vec<Arc<dyn Notifier>>, deadline: Duration) -> Outbox {
    counted(store, channels, deadline).0
}

/// An outbox and the metrics it counts into.
fn counted(store: &Arc<dyn Store>, channels: Vec<Arc<dyn Notifier>>, deadline: Duration) -> (Outbox, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new("eu-west-1").expect("metrics"));
    (Outbox::new(store.clone(), channels, OutboxConfig::with_deadline(deadline), metrics.clone()), metrics)
}

/// The value of one exported series (`name{labels}` as rendered), if it is exported.
fn series(m: &Metrics, series: &str) -> Option<f64> {
    m.render().lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn keys(r: &Receiver) -> Vec<String> {
    r.requests().iter().map(|q| q.header("idempotency-key").expect("idempotency key")).collect()
}

async fn each_channel_gets_the_alert_once_even_when_enqueued_twice(fx: Fixture) {
    let (s, p, w) = (
        Receiver::start(Reply::new(200, "ok")).await,
        Receiver::start(Reply::new(202, "{}")).await,
        Receiver::start(Reply::new(200, "")).await,
    );
    let (ob, m) = counted(
        &fx.store,
        vec![slack(&s), pagerduty(&p), webhook(&w, Duration::from_secs(5))],
        Duration::from_secs(86400),
    );
    let n = [note("a")];
    assert_eq!(enqueue(fx.store.as_ref(), &n, &ob.channels(), t0()).await.expect("enqueue"), 3);
    enqueue(fx.store.as_ref(), &n, &ob.channels(), after(1)).await.expect("enqueue again");
    assert_eq!(fx.store.outbox_depth().await.expect("depth"), 3);
    let r = ob.deliver_pending(after(2)).await.expect("step");
    assert_eq!((r.delivered, r.retried, r.abandoned, r.depth), (3, 0, 0, 0));
    let r = ob.deliver_pending(after(HOUR)).await.expect("step");
    assert_eq!(r.delivered, 0);
    assert_eq!((s.requests().len(), p.requests().len(), w.requests().len()), (1, 1, 1));
    assert_eq!(keys(&w), [item_id(&n[0], "webhook").to_string()]);
    for ch in ["slack", "pagerduty", "webhook"] {
        let sent = format!(r#"vigil_alerts_total{{channel="{ch}",kind="errors",region="eu-west-1"}}"#);
        assert_eq!(series(&m, &sent), Some(1.0), "{ch}");
    }
    assert_eq!(series(&m, r#"vigil_outbox_depth{region="eu-west-1"}"#), Some(0.0));
}

async fn a_receiver_down_for_a_while_gets_the_alert_once_after_it_recovers(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    w.script([Reply::new(500, "down"), Reply::new(503, "still down")]);
    let (ob, m) = counted(&fx.store, vec![webhook(&w, Duration::from_secs(5))], Duration::from_secs(86400));
    enqueue(fx.store.as_ref(), &[note("b")], &ob.channels(), t0()).await.expect("enqueue");
    assert_eq!(ob.deliver_pending(t0()).await.expect("step").retried, 1);
    let r = ob.deliver_pending(t0()).await.expect("step");
    assert_eq!((r.delivered, r.retried, r.depth), (0, 0, 1), "not due again before its backoff, still queued");
    assert_eq!(w.requests().len(), 1);
    assert_eq!(ob.deliver_pending(after(HOUR)).await.expect("step").retried, 1);
    let r = ob.deliver_pending(after(2 * HOUR)).await.expect("step");
    assert_eq!((r.delivered, r.depth), (1, 0));
    assert_eq!(ob.deliver_pending(after(3 * HOUR)).await.expect("step").delivered, 0);
    assert_eq!(w.acknowledged().len(), 1, "exactly one accepted delivery");
    let k = keys(&w);
    assert_eq!(k.len(), 3);
    assert!(k.iter().all(|x| *x == k[0]), "every retry carries the same idempotency key: {k:?}");
    assert_eq!(series(&m, r#"vigil_alert_delivery_failures_total{channel="webhook",region="eu-west-1"}"#), Some(2.0));
    assert_eq!(series(&m, r#"vigil_alerts_total{channel="webhook",kind="errors",region="eu-west-1"}"#), Some(1.0));
    assert_eq!(series(&m, r#"vigil_alerts_abandoned_total{channel="webhook",region="eu-west-1"}"#), Some(0.0));
}

async fn retry_after_is_honoured(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    w.script([Reply::new(429, "slow down").header("Retry-After", "600")]);
    let ob = outbox(&fx.store, vec![webhook(&w, Duration::from_secs(5))], Duration::from_secs(86400));
    enqueue(fx.store.as_ref(), &[note("c")], &ob.channels(), t0()).await.expect("enqueue");
    assert_eq!(ob.deliver_pending(t0()).await.expect("step").retried, 1);
    // The first backoff is at most 5 s: only Retry-After keeps it from being due here.
    assert_eq!(ob.deliver_pending(after(300)).await.expect("step").delivered, 0);
    assert_eq!(w.requests().len(), 1);
    assert_eq!(ob.deliver_pending(after(601)).await.expect("step").delivered, 1);
    assert_eq!(w.acknowledged().len(), 1);
}

async fn a_hanging_receiver_times_out_and_the_retry_lands_once(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    w.script([Reply::hang(Duration::from_secs(3))]);
    let ob = outbox(&fx.store, vec![webhook(&w, Duration::from_millis(300))], Duration::from_secs(86400));
    enqueue(fx.store.as_ref(), &[note("d")], &ob.channels(), t0()).await.expect("enqueue");
    assert_eq!(ob.deliver_pending(t0()).await.expect("step").retried, 1, "the client gave up on the hang");
    assert_eq!(ob.deliver_pending(after(HOUR)).await.expect("step").delivered, 1);
    assert_eq!(w.acknowledged().len(), 1);
    let k = keys(&w);
    assert_eq!(k.len(), 2);
    assert_eq!(k[0], k[1], "the receiver can drop the repeat by its idempotency key");
}

async fn a_permanent_rejection_is_abandoned_and_recorded(fx: Fixture) {
    let s = Receiver::start(Reply::new(200, "ok")).await;
    s.script([Reply::new(410, "channel_is_archived")]);
    let (ob, m) = counted(&fx.store, vec![slack(&s)], Duration::from_secs(86400));
    enqueue(fx.store.as_ref(), &[note("e")], &ob.channels(), t0()).await.expect("enqueue");
    let r = ob.deliver_pending(t0()).await.expect("step");
    assert_eq!((r.abandoned, r.depth), (1, 0));
    let r = ob.deliver_pending(after(24 * HOUR)).await.expect("step");
    assert_eq!((r.delivered, r.retried, r.abandoned, r.depth), (0, 0, 0, 0));
    assert_eq!(s.requests().len(), 1);
    assert_eq!(series(&m, r#"vigil_alerts_abandoned_total{channel="slack",region="eu-west-1"}"#), Some(1.0));
}

async fn delivery_gives_up_only_after_the_deadline(fx: Fixture) {
    let w = Receiver::start(Reply::new(503, "maintenance")).await;
    let ob = outbox(&fx.store, vec![webhook(&w, Duration::from_secs(5))], Duration::from_secs(HOUR as u64));
    enqueue(fx.store.as_ref(), &[note("f")], &ob.channels(), t0()).await.expect("enqueue");
    let mut abandoned_at = None;
    for step in 0..12 {
        let now = after(step * 10 * 60);
        let r = ob.deliver_pending(now).await.expect("step");
        if r.abandoned == 1 {
            abandoned_at = Some(now);
            break;
        }
    }
    let at = abandoned_at.expect("abandoned within the steps");
    assert!(at >= after(HOUR), "not before the deadline: {at}");
    assert!(w.requests().len() >= 2, "kept trying until then");
    assert_eq!(fx.store.outbox_depth().await.expect("depth"), 0);
}

async fn an_unconfigured_channel_is_abandoned(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let ob = outbox(&fx.store, vec![webhook(&w, Duration::from_secs(5))], Duration::from_secs(86400));
    enqueue(fx.store.as_ref(), &[note("g")], &["email-old".to_string()], t0()).await.expect("enqueue");
    assert_eq!(ob.deliver_pending(t0()).await.expect("step").abandoned, 1);
    assert!(w.requests().is_empty());
}

async fn a_restart_loses_nothing_and_sends_nothing_twice(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    w.script([Reply::hang(Duration::from_secs(3))]);
    {
        let first = outbox(&fx.store, vec![webhook(&w, Duration::from_millis(300))], Duration::from_secs(86400));
        enqueue(fx.store.as_ref(), &[note("h")], &first.channels(), t0()).await.expect("enqueue");
        assert_eq!(first.deliver_pending(t0()).await.expect("step").retried, 1);
    }
    // A new process: a fresh connection to the same database and a new worker.
    let reopened = vigil::io::store::open(&fx.url).await.expect("reopen store");
    let second = outbox(&reopened, vec![webhook(&w, Duration::from_secs(5))], Duration::from_secs(86400));
    assert_eq!(reopened.outbox_depth().await.expect("depth"), 1, "the undelivered alert survived");
    assert_eq!(second.deliver_pending(after(HOUR)).await.expect("step").delivered, 1);
    drop(second);
    let third = outbox(&reopened, vec![webhook(&w, Duration::from_secs(5))], Duration::from_secs(86400));
    assert_eq!(third.deliver_pending(after(2 * HOUR)).await.expect("step").delivered, 0);
    assert_eq!(w.acknowledged().len(), 1);
    let k = keys(&w);
    assert_eq!(k.len(), 2);
    assert_eq!(k[0], k[1]);
}

fn probe(s: &Sample) -> RoundProbe<'_> {
    RoundProbe { sample: s, baseline: BaselineP95::default(), elsewhere: Elsewhere::default() }
}

fn failing(t: &Target, when: DateTime<Utc>) -> Sample {
    let mut s = Sample::new(t.clone(), when, when);
    s.outcome = Outcome::ServerError;
    s
}

async fn engine_state_and_outbox_survive_a_restart_through_the_store(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let rules = RuleConfig { daily_budget_usd: 5.0, ..RuleConfig::with_defaults("eu-west-1") };
    let t = target();
    let mut engine =
        AlertEngine::restore(rules.clone(), fx.store.load_alert_state("eu-west-1").await.expect("load").as_ref());
    let ob = outbox(&fx.store, vec![webhook(&w, Duration::from_secs(5))], Duration::from_secs(86400));
    for m in 0..2 {
        let s = failing(&t, after(m * 60));
        let ns = engine.evaluate(&Round { probes: vec![probe(&s)], ..Round::default() }, after(m * 60));
        enqueue(fx.store.as_ref(), &ns, &ob.channels(), after(m * 60)).await.expect("enqueue");
        fx.store.save_alert_state("eu-west-1", &engine.state_json().expect("state")).await.expect("save");
    }
    assert_eq!(ob.deliver_pending(after(120)).await.expect("step").delivered, 1);
    // Restart: the engine comes back from storage and does not fire the same alert again.
    let mut engine = AlertEngine::restore(rules, fx.store.load_alert_state("eu-west-1").await.expect("load").as_ref());
    assert_eq!(engine.firing().len(), 1);
    let s = failing(&t, after(180));
    assert!(engine.evaluate(&Round { probes: vec![probe(&s)], ..Round::default() }, after(180)).is_empty());
    let body = w.requests()[0].json();
    assert_eq!(body["alerts"][0]["kind"], "errors");
    assert_eq!(body["alerts"][0]["target"], "openrouter/m");
}

/// An engine of `region` seeing the shared target fail (or recover) at `secs`.
fn shared_round(engine: &mut AlertEngine, region: &str, ok: bool, secs: i64) -> Vec<Notification> {
    let t = target_in(region);
    let mut s = Sample::new(t, after(secs), after(secs));
    s.outcome = if ok { Outcome::Ok } else { Outcome::ServerError };
    engine.evaluate(&Round { probes: vec![probe(&s)], ..Round::default() }, after(secs))
}

fn shared_outbox(fx: &Fixture, w: &Receiver, region: &str) -> Outbox {
    let cfg = OutboxConfig {
        region: Some(region.into()),
        lease_ttl: Duration::from_secs(65),
        ..OutboxConfig::with_deadline(Duration::from_secs(86400))
    };
    let metrics = Arc::new(Metrics::new(region).expect("metrics"));
    Outbox::new(fx.store.clone(), vec![webhook(w, Duration::from_secs(5))], cfg, metrics)
}

/// (status, title) of every webhook delivery.
fn pages(w: &Receiver) -> Vec<(String, String)> {
    w.requests()
        .iter()
        .map(|r| r.json())
        .map(|v| (v["status"].as_str().unwrap_or("").to_string(), v["title"].as_str().unwrap_or("").to_string()))
        .collect()
}

async fn a_global_outage_seen_by_two_regions_pages_once_and_resolves_once(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let (eu, us) = (shared_outbox(&fx, &w, "eu-west-1"), shared_outbox(&fx, &w, "us-east-1"));
    let mut e_eu = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    let mut e_us = AlertEngine::new(RuleConfig::with_defaults("us-east-1"));
    for m in 0..2 {
        for (engine, region) in [(&mut e_eu, "eu-west-1"), (&mut e_us, "us-east-1")] {
            let ns = shared_round(engine, region, false, m * 60);
            enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
        }
    }
    eu.deliver_pending(after(61)).await.expect("eu step");
    us.deliver_pending(after(62)).await.expect("us step");
    let got = pages(&w);
    assert_eq!(got.len(), 1, "one page for both regions: {got:?}");
    assert!(got[0].1.starts_with("[FIRING] openrouter/m: errors (eu-west-1; in 1 of 1 regions)"), "{got:?}");
    assert_eq!(eu.owned_incidents(), vec!["vigil:openrouter:m:".to_string()]);
    assert!(us.owned_incidents().is_empty(), "us records its sighting and sends nothing");
    // The owner recovers first: its resolve waits for us, which still fires.
    for m in 2..5 {
        let ns = shared_round(&mut e_eu, "eu-west-1", true, m * 60);
        enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
        eu.deliver_pending(after(m * 60 + 1)).await.expect("eu step");
        let ns = shared_round(&mut e_us, "us-east-1", false, m * 60);
        enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
        us.deliver_pending(after(m * 60 + 2)).await.expect("us step");
    }
    // us's sighting came after the page (which knew of no other region): the scope widened.
    let got = pages(&w);
    assert_eq!(got.len(), 2, "no resolve while us still fires, one update for the wider scope: {got:?}");
    assert!(got[1].1.starts_with("[UPDATE] openrouter/m: errors (eu-west-1; in 2 of 2 regions)"), "{got:?}");
    assert_eq!(us.owned_incidents(), vec!["vigil:openrouter:m:".to_string()], "us took the released lease");
    for m in 5..8 {
        let ns = shared_round(&mut e_us, "us-east-1", true, m * 60);
        enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
        us.deliver_pending(after(m * 60 + 2)).await.expect("us step");
    }
    let got = pages(&w);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[2].0, "resolved");
    assert!(got[2].1.starts_with("[RESOLVED] openrouter/m: errors (us-east-1; in 0 of 2 regions)"), "{got:?}");
    assert!(fx.store.sightings("vigil:openrouter:m:").await.expect("sightings").is_empty(), "closed");
}

/// An engine of `region` that knows one other region probes the target, failing at `secs` (the
/// breaker opening with it when `breaker_opens`).
fn two_region_round(engine: &mut AlertEngine, region: &str, secs: i64, breaker_opens: bool) -> Vec<Notification> {
    let t = target_in(region);
    let mut s = Sample::new(t.clone(), after(secs), after(secs));
    s.outcome = Outcome::ServerError;
    let probe = RoundProbe {
        sample: &s,
        baseline: BaselineP95::default(),
        elsewhere: Elsewhere { regions: 1, ..Elsewhere::default() },
    };
    let breaker = if breaker_opens {
        vec![BreakerChange { target: t, from: State::Closed, to: State::Open, reason: "2 failed probes".into() }]
    } else {
        Vec::new()
    };
    engine.evaluate(&Round { probes: vec![probe], breaker, ..Round::default() }, after(secs))
}

/// The body of every webhook delivery.
fn bodies(w: &Receiver) -> Vec<serde_json::Value> {
    w.requests().iter().map(|r| r.json()).collect()
}

async fn a_first_page_waits_for_the_other_regions_view_and_says_global(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let (eu, us) = (shared_outbox(&fx, &w, "eu-west-1"), shared_outbox(&fx, &w, "us-east-1"));
    let mut e_eu = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    let mut e_us = AlertEngine::new(RuleConfig::with_defaults("us-east-1"));
    let hook = ["webhook".to_string()];
    for m in 0..2 {
        let ns = two_region_round(&mut e_eu, "eu-west-1", m * 60, false);
        enqueue(fx.store.as_ref(), &ns, &hook, after(m * 60)).await.expect("enqueue");
    }
    let r = eu.deliver_pending(after(61)).await.expect("eu step");
    assert_eq!((r.delivered, r.deferred, r.depth), (0, 1, 1), "the page waits for us: {r:?}");
    assert!(pages(&w).is_empty());
    assert_eq!(eu.owned_incidents(), vec!["vigil:openrouter:m:".to_string()], "eu holds the lease while it waits");
    // us sees it too (its status row was not read yet when eu evaluated): its sighting lands.
    for m in 0..2 {
        let ns = two_region_round(&mut e_us, "us-east-1", m * 60 + 1, false);
        enqueue(fx.store.as_ref(), &ns, &hook, after(m * 60 + 1)).await.expect("enqueue");
    }
    us.deliver_pending(after(62)).await.expect("us step");
    assert!(pages(&w).is_empty(), "us records its sighting and sends nothing");
    eu.deliver_pending(after(63)).await.expect("eu step");
    let got = bodies(&w);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["title"], "[FIRING] openrouter/m: errors (eu-west-1; in 2 of 2 regions)");
    assert_eq!(got[0]["seen"], serde_json::json!({"affected": 2, "regions": 2}));
    assert_eq!(got[0]["alerts"][0]["scope"], serde_json::json!({"scope": "global", "affected": 2, "regions": 2}));
    // Nothing more to say: no update for a scope the page already had.
    eu.deliver_pending(after(70)).await.expect("eu step");
    assert_eq!(bodies(&w).len(), 1);
}

async fn a_page_before_another_region_joins_is_followed_by_one_update(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let (eu, us) = (shared_outbox(&fx, &w, "eu-west-1"), shared_outbox(&fx, &w, "us-east-1"));
    let mut e_eu = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    let mut e_us = AlertEngine::new(RuleConfig::with_defaults("us-east-1"));
    let hook = ["webhook".to_string()];
    for m in 0..2 {
        let ns = two_region_round(&mut e_eu, "eu-west-1", m * 60, false);
        enqueue(fx.store.as_ref(), &ns, &hook, after(m * 60)).await.expect("enqueue");
    }
    eu.deliver_pending(after(61)).await.expect("eu step");
    eu.deliver_pending(after(74)).await.expect("eu step");
    assert!(pages(&w).is_empty(), "held up to one lease margin (15 s at 60 s) after the evaluation");
    eu.deliver_pending(after(75)).await.expect("eu step");
    let got = pages(&w);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1, "[FIRING] openrouter/m: errors (eu-west-1; in 1 of 2 regions)", "only eu sees it yet");
    // us fails a minute later: its sighting widens the scope, and eu says so once.
    for m in 1..3 {
        let ns = two_region_round(&mut e_us, "us-east-1", m * 60 + 1, false);
        enqueue(fx.store.as_ref(), &ns, &hook, after(m * 60 + 1)).await.expect("enqueue");
    }
    us.deliver_pending(after(122)).await.expect("us step");
    eu.deliver_pending(after(123)).await.expect("eu step");
    eu.deliver_pending(after(125)).await.expect("eu step");
    let got = bodies(&w);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["title"], "[UPDATE] openrouter/m: errors (eu-west-1; in 2 of 2 regions)");
    assert_eq!(got[1]["update"], true);
    assert_eq!(got[1]["alerts"][0]["scope"], serde_json::json!({"scope": "global", "affected": 2, "regions": 2}));
}

/// An outbox of `region` with `alerts.min_regions = 2`: the page channel `webhook` posts to
/// `page`, the notice channel `tickets` to `notice`.
fn quorum_outbox(fx: &Fixture, page: &Receiver, notice: &Receiver, region: &str) -> Outbox {
    let cfg = OutboxConfig {
        region: Some(region.into()),
        lease_ttl: Duration::from_secs(65),
        min_regions: 2,
        notice_channels: ["tickets".to_string()].into(),
        ..OutboxConfig::with_deadline(Duration::from_secs(86400))
    };
    let tickets = WebhookConfig { name: "tickets".into(), url: SecretString::from(notice.url("/hook")), secret: None };
    let tickets: Arc<dyn Notifier> = Arc::new(WebhookNotifier::new(&tickets, Duration::from_secs(5)).expect("webhook"));
    let metrics = Arc::new(Metrics::new(region).expect("metrics"));
    Outbox::new(fx.store.clone(), vec![webhook(page, Duration::from_secs(5)), tickets], cfg, metrics)
}

/// Like `two_region_round`, the probe failing or (`ok`) passing.
fn quorum_round(engine: &mut AlertEngine, region: &str, secs: i64, ok: bool) -> Vec<Notification> {
    if !ok {
        return two_region_round(engine, region, secs, false);
    }
    let t = target_in(region);
    let s = Sample::new(t, after(secs), after(secs));
    let probe = RoundProbe {
        sample: &s,
        baseline: BaselineP95::default(),
        elsewhere: Elsewhere { regions: 1, ..Elsewhere::default() },
    };
    engine.evaluate(&Round { probes: vec![probe], ..Round::default() }, after(secs))
}

fn titles(w: &Receiver) -> Vec<String> {
    bodies(w).iter().map(|b| b["title"].as_str().unwrap_or("").to_string()).collect()
}

async fn under_a_regional_quorum_one_region_is_a_notice_and_the_second_pages(fx: Fixture) {
    let (page, notice) = (Receiver::start(Reply::new(200, "")).await, Receiver::start(Reply::new(200, "")).await);
    let (eu, us) = (quorum_outbox(&fx, &page, &notice, "eu-west-1"), quorum_outbox(&fx, &page, &notice, "us-east-1"));
    let mut e_eu = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    let mut e_us = AlertEngine::new(RuleConfig::with_defaults("us-east-1"));
    let both = ["tickets".to_string(), "webhook".to_string()];
    for m in 0..2 {
        let ns = quorum_round(&mut e_eu, "eu-west-1", m * 60, false);
        enqueue(fx.store.as_ref(), &ns, &both, after(m * 60)).await.expect("enqueue");
    }
    eu.deliver_pending(after(75)).await.expect("eu step");
    assert!(page.requests().is_empty(), "1 of 2 regions is below the quorum: no page");
    assert_eq!(titles(&notice), ["[FIRING] openrouter/m: errors (eu-west-1; in 1 of 2 regions)"]);
    // us fails too: the quorum is reached, and the update pages.
    for m in 1..3 {
        let ns = quorum_round(&mut e_us, "us-east-1", m * 60 + 1, false);
        enqueue(fx.store.as_ref(), &ns, &both, after(m * 60 + 1)).await.expect("enqueue");
    }
    us.deliver_pending(after(122)).await.expect("us step");
    eu.deliver_pending(after(123)).await.expect("eu step");
    eu.deliver_pending(after(125)).await.expect("eu step");
    assert_eq!(titles(&page), ["[UPDATE] openrouter/m: errors (eu-west-1; in 2 of 2 regions)"]);
    assert_eq!(titles(&notice).len(), 1, "what pages is not a notice as well");
    // Both recover (us first): the one resolve goes to both classes, which both carried it.
    for m in 3..6 {
        let ns = quorum_round(&mut e_us, "us-east-1", m * 60 + 1, true);
        enqueue(fx.store.as_ref(), &ns, &both, after(m * 60 + 1)).await.expect("enqueue");
        us.deliver_pending(after(m * 60 + 2)).await.expect("us step");
        let ns = quorum_round(&mut e_eu, "eu-west-1", m * 60 + 3, false);
        enqueue(fx.store.as_ref(), &ns, &both, after(m * 60 + 3)).await.expect("enqueue");
        eu.deliver_pending(after(m * 60 + 4)).await.expect("eu step");
    }
    for m in 6..9 {
        let ns = quorum_round(&mut e_eu, "eu-west-1", m * 60 + 3, true);
        enqueue(fx.store.as_ref(), &ns, &both, after(m * 60 + 3)).await.expect("enqueue");
        eu.deliver_pending(after(m * 60 + 4)).await.expect("eu step");
    }
    let resolved = |w: &Receiver| titles(w).iter().filter(|t| t.starts_with("[RESOLVED]")).count();
    assert_eq!((resolved(&page), resolved(&notice)), (1, 1), "page {:?} notice {:?}", titles(&page), titles(&notice));
}

async fn under_a_regional_quorum_an_incident_of_one_region_never_pages(fx: Fixture) {
    let (page, notice) = (Receiver::start(Reply::new(200, "")).await, Receiver::start(Reply::new(200, "")).await);
    let eu = quorum_outbox(&fx, &page, &notice, "eu-west-1");
    let mut e = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    let both = ["tickets".to_string(), "webhook".to_string()];
    for (m, ok) in [(0, false), (1, false), (2, true), (3, true), (4, true), (5, true)] {
        let ns = quorum_round(&mut e, "eu-west-1", m * 60, ok);
        enqueue(fx.store.as_ref(), &ns, &both, after(m * 60)).await.expect("enqueue");
        eu.deliver_pending(after(m * 60 + 16)).await.expect("eu step");
    }
    assert!(page.requests().is_empty(), "never paged: {:?}", titles(&page));
    let got = titles(&notice);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with("[FIRING]") && got[1].starts_with("[RESOLVED]"), "{got:?}");
    assert_eq!(
        fx.store.outbox_depth().await.expect("depth"),
        0,
        "every item handled: the page channel's marked delivered"
    );
}

async fn kinds_joining_while_the_first_page_waits_go_out_in_one_message(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let eu = shared_outbox(&fx, &w, "eu-west-1");
    let mut e = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    let hook = ["webhook".to_string()];
    // errors on the 2nd failed probe, the breaker one evaluation later: a page, then an update.
    let mut made = Vec::new();
    for (secs, opens) in [(0, false), (5, false), (10, true)] {
        let ns = two_region_round(&mut e, "eu-west-1", secs, opens);
        made.extend(ns.iter().map(|n| n.update));
        enqueue(fx.store.as_ref(), &ns, &hook, after(secs)).await.expect("enqueue");
        eu.deliver_pending(after(secs + 1)).await.expect("eu step");
    }
    assert_eq!(made, [false, true], "the engine made a page and an update");
    assert!(pages(&w).is_empty(), "the page still waits for the other region");
    let r = eu.deliver_pending(after(20)).await.expect("eu step");
    assert_eq!((r.delivered, r.depth), (2, 0), "{r:?}");
    let got = bodies(&w);
    assert_eq!(got.len(), 1, "one message: {got:?}");
    assert_eq!(got[0]["title"], "[FIRING] openrouter/m: breaker_open, errors (eu-west-1; in 1 of 2 regions)");
    assert_eq!(got[0]["update"], false);
    eu.deliver_pending(after(40)).await.expect("eu step");
    assert_eq!(bodies(&w).len(), 1, "nothing after it");
}

async fn when_the_owner_dies_another_region_takes_over_within_one_lease(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let (eu, us) = (shared_outbox(&fx, &w, "eu-west-1"), shared_outbox(&fx, &w, "us-east-1"));
    let mut e_eu = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    let mut e_us = AlertEngine::new(RuleConfig::with_defaults("us-east-1"));
    for m in 0..2 {
        let ns = shared_round(&mut e_eu, "eu-west-1", false, m * 60);
        enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
    }
    eu.deliver_pending(after(61)).await.expect("eu step");
    for m in 1..3 {
        let ns = shared_round(&mut e_us, "us-east-1", false, m * 60);
        enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
    }
    us.deliver_pending(after(121)).await.expect("us step");
    assert_eq!(pages(&w).len(), 1);
    assert!(us.owned_incidents().is_empty());
    // eu dies (no more steps). Within the lease us still defers; once it lapses us owns it.
    us.deliver_pending(after(61 + 60)).await.expect("us step");
    assert!(us.owned_incidents().is_empty(), "eu's lease still holds");
    us.deliver_pending(after(61 + 66)).await.expect("us step");
    assert_eq!(
        us.owned_incidents(),
        vec!["vigil:openrouter:m:".to_string()],
        "taken over one lease after eu's last renewal"
    );
    // us recovers: eu's sighting went stale, so us sends the one resolve.
    for m in 3..6 {
        let ns = shared_round(&mut e_us, "us-east-1", true, m * 60);
        enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
        us.deliver_pending(after(m * 60 + 2)).await.expect("us step");
    }
    let got = pages(&w);
    assert_eq!(got.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(), vec!["firing", "resolved"], "{got:?}");
}

async fn a_single_region_owns_every_incident_and_pages_as_before(fx: Fixture) {
    let w = Receiver::start(Reply::new(200, "")).await;
    let eu = shared_outbox(&fx, &w, "eu-west-1");
    let mut e = AlertEngine::new(RuleConfig::with_defaults("eu-west-1"));
    for m in 0..6 {
        let ns = shared_round(&mut e, "eu-west-1", m >= 2, m * 60);
        enqueue(fx.store.as_ref(), &ns, &["webhook".to_string()], after(m * 60)).await.expect("enqueue");
        eu.deliver_pending(after(m * 60 + 1)).await.expect("step");
    }
    let got = pages(&w);
    assert_eq!(got.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(), vec!["firing", "resolved"], "{got:?}");
}

store_support::on_both_stores!(
    each_channel_gets_the_alert_once_even_when_enqueued_twice,
    a_receiver_down_for_a_while_gets_the_alert_once_after_it_recovers,
    retry_after_is_honoured,
    a_hanging_receiver_times_out_and_the_retry_lands_once,
    a_permanent_rejection_is_abandoned_and_recorded,
    delivery_gives_up_only_after_the_deadline,
    an_unconfigured_channel_is_abandoned,
    a_restart_loses_nothing_and_sends_nothing_twice,
    engine_state_and_outbox_survive_a_restart_through_the_store,
    a_global_outage_seen_by_two_regions_pages_once_and_resolves_once,
    when_the_owner_dies_another_region_takes_over_within_one_lease,
    a_single_region_owns_every_incident_and_pages_as_before,
    a_first_page_waits_for_the_other_regions_view_and_says_global,
    a_page_before_another_region_joins_is_followed_by_one_update,
    kinds_joining_while_the_first_page_waits_go_out_in_one_message,
    under_a_regional_quorum_one_region_is_a_notice_and_the_second_pages,
    under_a_regional_quorum_an_incident_of_one_region_never_pages,
);

/// A loopback server that accepts every connection and never answers; how many it holds.
async fn black_hole() -> (String, Arc<std::sync::atomic::AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (url, accepted, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_channel_never_delays_another_channels_page() {
    use std::sync::atomic::Ordering;
    use vigil::config::AlertmanagerConfig;
    use vigil::io::notify::alertmanager::AlertmanagerNotifier;
    let fx = Fixture::sqlite().await;
    // The hanging channels' own timeout: the bound every assertion below is derived from.
    let hang = Duration::from_secs(8);
    let (hole, accepted, _server) = black_hole().await;
    let hung = |name: &str| -> Arc<dyn Notifier> {
        let cfg = AlertmanagerConfig {
            name: name.into(),
            url: SecretString::from(hole.clone()),
            repost_every: Duration::from_secs(1),
            ends_after: Duration::from_secs(300),
            runbook_url: vigil::config::DEFAULT_RUNBOOK_URL.into(),
        };
        Arc::new(AlertmanagerNotifier::new(&cfg, hang).expect("alertmanager"))
    };
    let fast = Receiver::start(Reply::new(200, "")).await;
    let channels = vec![hung("am-1"), hung("am-2"), webhook(&fast, Duration::from_secs(5))];
    let metrics = Arc::new(Metrics::new("eu-west-1").expect("metrics"));
    let cfg = OutboxConfig {
        poll_every: Duration::from_millis(100),
        ..OutboxConfig::with_deadline(Duration::from_secs(86400))
    };
    let ob = Arc::new(Outbox::new(fx.store.clone(), channels, cfg, metrics));
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn({
        let (ob, stop) = (ob.clone(), stop.clone());
        async move { ob.run(stop).await }
    });

    enqueue(fx.store.as_ref(), &[note("first")], &ob.channels(), Utc::now()).await.expect("enqueue");
    until(hang, "both hanging channels sending and the fast one paged", async || {
        accepted.load(Ordering::SeqCst) >= 2 && fast.acknowledged().len() == 1
    })
    .await;
    // A page while both hanging sends are still in flight (they end only at their timeout).
    let second_at = std::time::Instant::now();
    enqueue(fx.store.as_ref(), &[note("second")], &ob.channels(), Utc::now()).await.expect("enqueue");
    until(hang, "the fast channel's second page, before the hanging channels' timeout", async || {
        fast.acknowledged().len() == 2
    })
    .await;
    assert!(second_at.elapsed() < hang, "paged while the hung channels still wait on their first send");
    let far = Utc::now() + chrono::Duration::days(2);
    let waiting = |channel: &'static str| {
        let store = fx.store.clone();
        async move { store.due(None, Some(channel), far, 10).await.expect("due") }
    };
    for am in ["am-1", "am-2"] {
        let items = waiting(am).await;
        assert_eq!(items.len(), 2, "{am}: both pages still owed");
        assert!(items.iter().all(|i| i.attempts == 0), "{am}: no attempt had ended yet: {items:?}");
    }
    // Each hung channel gives up on its own timeout and retries on its own; the fast one is done.
    until(hang * 3, "each hung channel records its failed attempt", async || {
        let (a, b) = (waiting("am-1").await, waiting("am-2").await);
        [a, b].iter().all(|items| items.iter().any(|i| i.attempts >= 1 && i.last_error.is_some()))
    })
    .await;
    assert!(waiting("webhook").await.is_empty(), "the fast channel's items are delivered");
    let k = keys(&fast);
    assert_eq!(k.len(), 2, "each page once: {k:?}");
    assert_ne!(k[0], k[1]);
    stop.cancel();
    // A step still in flight at the stop is finished first: at most one more timeout.
    tokio::time::timeout(hang * 2, run).await.expect("the worker stops").expect("no panic");
    assert_eq!(fast.acknowledged().len(), 2, "nothing sent twice");
}
