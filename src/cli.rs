//! Command line: each subcommand is a thin call into the library.

use crate::app::{App, AppOptions};
use crate::baseline::Baselines;
use crate::config::{Config, ConfigError, ProcessEnv};
use crate::metrics::Metrics;
use crate::monitor::Monitor;
use crate::probe::{Planned, Prober};
use crate::sample::Sample;
use crate::scheduler::Scheduler;
use crate::store::SampleQuery;
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
    /// Print the router export (same document as `GET /v1/thresholds`) from stored data.
    Thresholds {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
        /// Write to this file atomically (temp file + rename) instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print current P50/P95/P99 per target × region × metric.
    Baselines {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Rebuild this region's rollups from raw samples first.
        #[arg(long)]
        rebuild: bool,
        /// Every region in the (shared) store, side by side.
        #[arg(long)]
        all_regions: bool,
    },
    /// The provider comparison matrix from stored samples, or (`--weekly`) the weekly summary.
    Report {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// How far back.
        #[arg(long, default_value = "7d")]
        window: String,
        /// Region, or `all` for every region side by side (default: this instance's).
        #[arg(long)]
        region: Option<String>,
        /// JSON instead of a table.
        #[arg(long, conflicts_with = "weekly")]
        json: bool,
        /// The weekly summary as HTML with its charts inline: the 7 days ending now against the 7 before.
        #[arg(long, conflicts_with = "window")]
        weekly: bool,
        /// With `--weekly`: write the HTML to this file atomically instead of stdout.
        #[arg(long, requires = "weekly")]
        out: Option<PathBuf>,
    },
    /// Send a test notification through each configured channel (or one) and report per channel.
    AlertTest {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only the channel with this name (`slack`, `email`, `pagerduty`, `webhook`, or its `name`).
        #[arg(long)]
        channel: Option<String>,
    },
    /// Alert tooling.
    Alerts {
        /// What to do.
        #[command(subcommand)]
        command: AlertsCommand,
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

/// `vigil alerts …`.
#[derive(Debug, Subcommand)]
pub enum AlertsCommand {
    /// Replay stored samples through the alert rules and print the incidents they would have opened.
    Backtest {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// How far back.
        #[arg(long, default_value = "7d")]
        window: String,
        /// Region, or `all` (default: this instance's).
        #[arg(long)]
        region: Option<String>,
        /// Override a rule threshold: `--set alerts.latency_k=2` (repeatable).
        #[arg(long = "set", value_name = "alerts.KEY=VALUE")]
        set: Vec<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Output format of `vigil thresholds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
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

async fn open_migrated(c: &Config) -> anyhow::Result<Arc<dyn crate::store::Store>> {
    let store = crate::store::open(secrecy::ExposeSecret::expose_secret(&c.storage.url)).await?;
    store.migrate().await.context("storage")?;
    Ok(store)
}

/// Writes `bytes` so a reader sees the old file or the new one, never half of either.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

async fn baselines(c: &Config, json: bool, rebuild: bool, all_regions: bool) -> anyhow::Result<()> {
    let store = open_migrated(c).await?;
    let now = chrono::Utc::now();
    if rebuild {
        let targets = Planned::all(&c.providers, &c.region).into_iter().map(|p| p.target).collect();
        let mut monitor = Monitor::new(c, targets, now);
        let since = now - chrono::Duration::from_std(c.baseline.window).unwrap_or(chrono::Duration::days(7));
        let q = SampleQuery { region: Some(c.region.clone()), since: Some(since), ..SampleQuery::default() };
        let samples = store.samples(&q).await?;
        monitor.rebuild(&samples, now);
        monitor.persist(store.as_ref()).await.context("storing rebuilt rollups")?;
        eprintln!("rebuilt baselines of region {} from {} samples", c.region, samples.len());
    }
    let mut b = Baselines::new(&c.baseline);
    let region = (!all_regions).then_some(c.region.as_str());
    let report = b.load_from(store.as_ref(), region, now).await?;
    for skipped in &report.skipped {
        tracing::warn!(error = %skipped, "unreadable rollup skipped");
    }
    b.refresh(now);
    let rows = b.snapshot();
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(t, m, v)| {
                serde_json::json!({"target": t.id(), "provider": t.provider, "model": t.model, "route": t.route,
                    "region": t.region, "metric": m.as_str(), "samples": v.count, "p50": v.p50, "p95": v.p95, "p99": v.p99})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let f = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
    println!(
        "{:<60} {:<16} {:<13} {:>8} {:>9} {:>9} {:>9}",
        "TARGET", "REGION", "METRIC", "SAMPLES", "P50", "P95", "P99"
    );
    for (t, m, v) in rows {
        println!(
            "{:<60} {:<16} {:<13} {:>8} {:>9} {:>9} {:>9}",
            t.id(),
            t.region,
            m.as_str(),
            v.count,
            f(v.p50),
            f(v.p95),
            f(v.p99)
        );
    }
    Ok(())
}

async fn report(c: &Config, window: std::time::Duration, region: &str, json: bool) -> anyhow::Result<()> {
    let store = open_migrated(c).await?;
    let since = chrono::Utc::now() - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(7));
    let q = SampleQuery {
        region: (region != "all").then(|| region.to_string()),
        since: Some(since),
        ..SampleQuery::default()
    };
    let samples = store.samples(&q).await?;
    let mut targets: Vec<crate::target::Target> = samples.iter().map(|s| s.target.clone()).collect();
    targets.sort();
    targets.dedup();
    let prices = crate::pricing::load(&c.providers, &targets, &c.storage.data_dir, chrono::Utc::now()).await;
    let m = crate::report::matrix(&samples, &|t| prices.price(t));
    if json {
        println!("{}", m.to_json());
    } else {
        print!("{}", m.render_table());
    }
    for note in &prices.notes {
        eprintln!("note: {note}");
    }
    Ok(())
}

async fn weekly_report(c: &Config, region: &str, out: Option<&std::path::Path>) -> anyhow::Result<()> {
    let store = open_migrated(c).await?;
    let region = (region != "all").then_some(region);
    let report = crate::weekly::build(store.as_ref(), region, chrono::Utc::now()).await?;
    let pictures = crate::weekly::chart::pictures(&report)?;
    let html = crate::weekly::html::document(&report, &pictures, crate::weekly::html::ImageSource::DataUri);
    match out {
        Some(path) => {
            write_atomically(path, html.as_bytes()).with_context(|| format!("--out {}", path.display()))?;
            eprintln!("weekly summary of {} written to {}", report.scope(), path.display());
            Ok(())
        }
        None => {
            print!("{html}");
            Ok(())
        }
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
        Command::Thresholds { config, format, out } => {
            let c = load(config.as_ref())?;
            let store = open_migrated(&c).await?;
            let now = chrono::Utc::now();
            let targets = Planned::all(&c.providers, &c.region).into_iter().map(|p| p.target).collect();
            let mut monitor = Monitor::new(&c, targets, now);
            monitor.load(store.as_ref(), now).await.context("reading baselines")?;
            let doc = monitor.publish(now, None).thresholds.context("no thresholds document")?;
            let text = match format {
                Format::Json => doc.to_json() + "\n",
                Format::Yaml => doc.to_yaml()?,
            };
            match out {
                Some(path) => {
                    write_atomically(&path, text.as_bytes()).with_context(|| format!("--out {}", path.display()))
                }
                None => {
                    print!("{text}");
                    Ok(())
                }
            }
        }
        Command::Baselines { config, json, rebuild, all_regions } => {
            let c = load(config.as_ref())?;
            baselines(&c, json, rebuild, all_regions).await
        }
        Command::Report { config, window, region, json, weekly, out } => {
            let c = load(config.as_ref())?;
            let region = region.unwrap_or_else(|| c.region.clone());
            if weekly {
                return weekly_report(&c, &region, out.as_deref()).await;
            }
            let window = crate::config::parse_duration("--window", &window)?;
            report(&c, window, &region, json).await
        }
        Command::AlertTest { config, channel } => {
            let c = load(config.as_ref())?;
            let channels = crate::alert::notifier::build_notifiers(&c.alerts, crate::alert::notifier::DEFAULT_TIMEOUT)
                .map_err(|e| anyhow::anyhow!("{}: {}", e.channel, e.message))?;
            let results =
                crate::alert::notifier::alert_test(&channels, channel.as_deref(), &c.region, chrono::Utc::now()).await;
            if results.is_empty() {
                let names: Vec<&str> = channels.iter().map(|n| n.name()).collect();
                anyhow::bail!(UsageError(match channel {
                    Some(ch) => format!("--channel {ch}: no such channel (configured: {})", names.join(", ")),
                    None => "no alert channel is configured ([[alerts.slack]], [[alerts.email]], …)".into(),
                }));
            }
            let mut failed = 0;
            for (name, r) in &results {
                match r {
                    Ok(()) => println!("{name}: accepted"),
                    Err(e) => {
                        failed += 1;
                        println!("{name}: FAILED: {e}");
                    }
                }
            }
            if failed > 0 {
                anyhow::bail!("{failed} of {} channels did not accept the test notification", results.len());
            }
            Ok(())
        }
        Command::Alerts { command: AlertsCommand::Backtest { config, window, region, set, json } } => {
            let c = load(config.as_ref())?;
            let window = crate::config::parse_duration("--window", &window)?;
            let mut rules = crate::alert::rules::RuleConfig::from_config(&c);
            for s in &set {
                crate::alert::backtest::set(&mut rules, s).map_err(UsageError)?;
            }
            let region = region.unwrap_or_else(|| c.region.clone());
            let store = open_migrated(&c).await?;
            let started = std::time::Instant::now();
            let report = crate::alert::backtest::from_store(
                store.as_ref(),
                rules,
                &c.baseline,
                c.probe.interval,
                (region != "all").then_some(region.as_str()),
                window,
                chrono::Utc::now(),
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render_table());
            }
            eprintln!("replayed {} samples in {:.2} s", report.samples, started.elapsed().as_secs_f64());
            Ok(())
        }
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
