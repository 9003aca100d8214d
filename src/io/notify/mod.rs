//! Notification channels behind one [`notifier::Notifier`] seam (Slack, email, PagerDuty,
//! webhook, Alertmanager, log), built from config by [`channels`], and the durable [`outbox`]
//! that delivers with retries.

pub mod alertmanager;
pub mod channels;
pub mod email;
pub(crate) mod log;
pub mod notifier;
pub mod outbox;
pub mod pagerduty;
pub mod slack;
pub mod webhook;
