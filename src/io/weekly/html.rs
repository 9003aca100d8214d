//! The report as one self-contained HTML document (inline styles only, as mail clients want),
//! and as plain text for the email's text alternative.
//!
//! Every figure cell carries `data-col` and every row `data-provider`/`data-region`, so tests
//! (and scripts) can read numbers back without scraping layout.

use super::chart::color_hex;
use super::chart::Picture;
use super::chart::HEIGHT;
use super::chart::WIDTH;
use super::WeeklyReport;
use super::WeeklyRow;
use super::BUCKET_HOURS;
use crate::io::markup::Text;
use base64::Engine;
use maud::{html, Markup, DOCTYPE};

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
const HEAD: &str = "border:1px solid #ccc;padding:4px 8px;background:#f2f2f2";
const NOTE: &str = "font-size:12px;color:#555";

fn cell(col: &str, text: &str, numeric: bool, style: &str) -> Markup {
    let align = if numeric { "text-align:right;" } else { "" };
    html! { td data-col=(col) style={ (CELL) ";" (align) (style) } { (Text(text)) } }
}

/// Latency going up by more than a tenth is worth a second look: red; down by as much: green.
fn change_style(v: Option<f64>) -> &'static str {
    match v {
        Some(v) if v > 10.0 => "color:#b00020",
        Some(v) if v < -10.0 => "color:#1b7f1b",
        _ => "",
    }
}

fn row(r: &WeeklyRow) -> Markup {
    let (p50, p95) = (r.ttft_p50_change_pct(), r.ttft_p95_change_pct());
    html! {
        tr data-provider=(Text(&r.provider)) data-region=(Text(&r.region)) {
            (cell("provider", &r.provider, false, ""))
            (cell("region", &r.region, false, ""))
            (cell("samples", &r.this_week.samples.to_string(), true, ""))
            (cell("ttft_p50", &ms(r.this_week.ttft_p50_ms), true, "font-weight:bold"))
            (cell("ttft_p50_last", &ms(r.last_week.ttft_p50_ms), true, ""))
            (cell("ttft_p50_change", &change(p50), true, change_style(p50)))
            (cell("ttft_p95", &ms(r.this_week.ttft_p95_ms), true, "font-weight:bold"))
            (cell("ttft_p95_last", &ms(r.last_week.ttft_p95_ms), true, ""))
            (cell("ttft_p95_change", &change(p95), true, change_style(p95)))
            (cell("error_rate", &rate(r.this_week.error_rate), true, ""))
            (cell("error_rate_last", &rate(r.last_week.error_rate), true, ""))
            (cell("breaker_openings", &r.breaker_openings.to_string(), true, ""))
            (cell("alerts", &r.alerts.to_string(), true, ""))
            (cell("credit_spent", &usd(r.credit_spent_usd), true, ""))
        }
        "\n"
    }
}

/// The header row of a table.
fn head_row(names: &[&str]) -> Markup {
    html! { tr { @for h in names { th style=(HEAD) { (h) } } } "\n" }
}

/// How many alerts were about the instance rather than a provider, by region.
fn instance_alerts(report: &WeeklyReport) -> Markup {
    html! {
        p id="instance-alerts" {
            "Alerts about the instance rather than a provider (region_unhealthy, probe_budget_exceeded): "
            @for (i, (region, n)) in report.instance_alerts.iter().enumerate() {
                @if i > 0 { ", " }
                (Text(region)) ": " (n)
            }
            "."
        }
        "\n"
    }
}

/// The providers' own incidents and whether vigil saw them first.
fn provider_incidents(report: &WeeklyReport) -> Markup {
    let minutes = |s: Option<i64>| s.map_or("–".to_string(), |s| format!("{} min", s / 60));
    html! {
        h2 { "Providers' own incidents" } "\n"
        table id="provider-incidents" style=(TABLE) {
            "\n"
            (head_row(&["provider", "incidents announced", "vigil saw first", "median lead", "longest lead", "vigil saw after"]))
            @for p in &report.provider_incidents {
                tr {
                    td style=(CELL) { (Text(&p.provider)) }
                    td style=(CELL) { (p.incidents) }
                    td style=(CELL) { (p.seen_first) }
                    td style=(CELL) { (minutes(p.median_lead_s)) }
                    td style=(CELL) { (minutes(p.max_lead_s)) }
                    td style=(CELL) { (p.seen_after) }
                }
                "\n"
            }
        }
        "\n"
        p style=(NOTE) {
            "Incidents the providers opened on their own status pages this week. vigil saw one first when one \
             of its breakers for that provider opened in the two hours before the announcement; the lead is \
             the time from the earliest such opening to the announcement."
        }
        "\n"
    }
}

/// `5 d 18 h`, `6 h 0 min`, `12 min`, `42 s`.
pub fn span(seconds: i64) -> String {
    let (d, h, m) = (seconds / 86_400, seconds % 86_400 / 3600, seconds % 3600 / 60);
    match (d, h) {
        (0, 0) if m == 0 => format!("{seconds} s"),
        (0, 0) => format!("{m} min"),
        (0, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

/// A price per million tokens, input / output; `-` when unknown.
fn per_mtok(p: Option<crate::vocab::chain_head::PerMtok>) -> String {
    p.map_or_else(|| "-".into(), |p| format!("${:.2} / ${:.2}", p.input, p.output))
}

/// Time per chain head and the spend it implied.
fn chain_heads(report: &WeeklyReport) -> Markup {
    html! {
        h2 { "Failover chains: time per head" } "\n"
        table id="chain-heads" style=(TABLE) {
            "\n"
            (head_row(&["region", "chain", "head", "time", "share", "price per M tokens (in / out)", "implied spend"]))
            @for h in &report.chain_heads {
                @let head = h.target.as_deref().unwrap_or("(nothing usable)");
                tr data-chain=(Text(&h.chain)) data-region=(Text(&h.region)) data-head=(Text(head)) {
                    (cell("region", &h.region, false, ""))
                    (cell("chain", &h.chain, false, ""))
                    (cell("head", head, false, ""))
                    (cell("time", &span(h.seconds), true, ""))
                    (cell("share", &format!("{:.1}%", h.share * 100.0), true, ""))
                    (cell("price", &per_mtok(h.price), true, ""))
                    (cell("implied_spend", &usd(h.implied_usd), true, ""))
                }
                "\n"
            }
        }
        "\n"
        p style=(NOTE) {
            "The head is the target a router tries first (the first entry of the chain's order in the router \
             export); each move is recorded, and a head counts until the next. Price: the head's when it became \
             the head. Implied spend: the chain's tokens_per_day at that price for that time (- without \
             tokens_per_day or a known price)."
        }
        "\n"
    }
}

/// One provider's chart: heading, image, how to read it and the legend.
fn chart_html(report: &WeeklyReport, i: usize, chart: &super::Chart, picture: &Picture, images: ImageSource) -> Markup {
    let provider = Text(&chart.provider);
    let src = match images {
        ImageSource::DataUri => {
            format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&picture.png))
        }
        ImageSource::ContentId => format!("cid:{}", content_id(i)),
    };
    html! {
        h2 style="font-size:16px;margin-top:28px" { "TTFT P50 every " (BUCKET_HOURS) " hours: " (provider) } "\n"
        img id={ "chart-" (i) } src=(src) width=(WIDTH) height=(HEIGHT)
            alt={ "TTFT P50 of " (provider) " every " (BUCKET_HOURS) " hours this week" } style="border:1px solid #ddd";
        "\n"
        p style=(NOTE) {
            "Across: " (time(report.this_week.since)) " to " (time(report.this_week.until)) ", one point per "
            (BUCKET_HOURS) " hours, a vertical line every 24 hours. Up: 0 to " (picture.scale.max)
            " ms, a horizontal line every " (picture.scale.step) " ms. A gap means no successful probe in those hours."
        }
        "\n"
        table style=(TABLE) {
            "\n"
            @for (j, s) in chart.series.iter().enumerate() {
                tr {
                    td style="padding:2px 8px" {
                        span style={ "display:inline-block;width:18px;height:4px;background:" (color_hex(j))
                            ";vertical-align:middle" } {}
                    }
                    td style="padding:2px 8px" { (Text(&s.label())) }
                }
                "\n"
            }
        }
        "\n"
    }
}

/// The whole document. `pictures[i]` belongs to `report.charts[i]`.
pub fn document(report: &WeeklyReport, pictures: &[Picture], images: ImageSource) -> String {
    let title = report.title();
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
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head { meta charset="utf-8"; title { (Text(&title)) } }
            "\n"
            body style="font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#222;max-width:1100px" {
                "\n"
                h1 style="font-size:20px" { (Text(&title)) } "\n"
                p {
                    "This week: " (time(report.this_week.since)) " to " (time(report.this_week.until))
                    ", compared with the 7 days before (" (time(report.last_week.since)) " to "
                    (time(report.last_week.until)) ")."
                }
                "\n"
                table id="summary" style=(TABLE) {
                    "\n"
                    (head_row(&head))
                    @for r in &report.rows { (row(r)) }
                }
                "\n"
                @if report.rows.is_empty() {
                    p { "No probes, breaker openings or alerts were recorded in these two weeks." } "\n"
                }
                @if !report.instance_alerts.is_empty() { (instance_alerts(report)) }
                @if !report.provider_incidents.is_empty() { (provider_incidents(report)) }
                @if !report.chain_heads.is_empty() { (chain_heads(report)) }
                p style=(NOTE) {
                    "TTFT percentiles are exact (nearest rank) over the successful probes of each week, all of a \
                     provider's models and routes together. Error rate: failed probes / probes. Breaker openings: \
                     transitions to open, including a failed half-open probe. Alerts: firing alerts notified, not \
                     counting reminders and resolves. Credit spent: the sum of drops between consecutive balance \
                     readings polled from that region (top-ups ignored); regions sharing one key see the same \
                     account."
                }
                "\n"
                @for (i, (c, picture)) in report.charts.iter().zip(pictures).enumerate() {
                    (chart_html(report, i, c, picture, images))
                }
                p style=(NOTE) { "Generated by vigil at " (time(report.generated_at)) "." } "\n"
            }
        }
        "\n"
    };
    page.into_string()
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
    for h in &report.chain_heads {
        out.push_str(&format!(
            "\nChain {} in {}: {} head for {} ({:.1}%), implied spend {}",
            h.chain,
            h.region,
            h.target.as_deref().unwrap_or("nothing usable"),
            span(h.seconds),
            h.share * 100.0,
            usd(h.implied_usd)
        ));
    }
    out.push_str("\nTTFT in ms, exact percentiles over successful probes. Charts are in the HTML version.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::super::chart::Scale;
    use super::super::lead_time::ProviderLead;
    use super::super::{weeks, Chart, WeekFigures, WeeklySeries};
    use super::*;
    use chrono::TimeZone;

    use crate::io::markup::hostile::{ESCAPED, HOSTILE};

    #[test]
    fn a_hostile_provider_name_is_escaped_everywhere_it_shows() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).single().expect("time");
        let (this_week, last_week) = weeks(now);
        let report = WeeklyReport {
            region: Some("eu".into()),
            generated_at: now,
            this_week,
            last_week,
            rows: vec![WeeklyRow {
                provider: HOSTILE.into(),
                region: "eu".into(),
                targets: vec![],
                this_week: WeekFigures { samples: 3, ..WeekFigures::default() },
                last_week: WeekFigures::default(),
                breaker_openings: 0,
                alerts: 0,
                credit_spent_usd: None,
            }],
            charts: vec![Chart {
                provider: HOSTILE.into(),
                series: vec![WeeklySeries { target: format!("{HOSTILE}/m"), region: "eu".into(), p50_ms: vec![] }],
            }],
            instance_alerts: [(HOSTILE.to_string(), 1)].into(),
            provider_incidents: vec![ProviderLead {
                provider: HOSTILE.into(),
                incidents: 1,
                seen_first: 0,
                seen_after: 0,
                median_lead_s: None,
                max_lead_s: None,
            }],
            chain_heads: vec![crate::decide::chain_cost::HeadTime {
                region: "eu".into(),
                chain: HOSTILE.into(),
                target: Some(format!("{HOSTILE}/m")),
                seconds: 3600,
                share: 1.0,
                price: None,
                implied_usd: None,
            }],
        };
        let picture = Picture { png: vec![], scale: Scale { max: 1.0, step: 1.0 } };
        let html = document(&report, &[picture], ImageSource::ContentId);
        assert!(!html.contains("<script") && !html.contains("'x'"), "{html}");
        // Summary row attributes and cell, instance alerts, incidents, chart heading, alt and legend.
        assert!(html.contains(&format!(r#"<tr data-provider="{ESCAPED}" data-region="eu">"#)), "{html}");
        assert!(html.contains(&format!(r#"alt="TTFT P50 of {ESCAPED} every"#)), "{html}");
        assert!(html.matches(ESCAPED).count() >= 9, "{html}");
        assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    }
}
