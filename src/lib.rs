//! vigil: synthetic health probes for LLM API providers.
//!
//! Layout — data flows one way:
//! [`config`] is parsed once into a validated `Config`. The [`scheduler`] starts each target's
//! probe at a stable offset inside every interval; [`probe`] opens a fresh, timed connection
//! ([`probe::timing`]), lets the provider's adapter build the request and read the stream
//! ([`probe::sse`]), and returns a [`sample::Sample`] — a failed probe is data, not an error.
//! Samples go down one channel to the [`pipeline`], the one place the order lives:
//! store (or spool), then metrics, baselines, breaker and alerts; every other store call goes
//! through the storage link ([`store::link`]) so the pipeline never waits on a database, and the
//! [`watchdog`] keeps the daemon whole or stopped. [`http`] serves `/metrics`,
//! health, the router export and the status page from snapshots; [`demo`] runs simulated
//! providers on loopback for `--demo` and for tests. [`report`] and [`weekly`] only read the
//! store: the comparison matrix, and the weekly summary (HTML with PNG charts, emailed on a schedule).

pub mod adaptive;
pub mod alert;
pub mod app;
pub mod balance;
pub mod baseline;
pub mod bounded;
pub mod breaker;
pub mod canary;
pub mod chain;
pub mod cli;
pub mod config;
#[cfg(feature = "demo")]
pub mod demo;
/// Without the `demo` feature: the same entry points, refusing to start.
#[cfg(not(feature = "demo"))]
#[path = "demo/off.rs"]
pub mod demo;
pub mod export;
pub mod http;
pub mod markup;
pub mod metrics;
pub mod model_lists;
pub mod monitor;
pub mod pipeline;
pub mod price_table;
pub mod pricing;
pub mod probe;
pub mod provider_status;
pub mod report;
pub mod router_formats;
pub mod sample;
pub mod scheduler;
pub mod secret_file;
pub mod signing;
pub mod store;
pub mod target;
pub mod watchdog;
pub mod weekly;
