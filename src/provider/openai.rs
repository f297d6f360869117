//! The `openai-completions` wire API (OpenAI Chat Completions and the many servers that copy
//! it: vLLM, llama.cpp, OpenRouter, Groq, ...): the request body, and a decoder that turns
//! streamed chunks into deltas and an assembled `Reply`.

use std::borrow::Cow;

use crate::base::json::json;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::config::ModelDef;
use super::http::{error_text, Emit, StreamDecoder};
use super::parts::{omitted_text, stream_headers, Parts};
use super::sse::SseEvent;
use super::{
    AssistantMessage, ChatRequest, FinishReason, Message, ProviderError, Reply, StreamEvent,
    Thinking, ToolCall, ToolResultMessage, Usage,
};

pub(crate) fn url(base_url: &str) -> String {
    format!("{}/chat/completions", base_url.trim_end_matches('/'))
}

pub(crate) fn headers(key: Option<&str>) -> Vec<(String, String)> {
    stream_headers(key.map(|k| ("authorization", format!("Bearer {k}"))))
}

pub(crate) fn effort(t: Thinking) -> Option<&'static str> {
    match t {
        Thinking::Off => None,
        Thinking::Minimal => Some("minimal"),
        Thinking::Low => Some("low"),
        Thinking::Medium => Some("medium"),
        Thinking::High | Thinking::XHigh | Thinking::Max => Some("high"),
    }
}

/// The effort value sent for `t`: what models.json `thinkingLevelMap` names for it, else
/// the API's own (`effort`).
pub(crate) fn model_effort(model: &ModelDef, t: Thinking) -> Option<&str> {
    model.mapped_level(t).or_else(|| effort(t))
}

/// Chat Completions' `text` and `image_url` (a data URI) parts.
const PARTS: Parts = Parts {
    text: |text| json!({"type": "text", "text": text}),
    image: |i| json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.mime_type, i.data)}}),
};

/// The Chat Completions request body for `req`.
pub(crate) fn body(model: &ModelDef, req: &ChatRequest<'_>) -> Value {
    let messages = messages(model, req);
    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    let field = if model.compat.max_tokens_field {
        "max_tokens"
    } else {
        "max_completion_tokens"
    };
    let budget = match (model.output_budget(), req.max_tokens) {
        (Some(own), Some(asked)) => Some(own.min(asked)),
        (own, asked) => own.or(asked),
    };
    if let Some(budget) = budget {
        body.insert(field.into(), json!(budget));
    }
    if model.compat.supports_store {
        body.insert("store".into(), json!(false));
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if model.reasoning && model.compat.supports_reasoning_effort {
        if let Some(e) = model_effort(model, req.thinking) {
            body.insert("reasoning_effort".into(), json!(e));
        }
    }
    Value::Object(body)
}

/// The chat messages of a request: the system (or developer) message, then the
/// conversation, a tool result's images in a user message after it.
fn messages(model: &ModelDef, req: &ChatRequest<'_>) -> Vec<Value> {
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        let role = if model.reasoning && model.compat.supports_developer_role {
            "developer"
        } else {
            "system"
        };
        messages.push(json!({"role": role, "content": req.system}));
    }
    for message in req.messages {
        match message {
            Message::User { text, images } => {
                if images.is_empty() {
                    messages.push(json!({"role": "user", "content": text}));
                } else {
                    let mut parts = vec![json!({"type": "text", "text": text})];
                    parts.extend(PARTS.images(model, images));
                    messages.push(json!({"role": "user", "content": parts}));
                }
            }
            Message::Assistant(a) => {
                let mut m = Map::new();
                m.insert("role".into(), json!("assistant"));
                m.insert(
                    "content".into(),
                    if a.text.is_empty() && !a.tool_calls.is_empty() {
                        Value::Null
                    } else {
                        json!(a.text)
                    },
                );
                if model.reasoning && model.compat.reasoning_content_on_assistant {
                    m.insert("reasoning_content".into(), json!(a.thinking));
                }
                if !a.tool_calls.is_empty() {
                    let calls: Vec<Value> = a
                        .tool_calls
                        .iter()
                        .map(|c| {
                            let args = match &c.arguments {
                                // Malformed arguments go back exactly as the model sent them.
                                Value::String(raw) => raw.clone(),
                                other => other.to_string(),
                            };
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": args}})
                        })
                        .collect();
                    m.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(m));
            }
            Message::ToolResult(ToolResultMessage {
                call_id,
                text,
                images,
                is_error,
                ..
            }) => {
                let mut content = if *is_error && text.is_empty() {
                    "(tool error)".to_owned()
                } else {
                    text.clone()
                };
                // A text-only model gets the same placeholder as for prompt images, so an
                // image result is never dropped without a word.
                if !images.is_empty() && !model.supports_images() {
                    content.push_str(&format!("\n\n{}", omitted_text(model, images.len())));
                }
                messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
                // Tool messages cannot carry images; a user message right after can.
                if !images.is_empty() && model.supports_images() {
                    let mut parts =
                        vec![json!({"type": "text", "text": "Images from the tool result:"})];
                    parts.extend(PARTS.images(model, images));
                    messages.push(json!({"role": "user", "content": parts}));
                }
            }
        }
    }
    messages
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    /// `ToolCallStart` was emitted: the id is fixed from then on.
    announced: bool,
}

/// Assembles one streamed reply.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    message: AssistantMessage,
    calls: Vec<PartialCall>,
    usage: Usage,
    finish: Option<FinishReason>,
    done: bool,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder::default()
    }
}

fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// An optional string that borrows from the input unless it has escapes. Needed because serde
/// borrows a `Cow<str>` only for a field of exactly that type: inside an `Option` it always
/// allocates, and that was one `malloc`/`free` per streamed delta on the turn thread.
pub(super) fn borrowed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Str<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Str<'de>>::deserialize(d)?.map(|Str(s)| s))
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

impl Decoder {
    /// The fast path for the common chunk; `false` means "not handled, use the general path"
    /// (and nothing was emitted or recorded).
    fn on_simple_chunk(&mut self, data: &str, emit: &mut dyn FnMut(StreamEvent)) -> bool {
        let Some(chunk) = super::chunk_scan::scan(data) else {
            return false;
        };
        // As the general path: `reasoning_content` wins even when empty.
        let thinking = chunk
            .reasoning_content
            .as_deref()
            .or(chunk.reasoning.as_deref())
            .filter(|t| !t.is_empty());
        if let Some(t) = thinking {
            self.message.thinking.push_str(t);
            emit(StreamEvent::Thinking(super::delta_pool::owned(t)));
        }
        if let Some(t) = chunk.content.as_deref().filter(|t| !t.is_empty()) {
            self.message.text.push_str(t);
            emit(StreamEvent::Text(super::delta_pool::owned(t)));
        }
        if let Some(reason) = &chunk.finish_reason {
            self.finish = Some(finish_reason(reason));
        }
        true
    }
}

impl StreamDecoder for Decoder {
    fn on_event(&mut self, event: &SseEvent, emit: Emit<'_>) -> Result<bool, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() || self.on_simple_chunk(data, emit) {
            return Ok(false);
        }
        self.on_chunk(data, emit)
    }

    fn finish(self: Box<Self>) -> Result<Reply, ProviderError> {
        self.finish_reply()
    }
}

/// An error event inside the stream: a transient server failure (llama.cpp sends
/// `{"error":{"code":500,"type":"server_error",…}}` when its tool-call parser rejects what the
/// model wrote) as the status it stands for, so the call is made again; any other as final.
fn stream_error(err: &Value, message: String) -> ProviderError {
    let code = err.get("code").and_then(Value::as_u64);
    let kind = err.get("type").and_then(Value::as_str);
    match crate::provider::http::transient_event_status(code, kind) {
        Some(status) => ProviderError::Status { status, message },
        None => ProviderError::Stream(message),
    }
}

impl Decoder {
    /// The general path: any chunk, as a `Value`.
    fn on_chunk(
        &mut self,
        data: &str,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, ProviderError> {
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::Stream(format!("The model stream sent invalid JSON: {e}"))
        })?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(err, error_text(data, 0)));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            let cached = u
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            self.usage = Usage {
                input: n("prompt_tokens").saturating_sub(cached),
                output: n("completion_tokens"),
                cache_read: cached,
                cache_write: 0,
            };
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(false);
        };
        if let Some(delta) = choice.get("delta") {
            let thinking = delta
                .get("reasoning_content")
                .and_then(Value::as_str)
                .or_else(|| delta.get("reasoning").and_then(Value::as_str))
                .filter(|t| !t.is_empty());
            if let Some(t) = thinking {
                self.message.thinking.push_str(t);
                emit(StreamEvent::Thinking(super::delta_pool::owned(t)));
            }
            if let Some(t) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                self.message.text.push_str(t);
                emit(StreamEvent::Text(super::delta_pool::owned(t)));
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .map_or(self.calls.len().saturating_sub(1), |i| i as usize);
                // Bound the index by what a sane stream can send, so a hostile one cannot
                // make us allocate without limit.
                if index > self.calls.len() + 64 {
                    return Err(ProviderError::Stream(format!(
                        "The model stream sent an implausible tool call index {index}"
                    )));
                }
                while self.calls.len() <= index {
                    self.calls.push(PartialCall::default());
                }
                let slot = &mut self.calls[index];
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    if !slot.announced && !id.is_empty() {
                        slot.id = id.to_owned();
                    }
                }
                let f = call.get("function");
                if let Some(name) = f.and_then(|f| f.get("name")).and_then(Value::as_str) {
                    slot.name.push_str(name);
                }
                // Shown as soon as it has a name, under the id the reply will carry.
                if !slot.announced && !slot.name.is_empty() {
                    if slot.id.is_empty() {
                        slot.id = format!("call_{index}");
                    }
                    slot.announced = true;
                    emit(StreamEvent::ToolCallStart {
                        id: slot.id.clone(),
                        name: slot.name.clone(),
                    });
                }
                if let Some(args) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                    slot.arguments.push_str(args);
                    if slot.announced && !args.is_empty() {
                        emit(StreamEvent::ToolCallDelta {
                            id: slot.id.clone(),
                            delta: args.to_owned(),
                        });
                    }
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(finish_reason(reason));
        }
        Ok(false)
    }

    fn finish_reply(mut self) -> Result<Reply, ProviderError> {
        let finish =
            match self.finish {
                Some(f) => f,
                // Some servers omit finish_reason but do send [DONE]; without either, the
                // connection dropped.
                None if self.done => FinishReason::Stop,
                None => return Err(ProviderError::Stream(
                    "The model stream ended before the reply was complete (connection dropped?)"
                        .to_owned(),
                )),
            };
        for (i, c) in self.calls.into_iter().enumerate() {
            if c.name.is_empty() && c.arguments.is_empty() {
                continue;
            }
            self.message.tool_calls.push(ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: parse_arguments(&c.arguments),
            });
        }
        Ok(Reply::calling_tools(self.message, self.usage, finish))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::tests_support::{
        data_event, image, replay_fixture, request, tool, tool_round_messages,
    };

    /// `m`, which takes images.
    fn model(reasoning: bool) -> ModelDef {
        crate::provider::tests_support::model("m", reasoning, true)
    }

    fn run(fixture: &str) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
        replay_fixture(fixture, Decoder::new())
    }

    #[test]
    fn decodes_text_with_usage() {
        let (reply, events) = run("openai-text.sse");
        let reply = reply.expect("ok");
        assert_eq!(reply.message.text, "Hello, wörld!");
        assert_eq!(events.len(), 3);
        assert_eq!(reply.finish, FinishReason::Stop);
        assert_eq!(
            reply.usage,
            Usage {
                input: 13,
                output: 4,
                cache_read: 8,
                cache_write: 0
            }
        );
    }

    #[test]
    fn decodes_reasoning_and_tool_calls() {
        let (reply, events) = run("openai-reasoning.sse");
        let reply = reply.expect("ok");
        assert_eq!(reply.message.thinking, "Let me think.");
        assert_eq!(events[0], StreamEvent::Thinking("Let me ".into()));
        let (reply, events) = run("openai-tools.sse");
        let reply = reply.expect("ok");
        // Each call is named as soon as its name arrives, under the id the reply carries;
        // its arguments follow as they stream.
        let calls: Vec<&StreamEvent> = events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallDelta { .. }
                )
            })
            .collect();
        let start = |id: &str, name: &str| StreamEvent::ToolCallStart {
            id: id.into(),
            name: name.into(),
        };
        let delta = |id: &str, d: &str| StreamEvent::ToolCallDelta {
            id: id.into(),
            delta: d.into(),
        };
        assert_eq!(
            calls,
            [
                &start("call_aaa", "lookup"),
                &delta("call_aaa", "{\"query\":"),
                &start("call_bbb", "other_tool"),
                &delta("call_bbb", "{\"n\": 2}"),
                &delta("call_aaa", " \"rust\"}"),
            ]
        );
        assert_eq!(reply.finish, FinishReason::ToolCalls);
        assert_eq!(reply.message.tool_calls.len(), 2);
        assert_eq!(reply.message.tool_calls[0].id, "call_aaa");
        assert_eq!(
            reply.message.tool_calls[0].arguments,
            json!({"query": "rust"})
        );
        assert_eq!(reply.message.tool_calls[1].name, "other_tool");
        assert_eq!(reply.message.tool_calls[1].arguments, json!({"n": 2}));
    }

    #[test]
    fn length_drop_and_error_event() {
        assert_eq!(
            run("openai-length.sse").0.expect("ok").finish,
            FinishReason::Length
        );
        let err = run("openai-partial.sse").0.unwrap_err();
        assert!(err.to_string().contains("ended before"), "{err}");
        // A 5xx error event is the transient status it stands for (made again by the retry
        // loop, which reports it in the event's own words).
        let err = run("openai-error-event.sse").0.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Status {
                status: 502,
                message: "upstream overloaded in test".into()
            }
        );
        let err = Decoder::new()
            .on_chunk(r#"{"error":{"message":"boom"}}"#, &mut |_| {})
            .unwrap_err();
        assert_eq!(err, ProviderError::Stream("boom".into()));
    }

    /// The fast path and the general path agree on every chunk: same events, same errors,
    /// same assembled reply.
    #[test]
    fn fast_path_agrees_with_general_path() {
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#,
            r#"{"id":"x","choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"b\né 😀"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"think2"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"r"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":null,"reasoning":"r"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":1,"reasoning":"r"}}]}"#,
            r#"{"choices":[{"delta":{"content":"x","reasoning":"y"},"finish_reason":"length"}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":null,"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"finish_reason":7}]}"#,
            r#"{"choices":[{"delta":{"content":5}}]}"#,
            r#"{"choices":[{"delta":[{"content":"seq"}]}]}"#,
            r#"{"choices":[[{"content":"seq"}]]}"#,
            r#"[[{"delta":{"content":"seq"}}]]"#,
            r#"{"choices":[]}"#,
            r#"{"choices":{"0":{"delta":{"content":"obj"}}}}"#,
            r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}},{"delta":7}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}},[1,{"x":[]}],"s",null]}"#,
            r#"{"choices":[{"delta":{"content":"a"}},"#,
            r#"{"choices":null}"#,
            r#"{"choices":[null]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":null,"content":"t"}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            r#"{"choices":[{"delta":{"content":"u"}}],"usage":null}"#,
            r#"{"choices":[{"delta":{"content":"u"}}],"usage":5}"#,
            r#"{"error":{"message":"boom"}}"#,
            r#"{"error":null,"choices":[{"delta":{"content":"e"}}]}"#,
            r#"{"usage":{"prompt_tokens":1}}"#,
            r#"{"choices":[{"delta":{"content":"#,
            r#""just a string""#,
            r#"{"choices":[{"delta":{"content":"x"}}]} trailing"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"tok"},"logprobs":null,"finish_reason":null}]}"#,
            " { \"choices\" : [ { \"delta\" : { \"content\" : \"a b\" } , \"finish_reason\" : \"stop\" } ] } ",
            r#"{"choices":[{"delta":{"content":"\u00e9 \"q\" \\"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ud83d\ude00"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\q"}}]}"#,
            r#"{"choices":[{"delta":{"content":"c"}}],"n":1.5,"e":-2e-3}"#,
            r#"{"choices":[{"delta":{"content":"c"}}],"n":1e400}"#,
            r#"{"choices":[{"delta":{"content":"c"}}],"n":0123}"#,
            r#"{"choices":[{"delta":{"content":"c"}}],"id":"a\"b","x":{"y":[[[]]]}}"#,
            r#"{"choi\u0063es":[{"delta":{"content":"esc"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":null,"tool_calls":null,"content":"t"}}]}"#,
            r#"{"choices":[{"delta":null,"delta":{"content":"d"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}},]}"#,
        ];
        assert!(Decoder::new().on_simple_chunk(chunks[0], &mut |_| {}));
        for chunk in chunks {
            let (mut fast, mut general) = (Decoder::new(), Decoder::new());
            let (mut fast_out, mut general_out) = (Vec::new(), Vec::new());
            let a = fast.on_event(&data_event(chunk), &mut |e| fast_out.push(e));
            let b = general.on_chunk(chunk, &mut |e| general_out.push(e));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "result for {chunk}");
            assert_eq!(fast_out, general_out, "events for {chunk}");
            assert_eq!(
                format!("{fast:?}"),
                format!("{general:?}"),
                "state for {chunk}"
            );
        }
    }

    /// The same agreement over chunks mutated at random (a fixed seed): whatever the fast path
    /// accepts, the general path reads the same way.
    #[test]
    fn fast_path_agrees_with_general_path_on_mutated_chunks() {
        let seeds = [
            r#"{"id":"c-1","object":"chat.completion.chunk","created":17,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"t\u00e9k","reasoning":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"r","tool_calls":null},"finish_reason":"stop"},{"delta":{}}],"x":[1,-2,true,{"y":"z"}]}"#,
        ];
        const ALPHABET: &[u8] = br#"{}[]:,"\ 0123456789-.eEtrufalsn\u"#;
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut accepted = 0;
        for round in 0..20_000 {
            let mut bytes = seeds[round % seeds.len()].as_bytes().to_vec();
            for _ in 0..1 + next(3) {
                let at = next(bytes.len());
                match next(3) {
                    0 => {
                        bytes.remove(at);
                    }
                    1 => bytes.insert(at, ALPHABET[next(ALPHABET.len())]),
                    _ => bytes[at] = ALPHABET[next(ALPHABET.len())],
                }
            }
            let Ok(chunk) = String::from_utf8(bytes) else {
                continue;
            };
            let (mut fast, mut general) = (Decoder::new(), Decoder::new());
            let (mut fast_out, mut general_out) = (Vec::new(), Vec::new());
            if !fast.on_simple_chunk(&chunk, &mut |e| fast_out.push(e)) {
                continue;
            }
            accepted += 1;
            let b = general.on_chunk(&chunk, &mut |e| general_out.push(e));
            assert!(b.is_ok(), "the general path fails on {chunk}: {b:?}");
            assert_eq!(fast_out, general_out, "events for {chunk}");
            assert_eq!(
                format!("{fast:?}"),
                format!("{general:?}"),
                "state for {chunk}"
            );
        }
        // Many mutations leave the chunk valid, so the agreement is tested, not vacuous.
        assert!(
            accepted > 1_000,
            "only {accepted} mutated chunks took the fast path"
        );
    }

    #[test]
    fn a_text_only_model_reads_a_placeholder_for_every_image() {
        let messages = vec![
            Message::User {
                text: "look".into(),
                images: vec![image()],
            },
            Message::ToolResult(ToolResultMessage {
                call_id: "c1".into(),
                name: "read".into(),
                text: "Read image file [image/png]".into(),
                is_error: false,
                images: vec![image(), image()],
            }),
        ];
        let req = ChatRequest {
            system: "",
            ..request(&messages, &[], Thinking::Off)
        };
        let mut m = model(false);
        m.input = vec!["text".into()];
        let b = body(&m, &req);
        assert_eq!(
            b["messages"][0]["content"][1]["text"],
            "(1 image(s) omitted: the model m does not accept images)"
        );
        assert_eq!(
            b["messages"][1]["content"],
            "Read image file [image/png]\n\n(2 image(s) omitted: the model m does not accept images)"
        );
        assert_eq!(b["messages"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn deepseek_gets_its_reasoning_back_as_reasoning_content() {
        let messages = vec![Message::Assistant(AssistantMessage {
            thinking: "plan".into(),
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: "t".into(),
                arguments: json!({}),
            }],
            ..Default::default()
        })];
        let req = ChatRequest {
            system: "",
            ..request(&messages, &[], Thinking::Medium)
        };
        let mut m = model(true);
        assert!(body(&m, &req)["messages"][0]
            .get("reasoning_content")
            .is_none());
        m.compat.reasoning_content_on_assistant = true;
        assert_eq!(body(&m, &req)["messages"][0]["reasoning_content"], "plan");
        let r = crate::provider::config::Registry::builtin();
        let deepseek = r.find("deepseek").expect("built in");
        assert!(deepseek.models[0].compat.reasoning_content_on_assistant);
    }

    #[test]
    fn malformed_arguments_are_kept_raw() {
        assert_eq!(parse_arguments("{\"a\":"), Value::String("{\"a\":".into()));
        assert_eq!(parse_arguments(""), json!({}));
    }

    #[test]
    fn request_body_shape() {
        let messages = tool_round_messages();
        let tools = [tool(json!({"type": "object"}))];
        let req = request(&messages, &tools, Thinking::High);
        let b = body(&model(true), &req);
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["max_completion_tokens"], 32_000);
        assert_eq!(b["reasoning_effort"], "high");
        assert_eq!(b["messages"][0]["role"], "system");
        assert_eq!(
            b["messages"][1]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"x\":1}"
        );
        assert_eq!(
            b["messages"][2]["tool_calls"][1]["function"]["arguments"], "{bad",
            "malformed arguments go back as the model sent them"
        );
        assert_eq!(b["messages"][3]["role"], "tool");
        assert_eq!(b["messages"][3]["tool_call_id"], "c1");
        assert_eq!(b["tools"][0]["function"]["name"], "t");
        let mut m = model(false);
        m.compat.max_tokens_field = true;
        let b = body(
            &m,
            &ChatRequest {
                thinking: Thinking::Off,
                ..req
            },
        );
        assert!(b.get("reasoning_effort").is_none());
        assert_eq!(b["max_tokens"], 32_000);
        // A summary request's tighter budget wins; it never raises the model's own.
        for (asked, want) in [(13_107, 13_107), (64_000, 32_000)] {
            let b = body(
                &m,
                &ChatRequest {
                    max_tokens: Some(asked),
                    ..req
                },
            );
            assert_eq!(b["max_tokens"], want);
        }
    }
}
