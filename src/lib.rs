//! vigil: synthetic health probes for LLM API providers.
//!
//! # Decks
//!
//! The crate is built in five decks, and a module imports only from its own deck or one below
//! (docs/ARCHITECTURE.md, "Decks"; `tests/it/decks.rs` keeps it so):
//!
//! 1. [`vocab`]: the shared words (target, sample, breaker state, stored records, notices,
//!    readiness);
//! 2. [`config`]: TOML + environment → a validated `Config`, one file per section;
//! 3. [`decide`]: pure engines (baselines, breaker, alert rules, export, adaptive plan, canary
//!    statistic, prices) with injected time;
//! 4. [`io`]: adapters (probe, store, HTTP, metrics, notification channels, feeds, weekly report);
//! 5. [`run`]: the daemon's tasks (app wiring, pipeline, monitor, scheduler, watchdog), and
//!    [`cli`] above them all.
//!
//! Data flows one way: the scheduler starts each probe, the prober returns a
//! [`Sample`] (a failed probe is data, not an error), and the pipeline hands it to the store,
//! metrics, baselines, breaker and alerts in that order; readers see published snapshots.

pub mod cli;
pub mod config;
pub mod decide;
pub mod io;
pub mod run;
pub mod vocab;

pub use config::{Config, ProviderConfig};
pub use io::store::{Store, StoreError};
pub use vocab::breaker::State as BreakerState;
pub use vocab::sample::{Outcome, Sample};
pub use vocab::target::{Name, Target, TargetKey};
