//! Probe-engine benchmark: timing error against server truth, CPU per 1,000 probes and peak RSS
//! at 100, 1,000 and 5,000 concurrent targets, and the same plain-HTTP targets probed by
//! prometheus-blackbox-exporter side by side.
//!
//! `cargo bench --bench probe` runs everything and prints the tables. The binary re-runs itself
//! as child processes (`--serve`, `--probe-child`) so the prober's CPU and memory are measured
//! in a process that contains nothing else. `VIGIL_BENCH_SIZES=100,1000` picks other sizes.

use secrecy::SecretString;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil::config::{ProbeConfig, ProviderConfig, ProviderKind};
use vigil::io::metrics::Metrics;
use vigil::io::probe::{Planned, Prober};
use vigil::run::demo::standin::{RequestRecord, Script, StandIn};
use vigil::run::scheduler::Scheduler;
use vigil::vocab::sample::{Outcome, Sample};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

const FIXTURE: &str = "openai-chat-stream.sse";
const BLACKBOX: &str = "prometheus-blackbox-exporter";
/// Thread name of the prober's runtime, so its CPU can be told apart from the in-process server's.
const PROBE_THREAD: &str = "vigil-probe";
const SERVER_THREAD: &str = "standin";
/// Probes starting on each 100 ms tick of the probe thread's grid in the scheduled timing rows:
/// the density of 10,000 targets every 60 s (ten times that of the daemon at 1,000 targets). The
/// interval is `targets / STARTS_PER_TICK` ticks, and every stream is held open that long before
/// its last event, so all of a round's streams are open at once, as in a compressed round, while
/// connects come in the daemon's ticks, not all in one instant.
const STARTS_PER_TICK: u32 = 17;

/// The scheduled rows' interval for `n` targets (see [`STARTS_PER_TICK`]).
fn spread(n: usize) -> Duration {
    vigil::io::probe::grid::TICK * u32::try_from(n).unwrap_or(u32::MAX) / STARTS_PER_TICK
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve") {
        serve_child();
    } else if let Some(i) = args.iter().position(|a| a == "--probe-child") {
        probe_child(&args[i + 1..]);
    } else {
        orchestrate();
    }
}

// ---------------------------------------------------------------------------------------------
// Simulated targets
// ---------------------------------------------------------------------------------------------

fn fixture() -> Vec<u8> {
    std::fs::read(format!("{}/tests/fixtures/{FIXTURE}", env!("CARGO_MANIFEST_DIR"))).expect("fixture readable")
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Per-target latency profile: head delay 150–450 ms ("TTFB"), 15–35 ms between events
/// (about 30–65 tok/s), so targets do not all answer in the same millisecond.
fn profile(i: u64) -> (Duration, Duration) {
    let h = splitmix(i);
    (Duration::from_millis(150 + h % 301), Duration::from_millis(15 + (h >> 32) % 21))
}

/// The stand-in's answer: `/status/...` is a plain 200 JSON; `/t{i}/...` streams the fixture with
/// target i's profile, its last event `hold` later still; `/f{i}/...` (the sequential floor)
/// streams it with a short fixed profile.
fn handler(base: Script, hold: Duration) -> impl Fn(&RequestRecord) -> Script + Send + Sync + 'static {
    move |r: &RequestRecord| {
        let path = r.path_only();
        if path.starts_with("/status") {
            return Script::json(200, br#"{"status":"ok"}"#);
        }
        let seg = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let i: u64 = seg.get(1..).and_then(|n| n.parse().ok()).unwrap_or(0);
        let (head, gap) =
            if seg.starts_with('f') { (Duration::from_millis(20), Duration::from_millis(5)) } else { profile(i) };
        let mut s = base.clone();
        s.head_delay = head;
        for c in &mut s.chunks {
            c.delay = gap;
        }
        if let Some(last) = s.chunks.last_mut().filter(|_| seg.starts_with('t')) {
            last.delay += hold;
        }
        s
    }
}

fn base_script() -> Script {
    Script::sse(&fixture(), Duration::ZERO)
}

fn probe_config(concurrency: usize) -> ProbeConfig {
    // Generous limits: the benchmark measures accuracy and cost, timeouts would only hide it.
    ProbeConfig {
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(30),
        ttft_timeout: Duration::from_secs(45),
        max_tokens: 16,
        concurrency,
        daily_budget_usd: 5.0,
        max_body_bytes: 256 * 1024,
        proxy: Default::default(),
        ca_file: None,
        ca_certs: Vec::new(),
    }
}

fn provider(name: String, kind: ProviderKind, base_url: &str, model: &str) -> ProviderConfig {
    ProviderConfig {
        api_key_env: Some("BENCH_KEY".into()),
        api_key: Some(SecretString::from("sk-test-bench")),
        models: vec![model.into()],
        ..ProviderConfig::new(&name, kind, base_url.parse().expect("valid url"))
    }
}

/// `n` targets on the stand-in at `base`; `kind` is `stream` (OpenAI SSE), `floor` or `http` (plain GET).
fn targets(kind: &str, n: usize, base: &str) -> Vec<Arc<ProviderConfig>> {
    (0..n)
        .map(|i| match kind {
            "http" => provider(format!("s{i}"), ProviderKind::Http, &format!("{base}/status/{i}"), ""),
            "floor" => provider(format!("f{i}"), ProviderKind::Openai, &format!("{base}/f{i}/v1"), "m"),
            _ => provider(format!("t{i}"), ProviderKind::Openai, &format!("{base}/t{i}/v1"), "m"),
        })
        .map(Arc::new)
        .collect()
}

fn scheduler(providers: &[Arc<ProviderConfig>], concurrency: usize, interval: Duration) -> (Scheduler, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new("bench-1").expect("metrics registry"));
    let s = Scheduler::new(
        Planned::all(providers, "bench-1"),
        Prober::new(probe_config(concurrency), &[]),
        interval,
        concurrency,
        Arc::clone(&metrics),
    );
    (s, metrics)
}

// ---------------------------------------------------------------------------------------------
// Process facts
// ---------------------------------------------------------------------------------------------

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime in seconds from a `/proc/.../stat` file (all threads of a process, or one task).
fn stat_cpu(path: &str) -> Option<f64> {
    let s = std::fs::read_to_string(path).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clk_tck())
}

fn proc_cpu(pid: u32) -> f64 {
    stat_cpu(&format!("/proc/{pid}/stat")).unwrap_or(f64::NAN)
}

/// (CPU, run-queue wait) in seconds of this process's threads whose name starts with `prefix`,
/// from `/proc/self/task/*/schedstat` (nanosecond counters).
fn threads_sched(prefix: &str) -> (f64, f64) {
    let (mut cpu, mut wait) = (0u64, 0u64);
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let p = t.path();
            let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            if !comm.starts_with(prefix) {
                continue;
            }
            let stat = std::fs::read_to_string(p.join("schedstat")).unwrap_or_default();
            let f: Vec<u64> = stat.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            cpu += f.first().copied().unwrap_or(0);
            wait += f.get(1).copied().unwrap_or(0);
        }
    }
    (cpu as f64 / 1e9, wait as f64 / 1e9)
}

/// How late a plain thread wakes from a 1 ms sleep (p50, p99, max in ms): the machine's own
/// scheduling noise, a floor under any user-space timing error.
fn wakeup_latency() -> (f64, f64, f64) {
    let mut late: Vec<f64> = (0..1000)
        .map(|_| {
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(1));
            t.elapsed().as_secs_f64() * 1000.0 - 1.0
        })
        .collect();
    late.sort_by(f64::total_cmp);
    (pct(&late, 0.5), pct(&late, 0.99), late.last().copied().unwrap_or(f64::NAN))
}

/// A `kB` field of `/proc/<pid>/status` in MB (10^6 bytes, as the targets are stated).
fn status_mb(pid: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib * 1024.0 / 1e6)
}

/// Raises the open-files limit as far as allowed; returns (soft, hard) now in force.
fn raise_nofile() -> (u64, u64) {
    // SAFETY: getrlimit/setrlimit only read/write the struct passed.
    unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        let want = libc::rlimit { rlim_cur: 65536.max(r.rlim_max), rlim_max: 65536.max(r.rlim_max) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &want) != 0 {
            let soft = libc::rlimit { rlim_cur: r.rlim_max, rlim_max: r.rlim_max };
            libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        (r.rlim_cur, r.rlim_max)
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown CPU".into(), |s| s.trim().to_string())
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

fn sizes() -> Vec<usize> {
    std::env::var("VIGIL_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect::<Vec<usize>>())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![100, 1000, 5000])
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

/// `--serve`: the stand-in in its own process; prints its port, serves until stdin closes.
fn serve_child() {
    raise_nofile();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("server runtime");
    let server = rt.block_on(StandIn::start(handler(base_script(), Duration::ZERO))).expect("stand-in starts");
    println!("PORT {}", server.addr().port());
    let _ = std::io::stdout().flush();
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {}
    drop(server);
}

/// `--probe-child KIND N ROUNDS BASE`: builds the scheduler, says READY, waits for GO, runs ROUNDS
/// rounds of N concurrent probes (each sample also goes through the metrics registry, as in the
/// daemon), prints DONE with counts and its peak RSS, then waits for stdin to close.
fn probe_child(args: &[String]) {
    raise_nofile();
    let kind = args.first().map_or("stream", String::as_str);
    let n: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(100);
    let rounds: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(1);
    let base = args.get(3).cloned().unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("probe runtime");
    let (sched, metrics) = scheduler(&targets(kind, n, &base), n, Duration::from_secs(60));
    println!("READY {:.2}", status_mb("self", "VmRSS:"));
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let (mut ok, mut total) = (0usize, 0usize);
    counting_alloc::reset_peak();
    let started = Instant::now();
    for _ in 0..rounds {
        let samples = rt.block_on(sched.run_round(None));
        for s in &samples {
            metrics.observe(s);
            total += 1;
            ok += usize::from(s.outcome == Outcome::Ok);
        }
    }
    let heap_peak = counting_alloc::PEAK.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6;
    println!(
        "DONE {ok} {total} {:.3} {:.2} {heap_peak:.2}",
        started.elapsed().as_secs_f64(),
        status_mb("self", "VmHWM:")
    );
    let _ = std::io::stdout().flush();
    while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {}
}

struct ChildProc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl ChildProc {
    fn spawn(args: &[&str]) -> ChildProc {
        let exe = std::env::current_exe().expect("own executable");
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("child process starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("child stdout"));
        ChildProc { child, stdin, stdout }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        let _ = self.stdout.read_line(&mut l);
        l.trim().to_string()
    }

    fn send(&mut self, s: &str) {
        if let Some(w) = self.stdin.as_mut() {
            let _ = writeln!(w, "{s}");
            let _ = w.flush();
        }
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Part 1: timing error against server truth (one process, server on its own runtime thread)
// ---------------------------------------------------------------------------------------------

struct TimingRow {
    label: String,
    ok: usize,
    total: usize,
    peak_streams: usize,
    ttfb: Vec<f64>,
    ttft: Vec<f64>,
    interval: Vec<f64>,
    probe_cpu: f64,
    runq_wait: f64,
    wall: f64,
    /// Scheduling lag (started_at − scheduled_at), ms; empty for all-at-once rounds.
    lag: Vec<f64>,
}

fn ms_between(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1000.0
}

/// How a timing run starts its probes.
#[derive(Clone, Copy)]
enum Start {
    /// `Scheduler::run_round`: every probe in the same instant (`vigil probe`).
    AllAtOnce,
    /// `Scheduler::run_one_round`, the daemon's path: each target at its stable offset inside an
    /// interval this long (compressed from the daemon's 60 s so the streams still all overlap).
    Scheduled(Duration),
}

fn timing_run(
    server_rt: &tokio::runtime::Runtime,
    client_rt: &tokio::runtime::Runtime,
    kind: &str,
    n: usize,
    start: Start,
    label: String,
) -> TimingRow {
    let hold = match start {
        Start::AllAtOnce => Duration::ZERO,
        Start::Scheduled(spread) => spread,
    };
    let server = server_rt.block_on(StandIn::start(handler(base_script(), hold))).expect("stand-in starts");
    let providers = targets(kind, n, &server.base_url());
    let concurrency = if kind == "floor" { 1 } else { n };
    let interval = match start {
        Start::AllAtOnce => Duration::from_secs(60),
        Start::Scheduled(spread) => spread,
    };
    let (sched, _metrics) = scheduler(&providers, concurrency, interval);
    let (cpu0, wait0) = threads_sched(PROBE_THREAD);
    let t0 = Instant::now();
    let samples: Vec<Sample> = match start {
        Start::AllAtOnce => client_rt.block_on(sched.run_round(None)),
        Start::Scheduled(_) => client_rt.block_on(async {
            let (tx, mut rx) = tokio::sync::mpsc::channel(n);
            let shutdown = tokio_util::sync::CancellationToken::new();
            let round = sched.run_one_round(tokio::time::Instant::now() + Duration::from_millis(20), tx, &shutdown);
            let collect = async {
                let mut out = Vec::with_capacity(n);
                while let Some(s) = rx.recv().await {
                    out.push(s);
                }
                out
            };
            tokio::join!(round, collect).1
        }),
    };
    let wall = t0.elapsed().as_secs_f64();
    let (cpu1, wait1) = threads_sched(PROBE_THREAD);
    let (probe_cpu, runq_wait) = (cpu1 - cpu0, wait1 - wait0);
    let records = server.requests();
    drop(server);

    let by_target: HashMap<&str, &RequestRecord> =
        records.iter().filter_map(|r| r.path.trim_start_matches('/').split('/').next().map(|seg| (seg, r))).collect();
    let mut row = TimingRow {
        label,
        ok: 0,
        total: samples.len(),
        peak_streams: 0,
        ttfb: vec![],
        ttft: vec![],
        interval: vec![],
        probe_cpu,
        runq_wait,
        wall,
        lag: match start {
            Start::AllAtOnce => Vec::new(),
            Start::Scheduled(_) => samples
                .iter()
                .filter_map(|s| (s.started_at - s.scheduled_at).to_std().ok())
                .map(|d| d.as_secs_f64() * 1000.0)
                .collect(),
        },
    };
    for s in &samples {
        if s.outcome != Outcome::Ok {
            continue;
        }
        row.ok += 1;
        let Some(r) = by_target.get(s.target.provider.as_str()) else { continue };
        let (Some(head), Some(first_token)) = (r.head_written_at, r.chunk_written_at.get(1)) else { continue };
        let truth_ttfb = ms_between(r.received_at, head);
        let truth_ttft = ms_between(r.received_at, *first_token);
        if let (Some(b), Some(t)) = (s.ttfb_ms, s.ttft_ms) {
            row.ttfb.push(b - truth_ttfb);
            row.ttft.push(t - truth_ttft);
            row.interval.push((t - b) - (truth_ttft - truth_ttfb));
        }
    }
    // Streams open at once: +1 when a request was read, −1 when its last event was written.
    let mut edges: Vec<(Instant, i32)> = Vec::new();
    for r in &records {
        edges.push((r.received_at, 1));
        edges.push((r.chunk_written_at.last().copied().or(r.head_written_at).unwrap_or(r.received_at), -1));
    }
    edges.sort_by_key(|&(t, d)| (t, d));
    let mut open = 0i32;
    for (_, d) in edges {
        open += d;
        row.peak_streams = row.peak_streams.max(open.max(0) as usize);
    }
    for v in [&mut row.ttfb, &mut row.ttft, &mut row.interval, &mut row.lag] {
        v.sort_by(f64::total_cmp);
    }
    row
}

fn print_timing(rows: &[TimingRow]) {
    println!(
        "{:<26} {:>11} {:>6} | {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} | {:>9} {:>7} {:>6}",
        "targets",
        "ok",
        "peak",
        "TTFB p50",
        "p99",
        "max",
        "TTFT p50",
        "p99",
        "max",
        "Δint p50",
        "p99",
        "lag p50",
        "p99",
        "CPU/1000",
        "runq",
        "wall"
    );
    for r in rows {
        let per_k = if r.total > 0 { r.probe_cpu / r.total as f64 * 1000.0 } else { f64::NAN };
        println!(
            "{:<26} {:>11} {:>6} | {:>8.3} {:>8.3} {:>8.3} | {:>8.3} {:>8.3} {:>8.3} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3} | {:>8.3}s {:>6.2}s {:>5.1}s",
            r.label,
            format!("{}/{}", r.ok, r.total),
            r.peak_streams,
            pct(&r.ttfb, 0.5),
            pct(&r.ttfb, 0.99),
            r.ttfb.last().copied().unwrap_or(f64::NAN),
            pct(&r.ttft, 0.5),
            pct(&r.ttft, 0.99),
            r.ttft.last().copied().unwrap_or(f64::NAN),
            pct(&r.interval, 0.5),
            pct(&r.interval, 0.99),
            pct(&r.lag, 0.5),
            pct(&r.lag, 0.99),
            per_k,
            r.runq_wait,
            r.wall
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Part 2 and 3: prober CPU and RSS in its own process; blackbox_exporter side by side
// ---------------------------------------------------------------------------------------------

struct ChildRun {
    ok: usize,
    total: usize,
    cpu: f64,
    wall: f64,
    idle_rss: f64,
    peak_rss: f64,
    /// Peak live heap of the prober (vigil only: counted by the bench's allocator).
    peak_heap: Option<f64>,
}

fn vigil_child_run(kind: &str, n: usize, rounds: usize, base: &str) -> ChildRun {
    let mut c = ChildProc::spawn(&["--probe-child", kind, &n.to_string(), &rounds.to_string(), base]);
    let ready = c.line();
    let idle_rss = ready.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    let pid = c.child.id();
    let cpu0 = proc_cpu(pid);
    c.send("GO");
    let done = c.line();
    let cpu = proc_cpu(pid) - cpu0;
    let f: Vec<&str> = done.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    let run = ChildRun {
        ok: num(1) as usize,
        total: num(2) as usize,
        cpu,
        wall: num(3),
        idle_rss,
        peak_rss: num(4),
        peak_heap: Some(num(5)),
    };
    c.finish();
    run
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

fn blackbox_version() -> Option<String> {
    let out = Command::new(BLACKBOX).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines().next().map(|l| l.trim().to_string())
}

/// Starts blackbox_exporter with an `http_2xx` module on a loopback port and waits until it answers.
fn start_blackbox(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> Option<(Child, u16)> {
    let cfg = dir.join("blackbox.yml");
    std::fs::write(
        &cfg,
        "modules:\n  http_2xx:\n    prober: http\n    timeout: 60s\n    http:\n      preferred_ip_protocol: ip4\n",
    )
    .ok()?;
    let port = free_port();
    let child = Command::new(BLACKBOX)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let client = reqwest::Client::new();
    let healthy = rt.block_on(async {
        for _ in 0..100 {
            if client
                .get(format!("http://127.0.0.1:{port}/-/healthy"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    healthy.then_some((child, port))
}

/// Drives `rounds` rounds of `n` concurrent `/probe` requests, the way Prometheus scrapes it.
fn blackbox_run(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    n: usize,
    rounds: usize,
    base: &str,
) -> Option<ChildRun> {
    let (mut child, port) = start_blackbox(rt, dir)?;
    let pid = child.id();
    let idle_rss = status_mb(&pid.to_string(), "VmRSS:");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().ok()?;
    let cpu0 = proc_cpu(pid);
    let t0 = Instant::now();
    let (mut ok, mut total) = (0usize, 0usize);
    for _ in 0..rounds {
        let results = rt.block_on(futures::future::join_all((0..n).map(|i| {
            let client = client.clone();
            let url = format!("http://127.0.0.1:{port}/probe?module=http_2xx&target={base}/status/{i}");
            async move {
                match client.get(url).send().await {
                    Ok(r) => r.text().await.map(|body| body.contains("\nprobe_success 1")).unwrap_or(false),
                    Err(_) => false,
                }
            }
        })));
        total += results.len();
        ok += results.into_iter().filter(|b| *b).count();
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = proc_cpu(pid) - cpu0;
    let peak_rss = status_mb(&pid.to_string(), "VmHWM:");
    let _ = child.kill();
    let _ = child.wait();
    Some(ChildRun { ok, total, cpu, wall, idle_rss, peak_rss, peak_heap: None })
}

fn per_k(r: &ChildRun) -> f64 {
    if r.total == 0 {
        f64::NAN
    } else {
        r.cpu / r.total as f64 * 1000.0
    }
}

fn print_child_header() {
    println!(
        "{:<10} {:>7} {:>7} {:>13} {:>8} {:>8} {:>15} {:>10} {:>10} {:>10}",
        "prober", "targets", "rounds", "ok/probes", "wall", "CPU-s", "CPU-s/1000", "idle RSS", "peak RSS", "peak heap"
    );
}

fn print_child(who: &str, n: usize, rounds: usize, r: &ChildRun) {
    println!(
        "{:<10} {:>7} {:>7} {:>13} {:>7.2}s {:>8.2} {:>15.3} {:>7.1}MB {:>7.1}MB {:>10}",
        who,
        n,
        rounds,
        format!("{}/{}", r.ok, r.total),
        r.wall,
        r.cpu,
        per_k(r),
        r.idle_rss,
        r.peak_rss,
        r.peak_heap.map_or_else(|| "-".to_string(), |h| format!("{h:.1}MB"))
    );
}

// ---------------------------------------------------------------------------------------------

fn orchestrate() {
    let (soft, hard) = raise_nofile();
    let sizes = sizes();
    let started = Instant::now();
    println!("vigil probe-engine benchmark");
    println!(
        "machine: {} × {}, kernel {}; load average at start {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        loadavg()
    );
    println!("RLIMIT_NOFILE set to soft {soft}, hard {hard}; sizes {sizes:?}; fixture {FIXTURE} ({} events, the first role-only)", base_script().chunks.len());
    let (w50, w99, wmax) = wakeup_latency();
    println!("machine wake-up latency (1 ms sleep, 1,000×, idle): late by p50 {w50:.3} ms, p99 {w99:.3} ms, max {wmax:.3} ms");
    println!("stream profile per target: head delay 150–450 ms, 15–35 ms between events; concurrency limit = targets");

    // Part 1.
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name(PROBE_THREAD)
        .enable_all()
        .build()
        .expect("probe runtime");
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()
        .expect("server runtime");
    println!();
    println!("== 1. Timing error vs server truth (ms; measured − server interval; one process, stand-in on its own runtime thread) ==");
    println!(
        "   TTFB truth = head written − request arrived; TTFT truth = first content event written − request arrived;"
    );
    println!("   (request arrived = the kernel's receive stamp of the stand-in's read that completed the request)");
    println!("   Δint = (TTFT − TTFB) measured − (TTFT − TTFB) truth, i.e. the response side only; peak = streams open at once;");
    println!(
        "   CPU/1000 = CPU-s of the prober runtime's threads per 1,000 probes (in-process, server threads excluded);"
    );
    println!("   runq = seconds the prober threads were runnable but waiting for a CPU during the run (schedstat)");
    println!("   lag = started_at − scheduled_at (the daemon's vigil_probe_schedule_lag_seconds), scheduled rows only");
    let mut rows =
        vec![timing_run(&server_rt, &client_rt, "floor", 100, Start::AllAtOnce, "1 at a time (×100)".into())];
    for &n in &sizes {
        rows.push(timing_run(&server_rt, &client_rt, "stream", n, Start::AllAtOnce, format!("{n} all at once")));
        rows.push(timing_run(
            &server_rt,
            &client_rt,
            "stream",
            n,
            Start::Scheduled(spread(n)),
            format!("{n} scheduled ({:.1} s)", spread(n).as_secs_f64()),
        ));
    }
    print_timing(&rows);
    drop(client_rt);
    drop(server_rt);

    // Part 2.
    println!();
    println!(
        "== 2. Prober CPU and peak RSS, streaming targets (prober alone in a child process; stand-in in another) =="
    );
    println!("   CPU-s = utime+stime of the prober process (/proc/<pid>/stat) from GO to DONE; samples also go through the metrics registry");
    let mut server = ChildProc::spawn(&["--serve"]);
    let port_line = server.line();
    let port = port_line.split_whitespace().nth(1).unwrap_or("0").to_string();
    let base = format!("http://127.0.0.1:{port}");
    print_child_header();
    let mut stream_runs = Vec::new();
    for &n in &sizes {
        let rounds = (1000 / n).max(1);
        let r = vigil_child_run("stream", n, rounds, &base);
        print_child("vigil", n, rounds, &r);
        stream_runs.push((n, r));
    }

    // Part 3.
    println!();
    println!("== 3. Plain HTTP targets (GET /status/i → 200 JSON): vigil kind=http vs prometheus-blackbox-exporter ==");
    println!("   blackbox driven by N concurrent GET /probe?module=http_2xx&target=… per round; CPU-s of its process (/proc/<pid>/stat)");
    let driver_rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("driver runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let version = blackbox_version();
    match &version {
        Some(v) => println!("   {v}"),
        None => {
            println!("   {BLACKBOX} NOT FOUND (apt-get install prometheus-blackbox-exporter): blackbox column skipped")
        }
    }
    print_child_header();
    let mut plain = Vec::new();
    for &n in &sizes {
        let rounds = (3000 / n).max(1);
        let v = vigil_child_run("http", n, rounds, &base);
        print_child("vigil", n, rounds, &v);
        let b = version.as_ref().and_then(|_| blackbox_run(&driver_rt, dir.path(), n, rounds, &base));
        match &b {
            Some(b) => print_child("blackbox", n, rounds, b),
            None if version.is_some() => println!("blackbox   {n:>7}  did not start or answer"),
            None => {}
        }
        plain.push((n, v, b));
    }
    server.finish();

    // Summary against the targets.
    println!();
    println!("== Targets ==");
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    for r in rows.iter().filter(|r| r.label.starts_with("1000 ")) {
        let p99 = pct(&r.ttfb, 0.99).max(pct(&r.ttft, 0.99));
        println!(
            "p99 timing error at 1,000 streaming targets ≤ 1 ms, {} ({} streams open at once): {:.3} ms (worse of TTFB/TTFT) — {}",
            r.label.trim_start_matches("1000 "),
            r.peak_streams,
            p99,
            verdict(p99 <= 1.0)
        );
        if !r.lag.is_empty() {
            let lag99 = pct(&r.lag, 0.99);
            println!("p99 scheduling lag at 1,000 targets < 50 ms: {lag99:.3} ms — {}", verdict(lag99 < 50.0));
        }
    }
    for (n, v, b) in &plain {
        if let Some(b) = b {
            let ratio = per_k(v) / per_k(b);
            println!(
                "CPU per plain-HTTP probe ≤ 0.5× blackbox at {n}: vigil {:.3} vs blackbox {:.3} CPU-s/1000 = {:.2}× — {}",
                per_k(v),
                per_k(b),
                ratio,
                verdict(ratio <= 0.5)
            );
        }
    }
    if let Some((_, r)) = stream_runs.iter().find(|(n, _)| *n == 1000) {
        println!("peak RSS at 1,000 streaming targets ≤ 30 MB: {:.1} MB — {}", r.peak_rss, verdict(r.peak_rss <= 30.0));
    }
    let (w50, w99, wmax) = wakeup_latency();
    println!("machine wake-up latency at end: late by p50 {w50:.3} ms, p99 {w99:.3} ms, max {wmax:.3} ms");
    println!("load average at end {}; total bench time {:.0}s", loadavg(), started.elapsed().as_secs_f64());
}
