//! The circuit breaker's state: the word storage, alerts, reports and the export share.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Breaker state; the SPEC names and the `vigil_circuit_state` gauge values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Traffic flows.
    Closed,
    /// Waiting for one probe to decide.
    HalfOpen,
    /// Fail over.
    Open,
}

impl State {
    /// `closed`, `half_open` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::HalfOpen => "half_open",
            State::Open => "open",
        }
    }

    /// Value of the `vigil_circuit_state` gauge: 0 closed, 1 half-open, 2 open.
    pub fn gauge(self) -> i64 {
        match self {
            State::Closed => 0,
            State::HalfOpen => 1,
            State::Open => 2,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [State::Closed, State::HalfOpen, State::Open]
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("unknown breaker state {s:?}"))
    }
}
