//! Incremental Server-Sent Events framing with bounded memory.
//!
//! Written here rather than taken from a crate because the probe needs each event tied to the
//! network read that completed it (its arrival time), and a hard cap on what one event may
//! buffer so a hostile or broken stream cannot exhaust memory.

use thiserror::Error;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:` field, when present.
    pub event: Option<String>,
    /// `data:` lines joined by `\n`.
    pub data: String,
}

/// The stream is not valid SSE, or an event outgrew the cap.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SseError {
    /// A single event (or line) is larger than allowed.
    #[error("SSE event larger than {0} bytes")]
    TooLarge(usize),
    /// A line is not UTF-8.
    #[error("SSE line is not valid UTF-8")]
    NotUtf8,
}

/// Push parser: feed bytes as they arrive, get complete events back.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    event: Option<String>,
    skip_lf: bool,
    max_event_bytes: usize,
    /// Comment lines seen (`: OPENROUTER PROCESSING` keep-alives).
    pub comments: u64,
}

impl SseParser {
    /// A parser that refuses events larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseParser {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            event: None,
            skip_lf: false,
            max_event_bytes,
            comments: 0,
        }
    }

    /// Consumes `bytes`, calling `on_event` for every event they complete.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_event: impl FnMut(SseEvent)) -> Result<(), SseError> {
        // A line at a time, copied into a buffer that keeps its capacity: byte-by-byte pushes
        // into a fresh buffer per line were about 4 % of the whole daemon's CPU.
        while let Some(&first) = bytes.first() {
            // A CR may end a line on its own; a following LF belongs to it even across reads.
            if self.skip_lf {
                self.skip_lf = false;
                if first == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            let Some(end) = bytes.iter().position(|b| matches!(b, b'\r' | b'\n')) else {
                return self.hold(bytes);
            };
            self.hold(&bytes[..end])?;
            self.skip_lf = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if let Some(ev) = self.end_line()? {
                on_event(ev);
            }
        }
        Ok(())
    }

    /// Adds bytes to the current line, refusing an event that would outgrow the cap.
    fn hold(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        let held = self.line.len() + self.data.len() + self.event.as_ref().map_or(0, String::len);
        if held + bytes.len() > self.max_event_bytes {
            return Err(SseError::TooLarge(self.max_event_bytes));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Flushes an event left without its closing blank line when the stream ends.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        if !self.line.is_empty() {
            if let Some(ev) = self.end_line()? {
                return Ok(Some(ev));
            }
        }
        Ok(self.dispatch())
    }

    fn end_line(&mut self) -> Result<Option<SseEvent>, SseError> {
        if self.line.is_empty() {
            return Ok(self.dispatch());
        }
        let read = self.read_line();
        self.line.clear();
        read.map(|()| None)
    }

    /// Takes the field of the complete line in `self.line`.
    fn read_line(&mut self) -> Result<(), SseError> {
        let line = std::str::from_utf8(&self.line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            self.comments += 1;
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {} // `id:`, `retry:` and unknown fields carry nothing the probe needs
        }
        Ok(())
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent { event, data: std::mem::take(&mut self.data) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Result<(Vec<SseEvent>, u64), SseError> {
        let mut p = SseParser::new(1 << 20);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |e| out.push(e))?;
        }
        if let Some(e) = p.finish()? {
            out.push(e);
        }
        Ok((out, p.comments))
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
    }

    #[test]
    fn comments_and_events_are_told_apart() {
        let (events, comments) =
            parse_all(&[b": OPENROUTER PROCESSING\n\nevent: ping\ndata: {}\n\ndata: a\ndata: b\n\n"]).expect("valid");
        assert_eq!(comments, 1);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event.as_deref(), Some("ping"));
        assert_eq!(events[1].data, "a\nb");
    }

    #[test]
    fn every_split_point_of_every_fixture_gives_the_same_events() {
        for name in [
            "openai-chat-stream.sse",
            "anthropic-messages-stream.sse",
            "gemini-stream.sse",
            "openrouter-chat-stream-processing-comments.sse",
            "groq-stream-error-event.sse",
        ] {
            let body = fixture(name);
            let (whole, _) = parse_all(&[&body]).expect("valid");
            assert!(!whole.is_empty(), "{name}");
            let step = (body.len() / 400).max(1);
            for cut in (0..body.len()).step_by(step) {
                let (split, _) = parse_all(&[&body[..cut], &body[cut..]]).expect("valid");
                assert_eq!(split, whole, "{name} split at {cut}");
            }
        }
    }

    #[test]
    fn byte_by_byte_crlf_stream_matches() {
        let body = fixture("gemini-stream.sse");
        let pieces: Vec<&[u8]> = body.chunks(1).collect();
        let (events, _) = parse_all(&pieces).expect("valid");
        assert_eq!(events.len(), parse_all(&[&body]).expect("valid").0.len());
        assert!(events.iter().all(|e| !e.data.ends_with('\r')));
    }

    #[test]
    fn oversized_event_is_refused_not_buffered() {
        let mut p = SseParser::new(64);
        let big = vec![b'x'; 100];
        assert_eq!(p.feed(&big, |_| {}), Err(SseError::TooLarge(64)));
        let mut p = SseParser::new(64);
        let err =
            p.feed(b"data: 0123456789012345678901234567890123456789\ndata: 0123456789012345678901234567890\n", |_| {});
        assert_eq!(err, Err(SseError::TooLarge(64)));
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut p = SseParser::new(64);
        assert_eq!(p.feed(b"data: \xff\xfe\n\n", |_| {}), Err(SseError::NotUtf8));
    }
}
