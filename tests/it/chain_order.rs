//! A failover chain the way teams run it, end to end on the real `vigil run` binary with stand-in
//! providers on loopback: the chain's order comes from the application's variable (through its
//! `_FILE` twin, which a running process can change), a name without a key or a provider is
//! skipped with the reason, a provider whose credit drains is demoted before it runs out with its
//! `fallback_for_credit` target in its place, the chain's worst case is judged against its
//! `ttft_slo` and `total_slo` (and `chain_slo_at_risk` is sent naming the member that breaks each), and a SIGHUP
//! picks up a changed order.

use crate::support::daemon::{adherent_stream, header_toml};
use crate::support::process::{free_port, Daemon};
use crate::support::{poll_until, settle};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

/// A stand-in answering streamed probes after a 20 ms head start.
async fn steady() -> StandIn {
    let body = adherent_stream();
    StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1)).with_head_delay(Duration::from_millis(20)))
        .await
        .expect("stand-in")
}

/// A prepaid, OpenRouter-like stand-in whose key's remaining credit drops by $2 at every read
/// (from $100): about $7 200 an hour at one read a second, so empty within a minute.
async fn draining() -> StandIn {
    let body = adherent_stream();
    let reads = Arc::new(AtomicU64::new(0));
    let forbidden = br#"{"error":{"code":403,"message":"Only management keys can fetch credits"}}"#;
    StandIn::start(move |r| match r.path_only() {
        "/v1/key" => {
            let n = reads.fetch_add(1, Ordering::SeqCst) as f64;
            let left = (100.0 - 2.0 * n).max(0.0);
            let key =
                format!(r#"{{"data":{{"label":"sk-or-v1-test","limit":100,"limit_remaining":{left},"usage":0}}}}"#);
            Script::json(200, key.as_bytes())
        }
        "/v1/credits" => Script::json(403, forbidden),
        _ => Script::sse(&body, Duration::from_millis(1)).with_head_delay(Duration::from_millis(20)),
    })
    .await
    .expect("stand-in")
}

fn config(data: &Path, port: u16, prepaid: &str, direct: &str, backup: &str) -> String {
    let db = format!("sqlite://{}/vigil.db", data.display());
    header_toml("chain-1", &db, data, port)
        + &format!(
            r#"[probe]
interval = "1s"
timeout = "900ms"
[[alerts.webhook]]
url_env = "VIGIL_TEST_HOOK"
[[provider]]
name = "prepaid"
kind = "openai"
base_url = "{prepaid}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m"]
balance = {{ min_usd = 0.0, every = "1s", demote_within = "6h" }}
[[provider]]
name = "direct"
kind = "openai"
base_url = "{direct}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m"]
[[provider]]
name = "backup"
kind = "openai"
base_url = "{backup}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m"]
[[provider]]
name = "keyless"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "VIGIL_TEST_ABSENT_KEY"
models = ["m"]
[[chain]]
name = "chat"
targets_env = "APP_PROVIDER_ORDER"
targets = ["backup/m", "direct/m", "prepaid/m"]
fallback_for_credit = {{ "prepaid/m" = "direct/m" }}
ttft_slo = "1ms"
total_slo = "2s"
"#
        )
}

/// The chain as `GET /v1/thresholds` says now.
async fn chain(vigil: &Daemon) -> Option<serde_json::Value> {
    let (status, body) = vigil.get("/v1/thresholds?chain=chat").await?;
    let doc: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    doc["chains"].get(0).cloned()
}

/// `(target, status, position, reason)` of each entry of `order`.
fn entries(c: &serde_json::Value) -> Vec<(String, String, u64, String)> {
    let list = c["order"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("target"), s("status"), e["position"].as_u64().unwrap_or(0), s("reason"))
        })
        .collect()
}

/// Polls the chain (30 s at most) until `want` holds; the chain then.
async fn chain_until(vigil: &Daemon, what: &str, want: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let last = settle(Duration::from_secs(30), || chain(vigil), |c| c.as_ref().is_some_and(&want)).await;
    match last {
        Some(c) if want(&c) => c,
        last => panic!("the chain never reached: {what}; last: {last:?}\nlog:\n{}", vigil.log()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chain_follows_the_env_order_demotes_a_draining_provider_for_its_fallback_and_rereads_the_order_on_sighup()
{
    let (prepaid, direct, backup) = (draining().await, steady().await, steady().await);
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let order = data.path().join("order");
    std::fs::write(&order, "prepaid, backup,keyless,,direct, nosuch\n").expect("order");
    let text = config(data.path(), port, &prepaid.base_url(), &direct.base_url(), &backup.base_url());
    let order_var = order.display().to_string();
    let hook_url = format!("{}/hook", hook.base_url());
    let env = [("APP_PROVIDER_ORDER_FILE", order_var.as_str()), ("VIGIL_TEST_HOOK", hook_url.as_str())];
    let vigil = Daemon::start_in(data.path(), &text, port, &env).await;

    // The order is the variable's, not the file's `targets`; the names this machine cannot probe
    // are skipped with the reason.
    let c = chain_until(&vigil, "three members in the variable's order", |c| {
        c["order"].as_array().is_some_and(|o| o.len() == 3)
    })
    .await;
    assert_eq!(c["order_from"], "env:APP_PROVIDER_ORDER_FILE");
    assert_eq!(
        c["skipped"],
        serde_json::json!([
            {"target": "keyless", "reason": "VIGIL_TEST_ABSENT_KEY is not set"},
            {"target": "nosuch", "reason": "no provider \"nosuch\" is configured"}
        ])
    );

    // The prepaid provider's credit drains: it is demoted with the hours left, and its fallback
    // (`direct/m`, third in the variable) takes its place at the head.
    let places = |c: &serde_json::Value| -> Vec<(String, String, u64)> {
        entries(c).into_iter().map(|e| (e.0, e.1, e.2)).collect()
    };
    let want = [("direct/m", "healthy", 3), ("backup/m", "healthy", 2), ("prepaid/m", "demoted", 1)]
        .map(|(t, s, p)| (t.to_string(), s.to_string(), p));
    let c = chain_until(&vigil, "prepaid demoted for credit, direct in its place", |c| places(c) == want).await;
    let got = entries(&c);
    let reason = &got[2].3;
    assert!(reason.starts_with("credit empty ") && reason.ends_with("; direct/m stands in"), "{reason}");

    // The worst case sums each entry's TTFT deadline (where none is published yet, the probe's
    // first-token wait: probe.ttft_timeout capped by probe.timeout, 900 ms) in order; against
    // 1 ms the head already breaks it.
    let slo = &c["slo"];
    let sum: f64 =
        c["order"].as_array().expect("order").iter().map(|e| e["failover_ttft_ms"].as_f64().unwrap_or(900.0)).sum();
    assert!((slo["worst_case_ttft_ms"].as_f64().expect("worst case") - sum).abs() < 1e-6, "{slo}");
    assert_eq!(
        (slo["ttft_ms"].as_f64(), &slo["meets"], &slo["breaking_member"]),
        (Some(1.0), &serde_json::json!(false), &serde_json::json!(got[0].0))
    );
    // To a complete answer each of the three entries counts at probe.timeout (900 ms): 2.7 s, over
    // 2 s at the third.
    assert_eq!(
        (slo["total_ms"].as_f64(), slo["worst_case_total_ms"].as_f64(), &slo["total_meets"]),
        (Some(2000.0), Some(2700.0), &serde_json::json!(false))
    );
    assert_eq!(slo["total_breaking_member"], serde_json::json!(got[2].0));
    let paged = poll_until(Duration::from_secs(30), || async {
        hook.requests().iter().filter_map(|r| r.json()).find(|v| v["alerts"][0]["kind"] == "chain_slo_at_risk")
    })
    .await
    .unwrap_or_else(|| panic!("no chain_slo_at_risk was sent; log:\n{}", vigil.log()));
    let alert = &paged["alerts"][0];
    assert_eq!((&alert["severity"], &alert["chain"]), (&serde_json::json!("warning"), &serde_json::json!("chat")));
    let summary = alert["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("over ttft_slo 1 ms, broken at "), "{summary}");
    assert!(summary.contains("; worst case 2700 ms to a complete answer if every member fails over in turn, over total_slo 2000 ms, broken at "), "{summary}");

    // A new order in the file, a SIGHUP: the chain follows it.
    std::fs::write(&order, "backup,direct\n").expect("new order");
    vigil.signal("-HUP");
    let c = chain_until(&vigil, "the reloaded order", |c| {
        entries(c).iter().map(|e| e.0.clone()).collect::<Vec<_>>() == ["backup/m", "direct/m"]
    })
    .await;
    assert_eq!(c["skipped"], serde_json::json!([]));
    assert_eq!(c["order_from"], "env:APP_PROVIDER_ORDER_FILE");
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
}
