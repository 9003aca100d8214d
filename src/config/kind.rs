//! The provider kinds: one protocol family, and so one adapter, each. Apart from the provider
//! list because the built-in defaults name them too.

use serde::{Deserialize, Serialize};

/// The Azure OpenAI data-plane API version used when `base_url` does not name one
/// (`?api-version=`): the newest generally available version when the adapter was written.
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";

/// Protocol family of a provider; one adapter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI chat completions (OpenRouter, OpenAI, Groq, Together, DeepInfra, vLLM, Ollama).
    Openai,
    /// Anthropic Messages API.
    Anthropic,
    /// Azure OpenAI: `base_url` is the resource (`https://NAME.openai.azure.com`, optionally
    /// `?api-version=…`), models are deployment names, the key goes in `api-key`.
    Azure,
    /// Gemini `streamGenerateContent?alt=sse`.
    Gemini,
    /// Plain GET expecting 2xx.
    Http,
    /// Amazon Bedrock `ConverseStream`: SigV4-signed (or a Bedrock API key), `region` required,
    /// the answer an `application/vnd.amazon.eventstream` binary event stream.
    Bedrock,
    /// Google Vertex AI `streamGenerateContent?alt=sse` (Gemini's stream dialect) with an OAuth
    /// token minted from a service-account JSON file (`credentials_file`).
    Vertex,
}

impl ProviderKind {
    /// The config name (`openai`, `anthropic`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Azure => "azure",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Http => "http",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Vertex => "vertex",
        }
    }
}

/// Which OpenAI API a `kind = "openai"` provider's models are probed on (`endpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// Chat completions, streamed (`POST {base}/chat/completions`): every kind's default.
    #[default]
    Chat,
    /// Embeddings (`POST {base}/embeddings`): one whole answer, timed to its last byte.
    Embeddings,
    /// The Responses API, streamed (`POST {base}/responses`): TTFT on the first output text delta.
    Responses,
}

impl Endpoint {
    /// The config name (`chat`, `embeddings`, `responses`).
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Responses => "responses",
        }
    }
}
