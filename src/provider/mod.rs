//! The model side of a turn: a provider-neutral conversation, the `Provider` trait, and the
//! provider error type.
//!
//! Providers know nothing about ACP or JSON-RPC. They stream deltas through a callback, check
//! the `AbortFlag` at every read, and return the assembled assistant reply.

pub(crate) mod anthropic;
pub(crate) mod arguments;
pub(crate) mod azure;
pub(crate) mod bedrock;
mod chunk_scan;
pub(crate) mod config;
pub(crate) mod delta_pool;
pub(crate) mod failover;
mod frames;
pub(crate) mod google;
pub(crate) mod google_auth;
pub(crate) mod http;
pub(crate) mod menu;
pub(crate) mod openai;
pub(crate) mod parts;
pub(crate) mod remote;
pub(crate) mod responses;
pub(crate) mod scripted;
pub(crate) mod sse;
#[cfg(test)]
pub(crate) mod tests_support;
pub(crate) mod vertex;

use serde_json::Value;

use crate::base::abort::AbortFlag;
use crate::base::content::{Image, ToolSpec};
use crate::base::telemetry::{self, Kind, Span};

/// One message of the conversation, in the shape every wire API can be built from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    User { text: String, images: Vec<Image> },
    Assistant(AssistantMessage),
    ToolResult(ToolResultMessage),
}

/// A tool's answer to one call, as the model reads it on the next request.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ToolResultMessage {
    pub call_id: String,
    pub name: String,
    pub text: String,
    pub is_error: bool,
    pub images: Vec<Image>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AssistantMessage {
    pub text: String,
    pub thinking: String,
    /// Reasoning the API wants back verbatim with the next request, in the order it came
    /// (Anthropic: signed `thinking` blocks, even with empty text, and `redacted_thinking`;
    /// OpenAI Responses: the reply's output items). Each API replays only its own kind.
    pub reasoning_blocks: Vec<ReasoningBlock>,
    pub tool_calls: Vec<ToolCall>,
}

/// One opaque reasoning block, replayed exactly as received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReasoningBlock {
    /// Visible thinking with the signature that lets the API check it was not altered.
    Signed { thinking: String, signature: String },
    /// Thinking the API encrypted (`redacted_thinking`); `data` is opaque.
    Redacted { data: String },
    /// One output item of an OpenAI Responses reply (reasoning with its `encrypted_content`,
    /// and the message and function-call items it pairs with by id), as received. Only `model`
    /// can read the encrypted reasoning, so no other model is sent it.
    ResponsesItem { model: String, item: Value },
    /// One part of a Gemini reply (text, thought or function call, with its
    /// `thoughtSignature`), as received and merged per block. Only `model` is sent it back.
    GeminiPart { model: String, part: Value },
}

impl ReasoningBlock {
    /// The opaque parts `model` wrote among `blocks`, in order; `own` reads a block of the
    /// caller's API as (model, part) and skips the others.
    pub(crate) fn own_parts<'a>(
        blocks: &'a [ReasoningBlock],
        model: &str,
        own: fn(&ReasoningBlock) -> Option<(&String, &Value)>,
    ) -> Vec<&'a Value> {
        blocks
            .iter()
            .filter_map(own)
            .filter(|(m, _)| *m == model)
            .map(|(_, part)| part)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed arguments; a model that sends malformed JSON gets `Value::String(raw)`.
    pub arguments: Value,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    pub(crate) fn add(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }

    /// What was used since `earlier` (a snapshot of the same running total).
    pub(crate) fn minus(self, earlier: Usage) -> Usage {
        Usage {
            input: self.input.saturating_sub(earlier.input),
            output: self.output.saturating_sub(earlier.output),
            cache_read: self.cache_read.saturating_sub(earlier.cache_read),
            cache_write: self.cache_write.saturating_sub(earlier.cache_write),
        }
    }
}

/// A model's prices in USD per million tokens (models.json `cost`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Prices {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

impl Prices {
    /// What one reply's usage cost, in USD.
    pub(crate) fn cost(&self, usage: &Usage) -> f64 {
        (usage.input as f64 * self.input
            + usage.output as f64 * self.output
            + usage.cache_read as f64 * self.cache_read
            + usage.cache_write as f64 * self.cache_write)
            / 1_000_000.0
    }

    /// `{input, output, cacheRead, cacheWrite}` (missing keys cost nothing); `None` unless an
    /// object.
    pub(crate) fn from_json(v: &Value) -> Option<Prices> {
        let o = v.as_object()?;
        let get = |k: &str| o.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        Some(Prices {
            input: get("input"),
            output: get("output"),
            cache_read: get("cacheRead"),
            cache_write: get("cacheWrite"),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishReason {
    Stop,
    /// Cut off by the output token limit.
    Length,
    ToolCalls,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub message: AssistantMessage,
    pub usage: Usage,
    pub finish: FinishReason,
}

impl Reply {
    /// A finished reply from APIs that report a plain stop for a reply that calls tools: the
    /// calls make it a `ToolCalls` finish (a cut-off one stays `Length`).
    pub(crate) fn calling_tools(
        message: AssistantMessage,
        usage: Usage,
        finish: FinishReason,
    ) -> Self {
        let finish = if finish == FinishReason::Stop && !message.tool_calls.is_empty() {
            FinishReason::ToolCalls
        } else {
            finish
        };
        Reply {
            message,
            usage,
            finish,
        }
    }
}

/// A reply being assembled by a decoder whose API sends opaque parts back (Gemini parts,
/// Responses items): the model asked, which alone is sent those parts again; the message so
/// far; the last usage reported; and the stop, once the stream says it.
#[derive(Debug, Default)]
pub(crate) struct Draft {
    pub(crate) model: String,
    pub(crate) message: AssistantMessage,
    pub(crate) usage: Usage,
    pub(crate) finish: Option<FinishReason>,
}

impl Draft {
    pub(crate) fn new(model: &str) -> Draft {
        Draft {
            model: model.to_owned(),
            ..Draft::default()
        }
    }

    /// The finished reply, its opaque `parts` kept as blocks made by `tag` when one of them
    /// `needs_replay` (without such a part the plain rebuild says the same); an error when the
    /// stream ended before the model said why it stopped.
    pub(crate) fn reply(
        mut self,
        parts: Vec<Value>,
        needs_replay: fn(&Value) -> bool,
        tag: fn(String, Value) -> ReasoningBlock,
    ) -> Result<Reply, ProviderError> {
        let Some(finish) = self.finish else {
            return Err(ProviderError::ended_early());
        };
        if parts.iter().any(needs_replay) {
            let model = self.model;
            self.message.reasoning_blocks =
                parts.into_iter().map(|v| tag(model.clone(), v)).collect();
        }
        Ok(Reply::calling_tools(self.message, self.usage, finish))
    }
}

/// What a provider reports while a call runs: streamed deltas, forwarded to the client as they
/// arrive, and facts about the call itself (retries, advisories).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StreamEvent {
    Text(String),
    Thinking(String),
    /// An attempt failed before any delta and another one follows after `delay`.
    Retrying(RetryWait),
    /// A retried call succeeded on retry number `attempt`.
    Recovered {
        attempt: u32,
    },
    /// The server broke off a reply it had started streaming with a transient error event
    /// (llama.cpp's `500 … does not match the expected … format`, an overloaded upstream):
    /// what this attempt streamed is void, a `Retrying` wait follows and the call is made
    /// again. The turn closes the calls it announced from the void attempt.
    Restarted,
    /// The last of `attempt` retries failed too; the call fails with `error`.
    RetriesExhausted {
        attempt: u32,
        error: String,
    },
    /// The model named a tool call (`id` is the one the reply will carry); its arguments may
    /// still be on the way.
    ToolCallStart {
        id: String,
        name: String,
    },
    /// More of a named call's arguments: raw JSON text, not parseable until the call is done.
    ToolCallDelta {
        id: String,
        delta: String,
    },
    /// An advisory about the configuration, e.g. defaults assumed for an unknown model. The
    /// provider repeats it on every call; whoever shows it decides how often.
    Notice(Notice),
}

/// One wait before a retry. `attempt` counts retries from 1 up to `max_attempts`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RetryWait {
    pub attempt: u32,
    pub max_attempts: u32,
    pub delay: std::time::Duration,
    /// Why: `rate_limited`, `server_error`, `connection` or `stream_dropped`.
    pub reason: &'static str,
    /// The failed attempt's error text.
    pub error: String,
}

/// An advisory in the shape of ACP's `notice` update (`severity`, `title`, `description`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Notice {
    /// `info`, `warning` or `error`.
    pub severity: &'static str,
    pub title: String,
    pub description: Option<String>,
}

/// Defined in the leaf `thinking` (settings read it too); re-exported under its usual path.
pub(crate) use crate::config::thinking::Thinking;

/// Settings `thinkingBudgets`, set once at start-up (`setup`), read by the APIs that take a
/// thinking budget in tokens (`anthropic`, `google`).
static THINKING_BUDGETS: std::sync::OnceLock<crate::config::settings::ThinkingBudgets> =
    std::sync::OnceLock::new();

/// Records the settings' thinking budgets (the first call wins).
pub(crate) fn set_thinking_budgets(budgets: crate::config::settings::ThinkingBudgets) {
    let _ = THINKING_BUDGETS.set(budgets);
}

/// The settings' thinking budgets (none set: every API's defaults).
pub(crate) fn thinking_budgets() -> crate::config::settings::ThinkingBudgets {
    THINKING_BUDGETS.get().copied().unwrap_or_default()
}

/// The share of a known window an unknown model's reply may take (1/`REPLY_SHARE`); compaction
/// reserves the same share (`compaction::RESERVE_SHARE`), so a prompt under its threshold plus
/// one reply fits the window.
pub(crate) const REPLY_SHARE: u64 = 4;

/// Everything one model call needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    pub thinking: Thinking,
    /// Which agent of the session asks: `main`, or a subagent's name. Wire APIs ignore it; the
    /// scripted provider routes replies by it.
    pub agent: &'a str,
    /// A tighter output budget than the model's own (a compaction summary), if any.
    pub max_tokens: Option<u64>,
    /// This logical call's id: every HTTP attempt of it carries it as `X-ACP-Model-Request-ID`
    /// and `Idempotency-Key` (`semantic::new_request_id`), and semantic edges name it.
    pub request_id: &'a str,
    /// The OpenAI service tier to ask for (`service_tier`; the Responses API sends it).
    pub service_tier: Option<&'a str>,
}

/// Why a model call failed. The `Display` text is what the client sees after
/// `prime-agent turn failed: `, so it carries the HTTP status and the provider's own words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ProviderError {
    /// The turn was cancelled while the call ran.
    Aborted,
    /// The server answered with a non-success status.
    Status { status: u16, message: String },
    /// Connecting, TLS, DNS, or the connection dropped or stalled.
    Transport(String),
    /// The stream could not be decoded, or the provider sent an error event.
    Stream(String),
    /// Missing key or unusable configuration, discovered at request time.
    Config(String),
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderError::Aborted => write!(f, "Request was aborted"),
            ProviderError::Status { status, message } => write!(f, "{status} {message}"),
            ProviderError::Transport(m) | ProviderError::Stream(m) | ProviderError::Config(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for ProviderError {}

impl ProviderError {
    /// The stream ended before the reply's end was seen: the connection dropped.
    pub(crate) fn ended_early() -> ProviderError {
        ProviderError::Stream(
            "The model stream ended before the reply was complete (connection dropped?)".to_owned(),
        )
    }

    /// A stream event that is not JSON.
    pub(crate) fn invalid_json(err: &serde_json::Error) -> ProviderError {
        ProviderError::Stream(format!("The model stream sent invalid JSON: {err}"))
    }

    /// The prompt error's `data.kind` for this failure (docs/harnesses.md): `model_transport`
    /// for a connection that failed, dropped or stalled (a harness may retry the rollout),
    /// `model_http` for an error status from the server, `model_protocol` for a stream that
    /// could not be read or an error event in it, `model_config` for a missing key or an
    /// unusable configuration.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ProviderError::Transport(_) => "model_transport",
            ProviderError::Status { .. } => "model_http",
            ProviderError::Stream(_) => "model_protocol",
            ProviderError::Config(_) => "model_config",
            ProviderError::Aborted => "cancelled",
        }
    }

    /// Whether the provider refused the request because it does not fit the model's context
    /// window (then a compaction and one retry may help; behaviour spec §5.2).
    pub(crate) fn is_context_overflow(&self) -> bool {
        match self {
            ProviderError::Status { message, .. }
            | ProviderError::Stream(message)
            | ProviderError::Transport(message) => http::failure::is_context_overflow(message),
            ProviderError::Aborted | ProviderError::Config(_) => false,
        }
    }
}

/// One model call under its own span (`chat {model}`, a client span with the GenAI semantic
/// conventions' attributes), which is the thread's current context meanwhile, so the HTTP
/// layer sends its `traceparent`. Every model call of a turn goes through here.
pub(crate) fn traced_stream(
    provider: &dyn Provider,
    request: &ChatRequest<'_>,
    abort: &AbortFlag,
    on_event: &mut dyn FnMut(StreamEvent),
) -> Result<Reply, ProviderError> {
    let mut span = if telemetry::recording() {
        let label = provider.label();
        let (system, model) = label.split_once('/').unwrap_or(("", label.as_str()));
        let mut span = Span::child(&format!("chat {model}"), Kind::Client);
        span.set("gen_ai.operation.name", "chat");
        span.set("gen_ai.provider.name", system);
        span.set("gen_ai.system", system);
        span.set("gen_ai.request.model", model);
        span.set("gen_ai.agent.name", request.agent);
        span.set("prime_agent.model_request_id", request.request_id);
        if let Some(max) = request.max_tokens {
            span.set("gen_ai.request.max_tokens", max);
        }
        span
    } else {
        Span::child("chat", Kind::Client)
    };
    let _current = telemetry::enter(span.context());
    let mut retries = 0u32;
    let result = provider.stream(request, abort, &mut |event| {
        if let StreamEvent::Retrying(_) = &event {
            retries += 1;
        }
        on_event(event);
    });
    if span.is_recording() {
        span.set("prime_agent.retries", retries);
        match &result {
            Ok(reply) => {
                span.set("gen_ai.usage.input_tokens", reply.usage.input);
                span.set("gen_ai.usage.output_tokens", reply.usage.output);
                let finish = match reply.finish {
                    FinishReason::Stop => "stop",
                    FinishReason::Length => "length",
                    FinishReason::ToolCalls => "tool_calls",
                };
                span.set("gen_ai.response.finish_reasons", finish);
            }
            Err(e) => {
                span.set("error.type", e.kind());
                span.fail(e.to_string());
            }
        }
    }
    result
}

/// A session's model, or why it has none (each prompt then fails with the text).
pub(crate) type ProviderChoice = Result<std::sync::Arc<dyn Provider>, String>;

/// A model backend. `stream` blocks the calling (turn) thread until the reply is complete, the
/// call fails, or `abort` is set, whichever comes first.
pub(crate) trait Provider: Send + Sync {
    /// `provider/model`, for logs and the system prompt.
    fn label(&self) -> String;

    /// The model's context window in tokens, when known (for ACP `usage_update`).
    fn context_window(&self) -> Option<u64> {
        None
    }

    /// The model's prices, when known (for `usage_update.cost`).
    fn prices(&self) -> Option<Prices> {
        None
    }

    /// Whether the model takes image input. A prompt with images for a model that does not is
    /// refused up front, so the user learns the image did not reach it.
    fn accepts_images(&self) -> bool {
        true
    }

    /// Whether the model reasons, so a reasoning level is worth offering (ACP `thought_level`).
    fn reasoning(&self) -> bool {
        false
    }

    /// Whether the server keeps a prompt-prefix cache that a request of the same shape
    /// re-arms (settings `cacheKeepAlive` sends such requests only then).
    fn caches_prompts(&self) -> bool {
        false
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
        abort: &AbortFlag,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, ProviderError>;
}
