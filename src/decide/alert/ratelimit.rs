//! The `ratelimit_low` rule: a pure function from a round's samples (their rate-limit headroom,
//! read from the response headers by [`crate::decide::ratelimit::from_headers`]) to one facet
//! verdict per target that said something.
//!
//! The facet holds while the latest probe's tighter allowance (remaining / limit) is under
//! `ratelimit.low_fraction`, and clears like every facet after `alerts.resolve_after` probes
//! back above it (or a successful probe whose response no longer carries the headers). A failed
//! probe without the headers (a timeout, a refused connection) says nothing either way.

use super::Alert;
use super::AlertKind;
use crate::vocab::ratelimit::{Allowance, RateLimitKind};
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;

/// `(alert, holds)` for each sample that says something about its headroom; `low_fraction`
/// 0 turns the rule off (nothing is ever under 0, so open facets clear). A verdict that does not
/// hold is given only for a target whose facet is `open` (it can only count towards closing it):
/// at 10,000 targets the others were 10,000 alerts built a minute and dropped.
pub fn verdicts<'a>(
    region: &str,
    samples: impl IntoIterator<Item = &'a Sample>,
    low_fraction: f64,
    open: impl Fn(&Target) -> bool,
) -> Vec<(Alert, bool)> {
    let mut out = Vec::new();
    for s in samples {
        let t = &s.target;
        let h = &s.ratelimit;
        if h.is_empty() && s.outcome.is_failure() {
            continue;
        }
        let (holds, summary, current) = match crate::decide::ratelimit::low(h, low_fraction) {
            Some((kind, fraction)) => {
                let a = h.get(kind).copied().unwrap_or_default();
                (true, describe(kind, &a, low_fraction), Some(fraction))
            }
            None if !open(t) => continue,
            None => {
                let left = h.tightest().map(|(k, f)| format!(": {} {:.0} % left", k.as_str(), f * 100.0));
                (
                    false,
                    format!("rate-limit headroom back above ratelimit.low_fraction{}", left.unwrap_or_default()),
                    None,
                )
            }
        };
        let mut alert = Alert::new(AlertKind::RateLimitLow, region, &t.provider, Some(t), summary);
        alert.current = current;
        alert.baseline = Some(low_fraction);
        out.push((alert, holds));
    }
    out
}

/// `requests: 3 of 100 left (3 %), under ratelimit.low_fraction 10 %; resets at 12:00:05 UTC`.
fn describe(kind: RateLimitKind, a: &Allowance, low_fraction: f64) -> String {
    let (remaining, limit) = (a.remaining.unwrap_or(0), a.limit.unwrap_or(0));
    let fraction = a.fraction().unwrap_or(0.0);
    let reset = a.reset_at.map(|r| format!("; resets at {}", r.format("%Y-%m-%d %H:%M:%S UTC"))).unwrap_or_default();
    format!(
        "{}: {remaining} of {limit} left ({:.1} %), under ratelimit.low_fraction {:.0} %{reset}",
        kind.as_str(),
        fraction * 100.0,
        low_fraction * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every facet counts as open: each sample that says something gives a verdict.
    fn open(_: &Target) -> bool {
        true
    }
    use crate::vocab::ratelimit::Headroom;
    use crate::vocab::sample::Outcome;
    use chrono::{TimeZone, Utc};

    fn sample(outcome: Outcome, requests: Option<(u64, u64)>) -> Sample {
        let t = Target::new("groq".into(), "llama".into(), None, "eu".into());
        let at = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).single().expect("valid");
        let mut s = Sample::new(t, at, at);
        s.outcome = outcome;
        s.ratelimit = Headroom {
            requests: requests.map(|(remaining, limit)| Allowance {
                remaining: Some(remaining),
                limit: Some(limit),
                reset_at: Some(at + chrono::Duration::seconds(5)),
            }),
            tokens: None,
        };
        s
    }

    #[test]
    fn holds_under_the_fraction_says_what_is_left_and_clears_above_it() {
        let low = sample(Outcome::Ok, Some((3, 100)));
        let v = verdicts("eu", [&low], 0.1, open);
        assert_eq!(v.len(), 1);
        let (a, holds) = &v[0];
        assert!(holds);
        assert_eq!(a.kind, AlertKind::RateLimitLow);
        assert_eq!(
            a.summary,
            "requests: 3 of 100 left (3.0 %), under ratelimit.low_fraction 10 %; resets at 2026-12-01 12:00:05 UTC"
        );
        assert_eq!((a.current, a.baseline), (Some(0.03), Some(0.1)));
        // A 429 carrying the headers counts like any response.
        assert!(verdicts("eu", [&sample(Outcome::RateLimited, Some((0, 100)))], 0.1, open)[0].1);
        let fine = sample(Outcome::Ok, Some((50, 100)));
        let v = verdicts("eu", [&fine], 0.1, open);
        assert!(!v[0].1 && v[0].0.summary.ends_with("requests 50 % left"), "{}", v[0].0.summary);
        assert_eq!(v[0].0.dedup_key, verdicts("eu", [&low], 0.1, open)[0].0.dedup_key, "one facet per target");
        assert!(!verdicts("eu", [&low], 0.0, open)[0].1, "0 turns the rule off");
    }

    #[test]
    fn a_failed_probe_without_headers_says_nothing_and_an_ok_one_without_them_clears() {
        assert!(verdicts("eu", [&sample(Outcome::Timeout, None)], 0.1, open).is_empty());
        let quiet = verdicts("eu", [&sample(Outcome::Ok, None)], 0.1, open);
        assert_eq!(quiet.len(), 1);
        assert!(!quiet[0].1);
    }

    #[test]
    fn headroom_above_the_fraction_gives_no_verdict_unless_the_facet_is_open() {
        let fine = sample(Outcome::Ok, Some((50, 100)));
        assert!(verdicts("eu", [&fine], 0.1, |_: &Target| false).is_empty(), "nothing to clear");
        let low = sample(Outcome::Ok, Some((3, 100)));
        assert!(verdicts("eu", [&low], 0.1, |_: &Target| false)[0].1, "a low one is said whatever is open");
    }
}
