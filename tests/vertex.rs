//! The built-in `google-vertex` provider against a loopback Google: a token endpoint that checks
//! what Google's checks (the JWT's RS256 signature with the service account's public key, its
//! claims) and a Vertex endpoint that checks the bearer token and the project's URL, streaming
//! Gemini's recorded-shape replies. The keys are the test-only ones in `fixtures/google/`.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, End, LlmServer, Recorded};
use crate::support::model::*;
use crate::support::*;

const LOCATION: &str = "us-central1";
/// The project of the test key file (`project_id`): no `GOOGLE_CLOUD_PROJECT` is set.
const PROJECT: &str = "prime-agent-test";
const EMAIL: &str = "vertex-test@prime-agent-test.iam.gserviceaccount.com";

fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let (mut bits, mut n, mut out) = (0u32, 0, Vec::new());
    for c in s.bytes() {
        bits = (bits << 6) | ALPHABET.iter().position(|a| *a == c)? as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    Some(out)
}

/// What Google's token endpoint checks of a JWT-bearer grant: the grant type, the RS256
/// signature under the account's public key, and the claims. `Err`: the refusal's
/// `error_description`.
fn check_grant(form: &str, audience: &str) -> Result<(), String> {
    let field = |k: &str| {
        form.split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .map(str::to_owned)
    };
    // gcloud's application-default login: its refresh token, with the client's id and secret.
    if field("grant_type").as_deref() == Some("refresh_token") {
        let ok = field("refresh_token").as_deref() == Some("1%2F%2Ftest-refresh")
            && field("client_id").as_deref() == Some("test-client.apps.googleusercontent.com")
            && field("client_secret").as_deref() == Some("test-secret");
        return if ok {
            Ok(())
        } else {
            Err(format!("Bad refresh grant: {form}"))
        };
    }
    if field("grant_type").as_deref()
        != Some("urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer")
    {
        return Err(format!("unsupported grant: {form}"));
    }
    let jwt = field("assertion").ok_or("no assertion")?;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err("not a JWT".into());
    };
    let public = std::fs::read(fixture("google/test-service-account.pub.der")).expect("key");
    let signature = b64url_decode(signature).ok_or("bad signature encoding")?;
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, &public)
        .verify(format!("{header}.{claims}").as_bytes(), &signature)
        .map_err(|_| "Invalid JWT Signature.".to_owned())?;
    let header: Value = serde_json::from_slice(&b64url_decode(header).ok_or("header")?)
        .map_err(|e| e.to_string())?;
    let claims: Value = serde_json::from_slice(&b64url_decode(claims).ok_or("claims")?)
        .map_err(|e| e.to_string())?;
    let (iat, exp) = (claims["iat"].as_u64(), claims["exp"].as_u64());
    let ok = header["alg"] == "RS256"
        && claims["iss"] == EMAIL
        && claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
        && claims["aud"] == audience
        && matches!((iat, exp), (Some(i), Some(e)) if e > i && e - i <= 3600);
    if ok {
        Ok(())
    } else {
        Err(format!("Invalid JWT claims: {claims}"))
    }
}

fn json_reply(status: u16, body: Value) -> Canned {
    Canned {
        status,
        headers: Vec::new(),
        body: body.to_string().into_bytes(),
        sse: false,
        end: End::Complete,
        pace: None,
    }
}

/// The loopback Google: `POST /token` exchanges a valid grant for `tok-<n>`; a model call
/// with a token it issued (and not in `refused`) gets the next of `replies`, else a 401.
struct Google {
    server: LlmServer,
}

impl Google {
    fn start(replies: Vec<Canned>, refused: &'static [&'static str]) -> Google {
        let issued = Arc::new(Mutex::new(Vec::<String>::new()));
        let calls = Arc::new(Mutex::new(0usize));
        let port = Arc::new(Mutex::new(0u16));
        let port_in = port.clone();
        let server = LlmServer::start_responding(move |req: &Recorded, _| {
            let audience = format!("http://127.0.0.1:{}/token", port_in.lock().unwrap());
            if req.path == "/token" {
                let form = req.body.as_str().unwrap_or_default();
                return match check_grant(form, &audience) {
                    Ok(()) => {
                        let mut issued = issued.lock().unwrap();
                        let token = format!("tok-{}", issued.len() + 1);
                        issued.push(token.clone());
                        json_reply(
                            200,
                            json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}),
                        )
                    }
                    Err(why) => json_reply(
                        400,
                        json!({"error": "invalid_grant", "error_description": why}),
                    ),
                };
            }
            let bearer = req
                .header("authorization")
                .and_then(|h| h.strip_prefix("Bearer "));
            let known = bearer.is_some_and(|t| issued.lock().unwrap().iter().any(|i| i == t));
            if !known || bearer.is_some_and(|t| refused.contains(&t)) {
                return json_reply(
                    401,
                    json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
                    "message": "Request had invalid authentication credentials. Expected OAuth 2 access token."}}),
                );
            }
            let mut n = calls.lock().unwrap();
            *n += 1;
            replies[(*n - 1).min(replies.len() - 1)].clone()
        });
        *port.lock().unwrap() = server.port;
        Google { server }
    }

    fn exchanges(&self) -> usize {
        self.server
            .posts()
            .iter()
            .filter(|r| r.path == "/token")
            .count()
    }

    fn model_calls(&self) -> Vec<Recorded> {
        self.server
            .posts()
            .into_iter()
            .filter(|r| r.path != "/token")
            .collect()
    }
}

/// An agent on `google-vertex` with the key file `key` (from `fixtures/google/`), its
/// `token_uri` pointed at `google`.
fn vertex(google: &Google, key: &str, model: &str) -> (Agent, TempDir, String) {
    vertex_with(google, key, model, None)
}

/// As `vertex`, with a `models.json`.
fn vertex_with(
    google: &Google,
    key: &str,
    model: &str,
    models: Option<Value>,
) -> (Agent, TempDir, String) {
    let dir = TempDir::new("vertex");
    if let Some(models) = models {
        dir.write("models.json", &models.to_string());
    }
    let mut file: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(&format!("google/{key}"))).expect("key"),
    )
    .expect("json");
    file["token_uri"] = json!(format!("{}/token", google.server.url()));
    let path = dir
        .write("sa.json", &file.to_string())
        .display()
        .to_string();
    let base = google.server.url();
    let args = [
        "--provider",
        "google-vertex",
        "--model",
        model,
        "--base-url",
        &base,
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    let env = [
        ("GOOGLE_APPLICATION_CREDENTIALS", path.as_str()),
        ("GOOGLE_CLOUD_LOCATION", LOCATION),
        ("RUST_LOG", "debug"),
    ];
    (spawn_plain_env(&args, &dir, &env), dir, path)
}

#[test]
fn a_vertex_tool_turn_runs_after_one_token_exchange_and_later_calls_reuse_the_token() {
    let google = Google::start(
        vec![
            Canned::sse("gemini-thinking-tools.sse"),
            Canned::sse("gemini-after-tool.sse"),
        ],
        &[],
    );
    let (mut a, _dir, _) = vertex(&google, "test-service-account.json", "gemini-2.5-flash");
    let r = ask(&mut a, "run the check");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert!(
        a.text().ends_with("It printed gemini-ok. Wörld ✓"),
        "{}",
        a.text()
    );
    let ran = a
        .updates()
        .iter()
        .any(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed");
    assert!(ran, "the bash call ran");
    let r = ask_again(&mut a, "again");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");

    let calls = google.model_calls();
    assert_eq!(
        calls.len(),
        3,
        "two calls for the tool turn, one for the next prompt"
    );
    assert_eq!(
        google.exchanges(),
        1,
        "the token is cached until it nears its expiry"
    );
    for call in &calls {
        assert_eq!(
            call.path,
            format!("/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
        );
        assert_eq!(call.header("authorization"), Some("Bearer tok-1"));
        assert_eq!(call.header("x-goog-api-key"), None);
    }
    // The Gemini body, the function's response in the second call.
    assert_eq!(
        calls[0].body["contents"][0]["parts"][0]["text"],
        "run the check"
    );
    assert!(calls[1].body["contents"][2]["parts"][0]["functionResponse"].is_object());
    // The assertion and the token reach no log line.
    let log = a.stderr_text();
    assert!(
        !log.contains("tok-1") && !log.contains("assertion="),
        "{log}"
    );
    assert!(a.finish().success());
}

#[test]
fn a_key_the_token_endpoint_refuses_fails_the_prompt_as_an_auth_failure_naming_the_key_file() {
    let google = Google::start(vec![Canned::sse("gemini-after-tool.sse")], &[]);
    let (mut a, _dir, path) = vertex(
        &google,
        "test-service-account-wrong-key.json",
        "gemini-2.5-flash",
    );
    let details = failure(&ask(&mut a, "hi"));
    assert!(details.contains(&path), "{details}");
    assert!(
        details.contains("invalid_grant: Invalid JWT Signature."),
        "{details}"
    );
    assert!(
        details.contains("401"),
        "an authentication failure: {details}"
    );
    assert_eq!(google.exchanges(), 1, "a refused grant is not retried");
    assert!(google.model_calls().is_empty());
    // The next prompt tries again (the user may have fixed the file meanwhile).
    failure(&ask_again(&mut a, "again"));
    assert_eq!(google.exchanges(), 2);
}

#[test]
fn a_token_vertex_refuses_fails_the_call_unretried_and_the_next_call_exchanges_anew() {
    // `tok-1` is refused, as an expired or revoked token is.
    let google = Google::start(vec![Canned::sse("gemini-after-tool.sse")], &["tok-1"]);
    let (mut a, _dir, _) = vertex(&google, "test-service-account.json", "gemini-2.5-flash");
    let details = failure(&ask(&mut a, "hi"));
    assert!(details.contains("401"), "{details}");
    assert!(
        details.contains("invalid authentication credentials"),
        "{details}"
    );
    assert_eq!(
        google.model_calls().len(),
        1,
        "an auth failure is not retried"
    );
    let r = ask_again(&mut a, "again");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(google.exchanges(), 2, "the refused token was forgotten");
    let last = google.model_calls().pop().expect("a call");
    assert_eq!(last.header("authorization"), Some("Bearer tok-2"));
}

#[test]
fn without_a_location_or_credentials_each_prompt_says_what_to_set() {
    let google = Google::start(vec![Canned::sse("gemini-after-tool.sse")], &[]);
    let dir = TempDir::new("vertex-unset");
    let base = google.server.url();
    let args = [
        "--provider",
        "google-vertex",
        "--base-url",
        &base,
        "--no-session",
        "--offline",
    ];
    let mut a = spawn_plain_env(&args, &dir, &[]);
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details
            .contains("No credentials found for google-vertex. Set GOOGLE_APPLICATION_CREDENTIALS"),
        "{details}"
    );
    let mut a = spawn_plain_env(
        &args,
        &dir,
        &[
            ("GOOGLE_OAUTH_ACCESS_TOKEN", "tok-x"),
            ("GOOGLE_CLOUD_PROJECT", "p"),
        ],
    );
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details.contains("Vertex AI requires a location. Set GOOGLE_CLOUD_LOCATION"),
        "{details}"
    );
    assert_eq!(google.server.posts().len(), 0);
}

#[test]
fn an_access_token_from_the_environment_and_an_api_key_in_express_mode() {
    let google = Google::start(vec![Canned::sse("gemini-after-tool.sse")], &[]);
    let dir = TempDir::new("vertex-token");
    let base = google.server.url();
    let args = [
        "--provider",
        "google-vertex",
        "--model",
        "gemini-2.5-pro",
        "--base-url",
        &base,
        "--no-session",
        "--offline",
    ];
    let env = [
        ("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.from-env"),
        ("GOOGLE_CLOUD_PROJECT", "p1"),
        ("GOOGLE_CLOUD_LOCATION", "global"),
    ];
    let mut a = spawn_plain_env(&args, &dir, &env);
    // The mock knows no such token: its 401 shows what was sent.
    failure(&ask(&mut a, "hi"));
    let call = google.model_calls().pop().expect("a call");
    assert_eq!(call.header("authorization"), Some("Bearer ya29.from-env"));
    assert_eq!(
        call.path,
        "/v1/projects/p1/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    assert_eq!(google.exchanges(), 0);

    let mut a = spawn_plain_env(
        &args,
        &dir,
        &[("GOOGLE_CLOUD_API_KEY", "vertex-express-key")],
    );
    failure(&ask(&mut a, "hi"));
    let call = google.model_calls().pop().expect("a call");
    assert_eq!(
        call.path,
        "/v1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    assert_eq!(call.header("x-goog-api-key"), Some("vertex-express-key"));
    assert_eq!(call.header("authorization"), None);
}

#[test]
fn claude_on_vertex_goes_to_the_anthropic_publisher_with_the_vertex_version() {
    let google = Google::start(vec![Canned::sse("anthropic-text.sse")], &[]);
    let id = "claude-sonnet-4-5@20250929";
    let models = json!({"providers": {"google-vertex": {"models": [{"id": id, "reasoning": false,
        "input": ["text", "image"], "contextWindow": 200000, "maxTokens": 64000}]}}});
    let (mut a, _dir, _) = vertex_with(
        &google,
        "test-service-account.json",
        &format!("google-vertex/{id}"),
        Some(models),
    );
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert!(!a.text().is_empty());
    let call = google.model_calls().pop().expect("a call");
    assert_eq!(
        call.path,
        format!("/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/anthropic/models/{id}:streamRawPredict")
    );
    assert_eq!(call.header("authorization"), Some("Bearer tok-1"));
    assert_eq!(call.body["anthropic_version"], "vertex-2023-10-16");
    assert!(call.body.get("model").is_none(), "{}", call.body);
    assert_eq!(call.body["messages"][0]["role"], "user");
}

#[test]
fn gclouds_application_default_login_exchanges_its_refresh_token() {
    let google = Google::start(vec![Canned::sse("gemini-after-tool.sse")], &[]);
    let dir = TempDir::new("vertex-adc");
    // Where `gcloud auth application-default login` writes it, under the test's HOME.
    let adc = json!({"type": "authorized_user", "client_id": "test-client.apps.googleusercontent.com",
        "client_secret": "test-secret", "refresh_token": "1//test-refresh",
        "token_uri": format!("{}/token", google.server.url())});
    dir.write(
        ".config/gcloud/application_default_credentials.json",
        &adc.to_string(),
    );
    let base = google.server.url();
    let args = [
        "--provider",
        "google-vertex",
        "--model",
        "gemini-2.5-flash",
        "--base-url",
        &base,
        "--no-session",
        "--offline",
    ];
    let env = [
        ("GOOGLE_CLOUD_PROJECT", "p"),
        ("GOOGLE_CLOUD_LOCATION", LOCATION),
    ];
    let mut a = spawn_plain_env(&args, &dir, &env);
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(google.exchanges(), 1);
    let call = google.model_calls().pop().expect("a call");
    assert_eq!(call.header("authorization"), Some("Bearer tok-1"));
    assert!(
        call.path
            .starts_with("/v1/projects/p/locations/us-central1/"),
        "{}",
        call.path
    );
}
