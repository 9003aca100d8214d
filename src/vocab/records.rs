//! What storage keeps, as plain records: the stages compute them, the store writes and reads
//! them, and neither needs to know how the other works.

use crate::vocab::breaker::State;
use crate::vocab::health::Health;
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A region's alert engine state: its JSON text, held gzip-compressed. The engine writes it
/// straight through the compressor, so the whole text is never held, nor a `serde_json::Value`
/// tree of it: at 10,000 targets the text was 5.4 MB, and that text, SQLite's copy of it as the
/// statement bound it and the record SQLite built from that were 16 MB at once at each minute's
/// store, the daemon's peak. Compressed it is about an eighth of that (6.4 MB of text in 0.85 MB).
///
/// A [`deferred`](StateJson::deferred) one holds a copy of the state and writes it when it is
/// first read: by the storage link, off the pipeline (writing 10,000 targets' state was a sixth
/// of the minute's evaluation), and never for a state a newer one superseded in the link's queue.
/// The bytes are shared ([`StateJson::gzip`]): the statement that stores them binds them without a
/// copy.
#[derive(Clone)]
pub struct StateJson(std::sync::Arc<StateText>);

/// The gzip bytes, and until they are written, what writes them.
struct StateText {
    gz: std::sync::OnceLock<std::sync::Arc<[u8]>>,
    make: std::sync::Mutex<Option<Deferred>>,
}

type Deferred = Box<dyn FnOnce() -> Result<Vec<u8>, serde_json::Error> + Send>;

/// `value` as JSON, written through gzip's fastest level (a state is written every minute and
/// read at a start). Buffered: serde_json writes a token at a time, and the compressor takes each
/// write as a call of its own (10,000 targets' state took 850 ms unbuffered, 38 ms buffered).
fn gzip_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut out = std::io::BufWriter::with_capacity(64 << 10, gz);
    serde_json::to_writer(&mut out, value)?;
    let gz = out.into_inner().map_err(|e| serde_json::Error::io(e.into_error()))?;
    gz.finish().map_err(serde_json::Error::io)
}

impl<'de> serde::Deserialize<'de> for StateJson {
    /// Through a tree: only a replay of the record spool reads one this way, and there serde has
    /// buffered the line (its tag comes first), from which raw text cannot be taken.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let tree = serde_json::Value::deserialize(d)?;
        gzip_json(&tree).map(StateJson::gzipped).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for StateJson {
    /// As the JSON it is, not as a string (only the record spool writes one this way, while
    /// storage is down: the spool's lines stay the JSON earlier builds wrote and read).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        inline(&self.text().map_err(serde::ser::Error::custom)?, s)
    }
}

/// Writes JSON `text` inline, as the document it is (the record spool's lines carry a region's
/// engine state and a breaker's detail this way); the text is JSON by construction (written by
/// serde_json or checked when read from storage).
fn inline<S: serde::Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    let raw: &serde_json::value::RawValue = serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
    serde::Serialize::serialize(raw, s)
}

impl std::fmt::Debug for StateJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.gz.get() {
            Some(gz) => write!(f, "StateJson(<{} bytes of gzip>)", gz.len()),
            None => f.write_str("StateJson(<not written yet>)"),
        }
    }
}

impl StateJson {
    fn gzipped(gz: Vec<u8>) -> Self {
        let cell = std::sync::OnceLock::new();
        let _ = cell.set(std::sync::Arc::from(gz));
        StateJson(std::sync::Arc::new(StateText { gz: cell, make: std::sync::Mutex::new(None) }))
    }

    /// Serializes `state`.
    pub fn of<T: serde::Serialize>(state: &T) -> Result<Self, serde_json::Error> {
        gzip_json(state).map(StateJson::gzipped)
    }

    /// Takes `state` (a copy the caller no longer changes) and writes it when it is first read.
    /// A state that does not serialize (an engine's own types always do) reads as `null`, which a
    /// start reads as unreadable state and starts fresh from, saying so; the error is logged.
    pub fn deferred<T: serde::Serialize + Send + 'static>(state: T) -> Self {
        let make: Deferred = Box::new(move || gzip_json(&state));
        StateJson(std::sync::Arc::new(StateText {
            gz: std::sync::OnceLock::new(),
            make: std::sync::Mutex::new(Some(make)),
        }))
    }

    /// Takes JSON text (as an earlier build stored it), refusing text that is not JSON.
    pub fn from_text(text: &str) -> Result<Self, serde_json::Error> {
        let raw: &serde_json::value::RawValue = serde_json::from_str(text)?;
        gzip_json(raw).map(StateJson::gzipped)
    }

    /// Takes gzip bytes as stored, refusing bytes that are not one gzip-compressed JSON document
    /// (read through once, without holding the text).
    pub fn from_gzip(gz: Vec<u8>) -> Result<Self, serde_json::Error> {
        let text = std::io::BufReader::new(flate2::read::GzDecoder::new(gz.as_slice()));
        serde_json::from_reader::<_, serde::de::IgnoredAny>(text)?;
        Ok(StateJson::gzipped(gz))
    }

    /// The gzip bytes, shared: the statement that stores them binds them without a copy.
    pub fn gzip(&self) -> std::sync::Arc<[u8]> {
        self.written().clone()
    }

    /// The JSON text as it is read, decompressed on the way (buffered, as `serde_json` reads
    /// a byte at a time): what a start parses the state from.
    pub fn reader(&self) -> impl std::io::Read + '_ {
        std::io::BufReader::new(flate2::read::GzDecoder::new(&self.written()[..]))
    }

    /// The whole JSON text (the record spool and tests read it so).
    pub fn text(&self) -> std::io::Result<String> {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut self.reader(), &mut text)?;
        Ok(text)
    }

    /// The bytes, written on the first read of a deferred one.
    fn written(&self) -> &std::sync::Arc<[u8]> {
        self.0.gz.get_or_init(|| {
            let make = self.0.make.lock().ok().and_then(|mut m| m.take());
            let null = || gzip_json(&()).map(std::sync::Arc::from).unwrap_or_else(|_| std::sync::Arc::from(Vec::new()));
            match make.map(|make| make()) {
                Some(Ok(gz)) => std::sync::Arc::from(gz),
                Some(Err(e)) => {
                    tracing::error!(error = %e, "alert state not serialized; stored as null (a start begins fresh)");
                    null()
                }
                // Only a poisoned lock gets here: another reader panicked while writing it.
                None => null(),
            }
        })
    }
}

impl PartialEq for StateJson {
    /// As JSON text: two compressions of one text need not be the same bytes.
    fn eq(&self, other: &Self) -> bool {
        matches!((self.text(), other.text()), (Ok(a), Ok(b)) if a == b)
    }
}

/// One hourly HDR histogram of one metric for one target in one region.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rollup {
    /// Target and region.
    pub target: Target,
    /// `ttfb`, `ttft` or `tokens_per_s` (or the `probes`/`errors` counts), shared by every
    /// rollup of that metric a persist hands over.
    pub metric: crate::vocab::target::Name,
    /// Start of the UTC hour.
    pub hour: DateTime<Utc>,
    /// Values recorded.
    pub count: i64,
    /// HdrHistogram V2 serialization.
    pub histogram: Vec<u8>,
}

/// Persisted breaker state of one target in one region.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BreakerRecord {
    /// Target and region.
    pub target: Target,
    /// `closed`, `half_open` or `open`.
    pub state: State,
    /// When it entered that state.
    pub since: DateTime<Utc>,
    /// Machine-readable detail (counters, tripping probes, next half-open time).
    pub detail: JsonText,
}

/// A JSON document held as its text (a breaker's stored detail): a few hundred bytes where a
/// `serde_json::Value` tree of it took kilobytes, a map and a string per key of every probe. A
/// persist hands the link every breaker a round moved, at 10,000 targets 7 MB as trees.
#[derive(Clone)]
pub struct JsonText(std::sync::Arc<str>);

impl JsonText {
    /// Serializes `value` into JSON text.
    pub fn of<T: serde::Serialize>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::to_string(value).map(|t| JsonText(t.into()))
    }

    /// Takes JSON text as stored, refusing text that is not JSON.
    pub fn from_text(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str::<&serde_json::value::RawValue>(text)?;
        Ok(JsonText(text.into()))
    }

    /// JSON `null`.
    pub fn null() -> Self {
        JsonText("null".into())
    }

    /// Whether it is JSON `null`.
    pub fn is_null(&self) -> bool {
        self.0.trim() == "null"
    }

    /// Reads it as a `T`.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// The text, shared: the statement that stores it binds it without a copy.
    pub fn shared(&self) -> std::sync::Arc<str> {
        self.0.clone()
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<serde_json::Value> for JsonText {
    fn from(v: serde_json::Value) -> Self {
        JsonText(v.to_string().into())
    }
}

impl PartialEq for JsonText {
    /// As JSON: PostgreSQL's `jsonb` hands back the same document spelled otherwise (its own
    /// key order and spacing).
    fn eq(&self, other: &Self) -> bool {
        match (self.parse::<serde_json::Value>(), other.parse::<serde_json::Value>()) {
            (Ok(a), Ok(b)) => a == b,
            _ => self.0 == other.0,
        }
    }
}

impl std::fmt::Debug for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for JsonText {
    /// As the JSON it is, not as a string (the record spool writes one this way).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        inline(&self.0, s)
    }
}

impl<'de> serde::Deserialize<'de> for JsonText {
    /// Through a tree, as [`StateJson`]: a spooled record's tag comes first, so serde has
    /// buffered the line, from which raw text cannot be taken.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <serde_json::Value as serde::Deserialize>::deserialize(d).map(JsonText::from)
    }
}

/// One breaker transition, kept as history.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BreakerTransition {
    /// Target and region.
    pub target: Target,
    /// Previous state.
    pub from_state: State,
    /// New state.
    pub to_state: State,
    /// When.
    pub at: DateTime<Utc>,
    /// Why, for humans (`3 failed probes in 120s: server_error, server_error, timeout`).
    pub reason: String,
}

/// One message waiting in (or done with) the alert outbox.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OutboxItem {
    /// Unique id; also the idempotency key receivers see.
    pub id: Uuid,
    /// Region whose instance delivers it (instances sharing a database deliver only their own).
    pub region: String,
    /// Channel name (`slack`, `pagerduty-1`).
    pub channel: String,
    /// Alert kind (`errors`, `credit_low`…), for metrics.
    pub kind: String,
    /// Stable key of the incident (PagerDuty `dedup_key`).
    pub dedup_key: String,
    /// The rendered notification.
    pub payload: serde_json::Value,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// Not before this time.
    pub next_attempt_at: DateTime<Utc>,
    /// Attempts made so far.
    pub attempts: i32,
    /// Last error, if any.
    pub last_error: Option<String>,
}

/// One row of `target_status`: what one region's instance currently sees of one target.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TargetStatus {
    /// The target, with the publishing region.
    pub target: Target,
    /// Its health as that region judged it (the one judgement; see `vocab::health`).
    pub health: Health,
    /// Over its alert latency threshold with sustained evidence (k of n probes): the
    /// `latency_degraded` rule's evidence, which the scope of a latency incident counts.
    pub over_latency: bool,
    /// That region's breaker for the target.
    pub breaker: State,
    /// When the row was written.
    pub updated_at: DateTime<Utc>,
}

/// One region's sighting of a shared incident (`incident_sightings`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sighting {
    /// Region that sees (or saw) it.
    pub region: String,
    /// Still firing there.
    pub firing: bool,
    /// Last refreshed.
    pub updated_at: DateTime<Utc>,
}

/// One credit balance reading.
#[derive(Debug, Clone, PartialEq)]
pub struct BalanceReading {
    /// Provider name.
    pub provider: String,
    /// Region that polled.
    pub region: String,
    /// When.
    pub at: DateTime<Utc>,
    /// USD left.
    pub remaining_usd: f64,
}

#[cfg(test)]
mod tests {
    use super::{JsonText, StateJson};
    use std::collections::BTreeMap;

    #[test]
    fn a_deferred_state_reads_as_the_text_of_its_copy_and_travels_as_json() {
        let mut state = BTreeMap::from([("eu|a/m".to_string(), vec![1.5, 2.0])]);
        let deferred = StateJson::deferred(state.clone());
        assert_eq!(format!("{deferred:?}"), "StateJson(<not written yet>)");
        state.insert("eu|b/m".into(), vec![3.0]);
        let eager = StateJson::of(&BTreeMap::from([("eu|a/m".to_string(), vec![1.5, 2.0])])).expect("json");
        assert_eq!(
            deferred.text().expect("text"),
            r#"{"eu|a/m":[1.5,2.0]}"#,
            "the copy taken, not the state as changed since"
        );
        assert_eq!(deferred, eager);
        let copy = deferred.clone();
        assert_eq!(copy.text().expect("text"), deferred.text().expect("text"), "clones share the written text");
        // The record spool writes it inline and reads it back as text.
        let line = serde_json::to_string(&serde_json::json!({ "state": &deferred })).expect("line");
        assert_eq!(line, r#"{"state":{"eu|a/m":[1.5,2.0]}}"#);
        let back: BTreeMap<String, StateJson> = serde_json::from_str(&line).expect("read back");
        assert_eq!(back["state"], eager);
    }

    /// A state is held as gzip of its text, a fraction of the text for the repetitive histories
    /// an engine writes; stored bytes are taken only when they are gzip of one JSON document.
    #[test]
    fn a_state_is_held_as_gzip_and_stored_bytes_must_be_gzip_of_json() {
        use std::io::Write;
        let histories: BTreeMap<String, Vec<(String, String)>> = (0..500)
            .map(|i| (format!("eu|p{i}/m"), vec![("2026-12-06T20:00:00Z".to_string(), "ok".to_string()); 10]))
            .collect();
        let state = StateJson::of(&histories).expect("json");
        let text = serde_json::to_string(&histories).expect("text");
        assert_eq!(state.text().expect("text"), text);
        let gz = state.gzip();
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip's magic");
        assert!(gz.len() * 10 < text.len(), "{} bytes of gzip for {} of text", gz.len(), text.len());
        assert_eq!(StateJson::from_gzip(gz.to_vec()).expect("stored bytes"), state);

        let gzip_of = |bytes: &[u8]| {
            let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            out.write_all(bytes).expect("write");
            out.finish().expect("finish")
        };
        assert!(StateJson::from_gzip(text.as_bytes().to_vec()).is_err(), "plain text is not gzip");
        assert!(StateJson::from_gzip(gzip_of(b"{\"a\": ")).is_err(), "gzip of cut JSON");
        assert!(StateJson::from_gzip(gzip_of(b"{} {}")).is_err(), "gzip of two documents");
        assert!(StateJson::from_gzip(gz[..gz.len() / 2].to_vec()).is_err(), "cut gzip");
        assert!(StateJson::from_text("{\"a\": ").is_err());
        let older = StateJson::from_text(" {\"a\": 1} ").expect("an earlier build's text");
        assert_eq!(older.text().expect("text"), "{\"a\": 1}", "the document as written, without the space around it");
    }

    #[test]
    fn a_state_that_does_not_serialize_reads_as_null() {
        // serde_json refuses map keys that are not strings.
        let deferred = StateJson::deferred(BTreeMap::from([((1u8, 2u8), 3u8)]));
        assert_eq!(deferred.text().expect("text"), "null");
        assert!(StateJson::of(&BTreeMap::from([((1u8, 2u8), 3u8)])).is_err());
    }

    #[test]
    fn json_text_travels_inline_and_equals_the_same_document_spelled_otherwise() {
        let detail = JsonText::of(&serde_json::json!({"failures": [1, 2], "next_half_open": null})).expect("json");
        // PostgreSQL's jsonb hands it back with its own spacing and key order.
        let stored = JsonText::from_text(r#"{"next_half_open": null, "failures": [1, 2]}"#).expect("json");
        assert_eq!(detail, stored);
        assert_ne!(detail, JsonText::from_text(r#"{"failures": [1]}"#).expect("json"));
        assert!(JsonText::from_text("{not json").is_err(), "stored text that is not JSON is refused");
        assert!(JsonText::null().is_null() && !detail.is_null());
        // The record spool writes it as the object it is, and a line of an earlier build reads back.
        let line = serde_json::to_string(&serde_json::json!({ "detail": &detail })).expect("line");
        assert_eq!(line, r#"{"detail":{"failures":[1,2],"next_half_open":null}}"#);
        let back: BTreeMap<String, JsonText> = serde_json::from_str(&line).expect("read back");
        assert_eq!(back["detail"], detail);
    }
}
