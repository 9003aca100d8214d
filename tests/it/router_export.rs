//! The router export on real parts: the daemon's HTTP document and `vigil thresholds` from the same
//! SQLite store are equal; every format validates against its standalone JSON Schema (Python
//! `jsonschema`, no registry) after loading with PyYAML, a YAML 1.1 loader; ETag/304, filters and
//! the Ed25519 signature round trip (verified by the docs' Python snippet); LiteLLM's `Router` loads
//! the `?format=litellm` document as it is and routes real requests to the chain head's stand-in,
//! following a reorder, with renamed providers (when the cached venv exists); and the
//! three-provider chain scenario against a live `vigil run` with stand-ins on loopback.

use crate::support::{fixture, settle};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use vigil::config::Config;
use vigil::decide::snapshot::SharedSnapshot;
use vigil::run::demo::standin::{Script, StandIn};
use vigil::run::monitor::Monitor;
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

const TOKEN: &str = "sk-test-router-token";
/// base64 of the bytes 0..32: a test-only Ed25519 seed.
const SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Whether python3 with the modules these checks import can run (the suite's skip-or-fail rule).
fn python_ready() -> bool {
    crate::support::tool_available(
        "python3",
        &["-c", "import cryptography, jsonschema, referencing, yaml"],
        "python3 with cryptography, jsonschema, pyyaml: pip install cryptography jsonschema pyyaml",
    )
}

/// python3 on PATH; the tests using it ask [`python_ready`] first.
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
pub(crate) fn validate(schema: &str, files: &[&Path]) {
    let out = Command::new(python())
        .arg(repo().join("tests/it/support/validate_schema.py"))
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
    [("VIGIL_TEST_KEY", "sk-test-providers"), ("VIGIL_TEST_API_TOKEN", TOKEN), ("VIGIL_TEST_SIGNING_KEY", SEED)]
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
async fn fill(config: &Config, now: DateTime<Utc>) -> (Arc<dyn vigil::io::store::Store>, Monitor) {
    let store = vigil::io::store::open(secrecy::ExposeSecret::expose_secret(&config.storage.url)).await.expect("store");
    store.migrate().await.expect("migrate");
    let targets: Vec<Target> =
        vigil::io::probe::Planned::all(&config.providers, &config.region).into_iter().map(|p| p.target).collect();
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
    let state = vigil::io::http::HttpState {
        metrics: Arc::new(vigil::io::metrics::Metrics::new(&config.region).expect("metrics")),
        checks: vec![],
        writer: None,
        link: None,
        snapshot,
        api_token: config.http.api_token.clone(),
        status: None,
        feed: Arc::new(vigil::io::http::api::Feed::new(config.http.signing_key.as_ref(), config.probe.interval)),
        provider_status: Default::default(),
        canary: Default::default(),
        golden: Default::default(),
        reload: None,
        adopt: None,
        drills: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, vigil::io::http::router(state)).await });
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
    // Without python3 the schema and signature checks skip (printed); the rest still runs.
    let with_python = python_ready();
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
    let order: Vec<&str> =
        chain["order"].as_array().expect("order").iter().map(|e| e["target"].as_str().unwrap_or("")).collect();
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
        if with_python {
            validate(schema, &[&from_http, &from_cli]);
        }
        let parse = |bytes: &[u8]| -> serde_json::Value {
            let mut v: serde_json::Value = serde_norway::from_slice(bytes).unwrap_or_else(|e| panic!("{format}: {e}"));
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
    let tampered = dir.path().join("tampered.json");
    std::fs::write(&tampered, String::from_utf8_lossy(&body).replacen("\"closed\"", "\"open\"", 1)).expect("write");
    if with_python {
        assert_eq!(check(&body_file, &sig), "True");
        assert_eq!(check(&tampered, &sig), "False");
    }
    // `vigil thresholds --sign --out` signs what it writes.
    let out_file = dir.path().join("thresholds.json");
    let out = cli_thresholds(&cfg, &["--sign", "--out", out_file.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", text(&out));
    let cli_sig = std::fs::read_to_string(dir.path().join("thresholds.json.sig")).expect("sig file");
    assert!(text(&out).contains(&key), "the CLI names the public key: {}", text(&out));
    if with_python {
        assert_eq!(check(&out_file, cli_sig.trim()), "True");
    }

    // The schema is served as it is in docs/schema/.
    let schema = http.get(format!("{base}/v1/schema/thresholds.json")).bearer_auth(TOKEN).send().await.expect("get");
    assert_eq!(schema.status(), 200);
    assert_eq!(
        schema.text().await.expect("text"),
        std::fs::read_to_string(repo().join("docs/schema/thresholds.json")).expect("schema")
    );

    // LiteLLM's Router loads the generated config and picks as the chain says.
    match litellm_python() {
        Err(why) => crate::support::optional_tier_missing(&format!("the LiteLLM Router check: {why}")),
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
    let ids: Vec<&str> =
        doc["targets"].as_array().expect("targets").iter().filter_map(|t| t["target"].as_str()).collect();
    assert_eq!(ids.len(), 4, "{doc}");
    assert!(ids.contains(&"anthropic/claude-sonnet-4-20250514"));
}

#[test]
fn an_unknown_chain_target_exits_2_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("vigil.toml");
    let text_cfg =
        store_config(dir.path()).replace("\"openai/gpt-4o-2024-08-06\", \"anthropic", "\"openai/gpt-5\", \"anthropic");
    std::fs::write(&cfg, text_cfg).expect("write");
    let out = cli_thresholds(&cfg, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("chain[0].targets[1]: unknown target \"openai/gpt-5\""), "{}", text(&out));
}

// ---------------------------------------------------------------- the three-provider chain, live

/// How a stand-in answers probes: 0 normal, 1 slow, 2 failing.
const NORMAL: u8 = 0;
const SLOW: u8 = 1;
const FAILING: u8 = 2;

struct Provider {
    standin: StandIn,
    mode: Arc<AtomicU8>,
}

/// A stand-in answering streamed probes by its mode (the recorded `stream`, its answer the one the
/// probe's system prompt demands), and plain (non-streamed) chat calls with a small completion, so
/// the OpenRouter example can send it a request.
async fn provider(stream: &'static str, error: (u16, &'static str)) -> Provider {
    let mode = Arc::new(AtomicU8::new(NORMAL));
    let (body, err) = (crate::support::daemon::obeying(stream), fixture(error.1));
    let m = mode.clone();
    let standin = StandIn::start(move |req| {
        let streamed = req.json().is_some_and(|j| j["stream"] == true);
        if !streamed {
            return Script::json(200, br#"{"id":"gen-1","choices":[{"message":{"role":"assistant","content":"ok"}}]}"#);
        }
        // A steady 40 ms head start keeps loopback jitter small against the baseline.
        match m.load(Ordering::SeqCst) {
            NORMAL => Script::sse(&body, Duration::from_millis(1)).with_head_delay(Duration::from_millis(40)),
            SLOW => Script::sse(&body, Duration::from_millis(1)).with_head_delay(Duration::from_millis(600)),
            _ => Script::json(error.0, &err),
        }
    })
    .await
    .expect("stand-in");
    Provider { standin, mode }
}

struct Daemon {
    child: std::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = i32::try_from(self.child.id()).expect("pid fits");
        // SAFETY: signalling our own child process by its id.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// A week-old instance's history: 1000 good probes per target at the stand-ins' normal speed,
/// stored and rolled up the daemon's way, so every P95 is stable from the first round.
async fn seed_history(config: &Config) {
    let now = Utc::now();
    let store = vigil::io::store::open(secrecy::ExposeSecret::expose_secret(&config.storage.url)).await.expect("store");
    store.migrate().await.expect("migrate");
    let targets: Vec<Target> =
        vigil::io::probe::Planned::all(&config.providers, &config.region).into_iter().map(|p| p.target).collect();
    let mut monitor = Monitor::new(config, targets.clone(), now);
    let mut samples = Vec::new();
    for t in &targets {
        for k in 0..1000i64 {
            let at = now - chrono::Duration::seconds(10 * (1000 - k));
            samples.push(sample(t, at, Outcome::Ok, 60.0 + (k % 19) as f64 * 5.0));
        }
    }
    samples.sort_by_key(|s| s.started_at);
    store.insert_samples(&samples).await.expect("insert");
    for s in &samples {
        monitor.observe(s, s.started_at);
    }
    monitor.persist(store.as_ref()).await.expect("persist");
}

async fn start_daemon(or: &Provider, oa: &Provider, an: &Provider) -> Daemon {
    spawn_daemon(|d, port| {
        format!(
            r#"
region = "test-1"
[storage]
url = "sqlite://{d}/vigil.db"
data_dir = "{d}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:{port}"
api_token_env = "VIGIL_TEST_API_TOKEN"
[probe]
interval = "1s"
timeout = "900ms"
[breaker]
consecutive_failures = 2
failure_window = "120s"
open_for = "2s"
[[provider]]
name = "openrouter"
kind = "openai"
base_url = "{or}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["openai/gpt-4o"]
routes = ["OpenAI", "Azure"]
[[provider]]
name = "openai"
kind = "openai"
base_url = "{oa}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["gpt-4o-2024-08-06"]
[[provider]]
name = "anthropic"
kind = "anthropic"
base_url = "{an}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["claude-sonnet-4-20250514"]
{CHAIN_TOML}"#,
            d = d.display(),
            or = or.standin.base_url(),
            oa = oa.standin.base_url(),
            an = an.standin.base_url(),
        )
    })
    .await
}

/// `vigil run` on the config `config(data dir, HTTP port)` writes, its store seeded with a week of
/// good probes per target.
async fn spawn_daemon(config: impl Fn(&Path, u16) -> String) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let config = config(dir.path(), port);
    let path = dir.path().join("vigil.toml");
    seed_history(&Config::from_toml(&config, &test_env()).expect("valid config")).await;
    std::fs::write(&path, config).expect("write config");
    let mut cmd = vigil();
    cmd.args(["run", "--config"]).arg(&path).envs(test_env()).env("VIGIL_LOG", "warn");
    for key in ["OPENROUTER", "OPENAI", "ANTHROPIC", "GROQ", "TOGETHER", "DEEPINFRA", "GEMINI"] {
        cmd.env_remove(format!("{key}_API_KEY"));
    }
    for var in ["DATABASE_URL", "VIGIL_REGION", "VIGIL_HTTP_LISTEN"] {
        cmd.env_remove(var);
    }
    let child = cmd.stdout(std::process::Stdio::null()).spawn().expect("vigil run starts");
    Daemon { child, base: format!("http://127.0.0.1:{port}"), _dir: dir }
}

/// The chain as `?chain=chat` says now: (target, status, reason) in order, then the dropped ones.
type View = (Vec<(String, String, String)>, Vec<(String, String)>);

async fn chain_view(http: &reqwest::Client, base: &str) -> Option<(View, serde_json::Value)> {
    let resp = http.get(format!("{base}/v1/thresholds?chain=chat")).bearer_auth(TOKEN).send().await.ok()?;
    let doc: serde_json::Value = resp.json().await.ok()?;
    let c = doc["chains"].get(0)?.clone();
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    let order = c["order"].as_array()?.iter().map(|e| (s(&e["target"]), s(&e["status"]), s(&e["reason"]))).collect();
    let dropped = c["dropped"].as_array()?.iter().map(|e| (s(&e["target"]), s(&e["reason"]))).collect();
    Some(((order, dropped), doc))
}

/// Polls (bounded) until `want` holds for the chain; returns the document then.
async fn wait_for(http: &reqwest::Client, base: &str, what: &str, want: impl Fn(&View) -> bool) -> serde_json::Value {
    let done = |got: &Option<(View, serde_json::Value)>| got.as_ref().is_some_and(|(v, _)| want(v));
    let seen = settle(Duration::from_secs(30), || chain_view(http, base), done).await;
    match seen {
        Some((view, doc)) if want(&view) => doc,
        last => panic!("the chain never reached: {what}; last seen {:?}", last.map(|(view, _)| view)),
    }
}

const OPENAI: &str = "openai/gpt-4o-2024-08-06";
const ANTHROPIC: &str = "anthropic/claude-sonnet-4-20250514";

fn is_openrouter(t: &str) -> bool {
    t.starts_with("openrouter/openai/gpt-4o@")
}

/// What the docs' stdlib consumer and the LiteLLM integration pick first for the chain now.
fn consumers_pick(base: &str, litellm: &Result<PathBuf, String>) -> (String, Option<String>) {
    let out = run_python(
        &python(),
        &format!(
            "from vigil_router import fetch_thresholds, chain_order\n\
             print(chain_order(fetch_thresholds({base:?}, {TOKEN:?}, chain='chat'), 'chat')[0]['target'])"
        ),
    );
    assert!(out.status.success(), "stdlib consumer: {}", text(&out));
    let stdlib = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let lite = litellm.as_ref().ok().map(|py| {
        let out = Command::new(py)
            .arg(repo().join("docs/examples/litellm_vigil.py"))
            .args([base, TOKEN, "chat"])
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .output()
            .expect("run litellm consumer");
        assert!(out.status.success(), "LiteLLM consumer: {}", text(&out));
        let said: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or(""))
                .unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
        said["pick"].as_str().unwrap_or("").to_string()
    });
    (stdlib, lite)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_provider_chain_reorders_on_a_slow_then_a_failing_provider_and_restores() {
    if !python_ready() {
        return;
    }
    let _timing = crate::support::timing_sensitive().await;
    let or = provider("openai-chat-stream-usage.sse", (503, "openai-error-503.json")).await;
    let oa = provider("openai-chat-stream-usage.sse", (503, "openai-error-503.json")).await;
    let an = provider("anthropic-messages-stream.sse", (529, "anthropic-error-529.json")).await;
    let daemon = start_daemon(&or, &oa, &an).await;
    let http = reqwest::Client::new();
    let litellm = litellm_python();
    if let Err(why) = &litellm {
        crate::support::optional_tier_missing(&format!("the LiteLLM consumer in this scenario: {why}"));
    }
    let base = daemon.base.clone();

    // 1. All healthy, with deadlines (provisional from 5 samples): the configured order.
    let healthy_in_order = |v: &View| {
        let (order, dropped) = v;
        order.len() == 4
            && dropped.is_empty()
            && order.iter().all(|e| e.1 == "healthy")
            && is_openrouter(&order[0].0)
            && is_openrouter(&order[1].0)
            && order[2].0 == OPENAI
            && order[3].0 == ANTHROPIC
    };
    let doc = wait_for(&http, &base, "all four healthy in configured order", |v| healthy_in_order(v)).await;
    let doc =
        if doc["chains"][0]["order"].as_array().is_some_and(|o| o.iter().all(|e| e["failover_ttft_ms"].is_number())) {
            doc
        } else {
            wait_for(&http, &base, "deadlines for every target", |v| healthy_in_order(v)).await
        };
    let (stdlib, lite) = consumers_pick(&base, &litellm);
    assert!(is_openrouter(&stdlib), "{stdlib}");
    if let Some(l) = lite {
        assert!(is_openrouter(&l), "{l}");
    }
    // OpenRouter: the request carries vigil's order of upstream hosts.
    let out = run_python(
        &python(),
        &format!(
            "import json\nfrom openrouter_provider import provider_preferences, chat\n\
             p = provider_preferences({base:?}, {TOKEN:?}, 'openai/gpt-4o')\n\
             chat({or_base:?}, 'sk-or-test-placeholder', 'openai/gpt-4o', [{{'role': 'user', 'content': 'hi'}}], provider=p)\n\
             print(json.dumps(p))",
            or_base = format!("{}/v1", or.standin.base_url())
        ),
    );
    assert!(out.status.success(), "OpenRouter example: {}", text(&out));
    let sent =
        or.standin.requests().into_iter().filter_map(|r| r.json()).find(|j| j["stream"] != true).expect("chat call");
    let order: Vec<String> = doc["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter(|t| t["provider"] == "openrouter")
        .map(|t| (t["rank"].as_u64().unwrap_or(0), t["route"].as_str().unwrap_or("").to_string()))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect();
    assert_eq!(sent["provider"]["order"].as_array().map(|a| a.len()), Some(2), "{sent}");
    assert_eq!(sent["provider"]["allow_fallbacks"], false, "{sent}");
    assert!(order
        .iter()
        .all(|r| sent["provider"]["order"].as_array().is_some_and(|a| a.iter().any(|x| x == r.as_str()))));

    // 2. OpenRouter slow: both its routes go behind openai and anthropic as soon as the first slow
    //    probe is judged (demoted, saying why); a second slow probe in a row trips the breaker
    //    (dropped). No more than one slow probe per route is served before the reorder shows.
    let before = or.standin.requests().len();
    or.mode.store(SLOW, Ordering::SeqCst);
    let reason_seen = std::sync::Mutex::new(None::<String>);
    let dropped_seen = std::sync::Mutex::new(Vec::<String>::new());
    // Counted when the reorder is first seen, not after the wait returns.
    let served_when_seen = std::sync::atomic::AtomicUsize::new(usize::MAX);
    wait_for(&http, &base, "openrouter demoted for TTFT, or dropped", |(order, dropped)| {
        let demoted: Vec<_> = order.iter().filter(|e| is_openrouter(&e.0)).collect();
        if let Some(e) = demoted.iter().find(|e| e.1 == "demoted") {
            if let Ok(mut r) = reason_seen.lock() {
                r.get_or_insert(e.2.clone());
            }
        }
        if let Ok(mut d) = dropped_seen.lock() {
            *d = dropped.iter().filter(|d| is_openrouter(&d.0)).map(|d| d.1.clone()).collect();
        }
        let reordered = order.len() >= 2
            && order[0].0 == OPENAI
            && order[1].0 == ANTHROPIC
            && demoted.iter().all(|e| e.1 == "demoted")
            && demoted.len() + dropped.iter().filter(|d| is_openrouter(&d.0)).count() == 2;
        if reordered {
            served_when_seen.store(or.standin.requests().len(), Ordering::SeqCst);
        }
        reordered
    })
    .await;
    // Demoted (the export's own verdict) shows between the first and the second slow probe; when
    // both land within one publish of the export, the breaker's trip is the first thing a reader
    // sees, and both routes are dropped for latency instead.
    match reason_seen.lock().expect("lock").clone() {
        Some(reason) => assert!(reason.starts_with("ttft p95 ") && reason.contains("x baseline"), "{reason}"),
        None => {
            let dropped = dropped_seen.lock().expect("lock").clone();
            assert_eq!(dropped.len(), 2, "both openrouter routes dropped: {dropped:?}");
            assert!(
                dropped.iter().all(|r| r.contains("above") && r.contains("P95")),
                "dropped for latency: {dropped:?}"
            );
        }
    }
    let slow_served = served_when_seen.load(Ordering::SeqCst) - before;
    // Two routes probed every second: at most three slow probes each before readers see the
    // reorder (the trip takes two; the export is republished at most a second later).
    assert!(slow_served <= 6, "reordered after {slow_served} slow probes: within about one probe interval");
    let (stdlib, lite) = consumers_pick(&base, &litellm);
    assert_eq!(stdlib, OPENAI);
    if let Some(l) = lite {
        assert_eq!(l, OPENAI);
    }

    // 3. OpenAI failing too: anthropic first; openai demoted on its first failure, then dropped
    //    once its breaker opens (two failures).
    oa.mode.store(FAILING, Ordering::SeqCst);
    wait_for(&http, &base, "anthropic first, openai out of the way", |(order, _)| {
        !order.is_empty() && order[0].0 == ANTHROPIC && order.iter().all(|e| e.0 != OPENAI || e.1 == "demoted")
    })
    .await;
    wait_for(&http, &base, "openai dropped with an open breaker", |(order, dropped)| {
        !order.is_empty()
            && order[0].0 == ANTHROPIC
            && dropped.iter().any(|(t, why)| t == OPENAI && why.starts_with("breaker open: "))
    })
    .await;
    let (stdlib, lite) = consumers_pick(&base, &litellm);
    assert_eq!(stdlib, ANTHROPIC);
    if let Some(l) = lite {
        assert_eq!(l, ANTHROPIC);
    }

    // 4. Both recover: the configured order comes back (openai after its half_open probe).
    or.mode.store(NORMAL, Ordering::SeqCst);
    oa.mode.store(NORMAL, Ordering::SeqCst);
    wait_for(&http, &base, "the configured order restored", |v| healthy_in_order(v)).await;
    let (stdlib, lite) = consumers_pick(&base, &litellm);
    assert!(is_openrouter(&stdlib), "{stdlib}");
    if let Some(l) = lite {
        assert!(is_openrouter(&l), "{l}");
    }
    drop(daemon);
}

#[test]
fn the_router_doc_quotes_every_example_verbatim() {
    let doc = std::fs::read_to_string(repo().join("docs/ROUTER.md")).expect("ROUTER.md");
    let mut n = 0;
    for entry in std::fs::read_dir(repo().join("docs/examples")).expect("docs/examples") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "py") {
            let body = std::fs::read_to_string(&path).expect("example");
            assert!(
                doc.contains(&format!("```python\n{body}```")),
                "ROUTER.md does not quote {} verbatim",
                path.display()
            );
            n += 1;
        }
    }
    assert!(n >= 4, "the four examples: stdlib consumer, signature check, LiteLLM, OpenRouter");
    assert!(!doc.contains("half-open"), "one spelling: half_open");
}

// ---------------------------------------------------------------- LiteLLM follows the export as it is

/// Loads a `?format=litellm` file into LiteLLM exactly as the document says — `Router(model_list=…,
/// **router_settings)`, the proxy's reading of the same file — and sends `argv[4]` streamed
/// requests for model group `argv[2]` carrying `argv[3]`. Prints the router_settings keys the
/// proxy would refuse and what each request got.
const LITELLM_AS_IT_IS: &str = r#"
import json, sys
import yaml
from litellm import Router
try:
    from litellm.router_api import router_init_args
except ImportError:  # LiteLLM before the Rust core
    router_init_args = Router.get_valid_args

config = yaml.safe_load(open(sys.argv[1]))
unknown = sorted(set(config["router_settings"]) - set(router_init_args()))
router = Router(model_list=config["model_list"], **config["router_settings"])
answers = []
for _ in range(int(sys.argv[4])):
    try:
        reply = router.completion(model=sys.argv[2], messages=[{"role": "user", "content": sys.argv[3]}], stream=True)
        answers.append("ok: " + "".join(chunk.choices[0].delta.content or "" for chunk in reply))
    except Exception as e:
        answers.append(f"{type(e).__name__}: {e}")
print(json.dumps({"unknown": unknown, "answers": answers}))
"#;

/// What LiteLLM got for each request, after checking the settings are all the proxy's.
fn through_litellm(py: &Path, file: &Path, group: &str, marker: &str, requests: usize) -> Vec<String> {
    let out = Command::new(py)
        .arg("-c")
        .arg(LITELLM_AS_IT_IS)
        .arg(file)
        .args([group, marker, &requests.to_string()])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("VIGIL_TEST_KEY", "sk-test-providers")
        .output()
        .expect("run LiteLLM");
    assert!(out.status.success(), "LiteLLM: {}", text(&out));
    let said: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(said["unknown"], serde_json::json!([]), "router_settings the proxy would ignore");
    said["answers"].as_array().expect("answers").iter().map(|a| a.as_str().unwrap_or("").to_string()).collect()
}

/// Requests a stand-in received whose messages carry `marker` (LiteLLM's, not vigil's probes).
fn carrying(p: &Provider, marker: &str) -> Vec<vigil::run::demo::standin::RequestRecord> {
    p.standin.requests().into_iter().filter(|r| String::from_utf8_lossy(&r.body).contains(marker)).collect()
}

/// The `?format=litellm` document once `want` holds for it (bounded), as bytes and as a value.
async fn litellm_doc(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    want: impl Fn(&serde_json::Value) -> bool,
) -> (Vec<u8>, serde_json::Value) {
    let fetch = || async {
        let resp = http.get(format!("{base}/v1/thresholds?format=litellm")).bearer_auth(TOKEN).send().await.ok()?;
        let bytes = resp.bytes().await.ok()?.to_vec();
        let doc: serde_json::Value = serde_norway::from_slice(&bytes).ok()?;
        Some((bytes, doc))
    };
    let seen = settle(Duration::from_secs(30), fetch, |got| got.as_ref().is_some_and(|(_, d)| want(d))).await;
    match seen {
        Some((bytes, doc)) if want(&doc) => (bytes, doc),
        last => panic!("the LiteLLM document never showed {what}; last seen {:?}", last.map(|(_, d)| d)),
    }
}

/// The deployments of model group `group`, in the document's order.
fn group<'a>(doc: &'a serde_json::Value, group: &str) -> Vec<&'a serde_json::Value> {
    doc["model_list"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|d| d["model_name"] == group)
        .collect()
}

fn head_of(doc: &serde_json::Value, name: &str) -> String {
    let mut g = group(doc, name);
    g.sort_by_key(|d| d["litellm_params"]["order"].as_u64());
    g.first().and_then(|d| d["model_info"]["vigil_target"].as_str()).unwrap_or("").to_string()
}

const OR_EU: &str = "or-eu/openai/gpt-4o@OpenAI";
const OA_MAIN: &str = "oa-main/gpt-4o-2024-08-06";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellm_loads_the_export_as_it_is_routes_to_the_chain_head_and_follows_a_reorder() {
    if !python_ready() {
        return;
    }
    let py = match litellm_python() {
        Ok(py) => py,
        Err(why) => return crate::support::optional_tier_missing(&format!("the LiteLLM routing check: {why}")),
    };
    let _timing = crate::support::timing_sensitive().await;
    let or = provider("openai-chat-stream-usage.sse", (503, "openai-error-503.json")).await;
    let oa = provider("openai-chat-stream-usage.sse", (503, "openai-error-503.json")).await;
    // Renamed providers: `or-eu` is OpenRouter by its routes, not by its name.
    let daemon = spawn_daemon(|d, port| {
        format!(
            r#"
region = "test-1"
[storage]
url = "sqlite://{d}/vigil.db"
data_dir = "{d}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:{port}"
api_token_env = "VIGIL_TEST_API_TOKEN"
[probe]
interval = "1s"
timeout = "900ms"
[breaker]
consecutive_failures = 2
failure_window = "120s"
open_for = "60s"
[[provider]]
name = "or-eu"
kind = "openai"
base_url = "{or}/api/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["openai/gpt-4o"]
routes = ["OpenAI"]
[[provider]]
name = "oa-main"
kind = "openai"
base_url = "{oa}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["gpt-4o-2024-08-06"]
[[chain]]
name = "chat"
targets = ["{OR_EU}", "{OA_MAIN}"]
"#,
            d = d.display(),
            or = or.standin.base_url(),
            oa = oa.standin.base_url(),
        )
    })
    .await;
    let http = reqwest::Client::new();
    let base = daemon.base.clone();
    let dir = tempfile::tempdir().expect("tempdir");

    // 1. Healthy: the chain head is or-eu, and every format of this instance fits its schema.
    let (bytes, doc) = litellm_doc(&http, &base, "or-eu at the head of chat", |d| head_of(d, "chat") == OR_EU).await;
    let head = group(&doc, "chat")[0];
    assert_eq!(head["litellm_params"]["model"], "openrouter/openai/gpt-4o", "{head}");
    assert_eq!(head["litellm_params"]["api_base"], format!("{}/api/v1", or.standin.base_url()));
    assert_eq!(head["litellm_params"]["api_key"], "os.environ/VIGIL_TEST_KEY");
    assert_eq!(
        head["litellm_params"]["extra_body"]["provider"],
        serde_json::json!({"order": ["OpenAI"], "allow_fallbacks": false})
    );
    for (format, schema) in [
        ("yaml", "thresholds.json"),
        ("litellm", "litellm.json"),
        ("openrouter", "openrouter.json"),
        ("portkey", "portkey.json"),
    ] {
        let body =
            http.get(format!("{base}/v1/thresholds?format={format}")).bearer_auth(TOKEN).send().await.expect("get");
        let file = dir.path().join(format!("renamed.{format}"));
        std::fs::write(&file, body.bytes().await.expect("body")).expect("write");
        validate(schema, &[&file]);
    }
    let portkey: serde_json::Value = http
        .get(format!("{base}/v1/thresholds?format=portkey"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(
        portkey["configs"]["chat"]["targets"][0]["override_params"],
        serde_json::json!({"model": "@or-eu/openai/gpt-4o", "provider": {"order": ["OpenAI"], "allow_fallbacks": false}})
    );
    let out = run_python(
        &python(),
        &format!("import json\nfrom openrouter_provider import provider_preferences\nprint(json.dumps(provider_preferences({base:?}, {TOKEN:?}, 'openai/gpt-4o')))"),
    );
    assert!(out.status.success(), "OpenRouter example: {}", text(&out));
    let preferences: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(preferences, serde_json::json!({"order": ["OpenAI"], "allow_fallbacks": false}));

    // 2. LiteLLM, given the file as it is, sends a real request to the head's stand-in, pinned
    //    to its route and with the key from the named variable.
    let first = dir.path().join("litellm-1.yaml");
    std::fs::write(&first, &bytes).expect("write");
    let answers = through_litellm(&py, &first, "chat", "via-litellm-one", 1);
    assert!(answers[0].starts_with("ok: "), "{answers:?}");
    let got = carrying(&or, "via-litellm-one");
    assert_eq!(got.len(), 1, "the head's stand-in got the request");
    assert!(carrying(&oa, "via-litellm-one").is_empty());
    assert_eq!(got[0].path_only(), "/api/v1/chat/completions");
    assert_eq!(got[0].header("authorization"), Some("Bearer sk-test-providers"));
    assert_eq!(
        got[0].json().expect("json")["provider"],
        serde_json::json!({"order": ["OpenAI"], "allow_fallbacks": false})
    );

    // 3. or-eu fails: vigil drops it, oa-main leads, and the next request follows.
    or.mode.store(FAILING, Ordering::SeqCst);
    let (bytes, doc) = litellm_doc(&http, &base, "oa-main at the head, or-eu cooling down", |d| {
        head_of(d, "chat") == OA_MAIN
            && group(d, "openai/gpt-4o")
                .iter()
                .all(|g| g["litellm_params"]["mock_response"] == "litellm.RateLimitError")
    })
    .await;
    let second = dir.path().join("litellm-2.yaml");
    std::fs::write(&second, &bytes).expect("write");
    let answers = through_litellm(&py, &second, "chat", "via-litellm-two", 1);
    assert!(answers[0].starts_with("ok: "), "{answers:?}");
    assert_eq!(carrying(&oa, "via-litellm-two").len(), 1, "the new head's stand-in got it");
    assert!(carrying(&or, "via-litellm-two").is_empty(), "the dropped one did not");

    // 4. The open target's own group is still there, cooling down in LiteLLM: its first pick fails
    //    at once with a 429 that never reaches the provider, the next finds it in cooldown.
    let gpt = group(&doc, "openai/gpt-4o");
    assert_eq!(gpt.len(), 1, "the model group did not vanish");
    assert!(gpt[0]["model_info"]["cooldown_time"].as_u64().is_some_and(|s| (1..=60).contains(&s)), "{}", gpt[0]);
    let answers = through_litellm(&py, &second, "openai/gpt-4o", "via-litellm-three", 2);
    assert!(answers[0].contains("RateLimitError"), "{answers:?}");
    assert!(answers[1].to_lowercase().contains("cooldown"), "{answers:?}");
    assert!(carrying(&or, "via-litellm-three").is_empty(), "nothing reached the open provider");
    drop(daemon);
}

/// Seed scenario "the provider drops the system prompt": two providers serve one model; `alpha`
/// answers every probe with the recorded reply that ignores the system prompt, `beta` as asked.
/// Without the rule `alpha` keeps rank 1 (equal history, first by id); with it, once its last 3
/// judged replies disobeyed, every format tries `beta` first and `alpha` last, saying why, and
/// `alpha`'s breaker stays closed (it answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_ignores_the_system_prompt_is_demoted_and_ranked_after_a_clean_one() {
    let _timing = crate::support::timing_sensitive().await;
    let stand_in = |body: Vec<u8>| async move {
        StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1)).with_head_delay(Duration::from_millis(40)))
            .await
            .expect("stand-in")
    };
    // The recorded reply ("The capital of Mexico is Mexico City.") is not the demanded JSON.
    let alpha = stand_in(fixture("openai-chat-stream-usage.sse")).await;
    let beta = stand_in(crate::support::daemon::obeying("openai-chat-stream-usage.sse")).await;
    let daemon = spawn_daemon(|d, port| {
        format!(
            r#"
region = "test-1"
[storage]
url = "sqlite://{d}/vigil.db"
data_dir = "{d}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:{port}"
api_token_env = "VIGIL_TEST_API_TOKEN"
[probe]
interval = "1s"
timeout = "900ms"
[alerts]
error_probes = 3
[[provider]]
name = "alpha"
kind = "openai"
base_url = "{a}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["gpt-4o"]
[[provider]]
name = "beta"
kind = "openai"
base_url = "{b}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["gpt-4o"]
[[chain]]
name = "chat"
targets = ["alpha/gpt-4o", "beta/gpt-4o"]
"#,
            d = d.display(),
            a = alpha.base_url(),
            b = beta.base_url(),
        )
    })
    .await;
    let http = reqwest::Client::new();
    let base = daemon.base.clone();
    let why = "replies ignore the system prompt (last 3 of 3)";
    let doc = wait_for(&http, &base, "beta first, alpha demoted for ignoring the prompt", |(order, dropped)| {
        dropped.is_empty()
            && order.len() == 2
            && order[0] == ("beta/gpt-4o".to_string(), "healthy".to_string(), String::new())
            && order[1].0 == "alpha/gpt-4o"
            && order[1].1 == "demoted"
            && order[1].2.contains(why)
    })
    .await;
    let row = |id: &str| doc["targets"].as_array().and_then(|t| t.iter().find(|t| t["target"] == id)).cloned();
    let (a, b) = (row("alpha/gpt-4o").expect("alpha"), row("beta/gpt-4o").expect("beta"));
    assert_eq!((b["rank"].as_u64(), a["rank"].as_u64()), (Some(1), Some(2)), "clean first: {doc}");
    assert_eq!(a["breaker"], "closed", "it answers: {a}");
    assert!(alpha.requests().len() >= 3 && beta.requests().len() >= 3, "both were probed");

    // What a router loads: LiteLLM's model group and Portkey's chain config try beta first.
    let get = |format: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let url = format!("{base}/v1/thresholds?format={format}");
            let resp = http.get(url).bearer_auth(TOKEN).send().await.expect("format");
            // LiteLLM's is YAML, the others JSON: a YAML parser reads both.
            let body = resp.bytes().await.expect("body");
            serde_norway::from_slice::<serde_json::Value>(&body).expect("a document")
        }
    };
    let lite = get("litellm").await;
    let models: Vec<&str> = lite["model_list"]
        .as_array()
        .expect("model_list")
        .iter()
        .filter(|d| d["model_name"] == "gpt-4o")
        .map(|d| d["litellm_params"]["api_base"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(models, [format!("{}/v1", beta.base_url()), format!("{}/v1", alpha.base_url())], "{lite}");
    let portkey = get("portkey").await;
    let targets: Vec<&str> = portkey["configs"]["chat"]["targets"]
        .as_array()
        .expect("chat config")
        .iter()
        .map(|t| t["override_params"]["model"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(targets, ["@beta/gpt-4o", "@alpha/gpt-4o"], "{portkey}");
    drop(daemon);
}
