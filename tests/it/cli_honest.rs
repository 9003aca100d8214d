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

/// `vigil` in `dir` with the umask `mask` (set in the child before it starts).
fn vigil_with_umask(dir: &std::path::Path, mask: u32) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = vigil_in(dir);
    // SAFETY: umask(2) is async-signal-safe and touches only the child's own state.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(mask as libc::mode_t);
            Ok(())
        });
    }
    cmd
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_files_get_the_mode_the_umask_allows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("thresholds.json");
    for (mask, want) in [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)] {
        let mut cmd = vigil_with_umask(dir.path(), mask);
        cmd.args(["thresholds", "--demo", "--format", "litellm", "--out"]).arg(&out);
        let done = output(cmd).await;
        assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
        assert_eq!(mode(&out), want, "umask {mask:03o}");
    }
    let weekly = dir.path().join("weekly.html");
    let mut cmd = vigil_with_umask(dir.path(), 0o022);
    cmd.args(["report", "--weekly", "--demo", "--out"]).arg(&weekly);
    let done = output(cmd).await;
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert_eq!(mode(&weekly), 0o644);
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(".vigil-out-"))
        .collect();
    assert!(leftovers.is_empty(), "no temp file left: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_never_seeds_the_database_the_environment_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = dir.path().join("shared.db");
    let url = format!("sqlite://{}", shared.display());
    for var in ["DATABASE_URL", "VIGIL_STORAGE_URL"] {
        let mut cmd = vigil_in(dir.path());
        cmd.args(["thresholds", "--demo"]).env(var, &url);
        let done = output(cmd).await;
        assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
        let log = text(&done.stderr);
        assert!(log.contains("demo: own database") && log.contains(&format!("ignored={var}")), "{log}");
        assert!(!shared.exists(), "{var}'s database was written by --demo");
        assert!(dir.path().join("vigil-data/vigil-demo.db").exists(), "the demo's own database");
    }

    // `run --demo` likewise: it comes up on its own database.
    let port = crate::support::process::free_port();
    let log_path = dir.path().join("run.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["run", "--demo"])
        .current_dir(dir.path())
        .env("DATABASE_URL", &url)
        .env("VIGIL_HTTP_LISTEN", format!("127.0.0.1:{port}"))
        .env_remove("VIGIL_STORAGE_URL")
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("vigil starts");
    let ready = crate::support::poll_until(Duration::from_secs(60), || async {
        let r = reqwest::get(format!("http://127.0.0.1:{port}/v1/targets")).await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
    let logged = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = child.start_kill();
    let _ = child.wait().await;
    assert!(ready.is_some(), "run --demo came up:\n{logged}");
    assert!(logged.contains("ignored=DATABASE_URL"), "{logged}");
    // The first line names the providers that run: the demo's.
    let first = logged.lines().next().unwrap_or_default();
    assert!(first.contains(" providers ") && first.contains("demo-llama"), "{first}");
    assert!(!first.contains("enabled=none"), "{first}");
    assert!(!shared.exists(), "run --demo wrote into DATABASE_URL's database");

    // A storage.url in the demo's own config file is used.
    let chosen = dir.path().join("chosen.db");
    let config = dir.path().join("demo.toml");
    std::fs::write(&config, format!("[storage]\nurl = \"sqlite://{}\"\n", chosen.display())).expect("config");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["thresholds", "--demo", "--config"]).arg(&config);
    let done = output(cmd).await;
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert!(chosen.exists(), "the configured database: {}", text(&done.stderr));
}

fn vigil_db_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("vigil.db"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backtest_refuses_an_empty_store_and_replays_the_demo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["alerts", "backtest"]);
    let none = output(cmd).await;
    assert_eq!(none.status.code(), Some(1), "{}", text(&none.stderr));
    assert!(text(&none.stderr).contains("vigil.db does not exist: no samples to replay"), "{}", text(&none.stderr));
    assert_eq!(vigil_db_files(dir.path()), Vec::<String>::new(), "nothing left behind");

    // A store that exists but holds nothing in the window.
    let mut cmd = vigil_in(dir.path());
    cmd.arg("migrate");
    assert_eq!(output(cmd).await.status.code(), Some(0));
    let mut cmd = vigil_in(dir.path());
    cmd.args(["alerts", "backtest", "--window", "1d"]);
    let empty = output(cmd).await;
    assert_eq!(empty.status.code(), Some(1), "{}", text(&empty.stderr));
    assert!(text(&empty.stderr).contains("no samples of region local in the last 1day"), "{}", text(&empty.stderr));

    let mut cmd = vigil_in(dir.path());
    cmd.args(["alerts", "backtest", "--demo", "--json"]);
    let demo = output(cmd).await;
    assert_eq!(demo.status.code(), Some(0), "{}", text(&demo.stderr));
    let report: serde_json::Value = serde_json::from_slice(&demo.stdout).expect("JSON");
    assert!(report["samples"].as_u64().is_some_and(|n| n > 1000), "the demo's week: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_lists_what_it_applied_then_says_nothing_was_pending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = vigil_in(dir.path());
    cmd.arg("migrate");
    let first = output(cmd).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let said = text(&first.stdout);
    let shipped =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite")).map(|d| d.count()).unwrap_or(0);
    assert!(said.starts_with(&format!("applied {shipped} migrations to sqlite://vigil.db:")), "{said}");
    let versions: Vec<&str> = said.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(versions.len(), shipped, "{said}");
    assert!(versions.iter().all(|v| v.parse::<i64>().is_ok()), "{said}");

    let mut cmd = vigil_in(dir.path());
    cmd.arg("migrate");
    let again = output(cmd).await;
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(text(&again.stdout), "no migration pending: schema up to date (sqlite://vigil.db)\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_error_is_said_once_and_toml_errors_have_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let config = dir.path().join("taken.toml");
    std::fs::write(
        &config,
        format!(
            "[http]\nlisten = \"{}\"\n[[provider]]\nname = \"s\"\nkind = \"http\"\nbase_url = \"http://127.0.0.1:9/\"\n",
            taken.local_addr().expect("addr")
        ),
    )
    .expect("write");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["run", "--config"]).arg(&config);
    let out = output(cmd).await;
    let stderr = text(&out.stderr);
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(error.contains("http.listen"), "{error}");
    assert_eq!(error.matches("os error 98").count(), 1, "{error}");

    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config", "--config", "nowhere.toml"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("os error 2").count(), 1, "{stderr}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "region = \"eu\"\n\n[probe]\ninterval = 30s\n").expect("write");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config", "--config"]).arg(&bad);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("error: {}:4:12: ", bad.display())), "{stderr}");
    assert!(!stderr.contains("byte"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_the_man_pages_name_exists_with_environment_exit_status_and_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = dir.path().join("man1");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["man", "--dir"]).arg(&pages);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut names: Vec<String> =
        std::fs::read_dir(&pages).expect("pages").filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    for expected in ["vigil.1", "vigil-run.1", "vigil-alerts-backtest.1", "vigil-baselines-adopt.1", "vigil-man.1"] {
        assert!(names.iter().any(|n| n == expected), "{expected} in {names:?}");
    }
    for name in &names {
        let page = std::fs::read_to_string(pages.join(name)).expect("page");
        for section in [".SH ENVIRONMENT", ".SH \"EXIT STATUS\"", ".SH NAME", ".SH SYNOPSIS"] {
            assert!(page.contains(section), "{name} lacks {section}");
        }
        if name != "vigil-completions.1" {
            assert!(page.contains(".SH FILES"), "{name} lacks FILES");
        }
        // Every page referred to as vigil-x(1) was written.
        for (at, _) in page.match_indices("(1)") {
            let start = page[..at].rfind(|c: char| c.is_whitespace() || c == '"').map_or(0, |i| i + 1);
            let referred = page[start..at].replace("\\-", "-");
            if referred.starts_with("vigil") {
                assert!(names.contains(&format!("{referred}.1")), "{name} refers to {referred}(1), not written");
            }
        }
        assert_eq!(page.matches(".ie \\n(.g").count(), 1, "{name}: one preamble");
    }
    let run = std::fs::read_to_string(pages.join("vigil-run.1")).expect("run page");
    assert!(
        run.contains("DATABASE_URL") && run.contains("VIGIL_API_TOKEN") && run.contains("web.config.file"),
        "{run}"
    );

    // `vigil man run` prints the same page as --dir wrote.
    let mut cmd = vigil_in(dir.path());
    cmd.args(["man", "run"]);
    let out = output(cmd).await;
    assert_eq!(text(&out.stdout), run);
    // Rendered too where man(1) is installed (an extra look; the checks above do not need it).
    let man = std::process::Command::new("man").arg("--version").output().is_ok_and(|o| o.status.success());
    if man {
        let rendered = std::process::Command::new("man")
            .args(["-l", "-Tutf8"])
            .arg(pages.join("vigil-alerts-backtest.1"))
            .env("MANWIDTH", "100")
            .output()
            .expect("man runs");
        // Without a terminal man(1) emboldens by overstriking (`X\bX`): keep the last of each pair.
        let mut shown = String::new();
        for c in text(&rendered.stdout).chars() {
            if c == '\u{8}' {
                shown.pop();
            } else {
                shown.push(c);
            }
        }
        assert!(shown.contains("EXIT STATUS") && shown.contains("--demo"), "{shown}");
    }

    // --help names each subcommand's variables.
    for words in [&["run"][..], &["probe"], &["thresholds"], &["alerts", "backtest"], &["migrate"], &["check-config"]] {
        let mut cmd = vigil_in(dir.path());
        cmd.args(words).arg("--help");
        let out = output(cmd).await;
        assert_eq!(out.status.code(), Some(0));
        let help = text(&out.stdout);
        assert!(
            help.contains("Environment:") && help.contains("VIGIL_LOG") && help.contains("DATABASE_URL"),
            "{words:?}:\n{help}"
        );
        assert!(help.contains("OPENROUTER_API_KEY"), "{words:?}:\n{help}");
    }
}
