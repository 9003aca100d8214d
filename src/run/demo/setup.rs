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
/// the config file itself gives `storage.url`: a URL from the environment (`DATABASE_URL`,
/// `VIGIL_STORAGE_URL`) is meant for the real daemon (a fleet's shared PostgreSQL, say) and never
/// receives the demo's simulated week. Returns the variable set aside, if any, so the caller can
/// say so; `None` also when the file's URL is kept.
pub fn use_demo_database(config: &mut crate::config::Config) -> DemoDatabase {
    use crate::config::UrlFrom;
    let ignored = match &config.storage.url_from {
        UrlFrom::File => return DemoDatabase::Configured,
        UrlFrom::Default => None,
        UrlFrom::Env(var) => Some(var.clone()),
    };
    let path = config.storage.data_dir.join(DEMO_DATABASE);
    config.storage.url = SecretString::from(format!("sqlite://{}", path.display()));
    config.storage.url_from = UrlFrom::Default;
    DemoDatabase::Own { ignored }
}

/// What [`use_demo_database`] chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoDatabase {
    /// The config file's `storage.url`.
    Configured,
    /// The demo's own file; `ignored` names the environment variable whose URL was set aside.
    Own {
        /// `DATABASE_URL`, `VIGIL_STORAGE_URL` or a `_FILE` twin.
        ignored: Option<String>,
    },
}

impl DemoDatabase {
    /// Logs the choice once: which database, and a variable set aside.
    pub fn log(&self, config: &crate::config::Config) {
        let url = crate::config::redact_url(secrecy::ExposeSecret::expose_secret(&config.storage.url));
        match self {
            DemoDatabase::Configured => tracing::info!(%url, "demo: storage.url from the config file"),
            DemoDatabase::Own { ignored: None } => tracing::info!(%url, "demo: own database"),
            DemoDatabase::Own { ignored: Some(var) } => tracing::info!(
                %url, ignored = %var,
                "demo: own database; the URL in the environment is not used by --demo (give storage.url in the demo's config file to use one)"
            ),
        }
    }
}

/// Probe interval of the demo unless `probe.interval` is configured: every cell of the status
/// page has a probe (and so its figures) within seconds of the start.
pub const DEMO_INTERVAL: Duration = Duration::from_secs(10);

/// Sets the demo's probe cadence ([`DEMO_INTERVAL`]) when the config leaves `probe.interval` unset.
pub fn use_demo_cadence(config: &mut crate::config::Config) {
    if config.probe_interval_given {
        return;
    }
    config.probe.interval = DEMO_INTERVAL;
    config.probe.timeout = config.probe.timeout.min(DEMO_INTERVAL);
}
