//! `make bench`: drives the release binary over stdio and prints a table plus
//! `target/bench.json`. No assertions: figures are for people, budgets are in the README.
//!
//! Every figure reports median, p99 (or min/max for small samples) and the run count.

// This program exists to print a report on stdout.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    line: String,
}

impl Proc {
    fn spawn(bin: &Path, args: &[&str], cwd: &Path) -> Proc {
        let mut child = Command::new(bin)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env_remove("RUST_LOG")
            .spawn()
            .expect("spawn prime-agent");
        let stdin = child.stdin.take();
        let out = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
        Proc {
            child,
            stdin,
            out,
            line: String::new(),
        }
    }

    fn send(&mut self, frame: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        let mut bytes = serde_json::to_vec(frame).unwrap();
        bytes.push(b'\n');
        stdin.write_all(&bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Reads lines until one contains `needle`; returns how many lines were read.
    fn read_until(&mut self, needle: &str) -> usize {
        let mut n = 0;
        loop {
            self.line.clear();
            if self.out.read_line(&mut self.line).unwrap() == 0 {
                panic!("agent closed stdout while waiting for {needle}");
            }
            n += 1;
            if self.line.contains(needle) {
                return n;
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
    }

    /// Waits for the response to `id` (the text `"id":<id>,` in a frame without a method).
    fn response(&mut self, id: u64) {
        let needle = format!("\"id\":{id},");
        loop {
            self.read_until(&needle);
            if !self.line.contains("\"method\"") {
                return;
            }
        }
    }

    fn handshake(&mut self, cwd: &Path) -> String {
        self.request(1, "initialize", json!({"protocolVersion":1}));
        self.response(1);
        self.request(
            2,
            "session/new",
            json!({"cwd": cwd.display().to_string(), "mcpServers": []}),
        );
        self.response(2);
        let v: Value = serde_json::from_str(&self.line).unwrap();
        v["result"]["sessionId"].as_str().unwrap().to_owned()
    }

    fn status_kib(&self, key: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn finish(mut self) -> Duration {
        let t = Instant::now();
        self.stdin.take();
        let _ = self.child.wait();
        t.elapsed()
    }
}

#[derive(Default)]
struct Report {
    rows: Vec<(String, String, Value)>,
}

fn stats(mut xs: Vec<f64>) -> Value {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = xs.len();
    let pick = |q: f64| xs[((n as f64 - 1.0) * q).round() as usize];
    json!({"median": pick(0.5), "p99": pick(0.99), "min": xs[0], "max": xs[n - 1], "runs": n})
}

impl Report {
    fn add(&mut self, name: &str, unit: &str, samples: Vec<f64>) {
        self.rows
            .push((name.to_owned(), unit.to_owned(), stats(samples)));
    }

    fn print(&self) {
        println!(
            "{:<58} {:>12} {:>12} {:>12} {:>6}  unit",
            "figure", "median", "p99", "max", "runs"
        );
        for (name, unit, s) in &self.rows {
            println!(
                "{:<58} {:>12.3} {:>12.3} {:>12.3} {:>6}  {unit}",
                name,
                s["median"].as_f64().unwrap(),
                s["p99"].as_f64().unwrap(),
                s["max"].as_f64().unwrap(),
                s["runs"].as_u64().unwrap_or(0)
            );
        }
    }

    fn json(&self) -> Value {
        Value::Object(
            self.rows
                .iter()
                .map(|(name, unit, s)| {
                    let mut s = s.clone();
                    s["unit"] = json!(unit);
                    (name.clone(), s)
                })
                .collect(),
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn write_script(dir: &Path, name: &str, lines: &[Value]) -> PathBuf {
    let path = dir.join(name);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/prime-agent");
    assert!(
        bin.exists(),
        "build the release binary first (make bench does)"
    );
    let work = std::env::temp_dir().join(format!("prime-agent-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let runs = if quick { 5 } else { 30 };
    let mut report = Report::default();

    // Cold start: spawn → initialize; → session/new; stdin EOF → exit.
    let hello = write_script(&work, "hello.jsonl", &[json!({"text":"hi"})]);
    let hello_s = hello.display().to_string();
    let args = [
        "--mode",
        "acp",
        "--provider",
        "scripted",
        "--script",
        hello_s.as_str(),
    ];
    let (mut init, mut new, mut exit, mut hwm, mut rss) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..runs {
        let t0 = Instant::now();
        let mut p = Proc::spawn(&bin, &args, &work);
        p.request(1, "initialize", json!({"protocolVersion":1}));
        p.response(1);
        init.push(ms(t0.elapsed()));
        p.request(
            2,
            "session/new",
            json!({"cwd": work.display().to_string(), "mcpServers": []}),
        );
        p.response(2);
        new.push(ms(t0.elapsed()));
        hwm.push(p.status_kib("VmHWM:") as f64 / 1024.0);
        rss.push(p.status_kib("VmRSS:") as f64 / 1024.0);
        exit.push(ms(p.finish()));
    }
    report.add("cold start: spawn → initialize response", "ms", init);
    report.add("cold start: spawn → session/new response", "ms", new);
    report.add("stdin EOF → process exit", "ms", exit);
    report.add("peak RSS (VmHWM) after session/new", "MiB", hwm);
    report.add("RSS (VmRSS) after session/new", "MiB", rss);

    // 100 prompt turns on one connection: memory growth and per-turn round trip.
    let turns = 100;
    let lines: Vec<Value> = (0..turns)
        .map(|i| json!({"text": format!("reply number {i}")}))
        .collect();
    let script = write_script(&work, "turns.jsonl", &lines);
    let script_s = script.display().to_string();
    let mut p = Proc::spawn(
        &bin,
        &["--provider", "scripted", "--script", &script_s],
        &work,
    );
    let sid = p.handshake(&work);
    let before = p.status_kib("VmHWM:") as f64 / 1024.0;
    let mut per_turn = vec![];
    for i in 0..turns {
        let id = 10 + i as u64;
        let t = Instant::now();
        p.request(
            id,
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type":"text","text":"go"}]}),
        );
        p.response(id);
        per_turn.push(ms(t.elapsed()));
    }
    let after = p.status_kib("VmHWM:") as f64 / 1024.0;
    p.finish();
    report.add("prompt round trip (scripted, 1 chunk)", "ms", per_turn);
    report.add(
        "peak RSS (VmHWM) after 100 prompt turns",
        "MiB",
        vec![after],
    );
    report.add(
        "peak RSS growth over 100 turns",
        "MiB",
        vec![after - before],
    );

    // Streaming through the agent: scripted deltas → client stdout.
    let deltas = if quick { 20_000 } else { 100_000 };
    let script = write_script(
        &work,
        "stream.jsonl",
        &[json!({"steps":[{"repeat":{"text":"x","count":deltas}}]})],
    );
    let script_s = script.display().to_string();
    let mut rates = vec![];
    for _ in 0..if quick { 1 } else { 5 } {
        let mut p = Proc::spawn(
            &bin,
            &["--provider", "scripted", "--script", &script_s],
            &work,
        );
        let sid = p.handshake(&work);
        let t = Instant::now();
        p.request(
            9,
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type":"text","text":"go"}]}),
        );
        let n = p.read_until("\"id\":9,");
        rates.push(n as f64 / t.elapsed().as_secs_f64());
        p.finish();
    }
    report.add(
        &format!("scripted stream: {deltas} deltas → client, throughput"),
        "deltas/s",
        rates,
    );

    // Cancel latency while the model streams.
    let n_cancel = if quick { 5 } else { 30 };
    let lines: Vec<Value> = (0..n_cancel)
        .map(|_| json!({"steps":[{"stream_until_cancelled":{"text":"tick ","interval_ms":1}}]}))
        .collect();
    let script = write_script(&work, "cancel.jsonl", &lines);
    let script_s = script.display().to_string();
    let mut p = Proc::spawn(
        &bin,
        &["--provider", "scripted", "--script", &script_s],
        &work,
    );
    let sid = p.handshake(&work);
    let mut lat = vec![];
    for i in 0..n_cancel {
        let id = 100 + i as u64;
        p.request(
            id,
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type":"text","text":"go"}]}),
        );
        p.read_until("agent_message_chunk");
        let t = Instant::now();
        p.send(&json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId": sid}}));
        p.response(id);
        lat.push(ms(t.elapsed()));
    }
    p.finish();
    report.add("cancel latency while streaming (scripted)", "ms", lat);

    // Binary sizes.
    for (name, path) in [
        (
            "binary size: release (stripped)",
            root.join("target/release/prime-agent"),
        ),
        (
            "binary size: static musl",
            root.join("target/x86_64-unknown-linux-musl/release/prime-agent"),
        ),
    ] {
        if let Ok(meta) = std::fs::metadata(&path) {
            report.add(name, "MiB", vec![meta.len() as f64 / 1_048_576.0]);
        }
    }

    report.print();
    let out = root.join("target/bench.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report.json()).unwrap()).unwrap();
    println!("\nwrote {}", out.display());
    let _ = std::fs::remove_dir_all(&work);
}
