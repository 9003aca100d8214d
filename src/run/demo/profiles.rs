//! Latency profiles of the simulated upstream hosts, and the response scripts they generate.
//!
//! Generation is pure (an RNG in, a [`Script`] out) so pacing and error rates can be checked
//! without sockets; the demo server only picks the profile and feeds it the request.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::distr::Alphanumeric;
use rand::{Rng, RngExt};
use rand_distr::StandardNormal;
use serde_json::json;

use super::standin::Script;

/// Spread of TTFT and of inter-token gaps around their medians (log-normal sigma).
pub const JITTER_SIGMA: f64 = 0.25;
/// Share of requests whose TTFT is a spike.
pub const SPIKE_PROBABILITY: f64 = 0.01;
/// How much slower a spike is.
pub const SPIKE_FACTOR: f64 = 3.0;
/// Share of errors that are 429s (the rest are overloads).
pub const RATE_LIMIT_SHARE: f64 = 0.15;
/// Share of TTFT spent before the status line goes out.
pub const TTFB_SHARE: f64 = 0.35;
/// `: OPENROUTER PROCESSING` comments sent before the first token on routes that do so.
pub const PROCESSING_COMMENTS: u32 = 3;
/// The reply the probe's system prompt asks for, as the tokens it is streamed in.
pub const REPLY_PIECES: [&str; 5] = ["{\"", "ok", "\":", "true", "}"];

/// Wire protocol a profile answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenRouter's OpenAI-compatible chat completions stream.
    OpenRouter,
    /// Anthropic Messages stream.
    Anthropic,
    /// Gemini `streamGenerateContent?alt=sse` (CRLF events).
    Gemini,
}

/// One simulated (model, upstream host) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Model id on the wire.
    pub model: &'static str,
    /// Upstream host (OpenRouter `provider.order`); empty for direct providers.
    pub route: &'static str,
    /// Protocol.
    pub wire: Wire,
    /// Median time to first token.
    pub ttft_ms: f64,
    /// Median generation speed.
    pub tokens_per_s: f64,
    /// USD per million input tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
    /// Percentage of requests that fail (0.04 means 0.04 %).
    pub error_pct: f64,
    /// Sends `: OPENROUTER PROCESSING` comments before the first token.
    pub processing_comments: bool,
}

const fn openrouter(
    model: &'static str,
    route: &'static str,
    ttft: f64,
    tps: f64,
    inp: f64,
    out: f64,
    err: f64,
) -> Profile {
    Profile {
        model,
        route,
        wire: Wire::OpenRouter,
        ttft_ms: ttft,
        tokens_per_s: tps,
        input_per_mtok: inp,
        output_per_mtok: out,
        error_pct: err,
        processing_comments: false,
    }
}

/// Llama 3 70B on OpenRouter.
pub const LLAMA: &str = "meta-llama/llama-3-70b-instruct";
/// Mixtral 8x22B on OpenRouter.
pub const MIXTRAL: &str = "mistralai/mixtral-8x22b-instruct";
/// The simulated Anthropic model.
pub const ANTHROPIC_MODEL: &str = "claude-3-5-haiku-20241022";
/// The simulated Gemini model.
pub const GEMINI_MODEL: &str = "gemini-2.0-flash";

/// Every simulated profile: the design notes' table, plus one direct Anthropic and one Gemini host
/// (those two are illustrative figures, not published ones).
pub static PROFILES: [Profile; 8] = [
    openrouter(LLAMA, "DeepInfra", 180.0, 65.0, 0.59, 0.79, 0.04),
    openrouter(LLAMA, "Together", 220.0, 58.0, 0.70, 0.90, 0.02),
    Profile { processing_comments: true, ..openrouter(LLAMA, "Lepton", 195.0, 71.0, 0.80, 0.80, 0.08) },
    openrouter(MIXTRAL, "DeepInfra", 290.0, 45.0, 0.90, 0.90, 0.12),
    openrouter(MIXTRAL, "Together", 310.0, 48.0, 0.90, 0.90, 0.05),
    openrouter(MIXTRAL, "Anyscale", 340.0, 39.0, 1.20, 1.20, 0.15),
    Profile { wire: Wire::Anthropic, ..openrouter(ANTHROPIC_MODEL, "", 520.0, 62.0, 0.80, 4.00, 0.10) },
    Profile { wire: Wire::Gemini, ..openrouter(GEMINI_MODEL, "", 380.0, 160.0, 0.10, 0.40, 0.05) },
];

/// The profile for `model` on `route` (route matched case-insensitively), for `wire`.
pub fn find(wire: Wire, model: &str, route: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.wire == wire && p.model == model && p.route.eq_ignore_ascii_case(route))
}

/// Every OpenRouter route serving `model`, in table order.
pub fn routes_of(model: &str) -> impl Iterator<Item = &'static Profile> + '_ {
    PROFILES.iter().filter(move |p| p.wire == Wire::OpenRouter && p.model == model)
}

/// Timing of one successful response.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Request read → status line.
    pub ttfb: Duration,
    /// Request read → first content token.
    pub ttft: Duration,
    /// Gaps between successive content tokens (one fewer than tokens).
    pub token_gaps: Vec<Duration>,
}

/// What one request will get.
#[derive(Debug, Clone, PartialEq)]
pub enum Draw {
    /// A streamed answer.
    Stream(Timing),
    /// An error status after `after`, with `Retry-After` seconds for 429s.
    Failure {
        /// Overload (503/529) or 429.
        rate_limited: bool,
        /// Delay before the status line.
        after: Duration,
        /// `Retry-After` seconds.
        retry_after_s: Option<u64>,
    },
}

/// What the request asked for, as far as the reply needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Model as requested.
    pub model: String,
    /// Estimated prompt tokens.
    pub prompt_tokens: u32,
    /// Output token limit.
    pub max_tokens: u32,
}

impl Profile {
    /// Draws timing or failure for a reply of `tokens` content tokens.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R, tokens: usize) -> Draw {
        let jitter = |rng: &mut R| (JITTER_SIGMA * rng.sample::<f64, _>(StandardNormal)).exp();
        let mut ttft_ms = self.ttft_ms * jitter(rng);
        if rng.random_bool(SPIKE_PROBABILITY) {
            ttft_ms *= SPIKE_FACTOR;
        }
        if rng.random_bool((self.error_pct / 100.0).clamp(0.0, 1.0)) {
            let rate_limited = rng.random_bool(RATE_LIMIT_SHARE);
            return Draw::Failure {
                rate_limited,
                after: ms(ttft_ms * TTFB_SHARE),
                retry_after_s: rate_limited.then(|| rng.random_range(1..=10)),
            };
        }
        let gap_ms = 1000.0 / self.tokens_per_s;
        let token_gaps = (1..tokens.max(1)).map(|_| ms(gap_ms * jitter(rng))).collect();
        Draw::Stream(Timing { ttfb: ms(ttft_ms * TTFB_SHARE), ttft: ms(ttft_ms), token_gaps })
    }

    /// Index of the script chunk carrying the first content token of a successful stream, so a
    /// test can read the TTFT truth as `record.chunk_written_at[profile.first_token_chunk()]`.
    pub fn first_token_chunk(&self) -> usize {
        match self.wire {
            // Processing comments, then the role-only delta.
            Wire::OpenRouter if self.processing_comments => PROCESSING_COMMENTS as usize + 1,
            Wire::OpenRouter => 1,
            // message_start, content_block_start, ping.
            Wire::Anthropic => 3,
            Wire::Gemini => 0,
        }
    }

    /// Cost of one call at this profile's prices.
    pub fn cost(&self, prompt_tokens: u32, completion_tokens: u32) -> f64 {
        (f64::from(prompt_tokens) * self.input_per_mtok + f64::from(completion_tokens) * self.output_per_mtok) / 1e6
    }

    /// A whole reply for a default probe-sized request with `max_tokens`.
    pub fn script<R: Rng + ?Sized>(&self, rng: &mut R, max_tokens: u32) -> Script {
        self.script_for(rng, &Ask { model: self.model.to_string(), prompt_tokens: 42, max_tokens })
    }

    /// A whole reply to `ask`.
    pub fn script_for<R: Rng + ?Sized>(&self, rng: &mut R, ask: &Ask) -> Script {
        let tokens = reply_tokens(ask.max_tokens);
        let draw = self.draw(rng, tokens.len());
        let id: String = rng.sample_iter(&Alphanumeric).take(20).map(char::from).collect();
        self.render(&draw, ask, &id)
    }

    /// A whole reply to `ask` that calls the function `name` with `arguments` (or fails as a
    /// draw may).
    pub fn tool_call_for<R: Rng + ?Sized>(&self, rng: &mut R, ask: &Ask, name: &str, arguments: &str) -> Script {
        let draw = self.draw(rng, 1);
        let id: String = rng.sample_iter(&Alphanumeric).take(20).map(char::from).collect();
        match &draw {
            Draw::Stream(timing) => self.tool_call(timing, ask, &id, name, arguments),
            Draw::Failure { .. } => self.render(&draw, ask, &id),
        }
    }

    /// Turns a draw into the wire script.
    pub fn render(&self, draw: &Draw, ask: &Ask, id: &str) -> Script {
        match draw {
            Draw::Failure { rate_limited, after, retry_after_s } => {
                let mut script = self.failure(*rate_limited, ask).with_head_delay(*after);
                if let Some(seconds) = retry_after_s {
                    script = script.with_header("Retry-After", seconds.to_string());
                }
                script
            }
            Draw::Stream(timing) => match self.wire {
                Wire::OpenRouter => self.openrouter_stream(timing, ask, id),
                Wire::Anthropic => self.anthropic_stream(timing, ask, id),
                Wire::Gemini => self.gemini_stream(timing, ask, id),
            },
        }
    }

    fn failure(&self, rate_limited: bool, ask: &Ask) -> Script {
        let (status, body) = match (self.wire, rate_limited) {
            (Wire::OpenRouter, false) => (
                503,
                json!({"error": {"message": "The server is overloaded or not ready yet.",
                    "type": "service_unavailable_error", "param": null, "code": "server_is_overloaded"}}),
            ),
            (Wire::OpenRouter, true) => (
                429,
                json!({"error": {"message": "Provider returned error", "code": 429, "metadata": {
                    "raw": format!("{} is temporarily rate-limited upstream. Please retry shortly.", ask.model),
                    "provider_name": self.route}}}),
            ),
            (Wire::Anthropic, false) => {
                (529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
            }
            (Wire::Anthropic, true) => (
                429,
                json!({"type": "error", "error": {"type": "rate_limit_error",
                    "message": "This request would exceed the rate limit for your organization."}}),
            ),
            (Wire::Gemini, false) => (
                503,
                json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                    "status": "UNAVAILABLE"}}),
            ),
            (Wire::Gemini, true) => (
                429,
                json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                    "status": "RESOURCE_EXHAUSTED"}}),
            ),
        };
        Script::json(status, body.to_string().as_bytes())
    }

    fn openrouter_stream(&self, timing: &Timing, ask: &Ask, id: &str) -> Script {
        let tokens = reply_tokens(ask.max_tokens);
        let created = unix_now();
        let chunk = |delta: serde_json::Value, finish: Option<&str>| {
            let body = json!({"id": format!("gen-{created}-{id}"), "provider": self.route, "model": ask.model,
                "object": "chat.completion.chunk", "created": created,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "native_finish_reason": finish}]});
            format!("data: {body}\n\n")
        };
        let mut script = sse_script(timing.ttfb, "text/event-stream");
        let wait = timing.ttft.saturating_sub(timing.ttfb);
        let mut first_wait = wait;
        if self.processing_comments {
            let step = wait / (PROCESSING_COMMENTS + 1);
            for _ in 0..PROCESSING_COMMENTS {
                script = script.with_chunk(step, ": OPENROUTER PROCESSING\n\n");
            }
            first_wait = wait.saturating_sub(step * PROCESSING_COMMENTS);
        }
        script = script.with_chunk(first_wait, chunk(json!({"role": "assistant", "content": ""}), None));
        for (i, piece) in tokens.iter().enumerate() {
            let delay = if i == 0 { Duration::ZERO } else { timing.token_gaps.get(i - 1).copied().unwrap_or_default() };
            script = script.with_chunk(delay, chunk(json!({"role": "assistant", "content": piece}), None));
        }
        let finish = if tokens.len() < REPLY_PIECES.len() { "length" } else { "stop" };
        script = script.with_chunk(Duration::ZERO, chunk(json!({}), Some(finish)));
        let completion = tokens.len() as u32;
        let usage = json!({"id": format!("gen-{created}-{id}"), "provider": self.route, "model": ask.model,
            "object": "chat.completion.chunk", "created": created, "choices": [],
            "usage": {"prompt_tokens": ask.prompt_tokens, "completion_tokens": completion,
                "total_tokens": ask.prompt_tokens + completion, "cost": self.cost(ask.prompt_tokens, completion),
                "is_byok": false}});
        script.with_chunk(Duration::ZERO, format!("data: {usage}\n\n")).with_chunk(Duration::ZERO, "data: [DONE]\n\n")
    }

    fn anthropic_stream(&self, timing: &Timing, ask: &Ask, id: &str) -> Script {
        let tokens = reply_tokens(ask.max_tokens);
        let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
        let msg_id = format!("msg_{id}");
        let mut script = sse_script(timing.ttfb, "text/event-stream; charset=utf-8")
            .with_header("request-id", format!("req_{id}"))
            .with_chunk(
                Duration::ZERO,
                event(
                    "message_start",
                    json!({"type": "message_start", "message": {"model": ask.model, "id": msg_id, "type": "message",
                    "role": "assistant", "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": ask.prompt_tokens, "output_tokens": 1}}}),
                ),
            )
            .with_chunk(
                Duration::ZERO,
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
            )
            .with_chunk(Duration::ZERO, event("ping", json!({"type": "ping"})));
        let wait = timing.ttft.saturating_sub(timing.ttfb);
        for (i, piece) in tokens.iter().enumerate() {
            let delay = if i == 0 { wait } else { timing.token_gaps.get(i - 1).copied().unwrap_or_default() };
            let delta =
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}});
            script = script.with_chunk(delay, event("content_block_delta", delta));
        }
        let stop = if tokens.len() < REPLY_PIECES.len() { "max_tokens" } else { "end_turn" };
        script
            .with_chunk(Duration::ZERO, event("content_block_stop", json!({"type": "content_block_stop", "index": 0})))
            .with_chunk(
                Duration::ZERO,
                event(
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                    "usage": {"input_tokens": ask.prompt_tokens, "output_tokens": tokens.len()}}),
                ),
            )
            .with_chunk(Duration::ZERO, event("message_stop", json!({"type": "message_stop"})))
    }

    fn gemini_stream(&self, timing: &Timing, ask: &Ask, id: &str) -> Script {
        let tokens = reply_tokens(ask.max_tokens);
        let mut script = sse_script(timing.ttfb, "text/event-stream").with_header("Content-Disposition", "attachment");
        let wait = timing.ttft.saturating_sub(timing.ttfb);
        let last = tokens.len() - 1;
        let finish = if tokens.len() < REPLY_PIECES.len() { "MAX_TOKENS" } else { "STOP" };
        for (i, piece) in tokens.iter().enumerate() {
            let delay = if i == 0 { wait } else { timing.token_gaps.get(i - 1).copied().unwrap_or_default() };
            let mut candidate = json!({"content": {"parts": [{"text": piece}], "role": "model"}});
            let mut usage = json!({"promptTokenCount": ask.prompt_tokens, "totalTokenCount": ask.prompt_tokens});
            if i == last {
                candidate["finishReason"] = json!(finish);
                usage = json!({"promptTokenCount": ask.prompt_tokens, "candidatesTokenCount": tokens.len(),
                    "totalTokenCount": ask.prompt_tokens as usize + tokens.len()});
            }
            let data = json!({"candidates": [candidate], "usageMetadata": usage, "modelVersion": ask.model,
                "responseId": id});
            script = script.with_chunk(delay, format!("data: {data}\r\n\r\n"));
        }
        script
    }
}

impl Profile {
    /// A streamed call of the function `name` with the JSON `arguments`, in this profile's
    /// dialect, its first piece at the timing's TTFT: how the demo's hosts answer a capability
    /// probe's `tools` request.
    pub fn tool_call(&self, timing: &Timing, ask: &Ask, id: &str, name: &str, arguments: &str) -> Script {
        let wait = timing.ttft.saturating_sub(timing.ttfb);
        match self.wire {
            Wire::OpenRouter => {
                let created = unix_now();
                let chunk = |delta: serde_json::Value, finish: Option<&str>| {
                    let body = json!({"id": format!("gen-{created}-{id}"), "provider": self.route,
                        "model": ask.model, "object": "chat.completion.chunk", "created": created,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                    format!("data: {body}\n\n")
                };
                let call = json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                    "id": format!("call_{id}"), "type": "function", "function": {"name": name, "arguments": ""}}]});
                let args = json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]});
                sse_script(timing.ttfb, "text/event-stream")
                    .with_chunk(wait, chunk(call, None))
                    .with_chunk(Duration::ZERO, chunk(args, None))
                    .with_chunk(Duration::ZERO, chunk(json!({}), Some("tool_calls")))
                    .with_chunk(Duration::ZERO, "data: [DONE]\n\n")
            }
            Wire::Anthropic => {
                let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
                let start = json!({"type": "message_start", "message": {"model": ask.model, "id": format!("msg_{id}"),
                    "type": "message", "role": "assistant", "content": [], "stop_reason": null,
                    "usage": {"input_tokens": ask.prompt_tokens, "output_tokens": 1}}});
                let block = json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "tool_use", "id": format!("toolu_{id}"), "name": name, "input": {}}});
                let delta = json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": arguments}});
                sse_script(timing.ttfb, "text/event-stream; charset=utf-8")
                    .with_chunk(Duration::ZERO, event("message_start", start))
                    .with_chunk(wait, event("content_block_start", block))
                    .with_chunk(Duration::ZERO, event("content_block_delta", delta))
                    .with_chunk(
                        Duration::ZERO,
                        event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
                    )
                    .with_chunk(
                        Duration::ZERO,
                        event(
                            "message_delta",
                            json!({"type": "message_delta",
                        "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
                        ),
                    )
                    .with_chunk(Duration::ZERO, event("message_stop", json!({"type": "message_stop"})))
            }
            Wire::Gemini => {
                let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
                let data = json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": name, "args": args}}],
                    "role": "model"}, "finishReason": "STOP"}], "modelVersion": ask.model, "responseId": id,
                    "usageMetadata": {"promptTokenCount": ask.prompt_tokens, "totalTokenCount": ask.prompt_tokens}});
                sse_script(timing.ttfb, "text/event-stream")
                    .with_header("Content-Disposition", "attachment")
                    .with_chunk(wait, format!("data: {data}\r\n\r\n"))
            }
        }
    }
}

/// The content tokens of a reply limited to `max_tokens` (at least one).
pub fn reply_tokens(max_tokens: u32) -> &'static [&'static str] {
    let n = (max_tokens as usize).clamp(1, REPLY_PIECES.len());
    &REPLY_PIECES[..n]
}

fn sse_script(ttfb: Duration, content_type: &str) -> Script {
    Script::status(200)
        .with_header("Content-Type", content_type)
        .with_header("Cache-Control", "no-cache")
        .with_head_delay(ttfb)
}

fn ms(millis: f64) -> Duration {
    Duration::from_secs_f64(millis.max(0.0) / 1000.0)
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// Per-token USD price string the way OpenRouter publishes it (`"0.00000059"`).
pub fn per_token_price(per_mtok: f64) -> String {
    let s = format!("{:.12}", per_mtok / 1e6);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".to_string()
    } else {
        s.to_string()
    }
}
