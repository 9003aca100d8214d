//! One contract suite, run against a fresh SQLite file and a fresh PostgreSQL database per test.

use crate::support::store as store_support;

use chrono::{Duration, DurationRound, Utc};
use store_support::{bare_sample, full_sample, micros, target, Fixture, Kind};
use vigil::io::store::{Prune, SampleQuery, Store, StoreError};
use vigil::vocab::breaker::State;
use vigil::vocab::chain_head::{ChainHead, PerMtok};
use vigil::vocab::health::{Health, HealthState};
use vigil::vocab::records::{
    BalanceReading, BreakerRecord, BreakerTransition, OutboxItem, Rollup, Sighting, StateJson, TargetStatus,
};
use vigil::vocab::sample::Outcome;

store_support::on_both_stores!(
    every_sample_field_round_trips,
    rate_limit_headroom_round_trips_whole_in_part_or_absent_for_samples_and_canary_runs,
    replaying_a_batch_never_duplicates,
    one_regions_queries_never_see_another_region,
    rollups_upsert_and_read_back,
    a_read_hours_rows_share_their_targets_and_metrics_names,
    upserts_larger_than_one_statement_keep_the_last_write_per_key,
    breaker_state_and_transitions_persist,
    outbox_items_move_through_their_lifecycle,
    alert_state_is_one_document_per_region,
    an_alert_state_an_earlier_build_stored_as_text_is_read_and_the_next_write_stores_gzip,
    an_evaluations_pages_and_state_are_stored_together_or_not_at_all,
    balances_read_back_oldest_first,
    a_database_ahead_of_the_binary_is_refused,
    retention_removes_only_samples_older_than_the_cutoff,
    transitions_and_outbox_items_read_back_by_time_window,
    an_id_repeated_within_one_batch_is_stored_once,
    a_batch_across_midnight_lands_on_both_days_and_replays_exactly,
    awkward_text_and_null_heavy_rows_round_trip,
    target_status_is_one_row_per_region_and_target_read_by_age,
    an_incident_lease_is_claimed_once_renewed_by_its_owner_and_taken_over_when_expired,
    sightings_are_one_row_per_region_and_close_with_the_incident,
    drills_are_read_by_every_region_while_they_run_and_end_once,
    members_beat_read_back_by_region_leave_and_are_forgotten_a_day_after_their_last_beat,
    chain_heads_read_back_by_window_with_the_head_in_effect_at_its_start,
    provider_incidents_and_components_upsert_and_read_back,
    every_table_is_pruned_by_its_own_clock_in_bounded_batches,
    the_retention_job_removes_what_its_policy_expires_from_every_table,
    canary_runs_round_trip_newest_last_by_region_and_purge,
    check_runs_round_trip_newest_last_by_region_and_purge,
    workload_runs_round_trip_newest_last_by_region_and_purge,
    an_unknown_stored_breaker_state_is_an_error_naming_it,
    a_record_spool_replayed_twice_or_cut_midway_stores_each_record_once,
    an_older_database_with_duplicated_transitions_upgrades_to_one_row_each,
);

/// Copies the spool segments of `from` into `to` (the first `n` of them, oldest first, or all).
fn copy_segments(from: &std::path::Path, to: &std::path::Path, n: Option<usize>) -> usize {
    std::fs::create_dir_all(to).expect("mkdir");
    let mut names: Vec<_> = std::fs::read_dir(from).expect("list").map(|e| e.expect("entry").path()).collect();
    names.sort();
    names.truncate(n.unwrap_or(names.len()));
    for p in &names {
        std::fs::copy(p, to.join(p.file_name().expect("name"))).expect("copy");
    }
    names.len()
}

/// What a replay of the record spool left in the store: transitions, outbox items, canary runs,
/// rollups and breaker states.
async fn stored_counts(fx: &Fixture, since: chrono::DateTime<Utc>) -> [usize; 5] {
    let until = since + Duration::days(1);
    let s = fx.store.as_ref();
    [
        s.transitions_between(None, since, until).await.expect("transitions").len(),
        s.outbox_between(None, since, until).await.expect("outbox").len(),
        s.canary_runs(None, since, 10_000).await.expect("canary").len(),
        s.rollups_between(None, since - Duration::hours(1), Some(until)).await.expect("rollups").len(),
        s.load_breakers(None).await.expect("breakers").len(),
    ]
}

async fn a_record_spool_replayed_twice_or_cut_midway_stores_each_record_once(fx: Fixture) {
    use vigil::io::store::link::{Link, Record};
    use vigil::io::store::spool::SpoolOf;
    let now = micros(Utc::now());
    let t = target("openrouter", "mixtral-8x22b", Some("DeepInfra"), "eu");
    let tr = |k: i64| BreakerTransition {
        target: t.clone(),
        from_state: if k % 2 == 0 { State::Closed } else { State::Open },
        to_state: if k % 2 == 0 { State::Open } else { State::Closed },
        at: now + Duration::seconds(k),
        reason: format!("transition {k}"),
    };
    let mut records = Vec::new();
    for k in 0..600 {
        records.push(Record::Transition(tr(k)));
        if k % 10 == 0 {
            records.push(Record::Outbox(vec![outbox_at(now + Duration::seconds(k), k as u32)]));
            records.push(Record::Canary(vec![canary_run(t.clone(), now + Duration::seconds(k), 6)]));
        }
    }
    let breaker =
        BreakerRecord { target: t.clone(), state: State::Open, since: now, detail: serde_json::json!({}).into() };
    records.push(Record::Breaker(breaker));
    records.push(Record::Rollups(vec![rollup_at(now, "eu")]));
    let want = [600, 60, 60, 1, 1];

    let dir = tempfile::tempdir().expect("tempdir");
    let written = dir.path().join("written");
    {
        let mut spool = SpoolOf::<Record>::open(&written, 64 << 20).expect("spool").with_segment_bytes(16 * 1024);
        for r in &records {
            spool.append(std::slice::from_ref(r)).expect("append");
        }
    }
    let segments = std::fs::read_dir(&written).expect("list").count();
    assert!(segments >= 6, "several segments, so a replay can stop between them: {segments}");
    let replay = |from: &std::path::Path, n: Option<usize>, into: &str| {
        let to = dir.path().join(into);
        copy_segments(from, &to, n);
        let store = fx.store.clone();
        async move {
            let (mut link, _handle) = Link::new(store, SpoolOf::open(&to, 64 << 20).expect("spool"), None);
            let health = link.health();
            link.retry().await;
            assert_eq!(health.spooled(), 0, "replayed to the end");
        }
    };
    // Killed after writing the first half of the segments, before deleting them: the next start
    // replays them again with the rest.
    replay(&written, Some(segments / 2), "killed-midway").await;
    let partial = stored_counts(&fx, now).await;
    assert!(partial[0] > 0 && partial[0] < 600, "half the transitions were written: {partial:?}");
    replay(&written, None, "after-restart").await;
    assert_eq!(stored_counts(&fx, now).await, want, "each record once after a replay cut midway");
    // And the whole spool once more (killed after the last write, before the last delete).
    replay(&written, None, "again").await;
    assert_eq!(stored_counts(&fx, now).await, want, "each record once after replaying everything twice");
    let back = fx.store.transitions_between(None, now, now + Duration::days(1)).await.expect("read");
    assert_eq!(back, (0..600).map(tr).collect::<Vec<_>>(), "in order, each once");

    // A transition written directly twice (a call that timed out after committing, then retried).
    fx.store.append_transition(&tr(0)).await.expect("again");
    assert_eq!(stored_counts(&fx, now).await[0], 600);
}

async fn an_older_database_with_duplicated_transitions_upgrades_to_one_row_each(fx: Fixture) {
    // The schema as an older vigil left it: no key on transitions, the migration not yet applied.
    fx.exec("DROP INDEX breaker_transitions_natural_key").await;
    fx.exec(
        "CREATE INDEX breaker_transitions_region_target_at ON breaker_transitions (region, provider, model, route, at)",
    )
    .await;
    fx.exec("DELETE FROM _sqlx_migrations WHERE version = 20261201000060").await;
    let now = micros(Utc::now());
    let a = transition_at(now);
    let b = BreakerTransition { from_state: State::Open, to_state: State::HalfOpen, ..transition_at(now) };
    let c = transition_at(now + Duration::seconds(1));
    // What replays of that version left behind: copies of a, b and c.
    for t in [&a, &a, &b, &a, &c, &c, &b] {
        fx.store.append_transition(t).await.expect("append without a key");
    }
    let store = fx.store.clone();
    let window = async || store.transitions_between(None, now, now + Duration::hours(1)).await.expect("read");
    assert_eq!(window().await.len(), 7, "the duplicates an older vigil left");
    fx.store.migrate().await.expect("the upgrade applies over duplicates");
    assert_eq!(window().await, vec![a.clone(), b.clone(), c.clone()]);
    fx.store.append_transition(&a).await.expect("append");
    assert_eq!(window().await.len(), 3, "and stay once from now on");
    fx.store.migrate().await.expect("migrating again is a no-op");
}

async fn target_status_is_one_row_per_region_and_target_read_by_age(fx: Fixture) {
    let now = micros(Utc::now());
    let row = |region: &str, route: Option<&str>, state, over, breaker, age: i64| TargetStatus {
        target: target("openrouter", "meta-llama/llama-3-70b-instruct", route, region),
        health: health(state, region == "ap"),
        over_latency: over,
        breaker,
        updated_at: now - Duration::seconds(age),
    };
    let rows = vec![
        row("eu", Some("DeepInfra"), HealthState::Degraded, true, State::Closed, 5),
        row("us", None, HealthState::Down, false, State::Open, 3),
        row("ap", None, HealthState::HalfOpen, false, State::HalfOpen, 600),
    ];
    fx.store.publish_target_status(&rows).await.expect("publish");
    let fresh = fx.store.target_statuses(now - Duration::seconds(60), None).await.expect("read");
    assert_eq!(fresh, vec![rows[0].clone(), rows[1].clone()], "ordered by region, the stale row left out");
    let others = fx.store.target_statuses(now - Duration::seconds(60), Some("eu")).await.expect("read");
    assert_eq!(others, vec![rows[1].clone()], "what the other regions published, without eu's own");
    // A newer write replaces the region's row.
    let healed = row("us", None, HealthState::Ok, false, State::Closed, 0);
    fx.store.publish_target_status(std::slice::from_ref(&healed)).await.expect("replace");
    let all = fx.store.target_statuses(now - Duration::hours(1), None).await.expect("read");
    assert_eq!(all.len(), 3);
    assert_eq!(all.iter().find(|r| r.target.region == "us"), Some(&healed));
    let ap = all.iter().find(|r| r.target.region == "ap").expect("ap");
    assert_eq!((ap.health.state, ap.health.flapping), (HealthState::HalfOpen, true), "state and mark both kept");
    assert_eq!(ap.health.reason.as_deref(), Some("breaker half_open: the next probe decides; flapping"));
    // A row an older peer wrote, when flapping was a state of its own: read as ok and flapping.
    fx.exec("UPDATE target_status SET state = 'flapping', flapping = false, reason = NULL WHERE region = 'ap'").await;
    let all = fx.store.target_statuses(now - Duration::hours(1), None).await.expect("read");
    let ap = all.iter().find(|r| r.target.region == "ap").expect("ap");
    assert_eq!((ap.health.state, ap.health.flapping, ap.health.reason.as_deref()), (HealthState::Ok, true, None));
}

/// A health as the monitor publishes it (the reason as the rule words it).
fn health(state: HealthState, flapping: bool) -> Health {
    let mut why: Vec<&str> = Vec::new();
    match state {
        HealthState::Down => why.push("last probe failed: server_error"),
        HealthState::HalfOpen => why.push("breaker half_open: the next probe decides"),
        HealthState::Degraded => why.push("ttft p95 2.4x baseline"),
        HealthState::Ok | HealthState::Waiting => {}
    }
    if flapping {
        why.push("flapping");
    }
    Health { state, flapping, reason: (!why.is_empty()).then(|| why.join("; ")), ..Health::default() }
}

async fn an_unknown_stored_breaker_state_is_an_error_naming_it(fx: Fixture) {
    let now = micros(Utc::now());
    let t = target("openrouter", "m", None, "eu");
    let status = TargetStatus {
        target: t.clone(),
        health: health(HealthState::Ok, false),
        over_latency: false,
        breaker: State::Closed,
        updated_at: now,
    };
    fx.store.publish_target_status(&[status]).await.expect("publish");
    let record = BreakerRecord { target: t, state: State::Open, since: now, detail: serde_json::json!({}).into() };
    fx.store.save_breaker(&record).await.expect("save");
    // A newer vigil (or a hand edit) stored a state this one does not know: never read as closed.
    fx.exec("UPDATE target_status SET breaker = 'ajar'").await;
    fx.exec("UPDATE breaker_state SET state = 'ajar'").await;
    let err = fx.store.target_statuses(now - Duration::hours(1), None).await.expect_err("unknown state");
    assert!(err.to_string().contains("\"ajar\""), "{err}");
    let err = fx.store.load_breakers(None).await.expect_err("unknown state");
    assert!(err.to_string().contains("\"ajar\""), "{err}");
}

async fn an_incident_lease_is_claimed_once_renewed_by_its_owner_and_taken_over_when_expired(fx: Fixture) {
    let now = micros(Utc::now());
    let s = Duration::seconds;
    let key = "vigil:openrouter:m:";
    assert_eq!(fx.store.claim_incident(key, "eu", now, now + s(65)).await.expect("claim"), "eu");
    assert_eq!(fx.store.claim_incident(key, "us", now + s(1), now + s(66)).await.expect("claim"), "eu", "held");
    assert_eq!(fx.store.claim_incident(key, "eu", now + s(30), now + s(95)).await.expect("renew"), "eu");
    assert_eq!(fx.store.claim_incident(key, "us", now + s(90), now + s(155)).await.expect("claim"), "eu", "renewed");
    assert_eq!(fx.store.claim_incident(key, "us", now + s(96), now + s(161)).await.expect("take over"), "us");
    assert_eq!(fx.store.claim_incident(key, "eu", now + s(97), now + s(162)).await.expect("claim"), "us");
    fx.store.release_incident(key, "eu").await.expect("not eu's: no-op");
    assert_eq!(fx.store.claim_incident(key, "ap", now + s(98), now + s(163)).await.expect("claim"), "us");
    fx.store.release_incident(key, "us").await.expect("release");
    assert_eq!(fx.store.claim_incident(key, "ap", now + s(99), now + s(164)).await.expect("claim"), "ap");
    assert_eq!(fx.store.claim_incident("vigil:other", "eu", now, now + s(65)).await.expect("claim"), "eu");
}

async fn sightings_are_one_row_per_region_and_close_with_the_incident(fx: Fixture) {
    let now = micros(Utc::now());
    let key = "vigil:groq";
    fx.store.record_sighting(key, "us", true, now).await.expect("us");
    fx.store.record_sighting(key, "eu", true, now).await.expect("eu");
    fx.store.record_sighting(key, "eu", false, now + Duration::seconds(5)).await.expect("eu clears");
    fx.store.record_sighting("vigil:other", "eu", true, now).await.expect("other");
    assert_eq!(
        fx.store.sightings(key).await.expect("read"),
        vec![
            Sighting { region: "eu".into(), firing: false, updated_at: now + Duration::seconds(5) },
            Sighting { region: "us".into(), firing: true, updated_at: now },
        ]
    );
    fx.store.claim_incident(key, "us", now, now + Duration::seconds(65)).await.expect("claim");
    fx.store.close_incident(key).await.expect("close");
    assert!(fx.store.sightings(key).await.expect("read").is_empty());
    assert_eq!(fx.store.claim_incident(key, "eu", now, now + Duration::seconds(65)).await.expect("claim"), "eu");
    assert_eq!(fx.store.sightings("vigil:other").await.expect("read").len(), 1);
}

async fn members_beat_read_back_by_region_leave_and_are_forgotten_a_day_after_their_last_beat(fx: Fixture) {
    use vigil::vocab::member::Member;
    let now = micros(Utc::now());
    let member = |region: &str, id: &str, beat: i64| Member {
        region: region.into(),
        id: id.into(),
        host: "pod-\"a\"".into(),
        started_at: now - Duration::minutes(10),
        heartbeat_at: now + Duration::seconds(beat),
        active_from: now - Duration::minutes(9),
    };
    let (a, b, us) = (member("eu", "a", 0), member("eu", "b", 0), member("us", "a", 0));
    let cutoff = now - Duration::days(1);
    for m in [&a, &b, &us] {
        fx.store.beat(m, cutoff).await.expect("beat");
    }
    assert_eq!(fx.store.members("eu").await.expect("read"), vec![a.clone(), b.clone()], "one region's, by id");
    // A later beat moves the heartbeat only: the start and the share's start stay as first written.
    let later = Member { heartbeat_at: now + Duration::seconds(5), active_from: now + Duration::hours(1), ..a.clone() };
    fx.store.beat(&later, cutoff).await.expect("beat");
    let read = fx.store.members("eu").await.expect("read");
    assert_eq!(read[0], Member { heartbeat_at: later.heartbeat_at, ..a.clone() });
    fx.store.leave("eu", "b").await.expect("leave");
    assert_eq!(fx.store.members("eu").await.expect("read").len(), 1);
    // A member dead for over a day is removed at anyone's next beat, in any region.
    let stale = member("eu", "old", -2 * 86_400);
    fx.store.beat(&stale, now - Duration::days(3)).await.expect("beat");
    assert_eq!(fx.store.members("eu").await.expect("read").len(), 2);
    fx.store.beat(&us, cutoff).await.expect("beat");
    let ids: Vec<String> = fx.store.members("eu").await.expect("read").into_iter().map(|m| m.id).collect();
    assert_eq!(ids, ["a"]);
}

async fn drills_are_read_by_every_region_while_they_run_and_end_once(fx: Fixture) {
    use vigil::vocab::drill::Drill;
    let now = micros(Utc::now());
    let m = Duration::minutes;
    let drill = |n: u128, target: &str, started: i64, until: i64| Drill {
        id: uuid::Uuid::from_u128(n),
        chain: "chat".into(),
        target: target.into(),
        region: "eu".into(),
        started_at: now + m(started),
        until: now + m(until),
        ended_at: None,
    };
    let (old, running, later) =
        (drill(1, "openai", -90, -60), drill(2, "openrouter/openai/gpt-4o@Azure", -5, 5), drill(3, "anthropic", 0, 30));
    for d in [&later, &old, &running] {
        fx.store.start_drill(d).await.expect("start");
    }
    fx.store.start_drill(&running).await.expect("the same id again is ignored");
    assert_eq!(fx.store.drills(now).await.expect("read"), vec![running.clone(), later.clone()], "oldest first");
    assert_eq!(fx.store.drills(now - m(120)).await.expect("read").len(), 3, "ended ones are listed back");

    assert!(fx.store.end_drill(running.id, now + m(1)).await.expect("end"), "ended by another region's request");
    assert!(!fx.store.end_drill(running.id, now + m(2)).await.expect("end"), "once");
    assert!(!fx.store.end_drill(old.id, now).await.expect("end"), "a drill run out is not ended");
    assert!(!fx.store.end_drill(uuid::Uuid::from_u128(9), now).await.expect("end"), "an unknown id");
    let read = fx.store.drills(now).await.expect("read");
    assert_eq!(read[0].ended_at, Some(now + m(1)));
    assert!(!read[0].active_at(now + m(1)) && read[1].active_at(now + m(1)));
}

fn chain_head(region: &str, chain: &str, at: chrono::DateTime<Utc>, target: Option<&str>) -> ChainHead {
    ChainHead {
        region: region.into(),
        chain: chain.into(),
        at,
        target: target.map(str::to_string),
        price: target.map(|_| PerMtok { input: 2.5, output: 10.0 }),
    }
}

async fn chain_heads_read_back_by_window_with_the_head_in_effect_at_its_start(fx: Fixture) {
    let now = micros(Utc::now());
    let h = Duration::hours;
    let (since, until) = (now - h(24), now);
    let rows = [
        chain_head("eu", "chat", now - h(72), Some("openai/gpt-4o")),
        chain_head("eu", "chat", now - h(48), Some("openrouter/openai/gpt-4o")),
        chain_head("eu", "chat", now - h(3), Some("anthropic/claude-sonnet-4-20250514")),
        chain_head("eu", "chat", now - h(1), None),
        chain_head("eu", "chat", now + h(1), Some("openrouter/openai/gpt-4o")),
        chain_head("eu", "batch", now - h(2), Some("openai/gpt-4o")),
        chain_head("us", "chat", now - h(30), Some("openai/gpt-4o")),
    ];
    fx.store.record_chain_heads(&rows).await.expect("record");
    fx.store.record_chain_heads(&rows[..2]).await.expect("a replay is ignored");
    let eu = fx.store.chain_heads_between(Some("eu"), since, until).await.expect("read");
    assert_eq!(eu, vec![rows[5].clone(), rows[1].clone(), rows[2].clone(), rows[3].clone()], "by chain, then time");
    let all = fx.store.chain_heads_between(None, since, until).await.expect("read");
    assert_eq!(all.len(), 5, "us's head before the window counts too: {all:?}");
    assert_eq!(all[4], rows[6]);
    assert_eq!(all[3].price, None, "no head, no price");

    // Retention keeps each chain's newest record, however old: it is the head still in use.
    let cutoff = now - h(20);
    assert_eq!(fx.store.prune(Prune::ChainHeads, cutoff, 100).await.expect("prune"), 2);
    let left = fx.store.chain_heads_between(None, now - h(100), now + h(2)).await.expect("read");
    assert_eq!(left.len(), 5, "{left:?}");
    assert!(left.contains(&rows[6]), "us's only record stays");
}

async fn every_sample_field_round_trips(fx: Fixture) {
    let now = Utc::now();
    let full = full_sample(target("openrouter", "meta-llama/llama-3-70b-instruct", Some("DeepInfra"), "eu"), now);
    let bare = bare_sample(target("status-page", "", None, "eu"), now + Duration::seconds(1), Outcome::DnsError);
    assert_eq!(fx.store.insert_samples(&[full.clone(), bare.clone()]).await.expect("insert"), 2);

    let back = fx.store.samples(&SampleQuery::default()).await.expect("read");
    assert_eq!(back, vec![full, bare]);
}

async fn rate_limit_headroom_round_trips_whole_in_part_or_absent_for_samples_and_canary_runs(fx: Fixture) {
    use vigil::vocab::ratelimit::{Allowance, Headroom};
    let now = micros(Utc::now());
    let t = target("groq", "llama-3.1-8b-instant", None, "eu");
    let mut azure = bare_sample(t.clone(), now, Outcome::Ok);
    azure.ratelimit = Headroom {
        requests: Some(Allowance { remaining: Some(119), limit: None, reset_at: None }),
        tokens: Some(Allowance { remaining: Some(i64::MAX as u64), limit: None, reset_at: None }),
    };
    let mut spent = bare_sample(t.clone(), now + Duration::seconds(1), Outcome::RateLimited);
    spent.ratelimit = Headroom {
        requests: None,
        tokens: Some(Allowance { remaining: Some(0), limit: Some(6000), reset_at: Some(now + Duration::seconds(8)) }),
    };
    let none = bare_sample(t.clone(), now + Duration::seconds(2), Outcome::Timeout);
    let samples = vec![azure, spent, none];
    assert_eq!(fx.store.insert_samples(&samples).await.expect("insert"), 3);
    assert_eq!(fx.store.samples(&SampleQuery::default()).await.expect("read"), samples);

    let mut run = canary_run(t, now, 6);
    run.sample.ratelimit = samples[1].ratelimit;
    fx.store.insert_canary_runs(std::slice::from_ref(&run)).await.expect("insert canary run");
    let back = fx.store.canary_runs(None, now - Duration::hours(1), 10).await.expect("read canary runs");
    assert_eq!(back.iter().map(|r| r.sample.ratelimit).collect::<Vec<_>>(), vec![run.sample.ratelimit]);
}

async fn replaying_a_batch_never_duplicates(fx: Fixture) {
    let t = target("openai", "gpt-4o-mini", None, "eu");
    let start = Utc::now() - Duration::hours(1);
    let batch: Vec<_> = (0..1_200).map(|i| full_sample(t.clone(), start + Duration::milliseconds(i))).collect();

    assert_eq!(fx.store.insert_samples(&batch).await.expect("first insert"), 1_200);
    assert_eq!(fx.store.insert_samples(&batch).await.expect("replay"), 0);
    let mut mixed = batch[..10].to_vec();
    mixed.push(full_sample(t.clone(), start + Duration::seconds(5)));
    assert_eq!(fx.store.insert_samples(&mixed).await.expect("partly new"), 1);

    assert_eq!(fx.store.count_samples(&SampleQuery::default()).await.expect("count"), 1_201);
}

async fn one_regions_queries_never_see_another_region(fx: Fixture) {
    let now = Utc::now();
    let eu = target("groq", "llama3-70b", None, "eu-west-1");
    let us = target("groq", "llama3-70b", None, "us-east-1");
    let other = target("together", "llama3-70b", Some("Together"), "eu-west-1");
    let mut batch = Vec::new();
    for i in 0..5 {
        batch.push(bare_sample(eu.clone(), now - Duration::minutes(i), Outcome::Ok));
        batch.push(bare_sample(us.clone(), now - Duration::minutes(i), Outcome::Timeout));
    }
    batch.push(bare_sample(other.clone(), now, Outcome::Ok));
    fx.store.insert_samples(&batch).await.expect("insert");

    let q_eu = SampleQuery { region: Some("eu-west-1".into()), ..Default::default() };
    let q_us = SampleQuery { region: Some("us-east-1".into()), ..Default::default() };
    assert_eq!(fx.store.count_samples(&q_eu).await.expect("count eu"), 6);
    assert_eq!(fx.store.count_samples(&q_us).await.expect("count us"), 5);
    assert!(fx.store.samples(&q_us).await.expect("us").iter().all(|s| s.target == us));
    let q_not_eu = SampleQuery { except_region: Some("eu-west-1".into()), ..Default::default() };
    assert_eq!(fx.store.count_samples(&q_not_eu).await.expect("count all but eu"), 5);
    assert!(fx.store.samples(&q_not_eu).await.expect("all but eu").iter().all(|s| s.target == us));

    let q_target = SampleQuery { target: Some(eu.clone()), ..q_eu.clone() };
    assert_eq!(fx.store.count_samples(&q_target).await.expect("count target"), 5);
    let newest = fx.store.samples(&SampleQuery { limit: Some(2), ..q_target.clone() }).await.expect("newest two");
    assert_eq!(newest.len(), 2);
    assert!(newest[0].started_at > newest[1].started_at, "newest first");
    assert_eq!(newest[0].started_at, micros(now));

    let window = SampleQuery { since: Some(now - Duration::seconds(150)), until: Some(now), ..q_target };
    assert_eq!(fx.store.count_samples(&window).await.expect("window"), 2, "samples at -1m and -2m");

    // Each target's newest per region, chosen by the database, oldest first like any read.
    let latest = fx.store.samples(&SampleQuery { latest: true, ..Default::default() }).await.expect("latest");
    let got: Vec<(String, String)> = latest.iter().map(|s| (s.target.id(), s.target.region.to_string())).collect();
    assert_eq!(latest.len(), 3, "{got:?}");
    assert!(latest.iter().all(|s| s.started_at == micros(now)), "the newest of each: {latest:?}");
    let q_latest_not_eu = SampleQuery { latest: true, ..q_not_eu };
    let latest = fx.store.samples(&q_latest_not_eu).await.expect("latest elsewhere");
    assert_eq!(latest.len(), 1);
    assert_eq!((latest[0].target.clone(), latest[0].outcome), (us, Outcome::Timeout));
    let old = SampleQuery { latest: true, until: Some(now - Duration::seconds(90)), ..q_eu };
    let latest = fx.store.samples(&old).await.expect("latest before");
    assert_eq!(latest.len(), 1, "the filters apply before the newest is chosen");
    assert_eq!(latest[0].started_at, micros(now - Duration::minutes(2)));
}

async fn rollups_upsert_and_read_back(fx: Fixture) {
    let hour = Utc::now().duration_trunc(Duration::hours(1)).expect("hour");
    let eu = target("anthropic", "claude-3-haiku", None, "eu");
    let us = target("anthropic", "claude-3-haiku", None, "us");
    let r = |t: &vigil::vocab::target::Target, h, count, bytes: &[u8]| Rollup {
        target: t.clone(),
        metric: "ttft".into(),
        hour: h,
        count,
        histogram: bytes.to_vec(),
    };
    let old = r(&eu, hour - Duration::days(2), 60, &[9]);
    fx.store.upsert_rollups(&[r(&eu, hour, 10, &[1, 2]), r(&us, hour, 7, &[3]), old.clone()]).await.expect("upsert");
    fx.store.upsert_rollups(&[r(&eu, hour, 20, &[4, 5, 6])]).await.expect("replace");

    let eu_rollups = fx.store.rollups_since(Some("eu"), hour - Duration::hours(1)).await.expect("eu rollups");
    assert_eq!(eu_rollups, vec![r(&eu, hour, 20, &[4, 5, 6])]);
    assert_eq!(fx.store.rollups_since(None, hour - Duration::days(3)).await.expect("all").len(), 3);
    let old_hour = hour - Duration::days(2);
    let between = fx.store.rollups_between(None, old_hour, Some(old_hour + Duration::hours(1))).await.expect("between");
    assert_eq!(between, vec![old.clone()], "one hour, end excluded");
    let before_now = fx.store.rollups_between(Some("eu"), old_hour, Some(hour)).await.expect("between");
    assert_eq!(before_now, vec![old.clone()], "the current hour is excluded by `until`");

    assert_eq!(fx.store.purge_rollups_before(hour - Duration::days(1)).await.expect("purge"), 1);
    assert!(!fx.store.rollups_since(None, hour - Duration::days(3)).await.expect("all").contains(&old));
}

/// An hour read back holds each target's names and each metric's name once, however many rows
/// repeat them (a start reads 50,000 rows an hour at 10,000 targets), and every row keeps its
/// own names: a route, no route, another region.
async fn a_read_hours_rows_share_their_targets_and_metrics_names(fx: Fixture) {
    let hour = Utc::now().duration_trunc(Duration::hours(1)).expect("hour") - Duration::hours(3);
    let targets = [
        target("openrouter", "llama", Some("groq"), "eu"),
        target("openrouter", "llama", None, "eu"),
        target("openrouter", "llama", None, "us"),
    ];
    let metrics = ["ttfb", "ttft", "probes"];
    let rollups: Vec<Rollup> = targets
        .iter()
        .flat_map(|t| {
            metrics.iter().map(|m| Rollup {
                target: t.clone(),
                metric: (*m).into(),
                hour,
                count: 3,
                histogram: vec![7],
            })
        })
        .collect();
    fx.store.upsert_rollups(&rollups).await.expect("upsert");
    let back = fx.store.rollups_between(None, hour, Some(hour + Duration::hours(1))).await.expect("read");
    assert_eq!(back.len(), 9);
    for t in &targets {
        let rows: Vec<&Rollup> = back.iter().filter(|r| r.target == *t).collect();
        assert_eq!(rows.len(), 3, "{t:?}: every metric read back");
        assert_eq!(rows[0].target.route, t.route, "the route as stored");
        assert!(
            rows.iter().all(|r| r.target.provider.shares(&rows[0].target.provider)),
            "{t:?}: one copy of its names"
        );
    }
    let by_region = |region: &str| back.iter().find(|r| *r.target.region == *region).expect("row").target.clone();
    assert!(!by_region("eu").region.shares(&by_region("us").region), "another target, names of its own");
    for m in metrics {
        let rows: Vec<&Rollup> = back.iter().filter(|r| *r.metric == *m).collect();
        assert_eq!(rows.len(), 3, "{m}: a row per target");
        assert!(rows.iter().all(|r| r.metric.shares(&rows[0].metric)), "{m}: one copy of the metric's name");
    }
}

/// Rollups and status rows go in multi-row statements of 500: a write of 1,200 crosses
/// statements, and a key written twice in one call keeps its later value (as one upsert per
/// row did; PostgreSQL refuses a statement that touches one row twice).
async fn upserts_larger_than_one_statement_keep_the_last_write_per_key(fx: Fixture) {
    let now = micros(Utc::now());
    let hour = now.duration_trunc(Duration::hours(1)).expect("hour");
    let t = |i: usize| target("groq", &format!("m{i:04}"), None, "eu");
    let mut rollups: Vec<Rollup> = (0..1_200)
        .map(|i| Rollup { target: t(i), metric: "ttfb".into(), hour, count: 1, histogram: vec![1] })
        .collect();
    rollups.push(Rollup { target: t(7), metric: "ttfb".into(), hour, count: 2, histogram: vec![2, 2] });
    fx.store.upsert_rollups(&rollups).await.expect("upsert");
    let back = fx.store.rollups_since(Some("eu"), hour).await.expect("read");
    assert_eq!(back.len(), 1_200);
    let seventh = back.iter().find(|r| r.target == t(7)).expect("m0007");
    assert_eq!((seventh.count, seventh.histogram.as_slice()), (2, &[2u8, 2][..]), "the later write wins");

    let status = |i: usize, state| TargetStatus {
        target: t(i),
        health: health(state, false),
        over_latency: false,
        breaker: State::Closed,
        updated_at: now,
    };
    let mut rows: Vec<TargetStatus> = (0..1_200).map(|i| status(i, HealthState::Ok)).collect();
    rows.push(status(1_100, HealthState::Down));
    fx.store.publish_target_status(&rows).await.expect("publish");
    let back = fx.store.target_statuses(now - Duration::seconds(1), None).await.expect("read");
    assert_eq!(back.len(), 1_200);
    assert_eq!(back.iter().find(|r| r.target == t(1_100)).map(|r| r.health.state), Some(HealthState::Down));
}

async fn breaker_state_and_transitions_persist(fx: Fixture) {
    let now = micros(Utc::now());
    let a = target("openrouter", "mixtral-8x22b", Some("DeepInfra"), "eu");
    let b = target("openrouter", "mixtral-8x22b", Some("Together"), "eu");
    let us = target("openrouter", "mixtral-8x22b", Some("DeepInfra"), "us");
    let rec = |t: &vigil::vocab::target::Target, state: &str| BreakerRecord {
        target: t.clone(),
        state: state.parse().expect("breaker state"),
        since: now,
        detail: serde_json::json!({"failures": 3, "next_half_open": "2026-11-30T12:05:00Z"}).into(),
    };
    fx.store.save_breaker(&rec(&a, "closed")).await.expect("save a");
    fx.store.save_breaker(&rec(&a, "open")).await.expect("replace a");
    fx.store.save_breaker(&rec(&b, "half_open")).await.expect("save b");
    fx.store.save_breaker(&rec(&us, "closed")).await.expect("save us");
    assert_eq!(fx.store.load_breakers(Some("eu")).await.expect("eu"), vec![rec(&a, "open"), rec(&b, "half_open")]);
    assert_eq!(fx.store.load_breakers(None).await.expect("all").len(), 3);

    let tr = |t: &vigil::vocab::target::Target, from: &str, to: &str, secs| BreakerTransition {
        target: t.clone(),
        from_state: from.parse().expect("breaker state"),
        to_state: to.parse().expect("breaker state"),
        at: now + Duration::seconds(secs),
        reason: format!("{from} -> {to}: 3 failed probes in 120s: server_error, server_error, timeout"),
    };
    for t in [
        tr(&a, "closed", "open", 0),
        tr(&b, "closed", "open", 1),
        tr(&a, "open", "half_open", 2),
        tr(&us, "closed", "open", 3),
    ] {
        fx.store.append_transition(&t).await.expect("append");
    }
    assert_eq!(
        fx.store.transitions("eu", None, 10).await.expect("eu"),
        vec![tr(&a, "open", "half_open", 2), tr(&b, "closed", "open", 1), tr(&a, "closed", "open", 0)]
    );
    assert_eq!(fx.store.transitions("eu", Some(&a), 1).await.expect("a"), vec![tr(&a, "open", "half_open", 2)]);
}

async fn outbox_items_move_through_their_lifecycle(fx: Fixture) {
    let now = micros(Utc::now());
    let item = |n: i64, channel: &str| OutboxItem {
        id: uuid::Uuid::now_v7(),
        region: "eu-west-1".into(),
        channel: channel.into(),
        kind: "errors".into(),
        dedup_key: format!("openai/gpt-4o@eu#{n}"),
        payload: serde_json::json!({"text": format!("alert {n}")}),
        created_at: now + Duration::seconds(n),
        next_attempt_at: now + Duration::seconds(n),
        attempts: 0,
        last_error: None,
    };
    let (a, b, c) = (item(0, "slack"), item(1, "pagerduty-1"), item(100, "email"));
    fx.store.enqueue(&[a.clone(), b.clone(), c.clone()]).await.expect("enqueue");
    fx.store.enqueue(std::slice::from_ref(&a)).await.expect("enqueue again is ignored");
    assert_eq!(fx.store.outbox_depth().await.expect("depth"), 3);

    let due = fx.store.due(None, None, now + Duration::seconds(10), 10).await.expect("due");
    assert_eq!(due, vec![a.clone(), b.clone()], "c is not due yet; oldest first");
    assert_eq!(fx.store.due(None, None, now + Duration::seconds(10), 1).await.expect("limit"), vec![a.clone()]);
    let one = fx.store.due(None, Some("pagerduty-1"), now + Duration::seconds(10), 10).await.expect("one channel");
    assert_eq!(one, vec![b.clone()], "each channel reads only its own items");
    let channels = fx.store.due_channels(None, now + Duration::seconds(10)).await.expect("channels");
    assert_eq!(channels, vec!["pagerduty-1".to_string(), "slack".to_string()], "c is not due yet");

    fx.store.mark_delivered(a.id, now + Duration::seconds(11)).await.expect("delivered");
    fx.store.mark_retry(b.id, now + Duration::seconds(60), "HTTP 503").await.expect("retry");
    let due = fx.store.due(None, None, now + Duration::seconds(20), 10).await.expect("due after");
    assert!(due.is_empty(), "a delivered, b retries later, c not due: {due:?}");

    let retried = fx.store.due(None, None, now + Duration::seconds(60), 10).await.expect("b due again");
    assert_eq!(retried.len(), 1);
    assert_eq!((retried[0].id, retried[0].attempts), (b.id, 1));
    assert_eq!(retried[0].last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(retried[0].next_attempt_at, now + Duration::seconds(60));

    fx.store.mark_abandoned(b.id, now + Duration::seconds(61), "HTTP 400: invalid routing key").await.expect("abandon");
    assert_eq!(fx.store.outbox_depth().await.expect("depth"), 1, "only c is left");
    assert_eq!(fx.store.due(None, None, now + Duration::seconds(200), 10).await.expect("due"), vec![c.clone()]);
    assert_eq!(
        fx.store.due(Some("eu-west-1"), None, now + Duration::seconds(200), 10).await.expect("own region"),
        vec![c]
    );
    assert!(
        fx.store.due(Some("us-east-1"), None, now + Duration::seconds(200), 10).await.expect("other region").is_empty(),
        "an instance never takes another region's items"
    );
}

async fn transitions_and_outbox_items_read_back_by_time_window(fx: Fixture) {
    let t0 = micros(Utc::now()) - Duration::days(3);
    let eu = target("openai", "gpt-4o-mini", None, "eu-west-1");
    let us = target("openai", "gpt-4o-mini", None, "us-east-1");
    let tr = |t: &vigil::vocab::target::Target, to: &str, hours| BreakerTransition {
        target: t.clone(),
        from_state: vigil::vocab::breaker::State::Closed,
        to_state: to.parse().expect("breaker state"),
        at: t0 + Duration::hours(hours),
        reason: "3 failed probes in 120s".into(),
    };
    // Appended out of time order: the window query must sort by time, not by insertion.
    for t in [tr(&eu, "open", 30), tr(&eu, "open", 1), tr(&us, "open", 2), tr(&eu, "half_open", 48), tr(&eu, "open", 0)]
    {
        fx.store.append_transition(&t).await.expect("append");
    }
    let (since, until) = (t0 + Duration::hours(1), t0 + Duration::hours(48));
    assert_eq!(
        fx.store.transitions_between(Some("eu-west-1"), since, until).await.expect("eu window"),
        vec![tr(&eu, "open", 1), tr(&eu, "open", 30)],
        "since is inclusive, until exclusive, other regions left out"
    );
    assert_eq!(
        fx.store.transitions_between(None, since, until).await.expect("all regions"),
        vec![tr(&eu, "open", 1), tr(&us, "open", 2), tr(&eu, "open", 30)]
    );

    let item = |region: &str, hours: i64| OutboxItem {
        id: uuid::Uuid::new_v4(),
        region: region.into(),
        channel: "email".into(),
        kind: "errors".into(),
        dedup_key: format!("vigil:{region}:openai::errors"),
        payload: serde_json::json!({"key": format!("n-{region}-{hours}")}),
        created_at: t0 + Duration::hours(hours),
        next_attempt_at: t0 + Duration::hours(hours),
        attempts: 0,
        last_error: None,
    };
    let (late, early, other, before, at_until) = (
        item("eu-west-1", 40),
        item("eu-west-1", 5),
        item("us-east-1", 6),
        item("eu-west-1", 0),
        item("eu-west-1", 48),
    );
    fx.store.enqueue(&[late.clone(), early.clone(), other.clone(), before, at_until]).await.expect("enqueue");
    fx.store.mark_delivered(early.id, t0 + Duration::hours(5)).await.expect("delivered");
    let mut delivered_early = early.clone();
    delivered_early.attempts = 1;
    assert_eq!(
        fx.store.outbox_between(Some("eu-west-1"), since, until).await.expect("eu outbox"),
        vec![delivered_early.clone(), late.clone()],
        "delivered items count too; oldest first"
    );
    assert_eq!(
        fx.store.outbox_between(None, since, until).await.expect("all outbox"),
        vec![delivered_early, other, late]
    );
}

/// `v` as the engine hands it to storage.
fn state(v: &serde_json::Value) -> StateJson {
    StateJson::of(v).expect("JSON")
}

/// A stored state read back as a value (PostgreSQL's `jsonb` respaces the text).
async fn load_state(store: &dyn Store, region: &str) -> Option<serde_json::Value> {
    let text = store.load_alert_state(region).await.expect("load")?;
    Some(serde_json::from_str(&text.text().expect("text")).expect("stored state is JSON"))
}

async fn alert_state_is_one_document_per_region(fx: Fixture) {
    assert_eq!(fx.store.load_alert_state("eu").await.expect("first start"), None);
    let v1 = serde_json::json!({"firing": {"errors:openai/gpt-4o": "2026-11-30T10:00:00Z"}});
    let v2 = serde_json::json!({"firing": {}, "last_sent": {"x": 1}});
    fx.store.save_alert_state("eu", &state(&v1)).await.expect("save");
    fx.store.save_alert_state("us", &state(&v2)).await.expect("save us");
    assert_eq!(load_state(fx.store.as_ref(), "eu").await, Some(v1));
    fx.store.save_alert_state("eu", &state(&v2)).await.expect("replace");
    assert_eq!(load_state(fx.store.as_ref(), "eu").await, Some(v2));
}

/// A database an earlier build wrote holds the state as JSON text in `state`: the upgrade keeps
/// it, a start reads it, and the next write stores gzip in `state_gz` and empties `state`.
async fn an_alert_state_an_earlier_build_stored_as_text_is_read_and_the_next_write_stores_gzip(fx: Fixture) {
    // The table as the earlier build left it, and its row.
    fx.exec("ALTER TABLE alert_state DROP COLUMN state_gz").await;
    if fx.kind == Kind::Postgres {
        fx.exec("ALTER TABLE alert_state ALTER COLUMN state SET NOT NULL").await;
    }
    fx.exec("DELETE FROM _sqlx_migrations WHERE version = 20261208000010").await;
    fx.exec(r#"INSERT INTO alert_state (region, state, updated_at) VALUES ('eu', '{"firing": {"x": 1}}', CURRENT_TIMESTAMP)"#)
        .await;
    fx.store.migrate().await.expect("the upgrade keeps the row");
    assert_eq!(load_state(fx.store.as_ref(), "eu").await, Some(serde_json::json!({"firing": {"x": 1}})));

    let now = serde_json::json!({"firing": {}});
    fx.store.save_alert_state("eu", &state(&now)).await.expect("save");
    assert_eq!(load_state(fx.store.as_ref(), "eu").await, Some(now));
    assert_eq!(
        fx.text("SELECT CAST(state AS TEXT) FROM alert_state WHERE region = 'eu'").await,
        None,
        "the text emptied"
    );
    let gz = fx.text("SELECT CAST(length(state_gz) AS TEXT) FROM alert_state WHERE region = 'eu'").await;
    assert!(gz.is_some_and(|n| n.parse::<usize>().is_ok_and(|n| n > 18)), "gzip in state_gz");

    // Bytes that are not gzip are refused with what is wrong where, not read as a fresh state.
    fx.exec(match fx.kind {
        Kind::Sqlite => "UPDATE alert_state SET state_gz = X'7b7d' WHERE region = 'eu'",
        Kind::Postgres => "UPDATE alert_state SET state_gz = decode('7b7d', 'hex') WHERE region = 'eu'",
    })
    .await;
    let err = fx.store.load_alert_state("eu").await.expect_err("not gzip").to_string();
    assert!(err.contains("alert_state of region eu: state_gz is not gzip"), "{err}");
}

async fn an_evaluations_pages_and_state_are_stored_together_or_not_at_all(fx: Fixture) {
    let now = micros(Utc::now());
    let item = |channel: &str, text: &str| OutboxItem {
        id: uuid::Uuid::now_v7(),
        region: "eu".into(),
        channel: channel.into(),
        kind: "errors".into(),
        dedup_key: "openai/gpt-4o@eu#errors".into(),
        payload: serde_json::json!({"text": text}),
        created_at: now,
        next_attempt_at: now,
        attempts: 0,
        last_error: None,
    };
    let opened = serde_json::json!({"incidents": {"openai/gpt-4o": "open"}});
    let (page, mail) = (item("slack", "page"), item("email", "page"));
    fx.store.enqueue_with_state(&[page.clone(), mail.clone()], "eu", &state(&opened)).await.expect("together");
    assert_eq!(fx.store.outbox_depth().await.expect("depth"), 2);
    assert_eq!(load_state(fx.store.as_ref(), "eu").await, Some(opened.clone()));
    // A replay of the same evaluation (spooled, or a write whose answer was lost) adds nothing.
    fx.store.enqueue_with_state(std::slice::from_ref(&page), "eu", &state(&opened)).await.expect("replayed");
    assert_eq!(fx.store.outbox_depth().await.expect("depth"), 2);
}

async fn balances_read_back_oldest_first(fx: Fixture) {
    let t0 = micros(Utc::now()) - Duration::minutes(30);
    let reading = |mins, usd| BalanceReading {
        provider: "openrouter".into(),
        region: "eu".into(),
        at: t0 + Duration::minutes(mins),
        remaining_usd: usd,
    };
    for r in [reading(10, 41.5), reading(0, 42.0), reading(20, 40.25)] {
        fx.store.insert_balance(&r).await.expect("insert");
    }
    let other = BalanceReading { provider: "openai".into(), ..reading(5, 7.0) };
    fx.store.insert_balance(&other).await.expect("insert other");
    assert_eq!(
        fx.store.balances("openrouter", t0 + Duration::minutes(5)).await.expect("read"),
        vec![reading(10, 41.5), reading(20, 40.25)]
    );
}

async fn a_database_ahead_of_the_binary_is_refused(fx: Fixture) {
    let again = fx.store.migrate().await.expect("migrating twice is a no-op");
    assert_eq!(again, Vec::new(), "nothing applied the second time");
    match fx.kind {
        Kind::Sqlite => fx.exec(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99990101000000, 'from a newer vigil', TRUE, X'00', 0)",
        ),
        Kind::Postgres => fx.exec(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99990101000000, 'from a newer vigil', TRUE, '\\x00'::bytea, 0)",
        ),
    }
    .await;
    let err = fx.store.migrate().await.expect_err("a newer schema must be refused");
    assert!(matches!(err, StoreError::SchemaAhead { found: 99990101000000, .. }), "got {err:?}");
    assert!(err.to_string().contains("newer than this vigil"), "message: {err}");
}

async fn retention_removes_only_samples_older_than_the_cutoff(fx: Fixture) {
    let today = Utc::now().duration_trunc(Duration::days(1)).expect("midnight");
    let t = target("deepinfra", "llama3-70b", None, "eu");
    let at = |days: i64, hours: i64| today - Duration::days(days) + Duration::hours(hours);
    let batch: Vec<_> = [at(10, 1), at(3, 23), at(3, 0), at(2, 0), at(1, 12), at(0, 0)]
        .into_iter()
        .map(|when| bare_sample(t.clone(), when, Outcome::Ok))
        .collect();
    fx.store.insert_samples(&batch).await.expect("insert");

    let cutoff = today - Duration::days(2);
    assert_eq!(fx.store.purge_samples_before(cutoff).await.expect("purge"), 3);
    let left: Vec<_> =
        fx.store.samples(&Default::default()).await.expect("read").into_iter().map(|s| s.started_at).collect();
    assert_eq!(left, vec![at(2, 0), at(1, 12), at(0, 0)]);
    assert_eq!(fx.store.purge_samples_before(cutoff).await.expect("purge again"), 0);

    if fx.kind == Kind::Postgres {
        // Whole day partitions went; the newer ones (and tomorrow's, pre-created) remain.
        let names = sample_partitions(&fx).await;
        let day = |d: chrono::DateTime<Utc>| format!("samples_{}", d.format("%Y%m%d"));
        let expected: Vec<String> = [at(2, 0), at(1, 0), at(0, 0), at(-1, 0)].into_iter().map(day).collect();
        assert_eq!(names, expected.join(","));
    }
}

async fn an_id_repeated_within_one_batch_is_stored_once(fx: Fixture) {
    let t = target("groq", "llama3-70b", None, "eu");
    let start = Utc::now() - Duration::minutes(30);
    let fresh: Vec<_> = (0..50).map(|i| full_sample(t.clone(), start + Duration::milliseconds(i))).collect();
    let mut batch = fresh.clone();
    batch.extend_from_slice(&fresh[10..20]);
    batch.push(fresh[0].clone());

    assert_eq!(fx.store.insert_samples(&batch).await.expect("insert"), 50);
    let back: Vec<_> = fx.store.samples(&SampleQuery::default()).await.expect("read");
    assert_eq!(back, fresh, "each id once, every field intact");
}

async fn a_batch_across_midnight_lands_on_both_days_and_replays_exactly(fx: Fixture) {
    let midnight = Utc::now().duration_trunc(Duration::days(1)).expect("midnight") - Duration::days(1);
    let t = target("together", "mixtral-8x22b", Some("Together"), "us");
    // 40 samples each side of midnight, the last of the old day 1 µs before it.
    let at = |i: i64| midnight + Duration::microseconds(i * 250_000 - 1);
    let all: Vec<_> = (-39..=40).map(|i| full_sample(t.clone(), at(i))).collect();
    let before_midnight = SampleQuery { until: Some(midnight), ..Default::default() };
    let after_midnight = SampleQuery { since: Some(midnight), ..Default::default() };

    // Every other sample first, then the whole batch again: stored ids on both days, new ones between.
    let half: Vec<_> = all.iter().step_by(2).cloned().collect();
    assert_eq!(fx.store.insert_samples(&half).await.expect("first half"), 40);
    assert_eq!(fx.store.insert_samples(&all).await.expect("replay with the rest"), 40);
    assert_eq!(fx.store.insert_samples(&all).await.expect("replay of everything"), 0);

    assert_eq!(fx.store.count_samples(&before_midnight).await.expect("old day"), 40);
    assert_eq!(fx.store.count_samples(&after_midnight).await.expect("new day"), 40);
    assert_eq!(fx.store.samples(&SampleQuery::default()).await.expect("read"), all);
    if fx.kind == Kind::Postgres {
        let day = |d: chrono::DateTime<Utc>| format!("samples_{}", d.format("%Y%m%d"));
        let names = sample_partitions(&fx).await;
        for d in [midnight - Duration::days(1), midnight] {
            assert!(names.contains(&day(d)), "{names} lacks {}", day(d));
        }
    }
}

async fn awkward_text_and_null_heavy_rows_round_trip(fx: Fixture) {
    let now = Utc::now() - Duration::minutes(5);
    let odd = target("prov\tider\\x", "model\twith\ttabs", Some("route, \"quoted\" \\N"), "région-ü");
    let mut texty = full_sample(odd.clone(), now);
    texty.error = Some("line one\nline two\r\n\ttabbed \\ back\\slash \\N ‘quotes’ 🚀 \u{7f}".into());
    texty.request_id = Some("\\.".into());
    texty.outcome = Outcome::ServerError;
    let mut long = full_sample(odd.clone(), now + Duration::seconds(1));
    long.error = Some("x".repeat(70_000));
    let mut empty = full_sample(odd, now + Duration::seconds(2));
    empty.error = Some(String::new());
    empty.request_id = Some(String::new());
    let mut extremes = full_sample(target("p", "m", None, "eu"), now + Duration::seconds(3));
    extremes.ttfb_ms = Some(f64::MAX);
    extremes.connect_ms = Some(-0.0);
    extremes.input_tokens = Some(u32::MAX);
    extremes.status = Some(u16::MAX);
    extremes.adherence_ok = Some(false);
    let nulls: Vec<_> = (4..8)
        .map(|i| bare_sample(target("status-page", "", None, "eu"), now + Duration::seconds(i), Outcome::Timeout))
        .collect();
    let mut batch = vec![texty, long, empty, extremes];
    batch.extend(nulls);

    assert_eq!(fx.store.insert_samples(&batch).await.expect("insert"), batch.len() as u64);
    assert_eq!(fx.store.samples(&SampleQuery::default()).await.expect("read"), batch);
}

/// PostgreSQL's `samples_*` partitions, comma-separated in name order.
async fn provider_incidents_and_components_upsert_and_read_back(fx: Fixture) {
    use vigil::vocab::provider_status::{ProviderComponent, ProviderIncident};
    let now = micros(Utc::now());
    let incident = |provider: &str, id: &str, created: chrono::DateTime<Utc>| ProviderIncident {
        provider: provider.into(),
        id: id.into(),
        name: format!("Elevated errors ({id}) — \"quoted\" 'text'"),
        status: "investigating".into(),
        impact: "major".into(),
        created_at: created,
        updated_at: None,
        resolved_at: None,
        components: vec!["Chat Completions".into(), "Embeddings".into()],
        shortlink: Some("https://stspg.example.invalid/x".into()),
    };
    let a = incident("openai", "a", now - Duration::hours(2));
    let b = incident("openai", "b", now - Duration::hours(1));
    let c = incident("groq", "c", now - Duration::minutes(30));
    let old = incident("openai", "old", now - Duration::days(9));
    fx.store.upsert_provider_incidents(&[a.clone(), b.clone(), c.clone(), old]).await.expect("insert");

    // An update replaces the fields; a resolution time, once stored, is kept.
    let mut a2 = a.clone();
    a2.status = "resolved".into();
    a2.updated_at = Some(now);
    a2.resolved_at = Some(now);
    a2.components = vec![];
    fx.store.upsert_provider_incidents(std::slice::from_ref(&a2)).await.expect("update");
    let mut a3 = a2.clone();
    a3.resolved_at = None;
    fx.store.upsert_provider_incidents(&[a3]).await.expect("update without resolution");

    let since = now - Duration::days(1);
    let until = now + Duration::minutes(1);
    let openai = fx.store.provider_incidents_between(Some("openai"), since, until).await.expect("read");
    assert_eq!(openai, vec![a2.clone(), b.clone()], "oldest first, the old one outside the window");
    let all = fx.store.provider_incidents_between(None, since, until).await.expect("read all");
    assert_eq!(all, vec![a2, b, c]);

    let comp = |id: &str, status: &str| ProviderComponent {
        provider: "openai".into(),
        id: id.into(),
        name: format!("Component {id}"),
        status: status.into(),
        updated_at: Some(now),
    };
    fx.store
        .upsert_provider_components(&[comp("x", "partial_outage"), comp("y", "operational")])
        .await
        .expect("insert");
    fx.store.upsert_provider_components(&[comp("x", "operational")]).await.expect("update");
    let back = fx.store.provider_components("openai").await.expect("read");
    assert_eq!(back, vec![comp("x", "operational"), comp("y", "operational")]);
    assert!(fx.store.provider_components("groq").await.expect("read").is_empty());
}

async fn sample_partitions(fx: &Fixture) -> String {
    fx.text(
        "SELECT string_agg(c.relname::text, ',' ORDER BY c.relname) FROM pg_inherits i \
                 JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'samples'::regclass",
    )
    .await
    .expect("partitions")
}

#[tokio::test]
async fn sqlite_open_creates_the_file_and_its_directory_in_wal_mode() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nested").join("data").join("vigil.db");
    let url = format!("sqlite://{}", path.display());
    let store = vigil::io::store::open(&url).await.expect("open creates the file");
    store.migrate().await.expect("migrate");
    assert!(path.is_file());
    let mut c = sqlx::SqliteConnection::connect(&url).await.expect("connect");
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut c).await.expect("pragma");
    assert_eq!(mode, "wal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_drops_nul_characters_that_text_cannot_hold() {
    let fx = Fixture::postgres().await;
    let mut s = full_sample(target("open\0router", "m", None, "eu"), Utc::now());
    s.error = Some("before\0after".into());
    assert_eq!(fx.store.insert_samples(std::slice::from_ref(&s)).await.expect("insert"), 1);
    let back = fx.store.samples(&SampleQuery::default()).await.expect("read");
    s.target.provider = "openrouter".into();
    s.error = Some("beforeafter".into());
    assert_eq!(back, vec![s]);
}

#[tokio::test]
async fn an_unknown_url_scheme_is_refused_with_the_expected_forms() {
    let err = vigil::io::store::open("mysql://localhost/vigil").await.err().expect("mysql is not supported");
    assert!(matches!(err, StoreError::BadUrl(_)), "got {err:?}");
    assert!(err.to_string().contains("expected sqlite://PATH or postgres://"), "{err}");
}

fn rollup_at(hour: chrono::DateTime<Utc>, region: &str) -> Rollup {
    Rollup {
        target: target("groq", "llama-3.1-8b-instant", None, region),
        metric: "ttft".into(),
        hour: hour.duration_trunc(Duration::hours(1)).expect("hour"),
        count: 12,
        histogram: vec![1, 2, 3],
    }
}

fn transition_at(at: chrono::DateTime<Utc>) -> BreakerTransition {
    BreakerTransition {
        target: target("groq", "llama-3.1-8b-instant", None, "eu"),
        from_state: vigil::vocab::breaker::State::Closed,
        to_state: vigil::vocab::breaker::State::Open,
        at,
        reason: "3 failed probes in 120s: server_error, server_error, timeout".into(),
    }
}

fn outbox_at(created: chrono::DateTime<Utc>, n: u32) -> OutboxItem {
    OutboxItem {
        id: uuid::Uuid::now_v7(),
        region: "eu".into(),
        channel: "slack".into(),
        kind: "errors".into(),
        dedup_key: format!("groq/llama#{n}"),
        payload: serde_json::json!({"text": format!("alert {n}")}),
        created_at: created,
        next_attempt_at: created,
        attempts: 0,
        last_error: None,
    }
}

fn reading_at(at: chrono::DateTime<Utc>, usd: f64) -> BalanceReading {
    BalanceReading { provider: "openrouter".into(), region: "eu".into(), at, remaining_usd: usd }
}

fn status_at(region: &str, at: chrono::DateTime<Utc>) -> TargetStatus {
    TargetStatus {
        target: target("groq", "llama-3.1-8b-instant", None, region),
        health: health(HealthState::Ok, false),
        over_latency: false,
        breaker: State::Closed,
        updated_at: at,
    }
}

fn provider_incident(
    id: &str,
    created: chrono::DateTime<Utc>,
    updated: Option<chrono::DateTime<Utc>>,
    resolved: Option<chrono::DateTime<Utc>>,
) -> vigil::vocab::provider_status::ProviderIncident {
    vigil::vocab::provider_status::ProviderIncident {
        provider: "openai".into(),
        id: id.into(),
        name: format!("Elevated errors ({id})"),
        status: if resolved.is_some() { "resolved" } else { "investigating" }.into(),
        impact: "minor".into(),
        created_at: created,
        updated_at: updated,
        resolved_at: resolved,
        components: vec!["Chat Completions".into()],
        shortlink: None,
    }
}

fn component_at(id: &str, at: chrono::DateTime<Utc>) -> vigil::vocab::provider_status::ProviderComponent {
    vigil::vocab::provider_status::ProviderComponent {
        provider: "openai".into(),
        id: id.into(),
        name: format!("Component {id}"),
        status: "operational".into(),
        updated_at: Some(at),
    }
}

async fn every_table_is_pruned_by_its_own_clock_in_bounded_batches(fx: Fixture) {
    let now = micros(Utc::now());
    let (old, fresh, cutoff) = (now - Duration::days(10), now - Duration::hours(1), now - Duration::days(5));
    let (far, later) = (old - Duration::days(1), now + Duration::days(1));
    let s = fx.store.as_ref();

    s.upsert_rollups(&[rollup_at(old, "eu"), rollup_at(fresh, "eu")]).await.expect("rollups");
    assert_eq!(s.prune(Prune::Rollups, cutoff, 100).await.expect("prune"), 1);
    assert_eq!(s.rollups_since(None, far).await.expect("read"), vec![rollup_at(fresh, "eu")]);

    // Delivered or abandoned long ago: removed. Pending however old, or done recently: kept.
    let (delivered, abandoned, pending, recent) = (
        outbox_at(old, 1),
        outbox_at(old + Duration::seconds(1), 2),
        outbox_at(old + Duration::seconds(2), 3),
        outbox_at(old + Duration::seconds(3), 4),
    );
    s.enqueue(&[delivered.clone(), abandoned.clone(), pending.clone(), recent.clone()]).await.expect("enqueue");
    s.mark_delivered(delivered.id, old + Duration::minutes(1)).await.expect("delivered");
    s.mark_abandoned(abandoned.id, old + Duration::hours(24), "HTTP 400").await.expect("abandoned");
    s.mark_delivered(recent.id, fresh).await.expect("delivered recently");
    assert_eq!(s.prune(Prune::Outbox, cutoff, 100).await.expect("prune"), 2);
    let left: Vec<_> = s.outbox_between(None, far, later).await.expect("read").into_iter().map(|i| i.id).collect();
    assert_eq!(left, vec![pending.id, recent.id]);
    assert_eq!(s.outbox_depth().await.expect("depth"), 1, "the pending item still waits for delivery");

    // Bounded batches: each call removes at most `limit` rows.
    for k in 0..3 {
        s.append_transition(&transition_at(old + Duration::seconds(k))).await.expect("append");
    }
    s.append_transition(&transition_at(fresh)).await.expect("append");
    assert_eq!(s.prune(Prune::BreakerTransitions, cutoff, 2).await.expect("first batch"), 2);
    assert_eq!(s.prune(Prune::BreakerTransitions, cutoff, 2).await.expect("second batch"), 1);
    assert_eq!(s.prune(Prune::BreakerTransitions, cutoff, 2).await.expect("nothing left"), 0);
    assert_eq!(s.transitions_between(None, far, later).await.expect("read"), vec![transition_at(fresh)]);

    s.insert_balance(&reading_at(old, 50.0)).await.expect("reading");
    s.insert_balance(&reading_at(fresh, 40.0)).await.expect("reading");
    assert_eq!(s.prune(Prune::CreditReadings, cutoff, 100).await.expect("prune"), 1);
    assert_eq!(s.balances("openrouter", far).await.expect("read"), vec![reading_at(fresh, 40.0)]);

    s.publish_target_status(&[status_at("ap", old), status_at("eu", fresh)]).await.expect("publish");
    assert_eq!(s.prune(Prune::TargetStatus, cutoff, 100).await.expect("prune"), 1);
    assert_eq!(s.target_statuses(far, None).await.expect("read"), vec![status_at("eu", fresh)]);

    s.claim_incident("vigil:k1", "ap", old, old + Duration::seconds(65)).await.expect("claim");
    s.claim_incident("vigil:k2", "eu", now, now + Duration::seconds(65)).await.expect("claim");
    assert_eq!(s.prune(Prune::IncidentLeases, cutoff, 100).await.expect("prune"), 1);
    let leases = fx.text("SELECT min(incident) || ' ' || max(incident) FROM incident_lease").await;
    assert_eq!(leases.as_deref(), Some("vigil:k2 vigil:k2"), "the lease a dead instance left is gone");

    s.record_sighting("vigil:k1", "ap", true, old).await.expect("sighting");
    s.record_sighting("vigil:k1", "eu", true, fresh).await.expect("sighting");
    assert_eq!(s.prune(Prune::IncidentSightings, cutoff, 100).await.expect("prune"), 1);
    assert_eq!(
        s.sightings("vigil:k1").await.expect("read"),
        vec![Sighting { region: "eu".into(), firing: true, updated_at: fresh }]
    );

    // The store stamps alert state itself: a region that stopped writing before the cutoff goes.
    s.save_alert_state("gone", &state(&serde_json::json!({"firing": {}}))).await.expect("save");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let between = Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    s.save_alert_state("eu", &state(&serde_json::json!({"firing": {"x": 1}}))).await.expect("save");
    assert_eq!(s.prune(Prune::AlertState, between, 100).await.expect("prune"), 1);
    assert_eq!(s.load_alert_state("gone").await.expect("load"), None);
    assert_eq!(load_state(s, "eu").await, Some(serde_json::json!({"firing": {"x": 1}})));

    let resolved_long_ago = provider_incident("a", old, Some(old), Some(old + Duration::hours(2)));
    let silent_since = provider_incident("b", old, None, None);
    let still_updated = provider_incident("c", old + Duration::seconds(1), Some(fresh), None);
    let resolved_lately = provider_incident("d", old + Duration::seconds(2), Some(fresh), Some(fresh));
    s.upsert_provider_incidents(&[resolved_long_ago, silent_since, still_updated.clone(), resolved_lately.clone()])
        .await
        .expect("incidents");
    assert_eq!(s.prune(Prune::ProviderIncidents, cutoff, 100).await.expect("prune"), 2);
    assert_eq!(
        s.provider_incidents_between(None, far, later).await.expect("read"),
        vec![still_updated, resolved_lately]
    );

    s.upsert_provider_components(&[component_at("x", old), component_at("y", fresh)]).await.expect("components");
    assert_eq!(s.prune(Prune::ProviderComponents, cutoff, 100).await.expect("prune"), 1);
    assert_eq!(s.provider_components("openai").await.expect("read"), vec![component_at("y", fresh)]);

    let drill = |n: u128, until: chrono::DateTime<Utc>| vigil::vocab::drill::Drill {
        id: uuid::Uuid::from_u128(n),
        chain: "chat".into(),
        target: "openai".into(),
        region: "eu".into(),
        started_at: until - Duration::minutes(10),
        until,
        ended_at: None,
    };
    s.start_drill(&drill(1, old)).await.expect("drill");
    s.start_drill(&drill(2, fresh)).await.expect("drill");
    assert_eq!(s.prune(Prune::Drills, cutoff, 100).await.expect("prune"), 1);
    assert_eq!(s.drills(old - Duration::days(1)).await.expect("read"), vec![drill(2, fresh)]);
}

async fn the_retention_job_removes_what_its_policy_expires_from_every_table(fx: Fixture) {
    use vigil::io::store::retention::{run_once, Policy};
    let config = vigil::config::Config::from_toml(
        "[storage.retention]\nbatch_size = 100\nbreaker_transitions_days = 20\n",
        &std::collections::BTreeMap::<String, String>::new(),
    )
    .expect("config");
    let policy = Policy::from_config(&config.storage);
    assert_eq!((policy.samples_days, policy.tables.rollups_days, policy.tables.outbox_days), (30, 400, 30));
    let now = micros(Utc::now());
    let days = Duration::days;
    let s = fx.store.as_ref();
    let t = target("groq", "llama-3.1-8b-instant", None, "eu");
    s.insert_samples(&[bare_sample(t.clone(), now - days(40), Outcome::Ok), bare_sample(t, now, Outcome::Ok)])
        .await
        .expect("samples");
    s.upsert_rollups(&[rollup_at(now - days(401), "eu"), rollup_at(now - days(300), "eu")]).await.expect("rollups");
    // 250 expired transitions: three batches of at most 100.
    for k in 0..250 {
        s.append_transition(&transition_at(now - days(21) + Duration::seconds(k))).await.expect("append");
    }
    s.append_transition(&transition_at(now - days(19))).await.expect("append");
    let done = outbox_at(now - days(40), 1);
    s.enqueue(std::slice::from_ref(&done)).await.expect("enqueue");
    s.mark_delivered(done.id, now - days(31)).await.expect("delivered");
    s.insert_balance(&reading_at(now - days(91), 1.0)).await.expect("reading");
    s.insert_balance(&reading_at(now - days(89), 1.0)).await.expect("reading");
    s.upsert_provider_incidents(&[provider_incident("z", now - days(200), None, Some(now - days(181)))])
        .await
        .expect("incident");

    let stop = tokio_util::sync::CancellationToken::new();
    let report = run_once(s, &policy, now, &stop).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    for (table, removed) in [
        ("samples", 1),
        ("rollups", 1),
        ("breaker_transitions", 250),
        ("alert_outbox", 1),
        ("credit_balances", 1),
        ("provider_incidents", 1),
        ("alert_state", 0),
    ] {
        assert_eq!(report.removed_from(table), removed, "{table}: {report:?}");
    }
    assert_eq!(s.count_samples(&SampleQuery::default()).await.expect("count"), 1);
    assert_eq!(s.rollups_since(None, now - days(500)).await.expect("read").len(), 1);
    assert_eq!(s.transitions_between(None, now - days(30), now).await.expect("read").len(), 1);
    assert_eq!(s.balances("openrouter", now - days(100)).await.expect("read").len(), 1);
    assert!(s.outbox_between(None, now - days(50), now).await.expect("read").is_empty());

    let again = run_once(s, &policy, now, &stop).await;
    assert_eq!(again.removed.iter().map(|(_, n)| n).sum::<u64>(), 0, "a second run finds nothing: {again:?}");
}

fn canary_run(
    t: vigil::vocab::target::Target,
    at: chrono::DateTime<Utc>,
    correct: u32,
) -> vigil::vocab::canary::CanaryRun {
    vigil::vocab::canary::CanaryRun {
        sample: full_sample(t, at),
        prompt_version: 1,
        correct,
        total: 6,
        answers_fingerprint: format!("{correct:016x}"),
        answers: vec!["391".into(), "944".into(), "9".into(), "3".into(), "YRANAC".into(), "it's \"2,3\"\n".into()],
        identity: vigil::vocab::canary::ModelIdentity {
            model: Some("gpt-4o-2024-08-06".into()),
            system_fingerprint: Some("fp_0123".into()),
            upstream: Some("DeepInfra".into()),
        },
        logprobs: Some(vigil::vocab::canary::Logprobs { tokens: 12, sum: -0.375 }),
    }
}

fn check_run(
    t: vigil::vocab::target::Target,
    at: chrono::DateTime<Utc>,
    verdict: vigil::vocab::check::CheckVerdict,
) -> vigil::vocab::check::CheckRun {
    vigil::vocab::check::CheckRun {
        sample: full_sample(t, at),
        check: "refund-policy".into(),
        verdict,
        why: "asked for \"yes\", got \"no, it's 'never'\"\n".into(),
        answer: "No, it's 'never'. ünïcode ✓".into(),
    }
}

async fn check_runs_round_trip_newest_last_by_region_and_purge(fx: Fixture) {
    use vigil::vocab::check::CheckVerdict;
    let start = Utc::now().duration_trunc(Duration::seconds(1)).expect("trunc") - Duration::hours(2);
    let eu = target("openai", "gpt-4o", None, "eu");
    let us = target("openai", "gpt-4o", None, "us");
    let verdicts = [CheckVerdict::Failed, CheckVerdict::Passed, CheckVerdict::Failed, CheckVerdict::Passed];
    let runs: Vec<_> = verdicts
        .iter()
        .enumerate()
        .map(|(i, v)| check_run(eu.clone(), start + Duration::minutes(15 * i as i64), *v))
        .collect();
    let mut bare = check_run(us.clone(), start + Duration::minutes(5), CheckVerdict::Error);
    bare.sample = bare_sample(us, start + Duration::minutes(5), Outcome::Timeout);
    bare.why = "the request failed (timeout)".into();
    bare.answer = String::new();
    let mut all = runs.clone();
    all.push(bare.clone());
    assert_eq!(fx.store.insert_check_runs(&all).await.expect("insert"), 5);
    assert_eq!(fx.store.insert_check_runs(&all).await.expect("replay"), 0, "idempotent on the run id");

    let eu_back = fx.store.check_runs(Some("eu"), start, 100).await.expect("read eu");
    assert_eq!(eu_back, runs, "every field round-trips, oldest first");
    let newest = fx.store.check_runs(Some("eu"), start, 2).await.expect("read newest");
    assert_eq!(newest, runs[2..].to_vec(), "the limit keeps the newest, still oldest first");
    let every = fx.store.check_runs(None, start, 100).await.expect("read all");
    assert_eq!(every.len(), 5);
    assert!(every.contains(&bare), "a failed request with nulls round-trips");
    let samples = fx.store.count_samples(&SampleQuery::default()).await.expect("count samples");
    assert_eq!(samples, 0, "check runs never land in samples");

    let removed = fx.store.purge_check_runs_before(start + Duration::minutes(20)).await.expect("purge");
    assert_eq!(removed, 3);
    assert_eq!(fx.store.check_runs(None, start, 100).await.expect("read after").len(), 2);
}

async fn workload_runs_round_trip_newest_last_by_region_and_purge(fx: Fixture) {
    use vigil::vocab::workload::WorkloadRun;
    let start = Utc::now().duration_trunc(Duration::seconds(1)).expect("trunc") - Duration::hours(2);
    let eu = target("openai", "gpt-4o", None, "eu");
    let us = target("openai", "gpt-4o", None, "us");
    let runs: Vec<_> = [8000u32, 200_000, 8000, 256]
        .iter()
        .enumerate()
        .map(|(i, size)| WorkloadRun {
            sample: full_sample(eu.clone(), start + Duration::minutes(15 * i as i64)),
            input_tokens: *size,
        })
        .collect();
    let bare =
        WorkloadRun { sample: bare_sample(us, start + Duration::minutes(5), Outcome::Timeout), input_tokens: 8000 };
    let mut all = runs.clone();
    all.push(bare.clone());
    assert_eq!(fx.store.insert_workload_runs(&all).await.expect("insert"), 5);
    assert_eq!(fx.store.insert_workload_runs(&all).await.expect("replay"), 0, "idempotent on the run id");

    let eu_back = fx.store.workload_runs(Some("eu"), start, 100).await.expect("read eu");
    assert_eq!(eu_back, runs, "every field and the size asked round-trip, oldest first");
    let newest = fx.store.workload_runs(Some("eu"), start, 2).await.expect("read newest");
    assert_eq!(newest, runs[2..].to_vec(), "the limit keeps the newest, still oldest first");
    let every = fx.store.workload_runs(None, start, 100).await.expect("read all");
    assert_eq!(every.len(), 5);
    assert!(every.contains(&bare), "a failed run with nulls round-trips");
    let samples = fx.store.count_samples(&SampleQuery::default()).await.expect("count samples");
    assert_eq!(samples, 0, "workload runs never land in samples");

    let removed = fx.store.purge_workload_runs_before(start + Duration::minutes(20)).await.expect("purge");
    assert_eq!(removed, 3);
    assert_eq!(fx.store.workload_runs(None, start, 100).await.expect("read after").len(), 2);
}

async fn canary_runs_round_trip_newest_last_by_region_and_purge(fx: Fixture) {
    let start = Utc::now().duration_trunc(Duration::seconds(1)).expect("trunc") - Duration::hours(2);
    let eu = target("openai", "gpt-4o", None, "eu");
    let us = target("openai", "gpt-4o", None, "us");
    let runs: Vec<_> =
        (0..6).map(|i| canary_run(eu.clone(), start + Duration::minutes(15 * i), 6 - i as u32)).collect();
    let mut bare = canary_run(us.clone(), start + Duration::minutes(5), 0);
    bare.sample = bare_sample(us, start + Duration::minutes(5), Outcome::Timeout);
    bare.total = 0;
    bare.answers = Vec::new();
    bare.answers_fingerprint = String::new();
    bare.identity = Default::default();
    bare.logprobs = None;
    let mut all = runs.clone();
    all.push(bare.clone());
    assert_eq!(fx.store.insert_canary_runs(&all).await.expect("insert"), 7);
    assert_eq!(fx.store.insert_canary_runs(&all).await.expect("replay"), 0, "idempotent on the run id");

    let eu_back = fx.store.canary_runs(Some("eu"), start, 100).await.expect("read eu");
    assert_eq!(eu_back, runs, "every field round-trips, oldest first");
    let newest = fx.store.canary_runs(Some("eu"), start, 2).await.expect("read newest");
    assert_eq!(newest, runs[4..].to_vec(), "the limit keeps the newest, still oldest first");
    let since = fx.store.canary_runs(None, start + Duration::minutes(10), 100).await.expect("read since");
    assert_eq!(since.len(), 5);
    let every = fx.store.canary_runs(None, start, 100).await.expect("read all");
    assert_eq!(every.len(), 7);
    assert!(every.contains(&bare), "a failed run with nulls round-trips");
    let samples = fx.store.count_samples(&SampleQuery::default()).await.expect("count samples");
    assert_eq!(samples, 0, "canary runs never land in samples");

    let removed = fx.store.purge_canary_runs_before(start + Duration::minutes(20)).await.expect("purge");
    assert_eq!(removed, 3);
    assert_eq!(fx.store.canary_runs(None, start, 100).await.expect("read after").len(), 4);
}
