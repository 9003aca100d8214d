//! systemd's notification socket (`sd_notify(3)`, through the `sd-notify` crate): readiness,
//! status text, start-timeout extensions, watchdog keep-alives and the stop. Every call is a
//! no-op when `NOTIFY_SOCKET` is unset (not under systemd with `Type=notify`), and a failed send
//! is logged, never fatal: vigil runs the same with or without a service manager listening.

use sd_notify::NotifyState;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `READY=1` goes out once per process: a reload builds a new daemon, not a new start.
static READY_SENT: AtomicBool = AtomicBool::new(false);

/// A failed send is logged once, not at every keep-alive.
static SEND_FAILED: AtomicBool = AtomicBool::new(false);

/// The service manager's socket, when there is one, and its watchdog timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Systemd {
    /// Watchdog timeout systemd set (`WATCHDOG_USEC`, `WatchdogSec=`), when enabled for this process.
    pub watchdog: Option<Duration>,
}

impl Systemd {
    /// The service manager of this process: `None` when `NOTIFY_SOCKET` is unset.
    pub fn from_env() -> Option<Systemd> {
        std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty())?;
        // The variables stay set (the unsetting variants are unsafe once threads run), so a
        // reload reads the same service manager again; vigil starts no child that would inherit them.
        Some(Systemd { watchdog: sd_notify::watchdog_enabled().filter(|d| !d.is_zero()) })
    }

    /// `READY=1` (with a status line), unless already sent by this process; true when it went out now.
    pub fn ready(&self, status: &str) -> bool {
        if READY_SENT.swap(true, Ordering::AcqRel) {
            return false;
        }
        send(&[NotifyState::Ready, NotifyState::Status(status)]);
        true
    }

    /// Whether this process has told systemd it is ready.
    pub fn ready_sent(&self) -> bool {
        READY_SENT.load(Ordering::Acquire)
    }

    /// `STATUS=…`: the line `systemctl status` shows.
    pub fn status(&self, status: &str) {
        send(&[NotifyState::Status(status)]);
    }

    /// `EXTEND_TIMEOUT_USEC=…`: the start may take `by` longer from now (alive, not yet ready).
    pub fn extend_start(&self, by: Duration) {
        let usec = u32::try_from(by.as_micros()).unwrap_or(u32::MAX);
        send(&[NotifyState::ExtendTimeoutUsec(usec)]);
    }

    /// `WATCHDOG=1`: the keep-alive.
    pub fn watchdog(&self) {
        send(&[NotifyState::Watchdog]);
    }

    /// `STOPPING=1`: the drain began.
    pub fn stopping(&self) {
        send(&[NotifyState::Stopping, NotifyState::Status("stopping: draining in-flight probes")]);
    }
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        if !SEND_FAILED.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "cannot notify systemd (NOTIFY_SOCKET); going on without it");
        }
    }
}
