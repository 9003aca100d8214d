//! Incremental decoding (and, for stand-ins and fixtures, encoding) of the
//! `application/vnd.amazon.eventstream` framing Bedrock streams its answers in.
//!
//! Each message is `total length (u32) | headers length (u32) | prelude CRC32 | headers |
//! payload | message CRC32`, big-endian, CRC-32 (IEEE) over the prelude and over everything
//! before the last four bytes. Written here (about as long as the glue a crate would need)
//! rather than taken from `aws-smithy-eventstream`, whose `aws-smithy-types` dependency tree
//! costs more build time than this file; `crc32fast` was already in the build. Like
//! [`super::sse`], it is a push parser with a hard cap, so every message is tied to the socket
//! read that completed it and a hostile stream cannot exhaust memory.

use thiserror::Error;

/// Prelude: total length, headers length, prelude CRC.
const PRELUDE: usize = 12;
/// Smallest message: prelude plus message CRC.
const MIN_MESSAGE: usize = PRELUDE + 4;
/// Largest message the format allows (16 MiB).
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One decoded message: its string headers and its payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// Headers whose value is a string (`:event-type`, `:message-type`, …); other types are skipped.
    pub headers: Vec<(String, String)>,
    /// The payload (JSON for Bedrock).
    pub payload: Vec<u8>,
}

impl Message {
    /// The first string header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// The stream is not a valid event stream.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// A message declares a length outside the format's bounds or the cap.
    #[error("event-stream message length {0} out of bounds")]
    Length(usize),
    /// The prelude's checksum does not match.
    #[error("event-stream prelude CRC mismatch")]
    PreludeCrc,
    /// The message's checksum does not match.
    #[error("event-stream message CRC mismatch")]
    MessageCrc,
    /// A header is cut short or of an unknown type.
    #[error("malformed event-stream header: {0}")]
    Header(&'static str),
    /// The stream ended inside a message.
    #[error("stream ended inside an event-stream message ({0} bytes held)")]
    Truncated(usize),
}

/// Push decoder: feed bytes as they arrive, get complete messages back.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    max: usize,
}

impl Decoder {
    /// A decoder refusing messages larger than `max` bytes (and than [`MAX_MESSAGE`]).
    pub fn new(max: usize) -> Self {
        Decoder { buf: Vec::new(), max: max.min(MAX_MESSAGE) }
    }

    /// Consumes `bytes`, calling `on_message` for every message they complete. After an error
    /// the decoder is unusable (the stream's framing is lost).
    pub fn feed(&mut self, bytes: &[u8], mut on_message: impl FnMut(Message)) -> Result<(), FrameError> {
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        let result = loop {
            let rest = &self.buf[at..];
            if rest.len() < PRELUDE {
                break Ok(());
            }
            let total = be32(&rest[0..4]) as usize;
            if !(MIN_MESSAGE..=self.max).contains(&total) {
                break Err(FrameError::Length(total));
            }
            if crc32fast::hash(&rest[0..8]) != be32(&rest[8..12]) {
                break Err(FrameError::PreludeCrc);
            }
            if rest.len() < total {
                break Ok(());
            }
            match decode(&rest[..total]) {
                Ok(m) => on_message(m),
                Err(e) => break Err(e),
            }
            at += total;
        };
        self.buf.drain(..at);
        result
    }

    /// At the end of the stream: an error when bytes of an unfinished message are left.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(FrameError::Truncated(n)),
        }
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// One whole message (length and prelude CRC already checked).
fn decode(m: &[u8]) -> Result<Message, FrameError> {
    let total = m.len();
    if crc32fast::hash(&m[..total - 4]) != be32(&m[total - 4..]) {
        return Err(FrameError::MessageCrc);
    }
    let headers_len = be32(&m[4..8]) as usize;
    if headers_len > total - MIN_MESSAGE {
        return Err(FrameError::Header("headers longer than the message"));
    }
    let headers = headers(&m[PRELUDE..PRELUDE + headers_len])?;
    Ok(Message { headers, payload: m[PRELUDE + headers_len..total - 4].to_vec() })
}

/// The headers block: `name length (u8) | name | type (u8) | value`.
fn headers(mut b: &[u8]) -> Result<Vec<(String, String)>, FrameError> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], FrameError> {
        if b.len() < n {
            return Err(FrameError::Header("cut short"));
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head)
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = take(&mut b, 1)?[0] as usize;
        let name = String::from_utf8_lossy(take(&mut b, n)?).into_owned();
        let kind = take(&mut b, 1)?[0];
        let fixed = match kind {
            0 | 1 => 0,
            2 => 1,
            3 => 2,
            4 => 4,
            5 | 8 => 8,
            9 => 16,
            6 | 7 => {
                let len = take(&mut b, 2)?;
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                let value = take(&mut b, len)?;
                if kind == 7 {
                    let text = std::str::from_utf8(value).map_err(|_| FrameError::Header("string not UTF-8"))?;
                    out.push((name, text.to_string()));
                }
                continue;
            }
            _ => return Err(FrameError::Header("unknown value type")),
        };
        take(&mut b, fixed)?;
    }
    Ok(out)
}

/// Encodes one message with string headers: what the stand-ins and the fixture generator send.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(name.len().min(255) as u8);
        h.extend_from_slice(&name.as_bytes()[..name.len().min(255)]);
        h.push(7);
        let v = &value.as_bytes()[..value.len().min(usize::from(u16::MAX))];
        h.extend_from_slice(&(v.len() as u16).to_be_bytes());
        h.extend_from_slice(v);
    }
    let total = PRELUDE + h.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A Bedrock event message (`:message-type` event) of type `event_type` with a JSON payload.
pub fn event(event_type: &str, payload: &str) -> Vec<u8> {
    encode(
        &[(":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")],
        payload.as_bytes(),
    )
}

/// A Bedrock exception message (`:message-type` exception) of type `exception_type`.
pub fn exception(exception_type: &str, payload: &str) -> Vec<u8> {
    encode(
        &[(":exception-type", exception_type), (":content-type", "application/json"), (":message-type", "exception")],
        payload.as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Result<Vec<Message>, FrameError> {
        let mut d = Decoder::new(1 << 20);
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, |m| out.push(m))?;
        }
        d.finish()?;
        Ok(out)
    }

    fn fixture() -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/bedrock-converse-stream.eventstream", env!("CARGO_MANIFEST_DIR")))
            .expect("fixture")
    }

    #[test]
    fn an_encoded_event_decodes_to_its_headers_and_payload() {
        let bytes = event("contentBlockDelta", r#"{"delta":{"text":"hi"}}"#);
        let m = decode_all(&[&bytes]).expect("valid");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].header(":event-type"), Some("contentBlockDelta"));
        assert_eq!(m[0].header(":message-type"), Some("event"));
        assert_eq!(m[0].payload, br#"{"delta":{"text":"hi"}}"#);
    }

    #[test]
    fn the_fixture_decodes_at_every_split_point() {
        let body = fixture();
        let whole = decode_all(&[&body]).expect("valid fixture");
        let kinds: Vec<_> = whole.iter().filter_map(|m| m.header(":event-type")).collect();
        assert_eq!(kinds.first(), Some(&"messageStart"));
        assert_eq!(kinds.last(), Some(&"metadata"));
        assert!(kinds.contains(&"contentBlockDelta") && kinds.contains(&"messageStop"));
        for cut in 0..body.len() {
            assert_eq!(decode_all(&[&body[..cut], &body[cut..]]).expect("valid"), whole, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(decode_all(&bytes).expect("valid"), whole);
    }

    #[test]
    fn non_string_headers_are_skipped_not_refused() {
        // Header types 0..=9 besides string, built by hand: bool, byte, short, int, long, bytes, time, uuid.
        let mut h = Vec::new();
        for (kind, value) in [
            (0u8, vec![]),
            (1, vec![]),
            (2, vec![1]),
            (3, vec![0, 1]),
            (4, vec![0, 0, 0, 1]),
            (5, vec![0; 8]),
            (6, vec![0, 2, 9, 9]),
            (8, vec![0; 8]),
            (9, vec![0; 16]),
        ] {
            h.extend_from_slice(&[1, b'x', kind]);
            h.extend_from_slice(&value);
        }
        h.extend_from_slice(&[2, b'k', b'2', 7, 0, 1, b'v']);
        let total = PRELUDE + h.len() + 4;
        let mut m = (total as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&(h.len() as u32).to_be_bytes());
        let crc = crc32fast::hash(&m);
        m.extend_from_slice(&crc.to_be_bytes());
        m.extend_from_slice(&h);
        let crc = crc32fast::hash(&m);
        m.extend_from_slice(&crc.to_be_bytes());
        let out = decode_all(&[&m]).expect("valid");
        assert_eq!(out[0].headers, vec![("k2".to_string(), "v".to_string())]);
    }

    #[test]
    fn bad_checksums_lengths_and_truncation_are_errors_not_panics() {
        let good = event("messageStop", r#"{"stopReason":"end_turn"}"#);
        let mut payload_flip = good.clone();
        let at = payload_flip.len() - 6;
        payload_flip[at] ^= 1;
        assert_eq!(decode_all(&[&payload_flip]), Err(FrameError::MessageCrc));
        let mut prelude_flip = good.clone();
        prelude_flip[9] ^= 1;
        assert_eq!(decode_all(&[&prelude_flip]), Err(FrameError::PreludeCrc));
        let cut = &good[..good.len() - 3];
        assert_eq!(decode_all(&[cut]), Err(FrameError::Truncated(cut.len())));
        let mut huge = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        let crc = crc32fast::hash(&huge);
        huge.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(decode_all(&[&huge]), Err(FrameError::Length(u32::MAX as usize)));
        // A headers length past the message, with both CRCs valid.
        let mut lying = good.clone();
        lying[4..8].copy_from_slice(&1000u32.to_be_bytes());
        let crc = crc32fast::hash(&lying[..8]);
        lying[8..12].copy_from_slice(&crc.to_be_bytes());
        let n = lying.len();
        let crc = crc32fast::hash(&lying[..n - 4]);
        lying[n - 4..].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(decode_all(&[&lying]), Err(FrameError::Header(_))));
        // Garbage of every length never panics.
        for n in 0..64 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let _ = decode_all(&[&junk]);
        }
    }
}
