//! Azure OpenAI chat completions: a deployment URL with `api-version`, the key in `api-key`,
//! and OpenAI's stream format (plus content-filter frames with empty `choices`, which carry no
//! token and are skipped like any event without content).

use super::join;
use super::openai::chat_body;
use super::openai::OpenAi;
use super::streaming_post;
use super::Adapter;
use super::ProbeParams;
use super::RequestSpec;
use super::Signals;
use crate::io::probe::sse::SseEvent;

/// The data-plane API version used when `base_url` does not name one (`?api-version=`); the
/// router export gives LiteLLM the same one.
pub const DEFAULT_API_VERSION: &str = crate::config::AZURE_DEFAULT_API_VERSION;

/// Adapter for `POST {resource}/openai/deployments/{deployment}/chat/completions?api-version=…`;
/// the target's model is the deployment name.
pub struct Azure;

impl Adapter for Azure {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let base = &p.provider.base_url;
        let version = base
            .query_pairs()
            .find(|(k, _)| k == "api-version")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_else(|| DEFAULT_API_VERSION.to_string());
        let mut resource = base.clone();
        resource.set_query(None);
        let deployment: String = url::form_urlencoded::byte_serialize(p.model.as_bytes()).collect();
        let mut url = join(&resource, &format!("openai/deployments/{deployment}/chat/completions"))?;
        url.query_pairs_mut().append_pair("api-version", &version);
        let mut body = chat_body(p, false);
        // The deployment names the model; Azure ignores or refuses OpenRouter's routing fields.
        if let Some(o) = body.as_object_mut() {
            o.remove("model");
            o.remove("provider");
        }
        streaming_post(p, url, &body, "api-key", str::to_string, &[])
    }

    fn interpret(&self, event: &SseEvent) -> Signals {
        OpenAi.interpret(event)
    }
}
