//! The remote transport (`--listen`, issue 35): the agent driven through the official ACP
//! Python SDK's own client transports, Streamable HTTP (`acp.http.create_http_stream`) and
//! WebSocket (`acp.ws.create_websocket_stream`), by `fixtures/remote/driver.py`. Each test
//! skips, saying why, when `.deps/py` lacks the SDK (`make test-deps`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{deps, fixture, Agent, Spawn, TempDir};

/// The `.deps/py` Python if it has the SDK's HTTP extra, else `None` (the skip is printed).
fn sdk_python(test: &str) -> Option<PathBuf> {
    let python = deps::python(test)?;
    let ok = Command::new(&python)
        .args(["-c", "import acp.http.client, acp.ws.client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {test}: agent-client-protocol[http]==0.12.1 is not installed in .deps/py (run `make test-deps`)"
        );
        return None;
    }
    Some(python)
}

/// An agent listening on a free loopback port, and its endpoint URL.
pub(crate) fn listening(script: &Path, extra: &[&str], env: &[(&str, &str)]) -> (Agent, String) {
    let mut args: Vec<String> = [
        "--provider",
        "scripted",
        "--script",
        &script.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    if !extra.contains(&"--listen") {
        args.extend(["--listen".into(), "127.0.0.1:0".into()]);
    }
    let agent = Agent::spawn(Spawn {
        args,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        skip_schema: true,
        ..Default::default()
    });
    let url = endpoint(&agent);
    (agent, url)
}

/// The URL the agent says it serves (its first stderr line of that kind).
fn endpoint(agent: &Agent) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = agent.stderr_text();
        if let Some(rest) = text.split("serving ACP at ").nth(1) {
            return rest.split_whitespace().next().unwrap().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no listening line; stderr:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the driver; its one JSON line.
fn drive(python: &Path, args: &[&str]) -> Value {
    let out = Command::new(python)
        .arg(fixture("remote/driver.py"))
        .args(args)
        .output()
        .expect("run the driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "driver {args:?} failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("driver output {stdout:?}: {e}"))
}

/// SIGTERM, then the exit (bounded).
pub(crate) fn stop(agent: &mut Agent) {
    unsafe_kill(agent.pid(), libc::SIGTERM);
    let status = agent
        .wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no exit after SIGTERM; stderr:\n{}", agent.stderr_text()));
    assert!(
        status.success(),
        "exit {status}; stderr:\n{}",
        agent.stderr_text()
    );
}

#[allow(unsafe_code)] // Sending a signal to the child this test started.
pub(crate) fn unsafe_kill(pid: u32, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// One session over two connections: everything a client does on the first, then a second
/// connection resumes it and finds its MCP server still running (the same process).
fn session_across(first: &str, second: &str) {
    let test = format!("remote::session_{first}_then_{second}");
    let Some(python) = sdk_python(&test) else {
        return;
    };
    let cwd = TempDir::new("remote-cwd");
    let (mut agent, url) = listening(&fixture("scripts/remote.jsonl"), &[], &[]);
    let server = fixture("mcp/server.py");
    let cwd_arg = cwd.path().display().to_string();
    let got = drive(
        &python,
        &[
            "session",
            &url,
            first,
            second,
            &cwd_arg,
            &server.display().to_string(),
        ],
    );
    let sid = got["sessionId"].as_str().unwrap();
    assert_eq!(got["protocolVersion"], 1, "{got}");
    assert_eq!(got["stop1"], "end_turn", "{got}");
    assert_eq!(
        got["bash"], "remote-ok\n",
        "the bash call's result came back: {got}"
    );
    assert_eq!(got["texts1"], "Running.done", "{got}");
    assert_eq!(got["sessions_named"], serde_json::json!([sid]), "{got}");
    assert_eq!(got["stop2"], "cancelled", "{got}");
    assert_eq!(got["stop3"], "end_turn", "{got}");
    let pid1 = got["pid1"].as_str().expect("the MCP pid tool answered");
    assert!(pid1.parse::<u32>().is_ok(), "{got}");
    assert_eq!(
        got["pid2"], pid1,
        "the resumed session kept its MCP server process"
    );
    stop(&mut agent);
}

#[test]
fn session_http_then_ws() {
    session_across("http", "ws");
}

#[test]
fn session_ws_then_http() {
    session_across("ws", "http");
}

#[test]
fn a_token_protected_listener_refuses_a_missing_or_wrong_token() {
    let test = "remote::a_token_protected_listener_refuses_a_missing_or_wrong_token";
    let Some(python) = sdk_python(test) else {
        return;
    };
    let dir = TempDir::new("remote-token");
    let token = dir.write("token", "s3cret-token\n");
    let token_arg = token.display().to_string();
    let (mut agent, url) = listening(
        &fixture("scripts/hello.jsonl"),
        &["--listen", "0.0.0.0:0", "--listen-token-file", &token_arg],
        &[],
    );
    // Bound on every address; reached through loopback.
    let url = url.replace("0.0.0.0", "127.0.0.1");
    let got = drive(&python, &["refused", &url, "s3cret-token"]);
    assert_eq!(got["missing"], 401, "{got}");
    assert_eq!(got["wrong"], 401, "{got}");
    assert_eq!(got["ws_wrong"], "InvalidStatus", "{got}");
    assert_eq!(got["http_right"], 1, "{got}");
    assert_eq!(got["ws_right"], 1, "{got}");
    stop(&mut agent);
}

#[test]
fn a_non_loopback_listener_without_a_token_does_not_start() {
    let dir = TempDir::new("remote-cli");
    let out = crate::support::agent_command(dir.path())
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "--listen on 0.0.0.0:0, which is not a loopback address, requires --listen-token-file"
        ),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// The replies of `fixtures/scripts/remote.jsonl` (what `session_across` consumes).
fn session_lines() -> Vec<Value> {
    std::fs::read_to_string(fixture("scripts/remote.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("//"))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A driver left running in the background; killed on drop.
struct Background(
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
);

impl Background {
    /// Starts the driver and waits for its first line.
    fn start(python: &Path, args: &[&str]) -> (Background, Value) {
        let mut child = Command::new(python)
            .arg(fixture("remote/driver.py"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run the driver");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut bg = Background(child, out);
        let v = bg.line();
        (bg, v)
    }

    /// The driver's next line.
    fn line(&mut self) -> Value {
        use std::io::BufRead;
        let mut line = String::new();
        self.1.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("driver said {line:?}: {e}"))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (bounded, generously: no timing is asserted) until the agent's stderr has `what`.
fn wait_stderr(agent: &Agent, what: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while agent.stderr_text().matches(what).count() < count {
        assert!(
            Instant::now() < deadline,
            "never logged {what:?} {count} times; stderr:\n{}",
            agent.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Short bounds, so the test waits seconds, not minutes, for the transport to act.
const SHORT_BOUNDS: &[(&str, &str)] = &[
    ("RUST_LOG", "info"),
    ("PRIME_AGENT_REMOTE_STALL_MS", "2000"),
    ("PRIME_AGENT_REMOTE_CONN_IDLE_MS", "1500"),
    ("PRIME_AGENT_REMOTE_SESSION_IDLE_MS", "1000"),
    ("PRIME_AGENT_REMOTE_KEEPALIVE_MS", "500"),
];

// See: issue 35 ("a client that stops reading its SSE stream").
#[test]
fn a_client_that_stops_reading_is_cut_off_and_the_others_are_unaffected() {
    let test = "remote::a_client_that_stops_reading_is_cut_off_and_the_others_are_unaffected";
    let Some(python) = sdk_python(test) else {
        return;
    };
    let dir = TempDir::new("remote-stall");
    let cwd = dir.path().display().to_string();
    // A session whose turn streams 32 MB to a client that reads none of it, and a whole
    // session of another client meanwhile.
    let mut lines = vec![
        serde_json::json!({"steps": [{"repeat": {"text": "x".repeat(1024), "count": 32 * 1024}}]}),
    ];
    lines.extend(session_lines());
    let script = crate::support::script_file(&dir, &lines);
    let (mut agent, url) = listening(Path::new(&script), &[], SHORT_BOUNDS);
    let pid = agent.pid();
    let server = fixture("mcp/server.py").display().to_string();
    let (_stalled, got) = Background::start(&python, &["stall", &url, &cwd]);
    assert!(got["sessionId"].is_string(), "{got}");
    let healthy = drive(&python, &["session", &url, "http", "ws", &cwd, &server]);
    assert_eq!(healthy["stop1"], "end_turn", "{healthy}");
    assert_eq!(healthy["pid2"], healthy["pid1"], "{healthy}");
    // The stalled connection is cut off for not reading, not for filling its 64 MiB: its
    // session's turn paused once 4 MiB waited for it (plus what was already on its way: the
    // turn's queue to the loop, up to 1024 deltas, and the loop's outbox, up to 4 MiB).
    let marker = "ended: its client stopped reading (";
    wait_stderr(&agent, marker, 1);
    let text = agent.stderr_text();
    let queued: u64 = text
        .split(marker)
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        queued > 0 && queued <= 12 * 1024 * 1024,
        "{queued} bytes were queued"
    );
    // Its session was left detached, then closed.
    wait_stderr(&agent, "detached for too long", 1);
    let _ = writeln_stderr(&format!(
        "remote stall: {queued} bytes queued when cut off; agent peak RSS {} MiB",
        crate::support::procs::vm_kib(pid, "VmHWM:") / 1024
    ));
    stop(&mut agent);
    crate::support::reliability_line("remote_client_stops_reading", 1, 2, 8, 0);
}

// See: issue 35 ("abrupt disconnects mid-turn").
#[test]
fn abrupt_disconnects_mid_turn_leak_no_thread_fd_or_child() {
    let test = "remote::abrupt_disconnects_mid_turn_leak_no_thread_fd_or_child";
    let Some(python) = sdk_python(test) else {
        return;
    };
    let dir = TempDir::new("remote-abrupt");
    let cwd = dir.path().display().to_string();
    let kills = 6;
    let mut lines = session_lines();
    for _ in 0..kills {
        lines.push(serde_json::json!({"steps": [{"stream_until_cancelled": {"text": "tick ", "interval_ms": 5}}]}));
    }
    let script = crate::support::script_file(&dir, &lines);
    let (mut agent, url) = listening(Path::new(&script), &[], SHORT_BOUNDS);
    let pid = agent.pid();
    let server = fixture("mcp/server.py").display().to_string();
    // A whole session first, so what starts once (the kernel zygote, the store thread) is
    // in the baseline.
    let warm = drive(&python, &["session", &url, "ws", "http", &cwd, &server]);
    assert_eq!(warm["stop3"], "end_turn", "{warm}");
    let base = crate::support::procs::settle_to(pid, &crate::support::procs::snapshot(pid));
    for i in 0..kills {
        let kind = if i % 2 == 0 { "http" } else { "ws" };
        let (mut client, got) = Background::start(&python, &["midturn", &url, kind, &cwd, &server]);
        assert!(got["sessionId"].is_string(), "{got}");
        unsafe_kill(client.0.id(), libc::SIGKILL);
        let _ = client.0.wait();
    }
    // Every killed client's session is closed once detached long enough (its turn cancelled,
    // its MCP server killed).
    wait_stderr(&agent, "detached for too long", kills);
    let after = crate::support::procs::settle_to(pid, &base);
    let leaks = (after.threads > base.threads) as u64
        + (after.fds > base.fds) as u64
        + (after.children > base.children) as u64;
    assert_eq!(leaks, 0, "base {base:?}, after {after:?}");
    stop(&mut agent);
    crate::support::reliability_line(
        "remote_abrupt_disconnect_mid_turn",
        kills as u64,
        kills as u64,
        8,
        leaks,
    );
}

// See: issue 35 ("200 connect/disconnect cycles with no leaked thread, fd or child").
#[test]
fn two_hundred_connect_disconnect_cycles_leak_nothing() {
    let test = "remote::two_hundred_connect_disconnect_cycles_leak_nothing";
    let Some(python) = sdk_python(test) else {
        return;
    };
    let dir = TempDir::new("remote-churn");
    let (mut agent, url) = listening(&fixture("scripts/hello.jsonl"), &[], SHORT_BOUNDS);
    let pid = agent.pid();
    drive(&python, &["churn", &url, "2"]);
    let base = crate::support::procs::settle_to(pid, &crate::support::procs::snapshot(pid));
    let cycles = 200;
    let got = drive(&python, &["churn", &url, &cycles.to_string()]);
    assert_eq!(got["cycles"], cycles, "{got}");
    let after = crate::support::procs::settle_to(pid, &base);
    let leaks = (after.threads > base.threads) as u64
        + (after.fds > base.fds) as u64
        + (after.children > base.children) as u64;
    assert_eq!(leaks, 0, "base {base:?}, after {after:?}");
    let _ = writeln_stderr(&format!(
        "remote churn: {cycles} cycles, threads {}/{}, fds {}/{}, rss KiB {}/{}",
        base.threads, after.threads, base.fds, after.fds, base.rss_kib, after.rss_kib
    ));
    drop(dir);
    stop(&mut agent);
    crate::support::reliability_line("remote_connect_disconnect_200", 0, cycles, cycles, leaks);
}

fn writeln_stderr(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stderr(), "{text}")
}

// See: issue 35 (a connection that lives long: each session's SSE stream and socket go with
// the session).
#[test]
fn one_connection_opening_and_closing_sessions_keeps_no_stream_behind() {
    let test = "remote::one_connection_opening_and_closing_sessions_keeps_no_stream_behind";
    let Some(python) = sdk_python(test) else {
        return;
    };
    let dir = TempDir::new("remote-sessions");
    let cwd = dir.path().display().to_string();
    let (mut agent, url) = listening(&fixture("scripts/hello.jsonl"), &[], SHORT_BOUNDS);
    let pid = agent.pid();
    let (mut client, first) = Background::start(&python, &["sessions", &url, "40", &cwd]);
    assert_eq!(first["sessions"], 2);
    let base = crate::support::procs::settle_to(pid, &crate::support::procs::snapshot(pid));
    assert_eq!(client.line()["sessions"], 40);
    let after = crate::support::procs::settle_to(pid, &base);
    assert!(
        after.threads <= base.threads && after.fds <= base.fds,
        "base {base:?}, after {after:?}"
    );
    drop(client);
    stop(&mut agent);
}
