//! The scheduled send inside `vigil run`: on each `report.weekly` tick (tokio-cron-scheduler,
//! UTC), build this instance's region's report, compose the email once and deliver it to every
//! recipient, retrying failures with the outbox's backoff until `alerts.delivery_deadline`.
//!
//! Retries live in memory, not in the outbox: the outbox carries alert notifications that every
//! channel kind can render, and a report with images is not one. A restart during the retries
//! drops that week's email (logged); the next tick sends the next one. Regions sharing a database
//! each send their own region's summary, the same way each delivers only its own alerts.

use crate::config::Config;
use crate::io::notify::notifier::{DeliveryError, DEFAULT_TIMEOUT};
use crate::io::notify::outbox::{backoff, OutboxConfig};
use crate::io::store::Store;
use crate::io::weekly::mail;
use crate::io::weekly::mail::Recipient;
use crate::io::weekly::mail::WeeklyEmail;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_cron_scheduler::{Job, JobScheduler};
use tokio_util::sync::CancellationToken;

/// Retry timing of the weekly email: first retry after a minute, doubling up to an hour.
pub fn retry_policy(deadline: Duration) -> OutboxConfig {
    OutboxConfig {
        base_backoff: Duration::from_secs(60),
        max_backoff: Duration::from_secs(3600),
        ..OutboxConfig::with_deadline(deadline)
    }
}

struct Pending {
    recipient: Arc<Recipient>,
    attempts: i32,
    next_at: DateTime<Utc>,
}

/// What one delivery step did, by channel name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Accepted by the server.
    pub delivered: Vec<String>,
    /// Failed, to be tried again.
    pub retrying: Vec<String>,
    /// Failed for good (permanent error or deadline passed).
    pub abandoned: Vec<String>,
}

/// One week's email on its way to every recipient; [`Delivery::step`] is one round of attempts.
pub struct Delivery {
    email: WeeklyEmail,
    pending: Vec<Pending>,
    policy: OutboxConfig,
    deadline: DateTime<Utc>,
}

impl Delivery {
    /// Starts delivering `email` at `now`.
    pub fn new(email: WeeklyEmail, recipients: &[Arc<Recipient>], policy: OutboxConfig, now: DateTime<Utc>) -> Self {
        let pending =
            recipients.iter().map(|r| Pending { recipient: Arc::clone(r), attempts: 0, next_at: now }).collect();
        let deadline = now + chrono::Duration::from_std(policy.deadline).unwrap_or(chrono::Duration::days(1));
        Delivery { email, pending, policy, deadline }
    }

    /// True once every recipient has been delivered to or given up on.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
    }

    /// When the next attempt is due.
    pub fn next_attempt(&self) -> Option<DateTime<Utc>> {
        self.pending.iter().map(|p| p.next_at).min()
    }

    /// Tries every recipient due at `now` once.
    pub async fn step(&mut self, now: DateTime<Utc>) -> StepReport {
        let mut report = StepReport::default();
        let mut still = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            if p.next_at > now {
                still.push(p);
                continue;
            }
            let name = p.recipient.name().to_string();
            match p.recipient.send(&self.email).await {
                Ok(()) => {
                    tracing::info!(channel = %name, attempts = p.attempts + 1, subject = %self.email.subject, "weekly summary delivered");
                    report.delivered.push(name);
                }
                Err(DeliveryError::Permanent { message }) => {
                    tracing::error!(channel = %name, error = %message, "weekly summary not delivered; giving up");
                    report.abandoned.push(name);
                }
                Err(DeliveryError::Retryable { retry_after, message }) => {
                    if now >= self.deadline {
                        tracing::error!(channel = %name, error = %message, "weekly summary not delivered by the deadline; giving up");
                        report.abandoned.push(name);
                        continue;
                    }
                    let wait = backoff(&self.policy, p.attempts).max(retry_after.unwrap_or(Duration::ZERO));
                    p.next_at = (now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::hours(1)))
                        .min(self.deadline);
                    p.attempts += 1;
                    tracing::warn!(channel = %name, attempts = p.attempts, retry_in_s = (p.next_at - now).num_seconds(),
                        error = %message, "weekly summary delivery failed; will retry");
                    report.retrying.push(name);
                    still.push(p);
                }
            }
        }
        self.pending = still;
        report
    }
}

/// Waits `d`, or returns false when `shutdown` fires first.
async fn wait(d: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Builds, composes and delivers one summary for `region` for the weeks ending at `now`.
pub async fn send_weekly(
    store: &dyn Store,
    region: &str,
    traffic: &crate::decide::chain_cost::Traffic,
    recipients: &[Arc<Recipient>],
    policy: OutboxConfig,
    now: DateTime<Utc>,
    shutdown: &CancellationToken,
) {
    let mut attempts = 0;
    let started = Utc::now();
    let report = loop {
        match crate::io::weekly::build_for(store, Some(region), now, traffic).await {
            Ok(r) => break r,
            Err(e) => {
                let waited = (Utc::now() - started).to_std().unwrap_or_default();
                if waited >= policy.deadline {
                    tracing::error!(error = %e, "weekly summary not built by the deadline; skipped this week");
                    return;
                }
                let pause = backoff(&policy, attempts);
                attempts += 1;
                tracing::warn!(error = %e, retry_in_s = pause.as_secs(), "weekly summary: storage failed; will retry");
                if !wait(pause, shutdown).await {
                    return;
                }
            }
        }
    };
    let email = match mail::compose(&report) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "weekly summary not composed; skipped this week");
            return;
        }
    };
    let mut delivery = Delivery::new(email, recipients, policy, Utc::now());
    while !delivery.is_done() {
        delivery.step(Utc::now()).await;
        let Some(next) = delivery.next_attempt() else { break };
        let pause = (next - Utc::now()).to_std().unwrap_or_default();
        if !wait(pause, shutdown).await {
            tracing::warn!("shutting down: the weekly summary was not delivered to every recipient");
            return;
        }
    }
}

/// Runs the schedule until `shutdown`. Does nothing (after one log line) when `report.weekly`
/// is `off` or no email channel is configured.
pub async fn run(
    store: Arc<dyn Store>,
    config: Config,
    gate: crate::decide::roster::LeaderGate,
    shutdown: CancellationToken,
) {
    let Some(expr) = config.report.weekly.clone() else {
        tracing::info!("weekly summary off (report.weekly = \"off\")");
        return;
    };
    let recipients: Vec<Arc<Recipient>> =
        match mail::recipients(&config.alerts.email, &config.report.weekly_to, DEFAULT_TIMEOUT) {
            Ok(r) if r.is_empty() => {
                tracing::info!("weekly summary not scheduled: no [[alerts.email]] channel is configured");
                return;
            }
            Ok(r) => r.into_iter().map(Arc::new).collect(),
            Err(e) => {
                tracing::error!(error = %e, "weekly summary not scheduled");
                return;
            }
        };
    let (tick_tx, mut ticks) = mpsc::unbounded_channel::<()>();
    let scheduled = async {
        let cron = JobScheduler::new().await?;
        let job = Job::new_async_tz(expr.as_str(), Utc, move |_id, _lock| {
            let _ = tick_tx.send(());
            Box::pin(async {})
        })?;
        cron.add(job).await?;
        cron.start().await?;
        Ok::<_, tokio_cron_scheduler::JobSchedulerError>(cron)
    };
    let mut cron = match scheduled.await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, schedule = %expr, "weekly summary not scheduled");
            return;
        }
    };
    let names: Vec<&str> = recipients.iter().map(|r| r.name()).collect();
    tracing::info!(schedule = %expr, channels = ?names, region = %config.region, "weekly summary scheduled (UTC)");
    let policy = retry_policy(config.alerts.delivery_deadline);
    let traffic = crate::decide::chain_cost::traffic_of(&config.chains);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            tick = ticks.recv() => {
                if tick.is_none() {
                    break;
                }
                if !gate.open(Utc::now()) {
                    tracing::info!(region = %config.region, "weekly summary left to the region's leading replica");
                    continue;
                }
                let send = send_weekly(store.as_ref(), &config.region, &traffic, &recipients, policy.clone(), Utc::now(), &shutdown);
                // A slow query or SMTP exchange must not hold up a shutdown's drain.
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        tracing::warn!("shutting down while sending the weekly summary; this week's is not sent");
                        break;
                    }
                    _ = send => {}
                }
            }
        }
    }
    let _ = cron.shutdown().await;
}
