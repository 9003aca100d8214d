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
