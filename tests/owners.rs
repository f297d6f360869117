//! One owner per session file (issue 19, defects 4 and 7): a process that records a session
//! holds a lock on its file, a second process asking for it (`-r`, `-c`, `session/load`,
//! `session/resume`) is refused with a clear error, and `--multi-session` never opens one
//! session twice. Real processes, real files; what each side wrote is checked on disk.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::sessions::{self, lines_of, session_file};
use crate::support::*;

fn agent(dir: &TempDir, script: &str, extra: &[&str]) -> Agent {
    sessions::in_dir(dir, script, extra, &[])
}

/// The texts of the user messages in a session file, in order.
fn user_texts(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["message"]["role"] == "user")
        .map(|l| {
            l["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

const ELSEWHERE: &str = "is open in another prime-agent process (its file is locked)";

#[test]
fn two_processes_on_one_session_the_second_is_refused_and_nothing_is_lost() {
    let dir = TempDir::new("owners-two");
    let script = script_file(
        &dir,
        &[
            json!({"text": "first answer"}),
            json!({"text": "second answer"}),
        ],
    );
    let mut a = agent(&dir, &script, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("first from A"), "end_turn");
    let cwd = dir.path().display().to_string();
    // A still records the session: every way of asking for it from a second process is
    // refused, on the command line (exit 1) and over ACP (an error, the process stays up).
    let mut refused = 0;
    for args in [vec!["-r", sid.as_str()], vec!["-r", &sid[..8]], vec!["-c"]] {
        let mut b = agent(&dir, &script, &args);
        let status = b.wait_exit(Duration::from_secs(10)).expect("exits");
        assert_eq!(status.code(), Some(1), "{args:?}");
        let err = b.stderr_text();
        assert!(
            err.contains(&format!("Error: Session {sid} {ELSEWHERE}")),
            "{args:?}: {err}"
        );
        refused += 1;
    }
    let mut c = agent(&dir, &script, &[]);
    c.call("initialize", json!({"protocolVersion": 1}));
    for method in ["session/load", "session/resume"] {
        let r = c.call(
            method,
            json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
        );
        assert_eq!(r["error"]["code"], -32603, "{method}: {r}");
        let message = r["error"]["data"]["reason"]
            .as_str()
            .or(r["error"]["message"].as_str())
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(ELSEWHERE), "{method}: {r}");
        refused += 1;
    }
    // The refused process can still start a session of its own.
    let other = c.handshake();
    assert_ne!(other, sid);
    drop(c);
    // A goes on writing; nothing of its exchanges is lost.
    assert_eq!(a.prompt_stop("second from A"), "end_turn");
    assert!(a.finish().success());
    let lines = lines_of(&session_file(&dir, &sid));
    assert_eq!(user_texts(&lines), ["first from A", "second from A"]);
    // With A gone the session is free again.
    let check = script_file(
        &dir,
        &[
            json!({"steps": [{"expect_history": ["user: first from A", "user: second from A"]}, {"text": "third"}]}),
        ],
    );
    let mut d = agent(&dir, &check, &["-r", &sid]);
    assert_eq!(d.handshake(), sid);
    assert_eq!(d.prompt_stop("third from D"), "end_turn");
    assert!(d.finish().success());
    let lines = lines_of(&session_file(&dir, &sid));
    assert_eq!(
        user_texts(&lines),
        ["first from A", "second from A", "third from D"]
    );
    // Every entry still hangs below the one before: one writer, one branch.
    for w in lines[1..].windows(2) {
        assert_eq!(w[1]["parentId"], w[0]["id"]);
    }
    reliability_line(
        "two_processes_on_one_session",
        refused,
        refused + 3,
        refused + 3,
        0,
    );
}

/// The session `-r` picked under `--multi-session`: a `session/load` of it opens that one, so
/// the next `session/new` gets a new session; loading it again is refused, as is loading the
/// session `session/new` took.
#[test]
fn multi_session_never_opens_one_session_twice() {
    let dir = TempDir::new("owners-multi");
    let script = script_file(&dir, &[json!({"text": "stored"})]);
    let mut a = agent(&dir, &script, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("remember"), "end_turn");
    assert!(a.finish().success());
    let cwd = dir.path().display().to_string();
    let load = json!({"sessionId": sid, "cwd": cwd, "mcpServers": []});
    let again = format!("Session {sid} is already open in this process");
    let reason = |r: &Value| {
        r["error"]["data"]["reason"]
            .as_str()
            .or(r["error"]["message"].as_str())
            .unwrap_or_default()
            .to_owned()
    };

    // session/load, then session/new.
    let mut b = agent(&dir, &script, &["--multi-session", "-r", &sid]);
    b.call("initialize", json!({"protocolVersion": 1}));
    let r = b.call("session/load", load.clone());
    assert!(r["result"].is_object(), "{r}");
    let fresh = b.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let fresh = fresh["result"]["sessionId"]
        .as_str()
        .expect("a new session")
        .to_owned();
    assert_ne!(
        fresh, sid,
        "session/new must not open the loaded session again"
    );
    let r = b.call("session/load", load.clone());
    assert_eq!(reason(&r), again, "{r}");
    assert!(b.finish().success());

    // session/new (which takes the picked session), then session/load.
    let mut c = agent(&dir, &script, &["--multi-session", "-r", &sid]);
    assert_eq!(c.handshake(), sid);
    let r = c.call("session/load", load.clone());
    assert_eq!(reason(&r), again, "{r}");
    let r = c.call("session/resume", json!({"sessionId": sid, "cwd": cwd}));
    assert_eq!(reason(&r), again, "{r}");
    assert!(c.finish().success());
    // One header, one chain: nobody appended twice.
    let lines = lines_of(&session_file(&dir, &sid));
    assert_eq!(lines.iter().filter(|l| l["type"] == "session").count(), 1);
    for w in lines[1..].windows(2) {
        assert_eq!(w[1]["parentId"], w[0]["id"]);
    }
}
