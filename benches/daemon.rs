//! Whole-daemon benchmark: the real `vigil run` (optimised: the `bench` profile) probing 1,000
//! loopback targets every 60 s (half plain HTTP, half streaming) and scraped every 15 s, with the
//! CPU-s per 1,000 probes, peak RSS, scrape size and series count of the vigil process; where Prometheus and
//! blackbox_exporter are installed, the same targets through them in the same run. Every prober's
//! TTFB is compared with the stand-in's own truth for the same request (request received → head
//! written), as the outside side-by-side harness compares with its own server's.
//!
//! `cargo bench --bench daemon` runs it (about three minutes). The bench binary re-runs itself as
//! the stand-in (`--serve`) so the servers' CPU is never counted as vigil's.
//! `VIGIL_BENCH_TARGETS` (default 1000), `VIGIL_BENCH_WARMUP_S` (65) and `VIGIL_BENCH_MEASURE_S`
//! (120) change the run; `VIGIL_BENCH_BLACKBOX=0` skips the side-by-side; `VIGIL_BENCH_KEEP=1`
//! keeps the run's folder (each daemon's `vigil.log`, config and database) and prints its path.
//! Each daemon starts on `VIGIL_BENCH_HISTORY_DAYS` (7) days of stored hourly rollups, written
//! and copied for every daemon, then written back to disk (`sync`), before any starts, and the
//! bench prints how long after its start its first probe came.
//! `VIGIL_BENCH_COMPARE_EXE=path/to/other/vigil` runs a second daemon (another build, e.g. the
//! previous release) on the same targets in the same run, measured the same way, so a change is
//! judged side by side under the same load rather than against a figure from another day. An
//! older build refuses a history written with migrations it does not know:
//! `VIGIL_BENCH_COMPARE_SQL` is run on its copy first (e.g. `DROP INDEX x; DELETE FROM
//! _sqlx_migrations WHERE version = n`, undoing what it lacks).

use rand::RngExt;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vigil::run::demo::standin::{RequestRecord, Script, StandIn};
use vigil::vocab::sample::Sample;

#[path = "support/week_of_rollups.rs"]
mod week_of_rollups;

const FIXTURE: &str = "openai-chat-stream.sse";
/// The key variable the bench's providers name (the stand-in ignores it).
const KEY_VAR: &str = "VIGIL_BENCH_KEY";
const SCRAPE_EVERY: Duration = Duration::from_secs(15);
/// The daemon's log line once a start has read the stored window back.
const RESTORED: &str = "baselines and breakers restored";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve") {
        serve_child();
        return;
    }
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` / `--list`: nothing to test here
    }
    orchestrate();
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// The stand-in
// ---------------------------------------------------------------------------------------------

/// `…/status/…` answers a plain 200 JSON, `…/models` a one-model list; every other path streams
/// the fixture: headers after 50–150 ms, the first content token 200–400 ms later, then an event
/// every 10–20 ms, each drawn per request (on average 100 ms, 400 ms and 15 ms). Drawn, not fixed:
/// with fixed delays every answer would land on the probe thread's 100 ms ticks with the starts
/// and share their wake-ups, which no provider's latencies do. Paths with an `/x…` target (see
/// [`IGNORING`]) answer the recorded sentence, which does not follow the probe's system prompt.
fn handler(obeying: Script, ignoring: Script) -> impl Fn(&RequestRecord) -> Script + Send + Sync + 'static {
    move |r: &RequestRecord| {
        if r.path_only().contains("/status/") {
            return Script::json(200, br#"{"status":"ok"}"#);
        }
        // The models-list poller's read (every 6 h, the first a minute after start).
        if r.path_only().ends_with("/models") {
            return Script::json(200, br#"{"object":"list","data":[{"id":"m","object":"model"}]}"#);
        }
        let base = if r.path_only().contains("/x") { &ignoring } else { &obeying };
        let mut rng = rand::rng();
        let mut ms = |from: u64, to: u64| Duration::from_micros(rng.random_range(from * 1000..=to * 1000));
        let mut s = base.clone().with_head_delay(ms(50, 150));
        for (i, c) in s.chunks.iter_mut().enumerate() {
            // Event 0 is role-only; event 1 carries the first content token.
            c.delay = match i {
                0 => Duration::ZERO,
                1 => ms(200, 400),
                _ => ms(10, 20),
            };
        }
        s
    }
}

/// The fixture's stream with its content deltas spelling `{"ok":true}` one piece each, the reply
/// the probe's system prompt asks for: the bench's targets are healthy, so no alert stays open
/// (the recorded answer, a sentence, would keep an `adherence_failed` incident open on each).
fn answering_ok(sse: &[u8]) -> Vec<u8> {
    let mut pieces = ["{", "\"", "o", "k", "\"", ":", "t", "r", "u", "e", "}"].into_iter();
    let mut out = Vec::with_capacity(sse.len());
    for line in sse.split_inclusive(|&b| b == b'\n') {
        let json = line.strip_prefix(b"data: ").and_then(|j| serde_json::from_slice::<serde_json::Value>(j).ok());
        let Some(mut event) = json else {
            out.extend_from_slice(line);
            continue;
        };
        if let Some(content) = event.pointer_mut("/choices/0/delta/content").filter(|c| c.as_str() != Some("")) {
            *content = serde_json::Value::from(pieces.next().unwrap_or(""));
        }
        out.extend_from_slice(format!("data: {event}\n").as_bytes());
    }
    assert!(pieces.next().is_none(), "the fixture has a content delta for every piece of the answer");
    out
}

/// Requests the stand-in received since the last `MARK`, by path (without the query).
type Counts = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>;
/// When the stand-in first heard from each daemon (its paths' first segment, `/v0`), in ms since
/// the Unix epoch: never reset.
type Firsts = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, u128>>>;

fn epoch_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// `--serve`: the stand-in in its own process; prints its port, serves until stdin closes.
/// `MARK` on stdin starts counting requests per path afresh; `REPORT` prints each count as
/// `COUNT <n> <path>`, when each daemon's first request came as `FIRST <ms since epoch> <prefix>`,
/// then `END`; `TRUTH` prints every request received since `MARK` whose head is written as
/// `TRUTH <received, ms since epoch> <received → head written, ms> <path>`, then `END`.
fn serve_child() {
    raise_nofile();
    let recorded = std::fs::read(format!("{}/tests/fixtures/{FIXTURE}", env!("CARGO_MANIFEST_DIR"))).expect("fixture");
    let (obeying, ignoring) =
        (Script::sse(&answering_ok(&recorded), Duration::ZERO), Script::sse(&recorded, Duration::ZERO));
    let counts = Counts::default();
    let firsts = Firsts::default();
    let answer = handler(obeying, ignoring);
    let counting = {
        let (counts, firsts) = (counts.clone(), firsts.clone());
        move |r: &RequestRecord| {
            if let Ok(mut c) = counts.lock() {
                *c.entry(r.path_only().to_string()).or_default() += 1;
            }
            let prefix = r.path_only().split('/').nth(1).unwrap_or_default();
            if let Ok(mut f) = firsts.lock() {
                f.entry(format!("/{prefix}")).or_insert_with(epoch_ms);
            }
            answer(r)
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let server = rt.block_on(StandIn::start(counting)).expect("stand-in starts");
    // Each request's truth is kept for `TRUTH` (a kilobyte or so each): room for every request of
    // three probers from their start to the window's end, with a week's read-back before it.
    server.keep_records(env_num("VIGIL_BENCH_TARGETS", 1000) as usize * 24);
    println!("PORT {}", server.addr().port());
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let mut mark = None;
    while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        let mut c = counts.lock().expect("counts");
        match line.trim() {
            "MARK" => {
                c.clear();
                mark = Some(Instant::now());
            }
            "TRUTH" => {
                let ms = |d: Duration| d.as_secs_f64() * 1000.0;
                let now = Instant::now();
                let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, ms);
                for r in server.requests() {
                    let Some(head) = r.head_written_at.filter(|_| mark.is_some_and(|m| r.received_at >= m)) else {
                        continue;
                    };
                    let at = wall - ms(now.saturating_duration_since(r.received_at));
                    println!(
                        "TRUTH {at:.3} {:.4} {}",
                        ms(head.saturating_duration_since(r.received_at)),
                        r.path_only()
                    );
                }
                println!("END");
                let _ = std::io::stdout().flush();
            }
            "REPORT" => {
                for (path, n) in c.iter() {
                    println!("COUNT {n} {path}");
                }
                for (prefix, at) in firsts.lock().expect("firsts").iter() {
                    println!("FIRST {at} {prefix}");
                }
                println!("END");
                let _ = std::io::stdout().flush();
            }
            _ => {}
        }
        line.clear();
    }
    drop(server);
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

/// utime + stime of a process in seconds.
fn proc_cpu(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return f64::NAN };
    let Some(close) = s.rfind(')') else { return f64::NAN };
    let f: Vec<&str> = s[close + 2..].split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (field(11) + field(12)) / clk_tck()
}

/// A `kB` field of `/proc/<pid>/status` in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Voluntary context switches (a thread going to sleep to be woken later) of every thread of a
/// process, and of its `vigil-probes` thread alone.
fn wake_ups(pid: u32) -> (u64, u64) {
    let (mut all, mut probes) = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return (0, 0) };
    for task in tasks.flatten() {
        let path = task.path();
        let switches = std::fs::read_to_string(path.join("status"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")?.trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        all += switches;
        if std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == "vigil-probes") {
            probes += switches;
        }
    }
    (all, probes)
}

fn raise_nofile() {
    // SAFETY: getrlimit/setrlimit only read/write the struct passed.
    unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        let want = libc::rlimit { rlim_cur: r.rlim_max, rlim_max: r.rlim_max };
        libc::setrlimit(libc::RLIMIT_NOFILE, &want);
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// A child process killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// One scrape
// ---------------------------------------------------------------------------------------------

struct Scrape {
    gzip_bytes: usize,
    bytes: usize,
    series: usize,
    probes: f64,
    /// `vigil_pipeline_step_seconds` by step: cumulative bucket counts by upper bound, and the sum.
    steps: std::collections::BTreeMap<String, Steps>,
}

/// One step's histogram as scraped: `(upper bound, cumulative count)` in exposition order, and the sum.
#[derive(Default, Clone)]
struct Steps {
    buckets: Vec<(f64, f64)>,
    sum: f64,
}

/// A label's value in an exposition line's label set.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!("{name}=\""))? + name.len() + 2;
    line[at..].split('"').next()
}

/// `vigil_pipeline_step_seconds` of one exposition, by step.
fn parse_steps(text: &str) -> std::collections::BTreeMap<String, Steps> {
    let mut steps: std::collections::BTreeMap<String, Steps> = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("vigil_pipeline_step_seconds_")) {
        let (Some(step), Some(value)) = (label(line, "step"), line.rsplit(' ').next().and_then(|v| v.parse().ok()))
        else {
            continue;
        };
        let entry = steps.entry(step.to_string()).or_default();
        if line.starts_with("vigil_pipeline_step_seconds_bucket") {
            let le = label(line, "le").map_or(f64::INFINITY, |v| v.parse().unwrap_or(f64::INFINITY));
            entry.buckets.push((le, value));
        } else if line.starts_with("vigil_pipeline_step_seconds_sum") {
            entry.sum = value;
        }
    }
    steps
}

/// Sends `request` (a whole request head) to 127.0.0.1:`port` and reads until the peer closes:
/// the response head in lower case, and the body as it came.
fn get(port: u16, request: &str, timeout: Duration) -> Option<(String, Vec<u8>)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let body = raw.split_off(head_end);
    Some((String::from_utf8_lossy(&raw).to_ascii_lowercase(), body))
}

/// A plain HTTP/1.1 GET of `/metrics` with `Accept-Encoding: gzip`, as Prometheus sends it.
fn scrape(port: u16) -> Option<Scrape> {
    let request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n";
    let (head, mut body) = get(port, request, Duration::from_secs(10))?;
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body)?;
    }
    let gzip_bytes = body.len();
    let text = if head.contains("content-encoding: gzip") {
        let mut out = String::new();
        flate2::read::GzDecoder::new(&body[..]).read_to_string(&mut out).ok()?;
        out
    } else {
        String::from_utf8(body).ok()?
    };
    let series = text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
    let probes = text
        .lines()
        .filter(|l| l.starts_with("vigil_probes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Some(Scrape { gzip_bytes, bytes: text.len(), series, probes, steps: parse_steps(&text) })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..line_end]).ok()?.split(';').next()?.trim(), 16).ok()?;
        b = &b[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// Streaming targets whose answers ignore the probe's system prompt (`VIGIL_BENCH_IGNORING`):
/// each opens an `adherence_failed` incident at its second probe, a minute or two after the
/// start, and the adaptive plan moves it to incident mode (at the same interval) in the window.
const IGNORING: u64 = 50;

/// Target `i`'s path on the stand-in under a daemon's `prefix`: `/status/i` for a plain HTTP
/// target, `/ti/v1` (`/xi/v1` when its answers ignore the system prompt) for a streaming one.
fn target_path(prefix: &str, i: usize, ignoring: usize) -> String {
    match i % 2 {
        0 => format!("{prefix}/status/{i}"),
        _ if i / 2 < ignoring => format!("{prefix}/x{i}/v1"),
        _ => format!("{prefix}/t{i}/v1"),
    }
}

/// The path a probe of target `i` requests (a streaming target's chat completions).
fn probe_path(prefix: &str, i: usize, ignoring: usize) -> String {
    let base = target_path(prefix, i, ignoring);
    if i.is_multiple_of(2) {
        base
    } else {
        format!("{base}/chat/completions")
    }
}

fn vigil_config(dir: &Path, stand_in: u16, http_port: u16, n: usize, prefix: &str, ignoring: usize) -> String {
    let mut c = format!(
        "region = \"bench\"\n\n[storage]\nurl = \"sqlite://{db}\"\ndata_dir = \"{data}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{http_port}\"\n\n[metrics]\ndetail = \"compact\"\n\n[probe]\ninterval = \"60s\"\ntimeout = \"30s\"\n\
         ttft_timeout = \"20s\"\nconcurrency = {concurrency}\n\n",
        db = dir.join("vigil.db").display(),
        data = dir.join("data").display(),
        // `probe.concurrency` takes at most 4,096: above that many targets, probes queue for a permit.
        concurrency = n.min(4096),
    );
    for i in 0..n {
        let path = target_path(prefix, i, ignoring);
        if i % 2 == 0 {
            c.push_str(&format!(
                "[[provider]]\nname = \"h{i}\"\nkind = \"http\"\nbase_url = \"http://127.0.0.1:{stand_in}{path}\"\n\
                 api_key_env = \"{KEY_VAR}\"\n\n"
            ));
        } else {
            c.push_str(&format!(
                "[[provider]]\nname = \"s{i}\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{stand_in}{path}\"\n\
                 api_key_env = \"{KEY_VAR}\"\nmodels = [\"m\"]\n\n"
            ));
        }
    }
    c
}

/// blackbox_exporter modules: a plain GET, and the streaming targets' chat request as a POST
/// (blackbox reads the whole streamed body, as vigil does).
fn blackbox_config() -> String {
    "modules:\n  http_2xx:\n    prober: http\n    timeout: 30s\n    http:\n      preferred_ip_protocol: ip4\n\
     \x20 chat_stream:\n    prober: http\n    timeout: 30s\n    http:\n      method: POST\n      preferred_ip_protocol: ip4\n\
     \x20     headers:\n        Content-Type: application/json\n        Authorization: Bearer sk-test-bench\n\
     \x20     body: '{\"model\":\"m\",\"stream\":true,\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"Reply with OK\"}]}'\n"
        .to_string()
}

fn prometheus_config(stand_in: u16, blackbox: u16, n: usize, ignoring: usize) -> String {
    let (mut plain, mut stream) = (Vec::new(), Vec::new());
    for i in 0..n {
        let url = format!("'http://127.0.0.1:{stand_in}{}'", probe_path("", i, ignoring));
        if i % 2 == 0 {
            plain.push(url);
        } else {
            stream.push(url);
        }
    }
    let job = |name: &str, module: &str, targets: &[String]| {
        format!(
            "  - job_name: {name}\n    metrics_path: /probe\n    params:\n      module: [{module}]\n\
             \x20   scrape_timeout: 30s\n    static_configs:\n      - targets: [{}]\n    relabel_configs:\n\
             \x20     - source_labels: [__address__]\n        target_label: __param_target\n\
             \x20     - source_labels: [__param_target]\n        target_label: instance\n\
             \x20     - target_label: __address__\n        replacement: 127.0.0.1:{blackbox}\n",
            targets.join(", ")
        )
    };
    format!(
        "global:\n  scrape_interval: 60s\n  evaluation_interval: 60s\nscrape_configs:\n{}{}",
        job("bb_plain", "http_2xx", &plain),
        job("bb_stream", "chat_stream", &stream)
    )
}

struct Side {
    prometheus: Proc,
    blackbox: Proc,
    prometheus_port: u16,
}

fn start_side_by_side(dir: &Path, stand_in: u16, n: usize, ignoring: usize) -> Option<Side> {
    if std::env::var("VIGIL_BENCH_BLACKBOX").is_ok_and(|v| v == "0") {
        return None;
    }
    let bb = which("prometheus-blackbox-exporter").or_else(|| which("blackbox_exporter"))?;
    let prom = which("prometheus")?;
    let (bb_port, prom_port) = (free_port(), free_port());
    std::fs::write(dir.join("blackbox.yml"), blackbox_config()).ok()?;
    std::fs::write(dir.join("prometheus.yml"), prometheus_config(stand_in, bb_port, n, ignoring)).ok()?;
    let log = |name: &str| std::fs::File::create(dir.join(name)).map(Stdio::from).unwrap_or_else(|_| Stdio::null());
    let blackbox = Proc(
        Command::new(bb)
            .arg(format!("--config.file={}", dir.join("blackbox.yml").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{bb_port}"))
            .stdout(log("blackbox.out"))
            .stderr(log("blackbox.err"))
            .spawn()
            .ok()?,
    );
    let prometheus = Proc(
        Command::new(prom)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(log("prometheus.out"))
            .stderr(log("prometheus.err"))
            .spawn()
            .ok()?,
    );
    Some(Side { prometheus, blackbox, prometheus_port: prom_port })
}

/// Probes Prometheus has run through blackbox: the sum of `scrape_samples_scraped` counts is not
/// exposed, so count scrapes of the probe jobs from Prometheus's own metrics.
fn prometheus_probe_count(port: u16) -> f64 {
    let Some(body) = prometheus_get(port, "/metrics") else { return f64::NAN };
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("prometheus_target_interval_length_seconds_count{interval=\"1m0s\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The body of a GET of `path` from the Prometheus on `port`, over HTTP/1.0 so it comes whole,
/// never chunked.
fn prometheus_get(port: u16, path: &str) -> Option<Vec<u8>> {
    get(port, &format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"), Duration::from_secs(30)).map(|(_, body)| body)
}

/// Writes `days` of hourly rollups for every target of the vigil `config` into a new SQLite file
/// `db` (migrated by vigil's own store), ending with the current hour; returns how many.
fn seed_history(db: &Path, config: &str, days: i64) -> usize {
    use chrono::DurationRound;
    let env: std::collections::BTreeMap<String, String> = [(KEY_VAR.to_string(), "sk-test-bench".to_string())].into();
    let parsed = vigil::config::Config::from_toml(config, &env).expect("the bench's config is valid");
    let targets: Vec<_> =
        vigil::io::probe::Planned::all(&parsed.providers, &parsed.region).into_iter().map(|p| p.target).collect();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7);
    // As the stand-in answers: headers at 50–150 ms, the first token 200–400 ms later, ~50 tokens/s.
    let pool = week_of_rollups::rollup_pool(&mut rng, [(100.0, 0.25), (400.0, 0.2), (50.0, 0.1)]);
    let now = chrono::Utc::now().duration_trunc(chrono::Duration::hours(1)).expect("an hour");
    let write = async {
        let store = vigil::io::store::open(&format!("sqlite://{}", db.display())).await.expect("history store");
        store.migrate().await.expect("history store migrated");
        let mut written = 0;
        let mut hour_rows = Vec::new();
        for h in (0..days * 24).rev() {
            let hour = now - chrono::Duration::hours(h);
            hour_rows.clear();
            for (i, t) in targets.iter().enumerate() {
                let pick = &pool[(i * 31 + h as usize * 17) % pool.len()];
                week_of_rollups::hour_rollups(t, hour, pick, &mut hour_rows);
            }
            store.upsert_rollups(&hour_rows).await.expect("rollups written");
            written += hour_rows.len();
        }
        written
    };
    tokio::runtime::Runtime::new().expect("runtime").block_on(write)
}

/// Copies the seeded history (the SQLite file and its journal files) to `db`, then runs `sql`
/// on the copy, if any.
fn copy_history(from: &Path, db: &Path, sql: Option<&str>) {
    for suffix in ["", "-wal", "-shm"] {
        let src = PathBuf::from(format!("{}{suffix}", from.display()));
        if src.exists() {
            std::fs::copy(&src, format!("{}{suffix}", db.display())).expect("history copied");
        }
    }
    let Some(sql) = sql else { return };
    let run = async {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(&mut c).await?;
        c.close().await
    };
    tokio::runtime::Runtime::new().expect("runtime").block_on(run).expect("VIGIL_BENCH_COMPARE_SQL runs on the copy");
}

/// One `vigil run` under measurement, in its own directory and on its own port.
struct Daemon {
    who: String,
    proc: Proc,
    /// When it was started, in ms since the Unix epoch.
    started_ms: u128,
    port: u16,
    log: PathBuf,
    db: PathBuf,
    /// Its targets' paths on the stand-in start with this, so each daemon's requests are counted apart.
    prefix: String,
}

/// A daemon's folder, config and copy of the history, ready to start.
struct Prepared {
    who: String,
    exe: PathBuf,
    config: PathBuf,
    port: u16,
    log: PathBuf,
    db: PathBuf,
    prefix: String,
}

impl Daemon {
    /// Writes daemon `k`'s config and copies the history for it; every daemon of a run is
    /// prepared before any starts, so no start shares the disk with another's 2.5 GB copy.
    fn prepare(base: &Path, who: &str, exe: &Path, run: &Run, k: usize) -> Prepared {
        let (n, ignoring) = run.fleet;
        let dir = base.join(format!("vigil-{}", free_port()));
        std::fs::create_dir_all(&dir).expect("daemon dir");
        let port = free_port();
        let config = dir.join("vigil.toml");
        let prefix = format!("/v{k}");
        std::fs::write(&config, vigil_config(&dir, run.stand_in, port, n, &prefix, ignoring)).expect("config written");
        if let Some(history) = &run.history {
            let sql = std::env::var("VIGIL_BENCH_COMPARE_SQL").ok().filter(|_| k > 0);
            copy_history(history, &dir.join("vigil.db"), sql.as_deref());
        }
        Prepared {
            who: who.to_string(),
            exe: exe.to_owned(),
            config,
            port,
            log: dir.join("vigil.log"),
            db: dir.join("vigil.db"),
            prefix,
        }
    }

    fn start(p: Prepared) -> Daemon {
        let started_ms = epoch_ms();
        let proc = Proc(
            Command::new(&p.exe)
                .args(["run", "--config"])
                .arg(&p.config)
                .env(KEY_VAR, "sk-test-bench")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&p.log).expect("log file"))
                .spawn()
                .expect("vigil starts"),
        );
        Daemon { who: p.who, proc, started_ms, port: p.port, log: p.log, db: p.db, prefix: p.prefix }
    }

    fn pid(&self) -> u32 {
        self.proc.0.id()
    }

    /// Whether its log says the stored baselines are restored.
    fn restored(&self) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|l| l.contains(RESTORED))
    }
}

/// What every daemon of a run shares: the stand-in's port, (targets, ignoring ones) and the
/// seeded history to start on.
struct Run {
    stand_in: u16,
    fleet: (usize, usize),
    history: Option<PathBuf>,
}

/// From its start to its first probe (as the stand-in received it), and to the stored baselines
/// being restored (its log's line, by the line's time stamp).
fn print_start(d: &Daemon, report: &Report) {
    let first = report.firsts.get(&d.prefix).map(|at| format!("{:.2} s", (*at as f64 - d.started_ms as f64) / 1000.0));
    let log = std::fs::read_to_string(&d.log).unwrap_or_default();
    let restored = log
        .lines()
        .find(|l| l.contains(RESTORED))
        .and_then(|l| chrono::DateTime::parse_from_rfc3339(l.split_whitespace().next()?).ok())
        .map(|at| format!("{:.1} s", (at.timestamp_millis() as f64 - d.started_ms as f64) / 1000.0));
    println!(
        "{:<34} first probe after {:>9}   stored baselines restored after {:>9}",
        d.who,
        first.unwrap_or_else(|| "(none)".into()),
        restored.unwrap_or_else(|| "(not logged)".into())
    );
}

struct Row {
    who: String,
    probes: f64,
    cpu: f64,
    peak_rss: f64,
}

/// What a daemon stored for the probes started since `since`.
fn stored_samples(db: &Path, since: chrono::DateTime<chrono::Utc>) -> Option<Vec<Sample>> {
    let read = async {
        let store = vigil::io::store::open(&format!("sqlite://{}", db.display())).await.ok()?;
        let q = vigil::io::store::SampleQuery { since: Some(since), ..Default::default() };
        store.samples(&q).await.ok()
    };
    tokio::runtime::Runtime::new().ok().and_then(|rt| rt.block_on(read))
}

/// The means of what a daemon stored for the window's probes: side by side, two builds on the
/// same stand-in must agree (the delays are drawn per request from the same ranges).
fn print_timings(who: &str, samples: Option<&[Sample]>) {
    let Some(samples) = samples else {
        println!("{who:<34} (samples not readable)");
        return;
    };
    let mean = |v: Vec<f64>| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
    let streams: Vec<_> = samples.iter().filter(|s| s.ttft_ms.is_some()).collect();
    let of = |f: fn(&Sample) -> Option<f64>| mean(streams.iter().filter_map(|s| f(s)).collect());
    let plain = mean(samples.iter().filter(|s| s.ttft_ms.is_none()).filter_map(|s| s.total_ms).collect());
    println!(
        "{who:<34} {:>9} {:>10.2} {:>10.2} {:>14.2} {:>10.1} {:>10.2}",
        streams.len(),
        of(|s| s.ttfb_ms),
        of(|s| s.ttft_ms),
        of(|s| Some(s.total_ms? - s.ttft_ms?)),
        of(|s| s.tokens_per_s),
        plain
    );
}

/// What the stand-in reports: requests by path since `MARK`, and each daemon's first request.
#[derive(Default)]
struct Report {
    counts: std::collections::HashMap<String, u32>,
    /// By prefix (`/v0`), in ms since the Unix epoch.
    firsts: std::collections::HashMap<String, u128>,
}

/// Sends the stand-in `command` and hands each line of its answer, up to `END`, to `each`.
fn ask(control: &mut impl Write, out: &mut impl BufRead, command: &str, mut each: impl FnMut(&str)) {
    if writeln!(control, "{command}").and_then(|()| control.flush()).is_err() {
        return;
    }
    let mut line = String::new();
    while out.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line.trim() != "END" {
        each(line.trim());
        line.clear();
    }
}

/// Asks the stand-in for its report.
fn read_counts(control: &mut impl Write, out: &mut impl BufRead) -> Report {
    let mut report = Report::default();
    ask(control, out, "REPORT", |line| {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("COUNT"), Some(n), Some(path)) => {
                report.counts.insert(path.to_string(), n.parse().unwrap_or(0));
            }
            (Some("FIRST"), Some(at), Some(prefix)) => {
                report.firsts.insert(prefix.to_string(), at.parse().unwrap_or(0));
            }
            _ => {}
        }
    });
    report
}

/// What the stand-in measured of each request since `MARK`, by path: (received, ms since the
/// Unix epoch; received → head written, ms), in arrival order.
type Truths = std::collections::HashMap<String, Vec<(f64, f64)>>;

/// Asks the stand-in for its truth (see [`serve_child`]).
fn read_truth(control: &mut impl Write, out: &mut impl BufRead) -> Truths {
    let mut truth = Truths::new();
    ask(control, out, "TRUTH", |line| {
        let mut parts = line.splitn(4, ' ');
        if let (Some("TRUTH"), Some(Ok(at)), Some(Ok(ms)), Some(path)) =
            (parts.next(), parts.next().map(str::parse), parts.next().map(str::parse), parts.next())
        {
            truth.entry(path.to_string()).or_default().push((at, ms));
        }
    });
    truth
}

/// Each measured TTFB less the stand-in's truth for the same request: a probe of `path` started
/// at `started` (ms since the Unix epoch) is the first request of that path received from then
/// on, within two seconds (with 1 ms of slack: the two processes read the wall clock apart).
fn ttfb_errors(truth: &Truths, measured: impl Iterator<Item = (String, f64, f64)>) -> Vec<f64> {
    let mut errors: Vec<f64> = measured
        .filter_map(|(path, started, ttfb)| {
            let got = truth.get(&path)?;
            let (at, ms) = got.get(got.partition_point(|(at, _)| *at < started - 1.0))?;
            (*at < started + 2000.0).then_some(ttfb - ms)
        })
        .collect();
    errors.sort_by(f64::total_cmp);
    errors
}

/// One row of the TTFB error table: how many probes matched, the median and the p99.
fn print_errors(who: &str, errors: &[f64]) {
    let at = |q: f64| errors.get(((errors.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    println!("{who:<34} {:>8} {:>10.3} {:>10.3}", errors.len(), at(0.5), at(0.99));
}

/// TTFBs (ms) of the window's probes Prometheus stored from blackbox_exporter (its `processing`
/// phase: request written → first response byte), as (path, scrape time in ms since the Unix
/// epoch, TTFB): the probe runs when Prometheus scrapes it.
fn blackbox_ttfbs(prometheus: u16, window: Duration) -> Vec<(String, f64, f64)> {
    let query = format!("probe_http_duration_seconds%7Bphase%3D%22processing%22%7D%5B{}s%5D", window.as_secs() + 1);
    let Some(body) = prometheus_get(prometheus, &format!("/api/v1/query?query={query}")) else { return vec![] };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) else { return vec![] };
    let mut out = Vec::new();
    for series in json.pointer("/data/result").and_then(|r| r.as_array()).into_iter().flatten() {
        // `instance` is the target's URL: http://127.0.0.1:port/path
        let Some(path) =
            series.pointer("/metric/instance").and_then(|i| i.as_str()).and_then(|u| u.splitn(4, '/').nth(3))
        else {
            continue;
        };
        for v in series.get("values").and_then(|v| v.as_array()).into_iter().flatten() {
            let at = v.get(0).and_then(serde_json::Value::as_f64);
            let secs = v.get(1).and_then(|x| x.as_str()).and_then(|x| x.parse::<f64>().ok());
            if let (Some(at), Some(secs)) = (at, secs) {
                out.push((format!("/{path}"), at * 1000.0, secs * 1000.0));
            }
        }
    }
    out
}

/// Probes sent (as the stand-in received them) against probes due in the window: every target
/// once per 60 s at its own offset, whatever its mode. A probe more than due is a start the
/// schedule did not plan (as a mode change once seemed to add); the models-list poller's reads
/// are counted apart, they are not probes.
fn print_due(
    d: &Daemon,
    counts: &std::collections::HashMap<String, u32>,
    (n, ignoring): (usize, usize),
    measure: Duration,
) {
    let due_each = measure.as_secs_f64() / 60.0;
    let (mut sent, mut extra, mut more, mut fewer) = (0u64, 0u64, 0usize, 0usize);
    for i in 0..n {
        let got = counts.get(&probe_path(&d.prefix, i, ignoring)).copied().unwrap_or(0);
        sent += u64::from(got);
        extra += u64::from(got).saturating_sub(due_each.ceil() as u64);
        more += usize::from(f64::from(got) > due_each.ceil());
        fewer += usize::from(f64::from(got) < due_each.floor());
    }
    let models: u32 =
        counts.iter().filter(|(p, _)| p.starts_with(&d.prefix) && p.ends_with("/models")).map(|(_, c)| c).sum();
    let log = std::fs::read_to_string(&d.log).unwrap_or_default();
    let switches = log.lines().filter(|l| l.contains("probe interval changed")).count();
    println!(
        "{:<34} {:>8} {:>8.0} {:>7} {:>9} {:>9} {:>8} {:>13}",
        d.who,
        sent,
        due_each * n as f64,
        extra,
        more,
        fewer,
        models,
        switches
    );
}

/// Each pipeline step's runs in the window (between two scrapes): how many, their mean, the
/// bucket the slowest fell in, and how many went past the 100 ms budget.
fn print_steps(who: &str, first: &Scrape, last: &Scrape) {
    for (step, end) in &last.steps {
        let start = first.steps.get(step).cloned().unwrap_or_default();
        let count_at = |s: &Steps, le: f64| s.buckets.iter().find(|(b, _)| *b == le).map_or(0.0, |(_, c)| *c);
        let runs = count_at(end, f64::INFINITY) - count_at(&start, f64::INFINITY);
        if runs <= 0.0 {
            continue;
        }
        let slowest =
            end.buckets.iter().find(|(le, c)| c - count_at(&start, *le) >= runs).map_or(f64::INFINITY, |(le, _)| *le);
        let over = runs - (count_at(end, 0.1) - count_at(&start, 0.1));
        println!(
            "{who:<34} {step:<9} {runs:>6.0} {:>9.2} {:>13} {over:>9.0}",
            (end.sum - start.sum) / runs * 1000.0,
            format!("<= {:.1}", slowest * 1000.0),
        );
    }
}

fn print_row(r: &Row) {
    let per_1000 = if r.probes > 0.0 { r.cpu / r.probes * 1000.0 } else { f64::NAN };
    println!("{:<34} {:>8.0} {:>9.2} {:>12.3} {:>11.1}", r.who, r.probes, r.cpu, per_1000, r.peak_rss);
}

fn orchestrate() {
    raise_nofile();
    let n = env_num("VIGIL_BENCH_TARGETS", 1000) as usize;
    let ignoring = (env_num("VIGIL_BENCH_IGNORING", IGNORING) as usize).min(n / 2);
    let warmup = Duration::from_secs(env_num("VIGIL_BENCH_WARMUP_S", 65));
    let measure = Duration::from_secs(env_num("VIGIL_BENCH_MEASURE_S", 120));
    let vigil_exe = env!("CARGO_BIN_EXE_vigil");
    // `VIGIL_BENCH_KEEP=1` keeps the daemons' logs, configs and databases for reading afterwards
    // (which targets changed mode and why, say); the history alone is 2.5 GB at 10,000 targets.
    let keep = std::env::var("VIGIL_BENCH_KEEP").is_ok_and(|v| v == "1");
    let dir = tempfile::Builder::new().prefix("vigil-bench").disable_cleanup(keep).tempdir().expect("temp dir");
    if keep {
        println!("kept after the run (VIGIL_BENCH_KEEP=1): {}", dir.path().display());
    }

    let mut server = Command::new(std::env::current_exe().expect("own executable"))
        .arg("--serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("stand-in starts");
    let mut out = BufReader::new(server.stdout.take().expect("stdout"));
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    let stand_in: u16 = line.trim().strip_prefix("PORT ").and_then(|p| p.parse().ok()).expect("stand-in port");

    let fleet = (n, ignoring);
    let days = env_num("VIGIL_BENCH_HISTORY_DAYS", 7) as i64;
    let history = (days > 0).then(|| {
        let db = dir.path().join("history.db");
        let t = Instant::now();
        let config = vigil_config(dir.path(), stand_in, free_port(), n, "", ignoring);
        let rollups = seed_history(&db, &config, days);
        let mib = std::fs::metadata(&db).map_or(0.0, |m| m.len() as f64 / 1048576.0);
        println!(
            "history: {rollups} rollups ({days} days of hours) written in {:.1} s, {mib:.0} MiB",
            t.elapsed().as_secs_f64()
        );
        db
    });
    let run = Run { stand_in, fleet, history };
    let mut control = server.stdin.take().expect("stdin");
    let mut prepared = vec![Daemon::prepare(dir.path(), "vigil run (whole daemon)", Path::new(vigil_exe), &run, 0)];
    if let Some(other) = std::env::var_os("VIGIL_BENCH_COMPARE_EXE") {
        let other = PathBuf::from(other);
        let name = other.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        prepared.push(Daemon::prepare(dir.path(), &format!("vigil run (compare: {name})"), &other, &run, 1));
    }
    if run.history.is_some() {
        // The week and its copies are gigabytes still in the page cache: written back while the
        // daemons run, they were in every figure (CPU, step times, the start) of earlier runs.
        let t = Instant::now();
        let synced = Command::new("sync").status().is_ok_and(|s| s.success());
        println!(
            "history written back to disk before the daemons start: {synced}, in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let daemons: Vec<Daemon> = prepared.into_iter().map(Daemon::start).collect();
    let side = start_side_by_side(dir.path(), stand_in, n, ignoring);

    println!("vigil whole-daemon benchmark");
    println!(
        "{n} targets every 60 s ({} plain HTTP, {} streaming: headers at 50–150 ms, first token 200–400 ms later, 14 events 10–20 ms apart); \
         embedded SQLite; /metrics scraped every {} s with Accept-Encoding: gzip",
        n.div_ceil(2),
        n / 2,
        SCRAPE_EVERY.as_secs()
    );
    println!("{ignoring} of the streaming targets answer without following the probe's system prompt (adherence_failed, then incident mode)");
    println!("load average at start: {}", loadavg());
    match &side {
        Some(_) => println!("side by side: prometheus + blackbox_exporter scraping the same targets every 60 s"),
        None => println!("side by side: skipped (prometheus and prometheus-blackbox-exporter not both installed)"),
    }
    // Reading the stored week back is a start's cost, not a steady minute's: the warm-up begins
    // once every daemon has it (or after ten minutes).
    let restoring = Instant::now();
    while restoring.elapsed() < Duration::from_secs(600) && !daemons.iter().all(Daemon::restored) {
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "stored baselines restored in every daemon after {:.1} s; warm-up {} s (every target probed once), then {} s measured",
        restoring.elapsed().as_secs_f64(),
        warmup.as_secs(),
        measure.as_secs()
    );
    std::thread::sleep(warmup);

    let first: Vec<Scrape> = daemons
        .iter()
        .map(|d| {
            scrape(d.port).unwrap_or_else(|| {
                let log = std::fs::read_to_string(&d.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                panic!(
                    "{} does not serve /metrics; the end of its log:\n{}",
                    d.who,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
        })
        .collect();
    let cpu0: Vec<f64> = daemons.iter().map(|d| proc_cpu(d.pid())).collect();
    let wakes0: Vec<(u64, u64)> = daemons.iter().map(|d| wake_ups(d.pid())).collect();
    let side0 = side.as_ref().map(|s| {
        (proc_cpu(s.prometheus.0.id()), proc_cpu(s.blackbox.0.id()), prometheus_probe_count(s.prometheus_port))
    });
    let started = Instant::now();
    let window_start = chrono::Utc::now();
    let _ = writeln!(control, "MARK").and_then(|()| control.flush());
    // Per daemon: each scrape and how long it took to serve.
    let mut scrapes: Vec<Vec<(Scrape, Duration)>> = daemons.iter().map(|_| vec![]).collect();
    let mut next = started + SCRAPE_EVERY;
    while next <= started + measure {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        for (d, got) in daemons.iter().zip(&mut scrapes) {
            let t = Instant::now();
            if let Some(s) = scrape(d.port) {
                got.push((s, t.elapsed()));
            }
        }
        next += SCRAPE_EVERY;
    }
    std::thread::sleep((started + measure).saturating_duration_since(Instant::now()));
    let report = read_counts(&mut control, &mut out);
    let cpu1: Vec<f64> = daemons.iter().map(|d| proc_cpu(d.pid())).collect();
    let wakes1: Vec<(u64, u64)> = daemons.iter().map(|d| wake_ups(d.pid())).collect();
    let side1 = side.as_ref().map(|s| {
        (proc_cpu(s.prometheus.0.id()), proc_cpu(s.blackbox.0.id()), prometheus_probe_count(s.prometheus_port))
    });
    let load_end = loadavg();
    // Read once the window's figures are taken: at 10,000 targets it is a few seconds of output.
    let truth = read_truth(&mut control, &mut out);

    println!();
    println!("{:<34} {:>8} {:>9} {:>12} {:>11}", "process", "probes", "CPU-s", "CPU-s/1000", "peak MiB");
    for (i, d) in daemons.iter().enumerate() {
        let last = scrapes[i].last().map(|(s, _)| s).unwrap_or(&first[i]);
        let probes = last.probes - first[i].probes;
        print_row(&Row { who: d.who.clone(), probes, cpu: cpu1[i] - cpu0[i], peak_rss: status_mib(d.pid(), "VmHWM:") });
    }
    if let (Some(s), Some((p0, b0, c0)), Some((p1, b1, c1))) = (&side, side0, side1) {
        // Each probe job scrape is one probe; Prometheus counts its scrapes per job interval.
        let side_probes = c1 - c0;
        let (pp, bp) = (status_mib(s.prometheus.0.id(), "VmHWM:"), status_mib(s.blackbox.0.id(), "VmHWM:"));
        print_row(&Row { who: "prometheus".into(), probes: side_probes, cpu: p1 - p0, peak_rss: pp });
        print_row(&Row { who: "blackbox_exporter".into(), probes: side_probes, cpu: b1 - b0, peak_rss: bp });
        print_row(&Row {
            who: "prometheus + blackbox_exporter".into(),
            probes: side_probes,
            cpu: (p1 - p0) + (b1 - b0),
            peak_rss: pp + bp,
        });
    }
    for (d, got) in daemons.iter().zip(&scrapes) {
        println!();
        println!("scrapes of {} in the window: {}", d.who, got.len());
        for (s, took) in got {
            println!(
                "  {:>9} bytes ({:>7} gzip), {:>6} series ({:.1} per target), served in {:.1} ms",
                s.bytes,
                s.gzip_bytes,
                s.series,
                s.series as f64 / n as f64,
                took.as_secs_f64() * 1000.0
            );
        }
    }
    println!();
    println!("pipeline steps in the window (vigil_pipeline_step_seconds; budget 100 ms for publish and evaluate):");
    println!("{:<34} {:<9} {:>6} {:>9} {:>13} {:>9}", "process", "step", "runs", "mean ms", "slowest ms", "> 100 ms");
    for (i, d) in daemons.iter().enumerate() {
        print_steps(&d.who, &first[i], scrapes[i].last().map(|(s, _)| s).unwrap_or(&first[i]));
    }
    println!("load average at end: {load_end}");
    for d in &daemons {
        let failed =
            std::fs::read_to_string(&d.log).unwrap_or_default().lines().filter(|l| l.contains("probe failed")).count();
        println!("probe failures logged by {}: {failed}", d.who);
    }
    println!();
    println!("what each daemon measured in the window (means; every request draws its delays from the same ranges):");
    println!(
        "{:<34} {:>9} {:>10} {:>10} {:>14} {:>10} {:>10}",
        "process", "streams", "TTFB ms", "TTFT ms", "total−TTFT ms", "tokens/s", "plain ms"
    );
    let stored: Vec<Option<Vec<Sample>>> = daemons.iter().map(|d| stored_samples(&d.db, window_start)).collect();
    for (d, samples) in daemons.iter().zip(&stored) {
        print_timings(&d.who, samples.as_deref());
    }
    println!();
    println!("TTFB less the stand-in's own truth (request received → head written), every probe of the window:");
    println!("{:<34} {:>8} {:>10} {:>10}", "process", "probes", "median ms", "p99 ms");
    for (d, samples) in daemons.iter().zip(&stored) {
        let measured = samples.iter().flatten().filter_map(|s| {
            let i: usize = s.target.provider.get(1..)?.parse().ok()?;
            let started = s.started_at.timestamp_micros() as f64 / 1000.0;
            Some((probe_path(&d.prefix, i, ignoring), started, s.ttfb_ms?))
        });
        print_errors(&d.who, &ttfb_errors(&truth, measured));
    }
    if let Some(s) = &side {
        print_errors(
            "blackbox_exporter (processing)",
            &ttfb_errors(&truth, blackbox_ttfbs(s.prometheus_port, measure).into_iter()),
        );
    }
    println!();
    println!("probes sent vs probes due in the window (as the stand-in received them; extra probes at a mode switch):");
    println!(
        "{:<34} {:>8} {:>8} {:>7} {:>9} {:>9} {:>8} {:>13}",
        "process", "sent", "due", "extra", "targets+", "targets-", "models", "mode changes"
    );
    for d in &daemons {
        print_due(d, &report.counts, fleet, measure);
    }
    println!();
    println!("start (on {days} days of stored history; budget 5 s to the first probe):");
    for d in &daemons {
        print_start(d, &report);
    }
    println!();
    println!("wake-ups (voluntary context switches) per second in the window:");
    for (i, d) in daemons.iter().enumerate() {
        let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / measure.as_secs_f64();
        println!(
            "{:<34} all threads {:>7.1}   vigil-probes thread {:>7.1}",
            d.who,
            per_s(wakes0[i].0, wakes1[i].0),
            per_s(wakes0[i].1, wakes1[i].1)
        );
    }

    drop(side);
    drop(daemons);
    drop(control);
    let _ = server.wait();
}
