//! Failover drills end to end: a real daemon probing stand-ins on loopback; a drill started with
//! `vigil drill` or `POST /v1/drills` drops its target from the chain in `GET /v1/thresholds`
//! (reason `drill (until …)`), shows on the status page and in the list, and ending it puts the
//! target back. Two regions on one PostgreSQL honour one drill started in either.

use crate::support::cli::{output, vigil_in};
use crate::support::daemon::{adherent_stream, spawn_app, stop_all, strings, table, Daemon, DaemonConfig, Provider};
use crate::support::settle;
use crate::support::store::PgTestDb;
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

const TOKEN: &str = "sk-test-drill-token";

/// Two providers serving `m` from one stand-in, in a chain `chat` = alpha, then beta.
fn config(url: &str, data: &std::path::Path, region: &str, base: &str) -> DaemonConfig {
    DaemonConfig::new(url, data)
        .region(region)
        .set("http.api_token_env", "VIGIL_TEST_API_TOKEN")
        .set(
            "chain",
            toml::Value::Array(vec![table([("name", "chat".into()), ("targets", strings(&["alpha/m", "beta/m"]))])]),
        )
        .provider(Provider::openai("alpha", &format!("{base}/v1")).models(&["m"]))
        .provider(Provider::openai("beta", &format!("{base}/v1")).models(&["m"]))
        .key("sk-test-drills")
        .env("VIGIL_TEST_API_TOKEN", TOKEN)
}

/// The chain now: targets in order, and (target, reason) of the dropped ones.
type View = (Vec<String>, Vec<(String, String)>);

async fn chain(daemon: &Daemon) -> Option<View> {
    let resp =
        reqwest::Client::new().get(daemon.url("/v1/thresholds?chain=chat")).bearer_auth(TOKEN).send().await.ok()?;
    let doc: serde_json::Value = resp.json().await.ok()?;
    let c = &doc["chains"][0];
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    let order = c["order"].as_array()?.iter().map(|e| s(&e["target"])).collect();
    let dropped = c["dropped"].as_array()?.iter().map(|e| (s(&e["target"]), s(&e["reason"]))).collect();
    Some((order, dropped))
}

/// Waits (bounded) until the chain holds `want`, and returns what it held then.
async fn chain_until(daemon: &Daemon, what: &str, want: impl Fn(&View) -> bool) -> View {
    let seen = settle(Duration::from_secs(20), || chain(daemon), |v| v.as_ref().is_some_and(&want)).await;
    match seen {
        Some(v) if want(&v) => v,
        last => panic!("{} never showed: {what}; last seen {last:?}", daemon.base),
    }
}

fn both(v: &View) -> bool {
    v.0 == ["alpha/m", "beta/m"] && v.1.is_empty()
}

fn alpha_drilled(v: &View) -> bool {
    v.0 == ["beta/m"] && v.1.len() == 1 && v.1[0].0 == "alpha/m" && v.1[0].1.starts_with("drill (until ")
}

async fn steady() -> StandIn {
    let body = adherent_stream();
    StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_from_the_cli_drops_its_target_until_ended_and_bad_requests_are_named() {
    let provider = steady().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg =
        config(&format!("sqlite://{}/vigil.db", dir.path().display()), dir.path(), "eu-test-1", &provider.base_url());
    let daemon = spawn_app(cfg.build()).await;
    chain_until(&daemon, "both targets in configured order", both).await;

    std::fs::write(dir.path().join("vigil.toml"), cfg.toml()).expect("config");
    let cli = |args: &[&str]| {
        let mut cmd = vigil_in(dir.path());
        cmd.args(["drill", "--config", "vigil.toml"]).args(args).envs(cfg.vars());
        output(cmd)
    };
    let out = cli(&["--chain", "chat", "--drop", "alpha/m", "--for", "10m"]).await;
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("chain chat drops alpha/m  running until "), "{said}");
    let id = said.split_whitespace().next().expect("the drill's id").to_string();

    let (_, dropped) = chain_until(&daemon, "alpha dropped for the drill", alpha_drilled).await;
    let page = reqwest::get(daemon.url("/")).await.expect("page").text().await.expect("html");
    assert!(page.contains("<h2>Drills</h2>") && page.contains(&id), "the status page shows the drill");
    let listed = cli(&["--list"]).await;
    let list = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(list.contains(&id) && list.contains("running until"), "{list}");
    assert!(dropped[0].1.ends_with("Z)"), "{dropped:?}");

    // Wrong requests name what is wrong, exit 2, and start nothing.
    for (args, says) in [
        (&["--chain", "nope", "--drop", "alpha/m", "--for", "10m"][..], "unknown chain \"nope\" (chains: chat)"),
        (&["--chain", "chat", "--drop", "gamma/m", "--for", "10m"], "\"gamma/m\" is not in chain \"chat\""),
        (&["--chain", "chat", "--drop", "beta/m", "--for", "25h"], "drill duration 25h: must be between 1m and 24h"),
        (&["--end", "ffffffff"], "no active drill \"ffffffff\""),
    ] {
        let out = cli(args).await;
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    let ended = cli(&["--end", &id[..8]]).await;
    assert!(ended.status.success(), "{}", String::from_utf8_lossy(&ended.stderr));
    assert!(String::from_utf8_lossy(&ended.stdout).contains("ended early at"));
    chain_until(&daemon, "alpha back at the head", both).await;
    let page = reqwest::get(daemon.url("/")).await.expect("page").text().await.expect("html");
    assert!(!page.contains("<h2>Drills</h2>"), "no drill runs: no section");
    daemon.stop().await;
}

async fn api(
    daemon: &Daemon,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().request(method, daemon.url(path)).bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_regions_on_one_postgres_honour_one_drill_started_and_ended_through_the_api() {
    let provider = steady().await;
    let db = PgTestDb::create().await;
    let data = tempfile::tempdir().expect("tempdir");
    let mut daemons = Vec::new();
    for region in ["eu-test-1", "us-test-1"] {
        let cfg = config(&db.url, &data.path().join(region), region, &provider.base_url());
        daemons.push(spawn_app(cfg.build()).await);
    }
    let (eu, us) = (&daemons[0], &daemons[1]);
    for d in [eu, us] {
        chain_until(d, "both targets in configured order", both).await;
    }

    // Without the token nothing starts.
    let anonymous = reqwest::Client::new()
        .post(eu.url("/v1/drills"))
        .json(&serde_json::json!({"chain": "chat", "drop": "alpha", "for": "10m"}))
        .send()
        .await
        .expect("post");
    assert_eq!(anonymous.status().as_u16(), 401);
    let (status, body) = api(
        eu,
        reqwest::Method::POST,
        "/v1/drills",
        Some(serde_json::json!({"chain": "nope", "drop": "alpha", "for": "10m"})),
    )
    .await;
    assert_eq!((status, body["error"].as_str()), (422, Some("unknown chain \"nope\" (chains: chat)")));

    // Started in eu (by provider name), honoured in both regions.
    let (status, body) = api(
        eu,
        reqwest::Method::POST,
        "/v1/drills",
        Some(serde_json::json!({"chain": "chat", "drop": "alpha", "for": "10m"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["drill"]["region"].as_str(), body["drill"]["active"].as_bool()), (Some("eu-test-1"), Some(true)));
    let id = body["drill"]["id"].as_str().expect("id").to_string();
    for d in [eu, us] {
        chain_until(d, "alpha dropped for the drill in every region", alpha_drilled).await;
    }
    let (status, listed) = api(us, reqwest::Method::GET, "/v1/drills", None).await;
    assert_eq!(status, 200);
    assert_eq!(listed["drills"][0]["id"].as_str(), Some(id.as_str()), "{listed}");

    // Ended from us, back in both.
    let (status, ended) = api(us, reqwest::Method::DELETE, &format!("/v1/drills/{id}"), None).await;
    assert_eq!((status, ended["drill"]["active"].as_bool()), (200, Some(false)), "{ended}");
    let (status, _) = api(eu, reqwest::Method::DELETE, &format!("/v1/drills/{id}"), None).await;
    assert_eq!(status, 404, "ended once");
    for d in [eu, us] {
        chain_until(d, "alpha back in every region", both).await;
    }
    stop_all(daemons, Duration::from_secs(10)).await;
    drop(db);
}
