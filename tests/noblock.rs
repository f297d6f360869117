//! Nothing the agent waits on can wedge it, and nothing it starts outlives it (issue 19):
//! a stdio MCP server that stops reading its stdin, HTTP MCP servers whose `DELETE` never
//! answers, and a `kill -9` of the agent with a command and an MCP server running. Each prints
//! a `reliability:` line for `make reliability`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::procs::{alive, assert_dies, group_members, pgid_of, wait_for_file};
use crate::support::{fixture, ns, script_file, Agent, Spawn, TempDir, TIMEOUT};

/// Plain `python3` (the raw fixture server needs no SDK); `None` prints a skip line.
fn python3(test: &str) -> Option<String> {
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg("")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = writeln!(std::io::stderr(), "skipped: {test}: no python3 on PATH");
    }
    ok.then(|| "python3".to_owned())
}

fn raw_server(name: &str, python: &str, mode: &str, pidfile: &Path) -> Value {
    json!({
        "name": name,
        "command": python,
        "args": [fixture("mcp/raw_server.py").display().to_string(), mode, pidfile.display().to_string()],
        "env": [],
    })
}

fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({"steps":[{"tool_call":{"id": id, "name": name, "arguments": args}}]})
}

/// `initialize` on a scripted agent in `dir` with `extra` arguments.
fn agent(dir: &TempDir, script: &[Value], extra: &[&str]) -> Agent {
    let script = script_file(dir, script);
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, extra)
    });
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    a
}

/// Waits until every MCP server of session `sid` is ready.
fn all_ready(a: &mut Agent, sid: &str) {
    let f = a.wait_for("MCP servers settled", |f| {
        f["params"]["sessionId"] == sid
            && ns(&f["params"]["update"])["mcp"]
                .as_array()
                .is_some_and(|l| l.iter().all(|s| s["status"] != "connecting"))
    });
    let list = ns(&f["params"]["update"])["mcp"].clone();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "ready"),
        "{list}\n{}",
        a.stderr_text()
    );
}

/// The response to `id`, whether it came already (while waiting for another) or comes next.
fn answer_of(a: &mut Agent, id: &Value) -> Value {
    let seen = a
        .seen
        .iter()
        .find(|f| f.get("id") == Some(id) && f.get("method").is_none())
        .cloned();
    seen.unwrap_or_else(|| a.response(id))
}

fn wait_tool_call(a: &mut Agent, id: &str) {
    a.wait_for(&format!("tool call {id}"), |f| {
        f["params"]["update"]["sessionUpdate"] == "tool_call"
            && f["params"]["update"]["toolCallId"] == id
    });
}

/// Defect 1: a stdio MCP server that stops reading its stdin, and a tool call larger than the
/// pipe buffer. The call's write blocks, but only the server's writer thread: `session/close`
/// is answered (the prompt `cancelled` before it), the server's group is killed, and stdin EOF
/// still ends the agent.
#[test]
fn a_stdio_server_that_stops_reading_cannot_hold_close_or_exit() {
    let test = "a_stdio_server_that_stops_reading_cannot_hold_close_or_exit";
    let Some(python) = python3(test) else {
        return;
    };
    let dir = TempDir::new("mcp-deaf");
    let pidfile = dir.path().join("server.pid");
    // 1 MiB of arguments: far past the 64 KiB a pipe holds.
    let big = "x".repeat(1 << 20);
    let script = [tool_call("big", "mcp__deaf__echo", json!({"text": big}))];
    let mut a = agent(&dir, &script, &[]);
    let sid = a.new_session_in(
        dir.path(),
        json!([raw_server("deaf", &python, "stop-reading", &pidfile)]),
    );
    all_ready(&mut a, &sid);
    let server = wait_for_file(&pidfile);
    let prompt = a.prompt("go");
    wait_tool_call(&mut a, "big");
    // Give the call time to fill the pipe (not needed for the fix to hold: without it the
    // close may simply come before the write, and the test proves less).
    std::thread::sleep(Duration::from_millis(300));
    let close = a.request("session/close", json!({"sessionId": sid}));
    assert_eq!(a.response(&prompt)["result"]["stopReason"], "cancelled");
    assert_eq!(answer_of(&mut a, &close)["result"], json!({}));
    assert_dies(&server);
    // The agent still answers, and EOF still ends it.
    let r = a.call(
        "session/new",
        json!({"cwd": dir.path().display().to_string(), "mcpServers": []}),
    );
    assert!(r["result"]["sessionId"].is_string(), "{r}");
    assert!(a.finish().success(), "{}", a.stderr_text());
    a.report("mcp_stdio_server_stops_reading", 1, 0);
}

/// An HTTP MCP server (just enough of Streamable HTTP) whose `DELETE` never answers: it holds
/// each one until released or until the client gives up, and counts both.
struct DeafDeletes {
    url: String,
    arrived: Arc<AtomicU64>,
    abandoned: Arc<AtomicU64>,
    release: Arc<AtomicBool>,
}

impl DeafDeletes {
    fn start() -> DeafDeletes {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let arrived = Arc::new(AtomicU64::new(0));
        let abandoned = Arc::new(AtomicU64::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let (a, b, r) = (arrived.clone(), abandoned.clone(), release.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (a, b, r) = (a.clone(), b.clone(), r.clone());
                std::thread::spawn(move || serve(stream, &a, &b, &r));
            }
        });
        DeafDeletes {
            url,
            arrived,
            abandoned,
            release,
        }
    }
}

impl Drop for DeafDeletes {
    fn drop(&mut self) {
        self.release.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, arrived: &AtomicU64, abandoned: &AtomicU64, release: &AtomicBool) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut w = stream;
    let mut request_line = String::new();
    if r.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    if request_line.starts_with("DELETE") {
        arrived.fetch_add(1, Ordering::SeqCst);
        w.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut byte = [0u8; 1];
        loop {
            if release.load(Ordering::SeqCst) {
                let _ = w.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                return;
            }
            match r.read(&mut byte) {
                Ok(0) => {
                    abandoned.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    abandoned.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
        }
    }
    let mut body = vec![0u8; length];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(id) = msg.get("id").cloned() else {
        let _ =
            w.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    };
    let result = match msg["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "deaf-deletes", "version": "1"},
        }),
        Some("tools/list") => json!({"tools": []}),
        _ => json!({}),
    };
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    let _ = write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: deaf-1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
}

/// Defect 2: closing a session whose three HTTP MCP servers never answer their `DELETE` does
/// not hold another session: its cancel is answered while every `DELETE` is still pending
/// (none has been given up on yet), and so is the close itself.
#[test]
fn http_deletes_that_never_answer_do_not_hold_another_sessions_cancel() {
    let dir = TempDir::new("mcp-deaf-delete");
    let server = DeafDeletes::start();
    let script = [json!({"steps":[{"text":"working"},{"wait_for_cancel":true}]})];
    let mut a = agent(&dir, &script, &["--multi-session"]);
    let servers: Vec<Value> = ["h1", "h2", "h3"]
        .iter()
        .map(|n| json!({"type": "http", "name": n, "url": server.url, "headers": []}))
        .collect();
    let closing = a.new_session_in(dir.path(), json!(servers));
    all_ready(&mut a, &closing);
    let working = a.new_session_in(dir.path(), json!([]));
    let prompt = a.prompt("work");
    a.wait_for("the working turn", |f| {
        f["params"]["sessionId"] == working
            && f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    let close = a.request("session/close", json!({"sessionId": closing}));
    a.notify("session/cancel", json!({"sessionId": working}));
    assert_eq!(a.response(&prompt)["result"]["stopReason"], "cancelled");
    assert_eq!(
        server.abandoned.load(Ordering::SeqCst),
        0,
        "the cancel waited for a DELETE to time out"
    );
    assert_eq!(answer_of(&mut a, &close)["result"], json!({}));
    // The DELETEs are sent all the same (off the loop).
    let deadline = Instant::now() + TIMEOUT;
    while server.arrived.load(Ordering::SeqCst) < 3 {
        assert!(Instant::now() < deadline, "the DELETEs never came");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(a.finish().success(), "{}", a.stderr_text());
    a.report("mcp_http_delete_never_answers", 3, 0);
}

/// Defect 8: `kill -9` of the agent while a bash command (with a child of its own) runs and a
/// stdio MCP server that ignores EOF and SIGTERM is connected: nothing of either survives.
#[test]
fn kill_9_of_the_agent_leaves_no_child_running() {
    let test = "kill_9_of_the_agent_leaves_no_child_running";
    let Some(python) = python3(test) else {
        return;
    };
    let dir = TempDir::new("kill9");
    let pidfile = dir.path().join("server.pid");
    let d = dir.path().display();
    let command = format!("sleep 1000 & echo $! > {d}/grandchild; echo $$ > {d}/shell; wait");
    let script = [tool_call("long", "bash", json!({"command": command}))];
    let mut a = agent(&dir, &script, &[]);
    let sid = a.new_session_in(
        dir.path(),
        json!([raw_server("stubborn", &python, "ignore-eof", &pidfile)]),
    );
    all_ready(&mut a, &sid);
    let _prompt = a.prompt("go");
    let server = wait_for_file(&pidfile);
    let shell = wait_for_file(&dir.path().join("shell"));
    let grandchild = wait_for_file(&dir.path().join("grandchild"));
    let groups = [pgid_of(&server), pgid_of(&shell)];
    assert!(alive(&server) && alive(&shell) && alive(&grandchild));
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    for pid in [&server, &shell, &grandchild] {
        assert_dies(pid);
    }
    let deadline = Instant::now() + TIMEOUT;
    for g in groups {
        while !group_members(g).is_empty() {
            assert!(
                Instant::now() < deadline,
                "survivors in group {g}: {:?}",
                group_members(g)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    a.report("kill_9_with_a_command_and_an_mcp_server", 1, 0);
}
