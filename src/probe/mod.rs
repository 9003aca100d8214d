//! The timed probe: adapters build requests and read streams; the driver owns sockets and clocks.

pub mod outcome;
