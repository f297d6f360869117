//! `RemoteProvider`: a `Provider` backed by an HTTP wire API. It resolves the key on every
//! request (so a key added to `auth.json` later is picked up), builds the body with the API
//! module, and streams the reply through the shared `HttpClient`.

use std::sync::Arc;

use super::config::{resolve_value, Api, Credentials, ModelDef, Selection};
use super::http::{HttpClient, HttpSettings, PostRequest};
use super::{anthropic, openai, ChatRequest, Message, Provider, ProviderError, Reply, StreamEvent};
use crate::abort::AbortFlag;

pub struct RemoteProvider {
    selection: Selection,
    credentials: Arc<Credentials>,
    /// A key is optional when the user pointed a built-in provider at their own server with
    /// `--base-url`, or a models.json provider has no `apiKey` (local vLLM, llama.cpp).
    key_optional: bool,
    http: HttpClient,
}

impl RemoteProvider {
    pub fn new(selection: Selection, credentials: Arc<Credentials>, key_optional: bool) -> Self {
        RemoteProvider {
            selection,
            credentials,
            key_optional,
            http: HttpClient::new(HttpSettings::from_env()),
        }
    }
}

impl Provider for RemoteProvider {
    fn label(&self) -> String {
        format!(
            "{}/{}",
            self.selection.provider.name, self.selection.model.id
        )
    }

    fn context_window(&self) -> Option<u64> {
        Some(self.selection.model.context_window).filter(|w| *w > 0)
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
        let p = &self.selection.provider;
        let model = &self.selection.model;
        let key = self.credentials.key_for(p).map_err(ProviderError::Config)?;
        if key.is_none() && !self.key_optional {
            return Err(ProviderError::Config(
                self.credentials.missing_key_message(p),
            ));
        }
        warn_images_omitted(&self.label(), model, request.messages);
        let (url, mut headers, body) = match self.selection.api {
            Api::OpenAiCompletions => (
                openai::url(&p.base_url),
                openai::headers(key.as_deref()),
                openai::body(model, request),
            ),
            Api::AnthropicMessages => (
                anthropic::url(&p.base_url),
                anthropic::headers(key.as_deref()),
                anthropic::body(model, request),
            ),
        };
        for (name, raw) in &p.headers {
            let value = resolve_value(raw).map_err(ProviderError::Config)?;
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            headers.push((name.clone(), value));
        }
        let body = serde_json::to_vec(&body)
            .map_err(|e| ProviderError::Config(format!("Cannot encode the request: {e}")))?;
        let label = self.label();
        let post = PostRequest {
            label: &label,
            url: &url,
            headers: &headers,
            body: &body,
        };
        match self.selection.api {
            Api::OpenAiCompletions => {
                self.http
                    .stream(&post, abort, openai::Decoder::new, on_event)
            }
            Api::AnthropicMessages => {
                self.http
                    .stream(&post, abort, anthropic::Decoder::new, on_event)
            }
        }
    }
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
            Message::User { images, .. } | Message::ToolResult { images, .. } => images.len(),
            Message::Assistant(_) => 0,
        })
        .sum();
    if n > 0 {
        log::warn!(
            "{label}: {n} image(s) not sent: the model does not accept images (its \"input\" has no \"image\"); it gets a text placeholder instead"
        );
    }
}
