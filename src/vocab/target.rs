//! What one probe measures: provider + model (+ pinned upstream route) in one region, and the
//! key every output that lists targets carries for it.

pub use super::name::Name;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// Per-target state, hashed with foldhash: the minute's evaluation asks several such maps about
/// every target, and SipHash over a target's four strings was most of that. The keys come from
/// the config, not from the network, so a hasher without flood resistance is safe here.
pub type ByTarget<V> = HashMap<Target, V, foldhash::fast::RandomState>;

/// Identity of one probed target; `Display` gives the stable id `provider/model@route`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Target {
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
    /// The route label as Prometheus wants it: empty when there is none.
    pub fn route_label(&self) -> &str {
        self.route.as_deref().unwrap_or("")
    }

    /// Stable id used in exports, logs and `--target` (`openrouter/meta-llama/llama-3-70b-instruct@DeepInfra`).
    pub fn id(&self) -> String {
        self.to_string()
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
    /// Stable id `provider/model@route` ([`Target::id`]).
    pub target: String,
    /// Provider name from config.
    pub provider: Name,
    /// Model id as the provider spells it; empty for plain HTTP targets.
    pub model: Name,
    /// Pinned upstream host, if any.
    pub route: Option<Name>,
}

impl From<&Target> for TargetKey {
    fn from(t: &Target) -> Self {
        TargetKey { target: t.id(), provider: t.provider.clone(), model: t.model.clone(), route: t.route.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_joins_provider_model_and_route() {
        let t = Target {
            provider: "openrouter".into(),
            model: "meta-llama/llama-3-70b-instruct".into(),
            route: Some("DeepInfra".into()),
            region: "eu-west-1".into(),
        };
        assert_eq!(t.id(), "openrouter/meta-llama/llama-3-70b-instruct@DeepInfra");
        let plain = Target { provider: "status-page".into(), model: Name::default(), route: None, region: "x".into() };
        assert_eq!(plain.id(), "status-page");
    }

    #[test]
    fn has_id_agrees_with_id_without_spelling_it() {
        let routed =
            Target { provider: "or".into(), model: "a/b".into(), route: Some("Groq".into()), region: "eu".into() };
        let model = Target { route: None, ..routed.clone() };
        let plain = Target { model: Name::default(), ..model.clone() };
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
    fn a_flattened_key_serializes_as_the_fields_it_replaces() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Row {
            #[serde(flatten)]
            key: TargetKey,
            region: String,
            samples: u64,
        }
        let t = Target { provider: "p".into(), model: "m".into(), route: None, region: "eu".into() };
        let row = Row { key: TargetKey::from(&t), region: t.region.to_string(), samples: 3 };
        let json = serde_json::to_string(&row).expect("serializes");
        assert_eq!(json, r#"{"target":"p/m","provider":"p","model":"m","route":null,"region":"eu","samples":3}"#);
        assert_eq!(serde_json::from_str::<Row>(&json).expect("reads back"), row);
    }
}
