//! The HTTP server defends itself (src/io/http/server.rs): half-sent and idle connections are
//! closed, the connection cap drops the oldest idle connection first, shutdown does not wait on
//! a half-sent request; and the real binary under a low open-file limit keeps probing while
//! hundreds of idle and half-sent connections hammer its HTTP port.

use crate::support::fixture;
use axum::routing::get;
use axum::Router;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use vigil::io::http::server::{serve, ServerLimits};
use vigil::run::demo::standin::{Script, StandIn};

const HALF_SENT: &[u8] = b"GET /slow HTTP/1.1\r\nHost: vigil\r\nX-Partial: ";

async fn start(limits: ServerLimits) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Router::new().route("/", get(|| async { "hello" }));
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve(listener, router, stop.clone(), limits, None));
    (addr, stop, server)
}

/// True once the server has closed `s` (a read returns EOF or a reset) within `within`.
async fn closed_by_server(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // e.g. a 408 before closing
        }
    }
}

async fn get_root(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: vigil\r\nConnection: close\r\n\r\n").await.expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("answer in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn half_sent_and_idle_connections_are_closed() {
    let limits = ServerLimits {
        header_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    };
    let (addr, stop, server) = start(limits).await;
    let mut half = TcpStream::connect(addr).await.expect("connect");
    half.write_all(HALF_SENT).await.expect("write");
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    assert!(closed_by_server(&mut half, Duration::from_secs(10)).await, "a half-sent request is dropped");
    assert!(closed_by_server(&mut idle, Duration::from_secs(10)).await, "an idle connection is dropped");
    assert!(get_root(addr).await.ends_with("hello"), "the server still answers");
    stop.cancel();
    server.await.expect("join").expect("serve");
}

#[tokio::test]
async fn when_full_the_oldest_idle_connection_makes_room() {
    let limits = ServerLimits { max_connections: 4, ..ServerLimits::default() };
    let (addr, stop, server) = start(limits).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(addr).await.expect("connect"));
        // Distinct ages, so "oldest" is well defined.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(get_root(addr).await.ends_with("hello"), "a fifth client is served");
    assert!(closed_by_server(&mut idle[0], Duration::from_secs(10)).await, "the oldest idle connection was dropped");
    assert!(!closed_by_server(&mut idle[3], Duration::from_millis(300)).await, "the newest idle connection stays");
    stop.cancel();
    server.await.expect("join").expect("serve");
}

#[tokio::test]
async fn shutdown_does_not_wait_on_a_half_sent_request() {
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(3600),
        ..ServerLimits::default()
    };
    let (addr, stop, server) = start(limits).await;
    let mut half = Vec::new();
    for _ in 0..10 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(HALF_SENT).await.expect("write");
        half.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    // The bound is the grace period (2 s); 10 s only keeps a broken build from hanging the suite.
    let done = tokio::time::timeout(Duration::from_secs(10), server).await;
    assert!(matches!(done, Ok(Ok(Ok(())))), "serve returned while requests were half-sent: {done:?}");
}

/// Sum of `vigil_probes_total` by whether the outcome is ok.
fn probes(metrics: &str) -> (f64, f64) {
    let mut ok = 0.0;
    let mut failed = 0.0;
    for l in metrics.lines().filter(|l| l.starts_with("vigil_probes_total{")) {
        let n: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        if l.contains("outcome=\"ok\"") {
            ok += n;
        } else {
            failed += n;
        }
    }
    (ok, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_fd_limit_a_connection_flood_does_not_starve_the_probes() {
    // prlimit runs vigil under a low open-file limit.
    if !crate::support::tool_available("prlimit", &[], "apt-get install -y util-linux") {
        return;
    }
    let body = fixture("openai-chat-stream-usage.sse");
    let provider = StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("vigil.toml");
    std::fs::write(
        &config,
        format!(
            "region = \"test-1\"\n[storage]\nurl = \"sqlite://{d}/vigil.db\"\ndata_dir = \"{d}\"\nbatch_age = \"100ms\"\n\
             [http]\nlisten = \"127.0.0.1:0\"\n[probe]\ninterval = \"1s\"\ntimeout = \"900ms\"\nconcurrency = 8\n\
             [[provider]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"{base}/v1\"\napi_key_env = \"VIGIL_FD_KEY\"\nmodels = [\"a\", \"b\", \"c\", \"d\"]\n",
            d = dir.path().display(),
            base = provider.base_url(),
        ),
    )
    .expect("write config");
    // 256 descriptors, soft and hard: vigil cannot raise it, so its cap is 256 minus the probes' reserve.
    let child = Command::new("prlimit")
        .arg("--nofile=256:256")
        .arg(env!("CARGO_BIN_EXE_vigil"))
        .args(["run", "--config"])
        .arg(&config)
        .env("VIGIL_FD_KEY", "sk-test-fd")
        .env("VIGIL_LOG_FORMAT", "json")
        .env("VIGIL_LOG", "info")
        .env_remove("DATABASE_URL")
        .env_remove("VIGIL_API_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vigil starts under prlimit");
    // Killed if the test fails half-way, so no daemon outlives it.
    let mut child = KillOnDrop(Some(child));
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (stderr, lines) = (child.get().stderr.take().expect("stderr"), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if v["message"] == "http listening" {
                    if let Some(addr) = v["addr"].as_str().and_then(|a| a.parse::<SocketAddr>().ok()) {
                        let _ = tx.send(addr);
                    }
                }
                lines.lock().expect("log lock").push(line);
            }
        });
    }
    let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(120)))
        .await
        .expect("join")
        .expect("vigil logs its address");
    let metrics = || async move {
        let text = get_root_path(addr, "/metrics").await;
        probes(&text)
    };
    // Let a first round finish, then flood: 500 idle and 200 half-sent connections, twice the
    // process's whole descriptor limit.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (ok_before, _) = metrics().await;
    let requests_before = provider.requests().len();
    let mut flood = Vec::new();
    for i in 0..700 {
        // A server that stopped accepting fills its backlog; then a connect would wait minutes.
        match tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(addr)).await {
            Ok(Ok(mut s)) => {
                if i % 7 < 2 {
                    let _ = s.write_all(HALF_SENT).await;
                }
                flood.push(s);
            }
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let (ok_after, failed_after) = metrics().await;
    let requests_after = provider.requests().len();
    assert!(
        requests_after >= requests_before + 8,
        "probes kept reaching the provider: {requests_before} → {requests_after}"
    );
    assert!(ok_after >= ok_before + 8.0, "probes kept succeeding: {ok_before} → {ok_after}");
    assert_eq!(failed_after, 0.0, "no probe failed during the flood:\n{}", log.lock().expect("log").join("\n"));
    let open = {
        let mut open = 0;
        for s in &mut flood {
            if !closed_by_server(s, Duration::from_millis(1)).await {
                open += 1;
            }
        }
        open
    };
    assert!(open < 256, "the server holds no more connections than its cap allows: {open} still open");

    // Shutdown with half-sent requests open completes within the documented bound.
    for _ in 0..10 {
        if let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await {
            s.write_all(HALF_SENT).await.expect("write");
            flood.push(s);
        }
    }
    let pid = i32::try_from(child.get().id()).expect("pid");
    let started = std::time::Instant::now();
    // SAFETY: signalling our own child (prlimit execs vigil in place, so the pid is vigil's).
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let mut child = child.take();
    let status = tokio::task::spawn_blocking(move || {
        for _ in 0..150 {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        None
    })
    .await
    .expect("join");
    let status =
        status.unwrap_or_else(|| panic!("vigil did not stop within 15 s of SIGTERM with half-sent requests open"));
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "stopped in {:?}, over the 10 s bound", started.elapsed());
    let log = log.lock().expect("log").join("\n");
    assert!(!log.contains("Too many open files"), "{log}");
}

async fn get_root_path(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
        .await
        .expect("the server accepts a new connection in time")
        .expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: vigil\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("answer in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

/// A child process killed when dropped.
struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    fn get(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("child still owned")
    }

    fn take(&mut self) -> std::process::Child {
        self.0.take().expect("child still owned")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
