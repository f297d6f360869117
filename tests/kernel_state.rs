//! The kernel namespace across processes (behaviour spec §4.1, §5.6, issue 13): the main
//! agent's kernel saves its namespace after successful cells into the session's artifacts
//! directory, and the first kernel of a resumed (or forked) session loads it back, telling the
//! model in a hidden `<ipython_state_restored>` message what came back and what did not.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::sessions::{self, artifacts};
use crate::support::*;

/// An agent in `dir` with its sessions in `dir/sessions` and its agent dir `dir/agent`.
fn agent(dir: &TempDir, script: &str, extra: &[&str]) -> Agent {
    let mut args = vec!["--tools", "ipython"];
    args.extend_from_slice(extra);
    sessions::in_dir(dir, script, &args, &[])
}

/// A script of its own in `dir` (several agents of one test each need one).
fn script(dir: &TempDir, name: &str, lines: &[Value]) -> String {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    dir.write(name, &text).display().to_string()
}

fn cell(id: &str, code: &str) -> Value {
    json!({"tool_call": {"id": id, "name": "ipython", "arguments": {"code": code}}})
}

/// Waits (bounded) until the manifest lists `name` as saved, and returns it.
fn wait_for_snapshot(dir: &Path, name: &str) -> Value {
    let path = dir.join("kernel-state.json");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(m) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        {
            if m["saved"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["name"] == name))
            {
                return m;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot with {name} in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn reason_of(manifest: &Value, name: &str) -> String {
    manifest["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not among the skipped: {manifest}"))["reason"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The final result text of every ipython call, in order.
fn results(a: &Agent) -> Vec<String> {
    a.updates()
        .into_iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && matches!(u["status"].as_str(), Some("completed" | "failed"))
        })
        .map(|u| {
            u["content"][0]["content"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// What the first session defines (`define`): a module, data, a lambda, a function and a
/// class defined in the cell, an instance of it, and an open file (which no snapshot keeps).
const DEFINE: &str = "import json\nx = 41\nsquare = lambda v: v * v\nprint('defining')\ndef cube(v):\n    return v ** 3\nclass Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n    def norm1(self):\n        return abs(self.x) + abs(self.y)\np = Point(3, -4)\nnames = ['a', 'b']\nfh = open('/dev/null')";

/// What the resumed sessions run with it, and what that prints.
const USE: &str =
    "print(x + 1, names, square(3), cube(2), p.norm1(), isinstance(p, Point), json.dumps([1]))";
const USED: &str = "42 ['a', 'b'] 9 8 7 True [1]\n";

/// Every name `DEFINE` leaves that comes back, as the notice lists them.
const BACK: &str = "These names are available again: Point, cube, json, names, p, square, x.";

/// The first session: see `DEFINE`.
fn define(dir: &TempDir) -> (String, Value, Agent) {
    let first = script(
        dir,
        "define.jsonl",
        &[
            json!({"steps": [cell("c1", DEFINE)]}),
            json!({"steps": [{"expect": ["tool_result ipython error=false"]}, {"text": "Defined."}]}),
        ],
    );
    let mut a = agent(dir, &first, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("define things"), "end_turn");
    let manifest = wait_for_snapshot(&artifacts(dir, &sid), "x");
    (sid, manifest, a)
}

/// The resumed session's script: the cell that needs `x`, then a reply that checks the model
/// got the cell's output and, as the last message, the notice.
fn resumed_script(dir: &TempDir, name: &str) -> String {
    script(
        dir,
        name,
        &[
            json!({"steps": [cell("c2", USE)]}),
            json!({"steps": [
                {"expect": ["<ipython_state_restored>", BACK]},
                {"expect_history": [
                    "tool_result ipython error=false: 42 ['a', 'b'] 9 8 7 True [1]",
                    "Of these, Point, cube, square came back by running their def or class statement again (only that statement, not the rest of its cell).",
                    "These could not be restored: fh (TypeError: cannot pickle '_io.TextIOWrapper' object).",
                ]},
                {"text": "It is 42."}
            ]}),
        ],
    )
}

fn assert_restored(b: &Agent) {
    // (A load's replay shows the earlier calls first.)
    assert_eq!(results(b).last().map(String::as_str), Some(USED));
    // Hidden: the notice reaches the model, never the client.
    assert!(
        b.seen
            .iter()
            .all(|f| !f.to_string().contains("ipython_state_restored")),
        "the client saw the notice"
    );
}

#[test]
fn a_stopped_session_gets_its_namespace_back_on_continue() {
    let dir = TempDir::new("kstate-stop");
    let (sid, manifest, a) = define(&dir);
    drop(a);
    let art = artifacts(&dir, &sid);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&art), 0o700);
    assert_eq!(mode(&art.join("kernel-state.dill")), 0o600);
    assert_eq!(mode(&art.join("kernel-state.json")), 0o600);
    let saved: Vec<&str> = manifest["saved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        saved,
        ["Point", "cube", "json", "names", "p", "square", "x"],
        "{manifest}"
    );
    let how = |name: &str| -> (String, String) {
        let e = manifest["saved"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap();
        (
            e["type"].as_str().unwrap().into(),
            e["how"].as_str().unwrap().into(),
        )
    };
    // Without dill in the kernel's Python (as here), definitions are kept as their source.
    let defined = if manifest["serializer"] == "dill" {
        "dill"
    } else {
        "source"
    };
    assert_eq!(how("x"), ("int".into(), "pickle".into()));
    assert_eq!(how("square"), ("function".into(), defined.into()));
    assert_eq!(how("cube"), ("function".into(), defined.into()));
    assert_eq!(how("Point"), ("type".into(), defined.into()));
    assert_eq!(how("p"), ("Point".into(), "pickle".into()));
    assert_eq!(how("json"), ("module".into(), "import".into()));
    assert!(reason_of(&manifest, "fh").contains("cannot pickle"));
    // Nothing the bootstrap put there is the model's.
    for injected in ["rlm", "mcp", "goal", "edit", "In", "Out", "get_ipython"] {
        assert!(
            !manifest.to_string().contains(&format!("\"{injected}\"")),
            "{injected} in {manifest}"
        );
    }

    let next = resumed_script(&dir, "resume.jsonl");
    let mut b = agent(&dir, &next, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("what is x + 1?"), "end_turn");
    assert_restored(&b);
    drop(b);
    // In the file the notice is hidden context: a custom_message the replay does not show.
    let lines: Vec<Value> =
        std::fs::read_to_string(dir.path().join("sessions").join(format!("{sid}.jsonl")))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let hidden: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "custom_message")
        .collect();
    assert_eq!(hidden.len(), 1, "{lines:?}");
    assert_eq!(hidden[0]["customType"], "ipython_state_restored");
    assert_eq!(hidden[0]["display"], false);

    // A load replays without it, the model still has it in its context, and the loaded
    // session's kernel gets the namespace back too.
    let third = script(
        &dir,
        "third.jsonl",
        &[
            json!({"steps": [{"expect_history": ["<ipython_state_restored>", "It is 42."]}, cell("c3", USE)]}),
            json!({"steps": [{"expect": [BACK]}, {"text": "Still."}]}),
        ],
    );
    let mut c = agent(&dir, &third, &[]);
    c.call("initialize", json!({"protocolVersion": 1}));
    let cwd = dir.path().display().to_string();
    let r = c.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    c.session_id = Some(sid.clone());
    assert_eq!(c.prompt_stop("still there?"), "end_turn");
    assert_restored(&c);
    drop(c);

    // A fork starts from a copy of its parent's state.
    let fork = resumed_script(&dir, "fork.jsonl");
    let mut d = agent(&dir, &fork, &["--fork", &sid]);
    let forked = d.handshake();
    assert_ne!(forked, sid);
    assert_eq!(d.prompt_stop("what is x + 1?"), "end_turn");
    assert_restored(&d);
}

#[test]
fn a_killed_agent_gets_its_namespace_back_and_the_next_snapshot_replaces_it() {
    let dir = TempDir::new("kstate-kill");
    let (sid, _, mut a) = define(&dir);
    // SIGKILL: no clean-up of any kind; the snapshot on disk is all there is.
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let next = script(
        &dir,
        "resume.jsonl",
        &[
            json!({"steps": [cell("c2", &format!("{USE}\ny = cube(x)\nimport os\nprint(os.environ['RLM_SESSION_DIR'])"))]}),
            json!({"steps": [
                {"expect": [BACK]},
                {"expect_history": ["tool_result ipython error=false: 42 ['a', 'b'] 9 8 7 True [1]", "fh (TypeError"]},
                {"text": "Done."}
            ]}),
        ],
    );
    let mut b = agent(&dir, &next, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("what is x + 1?"), "end_turn");
    // `RLM_SESSION_DIR` is the session's artifacts directory (behaviour spec §4.1).
    let art = artifacts(&dir, &sid);
    assert_eq!(
        results(&b).last().cloned(),
        Some(format!("{USED}{}\n", art.display()))
    );
    // The resumed kernel snapshots too: restored and new names alike.
    let manifest = wait_for_snapshot(&artifacts(&dir, &sid), "y");
    let saved: Vec<&str> = manifest["saved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    // The definitions that came back are definitions again: the next snapshot keeps them.
    assert_eq!(
        saved,
        ["Point", "cube", "json", "names", "os", "p", "square", "x", "y"],
        "{manifest}"
    );
}

#[test]
fn without_a_session_nothing_is_saved() {
    let dir = TempDir::new("kstate-none");
    let s = script(
        &dir,
        "none.jsonl",
        &[
            json!({"steps": [cell("c1", "x = 41")]}),
            json!({"steps": [cell("c2", "import os, sys\nprint('_prime_agent_state' in sys.modules, os.path.isdir(os.environ['RLM_SESSION_DIR']))")]}),
            json!({"text": "Done."}),
        ],
    );
    let mut a = agent(&dir, &s, &["--no-session"]);
    a.handshake();
    assert_eq!(a.prompt_stop("go"), "end_turn");
    // The snapshot code is not even loaded into the kernel; `RLM_SESSION_DIR` is a temp dir.
    assert_eq!(results(&a), ["", "False True\n"]);
    // Past the debounce, so a snapshot would have been written by now (a lower bound for
    // the absence below, not a timing assertion).
    std::thread::sleep(Duration::from_secs(2));
    drop(a);
    assert!(!dir.path().join("agent").join("session-artifacts").exists());
    assert!(!dir.path().join("sessions").exists());
}

#[test]
fn a_corrupt_snapshot_is_a_warning_and_a_fresh_namespace() {
    let dir = TempDir::new("kstate-corrupt");
    let (sid, _, a) = define(&dir);
    drop(a);
    std::fs::write(
        artifacts(&dir, &sid).join("kernel-state.dill"),
        b"\x80\x05not a pickle at all",
    )
    .unwrap();
    let next = script(
        &dir,
        "resume.jsonl",
        &[
            json!({"steps": [cell("c2", "print('x' in dir())")]}),
            json!({"steps": [
                {"expect": ["<ipython_state_restored>", "could not be read", "empty namespace"]},
                {"text": "Gone."}
            ]}),
        ],
    );
    let mut b = agent(&dir, &next, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("is x there?"), "end_turn");
    assert_eq!(results(&b), ["False\n"]);
    assert!(
        b.stderr_text().contains("cannot be read") && b.stderr_text().contains("WARN"),
        "{}",
        b.stderr_text()
    );
}

#[test]
fn a_cell_just_before_the_exit_is_saved_on_the_way_out() {
    let dir = TempDir::new("kstate-exit");
    let s = script(
        &dir,
        "exit.jsonl",
        &[
            json!({"steps": [cell("c1", "x = 41")]}),
            json!({"text": "One."}),
            json!({"steps": [cell("c2", "x = 42\nlate = True")]}),
            json!({"text": "Two."}),
        ],
    );
    let mut a = agent(&dir, &s, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("first"), "end_turn");
    let art = artifacts(&dir, &sid);
    wait_for_snapshot(&art, "x");
    // The second cell's snapshot would wait for a quiet 1.5 s; the exit comes first and
    // writes it. Once the agent has exited its kernel is gone, so what is on disk is final.
    assert_eq!(a.prompt_stop("second"), "end_turn");
    a.close_stdin();
    let status = a
        .wait_exit(Duration::from_secs(30))
        .expect("the agent exits");
    assert!(status.success(), "{status:?}");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(art.join("kernel-state.json")).unwrap())
            .unwrap();
    let saved: Vec<&str> = manifest["saved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(saved, ["late", "x"], "{manifest}");

    let next = script(
        &dir,
        "resume.jsonl",
        &[
            json!({"steps": [cell("c3", "print(x, late)")]}),
            json!({"steps": [{"expect": ["These names are available again: late, x."]}, {"text": "Done."}]}),
        ],
    );
    let mut b = agent(&dir, &next, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("again"), "end_turn");
    assert_eq!(results(&b), ["42 True\n"]);
}

#[test]
fn a_snapshot_that_cannot_be_written_is_a_log_line_and_cells_go_on() {
    let dir = TempDir::new("kstate-unwritable");
    // A file where the artifacts directory would go: no snapshot can be written.
    dir.write("agent/session-artifacts", "not a directory");
    let s = script(
        &dir,
        "unwritable.jsonl",
        &[
            json!({"steps": [cell("c1", "x = 41")]}),
            json!({"text": "One."}),
            json!({"steps": [cell("c2", "print(x + 1)")]}),
            json!({"text": "Two."}),
        ],
    );
    let mut a = agent(&dir, &s, &[]);
    a.handshake();
    assert_eq!(a.prompt_stop("first"), "end_turn");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !a.stderr_text().contains("cannot save the kernel state") {
        assert!(Instant::now() < deadline, "{}", a.stderr_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(a.prompt_stop("second"), "end_turn");
    assert_eq!(results(&a), ["", "42\n"]);
}

/// `session/close` writes a pending snapshot too (before, only the process exit did): the
/// cell just before the close is on disk while the agent runs on, and a `-c` gets it back.
#[test]
fn a_cell_just_before_a_session_close_is_saved_by_the_close() {
    let dir = TempDir::new("kstate-close");
    let s = script(
        &dir,
        "close.jsonl",
        &[
            json!({"steps": [cell("c1", "x = 41")]}),
            json!({"text": "One."}),
            json!({"steps": [cell("c2", "x = 42\nclosing = True")]}),
            json!({"text": "Two."}),
        ],
    );
    let mut a = agent(&dir, &s, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("first"), "end_turn");
    let art = artifacts(&dir, &sid);
    wait_for_snapshot(&art, "x");
    assert_eq!(a.prompt_stop("second"), "end_turn");
    let closed = a.call("session/close", json!({"sessionId": sid}));
    assert_eq!(closed["result"], json!({}), "{closed}");
    // The agent is still running (its stdin open): the close, not the exit, wrote it.
    let manifest = wait_for_snapshot(&art, "closing");
    assert!(
        a.wait_exit(Duration::from_millis(1)).is_none(),
        "still running"
    );
    let saved: Vec<&str> = manifest["saved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(saved, ["closing", "x"], "{manifest}");
    assert!(a.finish().success());
}

/// Sessions saved before the snapshot took the spec's name (`kernel-state.dill`) have a
/// `kernel-state.pkl`: it is restored, and the next snapshot, under the new name, replaces it.
#[test]
fn a_snapshot_under_the_old_name_is_restored_and_then_replaced() {
    let dir = TempDir::new("kstate-legacy");
    let (sid, _, a) = define(&dir);
    drop(a);
    let art = artifacts(&dir, &sid);
    std::fs::rename(art.join("kernel-state.dill"), art.join("kernel-state.pkl")).unwrap();
    let next = resumed_script(&dir, "resume.jsonl");
    let mut b = agent(&dir, &next, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("what is x + 1?"), "end_turn");
    assert_restored(&b);
    // The resumed cell succeeded, so a snapshot follows: the new name, and the old file gone.
    drop(b);
    assert!(art.join("kernel-state.dill").is_file());
    assert!(!art.join("kernel-state.pkl").exists());
}
