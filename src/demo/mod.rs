//! Simulated LLM providers on loopback, for `--demo` and for tests.
//!
//! [`standin`] is the scriptable HTTP/1.1 server tests drive directly.

pub mod standin;

pub use standin::{Chunk, End, RequestRecord, Script, StandIn};
