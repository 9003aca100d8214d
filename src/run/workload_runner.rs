//! The long-prompt probe task (`[[probe.workload]]`): one loop per chat target and size, each
//! on its own interval at a stable offset of its own inside the first interval (so sizes and
//! targets spread and stay off the regular probes' slots), at most `CONCURRENCY` runs in flight
//! through its own semaphore. It shares nothing with the regular scheduler but the prober (its
//! sockets, kernel timestamps and TLS setup, with the workload's own time limit), so a slow
//! prefill never delays or skips a regular probe. Each size's prompt is built once and shared by
//! its loops; finished runs go to the pipeline on their own channel.

use crate::config::WorkloadConfig;
use crate::decide::workload::{user_text, SYSTEM};
use crate::io::probe::{CanaryRequest, Planned, Prober, NONCE_LEN};
use crate::run::periodic::{self, Schedule};
use crate::vocab::workload::WorkloadRun;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// Long-prompt runs in flight at once, whatever the number of targets and sizes: each may hold a
/// provider's prefill for seconds and costs real tokens.
const CONCURRENCY: usize = 2;

/// The request of one size: nonce first, then the instruction, then the filler.
pub fn request(w: &WorkloadConfig) -> CanaryRequest {
    CanaryRequest {
        system: SYSTEM.to_string(),
        user: user_text(w.input_tokens, NONCE_LEN),
        max_tokens: w.max_tokens,
        seed: None,
        logprobs: false,
        capability: None,
        nonce_first: true,
    }
}

/// One size on one target.
#[derive(Clone)]
struct Job {
    plan: Planned,
    size: u32,
    every: Duration,
    request: Arc<CanaryRequest>,
    prober: Prober,
}

/// One run of a size on `plan` now, timed exactly as a probe is.
pub async fn run_once(
    prober: &Prober,
    plan: &Planned,
    request: &CanaryRequest,
    size: u32,
    scheduled_at: DateTime<Utc>,
) -> WorkloadRun {
    let (sample, _reading) = prober.canary(plan, scheduled_at, request).await;
    WorkloadRun { sample, input_tokens: size }
}

/// Runs every target's long-prompt probes until stopped; cheap to clone.
#[derive(Clone)]
pub struct WorkloadRunner {
    jobs: Arc<Vec<Job>>,
    permits: Arc<Semaphore>,
    /// The first run of every job falls within this span of the start (at most its interval).
    first_within: Option<Duration>,
    /// Runs only while this member leads its region (always without replicas).
    gate: crate::decide::roster::LeaderGate,
}

impl WorkloadRunner {
    /// A runner over every size of `workloads` on every chat target among `plans` it applies to.
    pub fn new(plans: &[Planned], prober: &Prober, workloads: &[WorkloadConfig]) -> Self {
        let mut jobs = Vec::new();
        for w in workloads {
            let mine: Vec<&Planned> = plans.iter().filter(|p| w.applies_to(&p.provider, &p.target.model)).collect();
            if mine.is_empty() {
                continue;
            }
            let request = Arc::new(request(w));
            let prober = prober.with_timeout(w.timeout);
            for p in mine {
                jobs.push(Job {
                    plan: p.clone(),
                    size: w.input_tokens,
                    every: w.every,
                    request: request.clone(),
                    prober: prober.clone(),
                });
            }
        }
        WorkloadRunner {
            jobs: Arc::new(jobs),
            permits: Arc::new(Semaphore::new(CONCURRENCY)),
            first_within: None,
            gate: Default::default(),
        }
    }

    /// Spreads the first runs over `span` instead of a whole interval, so a fresh instance
    /// measures every size soon after it starts.
    pub fn starting_within(mut self, span: Duration) -> Self {
        self.first_within = Some(span.max(Duration::from_millis(1)));
        self
    }

    /// Runs only while this member leads its region ([`crate::decide::roster::LeaderGate`]).
    pub fn led_by(mut self, gate: crate::decide::roster::LeaderGate) -> Self {
        self.gate = gate;
        self
    }

    /// Jobs run (target × size).
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True when no workload applies to any target.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Runs every job's loop until `shutdown`; a run in flight at shutdown is dropped (a gap
    /// costs nothing). Finished runs go to `tx`.
    pub async fn run(self, tx: mpsc::Sender<WorkloadRun>, shutdown: CancellationToken) {
        tracing::info!(jobs = self.jobs.len(), "long-prompt probes running");
        let start = tokio::time::Instant::now();
        let mut loops = tokio::task::JoinSet::new();
        for i in 0..self.jobs.len() {
            let this = self.clone();
            let (tx, shutdown) = (tx.clone(), shutdown.clone());
            loops.spawn(async move {
                let job = &this.jobs[i];
                let key = format!("workload:{}:{}", job.size, job.plan.target.id());
                let schedule = Schedule::spread(&key, job.every, start, this.first_within).led_by(this.gate.clone());
                let this = &this;
                let tx = &tx;
                periodic::every(schedule, &shutdown, (), |()| async move {
                    let run = {
                        let _permit = this.permits.acquire().await.ok();
                        run_once(&job.prober, &job.plan, &job.request, job.size, Utc::now()).await
                    };
                    let t = &job.plan.target;
                    tracing::debug!(target = %t, provider = %t.provider, model = %t.model, region = %t.region,
                        input_tokens = job.size, outcome = %run.sample.outcome.as_str(),
                        ttft_ms = ?run.sample.ttft_ms, "long-prompt probe run");
                    tx.send(run).await.ok()
                })
                .await;
            });
        }
        while loops.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ProviderConfig, ProviderKind};
    use crate::io::probe::{adapter_of, ProbeParams};

    fn workload(tokens: u32) -> WorkloadConfig {
        WorkloadConfig {
            input_tokens: tokens,
            every: Duration::from_secs(900),
            max_tokens: 16,
            timeout: Duration::from_secs(60),
            providers: vec![],
            models: vec![],
        }
    }

    /// Every chat API gets the nonce as the very first text of its system turn, then the
    /// instruction; the filler is the user turn; together about 4 characters a token.
    #[test]
    fn every_api_sends_the_nonce_first_and_about_the_size_asked() {
        let request = request(&workload(2000));
        let nonce = "0123456789ab";
        use crate::config::Endpoint::{Chat, Responses};
        for (kind, endpoint) in [
            (ProviderKind::Openai, Chat),
            (ProviderKind::Azure, Chat),
            (ProviderKind::Anthropic, Chat),
            (ProviderKind::Gemini, Chat),
            (ProviderKind::Openai, Responses),
        ] {
            let url = url::Url::parse("http://127.0.0.1:9/v1").expect("url");
            let mut provider = ProviderConfig::new("p", kind, url);
            provider.endpoint = endpoint;
            provider.api_key = Some(secrecy::SecretString::from("sk-test-workload"));
            let params = ProbeParams {
                provider: &provider,
                model: "m",
                route: None,
                max_tokens: 16,
                reasoning: false,
                nonce,
                canary: Some(&request),
                credential: None,
            };
            let (system, user) = params.prompts();
            assert!(system.starts_with(&format!("{nonce}. {SYSTEM}")), "{kind:?}: {system}");
            assert_eq!(system.len() + user.len(), 2000 * 4, "{kind:?}");
            let body = adapter_of(&provider).request(&params).expect("request").body.expect("a body");
            let text = String::from_utf8(body).expect("utf-8");
            // The system turn (a field of its own in Anthropic's and Gemini's APIs, which their chat
            // templates put first) begins with the nonce; the filler follows in the user turn.
            assert!(text.contains(&format!("{nonce}. You are a latency check")), "{kind:?}");
            assert!(text.contains(&user[..64]), "{kind:?}");
        }
        let plain = CanaryRequest { nonce_first: false, ..request };
        let url = url::Url::parse("http://127.0.0.1:9/v1").expect("url");
        let provider = ProviderConfig::new("p", ProviderKind::Openai, url);
        let params = ProbeParams {
            provider: &provider,
            model: "m",
            route: None,
            max_tokens: 16,
            reasoning: false,
            nonce,
            canary: Some(&plain),
            credential: None,
        };
        assert_eq!(params.prompts().0, SYSTEM, "other canary-path requests keep their turns as written");
    }
}
