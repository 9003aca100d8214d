//! A real HTTP receiver on loopback (axum, port 0) that records every request and answers
//! with scripted replies: the stand-in for Slack, PagerDuty, webhook receivers and OpenRouter.
#![allow(dead_code)]

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
    /// Wait this long before answering (longer than the client timeout = a hang).
    pub delay: Option<Duration>,
    /// A delayed 2xx the client is expected to wait for (shorter than its timeout): counted as
    /// acknowledged once answered.
    pub slow: bool,
}

impl Reply {
    pub fn new(status: u16, body: &str) -> Self {
        Reply { status, body: body.to_string(), headers: vec![], delay: None, slow: false }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn hang(delay: Duration) -> Self {
        Reply { status: 200, body: "late".into(), headers: vec![], delay: Some(delay), slow: false }
    }

    /// A 200 after `delay`, which the client waits for (keep it under the client's timeout).
    pub fn slow(delay: Duration) -> Self {
        Reply { status: 200, body: "ok".into(), headers: vec![], delay: Some(delay), slow: true }
    }
}

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    /// Answers given in order, before falling back to the per-path or default reply.
    script: VecDeque<Reply>,
    per_path: BTreeMap<String, Reply>,
    default: Option<Reply>,
    /// Requests that got a 2xx answer the client could read (not hung).
    acknowledged: Vec<Received>,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req = Received {
        method: method.to_string(),
        path: uri.path().to_string(),
        headers,
        body,
        at: std::time::Instant::now(),
    };
    let reply = {
        let mut g = inner.lock().expect("receiver lock");
        g.received.push(req.clone());
        let r = g.script.pop_front().or_else(|| g.per_path.get(&req.path).cloned()).or_else(|| g.default.clone());
        r.unwrap_or_else(|| Reply::new(200, "ok"))
    };
    if let Some(d) = reply.delay {
        tokio::time::sleep(d).await;
    }
    if (200..300).contains(&reply.status) && (reply.delay.is_none() || reply.slow) {
        inner.lock().expect("receiver lock").acknowledged.push(req);
    }
    let mut resp = (StatusCode::from_u16(reply.status).expect("status"), reply.body).into_response();
    for (k, v) in reply.headers {
        resp.headers_mut().insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).expect("header name"),
            v.parse().expect("header value"),
        );
    }
    resp
}

impl Receiver {
    /// Starts on 127.0.0.1:0 answering `default` unless scripted otherwise.
    pub async fn start(default: Reply) -> Self {
        let inner = Arc::new(Mutex::new(Inner { default: Some(default), ..Inner::default() }));
        let app = axum::Router::new().fallback(handle).with_state(Arc::clone(&inner));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .expect("receiver serves");
        });
        Receiver { addr, inner, stop: Some(tx) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers the next requests with these replies, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.inner.lock().expect("receiver lock").script.extend(replies);
    }

    /// Always answers `path` with `reply` (after the script runs out).
    pub fn on(&self, path: &str, reply: Reply) {
        self.inner.lock().expect("receiver lock").per_path.insert(path.to_string(), reply);
    }

    pub fn requests(&self) -> Vec<Received> {
        self.inner.lock().expect("receiver lock").received.clone()
    }

    pub fn acknowledged(&self) -> Vec<Received> {
        self.inner.lock().expect("receiver lock").acknowledged.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Asserts that `actual` has every key of `fixture` (recursively through objects, first element
/// of arrays) with the same JSON type, except the keys listed in `optional`.
pub fn assert_same_shape(fixture: &serde_json::Value, actual: &serde_json::Value, path: &str, optional: &[&str]) {
    use serde_json::Value;
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    assert_eq!(kind(fixture), kind(actual), "{path}: fixture has {fixture}, got {actual}");
    match (fixture, actual) {
        (Value::Object(f), Value::Object(a)) => {
            for (k, fv) in f {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) if !matches!(fv, Value::Object(_)) || k != "custom_details" => {
                        assert_same_shape(fv, av, &p, optional)
                    }
                    Some(_) => {}
                    None => assert!(optional.contains(&p.as_str()), "{p}: missing (fixture has it)"),
                }
            }
        }
        (Value::Array(f), Value::Array(a)) => {
            if let (Some(f0), Some(a0)) = (f.first(), a.first()) {
                assert_same_shape(f0, a0, &format!("{path}[0]"), optional);
            }
        }
        _ => {}
    }
}
