//! `RemoteProvider`: a `Provider` backed by an HTTP wire API. It resolves the key on every
//! request (so a key added to `auth.json` later is picked up), builds the body with the API
//! module, and streams the reply through the shared `HttpClient`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;

use super::bedrock::aws_config::{self, Auth};
use super::config::{resolve_value, Api, Credentials, ModelDef, Selection};
use super::google_auth::{self, TokenCache};
use super::http::Framing;
use super::http::{HttpClient, HttpSettings, PostRequest, StreamDecoder};
use super::{
    anthropic, azure, bedrock, google, openai, responses, vertex, ChatRequest, Message, Notice,
    Provider, ProviderError, Reply, StreamEvent, ToolResultMessage,
};
use crate::base::abort::AbortFlag;

/// The window assumed for an unknown model whose server does not say. 32,768 tokens is what
/// the common local set-ups run with or above (vLLM and Ollama defaults for current open
/// models, llama.cpp users who raise its 4,096 default), so usage reports stay in the right
/// order of magnitude, while a larger guess would report a small server's window as mostly
/// free. `--context-window` sets the real value.
pub(crate) const DEFAULT_CONTEXT_WINDOW: u64 = 32_768;

/// How long each self-description request may take. The server is about to serve the model
/// call, so it is up and local more often than not; a slow one must not hold the first
/// prompt up noticeably.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a model's context window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WindowSource {
    /// The catalogue, models.json or `--context-window`.
    Configured,
    /// The server's `GET /v1/models` entry.
    Models,
    /// llama.cpp's `GET /props`.
    Props,
    /// The server did not say: `DEFAULT_CONTEXT_WINDOW`.
    Default,
}

pub(crate) struct RemoteProvider {
    selection: Selection,
    credentials: Arc<Credentials>,
    /// A key is optional when the user pointed a built-in provider at their own server with
    /// `--base-url`, or a models.json provider has no `apiKey` (local vLLM, llama.cpp).
    key_optional: bool,
    http: HttpClient,
    /// The window of a model configured without one, asked from the server at the first call.
    discovered: OnceLock<(u64, WindowSource)>,
    /// Vertex AI's OAuth access token, cached until shortly before it expires.
    google_tokens: Arc<TokenCache>,
}

impl RemoteProvider {
    pub(crate) fn new(
        selection: Selection,
        credentials: Arc<Credentials>,
        key_optional: bool,
    ) -> Self {
        RemoteProvider {
            selection,
            credentials,
            key_optional,
            http: HttpClient::new(HttpSettings::from_env()),
            discovered: OnceLock::new(),
            google_tokens: Arc::default(),
        }
    }

    /// The model's window and its source; asks the server once (lazily, so start-up and
    /// `session/new` never wait for it) when nothing configured it.
    fn window(&self, headers: &[(String, String)], abort: &AbortFlag) -> (u64, WindowSource) {
        let configured = self.selection.model.context_window;
        if configured > 0 {
            return (configured, WindowSource::Configured);
        }
        *self.discovered.get_or_init(|| {
            let found = self.discover_window(headers, abort);
            let (window, source) = found.unwrap_or((DEFAULT_CONTEXT_WINDOW, WindowSource::Default));
            let notice = self.assumed_defaults_notice(window, source);
            log::warn!(
                "{}: {}",
                notice.title,
                notice.description.unwrap_or_default()
            );
            (window, source)
        })
    }

    fn discover_window(
        &self,
        headers: &[(String, String)],
        abort: &AbortFlag,
    ) -> Option<(u64, WindowSource)> {
        let base = self.selection.provider.base_url.trim_end_matches('/');
        let models_url = match self.selection.api {
            Api::OpenAiCompletions | Api::OpenAiResponses | Api::Google => {
                format!("{base}/models")
            }
            // The Azure endpoint is known only at request time; its models are deployments.
            // Vertex's catalogue describes its models, and its model list is per publisher;
            // Bedrock lists its models on another service (`bedrock`, not the runtime).
            Api::AzureOpenAiResponses | Api::GoogleVertex | Api::BedrockConverseStream => {
                return None
            }
            Api::AnthropicMessages => format!("{base}/v1/models"),
        };
        let get = |url: &str| self.http.get_json(url, headers, DISCOVERY_TIMEOUT, abort);
        if let Some(w) =
            get(&models_url).and_then(|v| window_from_models(&v, &self.selection.model.id))
        {
            return Some((w, WindowSource::Models));
        }
        if abort.is_aborted() {
            return None;
        }
        // llama.cpp serves `/props` at the root, beside `/v1`.
        let root = base.strip_suffix("/v1").unwrap_or(base);
        get(&format!("{root}/props"))
            .and_then(|v| window_from_props(&v))
            .map(|w| (w, WindowSource::Props))
    }

    /// The output budget of an unknown model (whose own limit we do not know) once its window
    /// is known for real (configured, or the server said): the share of the window compaction
    /// reserves for the reply (`REPLY_SHARE`). A small model that degenerates
    /// into repeating itself then stops at a length cut instead of writing until the window is
    /// full, which would leave no room for the next request; and a prompt kept under the
    /// threshold plus this budget fits the window, so a server that checks both (vLLM) accepts
    /// it. With a guessed window, none: a guess could exceed the real one and be refused.
    fn unknown_model_budget(&self) -> Option<u64> {
        let model = &self.selection.model;
        if !self.selection.assumed_defaults || model.max_tokens > 0 {
            return None;
        }
        let window = match (model.context_window, self.discovered.get()) {
            (w, _) if w > 0 => w,
            (_, Some(&(w, source))) if source != WindowSource::Default => w,
            _ => return None,
        };
        Some((window / super::REPLY_SHARE).max(1))
    }

    /// What the client is told once per session about an unknown model.
    fn assumed_defaults_notice(&self, window: u64, source: WindowSource) -> Notice {
        let model = &self.selection.model;
        let effort = if model.reasoning {
            "reasoning_effort only because --thinking asked for it"
        } else {
            "no reasoning_effort"
        };
        // The Responses API has no roles for the system prompt and keeps nothing either way.
        let (system, store) = match self.selection.api {
            Api::OpenAiResponses | Api::AzureOpenAiResponses => ("as instructions", "store: false"),
            Api::Google | Api::GoogleVertex => ("as the system instruction", "no store"),
            Api::OpenAiCompletions | Api::AnthropicMessages => ("with role \"system\"", "no store"),
            Api::BedrockConverseStream => ("as the system blocks", "no store"),
        };
        let window_text = match source {
            WindowSource::Configured => format!("a context window of {window} tokens (configured)"),
            WindowSource::Models => {
                format!("a context window of {window} tokens (reported by the server's /models)")
            }
            WindowSource::Props => {
                format!("a context window of {window} tokens (reported by the server's /props)")
            }
            WindowSource::Default => format!(
                "a context window of {window} tokens (the server did not report one; pass --context-window N to set it)"
            ),
        };
        let budget_text = match source {
            WindowSource::Default => "no output limit".to_owned(),
            _ => format!(
                "replies of at most {} tokens (a quarter of the window)",
                (window / super::REPLY_SHARE).max(1)
            ),
        };
        Notice {
            severity: "warning",
            title: format!("Unknown model \"{}\": conservative defaults assumed", model.id),
            description: Some(format!(
                "prime-agent does not know the model \"{}\" at {}, so it sends the system prompt {system}, {effort}, {store}, text-only input, {budget_text}, and assumes {window_text}. Describe the model in models.json to change this.",
                model.id, self.selection.provider.base_url
            )),
        }
    }
}

/// A context window in tokens from one of the fields servers use for it, if plausible.
fn window_field(entry: &Value) -> Option<u64> {
    [
        "max_model_len",
        "context_length",
        "context_window",
        "max_context_length",
        // Gemini's `GET /models`.
        "inputTokenLimit",
    ]
    .iter()
    .find_map(|k| entry.get(*k).and_then(Value::as_u64))
    .filter(|w| (256..=100_000_000).contains(w))
}

/// The window of `model` in a `GET /v1/models` answer (`{"data": [...]}`): its own entry, or
/// the only entry (llama.cpp serves one model under a file name the user may not repeat).
pub(crate) fn window_from_models(v: &Value, model: &str) -> Option<u64> {
    let list = v
        .get("data")
        .or_else(|| v.get("models"))
        .unwrap_or(v)
        .as_array()?;
    let entry = list
        .iter()
        .find(|e| {
            e.get("id").and_then(Value::as_str) == Some(model)
                || e.get("name").and_then(Value::as_str) == Some(&format!("models/{model}"))
        })
        .or_else(|| (list.len() == 1).then(|| &list[0]))?;
    window_field(entry)
}

/// llama.cpp's `GET /props`: `default_generation_settings.n_ctx` (older builds: `n_ctx`).
pub(crate) fn window_from_props(v: &Value) -> Option<u64> {
    v.pointer("/default_generation_settings/n_ctx")
        .or_else(|| v.get("n_ctx"))
        .and_then(Value::as_u64)
        .filter(|w| (256..=100_000_000).contains(w))
}

impl Provider for RemoteProvider {
    fn label(&self) -> String {
        format!(
            "{}/{}",
            self.selection.provider.name, self.selection.model.id
        )
    }

    fn reasoning(&self) -> bool {
        self.selection.model.reasoning
    }

    /// OpenAI's APIs (and the servers that speak them) and Gemini cache prompt prefixes by
    /// themselves; our Anthropic requests set no `cache_control`, so nothing is cached there.
    fn caches_prompts(&self) -> bool {
        !matches!(self.selection.api, Api::AnthropicMessages)
    }

    fn context_window(&self) -> Option<u64> {
        Some(self.selection.model.context_window)
            .filter(|w| *w > 0)
            .or_else(|| self.discovered.get().map(|(w, _)| *w))
    }

    fn prices(&self) -> Option<crate::provider::Prices> {
        self.selection.model.cost
    }

    fn accepts_images(&self) -> bool {
        self.selection.model.input.iter().any(|i| i == "image")
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
        abort: &AbortFlag,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, ProviderError> {
        let model = &self.selection.model;
        let key = self.key(abort)?;
        warn_images_omitted(&self.label(), model, request.messages);
        // (Azure's environment: a few variable lookups, read per call like the key.)
        let azure_env = match self.selection.api {
            Api::AzureOpenAiResponses => Some(azure::AzureEnv::from_env()),
            _ => None,
        };
        // (Bedrock's AWS configuration: variables and the shared files, read per call too.)
        let aws = match self.selection.api {
            Api::BedrockConverseStream => Some(self.aws(key.clone())?),
            _ => None,
        };
        let (url, headers, bearer) =
            self.endpoint(key.as_deref(), azure_env.as_ref(), aws.as_ref(), abort)?;
        if self.selection.assumed_defaults {
            self.announce_assumed_defaults(&headers, abort, on_event)?;
        }
        // The body is built once the window is known (asked above for an unknown model),
        // since an unknown model's output budget depends on it.
        let request = &self.fitted(request);
        let body = self.body(request, azure_env.as_ref());
        // The tree is dropped once encoded: for the whole call only the bytes hold a copy of
        // the conversation (a 200,000-token conversation is ~1 MB of them).
        let body = encode(body)?;
        let label = self.label();
        let sign = || match aws.as_ref().map(|a| (&a.auth, &a.region)) {
            Some((Auth::SigV4 { credentials, .. }, region)) => {
                let now = crate::base::time::now_ms() / 1000;
                bedrock::signature_headers(&url, &body, credentials, region, now)
            }
            _ => Vec::new(),
        };
        let post = PostRequest {
            label: &label,
            url: &url,
            headers: &headers,
            body: &body,
            request_id: Some(request.request_id),
            framing: match self.selection.api {
                Api::BedrockConverseStream => Framing::AwsEventStream,
                _ => Framing::Sse,
            },
            sign: aws
                .is_some()
                .then_some(&sign as &dyn Fn() -> Vec<(String, String)>),
        };
        let mut decoder = || self.decoder();
        let result = self.http.stream(&post, abort, &mut decoder, on_event);
        if let (Err(ProviderError::Status { status: 401, .. }), Some(token)) = (&result, &bearer) {
            // A token the server refused (revoked, or expired early) is not used again.
            self.google_tokens.forget(token);
        }
        match &aws {
            Some(aws) => result.map_err(|e| bedrock::auth_failure(e, &aws.auth)),
            None => result,
        }
    }
}

impl RemoteProvider {
    /// `request` as this model takes it: an unknown model's output budget, and a thinking
    /// level the model does not take clamped away (models.json `thinkingLevelMap`).
    fn fitted<'a>(&self, request: &ChatRequest<'a>) -> ChatRequest<'a> {
        let max_tokens = match self.unknown_model_budget() {
            Some(budget) if request.max_tokens.is_none() => Some(budget),
            _ => request.max_tokens,
        };
        ChatRequest {
            max_tokens,
            thinking: self.selection.model.clamp(request.thinking),
            ..*request
        }
    }

    /// The wire API's request body.
    fn body(&self, request: &ChatRequest<'_>, azure_env: Option<&azure::AzureEnv>) -> Value {
        let model = &self.selection.model;
        match (self.selection.api, azure_env) {
            (Api::AzureOpenAiResponses, Some(env)) => azure::body(model, request, env),
            (Api::OpenAiResponses | Api::AzureOpenAiResponses, _) => {
                responses::body(model, request)
            }
            (Api::OpenAiCompletions, _) => openai::body(model, request),
            (Api::AnthropicMessages, _) => anthropic::body(model, request),
            (Api::Google, _) => google::body(model, request),
            (Api::GoogleVertex, _) => vertex::body(model, request),
            (Api::BedrockConverseStream, _) => bedrock::body(model, request),
        }
    }

    /// A fresh stream decoder of the wire API (one per attempt).
    fn decoder(&self) -> Box<dyn StreamDecoder> {
        let model = &self.selection.model;
        match self.selection.api {
            Api::OpenAiCompletions => Box::new(openai::Decoder::new()),
            Api::AnthropicMessages => Box::new(anthropic::Decoder::new()),
            Api::OpenAiResponses | Api::AzureOpenAiResponses => {
                Box::new(responses::Decoder::new(&model.id))
            }
            Api::GoogleVertex if vertex::is_claude(&model.id) => {
                Box::new(anthropic::Decoder::new())
            }
            Api::Google | Api::GoogleVertex => Box::new(google::Decoder::new(&model.id)),
            Api::BedrockConverseStream => Box::new(bedrock::Decoder::new()),
        }
    }

    /// The provider's key for this call (`None`: none, where none is needed). Bedrock's is
    /// a bearer token, and without one the call is signed with AWS credentials (`aws`).
    fn key(&self, abort: &AbortFlag) -> Result<Option<String>, ProviderError> {
        let p = &self.selection.provider;
        let key = self
            .credentials
            .key_for(p, abort)
            .map_err(|e| config_or_aborted(e, abort))?;
        // Vertex finds its OAuth credentials itself (`vertex::auth`), Bedrock signs with AWS's.
        let own_auth = matches!(
            self.selection.api,
            Api::GoogleVertex | Api::BedrockConverseStream
        );
        if key.is_none() && !self.key_optional && !own_auth {
            return Err(ProviderError::Config(
                self.credentials.missing_key_message(p),
            ));
        }
        Ok(key)
    }

    /// Bedrock's credentials, region and endpoint for this call (`bearer`: its key, if any).
    fn aws(&self, bearer: Option<String>) -> Result<aws_config::Resolved, ProviderError> {
        let p = &self.selection.provider;
        aws_config::Sources::with_process(|src| {
            aws_config::resolve(&p.base_url, bearer, &p.name, src)
        })
        .map_err(ProviderError::Config)
    }

    /// The URL and headers of the wire API, then the provider's own headers over them, and the
    /// OAuth token among them, if any.
    fn endpoint(
        &self,
        key: Option<&str>,
        azure_env: Option<&azure::AzureEnv>,
        aws: Option<&aws_config::Resolved>,
        abort: &AbortFlag,
    ) -> Result<Endpoint, ProviderError> {
        let p = &self.selection.provider;
        let mut bearer = None;
        let (url, mut headers) = match (self.selection.api, azure_env) {
            (Api::BedrockConverseStream, _) => {
                let aws = aws.ok_or_else(|| {
                    ProviderError::Config("The AWS configuration was not read".to_owned())
                })?;
                (
                    bedrock::url(&aws.endpoint, &self.selection.model.id),
                    bedrock::headers(&aws.auth),
                )
            }
            (Api::AzureOpenAiResponses, Some(env)) => {
                let endpoint = azure::endpoint(&p.base_url, env).map_err(ProviderError::Config)?;
                (azure::url(&endpoint, env), azure::headers(key))
            }
            (Api::OpenAiResponses | Api::AzureOpenAiResponses, _) => {
                (responses::url(&p.base_url), responses::headers(key))
            }
            (Api::OpenAiCompletions, _) => (openai::url(&p.base_url), openai::headers(key)),
            (Api::AnthropicMessages, _) => (anthropic::url(&p.base_url), anthropic::headers(key)),
            (Api::Google, _) => (
                google::url(&p.base_url, &self.selection.model.id),
                google::headers(key),
            ),
            (Api::GoogleVertex, _) => {
                let (url, headers, token) = self.vertex_endpoint(key, abort)?;
                bearer = token;
                (url, headers)
            }
        };
        // models.json `authHeader`: the key as a bearer token too (the provider's and the
        // model's own `headers` still win).
        if let (true, Some(key)) = (p.auth_header, key) {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        for (name, raw) in p.headers.iter().chain(&self.selection.model.headers) {
            let value = resolve_value(raw, abort).map_err(|e| config_or_aborted(e, abort))?;
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            headers.push((name.clone(), value));
        }
        Ok((url, headers, bearer))
    }

    /// Vertex AI: express mode with an API key, else the project's endpoint with an OAuth
    /// token (exchanged, or cached from an earlier call).
    fn vertex_endpoint(
        &self,
        key: Option<&str>,
        abort: &AbortFlag,
    ) -> Result<Endpoint, ProviderError> {
        let env = vertex::env();
        let model = &self.selection.model.id;
        let base = &self.selection.provider.base_url;
        match vertex::auth(key, &env, model)? {
            vertex::Auth::Key(k) => Ok((
                vertex::url(base, None, model),
                vertex::headers(Some(k), None),
                None,
            )),
            vertex::Auth::OAuth(source) => {
                let (project, location) = vertex::scope(&env)?;
                let token =
                    google_auth::access_token(source, &self.google_tokens, &self.http, abort)?;
                Ok((
                    vertex::url(base, Some((&project, &location)), model),
                    vertex::headers(None, Some(&token)),
                    Some(token),
                ))
            }
        }
    }

    /// A model the catalogue does not know: its window is asked of the server (with only the
    /// headers that identify us: no body type or event-stream accept) and the client told.
    fn announce_assumed_defaults(
        &self,
        headers: &[(String, String)],
        abort: &AbortFlag,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<(), ProviderError> {
        let info_headers: Vec<(String, String)> = headers
            .iter()
            .filter(|(n, _)| {
                !n.eq_ignore_ascii_case("content-type") && !n.eq_ignore_ascii_case("accept")
            })
            .cloned()
            .collect();
        let (window, source) = self.window(&info_headers, abort);
        abort.check().map_err(|_| ProviderError::Aborted)?;
        on_event(StreamEvent::Notice(
            self.assumed_defaults_notice(window, source),
        ));
        Ok(())
    }
}

/// A call's URL, its headers, and the OAuth token among them (Vertex), if any.
type Endpoint = (String, Vec<(String, String)>, Option<String>);

/// A configuration error, unless the call was cancelled meanwhile (a `!command` key or header
/// cut short).
fn config_or_aborted(e: String, abort: &AbortFlag) -> ProviderError {
    if abort.is_aborted() {
        ProviderError::Aborted
    } else {
        ProviderError::Config(e)
    }
}

/// The request body's bytes; consumes the tree so it is freed at once.
fn encode(body: serde_json::Value) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(&body)
        .map_err(|e| ProviderError::Config(format!("Cannot encode the request: {e}")))
}

/// Images the model cannot take are replaced by a text placeholder in the request (the
/// wire modules do that); say so in the log once, for the messages new since the model's last
/// reply, so the substitution is never silent.
fn warn_images_omitted(label: &str, model: &ModelDef, messages: &[Message]) {
    if model.supports_images() {
        return;
    }
    let new_since_reply = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(_)))
        .map_or(messages, |i| &messages[i + 1..]);
    let n: usize = new_since_reply
        .iter()
        .map(|m| match m {
            Message::User { images, .. }
            | Message::ToolResult(ToolResultMessage { images, .. }) => images.len(),
            Message::Assistant(_) => 0,
        })
        .sum();
    if n > 0 {
        log::warn!(
            "{label}: {n} image(s) not sent: the model does not accept images (its \"input\" has no \"image\"); it gets a text placeholder instead"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    #[test]
    fn windows_from_server_descriptions() {
        let vllm = json!({"object": "list", "data": [
            {"id": "a", "max_model_len": 8192}, {"id": "b", "max_model_len": 4096}]});
        assert_eq!(window_from_models(&vllm, "b"), Some(4096));
        assert_eq!(window_from_models(&vllm, "c"), None, "two others: not ours");
        let one = json!({"data": [{"id": "model.gguf", "context_length": 16384}]});
        assert_eq!(window_from_models(&one, "anything"), Some(16384));
        let groq = json!({"data": [{"id": "g", "context_window": 131072}]});
        assert_eq!(window_from_models(&groq, "g"), Some(131072));
        let silent = json!({"data": [{"id": "o", "owned_by": "ollama"}]});
        assert_eq!(window_from_models(&silent, "o"), None);
        assert_eq!(window_from_models(&json!({"data": "x"}), "o"), None);
        let gemini = json!({"models": [
            {"name": "models/gemini-a", "inputTokenLimit": 1048576},
            {"name": "models/gemini-b", "inputTokenLimit": 32768}]});
        assert_eq!(window_from_models(&gemini, "gemini-b"), Some(32768));
        let props = json!({"default_generation_settings": {"n_ctx": 4096}});
        assert_eq!(window_from_props(&props), Some(4096));
        assert_eq!(window_from_props(&json!({"n_ctx": 2048})), Some(2048));
        assert_eq!(window_from_props(&json!({"n_ctx": 0})), None);
    }
}
