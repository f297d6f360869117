//! The main loop: one closed `Event` enum, one `select!`, one `match`.
//!
//! This is the only code that sends to the client, and the only owner of session state. It
//! blocks only in its `select!`. Turn workers report back through `TurnMsg` and the subagent
//! family through `FamilyMsg`; their events are mapped to `session/update`s here, in order, with
//! the `_meta` envelope, so "every update of a turn is written before its response and none
//! after" holds by construction.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use serde_json::{json, Value};

use crate::abort::AbortFlag;
use crate::acp::{self, McpServer, UserPrompt};
use crate::events::{
    bash_tool_call_id, message_chunk_frame, to_session_updates, AgentEvent, DeltaKind, MappingState,
};
use crate::family::Attribution;
use crate::meta::{self, Envelope, Phase, Quiescence};
use crate::rpc::{self, Incoming, RequestId, RpcError};
use crate::stop_reason::acp_stop_reason;
use crate::subagents::{Family, FamilyMsg};
use crate::transport::{Backlog, Connection, Inbound};
use crate::turn::{
    spawn_turn, Agent, AgentCtx, Conversation, TurnInput, TurnMsg, TurnMsgKind, TurnOutcome,
};

pub const ONE_SESSION: &str =
    "prime-agent ACP mode hosts one session per connection; start another prime-agent process for a second session";
pub const PROMPT_RUNNING: &str = "A prompt turn is already running for this ACP session";
pub const TURN_FAILED: &str = "prime-agent turn failed: ";

/// How long a cancelled turn may take to report its last updates (killed children, the final
/// `failed` tool update) before the prompt is answered without them. Abort hooks make the
/// usual case well under a millisecond.
const CANCEL_GRACE: Duration = Duration::from_millis(250);

/// How long a new prompt waits for the previous turn's subagents to settle before the previous
/// turn's terminal update is published as it stands (the later upstream behaviour: bounded).
const QUIESCENCE_WAIT: Duration = Duration::from_secs(3);

/// Turn messages (mostly one streamed token each) queued for the loop at most.
const TURN_QUEUE: usize = 1024;

/// The result of a prompt that was cancelled.
fn cancelled() -> Value {
    json!({ "stopReason": acp_stop_reason(true, None).as_str() })
}

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Stdin closed: the client is gone.
    ClientClosed,
    /// SIGINT or SIGTERM.
    Signal,
}

enum Event {
    Client(Incoming),
    ClientClosed,
    Turn(TurnMsg),
    Family(FamilyMsg),
    Signal,
    /// A deadline passed: a cancelled turn's grace, or a queued prompt's quiescence wait.
    Timer,
}

struct Session {
    id: String,
    /// Routes family news: a closed session's late news is dropped.
    generation: u64,
    mapping: MappingState,
    /// Last `eventSequence` used; strictly increasing per session, starting at 1.
    sequence: u64,
    /// Last `promptTurnId` allocated (1, 2, 3, …).
    prompt_counter: u64,
    conversation: Arc<Mutex<Conversation>>,
    /// The main agent: its tools (and kernel) answer host requests through `family`.
    ctx: Arc<AgentCtx>,
    family: Arc<Family>,
    attribution: Attribution,
    active: Option<ActiveTurn>,
    /// A prompt that arrived while unsolicited work ran or the previous turn was settling.
    queued: Option<QueuedPrompt>,
    /// The last committed prompt turn, until its terminal-quiescence update is published.
    pending_terminal: Option<PendingTerminal>,
    /// A `session/close` waiting for the cancelled turn to settle.
    closing: Option<RequestId>,
    /// Validated at `session/new`; not yet offered to the kernel (there is no MCP client).
    #[allow(dead_code)] // Kept so the session owns what the client configured.
    mcp_servers: Vec<McpServer>,
}

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
    prompt: UserPrompt,
    /// When the wait for the previous turn's quiescence gives up.
    deadline: Instant,
}

struct PendingTerminal {
    prompt_turn_id: u64,
    ok: bool,
}

struct MainLoop {
    out: Sender<Vec<u8>>,
    /// Frame buffers back from the writer (see `Connection::recycled`).
    recycled: Receiver<Vec<u8>>,
    /// Counts what `out` holds; turn workers pause on it (see `transport::Backlog`).
    backlog: Backlog,
    agent: Arc<Agent>,
    session: Option<Session>,
    turn_tx: Sender<TurnMsg>,
    turn_rx: Receiver<TurnMsg>,
    family_tx: Sender<FamilyMsg>,
    family_rx: Receiver<FamilyMsg>,
    next_turn: u64,
    next_generation: u64,
    /// The newest turn worker; each new worker joins its predecessor.
    last_worker: Option<JoinHandle<()>>,
    version: String,
}

/// Runs until the client closes stdin or a signal arrives. Consumes the connection, so the
/// writer drains and exits once this returns.
pub fn run(conn: Connection, agent: Arc<Agent>, signals: Receiver<()>, version: &str) -> Exit {
    // Bounded: a turn that outpaces the loop (which logs and serialises every event) waits
    // for it instead of queueing without limit. The loop drains this channel in every state,
    // so a worker never waits long, and never on the client.
    let (turn_tx, turn_rx) = bounded(TURN_QUEUE);
    let (family_tx, family_rx) = unbounded();
    let mut ml = MainLoop {
        out: conn.sender,
        recycled: conn.recycled,
        backlog: conn.backlog,
        agent,
        session: None,
        turn_tx,
        turn_rx,
        family_tx,
        family_rx,
        next_turn: 0,
        next_generation: 0,
        last_worker: None,
        version: version.to_owned(),
    };
    let exit = loop {
        let timer = match ml.next_deadline() {
            Some(deadline) => crossbeam_channel::at(deadline),
            None => crossbeam_channel::never(),
        };
        let event = select! {
            recv(conn.receiver) -> msg => match msg {
                Ok(Inbound::Message(m)) => Event::Client(m),
                Ok(Inbound::Closed) | Err(_) => Event::ClientClosed,
            },
            recv(ml.turn_rx) -> msg => match msg {
                Ok(m) => Event::Turn(m),
                Err(_) => continue, // Unreachable: the loop holds a sender.
            },
            recv(ml.family_rx) -> msg => match msg {
                Ok(m) => Event::Family(m),
                Err(_) => continue, // Unreachable: the loop holds a sender.
            },
            recv(signals) -> _ => Event::Signal,
            recv(timer) -> _ => Event::Timer,
        };
        match event {
            Event::Client(msg) => ml.on_client(msg),
            Event::Turn(msg) => ml.on_turn(msg),
            Event::Family(msg) => ml.on_family(msg),
            Event::Timer => ml.on_timer(),
            Event::ClientClosed => {
                // Stdin is closed but stdout may still be read (a pipe-driven harness): answer
                // what is in flight, as for a signal.
                ml.cancel_session_work();
                ml.settle_blocking();
                break Exit::ClientClosed;
            }
            Event::Signal => {
                // The client may still be reading: answer the running prompt first.
                ml.cancel_session_work();
                ml.settle_blocking();
                break Exit::Signal;
            }
        }
    };
    ml.shutdown();
    exit
}

impl MainLoop {
    fn send(&self, frame: &Value) {
        self.send_bytes(serde_json::to_vec(frame).expect("a JSON value always serialises"));
    }

    fn send_bytes(&self, bytes: Vec<u8>) {
        if log::log_enabled!(log::Level::Debug) {
            log::debug!("> {}", String::from_utf8_lossy(&bytes));
        }
        self.backlog.add(bytes.len());
        // A closed writer means the client is gone; the reader will report it.
        let _ = self.out.send(bytes);
    }

    fn respond(&self, id: &RequestId, result: Result<Value, RpcError>) {
        match result {
            Ok(v) => self.send(&rpc::response_ok(id, v)),
            Err(e) => self.send(&rpc::response_err(id, &e)),
        }
    }

    /// Wraps `update` in the envelope and sends it as `session/update`.
    fn publish(
        &mut self,
        mut update: Value,
        prompt_turn_id: u64,
        phase: Phase,
        outcome_ok: Option<bool>,
    ) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        session.sequence += 1;
        let env = Envelope {
            prompt_turn_id,
            event_sequence: session.sequence,
            phase,
            outcome_ok,
        };
        meta::apply_envelope(&mut update, env);
        let frame = rpc::notification(
            acp::SESSION_UPDATE,
            json!({ "sessionId": session.id, "update": update }),
        );
        self.send(&frame);
    }

    /// `publish` for an assistant message delta, serialised without a `Value` tree (the
    /// streaming hot path; same bytes, see `events::message_chunk_frame`).
    fn publish_message_chunk(&mut self, kind: DeltaKind, delta: &str, prompt_turn_id: u64) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        let env = Envelope {
            prompt_turn_id,
            event_sequence: session.sequence + 1,
            phase: Phase::Event,
            outcome_ok: None,
        };
        let message = session.mapping.assistant_message();
        let buf = self.recycled.try_recv().unwrap_or_default();
        if let Some(frame) = message_chunk_frame(buf, &session.id, kind, delta, message, env) {
            session.sequence += 1;
            self.send_bytes(frame);
        }
    }

    fn on_client(&mut self, msg: Incoming) {
        match msg {
            Incoming::Request { id, method, params } => self.on_request(id, &method, params),
            Incoming::Notification { method, params } => self.on_notification(&method, &params),
            Incoming::Response { id } => log::debug!("ignoring a response to unknown request {id}"),
            Incoming::Invalid { id, error } => self.respond(&id, Err(error)),
        }
    }

    fn on_request(&mut self, id: RequestId, method: &str, params: Value) {
        let result = match method {
            acp::INITIALIZE => {
                acp::parse_initialize(&params).map(|()| meta::initialize_result(&self.version))
            }
            acp::SESSION_NEW => self.session_new(&params),
            acp::SESSION_PROMPT => match self.session_prompt(&id, &params) {
                // The response is sent when the turn finishes.
                Ok(()) => return,
                Err(e) => Err(e),
            },
            acp::SESSION_CLOSE => match self.session_close(&id, &params) {
                Ok(Some(result)) => Ok(result),
                // Answered when the cancelled turn settles.
                Ok(None) => return,
                Err(e) => Err(e),
            },
            acp::SESSION_CANCEL => {
                // A notification sent as a request: honour it and answer, so nothing hangs.
                self.session_cancel(&params);
                Ok(json!({}))
            }
            // Includes ACP methods this agent does not serve (§1.10): `authenticate`,
            // `session/load`, `session/set_mode`, …
            _ => Err(RpcError::method_not_found(method)),
        };
        self.respond(&id, result);
    }

    fn on_notification(&mut self, method: &str, params: &Value) {
        match method {
            acp::SESSION_CANCEL => self.session_cancel(params),
            acp::CANCEL_REQUEST => {
                let target = params.get("requestId").cloned().unwrap_or(Value::Null);
                let Some(session) = self.session.as_mut() else {
                    return;
                };
                let running = session
                    .active
                    .as_ref()
                    .and_then(|a| a.request.as_ref())
                    .is_some_and(|r| r.0 == target);
                if running {
                    self.cancel_session_work();
                } else if session
                    .queued
                    .as_ref()
                    .is_some_and(|q| q.request.0 == target)
                {
                    // Only that prompt: it never ran, so nothing else is disturbed.
                    if let Some(q) = session.queued.take() {
                        self.respond(&q.request, Ok(cancelled()));
                    }
                }
            }
            other => log::debug!("ignoring notification {other}"),
        }
    }

    fn session_new(&mut self, params: &Value) -> Result<Value, RpcError> {
        let p = acp::parse_new_session(params)?;
        if self.session.is_some() {
            return Err(RpcError::internal(ONE_SESSION));
        }
        let id = uuid::Uuid::new_v4().to_string();
        self.next_generation += 1;
        let family = Family::new(
            self.next_generation,
            self.agent.clone(),
            id.clone(),
            self.family_tx.clone(),
        );
        let ctx = Arc::new(family.main_ctx());
        self.session = Some(Session {
            id: id.clone(),
            generation: self.next_generation,
            mapping: MappingState::default(),
            sequence: 0,
            prompt_counter: 0,
            conversation: Arc::new(Mutex::new(Conversation::default())),
            ctx,
            family,
            attribution: Attribution::default(),
            active: None,
            queued: None,
            pending_terminal: None,
            closing: None,
            mcp_servers: p.mcp_servers,
        });
        let mut result = json!({ "sessionId": id });
        if !p.cwd.is_empty() && !acp::same_cwd(&p.cwd, &self.agent.cwd) {
            let actual = self.agent.cwd.display().to_string();
            result["_meta"] =
                meta::namespaced(json!({ "cwd": { "requested": p.cwd, "actual": actual } }));
        }
        Ok(result)
    }

    fn session_prompt(&mut self, id: &RequestId, params: &Value) -> Result<(), RpcError> {
        let (session_id, prompt) = acp::parse_prompt(params)?;
        let Some(session) = self.session.as_mut().filter(|s| s.id == session_id) else {
            return Err(RpcError::internal(format!(
                "Unknown ACP session: {session_id}"
            )));
        };
        if session.closing.is_some() {
            return Err(RpcError::internal(format!(
                "ACP session is closing: {session_id}"
            )));
        }
        if let Ok(provider) = &self.agent.provider {
            if !prompt.images.is_empty() && !provider.accepts_images() {
                return Err(RpcError::invalid_params(format!(
                    "the prompt has {} image(s), but the model {} does not accept images; send text only or choose a model with image input",
                    prompt.images.len(),
                    provider.label()
                )));
            }
        }
        match &session.active {
            Some(a) if a.cancel_deadline.is_some() => {
                return Err(RpcError::internal(format!(
                    "ACP session is cancelling: {session_id}"
                )))
            }
            Some(a) if a.request.is_some() => return Err(RpcError::internal(PROMPT_RUNNING)),
            _ => {}
        }
        if session.queued.is_some() {
            return Err(RpcError::internal(PROMPT_RUNNING));
        }
        // Behind unsolicited work or a settling previous turn, the prompt waits its turn
        // (bounded by QUIESCENCE_WAIT for the latter) instead of being refused.
        session.queued = Some(QueuedPrompt {
            request: id.clone(),
            prompt,
            deadline: Instant::now() + QUIESCENCE_WAIT,
        });
        self.advance();
        Ok(())
    }

    fn session_cancel(&mut self, params: &Value) {
        let Ok(session_id) = acp::parse_session_id(params, acp::SESSION_CANCEL) else {
            log::warn!("ignoring session/cancel without a sessionId");
            return;
        };
        // Never cancel another session's work; with nothing running it is a no-op, and
        // duplicates coalesce.
        if self.session.as_ref().is_some_and(|s| s.id == session_id) {
            self.cancel_session_work();
        }
    }

    /// Answers `{}` once the running turn (if any) has been cancelled and answered, so nothing
    /// of this session is written after the close response.
    fn session_close(&mut self, id: &RequestId, params: &Value) -> Result<Option<Value>, RpcError> {
        let session_id = acp::parse_session_id(params, acp::SESSION_CLOSE)?;
        let Some(session) = self.session.as_mut().filter(|s| s.id == session_id) else {
            return Err(RpcError::internal(format!(
                "Unknown ACP session: {session_id}"
            )));
        };
        if session.closing.is_some() {
            return Err(RpcError::internal(format!(
                "ACP session is already closing: {session_id}"
            )));
        }
        session.closing = Some(id.clone());
        self.cancel_session_work();
        if self.session.as_ref().is_some_and(|s| s.active.is_none()) {
            self.finish_close();
        }
        Ok(None)
    }

    fn finish_close(&mut self) {
        let Some(mut session) = self.session.take() else {
            return;
        };
        session.family.close();
        if let Some(close_id) = session.closing.take() {
            self.respond(&close_id, Ok(json!({})));
        }
    }

    /// `session/cancel` semantics (§1.6): abort the running turn (answered `cancelled` once it
    /// settles), cancel every subagent, drop queued agent messages, answer a queued prompt
    /// `cancelled`, and publish no terminal update for the interrupted turn.
    fn cancel_session_work(&mut self) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        session.family.cancel_all();
        session.pending_terminal = None;
        let queued = session.queued.take();
        if let Some(active) = session.active.as_mut() {
            if active.cancel_deadline.is_none() {
                active.cancel_deadline = Some(Instant::now() + CANCEL_GRACE);
                active.abort.abort();
            }
        }
        if let Some(q) = queued {
            self.respond(&q.request, Ok(cancelled()));
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let session = self.session.as_ref()?;
        let cancel = session.active.as_ref().and_then(|a| a.cancel_deadline);
        let queued = session
            .queued
            .as_ref()
            .filter(|_| session.pending_terminal.is_some())
            .map(|q| q.deadline);
        cancel.into_iter().chain(queued).min()
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        let Some(session) = self.session.as_mut() else {
            return;
        };
        if session
            .active
            .as_ref()
            .and_then(|a| a.cancel_deadline)
            .is_some_and(|d| d <= now)
        {
            self.settle_cancelled();
        }
        let Some(session) = self.session.as_mut() else {
            return;
        };
        let waited_out = session.queued.as_ref().is_some_and(|q| q.deadline <= now);
        if waited_out {
            if let Some(pending) = session.pending_terminal.take() {
                // The previous turn's subagents are still working: publish its terminal update
                // as it stands (outstandingSubagents > 0) rather than hold the prompt forever.
                self.publish_terminal(pending);
            }
        }
        self.advance();
    }

    /// Answers a cancelled turn: closes its open tool calls for the client, responds
    /// `cancelled`, and completes a pending `session/close`. Later messages of the turn are
    /// dropped by routing.
    fn settle_cancelled(&mut self) {
        let Some(active) = self.session.as_mut().and_then(|s| s.active.take()) else {
            return;
        };
        self.set_busy(false);
        for id in &active.open_tool_calls {
            let update = json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": id,
                "status": "failed",
                "content": [{"type": "content", "content": {"type": "text", "text": "Cancelled"}}],
            });
            self.publish(update, active.prompt_turn_id, Phase::Event, None);
        }
        if let Some(request) = &active.request {
            self.respond(request, Ok(cancelled()));
        }
        if self.session.as_ref().is_some_and(|s| s.closing.is_some()) {
            self.finish_close();
        } else {
            self.advance();
        }
    }

    /// On the way out: wait (bounded) for a cancelled turn to report, then answer it.
    fn settle_blocking(&mut self) {
        while let Some(deadline) = self
            .session
            .as_ref()
            .and_then(|s| s.active.as_ref())
            .and_then(|a| a.cancel_deadline)
        {
            match self.turn_rx.recv_deadline(deadline) {
                Ok(msg) => self.on_turn(msg),
                Err(_) => self.settle_cancelled(),
            }
        }
    }

    fn set_busy(&self, busy: bool) {
        if let Some(s) = &self.session {
            s.family.set_main_busy(busy);
        }
    }

    /// Moves the session forward when nothing runs: publish a settled turn's terminal update,
    /// run the main agent on messages waiting in its inbox, or start the queued prompt.
    fn advance(&mut self) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        if session.active.is_some() || session.closing.is_some() {
            return;
        }
        // Outstanding first: it takes the family lock, so a child that just finished has also
        // finished putting its completion notice in the inbox.
        let outstanding = session.family.outstanding();
        let inbox_waiting = !session.ctx.inbox.is_empty();
        let settled = outstanding == 0 && !inbox_waiting;
        if settled {
            if let Some(pending) = session.pending_terminal.take() {
                self.publish_terminal(pending);
            }
        }
        let Some(session) = self.session.as_mut() else {
            return;
        };
        // A waiting prompt goes first once the previous turn is settled (or its wait timed
        // out): its first model call takes the inbox along, so agent messages cannot starve it.
        if session.pending_terminal.is_none() {
            if let Some(q) = session.queued.take() {
                self.start_turn(Some(q.request), TurnInput::Prompt(q.prompt));
                return;
            }
        }
        if inbox_waiting {
            self.start_turn(None, TurnInput::Inbox);
        }
    }

    fn publish_terminal(&mut self, pending: PendingTerminal) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        let q = Quiescence {
            outstanding_subagents: session.family.outstanding(),
            remaining_autonomous_continuations: 0,
        };
        session.attribution.seal(pending.prompt_turn_id);
        self.publish(
            meta::quiescence_update(q),
            pending.prompt_turn_id,
            Phase::TerminalQuiescence,
            Some(pending.ok),
        );
    }

    /// Starts a turn of the main agent: a client prompt (`request` is its id) or an
    /// unsolicited turn over the inbox.
    fn start_turn(&mut self, request: Option<RequestId>, input: TurnInput) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        // The first prompt names the session, so editors can title the thread.
        let title = match (&input, session.prompt_counter) {
            (TurnInput::Prompt(p), 0) if request.is_some() => meta::session_title(&p.text),
            _ => None,
        };
        self.next_turn += 1;
        let turn = self.next_turn;
        let spawned = spawn_turn(
            turn,
            session.ctx.clone(),
            session.conversation.clone(),
            input,
            self.last_worker.take(),
            self.turn_tx.clone(),
            self.backlog.clone(),
        );
        let handle = match spawned {
            Ok(h) => h,
            Err(e) => {
                if let Some(request) = request {
                    let err = RpcError::internal(format!(
                        "{TURN_FAILED}could not start the turn thread: {e}"
                    ));
                    self.respond(&request, Err(err));
                }
                return;
            }
        };
        self.last_worker = Some(handle.thread);
        let prompt_turn_id = if request.is_some() {
            session.prompt_counter += 1;
            session.prompt_counter
        } else {
            0
        };
        if let Some(title) = title {
            self.publish(
                json!({ "sessionUpdate": "session_info_update", "title": title }),
                prompt_turn_id,
                Phase::Event,
                None,
            );
        }
        let Some(session) = self.session.as_mut() else {
            return;
        };
        session.active = Some(ActiveTurn {
            request,
            prompt_turn_id,
            turn,
            abort: handle.abort,
            cancel_deadline: None,
            open_tool_calls: Vec::new(),
        });
        session.family.set_main_busy(true);
    }

    fn on_family(&mut self, msg: FamilyMsg) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        match msg {
            FamilyMsg::Child {
                generation,
                snapshot,
                status,
            } if generation == session.generation => {
                let active_turn = session
                    .active
                    .as_ref()
                    .map(|a| a.prompt_turn_id)
                    .unwrap_or(0);
                let turn = session
                    .attribution
                    .turn_for_child(&snapshot.id, status, active_turn);
                let updates =
                    to_session_updates(&AgentEvent::ChildUpdate(snapshot), &mut session.mapping);
                for update in updates {
                    self.publish(update, turn, Phase::Event, None);
                }
            }
            FamilyMsg::MainInbox { generation } if generation == session.generation => {}
            FamilyMsg::SentByMain {
                generation,
                target,
                delivery_status,
            } if generation == session.generation => {
                // Attributed to the cell that sent it when one is running.
                let (turn, tool_call_id) = match &session.active {
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
                let updates = to_session_updates(&event, &mut session.mapping);
                for update in updates {
                    self.publish(update, turn, Phase::Event, None);
                }
            }
            _ => return, // News from a closed session's family.
        }
        self.advance();
    }

    fn on_turn(&mut self, msg: TurnMsg) {
        // `select!` picks among ready channels at random: family news the turn caused (a
        // child admitted, a message sent from a cell) is handled before the end of that tool
        // call or turn, so it is attributed to them.
        if matches!(
            msg.kind,
            TurnMsgKind::Finished(_) | TurnMsgKind::Event(AgentEvent::ToolEnd { .. })
        ) {
            while let Ok(news) = self.family_rx.try_recv() {
                self.on_family(news);
            }
        }
        let Some(active) = self.session.as_ref().and_then(|s| s.active.as_ref()) else {
            return; // A turn of a closed session, or one already answered: dropped.
        };
        if active.turn != msg.turn {
            return;
        }
        let prompt_turn_id = active.prompt_turn_id;
        let active_cancelled = active.cancel_deadline.is_some();
        match msg.kind {
            TurnMsgKind::Event(AgentEvent::MessageDelta {
                assistant: true,
                kind,
                delta,
            }) => self.publish_message_chunk(kind, &delta, prompt_turn_id),
            TurnMsgKind::Event(event) => {
                let session = self.session.as_mut().expect("checked above");
                let open = &mut session
                    .active
                    .as_mut()
                    .expect("checked above")
                    .open_tool_calls;
                match &event {
                    AgentEvent::ToolStart { id, .. } => open.push(id.clone()),
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
                let updates = to_session_updates(&event, &mut session.mapping);
                for update in updates {
                    self.publish(update, prompt_turn_id, Phase::Event, None);
                }
            }
            // A turn cancelled before its response boundary is `cancelled`, whatever it says.
            TurnMsgKind::Finished(_) if active_cancelled => self.settle_cancelled(),
            TurnMsgKind::Finished(outcome) => self.finish_turn(outcome),
        }
    }

    /// Writes the per-turn tail of §1.14 and answers the prompt; the terminal update follows
    /// once the turn's subagents have settled (`advance`).
    fn finish_turn(&mut self, outcome: TurnOutcome) {
        let Some(active) = self.session.as_mut().and_then(|s| s.active.take()) else {
            return;
        };
        self.set_busy(false);
        let Some(request) = active.request else {
            // An unsolicited turn belongs to the lifecycle of the last prompt turn: a failure
            // there makes that turn's terminal outcome "error".
            if !matches!(outcome, TurnOutcome::Completed(_)) {
                log::warn!("an unsolicited turn ended with {outcome:?}");
                if let Some(p) = self
                    .session
                    .as_mut()
                    .and_then(|s| s.pending_terminal.as_mut())
                {
                    p.ok = false;
                }
            }
            self.advance();
            return;
        };
        let id = active.prompt_turn_id;
        let (result, ok) = match outcome {
            TurnOutcome::Cancelled => {
                self.respond(&request, Ok(cancelled()));
                self.advance();
                return;
            }
            TurnOutcome::Panicked(why) => {
                log::error!("turn {} panicked: {why}", active.turn);
                self.publish(
                    meta::response_boundary(false),
                    id,
                    Phase::ResponseBoundary,
                    Some(false),
                );
                let err = RpcError::internal(format!("{TURN_FAILED}internal error: {why}"));
                self.respond(&request, Err(err));
                self.advance();
                return;
            }
            TurnOutcome::Completed(stop) => (Ok(json!({ "stopReason": stop.as_str() })), true),
            TurnOutcome::Failed(why) => (
                Err(RpcError::internal(format!("{TURN_FAILED}{why}"))),
                false,
            ),
        };
        let outstanding = self
            .session
            .as_ref()
            .map(|s| s.family.outstanding())
            .unwrap_or(0);
        let quiescence = Quiescence {
            outstanding_subagents: outstanding,
            remaining_autonomous_continuations: 0,
        };
        self.publish(
            meta::response_boundary(true),
            id,
            Phase::ResponseBoundary,
            Some(ok),
        );
        self.publish(meta::quiescence_update(quiescence), id, Phase::Event, None);
        self.respond(&request, result);
        if let Some(session) = self.session.as_mut() {
            session.pending_terminal = Some(PendingTerminal {
                prompt_turn_id: id,
                ok,
            });
        }
        self.advance();
    }

    /// Aborts any running turn and gives its worker a short grace period to stop (its children
    /// are killed by abort hooks at once). A worker stuck past that is left to the process exit.
    fn shutdown(&mut self) {
        if let Some(mut session) = self.session.take() {
            if let Some(active) = session.active.take() {
                active.abort.abort();
            }
            session.family.close();
        }
        if let Some(worker) = self.last_worker.take() {
            crate::subagents::join_by(worker, Instant::now() + Duration::from_millis(500));
        }
    }
}
