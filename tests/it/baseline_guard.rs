//! Baselines learn only what is normal, on real parts: a daemon probing a loopback stand-in every
//! second that turns 8× slower stays out of routing (breaker never closed) for as long as it is
//! slow, because the slow probes taken in trouble never join the baseline its trials are judged
//! against; `vigil baselines adopt TARGET` (the binary, over `POST /-/baselines/adopt`) adopts the
//! held level, a `baseline_shift` notice reaches the webhook, and the target is routed again.

use crate::support::alert_receiver::{Receiver, Reply};
use crate::support::cli::{output, vigil_in};
use crate::support::daemon::{adherent_stream, spawn_app, DaemonConfig, Provider};
use crate::support::poll_until;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

const TOKEN: &str = "tok-test-adopt";

async fn breaker(http: &reqwest::Client, base: &str) -> String {
    let doc: serde_json::Value = match http.get(format!("{base}/v1/thresholds")).bearer_auth(TOKEN).send().await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    doc["targets"][0]["breaker"].as_str().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_provider_stays_out_until_its_shift_is_adopted_on_request() {
    let head_ms = Arc::new(AtomicU64::new(40));
    let head = head_ms.clone();
    let provider = StandIn::start(move |_req| {
        Script::sse(&adherent_stream(), Duration::from_millis(1))
            .with_head_delay(Duration::from_millis(head.load(Ordering::SeqCst)))
    })
    .await
    .expect("stand-in");
    let hook = Receiver::start(Reply::new(200, "ok")).await;
    let data = tempfile::tempdir().expect("tempdir");
    let config = DaemonConfig::sqlite(data.path())
        .region("test-1")
        .set("baseline.min_samples_p50", 5)
        .set("baseline.min_samples_p95", 20)
        .set("baseline.adopt_after", "off")
        .set("breaker.open_for", "2s")
        .set("http.api_token_env", "VIGIL_TEST_ADOPT_TOKEN")
        .env("VIGIL_TEST_ADOPT_TOKEN", TOKEN)
        .webhook(&hook.url("/hook"))
        .provider(Provider::openai("slow", &format!("{}/v1", provider.base_url())).models(&["m"]))
        .key("sk-test-guard");
    let daemon = spawn_app(config.build()).await;
    let http = reqwest::Client::new();
    let base = daemon.base.clone();

    // A published P95 from twenty fast probes: enough that the first slow probe (which joins the
    // baseline: the target is not in trouble yet) does not become the P95 the second is judged by.
    let p95 = poll_until(Duration::from_secs(30), || async {
        let v: serde_json::Value =
            http.get(format!("{base}/v1/thresholds")).bearer_auth(TOKEN).send().await.ok()?.json().await.ok()?;
        v["targets"][0]["ttft_ms"]["p95"].as_f64()
    })
    .await
    .expect("a published TTFT P95");
    assert!(p95 < 200.0, "fast level: {p95}");

    // 8× slower: dropped, and kept out while slow (its trials judged against the level before).
    head_ms.store(400, Ordering::SeqCst);
    if poll_until(Duration::from_secs(15), || async { (breaker(&http, &base).await == "open").then_some(()) })
        .await
        .is_none()
    {
        let doc = http.get(format!("{base}/v1/targets")).bearer_auth(TOKEN).send().await.expect("targets");
        panic!("the breaker did not open on the slowdown: {}", doc.text().await.unwrap_or_default());
    }
    let mut seen = Vec::new();
    for _ in 0..32 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        seen.push(breaker(&http, &base).await);
    }
    // Eight seconds at `open_for = 2s`: several trials, each judged against the fast level.
    assert!(seen.iter().all(|s| s == "open" || s == "half_open"), "never back in routing while slow: {seen:?}");

    // An unknown target is named as such; the slow one's held level is adopted.
    let cli = |target: &str| {
        let mut cmd = vigil_in(data.path());
        cmd.args(["baselines", "adopt", target, "--url", &base]).env("VIGIL_TEST_ADOPT_TOKEN", TOKEN);
        let cfg = data.path().join("vigil.toml");
        std::fs::write(&cfg, config.toml()).expect("config file");
        cmd.arg("--config").arg(&cfg);
        for (k, v) in config.vars() {
            cmd.env(k, v);
        }
        cmd
    };
    let unknown = output(cli("slow/nope")).await;
    let text = String::from_utf8_lossy(&unknown.stderr).to_string();
    assert!(!unknown.status.success() && text.contains("slow/nope: no such target"), "{text}");
    let adopted = output(cli("slow/m")).await;
    let said = String::from_utf8_lossy(&adopted.stdout).to_string();
    assert!(adopted.status.success(), "{said}{}", String::from_utf8_lossy(&adopted.stderr));
    assert!(said.contains("baseline of slow/m moved: TTFT") && said.contains("adopted on request"), "{said}");

    // Judged against the adopted level, the next trial passes; the notice reaches the webhook.
    poll_until(Duration::from_secs(15), || async { (breaker(&http, &base).await == "closed").then_some(()) })
        .await
        .expect("back in routing at its new level");
    let notice = poll_until(Duration::from_secs(15), || async {
        hook.requests().into_iter().map(|r| r.json()).find(|j| j.to_string().contains("baseline_shift"))
    })
    .await
    .expect("a baseline_shift notification");
    assert!(notice.to_string().contains("adopted on request"), "{notice}");
    daemon.stop().await;
}
