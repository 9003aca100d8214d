//! What one probe measures: provider + model (+ pinned upstream route) in one region, and the
//! key every output that lists targets carries for it.

pub use super::name::Name;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

/// Per-target state, hashed with foldhash: the minute's evaluation asks several such maps about
/// every target, and SipHash over a target's four strings was most of that. The keys come from
/// the config, not from the network, so a hasher without flood resistance is safe here.
pub type ByTarget<V> = HashMap<Target, V, foldhash::fast::RandomState>;

/// A set of targets, hashed as [`ByTarget`] is (a publish asks it about every target).
pub type TargetSet = std::collections::HashSet<Target, foldhash::fast::RandomState>;

/// Identity of one probed target; `Display` gives the stable id `provider/model@route`.
///
/// One shared allocation behind a pointer: a target is a key of a dozen per-target maps and is
/// held by every sample, view and status of it, and each copy of its four names took 64 bytes
/// (each map of 10,000 targets has 16,384 slots). Reads go through [`TargetNames`] (`t.provider`);
/// a write copies the names first when another holder shares them.
#[derive(Clone)]
pub struct Target(Arc<Held>);

/// The names and, once asked for, the id spelled from them: every export row, view and chain
/// entry carries the id, and spelling it anew for each of 10,000 targets at every publish was
/// a visible share of the publish.
#[derive(Clone)]
struct Held {
    names: TargetNames,
    id: OnceLock<Name>,
}

/// The names a [`Target`] is made of.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TargetNames {
    /// Provider name from config (`openrouter`).
    pub provider: Name,
    /// Model id as the provider spells it; empty for plain HTTP targets.
    pub model: Name,
    /// Upstream host pinned through an aggregator (`DeepInfra`), if any.
    pub route: Option<Name>,
    /// Region label of the instance that probes it.
    pub region: Name,
}

impl Target {
    /// The target of `provider`'s `model` (through `route`) probed from `region`.
    pub fn new(provider: Name, model: Name, route: Option<Name>, region: Name) -> Self {
        Target::of(TargetNames { provider, model, route, region })
    }

    fn of(names: TargetNames) -> Self {
        Target(Arc::new(Held { names, id: OnceLock::new() }))
    }
}

impl Deref for Target {
    type Target = TargetNames;
    fn deref(&self) -> &TargetNames {
        &self.0.names
    }
}

impl DerefMut for Target {
    /// The names to change: the id spelled from the old ones is forgotten first.
    fn deref_mut(&mut self) -> &mut TargetNames {
        let held = Arc::make_mut(&mut self.0);
        held.id = OnceLock::new();
        &mut held.names
    }
}

// Equality, hashing and order are the names', so a target read back from storage finds the
// entries of the one from the config; the same allocation is equal without comparing.
impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.names == other.0.names
    }
}

impl Eq for Target {}

impl Hash for Target {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.names.hash(state)
    }
}

impl PartialOrd for Target {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Target {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.names.cmp(&other.0.names)
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("route", &self.route)
            .field("region", &self.region)
            .finish()
    }
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.names.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        TargetNames::deserialize(d).map(Target::of)
    }
}

impl Target {
    /// The route label as Prometheus wants it: empty when there is none.
    pub fn route_label(&self) -> &str {
        self.route.as_deref().unwrap_or("")
    }

    /// Stable id used in exports, logs and `--target` (`openrouter/meta-llama/llama-3-70b-instruct@DeepInfra`).
    pub fn id(&self) -> String {
        self.shared_id().to_string()
    }

    /// The [`id`](Self::id), spelled once per target and shared by every copy of it.
    pub fn shared_id(&self) -> &Name {
        self.0.id.get_or_init(|| Name::from(self.to_string()))
    }

    /// Whether `id` is this target's [`id`](Self::id), compared without spelling it.
    pub fn has_id(&self, id: &str) -> bool {
        let Some(rest) = id.strip_prefix(self.provider.as_str()) else { return false };
        let rest = match self.model.is_empty() {
            true => rest,
            false => match rest.strip_prefix('/').and_then(|r| r.strip_prefix(self.model.as_str())) {
                Some(r) => r,
                None => return false,
            },
        };
        match &self.route {
            Some(route) => rest.strip_prefix('@') == Some(route.as_str()),
            None => rest.is_empty(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(id) = self.0.id.get() {
            return f.write_str(id);
        }
        f.write_str(&self.provider)?;
        if !self.model.is_empty() {
            write!(f, "/{}", self.model)?;
        }
        if let Some(route) = &self.route {
            write!(f, "@{route}")?;
        }
        Ok(())
    }
}

/// A target as outputs show it: the stable id in `target`, then `provider`, `model` and
/// `route`. Output structs embed it with `#[serde(flatten)]` as their first field (followed by
/// `region` where the output is per region), so every JSON, YAML and HTML output spells a target
/// with the same fields in the same order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TargetKey {
    /// Stable id `provider/model@route` ([`Target::id`]), shared with the target.
    pub target: Name,
    /// Provider name from config.
    pub provider: Name,
    /// Model id as the provider spells it; empty for plain HTTP targets.
    pub model: Name,
    /// Pinned upstream host, if any.
    pub route: Option<Name>,
}

impl From<&Target> for TargetKey {
    fn from(t: &Target) -> Self {
        TargetKey {
            target: t.shared_id().clone(),
            provider: t.provider.clone(),
            model: t.model.clone(),
            route: t.route.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_joins_provider_model_and_route() {
        let t = Target::new(
            "openrouter".into(),
            "meta-llama/llama-3-70b-instruct".into(),
            Some("DeepInfra".into()),
            "eu-west-1".into(),
        );
        assert_eq!(t.id(), "openrouter/meta-llama/llama-3-70b-instruct@DeepInfra");
        let plain = Target::new("status-page".into(), Name::default(), None, "x".into());
        assert_eq!(plain.id(), "status-page");
    }

    #[test]
    fn has_id_agrees_with_id_without_spelling_it() {
        let routed = Target::new("or".into(), "a/b".into(), Some("Groq".into()), "eu".into());
        let model = {
            let mut t = routed.clone();
            t.route = None;
            t
        };
        let plain = {
            let mut t = model.clone();
            t.model = Name::default();
            t
        };
        let ids = [
            "or/a/b@Groq",
            "or/a/b",
            "or",
            "or/a/b@Gro",
            "or/a/b@Groq2",
            "or/a",
            "or/a/b@",
            "or/",
            "o",
            "",
            "or@Groq",
            "x/a/b",
        ];
        for t in [&routed, &model, &plain] {
            for id in ids {
                assert_eq!(t.has_id(id), t.id() == id, "{t} against {id}");
            }
        }
    }

    #[test]
    fn a_target_is_one_pointer_whose_copies_share_names_and_a_write_copies_them_first() {
        use std::hash::BuildHasher;
        assert_eq!(std::mem::size_of::<Target>(), std::mem::size_of::<usize>());
        let t = Target::new("or".into(), "a/b".into(), Some("Groq".into()), "eu".into());
        let copy = t.clone();
        assert!(copy.provider.shares(&t.provider), "a copy points at the same names");
        // Read back from storage: its own names, equal, hashed and ordered alike.
        let read: Target = serde_json::from_str(&serde_json::to_string(&t).expect("serializes")).expect("reads back");
        assert!(!read.provider.shares(&t.provider));
        assert_eq!(read, t);
        assert_eq!(read.cmp(&t), std::cmp::Ordering::Equal);
        let hasher = foldhash::fast::RandomState::default();
        assert_eq!(hasher.hash_one(&read), hasher.hash_one(&t));
        assert_eq!(
            format!("{read:?}"),
            r#"Target { provider: "or", model: "a/b", route: Some("Groq"), region: "eu" }"#
        );
        // A write to one copy leaves the others as they were.
        let mut moved = copy.clone();
        moved.region = "us".into();
        assert_eq!(moved.region.as_str(), "us");
        assert_eq!((copy.region.as_str(), t.region.as_str()), ("eu", "eu"));
        assert_ne!(moved, t);
    }

    #[test]
    fn the_id_is_spelled_once_for_every_copy_and_a_write_spells_it_anew() {
        let t = Target::new("or".into(), "a/b".into(), Some("Groq".into()), "eu".into());
        let copy = t.clone();
        assert!(t.shared_id().shares(copy.shared_id()), "copies share the one spelling");
        assert!(TargetKey::from(&copy).target.shares(t.shared_id()), "so does every key made of them");
        assert_eq!(format!("{t}"), "or/a/b@Groq");
        let mut moved = copy.clone();
        moved.route = Some("Together".into());
        assert_eq!(moved.shared_id(), "or/a/b@Together");
        assert_eq!(moved.to_string(), "or/a/b@Together");
        assert_eq!((t.id(), copy.id()), ("or/a/b@Groq".to_string(), "or/a/b@Groq".to_string()));
        let read: Target = serde_json::from_str(&serde_json::to_string(&moved).expect("serializes")).expect("reads");
        assert_eq!(read.shared_id(), moved.shared_id());
    }

    #[test]
    fn a_flattened_key_serializes_as_the_fields_it_replaces() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Row {
            #[serde(flatten)]
            key: TargetKey,
            region: String,
            samples: u64,
        }
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let row = Row { key: TargetKey::from(&t), region: t.region.to_string(), samples: 3 };
        let json = serde_json::to_string(&row).expect("serializes");
        assert_eq!(json, r#"{"target":"p/m","provider":"p","model":"m","route":null,"region":"eu","samples":3}"#);
        assert_eq!(serde_json::from_str::<Row>(&json).expect("reads back"), row);
    }
}
