//! One realistic stored sample for the storage benches: a streaming target's ok probe with every
//! phase, tokens, cost and a request id, one in a hundred rate limited.

use chrono::{DateTime, Duration, Utc};
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

/// The `i`th sample of `t`, started at `started`; its figures vary with `i`.
pub fn stored_sample(t: Target, started: DateTime<Utc>, i: usize) -> Sample {
    let mut s = Sample::new(t, started - Duration::milliseconds(2), started);
    let jitter = (i % 97) as f64;
    s.dns_ms = Some(1.0 + jitter / 50.0);
    s.connect_ms = Some(10.0 + jitter / 10.0);
    s.tls_ms = Some(25.0 + jitter / 5.0);
    s.ttfb_ms = Some(180.0 + jitter);
    s.ttft_ms = Some(240.0 + jitter * 2.0);
    s.total_ms = Some(480.0 + jitter * 3.0);
    s.input_tokens = Some(21);
    s.output_tokens = Some(16);
    s.tokens_per_s = Some(60.0 + jitter / 10.0);
    s.status = Some(200);
    s.adherence_ok = Some(true);
    s.cost_usd = Some(0.000_021);
    s.request_id = Some(format!("gen-{:016x}", i * 7919));
    if i.is_multiple_of(100) {
        s.outcome = Outcome::RateLimited;
        s.status = Some(429);
        s.error = Some("Rate limit reached for requests".into());
        s.retry_after_s = Some(2.0);
    }
    s
}
