//! `[[provider]]`: the APIs probed, each resolved against its built-in defaults and checked
//! entry by entry, so a bad key, URL, model list, balance, price, header or certificate fails the
//! start naming `provider[i].field`. A provider whose key variable is unset is skipped, not an
//! error, so one file serves machines holding different keys.

use crate::config::builtins::{Builtin, BUILTINS};
use crate::config::env::secret_of;
use crate::config::headers::SecretHeader;
use crate::config::kind::{Endpoint, ProviderKind};
use crate::config::parse::{duration_in, no_controls, number_in, DAY, MINUTE, SECOND};
use crate::config::status_pages::StatusPageSource;
use crate::config::{invalid, ConfigError, Env};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use url::Url;

/// `price = { input_per_mtok, output_per_mtok }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// USD per million input tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
}

impl Price {
    /// Cost of one call.
    pub fn cost(&self, input_tokens: u32, output_tokens: u32) -> f64 {
        (f64::from(input_tokens) * self.input_per_mtok + f64::from(output_tokens) * self.output_per_mtok) / 1e6
    }
}

/// `balance = { min_usd, every, warn_hours, demote_within }`.
#[derive(Debug, Clone)]
pub struct BalanceConfig {
    /// Alert below this balance.
    pub min_usd: f64,
    /// Poll period.
    pub every: Duration,
    /// Alert when the burn rate projects zero within this many hours.
    pub warn_hours: f64,
    /// Demote the provider in every chain when the projection says empty within this
    /// (`None`: `off`, never demoted for credit).
    pub demote_within: Option<Duration>,
}

/// `balance.demote_within` when not given.
pub const DEFAULT_DEMOTE_WITHIN: Duration = Duration::from_secs(6 * 3600);

/// One `[[provider]]`.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Name (`openrouter`).
    pub name: String,
    /// Protocol family.
    pub kind: ProviderKind,
    /// API base (`https://openrouter.ai/api/v1`) or, for `http`, the URL to GET.
    pub base_url: Url,
    /// Variable the key was read from.
    pub api_key_env: Option<String>,
    /// The key itself.
    pub api_key: Option<SecretString>,
    /// Models to probe.
    pub models: Vec<String>,
    /// Upstream hosts to pin (one target each).
    pub routes: Vec<String>,
    /// Models that stream reasoning; probed with the smallest effort and a larger token budget.
    pub reasoning_models: Vec<String>,
    /// Low-credit polling.
    pub balance: Option<BalanceConfig>,
    /// Configured price for every model of the provider (`price`).
    pub price: Option<Price>,
    /// Configured prices per model (`prices."model" = {…}`); win over `price` and the built-in table.
    pub prices: BTreeMap<String, Price>,
    /// Extra request headers (e.g. OpenRouter `HTTP-Referer`).
    pub headers: BTreeMap<String, String>,
    /// Request headers whose values come from the environment (`headers_env`), never printed.
    pub secret_headers: Vec<SecretHeader>,
    /// Its own `ca_file` and client certificate (`client_cert_file`/`client_key_file`).
    pub tls: crate::config::tls::ProviderTls,
    /// Golden prompts (`[[provider.check]]`).
    pub checks: Vec<crate::config::CheckConfig>,
    /// The API its models are probed on (`endpoint`; only `kind = "openai"` has more than chat).
    pub endpoint: Endpoint,
    /// Bedrock's and Vertex's own settings (`region`, `credentials_file`, …).
    pub cloud: crate::config::cloud::CloudAuth,
}

impl ProviderConfig {
    /// A provider with no key, models, routes, prices, headers or TLS settings of its own: the
    /// start of every provider built in code (the demo, tests, benches), which then set what they need.
    pub fn new(name: &str, kind: ProviderKind, base_url: Url) -> Self {
        ProviderConfig {
            name: name.to_string(),
            kind,
            base_url,
            api_key_env: None,
            api_key: None,
            models: Vec::new(),
            routes: Vec::new(),
            reasoning_models: Vec::new(),
            balance: None,
            price: None,
            prices: BTreeMap::new(),
            headers: BTreeMap::new(),
            secret_headers: Vec::new(),
            tls: Default::default(),
            checks: Vec::new(),
            endpoint: Endpoint::Chat,
            cloud: Default::default(),
        }
    }

    /// True when its targets answer a chat turn (every kind but plain HTTP, on any endpoint but
    /// embeddings): what canary runs, golden checks and capability probes need.
    pub fn chats(&self) -> bool {
        self.kind != ProviderKind::Http && self.endpoint != Endpoint::Embeddings
    }
}

/// One `[[provider]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    name: String,
    kind: Option<ProviderKind>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    api_key_file: Option<String>,
    models: Option<Vec<String>>,
    #[serde(default)]
    routes: Vec<String>,
    #[serde(default)]
    reasoning_models: Vec<String>,
    balance: Option<RawBalance>,
    price: Option<Price>,
    #[serde(default)]
    prices: BTreeMap<String, Price>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    headers_env: BTreeMap<String, String>,
    #[serde(default)]
    headers_file: BTreeMap<String, String>,
    ca_file: Option<String>,
    client_cert_file: Option<String>,
    client_key_file: Option<String>,
    status_page_url: Option<String>,
    /// Components whose incidents `provider_incident` pages for this provider.
    status_page_components: Option<Vec<String>>,
    #[serde(default)]
    check: Vec<super::checks::RawCheck>,
    endpoint: Option<Endpoint>,
    /// Bedrock: the AWS region.
    region: Option<String>,
    /// Bedrock: the shared credentials file's profile.
    profile: Option<String>,
    /// Bedrock: the shared credentials file; Vertex: the service-account JSON key.
    credentials_file: Option<String>,
    /// Vertex: the Google Cloud project.
    project: Option<String>,
    /// Vertex: the location.
    location: Option<String>,
}

/// `balance = { … }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBalance {
    min_usd: f64,
    every: Option<String>,
    warn_hours: Option<f64>,
    demote_within: Option<String>,
}

/// What the `[[provider]]` list resolves to.
pub(super) struct Providers {
    /// Providers with their keys present.
    pub(super) providers: Vec<std::sync::Arc<ProviderConfig>>,
    /// Providers skipped because their key variable is unset: (name, variable).
    pub(super) skipped: Vec<(String, String)>,
    /// The status pages of the providers kept.
    pub(super) pages: Vec<StatusPageSource>,
}

impl Providers {
    /// Every configured provider's name, skipped ones included.
    pub(super) fn names(&self) -> Vec<&str> {
        self.providers.iter().map(|p| p.name.as_str()).chain(self.skipped.iter().map(|(n, _)| n.as_str())).collect()
    }
}

/// The `[[provider]]` list (every built-in when the file has none), validated in order.
pub(super) fn validate(raw: Option<Vec<RawProvider>>, env: &dyn Env) -> Result<Providers, ConfigError> {
    let raw = raw.unwrap_or_else(|| {
        BUILTINS.iter().map(|b| RawProvider { name: b.name.into(), ..Default::default() }).collect()
    });
    let mut out = Providers { providers: Vec::new(), skipped: Vec::new(), pages: Vec::new() };
    let mut names = HashSet::new();
    for (i, rp) in raw.into_iter().enumerate() {
        check_name(i, &rp, &mut names)?;
        resolve(i, rp, env, &mut out)?;
    }
    Ok(out)
}

/// Provider `i`'s name is set, printable and new; its plain headers are checked on the way.
fn check_name(i: usize, rp: &RawProvider, names: &mut HashSet<String>) -> Result<(), ConfigError> {
    let key = format!("provider[{i}].name");
    if rp.name.trim().is_empty() {
        return Err(invalid(key, "must not be empty"));
    }
    no_controls(&key, &rp.name)?;
    crate::config::headers::validate(i, &rp.headers, &rp.headers_env, &rp.headers_file)?;
    if !names.insert(rp.name.clone()) {
        return Err(invalid(key, format!("duplicate provider name {:?}", rp.name)));
    }
    Ok(())
}

/// Provider `i` resolved against its built-in defaults into `out`: kept, or skipped when its
/// key variable is unset.
fn resolve(i: usize, mut rp: RawProvider, env: &dyn Env, out: &mut Providers) -> Result<(), ConfigError> {
    let key = |field: &str| format!("provider[{i}].{field}");
    let builtin = BUILTINS.iter().find(|b| b.name == rp.name);
    let kind = rp.kind.or(builtin.map(|b| b.kind)).ok_or_else(|| {
        invalid(key("kind"), "missing (openai | anthropic | azure | gemini | bedrock | vertex | http)")
    })?;
    let raw_cloud = super::cloud::RawCloud {
        region: rp.region.take(),
        profile: rp.profile.take(),
        credentials_file: rp.credentials_file.take(),
        project: rp.project.take(),
        location: rp.location.take(),
    };
    let (cloud, default_url) = super::cloud::validate(i, kind, raw_cloud)?;
    let base_url = base_url(&key("base_url"), rp.base_url.take().or(default_url.map(String::from)), builtin)?;
    if kind == ProviderKind::Vertex && (rp.api_key_env.is_some() || rp.api_key_file.is_some()) {
        return Err(invalid(
            key("api_key_env"),
            "kind = \"vertex\" authenticates with its credentials_file, not a key",
        ));
    }
    // Bedrock signs with AWS credentials unless a Bedrock API key is named.
    let keyless = match kind {
        ProviderKind::Http | ProviderKind::Vertex => true,
        ProviderKind::Bedrock => rp.api_key_env.is_none() && rp.api_key_file.is_none(),
        _ => false,
    };
    let (api_key_env, api_key) = api_key(i, &mut rp, builtin, env)?;
    if !keyless && api_key.is_none() {
        let var = api_key_env.clone().unwrap_or_default();
        if var.is_empty() {
            return Err(invalid(
                key("api_key_env"),
                "missing: name the variable (api_key_env) or the file (api_key_file) that holds the key",
            ));
        }
        out.skipped.push((rp.name, var));
        return Ok(());
    }
    let models = models(i, kind, rp.models.take(), builtin)?;
    check_lists(i, &models, &rp.routes, &rp.reasoning_models)?;
    let balance = balance(i, kind, rp.balance.take())?;
    check_prices(i, rp.price.as_ref(), &rp.prices)?;
    let secret_headers = crate::config::headers::read_secrets(i, &rp.headers_env, &rp.headers_file, env)?;
    let tls = tls(i, &rp)?;
    let endpoint = endpoint(i, kind, rp.endpoint)?;
    if kind == ProviderKind::Http && !rp.check.is_empty() {
        return Err(invalid(key("check"), "a plain HTTP target has no answer to check; checks need a chat API kind"));
    }
    if endpoint == Endpoint::Embeddings && !rp.check.is_empty() {
        return Err(invalid(
            key("check"),
            "an embeddings target answers with vectors, not text; checks need a chat endpoint",
        ));
    }
    let checks = super::checks::validate(i, std::mem::take(&mut rp.check), &models)?;
    let default_page = builtin.map_or("", |b| b.status_page);
    let components = rp.status_page_components.as_ref();
    let page = crate::config::status_pages::source(i, &rp.name, rp.status_page_url.take(), default_page, components)?;
    out.pages.extend(page);
    out.providers.push(std::sync::Arc::new(ProviderConfig {
        name: rp.name,
        kind,
        base_url,
        api_key_env,
        api_key,
        models,
        routes: rp.routes,
        reasoning_models: rp.reasoning_models,
        balance,
        price: rp.price,
        prices: rp.prices,
        headers: rp.headers,
        secret_headers,
        tls,
        checks,
        endpoint,
        cloud,
    }));
    Ok(())
}

/// `endpoint`: `chat` (the default) for every kind; `embeddings` and `responses` are OpenAI API
/// endpoints, so only `kind = "openai"` takes them.
fn endpoint(i: usize, kind: ProviderKind, given: Option<Endpoint>) -> Result<Endpoint, ConfigError> {
    match given.unwrap_or_default() {
        Endpoint::Chat => Ok(Endpoint::Chat),
        e if kind == ProviderKind::Openai => Ok(e),
        e => Err(invalid(
            format!("provider[{i}].endpoint"),
            format!(
                "{:?} is an OpenAI API endpoint; kind = {:?} is probed on its own chat API only",
                e.as_str(),
                kind.as_str()
            ),
        )),
    }
}

/// `base_url` as given, else the built-in's; http or https only.
fn base_url(key: &str, given: Option<String>, builtin: Option<&Builtin>) -> Result<Url, ConfigError> {
    let base = given.or(builtin.map(|b| b.base_url.to_string())).ok_or_else(|| invalid(key, "missing"))?;
    let url = Url::parse(&base).map_err(|e| invalid(key, e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(key, format!("scheme {:?} is not http or https", url.scheme())));
    }
    Ok(url)
}

/// The key's variable (the built-in's unless a file is named) and the key itself, when set.
fn api_key(
    i: usize,
    rp: &mut RawProvider,
    builtin: Option<&Builtin>,
    env: &dyn Env,
) -> Result<(Option<String>, Option<SecretString>), ConfigError> {
    let api_key_file = rp.api_key_file.take().filter(|f| !f.trim().is_empty());
    // A file, when given, replaces the built-in default variable.
    let api_key_env = match &api_key_file {
        Some(_) => rp.api_key_env.take(),
        None => rp.api_key_env.take().or(builtin.map(|b| b.key_env.to_string())),
    };
    let api_key = secret_of(env, &format!("provider[{i}].api_key"), api_key_env.as_deref(), api_key_file.as_deref())?;
    Ok((api_key_env, api_key))
}

/// The models to probe: none for plain http (one empty target), else as given or the built-in's.
fn models(
    i: usize,
    kind: ProviderKind,
    given: Option<Vec<String>>,
    builtin: Option<&Builtin>,
) -> Result<Vec<String>, ConfigError> {
    let models = match (kind, given) {
        (ProviderKind::Http, Some(m)) if !m.is_empty() => {
            return Err(invalid(format!("provider[{i}].models"), "plain http providers take no models"));
        }
        (ProviderKind::Http, _) => vec![String::new()],
        (_, Some(m)) if !m.is_empty() => m,
        (_, _) => match builtin {
            Some(b) => vec![b.model.to_string()],
            None => return Err(invalid(format!("provider[{i}].models"), "needs at least one model")),
        },
    };
    if let Some(j) = models.iter().position(|m| kind != ProviderKind::Http && m.trim().is_empty()) {
        return Err(invalid(format!("provider[{i}].models[{j}]"), "must not be empty"));
    }
    Ok(models)
}

/// Models, routes and reasoning models: printable and each listed once.
fn check_lists(i: usize, models: &[String], routes: &[String], reasoning: &[String]) -> Result<(), ConfigError> {
    for (list, values) in [("models", models), ("routes", routes), ("reasoning_models", reasoning)] {
        for (j, v) in values.iter().enumerate() {
            no_controls(&format!("provider[{i}].{list}[{j}]"), v)?;
            if values[..j].contains(v) {
                return Err(invalid(format!("provider[{i}].{list}[{j}]"), format!("duplicate {v:?}")));
            }
        }
    }
    Ok(())
}

/// `balance`, only where credit can be polled (an OpenRouter-compatible API).
fn balance(i: usize, kind: ProviderKind, raw: Option<RawBalance>) -> Result<Option<BalanceConfig>, ConfigError> {
    let key = |field: &str| format!("provider[{i}].{field}");
    let Some(b) = raw else { return Ok(None) };
    if kind != ProviderKind::Openai {
        return Err(invalid(
            key("balance"),
            format!(
                "credit is read from an OpenRouter-compatible /key and /credits API (kind = \"openai\"); \
                 kind = \"{}\" has none, so this balance would never be polled",
                kind.as_str()
            ),
        ));
    }
    Ok(Some(BalanceConfig {
        min_usd: number_in(&key("balance.min_usd"), b.min_usd, 0.0, 1_000_000_000.0, false)?,
        every: duration_in(&key("balance.every"), b.every.as_deref().unwrap_or("5m"), SECOND, DAY)?,
        warn_hours: number_in(&key("balance.warn_hours"), b.warn_hours.unwrap_or(24.0), 0.0, 8760.0, true)?,
        demote_within: match b.demote_within.as_deref().map(str::trim) {
            None => Some(DEFAULT_DEMOTE_WITHIN),
            Some("off") => None,
            Some(s) => Some(duration_in(&key("balance.demote_within"), s, MINUTE, 30 * DAY)?),
        },
    }))
}

/// `price` and `prices`: finite, not negative, at most a million USD per million tokens.
fn check_prices(i: usize, price: Option<&Price>, prices: &BTreeMap<String, Price>) -> Result<(), ConfigError> {
    let key = |field: &str| format!("provider[{i}].{field}");
    if let Some(price) = price {
        number_in(&key("price.input_per_mtok"), price.input_per_mtok, 0.0, 1_000_000.0, false)?;
        number_in(&key("price.output_per_mtok"), price.output_per_mtok, 0.0, 1_000_000.0, false)?;
    }
    for (model, price) in prices {
        number_in(&key(&format!("prices.{model}.input_per_mtok")), price.input_per_mtok, 0.0, 1_000_000.0, false)?;
        number_in(&key(&format!("prices.{model}.output_per_mtok")), price.output_per_mtok, 0.0, 1_000_000.0, false)?;
    }
    Ok(())
}

/// The provider's own `ca_file` and client certificate, read now; the certificate needs its key.
fn tls(i: usize, rp: &RawProvider) -> Result<crate::config::tls::ProviderTls, ConfigError> {
    let key = |field: &str| format!("provider[{i}].{field}");
    let ca_file = rp.ca_file.as_deref().map(std::path::PathBuf::from);
    let ca_certs = match &ca_file {
        Some(path) => crate::config::tls::load_certs(path).map_err(|e| invalid(key("ca_file"), e))?,
        None => Vec::new(),
    };
    let client = match (&rp.client_cert_file, &rp.client_key_file) {
        (Some(c), Some(k)) => Some(
            crate::config::tls::load_identity(c.as_ref(), k.as_ref())
                .map_err(|e| invalid(key("client_cert_file"), e))?,
        ),
        (None, None) => None,
        (Some(_), None) => return Err(invalid(key("client_key_file"), "missing: client_cert_file needs its key")),
        (None, Some(_)) => {
            return Err(invalid(key("client_cert_file"), "missing: client_key_file needs its certificate"))
        }
    };
    Ok(crate::config::tls::ProviderTls { ca_file, ca_certs, client })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err_at};
    use crate::config::{Config, ProviderKind};
    use secrecy::ExposeSecret;
    use std::time::Duration;

    #[test]
    fn empty_file_enables_only_builtins_whose_key_is_set() {
        let c = Config::from_toml("", &env(&[("GROQ_API_KEY", "sk-test-groq")])).expect("valid");
        assert_eq!(c.providers.len(), 1);
        assert_eq!(c.providers[0].name, "groq");
        assert_eq!(c.providers[0].base_url.as_str(), "https://api.groq.com/openai/v1");
        assert_eq!(c.skipped.len(), 6);
        assert!(c.skipped.iter().any(|(n, v)| n == "openrouter" && v == "OPENROUTER_API_KEY"));
        assert_eq!(c.probe.interval, Duration::from_secs(60));
        assert_eq!(c.baseline.window, Duration::from_secs(7 * 86400));
    }

    #[test]
    fn endpoint_is_an_openai_choice_and_embeddings_take_no_checks() {
        let e = [("OPENAI_API_KEY", "sk-test-x"), ("ANTHROPIC_API_KEY", "sk-test-a")];
        let text =
            "[[provider]]\nname = \"openai\"\nendpoint = \"embeddings\"\nmodels = [\"text-embedding-3-small\"]\n\
                    [[provider]]\nname = \"r\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                    api_key_env = \"OPENAI_API_KEY\"\nendpoint = \"responses\"\nmodels = [\"gpt-4.1-mini\"]";
        let c = Config::from_toml(text, &env(&e)).expect("valid");
        let endpoints: Vec<_> = c.providers.iter().map(|p| p.endpoint).collect();
        assert_eq!(endpoints, [crate::config::Endpoint::Embeddings, crate::config::Endpoint::Responses]);
        assert!(!c.providers[0].chats() && c.providers[1].chats());
        // check-config prints it, and reads back what it printed.
        let shown = c.redacted_toml();
        assert!(shown.contains("endpoint = \"embeddings\""), "{shown}");
        let again = Config::from_toml(&shown, &env(&e)).expect("printed config reads back");
        assert_eq!(again.providers[1].endpoint, crate::config::Endpoint::Responses);

        let msg = err_at("[[provider]]\nname = \"anthropic\"\nendpoint = \"responses\"", &e, "provider[0].endpoint");
        assert!(msg.contains("OpenAI API endpoint") && msg.contains("anthropic"), "{msg}");
        let msg = crate::config::test_util::err("[[provider]]\nname = \"openai\"\nendpoint = \"images\"", &e);
        assert!(msg.contains("images") && msg.contains("embeddings"), "an unknown endpoint is named: {msg}");
        let check = "[[provider]]\nname = \"openai\"\nendpoint = \"embeddings\"\n\
                     [[provider.check]]\nname = \"c\"\nprompt = \"p\"\nexact = \"x\"";
        let msg = err_at(check, &e, "provider[0].check");
        assert!(msg.contains("vectors"), "{msg}");
    }

    #[test]
    fn builtin_name_inherits_defaults_and_keeps_overrides() {
        let c = Config::from_toml(
            "[[provider]]\nname = \"openai\"\nmodels = [\"gpt-4.1-nano\"]",
            &env(&[("OPENAI_API_KEY", "sk-test-x")]),
        )
        .expect("valid");
        assert_eq!(c.providers[0].kind, ProviderKind::Openai);
        assert_eq!(c.providers[0].models, vec!["gpt-4.1-nano"]);
        assert_eq!(
            c.providers[0].api_key.as_ref().map(|k| k.expose_secret().to_string()).as_deref(),
            Some("sk-test-x")
        );
    }

    #[test]
    fn a_balance_is_refused_where_credit_cannot_be_polled() {
        let p = |kind: &str| {
            format!("[[provider]]\nname = \"s\"\nkind = \"{kind}\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nmodels = [\"m\"]\nbalance = {{ min_usd = 5.0 }}\n")
        };
        let k = [("K", "sk-test-k")];
        for kind in ["anthropic", "gemini", "azure"] {
            let msg = err_at(&p(kind), &k, "provider[0].balance");
            assert!(msg.contains(&format!("kind = \"{kind}\" has none")), "{msg}");
        }
        let c = Config::from_toml(&p("openai"), &env(&k)).expect("openai kind polls credit");
        assert_eq!(c.credit_watch().map(|(p, b)| (p.name.as_str(), b.min_usd)).collect::<Vec<_>>(), [("s", 5.0)]);
    }

    #[test]
    fn provider_numbers_have_ranges() {
        let p = |extra: &str| {
            format!("[[provider]]\nname = \"s\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nmodels = [\"m\"]\n{extra}")
        };
        let k = [("K", "sk-test-k")];
        err_at(&p("balance = { min_usd = -1.0 }"), &k, "provider[0].balance.min_usd");
        err_at(&p("balance = { min_usd = 1.0, every = \"1000000000y\" }"), &k, "provider[0].balance.every");
        err_at(&p("balance = { min_usd = 1.0, warn_hours = 0.0 }"), &k, "provider[0].balance.warn_hours");
        err_at(&p("price = { input_per_mtok = 1e300, output_per_mtok = 1.0 }"), &k, "provider[0].price.input_per_mtok");
        err_at(&p("price = { input_per_mtok = 1.0, output_per_mtok = -1.0 }"), &k, "provider[0].price.output_per_mtok");
    }

    #[test]
    fn demote_within_defaults_to_six_hours_takes_off_and_has_a_range() {
        let p = |extra: &str| {
            format!("[[provider]]\nname = \"s\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nmodels = [\"m\"]\nbalance = {{ min_usd = 1.0{extra} }}\n")
        };
        let k = [("K", "sk-test-k")];
        let within = |extra: &str| {
            let c = Config::from_toml(&p(extra), &env(&k)).expect("valid");
            let within = c.credit_watch().map(|(_, b)| b.demote_within).next().expect("watched");
            within
        };
        assert_eq!(within(""), Some(Duration::from_secs(6 * 3600)));
        assert_eq!(within(", demote_within = \"off\""), None);
        assert_eq!(within(", demote_within = \"90m\""), Some(Duration::from_secs(5400)));
        for (bad, why) in
            [("\"30s\"", "out of range"), ("\"31d\"", "out of range"), ("\"soon\"", "not a duration"), ("6", "")]
        {
            let e = err_at(&p(&format!(", demote_within = {bad}")), &k, "provider[0].balance.demote_within");
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn duplicates_control_characters_and_unknown_maintenance_providers_are_refused() {
        let p = |extra: &str| {
            format!("[[provider]]\nname = \"s\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\n{extra}")
        };
        let k = [("K", "sk-test-k")];
        let e = err_at(&p("models = [\"a\", \"b\", \"a\"]"), &k, "provider[0].models[2]");
        assert!(e.contains("duplicate"), "{e}");
        err_at(&p("models = [\"a\"]\nroutes = [\"X\", \"X\"]"), &k, "provider[0].routes[1]");
        let two = format!("{}\n{}", p("models = [\"a\"]"), p("models = [\"b\"]"));
        err_at(&two, &k, "provider[1].name");
        let e = err_at(
            &p("models = [\"a\"]\nheaders = { \"X-Title\" = \"a\\r\\nX-Evil: 1\" }"),
            &k,
            "provider[0].headers.X-Title",
        );
        assert!(e.contains("control characters"), "{e}");
        err_at(&p("models = [\"a\"]\nheaders = { \"Bad Name\" = \"v\" }"), &k, "provider[0].headers.Bad Name");
        err_at(&p("models = [\"a\\u0000\"]"), &k, "provider[0].models[0]");
        err_at("region = \"eu\\nwest\"", &[], "region");
        let m = "[[alerts.maintenance]]\nprovider = \"nope\"\nstart = \"2026-12-01T02:00:00Z\"\nend = \"2026-12-01T04:00:00Z\"";
        let e = err_at(m, &[], "alerts.maintenance[0].provider");
        assert!(e.contains("not a configured provider"), "{e}");
        // A provider skipped for its missing key is still a known name.
        let skipped = m.replace("nope", "gemini");
        Config::from_toml(&skipped, &env(&[])).expect("a window for a built-in provider without its key is fine");
    }
}
