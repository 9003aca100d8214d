//! The verdict of a golden check (`[[provider.check]]`): a pure function of the check, the
//! probe's outcome, its time to first token and the answer. A failed request is an `error`
//! (the regular probes' alerts speak for it); an answer that breaks the assertion or the TTFT
//! budget is `failed`, with a line saying what was asked and what came back.

use crate::config::{Assertion, CheckConfig};
use crate::vocab::check::CheckVerdict;
use crate::vocab::sample::Sample;

/// Longest piece of the answer quoted in a verdict's reason, in characters.
const QUOTE_CHARS: usize = 80;

/// The verdict of `check` on `sample` whose visible answer was `answer`, and why.
pub fn judge(check: &CheckConfig, sample: &Sample, answer: &str) -> (CheckVerdict, String) {
    if sample.outcome.is_failure() {
        return (CheckVerdict::Error, format!("the request failed ({})", sample.outcome));
    }
    if let Err(why) = meets(&check.assertion, answer) {
        return (CheckVerdict::Failed, why);
    }
    if let (Some(budget), Some(ttft)) = (check.ttft_budget, sample.ttft_ms) {
        let budget_ms = budget.as_secs_f64() * 1000.0;
        if ttft > budget_ms {
            return (
                CheckVerdict::Failed,
                format!("first token after {ttft:.0} ms, over the {budget_ms:.0} ms budget"),
            );
        }
    }
    (CheckVerdict::Passed, String::new())
}

/// Whether `answer` satisfies `assertion`; else what was asked and what came back.
pub fn meets(assertion: &Assertion, answer: &str) -> Result<(), String> {
    match assertion {
        Assertion::Regex(re) if re.is_match(answer) => Ok(()),
        Assertion::Regex(re) => Err(format!("asked for a match of /{}/, got {}", re.as_str(), quote(answer))),
        Assertion::Exact(want) => {
            let (w, got) = (normalise(want), normalise(answer));
            if w == got {
                Ok(())
            } else {
                Err(format!("asked for {}, got {}", quote(&w), quote(&got)))
            }
        }
        Assertion::JsonSchema(schema) => {
            let text = json_part(answer);
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("asked for JSON, got {} ({e})", quote(answer)))?;
            // The schema compiled at load; compiling again here keeps the config free of
            // non-cloneable validators (a check runs every few minutes per target).
            let validator =
                jsonschema::validator_for(schema).map_err(|e| format!("the schema does not compile: {e}"))?;
            let errors: Vec<String> = validator.iter_errors(&value).take(3).map(|e| e.to_string()).collect();
            if errors.is_empty() {
                Ok(())
            } else {
                Err(format!("JSON does not match the schema: {}; got {}", errors.join("; "), quote(text)))
            }
        }
    }
}

/// Text normalised for `exact`: the canary's normalisation (trimmed; quotes, markdown
/// emphasis and a trailing full stop removed; whitespace runs as one space), then lower case.
pub fn normalise(text: &str) -> String {
    crate::decide::canary::prompt::normalise(text).to_lowercase()
}

/// The JSON in an answer: a fenced code block's body when there is one, else from the first
/// `{` or `[` to the last `}` or `]`, else the whole answer.
fn json_part(answer: &str) -> &str {
    let t = answer.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let body = rest.split_once('\n').map_or("", |(_, b)| b);
        return body.rsplit_once("```").map_or(body, |(b, _)| b).trim();
    }
    let start = t.find(['{', '[']);
    let end = t.rfind(['}', ']']);
    match (start, end) {
        (Some(s), Some(e)) if s < e => &t[s..=e],
        _ => t,
    }
}

/// `text` quoted, cut to [`QUOTE_CHARS`] characters (a verdict's reason quotes what came back).
pub(crate) fn quote(text: &str) -> String {
    let cut: String = text.chars().take(QUOTE_CHARS).collect();
    let more = if text.chars().count() > QUOTE_CHARS { "…" } else { "" };
    format!("{cut:?}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Outcome;
    use crate::vocab::target::Target;

    fn check(assertion: Assertion, budget_ms: Option<u64>) -> CheckConfig {
        CheckConfig {
            name: "c".into(),
            system: None,
            prompt: "p".into(),
            assertion,
            ttft_budget: budget_ms.map(std::time::Duration::from_millis),
            every: crate::config::DEFAULT_CHECK_EVERY,
            max_tokens: 64,
            models: Vec::new(),
        }
    }

    fn sample(outcome: Outcome, ttft_ms: Option<f64>) -> Sample {
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let now = chrono::Utc::now();
        let mut s = Sample::new(t, now, now);
        s.outcome = outcome;
        s.ttft_ms = ttft_ms;
        s
    }

    fn schema() -> Assertion {
        let s = r#"{"type":"object","required":["refund"],"properties":{"refund":{"type":"boolean"}}}"#;
        Assertion::JsonSchema(serde_json::from_str(s).expect("schema"))
    }

    #[test]
    fn each_assertion_passes_and_fails_with_what_came_back() {
        let re = Assertion::Regex(regex::Regex::new(r"(?i)\brefund\b").expect("re"));
        assert!(meets(&re, "You may get a Refund.").is_ok());
        let why = meets(&re, "No.").expect_err("no match");
        assert!(why.contains("/(?i)\\brefund\\b/") && why.contains("\"No.\""), "{why}");
        let exact = Assertion::Exact("Paris".into());
        assert!(meets(&exact, "  **paris.** ").is_ok());
        assert!(meets(&exact, "Lyon").expect_err("differs").contains("\"lyon\""));
        assert!(meets(&schema(), "```json\n{\"refund\": true}\n```").is_ok());
        assert!(meets(&schema(), "Sure: {\"refund\": false} hope it helps").is_ok());
        let wrong = meets(&schema(), "{\"refund\": \"yes\"}").expect_err("wrong type");
        assert!(wrong.contains("does not match the schema"), "{wrong}");
        assert!(meets(&schema(), "I cannot answer in JSON").expect_err("not json").contains("asked for JSON"));
    }

    #[test]
    fn a_failed_request_is_an_error_and_a_slow_answer_fails_its_budget() {
        let c = check(Assertion::Exact("ok".into()), Some(500));
        assert_eq!(judge(&c, &sample(Outcome::Timeout, None), "").0, CheckVerdict::Error);
        assert_eq!(judge(&c, &sample(Outcome::Ok, Some(120.0)), "OK").0, CheckVerdict::Passed);
        let (v, why) = judge(&c, &sample(Outcome::Ok, Some(900.0)), "OK");
        assert_eq!(v, CheckVerdict::Failed);
        assert!(why.contains("900 ms") && why.contains("500 ms"), "{why}");
        assert_eq!(judge(&c, &sample(Outcome::Ok, Some(100.0)), "nope").0, CheckVerdict::Failed);
    }

    #[test]
    fn long_answers_are_quoted_short() {
        let long = "x".repeat(500);
        let why = meets(&Assertion::Exact("y".into()), &long).expect_err("differs");
        assert!(why.len() < 200 && why.ends_with('…'), "{why}");
    }
}
