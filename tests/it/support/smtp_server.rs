//! A real SMTP server (Python aiosmtpd, `alert_smtp_server.py`) on loopback for the email tests.
//! Needs `pip install aiosmtpd`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running aiosmtpd process writing what it receives to a temp dir; killed when dropped.
pub struct SmtpServer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

/// Whether the server can run here (python3 with aiosmtpd); when not, the test skips with the
/// reason printed, or fails under `VIGIL_REQUIRE_TOOLS=1`. Each email test asks first.
pub fn available() -> bool {
    super::tool_available("python3", &["-c", "import aiosmtpd"], "aiosmtpd for python3: pip install aiosmtpd")
}

impl SmtpServer {
    /// On a free port; with `auth`, logins are required.
    pub fn start(auth: Option<(&str, &str)>) -> Self {
        Self::spawn(auth, None)
    }

    /// On `port` (a server that comes up where a client has been failing to connect).
    pub fn start_on(port: u16) -> Self {
        Self::spawn(None, Some(port))
    }

    fn spawn(auth: Option<(&str, &str)>, port: Option<u16>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = format!("{}/tests/it/support/alert_smtp_server.py", env!("CARGO_MANIFEST_DIR"));
        let mut cmd = Command::new("python3");
        cmd.arg(script).arg(dir.path()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if let Some(port) = port {
            cmd.arg(port.to_string());
        }
        if let Some((user, password)) = auth {
            cmd.env("SMTP_TEST_USER", user).env("SMTP_TEST_PASSWORD", password);
        }
        let mut child = cmd.spawn().expect("python3 must be installed to run the SMTP test server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read port");
        let line = line.trim();
        if line == "NO_AIOSMTPD" || line.is_empty() {
            let _ = child.kill();
            panic!("the SMTP test server needs aiosmtpd: run `pip install aiosmtpd` (got {line:?})");
        }
        let port = line.parse().expect("port number from the SMTP server");
        SmtpServer { child, port, dir }
    }

    /// `smtp://127.0.0.1:PORT?tls=none`.
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}?tls=none", self.port)
    }

    /// Waits (bounded) for the n-th received message and returns its parsed record.
    pub async fn message(&self, n: usize) -> serde_json::Value {
        let path: PathBuf = self.dir.path().join(format!("msg{n}.json"));
        let what = format!("SMTP message {n}");
        let received = super::eventually(Duration::from_secs(10), &what, || {
            std::future::ready(std::fs::read_to_string(&path).ok())
        });
        serde_json::from_str(&received.await).expect("record JSON")
    }

    /// Messages received so far.
    pub fn received(&self) -> usize {
        std::fs::read_dir(self.dir.path())
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .count()
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
