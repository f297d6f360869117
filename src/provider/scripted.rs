//! The scripted provider: replays assistant replies from a JSONL fixture, one line per model
//! call, with no network. It drives the tests, the demo and the benchmarks.
//!
//! Each non-blank line (lines starting with `//` are comments) is one reply:
//!
//! ```text
//! {"text": "Hello"}                                   a plain text reply
//! {"steps": [STEP, ...], "stop": "end_turn"|"max_tokens"}
//! {"error": "503 overloaded"}                         the call fails (after any steps)
//! {"panic": "boom"}                                   the turn thread panics (tests only)
//! ```
//!
//! A reply with `"agent": "NAME"` is served only to the subagent NAME; replies without it
//! serve the session's main agent, in order.
//!
//! A line `{"config": {"input": ["text"]}}` is no reply: it makes the scripted model text-only
//! (`accepts_images` false; the default takes text and images). `config` may also set
//! `"context_window": n` (default 128,000) and `"cost": {"input", "output", "cacheRead",
//! "cacheWrite"}` (USD per million tokens; default: no prices), `"enforce_window": true` (a
//! request whose text and tool definitions, at 4 chars a token, are over the window fails with llama.cpp's 400
//! overflow text, as a small local server does) and `"summary": s` (every compaction summary
//! request, no tools and an output budget, is answered `s` without using up a line).
//!
//! Steps: `{"text": s}`, `{"thinking": s}`, `{"tool_call": {"name", "arguments", "id"?}}`,
//! `{"tool_call_start": {"name", "id"?}}` then `{"tool_call_args": s}` (a call whose
//! arguments stream as raw text, parsed when the reply ends; invalid JSON stays raw),
//! `{"usage": {"input", "output", "cache_read"?, "cache_write"?}}`, `{"sleep_ms": n}`, `{"repeat": {"text": s, "count": n}}`,
//! `{"stuck_ms": n}` (blocks n ms ignoring cancel, like a call no abort hook can reach),
//! `{"wait_for_cancel": true}` (streams nothing until the turn is cancelled),
//! `{"stream_until_cancelled": {"text": s, "interval_ms": n}}`, and
//! `{"stray_stdout": s}` (writes `s` to fd 1, to prove it cannot reach the protocol stream), and
//! `{"expect": [s, ...]}` (fail the call unless the request's last message contains each s;
//! this lets a script assert that tool results really went back to the model),
//! `{"expect_first": [s, ...]}` (the same for the request's first message),
//! `{"expect_system": [s, ...]}` (the same for its system prompt),
//! `{"expect_system_none": [s, ...]}` (its system prompt contains none of them),
//! `{"notice": {"severity", "title", "description"?}}` (reports an advisory, as a real
//! provider does for defaults it assumed),
//! `{"expect_none": [s, ...]}` (no message of the request contains any s), and
//! `{"expect_history": [s, ...]}` (fail unless the whole request, every message in order,
//! rendered one per line, contains each s: a resumed session's history reached the model).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use super::{
    AssistantMessage, ChatRequest, FinishReason, Message, Provider, ProviderError, Reply,
    StreamEvent, ToolCall, ToolResultMessage, Usage,
};
use crate::base::abort::AbortFlag;

pub(crate) struct ScriptedProvider {
    path: PathBuf,
    replies: Vec<Value>,
    /// Replies already served. Each agent takes the next unserved reply addressed to it.
    served: Mutex<Vec<bool>>,
    /// Whether the model takes image input (`config.input`).
    images: bool,
    /// `config.context_window`.
    window: u64,
    /// `config.cost`.
    prices: Option<super::Prices>,
    /// `config.enforce_window`.
    enforce_window: bool,
    /// `config.summary`.
    summary: Option<String>,
}

impl ScriptedProvider {
    /// Loads and checks the whole script up front, so a malformed fixture fails at start-up.
    pub(crate) fn load(path: &Path) -> Result<ScriptedProvider, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("Cannot read script {}: {e}", path.display()))?;
        let mut replies = Vec::new();
        let mut images = true;
        let mut window = 128_000;
        let mut prices = None;
        let mut enforce_window = false;
        let mut summary = None;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with("//") {
                continue;
            }
            let value: Value = serde_json::from_str(line)
                .map_err(|e| format!("Script {} line {}: {e}", path.display(), i + 1))?;
            if !value.is_object() {
                return Err(format!(
                    "Script {} line {}: a reply must be a JSON object",
                    path.display(),
                    i + 1
                ));
            }
            if let Some(config) = value.get("config") {
                if let Some(input) = config.get("input").and_then(Value::as_array) {
                    images = input.iter().any(|i| i == "image");
                }
                if let Some(w) = config.get("context_window").and_then(Value::as_u64) {
                    window = w;
                }
                if let Some(cost) = config.get("cost") {
                    prices = super::Prices::from_json(cost);
                }
                if let Some(e) = config.get("enforce_window").and_then(Value::as_bool) {
                    enforce_window = e;
                }
                if let Some(text) = config.get("summary").and_then(Value::as_str) {
                    summary = Some(text.to_owned());
                }
                continue;
            }
            replies.push(value);
        }
        let served = Mutex::new(vec![false; replies.len()]);
        Ok(ScriptedProvider {
            path: path.to_path_buf(),
            replies,
            served,
            images,
            window,
            prices,
            enforce_window,
            summary,
        })
    }

    /// The next reply for `agent`: lines with `"agent": NAME` serve that subagent only; lines
    /// without serve the session's main agent. Subagents run concurrently, so routing by name
    /// keeps scripts deterministic.
    fn next_reply(&self, agent: &str) -> Result<(usize, Value), ProviderError> {
        let mut served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = |reply: &Value| match reply.get("agent").and_then(Value::as_str) {
            Some(name) => name == agent,
            None => agent == "main",
        };
        let index = (0..self.replies.len())
            .find(|&i| !served[i] && wanted(&self.replies[i]))
            .ok_or_else(|| {
                let calls = (0..self.replies.len())
                    .filter(|&i| served[i] && wanted(&self.replies[i]))
                    .count();
                ProviderError::Config(format!(
                    "scripted provider: no reply left in {} for agent {agent} (model call {})",
                    self.path.display(),
                    calls + 1
                ))
            })?;
        served[index] = true;
        Ok((index, self.replies[index].clone()))
    }
}

impl Provider for ScriptedProvider {
    /// A nominal window, so scripted sessions exercise `usage_update` like real ones.
    fn context_window(&self) -> Option<u64> {
        Some(self.window)
    }

    fn prices(&self) -> Option<super::Prices> {
        self.prices
    }

    fn accepts_images(&self) -> bool {
        self.images
    }

    fn label(&self) -> String {
        format!(
            "scripted/{}",
            self.path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("script")
        )
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
        abort: &AbortFlag,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, ProviderError> {
        if self.enforce_window {
            let tokens = request_tokens(request);
            if tokens > self.window {
                return Err(ProviderError::Status {
                    status: 400,
                    message: format!(
                        "request ({tokens} tokens) exceeds the available context size ({} tokens), try increasing it",
                        self.window
                    ),
                });
            }
        }
        if let Some(summary) = &self.summary {
            if request.tools.is_empty() && request.max_tokens.is_some() {
                on_event(StreamEvent::Text(summary.clone()));
                return Ok(Reply {
                    message: AssistantMessage {
                        text: summary.clone(),
                        ..AssistantMessage::default()
                    },
                    usage: Usage::default(),
                    finish: FinishReason::Stop,
                });
            }
        }
        let (index, reply) = self.next_reply(request.agent)?;
        if let Some(msg) = reply.get("panic").and_then(Value::as_str) {
            panic!("scripted panic: {msg}");
        }
        let mut message = AssistantMessage::default();
        let usage = Usage::default();
        if let Some(text) = reply.get("text").and_then(Value::as_str) {
            emit_text(&mut message, on_event, text);
        }
        let steps = reply
            .get("steps")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut draft = Draft {
            message,
            usage,
            streamed: Vec::new(),
        };
        for step in &steps {
            abort.check().map_err(|_| ProviderError::Aborted)?;
            run_step(step, index, request, abort, on_event, &mut draft)?;
        }
        let Draft {
            mut message,
            usage,
            streamed,
        } = draft;
        for i in streamed {
            let call = &mut message.tool_calls[i];
            if let Value::String(raw) = &call.arguments {
                call.arguments = if raw.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone()))
                };
            }
        }
        abort.check().map_err(|_| ProviderError::Aborted)?;
        if let Some(error) = reply.get("error").and_then(Value::as_str) {
            return Err(ProviderError::Stream(error.to_owned()));
        }
        let finish = match reply.get("stop").and_then(Value::as_str) {
            Some("max_tokens") => FinishReason::Length,
            _ if !message.tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        Ok(Reply {
            message,
            usage,
            finish,
        })
    }
}

/// The reply being assembled by the steps.
struct Draft {
    message: AssistantMessage,
    usage: Usage,
    /// Calls whose arguments streamed as raw text (`tool_call_start`), parsed at the end.
    streamed: Vec<usize>,
}

/// Adds a call named by `call` (`{name, id?}`) with empty raw arguments and announces it, as
/// a wire decoder does once a call's name arrives; returns its id.
fn start_call(
    index: usize,
    call: &Value,
    message: &mut AssistantMessage,
    on_event: &mut dyn FnMut(StreamEvent),
) -> String {
    let n = message.tool_calls.len();
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("call_{}_{n}", index + 1));
    let name = call
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    on_event(StreamEvent::ToolCallStart {
        id: id.clone(),
        name: name.clone(),
    });
    message.tool_calls.push(ToolCall {
        id: id.clone(),
        name,
        arguments: Value::String(String::new()),
    });
    id
}

/// A request's size at 4 chars a token: the system prompt, the tool definitions (a server's
/// chat template renders them into the prompt), every message's text and every tool call's
/// arguments.
fn request_tokens(request: &ChatRequest<'_>) -> u64 {
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    let chars: usize = request.system.len()
        + tools
        + request
            .messages
            .iter()
            .map(|m| match m {
                Message::User { text, .. } => text.len(),
                Message::Assistant(a) => {
                    a.text.len()
                        + a.thinking.len()
                        + a.tool_calls
                            .iter()
                            .map(|c| c.name.len() + c.arguments.to_string().len())
                            .sum::<usize>()
                }
                Message::ToolResult(ToolResultMessage { text, .. }) => text.len(),
            })
            .sum::<usize>();
    (chars / 4) as u64
}

fn emit_text(message: &mut AssistantMessage, on_event: &mut dyn FnMut(StreamEvent), text: &str) {
    message.text.push_str(text);
    on_event(StreamEvent::Text(super::delta_pool::owned(text)));
}

fn run_step(
    step: &Value,
    index: usize,
    request: &ChatRequest<'_>,
    abort: &AbortFlag,
    on_event: &mut dyn FnMut(StreamEvent),
    draft: &mut Draft,
) -> Result<(), ProviderError> {
    let Draft {
        message,
        usage,
        streamed,
    } = draft;
    let aborted = |_| ProviderError::Aborted;
    if let Some(text) = step.get("text").and_then(Value::as_str) {
        emit_text(message, on_event, text);
    } else if let Some(n) = step.get("notice") {
        // An advisory, as a real provider reports defaults it assumed.
        let severity = match n["severity"].as_str() {
            Some("info") => "info",
            Some("error") => "error",
            _ => "warning",
        };
        on_event(StreamEvent::Notice(super::Notice {
            severity,
            title: n["title"].as_str().unwrap_or_default().to_owned(),
            description: n["description"].as_str().map(str::to_owned),
        }));
    } else if let Some(text) = step.get("thinking").and_then(Value::as_str) {
        message.thinking.push_str(text);
        on_event(StreamEvent::Thinking(text.to_owned()));
    } else if let Some(call) = step.get("tool_call") {
        let arguments = call
            .get("arguments")
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        // Named and complete at once: shown `pending`, then started with its arguments.
        start_call(index, call, message, on_event);
        if let Some(last) = message.tool_calls.last_mut() {
            last.arguments = arguments;
        }
    } else if let Some(call) = step.get("tool_call_start") {
        // Its arguments follow in `tool_call_args` steps, as raw text (parsed at the end).
        start_call(index, call, message, on_event);
        streamed.push(message.tool_calls.len() - 1);
    } else if let Some(part) = step.get("tool_call_args").and_then(Value::as_str) {
        let Some(call) = message.tool_calls.last_mut() else {
            return Err(ProviderError::Stream(
                "scripted provider: tool_call_args before any tool_call_start".to_owned(),
            ));
        };
        if let Value::String(raw) = &mut call.arguments {
            raw.push_str(part);
        }
        on_event(StreamEvent::ToolCallDelta {
            id: call.id.clone(),
            delta: part.to_owned(),
        });
    } else if let Some(u) = step.get("usage") {
        let get = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        usage.add(Usage {
            input: get("input"),
            output: get("output"),
            cache_read: get("cache_read"),
            cache_write: get("cache_write"),
        });
    } else if let Some(ms) = step.get("sleep_ms").and_then(Value::as_u64) {
        abort.sleep(Duration::from_millis(ms)).map_err(aborted)?;
    } else if let Some(ms) = step.get("stuck_ms").and_then(Value::as_u64) {
        // Deaf to the abort flag on purpose: it stands for a call no abort hook reaches.
        std::thread::sleep(Duration::from_millis(ms));
    } else if let Some(r) = step.get("repeat") {
        let text = r.get("text").and_then(Value::as_str).unwrap_or("");
        for _ in 0..r.get("count").and_then(Value::as_u64).unwrap_or(0) {
            abort.check().map_err(aborted)?;
            emit_text(message, on_event, text);
        }
    } else if step.get("wait_for_cancel").is_some() {
        loop {
            abort.sleep(Duration::from_secs(3600)).map_err(aborted)?;
        }
    } else if let Some(s) = step.get("stream_until_cancelled") {
        let text = s.get("text").and_then(Value::as_str).unwrap_or(".");
        let interval =
            Duration::from_millis(s.get("interval_ms").and_then(Value::as_u64).unwrap_or(10));
        loop {
            emit_text(message, on_event, text);
            abort.sleep(interval).map_err(aborted)?;
        }
    } else if let Some(text) = step.get("stray_stdout").and_then(Value::as_str) {
        // Simulates a misbehaving crate or child writing to fd 1: after the transport's
        // take-over this must land on stderr, never in the protocol stream.
        use std::io::Write;
        let mut out = std::io::stdout();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    } else if let Some(expect) = step.get("expect").and_then(Value::as_array) {
        let last = request.messages.last().map(describe).unwrap_or_default();
        for needle in expect.iter().filter_map(Value::as_str) {
            if !last.contains(needle) {
                return Err(ProviderError::Stream(format!(
                    "scripted expectation failed: the last message does not contain {needle:?}; it was: {last}"
                )));
            }
        }
    } else if let Some(expect) = step.get("expect_history").and_then(Value::as_array) {
        let all: Vec<String> = request.messages.iter().map(describe).collect();
        expect_in("history", &all.join("\n"), expect)?;
    } else if let Some(expect) = step.get("expect_first").and_then(Value::as_array) {
        let first = request.messages.first().map(describe).unwrap_or_default();
        expect_in("first message", &first, expect)?;
    } else if let Some(expect) = step.get("expect_system").and_then(Value::as_array) {
        expect_in("system prompt", request.system, expect)?;
    } else if let Some(absent) = step.get("expect_system_none").and_then(Value::as_array) {
        if let Some(needle) = absent
            .iter()
            .filter_map(Value::as_str)
            .find(|n| request.system.contains(n))
        {
            return Err(ProviderError::Stream(format!(
                "scripted expectation failed: the system prompt contains {needle:?}"
            )));
        }
    } else if let Some(absent) = step.get("expect_none").and_then(Value::as_array) {
        for needle in absent.iter().filter_map(Value::as_str) {
            if let Some(m) = request
                .messages
                .iter()
                .map(describe)
                .find(|m| m.contains(needle))
            {
                return Err(ProviderError::Stream(format!(
                    "scripted expectation failed: a message contains {needle:?}: {m}"
                )));
            }
        }
    } else {
        return Err(ProviderError::Stream(format!(
            "scripted provider: unknown step {step}"
        )));
    }
    Ok(())
}

fn expect_in(what: &str, text: &str, expect: &[Value]) -> Result<(), ProviderError> {
    for needle in expect.iter().filter_map(Value::as_str) {
        if !text.contains(needle) {
            return Err(ProviderError::Stream(format!(
                "scripted expectation failed: the {what} does not contain {needle:?}; it was: {text}"
            )));
        }
    }
    Ok(())
}

/// A plain-text rendering of a message for `expect` checks.
fn describe(message: &Message) -> String {
    match message {
        Message::User { text, images } => format!(
            "user: {text} [{} image(s)] {}",
            images.len(),
            images
                .iter()
                .map(|i| i.data.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Message::Assistant(a) => format!("assistant: {}", a.text),
        Message::ToolResult(ToolResultMessage {
            name,
            text,
            is_error,
            ..
        }) => {
            format!("tool_result {name} error={is_error}: {text}")
        }
    }
}
