//! The `log` channel: writes each notification to vigil's own log instead of sending it. Only
//! `vigil run --demo` adds it, so the demo's alerts are seen without any channel configured.

use super::notifier::DeliveryError;
use super::notifier::Notifier;
use crate::decide::alert::AlertStatus;
use crate::decide::alert::Notification;
use async_trait::async_trait;
use uuid::Uuid;

/// Name of the channel in logs, metrics and the outbox.
pub const LOG_CHANNEL: &str = "log";

/// A channel that logs notifications (firing at WARN, resolved at INFO) and always accepts them.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogNotifier;

#[async_trait]
impl Notifier for LogNotifier {
    fn name(&self) -> &str {
        LOG_CHANNEL
    }

    async fn send(&self, n: &Notification, idempotency_key: Uuid) -> Result<(), DeliveryError> {
        for a in &n.alerts {
            let target = a.target.as_deref().unwrap_or("");
            let kind = a.kind.as_str();
            match n.status {
                AlertStatus::Firing => tracing::warn!(
                    channel = LOG_CHANNEL, kind, provider = %a.provider, target, region = %a.region,
                    severity = ?a.severity, reminder = n.reminder, test = n.test, id = %idempotency_key,
                    "alert firing: {}", a.summary
                ),
                // A resolved alert's summary already says so (`resolved: …`); said once here.
                AlertStatus::Resolved => tracing::info!(
                    channel = LOG_CHANNEL, kind, provider = %a.provider, target, region = %a.region,
                    id = %idempotency_key, "alert resolved: {}", a.summary.strip_prefix("resolved: ").unwrap_or(&a.summary)
                ),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::alert::{Alert, AlertKind};

    #[tokio::test]
    async fn accepts_every_notification_under_its_own_name() {
        let alert = Alert::new(AlertKind::Errors, "local", "demo-mixtral", None, "3 failed probes in a row".into());
        let n = Notification {
            incident: "vigil:demo-mixtral::".into(),
            subject: "demo-mixtral".into(),
            ..Notification::firing("k", "local", "demo-mixtral", vec![alert], chrono::Utc::now())
        };
        assert_eq!(LogNotifier.name(), "log");
        assert_eq!(LogNotifier.send(&n, Uuid::nil()).await, Ok(()));
    }

    /// The log line as a subscriber writes it, for the resolve of one alert.
    fn resolved_line(summary: &str) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
        let mut alert = Alert::new(AlertKind::Errors, "local", "demo-mixtral", None, summary.into());
        alert.status = AlertStatus::Resolved;
        let n = Notification {
            status: AlertStatus::Resolved,
            ..Notification::firing("k", "local", "demo-mixtral", vec![alert], chrono::Utc::now())
        };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        tracing::subscriber::with_default(subscriber, || {
            runtime.block_on(LogNotifier.send(&n, Uuid::nil())).expect("accepted");
        });
        let bytes = buf.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn a_resolve_says_resolved_once() {
        // The incident engine prefixes resolved summaries itself (decide::alert::incident).
        let line = resolved_line("resolved: 3 failed probes in a row");
        assert!(line.contains("alert resolved: 3 failed probes in a row"), "{line}");
        assert_eq!(line.matches("resolved:").count(), 1, "{line}");
        let line = resolved_line("3 failed probes in a row");
        assert!(line.contains("alert resolved: 3 failed probes in a row"), "{line}");
    }
}
