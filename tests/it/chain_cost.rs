//! What a failover costs, end to end: a daemon in this process probes two priced providers on
//! loopback stand-ins in one chain; a drill drops the cheap head, the head moves to the dearer
//! one, and the `chain_head_changed` notice reaches only its own webhook (not the page channel)
//! saying the price ratio and the day's spend at the chain's `tokens_per_day`; the chain entries
//! publish their prices; after the stop, the weekly summary (built as `vigil report --weekly`
//! builds it, and the command's own HTML) counts the time each target spent as the head and the
//! spend that time implied.

use crate::support::alert_receiver::{Receiver, Reply};
use crate::support::cli::{output, vigil_in};
use crate::support::daemon::{adherent_stream, spawn_app, strings, table, DaemonConfig, Provider};
use crate::support::{poll_until, settle};
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

const TOKEN: &str = "sk-test-chain-cost-token";
/// Input tokens a day: the most `tokens_per_day` takes, so seconds of a head imply dollars.
const INPUT_PER_DAY: f64 = 1e12;

fn config(dir: &std::path::Path, base: &str, hooks: &Receiver) -> DaemonConfig {
    let price = |input: f64, output: f64| table([("input_per_mtok", input.into()), ("output_per_mtok", output.into())]);
    let hook = |name: &str, var: &str| table([("name", name.into()), ("url_env", var.into())]);
    DaemonConfig::sqlite(dir)
        .region("cost-1")
        .set("http.api_token_env", "VIGIL_TEST_API_TOKEN")
        .set(
            "alerts.webhook",
            toml::Value::Array(vec![hook("oncall", "VIGIL_TEST_ONCALL"), hook("finops", "VIGIL_TEST_FINOPS")]),
        )
        .set("alerts.chain_head_changed", true)
        .set("alerts.chain_head_channels", strings(&["finops"]))
        .set(
            "chain",
            toml::Value::Array(vec![table([
                ("name", "chat".into()),
                ("targets", strings(&["cheap/m", "dear/m"])),
                ("tokens_per_day", table([("input", (INPUT_PER_DAY as i64).into()), ("output", 0.into())])),
            ])]),
        )
        .provider(Provider::openai("cheap", &format!("{base}/v1")).models(&["m"]).set("price", price(1.0, 4.0)))
        .provider(Provider::openai("dear", &format!("{base}/v1")).models(&["m"]).set("price", price(3.1, 15.0)))
        .key("sk-test-chain-cost")
        .env("VIGIL_TEST_API_TOKEN", TOKEN)
        .env("VIGIL_TEST_ONCALL", &hooks.url("/oncall"))
        .env("VIGIL_TEST_FINOPS", &hooks.url("/finops"))
}

/// `(target, input price)` of each entry of the chain's order now.
async fn order(base: &str) -> Option<Vec<(String, Option<f64>)>> {
    let resp = reqwest::Client::new().get(format!("{base}/v1/thresholds?chain=chat")).bearer_auth(TOKEN).send().await;
    let doc: serde_json::Value = resp.ok()?.json().await.ok()?;
    let entries = doc["chains"][0]["order"].as_array()?.clone();
    Some(
        entries
            .iter()
            .map(|e| (e["target"].as_str().unwrap_or("").to_string(), e["price"]["input_per_mtok"].as_f64()))
            .collect(),
    )
}

async fn order_until(base: &str, what: &str, first: &str) -> Vec<(String, Option<f64>)> {
    let seen = settle(
        Duration::from_secs(20),
        || order(base),
        |o| o.as_ref().is_some_and(|o| o.first().is_some_and(|e| e.0 == first)),
    )
    .await;
    match seen {
        Some(o) if o.first().is_some_and(|e| e.0 == first) => o,
        last => panic!("the chain never showed {what}; last: {last:?}"),
    }
}

/// The `chain_head_changed` notices `path` received whose summary starts with `prefix`.
fn notices(hooks: &Receiver, path: &str, prefix: &str) -> Vec<serde_json::Value> {
    hooks
        .requests()
        .iter()
        .filter(|r| r.path == path)
        .map(|r| r.json())
        .filter(|n| n["status"] == "firing")
        .filter(|n| n["alerts"][0]["kind"] == "chain_head_changed")
        .filter(|n| n["alerts"][0]["summary"].as_str().is_some_and(|s| s.starts_with(prefix)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_moving_to_a_dearer_target_is_noticed_with_its_price_ratio_and_counted_in_the_weekly_summary() {
    let body = adherent_stream();
    let provider = StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in");
    let hooks = Receiver::start(Reply::new(200, "ok")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), &provider.base_url(), &hooks);
    let daemon = spawn_app(cfg.build()).await;
    let started = chrono::Utc::now();

    // Each entry publishes its configured price.
    let o = order_until(&daemon.base, "cheap at the head", "cheap/m").await;
    assert_eq!(o, [("cheap/m".to_string(), Some(1.0)), ("dear/m".to_string(), Some(3.1))]);
    // Let a few evaluations see cheap at the head.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A drill drops the cheap head: the dear one leads, and finops hears of it.
    let drill = reqwest::Client::new()
        .post(daemon.url("/v1/drills"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"chain": "chat", "drop": "cheap/m", "for": "10m"}))
        .send()
        .await
        .expect("post");
    assert_eq!(drill.status().as_u16(), 201);
    let id = drill.json::<serde_json::Value>().await.expect("drill")["drill"]["id"].as_str().expect("id").to_string();
    order_until(&daemon.base, "dear at the head", "dear/m").await;
    let moved = poll_until(Duration::from_secs(20), || async {
        notices(&hooks, "/finops", "chain chat: now dear/m").into_iter().next()
    })
    .await
    .unwrap_or_else(|| panic!("no chain_head_changed reached finops: {:?}", hooks.requests()));
    let alert = &moved["alerts"][0];
    assert_eq!((&alert["severity"], &alert["chain"]), (&serde_json::json!("info"), &serde_json::json!("chat")));
    assert_eq!(
        alert["summary"],
        "chain chat: now dear/m, 3.1× the input price of cheap/m ($3.10 vs $1.00 per million input tokens, \
         $15.00 vs $4.00 output); at tokens_per_day a day now costs $3100000.00 instead of $1000000.00"
    );
    assert_eq!((alert["current"].as_f64(), alert["baseline"].as_f64()), (Some(3.1), Some(1.0)));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Ended: cheap leads again, and that move is a notice too, at a third of the price.
    let ended = reqwest::Client::new().delete(daemon.url(&format!("/v1/drills/{id}"))).bearer_auth(TOKEN).send().await;
    assert_eq!(ended.expect("delete").status().as_u16(), 200);
    order_until(&daemon.base, "cheap back at the head", "cheap/m").await;
    let back = poll_until(Duration::from_secs(20), || async {
        notices(&hooks, "/finops", "chain chat: now cheap/m, 0.3× the input price of dear/m").into_iter().next()
    })
    .await;
    assert!(back.is_some(), "no notice of the way back: {:?}", hooks.requests());
    tokio::time::sleep(Duration::from_secs(2)).await;
    daemon.stop().await;
    let stopped = chrono::Utc::now();
    assert!(
        notices(&hooks, "/oncall", "").is_empty(),
        "chain_head_changed is a notice: never on the page channel: {:?}",
        hooks.requests().iter().map(|r| r.json()).collect::<Vec<_>>()
    );

    // The weekly summary: time per head from the stored moves, and the spend it implied.
    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", dir.path().display())).await.expect("store");
    let traffic: vigil::decide::chain_cost::Traffic = [("chat".to_string(), (INPUT_PER_DAY, 0.0))].into();
    let report = vigil::io::weekly::build_for(store.as_ref(), None, stopped, &traffic).await.expect("report");
    let heads: Vec<_> = report.chain_heads.iter().filter(|h| h.chain == "chat").collect();
    let of =
        |t: &str| heads.iter().find(|h| h.target.as_deref() == Some(t)).unwrap_or_else(|| panic!("{t}: {heads:?}"));
    let (cheap, dear) = (of("cheap/m"), of("dear/m"));
    // Each lead lasted at least the sleep after its move was recorded (2 s): the first record of
    // cheap at the head waits for the daemon's first evaluation, which a loaded machine delays,
    // so the time before the drill is not counted on.
    assert!(cheap.seconds >= 2 && dear.seconds >= 2, "{heads:?}");
    let total: i64 = heads.iter().map(|h| h.seconds).sum();
    assert!(total <= (stopped - started).num_seconds() + 1, "no more time than the daemon ran: {heads:?}");
    for (h, usd_a_day) in [(cheap, 1e6), (dear, 3.1e6)] {
        let want = usd_a_day * h.seconds as f64 / 86_400.0;
        assert!((h.implied_usd.expect("priced") - want).abs() < 1e-6, "{h:?}");
    }
    drop(store);

    // `vigil report --weekly` says the same in its HTML.
    std::fs::write(dir.path().join("vigil.toml"), cfg.toml()).expect("config");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["report", "--weekly", "--region", "all", "--config", "vigil.toml", "--out", "weekly.html"])
        .envs(cfg.vars());
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(dir.path().join("weekly.html")).expect("weekly.html");
    assert!(html.contains("<table id=\"chain-heads\""), "{html}");
    for head in ["cheap/m", "dear/m"] {
        let at = html.find(&format!("data-head=\"{head}\"")).unwrap_or_else(|| panic!("no row for {head}: {html}"));
        let row = &html[at..at + html[at..].find("</tr>").expect("row end")];
        let spend = row.split("data-col=\"implied_spend\"").nth(1).expect("spend cell");
        assert!(spend.contains(">$") && !spend.contains(">-<"), "{head}: {row}");
    }
}
