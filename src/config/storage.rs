//! `[storage]`: where samples go and how they are batched and spooled. The URL is a secret (it
//! may carry a password), so only its redacted form ever reaches an error message.

use crate::config::baseline::RawBaseline;
use crate::config::parse::{count_in, duration_in, size_in, MINUTE};
use crate::config::redact::redact_url;
use crate::config::retention::{RawRetention, RetentionConfig};
use crate::config::{invalid, ConfigError};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// `[storage]`.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// `sqlite://vigil.db` or `postgres://…`.
    pub url: SecretString,
    /// Raw samples older than this many days are removed.
    pub retention_days: u32,
    /// Directory for the spool and other local state.
    pub data_dir: PathBuf,
    /// Most bytes the on-disk spool may hold before the oldest samples are dropped.
    pub spool_max_bytes: u64,
    /// Most samples written in one batch.
    pub batch_size: usize,
    /// Longest a sample waits for its batch to fill.
    pub batch_age: Duration,
    /// `[storage.retention]`: how long everything but raw samples is kept.
    pub retention: RetentionConfig,
    /// Where `url` came from: `--demo` keeps only a URL its own config file gives.
    pub url_from: UrlFrom,
}

/// Where `storage.url` came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlFrom {
    /// Nobody gave one: the built-in `sqlite://vigil.db`.
    Default,
    /// The config file's `[storage] url` (an environment variable may still override its value).
    File,
    /// Only an environment variable (named here: `DATABASE_URL`, `VIGIL_STORAGE_URL`, or a `_FILE` twin).
    Env(String),
}

/// `[storage]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawStorage {
    url: String,
    retention_days: u32,
    data_dir: String,
    spool_max_mb: u64,
    batch_size: usize,
    batch_age: String,
    retention: RawRetention,
}

impl Default for RawStorage {
    fn default() -> Self {
        RawStorage {
            url: "sqlite://vigil.db".into(),
            retention_days: 30,
            data_dir: "vigil-data".into(),
            spool_max_mb: 256,
            batch_size: 5_000,
            batch_age: "1s".into(),
            retention: RawRetention::default(),
        }
    }
}

/// `[storage]`, validated; the retention needs the baseline window it must outlive.
pub(super) fn validate(raw: &RawStorage, baseline: &RawBaseline) -> Result<StorageConfig, ConfigError> {
    Ok(StorageConfig {
        url: {
            let u = raw.url.trim();
            if !(u.starts_with("sqlite:") || u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                return Err(invalid(
                    "storage.url",
                    format!("{:?} must start with sqlite:// or postgres://", redact_url(u)),
                ));
            }
            SecretString::from(u.to_string())
        },
        retention_days: count_in("storage.retention_days", raw.retention_days, 1, 3650)?,
        data_dir: PathBuf::from(&raw.data_dir),
        spool_max_bytes: count_in("storage.spool_max_mb", raw.spool_max_mb, 1, 1 << 20)? * 1024 * 1024,
        batch_size: size_in("storage.batch_size", raw.batch_size, 1, 100_000)?,
        batch_age: duration_in("storage.batch_age", &raw.batch_age, Duration::from_millis(1), MINUTE)?,
        retention: crate::config::retention::validate(&raw.retention, crate::config::baseline::window(baseline)?)?,
        url_from: UrlFrom::Default,
    })
}
