//! Thin entry point: logging, command line, and the mapping of errors to exit codes.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Filter when `VIGIL_LOG` is unset: vigil's own lines at info, every other crate (sqlx's
/// statement notices, the cron scheduler's ticks, hyper) only when it warns.
const DEFAULT_FILTER: &str = "warn,vigil=info";

fn main() {
    tune_malloc();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    runtime.block_on(run());
    // Dropping a runtime waits for every blocking task; one still busy at the stop (a models
    // list being parsed) must not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
}

/// Blocks from this size up are mapped on their own and unmapped when freed (see [`tune_malloc`]).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 256 * 1024;

/// Two glibc tunables, each unless the operator set it (`MALLOC_ARENA_MAX`,
/// `MALLOC_MMAP_THRESHOLD_`, or either in `GLIBC_TUNABLES`):
/// - glibc gives every thread that allocates (async workers, blocking-pool threads, one thread per
///   SQLite connection) an arena of its own, up to eight per core, and keeps what is freed there:
///   at 1,000 targets that was about a fifth of the daemon's peak RSS, for no speed. Two arenas.
/// - glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB), so after
///   the first minute a publish's and an evaluation's megabyte-sized tables come from the heap,
///   where what is freed between live allocations stays resident. Pinned at [`MMAP_THRESHOLD`],
///   they are unmapped as they are freed: at 10,000 targets RSS swung 132–168 MiB with each
///   minute's evaluation, and 134–150 MiB pinned, at the same CPU (docs/BENCHMARKS.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_malloc() {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    let set = |env: &str, tunable: &str| std::env::var_os(env).is_some() || tunables.contains(tunable);
    // SAFETY: mallopt only sets an allocator tunable, and runs before any other thread exists.
    unsafe {
        if !set("MALLOC_ARENA_MAX", "glibc.malloc.arena_max") {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
        if !set("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold") {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        }
    }
}

/// Other allocators and C libraries size their arenas and mappings themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}

/// How often freed memory is handed back to the kernel (see [`return_freed_memory`]).
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// glibc returns freed memory to the kernel only from the top of its heap; what is freed below
/// live allocations stays resident. A daemon that rebuilds its snapshot and storage hand-off every
/// few seconds frees megabytes between live state, so once every [`TRIM_EVERY`] a thread of its
/// own asks glibc to release every free page (`malloc_trim`, a few milliseconds at 10,000
/// targets; docs/BENCHMARKS.md). The daemon's only: a command that exits in seconds has no use for it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_freed_memory() {
    let spawned = std::thread::Builder::new().name("vigil-trim".into()).spawn(|| loop {
        std::thread::sleep(TRIM_EVERY);
        // SAFETY: malloc_trim takes the allocator's own locks and touches no memory of ours.
        unsafe {
            libc::malloc_trim(0);
        }
    });
    if let Err(e) = spawned {
        eprintln!("warning: freed memory stays resident (no thread to trim it): {e}");
    }
}

/// Other allocators and C libraries return freed memory themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_freed_memory() {}

async fn run() {
    let filter = EnvFilter::try_from_env("VIGIL_LOG").unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let json = std::env::var("VIGIL_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        // Flattened: `message`, `level`, `target` and the event's fields share one top-level
        // object, as log shippers (journald, Loki, Cloud Logging) expect.
        builder.json().flatten_event(true).with_current_span(false).with_span_list(false).init();
    } else {
        // Colour escapes only for a person at a terminal, never into a file, journald or Docker.
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
    let matches = vigil::cli::command().get_matches();
    let cli = match <vigil::cli::Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Only the daemon lives long enough to need it.
    if matches!(cli.command, vigil::cli::Command::Run { .. }) {
        return_freed_memory();
    }
    if let Err(e) = vigil::cli::run(cli).await {
        eprintln!("error: {}", vigil::cli::error_text(&e));
        std::process::exit(vigil::cli::exit_code(&e));
    }
}
