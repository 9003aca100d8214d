//! Reads HTTP response bodies with a size cap, for every body vigil reads outside the probe
//! (alert receivers, the balance poller, the published-price fetch): a huge or endless body is
//! read only up to the cap, then the response is dropped, so memory stays bounded.

use bytes::{Bytes, BytesMut};
use thiserror::Error;

/// Most bytes kept of an alert receiver's answer (only a short excerpt is ever shown).
pub const RECEIVER_BODY_LIMIT: usize = 16 * 1024;
/// Most bytes read of a JSON API answer (balances, published prices).
pub const API_BODY_LIMIT: usize = 1024 * 1024;

/// Why a capped body read failed.
#[derive(Debug, Error)]
pub enum BodyError {
    /// The body (or its announced `Content-Length`) is larger than the cap.
    #[error("response body larger than {limit} bytes")]
    TooLarge {
        /// The cap.
        limit: usize,
    },
    /// The connection failed or timed out while reading.
    #[error("reading the response body failed: {0}")]
    Read(String),
}

/// The whole body, or [`BodyError::TooLarge`] as soon as it is known to exceed `limit` bytes
/// (from `Content-Length` before reading, or while reading).
pub async fn read_capped(resp: reqwest::Response, limit: usize) -> Result<Bytes, BodyError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    let (buf, complete) = read_up_to(resp, limit).await?;
    if complete {
        Ok(buf)
    } else {
        Err(BodyError::TooLarge { limit })
    }
}

/// At most the first `limit` bytes of the body; the rest is never read (the connection is
/// dropped). For answers where only an excerpt matters, such as a receiver's error text.
pub async fn read_prefix(resp: reqwest::Response, limit: usize) -> Result<Bytes, BodyError> {
    read_up_to(resp, limit).await.map(|(buf, _)| buf)
}

/// Reads chunks until the body ends or `limit` bytes are held; true when it ended within the cap.
async fn read_up_to(mut resp: reqwest::Response, limit: usize) -> Result<(Bytes, bool), BodyError> {
    let mut buf = BytesMut::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit - buf.len();
                if chunk.len() > room {
                    buf.extend_from_slice(&chunk[..room]);
                    return Ok((buf.freeze(), false));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok((buf.freeze(), true)),
            Err(e) => return Err(BodyError::Read(e.without_url().to_string())),
        }
    }
}
