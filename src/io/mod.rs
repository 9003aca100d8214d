//! The adapter deck: everything that talks to the world (providers, databases, HTTP clients and
//! servers, notification channels, feeds) behind narrow seams the run deck wires together.

pub(crate) mod bounded;
pub mod drill_desk;
pub mod feeds;
pub mod http;
pub mod markup;
pub mod metrics;
pub mod notify;
pub mod probe;
pub mod store;
pub mod systemd;
pub mod weekly;
