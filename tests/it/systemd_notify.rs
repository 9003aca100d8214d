//! vigil under systemd's `Type=notify` (deploy/systemd/vigil.service): the real binary, with
//! `NOTIFY_SOCKET` pointing at a datagram socket this test binds (as systemd does) and a
//! watchdog asked for, says `READY=1` only once `/readyz` passes (its PostgreSQL is unreachable
//! at start, then comes back), keeps `WATCHDOG=1` coming while its sample road beats, and says
//! `STOPPING=1` on SIGTERM.

use crate::support::fixture;
use crate::support::process::{free_port, Daemon};
use crate::support::store::PgTestDb;
use crate::support::tcp_proxy::{postgres_upstream, Mode, TcpProxy};
use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

/// Every datagram the socket received, in order, as text.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<String>>>);

impl Heard {
    /// Reads `socket` on a thread of its own until the test ends.
    fn listen(socket: UnixDatagram) -> Heard {
        let heard = Heard::default();
        let into = heard.clone();
        socket.set_read_timeout(Some(Duration::from_millis(200))).expect("read timeout");
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            // Ends when the test drops its handle (the Arc's only other holder).
            while Arc::strong_count(&into.0) > 1 {
                if let Ok(n) = socket.recv(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    into.0.lock().expect("heard").push(text);
                }
            }
        });
        heard
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().expect("heard").clone()
    }

    /// How many datagrams carried the line `line` (`READY=1`, `WATCHDOG=1`, …).
    fn count(&self, line: &str) -> usize {
        self.all().iter().filter(|m| m.lines().any(|l| l == line)).count()
    }

    /// Waits (60 s at most) until `ok` holds for what was heard.
    async fn until(&self, what: &str, vigil: &Daemon, ok: impl Fn(&Heard) -> bool) {
        let held = crate::support::poll_until(Duration::from_secs(60), || async { ok(self).then_some(()) }).await;
        assert!(held.is_some(), "{what}: never heard; heard {:?}\nlog:\n{}", self.all(), vigil.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_told_once_readyz_passes_and_the_watchdog_keeps_hearing_from_a_live_road() {
    let body = fixture("openai-chat-stream-usage.sse");
    let provider = StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in");
    let db = PgTestDb::create().await;
    // PostgreSQL refuses at start: vigil runs, probes and spools, and is not ready.
    let proxy = TcpProxy::start(postgres_upstream(), Mode::Refuse).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let socket_path = dir.path().join("notify.sock");
    let heard = Heard::listen(UnixDatagram::bind(&socket_path).expect("bind the notify socket"));
    let port = free_port();
    let env = [("NOTIFY_SOCKET", socket_path.to_str().expect("utf-8 path")), ("WATCHDOG_USEC", "1000000")];
    let text = crate::support::daemon::steady_toml(
        "notify-1",
        &proxy.url_for(&db.url),
        dir.path(),
        port,
        &provider.base_url(),
        &["m1"],
    );
    let vigil = Daemon::start_in(dir.path(), &text, port, &env).await;

    // Not ready, and says why; alive (probing, spooling), so kept alive and its start extended.
    let (_, why) = vigil
        .eventually("readyz says storage", |r| r.is_some_and(|(s, b)| *s == 503 && b.contains("storage")), "/readyz")
        .await;
    heard.until("three keep-alives while not ready", &vigil, |h| h.count("WATCHDOG=1") >= 3).await;
    assert_eq!(vigil.get("/readyz").await.map(|(s, _)| s), Some(503), "still not ready: {why}");
    assert_eq!(heard.count("READY=1"), 0, "READY=1 while /readyz said {why:?}: {:?}", heard.all());
    let all = heard.all();
    assert!(all.iter().any(|m| m.contains("EXTEND_TIMEOUT_USEC=")), "the start is extended: {all:?}");
    assert!(
        all.iter().any(|m| m.lines().any(|l| l.starts_with("STATUS=starting, not ready:") && l.contains("storage"))),
        "systemctl status says why: {all:?}"
    );

    // PostgreSQL comes back: READY=1 follows, and /readyz agrees.
    proxy.set_mode(Mode::Forward).await;
    heard.until("READY=1 once storage is back", &vigil, |h| h.count("READY=1") == 1).await;
    let (status, said) = vigil.get("/readyz").await.expect("readyz answers");
    assert_eq!(status, 200, "READY=1 was told while /readyz says {said:?}");

    // The watchdog keeps hearing from it, and READY=1 is never told twice.
    let before = heard.count("WATCHDOG=1");
    heard.until("keep-alives after READY=1", &vigil, |h| h.count("WATCHDOG=1") >= before + 3).await;
    assert_eq!(heard.count("READY=1"), 1, "{:?}", heard.all());

    // A stop is told too.
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "exit 0 on SIGTERM; log:\n{log}");
    assert!(heard.count("STOPPING=1") >= 1, "STOPPING=1 on SIGTERM: {:?}", heard.all());
}
