//! Google OAuth access tokens for Vertex AI, without Google's SDK: a service-account key file
//! (`GOOGLE_APPLICATION_CREDENTIALS`, or gcloud's application-default file) is turned into an
//! RS256-signed JWT that the key's `token_uri` exchanges for an access token; an
//! `authorized_user` file (`gcloud auth application-default login`) exchanges its refresh
//! token; `GOOGLE_OAUTH_ACCESS_TOKEN` is used as it is.
//!
//! A token is cached until shortly before it expires (`TokenCache`): one exchange at a time,
//! every other caller waits for its result (or its own cancel). A failed exchange is not
//! retried here: the model call fails with the token endpoint's words and the key file's
//! path, and the next call tries again.
//!
//! Not built: the metadata server (GCE, Cloud Run, GKE workload identity), external-account
//! (workload identity federation) and impersonated-service-account files.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::http::HttpClient;
use super::ProviderError;
use crate::base::abort::AbortFlag;
use crate::base::json::json;

/// The scope Vertex AI needs.
pub(crate) const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Where a key that names no `token_uri` exchanges its grant.
pub(crate) const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The JWT grant of RFC 7523, as Google's token endpoint takes it.
const JWT_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// A signed assertion's lifetime: Google accepts at most one hour.
const ASSERTION_LIFETIME: u64 = 3600;
/// The longest a token exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// A key file is small; anything larger is not one.
const MAX_KEY_FILE: u64 = 1024 * 1024;
/// The access-token variable (the name Terraform's Google provider reads).
pub(crate) const ACCESS_TOKEN_VAR: &str = "GOOGLE_OAUTH_ACCESS_TOKEN";

/// Where the credentials come from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// An access token given outright; never refreshed.
    AccessToken(String),
    /// A credentials file (`service_account` or `authorized_user`), read at each exchange.
    File(PathBuf),
}

impl Source {
    /// The credentials the environment names: `GOOGLE_OAUTH_ACCESS_TOKEN`, then
    /// `GOOGLE_APPLICATION_CREDENTIALS`, then gcloud's application-default file if it exists.
    pub(crate) fn from_env(var: &dyn Fn(&str) -> Option<String>) -> Option<Source> {
        let set = |k: &str| {
            var(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if let Some(token) = set(ACCESS_TOKEN_VAR) {
            return Some(Source::AccessToken(token));
        }
        if let Some(path) = set("GOOGLE_APPLICATION_CREDENTIALS") {
            return Some(Source::File(PathBuf::from(path)));
        }
        let config = set("CLOUDSDK_CONFIG")
            .map(PathBuf::from)
            .or_else(|| set("HOME").map(|h| Path::new(&h).join(".config/gcloud")))?;
        let adc = config.join("application_default_credentials.json");
        adc.is_file().then_some(Source::File(adc))
    }
}

/// A credentials file's parts that an exchange needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeyFile {
    ServiceAccount {
        client_email: String,
        private_key: String,
        private_key_id: Option<String>,
        token_uri: String,
        project_id: Option<String>,
    },
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
}

impl KeyFile {
    /// Parses a credentials file's JSON (`type` `service_account` or `authorized_user`).
    pub(crate) fn parse(text: &str) -> Result<KeyFile, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let need = |k: &str| field(k).ok_or_else(|| format!("it has no \"{k}\""));
        let token_uri = field("token_uri").unwrap_or_else(|| DEFAULT_TOKEN_URI.to_owned());
        match v.get("type").and_then(Value::as_str) {
            Some("service_account") => Ok(KeyFile::ServiceAccount {
                client_email: need("client_email")?,
                private_key: need("private_key")?,
                private_key_id: field("private_key_id"),
                token_uri,
                project_id: field("project_id"),
            }),
            Some("authorized_user") => Ok(KeyFile::AuthorizedUser {
                client_id: need("client_id")?,
                client_secret: need("client_secret")?,
                refresh_token: need("refresh_token")?,
                token_uri,
            }),
            Some(other) => Err(format!(
                "credentials of type \"{other}\" are not supported (only service_account and authorized_user)"
            )),
            None => Err("it has no \"type\"".to_owned()),
        }
    }

    /// Reads and parses `path` (bounded).
    pub(crate) fn read(path: &Path) -> Result<KeyFile, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
        let mut text = String::new();
        file.take(MAX_KEY_FILE)
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read it: {e}"))?;
        KeyFile::parse(&text)
    }

    /// The project a service-account key belongs to, if it says.
    pub(crate) fn project(&self) -> Option<&str> {
        match self {
            KeyFile::ServiceAccount { project_id, .. } => project_id.as_deref(),
            KeyFile::AuthorizedUser { .. } => None,
        }
    }

    /// The token endpoint and the form to send it, at `now` (seconds since the epoch).
    pub(crate) fn grant(&self, now: u64) -> Result<(String, String), String> {
        match self {
            KeyFile::ServiceAccount { token_uri, .. } => {
                let assertion = self.assertion(now)?;
                let form = format!(
                    "grant_type={}&assertion={assertion}",
                    form_encode(JWT_GRANT)
                );
                Ok((token_uri.clone(), form))
            }
            KeyFile::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
            } => {
                let form = format!(
                    "grant_type=refresh_token&client_id={}&client_secret={}&refresh_token={}",
                    form_encode(client_id),
                    form_encode(client_secret),
                    form_encode(refresh_token)
                );
                Ok((token_uri.clone(), form))
            }
        }
    }

    /// The service account's signed JWT (RFC 7523) for the token endpoint, valid from `now`
    /// for an hour.
    pub(crate) fn assertion(&self, now: u64) -> Result<String, String> {
        let KeyFile::ServiceAccount {
            client_email,
            private_key,
            private_key_id,
            token_uri,
            ..
        } = self
        else {
            return Err("not a service-account key".to_owned());
        };
        let mut header = json!({"alg": "RS256", "typ": "JWT"});
        if let Some(kid) = private_key_id {
            header["kid"] = Value::String(kid.clone());
        }
        let claims = json!({
            "iss": client_email,
            "scope": SCOPE,
            "aud": token_uri,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME,
        });
        let input = format!(
            "{}.{}",
            base64url(header.to_string().as_bytes()),
            base64url(claims.to_string().as_bytes())
        );
        let signature = sign_rs256(private_key, input.as_bytes())?;
        Ok(format!("{input}.{}", base64url(&signature)))
    }
}

/// RSASSA-PKCS1-v1_5 with SHA-256 over `message`, with the PEM key (PKCS#8 `PRIVATE KEY`, or
/// PKCS#1 `RSA PRIVATE KEY`).
fn sign_rs256(pem: &str, message: &[u8]) -> Result<Vec<u8>, String> {
    use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
    let bad = |why: String| format!("its private_key is unusable: {why}");
    let key = ureq::tls::PrivateKey::from_pem(pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
    // PKCS#8 (Google's format), else PKCS#1; another kind of key fails both.
    let pair = RsaKeyPair::from_pkcs8(key.der())
        .or_else(|_| RsaKeyPair::from_der(key.der()))
        .map_err(|e| bad(format!("not an RSA key ({e})")))?;
    let mut signature = vec![0u8; pair.public().modulus_len()];
    pair.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        message,
        &mut signature,
    )
    .map_err(|_| bad("signing failed".to_owned()))?;
    Ok(signature)
}

/// Base64url without padding (RFC 7515's encoding of JWT parts).
pub(crate) fn base64url(data: &[u8]) -> String {
    crate::tools::read::base64_encode(data)
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_")
}

/// A form value, percent-encoded (`application/x-www-form-urlencoded`).
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A token endpoint's answer: the access token and how long it lives, or the endpoint's own
/// words (`error`, `error_description`).
pub(crate) fn parse_answer(status: u16, body: &[u8]) -> Result<(String, Duration), String> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if (200..300).contains(&status) {
        if let Some(token) = v.get("access_token").and_then(Value::as_str) {
            let lifetime = v.get("expires_in").and_then(Value::as_u64).unwrap_or(3600);
            return Ok((token.to_owned(), Duration::from_secs(lifetime)));
        }
        return Err(format!("{status}: the answer has no access_token"));
    }
    let words = [v.get("error"), v.get("error_description")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(": ");
    if words.is_empty() {
        let text = String::from_utf8_lossy(body);
        return Err(format!("{status} {}", super::http::one_line(&text)));
    }
    Err(format!("{status} {words}"))
}

/// The access token for `source`, exchanged (at most one exchange at a time) when the cached
/// one is missing or about to expire.
pub(crate) fn access_token(
    source: &Source,
    cache: &Arc<TokenCache>,
    http: &HttpClient,
    abort: &AbortFlag,
) -> Result<String, ProviderError> {
    let path = match source {
        Source::AccessToken(token) => return Ok(token.clone()),
        Source::File(path) => path,
    };
    cache.get(abort, &mut || exchange(path, http, abort))
}

/// One exchange of the credentials in `path` for an access token.
fn exchange(
    path: &Path,
    http: &HttpClient,
    abort: &AbortFlag,
) -> Result<(String, Duration), ProviderError> {
    let named = |why: String| format!("Google credentials {}: {why}", path.display());
    let key = KeyFile::read(path).map_err(|e| ProviderError::Config(named(e)))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (uri, form) = key
        .grant(now)
        .map_err(|e| ProviderError::Config(named(e)))?;
    let (status, body) = http.post_form(&uri, form.as_bytes(), EXCHANGE_TIMEOUT, abort)?;
    parse_answer(status, &body).map_err(|why| {
        let message = named(format!("the token exchange at {uri} was refused: {why}"));
        log::warn!("{message}");
        ProviderError::Status {
            // A refused grant is an authentication failure whatever status the endpoint
            // chose (Google answers a bad signature with 400 invalid_grant): never retried,
            // never a failover.
            status: if status >= 500 { status } else { 401 },
            message,
        }
    })
}

/// A cached access token, refreshed by one caller at a time.
#[derive(Default)]
pub(crate) struct TokenCache {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
enum State {
    #[default]
    Empty,
    /// A caller is exchanging; the others wait for `changed`.
    Refreshing,
    Ready {
        token: String,
        refresh_at: Instant,
    },
}

/// How long before its expiry a token is refreshed: five minutes, or half the lifetime of a
/// short-lived one.
fn refresh_margin(lifetime: Duration) -> Duration {
    Duration::from_secs(300).min(lifetime / 2)
}

impl TokenCache {
    /// The cached token, or `fetch`'s new one. Waiting for another caller's exchange ends at
    /// once when `abort` is set (its hook wakes the wait).
    pub(crate) fn get(
        self: &Arc<Self>,
        abort: &AbortFlag,
        fetch: &mut dyn FnMut() -> Result<(String, Duration), ProviderError>,
    ) -> Result<String, ProviderError> {
        let me = self.clone();
        let _hook = abort.on_abort(move || {
            let _state = me.state.lock().unwrap_or_else(|e| e.into_inner());
            me.changed.notify_all();
        });
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            abort.check().map_err(|_| ProviderError::Aborted)?;
            match &*state {
                State::Ready { token, refresh_at } if Instant::now() < *refresh_at => {
                    return Ok(token.clone())
                }
                State::Refreshing => {
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                State::Empty | State::Ready { .. } => break,
            }
        }
        *state = State::Refreshing;
        drop(state);
        // Whatever happens (a panic included), the state leaves `Refreshing`.
        let mut reset = Reset {
            cache: self,
            to: None,
        };
        let result = fetch();
        if let Ok((token, lifetime)) = &result {
            reset.to = Some(State::Ready {
                token: token.clone(),
                refresh_at: Instant::now() + lifetime.saturating_sub(refresh_margin(*lifetime)),
            });
        }
        drop(reset);
        result.map(|(token, _)| token)
    }

    /// Forgets `token` after the server refused it, so the next call exchanges again.
    pub(crate) fn forget(&self, refused: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(&*state, State::Ready { token, .. } if token == refused) {
            *state = State::Empty;
        }
    }
}

/// Leaves `Refreshing` for the new state (or `Empty`) and wakes the waiters.
struct Reset<'a> {
    cache: &'a TokenCache,
    to: Option<State>,
}

impl Drop for Reset<'_> {
    fn drop(&mut self) {
        let mut state = self.cache.state.lock().unwrap_or_else(|e| e.into_inner());
        *state = self.to.take().unwrap_or_default();
        self.cache.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The committed test-only key pair (fixtures/google/): never a real account's.
    fn test_key() -> KeyFile {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/google/test-service-account.json"
        ))
        .expect("fixture");
        KeyFile::parse(&text).expect("parses")
    }

    fn b64url_decode(s: &str) -> Vec<u8> {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut bits = 0u32;
        let mut n = 0;
        let mut out = Vec::new();
        for c in s.bytes() {
            let v = alphabet.iter().position(|a| *a == c).expect("base64url") as u32;
            bits = (bits << 6) | v;
            n += 6;
            if n >= 8 {
                n -= 8;
                out.push((bits >> n) as u8);
            }
        }
        out
    }

    #[test]
    fn a_service_account_assertion_is_signed_with_its_key_and_says_what_google_checks() {
        let key = test_key();
        let jwt = key.assertion(1_700_000_000).expect("signs");
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: Value = serde_json::from_slice(&b64url_decode(parts[0])).expect("header");
        assert_eq!(header["alg"], "RS256");
        let claims: Value = serde_json::from_slice(&b64url_decode(parts[1])).expect("claims");
        assert_eq!(
            claims["iss"],
            "vertex-test@prime-agent-test.iam.gserviceaccount.com"
        );
        assert_eq!(claims["scope"], SCOPE);
        assert_eq!(claims["aud"], "https://oauth2.googleapis.com/token");
        assert_eq!(claims["exp"].as_u64(), Some(1_700_000_000 + 3600));
        let public = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/google/test-service-account.pub.der"
        ))
        .expect("public key");
        let verify = |input: &str, sig: &[u8]| {
            ring::signature::UnparsedPublicKey::new(
                &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                &public,
            )
            .verify(input.as_bytes(), sig)
        };
        let signed = format!("{}.{}", parts[0], parts[1]);
        let signature = b64url_decode(parts[2]);
        assert!(verify(&signed, &signature).is_ok());
        assert!(verify(&format!("{signed}x"), &signature).is_err());
        assert_eq!(key.project(), Some("prime-agent-test"));
    }

    #[test]
    fn credential_files_and_sources() {
        let user = KeyFile::parse(
            r#"{"type":"authorized_user","client_id":"id","client_secret":"s e/cret","refresh_token":"1//r"}"#,
        )
        .expect("user");
        let (uri, form) = user.grant(0).expect("grant");
        assert_eq!(uri, DEFAULT_TOKEN_URI);
        assert_eq!(
            form,
            "grant_type=refresh_token&client_id=id&client_secret=s%20e%2Fcret&refresh_token=1%2F%2Fr"
        );
        let cases = [
            (r#"{"type":"external_account"}"#, "credentials of type \"external_account\" are not supported (only service_account and authorized_user)"),
            (r#"{"type":"service_account","private_key":"k"}"#, "it has no \"client_email\""),
            (r#"{}"#, "it has no \"type\""),
        ];
        for (text, want) in cases {
            assert_eq!(KeyFile::parse(text), Err(want.to_owned()), "{text}");
        }
        let bad_key = KeyFile::parse(
            r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}"#,
        )
        .expect("parses");
        assert!(bad_key
            .assertion(0)
            .unwrap_err()
            .starts_with("its private_key is unusable"));

        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let both = env(&[
            (ACCESS_TOKEN_VAR, "ya29.x"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
        ]);
        assert_eq!(
            Source::from_env(&both),
            Some(Source::AccessToken("ya29.x".into()))
        );
        let file = env(&[("GOOGLE_APPLICATION_CREDENTIALS", "/k.json")]);
        assert_eq!(
            Source::from_env(&file),
            Some(Source::File("/k.json".into()))
        );
        let none = env(&[("HOME", "/nonexistent-home")]);
        assert_eq!(Source::from_env(&none), None);
    }

    #[test]
    fn token_answers() {
        let ok = br#"{"access_token":"ya29.t","expires_in":1800,"token_type":"Bearer"}"#;
        assert_eq!(
            parse_answer(200, ok),
            Ok(("ya29.t".into(), Duration::from_secs(1800)))
        );
        let refused = br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#;
        assert_eq!(
            parse_answer(400, refused),
            Err("400 invalid_grant: Invalid JWT Signature.".into())
        );
        assert_eq!(
            parse_answer(200, b"{}"),
            Err("200: the answer has no access_token".into())
        );
        assert_eq!(
            parse_answer(502, b"Bad gateway"),
            Err("502 Bad gateway".into())
        );
        assert_eq!(
            refresh_margin(Duration::from_secs(3600)),
            Duration::from_secs(300)
        );
        assert_eq!(
            refresh_margin(Duration::from_secs(60)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn the_cache_exchanges_once_until_the_token_is_refused() {
        let cache = Arc::new(TokenCache::default());
        let fetches = AtomicUsize::new(0);
        let mut fetch = || {
            let n = fetches.fetch_add(1, Ordering::SeqCst);
            Ok((format!("t{n}"), Duration::from_secs(3600)))
        };
        let abort = AbortFlag::new();
        assert_eq!(cache.get(&abort, &mut fetch), Ok("t0".into()));
        assert_eq!(cache.get(&abort, &mut fetch), Ok("t0".into()));
        cache.forget("other");
        assert_eq!(cache.get(&abort, &mut fetch), Ok("t0".into()));
        cache.forget("t0");
        assert_eq!(cache.get(&abort, &mut fetch), Ok("t1".into()));
        // A failed exchange leaves nothing cached; an expired token is exchanged again.
        let mut failing = || Err(ProviderError::Config("no".into()));
        cache.forget("t1");
        assert!(cache.get(&abort, &mut failing).is_err());
        let mut short = || Ok(("s".to_owned(), Duration::ZERO));
        assert_eq!(cache.get(&abort, &mut short), Ok("s".into()));
        assert_eq!(cache.get(&abort, &mut fetch), Ok("t2".into()));
    }

    #[test]
    fn a_caller_waiting_for_another_ones_exchange_stops_at_its_cancel() {
        let cache = Arc::new(TokenCache::default());
        let (entered_tx, entered) = crossbeam_channel::bounded(1);
        let (release, release_rx) = crossbeam_channel::bounded::<()>(1);
        let slow = cache.clone();
        let first = std::thread::spawn(move || {
            slow.get(&AbortFlag::new(), &mut || {
                let _ = entered_tx.send(());
                let _ = release_rx.recv();
                Ok(("late".to_owned(), Duration::from_secs(3600)))
            })
        });
        entered.recv().expect("the first caller exchanges");
        let abort = AbortFlag::new();
        let waiter = cache.clone();
        let flag = abort.clone();
        let second = std::thread::spawn(move || {
            waiter.get(&flag, &mut || Ok(("never".to_owned(), Duration::ZERO)))
        });
        abort.abort();
        // The exchange is still held open: only the cancel can end the second caller's wait.
        assert_eq!(second.join().expect("joins"), Err(ProviderError::Aborted));
        let _ = release.send(());
        assert_eq!(first.join().expect("joins"), Ok("late".into()));
    }
}
