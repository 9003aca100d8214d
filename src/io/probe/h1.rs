//! One HTTP/1.1 request and its response over the probe's own, already dialled connection.
//!
//! A probe sends one request per connection and reads one response, so this keeps a single
//! small read buffer that grows only while a response head or a chunk-size line does not fit,
//! instead of a general client's per-connection buffers (hyper's are 8 KB each way, allocated up
//! front, and its read buffer cannot shrink without capping the head size). Every socket read
//! is stamped with the instant its bytes arrived ([`Arrivals`]): the first one is the first
//! response byte (TTFB), and each body piece is handed out with the arrival of the read that
//! brought it (TTFT, the end of the body, tokens per second).
//!
//! Framing only: timeouts, classification and stream parsing are the driver's (`probe/mod.rs`).

use std::io;
use std::time::Instant;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Read buffer a connection starts with; typical provider response heads fit.
pub const INITIAL_BUFFER: usize = 1024;
/// Largest response head accepted (each 1xx head too).
pub const MAX_HEAD: usize = 64 * 1024;
/// Largest chunk-size line (size and extensions) accepted.
pub const MAX_CHUNK_LINE: usize = 4 * 1024;
/// Headers parsed per response head, as many as hyper's client allows.
const MAX_HEADERS: usize = 100;

/// Why an exchange failed; the driver maps I/O errors and framing errors to different outcomes.
#[derive(Debug, Error)]
pub enum H1Error {
    /// Writing the request or reading the response failed at the socket.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The request cannot be written as given.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The peer closed the connection before a whole response head arrived.
    #[error("connection closed before the response head was complete")]
    ClosedInHead,
    /// The response head is larger than [`MAX_HEAD`].
    #[error("response head larger than {0} bytes")]
    HeadTooLarge(usize),
    /// The response head is not valid HTTP/1.x.
    #[error("malformed response head: {0}")]
    BadHead(String),
    /// The chunked body's framing is broken.
    #[error("malformed chunked body: {0}")]
    BadChunk(&'static str),
    /// The peer closed the connection before the body's declared end.
    #[error("connection closed before the body was complete")]
    IncompleteBody,
}

/// What the exchange asks of its connection besides bytes.
pub trait Arrivals {
    /// When the bytes of the last read reached this host, where the connection knows (the
    /// kernel's receive stamp); `None` stamps a read with the instant it returned.
    fn arrival(&self) -> Option<Instant> {
        None
    }

    /// Stop waking for every packet of the rest of the response, if that keeps the stamps
    /// exact; returns whether the connection did.
    fn park(&mut self) -> bool {
        false
    }
}

/// The final (non-1xx) response's status and headers.
#[derive(Debug)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: http::HeaderMap,
}

/// A piece of body data as it came off the socket.
#[derive(Debug)]
pub struct Frame<'a> {
    /// Body bytes, framing removed.
    pub data: &'a [u8],
    /// When the read that brought these bytes received them.
    pub at: Instant,
}

/// How the rest of the body is delimited, and where the reader is inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// The head has not been read yet.
    Head,
    /// `Content-Length`: this many bytes left.
    Length(u64),
    /// Until the peer closes the connection.
    Close,
    /// Chunked, before a chunk-size line.
    ChunkSize,
    /// Chunked, inside a chunk with this many bytes left.
    ChunkData(u64),
    /// Chunked, expecting the CRLF that ends a chunk's data.
    ChunkEnd,
    /// Chunked, after the last chunk: trailer lines up to an empty line.
    Trailers,
    /// The whole body has been read.
    Done,
}

/// Encodes one request into a single buffer: request line, `Host`, `headers`, `Connection: close`
/// (probes never reuse a connection), `Content-Length` when there is a body, then the body.
///
/// Headers this layer owns (`Host`, `Content-Length`, `Transfer-Encoding`, `Connection`) are
/// skipped from `headers`.
pub fn encode_request<'a, I>(
    method: &str,
    target: &str,
    host: &str,
    headers: I,
    body: Option<&[u8]>,
) -> Result<Vec<u8>, H1Error>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
    I::IntoIter: Clone,
{
    const OWNED: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];
    if target.is_empty() || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(H1Error::InvalidRequest(format!("request target {target:?}")));
    }
    let headers = headers.into_iter().filter(|(name, _)| !OWNED.iter().any(|o| name.eq_ignore_ascii_case(o)));
    let mut size = method.len() + target.len() + host.len() + 64 + body.map_or(0, <[u8]>::len);
    for (name, value) in headers.clone() {
        check_header(name, value)?;
        size += name.len() + value.len() + 4;
    }
    check_header("host", host)?;

    let mut out = Vec::with_capacity(size);
    for part in [method, " ", target, " HTTP/1.1\r\nHost: ", host, "\r\n"] {
        out.extend_from_slice(part.as_bytes());
    }
    for (name, value) in headers {
        for part in [name, ": ", value, "\r\n"] {
            out.extend_from_slice(part.as_bytes());
        }
    }
    out.extend_from_slice(b"Connection: close\r\n");
    if let Some(body) = body {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if let Some(body) = body {
        out.extend_from_slice(body);
    }
    Ok(out)
}

fn check_header(name: &str, value: &str) -> Result<(), H1Error> {
    http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| H1Error::InvalidRequest(format!("header name {name:?}")))?;
    http::HeaderValue::from_str(value).map_err(|_| H1Error::InvalidRequest(format!("value of header {name}")))?;
    Ok(())
}

/// One exchange on one connection: owns the stream and the read buffer.
pub struct Exchange<S> {
    io: S,
    /// Read window; `buf[start..end]` is read but not yet consumed.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    body: Body,
    first_byte_at: Option<Instant>,
    last_read_at: Instant,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Arrivals> Exchange<S> {
    /// Starts an exchange on a connected stream.
    pub fn new(io: S) -> Self {
        Exchange {
            io,
            buf: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
            body: Body::Head,
            first_byte_at: None,
            last_read_at: Instant::now(),
        }
    }

    /// Writes the encoded request and flushes it; the buffer is dropped once written. Returns
    /// when the write returned: the instant the request counts as sent (a peer slow to take it
    /// holds the write, and that wait is the upload's, not the answer's).
    pub async fn send(&mut self, request: Vec<u8>) -> Result<Instant, H1Error> {
        self.io.write_all(&request).await?;
        self.io.flush().await?;
        Ok(Instant::now())
    }

    /// When the first response byte arrived, if it did.
    pub fn first_byte_at(&self) -> Option<Instant> {
        self.first_byte_at
    }

    /// When the bytes of the last read arrived (the body's last byte once it is read).
    pub fn last_read_at(&self) -> Instant {
        self.last_read_at
    }

    /// Lets the connection stop waking for every packet ([`Arrivals::park`]).
    pub fn park(&mut self) -> bool {
        self.io.park()
    }

    /// Reads the response head, skipping 1xx informational responses.
    pub async fn read_head(&mut self) -> Result<Head, H1Error> {
        // Bytes of the buffered head already searched for a line end. The head is parsed again
        // only once a new line has ended, so a head dribbled in tiny reads costs linear time,
        // not quadratic, and a malformed line is still refused as soon as it ends.
        let mut scanned = 0;
        loop {
            let pending = &self.buf[self.start..self.end];
            if pending[scanned.min(pending.len())..].contains(&b'\n') {
                if let Some((len, head)) = parse_head(pending)? {
                    self.start += len;
                    scanned = 0;
                    if (100..200).contains(&head.status) && head.status != 101 {
                        continue;
                    }
                    self.body = framing(&head)?;
                    self.shrink();
                    return Ok(head);
                }
            }
            scanned = self.end - self.start;
            if scanned >= MAX_HEAD {
                // A malformed head is reported as such, whatever its size.
                parse_head(&self.buf[self.start..self.end])?;
                return Err(H1Error::HeadTooLarge(MAX_HEAD));
            }
            if !self.fill(MAX_HEAD).await? {
                parse_head(&self.buf[self.start..self.end])?;
                return Err(H1Error::ClosedInHead);
            }
        }
    }

    /// The next piece of body data, `None` at the body's end; call after [`Self::read_head`].
    pub async fn frame(&mut self) -> Result<Option<Frame<'_>>, H1Error> {
        loop {
            let unread = self.end - self.start;
            match self.body {
                Body::Head => return Err(H1Error::BadHead("body read before the head".into())),
                Body::Done => return Ok(None),
                Body::Length(left) | Body::ChunkData(left) if unread > 0 => {
                    let n = usize::try_from(left).map_or(unread, |left| left.min(unread));
                    let left = left - n as u64;
                    self.body = match (self.body, left) {
                        (Body::Length(_), 0) => Body::Done,
                        (Body::Length(_), _) => Body::Length(left),
                        (_, 0) => Body::ChunkEnd,
                        _ => Body::ChunkData(left),
                    };
                    return Ok(Some(self.take(n)));
                }
                Body::Length(_) | Body::ChunkData(_) => {
                    if !self.fill(INITIAL_BUFFER).await? {
                        return Err(H1Error::IncompleteBody);
                    }
                }
                Body::Close if unread > 0 => return Ok(Some(self.take(unread))),
                Body::Close => {
                    if !self.fill(INITIAL_BUFFER).await? {
                        self.body = Body::Done;
                    }
                }
                Body::ChunkSize => match chunk_size(&self.buf[self.start..self.end])? {
                    Some((len, size)) => {
                        self.start += len;
                        self.body = if size == 0 { Body::Trailers } else { Body::ChunkData(size) };
                    }
                    None if unread >= MAX_CHUNK_LINE => return Err(H1Error::BadChunk("chunk-size line too long")),
                    None => self.fill_or_incomplete(MAX_CHUNK_LINE).await?,
                },
                Body::ChunkEnd if unread >= 2 => {
                    if &self.buf[self.start..self.start + 2] != b"\r\n" {
                        return Err(H1Error::BadChunk("chunk data not followed by CRLF"));
                    }
                    self.start += 2;
                    self.body = Body::ChunkSize;
                }
                Body::ChunkEnd => self.fill_or_incomplete(INITIAL_BUFFER).await?,
                Body::Trailers => match self.buf[self.start..self.end].iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        // Trailers carry nothing a probe needs; an empty line ends them and the body.
                        let empty = i == 0 || (i == 1 && self.buf[self.start] == b'\r');
                        self.start += i + 1;
                        if empty {
                            self.body = Body::Done;
                        }
                    }
                    None if unread >= MAX_HEAD => return Err(H1Error::BadChunk("trailer line too long")),
                    None => self.fill_or_incomplete(MAX_HEAD).await?,
                },
            }
        }
    }

    fn take(&mut self, n: usize) -> Frame<'_> {
        let from = self.start;
        self.start += n;
        Frame { data: &self.buf[from..from + n], at: self.last_read_at }
    }

    async fn fill_or_incomplete(&mut self, limit: usize) -> Result<(), H1Error> {
        if self.fill(limit).await? {
            Ok(())
        } else {
            Err(H1Error::IncompleteBody)
        }
    }

    /// Reads once more off the socket; the window grows (up to `limit`) only when the unread
    /// bytes fill it. False at end of stream.
    async fn fill(&mut self, limit: usize) -> Result<bool, H1Error> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let grown = (self.buf.len() * 2).min(limit).max(self.end + 1);
            self.buf.resize(grown, 0);
        }
        let n = self.io.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Ok(false);
        }
        let at = self.io.arrival().unwrap_or_else(Instant::now);
        self.first_byte_at.get_or_insert(at);
        self.last_read_at = at;
        self.end += n;
        Ok(true)
    }

    /// Returns to the initial buffer size after a large head, unless unread body bytes need more.
    fn shrink(&mut self) {
        let unread = self.end - self.start;
        if self.buf.len() > INITIAL_BUFFER && unread <= INITIAL_BUFFER {
            let mut small = vec![0; INITIAL_BUFFER];
            small[..unread].copy_from_slice(&self.buf[self.start..self.end]);
            self.buf = small;
            self.start = 0;
            self.end = unread;
        }
    }
}

/// Parses a complete response head at the start of `bytes`; `None` when more bytes are needed.
fn parse_head(bytes: &[u8]) -> Result<Option<(usize, Head)>, H1Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(H1Error::BadHead(format!("more than {MAX_HEADERS} headers")));
        }
        Err(e) => return Err(H1Error::BadHead(e.to_string())),
    };
    let status = response.code.ok_or_else(|| H1Error::BadHead("no status code".into()))?;
    let mut headers = http::HeaderMap::with_capacity(response.headers.len());
    for h in response.headers.iter() {
        let name = http::HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| H1Error::BadHead(format!("header name {:?}", h.name)))?;
        let value =
            http::HeaderValue::from_bytes(h.value).map_err(|_| H1Error::BadHead(format!("value of header {name}")))?;
        headers.append(name, value);
    }
    Ok(Some((len, Head { status, headers })))
}

/// How the body after `head` is delimited (RFC 9112 §6.3; responses to HEAD are never read).
fn framing(head: &Head) -> Result<Body, H1Error> {
    if head.status == 101 {
        return Err(H1Error::BadHead("unexpected 101 Switching Protocols".into()));
    }
    if head.status == 204 || head.status == 304 {
        return Ok(Body::Done);
    }
    if let Some(te) = head.headers.get_all(http::header::TRANSFER_ENCODING).iter().next_back() {
        // Only a final `chunked` coding frames the body; any other is read until close.
        let last = te.as_bytes().rsplit(|&b| b == b',').next().unwrap_or_default();
        return Ok(if last.trim_ascii().eq_ignore_ascii_case(b"chunked") { Body::ChunkSize } else { Body::Close });
    }
    let mut length = None;
    for value in head.headers.get_all(http::header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let part = part.trim_ascii();
            let n = std::str::from_utf8(part)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| H1Error::BadHead("invalid Content-Length".into()))?;
            if length.is_some_and(|l| l != n) {
                return Err(H1Error::BadHead("conflicting Content-Length values".into()));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => Body::Done,
        Some(n) => Body::Length(n),
        None => Body::Close,
    })
}

/// Parses a chunk-size line (`1a;ext=1\r\n`): bytes used and the size, `None` when incomplete.
fn chunk_size(bytes: &[u8]) -> Result<Option<(usize, u64)>, H1Error> {
    // Past MAX_CHUNK_LINE the line is refused as too long: after a large head the buffer can
    // hold more than that, and whether a line is accepted must not depend on the read sizes.
    let bytes = &bytes[..bytes.len().min(MAX_CHUNK_LINE)];
    // httparse accepts a line without digits as size 0, which would end the body silently.
    if bytes.first().is_some_and(|b| !b.is_ascii_hexdigit()) {
        return Err(H1Error::BadChunk("invalid chunk size"));
    }
    match httparse::parse_chunk_size(bytes) {
        Ok(httparse::Status::Complete(parsed)) => Ok(Some(parsed)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::InvalidChunkSize) => Err(H1Error::BadChunk("invalid chunk size")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// A connection whose reads return exactly the scripted pieces, one per read, then EOF.
    #[derive(Default)]
    struct Pieces {
        reads: VecDeque<Vec<u8>>,
        written: Vec<u8>,
    }

    impl Pieces {
        fn new<I: IntoIterator<Item = Vec<u8>>>(reads: I) -> Self {
            Pieces { reads: reads.into_iter().filter(|p| !p.is_empty()).collect(), written: Vec::new() }
        }
    }

    impl Arrivals for Pieces {}

    impl Arrivals for tokio::io::DuplexStream {}

    impl AsyncRead for Pieces {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            if let Some(mut piece) = self.reads.pop_front() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.reads.push_front(piece.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Pieces {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            self.written.extend_from_slice(data);
            Poll::Ready(Ok(data.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// What reading a whole response gave: status, body, frame sizes, or the error.
    #[derive(Debug)]
    struct Read {
        status: u16,
        body: Vec<u8>,
        frames: usize,
        buffer: usize,
    }

    async fn read_all(reads: Vec<Vec<u8>>) -> Result<Read, H1Error> {
        let mut ex = Exchange::new(Pieces::new(reads));
        let head = ex.read_head().await?;
        let (mut body, mut frames) = (Vec::new(), 0);
        while let Some(frame) = ex.frame().await? {
            assert!(!frame.data.is_empty(), "frames are never empty");
            body.extend_from_slice(frame.data);
            frames += 1;
        }
        Ok(Read { status: head.status, body, frames, buffer: ex.buf.len() })
    }

    fn run<T>(fut: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(fut)
    }

    /// Reads `raw` whole, split into two reads at every byte, and one byte per read; every way
    /// must give the same status and body.
    fn read_every_split(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
        let whole = run(read_all(vec![raw.to_vec()])).map_err(|e| e.to_string())?;
        for at in 0..=raw.len() {
            let split = run(read_all(vec![raw[..at].to_vec(), raw[at..].to_vec()]))
                .unwrap_or_else(|e| panic!("split at {at}: {e}"));
            assert_eq!((split.status, &split.body), (whole.status, &whole.body), "split at {at}");
        }
        let bytes = run(read_all(raw.iter().map(|b| vec![*b]).collect())).expect("one byte per read");
        assert_eq!((bytes.status, &bytes.body), (whole.status, &whole.body), "one byte per read");
        Ok((whole.status, whole.body))
    }

    fn error_of(reads: Vec<Vec<u8>>) -> H1Error {
        match run(read_all(reads)) {
            Ok(r) => panic!("expected an error, read {r:?}"),
            Err(e) => e,
        }
    }

    const SSE: &str = "data: {\"a\":1}\n\ndata: [DONE]\n\n";

    #[test]
    fn chunked_body_reads_the_same_at_every_split_point() {
        let raw = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
            10,
            &SSE[..10],
            SSE.len() - 10,
            &SSE[10..]
        );
        assert_eq!(read_every_split(raw.as_bytes()), Ok((200, SSE.as_bytes().to_vec())));
    }

    #[test]
    fn chunk_extensions_and_trailers_are_skipped() {
        let raw = "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n\
                   5;name=value;flag\r\nhello\r\n1 ; x=\"q\"\r\n!\r\n0;last\r\nX-Trailer: 1\r\nOther: two\r\n\r\n";
        assert_eq!(read_every_split(raw.as_bytes()), Ok((200, b"hello!".to_vec())));
    }

    #[test]
    fn content_length_body_stops_at_its_length() {
        let raw = "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 5, 5\r\ncontent-length: 5\r\n\r\n{\"e\"}ignored";
        assert_eq!(read_every_split(raw.as_bytes()), Ok((429, b"{\"e\"}".to_vec())));
        let empty = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(read_every_split(empty.as_bytes()), Ok((200, Vec::new())));
    }

    #[test]
    fn body_without_length_is_read_until_close() {
        let raw = format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n{SSE}");
        assert_eq!(read_every_split(raw.as_bytes()), Ok((200, SSE.as_bytes().to_vec())));
        let no_body = "HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(read_every_split(no_body.as_bytes()), Ok((204, Vec::new())));
    }

    #[test]
    fn interim_responses_are_skipped() {
        let raw = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
                   HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(read_every_split(raw.as_bytes()), Ok((200, b"ok".to_vec())));
    }

    #[test]
    fn a_head_larger_than_the_buffer_grows_it_then_shrinks_back() {
        let cookie = "c".repeat(5 * INITIAL_BUFFER);
        let raw = format!("HTTP/1.1 200 OK\r\nSet-Cookie: {cookie}\r\nContent-Length: 3\r\n\r\nabc");
        let read = run(read_all(vec![raw.clone().into_bytes()])).expect("large head is read");
        assert_eq!((read.status, read.body.as_slice()), (200, &b"abc"[..]));
        assert_eq!(read.buffer, INITIAL_BUFFER, "the buffer returns to its initial size after the head");
        let pieces = raw.as_bytes().chunks(100).map(<[u8]>::to_vec).collect();
        assert_eq!(run(read_all(pieces)).expect("large head in pieces").body, b"abc");
    }

    #[test]
    fn a_small_response_never_grows_the_buffer() {
        let raw = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{SSE}\r\n0\r\n\r\n", SSE.len());
        let read = run(read_all(raw.as_bytes().chunks(7).map(<[u8]>::to_vec).collect())).expect("reads");
        assert_eq!(read.buffer, INITIAL_BUFFER);
        assert_eq!(read.body, SSE.as_bytes());
        assert!(read.frames >= 2, "data is handed out as it arrives, not at the end");
    }

    #[test]
    fn a_head_over_the_cap_is_refused() {
        let raw = format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n", "b".repeat(MAX_HEAD));
        assert!(matches!(error_of(vec![raw.into_bytes()]), H1Error::HeadTooLarge(MAX_HEAD)));
    }

    #[test]
    fn malformed_heads_and_chunk_sizes_are_framing_errors() {
        assert!(matches!(error_of(vec![b"garbage\r\n\r\n".to_vec()]), H1Error::BadHead(_)));
        let conflicting = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_vec();
        assert!(matches!(error_of(vec![conflicting]), H1Error::BadHead(_)));
        let negative = b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n".to_vec();
        assert!(matches!(error_of(vec![negative]), H1Error::BadHead(_)));
        for size in ["zz", "", "-5", "5x"] {
            let raw = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nhello\r\n0\r\n\r\n");
            assert!(matches!(error_of(vec![raw.into_bytes()]), H1Error::BadChunk(_)), "size {size:?}");
        }
        let no_crlf = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n".to_vec();
        assert!(matches!(error_of(vec![no_crlf]), H1Error::BadChunk(_)));
        let long_line = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;{}\r\na\r\n0\r\n\r\n",
            "e".repeat(MAX_CHUNK_LINE)
        );
        assert!(matches!(error_of(vec![long_line.into_bytes()]), H1Error::BadChunk(_)));
    }

    #[test]
    fn a_chunk_size_line_over_the_cap_is_refused_even_when_one_read_brings_it_whole() {
        // A large head leaves the buffer larger than MAX_CHUNK_LINE, so a single read can bring
        // a whole over-long line; byte-sized reads hit the cap first. Both must refuse it.
        let head = format!(
            "HTTP/1.1 200 OK\r\nSet-Cookie: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
            "c".repeat(5 * INITIAL_BUFFER)
        );
        // `5;e…e\r\n` is `len` bytes long.
        let response = |len: usize| format!("{head}5;{}\r\nhello\r\n0\r\n\r\n", "e".repeat(len - 4)).into_bytes();
        let patterns = |raw: Vec<u8>| [vec![raw.clone()], raw.chunks(100).map(<[u8]>::to_vec).collect()];
        for reads in patterns(response(MAX_CHUNK_LINE)) {
            assert_eq!(run(read_all(reads)).expect("a line at the cap is read").body, b"hello");
        }
        for reads in patterns(response(MAX_CHUNK_LINE + 1)) {
            let pieces = reads.len();
            let e = error_of(reads);
            assert!(matches!(e, H1Error::BadChunk("chunk-size line too long")), "{pieces} reads: {e:?}");
        }
    }

    #[test]
    fn an_early_close_is_an_incomplete_body_or_head() {
        let inside_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly part".to_vec();
        assert!(matches!(error_of(vec![inside_chunk]), H1Error::IncompleteBody));
        let before_last = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n".to_vec();
        assert!(matches!(error_of(vec![before_last]), H1Error::IncompleteBody));
        let in_trailers = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n".to_vec();
        assert!(matches!(error_of(vec![in_trailers]), H1Error::IncompleteBody));
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".to_vec();
        assert!(matches!(error_of(vec![short]), H1Error::IncompleteBody));
        assert!(matches!(error_of(vec![b"HTTP/1.1 200 OK\r\nContent-".to_vec()]), H1Error::ClosedInHead));
        assert!(matches!(error_of(vec![]), H1Error::ClosedInHead));
    }

    #[test]
    fn frames_carry_the_instant_of_their_read_and_the_first_byte_is_stamped() {
        run(async {
            let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
            let (client, mut server) = tokio::io::duplex(256);
            let (got_first, first_seen) = tokio::sync::oneshot::channel::<()>();
            let writer = tokio::spawn(async move {
                server.write_all(&raw[..55]).await.expect("write head and first chunk");
                first_seen.await.expect("reader saw the first chunk");
                let second_sent = Instant::now();
                server.write_all(&raw[55..]).await.expect("write the rest");
                second_sent
            });
            let mut ex = Exchange::new(client);
            assert_eq!(ex.first_byte_at(), None);
            let before = Instant::now();
            ex.read_head().await.expect("head");
            let first = ex.first_byte_at().expect("first byte stamped");
            assert!(first >= before);
            let a = ex.frame().await.expect("frame").expect("data");
            assert_eq!((a.data, a.at), (&b"abc"[..], first), "the head's read brought the first chunk too");
            got_first.send(()).expect("writer waits");
            let b = ex.frame().await.expect("frame").expect("data");
            assert_eq!(b.data, b"def");
            let second_sent = writer.await.expect("writer");
            assert!(b.at >= second_sent, "stamped when its own read returned, after it was written");
            assert!(ex.frame().await.expect("end").is_none());
            assert_eq!(ex.first_byte_at(), Some(first), "only the first read stamps the first byte");
        });
    }

    #[test]
    fn a_request_counts_as_sent_once_the_peer_has_taken_it() {
        run(async {
            // A pipe that holds 64 bytes: the write returns only once the peer reads the rest.
            let (client, mut server) = tokio::io::duplex(64);
            let request = vec![b'x'; 4096];
            let reader = tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(150)).await;
                let taking = Instant::now();
                let mut got = vec![0; 4096];
                server.read_exact(&mut got).await.expect("request read");
                taking
            });
            let mut ex = Exchange::new(client);
            let before = Instant::now();
            let sent = ex.send(request).await.expect("written");
            let taking = reader.await.expect("reader");
            assert!(sent >= taking, "sent once the peer began taking the request, not when the write began");
            assert!(sent.duration_since(before) >= std::time::Duration::from_millis(150));
        });
    }

    #[test]
    fn the_request_is_written_once_with_framing_headers() {
        let body = br#"{"model":"m"}"#;
        let headers = [("Accept", "text/event-stream"), ("content-length", "99"), ("Connection", "keep-alive")];
        let request =
            encode_request("POST", "/v1/chat?x=1", "api.example.com:8443", headers, Some(body)).expect("encodes");
        let text = String::from_utf8(request.clone()).expect("ascii");
        assert_eq!(
            text,
            "POST /v1/chat?x=1 HTTP/1.1\r\nHost: api.example.com:8443\r\nAccept: text/event-stream\r\n\
             Connection: close\r\nContent-Length: 13\r\n\r\n{\"model\":\"m\"}"
        );
        let mut ex = Exchange::new(Pieces::default());
        run(ex.send(request.clone())).expect("written");
        assert_eq!(ex.io.written, request);
        let get = encode_request("GET", "/", "h", [], None).expect("encodes");
        assert_eq!(get, b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn invalid_request_headers_are_refused() {
        for (name, value) in [("bad name", "v"), ("x", "a\r\nInjected: 1"), ("", "v")] {
            let result = encode_request("GET", "/", "h", [(name, value)], None);
            assert!(matches!(result, Err(H1Error::InvalidRequest(_))), "{name:?}: {value:?}");
        }
        assert!(matches!(encode_request("GET", "/a b", "h", [], None), Err(H1Error::InvalidRequest(_))));
    }
}
