//! The run deck: the only one that spawns and owns tasks. It wires the adapters and engines
//! into the daemon (app), carries samples down the road (pipeline, monitor, scheduler) and
//! keeps it whole (watchdog), and shares a region's targets among its replicas (replicas).

pub mod app;
pub mod canary_runner;
pub mod check_runner;
pub mod daemon;
#[cfg(feature = "demo")]
pub mod demo;
/// Without the `demo` feature: the same entry points, refusing to start.
#[cfg(not(feature = "demo"))]
#[path = "demo/off.rs"]
pub mod demo;
pub mod monitor;
pub mod periodic;
pub(crate) mod pipeline;
pub(crate) mod replicas;
pub mod scheduler;
pub(crate) mod side_tasks;
pub(crate) mod watchdog;
pub mod weekly_job;
pub mod workload_runner;
