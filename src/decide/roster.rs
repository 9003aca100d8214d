//! Which replica of a region probes what (docs/DEPLOYMENT.md#replicas). Every instance reads the
//! region's `members` rows and decides the same thing from them: each target belongs to the live
//! member with the highest rendezvous score for it, and the oldest live member leads (it sends
//! the pages and runs the region's once-only work). Ownership is asked at a probe's *scheduled*
//! time, which every member computes alike, so a member's clock skew never double-probes a
//! target or skips it; a joining member names a start (`active_from`) far enough ahead that
//! every member has read its row before its share moves. A member that leaves keeps, in each
//! reader's roster, what was due before the read that found it gone: a probe started late on a
//! busy member never repeats one the leaver made just before it stopped.

use crate::vocab::member::Member;
use chrono::{DateTime, Utc};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The roster as the probe thread, the pipeline and the side runners read it.
pub type SharedRoster = Arc<RwLock<Roster>>;

/// How often members beat, when one is counted dead, and how far ahead a joiner starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Between two heartbeats (and two reads of the roster).
    pub beat: Duration,
    /// A member whose heartbeat is older than this at a read is counted dead.
    pub ttl: Duration,
    /// A member joining a region with live members takes its share this long after its first beat.
    pub join: Duration,
}

impl Timing {
    /// The timing for a probe interval: a beat of a sixth of it, between 200 ms and 5 s; dead
    /// after three missed beats; a joiner waits two beats. A death is noticed within ttl + a beat
    /// (until the next read): two thirds of an interval, less past 30 s (the beat stops at 5 s),
    /// 0.8 s at the shortest interval (1 s, at the 200 ms floor), so always under one. A dead
    /// member's target therefore misses at most one round: its next probe is the one due two
    /// intervals after the last the dead member made.
    pub fn for_interval(interval: Duration) -> Timing {
        let beat = (interval / 6).clamp(Duration::from_millis(200), Duration::from_secs(5));
        Timing { beat, ttl: beat * 3, join: beat * 2 }
    }
}

/// How long (in multiples of `ttl`) a departed member keeps what was due before its departure
/// was read: far beyond any probe start's lag.
const GONE_KEPT: u32 = 4;

/// One read of a region's members, from one member's point of view.
#[derive(Debug, Clone)]
pub struct Roster {
    me: Member,
    /// Every live member at the read, `me` included, by id.
    live: Vec<Member>,
    /// Members live at an earlier read and gone since, each with the read that found it gone:
    /// probes due before that read are still theirs.
    gone: Vec<(Member, DateTime<Utc>)>,
}

impl Roster {
    /// The roster before any read, or without shared storage: this member alone, owning everything.
    pub fn alone(me: Member) -> Roster {
        Roster { live: vec![me.clone()], me, gone: Vec::new() }
    }

    /// The roster read at `read_at`: members whose heartbeat is at most `ttl` old then. This
    /// member always counts (its own row may be unwritten while storage is down, and a member
    /// that cannot reach storage keeps probing its last share: a duplicate beats a blind spot).
    pub fn read(me: Member, rows: Vec<Member>, read_at: DateTime<Utc>, ttl: Duration) -> Roster {
        let ttl = chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        let mut live: Vec<Member> =
            rows.into_iter().filter(|m| m.id != me.id && read_at - m.heartbeat_at <= ttl).collect();
        live.push(me.clone());
        live.sort_by(|a, b| a.id.cmp(&b.id));
        Roster { me, live, gone: Vec::new() }
    }

    /// This read (made at `read_at`) as the one after `previous`: a member live then and absent
    /// now (a clean stop removed its row, or its heartbeat went stale) keeps the probes due before
    /// `read_at`. Without this, a probe this member starts a moment late would repeat one the
    /// leaver made on time just before it stopped; with it, the leaver's share moves at the first
    /// probe due after the read, as a joiner's does at its start. Departures are forgotten
    /// [`GONE_KEPT`] × `ttl` after they were read.
    pub fn after(mut self, previous: &Roster, read_at: DateTime<Utc>, ttl: Duration) -> Roster {
        let keep = chrono::Duration::from_std(ttl * GONE_KEPT).unwrap_or(chrono::Duration::MAX);
        let is_live = |id: &str| self.live.iter().any(|m| m.id == id);
        let departed = previous.live.iter().filter(|m| !is_live(&m.id)).map(|m| (m.clone(), read_at));
        let still_gone = previous.gone.iter().filter(|(m, at)| read_at - *at <= keep && !is_live(&m.id)).cloned();
        self.gone = still_gone.chain(departed).collect();
        self
    }

    /// This member.
    pub fn me(&self) -> &Member {
        &self.me
    }

    /// Live members at the read (this one included).
    pub fn live(&self) -> &[Member] {
        &self.live
    }

    /// Live members other than this one.
    pub fn peers(&self) -> usize {
        self.live.len().saturating_sub(1)
    }

    /// Members taking part at `at`: live, and started their share by then.
    fn active_at(&self, at: DateTime<Utc>) -> impl Iterator<Item = &Member> {
        self.live.iter().filter(move |m| m.active_from <= at)
    }

    /// The member that probes `key` (a target id) at `at`: the highest rendezvous score among
    /// those taking part, and those gone since `at` whose share it was. When one leaves, only its
    /// keys move; when one joins, only the keys it wins move to it.
    pub fn owner(&self, key: &str, at: DateTime<Utc>) -> Option<&Member> {
        let gone = self.gone.iter().filter(|(m, until)| m.active_from <= at && at < *until).map(|(m, _)| m);
        self.active_at(at).chain(gone).max_by_key(|m| (score(&m.id, key), m.id.as_str()))
    }

    /// Whether this member probes `key` at `at`.
    pub fn owns(&self, key: &str, at: DateTime<Utc>) -> bool {
        self.owner(key, at).is_some_and(|m| m.id == self.me.id)
    }

    /// The member that leads at `at`: the oldest taking part (a returning member is the newest,
    /// so leadership does not move back and forth with restarts).
    pub fn leader(&self, at: DateTime<Utc>) -> Option<&Member> {
        self.active_at(at).min_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)))
    }

    /// Whether this member leads at `at`.
    pub fn leads(&self, at: DateTime<Utc>) -> bool {
        self.leader(at).is_some_and(|m| m.id == self.me.id)
    }
}

/// Leave for the region's once-only work (the canary, golden checks and capability probes,
/// long-prompt probes, credit readings, store upkeep, the weekly summary): always without
/// replicas; with them, only on the member that leads when a run comes due.
#[derive(Debug, Clone, Default)]
pub struct LeaderGate(Option<SharedRoster>);

impl LeaderGate {
    /// The gate of a member reading `roster`.
    pub fn of(roster: SharedRoster) -> Self {
        LeaderGate(Some(roster))
    }

    /// Whether a run due at `now` goes ahead here.
    pub fn open(&self, now: DateTime<Utc>) -> bool {
        self.0.as_ref().is_none_or(|r| r.read().map_or(true, |r| r.leads(now)))
    }
}

/// A rendezvous score: FNV-1a over member and key, then the splitmix64 finaliser so that
/// near-identical ids spread as evenly as different ones. Fixed across builds and versions,
/// so every member computes the same.
fn score(member: &str, key: &str) -> u64 {
    let fnv = |h: u64, bytes: &[u8]| bytes.iter().fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    let h = fnv(fnv(fnv(0xcbf2_9ce4_8422_2325, member.as_bytes()), b"\x1f"), key.as_bytes());
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_780_000_000 + secs, 0).unwrap_or_default()
    }

    fn member(id: &str, started: i64, beat: i64, active: i64) -> Member {
        Member {
            region: "eu".into(),
            id: id.into(),
            host: "h".into(),
            started_at: t(started),
            heartbeat_at: t(beat),
            active_from: t(active),
        }
    }

    const TTL: Duration = Duration::from_secs(15);

    fn keys() -> Vec<String> {
        (0..3000).map(|i| format!("openrouter/model-{i}@Route")).collect()
    }

    #[test]
    fn alone_a_member_owns_every_target_and_leads() {
        let r = Roster::alone(member("a", 0, 0, 0));
        assert!(keys().iter().all(|k| r.owns(k, t(1))));
        assert!(r.leads(t(1)));
        assert_eq!(r.peers(), 0);
    }

    #[test]
    fn every_target_has_exactly_one_owner_and_the_shares_are_even() {
        let rows = vec![member("a", 0, 100, 0), member("b", 5, 100, 0), member("c", 9, 100, 0)];
        let views: Vec<Roster> =
            ["a", "b", "c"].iter().map(|me| Roster::read(member(me, 0, 100, 0), rows.clone(), t(101), TTL)).collect();
        let mut share = [0usize; 3];
        for k in keys() {
            let owners: Vec<usize> = (0..3).filter(|i| views[*i].owns(&k, t(102))).collect();
            assert_eq!(owners.len(), 1, "{k}: {owners:?}");
            share[owners[0]] += 1;
        }
        assert!(share.iter().all(|s| (800..1200).contains(s)), "about a third each: {share:?}");
        assert!(views.iter().all(|v| v.leader(t(102)).map(|m| m.id.as_str()) == Some("a")), "the oldest leads");
    }

    #[test]
    fn a_joiner_takes_only_the_targets_it_wins_and_only_from_its_start() {
        let a = member("a", 0, 100, 0);
        let joiner = member("n", 99, 100, 110);
        let before = Roster::read(a.clone(), vec![a.clone()], t(100), TTL);
        let after = Roster::read(a.clone(), vec![a.clone(), joiner.clone()], t(100), TTL);
        let seen_by_joiner = Roster::read(joiner.clone(), vec![a.clone(), joiner.clone()], t(100), TTL);
        let keys = keys();
        assert!(keys.iter().all(|k| after.owns(k, t(109)) && !seen_by_joiner.owns(k, t(109))), "not before its start");
        let moved: Vec<&String> = keys.iter().filter(|k| !after.owns(k, t(110))).collect();
        assert!(moved.len() > 1000 && moved.len() < 2000, "about half move: {}", moved.len());
        assert!(
            moved.iter().all(|k| seen_by_joiner.owns(k, t(110))),
            "what a stops probing, n starts at the same probe"
        );
        assert!(keys.iter().all(|k| before.owns(k, t(110))));
        assert!(after.leads(t(110)) && !seen_by_joiner.leads(t(110)), "a returning member does not take the lead");
    }

    #[test]
    fn a_dead_member_s_targets_go_to_the_others_and_only_its_targets_move() {
        let rows = vec![member("a", 0, 100, 0), member("b", 0, 100, 0), member("c", 0, 84, 0)];
        let fresh = Roster::read(member("a", 0, 100, 0), rows.clone(), t(99), TTL);
        let later = Roster::read(member("a", 0, 100, 0), rows, t(100), TTL);
        assert_eq!(fresh.peers(), 2);
        assert_eq!(later.peers(), 1, "c's heartbeat is 16 s old: dead");
        for k in keys() {
            let was = fresh.owner(&k, t(100)).map(|m| m.id.clone());
            let now = later.owner(&k, t(100)).map(|m| m.id.clone());
            if was.as_deref() != Some("c") {
                assert_eq!(was, now, "{k} did not belong to c, so it stays");
            }
        }
    }

    #[test]
    fn a_leaver_keeps_what_was_due_before_its_departure_was_read() {
        let (a, b, c) = (member("a", 0, 100, 0), member("b", 5, 100, 0), member("c", 9, 100, 0));
        let first = Roster::read(a.clone(), vec![a.clone(), b.clone(), c.clone()], t(100), TTL);
        // b stopped cleanly: its row is gone at a's next read, at 105.
        let second = Roster::read(a.clone(), vec![a.clone(), c.clone()], t(105), TTL).after(&first, t(105), TTL);
        let without_b = Roster::read(a.clone(), vec![a.clone(), c.clone()], t(105), TTL);
        let b_keys: Vec<String> =
            keys().into_iter().filter(|k| first.owner(k, t(104)).is_some_and(|m| m.id == "b")).collect();
        assert!(b_keys.len() > 500, "b had a share: {}", b_keys.len());
        for k in &b_keys {
            assert!(!second.owns(k, t(104)), "{k}: due before the read, b's probe (made or not), never a's repeat");
            assert_eq!(second.owner(k, t(105)).map(|m| &m.id), without_b.owner(k, t(105)).map(|m| &m.id), "{k}");
        }
        assert!(keys().iter().any(|k| second.owns(k, t(105)) && !first.owns(k, t(105))), "a takes some of b's share");
        assert_eq!(second.peers(), 1, "b is not live");
        assert!(second.leads(t(105)));

        // Remembered across later reads for a while, then forgotten.
        let third = Roster::read(a.clone(), vec![a.clone(), c.clone()], t(110), TTL).after(&second, t(110), TTL);
        assert!(b_keys.iter().all(|k| !third.owns(k, t(104)) && third.owner(k, t(104)).is_some_and(|m| m.id == "b")));
        let late = t(105 + 4 * 15 + 1);
        let fourth = Roster::read(a.clone(), vec![a.clone(), c.clone()], late, TTL).after(&third, late, TTL);
        assert!(b_keys.iter().all(|k| fourth.owner(k, t(104)).is_some_and(|m| m.id != "b")));

        // A member found live again is not gone.
        let back = member("b", 5, 106, 0);
        let fifth = Roster::read(a.clone(), vec![a.clone(), back, c.clone()], t(107), TTL).after(&second, t(107), TTL);
        assert_eq!(fifth.gone.len(), 0);
        assert!(b_keys.iter().all(|k| fifth.owner(k, t(107)).is_some_and(|m| m.id == "b")));
    }

    #[test]
    fn a_member_counts_itself_live_whatever_its_stored_heartbeat_says() {
        let me = member("a", 0, 0, 0);
        let r = Roster::read(me.clone(), vec![member("a", 0, 0, 0), member("b", 0, 0, 0)], t(1000), TTL);
        assert_eq!(r.peers(), 0, "b is stale");
        assert!(keys().iter().all(|k| r.owns(k, t(1000))), "storage unreachable: it keeps probing, alone");
    }

    #[test]
    fn only_the_leader_s_gate_opens() {
        let rows = vec![member("a", 0, 100, 0), member("b", 5, 100, 0)];
        let gate =
            |me| LeaderGate::of(Arc::new(RwLock::new(Roster::read(member(me, 0, 100, 0), rows.clone(), t(100), TTL))));
        assert!(gate("a").open(t(100)) && !gate("b").open(t(100)));
        assert!(LeaderGate::default().open(t(100)), "without replicas it is always open");
    }

    #[test]
    fn timing_follows_the_interval_within_its_bounds() {
        let t60 = Timing::for_interval(Duration::from_secs(60));
        assert_eq!(
            (t60.beat, t60.ttl, t60.join),
            (Duration::from_secs(5), Duration::from_secs(15), Duration::from_secs(10))
        );
        let t2 = Timing::for_interval(Duration::from_secs(2));
        assert_eq!(t2.beat, Duration::from_secs(2) / 6);
        assert_eq!(Timing::for_interval(Duration::from_millis(500)).beat, Duration::from_millis(200));
    }
}
