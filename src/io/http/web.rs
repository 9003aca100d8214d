//! The web config's HTTP side (`http.web_config_file`, exporter toolkit format): basic auth
//! against bcrypt hashes on every path, and the configured response headers. TLS itself is the
//! server's (`server::serve`).
//!
//! A request carrying `/v1`'s bearer token (`http.api_token`) passes the basic-auth check too:
//! one `Authorization` header cannot carry both, and the token is the stronger secret.

use crate::config::WebConfig;
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use subtle::ConstantTimeEq;

/// Most remembered successful logins; the set is emptied when full (bcrypt is then paid again).
const CACHE_MAX: usize = 1024;

/// What the layer checks and adds.
struct Guard {
    users: BTreeMap<String, SecretString>,
    api_token: Option<SecretString>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// SHA-256 of (user, password, hash) of logins bcrypt accepted: bcrypt at cost 10 is ~70 ms
    /// of CPU, which a scrape every 15 s must not pay each time (the exporter toolkit caches too).
    accepted: Mutex<HashSet<[u8; 32]>>,
    /// A hash to verify unknown users against, so they take as long as known ones.
    decoy: OnceLock<String>,
}

/// `router` behind the web config's basic auth and headers; unchanged without a web config.
pub fn guard(router: Router, web: Option<&WebConfig>, api_token: Option<SecretString>) -> Router {
    let Some(web) = web else {
        return router;
    };
    if web.basic_auth_users.is_empty() && web.headers.is_empty() {
        return router;
    }
    // Names and values were checked at load; one that still does not convert is left out.
    let headers = web
        .headers
        .iter()
        .filter_map(|(n, v)| Some((HeaderName::try_from(n.as_str()).ok()?, HeaderValue::try_from(v.as_str()).ok()?)))
        .collect();
    let guard = Arc::new(Guard {
        users: web.basic_auth_users.clone(),
        api_token,
        headers,
        accepted: Mutex::new(HashSet::new()),
        decoy: OnceLock::new(),
    });
    router.layer(axum::middleware::from_fn_with_state(guard, check))
}

async fn check(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    if !g.users.is_empty() && !allowed(&g, req.headers().get(header::AUTHORIZATION)).await {
        let mut refused =
            (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Basic")], "Unauthorized\n").into_response();
        add_headers(&g, &mut refused);
        return refused;
    }
    let mut response = next.run(req).await;
    add_headers(&g, &mut response);
    response
}

fn add_headers(g: &Guard, response: &mut Response) {
    for (name, value) in &g.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
}

/// Whether `authorization` names a configured user with the right password (or carries the
/// API bearer token).
async fn allowed(g: &Arc<Guard>, authorization: Option<&HeaderValue>) -> bool {
    let Some(value) = authorization.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    if let (Some(given), Some(token)) = (value.strip_prefix("Bearer "), &g.api_token) {
        return bool::from(given.as_bytes().ct_eq(token.expose_secret().as_bytes()));
    }
    let Some(encoded) = value.strip_prefix("Basic ") else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let Ok(decoded) = String::from_utf8(decoded) else {
        return false;
    };
    let Some((user, password)) = decoded.split_once(':') else {
        return false;
    };
    let hash = g.users.get(user).map(|h| h.expose_secret().to_string());
    let key: [u8; 32] = {
        let mut h = Sha256::new();
        for part in [user, password, hash.as_deref().unwrap_or("")] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().into()
    };
    if hash.is_some() && g.accepted.lock().unwrap_or_else(PoisonError::into_inner).contains(&key) {
        return true;
    }
    let (guard, password) = (g.clone(), password.to_string());
    let verified = tokio::task::spawn_blocking(move || match &hash {
        Some(hash) => bcrypt::verify(&password, hash).unwrap_or(false),
        None => {
            let decoy = guard.decoy.get_or_init(|| bcrypt::hash("decoy", bcrypt::DEFAULT_COST).unwrap_or_default());
            let _ = bcrypt::verify(&password, decoy);
            false
        }
    })
    .await
    .unwrap_or(false);
    if verified {
        let mut accepted = g.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        if accepted.len() >= CACHE_MAX {
            accepted.clear();
        }
        accepted.insert(key);
    }
    verified
}
