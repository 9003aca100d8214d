//! The probe's TCP connection: every read carries the instant the kernel received its bytes,
//! and once a stream's first token is stamped the socket can be *parked*: taken out of the
//! runtime's epoll set and read at the ticks of the probe thread's grid ([`super::grid`])
//! instead of on every packet.
//!
//! After its first token a probe needs the instant its stream ends, the tokens and any error;
//! not a wake-up per streamed event (about a dozen per probe, which were most of the probe
//! thread's CPU). Parking loses no accuracy: a read's kernel stamp (`SO_TIMESTAMPNS`) is the
//! arrival of the last packet it returns, so the read that ends a stream carries the stream's
//! true end, however late the thread gets to it. The stamps also keep the response's first
//! byte and first token exact when the thread is busy. Where the kernel gives no stamp (another
//! OS, a sandbox without them) a read is stamped when it returns and the socket never parks.

use super::grid;
use std::future::Future;
use std::io::{self, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A parked socket that took more than this between two ticks is moving a bulk body, not a
/// trickle of events: it is watched again, so the sender is never held up by the receive
/// buffer filling between ticks (which would stretch the stream it measures).
const BULK: usize = 64 * 1024;

/// One probe connection; see the module docs.
pub struct ProbeSocket {
    io: Io,
    /// Every read so far carried a kernel stamp (and the kernel was asked for them).
    stamped: bool,
    /// When the bytes of the last read arrived.
    arrival: Option<Instant>,
    /// Stamps never go back before this (the last arrival, or when the socket was opened).
    floor: Instant,
    /// Parked: the next tick, and whether a read or write is waiting for it.
    tick: Option<Pin<Box<tokio::time::Sleep>>>,
    waiting: bool,
    /// Parked: bytes read since the last tick.
    drained: usize,
    /// Room for one receive stamp's control message.
    #[cfg(target_os = "linux")]
    cmsg: Vec<u8>,
}

enum Io {
    /// In the runtime's epoll set: woken by every packet.
    Watched(TcpStream),
    /// Out of it: tried at the grid's ticks.
    Parked(std::net::TcpStream),
    /// Lost while changing between the two (the runtime refused to take it back).
    Gone,
}

impl ProbeSocket {
    /// Wraps a connected stream and asks the kernel to stamp what it receives.
    pub fn new(tcp: TcpStream) -> Self {
        let stamped = stamps::enable(&tcp);
        ProbeSocket {
            io: Io::Watched(tcp),
            stamped,
            arrival: None,
            floor: Instant::now(),
            tick: None,
            waiting: false,
            drained: 0,
            #[cfg(target_os = "linux")]
            cmsg: stamps::cmsg_space(),
        }
    }

    /// Lets stamps go back to `floor` instead of the socket's creation: for a server's socket,
    /// whose first bytes may have arrived while the connection waited to be accepted.
    #[cfg(any(feature = "demo", test))]
    pub fn stamps_since(mut self, floor: Instant) -> Self {
        self.floor = self.floor.min(floor);
        self
    }

    /// When the bytes of the last read reached this host (the kernel's stamp, or the read's
    /// return where there is none); `None` before any byte.
    pub fn arrival(&self) -> Option<Instant> {
        self.arrival
    }

    /// Stops waking for every packet: from now on reads (and the rare write TLS needs) are
    /// tried at each grid tick. Only with kernel stamps, so no timing moves; returns whether
    /// the socket is parked.
    pub fn park(&mut self) -> bool {
        if !self.stamped {
            return false;
        }
        if let Io::Watched(_) = self.io {
            let Io::Watched(tcp) = std::mem::replace(&mut self.io, Io::Gone) else { return false };
            // Deregistering can only fail if epoll does; the socket is then closed, which the
            // next read reports as a broken stream.
            if let Ok(std) = tcp.into_std() {
                self.io = Io::Parked(std);
                self.drained = 0;
            }
        }
        matches!(self.io, Io::Parked(_))
    }

    /// Watches the socket per packet again (a bulk body, or a read without a stamp).
    fn unpark(&mut self) {
        if let Io::Parked(_) = self.io {
            let Io::Parked(std) = std::mem::replace(&mut self.io, Io::Gone) else { return };
            if let Ok(tcp) = TcpStream::from_std(std) {
                self.io = Io::Watched(tcp);
            }
            self.tick = None;
            self.waiting = false;
        }
    }

    /// Parked: waits for the tick a read or write that found nothing armed.
    fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.waiting {
            if let Some(tick) = self.tick.as_mut() {
                ready!(tick.as_mut().poll(cx));
            }
            self.waiting = false;
            self.drained = 0;
        }
        Poll::Ready(())
    }

    /// Parked: a read or write found nothing to do; it waits for the next tick.
    fn arm_tick(&mut self) {
        let next = grid::after(tokio::time::Instant::now());
        match self.tick.as_mut() {
            Some(tick) => tick.as_mut().reset(next),
            None => self.tick = Some(Box::pin(tokio::time::sleep_until(next))),
        }
        self.waiting = true;
    }

    /// Bookkeeping after `n > 0` bytes were read, with the kernel's stamp if it gave one.
    fn took(&mut self, n: usize, stamp: Option<Duration>) {
        let now = Instant::now();
        let at = match stamp {
            Some(stamp) if self.stamped => arrival(stamp, stamps::wall_now(), now, self.floor),
            _ => {
                self.stamped = false;
                now
            }
        };
        self.arrival = Some(at);
        self.floor = at;
        if let Io::Parked(_) = self.io {
            self.drained += n;
            if !self.stamped || self.drained > BULK {
                self.unpark();
            }
        }
    }
}

impl super::h1::Arrivals for ProbeSocket {
    fn arrival(&self) -> Option<Instant> {
        self.arrival
    }

    fn park(&mut self) -> bool {
        ProbeSocket::park(self)
    }
}

/// The monotonic instant of a kernel receive stamp (wall-clock time since the Unix epoch), read
/// when the wall clock says `wall_now` and the monotonic one `now`: never before `floor` nor
/// after `now`, so a wall-clock step between the packet and the read cannot move it outside
/// what the probe saw.
fn arrival(stamp: Duration, wall_now: Duration, now: Instant, floor: Instant) -> Instant {
    let age = wall_now.saturating_sub(stamp);
    now.checked_sub(age).unwrap_or(floor).max(floor).min(now)
}

impl AsyncRead for ProbeSocket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let got = match &mut this.io {
                Io::Gone => return Poll::Ready(Err(io::Error::other("probe connection lost while parking"))),
                Io::Watched(tcp) if !this.stamped => {
                    let before = buf.filled().len();
                    ready!(Pin::new(tcp).poll_read(cx, buf))?;
                    let n = buf.filled().len() - before;
                    if n > 0 {
                        this.took(n, None);
                        super::grace::arrived();
                    }
                    return Poll::Ready(Ok(()));
                }
                Io::Watched(tcp) => {
                    let tcp = &*tcp;
                    ready!(tcp.poll_read_ready(cx))?;
                    #[cfg(target_os = "linux")]
                    let got = tcp.try_io(tokio::io::Interest::READABLE, || {
                        stamps::recv(tcp, buf.initialize_unfilled(), &mut this.cmsg)
                    });
                    #[cfg(not(target_os = "linux"))]
                    let got = tcp.try_read(buf.initialize_unfilled()).map(|n| (n, None));
                    match got {
                        // `try_io` cleared the readiness: wait for the next packet.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Ok((n, stamp)) if n > 0 => {
                            super::grace::arrived();
                            Ok((n, stamp))
                        }
                        got => got,
                    }
                }
                Io::Parked(_) => {
                    ready!(this.poll_tick(cx));
                    let Io::Parked(std) = &this.io else { continue };
                    #[cfg(target_os = "linux")]
                    let got = stamps::recv(std, buf.initialize_unfilled(), &mut this.cmsg);
                    #[cfg(not(target_os = "linux"))]
                    let got = io::Read::read(&mut &*std, buf.initialize_unfilled()).map(|n| (n, None));
                    match got {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            this.arm_tick();
                            continue;
                        }
                        got => got,
                    }
                }
            };
            let (n, stamp) = got?;
            buf.advance(n);
            if n > 0 {
                this.took(n, stamp);
            }
            return Poll::Ready(Ok(()));
        }
    }
}

impl AsyncWrite for ProbeSocket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match &mut this.io {
            Io::Watched(tcp) => Pin::new(tcp).poll_write(cx, data),
            Io::Gone => Poll::Ready(Err(io::Error::other("probe connection lost while parking"))),
            Io::Parked(_) => loop {
                ready!(this.poll_tick(cx));
                let Io::Parked(std) = &this.io else { return Poll::Ready(Err(io::ErrorKind::NotConnected.into())) };
                match (&*std).write(data) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => this.arm_tick(),
                    done => return Poll::Ready(done),
                }
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Watched(tcp) => Pin::new(tcp).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Watched(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Io::Parked(std) => Poll::Ready(std.shutdown(std::net::Shutdown::Write)),
            Io::Gone => Poll::Ready(Ok(())),
        }
    }
}

/// The kernel's receive stamps (Linux `SO_TIMESTAMPNS`).
#[cfg(target_os = "linux")]
mod stamps {
    use nix::sys::socket::{recvmsg, setsockopt, sockopt::ReceiveTimestampns, ControlMessageOwned, MsgFlags};
    use std::io;
    use std::os::fd::{AsFd, AsRawFd};
    use std::sync::OnceLock;
    use std::time::{Duration, SystemTime};

    /// Asks the kernel to stamp what `socket` receives; false when it refuses.
    pub fn enable(socket: &impl AsFd) -> bool {
        keep_stamping_on();
        setsockopt(socket, ReceiveTimestampns, &true).is_ok()
    }

    /// The kernel stamps packets only while some socket wants stamps, and switching that on
    /// or off patches kernel code (a static key). One socket held for the process's life keeps
    /// it on, so opening and closing probe connections never switches it.
    fn keep_stamping_on() {
        static KEEPER: OnceLock<Option<std::net::UdpSocket>> = OnceLock::new();
        KEEPER.get_or_init(|| {
            let socket = std::net::UdpSocket::bind(("127.0.0.1", 0)).ok()?;
            setsockopt(&socket, ReceiveTimestampns, &true).ok()?;
            Some(socket)
        });
    }

    /// Room for one `SCM_TIMESTAMPNS` control message.
    pub fn cmsg_space() -> Vec<u8> {
        nix::cmsg_space!(nix::sys::time::TimeSpec)
    }

    /// One non-blocking read: the bytes and the kernel's stamp of the last packet they came in.
    pub fn recv(socket: &impl AsRawFd, buf: &mut [u8], cmsg: &mut [u8]) -> io::Result<(usize, Option<Duration>)> {
        let mut iov = [io::IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(cmsg), MsgFlags::MSG_DONTWAIT)?;
        let stamp = msg.cmsgs().ok().and_then(|mut all| {
            all.find_map(|c| match c {
                ControlMessageOwned::ScmTimestampns(ts) => {
                    Some(Duration::new(u64::try_from(ts.tv_sec()).ok()?, u32::try_from(ts.tv_nsec()).ok()?))
                }
                _ => None,
            })
        });
        Ok((msg.bytes, stamp))
    }

    /// The wall clock the stamps are taken on, as time since the Unix epoch.
    pub fn wall_now() -> Duration {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
    }
}

/// Elsewhere no stamps: reads are stamped when they return and sockets never park.
#[cfg(not(target_os = "linux"))]
mod stamps {
    use std::time::Duration;

    pub fn enable(_: &tokio::net::TcpStream) -> bool {
        false
    }

    pub fn wall_now() -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn a_kernel_stamp_becomes_the_monotonic_instant_it_names_within_what_the_probe_saw() {
        let floor = Instant::now();
        let now = floor + Duration::from_millis(500);
        let wall = Duration::from_secs(1_800_000_000);
        // Received 120 ms before the read.
        assert_eq!(arrival(wall - Duration::from_millis(120), wall, now, floor), now - Duration::from_millis(120));
        // A stamp "from the future" (the wall clock stepped back) is the read's own instant.
        assert_eq!(arrival(wall + Duration::from_secs(3), wall, now, floor), now);
        // A stamp older than the last arrival (the wall clock stepped forward) stops there.
        assert_eq!(arrival(wall - Duration::from_secs(60), wall, now, floor), floor);
    }

    /// A loopback peer on its own thread writing `pieces` `gap` apart after `first` (each
    /// write's instant is sent back), then closing.
    async fn peer(
        first: Duration,
        pieces: Vec<Vec<u8>>,
        gap: Duration,
    ) -> (ProbeSocket, std::sync::mpsc::Receiver<(Instant, Instant)>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (written, stamps) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let Ok((mut conn, _)) = listener.accept() else { return };
            let _ = conn.set_nodelay(true);
            std::thread::sleep(first);
            for piece in pieces {
                // The kernel takes the bytes in between: a loaded machine may deschedule this
                // thread after the write, so only the pair bounds the true moment.
                let before = Instant::now();
                if conn.write_all(&piece).is_err() {
                    return;
                }
                let _ = written.send((before, Instant::now()));
                std::thread::sleep(gap);
            }
        });
        let tcp = TcpStream::connect(addr).await.expect("connect");
        (ProbeSocket::new(tcp), stamps)
    }

    /// Asserts the kernel stamp `at` falls within the write that sent the bytes (`before` it
    /// began, `after` it returned), give or take 20 ms: not a read's or a tick's time later.
    fn within_write(at: Instant, (before, after): (Instant, Instant), what: &str) {
        let slack = Duration::from_millis(20);
        assert!(at + slack >= before, "{what} is stamped {:?} before its write began", before.duration_since(at));
        assert!(at <= after + slack, "{what} is stamped {:?} after its write returned", at.duration_since(after));
    }

    /// Reads until end of stream: the bytes, how many reads returned data, and the last arrival.
    async fn read_all(s: &mut ProbeSocket) -> (Vec<u8>, usize, Option<Instant>) {
        let (mut all, mut reads, mut buf) = (Vec::new(), 0, vec![0u8; 64 * 1024]);
        loop {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                return (all, reads, s.arrival());
            }
            all.extend_from_slice(&buf[..n]);
            reads += 1;
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_read_carries_when_its_bytes_arrived_not_when_it_ran() {
        let (mut s, written) = peer(Duration::ZERO, vec![b"first byte".to_vec()], Duration::ZERO).await;
        let (before, sent) = written.recv().expect("written");
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).await.expect("read");
        let returned = Instant::now();
        assert_eq!(&buf[..n], b"first byte");
        let at = s.arrival().expect("stamped");
        assert!(returned.duration_since(sent) >= Duration::from_millis(150), "the read ran late");
        within_write(at, (before, sent), "arrival");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_server_socket_stamps_bytes_that_came_before_it_was_accepted_only_if_told_it_may() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let listening = Instant::now();
        let addr = listener.local_addr().expect("addr");
        let request = |addr| async move {
            let mut client = TcpStream::connect(addr).await.expect("connect");
            tokio::io::AsyncWriteExt::write_all(&mut client, b"GET / HTTP/1.1\r\n\r\n").await.expect("write");
            (client, Instant::now())
        };
        let (_early, sent_early) = request(addr).await;
        let (_plain, _) = request(addr).await;
        // Both requests wait in the accept queue while the server is busy.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let accepted = Instant::now();
        let mut told = ProbeSocket::new(listener.accept().await.expect("accept").0).stamps_since(listening);
        let mut untold = ProbeSocket::new(listener.accept().await.expect("accept").0);
        let mut buf = [0u8; 64];
        assert!(told.read(&mut buf).await.expect("read") > 0);
        assert!(untold.read(&mut buf).await.expect("read") > 0);
        let at = told.arrival().expect("stamped");
        let off = if at >= sent_early { at.duration_since(sent_early) } else { sent_early.duration_since(at) };
        assert!(off < Duration::from_millis(20), "arrival {off:?} away from the write, not 100 ms later");
        assert!(untold.arrival().expect("stamped") >= accepted, "without a floor, no stamp before the socket");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_parked_socket_takes_a_trickle_at_ticks_and_stamps_its_last_byte_exactly() {
        let pieces: Vec<Vec<u8>> = (0..12).map(|i| format!("event {i}\n").into_bytes()).collect();
        let want: Vec<u8> = pieces.concat();
        let (mut s, written) = peer(Duration::from_millis(20), pieces, Duration::from_millis(15)).await;
        let mut first = [0u8; 8];
        s.read_exact(&mut first).await.expect("first piece");
        assert!(s.park(), "parks once the kernel stamps its reads");
        let (rest, reads, last) = read_all(&mut s).await;
        assert_eq!([&first[..], &rest].concat(), want, "every byte, in order");
        // Eleven pieces over 165 ms arrive in about two ticks: far fewer reads than pieces.
        assert!(reads <= 5, "{reads} reads for 11 pieces: the socket still woke per packet");
        let last_written = written.iter().last().expect("written");
        within_write(last.expect("stamped"), last_written, "the last byte");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_bulk_body_on_a_parked_socket_is_watched_again() {
        let bulk = vec![b'x'; 1 << 20];
        let (mut s, _written) =
            peer(Duration::from_millis(20), vec![b"go".to_vec(), bulk.clone()], Duration::ZERO).await;
        let mut first = [0u8; 2];
        s.read_exact(&mut first).await.expect("first piece");
        assert!(s.park());
        let (rest, _, _) = read_all(&mut s).await;
        assert_eq!(rest.len(), bulk.len(), "the whole body");
        assert!(matches!(s.io, Io::Watched(_)), "over {BULK} bytes between ticks: watched again");
    }
}
