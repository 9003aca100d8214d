//! The built-in providers: a `[[provider]]` with one of these names inherits what it omits, and
//! an empty file probes every one whose key is set. One table, so the defaults, `check-config`
//! and the built-in price list never disagree.

use crate::config::kind::ProviderKind;
use url::Url;

/// Built-in provider defaults: a `[[provider]]` with one of these names inherits what it omits.
pub(super) struct Builtin {
    /// The `[[provider]]` name that picks it.
    pub(super) name: &'static str,
    /// Protocol family.
    pub(super) kind: ProviderKind,
    /// API base.
    pub(super) base_url: &'static str,
    /// Variable holding the key.
    pub(super) key_env: &'static str,
    /// Model probed when the provider lists none.
    pub(super) model: &'static str,
    /// The provider's official status page when it serves the Statuspage v2 JSON API; "" = none.
    pub(super) status_page: &'static str,
}

/// Every built-in provider, in the order an empty file probes them.
pub(super) const BUILTINS: [Builtin; 7] = [
    Builtin {
        name: "openrouter",
        kind: ProviderKind::Openai,
        base_url: "https://openrouter.ai/api/v1",
        key_env: "OPENROUTER_API_KEY",
        model: "meta-llama/llama-3.1-8b-instruct",
        status_page: "",
    },
    Builtin {
        name: "openai",
        kind: ProviderKind::Openai,
        base_url: "https://api.openai.com/v1",
        key_env: "OPENAI_API_KEY",
        model: "gpt-4o-mini",
        status_page: "https://status.openai.com",
    },
    Builtin {
        name: "anthropic",
        kind: ProviderKind::Anthropic,
        base_url: "https://api.anthropic.com/v1",
        key_env: "ANTHROPIC_API_KEY",
        model: "claude-3-5-haiku-latest",
        status_page: "https://status.claude.com",
    },
    Builtin {
        name: "groq",
        kind: ProviderKind::Openai,
        base_url: "https://api.groq.com/openai/v1",
        key_env: "GROQ_API_KEY",
        model: "llama-3.1-8b-instant",
        status_page: "https://groqstatus.com",
    },
    Builtin {
        name: "together",
        kind: ProviderKind::Openai,
        base_url: "https://api.together.xyz/v1",
        key_env: "TOGETHER_API_KEY",
        model: "meta-llama/Llama-3.2-3B-Instruct-Turbo",
        status_page: "https://status.together.ai",
    },
    Builtin {
        name: "deepinfra",
        kind: ProviderKind::Openai,
        base_url: "https://api.deepinfra.com/v1/openai",
        key_env: "DEEPINFRA_API_KEY",
        model: "meta-llama/Meta-Llama-3.1-8B-Instruct",
        status_page: "",
    },
    Builtin {
        name: "gemini",
        kind: ProviderKind::Gemini,
        base_url: "https://generativelanguage.googleapis.com/v1beta",
        key_env: "GEMINI_API_KEY",
        model: "gemini-2.0-flash-lite",
        status_page: "",
    },
];

/// Each built-in provider's name and the variable its key is read from (`--help`, the man pages).
pub fn builtin_key_vars() -> impl Iterator<Item = (&'static str, &'static str)> {
    BUILTINS.iter().map(|b| (b.name, b.key_env))
}

/// Every built-in provider's name, API host and default model (for the built-in price table).
pub fn builtin_defaults() -> impl Iterator<Item = (&'static str, String, &'static str)> {
    BUILTINS.iter().map(|b| {
        let host = Url::parse(b.base_url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
        (b.name, host, b.model)
    })
}
