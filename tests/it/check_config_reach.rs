//! `vigil check-config` shows how probes reach their providers — the proxy, the CA files, the
//! client certificate, secret headers and every model's price with its source — and never a
//! secret: not the proxy password, the keys, a secret header's value nor the client key.

use std::process::Command;

#[test]
fn check_config_shows_proxy_ca_client_certificate_headers_and_prices_with_secrets_redacted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = rcgen::generate_simple_self_signed(vec!["gateway.internal".to_string()]).expect("ca");
    let client = rcgen::generate_simple_self_signed(vec!["vigil-probe".to_string()]).expect("client");
    let (ca_file, cert_file, key_file) =
        (dir.path().join("corp-ca.pem"), dir.path().join("client.pem"), dir.path().join("client.key"));
    std::fs::write(&ca_file, ca.cert.pem()).expect("ca file");
    std::fs::write(&cert_file, client.cert.pem()).expect("cert file");
    let client_key = client.signing_key.serialize_pem();
    std::fs::write(&key_file, &client_key).expect("key file");
    let p = |f: &std::path::Path| f.display().to_string().replace('\\', "\\\\");
    let text = format!(
        r#"
[probe]
ca_file = "{ca}"

[[provider]]
name = "openai"

[[provider]]
name = "gateway"
kind = "openai"
base_url = "https://gateway.internal/v1"
api_key_env = "VIGIL_CC_GATEWAY_KEY"
models = ["llama-70b", "llama-8b"]
headers_env = {{ "x-gateway-token" = "VIGIL_CC_GATEWAY_TOKEN" }}
prices."llama-70b" = {{ input_per_mtok = 0.7, output_per_mtok = 0.9 }}
ca_file = "{ca}"
client_cert_file = "{cert}"
client_key_file = "{key}"
"#,
        ca = p(&ca_file),
        cert = p(&cert_file),
        key = p(&key_file),
    );
    let path = dir.path().join("vigil.toml");
    std::fs::write(&path, &text).expect("config file");
    let secrets = [
        ("OPENAI_API_KEY", "sk-test-cc-openai"),
        ("VIGIL_CC_GATEWAY_KEY", "sk-test-cc-gateway"),
        ("VIGIL_CC_GATEWAY_TOKEN", "gw-token-cc-0042"),
        ("HTTPS_PROXY", "http://probe-user:proxy-pass-cc@proxy.corp:3128"),
        ("NO_PROXY", "localhost,.internal"),
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .current_dir(dir.path())
        .args(["check-config", "--config"])
        .arg(&path)
        .env_remove("DATABASE_URL")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("no_proxy")
        .envs(secrets)
        .output()
        .expect("vigil runs");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");

    // The proxy (password redacted) and which hosts bypass it.
    assert!(shown.contains("probes go through proxy https=http://probe-user:redacted@proxy.corp:3128/"), "{shown}");
    assert!(shown.contains("no_proxy: localhost, .internal"), "{shown}");
    // The CA files and the client certificate, by path.
    assert!(shown.contains(&format!("ca_file = \"{}\"", p(&ca_file))), "{shown}");
    assert!(shown.contains("client.pem") && shown.contains("client.key"), "{shown}");
    // Secret headers by their variable.
    assert!(shown.contains("VIGIL_CC_GATEWAY_TOKEN"), "{shown}");
    // Every model's price and where it came from; a model without one says nothing.
    assert!(shown.contains("# price openai/gpt-4o-mini: $0.15 in, $0.6 out per 1M tokens (built-in, "), "{shown}");
    assert!(shown.contains("# price gateway/llama-70b: $0.7 in, $0.9 out per 1M tokens (config (prices))"), "{shown}");
    assert!(!shown.contains("# price gateway/llama-8b"), "no price is guessed: {shown}");

    for (var, secret) in secrets.iter().take(3) {
        assert!(!shown.contains(secret) && !stderr.contains(secret), "{var}'s value leaked:\n{shown}\n{stderr}");
    }
    assert!(!shown.contains("proxy-pass-cc") && !stderr.contains("proxy-pass-cc"), "proxy password leaked");
    assert!(!shown.contains("PRIVATE KEY") && !shown.contains(client_key.trim()), "client key leaked");

    // What it prints reads back as the same configuration.
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &shown).expect("write");
    let back = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .current_dir(dir.path())
        .args(["check-config", "--config"])
        .arg(&again)
        .env_remove("DATABASE_URL")
        .envs(secrets)
        .output()
        .expect("vigil runs");
    assert!(back.status.success(), "{}", String::from_utf8_lossy(&back.stderr));
    assert_eq!(String::from_utf8_lossy(&back.stdout), shown, "check-config output reads back the same");
}
