//! Several sessions on one connection (`--multi-session`): each runs in its own cwd, turns run
//! concurrently, and cancel and close touch only their own session.

use serde_json::{json, Value};

use crate::support::*;

fn new_session(a: &mut Agent, cwd: &str) -> Value {
    a.call("session/new", json!({"cwd": cwd, "mcpServers": []}))
}

fn prompt_in(a: &mut Agent, sid: &str, text: &str) -> Value {
    a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
    )
}

/// Sends a prompt to session `sid` and returns its response.
fn ask(a: &mut Agent, sid: &str, text: &str) -> Value {
    let id = prompt_in(a, sid, text);
    a.response(&id)
}

/// Every frame seen so far that belongs to session `sid`, as text.
fn frames_of(a: &Agent, sid: &str) -> String {
    a.seen
        .iter()
        .filter(|f| f["params"]["sessionId"] == sid)
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn two_sessions_run_concurrently_in_their_own_cwds_and_cancel_and_close_stay_local() {
    let one = TempDir::new("multi-one");
    let two = TempDir::new("multi-two");
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = Agent::spawn(Spawn::scripted(&hello, &["--multi-session"]));
    a.call("initialize", json!({"protocolVersion": 1}));
    let (dir1, dir2) = (
        one.path().display().to_string(),
        two.path().display().to_string(),
    );
    let r = new_session(&mut a, &dir1);
    let s1 = r["result"]["sessionId"]
        .as_str()
        .expect("session one")
        .to_owned();
    assert!(r["result"].get("_meta").is_none(), "runs where asked: {r}");
    let r = new_session(&mut a, &dir2);
    let s2 = r["result"]["sessionId"]
        .as_str()
        .expect("session two")
        .to_owned();
    assert_ne!(s1, s2);

    // Session one runs a long command; session two works meanwhile, in its own cwd.
    let long = prompt_in(&mut a, &s1, "!sleep 30");
    a.wait_for("session one's command", |f| {
        f["params"]["sessionId"] == s1.as_str()
            && f["params"]["update"]["sessionUpdate"] == "tool_call"
    });
    let r = ask(&mut a, &s2, "!pwd");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(frames_of(&a, &s2).contains(&dir2), "pwd of session two");
    let r = ask(&mut a, &s1, "!pwd");
    assert_eq!(
        r["error"]["message"],
        "A prompt turn is already running for this ACP session"
    );

    // Cancelling session one answers its prompt and leaves session two alone.
    a.notify("session/cancel", json!({"sessionId": s1}));
    assert_eq!(a.response(&long)["result"]["stopReason"], "cancelled");
    let r = ask(&mut a, &s2, "!echo still here");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    // Closing session one leaves session two working; session one is gone.
    assert_eq!(
        a.call("session/close", json!({"sessionId": s1}))["result"],
        json!({})
    );
    let r = ask(&mut a, &s1, "!pwd");
    assert_eq!(r["error"]["message"], format!("Unknown ACP session: {s1}"));
    a.seen.clear();
    let r = ask(&mut a, &s2, "!pwd");
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let two_frames = frames_of(&a, &s2);
    assert!(two_frames.contains(&dir2) && !two_frames.contains(&dir1));
    // Each session numbers its own prompt turns and event sequence.
    let turn_ids: Vec<u64> = a
        .seen
        .iter()
        .filter(|f| f["params"]["sessionId"] == s2.as_str())
        .filter_map(|f| ns(&f["params"]["update"])["promptTurnId"].as_u64())
        .collect();
    assert!(
        turn_ids.iter().all(|t| *t == 3),
        "session two's third prompt: {turn_ids:?}"
    );
    assert!(a.finish().success());
}

#[test]
fn a_multi_session_cwd_must_be_an_absolute_existing_directory() {
    let dir = TempDir::new("multi-cwd");
    let file = dir.write("file.txt", "x").display().to_string();
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = Agent::spawn(Spawn::scripted(&hello, &["--multi-session"]));
    a.call("initialize", json!({"protocolVersion": 1}));
    let missing = dir.path().join("missing").display().to_string();
    for (cwd, why) in [
        (
            "relative/dir".to_owned(),
            "cwd must be an absolute path: \"relative/dir\"".to_owned(),
        ),
        (file.clone(), format!("cwd is not a directory: {file}")),
        (missing.clone(), format!("cwd {missing} cannot be used: ")),
    ] {
        let r = new_session(&mut a, &cwd);
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert_eq!(
            message
                .strip_prefix("Invalid params: ")
                .map(|m| m.starts_with(&why)),
            Some(true),
            "{message}"
        );
    }
    let ok = new_session(&mut a, &dir.path().display().to_string());
    assert!(ok["result"]["sessionId"].is_string(), "{ok}");
}

#[test]
fn without_the_flag_a_second_session_is_refused_as_upstream() {
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = Agent::spawn(Spawn::scripted(&hello, &[]));
    a.handshake();
    let cwd = std::env::current_dir().unwrap().display().to_string();
    let r = new_session(&mut a, &cwd);
    assert_eq!(
        r["error"]["message"],
        "prime-agent ACP mode hosts one session per connection; start another prime-agent process for a second session"
    );
}
