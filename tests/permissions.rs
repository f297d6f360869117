//! Permission modes end to end: `ask` sends `session/request_permission` before writes, edits
//! and commands and honours each answer (remembered `allow_always`, `reject_once` fed back to
//! the model, cancel while a request is pending); `read-only` refuses without asking; the
//! modes and the `mode` config option stay in step. The test plays the client and answers the
//! agent's requests itself. See: issue 14 item 3, ACP `session/request_permission`.

use serde_json::{json, Value};

use crate::support::*;

fn bash(id: &str, command: &str) -> Value {
    json!({"tool_call": {"id": id, "name": "bash", "arguments": {"command": command}}})
}

/// An agent on `lines` in `dir` with `--permission-mode mode`, after the handshake.
fn agent(dir: &TempDir, lines: &[Value], mode: &str) -> Agent {
    let script = script_file(dir, lines);
    agent_in(dir, &script, &["--permission-mode", mode])
}

#[test]
fn allow_always_covers_the_next_command_with_the_same_first_word() {
    let dir = TempDir::new("perm-always");
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [bash("c1", "echo one > one.txt")]}),
            // A simple command with the same first word: the remembered answer covers it.
            json!({"steps": [{"expect": ["tool_result bash error=false"]}, bash("c2", "echo two")]}),
            json!({"steps": [{"expect": ["tool_result bash error=false: two"]}, {"text": "done"}]}),
        ],
        "ask",
    );
    let sid = a.sid();
    let prompt = a.prompt("go");
    let request = a.client_request("session/request_permission");
    let params = &request["params"];
    assert_eq!(params["sessionId"], sid.as_str());
    assert_eq!(params["toolCall"]["toolCallId"], "c1");
    assert_eq!(params["toolCall"]["kind"], "execute");
    assert_eq!(params["toolCall"]["title"], "echo one > one.txt");
    assert_eq!(
        params["toolCall"]["rawInput"]["command"],
        "echo one > one.txt"
    );
    let kinds: Vec<&str> = params["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    assert_eq!(params["options"][1]["name"], "Always allow `echo` commands");
    // The call was shown awaiting approval before the request.
    let pending = a
        .updates_of("tool_call")
        .into_iter()
        .find(|u| u["toolCallId"] == "c1")
        .expect("tool_call c1 before its permission request");
    assert_eq!(pending["status"], "pending");
    a.select_option(&request, "allow_always");
    let r = a.response(&prompt);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(a.text(), "done");
    // Ran, and the second `echo` ran without a request.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("one.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(a.client_requests("session/request_permission").len(), 1);
    let c1: Vec<Value> = a
        .updates()
        .into_iter()
        .filter(|u| u["toolCallId"] == "c1")
        .collect();
    // Shown awaiting approval, then running once allowed.
    let statuses: Vec<&str> = c1.iter().filter_map(|u| u["status"].as_str()).collect();
    let pending = statuses.iter().rposition(|s| *s == "pending").unwrap();
    assert_eq!(statuses[pending + 1], "in_progress", "{c1:?}");
    assert_eq!(c1.last().unwrap()["status"], "completed", "{c1:?}");
    let c2 = a
        .tool_starts()
        .into_iter()
        .find(|u| u["toolCallId"] == "c2")
        .unwrap();
    // Announced with its reply (`pending`), then run without a request.
    assert_eq!(c2["status"], "pending");
    assert!(a
        .updates_of("tool_call_update")
        .iter()
        .any(|u| u["toolCallId"] == "c2" && u["status"] == "in_progress"));
}

#[test]
fn a_remembered_allow_does_not_cover_a_compound_command() {
    let dir = TempDir::new("perm-compound");
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [bash("c1", "echo a")]}),
            json!({"steps": [bash("c2", "echo b; touch evil")]}),
            json!({"steps": [{"expect": ["tool_result bash error=true: bash did not run: the user rejected this call."]}, {"text": "ok"}]}),
        ],
        "ask",
    );
    let prompt = a.prompt("go");
    let first = a.client_request("session/request_permission");
    a.select_option(&first, "allow_always");
    let second = a.client_request("session/request_permission");
    assert_eq!(second["params"]["toolCall"]["toolCallId"], "c2");
    a.select_option(&second, "reject_once");
    assert_eq!(a.response(&prompt)["result"]["stopReason"], "end_turn");
    assert!(!dir.path().join("evil").exists());
}

#[test]
fn reject_once_reaches_the_model_as_a_failed_tool_call() {
    let dir = TempDir::new("perm-reject");
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [{"tool_call": {"id": "w1", "name": "write", "arguments": {"path": "x.txt", "content": "x"}}}]}),
            json!({"steps": [{"expect": ["tool_result write error=true: write did not run: the user rejected this call. Do not retry it unchanged"]}, {"text": "understood"}]}),
        ],
        "ask",
    );
    let prompt = a.prompt("write it");
    let request = a.client_request("session/request_permission");
    assert_eq!(request["params"]["toolCall"]["kind"], "edit");
    let path = dir.path().join("x.txt").display().to_string();
    assert_eq!(
        request["params"]["toolCall"]["locations"][0]["path"],
        path.as_str()
    );
    assert_eq!(
        request["params"]["options"][3]["name"],
        format!("Always reject changes to {path}")
    );
    a.select_option(&request, "reject_once");
    assert_eq!(a.response(&prompt)["result"]["stopReason"], "end_turn");
    assert!(!dir.path().join("x.txt").exists());
    let end = a
        .updates_of("tool_call_update")
        .into_iter()
        .rfind(|u| u["toolCallId"] == "w1")
        .unwrap();
    assert_eq!(end["status"], "failed");
    assert_eq!(a.text(), "understood");
}

#[test]
fn cancel_during_a_pending_request_sends_cancel_request_and_answers_cancelled() {
    let dir = TempDir::new("perm-cancel");
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [bash("c1", "touch never")]}),
            json!({"text": "next prompt"}),
        ],
        "ask",
    );
    let prompt = a.prompt("go");
    let request = a.client_request("session/request_permission");
    a.cancel();
    let cancel = a.wait_for("$/cancel_request", |f| f["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], request["id"]);
    let r = a.response(&prompt);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    // The $/cancel_request came before the prompt's answer.
    let at = |pred: &dyn Fn(&Value) -> bool| a.seen.iter().position(pred).unwrap();
    assert!(at(&|f| f["method"] == "$/cancel_request") < at(&|f| f.get("id") == Some(&prompt)));
    // The client answers the cancelled request late, as the spec says it must: dropped.
    let id = request["id"].clone();
    a.answer_error(&id, -32800, "Request cancelled");
    assert!(!dir.path().join("never").exists());
    // The session goes on.
    assert_eq!(a.prompt_stop("again"), "end_turn");
    assert_eq!(a.text(), "next prompt");
}

#[test]
fn read_only_refuses_writes_and_commands_without_asking() {
    let dir = TempDir::new("perm-ro");
    dir.write("notes.txt", "hello\n");
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [{"tool_call": {"id": "r1", "name": "read", "arguments": {"path": "notes.txt"}}}]}),
            json!({"steps": [{"expect": ["tool_result read error=false: hello"]}, bash("b1", "touch nope")]}),
            json!({"steps": [{"expect": ["tool_result bash error=true: bash did not run: the session is in read-only mode"]}, {"text": "read only"}]}),
        ],
        "read-only",
    );
    assert_eq!(a.prompt_stop("look"), "end_turn");
    assert!(a.client_requests("session/request_permission").is_empty());
    assert!(!dir.path().join("nope").exists());
}

#[test]
fn modes_and_the_mode_option_stay_in_step() {
    let dir = TempDir::new("perm-modes");
    let script = script_file(&dir, &[json!({"text": "hi"})]);
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &[])
    });
    a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = dir.path().display().to_string();
    let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let result = &r["result"];
    let sid = result["sessionId"].as_str().unwrap().to_owned();
    a.session_id = Some(sid.clone());
    assert_eq!(result["modes"]["currentModeId"], "full-access");
    let ids: Vec<&str> = result["modes"]["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["full-access", "ask", "read-only"]);
    let mode = &result["configOptions"][0];
    assert_eq!(
        (&mode["id"], &mode["category"]),
        (&json!("mode"), &json!("mode"))
    );
    assert_eq!(mode["currentValue"], "full-access");

    // session/set_mode: {} and then a config_option_update with the new value.
    let r = a.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "ask"}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    let u = a.wait_for("config_option_update", |f| {
        f["params"]["update"]["sessionUpdate"] == "config_option_update"
    });
    assert_eq!(
        u["params"]["update"]["configOptions"][0]["currentValue"],
        "ask"
    );

    // The config option: the options, then a current_mode_update.
    let r = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "mode", "value": "read-only"}),
    );
    assert_eq!(
        r["result"]["configOptions"][0]["currentValue"], "read-only",
        "{r}"
    );
    let u = a.wait_for("current_mode_update", |f| {
        f["params"]["update"]["sessionUpdate"] == "current_mode_update"
    });
    assert_eq!(u["params"]["update"]["currentModeId"], "read-only");

    // Errors.
    let r = a.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "yolo"}),
    );
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(
        r["error"]["data"]["reason"],
        "Permission mode is not available: yolo"
    );
    let r = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "mode", "value": 3}),
    );
    assert_eq!(
        r["error"]["data"]["reason"],
        "Invalid value for ACP config option mode: 3"
    );
    let r = a.call(
        "session/set_mode",
        json!({"sessionId": "nope", "modeId": "ask"}),
    );
    assert_eq!(r["error"]["message"], "Unknown ACP session: nope");
}

#[test]
fn an_unknown_permission_mode_fails_start_up() {
    let dir = TempDir::new("permission-mode-yolo");
    let out = agent_command(dir.path())
        .args(["--permission-mode", "yolo"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("Unknown permission mode \"yolo\". Valid modes: full-access, ask, read-only"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_todo_list_reaches_the_client_as_plan_updates() {
    // See: issue 14 item 4. Plans need no permission in any mode.
    let dir = TempDir::new("plan");
    let todo = |id: &str, items: Value| json!({"tool_call": {"id": id, "name": "todo", "arguments": {"todos": items}}});
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [todo("p1", json!([
                {"content": "Read the code", "status": "in_progress", "priority": "high"},
                {"content": "Fix the bug", "status": "pending"},
            ]))]}),
            json!({"steps": [
                {"expect": ["tool_result todo error=false: Todo list updated: 2 item(s), 0 completed, 1 in progress, 1 pending."]},
                todo("p2", json!([
                    {"content": "Read the code", "status": "completed", "priority": "high"},
                    {"content": "Fix the bug", "status": "in_progress"},
                ])),
            ]}),
            json!({"steps": [{"expect": ["[x] Read the code (high)"]}, {"text": "planned"}]}),
        ],
        "read-only",
    );
    assert_eq!(a.prompt_stop("plan it"), "end_turn");
    let plans = a.updates_of("plan");
    assert_eq!(plans.len(), 2, "{plans:?}");
    assert_eq!(
        plans[1]["entries"],
        json!([
            {"content": "Read the code", "status": "completed", "priority": "high"},
            {"content": "Fix the bug", "status": "in_progress", "priority": "medium"},
        ])
    );
    assert_eq!(plans[0]["entries"][0]["status"], "in_progress");
    let call = a
        .tool_starts()
        .into_iter()
        .find(|u| u["toolCallId"] == "p1")
        .unwrap();
    assert_eq!(
        (&call["kind"], &call["title"]),
        (&json!("think"), &json!("Update the plan"))
    );
    assert!(a.client_requests("session/request_permission").is_empty());
}

#[test]
fn stray_responses_and_eof_during_a_pending_request_are_survived() {
    // See: issue 14 item 1. A response to a request the agent never sent is logged and
    // dropped; closing stdin while a permission request waits answers the prompt and exits.
    let dir = TempDir::new("perm-eof");
    let mut a = agent(
        &dir,
        &[json!({"steps": [bash("c1", "touch never")]})],
        "ask",
    );
    a.send(&json!({"jsonrpc": "2.0", "id": 9999, "result": {"outcome": {"outcome": "cancelled"}}}));
    a.send(&json!({"jsonrpc": "2.0", "id": "x", "error": {"code": -32800, "message": "no"}}));
    let prompt = a.prompt("go");
    let request = a.client_request("session/request_permission");
    // A malformed answer to the real request is a refusal, not a crash.
    a.answer(&request["id"].clone(), json!({"outcome": "yes"}));
    let end = a.wait_for("the refused call", |f| {
        f["params"]["update"]["toolCallId"] == "c1" && f["params"]["update"]["status"] == "failed"
    });
    let text = end["params"]["update"]["content"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("the client's answer to the permission request was not understood"),
        "{text}"
    );
    // The script has no reply left: the prompt fails cleanly.
    let r = a.response(&prompt);
    assert!(r.get("error").is_some(), "{r}");
    assert!(!dir.path().join("never").exists());
    assert!(a.finish().success());
}

#[test]
fn stdin_closing_while_a_request_waits_answers_the_prompt_cancelled() {
    let dir = TempDir::new("perm-eof");
    let mut a = agent(
        &dir,
        &[json!({"steps": [bash("c1", "touch never")]})],
        "ask",
    );
    let prompt = a.prompt("go");
    a.client_request("session/request_permission");
    a.close_stdin();
    let r = a.response(&prompt);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    assert!(a.finish().success());
    assert!(!dir.path().join("never").exists());
}

#[test]
fn ask_mode_asks_before_an_mcp_call_and_remembers_the_tool() {
    // See: issue 14 item 3 ("and MCP calls"): scoped to the tool.
    let test = "ask_mode_asks_before_an_mcp_call_and_remembers_the_tool";
    let Some(server) = deps::npm_bin("mcp-server-everything", test) else {
        return;
    };
    let dir = TempDir::new("perm-mcp");
    let echo = |id: &str, message: &str| json!({"tool_call": {"id": id, "name": "mcp__ev__echo", "arguments": {"message": message}}});
    let script = script_file(
        &dir,
        &[
            json!({"steps": [echo("m1", "one")]}),
            json!({"steps": [{"expect": ["tool_result mcp__ev__echo error=false: Echo: one"]}, echo("m2", "two")]}),
            json!({"steps": [{"expect": ["tool_result mcp__ev__echo error=false: Echo: two"]}, {"text": "done"}]}),
        ],
    );
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &["--permission-mode", "ask"])
    });
    a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let servers = json!([{"name": "ev", "command": server.display().to_string(), "args": ["stdio"], "env": []}]);
    let cwd = dir.path().display().to_string();
    let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    a.session_id = Some(r["result"]["sessionId"].as_str().unwrap().to_owned());
    a.wait_for("the MCP server ready", |f| {
        ns(&f["params"]["update"])["mcp"]
            .as_array()
            .is_some_and(|l| l.iter().all(|s| s["status"] != "connecting"))
    });
    let prompt = a.prompt("echo twice");
    let request = a.client_request("session/request_permission");
    assert_eq!(request["params"]["toolCall"]["title"], "ev: echo");
    assert_eq!(
        request["params"]["options"][1]["name"],
        "Always allow mcp__ev__echo calls"
    );
    a.select_option(&request, "allow_always");
    assert_eq!(
        a.response(&prompt)["result"]["stopReason"],
        "end_turn",
        "{}",
        a.stderr_text()
    );
    assert_eq!(a.client_requests("session/request_permission").len(), 1);
}

#[test]
fn remembered_answers_belong_to_their_session() {
    let dir = TempDir::new("perm-multi");
    let script = script_file(
        &dir,
        &[
            json!({"steps": [bash("a1", "echo a")]}),
            json!({"text": "one"}),
            json!({"steps": [bash("b1", "echo a")]}),
            json!({"text": "two"}),
            json!({"steps": [bash("a2", "echo a")]}),
            json!({"text": "three"}),
        ],
    );
    let mut a = Agent::spawn(Spawn::scripted(
        &script,
        &["--multi-session", "--permission-mode", "ask"],
    ));
    a.call("initialize", json!({"protocolVersion": 1}));
    let cwd = dir.path().display().to_string();
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        assert_eq!(r["result"]["modes"]["currentModeId"], "ask", "{r}");
        sessions.push(r["result"]["sessionId"].as_str().unwrap().to_owned());
    }
    let run = |a: &mut Agent, sid: &str| {
        a.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}),
        )
    };
    let p = run(&mut a, &sessions[0]);
    let request = a.client_request("session/request_permission");
    assert_eq!(request["params"]["sessionId"], sessions[0].as_str());
    a.select_option(&request, "allow_always");
    assert_eq!(a.response(&p)["result"]["stopReason"], "end_turn");
    // The other session has not allowed anything.
    let p = run(&mut a, &sessions[1]);
    let request = a.client_request("session/request_permission");
    assert_eq!(request["params"]["sessionId"], sessions[1].as_str());
    a.select_option(&request, "allow_once");
    assert_eq!(a.response(&p)["result"]["stopReason"], "end_turn");
    // The first still remembers.
    let p = run(&mut a, &sessions[0]);
    assert_eq!(a.response(&p)["result"]["stopReason"], "end_turn");
    assert_eq!(a.client_requests("session/request_permission").len(), 2);
}
