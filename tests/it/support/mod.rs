//! What the integration tests share: a running daemon with a config builder (`daemon`), the
//! binary as a child process (`process`), real
//! loopback peers (`alert_receiver`, `smtp_server`, `tcp_proxy`), `promtool`, the both-backends
//! store fixtures and rule builders (`store`), wire fixtures (`fixture`), waiting for a condition
//! (`eventually`), and tool tiers that skip with a printed reason where a tool is missing.
#![allow(dead_code)]

pub mod alert_receiver;
pub mod cli;
pub mod daemon;
pub mod process;
pub mod promtool;
pub mod smtp_server;
pub mod store;
pub mod tcp_proxy;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The `[probe]` settings of the prober-level tests: short timeouts, `concurrency` probes at once.
pub fn probe_config(concurrency: usize) -> vigil::config::ProbeConfig {
    vigil::config::ProbeConfig {
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        ttft_timeout: Duration::from_secs(3),
        max_tokens: 16,
        concurrency,
        daily_budget_usd: 5.0,
        max_body_bytes: 256 * 1024,
        proxy: Default::default(),
        ca_file: None,
        ca_certs: Vec::new(),
    }
}

/// Held by the tests whose verdicts rest on measured latency (a heavy tail that must not page, a
/// reorder within one probe interval): in one test binary they would otherwise run beside each
/// other and each other's load would be in their numbers. Other tests still run alongside.
pub async fn timing_sensitive() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `within` naming `what`.
/// The one "wait until" of the suite: a deadline, never a fixed sleep.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match poll_until(within, check).await {
        Some(v) => v,
        None => panic!("waited {within:?} for {what}"),
    }
}

/// [`eventually`] for a yes/no condition (`async || health.spooled() == 0`).
pub async fn until(within: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`eventually`] that returns `None` at the deadline, for a caller whose panic message shows
/// what it saw instead.
pub async fn poll_until<T, F, Fut>(within: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fetches a value every 100 ms until `done` accepts it or `within` has passed, and returns the
/// last one either way: for waits whose following assertions say what was wrong with it.
pub async fn settle<T, F, Fut>(within: Duration, mut fetch: F, done: impl Fn(&T) -> bool) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let value = fetch().await;
        if done(&value) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The bytes of `tests/fixtures/<name>` (a subdirectory may be part of `name`).
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// `tests/fixtures/<name>` as text.
pub fn fixture_text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap_or_else(|e| panic!("fixture {name} is not UTF-8: {e}"))
}

/// Whether `tool` can run here (`tool --version`, or `args` when given). When it cannot, the
/// test skips with a printed reason, unless `VIGIL_REQUIRE_TOOLS=1` (set by `scripts/test.sh`,
/// which installs every tool) makes a missing tool a failure, so CI never skips silently.
pub fn tool_available(tool: &str, args: &[&str], install: &str) -> bool {
    let args: &[&str] = if args.is_empty() { &["--version"] } else { args };
    let found = std::process::Command::new(tool)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    found || tool_missing(tool, install)
}

/// `tool` as found on `PATH` (for tests that run it from another directory), or `None` after
/// the same skip-or-fail rule as [`tool_available`].
pub fn tool_on_path(tool: &str, install: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|dir| dir.join(tool)).find(|p| p.is_file()));
    if found.is_none() {
        tool_missing(tool, install);
    }
    found
}

/// The one rule for a missing tool that `scripts/test.sh` installs: under `VIGIL_REQUIRE_TOOLS=1`
/// the test fails naming the package; otherwise it prints why it skips. Always returns `false`.
pub fn tool_missing(tool: &str, install: &str) -> bool {
    assert!(
        std::env::var("VIGIL_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{tool} is required here (VIGIL_REQUIRE_TOOLS=1) but not runnable; install: {install}"
    );
    println!("SKIPPED: {tool} is not runnable here ({install}); scripts/test.sh installs it");
    false
}

/// A tier `scripts/test.sh` only tries to build (a venv, a wheel that needs a package index):
/// it skips with the printed reason even under `VIGIL_REQUIRE_TOOLS=1`, as that script documents.
pub fn optional_tier_missing(reason: &str) {
    println!("SKIPPED: {reason}");
}

/// Counts the `lost = n` fields of every event the daemon logs ("cannot spool samples; they are
/// lost"), so a test can prove each sample is stored or reported lost.
struct LostCounter(Arc<AtomicU64>);

struct LostVisitor(u64);

impl tracing::field::Visit for LostVisitor {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "lost" {
            self.0 += value;
        }
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        if field.name() == "lost" {
            self.0 += u64::try_from(value).unwrap_or(0);
        }
    }
    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LostCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut v = LostVisitor(0);
        event.record(&mut v);
        self.0.fetch_add(v.0, Ordering::SeqCst);
    }
}

/// The suite's one global tracing subscriber (a test binary can set only one): logs at WARN (or
/// `RUST_LOG`) through the test writer, and counts reported losses. Returns that counter.
pub fn lost_counter() -> Arc<AtomicU64> {
    static COUNTER: OnceLock<Arc<AtomicU64>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            use tracing_subscriber::layer::SubscriberExt;
            use tracing_subscriber::Layer;
            let counter = Arc::new(AtomicU64::new(0));
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
            let subscriber = tracing_subscriber::registry()
                .with(LostCounter(counter.clone()))
                .with(tracing_subscriber::fmt::layer().with_test_writer().with_filter(filter));
            // Ignored when something else set one first: the counter then stays at zero and the
            // test that needs it fails on its own assertion, not here.
            let _ = tracing::subscriber::set_global_default(subscriber);
            counter
        })
        .clone()
}
