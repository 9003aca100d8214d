//! A replica of a region: one running instance among those sharing a region's targets through
//! the database (`members`). Written by its own heartbeat, read by every instance of the region.

use chrono::{DateTime, Utc};

/// One instance's row in `members`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The region it probes from.
    pub region: String,
    /// Its id, new at every start (a restart is a new member).
    pub id: String,
    /// The host it runs on, for operators (not used to decide anything).
    pub host: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its latest heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// From when it takes its share of the region's targets: a joining member names a moment
    /// far enough ahead that every member has read its row by then, so each target changes
    /// hands at one scheduled probe, never probed twice or skipped.
    pub active_from: DateTime<Utc>,
}
