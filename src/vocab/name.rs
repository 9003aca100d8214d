//! A target's names (provider, model, route, region) as one shared string per target: a target is
//! copied into dozens of maps, records and views, and each copy used to carry its own four
//! strings (about 130 bytes a copy; at 10,000 targets a tenth of the daemon's memory).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// An immutable string whose clones share one allocation; compares, hashes, orders and
/// serializes as the plain string it holds.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Name(Arc<str>);

impl Name {
    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The shared string itself, for a consumer that takes one (a database binding it).
    pub fn shared(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }

    /// Whether `other` is this very string, not an equal copy.
    pub fn shares(&self, other: &Name) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

// `Hash` and `Ord` above are `str`'s, so a map keyed by `Name` can be searched with a `&str`.
impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Name(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        Name(Arc::from(s))
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Self {
        Name(Arc::from(s.as_str()))
    }
}

impl From<&Name> for Name {
    fn from(s: &Name) -> Self {
        s.clone()
    }
}

impl From<Name> for String {
    fn from(n: Name) -> Self {
        n.0.as_ref().to_owned()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == &*other.0
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Name::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn clones_share_one_string_that_compares_hashes_and_serializes_as_itself() {
        let a = Name::from("openrouter");
        let b = a.clone();
        assert!(a.shares(&b), "a clone shares the allocation");
        assert!(!a.shares(&Name::from("openrouter")), "an equal string made apart is another");
        let owned = String::from("openrouter");
        assert_eq!(a, "openrouter");
        assert_eq!(a, owned);
        assert_eq!(owned, a);
        let (x, y) = (Name::from("x"), Name::from("y"));
        assert!(x < y, "ordered as strings");
        let map: HashMap<Name, u8> = [(a.clone(), 1)].into_iter().collect();
        assert_eq!(map.get("openrouter"), Some(&1), "found by a plain &str");
        assert_eq!(serde_json::to_string(&a).expect("serializes"), r#""openrouter""#);
        assert_eq!(serde_json::from_str::<Name>(r#""x/y""#).expect("reads"), "x/y");
        assert_eq!(format!("{a} {a:?}"), r#"openrouter "openrouter""#);
    }
}
