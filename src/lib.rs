//! vigil: synthetic health probes for LLM API providers.
//!
//! Layout — data flows one way:
//! [`config`] is parsed once into a validated `Config`. The [`scheduler`] starts each target's
//! probe at a stable offset inside every interval; [`probe`] opens a fresh, timed connection,
//! lets the provider's adapter build the request and read the stream ([`probe::sse`]), and
//! returns a [`sample::Sample`] — a failed probe is data, not an error.
//! Samples go down one channel to the pipeline, the one place the order lives:
//! store (or spool), then metrics, baselines, breaker and alerts; every other store call goes
//! through the storage link ([`store::link`]) so the pipeline never waits on a database, and the
//! watchdog keeps the daemon whole or stopped. [`http`] serves `/metrics`,
//! health, the router export and the status page from snapshots; [`demo`] runs simulated
//! providers on loopback for `--demo` and for tests. The comparison report and [`weekly`] only
//! read the store: the matrix, and the weekly summary (HTML with PNG charts, emailed on a schedule).
//!
//! # Public surface
//!
//! The binary needs only [`cli`]. The rest of what is public is what the integration tests,
//! the benches and the fuzz harnesses drive directly:
//! - start-up and serving: [`app`] (`App::build`), [`http`] (router, server, readiness),
//!   [`monitor`] (the snapshot the HTTP layer reads), [`metrics`];
//! - the vocabulary: [`config`], [`target`], [`sample`], [`baseline`], [`breaker`], [`canary`];
//! - the parts tested against real peers: [`probe`] and [`scheduler`], [`store`] (both
//!   backends, link, spool, retention), [`alert`] (rules, outbox, channels), [`balance`],
//!   [`pricing`], [`price_table`], [`provider_status`], [`model_lists`], [`adaptive`],
//!   [`weekly`], and the stand-in providers of [`demo`].
//!
//! Everything else (the pipeline, the router export and its formats, chains, the report
//! matrix, signing, bounded body reads, secret files, the watchdog) is internal: reached only
//! through the daemon, the CLI or the HTTP API.

pub mod adaptive;
pub mod alert;
pub mod app;
pub mod balance;
pub mod baseline;
mod bounded;
pub mod breaker;
pub mod canary;
mod chain;
pub mod cli;
pub mod config;
#[cfg(feature = "demo")]
pub mod demo;
/// Without the `demo` feature: the same entry points, refusing to start.
#[cfg(not(feature = "demo"))]
#[path = "demo/off.rs"]
pub mod demo;
mod export;
pub mod http;
pub mod markup;
pub mod metrics;
pub mod model_lists;
pub mod monitor;
mod pipeline;
pub mod price_table;
pub mod pricing;
pub mod probe;
pub mod provider_status;
mod report;
mod router_formats;
pub mod sample;
pub mod scheduler;
mod secret_file;
mod signing;
pub mod store;
pub mod target;
mod watchdog;
pub mod weekly;
