//! ACP's remote transport (`--listen ADDR:PORT`): Streamable HTTP and WebSocket at `/acp`,
//! over HTTP/1.1, on plain threads (docs/remote.md).
//!
//! The main loop sees one `Connection`, as over stdio: the `hub` tags each remote message with
//! its connection on the way in and routes each of the loop's frames on the way out. Threads:
//! `acp-listen` accepts and starts an `acp-conn-<n>` per TCP connection (which serves POSTs and
//! DELETEs, or becomes an SSE stream's writer, or a WebSocket's reader with an `acp-ws-<n>`
//! writer beside it); `acp-router` drains the loop's outbox into the hub; `acp-sweeper` ends
//! idle and stalled connections and closes sessions left detached. `Remote::join` ends and
//! joins them all.
//!
//! The wire, as the official Python SDK's client (`acp.http`, `acp.ws`, 0.12.1) speaks it:
//! `initialize` is POSTed and answered 200 with `Acp-Connection-Id`; later POSTs carry that
//! header (and `Acp-Session-Id` for session-scoped methods) and are answered 202; the agent's
//! messages come on GET SSE streams, one for the connection and one per session; DELETE ends
//! the connection. A GET with `Upgrade: websocket` carries everything as text frames instead.

mod http;
mod hub;
mod ws;

use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};

use crate::protocol::acp;
use crate::protocol::outbox::{outbox, Drain};
use crate::protocol::rpc::{self, Incoming};
use crate::protocol::transport::{Backlog, Connection, MAX_LINE_BYTES};

use self::http::{BodyLength, Head, HeadError};
use self::hub::{Bounds, Frame, Hub, Kind, Next, Stream};

/// The one path served.
pub(crate) const ENDPOINT: &str = "/acp";

/// Stack of the per-connection threads: they parse JSON and write frames, nothing deep.
const CONN_STACK: usize = 512 * 1024;

/// How long the exit waits for queued frames (the answers of cancelled prompts) to be written.
const EXIT_FLUSH: Duration = Duration::from_secs(1);

/// What `--listen` asked for.
#[derive(Clone, Debug)]
pub(crate) struct ListenConfig {
    pub addr: SocketAddr,
    /// The bearer token every request must carry (`--listen-token-file`).
    pub token: Option<Vec<u8>>,
}

/// The transport's threads; `join` after the main loop has returned.
pub(crate) struct Remote {
    hub: Arc<Hub>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    listener: JoinHandle<()>,
    router: JoinHandle<()>,
    sweeper: JoinHandle<()>,
    stop_sweeper: Sender<()>,
}

/// Binds the listener and starts the transport's threads.
pub(crate) fn listen(cfg: ListenConfig) -> io::Result<(Connection, Remote)> {
    let listener = TcpListener::bind(cfg.addr)?;
    let addr = listener.local_addr()?;
    let (in_tx, in_rx) = unbounded();
    let (out, drain) = outbox();
    let backlog = Backlog::default();
    let hub = Hub::new(in_tx, Bounds::from_env(), backlog.clone());
    let router = {
        let (hub, backlog) = (hub.clone(), backlog.clone());
        thread::Builder::new()
            .name("acp-router".to_owned())
            .spawn(move || route_loop(&hub, drain, &backlog))?
    };
    let (stop_sweeper, stop_rx) = crossbeam_channel::bounded::<()>(1);
    let sweeper = {
        let hub = hub.clone();
        thread::Builder::new()
            .name("acp-sweeper".to_owned())
            .spawn(move || {
                let tick = hub
                    .bounds
                    .stall
                    .min(hub.bounds.conn_idle)
                    .min(Duration::from_secs(1))
                    / 2;
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(tick.max(Duration::from_millis(10)))
                {
                    hub.sweep();
                }
            })?
    };
    let stopping = Arc::new(AtomicBool::new(false));
    let listener = {
        let (hub, stopping) = (hub.clone(), stopping.clone());
        let token: Option<Arc<[u8]>> = cfg.token.map(Arc::from);
        thread::Builder::new()
            .name("acp-listen".to_owned())
            .spawn(move || accept_loop(&listener, &hub, token, &stopping))?
    };
    let turn_hub = hub.clone();
    let conn = Connection {
        outbox: out,
        receiver: in_rx,
        backlog,
        turn_backlogs: Some(Arc::new(move |sid: &str| turn_hub.turn_backlog(sid))),
        reattach: true,
    };
    Ok((
        conn,
        Remote {
            hub,
            addr,
            stopping,
            listener,
            router,
            sweeper,
            stop_sweeper,
        },
    ))
}

impl Remote {
    /// Where the listener is bound (the port chosen for `:0`).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends the transport: the router drains what the loop wrote, queued frames get a moment
    /// to go out, then every connection ends and every thread is joined.
    pub(crate) fn join(self) {
        let _ = self.router.join();
        let deadline = Instant::now() + EXIT_FLUSH;
        while self.hub.queued() > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        self.hub.stop();
        self.stopping.store(true, Ordering::SeqCst);
        // Wakes the blocking `accept` so it sees the flag.
        let _ = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1));
        let _ = self.listener.join();
        let _ = self.stop_sweeper.send(());
        let _ = self.sweeper.join();
    }
}

/// The address to connect to in order to reach a listener bound to `addr`.
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

/// Drains the loop's outbox and routes each frame (one JSON line) to its connection.
fn route_loop(hub: &Hub, mut drain: Drain, backlog: &Backlog) {
    while let Some(batch) = drain.next_batch(Duration::from_micros(50)) {
        // Whole frames, each ending with its newline (the outbox's promise).
        let mut rest = batch;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            if end > 0 {
                hub.route(&rest[..end]);
            }
            backlog.written(end + 1);
            rest = &rest[end + 1..];
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    hub: &Arc<Hub>,
    token: Option<Arc<[u8]>>,
    stopping: &AtomicBool,
) {
    let open: Arc<Mutex<HashMap<u64, TcpStream>>> = Arc::default();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut n = 0u64;
    for incoming in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        let socket = match incoming {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, say: back off instead of spinning.
                log::warn!("remote: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let (done, running): (Vec<_>, Vec<_>) = threads.into_iter().partition(|t| t.is_finished());
        for t in done {
            let _ = t.join();
        }
        threads = running;
        n += 1;
        if let Ok(clone) = socket.try_clone() {
            lock(&open).insert(n, clone);
        }
        let (hub, token, open_map) = (hub.clone(), token.clone(), open.clone());
        let spawned = thread::Builder::new()
            .name(format!("acp-conn-{n}"))
            .stack_size(CONN_STACK)
            .spawn(move || {
                serve(&hub, socket, token.as_deref());
                lock(&open_map).remove(&n);
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                log::warn!("remote: cannot start a connection thread: {e}");
                if let Some(s) = lock(&open).remove(&n) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
    }
    for s in lock(&open).values() {
        let _ = s.shutdown(Shutdown::Both);
    }
    for t in threads {
        let _ = t.join();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serves one TCP connection: requests until it closes, or one stream.
fn serve(hub: &Hub, socket: TcpStream, token: Option<&[u8]>) {
    let _ = socket.set_nodelay(true);
    let Ok(read_half) = socket.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let mut out = socket;
    loop {
        // A keep-alive connection that sends nothing for this long is closed.
        let _ = out.set_read_timeout(Some(hub.bounds.conn_idle));
        let head = match http::read_head(&mut reader) {
            Ok(h) => h,
            Err(HeadError::Closed) => return,
            Err(HeadError::Io(e)) => {
                log::debug!("remote: a connection failed: {e}");
                return;
            }
            Err(HeadError::Bad(why)) => {
                let _ = http::refuse(&mut out, 400, why, false);
                return;
            }
        };
        // The token is checked before anything else of the request is read.
        if let Some(token) = token {
            if !http::authorized(&head, token) {
                log::warn!("remote: refused a request without the bearer token");
                let _ = http::refuse(&mut out, 401, "Missing or invalid bearer token", false);
                return;
            }
        } else if !http::origin_allowed(&head) {
            let _ = http::refuse(&mut out, 403, "Origin not allowed", false);
            return;
        }
        if head.path != ENDPOINT {
            let _ = http::refuse(&mut out, 404, "Not found: the ACP endpoint is /acp", false);
            return;
        }
        let keep = match head.method.as_str() {
            "POST" => post(hub, &head, &mut reader, &mut out),
            "GET" if head.wants_websocket() => return websocket(hub, &head, reader, out),
            "GET" => return sse(hub, &head, out),
            "DELETE" => delete(hub, &head, &mut out),
            _ => {
                let _ = http::refuse(&mut out, 405, "Method not allowed", false);
                false
            }
        };
        if !keep {
            return;
        }
    }
}

/// A POST: one JSON-RPC message. Returns whether the connection stays open.
fn post(hub: &Hub, head: &Head, reader: &mut BufReader<TcpStream>, out: &mut TcpStream) -> bool {
    let keep = head.keep_alive();
    let refuse = |out: &mut TcpStream, status, why: &str, keep| {
        let _ = http::refuse(out, status, why, keep);
        keep
    };
    let len = match http::body_length(head, MAX_LINE_BYTES) {
        BodyLength::Known(n) => n,
        BodyLength::Missing => return refuse(out, 411, "A Content-Length is required", false),
        BodyLength::TooLarge => return refuse(out, 413, "The message is too large", false),
        BodyLength::Invalid => return refuse(out, 400, "Invalid Content-Length", false),
    };
    let mut body = vec![0u8; len];
    if reader.read_exact(&mut body).is_err() {
        return false;
    }
    let value: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return refuse(out, 400, "Invalid JSON", keep),
    };
    drop(body);
    if value.is_array() {
        return refuse(out, 501, "Batch requests are not supported", keep);
    }
    if !value.is_object() {
        return refuse(out, 400, "Invalid JSON-RPC message", keep);
    }
    let initialize = value["method"] == acp::INITIALIZE && value.get("id").is_some();
    let msg = rpc::classify(value);
    if initialize && matches!(msg, Incoming::Request { .. }) {
        return post_initialize(hub, msg, out, keep);
    }
    let Some(public) = head.header("acp-connection-id") else {
        return refuse(out, 400, "Missing connection id", keep);
    };
    let Some(conn) = hub.lookup(public) else {
        return refuse(out, 404, "Unknown connection id", keep);
    };
    let session = head.header("acp-session-id");
    let scoped = match &msg {
        Incoming::Request { method, .. } | Incoming::Notification { method, .. } => {
            session_scoped(method)
        }
        _ => false,
    };
    if scoped && session.is_none() {
        return refuse(out, 400, "Missing session id header", keep);
    }
    if let Some(sid) = session {
        if !hub.holds(conn, sid) {
            return refuse(out, 404, "Unknown session id", keep);
        }
    }
    if let Incoming::Invalid { id, error } = &msg {
        if id.0.is_null() {
            return refuse(out, 400, &error.message, keep);
        }
    }
    hub.deliver(conn, msg);
    let _ = http::respond(out, 202, &[], b"", keep);
    keep
}

/// `initialize`: a new connection, answered in the POST's body.
fn post_initialize(hub: &Hub, msg: Incoming, out: &mut TcpStream, keep: bool) -> bool {
    let Some((conn, public, _)) = hub.open(Kind::Http) else {
        let _ = http::refuse(out, 503, "The agent is exiting", false);
        return false;
    };
    let answer = hub.initialize(conn, msg);
    match answer.recv_timeout(hub.bounds.init_wait) {
        Ok(body) => {
            let _ = http::respond(out, 200, &[("Acp-Connection-Id", &public)], &body, keep);
            keep
        }
        Err(_) => {
            hub.disconnect(conn, "initialize was not answered");
            let _ = http::refuse(out, 504, "initialize timed out", keep);
            keep
        }
    }
}

/// Methods whose POST must name the session in `Acp-Session-Id` (as the SDK's client sends
/// it and its server requires).
fn session_scoped(method: &str) -> bool {
    [
        acp::SESSION_SET_MODE,
        acp::SESSION_SET_CONFIG_OPTION,
        acp::SESSION_PROMPT,
        acp::SESSION_CANCEL,
        acp::SESSION_CLOSE,
    ]
    .contains(&method)
}

fn delete(hub: &Hub, head: &Head, out: &mut TcpStream) -> bool {
    let keep = head.keep_alive();
    let (status, why) = match head.header("acp-connection-id").map(|p| (p, hub.lookup(p))) {
        None => (400, "Missing connection id"),
        Some((_, None)) => (404, "Unknown connection id"),
        Some((_, Some(conn))) => {
            hub.disconnect(conn, "the client ended it (DELETE)");
            (202, "")
        }
    };
    let _ = if status == 202 {
        http::respond(out, 202, &[], b"", keep)
    } else {
        http::refuse(out, status, why, keep)
    };
    keep
}

/// A GET: this thread becomes the writer of a connection's or a session's SSE stream.
fn sse(hub: &Hub, head: &Head, mut out: TcpStream) {
    let accept = head.header("accept").unwrap_or_default();
    if !accept.contains("text/event-stream") && !accept.contains("*/*") {
        let _ = http::refuse(
            &mut out,
            406,
            "Accept must include text/event-stream",
            false,
        );
        return;
    }
    let Some(public) = head.header("acp-connection-id") else {
        let _ = http::refuse(&mut out, 400, "Missing connection id", false);
        return;
    };
    let Some(conn) = hub.lookup(public) else {
        let _ = http::refuse(&mut out, 404, "Unknown connection id", false);
        return;
    };
    let session = head.header("acp-session-id");
    let Some(stream) = hub.stream_for_get(conn, session) else {
        let _ = http::refuse(&mut out, 404, "Unknown session id", false);
        return;
    };
    if out.write_all(http::SSE_HEAD).is_err() {
        return;
    }
    let Some(socket) = hub.add_socket(conn, &out) else {
        return;
    };
    // A client that stops reading is found out by the write that cannot finish.
    let _ = out.set_write_timeout(Some(hub.bounds.stall));
    let generation = stream.attach();
    write_stream(&stream, generation, hub.bounds.keepalive, |frames, buf| {
        for f in frames {
            http::sse_event(buf, &f.bytes);
        }
        if frames.is_empty() {
            buf.extend_from_slice(http::SSE_KEEPALIVE);
        }
        out.write_all(buf)
    });
    stream.detach(generation);
    hub.remove_socket(conn, socket);
}

/// Most bytes a writer sends with one `write`.
const WRITE_BATCH: usize = 64 * 1024;

/// Drains `stream` for writer `generation`: each batch of frames (or, when quiet for
/// `keepalive`, an empty one) is encoded and written by `write`; stops at the stream's end or
/// the first failed write.
fn write_stream(
    stream: &Stream,
    generation: u64,
    keepalive: Duration,
    mut write: impl FnMut(&[Frame], &mut Vec<u8>) -> io::Result<()>,
) {
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    loop {
        buf.clear();
        frames.clear();
        match stream.next(generation, keepalive) {
            Next::Frame(f) => frames.push(f),
            Next::Idle => {}
            Next::Done => return,
        }
        let mut size = frames.first().map_or(0, |f| f.bytes.len());
        while size < WRITE_BATCH {
            match stream.next(generation, Duration::ZERO) {
                Next::Frame(f) => {
                    size += f.bytes.len();
                    frames.push(f);
                }
                _ => break,
            }
        }
        let result = write(&frames, &mut buf);
        for f in &frames {
            stream.written(f);
        }
        let closing = frames.iter().any(|f| f.opcode == ws::OP_CLOSE);
        if result.is_err() || closing {
            return;
        }
    }
}

/// A GET with `Upgrade: websocket`: a connection on one socket, this thread its reader.
fn websocket(hub: &Hub, head: &Head, mut reader: BufReader<TcpStream>, mut out: TcpStream) {
    let Some(key) = head.header("sec-websocket-key") else {
        let _ = http::refuse(&mut out, 400, "Missing Sec-WebSocket-Key", false);
        return;
    };
    if head.header("sec-websocket-version") != Some("13") {
        let _ = http::respond(
            &mut out,
            426,
            &[("Sec-WebSocket-Version", "13")],
            b"",
            false,
        );
        return;
    }
    let Some((conn, public, stream)) = hub.open(Kind::Ws) else {
        let _ = http::refuse(&mut out, 503, "The agent is exiting", false);
        return;
    };
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\nAcp-Connection-Id: {public}\r\n\r\n",
        ws::accept_key(key)
    );
    if out.write_all(answer.as_bytes()).is_err() || hub.add_socket(conn, &out).is_none() {
        hub.disconnect(conn, "the handshake failed");
        return;
    }
    let _ = out.set_write_timeout(Some(hub.bounds.stall));
    let generation = stream.attach();
    let writer = {
        let stream = stream.clone();
        let keepalive = hub.bounds.keepalive;
        thread::Builder::new()
            .name(format!("acp-ws-{conn}"))
            .stack_size(CONN_STACK)
            .spawn(move || {
                write_stream(&stream, generation, keepalive, |frames, buf| {
                    for f in frames {
                        ws::encode_frame(buf, f.opcode, &f.bytes);
                    }
                    if frames.is_empty() {
                        ws::encode_frame(buf, ws::OP_PING, b"");
                    }
                    out.write_all(buf)
                });
                let _ = out.shutdown(Shutdown::Write);
            })
    };
    // Silence longer than this (the writer pings every keep-alive) means the peer is gone.
    let _ = reader
        .get_ref()
        .set_read_timeout(Some(hub.bounds.conn_idle));
    let why = read_websocket(hub, conn, &mut reader, &stream);
    hub.disconnect(conn, why);
    if let Ok(w) = writer {
        let _ = w.join();
    }
}

/// Reads frames until the socket closes; returns why it ended.
fn read_websocket(
    hub: &Hub,
    conn: u64,
    reader: &mut BufReader<TcpStream>,
    stream: &Stream,
) -> &'static str {
    let mut message: Vec<u8> = Vec::new();
    let mut text = false;
    loop {
        let frame = match ws::read_frame(reader, MAX_LINE_BYTES) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let close = ws::close_payload(1009, "message too large");
                stream.push(Frame::control(ws::OP_CLOSE, close));
                return "a message over the size limit";
            }
            Err(_) => return "the WebSocket closed",
        };
        match frame.opcode {
            ws::OP_TEXT | ws::OP_BINARY => {
                text = frame.opcode == ws::OP_TEXT;
                message = frame.payload;
            }
            ws::OP_CONTINUATION => {
                if message.len() + frame.payload.len() > MAX_LINE_BYTES {
                    let close = ws::close_payload(1009, "message too large");
                    stream.push(Frame::control(ws::OP_CLOSE, close));
                    return "a message over the size limit";
                }
                message.extend_from_slice(&frame.payload);
            }
            ws::OP_PING => {
                stream.push(Frame::control(ws::OP_PONG, frame.payload));
                continue;
            }
            ws::OP_PONG => continue,
            ws::OP_CLOSE => {
                let code = frame
                    .payload
                    .get(..2)
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default();
                stream.push(Frame::control(ws::OP_CLOSE, code));
                return "the client closed the WebSocket";
            }
            _ => {
                let close = ws::close_payload(1002, "unknown opcode");
                stream.push(Frame::control(ws::OP_CLOSE, close));
                return "a protocol error";
            }
        }
        if !frame.fin {
            continue;
        }
        let done = std::mem::take(&mut message);
        if !text {
            continue;
        }
        match rpc::classify_line(&done) {
            None => {}
            Some(Incoming::Invalid { id, error }) if id.0.is_null() => {
                let reply = rpc::response_err(&id, &error);
                stream.push(Frame::control(ws::OP_TEXT, reply.to_string().into_bytes()));
            }
            Some(msg) => {
                if log::log_enabled!(log::Level::Debug) {
                    log::debug!(
                        "< [{conn}] {}",
                        crate::protocol::transport::redacted_for_log(&done)
                    );
                }
                hub.deliver(conn, msg);
            }
        }
    }
}
