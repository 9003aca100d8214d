//! What a router needs to call a configured provider — its protocol, its API base and the
//! variable holding its key — and what the provider is. OpenRouter is known by its API host or by
//! pinned routes (`decide::pricing::is_openrouter`), never by its name, so a provider called
//! `or-eu` gets the same pins as one called `openrouter`. Never carries the key itself.

use crate::config::{Endpoint, ProviderConfig, ProviderKind};

/// One configured provider as the router formats see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterProvider {
    /// Name from config (the `provider` of its targets).
    pub name: String,
    /// Protocol family.
    pub kind: ProviderKind,
    /// API base as configured (for `azure`, the resource with an optional `?api-version=`).
    pub base_url: url::Url,
    /// The variable a router reads the key from: `api_key_env`, or [`derived_key_env`] when vigil
    /// reads the key from a file or holds it itself.
    pub key_env: String,
    /// Whether `key_env` is derived from the name (vigil's own key comes from no variable).
    pub key_env_derived: bool,
    /// OpenRouter, by host or because it pins routes.
    pub openrouter: bool,
    /// The API its targets are called on (`endpoint`).
    pub endpoint: Endpoint,
}

impl From<&ProviderConfig> for RouterProvider {
    fn from(p: &ProviderConfig) -> Self {
        let (key_env, key_env_derived) = match &p.api_key_env {
            Some(var) if !var.is_empty() => (var.clone(), false),
            _ => (derived_key_env(&p.name), true),
        };
        RouterProvider {
            name: p.name.clone(),
            kind: p.kind,
            base_url: p.base_url.clone(),
            key_env,
            key_env_derived,
            openrouter: crate::decide::pricing::is_openrouter(p),
            endpoint: p.endpoint,
        }
    }
}

/// `<NAME>_API_KEY`: the name upper-cased, every character but letters and digits as `_`
/// (`or-eu` → `OR_EU_API_KEY`).
pub fn derived_key_env(name: &str) -> String {
    let upper: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("{upper}_API_KEY")
}

/// The configured providers as the router formats see them: sorted by name and shared, so every
/// publish's document holds the same list (10,000 providers were copied twice a publish) and a
/// router format finds each member's provider by a binary search, not a scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterProviders(std::sync::Arc<[RouterProvider]>);

impl RouterProviders {
    /// The provider named `name`.
    pub fn find(&self, name: &str) -> Option<&RouterProvider> {
        self.0.binary_search_by(|p| p.name.as_str().cmp(name)).ok().map(|i| &self.0[i])
    }

    /// Every provider, by name.
    pub fn iter(&self) -> std::slice::Iter<'_, RouterProvider> {
        self.0.iter()
    }
}

impl FromIterator<RouterProvider> for RouterProviders {
    fn from_iter<I: IntoIterator<Item = RouterProvider>>(iter: I) -> Self {
        let mut all: Vec<RouterProvider> = iter.into_iter().collect();
        // Stable: of two providers with one name (config validation refuses them) the first wins, as before.
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.dedup_by(|later, first| later.name == first.name);
        RouterProviders(all.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(name: &str, base: &str, routes: &[&str], key_env: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            routes: routes.iter().map(|r| r.to_string()).collect(),
            api_key_env: key_env.map(String::from),
            ..ProviderConfig::new(name, ProviderKind::Openai, url::Url::parse(base).expect("url"))
        }
    }

    #[test]
    fn openrouter_is_known_by_host_or_routes_whatever_its_name() {
        let by_host = RouterProvider::from(&provider("or-eu", "https://openrouter.ai/api/v1", &[], Some("OR_KEY")));
        assert!(by_host.openrouter);
        assert_eq!((by_host.key_env.as_str(), by_host.key_env_derived), ("OR_KEY", false));
        let by_routes = RouterProvider::from(&provider("demo-llama", "http://127.0.0.1:9/api/v1", &["Lepton"], None));
        assert!(by_routes.openrouter);
        assert_eq!((by_routes.key_env.as_str(), by_routes.key_env_derived), ("DEMO_LLAMA_API_KEY", true));
        let named = RouterProvider::from(&provider("openrouter", "https://api.openai.com/v1", &[], None));
        assert!(!named.openrouter, "the name alone says nothing");
    }

    #[test]
    fn providers_are_found_by_name_whatever_the_configured_order() {
        let names = ["zeta", "alpha", "or-eu", "mid", "alpha"];
        let bases = [
            "http://127.0.0.1:1/v1",
            "http://127.0.0.1:2/v1",
            "https://openrouter.ai/api/v1",
            "http://127.0.0.1:3/v1",
            "http://127.0.0.1:4/v1",
        ];
        let all: RouterProviders =
            names.iter().zip(bases).map(|(n, b)| RouterProvider::from(&provider(n, b, &[], None))).collect();
        assert_eq!(all.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["alpha", "mid", "or-eu", "zeta"]);
        assert_eq!(
            all.find("alpha").map(|p| p.base_url.as_str()),
            Some("http://127.0.0.1:2/v1"),
            "the first of a name"
        );
        assert!(all.find("or-eu").is_some_and(|p| p.openrouter));
        assert_eq!(all.find("zeta").map(|p| p.name.as_str()), Some("zeta"));
        assert!(all.find("beta").is_none() && all.find("").is_none() && all.find("zz").is_none());
        assert!(RouterProviders::default().find("alpha").is_none());
    }
}
