//! `session/load` replay: the pure mapping from a loaded session's entries to the
//! `session/update`s (before the `_meta` envelope) that show the client the conversation again.
//!
//! Tool calls go through the live mapping (`events::to_session_updates` of the same
//! `ToolStart`/`ToolEnd` events), so a replayed call has the title, kind, `rawInput`,
//! locations, content, diff and final status the client saw while it ran. Ids differ from the
//! live ones only where the live ones were per-process: assistant messages are
//! `prime-agent-replay-assistant-<n>`, user messages `prime-agent-replay-user-<n>`, user shell
//! runs `prime-agent-replay-bash-<n>`.

use std::collections::HashMap;

use crate::base::json::json;
use serde_json::Value;

use crate::agent::turn::{AgentEvent, ToolResultView};
use crate::base::content::{Attachment, FileDiff, IpythonDetails};
use crate::persist::entry::{Entry, EntryKind, Record};
use crate::provider::{Message, ToolResultMessage};
use crate::server::events::{to_session_updates, MappingState};
use crate::tools::ToolDisplay;

fn text_block(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

fn diff_of(details: &Value) -> Option<FileDiff> {
    let d = details.get("diff")?;
    Some(FileDiff {
        path: d["path"].as_str()?.to_owned(),
        old_text: d["oldText"].as_str().map(str::to_owned),
        new_text: d["newText"].as_str().unwrap_or_default().to_owned(),
    })
}

fn ipython_of(details: &Value) -> Option<IpythonDetails> {
    let ip = details.get("ipython")?;
    let s = |v: &Value, k: &str| v[k].as_str().map(str::to_owned);
    Some(IpythonDetails {
        attachments: ip["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| Attachment {
                mime_type: s(a, "mimeType"),
                path: s(a, "path"),
                data: s(a, "data"),
            })
            .collect(),
        diff_count: ip["diffCount"].as_u64().unwrap_or(0) as usize,
    })
}

/// How the live call was shown when its tool decided that itself: stored with the result
/// (`details.display`), else read back from an MCP tool's name; `None` lets the mapping
/// derive it from the name, as live.
fn display_of(name: &str, args: &Value, details: &Value) -> Option<ToolDisplay> {
    let stored = details.get("display").and_then(|d| {
        Some(ToolDisplay::stored(
            d.get("title")?.as_str()?,
            d.get("kind").and_then(Value::as_str).unwrap_or("other"),
        ))
    });
    stored.or_else(|| crate::mcp::tools::display_from_name(name, args))
}

/// Every update that replays `entries`, in order.
pub(crate) fn replay(entries: &[Entry]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut state = MappingState::default();
    let (mut users, mut assistants, mut bashes) = (0u64, 0u64, 0u64);
    // Calls the model made whose results have not come yet: id → (name, arguments).
    let mut open: Vec<(String, String, Value)> = Vec::new();
    let events = |event: AgentEvent, out: &mut Vec<Value>, state: &mut MappingState| {
        out.extend(to_session_updates(&event, state));
    };
    // Each call's stored details, so a reply's calls are announced with them before any runs,
    // as the live turn shows them.
    let details: HashMap<&str, &Value> = entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Message(Record::ToolResult {
                message: Message::ToolResult(ToolResultMessage { call_id, .. }),
                details: Some(d),
            }) => Some((call_id.as_str(), d)),
            _ => None,
        })
        .collect();
    for entry in entries {
        let EntryKind::Message(record) = &entry.kind else {
            if let EntryKind::SessionInfo { name } = &entry.kind {
                out.push(json!({ "sessionUpdate": "session_info_update", "title": name }));
            }
            if let EntryKind::Compaction(c) = &entry.kind {
                events(
                    AgentEvent::CompactionEnd {
                        error: None,
                        tokens_before: Some(c.tokens_before),
                        summary: Some(c.summary.clone()),
                        reason: None,
                    },
                    &mut out,
                    &mut state,
                );
            }
            continue;
        };
        match record {
            Record::Chat(Message::User { text, images }) => {
                users += 1;
                let id = format!("prime-agent-replay-user-{users}");
                let mut blocks = vec![text_block(text)];
                blocks.extend(
                    images.iter().map(
                        |i| json!({ "type": "image", "data": i.data, "mimeType": i.mime_type }),
                    ),
                );
                for content in blocks {
                    out.push(json!({ "sessionUpdate": "user_message_chunk", "content": content, "messageId": id }));
                }
            }
            Record::Chat(Message::Assistant(m)) => {
                assistants += 1;
                let id = format!("prime-agent-replay-assistant-{assistants}");
                for (kind, text) in [
                    ("agent_thought_chunk", &m.thinking),
                    ("agent_message_chunk", &m.text),
                ] {
                    if !text.is_empty() {
                        out.push(json!({ "sessionUpdate": kind, "content": text_block(text), "messageId": id }));
                    }
                }
                for c in &m.tool_calls {
                    let d = details.get(c.id.as_str()).copied().unwrap_or(&Value::Null);
                    events(
                        AgentEvent::ToolAnnounced {
                            id: c.id.clone(),
                            name: c.name.clone(),
                            args: c.arguments.clone(),
                            locations: locations_of(d),
                            display: display_of(&c.name, &c.arguments, d),
                        },
                        &mut out,
                        &mut state,
                    );
                }
                open.extend(
                    m.tool_calls
                        .iter()
                        .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone())),
                );
            }
            Record::Chat(message @ Message::ToolResult(_)) => {
                tool_result(message, None, &mut open, &mut out, &mut state);
            }
            Record::ToolResult { message, details } => {
                tool_result(message, details.as_ref(), &mut open, &mut out, &mut state);
            }
            Record::Bash(run) => {
                bashes += 1;
                let id = format!("prime-agent-replay-bash-{bashes}");
                let ok = run.exit_code == Some(0) && !run.cancelled;
                out.push(json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": id,
                    "title": run.command,
                    "kind": "execute",
                    "status": "in_progress",
                    "rawInput": { "command": run.command },
                }));
                let mut end = json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": id,
                    "status": if ok { "completed" } else { "failed" },
                });
                if !run.output.is_empty() {
                    end["content"] =
                        json!([{ "type": "content", "content": text_block(&run.output) }]);
                }
                out.push(end);
            }
            Record::Other(_) => {}
        }
    }
    // Calls cut off by a crash before their result: shown, and shown as not finished well.
    let mut by_id: HashMap<String, ()> = HashMap::new();
    for (id, name, args) in open {
        if by_id.insert(id.clone(), ()).is_some() {
            continue;
        }
        let display = display_of(&name, &args, &Value::Null);
        events(
            AgentEvent::ToolStart {
                id: id.clone(),
                name: name.clone(),
                args,
                locations: Vec::new(),
                display,
            },
            &mut out,
            &mut state,
        );
        out.push(
            json!({ "sessionUpdate": "tool_call_update", "toolCallId": id, "status": "failed" }),
        );
    }
    out
}

fn locations_of(details: &Value) -> Vec<String> {
    details["locations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect()
}

fn tool_result(
    message: &Message,
    details: Option<&Value>,
    open: &mut Vec<(String, String, Value)>,
    out: &mut Vec<Value>,
    state: &mut MappingState,
) {
    let Message::ToolResult(r) = message else {
        return;
    };
    let args = match open.iter().position(|(id, _, _)| id == &r.call_id) {
        Some(i) => open.remove(i).2,
        None => json!({}),
    };
    let none = Value::Null;
    let details = details.unwrap_or(&none);
    let locations = locations_of(details);
    let display = display_of(&r.name, &args, details);
    // Announced with its reply (`pending`); here it runs and ends.
    for event in [
        AgentEvent::ToolStart {
            id: r.call_id.clone(),
            name: r.name.clone(),
            args,
            locations,
            display,
        },
        AgentEvent::ToolEnd {
            id: r.call_id.clone(),
            name: r.name.clone(),
            result: ToolResultView {
                text: Some(r.text.clone()),
                is_error: r.is_error,
                ipython: ipython_of(details),
                diff: diff_of(details),
                images: r.images.clone(),
                terminal: None,
            },
        },
    ] {
        out.extend(to_session_updates(&event, state));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::entry::BashRun;
    use crate::provider::tests_support::{result, user};
    use crate::provider::{AssistantMessage, ToolCall};

    fn e(kind: EntryKind) -> Entry {
        Entry {
            id: "00000000".into(),
            parent_id: None,
            timestamp: String::new(),
            kind,
        }
    }

    fn chat(m: Message) -> Entry {
        e(EntryKind::Message(Record::Chat(m)))
    }

    fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn a_conversation_replays_as_the_updates_the_client_saw() {
        let entries = vec![
            e(EntryKind::ModelChange {
                provider: "p".into(),
                model_id: "m".into(),
            }),
            chat(user("edit it")),
            chat(Message::Assistant(AssistantMessage {
                text: "On it.".into(),
                thinking: "plan".into(),
                tool_calls: vec![
                    call("c1", "edit", json!({"path": "a.txt"})),
                    call("c2", "ipython", json!({"code": "# sum\n1+1"})),
                ],
                ..Default::default()
            })),
            e(EntryKind::Message(Record::ToolResult {
                message: result("c1", "edit", "Edited"),
                details: Some(
                    json!({"locations": ["/w/a.txt"], "diff": {"path": "/w/a.txt", "oldText": "x", "newText": "y"}}),
                ),
            })),
            chat(Message::ToolResult(ToolResultMessage {
                call_id: "c2".into(),
                name: "ipython".into(),
                text: "boom".into(),
                is_error: true,
                images: vec![],
            })),
            e(EntryKind::SessionInfo { name: "t".into() }),
            e(EntryKind::Message(Record::Bash(BashRun {
                command: "ls".into(),
                output: "a.txt\n".into(),
                exit_code: Some(0),
                cancelled: false,
            }))),
            chat(Message::Assistant(AssistantMessage {
                text: "Done.".into(),
                tool_calls: vec![call("c3", "bash", json!({"command": "sleep 9"}))],
                ..Default::default()
            })),
        ];
        let got = replay(&entries);
        let want = vec![
            json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "edit it"}, "messageId": "prime-agent-replay-user-1"}),
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "plan"}, "messageId": "prime-agent-replay-assistant-1"}),
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "On it."}, "messageId": "prime-agent-replay-assistant-1"}),
            json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Edit a.txt", "kind": "edit", "status": "pending", "rawInput": {"path": "a.txt"}, "locations": [{"path": "/w/a.txt"}]}),
            json!({"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "sum", "kind": "execute", "status": "pending", "rawInput": {"code": "# sum\n1+1"}}),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"}),
            got[6].clone(),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "in_progress"}),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "failed", "content": [{"type": "content", "content": {"type": "text", "text": "boom"}}], "rawOutput": {"output": "boom", "isError": true}}),
            json!({"sessionUpdate": "session_info_update", "title": "t"}),
            json!({"sessionUpdate": "tool_call", "toolCallId": "prime-agent-replay-bash-1", "title": "ls", "kind": "execute", "status": "in_progress", "rawInput": {"command": "ls"}}),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "prime-agent-replay-bash-1", "status": "completed", "content": [{"type": "content", "content": {"type": "text", "text": "a.txt\n"}}]}),
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Done."}, "messageId": "prime-agent-replay-assistant-2"}),
            json!({"sessionUpdate": "tool_call", "toolCallId": "c3", "title": "sleep 9", "kind": "execute", "status": "pending", "rawInput": {"command": "sleep 9"}}),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c3", "status": "in_progress"}),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "c3", "status": "failed"}),
        ];
        assert_eq!(got, want);
        // The edit's end carries its text and its diff, as live.
        let end = &got[6];
        assert_eq!(end["status"], "completed");
        let content = end["content"].as_array().unwrap();
        assert!(
            content
                .iter()
                .any(|c| c["type"] == "diff" && c["newText"] == "y" && c["oldText"] == "x"),
            "{end}"
        );
        assert!(
            content.iter().any(|c| c["content"]["text"] == "Edited"),
            "{end}"
        );
    }

    /// An MCP call replays with the title and kind its live tool gave (stored with the
    /// result), and one a crash cut off with the title its name gives.
    #[test]
    fn mcp_calls_replay_as_they_were_shown_live() {
        let shown = ToolDisplay {
            title: "fx: lookup".into(),
            kind: "read",
        };
        let args = json!({"q": "x"});
        let mut live_state = MappingState::default();
        let mut live = Vec::new();
        for event in [
            AgentEvent::ToolAnnounced {
                id: "m1".into(),
                name: "mcp__fx__lookup".into(),
                args: args.clone(),
                locations: Vec::new(),
                display: Some(shown.clone()),
            },
            AgentEvent::ToolAnnounced {
                id: "m2".into(),
                name: "mcp_call_fx".into(),
                args: json!({"tool": "slow"}),
                locations: Vec::new(),
                display: crate::mcp::tools::display_from_name(
                    "mcp_call_fx",
                    &json!({"tool": "slow"}),
                ),
            },
            AgentEvent::ToolStart {
                id: "m1".into(),
                name: "mcp__fx__lookup".into(),
                args: args.clone(),
                locations: Vec::new(),
                display: Some(shown.clone()),
            },
            AgentEvent::ToolEnd {
                id: "m1".into(),
                name: "mcp__fx__lookup".into(),
                result: ToolResultView {
                    text: Some("found".into()),
                    is_error: false,
                    ipython: None,
                    diff: None,
                    images: vec![],
                    terminal: None,
                },
            },
        ] {
            live.extend(to_session_updates(&event, &mut live_state));
        }
        let entries = vec![
            chat(Message::Assistant(AssistantMessage {
                tool_calls: vec![
                    call("m1", "mcp__fx__lookup", args.clone()),
                    call("m2", "mcp_call_fx", json!({"tool": "slow"})),
                ],
                ..Default::default()
            })),
            e(EntryKind::Message(Record::ToolResult {
                message: result("m1", "mcp__fx__lookup", "found"),
                details: crate::persist::entry::tool_details(&[], None, None, Some(&shown)),
            })),
        ];
        let got = replay(&entries);
        assert_eq!(got[..4], live[..], "the replay is the live stream");
        assert_eq!(got[0]["title"], "fx: lookup");
        assert_eq!(got[0]["kind"], "read");
        assert_eq!(got[1]["title"], "fx: slow", "{:?}", got[1]);
        assert_eq!(got[1]["kind"], "other");
        // A file naming a kind ACP lacks reads back as `other`.
        let odd = display_of(
            "t",
            &json!({}),
            &json!({"display": {"title": "T", "kind": "zap"}}),
        );
        assert_eq!(odd, Some(ToolDisplay::stored("T", "other")));
    }

    #[test]
    fn images_other_roles_and_compactions() {
        let entries = vec![
            chat(Message::User {
                text: "see".into(),
                images: vec![crate::base::content::Image {
                    data: "aGk=".into(),
                    mime_type: "image/png".into(),
                }],
            }),
            e(EntryKind::Message(Record::Other(json!({"role": "custom"})))),
            e(EntryKind::Compaction(crate::persist::entry::Compaction {
                summary: "s".into(),
                tokens_before: 5,
                ..Default::default()
            })),
            e(EntryKind::Other(json!({"type": "label"}))),
        ];
        let got = replay(&entries);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(
            got[1]["content"],
            json!({"type": "image", "data": "aGk=", "mimeType": "image/png"})
        );
        assert_eq!(got[1]["messageId"], "prime-agent-replay-user-1");
        assert_eq!(got[2]["sessionUpdate"], "session_info_update");
        assert_eq!(
            got[2]["_meta"]["ai.primeintellect.prime-agent"]["compaction"],
            json!({"summary": "s", "tokensBefore": 5})
        );
        assert!(replay(&[]).is_empty());
    }
}
