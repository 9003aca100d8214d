//! `chain_head_changed`: a notice when a chain's head — the target a router tries first, the
//! first entry of the chain's `order` in the last published export — moves, saying to what and
//! at what price against the one before ("now anthropic/…, 3.1× the input price of
//! openrouter/…"), and, with `[[chain]] tokens_per_day`, what a day of the chain's traffic costs
//! at each.
//!
//! The heads last seen are part of the engine's saved state, so a head that moved while the
//! daemon was stopped is noticed at the first evaluation after the start, and a start alone
//! notices nothing. Each move is an event facet keyed by the chain and the new head (a move to
//! another head is news at once; a head that comes back within `resolve_after` evaluations is
//! not news again), held on the evaluation that saw the move and cleared `resolve_after`
//! evaluations later, like `baseline_shift`. Switched off (`alerts.chain_head_changed = false`,
//! the default) the heads are still followed, so switching it on does not fire for old moves.

use super::{dedup_key, Alert, AlertKind};
use crate::vocab::chain_head::PerMtok;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One chain's head as the last published export has it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainHeadCheck {
    /// Chain name.
    pub chain: String,
    /// The head: the first entry of `order` (`None` when the order is empty).
    pub head: Option<String>,
    /// The head's price, when known.
    pub price: Option<PerMtok>,
    /// `[[chain]] tokens_per_day` (input, output), when configured.
    pub tokens_per_day: Option<(f64, f64)>,
}

/// A chain's head as last evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HeadSeen {
    head: Option<String>,
    price: Option<PerMtok>,
}

/// The heads last evaluated, by chain name (kept in the engine's saved state).
pub(crate) type Heads = BTreeMap<String, HeadSeen>;

/// `3.1×`; `same` within half a percent.
fn ratio(now: f64, before: f64) -> Option<String> {
    if before <= 0.0 || !now.is_finite() || !before.is_finite() {
        return None;
    }
    let r = now / before;
    Some(if (r - 1.0).abs() < 0.005 { "the same as".to_string() } else { format!("{r:.1}× the input price of") })
}

/// `$3.00`: dollars with cents, more digits under a cent.
fn usd(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.01 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

/// What the price says about the move, after `now X`.
fn price_words(to: &HeadSeen, from: &HeadSeen, from_id: &str, traffic: Option<(f64, f64)>) -> String {
    let (Some(p), Some(q)) = (to.price, from.price) else {
        return match (to.price, from.price) {
            (None, _) => " (its price is not known: set prices in its [[provider]])".to_string(),
            (Some(p), None) => {
                format!(" at {} per million input tokens ({from_id}'s price is not known)", usd(p.input))
            }
            _ => String::new(),
        };
    };
    let mut out = match ratio(p.input, q.input) {
        Some(r) => format!(", {r} {from_id}"),
        None => format!(", {} per million input tokens against {from_id}'s {}", usd(p.input), usd(q.input)),
    };
    out.push_str(&format!(
        " ({} vs {} per million input tokens, {} vs {} output)",
        usd(p.input),
        usd(q.input),
        usd(p.output),
        usd(q.output)
    ));
    if let Some((i, o)) = traffic {
        out.push_str(&format!(
            "; at tokens_per_day a day now costs {} instead of {}",
            usd(p.cost(i, o)),
            usd(q.cost(i, o))
        ));
    }
    out
}

/// The notice's one line for a move of `chain` from `from` to `to`.
pub(crate) fn summary(chain: &str, from: &HeadSeen, to: &HeadSeen, traffic: Option<(f64, f64)>) -> String {
    match (&to.head, &from.head) {
        (Some(t), Some(f)) => format!("chain {chain}: now {t}{}", price_words(to, from, f, traffic)),
        (Some(t), None) => format!("chain {chain}: now {t} (nothing in the chain was usable before)"),
        (None, Some(f)) => format!("chain {chain}: nothing in the chain is usable now (the head was {f})"),
        (None, None) => format!("chain {chain}: nothing in the chain is usable"),
    }
}

/// The facet of a move of `chain` to `head`: its own incident per chain and new head.
fn facet(region: &str, chain: &str, head: Option<&str>, summary: String) -> Alert {
    let mut a = Alert::for_chain(AlertKind::ChainHeadChanged, region, chain, summary);
    let subject = format!("chain:{chain}:head:{}", head.unwrap_or("-"));
    a.dedup_key = dedup_key(region, "", Some(&subject), None, AlertKind::ChainHeadChanged);
    a
}

/// This evaluation's `chain_head_changed` facets, with whether each holds: a move seen now
/// holds (when `enabled`); every open facet not renewed clears. `heads` is updated to `checks`
/// (chains no longer published are forgotten). No checks (nothing published yet) changes nothing.
pub(crate) fn verdicts(
    region: &str,
    enabled: bool,
    heads: &mut Heads,
    checks: &[ChainHeadCheck],
    open: &[Alert],
) -> Vec<(Alert, bool)> {
    let mut out: Vec<(Alert, bool)> = Vec::new();
    for c in checks {
        let to = HeadSeen { head: c.head.clone(), price: c.price };
        let Some(from) = heads.insert(c.chain.clone(), to.clone()) else { continue };
        if from.head == to.head || !enabled {
            continue;
        }
        let line = summary(&c.chain, &from, &to, c.tokens_per_day);
        tracing::info!(chain = %c.chain, region, from = from.head.as_deref().unwrap_or("-"),
            to = to.head.as_deref().unwrap_or("-"), "chain head moved");
        let mut a = facet(region, &c.chain, to.head.as_deref(), line);
        a.current = to.price.map(|p| p.input);
        a.baseline = from.price.map(|p| p.input);
        out.push((a, true));
    }
    if !checks.is_empty() {
        heads.retain(|name, _| checks.iter().any(|c| &c.chain == name));
    }
    for a in open.iter().filter(|a| a.kind == AlertKind::ChainHeadChanged) {
        if !out.iter().any(|(b, _)| b.dedup_key == a.dedup_key) {
            out.push((a.clone(), false));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chain: &str, head: Option<&str>, input: f64, output: f64) -> ChainHeadCheck {
        ChainHeadCheck {
            chain: chain.into(),
            head: head.map(str::to_string),
            price: Some(PerMtok { input, output }),
            tokens_per_day: None,
        }
    }

    #[test]
    fn a_first_sight_is_no_news_a_move_is_and_says_the_price_ratio() {
        let mut heads = Heads::new();
        let or = "openrouter/openai/gpt-4o";
        let ant = "anthropic/claude-sonnet-4-20250514";
        assert!(verdicts("eu", true, &mut heads, &[check("chat", Some(or), 0.97, 3.88)], &[]).is_empty());
        assert!(verdicts("eu", true, &mut heads, &[check("chat", Some(or), 0.97, 3.88)], &[]).is_empty());
        let mut moved = check("chat", Some(ant), 3.0, 15.0);
        moved.tokens_per_day = Some((40e6, 8e6));
        let v = verdicts("eu", true, &mut heads, &[moved], &[]);
        assert_eq!(v.len(), 1);
        let (a, holds) = &v[0];
        assert!(holds);
        assert_eq!((a.kind, a.severity), (AlertKind::ChainHeadChanged, super::super::Severity::Info));
        assert_eq!(a.chain.as_deref(), Some("chat"));
        assert_eq!(
            a.summary,
            "chain chat: now anthropic/claude-sonnet-4-20250514, 3.1× the input price of openrouter/openai/gpt-4o \
             ($3.00 vs $0.97 per million input tokens, $15.00 vs $3.88 output); at tokens_per_day a day now costs \
             $240.00 instead of $69.84"
        );
        assert_eq!((a.current, a.baseline), (Some(3.0), Some(0.97)));
        // Still there next time: the facet clears (the engine resolves it after resolve_after).
        let v = verdicts("eu", true, &mut heads, &[check("chat", Some(ant), 3.0, 15.0)], std::slice::from_ref(a));
        assert_eq!(v.len(), 1);
        assert!(!v[0].1);
    }

    #[test]
    fn switched_off_it_follows_the_heads_silently_and_each_new_head_is_its_own_incident() {
        let mut heads = Heads::new();
        verdicts("eu", false, &mut heads, &[check("chat", Some("a/x"), 1.0, 1.0)], &[]);
        assert!(verdicts("eu", false, &mut heads, &[check("chat", Some("b/y"), 2.0, 2.0)], &[]).is_empty());
        let to_c = verdicts("eu", true, &mut heads, &[check("chat", Some("c/z"), 2.0, 2.0)], &[]);
        assert!(to_c[0].0.summary.starts_with("chain chat: now c/z, the same as b/y"), "{}", to_c[0].0.summary);
        let to_none = verdicts("eu", true, &mut heads, &[check("chat", None, 0.0, 0.0)], &[]);
        assert_ne!(to_c[0].0.dedup_key, to_none[0].0.dedup_key);
        assert_eq!(to_none[0].0.summary, "chain chat: nothing in the chain is usable now (the head was c/z)");
        // Nothing published: nothing forgotten, nothing noticed.
        assert!(verdicts("eu", true, &mut heads, &[], &[]).is_empty());
        assert_eq!(heads.len(), 1);
    }

    #[test]
    fn an_unknown_or_free_price_is_said_as_such() {
        let known = HeadSeen { head: Some("a/x".into()), price: Some(PerMtok { input: 2.0, output: 4.0 }) };
        let unknown = HeadSeen { head: Some("b/y".into()), price: None };
        let free = HeadSeen { head: Some("c/z".into()), price: Some(PerMtok { input: 0.0, output: 0.0 }) };
        assert_eq!(
            summary("k", &known, &unknown, None),
            "chain k: now b/y (its price is not known: set prices in its [[provider]])"
        );
        assert_eq!(
            summary("k", &unknown, &known, None),
            "chain k: now a/x at $2.00 per million input tokens (b/y's price is not known)"
        );
        assert!(
            summary("k", &free, &known, None)
                .starts_with("chain k: now a/x, $2.00 per million input tokens against c/z's $0.00"),
            "{}",
            summary("k", &free, &known, None)
        );
    }
}
