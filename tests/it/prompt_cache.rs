//! Optional tier: probes against a real inference server that reuses the KV cache of a repeated
//! prompt prefix (llama-cpp-python's server), with a tiny random-weight model the test writes.
//! With vigil's per-probe nonce every repeat probe pays for its whole prompt, like the first;
//! the control (the same prompt sent again) is answered from cache and is clearly faster.
//!
//! The venv comes from scripts/llama-tier.sh (run by scripts/test.sh), cached outside the clone
//! at `${XDG_CACHE_HOME:-$HOME/.cache}/vigil-llama-venv` or `VIGIL_LLAMA_VENV`. Without it, or when
//! the model or server cannot be made, the test prints why and skips.

use chrono::Utc;
use secrecy::SecretString;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil::config::{ProbeConfig, ProviderConfig, ProviderKind};
use vigil::io::probe::{Planned, Prober, SYSTEM_PROMPT, USER_PROMPT};
use vigil::vocab::sample::Outcome;
use vigil::vocab::target::Target;

/// Probes per series (the first is the cold one).
const ROUNDS: usize = 5;

fn venv() -> PathBuf {
    if let Ok(v) = std::env::var("VIGIL_LLAMA_VENV") {
        return PathBuf::from(v);
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| ".".into())).join(".cache"));
    cache.join("vigil-llama-venv")
}

fn skip(why: &str) {
    crate::support::optional_tier_missing(&format!("prompt_cache: {why}"));
    eprintln!("SKIPPED prompt_cache: {why}");
}

/// The server process, killed when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Sends the same chat request every time and returns the time to the first content delta.
async fn identical_prompt_ttft(client: &reqwest::Client, base: &str) -> f64 {
    let body = serde_json::json!({
        "model": "tiny", "stream": true, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": USER_PROMPT}],
    });
    let sent = Instant::now();
    let mut resp = client.post(format!("{base}/chat/completions")).json(&body).send().await.expect("control request");
    assert!(resp.status().is_success(), "control request: {}", resp.status());
    let mut seen = String::new();
    while let Some(chunk) = resp.chunk().await.expect("control stream") {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        let has_content = seen.lines().filter_map(|l| l.strip_prefix("data: ")).any(|d| {
            serde_json::from_str::<serde_json::Value>(d)
                .ok()
                .and_then(|v| v["choices"][0]["delta"]["content"].as_str().map(|t| !t.is_empty()))
                .unwrap_or(false)
        });
        if has_content {
            return sent.elapsed().as_secs_f64() * 1000.0;
        }
    }
    panic!("control stream ended without content: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonce_probes_are_not_answered_from_the_prompt_cache() {
    let python = venv().join("bin/python");
    if !python.exists() {
        return skip(&format!("no llama venv at {} (scripts/llama-tier.sh builds it)", venv().display()));
    }
    match Command::new(&python).args(["-c", "import llama_cpp.server, gguf, numpy"]).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr);
            return skip(&format!(
                "llama venv at {} is incomplete: {}",
                venv().display(),
                why.lines().last().unwrap_or("")
            ));
        }
        Err(e) => return skip(&format!("cannot run {}: {e}", python.display())),
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("tiny.gguf");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/support/tiny_gguf.py");
    match Command::new(&python).arg(script).arg(&model).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => return skip(&format!("tiny model not written: {}", String::from_utf8_lossy(&o.stderr))),
        Err(e) => return skip(&format!("cannot run {}: {e}", python.display())),
    }
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
    let child = Command::new(&python)
        .args(["-m", "llama_cpp.server", "--host", "127.0.0.1", "--n_ctx", "1024", "--n_threads", "1"])
        .arg("--port")
        .arg(port.to_string())
        .arg("--model")
        .arg(&model)
        .args(["--model_alias", "tiny"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn();
    let _server = match child {
        Ok(c) => Server(c),
        Err(e) => return skip(&format!("cannot start llama_cpp.server: {e}")),
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let client = reqwest::Client::new();
    let models = format!("{base}/models");
    let up = crate::support::poll_until(Duration::from_secs(120), || async {
        client.get(&models).send().await.is_ok_and(|r| r.status().is_success()).then_some(())
    });
    if up.await.is_none() {
        let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
        panic!("llama_cpp.server did not come up in 120 s:\n{log}");
    }

    let provider = ProviderConfig {
        api_key: Some(SecretString::from("sk-test-llama")),
        models: vec!["tiny".into()],
        ..ProviderConfig::new("llama", ProviderKind::Openai, base.parse().expect("url"))
    };
    let plan = Planned {
        target: Target::new("llama".into(), "tiny".into(), None, "test".into()),
        provider: Arc::new(provider),
    };
    let cfg = ProbeConfig {
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        ttft_timeout: Duration::from_secs(60),
        max_tokens: 8,
        concurrency: 1,
        daily_budget_usd: 5.0,
        max_body_bytes: 1 << 20,
        proxy: Default::default(),
        ca_file: None,
        ca_certs: Vec::new(),
    };
    let prober = Prober::new(cfg, &[]);
    // One unmeasured probe first: the server's first evaluation also pays one-off set-up costs.
    let _ = prober.probe(&plan, Utc::now()).await;

    let mut nonce_ttft = Vec::new();
    for _ in 0..ROUNDS {
        let s = prober.probe(&plan, Utc::now()).await;
        assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
        nonce_ttft.push(s.ttft_ms.expect("ttft"));
    }
    let mut same_ttft = Vec::new();
    for _ in 0..ROUNDS {
        same_ttft.push(identical_prompt_ttft(&client, &base).await);
    }
    println!("TTFT ms with a nonce per probe: {nonce_ttft:.1?}");
    println!("TTFT ms with an identical prompt: {same_ttft:.1?}");

    // Shared CPU makes single figures noisy (a stalled request can take a second), so every
    // check compares a median or a minimum with wide margins, and the cold cost is the lower of
    // two independent cold evaluations; the gap looked for is evaluating the prompt or not.
    let cold = same_ttft[0].min(nonce_ttft[0]);
    let cached = median(same_ttft[1..].to_vec());
    assert!(
        cached < same_ttft[0] * 0.5,
        "control: the server must answer a repeated prompt from cache ({:.1} ms cold, {cached:.1} ms repeated)",
        same_ttft[0]
    );
    let repeats = median(nonce_ttft[1..].to_vec());
    assert!(
        repeats > cold * 0.5,
        "with a nonce, repeats pay for the whole prompt like a first probe ({cold:.1} ms cold, {repeats:.1} ms repeated)"
    );
    let fastest_nonce = nonce_ttft[1..].iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        fastest_nonce > cached * 2.0,
        "no nonce probe is answered from cache ({fastest_nonce:.1} ms fastest nonce probe, {cached:.1} ms a cache hit)"
    );
}
