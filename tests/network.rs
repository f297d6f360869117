//! The network around a model call: custom certificate authorities (`SSL_CERT_FILE`,
//! `SSL_CERT_DIR`, `NODE_EXTRA_CA_CERTS`) and proxies (`HTTPS_PROXY`, `HTTP_PROXY`,
//! `NO_PROXY`), against loopback servers only. The TLS server is `support/tls_forward.py`
//! in front of the model server, with a CA and certificate made by `openssl` at test time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::*;
use crate::support::proxy::ConnectProxy;
use crate::support::*;

/// `models.json` with the `intercept` provider at `base` (an OpenAI-compatible server).
fn models_at(dir: &TempDir, base: &str) {
    let models = json!({"providers": {"intercept": {
        "baseUrl": base, "api": "openai-completions", "apiKey": "test-key",
        "models": [{"id": "cold/test-model", "input": ["text"]}]}}});
    dir.write("models.json", &models.to_string());
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 it signed (`server.pem`,
/// `server.key`), in `dir`. `None` when `openssl` is missing (the test then says so).
fn make_certificates(dir: &Path) -> Option<()> {
    if Command::new("openssl").arg("version").output().is_err() {
        return None;
    }
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=prime-agent test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .expect("ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
    Some(())
}

/// The TLS front: killed on drop.
struct TlsFront {
    child: Child,
    port: u16,
}

impl TlsFront {
    fn start(certs: &Path, backend: &LlmServer) -> TlsFront {
        let backend_port = backend.url().rsplit(':').next().expect("port").to_owned();
        let mut child = Command::new("python3")
            .arg(root().join("tests/support/tls_forward.py"))
            .arg(certs.join("server.pem"))
            .arg(certs.join("server.key"))
            .arg(backend_port)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("port line");
        TlsFront {
            child,
            port: line.trim().parse().expect("a port"),
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_server_signed_by_an_internal_ca_is_reached_only_with_ssl_cert_file() {
    let certs = TempDir::new("tls-certs");
    if make_certificates(certs.path()).is_none() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: no openssl on this machine");
        return;
    }
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let front = TlsFront::start(certs.path(), &server);
    let ca = certs.path().join("ca.pem").display().to_string();

    // Without the CA: the built-in roots refuse the server, and the error says why.
    let dir = TempDir::new("tls-refused");
    models_at(&dir, &front.url());
    let mut s = spawn_in(dir, "cold/test-model", &[], false);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.to_lowercase().contains("certificate"), "{details}");
    assert!(
        server.posts().is_empty(),
        "nothing reached the model server"
    );

    // SSL_CERT_FILE replaces the roots with the CA: the call goes through.
    let dir = TempDir::new("tls-trusted");
    models_at(&dir, &front.url());
    let mut s = spawn_in(dir, "cold/test-model", &[("SSL_CERT_FILE", &ca)], false);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.text(), "Hello, wörld!");

    // NODE_EXTRA_CA_CERTS adds it to the built-in roots: the same.
    let dir = TempDir::new("tls-extra");
    models_at(&dir, &front.url());
    let mut s = spawn_in(
        dir,
        "cold/test-model",
        &[("NODE_EXTRA_CA_CERTS", &ca)],
        false,
    );
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(server.posts().len(), 2);
}

#[test]
fn a_bad_certificate_file_fails_start_up_naming_it() {
    let dir = TempDir::new("tls-bad");
    let bad = dir.write("corp-ca.pem", "this is not PEM\n");
    for var in ["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS"] {
        let out = agent_command(dir.path())
            .args(["--mode", "acp", "--no-session"])
            .env(var, &bad)
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(1), "{var}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{var}={}", bad.display())) && stderr.contains("no PEM"),
            "{var}: {stderr}"
        );
    }
}

#[test]
fn model_calls_go_through_the_proxy_unless_no_proxy_names_the_host() {
    let proxy = ConnectProxy::start();
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let target = server.url().trim_start_matches("http://").to_owned();

    let dir = TempDir::new("proxy");
    models_at(&dir, &format!("{}/v1", server.url()));
    // An https-only proxy is not used for an http URL; HTTP_PROXY is.
    let env = [
        ("HTTPS_PROXY", "http://127.0.0.1:9"),
        ("HTTP_PROXY", &proxy.url() as &str),
    ];
    let mut s = spawn_in(dir, "cold/test-model", &env, false);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(proxy.targets(), vec![target.clone()]);
    assert_eq!(server.posts().len(), 1);

    let dir = TempDir::new("no-proxy");
    models_at(&dir, &format!("{}/v1", server.url()));
    let env = [
        ("HTTP_PROXY", &proxy.url() as &str),
        ("NO_PROXY", "localhost,127.0.0.1"),
    ];
    let mut s = spawn_in(dir, "cold/test-model", &env, false);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(proxy.targets().len(), 1, "NO_PROXY went direct");
    assert_eq!(server.posts().len(), 2);
}
