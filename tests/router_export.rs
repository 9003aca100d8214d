//! The router export on real parts: the daemon's HTTP document and `vigil thresholds` from the same
//! SQLite store are equal; every format validates against its JSON Schema (Python `jsonschema`);
//! ETag/304, filters and the Ed25519 signature round trip (verified by the docs' Python snippet);
//! LiteLLM's `Router` loads the generated config (when the cached venv exists); and the
//! three-provider chain scenario against a live `vigil run` with stand-ins on loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use vigil::config::Config;
use vigil::demo::standin::{Script, StandIn};
use vigil::monitor::{Monitor, SharedSnapshot};
use vigil::probe::outcome::Outcome;
use vigil::sample::Sample;
use vigil::target::Target;

const TOKEN: &str = "sk-test-router-token";
/// base64 of the bytes 0..32: a test-only Ed25519 seed.
const SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("tests/fixtures").join(name)).expect("fixture")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn python() -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path)
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 is not on PATH (apt-get install -y python3; scripts/test.sh installs it)")
}

/// The LiteLLM venv scripts/test.sh builds, or why it is not there.
fn litellm_python() -> Result<PathBuf, String> {
    let venv = match std::env::var_os("VIGIL_LITELLM_VENV") {
        Some(v) => PathBuf::from(v),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .ok_or("neither XDG_CACHE_HOME nor HOME is set")?;
            cache.join("vigil-litellm-venv")
        }
    };
    let py = venv.join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import litellm, yaml"])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(py)
    } else {
        Err(format!("no usable LiteLLM venv at {} (scripts/test.sh builds it)", venv.display()))
    }
}

/// Runs a Python program with docs/examples on its path.
fn run_python(py: &Path, code: &str) -> Output {
    Command::new(py)
        .arg("-c")
        .arg(code)
        .env("PYTHONPATH", repo().join("docs/examples"))
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .expect("run python")
}

/// Validates each file against `docs/schema/<schema>` with Python `jsonschema`.
fn validate(schema: &str, files: &[&Path]) {
    let out = Command::new(python())
        .arg(repo().join("tests/support/validate_schema.py"))
        .arg(repo().join("docs/schema"))
        .arg(schema)
        .args(files)
        .output()
        .expect("run validate_schema.py");
    assert!(out.status.success(), "{schema}:\n{}", text(&out));
}

fn vigil() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vigil"))
}

// ---------------------------------------------------------------- the same store, two readers

const CHAIN_TOML: &str = r#"
[[chain]]
name = "chat"
targets = ["openrouter/openai/gpt-4o", "openai/gpt-4o-2024-08-06", "anthropic/claude-sonnet-4-20250514"]
"#;

fn store_config(data: &Path) -> String {
    format!(
        r#"
region = "test-1"
[storage]
url = "sqlite://{data}/vigil.db"
data_dir = "{data}"
[http]
listen = "127.0.0.1:0"
api_token_env = "VIGIL_TEST_API_TOKEN"
signing_key_env = "VIGIL_TEST_SIGNING_KEY"
[probe]
interval = "1s"
timeout = "900ms"
[baseline]
min_samples_p50 = 30
min_samples_p95 = 60
[breaker]
consecutive_failures = 2
[[provider]]
name = "openrouter"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["openai/gpt-4o"]
routes = ["OpenAI", "Azure"]
[[provider]]
name = "openai"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["gpt-4o-2024-08-06"]
[[provider]]
name = "anthropic"
kind = "anthropic"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["claude-sonnet-4-20250514"]
{CHAIN_TOML}"#,
        data = data.display()
    )
}

fn test_env() -> std::collections::BTreeMap<String, String> {
    [
        ("VIGIL_TEST_KEY", "sk-test-providers"),
        ("VIGIL_TEST_API_TOKEN", TOKEN),
        ("VIGIL_TEST_SIGNING_KEY", SEED),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn sample(target: &Target, at: DateTime<Utc>, outcome: Outcome, ttft: f64) -> Sample {
    let mut s = Sample::new(target.clone(), at, at);
    s.outcome = outcome;
    s.status = Some(if outcome == Outcome::Ok { 200 } else { 503 });
    if outcome == Outcome::Ok {
        s.ttfb_ms = Some(ttft * 0.6);
        s.ttft_ms = Some(ttft);
        s.total_ms = Some(ttft + 50.0);
        s.tokens_per_s = Some(80.0);
    }
    s.cost_usd = Some(0.00001);
    s
}

/// Feeds a store and a monitor the daemon's way: samples stored and observed, state persisted.
/// Young targets on purpose: one with a stable P95, one provisional, one open breaker.
async fn fill(config: &Config, now: DateTime<Utc>) -> (Arc<dyn vigil::store::Store>, Monitor) {
    let store = vigil::store::open(secrecy::ExposeSecret::expose_secret(&config.storage.url)).await.expect("store");
    store.migrate().await.expect("migrate");
    let targets: Vec<Target> =
        vigil::probe::Planned::all(&config.providers, &config.region).into_iter().map(|p| p.target).collect();
    let mut monitor = Monitor::new(config, targets.clone(), now);
    let mut samples = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let n = [80, 45, 45, 40][i];
        for k in 0..n {
            let at = now - chrono::Duration::seconds(10 * (n - k) as i64);
            let ttft = 200.0 + 40.0 * i as f64 + (k % 17) as f64 * 7.0;
            let outcome = if t.provider == "openai" && k == n - 1 { Outcome::ServerError } else { Outcome::Ok };
            samples.push(sample(t, at, outcome, ttft));
        }
    }
    samples.sort_by_key(|s| s.started_at);
    store.insert_samples(&samples).await.expect("insert");
    for s in &samples {
        monitor.observe(s, s.started_at);
    }
    monitor.persist(store.as_ref()).await.expect("persist");
    (store, monitor)
}

async fn serve(config: &Config, snapshot: SharedSnapshot) -> String {
    let state = vigil::http::HttpState {
        metrics: Arc::new(vigil::metrics::Metrics::new(&config.region).expect("metrics")),
        checks: vec![],
        writer: None,
        snapshot,
        api_token: config.http.api_token.clone(),
        status: None,
        feed: Arc::new(vigil::http::api::Feed::from_config(config)),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, vigil::http::router(state)).await });
    format!("http://{addr}")
}

fn without_times(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("generated_at");
        o.remove("expires_at");
    }
    v
}

fn cli_thresholds(cfg: &Path, args: &[&str]) -> Output {
    vigil()
        .arg("thresholds")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .envs(test_env())
        .output()
        .expect("run vigil thresholds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_and_http_give_the_same_document_in_every_format_each_valid_and_signed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("vigil.toml");
    std::fs::write(&cfg, store_config(dir.path())).expect("write config");
    let config = Config::from_toml(&store_config(dir.path()), &test_env()).expect("valid config");
    let now = Utc::now();
    let (_store, mut monitor) = fill(&config, now).await;
    let snapshot = SharedSnapshot::default();
    *snapshot.write().expect("lock") = monitor.publish(now, None);
    let base = serve(&config, snapshot.clone()).await;
    let http = reqwest::Client::new();
    let get = |q: &str| http.get(format!("{base}/v1/thresholds{q}")).bearer_auth(TOKEN).send();

    // One document, one spelling: HTTP and CLI equal apart from when each was generated.
    let served: serde_json::Value = get("").await.expect("get").json().await.expect("json");
    let out = cli_thresholds(&cfg, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("CLI prints JSON");
    assert_eq!(without_times(served.clone()), without_times(printed), "HTTP and CLI documents differ");
    assert_eq!(served["schema_version"], 2);
    assert_eq!(served["breaker"]["consecutive_failures"], 2);
    assert_eq!(served["breaker"]["open_for_s"], 300);

    // The young targets: openrouter@OpenAI has a stable P95 (80 ≥ 60), the others are provisional.
    let targets = served["targets"].as_array().expect("targets");
    let by_id = |id: &str| targets.iter().find(|t| t["target"] == id).unwrap_or_else(|| panic!("{id} in {served}"));
    let stable = by_id("openrouter/openai/gpt-4o@OpenAI");
    assert_eq!(stable["provisional"], false);
    assert!(stable["failover_ttft_ms"].is_number());
    let young = by_id("openrouter/openai/gpt-4o@Azure");
    assert_eq!(young["provisional"], true, "{young}");
    assert!(young["ttft_ms"]["p95"].is_null(), "no stable P95 from 45 samples");
    let basis = &young["provisional_basis"];
    assert_eq!(basis["samples"], 45);
    let upper = basis["ttft_p95_upper_ms"].as_f64().expect("bound");
    assert!(upper >= 200.0 + 40.0 + 16.0 * 7.0 - 1.0, "the bound is the largest value below 59 samples: {upper}");
    assert_eq!(young["failover_ttft_ms"].as_f64(), Some(2.0 * upper));

    // The chain: openai's last probes failed → demoted behind anthropic, with why.
    let chain = &served["chains"][0];
    let order: Vec<&str> = chain["order"].as_array().expect("order").iter().map(|e| e["target"].as_str().unwrap_or("")).collect();
    assert_eq!(
        order,
        [
            "openrouter/openai/gpt-4o@OpenAI",
            "openrouter/openai/gpt-4o@Azure",
            "anthropic/claude-sonnet-4-20250514",
            "openai/gpt-4o-2024-08-06"
        ]
    );
    assert_eq!(chain["order"][3]["reason"], "last probe failed: server_error");

    // Every format, from both readers, valid against its schema and equal but for the timestamps.
    for (format, schema) in [
        ("json", "thresholds.json"),
        ("yaml", "thresholds.json"),
        ("litellm", "litellm.json"),
        ("openrouter", "openrouter.json"),
        ("portkey", "portkey.json"),
    ] {
        let resp = get(&format!("?format={format}")).await.expect("get");
        assert_eq!(resp.status(), 200, "{format}");
        let body = resp.bytes().await.expect("body");
        let from_http = dir.path().join(format!("http.{format}"));
        std::fs::write(&from_http, &body).expect("write");
        let out = cli_thresholds(&cfg, &["--format", format]);
        assert!(out.status.success(), "{format}: {}", text(&out));
        let from_cli = dir.path().join(format!("cli.{format}"));
        std::fs::write(&from_cli, &out.stdout).expect("write");
        validate(schema, &[&from_http, &from_cli]);
        let parse = |bytes: &[u8]| -> serde_json::Value {
            let mut v: serde_json::Value = serde_yaml::from_slice(bytes).unwrap_or_else(|e| panic!("{format}: {e}"));
            if let Some(meta) = v.get_mut("vigil") {
                *meta = without_times(meta.take());
            }
            without_times(v)
        };
        assert_eq!(parse(&body), parse(&out.stdout), "{format}: HTTP and CLI renderings differ");
    }

    // Cacheable: a strong ETag, 304 on If-None-Match, max-age of one probe interval.
    let first = get("").await.expect("get");
    let tag = first.headers()["etag"].to_str().expect("etag").to_string();
    assert_eq!(first.headers()["cache-control"], "private, max-age=1");
    let again = http
        .get(format!("{base}/v1/thresholds"))
        .bearer_auth(TOKEN)
        .header("If-None-Match", &tag)
        .send()
        .await
        .expect("get");
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"].to_str().expect("etag"), tag);
    let chat_only = get("?provider=anthropic").await.expect("get");
    assert_ne!(chat_only.headers()["etag"].to_str().expect("etag"), tag, "another body, another tag");
    assert_eq!(get("?chain=nope").await.expect("get").status(), 404);
    assert_eq!(get("?format=xml").await.expect("get").status(), 400);
    let openai_only: serde_json::Value = get("?provider=openai").await.expect("get").json().await.expect("json");
    assert_eq!(openai_only["targets"].as_array().map(Vec::len), Some(1));
    assert_eq!(openai_only["chains"][0]["order"].as_array().map(Vec::len), Some(1));
    let by_model: serde_json::Value = get("?model=openai/gpt-4o").await.expect("get").json().await.expect("json");
    assert_eq!(by_model["targets"].as_array().map(Vec::len), Some(2));
    let unauthorized = http.get(format!("{base}/v1/thresholds")).send().await.expect("get");
    assert_eq!(unauthorized.status(), 401);

    // Signed: the docs' Python snippet verifies the exact bytes, and refuses one changed byte.
    let signed = get("").await.expect("get");
    let sig = signed.headers()["x-vigil-signature"].to_str().expect("sig").to_string();
    let key = signed.headers()["x-vigil-signing-key"].to_str().expect("key").to_string();
    let body = signed.bytes().await.expect("body");
    let body_file = dir.path().join("signed.json");
    std::fs::write(&body_file, &body).expect("write");
    let check = |file: &Path, sig: &str| {
        let out = run_python(
            &python(),
            &format!(
                "from verify_signature import verify\nprint(verify(open({:?}, 'rb').read(), {sig:?}, {key:?}))",
                file.display().to_string()
            ),
        );
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(check(&body_file, &sig), "True");
    let tampered = dir.path().join("tampered.json");
    std::fs::write(&tampered, String::from_utf8_lossy(&body).replacen("\"closed\"", "\"open\"", 1)).expect("write");
    assert_eq!(check(&tampered, &sig), "False");
    // `vigil thresholds --sign --out` signs what it writes.
    let out_file = dir.path().join("thresholds.json");
    let out = cli_thresholds(&cfg, &["--sign", "--out", out_file.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", text(&out));
    let cli_sig = std::fs::read_to_string(dir.path().join("thresholds.json.sig")).expect("sig file");
    assert!(text(&out).contains(&key), "the CLI names the public key: {}", text(&out));
    assert_eq!(check(&out_file, cli_sig.trim()), "True");

    // The schema is served as it is in docs/schema/.
    let schema = http.get(format!("{base}/v1/schema/thresholds.json")).bearer_auth(TOKEN).send().await.expect("get");
    assert_eq!(schema.status(), 200);
    assert_eq!(
        schema.text().await.expect("text"),
        std::fs::read_to_string(repo().join("docs/schema/thresholds.json")).expect("schema")
    );

    // LiteLLM's Router loads the generated config and picks as the chain says.
    match litellm_python() {
        Err(why) => eprintln!("skipping the LiteLLM Router check: {why}"),
        Ok(py) => {
            let out = run_python(
                &py,
                &format!(
                    "import json\nfrom litellm_vigil import VigilRouter\nvr = VigilRouter({base:?}, {TOKEN:?})\nvr.refresh()\n\
                     print(json.dumps([vr.pick('chat'), vr.pick('openai/gpt-4o'), len(vr.config['model_list']), vr.refresh()]))"
                ),
            );
            assert!(out.status.success(), "{}", text(&out));
            let said: serde_json::Value =
                serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or(""))
                    .unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
            assert_eq!(said[0], "openrouter/openai/gpt-4o@OpenAI");
            assert_eq!(said[1], "openrouter/openai/gpt-4o@OpenAI", "rank 1 of the model group");
            assert_eq!(said[2], 4 + 2 + 1 + 1, "chain deployments plus one per target in model groups");
            assert_eq!(said[3], false, "an unchanged config is not rebuilt (304)");
        }
    }
}

#[tokio::test]
async fn the_cli_exports_stored_targets_the_config_does_not_name() {
    // What `vigil run --demo` leaves behind: data for targets no config lists.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::from_toml(&store_config(dir.path()), &test_env()).expect("valid config");
    let now = Utc::now();
    let (store, _) = fill(&config, now).await;
    drop(store);
    let bare = dir.path().join("bare.toml");
    std::fs::write(
        &bare,
        format!(
            "region = \"test-1\"\n[storage]\nurl = \"sqlite://{d}/vigil.db\"\ndata_dir = \"{d}\"\n",
            d = dir.path().display()
        ),
    )
    .expect("write");
    let mut cmd = vigil();
    cmd.args(["thresholds", "--config"]).arg(&bare);
    for key in ["OPENROUTER", "OPENAI", "ANTHROPIC", "GROQ", "TOGETHER", "DEEPINFRA", "GEMINI"] {
        cmd.env_remove(format!("{key}_API_KEY"));
    }
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let ids: Vec<&str> = doc["targets"].as_array().expect("targets").iter().filter_map(|t| t["target"].as_str()).collect();
    assert_eq!(ids.len(), 4, "{doc}");
    assert!(ids.contains(&"anthropic/claude-sonnet-4-20250514"));
}

#[test]
fn an_unknown_chain_target_exits_2_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("vigil.toml");
    let text_cfg = store_config(dir.path()).replace("\"openai/gpt-4o-2024-08-06\", \"anthropic", "\"openai/gpt-5\", \"anthropic");
    std::fs::write(&cfg, text_cfg).expect("write");
    let out = cli_thresholds(&cfg, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("chain[0].targets[1]: unknown target \"openai/gpt-5\""), "{}", text(&out));
}
