//! Golden prompts: a team's own prompt and assertion per target (`[[provider.check]]`), run on
//! their own clock apart from the regular probes. Their record ([`CheckRun`]: the timed probe's
//! [`Sample`] and the verdict) travels on its own channel to the pipeline, which stores it in
//! `check_runs` (never `samples`), publishes the latest of each check ([`SharedChecks`]) and
//! hands it to the alert engine for `check_failed`; it never reaches baselines or breakers.

use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// What one run of a check said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckVerdict {
    /// The answer met the assertion within the TTFT budget.
    Passed,
    /// The provider answered, and the answer broke the assertion or the budget.
    Failed,
    /// The request itself failed (timeout, HTTP error…): the regular probes' alerts cover it,
    /// so it is not a `check_failed`.
    Error,
}

impl CheckVerdict {
    /// `passed`, `failed` or `error`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckVerdict::Passed => "passed",
            CheckVerdict::Failed => "failed",
            CheckVerdict::Error => "error",
        }
    }

    /// The verdict named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "passed" => Some(CheckVerdict::Passed),
            "failed" => Some(CheckVerdict::Failed),
            "error" => Some(CheckVerdict::Error),
            _ => None,
        }
    }
}

impl std::fmt::Display for CheckVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run of one golden check on one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRun {
    /// The probe as measured (outcome, timings, tokens, cost); its id is the run's id.
    pub sample: Sample,
    /// The check's `name`.
    pub check: String,
    /// What the run said.
    pub verdict: CheckVerdict,
    /// Why, in a line: what was asked and what came back (empty when it passed).
    pub why: String,
    /// The start of the answer (up to [`ANSWER_BYTES`]), to see what a wrong one was.
    pub answer: String,
}

/// Longest stored answer, in bytes.
pub const ANSWER_BYTES: usize = 256;

impl CheckRun {
    /// Target probed.
    pub fn target(&self) -> &Target {
        &self.sample.target
    }
}

/// The latest run of each check of each target, published by the pipeline for the status page
/// and `/v1/targets`; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SharedChecks(Arc<RwLock<BTreeMap<(Target, String), CheckRun>>>);

impl SharedChecks {
    /// Records a run as its check's latest.
    pub fn publish(&self, run: &CheckRun) {
        // A poisoned lock still holds valid runs.
        let mut g = self.0.write().unwrap_or_else(|e| e.into_inner());
        g.insert((run.sample.target.clone(), run.check.clone()), run.clone());
    }

    /// The latest run of every check, in target then check order.
    pub fn latest(&self) -> Vec<CheckRun> {
        self.0.read().map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// The latest run of each check of `target`, in check order.
    pub fn of(&self, target: &Target) -> Vec<CheckRun> {
        self.0
            .read()
            .map(|m| m.iter().filter(|((t, _), _)| t == target).map(|(_, r)| r.clone()).collect())
            .unwrap_or_default()
    }
}
