//! `--mode json`: upstream's session-event stream (`agent_start`, `turn_start`,
//! `message_start`/`message_update`/`message_end`, `tool_execution_start`/`update`/`end`,
//! `turn_end`, `agent_end`, `compaction_start`/`end`, `auto_retry_start`/`end`), rebuilt as a
//! pure mapping from the ACP `session/update`s the headless client receives and the prompt's
//! response. Messages have the shapes the session file gives them (`persist::entry`).
//!
//! What ACP does not carry is not invented: an assistant message's `usage` is zero (ACP reports
//! the context size and the prompt's total, not each reply's tokens), `provider` and `model`
//! are empty, and a tool's name is read from the call's `kind`, `rawInput` and `title` (exact
//! for the built-in tools and for tools without a display title; an MCP tool that gives itself
//! a title is named by that title). A compaction is reported when it ends (ACP names its reason
//! only then), so `compaction_start` comes right before its `compaction_end`.

use std::collections::HashMap;

use serde_json::Value;

use crate::base::json::json;
use crate::persist::entry::{record_json, BashRun, Record};
use crate::protocol::meta::NAMESPACE;
use crate::provider::{AssistantMessage, Message, ToolCall, ToolResultMessage};

/// A tool call of the current turn.
#[derive(Debug, Clone)]
struct Call {
    name: String,
    args: Value,
    started: bool,
}

/// The assistant message being streamed, and which of its blocks are open.
#[derive(Debug, Default)]
struct Open {
    message_id: Option<String>,
    msg: AssistantMessage,
    thinking_open: bool,
    text_open: bool,
}

/// The stream's state across updates.
pub(crate) struct Stream {
    clock: fn() -> String,
    turn_open: bool,
    open: Option<Open>,
    calls: HashMap<String, Call>,
    /// The newest ended assistant message (`turn_end.message`).
    last_assistant: Value,
    tool_results: Vec<Value>,
    messages: Vec<Value>,
    /// A user shell run (`!cmd`): its command and output so far.
    shell: Option<(String, String)>,
}

impl Stream {
    pub(crate) fn new(clock: fn() -> String) -> Stream {
        Stream {
            clock,
            turn_open: false,
            open: None,
            calls: HashMap::new(),
            last_assistant: Value::Null,
            tool_results: Vec::new(),
            messages: Vec::new(),
            shell: None,
        }
    }

    /// The events before the first update: the run and its first turn start, with the prompt.
    pub(crate) fn start(&mut self, prompt: &Value) -> Vec<Value> {
        let mut out = vec![json!({"type": "agent_start"})];
        self.ensure_turn(&mut out);
        let mut text = String::new();
        let mut images = Vec::new();
        for block in prompt.as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
                Some("image") => images.push(crate::base::content::Image {
                    data: block["data"].as_str().unwrap_or_default().to_owned(),
                    mime_type: block["mimeType"].as_str().unwrap_or_default().to_owned(),
                }),
                _ => {}
            }
        }
        let user = self.message(Record::Chat(Message::User { text, images }));
        self.whole_message(user, &mut out);
        out
    }

    /// The events one `session/update` payload stands for.
    pub(crate) fn update(&mut self, update: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        match update["sessionUpdate"].as_str().unwrap_or_default() {
            kind @ ("agent_message_chunk" | "agent_thought_chunk") => {
                let delta = update["content"]["text"].as_str().unwrap_or_default();
                let id = update["messageId"].as_str();
                self.chunk(id, kind == "agent_thought_chunk", delta, &mut out);
            }
            "tool_call" | "tool_call_update" => {
                let id = update["toolCallId"].as_str().unwrap_or_default();
                if id.starts_with(&crate::server::events::bash_tool_call_id(None)) {
                    self.shell(update, &mut out);
                } else {
                    self.tool(id, update, &mut out);
                }
            }
            // Each model reply's usage comes once its tool calls have ended: the turn's end.
            "usage_update" => self.end_turn(&mut out),
            "session_info_update" => {
                let ours = &update["_meta"][NAMESPACE];
                if let Some(retry) = ours.get("autoRetry") {
                    out.extend(auto_retry(retry));
                }
                if let Some(c) = ours.get("compaction") {
                    out.extend(compaction(c));
                }
            }
            _ => {}
        }
        out
    }

    /// The events after the prompt's response: the open message ends with the prompt's stop
    /// reason (an error becomes an assistant message saying it), then the turn and the run.
    pub(crate) fn finish(&mut self, outcome: &Result<Value, String>) -> Vec<Value> {
        let mut out = Vec::new();
        let (reason, error) = match outcome {
            Ok(r) => match r["stopReason"].as_str() {
                Some("cancelled") => ("aborted", None),
                Some("max_tokens") => ("length", None),
                Some("refusal") => ("error", Some("the model refused")),
                _ => ("stop", None),
            },
            Err(e) => ("error", Some(e.as_str())),
        };
        if error.is_some() && self.open.is_none() {
            self.ensure_turn(&mut out);
            self.open_assistant(None, &mut out);
        }
        self.close_assistant(Some((reason, error)), &mut out);
        self.end_turn(&mut out);
        out.push(json!({"type": "agent_end", "messages": self.messages}));
        out
    }

    fn message(&self, record: Record) -> Value {
        record_json(&record, &(self.clock)())
    }

    /// `message_start` and `message_end` of a message that arrives whole.
    fn whole_message(&mut self, message: Value, out: &mut Vec<Value>) {
        out.push(json!({"type": "message_start", "message": message}));
        out.push(json!({"type": "message_end", "message": message}));
        self.messages.push(message);
    }

    fn ensure_turn(&mut self, out: &mut Vec<Value>) {
        if !self.turn_open {
            self.turn_open = true;
            out.push(json!({"type": "turn_start"}));
        }
    }

    fn end_turn(&mut self, out: &mut Vec<Value>) {
        if !self.turn_open {
            return;
        }
        self.close_assistant(None, out);
        self.turn_open = false;
        out.push(json!({
            "type": "turn_end",
            "message": self.last_assistant,
            "toolResults": std::mem::take(&mut self.tool_results),
        }));
    }

    fn assistant_json(&self, open: &Open) -> Value {
        self.message(Record::Chat(Message::Assistant(open.msg.clone())))
    }

    fn open_assistant(&mut self, message_id: Option<&str>, out: &mut Vec<Value>) {
        let open = Open {
            message_id: message_id.map(str::to_owned),
            ..Open::default()
        };
        let partial = self.assistant_json(&open);
        out.push(json!({"type": "message_start", "message": partial}));
        self.open = Some(open);
    }

    /// A `message_update` of the open message: `event` with its `partial`.
    fn message_update(&self, mut event: Value, out: &mut Vec<Value>) {
        let Some(open) = &self.open else { return };
        let message = self.assistant_json(open);
        event["partial"] = message.clone();
        out.push(json!({"type": "message_update", "message": message,
            "assistantMessageEvent": event}));
    }

    fn chunk(&mut self, id: Option<&str>, thinking: bool, delta: &str, out: &mut Vec<Value>) {
        if delta.is_empty() {
            return;
        }
        let same = |o: &Open| id.is_none() || o.message_id.as_deref() == id;
        if self.open.as_ref().is_some_and(|o| !same(o)) {
            self.close_assistant(None, out);
        }
        self.ensure_turn(out);
        if self.open.is_none() {
            self.open_assistant(id, out);
        }
        let open = self.open.as_mut().expect("opened above");
        // Blocks sit in the session file's order: thinking, text, tool calls.
        let (kind, index) = if thinking {
            open.msg.thinking.push_str(delta);
            ("thinking", 0)
        } else {
            open.msg.text.push_str(delta);
            ("text", usize::from(!open.msg.thinking.is_empty()))
        };
        let mut events = Vec::new();
        if !thinking && open.thinking_open {
            open.thinking_open = false;
            events.push(json!({"type": "thinking_end", "contentIndex": 0,
                "content": open.msg.thinking}));
        }
        let block_open = if thinking {
            &mut open.thinking_open
        } else {
            &mut open.text_open
        };
        if !*block_open {
            *block_open = true;
            events.push(json!({"type": format!("{kind}_start"), "contentIndex": index}));
        }
        events.push(
            json!({"type": format!("{kind}_delta"), "contentIndex": index,
            "delta": delta}),
        );
        for e in events {
            self.message_update(e, out);
        }
    }

    /// Ends the open assistant message: its open blocks and tool calls end, then
    /// `message_end`; `stop` overrides the stop reason (and gives the error text).
    fn close_assistant(&mut self, stop: Option<(&str, Option<&str>)>, out: &mut Vec<Value>) {
        let Some(open) = &mut self.open else { return };
        let mut events = Vec::new();
        let thinking_blocks = usize::from(!open.msg.thinking.is_empty());
        if std::mem::take(&mut open.thinking_open) {
            events.push(json!({"type": "thinking_end", "contentIndex": 0,
                "content": open.msg.thinking}));
        }
        if std::mem::take(&mut open.text_open) {
            events.push(json!({"type": "text_end", "contentIndex": thinking_blocks,
                "content": open.msg.text}));
        }
        let first_call = thinking_blocks + usize::from(!open.msg.text.is_empty());
        for (i, c) in open.msg.tool_calls.iter().enumerate() {
            events.push(
                json!({"type": "toolcall_end", "contentIndex": first_call + i,
                "toolCall": {"type": "toolCall", "id": c.id, "name": c.name,
                    "arguments": c.arguments}}),
            );
        }
        for e in events {
            self.message_update(e, out);
        }
        let open = self.open.take().expect("checked above");
        let mut message = self.assistant_json(&open);
        if let Some((reason, error)) = stop.filter(|(r, _)| *r != "stop") {
            message["stopReason"] = json!(reason);
            if let Some(e) = error {
                message["errorMessage"] = json!(e);
            }
        }
        out.push(json!({"type": "message_end", "message": message}));
        self.last_assistant = message.clone();
        self.messages.push(message);
    }

    fn tool(&mut self, id: &str, update: &Value, out: &mut Vec<Value>) {
        if id.is_empty() {
            return;
        }
        let args = update.get("rawInput").filter(|a| !a.is_null());
        if !self.calls.contains_key(id) {
            self.announce(id, update, out);
        } else if let Some(args) = args {
            self.refine(id, update, args);
        }
        match update["status"].as_str() {
            Some("in_progress") => {
                self.start_tool(id, out);
                if let Some(text) = content_text(&update["content"]) {
                    let call = &self.calls[id];
                    out.push(json!({"type": "tool_execution_update", "toolCallId": id,
                        "toolName": call.name, "args": call.args,
                        "partialResult": {"content": [{"type": "text", "text": text}]}}));
                }
            }
            Some(status @ ("completed" | "failed")) => {
                self.start_tool(id, out);
                self.end_tool(id, status == "failed", update, out);
            }
            _ => {}
        }
    }

    /// A call seen for the first time: a block of the assistant message.
    fn announce(&mut self, id: &str, update: &Value, out: &mut Vec<Value>) {
        let call = Call {
            name: tool_name(update),
            args: update.get("rawInput").cloned().unwrap_or(json!({})),
            started: false,
        };
        self.ensure_turn(out);
        if self.open.is_none() {
            self.open_assistant(None, out);
        }
        let open = self.open.as_mut().expect("opened above");
        open.msg.tool_calls.push(ToolCall {
            id: id.to_owned(),
            name: call.name.clone(),
            arguments: call.args.clone(),
        });
        let index = usize::from(!open.msg.thinking.is_empty())
            + usize::from(!open.msg.text.is_empty())
            + open.msg.tool_calls.len()
            - 1;
        self.calls.insert(id.to_owned(), call);
        self.message_update(
            json!({"type": "toolcall_start", "contentIndex": index}),
            out,
        );
    }

    /// Later arguments (and so a better name) of a call that has not started.
    fn refine(&mut self, id: &str, update: &Value, args: &Value) {
        let call = self.calls.get_mut(id).expect("known");
        if call.started {
            return;
        }
        call.args = args.clone();
        call.name = tool_name(update);
        if let Some(open) = &mut self.open {
            if let Some(c) = open.msg.tool_calls.iter_mut().find(|c| c.id == id) {
                c.arguments = args.clone();
                c.name = call.name.clone();
            }
        }
    }

    fn start_tool(&mut self, id: &str, out: &mut Vec<Value>) {
        if self.calls[id].started {
            return;
        }
        // The reply is complete once one of its calls runs.
        self.close_assistant(None, out);
        let call = self.calls.get_mut(id).expect("known");
        call.started = true;
        out.push(json!({"type": "tool_execution_start", "toolCallId": id,
            "toolName": call.name, "args": call.args}));
    }

    fn end_tool(&mut self, id: &str, failed: bool, update: &Value, out: &mut Vec<Value>) {
        let Some(call) = self.calls.remove(id) else {
            return;
        };
        let raw = &update["rawOutput"];
        let is_error = raw["isError"].as_bool().unwrap_or(failed);
        let text = match raw["output"].as_str() {
            Some(t) => t.to_owned(),
            None => content_text(&update["content"]).unwrap_or_default(),
        };
        let images = update["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["content"]["type"] == "image")
            .map(|c| crate::base::content::Image {
                data: c["content"]["data"].as_str().unwrap_or_default().to_owned(),
                mime_type: c["content"]["mimeType"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect();
        let result = self.message(Record::Chat(Message::ToolResult(ToolResultMessage {
            call_id: id.to_owned(),
            name: call.name.clone(),
            text,
            is_error,
            images,
        })));
        out.push(json!({"type": "tool_execution_end", "toolCallId": id,
            "toolName": call.name, "result": {"content": result["content"]},
            "isError": is_error}));
        self.tool_results.push(result.clone());
        self.whole_message(result, out);
    }

    /// A user shell run (`!cmd`): one `bashExecution` message once it ends.
    fn shell(&mut self, update: &Value, out: &mut Vec<Value>) {
        if let Some(command) = update["rawInput"]["command"].as_str() {
            self.shell = Some((command.to_owned(), String::new()));
        }
        if let (Some(text), Some(run)) = (content_text(&update["content"]), &mut self.shell) {
            run.1 = text;
        }
        let status = update["status"].as_str();
        if !matches!(status, Some("completed" | "failed")) {
            return;
        }
        let Some((command, output)) = self.shell.take() else {
            return;
        };
        let ok = status == Some("completed");
        let run = self.message(Record::Bash(BashRun {
            command,
            output,
            exit_code: ok.then_some(0),
            cancelled: false,
        }));
        self.whole_message(run, out);
    }
}

/// The text of ACP tool-call `content` (its text items, joined).
fn content_text(content: &Value) -> Option<String> {
    let texts: Vec<&str> = content
        .as_array()?
        .iter()
        .filter_map(|c| c["content"]["text"].as_str())
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

/// A tool's name from what ACP shows of its call (see the module doc).
fn tool_name(update: &Value) -> String {
    let input = &update["rawInput"];
    let has = |k: &str| input.get(k).is_some();
    let title = update["title"].as_str().unwrap_or_default();
    let name = match update["kind"].as_str() {
        _ if !input.is_object() => title,
        Some("execute") if has("code") => "ipython",
        Some("execute") if has("command") => "bash",
        Some("read") => "read",
        Some("edit") if has("content") => "write",
        Some("edit") if has("edits") => "edit",
        Some("think") => "todo",
        _ => title,
    };
    name.to_owned()
}

fn auto_retry(retry: &Value) -> Option<Value> {
    Some(match retry["phase"].as_str()? {
        "waiting" => json!({"type": "auto_retry_start", "attempt": retry["attempt"],
            "maxAttempts": retry["maxAttempts"], "delayMs": retry["delayMs"],
            "errorMessage": retry["errorMessage"]}),
        "recovered" => {
            json!({"type": "auto_retry_end", "success": true, "attempt": retry["attempt"]})
        }
        "exhausted" => json!({"type": "auto_retry_end", "success": false,
            "attempt": retry["attempt"], "finalError": retry["errorMessage"]}),
        _ => return None,
    })
}

/// A compaction's start and end, from its end (`_meta…compaction`): without a summary it did
/// not complete (ACP's `_meta` form does not say whether it failed or was cancelled).
fn compaction(c: &Value) -> Vec<Value> {
    let reason = c["reason"]
        .as_str()
        .filter(|r| matches!(*r, "threshold" | "overflow"))
        .unwrap_or("manual");
    let mut end = json!({"type": "compaction_end", "reason": reason, "willRetry": false});
    match c["summary"].as_str() {
        Some(summary) => {
            end["result"] = json!({"summary": summary, "tokensBefore": c["tokensBefore"]});
            end["aborted"] = json!(false);
        }
        None => end["aborted"] = json!(true),
    }
    vec![json!({"type": "compaction_start", "reason": reason}), end]
}

#[cfg(test)]
mod tests;
