//! A real vigil daemon for a test: `DaemonConfig` writes its TOML (loopback port, SQLite in the
//! test's directory or a fresh PostgreSQL database), `spawn_app` runs it in-process, and the
//! returned `Daemon` gives its address and metrics and stops it with a drain.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toml::{Table, Value};
use vigil::config::Config;
use vigil::io::metrics::Metrics;
use vigil::run::app::{App, AppError, AppOptions};

/// The variable every test provider reads its key from.
pub const KEY_ENV: &str = "VIGIL_TEST_KEY";

/// The first lines of a process test's TOML: `region`, storage at `db_url` with `data` as its
/// data directory and a 200 ms batch age, listening on loopback `port`. It ends inside the
/// `[http]` table, so a caller may add an `[http]` key before its own tables.
pub fn header_toml(region: &str, db_url: &str, data: &Path, port: u16) -> String {
    format!(
        r#"region = "{region}"
[storage]
url = "{db_url}"
data_dir = "{data}"
batch_age = "200ms"
[http]
listen = "127.0.0.1:{port}"
"#,
        data = data.display()
    )
}

/// The TOML of a daemon in `region` probing `steady/<model>` for each of `models` at `base`
/// every second (900 ms timeout), storing into `db_url` with `data` as its data directory and
/// listening on loopback `port`: the process tests' one steady target.
pub fn steady_toml(region: &str, db_url: &str, data: &Path, port: u16, base: &str, models: &[&str]) -> String {
    let models: Vec<String> = models.iter().map(|m| format!("\"{m}\"")).collect();
    header_toml(region, db_url, data, port)
        + &format!(
            r#"[probe]
interval = "1s"
timeout = "900ms"
[[provider]]
name = "steady"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "{KEY_ENV}"
models = [{models}]
"#,
            models = models.join(", ")
        )
}

/// A daemon's config as a builder: one region probing every second (900 ms timeout), listening
/// on a free loopback port and flushing samples every 100 ms; providers, alert channels and any
/// other key added by the test.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    doc: Table,
    providers: Vec<Value>,
    webhooks: Vec<Value>,
    env: BTreeMap<String, String>,
}

impl DaemonConfig {
    /// Stores in `dir/vigil.db` (SQLite), with `dir` as the data directory.
    pub fn sqlite(dir: &Path) -> Self {
        Self::new(&format!("sqlite://{}/vigil.db", dir.display()), dir)
    }

    /// Stores at `url` (a PostgreSQL test database or a shared SQLite file), spooling in `data_dir`.
    pub fn new(url: &str, data_dir: &Path) -> Self {
        let mut doc = Table::new();
        doc.insert("storage".into(), table([("url", url.into()), ("data_dir", data_dir.display().to_string().into())]));
        DaemonConfig { doc, providers: Vec::new(), webhooks: Vec::new(), env: BTreeMap::new() }
            .set("storage.batch_age", "100ms")
            .set("http.listen", "127.0.0.1:0")
            .set("probe.interval", "1s")
            .set("probe.timeout", "900ms")
    }

    /// The region this instance reports as.
    pub fn region(self, region: &str) -> Self {
        self.set("region", region)
    }

    /// Sets any key by its dotted path (`"breaker.open_for"`), creating the tables on the way.
    pub fn set(mut self, path: &str, value: impl Into<Value>) -> Self {
        let mut keys: Vec<&str> = path.split('.').collect();
        let last = keys.pop().expect("a key");
        let mut at = &mut self.doc;
        for key in keys {
            at = at
                .entry(key)
                .or_insert_with(|| Value::Table(Table::new()))
                .as_table_mut()
                .unwrap_or_else(|| panic!("{key} in {path} is not a table"));
        }
        at.insert(last.into(), value.into());
        self
    }

    /// Adds a `[[provider]]`.
    pub fn provider(mut self, provider: Provider) -> Self {
        self.providers.push(Value::Table(provider.0));
        self
    }

    /// Adds a webhook channel posting to `url` (through `VIGIL_TEST_HOOK`).
    pub fn webhook(mut self, url: &str) -> Self {
        self.webhooks.push(table([("url_env", "VIGIL_TEST_HOOK".into())]));
        self.env("VIGIL_TEST_HOOK", url)
    }

    /// Adds a webhook channel posting to `url`, signed with `secret` (through `VIGIL_TEST_HOOK_SECRET`).
    pub fn signed_webhook(mut self, url: &str, secret: &str) -> Self {
        self.webhooks
            .push(table([("url_env", "VIGIL_TEST_HOOK".into()), ("secret_env", "VIGIL_TEST_HOOK_SECRET".into())]));
        self.env("VIGIL_TEST_HOOK", url).env("VIGIL_TEST_HOOK_SECRET", secret)
    }

    /// The value of `KEY_ENV`, the providers' API key.
    pub fn key(self, key: &str) -> Self {
        self.env(KEY_ENV, key)
    }

    /// Sets an environment variable the config reads.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// The environment the config is loaded with (for running the binary on `toml()`).
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// The config file's text.
    pub fn toml(&self) -> String {
        let mut doc = self.doc.clone();
        if !self.webhooks.is_empty() {
            let alerts = doc.entry("alerts").or_insert_with(|| Value::Table(Table::new()));
            let alerts = alerts.as_table_mut().expect("[alerts] is a table");
            alerts.insert("webhook".into(), Value::Array(self.webhooks.clone()));
        }
        if !self.providers.is_empty() {
            doc.insert("provider".into(), Value::Array(self.providers.clone()));
        }
        doc.to_string()
    }

    /// The loaded config; a test's config is always valid.
    pub fn build(&self) -> Config {
        let text = self.toml();
        Config::from_toml(&text, &self.env).unwrap_or_else(|e| panic!("invalid test config: {e}\n{text}"))
    }
}

/// One `[[provider]]` of a [`DaemonConfig`].
#[derive(Debug, Clone)]
pub struct Provider(Table);

impl Provider {
    /// An OpenAI-compatible provider at `base_url`, keyed by `KEY_ENV`, probing model `m`.
    pub fn openai(name: &str, base_url: &str) -> Self {
        Provider::named(name, base_url).set("kind", "openai")
    }

    /// A provider whose kind follows from its name (a built-in such as `openrouter`).
    pub fn named(name: &str, base_url: &str) -> Self {
        Provider(Table::new()).set("name", name).set("base_url", base_url).set("api_key_env", KEY_ENV).models(&["m"])
    }

    /// A plain-HTTP target (kind `http`): no key, no model.
    pub fn http(name: &str, base_url: &str) -> Self {
        Provider(Table::new()).set("name", name).set("kind", "http").set("base_url", base_url)
    }

    /// The models it probes.
    pub fn models(self, models: &[&str]) -> Self {
        self.set("models", strings(models))
    }

    /// Sets any key of this provider (`routes`, `balance`, …).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.into(), value.into());
        self
    }
}

/// A TOML array of strings.
pub fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::from(*s)).collect())
}

/// An inline TOML table from its pairs.
pub fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// A daemon running in this process until `stop`.
pub struct Daemon {
    /// Where its HTTP server listens.
    pub addr: SocketAddr,
    /// `http://addr`.
    pub base: String,
    /// Its metrics registry, readable after the stop.
    pub metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), AppError>>,
}

/// Builds and starts the daemon `config` describes.
pub async fn spawn_app(config: Config) -> Daemon {
    spawn_app_with(config, AppOptions::default()).await
}

/// Builds and starts a daemon with start-up options (`--demo`).
pub async fn spawn_app_with(config: Config, options: AppOptions) -> Daemon {
    let app = App::build(config, options).await.expect("app builds");
    let addr = app.local_addr().expect("bound");
    let metrics = app.metrics();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    Daemon { addr, base: format!("http://{addr}"), metrics, shutdown, task }
}

impl Daemon {
    /// The URL of `path` on this daemon.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The current `/metrics` exposition, as scraped.
    pub async fn scrape(&self) -> String {
        let response = reqwest::get(self.url("/metrics")).await.expect("metrics");
        response.text().await.expect("metrics body")
    }

    /// Stops it as a signal does, and asserts it drained and returned cleanly within 10 s.
    pub async fn stop(self) {
        self.stop_within(Duration::from_secs(10)).await;
    }

    /// [`Daemon::stop`] with a longer drain allowance.
    pub async fn stop_within(self, within: Duration) {
        stop_all(vec![self], within).await;
    }
}

/// Signals every daemon at once (as a fleet is stopped), then asserts each drained cleanly
/// within `within`.
pub async fn stop_all(daemons: Vec<Daemon>, within: Duration) {
    for daemon in &daemons {
        daemon.shutdown.cancel();
    }
    for daemon in daemons {
        let stopped = tokio::time::timeout(within, daemon.task).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "run_until_stopped returns cleanly: {stopped:?}");
    }
}

/// An OpenAI chat stream whose answer obeys the probe's system prompt (`{"ok":true}`), so a
/// healthy stand-in raises no `adherence_failed`.
pub fn adherent_stream() -> Vec<u8> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let v = serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    let mut out = chunk(serde_json::json!({"role": "assistant", "content": ""}), serde_json::Value::Null);
    out.push_str(&chunk(serde_json::json!({"content": "{\"ok\":"}), serde_json::Value::Null));
    out.push_str(&chunk(serde_json::json!({"content": "true}"}), serde_json::Value::Null));
    out.push_str(&chunk(serde_json::json!({}), serde_json::json!("stop")));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// A recorded stream (`tests/fixtures/<name>`) whose answer is replaced by the one the probe's
/// system prompt demands (`{"ok":true}`), so its replies pass the adherence check: the first
/// non-empty text delta (OpenAI `choices[0].delta.content`, Anthropic `delta.text`) carries it,
/// later ones are emptied, every other byte stays as recorded.
pub fn obeying(name: &str) -> Vec<u8> {
    let mut answered = false;
    let mut out = String::new();
    for line in crate::support::fixture_text(name).split_inclusive('\n') {
        let parsed = line.strip_prefix("data: ").and_then(|j| serde_json::from_str::<serde_json::Value>(j.trim()).ok());
        let Some(mut v) = parsed else {
            out.push_str(line);
            continue;
        };
        for path in ["/choices/0/delta/content", "/delta/text"] {
            if let Some(slot) = v.pointer_mut(path).filter(|s| s.as_str().is_some_and(|t| !t.is_empty())) {
                *slot = serde_json::Value::from(if answered { "" } else { "{\"ok\":true}" });
                answered = true;
            }
        }
        out.push_str(&format!("data: {v}\n"));
    }
    assert!(answered, "{name} has no text delta to answer in");
    out.into_bytes()
}

/// `(status, kinds, summaries)` of each delivery a webhook receiver got (`update` for an
/// update of an open incident), in arrival order.
pub fn webhook_deliveries(hook: &vigil::run::demo::standin::StandIn) -> Vec<(String, Vec<String>, Vec<String>)> {
    hook.requests()
        .iter()
        .filter_map(|r| r.json())
        .map(|v| {
            let alerts = v["alerts"].as_array().cloned().unwrap_or_default();
            let field = |k: &str| alerts.iter().filter_map(|a| a[k].as_str().map(String::from)).collect();
            let status = if v["update"] == true { "update" } else { v["status"].as_str().unwrap_or_default() };
            (status.to_string(), field("kind"), field("summary"))
        })
        .collect()
}
