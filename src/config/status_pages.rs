//! Polling of the providers' own status pages: which page each provider has (built-in default,
//! set, or switched off with ""), how often they are read, and whether their incidents alert.
//! Spread over `[[provider]]`, `[probe]` and `[alerts]` in the file, gathered here in one place.

use crate::config::alerts::RawAlerts;
use crate::config::parse::{duration_in, no_controls, DAY, SECOND};
use crate::config::{invalid, ConfigError};
use std::time::Duration;
use url::Url;

/// Polling of the providers' official status pages (Statuspage v2 JSON).
#[derive(Debug, Clone, Default)]
pub struct StatusPagesConfig {
    /// Time between polls of each page (`probe.status_page_every`).
    pub every: Duration,
    /// One entry per configured provider whose page is polled (empty `status_page_url` = off).
    pub pages: Vec<StatusPageSource>,
    /// `alerts.provider_incident`: alert on the provider's own open incidents (off by default).
    pub alert: bool,
    /// `alerts.provider_incident_components`: only incidents naming one of these components
    /// (case-insensitive); empty means every incident.
    pub alert_components: Vec<String>,
}

/// One provider's status page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusPageSource {
    /// Provider name as in `[[provider]]`.
    pub provider: String,
    /// Base URL of the page (vigil reads `<url>/api/v2/summary.json`).
    pub url: Url,
    /// `status_page_components`: the components whose incidents `provider_incident` pages for
    /// this provider (case-insensitive; empty = every incident); `None` follows
    /// `alerts.provider_incident_components`.
    pub components: Option<Vec<String>>,
}

/// Provider `i`'s page: `status_page_url` as given, else `default` (its built-in page, if any);
/// `None` when that is empty.
pub(super) fn source(
    i: usize,
    provider: &str,
    url: Option<String>,
    default: &str,
    components: Option<&Vec<String>>,
) -> Result<Option<StatusPageSource>, ConfigError> {
    let key = |field: &str| format!("provider[{i}].{field}");
    let page = url.unwrap_or_else(|| default.to_string());
    if page.trim().is_empty() {
        return Ok(None);
    }
    let url = Url::parse(page.trim()).map_err(|e| invalid(key("status_page_url"), e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(key("status_page_url"), format!("scheme {:?} is not http or https", url.scheme())));
    }
    if let Some(list) = components {
        for (j, c) in list.iter().enumerate() {
            no_controls(&format!("{}[{j}]", key("status_page_components")), c)?;
        }
    }
    Ok(Some(StatusPageSource { provider: provider.to_string(), url, components: components.cloned() }))
}

/// The polling settings: `every` is `probe.status_page_every`, the alert comes from `[alerts]`.
pub(super) fn validate(
    every: &str,
    alerts: &RawAlerts,
    pages: Vec<StatusPageSource>,
) -> Result<StatusPagesConfig, ConfigError> {
    let every = duration_in("probe.status_page_every", every, SECOND, DAY)?;
    for (i, c) in alerts.provider_incident_components.iter().enumerate() {
        no_controls(&format!("alerts.provider_incident_components[{i}]"), c)?;
    }
    Ok(StatusPagesConfig {
        every,
        pages,
        alert: alerts.provider_incident,
        alert_components: alerts.provider_incident_components.clone(),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::env;
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn status_pages_default_for_builtins_can_be_set_or_switched_off() {
        let keys =
            env(&[("OPENAI_API_KEY", "sk-test-1"), ("GROQ_API_KEY", "sk-test-2"), ("DEEPINFRA_API_KEY", "sk-test-3")]);
        let c = Config::from_toml("", &keys).expect("valid");
        let pages: Vec<(&str, &str)> =
            c.status_pages.pages.iter().map(|p| (p.provider.as_str(), p.url.as_str())).collect();
        assert_eq!(pages, vec![("openai", "https://status.openai.com/"), ("groq", "https://groqstatus.com/")]);
        assert_eq!(c.status_pages.every, Duration::from_secs(180));
        assert!(!c.status_pages.alert, "provider_incident is off by default");
        let text = "[probe]\nstatus_page_every = \"5m\"\n[alerts]\nprovider_incident = true\nprovider_incident_components = [\"Chat Completions\"]\n\
                    [[provider]]\nname = \"openai\"\nstatus_page_url = \"\"\n\
                    [[provider]]\nname = \"deepinfra\"\nstatus_page_url = \"https://status.example.invalid\"\n";
        let c = Config::from_toml(text, &keys).expect("valid");
        assert_eq!(c.status_pages.pages.len(), 1, "openai switched off");
        assert_eq!(c.status_pages.pages[0].provider, "deepinfra");
        assert_eq!(c.status_pages.every, Duration::from_secs(300));
        assert!(c.status_pages.alert);
        assert_eq!(c.status_pages.alert_components, vec!["Chat Completions".to_string()]);
        assert!(c.redacted_toml().contains("status.example.invalid"));
        let back = Config::from_toml(&c.redacted_toml(), &keys).expect("check-config output reads back");
        assert_eq!(back.status_pages.pages, c.status_pages.pages, "off stays off, set stays set");
        assert_eq!(back.status_pages.every, c.status_pages.every);
        assert_eq!(back.status_pages.alert_components, c.status_pages.alert_components);
        let bad = Config::from_toml("[[provider]]\nname = \"openai\"\nstatus_page_url = \"ftp://x\"\n", &keys)
            .expect_err("not http");
        assert!(bad.to_string().contains("provider[0].status_page_url"), "{bad}");
        let fast = Config::from_toml("[probe]\nstatus_page_every = \"10ms\"\n", &keys).expect_err("too fast");
        assert!(fast.to_string().contains("probe.status_page_every"), "{fast}");
    }
}
