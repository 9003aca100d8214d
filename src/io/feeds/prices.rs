//! Published OpenRouter prices for `vigil report`: per-endpoint pricing from the models API
//! (`GET {base_url}/models/{author}/{slug}/endpoints`), for targets without a configured price.
//!
//! Answers are cached in the data directory for a day, so a report run offline (or while
//! OpenRouter is down) uses the last known prices, and a report with neither shows no price
//! rather than failing.

use crate::config::{Price, ProviderConfig};
use crate::decide::pricing::{is_openrouter, parse_endpoints, EndpointPrice};
use crate::vocab::target::{Name, Target};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// How long a fetched price list is used by `vigil report` before it is fetched again.
pub const CACHE_TTL: Duration = Duration::from_secs(24 * 3600);
/// How often the daemon fetches the published prices its samples are charged at.
pub const REFRESH_EVERY: Duration = Duration::from_secs(6 * 3600);
/// Cache file name inside `storage.data_dir`.
pub const CACHE_FILE: &str = "published-prices.json";

/// Why published prices could not be fetched (the report goes on without them).
#[derive(Debug, Error)]
pub enum PricingError {
    /// Network failure, timeout or non-2xx answer.
    #[error("fetching {url}: {message}")]
    Fetch {
        /// The endpoints URL asked.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The answer was not the documented shape.
    #[error("reading {url}: {source}")]
    Parse {
        /// The endpoints URL asked.
        url: String,
        /// The JSON error.
        source: serde_json::Error,
    },
}

/// Cached endpoint lists, keyed by `{base_url} {model}`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    entries: BTreeMap<String, CacheEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CacheEntry {
    fetched_at: DateTime<Utc>,
    endpoints: Vec<EndpointPrice>,
}

/// Prices for report rows, decided exactly as for samples ([`crate::decide::price_table::price_of`]):
/// configured, then published (OpenRouter), then the built-in table.
#[derive(Debug, Default)]
pub struct PriceBook {
    /// The providers by name (a report prices every target: a scan per target was O(n²)).
    providers: std::collections::HashMap<String, Arc<ProviderConfig>>,
    published: BTreeMap<(Name, Name), Vec<EndpointPrice>>,
    /// Why some published prices are missing, for a note under the report.
    pub notes: Vec<String>,
}

impl PriceBook {
    /// The price of a target, when known.
    pub fn price(&self, t: &Target) -> Option<Price> {
        let p = self.providers.get(t.provider.as_str())?;
        let published = self.published.get(&(t.provider.clone(), t.model.clone()));
        crate::decide::price_table::price_of(p, &t.model, t.route.as_deref(), published.map(Vec::as_slice)).map(|x| x.0)
    }

    /// Copies the published prices into a prober's table, so samples are priced as the report is.
    pub fn publish_into(&self, table: &crate::io::probe::PublishedPrices) {
        if let Ok(mut t) = table.write() {
            t.extend(self.published.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
}

/// Builds the price book for `targets`: fetches (or reads from the cache in `data_dir`) the
/// published prices of OpenRouter models that have no configured price. Never fails.
pub async fn load(
    providers: &[Arc<ProviderConfig>],
    targets: &[Target],
    data_dir: &Path,
    now: DateTime<Utc>,
) -> PriceBook {
    load_within(providers, targets, data_dir, now, CACHE_TTL).await
}

/// The (provider, model) pairs whose price is published: OpenRouter models without a configured price.
fn wanted<'a>(providers: &'a [Arc<ProviderConfig>], targets: &'a [Target]) -> Vec<(&'a ProviderConfig, &'a str)> {
    // Each refresh asks this of every target: providers by name and pairs seen as sets, not scans.
    let by_name = crate::config::by_name(providers);
    let mut seen = std::collections::HashSet::new();
    let mut wanted: Vec<(&ProviderConfig, &str)> = Vec::new();
    for t in targets {
        let configured = |p: &ProviderConfig| p.price.is_some() || p.prices.contains_key(t.model.as_str());
        let Some(&p) = by_name.get(t.provider.as_str()).filter(|p| !configured(p) && is_openrouter(p)) else {
            continue;
        };
        if seen.insert((p.name.as_str(), t.model.as_str())) {
            wanted.push((p, t.model.as_str()));
        }
    }
    wanted
}

/// As [`load`], fetching again what the cache holds for longer than `max_age`.
pub async fn load_within(
    providers: &[Arc<ProviderConfig>],
    targets: &[Target],
    data_dir: &Path,
    now: DateTime<Utc>,
    max_age: Duration,
) -> PriceBook {
    let mut book = PriceBook { providers: crate::config::owned_by_name(providers), ..PriceBook::default() };
    let cache_path = data_dir.join(CACHE_FILE);
    let mut cache: Cache =
        std::fs::read(&cache_path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default();
    let client = match reqwest::Client::builder().timeout(Duration::from_secs(5)).build() {
        Ok(c) => Some(c),
        Err(e) => {
            book.notes.push(format!("published prices not fetched: {e}"));
            None
        }
    };
    let mut changed = false;
    for (p, model) in wanted(providers, targets) {
        let key = format!("{} {model}", p.base_url);
        let fresh = cache
            .entries
            .get(&key)
            .filter(|e| (now - e.fetched_at).to_std().is_ok_and(|age| age < max_age) && e.fetched_at <= now);
        let endpoints = match (fresh, &client) {
            (Some(e), _) => Some(e.endpoints.clone()),
            (None, Some(client)) => match fetch(client, p, model).await {
                Ok(endpoints) => {
                    cache.entries.insert(key, CacheEntry { fetched_at: now, endpoints: endpoints.clone() });
                    changed = true;
                    Some(endpoints)
                }
                Err(e) => {
                    tracing::info!(provider = %p.name, model, error = %e, "published prices unavailable");
                    let stale = cache.entries.get(&key).map(|e| e.endpoints.clone());
                    book.notes.push(match &stale {
                        Some(_) => format!("{} {model}: using cached prices ({e})", p.name),
                        None => format!("{} {model}: no published prices ({e})", p.name),
                    });
                    stale
                }
            },
            (None, None) => cache.entries.get(&key).map(|e| e.endpoints.clone()),
        };
        if let Some(e) = endpoints {
            book.published.insert((p.name.as_str().into(), model.into()), e);
        }
    }
    if changed {
        if let Err(e) = write_cache(&cache_path, &cache) {
            tracing::info!(path = %cache_path.display(), error = %e, "published price cache not written");
        }
    }
    book
}

/// Copies whatever the cache in `data_dir` holds for `targets` (whatever its age) into the
/// prober's `table`, without touching the network: the daemon's first probes are charged the
/// last known published prices while [`refresh`] fetches current ones.
pub fn publish_cached(
    providers: &[Arc<ProviderConfig>],
    targets: &[Target],
    data_dir: &Path,
    table: &crate::io::probe::PublishedPrices,
) {
    let Ok(bytes) = std::fs::read(data_dir.join(CACHE_FILE)) else { return };
    let Ok(cache) = serde_json::from_slice::<Cache>(&bytes) else { return };
    let Ok(mut t) = table.write() else { return };
    for (p, model) in wanted(providers, targets) {
        if let Some(e) = cache.entries.get(&format!("{} {model}", p.base_url)) {
            t.insert((p.name.as_str().into(), model.into()), e.endpoints.clone());
        }
    }
}

/// True when some target has a price OpenRouter publishes (the refresher has work).
pub fn anything_published(providers: &[Arc<ProviderConfig>], targets: &[Target]) -> bool {
    !wanted(providers, targets).is_empty()
}

/// One round of the daemon's price refresher: fetches the published prices of `targets` and
/// copies them into the prober's `table`, so OpenRouter samples are charged what `vigil report`
/// shows. A slow or failing fetch delays only the prices (samples meanwhile use the cached copy,
/// else the built-in table); `fresh_for` is how old a cached copy may be.
pub async fn refresh_once(
    providers: &[Arc<ProviderConfig>],
    targets: &[Target],
    data_dir: &Path,
    table: &crate::io::probe::PublishedPrices,
    fresh_for: Duration,
) {
    let book = load_within(providers, targets, data_dir, Utc::now(), fresh_for).await;
    book.publish_into(table);
    tracing::info!(models = book.published.len(), notes = ?book.notes, "published prices refreshed for samples");
}

async fn fetch(client: &reqwest::Client, p: &ProviderConfig, model: &str) -> Result<Vec<EndpointPrice>, PricingError> {
    let url = format!("{}/models/{}/endpoints", p.base_url.as_str().trim_end_matches('/'), model);
    let fail = |message: String| PricingError::Fetch { url: url.clone(), message };
    // The endpoints API is public: the key is not sent.
    let resp = client.get(&url).send().await.map_err(|e| fail(e.without_url().to_string()))?;
    if !resp.status().is_success() {
        return Err(fail(format!("HTTP {}", resp.status().as_u16())));
    }
    let body = crate::io::bounded::read_capped(resp, crate::io::bounded::ENDPOINTS_BODY_LIMIT)
        .await
        .map_err(|e| fail(e.to_string()))?;
    parse_endpoints(&body).map_err(|source| PricingError::Parse { url: url.clone(), source })
}

fn write_cache(path: &Path, cache: &Cache) -> std::io::Result<()> {
    let dir: PathBuf = path.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&dir)?;
    let tmp = tempfile::NamedTempFile::new_in(&dir)?;
    serde_json::to_writer_pretty(tmp.as_file(), cache)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::pricing::price_for;

    fn endpoints() -> Vec<EndpointPrice> {
        let body = br#"{"data":{"id":"meta-llama/llama-3-70b-instruct","endpoints":[
            {"provider_name":"DeepInfra","tag":"deepinfra/bf16","pricing":{"prompt":"0.00000059","completion":"0.00000079"}},
            {"provider_name":"Together","tag":"together","pricing":{"prompt":"0.00000088","completion":"0.00000088"}},
            {"provider_name":"Broken","pricing":{"prompt":"n/a","completion":"0"}}]}}"#;
        parse_endpoints(body).expect("documented shape parses")
    }

    #[test]
    fn prices_are_per_million_tokens_and_unreadable_ones_are_left_out() {
        let e = endpoints();
        assert_eq!(e.len(), 2);
        assert!((e[0].input_per_mtok - 0.59).abs() < 1e-9 && (e[0].output_per_mtok - 0.79).abs() < 1e-9);
    }

    #[test]
    fn a_route_takes_its_host_price_and_no_route_the_cheapest() {
        let e = endpoints();
        let together = price_for(Some("together"), &e).expect("matched case-insensitively");
        assert!((together.input_per_mtok - 0.88).abs() < 1e-9);
        assert!((price_for(Some("deepinfra"), &e).expect("by tag prefix").output_per_mtok - 0.79).abs() < 1e-9);
        assert!((price_for(None, &e).expect("cheapest").input_per_mtok - 0.59).abs() < 1e-9);
        assert_eq!(price_for(Some("Lepton"), &e), None, "an unknown host has no price");
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        assert!(parse_endpoints(b"{}").is_err());
        assert!(parse_endpoints(b"not json").is_err());
    }
}
