//! `make bench`: drives the release binary over stdio and prints a table plus
//! `target/bench.json`. No budget is asserted (figures are for people, budgets are in the README);
//! the asserts there are correctness checks that keep a figure honest (one update per delta,
//! the other sessions still running while one is cancelled).
//!
//! Every figure reports median, p99, min/max and the run count. `BENCH_QUICK=1` runs fewer
//! and smaller samples (a smoke run, not figures to quote). `BENCH_MULTI=1` adds
//! `--multi-session` to every agent the benchmark spawns (the `sessions` section always has it).

// This program exists to print a report on stdout.
#![allow(clippy::print_stdout)]

#[path = "support/loopback.rs"]
mod loopback;
#[path = "support/mcp.rs"]
mod mcp;
#[path = "support/prewarm.rs"]
mod prewarm;
#[path = "support/remote.rs"]
mod remote;
#[path = "support/sandbox.rs"]
mod sandbox;
#[path = "support/scale.rs"]
mod scale;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use loopback::{Plan, Server};

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<Box<dyn Read>>,
    line: String,
}

impl Proc {
    fn spawn(bin: &Path, args: &[&str], cwd: &Path) -> Proc {
        Proc::spawn_env(bin, args, cwd, &[])
    }

    fn spawn_env(bin: &Path, args: &[&str], cwd: &Path, env: &[(&str, String)]) -> Proc {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env_remove("RUST_LOG")
            .env_remove("PRIME_AGENT_MULTI_SESSION")
            // Rows are taken with tracing off unless a section turns it on (`traced_turns`).
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            // Session files go to the bench's work dir, never the user's agent dir.
            .env("PRIME_AGENT_SESSION_DIR", cwd.join("sessions"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn");
        let stdin = child.stdin.take();
        let stdout: Box<dyn Read> = Box::new(child.stdout.take().unwrap());
        Proc {
            child,
            stdin,
            out: BufReader::with_capacity(1 << 20, stdout),
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

    /// Reads one line into `self.line`; panics at EOF.
    fn next_line(&mut self, waiting_for: &str) {
        self.line.clear();
        if self.out.read_line(&mut self.line).unwrap() == 0 {
            panic!("agent closed stdout while waiting for {waiting_for}");
        }
    }

    /// Reads lines until one contains `needle`; returns how many lines were read.
    fn read_until(&mut self, needle: &str) -> usize {
        let mut n = 0;
        loop {
            self.next_line(needle);
            n += 1;
            if self.line.contains(needle) {
                return n;
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
    }

    fn prompt(&mut self, id: u64, sid: &str) {
        self.prompt_text(id, sid, "go");
    }

    fn prompt_text(&mut self, id: u64, sid: &str, text: &str) {
        self.request(
            id,
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type":"text","text":text}]}),
        );
    }

    /// Reads and parses the next frame.
    fn frame(&mut self, waiting_for: &str) -> Value {
        self.next_line(waiting_for);
        serde_json::from_str(&self.line).unwrap_or_else(|e| panic!("{e}: {}", self.line))
    }

    fn cancel(&mut self, sid: &str) {
        self.send(&json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId": sid}}));
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

    /// The streaming reader: reads until the response to `id`, stamping the arrival of every
    /// line that contains `needle` and calling `on_hit` after each. The benchmark's ceiling is
    /// measured through this same function.
    fn read_stream(
        &mut self,
        id: u64,
        needle: &str,
        expect: usize,
        on_hit: &mut dyn FnMut(&str),
    ) -> Vec<Instant> {
        let done = format!("\"id\":{id},");
        let mut hits = Vec::with_capacity(expect);
        loop {
            self.next_line(&done);
            if self.line.contains(needle) {
                hits.push(Instant::now());
                on_hit(&self.line);
            } else if self.line.contains(&done) && !self.line.contains("\"method\"") {
                return hits;
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

    fn hwm_mib(&self) -> f64 {
        self.status_kib("VmHWM:") as f64 / 1024.0
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
    notes: Vec<String>,
}

fn stats(mut xs: Vec<f64>) -> Value {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = xs.len();
    let pick = |q: f64| xs[((n as f64 - 1.0) * q).round() as usize];
    json!({"median": pick(0.5), "p99": pick(0.99), "min": xs[0], "max": xs[n - 1], "runs": n})
}

impl Report {
    fn add(&mut self, name: &str, unit: &str, samples: Vec<f64>) {
        if samples.is_empty() {
            return;
        }
        self.rows
            .push((name.to_owned(), unit.to_owned(), stats(samples)));
    }

    fn note(&mut self, text: String) {
        println!("note: {text}");
        self.notes.push(text);
    }

    fn print(&self) {
        println!(
            "{:<62} {:>11} {:>11} {:>11} {:>11} {:>7}  unit",
            "figure", "median", "p99", "min", "max", "runs"
        );
        let f = |s: &Value, k: &str| s[k].as_f64().unwrap();
        for (name, unit, s) in &self.rows {
            println!(
                "{:<62} {:>11.3} {:>11.3} {:>11.3} {:>11.3} {:>7}  {unit}",
                name,
                f(s, "median"),
                f(s, "p99"),
                f(s, "min"),
                f(s, "max"),
                s["runs"].as_u64().unwrap_or(0)
            );
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }

    fn json(&self) -> Value {
        let mut figures: serde_json::Map<String, Value> = self
            .rows
            .iter()
            .map(|(name, unit, s)| {
                let mut s = s.clone();
                s["unit"] = json!(unit);
                (name.clone(), s)
            })
            .collect();
        figures.insert("_notes".into(), json!(self.notes));
        figures.insert(
            "_machine".into(),
            json!({"cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)}),
        );
        Value::Object(figures)
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

struct Bench {
    bin: PathBuf,
    work: PathBuf,
    quick: bool,
    /// `BENCH_MULTI=1`: every agent runs with `--multi-session`.
    multi: bool,
    /// The installed copy of the static build, for the side-by-side stream line.
    static_bin: Option<PathBuf>,
    report: Report,
}

/// A copy of a built binary, as an installer would make it. The file lld has just written sits
/// in the page cache in a form that a page fault maps in much larger pieces than a copied (or
/// re-read) file: the same bytes measured 4.3 MiB peak RSS after `session/new` straight from
/// `target/release` and 3.3 MiB as a copy. People run installed copies, so that is what is
/// measured. A missing binary stays missing (the caller checks).
fn installed(built: &std::path::Path, work: &std::path::Path, name: &str) -> PathBuf {
    let copy = work.join(name);
    match std::fs::copy(built, &copy) {
        Ok(_) => copy,
        Err(_) => built.to_path_buf(),
    }
}

/// Runs of each build in the glibc/static stream comparison. One run varies by about ±20% on a
/// shared 2-core host (5 runs moved the ratio's median by ±0.15 from one bench to the next);
/// 15 interleaved runs of about 0.2 s each keep the comparison to a few seconds.
const SIDE_BY_SIDE_RUNS: usize = 15;

/// The stream comparisons run without the kernel zygote: it starts Python right after
/// `session/new`, and its few hundred ms of CPU would land on one 0.2 s stream run or another
/// at random (on 2 cores it took a third of the CPU during a run, in `perf`), charging a start-up
/// that has nothing to do with streaming to whichever build it overlapped.
fn no_zygote() -> [(&'static str, String); 1] {
    [("PRIME_AGENT_KERNEL_ZYGOTE", "0".to_owned())]
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // `BENCH_BIN` swaps in another binary or a wrapper script (e.g. one that execs
    // `perf record -- target/release/prime-agent "$@"`) for profiling. `make bench` sets it to
    // the release build, kept aside before `cargo bench` relinks target/release/prime-agent
    // under the bench profile: that build's symbol names differ, so scripts/startup.order
    // does not apply to it and its start-up RSS is about 1.3 MiB higher.
    let bench_bin_set = std::env::var_os("BENCH_BIN").is_some();
    let work = std::env::temp_dir().join(format!("prime-agent-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let bin = match std::env::var_os("BENCH_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => installed(
            &root.join("target/release/prime-agent"),
            &work,
            "prime-agent",
        ),
    };
    assert!(
        bin.exists(),
        "build the release binary first (make bench does)"
    );
    // `BENCH_STATIC_BIN` swaps the static build the same way (another build's variant).
    let static_bin = installed(
        &std::env::var_os("BENCH_STATIC_BIN").map_or_else(
            || root.join("target/x86_64-unknown-linux-musl/release/prime-agent"),
            PathBuf::from,
        ),
        &work,
        "prime-agent-static",
    );
    let mut b = Bench {
        bin,
        work,
        quick: std::env::var_os("BENCH_QUICK").is_some(),
        multi: std::env::var("BENCH_MULTI").is_ok_and(|v| v.trim() == "1"),
        static_bin: Some(static_bin.clone()),
        report: Report::default(),
    };
    if b.multi {
        b.report
            .note("BENCH_MULTI=1: every agent spawned with --multi-session".into());
    }
    if !bench_bin_set {
        b.report.note(
            "no BENCH_BIN: measuring the bench profile's relink of target/release/prime-agent, \
             which scripts/startup.order does not match (start-up RSS higher); make bench \
             measures the release build"
                .into(),
        );
    }

    // `BENCH_ONLY=stream,cancel` runs only the named sections.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let on = |name: &str| only.is_empty() || only.split(',').any(|o| o.trim() == name);
    if on("start") {
        b.cold_start("", &b.bin.clone());
        if static_bin.exists() {
            b.cold_start(" (static)", &static_bin);
        } else {
            b.report
                .note("no static binary (musl toolchain missing): static rows skipped".into());
        }
    }
    if on("memory") {
        b.turns();
        b.big_turn();
    }
    if on("tracing") {
        b.traced_turns();
    }
    if on("stream") {
        b.scripted_stream();
        b.provider_stream();
    }
    if on("cancel") {
        b.cancels();
    }
    if on("sessions") {
        b.sessions();
    }
    if on("gates") {
        b.gates();
    }
    if on("mcp") {
        b.mcp();
    }
    if on("context") {
        b.context();
    }
    if on("persist") {
        b.persist();
    }
    if on("harness") {
        b.harness();
    }
    if on("store") {
        b.store();
    }
    if on("kernel") {
        b.kernel();
    }
    if on("scale") {
        b.scale();
    }
    if on("prewarm") {
        b.prewarm();
    }
    if on("sandbox") {
        b.sandbox();
    }
    if on("remote") {
        b.remote();
    }

    for (name, path) in [
        (
            "binary size: release (stripped)",
            root.join("target/release/prime-agent"),
        ),
        ("binary size: static musl (stripped)", static_bin),
    ] {
        if let Ok(meta) = std::fs::metadata(&path) {
            b.report
                .add(name, "MB", vec![meta.len() as f64 / 1_000_000.0]);
        }
    }

    println!();
    b.report.print();
    let out = root.join("target/bench.json");
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&b.report.json()).unwrap(),
    )
    .unwrap();
    println!("\nwrote {}", out.display());
    let _ = std::fs::remove_dir_all(&b.work);
}

/// A loopback OTLP/HTTP collector that reads each request and answers `200 {}`: its URL and
/// the count of requests taken.
fn otlp_sink() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut out = stream.try_clone().unwrap();
                let mut r = BufReader::new(stream);
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.trim_end().to_ascii_lowercase();
                        if l.is_empty() {
                            break;
                        }
                        if let Some(v) = l.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    seen.fetch_add(1, Ordering::SeqCst);
                    let reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
                    if out.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, count)
}

/// `turns` prompt round trips on `sid` (ids from 10), each after `before` (untimed).
fn timed_prompts(p: &mut Proc, sid: &str, turns: usize, mut before: impl FnMut()) -> Vec<f64> {
    let mut per_turn = Vec::with_capacity(turns);
    for i in 0..turns {
        let id = 10 + i as u64;
        before();
        let t = Instant::now();
        p.prompt(id, sid);
        p.response(id);
        per_turn.push(ms(t.elapsed()));
    }
    per_turn
}

impl Bench {
    /// Spawns an agent binary, with `--multi-session` first when `BENCH_MULTI=1`.
    fn agent(&self, bin: &Path, args: &[&str], env: &[(&str, String)]) -> Proc {
        let mut all: Vec<&str> = Vec::with_capacity(args.len() + 1);
        if self.multi {
            all.push("--multi-session");
        }
        all.extend_from_slice(args);
        Proc::spawn_env(bin, &all, &self.work, env)
    }

    fn runs(&self, full: usize, quick: usize) -> usize {
        if self.quick {
            quick
        } else {
            full
        }
    }

    /// Cold start: spawn → initialize; → session/new; stdin EOF → exit. Also the floor: how
    /// long this machine takes to spawn and reap a trivial process.
    fn cold_start(&mut self, label: &str, bin: &Path) {
        let hello = write_script(&self.work, "hello.jsonl", &[json!({"text":"hi"})]);
        let hello_s = hello.display().to_string();
        let args = [
            "--mode",
            "acp",
            "--provider",
            "scripted",
            "--script",
            &hello_s,
        ];
        let runs = self.runs(50, 5);
        let (mut init, mut new, mut exit, mut hwm) = (vec![], vec![], vec![], vec![]);
        for _ in 0..runs {
            let t0 = Instant::now();
            let mut p = self.agent(bin, &args, &[]);
            p.request(1, "initialize", json!({"protocolVersion":1}));
            p.response(1);
            init.push(ms(t0.elapsed()));
            p.request(
                2,
                "session/new",
                json!({"cwd": self.work.display().to_string(), "mcpServers": []}),
            );
            p.response(2);
            new.push(ms(t0.elapsed()));
            hwm.push(p.hwm_mib());
            exit.push(ms(p.finish()));
        }
        let r = &mut self.report;
        r.add(
            &format!("cold start{label}: spawn → initialize response"),
            "ms",
            init,
        );
        r.add(
            &format!("cold start{label}: spawn → session/new response"),
            "ms",
            new,
        );
        r.add(&format!("stdin EOF → process exit{label}"), "ms", exit);
        r.add(
            &format!("peak RSS (VmHWM) after session/new{label}"),
            "MiB",
            hwm,
        );
        if label.is_empty() {
            let mut floor = vec![];
            for _ in 0..runs {
                let t0 = Instant::now();
                let _ = Command::new("true").status();
                floor.push(ms(t0.elapsed()));
            }
            r.add("floor: spawn → exit of `true` (this machine)", "ms", floor);
        }
    }

    /// 100 prompt turns on one connection: memory growth against the conversation's size.
    fn turns(&mut self) {
        let turns = 100;
        let filler = "lorem ipsum dolor sit amet ".repeat(38); // ~1 KiB per reply
        let replies: Vec<String> = (0..turns).map(|i| format!("reply {i}: {filler}")).collect();
        let lines: Vec<Value> = replies.iter().map(|t| json!({ "text": t })).collect();
        let script = write_script(&self.work, "turns.jsonl", &lines);
        let script_s = script.display().to_string();
        let mut p = self.agent(
            &self.bin,
            &["--provider", "scripted", "--script", &script_s],
            &[],
        );
        let sid = p.handshake(&self.work);
        let before = p.hwm_mib();
        let mut per_turn = vec![];
        let mut at10 = 0.0;
        for i in 0..turns {
            let id = 10 + i as u64;
            let t = Instant::now();
            p.prompt(id, &sid);
            p.response(id);
            per_turn.push(ms(t.elapsed()));
            if i == 9 {
                at10 = p.hwm_mib();
            }
        }
        let after = p.hwm_mib();
        p.finish();
        // The conversation's own bytes: the prompt "go" and the reply text, per turn.
        let conv = |range: std::ops::Range<usize>| -> f64 {
            replies[range].iter().map(|r| r.len() + 2).sum::<usize>() as f64 / 1_048_576.0
        };
        let r = &mut self.report;
        r.add("prompt round trip (scripted, 1 KiB reply)", "ms", per_turn);
        r.add(
            "peak RSS (VmHWM) after 100 prompt turns",
            "MiB",
            vec![after],
        );
        r.add(
            "peak RSS growth, session/new → turn 100",
            "MiB",
            vec![after - before],
        );
        r.add(
            "peak RSS growth, turn 10 → turn 100",
            "MiB",
            vec![after - at10],
        );
        r.add(
            "conversation text added, turn 10 → turn 100",
            "MiB",
            vec![conv(10..turns)],
        );
    }

    /// The prompt round trip of `turns` with OTLP export on (docs/tracing.md), to a loopback
    /// collector that answers every request at once: what recording and exporting the spans
    /// of a turn costs it.
    fn traced_turns(&mut self) {
        let turns = 100;
        let filler = "lorem ipsum dolor sit amet ".repeat(38);
        let lines: Vec<Value> = (0..turns)
            .map(|i| json!({ "text": format!("reply {i}: {filler}") }))
            .collect();
        let script = write_script(&self.work, "traced.jsonl", &lines);
        let script_s = script.display().to_string();
        let (endpoint, exports) = otlp_sink();
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            // Small batches, sent often: the export runs while the turns do.
            ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
        ];
        let mut p = self.agent(
            &self.bin,
            &["--provider", "scripted", "--script", &script_s],
            &env,
        );
        let sid = p.handshake(&self.work);
        let per_turn = timed_prompts(&mut p, &sid, turns, || {});
        p.finish();
        let r = &mut self.report;
        r.add(
            "prompt round trip (scripted, 1 KiB reply), spans exported (OTLP, loopback)",
            "ms",
            per_turn,
        );
        let posts = exports.load(std::sync::atomic::Ordering::SeqCst);
        r.note(format!(
            "traced turns: {posts} OTLP export requests received"
        ));
    }

    /// A tool turn as harnesses see it (docs/harnesses.md): one model call with a tool call
    /// (announced, usage, run, `rawOutput`), then the answer, and the edge between them (the
    /// scripted provider sends no HTTP, so no headers); then a one-call turn over loopback
    /// HTTP, whose request carries the request id and retry markers. The features cannot be
    /// switched off: run the section with `BENCH_BIN` pointing at a build without them (the
    /// commit before they landed) to compare.
    fn harness(&mut self) {
        let turns = self.runs(100, 20);
        let mut lines = Vec::new();
        for i in 0..turns {
            lines.push(json!({"steps": [{"tool_call": {"name": "todo", "arguments": {"todos": [{"content": format!("step {i}"), "status": "pending"}]}}}]}));
            lines.push(json!({ "text": format!("done {i}") }));
        }
        let script = write_script(&self.work, "harness.jsonl", &lines);
        let script_s = script.display().to_string();
        let args = [
            "--provider",
            "scripted",
            "--script",
            script_s.as_str(),
            "--no-session",
            "--tools",
            "todo",
        ];
        let mut p = self.agent(&self.bin, &args, &[]);
        let sid = p.handshake(&self.work);
        let per_turn = timed_prompts(&mut p, &sid, turns, || {});
        p.finish();
        self.report.add(
            "prompt round trip, one tool call + answer (scripted)",
            "ms",
            per_turn,
        );
        let server = Server::start();
        let (mut p, sid) = self.provider_agent(&server);
        let per_turn = timed_prompts(&mut p, &sid, turns, || server.plan(Plan::Blast(1)));
        p.finish();
        self.report.add(
            "prompt round trip, one model call (loopback HTTP)",
            "ms",
            per_turn,
        );
    }

    /// What the session file costs: prompt round trips with it and with `--no-session` (each
    /// turn writes two messages and flushes), and `session/load` of a 1,000-message session
    /// (read, parse, replay every message to the client, answer), close and load again.
    /// `session/list` and `-c` start-up over 1,000 stored sessions, once with small files and
    /// once with files 100 times bigger: both should stay flat as files grow (an index and
    /// header + tail reads, `persist/index.rs`).
    fn store(&mut self) {
        let sessions = 1000;
        let script = write_script(&self.work, "store.jsonl", &[json!({"text": "hi"})]);
        let script_s = script.display().to_string();
        for (label, kb) in [("2 KB", 2usize), ("200 KB", 200)] {
            let dir = self.work.join(format!("store-{kb}"));
            let sessions_dir = dir.join("sessions");
            std::fs::create_dir_all(&sessions_dir).unwrap();
            let cwd = dir.display().to_string();
            let pad = "z".repeat(1024);
            for i in 0..sessions {
                let id = format!("0190{i:04x}-0000-7000-8000-000000000000");
                let mut text = format!(
                    "{}\n",
                    json!({"type":"session","version":3,"id":id,"timestamp":"2026-01-01T00:00:00.000Z","cwd":cwd})
                );
                let mut parent = "null".to_owned();
                let mut n = 0;
                let mut entry = |text: &mut String, body: &str, kind: &str| {
                    n += 1;
                    text.push_str(&format!(
                        r#"{{"id":"{n:08x}",{body},"parentId":{parent},"timestamp":"2026-01-01T00:{:02}:{:02}.000Z","type":"{kind}"}}"#,
                        i / 60 % 60,
                        i % 60
                    ));
                    text.push('\n');
                    parent = format!("\"{n:08x}\"");
                };
                entry(
                    &mut text,
                    &format!(r#""name":"session {i}""#),
                    "session_info",
                );
                for _ in 0..kb {
                    entry(
                        &mut text,
                        &format!(r#""message":{{"content":"{pad}","role":"user","timestamp":1}}"#),
                        "message",
                    );
                }
                std::fs::write(sessions_dir.join(format!("{id}.jsonl")), text).unwrap();
            }
            let env = [(
                "PRIME_AGENT_SESSION_DIR",
                sessions_dir.display().to_string(),
            )];
            let args = ["--provider", "scripted", "--script", script_s.as_str()];
            // session/list: the first call builds the index (its own row), then every call.
            let mut p = self.agent(&self.bin, &args, &env);
            p.request(1, "initialize", json!({"protocolVersion": 1}));
            p.response(1);
            let t = Instant::now();
            p.request(2, "session/list", json!({}));
            p.response(2);
            let first = ms(t.elapsed());
            let mut lists = Vec::new();
            for i in 0..self.runs(200, 40) {
                let id = 10 + i as u64;
                let t = Instant::now();
                p.request(id, "session/list", json!({}));
                p.response(id);
                lists.push(ms(t.elapsed()));
            }
            p.finish();
            self.report.add(
                &format!("session/list, first (index built), 1,000 sessions of {label}"),
                "ms",
                vec![first],
            );
            self.report.add(
                &format!("session/list, 1,000 sessions of {label}"),
                "ms",
                lists,
            );
            // -c: spawn to the session/new answer, the newest session of the cwd picked.
            let mut starts = Vec::new();
            let mut cont = vec!["-c"];
            cont.extend_from_slice(&args);
            for _ in 0..self.runs(40, 10) {
                let t = Instant::now();
                let mut p = Proc::spawn_env(&self.bin, &cont, &dir, &env);
                p.handshake(&dir);
                starts.push(ms(t.elapsed()));
                p.finish();
            }
            self.report.add(
                &format!("-c start-up to session/new, 1,000 sessions of {label}"),
                "ms",
                starts,
            );
        }
    }

    fn persist(&mut self) {
        let turns = self.runs(200, 40);
        let lines: Vec<Value> = (0..turns)
            .map(|i| json!({ "text": format!("reply {i}") }))
            .collect();
        let script = write_script(&self.work, "persist.jsonl", &lines);
        let script_s = script.display().to_string();
        let mut medians = Vec::new();
        for (label, extra) in [
            ("session file", None),
            ("--no-session", Some("--no-session")),
        ] {
            let mut args = vec!["--provider", "scripted", "--script", script_s.as_str()];
            args.extend(extra);
            let mut p = self.agent(&self.bin, &args, &[]);
            let sid = p.handshake(&self.work);
            let mut per_turn = Vec::new();
            for i in 0..turns {
                let id = 10 + i as u64;
                let t = Instant::now();
                p.prompt(id, &sid);
                p.response(id);
                per_turn.push(ms(t.elapsed()));
            }
            p.finish();
            let mut sorted = per_turn.clone();
            sorted.sort_by(f64::total_cmp);
            medians.push(sorted[sorted.len() / 2]);
            self.report.add(
                &format!("prompt round trip, {label} (scripted)"),
                "ms",
                per_turn,
            );
        }
        self.report.add(
            "persistence per message (median round-trip difference / 2)",
            "ms",
            vec![(medians[0] - medians[1]) / 2.0],
        );

        // A stored session of 1,000 messages (500 prompts and replies of ~200 bytes).
        let sid = "0190bench-0000-7000-8000-000000001000";
        let dir = self.work.join("sessions");
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = format!(
            "{}\n",
            json!({"type":"session","version":3,"id":sid,"timestamp":"2026-01-01T00:00:00.000Z","cwd":self.work.display().to_string()})
        );
        let filler = "lorem ipsum dolor sit amet ".repeat(7);
        let mut parent = Value::Null;
        for i in 0..1000 {
            let id = format!("{i:08x}");
            let message = if i % 2 == 0 {
                json!({"role":"user","content":format!("prompt {i} {filler}"),"timestamp":0})
            } else {
                json!({"role":"assistant","content":[{"type":"text","text":format!("reply {i} {filler}")}],"stopReason":"stop","timestamp":0})
            };
            let line = json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:00.000Z","message":message});
            text.push_str(&format!("{line}\n"));
            parent = json!(id);
        }
        std::fs::write(dir.join(format!("{sid}.jsonl")), text).unwrap();
        let mut p = self.agent(
            &self.bin,
            &["--provider", "scripted", "--script", &script_s],
            &[],
        );
        p.request(1, "initialize", json!({"protocolVersion":1}));
        p.response(1);
        let mut loads = Vec::new();
        let cwd = self.work.display().to_string();
        for i in 0..self.runs(20, 5) {
            let id = 100 + 2 * i as u64;
            let t = Instant::now();
            p.request(
                id,
                "session/load",
                json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
            );
            p.response(id);
            loads.push(ms(t.elapsed()));
            p.request(id + 1, "session/close", json!({"sessionId": sid}));
            p.response(id + 1);
        }
        p.finish();
        self.report.add(
            "session/load of 1,000 messages (replay included)",
            "ms",
            loads,
        );
    }

    /// One turn that streams 1 MB of text, then one `bash` call printing 100 MB.
    fn big_turn(&mut self) {
        let chunk = "x".repeat(1000);
        let script = write_script(
            &self.work,
            "big.jsonl",
            &[
                json!({"steps":[
                    {"repeat":{"text": chunk, "count": 1000}},
                    {"tool_call":{"name":"bash","arguments":{
                        "command":"head -c 100000000 /dev/zero | tr '\\0' x"}}}]}),
                json!({"text":"done"}),
            ],
        );
        let script_s = script.display().to_string();
        let mut p = self.agent(
            &self.bin,
            &["--provider", "scripted", "--script", &script_s],
            &[],
        );
        let sid = p.handshake(&self.work);
        let t = Instant::now();
        p.prompt(9, &sid);
        p.response(9);
        let took = ms(t.elapsed());
        let hwm = p.hwm_mib();
        p.finish();
        let r = &mut self.report;
        r.add(
            "peak RSS (VmHWM) after 1 MB text + 100 MB bash output",
            "MiB",
            vec![hwm],
        );
        r.add("  that turn's wall time", "ms", vec![took]);
    }

    /// Scripted deltas → client stdout: the agent without any network.
    fn scripted_stream(&mut self) {
        let deltas = self.runs(100_000, 20_000);
        let script = write_script(
            &self.work,
            "stream.jsonl",
            &[json!({"steps":[{"repeat":{"text":"tok ","count":deltas}}]})],
        );
        let script_s = script.display().to_string();
        let label = format!("scripted stream: {deltas} deltas → client");
        let bins = self.side_by_side();
        let mut rates = vec![vec![]; bins.len()];
        // Interleaved (glibc, static, static, glibc, ...): a shared host's load drifts, and
        // back-to-back blocks would charge the drift to one build.
        for run in 0..self.runs(SIDE_BY_SIDE_RUNS, 1) {
            for k in order(run, bins.len()) {
                let rate = self.scripted_stream_rate(&bins[k], &script_s, deltas);
                rates[k].push(rate);
            }
        }
        self.add_side_by_side(&label, "scripted stream", rates);
    }

    /// The glibc build, and the static one when it is built: the two `make bench` compares.
    fn side_by_side(&self) -> Vec<PathBuf> {
        let mut bins = vec![self.bin.clone()];
        bins.extend(self.static_bin.clone().filter(|b| b.exists()));
        bins
    }

    /// Reports the rates of `side_by_side`'s builds and, with both, the static/glibc ratio of
    /// their medians.
    fn add_side_by_side(&mut self, label: &str, what: &str, mut rates: Vec<Vec<f64>>) {
        let statics = (rates.len() > 1).then(|| rates.pop().unwrap());
        let glibc = rates.pop().unwrap_or_default();
        let glibc_median = stats(glibc.clone())["median"].as_f64().unwrap_or(0.0);
        self.report.add(label, "deltas/s", glibc);
        if let Some(statics) = statics {
            let static_median = stats(statics.clone())["median"].as_f64().unwrap_or(0.0);
            self.report
                .add(&format!("{label} (static)"), "deltas/s", statics);
            if glibc_median > 0.0 {
                self.report.add(
                    &format!("{what} throughput, static / glibc (medians)"),
                    "ratio",
                    vec![static_median / glibc_median],
                );
            }
        }
    }

    fn scripted_stream_rate(&mut self, bin: &Path, script: &str, deltas: usize) -> f64 {
        let args = ["--provider", "scripted", "--script", script];
        let mut p = self.agent(bin, &args, &no_zygote());
        let sid = p.handshake(&self.work);
        let t = Instant::now();
        p.prompt(9, &sid);
        let hits = p.read_stream(9, "agent_message_chunk", deltas, &mut |_| {});
        p.finish();
        hits.len() as f64 / (*hits.last().unwrap() - t).as_secs_f64()
    }

    fn provider_agent(&self, server: &Server) -> (Proc, String) {
        self.provider_agent_of(&self.bin.clone(), server, &[])
    }

    fn provider_agent_of(
        &self,
        bin: &Path,
        server: &Server,
        env: &[(&str, String)],
    ) -> (Proc, String) {
        let dir = self.work.join("agent-dir");
        std::fs::create_dir_all(&dir).unwrap();
        let models = json!({"providers": {"bench": {
            "baseUrl": server.url(), "api": "openai-completions", "apiKey": "bench-key",
            "models": [{"id": "bench-model", "reasoning": false, "input": ["text"]}]}}});
        std::fs::write(dir.join("models.json"), models.to_string()).unwrap();
        let mut p = self.agent(
            bin,
            &[
                "--provider",
                "bench",
                "--model",
                "bench-model",
                "--no-context-files",
            ],
            &[
                ("PRIME_AGENT_CODING_AGENT_DIR", dir.display().to_string()),
                ("HOME", dir.display().to_string()),
            ]
            .into_iter()
            .chain(env.iter().cloned())
            .collect::<Vec<_>>(),
        );
        let sid = p.handshake(&self.work);
        (p, sid)
    }

    /// A 200,000-token conversation against the loopback OpenAI server (issue 12): the time of
    /// a prompt turn (building and sending the whole conversation, a one-delta reply), the
    /// peak RSS, and what a `/compact` costs beyond one such model call.
    fn context(&mut self) {
        let server = Server::start();
        let (mut p, sid) = self.provider_agent(&server);
        // 10 prompts of 80,000 chars: 200,000 estimated tokens in 20 messages.
        let chunk = "lorem ipsum dolor sit amet ".repeat(80_000 / 27 + 1);
        let mut id = 10;
        for _ in 0..10 {
            server.plan(Plan::Blast(1));
            p.prompt_text(id, &sid, &chunk);
            p.response(id);
            id += 1;
        }
        let mut turns = vec![];
        for _ in 0..self.runs(20, 5) {
            server.plan(Plan::Blast(1));
            let t = Instant::now();
            p.prompt_text(id, &sid, "next");
            p.response(id);
            turns.push(ms(t.elapsed()));
            id += 1;
        }
        let model_call = {
            let mut sorted = turns.clone();
            sorted.sort_by(f64::total_cmp);
            sorted[sorted.len() / 2]
        };
        self.report.add(
            "200k-token conversation: prompt turn (request built + sent, loopback)",
            "ms",
            turns,
        );
        self.report.add(
            "200k-token conversation: peak RSS (VmHWM)",
            "MiB",
            vec![p.hwm_mib()],
        );
        // `/compact`: the cut, the serialisation and the splice, plus one summary call of
        // about the same size, which the row subtracts (the median turn above).
        server.plan(Plan::Blast(1));
        let t = Instant::now();
        p.prompt_text(id, &sid, "/compact");
        p.response(id);
        let compact = ms(t.elapsed());
        self.report.add(
            "200k-token conversation: /compact minus one model call",
            "ms",
            vec![(compact - model_call).max(0.0)],
        );
        id += 1;
        server.plan(Plan::Blast(1));
        let t = Instant::now();
        p.prompt_text(id, &sid, "next");
        p.response(id);
        self.report.add(
            "after /compact: prompt turn (summary + 20k kept tokens)",
            "ms",
            vec![ms(t.elapsed())],
        );
        p.finish();
    }

    /// OpenAI SSE over loopback HTTP → agent → client: throughput, per-delta latency, and the
    /// client's own ceiling through the same reading code.
    fn provider_stream(&mut self) {
        let deltas = self.runs(100_000, 20_000);
        let server = Server::start();
        let needle = "agent_message_chunk";

        // Throughput: the server writes as fast as the agent reads. Interleaved with the
        // static build, as the scripted stream.
        let mut sample_line = String::new();
        let bins = self.side_by_side();
        let mut rates = vec![vec![]; bins.len()];
        for run in 0..self.runs(SIDE_BY_SIDE_RUNS, 1) {
            for k in order(run, bins.len()) {
                let (mut p, sid) = self.provider_agent_of(&bins[k], &server, &no_zygote());
                server.plan(Plan::Blast(deltas));
                p.prompt(9, &sid);
                let hits = p.read_stream(9, needle, deltas, &mut |line| {
                    if sample_line.is_empty() {
                        line.clone_into(&mut sample_line);
                    }
                });
                let t0 = server.stamps()[0];
                assert_eq!(hits.len(), deltas, "one update per delta");
                rates[k].push(deltas as f64 / (*hits.last().unwrap() - t0).as_secs_f64());
                p.finish();
            }
        }
        let label = format!("provider stream (OpenAI SSE, loopback): {deltas} deltas");
        self.add_side_by_side(&format!("{label}, throughput"), "provider stream", rates);

        // Latency: one delta in flight at a time; server write → client read of its update.
        let (mut p, sid) = self.provider_agent(&server);
        let (ack_tx, ack_rx) = mpsc::channel();
        server.plan(Plan::Lockstep(deltas, ack_rx));
        p.prompt(9, &sid);
        let hits = p.read_stream(9, needle, deltas, &mut |_| {
            let _ = ack_tx.send(());
        });
        let sent = server.stamps();
        p.finish();
        assert_eq!(hits.len(), sent.len());
        let lat: Vec<f64> = hits
            .iter()
            .zip(&sent)
            .map(|(r, s)| (*r - *s).as_secs_f64() * 1e6)
            .collect();
        self.report.add(
            &format!("{label}, latency server write → client read"),
            "µs",
            lat,
        );

        // The client's ceiling: the same lines, from `cat`, through the same reading code.
        let file = self.work.join("ceiling.ndjson");
        let mut text = String::with_capacity((sample_line.len() + 1) * deltas + 100);
        for _ in 0..deltas {
            text.push_str(&sample_line);
        }
        text.push_str("{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"stopReason\":\"end_turn\"}}\n");
        std::fs::write(&file, text).unwrap();
        let mut rates = vec![];
        for _ in 0..self.runs(5, 1) {
            let t = Instant::now();
            let mut p = Proc::spawn(Path::new("cat"), &[&file.display().to_string()], &self.work);
            let hits = p.read_stream(9, needle, deltas, &mut |_| {});
            rates.push(hits.len() as f64 / (*hits.last().unwrap() - t).as_secs_f64());
            p.finish();
        }
        self.report.add(
            "bench client ceiling: same lines from `cat`, same reader",
            "lines/s",
            rates,
        );
    }

    /// Cancel latency: `session/cancel` written → `cancelled` response read.
    fn cancels(&mut self) {
        let n = self.runs(30, 5);
        let cancel_row = |r: &mut Report, what: &str, lat: Vec<f64>| {
            r.add(&format!("cancel latency while {what}"), "ms", lat)
        };

        // Scripted streaming.
        let lines: Vec<Value> = (0..n)
            .map(|_| json!({"steps":[{"stream_until_cancelled":{"text":"tick ","interval_ms":1}}]}))
            .collect();
        let lat = self.cancel_loop(
            "cancel.jsonl",
            &lines,
            "agent_message_chunk",
            None,
            &no_zygote(),
        );
        cancel_row(&mut self.report, "streaming (scripted)", lat);

        // Streaming from the loopback server.
        let server = Server::start();
        let (mut p, sid) = self.provider_agent(&server);
        let mut lat = vec![];
        for i in 0..n {
            let id = 100 + i as u64;
            server.plan(Plan::Trickle(Duration::from_millis(1)));
            p.prompt(id, &sid);
            p.read_until("agent_message_chunk");
            let t = Instant::now();
            p.cancel(&sid);
            p.response(id);
            lat.push(ms(t.elapsed()));
            assert!(p.line.contains("cancelled"), "{}", p.line);
        }
        p.finish();
        cancel_row(&mut self.report, "streaming (OpenAI SSE, loopback)", lat);

        // `bash` running `sleep 30`.
        let lines: Vec<Value> = (0..n)
            .map(|_| json!({"steps":[{"tool_call":{"name":"bash","arguments":{"command":"sleep 30"}}}]}))
            .collect();
        let lat = self.cancel_loop(
            "sleep.jsonl",
            &lines,
            "\"sessionUpdate\":\"tool_call\"",
            Some(Duration::from_millis(20)),
            // No kernel in these turns: without the zygote's Python import (the first second
            // after `session/new`, on one of the 2 cores) the first cancels measure the cancel
            // path, not the import they shared the CPU with (5-7 ms then, about 1 ms after).
            &no_zygote(),
        );
        cancel_row(&mut self.report, "bash runs `sleep 30`", lat);

        // A Python cell busy-looping in the ipython tool.
        let python = Command::new("python3")
            .arg("-c")
            .arg("pass")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !python {
            self.report
                .note("python3 missing: cancel while a Python cell busy-loops skipped".into());
            return;
        }
        // The marker is built in the cell so that only its output, not the tool call's
        // `rawInput` (which carries the code), says the loop is running.
        let code = "print('spin' + 'ning', flush=True)\nwhile True: pass";
        let lines: Vec<Value> = (0..n)
            .map(|_| json!({"steps":[{"tool_call":{"name":"ipython","arguments":{"code": code}}}]}))
            .collect();
        let lat = self.cancel_loop(
            "spin.jsonl",
            &lines,
            "spinning",
            Some(Duration::from_millis(20)),
            &[],
        );
        cancel_row(&mut self.report, "a Python cell busy-loops (ipython)", lat);
    }

    /// Runs one prompt per script line; cancels each once a line contains `ready` (and
    /// `settle` later), and returns the latencies.
    fn cancel_loop(
        &self,
        name: &str,
        lines: &[Value],
        ready: &str,
        settle: Option<Duration>,
        env: &[(&str, String)],
    ) -> Vec<f64> {
        let script = write_script(&self.work, name, lines);
        let script_s = script.display().to_string();
        let mut p = self.agent(
            &self.bin,
            &["--provider", "scripted", "--script", &script_s],
            env,
        );
        let sid = p.handshake(&self.work);
        let mut lat = vec![];
        for i in 0..lines.len() {
            let id = 100 + i as u64;
            p.prompt(id, &sid);
            p.read_until(ready);
            if let Some(d) = settle {
                std::thread::sleep(d);
            }
            let t = Instant::now();
            p.cancel(&sid);
            p.response(id);
            lat.push(ms(t.elapsed()));
            assert!(p.line.contains("cancelled"), "{}", p.line);
        }
        p.finish();
        lat
    }

    /// `--multi-session`: 10 sessions in 10 directories on one connection. Peak RSS after the
    /// 10 `session/new`s and with 10 turns running at once, then each turn cancelled in turn,
    /// checking that the other sessions' turns are still running. Two kinds of turn: a user
    /// shell command (`!!sleep 30`, no model) and a scripted model call waiting for its cancel.
    fn sessions(&mut self) {
        let n = 10;
        let rounds = self.runs(10, 1);
        let dirs: Vec<PathBuf> = (0..n)
            .map(|i| {
                let d = self.work.join(format!("session-{i}"));
                std::fs::create_dir_all(&d).unwrap();
                d.canonicalize().unwrap()
            })
            .collect();
        let lines: Vec<Value> = (0..n)
            .map(|_| json!({"steps":[{"text":"go"},{"wait_for_cancel":true}]}))
            .collect();
        let script = write_script(&self.work, "sessions.jsonl", &lines);
        let script_s = script.display().to_string();
        let args = [
            "--multi-session",
            "--provider",
            "scripted",
            "--script",
            &script_s,
        ];
        let (mut idle, mut running, mut bash_lat, mut model_lat) = (vec![], vec![], vec![], vec![]);
        for round in 0..rounds {
            // The cancel order rotates, so every session is cancelled first, last and between.
            let order: Vec<usize> = (0..n).map(|k| (k + round) % n).collect();
            let mut p = Proc::spawn_env(&self.bin, &args, &self.work, &[]);
            let sids = open_sessions(&mut p, &dirs);
            idle.push(p.hwm_mib());
            start_turns(&mut p, &sids, "!!sleep 30", "tool_call");
            // Let every `sleep` start (the update is sent before the process is spawned).
            std::thread::sleep(Duration::from_millis(50));
            running.push(p.hwm_mib());
            let pid = p.child.id();
            bash_lat.extend(cancel_each(&mut p, &sids, &order, &mut |left, gone| {
                check_sleeps(pid, &dirs, left, gone)
            }));
            p.finish();

            let mut p = Proc::spawn_env(&self.bin, &args, &self.work, &[]);
            let sids = open_sessions(&mut p, &dirs);
            start_turns(&mut p, &sids, "go", "agent_message_chunk");
            model_lat.extend(cancel_each(&mut p, &sids, &order, &mut |_, _| {}));
            p.finish();
        }
        let r = &mut self.report;
        r.add(
            "10 sessions: peak RSS (VmHWM) after 10 × session/new",
            "MiB",
            idle,
        );
        r.add(
            "10 sessions: peak RSS with 10 turns running",
            "MiB",
            running,
        );
        r.add(
            "10 sessions: cancel latency (one of 10 running `sleep 30`)",
            "ms",
            bash_lat,
        );
        r.add(
            "10 sessions: cancel latency (one of 10 waiting on the model)",
            "ms",
            model_lat,
        );
    }
}

/// `initialize`, then one `session/new` per directory; returns the session ids.
fn open_sessions(p: &mut Proc, dirs: &[PathBuf]) -> Vec<String> {
    p.request(1, "initialize", json!({"protocolVersion":1}));
    p.response(1);
    let mut sids = vec![];
    for (i, d) in dirs.iter().enumerate() {
        let id = 2 + i as u64;
        p.request(
            id,
            "session/new",
            json!({"cwd": d.display().to_string(), "mcpServers": []}),
        );
        p.response(id);
        let v: Value = serde_json::from_str(&p.line).unwrap();
        let sid = v["result"]["sessionId"].as_str();
        sids.push(sid.unwrap_or_else(|| panic!("{}", p.line)).to_owned());
    }
    sids
}

/// Sends one prompt per session (ids 100 + i) back to back, then reads until every session
/// has sent a `ready` update. No prompt may end meanwhile.
fn start_turns(p: &mut Proc, sids: &[String], text: &str, ready: &str) {
    for (i, sid) in sids.iter().enumerate() {
        p.prompt_text(100 + i as u64, sid, text);
    }
    let mut seen = vec![false; sids.len()];
    while seen.iter().any(|s| !s) {
        let v = p.frame(ready);
        if v.get("method").is_none() {
            panic!("a response while starting the turns: {}", p.line);
        }
        if v["params"]["update"]["sessionUpdate"] == ready {
            let sid = v["params"]["sessionId"].as_str().unwrap_or_default();
            if let Some(i) = sids.iter().position(|s| s == sid) {
                seen[i] = true;
            }
        }
    }
}

/// Cancels each session's turn in `order`, timing `session/cancel` written → its `cancelled`
/// response read. Another prompt's response meanwhile fails the benchmark; `check(left, gone)`
/// runs after each (untimed) with the sessions still running and the one just cancelled.
fn cancel_each(
    p: &mut Proc,
    sids: &[String],
    order: &[usize],
    check: &mut dyn FnMut(&[usize], usize),
) -> Vec<f64> {
    let mut lat = vec![];
    for (k, &i) in order.iter().enumerate() {
        let id = 100 + i as u64;
        let t = Instant::now();
        p.cancel(&sids[i]);
        loop {
            let v = p.frame("a cancelled response");
            if v.get("method").is_some() {
                continue;
            }
            assert_eq!(v["id"], id, "another session's turn ended: {}", p.line);
            break;
        }
        lat.push(ms(t.elapsed()));
        assert!(p.line.contains("cancelled"), "{}", p.line);
        check(&order[k + 1..], i);
    }
    lat
}

/// The sessions in `left` each still have their `sleep` running in their own directory, and
/// `gone`'s is gone (within a second: the kill is asynchronous).
fn check_sleeps(agent: u32, dirs: &[PathBuf], left: &[usize], gone: usize) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let cwds = sleep_cwds(agent);
        for &i in left {
            assert!(
                cwds.contains(&dirs[i]),
                "session {i}'s `sleep` is not running after cancelling session {gone}: {cwds:?}"
            );
        }
        if !cwds.contains(&dirs[gone]) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "session {gone}'s `sleep` outlived its cancel"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The order of run `run` over `n` builds: forwards on even runs, backwards on odd ones, so
/// neither build always goes first.
fn order(run: usize, n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    if run % 2 == 1 {
        v.reverse();
    }
    v
}

/// The working directories of the live `sleep` processes descended from `root`.
fn sleep_cwds(root: u32) -> Vec<PathBuf> {
    // (pid, ppid, comm, state) of every process.
    let mut procs = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().unwrap_or_default().to_owned();
        let ppid: u32 = rest.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        procs.push((pid, ppid, comm, state));
    }
    let mut family = vec![root];
    let mut k = 0;
    while k < family.len() {
        let parent = family[k];
        family.extend(procs.iter().filter(|p| p.1 == parent).map(|p| p.0));
        k += 1;
    }
    procs
        .iter()
        .filter(|p| p.2 == "sleep" && p.3 != "Z" && family.contains(&p.0))
        .filter_map(|p| std::fs::read_link(format!("/proc/{}/cwd", p.0)).ok())
        .collect()
}

impl Bench {
    /// Autonomous gate overhead: from the last chunk of an assistant turn to the first chunk
    /// of the continuation (gate `false`: run, fail, continuation request, scripted reply), and
    /// to the prompt response for a gate `true` that passes, against the same turn without
    /// autonomous mode. The work dir is no git worktree, so the snapshot is one failed
    /// `git rev-parse`.
    fn gates(&mut self) {
        let n = self.runs(30, 5);
        let script = write_script(
            &self.work,
            "gates.jsonl",
            &[
                json!({"text":"first-reply"}),
                json!({"text":"second-reply"}),
            ],
        );
        let script_s = script.display().to_string();
        let base = [
            "--mode",
            "acp",
            "--provider",
            "scripted",
            "--script",
            &script_s,
        ];
        let cases: [(&str, &[&str], &str); 3] = [
            (
                "no autonomous mode: end of turn → prompt response",
                &[],
                "\"id\":3,",
            ),
            (
                "gate `true`: end of turn → prompt response",
                &["--autonomous-gate", "true"],
                "\"id\":3,",
            ),
            (
                "gate `false`: end of turn → continuation's first chunk",
                &[
                    "--autonomous-gate",
                    "false",
                    "--autonomous-max-continuations",
                    "1",
                ],
                "second-reply",
            ),
        ];
        for (label, extra, needle) in cases {
            let mut args: Vec<&str> = base.to_vec();
            args.extend_from_slice(extra);
            let mut lat = vec![];
            for _ in 0..n {
                let mut p = self.agent(&self.bin.clone(), &args, &[]);
                let sid = p.handshake(&self.work.clone());
                p.prompt(3, &sid);
                p.read_until("first-reply");
                let t = Instant::now();
                p.read_until(needle);
                lat.push(ms(t.elapsed()));
                if !needle.contains("\"id\"") {
                    p.response(3);
                }
                p.finish();
            }
            self.report.add(&format!("autonomous {label}"), "ms", lat);
        }
    }
}
