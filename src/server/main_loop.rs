//! The main loop: one closed `Event` enum, one `select!`, one `match`.
//!
//! This is the only code that sends to the client. It blocks only in its `select!`. Turn
//! workers report back through `TurnMsg` and the subagent family through `FamilyMsg`; the
//! session state machine (`session::Session`) turns each of them, and each client message
//! (`handlers`), into `Action`s that only this loop carries out, in order, so "every update of
//! a turn is written before its response and none after" holds by construction.

// The main loop does no IO (clippy.toml lists what that excludes; `make io-ban` checks it).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use serde_json::Value;

use crate::agent::subagents::FamilyMsg;
use crate::agent::turn::{spawn_turn, Agent, AgentEvent, TurnMsg, TurnMsgKind};
use crate::base::reaper::{self, Reaped};
use crate::protocol::acp;
use crate::protocol::client_requests::{ClientLink, ClientMsg, Pending};
use crate::protocol::outbox::Outbox;
use crate::protocol::rpc::{self, Incoming, RequestId, RpcError};
use crate::protocol::transport::{Backlog, Connection, Inbound, TurnBacklogs};
use crate::server::client_host::ClientCaps;
use crate::server::events::message_chunk_frame;
use crate::server::session::{Action, Session, Timing};
use crate::server::store_worker::{self, StoreAnswer, StoreJob, StoreWorker};

/// Turn messages (mostly one streamed token each) queued for the loop at most.
const TURN_QUEUE: usize = 1024;

/// How long the loop waits for an aborted worker on the way out.
const EXIT_JOIN: Duration = Duration::from_millis(500);
/// At exit, how long the kernels may take to write a pending namespace snapshot (its own
/// limit is 5 s of pickling, plus the write).
const STATE_SAVE: Duration = Duration::from_secs(7);
/// At exit, how long the reaper may take over what the sessions left (kills, reaps, joins,
/// HTTP `DELETE`s, temp dirs); a child it does not reach dies with the agent anyway (Linux:
/// `spawn.rs`).
const EXIT_REAP: Duration = Duration::from_secs(3);
/// How long the exit waits for the kernel zygote to reap its spare and go.
const ZYGOTE_STOP: Duration = Duration::from_millis(500);
/// How long the reaper waits for a closed session's last turn worker.
const CLOSED_JOIN: Duration = Duration::from_millis(500);
/// At exit, how long a session still being read for `session/load` may take to open, so it
/// and the requests that waited for it are answered.
const EXIT_OPEN: Duration = Duration::from_secs(3);

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
    /// A worker asks the client something (or gives up asking), see `client_requests`.
    ClientCall(ClientMsg),
    /// A deadline passed: a cancelled turn's grace, or a queued prompt's quiescence wait.
    Timer,
    /// The `session-store` worker answered a `session/list`, or has read a session to open.
    Store(StoreAnswer),
}

/// A `session/load` / `session/resume` whose file the store worker is reading: what the loop
/// keeps to open it when the worker reports back (`MainLoop::finish_open`).
pub(crate) struct Opening {
    pub request: RequestId,
    pub session_id: String,
    pub params: acp::NewSessionParams,
    /// The session's agent (`None`: its params were refused, which the worker reports).
    pub agent: Option<Agent>,
    pub kind: OpenKind,
}

/// What an `Opening` opens.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OpenKind {
    /// `session/new`.
    New,
    /// `session/load`, `session/resume`.
    Stored,
    /// `session/fork`: answered like `session/new`.
    Fork,
}

/// The loop's state: the connection's sending side, the session, and the channels its
/// workers report on.
pub(crate) struct MainLoop {
    out: Outbox,
    /// Counts what `out` holds; turn workers pause on it (see `transport::Backlog`).
    backlog: Backlog,
    /// Each session's own backlog, when each has its own client (the remote transport).
    turn_backlogs: Option<TurnBacklogs>,
    /// `session/resume` of an open session re-attaches it (the remote transport).
    pub(crate) reattach: bool,
    pub(crate) agent: Arc<Agent>,
    /// The open sessions, oldest first (at most one without `--multi-session`). `Reaped`:
    /// a session leaving this list is torn down on the reaper thread, never here.
    pub(crate) sessions: Vec<Reaped<Session>>,
    pub(crate) timing: Timing,
    turn_tx: Sender<TurnMsg>,
    turn_rx: Receiver<TurnMsg>,
    pub(crate) family_tx: Sender<FamilyMsg>,
    family_rx: Receiver<FamilyMsg>,
    pub(crate) next_generation: u64,
    /// Workers' requests to the client come in here; `pending` holds those in flight.
    client_tx: Sender<ClientMsg>,
    client_rx: Receiver<ClientMsg>,
    pending: Pending,
    /// What the client said it serves in `initialize`.
    pub(crate) client_caps: ClientCaps,
    pub(crate) version: String,
    /// The action buffer, reused for every event (no allocation on the streaming path).
    actions: Vec<Action>,
    /// Reads the sessions directory for `session/list` and the files `session/load` opens
    /// (started by the first job).
    store_worker: Option<StoreWorker>,
    store_tx: Sender<StoreAnswer>,
    store_rx: Receiver<StoreAnswer>,
    /// The open the store worker is reading for (at most one: other opens wait behind it).
    pub(crate) opening: Option<Opening>,
    /// Client messages that wait for that open (`waits`), in arrival order.
    deferred: VecDeque<Incoming>,
    /// Frames held back until the store worker has written what they acknowledge.
    hold: std::cell::RefCell<Hold>,
}

/// A schedule change is written by the store worker, and the client must not hear it
/// acknowledged before it is on disk (a `kill -9` right after the answer must find it). So
/// from the write's hand-over until the worker reports it done (`StoreAnswer::Saved`), every
/// frame for the client is queued here, in order, and then handed to the writer at once. Rare
/// (a `/heartbeat` command, a firing) and short (one small file).
#[derive(Default)]
struct Hold {
    /// The last write handed over (0: none yet).
    last: u64,
    /// The last write the worker has reported done.
    done: u64,
    /// The held frames, each followed by a newline.
    frames: Vec<u8>,
}

/// Whether a client message waits while a session is being opened: every request that opens
/// a session (so opens happen one at a time, in order), and every request or notification that
/// names a session not open now (it may be the one being opened: a prompt, a close, a cancel
/// for it run once it is open, or get their usual answer if it never opens). What names an
/// open session, or none, runs at once, so a load never holds another session's cancel.
pub(crate) fn waits(msg: &Incoming, is_open: impl Fn(&str) -> bool) -> bool {
    let (method, params) = match msg {
        Incoming::Request { method, params, .. } => (method.as_str(), params),
        Incoming::Notification { method, params } => (method.as_str(), params),
        Incoming::Response { .. } | Incoming::Invalid { .. } => return false,
    };
    let opens = matches!(msg, Incoming::Request { .. })
        && [
            acp::SESSION_NEW,
            acp::SESSION_LOAD,
            acp::SESSION_RESUME,
            acp::SESSION_FORK,
        ]
        .contains(&method);
    let names_closed = params
        .get("sessionId")
        .and_then(Value::as_str)
        .is_some_and(|id| !is_open(id));
    opens || names_closed
}

/// Runs until the client closes stdin or a signal arrives. Consumes the connection, so the
/// writer drains and exits once this returns.
pub fn run(conn: Connection, agent: Arc<Agent>, signals: Receiver<()>, version: &str) -> Exit {
    // Bounded: a turn that outpaces the loop (which logs and serialises every event) waits
    // for it instead of queueing without limit. The loop drains this channel in every state,
    // so a worker never waits long, and never on the client.
    reaper::start();
    let (turn_tx, turn_rx) = bounded(TURN_QUEUE);
    let (family_tx, family_rx) = unbounded();
    // Unbounded: a worker sends at most one request at a time and waits for it.
    let (client_tx, client_rx) = unbounded();
    let (store_tx, store_rx) = unbounded();
    let mut ml = MainLoop {
        out: conn.outbox,
        backlog: conn.backlog,
        turn_backlogs: conn.turn_backlogs,
        reattach: conn.reattach,
        agent,
        sessions: Vec::new(),
        timing: Timing::from_env(),
        turn_tx,
        turn_rx,
        family_tx,
        family_rx,
        next_generation: 0,
        client_tx,
        client_rx,
        pending: Pending::default(),
        client_caps: ClientCaps::default(),
        version: version.to_owned(),
        actions: Vec::new(),
        store_worker: None,
        store_tx,
        store_rx,
        opening: None,
        deferred: VecDeque::new(),
        hold: Default::default(),
    };
    let exit = loop {
        let heartbeat = ml.heartbeat_deadline();
        let timer = match ml
            .sessions
            .iter()
            .filter_map(|s| s.next_deadline())
            .chain(heartbeat)
            .min()
        {
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
            recv(ml.client_rx) -> msg => match msg {
                Ok(m) => Event::ClientCall(m),
                Err(_) => continue, // Unreachable: the loop holds a sender.
            },
            recv(ml.store_rx) -> msg => match msg {
                Ok(m) => Event::Store(m),
                Err(_) => continue, // Unreachable: the loop holds a sender.
            },
            recv(signals) -> _ => Event::Signal,
            recv(timer) -> _ => Event::Timer,
        };
        match event {
            Event::Client(msg) => ml.on_client(msg),
            Event::Turn(msg) => ml.on_turn(msg),
            Event::Family(msg) => ml.on_family(msg),
            Event::Timer => ml.on_timers(Instant::now()),
            Event::ClientCall(msg) => ml.on_client_call(msg),
            Event::Store(answer) => ml.on_store(answer),
            Event::ClientClosed => {
                // Nobody will answer: every waiting worker gets `Gone` at once.
                ml.pending.fail_all();
                // Stdin is closed but stdout may still be read (a pipe-driven harness): answer
                // what is in flight, as for a signal.
                ml.finish_opens_blocking();
                // Cancelled as by a close, each with its due refine drained (bounded).
                ml.for_each_session(|s, now, out| s.exit(now, out));
                ml.settle_blocking();
                break Exit::ClientClosed;
            }
            Event::Signal => {
                // The client may still be reading: answer the running prompt first.
                ml.answer_in_flight();
                break Exit::Signal;
            }
        }
    };
    ml.shutdown();
    exit
}

impl MainLoop {
    fn send(&self, frame: &Value) {
        self.send_with(|buf| serde_json::to_writer(buf, frame).is_ok());
    }

    /// Queues the frame `write` appends to the outbox's buffer (see `outbox`: streamed deltas
    /// then cost no allocation here and no free on the writer). A gone writer means the client
    /// is gone; the reader reports it.
    fn send_with(&self, write: impl FnOnce(&mut Vec<u8>) -> bool) {
        let mut hold = self.hold.borrow_mut();
        if hold.last > hold.done {
            let start = hold.frames.len();
            if !write(&mut hold.frames) {
                hold.frames.truncate(start);
                return;
            }
            hold.frames.push(b'\n');
            self.backlog.add(hold.frames.len() - start);
            if log::log_enabled!(log::Level::Debug) {
                log::debug!(
                    "> (held) {}",
                    String::from_utf8_lossy(&hold.frames[start..])
                );
            }
            return;
        }
        drop(hold);
        self.out.push(|buf| {
            let start = buf.len();
            if !write(buf) {
                return false;
            }
            // Counted while the outbox is locked, so before the writer can take the frame and
            // count it written: the other order lets the count dip below zero, and a turn
            // paused on the backlog then sleeps through its wake-up.
            self.backlog.add(buf.len() - start + 1);
            if log::log_enabled!(log::Level::Debug) {
                log::debug!("> {}", String::from_utf8_lossy(&buf[start..]));
            }
            true
        });
    }

    pub(crate) fn respond(&self, id: &RequestId, result: Result<Value, RpcError>) {
        match result {
            Ok(v) => self.send(&rpc::response_ok(id, v)),
            Err(e) => self.send(&rpc::response_err(id, &e)),
        }
    }

    /// The index of the session with this id.
    pub(crate) fn session_index(&self, id: &str) -> Option<usize> {
        self.sessions.iter().position(|s| s.id() == id)
    }

    /// Runs `f` on the session with this id (if any); see `with_session_at`.
    pub(crate) fn with_session(
        &mut self,
        id: &str,
        f: impl FnOnce(&mut Session, Instant, &mut Vec<Action>),
    ) {
        if let Some(i) = self.session_index(id) {
            self.with_session_at(i, f);
        }
    }

    /// Runs `f` on session `i` with the time and the action buffer, then carries out what it
    /// asked for.
    pub(crate) fn with_session_at(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Session, Instant, &mut Vec<Action>),
    ) {
        let mut actions = std::mem::take(&mut self.actions);
        f(&mut self.sessions[i], Instant::now(), &mut actions);
        self.apply(i, &mut actions);
        self.actions = actions;
    }

    /// Runs `f` on every session, oldest first (a session may close on the way).
    pub(crate) fn for_each_session(&mut self, f: impl Fn(&mut Session, Instant, &mut Vec<Action>)) {
        let ids: Vec<String> = self.sessions.iter().map(|s| s.id().to_owned()).collect();
        for id in ids {
            self.with_session(&id, &f);
        }
    }

    /// Fires the deadlines that have passed, session by session.
    /// When the next schedule of any session is due, as an `Instant` (the clock is read only
    /// while some session has one).
    fn heartbeat_deadline(&self) -> Option<Instant> {
        let due = self
            .sessions
            .iter()
            .filter_map(|s| s.heartbeat_due_ms())
            .min()?;
        Some(Instant::now() + crate::base::time::schedule_wait(due))
    }

    fn on_timers(&mut self, now: Instant) {
        let now_ms = crate::base::time::schedule_now_ms();
        let fired: Vec<String> = self
            .sessions
            .iter()
            .filter(|s| s.heartbeat_due_ms().is_some_and(|d| d <= now_ms))
            .map(|s| s.id().to_owned())
            .collect();
        for id in fired {
            self.with_session(&id, |s, _, out| s.on_heartbeat(now_ms, out));
        }
        let due: Vec<String> = self
            .sessions
            .iter()
            .filter(|s| s.next_deadline().is_some_and(|d| d <= now))
            .map(|s| s.id().to_owned())
            .collect();
        for id in due {
            self.with_session(&id, |s, _, out| s.on_timer(now, out));
        }
    }

    /// Carries out session `idx`'s actions, in order (a failed spawn adds the session's answer
    /// to the end of the same buffer); a closed session is dropped at the end.
    fn apply(&mut self, idx: usize, actions: &mut Vec<Action>) {
        let mut closed = false;
        let mut deleted = None;
        let mut i = 0;
        while i < actions.len() {
            let action = std::mem::replace(&mut actions[i], Action::Closed);
            i += 1;
            match action {
                Action::Respond(id, result) => self.respond(&id, result),
                Action::Notify(frame) => self.send(&frame),
                Action::Chunk {
                    kind,
                    delta,
                    message,
                    env,
                } => {
                    let id = self.sessions[idx].id();
                    // Never empty here: the session drops the deltas the hot path skips.
                    self.send_with(|buf| message_chunk_frame(buf, id, kind, &delta, message, env));
                    // Back to the turn threads for the next delta: no cross-thread free per
                    // token (provider/delta_pool.rs says why that matters).
                    crate::provider::delta_pool::give_back(delta);
                }
                Action::StartTurn(start) => {
                    let session = &mut self.sessions[idx];
                    let turn = start.turn;
                    let previous = session.last_worker.take();
                    let backlog = match &self.turn_backlogs {
                        Some(of) => of(session.id()),
                        None => self.backlog.clone(),
                    };
                    match spawn_turn(start, previous, self.turn_tx.clone(), backlog) {
                        Ok(thread) => session.last_worker = Some(thread),
                        Err(e) => session.spawn_failed(turn, &e.to_string(), actions),
                    }
                }
                Action::Closed => closed = true,
                // Answered by the teardown below, once the session's kernel can no longer
                // write into what is deleted.
                Action::DeleteStored(request) => deleted = Some(request),
                Action::SaveHeartbeats(jobs) => {
                    // Replaced atomically and durably on the store worker; the client's
                    // acknowledgement does not wait for the disk.
                    if self.agent.store.is_some() {
                        let session_id = self.sessions[idx].id().to_owned();
                        let barrier = {
                            let mut hold = self.hold.borrow_mut();
                            hold.last += 1;
                            hold.last
                        };
                        let job = StoreJob::WriteJobs {
                            session_id,
                            jobs,
                            barrier,
                        };
                        self.store_job(job);
                    }
                }
            }
        }
        actions.clear();
        if closed {
            self.tear_down(idx, deleted);
        }
    }

    /// A closed session goes to the reaper, which joins its last worker (aborted: it ends on
    /// its own) and drops it (family, MCP hub, kernel), so the close is answered without
    /// waiting. A kept session's kernel snapshot is flushed first. A deleted one's is not:
    /// its files and artifacts are removed only after the kernel is gone, so no snapshot
    /// brings them back, and the delete is answered then (through the store channel).
    fn tear_down(&mut self, idx: usize, deleted: Option<RequestId>) {
        let mut session = self.sessions.remove(idx);
        let release = session.release_file();
        let worker = session.last_worker.take();
        let deadline = Instant::now() + CLOSED_JOIN;
        let delete = deleted.map(|request| {
            let id = session.id().to_owned();
            (request, id, self.agent.store.clone(), self.store_tx.clone())
        });
        reaper::later(move || {
            if let Some(worker) = worker {
                reaper::join_or_leave(worker, deadline, "a closed session's turn worker");
            }
            if delete.is_none() {
                session.save_state(Instant::now() + STATE_SAVE);
            }
            drop(session);
            // A worker stuck past its grace may still hold the conversation: the claim goes
            // anyway, and its recorder writes nothing more.
            if let Some(release) = release {
                release.release();
            }
            if let Some((request, id, store, answers)) = delete {
                let result = store_worker::delete_torn_down(store.as_deref(), &id);
                let _ = answers.send(StoreAnswer::Done { request, result });
            }
        });
    }

    fn on_client(&mut self, msg: Incoming) {
        let busy = self.opening.is_some() || !self.deferred.is_empty();
        if busy && waits(&msg, |id| self.session_index(id).is_some()) {
            self.deferred.push_back(msg);
            return;
        }
        self.dispatch(msg);
    }

    /// Runs the messages that waited for an open, in order, until one starts another open.
    pub(crate) fn run_deferred(&mut self) {
        while self.opening.is_none() {
            let Some(msg) = self.deferred.pop_front() else {
                break;
            };
            self.dispatch(msg);
        }
    }

    fn dispatch(&mut self, msg: Incoming) {
        match msg {
            Incoming::Request { id, method, params } => self.on_request(id, &method, params),
            Incoming::Notification { method, params } => self.on_notification(&method, &params),
            Incoming::Response { id, result } => {
                if !self.pending.resolve(&id, result) {
                    log::debug!("ignoring a response to unknown request {id}");
                }
            }
            Incoming::Invalid { id, error } => self.respond(&id, Err(error)),
        }
    }

    /// On the way out: opens finish, turns are cancelled and answered (bounded waits).
    fn answer_in_flight(&mut self) {
        self.finish_opens_blocking();
        self.cancel_all_sessions();
        self.settle_blocking();
    }

    /// Cancels the work of every session (stdin closed, a signal).
    fn cancel_all_sessions(&mut self) {
        self.for_each_session(|s, now, out| s.cancel(now, out));
    }

    /// On the way out: wait (bounded) for cancelled turns to report, then answer them.
    fn settle_blocking(&mut self) {
        while let Some(deadline) = self
            .sessions
            .iter()
            .filter_map(|s| s.cancel_deadline())
            .min()
        {
            match self.turn_rx.recv_deadline(deadline) {
                Ok(msg) => self.on_turn(msg),
                Err(_) => self.on_timers(deadline),
            }
        }
    }

    /// Hands a job to the store worker (started now if this is the first). A worker that
    /// cannot start or is gone refuses the job: the loop never does the store's IO itself.
    pub(crate) fn store_job(&mut self, job: StoreJob) {
        if self.store_worker.is_none() {
            match StoreWorker::spawn(self.agent.store.clone(), self.store_tx.clone()) {
                Ok(w) => self.store_worker = Some(w),
                Err(e) => log::error!("cannot start the session-store thread: {e}"),
            }
        }
        let job = match &self.store_worker {
            Some(w) => match w.send(job) {
                Ok(()) => return,
                Err(job) => job,
            },
            None => job,
        };
        let answer = store_worker::refuse(job, "the session store thread is not running");
        self.on_store(answer);
    }

    /// The store worker's answer: a list page to send, or a session read to open.
    fn on_store(&mut self, answer: StoreAnswer) {
        match answer {
            StoreAnswer::Listed { request, result } | StoreAnswer::Done { request, result } => {
                self.respond(&request, result)
            }
            StoreAnswer::Saved { barrier } => self.release_hold(barrier),
            StoreAnswer::Opened { request, result } => self.finish_open(request, result),
        }
    }

    /// The store worker has written up to `barrier`: the frames held since then go out.
    fn release_hold(&self, barrier: u64) {
        let mut hold = self.hold.borrow_mut();
        hold.done = hold.done.max(barrier);
        if hold.done < hold.last || hold.frames.is_empty() {
            return;
        }
        let frames = std::mem::take(&mut hold.frames);
        // Counted in the backlog when held; the outbox adds the last newline back.
        self.out.push(|buf| {
            buf.extend_from_slice(&frames[..frames.len() - 1]);
            true
        });
    }

    /// On the way out: the frames held for a store write go out once it is done (or the
    /// bounded wait is over).
    fn release_hold_blocking(&mut self) {
        let deadline = Instant::now() + EXIT_OPEN;
        loop {
            let (last, done) = {
                let hold = self.hold.borrow();
                (hold.last, hold.done)
            };
            if done >= last {
                return;
            }
            match self.store_rx.recv_deadline(deadline) {
                Ok(answer) => self.on_store(answer),
                Err(_) => return self.release_hold(last),
            }
        }
    }

    /// On the way out: a session still being read is opened (waiting a bounded time) and
    /// what waited for it runs, so every request that came before the end is answered; one
    /// not read by then is refused.
    fn finish_opens_blocking(&mut self) {
        let deadline = Instant::now() + EXIT_OPEN;
        while self.opening.is_some() {
            match self.store_rx.recv_deadline(deadline) {
                Ok(answer) => self.on_store(answer),
                Err(_) => {
                    // Answered here, once: a late answer from the worker is never read.
                    if let Some(opening) = self.opening.take() {
                        let why = match opening.kind {
                            OpenKind::New => {
                                "prime-agent is exiting; the new session was not opened".to_owned()
                            }
                            OpenKind::Fork => format!(
                                "prime-agent is exiting; the fork of session {} was not opened",
                                opening.session_id
                            ),
                            OpenKind::Stored => format!(
                                "prime-agent is exiting; session {} was not opened",
                                opening.session_id
                            ),
                        };
                        self.respond(&opening.request, Err(RpcError::internal(why)));
                    }
                    self.run_deferred();
                }
            }
        }
    }

    /// A link for this connection's workers to reach the client through the loop.
    pub(crate) fn client_link(&self) -> ClientLink {
        ClientLink::new(self.client_tx.clone())
    }

    fn on_client_call(&mut self, msg: ClientMsg) {
        match msg {
            ClientMsg::Request {
                id,
                method,
                params,
                reply,
            } => {
                // The worker reported the tool call before asking about it: write the events
                // the turns have queued so far first, so the client knows the call it is asked
                // about. A turn's end waits until after the request (it came later).
                let mut finished = Vec::new();
                for _ in 0..self.turn_rx.len() {
                    match self.turn_rx.try_recv() {
                        Ok(m) if matches!(m.kind, TurnMsgKind::Finished(_)) => finished.push(m),
                        Ok(m) => self.on_turn(m),
                        Err(_) => break,
                    }
                }
                let frame = self.pending.register(id, method, params, reply);
                self.send(&frame);
                for m in finished {
                    self.on_turn(m);
                }
            }
            ClientMsg::Cancel { id } => {
                if let Some(frame) = self.pending.cancel(id) {
                    self.send(&frame);
                }
            }
        }
    }

    fn on_family(&mut self, msg: FamilyMsg) {
        let generation = msg.generation();
        // News from a closed session's family finds no session and is dropped.
        if let Some(i) = self
            .sessions
            .iter()
            .position(|s| s.generation() == generation)
        {
            self.with_session_at(i, |s, _, out| s.on_family(msg, out));
        }
    }

    fn on_turn(&mut self, msg: TurnMsg) {
        // `select!` picks among ready channels at random: family news the turn caused (a
        // child admitted, a message sent from a cell) is handled before the end of that tool
        // call or turn, so it is attributed to them.
        let ends_a_call = match &msg.kind {
            TurnMsgKind::Finished(_) => true,
            TurnMsgKind::Event(e) => matches!(**e, AgentEvent::ToolEnd { .. }),
            TurnMsgKind::Delta { .. } => false,
        };
        if ends_a_call {
            while let Ok(news) = self.family_rx.try_recv() {
                self.on_family(news);
            }
        }
        // An aborted wait's `$/cancel_request` (and a terminal released on the way out) go out
        // before the turn's answer.
        if matches!(msg.kind, TurnMsgKind::Finished(_)) {
            while let Ok(call) = self.client_rx.try_recv() {
                self.on_client_call(call);
            }
        }
        // A turn of a closed session, or one already answered, finds no session: dropped.
        if let Some(i) = self.sessions.iter().position(|s| s.runs_turn(msg.turn)) {
            self.with_session_at(i, |s, now, out| s.on_turn(msg, now, out));
        }
    }

    /// Aborts any running turn and gives its worker a short grace period to stop (its children
    /// are killed by abort hooks at once). A worker stuck past that is left to the process exit.
    fn shutdown(&mut self) {
        self.release_hold_blocking();
        let deadline = Instant::now() + EXIT_JOIN;
        if let Some(worker) = self.store_worker.take() {
            worker.stop(deadline);
        }
        let mut workers = Vec::new();
        let mut sessions: Vec<Reaped<Session>> = self.sessions.drain(..).collect();
        for session in &mut sessions {
            session.shut_down();
            workers.extend(session.last_worker.take());
        }
        for worker in workers {
            reaper::join_or_leave(worker, deadline, "a turn worker at exit");
        }
        for session in &mut sessions {
            session.flush_title();
        }
        // With the turns stopped, a kernel snapshot still waiting for its quiet moment is
        // written now (bounded by the snapshot's own time limit), so a cell that ran just
        // before the exit is not lost.
        let deadline = Instant::now() + STATE_SAVE;
        for session in &sessions {
            session.save_state(deadline);
        }
        // The sessions go to the reaper like closed ones; the process waits (bounded) for it
        // to kill, reap and clean up what they held.
        drop(sessions);
        if !reaper::drain(Instant::now() + EXIT_REAP) {
            log::warn!("teardown was still running at exit");
        }
        // The kernels are gone; the zygote and its spare kernel go now, reaped, not orphaned.
        crate::kernel::zygote::stop(ZYGOTE_STOP);
    }
}

#[cfg(test)]
mod tests {
    use crate::base::json::json;

    use super::*;

    #[test]
    fn while_a_session_opens_what_opens_or_names_a_session_not_open_waits() {
        let request = |method: &str, params: Value| Incoming::Request {
            id: RequestId::null(),
            method: method.to_owned(),
            params,
        };
        let notification = |method: &str, params: Value| Incoming::Notification {
            method: method.to_owned(),
            params,
        };
        let open = json!({"sessionId": "open"});
        let loading = json!({"sessionId": "loading"});
        // (message, waits) with session `open` open and `loading` not (yet).
        let cases = [
            (request(acp::SESSION_NEW, json!({"cwd": "/"})), true),
            (request(acp::SESSION_LOAD, loading.clone()), true),
            (request(acp::SESSION_RESUME, open.clone()), true),
            (request(acp::SESSION_FORK, open.clone()), true),
            (request(acp::SESSION_PROMPT, loading.clone()), true),
            (request(acp::SESSION_CLOSE, loading.clone()), true),
            (request(acp::SESSION_DELETE, loading.clone()), true),
            (notification(acp::SESSION_CANCEL, loading.clone()), true),
            (request(acp::SESSION_PROMPT, open.clone()), false),
            (request(acp::SESSION_CLOSE, open.clone()), false),
            (notification(acp::SESSION_CANCEL, open.clone()), false),
            (request(acp::SESSION_LIST, json!({})), false),
            (request(acp::INITIALIZE, json!({})), false),
            (request("no/such", json!({"sessionId": 7})), false),
            (
                notification(acp::CANCEL_REQUEST, json!({"requestId": 3})),
                false,
            ),
            (
                Incoming::Response {
                    id: RequestId::null(),
                    result: Ok(json!({})),
                },
                false,
            ),
            (
                Incoming::Invalid {
                    id: RequestId::null(),
                    error: RpcError::internal("bad"),
                },
                false,
            ),
        ];
        for (msg, want) in cases {
            assert_eq!(waits(&msg, |id| id == "open"), want, "{msg:?}");
        }
    }
}
