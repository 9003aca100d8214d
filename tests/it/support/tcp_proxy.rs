//! A loopback TCP proxy in front of a real server (PostgreSQL by default) whose behaviour the
//! test switches at run time: forward, refuse (nothing listens; open connections are reset) or
//! blackhole (connections are accepted and read, and never answered: a host that went dark).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pass bytes both ways to the upstream server.
    Forward,
    /// Stop listening (new connections get "connection refused") and reset open ones.
    Refuse,
    /// Keep listening, accept, read and discard; never answer and never close. Open
    /// connections go silent too.
    Blackhole,
}

/// The upstream the tests use unless told otherwise: the PostgreSQL of `VIGIL_TEST_DATABASE_URL`.
pub fn postgres_upstream() -> SocketAddr {
    let server = std::env::var("VIGIL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let url = url::Url::parse(&server).expect("VIGIL_TEST_DATABASE_URL is a URL");
    let host = url.host_str().unwrap_or("127.0.0.1");
    format!("{host}:{}", url.port().unwrap_or(5432)).parse().expect("the test PostgreSQL host must be an IP address")
}

/// A running proxy; stops (and resets its connections) when dropped.
pub struct TcpProxy {
    /// Where clients connect; stays the same across mode switches.
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    /// The mode the listener is in now (set by the control task once a switch took effect).
    applied: watch::Receiver<Mode>,
    accepted: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    /// A forwarding proxy to the test PostgreSQL.
    pub async fn to_postgres() -> Self {
        Self::start(postgres_upstream(), Mode::Forward).await
    }

    /// A proxy to `upstream` starting in `mode`, on a free loopback port.
    pub async fn start(upstream: SocketAddr, mode: Mode) -> Self {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (tx, rx) = watch::channel(mode);
        let (applied_tx, applied) = watch::channel(mode);
        let accepted = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(control(listener, addr, upstream, rx, applied_tx, accepted.clone()));
        let proxy = TcpProxy { addr, mode: tx, applied, accepted, task };
        proxy.settle(mode).await;
        proxy
    }

    /// Switches behaviour and returns once the listener follows it (refusing: not listening;
    /// otherwise: listening again); open connections are reset or silenced by their own tasks,
    /// a moment later.
    pub async fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
        self.settle(mode).await;
    }

    async fn settle(&self, mode: Mode) {
        let mut applied = self.applied.clone();
        let _ = applied.wait_for(|m| *m == mode).await;
    }

    /// The current behaviour.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Connections accepted so far (in any mode).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url_for(&self, url: &str) -> String {
        let mut u = url::Url::parse(url).expect("database url");
        u.set_host(Some(&self.addr.ip().to_string())).expect("host");
        u.set_port(Some(self.addr.port())).expect("port");
        u.to_string()
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Refuse);
        self.task.abort();
    }
}

/// A socket bound to `addr` with SO_REUSEADDR and SO_REUSEPORT: the proxy's listener and the
/// placeholder that keeps its port while it refuses can then be bound side by side.
fn bound(addr: SocketAddr) -> std::io::Result<TcpSocket> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    bound(addr)?.listen(128)
}

/// Owns the listening socket: drops it while refusing, binds the same port again afterwards.
/// While it refuses, a bound socket that does not listen keeps the port: a connect is refused,
/// and no other test's listener on port 0 is given it (one was once, and a connect meant to be
/// refused reached it).
async fn control(
    listener: TcpListener,
    addr: SocketAddr,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    applied: watch::Sender<Mode>,
    accepted: Arc<AtomicU64>,
) {
    let mut listener = Some(listener);
    let mut placeholder: Option<TcpSocket> = None;
    loop {
        let current = *mode.borrow_and_update();
        if current == Mode::Refuse {
            if placeholder.is_none() {
                placeholder =
                    bound(addr).map_err(|e| eprintln!("tcp_proxy: cannot keep {addr} while refusing: {e}")).ok();
            }
            listener = None;
            applied.send_replace(current);
            if mode.changed().await.is_err() {
                return;
            }
            continue;
        }
        let l = match listener.take() {
            Some(l) => l,
            None => match rebind(addr).await {
                Some(l) => l,
                None => return,
            },
        };
        placeholder = None;
        applied.send_replace(current);
        loop {
            tokio::select! {
                changed = mode.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    listener = Some(l);
                    break;
                }
                conn = l.accept() => {
                    let Ok((client, _)) = conn else { continue };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(client, upstream, mode.clone()));
                }
            }
        }
    }
}

/// The port was ours a moment ago; another socket may linger on it briefly.
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..100 {
        match bind(addr).await {
            Ok(l) => return Some(l),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    eprintln!("tcp_proxy: could not listen on {addr} again");
    None
}

/// One client connection, following mode switches until it ends.
async fn serve(mut client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let initial = *mode.borrow_and_update();
    if initial == Mode::Forward {
        let Ok(mut server) = TcpStream::connect(upstream).await else {
            reset(client);
            return;
        };
        let next = tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
            next = next_mode(&mut mode, Mode::Forward) => next,
        };
        let _ = server.set_zero_linger();
        drop(server);
        if next != Some(Mode::Blackhole) {
            reset(client);
            return;
        }
    } else if initial != Mode::Blackhole {
        reset(client);
        return;
    }
    // Blackholed: swallow whatever the client sends until the mode changes, then reset.
    let mut buf = [0u8; 4096];
    loop {
        tokio::select! {
            read = client.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = next_mode(&mut mode, Mode::Blackhole) => {
                reset(client);
                return;
            }
        }
    }
}

/// Waits until the mode differs from `from`; `None` when the proxy is gone.
async fn next_mode(mode: &mut watch::Receiver<Mode>, from: Mode) -> Option<Mode> {
    loop {
        if mode.changed().await.is_err() {
            return None;
        }
        let now = *mode.borrow_and_update();
        if now != from {
            return Some(now);
        }
    }
}

/// Closes with a TCP reset, as a host whose server process died would.
fn reset(client: TcpStream) {
    let _ = client.set_zero_linger();
    drop(client);
}
