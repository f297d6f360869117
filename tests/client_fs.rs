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
