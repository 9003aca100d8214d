//! Start-up while PostgreSQL fails in every way an operator meets (refused, never answering,
//! database not accepting connections, database missing, role rejected): the store reports
//! `Unavailable` with the reason and the redacted URL, the daemon builds and spools, and the
//! migration retry succeeds once the database is fixed. Only a URL that cannot be parsed is a
//! configuration error.

use crate::support::store as store_support;
use crate::support::tcp_proxy;

use sqlx::Connection;
use std::collections::BTreeMap;
use std::time::Duration;
use store_support::server_url;
use tcp_proxy::{Mode, TcpProxy};
use vigil::config::Config;
use vigil::io::store::{self, SampleStore, Store, StoreError};
use vigil::run::app::AppOptions;

/// Short, so a test waits little on a host that never answers.
const ACQUIRE: Duration = Duration::from_secs(1);
/// Liveness bound for background progress; generous so a loaded machine never flakes.
const PATIENCE: Duration = Duration::from_secs(90);

async fn admin(sql: String) {
    let mut c = sqlx::PgConnection::connect(&server_url()).await.expect("connect to the test server");
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.expect("admin statement");
}

/// A database name (and role, when used) removed when the test ends, however it ends.
struct Cleanup {
    database: String,
    role: Option<String>,
}

impl Cleanup {
    fn new(role: bool) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Cleanup { database: format!("vigil_test_{id}"), role: role.then(|| format!("vigil_role_{id}")) }
    }

    /// The test server's URL naming this database (and role, with `password`).
    fn url(&self, password: Option<&str>) -> String {
        let mut u = url::Url::parse(&server_url()).expect("server url");
        u.set_path(&format!("/{}", self.database));
        if let Some(role) = &self.role {
            u.set_username(role).expect("user");
            u.set_password(password).expect("password");
        }
        u.to_string()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (db, role) = (self.database.clone(), self.role.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                if let Ok(mut c) = sqlx::PgConnection::connect(&server_url()).await {
                    let sql = format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)");
                    let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await;
                    if let Some(role) = role {
                        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP ROLE IF EXISTS {role}")))
                            .execute(&mut c)
                            .await;
                    }
                }
            });
        })
        .join();
    }
}

/// Opens and migrates; the failure must be `Unavailable` naming `why` and the redacted URL.
async fn expect_unavailable(url: &str, why: &str) -> std::sync::Arc<dyn Store> {
    let store = store::open_with_timeout(url, ACQUIRE).await.expect("opening a PostgreSQL store is lazy");
    let err = store.migrate().await.expect_err("the database is not usable yet");
    let StoreError::Unavailable(reason) = &err else { panic!("expected Unavailable, got {err:?}") };
    assert!(reason.contains(why), "reason {reason:?} should say {why:?}");
    assert!(reason.contains(&store::redact_url(url)), "reason {reason:?} should name the database");
    let ping = store.ping().await.expect_err("still not usable");
    assert!(matches!(ping, StoreError::Unavailable(_)), "ping: {ping:?}");
    store
}

async fn expect_tables(url: &str) {
    let mut c = sqlx::PgConnection::connect(url).await.expect("connect");
    let migrated: bool =
        sqlx::query_scalar("SELECT to_regclass('samples') IS NOT NULL").fetch_one(&mut c).await.expect("query");
    assert!(migrated, "migrations applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_not_accepting_connections_is_unavailable_until_allowed() {
    let db = Cleanup::new(false);
    admin(format!("CREATE DATABASE {} ALLOW_CONNECTIONS false", db.database)).await;
    let url = db.url(None);
    let store = expect_unavailable(&url, "database not accepting connections (SQLSTATE 55000").await;

    admin(format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", db.database)).await;
    store.migrate().await.expect("the retry migrates once connections are allowed");
    store.ping().await.expect("reachable");
    expect_tables(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_is_unavailable_until_it_takes_writes() {
    // A primary demoted to a standby, or a database set read-only for maintenance: every write
    // fails with SQLSTATE 25006. The chaos run found a start against it failing (exit 1) instead
    // of spooling.
    let db = Cleanup::new(false);
    admin(format!("CREATE DATABASE {}", db.database)).await;
    let url = db.url(None);
    let store = store::open_with_timeout(&url, ACQUIRE).await.expect("open");
    store.migrate().await.expect("migrate while writable");
    admin(format!("ALTER DATABASE {} SET default_transaction_read_only = on", db.database)).await;
    let store = store::open_with_timeout(&url, ACQUIRE).await.expect("open again");
    let err = store.migrate().await.expect_err("a read-only database takes no migration");
    let StoreError::Unavailable(reason) = &err else { panic!("expected Unavailable, got {err:?}") };
    assert!(reason.contains("read-only"), "{reason}");
    let t = crate::support::store::target("openrouter", "m", None, "eu");
    let sample = crate::support::store::full_sample(t, chrono::Utc::now());
    let err = SampleStore::insert_samples(store.as_ref(), std::slice::from_ref(&sample)).await.expect_err("no write");
    assert!(matches!(err, StoreError::Unavailable(_)), "a write is unavailable too: {err:?}");

    admin(format!("ALTER DATABASE {} RESET default_transaction_read_only", db.database)).await;
    let store = store::open_with_timeout(&url, ACQUIRE).await.expect("open once writable");
    store.migrate().await.expect("the retry migrates once the database takes writes");
    assert_eq!(SampleStore::insert_samples(store.as_ref(), &[sample]).await.expect("write"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_is_unavailable_until_created() {
    let db = Cleanup::new(false);
    let url = db.url(None);
    let store = expect_unavailable(&url, "database does not exist (SQLSTATE 3D000").await;

    admin(format!("CREATE DATABASE {}", db.database)).await;
    store.migrate().await.expect("the retry migrates once the database exists");
    expect_tables(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_role_is_unavailable_and_its_password_never_shown() {
    let db = Cleanup::new(true);
    let role = db.role.clone().expect("role");
    // A test server that trusts loopback accepts any password, so a wrong one proves nothing
    // there: a role that may not log in is rejected under every auth method (SQLSTATE 28000;
    // a wrong password under md5/scram is 28P01, classified the same way).
    admin(format!("CREATE ROLE {role} NOLOGIN PASSWORD 'sk-test-role-password'")).await;
    admin(format!("CREATE DATABASE {} OWNER {role}", db.database)).await;
    let url = db.url(Some("sk-test-role-password"));
    let store = expect_unavailable(&url, "role rejected (SQLSTATE 28000").await;
    let err = store.migrate().await.expect_err("still rejected").to_string();
    assert!(!err.contains("sk-test-role-password"), "the password leaked: {err}");
    assert!(err.contains(":redacted@"), "{err}");

    admin(format!("ALTER ROLE {role} LOGIN")).await;
    store.migrate().await.expect("the retry migrates once the role may log in");
    expect_tables(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_refusing_connections_is_unavailable_until_it_listens() {
    let pg = store_support::PgTestDb::create().await;
    let proxy = TcpProxy::to_postgres().await;
    proxy.set_mode(Mode::Refuse).await;
    let url = proxy.url_for(&pg.url);
    let store = expect_unavailable(&url, "connection refused").await;

    proxy.set_mode(Mode::Forward).await;
    store.migrate().await.expect("the retry migrates once the host listens");
    expect_tables(&pg.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_never_answers_is_unavailable_within_the_timeout() {
    let pg = store_support::PgTestDb::create().await;
    let proxy = TcpProxy::to_postgres().await;
    proxy.set_mode(Mode::Blackhole).await;
    let url = proxy.url_for(&pg.url);
    let started = std::time::Instant::now();
    let store = expect_unavailable(&url, "no answer within").await;
    assert!(proxy.accepted() > 0, "the proxy took the connection and kept silent");
    println!("blackholed migrate + ping gave up after {:?}", started.elapsed());

    proxy.set_mode(Mode::Forward).await;
    store.migrate().await.expect("the retry migrates once the host answers");
    expect_tables(&pg.url).await;
}

#[tokio::test]
async fn an_unparsable_url_is_a_configuration_error() {
    let err = store::open("postgres://vigil:sk-test-secret@[::1/vigil").await.err().expect("cannot parse");
    assert!(matches!(err, StoreError::BadUrl(_)), "got {err:?}");
    assert!(!err.to_string().contains("sk-test-secret"), "{err}");
    let err = anyhow::Error::from(vigil::run::app::AppError::Store(err));
    assert_eq!(vigil::cli::exit_code(&err), 2);
    let unreachable = anyhow::Error::from(vigil::run::app::AppError::Store(StoreError::Unavailable("down".into())));
    assert_eq!(vigil::cli::exit_code(&unreachable), 1);
}

#[test]
fn redacted_urls_hide_passwords_in_the_userinfo_and_the_query() {
    assert_eq!(
        store::redact_url("postgres://vigil:sk-test-pw@db:5432/vigil?sslmode=require&password=sk-test-other"),
        "postgres://vigil:redacted@db:5432/vigil?sslmode=require&password=redacted"
    );
    assert_eq!(store::redact_url("postgres://vigil@db/vigil"), "postgres://vigil@db/vigil");
    assert_eq!(store::redact_url("postgres://[::1"), "<unparsable storage.url>");
}

/// The whole daemon: built while its database refuses connections, it probes (the demo
/// providers), says why it is not ready, and migrates and stores once connections are allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_starts_spools_and_migrates_once_its_database_accepts_connections() {
    let db = Cleanup::new(false);
    admin(format!("CREATE DATABASE {} ALLOW_CONNECTIONS false", db.database)).await;
    let data = tempfile::tempdir().expect("tempdir");
    let text = format!(
        r#"
region = "eu-test-1"
[storage]
url = "{url}"
data_dir = "{data}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:0"
[probe]
interval = "1s"
timeout = "900ms"
"#,
        url = db.url(None),
        data = data.path().display()
    );
    let config = Config::from_toml(&text, &BTreeMap::new()).expect("valid config");
    // The daemon builds while its database refuses connections.
    let daemon =
        crate::support::daemon::spawn_app_with(config, AppOptions { demo: true, ..AppOptions::default() }).await;
    let base = daemon.base.clone();

    let http = reqwest::Client::new();
    let readyz = || async {
        let r = http.get(format!("{base}/readyz")).send().await.expect("readyz");
        (r.status(), r.text().await.unwrap_or_default())
    };
    let says_why =
        |(status, body): &(reqwest::StatusCode, String)| *status == 503 && body.contains("not accepting connections");
    let (status, body) = crate::support::settle(PATIENCE, readyz, says_why).await;
    assert!(says_why(&(status, body.clone())), "readyz never said why: {status} {body}");

    admin(format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", db.database)).await;
    let url = db.url(None);
    let stored = async || {
        let stored = async {
            let mut c = sqlx::PgConnection::connect(&url).await.ok()?;
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM samples").fetch_one(&mut c).await.ok()
        };
        stored.await.is_some_and(|n| n > 0)
    };
    crate::support::until(PATIENCE, "migrated and stored after connections were allowed", stored).await;
    daemon.stop_within(PATIENCE).await;
}

/// The proxy the outage tests rely on does what each mode says, against a loopback echo server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tcp_proxy_forwards_refuses_and_blackholes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
    let upstream = echo.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    async fn round_trip(s: &mut tokio::net::TcpStream) -> Option<[u8; 4]> {
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        match tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf),
            _ => None,
        }
    }
    let proxy = TcpProxy::start(upstream, Mode::Forward).await;
    let mut open = tokio::net::TcpStream::connect(proxy.addr).await.expect("connect");
    assert_eq!(round_trip(&mut open).await, Some(*b"ping"), "forwarded");

    proxy.set_mode(Mode::Blackhole).await;
    // Open connections follow the switch in their own tasks, a moment after the listener does.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(round_trip(&mut open).await, None, "an open connection goes silent");
    let mut silent = tokio::net::TcpStream::connect(proxy.addr).await.expect("a blackhole accepts");
    assert_eq!(round_trip(&mut silent).await, None, "and never answers");

    proxy.set_mode(Mode::Refuse).await;
    let refused = tokio::net::TcpStream::connect(proxy.addr).await.expect_err("nothing listens");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    proxy.set_mode(Mode::Forward).await;
    let mut again = tokio::net::TcpStream::connect(proxy.addr).await.expect("listening again on the same port");
    assert_eq!(round_trip(&mut again).await, Some(*b"ping"));
    assert!(proxy.accepted() >= 3);
}
