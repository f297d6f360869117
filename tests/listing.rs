//! `session/list` over a big sessions directory (issue 19, defect 6): every row right without
//! parsing whole files, and the list never on the main loop, so another session's cancel is
//! answered while the list is still being read. The same for `session/load` of a big session:
//! the file is read off the loop, and what names the session meanwhile waits for its open.

use std::io::Write;

use serde_json::{json, Value};

use crate::support::sessions;
use crate::support::*;

/// A session file of about `mb` MiB as an older version wrote it: the title after a long
/// first exchange (so a first listing must look past its head and tail), then more exchanges.
fn stored_session(
    dir: &std::path::Path,
    i: usize,
    cwd: &str,
    mb: usize,
) -> (String, String, String) {
    let id = format!("0190{i:04x}-0000-7000-8000-000000000000");
    let title = format!("Stored session {i}");
    let mut f = std::fs::File::create(dir.join(format!("{id}.jsonl"))).unwrap();
    let header = json!({"type": "session", "version": 3, "id": id, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": cwd});
    writeln!(f, "{header}").unwrap();
    let chunk = "y".repeat(1024 * 1024);
    // Lines as this binary writes them (keys in order), without a JSON tree per line: the
    // test writes 240 MB.
    let mut parent = "null".to_owned();
    let mut n = 0;
    let mut entry = |f: &mut std::fs::File, body: &str, kind: &str| -> String {
        n += 1;
        let ts = format!(
            "2026-01-{:02}T00:{:02}:{:02}.000Z",
            1 + i % 28,
            i / 60 % 60,
            n % 60
        );
        writeln!(
            f,
            r#"{{"id":"{n:08x}",{body},"parentId":{parent},"timestamp":"{ts}","type":"{kind}"}}"#
        )
        .unwrap();
        parent = format!("\"{n:08x}\"");
        ts
    };
    let user = format!(r#""message":{{"content":"{chunk}","role":"user","timestamp":1}}"#);
    let answer = format!(
        r#""message":{{"content":[{{"text":"{chunk}","type":"text"}}],"role":"assistant","stopReason":"stop","timestamp":1}}"#
    );
    entry(&mut f, &user, "message");
    entry(&mut f, &answer, "message");
    entry(&mut f, &format!(r#""name":"{title}""#), "session_info");
    let mut last = String::new();
    for _ in 0..mb.saturating_sub(2) / 2 {
        entry(&mut f, &user, "message");
        last = entry(&mut f, &answer, "message");
    }
    (id, title, last)
}

#[test]
fn session_list_over_30_files_of_8_mb_is_right_and_holds_no_cancel() {
    let dir = TempDir::new("listing-big");
    let store = dir.path().join("sessions");
    std::fs::create_dir_all(&store).unwrap();
    let cwd = dir.path().display().to_string();
    let mut want: Vec<(String, String, String)> = (0..30)
        .map(|i| stored_session(&store, i, &cwd, 8))
        .collect();
    // Newest first.
    want.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let script = script_file(&dir, &[json!({"steps": [{"wait_for_cancel": true}]})]);
    let mut a = sessions::in_dir(&dir, &script, &["--multi-session"], &[]);
    let other = a.handshake();
    // A prompt in one session, then a list of all sessions, then that session's cancel: the
    // loop hands the list to its worker and answers the cancelled prompt without waiting.
    let prompt = a.prompt("wait");
    let list = a.request("session/list", json!({}));
    a.notify("session/cancel", json!({"sessionId": other}));
    let at = |a: &Agent, id: &Value| {
        a.seen
            .iter()
            .position(|f| f.get("id") == Some(id) && f.get("method").is_none())
    };
    while at(&a, &prompt).is_none() || at(&a, &list).is_none() {
        a.next_frame(std::time::Duration::from_secs(60))
            .expect("both answers");
    }
    let (p, l) = (at(&a, &prompt).unwrap(), at(&a, &list).unwrap());
    let (cancelled, listed) = (a.seen[p].clone(), a.seen[l].clone());
    assert_eq!(
        cancelled["result"]["stopReason"], "cancelled",
        "{cancelled}"
    );
    assert!(p < l, "the cancel waited behind the list");
    let rows = |listed: &Value| -> Vec<(String, String, String)> {
        listed["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["sessionId"] != other.as_str())
            .map(|s| {
                assert_eq!(s["cwd"], cwd.as_str());
                (
                    s["sessionId"].as_str().unwrap().to_owned(),
                    s["title"].as_str().unwrap_or("(none)").to_owned(),
                    s["updatedAt"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(rows(&listed), want, "{listed}");
    // The index answers the next list with the same rows.
    let again = a.call("session/list", json!({}));
    assert_eq!(rows(&again), want);
    reliability_line("session_list_over_30_files_of_8_mb", 1, 3, 3, 0);
}

#[test]
fn session_load_of_a_big_file_holds_no_cancel_and_what_names_it_waits_for_it() {
    let dir = TempDir::new("load-big");
    let store = dir.path().join("sessions");
    std::fs::create_dir_all(&store).unwrap();
    let cwd = dir.path().display().to_string();
    // 48 MiB: 23 exchanges after the first, each message 1 MiB.
    let (big, title, _) = stored_session(&store, 7, &cwd, 48);
    let script = script_file(&dir, &[json!({"steps": [{"wait_for_cancel": true}]})]);
    let mut a = sessions::in_dir(&dir, &script, &["--multi-session"], &[]);
    let other = a.handshake();
    let prompt = a.prompt("wait");
    // The load, then (before its answer) a cancel and a close of the session being loaded,
    // then the other session's cancel: the loop hands the read to the store worker and answers
    // the cancelled prompt at once; the loaded session's cancel and close run once it is open.
    let load = a.request(
        "session/load",
        json!({"sessionId": big, "cwd": cwd, "mcpServers": []}),
    );
    a.notify("session/cancel", json!({"sessionId": big}));
    let close = a.request("session/close", json!({"sessionId": big}));
    a.notify("session/cancel", json!({"sessionId": other}));
    let at = |a: &Agent, id: &Value| {
        a.seen
            .iter()
            .position(|f| f.get("id") == Some(id) && f.get("method").is_none())
    };
    while [&prompt, &load, &close]
        .iter()
        .any(|id| at(&a, id).is_none())
    {
        a.next_frame(std::time::Duration::from_secs(60))
            .expect("three answers");
    }
    let (p, l, c) = (
        at(&a, &prompt).unwrap(),
        at(&a, &load).unwrap(),
        at(&a, &close).unwrap(),
    );
    assert_eq!(
        a.seen[p]["result"]["stopReason"], "cancelled",
        "{}",
        a.seen[p]
    );
    assert!(p < l, "the other session's cancel waited behind the load");
    assert!(a.seen[l]["result"].is_object(), "{}", a.seen[l]);
    // The close waited for the open (not `Unknown ACP session`), after the load's answer.
    assert!(l < c, "the close was answered before the load");
    assert_eq!(a.seen[c]["result"], json!({}), "{}", a.seen[c]);
    // The replay came before the load's answer, every message of the file in it.
    let replayed = |kind: &str| {
        a.seen[..l]
            .iter()
            .filter(|f| {
                f["params"]["sessionId"] == big.as_str()
                    && f["params"]["update"]["sessionUpdate"] == kind
            })
            .count()
    };
    assert_eq!(replayed("user_message_chunk"), 24);
    assert_eq!(replayed("agent_message_chunk"), 24);
    // Closed, the session is unknown again, and its file is free to load once more.
    let r = a.call("session/close", json!({"sessionId": big}));
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Unknown ACP session")),
        "{r}"
    );
    let again = a.call(
        "session/resume",
        json!({"sessionId": big, "cwd": cwd, "mcpServers": []}),
    );
    assert!(again["result"].is_object(), "{again}");
    let listed = a.call("session/list", json!({}));
    let row = listed["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == big.as_str())
        .cloned()
        .unwrap();
    assert_eq!(row["title"], title.as_str());
}

#[test]
fn stdin_closed_while_a_big_session_loads_still_answers_the_load_and_what_waited_for_it() {
    let dir = TempDir::new("load-eof");
    let store = dir.path().join("sessions");
    std::fs::create_dir_all(&store).unwrap();
    let cwd = dir.path().display().to_string();
    let (big, _, _) = stored_session(&store, 9, &cwd, 32);
    let script = script_file(&dir, &[json!({"steps": [{"text": "hi"}]})]);
    let mut a = sessions::in_dir(&dir, &script, &[], &[]);
    a.call("initialize", json!({"protocolVersion": 1}));
    let load = a.request(
        "session/load",
        json!({"sessionId": big, "cwd": cwd, "mcpServers": []}),
    );
    let close = a.request("session/close", json!({"sessionId": big}));
    a.close_stdin();
    let status = a
        .wait_exit(std::time::Duration::from_secs(60))
        .expect("the agent exits");
    assert!(status.success(), "{status:?}");
    while a.next_frame(std::time::Duration::from_secs(1)).is_some() {}
    let answers = |id: &Value| -> Vec<Value> {
        a.seen
            .iter()
            .filter(|f| f.get("id") == Some(id) && f.get("method").is_none())
            .cloned()
            .collect()
    };
    let (loaded, closed) = (answers(&load), answers(&close));
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert_eq!(closed.len(), 1, "{closed:?}");
    // Opened in time: the close closes it; else both say why not.
    if loaded[0]["result"].is_object() {
        assert_eq!(closed[0]["result"], json!({}), "{closed:?}");
    } else {
        let text = loaded[0]["error"]["data"]["details"].to_string()
            + loaded[0]["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains("exiting"), "{loaded:?}");
    }
}
