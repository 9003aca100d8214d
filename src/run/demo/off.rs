//! `crate::run::demo` in a build without the `demo` feature: the same entry points, and starting the
//! simulated providers fails with an error naming the feature, so `--demo` exits instead of
//! probing nothing.

#[path = "setup.rs"]
mod setup;

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::ProviderConfig;

pub use setup::{use_demo_cadence, use_demo_database, DemoDatabase, DEMO_CHAIN, DEMO_DATABASE, DEMO_INTERVAL};

/// Never built: [`start_demo`] always fails in this build.
#[derive(Debug)]
pub struct Demo {
    /// The loopback server.
    pub standin: StandIn,
    /// The simulated providers.
    pub providers: Vec<ProviderConfig>,
}

/// The loopback server of a demo, which this build never starts.
#[derive(Debug)]
pub struct StandIn {
    addr: SocketAddr,
}

impl StandIn {
    /// Where it would listen.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Demo {
    /// Adds nothing: this build never starts a demo.
    pub fn attach(&self, _config: &mut crate::config::Config) {}
}

/// No simulated providers in this build.
pub fn declared_providers() -> Vec<ProviderConfig> {
    Vec::new()
}

/// No demo chain in this build.
pub fn demo_chain_targets() -> Vec<String> {
    Vec::new()
}

fn disabled() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, "this vigil was built without the `demo` feature")
}

/// Fails: this build has no simulated providers.
pub async fn start_demo(_seed: u64) -> std::io::Result<Demo> {
    Err(disabled())
}

/// Fails: this build has no simulated providers.
pub async fn start_demo_at(_seed: u64, _elapsed: Duration) -> std::io::Result<Demo> {
    Err(disabled())
}

/// The simulated history, which this build does not have.
pub mod history {
    use chrono::{DateTime, Utc};

    use crate::config::Config;
    use crate::io::store::{Store, StoreError};

    /// Seed of the simulation (unused in this build).
    pub const SEED: u64 = 0;

    /// Seeds nothing: without the demo there is no simulated history.
    pub async fn seed_if_empty(
        _store: &dyn Store,
        _config: &Config,
        _now: DateTime<Utc>,
    ) -> Result<Option<()>, StoreError> {
        Ok(None)
    }
}
