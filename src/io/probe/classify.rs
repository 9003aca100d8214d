//! How a response, an error body or a mid-stream error event maps to an [`Outcome`].

use crate::vocab::sample::Outcome;

/// Classifies a non-2xx response from its status and (possibly truncated) body.
///
/// Providers disagree on codes (Anthropic signals no credit with a 400, OpenAI with a 429),
/// so the error type/code in the body is read before falling back to the status.
pub fn classify_http_error(status: u16, body: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    if let Some(o) = classify_error_text(&text) {
        return o;
    }
    match status {
        401 | 403 => Outcome::AuthError,
        402 => Outcome::PaymentRequired,
        404 | 410 => Outcome::ModelUnavailable,
        408 => Outcome::Timeout,
        429 => Outcome::RateLimited,
        400..=499 => Outcome::ClientError,
        _ => Outcome::ServerError,
    }
}

/// Classifies an error by the words providers use in their bodies and mid-stream error events.
pub fn classify_error_text(lower: &str) -> Option<Outcome> {
    const PAYMENT: [&str; 4] =
        ["insufficient_quota", "credit balance", "requires more credits", "insufficient credits"];
    // Bedrock: `ResourceNotFoundException`, `ModelNotReadyException`, a ValidationException
    // saying "The provided model identifier is invalid".
    const MODEL: [&str; 8] = [
        "model_not_found",
        "not_found_error",
        "\"not_found\"",
        "no endpoints found",
        "does not exist",
        "resourcenotfoundexception",
        "modelnotreadyexception",
        "model identifier is invalid",
    ];
    // AWS: access denied (also a model whose access is not enabled), bad or expired keys and signatures.
    const AUTH: [&str; 9] = [
        "invalid_api_key",
        "authentication_error",
        "invalid x-api-key",
        "permission_denied",
        "accessdeniedexception",
        "unrecognizedclientexception",
        "invalidsignatureexception",
        "expiredtokenexception",
        "incompletesignatureexception",
    ];
    // AWS throttling and service quotas (tokens or requests per minute or day) are rate limits.
    const RATE: [&str; 5] = [
        "rate_limit",
        "resource_exhausted",
        "throttlingexception",
        "servicequotaexceededexception",
        "toomanyrequestsexception",
    ];
    if PAYMENT.iter().any(|p| lower.contains(p)) {
        Some(Outcome::PaymentRequired)
    } else if AUTH.iter().any(|p| lower.contains(p)) {
        Some(Outcome::AuthError)
    } else if MODEL.iter().any(|p| lower.contains(p)) {
        Some(Outcome::ModelUnavailable)
    } else if RATE.iter().any(|p| lower.contains(p)) {
        Some(Outcome::RateLimited)
    } else if ["overloaded", "\"unavailable\"", "serviceunavailableexception", "modelerrorexception"]
        .iter()
        .any(|p| lower.contains(p))
    {
        Some(Outcome::ServerError)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
    }

    #[test]
    fn real_error_bodies_map_to_their_class() {
        let cases = [
            ("openai-error-400.json", 400, Outcome::ClientError),
            ("openai-error-401.json", 401, Outcome::AuthError),
            ("openai-error-404.json", 404, Outcome::ModelUnavailable),
            ("openai-error-429-rate-limit.json", 429, Outcome::RateLimited),
            ("openai-error-429-insufficient-quota.json", 429, Outcome::PaymentRequired),
            ("openai-error-500.json", 500, Outcome::ServerError),
            ("openai-error-503.json", 503, Outcome::ServerError),
            ("anthropic-error-400.json", 400, Outcome::ClientError),
            ("anthropic-error-400-credit-balance.json", 400, Outcome::PaymentRequired),
            ("anthropic-error-401.json", 401, Outcome::AuthError),
            ("anthropic-error-404.json", 404, Outcome::ModelUnavailable),
            ("anthropic-error-429.json", 429, Outcome::RateLimited),
            ("anthropic-error-529.json", 529, Outcome::ServerError),
            ("openrouter-401.json", 401, Outcome::AuthError),
            ("openrouter-402.json", 402, Outcome::PaymentRequired),
            ("openrouter-402-docs-example.json", 402, Outcome::PaymentRequired),
            ("openrouter-429.json", 429, Outcome::RateLimited),
            ("gemini-error-404.json", 404, Outcome::ModelUnavailable),
            ("gemini-error-429.json", 429, Outcome::RateLimited),
            ("gemini-error-503.json", 503, Outcome::ServerError),
            ("groq-error-404.json", 404, Outcome::ModelUnavailable),
            ("vertex-error-403-permission-denied.json", 403, Outcome::AuthError),
            ("vertex-error-429-quota.json", 429, Outcome::RateLimited),
            ("vertex-error-404-model.json", 404, Outcome::ModelUnavailable),
            ("bedrock-error-400-model-id.json", 400, Outcome::ModelUnavailable),
        ];
        for (file, status, want) in cases {
            assert_eq!(classify_http_error(status, &fixture(file)), want, "{file}");
        }
    }

    #[test]
    fn names_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(o));
        }
        assert!("bogus".parse::<Outcome>().is_err());
    }
}
