//! Keeps vigil from being half-alive: heartbeats of the sample road that `/readyz` checks (a
//! sample processed and a sample stored or spooled recently), the supervision of the
//! daemon's long-running tasks (one that stops before shutdown stops the whole process with an
//! error, so systemd or Kubernetes restarts it, instead of serving "ready" with a dead pipeline),
//! and what systemd is told: `READY=1` the first time `/readyz` would answer 200, `WATCHDOG=1`
//! only while the sample road beats (a hung daemon goes quiet and is restarted).

use crate::io::systemd::Systemd;
use crate::vocab::ready::{Liveness, ReadyCheck};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A long-running task of the daemon, named for the log.
pub struct Task {
    /// What it does (`pipeline`, `writer`, …).
    pub name: &'static str,
    /// Its handle.
    pub handle: JoinHandle<()>,
    /// It may return early with nothing to do (a poller with nothing configured); a panic still counts.
    pub may_finish: bool,
}

impl Task {
    /// Spawns `fut` as a named task that must run until shutdown.
    pub fn spawn(name: &'static str, fut: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Task { name, handle: tokio::spawn(fut), may_finish: false }
    }

    /// Spawns `fut` as a named task that may end early when it has nothing to do.
    pub fn spawn_optional(name: &'static str, fut: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Task { name, handle: tokio::spawn(fut), may_finish: true }
    }
}

/// Why a task ended before it was asked to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Died {
    /// The task.
    pub task: &'static str,
    /// Its panic message, or that it returned.
    pub why: String,
}

/// Waits until the first of `tasks` dies and says which and why: a panic, or a return before
/// `shutdown` of a task that must run until then (an optional task that returns, or any task
/// returning once shutdown began, is dropped from the list). Never completes while none dies.
/// Cancel-safe: the handles stay in `tasks`.
pub async fn first_death(tasks: &mut Vec<Task>, shutdown: &CancellationToken) -> Died {
    loop {
        if tasks.is_empty() {
            return std::future::pending().await;
        }
        let (result, i, _) = futures::future::select_all(tasks.iter_mut().map(|t| &mut t.handle)).await;
        let why = match result {
            Ok(()) if tasks[i].may_finish || shutdown.is_cancelled() => {
                tasks.swap_remove(i);
                continue;
            }
            Ok(()) => "returned before shutdown".to_string(),
            Err(e) if e.is_panic() => format!("panicked: {}", panic_message(e.into_panic())),
            Err(e) => e.to_string(),
        };
        let task = tasks.swap_remove(i).name;
        return Died { task, why };
    }
}

/// Waits for the named task until `deadline`, then leaves it behind (aborted) and says so: a
/// stop has a bound. A task not (or no longer) in `tasks` is skipped.
pub async fn finish(tasks: &mut Vec<Task>, name: &'static str, deadline: tokio::time::Instant) {
    let Some(i) = tasks.iter().position(|t| t.name == name) else { return };
    let mut task = tasks.swap_remove(i);
    match tokio::time::timeout_at(deadline, &mut task.handle).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_panic() => {
            tracing::error!(task = name, why = %panic_message(e.into_panic()), "task panicked while stopping")
        }
        Ok(Err(e)) => tracing::error!(task = name, error = %e, "task failed while stopping"),
        Err(_) => {
            task.handle.abort();
            tracing::warn!(task = name, "task still busy at the stop bound; abandoned");
        }
    }
}

/// The text of a panic payload (`&str` or `String`), else a placeholder.
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p.downcast_ref::<&str>().map_or_else(|| "(non-text panic payload)".to_string(), |s| s.to_string()),
    }
}

/// How often systemd is told while not yet ready: readiness is reported within this.
const STARTING_TICK: Duration = Duration::from_secs(1);

/// Once ready and without a watchdog, how often a changed status line is passed on.
const STATUS_TICK: Duration = Duration::from_secs(5);

/// While alive but not ready, each look lets the start take this much longer (systemd's
/// `TimeoutStartSec=` then bounds only a start that stopped beating, e.g. storage is down at
/// start: vigil probes and spools meanwhile, which is not a hung start).
pub const START_EXTENSION: Duration = Duration::from_secs(30);

/// One message to systemd, decided at one look at the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tell {
    /// `READY=1`, with this status line.
    Ready(String),
    /// `WATCHDOG=1`.
    KeepAlive,
    /// `EXTEND_TIMEOUT_USEC=`[`START_EXTENSION`].
    ExtendStart,
    /// `STATUS=` this line.
    Status(String),
}

/// What to tell systemd given whether every `/readyz` check passes (`ready`), whether the
/// sample road beats (`alive`), and whether `READY=1` already went out. Pure, for the tests.
pub fn tell(ready: &Result<(), String>, alive: &Result<(), String>, ready_sent: bool) -> Vec<Tell> {
    let mut out = Vec::new();
    match (alive, ready_sent, ready) {
        (Err(why), _, _) => out.push(Tell::Status(format!("sample road stalled: {why}"))),
        (Ok(()), false, Ok(())) => {
            out.push(Tell::KeepAlive);
            out.push(Tell::Ready("ready".into()));
        }
        (Ok(()), false, Err(why)) => {
            out.push(Tell::KeepAlive);
            out.push(Tell::ExtendStart);
            out.push(Tell::Status(format!("starting, not ready: {why}")));
        }
        (Ok(()), true, Ok(())) => {
            out.push(Tell::KeepAlive);
            out.push(Tell::Status("ready".into()));
        }
        (Ok(()), true, Err(why)) => {
            out.push(Tell::KeepAlive);
            out.push(Tell::Status(format!("not ready: {why}")));
        }
    }
    out
}

/// Tells `systemd` how the daemon is until `shutdown`: every second until ready, then every
/// half watchdog timeout (systemd's advice); a status line only when it changed.
pub async fn notify_systemd(
    systemd: Systemd,
    checks: Vec<Arc<dyn ReadyCheck>>,
    liveness: Arc<Liveness>,
    shutdown: CancellationToken,
) {
    let settled = systemd.watchdog.map_or(STATUS_TICK, |w| (w / 2).max(Duration::from_millis(100)));
    let mut last_status = String::new();
    loop {
        let ready: Result<(), String> = {
            let reasons: Vec<String> = checks.iter().filter_map(|c| c.ready().err()).collect();
            if reasons.is_empty() {
                Ok(())
            } else {
                Err(reasons.join("; "))
            }
        };
        let alive = liveness.ready();
        for t in tell(&ready, &alive, systemd.ready_sent()) {
            match t {
                Tell::Ready(status) => {
                    if systemd.ready(&status) {
                        tracing::info!("told systemd: ready");
                    }
                    last_status = status;
                }
                Tell::KeepAlive if systemd.watchdog.is_some() => systemd.watchdog(),
                Tell::KeepAlive => {}
                Tell::ExtendStart => systemd.extend_start(START_EXTENSION),
                Tell::Status(status) if status != last_status => {
                    systemd.status(&status);
                    last_status = status;
                }
                Tell::Status(_) => {}
            }
        }
        let tick = if systemd.ready_sent() { settled } else { STARTING_TICK.min(settled) };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(tick) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::ready::Liveness;
    use chrono::{DateTime, Utc};
    use std::time::Duration;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z").expect("time").with_timezone(&Utc)
            + chrono::Duration::seconds(secs)
    }

    #[test]
    fn a_road_that_beats_is_ready_and_a_silent_one_says_which_part_stopped() {
        let l = Liveness::new(t(0), Duration::from_secs(60), Duration::from_secs(1));
        assert_eq!(l.check(t(100)), Ok(()), "within two intervals of start");
        let e = l.check(t(121)).expect_err("nothing processed for over two intervals");
        assert!(e.starts_with("no sample processed since start at 2026-12-01T00:00:00Z"), "{e}");
        l.processed(t(110));
        let e = l.check(t(122)).expect_err("processed, but nothing kept");
        assert!(e.contains("no sample stored or spooled since start"), "{e}");
        l.kept(t(111));
        assert_eq!(l.check(t(200)), Ok(()));
        let e = l.check(t(300)).expect_err("silent again");
        assert!(e.contains("since 2026-12-01T00:01:50Z (the pipeline is stalled)"), "{e}");
    }

    #[test]
    fn systemd_hears_ready_once_ready_and_keep_alives_only_while_the_road_beats() {
        let ok = Ok(());
        let no = |why: &str| Err(why.to_string());
        // Alive, storage still down: no READY, the start extended, the reason shown.
        assert_eq!(
            tell(&no("storage unavailable"), &ok, false),
            [Tell::KeepAlive, Tell::ExtendStart, Tell::Status("starting, not ready: storage unavailable".into())]
        );
        // The first look with every check passing says READY.
        assert_eq!(tell(&ok, &ok, false), [Tell::KeepAlive, Tell::Ready("ready".into())]);
        assert_eq!(tell(&ok, &ok, true), [Tell::KeepAlive, Tell::Status("ready".into())]);
        // Unready later (storage lost): still alive, so still kept alive; never a second READY.
        assert_eq!(
            tell(&no("storage unavailable"), &ok, true),
            [Tell::KeepAlive, Tell::Status("not ready: storage unavailable".into())]
        );
        // A stalled road gets no keep-alive, no extension and no READY, whatever else holds.
        for (ready, sent) in [(ok.clone(), false), (ok.clone(), true), (no("x"), false), (no("x"), true)] {
            let said = tell(&ready, &no("the pipeline is stalled"), sent);
            assert_eq!(said, [Tell::Status("sample road stalled: the pipeline is stalled".into())]);
        }
    }

    #[tokio::test]
    async fn the_first_task_to_die_is_named_with_its_panic_message() {
        let mut tasks = vec![
            Task::spawn("forever", std::future::pending()),
            Task::spawn("pipeline", async { panic!("DateTime + TimeDelta overflowed") }),
        ];
        let died = first_death(&mut tasks, &CancellationToken::new()).await;
        assert_eq!(died, Died { task: "pipeline", why: "panicked: DateTime + TimeDelta overflowed".into() });
        let mut returned = vec![Task::spawn_optional("credit poller", async {}), Task::spawn("writer", async {})];
        assert_eq!(
            first_death(&mut returned, &CancellationToken::new()).await,
            Died { task: "writer", why: "returned before shutdown".into() }
        );
        let mut quiet =
            vec![Task::spawn_optional("credit poller", async {}), Task::spawn("forever", std::future::pending())];
        let waited =
            tokio::time::timeout(Duration::from_millis(50), first_death(&mut quiet, &CancellationToken::new())).await;
        assert!(waited.is_err(), "an optional task that returns is no death");
        assert_eq!(quiet.len(), 1);
        let stopping = CancellationToken::new();
        stopping.cancel();
        let mut ending = vec![Task::spawn("upkeep", async {}), Task::spawn("forever", std::future::pending())];
        let waited = tokio::time::timeout(Duration::from_millis(50), first_death(&mut ending, &stopping)).await;
        assert!(waited.is_err(), "returning once shutdown began is no death");
    }
}
