//! The schema migrations of both backends, embedded in the binary and handed to sqlx's migrator.
//!
//! Why not `sqlx::migrate!`: that macro needs sqlx's `macros` feature, which compiles a second,
//! host-side copy of both database drivers, rustls and SQLite for compile-time query checking that
//! vigil does not use (about a fifth of a clean build, docs/BENCHMARKS.md "Build profiles"). The
//! files are embedded with `include_str!` instead and read exactly as sqlx's own directory
//! resolver reads them (`<version>_<description>.sql`, a first line `-- no-transaction` opting
//! out of the transaction), so versions, descriptions and checksums equal the ones every existing
//! database has recorded. A test compares both lists with sqlx's resolver, file by file, so a
//! migration added to a folder but not here fails the suite.

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::SqlSafeStr;
use std::borrow::Cow;
use std::sync::LazyLock;

/// `(file name, contents)` of each migration in `migrations/<folder>/`, any order.
macro_rules! embed {
    ($folder:literal: $($file:literal),+) => {
        &[$(($file, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/", $folder, "/", $file)))),+]
    };
}

/// Both backends' lists from one list of file names: every migration exists in both folders, so
/// a new one is named once.
macro_rules! embed_both {
    ($($file:literal),+ $(,)?) => {
        /// `migrations/postgres/`.
        const POSTGRES: &[(&str, &str)] = embed!("postgres": $($file),+);
        /// `migrations/sqlite/`.
        const SQLITE: &[(&str, &str)] = embed!("sqlite": $($file),+);
    };
}

embed_both!(
    "20261130000001_init.sql",
    "20261130000002_outbox_region.sql",
    "20261201000010_incidents.sql",
    "20261201000012_sample_proxy_ms.sql",
    "20261201000030_provider_status.sql",
    "20261201000040_canary_runs.sql",
    "20261201000044_retention_indexes.sql",
    "20261201000060_transition_key.sql",
    "20261203000010_target_status_health.sql",
    "20261203000020_drills.sql",
    "20261203000030_chain_heads.sql",
    "20261203000040_check_runs.sql",
    "20261204000040_sample_ratelimit.sql",
    "20261205000010_workload_runs.sql",
    "20261206000010_members.sql",
    "20261207000010_rollups_region_hour.sql",
    "20261208000010_alert_state_gzip.sql",
);

/// The PostgreSQL schema's migrator.
pub(crate) static POSTGRES_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(POSTGRES));
/// The SQLite schema's migrator.
pub(crate) static SQLITE_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(SQLITE));

/// One migration from its file name and text, as sqlx's directory resolver builds it. The names
/// are fixed at compile time and checked by the tests, so a malformed one cannot reach a user.
fn migration(file: &str, sql: &'static str) -> Migration {
    let (version, rest) = file.split_once('_').unwrap_or((file, ""));
    let migration_type = MigrationType::from_filename(rest);
    let description = rest.trim_end_matches(migration_type.suffix()).replace('_', " ");
    Migration::new(
        version.parse().unwrap_or(0),
        Cow::Owned(description),
        migration_type,
        sql.into_sql_str(),
        sql.starts_with("-- no-transaction"),
    )
}

fn migrator(files: &[(&str, &'static str)]) -> Migrator {
    Migrator::with_migrations(files.iter().map(|(file, sql)| migration(file, sql)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::migrate::resolve_blocking;
    use std::path::Path;

    /// Every file in the folder is embedded, and each reads exactly as sqlx's resolver reads it:
    /// same version, description, type, transaction choice and checksum.
    fn same_as_sqlx(folder: &str, m: &Migrator) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(folder);
        let resolved = resolve_blocking(&dir).expect("resolve");
        let embedded: Vec<&Migration> = m.iter().collect();
        assert!(!resolved.is_empty());
        assert_eq!(
            resolved.iter().map(|(r, _)| r.version).collect::<Vec<_>>(),
            embedded.iter().map(|e| e.version).collect::<Vec<_>>(),
            "migrations/{folder}: every file must be listed in src/io/store/migrations.rs"
        );
        for ((r, path), e) in resolved.iter().zip(embedded) {
            let file = path.display();
            assert_eq!(r.description, e.description, "{file}");
            assert_eq!(r.migration_type, e.migration_type, "{file}");
            assert_eq!(r.no_tx, e.no_tx, "{file}");
            assert_eq!(r.checksum, e.checksum, "{file}");
            assert_eq!(r.sql.as_str(), e.sql.as_str(), "{file}");
        }
    }

    #[test]
    fn the_embedded_migrations_are_the_folders_as_sqlx_reads_them() {
        same_as_sqlx("postgres", &POSTGRES_MIGRATOR);
        same_as_sqlx("sqlite", &SQLITE_MIGRATOR);
    }

    #[test]
    fn a_no_transaction_first_line_is_honoured() {
        let m = migration("7_concurrent_index.sql", "-- no-transaction\nCREATE INDEX CONCURRENTLY i ON t (c);\n");
        assert!(m.no_tx);
        assert_eq!((m.version, m.description.as_ref()), (7, "concurrent index"));
        assert!(!migration("8_plain.sql", "CREATE TABLE t (c int);\n").no_tx);
    }
}
