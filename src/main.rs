//! Thin entry point: logging, command line, and the mapping of errors to exit codes.

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    let filter = EnvFilter::try_from_env("VIGIL_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("VIGIL_LOG_FORMAT").is_ok_and(|f| f == "json");
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
    let cli = vigil::cli::Cli::parse();
    if let Err(e) = vigil::cli::run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(vigil::cli::exit_code(&e));
    }
}
