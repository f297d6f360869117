//! MCP servers from `session/new.mcpServers`, against real servers: the reference
//! `@modelcontextprotocol/server-everything` (stdio and Streamable HTTP) and the fixture
//! `fixtures/mcp/server.py` (official Python SDK) for slow, failing, crashing and echoing
//! tools. The scripted model calls the tools; the client sees the calls and their results.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::procs::{alive, assert_dies, wait_for_file};
use crate::support::{deps, fixture, ns, script_file, Agent, Spawn, TempDir, TIMEOUT};

/// The fixture server's command line (`mode` = `stdio`, `crash`, or `http PORT`).
fn fixture_server(python: &Path, mode: &[&str]) -> (String, Vec<String>) {
    let mut args = vec![fixture("mcp/server.py").display().to_string()];
    args.extend(mode.iter().map(|s| s.to_string()));
    (python.display().to_string(), args)
}

fn stdio_entry(name: &str, command: &str, args: &[String], env: Value) -> Value {
    json!({"name": name, "command": command, "args": args, "env": env})
}

/// A scripted agent in `dir` after `initialize` and a `session/new` with `servers`.
fn agent_with(dir: &TempDir, script: &[Value], servers: Value, env: &[(&str, &str)]) -> Agent {
    let script = script_file(dir, script);
    let mut a = Agent::spawn(Spawn {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &[])
    });
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    new_session(&mut a, dir.path(), servers);
    a
}

fn new_session(a: &mut Agent, cwd: &Path, servers: Value) -> String {
    a.new_session_in(cwd, servers)
}

/// Waits for an MCP status update in which every server has settled; returns the list.
fn settled(a: &mut Agent) -> Vec<Value> {
    let f = a.wait_for("MCP servers settled", |f| {
        let list = &ns(&f["params"]["update"])["mcp"];
        list.as_array()
            .is_some_and(|l| l.iter().all(|s| s["status"] != "connecting"))
    });
    ns(&f["params"]["update"])["mcp"]
        .as_array()
        .unwrap()
        .clone()
}

fn status_of<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {list:?}"))
}

/// The `tool_call_update` that ended call `id`.
fn tool_end(a: &Agent, id: &str) -> Value {
    a.updates_of("tool_call_update")
        .into_iter()
        .rev()
        .find(|u| u["toolCallId"] == id && u["status"] != "in_progress")
        .unwrap_or_else(|| panic!("no end for {id}: {:?}", a.updates()))
}

fn result_text(end: &Value) -> String {
    end["content"][0]["content"]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"steps":[{"tool_call":{"id": id, "name": name, "arguments": args}}]})
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTP MCP server process, killed on drop.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(program: &Path, args: &[String], port: u16, env: &[(&str, &str)]) -> HttpServer {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start the HTTP MCP server");
        let deadline = Instant::now() + TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the HTTP MCP server never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reference server over stdio: ready with its tools, a direct tool call is an ACP
/// `tool_call` titled `<server>: <tool>` with the arguments as `rawInput`, and its result
/// reaches the client and the model.
#[test]
fn reference_server_over_stdio_is_called_by_the_model() {
    let test = "reference_server_over_stdio_is_called_by_the_model";
    let Some(bin) = deps::npm_bin("mcp-server-everything", test) else {
        return;
    };
    let dir = TempDir::new("mcp-stdio");
    let script = [
        call("c1", "mcp__ev__echo", json!({"message": "hi there"})),
        json!({"steps":[{"expect":["tool_result mcp__ev__echo error=false: Echo: hi there"]},
                        {"tool_call":{"id":"i1","name":"mcp__ev__get-tiny-image","arguments":{}}}]}),
        json!({"text":"done"}),
    ];
    let servers = json!([stdio_entry(
        "ev",
        &bin.display().to_string(),
        &["stdio".into()],
        json!([])
    )]);
    let mut a = agent_with(&dir, &script, servers, &[]);
    let list = settled(&mut a);
    let ev = status_of(&list, "ev");
    assert_eq!(ev["status"], "ready", "{list:?}\n{}", a.stderr_text());
    assert!(ev["tools"].as_u64().unwrap() > 0, "{ev}");
    assert_eq!(a.prompt_stop("go"), "end_turn", "{}", a.stderr_text());
    let start = &a.tool_starts()[0];
    assert_eq!(start["title"], "ev: echo");
    assert_eq!(start["rawInput"], json!({"message": "hi there"}));
    let end = tool_end(&a, "c1");
    assert_eq!(end["status"], "completed");
    assert_eq!(result_text(&end), "Echo: hi there");
    // An image result is ACP image content.
    let image = tool_end(&a, "i1");
    assert_eq!(image["status"], "completed");
    let blocks = image["content"].as_array().unwrap();
    let img = blocks
        .iter()
        .find(|b| b["content"]["type"] == "image")
        .unwrap_or_else(|| panic!("no image block: {image}"));
    assert_eq!(img["content"]["mimeType"], "image/png");
    assert!(!img["content"]["data"].as_str().unwrap().is_empty());
    assert_eq!(a.text(), "done");
}

/// The reference server over Streamable HTTP: listed and called through the generic tools.
#[test]
fn reference_server_over_streamable_http_is_listed_and_called() {
    let test = "reference_server_over_streamable_http_is_listed_and_called";
    let Some(bin) = deps::npm_bin("mcp-server-everything", test) else {
        return;
    };
    let server = HttpServer::start(&bin, &["streamableHttp".into()], free_port(), &[]);
    let dir = TempDir::new("mcp-http");
    let script = [
        call("l1", "mcp_list_tools_web", json!({})),
        call(
            "c1",
            "mcp_call_web",
            json!({"tool": "echo", "arguments": {"message": "over http"}}),
        ),
        json!({"steps":[{"expect":["tool_result mcp_call_web error=false: Echo: over http"]},{"text":"done"}]}),
    ];
    let servers = json!([{"name":"web","type":"http","url": server.url, "headers": []}]);
    let mut a = agent_with(&dir, &script, servers, &[]);
    let list = settled(&mut a);
    assert_eq!(
        status_of(&list, "web")["status"],
        "ready",
        "{list:?}\n{}",
        a.stderr_text()
    );
    assert_eq!(a.prompt_stop("go"), "end_turn", "{}", a.stderr_text());
    let listing = result_text(&tool_end(&a, "l1"));
    assert!(listing.contains("## echo"), "{listing}");
    let calls = a.tool_starts();
    assert_eq!(calls[1]["title"], "web: echo");
    let end = tool_end(&a, "c1");
    assert_eq!(
        (end["status"].as_str(), result_text(&end).as_str()),
        (Some("completed"), "Echo: over http")
    );
}

/// The client's headers reach an HTTP server exactly (with the session id and protocol
/// version), and never the log; a tool's `isError` is a `failed` call.
#[test]
fn http_headers_arrive_exactly_and_stay_out_of_the_log() {
    let test = "http_headers_arrive_exactly_and_stay_out_of_the_log";
    let Some(python) = deps::python(test) else {
        return;
    };
    let port = free_port();
    let (prog, args) = fixture_server(&python, &["http", &port.to_string()]);
    let server = HttpServer::start(Path::new(&prog), &args, port, &[]);
    let dir = TempDir::new("mcp-headers");
    let script = [
        call("h1", "mcp__task__headers", json!({})),
        call("f1", "mcp__task__fail", json!({})),
        json!({"text":"done"}),
    ];
    let servers = json!([{"name":"task","type":"http","url": server.url,
        "headers": [{"name":"Authorization","value":"Bearer tok-SECRET-9"},{"name":"X-Task","value":"t1"}]}]);
    let mut a = agent_with(&dir, &script, servers, &[]);
    let list = settled(&mut a);
    assert_eq!(
        status_of(&list, "task")["status"],
        "ready",
        "{list:?}\n{}",
        a.stderr_text()
    );
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let echoed: Value = serde_json::from_str(&result_text(&tool_end(&a, "h1"))).unwrap();
    let reversed: String = "Bearer tok-SECRET-9".chars().rev().collect();
    assert_eq!(echoed["authorization-reversed"], json!(reversed));
    assert_eq!(echoed["x-task"], "t1");
    assert!(
        echoed["mcp-session-id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{echoed}"
    );
    assert_eq!(echoed["mcp-protocol-version"], "2025-11-25");
    let failed = tool_end(&a, "f1");
    assert_eq!(failed["status"], "failed");
    // The SDK keeps the exception's text to itself.
    assert_eq!(result_text(&failed), "Error executing tool fail");
    assert!(a.finish().success());
    let log = a.stderr_text();
    let leak = log.lines().find(|l| l.contains("tok-SECRET-9"));
    assert!(leak.is_none(), "the header value reached the log: {leak:?}");
}

/// Servers that cannot start are `failed` in `_meta…mcp` with a reason; the model's call is
/// a clear tool error, and the turn still works.
#[test]
fn a_failing_server_is_visible_and_the_turn_goes_on() {
    let test = "a_failing_server_is_visible_and_the_turn_goes_on";
    let Some(python) = deps::python(test) else {
        return;
    };
    let dir = TempDir::new("mcp-fail");
    let (prog, args) = fixture_server(&python, &["crash"]);
    let script = [
        call("c1", "mcp_call_crashy", json!({"tool": "noop"})),
        json!({"text":"still here"}),
    ];
    let servers = json!([
        stdio_entry("crashy", &prog, &args, json!([])),
        stdio_entry("missing", "/nonexistent/mcp-server", &[], json!([])),
    ]);
    let mut a = agent_with(&dir, &script, servers, &[]);
    let list = settled(&mut a);
    let crashy = status_of(&list, "crashy");
    assert_eq!(crashy["status"], "failed");
    assert!(
        crashy["error"].as_str().unwrap().contains("exited"),
        "{crashy}"
    );
    let missing = status_of(&list, "missing");
    assert_eq!(missing["status"], "failed");
    assert!(
        missing["error"].as_str().unwrap().contains("cannot start"),
        "{missing}"
    );
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let end = tool_end(&a, "c1");
    assert_eq!(end["status"], "failed");
    assert!(
        result_text(&end).starts_with("MCP server crashy is not available: "),
        "{end}"
    );
    assert_eq!(a.text(), "still here");
    assert!(a.stderr_text().contains("MCP server crashy: failed"));
}

/// Cancel during a slow MCP call: the prompt is `cancelled`, and the server hears
/// `notifications/cancelled` (its handler is cancelled and leaves a mark).
#[test]
fn cancel_mid_call_tells_the_server() {
    let test = "cancel_mid_call_tells_the_server";
    let Some(python) = deps::python(test) else {
        return;
    };
    let dir = TempDir::new("mcp-cancel");
    let (prog, args) = fixture_server(&python, &["stdio"]);
    let mark = dir.path().display().to_string();
    let script = [call("s1", "mcp__py__slow", json!({"seconds": 60}))];
    let servers = json!([stdio_entry(
        "py",
        &prog,
        &args,
        json!([{"name":"MCP_MARK_DIR","value": mark}])
    )]);
    let mut a = agent_with(&dir, &script, servers, &[]);
    assert_eq!(
        status_of(&settled(&mut a), "py")["status"],
        "ready",
        "{}",
        a.stderr_text()
    );
    let id = a.prompt("go");
    a.wait_for("the slow call", |f| {
        f["params"]["update"]["sessionUpdate"] == "tool_call"
    });
    // The call is shown before its request reaches the server: cancel once the server runs it
    // (a cancel before that never sends the request, and there is nothing to tell).
    assert_eq!(wait_for_file(&dir.path().join("started")), "started");
    a.cancel();
    assert_eq!(a.response(&id)["result"]["stopReason"], "cancelled");
    assert_eq!(wait_for_file(&dir.path().join("cancelled")), "cancelled");
}

/// A stdio server runs in the session cwd with only the scrubbed environment plus the
/// client's; `session/close` kills it, a new session starts its own, and stdin EOF kills that.
#[test]
fn stdio_servers_get_a_scrubbed_env_and_die_with_their_session() {
    let test = "stdio_servers_get_a_scrubbed_env_and_die_with_their_session";
    let Some(python) = deps::python(test) else {
        return;
    };
    let dir = TempDir::new("mcp-life");
    let (prog, args) = fixture_server(&python, &["stdio"]);
    let script = [
        call("e1", "mcp__py__environment", json!({})),
        call("p1", "mcp__py__pid", json!({})),
        json!({"text":"one"}),
        call("p2", "mcp__py__pid", json!({})),
        json!({"text":"two"}),
    ];
    let entry = stdio_entry(
        "py",
        &prog,
        &args,
        json!([{"name":"TASK_TOKEN","value":"task-secret"}]),
    );
    let mut a = agent_with(
        &dir,
        &script,
        json!([entry.clone()]),
        &[("AGENT_ONLY_VAR", "x")],
    );
    assert_eq!(
        status_of(&settled(&mut a), "py")["status"],
        "ready",
        "{}",
        a.stderr_text()
    );
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let env: Value = serde_json::from_str(&result_text(&tool_end(&a, "e1"))).unwrap();
    let names: Vec<&str> = env["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        names.contains(&"TASK_TOKEN") && names.contains(&"PATH"),
        "{names:?}"
    );
    for leaked in ["AGENT_ONLY_VAR", "RUST_LOG", "PRIME_AGENT_CODING_AGENT_DIR"] {
        assert!(
            !names.contains(&leaked),
            "{leaked} reached the server: {names:?}"
        );
    }
    let cwd = PathBuf::from(env["cwd"].as_str().unwrap());
    assert_eq!(
        cwd.canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
    let pid1 = result_text(&tool_end(&a, "p1"));
    assert!(alive(&pid1));
    let sid = a.sid();
    let r = a.call("session/close", json!({"sessionId": sid}));
    assert_eq!(r["result"], json!({}));
    assert_dies(&pid1);
    new_session(&mut a, dir.path(), json!([entry]));
    assert_eq!(status_of(&settled(&mut a), "py")["status"], "ready");
    assert_eq!(a.prompt_stop("again"), "end_turn");
    let pid2 = result_text(&tool_end(&a, "p2"));
    assert_ne!(pid1, pid2, "the new session has its own server");
    assert!(a.finish().success());
    assert_dies(&pid2);
}

/// The kernel's pre-imported `mcp` object lists and calls tools through the host bridge
/// (the kernel never holds the server's command or env), and reports a missing server.
#[test]
fn the_kernel_mcp_object_reaches_the_servers_through_the_host() {
    let test = "the_kernel_mcp_object_reaches_the_servers_through_the_host";
    let Some(python) = deps::python(test) else {
        return;
    };
    let dir = TempDir::new("mcp-kernel");
    let (prog, args) = fixture_server(&python, &["stdio"]);
    let code = r#"tools = await mcp.list_tools("py")
print(sorted(t["name"] for t in tools))
r = await mcp.call_tool("py", "noop", {})
print(r["content"][0]["text"], r.get("isError", False))
print([(s["name"], s["type"], s["status"]) for s in await mcp.config()])
try:
    await mcp.call_tool("nope", "noop")
except RuntimeError as e:
    print("error:", e)"#;
    let script = [
        call("k1", "ipython", json!({"code": code})),
        json!({"text":"done"}),
    ];
    let servers = json!([stdio_entry("py", &prog, &args, json!([]))]);
    let mut a = agent_with(&dir, &script, servers, &[]);
    assert_eq!(
        status_of(&settled(&mut a), "py")["status"],
        "ready",
        "{}",
        a.stderr_text()
    );
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let out = result_text(&tool_end(&a, "k1"));
    assert_eq!(
        out.trim_end(),
        "['environment', 'fail', 'headers', 'noop', 'pid', 'slow']\n\
         ok False\n\
         [('py', 'stdio', 'ready')]\n\
         error: MCP server nope is not available: no such server in this session",
        "{out}\n{}",
        a.stderr_text()
    );
}

/// With `--multi-session` each session connects its own servers: both report `ready` on
/// their own session, and closing one kills only its server.
#[test]
fn each_multi_session_session_has_its_own_servers() {
    let test = "each_multi_session_session_has_its_own_servers";
    let Some(python) = deps::python(test) else {
        return;
    };
    let dir = TempDir::new("mcp-multi");
    let (prog, args) = fixture_server(&python, &["stdio"]);
    let script = script_file(
        &dir,
        &[
            call("pa", "mcp__py__pid", json!({})),
            json!({"text":"a"}),
            call("pb", "mcp__py__pid", json!({})),
            json!({"text":"b"}),
        ],
    );
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &["--multi-session"])
    });
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some());
    let servers = json!([stdio_entry("py", &prog, &args, json!([]))]);
    let sid_a = new_session(&mut a, dir.path(), servers.clone());
    let sid_b = new_session(&mut a, dir.path(), servers);
    let mut ready = Vec::new();
    while ready.len() < 2 {
        let f = a.wait_for("a session's server ready", |f| {
            ns(&f["params"]["update"])["mcp"][0]["status"] == "ready"
        });
        ready.push(f["params"]["sessionId"].as_str().unwrap().to_owned());
    }
    ready.sort();
    let mut want = vec![sid_a.clone(), sid_b.clone()];
    want.sort();
    assert_eq!(ready, want, "one ready server per session");
    let mut pids = Vec::new();
    for (sid, call_id) in [(&sid_a, "pa"), (&sid_b, "pb")] {
        a.session_id = Some(sid.clone());
        assert_eq!(a.prompt_stop("go"), "end_turn", "{}", a.stderr_text());
        pids.push(result_text(&tool_end(&a, call_id)));
    }
    assert_ne!(pids[0], pids[1]);
    let r = a.call("session/close", json!({"sessionId": sid_a}));
    assert_eq!(r["result"], json!({}));
    assert_dies(&pids[0]);
    assert!(alive(&pids[1]), "the other session's server must live on");
    assert!(a.finish().success());
    assert_dies(&pids[1]);
}

/// A `-p` run whose only MCP server comes from `settings.json`: the global file declares it,
/// the project's file (merged over it key by key) narrows its tools; the model calls the one
/// left, and the disabled one is not offered.
#[test]
fn a_print_run_uses_an_mcp_server_from_settings() {
    let test = "a_print_run_uses_an_mcp_server_from_settings";
    let Some(python) = deps::python(test) else {
        return;
    };
    let dir = TempDir::new("mcp-settings");
    let (prog, args) = fixture_server(&python, &["stdio"]);
    let global = json!({"mcpServers": {"fx": {"command": prog, "args": args,
        "disabledTools": ["fail"], "startupTimeoutMs": 20000, "callTimeoutMs": 15000}}});
    dir.write("agent/settings.json", &global.to_string());
    let project = json!({"mcpServers": {"fx": {"enabledTools": ["noop", "fail"]}}});
    dir.write("work/.prime/agent/settings.json", &project.to_string());
    let script = script_file(
        &dir,
        &[
            call("c1", "mcp__fx__noop", json!({})),
            json!({"steps":[{"expect":["tool_result mcp__fx__noop error=false: ok"]},
                            {"tool_call":{"id":"c2","name":"mcp__fx__fail","arguments":{}}}]}),
            json!({"steps":[{"expect":["tool_result mcp__fx__fail error=true"]}, {"text":"done"}]}),
        ],
    );
    let out = crate::support::agent_command(&dir.path().join("agent"))
        .args([
            "--provider",
            "scripted",
            "--script",
            &script,
            "--no-session",
        ])
        .args(["--mode", "acp-json", "go"])
        .current_dir(dir.path().join("work"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let updates: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let statuses: Vec<&Value> = updates
        .iter()
        .filter_map(|u| ns(u)["mcp"].as_array())
        .flatten()
        .collect();
    assert!(
        statuses
            .iter()
            .any(|s| s["name"] == "fx" && s["status"] == "ready" && s["tools"] == 1),
        "only noop is offered: {statuses:?}"
    );
    let ends: Vec<&Value> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .collect();
    assert!(ends
        .iter()
        .any(|u| u["toolCallId"] == "c1" && u["status"] == "completed"));
    assert!(ends
        .iter()
        .any(|u| u["toolCallId"] == "c2" && u["status"] == "failed"));
    assert!(stdout.contains("\"done\""), "{stdout}");
}
