//! Which probes go through an HTTP proxy, and the CONNECT tunnel that carries them.
//!
//! `probe.proxy` (or `HTTPS_PROXY`/`HTTP_PROXY`, by the target's scheme) names the proxy and
//! `NO_PROXY` the hosts that bypass it. Every proxied probe, plain or TLS, opens a CONNECT
//! tunnel, so the request bytes and their timing are the same as on a direct connection.

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use url::Url;

/// Most bytes of a CONNECT answer's head read before giving up on it.
const MAX_CONNECT_HEAD: usize = 8 * 1024;

/// Why a tunnel could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The socket failed.
    #[error("proxy I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The proxy answered something other than 2xx.
    #[error("proxy refused CONNECT {target}: {status_line}")]
    Refused {
        /// `host:port` asked for.
        target: String,
        /// The proxy's status line.
        status_line: String,
    },
    /// The answer was not an HTTP response head.
    #[error("proxy answered CONNECT with something that is not HTTP")]
    Malformed,
}

/// Asks the proxy on `tcp` for a tunnel to `host:port` and waits for its 2xx.
pub async fn connect(tcp: &mut TcpStream, proxy: &Url, host: &str, port: u16) -> Result<(), TunnelError> {
    let authority = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if !proxy.username().is_empty() {
        let user = percent_decode(proxy.username());
        let pass = percent_decode(proxy.password().unwrap_or(""));
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        req.push_str(&format!("Proxy-Authorization: Basic {token}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).await?;
    // Read byte-wise up to the blank line: nothing after the head may be consumed, it belongs
    // to the tunnelled connection (TLS bytes or the response).
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_CONNECT_HEAD {
            return Err(TunnelError::Malformed);
        }
        if tcp.read(&mut byte).await? == 0 {
            return Err(TunnelError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let status_line = text.lines().next().unwrap_or("").trim().to_string();
    let mut parts = status_line.split_whitespace();
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(TunnelError::Malformed);
    };
    if !version.starts_with("HTTP/1.") {
        return Err(TunnelError::Malformed);
    }
    match code.parse::<u16>() {
        Ok(200..=299) => Ok(()),
        Ok(_) => Err(TunnelError::Refused { target: authority, status_line }),
        Err(_) => Err(TunnelError::Malformed),
    }
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::proxy::ProxyConfig;

    #[test]
    fn no_proxy_matches_hosts_subdomains_ips_and_star() {
        let proxy: Url = "http://proxy.internal:3128".parse().expect("url");
        let mut c = ProxyConfig { https: Some(proxy.clone()), http: None, no_proxy: vec![] };
        assert_eq!(c.for_target("https", "api.openai.com"), Some(&proxy));
        assert_eq!(c.for_target("http", "api.openai.com"), None, "no HTTP proxy set");
        c.no_proxy = vec![".internal.example".into(), "10.0.0.5".into(), "vllm:8000".into()];
        assert_eq!(c.for_target("https", "gpu.internal.example"), None);
        assert_eq!(c.for_target("https", "internal.example"), None);
        assert_eq!(c.for_target("https", "notinternal.example"), Some(&proxy));
        assert_eq!(c.for_target("https", "10.0.0.5"), None);
        assert_eq!(c.for_target("https", "vllm"), None, "a port in NO_PROXY is ignored");
        c.no_proxy = vec!["*".into()];
        assert_eq!(c.for_target("https", "api.openai.com"), None);
    }

    #[test]
    fn passwords_are_redacted() {
        let u: Url = "http://user:s3cret@proxy:3128".parse().expect("url");
        assert_eq!(ProxyConfig::redacted(&u), "http://user:%3Credacted%3E@proxy:3128/");
        assert!(!ProxyConfig::redacted(&u).contains("s3cret"));
    }
}
