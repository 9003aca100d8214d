//! Probes through a real HTTP proxy (Debian's tinyproxy, installed by scripts/test.sh), started
//! on a free loopback port with a temporary config: the CONNECT tunnel carries plain and TLS
//! probes, the proxy's time is its own phase, and NO_PROXY bypasses it.

use chrono::Utc;
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use vigil::config::{ProbeConfig, ProviderConfig, ProviderKind};
use vigil::demo::standin::{Script, StandIn};
use vigil::probe::outcome::Outcome;
use vigil::probe::proxy::ProxyConfig;
use vigil::probe::{Planned, Prober};
use vigil::target::Target;

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
        println!("SKIPPED probe_proxy: tinyproxy is not installed (scripts/test.sh installs it)");
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
    let child = child.expect("tinyproxy starts");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Some(Tinyproxy { child, port, _dir: dir });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("tinyproxy did not listen on {port}");
}

fn config(proxy: ProxyConfig) -> ProbeConfig {
    ProbeConfig {
        proxy,
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
        name: "p".into(),
        kind: ProviderKind::Openai,
        base_url: base_url.parse().expect("url"),
        api_key_env: None,
        api_key: Some(SecretString::from("sk-test-proxy")),
        models: vec!["m".into()],
        routes: vec![],
        reasoning_models: vec![],
        balance: None,
        price: None,
        prices: BTreeMap::new(),
        headers: BTreeMap::new(),
        secret_headers: vec![],
    };
    Planned {
        target: Target { provider: "p".into(), model: "m".into(), route: None, region: "test".into() },
        provider: Arc::new(p),
    }
}

fn stream() -> Script {
    let body = std::fs::read(format!("{}/tests/fixtures/openai-chat-stream.sse", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture");
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
