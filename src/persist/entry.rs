//! The session file format (behaviour spec §5.6), as pure conversions between JSON lines and
//! Rust data: the v3 header, the entry envelope (`type`, 8-hex `id`, `parentId`, ISO
//! `timestamp`) and the message shapes upstream tooling reads (user, assistant with
//! `text`/`thinking`/`toolCall` blocks, `toolResult`, `bashExecution`).
//!
//! Entry types this binary does not act on (`compaction`, `custom`, `label`, `branch_summary`,
//! …) are kept as `EntryKind::Other` with their JSON, so a file written upstream loads, and the
//! engineers adding compaction and goals give them a variant of their own next to the others.

use crate::base::json::json;
use serde_json::{Map, Value};

use crate::base::content::Image;
use crate::provider::{AssistantMessage, Message, ReasoningBlock, ToolCall, ToolResultMessage};

pub(crate) const VERSION: u64 = 3;

/// Line 1 of a session file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Header {
    pub id: String,
    pub timestamp: String,
    pub cwd: String,
    /// The file this one was forked from (`--fork`).
    pub parent_session: Option<String>,
}

/// One line after the header.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub id: String,
    pub parent_id: Option<String>,
    pub timestamp: String,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EntryKind {
    Message(Record),
    ModelChange {
        provider: String,
        model_id: String,
    },
    ThinkingLevelChange(String),
    /// `service_tier_change {serviceTier}`: the OpenAI service tier (`/fast`).
    ServiceTierChange(String),
    /// `session_info {name}`: the session's title.
    SessionInfo {
        name: String,
    },
    /// `compaction`: what a compaction summarised away.
    Compaction(Compaction),
    /// `custom_message`: a user-role message the model sees and a replay does not show.
    CustomMessage(CustomMessage),
    /// `custom {customType, data}`: state kept with the session, outside the model's
    /// context (the goal's `thread_goal_state`).
    Custom(CustomData),
    /// Any other entry type (`label`, `branch_summary`, …), kept verbatim.
    Other(Value),
}

/// The `customType` of the goal's state (behaviour spec §5.3).
pub(crate) const GOAL_STATE: &str = "thread_goal_state";

/// The `customType` of the session's `/rlm-max-depth` (`{"maxDepth": n}`, behaviour spec §4.3).
pub(crate) const RLM_MAX_DEPTH_STATE: &str = "rlm_max_depth_state";

/// The `customType` of a refinement's result (behaviour spec §5.4), manual or automatic.
pub(crate) const REFINEMENT: &str = "prime-agent.refinement";

/// The entry type of a child's usage counted into its parent's (behaviour spec §5.6).
pub(crate) const CHILD_USAGE: &str = "child_usage_attributed";

/// A `child_usage_attributed` entry's body: the child and the usage, in the shape of an
/// assistant message's `usage` (cost in USD, `total` only).
pub(crate) fn child_usage(
    child_id: &str,
    child_name: &str,
    u: crate::provider::Usage,
    cost: f64,
) -> Value {
    json!({
        "type": CHILD_USAGE,
        "childId": child_id,
        "childName": child_name,
        "usage": {
            "input": u.input, "output": u.output, "cacheRead": u.cache_read,
            "cacheWrite": u.cache_write,
            "totalTokens": u.input + u.output + u.cache_read + u.cache_write,
            "cost": { "total": cost },
        },
    })
}

/// The usage and cost a `child_usage_attributed` entry records.
pub(crate) fn child_usage_of(v: &Value) -> Option<(crate::provider::Usage, f64)> {
    if v["type"] != CHILD_USAGE {
        return None;
    }
    let u = &v["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    Some((
        crate::provider::Usage {
            input: n("input"),
            output: n("output"),
            cache_read: n("cacheRead"),
            cache_write: n("cacheWrite"),
        },
        u["cost"]["total"].as_f64().unwrap_or(0.0),
    ))
}

/// Keys of an entry this binary does not act on, kept so a line round-trips exactly.
pub(crate) type Rest = Map<String, Value>;

/// A `compaction` entry (upstream's fields, plus ours: the exact summary message).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Compaction {
    pub summary: String,
    pub first_kept_entry_id: Option<String>,
    pub tokens_before: u64,
    /// `primeAgentContext`: the summary message the model saw after the compaction.
    pub context: Option<String>,
    pub rest: Rest,
}

impl Compaction {
    /// The user message that stands for what was summarised.
    pub(crate) fn context_text(&self) -> &str {
        self.context.as_deref().unwrap_or(&self.summary)
    }
}

/// A `custom_message` entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct CustomMessage {
    pub custom_type: String,
    /// A string, or text blocks (upstream writes either).
    pub content: Value,
    pub display: bool,
    pub details: Option<Value>,
    pub rest: Rest,
}

impl CustomMessage {
    /// The content as one text.
    pub(crate) fn text(&self) -> String {
        content_text(&self.content)
    }
}

/// The text of a `content` that is a string or a list of blocks (their `text`s, a line
/// apart); empty for anything else.
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A `custom` entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct CustomData {
    pub custom_type: String,
    pub data: Value,
    pub rest: Rest,
}

/// `v`'s keys other than the envelope's and `known`.
fn rest_of(v: &Value, known: &[&str]) -> Rest {
    v.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| {
            !matches!(k.as_str(), "type" | "id" | "parentId" | "timestamp")
                && !known.contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn with_rest(mut v: Value, rest: &Rest) -> Value {
    if let Some(o) = v.as_object_mut() {
        for (k, x) in rest {
            o.entry(k.clone()).or_insert_with(|| x.clone());
        }
    }
    v
}

/// A `message` entry's `message`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Record {
    /// A message the model sees, as the conversation holds it.
    Chat(Message),
    /// A user shell command (`!cmd`) kept in context: `bashExecution`.
    Bash(BashRun),
    /// A tool result with what the client was shown of it (`details`: locations, diff, …).
    ToolResult {
        message: Message,
        details: Option<Value>,
    },
    /// Another role (`custom`, `branchSummary`, `compactionSummary`), kept verbatim.
    Other(Value),
}

/// A user shell run as stored (`bashExecution`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BashRun {
    pub command: String,
    pub output: String,
    pub exit_code: Option<i32>,
    pub cancelled: bool,
}

impl BashRun {
    /// What the model sees of the run (the text `!cmd` puts into the conversation).
    pub(crate) fn context_text(&self) -> String {
        format!("Ran `{}`\n{}", self.command, self.output)
    }
}

pub(crate) fn header_line(h: &Header) -> Value {
    let mut v = json!({
        "type": "session",
        "version": VERSION,
        "id": h.id,
        "timestamp": h.timestamp,
        "cwd": h.cwd,
    });
    if let Some(p) = &h.parent_session {
        v["parentSession"] = json!(p);
    }
    v
}

pub(crate) fn parse_header(v: &Value) -> Result<Header, String> {
    if v["type"] != "session" {
        return Err("the first line is not a session header".to_owned());
    }
    let s = |k: &str| v[k].as_str().map(str::to_owned);
    Ok(Header {
        id: s("id").ok_or("the session header has no id")?,
        timestamp: s("timestamp").unwrap_or_default(),
        cwd: s("cwd").unwrap_or_default(),
        parent_session: s("parentSession"),
    })
}

pub(crate) fn entry_line(e: &Entry) -> Value {
    let mut v = match &e.kind {
        EntryKind::Message(r) => {
            json!({ "type": "message", "message": record_json(r, &e.timestamp) })
        }
        EntryKind::ModelChange { provider, model_id } => {
            json!({ "type": "model_change", "provider": provider, "modelId": model_id })
        }
        EntryKind::ThinkingLevelChange(level) => {
            json!({ "type": "thinking_level_change", "thinkingLevel": level })
        }
        EntryKind::ServiceTierChange(tier) => {
            json!({ "type": "service_tier_change", "serviceTier": tier })
        }
        EntryKind::SessionInfo { name } => json!({ "type": "session_info", "name": name }),
        EntryKind::Compaction(c) => {
            let mut v = json!({
                "type": "compaction", "summary": c.summary,
                "firstKeptEntryId": c.first_kept_entry_id, "tokensBefore": c.tokens_before,
            });
            if let Some(context) = &c.context {
                v["primeAgentContext"] = json!(context);
            }
            with_rest(v, &c.rest)
        }
        EntryKind::CustomMessage(m) => {
            let mut v = json!({
                "type": "custom_message", "customType": m.custom_type, "content": m.content,
                "display": m.display,
            });
            if let Some(details) = &m.details {
                v["details"] = details.clone();
            }
            with_rest(v, &m.rest)
        }
        EntryKind::Custom(c) => with_rest(
            json!({ "type": "custom", "customType": c.custom_type, "data": c.data }),
            &c.rest,
        ),
        EntryKind::Other(v) => v.clone(),
    };
    v["id"] = json!(e.id);
    v["parentId"] = e.parent_id.as_ref().map_or(Value::Null, |p| json!(p));
    v["timestamp"] = json!(e.timestamp);
    v
}

pub(crate) fn parse_entry(v: &Value) -> Result<Entry, String> {
    let id = v["id"].as_str().ok_or("an entry has no id")?.to_owned();
    let parent_id = v["parentId"].as_str().map(str::to_owned);
    let timestamp = v["timestamp"].as_str().unwrap_or_default().to_owned();
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let kind = match v["type"].as_str() {
        Some("message") => EntryKind::Message(parse_record(&v["message"])?),
        Some("model_change") => EntryKind::ModelChange {
            provider: s("provider"),
            model_id: s("modelId"),
        },
        Some("thinking_level_change") => EntryKind::ThinkingLevelChange(s("thinkingLevel")),
        Some("service_tier_change") => EntryKind::ServiceTierChange(s("serviceTier")),
        Some("session_info") => EntryKind::SessionInfo { name: s("name") },
        Some("compaction") => EntryKind::Compaction(Compaction {
            summary: s("summary"),
            first_kept_entry_id: v["firstKeptEntryId"].as_str().map(str::to_owned),
            tokens_before: v["tokensBefore"].as_u64().unwrap_or(0),
            context: v["primeAgentContext"].as_str().map(str::to_owned),
            rest: rest_of(
                v,
                &[
                    "summary",
                    "firstKeptEntryId",
                    "tokensBefore",
                    "primeAgentContext",
                ],
            ),
        }),
        Some("custom_message") => EntryKind::CustomMessage(CustomMessage {
            custom_type: s("customType"),
            content: v.get("content").cloned().unwrap_or(Value::Null),
            display: v["display"].as_bool().unwrap_or(false),
            details: v.get("details").filter(|d| !d.is_null()).cloned(),
            rest: rest_of(v, &["customType", "content", "display", "details"]),
        }),
        Some("custom") => EntryKind::Custom(CustomData {
            custom_type: s("customType"),
            data: v.get("data").cloned().unwrap_or(Value::Null),
            rest: rest_of(v, &["customType", "data"]),
        }),
        Some(_) => EntryKind::Other(v.clone()),
        None => return Err("an entry has no type".to_owned()),
    };
    Ok(Entry {
        id,
        parent_id,
        timestamp,
        kind,
    })
}

/// Milliseconds since the epoch of an ISO timestamp we wrote (messages carry numbers).
fn millis_of(iso: &str) -> u64 {
    crate::base::time::parse_iso_millis(iso).unwrap_or(0)
}

fn images_json(images: &[Image]) -> impl Iterator<Item = Value> + '_ {
    images
        .iter()
        .map(|i| json!({ "type": "image", "data": i.data, "mimeType": i.mime_type }))
}

fn text_and_images(text: &str, images: &[Image]) -> Value {
    let mut blocks = vec![json!({ "type": "text", "text": text })];
    blocks.extend(images_json(images));
    Value::Array(blocks)
}

/// A message as upstream writes it (the `message` of a `message` entry).
pub(crate) fn record_json(r: &Record, timestamp: &str) -> Value {
    let ts = millis_of(timestamp);
    match r {
        Record::Chat(Message::User { text, images }) => {
            let content = if images.is_empty() {
                json!(text)
            } else {
                text_and_images(text, images)
            };
            json!({ "role": "user", "content": content, "timestamp": ts })
        }
        Record::Chat(Message::Assistant(m)) => assistant_json(m, ts),
        Record::Chat(m @ Message::ToolResult(_)) => tool_result_json(m, None, ts),
        Record::ToolResult { message, details } => tool_result_json(message, details.as_ref(), ts),
        Record::Bash(b) => json!({
            "role": "bashExecution",
            "command": b.command,
            "output": b.output,
            "exitCode": b.exit_code,
            "cancelled": b.cancelled,
            "truncated": false,
            "timestamp": ts,
        }),
        Record::Other(v) => v.clone(),
    }
}

fn tool_result_json(m: &Message, details: Option<&Value>, ts: u64) -> Value {
    let Message::ToolResult(r) = m else {
        return Value::Null;
    };
    let mut v = json!({
        "role": "toolResult",
        "toolCallId": &r.call_id,
        "toolName": &r.name,
        "content": text_and_images(&r.text, &r.images),
        "isError": r.is_error,
        "timestamp": ts,
    });
    if let Some(d) = details {
        v["details"] = d.clone();
    }
    v
}

fn assistant_json(m: &AssistantMessage, ts: u64) -> Value {
    let mut content = Vec::new();
    if m.reasoning_blocks.is_empty() {
        if !m.thinking.is_empty() {
            content.push(json!({ "type": "thinking", "thinking": m.thinking }));
        }
    } else {
        for b in &m.reasoning_blocks {
            content.push(match b {
                ReasoningBlock::Signed {
                    thinking,
                    signature,
                } => json!({ "type": "thinking", "thinking": thinking, "thinkingSignature": signature }),
                ReasoningBlock::Redacted { data } => json!({
                    "type": "thinking", "thinking": "", "thinkingSignature": data, "redacted": true,
                }),
                // An OpenAI Responses output item, replayed verbatim to the model that made it.
                ReasoningBlock::ResponsesItem { model, item } => json!({
                    "type": "primeAgentResponsesItem", "model": model, "item": item,
                }),
                // A Gemini reply part with its thought signature, for the model that made it.
                ReasoningBlock::GeminiPart { model, part } => json!({
                    "type": "primeAgentGeminiPart", "model": model, "part": part,
                }),
            });
        }
    }
    if !m.text.is_empty() {
        content.push(json!({ "type": "text", "text": m.text }));
    }
    for c in &m.tool_calls {
        content.push(
            json!({ "type": "toolCall", "id": c.id, "name": c.name, "arguments": c.arguments }),
        );
    }
    let zero = json!({
        "input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0,
        "cost": { "input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0 },
    });
    let mut v = json!({
        "role": "assistant",
        "content": content,
        "api": "prime-agent",
        "provider": "",
        "model": "",
        "usage": zero,
        "stopReason": if m.tool_calls.is_empty() { "stop" } else { "toolUse" },
        "timestamp": ts,
    });
    // The visible thinking differs from the signed blocks only if a provider streamed text it
    // did not sign; keep it so the round trip is exact.
    let signed: String = m
        .reasoning_blocks
        .iter()
        .filter_map(|b| match b {
            ReasoningBlock::Signed { thinking, .. } => Some(thinking.as_str()),
            ReasoningBlock::Redacted { .. }
            | ReasoningBlock::ResponsesItem { .. }
            | ReasoningBlock::GeminiPart { .. } => None,
        })
        .collect();
    if !m.reasoning_blocks.is_empty() && signed != m.thinking {
        v["primeAgentThinking"] = json!(m.thinking);
    }
    v
}

/// Text blocks joined (images apart), the way `content` may be a string or a block list.
fn content_parts(content: &Value) -> (String, Vec<Image>) {
    match content {
        Value::String(s) => (s.clone(), Vec::new()),
        Value::Array(blocks) => {
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for b in blocks {
                match b["type"].as_str() {
                    Some("text") => texts.push(b["text"].as_str().unwrap_or_default()),
                    Some("image") => images.push(Image {
                        data: b["data"].as_str().unwrap_or_default().to_owned(),
                        mime_type: b["mimeType"].as_str().unwrap_or_default().to_owned(),
                    }),
                    _ => {}
                }
            }
            (texts.join("\n"), images)
        }
        _ => (String::new(), Vec::new()),
    }
}

fn parse_record(v: &Value) -> Result<Record, String> {
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    Ok(match v["role"].as_str() {
        Some("user") => {
            let (text, images) = content_parts(&v["content"]);
            Record::Chat(Message::User { text, images })
        }
        Some("assistant") => Record::Chat(Message::Assistant(parse_assistant(v))),
        Some("toolResult") => {
            let (text, images) = content_parts(&v["content"]);
            let message = Message::ToolResult(ToolResultMessage {
                call_id: s("toolCallId"),
                name: s("toolName"),
                text,
                is_error: v["isError"].as_bool().unwrap_or(false),
                images,
            });
            Record::ToolResult {
                message,
                details: v.get("details").filter(|d| !d.is_null()).cloned(),
            }
        }
        Some("bashExecution") => Record::Bash(BashRun {
            command: s("command"),
            output: s("output"),
            exit_code: v["exitCode"].as_i64().and_then(|c| i32::try_from(c).ok()),
            cancelled: v["cancelled"].as_bool().unwrap_or(false),
        }),
        Some(_) => Record::Other(v.clone()),
        None => return Err("a message has no role".to_owned()),
    })
}

fn parse_assistant(v: &Value) -> AssistantMessage {
    let mut m = AssistantMessage::default();
    let mut texts = Vec::new();
    for b in v["content"].as_array().into_iter().flatten() {
        let s = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
        match b["type"].as_str() {
            Some("text") => texts.push(s("text")),
            Some("thinking") => {
                let signature = b["thinkingSignature"].as_str().filter(|s| !s.is_empty());
                match (signature, b["redacted"].as_bool().unwrap_or(false)) {
                    (Some(data), true) => m.reasoning_blocks.push(ReasoningBlock::Redacted {
                        data: data.to_owned(),
                    }),
                    (Some(sig), false) => {
                        m.thinking.push_str(&s("thinking"));
                        m.reasoning_blocks.push(ReasoningBlock::Signed {
                            thinking: s("thinking"),
                            signature: sig.to_owned(),
                        });
                    }
                    (None, _) => m.thinking.push_str(&s("thinking")),
                }
            }
            Some("primeAgentResponsesItem") => {
                m.reasoning_blocks.push(ReasoningBlock::ResponsesItem {
                    model: s("model"),
                    item: b["item"].clone(),
                })
            }
            Some("primeAgentGeminiPart") => m.reasoning_blocks.push(ReasoningBlock::GeminiPart {
                model: s("model"),
                part: b["part"].clone(),
            }),
            Some("toolCall") => m.tool_calls.push(ToolCall {
                id: s("id"),
                name: s("name"),
                arguments: b.get("arguments").cloned().unwrap_or(json!({})),
            }),
            _ => {}
        }
    }
    m.text = texts.join("");
    if let Some(t) = v["primeAgentThinking"].as_str() {
        m.thinking = t.to_owned();
    }
    m
}

/// The details stored with a tool result: what the client was shown beyond the text.
pub(crate) fn tool_details(
    locations: &[String],
    diff: Option<&crate::base::content::FileDiff>,
    ipython: Option<&crate::base::content::IpythonDetails>,
    display: Option<&crate::tools::ToolDisplay>,
) -> Option<Value> {
    let mut d = Map::new();
    // A tool that shows itself its own way (MCP: `<server>: <tool>`, kind from annotations):
    // the replay cannot ask it again, the server may be gone.
    if let Some(shown) = display {
        d.insert(
            "display".into(),
            json!({ "title": shown.title, "kind": shown.kind }),
        );
    }
    if !locations.is_empty() {
        d.insert("locations".into(), json!(locations));
    }
    if let Some(f) = diff {
        d.insert(
            "diff".into(),
            json!({ "path": f.path, "oldText": f.old_text, "newText": f.new_text }),
        );
    }
    if let Some(ip) = ipython {
        let attachments: Vec<Value> = ip
            .attachments
            .iter()
            .map(|a| json!({ "mimeType": a.mime_type, "path": a.path, "data": a.data }))
            .collect();
        d.insert(
            "ipython".into(),
            json!({ "attachments": attachments, "diffCount": ip.diff_count }),
        );
    }
    (!d.is_empty()).then_some(Value::Object(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind) -> Entry {
        Entry {
            id: "0a1b2c3d".into(),
            parent_id: Some("ffffffff".into()),
            timestamp: "2026-12-01T10:00:00.250Z".into(),
            kind,
        }
    }

    fn assistant(text: &str, thinking: &str, calls: Vec<ToolCall>) -> Message {
        Message::Assistant(AssistantMessage {
            text: text.into(),
            thinking: thinking.into(),
            reasoning_blocks: vec![],
            tool_calls: calls,
        })
    }

    #[test]
    fn every_entry_kind_round_trips_through_its_line() {
        let image = Image {
            data: "aGk=".into(),
            mime_type: "image/png".into(),
        };
        let call = ToolCall {
            id: "call_1".into(),
            name: "ipython".into(),
            arguments: json!({"code": "1+1"}),
        };
        let signed = Message::Assistant(AssistantMessage {
            text: "t".into(),
            thinking: "ab".into(),
            reasoning_blocks: vec![
                ReasoningBlock::Signed {
                    thinking: "ab".into(),
                    signature: "sig".into(),
                },
                ReasoningBlock::Redacted { data: "xx".into() },
                ReasoningBlock::ResponsesItem {
                    model: "gpt-5".into(),
                    item: json!({"type": "reasoning", "encrypted_content": "e"}),
                },
                ReasoningBlock::GeminiPart {
                    model: "gemini-3-pro".into(),
                    part: json!({"functionCall": {"name": "t", "args": {}}, "thoughtSignature": "c2ln"}),
                },
            ],
            tool_calls: vec![],
        });
        let cases = vec![
            EntryKind::Message(Record::Chat(Message::User {
                text: "hi".into(),
                images: vec![],
            })),
            EntryKind::Message(Record::Chat(Message::User {
                text: "look".into(),
                images: vec![image.clone()],
            })),
            EntryKind::Message(Record::Chat(assistant("done", "hmm", vec![call]))),
            EntryKind::Message(Record::Chat(signed)),
            EntryKind::Message(Record::ToolResult {
                message: Message::ToolResult(ToolResultMessage {
                    call_id: "call_1".into(),
                    name: "ipython".into(),
                    text: "2".into(),
                    is_error: false,
                    images: vec![image],
                }),
                details: Some(json!({"locations": ["a.txt"]})),
            }),
            EntryKind::Message(Record::Bash(BashRun {
                command: "ls".into(),
                output: "a\n".into(),
                exit_code: Some(0),
                cancelled: false,
            })),
            EntryKind::ModelChange {
                provider: "openai".into(),
                model_id: "gpt-5".into(),
            },
            EntryKind::ThinkingLevelChange("high".into()),
            EntryKind::ServiceTierChange("priority".into()),
            EntryKind::SessionInfo {
                name: "Title".into(),
            },
        ];
        for kind in cases {
            let e = entry(kind);
            let line = entry_line(&e);
            assert_eq!(parse_entry(&line).unwrap(), e, "{line}");
        }
    }

    #[test]
    fn lines_have_the_upstream_shapes() {
        let line = entry_line(&entry(EntryKind::Message(Record::Chat(assistant(
            "ok",
            "",
            vec![ToolCall {
                id: "c".into(),
                name: "bash".into(),
                arguments: json!({"command": "ls"}),
            }],
        )))));
        assert_eq!(line["type"], "message");
        assert_eq!(line["id"], "0a1b2c3d");
        assert_eq!(line["parentId"], "ffffffff");
        assert_eq!(line["timestamp"], "2026-12-01T10:00:00.250Z");
        let m = &line["message"];
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["stopReason"], "toolUse");
        assert_eq!(
            m["content"],
            json!([{"type": "text", "text": "ok"}, {"type": "toolCall", "id": "c", "name": "bash", "arguments": {"command": "ls"}}])
        );
        assert_eq!(m["usage"]["totalTokens"], 0);
        assert!(m["timestamp"].as_u64().unwrap() > 1_700_000_000_000);
        let user = entry_line(&entry(EntryKind::Message(Record::Chat(Message::User {
            text: "hi".into(),
            images: vec![],
        }))));
        assert_eq!(user["message"]["content"], "hi");
        let h = Header {
            id: "u".into(),
            timestamp: "t".into(),
            cwd: "/w".into(),
            parent_session: Some("/s/p.jsonl".into()),
        };
        assert_eq!(
            header_line(&h),
            json!({"type": "session", "version": 3, "id": "u", "timestamp": "t", "cwd": "/w", "parentSession": "/s/p.jsonl"})
        );
        assert_eq!(parse_header(&header_line(&h)).unwrap(), h);
        let mut root = entry(EntryKind::SessionInfo { name: "x".into() });
        root.parent_id = None;
        assert_eq!(entry_line(&root)["parentId"], Value::Null);
    }

    #[test]
    fn typed_entries_and_upstream_ones_round_trip_exactly_and_bad_ones_are_refused() {
        let compaction = json!({"type": "compaction", "id": "11111111", "parentId": null, "timestamp": "t", "summary": "s", "firstKeptEntryId": "x", "tokensBefore": 9, "details": {"readFiles": ["a"]}});
        let e = parse_entry(&compaction).unwrap();
        let EntryKind::Compaction(c) = &e.kind else {
            panic!("{e:?}")
        };
        assert_eq!(
            (c.summary.as_str(), c.tokens_before, c.context_text()),
            ("s", 9, "s")
        );
        assert_eq!(entry_line(&e), compaction, "upstream's extra keys are kept");
        let typed = [
            json!({"type": "custom_message", "id": "1", "parentId": "0", "timestamp": "t", "customType": "heartbeat_prompt", "content": "BEAT", "display": true, "details": {"jobId": "hb-1"}}),
            json!({"type": "custom_message", "id": "1", "parentId": "0", "timestamp": "t", "customType": "x", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "display": false}),
            json!({"type": "custom", "id": "2", "parentId": "1", "timestamp": "t", "customType": GOAL_STATE, "data": {"status": "active", "tokensUsed": 5}}),
            json!({"type": "compaction", "id": "3", "parentId": "2", "timestamp": "t", "summary": "s", "firstKeptEntryId": null, "tokensBefore": 1, "primeAgentContext": "ctx"}),
        ];
        for line in typed {
            let e = parse_entry(&line).unwrap();
            assert!(!matches!(e.kind, EntryKind::Other(_)), "{line}");
            assert_eq!(entry_line(&e), line);
        }
        let EntryKind::CustomMessage(m) = parse_entry(&json!({"type": "custom_message", "id": "1", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})).unwrap().kind else {
            panic!()
        };
        assert_eq!(m.text(), "a\nb");
        let label =
            json!({"type": "label", "id": "4", "parentId": null, "timestamp": "t", "label": "x"});
        let e = parse_entry(&label).unwrap();
        assert!(matches!(e.kind, EntryKind::Other(_)));
        assert_eq!(entry_line(&e), label);
        let custom = json!({"type": "message", "id": "22222222", "parentId": "11111111", "timestamp": "t", "message": {"role": "custom", "customType": "goal", "content": "c"}});
        let e = parse_entry(&custom).unwrap();
        assert!(matches!(e.kind, EntryKind::Message(Record::Other(_))));
        assert_eq!(entry_line(&e)["message"], custom["message"]);
        for bad in [
            json!({"type": "message"}),
            json!({"id": "1"}),
            json!({"id": "1", "type": "message", "message": {}}),
        ] {
            assert!(parse_entry(&bad).is_err(), "{bad}");
        }
        assert!(parse_header(&json!({"type": "message"})).is_err());
    }
}
