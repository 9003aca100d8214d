//! Published OpenRouter prices for `vigil report`, fetched over real HTTP from the demo's
//! models API, cached in the data directory, and used (or skipped) when the API is unreachable.

use chrono::{Duration, Utc};
use vigil::io::feeds::prices::{self, CACHE_FILE};
use vigil::run::demo::profiles::{self, Wire};
use vigil::run::demo::start_demo;
use vigil::vocab::target::Target;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[tokio::test]
async fn openrouter_routes_get_their_published_price_cached_and_reused_offline() {
    let demo = start_demo(5).await.expect("demo starts");
    let providers: Vec<_> = demo.providers.iter().cloned().map(std::sync::Arc::new).collect();
    let llama = providers.iter().find(|p| p.name == "demo-llama").expect("demo-llama").clone();
    assert!(vigil::decide::pricing::is_openrouter(&llama) && llama.price.is_none());
    let targets: Vec<Target> = llama
        .routes
        .iter()
        .map(|r| {
            Target::new(
                llama.name.as_str().into(),
                llama.models[0].as_str().into(),
                Some(r.as_str().into()),
                "eu".into(),
            )
        })
        .collect();
    assert!(targets.len() >= 2, "the demo model has several hosts");
    let data = tempfile::tempdir().expect("temp dir");
    let now = Utc::now();

    let book = prices::load(&providers, &targets, data.path(), now).await;
    assert!(book.notes.is_empty(), "{:?}", book.notes);
    for t in &targets {
        let route = t.route.as_deref().expect("route");
        let want = profiles::find(Wire::OpenRouter, &t.model, route).expect("a demo profile");
        let got = book.price(t).unwrap_or_else(|| panic!("{t}: published price"));
        assert!(close(got.input_per_mtok, want.input_per_mtok), "{t}: {got:?} vs {want:?}");
        assert!(close(got.output_per_mtok, want.output_per_mtok), "{t}: {got:?} vs {want:?}");
    }
    assert!(data.path().join(CACHE_FILE).exists(), "the answer is cached");
    let fetched = demo.standin.requests().len();

    // Within a day the cache answers; the API is not asked again.
    let cached = prices::load(&providers, &targets, data.path(), now + Duration::hours(1)).await;
    assert_eq!(cached.price(&targets[0]), book.price(&targets[0]));
    assert_eq!(demo.standin.requests().len(), fetched, "no request while the cache is fresh");

    // Offline and stale: the last known prices, with a note saying so.
    demo.standin.shutdown().await;
    let stale = prices::load(&providers, &targets, data.path(), now + Duration::days(2)).await;
    assert_eq!(stale.price(&targets[0]), book.price(&targets[0]));
    assert!(stale.notes.iter().any(|n| n.contains("using cached prices")), "{:?}", stale.notes);

    // Offline with no cache: no price and a note, never an error.
    let empty = tempfile::tempdir().expect("temp dir");
    let none = prices::load(&providers, &targets, empty.path(), now).await;
    assert_eq!(none.price(&targets[0]), None);
    assert!(none.notes.iter().any(|n| n.contains("no published prices")), "{:?}", none.notes);
}

#[tokio::test]
async fn configured_prices_win_and_other_providers_are_not_asked() {
    let demo = start_demo(6).await.expect("demo starts");
    let anthropic = demo.providers.iter().find(|p| p.name == "demo-anthropic").expect("demo-anthropic").clone();
    assert!(!vigil::decide::pricing::is_openrouter(&anthropic));
    let t = Target::new(anthropic.name.as_str().into(), anthropic.models[0].as_str().into(), None, "eu".into());
    let data = tempfile::tempdir().expect("temp dir");
    let book =
        prices::load(&[std::sync::Arc::new(anthropic.clone())], std::slice::from_ref(&t), data.path(), Utc::now())
            .await;
    assert_eq!(book.price(&t), anthropic.price, "the configured price");
    assert!(demo.standin.requests().is_empty(), "no models API request for a priced, non-OpenRouter provider");
    assert!(!data.path().join(CACHE_FILE).exists());
}

/// The report, the samples and `check-config` price a target the same way: the built-in table
/// for a built-in default model with no config at all, and published endpoint prices for a
/// sample whose stream reports usage but no cost.
#[tokio::test]
async fn samples_report_and_check_config_use_the_same_prices() {
    use std::collections::BTreeMap;
    use vigil::config::{Config, Price, ProbeConfig};
    use vigil::io::probe::{Planned, Prober};
    use vigil::run::demo::standin::{Script, StandIn};

    let env: BTreeMap<String, String> = [("OPENAI_API_KEY".to_string(), "sk-test-report".to_string())].into();
    let c = Config::from_toml("", &env).expect("built-in config");
    let t = Target::new("openai".into(), "gpt-4o-mini".into(), None, "eu".into());
    let data = tempfile::tempdir().expect("temp dir");
    let book = prices::load(&c.providers, std::slice::from_ref(&t), data.path(), Utc::now()).await;
    let price = book.price(&t).expect("built-in price for the default model");
    assert!(close(price.input_per_mtok, 0.15) && close(price.output_per_mtok, 0.60), "{price:?}");
    let shown = c.redacted_toml_with(&vigil::cli::price_notes(&c));
    assert!(shown.contains("built-in, 2026-12-01 from https://openai.com/api/pricing/"), "{shown}");
    assert!(!shown.contains("sk-test-report"), "secrets stay redacted");

    let body = crate::support::fixture("openai-chat-stream-usage.sse");
    let server = StandIn::start(move |_| Script::sse(&body, std::time::Duration::ZERO)).await.expect("stand-in");
    let mut provider = (**c.providers.iter().find(|p| p.name == "openai").expect("openai")).clone();
    provider.name = "aggregator".into();
    provider.base_url = server.base_url().parse().expect("url");
    provider.models = vec!["m".into()];
    provider.routes = vec!["Host".into()];
    let plan = Planned {
        target: Target::new("aggregator".into(), "m".into(), Some("Host".into()), "eu".into()),
        provider: std::sync::Arc::new(provider.clone()),
    };
    let cfg = ProbeConfig { timeout: std::time::Duration::from_secs(5), ..c.probe.clone() };
    let prober = Prober::new(cfg, &[]);
    let published = vec![vigil::decide::pricing::EndpointPrice {
        provider_name: "Host".into(),
        tag: None,
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
    }];
    prober.published_prices().write().expect("lock").insert(("aggregator".into(), "m".into()), published.clone());
    let s = prober.probe(&plan, Utc::now()).await;
    assert_eq!(s.outcome, vigil::vocab::sample::Outcome::Ok, "{:?}", s.error);
    let (input, output) = (s.input_tokens.expect("input"), s.output_tokens.expect("output"));
    let want = Price { input_per_mtok: 1.0, output_per_mtok: 2.0 }.cost(input, output);
    assert_eq!(s.cost_usd, Some(want), "usage × the published price of the pinned route");
    let report_price =
        vigil::decide::price_table::price_of(&provider, "m", Some("Host"), Some(&published)).expect("price").0;
    assert_eq!(report_price.cost(input, output), want, "the report charges the same");
}

/// A config of one daemon writing to SQLite in `dir`, probing every second, plus `extra`.
fn daemon_config(dir: &std::path::Path, extra: &str) -> String {
    format!(
        "region = \"eu-test-1\"\n[storage]\nurl = \"sqlite://{d}/vigil.db\"\ndata_dir = \"{d}\"\nbatch_age = \"100ms\"\n\
         [http]\nlisten = \"127.0.0.1:0\"\n{extra}",
        d = dir.display()
    )
}

/// Runs a daemon on `text` until `done` says so (checked every 100 ms, at most 20 s), then stops it.
async fn run_daemon(
    text: &str,
    env: &std::collections::BTreeMap<String, String>,
    mut done: impl FnMut() -> bool,
) -> std::sync::Arc<dyn vigil::io::store::Store> {
    let config = vigil::config::Config::from_toml(text, env).expect("valid config");
    let url = secrecy::ExposeSecret::expose_secret(&config.storage.url).to_string();
    let daemon = crate::support::daemon::spawn_app(config).await;
    crate::support::settle(std::time::Duration::from_secs(20), || std::future::ready(done()), |d| *d).await;
    daemon.stop().await;
    vigil::io::store::open(&url).await.expect("store opens")
}

/// Every stored sample, oldest first.
async fn stored(store: &dyn vigil::io::store::Store) -> Vec<vigil::vocab::sample::Sample> {
    let mut all = store.samples(&vigil::io::store::SampleQuery::default()).await.expect("samples read");
    all.sort_by_key(|s| s.started_at);
    all
}

/// The daemon charges OpenRouter samples at the published price of their route: fetched at
/// start in its own task, and at the next start taken from the cache before any fetch (which
/// may fail without holding anything up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_charges_openrouter_samples_at_the_published_price_and_starts_from_the_cache() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use vigil::config::Price;
    use vigil::run::demo::standin::{Script, StandIn};

    let stream = crate::support::fixture("openai-chat-stream-usage.sse");
    let endpoints = br#"{"data":{"id":"vendor/m","endpoints":[
        {"provider_name":"Host","tag":"host","pricing":{"prompt":"0.000001","completion":"0.000002"}},
        {"provider_name":"Cheap","tag":"cheap","pricing":{"prompt":"0.0000001","completion":"0.0000001"}}]}}"#
        .to_vec();
    let prices_up = Arc::new(AtomicBool::new(true));
    let up = prices_up.clone();
    let server = StandIn::start(move |r| {
        if r.method == "POST" {
            Script::sse(&stream, std::time::Duration::ZERO)
        } else if r.path_only() == "/api/v1/models/vendor/m/endpoints" && up.load(Ordering::SeqCst) {
            Script::json(200, &endpoints)
        } else {
            Script::json(503, br#"{"error":{"message":"unavailable"}}"#)
        }
    })
    .await
    .expect("stand-in");
    let dir = tempfile::tempdir().expect("temp dir");
    let text = daemon_config(
        dir.path(),
        &format!(
            "[probe]\ninterval = \"1s\"\ntimeout = \"900ms\"\n[deprecation]\nmodels_every = \"off\"\n\
             [[provider]]\nname = \"router\"\nkind = \"openai\"\nbase_url = \"{}/api/v1\"\napi_key_env = \"K\"\n\
             models = [\"vendor/m\"]\nroutes = [\"Host\"]\n",
            server.base_url()
        ),
    );
    let env: std::collections::BTreeMap<String, String> = [("K".to_string(), "sk-test-prices".to_string())].into();
    let want = |s: &vigil::vocab::sample::Sample| {
        Price { input_per_mtok: 1.0, output_per_mtok: 2.0 }
            .cost(s.input_tokens.unwrap_or(0), s.output_tokens.unwrap_or(0))
    };
    let fetched = || server.requests().iter().any(|r| r.path_only().ends_with("/endpoints"));
    let mut after_fetch: Option<usize> = None;
    let store = run_daemon(&text, &env, || {
        let posts = server.requests().iter().filter(|r| r.method == "POST").count();
        match after_fetch {
            None if fetched() => {
                after_fetch = Some(posts);
                false
            }
            Some(n) => posts >= n + 3,
            None => false,
        }
    })
    .await;
    let first = after_fetch.expect("the published prices were fetched");
    let samples = stored(store.as_ref()).await;
    let ok: Vec<_> = samples.iter().filter(|s| s.outcome == vigil::vocab::sample::Outcome::Ok).collect();
    // Probes that began after the fetch answered are charged the pinned route's price.
    let late: Vec<_> = ok.iter().skip(first + 1).collect();
    assert!(late.len() >= 2, "{} samples, fetch after {first}", ok.len());
    for s in &late {
        assert!(s.input_tokens.is_some() && s.output_tokens.is_some(), "usage read");
        assert_eq!(s.cost_usd, Some(want(s)), "usage × the route's published price");
    }
    assert!(dir.path().join(CACHE_FILE).exists(), "the fetched prices are cached");

    // Next start: the endpoint fails, the cached prices price every sample from the first.
    prices_up.store(false, Ordering::SeqCst);
    let before = samples.len();
    let store =
        run_daemon(&text, &env, || server.requests().iter().filter(|r| r.method == "POST").count() >= before + 3).await;
    let samples = stored(store.as_ref()).await;
    let second_run: Vec<_> =
        samples[before..].iter().filter(|s| s.outcome == vigil::vocab::sample::Outcome::Ok).collect();
    assert!(second_run.len() >= 2, "{second_run:?}");
    for s in second_run {
        assert_eq!(s.cost_usd, Some(want(s)), "priced from the cache while the endpoint fails");
    }
}

/// A loopback HTTP proxy that answers every CONNECT by tunnelling to `upstream`, whatever host
/// it names (so `api.openai.com` reaches a stand-in); returns its port and the CONNECT lines seen.
async fn connect_proxy(
    upstream: std::net::SocketAddr,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let lines = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let lines = lines.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_string();
                lines.lock().expect("lock").push(line);
                let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else { return };
                if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (port, seen, task)
}

/// With no price configured, the built-in dated table prices a built-in provider's default
/// model: the samples' `cost_usd`, the daily budget alert a real webhook receives and the price
/// `vigil report` shows are the same numbers. The probes reach `https://api.openai.com` through a
/// CONNECT proxy that tunnels to a TLS stand-in holding a certificate for that name (trusted
/// through `probe.ca_file`), so the built-in row for the real host applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_in_prices_make_samples_budget_alert_and_report_agree() {
    use vigil::config::Price;
    use vigil::run::demo::standin::{Script, StandIn};

    let certified = rcgen::generate_simple_self_signed(vec!["api.openai.com".to_string()]).expect("certificate");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let server_config =
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("server config");
    let stream = crate::support::fixture("openai-chat-stream-usage.sse");
    let list = crate::support::fixture("openai-models-list.json");
    let openai = StandIn::start_tls_config(
        move |r| match r.method.as_str() {
            "POST" => Script::sse(&stream, std::time::Duration::ZERO),
            _ => Script::json(200, &list),
        },
        server_config,
    )
    .expect("TLS stand-in");
    let (proxy_port, connects, _proxy) = connect_proxy(openai.addr()).await;
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = dir.path().join("openai-test-ca.pem");
    std::fs::write(&ca, certified.cert.pem()).expect("ca file");
    let budget = 0.00001;
    let text = daemon_config(
        dir.path(),
        &format!(
            // `max_interval = interval`: the budget must be exceeded here, so adaptive probing
            // may not stretch the target to stay under it.
            "[probe]\ninterval = \"1s\"\nmax_interval = \"1s\"\ntimeout = \"900ms\"\nproxy = \"http://127.0.0.1:{proxy_port}\"\nca_file = \"{ca}\"\n\
             daily_budget_usd = {budget}\n\
             [[alerts.webhook]]\nurl_env = \"VIGIL_TEST_HOOK\"\nsecret_env = \"VIGIL_TEST_HOOK_SECRET\"\n\
             [[provider]]\nname = \"openai\"\nstatus_page_url = \"\"\n",
            ca = ca.display().to_string().replace('\\', "\\\\"),
        ),
    );
    let env: std::collections::BTreeMap<String, String> = [
        ("OPENAI_API_KEY".to_string(), "sk-test-budget".to_string()),
        ("VIGIL_TEST_HOOK".to_string(), format!("{}/hook", hook.base_url())),
        ("VIGIL_TEST_HOOK_SECRET".to_string(), "hook-secret".to_string()),
    ]
    .into();
    let budget_alert = || {
        hook.requests().iter().filter_map(|r| r.json()).find_map(|v| {
            v["alerts"]
                .as_array()?
                .iter()
                .find(|a| a["kind"] == "probe_budget_exceeded" && a["status"] == "firing")
                .cloned()
        })
    };
    let store = run_daemon(&text, &env, || budget_alert().is_some()).await;
    let alert = budget_alert().expect("the daily budget alert reached the webhook");
    assert!(
        connects.lock().expect("lock").iter().any(|l| l.starts_with("CONNECT api.openai.com:443 ")),
        "{connects:?}"
    );

    let samples = stored(store.as_ref()).await;
    let ok: Vec<_> = samples.iter().filter(|s| s.outcome == vigil::vocab::sample::Outcome::Ok).collect();
    assert!(!ok.is_empty(), "{samples:?}");
    let builtin = Price { input_per_mtok: 0.15, output_per_mtok: 0.60 };
    let per_probe = builtin.cost(14, 8);
    for s in &ok {
        assert_eq!((s.input_tokens, s.output_tokens), (Some(14), Some(8)), "the fixture's usage");
        assert_eq!(s.cost_usd, Some(per_probe), "usage × the built-in gpt-4o-mini price");
    }
    // The budget counted those same costs: what it reports spent is a whole number of probes.
    let spent = alert["current"].as_f64().expect("spent");
    let probes = (spent / per_probe).round();
    assert!(probes >= 1.0 && (spent - probes * per_probe).abs() < 1e-12, "spent {spent} vs {per_probe} a probe");
    assert_eq!(alert["baseline"].as_f64(), Some(budget));
    assert!(alert["summary"].as_str().is_some_and(|s| s.contains("over probe.daily_budget_usd")), "{alert}");

    // `vigil report` prices the target the same way.
    let config = vigil::config::Config::from_toml(&text, &env).expect("config");
    let target = ok[0].target.clone();
    let book = prices::load(&config.providers, std::slice::from_ref(&target), dir.path(), Utc::now()).await;
    assert_eq!(book.price(&target), Some(builtin), "the report's price for {target}");
}
