//! The canary task: one loop per target on the canary's own interval (at a stable offset of its
//! own, so canary runs spread over the interval and away from the regular probes' slots), at most
//! `probe.canary.concurrency` runs in flight through its own semaphore. It shares nothing with
//! the regular scheduler but the prober's TLS setup, so it never delays or skips a regular probe.

use crate::config::CanaryConfig;
use crate::decide::canary::prompt;
use crate::decide::canary::prompt::PROMPT_VERSION;
use crate::io::probe::{CanaryRequest, Planned, Prober};
use crate::run::periodic::{self, Schedule};
use crate::vocab::canary::CanaryRun;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// Longest stored answer per question, in bytes: enough for every expected answer and to see
/// what a wrong one was.
const ANSWER_BYTES: usize = 64;

/// The request every canary run sends, from the config.
pub fn request(cfg: &CanaryConfig) -> CanaryRequest {
    CanaryRequest {
        system: prompt::SYSTEM.to_string(),
        user: prompt::user_prompt(),
        max_tokens: cfg.max_tokens,
        seed: Some(cfg.seed),
        logprobs: cfg.logprobs,
        capability: None,
        nonce_first: false,
    }
}

/// Whether a target can be canaried: chat answers only (a plain HTTP check or an embedding has
/// no text to score).
pub fn applies_to(plan: &Planned) -> bool {
    plan.provider.chats()
}

/// One canary run of `plan` now: the timed probe with the canary's prompt, scored.
pub async fn run_once(
    prober: &Prober,
    plan: &Planned,
    request: &CanaryRequest,
    scheduled_at: DateTime<Utc>,
) -> CanaryRun {
    let (sample, reading) = prober.canary(plan, scheduled_at, request).await;
    let scored = (!sample.outcome.is_failure()).then(|| prompt::score(&reading.answer));
    let (correct, total, answers_fingerprint, answers) = match scored {
        Some(s) => {
            let answers = s.answers.iter().map(|a| crate::io::probe::truncate(a, ANSWER_BYTES)).collect();
            (s.correct, s.total, s.fingerprint, answers)
        }
        None => (0, 0, String::new(), Vec::new()),
    };
    CanaryRun {
        sample,
        prompt_version: PROMPT_VERSION,
        correct,
        total,
        answers_fingerprint,
        answers,
        identity: reading.identity,
        logprobs: reading.logprobs,
    }
}

/// Runs canaries until stopped; cheap to clone.
#[derive(Clone)]
pub struct CanaryRunner {
    plans: Arc<Vec<Planned>>,
    prober: Prober,
    cfg: CanaryConfig,
    permits: Arc<Semaphore>,
    /// The first run of every target falls within this span of the start.
    first_within: std::time::Duration,
    /// Runs only while this member leads its region (always without replicas).
    gate: crate::decide::roster::LeaderGate,
}

impl CanaryRunner {
    /// A runner over the chat targets among `plans`.
    pub fn new(plans: Vec<Planned>, prober: Prober, cfg: CanaryConfig) -> Self {
        let plans: Vec<Planned> = plans.into_iter().filter(applies_to).collect();
        let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
        let first_within = cfg.interval;
        CanaryRunner { plans: Arc::new(plans), prober, cfg, permits, first_within, gate: Default::default() }
    }

    /// Spreads the first runs over `span` (at most the canary interval) instead of a whole
    /// interval, so a fresh instance shows every target's canary soon after it starts; later
    /// runs keep one interval apart.
    pub fn starting_within(mut self, span: std::time::Duration) -> Self {
        self.first_within = span.min(self.cfg.interval).max(std::time::Duration::from_millis(1));
        self
    }

    /// Runs only while this member leads its region ([`crate::decide::roster::LeaderGate`]).
    pub fn led_by(mut self, gate: crate::decide::roster::LeaderGate) -> Self {
        self.gate = gate;
        self
    }

    /// Targets canaried.
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// True when no target can be canaried.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Runs every target's loop until `shutdown`; a run in flight at shutdown is dropped
    /// (a canary gap costs nothing). Finished runs go to `tx`.
    pub async fn run(self, tx: mpsc::Sender<CanaryRun>, shutdown: CancellationToken) {
        let request = Arc::new(request(&self.cfg));
        let interval = self.cfg.interval;
        tracing::info!(targets = self.plans.len(), interval = %humantime::format_duration(interval), "canary running");
        let start = tokio::time::Instant::now();
        let mut loops = tokio::task::JoinSet::new();
        for i in 0..self.plans.len() {
            let this = self.clone();
            let (tx, shutdown, request) = (tx.clone(), shutdown.clone(), request.clone());
            loops.spawn(async move {
                let plan = &this.plans[i];
                let offset =
                    crate::run::scheduler::offset_for(&format!("canary:{}", plan.target.id()), this.first_within);
                let schedule =
                    Schedule::every(interval).first_at(start + offset).skipping_missed().led_by(this.gate.clone());
                let (this, request, tx) = (&this, request.as_ref(), &tx);
                periodic::every(schedule, &shutdown, (), |()| async move {
                    let scheduled_at = Utc::now();
                    let run = {
                        let _permit = this.permits.acquire().await.ok();
                        run_once(&this.prober, plan, request, scheduled_at).await
                    };
                    let t = &plan.target;
                    tracing::debug!(target = %t, provider = %t.provider, model = %t.model, region = %t.region,
                        outcome = %run.sample.outcome, correct = run.correct, total = run.total,
                        answers = %run.answers_fingerprint, "canary run");
                    tx.send(run).await.ok()
                })
                .await;
            });
        }
        while loops.join_next().await.is_some() {}
    }
}
