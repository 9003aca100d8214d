//! The command line tells the truth: `probe`'s exit code follows the targets, `check-config`
//! prints a config `--config` reads back and refuses what `run` refuses, logs carry no colour
//! escapes off a terminal and are flat JSON when asked, and completions and the man page exist.

use crate::support::cli::{output, vigil_in};
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn ok_and_down() -> (StandIn, StandIn) {
    let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"ok\\\":true}\"}}]}\n\ndata: [DONE]\n\n".to_vec();
    let ok = StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in");
    let down = StandIn::start(|_| Script::json(503, br#"{"error":{"message":"overloaded"}}"#)).await.expect("stand-in");
    (ok, down)
}

fn two_targets(ok: &StandIn, down: &StandIn, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("vigil.toml");
    let text = format!(
        "[storage]\nurl = \"sqlite://{d}/vigil.db\"\ndata_dir = \"{d}\"\n[http]\nlisten = \"127.0.0.1:0\"\n\
         [[provider]]\nname = \"fast\"\nkind = \"openai\"\nbase_url = \"http://{}/v1\"\napi_key_env = \"VIGIL_TEST_KEY\"\nmodels = [\"m1\"]\n\
         [[provider]]\nname = \"broken\"\nkind = \"openai\"\nbase_url = \"http://{}/v1\"\napi_key_env = \"VIGIL_TEST_KEY\"\nmodels = [\"m1\"]\n",
        ok.addr(),
        down.addr(),
        d = dir.display()
    );
    std::fs::write(&path, text).expect("write config");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_exits_1_when_a_target_fails_and_0_with_no_fail_or_when_all_pass() {
    let (ok, down) = ok_and_down().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = two_targets(&ok, &down, dir.path());
    let mut cmd = vigil_in(dir.path());
    cmd.args(["probe", "--config"]).arg(&path).env("VIGIL_TEST_KEY", "sk-test-cli");
    let failed = output(cmd).await;
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    assert!(text(&failed.stdout).contains("broken/m1"), "the table is still printed");
    assert!(text(&failed.stderr).contains("1 of 2 targets failed"), "{}", text(&failed.stderr));

    let mut cmd = vigil_in(dir.path());
    cmd.args(["probe", "--no-fail", "--config"]).arg(&path).env("VIGIL_TEST_KEY", "sk-test-cli");
    let kept = output(cmd).await;
    assert_eq!(kept.status.code(), Some(0), "{}", text(&kept.stderr));

    let mut cmd = vigil_in(dir.path());
    cmd.args(["probe", "--target", "fast/m1", "--config"]).arg(&path).env("VIGIL_TEST_KEY", "sk-test-cli");
    let passed = output(cmd).await;
    assert_eq!(passed.status.code(), Some(0), "{}", text(&passed.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_prints_a_config_that_reads_back_the_same_and_never_a_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("in.toml");
    std::fs::write(
        &path,
        r#"region = "eu-west-1"
[storage]
url = "postgres://vigil:hunter2@db.invalid/vigil"
[probe]
interval = "30s"
[[provider]]
name = "openrouter"
routes = ["DeepInfra", "Together"]
balance = { min_usd = 5.0 }
[[provider]]
name = "anthropic"
[[provider]]
name = "status"
kind = "http"
base_url = "https://status.invalid/api/v2/status.json"
[[alerts.slack]]
webhook_url_env = "SLACK_WEBHOOK_URL"
[[alerts.webhook]]
name = "router"
url_env = "ROUTER_HOOK_URL"
secret_env = "ROUTER_HOOK_SECRET"
"#,
    )
    .expect("write");
    let env = [
        ("OPENROUTER_API_KEY", "sk-or-v1-test-secret"),
        ("SLACK_WEBHOOK_URL", "http://127.0.0.1:1/slack-secret-path"),
        ("ROUTER_HOOK_URL", "http://127.0.0.1:1/hook-secret"),
        ("ROUTER_HOOK_SECRET", "hmac-secret"),
        ("VIGIL_PROBE_CONCURRENCY", "17"),
    ];
    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config", "--config"]).arg(&path).envs(env);
    let first = output(cmd).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let shown = text(&first.stdout);
    for secret in ["sk-or-v1-test-secret", "slack-secret-path", "hook-secret", "hmac-secret", "hunter2"] {
        assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
    }
    for named in ["OPENROUTER_API_KEY", "SLACK_WEBHOOK_URL", "ROUTER_HOOK_SECRET", "ANTHROPIC_API_KEY"] {
        assert!(shown.contains(named), "{named} not named:\n{shown}");
    }
    assert!(shown.contains("concurrency = 17"), "overrides are resolved:\n{shown}");
    let parsed: toml::Table = shown.parse().expect("check-config prints valid TOML");
    assert_eq!(parsed["probe"]["interval"].as_str(), Some("30s"));

    let again = dir.path().join("again.toml");
    std::fs::write(&again, &shown).expect("write");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config", "--config"]).arg(&again).envs(env);
    let second = output(cmd).await;
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), shown, "the printed config reads back to itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_exits_2_wherever_run_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nothing = dir.path().join("nothing.toml");
    std::fs::write(&nothing, "[http]\nlisten = \"127.0.0.1:0\"\n").expect("write");
    let bad_url = dir.path().join("bad-url.toml");
    std::fs::write(
        &bad_url,
        "[storage]\nurl = \"postgres://db.invalid:notaport/vigil\"\n[http]\nlisten = \"127.0.0.1:0\"\n\
         [[provider]]\nname = \"s\"\nkind = \"http\"\nbase_url = \"http://127.0.0.1:9/\"\n",
    )
    .expect("write");
    for (file, says) in [(&nothing, "nothing to probe"), (&bad_url, "storage.url")] {
        for command in ["check-config", "run"] {
            let mut cmd = vigil_in(dir.path());
            cmd.args([command, "--config"]).arg(file);
            let out = output(cmd).await;
            assert_eq!(out.status.code(), Some(2), "{command} {}: {}", file.display(), text(&out.stderr));
            assert!(text(&out.stderr).contains(says), "{command}: {}", text(&out.stderr));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_have_no_escapes_off_a_terminal_and_json_is_flat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log file");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config"]).stderr(log);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    let plain = std::fs::read(dir.path().join("stderr.log")).expect("read log");
    assert!(!plain.is_empty());
    assert!(!plain.contains(&0x1b), "no ESC byte in a log written to a file:\n{}", text(&plain));
    let lines: Vec<&str> =
        std::str::from_utf8(&plain).expect("utf-8").lines().filter(|l| l.contains("providers")).collect();
    assert_eq!(lines.len(), 1, "one start-up line for all providers:\n{}", text(&plain));
    assert!(lines[0].contains("openrouter (OPENROUTER_API_KEY unset)"), "{}", lines[0]);

    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config"]).env("VIGIL_LOG_FORMAT", "json");
    let out = output(cmd).await;
    let mut parsed = 0;
    for line in text(&out.stderr).lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line).expect("each log line is JSON");
        assert!(v["message"].is_string() && v["level"].is_string(), "flat message and level: {line}");
        assert!(v.get("fields").is_none(), "fields are flattened: {line}");
        if v["message"] == "providers" {
            assert!(v["skipped"].as_str().is_some_and(|s| s.contains("GEMINI_API_KEY")), "{line}");
            assert!(v["enabled"].is_string(), "{line}");
        }
        parsed += 1;
    }
    assert!(parsed >= 1, "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_and_man_page_are_generated() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (shell, marker) in [("bash", "_vigil()"), ("zsh", "#compdef vigil"), ("fish", "complete -c vigil")] {
        let mut cmd = vigil_in(dir.path());
        cmd.args(["completions", shell]);
        let out = output(cmd).await;
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(marker) && script.contains("check-config"), "{shell}:\n{script}");
    }
    let mut cmd = vigil_in(dir.path());
    cmd.arg("man");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0));
    let page = text(&out.stdout);
    assert!(page.starts_with(".ie") || page.contains(".TH vigil"), "{page}");
    assert!(page.contains("check\\-config") && page.contains("completions"), "{page}");
}
