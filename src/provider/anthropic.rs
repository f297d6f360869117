//! The `anthropic-messages` wire API (Anthropic, and compatible endpoints such as Fireworks'):
//! the request body with content blocks, and a decoder for the typed stream events.

use crate::base::json::json;
use serde_json::{Map, Value};

use super::config::ModelDef;
use super::http::{one_line, Emit, StreamDecoder};
use super::parts::{stream_headers, Parts};
use super::sse::SseEvent;
use super::{
    AssistantMessage, ChatRequest, FinishReason, Message, ProviderError, ReasoningBlock, Reply,
    StreamEvent, Thinking, ToolCall, ToolResultMessage, Usage,
};

pub(crate) const VERSION: &str = "2023-06-01";

/// `max_tokens` for a model whose output limit nobody told us.
const UNKNOWN_MODEL_MAX_TOKENS: u64 = 4096;

pub(crate) fn url(base_url: &str) -> String {
    format!("{}/v1/messages", base_url.trim_end_matches('/'))
}

pub(crate) fn headers(key: Option<&str>) -> Vec<(String, String)> {
    let mut h = stream_headers(key.map(|k| ("x-api-key", k.to_owned())));
    h.push(("anthropic-version".to_owned(), VERSION.to_owned()));
    h
}

/// Thinking budget in tokens per level: settings `thinkingBudgets`, else ours.
fn budget(t: Thinking, configured: &crate::config::settings::ThinkingBudgets) -> Option<u64> {
    if let Some(b) = configured.of(t) {
        return Some(b);
    }
    match t {
        Thinking::Off => None,
        Thinking::Minimal => Some(1024),
        Thinking::Low => Some(2048),
        Thinking::Medium => Some(8192),
        Thinking::High => Some(16_384),
        Thinking::XHigh | Thinking::Max => Some(31_000),
    }
}

/// The Messages API's `text` and base64 `image` blocks.
const PARTS: Parts = Parts {
    text: |text| json!({"type": "text", "text": text}),
    image: |i| json!({"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": i.data}}),
};

/// The Messages API request body for `req`.
pub(crate) fn body(model: &ModelDef, req: &ChatRequest<'_>) -> Value {
    let messages = messages(model, req);
    // The Messages API requires `max_tokens`; for a model of unknown limits take a budget
    // that fits even a small window.
    let mut max_tokens = model.output_budget().unwrap_or(UNKNOWN_MODEL_MAX_TOKENS);
    if let Some(asked) = req.max_tokens {
        // A summary request's budget (thinking may still raise it, below).
        max_tokens = max_tokens.min(asked);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    body.insert("stream".into(), json!(true));
    if !req.system.is_empty() {
        body.insert("system".into(), json!(req.system));
    }
    if model.reasoning {
        if let Some(b) = budget(req.thinking, &super::thinking_budgets()) {
            // The budget must stay below max_tokens, leaving room for the answer.
            let b = b.min(max_tokens.saturating_sub(1024)).max(1024);
            max_tokens = max_tokens.max(b + 1024);
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": b}),
            );
        }
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    Value::Object(body)
}

/// The conversation as Messages API turns: consecutive same-role messages merged.
fn messages(model: &ModelDef, req: &ChatRequest<'_>) -> Vec<Value> {
    // (role, blocks); consecutive same-role messages are merged because tool results are
    // user-role blocks and the API wants strict alternation.
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in req.messages {
        let (role, blocks) = match message {
            Message::User { text, images: imgs } => {
                let mut b = PARTS.images(model, imgs);
                if !text.is_empty() {
                    b.push(json!({"type": "text", "text": text}));
                }
                ("user", b)
            }
            Message::Assistant(a) => {
                // With thinking on, the API requires the reply's signed and redacted thinking
                // back before its tool_use, verbatim and in order (unsigned thinking cannot
                // be replayed and is left out).
                let mut b: Vec<Value> = a
                    .reasoning_blocks
                    .iter()
                    .filter_map(|r| match r {
                        ReasoningBlock::Signed {
                            thinking,
                            signature,
                        } => Some(json!({"type": "thinking", "thinking": thinking, "signature": signature})),
                        ReasoningBlock::Redacted { data } => {
                            Some(json!({"type": "redacted_thinking", "data": data}))
                        }
                        // Another API's reasoning (the session switched models).
                        ReasoningBlock::ResponsesItem { .. } | ReasoningBlock::GeminiPart { .. } => {
                            None
                        }
                    })
                    .collect();
                if !a.text.is_empty() {
                    b.push(json!({"type": "text", "text": a.text}));
                }
                for c in &a.tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    b.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
                }
                ("assistant", b)
            }
            Message::ToolResult(ToolResultMessage {
                call_id,
                text,
                is_error,
                images: imgs,
                ..
            }) => {
                let mut content = vec![
                    json!({"type": "text", "text": if text.is_empty() { "(no output)" } else { text }}),
                ];
                content.extend(PARTS.images(model, imgs));
                (
                    "user",
                    vec![json!({"type": "tool_result", "tool_use_id": call_id,
                                "content": content, "is_error": is_error})],
                )
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, b)) if *last == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    messages
}

#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        text: String,
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

/// Assembles one streamed reply.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    message: AssistantMessage,
    /// Content blocks by stream index.
    blocks: Vec<(u64, Block)>,
    usage: Usage,
    stop_reason: Option<String>,
    done: bool,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder::default()
    }

    fn block_mut(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }
}

fn read_usage(u: &Value, usage: &mut Usage) {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    if let Some(v) = n("input_tokens") {
        usage.input = v;
    }
    if let Some(v) = n("output_tokens") {
        usage.output = v;
    }
    if let Some(v) = n("cache_read_input_tokens") {
        usage.cache_read = v;
    }
    if let Some(v) = n("cache_creation_input_tokens") {
        usage.cache_write = v;
    }
}

impl StreamDecoder for Decoder {
    fn on_event(&mut self, event: &SseEvent, emit: Emit<'_>) -> Result<bool, ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let v: Value =
            serde_json::from_str(&event.data).map_err(|e| ProviderError::invalid_json(&e))?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    read_usage(u, &mut self.usage);
                }
            }
            "content_block_start" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let cb = v.get("content_block").cloned().unwrap_or(Value::Null);
                let field = |k: &str| cb.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                let block = match cb.get("type").and_then(Value::as_str) {
                    Some("text") => Block::Text,
                    Some("thinking") => {
                        let text = field("thinking");
                        if !text.is_empty() {
                            self.message.thinking.push_str(&text);
                            emit(StreamEvent::Thinking(text.clone()));
                        }
                        Block::Thinking {
                            text,
                            signature: field("signature"),
                        }
                    }
                    Some("redacted_thinking") => Block::RedactedThinking {
                        data: field("data"),
                    },
                    Some("tool_use") => {
                        let (id, name) = (field("id"), field("name"));
                        emit(StreamEvent::ToolCallStart {
                            id: id.clone(),
                            name: name.clone(),
                        });
                        Block::ToolUse {
                            id,
                            name,
                            json: String::new(),
                        }
                    }
                    _ => Block::Other,
                };
                self.blocks.push((index, block));
            }
            "content_block_delta" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                let s = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or("");
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = s("text");
                        if !t.is_empty() {
                            self.message.text.push_str(t);
                            emit(StreamEvent::Text(super::delta_pool::owned(t)));
                        }
                    }
                    Some("thinking_delta") => {
                        let t = s("thinking").to_owned();
                        if !t.is_empty() {
                            self.message.thinking.push_str(&t);
                            if let Some(Block::Thinking { text, .. }) = self.block_mut(index) {
                                text.push_str(&t);
                            }
                            emit(StreamEvent::Thinking(t));
                        }
                    }
                    Some("signature_delta") => {
                        let part = s("signature").to_owned();
                        if let Some(Block::Thinking { signature, .. }) = self.block_mut(index) {
                            signature.push_str(&part);
                        }
                    }
                    Some("input_json_delta") => {
                        let part = s("partial_json").to_owned();
                        if let Some(Block::ToolUse { json, id, .. }) = self.block_mut(index) {
                            json.push_str(&part);
                            if !part.is_empty() {
                                let id = id.clone();
                                emit(StreamEvent::ToolCallDelta { id, delta: part });
                            }
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    read_usage(u, &mut self.usage);
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            "error" => {
                let err = v.get("error").unwrap_or(&v);
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error");
                let kind = err.get("type").and_then(Value::as_str).unwrap_or("error");
                let text = one_line(&format!("{message} ({kind})"));
                // `overloaded_error` and `api_error` mid-stream are transient: made again.
                return Err(
                    match crate::provider::http::transient_event_status(None, Some(kind)) {
                        Some(status) => ProviderError::Status {
                            status,
                            message: text,
                        },
                        None => ProviderError::Stream(text),
                    },
                );
            }
            // ping, content_block_stop and future event types carry nothing we need.
            _ => {}
        }
        Ok(false)
    }

    fn finish(mut self: Box<Self>) -> Result<Reply, ProviderError> {
        if !self.done {
            return Err(ProviderError::ended_early());
        }
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
                // A signed block is kept even with empty text: the API checks the signature.
                Block::Thinking { text, signature } if !signature.is_empty() => {
                    self.message.reasoning_blocks.push(ReasoningBlock::Signed {
                        thinking: text,
                        signature,
                    })
                }
                Block::RedactedThinking { data } => self
                    .message
                    .reasoning_blocks
                    .push(ReasoningBlock::Redacted { data }),
                Block::Text | Block::Thinking { .. } | Block::Other => {}
            }
        }
        let finish = match self.stop_reason.as_deref() {
            Some("max_tokens") => FinishReason::Length,
            Some("tool_use") => FinishReason::ToolCalls,
            _ if !self.message.tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        Ok(Reply {
            message: self.message,
            usage: self.usage,
            finish,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_budgets_win_for_their_levels() {
        let configured = crate::config::settings::ThinkingBudgets {
            medium: Some(3000),
            high: Some(50_000),
            ..Default::default()
        };
        // (level, budget with the settings, budget without)
        let cases = [
            (Thinking::Off, None, None),
            (Thinking::Minimal, Some(1024), Some(1024)),
            (Thinking::Medium, Some(3000), Some(8192)),
            (Thinking::High, Some(50_000), Some(16_384)),
            (Thinking::Max, Some(31_000), Some(31_000)),
        ];
        for (t, with, without) in cases {
            assert_eq!(budget(t, &configured), with, "{t:?}");
            assert_eq!(budget(t, &Default::default()), without, "{t:?}");
        }
    }
    use crate::provider::tests_support::{
        model, replay_fixture, request, tool, tool_round_messages, user,
    };

    fn run(fixture: &str) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
        replay_fixture(fixture, Decoder::new())
    }

    #[test]
    fn decodes_text_thinking_and_tools() {
        let r = run("anthropic-text.sse").0.expect("ok");
        assert_eq!(r.message.text, "Hello from Claude");
        assert_eq!(
            r.usage,
            Usage {
                input: 25,
                output: 12,
                cache_read: 5,
                cache_write: 3
            }
        );
        let (r, ev) = run("anthropic-thinking.sse");
        let r = r.expect("ok");
        assert_eq!(r.message.thinking, "Two plus two is four.");
        assert_eq!(
            r.message.reasoning_blocks,
            vec![ReasoningBlock::Signed {
                thinking: "Two plus two is four.".into(),
                signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into()
            }]
        );
        assert_eq!(ev.last(), Some(&StreamEvent::Text("4".into())));
        let (r, ev) = run("anthropic-tools.sse");
        let r = r.expect("ok");
        assert_eq!(r.finish, FinishReason::ToolCalls);
        // Each tool_use block is named at its start; its input streams after.
        let starts: Vec<&StreamEvent> = ev
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallStart { .. }))
            .collect();
        assert_eq!(
            starts,
            [
                &StreamEvent::ToolCallStart {
                    id: "toolu_01".into(),
                    name: "lookup".into()
                },
                &StreamEvent::ToolCallStart {
                    id: "toolu_02".into(),
                    name: "no_args".into()
                },
            ]
        );
        let args: String = ev
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallDelta { id, delta } if id == "toolu_01" => {
                    Some(delta.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            json!({"query": "rust", "limit": 3})
        );
        assert_eq!(
            r.message.tool_calls[0].arguments,
            json!({"query": "rust", "limit": 3})
        );
        assert_eq!(r.message.tool_calls[1].arguments, json!({}));
        assert_eq!(
            run("anthropic-max-tokens.sse").0.expect("ok").finish,
            FinishReason::Length
        );
        let e = run("anthropic-error-event.sse").0.unwrap_err();
        assert_eq!(
            e,
            ProviderError::Status {
                status: 529,
                message: "Overloaded in test (overloaded_error)".into()
            }
        );
    }

    #[test]
    fn redacted_and_empty_signed_thinking_are_kept_in_order() {
        let r = run("anthropic-redacted-tools.sse").0.expect("ok");
        assert_eq!(
            r.message.reasoning_blocks,
            vec![
                ReasoningBlock::Redacted {
                    data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj".into()
                },
                ReasoningBlock::Signed {
                    thinking: String::new(),
                    signature: "ErUBCkYIBhgCIkBsig-empty".into()
                },
            ]
        );
        assert_eq!(r.message.tool_calls[0].id, "toolu_09");
        let messages = vec![user("go"), Message::Assistant(r.message)];
        let b = body(
            &model("claude", true, false),
            &request(&messages, &[], Thinking::Medium),
        );
        let kinds: Vec<&str> = b["messages"][1]["content"]
            .as_array()
            .expect("blocks")
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(kinds, ["redacted_thinking", "thinking", "tool_use"]);
        assert_eq!(b["messages"][1]["content"][1]["thinking"], "");
    }

    #[test]
    fn request_body_merges_roles_and_sets_thinking() {
        let mut messages = tool_round_messages();
        let Message::Assistant(a) = &mut messages[1] else {
            panic!("the reply")
        };
        a.reasoning_blocks = vec![ReasoningBlock::Signed {
            thinking: "hmm".into(),
            signature: "sig".into(),
        }];
        let tools = [tool(json!({"type": "object"}))];
        let b = body(
            &model("claude", true, true),
            &request(&messages, &tools, Thinking::Medium),
        );
        assert_eq!(b["system"], "sys");
        assert_eq!(b["thinking"]["budget_tokens"], 8192);
        assert_eq!(b["max_tokens"], 32_000);
        let msgs = b["messages"].as_array().expect("messages");
        assert_eq!(
            msgs.len(),
            3,
            "two tool results and the next prompt merge into one user turn"
        );
        assert_eq!(msgs[2]["content"][2]["text"], "next");
        assert_eq!(msgs[0]["content"][0]["source"]["media_type"], "image/png");
        assert_eq!(msgs[1]["content"][0]["type"], "thinking");
        assert_eq!(msgs[1]["content"][3]["input"], json!({}));
        assert_eq!(msgs[2]["content"][1]["is_error"], true);
        assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
    }
}
