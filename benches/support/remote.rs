//! The remote section of `make bench` (`BENCH_ONLY=remote`): 1,000 sessions over 100
//! WebSocket connections to one `--listen` process on the scripted model; prompt → response
//! latency, memory per idle session, and the same latency with a client in the mix that has
//! stopped reading. Included by `acp.rs` (`#[path]`), which owns `Bench` and the report.
//!
//! The client is a minimal WebSocket client written here (the transport's frames are small
//! and few); the SDK's own client transports are what `tests/remote.rs` drives.

use super::*;

use std::net::TcpStream;

/// A WebSocket client connection (text frames, masked as RFC 6455 requires of clients).
struct Ws {
    out: TcpStream,
    inp: BufReader<TcpStream>,
    next_id: u64,
}

impl Ws {
    fn connect(addr: &str) -> Ws {
        let out = TcpStream::connect(addr).expect("connect");
        out.set_nodelay(true).unwrap();
        let mut inp = BufReader::new(out.try_clone().unwrap());
        let mut w = out.try_clone().unwrap();
        write!(
            w,
            "GET /acp HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .unwrap();
        let mut line = String::new();
        inp.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 101"), "handshake: {line}");
        while line != "\r\n" {
            line.clear();
            inp.read_line(&mut line).unwrap();
        }
        Ws {
            out,
            inp,
            next_id: 0,
        }
    }

    fn send_frame(&mut self, opcode: u8, payload: &[u8]) {
        let mut buf = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => buf.push(0x80 | n as u8),
            n if n <= 65535 => {
                buf.push(0x80 | 126);
                buf.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                buf.push(0x80 | 127);
                buf.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        // A zero mask key: the payload goes as it is.
        buf.extend_from_slice(&[0, 0, 0, 0]);
        buf.extend_from_slice(payload);
        self.out.write_all(&buf).unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let frame =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.send_frame(1, frame.to_string().as_bytes());
        self.next_id
    }

    /// The next text message (answering pings on the way).
    fn recv(&mut self) -> Value {
        loop {
            let mut head = [0u8; 2];
            self.inp.read_exact(&mut head).unwrap();
            let len = match head[1] & 0x7F {
                126 => {
                    let mut b = [0u8; 2];
                    self.inp.read_exact(&mut b).unwrap();
                    u16::from_be_bytes(b) as usize
                }
                127 => {
                    let mut b = [0u8; 8];
                    self.inp.read_exact(&mut b).unwrap();
                    u64::from_be_bytes(b) as usize
                }
                n => n as usize,
            };
            let mut payload = vec![0u8; len];
            self.inp.read_exact(&mut payload).unwrap();
            match head[0] & 0x0F {
                1 => return serde_json::from_slice(&payload).unwrap(),
                9 => self.send_frame(10, &payload),
                _ => {}
            }
        }
    }

    /// Reads until the answer to request `id`; returns it.
    fn answer(&mut self, id: u64) -> Value {
        loop {
            let v = self.recv();
            if v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        let v = self.answer(id);
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }
}

impl Bench {
    pub(crate) fn remote(&mut self) {
        let (conns, per_conn, rounds) = if self.quick {
            (10, 10, 1)
        } else {
            (100, 10, 2)
        };
        let sessions = conns * per_conn;
        let ok = json!({"text": "ok"});
        // A warm-up round (each session's first prompt), the quiet rounds, the stalled
        // client's prompt, the rounds beside it.
        let mut lines = vec![ok.clone(); sessions * (1 + rounds)];
        // The stalled client's one prompt: a gigabyte it will never read.
        lines.push(json!({"steps": [{"repeat": {"text": "x".repeat(1024), "count": 1_000_000}}]}));
        lines.extend(std::iter::repeat_n(ok, sessions * rounds));
        let script = write_script(&self.work, "remote.jsonl", &lines);
        let mut child = Command::new(&self.bin)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--provider",
                "scripted",
                "--script",
            ])
            .arg(&script)
            .current_dir(&self.work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env_remove("RUST_LOG")
            .env("PRIME_AGENT_SESSION_DIR", self.work.join("remote-sessions"))
            .env("PRIME_AGENT_KERNEL_ZYGOTE", "0")
            .spawn()
            .expect("spawn");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("serving ACP at ") {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "no listening line");
        }
        // Keep draining stderr so the agent never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let addr = line
            .split("http://")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let pid = child.id();
        let cwd = self.work.canonicalize().unwrap().display().to_string();

        let mut clients: Vec<Ws> = (0..conns)
            .map(|_| {
                let mut ws = Ws::connect(&addr);
                ws.call("initialize", json!({"protocolVersion": 1}));
                ws
            })
            .collect();
        let before = rss_kib(pid);
        let sids: Vec<Vec<String>> = clients
            .iter_mut()
            .map(|ws| {
                (0..per_conn)
                    .map(|_| {
                        let r = ws.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
                        r["sessionId"].as_str().unwrap().to_owned()
                    })
                    .collect()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let after = rss_kib(pid);
        let per_session = (after.saturating_sub(before)) as f64 / sessions as f64;

        let (clients, _) = prompt_rounds(clients, &sids, 1);
        let (clients, quiet) = prompt_rounds(clients, &sids, rounds);
        let settled = rss_kib(pid);

        // A client that stops reading: its session's turn streams into a socket nobody reads.
        let mut stalled = Ws::connect(&addr);
        stalled.call("initialize", json!({"protocolVersion": 1}));
        let sid =
            stalled.call("session/new", json!({"cwd": cwd, "mcpServers": []}))["sessionId"].clone();
        stalled.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "stream"}]}),
        );
        std::thread::sleep(Duration::from_millis(500));
        let (clients, busy) = prompt_rounds(clients, &sids, rounds);
        let with_stall = rss_kib(pid);

        drop(clients);
        drop(stalled);
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let _ = child.wait();

        let r = &mut self.report;
        let tag = format!("remote: {sessions} sessions over {conns} WebSocket connections");
        r.add(&format!("{tag}: prompt → response"), "ms", quiet);
        r.add(
            &format!("{tag}: prompt → response, one client stalled"),
            "ms",
            busy,
        );
        r.add(
            &format!("{tag}: RSS per idle session"),
            "KiB",
            vec![per_session],
        );
        r.add(
            &format!("{tag}: RSS, all sessions open"),
            "MiB",
            vec![after as f64 / 1024.0],
        );
        r.add(
            &format!("{tag}: RSS after {} prompts each", 1 + rounds),
            "MiB",
            vec![settled as f64 / 1024.0],
        );
        r.add(
            &format!("{tag}: RSS after {} more beside the stalled client", rounds),
            "MiB",
            vec![with_stall as f64 / 1024.0],
        );
    }
}

/// `rounds` prompts per session, each connection on its own thread taking its sessions in
/// turn (so `conns` prompts are in flight at once); the prompt → response times, in ms.
fn prompt_rounds(clients: Vec<Ws>, sids: &[Vec<String>], rounds: usize) -> (Vec<Ws>, Vec<f64>) {
    let handles: Vec<_> = clients
        .into_iter()
        .zip(sids.iter().cloned())
        .map(|(mut ws, sids)| {
            std::thread::spawn(move || {
                let mut times = Vec::new();
                for _ in 0..rounds {
                    for sid in &sids {
                        let t = Instant::now();
                        let id = ws.request(
                            "session/prompt",
                            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
                        );
                        let v = ws.answer(id);
                        assert_eq!(v["result"]["stopReason"], "end_turn", "{v}");
                        times.push(ms(t.elapsed()));
                    }
                }
                (ws, times)
            })
        })
        .collect();
    let mut clients = Vec::new();
    let mut all = Vec::new();
    for h in handles {
        let (ws, times) = h.join().unwrap();
        clients.push(ws);
        all.extend(times);
    }
    (clients, all)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
