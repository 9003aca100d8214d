//! Command line: each subcommand is a thin call into the library.

use crate::app::{App, AppOptions};
use crate::config::{Config, ConfigError, ProcessEnv};
use crate::metrics::Metrics;
use crate::probe::{Planned, Prober};
use crate::sample::Sample;
use crate::scheduler::Scheduler;
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// vigil: synthetic health probes for LLM API providers.
#[derive(Debug, Parser)]
#[command(name = "vigil", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands (SPEC "Command line").
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon.
    Run {
        /// Config file (default: vigil.toml in the working directory, else built-in defaults).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Add built-in simulated providers on loopback, so everything works without API keys.
        #[arg(long)]
        demo: bool,
    },
    /// Probe every target once now and print the results.
    Probe {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only this target id (`provider/model@route`).
        #[arg(long)]
        target: Option<String>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Apply database migrations (the daemon also does it at start).
    Migrate {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Validate and print the resolved config, secrets redacted.
    CheckConfig {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Bad command-line usage (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Exit code for an error that reached the edge: 2 for bad usage or config, 1 otherwise.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    let usage = e.chain().any(|c| {
        c.downcast_ref::<ConfigError>().is_some()
            || c.downcast_ref::<UsageError>().is_some()
            || matches!(c.downcast_ref::<crate::app::AppError>(), Some(crate::app::AppError::NothingToProbe))
    });
    if usage {
        2
    } else {
        1
    }
}

fn load(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    let config = Config::load(path.map(PathBuf::as_path), &ProcessEnv)?;
    for (name, var) in &config.skipped {
        tracing::info!(provider = %name, "skipping provider {name}: {var} is not set");
    }
    Ok(config)
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config, demo } => run_daemon(load(config.as_ref())?, demo).await,
        Command::Probe { config, target, json } => probe_once(load(config.as_ref())?, target, json).await,
        Command::Migrate { config } => {
            let c = load(config.as_ref())?;
            let store = crate::store::open(secrecy::ExposeSecret::expose_secret(&c.storage.url)).await?;
            store.migrate().await.context("vigil migrate")?;
            println!(
                "schema up to date ({})",
                crate::config::redact_url(secrecy::ExposeSecret::expose_secret(&c.storage.url))
            );
            Ok(())
        }
        Command::CheckConfig { config } => {
            let c = load(config.as_ref())?;
            print!("{}", c.redacted_toml());
            Ok(())
        }
    }
}

async fn run_daemon(config: Config, demo: bool) -> anyhow::Result<()> {
    let app = App::build(config, AppOptions { demo, ..AppOptions::default() }).await?;
    if let Some(addr) = app.local_addr() {
        tracing::info!(%addr, "http listening");
    }
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested; draining in-flight probes");
        signal.cancel();
    });
    app.run_until_stopped(shutdown).await.context("vigil run")
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

async fn probe_once(config: Config, target: Option<String>, json: bool) -> anyhow::Result<()> {
    let plans = Planned::all(&config.providers, &config.region);
    if plans.is_empty() {
        anyhow::bail!(crate::app::AppError::NothingToProbe);
    }
    if let Some(t) = &target {
        if !plans.iter().any(|p| &p.target.id() == t) {
            let known: Vec<String> = plans.iter().map(|p| p.target.id()).collect();
            anyhow::bail!(UsageError(format!("--target {t}: no such target (known: {})", known.join(", "))));
        }
    }
    let metrics = Arc::new(Metrics::new(&config.region)?);
    let prober = Prober::new(config.probe.clone(), &[]);
    let scheduler = Scheduler::new(plans, prober, config.probe.interval, config.probe.concurrency, metrics);
    let samples = scheduler.run_round(target.as_deref()).await;
    if json {
        for s in &samples {
            println!("{}", sample_json(s));
        }
    } else {
        print!("{}", table(&samples));
    }
    Ok(())
}

/// One sample as a JSON line: SPEC field names plus `target` and `ts`.
pub fn sample_json(s: &Sample) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("target".into(), s.target.id().into());
        o.insert("ts".into(), s.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true).into());
    }
    v
}

fn table(samples: &[Sample]) -> String {
    let ms = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
    let mut rows = vec![
        ["TARGET", "STATUS", "OUTCOME", "DNS", "CONNECT", "TLS", "TTFB", "TTFT", "TOK/S", "COST"].map(String::from)
    ];
    for s in samples {
        rows.push([
            s.target.id(),
            s.status.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            s.outcome.to_string(),
            ms(s.dns_ms),
            ms(s.connect_ms),
            ms(s.tls_ms),
            ms(s.ttfb_ms),
            ms(s.ttft_ms),
            s.tokens_per_s.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into()),
            s.cost_usd.map(|v| format!("${v:.6}")).unwrap_or_else(|| "-".into()),
        ]);
    }
    let widths: Vec<usize> = (0..10).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> =
            r.iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == 0 || i == 2 {
                        format!("{c:<w$}", w = widths[i])
                    } else {
                        format!("{c:>w$}", w = widths[i])
                    }
                })
                .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    let failed: Vec<&Sample> = samples.iter().filter(|s| s.outcome.is_failure()).collect();
    for s in failed {
        out.push_str(&format!("{}: {}\n", s.target.id(), s.error.as_deref().unwrap_or(s.outcome.as_str())));
    }
    out
}
