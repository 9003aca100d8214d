//! Where drills are started, listed and ended, for `vigil drill` and `/v1/drills` alike: each
//! request is checked against the configured chains (`decide::drill`) and goes straight to the
//! shared store, which every region's storage link reads once per probe interval.

use crate::config::chain::ChainConfig;
use crate::config::Config;
use crate::decide::drill::{self, DrillError, DrillRequest};
use crate::io::store::{Store, StoreError};
use crate::vocab::drill::Drill;
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Longest one store call of the desk may take (an HTTP request waits for it).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How far back `list` shows drills that ended.
const LISTED_FOR: chrono::Duration = chrono::Duration::hours(24);

/// Why a drill request failed.
#[derive(Debug, Error)]
pub enum DeskError {
    /// The request itself is wrong (unknown chain or target, duration, id).
    #[error(transparent)]
    Drill(#[from] DrillError),
    /// Storage failed or did not answer in time.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Starts, lists and ends drills against one store, for one region's configured chains.
pub struct DrillDesk {
    store: Arc<dyn Store>,
    chains: Vec<ChainConfig>,
    targets: Vec<Target>,
    region: String,
}

impl DrillDesk {
    /// A desk for the config's chains and this region's targets, storing into `store`.
    pub fn new(config: &Config, store: Arc<dyn Store>) -> Self {
        let targets =
            crate::io::probe::Planned::all(&config.providers, &config.region).into_iter().map(|p| p.target).collect();
        DrillDesk { store, chains: config.chains.clone(), targets, region: config.region.clone() }
    }

    async fn call<T>(&self, f: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, DeskError> {
        match tokio::time::timeout(CALL_TIMEOUT, f).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(StoreError::Unavailable(format!("no answer within {CALL_TIMEOUT:?}")).into()),
        }
    }

    /// Checks and stores a new drill; every region drops its target within one probe interval.
    pub async fn start(&self, req: &DrillRequest, now: DateTime<Utc>) -> Result<Drill, DeskError> {
        let d = drill::start(&self.chains, &self.targets, req, uuid::Uuid::new_v4(), &self.region, now)?;
        self.call(self.store.start_drill(&d)).await?;
        tracing::info!(drill = %d.id, chain = %d.chain, target = %d.target, until = %d.until, "drill started");
        Ok(d)
    }

    /// Drills running now and those that ended within the last day, oldest first.
    pub async fn list(&self, now: DateTime<Utc>) -> Result<Vec<Drill>, DeskError> {
        self.call(self.store.drills(now - LISTED_FOR)).await
    }

    /// Ends the running drill `id` (the whole id or a prefix fitting one) now.
    pub async fn end(&self, id: &str, now: DateTime<Utc>) -> Result<Drill, DeskError> {
        let running = self.call(self.store.drills(now)).await?;
        let found = drill::find(&running, id, now)?.clone();
        self.end_one(found, now).await
    }

    /// Ends every running drill of `chain` dropping `target` (as it was given) now.
    pub async fn end_matching(&self, chain: &str, target: &str, now: DateTime<Utc>) -> Result<Vec<Drill>, DeskError> {
        let running = self.call(self.store.drills(now)).await?;
        let found: Vec<Drill> =
            drill::matching(&self.chains, &running, chain, target, now)?.into_iter().cloned().collect();
        let mut ended = Vec::with_capacity(found.len());
        for d in found {
            ended.push(self.end_one(d, now).await?);
        }
        Ok(ended)
    }

    async fn end_one(&self, mut d: Drill, now: DateTime<Utc>) -> Result<Drill, DeskError> {
        // Another region may have ended it (or it ran out) since it was read.
        if !self.call(self.store.end_drill(d.id, now)).await? {
            return Err(DrillError::NoSuchDrill(d.id.to_string()).into());
        }
        d.ended_at = Some(now);
        tracing::info!(drill = %d.id, chain = %d.chain, target = %d.target, "drill ended early");
        Ok(d)
    }
}
