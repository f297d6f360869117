//! The `google-generative-ai` wire API (Gemini: `POST {base}/models/{id}:streamGenerateContent
//! ?alt=sse`): the request body (`contents` of `user`/`model` turns with text, `inlineData`,
//! `functionCall` and `functionResponse` parts; `systemInstruction`; `generationConfig` with
//! the output budget and `thinkingConfig`; `functionDeclarations`), and a decoder for the
//! stream, whose every event is a whole `GenerateContentResponse` chunk.
//!
//! The key travels in the `x-goog-api-key` header, never in the URL, so no log line and no
//! error text can carry it.
//!
//! Gemini signs its reasoning: a `thoughtSignature` may come on any part (a function call's
//! above all), and the next request must carry it back on the same part. The decoder keeps
//! the reply's parts (consecutive text merged, as the API allows) as
//! `ReasoningBlock::GeminiPart`; the body builder replays them verbatim to the same model
//! while they still say what the message says, else rebuilds the turn without signatures.

use std::collections::HashSet;

use crate::base::json::json;
use serde_json::{Map, Value};

use super::config::ModelDef;
use super::http::{event_json, message_and_code, Emit, StreamDecoder};
use super::parts::{result_output, stream_headers, Parts};
use super::sse::SseEvent;
use super::{
    AssistantMessage, ChatRequest, Draft, FinishReason, Message, ProviderError, ReasoningBlock,
    Reply, StreamEvent, Thinking, ToolCall, Usage,
};
use crate::base::content::Image;

pub(crate) fn url(base_url: &str, model: &str) -> String {
    format!(
        "{}/models/{model}:streamGenerateContent?alt=sse",
        base_url.trim_end_matches('/')
    )
}

pub(crate) fn headers(key: Option<&str>) -> Vec<(String, String)> {
    stream_headers(key.map(|k| ("x-goog-api-key", k.to_owned())))
}

/// The major version in `gemini-<n>…` (`None` for other ids: Gemma, tuned models).
fn major_version(id: &str) -> Option<u32> {
    let id = id.to_ascii_lowercase();
    let rest = &id[id.find("gemini-")? + "gemini-".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `generationConfig.thinkingConfig` for a reasoning model: Gemini 3 takes a level, 2.5 a
/// token budget. Thinking off is as little as each model allows (3 Pro and 2.5 Pro cannot
/// stop thinking).
pub(crate) fn thinking_config(model: &ModelDef, thinking: Thinking) -> Option<Value> {
    if !model.reasoning {
        return None;
    }
    let id = model.id.to_ascii_lowercase();
    let v3 = major_version(&id).is_some_and(|v| v >= 3);
    let effort = match thinking {
        Thinking::Off => {
            return Some(
                match (v3, id.contains("flash-lite"), id.contains("2.5-pro")) {
                    (true, true, _) => json!({"thinkingLevel": "MINIMAL"}),
                    (true, false, _) => json!({"thinkingLevel": "LOW"}),
                    (false, _, true) => json!({"thinkingBudget": 128}),
                    (false, _, false) => json!({"thinkingBudget": 0}),
                },
            )
        }
        Thinking::Minimal => 0,
        Thinking::Low => 1,
        Thinking::Medium => 2,
        Thinking::High | Thinking::XHigh | Thinking::Max => 3,
    };
    if v3 {
        let levels = if id.contains("-pro") {
            ["LOW", "LOW", "HIGH", "HIGH"]
        } else if id.contains("flash") && !id.contains("flash-lite") {
            ["LOW", "LOW", "MEDIUM", "HIGH"]
        } else {
            ["MINIMAL", "LOW", "MEDIUM", "HIGH"]
        };
        return Some(json!({"includeThoughts": true, "thinkingLevel": levels[effort]}));
    }
    let budgets: [i64; 4] = if id.contains("2.5-pro") {
        [128, 2048, 8192, 32768]
    } else if id.contains("2.5-flash-lite") {
        [512, 2048, 8192, 24576]
    } else if id.contains("2.5-flash") {
        [128, 2048, 8192, 24576]
    } else {
        // Dynamic: the model decides.
        [-1, -1, -1, -1]
    };
    // Settings `thinkingBudgets` win over these (by the level the index stands for).
    let level = [
        Thinking::Minimal,
        Thinking::Low,
        Thinking::Medium,
        Thinking::High,
    ][effort];
    let budget = match super::thinking_budgets().of(level) {
        Some(b) => i64::try_from(b).unwrap_or(i64::MAX),
        None => budgets[effort],
    };
    Some(json!({"includeThoughts": true, "thinkingBudget": budget}))
}

/// Gemini's text and `inlineData` parts.
const PARTS: Parts = Parts {
    text: |text| json!({ "text": text }),
    image: |image| json!({"inlineData": {"mimeType": image.mime_type, "data": image.data}}),
};

/// Arguments as Gemini wants them: an object (a malformed text from another model is kept
/// under `arguments`, so nothing is lost).
fn args_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({"arguments": raw}),
        },
        Value::Null => json!({}),
        other => json!({"arguments": other}),
    }
}

/// The `model` turn of `a`: its own parts when they still describe it (same text, same
/// calls), else a rebuild. The ids of the calls Gemini named go into `ids`, for the
/// responses that answer them.
fn model_parts(model: &ModelDef, a: &AssistantMessage, ids: &mut HashSet<String>) -> Vec<Value> {
    let own = ReasoningBlock::own_parts(&a.reasoning_blocks, &model.id, |b| match b {
        ReasoningBlock::GeminiPart { model, part } => Some((model, part)),
        _ => None,
    });
    if !own.is_empty() && parts_describe(&own, a) {
        for p in &own {
            if let Some(id) = p.pointer("/functionCall/id").and_then(Value::as_str) {
                ids.insert(id.to_owned());
            }
        }
        return own.into_iter().cloned().collect();
    }
    let mut parts = Vec::new();
    if !a.text.trim().is_empty() {
        parts.push(json!({"text": a.text}));
    }
    for c in &a.tool_calls {
        parts.push(json!({"functionCall": {"name": c.name, "args": args_object(&c.arguments)}}));
    }
    parts
}

/// Whether stored parts say what the message says now (a compaction or a rewritten history
/// changes the message, and replayed parts would contradict it).
fn parts_describe(parts: &[&Value], a: &AssistantMessage) -> bool {
    let text: String = parts
        .iter()
        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    let calls: Vec<(&str, Value)> = parts
        .iter()
        .filter_map(|p| p.get("functionCall"))
        .map(|f| {
            (
                f.get("name").and_then(Value::as_str).unwrap_or(""),
                args_object(f.get("args").unwrap_or(&Value::Null)),
            )
        })
        .collect();
    let ours: Vec<(&str, Value)> = a
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), args_object(&c.arguments)))
        .collect();
    text == a.text && calls == ours
}

/// The request body for `req`.
pub(crate) fn body(model: &ModelDef, req: &ChatRequest<'_>) -> Value {
    let mut contents: Vec<Value> = Vec::new();
    let mut gemini_ids = HashSet::new();
    // Images of consecutive tool results, sent as one user turn after their responses
    // (which must come together, right after the calls).
    let mut result_images: Vec<&Image> = Vec::new();
    for message in req.messages {
        if !matches!(message, Message::ToolResult(_)) {
            flush_images(&mut result_images, &mut contents);
        }
        match message {
            Message::User { text, images } => {
                let mut parts = Vec::new();
                if !text.is_empty() || images.is_empty() {
                    parts.push(json!({"text": text}));
                }
                parts.extend(PARTS.images(model, images));
                contents.push(json!({"role": "user", "parts": parts}));
            }
            Message::Assistant(a) => {
                let parts = model_parts(model, a, &mut gemini_ids);
                if !parts.is_empty() {
                    contents.push(json!({"role": "model", "parts": parts}));
                }
            }
            Message::ToolResult(r) => {
                let output =
                    result_output(model, &r.text, r.is_error, &r.images, &mut result_images);
                let key = if r.is_error { "error" } else { "output" };
                let mut response = json!({"name": &r.name, "response": {key: output}});
                if gemini_ids.contains(&r.call_id) {
                    response["id"] = json!(&r.call_id);
                }
                let part = json!({ "functionResponse": response });
                match contents.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["parts"][0].get("functionResponse").is_some() =>
                    {
                        if let Some(parts) = last["parts"].as_array_mut() {
                            parts.push(part);
                        }
                    }
                    _ => contents.push(json!({"role": "user", "parts": [part]})),
                }
            }
        }
    }
    flush_images(&mut result_images, &mut contents);

    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !req.system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": req.system}]}),
        );
    }
    let mut config = Map::new();
    let budget = match (model.output_budget(), req.max_tokens) {
        (Some(own), Some(asked)) => Some(own.min(asked)),
        (own, asked) => own.or(asked),
    };
    if let Some(budget) = budget {
        config.insert("maxOutputTokens".into(), json!(budget));
    }
    if let Some(t) = thinking_config(model, req.thinking) {
        config.insert("thinkingConfig".into(), t);
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    if !req.tools.is_empty() {
        // `parametersJsonSchema` takes full JSON Schema; the older `parameters` is an
        // OpenAPI subset that refuses some of what tool schemas use.
        let declarations: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                       "parametersJsonSchema": t.parameters})
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
    }
    Value::Object(body)
}

fn flush_images(images: &mut Vec<&Image>, contents: &mut Vec<Value>) {
    if images.is_empty() {
        return;
    }
    contents.push(json!({"role": "user", "parts": PARTS.result_images(images)}));
}

/// Assembles one streamed reply.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    draft: Draft,
    /// The reply's parts as the next request replays them.
    parts: Vec<Value>,
}

impl Decoder {
    pub(crate) fn new(model: &str) -> Decoder {
        let draft = Draft::new(model);
        Decoder {
            draft,
            parts: Vec::new(),
        }
    }

    /// A text or thought part: streamed, and merged into the previous part of its kind.
    fn text_part(&mut self, part: &Value, text: &str, emit: &mut dyn FnMut(StreamEvent)) {
        let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
        let signature = part
            .get("thoughtSignature")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let same_kind = self.parts.last().is_some_and(|last| {
            last.get("text").is_some()
                && (last.get("thought").and_then(Value::as_bool) == Some(true)) == thought
        });
        if same_kind {
            let last = self.parts.last_mut().expect("checked");
            let merged = format!("{}{text}", last["text"].as_str().unwrap_or(""));
            last["text"] = json!(merged);
            if let Some(sig) = signature {
                last["thoughtSignature"] = json!(sig);
            }
        } else {
            let mut p = json!({ "text": text });
            if thought {
                p["thought"] = json!(true);
            }
            if let Some(sig) = signature {
                p["thoughtSignature"] = json!(sig);
            }
            self.parts.push(p);
        }
        if text.is_empty() {
            return;
        }
        if thought {
            self.draft.message.thinking.push_str(text);
            emit(StreamEvent::Thinking(super::delta_pool::owned(text)));
        } else {
            self.draft.message.text.push_str(text);
            emit(StreamEvent::Text(super::delta_pool::owned(text)));
        }
    }

    fn call_part(&mut self, part: &Value, call: &Value) {
        let name = call
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
            });
        self.draft.message.tool_calls.push(ToolCall {
            id,
            name,
            arguments: args_object(call.get("args").unwrap_or(&Value::Null)),
        });
        self.parts.push(part.clone());
    }
}

/// `message (STATUS)` of an error object, or whichever of the two there is.
fn error_words(err: &Value) -> String {
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let status = err
        .get("status")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| err.get("code").map(|c| c.to_string()));
    message_and_code(message, status, "The model stream reported an error")
}

impl StreamDecoder for Decoder {
    fn on_event(&mut self, event: &SseEvent, emit: Emit<'_>) -> Result<bool, ProviderError> {
        let Some(chunk) = event_json::<Value>(event)? else {
            return Ok(false);
        };
        if let Some(err) = chunk.get("error") {
            return Err(ProviderError::Stream(error_words(err)));
        }
        if let Some(u) = chunk.get("usageMetadata") {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            let cached = n("cachedContentTokenCount");
            self.draft.usage = Usage {
                input: n("promptTokenCount").saturating_sub(cached),
                output: n("candidatesTokenCount") + n("thoughtsTokenCount"),
                cache_read: cached,
                cache_write: 0,
            };
        }
        let Some(candidate) = chunk.pointer("/candidates/0") else {
            if let Some(reason) = chunk
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
            {
                return Err(ProviderError::Stream(format!(
                    "The model refused the prompt ({reason})"
                )));
            }
            return Ok(false);
        };
        for part in candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(call) = part.get("functionCall") {
                self.call_part(part, call);
            } else if let Some(text) = part.get("text").and_then(Value::as_str) {
                self.text_part(part, text, emit);
            }
            // Other parts (generated images, executable code) are not asked for.
        }
        match candidate.get("finishReason").and_then(Value::as_str) {
            None | Some("FINISH_REASON_UNSPECIFIED") => {}
            Some("STOP") => self.draft.finish = Some(FinishReason::Stop),
            Some("MAX_TOKENS") => self.draft.finish = Some(FinishReason::Length),
            // SAFETY, RECITATION, MALFORMED_FUNCTION_CALL, …: no usable answer.
            Some(other) => {
                return Err(ProviderError::Stream(format!(
                    "The model stopped without an answer ({other})"
                )))
            }
        }
        // The stream ends with the body; a last chunk may still carry usage.
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<Reply, ProviderError> {
        // Only signed parts need replaying.
        self.draft.reply(
            self.parts,
            |p| p.get("thoughtSignature").is_some(),
            |model, part| ReasoningBlock::GeminiPart { model, part },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::tests_support::{
        after_reply_body, data_event, model, replay_fixture, request, result, tool,
        tool_round_messages, Decoded,
    };

    fn run(fixture: &str) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
        replay_fixture(fixture, Decoder::new("gemini-3-pro-preview"))
    }

    #[test]
    fn url_and_headers_keep_the_key_out_of_the_url() {
        assert_eq!(
            url("https://generativelanguage.googleapis.com/v1beta/", "gemini-2.5-pro"),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        let h = headers(Some("k-123"));
        assert!(h.contains(&("x-goog-api-key".to_owned(), "k-123".to_owned())));
        assert!(!h.iter().any(|(n, _)| n == "authorization"));
    }

    #[test]
    fn thinking_configs_per_model_family() {
        let cases = [
            (
                "gemini-3.1-pro-preview",
                Thinking::Low,
                json!({"includeThoughts": true, "thinkingLevel": "LOW"}),
            ),
            (
                "gemini-3.1-pro-preview",
                Thinking::Medium,
                json!({"includeThoughts": true, "thinkingLevel": "HIGH"}),
            ),
            (
                "gemini-3-flash-preview",
                Thinking::Medium,
                json!({"includeThoughts": true, "thinkingLevel": "MEDIUM"}),
            ),
            (
                "gemini-3.1-flash-lite",
                Thinking::Minimal,
                json!({"includeThoughts": true, "thinkingLevel": "MINIMAL"}),
            ),
            (
                "gemini-3.1-pro-preview",
                Thinking::Off,
                json!({"thinkingLevel": "LOW"}),
            ),
            (
                "gemini-3.1-flash-lite",
                Thinking::Off,
                json!({"thinkingLevel": "MINIMAL"}),
            ),
            (
                "gemini-2.5-pro",
                Thinking::High,
                json!({"includeThoughts": true, "thinkingBudget": 32768}),
            ),
            (
                "gemini-2.5-pro",
                Thinking::Off,
                json!({"thinkingBudget": 128}),
            ),
            (
                "gemini-2.5-flash",
                Thinking::Max,
                json!({"includeThoughts": true, "thinkingBudget": 24576}),
            ),
            (
                "gemini-2.5-flash",
                Thinking::Off,
                json!({"thinkingBudget": 0}),
            ),
            (
                "gemini-2.5-flash-lite",
                Thinking::Minimal,
                json!({"includeThoughts": true, "thinkingBudget": 512}),
            ),
            (
                "my-tuned-model",
                Thinking::Medium,
                json!({"includeThoughts": true, "thinkingBudget": -1}),
            ),
        ];
        for (id, t, want) in cases {
            assert_eq!(
                thinking_config(&model(id, true, true), t),
                Some(want),
                "{id} {t:?}"
            );
        }
        assert_eq!(
            thinking_config(&model("gemini-2.0-flash", false, true), Thinking::High),
            None
        );
    }

    #[test]
    fn decodes_thoughts_text_a_signed_function_call_and_usage() {
        let reply = Decoded {
            events: vec![
                StreamEvent::Thinking("**Checking the build**\n".into()),
                StreamEvent::Thinking("I should run the command.".into()),
                StreamEvent::Text("I'll run ".into()),
                StreamEvent::Text("it.".into()),
            ],
            thinking: "**Checking the build**\nI should run the command.",
            text: "I'll run it.",
            finish: FinishReason::ToolCalls,
            usage: Usage {
                input: 80,
                output: 70,
                cache_read: 20,
                cache_write: 0,
            },
        }
        .check(run("gemini-thinking-tools.sse"));
        let m = &reply.message;
        assert_eq!(m.tool_calls.len(), 1);
        assert_eq!(m.tool_calls[0].name, "bash");
        assert_eq!(
            m.tool_calls[0].arguments,
            json!({"command": "echo gemini-ok"})
        );
        assert!(
            m.tool_calls[0].id.starts_with("call_"),
            "{}",
            m.tool_calls[0].id
        );
        let parts: Vec<&Value> = m
            .reasoning_blocks
            .iter()
            .map(|b| match b {
                ReasoningBlock::GeminiPart { model, part } => {
                    assert_eq!(model, "gemini-3-pro-preview");
                    part
                }
                other => panic!("not a Gemini part: {other:?}"),
            })
            .collect();
        assert_eq!(
            parts,
            [
                &json!({"text": "**Checking the build**\nI should run the command.", "thought": true}),
                &json!({"text": "I'll run it."}),
                &json!({"functionCall": {"name": "bash", "args": {"command": "echo gemini-ok"}},
                        "thoughtSignature": "c2lnbmVkLXRob3VnaHQtZm9yLXRlc3Q="}),
            ],
            "consecutive deltas merged, the signature on its own part"
        );
    }

    #[test]
    fn text_length_errors_and_drops() {
        let r = run("gemini-after-tool.sse").0.expect("ok");
        assert_eq!(r.message.text, "It printed gemini-ok. Wörld ✓");
        assert_eq!(r.finish, FinishReason::Stop);
        assert!(
            r.message.reasoning_blocks.is_empty(),
            "nothing signed, nothing to replay"
        );
        let r = run("gemini-max-tokens.sse").0.expect("ok");
        assert_eq!(
            (r.finish, r.message.text.as_str()),
            (FinishReason::Length, "Cut sh")
        );
        let e = run("gemini-error-event.sse").0.unwrap_err();
        assert_eq!(
            e.to_string(),
            "The model is overloaded in test. (UNAVAILABLE)"
        );
        let (e, events) = run("gemini-partial.sse");
        assert!(e.unwrap_err().to_string().contains("ended before"));
        assert_eq!(events, vec![StreamEvent::Text("Partial answer".into())]);
        let mut d = Decoder::new("m");
        let e = d
            .on_event(
                &data_event(r#"{"candidates":[{"finishReason":"SAFETY"}]}"#),
                &mut |_| {},
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "The model stopped without an answer (SAFETY)"
        );
        let e = d
            .on_event(
                &data_event(r#"{"promptFeedback":{"blockReason":"OTHER"}}"#),
                &mut |_| {},
            )
            .unwrap_err();
        assert_eq!(e.to_string(), "The model refused the prompt (OTHER)");
        assert!(d.on_event(&data_event("{nope"), &mut |_| {}).is_err());
    }

    #[test]
    fn request_body_shape() {
        let messages = tool_round_messages();
        let tools = [tool(
            json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
        )];
        let b = body(
            &model("gemini-2.5-pro", true, true),
            &request(&messages, &tools, Thinking::Medium),
        );
        assert_eq!(b["systemInstruction"], json!({"parts": [{"text": "sys"}]}));
        assert_eq!(
            b["generationConfig"],
            json!({"maxOutputTokens": 32000,
                   "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 8192}})
        );
        assert_eq!(
            b["tools"],
            json!([{"functionDeclarations": [{"name": "t", "description": "d",
                "parametersJsonSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}}]}])
        );
        assert_eq!(
            b["contents"],
            json!([
                {"role": "user", "parts": [{"text": "look"},
                    {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
                {"role": "model", "parts": [{"text": "calling"},
                    {"functionCall": {"name": "t", "args": {"x": 1}}},
                    {"functionCall": {"name": "t", "args": {"arguments": "{bad"}}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "t", "response": {"output": "out"}}},
                    {"functionResponse": {"name": "t", "response": {"error": "(tool error)"}}}]},
                {"role": "user", "parts": [{"text": "Images from the tool results:"},
                    {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
                {"role": "user", "parts": [{"text": "next"}]},
            ])
        );
        // A text-only model without reasoning: placeholders, no thinking config.
        let mut plain = model("gemini-text", false, false);
        plain.max_tokens = 0;
        let b = body(&plain, &request(&messages, &[], Thinking::High));
        assert!(b.get("generationConfig").is_none() && b.get("tools").is_none());
        assert_eq!(
            b["contents"][0]["parts"][1]["text"],
            "(1 image(s) omitted: the model gemini-text does not accept images)"
        );
        assert_eq!(
            b["contents"][2]["parts"][0]["functionResponse"]["response"]["output"],
            "out\n\n(1 image(s) omitted: the model gemini-text does not accept images)"
        );
    }

    fn replayed(model_id: &str, edit: impl FnOnce(&mut AssistantMessage)) -> Vec<Value> {
        let mut reply = run("gemini-thinking-tools.sse").0.expect("ok").message;
        edit(&mut reply);
        let call_id = reply.tool_calls[0].id.clone();
        let b = after_reply_body(body, model_id, reply, &call_id, "gemini-ok");
        b["contents"].as_array().expect("contents").clone()
    }

    #[test]
    fn signed_parts_are_replayed_verbatim_to_the_same_model_only() {
        let contents = replayed("gemini-3-pro-preview", |_| {});
        assert_eq!(contents[1]["role"], "model");
        assert_eq!(
            contents[1]["parts"][2]["thoughtSignature"],
            "c2lnbmVkLXRob3VnaHQtZm9yLXRlc3Q="
        );
        assert_eq!(contents[1]["parts"][0]["thought"], true);
        assert_eq!(
            contents[2]["parts"][0]["functionResponse"],
            json!({"name": "bash", "response": {"output": "gemini-ok"}})
        );
        let rebuilt = json!({"role": "model", "parts": [{"text": "I'll run it."},
            {"functionCall": {"name": "bash", "args": {"command": "echo gemini-ok"}}}]});
        assert_eq!(
            replayed("gemini-2.5-pro", |_| {})[1],
            rebuilt,
            "another model"
        );
        let edited = replayed("gemini-3-pro-preview", |m| m.text = "changed".into());
        assert_eq!(
            edited[1]["parts"][0],
            json!({"text": "changed"}),
            "an edited message"
        );
        assert!(edited[1]["parts"][1].get("thoughtSignature").is_none());
    }

    #[test]
    fn a_call_id_gemini_gave_is_echoed_in_its_response() {
        let mut d = Decoder::new("gemini-3-pro-preview");
        let chunk = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": "fc-7", "name": "read", "args": {}}, "thoughtSignature": "c2ln"}]},
            "finishReason": "STOP"}]});
        d.on_event(&data_event(&chunk.to_string()), &mut |_| {})
            .expect("ok");
        let reply = Box::new(d).finish().expect("ok");
        assert_eq!(reply.message.tool_calls[0].id, "fc-7");
        let messages = vec![
            Message::Assistant(reply.message),
            result("fc-7", "read", "x"),
        ];
        let b = body(
            &model("gemini-3-pro-preview", true, true),
            &request(&messages, &[], Thinking::Medium),
        );
        assert_eq!(
            b["contents"][1]["parts"][0]["functionResponse"]["id"],
            "fc-7"
        );
    }
}
