//! `kind = "bedrock"` and `kind = "vertex"` end to end through the real prober: providers
//! loaded from a config file like a user's, loopback stand-ins that stream Bedrock's binary
//! event stream and Vertex's SSE, a loopback OAuth token endpoint. Timings are checked against
//! the stand-in's own timestamps, as for the chat kinds (tests/it/probe_standin.rs).

use crate::support::{fixture, fixture_text, probe_config};
use bytes::Bytes;
use chrono::Utc;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil::config::{Config, ProviderConfig};
use vigil::io::probe::{Planned, Prober};
use vigil::run::demo::standin::{Chunk, RequestRecord, Script, StandIn};
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

/// Slack between what the probe measured and what the server did on loopback (as in probe_standin).
const SLACK_MS: f64 = 40.0;
const SECRET_KEY: &str = "cloud-test-secret-access-key-0123456789";
const SESSION_TOKEN: &str = "cloud-test-session-token-0123456789";

fn ms_between(a: Instant, b: Instant) -> f64 {
    b.duration_since(a).as_secs_f64() * 1000.0
}

fn assert_close(what: &str, measured: Option<f64>, truth: f64) {
    let m = measured.unwrap_or_else(|| panic!("{what} was not measured"));
    assert!(m + 1.0 >= truth && m - truth < SLACK_MS, "{what}: measured {m:.2} ms, server truth {truth:.2} ms");
}

/// The one provider of a config file holding `provider` (a `[[provider]]` table's body).
fn load(provider: &str) -> ProviderConfig {
    let text = format!("[[provider]]\n{provider}");
    let c = Config::from_toml(&text, &BTreeMap::<String, String>::new()).expect("valid config");
    c.providers.first().map(|p| (**p).clone()).expect("one provider")
}

fn plan(p: &ProviderConfig) -> Planned {
    Planned {
        target: Target::new(p.name.as_str().into(), p.models[0].as_str().into(), None, "test-1".into()),
        provider: Arc::new(p.clone()),
    }
}

/// A Bedrock provider at `base` signing with the keys of a shared credentials file in `dir`.
fn bedrock(dir: &Path, base: &str) -> ProviderConfig {
    let file = dir.join("credentials");
    std::fs::write(
        &file,
        format!(
            "[probe]\naws_access_key_id = AKIDTESTCLOUD\naws_secret_access_key = {SECRET_KEY}\naws_session_token = {SESSION_TOKEN}\n"
        ),
    )
    .expect("write credentials");
    load(&format!(
        "name = \"br\"\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{base}\"\nprofile = \"probe\"\n\
         credentials_file = \"{}\"\nmodels = [\"amazon.nova-micro-v1:0\"]\n",
        file.display()
    ))
}

/// A Vertex provider at `base` whose key file sends the token request to `token_uri`.
fn vertex(dir: &Path, base: &str, token_uri: &str) -> ProviderConfig {
    let mut key: serde_json::Value = serde_json::from_str(&fixture_text("vertex-service-account.json")).expect("json");
    key["token_uri"] = token_uri.into();
    let file = dir.join("sa.json");
    std::fs::write(&file, key.to_string()).expect("write key");
    load(&format!(
        "name = \"vx\"\nkind = \"vertex\"\nlocation = \"us-central1\"\nbase_url = \"{base}/v1\"\n\
         credentials_file = \"{}\"\nmodels = [\"gemini-2.0-flash-001\"]\n",
        file.display()
    ))
}

/// The messages of an event-stream body, one chunk each, `gap` apart.
fn event_stream(body: &[u8], gap: Duration) -> Script {
    let mut chunks = Vec::new();
    let mut rest = body;
    while rest.len() >= 4 {
        let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let (msg, tail) = rest.split_at(n.min(rest.len()));
        chunks.push(Chunk::new(gap, Bytes::copy_from_slice(msg)));
        rest = tail;
    }
    Script {
        headers: vec![("Content-Type".into(), "application/vnd.amazon.eventstream".into())],
        chunks,
        ..Script::default()
    }
}

fn aws_error(status: u16, error_type: &str, body: &str) -> Script {
    Script::json(status, &fixture(body))
        .with_header("x-amzn-ErrorType", format!("{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"))
        .with_header("x-amzn-RequestId", "0f3c5b2a-1111-2222-3333-444455556666")
}

async fn serve(handler: impl Fn(&RequestRecord) -> Script + Send + Sync + 'static) -> StandIn {
    StandIn::start(handler).await.expect("stand-in starts")
}

async fn probe_once(p: &ProviderConfig) -> Sample {
    Prober::new(probe_config(8), &[]).probe(&plan(p), Utc::now()).await
}

#[tokio::test]
async fn bedrock_event_stream_is_signed_and_timed_at_the_first_content_frame() {
    let script = event_stream(&fixture("bedrock-converse-stream.eventstream"), Duration::from_millis(40))
        .with_head_delay(Duration::from_millis(100));
    let server = serve(move |_| script.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let p = bedrock(dir.path(), &server.base_url());
    let s = probe_once(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/model/amazon.nova-micro-v1%3A0/converse-stream");
    let auth = r.header("authorization").expect("signed");
    assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDTESTCLOUD/"), "{auth}");
    assert!(auth.contains("/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature="), "{auth}");
    assert_eq!(r.header("x-amz-security-token"), Some(SESSION_TOKEN));
    assert!(r.header("x-amz-date").is_some_and(|d| d.len() == 16 && d.ends_with('Z')));
    let body = r.json().expect("json body");
    assert_eq!(body["messages"][0]["content"][0]["text"], "ping");
    assert_eq!(body["inferenceConfig"]["maxTokens"], 16);
    let head = r.head_written_at.expect("head written");
    assert_close("ttfb", s.ttfb_ms, ms_between(r.received_at, head));
    // Message 0 is messageStart; the first text delta is message 1.
    assert_close("ttft", s.ttft_ms, ms_between(r.received_at, r.chunk_written_at[1]));
    let last = *r.chunk_written_at.last().expect("chunks");
    assert_close("total", s.total_ms, ms_between(r.received_at, last));
    assert_eq!((s.input_tokens, s.output_tokens), (Some(31), Some(6)));
    assert_eq!(s.adherence_ok, Some(true), "the deltas spell the demanded JSON");
    assert!(s.tokens_per_s.is_some_and(|v| v > 0.0));
}

#[tokio::test]
async fn bedrock_frames_split_into_single_bytes_read_the_same() {
    let script = event_stream(&fixture("bedrock-converse-stream.eventstream"), Duration::ZERO).split_every(1);
    let server = serve(move |_| script.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = probe_once(&bedrock(dir.path(), &server.base_url())).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!((s.input_tokens, s.output_tokens, s.adherence_ok), (Some(31), Some(6), Some(true)));
}

#[tokio::test]
async fn bedrock_errors_keep_their_aws_names_and_classes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            aws_error(429, "ThrottlingException", "bedrock-error-429-throttling.json"),
            Outcome::RateLimited,
            "HTTP 429 ThrottlingException: Too many requests",
        ),
        (
            aws_error(403, "AccessDeniedException", "bedrock-error-403-access-denied.json"),
            Outcome::AuthError,
            "HTTP 403 AccessDeniedException: You don't have access to the model",
        ),
        (
            aws_error(400, "ValidationException", "bedrock-error-400-model-id.json"),
            Outcome::ModelUnavailable,
            "HTTP 400 ValidationException: The provided model identifier is invalid.",
        ),
        (
            aws_error(400, "ServiceQuotaExceededException", "bedrock-error-429-throttling.json"),
            Outcome::RateLimited,
            "ServiceQuotaExceededException",
        ),
    ];
    for (script, outcome, text) in cases {
        let server = serve(move |_| script.clone()).await;
        let s = probe_once(&bedrock(dir.path(), &server.base_url())).await;
        assert_eq!(s.outcome, outcome, "{:?}", s.error);
        let error = s.error.unwrap_or_default();
        assert!(error.contains(text), "{error}");
        assert!(!error.contains(SECRET_KEY) && !error.contains(SESSION_TOKEN));
        assert_eq!(s.request_id.as_deref(), Some("0f3c5b2a-1111-2222-3333-444455556666"));
    }
    // Throttled after the stream was accepted: a stream error naming Bedrock's exception.
    let script = event_stream(&fixture("bedrock-converse-stream-throttling-exception.eventstream"), Duration::ZERO);
    let server = serve(move |_| script.clone()).await;
    let s = probe_once(&bedrock(dir.path(), &server.base_url())).await;
    assert_eq!(s.outcome, Outcome::StreamError);
    assert!(
        s.error.as_deref().is_some_and(|e| e.contains("exception throttlingException: Too many tokens")),
        "{:?}",
        s.error
    );
}

#[tokio::test]
async fn a_corrupt_or_cut_event_stream_is_a_stream_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut flipped = fixture("bedrock-converse-stream.eventstream");
    flipped[200] ^= 0x20;
    let cut = fixture("bedrock-converse-stream.eventstream");
    let cut = cut[..cut.len() - 10].to_vec();
    for (body, words) in [(flipped, "CRC"), (cut, "inside an event-stream message")] {
        let script = Script {
            headers: vec![("Content-Type".into(), "application/vnd.amazon.eventstream".into())],
            chunks: vec![Chunk::new(Duration::ZERO, Bytes::from(body))],
            ..Script::default()
        };
        let server = serve(move |_| script.clone()).await;
        let s = probe_once(&bedrock(dir.path(), &server.base_url())).await;
        assert_eq!(s.outcome, Outcome::StreamError);
        assert!(s.error.as_deref().is_some_and(|e| e.contains(words)), "{:?}", s.error);
    }
}

/// A stand-in serving the token endpoint at `/token` (after `token_delay`) and `stream` elsewhere.
async fn vertex_standin(token: Script, stream: Script) -> StandIn {
    serve(move |r| if r.path_only() == "/token" { token.clone() } else { stream.clone() }).await
}

#[tokio::test]
async fn vertex_token_is_minted_once_outside_the_timings_and_reused() {
    // A slow token endpoint: were the mint inside the timed exchange, TTFB would be 300 ms late.
    let token = Script::json(200, &fixture("vertex-oauth-token.json")).with_head_delay(Duration::from_millis(300));
    let stream = Script::sse(&fixture("vertex-stream.sse"), Duration::from_millis(40))
        .with_head_delay(Duration::from_millis(60));
    let server = vertex_standin(token, stream).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let p = vertex(dir.path(), &server.base_url(), &format!("{}/token", server.base_url()));
    let prober = Prober::new(probe_config(8), &[]);
    let first = prober.probe(&plan(&p), Utc::now()).await;
    let second = prober.probe(&plan(&p), Utc::now()).await;
    for s in [&first, &second] {
        assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
        assert_eq!((s.input_tokens, s.output_tokens), (Some(24), Some(5)));
        assert_eq!(s.adherence_ok, Some(true));
    }
    let reqs = server.requests();
    let tokens: Vec<_> = reqs.iter().filter(|r| r.path_only() == "/token").collect();
    assert_eq!(tokens.len(), 1, "one mint for both probes");
    let form: BTreeMap<String, String> = url::form_urlencoded::parse(&tokens[0].body).into_owned().collect();
    assert_eq!(form.get("grant_type").map(String::as_str), Some("urn:ietf:params:oauth:grant-type:jwt-bearer"));
    assert_eq!(form.get("assertion").map(|a| a.split('.').count()), Some(3));
    let streams: Vec<_> = reqs.iter().filter(|r| r.path_only() != "/token").collect();
    assert_eq!(streams.len(), 2);
    let r = streams[0];
    assert_eq!(
        r.path,
        "/v1/projects/vigil-test-project/locations/us-central1/publishers/google/models/gemini-2.0-flash-001:streamGenerateContent?alt=sse"
    );
    assert_eq!(r.header("authorization"), Some("Bearer ya29.c.test-access-token-0123456789"));
    let body = r.json().expect("json");
    assert!(body["systemInstruction"]["parts"][0]["text"]
        .as_str()
        .is_some_and(|t| t.ends_with(vigil::io::probe::SYSTEM_PROMPT)));
    let head = r.head_written_at.expect("head");
    assert_close("ttfb", first.ttfb_ms, ms_between(r.received_at, head));
    assert_close("ttft", first.ttft_ms, ms_between(r.received_at, r.chunk_written_at[0]));
}

#[tokio::test]
async fn vertex_refusals_and_a_failed_mint_are_classified_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok_token = Script::json(200, &fixture("vertex-oauth-token.json"));
    let cases = [
        (
            "vertex-error-403-permission-denied.json",
            403,
            Outcome::AuthError,
            "Permission 'aiplatform.endpoints.predict' denied",
        ),
        ("vertex-error-429-quota.json", 429, Outcome::RateLimited, "Quota exceeded"),
        ("vertex-error-404-model.json", 404, Outcome::ModelUnavailable, "was not found"),
    ];
    for (file, status, outcome, words) in cases {
        let server = vertex_standin(ok_token.clone(), Script::json(status, &fixture(file))).await;
        let p = vertex(dir.path(), &server.base_url(), &format!("{}/token", server.base_url()));
        let s = probe_once(&p).await;
        assert_eq!(s.outcome, outcome, "{file}: {:?}", s.error);
        assert!(s.error.as_deref().is_some_and(|e| e.contains(words)), "{:?}", s.error);
        assert_eq!(s.status, Some(status));
    }
    // The token endpoint refuses the assertion: an auth error naming the step; no chat request is sent.
    let refused = Script::json(400, &fixture("vertex-oauth-invalid-grant.json"));
    let server = vertex_standin(refused, Script::sse(&fixture("vertex-stream.sse"), Duration::ZERO)).await;
    let token_uri = format!("{}/token", server.base_url());
    let s = probe_once(&vertex(dir.path(), &server.base_url(), &token_uri)).await;
    assert_eq!(s.outcome, Outcome::AuthError);
    assert_eq!(
        s.error.as_deref(),
        Some(format!("OAuth token from {token_uri}: HTTP 400: invalid_grant: Invalid JWT Signature.").as_str())
    );
    assert_eq!(s.ttfb_ms, None);
    assert!(server.requests().iter().all(|r| r.path_only() == "/token"));
}

#[tokio::test]
async fn a_refused_token_is_minted_anew_by_the_next_probe() {
    let token = Script::json(200, &fixture("vertex-oauth-token.json"));
    let refused = Script::json(401, br#"{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}"#);
    let server = vertex_standin(token, refused).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let p = vertex(dir.path(), &server.base_url(), &format!("{}/token", server.base_url()));
    let prober = Prober::new(probe_config(8), &[]);
    for _ in 0..2 {
        let s = prober.probe(&plan(&p), Utc::now()).await;
        assert_eq!(s.outcome, Outcome::AuthError, "{:?}", s.error);
        assert!(!s.error.unwrap_or_default().contains("ya29.c.test-access-token"), "the token is scrubbed");
    }
    let mints = server.requests().iter().filter(|r| r.path_only() == "/token").count();
    assert_eq!(mints, 2, "a token the API refused is not reused (a good one is: the test above)");
}

#[test]
fn check_config_names_the_cloud_keys_at_fault() {
    let err = |provider: &str| {
        Config::from_toml(&format!("[[provider]]\n{provider}"), &BTreeMap::<String, String>::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let e = err("name = \"br\"\nkind = \"bedrock\"\nmodels = [\"m\"]\n");
    assert!(e.starts_with("provider[0].region: missing"), "{e}");
    let e = err("name = \"br\"\nkind = \"bedrock\"\nregion = \"US East\"\nmodels = [\"m\"]\n");
    assert!(e.starts_with("provider[0].region:"), "{e}");
    let e = err("name = \"vx\"\nkind = \"vertex\"\nmodels = [\"m\"]\n");
    assert!(e.starts_with("provider[0].credentials_file: missing"), "{e}");
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope.json");
    let e = err(&format!(
        "name = \"vx\"\nkind = \"vertex\"\ncredentials_file = \"{}\"\nmodels = [\"m\"]\n",
        missing.display()
    ));
    assert!(e.starts_with("provider[0].credentials_file: cannot read"), "{e}");
    let user = dir.path().join("user.json");
    std::fs::write(
        &user,
        r#"{"type":"authorized_user","client_id":"x","client_secret":"cloud-test-client-secret","refresh_token":"r"}"#,
    )
    .expect("write");
    let e = err(&format!(
        "name = \"vx\"\nkind = \"vertex\"\ncredentials_file = \"{}\"\nmodels = [\"m\"]\n",
        user.display()
    ));
    assert!(e.contains("not a service-account key") && !e.contains("cloud-test-client-secret"), "{e}");
    let e = err("name = \"o\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nregion = \"us-east-1\"\nmodels = [\"m\"]\n");
    assert!(e.starts_with("provider[0].region: only kind"), "{e}");
    // Defaults: Bedrock's endpoint from its region, Vertex's from its location, the project from the key.
    let br = load("name = \"br\"\nkind = \"bedrock\"\nregion = \"eu-central-1\"\nmodels = [\"m\"]\n");
    assert_eq!(br.base_url.as_str(), "https://bedrock-runtime.eu-central-1.amazonaws.com/");
    let key = dir.path().join("sa.json");
    std::fs::write(&key, fixture("vertex-service-account.json")).expect("write");
    let vx = load(&format!(
        "name = \"vx\"\nkind = \"vertex\"\ncredentials_file = \"{}\"\nmodels = [\"m\"]\n",
        key.display()
    ));
    assert_eq!(vx.base_url.as_str(), "https://us-central1-aiplatform.googleapis.com/v1");
    match &vx.cloud {
        vigil::config::CloudAuth::Vertex(v) => assert_eq!(v.project, "vigil-test-project"),
        _ => panic!("a vertex provider"),
    }
}
