//! Which price a probe's tokens are charged at: a target's configured price, else the built-in
//! dated table of every built-in provider's default model, else (OpenRouter) the published
//! per-endpoint price. `vigil report`, the samples' `cost_usd` and the daily budget all ask here.

use crate::config::{Price, ProviderConfig};
use crate::decide::pricing::EndpointPrice;
use serde::Serialize;

/// One row of the built-in table: what a provider's API host charges for a model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BuiltinPrice {
    /// API host the price applies to (`api.openai.com`).
    pub host: &'static str,
    /// Model id as sent in requests.
    pub model: &'static str,
    /// USD per million input tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
    /// When the price was read from `source` (UTC date).
    pub as_of: &'static str,
    /// The public page it was read from.
    pub source: &'static str,
}

impl BuiltinPrice {
    /// The row as a [`Price`].
    pub fn price(&self) -> Price {
        Price { input_per_mtok: self.input_per_mtok, output_per_mtok: self.output_per_mtok }
    }
}

/// The built-in table. Prices change: each row says when and where it was read, docs/METRICS.md
/// lists them, and a `price`/`prices` entry in the config replaces any of them.
pub const BUILTIN_PRICES: &[BuiltinPrice] = &[
    BuiltinPrice {
        host: "api.openai.com",
        model: "gpt-4o-mini",
        input_per_mtok: 0.15,
        output_per_mtok: 0.60,
        as_of: "2026-12-01",
        source: "https://openai.com/api/pricing/",
    },
    // Embeddings (`endpoint = "embeddings"`) are charged for input only.
    BuiltinPrice {
        host: "api.openai.com",
        model: "text-embedding-3-small",
        input_per_mtok: 0.02,
        output_per_mtok: 0.0,
        as_of: "2026-12-03",
        source: "https://openai.com/api/pricing/",
    },
    BuiltinPrice {
        host: "api.openai.com",
        model: "text-embedding-3-large",
        input_per_mtok: 0.13,
        output_per_mtok: 0.0,
        as_of: "2026-12-03",
        source: "https://openai.com/api/pricing/",
    },
    BuiltinPrice {
        host: "api.anthropic.com",
        model: "claude-3-5-haiku-latest",
        input_per_mtok: 0.80,
        output_per_mtok: 4.00,
        as_of: "2026-12-01",
        source: "https://www.anthropic.com/pricing#api",
    },
    BuiltinPrice {
        host: "api.anthropic.com",
        model: "claude-3-5-haiku-20241022",
        input_per_mtok: 0.80,
        output_per_mtok: 4.00,
        as_of: "2026-12-01",
        source: "https://www.anthropic.com/pricing#api",
    },
    BuiltinPrice {
        host: "api.groq.com",
        model: "llama-3.1-8b-instant",
        input_per_mtok: 0.05,
        output_per_mtok: 0.08,
        as_of: "2026-12-01",
        source: "https://groq.com/pricing",
    },
    BuiltinPrice {
        host: "api.together.xyz",
        model: "meta-llama/Llama-3.2-3B-Instruct-Turbo",
        input_per_mtok: 0.06,
        output_per_mtok: 0.06,
        as_of: "2026-12-01",
        source: "https://www.together.ai/pricing",
    },
    BuiltinPrice {
        host: "api.deepinfra.com",
        model: "meta-llama/Meta-Llama-3.1-8B-Instruct",
        input_per_mtok: 0.03,
        output_per_mtok: 0.05,
        as_of: "2026-12-01",
        source: "https://deepinfra.com/meta-llama/Meta-Llama-3.1-8B-Instruct",
    },
    BuiltinPrice {
        host: "generativelanguage.googleapis.com",
        model: "gemini-2.0-flash-lite",
        input_per_mtok: 0.075,
        output_per_mtok: 0.30,
        as_of: "2026-12-01",
        source: "https://ai.google.dev/gemini-api/docs/pricing",
    },
    BuiltinPrice {
        host: "openrouter.ai",
        model: "meta-llama/llama-3.1-8b-instruct",
        input_per_mtok: 0.02,
        output_per_mtok: 0.03,
        as_of: "2026-12-01",
        source: "https://openrouter.ai/meta-llama/llama-3.1-8b-instruct (cheapest endpoint; published per-endpoint prices win when fetched)",
    },
    // Bedrock and Vertex AI price per region; these rows are the on-demand list prices of the
    // default regions (us-east-1, us-central1) as the public pricing pages give them (Bedrock
    // quotes per 1,000 tokens: × 1000 here). Read 2026-12-03 from the pages' figures as quoted
    // by stored copies, not from a live account's bill: check before trusting a budget to them.
    BuiltinPrice {
        host: "bedrock-runtime.us-east-1.amazonaws.com",
        model: "amazon.nova-micro-v1:0",
        input_per_mtok: 0.035,
        output_per_mtok: 0.14,
        as_of: "2026-12-03",
        source: "https://aws.amazon.com/bedrock/pricing/",
    },
    BuiltinPrice {
        host: "bedrock-runtime.us-east-1.amazonaws.com",
        model: "amazon.nova-lite-v1:0",
        input_per_mtok: 0.06,
        output_per_mtok: 0.24,
        as_of: "2026-12-03",
        source: "https://aws.amazon.com/bedrock/pricing/",
    },
    BuiltinPrice {
        host: "us-central1-aiplatform.googleapis.com",
        model: "gemini-2.0-flash-001",
        input_per_mtok: 0.15,
        output_per_mtok: 0.60,
        as_of: "2026-12-03",
        source: "https://cloud.google.com/vertex-ai/generative-ai/pricing",
    },
    BuiltinPrice {
        host: "us-central1-aiplatform.googleapis.com",
        model: "gemini-2.0-flash-lite-001",
        input_per_mtok: 0.075,
        output_per_mtok: 0.30,
        as_of: "2026-12-03",
        source: "https://cloud.google.com/vertex-ai/generative-ai/pricing",
    },
];

/// Where a price came from, for `check-config` and the report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceSource {
    /// `prices."model"` in the provider's config.
    ConfiguredModel,
    /// `price` in the provider's config.
    ConfiguredProvider,
    /// OpenRouter's published per-endpoint price.
    Published,
    /// The built-in table row.
    Builtin(&'static BuiltinPrice),
}

impl PriceSource {
    /// The router export's word for it (a chain entry's `price.source`): `config`, `published`
    /// or `built-in`.
    pub fn kind(&self) -> &'static str {
        match self {
            PriceSource::ConfiguredModel | PriceSource::ConfiguredProvider => "config",
            PriceSource::Published => "published",
            PriceSource::Builtin(_) => "built-in",
        }
    }

    /// Short label (`config`, `built-in 2026-12-01`, `published`).
    pub fn label(&self) -> String {
        match self {
            PriceSource::ConfiguredModel => "config (prices)".into(),
            PriceSource::ConfiguredProvider => "config (price)".into(),
            PriceSource::Published => "published (OpenRouter endpoints)".into(),
            PriceSource::Builtin(row) => format!("built-in, {} from {}", row.as_of, row.source),
        }
    }
}

/// The built-in row for a provider's host and a model, if any.
pub fn builtin(p: &ProviderConfig, model: &str) -> Option<&'static BuiltinPrice> {
    let host = p.base_url.host_str()?;
    BUILTIN_PRICES.iter().find(|row| row.host == host && row.model == model)
}

/// The price of `model` (pinned to `route`) at provider `p`: configured per model, configured
/// per provider, published (when `published` holds the model's endpoints), then built in.
pub fn price_of(
    p: &ProviderConfig,
    model: &str,
    route: Option<&str>,
    published: Option<&[EndpointPrice]>,
) -> Option<(Price, PriceSource)> {
    if let Some(price) = p.prices.get(model) {
        return Some((*price, PriceSource::ConfiguredModel));
    }
    if let Some(price) = p.price {
        return Some((price, PriceSource::ConfiguredProvider));
    }
    if let Some(price) = published.and_then(|e| crate::decide::pricing::price_for(route, e)) {
        return Some((price, PriceSource::Published));
    }
    builtin(p, model).map(|row| (row.price(), PriceSource::Builtin(row)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderKind;

    fn provider(base: &str) -> ProviderConfig {
        ProviderConfig::new("p", ProviderKind::Openai, base.parse().expect("url"))
    }

    #[test]
    fn every_builtin_default_model_has_a_dated_price() {
        for (name, host, model) in crate::config::builtin_defaults() {
            let row = BUILTIN_PRICES.iter().find(|r| r.host == host && r.model == model);
            let row = row.unwrap_or_else(|| panic!("{name}: no built-in price for {model} at {host}"));
            assert!(row.input_per_mtok > 0.0 && row.output_per_mtok > 0.0, "{name}");
            assert!(chrono::NaiveDate::parse_from_str(row.as_of, "%Y-%m-%d").is_ok(), "{name}: date");
            assert!(row.source.starts_with("https://"), "{name}: source");
        }
    }

    #[test]
    fn configured_prices_win_over_published_over_builtin() {
        let mut p = provider("https://api.openai.com/v1");
        let (price, source) = price_of(&p, "gpt-4o-mini", None, None).expect("built in");
        assert_eq!((price.input_per_mtok, price.output_per_mtok), (0.15, 0.60));
        assert!(matches!(source, PriceSource::Builtin(_)));
        // 1000 input and 10 output tokens at $0.15/$0.60 per million.
        assert!((price.cost(1000, 10) - 0.000156).abs() < 1e-12);
        assert!(price_of(&p, "some-other-model", None, None).is_none(), "no guess for unknown models");

        let published =
            [EndpointPrice { provider_name: "Host".into(), tag: None, input_per_mtok: 1.0, output_per_mtok: 2.0 }];
        let (price, source) = price_of(&p, "gpt-4o-mini", None, Some(&published)).expect("published");
        assert_eq!((price.input_per_mtok, source), (1.0, PriceSource::Published));

        p.price = Some(Price { input_per_mtok: 3.0, output_per_mtok: 4.0 });
        assert_eq!(
            price_of(&p, "gpt-4o-mini", None, Some(&published)).map(|x| x.1),
            Some(PriceSource::ConfiguredProvider)
        );
        p.prices.insert("gpt-4o-mini".into(), Price { input_per_mtok: 5.0, output_per_mtok: 6.0 });
        let (price, source) = price_of(&p, "gpt-4o-mini", None, Some(&published)).expect("per model");
        assert_eq!((price.input_per_mtok, source), (5.0, PriceSource::ConfiguredModel));
    }

    #[test]
    fn the_host_decides_not_the_provider_name() {
        let p = provider("http://127.0.0.1:8080/v1");
        assert!(
            price_of(&p, "gpt-4o-mini", None, None).is_none(),
            "a self-hosted server is not billed at OpenAI prices"
        );
    }
}
