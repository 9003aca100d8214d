//! Amazon Bedrock `ConverseStream`: `POST {base}/model/{modelId}/converse-stream`, signed with
//! AWS Signature Version 4 over the exact body sent (or a Bedrock API key as a bearer token),
//! answered with an `application/vnd.amazon.eventstream` binary stream ([`super::eventstream`])
//! whose first `contentBlockDelta` carrying text is the first token.
//!
//! Credentials, looked up before the timed exchange and cached for [`CREDENTIALS_TTL`]: the
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), then the
//! shared credentials file (`AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`, profile
//! `AWS_PROFILE` or `default`); a `credentials_file`/`profile` in the config names the file
//! source alone. Not supported (docs/CONFIGURATION.md says why): instance and container
//! metadata (IMDS, ECS), SSO, `credential_process`, web identity and role assumption.
//!
//! SigV4 is written here (some 60 lines over the `hmac`/`sha2` already in the build) rather than
//! taken from `aws-sigv4`, which brings `aws-smithy-*`, `aws-credential-types`, `time` and older
//! `hmac`/`sha2` majors; it is checked against AWS's published test vector.

use super::as_u32;
use super::eventstream::Message;
use super::join;
use super::Adapter;
use super::Credential;
use super::Fetch;
use super::Minted;
use super::ProbeParams;
use super::RequestSpec;
use super::Signals;
use super::Usage;
use super::REASONING_EXTRA_TOKENS;
use crate::config::{BedrockConfig, CloudAuth};
use crate::io::probe::sse::SseEvent;
use crate::vocab::sample::Outcome;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};
use url::Url;

/// Adapter for Bedrock's `ConverseStream`.
pub struct Bedrock;

/// How long looked-up AWS keys are reused before the sources are read again (rotated files
/// and refreshed session tokens are picked up within this).
pub const CREDENTIALS_TTL: Duration = Duration::from_secs(300);
/// The SigV4 service name of the Bedrock runtime.
const SERVICE: &str = "bedrock";
/// Smallest thinking budget Claude models on Bedrock accept.
const MIN_THINKING_BUDGET: u32 = 1024;

/// AWS access keys; the secret parts never leave as text except into the signature.
#[derive(Clone)]
pub struct AwsKeys {
    /// Access key id (not a secret: it appears in every signed request).
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: SecretString,
    /// Session token of temporary credentials.
    pub session_token: Option<SecretString>,
}

impl Adapter for Bedrock {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let CloudAuth::Bedrock(cfg) = &p.provider.cloud else {
            return Err("kind = \"bedrock\" without its region".into());
        };
        // The model id (or an inference-profile ARN) is one path segment: `:` and `/` encoded.
        let model = encode(p.model);
        let url = join(&p.provider.base_url, &format!("model/{model}/converse-stream"))?;
        let body = serde_json::to_vec(&body(p)).map_err(|e| e.to_string())?;
        let mut headers = vec![("accept".to_string(), "application/vnd.amazon.eventstream".to_string())];
        headers.extend(p.provider.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        headers.extend(super::secret_headers(p.provider));
        match (&p.provider.api_key, p.credential) {
            (Some(key), _) => headers.push(("authorization".into(), format!("Bearer {}", key.expose_secret()))),
            (None, Some(Credential::Aws(keys))) => {
                let signer = SigV4 { keys, region: &cfg.region, service: SERVICE, at: Utc::now() };
                headers.extend(signer.sign("POST", &url, &[("content-type", "application/json")], &body));
            }
            (None, _) => return Err("no AWS credentials to sign with".into()),
        }
        Ok(RequestSpec { method: ::http::Method::POST, url, headers, body: Some(body) })
    }

    fn event_stream(&self) -> bool {
        true
    }

    fn interpret(&self, _event: &SseEvent) -> Signals {
        Signals { error: Some("Bedrock answers with an event stream, not SSE".into()), ..Signals::default() }
    }

    fn interpret_message(&self, m: &Message) -> Signals {
        interpret(m)
    }

    fn credential<'a>(
        &'a self,
        fetch: Fetch<'a>,
    ) -> Option<futures::future::BoxFuture<'a, Result<Minted, (Outcome, String)>>> {
        // A Bedrock API key needs nothing fetched.
        if fetch.provider().api_key.is_some() {
            return None;
        }
        let CloudAuth::Bedrock(cfg) = &fetch.provider().cloud else { return None };
        let cfg = cfg.clone();
        Some(Box::pin(async move {
            let keys = tokio::task::spawn_blocking(move || aws_keys(&cfg, &|name: &str| std::env::var(name).ok()))
                .await
                .map_err(|e| (Outcome::AuthError, format!("AWS credentials: {e}")))?
                .map_err(|e| (Outcome::AuthError, format!("AWS credentials: {e}")))?;
            Ok(Minted { credential: Credential::Aws(keys), fresh_until: Instant::now() + CREDENTIALS_TTL })
        }))
    }
}

/// The `ConverseStream` request body.
fn body(p: &ProbeParams<'_>) -> Value {
    let (system, user) = p.prompts();
    let max_tokens = p.answer_tokens();
    let mut body = json!({
        "messages": [{"role": "user", "content": [{"text": user}]}],
        "inferenceConfig": {"maxTokens": max_tokens, "temperature": 0},
    });
    if !system.is_empty() {
        body["system"] = json!([{"text": system}]);
    }
    if p.reasoning {
        // Thinking needs the default temperature; Claude also needs it asked for by budget.
        body["inferenceConfig"] = json!({"maxTokens": max_tokens + REASONING_EXTRA_TOKENS});
        if p.model.contains("anthropic.") {
            body["inferenceConfig"]["maxTokens"] =
                json!(MIN_THINKING_BUDGET + max_tokens.max(REASONING_EXTRA_TOKENS / 8));
            body["additionalModelRequestFields"] =
                json!({"thinking": {"type": "enabled", "budget_tokens": MIN_THINKING_BUDGET}});
        }
    }
    if p.capability() == Some(crate::vocab::capability::Capability::Tools) {
        use crate::decide::capability::{tool_parameters, TOOL_NAME};
        body["toolConfig"] = json!({"tools": [{"toolSpec": {
            "name": TOOL_NAME, "description": "Current weather in a city", "inputSchema": {"json": tool_parameters()},
        }}]});
    }
    body
}

/// What one event-stream message means to the probe.
fn interpret(m: &Message) -> Signals {
    let payload: Result<Value, String> =
        serde_json::from_slice(&m.payload).map_err(|e| format!("malformed event payload JSON: {e}"));
    match m.header(":message-type") {
        Some("event") => {}
        Some("exception") => {
            let kind = m.header(":exception-type").unwrap_or("exception");
            let message = payload.ok().and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string));
            let text = format!("exception {kind}: {}", message.unwrap_or_default());
            return Signals { error: Some(text), ..Signals::default() };
        }
        Some("error") => {
            let code = m.header(":error-code").unwrap_or("error");
            let text = format!("error {code}: {}", m.header(":error-message").unwrap_or_default());
            return Signals { error: Some(text), ..Signals::default() };
        }
        other => {
            return Signals {
                error: Some(format!("unknown event-stream message type {other:?}")),
                ..Signals::default()
            }
        }
    }
    let v = match payload {
        Ok(v) => v,
        Err(e) => return Signals { error: Some(e), ..Signals::default() },
    };
    match m.header(":event-type").unwrap_or("") {
        "contentBlockStart" => {
            let tool = v.get("start").and_then(|s| s.get("toolUse"));
            Signals {
                tool: tool.map(|t| super::ToolDelta {
                    name: t.get("name").and_then(Value::as_str).map(str::to_string),
                    arguments: String::new(),
                }),
                ..Signals::default()
            }
        }
        "contentBlockDelta" => {
            let delta = v.get("delta");
            let text = delta.and_then(|d| d.get("text")).and_then(Value::as_str).filter(|t| !t.is_empty());
            let tool = delta.and_then(|d| d.get("toolUse")).and_then(|t| t.get("input")).and_then(Value::as_str);
            Signals {
                content: text.map(str::to_string),
                reasoning: delta.and_then(|d| d.get("reasoningContent")).is_some(),
                tool: tool.map(|input| super::ToolDelta { name: None, arguments: input.to_string() }),
                ..Signals::default()
            }
        }
        "messageStop" => Signals { done: true, ..Signals::default() },
        "metadata" => {
            let u = v.get("usage");
            Signals {
                usage: u.map(|u| Usage {
                    input: u.get("inputTokens").and_then(as_u32),
                    output: u.get("outputTokens").and_then(as_u32),
                    reasoning: None,
                    cost_usd: None,
                }),
                ..Signals::default()
            }
        }
        _ => Signals::default(), // messageStart, contentBlockStop
    }
}

/// Looks the keys up: the environment, then the shared credentials file (only the file when
/// the config names one); `env` reads a variable.
pub fn aws_keys(cfg: &BedrockConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<AwsKeys, String> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if cfg.credentials_file.is_none() && cfg.profile.is_none() {
        match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) => {
                return Ok(AwsKeys {
                    access_key_id: id,
                    secret_access_key: SecretString::from(secret),
                    session_token: var("AWS_SESSION_TOKEN").map(SecretString::from),
                })
            }
            (Some(_), None) => return Err("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into()),
            (None, Some(_)) => return Err("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into()),
            (None, None) => {}
        }
    }
    let path = match &cfg.credentials_file {
        Some(p) => p.clone(),
        None => match var("AWS_SHARED_CREDENTIALS_FILE") {
            Some(p) => p.into(),
            None => match var("HOME") {
                Some(home) => std::path::Path::new(&home).join(".aws").join("credentials"),
                None => return Err("no AWS_ACCESS_KEY_ID, and no HOME to find ~/.aws/credentials in".into()),
            },
        },
    };
    let profile = cfg.profile.clone().or_else(|| var("AWS_PROFILE")).unwrap_or_else(|| "default".into());
    let text = crate::config::secret_file::read_document(&path)
        .map_err(|e| format!("no AWS_ACCESS_KEY_ID in the environment, and {e}"))?;
    let shown = path.display();
    let section = profile_section(&text, &profile).ok_or_else(|| format!("{shown} has no [{profile}] profile"))?;
    let get = |k: &str| section.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
    let access_key_id =
        get("aws_access_key_id").ok_or_else(|| format!("profile [{profile}] of {shown} has no aws_access_key_id"))?;
    let secret = get("aws_secret_access_key")
        .ok_or_else(|| format!("profile [{profile}] of {shown} has no aws_secret_access_key"))?;
    Ok(AwsKeys {
        access_key_id,
        secret_access_key: SecretString::from(secret),
        session_token: get("aws_session_token").map(SecretString::from),
    })
}

/// The `key = value` lines of `[profile]` in an INI-style credentials file (keys lower-cased).
fn profile_section(text: &str, profile: &str) -> Option<Vec<(String, String)>> {
    let mut current: Option<bool> = None;
    let mut out: Option<Vec<(String, String)>> = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let hit = name.trim() == profile;
            current = Some(hit);
            if hit && out.is_none() {
                out = Some(Vec::new());
            }
            continue;
        }
        if current == Some(true) {
            if let (Some(section), Some((k, v))) = (out.as_mut(), line.split_once('=')) {
                section.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
    }
    out
}

/// RFC 3986 encoding of everything but the unreserved characters, as SigV4 wants it.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One SigV4 signing: the keys, the scope and the instant.
pub struct SigV4<'a> {
    /// Keys to sign with.
    pub keys: &'a AwsKeys,
    /// Region of the scope.
    pub region: &'a str,
    /// Service of the scope (`bedrock`).
    pub service: &'a str,
    /// Signing time (`x-amz-date`).
    pub at: DateTime<Utc>,
}

impl SigV4<'_> {
    /// The headers to add to a request of `method` to `url` with `body` and the further
    /// `signed` headers it sends: `x-amz-date`, `x-amz-security-token` for temporary keys, and
    /// `authorization`. `host` is signed as the request writes it (with a non-default port).
    pub fn sign(&self, method: &str, url: &Url, signed: &[(&str, &str)], body: &[u8]) -> Vec<(String, String)> {
        let amz_date = self.at.format("%Y%m%dT%H%M%SZ").to_string();
        let day = self.at.format("%Y%m%d").to_string();
        let host = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        let token = self.keys.session_token.as_ref().map(|t| t.expose_secret().to_string());
        let mut headers: Vec<(String, String)> =
            signed.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string())).collect();
        headers.push(("host".into(), host));
        headers.push(("x-amz-date".into(), amz_date.clone()));
        if let Some(t) = &token {
            headers.push(("x-amz-security-token".into(), t.clone()));
        }
        headers.sort();
        let names = headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(";");
        // Non-S3 services encode each path segment once more on top of the URL's own encoding.
        let path = url.path().split('/').map(encode).collect::<Vec<_>>().join("/");
        let mut query: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (encode(&k), encode(&v))).collect();
        query.sort();
        let query = query.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
        let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let canonical =
            format!("{method}\n{path}\n{query}\n{canonical_headers}\n{names}\n{}", hex::encode(Sha256::digest(body)));
        let scope = format!("{day}/{}/{}/aws4_request", self.region, self.service);
        let to_sign =
            format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
        let secret = format!("AWS4{}", self.keys.secret_access_key.expose_secret());
        let mut key = hmac(secret.as_bytes(), day.as_bytes());
        for part in [self.region, self.service, "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        let signature = hex::encode(hmac(&key, to_sign.as_bytes()));
        let mut out = vec![("x-amz-date".to_string(), amz_date)];
        out.extend(token.map(|t| ("x-amz-security-token".to_string(), t)));
        out.push((
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={names}, Signature={signature}",
                self.keys.access_key_id
            ),
        ));
        out
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(token: Option<&str>) -> AwsKeys {
        AwsKeys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: SecretString::from("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: token.map(SecretString::from),
        }
    }

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2015-08-30T12:36:00Z").expect("date").with_timezone(&Utc)
    }

    #[test]
    fn sigv4_matches_the_aws_test_suite_vector_with_a_body() {
        // AWS Signature Version 4 test suite, "post-x-www-form-urlencoded".
        let k = keys(None);
        let s = SigV4 { keys: &k, region: "us-east-1", service: "service", at: at() };
        let url = Url::parse("https://example.amazonaws.com/").expect("url");
        let h = s.sign("POST", &url, &[("Content-Type", "application/x-www-form-urlencoded")], b"Param1=value1");
        let auth = h.iter().find(|(k, _)| k == "authorization").map(|(_, v)| v.as_str());
        assert_eq!(
            auth,
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date, \
                 Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
            )
        );
        // The signature covers the body: one byte more, another signature.
        let other = s.sign("POST", &url, &[("Content-Type", "application/x-www-form-urlencoded")], b"Param1=value2");
        assert_ne!(other, h);
    }

    #[test]
    fn a_session_token_is_sent_and_signed_and_the_port_is_in_the_host() {
        let k = keys(Some("FQoGZXIvYXdzEXAMPLETOKEN"));
        let s = SigV4 { keys: &k, region: "eu-west-1", service: SERVICE, at: at() };
        let url = Url::parse("http://127.0.0.1:8080/model/a%3Ab/converse-stream").expect("url");
        let h = s.sign("POST", &url, &[("content-type", "application/json")], b"{}");
        assert_eq!(h[0], ("x-amz-date".to_string(), "20150830T123600Z".to_string()));
        assert_eq!(h[1], ("x-amz-security-token".to_string(), "FQoGZXIvYXdzEXAMPLETOKEN".to_string()));
        assert!(h[2].1.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"), "{:?}", h[2]);
        assert!(h[2].1.contains("/20150830/eu-west-1/bedrock/aws4_request"), "{:?}", h[2]);
    }

    #[test]
    fn the_request_is_signed_over_the_body_it_sends() {
        let mut p = crate::config::ProviderConfig::new(
            "br",
            crate::config::ProviderKind::Bedrock,
            Url::parse("https://bedrock-runtime.us-east-1.amazonaws.com").expect("url"),
        );
        p.cloud =
            CloudAuth::Bedrock(BedrockConfig { region: "us-east-1".into(), profile: None, credentials_file: None });
        let cred = Credential::Aws(keys(None));
        let params = |p: &'_ crate::config::ProviderConfig, credential| {
            let spec = Bedrock.request(&ProbeParams {
                provider: p,
                model: "anthropic.claude-3-5-haiku-20241022-v1:0",
                route: None,
                max_tokens: 16,
                reasoning: false,
                nonce: "0123456789ab",
                canary: None,
                credential,
            });
            spec.expect("request")
        };
        let spec = params(&p, Some(&cred));
        assert_eq!(spec.url.path(), "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream");
        let body = spec.body.clone().expect("body");
        let v: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["messages"][0]["content"][0]["text"], "ping");
        assert!(v["system"][0]["text"].as_str().is_some_and(|s| s.starts_with("0123456789ab. ")));
        assert_eq!(v["inferenceConfig"]["maxTokens"], 16);
        let header = |n: &str| spec.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let auth = header("authorization").expect("signed");
        let date = header("x-amz-date").expect("dated");
        // Re-signing the same body at the same instant gives the same signature; another body does not.
        let at = chrono::NaiveDateTime::parse_from_str(&date, "%Y%m%dT%H%M%SZ").expect("date").and_utc();
        let k = keys(None);
        let again = SigV4 { keys: &k, region: "us-east-1", service: SERVICE, at };
        let same = again.sign("POST", &spec.url, &[("content-type", "application/json")], &body);
        assert_eq!(same.last().map(|(_, v)| v.clone()), Some(auth.clone()));
        let changed = again.sign("POST", &spec.url, &[("content-type", "application/json")], b"{}");
        assert_ne!(changed.last().map(|(_, v)| v.clone()), Some(auth));
        // A Bedrock API key replaces the signature.
        p.api_key = Some(SecretString::from("bedrock-api-key-test"));
        let spec = params(&p, None);
        assert!(spec.headers.iter().any(|(k, v)| k == "authorization" && v == "Bearer bedrock-api-key-test"));
        assert!(!spec.headers.iter().any(|(k, _)| k == "x-amz-date"));
    }

    #[test]
    fn keys_come_from_the_environment_then_the_shared_file_profile() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "# comment\n[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = secret-default-key\n\n\
             [ci]\naws_access_key_id=AKIDCI\naws_secret_access_key=secret-ci-key\naws_session_token = token-ci-session\n",
        )
        .expect("write");
        let cfg = BedrockConfig { region: "us-east-1".into(), profile: None, credentials_file: None };
        let path = file.display().to_string();
        let env = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        let from_env = aws_keys(
            &cfg,
            &env(vec![("AWS_ACCESS_KEY_ID", "AKIDENV".into()), ("AWS_SECRET_ACCESS_KEY", "secret-env-key".into())]),
        )
        .expect("env keys");
        assert_eq!(from_env.access_key_id, "AKIDENV");
        assert!(from_env.session_token.is_none());
        let half = aws_keys(&cfg, &env(vec![("AWS_ACCESS_KEY_ID", "AKIDENV".into())]));
        assert!(half.is_err_and(
            |e| e.contains("AWS_SECRET_ACCESS_KEY is set but") || e.contains("AWS_SECRET_ACCESS_KEY is not")
        ));
        let shared = aws_keys(&cfg, &env(vec![("AWS_SHARED_CREDENTIALS_FILE", path.clone())])).expect("file keys");
        assert_eq!(shared.access_key_id, "AKIDDEFAULT");
        let ci =
            aws_keys(&cfg, &env(vec![("AWS_SHARED_CREDENTIALS_FILE", path.clone()), ("AWS_PROFILE", "ci".into())]))
                .expect("profile keys");
        assert_eq!(ci.access_key_id, "AKIDCI");
        assert_eq!(ci.session_token.map(|t| t.expose_secret().to_string()).as_deref(), Some("token-ci-session"));
        // A configured file is the only source: the environment's keys are not used.
        let named = BedrockConfig { credentials_file: Some(file.clone()), profile: Some("ci".into()), ..cfg.clone() };
        let k = aws_keys(&named, &env(vec![("AWS_ACCESS_KEY_ID", "AKIDENV".into())])).expect("named file");
        assert_eq!(k.access_key_id, "AKIDCI");
        let missing = BedrockConfig { profile: Some("nope".into()), ..named };
        let e = aws_keys(&missing, &env(vec![])).err().expect("no such profile");
        assert!(e.contains("has no [nope] profile") && !e.contains("secret-"), "{e}");
        let e =
            aws_keys(&cfg, &env(vec![("HOME", dir.path().join("none").display().to_string())])).err().expect("none");
        assert!(e.contains("no AWS_ACCESS_KEY_ID"), "{e}");
    }

    #[test]
    fn stream_messages_map_to_signals() {
        use super::super::eventstream::{event, exception, Decoder};
        let mut bytes = event("messageStart", r#"{"role":"assistant"}"#);
        bytes.extend(event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"hm"}}}"#,
        ));
        bytes.extend(event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"{\"ok\""}}"#));
        bytes.extend(event("messageStop", r#"{"stopReason":"end_turn"}"#));
        bytes.extend(event(
            "metadata",
            r#"{"usage":{"inputTokens":31,"outputTokens":6,"totalTokens":37},"metrics":{"latencyMs":300}}"#,
        ));
        bytes.extend(exception(
            "throttlingException",
            r#"{"message":"Too many tokens, please wait before trying again."}"#,
        ));
        bytes.extend(event("contentBlockDelta", "not json"));
        let mut msgs = Vec::new();
        Decoder::new(1 << 20).feed(&bytes, |m| msgs.push(m)).expect("valid");
        let s: Vec<Signals> = msgs.iter().map(interpret).collect();
        assert_eq!(s[0], Signals::default());
        assert!(s[1].reasoning && s[1].content.is_none());
        assert_eq!(s[2].content.as_deref(), Some("{\"ok\""));
        assert!(s[3].done);
        assert_eq!(s[4].usage.map(|u| (u.input, u.output)), Some((Some(31), Some(6))));
        assert_eq!(
            s[5].error.as_deref(),
            Some("exception throttlingException: Too many tokens, please wait before trying again.")
        );
        assert!(s[6].error.as_deref().is_some_and(|e| e.starts_with("malformed event payload JSON")));
    }
}
