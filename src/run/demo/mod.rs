//! Simulated LLM providers on loopback, for `--demo` and for tests.
//!
//! [`standin`] is the scriptable HTTP/1.1 server tests drive directly; [`profiles`] holds the
//! simulated hosts and the streams they generate; [`start_demo`] serves them all from one
//! stand-in and returns provider configs pointing at it.

pub mod history;
pub mod profiles;
mod setup;
pub mod standin;
pub mod trouble;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use secrecy::SecretString;
use serde_json::{json, Value};
use url::Url;

use crate::config::{BalanceConfig, Price, ProviderConfig, ProviderKind};
use profiles::{Ask, Draw, Profile, Wire, ANTHROPIC_MODEL, GEMINI_MODEL, LLAMA, MIXTRAL};
pub use setup::{use_demo_cadence, use_demo_database, DemoDatabase, DEMO_CHAIN, DEMO_DATABASE, DEMO_INTERVAL};
pub use standin::{Chunk, End, RequestRecord, Script, StandIn};
use trouble::Trouble;

/// Key every demo provider is configured with.
pub const DEMO_KEY: &str = "sk-test-demo";
/// Credit limit reported by the demo key document (before any top-up).
pub const CREDIT_LIMIT_USD: f64 = 25.0;
/// Credit already used when the demo starts: $2.50 left, about 5 hours at the burn rate, so
/// `demo-llama` starts inside `balance.demote_within` (6 h): the demo chain demotes it with
/// `credit empty in 5 h` and `credit_low` fires (under its $5 minimum).
pub const CREDIT_USED_AT_START_USD: f64 = 22.5;
/// Background spend per hour, so the balance visibly drains even between probes.
pub const CREDIT_BURN_USD_PER_HOUR: f64 = 0.5;
/// The key's auto top-up: when the credit left gets down to this, the limit is raised by
/// [`CREDIT_LIMIT_USD`] less this (the credit is back at the full limit), so a demo that runs for
/// days keeps answering; a top-up ends the projection (and the demotion) until the credit runs
/// low again, about two days later.
pub const CREDIT_TOP_UP_AT_USD: f64 = 0.5;

/// The demo key's `(limit, limit_remaining)` after `used` USD of spending (negative: before the
/// demo started, for the seeded week), topped up at [`CREDIT_TOP_UP_AT_USD`].
pub fn demo_credit(used: f64) -> (f64, f64) {
    let top_up = CREDIT_LIMIT_USD - CREDIT_TOP_UP_AT_USD;
    let limit = CREDIT_LIMIT_USD + (used / top_up).floor() * top_up;
    (limit, limit - used)
}
/// The variable the demo chain takes its order from when set (`demo-anthropic,demo-llama`).
pub const DEMO_ORDER_ENV: &str = "DEMO_LLM_PROVIDER_ORDER";
/// Requests the demo server remembers; it may run for days.
const DEMO_RECORDS: usize = 1000;
/// Output limit assumed when a request names none.
const DEFAULT_MAX_TOKENS: u32 = 16;

/// A running demo: the server and the providers that point at it.
#[derive(Debug)]
pub struct Demo {
    /// The loopback server.
    pub standin: StandIn,
    /// `demo-llama`, `demo-mixtral`, `demo-anthropic`, `demo-gemini`, `demo-status`.
    pub providers: Vec<ProviderConfig>,
}

/// Starts the simulated providers; the same `seed` gives the same sequence of draws.
pub async fn start_demo(seed: u64) -> std::io::Result<Demo> {
    start_demo_at(seed, Duration::ZERO).await
}

/// [`start_demo`] as if it had been running for `elapsed` already (where the misbehaving
/// host's schedule, [`trouble`], starts; tests jump straight into a failure this way).
pub async fn start_demo_at(seed: u64, elapsed: Duration) -> std::io::Result<Demo> {
    let now = Instant::now();
    let started = now.checked_sub(elapsed).unwrap_or(now);
    let state = DemoState { rng: Mutex::new(StdRng::seed_from_u64(seed)), started, spent: Mutex::new(0.0) };
    let standin = StandIn::start(move |request| state.respond(request)).await?;
    standin.keep_records(DEMO_RECORDS);
    let providers = demo_providers(&format!("http://127.0.0.1:{}", standin.addr().port()))?;
    Ok(Demo { standin, providers })
}

/// Where the declared demo providers point until the stand-in listens (nothing is sent there:
/// [`Demo::attach`] replaces them before any probe).
const DECLARED_ORIGIN: &str = "http://127.0.0.1:1";

/// The demo providers as config validation sees them (`Config::load_with`) before the stand-in
/// listens: the names, kinds, models and routes the running demo serves, so `[[chain]]` members
/// and maintenance windows may name them.
pub fn declared_providers() -> Vec<ProviderConfig> {
    demo_providers(DECLARED_ORIGIN).unwrap_or_default()
}

/// The members of [`DEMO_CHAIN`]: Llama through the OpenRouter-like `demo-llama` (every route, by
/// rank), then the direct Anthropic and Gemini models.
pub fn demo_chain_targets() -> Vec<String> {
    vec![
        format!("demo-llama/{LLAMA}"),
        format!("demo-anthropic/{ANTHROPIC_MODEL}"),
        format!("demo-gemini/{GEMINI_MODEL}"),
    ]
}

impl Demo {
    /// Puts this demo's providers into `config` (each in place of its declared twin, or added),
    /// then, when no configured chain names a demo provider, the [`DEMO_CHAIN`] chain, so every
    /// router format has a chain to show.
    pub fn attach(&self, config: &mut crate::config::Config) {
        let mut providers = config.providers.to_vec();
        for p in &self.providers {
            let p = std::sync::Arc::new(p.clone());
            match providers.iter_mut().find(|c| c.name == p.name) {
                Some(declared) => *declared = p,
                None => providers.push(p),
            }
        }
        config.providers = providers.into();
        ask_for_tools(&mut config.capabilities);
        let ours = |provider: &str| self.providers.iter().any(|p| p.name == provider);
        let named = config.chains.iter().any(|c| c.members.iter().any(|m| ours(&m.provider)));
        if named || config.chains.iter().any(|c| c.name == DEMO_CHAIN) {
            tracing::info!(chains = config.chains.len(), "demo: configured chains kept, no demo chain added");
            return;
        }
        // Its order may come from the environment, as an application's would; the list is the default.
        let raw =
            crate::config::chain::RawChain::new(DEMO_CHAIN, demo_chain_targets()).with_targets_env(DEMO_ORDER_ENV);
        match crate::config::chain::validate(vec![raw], &config.providers, &[], &crate::config::ProcessEnv) {
            Ok(chains) => config.chains.extend(chains),
            Err(e) => tracing::warn!(error = %e, "demo chain left out"),
        }
    }
}

/// Provider configs for a demo server at `origin` (`http://127.0.0.1:PORT`).
pub fn demo_providers(origin: &str) -> std::io::Result<Vec<ProviderConfig>> {
    let url = |path: &str| Url::parse(&format!("{origin}{path}")).map_err(std::io::Error::other);
    let provider = |name: &str, kind: ProviderKind, base_url: Url| ProviderConfig {
        api_key: Some(SecretString::from(DEMO_KEY)),
        ..ProviderConfig::new(name, kind, base_url)
    };
    let openrouter = |name: &str, model: &str| -> std::io::Result<ProviderConfig> {
        Ok(ProviderConfig {
            models: vec![model.to_string()],
            routes: profiles::routes_of(model).map(|p| p.route.to_string()).collect(),
            ..provider(name, ProviderKind::Openai, url("/api/v1")?)
        })
    };
    let priced = |profile: Option<&Profile>| {
        profile.map(|p| Price { input_per_mtok: p.input_per_mtok, output_per_mtok: p.output_per_mtok })
    };
    let llama = ProviderConfig {
        balance: Some(BalanceConfig {
            min_usd: 5.0,
            every: Duration::from_secs(60),
            warn_hours: 24.0,
            demote_within: Some(crate::config::DEFAULT_DEMOTE_WITHIN),
        }),
        ..openrouter("demo-llama", LLAMA)?
    };
    Ok(vec![
        llama,
        openrouter("demo-mixtral", MIXTRAL)?,
        ProviderConfig {
            models: vec![ANTHROPIC_MODEL.to_string()],
            price: priced(profiles::find(Wire::Anthropic, ANTHROPIC_MODEL, "")),
            ..provider("demo-anthropic", ProviderKind::Anthropic, url("/v1")?)
        },
        ProviderConfig {
            models: vec![GEMINI_MODEL.to_string()],
            price: priced(profiles::find(Wire::Gemini, GEMINI_MODEL, "")),
            ..provider("demo-gemini", ProviderKind::Gemini, url("/v1beta")?)
        },
        // A plain-HTTP target has one unnamed model, as config validation gives it.
        ProviderConfig { models: vec![String::new()], ..provider("demo-status", ProviderKind::Http, url("/status")?) },
    ])
}

/// The demo Anthropic key's rate-limit window: its token allowance drains over each window and
/// is whole again at the next, so `ratelimit_low` fires in the last tenth of every window (at
/// the default `ratelimit.low_fraction`) and resolves after the reset.
pub const DEMO_RATELIMIT_WINDOW: Duration = Duration::from_secs(600);
/// The demo key's allowances per window: requests and tokens.
const DEMO_RATELIMIT: (u64, u64) = (50, 40_000);

/// `script` with Anthropic's rate-limit headers as they stand `elapsed` into the demo (`now`
/// for the reset times): tokens drain to nothing over each [`DEMO_RATELIMIT_WINDOW`], requests
/// to half.
pub fn with_headroom(script: Script, elapsed: Duration, now: chrono::DateTime<chrono::Utc>) -> Script {
    let window = DEMO_RATELIMIT_WINDOW.as_secs_f64();
    let used = (elapsed.as_secs_f64() % window) / window;
    let reset = now + chrono::Duration::milliseconds(((window * (1.0 - used)) * 1000.0) as i64);
    let reset = reset.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (requests, tokens) = DEMO_RATELIMIT;
    let left = |limit: u64, share: f64| ((limit as f64) * (1.0 - share)).floor().max(0.0) as u64;
    let mut script = script;
    for (family, limit, remaining) in
        [("requests", requests, left(requests, used / 2.0)), ("tokens", tokens, left(tokens, used))]
    {
        script = script
            .with_header(format!("anthropic-ratelimit-{family}-limit"), limit.to_string())
            .with_header(format!("anthropic-ratelimit-{family}-remaining"), remaining.to_string())
            .with_header(format!("anthropic-ratelimit-{family}-reset"), reset.clone());
    }
    script
}

/// The arguments the demo's hosts call `get_weather` with.
const DEMO_TOOL_ARGUMENTS: &str = r#"{"city": "Paris"}"#;

/// How often the demo asks each target whether it still calls a declared function
/// (`[probe.capabilities]`, `tools` only, when the config leaves capability probes off).
pub const DEMO_CAPABILITY_EVERY: Duration = Duration::from_secs(120);

/// Turns the demo's `tools` capability probes on unless the config set `[probe.capabilities]`
/// itself: the misbehaving host stops calling functions for a while each hour, a capability
/// loss to see.
fn ask_for_tools(capabilities: &mut crate::config::CapabilitiesConfig) {
    if !capabilities.enabled {
        *capabilities = crate::config::CapabilitiesConfig {
            enabled: true,
            every: DEMO_CAPABILITY_EVERY,
            checks: vec![crate::vocab::capability::Capability::Tools],
        };
    }
}

/// Shared state of the demo handler.
struct DemoState {
    rng: Mutex<StdRng>,
    started: Instant,
    spent: Mutex<f64>,
}

impl DemoState {
    fn respond(&self, request: &RequestRecord) -> Script {
        let path = request.path_only();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (request.method.as_str(), segments.as_slice()) {
            ("POST", ["api", "v1", "chat", "completions"]) => self.chat(request),
            ("POST", ["v1", "messages"]) => self.messages(request),
            ("POST", ["v1beta", "models", model_method]) => self.gemini(request, model_method),
            ("GET", ["status"]) => self.status(),
            ("GET", ["api", "v1", "key"]) => self.key(request),
            // The demo key is an ordinary one: like OpenRouter, only management keys read /credits.
            ("GET", ["api", "v1", "credits"]) => error_json(
                403,
                json!({"error": {"code": 403, "message": "Only management keys can perform this operation"}}),
            ),
            ("GET", ["api", "v1", "models", author, slug, "endpoints"]) => endpoints(&format!("{author}/{slug}")),
            _ => Script::json(404, json!({"error": {"message": "not found", "code": 404}}).to_string().as_bytes()),
        }
    }

    fn with_rng<T>(&self, f: impl FnOnce(&mut StdRng) -> T) -> T {
        let mut rng = self.rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut rng)
    }

    /// Runs a profile and books what the reply will cost against the demo credit. A request
    /// declaring a function (`tools`: a capability probe) gets a call of it, except from the
    /// misbehaving host while it drops tools ([`trouble::drops_tools`]).
    fn play(&self, profile: &Profile, ask: &Ask, tools: bool) -> Script {
        let troubled = trouble::is_troubled(profile.model, profile.route);
        let calls = tools && !(troubled && trouble::drops_tools(self.started.elapsed()));
        let answer = |p: &Profile| {
            self.with_rng(|rng| match calls {
                true => p.tool_call_for(rng, ask, crate::decide::capability::TOOL_NAME, DEMO_TOOL_ARGUMENTS),
                false => p.script_for(rng, ask),
            })
        };
        let script = match troubled {
            true => match trouble::at(self.started.elapsed()) {
                Trouble::None => answer(profile),
                Trouble::Degraded => {
                    let slow = Profile { ttft_ms: profile.ttft_ms * trouble::DEGRADE_FACTOR, ..profile.clone() };
                    answer(&slow)
                }
                Trouble::Failing => {
                    let failure =
                        Draw::Failure { rate_limited: false, after: Duration::from_millis(40), retry_after_s: None };
                    profile.render(&failure, ask, "demo-trouble")
                }
            },
            false => answer(profile),
        };
        // Anthropic sends its rate-limit headers on every response, errors too.
        let script = match profile.wire {
            Wire::Anthropic => with_headroom(script, self.started.elapsed(), chrono::Utc::now()),
            Wire::OpenRouter | Wire::Gemini => script,
        };
        if script.status == 200 {
            let completion = profiles::reply_tokens(ask.max_tokens).len() as u32;
            *self.spent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) +=
                profile.cost(ask.prompt_tokens, completion);
        }
        script
    }

    fn chat(&self, request: &RequestRecord) -> Script {
        if !has_bearer(request) {
            return error_json(401, json!({"error": {"code": 401, "message": "Missing Authentication header"}}));
        }
        let Some(body) = request.json() else {
            return error_json(400, json!({"error": {"code": 400, "message": "request body is not JSON"}}));
        };
        let model = body["model"].as_str().unwrap_or_default();
        let order = &body["provider"]["order"];
        let route = order.get(0).and_then(Value::as_str);
        let profile = match route {
            Some(route) => profiles::find(Wire::OpenRouter, model, route),
            // No pinned host: OpenRouter picks one; the first in the table stands in for it.
            None => profiles::routes_of(model).next(),
        };
        let Some(profile) = profile else {
            let what = route.map_or_else(|| format!("`{model}`"), |r| format!("`{model}` on `{r}`"));
            return error_json(
                404,
                json!({"error": {"message": format!("The model {what} does not exist or you do not have access to it."),
                    "type": "invalid_request_error", "param": null, "code": "model_not_found"}}),
            );
        };
        let max_tokens = body["max_tokens"].as_u64().or_else(|| body["max_completion_tokens"].as_u64());
        let prompt = body["messages"].as_array().map(|m| m.iter().map(|m| text_of(&m["content"])).collect());
        self.play(profile, &ask(model, prompt.unwrap_or_default(), max_tokens), body.get("tools").is_some())
    }

    fn messages(&self, request: &RequestRecord) -> Script {
        if request.header("x-api-key").is_none_or(str::is_empty) {
            return error_json(
                401,
                json!({"type": "error", "error": {"type": "authentication_error", "message": "x-api-key header is required"}}),
            );
        }
        let Some(body) = request.json() else {
            return error_json(
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "body is not JSON"}}),
            );
        };
        let model = body["model"].as_str().unwrap_or_default();
        let Some(profile) = profiles::find(Wire::Anthropic, model, "") else {
            return error_json(
                404,
                json!({"type": "error", "error": {"type": "not_found_error", "message": format!("model: {model}")}}),
            );
        };
        let mut texts: Vec<String> = vec![text_of(&body["system"])];
        if let Some(messages) = body["messages"].as_array() {
            texts.extend(messages.iter().map(|m| text_of(&m["content"])));
        }
        self.play(profile, &ask(model, texts, body["max_tokens"].as_u64()), body.get("tools").is_some())
    }

    fn gemini(&self, request: &RequestRecord, model_method: &str) -> Script {
        let keyed = request.header("x-goog-api-key").is_some_and(|k| !k.is_empty()) || request.path.contains("key=");
        if !keyed {
            return error_json(
                403,
                json!({"error": {"code": 403, "message": "Method doesn't allow unregistered callers.",
                    "status": "PERMISSION_DENIED"}}),
            );
        }
        let (model, method) = model_method.split_once(':').unwrap_or((model_method, ""));
        let profile = profiles::find(Wire::Gemini, model, "");
        let Some(profile) = profile.filter(|_| method == "streamGenerateContent") else {
            return error_json(
                404,
                json!({"error": {"code": 404, "message": format!("models/{model} is not found for API version v1beta, or is not supported for {method}."),
                    "status": "NOT_FOUND"}}),
            );
        };
        let body = request.json().unwrap_or_default();
        let mut texts = vec![parts_text(&body["systemInstruction"])];
        if let Some(contents) = body["contents"].as_array() {
            texts.extend(contents.iter().map(parts_text));
        }
        let tools = body.get("tools").is_some();
        self.play(profile, &ask(model, texts, body["generationConfig"]["maxOutputTokens"].as_u64()), tools)
    }

    fn status(&self) -> Script {
        let delay = self.with_rng(|rng| Duration::from_micros(rng.random_range(5_000..30_000)));
        let body = json!({"page": {"id": "demo", "name": "vigil demo"},
            "status": {"indicator": "none", "description": "All Systems Operational"}});
        Script::json(200, body.to_string().as_bytes()).with_head_delay(delay)
    }

    fn key(&self, request: &RequestRecord) -> Script {
        if !has_bearer(request) {
            return error_json(401, json!({"error": {"code": 401, "message": "Missing Authentication header"}}));
        }
        let hours = self.started.elapsed().as_secs_f64() / 3600.0;
        let spent = *self.spent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let usage = CREDIT_USED_AT_START_USD + CREDIT_BURN_USD_PER_HOUR * hours + spent;
        let (limit, remaining) = demo_credit(usage);
        let body = json!({"data": {
            "label": "sk-test-demo...", "is_management_key": false, "is_provisioning_key": false,
            "limit": limit, "limit_reset": null, "limit_remaining": remaining,
            "include_byok_in_limit": true, "usage": usage, "usage_daily": usage - CREDIT_USED_AT_START_USD,
            "usage_weekly": usage - CREDIT_USED_AT_START_USD, "usage_monthly": usage,
            "byok_usage": 0, "byok_usage_daily": 0, "byok_usage_weekly": 0, "byok_usage_monthly": 0,
            "is_free_tier": false, "expires_at": null,
            "rate_limit": {"requests": -1, "interval": "10s", "note": "This field is deprecated and safe to ignore."}}});
        Script::json(200, body.to_string().as_bytes())
    }
}

/// `GET /api/v1/models/{author}/{slug}/endpoints`: the model's hosts with per-token prices.
fn endpoints(model: &str) -> Script {
    let hosts: Vec<Value> = profiles::routes_of(model)
        .map(|p| {
            json!({"name": format!("{} | {}", p.route, p.model), "model_name": p.model,
                "context_length": 8192, "provider_name": p.route, "tag": p.route.to_ascii_lowercase(),
                "quantization": "bf16", "max_completion_tokens": 8192, "max_prompt_tokens": null,
                "pricing": {"prompt": profiles::per_token_price(p.input_per_mtok),
                    "completion": profiles::per_token_price(p.output_per_mtok), "request": "0", "image": "0"},
                "supported_parameters": ["max_tokens", "temperature", "top_p", "stop", "seed"],
                "status": 0, "uptime_last_30m": 100.0 - p.error_pct})
        })
        .collect();
    if hosts.is_empty() {
        return error_json(404, json!({"error": {"code": 404, "message": "No endpoints found for this model"}}));
    }
    let body = json!({"data": {"id": model, "name": model, "created": 1_713_398_400,
        "description": "Simulated by vigil --demo.",
        "architecture": {"modality": "text->text", "input_modalities": ["text"], "output_modalities": ["text"],
            "tokenizer": "Other", "instruct_type": null},
        "endpoints": hosts}});
    Script::json(200, body.to_string().as_bytes())
}

fn error_json(status: u16, body: Value) -> Script {
    Script::json(status, body.to_string().as_bytes())
}

fn has_bearer(request: &RequestRecord) -> bool {
    request.header("authorization").and_then(|v| v.strip_prefix("Bearer ")).is_some_and(|k| !k.trim().is_empty())
}

/// Rough tokenizer stand-in: ~4 characters a token plus a few per message.
fn ask(model: &str, texts: Vec<String>, max_tokens: Option<u64>) -> Ask {
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    let prompt_tokens = u32::try_from(chars.div_ceil(4) + 4 * texts.len()).unwrap_or(u32::MAX).max(1);
    let max_tokens = max_tokens.map_or(DEFAULT_MAX_TOKENS, |n| u32::try_from(n).unwrap_or(u32::MAX));
    Ask { model: model.to_string(), prompt_tokens, max_tokens }
}

/// Text of an OpenAI/Anthropic `content` (a string or a list of `{text}` blocks).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// Text of a Gemini `{parts: [{text}]}` object.
fn parts_text(content: &Value) -> String {
    content["parts"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// What a probe reads from the demo's headers `elapsed` into the demo.
    fn read(elapsed: Duration) -> crate::vocab::ratelimit::Headroom {
        let now = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).single().expect("time");
        let script = with_headroom(Script::status(200), elapsed, now);
        let mut h = ::http::HeaderMap::new();
        for (k, v) in &script.headers {
            let name = ::http::HeaderName::from_bytes(k.as_bytes()).expect("name");
            h.append(name, ::http::HeaderValue::from_str(v).expect("value"));
        }
        crate::decide::ratelimit::from_headers(&h, now)
    }

    /// Every demo host answers a `tools` request with a call vigil's own adapter reads as
    /// `get_weather({"city": "Paris"})`, in its own dialect.
    #[test]
    fn every_demo_dialect_calls_the_declared_function() {
        let mut rng = StdRng::seed_from_u64(7);
        for (wire, kind, model, route) in [
            (Wire::OpenRouter, ProviderKind::Openai, LLAMA, profiles::routes_of(LLAMA).next().map(|p| p.route)),
            (Wire::Anthropic, ProviderKind::Anthropic, ANTHROPIC_MODEL, Some("")),
            (Wire::Gemini, ProviderKind::Gemini, GEMINI_MODEL, Some("")),
        ] {
            let profile = profiles::find(wire, model, route.unwrap_or_default()).expect("profile");
            let ask = Ask { model: model.to_string(), prompt_tokens: 40, max_tokens: 64 };
            let script = std::iter::repeat_with(|| {
                profile.tool_call_for(&mut rng, &ask, crate::decide::capability::TOOL_NAME, DEMO_TOOL_ARGUMENTS)
            })
            .find(|s| s.status == 200)
            .expect("a successful draw");
            let mut parser = crate::io::probe::sse::SseParser::new(1 << 20);
            let mut events = Vec::new();
            parser.feed(&script.body(), |e| events.push(e)).expect("SSE");
            events.extend(parser.finish().expect("SSE"));
            let adapter = crate::io::probe::adapter_for(kind);
            let pieces: Vec<_> = events.iter().filter_map(|e| adapter.interpret(e).tool).collect();
            let name = pieces.iter().find_map(|p| p.name.clone());
            let arguments: String = pieces.iter().map(|p| p.arguments.as_str()).collect();
            assert_eq!(name.as_deref(), Some("get_weather"), "{wire:?}");
            let args: Value = serde_json::from_str(&arguments).unwrap_or_else(|e| panic!("{wire:?}: {e}: {arguments}"));
            assert_eq!(args["city"], "Paris", "{wire:?}");
            assert!(events.iter().any(|e| adapter.interpret(e).done), "{wire:?}: the stream ends");
        }
    }

    #[test]
    fn the_demo_turns_tools_probes_on_only_when_the_config_leaves_them_off() {
        let mut off = crate::config::CapabilitiesConfig::default();
        ask_for_tools(&mut off);
        assert!(off.enabled);
        assert_eq!(off.every, DEMO_CAPABILITY_EVERY);
        assert_eq!(off.checks, vec![crate::vocab::capability::Capability::Tools]);
        let own = crate::config::CapabilitiesConfig { enabled: true, ..Default::default() };
        let mut kept = own.clone();
        ask_for_tools(&mut kept);
        assert_eq!(kept, own, "a configured [probe.capabilities] is kept");
    }

    #[test]
    fn the_demo_allowance_runs_low_late_in_each_window_and_is_whole_after_the_reset() {
        let at = |s: u64| read(Duration::from_secs(s));
        assert_eq!(at(0).tightest().map(|(_, f)| f), Some(1.0));
        let late = at(570);
        assert!(crate::decide::ratelimit::low(&late, 0.1).is_some(), "{late:?}");
        let reset = late.tokens.and_then(|a| a.reset_at).expect("reset");
        assert_eq!(reset, chrono::Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 30).single().expect("time"));
        assert!(crate::decide::ratelimit::low(&at(600), 0.1).is_none(), "whole again in the next window");
        assert!(crate::decide::ratelimit::low(&at(300), 0.1).is_none());
    }
}
