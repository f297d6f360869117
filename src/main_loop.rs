//! The main loop: one closed `Event` enum, one `select!`, one `match`.
//!
//! This is the only code that sends to the client, and the only owner of session state. It
//! blocks only in its `select!`. Turn workers report back through `TurnMsg`; their events are
//! mapped to `session/update`s here, in order, with the `_meta` envelope, so "every update of a
//! turn is written before its response and none after" holds by construction.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use serde_json::{json, Value};

use crate::abort::AbortFlag;
use crate::acp::{self, McpServer};
use crate::events::{
    bash_tool_call_id, message_chunk_frame, to_session_updates, AgentEvent, DeltaKind, MappingState,
};
use crate::meta::{self, Envelope, Phase, Quiescence};
use crate::rpc::{self, Incoming, RequestId, RpcError};
use crate::stop_reason::{acp_stop_reason, StopReason};
use crate::transport::{Connection, Inbound};
use crate::turn::{spawn_turn, Agent, Conversation, TurnMsg, TurnMsgKind, TurnOutcome};

pub const ONE_SESSION: &str =
    "prime-agent ACP mode hosts one session per connection; start another prime-agent process for a second session";
pub const PROMPT_RUNNING: &str = "A prompt turn is already running for this ACP session";
pub const TURN_FAILED: &str = "prime-agent turn failed: ";

/// ACP methods that exist in the protocol but that this agent does not serve (§1.10).
const UNSUPPORTED: &[&str] = &[
    "authenticate",
    "session/load",
    "session/resume",
    "session/list",
    "session/set_mode",
    "session/set_config_option",
    "session/set_model",
];

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
    Signal,
    /// A cancelled turn did not finish within `CANCEL_GRACE`.
    CancelDeadline,
}

struct Session {
    id: String,
    mapping: MappingState,
    /// Last `eventSequence` used; strictly increasing per session, starting at 1.
    sequence: u64,
    /// Last `promptTurnId` allocated (1, 2, 3, …).
    prompt_counter: u64,
    conversation: Arc<Mutex<Conversation>>,
    active: Option<ActiveTurn>,
    /// A `session/close` waiting for the cancelled turn to settle.
    closing: Option<RequestId>,
    /// Validated and kept for the kernel's `mcp` object.
    #[allow(dead_code)] // Read once the kernel lands (issue 4); validated today.
    mcp_servers: Vec<McpServer>,
}

struct ActiveTurn {
    request: RequestId,
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

/// How long a cancelled turn may take to report its last updates (killed children, the final
/// `failed` tool update) before the prompt is answered without them. Abort hooks make the
/// usual case well under a millisecond.
const CANCEL_GRACE: Duration = Duration::from_millis(250);

struct MainLoop {
    out: Sender<Vec<u8>>,
    agent: Arc<Agent>,
    session: Option<Session>,
    turn_tx: Sender<TurnMsg>,
    turn_rx: Receiver<TurnMsg>,
    next_turn: u64,
    /// The newest turn worker; each new worker joins its predecessor.
    last_worker: Option<JoinHandle<()>>,
    version: String,
}

/// Runs until the client closes stdin or a signal arrives. Consumes the connection, so the
/// writer drains and exits once this returns.
pub fn run(conn: Connection, agent: Arc<Agent>, signals: Receiver<()>, version: &str) -> Exit {
    let (turn_tx, turn_rx) = unbounded();
    let mut ml = MainLoop {
        out: conn.sender,
        agent,
        session: None,
        turn_tx,
        turn_rx,
        next_turn: 0,
        last_worker: None,
        version: version.to_owned(),
    };
    let exit = loop {
        let timer = match ml.cancel_deadline() {
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
            recv(signals) -> _ => Event::Signal,
            recv(timer) -> _ => Event::CancelDeadline,
        };
        match event {
            Event::Client(msg) => ml.on_client(msg),
            Event::Turn(msg) => ml.on_turn(msg),
            Event::CancelDeadline => ml.settle_cancelled(),
            Event::ClientClosed => break Exit::ClientClosed,
            Event::Signal => {
                // The client may still be reading: answer the running prompt first.
                ml.cancel_active();
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
        if let Some(frame) = message_chunk_frame(&session.id, kind, delta, env) {
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
            _ if UNSUPPORTED.contains(&method) => Err(RpcError::method_not_found(method)),
            _ => Err(RpcError::method_not_found(method)),
        };
        self.respond(&id, result);
    }

    fn on_notification(&mut self, method: &str, params: &Value) {
        match method {
            acp::SESSION_CANCEL => self.session_cancel(params),
            acp::CANCEL_REQUEST => {
                let target = params.get("requestId").cloned().unwrap_or(Value::Null);
                let matches = self
                    .session
                    .as_ref()
                    .and_then(|s| s.active.as_ref())
                    .is_some_and(|a| a.request.0 == target);
                if matches {
                    self.cancel_active();
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
        self.session = Some(Session {
            id: id.clone(),
            mapping: MappingState::default(),
            sequence: 0,
            prompt_counter: 0,
            conversation: Arc::new(Mutex::new(Conversation::default())),
            active: None,
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
        let session = match self.session.as_mut() {
            Some(s) if s.id == session_id => s,
            _ => {
                return Err(RpcError::internal(format!(
                    "Unknown ACP session: {session_id}"
                )))
            }
        };
        if session.closing.is_some() {
            return Err(RpcError::internal(format!(
                "ACP session is closing: {session_id}"
            )));
        }
        match &session.active {
            Some(a) if a.cancel_deadline.is_some() => {
                return Err(RpcError::internal(format!(
                    "ACP session is cancelling: {session_id}"
                )))
            }
            Some(_) => return Err(RpcError::internal(PROMPT_RUNNING)),
            None => {}
        }
        self.next_turn += 1;
        let turn = self.next_turn;
        let handle = spawn_turn(
            turn,
            self.agent.clone(),
            session.conversation.clone(),
            prompt,
            self.last_worker.take(),
            self.turn_tx.clone(),
        )
        .map_err(|e| {
            RpcError::internal(format!("{TURN_FAILED}could not start the turn thread: {e}"))
        })?;
        self.last_worker = Some(handle.thread);
        session.prompt_counter += 1;
        session.active = Some(ActiveTurn {
            request: id.clone(),
            prompt_turn_id: session.prompt_counter,
            turn,
            abort: handle.abort,
            cancel_deadline: None,
            open_tool_calls: Vec::new(),
        });
        Ok(())
    }

    fn session_cancel(&mut self, params: &Value) {
        let Ok(session_id) = acp::parse_session_id(params, acp::SESSION_CANCEL) else {
            log::warn!("ignoring session/cancel without a sessionId");
            return;
        };
        // Never cancel another session's turn; a cancel with nothing running is a no-op, and
        // duplicates coalesce because the first one already answered the prompt.
        if self.session.as_ref().is_some_and(|s| s.id == session_id) {
            self.cancel_active();
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
        if session.active.is_none() {
            self.session = None;
            return Ok(Some(json!({})));
        }
        session.closing = Some(id.clone());
        self.cancel_active();
        Ok(None)
    }

    /// Aborts the running turn. Its prompt is answered `cancelled` when the worker reports back
    /// (with every update it queued, including the final `failed` tool updates) or after
    /// `CANCEL_GRACE`; duplicate cancels coalesce.
    fn cancel_active(&mut self) {
        let Some(active) = self.session.as_mut().and_then(|s| s.active.as_mut()) else {
            return;
        };
        if active.cancel_deadline.is_none() {
            active.cancel_deadline = Some(Instant::now() + CANCEL_GRACE);
            active.abort.abort();
        }
    }

    fn cancel_deadline(&self) -> Option<Instant> {
        self.session
            .as_ref()
            .and_then(|s| s.active.as_ref())
            .and_then(|a| a.cancel_deadline)
    }

    /// Answers a cancelled turn: closes its open tool calls for the client, responds
    /// `cancelled`, and completes a pending `session/close`. Later messages of the turn are
    /// dropped by routing.
    fn settle_cancelled(&mut self) {
        let Some(active) = self.session.as_mut().and_then(|s| s.active.take()) else {
            return;
        };
        for id in &active.open_tool_calls {
            let update = json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": id,
                "status": "failed",
                "content": [{"type": "content", "content": {"type": "text", "text": "Cancelled"}}],
            });
            self.publish(update, active.prompt_turn_id, Phase::Event, None);
        }
        let result = json!({ "stopReason": acp_stop_reason(true, None).as_str() });
        self.respond(&active.request, Ok(result));
        if let Some(close_id) = self.session.as_mut().and_then(|s| s.closing.take()) {
            self.session = None;
            self.respond(&close_id, Ok(json!({})));
        }
    }

    /// On the way out: wait (bounded) for a cancelled turn to report, then answer it.
    fn settle_blocking(&mut self) {
        while let Some(deadline) = self.cancel_deadline() {
            match self.turn_rx.recv_deadline(deadline) {
                Ok(msg) => self.on_turn(msg),
                Err(_) => self.settle_cancelled(),
            }
        }
    }

    fn on_turn(&mut self, msg: TurnMsg) {
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

    /// Writes the per-turn tail of §1.14 and answers the prompt.
    fn finish_turn(&mut self, outcome: TurnOutcome) {
        let Some(active) = self.session.as_mut().and_then(|s| s.active.take()) else {
            return;
        };
        let id = active.prompt_turn_id;
        let quiescence = Quiescence::default();
        let (result, terminal_ok) = match outcome {
            TurnOutcome::Cancelled => {
                self.respond(
                    &active.request,
                    Ok(json!({ "stopReason": StopReason::Cancelled.as_str() })),
                );
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
                self.respond(&active.request, Err(err));
                return;
            }
            TurnOutcome::Completed(stop) => (Ok(json!({ "stopReason": stop.as_str() })), true),
            TurnOutcome::Failed(why) => (
                Err(RpcError::internal(format!("{TURN_FAILED}{why}"))),
                false,
            ),
        };
        self.publish(
            meta::response_boundary(true),
            id,
            Phase::ResponseBoundary,
            Some(terminal_ok),
        );
        self.publish(meta::quiescence_update(quiescence), id, Phase::Event, None);
        self.respond(&active.request, result);
        // No subagents can be outstanding yet, so the turn is quiescent at once.
        self.publish(
            meta::quiescence_update(quiescence),
            id,
            Phase::TerminalQuiescence,
            Some(terminal_ok),
        );
    }

    /// Aborts any running turn and gives its worker a short grace period to stop (its children
    /// are killed by abort hooks at once). A worker stuck past that is left to the process exit.
    fn shutdown(&mut self) {
        if let Some(active) = self.session.as_mut().and_then(|s| s.active.take()) {
            active.abort.abort();
        }
        if let Some(worker) = self.last_worker.take() {
            let deadline = Instant::now() + Duration::from_millis(500);
            while !worker.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if worker.is_finished() {
                let _ = worker.join();
            } else {
                log::warn!("a turn worker did not stop within 500 ms; exiting without it");
            }
        }
    }
}
