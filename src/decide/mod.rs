//! The decision deck: pure engines over the vocabulary and the validated config. Time is passed
//! in, nothing here spawns a task or touches a socket, a file or a database.

pub mod adaptive;
pub mod alert;
pub mod baseline;
pub mod breaker;
pub mod canary;
pub mod capability;
pub mod chain_cost;
pub mod check;
pub mod credit;
pub mod drill;
pub(crate) mod export;
pub mod health;
pub mod price_table;
pub mod pricing;
pub mod ratelimit;
pub(crate) mod report;
pub mod roster;
pub(crate) mod router_formats;
pub(crate) mod signing;
pub mod snapshot;
pub mod workload;
