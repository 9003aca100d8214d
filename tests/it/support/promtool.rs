//! `promtool check metrics` on a scraped exposition: the check Prometheus users run.

use std::io::Write;
use std::process::{Command, Stdio};

/// Fails the test with promtool's own words when `text` is not valid exposition.
pub fn check_metrics(text: &str) {
    if !super::tool_available("promtool", &[], "apt-get install -y prometheus") {
        return;
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool must be installed (Debian package `prometheus`; scripts/test.sh installs it)");
    promtool.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write");
    let out = promtool.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
