//! Property test of the front end: random and mutated frames through the real reader thread,
//! JSON-RPC classification, main loop and handlers, in-process over a pipe.
//!
//! Invariants checked on every case: no panic, no hang, every request answered exactly once,
//! every output line a JSON-RPC 2.0 message. `FUZZ_CASES=N` sets the case count (`make fuzz`
//! runs a long campaign; `make test` a short one). `FUZZ_SEED` replays one seed.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use prime_agent::{classify_line, Agent, Exit, Incoming, MAX_LINE_BYTES};

use crate::support::TempDir;

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A shared sink the writer thread writes into.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn random_value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth > 3 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => json!(rng.next() as i64),
        3 => json!((rng.next() as f64) / 7.0),
        4 => json!("x".repeat(rng.below(40) as usize)),
        5 => json!(["\u{0}", "é", "\u{1F600}", "$SID", "\\"][rng.below(5) as usize]),
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.below(4))
                .map(|i| (format!("k{i}"), random_value(rng, depth + 1)))
                .collect(),
        ),
    }
}

fn template(rng: &mut Rng, id: i64, cwd: &str) -> Value {
    let prompt = json!([{"type":"text","text":"hi"}]);
    match rng.below(10) {
        0 => json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{"protocolVersion":1}}),
        1 => {
            json!({"jsonrpc":"2.0","id":id,"method":"session/new","params":{"cwd":cwd,"mcpServers":[]}})
        }
        2 | 3 => {
            json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{"sessionId":"$SID","prompt":prompt}})
        }
        4 => json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"$SID"}}),
        5 => {
            json!({"jsonrpc":"2.0","id":id,"method":"session/close","params":{"sessionId":"$SID"}})
        }
        6 => json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":id - 1}}),
        7 => {
            json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{"sessionId":"$SID","prompt":[{"type":"image","data":"aGk=","mimeType":"image/png"},{"type":"resource","resource":{"uri":"u","text":"t"}}]}})
        }
        8 => json!({"jsonrpc":"2.0","id":id,"method":"unknown/method","params":{}}),
        _ => {
            json!({"jsonrpc":"2.0","id":format!("s{id}"),"method":"session/new","params":{"cwd":"/nonexistent","mcpServers":[{"name":"a","type":"http","url":"https://x.example/mcp"}]}})
        }
    }
}

/// Mutates a frame: wrong types for fields, dropped fields, random values.
fn mutate_value(rng: &mut Rng, v: &mut Value) {
    if let Value::Object(map) = v {
        let keys: Vec<String> = map.keys().cloned().collect();
        if keys.is_empty() {
            return;
        }
        let key = &keys[rng.below(keys.len() as u64) as usize];
        match rng.below(3) {
            0 => {
                map.remove(key);
            }
            1 => {
                map.insert(key.clone(), random_value(rng, 0));
            }
            _ => {
                if let Some(inner) = map.get_mut(key) {
                    mutate_value(rng, inner);
                }
            }
        }
    } else if let Value::Array(items) = v {
        if !items.is_empty() {
            let i = rng.below(items.len() as u64) as usize;
            mutate_value(rng, &mut items[i]);
        }
    }
}

fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>) {
    match rng.below(6) {
        0 if !bytes.is_empty() => {
            let i = rng.below(bytes.len() as u64) as usize;
            bytes[i] = rng.next() as u8;
        }
        1 if !bytes.is_empty() => {
            let cut = rng.below(bytes.len() as u64) as usize;
            bytes.truncate(cut);
        }
        2 => bytes.extend_from_slice(&[0xff, 0xfe, b'"']),
        3 => {
            let depth = 50 + rng.below(5000) as usize;
            *bytes = format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
        }
        4 => {
            *bytes = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1{},\"method\":\"initialize\"}}",
                "0".repeat(rng.below(400) as usize)
            )
            .into_bytes()
        }
        _ => bytes.retain(|b| *b != b'\n'),
    }
}

struct Case {
    lines: Vec<Vec<u8>>,
    /// Whether the last line ends without a newline.
    no_final_newline: bool,
}

fn gen_case(rng: &mut Rng, cwd: &str) -> Case {
    let mut lines = Vec::new();
    for i in 0..(3 + rng.below(25)) {
        let mut frame = template(rng, 1000 + i as i64, cwd);
        if rng.chance(40) {
            mutate_value(rng, &mut frame);
        }
        let mut bytes = serde_json::to_vec(&frame).unwrap();
        if rng.chance(15) {
            mutate_bytes(rng, &mut bytes);
        }
        lines.push(bytes);
    }
    Case {
        lines,
        no_final_newline: rng.chance(20),
    }
}

/// Runs one case through the real reader, main loop and writer; returns the output lines.
fn run_case(seed: u64, dir: &TempDir, script: &std::path::Path) -> (u64, u64) {
    let mut rng = Rng(seed | 1);
    let cwd = dir.path().display().to_string();
    let case = gen_case(&mut rng, &cwd);
    let agent = Agent::scripted(script, dir.path().to_path_buf()).unwrap();
    let (reader, mut writer) = std::io::pipe().unwrap();
    let sink = Sink::default();
    let (conn, io) = prime_agent::spawn_transport(reader, sink.clone(), MAX_LINE_BYTES);
    let (_sig_tx, sig_rx) = crossbeam_channel::bounded::<()>(1);
    let main = thread::spawn(move || prime_agent::run(conn, Arc::new(agent), sig_rx, "0.0.0-fuzz"));

    // Open a session first so "$SID" frames can address it.
    writer.write_all(format!("{}\n", json!({"jsonrpc":"2.0","id":"open","method":"session/new","params":{"cwd":cwd,"mcpServers":[]}})).as_bytes()).unwrap();
    let sid = wait_for(&sink, |lines| {
        lines
            .iter()
            .find(|l| l["id"] == "open")
            .and_then(|l| l["result"]["sessionId"].as_str().map(str::to_owned))
    })
    .unwrap_or_else(|| panic!("seed {seed}: no session/new response"));
    let mut expected: HashMap<String, usize> = HashMap::new();
    expected.insert(json!("open").to_string(), 1);
    let n = case.lines.len();
    for (i, line) in case.lines.into_iter().enumerate() {
        let text = String::from_utf8_lossy(&line).replace("$SID", &sid);
        let bytes = if std::str::from_utf8(&line).is_ok() {
            text.into_bytes()
        } else {
            line
        };
        if std::env::var_os("FUZZ_DUMP").is_some() {
            let _ = writeln!(
                std::io::stderr(),
                "in:  {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        // Requests and invalid frames that carry an id are both answered exactly once (a
        // mutated frame may reuse the id of a valid request; both replies are then expected).
        match classify_line(&bytes) {
            Some(Incoming::Request { id, .. }) | Some(Incoming::Invalid { id, .. }) => {
                *expected.entry(id.0.to_string()).or_default() += 1;
            }
            _ => {}
        }
        writer.write_all(&bytes).unwrap();
        if !(i == n - 1 && case.no_final_newline) {
            writer.write_all(b"\n").unwrap();
        }
    }
    if case.no_final_newline {
        // A final line without a newline is only complete at EOF.
        drop(writer);
        let exit = join_within(main, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("seed {seed}: hang after EOF"));
        assert_eq!(exit, Exit::ClientClosed);
        let _ = io.join();
        check_output(seed, &sink, None);
        return (n as u64 + 1, 0);
    }
    // Every request must be answered while the client is still connected.
    let answered = wait_for(&sink, |lines| {
        let counts = response_counts(lines);
        expected
            .iter()
            .all(|(id, n)| counts.get(id).copied().unwrap_or(0) >= *n)
            .then_some(())
    });
    if answered.is_none() {
        let counts = response_counts(&lines_of(&sink));
        panic!("seed {seed}: unanswered requests; expected {expected:?}, got {counts:?}");
    }
    drop(writer);
    let exit = join_within(main, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("seed {seed}: hang after EOF"));
    assert_eq!(exit, Exit::ClientClosed);
    let _ = io.join();
    check_output(seed, &sink, Some(&expected));
    (n as u64 + 1, expected.values().sum::<usize>() as u64)
}

fn join_within<T: Send + 'static>(h: thread::JoinHandle<T>, limit: Duration) -> Option<T> {
    let deadline = Instant::now() + limit;
    while !h.is_finished() {
        if Instant::now() > deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(1));
    }
    Some(h.join().expect("main loop panicked"))
}

fn lines_of(sink: &Sink) -> Vec<Value> {
    let bytes = sink.0.lock().unwrap().clone();
    String::from_utf8(bytes)
        .expect("output is UTF-8")
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap_or_else(|e| panic!("non-JSON output line ({e}): {l}"))
        })
        .collect()
}

fn response_counts(lines: &[Value]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for l in lines.iter().filter(|l| l.get("method").is_none()) {
        *counts.entry(l["id"].to_string()).or_default() += 1;
    }
    counts
}

fn wait_for<T>(sink: &Sink, f: impl Fn(&[Value]) -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(t) = f(&lines_of(sink)) {
            return Some(t);
        }
        if Instant::now() > deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

fn check_output(seed: u64, sink: &Sink, expected: Option<&HashMap<String, usize>>) {
    let lines = lines_of(sink);
    if std::env::var_os("FUZZ_DUMP").is_some() {
        for l in &lines {
            let _ = writeln!(std::io::stderr(), "out: {l}");
        }
    }
    for l in &lines {
        assert_eq!(l["jsonrpc"], "2.0", "seed {seed}: {l}");
        let is_response = l.get("result").is_some() ^ l.get("error").is_some();
        let is_notification = l.get("method").is_some() && l.get("id").is_none();
        assert!(
            is_response || is_notification,
            "seed {seed}: not a JSON-RPC message: {l}"
        );
    }
    if let Some(expected) = expected {
        let counts = response_counts(&lines);
        for (id, n) in expected {
            if id != "null" {
                assert_eq!(
                    counts.get(id),
                    Some(n),
                    "seed {seed}: id {id} answered {:?} times, expected {n}",
                    counts.get(id)
                );
            }
        }
    }
}

fn cases() -> u64 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

#[test]
fn fuzz_front_end() {
    let dir = TempDir::new("fuzz");
    let lines: String = (0..2000)
        .map(|i| format!("{{\"text\":\"reply {i}\"}}\n"))
        .collect();
    let script = dir.write("script.jsonl", &lines);
    if let Some(seed) = std::env::var("FUZZ_SEED").ok().and_then(|v| v.parse().ok()) {
        let _ = run_case(seed, &dir, &script);
        return;
    }
    let base = std::env::var("FUZZ_BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x9E37_79B9_7F4A_7C15u64);
    let n = cases();
    let start = Instant::now();
    let (mut inputs, mut answered) = (0, 0);
    for i in 0..n {
        let (lines, requests) = run_case(
            base.wrapping_add(i.wrapping_mul(0x1000_0001)),
            &dir,
            &script,
        );
        inputs += lines;
        answered += requests;
    }
    // The campaign size goes to stderr for the closing note (`make fuzz`).
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "fuzz_front_end: {n} cases in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    // Every case is a fault (random, mutated or cut frames); "answered" counts the requests
    // checked to be answered exactly once (cases cut at EOF only check the output's shape).
    crate::support::reliability_line("fuzz_front_end", n, inputs, answered, 0);
}
