//! The exporter toolkit's web configuration on the real binary: `/metrics` scraped over HTTPS
//! with a certificate made here, basic auth accepted and refused (the API's bearer token still
//! passing), client certificates required, and a bad file refused at start (exit 2) naming the
//! key and the file.

use crate::support::cli::{output, vigil_in};
use crate::support::process::{free_port, Daemon};
use std::path::Path;
use std::time::Duration;

/// A test CA, and certificates it signs.
struct Pki {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "vigil web test CA");
        Pki { ca: rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().expect("key")).expect("CA") }
    }

    /// (certificate PEM, key PEM) for `names`, signed by the CA.
    fn issue(&self, names: &[&str], purpose: rcgen::ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        params.extended_key_usages = vec![purpose];
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.ca).expect("signed");
        (cert.pem(), key.serialize_pem())
    }
}

/// A config with one plain-HTTP target (nothing answers it: probes fail, the daemon runs).
fn config(dir: &Path, port: u16, extra_http: &str) -> std::path::PathBuf {
    let path = dir.join("vigil.toml");
    let text = format!(
        "[storage]\nurl = \"sqlite://{d}/vigil.db\"\ndata_dir = \"{d}/data\"\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n{extra_http}\n\
         [[provider]]\nname = \"status\"\nkind = \"http\"\nbase_url = \"http://127.0.0.1:9/\"\n",
        d = dir.display()
    );
    std::fs::write(&path, text).expect("config");
    path
}

fn client(ca_pem: &str) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA"))
        .timeout(Duration::from_secs(10))
}

/// Polls `url` with `client` until it answers (30 s at most): the status it answers.
async fn first_answer(client: &reqwest::Client, url: &str, daemon: &Daemon) -> u16 {
    let answered = crate::support::poll_until(Duration::from_secs(30), || async {
        client.get(url).send().await.ok().map(|r| r.status().as_u16())
    });
    answered.await.unwrap_or_else(|| panic!("{url} never answered; log:\n{}", daemon.log()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_over_https_with_basic_auth_and_the_api_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new();
    let (cert, key) = pki.issue(&["127.0.0.1", "localhost"], rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    std::fs::write(dir.path().join("server.pem"), &cert).expect("cert");
    std::fs::write(dir.path().join("server.key"), &key).expect("key");
    let hash = bcrypt::hash("scrape-pass", 4).expect("hash");
    // Relative paths: relative to the web config file, as in the exporter toolkit.
    std::fs::write(
        dir.path().join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS12\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .expect("web config");
    let port = free_port();
    let web = dir.path().join("web.yml");
    let file = config(dir.path(), port, &format!("web_config_file = \"{}\"", web.display()));
    let daemon = Daemon::spawn(&file, port, &dir.path().join("vigil.log"), &[("VIGIL_API_TOKEN", "token-for-the-api")]);
    let https = client(&pki.ca.pem()).build().expect("client");
    let url = format!("https://127.0.0.1:{port}/metrics");

    assert_eq!(first_answer(&https, &url, &daemon).await, 401, "no credentials");
    let wrong = https.get(&url).basic_auth("prometheus", Some("guess")).send().await.expect("answer");
    assert_eq!(wrong.status().as_u16(), 401);
    assert_eq!(wrong.headers().get("www-authenticate").and_then(|v| v.to_str().ok()), Some("Basic"));
    let nobody = https.get(&url).basic_auth("nobody", Some("scrape-pass")).send().await.expect("answer");
    assert_eq!(nobody.status().as_u16(), 401, "an unknown user");

    for _ in 0..2 {
        // Twice: the second answer comes from the remembered login.
        let ok = https.get(&url).basic_auth("prometheus", Some("scrape-pass")).send().await.expect("answer");
        assert_eq!(ok.status().as_u16(), 200);
        assert_eq!(ok.headers().get("x-frame-options").and_then(|v| v.to_str().ok()), Some("deny"));
        let body = ok.text().await.expect("body");
        assert!(body.contains("# TYPE"), "an exposition:\n{body}");
    }
    // The API's own token passes the basic-auth check (one Authorization header cannot hold both).
    let api = https
        .get(format!("https://127.0.0.1:{port}/v1/targets"))
        .bearer_auth("token-for-the-api")
        .send()
        .await
        .expect("answer");
    assert_eq!(api.status().as_u16(), 200);
    let bad_token =
        https.get(format!("https://127.0.0.1:{port}/v1/targets")).bearer_auth("nope").send().await.expect("answer");
    assert_eq!(bad_token.status().as_u16(), 401);

    // Plain HTTP gets no answer from a TLS listener.
    let plain = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client");
    let refused = plain.get(format!("http://127.0.0.1:{port}/metrics")).send().await;
    assert!(refused.is_err() || refused.is_ok_and(|r| r.status().as_u16() == 400), "plain HTTP is not served");
    // A client that does not trust the certificate fails the handshake.
    let stranger = client(&Pki::new().ca.pem()).build().expect("client");
    assert!(stranger.get(&url).send().await.is_err(), "an untrusted certificate");
    let (_, ok, log) = daemon.stop().await;
    assert!(ok, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_when_configured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new();
    let (cert, key) = pki.issue(&["127.0.0.1"], rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    let (client_cert, client_key) = pki.issue(&["prometheus"], rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    std::fs::write(dir.path().join("ca.pem"), pki.ca.pem()).expect("ca");
    // The inline forms (`cert`, `key`) and a CA file.
    let indent = |pem: &str| pem.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert: |\n{}  key: |\n{}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
            indent(&cert),
            indent(&key)
        ),
    )
    .expect("web config");
    let port = free_port();
    let file = config(dir.path(), port, "");
    // The flag names the file this time.
    let log = std::fs::File::create(dir.path().join("vigil.log")).expect("log");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_vigil"));
    cmd.args(["run", "--config"])
        .arg(&file)
        .arg("--web.config.file")
        .arg(&web)
        .env_remove("DATABASE_URL")
        .stderr(log)
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("vigil starts");
    let url = format!("https://127.0.0.1:{port}/healthz");
    let identity = reqwest::Identity::from_pem(format!("{client_cert}{client_key}").as_bytes()).expect("identity");
    let with_cert = client(&pki.ca.pem()).identity(identity).build().expect("client");
    let answered = crate::support::poll_until(Duration::from_secs(30), || async {
        with_cert.get(&url).send().await.ok().map(|r| r.status().as_u16())
    })
    .await;
    let logged = || std::fs::read_to_string(dir.path().join("vigil.log")).unwrap_or_default();
    assert_eq!(answered, Some(200), "log:\n{}", logged());
    let without = client(&pki.ca.pem()).build().expect("client");
    assert!(without.get(&url).send().await.is_err(), "no client certificate, no answer");
    let _ = child.start_kill();
    let _ = child.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_web_config_is_a_config_error_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let file = config(dir.path(), port, "");
    let cases = [
        ("bad-hash.yml", "basic_auth_users:\n  prometheus: plaintext-password\n", "basic_auth_users.prometheus"),
        ("no-key.yml", "tls_server_config:\n  cert_file: server.pem\n", "tls_server_config.key_file"),
        ("missing.yml", "tls_server_config:\n  cert_file: gone.pem\n  key_file: gone.key\n", "gone.pem"),
        ("typo.yml", "basic_auth_user:\n  a: b\n", "basic_auth_user"),
        ("not-yaml.yml", "tls_server_config: [\n", "bad-yaml"),
    ];
    for (name, text, says) in cases {
        let web = dir.path().join(name);
        std::fs::write(&web, text).expect("write");
        for command in ["check-config", "run"] {
            let mut cmd = vigil_in(dir.path());
            cmd.args([command, "--config"]).arg(&file).arg("--web.config.file").arg(&web);
            let out = output(cmd).await;
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {name}: {stderr}");
            assert!(stderr.contains("http.web_config_file: ") && stderr.contains(name), "{command} {name}: {stderr}");
            if says != "bad-yaml" {
                assert!(stderr.contains(says), "{command} {name}: {stderr}");
            }
        }
    }
    // The config key and its variable say the same as the flag.
    let web = dir.path().join("bad-hash.yml");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config", "--config"]).arg(&file).env("VIGIL_HTTP_WEB_CONFIG_FILE", &web);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("basic_auth_users.prometheus"));
}
