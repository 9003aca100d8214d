//! What a stopping daemon's sample writer and storage link still hold in memory when neither
//! storage nor the spool takes it (the database dark and the spool's disk full), kept by the
//! process for the daemon a reload starts next. Held items used to end with the stopped daemon;
//! now they end only with the process, which reports them lost at its exit ([`Carry::give_up`]).

use super::link::Record;
use crate::vocab::records::StateJson;
use crate::vocab::sample::Sample;
use std::sync::{Arc, Mutex, MutexGuard};

/// The process's slot for held samples and records across reloads; clones share it.
#[derive(Clone, Default)]
pub struct Carry(Arc<Mutex<Carried>>);

#[derive(Default)]
struct Carried {
    /// Samples, oldest first.
    samples: Vec<Sample>,
    /// Ordered records, oldest first: behind everything spooled, ahead of anything newer.
    records: Vec<Record>,
}

impl Carry {
    fn lock(&self) -> MutexGuard<'_, Carried> {
        // Plain vectors: a panic elsewhere while it was held leaves them whole.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Leaves a stopping writer's held samples for the next one.
    pub fn leave_samples(&self, samples: Vec<Sample>) {
        self.lock().samples.extend(samples);
    }

    /// Takes the samples an earlier writer left; they are older than anything the caller holds.
    pub fn take_samples(&self) -> Vec<Sample> {
        std::mem::take(&mut self.lock().samples)
    }

    /// Leaves a stopping link's held records for the next one.
    pub fn leave_records(&self, records: Vec<Record>) {
        self.lock().records.extend(records);
    }

    /// Takes the records an earlier link left, oldest first.
    pub fn take_records(&self) -> Vec<Record> {
        std::mem::take(&mut self.lock().records)
    }

    /// The newest engine state of `region` among the records left: newer than anything spooled
    /// or stored, so a start restores it first (see `link::newest_spooled_alert_state`).
    pub fn newest_alert_state(&self, region: &str) -> Option<StateJson> {
        self.lock().records.iter().rev().find_map(|r| super::link::alert_state_of(r, region)).cloned()
    }

    /// How many samples and records wait for the next daemon.
    pub fn counts(&self) -> (usize, usize) {
        let c = self.lock();
        (c.samples.len(), c.records.len())
    }

    /// At the process's exit: reports what is still left as lost (no daemon follows to store
    /// it) and empties the slot; returns the samples and records lost.
    pub fn give_up(&self) -> (usize, usize) {
        let (samples, records) = {
            let mut c = self.lock();
            (std::mem::take(&mut c.samples).len(), std::mem::take(&mut c.records).len())
        };
        if samples > 0 {
            tracing::error!(
                lost = samples,
                "samples held in memory at the exit could be neither spooled nor stored; they are lost"
            );
        }
        if records > 0 {
            tracing::error!(
                lost = records,
                "records held in memory at the exit could be neither spooled nor stored; they are lost"
            );
        }
        (samples, records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(n: u128) -> Record {
        Record::Outbox(vec![super::super::link::test_item(n)])
    }

    fn state(v: u32) -> StateJson {
        StateJson::of(&serde_json::json!({ "v": v })).expect("json")
    }

    #[test]
    fn records_come_back_oldest_first_across_leaves_and_the_newest_state_is_found() {
        let carry = Carry::default();
        carry.leave_records(vec![outbox(1), Record::Evaluated { region: "eu".into(), state: state(1), items: vec![] }]);
        carry.leave_records(vec![Record::AlertState { region: "eu".into(), state: state(2) }, outbox(2)]);
        assert_eq!(carry.newest_alert_state("eu").map(|s| s.as_str().to_string()), Some(r#"{"v":2}"#.to_string()));
        assert!(carry.newest_alert_state("us").is_none());
        assert_eq!(carry.counts(), (0, 4));
        let back = carry.take_records();
        assert!(matches!(&back[0], Record::Outbox(i) if i[0].id.as_u128() == 1));
        assert!(matches!(&back[3], Record::Outbox(i) if i[0].id.as_u128() == 2));
        assert_eq!(carry.counts(), (0, 0), "taken once");
    }

    #[test]
    fn what_is_left_at_the_exit_is_counted_lost_once() {
        let carry = Carry::default();
        carry.leave_records(vec![outbox(1)]);
        let shared = carry.clone();
        assert_eq!(shared.give_up(), (0, 1));
        assert_eq!(carry.give_up(), (0, 0));
    }
}
