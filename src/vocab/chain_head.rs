//! The head of a failover chain over time: which target a router tries first, from when, and
//! at what price. The pipeline stores one record each time a chain's head moves (and one at
//! start); the weekly summary reads them back to count time per head and the spend it implied.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A price in USD per million tokens, as the chain entries publish it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerMtok {
    /// USD per million input tokens.
    pub input: f64,
    /// USD per million output tokens.
    pub output: f64,
}

impl PerMtok {
    /// What `input` and `output` tokens cost at this price, in USD.
    pub fn cost(&self, input: f64, output: f64) -> f64 {
        (input * self.input + output * self.output) / 1e6
    }
}

/// One chain's head from `at` on, in one region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainHead {
    /// Region whose export it is.
    pub region: String,
    /// Chain name.
    pub chain: String,
    /// From when.
    pub at: DateTime<Utc>,
    /// The target id first in the chain's order; `None` while nothing in the chain is usable.
    pub target: Option<String>,
    /// Its price then, when known.
    pub price: Option<PerMtok>,
}
