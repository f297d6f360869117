//! What the wire APIs' tests share: a model, a request, the tool-round conversation the
//! request-shape tests build a body from, and replaying a stream through a decoder.

use super::config::{Compat, ModelDef};
use super::http::StreamDecoder;
use super::sse::{SseDecoder, SseEvent};
use super::{
    AssistantMessage, ChatRequest, FinishReason, Message, ProviderError, Reply, StreamEvent,
    Thinking, ToolCall, ToolResultMessage, Usage,
};
use crate::base::content::{Image, ToolSpec};

/// A catalogue-like model: a 200k window and a 64k output limit (so the output budget is the
/// 32k cap), default quirks, the provider's API.
pub(crate) fn model(id: &str, reasoning: bool, images: bool) -> ModelDef {
    ModelDef::listed(id, reasoning, 200_000, 64_000, images, Compat::default())
}

/// A request with system prompt `sys` from the main agent, no budget of its own.
pub(crate) fn request<'a>(
    messages: &'a [Message],
    tools: &'a [ToolSpec],
    thinking: Thinking,
) -> ChatRequest<'a> {
    ChatRequest {
        system: "sys",
        messages,
        tools,
        thinking,
        agent: "main",
        max_tokens: None,
        request_id: "test-request",
        service_tier: None,
    }
}

/// The one tool of the request-shape tests: `t`, described `d`.
pub(crate) fn tool(parameters: serde_json::Value) -> ToolSpec {
    ToolSpec {
        name: "t".into(),
        description: "d".into(),
        parameters,
    }
}

pub(crate) fn image() -> Image {
    Image {
        data: "AAAA".into(),
        mime_type: "image/png".into(),
    }
}

pub(crate) fn user(text: &str) -> Message {
    Message::User {
        text: text.into(),
        images: vec![],
    }
}

/// A reply with text only.
pub(crate) fn answer(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        text: text.into(),
        ..Default::default()
    })
}

/// A successful tool result without images.
pub(crate) fn result(call_id: &str, name: &str, text: &str) -> Message {
    Message::ToolResult(ToolResultMessage {
        call_id: call_id.into(),
        name: name.into(),
        text: text.into(),
        is_error: false,
        images: vec![],
    })
}

/// The body `body` builds for `model_id` (reasoning, images, medium thinking) to go on after
/// `reply`: a prompt, the reply, and `bash`'s result `output` for `call_id`. The replay tests
/// edit the reply first, to see when its opaque parts are still sent back.
pub(crate) fn after_reply_body(
    body: fn(&ModelDef, &ChatRequest<'_>) -> serde_json::Value,
    model_id: &str,
    reply: AssistantMessage,
    call_id: &str,
    output: &str,
) -> serde_json::Value {
    let messages = vec![
        user("go"),
        Message::Assistant(reply),
        result(call_id, "bash", output),
    ];
    body(
        &model(model_id, true, true),
        &request(&messages, &[], Thinking::Medium),
    )
}

/// The request-shape tests' conversation: a user image, a reply with a good and a malformed
/// call, their results (one with an image, one an empty error), and a next prompt.
pub(crate) fn tool_round_messages() -> Vec<Message> {
    let call = |id: &str, arguments| ToolCall {
        id: id.into(),
        name: "t".into(),
        arguments,
    };
    vec![
        Message::User {
            text: "look".into(),
            images: vec![image()],
        },
        Message::Assistant(AssistantMessage {
            text: "calling".into(),
            thinking: "unsigned thoughts are not sent".into(),
            tool_calls: vec![
                call("c1", crate::base::json::json!({"x": 1})),
                call("c2", crate::base::json::json!("{bad")),
            ],
            ..Default::default()
        }),
        Message::ToolResult(ToolResultMessage {
            call_id: "c1".into(),
            name: "t".into(),
            text: "out".into(),
            is_error: false,
            images: vec![image()],
        }),
        Message::ToolResult(ToolResultMessage {
            call_id: "c2".into(),
            name: "t".into(),
            text: String::new(),
            is_error: true,
            images: vec![],
        }),
        user("next"),
    ]
}

/// An SSE event with no name, as most APIs send them.
pub(crate) fn data_event(data: &str) -> SseEvent {
    SseEvent {
        event: String::new(),
        data: data.into(),
    }
}

/// Feeds `events` to `decoder` as the HTTP loop would (stopping at the one that ends the
/// stream, or at an error); returns the reply and the deltas it emitted.
pub(crate) fn replay<D: StreamDecoder>(
    mut decoder: D,
    events: &[SseEvent],
) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
    let mut out = Vec::new();
    for e in events {
        match decoder.on_event(e, &mut |ev| out.push(ev)) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => return (Err(e), out),
        }
    }
    (Box::new(decoder).finish(), out)
}

/// Replays a recorded stream from `fixtures/sse/` through a decoder.
pub(crate) fn replay_fixture<D: StreamDecoder>(
    fixture: &str,
    decoder: D,
) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sse")
        .join(fixture);
    let bytes = std::fs::read(path).expect("fixture");
    let mut sse = SseDecoder::new();
    let mut events = Vec::new();
    sse.feed(&bytes, &mut events);
    sse.finish(&mut events);
    replay(decoder, &events)
}

/// What a whole recorded reply must decode to: its events in order and the assembled reply's
/// thinking, text, finish and usage.
pub(crate) struct Decoded<'a> {
    pub events: Vec<StreamEvent>,
    pub thinking: &'a str,
    pub text: &'a str,
    pub finish: FinishReason,
    pub usage: Usage,
}

impl Decoded<'_> {
    /// Checks `got` (a `replay` result) against this and returns the reply for a test's own
    /// further checks (tool calls, reasoning blocks).
    pub(crate) fn check(self, got: (Result<Reply, ProviderError>, Vec<StreamEvent>)) -> Reply {
        let (reply, events) = got;
        let reply = reply.expect("the recorded reply decodes");
        assert_eq!(events, self.events, "each delta once, in order");
        assert_eq!(reply.message.thinking, self.thinking);
        assert_eq!(reply.message.text, self.text);
        assert_eq!(reply.finish, self.finish);
        assert_eq!(reply.usage, self.usage);
        reply
    }
}
