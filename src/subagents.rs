//! Subagents: the live agent family of one ACP session.
//!
//! The main agent's kernel (and each child's) asks for children with `rlm(...)` over the host
//! bridge; `Family` admits them, runs each on its own named thread with its own conversation,
//! tools and kernel (`RLM_DEPTH` + 1), routes agent-to-agent messages between inboxes, and
//! reports every status change and every message for the main agent to the main loop as a
//! `FamilyMsg`. The main loop alone talks to the client. Pure bookkeeping (names, attribution,
//! limits, texts) lives in `family.rs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::{json, Value};

use crate::abort::AbortFlag;
use crate::acp::UserPrompt;
use crate::events::ChildSnapshot;
use crate::family::{self, ChildStatus, Party, TokenBucket};
use crate::kernel::host::{unavailable, HostHandler};
use crate::provider::{Message, Thinking};
use crate::tools::KernelHost;
use crate::turn::{run_turn, Agent, AgentCtx, Conversation, Inbox, TurnInput, TurnOutcome};

/// News for the main loop. `generation` names the session's family; stale news is dropped.
#[derive(Debug)]
pub enum FamilyMsg {
    Child {
        generation: u64,
        snapshot: ChildSnapshot,
        status: ChildStatus,
    },
    /// The main agent's inbox received a message.
    MainInbox { generation: u64 },
    /// The main agent's kernel sent an agent message (surfaced as `_meta…agentMessage`).
    SentByMain {
        generation: u64,
        target: String,
        delivery_status: String,
    },
}

/// The name the main agent goes by in its family.
pub const MAIN_NAME: &str = "main";

pub struct Family {
    generation: u64,
    agent: Arc<Agent>,
    main_id: String,
    main_inbox: Arc<Inbox>,
    main_busy: AtomicBool,
    root_depth: u32,
    max_depth: u32,
    tx: Sender<FamilyMsg>,
    closed: AtomicBool,
    state: Mutex<State>,
    me: Weak<Family>,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Node>,
    /// Admission order, for stable listings.
    order: Vec<String>,
    buckets: HashMap<String, TokenBucket>,
}

struct Node {
    id: String,
    name: String,
    /// The parent's id: the main agent's id for top-level children.
    parent: String,
    depth: u32,
    status: ChildStatus,
    inbox: Arc<Inbox>,
    abort: AbortFlag,
    thread: Option<JoinHandle<()>>,
    /// Sent something to its parent since its task arrived.
    replied: bool,
    error: Option<String>,
    token_count: u64,
    session_dir: PathBuf,
    conversation: Arc<Mutex<Conversation>>,
    /// Kept between runs so a revived child keeps its kernel.
    ctx: Option<Arc<AgentCtx>>,
    /// `rlm(..., thinking=)`, else the parent's.
    thinking: Thinking,
}

impl Family {
    pub fn new(
        generation: u64,
        agent: Arc<Agent>,
        main_id: String,
        tx: Sender<FamilyMsg>,
    ) -> Arc<Family> {
        Arc::new_cyclic(|me| Family {
            generation,
            agent,
            main_id,
            main_inbox: Arc::default(),
            main_busy: AtomicBool::new(false),
            root_depth: family::root_depth(),
            max_depth: family::max_depth(),
            tx,
            closed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            me: me.clone(),
        })
    }

    /// The main agent's context: its tools answer host requests through this family.
    pub fn main_ctx(&self) -> AgentCtx {
        let tools = self
            .agent
            .tools
            .build(Some(self.kernel_host(&self.main_id, self.root_depth)));
        AgentCtx {
            agent: self.agent.clone(),
            tools,
            system_prompt: self.agent.system_prompt.clone(),
            name: MAIN_NAME.to_owned(),
            inbox: self.main_inbox.clone(),
            thinking: self.agent.thinking,
        }
    }

    fn kernel_host(&self, node: &str, depth: u32) -> KernelHost {
        KernelHost {
            handler: Arc::new(NodeHandler {
                family: self.me.clone(),
                node: node.to_owned(),
            }),
            depth,
        }
    }

    /// The main loop says whether the main agent is running a turn (for delivery statuses).
    pub fn set_main_busy(&self, busy: bool) {
        self.main_busy.store(busy, Ordering::SeqCst);
    }

    /// Children (at any depth) that are queued or running.
    pub fn outstanding(&self) -> u64 {
        self.lock()
            .nodes
            .values()
            .filter(|n| !n.status.is_terminal())
            .count() as u64
    }

    /// `session/cancel`: every running child stops, and messages waiting for the main agent
    /// are dropped. Children that already finished are left idle (a later message may still
    /// wake them). The inbox is emptied under the family lock, so a child finishing at this
    /// moment cannot slip a notice past the cancel.
    pub fn cancel_all(&self) {
        let state = self.lock();
        for node in state.nodes.values().filter(|n| !n.status.is_terminal()) {
            node.abort.abort();
        }
        self.main_inbox.drain();
    }

    /// `session/close` or disconnect: cancel everything and join the child threads (bounded;
    /// abort hooks make them quick). No news is sent afterwards.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.cancel_all();
        let threads: Vec<JoinHandle<()>> = self
            .lock()
            .nodes
            .values_mut()
            .filter_map(|n| n.thread.take())
            .collect();
        let deadline = Instant::now() + Duration::from_millis(500);
        for t in threads {
            join_by(t, deadline);
        }
        // Dropping the nodes drops their tools and kills their kernels.
        let nodes: Vec<Node> = {
            let mut state = self.lock();
            state.order.clear();
            state.nodes.drain().map(|(_, n)| n).collect()
        };
        for node in nodes {
            let _ = std::fs::remove_dir_all(&node.session_dir);
        }
        let _ = std::fs::remove_dir(subagent_root());
    }

    /// Whether `node` may still speak for the family (the main agent or a live child).
    fn knows(&self, node: &str) -> bool {
        node == self.main_id || self.lock().nodes.contains_key(node)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notify(&self, msg: FamilyMsg) {
        if !self.closed.load(Ordering::SeqCst) {
            let _ = self.tx.send(msg);
        }
    }

    fn notify_child(&self, node: &Node) {
        let snapshot = ChildSnapshot {
            id: node.id.clone(),
            session_name: Some(node.name.clone()),
            status: node.status.as_str().to_owned(),
            model: self.model_label(),
            token_count: (node.token_count > 0).then_some(node.token_count),
            error: node.error.clone(),
        };
        self.notify(FamilyMsg::Child {
            generation: self.generation,
            snapshot,
            status: node.status,
        });
    }

    fn model_label(&self) -> Option<String> {
        self.agent.provider.as_ref().ok().map(|p| p.label())
    }

    fn depth_of(&self, state: &State, id: &str) -> u32 {
        state
            .nodes
            .get(id)
            .map(|n| n.depth)
            .unwrap_or(self.root_depth)
    }

    fn name_of(&self, state: &State, id: &str) -> String {
        state
            .nodes
            .get(id)
            .map(|n| n.name.clone())
            .unwrap_or_else(|| MAIN_NAME.to_owned())
    }

    /// `rlm.run`: admits a child and returns its handle at once (never its answer).
    fn spawn_child(&self, parent: &str, payload: &Value) -> Result<Value, String> {
        if self.closed.load(Ordering::SeqCst) {
            return Err("the session is closing".to_owned());
        }
        let prompt = payload
            .get("prompt")
            .and_then(Value::as_str)
            .ok_or("rlm.run prompt must be a string")?;
        let label = self
            .model_label()
            .ok_or("no model is configured for subagents")?;
        if let Some(model) = payload
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            if model != label {
                return Err(format!(
                    "Model \"{model}\" is not available in this session; rlm.find_models() lists what is (\"{label}\")"
                ));
            }
        }
        let mut state = self.lock();
        let depth = self.depth_of(&state, parent);
        if let Some(refusal) = family::depth_refusal(depth, self.max_depth) {
            return Err(refusal);
        }
        let id = format!("sub-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let siblings: Vec<&str> = state
            .nodes
            .values()
            .filter(|n| n.parent == parent)
            .map(|n| n.name.as_str())
            .collect();
        let name = match payload.get("name").and_then(Value::as_str) {
            Some(name) => family::validate_child_name(name, &siblings)?,
            None => family::default_child_name(prompt, &id),
        };
        let session_dir = subagent_root().join(&id);
        if let Err(e) = std::fs::create_dir_all(&session_dir) {
            log::warn!("cannot create subagent dir {}: {e}", session_dir.display());
        }
        let node = Node {
            id: id.clone(),
            name: name.clone(),
            parent: parent.to_owned(),
            depth: depth + 1,
            status: ChildStatus::Queued,
            inbox: Arc::default(),
            abort: AbortFlag::new(),
            thread: None,
            replied: false,
            error: None,
            token_count: 0,
            session_dir: session_dir.clone(),
            conversation: Arc::default(),
            ctx: None,
            thinking: payload
                .get("thinking")
                .and_then(Value::as_str)
                .and_then(Thinking::parse)
                .unwrap_or(self.agent.thinking),
        };
        self.notify_child(&node);
        state.order.push(id.clone());
        state.nodes.insert(id.clone(), node);
        let task = format!("[task from parent]\n\n{prompt}");
        self.start(
            &mut state,
            &id,
            TurnInput::Prompt(UserPrompt {
                text: task,
                images: Vec::new(),
                // The task comes from the parent model, not a user: never a shell command.
                typed: false,
            }),
        )?;
        Ok(json!({
            "rlm_child_id": id,
            "name": name,
            "session_dir": session_dir.display().to_string(),
            "model": label,
        }))
    }

    /// Runs a child's turn(s) on its thread: its task, then whatever its inbox collects while
    /// it works. It reports `running` now and its terminal status at the end.
    fn start(&self, state: &mut State, id: &str, input: TurnInput) -> Result<(), String> {
        let parent_name = {
            let parent = state
                .nodes
                .get(id)
                .map(|n| n.parent.clone())
                .unwrap_or_default();
            self.name_of(state, &parent)
        };
        let node = state.nodes.get_mut(id).ok_or("unknown subagent")?;
        if let Some(old) = node.thread.take() {
            // A revived child: its previous run has ended (it reported a terminal status).
            let _ = old.join();
        }
        let ctx = match &node.ctx {
            Some(ctx) => ctx.clone(),
            None => {
                let tools = self
                    .agent
                    .tools
                    .build(Some(self.kernel_host(id, node.depth)));
                let system_prompt = format!(
                    "{}\n\n# You are a subagent\nYou are a child agent named {} (depth {}), started by {parent_name} to do one task. \
                     Your task arrives labeled `[task from parent]`. Do it, then send your result to your parent from the ipython tool with \
                     `await agent_message.send(<result>, receiver_role=\"parent\")` and stop. Messages from your family arrive as user messages.",
                    self.agent.system_prompt, node.name, node.depth
                );
                let ctx = Arc::new(AgentCtx {
                    agent: self.agent.clone(),
                    tools,
                    system_prompt,
                    name: node.name.clone(),
                    inbox: node.inbox.clone(),
                    thinking: node.thinking,
                });
                node.ctx = Some(ctx.clone());
                ctx
            }
        };
        node.status = ChildStatus::Running;
        node.error = None;
        self.notify_child(node);
        let abort = node.abort.clone();
        let conversation = node.conversation.clone();
        let family = self.me.clone();
        let child_id = id.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("subagent-{id}"))
            .spawn(move || {
                let mut input = input;
                loop {
                    let (outcome, last_text, tokens) = {
                        let mut conv = conversation.lock().unwrap_or_else(|e| e.into_inner());
                        let outcome = run_turn(&ctx, &mut conv, input, &abort, &|_| {});
                        let last_text = conv
                            .messages
                            .iter()
                            .rev()
                            .find_map(|m| match m {
                                Message::Assistant(a) if !a.text.is_empty() => Some(a.text.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        (outcome, last_text, conv.usage.input + conv.usage.output)
                    };
                    let Some(family) = family.upgrade() else {
                        break;
                    };
                    // Messages that arrived during the last model call get a turn of their
                    // own; the check happens under the family lock, so none is stranded.
                    if !family.finish_child(&child_id, outcome, last_text, tokens) {
                        break;
                    }
                    input = TurnInput::Inbox;
                }
            })
            .map_err(|e| format!("cannot start the subagent thread: {e}"));
        match thread {
            Ok(thread) => {
                node.thread = Some(thread);
                Ok(())
            }
            Err(e) => {
                node.status = ChildStatus::Error;
                node.error = Some(e.clone());
                self.notify_child(node);
                Err(e)
            }
        }
    }

    /// A child's run ended: record its status, tell the main loop, and tell its parent when it
    /// did not reply itself (§4.3 completion notices). Returns true when the child must run
    /// again instead, because messages reached its inbox after its last model call.
    fn finish_child(&self, id: &str, outcome: TurnOutcome, last_text: String, tokens: u64) -> bool {
        let mut state = self.lock();
        let Some(node) = state.nodes.get_mut(id) else {
            return false;
        };
        let aborted = node.abort.is_aborted();
        let (status, detail) = match outcome {
            TurnOutcome::Cancelled => (ChildStatus::Cancelled, "cancelled".to_owned()),
            _ if aborted => (ChildStatus::Cancelled, "cancelled".to_owned()),
            TurnOutcome::Completed(_) if !node.inbox.is_empty() => return true,
            TurnOutcome::Completed(_) => (ChildStatus::Done, preview(&last_text)),
            TurnOutcome::Failed(e) | TurnOutcome::Panicked(e) => (ChildStatus::Error, e),
        };
        node.status = status;
        node.token_count = tokens;
        if status == ChildStatus::Error {
            node.error = Some(detail.clone());
        }
        let notice = (!node.replied && status != ChildStatus::Cancelled).then(|| {
            (
                node.parent.clone(),
                family::completion_notice(&node.name, id, status, &detail),
            )
        });
        node.replied = false;
        self.notify_child(node);
        if let Some((parent, text)) = notice {
            self.push_to(&mut state, &parent, text);
        }
        false
    }

    /// Puts `text` in `target`'s inbox and wakes it: the main loop for the main agent, a new
    /// run for an idle child. Returns whether the target was busy (the message waits for its
    /// next model call).
    fn push_to(&self, state: &mut State, target: &str, text: String) -> bool {
        if target == self.main_id {
            self.main_inbox.push(text);
            self.notify(FamilyMsg::MainInbox {
                generation: self.generation,
            });
            return self.main_busy.load(Ordering::SeqCst);
        }
        let Some(node) = state.nodes.get(target) else {
            return false;
        };
        node.inbox.push(text);
        match node.status {
            ChildStatus::Queued | ChildStatus::Running => true,
            ChildStatus::Done | ChildStatus::Error if !node.abort.is_aborted() => {
                if let Err(e) = self.start(state, target, TurnInput::Inbox) {
                    log::warn!("cannot revive subagent {target}: {e}");
                }
                false
            }
            _ => true,
        }
    }

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
            receipt[at_key] = json!(crate::prompt::now_iso_utc());
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
                    .order
                    .iter()
                    .find(|id| {
                        state
                            .nodes
                            .get(*id)
                            .is_some_and(|n| Some(n.parent.as_str()) == owner && n.name == name)
                            && *id != me
                    })
                    .cloned()
                    .ok_or_else(|| format!("No {role} agent named \"{name}\""))
            }
            _ => Err("receiver_role must be \"parent\", \"sibling\", or \"child\"".to_owned()),
        }
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
            .order
            .iter()
            .find(|id| {
                state
                    .nodes
                    .get(*id)
                    .is_some_and(|n| n.parent == me && (n.id == target || n.name == target))
            })
            .cloned()
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
                join_by(t, deadline);
            }
            let _ = std::fs::remove_dir_all(&node.session_dir);
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
            .model_label()
            .filter(|label| label.to_lowercase().contains(&query))
            .map(|label| {
                let (provider, id) = label.split_once('/').unwrap_or(("", label.as_str()));
                json!({"provider": provider, "id": id, "name": id, "selector": label})
            })
            .into_iter()
            .collect();
        Ok(json!({ "models": models }))
    }

    /// `model.info`: the input kinds are the provider's real capability, so `attach_image`
    /// can refuse on a text-only model instead of sending it an image it never sees.
    fn model_info(&self) -> Value {
        let label = self.model_label().unwrap_or_else(|| "none/none".to_owned());
        let (provider, id) = label.split_once('/').unwrap_or(("", label.as_str()));
        let images = self
            .agent
            .provider
            .as_ref()
            .is_ok_and(|p| p.accepts_images());
        let input = if images {
            json!(["text", "image"])
        } else {
            json!(["text"])
        };
        json!({"id": id, "provider": provider, "input": input})
    }
}

/// Where subagents' session dirs live (removed when their family closes).
fn subagent_root() -> PathBuf {
    std::env::temp_dir().join(format!("prime-agent-{}", std::process::id()))
}

/// Joins `thread` if it finishes by `deadline`; otherwise leaves it to the process exit (it was
/// aborted and holds nothing the caller needs).
pub fn join_by(thread: JoinHandle<()>, deadline: Instant) {
    while !thread.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    if thread.is_finished() {
        let _ = thread.join();
    }
}

fn preview(text: &str) -> String {
    const MAX: usize = 500;
    let t = text.trim();
    if t.chars().count() <= MAX {
        t.to_owned()
    } else {
        format!("{}…", t.chars().take(MAX).collect::<String>())
    }
}

/// Answers one agent's host requests through its family.
struct NodeHandler {
    family: Weak<Family>,
    node: String,
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
            _ => Err(unavailable(kind)),
        }
    }
}
