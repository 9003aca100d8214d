//! `probe.proxy`, `HTTPS_PROXY`/`HTTP_PROXY` and `NO_PROXY`: which probes go through a proxy.

use crate::config::{invalid, ConfigError, Env};
use url::Url;

/// The proxy settings of the probes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProxyConfig {
    /// Proxy for `https` targets (`probe.proxy`, else `HTTPS_PROXY`).
    pub https: Option<Url>,
    /// Proxy for `http` targets (`probe.proxy`, else `HTTP_PROXY`).
    pub http: Option<Url>,
    /// `NO_PROXY` entries: `*`, host names (a leading dot optional, subdomains included) or IPs.
    pub no_proxy: Vec<String>,
}

impl ProxyConfig {
    /// The proxy a probe of `scheme://host` goes through, if any.
    pub fn for_target(&self, scheme: &str, host: &str) -> Option<&Url> {
        let proxy = if scheme == "https" { self.https.as_ref() } else { self.http.as_ref() }?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let bypass = self.no_proxy.iter().any(|entry| {
            let e = entry.trim().trim_start_matches('.').to_ascii_lowercase();
            let e = e.split_once(':').filter(|_| !e.contains("::")).map_or(e.as_str(), |(h, _)| h).to_string();
            e == "*" || (!e.is_empty() && (host == e || host.ends_with(&format!(".{e}"))))
        });
        (!bypass).then_some(proxy)
    }

    /// The proxy URL with any password replaced, for `check-config` and logs.
    pub fn redacted(url: &Url) -> String {
        let mut u = url.clone();
        if u.password().is_some() {
            let _ = u.set_password(Some("<redacted>"));
        }
        u.to_string()
    }
}

/// The probes' proxy: `probe.proxy` for every scheme (`off` for none), else `HTTPS_PROXY` and
/// `HTTP_PROXY` (either case) by scheme; `NO_PROXY` lists the hosts that bypass it.
pub(super) fn from_env(key: Option<&str>, env: &dyn Env) -> Result<ProxyConfig, ConfigError> {
    let var = |names: [&str; 2]| names.iter().find_map(|n| env.get(n));
    let parse = |what: &str, v: String| -> Result<Url, ConfigError> {
        let with_scheme = if v.contains("://") { v } else { format!("http://{v}") };
        let u = Url::parse(&with_scheme).map_err(|e| invalid(what, e.to_string()))?;
        if u.scheme() != "http" {
            return Err(invalid(
                what,
                format!("scheme {:?}: only http:// proxies (HTTP CONNECT) are supported", u.scheme()),
            ));
        }
        if u.host_str().is_none() {
            return Err(invalid(what, "has no host"));
        }
        Ok(u)
    };
    let (https, http) = match key.map(str::trim) {
        Some("off") => (None, None),
        Some(v) if !v.is_empty() => {
            let u = parse("probe.proxy", v.to_string())?;
            (Some(u.clone()), Some(u))
        }
        _ => (
            var(["HTTPS_PROXY", "https_proxy"]).map(|v| parse("HTTPS_PROXY", v)).transpose()?,
            var(["HTTP_PROXY", "http_proxy"]).map(|v| parse("HTTP_PROXY", v)).transpose()?,
        ),
    };
    let no_proxy = var(["NO_PROXY", "no_proxy"])
        .map(|v| v.split(',').map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect())
        .unwrap_or_default();
    Ok(ProxyConfig { https, http, no_proxy })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::collections::BTreeMap;

    #[test]
    fn probe_proxy_comes_from_the_key_or_the_environment_and_is_shown_redacted() {
        let env: BTreeMap<String, String> = [
            ("HTTPS_PROXY".to_string(), "http://user:s3cret@proxy.corp:3128".to_string()),
            ("no_proxy".to_string(), "localhost, .internal".to_string()),
        ]
        .into();
        let c = Config::from_toml("", &env).expect("config");
        assert_eq!(c.probe.proxy.https.as_ref().map(|u| u.as_str()), Some("http://user:s3cret@proxy.corp:3128/"));
        assert_eq!(c.probe.proxy.http, None);
        assert_eq!(c.probe.proxy.no_proxy, vec!["localhost".to_string(), ".internal".to_string()]);
        let shown = c.redacted_toml();
        assert!(shown.contains("proxy.corp:3128") && !shown.contains("s3cret"), "{shown}");
        let c = Config::from_toml("[probe]\nproxy = \"10.0.0.1:8080\"", &env).expect("config");
        assert_eq!(c.probe.proxy.http.as_ref().map(|u| u.as_str()), Some("http://10.0.0.1:8080/"));
        assert_eq!(c.probe.proxy.https, c.probe.proxy.http);
        let c = Config::from_toml("[probe]\nproxy = \"off\"", &env).expect("config");
        assert_eq!(c.probe.proxy.https, None);
        let e = Config::from_toml("[probe]\nproxy = \"socks5://h:1\"", &env).expect_err("socks refused");
        assert!(e.to_string().contains("probe.proxy"), "{e}");
    }
}
