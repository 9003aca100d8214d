//! The daemon's side tasks: store upkeep and the feeds (credit, providers' status pages, models
//! lists, published prices) and the weekly summary. Each feed is one adapter's round on the
//! periodic loop; none of them is on the sample road, so a slow one delays only itself. With
//! replicas, upkeep, credit readings and the weekly summary run on the region's leader only.

use super::periodic::{self, Schedule};
use super::watchdog::Task;
use crate::config::Config;
use crate::decide::roster::LeaderGate;
use crate::io::feeds::model_lists::SharedModelNotices;
use crate::io::feeds::{balance, model_lists, prices, provider_status};
use crate::io::metrics::Metrics;
use crate::io::probe::PublishedPrices;
use crate::io::store::{retention, Store};
use crate::vocab::provider_status::SharedProviderStatus;
use crate::vocab::target::Target;
use chrono::Utc;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What the side tasks share with the rest of the daemon.
pub(crate) struct Shared {
    /// Storage.
    pub store: Arc<dyn Store>,
    /// The metrics registry (credit gauge).
    pub metrics: Arc<Metrics>,
    /// Whether the start applied the migrations (else upkeep retries them first).
    pub migrated: bool,
    /// The providers' status pages, as the status page and the alert stage read them.
    pub provider_status: SharedProviderStatus,
    /// Retirement notices from the models lists, for the alert stage.
    pub model_notices: SharedModelNotices,
    /// The prober's table of OpenRouter's published prices and the targets it prices.
    pub published: (PublishedPrices, Vec<Target>),
    /// Store upkeep, credit readings and the weekly summary run only on the region's leader.
    pub gate: LeaderGate,
}

/// Starts every side task; each stops at `shutdown`.
pub(crate) fn start(config: &Config, shared: Shared, shutdown: &CancellationToken) -> Vec<Task> {
    let Shared { store, metrics, migrated, provider_status, model_notices, published, gate } = shared;
    vec![
        Task::spawn(
            "upkeep",
            upkeep(
                store.clone(),
                retention::Policy::from_config(&config.storage),
                migrated,
                gate.clone(),
                shutdown.clone(),
            ),
        ),
        Task::spawn_optional(
            "credit poller",
            credit(store.clone(), config.clone(), metrics, gate.clone(), shutdown.clone()),
        ),
        Task::spawn_optional(
            "status pages",
            status_pages(
                provider_status::poller::StatusPagePoller::new(
                    &config.status_pages,
                    crate::io::probe::scrub::Secrets::of_config(config),
                    provider_status,
                    store.clone(),
                ),
                shutdown.clone(),
            ),
        ),
        Task::spawn_optional(
            "models lists",
            models_lists(
                model_lists::ModelsPoller::new(
                    &config.providers,
                    &config.probe,
                    config.deprecation.models_every,
                    &config.storage.data_dir,
                    model_notices,
                ),
                shutdown.clone(),
            ),
        ),
        Task::spawn_optional("published prices", published_prices(config.clone(), published, shutdown.clone())),
        Task::spawn_optional("weekly summary", super::weekly_job::run(store, config.clone(), gate, shutdown.clone())),
    ]
}

/// Store upkeep: migrations retried while the database was down at start, then retention on
/// its own clock. Never touches the sample road.
async fn upkeep(
    store: Arc<dyn Store>,
    policy: retention::Policy,
    migrated: bool,
    gate: LeaderGate,
    shutdown: CancellationToken,
) {
    if !migrated {
        let retry = Schedule::every(retention::MIGRATE_RETRY_EVERY);
        let store = store.as_ref();
        periodic::every(retry, &shutdown, (), |()| async move { (!retention::try_migrate(store).await).then_some(()) })
            .await;
        if shutdown.is_cancelled() {
            return;
        }
    }
    let (store, policy, stop) = (store.as_ref(), &policy, &shutdown);
    periodic::every(Schedule::every(policy.tables.every).led_by(gate), &shutdown, (), |()| async move {
        retention::run_once(store, policy, Utc::now(), stop).await;
        Some(())
    })
    .await;
}

/// The credit of every provider with a `balance` setting, each on its own period.
async fn credit(
    store: Arc<dyn Store>,
    config: Config,
    metrics: Arc<Metrics>,
    gate: LeaderGate,
    shutdown: CancellationToken,
) {
    let mut jobs = tokio::task::JoinSet::new();
    for watched in balance::watched(config.credit_watch(), config.probe.timeout) {
        let (store, metrics, shutdown, region, gate) =
            (store.clone(), metrics.clone(), shutdown.clone(), config.region.clone(), gate.clone());
        jobs.spawn(async move {
            let (w, store, metrics, region) = (&watched, store.as_ref(), metrics.as_ref(), region.as_str());
            periodic::every(Schedule::every(w.balance.every).led_by(gate), &shutdown, (), |()| async move {
                w.read_once(store, metrics, region).await;
                Some(())
            })
            .await;
        });
    }
    while jobs.join_next().await.is_some() {}
}

/// The providers' own status pages; returns at once when none is configured.
async fn status_pages(poller: provider_status::poller::StatusPagePoller, shutdown: CancellationToken) {
    let Some(every) = poller.every() else { return };
    poller.announce();
    let poller = &poller;
    periodic::every(Schedule::every(every), &shutdown, (), |()| async move {
        poller.poll_once(Utc::now()).await;
        Some(())
    })
    .await;
}

/// The providers' models lists (retirement notices); returns at once when switched off.
async fn models_lists(poller: model_lists::ModelsPoller, shutdown: CancellationToken) {
    let Some((first, every)) = poller.cadence() else { return };
    let poller = &poller;
    periodic::every(Schedule::every(every).first_after(first), &shutdown, poller.load_seen(), |seen| async move {
        Some(poller.poll_once(seen, Utc::now()).await)
    })
    .await;
}

/// OpenRouter's published prices for the samples, first at once; returns at once when no target
/// has one.
async fn published_prices(config: Config, published: (PublishedPrices, Vec<Target>), shutdown: CancellationToken) {
    let (table, targets) = (&published.0, published.1.as_slice());
    if !prices::anything_published(&config.providers, targets) {
        return;
    }
    let (providers, data_dir, every) = (&*config.providers, config.storage.data_dir.as_path(), prices::REFRESH_EVERY);
    periodic::every(Schedule::every(every), &shutdown, (), |()| async move {
        prices::refresh_once(providers, targets, data_dir, table, every).await;
        Some(())
    })
    .await;
}
