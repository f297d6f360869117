//! A lean loopback model server for the benchmarks: HTTP/1.1 keep-alive, one OpenAI-style SSE
//! reply per request, chunked like a real server. It stamps the moment it writes events so the
//! bench (same process) can compute per-delta latency with comparable `Instant`s.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What the server does with the next request.
pub enum Plan {
    /// Writes `n` deltas as fast as the socket takes them, in ~16 KiB writes; stamps the first.
    Blast(usize),
    /// Writes `n` deltas one per write; before each write waits for one `()` from the client
    /// (which sends it after reading the previous delta's update), and stamps each write.
    Lockstep(usize, Receiver<()>),
    /// Writes one delta every `interval` until the client goes away.
    Trickle(Duration),
}

pub struct Server {
    pub port: u16,
    plan: Arc<Mutex<Option<Plan>>>,
    stamps: Arc<Mutex<Vec<Instant>>>,
}

const DELTA: &str = "tok ";

fn event(delta_json: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"delta\":{delta_json},\"finish_reason\":{finish}}}]}}\n\n"
    )
}

pub fn delta_event() -> String {
    event(&format!("{{\"content\":\"{DELTA}\"}}"), "null")
}

fn tail_events() -> String {
    let mut s = event("{}", "\"stop\"");
    s.push_str("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"bench-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":10,\"total_tokens\":20}}\n\n");
    s.push_str("data: [DONE]\n\n");
    s
}

fn write_chunk(s: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(data.len() + 16);
    buf.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
    s.write_all(&buf)
}

impl Server {
    pub fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("addr").port();
        let plan = Arc::new(Mutex::new(None));
        let stamps = Arc::new(Mutex::new(Vec::new()));
        let (p, st) = (plan.clone(), stamps.clone());
        thread::Builder::new()
            .name("bench-server".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let (p, st) = (p.clone(), st.clone());
                    thread::spawn(move || serve(conn, &p, &st));
                }
            })
            .expect("spawn server");
        Server { port, plan, stamps }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Sets what the next request gets and clears the stamps.
    pub fn plan(&self, plan: Plan) {
        self.stamps.lock().unwrap().clear();
        *self.plan.lock().unwrap() = Some(plan);
    }

    pub fn stamps(&self) -> Vec<Instant> {
        std::mem::take(&mut *self.stamps.lock().unwrap())
    }
}

/// Reads one request (headers and a Content-Length body); false at EOF.
fn read_request(r: &mut BufReader<TcpStream>) -> bool {
    let mut len = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).is_ok()
}

fn serve(conn: TcpStream, plan: &Mutex<Option<Plan>>, stamps: &Mutex<Vec<Instant>>) {
    let _ = conn.set_nodelay(true);
    let mut w = conn.try_clone().expect("clone socket");
    let mut r = BufReader::new(conn);
    let ev = delta_event();
    while read_request(&mut r) {
        let Some(p) = plan.lock().unwrap().take() else {
            let _ = w.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 7\r\n\r\nno plan",
            );
            continue;
        };
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        if w.write_all(head.as_bytes()).is_err() {
            return;
        }
        let ok = match p {
            Plan::Blast(n) => {
                let per = (16 * 1024 / ev.len()).max(1);
                let batch = ev.repeat(per);
                let mut left = n;
                stamps.lock().unwrap().push(Instant::now());
                let mut ok = true;
                while left > 0 && ok {
                    let k = left.min(per);
                    ok = write_chunk(&mut w, &batch.as_bytes()[..k * ev.len()]).is_ok();
                    left -= k;
                }
                ok
            }
            Plan::Lockstep(n, acks) => {
                let mut mine = Vec::with_capacity(n);
                let mut ok = true;
                for i in 0..n {
                    if i > 0 && acks.recv().is_err() {
                        ok = false;
                        break;
                    }
                    mine.push(Instant::now());
                    if write_chunk(&mut w, ev.as_bytes()).is_err() {
                        ok = false;
                        break;
                    }
                }
                *stamps.lock().unwrap() = mine;
                ok
            }
            Plan::Trickle(interval) => {
                while write_chunk(&mut w, ev.as_bytes()).is_ok() {
                    thread::sleep(interval);
                }
                return;
            }
        };
        if !ok
            || write_chunk(&mut w, tail_events().as_bytes()).is_err()
            || w.write_all(b"0\r\n\r\n").is_err()
        {
            return;
        }
    }
}
