//! The `openai-responses` wire API (OpenAI's Responses API, `POST /responses`, and the servers
//! that copy it): the request body built from input items, and a decoder for its typed stream
//! events.
//!
//! Reasoning models reason before each tool call. With `store: false` nothing stays on the
//! server, so the reasoning reaches the next request only as the reply's own output items: the
//! `reasoning` items with `encrypted_content` (asked for with `include`), followed by the
//! message and `function_call` items they pair with by id. The decoder keeps those items on the
//! assistant message (`ReasoningBlock::ResponsesItem`) and the body builder replays them as they
//! came, as long as they still describe the message (same model, same text, same calls);
//! otherwise it rebuilds the turn from the provider-neutral message without reasoning or ids,
//! which the API always accepts.

use crate::base::json::json;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::borrow::Cow;

use super::config::ModelDef;
use super::http::{event_json, message_and_code, Emit, StreamDecoder};
use super::openai::{borrowed, model_effort};
use super::parts::{result_output, Parts};
use super::sse::SseEvent;
use super::{
    AssistantMessage, ChatRequest, Draft, FinishReason, Message, ProviderError, ReasoningBlock,
    Reply, StreamEvent, ToolCall, ToolResultMessage, Usage,
};
use crate::base::content::Image;

pub(crate) fn url(base_url: &str) -> String {
    format!("{}/responses", base_url.trim_end_matches('/'))
}

/// The same as Chat Completions': a bearer key.
pub(crate) fn headers(key: Option<&str>) -> Vec<(String, String)> {
    super::openai::headers(key)
}

/// The Responses API's `input_text` and `input_image` parts.
const PARTS: Parts = Parts {
    text: |text| json!({"type": "input_text", "text": text}),
    image: |image| {
        json!({"type": "input_image", "detail": "auto",
               "image_url": format!("data:{};base64,{}", image.mime_type, image.data)})
    },
};

/// Input content parts for `text` and `images` (a placeholder for a text-only model).
fn user_parts(model: &ModelDef, text: &str, images: &[Image]) -> Vec<Value> {
    let mut parts = Vec::new();
    if !text.is_empty() || images.is_empty() {
        parts.push((PARTS.text)(text));
    }
    parts.extend(PARTS.images(model, images));
    parts
}

/// The Responses API request body for `req`.
pub(crate) fn body(model: &ModelDef, req: &ChatRequest<'_>) -> Value {
    let mut input = Vec::new();
    // Images of consecutive tool results, sent as one user message after them (an output
    // item carries text only, and the function outputs of one reply belong together).
    let mut result_images: Vec<&Image> = Vec::new();
    for message in req.messages {
        if !matches!(message, Message::ToolResult(_)) {
            flush_result_images(model, &mut result_images, &mut input);
        }
        match message {
            Message::User { text, images } => {
                input.push(json!({"role": "user", "content": user_parts(model, text, images)}));
            }
            Message::Assistant(a) => assistant_items(model, a, &mut input),
            Message::ToolResult(ToolResultMessage {
                call_id,
                text,
                is_error,
                images,
                ..
            }) => {
                let output = result_output(model, text, *is_error, images, &mut result_images);
                input.push(json!({"type": "function_call_output", "call_id": call_id,
                                  "output": output}));
            }
        }
    }
    flush_result_images(model, &mut result_images, &mut input);

    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    if !req.system.is_empty() {
        body.insert("instructions".into(), json!(req.system));
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("stream".into(), json!(true));
    // Nothing is kept on the server: every request carries the whole conversation.
    body.insert("store".into(), json!(false));
    // A summary request asks for less than the model's own limit (compaction).
    let budget = match (model.output_budget(), req.max_tokens) {
        (Some(own), Some(asked)) => Some(own.min(asked)),
        (own, asked) => own.or(asked),
    };
    if let Some(budget) = budget {
        body.insert("max_output_tokens".into(), json!(budget));
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                // Not strict: strict mode wants every property required, and our tools have
                // optional parameters.
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": false})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(tier) = req.service_tier {
        body.insert("service_tier".into(), json!(tier));
    }
    if model.reasoning {
        if let Some(e) =
            model_effort(model, req.thinking).filter(|_| model.compat.supports_reasoning_effort)
        {
            body.insert("reasoning".into(), json!({"effort": e, "summary": "auto"}));
        }
        // Even with no effort asked for, a reasoning model reasons; without the encrypted
        // content its reasoning items could not be replayed under `store: false`.
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    Value::Object(body)
}

fn flush_result_images(model: &ModelDef, images: &mut Vec<&Image>, input: &mut Vec<Value>) {
    if images.is_empty() {
        return;
    }
    debug_assert!(model.supports_images());
    input.push(json!({"role": "user", "content": PARTS.result_images(images)}));
}

/// The input items of one assistant turn: its own output items when they still describe it,
/// else a plain rebuild.
fn assistant_items(model: &ModelDef, a: &AssistantMessage, input: &mut Vec<Value>) {
    let items = ReasoningBlock::own_parts(&a.reasoning_blocks, &model.id, |b| match b {
        ReasoningBlock::ResponsesItem { model, item } => Some((model, item)),
        _ => None,
    });
    if !items.is_empty() && items_describe(&items, a) {
        input.extend(items.into_iter().cloned());
        return;
    }
    if !a.text.is_empty() {
        input.push(json!({"role": "assistant", "content": a.text}));
    }
    for c in &a.tool_calls {
        input.push(
            json!({"type": "function_call", "call_id": c.id, "name": c.name,
                          "arguments": arguments_text(&c.arguments)}),
        );
    }
}

/// Arguments as the API wants them: a JSON text (malformed ones exactly as the model sent them).
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Whether the stored output items say what the message says: the same text and the same
/// calls in the same order. A message edited since (compaction, a rewritten history) is
/// rebuilt instead, since replayed items would contradict it.
fn items_describe(items: &[&Value], a: &AssistantMessage) -> bool {
    let kind = |i: &Value| {
        i.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let text: String = items
        .iter()
        .filter(|i| kind(i) == "message")
        .map(|i| message_text(i))
        .collect();
    let calls: Vec<(&str, &str)> = items
        .iter()
        .filter(|i| kind(i) == "function_call")
        .map(|i| {
            let s = |k: &str| i.get(k).and_then(Value::as_str).unwrap_or("");
            (s("call_id"), s("name"))
        })
        .collect();
    let ours: Vec<(&str, &str)> = a
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    text == a.text && calls == ours
}

/// The text of a `message` output item (its `output_text` and `refusal` parts).
fn message_text(item: &Value) -> String {
    item.get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            p.get("text")
                .or_else(|| p.get("refusal"))
                .and_then(Value::as_str)
        })
        .collect()
}

/// The fields of a stream event we read. Every event is parsed into this one shape, borrowing
/// the type name; the few large values (`item`, `response`) stay `Value`s.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "borrowed")]
    kind: Option<Cow<'a, str>>,
    delta: Option<Value>,
    #[serde(borrow, default, deserialize_with = "borrowed")]
    item_id: Option<Cow<'a, str>>,
    summary_index: Option<Value>,
    arguments: Option<Value>,
    item: Option<Value>,
    response: Option<Value>,
    code: Option<Value>,
    message: Option<Value>,
    error: Option<Value>,
}

#[derive(Debug, Default)]
struct PartialCall {
    item_id: String,
    call_id: String,
    name: String,
    arguments: String,
}

/// Assembles one streamed reply.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    draft: Draft,
    calls: Vec<PartialCall>,
    /// Finished output items worth replaying, in order.
    items: Vec<Value>,
    /// A reasoning item came without its encrypted content: the items cannot be replayed.
    unreplayable: bool,
    /// The item (and summary part) the last thinking delta belonged to, to separate parts.
    thinking_part: Option<(String, String)>,
    /// Items whose text / thinking arrived as deltas (`None`: a delta without an item id).
    text_items: Vec<Option<String>>,
    thinking_items: Vec<Option<String>>,
}

impl Decoder {
    pub(crate) fn new(model: &str) -> Decoder {
        let draft = Draft::new(model);
        Decoder {
            draft,
            ..Decoder::default()
        }
    }

    fn text(&mut self, item: Option<&str>, t: String, emit: &mut dyn FnMut(StreamEvent)) {
        let item = item.map(str::to_owned);
        if !self.text_items.contains(&item) {
            self.text_items.push(item);
        }
        if !t.is_empty() {
            self.draft.message.text.push_str(&t);
            emit(StreamEvent::Text(t));
        }
    }

    /// A thinking delta; a new summary part (or reasoning item) starts on a new paragraph.
    fn thinking(
        &mut self,
        item: Option<&str>,
        part: String,
        t: String,
        emit: &mut dyn FnMut(StreamEvent),
    ) {
        let id = item.map(str::to_owned);
        if !self.thinking_items.contains(&id) {
            self.thinking_items.push(id.clone());
        }
        if t.is_empty() {
            return;
        }
        let key = (id.unwrap_or_default(), part);
        let t = if self.thinking_part.as_ref() != Some(&key)
            && !self.draft.message.thinking.is_empty()
        {
            format!("\n\n{t}")
        } else {
            t
        };
        self.thinking_part = Some(key);
        self.draft.message.thinking.push_str(&t);
        emit(StreamEvent::Thinking(t));
    }

    fn call_mut(&mut self, item_id: Option<&str>) -> Option<&mut PartialCall> {
        match item_id {
            Some(id) => self.calls.iter_mut().rev().find(|c| c.item_id == id),
            None => self.calls.last_mut(),
        }
    }

    fn item_done(&mut self, item: Value, emit: &mut dyn FnMut(StreamEvent)) {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let id = s("id");
        let seen =
            |list: &[Option<String>]| list.contains(&None) || list.contains(&Some(id.clone()));
        match s("type").as_str() {
            "reasoning" => {
                if item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    self.unreplayable = true;
                }
                // A server that sends the summary only whole still shows it.
                if !seen(&self.thinking_items) {
                    let parts: Vec<String> = item
                        .get("summary")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect();
                    for (i, p) in parts.into_iter().enumerate() {
                        self.thinking(Some(&id), i.to_string(), p, emit);
                    }
                }
            }
            "message" => {
                if !seen(&self.text_items) {
                    let text = message_text(&item);
                    self.text(Some(&id), text, emit);
                }
            }
            "function_call" => {
                let (call_id, name, arguments) = (s("call_id"), s("name"), item.get("arguments"));
                let slot = match self.calls.iter().position(|c| c.item_id == id) {
                    Some(i) => &mut self.calls[i],
                    None => {
                        self.calls.push(PartialCall {
                            item_id: id.clone(),
                            ..PartialCall::default()
                        });
                        self.calls.last_mut().expect("just pushed")
                    }
                };
                // The finished item is authoritative over the deltas.
                if !call_id.is_empty() {
                    slot.call_id = call_id;
                }
                if !name.is_empty() {
                    slot.name = name;
                }
                if let Some(args) = arguments.and_then(Value::as_str) {
                    slot.arguments = args.to_owned();
                }
            }
            // Built-in tools are never offered, so no other item needs replaying.
            _ => return,
        }
        self.items.push(item);
    }

    /// `response.completed` or `response.incomplete`: usage and why it ended.
    fn completed(&mut self, response: Option<&Value>) {
        let response = response.unwrap_or(&Value::Null);
        if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            // Input tokens include the cached ones.
            let cached = u
                .pointer("/input_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            self.draft.usage = Usage {
                input: n("input_tokens").saturating_sub(cached),
                output: n("output_tokens"),
                cache_read: cached,
                cache_write: 0,
            };
        }
        let reason = response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str);
        let status = response.get("status").and_then(Value::as_str);
        self.draft.finish = Some(
            if reason == Some("max_output_tokens")
                || (status == Some("incomplete") && reason.is_none())
            {
                FinishReason::Length
            } else {
                FinishReason::Stop
            },
        );
    }
}

fn str_of(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `message (code)`, or whichever of the two there is.
fn error_words(message: Option<&Value>, code: Option<&Value>, fallback: &str) -> String {
    let code = code.and_then(|c| match c {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    message_and_code(str_of(message), code, fallback)
}

impl StreamDecoder for Decoder {
    fn on_event(&mut self, event: &SseEvent, emit: Emit<'_>) -> Result<bool, ProviderError> {
        let Some(e) = event_json::<Event<'_>>(event)? else {
            return Ok(false);
        };
        let kind = e.kind.as_deref().unwrap_or(event.event.as_str());
        let delta = || match e.delta.clone() {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let item_id = e.item_id.as_deref();
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                self.text(item_id, delta(), emit);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let part = match &e.summary_index {
                    Some(i) => format!("summary {i}"),
                    None => "text".to_owned(),
                };
                self.thinking(item_id, part, delta(), emit);
            }
            "response.output_item.added" => {
                let item = e.item.as_ref().unwrap_or(&Value::Null);
                if item.get("type").and_then(Value::as_str) == Some("function_call") {
                    let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                    let call = PartialCall {
                        item_id: s("id"),
                        call_id: s("call_id"),
                        name: s("name"),
                        arguments: s("arguments"),
                    };
                    // The id `finish` gives it.
                    let id = [&call.call_id, &call.item_id]
                        .into_iter()
                        .find(|s| !s.is_empty())
                        .cloned()
                        .unwrap_or_else(|| format!("call_{}", self.calls.len()));
                    emit(StreamEvent::ToolCallStart {
                        id,
                        name: call.name.clone(),
                    });
                    self.calls.push(call);
                }
            }
            "response.function_call_arguments.delta" => {
                let d = delta();
                if let Some(c) = self.call_mut(item_id) {
                    c.arguments.push_str(&d);
                    let id = [&c.call_id, &c.item_id]
                        .into_iter()
                        .find(|s| !s.is_empty())
                        .cloned();
                    if let Some(id) = id.filter(|_| !d.is_empty()) {
                        emit(StreamEvent::ToolCallDelta { id, delta: d });
                    }
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(args) = str_of(e.arguments.as_ref()).map(str::to_owned) {
                    if let Some(c) = self.call_mut(item_id) {
                        c.arguments = args;
                    }
                }
            }
            "response.output_item.done" => {
                if let Some(item) = e.item {
                    self.item_done(item, emit);
                }
            }
            "response.completed" | "response.incomplete" => {
                self.completed(e.response.as_ref());
                return Ok(true);
            }
            "response.failed" => {
                let err = e.response.as_ref().and_then(|r| r.get("error"));
                let text = error_words(
                    err.and_then(|x| x.get("message")),
                    err.and_then(|x| x.get("code")),
                    "The model failed to answer (response.failed)",
                );
                return Err(ProviderError::Stream(text));
            }
            "error" => {
                // Some servers nest the fields under `error`, as error bodies do.
                let nested = e.error.as_ref();
                let text = error_words(
                    e.message
                        .as_ref()
                        .or_else(|| nested.and_then(|n| n.get("message"))),
                    e.code
                        .as_ref()
                        .or_else(|| nested.and_then(|n| n.get("code"))),
                    "The model stream reported an error",
                );
                return Err(ProviderError::Stream(text));
            }
            // Lifecycle events (`response.created`, `…in_progress`, `…part.added`, `….done`
            // of text and summaries) repeat what the deltas and items carry.
            _ => {}
        }
        Ok(false)
    }

    fn finish(mut self: Box<Self>) -> Result<Reply, ProviderError> {
        for (i, c) in std::mem::take(&mut self.calls).into_iter().enumerate() {
            if c.name.is_empty() && c.arguments.is_empty() {
                continue;
            }
            let id = [c.call_id, c.item_id]
                .into_iter()
                .find(|s| !s.is_empty())
                .unwrap_or_else(|| format!("call_{i}"));
            let arguments = if c.arguments.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(&c.arguments).unwrap_or(Value::String(c.arguments))
            };
            self.draft.message.tool_calls.push(ToolCall {
                id,
                name: c.name,
                arguments,
            });
        }
        // Only reasoning needs the items back, and only with its encrypted content.
        let items = if self.unreplayable {
            Vec::new()
        } else {
            self.items
        };
        self.draft.reply(
            items,
            |i| i.get("type").and_then(Value::as_str) == Some("reasoning"),
            |model, item| ReasoningBlock::ResponsesItem { model, item },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::tests_support::{
        after_reply_body, data_event, model, replay, replay_fixture, request, tool,
        tool_round_messages, user, Decoded,
    };
    use crate::provider::Thinking;

    fn run(fixture: &str) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
        replay_fixture(fixture, Decoder::new("gpt-5.4"))
    }

    /// Decodes a stream given as its events' JSON, one per element.
    fn decode(events: &[Value]) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
        let events: Vec<SseEvent> = events.iter().map(|v| data_event(&v.to_string())).collect();
        replay(Decoder::new("m"), &events)
    }

    #[test]
    fn decodes_reasoning_summaries_text_and_a_function_call() {
        // Each delta once: the whole items that close the stream repeat nothing.
        let reply = Decoded {
            events: vec![
                StreamEvent::Thinking("**Planning the check**".into()),
                StreamEvent::Thinking("\n\nI should run ".into()),
                StreamEvent::Thinking("the command.".into()),
                StreamEvent::Thinking("\n\nThen report.".into()),
                StreamEvent::Text("I'll ".into()),
                StreamEvent::Text("run it.".into()),
                // The call is named as soon as its item is added, then its arguments stream.
                StreamEvent::ToolCallStart {
                    id: "call_test1".into(),
                    name: "bash".into(),
                },
                StreamEvent::ToolCallDelta {
                    id: "call_test1".into(),
                    delta: "{\"command\":".into(),
                },
                StreamEvent::ToolCallDelta {
                    id: "call_test1".into(),
                    delta: "\"echo responses".into(),
                },
                StreamEvent::ToolCallDelta {
                    id: "call_test1".into(),
                    delta: "-ok\"}".into(),
                },
            ],
            thinking: "**Planning the check**\n\nI should run the command.\n\nThen report.",
            text: "I'll run it.",
            finish: FinishReason::ToolCalls,
            usage: Usage {
                input: 176,
                output: 80,
                cache_read: 1024,
                cache_write: 0,
            },
        }
        .check(run("responses-reasoning-tools.sse"));
        let m = &reply.message;
        assert_eq!(
            m.tool_calls,
            vec![ToolCall {
                id: "call_test1".into(),
                name: "bash".into(),
                arguments: json!({"command": "echo responses-ok"}),
            }]
        );
        let kept: Vec<(&str, &str)> = m
            .reasoning_blocks
            .iter()
            .map(|b| match b {
                ReasoningBlock::ResponsesItem { model, item } => {
                    (model.as_str(), item["id"].as_str().unwrap_or(""))
                }
                other => panic!("not a Responses item: {other:?}"),
            })
            .collect();
        assert_eq!(
            kept,
            [
                ("gpt-5.4", "rs_test1"),
                ("gpt-5.4", "msg_test1"),
                ("gpt-5.4", "fc_test1")
            ]
        );
    }

    #[test]
    fn text_incomplete_failed_error_and_dropped_streams() {
        let r = run("responses-after-tool.sse").0.expect("ok");
        assert_eq!(r.message.text, "It printed responses-ok. Wörld ✓");
        assert_eq!(r.finish, FinishReason::Stop);
        assert!(
            r.message.reasoning_blocks.is_empty(),
            "nothing to replay without reasoning"
        );
        assert_eq!(r.usage.input, 1400);
        let r = run("responses-incomplete.sse").0.expect("ok");
        assert_eq!(r.finish, FinishReason::Length);
        assert_eq!(r.message.text, "Cut sh");
        let e = run("responses-failed.sse").0.unwrap_err();
        assert_eq!(e.to_string(), "The model failed in test (server_error)");
        let (e, _) = run("responses-error-event.sse");
        assert_eq!(
            e.unwrap_err().to_string(),
            "Upstream overloaded in test (server_error)"
        );
        let (e, events) = run("responses-partial.sse");
        assert!(e.unwrap_err().to_string().contains("ended before"));
        assert_eq!(events, vec![StreamEvent::Text("Partial answer".into())]);
    }

    #[test]
    fn error_shapes_and_unreadable_events() {
        let cases = [
            (json!({"type": "error", "message": "boom"}), "boom"),
            (
                json!({"type": "error", "error": {"message": "nested", "code": 7}}),
                "nested (7)",
            ),
            (
                json!({"type": "error", "code": "server_error"}),
                "The model stream reported an error (server_error)",
            ),
            (
                json!({"type": "response.failed", "response": {"status": "failed"}}),
                "The model failed to answer (response.failed)",
            ),
        ];
        for (event, want) in cases {
            let e = decode(std::slice::from_ref(&event)).0.unwrap_err();
            assert_eq!(e, ProviderError::Stream(want.into()), "{event}");
        }
        let e = Decoder::new("m")
            .on_event(&data_event("{not json"), &mut |_| {})
            .unwrap_err();
        assert!(e
            .to_string()
            .starts_with("The model stream sent invalid JSON"));
    }

    #[test]
    fn whole_items_without_deltas_still_reach_the_client() {
        let (r, events) = decode(&[
            json!({"type": "response.output_item.done", "item": {"type": "reasoning", "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "A"}, {"type": "summary_text", "text": "B"}]}}),
            json!({"type": "response.output_item.done", "item": {"type": "message", "id": "m_1",
                "content": [{"type": "output_text", "text": "Hi"}, {"type": "refusal", "refusal": "!"}]}}),
            json!({"type": "response.output_item.done", "item": {"type": "function_call", "id": "fc_1",
                "call_id": "c_1", "name": "read", "arguments": "{\"path\":"}}),
            json!({"type": "response.completed", "response": {"status": "completed"}}),
        ]);
        let r = r.expect("ok");
        assert_eq!(
            events,
            vec![
                StreamEvent::Thinking("A".into()),
                StreamEvent::Thinking("\n\nB".into()),
                StreamEvent::Text("Hi!".into()),
            ]
        );
        assert_eq!(r.message.tool_calls[0].id, "c_1");
        assert_eq!(
            r.message.tool_calls[0].arguments,
            Value::String("{\"path\":".into()),
            "malformed arguments are kept raw"
        );
        assert!(
            r.message.reasoning_blocks.is_empty(),
            "reasoning without encrypted content cannot be replayed under store: false"
        );
    }

    #[test]
    fn request_body_shape() {
        let messages = tool_round_messages();
        let tools = [tool(json!({"type": "object"}))];
        let b = body(
            &model("gpt-5.4", true, true),
            &request(&messages, &tools, Thinking::High),
        );
        assert_eq!(b["model"], "gpt-5.4");
        assert_eq!(b["instructions"], "sys");
        assert_eq!(b["stream"], true);
        assert_eq!(b["store"], false);
        assert_eq!(b["max_output_tokens"], 32_000);
        assert_eq!(b["reasoning"], json!({"effort": "high", "summary": "auto"}));
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(
            b["tools"],
            json!([{"type": "function", "name": "t", "description": "d",
                    "parameters": {"type": "object"}, "strict": false}])
        );
        assert_eq!(
            b["input"],
            json!([
                {"role": "user", "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,AAAA"}]},
                {"role": "assistant", "content": "calling"},
                {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{\"x\":1}"},
                {"type": "function_call", "call_id": "c2", "name": "t", "arguments": "{bad"},
                {"type": "function_call_output", "call_id": "c1", "output": "out"},
                {"type": "function_call_output", "call_id": "c2", "output": "(tool error)"},
                {"role": "user", "content": [
                    {"type": "input_text", "text": "Images from the tool results:"},
                    {"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,AAAA"}]},
                {"role": "user", "content": [{"type": "input_text", "text": "next"}]},
            ])
        );
        // Thinking off: the server's default effort, but reasoning stays replayable.
        let b = body(
            &model("gpt-5.4", true, true),
            &request(&messages, &[], Thinking::Off),
        );
        assert!(b.get("reasoning").is_none());
        assert!(b.get("tools").is_none());
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        // A model that does not reason is asked for neither.
        let mut plain = model("gpt-4.1", false, false);
        plain.max_tokens = 0;
        let b = body(&plain, &request(&messages, &[], Thinking::High));
        assert!(b.get("reasoning").is_none() && b.get("include").is_none());
        assert!(
            b.get("max_output_tokens").is_none(),
            "unknown limit: the server decides"
        );
        assert_eq!(
            b["input"][0]["content"][1]["text"],
            "(1 image(s) omitted: the model gpt-4.1 does not accept images)"
        );
        assert_eq!(
            b["input"][4]["output"],
            "out\n\n(1 image(s) omitted: the model gpt-4.1 does not accept images)"
        );
        assert_eq!(
            b["input"].as_array().map(Vec::len),
            Some(7),
            "no image message"
        );
    }

    fn replayed(model_id: &str, edit: impl FnOnce(&mut AssistantMessage)) -> Vec<Value> {
        let mut reply = run("responses-reasoning-tools.sse").0.expect("ok").message;
        edit(&mut reply);
        let b = after_reply_body(body, model_id, reply, "call_test1", "responses-ok");
        b["input"].as_array().expect("input").clone()
    }

    #[test]
    fn output_items_are_replayed_verbatim_to_the_same_model_only() {
        let input = replayed("gpt-5.4", |_| {});
        let kinds: Vec<&str> = input
            .iter()
            .map(|i| i["type"].as_str().or(i["role"].as_str()).unwrap_or(""))
            .collect();
        assert_eq!(
            kinds,
            [
                "user",
                "reasoning",
                "message",
                "function_call",
                "function_call_output"
            ]
        );
        assert_eq!(
            input[1]["encrypted_content"],
            "gAAAAABpTestEncryptedReasoning0123456789abcdefghijklmnopqrstuvwxyz=="
        );
        assert_eq!(input[1]["summary"][1]["text"], "Then report.");
        assert_eq!(input[2]["id"], "msg_test1");
        assert_eq!(
            input[3]["id"], "fc_test1",
            "the call pairs with its reasoning"
        );
        assert_eq!(input[3]["call_id"], "call_test1");
        assert_eq!(input[4]["call_id"], "call_test1");

        // Another model cannot read the reasoning: a plain rebuild, without item ids.
        let rebuilt = json!([
            {"role": "assistant", "content": "I'll run it."},
            {"type": "function_call", "call_id": "call_test1", "name": "bash",
             "arguments": "{\"command\":\"echo responses-ok\"}"},
        ]);
        assert_eq!(json!(replayed("gpt-5-mini", |_| {})[1..3]), rebuilt);
        // Nor do items that no longer match the message (a rewritten history).
        let edited = replayed("gpt-5.4", |m| m.text = "changed".into());
        assert_eq!(
            edited[1],
            json!({"role": "assistant", "content": "changed"})
        );
        assert!(edited.iter().all(|i| i["type"] != "reasoning"));
        let renamed = replayed("gpt-5.4", |m| m.tool_calls[0].id = "other".into());
        assert!(renamed.iter().all(|i| i["type"] != "reasoning"));
    }

    #[test]
    fn other_apis_skip_responses_items() {
        let reply = run("responses-reasoning-tools.sse").0.expect("ok").message;
        let messages = vec![user("go"), Message::Assistant(reply)];
        let b = crate::provider::anthropic::body(
            &model("claude", true, true),
            &request(&messages, &[], Thinking::Medium),
        );
        let kinds: Vec<&str> = b["messages"][1]["content"]
            .as_array()
            .expect("blocks")
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(kinds, ["text", "tool_use"]);
    }
}
