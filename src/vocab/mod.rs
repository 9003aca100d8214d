//! The ground deck: the words every other deck shares (a target and its sample, the breaker's
//! state, a target's health, stored records, notices, readiness, rate-limit headroom, a
//! region's members). It imports nothing of vigil's own.

pub mod breaker;
pub mod canary;
pub mod capability;
pub mod chain_head;
pub mod check;
pub mod drill;
pub mod health;
pub mod member;
pub mod name;
pub mod notice;
pub mod provider_status;
pub mod ratelimit;
pub mod ready;
pub mod records;
pub mod sample;
pub mod target;
pub mod workload;
