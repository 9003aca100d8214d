//! Command line: each subcommand is a thin call into the library.

use crate::config::{Config, ConfigError, ProcessEnv};
use crate::decide::baseline::Baselines;
use crate::io::metrics::Metrics;
use crate::io::probe::{Planned, Prober};
use crate::io::store::SampleQuery;
use crate::run::monitor::Monitor;
use crate::run::scheduler::Scheduler;
use crate::vocab::sample::Sample;
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;

mod help;

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
        /// TLS and basic auth on the listener: a web configuration file in the Prometheus
        /// exporter toolkit's format (sets `http.web_config_file`).
        #[arg(long = "web.config.file", value_name = "FILE")]
        web_config_file: Option<PathBuf>,
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
        /// Probe the built-in simulated providers (on loopback) as well.
        #[arg(long)]
        demo: bool,
        /// Exit 0 even when a target failed (by default a failed target exits 1).
        #[arg(long)]
        no_fail: bool,
    },
    /// Print the router export (same document as `GET /v1/thresholds`) from stored data.
    Thresholds {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
        /// Only targets (and chain entries) of this model id.
        #[arg(long)]
        model: Option<String>,
        /// Only targets (and chain entries) of this provider.
        #[arg(long)]
        provider: Option<String>,
        /// Only this chain and its targets.
        #[arg(long)]
        chain: Option<String>,
        /// Sign the exact bytes with the key of `http.signing_key_env`: the base64 signature goes
        /// to FILE.sig with `--out FILE`, else to stderr.
        #[arg(long)]
        sign: bool,
        /// Write to this file atomically (temp file + rename) instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// From the demo's database (seeded with a simulated week when empty), for the demo targets.
        #[arg(long)]
        demo: bool,
    },
    /// Print current P50/P95/P99 per target × region × metric (`baselines adopt TARGET`: adopt a held level).
    #[command(args_conflicts_with_subcommands = true)]
    Baselines {
        /// `adopt TARGET`.
        #[command(subcommand)]
        command: Option<BaselinesCommand>,
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
        /// From the demo's database (seeded with a simulated week when empty).
        #[arg(long)]
        demo: bool,
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
        /// From the demo's database (seeded with a simulated week when empty).
        #[arg(long)]
        demo: bool,
    },
    /// Failover drills: drop a target from a chain's export for a while (`--chain C --drop T
    /// --for 10m`), list them (`--list`), or end one early (`--end ID`, `--end --chain C --drop T`).
    /// Stored, so every region sharing the storage honours them.
    Drill {
        /// Config file (its `[[chain]]`s and `storage.url`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The chain (`[[chain]] name`).
        #[arg(long)]
        chain: Option<String>,
        /// What to drop: a member as `[[chain]] targets` spells it, a target id of one
        /// (`provider/model@route`), or a provider name (every member of that provider).
        #[arg(long, value_name = "TARGET")]
        drop: Option<String>,
        /// How long, from 1m to 24h (`10m`, `1h`).
        #[arg(long = "for", value_name = "DURATION")]
        duration: Option<String>,
        /// List the running drills and those ended within a day.
        #[arg(long, conflicts_with_all = ["drop", "duration", "end"])]
        list: bool,
        /// End a running drill now: by its id (or a prefix fitting one), or, without an id, the
        /// drills of `--chain` dropping `--drop`.
        #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "", conflicts_with = "duration")]
        end: Option<String>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
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
    /// Validate and print the resolved config as TOML `--config` accepts; exits 2 where `run` would.
    CheckConfig {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Validate as `run --demo` would: with the simulated providers, which `[[chain]]` may name.
        #[arg(long)]
        demo: bool,
        /// Validate as `run --web.config.file FILE` would.
        #[arg(long = "web.config.file", value_name = "FILE")]
        web_config_file: Option<PathBuf>,
    },
    /// Print a shell completion script (e.g. `vigil completions bash > /etc/bash_completion.d/vigil`).
    Completions {
        /// Shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of vigil or of a subcommand (`vigil man run > vigil-run.1`), or
    /// write every page into a directory (`vigil man --dir /usr/local/share/man/man1`).
    Man {
        /// The subcommand whose page to print (`run`, `alerts backtest`); none: vigil(1).
        command: Vec<String>,
        /// Write vigil.1 and one page per subcommand (vigil-run.1, vigil-alerts-backtest.1, …) here.
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        dir: Option<PathBuf>,
    },
}

/// `vigil baselines …`.
#[derive(Debug, Subcommand)]
pub enum BaselinesCommand {
    /// Adopt, at once, the level a target's baseline has held out while the target was in
    /// trouble (what `baseline.adopt_after` does on its own); asks the running daemon.
    Adopt {
        /// Target id (`provider/model[@route]`), as `/v1/targets` and `vigil baselines` show it.
        target: String,
        /// Config file (the daemon's `http.listen` and `http.api_token`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The daemon's base URL (default: `http://` + `http.listen`, loopback when it listens on every address).
        #[arg(long)]
        url: Option<String>,
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
        /// Override a rule threshold: `--set alerts.latency_k=2` (repeatable); a breaker rule
        /// (`--set breaker.failure_k=3 --set breaker.failure_n=7`) replays the breaker from the samples.
        #[arg(long = "set", value_name = "alerts.KEY=VALUE")]
        set: Vec<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// From the demo's database (seeded with a simulated week when empty).
        #[arg(long)]
        demo: bool,
    },
}

pub use crate::decide::router_formats::Format;

/// Bad command-line usage (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The command line as `--help`, the completions and the man pages show it: each subcommand's
/// environment variables under its options.
pub fn command() -> clap::Command {
    help::decorate(<Cli as clap::CommandFactory>::command())
}

/// `vigil man [COMMAND…] [--dir DIR]`.
fn man(words: &[String], dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    let pages = help::pages(command()).context("rendering the man pages")?;
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).with_context(|| format!("--dir {}", dir.display()))?;
        for (name, roff) in &pages {
            let path = dir.join(name);
            write_atomically(&path, roff).with_context(|| format!("--dir {}", path.display()))?;
            println!("{}", path.display());
        }
        return Ok(());
    }
    let name = match words {
        [] => "vigil.1".to_string(),
        words => format!("vigil-{}.1", words.join("-")),
    };
    let Some((_, roff)) = pages.iter().find(|(n, _)| *n == name) else {
        let known: Vec<String> = pages
            .iter()
            .skip(1)
            .map(|(n, _)| n.trim_start_matches("vigil-").trim_end_matches(".1").to_string())
            .collect();
        anyhow::bail!(UsageError(format!("no page for `{}` (pages: {})", words.join(" "), known.join(", "))));
    };
    std::io::Write::write_all(&mut std::io::stdout(), roff).context("writing the man page")?;
    Ok(())
}

/// An error and its causes on one line, each said once: many errors spell their cause in their
/// own message already (`http.listen …: Address in use (os error 98)`), and `{:#}` would repeat it.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Exit code for an error that reached the edge: 2 for bad usage or config, 1 otherwise.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    let usage = e.chain().any(|c| {
        c.downcast_ref::<ConfigError>().is_some()
            || c.downcast_ref::<UsageError>().is_some()
            || matches!(c.downcast_ref::<crate::run::app::AppError>(), Some(crate::run::app::AppError::NothingToProbe))
            || matches!(c.downcast_ref::<crate::io::store::StoreError>(), Some(crate::io::store::StoreError::BadUrl(_)))
    });
    if usage {
        2
    } else {
        1
    }
}

async fn open_migrated(c: &Config) -> anyhow::Result<Arc<dyn crate::io::store::Store>> {
    let store = crate::io::store::open(secrecy::ExposeSecret::expose_secret(&c.storage.url)).await?;
    store.migrate().await.context("storage")?;
    Ok(store)
}

/// Writes `bytes` so a reader sees the old file or the new one, never half of either. The file
/// gets mode 0666 less the umask, as any file a shell writes would (a router under another user
/// reads it); the temp file is created with that mode, so it is never wider in between.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let mut builder = tempfile::Builder::new();
    builder.prefix(".vigil-out-");
    // open(2) applies the umask to this mode.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut tmp = builder.tempfile_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The router export from stored data, built by the same code as the daemon's: the configured
/// targets plus every target this region has stored baselines or a breaker for (so a store
/// written by `vigil run --demo` exports its targets without a config naming them).
pub async fn thresholds_document(
    c: &Config,
    store: &dyn crate::io::store::Store,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<crate::decide::export::Thresholds> {
    let mut targets: Vec<crate::vocab::target::Target> =
        Planned::all(&c.providers, &c.region).into_iter().map(|p| p.target).collect();
    let since = Baselines::new(&c.baseline).window_start(now);
    let stored = store.rollups_since(Some(&c.region), since).await.context("reading rollups")?;
    let breakers = store.load_breakers(Some(&c.region)).await.context("reading breakers")?;
    for t in stored.into_iter().map(|r| r.target).chain(breakers.into_iter().map(|b| b.target)) {
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    let mut monitor = Monitor::new(c, targets, now);
    monitor.load(store, now).await.context("reading baselines")?;
    // The day of credit readings the daemon projects from (the storage link reads the same).
    let mut credits = std::collections::BTreeMap::new();
    for (p, _) in c.credit_watch() {
        let since = now - chrono::Duration::hours(24);
        let readings = crate::io::store::FeedStore::balances(store, &p.name, since).await.context("reading credit")?;
        credits.insert(p.name.clone(), readings);
    }
    monitor.read_credit(&credits);
    monitor.publish(now, None).thresholds.map(std::sync::Arc::unwrap_or_clone).context("no thresholds document")
}

/// Parses the storage URL as opening it would, without connecting: a URL `run` would refuse
/// with exit 2 is refused the same way.
fn check_storage_url(url: &str) -> Result<(), crate::io::store::StoreError> {
    use std::str::FromStr;
    let parsed = if url.starts_with("sqlite:") {
        sqlx::sqlite::SqliteConnectOptions::from_str(url).map(drop)
    } else {
        sqlx::postgres::PgConnectOptions::from_str(url).map(drop)
    };
    parsed.map_err(|e| crate::io::store::StoreError::BadUrl(format!("{}: {e}", crate::config::redact_url(url))))
}

/// `vigil baselines adopt TARGET`: `POST /-/baselines/adopt` on the running daemon.
async fn adopt(config: Option<&PathBuf>, target: &str, url: Option<String>) -> anyhow::Result<()> {
    let c = load(config)?;
    let base = url.unwrap_or_else(|| {
        let mut at = c.http.listen;
        if at.ip().is_unspecified() {
            at.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("http://{at}")
    });
    let endpoint = format!("{}/-/baselines/adopt", base.trim_end_matches('/'));
    let mut request = reqwest::Client::new().post(&endpoint).query(&[("target", target)]);
    if let Some(token) = &c.http.api_token {
        request = request.bearer_auth(secrecy::ExposeSecret::expose_secret(token));
    }
    let response = request
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .with_context(|| format!("asking the daemon at {endpoint}"))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    let outcome: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    match outcome["outcome"].as_str() {
        Some("adopted") => {
            let a: crate::decide::baseline::Adoption = serde_json::from_value(outcome["adoption"].clone())
                .with_context(|| format!("the daemon's answer: {body}"))?;
            println!("{}", a.describe());
            Ok(())
        }
        Some("nothing_held") => {
            anyhow::bail!("nothing held for {target}: it is not in trouble, or none of its probes in trouble succeeded")
        }
        Some("unknown_target") => {
            anyhow::bail!("{target}: no such target in region {} (ids as `vigil baselines` shows them)", c.region)
        }
        Some("stopping") => anyhow::bail!("the daemon at {base} is stopping"),
        _ => anyhow::bail!("the daemon at {base} answered {status}: {}", body.trim()),
    }
}

/// What `vigil drill` was asked, its options as given.
struct DrillAsk {
    chain: Option<String>,
    drop: Option<String>,
    duration: Option<String>,
    list: bool,
    end: Option<String>,
    json: bool,
}

/// A drill request's failure at the edge: a wrong request is bad usage (exit 2), storage is not.
fn desk_error(e: crate::io::drill_desk::DeskError) -> anyhow::Error {
    match e {
        crate::io::drill_desk::DeskError::Drill(d) => UsageError(d.to_string()).into(),
        crate::io::drill_desk::DeskError::Store(s) => anyhow::Error::new(s).context("storage"),
    }
}

/// One drill as `vigil drill` prints it.
fn drill_line(d: &crate::vocab::drill::Drill, now: chrono::DateTime<chrono::Utc>) -> String {
    let t = |at: chrono::DateTime<chrono::Utc>| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let state = match (d.active_at(now), d.ended_at) {
        (true, _) => format!("running until {}", t(d.until)),
        (false, Some(at)) => format!("ended early at {}", t(at)),
        (false, None) => format!("ran out at {}", t(d.until)),
    };
    format!("{}  chain {} drops {}  {state}  (started {} in {})", d.id, d.chain, d.target, t(d.started_at), d.region)
}

/// `vigil drill`: start, list or end drills in the shared store.
async fn drill(
    desk: &crate::io::drill_desk::DrillDesk,
    ask: DrillAsk,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    let shown: Vec<crate::vocab::drill::Drill> = if ask.list {
        let all = desk.list(now).await.map_err(desk_error)?;
        all.into_iter().filter(|d| ask.chain.as_ref().is_none_or(|c| *c == d.chain)).collect()
    } else if let Some(id) = ask.end {
        match (id.trim().is_empty(), ask.chain, ask.drop) {
            (false, _, _) => vec![desk.end(&id, now).await.map_err(desk_error)?],
            (true, Some(chain), Some(target)) => desk.end_matching(&chain, &target, now).await.map_err(desk_error)?,
            (true, _, _) => anyhow::bail!(UsageError("--end needs a drill id, or --chain and --drop".into())),
        }
    } else {
        let (Some(chain), Some(target), Some(duration)) = (ask.chain, ask.drop, ask.duration) else {
            anyhow::bail!(UsageError("a drill needs --chain, --drop and --for (or --list, or --end)".into()));
        };
        let duration = crate::config::parse_duration("--for", &duration)?;
        let req = crate::decide::drill::DrillRequest { chain, target, duration };
        vec![desk.start(&req, now).await.map_err(desk_error)?]
    };
    if ask.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "drills": shown }))?);
    } else if shown.is_empty() {
        println!("no drills running or ended within a day");
    } else {
        for d in &shown {
            println!("{}", drill_line(d, now));
        }
    }
    Ok(())
}

async fn baselines(
    c: &Config,
    store: Arc<dyn crate::io::store::Store>,
    json: bool,
    rebuild: bool,
    all_regions: bool,
) -> anyhow::Result<()> {
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
    let report = crate::io::store::load_window(store.as_ref(), &mut b, region, now).await?;
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
                    "region": t.region, "metric": m.as_str(), "samples": v.count, "p50": v.p50, "p95": v.p95, "p99": v.p99,
                    "min_samples": {"p50": c.baseline.min_samples_p50, "p95": c.baseline.min_samples_p95,
                        "p99": c.baseline.min_samples_p99}})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let min = [c.baseline.min_samples_p50, c.baseline.min_samples_p95, c.baseline.min_samples_p99];
    // An empty quantile says why: too few samples in the window, n of how many.
    let f = |v: Option<f64>, count: u64, need: u64| match v {
        Some(v) => format!("{v:.1}"),
        None => format!("— ({count} of {need})"),
    };
    println!(
        "{:<60} {:<16} {:<13} {:>8} {:>16} {:>16} {:>16}",
        "TARGET", "REGION", "METRIC", "SAMPLES", "P50", "P95", "P99"
    );
    for (t, m, v) in &rows {
        println!(
            "{:<60} {:<16} {:<13} {:>8} {:>16} {:>16} {:>16}",
            t.id(),
            t.region,
            m.as_str(),
            v.count,
            f(v.p50, v.count, min[0]),
            f(v.p95, v.count, min[1]),
            f(v.p99, v.count, min[2])
        );
    }
    if rows.is_empty() {
        println!(
            "(no baselines yet: no successful probe stored in the {} window)",
            humantime::format_duration(c.baseline.window)
        );
    }
    Ok(())
}

async fn report(
    c: &Config,
    store: Arc<dyn crate::io::store::Store>,
    window: std::time::Duration,
    region: &str,
    json: bool,
) -> anyhow::Result<()> {
    let since = chrono::Utc::now() - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::days(7));
    let q = SampleQuery {
        region: (region != "all").then(|| region.to_string()),
        since: Some(since),
        ..SampleQuery::default()
    };
    let samples = store.samples(&q).await?;
    let mut targets: Vec<crate::vocab::target::Target> = samples.iter().map(|s| s.target.clone()).collect();
    targets.sort();
    targets.dedup();
    let prices = crate::io::feeds::prices::load(&c.providers, &targets, &c.storage.data_dir, chrono::Utc::now()).await;
    let m = crate::decide::report::matrix(&samples, &|t| prices.price(t));
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

async fn weekly_report(
    c: &Config,
    store: Arc<dyn crate::io::store::Store>,
    region: &str,
    out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let region = (region != "all").then_some(region);
    let traffic = crate::decide::chain_cost::traffic_of(&c.chains);
    let report = crate::io::weekly::build_for(store.as_ref(), region, chrono::Utc::now(), &traffic).await?;
    let pictures = crate::io::weekly::chart::pictures(&report)?;
    let html = crate::io::weekly::html::document(&report, &pictures, crate::io::weekly::html::ImageSource::DataUri);
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
    log_providers(&config, false);
    Ok(config)
}

/// The config of a reading command: with `demo`, the demo's own database and its providers,
/// served on loopback while the command runs (the report reads their published prices).
async fn load_reading(path: Option<&PathBuf>, demo: bool) -> anyhow::Result<(Config, Option<crate::run::demo::Demo>)> {
    let mut config = Config::load_with(path.map(PathBuf::as_path), &ProcessEnv, &demo_declared(demo))?;
    log_providers(&config, demo);
    if !demo {
        return Ok((config, None));
    }
    crate::run::demo::use_demo_database(&mut config).log(&config);
    let running = crate::run::demo::start_demo(crate::run::demo::history::SEED).await.context("--demo")?;
    running.attach(&mut config);
    Ok((config, Some(running)))
}

/// The providers `--demo` adds, as config validation sees them (none without `--demo`), so
/// `[[chain]]` may name demo targets.
fn demo_declared(demo: bool) -> Vec<crate::config::ProviderConfig> {
    if demo {
        crate::run::demo::declared_providers()
    } else {
        Vec::new()
    }
}

/// `check-config --demo`'s note: the providers the demo adds (not printed as `[[provider]]`) and
/// the chain it adds when no `[[chain]]` names them.
fn demo_note(c: &Config) -> String {
    let declared = crate::run::demo::declared_providers();
    let names: Vec<&str> = declared.iter().map(|p| p.name.as_str()).collect();
    let ours = |provider: &str| names.contains(&provider);
    let chain = match c.chains.iter().any(|ch| ch.members.iter().any(|m| ours(&m.provider))) {
        true => "no demo chain added: [[chain]] names demo targets".to_string(),
        false => format!(
            "chain {:?} added: {}",
            crate::run::demo::DEMO_CHAIN,
            crate::run::demo::demo_chain_targets().join(", ")
        ),
    };
    format!("--demo adds providers {} (simulated on loopback); {chain}", names.join(", "))
}

/// Opens and migrates the store; the demo's is seeded with a simulated week when empty.
async fn open_reading(c: &Config, demo: bool) -> anyhow::Result<Arc<dyn crate::io::store::Store>> {
    let store = open_migrated(c).await?;
    if demo {
        crate::run::demo::history::seed_if_empty(store.as_ref(), c, chrono::Utc::now())
            .await
            .context("demo history")?;
    }
    Ok(store)
}

/// One line for the whole provider list, instead of one per skipped provider. Under `--demo`
/// the simulated providers are named as what they are, each of them, so the line says what
/// will be probed.
fn log_providers(config: &Config, demo: bool) {
    let declared = if demo { crate::run::demo::declared_providers() } else { Vec::new() };
    let simulated = |name: &str| declared.iter().any(|p| p.name == name);
    let mut enabled: Vec<String> = config
        .providers
        .iter()
        .map(|p| match simulated(&p.name) {
            true => format!("{} (simulated)", p.name),
            false => p.name.clone(),
        })
        .collect();
    if enabled.is_empty() {
        enabled.push("none".into());
    }
    let skipped: Vec<String> = config.skipped.iter().map(|(name, var)| format!("{name} ({var} unset)")).collect();
    tracing::info!(enabled = %enabled.join(", "), skipped = %skipped.join(", "), "providers");
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config, demo, web_config_file } => run_daemon(config, demo, web_config_file).await,
        Command::Probe { config, target, json, demo, no_fail } => {
            let mut c = Config::load_with(config.as_deref(), &ProcessEnv, &demo_declared(demo))?;
            log_providers(&c, demo);
            // Kept alive until the round is done: the simulated providers answer from it.
            let running = match demo {
                true => {
                    let d = crate::run::demo::start_demo(rand::random()).await.context("--demo")?;
                    d.attach(&mut c);
                    Some(d)
                }
                false => None,
            };
            let result = probe_once(c, target, json, no_fail).await;
            drop(running);
            result
        }
        Command::Thresholds { config, format, model, provider, chain, sign, out, demo } => {
            let (c, _running) = load_reading(config.as_ref(), demo).await?;
            let signer = match (sign, &c.http.signing_key) {
                (false, _) => None,
                (true, Some(seed)) => crate::decide::signing::ExportSigner::from_seed(seed),
                (true, None) => anyhow::bail!(UsageError(
                    "--sign needs http.signing_key_env (or http.signing_key_file) naming where the key is".into()
                )),
            };
            let store = open_reading(&c, demo).await?;
            let doc = thresholds_document(&c, store.as_ref(), chrono::Utc::now()).await?;
            let doc = doc
                .filtered(&crate::decide::export::Filter { model, provider, chain })
                .map_err(|e| UsageError(format!("--chain: {e}")))?;
            let bytes = crate::decide::router_formats::render(&doc, format)?;
            let signature = signer.as_ref().map(|s| (s.sign(&bytes), s.public_key()));
            emit_export(&bytes, signature, out)
        }
        Command::Baselines { command: Some(BaselinesCommand::Adopt { target, config, url }), .. } => {
            adopt(config.as_ref(), &target, url).await
        }
        Command::Baselines { command: None, config, json, rebuild, all_regions, demo } => {
            let (c, _running) = load_reading(config.as_ref(), demo).await?;
            let store = open_reading(&c, demo).await?;
            baselines(&c, store, json, rebuild, all_regions).await
        }
        Command::Report { config, window, region, json, weekly, out, demo } => {
            let (c, _running) = load_reading(config.as_ref(), demo).await?;
            let region = region.unwrap_or_else(|| c.region.clone());
            let window = match weekly {
                true => None,
                false => Some(crate::config::parse_duration("--window", &window)?),
            };
            let store = open_reading(&c, demo).await?;
            match window {
                None => weekly_report(&c, store, &region, out.as_deref()).await,
                Some(window) => report(&c, store, window, &region, json).await,
            }
        }
        Command::Drill { config, chain, drop, duration, list, end, json } => {
            let c = load(config.as_ref())?;
            let desk = crate::io::drill_desk::DrillDesk::new(&c, open_migrated(&c).await?);
            let ask = DrillAsk { chain, drop, duration, list, end, json };
            drill(&desk, ask, chrono::Utc::now()).await
        }
        Command::AlertTest { config, channel } => alert_test(config, channel).await,
        Command::Alerts { command: AlertsCommand::Backtest { config, window, region, set, json, demo } } => {
            backtest(config, &window, region, &set, json, demo).await
        }
        Command::Migrate { config } => {
            let c = load(config.as_ref())?;
            let store = crate::io::store::open(secrecy::ExposeSecret::expose_secret(&c.storage.url)).await?;
            let applied = store.migrate().await.context("vigil migrate")?;
            let url = crate::config::redact_url(secrecy::ExposeSecret::expose_secret(&c.storage.url));
            if applied.is_empty() {
                println!("no migration pending: schema up to date ({url})");
            } else {
                println!("applied {} migrations to {url}:", applied.len());
                for m in &applied {
                    println!("  {} {}", m.version, m.description);
                }
            }
            Ok(())
        }
        Command::CheckConfig { config, demo, web_config_file } => {
            let env = FlagEnv { web_config_file };
            let c = Config::load_with(config.as_deref(), &env, &demo_declared(demo))?;
            log_providers(&c, demo);
            let mut notes = price_notes(&c);
            if demo {
                notes.push(demo_note(&c));
            }
            // What `run` refuses with exit 2 is refused here too, after the config is shown.
            print!("{}", c.redacted_toml_with(&notes));
            if Planned::all(&c.providers, &c.region).is_empty() {
                anyhow::bail!(crate::run::app::AppError::NothingToProbe);
            }
            check_storage_url(secrecy::ExposeSecret::expose_secret(&c.storage.url))?;
            Ok(())
        }
        Command::Completions { shell } => {
            let mut cmd = command();
            clap_complete::generate(shell, &mut cmd, "vigil", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { command: words, dir } => man(&words, dir.as_deref()),
    }
}

/// Runs the daemon until SIGTERM or Ctrl-C; SIGHUP and `POST /-/reload` re-read `path` and
/// apply it when it builds, keeping the running daemon otherwise (`run::daemon`).
async fn run_daemon(path: Option<PathBuf>, demo: bool, web_config_file: Option<PathBuf>) -> anyhow::Result<()> {
    let file = path.clone().or_else(|| Some(PathBuf::from("vigil.toml")));
    let env = FlagEnv { web_config_file };
    let settings = crate::run::daemon::Settings {
        load: Box::new(move || {
            let config = Config::load_with(path.as_deref(), &env, &demo_declared(demo))?;
            log_providers(&config, demo);
            Ok(config.without_document())
        }),
        file,
        demo,
    };
    match crate::run::daemon::run(settings).await {
        Ok(()) => Ok(()),
        Err(crate::run::daemon::DaemonError::Config(e)) => Err(e.into()),
        Err(crate::run::daemon::DaemonError::App(e)) => Err(anyhow::Error::from(e).context("vigil run")),
        Err(e) => Err(e.into()),
    }
}

/// The process environment, with the flags that stand for a config key set as that key's
/// `VIGIL_*` variable (the flag wins over the variable and the file, as an override does).
struct FlagEnv {
    /// `--web.config.file` → `VIGIL_HTTP_WEB_CONFIG_FILE`.
    web_config_file: Option<PathBuf>,
}

impl crate::config::Env for FlagEnv {
    fn get(&self, name: &str) -> Option<String> {
        match (name, &self.web_config_file) {
            ("VIGIL_HTTP_WEB_CONFIG_FILE", Some(file)) => Some(file.display().to_string()),
            _ => crate::config::Env::get(&ProcessEnv, name),
        }
    }
}

/// Some targets failed their probe (`vigil probe` exits 1 unless `--no-fail`).
#[derive(Debug, thiserror::Error)]
#[error("{failed} of {total} targets failed")]
pub struct ProbeFailed {
    /// Targets whose probe failed.
    pub failed: usize,
    /// Targets probed.
    pub total: usize,
}

async fn probe_once(config: Config, target: Option<String>, json: bool, no_fail: bool) -> anyhow::Result<()> {
    let plans = Planned::all(&config.providers, &config.region);
    if plans.is_empty() {
        anyhow::bail!(crate::run::app::AppError::NothingToProbe);
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
    let failed = samples.iter().filter(|s| s.outcome.is_failure()).count();
    if failed > 0 && !no_fail {
        anyhow::bail!(ProbeFailed { failed, total: samples.len() });
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
    let ms = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "—".into());
    let mut rows = vec![
        ["TARGET", "STATUS", "OUTCOME", "DNS", "CONNECT", "TLS", "TTFB", "TTFT", "TOK/S", "COST"].map(String::from)
    ];
    for s in samples {
        rows.push([
            s.target.id(),
            s.status.map(|c| c.to_string()).unwrap_or_else(|| "—".into()),
            s.outcome.to_string(),
            ms(s.dns_ms),
            ms(s.connect_ms),
            ms(s.tls_ms),
            ms(s.ttfb_ms),
            ms(s.ttft_ms),
            s.tokens_per_s.map(|v| format!("{v:.0}")).unwrap_or_else(|| "—".into()),
            s.cost_usd.map(|v| format!("${v:.6}")).unwrap_or_else(|| "—".into()),
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
    for s in &failed {
        out.push_str(&format!("{}: {}\n", s.target.id(), s.error.as_deref().unwrap_or(s.outcome.as_str())));
    }
    // Why a cell can be empty, once, under the table.
    if out.contains('—') {
        out.push_str(
            "— not measured: no TLS on plain http, no tokens or price for a plain HTTP target, \
             or the probe failed before that phase (reason above)\n",
        );
    }
    out
}

/// Reads the window ending at `until` from `store` (samples of `region`, or every region when
/// `None`; their breaker transitions, unless `breaker` replays the breaker itself; the baseline
/// rollups of the window before) and replays it.
async fn backtest_from_store(
    store: &dyn crate::io::store::Store,
    (rules, breaker): (crate::decide::alert::settings::RuleConfig, Option<crate::decide::breaker::BreakerSettings>),
    baseline: &crate::config::BaselineConfig,
    interval: std::time::Duration,
    region: Option<&str>,
    window: std::time::Duration,
    until: chrono::DateTime<chrono::Utc>,
) -> Result<crate::decide::alert::backtest::BacktestReport, crate::io::store::StoreError> {
    let span = |d: std::time::Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::days(7));
    let since = until - span(window);
    let q = crate::io::store::SampleQuery {
        region: region.map(str::to_string),
        since: Some(since),
        ..crate::io::store::SampleQuery::default()
    };
    let samples = store.samples(&q).await?;
    let transitions = store.transitions_between(region, since, until).await?;
    let prior = store.rollups_between(region, since - span(baseline.window), Some(since)).await?;
    Ok(crate::decide::alert::backtest::replay(rules, baseline, interval, &prior, &samples, &transitions, breaker))
}

/// Writes an export to `out` (atomically, with its signature beside it in `OUT.sig`) or to
/// stdout (the signature and public key on stderr).
fn emit_export(bytes: &[u8], signature: Option<(String, String)>, out: Option<PathBuf>) -> anyhow::Result<()> {
    match out {
        Some(path) => {
            write_atomically(&path, bytes).with_context(|| format!("--out {}", path.display()))?;
            if let Some((sig, key)) = signature {
                let mut sig_path = path.clone().into_os_string();
                sig_path.push(".sig");
                write_atomically(std::path::Path::new(&sig_path), format!("{sig}\n").as_bytes())
                    .context("writing the signature")?;
                eprintln!("signed with public key {key}");
            }
            Ok(())
        }
        None => {
            std::io::Write::write_all(&mut std::io::stdout(), bytes)?;
            if let Some((sig, key)) = signature {
                eprintln!("{}: {sig}", crate::decide::signing::SIGNATURE_HEADER);
                eprintln!("{}: {key}", crate::decide::signing::KEY_HEADER);
            }
            Ok(())
        }
    }
}

/// `vigil alert-test`: one test notification through every configured channel (or one).
async fn alert_test(config: Option<PathBuf>, channel: Option<String>) -> anyhow::Result<()> {
    let c = load(config.as_ref())?;
    let channels =
        crate::io::notify::channels::build_notifiers(&c.alerts, crate::io::notify::notifier::DEFAULT_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("{}: {}", e.channel, e.message))?;
    let results =
        crate::io::notify::channels::alert_test(&channels, channel.as_deref(), &c.region, chrono::Utc::now()).await;
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

/// `vigil alerts backtest`: replays the stored window through the alert rules (with `--set`
/// overrides) and prints what would have paged.
async fn backtest(
    config: Option<PathBuf>,
    window: &str,
    region: Option<String>,
    set: &[String],
    json: bool,
    demo: bool,
) -> anyhow::Result<()> {
    let (c, _running) = load_reading(config.as_ref(), demo).await?;
    let window = crate::config::parse_duration("--window", window)?;
    let mut rules = crate::decide::alert::settings::RuleConfig::from_config(&c);
    let failover = crate::decide::health::Failover::of(&c.baseline);
    let mut breaker = crate::decide::breaker::BreakerSettings::from_config(&c.breaker, failover);
    // A `breaker.*` key replays the breaker from the samples with it (k of n included).
    let replay_breaker = crate::decide::alert::backtest::set_all(&mut rules, &mut breaker, set).map_err(UsageError)?;
    let region = region.unwrap_or_else(|| c.region.clone());
    // Opening a SQLite file creates it: a store that does not exist has nothing to replay, and
    // must not be left behind (with its -wal and -shm) where the command was run.
    let missing = (!demo).then(|| missing_sqlite_file(secrecy::ExposeSecret::expose_secret(&c.storage.url))).flatten();
    if let Some(missing) = missing {
        anyhow::bail!(NoData(format!(
            "{} does not exist: no samples to replay (`vigil run` stores them; `--demo` replays the demo's simulated week)",
            missing.display()
        )));
    }
    let store = open_reading(&c, demo).await?;
    let started = std::time::Instant::now();
    let report = backtest_from_store(
        store.as_ref(),
        (rules, replay_breaker.then_some(breaker)),
        &c.baseline,
        c.probe.interval,
        (region != "all").then_some(region.as_str()),
        window,
        chrono::Utc::now(),
    )
    .await?;
    if report.samples == 0 {
        anyhow::bail!(NoData(format!(
            "no samples of region {region} in the last {} in {}: nothing to replay (`--region all` for every region; `--demo` replays the demo's simulated week)",
            humantime::format_duration(window),
            crate::config::redact_url(secrecy::ExposeSecret::expose_secret(&c.storage.url))
        )));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_table());
    }
    eprintln!("replayed {} samples in {:.2} s", report.samples, started.elapsed().as_secs_f64());
    Ok(())
}

/// A reading command found nothing to read (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoData(pub String);

/// The file of a `sqlite:` URL when it does not exist yet (`None` for PostgreSQL, in-memory
/// databases and files that exist).
fn missing_sqlite_file(url: &str) -> Option<PathBuf> {
    use std::str::FromStr;
    if !url.starts_with("sqlite:") || url.contains(":memory:") || url.contains("mode=memory") {
        return None;
    }
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).ok()?;
    let file = options.get_filename();
    (!file.as_os_str().is_empty() && !file.exists()).then(|| file.to_path_buf())
}

/// `check-config`'s price lines: each configured model's price and where it comes from.
pub fn price_notes(c: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    for p in c.providers.iter() {
        for m in &p.models {
            if let Some((price, source)) = crate::decide::price_table::price_of(p, m, None, None) {
                notes.push(format!(
                    "price {}/{m}: ${} in, ${} out per 1M tokens ({})",
                    p.name,
                    price.input_per_mtok,
                    price.output_per_mtok,
                    source.label()
                ));
            }
        }
    }
    notes
}
