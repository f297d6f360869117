//! Sessions that survive the process: the session file written as the turn goes, `session/list`,
//! `session/load` (a replay equal to what the client saw live), `session/resume`, and
//! `-c` / `-r` / `--fork` on the command line, each proven by the model receiving the history.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::sessions::{self, lines_of, session_file};
use crate::support::*;

/// An agent in `dir` keeping its sessions in `dir/sessions`, with the file tools.
fn agent(dir: &TempDir, script: &str, extra: &[&str]) -> Agent {
    let mut args = vec!["--tools", "bash,edit,read,write"];
    args.extend_from_slice(extra);
    sessions::in_dir(dir, script, &args, &[])
}

/// The first session's script: thinking, text, an edit and a bash call, then an answer.
fn first_script(dir: &TempDir) -> String {
    script_file(
        dir,
        &[
            json!({"steps":[{"thinking":"Let me look."},{"text":"Editing notes."},
                {"tool_call":{"id":"t_edit","name":"edit","arguments":{"path":"notes.txt","edits":[{"oldText":"beta","newText":"gamma"}]}}},
                {"tool_call":{"id":"t_bash","name":"bash","arguments":{"command":"cat notes.txt"}}}]}),
            json!({"steps":[{"expect":["gamma"]},{"text":"All done."}]}),
        ],
    )
}

/// The live updates of the session reduced to what a replay must reproduce: whole messages
/// (chunks of one message joined), each tool call's start and its final update; `_meta`,
/// progress and usage left out, and the per-process ids (`messageId`s, user shell run ids)
/// named by their order.
fn comparable(updates: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut bash_ids: Vec<String> = Vec::new();
    for u in updates {
        let mut u = u.clone();
        if let Some(obj) = u.as_object_mut() {
            obj.remove("_meta");
        }
        let kind = u["sessionUpdate"].as_str().unwrap_or_default().to_owned();
        if let Some(id) = u["toolCallId"].as_str() {
            if id.starts_with("prime-agent-") {
                if !bash_ids.iter().any(|b| b == id) {
                    bash_ids.push(id.to_owned());
                }
                let n = bash_ids.iter().position(|b| b == id).unwrap() + 1;
                u["toolCallId"] = json!(format!("bash-{n}"));
            }
        }
        if let Some(id) = u["messageId"].as_str() {
            u["messageId"] = json!(id.replace("replay-", ""));
        }
        match kind.as_str() {
            "agent_message_chunk" | "agent_thought_chunk" => {
                if let Some(last) = out.last_mut() {
                    if last["sessionUpdate"] == u["sessionUpdate"]
                        && last["messageId"] == u["messageId"]
                    {
                        let joined = format!(
                            "{}{}",
                            last["content"]["text"].as_str().unwrap_or_default(),
                            u["content"]["text"].as_str().unwrap_or_default()
                        );
                        last["content"]["text"] = json!(joined);
                        continue;
                    }
                }
                out.push(u);
            }
            // Shown while the model was writing it: its start (below) says it all.
            "tool_call" if u["status"] == "pending" && u.get("rawInput").is_none() => {}
            "tool_call" => out.push(u),
            // The start of a call shown while it streamed: what a replay's `tool_call` says.
            "tool_call_update" if u["status"] == "in_progress" && u.get("title").is_some() => {
                u["sessionUpdate"] = json!("tool_call");
                out.push(u)
            }
            // Announced with its reply after it streamed: what a replay's `tool_call` says.
            "tool_call_update" if u["status"] == "pending" && u.get("title").is_some() => {
                u["sessionUpdate"] = json!("tool_call");
                out.push(u)
            }
            // Its arguments so far, while it streams.
            "tool_call_update" if u.get("status").is_none() => {}
            "tool_call_update" if u["status"] != "in_progress" => out.push(u),
            _ => {}
        }
    }
    out
}

#[test]
fn a_session_is_written_as_it_goes_then_listed_loaded_with_its_replay_and_continued() {
    let dir = TempDir::new("persist-load");
    dir.write("notes.txt", "alpha\nbeta\n");
    let script = first_script(&dir);
    let mut a = agent(&dir, &script, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("Fix the notes\nplease"), "end_turn");
    assert_eq!(a.prompt_stop("!echo shell-said-hi"), "end_turn");
    let live = comparable(&a.updates());
    // Killed, not closed: what the client saw acknowledged is on disk already.
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let path = session_file(&dir, &sid);
    let lines = lines_of(&path);
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["version"], 3);
    assert_eq!(lines[0]["id"], sid.as_str());
    assert_eq!(
        lines[0]["cwd"],
        dir.path().canonicalize().unwrap().display().to_string()
    );
    let kinds: Vec<String> = lines[1..]
        .iter()
        .map(|l| match l["message"]["role"].as_str() {
            Some(role) => role.to_owned(),
            None => l["type"].as_str().unwrap().to_owned(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "model_change",
            "thinking_level_change",
            "session_info",
            "user",
            "assistant",
            "toolResult",
            "toolResult",
            "assistant",
            "bashExecution"
        ]
    );
    // The title right after the header, where a listing reads it (`persist/index.rs`).
    assert_eq!(lines[3]["name"], "Fix the notes");
    assert_eq!(lines[5]["message"]["content"][2]["type"], "toolCall");
    assert_eq!(
        lines[6]["message"]["details"]["diff"]["newText"],
        "alpha\ngamma\n"
    );
    for w in lines[1..].windows(2) {
        assert_eq!(w[1]["parentId"], w[0]["id"], "a chain of entries");
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);

    // A new process lists the session, refuses unknown ids, and replays it exactly.
    let next = script_file(
        &dir,
        &[
            json!({"steps":[{"expect_history":["user: Fix the notes\nplease", "tool_result bash error=false: alpha\ngamma", "Ran `echo shell-said-hi`"]},{"expect":["and now?"]},{"text":"Continued."}]}),
        ],
    );
    let mut b = agent(&dir, &next, &[]);
    let init = b.call("initialize", json!({"protocolVersion": 1}));
    let caps = &init["result"]["agentCapabilities"];
    assert_eq!(caps["loadSession"], true);
    assert_eq!(caps["sessionCapabilities"]["list"], json!({}));
    assert_eq!(caps["sessionCapabilities"]["resume"], json!({}));
    let list = b.call("session/list", json!({}));
    let sessions = list["result"]["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(sessions[0]["sessionId"], sid.as_str());
    assert_eq!(sessions[0]["title"], "Fix the notes");
    assert!(sessions[0]["updatedAt"].as_str().unwrap().ends_with('Z'));
    assert!(list["result"].get("nextCursor").is_none());
    let cwd = dir.path().display().to_string();
    let here = b.call("session/list", json!({"cwd": cwd}));
    assert_eq!(here["result"]["sessions"].as_array().unwrap().len(), 1);
    let elsewhere = b.call("session/list", json!({"cwd": "/"}));
    assert_eq!(elsewhere["result"]["sessions"], json!([]));
    let bad = b.call("session/list", json!({"cursor": "nonsense"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    for method in ["session/load", "session/resume"] {
        let r = b.call(
            method,
            json!({"sessionId": "nope", "cwd": cwd, "mcpServers": []}),
        );
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert_eq!(
            r["error"]["data"]["reason"], "Unknown ACP session: nope",
            "{r}"
        );
    }
    let before = b.seen.len();
    let r = b.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    assert!(r["result"].get("sessionId").is_none());
    let replay: Vec<Value> = b.seen[before..]
        .iter()
        .filter(|f| f["method"] == "session/update")
        .map(|f| {
            assert_eq!(f["params"]["sessionId"], sid.as_str());
            assert_eq!(ns(&f["params"]["update"])["promptTurnId"], 0);
            f["params"]["update"].clone()
        })
        .collect();
    assert!(!replay.is_empty(), "the replay comes before the answer");
    let users: Vec<&Value> = replay
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .collect();
    assert_eq!(
        users.len(),
        1,
        "the !cmd is a tool call, not a user message"
    );
    assert_eq!(users[0]["content"]["text"], "Fix the notes\nplease");
    assert_eq!(comparable(&replay), live);
    assert!(replay
        .iter()
        .any(|u| u["messageId"] == "prime-agent-replay-assistant-1"));
    assert!(replay
        .iter()
        .any(|u| u["toolCallId"] == "prime-agent-replay-bash-1"));
    // One session per process: a second load is refused with the session/new text.
    let again = b.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    assert_eq!(
        again["error"]["message"],
        "prime-agent ACP mode hosts one session per connection; start another prime-agent process for a second session"
    );
    // The next prompt continues the conversation: the model gets all of it.
    b.session_id = Some(sid.clone());
    assert_eq!(b.prompt_stop("and now?"), "end_turn");
    assert!(b.text().ends_with("Continued."));
    drop(b);
    let lines = lines_of(&path);
    assert_eq!(
        lines.last().unwrap()["message"]["content"][0]["text"],
        "Continued."
    );

    // Resume restores the session without replaying it.
    let third = script_file(
        &dir,
        &[json!({"steps":[{"expect_history":["Continued."]},{"text":"Third."}]})],
    );
    let mut c = agent(&dir, &third, &[]);
    c.call("initialize", json!({"protocolVersion": 1}));
    let before = c.seen.len();
    let r = c.call("session/resume", json!({"sessionId": sid, "cwd": cwd}));
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(c.seen.len(), before + 1, "nothing but the answer");
    c.session_id = Some(sid);
    assert_eq!(c.prompt_stop("third"), "end_turn");
}

#[test]
fn continue_resume_and_fork_on_the_command_line() {
    let dir = TempDir::new("persist-cli");
    let script = script_file(&dir, &[json!({"text": "Remember 42."})]);
    let mut a = agent(&dir, &script, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("the number?"), "end_turn");
    drop(a);

    let check = script_file(
        &dir,
        &[
            json!({"steps":[{"expect_history":["user: the number?", "Remember 42."]},{"text":"It was 42."}]}),
        ],
    );
    // -c: the newest session of this cwd is the one session/new gets.
    let mut b = agent(&dir, &check, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("again?"), "end_turn");
    drop(b);
    // -r by id prefix, then --fork by path: a copy under a new id naming its parent.
    let mut c = agent(&dir, &check, &["-r", &sid[..8]]);
    assert_eq!(c.handshake(), sid);
    assert_eq!(c.prompt_stop("again?"), "end_turn");
    drop(c);
    let original = session_file(&dir, &sid);
    let path = original.display().to_string();
    let mut d = agent(&dir, &check, &["--fork", &path]);
    let forked = d.handshake();
    assert_ne!(forked, sid);
    assert_eq!(d.prompt_stop("again?"), "end_turn");
    drop(d);
    let fork_lines = lines_of(&session_file(&dir, &forked));
    assert_eq!(fork_lines[0]["parentSession"], path.as_str());
    assert_eq!(fork_lines[0]["id"], forked.as_str());
    let originals = lines_of(&original).len();
    assert!(
        fork_lines.len() > originals - 2,
        "the copy holds the conversation"
    );

    // Errors: an unknown session, and --no-session with a pick.
    for (args, want) in [
        (
            vec!["-r", "nope"],
            "Error: No session found matching 'nope'",
        ),
        (
            vec!["--fork", "/no/such.jsonl"],
            "Error: No session found matching '/no/such.jsonl'",
        ),
        (
            vec!["-c", "--no-session"],
            "Error: --no-session cannot be combined with --continue, --resume or --fork",
        ),
    ] {
        let mut e = agent(&dir, &check, &args);
        let status = e.wait_exit(Duration::from_secs(10)).expect("exits");
        assert_eq!(status.code(), Some(1), "{args:?}");
        assert!(
            e.stderr_text().contains(want),
            "{args:?}: {}",
            e.stderr_text()
        );
    }
}

#[test]
fn no_session_writes_nothing_and_a_torn_last_line_is_skipped_with_a_warning() {
    let dir = TempDir::new("persist-none");
    let script = script_file(&dir, &[json!({"text": "Hi."}), json!({"text": "Hi."})]);
    let mut a = agent(&dir, &script, &["--no-session"]);
    a.handshake();
    assert_eq!(a.prompt_stop("hello"), "end_turn");
    let list = a.call("session/list", json!({}));
    assert_eq!(list["result"]["sessions"], json!([]));
    drop(a);
    assert!(!dir.path().join("sessions").exists());

    // PRIME_AGENT_SESSION_DIR picks the directory when no flag does.
    let env_dir = dir.path().join("env-sessions");
    let mut spawn = Spawn::scripted(&script, &[]);
    spawn.cwd = Some(dir.path().to_path_buf());
    spawn.env = vec![(
        "PRIME_AGENT_SESSION_DIR".into(),
        env_dir.display().to_string(),
    )];
    let mut b = Agent::spawn(spawn);
    let sid = b.handshake();
    assert_eq!(b.prompt_stop("hello"), "end_turn");
    drop(b);
    let path = env_dir.join(format!("{sid}.jsonl"));
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{good}{{\"type\":\"message\",\"id\":\"torn")).unwrap();
    let check = script_file(
        &dir,
        &[json!({"steps":[{"expect_history":["user: hello", "Hi."]},{"text":"Still here."}]})],
    );
    let mut spawn = Spawn::scripted(&check, &["-c"]);
    spawn.cwd = Some(dir.path().to_path_buf());
    spawn.env = vec![(
        "PRIME_AGENT_SESSION_DIR".into(),
        env_dir.display().to_string(),
    )];
    let mut c = Agent::spawn(spawn);
    assert_eq!(c.handshake(), sid);
    assert_eq!(c.prompt_stop("more"), "end_turn");
    assert!(
        c.stderr_text().contains("torn by a crash mid-write"),
        "{}",
        c.stderr_text()
    );
    drop(c);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains("torn"),
        "the torn line was cut before appending"
    );
    assert!(text
        .lines()
        .all(|l| serde_json::from_str::<Value>(l).is_ok()));
}

/// A small deterministic generator (xorshift), so a failing iteration can be rerun.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// kill -9 at random points of a scripted run (prompts with tool calls), then `-c`: the
/// session on disk holds at least every prompt the client saw answered, in order, every line
/// but a torn last one parses, and the next prompt works with that history.
/// `PERSIST_CRASH_ITERATIONS` (default 10; `make reliability` runs 200).
#[test]
fn crash_campaign_continue_restores_an_acknowledged_prefix() {
    let iterations: u64 = std::env::var("PERSIST_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    const PROMPTS: usize = 4;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut inputs, mut answered, mut restored_prompts) = (0, 0, 0);
    for iteration in 0..iterations {
        let dir = TempDir::new(&format!("persist-crash-{iteration}"));
        let replies: Vec<Value> = (0..PROMPTS)
            .flat_map(|i| {
                [
                    json!({"steps":[{"text":format!("working {i}")},{"sleep_ms":1},
                        {"tool_call":{"id":format!("c{i}"),"name":"bash","arguments":{"command":format!("echo out-{i}")}}}]}),
                    json!({"steps":[{"thinking":"fine"},{"text":format!("answer {i}")}]}),
                ]
            })
            .collect();
        let script = script_file(&dir, &replies);
        let mut a = agent(&dir, &script, &[]);
        a.handshake();
        let kill_after = rng.below(12 * PROMPTS as u64);
        let mut acked = 0;
        let mut frames = 0;
        'run: for i in 0..PROMPTS {
            let id = a.prompt(&format!("prompt-{i}"));
            loop {
                let Some(f) = a.next_frame(Duration::from_secs(20)) else {
                    panic!(
                        "iteration {iteration}: the agent stalled: {}",
                        a.stderr_text()
                    );
                };
                frames += 1;
                if f.get("id") == Some(&id) && f.get("method").is_none() {
                    assert_eq!(f["result"]["stopReason"], "end_turn", "{f}");
                    acked += 1;
                }
                if frames >= kill_after {
                    if rng.below(2) == 0 {
                        std::thread::sleep(Duration::from_micros(rng.below(3000)));
                    }
                    break 'run;
                }
                if acked > i {
                    break;
                }
            }
        }
        a.child.kill().unwrap();
        a.child.wait().unwrap();
        inputs += a.inputs;
        answered += a.answered;

        // Every line parses, except at most a torn last one.
        let sessions = dir.path().join("sessions");
        let files: Vec<PathBuf> = std::fs::read_dir(&sessions)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(files.len() <= 1, "{files:?}");
        assert!(
            acked == 0 || files.len() == 1,
            "iteration {iteration}: answered prompts were not saved"
        );
        let mut users = Vec::new();
        if let Some(file) = files.first() {
            let text = std::fs::read_to_string(file).unwrap();
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            for (n, line) in lines.iter().enumerate() {
                match serde_json::from_str::<Value>(line.trim_end()) {
                    Ok(v) => {
                        if v["message"]["role"] == "user" {
                            users.push(v["message"]["content"].as_str().unwrap().to_owned());
                        }
                    }
                    Err(e) => assert!(
                        n + 1 == lines.len() && !line.ends_with('\n'),
                        "iteration {iteration}: line {n} is corrupt ({e}): {line:?}"
                    ),
                }
            }
        }
        let expected: Vec<String> = (0..users.len()).map(|i| format!("prompt-{i}")).collect();
        assert_eq!(
            users, expected,
            "iteration {iteration}: the prompts in order"
        );
        assert!(
            users.len() >= acked,
            "iteration {iteration}: {acked} answered, {} saved",
            users.len()
        );
        restored_prompts += users.len();

        // The next prompt continues with that history.
        let mut history: Vec<String> = Vec::new();
        for i in 0..acked {
            history.push(format!("user: prompt-{i}"));
            history.push(format!("answer {i}"));
            history.push(format!("out-{i}"));
        }
        let check = script_file(
            &dir,
            &[
                json!({"steps":[{"expect_history": history},{"expect":["after the crash"]},{"text":"resumed"}]}),
            ],
        );
        let mut b = agent(&dir, &check, &["-c"]);
        b.handshake();
        let id = b.prompt("after the crash");
        let r = b.response(&id);
        assert_eq!(
            r["result"]["stopReason"],
            "end_turn",
            "iteration {iteration}: {r}\n{}",
            b.stderr_text()
        );
        inputs += b.inputs;
        answered += b.answered;
    }
    reliability_line("persist_crash_campaign", iterations, inputs, answered, 0);
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "persist crash campaign: {iterations} kills, {restored_prompts} prompts restored"
    );
}

/// The text of the agent_message_chunks of `updates` at `promptTurnId` 0.
fn unsolicited_text(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk" && ns(u)["promptTurnId"] == 0)
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

#[test]
fn a_heartbeat_fires_an_unsolicited_turn_and_survives_a_resume() {
    let dir = TempDir::new("persist-heartbeat");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"expect":["ping the build"]},{"text":"pong"}]})],
    );
    let mut a = agent(&dir, &script, &[]);
    let sid = a.handshake();
    let changed = |a: &Agent| {
        a.updates()
            .iter()
            .filter(|u| ns(u)["heartbeatsChanged"] == true)
            .inspect(|u| assert_eq!(ns(u)["promptTurnId"], 0))
            .count()
    };
    assert_eq!(a.prompt_stop("/heartbeat every 9s x"), "end_turn");
    assert!(
        unsolicited_text(&a.updates()).contains("Recurring interval must be at least 10 seconds")
    );
    assert_eq!(changed(&a), 0);
    assert_eq!(a.prompt_stop("/heartbeat in 1s ping the build"), "end_turn");
    assert_eq!(changed(&a), 1);
    // It fires on its own: a turn nobody prompted streams to the client.
    a.wait_for("the heartbeat's turn", |f| {
        f["params"]["update"]["content"]["text"] == "pong"
            && ns(&f["params"]["update"])["promptTurnId"] == 0
    });
    assert_eq!(a.prompt_stop("/heartbeat every 10s tick"), "end_turn");
    assert_eq!(changed(&a), 3, "set, the one-shot completed, set again");
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // Stored with the session, in its artifacts directory.
    let jobs_file = dir
        .path()
        .join("agent/session-artifacts")
        .join(&sid)
        .join("scheduled-jobs.json");
    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(&jobs_file).unwrap()).unwrap();
    let jobs = &stored["jobs"];
    let mode = std::fs::metadata(&jobs_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(
        jobs[0]["schedule"],
        json!({"kind": "interval", "expression": "every 10s", "intervalMs": 10000})
    );
    assert_eq!(jobs[0]["status"], "active");
    assert_eq!(jobs[0]["prompt"], "tick");

    // Continued: the schedule is back, and can be switched off.
    let mut b = agent(&dir, &script, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("/heartbeat status"), "end_turn");
    assert!(
        unsolicited_text(&b.updates()).contains("(every 10s)"),
        "{}",
        unsolicited_text(&b.updates())
    );
    assert_eq!(b.prompt_stop("/heartbeat off"), "end_turn");
    assert!(unsolicited_text(&b.updates()).contains("Heartbeat stopped."));
    assert_eq!(changed(&b), 1);
}

/// Runs acpx (pinned 0.19.1) against the binary; returns stdout, panicking on a failure.
fn acpx(acpx: &Path, dir: &TempDir, agent: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(acpx)
        .args(["--ttl", "1", "--agent", agent])
        .args(args)
        .current_dir(dir.path().join("work"))
        .env("HOME", dir.path().join("home"))
        .env("PRIME_AGENT_CODING_AGENT_DIR", dir.path().join("agent"))
        .output()
        .expect("run acpx");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "acpx {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// acpx lists the binary's sessions (`session/list`) and, once its queue owner has exited,
/// continues a named session in a new agent process through `session/resume`: the model
/// receives the history.
#[test]
fn acpx_lists_and_resumes_sessions() {
    let Some(acpx_bin) = deps::npm_bin("acpx", "persist::acpx_lists_and_resumes_sessions") else {
        return;
    };
    let dir = TempDir::new("persist-acpx");
    for sub in ["home", "work"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let first = dir.write("s1.jsonl", "{\"text\":\"Remember 42.\"}\n");
    let second = dir.write(
        "s2.jsonl",
        &format!(
            "{}\n",
            json!({"steps":[{"expect_history":["user: the number", "Remember 42."]},{"text":"It was 42."}]})
        ),
    );
    // One agent command for both runs (acpx keys sessions by it); the script behind it changes.
    let current = dir.path().join("current.jsonl");
    std::os::unix::fs::symlink(&first, &current).unwrap();
    let sessions = dir.path().join("sessions");
    let agent = format!(
        "{} --mode acp --provider scripted --script {} --session-dir {}",
        bin(),
        current.display(),
        sessions.display()
    );
    acpx(
        &acpx_bin,
        &dir,
        &agent,
        &["sessions", "new", "--name", "t1"],
    );
    let out = acpx(
        &acpx_bin,
        &dir,
        &agent,
        &["prompt", "-s", "t1", "the number"],
    );
    assert!(out.contains("Remember 42."), "{out}");
    let listed = acpx(&acpx_bin, &dir, &agent, &["sessions", "list"]);
    assert!(
        listed.contains("the number"),
        "titles come from session/list: {listed}"
    );
    // Wait for the queue owner (ttl 1 s) to exit, so the next prompt needs a new agent.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let owner_gone = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &format!("session-dir {}", sessions.display())])
            .output()
            .unwrap();
        out.stdout.is_empty()
    };
    while !owner_gone() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::remove_file(&current).unwrap();
    std::os::unix::fs::symlink(&second, &current).unwrap();
    let out = acpx(&acpx_bin, &dir, &agent, &["prompt", "-s", "t1", "again"]);
    assert!(out.contains("It was 42."), "{out}");
}
