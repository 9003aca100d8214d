//! Secrets from files: `*_file` keys, `<VAR>_FILE` twins, `VIGIL_*_FILE` and `DATABASE_URL_FILE`,
//! read by the real binary (`check-config` and `run`), used, and never printed or logged.

use crate::support::fixture;
use std::process::{Command, Stdio};
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

const API_KEY: &str = "sk-test-from-a-file-7f3a";
const TOKEN: &str = "token-from-a-file-91c2";
const DB_PASSWORD: &str = "pw-from-a-file-c0ffee";

fn vigil() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vigil"))
}

/// Writes `body` (with the newline editors and `kubectl create secret --from-file` leave) to `dir/name`.
fn secret(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{body}\n")).expect("write secret");
    path
}

#[test]
fn check_config_reads_secret_files_never_prints_them_and_reads_its_output_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = secret(dir.path(), "database-url", &format!("postgres://vigil:{DB_PASSWORD}@db.example/vigil"));
    let key = secret(dir.path(), "openai-key", API_KEY);
    let slack = secret(dir.path(), "slack", "https://hooks.slack.example/services/T000/B000/sk-test-slack");
    let config = dir.path().join("vigil.toml");
    std::fs::write(
        &config,
        format!(
            "[[provider]]\nname = \"openai\"\napi_key_file = \"{}\"\n[[alerts.slack]]\nwebhook_url_file = \"{}\"\n",
            key.display(),
            slack.display()
        ),
    )
    .expect("write config");
    let run = |config: &std::path::Path| {
        vigil()
            .args(["check-config", "--config"])
            .arg(config)
            .env("DATABASE_URL_FILE", &db)
            .env_remove("DATABASE_URL")
            .env_remove("OPENAI_API_KEY")
            .output()
            .expect("vigil runs")
    };
    let out = run(&config);
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{err}");
    assert!(text.contains("postgres://vigil:redacted@db.example/vigil"), "the URL came from the file:\n{text}");
    assert!(text.contains(&format!("api_key_file = \"{}\"", key.display())), "{text}");
    assert!(!text.contains("is skipped"), "the key from the file enables the provider:\n{text}");
    for s in [DB_PASSWORD, API_KEY, "sk-test-slack"] {
        assert!(!text.contains(s) && !err.contains(s), "{s} leaked:\n{text}\n{err}");
    }
    // The printed document is a config `--config` accepts back, still reading the same files.
    let again = dir.path().join("printed.toml");
    std::fs::write(&again, text.as_bytes()).expect("write");
    let out = run(&again);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_unreadable_secret_file_is_a_config_error_naming_the_key_and_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-secret");
    let config = dir.path().join("vigil.toml");
    let check = |toml: String, env: &[(&str, &std::path::Path)]| {
        std::fs::write(&config, toml).expect("write config");
        let mut cmd = vigil();
        cmd.args(["check-config", "--config"]).arg(&config);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("vigil runs");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = check(String::new(), &[("DATABASE_URL_FILE", &missing)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("DATABASE_URL_FILE: cannot read {}", missing.display())), "{err}");

    let (code, err) = check(String::new(), &[("VIGIL_HTTP_LISTEN_FILE", &missing)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("VIGIL_HTTP_LISTEN_FILE: cannot read {}", missing.display())), "{err}");

    let toml = format!("[[alerts.pagerduty]]\nrouting_key_file = \"{}\"\n", missing.display());
    let (code, err) = check(toml, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("alerts.pagerduty[0].routing_key_file: cannot read {}", missing.display())), "{err}");
}

/// Picks a free loopback port for a child process to listen on.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_uses_secrets_read_from_files_and_never_logs_them() {
    // The provider answers only the key from the file.
    let body = fixture("openai-chat-stream-usage.sse");
    let err = fixture("openai-error-401.json");
    let provider = StandIn::start(move |req| match req.header("authorization") {
        Some(v) if v == format!("Bearer {API_KEY}") => Script::sse(&body, Duration::from_millis(1)),
        _ => Script::json(401, &err),
    })
    .await
    .expect("stand-in");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = secret(dir.path(), "api-key", API_KEY);
    let token = secret(dir.path(), "api-token", TOKEN);
    let db = secret(dir.path(), "database-url", &format!("sqlite://{}/vigil.db", dir.path().display()));
    let port = free_port();
    let config = dir.path().join("vigil.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\ndata_dir = \"{d}\"\nbatch_age = \"100ms\"\n[http]\nlisten = \"127.0.0.1:{port}\"\n\
             [probe]\ninterval = \"1s\"\ntimeout = \"900ms\"\n\
             [[provider]]\nname = \"filed\"\nkind = \"openai\"\nbase_url = \"{}/v1\"\napi_key_file = \"{}\"\nmodels = [\"m1\"]\n",
            provider.base_url(),
            key.display(),
            d = dir.path().display(),
        ),
    )
    .expect("write config");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["run", "--config"])
        .arg(&config)
        .env("DATABASE_URL_FILE", &db)
        .env("VIGIL_API_TOKEN_FILE", &token)
        .env_remove("DATABASE_URL")
        .env_remove("VIGIL_API_TOKEN")
        .env("VIGIL_LOG", "vigil=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("vigil run starts");
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let probed_ok = || async {
        let Ok(r) = http.get(format!("{base}/metrics")).send().await else { return false };
        let text = r.text().await.unwrap_or_default();
        text.lines().any(|l| {
            l.starts_with("vigil_probes_total{")
                && l.contains(r#"outcome="ok""#)
                && l.contains(r#"provider="filed""#)
                && !l.ends_with(" 0")
        })
    };
    let ok = crate::support::settle(Duration::from_secs(15), probed_ok, |ok| *ok).await;
    assert!(ok, "probes with the key from the file succeeded");
    let targets = format!("{base}/v1/targets");
    let without = http.get(&targets).send().await.expect("request");
    assert_eq!(without.status(), 401, "the token from the file guards /v1");
    let with = http.get(&targets).bearer_auth(TOKEN).send().await.expect("request");
    assert_eq!(with.status(), 200);
    assert!(dir.path().join("vigil.db").exists(), "storage.url came from DATABASE_URL_FILE");

    let pid = i32::try_from(child.id().expect("running")).expect("pid");
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let out = tokio::time::timeout(Duration::from_secs(15), child.wait_with_output())
        .await
        .expect("vigil stops within 15 s of SIGTERM")
        .expect("output");
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(log.contains("vigil running"), "{log}");
    for s in [API_KEY, TOKEN] {
        assert!(!log.contains(s), "{s} was logged:\n{log}");
    }
}

/// Runs `vigil <args…>` and waits at most `bound` for it: a hang is a failure, not a stuck test.
fn vigil_within(args: &[&str], config: &std::path::Path, bound: Duration) -> (Option<i32>, String) {
    let mut child = vigil()
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("OPENAI_API_KEY")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vigil runs");
    let deadline = std::time::Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).expect("stderr");
            }
            return (status.code(), err);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("vigil {args:?} still running after {bound:?}: it hung on a secret file");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_fifo_a_device_an_oversized_file_or_a_key_with_a_line_feed_is_a_config_error_never_a_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("key-fifo");
    let c_path = std::ffi::CString::new(fifo.display().to_string()).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    let oversized = dir.path().join("key-huge");
    std::fs::write(&oversized, "sk-test-".repeat(70 * 1024 / 8)).expect("write");
    let two_lines = secret(dir.path(), "key-two-lines", "sk-test-line-one\nsk-test-line-two");
    let cases: [(&std::path::Path, &str); 5] = [
        (&fifo, "is a FIFO"),
        (std::path::Path::new("/dev/zero"), "is a device"),
        (&oversized, "larger than 64 KB"),
        (&two_lines, "control character (line feed)"),
        (dir.path(), "is a directory"),
    ];
    let config = dir.path().join("vigil.toml");
    // Bound far above a config check (milliseconds), far below "forever".
    let bound = Duration::from_secs(20);
    for (path, why) in cases {
        std::fs::write(
            &config,
            format!(
                "[storage]\ndata_dir = \"{}\"\n[[provider]]\nname = \"openai\"\napi_key_file = \"{}\"\n",
                dir.path().display(),
                path.display()
            ),
        )
        .expect("write config");
        for command in [&["check-config"][..], &["run"][..]] {
            let (code, err) = vigil_within(command, &config, bound);
            assert_eq!(code, Some(2), "{command:?} with {}: {err}", path.display());
            let named = format!("provider[0].api_key_file: {}", path.display());
            assert!(err.contains(&named) && err.contains(why), "{command:?}: expected {named:?} … {why:?} in:\n{err}");
            assert!(!err.contains("sk-test-line"), "the content is never echoed:\n{err}");
        }
    }
    assert!(!dir.path().join("vigil.db").exists(), "run refused before opening storage");
}
