//! Google Vertex AI: `POST {base}/projects/{project}/locations/{location}/publishers/google/
//! models/{model}:streamGenerateContent?alt=sse` with an OAuth access token, the answer in
//! Gemini's SSE dialect (read by [`super::gemini`]).
//!
//! The token is minted from the service-account key of `credentials_file`: an RS256-signed JWT
//! (`iss` the account, `scope` cloud-platform, `aud` the key's `token_uri`) exchanged at
//! `token_uri` for an access token (RFC 7523). The prober caches it per provider until
//! [`REFRESH_BEFORE`] ahead of its expiry, and mints it before a probe's clocks start, so the
//! mint never counts in a probe's timings. Signed with `ring`, already in the build for TLS.

use super::join;
use super::streaming_post;
use super::Adapter;
use super::Credential;
use super::CredentialError;
use super::Fetch;
use super::Minted;
use super::ProbeParams;
use super::RequestSpec;
use super::Signals;
use crate::config::{CloudAuth, ServiceAccount};
use crate::io::probe::sse::SseEvent;
use crate::vocab::sample::Outcome;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Adapter for Vertex AI's Gemini models.
pub struct Vertex;

/// The OAuth scope the token is asked for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// A cached token is replaced this long before it expires.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// Lifetime asked for in the JWT (Google's maximum).
const JWT_LIFETIME_S: i64 = 3600;

impl Adapter for Vertex {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let CloudAuth::Vertex(cfg) = &p.provider.cloud else {
            return Err("kind = \"vertex\" without its credentials_file".into());
        };
        let Some(Credential::Bearer(token)) = p.credential else {
            return Err("no OAuth access token".into());
        };
        let path = format!(
            "projects/{}/locations/{}/publishers/google/models/{}:streamGenerateContent",
            cfg.project, cfg.location, p.model
        );
        let mut url = join(&p.provider.base_url, &path)?;
        url.set_query(Some("alt=sse"));
        let bearer = format!("Bearer {}", token.expose_secret());
        streaming_post(
            p,
            url,
            &super::gemini::body(p),
            "authorization",
            str::to_string,
            &[("authorization", bearer.as_str())],
        )
    }

    fn interpret(&self, event: &SseEvent) -> Signals {
        super::gemini::interpret(event)
    }

    fn credential<'a>(
        &'a self,
        fetch: Fetch<'a>,
    ) -> Option<futures::future::BoxFuture<'a, Result<Minted, CredentialError>>> {
        let CloudAuth::Vertex(cfg) = &fetch.provider().cloud else { return None };
        Some(Box::pin(mint(fetch, &cfg.account)))
    }
}

/// Mints an access token for `account`; every failure names the step and never the key.
async fn mint(fetch: Fetch<'_>, account: &ServiceAccount) -> Result<Minted, CredentialError> {
    let uri = &account.token_uri;
    let jwt = signed_jwt(account, chrono::Utc::now().timestamp())
        .map_err(|e| (Outcome::AuthError, format!("OAuth token: signing the JWT: {e}")))?;
    let form: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
        .append_pair("assertion", &jwt)
        .finish();
    let (status, body) =
        fetch.post_form(uri, &form).await.map_err(|(o, e)| (o, format!("OAuth token from {uri}: {e}")))?;
    let v: Option<Value> = serde_json::from_slice(&body).ok();
    let text = |k: &str| v.as_ref().and_then(|v| v.get(k)).and_then(Value::as_str).map(str::to_string);
    if !(200..300).contains(&status) {
        let outcome = match status {
            429 => Outcome::RateLimited,
            400..=499 => Outcome::AuthError,
            _ => Outcome::ServerError,
        };
        let said = match (text("error"), text("error_description")) {
            (Some(e), Some(d)) => format!(": {e}: {d}"),
            (Some(e), None) => format!(": {e}"),
            _ => String::new(),
        };
        return Err((outcome, format!("OAuth token from {uri}: HTTP {status}{said}")));
    }
    let token = text("access_token")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| (Outcome::AuthError, format!("OAuth token from {uri}: no access_token in the answer")))?;
    let expires_in = v.as_ref().and_then(|v| v.get("expires_in")).and_then(Value::as_u64).unwrap_or(3600);
    // Refreshed well before it runs out; a very short-lived token is still used for a while.
    let keep = Duration::from_secs(expires_in).saturating_sub(REFRESH_BEFORE).max(Duration::from_secs(30));
    Ok(Minted { credential: Credential::Bearer(SecretString::from(token)), fresh_until: Instant::now() + keep })
}

/// The RS256-signed JWT assertion of `account` issued at `now` (Unix seconds).
pub fn signed_jwt(account: &ServiceAccount, now: i64) -> Result<String, String> {
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if let Some(kid) = &account.private_key_id {
        header["kid"] = json!(kid);
    }
    let claims = json!({
        "iss": account.client_email,
        "scope": SCOPE,
        "aud": account.token_uri.as_str(),
        "iat": now,
        "exp": now + JWT_LIFETIME_S,
    });
    let encode = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let message = format!("{}.{}", encode(&header), encode(&claims));
    let der = crate::config::cloud::rsa_key_der(account.private_key.expose_secret())?;
    let key = ring::signature::RsaKeyPair::from_pkcs8(&der).map_err(|e| format!("private_key: {e}"))?;
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(&ring::signature::RSA_PKCS1_SHA256, &ring::rand::SystemRandom::new(), message.as_bytes(), &mut signature)
        .map_err(|_| "RSA signing failed".to_string())?;
    Ok(format!("{message}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> ServiceAccount {
        let path = format!("{}/tests/fixtures/vertex-service-account.json", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
        ServiceAccount {
            client_email: v["client_email"].as_str().expect("email").into(),
            private_key_id: v["private_key_id"].as_str().map(str::to_string),
            private_key: SecretString::from(v["private_key"].as_str().expect("key").to_string()),
            token_uri: url::Url::parse("http://127.0.0.1:9/token").expect("url"),
        }
    }

    #[test]
    fn the_jwt_names_the_account_scope_and_audience_and_its_signature_verifies() {
        let a = account();
        let jwt = signed_jwt(&a, 1_700_000_000).expect("signed");
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode =
            |s: &str| -> Value { serde_json::from_slice(&URL_SAFE_NO_PAD.decode(s).expect("b64")).expect("json") };
        let header = decode(parts[0]);
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"].as_str(), a.private_key_id.as_deref());
        let claims = decode(parts[1]);
        assert_eq!(claims["iss"], a.client_email.as_str());
        assert_eq!(claims["scope"], SCOPE);
        assert_eq!(claims["aud"], "http://127.0.0.1:9/token");
        assert_eq!((claims["iat"].as_i64(), claims["exp"].as_i64()), (Some(1_700_000_000), Some(1_700_003_600)));
        let der = crate::config::cloud::rsa_key_der(a.private_key.expose_secret()).expect("der");
        let key = ring::signature::RsaKeyPair::from_pkcs8(&der).expect("key");
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            ring::signature::KeyPair::public_key(&key).as_ref().to_vec(),
        );
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).expect("b64");
        public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature).expect("the signature verifies");
        let tampered = format!("{}.{}x", parts[0], parts[1]);
        assert!(public.verify(tampered.as_bytes(), &signature).is_err());
    }

    #[test]
    fn a_broken_key_is_an_error_not_a_panic() {
        let mut a = account();
        a.private_key =
            SecretString::from("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_string());
        assert!(signed_jwt(&a, 0).is_err());
        a.private_key = SecretString::from("not a pem".to_string());
        assert!(signed_jwt(&a, 0).is_err_and(|e| e.contains("BEGIN PRIVATE KEY")));
    }
}
