//! Email through SMTP (lettre): multipart plain text + HTML.
//!
//! URL forms (the URL is a secret, read from `smtp_url_env`):
//! - `smtp://user:pass@host:587` — STARTTLS required (default port 587)
//! - `smtps://user:pass@host:465` — implicit TLS (default port 465)
//! - `smtp://host:25?tls=none` — plain, for local relays (default port 25)
//! - `smtp://host:587?tls=opportunistic` — STARTTLS when offered
//!
//! User and password are optional and percent-decoded.

use super::notifier::DeliveryError;
use super::notifier::Notifier;
use super::notifier::NotifierError;
use crate::config::EmailConfig;
use crate::decide::alert::alert_line;
use crate::decide::alert::Notification;
use crate::io::markup::Text;
use async_trait::async_trait;
use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use maud::{html, DOCTYPE};
use secrecy::ExposeSecret;
use std::time::Duration;
use url::Url;
use uuid::Uuid;

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// `smtp://` (default): plain connect, then STARTTLS, required.
    StartTls,
    /// `?tls=opportunistic`: STARTTLS when the server offers it.
    Opportunistic,
    /// `smtps://`: TLS from the first byte.
    Implicit,
    /// `?tls=none`: no TLS (local relays).
    None,
}

/// A parsed SMTP URL (without the password, which stays in the transport).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpTarget {
    /// Server host.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// Transport security.
    pub security: SmtpSecurity,
    /// Login user, when given.
    pub user: Option<String>,
}

fn decode(s: &str) -> String {
    // '+' is literal in a URL's user info, unlike in a form.
    let s = s.replace('+', "%2B");
    url::form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned()).unwrap_or_default()
}

/// Parses the URL forms above into host, port, security and optional credentials.
pub fn parse_smtp_url(raw: &str) -> Result<(SmtpTarget, Option<Credentials>), String> {
    let url = Url::parse(raw).map_err(|e| format!("bad SMTP URL: {e}"))?;
    let tls = url.query_pairs().find(|(k, _)| k == "tls").map(|(_, v)| v.into_owned());
    let security = match (url.scheme(), tls.as_deref()) {
        ("smtps", None | Some("implicit") | Some("wrapper")) => SmtpSecurity::Implicit,
        ("smtp", None | Some("required") | Some("starttls")) => SmtpSecurity::StartTls,
        ("smtp", Some("opportunistic")) => SmtpSecurity::Opportunistic,
        ("smtp", Some("none")) => SmtpSecurity::None,
        (scheme, tls) => {
            return Err(format!(
            "unsupported SMTP URL form (scheme {scheme:?}, tls={tls:?}); use smtp://, smtps:// or smtp://host?tls=none"
        ))
        }
    };
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or("SMTP URL has no host")?.to_string();
    let default_port = match security {
        SmtpSecurity::Implicit => 465,
        SmtpSecurity::None => 25,
        _ => 587,
    };
    let port = url.port().unwrap_or(default_port);
    let user = Some(decode(url.username())).filter(|u| !u.is_empty());
    let creds = user.clone().map(|u| Credentials::new(u, url.password().map(decode).unwrap_or_default()));
    Ok((SmtpTarget { host, port, security, user }, creds))
}

/// Sends mail through one SMTP server.
pub struct EmailNotifier {
    name: String,
    from: Mailbox,
    to: Vec<Mailbox>,
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl EmailNotifier {
    /// Builds the channel; the URL, sender and recipients are checked here.
    pub fn new(cfg: &EmailConfig, timeout: Duration) -> Result<Self, NotifierError> {
        let err = |message: String| NotifierError { channel: cfg.name.clone(), message };
        let (target, creds) = parse_smtp_url(cfg.smtp_url.expose_secret()).map_err(err)?;
        let tls_params = || TlsParameters::new(target.host.clone()).map_err(|e| err(format!("TLS setup: {e}")));
        let tls = match target.security {
            SmtpSecurity::StartTls => Tls::Required(tls_params()?),
            SmtpSecurity::Opportunistic => Tls::Opportunistic(tls_params()?),
            SmtpSecurity::Implicit => Tls::Wrapper(tls_params()?),
            SmtpSecurity::None => Tls::None,
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(target.host.as_str())
            .port(target.port)
            .tls(tls)
            .timeout(Some(timeout));
        if let Some(c) = creds {
            builder = builder.credentials(c);
        }
        let from = cfg.from.parse::<Mailbox>().map_err(|e| err(format!("from {:?}: {e}", cfg.from)))?;
        let to = cfg
            .to
            .iter()
            .map(|t| t.parse::<Mailbox>().map_err(|e| err(format!("to {t:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EmailNotifier { name: cfg.name.clone(), from, to, transport: builder.build() })
    }

    /// The configured sender.
    pub fn from(&self) -> &Mailbox {
        &self.from
    }

    /// The configured recipients.
    pub fn to(&self) -> &[Mailbox] {
        &self.to
    }

    /// Sends a ready-made message (the weekly summary) through this channel's server.
    pub async fn send_message(&self, msg: Message) -> Result<(), DeliveryError> {
        match self.transport.send(msg).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(DeliveryError::permanent(format!("{}: SMTP: {e}", self.name))),
            Err(e) => Err(DeliveryError::retry(format!("{}: SMTP: {e}", self.name))),
        }
    }
}

/// The HTML part: title, one table row per alert, status link.
pub fn html(n: &Notification) -> String {
    let title = n.title();
    let page = html! {
        (DOCTYPE)
        html {
            body {
                h2 { (Text(&title)) } "\n"
                table border="1" cellpadding="4" cellspacing="0" {
                    "\n"
                    tr {
                        th { "severity" } th { "kind" } th { "subject" } th { "summary" } th { "scope" } th { "since" }
                    }
                    "\n"
                    @for a in &n.alerts {
                        tr {
                            td { (a.severity.as_str()) }
                            td { code { (a.kind.as_str()) } }
                            td { (Text(&a.subject())) }
                            td { (Text(&a.summary)) }
                            td { (Text(&a.scope.describe())) }
                            td { (a.since.format("%Y-%m-%d %H:%M UTC").to_string()) }
                        }
                        "\n"
                    }
                }
                @if let Some(u) = &n.status_url {
                    p { a href=(Text(u)) { "vigil status page" } }
                }
            }
        }
    };
    page.into_string()
}

/// The plain-text part.
pub fn text(n: &Notification) -> String {
    let mut out = n.title();
    out.push_str("\n\n");
    for a in &n.alerts {
        out.push_str(&alert_line(a));
        out.push('\n');
    }
    if let Some(u) = &n.status_url {
        out.push_str(&format!("\nStatus: {u}\n"));
    }
    out
}

impl EmailNotifier {
    /// The message for `n`; its Message-ID comes from the idempotency key so receivers can drop repeats.
    pub fn message(&self, n: &Notification, idempotency_key: Uuid) -> Result<Message, DeliveryError> {
        let mut b = Message::builder()
            .from(self.from.clone())
            .subject(n.title())
            .message_id(Some(format!("<{idempotency_key}@vigil>")));
        for t in &self.to {
            b = b.to(t.clone());
        }
        b.multipart(
            MultiPart::alternative()
                .singlepart(SinglePart::builder().header(ContentType::TEXT_PLAIN).body(text(n)))
                .singlepart(SinglePart::builder().header(ContentType::TEXT_HTML).body(html(n))),
        )
        .map_err(|e| DeliveryError::permanent(format!("{}: building the message: {e}", self.name)))
    }
}

#[async_trait]
impl Notifier for EmailNotifier {
    fn name(&self) -> &str {
        &self.name
    }

    async fn send(&self, n: &Notification, idempotency_key: Uuid) -> Result<(), DeliveryError> {
        let msg = self.message(n, idempotency_key)?;
        self.send_message(msg).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_forms_pick_security_and_default_ports() {
        let (t, c) = parse_smtp_url("smtp://user:p%40ss@mail.example.com").expect("starttls");
        assert_eq!((t.security, t.port, t.user.as_deref()), (SmtpSecurity::StartTls, 587, Some("user")));
        assert!(c.is_some());
        let (t, _) = parse_smtp_url("smtps://u:p@mail.example.com").expect("implicit");
        assert_eq!((t.security, t.port), (SmtpSecurity::Implicit, 465));
        let (t, c) = parse_smtp_url("smtp://127.0.0.1:2525?tls=none").expect("plain");
        assert_eq!((t.security, t.port, t.host.as_str()), (SmtpSecurity::None, 2525, "127.0.0.1"));
        assert!(c.is_none());
        let (t, _) = parse_smtp_url("smtp://relay?tls=opportunistic").expect("opportunistic");
        assert_eq!(t.security, SmtpSecurity::Opportunistic);
        assert!(parse_smtp_url("http://x").is_err());
        assert!(parse_smtp_url("smtps://x?tls=none").is_err());
    }

    #[test]
    fn password_is_percent_decoded() {
        assert_eq!(decode("p%40ss"), "p@ss");
    }
}
