//! Drills: what may be dropped from which chain and for how long, checked before a drill is
//! stored, and how an id the operator typed finds the drill it means. Pure: the chains, the
//! targets, the stored drills and the time come in.

use crate::config::chain::ChainConfig;
use crate::vocab::drill::Drill;
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use std::time::Duration;
use thiserror::Error;
use uuid::Uuid;

/// Shortest drill: one probe round or two, so a router sees the drop at all.
pub const MIN_FOR: Duration = Duration::from_secs(60);
/// Longest drill: a day; a longer absence is maintenance, done in the config.
pub const MAX_FOR: Duration = Duration::from_secs(24 * 3600);

/// Why a drill cannot be started or ended.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DrillError {
    /// No `[[chain]]` of that name.
    #[error("unknown chain {chain:?} (chains: {known})")]
    UnknownChain {
        /// As given.
        chain: String,
        /// The configured chain names, comma-separated.
        known: String,
    },
    /// The target is not a member of that chain.
    #[error("{target:?} is not in chain {chain:?} (members: {members})")]
    NotInChain {
        /// The chain.
        chain: String,
        /// As given.
        target: String,
        /// The chain's members as the config spells them, comma-separated.
        members: String,
    },
    /// The duration is outside [`MIN_FOR`, `MAX_FOR`].
    #[error("drill duration {given}: must be between 1m and 24h")]
    Duration {
        /// As given.
        given: String,
    },
    /// No active drill has that id (or id prefix).
    #[error("no active drill {0:?} (vigil drill --list shows them)")]
    NoSuchDrill(String),
    /// An id prefix that fits more than one active drill.
    #[error("{prefix:?} fits {count} active drills: give more of the id")]
    Ambiguous {
        /// As given.
        prefix: String,
        /// How many fit.
        count: usize,
    },
}

/// What an operator asks for: drop `target` from `chain` for `duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrillRequest {
    /// Chain name.
    pub chain: String,
    /// A member as the config spells it, a target id of one, or a provider name.
    pub target: String,
    /// How long.
    pub duration: Duration,
}

/// Checks a request against the chains and this region's targets, and makes the drill to store.
/// A member whose provider has no key here (skipped) may still be drilled: another region
/// sharing the store may probe it.
pub fn start(
    chains: &[ChainConfig],
    targets: &[Target],
    req: &DrillRequest,
    id: Uuid,
    region: &str,
    now: DateTime<Utc>,
) -> Result<Drill, DrillError> {
    let chain = find_chain(chains, &req.chain)?;
    let target = req.target.trim();
    let member = chain.members.iter().any(|m| {
        m.spelled == target || m.provider == target || targets.iter().any(|t| m.matches(t) && t.id() == target)
    });
    if !member && !chain.skipped.iter().any(|s| s.target == target) {
        let mut members: Vec<&str> = chain.members.iter().map(|m| m.spelled.as_str()).collect();
        members.extend(chain.skipped.iter().map(|s| s.target.as_str()));
        return Err(DrillError::NotInChain {
            chain: chain.name.clone(),
            target: target.to_string(),
            members: members.join(", "),
        });
    }
    if req.duration < MIN_FOR || req.duration > MAX_FOR {
        return Err(DrillError::Duration { given: crate::decide::export::format_window(req.duration) });
    }
    let span = chrono::Duration::from_std(req.duration).unwrap_or(chrono::Duration::zero());
    Ok(Drill {
        id,
        chain: chain.name.clone(),
        target: target.to_string(),
        region: region.to_string(),
        started_at: now,
        until: now + span,
        ended_at: None,
    })
}

fn find_chain<'a>(chains: &'a [ChainConfig], name: &str) -> Result<&'a ChainConfig, DrillError> {
    chains.iter().find(|c| c.name == name.trim()).ok_or_else(|| DrillError::UnknownChain {
        chain: name.to_string(),
        known: match chains.is_empty() {
            true => "none configured".to_string(),
            false => chains.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
        },
    })
}

/// The active drill an operator means by `id`: the whole id, or a prefix of it that fits one.
pub fn find<'a>(drills: &'a [Drill], id: &str, now: DateTime<Utc>) -> Result<&'a Drill, DrillError> {
    let id = id.trim().to_ascii_lowercase();
    let fits: Vec<&Drill> =
        drills.iter().filter(|d| d.active_at(now) && !id.is_empty() && d.id.to_string().starts_with(&id)).collect();
    match fits.as_slice() {
        [one] => Ok(one),
        [] => Err(DrillError::NoSuchDrill(id)),
        many => Err(DrillError::Ambiguous { prefix: id, count: many.len() }),
    }
}

/// The active drills of `chain` dropping `target` as given (`--end --chain C --drop T`); an
/// unknown chain is named, no drill found is `NoSuchDrill`.
pub fn matching<'a>(
    chains: &[ChainConfig],
    drills: &'a [Drill],
    chain: &str,
    target: &str,
    now: DateTime<Utc>,
) -> Result<Vec<&'a Drill>, DrillError> {
    let chain = find_chain(chains, chain)?;
    let fits: Vec<&Drill> =
        drills.iter().filter(|d| d.active_at(now) && d.chain == chain.name && d.target == target.trim()).collect();
    match fits.is_empty() {
        true => Err(DrillError::NoSuchDrill(format!("{} in {}", target.trim(), chain.name))),
        false => Ok(fits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::chain::{ChainMember, SkippedMember};
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).single().expect("time")
    }

    fn chains() -> Vec<ChainConfig> {
        let m = |provider: &str, model: &str| ChainMember {
            spelled: format!("{provider}/{model}"),
            provider: provider.into(),
            model: model.into(),
            route: None,
        };
        let mut chain = ChainConfig::new("chat", vec![m("openrouter", "openai/gpt-4o"), m("openai", "gpt-4o")]);
        chain.skipped = vec![SkippedMember { target: "gemini/gemini-2.0-flash".into(), reason: "no key".into() }];
        vec![chain]
    }

    fn targets() -> Vec<Target> {
        let t = |provider: &str, model: &str, route: Option<&str>| {
            Target::new(provider.into(), model.into(), route.map(Into::into), "eu".into())
        };
        vec![t("openrouter", "openai/gpt-4o", Some("Azure")), t("openai", "gpt-4o", None)]
    }

    fn ask(chain: &str, target: &str, secs: u64) -> Result<Drill, DrillError> {
        let req = DrillRequest { chain: chain.into(), target: target.into(), duration: Duration::from_secs(secs) };
        start(&chains(), &targets(), &req, Uuid::nil(), "eu", now())
    }

    #[test]
    fn a_member_a_routed_target_a_provider_or_a_skipped_member_may_be_drilled() {
        let d = ask("chat", "openai/gpt-4o", 600).expect("a member");
        assert_eq!((d.until - d.started_at).num_seconds(), 600);
        assert_eq!((d.chain.as_str(), d.region.as_str()), ("chat", "eu"));
        assert!(ask("chat", "openrouter/openai/gpt-4o@Azure", 600).is_ok());
        assert!(ask("chat", "openrouter", 600).is_ok());
        assert!(ask("chat", "gemini/gemini-2.0-flash", 600).is_ok(), "another region may probe it");
    }

    #[test]
    fn an_unknown_chain_or_target_and_a_duration_out_of_bounds_are_named() {
        assert_eq!(
            ask("nope", "openai", 600).map_err(|e| e.to_string()),
            Err("unknown chain \"nope\" (chains: chat)".into())
        );
        assert_eq!(
            ask("chat", "anthropic/claude", 600).map_err(|e| e.to_string()),
            Err("\"anthropic/claude\" is not in chain \"chat\" (members: openrouter/openai/gpt-4o, openai/gpt-4o, \
                 gemini/gemini-2.0-flash)"
                .into())
        );
        assert_eq!(
            ask("chat", "openai", 59).map_err(|e| e.to_string()),
            Err("drill duration 59s: must be between 1m and 24h".into())
        );
        assert!(matches!(ask("chat", "openai", 86_401), Err(DrillError::Duration { .. })));
        assert!(ask("chat", "openai", 86_400).is_ok() && ask("chat", "openai", 60).is_ok());
        let none = start(
            &[],
            &[],
            &DrillRequest { chain: "x".into(), target: "y".into(), duration: MIN_FOR },
            Uuid::nil(),
            "eu",
            now(),
        );
        assert_eq!(none.map_err(|e| e.to_string()), Err("unknown chain \"x\" (chains: none configured)".into()));
    }

    #[test]
    fn an_id_or_a_unique_prefix_finds_an_active_drill() {
        let mut a = ask("chat", "openai", 600).expect("a");
        a.id = Uuid::parse_str("aaaaaaaa-0000-4000-8000-000000000001").expect("id");
        let mut b = a.clone();
        b.id = Uuid::parse_str("aaaabbbb-0000-4000-8000-000000000002").expect("id");
        let mut ended = a.clone();
        ended.id = Uuid::parse_str("cccccccc-0000-4000-8000-000000000003").expect("id");
        ended.ended_at = Some(now());
        let all = [a.clone(), b.clone(), ended];
        assert_eq!(find(&all, "AAAAAAAA", now()), Ok(&a));
        assert_eq!(find(&all, &b.id.to_string(), now()), Ok(&b));
        assert_eq!(find(&all, "aaaa", now()), Err(DrillError::Ambiguous { prefix: "aaaa".into(), count: 2 }));
        assert!(matches!(find(&all, "cccc", now()), Err(DrillError::NoSuchDrill(_))), "ended already");
        assert_eq!(matching(&chains(), &all, "chat", "openai", now()).map(|v| v.len()), Ok(2));
        assert!(matches!(matching(&chains(), &all, "chat", "anthropic", now()), Err(DrillError::NoSuchDrill(_))));
        assert!(matches!(matching(&chains(), &all, "nope", "openai", now()), Err(DrillError::UnknownChain { .. })));
    }
}
