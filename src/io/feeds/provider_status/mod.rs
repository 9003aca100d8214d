//! The providers' own status pages: the Statuspage v2 parser and the poller.

pub mod poller;
pub(crate) mod statuspage;
