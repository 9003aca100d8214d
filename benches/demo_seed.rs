//! How long `vigil run --demo` takes to seed its week of history: simulating 7 days × every
//! demo target and storing it in a fresh SQLite file, as a first demo start does.
//!
//! `cargo bench --bench demo_seed` prints the figures (one run per repetition; the issue's
//! bound is 5 s for the whole seeding). Optional env: `VIGIL_BENCH_RUNS` (default 3).

use chrono::Utc;
use std::collections::BTreeMap;
use std::time::Instant;
use vigil::config::Config;
use vigil::run::demo::history;

fn main() {
    let runs: usize = std::env::var("VIGIL_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    println!("demo seeding: {} days × {} targets", history::DAYS, history::demo_targets("local").len());
    println!(
        "{:>4} {:>10} {:>10} {:>9} {:>9} {:>12} {:>10}",
        "run", "probes", "samples", "rollups", "transit.", "simulate s", "total s"
    );
    for run in 1..=runs {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::from_toml("", &BTreeMap::<String, String>::new()).expect("defaults");
        config.storage.data_dir = dir.path().to_path_buf();
        assert_eq!(
            vigil::run::demo::use_demo_database(&mut config),
            vigil::run::demo::DemoDatabase::Own { ignored: None },
            "the defaults name no storage URL"
        );
        let sim = Instant::now();
        let simulated = history::simulate(&config, Utc::now(), history::SEED);
        let simulate_s = sim.elapsed().as_secs_f64();
        drop(simulated);
        let seeded = rt.block_on(async {
            let url = secrecy::ExposeSecret::expose_secret(&config.storage.url).to_string();
            let store = vigil::io::store::open(&url).await.expect("open demo database");
            store.migrate().await.expect("migrate");
            history::seed(store.as_ref(), &config, Utc::now()).await.expect("seed")
        });
        println!(
            "{run:>4} {:>10} {:>10} {:>9} {:>9} {simulate_s:>12.2} {:>10.2}",
            seeded.probes, seeded.samples, seeded.rollups, seeded.transitions, seeded.seconds
        );
    }
}
