//! What the integration tests share: real loopback peers (`alert_receiver`, `smtp_server`,
//! `tcp_proxy`), `promtool`, the both-backends store fixtures (`store`), waiting for a condition
//! (`eventually`), and tool tiers that skip with a printed reason where a tool is missing.
#![allow(dead_code)]

pub mod alert_receiver;
pub mod promtool;
pub mod smtp_server;
pub mod store;
pub mod tcp_proxy;

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 100 ms until it returns `Some`, or panics after `within` naming `what`.
/// The one "wait until" of the suite: a deadline, never a fixed sleep.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    if found {
        return true;
    }
    assert!(
        std::env::var("VIGIL_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{tool} is required here (VIGIL_REQUIRE_TOOLS=1) but not runnable; install: {install}"
    );
    println!("SKIPPED: {tool} is not installed ({install}); scripts/test.sh installs it");
    false
}
