//! Capability probes (docs/CHECKS.md#capability-probes): what each capability's request asks,
//! which API shapes offer it, and the verdict on what came back, as pure functions. The request
//! is built by each provider's adapter from [`Ask`]; the verdict says what was asked and what
//! came back, so `capability_lost` can quote it.

use crate::config::ProviderKind;
use crate::decide::check::quote;
use crate::vocab::capability::Capability;
use crate::vocab::check::CheckVerdict;
use crate::vocab::sample::Sample;
use serde_json::{json, Value};

/// The declared function of the tools probe.
pub const TOOL_NAME: &str = "get_weather";
/// Output budget of a capability run: room for a call or a small object.
pub const MAX_TOKENS: u32 = 96;

/// What a capability run sends: its turns and, for the adapter, the capability's own part of
/// the request (the function declared, the JSON mode, the schema).
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The capability asked.
    pub capability: Capability,
    /// The system turn.
    pub system: &'static str,
    /// The user turn.
    pub user: &'static str,
}

/// The request of `capability`.
pub fn ask(capability: Capability) -> Ask {
    match capability {
        Capability::Tools => Ask {
            capability,
            system: "You can call functions. When a function fits the request, call it instead of answering in text.",
            user: "What is the weather in Paris right now? Call get_weather to find out.",
        },
        Capability::Json => Ask {
            capability,
            system: "Answer with one JSON object and nothing else.",
            user: "Give the capital of France as a JSON object with the keys \"city\" and \"country\".",
        },
        Capability::JsonSchema => {
            Ask { capability, system: "Answer in the requested format.", user: "Give the capital of France." }
        }
    }
}

/// The JSON Schema of the tools probe's function arguments (also the Gemini declaration's).
pub fn tool_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
        "required": ["city"],
    })
}

/// The schema a `json_schema` run's answer must follow.
pub fn answer_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": false,
    })
}

/// Whether the API of `kind` offers `capability` at all (Anthropic's Messages API has tool use
/// but no JSON mode or response schema; a plain HTTP check has no answer).
pub fn offered(kind: ProviderKind, capability: Capability) -> bool {
    match kind {
        ProviderKind::Http => false,
        // Bedrock's Converse API has tool use (`toolConfig`) but no JSON mode or response schema.
        ProviderKind::Anthropic | ProviderKind::Bedrock => capability == Capability::Tools,
        // Vertex AI speaks Gemini's dialect, JSON mode and response schema included.
        ProviderKind::Openai | ProviderKind::Azure | ProviderKind::Gemini | ProviderKind::Vertex => true,
    }
}

/// A function call read from a stream: the function's name and its arguments as sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, as the JSON text the provider streamed.
    pub arguments: String,
}

/// The verdict of a `capability` run on `sample` whose answer text was `answer` and whose
/// function call, if any, was `call`; and why (empty when it passed).
pub fn judge(capability: Capability, sample: &Sample, answer: &str, call: Option<&ToolCall>) -> (CheckVerdict, String) {
    if sample.outcome.is_failure() {
        return (CheckVerdict::Error, format!("the request failed ({})", sample.outcome));
    }
    let verdict = match capability {
        Capability::Tools => tools(answer, call),
        Capability::Json => json_object(answer).map(|_| ()),
        Capability::JsonSchema => json_object(answer).and_then(|v| {
            crate::decide::check::meets(&crate::config::Assertion::JsonSchema(answer_schema()), &v.to_string())
        }),
    };
    match verdict {
        Ok(()) => (CheckVerdict::Passed, String::new()),
        Err(why) => (CheckVerdict::Failed, why),
    }
}

fn tools(answer: &str, call: Option<&ToolCall>) -> Result<(), String> {
    let Some(call) = call else {
        return Err(format!("asked to call {TOOL_NAME}, got text {}", quote(answer)));
    };
    if call.name != TOOL_NAME {
        return Err(format!("asked to call {TOOL_NAME}, got a call of {}", quote(&call.name)));
    }
    let args: Value = serde_json::from_str(&call.arguments).map_err(|e| {
        format!("{TOOL_NAME} called with arguments that are not JSON ({e}): {}", quote(&call.arguments))
    })?;
    match args.get("city").and_then(Value::as_str) {
        Some(city) if !city.trim().is_empty() => Ok(()),
        _ => Err(format!("{TOOL_NAME} called without its required \"city\": {}", quote(&call.arguments))),
    }
}

/// The answer as one JSON object: the whole answer must parse (JSON mode promises exactly that).
fn json_object(answer: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(answer.trim()) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(format!("asked for a JSON object, got other JSON {}", quote(answer))),
        Err(e) => Err(format!("asked for a JSON object, got {} ({e})", quote(answer))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Outcome;
    use crate::vocab::target::Target;

    fn ok() -> Sample {
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let now = chrono::Utc::now();
        Sample::new(t, now, now)
    }

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall { name: name.into(), arguments: args.into() }
    }

    #[test]
    fn a_tool_call_must_name_the_function_with_valid_arguments() {
        let good = call(TOOL_NAME, r#"{"city": "Paris"}"#);
        assert_eq!(judge(Capability::Tools, &ok(), "", Some(&good)).0, CheckVerdict::Passed);
        let (v, why) = judge(Capability::Tools, &ok(), "It is sunny in Paris.", None);
        assert_eq!(v, CheckVerdict::Failed);
        assert!(why.contains("got text \"It is sunny in Paris.\""), "{why}");
        assert!(judge(Capability::Tools, &ok(), "", Some(&call("other", "{}"))).1.contains("\"other\""));
        assert!(judge(Capability::Tools, &ok(), "", Some(&call(TOOL_NAME, "{\"city\":"))).1.contains("not JSON"));
        assert!(judge(Capability::Tools, &ok(), "", Some(&call(TOOL_NAME, "{}"))).1.contains("\"city\""));
    }

    #[test]
    fn json_mode_needs_one_object_and_the_schema_its_fields() {
        let obj = r#"{"city": "Paris", "country": "France"}"#;
        assert_eq!(judge(Capability::Json, &ok(), obj, None).0, CheckVerdict::Passed);
        assert_eq!(judge(Capability::JsonSchema, &ok(), obj, None).0, CheckVerdict::Passed);
        let prose = judge(Capability::Json, &ok(), "The capital is Paris.", None);
        assert_eq!(prose.0, CheckVerdict::Failed);
        assert!(prose.1.contains("asked for a JSON object"), "{}", prose.1);
        assert_eq!(judge(Capability::Json, &ok(), "[1, 2]", None).0, CheckVerdict::Failed);
        let (v, why) = judge(Capability::JsonSchema, &ok(), r#"{"capital": "Paris"}"#, None);
        assert_eq!(v, CheckVerdict::Failed);
        assert!(why.contains("does not match the schema"), "{why}");
        let mut failed = ok();
        failed.outcome = Outcome::RateLimited;
        assert_eq!(judge(Capability::Json, &failed, "", None).0, CheckVerdict::Error);
    }

    #[test]
    fn anthropic_offers_tools_only_and_plain_http_nothing() {
        assert!(offered(ProviderKind::Anthropic, Capability::Tools));
        assert!(!offered(ProviderKind::Anthropic, Capability::Json));
        assert!(Capability::ALL.iter().all(|c| offered(ProviderKind::Gemini, *c) && !offered(ProviderKind::Http, *c)));
        assert!(Capability::ALL.iter().all(|c| offered(ProviderKind::Vertex, *c)));
        assert!(offered(ProviderKind::Bedrock, Capability::Tools) && !offered(ProviderKind::Bedrock, Capability::Json));
    }
}
