//! Samples as PostgreSQL binary `COPY` data, columns in [`super::sql::SAMPLE_COLUMNS`] order.
//!
//! Binary rather than text format: no escaping of tabs, newlines or backslashes in provider
//! error text, and no float or timestamp formatting on either side.

use crate::vocab::ratelimit::RateLimitKind;
use crate::vocab::sample::Sample;
use chrono::{DateTime, NaiveDate, Utc};

/// File header: signature, flags (no OIDs), header extension length.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// Columns per row; must match `SAMPLE_COLUMNS`.
const FIELDS: i16 = 31;
/// A row's encoded size is roughly this plus its strings, enough to size the buffer once.
const FIXED_ROW_BYTES: usize = 2 + 31 * 4 + 16 + 2 * 8 + 12 * 8 + 4 + 1 + 6 * 8;

/// Why a sample cannot be encoded.
#[derive(Debug, thiserror::Error)]
pub enum CopyEncodeError {
    /// A timestamp outside what `timestamptz` microseconds can hold.
    #[error("timestamp {0} out of range for PostgreSQL")]
    Timestamp(DateTime<Utc>),
    /// A text value longer than a `COPY` field can carry.
    #[error("text value of {0} bytes is too long")]
    TooLong(usize),
}

/// Encodes `samples` as one complete binary `COPY` stream (header, rows, trailer).
///
/// NUL characters are removed from text: PostgreSQL text cannot hold them.
pub fn encode(samples: &[Sample]) -> Result<Vec<u8>, CopyEncodeError> {
    let strings: usize = samples
        .iter()
        .map(|s| {
            s.target.provider.len()
                + s.target.model.len()
                + s.target.route_label().len()
                + s.target.region.len()
                + s.outcome.as_str().len()
                + s.error.as_ref().map_or(0, String::len)
                + s.request_id.as_ref().map_or(0, String::len)
        })
        .sum();
    let mut buf = Vec::with_capacity(HEADER.len() + samples.len() * FIXED_ROW_BYTES + strings + 2);
    buf.extend_from_slice(HEADER);
    for s in samples {
        buf.extend_from_slice(&FIELDS.to_be_bytes());
        field(&mut buf, s.id.as_bytes());
        text(&mut buf, &s.target.provider)?;
        text(&mut buf, &s.target.model)?;
        text(&mut buf, s.target.route_label())?;
        text(&mut buf, &s.target.region)?;
        timestamp(&mut buf, s.scheduled_at)?;
        timestamp(&mut buf, s.started_at)?;
        for v in [s.dns_ms, s.connect_ms, s.tls_ms, s.ttfb_ms, s.ttft_ms, s.ttfr_ms, s.total_ms] {
            float8(&mut buf, v);
        }
        int8(&mut buf, s.input_tokens.map(i64::from));
        int8(&mut buf, s.output_tokens.map(i64::from));
        float8(&mut buf, s.tokens_per_s);
        match s.status {
            Some(v) => field(&mut buf, &i32::from(v).to_be_bytes()),
            None => null(&mut buf),
        }
        text(&mut buf, s.outcome.as_str())?;
        opt_text(&mut buf, s.error.as_deref())?;
        opt_text(&mut buf, s.request_id.as_deref())?;
        match s.adherence_ok {
            Some(v) => field(&mut buf, &[u8::from(v)]),
            None => null(&mut buf),
        }
        float8(&mut buf, s.cost_usd);
        float8(&mut buf, s.retry_after_s);
        float8(&mut buf, s.proxy_ms);
        for kind in RateLimitKind::ALL {
            let a = s.ratelimit.get(kind);
            let count = |n: Option<u64>| n.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
            int8(&mut buf, count(a.and_then(|a| a.remaining)));
            int8(&mut buf, count(a.and_then(|a| a.limit)));
            match a.and_then(|a| a.reset_at) {
                Some(at) => timestamp(&mut buf, at)?,
                None => null(&mut buf),
            }
        }
    }
    buf.extend_from_slice(&(-1i16).to_be_bytes());
    Ok(buf)
}

fn field(buf: &mut Vec<u8>, bytes: &[u8]) {
    // Callers pass fixed-size values or text already checked by `text`.
    buf.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
    buf.extend_from_slice(bytes);
}

fn null(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&(-1i32).to_be_bytes());
}

fn text(buf: &mut Vec<u8>, s: &str) -> Result<(), CopyEncodeError> {
    if i32::try_from(s.len()).is_err() {
        return Err(CopyEncodeError::TooLong(s.len()));
    }
    if s.contains('\0') {
        field(buf, s.replace('\0', "").as_bytes());
    } else {
        field(buf, s.as_bytes());
    }
    Ok(())
}

fn opt_text(buf: &mut Vec<u8>, s: Option<&str>) -> Result<(), CopyEncodeError> {
    match s {
        Some(s) => text(buf, s),
        None => {
            null(buf);
            Ok(())
        }
    }
}

fn float8(buf: &mut Vec<u8>, v: Option<f64>) {
    match v {
        Some(v) => field(buf, &v.to_be_bytes()),
        None => null(buf),
    }
}

fn int8(buf: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => field(buf, &v.to_be_bytes()),
        None => null(buf),
    }
}

/// `timestamptz` travels as microseconds since 2000-01-01 UTC (truncated, as the driver does).
fn timestamp(buf: &mut Vec<u8>, t: DateTime<Utc>) -> Result<(), CopyEncodeError> {
    let epoch = NaiveDate::from_ymd_opt(2000, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0)).map(|d| d.and_utc());
    let micros = epoch.and_then(|e| (t - e).num_microseconds()).ok_or(CopyEncodeError::Timestamp(t))?;
    field(buf, &micros.to_be_bytes());
    Ok(())
}
