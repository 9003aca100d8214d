//! YAML text of a JSON value that YAML 1.1 loaders (PyYAML's `safe_load`, which LiteLLM reads its
//! proxy config with) and YAML 1.2 loaders read back as the same value.
//!
//! serde_norway quotes only what YAML 1.2 would read as another type, so `2026-11-30T12:00:00Z`,
//! `yes` or `on` went out plain and came back from PyYAML as a datetime or a bool; it has no switch
//! to quote them. Here a string goes out plain only when it starts with a letter, holds nothing
//! but letters, digits and `_ . / @ -`, and is not one of YAML 1.1's booleans or nulls; every
//! other string is double-quoted. A float always carries a `.` (PyYAML reads `1e-05` as a string
//! and `2` as an int).

use serde_json::{Map, Value};

/// Block-style YAML of `v`, ending in a newline.
pub fn to_string(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => entries(&mut out, m, 0, false),
        Value::Array(a) if !a.is_empty() => items(&mut out, a, 0, false),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

/// The entries of a non-empty mapping at `indent`; the first one inline when `inline` (after `- `).
fn entries(out: &mut String, m: &Map<String, Value>, indent: usize, inline: bool) {
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 || !inline {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&string(k));
        out.push(':');
        match v {
            Value::Object(child) if !child.is_empty() => {
                out.push('\n');
                entries(out, child, indent + 2, false);
            }
            Value::Array(child) if !child.is_empty() => {
                out.push('\n');
                items(out, child, indent, false);
            }
            other => {
                out.push(' ');
                out.push_str(&scalar(other));
                out.push('\n');
            }
        }
    }
}

/// The items of a non-empty sequence, each `- ` at `indent`; the first inline when `inline`.
fn items(out: &mut String, a: &[Value], indent: usize, inline: bool) {
    for (i, v) in a.iter().enumerate() {
        if i > 0 || !inline {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str("- ");
        match v {
            Value::Object(child) if !child.is_empty() => entries(out, child, indent + 2, true),
            Value::Array(child) if !child.is_empty() => items(out, child, indent + 2, true),
            other => {
                out.push_str(&scalar(other));
                out.push('\n');
            }
        }
    }
}

/// A scalar (or an empty collection) as one token.
fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => float(n.as_f64().unwrap_or(0.0)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// A float in positional notation with a `.`, which both YAML versions read as a float.
fn float(f: f64) -> String {
    // `Display` for f64 never uses an exponent and gives the shortest text that reads back exact.
    let text = f.to_string();
    if text.contains('.') {
        text
    } else {
        text + ".0"
    }
}

/// Words YAML 1.1 reads as a boolean or null whatever their case.
const WORDS: [&str; 9] = ["y", "n", "yes", "no", "true", "false", "on", "off", "null"];

/// A string plain when no loader can take it for anything else, double-quoted otherwise.
fn string(s: &str) -> String {
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "_./@-".contains(c))
        && !WORDS.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        return s.to_string();
    }
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            // Control characters, and the ones YAML 1.1 takes for line breaks or a byte order mark.
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                q.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_booleans_and_numbers_in_strings_are_quoted_and_identifiers_are_not() {
        let doc = json!({
            "generated_at": "2026-11-30T12:00:00Z",
            "day": "2026-11-30",
            "route": "On",
            "sexagesimal": "1:20",
            "model": "openai/gpt-4o-2024-08-06",
            "api_key": "os.environ/OPENAI_API_KEY",
            "target": "openrouter/openai/gpt-4o@Azure",
            "reason": "breaker open: 2 failed probes (trial probe at 2026-11-30T12:05:00Z)",
            "empty": "",
            "quote": "say \"hi\"\n\u{7}",
        });
        let text = to_string(&doc);
        for line in [
            "generated_at: \"2026-11-30T12:00:00Z\"",
            "day: \"2026-11-30\"",
            "route: \"On\"",
            "sexagesimal: \"1:20\"",
            "model: openai/gpt-4o-2024-08-06",
            "api_key: os.environ/OPENAI_API_KEY",
            "target: openrouter/openai/gpt-4o@Azure",
            "empty: \"\"",
            "quote: \"say \\\"hi\\\"\\n\\u0007\"",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        let back: Value = serde_norway::from_str(&text).expect("YAML 1.2 reads it");
        assert_eq!(back, doc);
    }

    #[test]
    fn nested_maps_and_sequences_read_back_the_same() {
        let doc = json!({
            "model_list": [
                {"model_name": "chat", "litellm_params": {"model": "openai/m", "order": 1, "stream_timeout": 0.8},
                 "model_info": {"id": "chat|openai/m", "allowed_fails_policy": {"RateLimitErrorAllowedFails": 0}}},
                {"model_name": "chat", "litellm_params": {"model": "anthropic/c", "order": 2}, "model_info": {}},
            ],
            "router_settings": {"fallbacks": [{"chat": ["m", "c"]}], "allowed_fails": 1, "cooldown_time": 300},
            "nested": [[1, 2], [], [{"a": null}]],
            "floats": [2.0, 0.00001, -0.5, 1e21, 0.0004],
            "flags": [true, false],
        });
        let text = to_string(&doc);
        assert!(text.contains("model_list:\n- litellm_params:\n    model: openai/m\n    order: 1\n"), "{text}");
        assert!(text.contains("- 0.00001\n") && text.contains("- 2.0\n"), "{text}");
        let back: Value = serde_norway::from_str(&text).expect("YAML 1.2 reads it");
        assert_eq!(back, doc);
        assert_eq!(to_string(&json!({})), "{}\n");
        assert_eq!(to_string(&json!("2026-01-01")), "\"2026-01-01\"\n");
    }
}
