//! The `h1_response` fuzz harness, shared by the fuzz target and `tests/fuzz_regressions.rs`:
//! one response read through the probe's HTTP/1.1 framing (`probe::h1::Exchange`) from an
//! in-memory connection that serves the bytes in chosen read sizes, then ends with EOF.
//!
//! Input layout: byte 0 seeds the read sizes, byte 1 holds flags, bytes 2 and 3 are arguments;
//! the rest is the input proper.
//! - Raw mode (flag bit 0 clear): the rest is the raw response. Byte 2 pads it with a header
//!   `X-Pad: aaa…` of `512 × byte 2` bytes (no line end, so it runs into what follows), inserted
//!   after the `byte 3 + 1`-th line feed or `;` (or at the end), and a second time after the
//!   `(byte 1 >> 1)`-th when that is not 0. Fuzz inputs are short: this lets them reach the 64 KB
//!   head limit, the chunk-size line limit (a pad after `;` is a chunk extension) and the
//!   buffer's growth up to them, also one after the other (a large head, then a long line).
//! - Chunked mode (flag bit 0 set): the rest is a payload the harness frames itself as a valid
//!   chunked response; byte 2 seeds the chunk sizes, byte 3 picks the head and the syntax
//!   (hex case, leading zeros, extensions, trailers). The body read must equal the payload.
//!
//! In both modes the response is read whole (as much as the buffer takes per read) and in the
//! chosen small reads, and both must give the same status, body bytes and error.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use vigil::io::probe::h1::{Arrivals, Exchange, MAX_HEAD};

/// Peak heap one exchange may hold: the read buffer (at most `MAX_HEAD`), the parsed head's
/// copies of header names and values (at most the head's size) and the header map itself.
const MAX_LIVE: usize = 2 * MAX_HEAD + 32 * 1024;

/// What reading one response gave: the final head's status, the body frames joined, and how
/// the exchange ended (the error's debug text).
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Status of the final head, `None` when no head was read.
    pub status: Option<u16>,
    /// Every body frame's bytes, in order, up to the end or the error.
    pub body: Vec<u8>,
    /// `Ok` at the body's end, else the error.
    pub end: Result<(), String>,
}

/// Runs one input through the checks; panics when an invariant breaks.
pub fn h1_response(data: &[u8]) {
    check(data);
}

/// Runs the checks on one input and returns what the whole read gave.
pub fn check(data: &[u8]) -> Outcome {
    let [seed, flags, arg, arg2, rest @ ..] = data else {
        return Outcome { status: None, body: Vec::new(), end: Ok(()) };
    };
    if flags & 1 == 0 {
        let raw = pad(rest, usize::from(*arg) * 512, [usize::from(*arg2) + 1, usize::from(flags >> 1)]);
        consistent(&raw, *seed)
    } else {
        let (raw, status) = chunked(rest, *arg, *arg2);
        let out = consistent(&raw, *seed);
        let want = Outcome { status: Some(status), body: rest.to_vec(), end: Ok(()) };
        assert_eq!(out, want, "a valid chunked response was read wrong: {:?}", String::from_utf8_lossy(&raw));
        out
    }
}

/// Reads `raw` whole and in the reads `seed` picks; both must agree. Returns the whole read.
fn consistent(raw: &[u8], seed: u8) -> Outcome {
    let whole = read(raw, &[raw.len()]);
    let sizes = read_sizes(seed, raw.len());
    let split = read(raw, &sizes);
    let shown = &sizes[..sizes.len().min(16)];
    assert_eq!(whole, split, "{} reads (seed {seed}, first {shown:?}) changed what was read", sizes.len());
    whole
}

/// Reads one response from `raw` served in reads of `sizes`, checking memory and termination.
fn read(raw: &[u8], sizes: &[usize]) -> Outcome {
    // Allocated before metering: the body can never be longer than the input.
    let mut body = Vec::with_capacity(raw.len());
    let conn = Served { raw, sizes, next: 0, left: 0, eof_reads: 0 };
    let (status, end, usage) = RUNTIME.with(|rt| {
        rt.block_on(async {
            let metering = Metering::start();
            let mut ex = Exchange::new(conn);
            let (status, end) = match ex.read_head().await {
                Err(e) => (None, Err(e)),
                Ok(head) => {
                    let mut end = Ok(());
                    loop {
                        match ex.frame().await {
                            Ok(Some(frame)) => {
                                assert!(!frame.data.is_empty(), "empty body frame");
                                body.extend_from_slice(frame.data);
                            }
                            Ok(None) => break,
                            Err(e) => {
                                end = Err(e);
                                break;
                            }
                        }
                    }
                    (Some(head.status), end)
                }
            };
            drop(ex);
            (status, end, metering.stop())
        })
    });
    assert!(usage.largest <= MAX_HEAD, "an allocation of {} bytes, over MAX_HEAD ({MAX_HEAD})", usage.largest);
    assert!(usage.peak <= MAX_LIVE as isize, "{} bytes held at once, over {MAX_LIVE}", usage.peak);
    assert!(body.len() <= raw.len(), "more body than input");
    Outcome { status, body, end: end.map_err(|e| format!("{e:?}")) }
}

/// Inserts `X-Pad: ` and `len` bytes of `a` after the line feeds or `;`s of `raw` that `nth`
/// counts (from 1; 0 for none), or at its end when it has fewer.
fn pad(raw: &[u8], len: usize, nth: [usize; 2]) -> Vec<u8> {
    let after: Vec<usize> =
        raw.iter().enumerate().filter(|(_, &b)| b == b'\n' || b == b';').map(|(i, _)| i + 1).collect();
    let mut cuts: Vec<usize> =
        nth.iter().filter(|&&n| n > 0 && len > 0).map(|&n| after.get(n - 1).copied().unwrap_or(raw.len())).collect();
    cuts.sort_unstable();
    let mut out = Vec::with_capacity(raw.len() + cuts.len() * (len + 7));
    let mut from = 0;
    for cut in cuts {
        out.extend_from_slice(&raw[from..cut]);
        out.extend_from_slice(b"X-Pad: ");
        out.resize(out.len() + len, b'a');
        from = cut;
    }
    out.extend_from_slice(&raw[from..]);
    out
}

/// Heads a valid chunked response may have, with the final status: interim responses first,
/// `Transfer-Encoding` spelled and combined as servers send it, a `Content-Length` it overrides.
const CHUNKED_HEADS: [(&str, u16); 4] = [
    ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", 200),
    (
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\
         Content-Length: 3\r\n\r\n",
        200,
    ),
    (
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nTransfer-Encoding: identity\r\n\
         Transfer-Encoding: chunked\r\n\r\n",
        429,
    ),
    ("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nTRANSFER-ENCODING:chunked\r\n\r\n", 503),
];

/// Frames `payload` as a valid chunked response. `seed` picks the chunk sizes (0: one chunk),
/// `style` the head (bits 0–1) and the syntax: upper-case hex (bit 2), leading zeros (bit 3),
/// extensions on data chunks (bit 4), trailers (bit 5), an extension on the last chunk (bit 6),
/// whitespace before extensions (bit 7).
fn chunked(payload: &[u8], seed: u8, style: u8) -> (Vec<u8>, u16) {
    let (head, status) = CHUNKED_HEADS[usize::from(style & 3)];
    let bit = |n: u8| style & (1 << n) != 0;
    let ext = |i: usize| match (bit(7), i % 2) {
        (false, 0) => ";ext=1",
        (false, _) => ";name=\"a value\";flag",
        (true, _) => " ; a=b",
    };
    let mut out = head.as_bytes().to_vec();
    let mut state = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut rest = payload;
    let mut i = 0;
    while !rest.is_empty() {
        let n = if seed == 0 { rest.len() } else { 1 + xorshift(&mut state) as usize % 200 }.min(rest.len());
        let zeros = if bit(3) { "00" } else { "" };
        let size = if bit(2) { format!("{zeros}{n:X}") } else { format!("{zeros}{n:x}") };
        out.extend_from_slice(size.as_bytes());
        if bit(4) {
            out.extend_from_slice(ext(i).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
        i += 1;
    }
    out.extend_from_slice(if bit(6) { b"0;last\r\n" } else { b"0\r\n" });
    if bit(5) {
        out.extend_from_slice(b"X-Trailer: 1\r\nServer-Timing: total;dur=12\r\n");
    }
    out.extend_from_slice(b"\r\n");
    (out, status)
}

/// Read sizes drawn from `seed` (seed 0: byte by byte) covering `len`; a 0 is a read that comes
/// back pending once before any data. Long inputs get proportionally longer reads, so a padded
/// 64 KB head is not re-parsed a byte at a time.
fn read_sizes(seed: u8, len: usize) -> Vec<usize> {
    let scale = 1 + len / 2048;
    let mut state = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut sizes = Vec::new();
    let mut left = len;
    while left > 0 {
        let n = if seed == 0 { scale } else { (xorshift(&mut state) % 33) as usize * scale }.min(left);
        sizes.push(n);
        left -= n;
    }
    sizes
}

/// xorshift32: never reaches 0 from a non-zero state.
fn xorshift(state: &mut u32) -> u32 {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    *state
}

/// An in-memory connection: serves `raw` in reads of `sizes` (a read the buffer cuts short
/// leaves the rest of its piece for the next), comes back pending once for each 0, then EOF.
struct Served<'a> {
    raw: &'a [u8],
    sizes: &'a [usize],
    /// Index into `sizes` of the next piece.
    next: usize,
    /// What is left of the piece being served.
    left: usize,
    eof_reads: u32,
}

impl Arrivals for Served<'_> {}

impl AsyncRead for Served<'_> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        // A read into no room would come back empty, which the exchange would take for EOF.
        assert!(buf.remaining() > 0, "read into a full buffer");
        if self.raw.is_empty() {
            // One EOF ends an exchange; reading on after it means a loop that never ends.
            self.eof_reads += 1;
            assert_eq!(self.eof_reads, 1, "read again after EOF");
            return Poll::Ready(Ok(()));
        }
        if self.left == 0 {
            self.left = self.sizes.get(self.next).copied().unwrap_or(self.raw.len());
            self.next += 1;
            if self.left == 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let n = self.left.min(buf.remaining()).min(self.raw.len());
        let raw = self.raw;
        buf.put_slice(&raw[..n]);
        self.raw = &raw[n..];
        self.left -= n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Served<'_> {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(data.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

thread_local! {
    /// One current-thread runtime per thread, built once: the exchange never waits on a timer
    /// or a socket, so it needs no driver.
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().build().expect("build a current-thread runtime");
    /// Heap use counted on this thread while a [`Metering`] runs.
    static USAGE: Cell<Option<Usage>> = const { Cell::new(None) };
}

/// Heap use while metering: bytes allocated less bytes freed, its peak, and the largest block.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    live: isize,
    peak: isize,
    largest: usize,
}

/// Counts this thread's heap use until stopped; per thread, so parallel tests do not mix.
struct Metering;

impl Metering {
    fn start() -> Metering {
        USAGE.with(|u| u.set(Some(Usage::default())));
        Metering
    }

    fn stop(self) -> Usage {
        USAGE.with(|u| u.take()).unwrap_or_default()
    }
}

fn note(grown: isize, block: usize) {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    let _ = USAGE.try_with(|u| {
        if let Some(mut usage) = u.get() {
            usage.live += grown;
            usage.peak = usage.peak.max(usage.live);
            usage.largest = usage.largest.max(block);
            u.set(Some(usage));
        }
    });
}

/// The system allocator, counted per thread while a [`Metering`] runs.
struct Metered;

// SAFETY: every call goes to `System` unchanged; the counting touches only a thread-local `Cell`
// initialised without allocating.
unsafe impl GlobalAlloc for Metered {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize, layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize, layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize), 0);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize, new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static METERED: Metered = Metered;
