//! The weekly summary as an email: `multipart/alternative` of a text part and a
//! `multipart/related` HTML part whose charts are inline PNG parts referenced by `cid:`.
//! It goes out through the `[[alerts.email]]` channels' SMTP servers.

use super::chart;
use super::chart::ChartError;
use super::html;
use super::html::content_id;
use super::html::ImageSource;
use super::WeeklyReport;
use crate::config::EmailConfig;
use crate::io::notify::email::EmailNotifier;
use crate::io::notify::notifier::{DeliveryError, Notifier, NotifierError};
use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::Message;
use std::time::Duration;

/// A composed summary, ready to send (and to resend: it never changes between attempts).
#[derive(Debug, Clone)]
pub struct WeeklyEmail {
    /// Subject line.
    pub subject: String,
    /// HTML with `cid:` image references.
    pub html: String,
    /// Plain-text alternative.
    pub text: String,
    /// (Content-ID, PNG) per chart, in document order.
    pub images: Vec<(String, Vec<u8>)>,
    /// Stable per region and week, so a receiver can drop a resent copy.
    pub message_id: String,
}

/// Renders the charts and both bodies of `report`.
pub fn compose(report: &WeeklyReport) -> Result<WeeklyEmail, ChartError> {
    let pictures = chart::pictures(report)?;
    let scope: String = report
        .scope()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .collect();
    Ok(WeeklyEmail {
        subject: report.title(),
        html: html::document(report, &pictures, ImageSource::ContentId),
        text: html::text(report),
        images: pictures.into_iter().enumerate().map(|(i, p)| (content_id(i), p.png)).collect(),
        message_id: format!("<weekly.{}.{scope}@vigil>", report.generated_at.format("%Y%m%dT%H%M%SZ")),
    })
}

/// The MIME message from `from` to `to`.
pub fn message(email: &WeeklyEmail, from: &Mailbox, to: &[Mailbox]) -> Result<Message, DeliveryError> {
    let png = ContentType::parse("image/png").map_err(|e| DeliveryError::permanent(format!("image/png: {e}")))?;
    let mut related = MultiPart::related().singlepart(SinglePart::html(email.html.clone()));
    for (cid, bytes) in &email.images {
        related = related.singlepart(Attachment::new_inline(cid.clone()).body(bytes.clone(), png.clone()));
    }
    let mut b =
        Message::builder().from(from.clone()).subject(email.subject.clone()).message_id(Some(email.message_id.clone()));
    for t in to {
        b = b.to(t.clone());
    }
    b.multipart(MultiPart::alternative().singlepart(SinglePart::plain(email.text.clone())).multipart(related))
        .map_err(|e| DeliveryError::permanent(format!("building the weekly summary message: {e}")))
}

/// One way the summary goes out: a channel's SMTP server and sender, and who receives it.
pub struct Recipient {
    channel: EmailNotifier,
    to: Vec<Mailbox>,
}

impl Recipient {
    /// The channel name (`email`, `email-1`).
    pub fn name(&self) -> &str {
        self.channel.name()
    }

    /// Sends `email` once.
    pub async fn send(&self, email: &WeeklyEmail) -> Result<(), DeliveryError> {
        let msg = message(email, self.channel.from(), &self.to)?;
        self.channel.send_message(msg).await
    }
}

/// Who gets the summary: with `report.weekly_to`, those addresses through the first
/// `[[alerts.email]]` channel; otherwise every email channel to its own recipients.
/// Empty when no email channel is configured.
pub fn recipients(
    email: &[EmailConfig],
    weekly_to: &[String],
    timeout: Duration,
) -> Result<Vec<Recipient>, NotifierError> {
    let channels = email.iter().map(|c| EmailNotifier::new(c, timeout)).collect::<Result<Vec<_>, _>>()?;
    if weekly_to.is_empty() {
        return Ok(channels
            .into_iter()
            .map(|channel| {
                let to = channel.to().to_vec();
                Recipient { channel, to }
            })
            .collect());
    }
    let Some(channel) = channels.into_iter().next() else { return Ok(vec![]) };
    let to = weekly_to
        .iter()
        .map(|t| {
            t.parse::<Mailbox>().map_err(|e| NotifierError {
                channel: channel.name().to_string(),
                message: format!("report.weekly_to {t:?}: {e}"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(vec![Recipient { channel, to }])
}
