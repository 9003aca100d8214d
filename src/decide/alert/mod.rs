//! Alerting: a pure rule engine ([`rules`]) turns samples, breaker transitions and credit
//! readings into grouped [`Notification`]s; they are written to a durable outbox in storage
//! and a delivery worker ([`outbox`]) sends them through the [`notifier::Notifier`]s
//! ([`slack`], [`email`], [`pagerduty`], [`webhook`], [`alertmanager`], built by [`channels`]) with backoff until
//! delivered or abandoned. Facets of one target (or provider) form one [`incident`]; regions
//! sharing storage page an incident once (the lease in [`outbox`]); [`flap`] detects flapping,
//! [`scope`] says regional or global, [`backtest`] replays stored samples through the same engine.

pub mod backtest;
pub mod capability;
pub mod chain_head;
pub mod deprecation;
pub(crate) mod flap;
pub mod golden;
pub(crate) mod incident;
pub(crate) mod provider_incident;
pub mod ratelimit;
pub mod rules;
pub(crate) mod scope;
pub mod settings;

use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// What an alert is about; the names are the SPEC's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// k of the last n ok probes' TTFB or TTFT above `alerts.latency_factor` × baseline P95.
    LatencyDegraded,
    /// Consecutive failed probes.
    Errors,
    /// The circuit breaker is open (or half-open).
    BreakerOpen,
    /// The circuit breaker closed again (no longer sent: the breaker facet resolves with its incident).
    BreakerClosed,
    /// Balance under the minimum, projected to run out soon, or a 402 from a probe.
    CreditLow,
    /// The model is gone or not served.
    ModelUnavailable,
    /// The key was refused.
    AuthError,
    /// Replies stopped obeying the probe's system prompt.
    AdherenceFailed,
    /// Today's probe spend is over `probe.daily_budget_usd`.
    ProbeBudgetExceeded,
    /// Most targets fail at once from this instance: its own network is the problem.
    RegionUnhealthy,
    /// The target changes state too often; changes are not paged while it flaps.
    Flapping,
    /// The provider announced the model's retirement (Deprecation/Sunset headers, OpenRouter
    /// `expiration_date`, or no longer listed by its models endpoint); see [`deprecation`].
    ModelDeprecated,
    /// The provider's own status page has an open incident on a component you depend on
    /// (`alerts.provider_incident`, off by default).
    ProviderIncident,
    /// The canary's answers or the provider's reported model changed against the target's own
    /// history (`[probe.canary]`; see [`crate::decide::canary::detect`]).
    ModelChanged,
    /// A target's level stayed shifted for `baseline.adopt_after` (or `vigil baselines adopt`
    /// was asked) and its baseline adopted the new level; the notice says both levels.
    BaselineShift,
    /// A chain's worst-case time to a first token (every member failing over in turn) is over
    /// its `ttft_slo`, or to a complete answer over its `total_slo`; the summary names the
    /// member that breaks it.
    ChainSloAtRisk,
    /// A chain's head (the target a router tries first) moved; the notice says to what and at
    /// what price against the one before (`alerts.chain_head_changed`, off by default).
    ChainHeadChanged,
    /// A golden check of the target (`[[provider.check]]`) broke its assertion or TTFT budget;
    /// the summary names each failing check with what was asked and what came back.
    CheckFailed,
    /// A capability probe (`[probe.capabilities]`) says the target no longer does what it did
    /// (a function call, JSON mode, a schema); the summary says what was asked and what came back.
    CapabilityLost,
    /// A target's rate-limit headroom (remaining / limit of its tighter allowance, from the
    /// probe's response headers) is under `ratelimit.low_fraction`; see [`ratelimit`].
    #[serde(rename = "ratelimit_low")]
    RateLimitLow,
}

impl AlertKind {
    /// Every kind, in SPEC order.
    pub const ALL: [AlertKind; 20] = [
        AlertKind::LatencyDegraded,
        AlertKind::Errors,
        AlertKind::BreakerOpen,
        AlertKind::BreakerClosed,
        AlertKind::CreditLow,
        AlertKind::ModelUnavailable,
        AlertKind::AuthError,
        AlertKind::AdherenceFailed,
        AlertKind::ProbeBudgetExceeded,
        AlertKind::RegionUnhealthy,
        AlertKind::Flapping,
        AlertKind::ModelDeprecated,
        AlertKind::ProviderIncident,
        AlertKind::ModelChanged,
        AlertKind::BaselineShift,
        AlertKind::ChainSloAtRisk,
        AlertKind::ChainHeadChanged,
        AlertKind::CheckFailed,
        AlertKind::CapabilityLost,
        AlertKind::RateLimitLow,
    ];

    /// The SPEC name (`latency_degraded`).
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::LatencyDegraded => "latency_degraded",
            AlertKind::Errors => "errors",
            AlertKind::BreakerOpen => "breaker_open",
            AlertKind::BreakerClosed => "breaker_closed",
            AlertKind::CreditLow => "credit_low",
            AlertKind::ModelUnavailable => "model_unavailable",
            AlertKind::AuthError => "auth_error",
            AlertKind::AdherenceFailed => "adherence_failed",
            AlertKind::ProbeBudgetExceeded => "probe_budget_exceeded",
            AlertKind::RegionUnhealthy => "region_unhealthy",
            AlertKind::Flapping => "flapping",
            AlertKind::ModelDeprecated => "model_deprecated",
            AlertKind::ProviderIncident => "provider_incident",
            AlertKind::ModelChanged => "model_changed",
            AlertKind::BaselineShift => "baseline_shift",
            AlertKind::ChainSloAtRisk => "chain_slo_at_risk",
            AlertKind::ChainHeadChanged => "chain_head_changed",
            AlertKind::CheckFailed => "check_failed",
            AlertKind::CapabilityLost => "capability_lost",
            AlertKind::RateLimitLow => "ratelimit_low",
        }
    }

    /// Severity used unless a rule has a reason to raise it.
    pub fn default_severity(self) -> Severity {
        match self {
            AlertKind::RegionUnhealthy | AlertKind::AuthError => Severity::Critical,
            AlertKind::Errors | AlertKind::BreakerOpen | AlertKind::ModelUnavailable => Severity::Error,
            AlertKind::LatencyDegraded
            | AlertKind::CreditLow
            | AlertKind::AdherenceFailed
            | AlertKind::ProbeBudgetExceeded
            | AlertKind::Flapping
            | AlertKind::ModelDeprecated
            | AlertKind::ProviderIncident
            | AlertKind::ModelChanged
            | AlertKind::ChainSloAtRisk
            | AlertKind::CheckFailed
            | AlertKind::CapabilityLost => Severity::Warning,
            AlertKind::RateLimitLow => Severity::Warning,
            AlertKind::BreakerClosed | AlertKind::BaselineShift | AlertKind::ChainHeadChanged => Severity::Info,
        }
    }
}

impl AlertKind {
    /// The Alertmanager `alertname` of this kind's alerts (`vigil_errors`); lower-cased, it is
    /// also the kind's runbook anchor in docs/OPERATIONS.md.
    pub fn alertname(self) -> String {
        format!("vigil_{}", self.as_str())
    }

    /// What the kind means and what it asks of the reader, in one or two sentences: the
    /// `description` of an Alertmanager alert (the summary says the figures).
    pub fn meaning(self) -> &'static str {
        match self {
            AlertKind::LatencyDegraded => "Probes of this target answer slower than its own baseline: TTFB or TTFT above alerts.latency_factor × its rolling P95 in k of the last n ok probes.",
            AlertKind::Errors => "Consecutive probes of this target failed (the summary names the outcome); its breaker opens if it goes on.",
            AlertKind::BreakerOpen => "The target's circuit breaker is open or half-open: routers reading /v1/thresholds skip it until a trial probe succeeds.",
            AlertKind::BreakerClosed => "The target's circuit breaker closed again.",
            AlertKind::CreditLow => "The provider account's credit is under balance.min_usd, projected to run out within balance.warn_hours, or a probe got 402: top it up before production traffic gets 402s too.",
            AlertKind::ModelUnavailable => "The provider says the model is gone or not served (404/410): move to another model or route.",
            AlertKind::AuthError => "The provider refused the key (401/403): production traffic with the same key fails too; rotate or fix it.",
            AlertKind::AdherenceFailed => "Replies stopped obeying the probe's system prompt: the model behind the name may have changed; routers rank the target last.",
            AlertKind::ProbeBudgetExceeded => "Today's probe spend is over probe.daily_budget_usd even with the adaptive plan's longest intervals.",
            AlertKind::RegionUnhealthy => "Most targets fail at once from this instance: its own network (DNS resolver, egress, NAT, proxy) is the likely cause, not the providers.",
            AlertKind::Flapping => "The target changes state too often; its changes are not paged until it calms down.",
            AlertKind::ModelDeprecated => "The provider announced the model's retirement (the summary says the date and the source): plan the move before that date.",
            AlertKind::ProviderIncident => "The provider's own status page reports an open incident on a component you depend on.",
            AlertKind::ModelChanged => "The canary's answers or the model the provider reports changed against this target's own history.",
            AlertKind::BaselineShift => "The target stayed at a new latency level for baseline.adopt_after and its baseline adopted it; the summary says both levels.",
            AlertKind::ChainSloAtRisk => "If every member of this failover chain failed over in turn, the first token would come later than the chain's ttft_slo (or the complete answer later than its total_slo): the summary names the member that breaks it; tighten deadlines, shorten the chain or fix the slow member.",
            AlertKind::CheckFailed => "A golden check of this target ([[provider.check]]) broke its assertion or TTFT budget: the summary says what was asked and what came back; an application that relies on that answer breaks while the health checks stay green.",
            AlertKind::CapabilityLost => "A capability probe says the target no longer does what it did (call a declared function, answer in JSON mode, follow a JSON Schema): requests that need it fail while the health checks stay green; chains that require it demote the target.",
            AlertKind::ChainHeadChanged => "The target a router tries first in this failover chain changed: the summary says to which and its price against the one before (a pricier head spends more at the same traffic).",
            AlertKind::RateLimitLow => "Little is left of this target's rate limit (the summary says which allowance, how much and when it resets): production traffic sharing the key will get 429s soon; spread the load, raise the limit or route elsewhere.",
        }
    }
}

impl fmt::Display for AlertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How loud an alert is; names match PagerDuty's four severities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Someone must act now.
    Critical,
    /// Something is broken.
    Error,
    /// Something drifts.
    Warning,
    /// For the record.
    Info,
}

impl Severity {
    /// Every severity, loudest first.
    pub const ALL: [Severity; 4] = [Severity::Critical, Severity::Error, Severity::Warning, Severity::Info];

    /// Lower-case name (`critical`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// Whether the problem is seen only from this region or from others too (read from shared storage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "scope")]
pub enum Scope {
    /// Only this region sees it (or no other region probes the target).
    Regional,
    /// `affected` of `regions` regions probing the target see it.
    Global {
        /// Regions where the target is degraded, this one included.
        affected: u32,
        /// Regions probing the target, this one included.
        regions: u32,
    },
}

impl Scope {
    /// Human detail: `regional` or `global (in 3 of 4 regions)`.
    pub fn describe(&self) -> String {
        match self {
            Scope::Regional => "regional".into(),
            Scope::Global { affected, regions } => format!("global (in {affected} of {regions} regions)"),
        }
    }
}

/// Firing or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    /// The rule holds.
    Firing,
    /// The rule stopped holding for long enough.
    Resolved,
}

impl AlertStatus {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// One alert as channels render it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// What it is about.
    pub kind: AlertKind,
    /// How loud.
    pub severity: Severity,
    /// Firing or resolved.
    pub status: AlertStatus,
    /// Region of this instance.
    pub region: String,
    /// Provider name; empty for instance-wide alerts (region_unhealthy, probe_budget_exceeded).
    pub provider: String,
    /// Target id (`openrouter/model@route`) for per-target alerts.
    pub target: Option<String>,
    /// Model, when per target.
    pub model: Option<String>,
    /// Pinned route, when any.
    pub route: Option<String>,
    /// The `[[chain]]` it is about (`chain_slo_at_risk`, `chain_head_changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// Regional or global.
    pub scope: Scope,
    /// One line for humans.
    pub summary: String,
    /// Current figure (ms for latency, USD for credit and budget, count for errors).
    pub current: Option<f64>,
    /// What it is compared with (threshold or baseline).
    pub baseline: Option<f64>,
    /// When the rule started holding.
    pub since: DateTime<Utc>,
    /// Stable per (region, provider, model, route, kind): PagerDuty `dedup_key`.
    pub dedup_key: String,
}

impl Alert {
    /// A firing alert with the kind's default severity, regional scope and its dedup key.
    pub fn new(kind: AlertKind, region: &str, provider: &str, target: Option<&Target>, summary: String) -> Self {
        let (model, route) = match target {
            Some(t) => (Some(t.model.to_string()).filter(|m| !m.is_empty()), t.route.as_ref().map(|r| r.to_string())),
            None => (None, None),
        };
        Alert {
            kind,
            severity: kind.default_severity(),
            status: AlertStatus::Firing,
            region: region.to_string(),
            provider: provider.to_string(),
            target: target.map(Target::id),
            dedup_key: key_of(kind, region, provider, target),
            model,
            route,
            chain: None,
            scope: Scope::Regional,
            summary,
            current: None,
            baseline: None,
            since: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    /// An instance-wide alert about the chain `name`: its own dedup key (so each chain is its
    /// own incident) and subject (`chain NAME`).
    pub fn for_chain(kind: AlertKind, region: &str, name: &str, summary: String) -> Self {
        let mut a = Alert::new(kind, region, "", None, summary);
        a.dedup_key = dedup_key(region, "", Some(&format!("chain:{name}")), None, kind);
        a.chain = Some(name.to_string());
        a
    }

    /// What the alert is about, for titles: target id, else the chain, else provider, else the region.
    pub fn subject(&self) -> String {
        if let Some(chain) = self.chain.as_ref().filter(|_| self.target.is_none()) {
            return format!("chain {chain}");
        }
        self.target.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| {
            if self.provider.is_empty() {
                format!("region {}", self.region)
            } else {
                self.provider.clone()
            }
        })
    }
}

/// The dedup key [`Alert::new`] gives an alert of `kind` about `provider` (and `target`, if any).
pub fn key_of(kind: AlertKind, region: &str, provider: &str, target: Option<&Target>) -> String {
    let model = target.map(|t| t.model.as_str()).filter(|m| !m.is_empty());
    dedup_key(region, provider, model, target.and_then(|t| t.route.as_deref()), kind)
}

/// Stable incident key: `vigil:region:provider:model:route:kind`, hashed when longer than PagerDuty's 255.
pub fn dedup_key(region: &str, provider: &str, model: Option<&str>, route: Option<&str>, kind: AlertKind) -> String {
    let key = format!("vigil:{region}:{provider}:{}:{}:{}", model.unwrap_or(""), route.unwrap_or(""), kind.as_str());
    if key.len() <= 255 {
        key
    } else {
        format!("vigil:{}", hex::encode(Sha256::digest(key.as_bytes())))
    }
}

/// In how many regions a shared incident is seen, as the owning region counted it when sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Regions where it is firing.
    pub affected: u32,
    /// Regions probing the target.
    pub regions: u32,
}

/// One message to send on every channel: one incident (every kind wrong with one target, a
/// whole provider, or one instance-wide kind) opening, growing, still firing or resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// Stable id of this message (derives the outbox item ids).
    pub key: String,
    /// Region of this instance.
    pub region: String,
    /// Provider the alerts are about; empty for instance-wide alerts.
    pub provider: String,
    /// Incident key, the same on every message of the incident and in every region (PagerDuty `dedup_key`).
    #[serde(default)]
    pub incident: String,
    /// What the incident is about: target id, provider, or `region R`.
    #[serde(default)]
    pub subject: String,
    /// Regions sharing storage share this incident (one owner pages).
    #[serde(default)]
    pub shared: bool,
    /// When the incident opened.
    #[serde(default)]
    pub opened_at: Option<DateTime<Utc>>,
    /// Firing or resolved (a notification never mixes the two).
    pub status: AlertStatus,
    /// A re-notification of alerts still firing.
    pub reminder: bool,
    /// An update of an open incident (a new kind joined it).
    #[serde(default)]
    pub update: bool,
    /// `vigil alert-test` message, not a real alert.
    pub test: bool,
    /// When the engine produced it.
    pub created_at: DateTime<Utc>,
    /// Link to the status page, when configured.
    pub status_url: Option<String>,
    /// In how many regions the incident is seen (set by the owning region's delivery worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Seen>,
    /// The incident's facets, most severe first.
    pub alerts: Vec<Alert>,
}

impl Notification {
    /// A firing message about `alerts`, created `at`: not yet tied to an incident, not shared, not a
    /// reminder, update or test, with no status link; callers set what differs by struct update.
    pub fn firing(key: impl Into<String>, region: &str, provider: &str, alerts: Vec<Alert>, at: DateTime<Utc>) -> Self {
        Notification {
            key: key.into(),
            region: region.to_string(),
            provider: provider.to_string(),
            incident: String::new(),
            subject: String::new(),
            shared: false,
            opened_at: None,
            status: AlertStatus::Firing,
            reminder: false,
            update: false,
            test: false,
            created_at: at,
            status_url: None,
            seen: None,
            alerts,
        }
    }

    /// Most severe severity among the alerts.
    pub fn severity(&self) -> Severity {
        self.alerts.iter().map(|a| a.severity).min().unwrap_or(Severity::Info)
    }

    /// Kind of the most severe alert (the outbox item's `kind`).
    pub fn primary_kind(&self) -> AlertKind {
        self.alerts.first().map(|a| a.kind).unwrap_or(AlertKind::Errors)
    }

    /// One-line title: `[FIRING] openrouter/m: errors, breaker_open (eu-west-1; in 3 of 3 regions)`.
    pub fn title(&self) -> String {
        let tag = match (self.test, self.status, self.reminder, self.update) {
            (true, _, _, _) => "TEST",
            (false, AlertStatus::Resolved, _, _) => "RESOLVED",
            (false, AlertStatus::Firing, _, true) => "UPDATE",
            (false, AlertStatus::Firing, true, false) => "STILL FIRING",
            (false, AlertStatus::Firing, false, false) => "FIRING",
        };
        let mut kinds: Vec<&str> = self.alerts.iter().map(|a| a.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let about = if !self.subject.is_empty() {
            self.subject.clone()
        } else if self.provider.is_empty() {
            "vigil".to_string()
        } else {
            self.provider.clone()
        };
        let seen = self.seen.map(|s| format!("; in {} of {} regions", s.affected, s.regions)).unwrap_or_default();
        format!("[{tag}] {about}: {} ({}{seen})", kinds.join(", "), self.region)
    }

    /// The incident key, or the first alert's dedup key for messages made before incidents existed.
    pub fn incident_key(&self) -> String {
        if !self.incident.is_empty() {
            self.incident.clone()
        } else {
            self.alerts.first().map(|a| a.dedup_key.clone()).unwrap_or_else(|| self.key.clone())
        }
    }

    /// Plain-text body: the title, then one line per alert.
    pub fn text(&self) -> String {
        let mut out = self.title();
        out.push('\n');
        for a in &self.alerts {
            out.push_str(&format!("\n- {}", alert_line(a)));
        }
        if let Some(url) = &self.status_url {
            out.push_str(&format!("\n\nStatus: {url}"));
        }
        out
    }
}

/// The targets flapping now, published by the alert stage for readers (status page,
/// `/v1/targets`, the router export): cheap to clone, read with [`FlappingSet::is_flapping`].
#[derive(Debug, Clone, Default)]
pub struct FlappingSet(std::sync::Arc<std::sync::RwLock<std::collections::BTreeSet<Target>>>);

impl FlappingSet {
    /// True when `target` is flapping.
    pub fn is_flapping(&self, target: &Target) -> bool {
        self.0.read().map(|s| s.contains(target)).unwrap_or(false)
    }

    /// The flapping targets.
    pub fn targets(&self) -> std::collections::BTreeSet<Target> {
        self.0.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// Replaces the set.
    pub fn set(&self, targets: impl IntoIterator<Item = Target>) {
        // A poisoned lock still holds a valid set; replace it anyway.
        let mut g = self.0.write().unwrap_or_else(|e| e.into_inner());
        *g = targets.into_iter().collect();
    }
}

/// One alert as a line: severity, subject, summary, scope, since.
pub fn alert_line(a: &Alert) -> String {
    format!(
        "{} {} {}: {} [{}; since {}]",
        a.severity.as_str().to_uppercase(),
        a.kind.as_str(),
        a.subject(),
        a.summary,
        a.scope.describe(),
        a.since.format("%Y-%m-%d %H:%M:%SZ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_spelled_the_same_in_json_as_everywhere_else() {
        for kind in AlertKind::ALL {
            assert_eq!(serde_json::to_value(kind).expect("json"), kind.as_str(), "{kind:?}");
            assert_eq!(serde_json::from_value::<AlertKind>(kind.as_str().into()).expect("read back"), kind);
        }
    }

    #[test]
    fn dedup_key_is_stable_and_names_every_part() {
        let t = Target::new("openrouter".into(), "m".into(), Some("DeepInfra".into()), "eu".into());
        let a = Alert::new(AlertKind::Errors, "eu", "openrouter", Some(&t), "x".into());
        let b = Alert::new(AlertKind::Errors, "eu", "openrouter", Some(&t), "y".into());
        assert_eq!(a.dedup_key, b.dedup_key);
        assert_eq!(a.dedup_key, "vigil:eu:openrouter:m:DeepInfra:errors");
        let long = dedup_key("eu", &"p".repeat(300), None, None, AlertKind::Errors);
        assert!(long.len() <= 255 && long.starts_with("vigil:"));
    }

    #[test]
    fn global_scope_says_how_many_regions() {
        assert_eq!(Scope::Global { affected: 3, regions: 4 }.describe(), "global (in 3 of 4 regions)");
    }
}
