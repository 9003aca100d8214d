//! What an application relies on besides a fast answer: calling a declared function (`tools`),
//! answering in JSON (`json`, JSON mode) and answering in JSON that follows a given schema
//! (`json_schema`, structured output). Capability probes (`[probe.capabilities]`) ask each chat
//! target for each one; `[[chain]] requires` names the ones a chain's traffic needs.

use serde::{Deserialize, Serialize};

/// One capability a capability probe checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// A well-formed call of one declared function, with valid JSON arguments.
    Tools,
    /// JSON mode: the answer is one JSON object.
    Json,
    /// Structured output: the answer is JSON that validates against the request's schema.
    JsonSchema,
}

impl Capability {
    /// Every capability, in the order they are shown.
    pub const ALL: [Capability; 3] = [Capability::Tools, Capability::Json, Capability::JsonSchema];

    /// `tools`, `json` or `json_schema`, as configured and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Tools => "tools",
            Capability::Json => "json",
            Capability::JsonSchema => "json_schema",
        }
    }

    /// The capability named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The name its runs carry in `check_runs` and in `/v1/targets` (`capability.tools`); a
    /// golden check may not take a name of this form.
    pub fn check_name(self) -> String {
        format!("{CHECK_PREFIX}{}", self.as_str())
    }

    /// The capability whose runs carry `check` as their name.
    pub fn of_check(check: &str) -> Option<Self> {
        check.strip_prefix(CHECK_PREFIX).and_then(Self::parse)
    }
}

/// The prefix of a capability run's check name.
pub const CHECK_PREFIX: &str = "capability.";

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
