//! Probes through a real HTTP proxy (Debian's tinyproxy, installed by scripts/test.sh), started
//! on a free loopback port with a temporary config: the CONNECT tunnel carries plain and TLS
//! probes, the proxy's time is its own phase, and NO_PROXY bypasses it.

use chrono::Utc;
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use vigil::config::proxy::ProxyConfig;
use vigil::config::{ProbeConfig, ProviderConfig, ProviderKind};
use vigil::io::probe::{Planned, Prober};
use vigil::run::demo::standin::{Script, StandIn};
use vigil::vocab::sample::Outcome;
use vigil::vocab::target::Target;

/// The proxy process, stopped when the test ends however it ends.
struct Tinyproxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tinyproxy_binary() -> Option<String> {
    ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy", "/usr/local/bin/tinyproxy"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| p.to_string())
}

async fn start_tinyproxy() -> Option<Tinyproxy> {
    let Some(bin) = tinyproxy_binary() else {
        crate::support::tool_missing("tinyproxy", "apt-get install -y tinyproxy");
        return None;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let conf = dir.path().join("tinyproxy.conf");
    // No ConnectPort line: CONNECT is allowed to every port (the stand-ins use random ones).
    std::fs::write(
        &conf,
        format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 50\nLogLevel Info\nAllow 127.0.0.1\n\
             LogFile \"{}\"\nPidFile \"{}\"\nDisableViaHeader Yes\n",
            dir.path().join("tinyproxy.log").display(),
            dir.path().join("tinyproxy.pid").display()
        ),
    )
    .expect("config");
    let child = Command::new(bin).arg("-d").arg("-c").arg(&conf).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    // Owned by the guard at once, so every path below stops and reaps it.
    let proxy = Tinyproxy { child: child.expect("tinyproxy starts"), port, _dir: dir };
    let listening = async || tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok();
    crate::support::until(Duration::from_secs(5), &format!("tinyproxy to listen on {port}"), listening).await;
    Some(proxy)
}

fn config(proxy: ProxyConfig) -> ProbeConfig {
    ProbeConfig {
        proxy,
        ca_file: None,
        ca_certs: Vec::new(),
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        ttft_timeout: Duration::from_secs(3),
        max_tokens: 16,
        concurrency: 8,
        daily_budget_usd: 5.0,
        max_body_bytes: 256 * 1024,
    }
}

fn plan(base_url: &str) -> Planned {
    let p = ProviderConfig {
        api_key: Some(SecretString::from("sk-test-proxy")),
        models: vec!["m".into()],
        ..ProviderConfig::new("p", ProviderKind::Openai, base_url.parse().expect("url"))
    };
    Planned { target: Target::new("p".into(), "m".into(), None, "test".into()), provider: Arc::new(p) }
}

fn stream() -> Script {
    let body = crate::support::fixture("openai-chat-stream.sse");
    Script::sse(&body, Duration::from_millis(5))
}

#[tokio::test]
async fn probes_tunnel_through_tinyproxy_with_the_proxy_phase_timed_apart() {
    let Some(proxy) = start_tinyproxy().await else { return };
    let proxy_url: url::Url = format!("http://127.0.0.1:{}", proxy.port).parse().expect("url");
    let via = ProxyConfig { https: Some(proxy_url.clone()), http: Some(proxy_url.clone()), no_proxy: vec![] };

    // TLS through the tunnel to a stand-in whose certificate the prober trusts.
    let (tls, cert) = StandIn::start_tls(|_| stream()).await.expect("TLS stand-in");
    let prober = Prober::new(config(via.clone()), &[cert]);
    let s = prober.probe(&plan(&tls.base_url()), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert!(s.proxy_ms.is_some_and(|ms| ms > 0.0), "the CONNECT round trip is its own phase");
    assert!(s.connect_ms.is_some() && s.tls_ms.is_some());
    assert!(s.ttfb_ms.is_some() && s.ttft_ms.is_some());
    assert!(s.ttft_ms >= s.ttfb_ms, "TTFB and TTFT count from the request sent, after the tunnel");
    assert_eq!(tls.requests().len(), 1, "the request reached the server through the proxy");
    let log = std::fs::read_to_string(proxy._dir.path().join("tinyproxy.log")).unwrap_or_default();
    assert!(log.contains("CONNECT"), "tinyproxy saw the tunnel: {log}");

    // Plain HTTP through the same proxy.
    let plain = StandIn::start(|_| stream()).await.expect("stand-in");
    let s = Prober::new(config(via.clone()), &[]).probe(&plan(&plain.base_url()), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert!(s.proxy_ms.is_some() && s.tls_ms.is_none());

    // NO_PROXY bypasses it: no proxy phase.
    let bypass = ProxyConfig { no_proxy: vec!["127.0.0.1".into(), "localhost".into()], ..via.clone() };
    let s = Prober::new(config(bypass), &[]).probe(&plan(&plain.base_url()), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!(s.proxy_ms, None);
}

#[tokio::test]
async fn a_dead_or_refusing_proxy_is_a_connect_error_naming_the_proxy() {
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let dead: url::Url = format!("http://127.0.0.1:{dead_port}").parse().expect("url");
    let plain = StandIn::start(|_| stream()).await.expect("stand-in");
    let via = ProxyConfig { https: None, http: Some(dead), no_proxy: vec![] };
    let s = Prober::new(config(via), &[]).probe(&plan(&plain.base_url()), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::ConnectError);
    assert!(s.error.as_deref().is_some_and(|e| e.starts_with("proxy: ")), "{:?}", s.error);

    // A "proxy" that answers CONNECT with 403.
    let refusing = StandIn::start(|_| Script::status(403)).await.expect("stand-in");
    let via = ProxyConfig { https: None, http: Some(refusing.base_url().parse().expect("url")), no_proxy: vec![] };
    let s = Prober::new(config(via), &[]).probe(&plan(&plain.base_url()), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::ConnectError, "{:?}", s.error);
    assert!(s.error.as_deref().is_some_and(|e| e.contains("proxy refused CONNECT")), "{:?}", s.error);
}

/// A test CA, and certificates it signs for a server (`localhost`) and a client.
struct TestPki {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl TestPki {
    fn new() -> TestPki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "vigil test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().expect("key")).expect("CA");
        TestPki { ca }
    }

    /// (certificate chain, key) signed by the CA.
    fn issue(
        &self,
        names: &[&str],
        purpose: rcgen::ExtendedKeyUsagePurpose,
    ) -> (rustls::pki_types::CertificateDer<'static>, rcgen::KeyPair) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        params.extended_key_usages = vec![purpose];
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.ca).expect("signed");
        (cert.der().clone(), key)
    }

    fn server_config(&self, client_ca: bool) -> rustls::ServerConfig {
        let (cert, key) = self.issue(&["localhost"], rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions");
        let builder = if client_ca {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.ca.der().clone()).expect("CA root");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        builder.with_single_cert(vec![cert, self.ca.der().clone()], key).expect("server cert")
    }
}

fn toml_path(p: &std::path::Path) -> String {
    p.display().to_string().replace('\\', "\\\\")
}

#[tokio::test]
async fn private_ca_through_tinyproxy_and_client_certificates_from_config_files() {
    let Some(proxy) = start_tinyproxy().await else { return };
    let pki = TestPki::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, pki.ca.pem()).expect("ca file");
    let (client_cert, client_key) = pki.issue(&["vigil-probe"], rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    let (cert_file, key_file) = (dir.path().join("client.pem"), dir.path().join("client.key"));
    let client_pem =
        format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", base64_lines(client_cert.as_ref()));
    std::fs::write(&cert_file, client_pem).expect("client cert");
    std::fs::write(&key_file, client_key.serialize_pem()).expect("client key");

    let plain_tls = StandIn::start_tls_config(|_| stream(), pki.server_config(false)).expect("CA-signed stand-in");
    let mtls = StandIn::start_tls_config(|_| stream(), pki.server_config(true)).expect("mTLS stand-in");
    let text = format!(
        "[probe]\nproxy = \"http://127.0.0.1:{port}\"\n\n\
         [[provider]]\nname = \"private\"\nkind = \"openai\"\nbase_url = \"{a}\"\napi_key_env = \"K\"\nmodels = [\"m\"]\n\
         ca_file = \"{ca}\"\n\n\
         [[provider]]\nname = \"gateway\"\nkind = \"openai\"\nbase_url = \"{b}\"\napi_key_env = \"K\"\nmodels = [\"m\"]\n\
         ca_file = \"{ca}\"\nclient_cert_file = \"{cert}\"\nclient_key_file = \"{key}\"\n\n\
         [[provider]]\nname = \"untrusted\"\nkind = \"openai\"\nbase_url = \"{a}\"\napi_key_env = \"K\"\nmodels = [\"m\"]\n",
        port = proxy.port,
        a = plain_tls.base_url(),
        b = mtls.base_url(),
        ca = toml_path(&ca_file),
        cert = toml_path(&cert_file),
        key = toml_path(&key_file),
    );
    let env: BTreeMap<String, String> = [("K".to_string(), "sk-test-trust".to_string())].into();
    let c = vigil::config::Config::from_toml(&text, &env).expect("config with CA and client certificate");
    let shown = c.redacted_toml();
    assert!(shown.contains("ca.pem") && shown.contains("client.key"), "{shown}");
    assert!(!shown.contains("PRIVATE KEY") && !shown.contains("sk-test-trust"), "no key material shown");

    let prober = Prober::new(ProbeConfig { timeout: Duration::from_secs(5), ..c.probe.clone() }, &[]);
    let planned = Planned::all(&c.providers, "test");
    for plan in &planned {
        let s = prober.probe(plan, Utc::now()).await;
        match plan.target.provider.as_str() {
            "private" | "gateway" => {
                assert_eq!(s.outcome, Outcome::Ok, "{}: {:?}", plan.target.provider, s.error);
                assert!(s.proxy_ms.is_some() && s.tls_ms.is_some(), "{}: through the proxy", plan.target.provider);
            }
            _ => {
                assert_eq!(s.outcome, Outcome::TlsError, "the test CA is trusted only where configured: {:?}", s.error)
            }
        }
    }
    assert_eq!(mtls.requests().len(), 1, "the gateway accepted the client certificate");

    // Without the client certificate the gateway refuses the handshake.
    let text = text
        .replace(&format!("client_cert_file = \"{}\"\n", toml_path(&cert_file)), "")
        .replace(&format!("client_key_file = \"{}\"\n", toml_path(&key_file)), "");
    let c = vigil::config::Config::from_toml(&text, &env).expect("config");
    let prober = Prober::new(c.probe.clone(), &[]);
    let gateway =
        Planned::all(&c.providers, "test").into_iter().find(|p| p.target.provider == "gateway").expect("gateway");
    let s = prober.probe(&gateway, Utc::now()).await;
    assert_ne!(s.outcome, Outcome::Ok, "an mTLS gateway refuses a probe without a client certificate");

    // An unreadable ca_file is a config error naming the key.
    let bad = text.replacen(&toml_path(&ca_file), "/nonexistent/ca.pem", 1);
    let e = vigil::config::Config::from_toml(&bad, &env).expect_err("missing CA file");
    assert!(e.to_string().contains("provider[0].ca_file"), "{e}");
}

fn base64_lines(der: &[u8]) -> String {
    use base64::Engine;
    let b = base64::engine::general_purpose::STANDARD.encode(der);
    b.as_bytes().chunks(64).map(|c| String::from_utf8_lossy(c).into_owned()).collect::<Vec<_>>().join("\n")
}
