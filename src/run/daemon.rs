//! The daemon's life in `vigil run`: one controller turns signals and `POST /-/reload` into
//! stops and reloads, from the first instant of the process to its exit.
//!
//! - A stop (SIGTERM, SIGINT) is never lost: at any moment — starting, running, building a
//!   reload or draining for one — it stops the daemon within [`STOP_WITHIN`], guarded as a plain
//!   stop is (past twice the bound the process exits 1).
//! - A reload (SIGHUP, `POST /-/reload`) keeps the daemon or changes it, never loses it: the new
//!   configuration is loaded, validated and built (listener bound or kept, storage opened, data
//!   directory usable, channels built) while the old daemon runs; only then does the old one
//!   drain. Anything that fails leaves it untouched and logs
//!   `new configuration refused: <key>: <why>`.
//! - A reload asked while another is under way is queued and applied once after it.
//! - What the stopped daemon's sample writer and storage link still held in memory (neither the
//!   database nor the spool's disk took it) passes to the next one through a [`Carry`] the
//!   controller keeps; only at the process's exit is what is left reported lost.

use crate::config::{Config, ConfigError};
use crate::io::http::reload::{ReloadOutcome, ReloadRequest, ReloadSender};
use crate::run::app::{App, AppError, AppOptions, Carry, Prepared, STOP_WITHIN};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Reads and validates the configuration (the file and the environment), logging what it found.
pub type Loader = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// What `vigil run` was started with.
pub struct Settings {
    /// Loads the configuration, at start and at every reload.
    pub load: Loader,
    /// The configuration file, when there is one (an empty one is refused on reload).
    pub file: Option<PathBuf>,
    /// `--demo`.
    pub demo: bool,
}

/// Why the daemon could not run or stopped with an error.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// The configuration at start is invalid (exit 2).
    #[error(transparent)]
    Config(ConfigError),
    /// The daemon could not start, or a task of it died.
    #[error(transparent)]
    App(AppError),
    /// The signal handlers could not be installed.
    #[error("signal handlers: {0}")]
    Signals(std::io::Error),
}

/// What the controller is asked.
enum Event {
    /// SIGTERM or SIGINT.
    Stop,
    /// SIGHUP (no reply) or `POST /-/reload` (its reply).
    Reload(Option<oneshot::Sender<ReloadOutcome>>),
}

/// A running daemon.
struct Running {
    shutdown: CancellationToken,
    handle: JoinHandle<Result<(), AppError>>,
    config: Config,
    listener: Held,
}

/// The listening socket the controller keeps across reloads, and the address it was bound for.
struct Held {
    addr: SocketAddr,
    socket: std::net::TcpListener,
}

impl Held {
    /// A listener for `addr`: this one's socket shared when the address is unchanged (no gap, no
    /// refused connection), else a new one bound beside it.
    async fn for_addr(addr: SocketAddr, current: Option<&Held>) -> Result<Held, AppError> {
        let bind = |source| AppError::Bind { addr, source };
        match current {
            Some(h) if h.addr == addr => Ok(Held { addr, socket: h.socket.try_clone().map_err(bind)? }),
            _ => {
                let l = tokio::net::TcpListener::bind(addr).await.map_err(bind)?;
                Ok(Held { addr, socket: l.into_std().map_err(bind)? })
            }
        }
    }
}

/// The events not yet acted on: whether a reload waits, and who waits for its outcome.
struct Inbox {
    events: mpsc::UnboundedReceiver<Event>,
    /// A reload asked while starting or reloading: applied once, after.
    queued: bool,
    replies: Vec<oneshot::Sender<ReloadOutcome>>,
}

impl Inbox {
    fn queue(&mut self, reply: Option<oneshot::Sender<ReloadOutcome>>) {
        self.queued = true;
        self.replies.extend(reply);
    }

    /// Runs `work` to its end, queueing reloads asked meanwhile; `None` when a stop came first
    /// (`work` is dropped).
    async fn during<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return Some(done),
                event = self.events.recv() => match event {
                    Some(Event::Stop) => return None,
                    Some(Event::Reload(reply)) => self.queue(reply),
                    // Never: the controller keeps a sender.
                    None => {}
                },
            }
        }
    }

    /// The next thing to do while `running` runs: a stop, a reload, or its end (a task died).
    async fn next(&mut self, running: &mut Running) -> Next {
        if self.queued {
            return Next::Reload;
        }
        loop {
            tokio::select! {
                ended = &mut running.handle => return Next::Ended(flatten(ended)),
                event = self.events.recv() => match event {
                    Some(Event::Stop) => return Next::Stop,
                    Some(Event::Reload(reply)) => {
                        self.queue(reply);
                        return Next::Reload;
                    }
                    None => {}
                },
            }
        }
    }

    /// Everyone waiting for a reload, answered `Stopping`: the daemon stops instead.
    fn stopping(&mut self) {
        answer(std::mem::take(&mut self.replies), &ReloadOutcome::Stopping);
    }
}

/// Answers everyone who asked for the reload just decided.
fn answer(waiting: Vec<oneshot::Sender<ReloadOutcome>>, outcome: &ReloadOutcome) {
    for reply in waiting {
        let _ = reply.send(outcome.clone());
    }
}

enum Next {
    Stop,
    Reload,
    Ended(Result<(), AppError>),
}

/// Runs the daemon until a stop, reloading it on request. See the module docs.
pub async fn run(settings: Settings) -> Result<(), DaemonError> {
    let (tx, events) = mpsc::unbounded_channel();
    // First of all, so no signal finds the default action (death without a drain).
    forward_signals(tx.clone()).map_err(DaemonError::Signals)?;
    let (reload_tx, reload_rx) = mpsc::channel(16);
    tokio::spawn(forward_requests(reload_rx, tx.clone()));
    let inbox = Inbox { events, queued: false, replies: Vec::new() };
    let kept = Kept { reload: reload_tx, carry: Carry::default() };
    let ended = control(&settings, inbox, &kept).await;
    kept.carry.give_up();
    // Dropped only now, so the inbox never sees its channel closed.
    drop(tx);
    ended
}

/// What the controller keeps for every daemon it runs: where `POST /-/reload` asks, and the
/// slot for what one daemon held in memory at its stop.
struct Kept {
    reload: ReloadSender,
    carry: Carry,
}

/// Starts the daemon and acts on stops and reloads until it ends.
async fn control(settings: &Settings, mut inbox: Inbox, kept: &Kept) -> Result<(), DaemonError> {
    let config = (settings.load)().map_err(DaemonError::Config)?;
    let first = inbox.during(launch(settings, config, None, kept)).await;
    let mut running = match first {
        None => {
            tracing::info!("shutdown requested while starting; nothing ran yet");
            return Ok(());
        }
        Some(started) => started.map_err(DaemonError::App)?,
    };
    loop {
        match inbox.next(&mut running).await {
            Next::Ended(result) => return result.map_err(DaemonError::App),
            Next::Stop => return stop(running).await,
            Next::Reload => match reload(settings, &mut inbox, running, kept).await? {
                Some(next) => running = next,
                None => return Ok(()),
            },
        }
    }
}

/// Builds `config` on `listener` (or a new one) and runs it.
async fn launch(
    settings: &Settings,
    config: Config,
    listener: Option<&Held>,
    kept: &Kept,
) -> Result<Running, AppError> {
    let (prepared, held) = prepare(settings, config.clone(), listener, kept).await?;
    let app = prepared.start().await?;
    Ok(spawn(app, config, held))
}

/// [`App::prepare`] on a listener for the config's address.
async fn prepare(
    settings: &Settings,
    config: Config,
    current: Option<&Held>,
    kept: &Kept,
) -> Result<(Prepared, Held), AppError> {
    let held = Held::for_addr(config.http.listen, current).await?;
    let socket = held.socket.try_clone().map_err(|source| AppError::Bind { addr: held.addr, source })?;
    let options = AppOptions {
        demo: settings.demo,
        listener: Some(socket),
        reload: Some(kept.reload.clone()),
        carry: Some(kept.carry.clone()),
        ..Default::default()
    };
    Ok((App::prepare(config, options).await?, held))
}

fn spawn(app: App, config: Config, listener: Held) -> Running {
    if let Some(addr) = app.local_addr() {
        tracing::info!(%addr, "http listening");
    }
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    Running { shutdown, handle, config, listener }
}

/// A plain stop: drain within the bound, exit 1 if the drain overran it twice over.
async fn stop(running: Running) -> Result<(), DaemonError> {
    tracing::info!("shutdown requested; draining in-flight probes");
    if let Some(systemd) = crate::io::systemd::Systemd::from_env() {
        systemd.stopping();
    }
    guard_stop();
    running.shutdown.cancel();
    flatten(running.handle.await).map_err(DaemonError::App)
}

/// The drain is bounded by [`STOP_WITHIN`]; this is the guard against a bug in it.
fn guard_stop() {
    tokio::spawn(async {
        tokio::time::sleep(STOP_WITHIN * 2).await;
        tracing::error!(bound = ?STOP_WITHIN, "stop overran its bound twice over; exiting now");
        std::process::exit(1);
    });
}

/// One reload: `Some(daemon)` to run on (the new one, or the old one untouched when refused),
/// `None` when a stop came meanwhile and the daemon is stopped.
async fn reload(
    settings: &Settings,
    inbox: &mut Inbox,
    mut running: Running,
    kept: &Kept,
) -> Result<Option<Running>, DaemonError> {
    inbox.queued = false;
    // Who asked for this reload; those asking from now on wait for the next one.
    let waiting = std::mem::take(&mut inbox.replies);
    tracing::info!("reloading the configuration");
    let built = inbox.during(build_next(settings, &running, kept)).await;
    let (prepared, held, config) = match built {
        None => {
            answer(waiting, &ReloadOutcome::Stopping);
            inbox.stopping();
            return stop(running).await.map(|()| None);
        }
        Some(Err((key, reason))) => {
            tracing::error!(%key, %reason, "new configuration refused: {key}: {reason}; the running daemon carries on");
            answer(waiting, &ReloadOutcome::Refused { key, reason });
            return Ok(Some(running));
        }
        Some(Ok(built)) => built,
    };
    // Answered before the drain: the old daemon's HTTP server gives answers in flight 2 s at most.
    answer(waiting, &ReloadOutcome::Applied);
    tracing::info!("new configuration built; draining the running daemon to apply it");
    running.shutdown.cancel();
    let drained = match inbox.during(&mut running.handle).await {
        Some(ended) => flatten(ended),
        None => {
            // The old daemon is draining already; the new one never starts.
            guard_stop();
            inbox.stopping();
            return flatten(running.handle.await).map(|()| None).map_err(DaemonError::App);
        }
    };
    if let Err(e) = drained {
        tracing::error!(error = %e, "the old daemon ended with an error while draining; starting the new one");
    }
    match inbox.during(prepared.start()).await {
        None => Ok(None),
        Some(Ok(app)) => {
            tracing::info!("configuration reloaded");
            Ok(Some(spawn(app, config, held)))
        }
        Some(Err(e)) => restore(settings, inbox, running, e, kept).await,
    }
}

/// The new configuration, loaded, checked and built while `running` goes on; or the key and
/// reason it is refused for.
async fn build_next(
    settings: &Settings,
    running: &Running,
    kept: &Kept,
) -> Result<(Prepared, Held, Config), (String, String)> {
    if let Some(file) = settings.file.as_ref().filter(|f| has_no_settings(f)) {
        let why = format!(
            "{} has no settings (empty or truncated): it would replace every setting with its default",
            file.display()
        );
        return Err(("config".into(), why));
    }
    let config = (settings.load)().map_err(|e| match e {
        ConfigError::Invalid { key, message } => (key, message),
        read @ ConfigError::Read { .. } => ("config".to_string(), read.to_string()),
        syntax @ ConfigError::Syntax { .. } => ("config".to_string(), syntax.to_string()),
    })?;
    let (prepared, held) =
        prepare(settings, config.clone(), Some(&running.listener), kept).await.map_err(|e| e.refusal())?;
    Ok((prepared, held, config))
}

/// True when `file` reads as TOML without a single key (an empty or truncated file).
fn has_no_settings(file: &std::path::Path) -> bool {
    std::fs::read_to_string(file).is_ok_and(|text| text.parse::<toml::Table>().is_ok_and(|t| t.is_empty()))
}

/// The new daemon failed its last step after the old one drained: run the old configuration
/// again on the old listener. Only if that fails too does the process end (exit 1).
async fn restore(
    settings: &Settings,
    inbox: &mut Inbox,
    old: Running,
    failed: AppError,
    kept: &Kept,
) -> Result<Option<Running>, DaemonError> {
    let (key, reason) = failed.refusal();
    tracing::error!(%key, %reason, "new configuration refused: {key}: {reason}; starting the previous one again");
    let Running { config, listener, .. } = old;
    match inbox.during(launch(settings, config, Some(&listener), kept)).await {
        None => Ok(None),
        Some(Ok(running)) => Ok(Some(running)),
        Some(Err(e)) => Err(DaemonError::App(e)),
    }
}

fn flatten(joined: Result<Result<(), AppError>, tokio::task::JoinError>) -> Result<(), AppError> {
    match joined {
        Ok(result) => result,
        Err(e) => Err(AppError::TaskDied { task: "daemon", why: e.to_string() }),
    }
}

/// Every SIGTERM, SIGINT and SIGHUP of the process, as events, for its whole life.
fn forward_signals(tx: mpsc::UnboundedSender<Event>) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    Some(()) = term.recv() => Event::Stop,
                    Some(()) = int.recv() => Event::Stop,
                    Some(()) = hup.recv() => Event::Reload(None),
                    else => return,
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(Event::Stop).is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// `POST /-/reload` requests, as events.
async fn forward_requests(mut rx: mpsc::Receiver<ReloadRequest>, tx: mpsc::UnboundedSender<Event>) {
    while let Some(request) = rx.recv().await {
        if tx.send(Event::Reload(Some(request.reply))).is_err() {
            return;
        }
    }
}
