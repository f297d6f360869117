//! One ACP session's state machine: prompts, cancel, close, turn and family news, timers.
//!
//! A `Session` takes an event and the current time and says what to do, as `Action`s pushed
//! into a buffer the caller owns (the main loop reuses one, so the streaming hot path does not
//! allocate). It performs no IO and starts no thread: answering the client, sending updates
//! and spawning turn workers are the caller's. It reads no clock: every method that waits is
//! given `now`, so the unit tests below drive the cancel grace, the quiescence wait and the
//! terminal update with a fake clock. The subagent family is behind the small `Workers` trait
//! for the same reason.

// The main loop does no IO (clippy.toml lists what that excludes; `make io-ban` checks it).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base::json::json;
use serde_json::Value;

use crate::agent::autonomy;
use crate::agent::family::Attribution;
use crate::agent::permissions::{self, Mode};
use crate::agent::subagents::{Family, FamilyMsg};
use crate::agent::turn::{
    goal_event, AgentCtx, AgentEvent, Conversation, DeltaKind, Local, TurnInput, TurnModel,
    TurnMsg, TurnMsgKind, TurnOutcome, TurnStart,
};
use crate::base::abort::AbortFlag;
use crate::base::content::UserPrompt;
use crate::persist::schedule::{Claimed, Delivery, Due, HeartbeatCommand, Jobs};
use crate::protocol::acp::{self, McpServer};
use crate::protocol::meta::{self, Envelope, Phase, Quiescence};
use crate::protocol::rpc::{self, RequestId, RpcError};
use crate::protocol::stop_reason::acp_stop_reason;
use crate::server::client_host::ClientHost;
use crate::server::config_options;
use crate::server::events::{bash_tool_call_id, to_session_updates, MappingState};

pub(crate) const PROMPT_RUNNING: &str = "A prompt turn is already running for this ACP session";
pub(crate) const TURN_FAILED: &str = "prime-agent turn failed: ";

/// The waits of the state machine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// How long a cancelled turn may take to report its last updates (killed children, the
    /// final `failed` tool update) before the prompt is answered without them. Abort hooks
    /// make the usual case well under a millisecond.
    pub(crate) cancel_grace: Duration,
    /// How long a new prompt waits for the previous turn's subagents to settle before the
    /// previous turn's terminal update is published as it stands (the later upstream
    /// behaviour: bounded).
    pub(crate) quiescence_wait: Duration,
    /// How long a closing session (or the process at end of input) may run the refine due at
    /// its turn's end (behaviour spec §5.4, drained at close) before it is aborted.
    pub(crate) refine_drain: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            cancel_grace: Duration::from_millis(250),
            quiescence_wait: Duration::from_secs(3),
            refine_drain: Duration::from_secs(120),
        }
    }
}

impl Timing {
    /// The defaults, with `PRIME_AGENT_QUIESCENCE_WAIT_MS` honoured (a harness whose subagents
    /// take long may want the next prompt to wait for them longer).
    pub(crate) fn from_env() -> Timing {
        let mut timing = Timing::default();
        if let Some(ms) = std::env::var("PRIME_AGENT_QUIESCENCE_WAIT_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            timing.quiescence_wait = Duration::from_millis(ms);
        }
        if let Some(ms) = std::env::var("PRIME_AGENT_REFINE_DRAIN_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            timing.refine_drain = Duration::from_millis(ms);
        }
        timing
    }
}

/// What the session asks its owner to do, in order.
pub(crate) enum Action {
    /// Answer a client request.
    Respond(RequestId, Result<Value, RpcError>),
    /// Send this `session/update` notification (the envelope is already applied).
    Notify(Value),
    /// Send an assistant message chunk: the streaming hot path, serialised by
    /// `events::message_chunk_frame` without a `Value` tree.
    Chunk {
        kind: DeltaKind,
        delta: String,
        message: Option<u64>,
        env: Envelope,
    },
    /// Start a turn worker for the main agent. A failed spawn comes back as
    /// `Session::spawn_failed`.
    StartTurn(TurnStart),
    /// The session is closed (its close was answered): drop it.
    Closed,
    /// Store the session's schedules (the job records) with the session.
    SaveHeartbeats(Value),
    /// The session is closed for `session/delete`: delete it from the store, then answer
    /// the request (`Closed` follows).
    DeleteStored(RequestId),
}

/// The part of the subagent family the state machine consults.
pub(crate) trait Workers: Send {
    /// Children queued or running.
    fn outstanding(&self) -> u64;
    /// Messages waiting for the main agent.
    fn inbox_waiting(&self) -> bool;
    fn set_main_busy(&self, busy: bool);
    /// Aborts every running child (finished ones stay reachable by message).
    fn cancel_all(&self);
    /// Ends every child.
    fn close(&self);
    /// The session switched models or levels: children take them from their next run on.
    fn set_model(&self, model: &TurnModel);
    /// The session's maximum subagent depth and where it comes from (`None`: no family).
    fn max_depth(&self) -> Option<(u32, &'static str)> {
        None
    }
    /// `/rlm-max-depth <n>`.
    fn set_max_depth(&self, _max_depth: u32) {}
}

/// The real family of a session and its main agent's inbox.
pub(crate) struct FamilyWorkers {
    pub(crate) family: Arc<Family>,
    pub(crate) ctx: Arc<AgentCtx>,
}

impl Workers for FamilyWorkers {
    fn outstanding(&self) -> u64 {
        self.family.outstanding()
    }
    fn inbox_waiting(&self) -> bool {
        !self.ctx.inbox.is_empty()
    }
    fn set_main_busy(&self, busy: bool) {
        self.family.set_main_busy(busy);
    }
    fn cancel_all(&self) {
        self.family.cancel_all();
    }
    fn close(&self) {
        self.family.close();
    }
    fn set_model(&self, model: &TurnModel) {
        self.family
            .set_model(model.provider.clone(), model.thinking);
    }
    fn max_depth(&self) -> Option<(u32, &'static str)> {
        Some((self.family.max_depth(), self.family.max_depth_from()))
    }
    fn set_max_depth(&self, max_depth: u32) {
        self.family.set_max_depth(max_depth);
    }
}

/// Routing keys of turn workers, unique in the process: a closed session's late messages can
/// never be mistaken for a newer session's.
static NEXT_TURN: AtomicU64 = AtomicU64::new(0);

struct ActiveTurn {
    /// `None` for a turn nobody prompted (an agent message or a child's result arrived).
    request: Option<RequestId>,
    /// The `promptTurnId` its updates carry (0 for unsolicited turns).
    prompt_turn_id: u64,
    /// Routing key of the worker's messages.
    turn: u64,
    abort: AbortFlag,
    /// Set by cancel/close: the prompt is answered `cancelled` when the worker finishes or at
    /// this deadline, whichever comes first.
    cancel_deadline: Option<Instant>,
    /// Tool calls started but not ended, so a cancel that outruns the worker can still close
    /// them for the client.
    open_tool_calls: Vec<String>,
}

struct QueuedPrompt {
    request: RequestId,
    input: TurnInput,
    /// When the wait for the previous turn's quiescence gives up.
    deadline: Instant,
}

struct PendingTerminal {
    prompt_turn_id: u64,
    ok: bool,
}

/// The result of a prompt that was cancelled.
fn cancelled() -> Value {
    json!({ "stopReason": acp_stop_reason(true, None).as_str() })
}

pub(crate) struct Session {
    id: String,
    /// Routes family news: a closed session's late news is dropped.
    generation: u64,
    timing: Timing,
    mapping: MappingState,
    /// Last `eventSequence` used; strictly increasing per session, starting at 1.
    sequence: u64,
    /// Last `promptTurnId` allocated (1, 2, 3, …).
    prompt_counter: u64,
    conversation: Arc<Mutex<Conversation>>,
    /// The main agent: its tools (and kernel) answer host requests through the family.
    ctx: Arc<AgentCtx>,
    /// The model the next turn calls (`session/set_config_option` changes it; a running
    /// turn keeps the one it started with).
    model: TurnModel,
    workers: Box<dyn Workers>,
    /// The session's way to its client: permission mode, remembered answers, client files
    /// (shared with its agents' tools through their `Agent`).
    client: Arc<ClientHost>,
    attribution: Attribution,
    active: Option<ActiveTurn>,
    /// A prompt that arrived while unsolicited work ran or the previous turn was settling.
    queued: Option<QueuedPrompt>,
    /// The last committed prompt turn, until its terminal-quiescence update is published.
    pending_terminal: Option<PendingTerminal>,
    /// A `session/close` waiting for the cancelled turn to settle.
    closing: Option<RequestId>,
    /// The close was answered (`Action::Closed`): the owner drops the session.
    closed: bool,
    /// The session's schedules (`/heartbeat`, and the main agent's `rlm_heartbeat` from its
    /// kernel thread, through the family; each lock is held for a pure update only); the
    /// main loop's timer fires them.
    heartbeats: Arc<Mutex<Jobs>>,
    /// `follow_up` firings waiting for the main agent to be idle; each runs as its own
    /// unsolicited turn.
    follow_ups: VecDeque<Due>,
    /// Validated at `session/new`; not yet offered to the kernel (there is no MCP client).
    #[allow(dead_code)] // Kept so the session owns what the client configured.
    mcp_servers: Vec<McpServer>,
    /// Autonomous mode and goal state, shared with this session's prompt turns.
    unattended: autonomy::Shared,
    /// Warnings for the client once the response that opened the session is written (a
    /// stored model this agent cannot run).
    opening_notices: Vec<String>,
    /// The session has a title (stored, given, or from its first prompt): the first prompt
    /// does not name it again.
    titled: bool,
    /// A title given while a turn held the conversation: written when the turn ends.
    pending_title: Option<String>,
    /// The recorder's "deleted" switch, reachable while a turn holds the conversation.
    recorder_release: Option<crate::persist::Release>,
    /// The close in progress is a `session/delete`'s.
    deleting: bool,
    /// The process is ending at end of input (`exit`): like a close, but nobody to answer.
    exiting: bool,
    /// The close's refine drain has started (it runs once).
    drained: bool,
    /// The newest turn worker; each new worker joins its predecessor (bounded, see
    /// `turn::spawn_turn`). Held for the owner, which spawns the workers.
    pub(crate) last_worker: Option<JoinHandle<()>>,
}

impl Session {
    pub(crate) fn new(
        id: String,
        generation: u64,
        ctx: Arc<AgentCtx>,
        workers: Box<dyn Workers>,
        client: Arc<ClientHost>,
        mcp_servers: Vec<McpServer>,
        timing: Timing,
    ) -> Session {
        Session {
            id,
            generation,
            timing,
            mapping: MappingState::for_client(client.standard_updates()),
            sequence: 0,
            prompt_counter: 0,
            conversation: Arc::default(),
            model: ctx.agent.turn_model(),
            ctx,
            workers,
            client,
            attribution: Attribution::default(),
            active: None,
            queued: None,
            pending_terminal: None,
            closing: None,
            closed: false,
            heartbeats: Arc::default(),
            follow_ups: VecDeque::new(),
            mcp_servers,
            unattended: Arc::new(Mutex::new(autonomy::Unattended::disabled())),
            opening_notices: Vec::new(),
            titled: false,
            pending_title: None,
            recorder_release: None,
            deleting: false,
            exiting: false,
            drained: false,
            last_worker: None,
        }
    }

    /// Gives the session its autonomous-mode and goal state (configured at `session/new`).
    pub(crate) fn set_unattended(&mut self, unattended: autonomy::Shared) {
        self.unattended = unattended;
    }

    /// The session's autonomous-mode and goal state (slash commands read and change it).
    pub(crate) fn unattended(&self) -> &autonomy::Shared {
        &self.unattended
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Sets the conversation a new session starts with: empty with a recorder for its file,
    /// or one continued from disk (`session/load`, `--continue`, …).
    pub(crate) fn restore(&mut self, conversation: Conversation, titled: bool) {
        self.recorder_release = conversation.recorder.as_ref().map(|r| r.release_handle());
        self.titled = titled;
        self.conversation = Arc::new(Mutex::new(conversation));
    }

    /// `session/set_title`, `/rename`: the session's title from now on, told to the client
    /// (`session_info_update`) and written to its file (at once, or when the running turn
    /// lets go of the conversation).
    pub(crate) fn set_title(&mut self, title: String, out: &mut Vec<Action>) {
        self.titled = true;
        self.pending_title = Some(title.clone());
        self.write_title();
        let update = json!({ "sessionUpdate": "session_info_update", "title": title });
        let turn = self.active.as_ref().map_or(0, |a| a.prompt_turn_id);
        self.publish(update, turn, Phase::Event, None, out);
    }

    /// Writes a pending title unless a turn holds the conversation (never waits for it).
    fn write_title(&mut self) {
        let Some(title) = self.pending_title.take() else {
            return;
        };
        match self.conversation.try_lock() {
            Ok(mut conv) => {
                if let Some(r) = conv.recorder.as_mut() {
                    r.set_title(title);
                }
            }
            Err(std::sync::TryLockError::Poisoned(e)) => {
                if let Some(r) = e.into_inner().recorder.as_mut() {
                    r.set_title(title);
                }
            }
            Err(std::sync::TryLockError::WouldBlock) => self.pending_title = Some(title),
        }
    }

    /// The process is exiting with the turns stopped: a title still waiting is written.
    pub(crate) fn flush_title(&mut self) {
        self.write_title();
    }

    /// Schedules stored with a continued session (the owner fields stay the session's).
    pub(crate) fn restore_heartbeats(&mut self, jobs: Jobs) {
        let mut mine = self.jobs();
        mine.jobs = jobs.jobs;
    }

    /// The session's schedules, to share with its family (the kernel's `rlm_heartbeat`).
    pub(crate) fn heartbeats(&self) -> &Arc<Mutex<Jobs>> {
        &self.heartbeats
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, Jobs> {
        self.heartbeats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the next schedule is due (schedule-clock milliseconds).
    pub(crate) fn heartbeat_due_ms(&self) -> Option<u64> {
        if self.closed || self.closing.is_some() {
            return None;
        }
        self.jobs().next_due_ms()
    }

    /// `/heartbeat …`, recognised by the handler: answered at once with what changed, and
    /// `heartbeatsChanged` when something did.
    pub(crate) fn heartbeat_command(
        &mut self,
        request: RequestId,
        command: HeartbeatCommand,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let (text, changed) = {
            let mut jobs = self.jobs();
            match command {
                HeartbeatCommand::Status => (jobs.status_text(), false),
                HeartbeatCommand::Off => match jobs.off(now_ms) {
                    true => ("Heartbeat stopped.".to_owned(), true),
                    false => ("No heartbeat is set.".to_owned(), false),
                },
                HeartbeatCommand::Set { schedule, prompt } => {
                    match jobs.set_heartbeat(&schedule, &prompt, now_ms) {
                        Ok(_) => (jobs.status_text(), true),
                        Err(why) => (why, false),
                    }
                }
            }
        };
        let chunk = json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": text } });
        self.publish(chunk, 0, Phase::Event, None, out);
        if changed {
            self.heartbeats_changed(out);
        }
        out.push(Action::Respond(
            request,
            Ok(json!({ "stopReason": acp_stop_reason(false, None).as_str() })),
        ));
    }

    fn heartbeats_changed(&mut self, out: &mut Vec<Action>) {
        for update in to_session_updates(&AgentEvent::HeartbeatsChanged, &mut self.mapping) {
            self.publish(update, 0, Phase::Event, None, out);
        }
        let jobs = self.jobs().to_json();
        out.push(Action::SaveHeartbeats(jobs));
    }

    /// The timer: a due `steer` schedule's prompt goes to the main agent's inbox, so it
    /// joins a running turn at its next model call or starts an unsolicited one
    /// (`promptTurnId` 0); a `follow_up` one waits for the main agent to be idle and then
    /// runs as its own unsolicited turn.
    pub(crate) fn on_heartbeat(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        let (due, skipped, saved) = {
            let mut jobs = self.jobs();
            // At most one firing per job in flight: one still in the inbox (a long tool call
            // holds the turn) or waiting as a follow-up makes its job skip this tick.
            let inbox = &self.ctx.inbox;
            let follow_ups = &self.follow_ups;
            let in_flight =
                |job: &str| inbox.holds_firing(job) || follow_ups.iter().any(|d| d.job_id == job);
            let Claimed { due, skipped } = jobs.take_due(now_ms, &in_flight);
            // Under the jobs lock: a cell that sees `runCount` go up finds the prompt
            // already delivered.
            for d in due.iter().filter(|d| d.delivery == Delivery::Steer) {
                self.ctx
                    .inbox
                    .push_message(d.prompt.clone(), Some(d.custom()));
            }
            (due, skipped, jobs.to_json())
        };
        if due.is_empty() {
            if skipped > 0 {
                out.push(Action::SaveHeartbeats(saved));
            }
            return;
        }
        // A firing that finished a job changed what `list` shows: the client hears of it like
        // any other change. A plain interval firing moves only `runCount`/`lastRunAt`/
        // `nextRunAt`; it is saved but not announced, or every tick would also be a
        // `heartbeatsChanged` (the turn it starts already shows that it fired).
        if due.iter().any(|d| d.completed) {
            self.heartbeats_changed(out);
        } else {
            out.push(Action::SaveHeartbeats(saved));
        }
        self.follow_ups
            .extend(due.into_iter().filter(|d| d.delivery == Delivery::FollowUp));
        self.advance(out);
    }

    /// `session/load`: the stored conversation shown again, as session-scoped updates
    /// (`promptTurnId` 0), before the load is answered.
    pub(crate) fn replay(&mut self, updates: Vec<Value>, out: &mut Vec<Action>) {
        for update in updates {
            self.publish(update, 0, Phase::Event, None, out);
        }
    }

    /// The model the next turn calls.
    pub(crate) fn model(&self) -> &TurnModel {
        &self.model
    }

    /// Switches the model from the next model turn on (main agent and children); the running
    /// turn keeps its own.
    /// The session's children and their limits.
    pub(crate) fn workers(&self) -> &dyn Workers {
        self.workers.as_ref()
    }

    pub(crate) fn set_model(&mut self, model: TurnModel) {
        self.workers.set_model(&model);
        self.model = model;
    }

    /// The complete `configOptions`: the permission mode, then the model and its reasoning
    /// level (when the session has a model).
    pub(crate) fn config_options(&self) -> Value {
        let mut list = vec![permissions::mode_option(self.client.mode())];
        if let Ok(provider) = &self.model.provider {
            let agent = &self.ctx.agent;
            let menu = agent
                .models
                .as_ref()
                .map(|m| m.models())
                .unwrap_or_default();
            let current =
                config_options::current_model(&provider.label(), provider.reasoning(), &menu);
            if let Value::Array(more) =
                config_options::options(&menu, &current, self.model.thinking)
            {
                list.extend(more);
            }
        }
        list.extend(self.client.sandbox_option());
        Value::Array(list)
    }

    /// The client switched the sandbox (`session/set_config_option` `sandbox`): from the next
    /// call on; answered with the options.
    pub(crate) fn set_sandbox(
        &mut self,
        request: RequestId,
        mode: crate::base::sandbox::Mode,
        out: &mut Vec<Action>,
    ) {
        self.client.set_sandbox_mode(mode);
        let options = self.config_options();
        out.push(Action::Respond(
            request,
            Ok(json!({ "configOptions": options })),
        ));
    }

    /// `modes` of the session responses (legacy modes, kept in step with the `mode` option).
    pub(crate) fn modes(&self) -> Value {
        permissions::modes_state(self.client.mode())
    }

    /// The client switched the permission mode: with `session/set_mode` (answered `{}`; the
    /// `mode` option changed, so `config_option_update` follows) or with
    /// `session/set_config_option` (answered with the options; `current_mode_update` follows).
    /// Either way, clients that track only one of the two stay in step.
    pub(crate) fn set_mode(
        &mut self,
        request: RequestId,
        mode: Mode,
        via_config_option: bool,
        out: &mut Vec<Action>,
    ) {
        self.client.set_mode(mode);
        let update = if via_config_option {
            let options = self.config_options();
            out.push(Action::Respond(
                request,
                Ok(json!({ "configOptions": options })),
            ));
            json!({ "sessionUpdate": "current_mode_update", "currentModeId": mode.id() })
        } else {
            out.push(Action::Respond(request, Ok(json!({}))));
            json!({ "sessionUpdate": "config_option_update", "configOptions": self.config_options() })
        };
        let turn = self.active.as_ref().map_or(0, |a| a.prompt_turn_id);
        self.publish(update, turn, Phase::Event, None, out);
    }

    /// Switches the model other than through `session/set_config_option` (e.g. a `/model`
    /// command): as `set_model`, and the client hears of it with `config_option_update`. Every
    /// such switch goes through here.
    pub(crate) fn switch_model(&mut self, model: TurnModel, out: &mut Vec<Action>) {
        self.set_model(model);
        let update = json!({ "sessionUpdate": "config_option_update", "configOptions": self.config_options() });
        let turn = self.active.as_ref().map_or(0, |a| a.prompt_turn_id);
        self.publish(update, turn, Phase::Event, None, out);
    }

    /// Routes family news: each session's family has its own generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether this session is running the worker with routing key `turn`.
    pub(crate) fn runs_turn(&self, turn: u64) -> bool {
        self.active.as_ref().is_some_and(|a| a.turn == turn)
    }

    /// Wraps `update` in the envelope and queues it as `session/update`.
    fn publish(
        &mut self,
        mut update: Value,
        prompt_turn_id: u64,
        phase: Phase,
        outcome_ok: Option<bool>,
        out: &mut Vec<Action>,
    ) {
        self.sequence += 1;
        let env = Envelope {
            prompt_turn_id,
            event_sequence: self.sequence,
            phase,
            outcome_ok,
        };
        meta::apply_envelope(&mut update, env);
        out.push(Action::Notify(rpc::notification(
            acp::SESSION_UPDATE,
            json!({ "sessionId": self.id, "update": update }),
        )));
    }

    /// A client's `session/prompt`, already parsed. Runs now, waits behind unsolicited work or
    /// a settling previous turn, or is refused.
    pub(crate) fn prompt(
        &mut self,
        request: RequestId,
        prompt: UserPrompt,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        self.prompt_input(request, TurnInput::Prompt(prompt), now, out);
    }

    /// Why a prompt would be refused now (`None`: it runs or waits its turn).
    pub(crate) fn refusal(&self) -> Option<String> {
        if self.closing.is_some() {
            Some(format!("ACP session is closing: {}", self.id))
        } else {
            match &self.active {
                Some(a) if a.cancel_deadline.is_some() => {
                    Some(format!("ACP session is cancelling: {}", self.id))
                }
                Some(a) if a.request.is_some() => Some(PROMPT_RUNNING.to_owned()),
                _ if self.queued.is_some() => Some(PROMPT_RUNNING.to_owned()),
                _ => None,
            }
        }
    }

    /// `_session/steering`: while a client prompt runs, the text joins it before its next model
    /// call (the turn takes it from the inbox, recorded as a user message) and the prompt is
    /// answered only once a model call has seen it; otherwise the idle behaviour decides.
    pub(crate) fn steer(
        &mut self,
        request: RequestId,
        text: String,
        idle: acp::IdleBehavior,
        out: &mut Vec<Action>,
    ) {
        if self.closing.is_some() || self.closed {
            let why = format!("ACP session is closing: {}", self.id);
            out.push(Action::Respond(request, Err(RpcError::internal(why))));
            return;
        }
        let prompt_running = self
            .active
            .as_ref()
            .is_some_and(|a| a.request.is_some() && a.cancel_deadline.is_none());
        if prompt_running && self.ctx.inbox.steer(&text) {
            out.push(Action::Respond(
                request,
                Ok(json!({ "outcome": "injected" })),
            ));
            return;
        }
        match idle {
            acp::IdleBehavior::PromptRequired => out.push(Action::Respond(
                request,
                Ok(json!({ "outcome": "promptRequired", "reason": "noRunningTurn" })),
            )),
            acp::IdleBehavior::StartTurn => {
                // A message for the main agent: it starts an unsolicited turn, or joins the
                // unsolicited turn that runs.
                let outcome = if self.active.is_some() {
                    "injected"
                } else {
                    "startedNewTurn"
                };
                self.ctx.inbox.push(text);
                out.push(Action::Respond(request, Ok(json!({ "outcome": outcome }))));
                self.advance(out);
            }
        }
    }

    /// `prompt` for any prompt turn's input (a slash command's local answer too).
    pub(crate) fn prompt_input(
        &mut self,
        request: RequestId,
        input: TurnInput,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if let Some(why) = self.refusal() {
            out.push(Action::Respond(request, Err(RpcError::internal(why))));
            return;
        }
        // Behind unsolicited work or a settling previous turn, the prompt waits its turn
        // (bounded by the quiescence wait for the latter) instead of being refused.
        self.queued = Some(QueuedPrompt {
            request,
            input,
            deadline: now + self.timing.quiescence_wait,
        });
        self.advance(out);
    }

    /// Right after `session/new`: the slash commands, and a goal the session starts with.
    pub(crate) fn announce(&mut self, commands: Value, out: &mut Vec<Action>) {
        self.publish(commands, 0, Phase::Event, None, out);
        self.publish_goal(0, out);
    }

    /// A warning to show once the session is open (`publish_opening_notices`).
    pub(crate) fn notice_when_open(&mut self, title: String) {
        self.opening_notices.push(title);
    }

    /// Right after the response that opened the session (`session/new`, `load`, `resume`):
    /// its warnings, as `_meta…notice` (what provider notices use).
    pub(crate) fn publish_opening_notices(&mut self, out: &mut Vec<Action>) {
        for title in std::mem::take(&mut self.opening_notices) {
            let notice = AgentEvent::Notice {
                severity: "warning".to_owned(),
                title,
                description: None,
            };
            for update in to_session_updates(&notice, &mut self.mapping) {
                self.publish(update, 0, Phase::Event, None, out);
            }
        }
        // A goal a continued session restored (`session/new` showed it with `announce`).
        self.publish_goal(0, out);
    }

    /// `_meta…goal`, if the goal changed since it was last shown.
    fn publish_goal(&mut self, turn: u64, out: &mut Vec<Action>) {
        let goal = autonomy::lock(&self.unattended).take_goal_meta();
        if let Some(g) = goal {
            for update in to_session_updates(&goal_event(g), &mut self.mapping) {
                self.publish(update, turn, Phase::Event, None, out);
            }
        }
    }

    /// `session/cancel` semantics (§1.6): abort the running turn (answered `cancelled` once it
    /// settles), cancel every subagent, drop queued agent messages, answer a queued prompt
    /// `cancelled`, and publish no terminal update for the interrupted turn.
    pub(crate) fn cancel(&mut self, now: Instant, out: &mut Vec<Action>) {
        // As the inbox: what was waiting for the main agent is dropped.
        self.workers.cancel_all();
        self.follow_ups.clear();
        self.pending_terminal = None;
        if let Some(active) = self.active.as_mut() {
            if active.cancel_deadline.is_none() {
                active.cancel_deadline = Some(now + self.timing.cancel_grace);
                active.abort.abort();
            }
        }
        if let Some(q) = self.queued.take() {
            out.push(Action::Respond(q.request, Ok(cancelled())));
        }
    }

    /// `$/cancel_request` for `target`: cancels the running prompt if it is that request, or
    /// answers only that queued prompt (it never ran, so nothing else is disturbed).
    pub(crate) fn cancel_request(&mut self, target: &Value, now: Instant, out: &mut Vec<Action>) {
        let running = self
            .active
            .as_ref()
            .and_then(|a| a.request.as_ref())
            .is_some_and(|r| r.0 == *target);
        if running {
            self.cancel(now, out);
        } else if self.queued.as_ref().is_some_and(|q| q.request.0 == *target) {
            if let Some(q) = self.queued.take() {
                out.push(Action::Respond(q.request, Ok(cancelled())));
            }
        }
    }

    /// `session/close`: answered `{}` once the running turn (if any) has been cancelled and
    /// answered, so nothing of this session is written after the close response.
    pub(crate) fn close(&mut self, request: RequestId, now: Instant, out: &mut Vec<Action>) {
        self.close_then(request, false, now, out);
    }

    /// `session/delete` of this open session: closed as by `session/close`, then deleted
    /// from the store (`Action::DeleteStored`) before the request is answered.
    pub(crate) fn close_and_delete(
        &mut self,
        request: RequestId,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        self.close_then(request, true, now, out);
    }

    fn close_then(
        &mut self,
        request: RequestId,
        delete: bool,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if self.closing.is_some() {
            let why = format!("ACP session is already closing: {}", self.id);
            out.push(Action::Respond(request, Err(RpcError::internal(why))));
            return;
        }
        self.closing = Some(request);
        self.deleting = delete;
        self.cancel(now, out);
        if self.active.is_none() {
            self.close_or_drain(now, out);
        }
    }

    /// The process is ending at end of input: the running turn is cancelled as by a close,
    /// then a refine due at its end is drained, bounded, as at a close (`settle_blocking`
    /// waits for it). Nothing is answered: the client is gone.
    pub(crate) fn exit(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.closed || self.closing.is_some() {
            return;
        }
        self.exiting = true;
        self.cancel(now, out);
        if self.active.is_none() {
            self.close_or_drain(now, out);
        }
    }

    /// With the main agent idle, a closing (or exiting) session first runs the refine its
    /// turn's end left due (behaviour spec §5.4: a pending refine is drained at close), on a
    /// turn worker like any boundary, never on the loop, bounded by `Timing::refine_drain`
    /// (then aborted); it ends like a cancelled turn, and the close completes after it. A
    /// deleted session's refine is not drained: the session is going away.
    fn close_or_drain(&mut self, now: Instant, out: &mut Vec<Action>) {
        if !self.drained && !self.deleting && self.refine_due(now) {
            self.drained = true;
            log::info!("session {}: draining the refine due at close", self.id);
            self.start_turn(None, TurnInput::Local(Local::Boundary), out);
            if let Some(active) = self.active.as_mut() {
                // Ended as a cancelled turn: answered when its worker finishes, or aborted
                // at this deadline.
                active.cancel_deadline = Some(now + self.timing.refine_drain);
            }
            return;
        }
        if self.closing.is_some() {
            self.finish_close(out);
        }
    }

    /// A refine is due at the turn's end (memory only: the conversation is idle here, so its
    /// lock is free; a worker still holding it means no drain).
    fn refine_due(&self, now: Instant) -> bool {
        let calls = match self.conversation.try_lock() {
            Ok(conv) => conv.model_calls,
            Err(_) => return false,
        };
        self.ctx.compaction.refine_due(calls, now)
    }

    fn finish_close(&mut self, out: &mut Vec<Action>) {
        self.closed = true;
        self.workers.close();
        if self.deleting {
            // A turn that outlived its grace may still hold the conversation: its recorder
            // stops writing, so the deleted file does not come back.
            if let Some(release) = &self.recorder_release {
                release.stop_writing();
            }
        } else {
            self.write_title();
        }
        if let Some(close_id) = self.closing.take() {
            if self.deleting {
                out.push(Action::DeleteStored(close_id));
            } else {
                // What ran after the last prompt's answer (a child finishing, an unsolicited
                // turn).
                let mut result = json!({});
                crate::protocol::semantic::annotate(&mut result, &self.ctx.trace.take());
                out.push(Action::Respond(close_id, Ok(result)));
            }
        }
        out.push(Action::Closed);
    }

    /// A closed session lets go of its file at once (the lock, so it can be opened again
    /// right away; closing a file descriptor does not wait). When a worker still holds the
    /// conversation, the `Release` returned lets the reaper stop that recorder and drop the
    /// claim after its teardown, whether the worker ever lets go or not.
    pub(crate) fn release_file(&self) -> Option<crate::persist::Release> {
        match self.conversation.try_lock() {
            Ok(mut conv) => conv.recorder = None,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner().recorder = None,
            Err(std::sync::TryLockError::WouldBlock) => return self.recorder_release.clone(),
        }
        None
    }

    /// Ends everything at once (the process is exiting): aborts the turn, ends the family.
    /// The process is exiting: the main agent's tools save what must survive it (a pending
    /// kernel namespace snapshot), waiting at most until `deadline`.
    pub(crate) fn save_state(&self, deadline: Instant) {
        self.ctx.tools.save_state(deadline);
    }

    pub(crate) fn shut_down(&mut self) {
        if let Some(active) = self.active.take() {
            active.abort.abort();
        }
        self.workers.close();
    }

    /// The cancelled turn's grace deadline, if one is running out.
    pub(crate) fn cancel_deadline(&self) -> Option<Instant> {
        self.active.as_ref().and_then(|a| a.cancel_deadline)
    }

    /// When `on_timer` must run next.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let queued = self
            .queued
            .as_ref()
            .filter(|_| self.pending_terminal.is_some())
            .map(|q| q.deadline);
        self.cancel_deadline().into_iter().chain(queued).min()
    }

    pub(crate) fn on_timer(&mut self, now: Instant, out: &mut Vec<Action>) {
        if self.cancel_deadline().is_some_and(|d| d <= now) {
            // Its worker has not finished: it still holds the conversation.
            self.settle_cancelled(None, out);
        }
        if self.closed {
            return;
        }
        let waited_out = self.queued.as_ref().is_some_and(|q| q.deadline <= now);
        if waited_out {
            if let Some(pending) = self.pending_terminal.take() {
                // The previous turn's subagents are still working: publish its terminal update
                // as it stands (outstandingSubagents > 0) rather than hold the prompt forever.
                self.publish_terminal(pending, out);
            }
        }
        self.advance(out);
    }

    /// Answers a cancelled turn: closes its open tool calls for the client, responds
    /// `cancelled`, and completes a pending `session/close` (draining a due refine first when
    /// the worker has finished, at `finished`). Later messages of the turn are dropped by
    /// routing.
    fn settle_cancelled(&mut self, finished: Option<Instant>, out: &mut Vec<Action>) {
        let Some(active) = self.active.take() else {
            return;
        };
        // A refine drain that outlived its bound stops at its next checkpoint.
        active.abort.abort();
        self.write_title();
        self.workers.set_main_busy(false);
        self.ctx.inbox.close_steering();
        for id in &active.open_tool_calls {
            let update = json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": id,
                "status": "failed",
                "content": [{"type": "content", "content": {"type": "text", "text": "Cancelled"}}],
            });
            self.publish(update, active.prompt_turn_id, Phase::Event, None, out);
        }
        if let Some(request) = active.request {
            out.push(Action::Respond(request, Ok(cancelled())));
        }
        if self.closing.is_some() || self.exiting {
            match finished {
                Some(now) => self.close_or_drain(now, out),
                None if self.closing.is_some() => self.finish_close(out),
                None => {}
            }
        } else {
            self.advance(out);
        }
    }

    /// Moves the session forward when nothing runs: publish a settled turn's terminal update,
    /// run the main agent on messages waiting in its inbox, or start the queued prompt.
    fn advance(&mut self, out: &mut Vec<Action>) {
        if self.active.is_some() || self.closing.is_some() {
            return;
        }
        let inbox_waiting = self.workers.inbox_waiting();
        if self.quiescent() {
            if let Some(pending) = self.pending_terminal.take() {
                self.publish_terminal(pending, out);
            }
        }
        // A waiting prompt goes first once the previous turn is settled (or its wait timed
        // out): its first model call takes the inbox along, so agent messages cannot starve it.
        if self.pending_terminal.is_none() {
            if let Some(q) = self.queued.take() {
                self.start_turn(Some(q.request), q.input, out);
                return;
            }
        }
        if inbox_waiting {
            self.start_turn(None, TurnInput::Inbox, out);
        } else if let Some(due) = self.follow_ups.pop_front() {
            // Settings `followUpMode` `all`: the others due join this turn's first model call.
            if self.ctx.agent.message_delivery.all_follow_ups {
                for rest in self.follow_ups.drain(..) {
                    let custom = Some(rest.custom());
                    self.ctx.inbox.push_message(rest.prompt, custom);
                }
            }
            let prompt = UserPrompt {
                custom: Some(due.custom()),
                text: due.prompt,
                images: Vec::new(),
                trace_parent: None,
                typed: false,
            };
            self.start_turn(None, TurnInput::Prompt(prompt), out);
        }
    }

    /// No work of the last prompt turn is left: no subagent outstanding, nothing in the main
    /// agent's inbox, no follow-up due (the turn's terminal-quiescence update is due).
    fn quiescent(&self) -> bool {
        // Outstanding first: it takes the family lock, so a child that just finished has also
        // finished putting its completion notice in the inbox.
        self.workers.outstanding() == 0
            && !self.workers.inbox_waiting()
            && self.follow_ups.is_empty()
    }

    fn publish_terminal(&mut self, pending: PendingTerminal, out: &mut Vec<Action>) {
        let update = self.quiescence_update();
        self.attribution.seal(pending.prompt_turn_id);
        self.publish(
            update,
            pending.prompt_turn_id,
            Phase::TerminalQuiescence,
            Some(pending.ok),
            out,
        );
    }

    /// The completion or terminal update: quiescence counters and, in autonomous mode,
    /// `_meta…autonomous`.
    fn quiescence_update(&self) -> Value {
        let state = autonomy::lock(&self.unattended);
        let q = Quiescence {
            outstanding_subagents: self.workers.outstanding(),
            remaining_autonomous_continuations: state.remaining_continuations(),
        };
        let mut update = meta::quiescence_update(q);
        autonomy::annotate(&mut update, &state);
        update
    }

    /// Starts a turn of the main agent: a client prompt (`request` is its id) or an
    /// unsolicited turn over the inbox.
    fn start_turn(&mut self, request: Option<RequestId>, input: TurnInput, out: &mut Vec<Action>) {
        // The first prompt names the session, so editors can title the thread (unless it has
        // a title already: stored, or given by the client).
        let title = match (&input, self.titled) {
            (TurnInput::Prompt(p), false) if request.is_some() => meta::session_title(&p.text),
            _ => None,
        };
        self.titled |= title.is_some();
        let turn = NEXT_TURN.fetch_add(1, Ordering::Relaxed) + 1;
        let abort = AbortFlag::new();
        let prompt_turn_id = if request.is_some() {
            self.prompt_counter += 1;
            // A client prompt starts a new chain of `continuation` edges.
            self.ctx.trace.begin_prompt();
            self.prompt_counter
        } else {
            0
        };
        if request.is_some() {
            // Steers join this prompt until its worker says it ended.
            self.ctx.inbox.open_steering();
        }
        out.push(Action::StartTurn(TurnStart {
            turn,
            abort: abort.clone(),
            input,
            ctx: self.ctx.clone(),
            model: self.model.clone(),
            conversation: self.conversation.clone(),
            unattended: request.is_some().then(|| self.unattended.clone()),
        }));
        if let Some(title) = title {
            let update = json!({ "sessionUpdate": "session_info_update", "title": title });
            self.publish(update, prompt_turn_id, Phase::Event, None, out);
        }
        self.active = Some(ActiveTurn {
            request,
            prompt_turn_id,
            turn,
            abort,
            cancel_deadline: None,
            open_tool_calls: Vec::new(),
        });
        self.workers.set_main_busy(true);
    }

    /// The owner could not start the worker of `turn`: the prompt fails, nothing else runs.
    pub(crate) fn spawn_failed(&mut self, turn: u64, error: &str, out: &mut Vec<Action>) {
        if self.active.as_ref().is_some_and(|a| a.turn == turn) {
            let active = self.active.take().expect("checked");
            self.workers.set_main_busy(false);
            if active.request.is_some() {
                // The prompt never ran: it does not count.
                self.prompt_counter -= 1;
            }
            if let Some(request) = active.request {
                let err = RpcError::internal(format!(
                    "{TURN_FAILED}could not start the turn thread: {error}"
                ));
                out.push(Action::Respond(request, Err(err)));
            }
        }
    }

    pub(crate) fn on_family(&mut self, msg: FamilyMsg, out: &mut Vec<Action>) {
        match msg {
            FamilyMsg::Child {
                generation,
                snapshot,
                status,
            } if generation == self.generation => {
                let active_turn = self.active.as_ref().map(|a| a.prompt_turn_id).unwrap_or(0);
                let turn = self
                    .attribution
                    .turn_for_child(&snapshot.id, status, active_turn);
                let updates =
                    to_session_updates(&AgentEvent::ChildUpdate(snapshot), &mut self.mapping);
                for update in updates {
                    self.publish(update, turn, Phase::Event, None, out);
                }
            }
            FamilyMsg::MainInbox { generation } if generation == self.generation => {}
            FamilyMsg::SentByMain {
                generation,
                target,
                delivery_status,
            } if generation == self.generation => {
                // Attributed to the cell that sent it when one is running.
                let (turn, tool_call_id) = match &self.active {
                    Some(a) => (
                        a.prompt_turn_id,
                        a.open_tool_calls.last().cloned().unwrap_or_default(),
                    ),
                    None => (0, String::new()),
                };
                let event = AgentEvent::AgentMessageSent {
                    tool_call_id,
                    target: Some(target),
                    delivery_status: Some(delivery_status),
                };
                let updates = to_session_updates(&event, &mut self.mapping);
                for update in updates {
                    self.publish(update, turn, Phase::Event, None, out);
                }
            }
            FamilyMsg::Mcp {
                generation,
                servers,
            } if generation == self.generation => {
                let turn = self.active.as_ref().map_or(0, |a| a.prompt_turn_id);
                let updates =
                    to_session_updates(&AgentEvent::McpStatus(servers), &mut self.mapping);
                for update in updates {
                    self.publish(update, turn, Phase::Event, None, out);
                }
            }
            FamilyMsg::Goal { generation } if generation == self.generation => {
                let turn = self.active.as_ref().map_or(0, |a| a.prompt_turn_id);
                self.publish_goal(turn, out);
            }
            // The kernel changed the schedules: the loop re-arms its timer before it waits.
            FamilyMsg::Heartbeats { generation } if generation == self.generation => {
                self.heartbeats_changed(out)
            }
            _ => return, // News from a closed session's family.
        }
        self.advance(out);
    }

    /// A message from a turn worker. Messages of a turn that was already answered, or of
    /// another session's turn, are dropped (routing by turn number).
    pub(crate) fn on_turn(&mut self, msg: TurnMsg, now: Instant, out: &mut Vec<Action>) {
        let Some(active) = self.active.as_mut().filter(|a| a.turn == msg.turn) else {
            return;
        };
        let prompt_turn_id = active.prompt_turn_id;
        let active_cancelled = active.cancel_deadline.is_some();
        match msg.kind {
            TurnMsgKind::Delta { kind, delta } => {
                // The hot path writes nothing for these, so they use no sequence number.
                if delta.is_empty() || kind == DeltaKind::ToolCall {
                    return;
                }
                self.sequence += 1;
                out.push(Action::Chunk {
                    kind,
                    delta,
                    message: self.mapping.assistant_message(),
                    env: Envelope {
                        prompt_turn_id,
                        event_sequence: self.sequence,
                        phase: Phase::Event,
                        outcome_ok: None,
                    },
                });
            }
            TurnMsgKind::Event(event) => {
                let event = *event;
                let open = &mut active.open_tool_calls;
                match &event {
                    AgentEvent::ToolAnnounced { id, .. }
                    | AgentEvent::ToolPending { id, .. }
                    | AgentEvent::ToolStart { id, .. }
                    | AgentEvent::ToolAwaitingApproval { id, .. }
                        if !open.contains(id) =>
                    {
                        open.push(id.clone())
                    }
                    AgentEvent::ToolEnd { id, .. } => open.retain(|o| o != id),
                    AgentEvent::BashStart { run_id, .. } => {
                        open.push(bash_tool_call_id(run_id.as_deref()))
                    }
                    AgentEvent::BashEnd { run_id, .. } => {
                        let id = bash_tool_call_id(run_id.as_deref());
                        open.retain(|o| *o != id);
                    }
                    _ => {}
                }
                let updates = to_session_updates(&event, &mut self.mapping);
                for update in updates {
                    self.publish(update, prompt_turn_id, Phase::Event, None, out);
                }
            }
            // A turn cancelled before its response boundary is `cancelled`, whatever it says.
            TurnMsgKind::Finished(_) if active_cancelled => self.settle_cancelled(Some(now), out),
            TurnMsgKind::Finished(outcome) => self.finish_turn(outcome, out),
        }
    }

    /// Writes the per-turn tail of §1.14 and answers the prompt; the terminal update follows
    /// once the turn's subagents have settled (`advance`).
    fn finish_turn(&mut self, outcome: TurnOutcome, out: &mut Vec<Action>) {
        let Some(active) = self.active.take() else {
            return;
        };
        // The worker has let go of the conversation: a title given meanwhile is written.
        self.write_title();
        self.workers.set_main_busy(false);
        self.ctx.inbox.close_steering();
        let Some(request) = active.request else {
            // An unsolicited turn belongs to the lifecycle of the last prompt turn: a failure
            // there makes that turn's terminal outcome "error".
            if !matches!(outcome, TurnOutcome::Completed(_)) {
                log::warn!("an unsolicited turn ended with {outcome:?}");
                if let Some(p) = self.pending_terminal.as_mut() {
                    p.ok = false;
                }
            }
            self.advance(out);
            return;
        };
        let id = active.prompt_turn_id;
        let (result, ok) = match outcome {
            TurnOutcome::Cancelled => {
                let mut result = cancelled();
                crate::protocol::semantic::annotate(&mut result, &self.ctx.trace.take());
                out.push(Action::Respond(request, Ok(result)));
                self.advance(out);
                return;
            }
            TurnOutcome::Panicked(why) => {
                log::error!("turn {} panicked: {why}", active.turn);
                let boundary = meta::response_boundary(false);
                self.publish(boundary, id, Phase::ResponseBoundary, Some(false), out);
                let err = RpcError::internal(format!("{TURN_FAILED}internal error: {why}"));
                out.push(Action::Respond(request, Err(err)));
                self.advance(out);
                return;
            }
            TurnOutcome::Completed(stop) => {
                let mut result = json!({ "stopReason": stop.as_str() });
                let (usage, children) = {
                    let mut state = autonomy::lock(&self.unattended);
                    (state.prompt_usage.take(), state.prompt_children.take())
                };
                if let Some(u) = usage {
                    result["usage"] = autonomy::usage_value(u);
                }
                // `usage` counts the children's calls; this says how much of it was theirs.
                if let Some((prompt, session)) = children {
                    result["_meta"] = json!({ crate::protocol::meta::NAMESPACE: { "childUsage": {
                        "prompt": autonomy::usage_value(prompt),
                        "session": autonomy::usage_value(session),
                    }}});
                }
                crate::protocol::semantic::annotate(&mut result, &self.ctx.trace.take());
                (Ok(result), true)
            }
            TurnOutcome::Failed(why) => {
                let mut err = RpcError::internal(format!("{TURN_FAILED}{}", why.text));
                if let Some(data) = err.data.as_mut() {
                    data["kind"] = json!(why.kind);
                }
                (Err(err), false)
            }
        };
        let boundary = meta::response_boundary(true);
        self.publish(boundary, id, Phase::ResponseBoundary, Some(ok), out);
        let completion = self.quiescence_update();
        self.publish(completion, id, Phase::Event, None, out);
        let pending = PendingTerminal {
            prompt_turn_id: id,
            ok,
        };
        // Already quiescent (the usual case): the terminal update goes just before the
        // response, so a client that reads the updates it has when the response arrives sees
        // it (verifiers' PrimeAgentHarness does). Otherwise it follows when the work settles.
        if self.quiescent() {
            self.publish_terminal(pending, out);
        } else {
            self.pending_terminal = Some(pending);
        }
        out.push(Action::Respond(request, result));
        self.advance(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::turn::Agent;
    use crate::protocol::stop_reason::StopReason;
    use crate::provider::Thinking;
    use std::sync::atomic::AtomicBool;

    /// A family whose state the test sets.
    #[derive(Default)]
    struct FakeWorkers {
        outstanding: AtomicU64,
        inbox: AtomicBool,
        cancelled: AtomicU64,
        closed: AtomicBool,
        provider_switches: AtomicU64,
    }

    impl Workers for Arc<FakeWorkers> {
        fn outstanding(&self) -> u64 {
            self.outstanding.load(Ordering::SeqCst)
        }
        fn inbox_waiting(&self) -> bool {
            self.inbox.load(Ordering::SeqCst)
        }
        fn set_main_busy(&self, _: bool) {}
        fn cancel_all(&self) {
            self.cancelled.fetch_add(1, Ordering::SeqCst);
        }
        fn close(&self) {
            self.closed.store(true, Ordering::SeqCst);
        }
        fn set_model(&self, _: &TurnModel) {
            self.provider_switches.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Harness {
        session: Session,
        workers: Arc<FakeWorkers>,
        /// The fake clock.
        now: Instant,
        out: Vec<Action>,
    }

    fn prompt(text: &str) -> UserPrompt {
        UserPrompt {
            text: text.to_owned(),
            images: Vec::new(),
            trace_parent: None,
            typed: true,
            custom: None,
        }
    }

    fn id(n: i64) -> RequestId {
        RequestId(json!(n))
    }

    impl Harness {
        fn new() -> Harness {
            Harness::with_agent(Agent::without_model())
        }

        fn with_agent(agent: Agent) -> Harness {
            let ctx = Arc::new(AgentCtx::standalone(Arc::new(agent)));
            let workers = Arc::new(FakeWorkers::default());
            let session = Session::new(
                "sid".to_owned(),
                1,
                ctx,
                Box::new(workers.clone()),
                Arc::new(ClientHost::new(
                    "sid".to_owned(),
                    None,
                    Default::default(),
                    Mode::FullAccess,
                )),
                Vec::new(),
                Timing::default(),
            );
            Harness {
                session,
                workers,
                now: Instant::now(),
                out: Vec::new(),
            }
        }

        fn advance_clock(&mut self, by: Duration) {
            self.now += by;
        }

        fn prompt(&mut self, n: i64, text: &str) {
            self.session
                .prompt(id(n), prompt(text), self.now, &mut self.out);
        }

        fn fire_timers(&mut self) {
            if self.session.next_deadline().is_some_and(|d| d <= self.now) {
                self.session.on_timer(self.now, &mut self.out);
            }
        }

        fn turn(&mut self, turn: u64, kind: TurnMsgKind) {
            self.session
                .on_turn(TurnMsg { turn, kind }, self.now, &mut self.out);
        }

        /// The actions so far, as short strings, and forget them.
        fn take(&mut self) -> Vec<String> {
            self.out
                .drain(..)
                .map(|a| match a {
                    Action::Respond(id, Ok(v)) => format!("respond {} {v}", id.0),
                    Action::Respond(id, Err(e)) => format!("error {} {}", id.0, e.message),
                    Action::Notify(v) => {
                        let u = &v["params"]["update"];
                        let m = &u["_meta"][meta::NAMESPACE];
                        format!(
                            "update {} {} turn={} seq={}",
                            u["sessionUpdate"].as_str().unwrap_or("?"),
                            m["phase"].as_str().unwrap_or("-"),
                            m["promptTurnId"],
                            m["eventSequence"]
                        )
                    }
                    Action::Chunk { delta, env, .. } => {
                        format!("chunk {delta} seq={}", env.event_sequence)
                    }
                    Action::StartTurn(TurnStart { input, .. }) => match input {
                        TurnInput::Prompt(p) => format!("start {}", p.text),
                        TurnInput::Inbox => "start inbox".to_owned(),
                        TurnInput::Local(l) => format!("start local {l:?}"),
                    },
                    Action::Closed => "closed".to_owned(),
                    Action::DeleteStored(id) => format!("delete {}", id.0),
                    Action::SaveHeartbeats(_) => "save heartbeats".to_owned(),
                })
                .collect()
        }

        /// Prompt 1 ends while a child still runs; prompt 2 ("next") is queued behind turn 1's
        /// terminal update.
        fn queue_behind_a_running_child(&mut self) {
            self.prompt(1, "spawn");
            self.take();
            let t = self.running();
            self.workers.outstanding.store(1, Ordering::SeqCst);
            self.turn(t, done());
            let tail = self.take();
            // A child still runs: no terminal update yet, the response goes first.
            assert_eq!(tail.len(), 3, "boundary, completion, response: {tail:?}");
            assert!(tail[2].starts_with("respond 1"), "{tail:?}");
            self.prompt(2, "next");
            assert!(self.take().is_empty(), "prompt 2 waits");
        }

        /// The routing key of the running turn.
        fn running(&self) -> u64 {
            self.session.active.as_ref().expect("a turn runs").turn
        }

        fn abort_of_running(&self) -> AbortFlag {
            self.session
                .active
                .as_ref()
                .expect("a turn runs")
                .abort
                .clone()
        }
    }

    fn done() -> TurnMsgKind {
        TurnMsgKind::Finished(TurnOutcome::Completed(StopReason::EndTurn))
    }

    #[test]
    fn a_prompt_runs_streams_and_ends_with_boundary_response_and_terminal() {
        let mut h = Harness::new();
        h.prompt(1, "hello there");
        assert_eq!(
            h.take(),
            [
                "start hello there",
                "update session_info_update event turn=1 seq=1"
            ]
        );
        let t = h.running();
        h.turn(
            t,
            TurnMsgKind::event(AgentEvent::MessageDelta {
                assistant: true,
                kind: DeltaKind::Text,
                delta: "Hi".into(),
            }),
        );
        // Empty deltas write nothing and use no sequence number.
        h.turn(
            t,
            TurnMsgKind::event(AgentEvent::MessageDelta {
                assistant: true,
                kind: DeltaKind::Text,
                delta: String::new(),
            }),
        );
        h.turn(t, done());
        // Nothing outstanding: the terminal update goes just before the response
        // (docs/harnesses.md, verifiers reads the updates it has when the response arrives).
        assert_eq!(
            h.take(),
            [
                "chunk Hi seq=2",
                "update session_info_update responseBoundary turn=1 seq=3",
                "update session_info_update event turn=1 seq=4",
                "update session_info_update terminalQuiescence turn=1 seq=5",
                r#"respond 1 {"stopReason":"end_turn"}"#,
            ]
        );
        // A stale message of the finished turn is dropped.
        h.turn(t, done());
        assert!(h.take().is_empty());
    }

    /// The reasoning level of each turn started so far.
    fn started_levels(out: &[Action]) -> Vec<Thinking> {
        out.iter()
            .filter_map(|a| match a {
                Action::StartTurn(start) => Some(start.model.thinking),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_model_switch_applies_from_the_next_turn_and_reaches_the_family() {
        let mut h = Harness::new();
        h.prompt(1, "one");
        assert_eq!(started_levels(&h.out), [Thinking::Off]);
        h.take();
        // Mid-turn: the running turn keeps what it started with.
        let mut model = h.session.model().clone();
        model.thinking = Thinking::High;
        h.session.set_model(model);
        assert_eq!(h.workers.provider_switches.load(Ordering::SeqCst), 1);
        assert_eq!(h.session.model().thinking, Thinking::High);
        let t = h.running();
        h.turn(t, done());
        h.take();
        h.prompt(2, "two");
        assert_eq!(started_levels(&h.out), [Thinking::High]);
    }

    /// The `_meta[ns]` of every update queued so far (and forget the actions).
    fn metas(out: &mut Vec<Action>) -> Vec<Value> {
        out.drain(..)
            .filter_map(|a| match a {
                Action::Notify(v) => Some(v["params"]["update"]["_meta"][meta::NAMESPACE].clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn completion_and_terminal_carry_the_autonomous_state_and_the_response_its_usage() {
        let mut h = Harness::new();
        let config = autonomy::Config {
            enabled: true,
            ..autonomy::Config::default()
        };
        let shared = autonomy::Unattended::shared(config, h.now);
        h.session.set_unattended(shared.clone());
        h.prompt(1, "go");
        let starts: Vec<bool> = h
            .out
            .iter()
            .filter_map(|a| match a {
                Action::StartTurn(s) => Some(s.unattended.is_some()),
                _ => None,
            })
            .collect();
        assert_eq!(starts, [true], "a prompt turn carries the state");
        h.out.clear();
        {
            // What the worker leaves behind: one continuation, two calls, their usage.
            let mut state = autonomy::lock(&shared);
            state.counters.continuations_used = 1;
            state.counters.turns_used = 2;
            state.prompt_usage = Some(crate::provider::Usage {
                input: 7,
                output: 3,
                cache_read: 0,
                cache_write: 0,
            });
        }
        let t = h.running();
        h.turn(t, done());
        let response = h.out.iter().find_map(|a| match a {
            Action::Respond(_, Ok(v)) => Some(v.clone()),
            _ => None,
        });
        assert_eq!(
            response,
            Some(
                json!({"stopReason":"end_turn","usage":{"inputTokens":7,"outputTokens":3,"totalTokens":10}})
            )
        );
        let metas = metas(&mut h.out);
        let want = json!({"enabled":true,"continuationsUsed":1,"turnsUsed":2,"tokensUsed":0});
        let with_quiescence: Vec<&Value> = metas
            .iter()
            .filter(|m| m.get("quiescence").is_some())
            .collect();
        assert_eq!(
            with_quiescence.len(),
            2,
            "completion and terminal: {metas:?}"
        );
        for m in with_quiescence {
            assert_eq!(m["autonomous"], want);
            assert_eq!(m["quiescence"]["remainingAutonomousContinuations"], 2);
        }
        // The boundary carries none.
        assert!(metas
            .iter()
            .any(|m| m["phase"] == "responseBoundary" && m.get("autonomous").is_none()));
    }

    #[test]
    fn a_local_answer_runs_as_a_prompt_turn_and_commands_are_announced_at_turn_zero() {
        let mut h = Harness::new();
        h.session.announce(
            json!({"sessionUpdate":"available_commands_update","availableCommands":[]}),
            &mut h.out,
        );
        assert_eq!(
            h.take(),
            ["update available_commands_update event turn=0 seq=1"]
        );
        h.session.prompt_input(
            id(1),
            TurnInput::Local(crate::agent::turn::Local::Reply("hi".into())),
            h.now,
            &mut h.out,
        );
        assert_eq!(h.take(), [r#"start local Reply("hi")"#]);
        // Refused like any prompt while it runs.
        assert_eq!(h.session.refusal().as_deref(), Some(PROMPT_RUNNING));
    }

    #[test]
    fn a_switch_by_other_means_tells_the_client_with_config_option_update() {
        let mut h = Harness::new();
        h.prompt(1, "one");
        h.take();
        let mut model = h.session.model().clone();
        model.thinking = Thinking::High;
        h.session.switch_model(model, &mut h.out);
        assert_eq!(h.workers.provider_switches.load(Ordering::SeqCst), 1);
        let Some(Action::Notify(frame)) = h.out.first() else {
            panic!("no update")
        };
        let update = &frame["params"]["update"];
        assert_eq!(update["configOptions"], h.session.config_options());
        assert_eq!(update["configOptions"][0]["id"], "mode");
        // Attributed to the running turn, in its sequence.
        assert_eq!(h.take(), ["update config_option_update event turn=1 seq=2"]);
        // set_model (the path of session/set_config_option, whose answer carries the list)
        // sends nothing.
        h.session.set_model(h.session.model().clone());
        assert!(h.take().is_empty());
    }

    /// Settings `followUpMode`: one-at-a-time runs each due follow-up as its own turn; `all`
    /// runs the first with the others in its inbox (taken by its first model call).
    #[test]
    fn follow_up_mode_decides_how_many_follow_ups_one_turn_takes() {
        const NOW: u64 = 1_764_583_200_000;
        for all in [false, true] {
            let mut agent = Agent::without_model();
            agent.message_delivery.all_follow_ups = all;
            let mut h = Harness::with_agent(agent);
            for prompt in ["first", "second"] {
                let payload = json!({"instruction": prompt, "interval": "in 1m", "delivery_mode": "follow_up"});
                h.session
                    .jobs()
                    .host_request("rlm_heartbeat.create", &payload, NOW)
                    .unwrap();
            }
            h.prompt(1, "work");
            h.take();
            let t = h.running();
            h.session.on_heartbeat(NOW + 60_000, &mut h.out);
            h.turn(t, done());
            let started: Vec<String> = h
                .take()
                .into_iter()
                .filter(|a| a.starts_with("start"))
                .collect();
            assert_eq!(started, ["start first"], "all: {all}");
            let waiting: Vec<String> = h.session.ctx.inbox.drain();
            if all {
                assert_eq!(waiting, ["second"]);
                assert!(h.session.follow_ups.is_empty());
            } else {
                assert!(waiting.is_empty());
                assert_eq!(h.session.follow_ups.len(), 1);
            }
        }
    }

    #[test]
    fn a_steer_firing_joins_the_running_turn_and_a_follow_up_runs_after_it() {
        const NOW: u64 = 1_764_583_200_000;
        let mut h = Harness::new();
        for (prompt, mode) in [("steer me", "steer"), ("after", "follow_up")] {
            let payload =
                json!({"instruction": prompt, "interval": "in 1m", "delivery_mode": mode});
            h.session
                .jobs()
                .host_request("rlm_heartbeat.create", &payload, NOW)
                .unwrap();
        }
        h.prompt(1, "work");
        h.take();
        let t = h.running();
        h.session.on_heartbeat(NOW + 60_000, &mut h.out);
        // Nothing starts while the turn runs: the steer prompt waits in the inbox the turn
        // drains before its next model call, the follow-up in the session. Both one-shots
        // completed: the client hears of it (turn 0) and the jobs are saved.
        assert_eq!(
            h.take(),
            [
                "update session_info_update event turn=0 seq=2",
                "save heartbeats"
            ]
        );
        let steered = h.session.ctx.inbox.drain_messages();
        assert_eq!(steered.len(), 1);
        assert_eq!(steered[0].0, "steer me");
        let custom = steered[0].1.as_ref().expect("kept as a custom message");
        assert_eq!(custom.custom_type, "heartbeat_prompt");
        assert_eq!(custom.details.as_ref().unwrap()["status"], "completed");
        h.turn(t, done());
        let tail = h.take();
        assert_eq!(tail.len(), 4, "{tail:?}");
        assert!(tail[2].starts_with("respond 1"), "{tail:?}");
        assert_eq!(tail[3], "start after", "its own turn, after the answer");
        let follow_up = h.session.active.as_ref().unwrap();
        assert_eq!(follow_up.prompt_turn_id, 0);
        assert!(follow_up.request.is_none());
        // Prompt 1's terminal update waits for the follow-up, as for inbox work.
        let t = h.running();
        h.turn(t, done());
        assert_eq!(
            h.take(),
            ["update session_info_update terminalQuiescence turn=1 seq=5"]
        );
        // Fired while idle, a follow-up starts at once.
        let payload =
            json!({"instruction": "idle", "interval": "in 1m", "delivery_mode": "follow_up"});
        h.session
            .jobs()
            .host_request("rlm_heartbeat.create", &payload, NOW)
            .unwrap();
        h.session.on_heartbeat(NOW + 60_000, &mut h.out);
        assert_eq!(
            h.take(),
            [
                "update session_info_update event turn=0 seq=6",
                "save heartbeats",
                "start idle"
            ]
        );
    }

    #[test]
    fn a_second_prompt_while_one_runs_is_refused() {
        let mut h = Harness::new();
        h.prompt(1, "a");
        h.take();
        h.prompt(2, "b");
        assert_eq!(h.take(), [format!("error 2 {PROMPT_RUNNING}")]);
    }

    #[test]
    fn a_cancelled_turn_is_answered_at_the_grace_deadline_with_its_tools_closed() {
        let mut h = Harness::new();
        h.prompt(1, "work");
        h.take();
        let t = h.running();
        let abort = h.abort_of_running();
        h.turn(
            t,
            TurnMsgKind::event(AgentEvent::ToolStart {
                id: "call-1".into(),
                name: "bash".into(),
                args: json!({"command": "sleep 100"}),
                locations: Vec::new(),
                display: None,
            }),
        );
        h.take();
        h.session.cancel(h.now, &mut h.out);
        assert!(abort.is_aborted());
        assert_eq!(h.workers.cancelled.load(Ordering::SeqCst), 1);
        // Within the grace nothing is answered; a prompt meanwhile is refused.
        h.advance_clock(Duration::from_millis(100));
        h.fire_timers();
        h.prompt(2, "again");
        assert_eq!(h.take(), ["error 2 ACP session is cancelling: sid"]);
        h.advance_clock(Duration::from_millis(150));
        h.fire_timers();
        assert_eq!(
            h.take(),
            [
                "update tool_call_update event turn=1 seq=3",
                r#"respond 1 {"stopReason":"cancelled"}"#,
            ]
        );
        // The worker's late report is dropped; the next prompt runs.
        h.turn(t, done());
        assert!(h.take().is_empty());
        h.prompt(3, "next");
        assert_eq!(h.take(), ["start next"]);
    }

    #[test]
    fn a_cancelled_turn_that_reports_in_time_is_answered_at_once() {
        let mut h = Harness::new();
        h.prompt(1, "work");
        h.take();
        let t = h.running();
        h.session.cancel(h.now, &mut h.out);
        h.turn(t, TurnMsgKind::Finished(TurnOutcome::Cancelled));
        assert_eq!(h.take(), [r#"respond 1 {"stopReason":"cancelled"}"#]);
        assert_eq!(h.session.next_deadline(), None);
    }

    #[test]
    fn the_next_prompt_waits_for_quiescence_then_gives_up_at_the_deadline() {
        let mut h = Harness::new();
        h.queue_behind_a_running_child();
        h.advance_clock(Duration::from_millis(2999));
        h.fire_timers();
        assert!(h.take().is_empty());
        h.advance_clock(Duration::from_millis(1));
        h.fire_timers();
        assert_eq!(
            h.take(),
            [
                "update session_info_update terminalQuiescence turn=1 seq=4",
                "start next",
            ]
        );
    }

    #[test]
    fn a_queued_prompt_starts_once_the_family_settles_and_goes_before_the_inbox() {
        let mut h = Harness::new();
        h.queue_behind_a_running_child();
        // The child finishes and leaves a message for the main agent: the family is settled
        // only once the inbox is empty, so an unsolicited turn runs first...
        h.workers.outstanding.store(0, Ordering::SeqCst);
        h.workers.inbox.store(true, Ordering::SeqCst);
        h.session
            .on_family(FamilyMsg::MainInbox { generation: 1 }, &mut h.out);
        assert_eq!(h.take(), ["start inbox"]);
        let unsolicited = h.running();
        // ...then turn 1's terminal update, and the queued prompt.
        h.workers.inbox.store(false, Ordering::SeqCst);
        h.turn(unsolicited, done());
        assert_eq!(
            h.take(),
            [
                "update session_info_update terminalQuiescence turn=1 seq=4",
                "start next",
            ]
        );
        // News of another generation's family is dropped.
        h.session
            .on_family(FamilyMsg::MainInbox { generation: 7 }, &mut h.out);
        assert!(h.take().is_empty());
    }

    #[test]
    fn cancel_answers_a_queued_prompt_and_suppresses_the_terminal() {
        let mut h = Harness::new();
        h.queue_behind_a_running_child();
        h.session.cancel(h.now, &mut h.out);
        assert_eq!(h.take(), [r#"respond 2 {"stopReason":"cancelled"}"#]);
        h.workers.outstanding.store(0, Ordering::SeqCst);
        h.advance_clock(Duration::from_secs(10));
        h.fire_timers();
        h.session
            .on_family(FamilyMsg::MainInbox { generation: 1 }, &mut h.out);
        assert!(h.take().is_empty(), "no terminal update after a cancel");
    }

    #[test]
    fn close_mid_turn_answers_the_prompt_then_the_close_and_ends_the_family() {
        let mut h = Harness::new();
        h.prompt(1, "work");
        h.take();
        let t = h.running();
        h.session.close(id(9), h.now, &mut h.out);
        assert!(h.take().is_empty());
        h.prompt(2, "more");
        assert_eq!(h.take(), ["error 2 ACP session is closing: sid"]);
        h.session.close(id(10), h.now, &mut h.out);
        assert_eq!(h.take(), ["error 10 ACP session is already closing: sid"]);
        h.turn(t, TurnMsgKind::Finished(TurnOutcome::Cancelled));
        assert_eq!(
            h.take(),
            [
                r#"respond 1 {"stopReason":"cancelled"}"#,
                "respond 9 {}",
                "closed"
            ]
        );
        assert!(h.workers.closed.load(Ordering::SeqCst));
    }

    #[test]
    fn close_of_an_idle_session_is_answered_at_once() {
        let mut h = Harness::new();
        h.session.close(id(3), h.now, &mut h.out);
        assert_eq!(h.take(), ["respond 3 {}", "closed"]);
    }

    #[test]
    fn a_failed_spawn_fails_the_prompt_and_the_next_one_is_turn_one() {
        let mut h = Harness::new();
        h.prompt(1, "a");
        h.take();
        let t = h.running();
        h.session.spawn_failed(t, "no threads", &mut h.out);
        assert_eq!(
            h.take(),
            [format!(
                "error 1 {TURN_FAILED}could not start the turn thread: no threads"
            )]
        );
        h.prompt(2, "b");
        h.take();
        assert_eq!(h.session.active.as_ref().unwrap().prompt_turn_id, 1);
    }

    #[test]
    fn cancel_request_cancels_only_its_own_prompt() {
        let mut h = Harness::new();
        h.prompt(1, "a");
        h.take();
        let abort = h.abort_of_running();
        h.session.cancel_request(&json!(5), h.now, &mut h.out);
        assert!(!abort.is_aborted());
        h.session.cancel_request(&json!(1), h.now, &mut h.out);
        assert!(abort.is_aborted());
    }
}
