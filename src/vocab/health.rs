//! A target's health: the one judgement of "how is this target doing now" that the status page,
//! `GET /v1/targets`, the `target_status` rows other regions read, chain demotion and the router
//! export all show. It is judged in one place (`decide::health::judge`, called by the monitor);
//! everything else only reads it.

use serde::{Deserialize, Serialize};

/// The state part of a [`Health`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Answering, its last probe within its failover deadline.
    Ok,
    /// Answering, but its last probe over its failover deadline, a 429's backoff running, or its
    /// recent replies fail a capability the probe checks (they ignore the system prompt).
    Degraded,
    /// Breaker half-open: the next probe decides.
    HalfOpen,
    /// Breaker open, or the last probe failed.
    Down,
    /// Not probed yet.
    #[default]
    Waiting,
}

impl HealthState {
    /// The name every output spells: `ok`, `degraded`, `half_open`, `down`, `waiting`.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Ok => "ok",
            HealthState::Degraded => "degraded",
            HealthState::HalfOpen => "half_open",
            HealthState::Down => "down",
            HealthState::Waiting => "waiting",
        }
    }

    /// Reads a stored name. An unknown name (a newer peer's) reads as `waiting`, which judges
    /// nothing; `flapping`, the state name vigil wrote before the flapping mark had its own
    /// column, reads as `ok` (its flapping mark is set by the caller).
    pub fn parse(s: &str) -> Self {
        match s {
            "ok" | "flapping" => HealthState::Ok,
            "degraded" => HealthState::Degraded,
            "half_open" => HealthState::HalfOpen,
            "down" => HealthState::Down,
            _ => HealthState::Waiting,
        }
    }
}

impl std::fmt::Display for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one target is doing now, with the flapping mark and the reason.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Health {
    /// The state.
    pub state: HealthState,
    /// Its state changes too often: changes are not paged, routers demote it.
    pub flapping: bool,
    /// Why it is not `ok` (or is flapping), as chains and pages show it; `None` when clean.
    pub reason: Option<String>,
    /// The metrics (`ttft`, `ttfb`) of the last probe that were over their failover deadline.
    #[serde(default)]
    pub over: Vec<String>,
    /// The capabilities its last judged replies all failed (`system_prompt`): routers rank it
    /// after targets without any.
    #[serde(default)]
    pub failing: Vec<String>,
    /// While a 429's backoff runs: when it ends (the router export's `retry_after_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<chrono::DateTime<chrono::Utc>>,
    /// The outcome class of the last probe when it failed (`rate_limited`, `server_error`,
    /// `timeout`, …; `rate_limited` also while a 429's backoff runs), else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_class: Option<String>,
}

impl Health {
    /// Usable and nothing against it: `ok` and not flapping (a chain keeps it in place).
    pub fn is_clean(&self) -> bool {
        self.state == HealthState::Ok && !self.flapping
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_names_read_back_and_older_or_newer_names_are_harmless() {
        for s in
            [HealthState::Ok, HealthState::Degraded, HealthState::HalfOpen, HealthState::Down, HealthState::Waiting]
        {
            assert_eq!(HealthState::parse(s.as_str()), s);
        }
        assert_eq!(HealthState::parse("flapping"), HealthState::Ok, "the name written before the flapping column");
        assert_eq!(HealthState::parse("melting"), HealthState::Waiting, "a newer peer's name judges nothing");
        assert!(Health { state: HealthState::Ok, ..Health::default() }.is_clean());
        assert!(!Health { state: HealthState::Ok, flapping: true, ..Health::default() }.is_clean());
        assert!(!Health::default().is_clean(), "waiting is not clean");
    }
}
