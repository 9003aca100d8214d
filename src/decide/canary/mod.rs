//! The silent model-change canary's pure parts: the fixed questions and their scoring
//! ([`prompt`]) and the change statistic ([`detect`]).

pub(crate) mod detect;
pub mod prompt;
