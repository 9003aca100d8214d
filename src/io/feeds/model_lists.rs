//! The models-list poller: its own task that reads, every `deprecation.models_every`, what each
//! provider's models endpoint says about the probed models — OpenRouter's `expiration_date`,
//! and whether a model the endpoint listed before is still listed — and publishes the resulting
//! retirement notices for the alert stage (`model_deprecated`).
//!
//! Sources: `GET {base_url}/models` for OpenAI-compatible providers (OpenRouter's list carries
//! `expiration_date`), `GET {base_url}/models/{model}` for Anthropic and Gemini (both resolve
//! aliases such as `claude-3-5-haiku-latest`, which their lists never show). A model counts as
//! "no longer listed" only once the endpoint listed it before (remembered in `storage.data_dir`),
//! so a server that never lists what it serves (llama.cpp answers any model name) raises
//! nothing. Reads are bounded (timeout, capped body) and go through the probes' proxy and trust
//! settings; a failed or malformed answer is logged and keeps the last findings. Probes never
//! wait on this task. A list is parsed as it streams in (`model_list_reader`), keeping only the
//! configured models: any answer under the cap costs well under a megabyte; the per-model
//! answers of Anthropic and Gemini are not read at all (their status says it).

use crate::config::{ProbeConfig, ProviderConfig, ProviderKind};
use crate::io::feeds::model_list_reader::read_list;
use crate::vocab::notice::{DeprecationSource, Notice};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Whole-request bound for one models read (connect, headers and body).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes read of a models list: OpenRouter's full list (every model with its description
/// and prices) is a few megabytes. The bytes are parsed as they arrive, never held.
pub const MODELS_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// File in `storage.data_dir` remembering which models each endpoint listed.
pub const SEEN_FILE: &str = "models-seen.json";
/// The first read waits this long after start (or one `models_every`, if shorter), so the
/// start-up's first probes go out alone.
pub const FIRST_READ_AFTER: Duration = Duration::from_secs(60);

/// Models lists read at the same time; a poll every few hours has no reason to hurry.
const READS_AT_ONCE: usize = 4;
/// Anthropic's API version header, as the probes send it.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Retirement notices from the models lists, by provider then model (looked up with borrowed
/// names: every probe of a round asks).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelNotices {
    by_provider: BTreeMap<String, BTreeMap<String, Vec<Notice>>>,
}

impl ModelNotices {
    /// What the lists say about `model` at `provider` (empty when nothing).
    pub fn of(&self, provider: &str, model: &str) -> &[Notice] {
        self.by_provider.get(provider).and_then(|m| m.get(model)).map_or(&[], Vec::as_slice)
    }

    /// Replaces what is known about `provider`'s models.
    fn set_provider(&mut self, provider: &str, notices: BTreeMap<String, Vec<Notice>>) {
        let known: BTreeMap<String, Vec<Notice>> = notices.into_iter().filter(|(_, n)| !n.is_empty()).collect();
        match known.is_empty() {
            true => self.by_provider.remove(provider),
            false => self.by_provider.insert(provider.to_string(), known),
        };
    }
}

/// The notices the poller publishes; the alert stage reads them each round.
pub type SharedModelNotices = Arc<RwLock<ModelNotices>>;

/// What one read of a provider's models endpoint said about its probed models.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Probed model → listed (true) or answered as not listed (false); models the read could
    /// not tell about are absent.
    pub listed: BTreeMap<String, bool>,
    /// Probed model → the expiration date OpenRouter's list gives it.
    pub expires: BTreeMap<String, DateTime<Utc>>,
}

/// What each endpoint listed, kept across reads and restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SeenModels {
    /// Provider → model → what was seen of it.
    providers: BTreeMap<String, BTreeMap<String, SeenModel>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SeenModel {
    /// Last read that listed the model.
    listed_at: DateTime<Utc>,
    /// First read (after it was listed) that no longer listed it.
    missing_since: Option<DateTime<Utc>>,
}

impl SeenModels {
    /// The remembered state in `path`; a missing or unreadable file starts empty.
    pub fn load(path: &Path) -> SeenModels {
        std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// Writes the state to `path` atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        write_atomically(path, &serde_json::to_vec(self)?)
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, so a crash leaves the old file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir: PathBuf = path.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The decision, pure: folds one reading of `provider` into `seen` and returns each model's
/// notices. A model the endpoint listed before and no longer lists is `MissingFromModels` from
/// the first read that missed it; a model never listed raises nothing; a model the read could
/// not tell about keeps what was known.
pub fn judge(
    seen: &mut SeenModels,
    provider: &str,
    reading: &Reading,
    now: DateTime<Utc>,
) -> BTreeMap<String, Vec<Notice>> {
    let models = seen.providers.entry(provider.to_string()).or_default();
    for (model, listed) in &reading.listed {
        match (listed, models.get_mut(model)) {
            (true, Some(m)) => {
                m.listed_at = now;
                m.missing_since = None;
            }
            (true, None) => {
                models.insert(model.clone(), SeenModel { listed_at: now, missing_since: None });
            }
            (false, Some(m)) => {
                m.missing_since.get_or_insert(now);
            }
            (false, None) => {}
        }
    }
    let mut out: BTreeMap<String, Vec<Notice>> = BTreeMap::new();
    for (model, m) in models.iter() {
        if let Some(since) = m.missing_since {
            out.entry(model.clone())
                .or_default()
                .push(Notice { source: DeprecationSource::MissingFromModels, date: since });
        }
    }
    for (model, date) in &reading.expires {
        out.entry(model.clone())
            .or_default()
            .push(Notice { source: DeprecationSource::OpenRouterExpiration, date: *date });
    }
    out
}

/// Reads every provider's models endpoint every `models_every` and publishes the notices.
pub struct ModelsPoller {
    providers: Vec<(Arc<ProviderConfig>, reqwest::Client)>,
    every: Option<Duration>,
    shared: SharedModelNotices,
    seen_path: PathBuf,
    timeout: Duration,
}

impl ModelsPoller {
    /// A poller over the providers that have a models endpoint (not `azure`, not `http`),
    /// reading with the probes' proxy and trust settings.
    pub fn new(
        providers: &[Arc<ProviderConfig>],
        probe: &ProbeConfig,
        every: Option<Duration>,
        data_dir: &Path,
        shared: SharedModelNotices,
    ) -> Self {
        Self::with_timeout(providers, probe, every, data_dir, shared, FETCH_TIMEOUT)
    }

    /// As [`Poller::new`] with another per-read bound (tests use a short one).
    pub fn with_timeout(
        providers: &[Arc<ProviderConfig>],
        probe: &ProbeConfig,
        every: Option<Duration>,
        data_dir: &Path,
        shared: SharedModelNotices,
        timeout: Duration,
    ) -> Self {
        let mut polled = Vec::new();
        // One client for every provider without a TLS setting of its own: each client parses
        // the whole root store, about 60 KB, which at 500 providers was most of the daemon's heap.
        let mut shared_client: Option<Result<reqwest::Client, String>> = None;
        for p in providers
            .iter()
            .filter(|p| matches!(p.kind, ProviderKind::Openai | ProviderKind::Anthropic | ProviderKind::Gemini))
        {
            let client = if p.tls.is_custom() {
                client_for(probe, p, timeout)
            } else {
                shared_client.get_or_insert_with(|| client_for(probe, p, timeout)).clone()
            };
            match client {
                Ok(c) => polled.push((p.clone(), c)),
                Err(e) => tracing::warn!(provider = %p.name, error = %e, "models list not polled"),
            }
        }
        ModelsPoller { providers: polled, every, shared, seen_path: data_dir.join(SEEN_FILE), timeout }
    }

    /// How often to read: the first read after `FIRST_READ_AFTER` (or the period, if shorter),
    /// then every period; `None` when switched off or nothing is polled.
    pub fn cadence(&self) -> Option<(Duration, Duration)> {
        self.every.filter(|_| !self.providers.is_empty()).map(|every| (every.min(FIRST_READ_AFTER), every))
    }

    /// What earlier reads saw (kept in the data directory across restarts).
    pub fn load_seen(&self) -> SeenModels {
        SeenModels::load(&self.seen_path)
    }

    /// Reads every provider once (concurrently), publishes the notices and saves what was seen.
    pub async fn poll_once(&self, mut seen: SeenModels, now: DateTime<Utc>) -> SeenModels {
        // Whether a reading told anything (each listed model's time moves): no copy of `seen` is
        // kept to compare with, at 10,000 providers that was megabytes at the first evaluation.
        let mut told = false;
        // A few reads at a time: each holds a connection and up to MODELS_BODY_LIMIT of body, and
        // all 500 of a large fleet at once made this poll the daemon's peak memory.
        // Collected first: a lazy `map` inside the stream trips the compiler's `Send` check of the task.
        let reads: Vec<_> = self.providers.iter().map(|(p, client)| self.read(p, client)).collect();
        let results: Vec<_> = futures::stream::iter(reads).buffered(READS_AT_ONCE).collect().await;
        for ((p, _), result) in self.providers.iter().zip(results) {
            match result {
                Ok(reading) => {
                    told |= !reading.listed.is_empty();
                    let notices = judge(&mut seen, &p.name, &reading, now);
                    for (model, n) in &notices {
                        for n in n {
                            tracing::info!(provider = %p.name, model = %model, source = ?n.source, date = %n.date,
                                "models list announces a retirement");
                        }
                    }
                    let mut shared = self.shared.write().unwrap_or_else(|e| e.into_inner());
                    shared.set_provider(&p.name, notices);
                }
                Err(why) => {
                    tracing::info!(provider = %p.name, error = %why, "models list not read; keeping the last findings")
                }
            }
        }
        if told {
            // The text goes to the blocking write, not a copy of the map (about three times its size).
            let path = self.seen_path.clone();
            let saved = match serde_json::to_vec(&seen) {
                Ok(bytes) => tokio::task::spawn_blocking(move || write_atomically(&path, &bytes))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e))),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = saved {
                tracing::warn!(path = %self.seen_path.display(), error = %e, "models seen not saved; kept in memory");
            }
        }
        seen
    }

    /// One provider's reading, or why not.
    async fn read(&self, p: &ProviderConfig, client: &reqwest::Client) -> Result<Reading, String> {
        let mut reading = Reading::default();
        match p.kind {
            ProviderKind::Openai => {
                let url = crate::io::probe::join(&p.base_url, "models")?;
                let wanted: std::collections::BTreeSet<String> = p.models.iter().cloned().collect();
                let facts = self
                    .get(p, client, url, |resp| async move {
                        if !resp.status().is_success() {
                            return Err(format!("HTTP {}", resp.status().as_u16()));
                        }
                        read_list(resp, MODELS_BODY_LIMIT, wanted).await
                    })
                    .await?;
                if facts.ids == 0 {
                    return Err("the models list is empty".into());
                }
                for m in &p.models {
                    reading.listed.insert(m.clone(), facts.listed.contains(m));
                }
                if crate::decide::pricing::is_openrouter(p) {
                    reading.expires = facts.expires;
                }
            }
            ProviderKind::Anthropic | ProviderKind::Gemini => {
                let mut last_error = None;
                for m in &p.models {
                    let url = crate::io::probe::join(&p.base_url, &format!("models/{m}"))?;
                    // The status says it all; the body is never read.
                    match self.get(p, client, url, |resp| async move { Ok(resp.status().as_u16()) }).await {
                        Ok(status) if (200..300).contains(&status) => {
                            reading.listed.insert(m.clone(), true);
                        }
                        Ok(404) => {
                            reading.listed.insert(m.clone(), false);
                        }
                        Ok(status) => last_error = Some(format!("{m}: HTTP {status}")),
                        Err(e) => last_error = Some(format!("{m}: {e}")),
                    }
                }
                if let (true, Some(e)) = (reading.listed.is_empty(), last_error) {
                    return Err(e);
                }
            }
            // Bedrock and Vertex list models on other (control-plane) APIs with other permissions.
            ProviderKind::Azure | ProviderKind::Http | ProviderKind::Bedrock | ProviderKind::Vertex => {}
        }
        Ok(reading)
    }

    /// A GET with the provider's credentials, its answer given to `answer`, all within the timeout.
    async fn get<T, F>(
        &self,
        p: &ProviderConfig,
        client: &reqwest::Client,
        url: url::Url,
        answer: impl FnOnce(reqwest::Response) -> F,
    ) -> Result<T, String>
    where
        F: std::future::Future<Output = Result<T, String>>,
    {
        let mut req = client.get(url).header("accept", "application/json");
        if let Some(key) = &p.api_key {
            let key = secrecy::ExposeSecret::expose_secret(key);
            req = match p.kind {
                ProviderKind::Anthropic => req.header("x-api-key", key).header("anthropic-version", ANTHROPIC_VERSION),
                ProviderKind::Gemini => req.header("x-goog-api-key", key),
                _ => req.header("authorization", format!("Bearer {key}")),
            };
        }
        for (k, v) in p.headers.iter().map(|(k, v)| (k.clone(), v.clone())).chain(crate::io::probe::secret_headers(p)) {
            req = req.header(k, v);
        }
        let work = async {
            // The URL never goes into the error: a Gemini-style key could sit in a query string.
            let resp = req.send().await.map_err(|e| e.without_url().to_string())?;
            answer(resp).await
        };
        match tokio::time::timeout(self.timeout + Duration::from_millis(100), work).await {
            Ok(r) => r,
            Err(_) => Err(format!("no complete answer within {} ms", self.timeout.as_millis())),
        }
    }
}

/// A client that reaches `p` as its probes do: the same proxy (`probe.proxy`, `HTTPS_PROXY`,
/// `NO_PROXY`), the same roots (system, built-in, `ca_file`) and client certificate.
fn client_for(probe: &ProbeConfig, p: &ProviderConfig, timeout: Duration) -> Result<reqwest::Client, String> {
    let roots: Vec<_> = probe.ca_certs.iter().chain(&p.tls.ca_certs).cloned().collect();
    let tls = crate::io::probe::trust::client_config(&roots, p.tls.client.as_ref())?;
    let no_proxy = || reqwest::NoProxy::from_string(&probe.proxy.no_proxy.join(","));
    // The probes' resolved proxy settings replace reqwest's own reading of the environment.
    let mut builder = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("vigil/", env!("CARGO_PKG_VERSION"), " (models list poller)"))
        // Hours pass between polls: an idle connection kept would only hold memory.
        .pool_max_idle_per_host(0)
        .no_proxy();
    if let Some(u) = &probe.proxy.https {
        builder = builder.proxy(reqwest::Proxy::https(u.as_str()).map_err(|e| e.to_string())?.no_proxy(no_proxy()));
    }
    if let Some(u) = &probe.proxy.http {
        builder = builder.proxy(reqwest::Proxy::http(u.as_str()).map_err(|e| e.to_string())?.no_proxy(no_proxy()));
    }
    builder.build().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("date").with_timezone(&Utc)
    }

    fn listed(pairs: &[(&str, bool)]) -> Reading {
        Reading { listed: pairs.iter().map(|(m, l)| (m.to_string(), *l)).collect(), ..Reading::default() }
    }

    #[test]
    fn only_a_model_listed_before_and_then_missing_is_a_notice() {
        let mut seen = SeenModels::default();
        let (t0, t1, t2) = (at("2026-12-01T00:00:00Z"), at("2026-12-01T06:00:00Z"), at("2026-12-01T12:00:00Z"));
        let n = judge(&mut seen, "openai", &listed(&[("gpt-old", true), ("alias-latest", false)]), t0);
        assert!(n.is_empty(), "listed, or never listed (an alias, a server listing other names): {n:?}");
        let n = judge(&mut seen, "openai", &listed(&[("gpt-old", false), ("alias-latest", false)]), t1);
        assert_eq!(n.len(), 1, "{n:?}");
        assert_eq!(n["gpt-old"], vec![Notice { source: DeprecationSource::MissingFromModels, date: t1 }]);
        // Still missing later: the date stays the first read that missed it.
        let n = judge(&mut seen, "openai", &listed(&[("gpt-old", false)]), t2);
        assert_eq!(n["gpt-old"][0].date, t1);
        // A read that cannot tell about the model keeps what was known.
        let n = judge(&mut seen, "openai", &Reading::default(), t2);
        assert_eq!(n["gpt-old"][0].date, t1);
        // Listed again: the notice is gone.
        assert!(judge(&mut seen, "openai", &listed(&[("gpt-old", true)]), t2).is_empty());
        // Providers are apart.
        assert!(judge(&mut seen, "groq", &listed(&[("gpt-old", false)]), t2).is_empty());
    }

    #[test]
    fn expiration_dates_are_notices_and_seen_state_survives_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(SEEN_FILE);
        let mut seen = SeenModels::default();
        let now = at("2026-12-01T00:00:00Z");
        let mut r = listed(&[("x/old", true)]);
        r.expires.insert("x/old".into(), at("2026-12-15T00:00:00Z"));
        let n = judge(&mut seen, "openrouter", &r, now);
        assert_eq!(
            n["x/old"],
            vec![Notice { source: DeprecationSource::OpenRouterExpiration, date: r.expires["x/old"] }]
        );
        seen.save(&path).expect("saved");
        let mut again = SeenModels::load(&path);
        assert_eq!(again, seen);
        let n = judge(&mut again, "openrouter", &listed(&[("x/old", false)]), now);
        assert_eq!(n["x/old"][0].source, DeprecationSource::MissingFromModels, "remembered across a restart");
        std::fs::write(&path, b"{ not json").expect("write");
        assert_eq!(SeenModels::load(&path), SeenModels::default(), "an unreadable file starts empty");
    }

    #[test]
    fn published_notices_replace_a_providers_earlier_ones() {
        let mut n = ModelNotices::default();
        let notice = Notice { source: DeprecationSource::MissingFromModels, date: at("2026-12-01T00:00:00Z") };
        n.set_provider("a", [("m".to_string(), vec![notice.clone()])].into());
        n.set_provider("b", [("m".to_string(), vec![notice.clone()])].into());
        assert_eq!(n.of("a", "m"), std::slice::from_ref(&notice));
        n.set_provider("a", BTreeMap::new());
        assert!(n.of("a", "m").is_empty());
        assert_eq!(n.of("b", "m").len(), 1);
    }
}
