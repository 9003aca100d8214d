//! The real `vigil run` binary as a child process: started on a config file with its stderr in
//! a log file, read over HTTP, sent real signals, and measured (its peak RSS from /proc).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A free loopback port (bound and released; the daemon binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A running `vigil run`, its stderr kept in a file.
pub struct Daemon {
    child: tokio::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    log: std::path::PathBuf,
}

impl Daemon {
    /// Starts `vigil run --config <config>` (providers keyed by `VIGIL_TEST_KEY`) and waits
    /// until `/healthz` answers on `port`.
    pub async fn start(config: &Path, port: u16, log: &Path) -> Daemon {
        Daemon::start_with(config, port, log, &[]).await
    }

    /// [`Daemon::start`] with extra environment variables.
    pub async fn start_with(config: &Path, port: u16, log: &Path, env: &[(&str, &str)]) -> Daemon {
        let d = Daemon::spawn(config, port, log, env);
        d.eventually("listening", |body| body.is_some(), "/healthz").await;
        d
    }

    /// Writes `text` to `dir/vigil.toml` and starts the binary on it with its log in
    /// `dir/vigil.log`: the start-up every test of the binary on one config file repeats.
    pub async fn start_in(dir: &Path, text: &str, port: u16, env: &[(&str, &str)]) -> Daemon {
        let file = dir.join("vigil.toml");
        std::fs::write(&file, text).expect("config");
        Daemon::start_with(&file, port, &dir.join("vigil.log"), env).await
    }

    /// Starts the binary without waiting for it to listen.
    pub fn spawn(config: &Path, port: u16, log: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn_bin(Path::new(env!("CARGO_BIN_EXE_vigil")), config, port, log, env)
    }

    /// [`Daemon::spawn`] of another build of the binary (the chaos run's release build).
    pub fn spawn_bin(bin: &Path, config: &Path, port: u16, log: &Path, env: &[(&str, &str)]) -> Daemon {
        let err = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
        let mut cmd = tokio::process::Command::new(bin);
        cmd.args(["run", "--config"])
            .arg(config)
            .env("VIGIL_TEST_KEY", "sk-test-watchman")
            .env("VIGIL_LOG", "info")
            .env_remove("DATABASE_URL")
            .env_remove("VIGIL_API_TOKEN")
            // A test runner under systemd must not lend its service manager to the daemon.
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID");
        for var in crate::support::cli::KEY_VARS {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.stdout(Stdio::null()).stderr(err).kill_on_drop(true).spawn().expect("vigil starts");
        Daemon { child, base: format!("http://127.0.0.1:{port}"), log: log.to_owned() }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// `GET path`: status and body, `None` when nothing answers.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let r = reqwest::get(format!("{}{path}", self.base)).await.ok()?;
        let status = r.status().as_u16();
        Some((status, r.text().await.ok()?))
    }

    /// Polls `path` until `ok(answer)` holds (30 s at most), returning the last answer.
    pub async fn eventually(
        &self,
        what: &str,
        ok: impl Fn(Option<&(u16, String)>) -> bool,
        path: &str,
    ) -> (u16, String) {
        let held = crate::support::poll_until(Duration::from_secs(30), || async {
            let got = self.get(path).await;
            ok(got.as_ref()).then(|| got.unwrap_or_default())
        });
        held.await.unwrap_or_else(|| panic!("{what}: never held; log:\n{}", self.log()))
    }

    /// Waits (up to `within`) until the log holds `text`, returning the log.
    pub async fn log_until(&self, within: Duration, text: &str) -> String {
        let log = crate::support::settle(within, || async { self.log() }, |l| l.contains(text)).await;
        assert!(log.contains(text), "the log never said {text:?}; log:\n{log}");
        log
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (`-TERM`, `-HUP`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().to_string();
        let ok = std::process::Command::new("kill").args([signal, &pid]).status().expect("kill runs");
        assert!(ok.success());
    }

    /// Whether the process has exited (and if so whether with 0), without waiting.
    pub fn exited(&mut self) -> Option<bool> {
        self.child.try_wait().ok().flatten().map(|s| s.success())
    }

    /// Waits (up to `within`) for the process to exit: how long it took and whether it exited 0.
    pub async fn exited_within(&mut self, within: Duration) -> (Duration, bool) {
        let t0 = Instant::now();
        let status = tokio::time::timeout(within, self.child.wait()).await;
        (t0.elapsed(), matches!(status, Ok(Ok(s)) if s.success()))
    }

    /// SIGTERM, then how long the stop took, whether it exited 0, and the log.
    pub async fn stop(mut self) -> (Duration, bool, String) {
        let t0 = Instant::now();
        self.signal("-TERM");
        let (_, ok) = self.exited_within(Duration::from_secs(60)).await;
        (t0.elapsed(), ok, self.log())
    }

    /// The process's peak resident set (`VmHWM` in /proc/PID/status), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc status");
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM in /proc/PID/status");
        kb * 1024
    }
}
