//! Ed25519 signatures over the exact bytes of a router export, so a router can check a document
//! came from its own vigil and was not altered; `generated_at`/`expires_at` inside the signed
//! bytes make a replayed old document detectable.
//!
//! The key is a 32-byte Ed25519 seed, base64 (standard alphabet, padding optional), read from the
//! variable `http.signing_key_env` names. Signatures and public keys travel as standard base64.

use crate::config::signing_key::decode_seed;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use secrecy::{ExposeSecret, SecretString};

/// Header carrying the detached signature of the response body.
pub const SIGNATURE_HEADER: &str = "x-vigil-signature";
/// Header carrying the public key that verifies it (so a router can pin it).
pub const KEY_HEADER: &str = "x-vigil-signing-key";

/// Signs export bodies.
#[derive(Clone)]
pub struct ExportSigner {
    key: SigningKey,
}

impl std::fmt::Debug for ExportSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportSigner").field("public_key", &self.public_key()).finish()
    }
}

impl ExportSigner {
    /// From a validated seed (`None` when it is not base64 of 32 bytes).
    pub fn from_seed(seed: &SecretString) -> Option<Self> {
        decode_seed(seed.expose_secret()).map(|b| ExportSigner { key: SigningKey::from_bytes(&b) })
    }

    /// Detached signature of `bytes`, base64.
    pub fn sign(&self, bytes: &[u8]) -> String {
        STANDARD.encode(self.key.sign(bytes).to_bytes())
    }

    /// The verifying (public) key, base64 of its 32 bytes.
    pub fn public_key(&self) -> String {
        STANDARD.encode(self.key.verifying_key().to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::signing_key::key_from_env;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};
    use std::collections::BTreeMap;

    const SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn env(v: &str) -> BTreeMap<String, String> {
        [("VIGIL_SIGNING_KEY".to_string(), v.to_string())].into()
    }

    #[test]
    fn a_signature_verifies_only_for_the_exact_bytes() {
        let seed = key_from_env("VIGIL_SIGNING_KEY", &env(SEED)).expect("valid").expect("on");
        let s = ExportSigner::from_seed(&seed).expect("seed");
        let body = br#"{"generated_at":"2026-11-30T12:00:00Z"}"#;
        let sig = Signature::from_slice(&STANDARD.decode(s.sign(body)).expect("b64")).expect("64 bytes");
        let public: [u8; 32] = STANDARD.decode(s.public_key()).expect("b64").try_into().expect("32 bytes");
        let vk = VerifyingKey::from_bytes(&public).expect("key");
        assert!(vk.verify(body, &sig).is_ok());
        assert!(vk.verify(br#"{"generated_at":"2026-11-30T12:00:01Z"}"#, &sig).is_err());
        assert!(!format!("{s:?}").contains(SEED), "the seed never shows in Debug");
    }

    #[test]
    fn bad_or_missing_keys_name_the_setting() {
        assert!(key_from_env("", &env(SEED)).expect("off").is_none());
        let e = key_from_env("NOPE", &env(SEED)).expect_err("unset").to_string();
        assert_eq!(e, "http.signing_key_env: environment variable NOPE is not set");
        let e = key_from_env("VIGIL_SIGNING_KEY", &env("c2hvcnQ=")).expect_err("short").to_string();
        assert!(e.starts_with("http.signing_key_env: VIGIL_SIGNING_KEY must hold an Ed25519 seed"), "{e}");
        assert!(!e.contains("c2hvcnQ"), "the value is never echoed");
    }
}
