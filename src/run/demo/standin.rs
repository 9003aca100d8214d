//! A scriptable HTTP/1.1 stand-in provider on loopback.
//!
//! Responses are written by hand so a test controls the exact bytes of every write, the pause
//! before each one, and how the body ends. The server records when each request's last bytes
//! arrived (the kernel's receive stamp, as the probe's own reads are stamped) and when each write
//! was flushed: that is the "server truth" probe timings are checked against.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::io::probe::h1::Arrivals;
use crate::io::probe::socket::ProbeSocket;

/// Largest request head accepted before answering 431.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted before answering 413.
const MAX_BODY: usize = 16 * 1024 * 1024;
/// Headers parsed per request.
const MAX_HEADERS: usize = 100;
/// Listen backlog; benchmarks open thousands of connections at once.
const BACKLOG: u32 = 8192;

/// One write of the response body: wait `delay`, then write and flush `bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Pause before this write.
    pub delay: Duration,
    /// Bytes of this write (body bytes; chunked framing is added around them).
    pub bytes: Bytes,
}

impl Chunk {
    /// A chunk written after `delay`.
    pub fn new(delay: Duration, bytes: impl Into<Bytes>) -> Chunk {
        Chunk { delay, bytes: bytes.into() }
    }
}

/// How a scripted response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum End {
    /// Terminate the body properly (last chunk for chunked bodies) and close.
    #[default]
    Complete,
    /// Close the connection mid-body, without the terminating chunk (and, on TLS, without close_notify).
    Abort,
    /// Keep the connection open forever after the last chunk.
    Hang,
}

/// A scripted response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// Status code.
    pub status: u16,
    /// Headers, written in order. `Transfer-Encoding` and `Connection` are added unless present.
    pub headers: Vec<(String, String)>,
    /// Pause before writing the status line.
    pub head_delay: Duration,
    /// Body writes.
    pub chunks: Vec<Chunk>,
    /// `Transfer-Encoding: chunked` (default) or a body delimited by closing the connection
    /// (or by a `Content-Length` header the script carries).
    pub chunked: bool,
    /// How the body ends.
    pub end: End,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            status: 200,
            headers: Vec::new(),
            head_delay: Duration::ZERO,
            chunks: Vec::new(),
            chunked: true,
            end: End::Complete,
        }
    }
}

impl Script {
    /// An empty chunked response with `status`.
    pub fn status(status: u16) -> Script {
        Script { status, ..Script::default() }
    }

    /// 200 `text/event-stream`, one chunk per SSE event (blank-line separated, any line ending),
    /// each written after `gap`.
    pub fn sse(body: &[u8], gap: Duration) -> Script {
        let chunks = split_sse_events(body).into_iter().map(|event| Chunk::new(gap, event)).collect();
        Script {
            headers: vec![
                ("Content-Type".into(), "text/event-stream".into()),
                ("Cache-Control".into(), "no-cache".into()),
            ],
            chunks,
            ..Script::default()
        }
    }

    /// `status` with a JSON body sent in one write with `Content-Length`.
    pub fn json(status: u16, body: &[u8]) -> Script {
        Script {
            status,
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                ("Content-Length".into(), body.len().to_string()),
            ],
            chunks: vec![Chunk::new(Duration::ZERO, Bytes::copy_from_slice(body))],
            chunked: false,
            ..Script::default()
        }
    }

    /// Splits every chunk into `n`-byte pieces; the first piece keeps the chunk's delay, the rest
    /// follow immediately. Chunk (event) boundaries stay piece boundaries.
    pub fn split_every(mut self, n: usize) -> Script {
        let n = n.max(1);
        self.chunks = self
            .chunks
            .into_iter()
            .flat_map(|chunk| {
                let mut pieces = Vec::with_capacity(chunk.bytes.len().div_ceil(n).max(1));
                let mut rest = chunk.bytes;
                let mut delay = chunk.delay;
                loop {
                    let piece = rest.split_to(n.min(rest.len()));
                    pieces.push(Chunk { delay, bytes: piece });
                    delay = Duration::ZERO;
                    if rest.is_empty() {
                        break;
                    }
                }
                pieces
            })
            .collect();
        self
    }

    /// Re-chunks the whole body into `n`-byte pieces that ignore chunk boundaries (so an SSE event
    /// may end mid-piece); each original delay is paid before the piece holding that chunk's first byte.
    pub fn split_across(mut self, n: usize) -> Script {
        let n = n.max(1);
        let body = self.body();
        let mut delays = vec![Duration::ZERO; body.len().div_ceil(n)];
        let mut offset = 0usize;
        for chunk in &self.chunks {
            if let Some(slot) = delays.get_mut(offset / n) {
                *slot += chunk.delay;
            }
            offset += chunk.bytes.len();
        }
        self.chunks = delays
            .into_iter()
            .enumerate()
            .map(|(i, delay)| Chunk { delay, bytes: body.slice(i * n..((i + 1) * n).min(body.len())) })
            .collect();
        self
    }

    /// Appends a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Script {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the pause before the status line.
    pub fn with_head_delay(mut self, delay: Duration) -> Script {
        self.head_delay = delay;
        self
    }

    /// Appends a body write.
    pub fn with_chunk(mut self, delay: Duration, bytes: impl Into<Bytes>) -> Script {
        self.chunks.push(Chunk::new(delay, bytes));
        self
    }

    /// Sets how the response ends.
    pub fn with_end(mut self, end: End) -> Script {
        self.end = end;
        self
    }

    /// Chooses chunked framing or a close-delimited body.
    pub fn with_chunked(mut self, chunked: bool) -> Script {
        self.chunked = chunked;
        self
    }

    /// The whole body, all chunks concatenated.
    pub fn body(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.chunks.iter().map(|c| c.bytes.len()).sum());
        for chunk in &self.chunks {
            out.extend_from_slice(&chunk.bytes);
        }
        out.freeze()
    }

    /// Sum of all pauses (head and chunks).
    pub fn total_delay(&self) -> Duration {
        self.head_delay + self.chunks.iter().map(|c| c.delay).sum::<Duration>()
    }
}

/// What an OpenAI-compatible stand-in says about the model in every chunk of
/// [`Script::openai_chat`]: the echoed `model`, `system_fingerprint`, OpenRouter's upstream
/// `provider` and, when set, the log-probability given to every token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatIdentity {
    /// The `model` field.
    pub model: String,
    /// `system_fingerprint` (null when `None`).
    pub system_fingerprint: Option<String>,
    /// OpenRouter's `provider` field (absent when `None`).
    pub provider: Option<String>,
    /// `logprobs.content[].logprob` of every token (`logprobs: null` when `None`).
    pub logprob: Option<f64>,
}

impl Script {
    /// A 200 OpenAI chat-completions stream answering `text`: a role-only first chunk, one
    /// content chunk per word (whitespace kept), a `finish_reason: stop` chunk, a usage chunk
    /// and `[DONE]`, each written after `gap`; every chunk carries `id`'s fields.
    pub fn openai_chat(text: &str, id: &ChatIdentity, gap: Duration) -> Script {
        let chunk = |delta: serde_json::Value, finish: Option<&str>, logprobs: serde_json::Value| {
            let mut v = serde_json::json!({
                "id": "chatcmpl-standin",
                "object": "chat.completion.chunk",
                "created": 1_764_547_200,
                "model": id.model,
                "system_fingerprint": id.system_fingerprint,
                "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
            });
            if let Some(p) = &id.provider {
                v["provider"] = serde_json::json!(p);
            }
            format!("data: {v}\n\n")
        };
        let mut body = chunk(serde_json::json!({"role": "assistant", "content": ""}), None, serde_json::Value::Null);
        let mut pieces = 0u32;
        for word in text.split_inclusive(char::is_whitespace) {
            pieces += 1;
            let logprobs = match id.logprob {
                Some(lp) => serde_json::json!({"content": [{"token": word, "logprob": lp, "top_logprobs": []}]}),
                None => serde_json::Value::Null,
            };
            body.push_str(&chunk(serde_json::json!({"content": word}), None, logprobs));
        }
        body.push_str(&chunk(serde_json::json!({}), Some("stop"), serde_json::Value::Null));
        let mut usage = serde_json::json!({
            "id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": 1_764_547_200,
            "model": id.model, "choices": [],
            "usage": {"prompt_tokens": 120, "completion_tokens": pieces, "total_tokens": 120 + pieces},
        });
        if let Some(p) = &id.provider {
            usage["provider"] = serde_json::json!(p);
        }
        body.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
        Script::sse(body.as_bytes(), gap)
    }
}

/// Splits an SSE body into events, each keeping its own bytes up to and including the blank line
/// that ends it; a trailing partial event is kept as the last piece.
pub fn split_sse_events(body: &[u8]) -> Vec<Bytes> {
    let mut events = Vec::new();
    let mut start = 0usize;
    let mut line_start = 0usize;
    let mut i = 0usize;
    while i < body.len() {
        let term = match body[i] {
            b'\r' if body.get(i + 1) == Some(&b'\n') => 2,
            b'\r' | b'\n' => 1,
            _ => {
                i += 1;
                continue;
            }
        };
        let empty_line = i == line_start;
        i += term;
        line_start = i;
        if empty_line && line_start > start + term {
            events.push(Bytes::copy_from_slice(&body[start..i]));
            start = i;
        }
    }
    if start < body.len() {
        events.push(Bytes::copy_from_slice(&body[start..]));
    }
    events
}

/// One request the stand-in received, with the server-side truth timestamps of its reply.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// Method (`POST`).
    pub method: String,
    /// Path including the query string.
    pub path: String,
    /// Headers in arrival order.
    pub headers: Vec<(String, String)>,
    /// Body (by `Content-Length`).
    pub body: Bytes,
    /// When the request's last bytes reached the host (the kernel's receive stamp of the read
    /// that completed it; where the kernel gives none, when that read returned).
    pub received_at: Instant,
    /// When the status line and headers were flushed to the socket.
    pub head_written_at: Option<Instant>,
    /// When each body chunk was flushed, index for index with the script's chunks.
    pub chunk_written_at: Vec<Instant>,
}

impl RequestRecord {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Path without the query string.
    pub fn path_only(&self) -> &str {
        self.path.split('?').next().unwrap_or(&self.path)
    }

    /// The body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

type Handler = dyn Fn(&RequestRecord) -> Script + Send + Sync + 'static;
type Records = Arc<Mutex<RecordLog>>;

/// Requests in arrival order; optionally only the newest `cap`, so a long-running demo stays small.
#[derive(Default)]
struct RecordLog {
    /// Sequence number of `items[0]`.
    first: u64,
    items: VecDeque<RequestRecord>,
    cap: Option<usize>,
}

impl RecordLog {
    fn push(&mut self, record: RequestRecord) -> u64 {
        if let Some(cap) = self.cap {
            while self.items.len() >= cap.max(1) {
                self.items.pop_front();
                self.first += 1;
            }
        }
        self.items.push_back(record);
        self.first + self.items.len() as u64 - 1
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut RequestRecord> {
        let index = usize::try_from(seq.checked_sub(self.first)?).ok()?;
        self.items.get_mut(index)
    }
}

/// A running stand-in server; dropping it stops the listener and every connection.
pub struct StandIn {
    addr: SocketAddr,
    tls: bool,
    records: Records,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandIn").field("addr", &self.addr).field("tls", &self.tls).finish_non_exhaustive()
    }
}

impl StandIn {
    /// Starts a plain HTTP stand-in on 127.0.0.1 (random port) answering every request with `handler`.
    pub async fn start<F>(handler: F) -> std::io::Result<StandIn>
    where
        F: Fn(&RequestRecord) -> Script + Send + Sync + 'static,
    {
        Self::spawn(Arc::new(handler), None)
    }

    /// Starts a TLS stand-in with a fresh self-signed certificate for `localhost` and `127.0.0.1`;
    /// returns the certificate so a client can trust it.
    pub async fn start_tls<F>(handler: F) -> std::io::Result<(StandIn, CertificateDer<'static>)>
    where
        F: Fn(&RequestRecord) -> Script + Send + Sync + 'static,
    {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .map_err(std::io::Error::other)?;
        let cert = certified.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .map_err(std::io::Error::other)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let standin = Self::spawn(Arc::new(handler), Some(TlsAcceptor::from(Arc::new(config))))?;
        Ok((standin, cert))
    }

    /// Starts a TLS stand-in with the caller's server setup (a CA-signed certificate, client
    /// certificate checks); ALPN is set to HTTP/1.1.
    pub fn start_tls_config<F>(handler: F, mut config: rustls::ServerConfig) -> std::io::Result<StandIn>
    where
        F: Fn(&RequestRecord) -> Script + Send + Sync + 'static,
    {
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self::spawn(Arc::new(handler), Some(TlsAcceptor::from(Arc::new(config))))
    }

    fn spawn(handler: Arc<Handler>, tls: Option<TlsAcceptor>) -> std::io::Result<StandIn> {
        let socket = TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
        let listener = socket.listen(BACKLOG)?;
        let listening_since = Instant::now();
        let addr = listener.local_addr()?;
        let records: Records = Arc::default();
        let is_tls = tls.is_some();
        let accept_records = Arc::clone(&records);
        let accept = tokio::spawn(async move {
            // Owning the JoinSet here means aborting this task aborts every connection too.
            let mut connections = JoinSet::new();
            loop {
                while connections.try_join_next().is_some() {}
                let (stream, _) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Usually fd exhaustion under load: back off instead of spinning.
                        tracing::warn!(%error, "stand-in accept failed");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                };
                let handler = Arc::clone(&handler);
                let records = Arc::clone(&accept_records);
                let tls = tls.clone();
                connections.spawn(async move {
                    if let Err(error) = serve_connection(stream, listening_since, tls, handler, records).await {
                        tracing::debug!(%error, "stand-in connection ended with an error");
                    }
                });
            }
        });
        Ok(StandIn { addr, tls: is_tls, records, accept: Some(accept) })
    }

    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, or `https://localhost:PORT` for TLS.
    pub fn base_url(&self) -> String {
        if self.tls {
            format!("https://localhost:{}", self.addr.port())
        } else {
            format!("http://127.0.0.1:{}", self.addr.port())
        }
    }

    /// Requests received so far, in arrival order, with truth timestamps as filled so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.records).items.iter().cloned().collect()
    }

    /// Keeps only the newest `max` (at least one) requests from now on; older ones are forgotten.
    pub fn keep_records(&self, max: usize) {
        let max = max.max(1);
        let mut log = lock(&self.records);
        log.cap = Some(max);
        while log.items.len() > max {
            log.items.pop_front();
            log.first += 1;
        }
    }

    /// Stops the listener and every open connection.
    pub async fn shutdown(mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
            // Once the accept task is gone its JoinSet has aborted every connection.
            let _ = accept.await;
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(accept) = &self.accept {
            accept.abort();
        }
    }
}

fn lock(records: &Records) -> MutexGuard<'_, RecordLog> {
    // A panicking handler must not make the records unreadable.
    records.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn serve_connection(
    stream: TcpStream,
    listening_since: Instant,
    tls: Option<TlsAcceptor>,
    handler: Arc<Handler>,
    records: Records,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    // The probe's own socket, for its receive stamps: a request is "received" when its last
    // bytes reached the host, not when this busy server got round to accepting the connection
    // and reading them, so the truth a probe is checked against holds no server backlog.
    // Never parked.
    let stream = ProbeSocket::new(stream).stamps_since(listening_since);
    match tls {
        Some(acceptor) => {
            let stream = acceptor.accept(stream).await?;
            serve(stream, handler, records).await
        }
        None => serve(stream, handler, records).await,
    }
}

impl Arrivals for tokio_rustls::server::TlsStream<ProbeSocket> {
    fn arrival(&self) -> Option<Instant> {
        self.get_ref().0.arrival()
    }
}

/// Why a request could not be read; each maps to an error status.
enum BadRequest {
    Malformed,
    HeadTooLarge,
    BodyTooLarge,
    LengthRequired,
}

impl BadRequest {
    fn status(&self) -> u16 {
        match self {
            BadRequest::Malformed => 400,
            BadRequest::HeadTooLarge => 431,
            BadRequest::BodyTooLarge => 413,
            BadRequest::LengthRequired => 411,
        }
    }
}

async fn serve<S>(mut stream: S, handler: Arc<Handler>, records: Records) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Arrivals,
{
    let record = match read_request(&mut stream).await? {
        Some(Ok(record)) => record,
        Some(Err(bad)) => {
            let script = Script::json(bad.status(), b"{\"error\":\"bad request\"}");
            write_head(&mut stream, &script).await?;
            stream.write_all(&script.body()).await?;
            stream.flush().await?;
            return stream.shutdown().await;
        }
        None => return Ok(()),
    };
    let script = handler(&record);
    let seq = lock(&records).push(record);
    let stamp = |f: &dyn Fn(&mut RequestRecord)| {
        if let Some(record) = lock(&records).get_mut(seq) {
            f(record);
        }
    };

    pause(script.head_delay).await;
    write_head(&mut stream, &script).await?;
    let now = Instant::now();
    stamp(&|r| r.head_written_at = Some(now));

    for chunk in &script.chunks {
        pause(chunk.delay).await;
        // A zero-length chunk would end a chunked body early: write nothing, but still stamp it so
        // `chunk_written_at[i]` always belongs to `chunks[i]`.
        if script.chunked && !chunk.bytes.is_empty() {
            let mut framed = BytesMut::with_capacity(chunk.bytes.len() + 16);
            framed.extend_from_slice(format!("{:x}\r\n", chunk.bytes.len()).as_bytes());
            framed.extend_from_slice(&chunk.bytes);
            framed.extend_from_slice(b"\r\n");
            stream.write_all(&framed).await?;
        } else {
            stream.write_all(&chunk.bytes).await?;
        }
        stream.flush().await?;
        let now = Instant::now();
        stamp(&|r| r.chunk_written_at.push(now));
    }

    match script.end {
        End::Complete => {
            if script.chunked {
                stream.write_all(b"0\r\n\r\n").await?;
                stream.flush().await?;
            }
            stream.shutdown().await
        }
        // Dropping without shutdown: FIN on TCP, no close_notify on TLS.
        End::Abort => Ok(()),
        End::Hang => std::future::pending().await,
    }
}

async fn pause(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

async fn write_head<S: AsyncWrite + Unpin>(stream: &mut S, script: &Script) -> std::io::Result<()> {
    let reason = http::StatusCode::from_u16(script.status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Unknown");
    let mut head = format!("HTTP/1.1 {} {}\r\n", script.status, reason);
    let has = |name: &str| script.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    for (name, value) in &script.headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    if script.chunked && !has("transfer-encoding") {
        head.push_str("Transfer-Encoding: chunked\r\n");
    }
    if !has("connection") {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.flush().await
}

/// Reads one request; `None` when the peer closed before sending a whole head.
async fn read_request<S: AsyncRead + Unpin + Arrivals>(
    stream: &mut S,
) -> std::io::Result<Option<Result<RequestRecord, BadRequest>>> {
    let mut buf = BytesMut::with_capacity(4096);
    let (method, path, headers, head_len) = loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(None);
        }
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut slots);
        match request.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let method = request.method.unwrap_or_default().to_string();
                let path = request.path.unwrap_or_default().to_string();
                let headers: Vec<(String, String)> = request
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                break (method, path, headers, head_len);
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Ok(Some(Err(BadRequest::HeadTooLarge))),
            Err(httparse::Error::TooManyHeaders) => return Ok(Some(Err(BadRequest::HeadTooLarge))),
            Err(_) => return Ok(Some(Err(BadRequest::Malformed))),
        }
    };
    let header = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim());
    if header("transfer-encoding").is_some_and(|te| !te.eq_ignore_ascii_case("identity")) {
        return Ok(Some(Err(BadRequest::LengthRequired)));
    }
    let length = match header("content-length") {
        None => 0,
        Some(value) => match value.parse::<usize>() {
            Ok(n) if n <= MAX_BODY => n,
            Ok(_) => return Ok(Some(Err(BadRequest::BodyTooLarge))),
            Err(_) => return Ok(Some(Err(BadRequest::Malformed))),
        },
    };
    let mut body = buf.split_off(head_len);
    while body.len() < length {
        body.reserve(length - body.len());
        if stream.read_buf(&mut body).await? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "request body cut short"));
        }
    }
    body.truncate(length);
    Ok(Some(Ok(RequestRecord {
        method,
        path,
        headers,
        body: body.freeze(),
        received_at: stream.arrival().unwrap_or_else(Instant::now),
        head_written_at: None,
        chunk_written_at: Vec::new(),
    })))
}
