//! `NodeHandler`: one agent's kernel host requests (`rlm.*`, `agent_message.*`, `model.info`),
//! answered through its family (behaviour spec §4.2–4.4).

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use crate::base::json::json;
use serde_json::Value;

use super::{Family, FamilyMsg, Node, State, MAIN_NAME};
use crate::agent::family::{self, ChildStatus, Party, TokenBucket};
use crate::kernel::host::{unavailable, HostHandler};

/// Answers one agent's host requests through its family.
pub(super) struct NodeHandler {
    pub(super) family: Weak<Family>,
    pub(super) node: String,
    /// This agent's compaction switchboard (`compact.run`, `compact.status`).
    pub(super) compaction: std::sync::Arc<crate::agent::compaction::Control>,
}

impl HostHandler for NodeHandler {
    fn handle(&self, kind: &str, payload: Value) -> Result<Value, String> {
        let family = self.family.upgrade().ok_or("the session has ended")?;
        if !family.knows(&self.node) {
            return Err("this subagent was deleted".to_owned());
        }
        match kind {
            "model.info" => Ok(family.model_info()),
            "rlm.run" => family.spawn_child(&self.node, &payload),
            "rlm.find_models" => family.find_models(&payload),
            "rlm.list_subagents" => Ok(family.list_subagents(&self.node)),
            "rlm.delete_subagent" => family.delete_subagent(&self.node, &payload),
            "agent_message.list_agents" => Ok(family.list_agents(&self.node)),
            "agent_message.send" => family.send(&self.node, &payload),
            "agent_observe.list" => Ok(family.list_agents(&self.node)),
            "agent_observe.get" | "agent_observe.recent" => {
                family.observe(&self.node, kind, &payload)
            }
            "goal.get" | "goal.create" | "goal.complete" => {
                family.goal_request(&self.node, kind, &payload)
            }
            "rlm_heartbeat.list"
            | "rlm_heartbeat.create"
            | "rlm_heartbeat.update"
            | "rlm_heartbeat.delete" => family.heartbeat_request(&self.node, kind, &payload),
            "mcp.config" | "mcp.refresh" | "mcp.list_tools" | "mcp.call_tool" => {
                crate::mcp::host_request(family.mcp().as_deref(), kind, &payload)
            }
            "compact.run" | "compact.status" if self.compaction.agent_callable() => Ok(
                crate::agent::compaction::host_request(&self.compaction, kind, &payload),
            ),
            // Refine edits the session's harness: the main agent at depth 0 only (§5.4).
            "refine.run" | "refine.status"
                if self.node == family.main_id && family.root_depth == 0 =>
            {
                Ok(crate::agent::compaction::host_request(
                    &self.compaction,
                    kind,
                    &payload,
                ))
            }
            _ => Err(unavailable(kind)),
        }
    }
}

impl Family {
    fn entry(&self, state: &State, id: &str, relationship: &str) -> Value {
        let (name, depth, status) = match state.nodes.get(id) {
            Some(n) => (n.name.clone(), n.depth, n.status.as_str()),
            None => (
                MAIN_NAME.to_owned(),
                self.root_depth,
                if self.main_busy.load(Ordering::SeqCst) {
                    "running"
                } else {
                    "idle"
                },
            ),
        };
        json!({"relationship": relationship, "name": name, "id": id, "depth": depth, "status": status})
    }

    fn list_agents(&self, me: &str) -> Value {
        let state = self.lock();
        let mut entries = Vec::new();
        let parent = state.nodes.get(me).map(|n| n.parent.clone());
        if let Some(parent) = &parent {
            entries.push(self.entry(&state, parent, "parent"));
        }
        for id in &state.order {
            let Some(n) = state.nodes.get(id) else {
                continue;
            };
            if Some(&n.parent) == parent.as_ref() && id != me {
                entries.push(self.entry(&state, id, "sibling"));
            } else if n.parent == me {
                entries.push(self.entry(&state, id, "child"));
            }
        }
        json!({
            "current": {"name": self.name_of(&state, me), "id": me, "depth": self.depth_of(&state, me)},
            "entries": entries,
        })
    }

    /// `agent_message.send`: one receipt, or `{receipts}` for `target: "all"`.
    fn send(&self, from: &str, payload: &Value) -> Result<Value, String> {
        let message = payload
            .get("message")
            .and_then(Value::as_str)
            .ok_or("message must be a string")?;
        let mut state = self.lock();
        let parent = state.nodes.get(from).map(|n| n.parent.clone());
        let targets: Vec<String> = if payload.get("target").and_then(Value::as_str) == Some("all") {
            let listing = self.family_of(&state, from, parent.as_deref());
            if listing.is_empty() {
                return Err("This agent has no family to message".to_owned());
            }
            listing
        } else {
            let role = payload
                .get("receiver_role")
                .and_then(Value::as_str)
                .unwrap_or("");
            let name = payload.get("receiver_name").and_then(Value::as_str);
            vec![self.resolve(&state, from, parent.as_deref(), role, name)?]
        };
        let bucket = state
            .buckets
            .entry(from.to_owned())
            .or_insert_with(TokenBucket::messaging);
        if !bucket.try_take(Instant::now()) {
            return Err(
                "Agent message rate limit reached: at most 3 messages at once, then 1 per second"
                    .to_owned(),
            );
        }
        let mut receipts = Vec::new();
        for target in &targets {
            let target_name = self.name_of(&state, target);
            let pending = if *target == self.main_id {
                self.main_inbox.len()
            } else {
                state.nodes.get(target).map(|n| n.inbox.len()).unwrap_or(0)
            };
            family::check_message(message, pending, &target_name)?;
            let relationship = if parent.as_deref() == Some(target.as_str()) {
                "child" // Seen from the receiving parent, the sender is its child.
            } else if state.nodes.get(target).is_some_and(|n| n.parent == from) {
                "parent"
            } else {
                "sibling"
            };
            let message_id = format!("agentmsg_{}", uuid::Uuid::new_v4().simple());
            let text = family::format_agent_message(
                Some(relationship),
                &Party {
                    name: self.name_of(&state, from),
                    id: from.to_owned(),
                },
                &Party {
                    name: target_name.clone(),
                    id: target.clone(),
                },
                &message_id,
                message,
            );
            if parent.as_deref() == Some(target.as_str()) {
                if let Some(me) = state.nodes.get_mut(from) {
                    me.replied = true;
                }
            }
            // Before delivery: the message may wake the receiver, whose next call it feeds.
            self.edges().message(from, target);
            let busy = self.push_to(&mut state, target, text);
            let (status, at_key) = if busy {
                ("queued", "queuedAt")
            } else {
                ("delivered", "deliveredAt")
            };
            let mut receipt = json!({
                "id": message_id,
                "source": "agent_message",
                "target": {"activeSessionId": target, "sessionId": target, "sessionName": target_name},
                "message": message,
                "deliveryStatus": status,
            });
            receipt[at_key] = json!(crate::base::time::now_iso_secs());
            receipts.push(receipt);
            if from == self.main_id {
                self.notify(FamilyMsg::SentByMain {
                    generation: self.generation,
                    target: target_name,
                    delivery_status: status.to_owned(),
                });
            }
        }
        if targets.len() == 1 && payload.get("target").is_none() {
            return Ok(receipts.pop().unwrap_or(Value::Null));
        }
        Ok(json!({ "receipts": receipts }))
    }

    fn family_of(&self, state: &State, me: &str, parent: Option<&str>) -> Vec<String> {
        let mut out: Vec<String> = parent.map(str::to_owned).into_iter().collect();
        for id in &state.order {
            let Some(n) = state.nodes.get(id) else {
                continue;
            };
            if (Some(n.parent.as_str()) == parent && id != me) || n.parent == me {
                out.push(id.clone());
            }
        }
        out
    }

    fn resolve(
        &self,
        state: &State,
        me: &str,
        parent: Option<&str>,
        role: &str,
        name: Option<&str>,
    ) -> Result<String, String> {
        match role {
            "parent" => parent
                .map(str::to_owned)
                .ok_or_else(|| "This agent has no parent to message".to_owned()),
            "child" | "sibling" => {
                let name =
                    name.ok_or("receiver_name is required for sibling and child messages")?;
                let owner = if role == "child" { Some(me) } else { parent };
                state
                    .find(|n| Some(n.parent.as_str()) == owner && n.name == name && n.id != me)
                    .ok_or_else(|| format!("No {role} agent named \"{name}\""))
            }
            _ => Err("receiver_role must be \"parent\", \"sibling\", or \"child\"".to_owned()),
        }
    }

    /// `agent_observe.get` / `.recent`: a family agent's state and, unless its turn holds its
    /// conversation right now (never waited for), its last messages. The family only, like
    /// `agent_message`: the parent, siblings and children of `me`.
    fn observe(&self, me: &str, kind: &str, payload: &Value) -> Result<Value, String> {
        use crate::provider::{Message, ToolResultMessage};
        const TEXT_CHARS: usize = 2_000;
        let target = payload
            .get("target")
            .and_then(Value::as_str)
            .ok_or("agent_observe target must be an agent's name or id")?;
        let state = self.lock();
        let parent = state.nodes.get(me).map(|n| n.parent.clone());
        let named = |id: &str| id == target || self.name_of(&state, id) == target;
        if let Some(p) = parent.as_deref().filter(|p| named(p)) {
            if !state.nodes.contains_key(p) {
                // The session's own agent: its conversation lives in the session, not here.
                let mut view = self.entry(&state, p, "parent");
                view["observable"] = json!(false);
                view["messages"] = json!([]);
                return Ok(view);
            }
        }
        let id = state
            .find(|n| {
                n.id != me
                    && (n.parent == me
                        || Some(&n.parent) == parent.as_ref()
                        || Some(&n.id) == parent.as_ref())
                    && (n.id == target || n.name == target)
            })
            .ok_or_else(|| format!("No agent of your family matches \"{target}\""))?;
        let node = state.nodes.get(&id).ok_or("unknown agent")?;
        let relationship = if Some(&id) == parent.as_ref() {
            "parent"
        } else if node.parent == me {
            "child"
        } else {
            "sibling"
        };
        let mut view = self.entry(&state, &id, relationship);
        view["tokenCount"] = json!(node.token_count);
        view["sessionDir"] = json!(node.session_dir.display().to_string());
        view["error"] = json!(node.error);
        view["repliedSinceTask"] = json!(node.replied);
        let cut = |t: &str| -> String { t.chars().take(TEXT_CHARS).collect() };
        let Ok(conv) = node.conversation.try_lock() else {
            // Its turn is running: the state above is current, the messages come later.
            view["observable"] = json!(false);
            view["messages"] = json!([]);
            return Ok(view);
        };
        view["observable"] = json!(true);
        view["lastAssistantText"] = json!(conv.messages.iter().rev().find_map(|m| match m {
            Message::Assistant(a) if !a.text.is_empty() => Some(cut(&a.text)),
            _ => None,
        }));
        if kind == "agent_observe.recent" {
            let limit = payload
                .get("limit")
                .and_then(Value::as_u64)
                .unwrap_or(5)
                .clamp(1, 50) as usize;
            let from = conv.messages.len().saturating_sub(limit);
            let messages: Vec<Value> = conv.messages[from..]
                .iter()
                .map(|m| match m {
                    Message::User { text, .. } => json!({"role": "user", "text": cut(text)}),
                    Message::Assistant(a) => {
                        let calls: Vec<&str> =
                            a.tool_calls.iter().map(|c| c.name.as_str()).collect();
                        json!({"role": "assistant", "text": cut(&a.text), "toolCalls": calls})
                    }
                    Message::ToolResult(ToolResultMessage {
                        name,
                        text,
                        is_error,
                        ..
                    }) => json!({"role": "tool", "tool": name, "text": cut(text), "isError": is_error}),
                })
                .collect();
            view["messages"] = json!(messages);
        }
        Ok(view)
    }

    fn subagent_view(&self, node: &Node) -> Value {
        json!({
            "rlm_child_id": node.id,
            "active_session_id": (!node.status.is_terminal()).then(|| node.id.clone()),
            "session_id": node.id,
            "session_name": node.name,
            "session_dir": node.session_dir.display().to_string(),
            "status": node.status.list_status(),
        })
    }

    fn list_subagents(&self, me: &str) -> Value {
        let state = self.lock();
        let list: Vec<Value> = state
            .order
            .iter()
            .filter_map(|id| state.nodes.get(id))
            .filter(|n| n.parent == me)
            .map(|n| self.subagent_view(n))
            .collect();
        json!({ "subagents": list })
    }

    fn delete_subagent(&self, me: &str, payload: &Value) -> Result<Value, String> {
        let target = match payload.get("target") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => o
                .get("rlm_child_id")
                .or_else(|| o.get("session_name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            _ => {
                return Err(
                    "rlm.delete_subagent target must be a subagent or its id or name".to_owned(),
                )
            }
        };
        let mut state = self.lock();
        let id = state
            .find(|n| n.parent == me && (n.id == target || n.name == target))
            .ok_or_else(|| format!("No subagent matches \"{target}\""))?;
        // The child and everything it started go: abort the whole subtree.
        let mut doomed = vec![id.clone()];
        let mut i = 0;
        while i < doomed.len() {
            let parent = doomed[i].clone();
            doomed.extend(
                state
                    .order
                    .iter()
                    .filter(|c| state.nodes.get(*c).is_some_and(|n| n.parent == parent))
                    .cloned(),
            );
            i += 1;
        }
        let mut removed = Vec::new();
        for d in &doomed {
            if let Some(mut node) = state.nodes.remove(d) {
                node.abort.abort();
                if !node.status.is_terminal() {
                    node.status = ChildStatus::Cancelled;
                    self.notify_child(&node);
                }
                removed.push(node);
            }
        }
        state.order.retain(|o| !doomed.contains(o));
        drop(state);
        let view = self.subagent_view(&removed[0]);
        let deadline = Instant::now() + Duration::from_millis(500);
        for mut node in removed {
            if let Some(t) = node.thread.take() {
                crate::base::reaper::join_or_leave(t, deadline, "a deleted subagent");
            }
            // A recorded conversation stays: deleting ends the child, not its history.
            if !node.kept {
                let _ = std::fs::remove_dir_all(&node.session_dir);
            }
        }
        Ok(json!({ "subagent": view }))
    }

    fn find_models(&self, payload: &Value) -> Result<Value, String> {
        let limit = payload.get("limit").and_then(Value::as_u64).unwrap_or(8);
        if !(1..=20).contains(&limit) {
            return Err("rlm.find_models limit must be an integer from 1 to 20".to_owned());
        }
        let query = payload
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_lowercase();
        let models: Vec<Value> = self
            .child_models()
            .into_iter()
            .filter(|label| label.to_lowercase().contains(&query))
            .map(|label| {
                let (provider, id) = label.split_once('/').unwrap_or(("", label.as_str()));
                json!({"provider": provider, "id": id, "name": id, "selector": label})
            })
            .collect();
        Ok(json!({ "models": models }))
    }

    /// `model.info`: the input kinds are the provider's real capability, so `attach_image`
    /// can refuse on a text-only model instead of sending it an image it never sees.
    fn model_info(&self) -> Value {
        let label = self.model_label().unwrap_or_else(|| "none/none".to_owned());
        let (provider, id) = label.split_once('/').unwrap_or(("", label.as_str()));
        let images = self.provider().is_ok_and(|p| p.accepts_images());
        let input = if images {
            json!(["text", "image"])
        } else {
            json!(["text"])
        };
        json!({"id": id, "provider": provider, "input": input})
    }
}
