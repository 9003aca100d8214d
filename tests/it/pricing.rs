//! Published OpenRouter prices for `vigil report`, fetched over real HTTP from the demo's
//! models API, cached in the data directory, and used (or skipped) when the API is unreachable.

use chrono::{Duration, Utc};
use vigil::demo::profiles::{self, Wire};
use vigil::demo::start_demo;
use vigil::pricing::{self, CACHE_FILE};
use vigil::target::Target;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[tokio::test]
async fn openrouter_routes_get_their_published_price_cached_and_reused_offline() {
    let demo = start_demo(5).await.expect("demo starts");
    let providers = demo.providers.clone();
    let llama = providers.iter().find(|p| p.name == "demo-llama").expect("demo-llama").clone();
    assert!(pricing::is_openrouter(&llama) && llama.price.is_none());
    let targets: Vec<Target> = llama
        .routes
        .iter()
        .map(|r| Target {
            provider: llama.name.clone(),
            model: llama.models[0].clone(),
            route: Some(r.clone()),
            region: "eu".into(),
        })
        .collect();
    assert!(targets.len() >= 2, "the demo model has several hosts");
    let data = tempfile::tempdir().expect("temp dir");
    let now = Utc::now();

    let book = pricing::load(&providers, &targets, data.path(), now).await;
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
    let cached = pricing::load(&providers, &targets, data.path(), now + Duration::hours(1)).await;
    assert_eq!(cached.price(&targets[0]), book.price(&targets[0]));
    assert_eq!(demo.standin.requests().len(), fetched, "no request while the cache is fresh");

    // Offline and stale: the last known prices, with a note saying so.
    demo.standin.shutdown().await;
    let stale = pricing::load(&providers, &targets, data.path(), now + Duration::days(2)).await;
    assert_eq!(stale.price(&targets[0]), book.price(&targets[0]));
    assert!(stale.notes.iter().any(|n| n.contains("using cached prices")), "{:?}", stale.notes);

    // Offline with no cache: no price and a note, never an error.
    let empty = tempfile::tempdir().expect("temp dir");
    let none = pricing::load(&providers, &targets, empty.path(), now).await;
    assert_eq!(none.price(&targets[0]), None);
    assert!(none.notes.iter().any(|n| n.contains("no published prices")), "{:?}", none.notes);
}

#[tokio::test]
async fn configured_prices_win_and_other_providers_are_not_asked() {
    let demo = start_demo(6).await.expect("demo starts");
    let anthropic = demo.providers.iter().find(|p| p.name == "demo-anthropic").expect("demo-anthropic").clone();
    assert!(!pricing::is_openrouter(&anthropic));
    let t = Target {
        provider: anthropic.name.clone(),
        model: anthropic.models[0].clone(),
        route: None,
        region: "eu".into(),
    };
    let data = tempfile::tempdir().expect("temp dir");
    let book = pricing::load(std::slice::from_ref(&anthropic), std::slice::from_ref(&t), data.path(), Utc::now()).await;
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
    use vigil::demo::standin::{Script, StandIn};
    use vigil::probe::{Planned, Prober};

    let env: BTreeMap<String, String> = [("OPENAI_API_KEY".to_string(), "sk-test-report".to_string())].into();
    let c = Config::from_toml("", &env).expect("built-in config");
    let t = Target { provider: "openai".into(), model: "gpt-4o-mini".into(), route: None, region: "eu".into() };
    let data = tempfile::tempdir().expect("temp dir");
    let book = pricing::load(&c.providers, std::slice::from_ref(&t), data.path(), Utc::now()).await;
    let price = book.price(&t).expect("built-in price for the default model");
    assert!(close(price.input_per_mtok, 0.15) && close(price.output_per_mtok, 0.60), "{price:?}");
    let shown = c.redacted_toml();
    assert!(shown.contains("built-in, 2026-12-01 from https://openai.com/api/pricing/"), "{shown}");
    assert!(!shown.contains("sk-test-report"), "secrets stay redacted");

    let body = std::fs::read(format!("{}/tests/fixtures/openai-chat-stream-usage.sse", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture");
    let server = StandIn::start(move |_| Script::sse(&body, std::time::Duration::ZERO)).await.expect("stand-in");
    let mut provider = c.providers.iter().find(|p| p.name == "openai").expect("openai").clone();
    provider.name = "aggregator".into();
    provider.base_url = server.base_url().parse().expect("url");
    provider.models = vec!["m".into()];
    provider.routes = vec!["Host".into()];
    let plan = Planned {
        target: Target {
            provider: "aggregator".into(),
            model: "m".into(),
            route: Some("Host".into()),
            region: "eu".into(),
        },
        provider: std::sync::Arc::new(provider.clone()),
    };
    let cfg = ProbeConfig { timeout: std::time::Duration::from_secs(5), ..c.probe.clone() };
    let prober = Prober::new(cfg, &[]);
    let published = vec![pricing::EndpointPrice {
        provider_name: "Host".into(),
        tag: None,
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
    }];
    prober.published_prices().write().expect("lock").insert(("aggregator".into(), "m".into()), published.clone());
    let s = prober.probe(&plan, Utc::now()).await;
    assert_eq!(s.outcome, vigil::sample::Outcome::Ok, "{:?}", s.error);
    let (input, output) = (s.input_tokens.expect("input"), s.output_tokens.expect("output"));
    let want = Price { input_per_mtok: 1.0, output_per_mtok: 2.0 }.cost(input, output);
    assert_eq!(s.cost_usd, Some(want), "usage × the published price of the pinned route");
    let report_price = vigil::price_table::price_of(&provider, "m", Some("Host"), Some(&published)).expect("price").0;
    assert_eq!(report_price.cost(input, output), want, "the report charges the same");
}
