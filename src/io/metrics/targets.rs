//! Per-target series held as plain numbers and written straight into the exposition text.
//!
//! At 1,000 targets these are nearly all of a scrape's 7,500 series. Kept in the `prometheus`
//! crate's registry, every scrape gathered them into protobuf structures with their label
//! strings, sorted and encoded them: 20–35 ms and a few megabytes of short-lived allocations
//! per scrape. Here a scrape is one pass over the targets, and the text is the same: labels in
//! name order, `le` last, values as Rust prints them.

use super::exposition::Out;
use crate::vocab::ratelimit::RateLimitKind;
use crate::vocab::sample::Outcome;
use crate::vocab::target::Target;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A cumulative-at-render histogram: per-bucket counts (upper bound inclusive), sum and count.
pub(super) struct Hist {
    counts: Box<[u64]>,
    sum: f64,
    count: u64,
}

impl Hist {
    pub(super) fn new(buckets: usize) -> Self {
        Hist { counts: vec![0; buckets].into_boxed_slice(), sum: 0.0, count: 0 }
    }

    pub(super) fn observe(&mut self, bounds: &[f64], v: f64) {
        if let Some(i) = bounds.iter().position(|b| v <= *b) {
            if let Some(c) = self.counts.get_mut(i) {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// An `Option<f64>` in 8 bytes (an `Option<f64>` takes 16): `None` is one signalling-NaN bit
/// pattern, which arithmetic never produces (it quiets NaNs; a value with that pattern is kept as
/// a plain NaN). A target holds 29 of them: at 10,000 targets 2.3 MB less.
#[derive(Clone, Copy)]
pub(super) struct Gauge(u64);

impl Gauge {
    const UNSET: u64 = 0x7ff4_0000_0000_0001;

    /// The value, if set.
    pub(super) fn get(self) -> Option<f64> {
        (self.0 != Self::UNSET).then(|| f64::from_bits(self.0))
    }
}

impl Default for Gauge {
    fn default() -> Self {
        Gauge(Self::UNSET)
    }
}

impl From<Option<f64>> for Gauge {
    fn from(v: Option<f64>) -> Self {
        v.map_or_else(Gauge::default, Gauge::from)
    }
}

impl From<f64> for Gauge {
    fn from(v: f64) -> Self {
        match v.to_bits() {
            Self::UNSET => Gauge(f64::NAN.to_bits()),
            bits => Gauge(bits),
        }
    }
}

/// One target's series; an unset [`Gauge`] or `None` is a series not exported (never set, or
/// cleared). Histograms are boxed: most levels of detail keep none, and an empty one is a pointer.
#[derive(Default)]
pub(super) struct Series {
    /// `vigil_probes_total` by outcome, in first-seen order.
    pub outcomes: Vec<(Outcome, u64)>,
    pub ttfb: Option<Box<Hist>>,
    pub ttft: Option<Box<Hist>>,
    pub duration: Option<Box<Hist>>,
    pub success: Gauge,
    pub last_success: Gauge,
    /// In [`super::PHASES`] order.
    pub phases: [Gauge; 7],
    pub tokens: Gauge,
    pub last_status: Gauge,
    pub cost: Gauge,
    /// `[metric][quantile]` in [`super::BASELINE_METRICS`] × [`super::BASELINE_QUANTILES`] order.
    pub baseline: [[Gauge; 3]; 2],
    pub circuit: Gauge,
    pub flapping: Gauge,
    pub skipped: Option<u64>,
    pub interval: Gauge,
    /// Rate-limit allowances in [`RateLimitKind::ALL`] order: what is left, the headroom ratio,
    /// the limit and its reset (Unix seconds).
    pub ratelimit_remaining: [Gauge; 2],
    pub ratelimit_ratio: [Gauge; 2],
    pub ratelimit_limit: [Gauge; 2],
    pub ratelimit_reset: [Gauge; 2],
}

/// A sample value: counters of whole probes are integers, the rest floats.
#[derive(Clone, Copy)]
enum Value {
    F(f64),
    U(u64),
}

/// Writes one metric family: its `# HELP`/`# TYPE` lines before its first series, none if it
/// has no series (as the registry did).
struct Family<'o> {
    out: &'o mut Out,
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    started: bool,
}

impl<'o> Family<'o> {
    fn new(out: &'o mut Out, name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Family { out, name, help, kind, started: false }
    }

    /// One series line: `name{suffix}{labels} value`. `extra` label names must be sorted among
    /// themselves; they are merged with the target's (model, provider, region, route) by name.
    fn line(&mut self, suffix: &str, t: &Target, extra: &[(&str, &str)], le: Option<&str>, v: Value) {
        if !self.started {
            self.started = true;
            let _ = writeln!(self.out.text, "# HELP {} {}\n# TYPE {} {}", self.name, self.help, self.name, self.kind);
        }
        let out = &mut self.out.text;
        out.push_str(self.name);
        out.push_str(suffix);
        let own =
            [("model", t.model.as_str()), ("provider", &t.provider), ("region", &t.region), ("route", t.route_label())];
        let (mut i, mut j) = (0, 0);
        let mut sep = '{';
        while i < own.len() || j < extra.len() {
            let take_own = j >= extra.len() || (i < own.len() && own[i].0 < extra[j].0);
            let (name, value) = if take_own {
                i += 1;
                own[i - 1]
            } else {
                j += 1;
                extra[j - 1]
            };
            label(out, sep, name, value);
            sep = ',';
        }
        if let Some(le) = le {
            label(out, ',', "le", le);
        }
        out.push_str("} ");
        let _ = match v {
            Value::F(f) => write!(out, "{f}"),
            Value::U(n) => write!(out, "{n}"),
        };
        out.push('\n');
        self.out.spill();
    }

    /// A histogram's `_bucket` lines (`les`: the upper bounds as text), `_sum` and `_count`.
    fn hist(&mut self, t: &Target, h: &Hist, les: &[String]) {
        let mut cumulative = 0;
        for (n, le) in h.counts.iter().zip(les) {
            cumulative += n;
            self.line("_bucket", t, &[], Some(le), Value::U(cumulative));
        }
        self.line("_bucket", t, &[], Some("+Inf"), Value::U(h.count));
        self.line("_sum", t, &[], None, Value::F(h.sum));
        self.line("_count", t, &[], None, Value::U(h.count));
    }
}

/// `sep name="value"` with the value escaped as the text format wants (`\\`, `\"`, `\n`).
fn label(out: &mut String, sep: char, name: &str, value: &str) {
    out.push(sep);
    out.push_str(name);
    out.push_str("=\"");
    if value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
    } else {
        out.push_str(value);
    }
    out.push('"');
}

/// Writes every per-target family; `bounds` are the latency histograms' upper bounds. Gauges
/// are written only for the targets `shown` says (with replicas, those this one probes now, so
/// each target's gauges come from one replica at a time); counters and histograms for all.
pub(super) fn render(
    out: &mut Out,
    targets: &BTreeMap<Target, Series>,
    bounds: &[f64],
    shown: &dyn Fn(&Target) -> bool,
) {
    let les: Vec<String> = bounds.iter().map(f64::to_string).collect();
    let each = |out: &mut Out, name, kind, help, f: &dyn Fn(&mut Family<'_>, &Target, &Series)| {
        let mut fam = Family::new(out, name, kind, help);
        for (t, s) in targets.iter().filter(|(t, _)| kind != "gauge" || shown(t)) {
            f(&mut fam, t, s);
        }
    };
    let gauge = |out: &mut Out, name, help, get: fn(&Series) -> Gauge| {
        each(out, name, "gauge", help, &|fam, t, s| {
            if let Some(v) = get(s).get() {
                fam.line("", t, &[], None, Value::F(v));
            }
        });
    };
    let hist = |out: &mut Out, name, help, get: fn(&Series) -> Option<&Hist>| {
        each(out, name, "histogram", help, &|fam, t, s| {
            if let Some(h) = get(s) {
                fam.hist(t, h, &les);
            }
        });
    };
    each(out, "vigil_probes_total", "counter", "Probes run, by outcome.", &|fam, t, s| {
        for (o, n) in &s.outcomes {
            fam.line("", t, &[("outcome", o.as_str())], None, Value::U(*n));
        }
    });
    gauge(out, "vigil_probe_success", "1 when the last probe succeeded (outcome ok), else 0.", |s| s.success);
    gauge(
        out,
        "vigil_probe_last_success_timestamp_seconds",
        "Start time of the last successful probe, in Unix seconds.",
        |s| s.last_success,
    );
    hist(out, "vigil_probe_ttfb_seconds", "Request sent to first response byte (status line).", |s| s.ttfb.as_deref());
    hist(out, "vigil_probe_ttft_seconds", "Request sent to first content token.", |s| s.ttft.as_deref());
    hist(out, "vigil_probe_duration_seconds", "Request sent to end of stream.", |s| s.duration.as_deref());
    each(
        out,
        "vigil_probe_phase_seconds",
        "gauge",
        "Phases of the last probe (dns, connect, proxy, tls, ttfb, ttft, total).",
        &|fam, t, s| {
            for (phase, v) in super::PHASES.iter().zip(&s.phases) {
                if let Some(v) = v.get() {
                    fam.line("", t, &[("phase", phase)], None, Value::F(v));
                }
            }
        },
    );
    gauge(out, "vigil_probe_tokens_per_second", "Generation speed after the first token, last probe.", |s| s.tokens);
    gauge(out, "vigil_probe_last_status", "HTTP status of the last probe (0 when none arrived).", |s| s.last_status);
    each(out, "vigil_probe_cost_usd_total", "counter", "What the probes cost, in USD.", &|fam, t, s| {
        if let Some(v) = s.cost.get() {
            fam.line("", t, &[], None, Value::F(v));
        }
    });
    each(
        out,
        "vigil_baseline_seconds",
        "gauge",
        "Rolling-window percentiles of TTFB and TTFT (q: 0.5, 0.95, 0.99).",
        &|fam, t, s| {
            for (metric, row) in super::BASELINE_METRICS.iter().zip(&s.baseline) {
                for (q, v) in super::BASELINE_QUANTILES.iter().zip(row) {
                    if let Some(v) = v.get() {
                        fam.line("", t, &[("metric", metric), ("q", q)], None, Value::F(v));
                    }
                }
            }
        },
    );
    gauge(out, "vigil_circuit_state", "Circuit breaker: 0 closed, 1 half-open, 2 open.", |s| s.circuit);
    gauge(out, "vigil_target_flapping", "1 while the target flaps (alert changes are not paged), else 0.", |s| {
        s.flapping
    });
    each(
        out,
        "vigil_probes_skipped_total",
        "counter",
        "Probes not started because the previous probe of the target was still running.",
        &|fam, t, s| {
            if let Some(n) = s.skipped {
                fam.line("", t, &[], None, Value::U(n));
            }
        },
    );
    gauge(out, "vigil_probe_interval_seconds", "Time between two probes of the target in the current plan.", |s| {
        s.interval
    });
    render_ratelimit(out, targets, shown);
}

/// The per-kind rate-limit gauges (`kind`: requests, tokens), each a target's last reading.
fn render_ratelimit(out: &mut Out, targets: &BTreeMap<Target, Series>, shown: &dyn Fn(&Target) -> bool) {
    let per_kind = |out: &mut Out, name, help, get: fn(&Series) -> &[Gauge; 2]| {
        let mut fam = Family::new(out, name, "gauge", help);
        for (t, s) in targets.iter().filter(|(t, _)| shown(t)) {
            for (kind, v) in RateLimitKind::ALL.iter().zip(get(s)) {
                if let Some(v) = v.get() {
                    fam.line("", t, &[("kind", kind.as_str())], None, Value::F(v));
                }
            }
        }
    };
    per_kind(
        out,
        "vigil_ratelimit_remaining",
        "What the rate-limit headers said is left of the allowance (kind: requests, tokens), last reading.",
        |s| &s.ratelimit_remaining,
    );
    per_kind(
        out,
        "vigil_ratelimit_headroom_ratio",
        "Remaining / limit of the rate-limit allowance (0..1), last reading; low under ratelimit.low_fraction.",
        |s| &s.ratelimit_ratio,
    );
    per_kind(out, "vigil_ratelimit_limit", "The rate-limit allowance per window, last reading.", |s| {
        &s.ratelimit_limit
    });
    per_kind(
        out,
        "vigil_ratelimit_reset_timestamp_seconds",
        "When the rate-limit allowance is whole again, Unix seconds, last reading.",
        |s| &s.ratelimit_reset,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_merge_by_name_and_values_are_escaped() {
        let t = Target::new("p\"q".into(), "a\\b".into(), Some("x\ny".into()), "eu".into());
        let mut out = Out::text(0);
        let mut fam = Family::new(&mut out, "m", "gauge", "Help.");
        fam.line("", &t, &[("metric", "ttft"), ("q", "0.95")], None, Value::F(0.25));
        fam.line("_bucket", &t, &[], Some("+Inf"), Value::U(3));
        assert_eq!(
            out.into_text(),
            "# HELP m Help.\n# TYPE m gauge\n\
             m{metric=\"ttft\",model=\"a\\\\b\",provider=\"p\\\"q\",q=\"0.95\",region=\"eu\",route=\"x\\ny\"} 0.25\n\
             m_bucket{model=\"a\\\\b\",provider=\"p\\\"q\",region=\"eu\",route=\"x\\ny\",le=\"+Inf\"} 3\n"
        );
    }

    /// The same values through the `prometheus` crate's registry and encoder give the same
    /// series lines and types (the crate sorts series differently; Prometheus does not care).
    #[test]
    fn the_text_is_what_the_prometheus_crate_wrote() {
        use prometheus::{Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};
        let bounds = [0.2, 0.5, 1.0];
        let targets = [
            Target::new("openrouter".into(), "meta/llama".into(), Some("Deep\"Infra\"".into()), "eu".into()),
            Target::new("groq".into(), "".into(), None, "eu\nwest".into()),
        ];
        let mut map = BTreeMap::new();
        let reg = Registry::new();
        let names = ["model", "provider", "region", "route"];
        let probes = IntCounterVec::new(
            Opts::new("vigil_probes_total", "x"),
            &["provider", "model", "route", "region", "outcome"],
        )
        .expect("vec");
        let baseline = GaugeVec::new(
            Opts::new("vigil_baseline_seconds", "x"),
            &["provider", "model", "route", "region", "metric", "q"],
        )
        .expect("vec");
        let ttft =
            HistogramVec::new(HistogramOpts::new("vigil_probe_ttft_seconds", "x").buckets(bounds.to_vec()), &names)
                .expect("vec");
        let success = GaugeVec::new(Opts::new("vigil_probe_success", "x"), &names).expect("vec");
        for c in [
            Box::new(probes.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(baseline.clone()),
            Box::new(ttft.clone()),
            Box::new(success.clone()),
        ] {
            reg.register(c).expect("register");
        }
        for (i, t) in targets.iter().enumerate() {
            let mut s = Series::default();
            let l = [t.provider.as_str(), &t.model, t.route_label(), &t.region];
            let by_name = [t.model.as_str(), &t.provider, &t.region, t.route_label()];
            s.outcomes = vec![(Outcome::Ok, 7 + i as u64), (Outcome::Timeout, 1)];
            probes.with_label_values(&[l[0], l[1], l[2], l[3], "ok"]).inc_by(7 + i as u64);
            probes.with_label_values(&[l[0], l[1], l[2], l[3], "timeout"]).inc();
            s.baseline[1][1] = Gauge::from(0.3125 + i as f64);
            baseline.with_label_values(&[l[0], l[1], l[2], l[3], "ttft", "0.95"]).set(0.3125 + i as f64);
            s.success = Gauge::from(1.0);
            success.with_label_values(&by_name).set(1.0);
            let mut h = Hist::new(bounds.len());
            let reference = ttft.with_label_values(&by_name);
            for v in [0.125, 0.5, 0.75, 3.0] {
                h.observe(&bounds, v);
                reference.observe(v);
            }
            s.ttft = Some(Box::new(h));
            map.insert(t.clone(), s);
        }
        let mut ours = Out::text(0);
        render(&mut ours, &map, &bounds, &|_| true);
        let ours = ours.into_text();
        let mut buf = Vec::new();
        TextEncoder::new().encode(&reg.gather(), &mut buf).expect("encode");
        let theirs = String::from_utf8(buf).expect("utf-8");
        let lines = |text: &str| {
            let mut v: Vec<String> = text.lines().filter(|l| !l.starts_with("# HELP")).map(str::to_string).collect();
            v.sort();
            v
        };
        assert_eq!(lines(&ours), lines(&theirs), "ours:\n{ours}\ntheirs:\n{theirs}");
    }

    #[test]
    fn a_gauge_keeps_every_value_apart_from_unset_in_half_an_options_room() {
        assert_eq!(std::mem::size_of::<Gauge>(), 8);
        assert_eq!(Gauge::default().get(), None);
        assert_eq!(Gauge::from(None).get(), None);
        for v in [0.0, -0.0, 1.5, f64::INFINITY, f64::MIN_POSITIVE, 1.7e9] {
            assert_eq!(Gauge::from(v).get().map(f64::to_bits), Some(v.to_bits()), "{v}");
        }
        // A NaN a computation made is a value (Prometheus prints it), not an unset gauge.
        let nan = f64::INFINITY - f64::INFINITY;
        assert!(Gauge::from(nan).get().is_some_and(f64::is_nan));
        assert!(Gauge::from(Some(f64::NAN)).get().is_some_and(f64::is_nan));
        assert!(Gauge::from(f64::from_bits(Gauge::UNSET)).get().is_some_and(f64::is_nan), "never read as unset");
    }

    #[test]
    fn histograms_are_cumulative_with_the_upper_bound_inclusive() {
        let bounds = [0.2, 0.5, 1.0];
        let mut h = Hist::new(bounds.len());
        for v in [0.125, 0.2, 0.5, 2.0] {
            h.observe(&bounds, v);
        }
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let mut out = Out::text(0);
        let les: Vec<String> = bounds.iter().map(f64::to_string).collect();
        Family::new(&mut out, "h", "histogram", "H.").hist(&t, &h, &les);
        let out = out.into_text();
        let values: Vec<f64> =
            out.lines().skip(2).filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok())).collect();
        assert_eq!(values.len(), 6, "{out}");
        assert_eq!(values[..4], [2.0, 3.0, 3.0, 4.0], "{out}");
        assert!((values[4] - 2.825).abs() < 1e-9 && values[5] == 4.0, "{out}");
        assert!(out.contains("le=\"1\"} 3\n"), "bounds print as Rust prints them: {out}");
    }
}
