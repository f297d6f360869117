//! Test support: spawn the real `prime-agent` binary, talk NDJSON to it with timeouts, and
//! check every frame it writes against the official ACP schema.

#![allow(dead_code)] // Each test module uses a different subset of the helpers.

pub mod aws;
pub mod deps;
pub mod llm_server;
pub mod model;
pub mod procs;
pub mod proxy;
pub mod schema;
pub mod sessions;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError};
use serde_json::{json, Value};

pub const NS: &str = "ai.primeintellect.prime-agent";

/// Provider credentials removed from every spawned agent's environment.
pub const PROVIDER_KEY_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_OAUTH_TOKEN",
    "OPENROUTER_API_KEY",
    "PRIME_API_KEY",
    "DEEPSEEK_API_KEY",
    "GROQ_API_KEY",
    "XAI_API_KEY",
    "MISTRAL_API_KEY",
    "CEREBRAS_API_KEY",
    "ZAI_API_KEY",
    "MOONSHOT_API_KEY",
    "HF_TOKEN",
    "FIREWORKS_API_KEY",
    "GEMINI_API_KEY",
    "AI_GATEWAY_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_BASE_URL",
    "AZURE_OPENAI_RESOURCE_NAME",
    "AZURE_OPENAI_API_VERSION",
    "AZURE_OPENAI_DEPLOYMENT_NAME_MAP",
    "MINIMAX_API_KEY",
    "KIMI_API_KEY",
    "GOOGLE_CLOUD_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "CLOUDSDK_CONFIG",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
];
/// Proxy and certificate variables, also removed (set empty) so the machine's own never
/// reach a test: `tests/network.rs` sets them on purpose.
pub const NETWORK_VARS: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];
/// Generous: these bound hangs, they do not measure speed.
pub const TIMEOUT: Duration = Duration::from_secs(20);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_prime-agent")
}

/// The binary as a command with `agent_dir` as its agent directory (sessions, settings, auth)
/// and none of the machine's provider keys. Every test starts the binary through here or
/// `Agent::spawn` (tests/structure.rs checks), so no test writes into the developer's
/// `~/.prime/agent` or reaches a real model.
pub fn agent_command(agent_dir: &Path) -> Command {
    agent_command_under(agent_dir, &[])
}

/// `agent_command` run under `wrapper` (`["prlimit", "--fsize=N", "--"]`), when it has one.
pub fn agent_command_under(agent_dir: &Path, wrapper: &[String]) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg(bin());
            cmd
        }
        None => Command::new(bin()),
    };
    cmd.env("PRIME_AGENT_CODING_AGENT_DIR", agent_dir);
    for key in PROVIDER_KEY_VARS.iter().chain(NETWORK_VARS) {
        cmd.env_remove(key);
    }
    cmd
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Fixed width: the cwd is part of the system prompt, so its length shows up in the
        // context estimate that transcripts record (`usage_update.used`).
        let dir =
            std::env::temp_dir().join(format!("pa-test-{tag}-{:010}-{n:06}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(std::fs::canonicalize(&dir).unwrap())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.0.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Panics unless `frame` is a valid agent → client ACP message (see `schema::check_frame`);
/// `methods` maps request ids (as JSON text) to the methods the test sent.
pub fn assert_schema_valid(frame: &Value, methods: &HashMap<String, String>) {
    if let Err(e) = schema::check_frame(frame, methods) {
        panic!("frame is not valid ACP: {frame}\n{e}");
    }
}

/// Options for spawning the agent.
#[derive(Default, Clone)]
pub struct Spawn {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// Validate every frame against the schema (on by default through `Agent::scripted`).
    pub skip_schema: bool,
    /// Changes each frame as it arrives, before any check (to prove the checks can fail).
    pub corrupt: Option<fn(&mut Value)>,
    /// A command the binary runs under (`["prlimit", "--fsize=1000000", "--"]`).
    pub wrapper: Vec<String>,
}

impl Spawn {
    /// `--mode acp --provider scripted --script SCRIPT` plus `extra` arguments.
    pub fn scripted(script: &str, extra: &[&str]) -> Spawn {
        let mut args: Vec<String> = [
            "--mode",
            "acp",
            "--provider",
            "scripted",
            "--script",
            script,
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        Spawn {
            args,
            ..Default::default()
        }
    }
}

/// Lets a test stop reading the agent's stdout, like a client that stalls.
#[derive(Default)]
struct ReadGate {
    paused: Mutex<bool>,
    resumed: Condvar,
}

impl ReadGate {
    fn wait_open(&self) {
        let mut paused = self.paused.lock().unwrap();
        while *paused {
            paused = self.resumed.wait(paused).unwrap();
        }
    }

    fn set(&self, paused: bool) {
        *self.paused.lock().unwrap() = paused;
        self.resumed.notify_all();
    }
}

/// A running agent process and the frames it has written.
pub struct Agent {
    pub child: Child,
    stdin: Option<ChildStdin>,
    frames: Receiver<Vec<u8>>,
    gate: Arc<ReadGate>,
    validate: bool,
    corrupt: Option<fn(&mut Value)>,
    /// The method of each request sent, by id (as JSON text), to check its response against.
    methods: HashMap<String, String>,
    /// Every frame received so far, in order.
    pub seen: Vec<Value>,
    pub stderr: Arc<Mutex<String>>,
    /// Disconnected once the stderr reader has seen EOF: after an exit, `wait_exit` waits on it
    /// so the last words the agent wrote are in `stderr` before a test reads them.
    stderr_done: Receiver<()>,
    next_id: u64,
    pub session_id: Option<String>,
    /// Writes to stdin so far (frames, raw bytes): the "inputs" of a reliability line.
    pub inputs: u64,
    /// Responses (frames with an id and no method) received so far.
    pub answered: u64,
    /// The agent directory made for this agent when the test named none; removed (last,
    /// after the process has exited) on drop.
    _agent_dir: Option<TempDir>,
}

impl Agent {
    pub fn spawn(opts: Spawn) -> Agent {
        // Its own agent dir, so the sessions it writes go away with it (a shared one grew
        // forever), unless the test names one in `env` (set below, after this).
        let agent_dir = TempDir::new("agent-dir");
        let mut cmd = agent_command_under(agent_dir.path(), &opts.wrapper);
        cmd.args(&opts.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("RUST_LOG", "debug");
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        if let Some(cwd) = &opts.cwd {
            cmd.current_dir(cwd);
        }
        let mut child = cmd.spawn().expect("spawn prime-agent");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = unbounded();
        let gate = Arc::new(ReadGate::default());
        let reader_gate = gate.clone();
        // Raw lines only: parsing and schema checks happen on the test's thread, so a bad
        // frame fails the test instead of a background thread.
        thread::spawn(move || {
            let mut stdout = BufReader::with_capacity(8192, stdout);
            loop {
                reader_gate.wait_open();
                let mut line = Vec::new();
                match stdout.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                // An unterminated last line is what a killed agent leaves behind.
                if line.pop() != Some(b'\n') {
                    break;
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let err_buf = Arc::new(Mutex::new(String::new()));
        let sink = err_buf.clone();
        let (done_tx, stderr_done) = unbounded::<()>();
        thread::spawn(move || {
            let _done = done_tx;
            let mut r = BufReader::new(stderr);
            let mut buf = [0u8; 8192];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n])),
                }
            }
        });
        Agent {
            stdin: child.stdin.take(),
            child,
            frames: rx,
            gate,
            validate: !opts.skip_schema,
            corrupt: opts.corrupt,
            methods: HashMap::new(),
            seen: Vec::new(),
            stderr: err_buf,
            stderr_done,
            next_id: 0,
            session_id: None,
            inputs: 0,
            answered: 0,
            _agent_dir: Some(agent_dir),
        }
    }

    /// An agent on the scripted provider with `script` (a path under `fixtures/scripts/` or an
    /// absolute path), plus extra args.
    pub fn scripted(script: &str, extra: &[&str]) -> Agent {
        let path = if Path::new(script).is_absolute() {
            PathBuf::from(script)
        } else {
            fixture(&format!("scripts/{script}"))
        };
        let mut args = vec![
            "--mode".into(),
            "acp".into(),
            "--provider".into(),
            "scripted".into(),
            "--script".into(),
            path.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Agent::spawn(Spawn {
            args,
            ..Default::default()
        })
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        if let Err(e) = stdin.write_all(bytes).and_then(|()| stdin.flush()) {
            // The agent is gone: say what it said on the way out.
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "cannot write to the agent ({e}); its stderr:\n{}",
                self.stderr_text()
            );
        }
        self.inputs += 1;
    }

    pub fn send(&mut self, frame: &Value) {
        if let (Some(id), Some(method)) = (frame.get("id"), frame["method"].as_str()) {
            self.methods.insert(id.to_string(), method.to_owned());
        }
        let mut line = serde_json::to_vec(frame).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Sends a request and returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        id
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc":"2.0","method":method,"params":params}));
    }

    /// The next frame, or `None` after `timeout`. Panics on a line that is not JSON-RPC or
    /// not valid ACP.
    pub fn next_frame(&mut self, timeout: Duration) -> Option<Value> {
        match self.frames.recv_timeout(timeout) {
            Ok(line) => {
                let f = self.check_line(&line);
                if f.get("id").is_some() && f.get("method").is_none() {
                    self.answered += 1;
                }
                self.seen.push(f.clone());
                Some(f)
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    fn check_line(&self, line: &[u8]) -> Value {
        let text = String::from_utf8_lossy(line);
        let mut frame: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {text:?}"));
        if let Some(corrupt) = self.corrupt {
            corrupt(&mut frame);
        }
        assert_eq!(frame["jsonrpc"], "2.0", "not JSON-RPC: {text}");
        if self.validate {
            assert_schema_valid(&frame, &self.methods);
        }
        frame
    }

    /// Stops reading the agent's stdout (its pipe fills and the agent's writes block), as a
    /// client that stalls would.
    pub fn pause_reading(&self) {
        self.gate.set(true);
    }

    pub fn resume_reading(&self) {
        self.gate.set(false);
    }

    /// Reads frames until the response to `id`; returns it (notifications are kept in `seen`).
    pub fn response(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = self.next_frame(left).unwrap_or_else(|| {
                panic!(
                    "no response to {id} within {TIMEOUT:?}; stderr:\n{}",
                    self.stderr_text()
                )
            });
            if frame.get("id") == Some(id) && frame.get("method").is_none() {
                return frame;
            }
        }
    }

    /// Request + response in one call; returns the response frame.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response(&id)
    }

    /// Reads frames until one matches `pred`.
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = self.next_frame(left).unwrap_or_else(|| {
                panic!(
                    "timed out waiting for {what}; stderr:\n{}",
                    self.stderr_text()
                )
            });
            if pred(&frame) {
                return frame;
            }
        }
    }

    /// Reads frames until the agent sends a request (agent → client) for `method`; returns it.
    pub fn client_request(&mut self, method: &str) -> Value {
        self.wait_for(&format!("a {method} request"), |f| {
            f["method"] == method && f.get("id").is_some()
        })
    }

    /// Answers the agent's request `id` with `result`.
    pub fn answer(&mut self, id: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// Answers the agent's request `id` with a JSON-RPC error.
    pub fn answer_error(&mut self, id: &Value, code: i64, message: &str) {
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        );
    }

    /// Answers a `session/request_permission` request with `option_id` selected.
    pub fn select_option(&mut self, request: &Value, option_id: &str) {
        let id = request["id"].clone();
        self.answer(
            &id,
            json!({"outcome": {"outcome": "selected", "optionId": option_id}}),
        );
    }

    /// The agent → client requests seen so far (frames with both `id` and `method`).
    pub fn client_requests(&self, method: &str) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|f| f["method"] == method && f.get("id").is_some())
            .cloned()
            .collect()
    }

    /// Frames arriving within `window` (for "nothing more comes" checks).
    pub fn drain_for(&mut self, window: Duration) -> Vec<Value> {
        let deadline = Instant::now() + window;
        let mut out = Vec::new();
        while let Some(f) = self.next_frame(deadline.saturating_duration_since(Instant::now())) {
            out.push(f);
        }
        out
    }

    /// `initialize` + `session/new` in `cwd` (default: the process cwd); returns the session id.
    pub fn handshake(&mut self) -> String {
        let r = self.call(
            "initialize",
            json!({"protocolVersion":1,"clientCapabilities":{}}),
        );
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        let cwd = std::env::current_dir().unwrap().display().to_string();
        let r = self.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let sid = r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new failed: {r}"))
            .to_owned();
        self.session_id = Some(sid.clone());
        sid
    }

    /// `session/new` in `cwd` with these `mcpServers`; the session becomes the current one.
    pub fn new_session_in(&mut self, cwd: &Path, servers: Value) -> String {
        let r = self.call(
            "session/new",
            json!({"cwd": cwd.display().to_string(), "mcpServers": servers}),
        );
        let sid = r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new failed: {r}"))
            .to_owned();
        self.session_id = Some(sid.clone());
        sid
    }

    pub fn sid(&self) -> String {
        self.session_id.clone().expect("handshake first")
    }

    /// Sends a text prompt and returns the request id.
    pub fn prompt(&mut self, text: &str) -> Value {
        let sid = self.sid();
        self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type":"text","text": text}]}),
        )
    }

    /// Sends a prompt made of these content blocks and returns the request id.
    pub fn prompt_blocks(&mut self, blocks: Value) -> Value {
        let sid = self.sid();
        self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": blocks}),
        )
    }

    /// Sends a text prompt and returns its stop reason (panics on an error response).
    pub fn prompt_stop(&mut self, text: &str) -> String {
        let id = self.prompt(text);
        let r = self.response(&id);
        r["result"]["stopReason"]
            .as_str()
            .unwrap_or_else(|| panic!("prompt failed: {r}\nstderr:\n{}", self.stderr_text()))
            .to_owned()
    }

    /// The `session/update` payloads of one kind (`tool_call`, `agent_message_chunk`, …).
    pub fn updates_of(&self, kind: &str) -> Vec<Value> {
        self.updates()
            .into_iter()
            .filter(|u| u["sessionUpdate"] == kind)
            .collect()
    }

    /// The update that starts each tool call, in order: the one with its kind, title and
    /// `rawInput` (a `tool_call`, or the `tool_call_update` that completes a call shown
    /// `pending` while the model was still writing it).
    pub fn tool_starts(&self) -> Vec<Value> {
        tool_starts(&self.updates())
    }

    pub fn cancel(&mut self) {
        let sid = self.sid();
        self.notify("session/cancel", json!({"sessionId": sid}));
    }

    /// `session/update` payloads (the `update` objects) seen so far.
    pub fn updates(&self) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|f| f["method"] == "session/update")
            .map(|f| f["params"]["update"].clone())
            .collect()
    }

    /// Prompt turn `turn`'s `terminalQuiescence` update: seen already (a turn settled when it
    /// is answered sends it just before its response), or waited for (one whose subagents were
    /// still working sends it once they settle).
    pub fn terminal(&mut self, turn: u64) -> Value {
        let is =
            |u: &Value| ns(u)["phase"] == "terminalQuiescence" && ns(u)["promptTurnId"] == turn;
        if let Some(u) = self.updates().into_iter().find(|u| is(u)) {
            return u;
        }
        let frame = self.wait_for("the terminal update", |f| {
            f["method"] == "session/update" && is(&f["params"]["update"])
        });
        frame["params"]["update"].clone()
    }

    /// Concatenated `agent_message_chunk` text seen so far.
    pub fn text(&self) -> String {
        self.updates()
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
            .collect()
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Closes stdin and waits for the exit status (bounded).
    pub fn finish(&mut self) -> ExitStatus {
        self.close_stdin();
        self.wait_exit(TIMEOUT).unwrap_or_else(|| {
            panic!(
                "agent did not exit after stdin EOF; stderr:\n{}",
                self.stderr_text()
            )
        })
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The reader thread may not have drained the pipe yet. Bounded: a grandchild
                // that outlived the agent could hold the pipe open.
                let _ = self.stderr_done.recv_timeout(Duration::from_secs(2));
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Prints this agent's `reliability:` line (see `reliability_line`).
    pub fn report(&self, name: &str, faults: u64, leaks: u64) {
        reliability_line(name, faults, self.inputs, self.answered, leaks);
    }
}

/// One greppable line per reliability test on stderr, collected by `make reliability`
/// (`scripts/reliability_table.py`): faults injected, inputs sent, requests answered, leaks
/// found. A test that reaches this line lost nothing (it asserts that before).
pub fn reliability_line(name: &str, faults: u64, inputs: u64, answered: u64, leaks: u64) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "reliability: {name}: faults={faults}, inputs={inputs}, answered={answered}, leaks={leaks}, lost=0"
    );
}

/// An agent on `script` (a path under `fixtures/scripts/` or an absolute path) whose cwd is
/// `dir`, after the handshake.
pub fn agent_in(dir: &TempDir, script: &str, extra: &[&str]) -> Agent {
    agent_in_env(dir, script, extra, &[])
}

/// `agent_in` with extra environment variables.
pub fn agent_in_env(dir: &TempDir, script: &str, extra: &[&str], env: &[(&str, &str)]) -> Agent {
    let path = if Path::new(script).is_absolute() {
        PathBuf::from(script)
    } else {
        fixture(&format!("scripts/{script}"))
    };
    let mut args: Vec<String> = vec![
        "--mode".into(),
        "acp".into(),
        "--provider".into(),
        "scripted".into(),
        "--script".into(),
        path.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut a = Agent::spawn(Spawn {
        args,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    });
    a.handshake();
    a
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stdin.take();
        self.resume_reading();
        if self.wait_exit(Duration::from_secs(3)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Frames after the last one the test awaited are checked too (the reader ends at the
        // agent's EOF, which has come now).
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut rest = Vec::new();
        while let Ok(line) = self
            .frames
            .recv_deadline(deadline.max(Instant::now() + Duration::from_millis(1)))
        {
            rest.push(line);
        }
        if !thread::panicking() {
            for line in rest {
                self.check_line(&line);
            }
        }
    }
}

/// The `_meta[NS]` object of an update (or `Null`).
pub fn ns(update: &Value) -> &Value {
    &update["_meta"][NS]
}

/// Writes a scripted-provider fixture to a temp file (for scripts built inside a test).
pub fn script_file(dir: &TempDir, lines: &[Value]) -> String {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    dir.write("script.jsonl", &text).display().to_string()
}

/// The updates among `updates` that start a tool call (see `Agent::tool_starts`).
pub fn tool_starts(updates: &[Value]) -> Vec<Value> {
    updates
        .iter()
        .filter(|u| {
            (u["sessionUpdate"] == "tool_call" || u["sessionUpdate"] == "tool_call_update")
                && u.get("kind").is_some()
                && u.get("rawInput").is_some()
        })
        .cloned()
        .collect()
}
