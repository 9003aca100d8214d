//! Wiring: `App::build(Config)` opens the listener, store and prober; `run_until_stopped`
//! runs scheduler, pipeline and HTTP until the shutdown token fires, then drains.

use crate::config::Config;
use crate::http::{router, HttpState, ReadyCheck, SchedulerRunning};
use crate::metrics::Metrics;
use crate::monitor::{Monitor, SharedSnapshot};
use crate::pipeline::{Pipeline, Stages};
use crate::probe::{Planned, Prober};
use crate::scheduler::{Scheduler, SchedulerError};
use crate::store::link::{ContextPlan, Link, CALL_TIMEOUT};
use crate::store::writer::WRITE_TIMEOUT;
use crate::store::{self, Spool, Store, StoreError, Writer};
use crate::watchdog::{first_death, Liveness, Task};
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
    /// An alert channel could not be set up.
    #[error("alerts: {0}")]
    Alerts(String),
    /// The demo providers could not start.
    #[error("--demo: {0}")]
    Demo(std::io::Error),
    /// A task of the daemon died while running (the process exits non-zero so it is restarted).
    #[error("{task} died ({why}); vigil stopped so its service manager restarts it")]
    TaskDied {
        /// Which task.
        task: &'static str,
        /// Its panic message, or that it returned.
        why: String,
    },
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
        Ok(()) => Ok((store, None)),
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
    loaded: bool,
    /// The prober's table of OpenRouter's published prices and the targets it prices.
    published: (crate::probe::PublishedPrices, Vec<crate::target::Target>),
    /// Keeps the demo providers' server alive as long as the app.
    _demo: Option<crate::demo::Demo>,
    /// The model-change canary, when `probe.canary.enabled`.
    canary: Option<crate::canary::runner::CanaryRunner>,
}

impl App {
    /// Binds the listener and prepares every stage.
    pub async fn build(mut config: Config, opts: AppOptions) -> Result<App, AppError> {
        let demo = if opts.demo {
            crate::demo::use_demo_cadence(&mut config);
            if crate::demo::use_demo_database(&mut config) {
                tracing::info!(url = %crate::config::redact_url(config.storage.url.expose_secret()), "demo: own database");
            }
            let demo = crate::demo::start_demo_at(rand::random(), opts.demo_elapsed).await.map_err(AppError::Demo)?;
            tracing::info!(addr = %demo.standin.addr(), providers = demo.providers.len(), "demo providers on loopback");
            config.providers.extend(demo.providers.iter().cloned());
            Some(demo)
        } else {
            None
        };
        let plans = Planned::all(&config.providers, &config.region);
        if plans.is_empty() {
            return Err(AppError::NothingToProbe);
        }
        let listener = TcpListener::bind(config.http.listen)
            .await
            .map_err(|source| AppError::Bind { addr: config.http.listen, source })?;
        let metrics = Arc::new(Metrics::with_detail(&config.region, config.metrics.detail)?);
        let prober = Prober::new(config.probe.clone(), &opts.extra_roots);
        let targets: Vec<_> = plans.iter().map(|p| p.target.clone()).collect();
        let published = (prober.published_prices(), targets.clone());
        crate::pricing::publish_cached(&config.providers, &targets, &config.storage.data_dir, &published.0);
        let canary = config
            .canary
            .enabled
            .then(|| {
                crate::canary::runner::CanaryRunner::new(plans.clone(), prober.clone(), config.canary.clone())
                    .starting_within(config.probe.interval)
            })
            .filter(|c| !c.is_empty());
        let scheduler = Scheduler::new(plans, prober, config.probe.interval, config.probe.concurrency, metrics.clone());
        let (store, unavailable) = open_store_or_why(&config).await?;
        let migrated = unavailable.is_none();
        if demo.is_some() && migrated {
            crate::demo::history::seed_if_empty(store.as_ref(), &config, Utc::now()).await?;
        }
        let spool = Spool::open(config.storage.data_dir.join("spool"), config.storage.spool_max_bytes)?;
        if !spool.is_empty() {
            tracing::info!(spooled = spool.len(), "samples left in the spool by an earlier run will be replayed");
        }
        let writer = Writer::new(store.clone(), spool, config.storage.batch_size, config.storage.batch_age);
        if let Some(why) = &unavailable {
            // `/readyz` says why from the first moment, not only after the first failed write.
            writer.health().failed(format!("storage unavailable at start: {why}"));
        }
        let mut monitor = Monitor::new(&config, targets, Utc::now());
        let loaded = match migrated {
            true => match monitor.load(store.as_ref(), Utc::now()).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "stored baselines and breakers not loaded; retried before the first persist");
                    false
                }
            },
            false => false,
        };
        Ok(App {
            config,
            listener,
            metrics,
            scheduler,
            store,
            migrated,
            writer,
            monitor,
            loaded,
            canary,
            published,
            _demo: demo,
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
            loaded,
            published,
            _demo,
            canary,
        } = self;
        let running = Arc::new(SchedulerRunning::default());
        let liveness =
            Arc::new(Liveness::new(Utc::now(), config.probe.interval, config.storage.batch_age + WRITE_TIMEOUT));
        let writer = writer.with_liveness(liveness.clone());
        let health = writer.health();
        let spool =
            store::spool::SpoolOf::open(config.storage.data_dir.join("spool-records"), config.storage.spool_max_bytes)?;
        let mut notifiers =
            crate::alert::channels::build_notifiers(&config.alerts, crate::alert::notifier::DEFAULT_TIMEOUT)
                .map_err(|e| AppError::Alerts(format!("{}: {}", e.channel, e.message)))?;
        if _demo.is_some() {
            // The demo's alerts are seen in the log without any channel configured.
            notifiers.push(Arc::new(crate::alert::log::LogNotifier));
        }
        let outbox = Arc::new(crate::alert::outbox::Outbox::new(
            store.clone(),
            notifiers,
            crate::alert::outbox::OutboxConfig {
                region: Some(config.region.clone()),
                lease_ttl: crate::alert::outbox::lease_ttl_for(config.probe.interval),
                ..crate::alert::outbox::OutboxConfig::with_deadline(config.alerts.delivery_deadline)
            },
        ));
        metrics.register_alert_channels(&outbox.channels());
        let saved = match tokio::time::timeout(CALL_TIMEOUT, store.load_alert_state(&config.region)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "alert state not loaded; starting fresh");
                None
            }
            Err(_) => {
                tracing::warn!(timeout = ?CALL_TIMEOUT, "alert state not loaded in time; starting fresh");
                None
            }
        };
        let engine = crate::alert::rules::AlertEngine::restore(
            crate::alert::rules::RuleConfig::from_config(&config),
            saved.as_ref(),
        );
        let model_notices = crate::model_lists::SharedModelNotices::default();
        let alerting = crate::pipeline::Alerting::new(engine, outbox.channels(), &config.region, config.probe.interval)
            .with_credit(&config)
            .with_provider_incidents(crate::alert::provider_incident::ProviderIncidentRule::from_config(
                &config.status_pages,
            ))
            .with_model_lists(model_notices.clone());
        let plan = ContextPlan {
            region: config.region.clone(),
            every: config.probe.interval,
            credit_providers: alerting.credit_providers(),
        };
        let (link, link_handle) = Link::new(store.clone(), spool, Some(plan));
        let link_health = link.health();
        let checks: Vec<Arc<dyn ReadyCheck>> = vec![
            running.clone(),
            liveness.clone(),
            health.clone(),
            link_health.clone(),
            Arc::new(store::IntegrityCheck(store.clone())),
        ];
        let snapshot = SharedSnapshot::default();
        // Cost-aware adaptive probing: the pipeline plans, the scheduler follows.
        let probe_plan = crate::adaptive::SharedPlan::default();
        let planner = crate::adaptive::Planner::new(&config, scheduler.targets(), probe_plan.clone());
        let scheduler = scheduler.with_plan(probe_plan, planner.settings().burst());
        let provider_status = crate::provider_status::SharedProviderStatus::default();
        let canary_shown = crate::canary::SharedCanary::default();
        let app = router(HttpState {
            metrics: metrics.clone(),
            checks,
            writer: Some(health.clone()),
            link: Some(link_health),
            snapshot: snapshot.clone(),
            api_token: config.http.api_token.clone(),
            status: Some(Arc::new(crate::http::status_page::StatusPage::new(&config, store.clone()))),
            feed: Arc::new(crate::http::api::Feed::from_config(&config)),
            provider_status: provider_status.clone(),
            canary: canary_shown.clone(),
        });
        let server_stop = shutdown.clone();
        let limits = crate::http::server::ServerLimits::for_probes(config.probe.concurrency);
        let server = tokio::spawn(crate::http::server::serve(listener, app, server_stop, limits));

        // The writer and the link stop only after the pipeline has handed over its last sample
        // and record (they end when their channels close).
        let writer_stop = CancellationToken::new();
        let link_stop = CancellationToken::new();
        let outbox_stop = CancellationToken::new();
        let (store_tx, store_rx) = mpsc::channel(16_384);
        let (tx, rx) = mpsc::channel(16_384);
        let pipeline = Pipeline::new(Stages {
            metrics: metrics.clone(),
            writer: store_tx,
            monitor,
            loaded,
            link: link_handle,
            snapshot,
            liveness,
            alerts: alerting,
            provider_status: provider_status.clone(),
            planner: Some(planner),
        });
        // The canary runs on its own clock and concurrency; its runs reach the pipeline on their own channel.
        let (canary_tx, canary_rx) = mpsc::channel(1024);
        let pipeline = pipeline.with_canary(canary_rx, canary_shown.clone());
        let mut tasks = vec![
            Task::spawn("pipeline", pipeline.run(rx)),
            Task::spawn("sample writer", writer.run(store_rx, writer_stop.clone())),
            Task::spawn("storage link", link.run(link_stop.clone())),
            Task::spawn("upkeep", side_jobs(store.clone(), config.clone(), migrated, shutdown.clone())),
            Task::spawn_optional(
                "credit poller",
                crate::balance::poll(store.clone(), config.clone(), metrics.clone(), shutdown.clone()),
            ),
            Task::spawn_optional(
                "status pages",
                crate::provider_status::poller::Poller::new(&config.status_pages, provider_status, store.clone())
                    .run(shutdown.clone()),
            ),
            Task::spawn_optional(
                "models lists",
                crate::model_lists::Poller::new(
                    &config.providers,
                    &config.probe,
                    config.deprecation.models_every,
                    &config.storage.data_dir,
                    model_notices,
                )
                .run(shutdown.clone()),
            ),
            Task::spawn_optional(
                "published prices",
                crate::pricing::refresh(
                    config.providers.clone(),
                    published.1,
                    config.storage.data_dir.clone(),
                    published.0,
                    crate::pricing::REFRESH_EVERY,
                    shutdown.clone(),
                ),
            ),
            Task::spawn_optional(
                "weekly summary",
                crate::weekly::job::run(store.clone(), config.clone(), shutdown.clone()),
            ),
            {
                let (outbox, stop) = (outbox.clone(), outbox_stop.clone());
                Task::spawn("alert delivery", async move { outbox.run(stop).await })
            },
            Task::spawn("alert counters", count_alerts(outbox.counters(), metrics.clone(), outbox_stop.clone())),
        ];
        if let Some(canary) = canary {
            tasks.push(Task::spawn_optional("canary", canary.run(canary_tx, shutdown.clone())));
        }
        // Probes still in flight when the drain budget is spent are cut short: a gap, not a hang.
        let abort = scheduler.abort_token();
        let drain_timer = {
            let (shutdown, abort) = (shutdown.clone(), abort.clone());
            tokio::spawn(async move {
                shutdown.cancelled().await;
                tokio::time::sleep(PROBE_DRAIN).await;
                abort.cancel();
            })
        };
        tracing::info!(region = %config.region, targets = scheduler.len(), "vigil running");
        running.0.store(true, Ordering::Release);
        let (result, died) = tokio::select! {
            r = scheduler.run(tx, shutdown.clone()) => (r, None),
            d = first_death(&mut tasks, &shutdown) => (Ok(()), Some(d)),
        };
        running.0.store(false, Ordering::Release);
        if let Some(d) = &died {
            tracing::error!(task = d.task, why = %d.why, "a task of the daemon died; stopping so the service manager restarts vigil");
            shutdown.cancel();
            abort.cancel();
        }
        shutdown.cancel();
        let deadline = tokio::time::Instant::now() + AFTER_DRAIN;
        // Order matters: the pipeline's end closes the writer's and the link's channels.
        let side = ["upkeep", "credit poller", "weekly summary", "status pages", "models lists", "published prices"];
        for name in ["pipeline", "sample writer", "storage link"].into_iter().chain(side).chain(["canary"]) {
            finish(&mut tasks, name, deadline).await;
        }
        writer_stop.cancel();
        link_stop.cancel();
        // The last round's notifications are in the outbox (or the record spool); what is not
        // delivered now is delivered after the next start.
        outbox_stop.cancel();
        finish(&mut tasks, "alert delivery", deadline).await;
        finish(&mut tasks, "alert counters", deadline).await;
        drain_timer.abort();
        tracing::info!(written = health.written(), spooled = health.spooled(), "storage flushed");
        match tokio::time::timeout_at(deadline, server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(AppError::Serve(e)),
            Ok(Err(e)) => return Err(AppError::Serve(std::io::Error::other(e))),
            Err(_) => tracing::warn!("http server still closing connections at the stop bound; left behind"),
        }
        if let Some(d) = died {
            return Err(AppError::TaskDied { task: d.task, why: d.why });
        }
        result?;
        tracing::info!("stopped cleanly");
        Ok(())
    }
}

/// Waits for the named task until `deadline`, then leaves it behind (aborted) and says so.
async fn finish(tasks: &mut Vec<Task>, name: &'static str, deadline: tokio::time::Instant) {
    let Some(i) = tasks.iter().position(|t| t.name == name) else { return };
    let mut task = tasks.swap_remove(i);
    match tokio::time::timeout_at(deadline, &mut task.handle).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_panic() => {
            tracing::error!(task = name, why = %crate::watchdog::panic_message(e.into_panic()), "task panicked while stopping")
        }
        Ok(Err(e)) => tracing::error!(task = name, error = %e, "task failed while stopping"),
        Err(_) => {
            task.handle.abort();
            tracing::warn!(task = name, "task still busy at the stop bound; abandoned");
        }
    }
}

/// Background upkeep: migrations retried while the database was down at start, then the
/// retention job (`store::retention`), which never touches the sample road.
async fn side_jobs(store: Arc<dyn Store>, config: Config, mut migrated: bool, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    while !migrated {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => match store.migrate().await {
                Ok(()) => {
                    tracing::info!("storage reachable; migrations applied");
                    migrated = true;
                }
                Err(StoreError::Unavailable(_)) => {}
                Err(e) => tracing::error!(error = %e, "migrations failed; samples stay in the spool"),
            },
        }
    }
    store::retention::run(store, store::retention::Policy::from_config(&config.storage), shutdown).await;
}

/// Copies the outbox's delivery counters into the Prometheus metrics every second.
async fn count_alerts(
    counters: Arc<crate::alert::outbox::AlertCounters>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut last = crate::alert::outbox::CountersSnapshot::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        let stopping = tokio::select! {
            _ = stop.cancelled() => true,
            _ = tick.tick() => false,
        };
        let now = counters.snapshot();
        for ((kind, channel), n) in &now.sent {
            let before = last.sent.get(&(kind.clone(), channel.clone())).copied().unwrap_or(0);
            if *n > before {
                metrics.alerts_sent(kind, channel, n - before);
            }
        }
        for (channel, n) in &now.delivery_failures {
            let before = last.delivery_failures.get(channel).copied().unwrap_or(0);
            if *n > before {
                metrics.deliveries_failed(channel, n - before);
            }
        }
        metrics.set_outbox_depth(now.outbox_depth);
        last = now;
        if stopping {
            return;
        }
    }
}
