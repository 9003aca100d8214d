//! The report as one self-contained HTML document (inline styles only, as mail clients want),
//! and as plain text for the email's text alternative.
//!
//! Every figure cell carries `data-col` and every row `data-provider`/`data-region`, so tests
//! (and scripts) can read numbers back without scraping layout.

use super::chart::{color_hex, Picture, HEIGHT, WIDTH};
use super::{Row, WeeklyReport, BUCKET_HOURS};
use crate::alert::email::html_escape;
use base64::Engine;

/// Where `<img src>` points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// `data:image/png;base64,…`: the file stands alone.
    DataUri,
    /// `cid:chart-N@vigil`: inline MIME parts of the email.
    ContentId,
}

/// The Content-ID (without angle brackets) of chart `i` in the email.
pub fn content_id(i: usize) -> String {
    format!("chart-{i}@vigil")
}

/// Milliseconds, no decimals; `-` when unknown.
pub fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

/// A rate as a percentage with two decimals; `-` when unknown.
pub fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.2}%", v * 100.0))
}

/// A signed change in percent with one decimal; `-` when unknown.
pub fn change(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:+.1}%"))
}

/// US dollars with cents; `-` when unknown.
pub fn usd(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("${v:.2}"))
}

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

const TABLE: &str = "border-collapse:collapse;font-size:13px";
const CELL: &str = "border:1px solid #ccc;padding:4px 8px";

fn cell(col: &str, text: &str, numeric: bool, style: &str) -> String {
    let align = if numeric { "text-align:right;" } else { "" };
    format!("<td data-col=\"{col}\" style=\"{CELL};{align}{style}\">{}</td>", html_escape(text))
}

/// Latency going up by more than a tenth is worth a second look: red; down by as much: green.
fn change_style(v: Option<f64>) -> &'static str {
    match v {
        Some(v) if v > 10.0 => "color:#b00020",
        Some(v) if v < -10.0 => "color:#1b7f1b",
        _ => "",
    }
}

fn row(r: &Row) -> String {
    let (p50, p95) = (r.ttft_p50_change_pct(), r.ttft_p95_change_pct());
    let cells = [
        cell("provider", &r.provider, false, ""),
        cell("region", &r.region, false, ""),
        cell("samples", &r.this_week.samples.to_string(), true, ""),
        cell("ttft_p50", &ms(r.this_week.ttft_p50_ms), true, "font-weight:bold"),
        cell("ttft_p50_last", &ms(r.last_week.ttft_p50_ms), true, ""),
        cell("ttft_p50_change", &change(p50), true, change_style(p50)),
        cell("ttft_p95", &ms(r.this_week.ttft_p95_ms), true, "font-weight:bold"),
        cell("ttft_p95_last", &ms(r.last_week.ttft_p95_ms), true, ""),
        cell("ttft_p95_change", &change(p95), true, change_style(p95)),
        cell("error_rate", &rate(r.this_week.error_rate), true, ""),
        cell("error_rate_last", &rate(r.last_week.error_rate), true, ""),
        cell("breaker_openings", &r.breaker_openings.to_string(), true, ""),
        cell("alerts", &r.alerts.to_string(), true, ""),
        cell("credit_spent", &usd(r.credit_spent_usd), true, ""),
    ];
    format!(
        "<tr data-provider=\"{}\" data-region=\"{}\">{}</tr>\n",
        html_escape(&r.provider),
        html_escape(&r.region),
        cells.concat()
    )
}

/// The whole document. `pictures[i]` belongs to `report.charts[i]`.
pub fn document(report: &WeeklyReport, pictures: &[Picture], images: ImageSource) -> String {
    let mut out = String::new();
    let title = html_escape(&report.title());
    out.push_str(&format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\n\
         <body style=\"font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#222;max-width:1100px\">\n\
         <h1 style=\"font-size:20px\">{title}</h1>\n\
         <p>This week: {} to {}, compared with the 7 days before ({} to {}).</p>\n",
        time(report.this_week.since),
        time(report.this_week.until),
        time(report.last_week.since),
        time(report.last_week.until),
    ));
    let head = [
        "provider",
        "region",
        "probes",
        "TTFT P50 ms",
        "last week",
        "change",
        "TTFT P95 ms",
        "last week",
        "change",
        "error rate",
        "last week",
        "breaker openings",
        "alerts",
        "credit spent",
    ];
    out.push_str(&format!("<table id=\"summary\" style=\"{TABLE}\">\n<tr>"));
    for h in head {
        out.push_str(&format!("<th style=\"{CELL};background:#f2f2f2\">{h}</th>"));
    }
    out.push_str("</tr>\n");
    for r in &report.rows {
        out.push_str(&row(r));
    }
    out.push_str("</table>\n");
    if report.rows.is_empty() {
        out.push_str("<p>No probes, breaker openings or alerts were recorded in these two weeks.</p>\n");
    }
    if !report.instance_alerts.is_empty() {
        let parts: Vec<String> =
            report.instance_alerts.iter().map(|(region, n)| format!("{}: {n}", html_escape(region))).collect();
        out.push_str(&format!(
            "<p id=\"instance-alerts\">Alerts about the instance rather than a provider \
             (region_unhealthy, probe_budget_exceeded): {}.</p>\n",
            parts.join(", ")
        ));
    }
    if !report.provider_incidents.is_empty() {
        out.push_str(&format!(
            "<h2>Providers' own incidents</h2>\n<table id=\"provider-incidents\" style=\"{TABLE}\">\n<tr>"
        ));
        for h in
            ["provider", "incidents announced", "vigil saw first", "median lead", "longest lead", "vigil saw after"]
        {
            out.push_str(&format!("<th style=\"{CELL};background:#f2f2f2\">{h}</th>"));
        }
        out.push_str("</tr>\n");
        let minutes = |s: Option<i64>| s.map_or("–".to_string(), |s| format!("{} min", s / 60));
        for p in &report.provider_incidents {
            out.push_str(&format!(
                "<tr><td style=\"{CELL}\">{}</td><td style=\"{CELL}\">{}</td><td style=\"{CELL}\">{}</td>\
                 <td style=\"{CELL}\">{}</td><td style=\"{CELL}\">{}</td><td style=\"{CELL}\">{}</td></tr>\n",
                html_escape(&p.provider),
                p.incidents,
                p.seen_first,
                minutes(p.median_lead_s),
                minutes(p.max_lead_s),
                p.seen_after
            ));
        }
        out.push_str(
            "</table>\n<p style=\"font-size:12px;color:#555\">Incidents the providers opened on their own status pages \
             this week. vigil saw one first when one of its breakers for that provider opened in the two hours before \
             the announcement; the lead is the time from the earliest such opening to the announcement.</p>\n",
        );
    }
    out.push_str(
        "<p style=\"font-size:12px;color:#555\">TTFT percentiles are exact (nearest rank) over the successful \
         probes of each week, all of a provider's models and routes together. Error rate: failed probes / probes. \
         Breaker openings: transitions to open, including a failed half-open probe. Alerts: firing alerts \
         notified, not counting reminders and resolves. Credit spent: the sum of drops between consecutive \
         balance readings polled from that region (top-ups ignored); regions sharing one key see the same \
         account.</p>\n",
    );

    for (i, (chart, picture)) in report.charts.iter().zip(pictures).enumerate() {
        let provider = html_escape(&chart.provider);
        let src = match images {
            ImageSource::DataUri => {
                format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&picture.png))
            }
            ImageSource::ContentId => format!("cid:{}", content_id(i)),
        };
        out.push_str(&format!(
            "<h2 style=\"font-size:16px;margin-top:28px\">TTFT P50 every {BUCKET_HOURS} hours: {provider}</h2>\n\
             <img id=\"chart-{i}\" src=\"{src}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             alt=\"TTFT P50 of {provider} every {BUCKET_HOURS} hours this week\" style=\"border:1px solid #ddd\">\n\
             <p style=\"font-size:12px;color:#555\">Across: {} to {}, one point per {BUCKET_HOURS} hours, \
             a vertical line every 24 hours. Up: 0 to {} ms, a horizontal line every {} ms. \
             A gap means no successful probe in those hours.</p>\n<table style=\"{TABLE}\">\n",
            time(report.this_week.since),
            time(report.this_week.until),
            picture.scale.max,
            picture.scale.step,
        ));
        for (j, s) in chart.series.iter().enumerate() {
            out.push_str(&format!(
                "<tr><td style=\"padding:2px 8px\"><span style=\"display:inline-block;width:18px;height:4px;\
                 background:{};vertical-align:middle\"></span></td><td style=\"padding:2px 8px\">{}</td></tr>\n",
                color_hex(j),
                html_escape(&s.label())
            ));
        }
        out.push_str("</table>\n");
    }
    out.push_str(&format!(
        "<p style=\"font-size:12px;color:#555\">Generated by vigil at {}.</p>\n</body></html>\n",
        time(report.generated_at)
    ));
    out
}

/// Plain text: the same table in fixed-width columns.
pub fn text(report: &WeeklyReport) -> String {
    let mut out = format!(
        "{}\n\nThis week: {} to {}, compared with the 7 days before.\n\n",
        report.title(),
        time(report.this_week.since),
        time(report.this_week.until)
    );
    let header = [
        "PROVIDER", "REGION", "PROBES", "P50", "LAST", "CHANGE", "P95", "LAST", "CHANGE", "ERRORS", "LAST", "OPENINGS",
        "ALERTS", "CREDIT",
    ]
    .map(String::from);
    let rows: Vec<[String; 14]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.provider.clone(),
                r.region.clone(),
                r.this_week.samples.to_string(),
                ms(r.this_week.ttft_p50_ms),
                ms(r.last_week.ttft_p50_ms),
                change(r.ttft_p50_change_pct()),
                ms(r.this_week.ttft_p95_ms),
                ms(r.last_week.ttft_p95_ms),
                change(r.ttft_p95_change_pct()),
                rate(r.this_week.error_rate),
                rate(r.last_week.error_rate),
                r.breaker_openings.to_string(),
                r.alerts.to_string(),
                usd(r.credit_spent_usd),
            ]
        })
        .collect();
    let mut width = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i < 2 {
                line.push_str(&format!("{c:<w$}  ", w = width[i]));
            } else {
                line.push_str(&format!("{c:>w$}  ", w = width[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for (region, n) in &report.instance_alerts {
        out.push_str(&format!("\nInstance-wide alerts in {region}: {n}"));
    }
    out.push_str("\nTTFT in ms, exact percentiles over successful probes. Charts are in the HTML version.\n");
    out
}
