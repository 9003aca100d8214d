//! The golden-check task: one loop per target and `[[provider.check]]`, and per capability of
//! `[probe.capabilities]`, each on its own interval at a stable offset of its own inside the
//! first interval (so checks spread and stay off the regular probes' slots), at most
//! `CONCURRENCY` runs in flight through its own semaphore. It shares nothing with the regular
//! scheduler but the prober's TLS setup, so it never delays or skips a regular probe. Each run
//! is timed like a probe and judged by `decide::check` (a golden check) or `decide::capability`
//! (a capability probe, stored under the name `capability.<name>`); finished runs go to the
//! pipeline on their own channel.

use crate::config::{CapabilitiesConfig, CheckConfig};
use crate::decide::check::judge;
use crate::io::probe::{CanaryRequest, Planned, Prober};
use crate::run::periodic::{self, Schedule};
use crate::vocab::capability::Capability;
use crate::vocab::check::{CheckRun, ANSWER_BYTES};
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// Check runs in flight at once, whatever the number of targets and checks.
const CONCURRENCY: usize = 4;

/// What a job asks.
#[derive(Clone)]
enum Asks {
    /// A team's golden check.
    Golden(CheckConfig),
    /// A capability probe.
    Capability(Capability),
}

/// One check of one target.
#[derive(Clone)]
struct Job {
    plan: Planned,
    asks: Asks,
    every: Duration,
}

impl Job {
    fn name(&self) -> String {
        match &self.asks {
            Asks::Golden(c) => c.name.clone(),
            Asks::Capability(c) => c.check_name(),
        }
    }
}

/// The request a check sends: its own turns, no seed, no nonce (the team's prompt as written).
pub fn request(check: &CheckConfig) -> CanaryRequest {
    CanaryRequest {
        system: check.system.clone().unwrap_or_default(),
        user: check.prompt.clone(),
        max_tokens: check.max_tokens,
        seed: None,
        logprobs: false,
        capability: None,
        nonce_first: false,
    }
}

/// One capability run of `plan` now: the timed request, judged. What came back is the function
/// call (`get_weather({"city":"Paris"})`) when there was one, else the answer.
pub async fn run_capability(
    prober: &Prober,
    plan: &Planned,
    capability: Capability,
    scheduled_at: DateTime<Utc>,
) -> CheckRun {
    let (sample, reading) = prober.canary(plan, scheduled_at, &CanaryRequest::for_capability(capability)).await;
    let call = reading.tool_call.as_ref();
    let (verdict, why) = crate::decide::capability::judge(capability, &sample, &reading.answer, call);
    let answer = match call {
        Some(c) => format!("{}({})", c.name, c.arguments),
        None => reading.answer.clone(),
    };
    let answer = crate::io::probe::truncate(&answer, ANSWER_BYTES);
    CheckRun { sample, check: capability.check_name(), verdict, why, answer }
}

/// One run of `check` on `plan` now: the timed request, judged.
pub async fn run_once(prober: &Prober, plan: &Planned, check: &CheckConfig, scheduled_at: DateTime<Utc>) -> CheckRun {
    let (sample, reading) = prober.canary(plan, scheduled_at, &request(check)).await;
    let (verdict, why) = judge(check, &sample, &reading.answer);
    let answer = crate::io::probe::truncate(&reading.answer, ANSWER_BYTES);
    CheckRun { sample, check: check.name.clone(), verdict, why, answer }
}

/// Runs every target's checks until stopped; cheap to clone.
#[derive(Clone)]
pub struct CheckRunner {
    jobs: Arc<Vec<Job>>,
    prober: Prober,
    permits: Arc<Semaphore>,
    /// The first run of every check falls within this span of the start (at most its interval).
    first_within: Option<Duration>,
    /// Runs only while this member leads its region (always without replicas).
    gate: crate::decide::roster::LeaderGate,
}

impl CheckRunner {
    /// A runner over every golden check of every target among `plans`, and, when enabled,
    /// every capability probe its API offers.
    pub fn new(plans: &[Planned], prober: Prober, capabilities: &CapabilitiesConfig) -> Self {
        let mut jobs: Vec<Job> = Vec::new();
        for p in plans {
            for c in p.provider.checks.iter().filter(|c| c.applies_to(&p.target.model)) {
                jobs.push(Job { plan: p.clone(), asks: Asks::Golden(c.clone()), every: c.every });
            }
            if !capabilities.enabled || !p.provider.chats() {
                continue;
            }
            for c in capabilities.checks.iter().filter(|c| crate::decide::capability::offered(p.provider.kind, **c)) {
                jobs.push(Job { plan: p.clone(), asks: Asks::Capability(*c), every: capabilities.every });
            }
        }
        CheckRunner {
            jobs: Arc::new(jobs),
            prober,
            permits: Arc::new(Semaphore::new(CONCURRENCY)),
            first_within: None,
            gate: Default::default(),
        }
    }

    /// Spreads the first runs over `span` instead of a whole interval, so a fresh instance
    /// shows every check's verdict soon after it starts.
    pub fn starting_within(mut self, span: Duration) -> Self {
        self.first_within = Some(span.max(Duration::from_millis(1)));
        self
    }

    /// Runs only while this member leads its region ([`crate::decide::roster::LeaderGate`]).
    pub fn led_by(mut self, gate: crate::decide::roster::LeaderGate) -> Self {
        self.gate = gate;
        self
    }

    /// Checks run (target × check).
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True when no check is configured.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Runs every check's loop until `shutdown`; a run in flight at shutdown is dropped (a
    /// check's gap costs nothing). Finished runs go to `tx`.
    pub async fn run(self, tx: mpsc::Sender<CheckRun>, shutdown: CancellationToken) {
        tracing::info!(checks = self.jobs.len(), "golden checks and capability probes running");
        let start = tokio::time::Instant::now();
        let mut loops = tokio::task::JoinSet::new();
        for i in 0..self.jobs.len() {
            let this = self.clone();
            let (tx, shutdown) = (tx.clone(), shutdown.clone());
            loops.spawn(async move {
                let job = &this.jobs[i];
                let key = format!("check:{}:{}", job.name(), job.plan.target.id());
                let schedule = Schedule::spread(&key, job.every, start, this.first_within).led_by(this.gate.clone());
                let this = &this;
                let tx = &tx;
                periodic::every(schedule, &shutdown, (), |()| async move {
                    let run = {
                        let _permit = this.permits.acquire().await.ok();
                        match &job.asks {
                            Asks::Golden(check) => run_once(&this.prober, &job.plan, check, Utc::now()).await,
                            Asks::Capability(c) => run_capability(&this.prober, &job.plan, *c, Utc::now()).await,
                        }
                    };
                    let t = &job.plan.target;
                    tracing::debug!(target = %t, provider = %t.provider, model = %t.model, region = %t.region,
                        check = %run.check, verdict = %run.verdict, "golden check run");
                    tx.send(run).await.ok()
                })
                .await;
            });
        }
        while loops.join_next().await.is_some() {}
    }
}
