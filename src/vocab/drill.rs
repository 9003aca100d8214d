//! A failover drill: one target dropped from one chain's export for a window, stored so every
//! region sharing the store honours it (`vigil drill`, `POST /v1/drills`).

use crate::vocab::target::Target;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One drill as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drill {
    /// Its id (`vigil drill --end ID`, `DELETE /v1/drills/{id}`).
    pub id: Uuid,
    /// The chain whose export drops the target.
    pub chain: String,
    /// What is dropped, as given: a chain member as the config spells it, a target id, or a
    /// provider name (every member of that provider).
    pub target: String,
    /// The region of the instance that started it (who asked, for the list).
    pub region: String,
    /// When it was started.
    pub started_at: DateTime<Utc>,
    /// When it runs out on its own.
    pub until: DateTime<Utc>,
    /// When it was ended early (`--end`), if it was.
    pub ended_at: Option<DateTime<Utc>>,
}

impl Drill {
    /// Whether it drops its target at `now`: not ended early and not yet run out. The start
    /// is not compared, so a region whose clock is a little behind the starter's honours it at once.
    pub fn active_at(&self, now: DateTime<Utc>) -> bool {
        self.ended_at.is_none() && now < self.until
    }

    /// Whether it names this chain member (`spelled` as the config writes it) or this target of it.
    pub fn names(&self, chain: &str, spelled: &str, target: &Target) -> bool {
        self.chain == chain && (self.target == spelled || self.target == target.id() || self.target == target.provider)
    }

    /// When it stopped (or will stop) dropping its target.
    pub fn ends_at(&self) -> DateTime<Utc> {
        self.ended_at.map_or(self.until, |e| e.min(self.until))
    }

    /// The reason a chain entry carries while it is dropped: `drill (until 2026-12-03T12:40:00Z)`.
    pub fn reason(&self) -> String {
        format!("drill (until {})", self.until.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(min: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).single().expect("time") + chrono::Duration::minutes(min)
    }

    fn drill(target: &str) -> Drill {
        Drill {
            id: Uuid::nil(),
            chain: "chat".into(),
            target: target.into(),
            region: "eu".into(),
            started_at: at(0),
            until: at(10),
            ended_at: None,
        }
    }

    #[test]
    fn a_drill_is_active_until_it_runs_out_or_is_ended() {
        let mut d = drill("openai");
        assert!(d.active_at(at(-1)), "a starter's clock ahead of ours does not delay it");
        assert!(d.active_at(at(9)));
        assert!(!d.active_at(at(10)), "runs out at `until`");
        d.ended_at = Some(at(3));
        assert!(!d.active_at(at(4)));
        assert_eq!(d.ends_at(), at(3));
        assert_eq!(d.reason(), "drill (until 2026-12-03T12:10:00Z)");
    }

    #[test]
    fn a_drill_names_a_member_a_target_id_or_a_provider_of_its_chain_only() {
        let t = Target::new("openrouter".into(), "openai/gpt-4o".into(), Some("Azure".into()), "eu".into());
        assert!(drill("openrouter/openai/gpt-4o").names("chat", "openrouter/openai/gpt-4o", &t));
        assert!(drill("openrouter/openai/gpt-4o@Azure").names("chat", "openrouter/openai/gpt-4o", &t));
        assert!(drill("openrouter").names("chat", "openrouter/openai/gpt-4o", &t));
        assert!(!drill("openrouter/openai/gpt-4o@OpenAI").names("chat", "openrouter/openai/gpt-4o", &t));
        assert!(!drill("openrouter").names("other", "openrouter/openai/gpt-4o", &t));
    }
}
