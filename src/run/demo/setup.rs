//! How `--demo` changes a loaded config (its own database, a faster cadence, the name of its
//! chain): shared by the demo proper and by the stand-in compiled without the `demo` feature,
//! which refuses to start.

use std::time::Duration;

use secrecy::SecretString;

/// Name of the failover chain `--demo` adds when no `[[chain]]` names a demo target.
pub const DEMO_CHAIN: &str = "demo";

/// File name of the demo's own database, in `storage.data_dir`.
pub const DEMO_DATABASE: &str = "vigil-demo.db";

/// Points `config` at the demo's own SQLite database (`vigil-demo.db` in the data dir) unless
/// a storage URL was given explicitly (config file, `DATABASE_URL` or `VIGIL_STORAGE_URL`), so
/// simulated targets never land in the default `vigil.db`. Returns whether it did.
pub fn use_demo_database(config: &mut crate::config::Config) -> bool {
    let explicit = config.source.get("storage").and_then(|s| s.get("url")).is_some();
    if explicit {
        return false;
    }
    let path = config.storage.data_dir.join(DEMO_DATABASE);
    config.storage.url = SecretString::from(format!("sqlite://{}", path.display()));
    true
}

/// Probe interval of the demo unless `probe.interval` is configured: every cell of the status
/// page has a probe (and so its figures) within seconds of the start.
pub const DEMO_INTERVAL: Duration = Duration::from_secs(10);

/// Sets the demo's probe cadence ([`DEMO_INTERVAL`]) when the config leaves `probe.interval` unset.
pub fn use_demo_cadence(config: &mut crate::config::Config) {
    if config.source.get("probe").and_then(|p| p.get("interval")).is_some() {
        return;
    }
    config.probe.interval = DEMO_INTERVAL;
    config.probe.timeout = config.probe.timeout.min(DEMO_INTERVAL);
}
