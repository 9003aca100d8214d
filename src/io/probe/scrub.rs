//! The one place a probe's [`Sample`] is made safe to keep: provider-controlled text is scrubbed
//! of secrets and truncated, provider numbers are range-checked. Every later stage (storage,
//! metrics, `/v1/targets`, the status page, alerts, logs) sees only what leaves here.

use crate::config::ProviderConfig;
use crate::vocab::sample::Sample;
use secrecy::ExposeSecret;

/// Most bytes of provider error text kept in a sample.
pub const MAX_ERROR_BYTES: usize = 1024;
/// Most bytes of a provider request id kept in a sample.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// Highest cost one probe may plausibly report (USD); above it the figure is dropped.
pub const MAX_COST_USD: f64 = 100.0;
/// Highest token count one probe may plausibly report; above it the figure is dropped.
pub const MAX_TOKENS: u32 = 1_000_000;
/// Highest generation speed kept (tokens per second).
pub const MAX_TOKENS_PER_S: f64 = 1_000_000.0;
/// What a secret or key-like value is replaced with.
pub const REDACTED: &str = "[redacted]";
/// Shortest configured secret matched literally: shorter values would match ordinary text.
const MIN_SECRET_LEN: usize = 8;

/// Provider fields that can be rejected (`vigil_provider_values_rejected_total{field}`).
pub const REJECTABLE_FIELDS: [&str; 4] = ["cost_usd", "input_tokens", "output_tokens", "tokens_per_s"];

/// Notes on the sample that `field` was dropped; the metrics count it when the sample is observed.
fn reject(sample: &mut Sample, field: &'static str) {
    sample.rejected.push(field);
    tracing::debug!(field, target = %sample.target, "implausible provider value dropped");
}

/// Values that must never be kept: a provider's key and its secret header values.
#[derive(Clone, Default)]
pub struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.0.len())
    }
}

impl Secrets {
    /// The secrets one provider's requests carry.
    pub fn of(p: &ProviderConfig) -> Secrets {
        let mut values: Vec<String> = p.api_key.iter().map(|k| k.expose_secret().to_string()).collect();
        values.extend(p.secret_headers.iter().map(|h| h.value.expose_secret().to_string()));
        values.extend(p.headers.iter().filter(|(k, _)| crate::config::secret_header_name(k)).map(|(_, v)| v.clone()));
        if let crate::config::CloudAuth::Vertex(v) = &p.cloud {
            values.push(v.account.private_key.expose_secret().to_string());
        }
        Secrets::new(values)
    }

    /// These secrets and `more` (credentials fetched at run time: AWS keys, OAuth tokens).
    pub fn with(self, more: impl IntoIterator<Item = String>) -> Secrets {
        Secrets::new(self.0.into_iter().chain(more))
    }

    /// Every secret vigil itself is configured with: each provider's (see [`Secrets::of`]), the
    /// API token and the alert channels' URLs, keys and signing secrets. For text from outside
    /// that belongs to no one probe (providers' status pages).
    pub fn of_config(c: &crate::config::Config) -> Secrets {
        let exposed = |s: &secrecy::SecretString| s.expose_secret().to_string();
        let mut values: Vec<String> = c.providers.iter().flat_map(|p| Secrets::of(p).0).collect();
        values.extend(c.http.api_token.iter().map(exposed));
        let a = &c.alerts;
        values.extend(a.slack.iter().map(|x| exposed(&x.webhook_url)));
        values.extend(a.email.iter().map(|x| exposed(&x.smtp_url)));
        values.extend(a.pagerduty.iter().map(|x| exposed(&x.routing_key)));
        values.extend(a.webhook.iter().flat_map(|x| std::iter::once(&x.url).chain(&x.secret)).map(exposed));
        values.extend(a.alertmanager.iter().map(|x| exposed(&x.url)));
        Secrets::new(values)
    }

    /// Secrets from plain values; empty and very short ones are ignored.
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let mut v: Vec<String> = values.into_iter().filter(|s| s.trim().len() >= MIN_SECRET_LEN).collect();
        // Longest first, so a key that contains another is replaced whole.
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        v.dedup();
        Secrets(v)
    }
}

/// Makes a finished sample safe to keep: scrubbed, truncated and range-checked text and numbers.
pub fn finalise(sample: &mut Sample, secrets: &Secrets) {
    sample.error = sample.error.take().map(|e| clean(&e, secrets, MAX_ERROR_BYTES, true));
    sample.request_id =
        sample.request_id.take().map(|id| clean(&id, secrets, MAX_REQUEST_ID_BYTES, false)).filter(|id| !id.is_empty());
    if let Some(c) = sample.cost_usd {
        if !(c.is_finite() && (0.0..=MAX_COST_USD).contains(&c)) {
            sample.cost_usd = None;
            reject(sample, "cost_usd");
        }
    }
    if sample.input_tokens.is_some_and(|n| n > MAX_TOKENS) {
        sample.input_tokens = None;
        reject(sample, "input_tokens");
    }
    if sample.output_tokens.is_some_and(|n| n > MAX_TOKENS) {
        sample.output_tokens = None;
        // The speed was derived from the count, so it goes too.
        sample.tokens_per_s = None;
        reject(sample, "output_tokens");
    }
    if let Some(v) = sample.tokens_per_s {
        if !(v.is_finite() && (0.0..=MAX_TOKENS_PER_S).contains(&v)) {
            sample.tokens_per_s = None;
            reject(sample, "tokens_per_s");
        }
    }
    sample.retry_after_s = sample.retry_after_s.and_then(super::clamp_retry_after);
}

/// Scrubs `text` (configured secrets, key-like tokens; with `generic`, also long hex and
/// base64 runs), turns control characters into spaces and cuts it to `max` bytes.
pub fn clean(text: &str, secrets: &Secrets, max: usize, generic: bool) -> String {
    let mut s = text.to_string();
    for secret in &secrets.0 {
        if s.contains(secret.as_str()) {
            s = s.replace(secret.as_str(), REDACTED);
        }
    }
    let s = scrub_key_like(&s, generic);
    let s: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let cut = super::truncate(s.trim(), max);
    // A cut can leave the head of a configured secret at the end: drop such a tail (marked as
    // a cut, which also keeps the text within `max` plus the mark).
    match secrets.0.iter().find_map(|k| secret_tail(&cut, k)) {
        Some(at) => format!("{}…", &cut[..at]),
        None => cut,
    }
}

/// Where a trailing fragment (≥ 6 bytes, before the `…` a cut adds) that starts `secret` begins.
fn secret_tail(cut: &str, secret: &str) -> Option<usize> {
    let body = cut.strip_suffix('…')?;
    (6..secret.len()).rev().find_map(|n| {
        let head = secret.get(..n)?;
        body.ends_with(head).then(|| body.len() - n)
    })
}

/// Characters a key or token is made of.
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+' | '/')
}

/// Prefixes of provider and service keys (OpenAI, OpenRouter, Anthropic, Groq, Google, Slack, GitHub).
const KEY_PREFIXES: [&str; 9] = ["sk-", "sk_", "gsk_", "AIza", "xoxb-", "xoxp-", "xoxa-", "ghp_", "pk-"];

/// Whether one whitespace/punctuation-delimited token looks like a credential.
fn key_like(token: &str, after_bearer: bool, generic: bool) -> bool {
    let t = token.trim_end_matches('.');
    if after_bearer && t.len() >= MIN_SECRET_LEN {
        return true;
    }
    if KEY_PREFIXES.iter().any(|p| t.starts_with(p) && t.len() >= p.len() + MIN_SECRET_LEN) {
        return true;
    }
    if !generic {
        return false;
    }
    let hex = t.len() >= 32 && t.chars().all(|c| c.is_ascii_hexdigit());
    // Long base64/base64url runs with letters of both cases and digits: words and paths have no such shape.
    let b64 = t.len() >= 40
        && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '-' | '_'))
        && t.chars().any(|c| c.is_ascii_digit())
        && t.chars().any(|c| c.is_ascii_uppercase())
        && t.chars().any(|c| c.is_ascii_lowercase());
    hex || b64
}

fn scrub_key_like(s: &str, generic: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut prev_word = String::new();
    while !rest.is_empty() {
        let start = rest.find(token_char).unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !token_char(c)).unwrap_or(rest.len());
        let token = &rest[..end];
        if token.is_empty() {
            break;
        }
        let after_bearer = prev_word.eq_ignore_ascii_case("bearer");
        if key_like(token, after_bearer, generic) {
            out.push_str(REDACTED);
        } else {
            out.push_str(token);
        }
        prev_word = token.to_string();
        rest = &rest[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets::new(["sk-test-0123456789abcdef".to_string(), "azure-header-value-77".to_string(), "short".into()])
    }

    #[test]
    fn configured_secrets_and_key_like_tokens_are_redacted() {
        let s = secrets();
        let e = clean("Incorrect API key provided: sk-test-0123456789abcdef. Try again", &s, 1024, true);
        assert_eq!(e, "Incorrect API key provided: [redacted]. Try again");
        assert_eq!(clean("bad header azure-header-value-77!", &s, 1024, true), "bad header [redacted]!");
        for key in [
            "sk-or-v1-test-placeholder-key",
            "sk-ant-api03-test-placeholder",
            "gsk_test_placeholder_key",
            "AIzaSy-test-placeholder-key",
        ] {
            let out = clean(&format!("key {key} is invalid"), &Secrets::default(), 1024, false);
            assert_eq!(out, "key [redacted] is invalid", "{key}");
        }
        assert_eq!(
            clean("Authorization: Bearer abc.def-ghi_jkl", &Secrets::default(), 1024, false),
            "Authorization: Bearer [redacted]"
        );
        let hex = "0123456789abcdef0123456789abcdef01";
        assert_eq!(clean(&format!("token {hex}"), &Secrets::default(), 1024, true), "token [redacted]");
        let b64 = "QWxhZGRpbjpvcGVuIHNlc2FtZQ0123456789AbCdEfGh";
        assert_eq!(clean(&format!("t={b64}"), &Secrets::default(), 1024, true), "t=[redacted]");
    }

    #[test]
    fn ordinary_words_ids_and_paths_are_kept() {
        let text = "Rate limit reached for model meta-llama/llama-3.1-8b-instruct in organization org-abc on \
                    requests per min (RPM): Limit 500. Visit https://platform.openai.com/account/rate-limits \
                    sk- skeleton task-runner request 3f2a-11ee chatcmpl-AbC123 supercalifragilisticexpialidocious";
        assert_eq!(clean(text, &secrets(), 4096, true), text);
        assert_eq!(
            clean("gen-1733012345-AbCdEfGhIjKlMnOpQrSt", &secrets(), 128, false),
            "gen-1733012345-AbCdEfGhIjKlMnOpQrSt"
        );
    }

    #[test]
    fn text_is_cut_and_control_characters_become_spaces() {
        let long = "é".repeat(5000);
        let out = clean(&long, &secrets(), MAX_ERROR_BYTES, true);
        assert!(out.len() <= MAX_ERROR_BYTES + '…'.len_utf8());
        assert_eq!(clean("a\r\nb\u{1b}[31mc", &secrets(), 100, true), "a  b [31mc");
        // A cut through a configured secret leaves none of it.
        let text = format!("{}sk-test-0123456789abcdef", "x".repeat(100));
        let out = clean(&text, &secrets(), 110, true);
        assert!(!out.contains("sk-test-01"), "{out}");
    }

    #[test]
    fn absurd_numbers_are_dropped_and_counted() {
        use crate::vocab::sample::Outcome;
        let target = crate::vocab::target::Target::new("p".into(), "m".into(), None, "r".into());
        let now = chrono::Utc::now();
        for cost in [-1e12, 1e308, f64::NAN, f64::INFINITY, 100.01] {
            let mut s = Sample::new(target.clone(), now, now);
            s.outcome = Outcome::Ok;
            s.cost_usd = Some(cost);
            s.output_tokens = Some(u32::MAX);
            s.tokens_per_s = Some(12.0);
            s.input_tokens = Some(12);
            s.request_id = Some("r".repeat(900_000));
            finalise(&mut s, &secrets());
            assert_eq!(s.cost_usd, None, "{cost}");
            assert_eq!(s.output_tokens, None);
            assert_eq!(s.tokens_per_s, None);
            assert_eq!(s.input_tokens, Some(12));
            assert!(s.request_id.as_ref().is_some_and(|r| r.len() <= MAX_REQUEST_ID_BYTES + 3));
            assert_eq!(s.rejected, vec!["cost_usd", "output_tokens"], "{cost}: noted for the metrics");
        }
        let mut ok = Sample::new(target, now, now);
        ok.cost_usd = Some(0.0001);
        finalise(&mut ok, &secrets());
        assert_eq!(ok.cost_usd, Some(0.0001));
        assert!(ok.rejected.is_empty());
    }
}
