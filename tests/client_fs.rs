//! Client files end to end: with `fs.readTextFile` / `fs.writeTextFile` advertised in
//! `initialize`, `read`, `edit` and `write` go through `fs/read_text_file` and
//! `fs/write_text_file` (the test plays the editor, whose buffer differs from the disk), and
//! the client's errors become tool errors. See: issue 14 item 5.

use serde_json::{json, Value};

use crate::support::*;

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"tool_call": {"id": id, "name": name, "arguments": args}})
}

/// An agent in `dir` on `lines` whose client offers `caps`, after the handshake.
fn agent(dir: &TempDir, lines: &[Value], caps: Value) -> Agent {
    let script = script_file(dir, lines);
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &[])
    });
    let r = a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let cwd = dir.path().display().to_string();
    let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    a.session_id = Some(r["result"]["sessionId"].as_str().unwrap().to_owned());
    a
}

#[test]
fn read_edit_and_write_go_through_the_client() {
    let dir = TempDir::new("client-fs");
    dir.write("notes.txt", "on disk\n");
    let notes = dir.path().join("notes.txt").display().to_string();
    let new = dir.path().join("new.txt").display().to_string();
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [call("r1", "read", json!({"path": "notes.txt"}))]}),
            json!({"steps": [
                {"expect": ["tool_result read error=false: unsaved buffer\nsecond line\n"]},
                call("e1", "edit", json!({"path": "notes.txt", "edits": [{"oldText": "unsaved", "newText": "edited"}]})),
            ]}),
            json!({"steps": [
                {"expect": ["tool_result edit error=false: Successfully replaced 1 block(s) in notes.txt."]},
                call("w1", "write", json!({"path": "new.txt", "content": "fresh\n"})),
            ]}),
            json!({"steps": [
                {"expect": ["tool_result write error=false: Successfully wrote 6 bytes to new.txt"]},
                call("w2", "write", json!({"path": "locked.txt", "content": "x"})),
            ]}),
            json!({"steps": [
                {"expect": ["tool_result write error=true: The client could not write"]},
                {"text": "done"},
            ]}),
        ],
        json!({"fs": {"readTextFile": true, "writeTextFile": true}}),
    );
    let sid = a.sid();
    let prompt = a.prompt("edit through the editor");
    // read: the editor's buffer, not the disk.
    let r = a.client_request("fs/read_text_file");
    assert_eq!(r["params"], json!({"sessionId": sid, "path": notes}));
    a.answer(
        &r["id"].clone(),
        json!({"content": "unsaved buffer\nsecond line\n"}),
    );
    // edit: read, then write the edited buffer.
    let r = a.client_request("fs/read_text_file");
    assert_eq!(r["params"]["path"], notes.as_str());
    a.answer(
        &r["id"].clone(),
        json!({"content": "unsaved buffer\nsecond line\n"}),
    );
    let w = a.client_request("fs/write_text_file");
    assert_eq!(
        w["params"],
        json!({"sessionId": sid, "path": notes, "content": "edited buffer\nsecond line\n"})
    );
    a.answer(&w["id"].clone(), json!(null));
    // write of a new file: the old text is asked for (the editor has none), then written.
    let r = a.client_request("fs/read_text_file");
    assert_eq!(r["params"]["path"], new.as_str());
    a.answer_error(&r["id"].clone(), -32002, "Resource not found");
    let w = a.client_request("fs/write_text_file");
    assert_eq!(w["params"]["content"], "fresh\n");
    a.answer(&w["id"].clone(), json!({}));
    // A write the client refuses is a tool error, not a failed turn.
    let r = a.client_request("fs/read_text_file");
    a.answer_error(&r["id"].clone(), -32002, "Resource not found");
    let w = a.client_request("fs/write_text_file");
    a.answer_error(&w["id"].clone(), -32603, "read-only buffer");
    let r = a.response(&prompt);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(a.text(), "done");
    // The disk was never touched.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "on disk\n"
    );
    assert!(!dir.path().join("new.txt").exists());
    // The edit's diff is against the buffer.
    let end = a
        .updates_of("tool_call_update")
        .into_iter()
        .rfind(|u| u["toolCallId"] == "e1")
        .unwrap();
    let diff = end["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "diff")
        .unwrap()
        .clone();
    assert_eq!(diff["oldText"], "unsaved buffer\nsecond line\n");
    assert_eq!(diff["newText"], "edited buffer\nsecond line\n");
}

#[test]
fn without_the_capability_files_stay_local() {
    let dir = TempDir::new("client-fs-local");
    dir.write("notes.txt", "on disk\n");
    let mut a = agent(
        &dir,
        &[
            json!({"steps": [call("r1", "read", json!({"path": "notes.txt"}))]}),
            json!({"steps": [{"expect": ["tool_result read error=false: on disk\n"]}, {"text": "ok"}]}),
        ],
        // Only writes are offered: reads stay local.
        json!({"fs": {"writeTextFile": true}}),
    );
    assert_eq!(a.prompt_stop("read"), "end_turn");
    assert!(a.client_requests("fs/read_text_file").is_empty());
}

#[test]
fn bash_runs_in_the_client_terminal_with_client_terminal() {
    // See: issue 14 item 5 (client terminals).
    let dir = TempDir::new("client-term");
    let script = script_file(
        &dir,
        &[
            json!({"steps": [call("b1", "bash", json!({"command": "echo hi"}))]}),
            json!({"steps": [
                {"expect": ["tool_result bash error=false: hi\n"]},
                call("b2", "bash", json!({"command": "false"})),
            ]}),
            json!({"steps": [{"expect": ["tool_result bash error=true: (no output)\n\nCommand exited with code 1"]}, {"text": "ran"}]}),
            json!({"steps": [call("b3", "bash", json!({"command": "sleep 100"}))]}),
        ],
    );
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &["--client-terminal"])
    });
    a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"terminal": true}}),
    );
    let cwd = dir.path().display().to_string();
    let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    a.session_id = Some(sid.clone());
    let prompt = a.prompt("run");
    let terminal = json!({"sessionId": sid, "terminalId": "t1"});
    let create = a.client_request("terminal/create");
    assert_eq!(
        create["params"],
        json!({"sessionId": sid, "command": "bash", "args": ["-c", "echo hi"], "cwd": cwd, "outputByteLimit": 1048576})
    );
    a.answer(&create["id"].clone(), json!({"terminalId": "t1"}));
    let wait = a.client_request("terminal/wait_for_exit");
    assert_eq!(wait["params"], terminal);
    // The tool call shows the terminal while it runs.
    let embedded = a
        .updates_of("tool_call_update")
        .into_iter()
        .find(|u| u["toolCallId"] == "b1" && u.get("content").is_some())
        .expect("the terminal embedded in the call");
    assert_eq!(
        embedded["content"],
        json!([{"type": "terminal", "terminalId": "t1"}])
    );
    a.answer(&wait["id"].clone(), json!({"exitCode": 0}));
    let output = a.client_request("terminal/output");
    a.answer(
        &output["id"].clone(),
        json!({"output": "hi\n", "truncated": false, "exitStatus": {"exitCode": 0}}),
    );
    let release = a.client_request("terminal/release");
    assert_eq!(release["params"], terminal);
    a.answer(&release["id"].clone(), json!({}));
    // Second command: exit code 1.
    let create = a.client_request("terminal/create");
    a.answer(&create["id"].clone(), json!({"terminalId": "t2"}));
    let wait = a.client_request("terminal/wait_for_exit");
    a.answer(&wait["id"].clone(), json!({"exitCode": 1}));
    let output = a.client_request("terminal/output");
    a.answer(
        &output["id"].clone(),
        json!({"output": "", "truncated": false}),
    );
    let release = a.client_request("terminal/release");
    a.answer(&release["id"].clone(), json!(null));
    assert_eq!(a.response(&prompt)["result"]["stopReason"], "end_turn");
    assert_eq!(a.text(), "ran");
    let end = a
        .updates_of("tool_call_update")
        .into_iter()
        .rfind(|u| u["toolCallId"] == "b1")
        .unwrap();
    assert_eq!(end["status"], "completed");
    assert_eq!(
        end["content"][0],
        json!({"type": "terminal", "terminalId": "t1"})
    );

    // Cancel while the command runs: $/cancel_request for the wait, the terminal released.
    let prompt = a.prompt("again");
    let create = a.client_request("terminal/create");
    a.answer(&create["id"].clone(), json!({"terminalId": "t3"}));
    let wait = a.client_request("terminal/wait_for_exit");
    a.cancel();
    let cancel = a.wait_for("$/cancel_request", |f| f["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], wait["id"]);
    let release = a.client_request("terminal/release");
    assert_eq!(release["params"]["terminalId"], "t3");
    assert_eq!(a.response(&prompt)["result"]["stopReason"], "cancelled");
    a.answer(&release["id"].clone(), json!({}));
    a.answer_error(&wait["id"].clone(), -32800, "Request cancelled");
    assert!(a.finish().success());
}

#[test]
fn without_client_terminal_bash_stays_local() {
    let dir = TempDir::new("client-term-local");
    let script = script_file(
        &dir,
        &[
            json!({"steps": [call("b1", "bash", json!({"command": "echo local"}))]}),
            json!({"steps": [{"expect": ["tool_result bash error=false: local"]}, {"text": "ok"}]}),
        ],
    );
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &[])
    });
    a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"terminal": true}}),
    );
    let cwd = dir.path().display().to_string();
    let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    a.session_id = Some(r["result"]["sessionId"].as_str().unwrap().to_owned());
    assert_eq!(a.prompt_stop("run"), "end_turn");
    assert!(a.client_requests("terminal/create").is_empty());
}
