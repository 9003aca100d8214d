//! Every body vigil reads outside the probe is capped: a real loopback server answers with a
//! 2 GB body, streamed lazily, to an alert channel, the balance poller and the price fetch. Each
//! call must come back with an error (or an excerpt) while the process's memory stays bounded.

use chrono::Utc;
use secrecy::SecretString;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use vigil::config::{ProviderConfig, ProviderKind, WebhookConfig};
use vigil::io::feeds::balance::BalanceClient;
use vigil::io::notify::channels::test_notification;
use vigil::io::notify::notifier::{DeliveryError, Notifier};
use vigil::io::notify::webhook::WebhookNotifier;
use vigil::vocab::target::Target;

/// What the hostile server sends: 2 GB, never all in memory on its side either.
const HUGE: u64 = 2 * 1024 * 1024 * 1024;
/// Memory growth allowed while a call reads the hostile body (a memory bound, not a speed one).
const RSS_GROWTH_LIMIT_KB: u64 = 64 * 1024;

/// Resident set size of this process, from /proc/self/status.
fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// How the server frames its endless body.
#[derive(Clone, Copy)]
enum Framing {
    /// `Content-Length: 2147483648`, then the bytes.
    Length,
    /// No length: read until close.
    Close,
    /// `Transfer-Encoding: chunked`, 64 KB chunks.
    Chunked,
}

/// A server answering every request with `status` and a 2 GB body of `{`, produced lazily.
async fn hostile_server(status: u16, framing: Framing) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut req = vec![0u8; 64 * 1024];
                let mut got = 0;
                // Read the request head (and whatever body came with it) before answering.
                while let Ok(n) = sock.read(&mut req[got..]).await {
                    if n == 0 {
                        return;
                    }
                    got += n;
                    if req[..got].windows(4).any(|w| w == b"\r\n\r\n") || got == req.len() {
                        break;
                    }
                }
                let framing_header = match framing {
                    Framing::Length => format!("Content-Length: {HUGE}\r\n"),
                    Framing::Close => "Connection: close\r\n".to_string(),
                    Framing::Chunked => "Transfer-Encoding: chunked\r\n".to_string(),
                };
                let head =
                    format!("HTTP/1.1 {status} Hostile\r\nContent-Type: application/json\r\n{framing_header}\r\n");
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let block = vec![b'{'; 64 * 1024];
                let mut sent = 0u64;
                while sent < HUGE {
                    let r = match framing {
                        Framing::Chunked => {
                            let mut c = format!("{:x}\r\n", block.len()).into_bytes();
                            c.extend_from_slice(&block);
                            c.extend_from_slice(b"\r\n");
                            sock.write_all(&c).await
                        }
                        _ => sock.write_all(&block).await,
                    };
                    if r.is_err() {
                        return; // the client stopped reading and closed: what we want
                    }
                    sent += block.len() as u64;
                }
            });
        }
    });
    addr
}

/// Runs `call` and checks the process grew by less than the limit meanwhile.
async fn bounded<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    let before = rss_kb();
    let out = tokio::time::timeout(Duration::from_secs(60), call).await.unwrap_or_else(|_| panic!("{what}: no answer"));
    let grew = rss_kb().saturating_sub(before);
    assert!(grew < RSS_GROWTH_LIMIT_KB, "{what}: RSS grew by {grew} kB reading a hostile body");
    out
}

#[tokio::test]
async fn an_alert_receiver_answering_500_with_2_gb_is_a_retryable_error_with_an_excerpt() {
    for framing in [Framing::Close, Framing::Chunked, Framing::Length] {
        let addr = hostile_server(500, framing).await;
        let cfg =
            WebhookConfig { name: "hook".into(), url: SecretString::from(format!("http://{addr}/hook")), secret: None };
        let hook = WebhookNotifier::new(&cfg, Duration::from_secs(30)).expect("notifier");
        let n = test_notification("test-1", Utc::now(), None);
        let r = bounded("webhook", hook.send(&n, uuid::Uuid::new_v4())).await;
        match r {
            Err(DeliveryError::Retryable { message, .. }) => {
                assert!(message.starts_with("hook: HTTP 500: {{{"), "{message}");
                assert!(message.len() < 1024, "the excerpt is short: {} bytes", message.len());
            }
            other => panic!("expected a retryable error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_balance_endpoint_answering_2_gb_is_an_error() {
    for framing in [Framing::Close, Framing::Chunked, Framing::Length] {
        let addr = hostile_server(200, framing).await;
        let client = BalanceClient::new(
            "openrouter",
            format!("http://{addr}/api/v1").parse().expect("url"),
            SecretString::from("sk-test-balance"),
            Duration::from_secs(30),
        )
        .expect("client");
        let r = bounded("balance", client.key_remaining()).await;
        let e = r.expect_err("a 2 GB body is refused");
        assert!(e.to_string().contains("larger than"), "{e}");
    }
}

#[tokio::test]
async fn a_published_price_fetch_answering_2_gb_is_a_note_not_a_price() {
    let addr = hostile_server(200, Framing::Chunked).await;
    let p = ProviderConfig {
        api_key: Some(SecretString::from("sk-test-price")),
        models: vec!["m".into()],
        routes: vec!["Host".into()],
        ..ProviderConfig::new("or", ProviderKind::Openai, format!("http://{addr}/api/v1").parse().expect("url"))
    };
    let t = Target::new("or".into(), "m".into(), Some("Host".into()), "test-1".into());
    let dir = tempfile::tempdir().expect("tempdir");
    let book = bounded(
        "prices",
        vigil::io::feeds::prices::load(&[std::sync::Arc::new(p)], std::slice::from_ref(&t), dir.path(), Utc::now()),
    )
    .await;
    assert_eq!(book.price(&t), None);
    assert!(book.notes.iter().any(|n| n.contains("larger than")), "{:?}", book.notes);
}
