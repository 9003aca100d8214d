//! Shared fixtures for the store tests: a fresh database per test on both backends, sample
//! builders, and a loopback TCP proxy that can cut PostgreSQL off.
#![allow(dead_code)]

use chrono::{DateTime, SubsecRound, Utc};
use sqlx::Connection;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use vigil::io::store::{self, Store};
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

/// Runs each named `async fn(Fixture)` on both backends, as `sqlite::<name>` and `postgres::<name>`.
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Fixture::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Fixture::postgres().await).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both_stores;

/// Server URL the tests create their throw-away databases on.
pub fn server_url() -> String {
    std::env::var("VIGIL_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// Which backend a fixture runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, migrated database of one kind, removed when dropped.
pub struct Fixture {
    pub kind: Kind,
    pub url: String,
    pub store: Arc<dyn Store>,
    pg: Option<PgTestDb>,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("vigil.db").display());
        let store = store::open(&url).await.expect("open sqlite");
        store.migrate().await.expect("migrate sqlite");
        Fixture { kind: Kind::Sqlite, url, store, pg: None, _dir: Some(dir) }
    }

    pub async fn postgres() -> Self {
        let pg = PgTestDb::create().await;
        let url = pg.url.clone();
        let store = store::open(&url).await.expect("open postgres");
        store.migrate().await.expect("migrate postgres");
        Fixture { kind: Kind::Postgres, url, store, pg: Some(pg), _dir: None }
    }

    /// Runs one raw statement on a separate connection.
    pub async fn exec(&self, sql: &'static str) {
        match self.kind {
            Kind::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.expect("connect sqlite");
                sqlx::query(sql).execute(&mut c).await.expect("exec sqlite");
            }
            Kind::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.expect("connect postgres");
                sqlx::query(sql).execute(&mut c).await.expect("exec postgres");
            }
        }
    }

    /// Runs one raw query returning a single text value.
    pub async fn text(&self, sql: &'static str) -> Option<String> {
        match self.kind {
            Kind::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.expect("connect sqlite");
                sqlx::query_scalar(sql).fetch_one(&mut c).await.expect("query sqlite")
            }
            Kind::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.expect("connect postgres");
                sqlx::query_scalar(sql).fetch_one(&mut c).await.expect("query postgres")
            }
        }
    }
}

/// A database `vigil_test_<random>` on the test server, dropped (forcefully) on drop.
pub struct PgTestDb {
    pub url: String,
    pub name: String,
}

impl PgTestDb {
    pub async fn create() -> Self {
        let server = server_url();
        let name = format!("vigil_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&server).await.expect("connect to test server");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create test database");
        let mut url = url::Url::parse(&server).expect("test server url");
        url.set_path(&format!("/{name}"));
        PgTestDb { url: url.to_string(), name }
    }

    /// The same database reached through another host:port (a proxy).
    pub fn url_via(&self, addr: std::net::SocketAddr) -> String {
        let mut url = url::Url::parse(&self.url).expect("db url");
        url.set_host(Some(&addr.ip().to_string())).expect("host");
        url.set_port(Some(addr.port())).expect("port");
        url.to_string()
    }
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop may run inside a runtime (or while panicking): use a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                if let Ok(mut admin) = sqlx::PgConnection::connect(&server_url()).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Times as the databases keep them (microseconds).
pub fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

pub fn target(provider: &str, model: &str, route: Option<&str>, region: &str) -> Target {
    Target::new(provider.into(), model.into(), route.map(Into::into), region.into())
}

/// A sample with every field set.
pub fn full_sample(t: Target, started: DateTime<Utc>) -> Sample {
    let started = micros(started);
    let mut s = Sample::new(t, started - chrono::Duration::milliseconds(3), started);
    s.dns_ms = Some(1.25);
    s.connect_ms = Some(12.5);
    s.tls_ms = Some(30.125);
    s.proxy_ms = Some(4.5);
    s.ttfb_ms = Some(180.0);
    s.ttft_ms = Some(240.5);
    s.ttfr_ms = Some(200.75);
    s.total_ms = Some(512.0);
    s.input_tokens = Some(21);
    s.output_tokens = Some(16);
    s.tokens_per_s = Some(65.2);
    s.status = Some(200);
    s.outcome = Outcome::Ok;
    s.error = Some("none — “quoted” ünïcode".into());
    s.request_id = Some("req_0123".into());
    s.adherence_ok = Some(true);
    s.cost_usd = Some(0.000_023_5);
    s.retry_after_s = Some(1.5);
    s.ratelimit = vigil::vocab::ratelimit::Headroom {
        requests: Some(vigil::vocab::ratelimit::Allowance {
            remaining: Some(42),
            limit: Some(50),
            reset_at: Some(started + chrono::Duration::milliseconds(34_250)),
        }),
        tokens: Some(vigil::vocab::ratelimit::Allowance {
            remaining: Some(18_000),
            limit: Some(40_000),
            reset_at: Some(started + chrono::Duration::seconds(360)),
        }),
    };
    s
}

/// A failed sample with only identity, times and outcome.
pub fn bare_sample(t: Target, started: DateTime<Utc>, outcome: Outcome) -> Sample {
    let started = micros(started);
    let mut s = Sample::new(t, started, started);
    s.outcome = outcome;
    s
}

/// A loopback TCP proxy to `upstream` that can be cut (all connections dropped, new ones
/// closed at once) and restored.
pub struct TcpProxy {
    pub addr: std::net::SocketAddr,
    up: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let up = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (up2, conns2) = (up.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                conns2.lock().expect("conns").push(task);
            }
        });
        TcpProxy { addr, up, conns, accept }
    }

    /// Drops every open connection and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for task in self.conns.lock().expect("conns").drain(..) {
            task.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
