//! Reads HTTP response bodies with a size cap, for every body vigil reads outside the probe
//! (alert receivers, the balance poller, the published-price fetch): a huge or endless body is
//! read only up to the cap, then the response is dropped, so memory stays bounded. Lists parsed
//! from such a body keep at most so many entries ([`AtMost`]): a body of a million `{}` would
//! otherwise cost a million structs.

use bytes::{Bytes, BytesMut};
use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};
use std::marker::PhantomData;
use thiserror::Error;

/// Most bytes kept of an alert receiver's answer (only a short excerpt is ever shown).
pub const RECEIVER_BODY_LIMIT: usize = 16 * 1024;
/// Most bytes read of a JSON API answer (balances, published prices).
pub const API_BODY_LIMIT: usize = 1024 * 1024;

/// Most bytes read of a published-price answer (one model's endpoints: a few KB in practice).
pub const ENDPOINTS_BODY_LIMIT: usize = 256 * 1024;

/// A JSON list read keeping its first `N` entries; the rest are skipped as they are read,
/// never held.
#[derive(Debug, Clone, PartialEq)]
pub struct AtMost<T, const N: usize>(pub Vec<T>);

impl<T, const N: usize> Default for AtMost<T, N> {
    fn default() -> Self {
        AtMost(Vec::new())
    }
}

impl<T, const N: usize> std::ops::Deref for AtMost<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T, const N: usize> IntoIterator for AtMost<T, N> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a AtMost<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for AtMost<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for Entries<T, N> {
            type Value = AtMost<T, N>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while kept.len() < N {
                    match seq.next_element()? {
                        Some(entry) => kept.push(entry),
                        None => return Ok(AtMost(kept)),
                    }
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(AtMost(kept))
            }
        }
        d.deserialize_seq(Entries(PhantomData))
    }
}

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

#[cfg(test)]
mod tests {
    use super::AtMost;

    #[test]
    fn a_list_keeps_its_first_entries_and_skips_the_rest() {
        let three: AtMost<u32, 3> = serde_json::from_str("[1, 2, 3, 4, {\"x\": [5]}, 6]").expect("reads");
        assert_eq!(three.0, vec![1, 2, 3]);
        let short: AtMost<u32, 3> = serde_json::from_str("[1]").expect("reads");
        assert_eq!(short.0, vec![1]);
        assert!(serde_json::from_str::<AtMost<u32, 3>>("[1, \"x\"]").is_err(), "a kept entry must still be valid");
        assert!(serde_json::from_str::<AtMost<u32, 3>>("{}").is_err(), "not a list");
    }
}
