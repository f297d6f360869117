//! The hub between many remote connections and the one main loop.
//!
//! Inbound, every client message is tagged with its connection: a request's id is replaced by
//! a process-unique one (`acp-remote:<n>`) and the original is kept in `requests`, so the loop
//! sees one client with unique ids. Outbound, the `acp-router` thread reads the loop's frames
//! (the same outbox the stdio writer drains) and routes each: a response back to the connection
//! that asked, with its id restored; `session/update`s and the agent's requests by `sessionId`
//! to the connection the session is attached to (by `session/new`, `fork`, `load`, `resume`).
//!
//! Every stream is a bounded queue (`Stream`): frames of a session count against that session's
//! `Backlog`, on which its turn pauses, so a client that reads slowly slows only its own turns.
//! A connection whose queues make no progress for `Bounds::stall`, or hold more than
//! `Bounds::conn_buffer`, is disconnected; its sessions stay open, detached, and a connection
//! that resumes them gets them as they are (same MCP servers, same kernel); one nobody resumes
//! within `Bounds::session_idle` is closed through the loop (`session/close`), and stays
//! resumable from its file.

use std::collections::{HashMap, VecDeque};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::Value;

use crate::base::json::json;
use crate::protocol::acp;
use crate::protocol::rpc::{Incoming, RequestId, RpcError};
use crate::protocol::transport::{Backlog, Inbound};

/// The prefix of the ids the hub gives client requests on their way to the loop.
const PREFIX: &str = "acp-remote:";

/// The documented bounds of the remote transport (docs/remote.md).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// A connection whose queued frames see no write for this long is disconnected (a client
    /// that stopped reading).
    pub stall: Duration,
    /// Bytes queued for one connection at most; beyond, it is disconnected.
    pub conn_buffer: usize,
    /// A Streamable HTTP connection with no open stream and no request for this long is gone
    /// (a WebSocket one is gone when its socket closes or stays silent this long).
    pub conn_idle: Duration,
    /// A session whose connection is gone is closed after this long unless resumed.
    pub session_idle: Duration,
    /// How often a quiet stream gets a keep-alive (an SSE comment, a WebSocket ping).
    pub keepalive: Duration,
    /// How long an `initialize` POST waits for the loop's answer.
    pub init_wait: Duration,
}

impl Bounds {
    /// The defaults, or the environment's `PRIME_AGENT_REMOTE_*_MS` overrides (tests shorten
    /// them).
    pub(crate) fn from_env() -> Bounds {
        let ms = |name: &str, default: u64| {
            let v = std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default);
            Duration::from_millis(v.max(1))
        };
        Bounds {
            stall: ms("PRIME_AGENT_REMOTE_STALL_MS", 30_000),
            conn_buffer: 64 * 1024 * 1024,
            conn_idle: ms("PRIME_AGENT_REMOTE_CONN_IDLE_MS", 60_000),
            session_idle: ms("PRIME_AGENT_REMOTE_SESSION_IDLE_MS", 600_000),
            keepalive: ms("PRIME_AGENT_REMOTE_KEEPALIVE_MS", 15_000),
            init_wait: Duration::from_secs(30),
        }
    }
}

/// Which profile a connection speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// Streamable HTTP: POSTs in, SSE streams out (one per connection, one per session).
    Http,
    /// One WebSocket, everything on it.
    Ws,
}

pub(crate) struct Hub {
    state: Mutex<State>,
    to_loop: Sender<Inbound>,
    pub(crate) bounds: Bounds,
    epoch: Instant,
    /// The loop's outbox backlog (to the router): every session's backlog is chained to it.
    outbox: Backlog,
}

#[derive(Default)]
struct State {
    next_conn: u64,
    next_request: u64,
    next_socket: u64,
    conns: HashMap<u64, Conn>,
    /// `Acp-Connection-Id` → connection.
    public: HashMap<String, u64>,
    sessions: HashMap<String, Route>,
    /// Client requests in the loop: the hub's id number → who asked.
    requests: HashMap<u64, Asked>,
    /// The agent's requests to clients awaiting an answer: id (as JSON text) → connection.
    agent_requests: HashMap<String, u64>,
    /// `initialize` POSTs waiting for their answer, by the hub's id number.
    init_waiters: HashMap<u64, Sender<Vec<u8>>>,
    stopping: bool,
}

struct Conn {
    public_id: String,
    kind: Kind,
    main: Arc<Stream>,
    /// Session-scoped SSE streams (HTTP only), created when a session is attached.
    sessions: HashMap<String, Arc<Stream>>,
    /// Sockets to shut when the connection ends (its streams, its WebSocket).
    sockets: HashMap<u64, TcpStream>,
    last_activity: Instant,
    progress: Arc<Progress>,
}

/// Where a session's frames go.
struct Route {
    conn: Option<u64>,
    detached_at: Instant,
    /// The session's turns pause on this while its client is behind.
    backlog: Backlog,
}

/// A client request the loop has not answered yet.
struct Asked {
    /// 0: the hub's own (an idle session's close), whose answer nobody reads.
    conn: u64,
    original: Value,
    method: String,
    session: Option<String>,
}

/// Bytes queued for one connection and when its streams last wrote.
pub(crate) struct Progress {
    queued: AtomicUsize,
    /// Milliseconds since the hub's epoch.
    last_write: AtomicU64,
}

/// One outbound stream's queue; a writer thread (an SSE GET, a WebSocket) drains it.
pub(crate) struct Stream {
    queue: Mutex<Queue>,
    ready: Condvar,
    progress: Arc<Progress>,
    epoch: Instant,
}

#[derive(Default)]
struct Queue {
    frames: VecDeque<Frame>,
    closed: bool,
    /// Ends once what is queued has been written (a closed or taken-over session's stream).
    finishing: bool,
    /// The generation of the writer attached (0: none); a new GET replaces an old one.
    holder: u64,
    generations: u64,
}

/// A message for the client (JSON without a newline) or a WebSocket control frame.
pub(crate) struct Frame {
    pub bytes: Vec<u8>,
    /// The WebSocket opcode (text for messages).
    pub opcode: u8,
    backlog: Option<Backlog>,
}

/// What a stream's writer gets next.
pub(crate) enum Next {
    Frame(Frame),
    /// Nothing for a keep-alive interval.
    Idle,
    /// The stream closed or another writer took it over.
    Done,
}

impl Stream {
    fn new(progress: Arc<Progress>, epoch: Instant) -> Arc<Stream> {
        Arc::new(Stream {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            progress,
            epoch,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a frame (dropped, with its count released, when the stream is closed).
    pub(crate) fn push(&self, frame: Frame) {
        let mut q = self.lock();
        if q.closed {
            drop(q);
            if let Some(b) = &frame.backlog {
                b.written(frame.bytes.len());
            }
            return;
        }
        if q.frames.is_empty() {
            // A stream that was idle starts its stall clock now, not when it last wrote.
            self.touch();
        }
        self.progress
            .queued
            .fetch_add(frame.bytes.len(), Ordering::Relaxed);
        q.frames.push_back(frame);
        self.ready.notify_all();
    }

    /// Makes the caller the stream's writer; returns its generation.
    pub(crate) fn attach(&self) -> u64 {
        let mut q = self.lock();
        q.generations += 1;
        q.holder = q.generations;
        self.ready.notify_all();
        q.holder
    }

    /// The writer `generation` is done with the stream.
    pub(crate) fn detach(&self, generation: u64) {
        let mut q = self.lock();
        if q.holder == generation {
            q.holder = 0;
        }
    }

    fn has_writer(&self) -> bool {
        self.lock().holder != 0
    }

    /// The next frame for writer `generation`, waiting at most `wait`.
    pub(crate) fn next(&self, generation: u64, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        let mut q = self.lock();
        loop {
            if q.closed || q.holder != generation {
                return Next::Done;
            }
            if let Some(frame) = q.frames.pop_front() {
                return Next::Frame(frame);
            }
            if q.finishing {
                return Next::Done;
            }
            let now = Instant::now();
            if now >= deadline {
                return Next::Idle;
            }
            q = match self.ready.wait_timeout(q, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// A frame has been written (or given up): its bytes leave the counts.
    pub(crate) fn written(&self, frame: &Frame) {
        self.touch();
        self.release(frame);
    }

    fn release(&self, frame: &Frame) {
        self.progress
            .queued
            .fetch_sub(frame.bytes.len(), Ordering::Relaxed);
        if let Some(b) = &frame.backlog {
            b.written(frame.bytes.len());
        }
    }

    fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.progress.last_write.store(ms, Ordering::Relaxed);
    }

    /// Ends the stream: its writer stops and what it held is released.
    pub(crate) fn close(&self) {
        let frames = {
            let mut q = self.lock();
            q.closed = true;
            self.ready.notify_all();
            std::mem::take(&mut q.frames)
        };
        for frame in &frames {
            self.release(frame);
        }
    }

    /// Ends the stream once its writer has written what is queued. Without a writer it ends
    /// now and hands back what was queued, for the connection's own stream to carry (a GET the
    /// client has not sent yet must not make it lose an answer).
    fn finish(&self) -> VecDeque<Frame> {
        let mut q = self.lock();
        q.finishing = true;
        self.ready.notify_all();
        if q.holder != 0 {
            return VecDeque::new();
        }
        q.closed = true;
        let frames = std::mem::take(&mut q.frames);
        let bytes: usize = frames.iter().map(|f| f.bytes.len()).sum();
        self.progress.queued.fetch_sub(bytes, Ordering::Relaxed);
        frames
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

impl Frame {
    pub(crate) fn control(opcode: u8, payload: Vec<u8>) -> Frame {
        Frame {
            bytes: payload,
            opcode,
            backlog: None,
        }
    }
}

impl Hub {
    pub(crate) fn new(to_loop: Sender<Inbound>, bounds: Bounds, outbox: Backlog) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(State::default()),
            to_loop,
            bounds,
            epoch: Instant::now(),
            outbox,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection: its number, its `Acp-Connection-Id` and its main stream.
    pub(crate) fn open(&self, kind: Kind) -> Option<(u64, String, Arc<Stream>)> {
        let mut st = self.lock();
        if st.stopping {
            return None;
        }
        st.next_conn += 1;
        let n = st.next_conn;
        let public_id = uuid::Uuid::new_v4().to_string();
        let progress = Arc::new(Progress {
            queued: AtomicUsize::new(0),
            last_write: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
        });
        let main = Stream::new(progress.clone(), self.epoch);
        st.conns.insert(
            n,
            Conn {
                public_id: public_id.clone(),
                kind,
                main: main.clone(),
                sessions: HashMap::new(),
                sockets: HashMap::new(),
                last_activity: Instant::now(),
                progress,
            },
        );
        st.public.insert(public_id.clone(), n);
        log::info!("remote connection {n} ({kind:?}) opened as {public_id}");
        Some((n, public_id, main))
    }

    /// The connection an `Acp-Connection-Id` names, marked active.
    pub(crate) fn lookup(&self, public_id: &str) -> Option<u64> {
        let mut st = self.lock();
        let n = *st.public.get(public_id)?;
        if let Some(c) = st.conns.get_mut(&n) {
            c.last_activity = Instant::now();
        }
        Some(n)
    }

    /// The stream a GET attaches to: the connection's, or a session's it holds.
    pub(crate) fn stream_for_get(&self, conn: u64, session: Option<&str>) -> Option<Arc<Stream>> {
        let st = self.lock();
        let c = st.conns.get(&conn)?;
        match session {
            None => Some(c.main.clone()),
            Some(sid) => c.sessions.get(sid).cloned(),
        }
    }

    /// Whether `session` is attached to `conn`.
    pub(crate) fn holds(&self, conn: u64, session: &str) -> bool {
        let st = self.lock();
        st.sessions.get(session).and_then(|r| r.conn) == Some(conn)
    }

    /// A socket to shut down when `conn` ends; its key for `remove_socket` (`None`: the
    /// connection has already ended).
    pub(crate) fn add_socket(&self, conn: u64, socket: &TcpStream) -> Option<u64> {
        let mut st = self.lock();
        st.next_socket += 1;
        let key = st.next_socket;
        match (st.conns.get_mut(&conn), socket.try_clone()) {
            (Some(c), Ok(s)) => {
                c.sockets.insert(key, s);
                Some(key)
            }
            _ => None,
        }
    }

    /// A stream's socket is done (its GET ended): its descriptor is not kept.
    pub(crate) fn remove_socket(&self, conn: u64, key: u64) {
        let mut st = self.lock();
        if let Some(c) = st.conns.get_mut(&conn) {
            c.sockets.remove(&key);
        }
    }

    /// The backlog a session's turns pause on.
    pub(crate) fn turn_backlog(&self, session: &str) -> Backlog {
        let mut st = self.lock();
        route_of(&mut st, session, &self.outbox).backlog.clone()
    }

    /// Hands a client message from `conn` to the loop, its request id made unique; a
    /// `session/load` or `session/resume` attaches the session to `conn` at once (its replay
    /// comes before the answer).
    pub(crate) fn deliver(&self, conn: u64, msg: Incoming) {
        let msg = {
            let mut st = self.lock();
            let Some(c) = st.conns.get_mut(&conn) else {
                return;
            };
            c.last_activity = Instant::now();
            match msg {
                Incoming::Request { id, method, params } => {
                    let session = session_of(&params);
                    if method == acp::SESSION_LOAD || method == acp::SESSION_RESUME {
                        if let Some(sid) = &session {
                            attach(&mut st, sid, conn, self.epoch, &self.outbox);
                        }
                    }
                    let id = tag(&mut st, conn, id.0, &method, session);
                    Incoming::Request { id, method, params }
                }
                Incoming::Invalid { id, error } => {
                    let id = tag(&mut st, conn, id.0, "", None);
                    Incoming::Invalid { id, error }
                }
                Incoming::Notification { method, mut params } => {
                    if method == acp::CANCEL_REQUEST {
                        // The id the client cancels is its own: name the loop's.
                        retag_cancel(&st, conn, &mut params);
                    }
                    Incoming::Notification { method, params }
                }
                Incoming::Response { id, result } => {
                    st.agent_requests.remove(&id.0.to_string());
                    Incoming::Response { id, result }
                }
            }
        };
        let _ = self.to_loop.send(Inbound::Message(msg));
    }

    /// Delivers an `initialize` request whose answer goes back in the POST's body; the
    /// receiver gets that answer (JSON, id restored).
    pub(crate) fn initialize(&self, conn: u64, msg: Incoming) -> Receiver<Vec<u8>> {
        let (tx, rx) = bounded(1);
        let Incoming::Request { id, method, params } = msg else {
            return rx;
        };
        let msg = {
            let mut st = self.lock();
            let id = tag(&mut st, conn, id.0, &method, None);
            if let Some(n) = number_of(&id.0) {
                st.init_waiters.insert(n, tx);
            }
            Incoming::Request { id, method, params }
        };
        let _ = self.to_loop.send(Inbound::Message(msg));
        rx
    }

    /// Ends `conn`: its streams close, its sockets shut, its sessions are detached (and closed
    /// after `session_idle` unless resumed), and what the agent asks its client fails.
    pub(crate) fn disconnect(&self, conn: u64, why: &str) {
        let failed = {
            let mut st = self.lock();
            let Some(c) = st.conns.remove(&conn) else {
                return;
            };
            log::info!("remote connection {conn} ({}) ended: {why}", c.public_id);
            st.public.remove(&c.public_id);
            c.main.close();
            for s in c.sessions.values() {
                s.close();
            }
            for s in c.sockets.values() {
                let _ = s.shutdown(Shutdown::Both);
            }
            let now = Instant::now();
            for route in st.sessions.values_mut().filter(|r| r.conn == Some(conn)) {
                route.conn = None;
                route.detached_at = now;
            }
            let failed: Vec<String> = st
                .agent_requests
                .iter()
                .filter(|(_, c)| **c == conn)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &failed {
                st.agent_requests.remove(id);
            }
            let waiting: Vec<u64> = st
                .init_waiters
                .keys()
                .filter(|n| st.requests.get(n).is_some_and(|a| a.conn == conn))
                .copied()
                .collect();
            for n in waiting {
                st.init_waiters.remove(&n);
            }
            failed
        };
        for id in failed {
            self.fail_agent_request(&id, "the client disconnected");
        }
    }

    /// Answers an agent request for the client in its stead, with an error.
    fn fail_agent_request(&self, id_json: &str, why: &str) {
        let id = serde_json::from_str(id_json).unwrap_or(Value::Null);
        let msg = Incoming::Response {
            id: RequestId(id),
            result: Err(RpcError::internal(why.to_owned())),
        };
        let _ = self.to_loop.send(Inbound::Message(msg));
    }

    /// Routes one frame of the loop's (a JSON line) to its connection and stream.
    pub(crate) fn route(&self, line: &[u8]) {
        // The streaming path: a message chunk names its session first; no parse needed.
        const CHUNK: &[u8] =
            br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":""#;
        if let Some(rest) = line.strip_prefix(CHUNK) {
            if let Some(end) = rest.iter().position(|b| *b == b'"') {
                if let Ok(sid) = std::str::from_utf8(&rest[..end]) {
                    let mut st = self.lock();
                    self.to_session(&mut st, sid, line.to_vec());
                    return;
                }
            }
        }
        let Ok(mut v) = serde_json::from_slice::<Value>(line) else {
            log::warn!("remote: the loop wrote a frame that is not JSON");
            return;
        };
        let has_method = v.get("method").is_some();
        let has_id = v.get("id").is_some();
        match (has_method, has_id) {
            (true, true) => self.route_agent_request(&v, line),
            (true, false) => self.route_notification(&v, line),
            (false, _) => self.route_response(&mut v),
        }
    }

    fn route_agent_request(&self, v: &Value, line: &[u8]) {
        let id = v["id"].to_string();
        let sid = session_of(&v["params"]);
        let mut st = self.lock();
        let conn = sid
            .as_deref()
            .and_then(|s| st.sessions.get(s))
            .and_then(|r| r.conn)
            .filter(|c| st.conns.contains_key(c));
        match (conn, sid) {
            (Some(conn), Some(sid)) => {
                st.agent_requests.insert(id, conn);
                self.to_session(&mut st, &sid, line.to_vec());
            }
            _ => {
                drop(st);
                self.fail_agent_request(&id, "no client is connected to this session");
            }
        }
    }

    fn route_notification(&self, v: &Value, line: &[u8]) {
        let mut st = self.lock();
        if v["method"] == acp::CANCEL_REQUEST {
            let target = v["params"]["requestId"].to_string();
            if let Some(conn) = st.agent_requests.remove(&target) {
                if let Some(c) = st.conns.get(&conn) {
                    let stream = c.main.clone();
                    self.push(&mut st, conn, &stream, line.to_vec(), None);
                }
            }
            return;
        }
        match session_of(&v["params"]) {
            Some(sid) => self.to_session(&mut st, &sid, line.to_vec()),
            None => log::debug!("remote: a notification for no session is not sent"),
        }
    }

    fn route_response(&self, v: &mut Value) {
        let Some(n) = number_of(&v["id"]) else {
            log::warn!("remote: a response to no remote request: {}", v["id"]);
            return;
        };
        let mut st = self.lock();
        let Some(asked) = st.requests.remove(&n) else {
            return;
        };
        v["id"] = asked.original.clone();
        let ok = v.get("result").is_some();
        if let Some(waiter) = st.init_waiters.remove(&n) {
            let _ = waiter.send(serde_json::to_vec(v).unwrap_or_default());
            return;
        }
        if asked.conn == 0 || !st.conns.contains_key(&asked.conn) {
            return;
        }
        let method = asked.method.as_str();
        let mut scope = None;
        let mut gone = None;
        if method == acp::SESSION_NEW || method == acp::SESSION_FORK {
            if let Some(sid) = v["result"]["sessionId"].as_str().map(str::to_owned) {
                attach(&mut st, &sid, asked.conn, self.epoch, &self.outbox);
            }
        } else if method == acp::SESSION_LOAD || method == acp::SESSION_RESUME {
            if let Some(sid) = &asked.session {
                if ok {
                    // So a Streamable HTTP client (the SDK's) learns the session and opens
                    // its stream, as it does from `session/new`'s answer.
                    if let Some(obj) = v["result"].as_object_mut() {
                        obj.insert("sessionId".into(), Value::String(sid.clone()));
                    }
                } else if st.sessions.get(sid).and_then(|r| r.conn) == Some(asked.conn) {
                    st.sessions.remove(sid);
                }
            }
        } else if let Some(sid) = &asked.session {
            let held = st.sessions.get(sid).and_then(|r| r.conn) == Some(asked.conn);
            if held {
                scope = Some(sid.clone());
            }
            if ok && (method == acp::SESSION_CLOSE || method == acp::SESSION_DELETE) && held {
                st.sessions.remove(sid);
                gone = Some(sid.clone());
            }
        }
        let bytes = serde_json::to_vec(v).unwrap_or_default();
        let conn = asked.conn;
        let stream = stream_of(&mut st, conn, scope.as_deref(), self.epoch);
        if let Some(stream) = stream {
            self.push(&mut st, conn, &stream, bytes, None);
        }
        // A closed session's stream ends after its last answer: its GET (and thread) go.
        if let Some(sid) = gone {
            end_session_stream(&mut st, conn, &sid);
        }
    }

    /// Queues a frame of session `sid` for the connection holding it (dropped if none).
    fn to_session(&self, st: &mut State, sid: &str, bytes: Vec<u8>) {
        let Some(route) = st.sessions.get(sid) else {
            return;
        };
        let (Some(conn), backlog) = (route.conn, route.backlog.clone()) else {
            return;
        };
        if let Some(stream) = stream_of(st, conn, Some(sid), self.epoch) {
            self.push(st, conn, &stream, bytes, Some(backlog));
        }
    }

    fn push(
        &self,
        st: &mut State,
        conn: u64,
        stream: &Stream,
        bytes: Vec<u8>,
        backlog: Option<Backlog>,
    ) {
        if let Some(b) = &backlog {
            b.add(bytes.len());
        }
        stream.push(Frame {
            bytes,
            opcode: super::ws::OP_TEXT,
            backlog,
        });
        let over = st
            .conns
            .get(&conn)
            .is_some_and(|c| c.progress.queued.load(Ordering::Relaxed) > self.bounds.conn_buffer);
        if over {
            self.disconnect_locked(st, conn);
        }
    }

    /// `disconnect` from code that holds the state: the connection ends after the lock goes.
    fn disconnect_locked(&self, st: &mut State, conn: u64) {
        // Streams close at once, so nothing more is queued; the rest (the agent requests to
        // fail, the sockets) is done by the sweeper's next pass, which sees the stall.
        if let Some(c) = st.conns.get(&conn) {
            c.main.close();
            for s in c.sessions.values() {
                s.close();
            }
            for s in c.sockets.values() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// The periodic pass: connections gone quiet, stalled or closed end; sessions detached
    /// for `session_idle` are closed.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let mut ended = Vec::new();
        let mut closes = Vec::new();
        {
            let mut st = self.lock();
            for (n, c) in &st.conns {
                let queued = c.progress.queued.load(Ordering::Relaxed);
                let last = c.progress.last_write.load(Ordering::Relaxed);
                let stalled = queued > 0
                    && now_ms.saturating_sub(last) > self.bounds.stall.as_millis() as u64;
                let streaming = c.main.has_writer() || c.sessions.values().any(|s| s.has_writer());
                let idle = c.kind == Kind::Http
                    && !streaming
                    && now.duration_since(c.last_activity) > self.bounds.conn_idle;
                if stalled {
                    ended.push((
                        *n,
                        format!("its client stopped reading ({queued} bytes queued)"),
                    ));
                } else if c.main.is_closed() {
                    ended.push((*n, "over its buffer bound".to_owned()));
                } else if idle {
                    ended.push((*n, "idle".to_owned()));
                }
            }
            let idle: Vec<String> = st
                .sessions
                .iter()
                .filter(|(_, r)| {
                    r.conn.is_none() && now.duration_since(r.detached_at) > self.bounds.session_idle
                })
                .map(|(sid, _)| sid.clone())
                .collect();
            for sid in idle {
                st.sessions.remove(&sid);
                let id = tag(
                    &mut st,
                    0,
                    Value::Null,
                    acp::SESSION_CLOSE,
                    Some(sid.clone()),
                );
                closes.push((id, sid));
            }
        }
        for (conn, why) in ended {
            self.disconnect(conn, &why);
        }
        for (id, sid) in closes {
            log::info!("remote: closing session {sid}, detached for too long");
            let msg = Incoming::Request {
                id,
                method: acp::SESSION_CLOSE.to_owned(),
                params: json!({ "sessionId": sid }),
            };
            let _ = self.to_loop.send(Inbound::Message(msg));
        }
    }

    /// Ends every connection (the process is exiting); new ones are refused.
    pub(crate) fn stop(&self) {
        let conns: Vec<u64> = {
            let mut st = self.lock();
            st.stopping = true;
            st.conns.keys().copied().collect()
        };
        for conn in conns {
            self.disconnect(conn, "the agent is exiting");
        }
    }

    /// Bytes queued for all connections.
    pub(crate) fn queued(&self) -> usize {
        let st = self.lock();
        st.conns
            .values()
            .map(|c| c.progress.queued.load(Ordering::Relaxed))
            .sum()
    }
}

/// The `sessionId` string of a params object.
fn session_of(params: &Value) -> Option<String> {
    params.get("sessionId")?.as_str().map(str::to_owned)
}

/// The hub's number in one of its ids.
fn number_of(id: &Value) -> Option<u64> {
    id.as_str()?.strip_prefix(PREFIX)?.parse().ok()
}

/// A unique id for a client request, remembering who asked.
fn tag(
    st: &mut State,
    conn: u64,
    original: Value,
    method: &str,
    session: Option<String>,
) -> RequestId {
    st.next_request += 1;
    let n = st.next_request;
    st.requests.insert(
        n,
        Asked {
            conn,
            original,
            method: method.to_owned(),
            session,
        },
    );
    RequestId(Value::String(format!("{PREFIX}{n}")))
}

/// Rewrites `$/cancel_request`'s `requestId` from the client's id to the loop's.
fn retag_cancel(st: &State, conn: u64, params: &mut Value) {
    let Some(target) = params.get("requestId").cloned() else {
        return;
    };
    let found = st
        .requests
        .iter()
        .find(|(_, a)| a.conn == conn && a.original == target)
        .map(|(n, _)| *n);
    if let Some(n) = found {
        params["requestId"] = Value::String(format!("{PREFIX}{n}"));
    }
}

/// The route of `session`, made (detached) if it has none; its backlog is chained to the
/// loop's outbox backlog, so a turn also waits while the router is behind.
fn route_of<'a>(st: &'a mut State, session: &str, outbox: &Backlog) -> &'a mut Route {
    st.sessions
        .entry(session.to_owned())
        .or_insert_with(|| Route {
            conn: None,
            detached_at: Instant::now(),
            backlog: Backlog::chained(outbox.clone()),
        })
}

/// Attaches `session` to `conn` (taking it from any other connection).
fn attach(st: &mut State, session: &str, conn: u64, epoch: Instant, outbox: &Backlog) {
    let route = route_of(st, session, outbox);
    let before = route.conn.replace(conn);
    if let Some(old) = before.filter(|old| *old != conn) {
        // The connection it was taken from keeps what is queued for it, then its stream ends.
        end_session_stream(st, old, session);
    }
    let _ = stream_of(st, conn, Some(session), epoch);
}

/// Ends `conn`'s stream of `session`: after what is queued on it is written, or, with no GET
/// attached, at once, what was queued going on the connection's stream instead.
fn end_session_stream(st: &mut State, conn: u64, session: &str) {
    let Some(c) = st.conns.get_mut(&conn) else {
        return;
    };
    if let Some(stream) = c.sessions.remove(session) {
        for frame in stream.finish() {
            c.main.push(frame);
        }
    }
}

/// The stream a frame of `conn` (of `session`, if any) goes on.
fn stream_of(
    st: &mut State,
    conn: u64,
    session: Option<&str>,
    epoch: Instant,
) -> Option<Arc<Stream>> {
    let c = st.conns.get_mut(&conn)?;
    match (c.kind, session) {
        (Kind::Http, Some(sid)) => {
            let progress = c.progress.clone();
            Some(
                c.sessions
                    .entry(sid.to_owned())
                    .or_insert_with(|| Stream::new(progress, epoch))
                    .clone(),
            )
        }
        _ => Some(c.main.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    fn hub() -> (Arc<Hub>, crossbeam_channel::Receiver<Inbound>) {
        let (tx, rx) = unbounded();
        (Hub::new(tx, Bounds::from_env(), Backlog::default()), rx)
    }

    fn request(id: Value, method: &str, params: Value) -> Incoming {
        Incoming::Request {
            id: RequestId(id),
            method: method.to_owned(),
            params,
        }
    }

    /// The loop's side: the next message it got.
    fn got(rx: &crossbeam_channel::Receiver<Inbound>) -> Incoming {
        match rx.try_recv() {
            Ok(Inbound::Message(m)) => m,
            other => panic!("nothing for the loop: {other:?}"),
        }
    }

    fn id_of(m: &Incoming) -> Value {
        match m {
            Incoming::Request { id, .. } | Incoming::Response { id, .. } => id.0.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Everything queued on `stream`, as JSON.
    fn drain(stream: &Stream) -> Vec<Value> {
        let generation = stream.attach();
        let mut out = Vec::new();
        while let Next::Frame(f) = stream.next(generation, Duration::ZERO) {
            stream.written(&f);
            out.push(serde_json::from_slice(&f.bytes).unwrap());
        }
        stream.detach(generation);
        out
    }

    fn answer(id: &Value, result: Value) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": id, "result": result})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn two_clients_ids_are_made_unique_and_each_gets_its_own_back() {
        let (hub, rx) = hub();
        let (a, _, a_main) = hub.open(Kind::Ws).unwrap();
        let (b, _, b_main) = hub.open(Kind::Ws).unwrap();
        hub.deliver(a, request(json!(1), acp::SESSION_LIST, json!({})));
        hub.deliver(b, request(json!(1), acp::SESSION_LIST, json!({})));
        let (ia, ib) = (id_of(&got(&rx)), id_of(&got(&rx)));
        assert_ne!(ia, ib);
        hub.route(&answer(&ib, json!({"who": "b"})));
        hub.route(&answer(&ia, json!({"who": "a"})));
        let (fa, fb) = (drain(&a_main), drain(&b_main));
        assert_eq!(
            fa,
            vec![json!({"jsonrpc": "2.0", "id": 1, "result": {"who": "a"}})]
        );
        assert_eq!(
            fb,
            vec![json!({"jsonrpc": "2.0", "id": 1, "result": {"who": "b"}})]
        );
        // `$/cancel_request` names the loop's id for the client's.
        hub.deliver(b, request(json!("x"), acp::SESSION_LIST, json!({})));
        let loops = id_of(&got(&rx));
        hub.deliver(
            b,
            Incoming::Notification {
                method: acp::CANCEL_REQUEST.to_owned(),
                params: json!({"requestId": "x"}),
            },
        );
        match got(&rx) {
            Incoming::Notification { params, .. } => assert_eq!(params["requestId"], loops),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_session_goes_where_it_was_made_then_where_it_was_resumed() {
        let (hub, rx) = hub();
        let (a, _, a_main) = hub.open(Kind::Http).unwrap();
        let (b, _, b_main) = hub.open(Kind::Http).unwrap();
        hub.deliver(a, request(json!(2), acp::SESSION_NEW, json!({"cwd": "/"})));
        let id = id_of(&got(&rx));
        hub.route(&answer(&id, json!({"sessionId": "s1"})));
        assert_eq!(drain(&a_main)[0]["result"]["sessionId"], "s1");
        assert!(hub.holds(a, "s1") && !hub.holds(b, "s1"));
        let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {"n": 1}}});
        hub.route(update.to_string().as_bytes());
        let a_s1 = hub.stream_for_get(a, Some("s1")).unwrap();
        assert_eq!(drain(&a_s1), vec![update.clone()]);
        // A prompt's answer goes on the session's stream, after its updates.
        hub.deliver(
            a,
            request(json!(3), acp::SESSION_PROMPT, json!({"sessionId": "s1"})),
        );
        let id = id_of(&got(&rx));
        hub.route(update.to_string().as_bytes());
        hub.route(&answer(&id, json!({"stopReason": "end_turn"})));
        let frames = drain(&a_s1);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1]["id"], 3);
        // Queued for `a` with no GET open when `b` takes the session: `a` still gets it, on
        // its connection's stream.
        hub.route(update.to_string().as_bytes());
        hub.deliver(
            b,
            request(
                json!(9),
                acp::SESSION_RESUME,
                json!({"sessionId": "s1", "cwd": "/"}),
            ),
        );
        let id = id_of(&got(&rx));
        assert!(hub.holds(b, "s1") && !hub.holds(a, "s1"));
        hub.route(&answer(&id, json!({"modes": null})));
        // The resume's answer names the session, so the client opens its stream.
        assert_eq!(drain(&b_main)[0]["result"]["sessionId"], "s1");
        hub.route(update.to_string().as_bytes());
        assert_eq!(
            drain(&hub.stream_for_get(b, Some("s1")).unwrap()),
            vec![update.clone()]
        );
        assert!(drain(&a_s1).is_empty());
        assert_eq!(drain(&a_main), vec![update]);
        assert!(hub.stream_for_get(a, Some("s1")).is_none());
    }

    #[test]
    fn what_the_agent_asks_a_client_that_is_gone_fails_at_once() {
        let (hub, rx) = hub();
        let (a, _, _) = hub.open(Kind::Ws).unwrap();
        hub.deliver(a, request(json!(1), acp::SESSION_NEW, json!({"cwd": "/"})));
        let id = id_of(&got(&rx));
        hub.route(&answer(&id, json!({"sessionId": "s1"})));
        let ask = json!({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": {"sessionId": "s1"}});
        hub.route(ask.to_string().as_bytes());
        assert!(rx.try_recv().is_err(), "asked, not failed");
        hub.disconnect(a, "test");
        match got(&rx) {
            Incoming::Response { id, result } => {
                assert_eq!(id.0, json!(7));
                assert!(result.is_err());
            }
            other => panic!("{other:?}"),
        }
        // Detached now: the next question fails without waiting.
        hub.route(ask.to_string().as_bytes());
        assert!(matches!(
            got(&rx),
            Incoming::Response { result: Err(_), .. }
        ));
        assert!(!hub.holds(a, "s1"));
    }
}
