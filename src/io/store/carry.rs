//! What a stopping daemon's sample writer and storage link still hold in memory when neither
//! storage nor the spool takes it (the database dark and the spool's disk full), kept by the
//! process for the daemon a reload starts next: one [`Slot`] for the writer's samples, one for
//! the link's records. Held items used to end with the stopped daemon; now they end only with
//! the process, which reports them lost at its exit ([`Slot::give_up`]).

use std::sync::{Arc, Mutex, MutexGuard};

/// The process's slot for one kind of held item across reloads, oldest first; clones share it.
#[derive(Clone)]
pub struct Slot<T>(Arc<Mutex<Vec<T>>>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<T> Slot<T> {
    fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        // A plain vector: a panic elsewhere while it was held leaves it whole.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Leaves a stopping daemon's held items for the next one, behind any left before.
    pub fn leave(&self, items: Vec<T>) {
        self.lock().extend(items);
    }

    /// Takes what earlier daemons left, oldest first; older than anything the caller holds.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.lock())
    }

    /// The first `Some` of `f` over what is left, newest first.
    pub fn newest<U>(&self, f: impl FnMut(&T) -> Option<U>) -> Option<U> {
        self.lock().iter().rev().find_map(f)
    }

    /// How many items wait for the next daemon.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What a starting daemon's writer or link holds first: what earlier daemons left in `slot`
    /// (`what`: samples, records), oldest first; nothing without a slot.
    pub fn take_over(slot: Option<&Self>, what: &str) -> Vec<T> {
        let taken = slot.map(Slot::take).unwrap_or_default();
        if !taken.is_empty() {
            tracing::info!(taken = taken.len(), "{what} the previous daemon held in memory are taken over");
        }
        taken
    }

    /// At a daemon's stop: leaves `held` (`what`: samples, records), which neither storage nor
    /// the spool took, in `slot` for the next daemon; without a slot (a one-shot command) they
    /// are reported lost.
    pub fn hand_on(slot: Option<&Self>, held: Vec<T>, what: &str) {
        if held.is_empty() {
            return;
        }
        match slot {
            Some(slot) => {
                tracing::warn!(held = held.len(), "{what} held in memory at the stop are handed to the next daemon");
                slot.leave(held);
            }
            None => tracing::error!(
                lost = held.len(),
                "{what} held in memory at the stop could be neither spooled nor stored; they are lost"
            ),
        }
    }

    /// At the process's exit: reports what is still left (`what`: samples, records) as lost, as
    /// no daemon follows to store it, and empties the slot; how many were lost.
    pub fn give_up(&self, what: &str) -> usize {
        let lost = self.take().len();
        if lost > 0 {
            tracing::error!(
                lost,
                "{what} held in memory at the exit could be neither spooled nor stored; they are lost"
            );
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_back_oldest_first_across_leaves_and_are_taken_once() {
        let slot = Slot::default();
        slot.leave(vec![1, 2]);
        slot.leave(vec![3, 4]);
        assert_eq!(slot.newest(|n| (n % 2 == 1).then_some(*n)), Some(3), "newest first");
        assert_eq!(slot.len(), 4);
        assert_eq!(slot.take(), vec![1, 2, 3, 4]);
        assert!(slot.is_empty(), "taken once");
    }

    #[test]
    fn what_is_left_at_the_exit_is_counted_lost_once() {
        let slot = Slot::default();
        slot.leave(vec!["a"]);
        let shared = slot.clone();
        assert_eq!(shared.give_up("records"), 1);
        assert_eq!(slot.give_up("records"), 0);
    }
}
