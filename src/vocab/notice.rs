//! A provider's announcement that a model is going away, as probes and feeds report it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Days ahead of a retirement date that the warning starts (`deprecation.warn_days`).
pub const DEFAULT_WARN_DAYS: u32 = 30;

/// Who said the model is going away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeprecationSource {
    /// A `Deprecation` response header on a probe (RFC 9745).
    DeprecationHeader,
    /// A `Sunset` response header on a probe (RFC 8594).
    SunsetHeader,
    /// OpenRouter's model list (`expiration_date`).
    OpenRouterExpiration,
    /// The provider's models endpoint stopped listing the model while probes still work.
    MissingFromModels,
}

impl DeprecationSource {
    /// How the alert names the source.
    pub fn describe(&self) -> &'static str {
        match self {
            DeprecationSource::DeprecationHeader => "the provider's Deprecation response header",
            DeprecationSource::SunsetHeader => "the provider's Sunset response header",
            DeprecationSource::OpenRouterExpiration => "OpenRouter's model list (expiration_date)",
            DeprecationSource::MissingFromModels => "the provider's models endpoint, which no longer lists it",
        }
    }
}

/// One announcement about one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Which source.
    pub source: DeprecationSource,
    /// The date it names: deprecated from, sunset or expiring at; for `MissingFromModels`,
    /// when the absence was seen.
    pub date: DateTime<Utc>,
}
