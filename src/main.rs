//! Thin entry point: logging, command line, and the mapping of errors to exit codes.

use clap::Parser;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Filter when `VIGIL_LOG` is unset: vigil's own lines at info, every other crate (sqlx's
/// statement notices, the cron scheduler's ticks, hyper) only when it warns.
const DEFAULT_FILTER: &str = "warn,vigil=info";

#[tokio::main]
async fn main() {
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
    let cli = vigil::cli::Cli::parse();
    if let Err(e) = vigil::cli::run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(vigil::cli::exit_code(&e));
    }
}
