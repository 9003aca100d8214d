//! A fresh connection opened phase by phase (DNS, TCP, TLS) on a monotonic clock.
//!
//! reqwest hides connection phases, so the probe dials itself and runs its HTTP/1.1 exchange
//! ([`super::h1`]) on the stream; the socket ([`super::socket`]) stamps the response's reads.

use super::h1::Arrivals;
use super::socket::ProbeSocket;
use crate::vocab::sample::Outcome;
use rustls::pki_types::ServerName;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Durations of the connection phases; `None` when a phase did not apply.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    /// Name resolution (None for IP literals).
    pub dns: Option<Duration>,
    /// TCP handshake.
    pub connect: Option<Duration>,
    /// TLS handshake (None for plain HTTP).
    pub tls: Option<Duration>,
    /// Through a proxy: CONNECT sent → the proxy's 2xx (its own DNS and connect to the target).
    /// `dns` and `connect` are then the proxy's.
    pub proxy: Option<Duration>,
}

/// Why a connection could not be opened, already classified.
#[derive(Debug, Clone)]
pub struct DialError {
    /// `dns_error`, `connect_error`, `tls_error` or `timeout`.
    pub outcome: Outcome,
    /// What happened.
    pub message: String,
    /// Phases completed before the failure.
    pub phases: Phases,
}

/// Either side of a dialled connection.
pub enum Stream {
    /// Plain TCP.
    Plain(ProbeSocket),
    /// TLS over TCP.
    Tls(Box<tokio_rustls::client::TlsStream<ProbeSocket>>),
}

impl Stream {
    fn socket(&self) -> &ProbeSocket {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    fn socket_mut(&mut self) -> &mut ProbeSocket {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_mut().0,
        }
    }
}

impl Arrivals for Stream {
    fn arrival(&self) -> Option<Instant> {
        self.socket().arrival()
    }

    fn park(&mut self) -> bool {
        self.socket_mut().park()
    }
}

/// The TLS client setup shared by all probes: system roots, built-in roots and `extra_roots`
/// ([`super::trust::connector`]); a refused extra root leaves it out, so TLS fails visibly later.
pub fn tls_connector(extra_roots: &[rustls::pki_types::CertificateDer<'static>]) -> TlsConnector {
    super::trust::connector(extra_roots, None).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "extra CA certificates refused; trusting the system and built-in roots only");
        super::trust::connector(&[], None).unwrap_or_else(|_| {
            // The ring provider supports the default versions; this branch only guards a library change.
            TlsConnector::from(Arc::new(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ))
        })
    })
}

/// Opens a fresh connection to `host:port` (through `proxy`'s CONNECT tunnel when given),
/// timing each phase; the whole dial is bounded by `limit`.
pub async fn dial(
    host: &str,
    port: u16,
    tls: Option<&TlsConnector>,
    limit: Duration,
    proxy: Option<&url::Url>,
) -> Result<(Stream, Phases), DialError> {
    let mut phases = Phases::default();
    let deadline = tokio::time::Instant::now() + limit;
    let timeout = |phases: Phases, what: &str| DialError {
        outcome: Outcome::Timeout,
        message: format!("{what} did not finish within the connect timeout of {}", humantime::format_duration(limit)),
        phases,
    };

    let bare = host.trim_start_matches('[').trim_end_matches(']');
    // Through a proxy the socket goes to the proxy; the target's name is the proxy's to resolve.
    let proxy_host = proxy.and_then(|p| p.host_str()).map(|h| h.trim_start_matches('[').trim_end_matches(']'));
    let (dial_host, dial_port) = match (proxy, proxy_host) {
        (Some(p), Some(h)) => (h, p.port_or_known_default().unwrap_or(8080)),
        (Some(p), None) => {
            return Err(DialError {
                outcome: Outcome::ConnectError,
                message: format!("proxy {p} has no host"),
                phases,
            });
        }
        (None, _) => (bare, port),
    };
    let addrs: Vec<SocketAddr> = match dial_host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, dial_port)],
        Err(_) => {
            let t = Instant::now();
            let looked = tokio::time::timeout_at(deadline, tokio::net::lookup_host((dial_host, dial_port)))
                .await
                .map_err(|_| timeout(phases, "DNS lookup"))?;
            phases.dns = Some(t.elapsed());
            let addrs: Vec<SocketAddr> = looked
                .map_err(|e| DialError {
                    outcome: Outcome::DnsError,
                    message: format!("resolve {dial_host}: {e}"),
                    phases,
                })?
                .collect();
            if addrs.is_empty() {
                return Err(DialError {
                    outcome: Outcome::DnsError,
                    message: format!("{dial_host} has no addresses"),
                    phases,
                });
            }
            addrs
        }
    };

    let t = Instant::now();
    let mut last_err = None;
    let mut tcp = None;
    for addr in &addrs {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Err(_) => return Err(timeout(phases, "TCP connect")),
            Ok(Ok(s)) => {
                tcp = Some(s);
                break;
            }
            Ok(Err(e)) => last_err = Some(format!("connect {addr}: {e}")),
        }
    }
    let mut tcp = tcp.ok_or_else(|| DialError {
        outcome: Outcome::ConnectError,
        message: last_err
            .map(|e| if proxy.is_some() { format!("proxy: {e}") } else { e })
            .unwrap_or_else(|| "no address to connect to".into()),
        phases,
    })?;
    phases.connect = Some(t.elapsed());
    let connected = tokio::time::Instant::now();
    // Small request and event writes must not wait for Nagle's algorithm.
    let _ = tcp.set_nodelay(true);

    if let Some(p) = proxy {
        let t = Instant::now();
        tokio::time::timeout_at(deadline, super::proxy::connect(&mut tcp, p, bare, port))
            .await
            .map_err(|_| timeout(phases, "proxy CONNECT"))?
            .map_err(|e| DialError { outcome: Outcome::ConnectError, message: e.to_string(), phases })?;
        phases.proxy = Some(t.elapsed());
    }

    let socket = ProbeSocket::new(tcp);
    let Some(connector) = tls else {
        // Time for the server to accept it; no phase counts this (`super::grace`).
        super::grace::after_connect(connected).await;
        return Ok((Stream::Plain(socket), phases));
    };
    let name = ServerName::try_from(bare.to_string()).map_err(|e| DialError {
        outcome: Outcome::TlsError,
        message: format!("server name {bare}: {e}"),
        phases,
    })?;
    let t = Instant::now();
    let stream = tokio::time::timeout_at(deadline, connector.connect(name, socket))
        .await
        .map_err(|_| timeout(phases, "TLS handshake"))?
        .map_err(|e| DialError {
            outcome: Outcome::TlsError,
            message: format!("TLS handshake with {bare}: {e}"),
            phases,
        })?;
    phases.tls = Some(t.elapsed());
    Ok((Stream::Tls(Box::new(stream)), phases))
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::grace::ACCEPT_GRACE;
    use super::*;

    #[tokio::test]
    async fn a_plain_connection_is_handed_over_after_the_accept_grace_which_no_phase_counts() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("listener");
        let port = listener.local_addr().expect("address").port();
        let server = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
        let start = Instant::now();
        let (stream, phases) = dial("127.0.0.1", port, None, Duration::from_secs(5), None).await.expect("dialled");
        let took = start.elapsed();
        assert!(matches!(stream, Stream::Plain(_)));
        let connect = phases.connect.expect("connect timed");
        assert!(took >= connect + ACCEPT_GRACE, "the grace follows the connect ({took:?} vs {connect:?})");
        assert_eq!((phases.dns, phases.tls, phases.proxy), (None, None, None));
        server.await.expect("accept task").expect("accepted");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_grace_ends_when_another_probe_connection_brings_bytes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Just after a tick, so the grace's own end (the next tick) is a tick away.
        tokio::time::sleep_until(super::super::grid::after(tokio::time::Instant::now())).await;
        // Another probe's connection, whose server writes 5 ms from now.
        let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("listener");
        let other_addr = other.local_addr().expect("address");
        let mut reading = ProbeSocket::new(TcpStream::connect(other_addr).await.expect("connect"));
        let (mut peer, _) = other.accept().await.expect("accept");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            peer.write_all(b"data: {}\n\n").await.expect("write");
            peer
        });
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            reading.read(&mut buf).await.expect("read")
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("listener");
        let port = listener.local_addr().expect("address").port();
        let start = tokio::time::Instant::now();
        let tick = super::super::grid::at_or_after(start + ACCEPT_GRACE);
        let (_stream, _) = dial("127.0.0.1", port, None, Duration::from_secs(5), None).await.expect("dialled");
        let done = tokio::time::Instant::now();
        assert!(
            done - start >= Duration::from_millis(4),
            "not before the other connection's bytes ({:?})",
            done - start
        );
        assert!(done < tick, "ended by the bytes, not by the tick ({:?} after the start)", done - start);
    }
}
