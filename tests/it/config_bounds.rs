//! The real binary refuses out-of-range and unsafe config with exit 2 and a message naming the
//! key, never a panic (exit 101), and never echoes an inline secret.

use std::process::Command;

/// `vigil check-config` on `text`; returns (exit code, stderr).
fn check(text: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("vigil.toml");
    std::fs::write(&path, text).expect("write config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vigil"));
    cmd.args(["check-config", "--config"]).arg(&path).env_remove("DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("vigil runs");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn values_that_used_to_panic_or_wrap_exit_2_naming_the_key() {
    let cases = [
        ("[probe]\ninterval = \"1000000000y\"", "probe.interval"),
        ("[probe]\ninterval = \"500ms\"", "probe.interval"),
        ("[probe]\nconcurrency = 9223372036854775807", "probe.concurrency"),
        ("[probe]\nmax_body_kb = 18014398509481984", "probe.max_body_kb"),
        ("[storage]\nretention_days = 4000000000", "storage.retention_days"),
        ("[baseline]\nwindow = \"100000y\"", "baseline.window"),
    ];
    for (text, key) in cases {
        let (code, out) = check(text, &[]);
        assert_eq!(code, Some(2), "{text}: {out}");
        assert!(out.contains(&format!("{key}: ")), "{text}: the message names {key}: {out}");
    }
}

#[test]
fn an_inline_secret_header_exits_2_without_printing_it() {
    let text = "[[provider]]\nname = \"azure\"\nkind = \"openai\"\nbase_url = \"https://example.invalid/v1\"\n\
                api_key_env = \"VIGIL_CB_KEY\"\nmodels = [\"m\"]\nheaders = { \"api-key\" = \"inline-secret-0123456789\" }\n";
    let (code, out) = check(text, &[("VIGIL_CB_KEY", "sk-test-cb")]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("provider[0].headers.api-key") && out.contains("headers_env"), "{out}");
    assert!(!out.contains("inline-secret-0123456789"), "{out}");

    let text = text.replace(
        "headers = { \"api-key\" = \"inline-secret-0123456789\" }",
        "headers_env = { \"api-key\" = \"VIGIL_CB_HEADER\" }",
    );
    let (code, out) = check(&text, &[("VIGIL_CB_KEY", "sk-test-cb"), ("VIGIL_CB_HEADER", "env-secret-0123456789")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("VIGIL_CB_HEADER"), "check-config names the variable: {out}");
    assert!(!out.contains("env-secret-0123456789") && !out.contains("sk-test-cb"), "{out}");
}
