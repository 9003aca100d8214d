//! Wiring: `App::build(Config)` opens the listener, store and prober; `run_until_stopped`
//! runs scheduler, pipeline and HTTP until the shutdown token fires, then drains. A reload
//! builds in two steps: `App::prepare` does everything that can fail (listener, store, data
//! directory, alert channels) while the old daemon still runs, `Prepared::start` the rest once
//! it drained (the spools and the stored state it left).

use crate::config::Config;
use crate::decide::roster::{LeaderGate, Timing};
use crate::decide::snapshot::SharedSnapshot;
use crate::io::http::api::Feed;
use crate::io::http::reload::ReloadSender;
use crate::io::http::status_page::StatusPage;
use crate::io::http::{router, HttpState, SchedulerRunning};
use crate::io::metrics::Metrics;
use crate::io::probe::{Planned, Prober};
use crate::io::store::link::{self, ContextPlan, Link, CALL_TIMEOUT};
use crate::io::store::writer::WRITE_TIMEOUT;
use crate::io::store::{self, Spool, StateStore, Store, StoreError, Writer};
use crate::run::monitor::Monitor;
use crate::run::pipeline::{Pipeline, Stages};
use crate::run::replicas::{ReplicaError, Replicas};
use crate::run::scheduler::{ProbeThread, Scheduler, SchedulerError};
use crate::run::watchdog::{finish, first_death, Task};
use crate::vocab::check::SharedChecks;
use crate::vocab::ready::{Liveness, ReadyCheck};
use crate::vocab::records::StateJson;
use chrono::Utc;
use secrecy::ExposeSecret;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Failures that stop the daemon.
#[derive(Debug, Error)]
pub enum AppError {
    /// Nothing is configured to probe.
    #[error("nothing to probe: no provider has its key set (set e.g. OPENROUTER_API_KEY, or run with --demo)")]
    NothingToProbe,
    /// The HTTP listener could not be bound.
    #[error("http.listen {addr}: {source}")]
    Bind {
        /// Address from config.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics registry refused a metric (a programming error).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The scheduler failed.
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// Serving HTTP failed.
    #[error("http server: {0}")]
    Serve(std::io::Error),
    /// Storage could not be opened or migrated (an unreachable database is not this: it spools).
    #[error("storage.url: {0}")]
    Store(#[from] StoreError),
    /// The spool directory could not be opened.
    #[error("storage.data_dir: {0}")]
    Spool(#[from] store::SpoolError),
    /// The data directory cannot take the spools' files (not a directory, read-only, no permission).
    #[error("storage.data_dir: {path}: {source}")]
    DataDir {
        /// The directory that failed.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An alert channel could not be set up.
    #[error("alerts: {0}")]
    Alerts(String),
    /// The demo providers could not start.
    #[error("--demo: {0}")]
    Demo(std::io::Error),
    /// Replicas of this region cannot share this store (another instance runs on the same SQLite file).
    #[error("storage.url: {0}")]
    Replicas(String),
    /// A task of the daemon died while running (the process exits non-zero so it is restarted).
    #[error("{task} died ({why}); vigil stopped so its service manager restarts it")]
    TaskDied {
        /// Which task.
        task: &'static str,
        /// Its panic message, or that it returned.
        why: String,
    },
}

impl AppError {
    /// The key at fault and why, for `new configuration refused: <key>: <why>`.
    pub fn refusal(&self) -> (String, String) {
        let (key, why) = match self {
            AppError::NothingToProbe => {
                ("provider", "nothing to probe: no provider is configured with its key set".to_string())
            }
            AppError::Bind { addr, source } => ("http.listen", format!("{addr}: {source}")),
            AppError::Store(e) => ("storage.url", e.to_string()),
            AppError::Replicas(e) => ("storage.url", e.clone()),
            AppError::Spool(e) => ("storage.data_dir", e.to_string()),
            AppError::DataDir { path, source } => ("storage.data_dir", format!("{}: {source}", path.display())),
            AppError::Alerts(e) => ("alerts", e.clone()),
            AppError::Demo(e) => ("--demo", e.to_string()),
            other => ("daemon", other.to_string()),
        };
        (key.to_string(), why)
    }
}

/// How long a stop may take in all: probes in flight get [`PROBE_DRAIN`], storing what is left
/// (or spooling it) the rest. Under systemd's and Kubernetes' grace periods (45 s in deploy/).
pub const STOP_WITHIN: Duration = Duration::from_secs(10);
/// How long in-flight probes may finish during a stop before they are cut short.
pub const PROBE_DRAIN: Duration = Duration::from_secs(6);
/// What is left of [`STOP_WITHIN`] after the probes.
const AFTER_DRAIN: Duration = Duration::from_secs(4);

/// Opens the configured store and applies migrations. An unreachable database is tolerated
/// (returned as `Ok(false)`): the daemon starts, spools, and migrates once it is back.
pub async fn open_store(config: &Config) -> Result<(Arc<dyn Store>, bool), AppError> {
    let (store, unavailable) = open_store_or_why(config).await?;
    Ok((store, unavailable.is_none()))
}

/// [`open_store`], saying why the database could not be used yet.
async fn open_store_or_why(config: &Config) -> Result<(Arc<dyn Store>, Option<String>), AppError> {
    let store = store::open(config.storage.url.expose_secret()).await?;
    match store.migrate().await {
        Ok(applied) => {
            if !applied.is_empty() {
                let versions: Vec<String> = applied.iter().map(|m| m.version.to_string()).collect();
                tracing::info!(versions = %versions.join(", "), "storage migrations applied");
            }
            Ok((store, None))
        }
        Err(StoreError::Unavailable(e)) => {
            tracing::warn!(error = %e, "storage unreachable at start; probing anyway, samples are spooled until it returns");
            Ok((store, Some(e)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Extra set-up the command line (or a test) chooses.
#[derive(Default)]
pub struct AppOptions {
    /// Extra TLS roots the prober trusts (tests' self-signed stand-ins).
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Add the simulated providers on loopback (`vigil run --demo`).
    pub demo: bool,
    /// With `demo`: start this far into the misbehaving host's schedule (tests; zero otherwise).
    pub demo_elapsed: Duration,
    /// Serve on this listener instead of binding `http.listen` (a reload keeping its address).
    pub listener: Option<std::net::TcpListener>,
    /// Where `POST /-/reload` sends its requests (the process's reload controller, if any).
    pub reload: Option<ReloadSender>,
    /// The process's slots for what the writer and the link still hold in memory at a stop, so
    /// a reload hands it on (the process's reload controller keeps them; none elsewhere).
    pub carry: Option<Carry>,
}

/// What one daemon's sample writer and storage link still hold at their stop (the database and
/// the spool's disk both refusing), for the daemon a reload starts next (see `io/store/carry`).
#[derive(Clone, Default)]
pub struct Carry {
    /// The writer's samples.
    pub samples: store::carry::Slot<crate::vocab::sample::Sample>,
    /// The link's ordered records.
    pub records: store::carry::Slot<crate::io::store::link::Record>,
}

impl Carry {
    /// At the process's exit: reports what is left as lost; how many samples and records.
    pub fn give_up(&self) -> (usize, usize) {
        (self.samples.give_up("samples"), self.records.give_up("records"))
    }
}

/// The storage link's records at a start: the record spool an earlier run left, and what the
/// previous daemon of this process still held in memory at its stop (newer than the spool's).
pub(crate) struct LinkRecords {
    spool: store::spool::SpoolOf<crate::io::store::link::Record>,
    carried: Option<store::carry::Slot<crate::io::store::link::Record>>,
}

/// A daemon built as far as it can be while the one it replaces still runs: listener bound,
/// store opened and migrated, data directory checked, alert channels built.
/// [`Prepared::start`] finishes it.
pub struct Prepared {
    config: Config,
    listener: TcpListener,
    metrics: Arc<Metrics>,
    scheduler: Scheduler,
    store: Arc<dyn Store>,
    /// Why the database could not be used at open (it spools until it can).
    unavailable: Option<String>,
    notifiers: Vec<Arc<dyn crate::io::notify::notifier::Notifier>>,
    published: (crate::io::probe::PublishedPrices, Vec<crate::vocab::target::Target>),
    demo: Option<crate::run::demo::Demo>,
    side: SideRunners,
    reload: Option<ReloadSender>,
    carry: Option<Carry>,
}

/// A built, not yet running, daemon.
pub struct App {
    config: Config,
    listener: TcpListener,
    metrics: Arc<Metrics>,
    scheduler: Scheduler,
    store: Arc<dyn Store>,
    migrated: bool,
    writer: Writer,
    monitor: Monitor,
    /// Whether the breakers and drills were restored at start ([`Monitor::load_state`]).
    restored: bool,
    /// The prober's table of OpenRouter's published prices and the targets it prices.
    published: (crate::io::probe::PublishedPrices, Vec<crate::vocab::target::Target>),
    /// Keeps the demo providers' server alive as long as the app.
    _demo: Option<crate::run::demo::Demo>,
    /// The canary and the golden checks, when configured.
    side: SideRunners,
    /// The alert channels, built.
    notifiers: Vec<Arc<dyn crate::io::notify::notifier::Notifier>>,
    /// The spool of breaker transitions and other records, and what a reload carried over.
    records: LinkRecords,
    reload: Option<ReloadSender>,
    /// This instance among the region's members (replicas).
    replicas: Replicas,
}

impl App {
    /// Binds the listener and prepares every stage.
    pub async fn build(config: Config, opts: AppOptions) -> Result<App, AppError> {
        App::prepare(config, opts).await?.start().await
    }

    /// Everything of [`App::build`] that can fail before the running daemon must stop: the
    /// listener (bound, or the one given), the store (opened and migrated; an unreachable
    /// database is tolerated as at start), the data directory (it takes new files), the alert
    /// channels.
    pub async fn prepare(mut config: Config, opts: AppOptions) -> Result<Prepared, AppError> {
        let demo = if opts.demo {
            crate::run::demo::use_demo_cadence(&mut config);
            crate::run::demo::use_demo_database(&mut config).log(&config);
            let demo =
                crate::run::demo::start_demo_at(rand::random(), opts.demo_elapsed).await.map_err(AppError::Demo)?;
            tracing::info!(addr = %demo.standin.addr(), providers = demo.providers.len(), "demo providers on loopback");
            demo.attach(&mut config);
            Some(demo)
        } else {
            None
        };
        let plans = Planned::all(&config.providers, &config.region);
        if plans.is_empty() {
            return Err(AppError::NothingToProbe);
        }
        let listener = listener_for(&config, opts.listener).await?;
        let metrics = Arc::new(Metrics::with_detail(&config.region, config.metrics.detail)?);
        metrics.set_thresholds(&config);
        let prober = Prober::new(config.probe.clone(), &opts.extra_roots);
        let targets: Vec<_> = plans.iter().map(|p| p.target.clone()).collect();
        let published = (prober.published_prices(), targets.clone());
        crate::io::feeds::prices::publish_cached(&config.providers, &targets, &config.storage.data_dir, &published.0);
        let canary = config
            .canary
            .enabled
            .then(|| {
                crate::run::canary_runner::CanaryRunner::new(plans.clone(), prober.clone(), config.canary.clone())
                    .starting_within(config.probe.interval)
            })
            .filter(|c| !c.is_empty());
        let golden = Some(
            crate::run::check_runner::CheckRunner::new(&plans, prober.clone(), &config.capabilities)
                .starting_within(config.probe.interval),
        )
        .filter(|g| !g.is_empty());
        let workload = Some(
            crate::run::workload_runner::WorkloadRunner::new(&plans, &prober, &config.workloads)
                .starting_within(config.probe.interval),
        )
        .filter(|w| !w.is_empty());
        let scheduler = Scheduler::new(plans, prober, config.probe.interval, config.probe.concurrency, metrics.clone());
        let notifiers = build_notifiers(&config, demo.is_some())?;
        check_data_dir(&config.storage.data_dir)?;
        let (store, unavailable) = open_store_or_why(&config).await?;
        if demo.is_some() && unavailable.is_none() {
            crate::run::demo::history::seed_if_empty(store.as_ref(), &config, Utc::now()).await?;
        }
        Ok(Prepared {
            config,
            listener,
            metrics,
            scheduler,
            store,
            unavailable,
            notifiers,
            published,
            demo,
            side: SideRunners { canary, golden, workload },
            reload: opts.reload,
            carry: opts.carry,
        })
    }

    /// The metrics registry (tests read it after shutdown).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The address the HTTP server listens on (port 0 in config picks a free one).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Runs until `shutdown` fires, then drains in-flight probes and stops within [`STOP_WITHIN`].
    /// A task that dies before (a panic, or a loop that returned) stops the daemon the same way
    /// and is returned as [`AppError::TaskDied`]: a monitor is whole or not running.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), AppError> {
        let App {
            config,
            listener,
            metrics,
            scheduler,
            store,
            migrated,
            writer,
            monitor,
            restored,
            published,
            _demo,
            side,
            notifiers,
            records,
            reload,
            replicas,
        } = self;
        let (roster, gate) = (replicas.roster(), LeaderGate::of(replicas.roster()));
        metrics.follow_roster(roster.clone());
        let running = Arc::new(SchedulerRunning::default());
        let liveness =
            Arc::new(Liveness::new(Utc::now(), config.probe.interval, config.storage.batch_age + WRITE_TIMEOUT));
        let writer = writer.with_liveness(liveness.clone()).with_stop_signal(shutdown.clone());
        let health = writer.health();
        let outbox = build_outbox(&config, &store, &metrics, notifiers, gate.clone());
        let model_notices = crate::io::feeds::model_lists::SharedModelNotices::default();
        let alerting =
            restore_alerting(&config, store.as_ref(), &records, outbox.channels(), model_notices.clone()).await;
        let (link, link_handle) = storage_link(&config, &store, records, &alerting);
        let link_health = link.health();
        let snapshot = SharedSnapshot::default();
        let (scheduler, planner) = plan_probes(&config, scheduler, roster.clone());
        let provider_status = crate::vocab::provider_status::SharedProviderStatus::default();
        let (canary_shown, golden_shown) = (crate::vocab::canary::SharedCanary::default(), SharedChecks::default());
        let (adopt_tx, adopt_rx) = mpsc::channel(16);
        // What `/readyz` asks, and systemd's READY=1 waits for.
        let integrity = Arc::new(store::IntegrityCheck(store.clone()));
        let checks: Vec<Arc<dyn ReadyCheck>> =
            vec![running.clone(), liveness.clone(), health.clone(), link_health.clone(), integrity];
        let app = router(HttpState {
            checks: checks.clone(),
            writer: Some(health.clone()),
            link: Some(link_health),
            snapshot: snapshot.clone(),
            provider_status: provider_status.clone(),
            canary: canary_shown.clone(),
            golden: golden_shown.clone(),
            reload,
            adopt: Some(adopt_tx),
            ..http_state(&config, &metrics, &store)
        });
        let server = serve_http(listener, app, &config, &shutdown);
        // The writer and the link stop only after the pipeline has handed over its last sample
        // and record (they end when their channels close).
        let stops: [CancellationToken; 3] = Default::default();
        let [writer_stop, link_stop, outbox_stop] = stops.clone();
        let (store_tx, store_rx) = mpsc::channel(16_384);
        let (tx, rx) = mpsc::channel(16_384);
        let (side_runs, canary_rx, golden_rx, workload_rx) = side.start(&gate, &shutdown);
        let (peers_tx, peers_rx) = mpsc::channel(16_384);
        let pipeline = Pipeline::new(Stages {
            metrics: metrics.clone(),
            writer: store_tx,
            monitor,
            restored,
            link: link_handle,
            snapshot,
            liveness: liveness.clone(),
            alerts: alerting,
            provider_status: provider_status.clone(),
            planner,
            canary: canary_rx,
            canary_shown: canary_shown.clone(),
            golden: golden_rx,
            golden_shown,
            workloads: workload_rx,
            adopt: adopt_rx,
            roster: Some(roster),
            peers: peers_rx,
        });
        let mut tasks = vec![
            Task::spawn("pipeline", pipeline.run(rx)),
            Task::spawn("sample writer", writer.run(store_rx, writer_stop.clone())),
            Task::spawn("storage link", link.with_stop_signal(shutdown.clone()).run(link_stop.clone())),
            {
                let (outbox, stop) = (outbox.clone(), outbox_stop.clone());
                Task::spawn("alert delivery", async move { outbox.run(stop).await })
            },
            Task::spawn("replicas", replicas.run(peers_tx, shutdown.clone())),
        ];
        let shared = crate::run::side_tasks::Shared {
            store: store.clone(),
            metrics: metrics.clone(),
            migrated,
            provider_status,
            model_notices,
            published,
            gate,
        };
        tasks.extend(crate::run::side_tasks::start(&config, shared, &shutdown));
        tasks.extend(side_runs);
        tasks.extend(systemd_notifier(checks, liveness, &shutdown));
        // Probes still in flight when the drain budget is spent are cut short: a gap, not a hang.
        let abort = scheduler.abort_token();
        let drain_timer = abort_after_drain(shutdown.clone(), abort.clone());
        tracing::info!(region = %config.region, targets = scheduler.len(), "vigil running");
        running.0.store(true, Ordering::Release);
        let probes = ProbeThread::start()?;
        let (result, died) = tokio::select! {
            r = probes.run(scheduler, tx, shutdown.clone()) => (r, None),
            d = first_death(&mut tasks, &shutdown) => (Ok(()), Some(d)),
        };
        running.0.store(false, Ordering::Release);
        wind_down(tasks, stops, died, (&shutdown, &abort, drain_timer), &health, server).await?;
        result?;
        tracing::info!("stopped cleanly");
        Ok(())
    }
}

impl Prepared {
    /// Finishes the build once no other daemon runs on this data directory and store: opens
    /// the spools (replaying what an earlier run left) and loads the stored baselines and breakers.
    pub async fn start(self) -> Result<App, AppError> {
        let Prepared {
            config,
            listener,
            metrics,
            scheduler,
            store,
            unavailable,
            notifiers,
            published,
            demo,
            side,
            reload,
            carry,
        } = self;
        let spool = Spool::open(config.storage.data_dir.join("spool"), config.storage.spool_max_bytes)?;
        if !spool.is_empty() {
            tracing::info!(spooled = spool.len(), "samples left in the spool by an earlier run will be replayed");
        }
        let records =
            store::spool::SpoolOf::open(config.storage.data_dir.join("spool-records"), config.storage.spool_max_bytes)?;
        let mut writer = Writer::new(store.clone(), spool, config.storage.batch_size, config.storage.batch_age);
        if let Some(carry) = &carry {
            writer = writer.with_carry(carry.samples.clone());
        }
        let records = LinkRecords { spool: records, carried: carry.map(|c| c.records) };
        if let Some(why) = &unavailable {
            // `/readyz` says why from the first moment, not only after the first failed write.
            writer.health().failed(format!("storage unavailable at start: {why}"));
        }
        let migrated = unavailable.is_none();
        let mut monitor = Monitor::new(&config, published.1.clone(), Utc::now());
        monitor.price_with(published.0.clone());
        // The week of rollups is read through the storage link once the pipeline runs: probes
        // start within a second whatever the history's size (about 50 s at 10,000 targets).
        // The state's reads and joining the region (a read of its members, and on PostgreSQL
        // the first heartbeat) go side by side.
        let load = async {
            match migrated {
                true => match monitor.load_state(store.as_ref(), Utc::now()).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "stored breakers not loaded; retried with the baselines");
                        false
                    }
                },
                false => false,
            }
        };
        let (restored, replicas) = tokio::join!(load, join_region(&config, store.clone(), migrated, metrics.clone()));
        let replicas = replicas?;
        Ok(App {
            config,
            listener,
            metrics,
            scheduler,
            store,
            migrated,
            writer,
            monitor,
            restored,
            side,
            published,
            _demo: demo,
            notifiers,
            records,
            reload,
            replicas,
        })
    }
}

/// The storage link, reading what the pipeline shows of other regions and the watched credit.
fn storage_link(
    config: &Config,
    store: &Arc<dyn Store>,
    records: LinkRecords,
    alerting: &crate::run::pipeline::Alerting,
) -> (Link, crate::io::store::link::LinkHandle) {
    let plan = ContextPlan {
        region: config.region.clone(),
        every: config.probe.interval,
        credit_providers: alerting.credit_providers(),
    };
    let (link, handle) = Link::new(store.clone(), records.spool, Some(plan));
    match records.carried {
        Some(carried) => (link.with_carry(carried), handle),
        None => (link, handle),
    }
}

/// Cost-aware adaptive probing (the pipeline plans, the scheduler follows) over this replica's
/// share of the region.
fn plan_probes(
    config: &Config,
    scheduler: Scheduler,
    roster: crate::decide::roster::SharedRoster,
) -> (Scheduler, crate::decide::adaptive::Planner) {
    let probe_plan = crate::decide::adaptive::SharedPlan::default();
    let planner = planner_for(config, scheduler.targets(), probe_plan.clone());
    let scheduler = scheduler.with_plan(probe_plan, planner.settings().burst()).with_roster(roster);
    (scheduler, planner)
}

/// Joins the region's members: alone while storage is unreachable at start (it beats once
/// storage answers); refused when another live instance of the region shares an SQLite file.
async fn join_region(
    config: &Config,
    store: Arc<dyn Store>,
    migrated: bool,
    metrics: Arc<Metrics>,
) -> Result<Replicas, AppError> {
    let interval = config.probe.interval;
    // A peer's sample reaches storage up to a probe timeout and a write batch after its start.
    let window = config.probe.timeout + config.storage.batch_age + Timing::for_interval(interval).beat * 2;
    let alone = |store| Replicas::alone(store, &config.region, interval, window, metrics.clone());
    if !migrated {
        return Ok(alone(store));
    }
    let sqlite = config.storage.url.expose_secret().starts_with("sqlite:");
    match Replicas::join(store.clone(), sqlite, &config.region, interval, window, metrics.clone()).await {
        Ok(r) => Ok(r),
        Err(e @ ReplicaError::SqliteShared { .. }) => Err(AppError::Replicas(e.to_string())),
        Err(e) => {
            tracing::warn!(region = %config.region, error = %e, "region's members not read at start; probing every target until they are");
            Ok(alone(store))
        }
    }
}

/// The canary, the golden checks (with the capability probes) and the long-prompt probes: each runs on its own clock
/// and concurrency, and its runs reach the pipeline on their own channel (nobody sends on a
/// channel whose runner is off).
type SideRuns = (
    Vec<Task>,
    mpsc::Receiver<crate::vocab::canary::CanaryRun>,
    mpsc::Receiver<crate::vocab::check::CheckRun>,
    mpsc::Receiver<crate::vocab::workload::WorkloadRun>,
);

/// The runners apart from the regular probes, built with the daemon.
struct SideRunners {
    /// The model-change canary, when `probe.canary.enabled`.
    canary: Option<crate::run::canary_runner::CanaryRunner>,
    /// The golden checks and capability probes, when any is configured.
    golden: Option<crate::run::check_runner::CheckRunner>,
    /// The long-prompt probes, when any `[[probe.workload]]` applies to a target.
    workload: Option<crate::run::workload_runner::WorkloadRunner>,
}

impl SideRunners {
    /// Starts each runner that is on; returns their tasks and the ends of their channels.
    fn start(self, gate: &LeaderGate, shutdown: &CancellationToken) -> SideRuns {
        let (canary_tx, canary_rx) = mpsc::channel(1024);
        let (golden_tx, golden_rx) = mpsc::channel(1024);
        let mut tasks = Vec::new();
        if let Some(canary) = self.canary.map(|c| c.led_by(gate.clone())) {
            tasks.push(Task::spawn_optional("canary", canary.run(canary_tx, shutdown.clone())));
        }
        if let Some(golden) = self.golden.map(|g| g.led_by(gate.clone())) {
            tasks.push(Task::spawn_optional("golden checks", golden.run(golden_tx, shutdown.clone())));
        }
        let (workload_tx, workload_rx) = mpsc::channel(1024);
        if let Some(workload) = self.workload.map(|w| w.led_by(gate.clone())) {
            tasks.push(Task::spawn_optional("long-prompt probes", workload.run(workload_tx, shutdown.clone())));
        }
        (tasks, canary_rx, golden_rx, workload_rx)
    }
}

/// Under systemd (`Type=notify`): the task that tells it READY=1 when `checks` (those of
/// `/readyz`) first pass and WATCHDOG=1 while the road beats; none without `NOTIFY_SOCKET`.
fn systemd_notifier(
    checks: Vec<Arc<dyn ReadyCheck>>,
    liveness: Arc<Liveness>,
    shutdown: &CancellationToken,
) -> Option<Task> {
    let systemd = crate::io::systemd::Systemd::from_env()?;
    let notify = crate::run::watchdog::notify_systemd(systemd, checks, liveness, shutdown.clone());
    Some(Task::spawn_optional("systemd notifier", notify))
}

/// The listener to serve on: `given` (a reload keeping its address), else `http.listen` bound.
async fn listener_for(config: &Config, given: Option<std::net::TcpListener>) -> Result<TcpListener, AppError> {
    let addr = config.http.listen;
    let bound = match given {
        Some(l) => l.set_nonblocking(true).and_then(|()| TcpListener::from_std(l)),
        None => TcpListener::bind(addr).await,
    };
    bound.map_err(|source| AppError::Bind { addr, source })
}

/// The data directory must take the spools' files: each spool directory is created if missing
/// and a file is created and removed in it. A full disk passes (vigil runs and spools what it
/// can); a regular file, a read-only file system or a missing permission does not.
fn check_data_dir(dir: &std::path::Path) -> Result<(), AppError> {
    for sub in ["spool", "spool-records"] {
        let path = dir.join(sub);
        std::fs::create_dir_all(&path).map_err(|source| AppError::DataDir { path: path.clone(), source })?;
        let probe = path.join(format!(".write-check-{}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
            }
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {}
            Err(source) => return Err(AppError::DataDir { path, source }),
        }
    }
    Ok(())
}

/// The alert stage as the last run left it: the newest state the previous daemon of this
/// process still held in memory (newer than anything spooled), else the newest the record spool
/// holds (written before the stored one can be), else the stored state when storage answers in
/// time; otherwise a stage that reads it through the link before it judges or saves anything.
async fn restore_alerting(
    config: &Config,
    store: &dyn StateStore,
    records: &LinkRecords,
    channels: Vec<String>,
    model_notices: crate::io::feeds::model_lists::SharedModelNotices,
) -> crate::run::pipeline::Alerting {
    let region = &config.region;
    let carried = records.carried.as_ref().and_then(|c| c.newest(|r| link::alert_state_of(r, region).cloned()));
    let saved = if let Some(state) = carried {
        tracing::info!(%region, "alert state restored from what the previous daemon held in memory (newer than the spooled or stored one)");
        Ok(Some(state))
    } else if let Some(state) = link::newest_spooled_alert_state(&records.spool, region) {
        tracing::info!(%region, "alert state restored from the record spool (newer than the stored one)");
        Ok(Some(state))
    } else {
        load_alert_state(store, region).await
    };
    let engine = crate::decide::alert::rules::AlertEngine::restore(
        crate::decide::alert::settings::RuleConfig::from_config(config),
        saved.as_ref().ok().and_then(Option::as_ref),
    );
    let alerting = crate::run::pipeline::Alerting::new(config, engine, channels, model_notices);
    match saved {
        Ok(_) => alerting,
        Err(()) => alerting.awaiting_saved_state(),
    }
}

/// The adaptive planner for `targets`, on `[probe]` and `[probe.adaptive]` and the providers'
/// prices, publishing into `shared`.
pub(crate) fn planner_for(
    config: &Config,
    targets: Vec<crate::vocab::target::Target>,
    shared: crate::decide::adaptive::SharedPlan,
) -> crate::decide::adaptive::Planner {
    let settings = crate::decide::adaptive::settings_of(&config.probe, &config.adaptive);
    let reserved = crate::decide::adaptive::workloads_per_day(&config.providers, &config.workloads, &targets);
    crate::decide::adaptive::Planner::new(settings, &config.providers, config.probe.max_tokens, targets, shared)
        .reserving(reserved)
}

/// What the status page reads of the config.
pub(crate) fn page_settings(config: &Config) -> crate::io::http::status_page::PageSettings {
    crate::io::http::status_page::PageSettings {
        region: config.region.clone(),
        min_samples: config.baseline.min_samples_p95,
        window: config.baseline.window,
        interval: config.probe.interval,
        credit: config.credit_watch().map(|(p, b)| (p.name.clone(), b.min_usd)).collect(),
    }
}

/// Serves the HTTP API on `listener` until `shutdown`, with limits sized for the probes' sockets,
/// behind the web config's TLS, basic auth and headers when one is given (`http.web_config_file`).
fn serve_http(
    listener: TcpListener,
    app: axum::Router,
    config: &Config,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let web = config.http.web.as_ref();
    let app = crate::io::http::web::guard(app, web, config.http.api_token.clone());
    let tls = web.and_then(|w| w.tls.clone());
    let limits = crate::io::http::server::ServerLimits::for_probes(config.probe.concurrency);
    tokio::spawn(crate::io::http::server::serve(listener, app, shutdown.clone(), limits, tls))
}

/// Probes still in flight when the drain budget after `shutdown` is spent are cut short: a gap,
/// not a hang.
fn abort_after_drain(shutdown: CancellationToken, abort: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        shutdown.cancelled().await;
        tokio::time::sleep(PROBE_DRAIN).await;
        abort.cancel();
    })
}

/// Stops the daemon within its bound once the probes ended or a task died: the tasks in order,
/// then the HTTP server; a dead task is the error returned.
async fn wind_down(
    mut tasks: Vec<Task>,
    stops: [CancellationToken; 3],
    died: Option<crate::run::watchdog::Died>,
    probes: (&CancellationToken, &CancellationToken, tokio::task::JoinHandle<()>),
    health: &crate::io::store::WriterHealth,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
) -> Result<(), AppError> {
    let (shutdown, abort, drain_timer) = probes;
    if let Some(d) = &died {
        tracing::error!(task = d.task, why = %d.why, "a task of the daemon died; stopping so the service manager restarts vigil");
        shutdown.cancel();
        abort.cancel();
    }
    shutdown.cancel();
    let deadline = tokio::time::Instant::now() + AFTER_DRAIN;
    stop_in_order(&mut tasks, deadline, stops).await;
    drain_timer.abort();
    tracing::info!(written = health.written(), spooled = health.spooled(), "storage flushed");
    match tokio::time::timeout_at(deadline, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(AppError::Serve(e)),
        Ok(Err(e)) => return Err(AppError::Serve(std::io::Error::other(e))),
        Err(_) => tracing::warn!("http server still closing connections at the stop bound; left behind"),
    }
    match died {
        Some(d) => Err(AppError::TaskDied { task: d.task, why: d.why }),
        None => Ok(()),
    }
}

/// The HTTP state's parts that come from the config alone; the app fills in the live ones.
fn http_state(config: &Config, metrics: &Arc<Metrics>, store: &Arc<dyn Store>) -> HttpState {
    HttpState {
        metrics: metrics.clone(),
        checks: Vec::new(),
        writer: None,
        link: None,
        snapshot: SharedSnapshot::default(),
        api_token: config.http.api_token.clone(),
        status: Some(Arc::new(StatusPage::new(page_settings(config), store.clone()))),
        feed: Arc::new(Feed::new(config.http.signing_key.as_ref(), config.probe.interval)),
        provider_status: Default::default(),
        canary: Default::default(),
        golden: Default::default(),
        reload: None,
        adopt: None,
        drills: Some(Arc::new(crate::io::drill_desk::DrillDesk::new(config, store.clone()))),
    }
}

/// Builds the notification channels; the demo also pages to the log, so its alerts are seen
/// without any channel configured.
fn build_notifiers(
    config: &Config,
    demo: bool,
) -> Result<Vec<Arc<dyn crate::io::notify::notifier::Notifier>>, AppError> {
    let mut notifiers =
        crate::io::notify::channels::build_notifiers(&config.alerts, crate::io::notify::notifier::DEFAULT_TIMEOUT)
            .map_err(|e| AppError::Alerts(format!("{}: {}", e.channel, e.message)))?;
    if demo {
        notifiers.push(Arc::new(crate::io::notify::log::LogNotifier));
    }
    Ok(notifiers)
}

/// The durable outbox that delivers through `notifiers`.
fn build_outbox(
    config: &Config,
    store: &Arc<dyn Store>,
    metrics: &Arc<Metrics>,
    notifiers: Vec<Arc<dyn crate::io::notify::notifier::Notifier>>,
    gate: LeaderGate,
) -> Arc<crate::io::notify::outbox::Outbox> {
    use crate::io::notify::outbox::{lease_margin, lease_ttl_for, Outbox, OutboxConfig};
    Arc::new(
        Outbox::new(
            store.clone(),
            notifiers,
            OutboxConfig {
                region: Some(config.region.clone()),
                lease_ttl: lease_ttl_for(config.probe.interval),
                hold: lease_margin(config.probe.interval),
                min_regions: config.alerts.min_regions,
                notice_channels: config.alerts.notice_channels.iter().cloned().collect(),
                ..OutboxConfig::with_deadline(config.alerts.delivery_deadline)
            },
            metrics.clone(),
        )
        .led_by(gate),
    )
}

/// The alert engine's saved state (`None` when none was ever saved), or `Err` when storage did
/// not answer in time: then the pipeline asks again and judges nothing until it has it.
async fn load_alert_state(store: &dyn StateStore, region: &str) -> Result<Option<StateJson>, ()> {
    match tokio::time::timeout(CALL_TIMEOUT, store.load_alert_state(region)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "alert state not loaded; alerts wait until it is read");
            Err(())
        }
        Err(_) => {
            tracing::warn!(timeout = ?CALL_TIMEOUT, "alert state not loaded in time; alerts wait until it is read");
            Err(())
        }
    }
}

/// Stops the tasks in the order the road needs, all within `deadline`: this member's row in the
/// region's roster first, then the pipeline (its end closes the writer's and the link's channels,
/// which then drain), the writer, the link, the side tasks, any task the order does not name, and
/// last the alert delivery, so the last round's notifications are
/// in the outbox (or the record spool); what is not delivered now is delivered after the next start.
async fn stop_in_order(tasks: &mut Vec<Task>, deadline: tokio::time::Instant, stops: [CancellationToken; 3]) {
    let [writer_stop, link_stop, outbox_stop] = stops;
    let side = ["upkeep", "credit poller", "weekly summary", "status pages", "models lists", "published prices"];
    // The member's row goes first, so the others take its share at their next beat; and it is
    // awaited: left to run beside the stop, its removal raced the runtime's end and was dropped.
    for name in ["replicas", "pipeline", "sample writer", "storage link"].into_iter().chain(side).chain([
        "canary",
        "golden checks",
        "long-prompt probes",
    ]) {
        finish(tasks, name, deadline).await;
    }
    // A task the order does not name (the systemd notifier, or one added later) is awaited too:
    // one left running beside the stop races the runtime's end, as the replicas' row removal did.
    let rest: Vec<&'static str> = tasks.iter().map(|t| t.name).filter(|n| *n != "alert delivery").collect();
    for name in rest {
        finish(tasks, name, deadline).await;
    }
    writer_stop.cancel();
    link_stop.cancel();
    outbox_stop.cancel();
    finish(tasks, "alert delivery", deadline).await;
}

#[cfg(test)]
mod tests {
    //! Step tests of the wiring: a built app runs every task and its stop drains them; a database
    //! down at start still gives a running daemon that spools.
    use super::*;
    use std::path::Path;

    fn config(data: &Path, url: &str) -> Config {
        let text = format!(
            "region = \"local\"\n[storage]\nurl = \"{url}\"\ndata_dir = \"{d}\"\nbatch_age = \"100ms\"\n\
             [http]\nlisten = \"127.0.0.1:0\"\n[probe]\ninterval = \"1s\"\ntimeout = \"500ms\"\n\
             [[provider]]\nname = \"none\"\nkind = \"http\"\nbase_url = \"http://127.0.0.1:9/\"\n",
            d = data.display()
        );
        Config::from_toml(&text, &std::collections::BTreeMap::new()).expect("valid config")
    }

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let r = reqwest::get(format!("http://{addr}{path}")).await.expect("request");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    /// The value of the first series of `name` in an exposition.
    fn value(text: &str, name: &str) -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Polls `/metrics` until `ok` holds (a few seconds at most).
    async fn metrics_until(addr: SocketAddr, ok: impl Fn(&str) -> bool) -> String {
        let mut text = String::new();
        for _ in 0..100 {
            text = get(addr, "/metrics").await.1;
            if ok(&text) {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("never held; last scrape:\n{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_awaits_the_tasks_its_order_does_not_name_before_the_delivery() {
        use std::sync::atomic::AtomicU8;
        let shutdown = CancellationToken::new();
        let stops = [CancellationToken::new(), CancellationToken::new(), CancellationToken::new()];
        // Each records the step at which it ended: 1 for the unnamed task's last act, 2 for the delivery.
        let step = Arc::new(AtomicU8::new(0));
        let (s, stop) = (step.clone(), shutdown.clone());
        let unnamed = Task::spawn("a task the order does not name", async move {
            stop.cancelled().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = s.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst);
        });
        let (s, outbox_stop) = (step.clone(), stops[2].clone());
        let delivery = Task::spawn("alert delivery", async move {
            outbox_stop.cancelled().await;
            s.store(s.load(Ordering::SeqCst) * 10 + 2, Ordering::SeqCst);
        });
        let mut tasks = vec![delivery, unnamed];
        shutdown.cancel();
        stop_in_order(&mut tasks, tokio::time::Instant::now() + Duration::from_secs(5), stops).await;
        assert!(tasks.is_empty(), "every task was finished: {:?}", tasks.iter().map(|t| t.name).collect::<Vec<_>>());
        assert_eq!(step.load(Ordering::SeqCst), 12, "the unnamed task ended, then the delivery");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_drains_every_task_and_stores_every_probe() {
        let data = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/vigil.db", data.path().display());
        let app = App::build(config(data.path(), &url), AppOptions::default()).await.expect("app builds");
        let addr = app.local_addr().expect("bound");
        let metrics = app.metrics();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(app.run_until_stopped(shutdown.clone()));
        metrics_until(addr, |t| value(t, "vigil_probes_total") >= 2.0).await;
        assert_eq!(get(addr, "/readyz").await, (200, "ready\n".to_string()));
        let began = std::time::Instant::now();
        shutdown.cancel();
        let stopped = tokio::time::timeout(STOP_WITHIN, running).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "stops cleanly within the bound: {stopped:?}");
        assert!(began.elapsed() < STOP_WITHIN);
        // Every probe the pipeline counted was handed to the writer and stored before the stop ended.
        let probed = value(&metrics.render(), "vigil_probes_total");
        let store = store::open(&url).await.expect("reopen");
        let stored = store.samples(&store::SampleQuery::default()).await.expect("samples").len();
        assert_eq!(stored as f64, probed, "stored {stored} of {probed} probes");
        assert!(reqwest::get(format!("http://{addr}/healthz")).await.is_err(), "the listener is closed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_down_at_start_still_gives_a_running_daemon_that_spools() {
        let data = tempfile::tempdir().expect("tempdir");
        // Nothing listens on port 1: refused at once, like a database that is down.
        let url = "postgres://postgres@127.0.0.1:1/vigil";
        let app =
            App::build(config(data.path(), url), AppOptions::default()).await.expect("builds without its database");
        let addr = app.local_addr().expect("bound");
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(app.run_until_stopped(shutdown.clone()));
        let text = metrics_until(addr, |t| value(t, "vigil_samples_spooled") >= 1.0).await;
        assert!(value(&text, "vigil_probes_total") >= 1.0, "probing goes on");
        let (status, why) = get(addr, "/readyz").await;
        assert_eq!(status, 503, "not ready while samples only reach the spool");
        assert!(why.contains("storage unavailable at start") || why.contains("storage unreachable"), "{why}");
        assert!(why.contains("samples spooled"), "{why}");
        shutdown.cancel();
        let stopped = tokio::time::timeout(STOP_WITHIN, running).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "stops cleanly: {stopped:?}");
        let spool = Spool::open(data.path().join("spool"), 1 << 30).expect("reopen spool");
        assert!(!spool.is_empty(), "the samples wait in the spool for the database");
    }
}
