//! Thin entry point: logging, command line, and the mapping of errors to exit codes.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Filter when `VIGIL_LOG` is unset: vigil's own lines at info, every other crate (sqlx's
/// statement notices, the cron scheduler's ticks, hyper) only when it warns.
const DEFAULT_FILTER: &str = "warn,vigil=info";

fn main() {
    limit_malloc_arenas();
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

/// glibc gives every thread that allocates (async workers, blocking-pool threads, one thread per
/// SQLite connection) an arena of its own, up to eight per core, and keeps what is freed there:
/// at 1,000 targets that was about a fifth of the daemon's peak RSS, for no speed (docs/BENCHMARKS.md).
/// Two arenas, unless the operator chose a number with `MALLOC_ARENA_MAX`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator tunable, and runs before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Other allocators and C libraries size their arenas themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

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
