//! The stand-in provider: exact framing, pacing truth, endings, TLS and fixture replay.

use crate::support::fixture;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vigil::run::demo::standin::split_sse_events;
use vigil::run::demo::{End, Script, StandIn};

const GUARD: Duration = Duration::from_secs(10);

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes()
}

/// Sends `request` and reads until the server closes.
async fn raw_exchange(standin: &StandIn, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(standin.addr()).await.expect("connect");
    stream.write_all(request).await.expect("send request");
    let mut out = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut out)).await.expect("server closes").expect("read");
    out
}

/// Splits a raw response into (head, body bytes).
fn split_head(raw: &[u8]) -> (String, Vec<u8>) {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("complete head") + 4;
    (String::from_utf8(raw[..end].to_vec()).expect("ascii head"), raw[end..].to_vec())
}

/// Decodes chunked framing: the payload of every chunk, and whether the terminating chunk came.
fn dechunk(mut body: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let mut chunks = Vec::new();
    loop {
        let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") else {
            assert!(body.is_empty(), "dangling bytes after last chunk: {body:?}");
            return (chunks, false);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line_end]).expect("hex size"), 16).expect("size");
        body = &body[line_end + 2..];
        if size == 0 {
            assert_eq!(body, b"\r\n", "terminating chunk then CRLF, nothing else");
            return (chunks, true);
        }
        assert!(body.len() >= size + 2, "chunk cut short");
        chunks.push(body[..size].to_vec());
        assert_eq!(&body[size..size + 2], b"\r\n", "chunk data ends with CRLF");
        body = &body[size + 2..];
    }
}

#[tokio::test]
async fn chunked_framing_is_exact_and_truth_timestamps_follow_the_script() {
    let gap = Duration::from_millis(40);
    let standin = StandIn::start(move |_| {
        Script::status(200)
            .with_header("Content-Type", "text/plain")
            .with_head_delay(gap)
            .with_chunk(Duration::ZERO, "hello")
            .with_chunk(gap, Bytes::from(vec![b'x'; 300]))
            .with_chunk(gap * 2, "!")
    })
    .await
    .expect("start");
    let raw = raw_exchange(&standin, &get("/t")).await;
    let (head, body) = split_head(&raw);
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let (chunks, terminated) = dechunk(&body);
    assert!(terminated);
    assert_eq!(chunks, vec![b"hello".to_vec(), vec![b'x'; 300], b"!".to_vec()]);
    assert!(body.starts_with(b"5\r\nhello\r\n12c\r\n"), "lower-case hex sizes");

    let records = standin.requests();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    let head_at = r.head_written_at.expect("head written");
    assert_eq!(r.chunk_written_at.len(), 3);
    assert!(head_at - r.received_at >= gap);
    assert!(r.chunk_written_at[0] >= head_at);
    assert!(r.chunk_written_at[1] - r.chunk_written_at[0] >= gap);
    assert!(r.chunk_written_at[2] - r.chunk_written_at[1] >= gap * 2);
    standin.shutdown().await;
}

#[tokio::test]
async fn request_head_and_body_are_recorded_even_when_sent_in_pieces() {
    let standin = StandIn::start(|r| Script::json(200, &r.body)).await.expect("start");
    let body = br#"{"model":"m","stream":true}"#;
    let head = format!(
        "POST /api/v1/chat/completions?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-test-1\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = TcpStream::connect(standin.addr()).await.expect("connect");
    let request = [head.as_bytes(), body.as_slice()].concat();
    // Dribble the request out a few bytes at a time so the parser must reassemble it.
    for piece in request.chunks(7) {
        stream.write_all(piece).await.expect("write");
        stream.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut raw = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut raw)).await.expect("closes").expect("read");
    let (head, echoed) = split_head(&raw);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
    assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
    assert!(!head.contains("Transfer-Encoding"));
    assert_eq!(echoed, body);

    let records = standin.requests();
    let r = &records[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/api/v1/chat/completions?x=1");
    assert_eq!(r.path_only(), "/api/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test-1"));
    assert_eq!(r.body.as_ref(), body);
    assert_eq!(r.json().expect("json body")["model"], "m");
}

#[tokio::test]
async fn malformed_requests_get_400_and_never_reach_the_handler() {
    let standin = StandIn::start(|_| Script::json(200, b"{}")).await.expect("start");
    let raw = raw_exchange(&standin, b"NOT HTTP AT ALL\r\n\r\n").await;
    assert!(raw.starts_with(b"HTTP/1.1 400 Bad Request\r\n"), "{}", String::from_utf8_lossy(&raw));
    let raw = raw_exchange(&standin, b"POST / HTTP/1.1\r\nContent-Length: nope\r\n\r\n").await;
    assert!(raw.starts_with(b"HTTP/1.1 400 "));
    assert!(standin.requests().is_empty());
}

#[tokio::test]
async fn close_delimited_body_has_no_framing() {
    let standin = StandIn::start(|_| {
        Script::status(200)
            .with_chunked(false)
            .with_chunk(Duration::ZERO, "data: a\n\n")
            .with_chunk(Duration::from_millis(5), "data: b\n\n")
    })
    .await
    .expect("start");
    let raw = raw_exchange(&standin, &get("/")).await;
    let (head, body) = split_head(&raw);
    assert_eq!(head, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    assert_eq!(body, b"data: a\n\ndata: b\n\n");
    assert_eq!(standin.requests()[0].chunk_written_at.len(), 2);
}

#[tokio::test]
async fn abort_closes_mid_body_without_the_terminating_chunk() {
    let standin = StandIn::start(|_| Script::sse(b"data: 1\n\ndata: 2\n\n", Duration::ZERO).with_end(End::Abort))
        .await
        .expect("start");
    let raw = raw_exchange(&standin, &get("/")).await;
    let (_, body) = split_head(&raw);
    let (chunks, terminated) = dechunk(&body);
    assert!(!terminated, "no 0-chunk on abort");
    assert_eq!(chunks, vec![b"data: 1\n\n".to_vec(), b"data: 2\n\n".to_vec()]);

    // A real HTTP client sees the cut as a body error, not a clean end.
    let response = reqwest::get(format!("{}/", standin.base_url())).await.expect("head arrives");
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.is_err(), "aborted chunked body must fail");
}

#[tokio::test]
async fn hang_keeps_the_connection_open_without_blocking_others_and_shutdown_ends_it() {
    let standin = StandIn::start(|r| {
        if r.path == "/hang" {
            Script::status(200).with_chunk(Duration::ZERO, "partial").with_end(End::Hang)
        } else {
            Script::json(200, b"{\"ok\":true}")
        }
    })
    .await
    .expect("start");
    let mut hung = TcpStream::connect(standin.addr()).await.expect("connect");
    hung.write_all(&get("/hang")).await.expect("send");
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.ends_with(b"7\r\npartial\r\n") {
        let n = tokio::time::timeout(GUARD, hung.read(&mut buf)).await.expect("first chunk").expect("read");
        assert!(n > 0, "hung connection closed early");
        seen.extend_from_slice(&buf[..n]);
    }

    // Other connections are served while one hangs.
    let mut others = Vec::new();
    for _ in 0..20 {
        let base = standin.base_url();
        others.push(tokio::spawn(async move { reqwest::get(format!("{base}/ok")).await?.text().await }));
    }
    for other in others {
        assert_eq!(other.await.expect("join").expect("served"), "{\"ok\":true}");
    }
    // Still nothing more on the hung connection.
    assert!(tokio::time::timeout(Duration::from_millis(200), hung.read(&mut buf)).await.is_err());

    standin.shutdown().await;
    let closed = tokio::time::timeout(GUARD, hung.read(&mut buf)).await.expect("shutdown closes the hung connection");
    assert!(matches!(closed, Ok(0) | Err(_)));
}

#[tokio::test]
async fn tls_with_the_returned_certificate() {
    let (standin, cert) = StandIn::start_tls(|r| Script::json(200, format!("{{\"path\":\"{}\"}}", r.path).as_bytes()))
        .await
        .expect("start");
    assert!(standin.base_url().starts_with("https://localhost:"));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("cert parses");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    for name in ["localhost", "127.0.0.1"] {
        let tcp = TcpStream::connect(standin.addr()).await.expect("connect");
        let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
        let mut tls = connector.connect(server_name, tcp).await.expect("handshake with the returned cert");
        tls.write_all(&get("/secure")).await.expect("send");
        let mut raw = Vec::new();
        tokio::time::timeout(GUARD, tls.read_to_end(&mut raw)).await.expect("closes").expect("clean TLS close");
        let (head, body) = split_head(&raw);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
        assert_eq!(body, b"{\"path\":\"/secure\"}");
    }

    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_der(&cert).expect("der"))
        .build()
        .expect("client");
    let text = client.get(format!("{}/r", standin.base_url())).send().await.expect("send").text().await.expect("body");
    assert_eq!(text, "{\"path\":\"/r\"}");
    assert_eq!(standin.requests().len(), 3);
}

#[tokio::test]
async fn fixtures_replay_byte_for_byte_one_event_per_chunk() {
    for name in ["openai-chat-stream.sse", "gemini-stream.sse", "anthropic-messages-stream.sse"] {
        let body = fixture(name);
        let standin = StandIn::start({
            let body = body.clone();
            move |_| Script::sse(&body, Duration::from_millis(1))
        })
        .await
        .expect("start");
        let raw = raw_exchange(&standin, &get("/stream")).await;
        let (head, framed) = split_head(&raw);
        assert!(head.contains("Content-Type: text/event-stream\r\n"));
        let (chunks, terminated) = dechunk(&framed);
        assert!(terminated);
        assert_eq!(chunks.concat(), body, "{name} replays byte for byte");
        assert!(chunks.len() > 2, "{name} has several events");
        let blank = if name.starts_with("gemini") { &b"\r\n\r\n"[..] } else { &b"\n\n"[..] };
        for chunk in &chunks {
            assert!(chunk.ends_with(blank), "{name}: every event ends with its blank line");
        }
        // And through a real HTTP client.
        let via_reqwest = reqwest::get(format!("{}/stream", standin.base_url())).await.expect("get").bytes().await;
        assert_eq!(via_reqwest.expect("body").as_ref(), body.as_slice());
    }
}

#[test]
fn sse_split_handles_lf_crlf_and_partial_tails() {
    let events = split_sse_events(b"data: a\n\ndata: b\r\n\r\n: comment\ndata: c\r\n\n\ndata: tail");
    let events: Vec<&[u8]> = events.iter().map(|e| e.as_ref()).collect();
    assert_eq!(events, vec![&b"data: a\n\n"[..], b"data: b\r\n\r\n", b": comment\ndata: c\r\n\n", b"\ndata: tail"]);
    assert!(split_sse_events(b"").is_empty());
}

#[test]
fn split_every_keeps_bytes_and_puts_each_delay_on_the_first_piece() {
    let gap = Duration::from_millis(10);
    let script = Script::sse(b"data: abcdef\n\ndata: x\n\n", gap);
    let body = script.body();
    let split = script.clone().split_every(4);
    assert_eq!(split.body(), body);
    let sizes: Vec<usize> = split.chunks.iter().map(|c| c.bytes.len()).collect();
    assert_eq!(sizes, vec![4, 4, 4, 2, 4, 4, 1]);
    let delays: Vec<Duration> = split.chunks.iter().map(|c| c.delay).collect();
    let z = Duration::ZERO;
    assert_eq!(delays, vec![gap, z, z, z, gap, z, z]);
    assert_eq!(split.total_delay(), script.total_delay());

    let across = script.clone().split_across(5);
    assert_eq!(across.body(), body);
    assert!(across.chunks.iter().all(|c| c.bytes.len() <= 5));
    assert_eq!(across.total_delay(), script.total_delay());
    // Second event starts at byte 14, i.e. inside piece 2.
    assert_eq!(across.chunks[2].delay, gap);
    assert_eq!(across.chunks[0].delay, gap);
}

#[tokio::test]
async fn split_every_one_byte_reaches_the_wire_as_one_byte_chunks() {
    let body = fixture("openai-chat-stream.sse");
    let standin = StandIn::start({
        let body = body.clone();
        move |_| Script::sse(&body[..200], Duration::ZERO).split_every(1)
    })
    .await
    .expect("start");
    let raw = raw_exchange(&standin, &get("/")).await;
    let (chunks, terminated) = dechunk(&split_head(&raw).1);
    assert!(terminated);
    assert_eq!(chunks.len(), 200);
    assert!(chunks.iter().all(|c| c.len() == 1));
    assert_eq!(chunks.concat(), &body[..200]);
    assert_eq!(standin.requests()[0].chunk_written_at.len(), 200);
}

#[tokio::test]
async fn many_concurrent_slow_streams() {
    let standin = StandIn::start(|_| {
        Script::status(200).with_chunk(Duration::from_millis(20), "a").with_chunk(Duration::from_millis(20), "b")
    })
    .await
    .expect("start");
    let addr = standin.addr();
    let mut tasks = Vec::new();
    for _ in 0..300 {
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await?;
            stream.write_all(&get("/")).await?;
            let mut out = Vec::new();
            stream.read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        }));
    }
    for task in tasks {
        let raw = tokio::time::timeout(GUARD, task).await.expect("in time").expect("join").expect("io");
        assert_eq!(dechunk(&split_head(&raw).1), (vec![b"a".to_vec(), b"b".to_vec()], true));
    }
    assert_eq!(standin.requests().len(), 300);
}

#[tokio::test]
async fn keep_records_bounds_the_log_and_still_stamps_the_newest() {
    let standin =
        StandIn::start(|r| Script::status(200).with_chunk(Duration::ZERO, r.path.clone())).await.expect("start");
    standin.keep_records(3);
    for i in 0..5 {
        raw_exchange(&standin, &get(&format!("/{i}"))).await;
    }
    let records = standin.requests();
    let paths: Vec<&str> = records.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/2", "/3", "/4"]);
    assert!(records.iter().all(|r| r.head_written_at.is_some() && r.chunk_written_at.len() == 1));
}

/// Benchmark, not run by default: `cargo test --release --test it demo_standin -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: thousands of sockets"]
async fn bench_5000_concurrent_streams() {
    const CONNECTIONS: usize = 5000;
    let standin = StandIn::start(|_| Script::sse(b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n", Duration::from_millis(20)))
        .await
        .expect("start");
    let addr = standin.addr();
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await?;
                stream.write_all(&get("/")).await?;
                let mut out = Vec::new();
                stream.read_to_end(&mut out).await?;
                Ok::<_, std::io::Error>(out)
            })
        })
        .collect();
    let mut ok = 0usize;
    for task in tasks {
        let raw =
            tokio::time::timeout(Duration::from_secs(120), task).await.expect("in time").expect("join").expect("io");
        let (chunks, terminated) = dechunk(&split_head(&raw).1);
        assert!(terminated && chunks.len() == 3);
        ok += 1;
    }
    let elapsed = started.elapsed();
    let records = standin.requests();
    let mut lag: Vec<f64> =
        records.iter().map(|r| (r.chunk_written_at[2] - r.received_at).as_secs_f64() * 1000.0 - 60.0).collect();
    lag.sort_by(f64::total_cmp);
    println!(
        "{ok} concurrent streams in {:.2}s; server-side overshoot of the 60 ms script: p50 {:.1} ms, p99 {:.1} ms",
        elapsed.as_secs_f64(),
        lag[lag.len() / 2],
        lag[lag.len() * 99 / 100]
    );
    assert_eq!(records.len(), CONNECTIONS);
}

#[tokio::test]
async fn empty_chunks_write_nothing_but_keep_stamps_aligned() {
    let standin = StandIn::start(|_| {
        Script::status(200)
            .with_chunk(Duration::ZERO, "a")
            .with_chunk(Duration::ZERO, "")
            .with_chunk(Duration::ZERO, "b")
    })
    .await
    .expect("start");
    let raw = raw_exchange(&standin, &get("/")).await;
    assert_eq!(dechunk(&split_head(&raw).1), (vec![b"a".to_vec(), b"b".to_vec()], true));
    assert_eq!(standin.requests()[0].chunk_written_at.len(), 3);
}

#[tokio::test]
async fn tls_abort_is_an_unclean_close() {
    let (standin, cert) =
        StandIn::start_tls(|_| Script::sse(b"data: 1\n\n", Duration::ZERO).with_end(End::Abort)).await.expect("start");
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_der(&cert).expect("der"))
        .build()
        .expect("client");
    let response = client.get(format!("{}/", standin.base_url())).send().await.expect("head arrives");
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.is_err(), "cut TLS stream must fail");
}
