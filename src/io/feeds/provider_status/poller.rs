//! The status page poller: its own task that reads each configured provider's Statuspage
//! summary every `probe.status_page_every`, with a short timeout and a capped body, publishes
//! the latest state to readers and keeps incidents and component states in storage. A slow,
//! broken or hostile page delays only this task, never the probes. Every text a page sends (and
//! every error quoting it) is scrubbed as provider error text is before anyone sees it: the
//! unauthenticated status page, `/v1/targets`, alerts and storage show `[redacted]` for vigil's
//! own secrets and key-shaped tokens.

use super::statuspage::parse_summary;
use super::statuspage::Summary;
use super::statuspage::SUMMARY_PATH;
use crate::config::{StatusPageSource, StatusPagesConfig};
use crate::io::bounded::{read_capped, API_BODY_LIMIT};
use crate::io::probe::scrub::{clean, Secrets};
use crate::io::store::FeedStore;
use crate::vocab::provider_status::ProviderIncident;
use crate::vocab::provider_status::ProviderStatus;
use crate::vocab::provider_status::ProviderStatusSnapshot;
use crate::vocab::provider_status::SharedProviderStatus;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

/// Whole-request bound for one page read (connect, headers and body).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one round of storage writes, so a stuck database cannot stall the polling.
const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// Polls the configured status pages and publishes what they say.
pub struct StatusPagePoller {
    sources: Vec<StatusPageSource>,
    every: Duration,
    timeout: Duration,
    client: reqwest::Client,
    shared: SharedProviderStatus,
    store: Arc<dyn FeedStore>,
    secrets: Secrets,
}

/// Most bytes kept of one scrubbed text (the parser already cut it to 300 characters).
const MAX_TEXT_BYTES: usize = 1200;

/// A page's text made safe to show: configured secrets and key-like tokens redacted.
fn scrubbed(text: &str, secrets: &Secrets) -> String {
    clean(text, secrets, MAX_TEXT_BYTES, true)
}

/// Every text field of a summary, scrubbed.
fn scrub_summary(mut s: Summary, secrets: &Secrets) -> Summary {
    let text = |t: &mut String| *t = scrubbed(t, secrets);
    if let Some(n) = s.page_name.as_mut() {
        text(n);
    }
    text(&mut s.indicator);
    text(&mut s.description);
    for c in &mut s.components {
        for t in [&mut c.id, &mut c.name, &mut c.status] {
            text(t);
        }
    }
    for i in &mut s.incidents {
        for t in [&mut i.id, &mut i.name, &mut i.status, &mut i.impact] {
            text(t);
        }
        i.components.iter_mut().for_each(text);
        if let Some(l) = i.shortlink.as_mut() {
            text(l);
        }
    }
    s
}

/// Why one page read failed (logged and shown, never fatal).
fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl StatusPagePoller {
    /// A poller for `config`, publishing into `shared` and writing to `store`, redacting
    /// `secrets` (and key-like tokens) from every text a page sends.
    pub fn new(
        config: &StatusPagesConfig,
        secrets: Secrets,
        shared: SharedProviderStatus,
        store: Arc<dyn FeedStore>,
    ) -> Self {
        Self::with_timeout(config, secrets, shared, store, FETCH_TIMEOUT)
    }

    /// As [`StatusPagePoller::new`] with another per-read bound (tests use a short one).
    pub fn with_timeout(
        config: &StatusPagesConfig,
        secrets: Secrets,
        shared: SharedProviderStatus,
        store: Arc<dyn FeedStore>,
        timeout: Duration,
    ) -> Self {
        // Building a client only fails when TLS cannot initialise; then every read fails and says so.
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("vigil/", env!("CARGO_PKG_VERSION"), " (status page poller)"))
            .build()
            .unwrap_or_default();
        StatusPagePoller { sources: config.pages.clone(), every: config.every, timeout, client, shared, store, secrets }
    }

    /// How often the pages are read; `None` when no page is configured.
    pub fn every(&self) -> Option<Duration> {
        (!self.sources.is_empty()).then_some(self.every)
    }

    /// Shows every configured page as "unknown" until its first read answers.
    pub fn announce(&self) {
        let mut snap = self.shared.write().unwrap_or_else(|p| p.into_inner());
        for s in &self.sources {
            snap.providers.entry(s.provider.clone()).or_insert_with(|| ProviderStatus {
                provider: s.provider.clone(),
                page_name: s.provider.clone(),
                page_url: s.url.to_string(),
                indicator: "unknown".into(),
                ..ProviderStatus::default()
            });
        }
    }

    /// Reads every page once (concurrently), publishes, then stores what changed.
    pub async fn poll_once(&self, now: DateTime<Utc>) {
        let reads = self.sources.iter().map(|s| self.read(s));
        let results = futures::future::join_all(reads).await;
        let fresh_until = now + chrono::Duration::from_std(self.every * 3).unwrap_or(chrono::Duration::minutes(15));
        let mut incidents: Vec<ProviderIncident> = Vec::new();
        let mut components = Vec::new();
        {
            let mut snap = self.shared.write().unwrap_or_else(|p| p.into_inner());
            let mut next: ProviderStatusSnapshot = snap.clone();
            for (source, result) in self.sources.iter().zip(results) {
                let entry = next.providers.entry(source.provider.clone()).or_default();
                entry.provider = source.provider.clone();
                entry.page_url = source.url.to_string();
                match result {
                    Ok(summary) => {
                        // Incidents that left the unresolved list were closed by the provider.
                        for gone in
                            entry.incidents.iter().filter(|old| !summary.incidents.iter().any(|n| n.id == old.id))
                        {
                            let mut closed = gone.clone();
                            closed.status = "resolved".into();
                            closed.resolved_at = Some(now);
                            incidents.push(closed);
                        }
                        incidents.extend(summary.incidents.iter().cloned());
                        components.extend(summary.components.iter().cloned());
                        entry.page_name = summary.page_name.unwrap_or_else(|| source.provider.clone());
                        entry.indicator = summary.indicator;
                        entry.description = summary.description;
                        entry.components = summary.components;
                        entry.incidents = summary.incidents.into_iter().filter(ProviderIncident::is_open).collect();
                        entry.fetched_at = Some(now);
                        entry.fresh_until = Some(fresh_until);
                        entry.last_error = None;
                    }
                    Err(why) => {
                        tracing::warn!(provider = %source.provider, error = %why, "status page read failed; keeping the last reading");
                        entry.last_error = Some(why);
                    }
                }
            }
            *snap = next;
        }
        let store = self.store.clone();
        let write = async move {
            if !incidents.is_empty() {
                store.upsert_provider_incidents(&incidents).await?;
            }
            if !components.is_empty() {
                store.upsert_provider_components(&components).await?;
            }
            Ok::<(), crate::io::store::StoreError>(())
        };
        match tokio::time::timeout(STORE_TIMEOUT, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "storing provider status failed; the next poll stores it again"),
            Err(_) => tracing::warn!("storing provider status timed out; the next poll stores it again"),
        }
    }

    /// One page's summary, or why not; both scrubbed (a parse error may quote the page).
    async fn read(&self, source: &StatusPageSource) -> Result<Summary, String> {
        match self.read_raw(source).await {
            Ok(summary) => Ok(scrub_summary(summary, &self.secrets)),
            Err(why) => Err(scrubbed(&why, &self.secrets)),
        }
    }

    /// One page's summary as the page sent it, or why not.
    async fn read_raw(&self, source: &StatusPageSource) -> Result<Summary, String> {
        let mut base = source.url.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let url = base.join(SUMMARY_PATH).map_err(fail)?;
        let work = async {
            let resp = self
                .client
                .get(url)
                .header("accept", "application/json")
                .send()
                .await
                .map_err(|e| fail(e.without_url()))?;
            if !resp.status().is_success() {
                return Err(format!("HTTP {}", resp.status().as_u16()));
            }
            let body = read_capped(resp, API_BODY_LIMIT).await.map_err(fail)?;
            parse_summary(&source.provider, &body).map_err(fail)
        };
        // reqwest's timeout covers the body too; this bound also covers a stalled parse-free wait.
        match tokio::time::timeout(self.timeout + Duration::from_millis(100), work).await {
            Ok(r) => r,
            Err(_) => Err(format!("no complete answer within {} ms", self.timeout.as_millis())),
        }
    }
}
