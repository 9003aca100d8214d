//! The HTTP server that defends itself: a header-read timeout, an idle timeout, a connection cap
//! that drops the oldest idle connection first, and a graceful shutdown that never waits on a
//! half-sent request. The cap is sized from the file-descriptor limit minus a reserve for the
//! probes, so no number of clients can starve the probes of sockets.

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// File descriptors kept for everything but HTTP clients besides the probes' own: the store's
/// pool, the spool, logs, alert channels, balance polls, DNS and the listener.
pub const FD_MARGIN: u64 = 96;
/// Fewest connections the server accepts, whatever the fd budget says (the budget is logged).
pub const MIN_CONNECTIONS: usize = 8;
/// Most connections the server accepts, however many descriptors are left.
pub const MAX_CONNECTIONS: usize = 1024;

/// The server's defences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// A request head must arrive whole within this time of its first byte being awaited.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this long.
    pub idle_timeout: Duration,
    /// Most open connections; when full, the oldest idle one is dropped for a new one.
    pub max_connections: usize,
    /// Longest shutdown waits for in-flight responses; half-sent requests are not waited on.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 256,
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

impl ServerLimits {
    /// Limits for a daemon running `probe_concurrency` probes: raises the soft fd limit to the
    /// hard one, then caps connections at what is left after the probes' reserve.
    pub fn for_probes(probe_concurrency: usize) -> ServerLimits {
        let (soft, hard) = raise_fd_limit();
        let reserve = probe_reserve(probe_concurrency);
        let max_connections = connection_cap(soft, reserve);
        tracing::info!(
            fd_soft = soft,
            fd_hard = hard,
            probe_reserve = reserve,
            max_connections,
            "http connection budget"
        );
        if soft.saturating_sub(reserve) < MIN_CONNECTIONS as u64 {
            tracing::warn!(
                fd_soft = soft,
                probe_reserve = reserve,
                "the open-file limit barely covers the probes; raise it (LimitNOFILE= / ulimit -n)"
            );
        }
        ServerLimits { max_connections, ..ServerLimits::default() }
    }
}

/// Descriptors the probes may need at once: a socket and a DNS lookup each, plus the margin.
pub fn probe_reserve(probe_concurrency: usize) -> u64 {
    (probe_concurrency as u64).saturating_mul(2).saturating_add(FD_MARGIN)
}

/// Connections allowed under a soft fd limit of `soft` after `reserve`.
pub fn connection_cap(soft: u64, reserve: u64) -> usize {
    let left = usize::try_from(soft.saturating_sub(reserve)).unwrap_or(usize::MAX);
    left.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns (soft, hard) afterwards.
#[cfg(unix)]
pub fn raise_fd_limit() -> (u64, u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let current = getrlimit(Resource::Nofile);
    let (soft, hard) = (current.current.unwrap_or(u64::MAX), current.maximum.unwrap_or(u64::MAX));
    if soft < hard {
        let raised = Rlimit { current: current.maximum, maximum: current.maximum };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => return (hard, hard),
            Err(e) => tracing::warn!(error = %e, soft, hard, "could not raise the open-file limit"),
        }
    }
    (soft, hard)
}

/// Elsewhere the limit is not known; assume a common default.
#[cfg(not(unix))]
pub fn raise_fd_limit() -> (u64, u64) {
    (1024, 1024)
}

/// One connection as the cap sees it.
struct Conn {
    in_flight: AtomicUsize,
    /// Milliseconds since the server started at the last request start or end.
    last_change_ms: AtomicU64,
    close: CancellationToken,
}

/// The open connections, by id.
#[derive(Default)]
struct Registry {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the idle connection that has been idle longest; false when none is idle.
    fn evict_oldest_idle(&self) -> bool {
        let mut conns = self.lock();
        let oldest = conns
            .iter()
            .filter(|(_, c)| c.in_flight.load(Ordering::Acquire) == 0)
            .min_by_key(|(id, c)| (c.last_change_ms.load(Ordering::Acquire), **id))
            .map(|(id, _)| *id);
        match oldest.and_then(|id| conns.remove(&id)) {
            Some(c) => {
                c.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// Marks a request in flight on its connection until dropped.
struct InFlight {
    conn: Arc<Conn>,
    epoch: Instant,
}

impl InFlight {
    fn start(conn: Arc<Conn>, epoch: Instant) -> InFlight {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        conn.last_change_ms.store(millis_since(epoch), Ordering::Release);
        InFlight { conn, epoch }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn.last_change_ms.store(millis_since(self.epoch), Ordering::Release);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Serves `router` on `listener` (over TLS with `tls`: the web config's `tls_server_config`)
/// until `shutdown` fires, then closes idle and half-sent connections at once, lets in-flight
/// responses finish for up to `limits.shutdown_grace`, and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    limits: ServerLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let registry = Arc::new(Registry::default());
    let epoch = Instant::now();
    let mut tasks = JoinSet::new();
    let mut next_id = 0u64;
    let mut refused_logged = false;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            // Reap finished connection tasks so the set does not grow.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (or another transient failure): free an idle connection
                // and wait a little instead of spinning.
                registry.evict_oldest_idle();
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let full = registry.lock().len() >= limits.max_connections;
        if full && !registry.evict_oldest_idle() {
            if !refused_logged {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "http connection cap reached; refusing new connections while every connection is busy"
                );
                refused_logged = true;
            }
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let id = next_id;
        let conn = Arc::new(Conn {
            in_flight: AtomicUsize::new(0),
            last_change_ms: AtomicU64::new(millis_since(epoch)),
            close: CancellationToken::new(),
        });
        registry.lock().insert(id, conn.clone());
        let (router, registry, shutdown, acceptor) =
            (router.clone(), registry.clone(), shutdown.clone(), acceptor.clone());
        tasks.spawn(async move {
            match acceptor {
                None => serve_one(stream, router, conn, epoch, limits, shutdown).await,
                // The handshake gets the header-read budget: a client that opens a connection
                // and says nothing holds it no longer over TLS than over plain HTTP.
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                    let tls = tokio::select! {
                        done = handshake => done,
                        _ = shutdown.cancelled() => Ok(Err(std::io::ErrorKind::Interrupted.into())),
                        _ = conn.close.cancelled() => Ok(Err(std::io::ErrorKind::Interrupted.into())),
                    };
                    match tls {
                        Ok(Ok(stream)) => serve_one(stream, router, conn, epoch, limits, shutdown).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            registry.lock().remove(&id);
        });
    }
    drop(listener);
    // Idle and half-sent connections close at once; in-flight responses get the grace period.
    let drained =
        tokio::time::timeout(limits.shutdown_grace, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::info!(left = tasks.len(), "http shutdown grace over; closing the remaining connections");
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    Ok(())
}

async fn serve_one<S>(
    stream: S,
    router: Router,
    conn: Arc<Conn>,
    epoch: Instant,
    limits: ServerLimits,
    shutdown: CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let guard = InFlight::start(conn.clone(), epoch);
            let router = TowerToHyperService::new(router.clone());
            async move {
                let resp = hyper::service::Service::call(&router, req.map(axum::body::Body::new)).await;
                drop(guard);
                resp
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true)
        // Heads are small; this bounds what one connection can make the server buffer.
        .max_buf_size(64 * 1024);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut draining = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "http connection ended with an error");
                }
                return;
            }
            _ = conn.close.cancelled() => return,
            _ = idle_expired(&conn, epoch, limits.idle_timeout) => return,
            _ = shutdown.cancelled(), if !draining => {
                if conn.in_flight.load(Ordering::Acquire) == 0 {
                    return;
                }
                // Finish the response in flight, then close (no keep-alive).
                connection.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
}

/// Resolves once the connection has had no request in flight for `idle`.
async fn idle_expired(conn: &Conn, epoch: Instant, idle: Duration) {
    loop {
        let since = Duration::from_millis(conn.last_change_ms.load(Ordering::Acquire));
        let deadline = epoch + since + idle;
        if conn.in_flight.load(Ordering::Acquire) == 0 && Instant::now() >= deadline {
            return;
        }
        let wake = if conn.in_flight.load(Ordering::Acquire) == 0 { deadline } else { Instant::now() + idle };
        tokio::time::sleep_until(wake).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_probes_their_reserve() {
        assert_eq!(probe_reserve(8), 16 + FD_MARGIN);
        assert_eq!(connection_cap(512, probe_reserve(256)), 8, "a tight limit still serves a few clients");
        assert_eq!(connection_cap(1024, probe_reserve(8)), 1024 - 16 - FD_MARGIN as usize);
        assert_eq!(connection_cap(1 << 20, probe_reserve(256)), MAX_CONNECTIONS);
        assert_eq!(connection_cap(0, probe_reserve(usize::MAX)), MIN_CONNECTIONS);
    }
}
