//! The timed probe: adapters build requests and read stream events; the driver here owns the
//! socket, the clocks, the timeouts and the classification.
//!
//! Each probe dials a fresh connection ([`timing`]) and runs one HTTP/1.1 exchange on it in its
//! own task ([`h1`]); every socket read is stamped with the instant the kernel received its
//! bytes ([`socket`]): the first response byte and each body piece carry it. Past its first
//! token a stream's socket is read at the probe thread's ticks ([`grid`]), not per event. A
//! failed probe is returned as a [`Sample`] with its [`Outcome`].

pub(crate) mod anthropic;
pub(crate) mod azure;
pub mod bedrock;
pub mod classify;
pub(crate) mod embeddings;
pub mod eventstream;
pub mod gemini;
pub(crate) mod grace;
pub mod grid;
pub mod h1;
pub(crate) mod http;
pub(crate) mod openai;
pub mod proxy;
pub(crate) mod responses;
pub mod scrub;
pub(crate) mod socket;
pub mod sse;
pub(crate) mod timing;
pub(crate) mod trust;
pub(crate) mod vertex;

use crate::config::{Endpoint, ProbeConfig, ProviderConfig, ProviderKind};
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::{Name, Target};
use chrono::{DateTime, Utc};
use classify::classify_http_error;
use h1::{Exchange, H1Error};
use sse::{SseEvent, SseParser};
use std::sync::Arc;
use std::time::{Duration, Instant};
use timing::Phases;
use tokio_rustls::TlsConnector;
use url::Url;

/// The fixed instruction every chat probe sends; the reply is checked against it (`adherence_ok`).
pub const SYSTEM_PROMPT: &str = "You are a health check. Reply with exactly this JSON and nothing else: {\"ok\":true}";
/// The user turn of every chat probe.
pub const USER_PROMPT: &str = "ping";
/// Hex digits of the per-probe nonce: 48 random bits, so two probes practically never share one.
pub const NONCE_LEN: usize = 12;

/// A fresh random nonce for one probe.
pub fn nonce() -> String {
    let n: u64 = rand::random();
    format!("{:012x}", n & 0xffff_ffff_ffff)
}

/// The system prompt of one probe: the nonce is its very first text, so the prompt differs from every
/// earlier one from its first token after the chat template and no prefix or prompt cache
/// (llama.cpp's KV reuse, vLLM prefix caching, hosted prompt caches) can answer it.
pub fn system_prompt(nonce: &str) -> String {
    format!("{nonce}. {SYSTEM_PROMPT}")
}
/// Extra output budget for reasoning models so an answer still arrives after the thinking.
pub const REASONING_EXTRA_TOKENS: u32 = 1024;
/// Most bytes of an error body read for classification.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// Most bytes of failure text held while reading; `scrub::finalise` cuts it to
/// `scrub::MAX_ERROR_BYTES` after scrubbing, so a cut never leaves half a secret behind.
const ERROR_TEXT_LIMIT: usize = 8 * 1024;
/// Most visible text kept for the adherence check.
const ANSWER_LIMIT: usize = 4096;

/// True when the reply is exactly the JSON object the system prompt demands.
pub fn adherent(answer: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(answer.trim())
        .ok()
        .and_then(|v| v.as_object().map(|o| o.len() == 1 && o.get("ok") == Some(&serde_json::Value::Bool(true))))
        .unwrap_or(false)
}

/// A request an adapter wants sent.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// HTTP method.
    pub method: ::http::Method,
    /// Absolute URL.
    pub url: Url,
    /// Headers besides Host, User-Agent and Content-Length.
    pub headers: Vec<(String, String)>,
    /// JSON body, if any.
    pub body: Option<Vec<u8>>,
}

/// What an adapter needs to build one probe request.
#[derive(Debug, Clone, Copy)]
pub struct ProbeParams<'a> {
    /// Provider settings (base URL, key, headers).
    pub provider: &'a ProviderConfig,
    /// Model id.
    pub model: &'a str,
    /// Pinned upstream route.
    pub route: Option<&'a str>,
    /// Output token budget for the visible answer.
    pub max_tokens: u32,
    /// The model streams reasoning: ask for the smallest effort and leave room for an answer.
    pub reasoning: bool,
    /// This probe's random nonce, put at the start of the system prompt ([`system_prompt`]).
    pub nonce: &'a str,
    /// A canary run: its fixed prompt replaces the health-check one (no nonce).
    pub canary: Option<&'a CanaryRequest>,
    /// What [`Adapter::credential`] fetched for this provider (an OAuth token, AWS keys).
    pub credential: Option<&'a Credential>,
}

/// What a canary run asks instead of the health check ([`crate::vocab::canary`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryRequest {
    /// The fixed instruction.
    pub system: String,
    /// The fixed questions.
    pub user: String,
    /// Output budget of the run.
    pub max_tokens: u32,
    /// `seed` sent where the API has one (OpenAI-compatible, Gemini).
    pub seed: Option<u64>,
    /// Ask OpenAI-compatible APIs for log-probabilities (`logprobs: true`).
    pub logprobs: bool,
    /// A capability probe: the adapter adds the capability's part of the request (the declared
    /// function, the JSON mode, the schema; `decide::capability`).
    pub capability: Option<crate::vocab::capability::Capability>,
    /// Put the probe's nonce first in the system turn, as the tiny probe does, so no prefix or
    /// prompt cache can answer it (a long-prompt probe: `decide::workload`).
    pub nonce_first: bool,
}

impl CanaryRequest {
    /// The request of a capability probe (`decide::capability::ask`).
    pub fn for_capability(capability: crate::vocab::capability::Capability) -> Self {
        let ask = crate::decide::capability::ask(capability);
        CanaryRequest {
            system: ask.system.to_string(),
            user: ask.user.to_string(),
            max_tokens: crate::decide::capability::MAX_TOKENS,
            seed: None,
            logprobs: false,
            capability: Some(capability),
            nonce_first: false,
        }
    }
}

impl ProbeParams<'_> {
    /// The system and user turns this probe sends.
    pub fn prompts(&self) -> (String, String) {
        match self.canary {
            Some(c) if c.nonce_first => (format!("{}. {}", self.nonce, c.system), c.user.clone()),
            Some(c) => (c.system.clone(), c.user.clone()),
            None => (system_prompt(self.nonce), USER_PROMPT.to_string()),
        }
    }

    /// The capability a capability probe asks for, if this is one.
    pub fn capability(&self) -> Option<crate::vocab::capability::Capability> {
        self.canary.and_then(|c| c.capability)
    }

    /// The output budget for the visible answer.
    pub fn answer_tokens(&self) -> u32 {
        self.canary.map_or(self.max_tokens, |c| c.max_tokens)
    }
}

/// Usage as reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Prompt tokens.
    pub input: Option<u32>,
    /// Completion tokens (all, including reasoning when the provider counts it there).
    pub output: Option<u32>,
    /// Of which reasoning tokens, when reported.
    pub reasoning: Option<u32>,
    /// Cost the provider reports (OpenRouter `usage.cost`).
    pub cost_usd: Option<f64>,
}

/// What one stream event means to the probe.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signals {
    /// Visible text carried by the event (non-empty only).
    pub content: Option<String>,
    /// The event carries reasoning/thinking.
    pub reasoning: bool,
    /// Usage report (later reports replace earlier ones: they are cumulative).
    pub usage: Option<Usage>,
    /// An error event or an unreadable event: the failure text, with the provider's error type
    /// when it gave one. Inside an accepted stream this is always a `stream_error`.
    pub error: Option<String>,
    /// The stream's terminator (`[DONE]`, `message_stop`, a Gemini `finishReason`).
    pub done: bool,
    /// Provider's id for the response.
    pub request_id: Option<String>,
    /// The model identity the event reports (echoed `model`, `system_fingerprint`, upstream).
    pub identity: crate::vocab::canary::ModelIdentity,
    /// Log-probabilities of the event's tokens, when returned.
    pub logprobs: Option<crate::vocab::canary::Logprobs>,
    /// A piece of a function call (a capability probe's `tools`).
    pub tool: Option<ToolDelta>,
}

/// A piece of a streamed function call: its name when the piece carries it, and a piece of its
/// JSON arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolDelta {
    /// The function's name (usually on the first piece only).
    pub name: Option<String>,
    /// A piece of the arguments' JSON text.
    pub arguments: String,
}

/// A credential fetched before the timed exchange, never inside it.
#[derive(Clone)]
pub enum Credential {
    /// An OAuth access token, sent as `Authorization: Bearer`.
    Bearer(secrecy::SecretString),
    /// AWS keys that sign the request (SigV4).
    Aws(bedrock::AwsKeys),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Bearer(_) => f.write_str("Bearer([redacted])"),
            Credential::Aws(k) => write!(f, "Aws({}, [redacted])", k.access_key_id),
        }
    }
}

impl Credential {
    /// The secret values it holds, for the scrubber.
    fn secrets(&self) -> Vec<String> {
        use secrecy::ExposeSecret;
        match self {
            Credential::Bearer(t) => vec![t.expose_secret().to_string()],
            Credential::Aws(k) => std::iter::once(&k.secret_access_key)
                .chain(&k.session_token)
                .map(|s| s.expose_secret().to_string())
                .collect(),
        }
    }
}

/// A fetched credential and until when it is reused.
#[derive(Clone)]
pub struct Minted {
    /// The credential.
    pub credential: Credential,
    /// Reused by every probe of the provider until this instant.
    pub fresh_until: Instant,
}

/// A fetch of a credential that failed: the probe's outcome and the text naming the step.
pub type CredentialError = (Outcome, String);

/// One file per provider kind: build the request, interpret stream events.
pub trait Adapter: Send + Sync {
    /// The request for one probe.
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String>;
    /// Whether the response is a stream (false: a plain body where 2xx is success).
    fn streams(&self) -> bool {
        true
    }
    /// Whether the stream is an `application/vnd.amazon.eventstream` binary stream, read with
    /// [`interpret_message`](Self::interpret_message), rather than SSE.
    fn event_stream(&self) -> bool {
        false
    }
    /// Interprets one SSE event; malformed JSON becomes an error signal, never a panic.
    fn interpret(&self, event: &SseEvent) -> Signals;
    /// Whether a plain (non-stream) 2xx body is kept and judged by [`Adapter::interpret_body`];
    /// false: any 2xx is success and the body is only drained.
    fn reads_body(&self) -> bool {
        false
    }
    /// Interprets a whole plain body (up to `probe.max_body_kb`); content marks the answer,
    /// arriving with the body's last byte. Malformed data becomes an error signal, never a panic.
    fn interpret_body(&self, _body: &[u8]) -> Signals {
        Signals::default()
    }
    /// Interprets one event-stream message (only asked of kinds whose [`event_stream`](Self::event_stream) is true).
    fn interpret_message(&self, _message: &eventstream::Message) -> Signals {
        Signals { error: Some("unexpected binary event stream".into()), ..Signals::default() }
    }
    /// Fetches the credential the request needs, before (and never inside) the timed exchange;
    /// `None` for kinds whose key is in the config. The prober caches what it returns per provider.
    fn credential<'a>(
        &'a self,
        _fetch: Fetch<'a>,
    ) -> Option<futures::future::BoxFuture<'a, Result<Minted, CredentialError>>> {
        None
    }
}

/// What fetching a credential may use: the provider's settings, and one untimed HTTP exchange
/// through the prober's own way out (its TLS trust, proxy and connect timeout).
#[derive(Clone, Copy)]
pub struct Fetch<'a> {
    prober: &'a Prober,
    provider: &'a ProviderConfig,
}

impl<'a> Fetch<'a> {
    /// The provider the credential is for.
    pub fn provider(&self) -> &'a ProviderConfig {
        self.provider
    }

    /// POSTs a form to `url` and returns the status and (at most 64 KB of) the body; a failure
    /// carries the outcome of its step (DNS, connect, TLS, timeout).
    pub async fn post_form(&self, url: &Url, form: &str) -> Result<(u16, Vec<u8>), CredentialError> {
        let host = url.host_str().ok_or_else(|| (Outcome::ClientError, format!("{url} has no host")))?.to_string();
        let port = url.port_or_known_default().unwrap_or(80);
        let connector = match url.scheme() {
            "https" => Some(self.prober.connector_for(self.provider).map_err(|e| (Outcome::TlsError, e))?),
            _ => None,
        };
        let cfg = &self.prober.cfg;
        let proxy = cfg.proxy.for_target(url.scheme(), &host);
        let exchange = async {
            let (stream, _) = timing::dial(&host, port, connector.as_ref(), cfg.connect_timeout, proxy)
                .await
                .map_err(|e| (e.outcome, e.message))?;
            let host_header = match url.port() {
                Some(_) => format!("{host}:{port}"),
                None => host.clone(),
            };
            let target = match url.query() {
                Some(q) => format!("{}?{q}", url.path()),
                None => url.path().to_string(),
            };
            let headers = [
                ("User-Agent", concat!("vigil/", env!("CARGO_PKG_VERSION"))),
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Accept", "application/json"),
            ];
            let request = h1::encode_request("POST", &target, &host_header, headers, Some(form.as_bytes()))
                .map_err(|e| (Outcome::ClientError, e.to_string()))?;
            let mut conn = Exchange::new(stream);
            let failed = |e: H1Error| (io_outcome(&e), e.to_string());
            conn.send(request).await.map_err(failed)?;
            let head = conn.read_head().await.map_err(failed)?;
            let mut body = Vec::new();
            while body.len() < ERROR_BODY_LIMIT {
                match conn.frame().await {
                    Ok(Some(frame)) => body.extend_from_slice(frame.data),
                    Ok(None) => break,
                    Err(e) => return Err(failed(e)),
                }
            }
            body.truncate(ERROR_BODY_LIMIT);
            Ok((head.status, body))
        };
        match tokio::time::timeout(cfg.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err((Outcome::Timeout, format!("no answer within {}", humantime::format_duration(cfg.timeout)))),
        }
    }
}

/// The adapter a provider's targets are probed with: its endpoint's, else its kind's.
pub fn adapter_of(p: &ProviderConfig) -> &'static dyn Adapter {
    match p.endpoint {
        Endpoint::Embeddings => &embeddings::Embeddings,
        Endpoint::Responses => &responses::Responses,
        Endpoint::Chat => adapter_for(p.kind),
    }
}

/// The chat adapter of a provider kind.
pub fn adapter_for(kind: ProviderKind) -> &'static dyn Adapter {
    match kind {
        ProviderKind::Openai => &openai::OpenAi,
        ProviderKind::Anthropic => &anthropic::Anthropic,
        ProviderKind::Azure => &azure::Azure,
        ProviderKind::Gemini => &gemini::Gemini,
        ProviderKind::Http => &http::PlainHttp,
        ProviderKind::Bedrock => &bedrock::Bedrock,
        ProviderKind::Vertex => &vertex::Vertex,
    }
}

/// Joins a base URL and a path without losing the base's own path (`…/api/v1` + `chat/completions`).
pub fn join(base: &Url, path: &str) -> Result<Url, String> {
    let mut s = base.as_str().trim_end_matches('/').to_string();
    s.push('/');
    s.push_str(path.trim_start_matches('/'));
    Url::parse(&s).map_err(|e| format!("{s}: {e}"))
}

/// Parses an event's JSON, turning malformed data into a stream error signal.
pub fn parse_json(event: &SseEvent) -> Result<serde_json::Value, Box<Signals>> {
    serde_json::from_str(&event.data)
        .map_err(|e| Box::new(Signals { error: Some(format!("malformed event JSON: {e}")), ..Signals::default() }))
}

/// A streaming JSON POST: SSE accept header, the key under `key_header` (formatted by
/// `key_value`), the adapter's `extra` headers, then the provider's own headers.
pub fn streaming_post(
    p: &ProbeParams<'_>,
    url: Url,
    body: &serde_json::Value,
    key_header: &str,
    key_value: impl Fn(&str) -> String,
    extra: &[(&str, &str)],
) -> Result<RequestSpec, String> {
    json_post(p, url, body, "text/event-stream", key_header, key_value, extra)
}

/// A JSON POST accepting `accept`, with the headers of [`streaming_post`].
pub fn json_post(
    p: &ProbeParams<'_>,
    url: Url,
    body: &serde_json::Value,
    accept: &str,
    key_header: &str,
    key_value: impl Fn(&str) -> String,
    extra: &[(&str, &str)],
) -> Result<RequestSpec, String> {
    let mut headers = vec![("accept".to_string(), accept.to_string())];
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    if let Some(key) = &p.provider.api_key {
        headers.push((key_header.to_string(), key_value(secrecy::ExposeSecret::expose_secret(key))));
    }
    headers.extend(p.provider.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    headers.extend(secret_headers(p.provider));
    let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    Ok(RequestSpec { method: ::http::Method::POST, url, headers, body: Some(body) })
}

/// The provider's `headers_env` headers, values exposed for the wire only.
pub fn secret_headers(p: &ProviderConfig) -> impl Iterator<Item = (String, String)> + '_ {
    p.secret_headers.iter().map(|h| (h.name.clone(), secrecy::ExposeSecret::expose_secret(&h.value).to_string()))
}

/// Reads a non-negative integer field as u32.
pub fn as_u32(v: &serde_json::Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// Builds an error signal from an error object, keeping the provider's error type in its text
/// (`error event overloaded_error: Overloaded`) so the sample says what the provider reported.
pub fn error_signal(err: &serde_json::Value) -> Signals {
    let message = err
        .get("message")
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| truncate(&err.to_string(), 300));
    let text = match error_type(err) {
        Some(kind) => format!("error event {kind}: {message}"),
        None => format!("error event: {message}"),
    };
    Signals { error: Some(text), ..Signals::default() }
}

/// The provider's name for an error: OpenAI/Anthropic/Groq `type` (with a differing string
/// `code`), Gemini `status`, OpenRouter `metadata.error_type`, else a bare `code`.
fn error_type(err: &serde_json::Value) -> Option<String> {
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).filter(|t| !t.is_empty()).map(str::to_string);
    let code = err.get("code").and_then(|c| match c {
        serde_json::Value::String(t) if !t.is_empty() => Some(t.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let named = text(err.get("type"))
        .or_else(|| text(err.get("status")))
        .or_else(|| text(err.get("metadata").and_then(|m| m.get("error_type"))));
    match (named, code) {
        (Some(kind), Some(code)) if code != kind && code.parse::<u32>().is_err() => Some(format!("{kind} ({code})")),
        (Some(kind), _) => Some(kind),
        (None, code) => code,
    }
}

/// One thing to probe: a target and the provider settings it uses.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Identity.
    pub target: Target,
    /// Provider settings.
    pub provider: Arc<ProviderConfig>,
}

impl Planned {
    /// Every target the providers define, in config order. Targets of one provider, model,
    /// route or region share that name's one string ([`Name`]).
    pub fn all(providers: &[Arc<ProviderConfig>], region: &str) -> Vec<Planned> {
        let mut out = Vec::new();
        let region = Name::from(region);
        for p in providers {
            let provider = Name::from(&p.name);
            let routes: Vec<Option<Name>> =
                if p.routes.is_empty() { vec![None] } else { p.routes.iter().map(|r| Some(r.into())).collect() };
            for model in p.models.iter().map(Name::from) {
                for route in &routes {
                    out.push(Planned {
                        target: Target::new(provider.clone(), model.clone(), route.clone(), region.clone()),
                        provider: p.clone(),
                    });
                }
            }
        }
        out
    }
}

/// OpenRouter's published per-endpoint prices by (provider name, model), shared between the
/// prober (which prices samples with them) and whoever refreshes them ([`crate::io::feeds::prices::load`]).
pub type PublishedPrices =
    Arc<std::sync::RwLock<std::collections::BTreeMap<(Name, Name), Vec<crate::decide::pricing::EndpointPrice>>>>;

/// Runs probes. Cheap to share: one per process.
#[derive(Clone)]
pub struct Prober {
    cfg: ProbeConfig,
    tls: TlsConnector,
    published: PublishedPrices,
    /// `probe.ca_file` plus the caller's extra roots: what every connector trusts besides the
    /// system and built-in roots.
    roots: Arc<Vec<rustls::pki_types::CertificateDer<'static>>>,
    /// Connectors of providers with their own `ca_file` or client certificate, built on first use.
    per_provider: Arc<std::sync::Mutex<std::collections::HashMap<String, Result<TlsConnector, String>>>>,
    /// Fetched credentials (OAuth tokens, AWS keys) per provider: one fetch at a time each.
    credentials: Arc<std::sync::Mutex<std::collections::HashMap<String, CredentialSlot>>>,
}

/// One provider's cached credential; its lock makes concurrent probes wait for one fetch.
type CredentialSlot = Arc<tokio::sync::Mutex<Option<Minted>>>;

/// Everything learned while reading a response; turned into a [`Sample`] at the end.
#[derive(Default)]
struct Reading {
    phases: Phases,
    ttfb: Option<Duration>,
    ttft: Option<Duration>,
    ttfr: Option<Duration>,
    total: Option<Duration>,
    status: Option<u16>,
    outcome: Option<Outcome>,
    error: Option<String>,
    request_id: Option<String>,
    usage: Usage,
    content_events: u32,
    answer: String,
    retry_after_s: Option<f64>,
    ratelimit: crate::vocab::ratelimit::Headroom,
    streamed: bool,
    deprecation: Vec<crate::vocab::notice::Notice>,
    identity: crate::vocab::canary::ModelIdentity,
    logprobs: Option<crate::vocab::canary::Logprobs>,
    tool: Option<crate::decide::capability::ToolCall>,
}

/// What a canary run reads besides the sample: the answer text and the model's identity.
#[derive(Debug, Clone, Default)]
pub struct CanaryReading {
    /// Visible answer text (up to 4 KB).
    pub answer: String,
    /// The model identity the stream reported.
    pub identity: crate::vocab::canary::ModelIdentity,
    /// Log-probabilities, when returned.
    pub logprobs: Option<crate::vocab::canary::Logprobs>,
    /// The function call the stream made, if any (a capability probe's `tools`).
    pub tool_call: Option<crate::decide::capability::ToolCall>,
}

impl Prober {
    /// A prober with the given limits, trusting the public web roots plus `extra_roots`.
    pub fn new(cfg: ProbeConfig, extra_roots: &[rustls::pki_types::CertificateDer<'static>]) -> Self {
        let roots: Vec<_> = cfg.ca_certs.iter().chain(extra_roots).cloned().collect();
        Prober {
            tls: timing::tls_connector(&roots),
            cfg,
            published: PublishedPrices::default(),
            roots: Arc::new(roots),
            per_provider: Arc::default(),
            credentials: Arc::default(),
        }
    }

    /// This prober with `timeout` as both its whole-probe and its first-token limit (a long
    /// prompt's prefill outlasts the tiny probe's first-token wait); sockets, clocks and TLS are
    /// the same.
    pub fn with_timeout(&self, timeout: Duration) -> Prober {
        let mut p = self.clone();
        p.cfg.timeout = timeout;
        p.cfg.ttft_timeout = timeout;
        p
    }

    /// The TLS connector for a provider: the shared one, or one with its own CA or client certificate.
    fn connector_for(&self, p: &ProviderConfig) -> Result<TlsConnector, String> {
        if !p.tls.is_custom() {
            return Ok(self.tls.clone());
        }
        let mut map = self.per_provider.lock().map_err(|_| "TLS connector cache poisoned".to_string())?;
        map.entry(p.name.clone())
            .or_insert_with(|| {
                let roots: Vec<_> = self.roots.iter().chain(&p.tls.ca_certs).cloned().collect();
                trust::connector(&roots, p.tls.client.as_ref())
            })
            .clone()
    }

    /// The published-price table this prober charges OpenRouter samples with; refresh it with
    /// [`crate::io::feeds::prices::PriceBook::publish_into`].
    pub fn published_prices(&self) -> PublishedPrices {
        self.published.clone()
    }

    /// Probes one target now and returns its sample; never fails, never panics on bad input.
    pub async fn probe(&self, plan: &Planned, scheduled_at: DateTime<Utc>) -> Sample {
        self.timed(plan, scheduled_at, None).await.0
    }

    /// One canary run of a target now: the same timed exchange with the canary's fixed prompt;
    /// returns the sample and what the answer said. Never fails, never panics on bad input.
    pub async fn canary(
        &self,
        plan: &Planned,
        scheduled_at: DateTime<Utc>,
        request: &CanaryRequest,
    ) -> (Sample, CanaryReading) {
        self.timed(plan, scheduled_at, Some(request)).await
    }

    /// The provider's credential: the cached one while fresh, else fetched now, before the
    /// probe's clocks start (a token's minting never counts in its timings).
    async fn credential(&self, plan: &Planned, adapter: &dyn Adapter) -> Result<Option<Credential>, CredentialError> {
        let Some(fetch) = adapter.credential(Fetch { prober: self, provider: &plan.provider }) else {
            return Ok(None);
        };
        let slot = self.credential_slot(plan)?;
        let mut cached = slot.lock().await;
        if let Some(m) = cached.as_ref().filter(|m| m.fresh_until > Instant::now()) {
            return Ok(Some(m.credential.clone()));
        }
        let minted = fetch.await?;
        let credential = minted.credential.clone();
        *cached = Some(minted);
        Ok(Some(credential))
    }

    fn credential_slot(&self, plan: &Planned) -> Result<CredentialSlot, CredentialError> {
        let key = format!("{}\0{}", plan.provider.name, plan.provider.cloud.cache_key());
        let mut map =
            self.credentials.lock().map_err(|_| (Outcome::ClientError, "credential cache poisoned".to_string()))?;
        Ok(map.entry(key).or_default().clone())
    }

    async fn timed(
        &self,
        plan: &Planned,
        scheduled_at: DateTime<Utc>,
        canary: Option<&CanaryRequest>,
    ) -> (Sample, CanaryReading) {
        let adapter = adapter_of(&plan.provider);
        let fetched = self.credential(plan, adapter).await;
        let mut sample = Sample::new(plan.target.clone(), scheduled_at, Utc::now());
        let start = Instant::now();
        let deadline = tokio::time::Instant::from_std(start + self.cfg.timeout);
        let mut r = Reading::default();
        let credential = match fetched {
            Ok(c) => c,
            Err((outcome, message)) => {
                r.fail(outcome, message);
                None
            }
        };
        if r.outcome.is_none() {
            let exchange = self.exchange(plan, adapter, &mut r, canary, credential.as_ref());
            match tokio::time::timeout_at(deadline, exchange).await {
                Ok(()) => {}
                Err(_) => {
                    r.outcome = Some(Outcome::Timeout);
                    r.error =
                        Some(format!("no complete answer within {}", humantime::format_duration(self.cfg.timeout)));
                    r.total = Some(self.cfg.timeout);
                }
            }
        }
        if credential.is_some() && matches!(r.status, Some(401 | 403)) {
            // A refused credential is fetched anew by the next probe, not reused until it expires.
            if let Ok(slot) = self.credential_slot(plan) {
                *slot.lock().await = None;
            }
        }
        let published = self
            .published
            .read()
            .ok()
            .and_then(|m| m.get(&(plan.target.provider.clone(), plan.target.model.clone())).cloned());
        let secrets = scrub::Secrets::of(&plan.provider).with(credential.iter().flat_map(Credential::secrets));
        let reading = match canary {
            // Provider text kept by a canary run is made safe here too, like the sample's.
            Some(_) => {
                let clean = |t: Option<String>| t.map(|t| scrub::clean(&t, &secrets, 128, true));
                CanaryReading {
                    // Line by line: the answers are one per line, and cleaning flattens control characters.
                    answer: r
                        .answer
                        .lines()
                        .map(|l| scrub::clean(l, &secrets, ANSWER_LIMIT, true))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    identity: crate::vocab::canary::ModelIdentity {
                        model: clean(r.identity.model.take()),
                        system_fingerprint: clean(r.identity.system_fingerprint.take()),
                        upstream: clean(r.identity.upstream.take()),
                    },
                    logprobs: r.logprobs,
                    tool_call: r.tool.take().map(|t| crate::decide::capability::ToolCall {
                        name: scrub::clean(&t.name, &secrets, 128, true),
                        arguments: scrub::clean(&t.arguments, &secrets, ANSWER_LIMIT, true),
                    }),
                }
            }
            None => CanaryReading::default(),
        };
        fill(&mut sample, r, plan, published.as_deref());
        if canary.is_some() {
            // The canary's questions are not the health check's instruction.
            sample.adherence_ok = None;
        }
        // The one place provider data is made safe: everything downstream sees only this.
        scrub::finalise(&mut sample, &secrets);
        (sample, reading)
    }

    async fn exchange(
        &self,
        plan: &Planned,
        adapter: &dyn Adapter,
        r: &mut Reading,
        canary: Option<&CanaryRequest>,
        credential: Option<&Credential>,
    ) {
        let Some((mut conn, request)) = self.open(plan, adapter, r, (canary, credential)).await else { return };

        // Until the first token arrives, the tighter first-token limit applies to streams; it
        // runs from before the write, so a provider that never takes the request still times out.
        let writing = Instant::now();
        let ttft_deadline = tokio::time::Instant::from_std(writing + self.cfg.ttft_timeout);
        // "Sent" is when the write returned (the request is the kernel's), as a server's clock
        // starts when the request is in: the client's own encryption and system call, and a
        // long request's upload, are not the provider's time to first byte.
        let mut sent = writing;
        let exchange = async {
            sent = conn.send(request).await?;
            conn.read_head().await
        };
        let head = if adapter.streams() {
            tokio::time::timeout_at(ttft_deadline, exchange).await.ok()
        } else {
            Some(exchange.await)
        };
        let head = match head {
            None => {
                r.ttfb = conn.first_byte_at().map(|t| t.duration_since(sent));
                r.total = Some(sent.elapsed());
                return r.fail(Outcome::Timeout, ttft_message(self.cfg.ttft_timeout));
            }
            Some(Err(e)) => {
                r.total = Some(sent.elapsed());
                return r.fail(io_outcome(&e), format!("no response: {e}"));
            }
            Some(Ok(head)) => head,
        };
        r.ttfb = Some(conn.first_byte_at().unwrap_or_else(Instant::now).duration_since(sent));
        let status = head.status;
        r.status = Some(status);
        r.request_id = header_request_id(&head.headers);
        r.retry_after_s = retry_after(&head.headers);
        let now = Utc::now();
        r.deprecation = crate::decide::alert::deprecation::from_headers(&head.headers, now);
        // On every response, a 429's too: its headers say when the allowance is back.
        r.ratelimit = crate::decide::ratelimit::from_headers(&head.headers, now);
        let error_type = aws_error_type(&head.headers);
        drop(head);

        if !(200..300).contains(&status) {
            return read_error_answer(&mut conn, (status, error_type), r, sent).await;
        }
        let limits = (self.cfg.max_body_bytes, self.cfg.ttft_timeout);
        read_answer(&mut conn, adapter, r, sent, ttft_deadline, limits).await;
    }

    /// Builds the request and dials the target phase by phase (timings into `r`); `None` when the
    /// probe already failed, with the reason in `r`.
    async fn open(
        &self,
        plan: &Planned,
        adapter: &dyn Adapter,
        r: &mut Reading,
        (canary, credential): (Option<&CanaryRequest>, Option<&Credential>),
    ) -> Option<(Exchange<timing::Stream>, Vec<u8>)> {
        let reasoning = plan.provider.reasoning_models.iter().any(|m| m == &plan.target.model);
        let nonce = nonce();
        let params = ProbeParams {
            provider: &plan.provider,
            model: &plan.target.model,
            route: plan.target.route.as_deref(),
            max_tokens: self.cfg.max_tokens,
            reasoning,
            nonce: &nonce,
            canary,
            credential,
        };
        let spec = match adapter.request(&params) {
            Ok(s) => s,
            Err(e) => return r.fail_none(Outcome::ClientError, format!("cannot build request: {e}")),
        };
        let Some(host) = spec.url.host_str().map(str::to_string) else {
            return r.fail_none(Outcome::ClientError, format!("{} has no host", spec.url));
        };
        let port = spec.url.port_or_known_default().unwrap_or(80);
        let connector = if spec.url.scheme() == "https" {
            match self.connector_for(&plan.provider) {
                Ok(c) => Some(c),
                Err(e) => return r.fail_none(Outcome::TlsError, format!("TLS setup: {e}")),
            }
        } else {
            None
        };
        let tls = connector.as_ref();
        let proxy = self.cfg.proxy.for_target(spec.url.scheme(), &host);
        let stream = match timing::dial(&host, port, tls, self.cfg.connect_timeout, proxy).await {
            Ok((stream, phases)) => {
                r.phases = phases;
                stream
            }
            Err(e) => {
                r.phases = e.phases;
                return r.fail_none(e.outcome, e.message);
            }
        };
        let request = match build_request(&spec, &host, port) {
            Ok(bytes) => bytes,
            Err(e) => return r.fail_none(Outcome::ClientError, e),
        };
        drop(spec);
        Some((Exchange::new(stream), request))
    }
}

/// Reads a little of a non-2xx answer's body (its class is already known from the status, so a
/// slow body never stalls the probe) and fails `r` with what it says.
async fn read_error_answer(
    conn: &mut Exchange<timing::Stream>,
    (status, error_type): (u16, Option<String>),
    r: &mut Reading,
    sent: Instant,
) {
    let mut buf = Vec::new();
    let read = async {
        while buf.len() < ERROR_BODY_LIMIT {
            match conn.frame().await {
                Ok(Some(frame)) => {
                    let d = frame.data;
                    buf.extend_from_slice(&d[..d.len().min(ERROR_BODY_LIMIT - buf.len())]);
                }
                _ => break,
            }
        }
    };
    // The class is already known from the status; a slow error body must not stall the probe.
    let _ = tokio::time::timeout(Duration::from_millis(500), read).await;
    r.total = Some(sent.elapsed());
    r.retry_after_s = r.retry_after_s.or_else(|| gemini::retry_delay(&buf));
    // AWS names the error in a header (`ThrottlingException`); it decides and leads the text.
    let named = error_type.as_deref().and_then(|t| classify::classify_error_text(&t.to_ascii_lowercase()));
    let message = match &error_type {
        Some(t) => error_message(status, &buf).replacen(&format!("HTTP {status}"), &format!("HTTP {status} {t}"), 1),
        None => error_message(status, &buf),
    };
    r.fail(named.unwrap_or_else(|| classify_http_error(status, &buf)), message);
}

/// The error type AWS services name in `x-amzn-ErrorType` (`ThrottlingException:http://…`),
/// without its namespace suffix.
fn aws_error_type(h: &::http::HeaderMap) -> Option<String> {
    let v = h.get("x-amzn-errortype")?.to_str().ok()?;
    let name = v.split(':').next().unwrap_or(v).trim();
    (!name.is_empty() && name.len() <= 100).then(|| name.to_string())
}

/// Reads a 2xx body to its end, event by event for a stream (TTFT, tokens, errors, the
/// terminator), and leaves the verdict in `r`.
async fn read_answer(
    conn: &mut Exchange<timing::Stream>,
    adapter: &dyn Adapter,
    r: &mut Reading,
    sent: Instant,
    ttft_deadline: tokio::time::Instant,
    limits: (usize, Duration),
) {
    let (limit, ttft_timeout) = limits;
    let mut parser = SseParser::new(limit);
    let mut body = Vec::new();
    let mut frames = adapter.event_stream().then(|| eventstream::Decoder::new(limit));
    let mut received = 0usize;
    let mut done = false;
    let mut parked = false;
    r.streamed = adapter.streams();
    loop {
        let waiting_first = r.streamed && r.ttft.is_none();
        let next = if waiting_first {
            match tokio::time::timeout_at(ttft_deadline, conn.frame()).await {
                Ok(next) => next,
                Err(_) => {
                    r.total = Some(sent.elapsed());
                    return r.fail(Outcome::Timeout, ttft_message(ttft_timeout));
                }
            }
        } else {
            conn.frame().await
        };
        let (data, at) = match next {
            Ok(None) => break,
            Err(e) => {
                r.total = Some(sent.elapsed());
                return r.fail(Outcome::StreamError, format!("stream interrupted: {e}"));
            }
            Ok(Some(frame)) => (frame.data, frame.at),
        };
        received += data.len();
        if received > limit {
            r.total = Some(at.duration_since(sent));
            return r.fail(Outcome::StreamError, format!("response body exceeded {limit} bytes"));
        }
        if !r.streamed {
            if adapter.reads_body() {
                body.extend_from_slice(data);
            }
            continue;
        }
        // Events completed before a framing error still count, so the verdict does not
        // depend on how the network happened to split the bytes; once one decides the outcome
        // the rest of the read is not looked at. Each is taken as it is framed: gathered first,
        // the events' signals were moved about more than they were read.
        let mut take = |signals: Signals| {
            if r.outcome.is_none() && r.absorb(signals, at, sent) {
                done = true;
            }
        };
        let framing = match frames.as_mut() {
            Some(frames) => frames.feed(data, |m| take(adapter.interpret_message(&m))).map_err(|e| e.to_string()),
            None => parser.feed(data, |ev| take(adapter.interpret(&ev))).map_err(|e| e.to_string()),
        };
        if r.outcome.is_some() {
            r.total = Some(at.duration_since(sent));
            return;
        }
        if let Err(e) = framing {
            r.total = Some(at.duration_since(sent));
            return r.fail(Outcome::StreamError, e);
        }
        // Past the first token only the stream's end, its tokens and errors matter: the
        // socket can stop waking the thread per event (its reads keep their kernel stamps).
        if r.ttft.is_some() && !parked {
            parked = conn.park();
        }
    }
    // The arrival of the body's last byte: exact even when a parked read saw it a tick late.
    let end = conn.last_read_at();
    r.total = Some(end.duration_since(sent));
    if let Some(Err(e)) = frames.as_ref().map(eventstream::Decoder::finish) {
        return r.fail(Outcome::StreamError, e.to_string());
    }
    if r.streamed {
        match parser.finish() {
            Ok(Some(ev)) => {
                done |= r.absorb(adapter.interpret(&ev), end, sent);
                if r.outcome.is_some() {
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => return r.fail(Outcome::StreamError, e.to_string()),
        }
        if !done {
            return r.fail(Outcome::StreamError, "stream ended before its terminator".into());
        }
        if r.ttft.is_none() {
            return r.fail(Outcome::StreamError, "stream finished without any content token".into());
        }
    } else if adapter.reads_body() {
        // The whole answer arrived with the body's last byte: that is its first (and only) token.
        r.absorb(adapter.interpret_body(&body), end, sent);
        if r.outcome.is_some() {
            return;
        }
        if r.ttft.is_none() {
            return r.fail(Outcome::StreamError, "answer carried no result".into());
        }
    }
    r.outcome = Some(Outcome::Ok);
}

impl Reading {
    /// [`fail`](Self::fail), for a step that returns nothing more.
    fn fail_none<T>(&mut self, outcome: Outcome, message: String) -> Option<T> {
        self.fail(outcome, message);
        None
    }

    fn fail(&mut self, outcome: Outcome, message: String) {
        self.outcome = Some(outcome);
        self.error = Some(truncate(&message, ERROR_TEXT_LIMIT));
    }

    /// Applies one event's signals; returns true on the stream's terminator.
    fn absorb(&mut self, s: Signals, at: Instant, sent: Instant) -> bool {
        if self.request_id.is_none() {
            self.request_id = s.request_id;
        }
        if s.reasoning && self.ttfr.is_none() {
            self.ttfr = Some(at.duration_since(sent));
        }
        if let Some(text) = s.content {
            if self.ttft.is_none() {
                self.ttft = Some(at.duration_since(sent));
            }
            self.content_events += 1;
            if self.answer.len() + text.len() <= ANSWER_LIMIT {
                self.answer.push_str(&text);
            }
        }
        if let Some(piece) = s.tool {
            // A function call is the answer of a tools probe: its first piece is the first token.
            if self.ttft.is_none() {
                self.ttft = Some(at.duration_since(sent));
            }
            self.content_events += 1;
            let call = self.tool.get_or_insert_with(Default::default);
            if call.name.is_empty() {
                call.name = piece.name.unwrap_or_default();
            }
            if call.arguments.len() + piece.arguments.len() <= ANSWER_LIMIT {
                call.arguments.push_str(&piece.arguments);
            }
        }
        let id = &mut self.identity;
        id.model = id.model.take().or(s.identity.model);
        id.system_fingerprint = id.system_fingerprint.take().or(s.identity.system_fingerprint);
        id.upstream = id.upstream.take().or(s.identity.upstream);
        if let Some(lp) = s.logprobs {
            let sum = self.logprobs.get_or_insert_with(Default::default);
            sum.tokens = sum.tokens.saturating_add(lp.tokens);
            sum.sum += lp.sum;
        }
        if let Some(u) = s.usage {
            // Reports are cumulative; keep what a later report leaves out.
            self.usage = Usage {
                input: u.input.or(self.usage.input),
                output: u.output.or(self.usage.output),
                reasoning: u.reasoning.or(self.usage.reasoning),
                cost_usd: u.cost_usd.or(self.usage.cost_usd),
            };
        }
        if let Some(message) = s.error {
            // The request was accepted (2xx) and then broke, before or after the first token:
            // that is a stream error whatever the provider calls it; its own type stays in the text.
            self.fail(Outcome::StreamError, message);
        }
        s.done
    }
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1000.0)
}

fn fill(sample: &mut Sample, r: Reading, plan: &Planned, published: Option<&[crate::decide::pricing::EndpointPrice]>) {
    sample.dns_ms = ms(r.phases.dns);
    sample.connect_ms = ms(r.phases.connect);
    sample.tls_ms = ms(r.phases.tls);
    sample.proxy_ms = ms(r.phases.proxy);
    sample.ttfb_ms = ms(r.ttfb);
    sample.ttft_ms = ms(r.ttft);
    sample.ttfr_ms = ms(r.ttfr);
    sample.total_ms = ms(r.total);
    sample.status = r.status;
    sample.outcome = r.outcome.unwrap_or(Outcome::StreamError);
    sample.error = r.error;
    sample.request_id = r.request_id;
    sample.retry_after_s = r.retry_after_s;
    sample.ratelimit = r.ratelimit;
    sample.deprecation = r.deprecation;
    sample.input_tokens = r.usage.input;
    // Only a stream's content events approximate its tokens; a whole answer is one event.
    let counted = (r.streamed && r.content_events > 0).then_some(r.content_events);
    sample.output_tokens = r.usage.output.or(counted);
    if r.streamed {
        sample.adherence_ok = (sample.outcome == Outcome::Ok).then(|| adherent(&r.answer));
        let visible = match (r.usage.output, r.usage.reasoning) {
            (Some(o), Some(rs)) => Some(o.saturating_sub(rs)),
            (Some(o), None) => Some(o),
            _ => counted,
        };
        if let (Some(n), Some(ttft), Some(total)) = (visible, r.ttft, r.total) {
            let window = total.saturating_sub(ttft).as_secs_f64();
            if n > 1 && window > 0.0 && sample.outcome == Outcome::Ok {
                sample.tokens_per_s = Some(f64::from(n - 1) / window);
            }
        }
    }
    // The provider's own figure wins; else usage × the price `vigil report` also uses.
    sample.cost_usd = r.usage.cost_usd.or_else(|| {
        if r.usage.input.is_none() && sample.output_tokens.is_none() {
            return None;
        }
        let (price, _) = crate::decide::price_table::price_of(
            &plan.provider,
            &plan.target.model,
            plan.target.route.as_deref(),
            published,
        )?;
        Some(price.cost(r.usage.input.unwrap_or(0), sample.output_tokens.unwrap_or(0)))
    });
}

/// The request as one buffer: Host (with the port unless it is the scheme's default), User-Agent,
/// Content-Type for a body, then the adapter's headers.
fn build_request(spec: &RequestSpec, host: &str, port: u16) -> Result<Vec<u8>, String> {
    let target = match spec.url.query() {
        Some(q) => format!("{}?{q}", spec.url.path()),
        None => spec.url.path().to_string(),
    };
    // `Url::port` is None exactly when the port is the scheme's default, which Host then omits.
    let host_header = match spec.url.port() {
        Some(_) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let fixed = [("User-Agent", concat!("vigil/", env!("CARGO_PKG_VERSION")))];
    let content_type = spec.body.as_ref().map(|_| ("Content-Type", "application/json"));
    let headers =
        fixed.into_iter().chain(content_type).chain(spec.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    h1::encode_request(spec.method.as_str(), &target, &host_header, headers, spec.body.as_deref())
        .map_err(|e| e.to_string())
}

/// A socket failure is a connection problem; anything else means the response was not valid HTTP.
fn io_outcome(e: &H1Error) -> Outcome {
    match e {
        H1Error::Io(_) => Outcome::ConnectError,
        _ => Outcome::StreamError,
    }
}

fn ttft_message(limit: Duration) -> String {
    format!("no content token within the first-token timeout of {}", humantime::format_duration(limit))
}

/// The provider's request id from the first header that carries one (unscrubbed, uncut).
pub fn header_request_id(h: &::http::HeaderMap) -> Option<String> {
    ["x-request-id", "request-id", "x-generation-id", "x-amzn-requestid"]
        .iter()
        .find_map(|name| h.get(*name).and_then(|v| v.to_str().ok()).map(str::to_string))
}

/// Longest wait vigil takes from a provider's `Retry-After`, `retry-after-ms` or Gemini
/// `retryDelay`: a longer (or absurd) value is cut to this at parse time, so no later time
/// arithmetic sees it.
pub const MAX_RETRY_AFTER_S: f64 = 3600.0;

/// A provider's wait in seconds, clamped to `0..=MAX_RETRY_AFTER_S`; NaN, infinities and
/// negative values are refused (`None`), as if the header were absent.
pub fn clamp_retry_after(secs: f64) -> Option<f64> {
    (secs.is_finite() && secs >= 0.0).then(|| secs.min(MAX_RETRY_AFTER_S))
}

/// Seconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date), clamped
/// by [`clamp_retry_after`].
pub fn retry_after(h: &::http::HeaderMap) -> Option<f64> {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    // A refused `retry-after-ms` falls back to `retry-after`, as if it were absent.
    let ms = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok());
    if let Some(secs) = ms.and_then(|ms| clamp_retry_after(ms / 1000.0)) {
        return Some(secs);
    }
    let v = text("retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return clamp_retry_after(secs);
    }
    let when = DateTime::parse_from_rfc2822(v).ok()?;
    let ms = when.with_timezone(&Utc).signed_duration_since(Utc::now()).num_milliseconds().max(0);
    clamp_retry_after(ms as f64 / 1000.0)
}

/// The failure text of a non-2xx answer: the body's `error.message`, else the body itself.
pub fn error_message(status: u16, body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let msg = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(|e| e.get("message").and_then(|m| m.as_str()).or_else(|| e.as_str()))
        // AWS services put the text at the top (`{"message": …}`, or `Message`).
        .or_else(|| {
            let v = parsed.as_ref()?;
            v.get("message").or_else(|| v.get("Message")).and_then(|m| m.as_str())
        })
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    if msg.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {}", truncate(&msg, ERROR_TEXT_LIMIT - 16))
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adherence_accepts_only_the_demanded_json() {
        assert!(adherent("{\"ok\":true}"));
        assert!(adherent(" {\"ok\": true}\n"));
        assert!(!adherent("```json\n{\"ok\":true}\n```"));
        assert!(!adherent("{\"ok\":false}"));
        assert!(!adherent("Sure! {\"ok\":true}"));
        assert!(!adherent(""));
    }

    #[test]
    fn every_prompt_starts_with_its_own_nonce() {
        let (a, b) = (nonce(), nonce());
        assert_eq!(a.len(), NONCE_LEN);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        let (pa, pb) = (system_prompt(&a), system_prompt(&b));
        assert!(pa.starts_with(&a) && pa.ends_with(SYSTEM_PROMPT));
        let common = pa.bytes().zip(pb.bytes()).take_while(|(x, y)| x == y).count();
        assert!(common < NONCE_LEN, "two prompts share only what two random nonces happen to share");
    }

    #[test]
    fn each_planned_probe_points_at_its_providers_one_copy() {
        let mut p = ProviderConfig::new("a", ProviderKind::Openai, Url::parse("http://127.0.0.1:9/v1").expect("url"));
        p.models = vec!["m".into(), "n".into()];
        let providers = [Arc::new(p)];
        let plans = Planned::all(&providers, "eu");
        assert_eq!(plans.len(), 2);
        assert!(plans.iter().all(|plan| Arc::ptr_eq(&plan.provider, &providers[0])), "not a copy per target");
        let (m, n) = (&plans[0].target, &plans[1].target);
        assert!(m.provider.shares(&n.provider) && m.region.shares(&n.region), "one string per name, not per target");
        // And every copy of a target points at the same strings.
        let copy = m.clone();
        assert!(copy.model.shares(&m.model) && copy.provider.shares(&m.provider));
    }

    #[test]
    fn join_keeps_the_base_path() {
        let base = Url::parse("https://openrouter.ai/api/v1").expect("url");
        assert_eq!(
            join(&base, "chat/completions").map(|u| u.to_string()).ok().as_deref(),
            Some("https://openrouter.ai/api/v1/chat/completions")
        );
        let base = Url::parse("http://127.0.0.1:8080/v1/").expect("url");
        assert_eq!(
            join(&base, "/messages").map(|u| u.to_string()).ok().as_deref(),
            Some("http://127.0.0.1:8080/v1/messages")
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut h = ::http::HeaderMap::new();
        h.insert("retry-after", ::http::HeaderValue::from_static("20"));
        assert_eq!(retry_after(&h), Some(20.0));
        h.insert("retry-after-ms", ::http::HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(1.5));
    }

    #[test]
    fn error_messages_come_from_the_body() {
        let body = br#"{"error":{"message":"Rate limit reached","type":"requests"}}"#;
        assert_eq!(error_message(429, body), "HTTP 429: Rate limit reached");
        assert_eq!(error_message(502, b""), "HTTP 502");
    }
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod hostile_tests;
