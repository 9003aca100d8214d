//! Plain HTTP GET expecting 2xx, for comparison with blackbox-style probers.

use super::Adapter;
use super::ProbeParams;
use super::RequestSpec;
use super::Signals;
use crate::io::probe::sse::SseEvent;

/// Adapter for `kind = "http"`: the base URL itself is fetched.
pub struct PlainHttp;

impl Adapter for PlainHttp {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let headers = p
            .provider
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain(super::secret_headers(p.provider))
            .collect();
        Ok(RequestSpec { method: http::Method::GET, url: p.provider.base_url.clone(), headers, body: None })
    }

    fn streams(&self) -> bool {
        false
    }

    fn interpret(&self, _event: &SseEvent) -> Signals {
        Signals::default()
    }
}
