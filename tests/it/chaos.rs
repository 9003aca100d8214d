//! The seeded chaos run (issue 28 item 9): the real `vigil` binary against loopback stand-ins — a
//! real PostgreSQL behind a switchable proxy, a steady and a hostile provider, a webhook receiver —
//! under a random schedule of faults drawn from one seed: PostgreSQL dark, refusing and read-only,
//! the data directory's disk full, kill -9, SIGTERM, SIGHUP storms with valid and invalid configs,
//! hostile providers and channels. A final clean start replays the spools; then the invariants of
//! docs/OPERATIONS.md "Chaos run" are checked and their figures printed. `VIGIL_CHAOS_SEED`
//! reproduces a schedule, `VIGIL_CHAOS_SECONDS` sets its length, `VIGIL_CHAOS_BIN` runs another
//! build (`scripts/chaos.sh` runs the release binary for long).

use crate::support::alert_receiver::{Receiver, Reply};
use crate::support::daemon::adherent_stream;
use crate::support::process::{free_port, Daemon};
use crate::support::store::{server_url, PgTestDb};
use crate::support::tcp_proxy::{Mode, TcpProxy};

use sqlx::Connection;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vigil::run::demo::standin::{RequestRecord, Script, StandIn};

/// The probe interval of the run: every target once a second.
const INTERVAL: Duration = Duration::from_secs(1);
/// The stop bound a SIGTERM must keep: the daemon's own `STOP_WITHIN`, plus the process's exit
/// around it (a debug build on a loaded two-core machine). Past twice `STOP_WITHIN` the daemon's
/// guard exits 1, which the exit-code check catches whatever the wall time.
const STOP_BOUND: Duration = Duration::from_secs(vigil::run::app::STOP_WITHIN.as_secs() + 5);
/// How long after a storage fault begins `/readyz` may still say 200: the fault is noticed at
/// the first write after it — the next sample comes within one interval plus the batch age
/// (100 ms), and a write to a host gone dark fails only at the writer's `WRITE_TIMEOUT` (5 s) —
/// plus one second for the poll in flight and the machine's load.
const READY_GRACE: Duration = Duration::from_secs(1 + 5 + 2);
/// How far before a kill -9 an answered probe may be and still be lost with the process: the
/// writer holds at most one store call (≤ `WRITE_TIMEOUT`, 5 s) while samples queue in memory
/// behind it, plus the batch age and the probe's own timeout (900 ms); anything older has been
/// written or fsync'd to the spool. Two seconds more for scheduling on a loaded machine.
const IN_FLIGHT_WINDOW: Duration = Duration::from_secs(5 + 1 + 2);
/// The most targets the run probes at once (steady/m1, steady/m2 after a reload, hostile/h1).
const MAX_TARGETS: u64 = 3;
/// How long a delivery may run before an interruption cut it: the channels' client timeout
/// (10 s), plus a second.
const DELIVERY_SPAN: Duration = Duration::from_secs(11);

/// SplitMix64: a few lines, the same sequence for a seed on every platform and version (rand's
/// `StdRng` promises no such thing across releases, and the seed must reproduce the run).
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 0..n.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    /// One item by weight.
    fn weighted<T: Copy>(&mut self, items: &[(T, u64)]) -> T {
        let total: u64 = items.iter().map(|(_, w)| w).sum();
        let mut at = self.below(total);
        for (item, w) in items {
            if at < *w {
                return *item;
            }
            at -= w;
        }
        items[0].0
    }
}

/// How the hostile provider answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Hostility {
    Healthy = 0,
    /// 500 with an error body.
    ServerError = 1,
    /// Headers after 3 s: past the probe's 900 ms timeout, so no answer.
    Hang = 2,
    /// 200 `text/event-stream` of broken JSON and bytes that are not UTF-8.
    Garbage = 3,
    /// 429 with `Retry-After: 9999999999999`.
    HugeRetryAfter = 4,
}

impl Hostility {
    fn from_u8(v: u8) -> Hostility {
        [Hostility::Healthy, Hostility::ServerError, Hostility::Hang, Hostility::Garbage, Hostility::HugeRetryAfter]
            .get(usize::from(v))
            .copied()
            .unwrap_or(Hostility::Healthy)
    }
}

/// How the webhook receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channel {
    Healthy,
    /// 500s.
    Failing,
    /// Accepts and answers after 30 s, past the client's 10 s timeout.
    Hung,
    /// Answers 200 after 2 s.
    Slow,
}

/// Every probe answer a provider stand-in gave, by the request id it carried.
#[derive(Default)]
struct Ledger(Mutex<Vec<(String, Instant)>>);

impl Ledger {
    fn issue(&self, prefix: &str, counter: &AtomicU64) -> String {
        let id = format!("chaos-{prefix}-{}", counter.fetch_add(1, Ordering::SeqCst));
        self.0.lock().expect("ledger").push((id.clone(), Instant::now()));
        id
    }
}

/// A chat request (not the models list vigil also reads).
fn is_probe(r: &RequestRecord) -> bool {
    r.method == "POST" && r.path_only().ends_with("/chat/completions")
}

fn steady_answer(id: &str) -> Script {
    Script::sse(&adherent_stream(), Duration::from_millis(1)).with_header("x-request-id", id)
}

fn hostile_answer(mode: Hostility, ledger: &Ledger, counter: &AtomicU64) -> Script {
    if mode == Hostility::Hang {
        return Script::status(200).with_head_delay(Duration::from_secs(3));
    }
    let id = ledger.issue("h", counter);
    match mode {
        Hostility::Healthy | Hostility::Hang => steady_answer(&id),
        Hostility::ServerError => {
            Script::json(500, br#"{"error":{"message":"chaos: internal error"}}"#).with_header("x-request-id", id)
        }
        Hostility::Garbage => {
            let body: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\n\ndata: \xff\xfe\x00garbage\n\nevent: ?\ndata: [NOT DONE\n\n";
            Script::sse(body, Duration::from_millis(1)).with_header("x-request-id", id)
        }
        Hostility::HugeRetryAfter => Script::json(429, br#"{"error":{"message":"chaos: slow down"}}"#)
            .with_header("Retry-After", "9999999999999")
            .with_header("x-request-id", id),
    }
}

/// A storage fault as it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    Dark,
    Refusing,
    ReadOnly,
}

/// The data directory: a small tmpfs where this process may mount one (so the disk can fill),
/// else a plain directory and no disk-full fault.
struct DataDir {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl DataDir {
    fn new() -> DataDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
            .arg(dir.path())
            .output();
        let mounted = match out {
            Ok(o) if o.status.success() => true,
            Ok(o) => {
                println!(
                    "disk full: SKIPPED, cannot mount a tmpfs here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                false
            }
            Err(e) => {
                println!("disk full: SKIPPED, cannot run mount: {e}");
                false
            }
        };
        DataDir { dir, mounted }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk is full; returns it.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let block = vec![0x5au8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let small = [0u8; 512];
        while f.write_all(&small).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if self.mounted {
            let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.path()).status();
        }
    }
}

/// One `/readyz` poll: sent, answered, status (`None`: nothing answered).
type Poll = (Instant, Instant, Option<u16>);

/// The config variants the run writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Valid {
        m2: bool,
    },
    /// Cut before the first provider: no provider, or broken TOML.
    Truncated,
    /// `interval = "soon"`.
    BadValue,
}

struct World {
    seed: u64,
    rng: Prng,
    bin: PathBuf,
    started: Instant,
    port: u16,
    conf: tempfile::TempDir,
    db: PgTestDb,
    proxy: TcpProxy,
    steady: StandIn,
    hostile: StandIn,
    hostility: Arc<AtomicU8>,
    ledger: Arc<Ledger>,
    hook: Receiver,
    channel: Channel,
    m2: bool,
    daemon: Option<Daemon>,
    polls: Arc<Mutex<Vec<Poll>>>,
    polling: Arc<AtomicBool>,
    /// Storage faults: kind, start, end.
    outages: Vec<(Storage, Instant, Instant)>,
    /// Each kill -9: when the signal went, and when the next daemon was spawned.
    kills: Vec<(Instant, Instant)>,
    /// Every moment a daemon was ended or replaced (kill -9, SIGTERM, a valid reload).
    interruptions: Vec<Instant>,
    stops: Vec<(Duration, bool)>,
    faults: BTreeMap<&'static str, u32>,
    refusals_expected: usize,
    violations: Vec<String>,
    // Last: unmounted after the daemon is gone.
    data: DataDir,
}

impl World {
    async fn new(seed: u64, bin: PathBuf) -> World {
        let ledger = Arc::new(Ledger::default());
        let (l1, n1) = (ledger.clone(), Arc::new(AtomicU64::new(0)));
        let steady = StandIn::start(move |r| {
            if !is_probe(r) {
                return Script::json(404, b"{}");
            }
            steady_answer(&l1.issue("s", &n1))
        })
        .await
        .expect("steady stand-in");
        let hostility = Arc::new(AtomicU8::new(Hostility::Healthy as u8));
        let (l2, n2, h2) = (ledger.clone(), Arc::new(AtomicU64::new(0)), hostility.clone());
        let hostile = StandIn::start(move |r| {
            if !is_probe(r) {
                return Script::json(404, b"{}");
            }
            hostile_answer(Hostility::from_u8(h2.load(Ordering::SeqCst)), &l2, &n2)
        })
        .await
        .expect("hostile stand-in");
        let hook = Receiver::start(Reply::new(200, "ok")).await;
        World {
            seed,
            rng: Prng(seed),
            bin,
            started: Instant::now(),
            port: free_port(),
            conf: tempfile::tempdir().expect("tempdir"),
            db: PgTestDb::create().await,
            proxy: TcpProxy::to_postgres().await,
            steady,
            hostile,
            hostility,
            ledger,
            hook,
            channel: Channel::Healthy,
            m2: false,
            daemon: None,
            polls: Arc::default(),
            polling: Arc::new(AtomicBool::new(true)),
            outages: Vec::new(),
            kills: Vec::new(),
            interruptions: Vec::new(),
            stops: Vec::new(),
            faults: BTreeMap::new(),
            refusals_expected: 0,
            violations: Vec::new(),
            data: DataDir::new(),
        }
    }

    fn at(&self) -> String {
        format!("t+{:.1}s", self.started.elapsed().as_secs_f64())
    }

    fn violation(&mut self, what: String) {
        println!("VIOLATION {}: {what}", self.at());
        self.violations.push(what);
    }

    fn count(&mut self, fault: &'static str) {
        println!("{}   {fault}", self.at());
        *self.faults.entry(fault).or_default() += 1;
    }

    fn config_path(&self) -> PathBuf {
        self.conf.path().join("vigil.toml")
    }

    fn log_path(&self) -> PathBuf {
        self.conf.path().join("vigil.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    fn config_text(&self, variant: Variant) -> String {
        let m2 = match variant {
            Variant::Valid { m2 } => m2,
            _ => self.m2,
        };
        let text = format!(
            r#"region = "chaos-1"
[storage]
url = "{db}"
data_dir = "{data}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:{port}"
[probe]
interval = "1s"
timeout = "900ms"
[breaker]
open_for = "3s"
[[alerts.webhook]]
url_env = "VIGIL_CHAOS_HOOK"
[[provider]]
name = "steady"
kind = "openai"
base_url = "{steady}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m1"{m2}]
[[provider]]
name = "hostile"
kind = "openai"
base_url = "{hostile}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["h1"]
"#,
            db = self.proxy.url_for(&self.db.url),
            data = self.data.path().display(),
            port = self.port,
            steady = self.steady.base_url(),
            hostile = self.hostile.base_url(),
            m2 = if m2 { ", \"m2\"" } else { "" },
        );
        match variant {
            Variant::Valid { .. } => text,
            Variant::Truncated => {
                let before_providers = text.find("[[provider]]").unwrap_or(text.len());
                let cut = 10 + self.seed as usize % (before_providers - 10);
                text[..cut].to_string()
            }
            Variant::BadValue => text.replace("interval = \"1s\"", "interval = \"soon\""),
        }
    }

    fn write_config(&self, variant: Variant) {
        std::fs::write(self.config_path(), self.config_text(variant)).expect("config");
    }

    /// Starts the daemon and waits for `/healthz`; a start that fails is a violation.
    async fn start(&mut self) {
        self.write_config(Variant::Valid { m2: self.m2 });
        let hook = self.hook.url("/hook");
        let mut d = Daemon::spawn_bin(
            &self.bin,
            &self.config_path(),
            self.port,
            &self.log_path(),
            &[("VIGIL_CHAOS_HOOK", hook.as_str())],
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if d.get("/healthz").await.is_some() {
                self.daemon = Some(d);
                return;
            }
            if let Some(ok) = d.exited() {
                let tail = self.log_tail();
                self.violation(format!("the daemon did not start (exit 0: {ok}); log:\n{tail}"));
                return;
            }
            if Instant::now() > deadline {
                let tail = self.log_tail();
                self.violation(format!("the daemon did not listen within 30 s; log:\n{tail}"));
                self.daemon = Some(d);
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls `/readyz` every 250 ms for the whole run, whichever daemon answers on the port.
    fn poll_readyz(&self) {
        let (polls, polling, url) =
            (self.polls.clone(), self.polling.clone(), format!("http://127.0.0.1:{}/readyz", self.port));
        tokio::spawn(async move {
            let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("client");
            while polling.load(Ordering::SeqCst) {
                let sent = Instant::now();
                let status = client.get(&url).send().await.ok().map(|r| r.status().as_u16());
                polls.lock().expect("polls").push((sent, Instant::now(), status));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    }

    /// The daemon must be running unless the run stopped it: one that vanished is a violation
    /// (and is started again so the run goes on).
    async fn ensure_alive(&mut self) {
        let gone = match self.daemon.as_mut() {
            None => true,
            Some(d) => d.exited().is_some(),
        };
        if gone {
            if self.daemon.is_some() {
                let tail = self.log_tail();
                self.violation(format!("the daemon exited on its own; log:\n{tail}"));
            }
            self.daemon = None;
            self.start().await;
        }
    }

    async fn kill9(&mut self) {
        let Some(mut d) = self.daemon.take() else { return };
        self.count("kill -9");
        d.signal("-KILL");
        let now = Instant::now();
        self.interruptions.push(now);
        let _ = d.exited_within(Duration::from_secs(10)).await;
        tokio::time::sleep(self.rng.millis(100, 1500)).await;
        // Nothing answered before the next process is spawned can be that process's.
        self.kills.push((now, Instant::now()));
        self.start().await;
    }

    async fn sigterm(&mut self) {
        let Some(mut d) = self.daemon.take() else { return };
        self.count("SIGTERM");
        self.interruptions.push(Instant::now());
        let t0 = Instant::now();
        d.signal("-TERM");
        let (_, clean) = d.exited_within(STOP_BOUND * 2).await;
        let took = t0.elapsed();
        self.stops.push((took, clean));
        if !clean || took > STOP_BOUND {
            let tail = self.log_tail();
            self.violation(format!("SIGTERM stop took {took:?} (bound {STOP_BOUND:?}), exit 0: {clean}; log:\n{tail}"));
        }
        tokio::time::sleep(self.rng.millis(100, 1000)).await;
        self.start().await;
    }

    /// `n` SIGHUPs 0–300 ms apart.
    async fn hups(&mut self, n: u64) {
        for _ in 0..n {
            if let Some(d) = self.daemon.as_ref() {
                d.signal("-HUP");
            }
            tokio::time::sleep(self.rng.millis(0, 300)).await;
        }
    }

    async fn hup_storm_valid(&mut self) {
        self.count("SIGHUP storm, valid config");
        self.m2 = !self.m2;
        self.write_config(Variant::Valid { m2: self.m2 });
        self.interruptions.push(Instant::now());
        let n = 2 + self.rng.below(4);
        self.hups(n).await;
        // The reload drains the running daemon (its probes finish) before the new one starts.
        tokio::time::sleep(self.rng.millis(1000, 3000)).await;
        self.interruptions.push(Instant::now());
    }

    async fn hup_storm_invalid(&mut self) {
        let variant = if self.rng.percent(50) { Variant::Truncated } else { Variant::BadValue };
        self.count(if variant == Variant::Truncated {
            "SIGHUP storm, truncated config"
        } else {
            "SIGHUP storm, invalid value"
        });
        let before = self.log().matches("new configuration refused").count();
        self.write_config(variant);
        let n = 2 + self.rng.below(4);
        self.hups(n).await;
        let me = &*self;
        let refused = crate::support::settle(
            Duration::from_secs(20),
            || async move { me.log().matches("new configuration refused").count() },
            |n| *n > before,
        )
        .await;
        if refused <= before {
            let tail = self.log_tail();
            self.violation(format!("{variant:?} config not refused after {n} SIGHUPs; log:\n{tail}"));
        }
        self.refusals_expected += 1;
        // The valid file back before anything else (a restart) reads it.
        self.write_config(Variant::Valid { m2: self.m2 });
    }

    async fn read_only(&self, on: bool) {
        let mut admin = sqlx::PgConnection::connect(&server_url()).await.expect("admin connection");
        let name = &self.db.name;
        let set = if on {
            format!("ALTER DATABASE {name} SET default_transaction_read_only = on")
        } else {
            format!("ALTER DATABASE {name} RESET default_transaction_read_only")
        };
        sqlx::query(sqlx::AssertSqlSafe(set)).execute(&mut admin).await.expect("alter database");
        // Sessions keep the setting they started with: end them so the pool opens new ones.
        let end = format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        );
        sqlx::query(sqlx::AssertSqlSafe(end)).execute(&mut admin).await.expect("terminate backends");
    }

    async fn begin_outage(&mut self, kind: Storage) {
        match kind {
            Storage::Dark => self.proxy.set_mode(Mode::Blackhole).await,
            Storage::Refusing => self.proxy.set_mode(Mode::Refuse).await,
            Storage::ReadOnly => self.read_only(true).await,
        }
    }

    async fn end_outage(&mut self, kind: Storage) {
        match kind {
            Storage::Dark | Storage::Refusing => self.proxy.set_mode(Mode::Forward).await,
            Storage::ReadOnly => self.read_only(false).await,
        }
    }

    /// A storage fault for a few seconds, maybe with a kill -9, SIGTERM or reload inside it, and
    /// maybe a kill -9 just after it while the spools replay.
    async fn outage(&mut self) {
        let kind = self.rng.weighted(&[(Storage::Dark, 3), (Storage::Refusing, 2), (Storage::ReadOnly, 2)]);
        self.count(match kind {
            Storage::Dark => "PostgreSQL dark",
            Storage::Refusing => "PostgreSQL refusing",
            Storage::ReadOnly => "PostgreSQL read-only",
        });
        let length = self.rng.millis(3000, 12000);
        let inside = self.rng.weighted(&[(0u8, 4), (1, 2), (2, 2), (3, 1)]);
        let offset = self.rng.millis(500, length.as_millis() as u64);
        let start = Instant::now();
        self.begin_outage(kind).await;
        tokio::time::sleep_until((start + offset).into()).await;
        match inside {
            1 => self.kill9().await,
            2 => self.sigterm().await,
            3 => self.hup_storm_valid().await,
            _ => {}
        }
        tokio::time::sleep_until((start + length).into()).await;
        self.end_outage(kind).await;
        self.outages.push((kind, start, Instant::now()));
        if self.rng.percent(30) {
            tokio::time::sleep(self.rng.millis(0, 2000)).await;
            self.kill9().await;
        }
    }

    async fn disk_full(&mut self) {
        if !self.data.mounted {
            return;
        }
        self.count("disk full (data_dir)");
        let filler = self.data.fill();
        tokio::time::sleep(self.rng.millis(2000, 6000)).await;
        std::fs::remove_file(filler).expect("free the disk");
    }

    /// Turns the hostile provider and the channel, seeded, at a step boundary. A hostile channel
    /// is healthy again at the next boundary, so the outbox's backoff (5 s doubling) stays short
    /// enough for the final phase to see every page delivered.
    fn turn_hostility(&mut self) {
        if self.rng.percent(35) {
            let mode = self.rng.weighted(&[
                (Hostility::Healthy, 4),
                (Hostility::ServerError, 2),
                (Hostility::Hang, 1),
                (Hostility::Garbage, 2),
                (Hostility::HugeRetryAfter, 1),
            ]);
            if mode != Hostility::Healthy {
                self.count(match mode {
                    Hostility::ServerError => "provider 500s",
                    Hostility::Hang => "provider hangs",
                    Hostility::Garbage => "provider garbage SSE",
                    _ => "provider Retry-After 9999999999999",
                });
            }
            self.hostility.store(mode as u8, Ordering::SeqCst);
        }
        let channel = if self.channel != Channel::Healthy || !self.rng.percent(25) {
            Channel::Healthy
        } else {
            self.rng.weighted(&[(Channel::Failing, 2), (Channel::Hung, 1), (Channel::Slow, 2)])
        };
        if channel != self.channel {
            self.channel = channel;
            let reply = match channel {
                Channel::Healthy => Reply::new(200, "ok"),
                Channel::Failing => {
                    self.count("channel 500s");
                    Reply::new(500, "chaos")
                }
                Channel::Hung => {
                    self.count("channel hangs");
                    Reply::hang(Duration::from_secs(30))
                }
                Channel::Slow => {
                    self.count("channel slow");
                    Reply::slow(Duration::from_secs(2))
                }
            };
            self.hook.on("/hook", reply);
        }
    }

    /// The seeded schedule, for `seconds`.
    async fn run(&mut self, seconds: u64) {
        self.start().await;
        self.poll_readyz();
        let end = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < end {
            self.turn_hostility();
            let step = self.rng.weighted(&[
                ("calm", 3u64),
                ("outage", 5),
                ("disk", 1),
                ("kill", 2),
                ("term", 2),
                ("hup", 2),
                ("hup-bad", 2),
            ]);
            println!("{} {step}", self.at());
            match step {
                "calm" => tokio::time::sleep(self.rng.millis(1000, 4000)).await,
                "outage" => self.outage().await,
                "disk" => self.disk_full().await,
                "kill" => self.kill9().await,
                "term" => self.sigterm().await,
                "hup" => self.hup_storm_valid().await,
                _ => self.hup_storm_invalid().await,
            }
            self.ensure_alive().await;
        }
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        let (_, text) = self.daemon.as_ref()?.get("/metrics").await?;
        text.lines()
            .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .reduce(|a, b| a + b)
    }

    async fn pending_outbox(&self) -> i64 {
        let Ok(mut c) = sqlx::PgConnection::connect(&self.db.url).await else { return -1 };
        sqlx::query_scalar("SELECT count(*) FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL")
            .fetch_one(&mut c)
            .await
            .unwrap_or(-1)
    }

    /// Incidents whose last page at the receiver is not a resolve.
    fn unresolved(&self) -> Vec<String> {
        let mut last: BTreeMap<String, (String, String, String)> = BTreeMap::new();
        for r in self.hook.acknowledged() {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&r.body) else { continue };
            let incident = v["incident"].as_str().unwrap_or_default().to_string();
            let created = v["created_at"].as_str().unwrap_or_default().to_string();
            let status = v["status"].as_str().unwrap_or_default().to_string();
            let title = v["title"].as_str().unwrap_or_default().to_string();
            let e = last.entry(incident).or_insert_with(|| (created.clone(), status.clone(), title.clone()));
            if created >= e.0 {
                *e = (created, status, title);
            }
        }
        // The last title says which kinds still hold (`[FIRING] hostile/h1: latency_degraded (…)`).
        last.into_iter().filter(|(_, (_, s, _))| s != "resolved").map(|(i, (_, _, t))| format!("{i} ({t})")).collect()
    }

    /// Every fault ended; a clean stop, a final clean start that replays the spools, waits until
    /// they are empty, every page is delivered and every incident resolved, then a clean stop.
    async fn finish(&mut self) {
        self.hostility.store(Hostility::Healthy as u8, Ordering::SeqCst);
        self.hook.on("/hook", Reply::new(200, "ok"));
        self.channel = Channel::Healthy;
        self.ensure_alive().await;
        self.sigterm().await;
        let since = Instant::now();
        // Outbox items wait out their backoff (5 s doubling, jitter ½–1×) from their last
        // failure: the few a short hostile spell leaves are due within a minute or two.
        let deadline = since + Duration::from_secs(150);
        let mut state = String::new();
        while Instant::now() < deadline {
            let samples = self.metric("vigil_samples_spooled").await;
            let records = self.metric("vigil_records_spooled").await;
            let pending = self.pending_outbox().await;
            let unresolved = self.unresolved();
            state = format!(
                "samples spooled {samples:?}, records spooled {records:?}, outbox pending {pending}, unresolved incidents {unresolved:?}"
            );
            if samples == Some(0.0) && records == Some(0.0) && pending == 0 && unresolved.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        println!("final phase: settled in {:.1}s: {state}", since.elapsed().as_secs_f64());
        if Instant::now() >= deadline {
            self.violation(format!("not settled 150 s after the final start: {state}"));
        }
        // One more round so the last answered probes are stored before the stop.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.polling.store(false, Ordering::SeqCst);
        if let Some(mut d) = self.daemon.take() {
            let t0 = Instant::now();
            d.signal("-TERM");
            let (_, clean) = d.exited_within(STOP_BOUND * 2).await;
            let took = t0.elapsed();
            self.stops.push((took, clean));
            if !clean || took > STOP_BOUND {
                let tail = self.log_tail();
                self.violation(format!("final stop took {took:?}, exit 0: {clean}; log:\n{tail}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    /// Checks the invariants; returns the printed summary.
    async fn check(&mut self) -> String {
        let mut out = String::new();
        let mut c = sqlx::PgConnection::connect(&self.db.url).await.expect("connect to the chaos database");

        // (a) every answered probe stored once, or in flight at a kill -9.
        let rows: Vec<(Option<String>,)> =
            sqlx::query_as("SELECT request_id FROM samples").fetch_all(&mut c).await.expect("samples");
        let total_samples = rows.len();
        let mut stored: BTreeMap<String, u32> = BTreeMap::new();
        for (id,) in rows {
            if let Some(id) = id.filter(|i| i.starts_with("chaos-")) {
                *stored.entry(id).or_default() += 1;
            }
        }
        let answered: Vec<(String, Instant)> = self.ledger.0.lock().expect("ledger").clone();
        let answered_ids: BTreeSet<&str> = answered.iter().map(|(i, _)| i.as_str()).collect();
        let mut in_flight = 0u64;
        let mut unexplained = Vec::new();
        for (id, at) in &answered {
            if stored.contains_key(id) {
                continue;
            }
            // Lost with the process: answered before the kill within the window, or answered
            // after it and before the next daemon was spawned (a request the killed process sent,
            // that a loaded stand-in answered a moment later).
            let at_a_kill = self.kills.iter().any(|(k, restarted)| {
                (*k >= *at && k.duration_since(*at) <= IN_FLIGHT_WINDOW) || (*at > *k && *at < *restarted)
            });
            if at_a_kill {
                in_flight += 1;
            } else {
                unexplained.push(format!("{id} (answered at t+{:.1}s)", at.duration_since(self.started).as_secs_f64()));
            }
        }
        let bound = self.kills.len() as u64 * MAX_TARGETS * IN_FLIGHT_WINDOW.as_secs().div_ceil(INTERVAL.as_secs());
        let duplicated: Vec<(&String, &u32)> = stored.iter().filter(|(_, n)| **n > 1).collect();
        let phantoms: Vec<&String> = stored.keys().filter(|i| !answered_ids.contains(i.as_str())).collect();
        let lost_logged: u64 = self
            .log()
            .lines()
            .filter(|l| l.contains("they are lost"))
            .filter_map(|l| l.split("lost=").nth(1)?.split(|ch: char| !ch.is_ascii_digit()).next()?.parse::<u64>().ok())
            .sum();
        let _ = writeln!(
            out,
            "samples: answered {} (with a request id), stored {} of them, in flight at a kill -9 {in_flight} (bound {bound}), unexplained missing {}, duplicated {}, stored unanswered {}, reported lost {lost_logged}; rows in total {total_samples}",
            answered.len(),
            stored.len(),
            unexplained.len(),
            duplicated.len(),
            phantoms.len()
        );
        if !unexplained.is_empty() {
            let some: Vec<&String> = unexplained.iter().take(10).collect();
            self.violation(format!(
                "{} answered probes not stored and not in flight at a kill: {some:?}",
                unexplained.len()
            ));
        }
        if in_flight > bound {
            self.violation(format!("{in_flight} samples in flight at kills, over the bound {bound}"));
        }
        if !duplicated.is_empty() {
            self.violation(format!("samples stored twice: {duplicated:?}"));
        }
        if !phantoms.is_empty() {
            self.violation(format!("samples stored that no stand-in answered: {phantoms:?}"));
        }
        if lost_logged > 0 {
            self.violation(format!("{lost_logged} samples or records reported lost"));
        }

        // (b) no duplicate of any record.
        let dup_ids: i64 = sqlx::query_scalar("SELECT count(*) - count(DISTINCT id) FROM samples")
            .fetch_one(&mut c)
            .await
            .expect("ids");
        let dup_transitions: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT 1 FROM breaker_transitions GROUP BY region, provider, model, route, at, from_state, to_state HAVING count(*) > 1) d",
        )
        .fetch_one(&mut c)
        .await
        .expect("transitions");
        let transitions: i64 =
            sqlx::query_scalar("SELECT count(*) FROM breaker_transitions").fetch_one(&mut c).await.expect("count");
        let dup_outbox: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT 1 FROM alert_outbox GROUP BY channel, payload->>'key' HAVING count(*) > 1) d",
        )
        .fetch_one(&mut c)
        .await
        .expect("outbox");
        type Row = (uuid::Uuid, Option<chrono::DateTime<chrono::Utc>>, Option<chrono::DateTime<chrono::Utc>>, String);
        let outbox: Vec<Row> = sqlx::query_as(
            "SELECT id, delivered_at, abandoned_at, COALESCE(payload->>'incident', '') FROM alert_outbox WHERE channel = 'webhook'",
        )
                .fetch_all(&mut c)
                .await
                .expect("outbox items");
        let _ = writeln!(
            out,
            "records: sample ids duplicated {dup_ids}, breaker transitions {transitions} (duplicated {dup_transitions}), outbox items {} (duplicated {dup_outbox})",
            outbox.len()
        );
        if dup_ids + dup_transitions + dup_outbox > 0 {
            self.violation(format!(
                "duplicated records: sample ids {dup_ids}, transitions {dup_transitions}, outbox {dup_outbox}"
            ));
        }

        // (c) every page delivered exactly once (by its idempotency key), every firing resolved.
        let acked = self.hook.acknowledged();
        let mut by_key: BTreeMap<String, Vec<Instant>> = BTreeMap::new();
        for r in &acked {
            by_key.entry(r.header("idempotency-key").unwrap_or_default()).or_default().push(r.at);
        }
        let mut repeats = 0usize;
        for (key, times) in &by_key {
            if times.len() < 2 {
                continue;
            }
            repeats += times.len() - 1;
            let (first, last) = (times[0], times[times.len() - 1]);
            let cut = self.interruptions.iter().any(|i| *i + DELIVERY_SPAN >= first && *i <= last);
            if !cut {
                self.violation(format!("page {key} accepted {} times with no interruption between", times.len()));
            }
        }
        let delivered: BTreeSet<String> =
            outbox.iter().filter(|(_, d, ..)| d.is_some()).map(|(id, ..)| id.to_string()).collect();
        let abandoned = outbox.iter().filter(|(_, _, a, _)| a.is_some()).count();
        let undelivered: Vec<String> =
            outbox.iter().filter(|(_, d, ..)| d.is_none()).map(|(id, ..)| id.to_string()).collect();
        // Firing messages of one incident due together go out as one message (docs/ALERTS.md): the
        // absorbed items are marked delivered at the very instant of the one that carried them.
        let carried_by_another = |id: &String| {
            let Some((_, Some(at), _, incident)) = outbox.iter().find(|(i, ..)| i.to_string() == *id) else {
                return false;
            };
            outbox.iter().any(|(other, d, _, inc)| {
                other.to_string() != *id
                    && *d == Some(*at)
                    && inc == incident
                    && by_key.contains_key(&other.to_string())
            })
        };
        let carried = delivered.iter().filter(|id| !by_key.contains_key(*id) && carried_by_another(id)).count();
        let never_received: Vec<&String> =
            delivered.iter().filter(|id| !by_key.contains_key(*id) && !carried_by_another(id)).collect();
        let unknown: Vec<&String> =
            by_key.keys().filter(|k| !outbox.iter().any(|(id, ..)| id.to_string() == **k)).collect();
        let unresolved = self.unresolved();
        let firing = acked
            .iter()
            .filter_map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
            .filter(|v| v["status"] == "firing")
            .count();
        let _ = writeln!(
            out,
            "pages: {} messages accepted ({} firing/update), {} redelivered after an interruption, outbox items undelivered {}, abandoned {abandoned}, carried by another message {carried}, delivered but never accepted {}, accepted but unknown {}, incidents left unresolved {}; requests at the receiver {}",
            by_key.len(),
            firing,
            repeats,
            undelivered.len(),
            never_received.len(),
            unknown.len(),
            unresolved.len(),
            self.hook.requests().len()
        );
        if !undelivered.is_empty() || abandoned > 0 || !never_received.is_empty() || !unknown.is_empty() {
            self.violation(format!(
                "pages: undelivered {undelivered:?}, abandoned {abandoned}, delivered but never accepted {never_received:?}, unknown {unknown:?}"
            ));
        }
        if !unresolved.is_empty() {
            self.violation(format!("incidents paged and never resolved: {unresolved:?}"));
        }

        // (d) /readyz never 200 while storage was unusable (after the grace to notice it).
        let polls = self.polls.lock().expect("polls").clone();
        let mut inside = 0usize;
        let mut ready_inside = Vec::new();
        for (kind, start, end) in &self.outages {
            for (sent, got, status) in &polls {
                if *sent >= *start + READY_GRACE && *got <= *end {
                    inside += 1;
                    if *status == Some(200) {
                        ready_inside.push(format!(
                            "{kind:?} from t+{:.1}s: 200 at t+{:.1}s",
                            start.duration_since(self.started).as_secs_f64(),
                            sent.duration_since(self.started).as_secs_f64()
                        ));
                    }
                }
            }
        }
        let answered_polls = polls.iter().filter(|p| p.2.is_some()).count();
        let _ = writeln!(
            out,
            "readyz: {} polls ({answered_polls} answered), {inside} during storage faults past the {READY_GRACE:?} grace, 200 among them {}",
            polls.len(),
            ready_inside.len()
        );
        if !ready_inside.is_empty() {
            self.violation(format!("/readyz 200 while storage was unusable: {ready_inside:?}"));
        }

        // (e) every stop within its bound.
        let max_stop = self.stops.iter().map(|(t, _)| *t).max().unwrap_or_default();
        let _ = writeln!(
            out,
            "stops: {} by SIGTERM, all exit 0: {}, longest {:.2}s (bound {STOP_BOUND:?}); invalid reloads refused {}",
            self.stops.len(),
            self.stops.iter().all(|(_, ok)| *ok),
            max_stop.as_secs_f64(),
            self.refusals_expected
        );
        out
    }
}

// scripts/test.sh runs it alone after the rest of the suite (its bounds are wall-clock ones);
// `scripts/chaos.sh` runs it longer on the release binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_chaos_run_keeps_every_invariant() {
    let seed = std::env::var("VIGIL_CHAOS_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| u64::from(uuid::Uuid::new_v4().as_fields().0) % 1_000_000_000);
    let seconds = std::env::var("VIGIL_CHAOS_SECONDS").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(90);
    let bin =
        std::env::var_os("VIGIL_CHAOS_BIN").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_BIN_EXE_vigil").into());
    println!(
        "chaos seed={seed} seconds={seconds} bin={} (rerun: VIGIL_CHAOS_SEED={seed} VIGIL_CHAOS_SECONDS={seconds} cargo test --test it chaos -- --nocapture)",
        bin.display()
    );
    let mut world = World::new(seed, bin).await;
    world.run(seconds).await;
    world.finish().await;
    let figures = world.check().await;
    let mut summary = format!("chaos seed={seed}: {} s of faults\nfaults injected:", seconds);
    let total: u32 = world.faults.values().sum();
    for (kind, n) in &world.faults {
        let _ = write!(summary, " {kind} {n};");
    }
    let _ = writeln!(summary, " total {total}");
    summary.push_str(&figures);
    println!("{summary}");
    if !world.violations.is_empty() {
        // The daemon's whole log (every start of the run, appended) outlives the failed run.
        let kept = std::env::temp_dir().join(format!("vigil-chaos-{seed}.log"));
        if std::fs::copy(world.log_path(), &kept).is_ok() {
            println!("the daemon's log: {}", kept.display());
        }
    }
    assert!(
        world.violations.is_empty(),
        "chaos seed={seed} broke {} invariant(s) (rerun: VIGIL_CHAOS_SEED={seed} VIGIL_CHAOS_SECONDS={seconds}):\n{}\n{summary}",
        world.violations.len(),
        world.violations.join("\n")
    );
}
