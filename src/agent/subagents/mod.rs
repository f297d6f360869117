//! Subagents: the live agent family of one ACP session.
//!
//! The main agent's kernel (and each child's) asks for children with `rlm(...)` over the host
//! bridge; `Family` admits them, runs each on its own named thread with its own conversation,
//! tools and kernel (`RLM_DEPTH` + 1), routes agent-to-agent messages between inboxes, and
//! reports every status change and every message for the main agent to the main loop as a
//! `FamilyMsg`. The main loop alone talks to the client. Pure bookkeeping (names, attribution,
//! limits, texts) lives in `family.rs`.
//!
//! - `mod.rs` (here): the `Family` state (nodes, inboxes, rate buckets), its API for the main
//!   loop, news for it (`FamilyMsg`) and inbox delivery (`push_to`).
//! - `runner.rs`: a child's life: admission (`rlm.run`), its `subagent-<id>` thread, its end.
//! - `handlers.rs`: `NodeHandler`, which answers one agent's kernel host requests.

mod handlers;
mod runner;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::Value;

use crate::agent::family::{ChildStatus, TokenBucket};
use crate::agent::turn::attribution::{Links, Pool};
use crate::agent::turn::{Agent, AgentCtx, ChildSnapshot, Conversation, Inbox, TurnInput};
use crate::base::abort::AbortFlag;
use crate::base::telemetry::{Kind, Span};
use crate::mcp::McpHub;
use crate::persist::schedule::Jobs;
use crate::provider::{ProviderChoice, Thinking};
use crate::tools::KernelHost;
use handlers::NodeHandler;

/// News for the main loop. `generation` names the session's family; stale news is dropped.
#[derive(Debug)]
pub(crate) enum FamilyMsg {
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
    /// The session's MCP servers changed state: the whole list (`_meta[ns].mcp`).
    Mcp { generation: u64, servers: Value },
    /// The main agent's kernel changed the goal (`goal.create` / `goal.complete`): shown now,
    /// not at the end of the turn.
    Goal { generation: u64 },
    /// The main agent's kernel changed the schedules (`rlm_heartbeat.create|update|delete`):
    /// the main loop re-arms its timer, stores them and sends `heartbeatsChanged`.
    Heartbeats { generation: u64 },
}

impl FamilyMsg {
    /// The generation of the family that sent it (one per session).
    pub(crate) fn generation(&self) -> u64 {
        match self {
            FamilyMsg::Child { generation, .. }
            | FamilyMsg::MainInbox { generation }
            | FamilyMsg::SentByMain { generation, .. }
            | FamilyMsg::Mcp { generation, .. }
            | FamilyMsg::Goal { generation }
            | FamilyMsg::Heartbeats { generation } => *generation,
        }
    }
}

/// The name the main agent goes by in its family.
pub(crate) const MAIN_NAME: &str = "main";

pub(crate) struct Family {
    /// Ends (and is exported) when the session's family is dropped.
    span: Span,
    generation: u64,
    agent: Arc<Agent>,
    /// The session's current model and reasoning level (`session/set_config_option`, a
    /// restored session, replace them).
    provider: Mutex<ProviderChoice>,
    thinking: Mutex<Thinking>,
    main_id: String,
    main_inbox: Arc<Inbox>,
    main_busy: AtomicBool,
    root_depth: u32,
    /// `RLM_MAX_DEPTH` of this session (`/rlm-max-depth`, else settings, env, 1): new
    /// children are refused at it, and kernels start with it.
    max_depth: Arc<std::sync::atomic::AtomicU32>,
    /// `/rlm-max-depth` set `max_depth` in this process.
    max_depth_set: AtomicBool,
    tx: Sender<FamilyMsg>,
    closed: AtomicBool,
    state: Mutex<State>,
    me: Weak<Family>,
    /// The session's goal and autonomous state: the main agent's `goal.*` requests use it.
    unattended: Mutex<Option<crate::agent::autonomy::Shared>>,
    /// The session's MCP servers (set once at `session/new`), shared by every agent.
    mcp: OnceLock<Arc<McpHub>>,
    /// The session's schedules (set once at `session/new`), for the main agent's
    /// `rlm_heartbeat`.
    heartbeats: OnceLock<Arc<Mutex<Jobs>>>,
    /// The semantic edges between every agent's model calls (`semantic.rs`).
    edges: Arc<Mutex<crate::protocol::semantic::Graph>>,
    /// The main agent's descendants' usage, waiting for its worker (`turn::attribution`).
    main_pool: Arc<Pool>,
    /// The session's context files, read off the loop when it opened (`main_ctx`): every
    /// agent of the family quotes them, so no child reads them again (under `state`'s lock).
    context: OnceLock<Vec<(PathBuf, String)>>,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Node>,
    /// Admission order, for stable listings.
    order: Vec<String>,
    buckets: HashMap<String, TokenBucket>,
}

impl State {
    /// The id of the first node, in admission order, that `pred` accepts.
    fn find(&self, pred: impl Fn(&Node) -> bool) -> Option<String> {
        self.order
            .iter()
            .find(|id| self.nodes.get(*id).is_some_and(&pred))
            .cloned()
    }
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
    /// `session_dir` is under the session's artifacts (sessions on disk): it outlives the
    /// child. Otherwise it is a temp dir, removed with the child.
    kept: bool,
    conversation: Arc<Mutex<Conversation>>,
    /// Kept between runs so a revived child keeps its kernel.
    ctx: Option<Arc<AgentCtx>>,
    /// `rlm(..., thinking=)`, else the parent's.
    thinking: Thinking,
    /// Settings `subagentDefaultModel` when its `rlm(...)` named no model; `None`: the
    /// session's current model.
    model: Option<Arc<dyn crate::provider::Provider>>,
    /// Its descendants' usage, waiting for its own worker (`turn::attribution`).
    pool: Arc<Pool>,
}

/// What the system prompt of `agent`'s session quotes from disk: its context files and, for
/// the harness paragraph, the overview of the harness stores (global, then the session's
/// own). Reads (bounded, `untrusted`), so it runs on the store worker, never the loop.
pub(crate) fn session_files(agent: &Agent) -> crate::config::prompt::SessionFiles {
    let context = match agent
        .prompt_spec
        .as_ref()
        .and_then(|s| s.agent_dir.as_ref())
    {
        Some(agent_dir) => crate::config::prompt::context_files(agent_dir, &agent.cwd),
        None => Vec::new(),
    };
    crate::config::prompt::SessionFiles {
        context,
        harness: harness_overview(agent, None),
    }
}

/// The overview of the harness stores (global, then the session's own: `RLM_HARNESS_STATE_DIR`,
/// else `<session_dir>/harness` as the kernel has it), read now.
fn harness_overview(agent: &Agent, session_dir: Option<&std::path::Path>) -> String {
    let env = &agent.kernel_env;
    let global = env
        .global_harness_dir
        .as_ref()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env.agent_dir.join("harness"));
    let mut stores = vec![("global", global)];
    match (&env.harness_dir, session_dir) {
        (Some(local), _) => stores.push(("local", std::path::PathBuf::from(local))),
        (None, Some(dir)) => stores.push(("local", dir.join("harness"))),
        (None, None) => {}
    }
    crate::config::prompt::harness_overview(&stores)
}

impl Family {
    pub(crate) fn new(
        generation: u64,
        agent: Arc<Agent>,
        main_id: String,
        tx: Sender<FamilyMsg>,
    ) -> Arc<Family> {
        let (root_depth, max_depth) = (agent.kernel_env.root_depth, agent.kernel_env.max_depth);
        // The session's span: the parent of turns that bring no trace context of their own.
        let mut span = Span::start("session", Kind::Internal, None);
        span.set("gen_ai.conversation.id", main_id.as_str());
        Arc::new_cyclic(|me| Family {
            span,
            generation,
            provider: Mutex::new(agent.provider.clone()),
            thinking: Mutex::new(agent.thinking),
            agent,
            main_id,
            main_inbox: Arc::default(),
            main_busy: AtomicBool::new(false),
            root_depth,
            max_depth: Arc::new(max_depth.into()),
            max_depth_set: AtomicBool::new(false),
            tx,
            closed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            me: me.clone(),
            unattended: Mutex::new(None),
            mcp: OnceLock::new(),
            heartbeats: OnceLock::new(),
            edges: Arc::default(),
            main_pool: Arc::default(),
            context: OnceLock::new(),
        })
    }

    /// Hands the family the session's goal state, for the main agent's `goal.*` requests.
    pub(crate) fn set_unattended(&self, shared: crate::agent::autonomy::Shared) {
        *self.unattended.lock().unwrap_or_else(|e| e.into_inner()) = Some(shared);
    }

    /// The main agent's `goal.get|create|complete`; subagents have no goal of their own.
    pub(crate) fn goal_request(
        &self,
        node: &str,
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        if node != self.main_id {
            return Err("goals belong to the session's main agent; a subagent has none".to_owned());
        }
        let shared = self
            .unattended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let shared = shared.ok_or_else(|| crate::kernel::host::unavailable(kind))?;
        let result = crate::agent::autonomy::lock(&shared).goal_request(
            kind,
            payload,
            std::time::Instant::now(),
        );
        if result.is_ok() && kind != "goal.get" {
            self.notify(FamilyMsg::Goal {
                generation: self.generation,
            });
        }
        result
    }

    /// Hands the family the session's schedules, for the main agent's `rlm_heartbeat`.
    pub(crate) fn set_heartbeats(&self, jobs: Arc<Mutex<Jobs>>) {
        let _ = self.heartbeats.set(jobs);
    }

    /// The main agent's `rlm_heartbeat.list|create|update|delete`. Schedules belong to the
    /// session and fire into the main agent's inbox, so a subagent (whose life is one task)
    /// gets the spec's "not available" refusal, as upstream where only the session's own
    /// agent has the heartbeat controller. The lock is held for the pure update only; the
    /// main loop hears of a change as `FamilyMsg::Heartbeats`.
    pub(crate) fn heartbeat_request(
        &self,
        node: &str,
        kind: &str,
        payload: &Value,
    ) -> Result<Value, String> {
        let jobs = self
            .heartbeats
            .get()
            .filter(|_| node == self.main_id)
            .ok_or_else(|| crate::kernel::host::unavailable(kind))?;
        let now = crate::base::time::schedule_now_ms();
        let (result, changed) = jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .host_request(kind, payload, now)?;
        if changed {
            self.notify(FamilyMsg::Heartbeats {
                generation: self.generation,
            });
        }
        Ok(result)
    }

    /// The main agent's context: its tools answer host requests through this family; `log`
    /// is its session file (`None`: not persisted), which its prompt names; `files` what its
    /// prompt quotes, read off the loop (`session_files`).
    pub(crate) fn main_ctx(
        &self,
        log: Option<&std::path::Path>,
        files: &crate::config::prompt::SessionFiles,
    ) -> AgentCtx {
        let compaction = Arc::<crate::agent::compaction::Control>::default();
        let mut host = self.kernel_host(&self.main_id, self.root_depth, &compaction);
        // Only the main agent's namespace survives the process (behaviour spec §4.1).
        host.state_dir = self
            .agent
            .store
            .as_ref()
            .and_then(|s| s.artifacts_of(&self.main_id));
        host.session_dir = host.state_dir.clone();
        let session_dir = host.session_dir.clone();
        let tools = self.agent.tools.build(&self.agent.kernel_env, Some(host));
        let names = tools.names();
        // Refine (and so the harness paragraph) is the main agent's at depth 0 (§5.4).
        let harness =
            self.root_depth == 0 && names.iter().any(|n| n == crate::tools::ipython::NAME);
        if harness {
            compaction.set_refine_home();
        }
        let context = self.context.get_or_init(|| files.context.clone()).clone();
        let build = {
            let (agent, depth, max_depth) =
                (self.agent.clone(), self.root_depth, self.max_depth.clone());
            let log = log.map(std::path::Path::to_path_buf);
            move |names: &[String], overview: &str| {
                agent.system_prompt_for(&crate::config::prompt::AgentFacts {
                    cwd: &agent.cwd,
                    tool_names: names,
                    kernel: names.iter().any(|n| n == crate::tools::ipython::NAME),
                    depth,
                    max_depth: max_depth.load(Ordering::SeqCst),
                    log: log.as_deref(),
                    child: None,
                    harness: harness.then_some(overview),
                    context: &context,
                })
            }
        };
        let system_prompt = build(&names, &files.harness);
        log::info!(
            "system prompt: {} chars, about {} tokens (chars/4)",
            system_prompt.chars().count(),
            crate::agent::compaction::estimate::text_tokens(&system_prompt)
        );
        // After a refine: the same prompt with the harness overview read again (§5.4).
        let system_prompt = crate::config::prompt::LivePrompt::rebuilt_by(system_prompt, {
            let agent = self.agent.clone();
            Box::new(move || build(&names, &harness_overview(&agent, session_dir.as_deref())))
        });
        AgentCtx {
            agent: self.agent.clone(),
            tools,
            system_prompt,
            name: MAIN_NAME.to_owned(),
            inbox: self.main_inbox.clone(),
            mcp: self.mcp(),
            compaction,
            trace: self.tracer(&self.main_id),
            session_span: self.span.context(),
            usage: Links {
                id: self.main_id.clone(),
                own: self.main_pool.clone(),
                up: Vec::new(),
            },
            settled: Some(Arc::new({
                let family = self.me.clone();
                move || family.upgrade().is_none_or(|f| f.settled())
            })),
        }
    }

    /// No child (at any depth) is queued or running, and none has a message waiting (a
    /// cancelled child's stay unread: it is not revived).
    pub(crate) fn settled(&self) -> bool {
        self.lock().nodes.values().all(|n| {
            n.status.is_terminal() && (n.inbox.is_empty() || n.status == ChildStatus::Cancelled)
        })
    }

    /// Where agent `id`'s usage is attributed: its own pool and its ancestors', parent first.
    fn links_of(&self, state: &State, id: &str) -> Links {
        let mut up = Vec::new();
        let mut at = state.nodes.get(id).map(|n| n.parent.as_str());
        while let Some(parent) = at {
            match state.nodes.get(parent) {
                Some(node) => {
                    up.push(node.pool.clone());
                    at = Some(node.parent.as_str());
                }
                None => {
                    up.push(self.main_pool.clone());
                    at = None;
                }
            }
        }
        Links {
            id: id.to_owned(),
            own: state
                .nodes
                .get(id)
                .map(|n| n.pool.clone())
                .unwrap_or_default(),
            up,
        }
    }

    /// The session's context files (none before `main_ctx`).
    pub(super) fn context(&self) -> &[(PathBuf, String)] {
        self.context.get().map_or(&[], Vec::as_slice)
    }

    /// Agent `node`'s view of the family's semantic edges.
    pub(crate) fn tracer(&self, node: &str) -> crate::protocol::semantic::Tracer {
        crate::protocol::semantic::Tracer::new(self.edges.clone(), node)
    }

    /// Records an edge event in the family's graph.
    fn edges(&self) -> std::sync::MutexGuard<'_, crate::protocol::semantic::Graph> {
        self.edges.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session's cwd (its MCP stdio servers run there).
    pub(crate) fn cwd(&self) -> &std::path::Path {
        &self.agent.cwd
    }

    /// Gives the family its session's MCP servers (before `main_ctx`).
    pub(crate) fn set_mcp(&self, hub: Arc<McpHub>) {
        let _ = self.mcp.set(hub);
    }

    /// The session's MCP servers, when the client configured any.
    pub(crate) fn mcp(&self) -> Option<Arc<McpHub>> {
        self.mcp.get().filter(|h| !h.is_empty()).cloned()
    }

    /// The host side of one agent's kernel; `compaction` is that agent's, so `compact.run()`
    /// reaches its turns.
    fn kernel_host(
        &self,
        node: &str,
        depth: u32,
        compaction: &Arc<crate::agent::compaction::Control>,
    ) -> KernelHost {
        KernelHost {
            handler: Arc::new(NodeHandler {
                family: self.me.clone(),
                node: node.to_owned(),
                compaction: compaction.clone(),
            }),
            depth,
            state_dir: None,
            session_dir: None,
            max_depth: Some(self.max_depth.clone()),
        }
    }

    /// The session's `RLM_MAX_DEPTH` now.
    pub(crate) fn max_depth(&self) -> u32 {
        self.max_depth.load(Ordering::SeqCst)
    }

    /// Where the session's `RLM_MAX_DEPTH` comes from (`commands::DEPTH_FROM_*`).
    pub(crate) fn max_depth_from(&self) -> &'static str {
        match self.max_depth_set.load(Ordering::SeqCst) {
            true => crate::tools::DEPTH_FROM_SESSION,
            false => self.agent.kernel_env.max_depth_from,
        }
    }

    /// `/rlm-max-depth <n>`: children admitted and kernels started from now on use `n`.
    pub(crate) fn set_max_depth(&self, n: u32) {
        self.max_depth.store(n, Ordering::SeqCst);
        self.max_depth_set.store(true, Ordering::SeqCst);
    }

    /// The main loop says whether the main agent is running a turn (for delivery statuses).
    pub(crate) fn set_main_busy(&self, busy: bool) {
        self.main_busy.store(busy, Ordering::SeqCst);
    }

    /// Children (at any depth) that are queued or running.
    pub(crate) fn outstanding(&self) -> u64 {
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
    pub(crate) fn cancel_all(&self) {
        let state = self.lock();
        for node in state.nodes.values().filter(|n| !n.status.is_terminal()) {
            node.abort.abort();
        }
        self.main_inbox.drain();
    }

    /// `session/close` or disconnect: cancel everything (abort hooks kill the children's
    /// groups at once), end the MCP connections, and hand the joins of the child threads and
    /// the drop of their agents (tools, kernels, session dirs) to the reaper. Returns at once;
    /// no news is sent afterwards.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.cancel_all();
        let (threads, nodes): (Vec<JoinHandle<()>>, Vec<Node>) = {
            let mut state = self.lock();
            state.order.clear();
            let mut nodes: Vec<Node> = state.nodes.drain().map(|(_, n)| n).collect();
            (
                nodes.iter_mut().filter_map(|n| n.thread.take()).collect(),
                nodes,
            )
        };
        // Stdio servers' groups are killed, HTTP sessions DELETEd (off this thread).
        if let Some(hub) = self.mcp.get() {
            hub.close();
        }
        crate::base::reaper::later(move || {
            let deadline = Instant::now() + Duration::from_millis(500);
            for t in threads {
                crate::base::reaper::join_or_leave(t, deadline, "a subagent");
            }
            // Dropping the nodes drops their tools and kills their kernels.
            for node in nodes.iter().filter(|n| !n.kept) {
                let _ = std::fs::remove_dir_all(&node.session_dir);
            }
            drop(nodes);
            let _ = std::fs::remove_dir(subagent_root());
        });
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
            model: node
                .model
                .as_ref()
                .map(|p| p.label())
                .or_else(|| self.model_label()),
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
        self.provider().ok().map(|p| p.label())
    }

    /// The session's current model.
    pub(crate) fn provider(&self) -> ProviderChoice {
        self.provider
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The session's current reasoning level: a top-level child's unless `rlm(...,
    /// thinking=)` names one.
    pub(crate) fn thinking(&self) -> Thinking {
        *self.thinking.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session switched models or levels: children take the model from their next run
    /// on, new children the level.
    pub(crate) fn set_model(&self, provider: ProviderChoice, thinking: Thinking) {
        *self.provider.lock().unwrap_or_else(|e| e.into_inner()) = provider;
        *self.thinking.lock().unwrap_or_else(|e| e.into_inner()) = thinking;
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
}

/// Where subagents' session dirs live (removed when their family closes).
fn subagent_root() -> PathBuf {
    std::env::temp_dir().join(format!("prime-agent-{}", std::process::id()))
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
