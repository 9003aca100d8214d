//! Reads a models list as it streams in and keeps only what the poller needs: whether each
//! configured model is listed and the expiration date given to it. Nothing else of the answer
//! is held: not the body (read through a small buffer on a blocking thread), not the other
//! entries (each is skipped as it is read), not their fields. What one answer can cost is the
//! read buffer, the chunk in flight and the longest single string in it (serde_json collects a
//! string before looking at it); a real list of 900,000 ids costs well under a megabyte.
//!
//! Shapes read (as `decide::alert::deprecation::listed_models` does): OpenAI's
//! `{"data":[{"id":…}]}`, Together's bare `[{"id":…}]`, Gemini's `{"models":[{"name":"models/…"}]}`;
//! OpenRouter's `expiration_date` (`YYYY-MM-DD` or RFC 3339) on any entry.

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What a models list says about the models asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFacts {
    /// Entries that carried an id (every one counted, wanted or not).
    pub ids: usize,
    /// The wanted models the list holds.
    pub listed: BTreeSet<String>,
    /// The wanted models' expiration dates.
    pub expires: BTreeMap<String, DateTime<Utc>>,
}

/// Reads `resp`'s body, at most `limit` bytes, as a models list, keeping only `wanted` models.
pub async fn read_list(resp: reqwest::Response, limit: usize, wanted: BTreeSet<String>) -> Result<ListFacts, String> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(format!("response body larger than {limit} bytes"));
    }
    let chunks = futures::stream::try_unfold((resp, 0usize), move |(mut resp, seen)| async move {
        match resp.chunk().await {
            Ok(Some(chunk)) if seen + chunk.len() > limit => {
                Err(std::io::Error::other(format!("response body larger than {limit} bytes")))
            }
            Ok(Some(chunk)) => {
                let seen = seen + chunk.len();
                Ok(Some((chunk, (resp, seen))))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(std::io::Error::other(format!("reading the response body failed: {}", e.without_url()))),
        }
    });
    let reader = tokio_util::io::StreamReader::new(Box::pin(chunks));
    let bridge = tokio_util::io::SyncIoBridge::new(reader);
    let parse = tokio::task::spawn_blocking(move || parse(std::io::BufReader::new(bridge), &wanted));
    parse.await.map_err(|e| format!("models list reader: {e}"))?
}

/// Parses a models list from `reader`, keeping only `wanted` models.
pub fn parse(reader: impl std::io::Read, wanted: &BTreeSet<String>) -> Result<ListFacts, String> {
    let mut facts = ListFacts::default();
    let mut de = serde_json::Deserializer::from_reader(reader);
    let read = ListSeed { wanted, facts: &mut facts }.deserialize(&mut de).and_then(|()| de.end());
    match read {
        Ok(()) => Ok(facts),
        Err(e) if e.is_io() => Err(e.to_string()),
        Err(e) => Err(format!("not a models list: {e}")),
    }
}

/// Scalars a lenient visitor accepts and ignores, answering `$value`.
macro_rules! skip_scalars {
    ($value:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Reads and drops what is left of a sequence.
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Reads and drops what is left of a map.
fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// The whole answer: a bare list of entries, or an object whose `data` (ids) or `models`
/// (Gemini names) holds them.
struct ListSeed<'a> {
    wanted: &'a BTreeSet<String>,
    facts: &'a mut ListFacts,
}

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a models list (an object with `data` or `models`, or an array)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Entries { wanted: self.wanted, facts: self.facts, field: "id" }.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            let field = match key {
                Key::Data => "id",
                Key::Models => "name",
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            map.next_value_seed(Entries { wanted: self.wanted, facts: &mut *self.facts, field })?;
        }
        Ok(())
    }
}

/// A key of the answer's object, its entries' objects too.
enum Key {
    Data,
    Models,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "data" => Key::Data,
                    "models" => Key::Models,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

/// A list of entries whose `field` names the model; anything but a list is skipped.
struct Entries<'a> {
    wanted: &'a BTreeSet<String>,
    facts: &'a mut ListFacts,
    field: &'static str,
}

impl<'de> DeserializeSeed<'de> for Entries<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of models")
    }

    skip_scalars!(());

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        drain_map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(entry) = seq.next_element_seed(EntrySeed { wanted: self.wanted, field: self.field })? {
            let Some(id) = entry.id else { continue };
            self.facts.ids += 1;
            if let Some(model) = id {
                if let Some(date) = entry.expires {
                    self.facts.expires.insert(model.clone(), date);
                }
                self.facts.listed.insert(model);
            }
        }
        Ok(())
    }
}

/// What one entry said: `id` is `Some(None)` for an id not wanted, `Some(Some(model))` for a wanted one.
#[derive(Default)]
struct Entry {
    id: Option<Option<String>>,
    expires: Option<DateTime<Utc>>,
}

struct EntrySeed<'a> {
    wanted: &'a BTreeSet<String>,
    field: &'static str,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = Entry;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Entry, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a model entry")
    }

    skip_scalars!(Entry::default());

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Entry, E> {
        Ok(Entry::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Entry, A::Error> {
        drain_seq(seq).map(|()| Entry::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
        let mut entry = Entry::default();
        while let Some(key) = map.next_key::<FieldName>()? {
            match key.0 {
                Some(FieldKind::Model(f)) if f == self.field => {
                    let strip = self.field == "name";
                    entry.id = map.next_value_seed(IdSeed { wanted: self.wanted, strip })?;
                }
                Some(FieldKind::Expiration) => entry.expires = map.next_value_seed(DateSeed)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(entry)
    }
}

/// The fields of an entry that matter.
enum FieldKind {
    /// `id` or `name`.
    Model(&'static str),
    /// `expiration_date`.
    Expiration,
}

struct FieldName(Option<FieldKind>);

impl<'de> de::Deserialize<'de> for FieldName {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<FieldName, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FieldName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldName, E> {
                Ok(FieldName(match v {
                    "id" => Some(FieldKind::Model("id")),
                    "name" => Some(FieldKind::Model("name")),
                    "expiration_date" => Some(FieldKind::Expiration),
                    _ => None,
                }))
            }
        }
        d.deserialize_identifier(V)
    }
}

/// A model's id: `Some(Some(id))` when wanted, `Some(None)` for any other text, `None` for a
/// value that is not text. Only wanted ids are copied.
struct IdSeed<'a> {
    wanted: &'a BTreeSet<String>,
    /// Gemini names read `models/<id>`.
    strip: bool,
}

impl<'de> DeserializeSeed<'de> for IdSeed<'_> {
    type Value = Option<Option<String>>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdSeed<'_> {
    type Value = Option<Option<String>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a model id")
    }

    skip_scalars!(None);

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let id = match self.strip {
            true => v.strip_prefix("models/").unwrap_or(v),
            false => v,
        };
        Ok(Some(self.wanted.get(id).cloned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map).map(|()| None)
    }
}

/// OpenRouter's `expiration_date`: `YYYY-MM-DD` (midnight UTC) or RFC 3339; anything else is no date.
struct DateSeed;

impl<'de> DeserializeSeed<'de> for DateSeed {
    type Value = Option<DateTime<Utc>>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DateSeed {
    type Value = Option<DateTime<Utc>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a date")
    }

    skip_scalars!(None);

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Self::Value, E> {
        Ok(NaiveDate::parse_from_str(raw, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|d| Utc.from_utc_datetime(&d))
            .or_else(|| DateTime::parse_from_rfc3339(raw).ok().map(|d| d.with_timezone(&Utc))))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::alert::deprecation::{listed_models, openrouter_expirations};

    fn wanted(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn read(body: &str, ids: &[&str]) -> Result<ListFacts, String> {
        parse(body.as_bytes(), &wanted(ids))
    }

    #[test]
    fn every_shape_the_whole_body_reading_knew_gives_the_same_models() {
        let bodies = [
            r#"{"object":"list","data":[{"id":"gpt-a","object":"model"},{"id":"gpt-b","owned_by":{"x":[1,2]}}]}"#,
            r#"[{"id":"gpt-a"},{"id":"other"},{"id":7},"text",null,{"no_id":true}]"#,
            r#"{"models":[{"name":"models/gemini-x","displayName":"G"},{"name":"gemini-y"}]}"#,
            r#"{"data":[{"id":"gpt-a"}],"models":[{"name":"models/gpt-b"}],"extra":{"data":[{"id":"gpt-c"}]}}"#,
            r#"{"data":{"id":"not-a-list"}}"#,
        ];
        for body in bodies {
            let all = listed_models(body.as_bytes()).expect("old reading");
            let asked: Vec<&str> = ["gpt-a", "gpt-b", "gpt-c", "gemini-x", "gemini-y", "other", "missing"].into();
            let facts = read(body, &asked).expect("streaming reading");
            let want: BTreeSet<String> = all.iter().filter(|id| asked.contains(&id.as_str())).cloned().collect();
            assert_eq!(facts.listed, want, "{body}");
            assert_eq!(facts.ids, all.len(), "{body}");
        }
    }

    #[test]
    fn expiration_dates_are_kept_for_wanted_models_only() {
        let body = r#"{"data":[
            {"expiration_date":"2026-12-15","id":"x/old","pricing":{"prompt":"0"}},
            {"id":"x/new","expiration_date":"2027-01-01T12:00:00Z"},
            {"id":"x/other","expiration_date":"2026-12-20"},
            {"id":"x/none","expiration_date":null},
            {"id":"x/bad","expiration_date":"soon"}]}"#;
        let facts = read(body, &["x/old", "x/new", "x/none", "x/bad"]).expect("reads");
        let old = openrouter_expirations(body.as_bytes()).expect("old reading");
        assert_eq!(facts.expires.len(), 2);
        assert_eq!(facts.expires["x/old"], old["x/old"]);
        assert_eq!(facts.expires["x/new"], old["x/new"]);
        assert_eq!(facts.listed.len(), 4);
    }

    #[test]
    fn what_is_not_a_models_list_is_an_error_or_an_empty_reading() {
        assert!(read("not json", &["a"]).expect_err("garbage").starts_with("not a models list"));
        assert!(read(r#"{"data":[{"id":"a"}"#, &["a"]).is_err(), "cut short");
        assert!(read(r#"{"data":[]} trailing"#, &["a"]).is_err(), "trailing bytes");
        assert_eq!(read(r#"{"error":"nope"}"#, &["a"]).expect("an object without a list").ids, 0);
    }

    #[test]
    fn a_long_list_is_read_entry_by_entry() {
        let mut body = String::from(r#"{"data":["#);
        for i in 0..100_000 {
            body.push_str(&format!(r#"{{"id":"m-{i:06}","object":"model"}},"#));
        }
        body.push_str(r#"{"id":"wanted"}]}"#);
        let facts = read(&body, &["wanted", "m-000042", "absent"]).expect("reads");
        assert_eq!(facts.ids, 100_001);
        assert_eq!(facts.listed, wanted(&["wanted", "m-000042"]));
    }
}
