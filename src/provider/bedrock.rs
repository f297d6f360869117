//! The `bedrock-converse-stream` wire API: Amazon Bedrock's Converse stream
//! (`POST <endpoint>/model/<model id>/converse-stream`), signed with SigV4 (`sigv4.rs`) or
//! sent with a Bedrock API key as a bearer token, answered in AWS's binary event-stream
//! framing (`event_stream.rs`, turned into named events by `frames.rs`). Where the
//! credentials, region and endpoint come from: `aws_config.rs`.
//!
//! The request: the system prompt as `system` blocks, the conversation as `user` /
//! `assistant` messages of content blocks (`text`, `image`, `toolUse`, `toolResult`,
//! `reasoningContent`), the tools as `toolConfig.tools[].toolSpec` with `inputSchema.json`,
//! `inferenceConfig.maxTokens`, and for Claude its thinking in `additionalModelRequestFields`
//! plus prompt-cache points. The stream: `messageStart`, `contentBlockStart` (a tool call's
//! id and name), `contentBlockDelta` (text, tool input JSON, reasoning text, signature or
//! redacted content), `contentBlockStop`, `messageStop` (the stop reason), `metadata` (the
//! usage), and exception events.

pub(crate) mod aws_config;
pub(crate) mod event_stream;
pub(crate) mod sigv4;

use serde_json::{Map, Value};

use super::config::ModelDef;
use super::http::{one_line, transient_event_status, Emit, StreamDecoder};
use super::parts::Parts;
use super::sse::SseEvent;
use super::{
    AssistantMessage, ChatRequest, FinishReason, Message, ProviderError, ReasoningBlock, Reply,
    StreamEvent, Thinking, ToolCall, ToolResultMessage, Usage,
};
use crate::base::json::json;
use aws_config::Auth;
use sigv4::AwsCredentials;

/// The SigV4 service name of the Bedrock runtime.
pub(crate) const SERVICE: &str = "bedrock";

/// The media type of the answer (and of what we accept).
pub(crate) const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// `maxTokens` for a model whose output limit nobody told us.
const UNKNOWN_MODEL_MAX_TOKENS: u64 = 4096;

/// The Converse stream URL of `model_id` (an id, an inference profile or an ARN, encoded as
/// one path segment).
pub(crate) fn url(endpoint: &str, model_id: &str) -> String {
    format!(
        "{}/model/{}/converse-stream",
        endpoint.trim_end_matches('/'),
        sigv4::uri_encode(model_id, false)
    )
}

/// The headers every attempt sends; a bearer token is one of them, a signature is made per
/// attempt (`signature_headers`).
pub(crate) fn headers(auth: &Auth) -> Vec<(String, String)> {
    let mut h = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), EVENT_STREAM.to_owned()),
    ];
    if let Auth::Bearer(token) = auth {
        h.push(("authorization".to_owned(), format!("Bearer {token}")));
    }
    h
}

/// `host`, `x-amz-date`, `x-amz-security-token` (temporary credentials) and `authorization`
/// for a POST of `body` to `url` at `now_secs` (seconds since the epoch). Signed: `content-type`,
/// `host`, `x-amz-date` and the token.
pub(crate) fn signature_headers(
    url: &str,
    body: &[u8],
    credentials: &AwsCredentials,
    region: &str,
    now_secs: u64,
) -> Vec<(String, String)> {
    let amz_date = amz_date(now_secs);
    let (host, path, query) = split_url(url);
    let mut signed = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("host".to_owned(), host.clone()),
        ("x-amz-date".to_owned(), amz_date.clone()),
    ];
    if let Some(token) = &credentials.session_token {
        signed.push(("x-amz-security-token".to_owned(), token.clone()));
    }
    let s = sigv4::sign(
        &sigv4::Request {
            method: "POST",
            path: &path,
            query: &query,
            headers: &signed,
            payload_sha256: &sigv4::sha256_hex(body),
        },
        &sigv4::Scope {
            amz_date: &amz_date,
            region,
            service: SERVICE,
        },
        credentials,
    );
    // The `Host` header is sent as signed, not left to the HTTP client to rebuild.
    let mut out = vec![
        ("host".to_owned(), host),
        ("x-amz-date".to_owned(), amz_date),
    ];
    if let Some(token) = &credentials.session_token {
        out.push(("x-amz-security-token".to_owned(), token.clone()));
    }
    out.push(("authorization".to_owned(), s.authorization));
    out
}

/// `YYYYMMDDTHHMMSSZ` in UTC.
fn amz_date(secs: u64) -> String {
    let (y, m, d) = crate::base::time::civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// The `Host` header HTTP clients send for `url` (no default port), its path and its query.
fn split_url(url: &str) -> (String, String, String) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let (authority, target) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = match (scheme, authority.rsplit_once(':')) {
        ("https", Some((h, "443"))) | ("http", Some((h, "80"))) => h,
        _ => authority,
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    (host.to_owned(), path.to_owned(), query.to_owned())
}

/// What a refused request's error says: which credentials AWS refused, after the status.
pub(crate) fn auth_failure(error: ProviderError, auth: &Auth) -> ProviderError {
    match error {
        ProviderError::Status { status, message } if status == 401 || status == 403 => {
            let source = match auth {
                Auth::Bearer(_) => "the Bedrock API key (bearer token)",
                Auth::SigV4 { source, .. } => source.as_str(),
            };
            ProviderError::Status {
                status,
                message: format!(
                    "AWS authentication failed: {message} (credentials from {source})"
                ),
            }
        }
        other => other,
    }
}

/// Whether `model` is Claude (by id, inference profile or name: an application inference
/// profile's ARN does not say, its models.json `name` may).
fn is_claude(model: &ModelDef) -> bool {
    let id = model.id.to_ascii_lowercase();
    id.contains("anthropic.claude")
        || id.contains("anthropic/claude")
        || model.name.to_ascii_lowercase().contains("claude")
}

/// The Claude models that think adaptively (`thinking.type: adaptive` with an effort) rather
/// than with a token budget, as upstream lists them.
fn adaptive_thinking(model: &ModelDef) -> bool {
    const FAMILIES: &[&str] = &[
        "opus-4-6",
        "opus-4-7",
        "opus-4-8",
        "opus-5",
        "sonnet-4-6",
        "sonnet-5",
        "fable-5",
        "mythos-5",
        "mythos-preview",
    ];
    [&model.id, &model.name].iter().any(|s| {
        let s = s.to_ascii_lowercase().replace([' ', '_', '.', ':'], "-");
        FAMILIES.iter().any(|f| s.contains(f))
    })
}

/// The effort of adaptive thinking per level (the models have no `minimal`; `xhigh` is not on
/// every model, `high` is).
fn effort(t: Thinking) -> &'static str {
    match t {
        Thinking::Off | Thinking::Minimal | Thinking::Low => "low",
        Thinking::Medium => "medium",
        Thinking::High | Thinking::XHigh => "high",
        Thinking::Max => "max",
    }
}

/// The thinking budget per level of the budget-based Claude models: settings
/// `thinkingBudgets`, else upstream's.
fn budget(t: Thinking, configured: &crate::config::settings::ThinkingBudgets) -> Option<u64> {
    if t == Thinking::Off {
        return None;
    }
    if let Some(b) = configured.of(t) {
        return Some(b);
    }
    match t {
        Thinking::Off => None,
        Thinking::Minimal => Some(1024),
        Thinking::Low => Some(2048),
        Thinking::Medium => Some(8192),
        Thinking::High | Thinking::XHigh | Thinking::Max => Some(16_384),
    }
}

/// `additionalModelRequestFields` for Claude's thinking, and the `maxTokens` it needs.
fn thinking_fields(model: &ModelDef, t: Thinking, max_tokens: u64) -> (Option<Value>, u64) {
    if !model.reasoning || !is_claude(model) || t == Thinking::Off {
        return (None, max_tokens);
    }
    if adaptive_thinking(model) {
        let fields = json!({"thinking": {"type": "adaptive", "display": "summarized"},
                            "output_config": {"effort": effort(t)}});
        return (Some(fields), max_tokens);
    }
    let Some(b) = budget(t, &super::thinking_budgets()) else {
        return (None, max_tokens);
    };
    // The budget stays below maxTokens, leaving room for the answer.
    let b = b.min(max_tokens.saturating_sub(1024)).max(1024);
    let fields = json!({"thinking": {"type": "enabled", "budget_tokens": b, "display": "summarized"},
                        "anthropic_beta": ["interleaved-thinking-2025-05-14"]});
    (Some(fields), max_tokens.max(b + 1024))
}

/// The image formats Converse takes, by media type.
fn image_format(mime: &str) -> Option<&'static str> {
    match mime {
        "image/png" => Some("png"),
        "image/jpeg" | "image/jpg" => Some("jpeg"),
        "image/gif" => Some("gif"),
        "image/webp" => Some("webp"),
        _ => None,
    }
}

/// Converse's `text` and `image` blocks (an image's bytes base64, as JSON carries blobs).
const PARTS: Parts = Parts {
    text: |text| json!({"text": text}),
    image: |i| match image_format(&i.mime_type) {
        Some(format) => json!({"image": {"format": format, "source": {"bytes": i.data}}}),
        None => {
            json!({"text": format!("(an image of type {} omitted: Bedrock takes png, jpeg, gif and webp)", i.mime_type)})
        }
    },
};

/// A tool call id as Bedrock accepts one (`[a-zA-Z0-9_-]{1,64}`): another API's ids (after a
/// switch of model) are mapped the same way in the call and in its result.
fn tool_use_id(id: &str) -> String {
    let mut s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        s.push('_');
    }
    s
}

/// The Converse request body for `req`.
pub(crate) fn body(model: &ModelDef, req: &ChatRequest<'_>) -> Value {
    let mut max_tokens = model.output_budget().unwrap_or(UNKNOWN_MODEL_MAX_TOKENS);
    if let Some(asked) = req.max_tokens {
        max_tokens = max_tokens.min(asked);
    }
    let (fields, max_tokens) = thinking_fields(model, req.thinking, max_tokens);
    let cache = is_claude(model);
    let mut body = Map::new();
    let mut messages = messages(model, req);
    if cache {
        // Claude on Bedrock caches the prefix up to a cache point: after the system prompt
        // and after the newest user message, as upstream places them.
        if let Some(last) = messages.last_mut().filter(|m| m["role"] == "user") {
            if let Some(content) = last["content"].as_array_mut() {
                content.push(json!({"cachePoint": {"type": "default"}}));
            }
        }
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.system.is_empty() {
        let mut system = vec![json!({"text": req.system})];
        if cache {
            system.push(json!({"cachePoint": {"type": "default"}}));
        }
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("inferenceConfig".into(), json!({"maxTokens": max_tokens}));
    if let Some(tools) = tool_config(req) {
        body.insert("toolConfig".into(), tools);
    }
    if let Some(fields) = fields {
        body.insert("additionalModelRequestFields".into(), fields);
    }
    Value::Object(body)
}

/// `toolConfig`: the request's tools; without any but with tool calls in the conversation
/// (Bedrock refuses `toolUse` blocks without a `toolConfig`), the names those calls used.
fn tool_config(req: &ChatRequest<'_>) -> Option<Value> {
    let spec = |name: &str, description: &str, schema: &Value| json!({"toolSpec": {"name": name, "description": description, "inputSchema": {"json": schema}}});
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| spec(&t.name, &t.description, &t.parameters))
        .collect();
    if tools.is_empty() {
        let mut names: Vec<&str> = req
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Assistant(a) => Some(a.tool_calls.iter().map(|c| c.name.as_str())),
                _ => None,
            })
            .flatten()
            .collect();
        names.sort_unstable();
        names.dedup();
        let any = json!({"type": "object"});
        tools = names
            .into_iter()
            .map(|n| spec(n, "(not available in this request)", &any))
            .collect();
    }
    (!tools.is_empty()).then(|| json!({"tools": tools}))
}

/// The conversation as Converse messages: consecutive same-role messages merged (tool results
/// and the next prompt are one user message; Bedrock wants strict alternation).
fn messages(model: &ModelDef, req: &ChatRequest<'_>) -> Vec<Value> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in req.messages {
        let (role, blocks) = match message {
            Message::User { text, images } => {
                let mut b = PARTS.images(model, images);
                if !text.trim().is_empty() {
                    b.push(json!({"text": text}));
                }
                ("user", b)
            }
            Message::Assistant(a) => ("assistant", assistant_blocks(a)),
            Message::ToolResult(r) => ("user", vec![tool_result(model, r)]),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, b)) if *last == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A reply's blocks: its signed and redacted reasoning first (Claude checks the signature),
/// then its text, then its tool calls. Unsigned thinking cannot be replayed and is left out.
fn assistant_blocks(a: &AssistantMessage) -> Vec<Value> {
    let mut b: Vec<Value> = a
        .reasoning_blocks
        .iter()
        .filter_map(|r| match r {
            ReasoningBlock::Signed {
                thinking,
                signature,
            } => Some(json!({"reasoningContent": {"reasoningText": {"text": thinking, "signature": signature}}})),
            ReasoningBlock::Redacted { data } => {
                Some(json!({"reasoningContent": {"redactedContent": data}}))
            }
            ReasoningBlock::ResponsesItem { .. } | ReasoningBlock::GeminiPart { .. } => None,
        })
        .collect();
    if !a.text.trim().is_empty() {
        b.push(json!({"text": a.text}));
    }
    for c in &a.tool_calls {
        let input = if c.arguments.is_object() {
            c.arguments.clone()
        } else {
            json!({})
        };
        b.push(
            json!({"toolUse": {"toolUseId": tool_use_id(&c.id), "name": c.name, "input": input}}),
        );
    }
    b
}

fn tool_result(model: &ModelDef, r: &ToolResultMessage) -> Value {
    let text = match (r.text.is_empty(), r.is_error) {
        (true, true) => "(tool error)",
        (true, false) => "(no output)",
        (false, _) => r.text.as_str(),
    };
    let mut content = vec![json!({"text": text})];
    content.extend(PARTS.images(model, &r.images));
    json!({"toolResult": {"toolUseId": tool_use_id(&r.call_id), "content": content,
                          "status": if r.is_error { "error" } else { "success" }}})
}

#[derive(Debug)]
enum Block {
    Text,
    Reasoning {
        text: String,
        signature: String,
        redacted: String,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

/// Assembles one streamed reply from the events `frames.rs` makes of the event stream.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    message: AssistantMessage,
    /// Content blocks by `contentBlockIndex`, in the order they began.
    blocks: Vec<(u64, Block)>,
    usage: Usage,
    stop_reason: Option<String>,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder::default()
    }

    /// The block at `index`, begun as `new()` if this is its first event.
    fn block(&mut self, index: u64, new: impl FnOnce() -> Block) -> &mut Block {
        let at = match self.blocks.iter().rposition(|(i, _)| *i == index) {
            Some(at) => at,
            None => {
                self.blocks.push((index, new()));
                self.blocks.len() - 1
            }
        };
        &mut self.blocks[at].1
    }

    fn on_start(&mut self, v: &Value, emit: Emit<'_>) {
        let index = v["contentBlockIndex"].as_u64().unwrap_or(0);
        if let Some(tool) = v.pointer("/start/toolUse") {
            let field = |k: &str| tool[k].as_str().unwrap_or("").to_owned();
            let (id, name) = (field("toolUseId"), field("name"));
            emit(StreamEvent::ToolCallStart {
                id: id.clone(),
                name: name.clone(),
            });
            self.blocks.push((
                index,
                Block::ToolUse {
                    id,
                    name,
                    json: String::new(),
                },
            ));
        }
    }

    fn on_delta(&mut self, v: &Value, emit: Emit<'_>) {
        let index = v["contentBlockIndex"].as_u64().unwrap_or(0);
        let delta = &v["delta"];
        if let Some(t) = delta["text"].as_str() {
            self.block(index, || Block::Text);
            if !t.is_empty() {
                self.message.text.push_str(t);
                emit(StreamEvent::Text(super::delta_pool::owned(t)));
            }
        } else if let Some(part) = delta.pointer("/toolUse/input").and_then(Value::as_str) {
            if let Block::ToolUse { json, id, .. } = self.block(index, || Block::Text) {
                json.push_str(part);
                if !part.is_empty() {
                    let (id, delta) = (id.clone(), part.to_owned());
                    emit(StreamEvent::ToolCallDelta { id, delta });
                }
            }
        } else if let Some(r) = delta.get("reasoningContent") {
            let new = || Block::Reasoning {
                text: String::new(),
                signature: String::new(),
                redacted: String::new(),
            };
            let s = |k: &str| r[k].as_str().unwrap_or("");
            let (t, sig, red) = (s("text"), s("signature"), s("redactedContent"));
            if let Block::Reasoning {
                text,
                signature,
                redacted,
            } = self.block(index, new)
            {
                text.push_str(t);
                signature.push_str(sig);
                redacted.push_str(red);
            }
            if !t.is_empty() {
                self.message.thinking.push_str(t);
                emit(StreamEvent::Thinking(t.to_owned()));
            }
        }
    }
}

/// An exception event (`throttlingException`, …) as the error it stands for: throttling and
/// the server's own failures are transient (the call is made again), the rest final.
fn exception(kind: &str, v: &Value) -> ProviderError {
    let message = v["message"]
        .as_str()
        .or_else(|| v["Message"].as_str())
        .unwrap_or("no message");
    let text = one_line(&format!("{message} ({kind})"));
    // (The event names are the union's members, `throttlingException`; the same errors as
    // answers are types, `ThrottlingException`.)
    let status = match kind.to_ascii_lowercase().as_str() {
        "throttlingexception" => Some(429),
        "serviceunavailableexception" => Some(503),
        "internalserverexception" | "modelstreamerrorexception" => Some(500),
        _ => transient_event_status(None, None),
    };
    match status {
        Some(status) => ProviderError::Status {
            status,
            message: text,
        },
        None => ProviderError::Stream(text),
    }
}

impl StreamDecoder for Decoder {
    fn on_event(&mut self, event: &SseEvent, emit: Emit<'_>) -> Result<bool, ProviderError> {
        let v: Value = if event.data.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&event.data).map_err(|e| ProviderError::invalid_json(&e))?
        };
        match event.event.as_str() {
            "contentBlockStart" => self.on_start(&v, emit),
            "contentBlockDelta" => self.on_delta(&v, emit),
            "messageStop" => {
                self.stop_reason = Some(v["stopReason"].as_str().unwrap_or("").to_owned());
            }
            "metadata" => {
                let u = &v["usage"];
                let n = |k: &str| u[k].as_u64().unwrap_or(0);
                self.usage = Usage {
                    input: n("inputTokens"),
                    output: n("outputTokens"),
                    cache_read: n("cacheReadInputTokens"),
                    cache_write: n("cacheWriteInputTokens"),
                };
                // The usage comes last, after the stop.
                return Ok(self.stop_reason.is_some());
            }
            "error" => {
                let message = v["message"].as_str().unwrap_or("unknown error");
                let code = v["code"].as_str().map(str::to_owned);
                return Err(ProviderError::Stream(super::http::message_and_code(
                    Some(message),
                    code,
                    "error",
                )));
            }
            kind if kind.ends_with("Exception") || kind == "exception" => {
                return Err(exception(kind, &v));
            }
            // messageStart, contentBlockStop and future events carry nothing we need.
            _ => {}
        }
        Ok(false)
    }

    fn finish(mut self: Box<Self>) -> Result<Reply, ProviderError> {
        let Some(stop) = self.stop_reason.take() else {
            return Err(ProviderError::ended_early());
        };
        for (_, block) in std::mem::take(&mut self.blocks) {
            match block {
                Block::ToolUse { id, name, json } => {
                    let arguments = super::arguments::from_stream(json);
                    self.message.tool_calls.push(ToolCall {
                        id,
                        name,
                        arguments,
                    });
                }
                Block::Reasoning { redacted, .. } if !redacted.is_empty() => self
                    .message
                    .reasoning_blocks
                    .push(ReasoningBlock::Redacted { data: redacted }),
                Block::Reasoning {
                    text, signature, ..
                } if !signature.is_empty() => {
                    self.message.reasoning_blocks.push(ReasoningBlock::Signed {
                        thinking: text,
                        signature,
                    })
                }
                Block::Reasoning { .. } | Block::Text => {}
            }
        }
        let finish = match stop.as_str() {
            "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "tool_use" => FinishReason::ToolCalls,
            "guardrail_intervened" | "content_filtered" => {
                return Err(ProviderError::Stream(format!(
                    "Bedrock stopped the reply: {stop}"
                )))
            }
            _ => FinishReason::Stop,
        };
        Ok(Reply::calling_tools(self.message, self.usage, finish))
    }
}

#[cfg(test)]
mod tests;
