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
