//! What the chains' heads cost over a period: from the stored head records (`chain_heads`, one
//! per move and one per start), the time each target spent as its chain's head in each region
//! and, with `[[chain]] tokens_per_day`, the spend that time implied at the head's price then.
//!
//! Each record holds from its time until the chain's next record (or the end of the period); a
//! record from before the period holds from the period's start. Time before a chain's first
//! record is not counted (nothing says which head was in use), nor is a stop told apart: the
//! head last recorded before it keeps counting until the next start records where it stands.

use crate::vocab::chain_head::{ChainHead, PerMtok};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// `[[chain]] tokens_per_day` as (input, output) tokens a day, by chain name.
pub type Traffic = BTreeMap<String, (f64, f64)>;

/// The configured chains' `tokens_per_day`, by chain name.
pub fn traffic_of(chains: &[crate::config::chain::ChainConfig]) -> Traffic {
    chains
        .iter()
        .filter_map(|c| c.tokens_per_day.map(|t| (c.name.clone(), (t.input as f64, t.output as f64))))
        .collect()
}

/// One target's time as one chain's head in one region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadTime {
    /// Region.
    pub region: String,
    /// Chain name.
    pub chain: String,
    /// The head's target id; `None` for the time nothing in the chain was usable.
    pub target: Option<String>,
    /// Seconds it was the head within the period.
    pub seconds: i64,
    /// Its share of the time the chain's heads were known in the period (0–1).
    pub share: f64,
    /// Its price when it last became the head, when known.
    pub price: Option<PerMtok>,
    /// What the chain's `tokens_per_day` cost over that time at its price(s); `None` without
    /// `tokens_per_day`, without a known price for some of the time, or for no head at all.
    pub implied_usd: Option<f64>,
}

/// Time per head within `[since, until)` from `records` (any order; those of a chain before
/// `since` stand for the head in effect at `since`), by region and chain, longest first.
pub fn time_per_head(
    records: &[ChainHead],
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    traffic: &Traffic,
) -> Vec<HeadTime> {
    let mut chains: BTreeMap<(&str, &str), Vec<&ChainHead>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.at < until) {
        chains.entry((r.region.as_str(), r.chain.as_str())).or_default().push(r);
    }
    let mut out = Vec::new();
    for ((region, chain), mut rs) in chains {
        rs.sort_by_key(|r| r.at);
        // Only the newest record before the period counts, from the period's start.
        let first = rs.iter().rposition(|r| r.at <= since).unwrap_or(0);
        let tpd = traffic.get(chain).copied();
        let mut heads: BTreeMap<Option<&str>, HeadTime> = BTreeMap::new();
        for (i, r) in rs.iter().enumerate().skip(first) {
            let from = r.at.max(since);
            let to = rs.get(i + 1).map_or(until, |n| n.at).min(until);
            let seconds = (to - from).num_seconds().max(0);
            let h = heads.entry(r.target.as_deref()).or_insert_with(|| HeadTime {
                region: region.to_string(),
                chain: chain.to_string(),
                target: r.target.clone(),
                seconds: 0,
                share: 0.0,
                price: None,
                implied_usd: tpd.filter(|_| r.target.is_some()).map(|_| 0.0),
            });
            h.seconds += seconds;
            h.price = r.price.or(h.price);
            let spent = match (tpd, r.price) {
                (Some((i, o)), Some(p)) => Some(p.cost(i, o) * seconds as f64 / 86_400.0),
                _ => None,
            };
            h.implied_usd = h.implied_usd.zip(spent).map(|(a, b)| a + b);
        }
        let total: i64 = heads.values().map(|h| h.seconds).sum();
        let mut rows: Vec<HeadTime> = heads.into_values().filter(|h| h.seconds > 0).collect();
        for h in &mut rows {
            h.share = if total > 0 { h.seconds as f64 / total as f64 } else { 0.0 };
        }
        rows.sort_by(|a, b| b.seconds.cmp(&a.seconds).then_with(|| a.target.cmp(&b.target)));
        out.extend(rows);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc)
    }

    fn head(chain: &str, t: &str, target: Option<&str>, input: f64) -> ChainHead {
        ChainHead {
            region: "eu".into(),
            chain: chain.into(),
            at: at(t),
            target: target.map(str::to_string),
            price: Some(PerMtok { input, output: input * 4.0 }),
        }
    }

    #[test]
    fn each_head_counts_until_the_next_and_the_one_before_the_period_from_its_start() {
        let (since, until) = (at("2026-11-23T00:00:00Z"), at("2026-11-30T00:00:00Z"));
        let records = [
            head("chat", "2026-11-01T00:00:00Z", Some("openrouter/m"), 1.0),
            head("chat", "2026-11-20T00:00:00Z", Some("openrouter/m"), 1.0),
            // Six hours on anthropic, then back; a day with nothing usable at the end.
            head("chat", "2026-11-25T00:00:00Z", Some("anthropic/c"), 3.0),
            head("chat", "2026-11-25T06:00:00Z", Some("openrouter/m"), 1.0),
            head("chat", "2026-11-29T00:00:00Z", None, 0.0),
            head("chat", "2026-12-01T00:00:00Z", Some("anthropic/c"), 3.0),
        ];
        // 10M input and 1M output tokens a day: $14 a day at 1/4, $42 a day at 3/12.
        let traffic: Traffic = [("chat".to_string(), (10e6, 1e6))].into();
        let rows = time_per_head(&records, since, until, &traffic);
        let got: Vec<(Option<&str>, i64)> = rows.iter().map(|r| (r.target.as_deref(), r.seconds)).collect();
        assert_eq!(
            got,
            [(Some("openrouter/m"), 5 * 86_400 + 18 * 3600), (None, 86_400), (Some("anthropic/c"), 6 * 3600)]
        );
        assert!((rows[0].share - (5.75 / 7.0)).abs() < 1e-9);
        assert!((rows[0].implied_usd.expect("priced") - 14.0 * 5.75).abs() < 1e-9);
        assert!((rows[2].implied_usd.expect("priced") - 42.0 * 0.25).abs() < 1e-9);
        assert_eq!(rows[1].implied_usd, None, "no head, no spend");
        assert_eq!(rows[2].price, Some(PerMtok { input: 3.0, output: 12.0 }));
    }

    #[test]
    fn without_traffic_or_price_no_spend_is_implied_and_unknown_time_is_not_counted() {
        let (since, until) = (at("2026-11-23T00:00:00Z"), at("2026-11-30T00:00:00Z"));
        let mut unpriced = head("chat", "2026-11-29T00:00:00Z", Some("a/x"), 1.0);
        unpriced.price = None;
        let records = [head("chat", "2026-11-28T00:00:00Z", Some("a/x"), 1.0), unpriced];
        let rows = time_per_head(&records, since, until, &Traffic::new());
        assert_eq!((rows.len(), rows[0].seconds, rows[0].implied_usd), (1, 2 * 86_400, None));
        assert_eq!(rows[0].share, 1.0, "the five days before the first record are not counted");
        let traffic: Traffic = [("chat".to_string(), (1e6, 0.0))].into();
        assert_eq!(time_per_head(&records, since, until, &traffic)[0].implied_usd, None, "half the time unpriced");
        assert!(time_per_head(&[], since, until, &traffic).is_empty());
    }
}
