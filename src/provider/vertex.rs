//! The `google-vertex` wire API: Gemini (and Anthropic's Claude) on Google Vertex AI. The
//! body and the stream are `google.rs`'s (Claude: `anthropic.rs`'s); what differs is where the
//! request goes and how it is authorised:
//!
//! - with OAuth credentials (`google_auth`: a service-account or authorized-user file, or an
//!   access token) and a project and location:
//!   `{base}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}
//!   :streamGenerateContent?alt=sse` with `Authorization: Bearer …`; a `claude-*` model is
//!   `…/publishers/anthropic/models/{model}:streamRawPredict` with the Messages body, without
//!   `model`, with `anthropic_version: vertex-2023-10-16`;
//! - with an API key (`GOOGLE_CLOUD_API_KEY`, Vertex's express mode, Gemini only):
//!   `{base}/v1/publishers/google/models/{model}:streamGenerateContent?alt=sse` with
//!   `x-goog-api-key`.
//!
//! `{base}` is the provider's base URL with `{location}` filled in (the `global` location's
//! host is `aiplatform.googleapis.com`); a base URL that already names an API version
//! (`…/v1beta1`) gets no `/v1`.

use serde_json::Value;

use super::config::ModelDef;
use super::google_auth::{KeyFile, Source};
use super::parts::stream_headers;
use super::{anthropic, google, ChatRequest, ProviderError};

/// The Messages API version Vertex's Claude models take in the body.
pub(crate) const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

pub(crate) const NO_PROJECT: &str =
    "Vertex AI requires a project ID. Set GOOGLE_CLOUD_PROJECT (or GCLOUD_PROJECT), or use a service-account key file that names its project_id.";
pub(crate) const NO_LOCATION: &str =
    "Vertex AI requires a location. Set GOOGLE_CLOUD_LOCATION (e.g. us-central1, or global).";
pub(crate) const NO_CREDENTIALS: &str = "No credentials found for google-vertex. Set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run gcloud auth application-default login, set GOOGLE_OAUTH_ACCESS_TOKEN, or set GOOGLE_CLOUD_API_KEY (express mode, Gemini only).";
pub(crate) const CLAUDE_NEEDS_OAUTH: &str = "Claude on Vertex AI takes no API key: unset GOOGLE_CLOUD_API_KEY (or --api-key) and use OAuth credentials (GOOGLE_APPLICATION_CREDENTIALS or gcloud auth application-default login).";

/// The Vertex settings of the environment, read at each request like the key.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct VertexEnv {
    pub project: Option<String>,
    pub location: Option<String>,
    pub credentials: Option<Source>,
}

impl VertexEnv {
    pub(crate) fn from_env(var: &dyn Fn(&str) -> Option<String>) -> VertexEnv {
        let set = |k: &str| {
            var(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        VertexEnv {
            project: set("GOOGLE_CLOUD_PROJECT").or_else(|| set("GCLOUD_PROJECT")),
            location: set("GOOGLE_CLOUD_LOCATION"),
            credentials: Source::from_env(var),
        }
    }

    /// Whether OAuth calls can be made without further set-up (as upstream counts Vertex as
    /// configured: credentials, a project and a location).
    pub(crate) fn configured(&self) -> bool {
        self.credentials.is_some() && self.project.is_some() && self.location.is_some()
    }
}

/// Reads the real environment.
pub(crate) fn env() -> VertexEnv {
    VertexEnv::from_env(&|k| std::env::var(k).ok())
}

/// Whether `key` is a real API key rather than upstream's marker for "use the Google
/// credentials" (`gcp-vertex-credentials`) or a placeholder such as `<your-key>`.
pub(crate) fn real_key(key: Option<&str>) -> Option<&str> {
    key.map(str::trim)
        .filter(|k| !k.is_empty() && *k != "gcp-vertex-credentials")
        .filter(|k| !(k.starts_with('<') && k.ends_with('>')))
}

/// Whether the model is one of Anthropic's (called through the Messages API).
pub(crate) fn is_claude(model_id: &str) -> bool {
    model_id.to_ascii_lowercase().starts_with("claude")
}

/// The base URL for `location`: `{location}` filled in, the global location's own host.
fn base_for(base_url: &str, location: Option<&str>) -> String {
    let base = base_url.trim().trim_end_matches('/');
    let base = if base.is_empty() {
        "https://{location}-aiplatform.googleapis.com"
    } else {
        base
    };
    match location {
        Some("global") | None => base
            .replace("{location}-aiplatform.", "aiplatform.")
            .replace("{location}", "global"),
        Some(loc) => base.replace("{location}", loc),
    }
}

/// Whether a base URL's path already names an API version (`v1`, `v1beta1`).
fn names_version(base: &str) -> bool {
    let path = base.split_once("://").map_or(base, |(_, rest)| rest);
    path.split('/').skip(1).any(|segment| {
        let Some(rest) = segment.strip_prefix('v') else {
            return false;
        };
        let tail = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        tail.len() < rest.len() && (tail.is_empty() || tail.starts_with("beta"))
    })
}

fn versioned(base: &str) -> String {
    if names_version(base) {
        base.to_owned()
    } else {
        format!("{base}/v1")
    }
}

/// The model call's URL: with a project and location, or in express mode (`None`).
pub(crate) fn url(base_url: &str, scope: Option<(&str, &str)>, model_id: &str) -> String {
    let (publisher, method) = if is_claude(model_id) {
        ("anthropic", "streamRawPredict")
    } else {
        ("google", "streamGenerateContent?alt=sse")
    };
    match scope {
        Some((project, location)) => format!(
            "{}/projects/{project}/locations/{location}/publishers/{publisher}/models/{model_id}:{method}",
            versioned(&base_for(base_url, Some(location)))
        ),
        None => format!(
            "{}/publishers/{publisher}/models/{model_id}:{method}",
            versioned(&base_for(base_url, None))
        ),
    }
}

/// Where a call goes and what authorises it, once the credentials are known.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Auth<'a> {
    /// Express mode: the API key.
    Key(&'a str),
    /// OAuth: the credentials source (its token comes from `google_auth`).
    OAuth(&'a Source),
}

/// The project and location an OAuth call needs (the project from the key file when the
/// environment names none), or the error that says what to set.
pub(crate) fn scope(env: &VertexEnv) -> Result<(String, String), ProviderError> {
    let project = match &env.project {
        Some(p) => p.clone(),
        None => match &env.credentials {
            Some(Source::File(path)) => KeyFile::read(path)
                .ok()
                .and_then(|k| k.project().map(str::to_owned))
                .ok_or_else(|| ProviderError::Config(NO_PROJECT.to_owned()))?,
            _ => return Err(ProviderError::Config(NO_PROJECT.to_owned())),
        },
    };
    let location = env
        .location
        .clone()
        .ok_or_else(|| ProviderError::Config(NO_LOCATION.to_owned()))?;
    Ok((project, location))
}

/// How this call is authorised: an API key wins (as upstream), else the OAuth credentials.
pub(crate) fn auth<'a>(
    key: Option<&'a str>,
    env: &'a VertexEnv,
    model_id: &str,
) -> Result<Auth<'a>, ProviderError> {
    match (real_key(key), &env.credentials) {
        (Some(_), Some(source)) if is_claude(model_id) => Ok(Auth::OAuth(source)),
        (Some(_), None) if is_claude(model_id) => {
            Err(ProviderError::Config(CLAUDE_NEEDS_OAUTH.to_owned()))
        }
        (Some(k), _) => Ok(Auth::Key(k)),
        (None, Some(source)) => Ok(Auth::OAuth(source)),
        (None, None) => Err(ProviderError::Config(NO_CREDENTIALS.to_owned())),
    }
}

/// The headers of a call with an API key or a bearer token.
pub(crate) fn headers(key: Option<&str>, bearer: Option<&str>) -> Vec<(String, String)> {
    match (key, bearer) {
        (_, Some(token)) => stream_headers(Some(("authorization", format!("Bearer {token}")))),
        (Some(k), None) => stream_headers(Some(("x-goog-api-key", k.to_owned()))),
        (None, None) => stream_headers(None),
    }
}

/// The request body: Gemini's, or for Claude the Messages body as Vertex takes it.
pub(crate) fn body(model: &ModelDef, req: &ChatRequest<'_>) -> Value {
    if !is_claude(&model.id) {
        return google::body(model, req);
    }
    let mut body = anthropic::body(model, req);
    if let Some(o) = body.as_object_mut() {
        o.remove("model");
        o.insert(
            "anthropic_version".to_owned(),
            Value::String(ANTHROPIC_VERSION.to_owned()),
        );
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = "https://{location}-aiplatform.googleapis.com";

    #[test]
    fn urls_by_location_base_and_publisher() {
        let cases = [
            (TEMPLATE, Some(("p", "us-central1")), "gemini-2.5-flash",
             "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
            (TEMPLATE, Some(("p", "global")), "gemini-2.5-pro",
             "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"),
            (TEMPLATE, None, "gemini-2.5-flash",
             "https://aiplatform.googleapis.com/v1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
            (TEMPLATE, Some(("p", "europe-west1")), "claude-sonnet-4-5@20250929",
             "https://europe-west1-aiplatform.googleapis.com/v1/projects/p/locations/europe-west1/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"),
            ("http://127.0.0.1:9/", Some(("p", "us-east5")), "gemini-2.5-flash",
             "http://127.0.0.1:9/v1/projects/p/locations/us-east5/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
            ("https://gw.example.com/vertex/v1beta1", Some(("p", "l")), "gemini-x",
             "https://gw.example.com/vertex/v1beta1/projects/p/locations/l/publishers/google/models/gemini-x:streamGenerateContent?alt=sse"),
            ("", Some(("p", "asia-east1")), "gemini-x",
             "https://asia-east1-aiplatform.googleapis.com/v1/projects/p/locations/asia-east1/publishers/google/models/gemini-x:streamGenerateContent?alt=sse"),
        ];
        for (base, scope, model, want) in cases {
            assert_eq!(url(base, scope, model), want, "{base} {scope:?} {model}");
        }
    }

    #[test]
    fn which_credentials_a_call_uses() {
        let file = Source::File("/k.json".into());
        let with = VertexEnv {
            credentials: Some(file.clone()),
            ..VertexEnv::default()
        };
        let without = VertexEnv::default();
        let gemini = "gemini-2.5-flash";
        let claude = "claude-opus-4-5@20251101";
        assert_eq!(auth(Some("k"), &with, gemini), Ok(Auth::Key("k")));
        assert_eq!(auth(None, &with, gemini), Ok(Auth::OAuth(&file)));
        assert_eq!(
            auth(Some("gcp-vertex-credentials"), &with, gemini),
            Ok(Auth::OAuth(&file))
        );
        assert_eq!(auth(Some("<key>"), &with, gemini), Ok(Auth::OAuth(&file)));
        assert_eq!(auth(Some("k"), &with, claude), Ok(Auth::OAuth(&file)));
        assert_eq!(
            auth(Some("k"), &without, claude),
            Err(ProviderError::Config(CLAUDE_NEEDS_OAUTH.into()))
        );
        assert_eq!(
            auth(None, &without, gemini),
            Err(ProviderError::Config(NO_CREDENTIALS.into()))
        );
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            VertexEnv::from_env(&move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            })
        };
        let e = env(&[
            ("GCLOUD_PROJECT", "p2"),
            ("GOOGLE_CLOUD_LOCATION", " us-central1 "),
            ("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.t"),
        ]);
        assert_eq!(scope(&e), Ok(("p2".into(), "us-central1".into())));
        assert!(e.configured());
        let e = env(&[("GOOGLE_CLOUD_PROJECT", "p")]);
        assert_eq!(scope(&e), Err(ProviderError::Config(NO_LOCATION.into())));
        assert!(!e.configured());
        assert_eq!(
            scope(&env(&[("GOOGLE_OAUTH_ACCESS_TOKEN", "t")])),
            Err(ProviderError::Config(NO_PROJECT.into()))
        );
    }

    #[test]
    fn claude_bodies_name_the_vertex_version_instead_of_the_model() {
        let model = ModelDef::listed(
            "claude-sonnet-4-5@20250929",
            false,
            200_000,
            64_000,
            true,
            Default::default(),
        );
        let messages = [crate::provider::Message::User {
            text: "hi".into(),
            images: Vec::new(),
        }];
        let req = ChatRequest {
            system: "s",
            messages: &messages,
            tools: &[],
            thinking: crate::provider::Thinking::Off,
            agent: "main",
            max_tokens: None,
            request_id: "r",
            service_tier: None,
        };
        let b = body(&model, &req);
        assert_eq!(b["anthropic_version"], ANTHROPIC_VERSION);
        assert!(b.get("model").is_none());
        assert_eq!(b["stream"], true);
        let gemini = ModelDef::listed("gemini-2.5-flash", false, 1, 1, true, Default::default());
        assert!(body(&gemini, &req).get("contents").is_some());
        assert_eq!(
            headers(Some("k"), Some("tok"))
                .iter()
                .find(|(n, _)| n == "authorization")
                .map(|(_, v)| v.as_str()),
            Some("Bearer tok")
        );
        assert!(headers(Some("k"), None).contains(&("x-goog-api-key".into(), "k".into())));
    }
}
