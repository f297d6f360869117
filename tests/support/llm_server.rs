//! A loopback HTTP/1.1 model server on `std::net`: it plays canned replies (recorded SSE
//! streams from `fixtures/sse/`, error bodies, drops and stalls) in order, and records every
//! request (method, path, headers, JSON body) so tests can assert both directions.
//! `GET`s (a server describing itself: `/v1/models`, `/props`) are answered from fixed routes
//! (404 where none is set) and do not use up canned replies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use serde_json::Value;

use super::fixture;

/// How a canned reply ends.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// The body is sent completely and the connection stays open for the next request.
    Complete,
    /// The body is sent, then the socket is closed without ending the chunked body.
    Drop,
    /// The body is sent, then nothing more until the client closes the connection.
    Stall,
}

#[derive(Clone, Debug)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub sse: bool,
    pub end: End,
    /// SSE only: each event is its own chunk, sent `pace` after the previous one (a slow model).
    pub pace: Option<Duration>,
}

impl Canned {
    /// A 200 SSE stream from `fixtures/sse/<name>`.
    pub fn sse(name: &str) -> Canned {
        Canned::sse_bytes(std::fs::read(fixture(&format!("sse/{name}"))).expect("fixture"))
    }

    pub fn sse_bytes(body: Vec<u8>) -> Canned {
        Canned {
            status: 200,
            headers: Vec::new(),
            body,
            sse: true,
            end: End::Complete,
            pace: None,
        }
    }

    /// A JSON error body from `fixtures/sse/<name>` with `status`.
    pub fn error(status: u16, name: &str) -> Canned {
        Canned {
            status,
            headers: Vec::new(),
            body: std::fs::read(fixture(&format!("sse/{name}"))).expect("fixture"),
            sse: false,
            end: End::Complete,
            pace: None,
        }
    }

    /// Reads the request and never answers (a server that hangs before its headers).
    pub fn silent() -> Canned {
        Canned {
            status: 0,
            headers: Vec::new(),
            body: Vec::new(),
            sse: false,
            end: End::Stall,
            pace: None,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Canned {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn ending(mut self, end: End) -> Canned {
        self.end = end;
        self
    }

    /// Sends one SSE event every `pace`.
    pub fn paced(mut self, pace: Duration) -> Canned {
        self.pace = Some(pace);
        self
    }
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    /// The JSON body; a body that is not JSON as a string; none as null.
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` → a JSON body with status 200.
pub type Routes = Vec<(String, Value)>;

/// Picks the reply to a model call from the request and its number (0-based): for agents
/// whose calls interleave (subagents), where a fixed order would race.
pub type Responder = Arc<dyn Fn(&Recorded, usize) -> Canned + Send + Sync>;

pub struct LlmServer {
    pub port: u16,
    requests: Arc<Mutex<Vec<Recorded>>>,
    closed: Receiver<()>,
    stop: Arc<AtomicBool>,
}

impl LlmServer {
    /// Serves `replies` in order; the last one repeats for any further request.
    pub fn start(replies: Vec<Canned>) -> LlmServer {
        LlmServer::start_on(0, replies)
    }

    /// As `start`, on a given loopback port (0: any free one).
    pub fn start_on(port: u16, replies: Vec<Canned>) -> LlmServer {
        LlmServer::start_routed(port, replies, Vec::new())
    }

    /// As `start_on`, answering `GET`s from `routes`.
    pub fn start_routed(port: u16, replies: Vec<Canned>, routes: Routes) -> LlmServer {
        assert!(!replies.is_empty());
        let responder: Responder = Arc::new(move |_, i| replies[i.min(replies.len() - 1)].clone());
        LlmServer::start_with(port, responder, routes)
    }

    /// Answers each model call with what `responder` picks for it.
    pub fn start_responding(
        responder: impl Fn(&Recorded, usize) -> Canned + Send + Sync + 'static,
    ) -> LlmServer {
        LlmServer::start_with(0, Arc::new(responder), Vec::new())
    }

    fn start_with(port: u16, responder: Responder, routes: Routes) -> LlmServer {
        let routes = Arc::new(routes);
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind loopback");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (closed_tx, closed) = unbounded();
        let replies = responder;
        let next = Arc::new(AtomicUsize::new(0));
        let (reqs, stop2) = (requests.clone(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (replies, routes, next, reqs, closed_tx) = (
                    replies.clone(),
                    routes.clone(),
                    next.clone(),
                    reqs.clone(),
                    closed_tx.clone(),
                );
                thread::spawn(move || serve(conn, &replies, &routes, &next, &reqs, &closed_tx));
            }
        });
        LlmServer {
            port,
            requests,
            closed,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// The model calls only (no `GET`s).
    pub fn posts(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .collect()
    }

    /// Waits until the client closes a stalled connection.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        self.closed.recv_timeout(timeout).is_ok()
    }
}

impl Drop for LlmServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(
    conn: TcpStream,
    replies: &Responder,
    routes: &Routes,
    next: &AtomicUsize,
    requests: &Mutex<Vec<Recorded>>,
    closed: &Sender<()>,
) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut conn = conn;
    loop {
        let Some(request) = read_request(&mut reader) else {
            return;
        };
        let get = request.method == "GET";
        let path = request.path.split('?').next().unwrap_or("").to_owned();
        requests.lock().unwrap().push(request.clone());
        if get {
            let body = routes.iter().find(|(p, _)| *p == path).map(|(_, b)| b);
            let reply = Canned {
                status: if body.is_some() { 200 } else { 404 },
                headers: Vec::new(),
                body: body.map_or_else(|| b"{}".to_vec(), |b| b.to_string().into_bytes()),
                sse: false,
                end: End::Complete,
                pace: None,
            };
            if write_reply(&mut conn, &reply).is_err() {
                return;
            }
            continue;
        }
        let i = next.fetch_add(1, Ordering::SeqCst);
        let reply = &replies(&request, i);
        if write_reply(&mut conn, reply).is_err() {
            return;
        }
        match reply.end {
            End::Complete => {}
            End::Drop => {
                let _ = conn.shutdown(Shutdown::Both);
                return;
            }
            End::Stall => {
                // Hold the connection until the client closes it (bounded, so a broken
                // client cannot leak this thread forever).
                let deadline = Instant::now() + Duration::from_secs(60);
                let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 256];
                while Instant::now() < deadline {
                    match reader.read(&mut buf) {
                        Ok(0) => {
                            let _ = closed.send(());
                            return;
                        }
                        Ok(_) => {}
                        Err(e)
                            if e.kind() == std::io::ErrorKind::WouldBlock
                                || e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => {
                            let _ = closed.send(());
                            return;
                        }
                    }
                }
                return;
            }
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Recorded> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    // A body that is not JSON (a form) is kept as its text.
    let body = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) if body.is_empty() => Value::Null,
        Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
    };
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn write_reply(conn: &mut TcpStream, reply: &Canned) -> std::io::Result<()> {
    if reply.status == 0 {
        return Ok(());
    }
    let reason = match reply.status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if reply.sse {
        head.push_str("content-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
        conn.write_all(head.as_bytes())?;
        // One chunk per SSE event, like a real server flushing as tokens arrive; large
        // bodies are batched so the throughput measurement is not dominated by syscalls.
        let events = split_events(&reply.body);
        let mut chunk = Vec::new();
        for ev in events {
            if let Some(pace) = reply.pace {
                thread::sleep(pace);
                write_chunk(conn, ev)?;
                continue;
            }
            chunk.extend_from_slice(ev);
            if chunk.len() >= 4096 || reply.body.len() < 64 * 1024 {
                write_chunk(conn, &chunk)?;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            write_chunk(conn, &chunk)?;
        }
        if reply.end == End::Complete {
            conn.write_all(b"0\r\n\r\n")?;
        }
    } else {
        head.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            reply.body.len()
        ));
        conn.write_all(head.as_bytes())?;
        conn.write_all(&reply.body)?;
    }
    conn.flush()
}

fn write_chunk(conn: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    conn.write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
    conn.write_all(data)?;
    conn.write_all(b"\r\n")?;
    conn.flush()
}

/// Splits after each blank line (`\n\n`), keeping the separators.
fn split_events(body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < body.len() {
        if body[i] == b'\n' && body[i + 1] == b'\n' {
            out.push(&body[start..i + 2]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < body.len() {
        out.push(&body[start..]);
    }
    out
}
