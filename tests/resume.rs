//! Resuming sessions beyond their conversation: the model and reasoning level a session last
//! ran are restored (unless `--model` / `--thinking` say otherwise, or this agent cannot run
//! that model, which the client is told), each `rlm(...)` child records its conversation under
//! the session's artifact directory, and a replayed MCP call looks as it did live.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::deps;
use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::*;
use crate::support::sessions::{self, lines_of, session_file};
use crate::support::*;

const COLD: &str = "intercept/cold/test-model";
const CLAUDE: &str = "intercept/claude-test";

fn option<'a>(options: &'a Value, id: &str) -> Option<&'a Value> {
    options.as_array()?.iter().find(|o| o["id"] == id)
}

/// The `currentValue`s of the `model` and `thought_level` options (`None` when not offered).
fn current(options: &Value) -> (Option<String>, Option<String>) {
    let value =
        |id| option(options, id).and_then(|o| o["currentValue"].as_str().map(str::to_owned));
    (value("model"), value("thought_level"))
}

/// An agent on the `intercept` provider of `dir/models.json`, in `dir`, keeping its sessions
/// in `dir/sessions`; no `--model` unless `extra` has one.
fn agent(dir: &TempDir, extra: &[&str]) -> Agent {
    let sessions = dir.path().join("sessions").display().to_string();
    let mut args: Vec<String> = [
        "--mode",
        "acp",
        "--provider",
        "intercept",
        "--offline",
        "--no-context-files",
        "--session-dir",
        &sessions,
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    Agent::spawn(Spawn {
        args,
        env: env_for(dir, &[]),
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    })
}

fn cwd_of(dir: &TempDir) -> String {
    dir.path().display().to_string()
}

fn initialize(a: &mut Agent) {
    let r = a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert!(r.get("result").is_some(), "{r}");
}

/// Handshake in `dir`; returns the `session/new` result.
fn open(a: &mut Agent, dir: &TempDir) -> Value {
    initialize(a);
    let r = a.call("session/new", json!({"cwd": cwd_of(dir), "mcpServers": []}));
    let result = r["result"].clone();
    a.session_id = Some(
        result["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new failed: {r}"))
            .to_owned(),
    );
    result
}

fn set(a: &mut Agent, config_id: &str, value: &str) {
    let sid = a.sid();
    let r = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": config_id, "value": value}),
    );
    assert!(r.get("result").is_some(), "{r}");
}

/// The `_meta…notice` updates seen so far.
fn notices(a: &Agent) -> Vec<Value> {
    a.updates()
        .iter()
        .filter(|u| !ns(u)["notice"].is_null())
        .map(|u| ns(u)["notice"].clone())
        .collect()
}

/// A session switched to a reasoning model at `high` comes back on it with `-c`,
/// `session/load` and `session/resume` (the options say so and the next request uses it);
/// `--model` / `--thinking` on the command line win; a stored model this agent cannot run is
/// kept out with a warning (`_meta…notice`, after the response, and on stderr).
#[test]
fn a_continued_session_runs_the_model_and_level_it_last_ran() {
    let server = LlmServer::start((0..8).map(|_| Canned::sse("openai-text.sse")).collect());
    let dir = TempDir::new("resume-model");
    dir.write("models.json", &models_json(&server, "openai-completions"));

    // First run: the provider's first model, then a switch to the reasoning one at `high`.
    let mut a = agent(&dir, &[]);
    let opened = open(&mut a, &dir);
    assert_eq!(
        current(&opened["configOptions"]),
        (Some(COLD.into()), None),
        "a new session starts on the provider's first model"
    );
    assert_eq!(stop_reason(&ask_again(&mut a, "one")), "end_turn");
    set(&mut a, "model", CLAUDE);
    set(&mut a, "thought_level", "high");
    assert_eq!(stop_reason(&ask_again(&mut a, "two")), "end_turn");
    let sid = a.sid();
    assert!(a.finish().success());
    let changes: Vec<Value> = lines_of(&session_file(&dir, &sid))
        .into_iter()
        .filter(|l| l["type"] == "model_change" || l["type"] == "thinking_level_change")
        .map(|l| json!([l["modelId"], l["thinkingLevel"]]))
        .collect();
    assert_eq!(
        changes,
        [
            json!(["cold/test-model", null]),
            json!([null, "medium"]),
            json!(["claude-test", null]),
            json!([null, "high"]),
        ],
        "the file names both models, the newest last"
    );

    // -c: session/new reports the restored model and level, and the next request uses them.
    let mut b = agent(&dir, &["-c"]);
    let opened = open(&mut b, &dir);
    assert_eq!(opened["sessionId"], sid.as_str());
    assert_eq!(
        current(&opened["configOptions"]),
        (Some(CLAUDE.into()), Some("high".into()))
    );
    assert_eq!(stop_reason(&ask_again(&mut b, "three")), "end_turn");
    assert!(notices(&b).is_empty(), "{:?}", notices(&b));
    assert!(b.finish().success());
    let last = server.requests().last().unwrap().body.clone();
    assert_eq!(last["model"], "claude-test");
    assert_eq!(last["reasoning_effort"], "high");

    // The command line wins: --model (and --thinking) keep what they name.
    let mut c = agent(&dir, &["-c", "--model", "cold/test-model"]);
    let opened = open(&mut c, &dir);
    assert_eq!(current(&opened["configOptions"]).0.as_deref(), Some(COLD));
    assert!(c.finish().success());
    let mut c = agent(&dir, &["-c", "--thinking", "low"]);
    let opened = open(&mut c, &dir);
    assert_eq!(
        current(&opened["configOptions"]),
        (Some(CLAUDE.into()), Some("low".into()))
    );
    assert!(c.finish().success());

    // session/load and session/resume answer with the restored options too.
    for method in ["session/load", "session/resume"] {
        let mut d = agent(&dir, &[]);
        initialize(&mut d);
        let r = d.call(
            method,
            json!({"sessionId": sid, "cwd": cwd_of(&dir), "mcpServers": []}),
        );
        assert_eq!(
            current(&r["result"]["configOptions"]),
            (Some(CLAUDE.into()), Some("high".into())),
            "{method}: {r}"
        );
        d.session_id = Some(sid.clone());
        assert_eq!(
            stop_reason(&ask_again(&mut d, "again")),
            "end_turn",
            "{method}"
        );
        assert!(notices(&d).is_empty(), "{method}");
        assert!(d.finish().success());
        assert_eq!(
            server.requests().last().unwrap().body["model"],
            "claude-test"
        );
    }

    // A model this agent does not know (another provider's, say): kept out, and said so.
    let path = session_file(&dir, &sid);
    let last_id = lines_of(&path).last().unwrap()["id"].clone();
    let gone = json!({"type": "model_change", "id": "feedf00d", "parentId": last_id,
        "timestamp": "2026-12-01T10:00:00.000Z", "provider": "gone", "modelId": "old-model"});
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}{gone}\n")).unwrap();
    let mut e = agent(&dir, &[]);
    initialize(&mut e);
    let r = e.call(
        "session/resume",
        json!({"sessionId": sid, "cwd": cwd_of(&dir)}),
    );
    let (model, level) = current(&r["result"]["configOptions"]);
    assert_eq!(model.as_deref(), Some(COLD), "{r}");
    assert_eq!(
        level, None,
        "the level is offered only for a reasoning model"
    );
    let want = "Could not restore model gone/old-model. Using intercept/cold/test-model";
    let notice = e.wait_for("the notice", |f| {
        !ns(&f["params"]["update"])["notice"].is_null()
    });
    assert_eq!(notice["params"]["sessionId"], sid.as_str());
    let update = &notice["params"]["update"];
    assert_eq!(update["sessionUpdate"], "session_info_update");
    assert_eq!(
        ns(update)["notice"],
        json!({"severity": "warning", "title": want})
    );
    assert_eq!(ns(update)["promptTurnId"], 0);
    let answered = e
        .seen
        .iter()
        .position(|f| {
            f.get("result")
                .is_some_and(|r| r.get("configOptions").is_some())
        })
        .expect("the answer");
    let noticed = e
        .seen
        .iter()
        .position(|f| !ns(&f["params"]["update"])["notice"].is_null())
        .expect("the notice");
    assert!(answered < noticed, "the notice follows the response");
    assert!(stderr_eventually(&e, want), "{}", e.stderr_text());
    e.session_id = Some(sid.clone());
    assert_eq!(stop_reason(&ask_again(&mut e, "four")), "end_turn");
    assert!(e.finish().success());
    assert_eq!(
        server.requests().last().unwrap().body["model"],
        "cold/test-model"
    );
    // The model it ran instead is recorded, so the next resume starts on it quietly.
    let newest_model = lines_of(&path)
        .into_iter()
        .rev()
        .find(|l| l["type"] == "model_change")
        .unwrap();
    assert_eq!(newest_model["modelId"], "cold/test-model");
}

/// The child's task, its answer, and the main agent's turns around them.
fn rlm_script(dir: &TempDir) -> String {
    script_file(
        dir,
        &[
            json!({"steps":[{"tool_call":{"name":"ipython","arguments":{"code":"h = await rlm(\"Summarise the notes\", name=\"scribe\")\nprint(h.name, h.session_dir)"}}}]}),
            json!({"steps":[{"expect":["scribe "]},{"text":"Spawned the scribe."}]}),
            json!({"agent":"scribe","steps":[{"expect":["[task from parent]\n\nSummarise the notes"]},{"thinking":"Reading."},{"text":"The notes say 42."}]}),
            json!({"steps":[{"expect":["scribe"]},{"text":"The scribe is done."}]}),
        ],
    )
}

/// A scripted agent in `dir` with its agent dir `dir/agent` and sessions in `dir/sessions`.
fn scripted(dir: &TempDir, script: &str, extra: &[&str]) -> Agent {
    let env = [
        ("RLM_MAX_DEPTH", "1"),
        ("PRIME_AGENT_QUIESCENCE_WAIT_MS", "60000"),
    ];
    sessions::in_dir(dir, script, extra, &env)
}

/// Waits until the child named `name` reports `done`.
fn child_done(a: &mut Agent, name: &str) {
    let done = |f: &Value| {
        let sub = &ns(&f["params"]["update"])["subagents"][0];
        sub["sessionName"] == name && sub["status"] == "done"
    };
    if !a.seen.iter().any(done) {
        a.wait_for("the child's done", done);
    }
}

/// See: spec §5.6 (artifacts `sub-xxxxxxxx/…`). An `rlm(...)` child records its own
/// conversation as a session file under the session's artifact directory, written by its own
/// thread as it goes, so it is there even when the agent is killed; `--no-session` writes none.
#[test]
fn a_subagent_records_its_conversation_under_the_session_artifacts() {
    let dir = TempDir::new("resume-subagent");
    let script = rlm_script(&dir);
    let mut a = scripted(&dir, &script, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("delegate"), "end_turn");
    child_done(&mut a, "scribe");
    // Killed, not closed: what the child wrote must already be on disk.
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let artifacts = dir.path().join("agent/session-artifacts").join(&sid);
    let subs: Vec<PathBuf> = std::fs::read_dir(&artifacts)
        .unwrap_or_else(|e| panic!("{}: {e}", artifacts.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(subs.len(), 1, "{subs:?}");
    let sub = &subs[0];
    let name = sub.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("sub-") && name.len() == 12,
        "sub-xxxxxxxx: {name}"
    );
    // The directory is the child's `session_dir`, as the kernel was told.
    let main = lines_of(&session_file(&dir, &sid));
    let told = main
        .iter()
        .find(|l| l["message"]["role"] == "toolResult")
        .map(|l| {
            l["message"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .unwrap();
    assert!(told.contains(&sub.display().to_string()), "{told}");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(sub), 0o700);

    let files: Vec<PathBuf> = std::fs::read_dir(sub)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(mode(&files[0]), 0o600);
    let lines = lines_of(&files[0]);
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["version"], 3);
    assert_ne!(lines[0]["id"], sid.as_str(), "a session of its own");
    assert_eq!(
        files[0].file_stem().unwrap().to_str().unwrap(),
        lines[0]["id"].as_str().unwrap()
    );
    assert_eq!(
        lines[0]["parentSession"],
        session_file(&dir, &sid).display().to_string()
    );
    let messages: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l["type"] == "message")
        .map(|l| {
            let m = &l["message"];
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                blocks => blocks
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| {
                        b["text"]
                            .as_str()
                            .or(b["thinking"].as_str())
                            .unwrap_or_default()
                    })
                    .collect::<Vec<_>>()
                    .join("|"),
            };
            (m["role"].as_str().unwrap().to_owned(), text)
        })
        .collect();
    assert_eq!(
        messages,
        [
            (
                "user".to_owned(),
                "[task from parent]\n\nSummarise the notes".to_owned()
            ),
            (
                "assistant".to_owned(),
                "Reading.|The notes say 42.".to_owned()
            ),
        ],
        "the child's conversation, not the main agent's"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "model_change"),
        "the child's model is recorded"
    );

    // Without sessions on disk, nothing is written for the child either.
    let other = TempDir::new("resume-subagent-none");
    let script = rlm_script(&other);
    let mut b = scripted(&other, &script, &["--no-session"]);
    b.handshake();
    assert_eq!(b.prompt_stop("delegate"), "end_turn");
    child_done(&mut b, "scribe");
    assert!(b.finish().success());
    assert!(!other.path().join("agent/session-artifacts").exists());
    assert!(!other.path().join("sessions").exists());
}

/// `(toolCallId, title, kind)` of every tool call's start among `updates`.
fn tool_calls(updates: &[Value]) -> Vec<(String, String, String)> {
    tool_starts(updates)
        .iter()
        .map(|u| {
            let s = |k: &str| u[k].as_str().unwrap_or_default().to_owned();
            (s("toolCallId"), s("title"), s("kind"))
        })
        .collect()
}

/// A `session/load` shows an MCP call (direct and through `mcp_call_<server>`) with the title
/// and kind the live call had, though the server is not configured for the loaded session.
#[test]
fn a_replayed_mcp_call_looks_as_it_did_live() {
    let test = "resume::a_replayed_mcp_call_looks_as_it_did_live";
    let Some(python) = deps::python(test) else {
        return;
    };
    let dir = TempDir::new("resume-mcp");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"id":"n1","name":"mcp__py__noop","arguments":{}}},
                {"tool_call":{"id":"p1","name":"mcp_call_py","arguments":{"tool":"pid"}}}]}),
            json!({"text":"done"}),
        ],
    );
    let mut a = scripted(&dir, &script, &[]);
    initialize(&mut a);
    let server = json!({"name": "py", "command": python.display().to_string(),
        "args": [fixture("mcp/server.py").display().to_string(), "stdio"], "env": []});
    let r = a.call(
        "session/new",
        json!({"cwd": cwd_of(&dir), "mcpServers": [server]}),
    );
    let sid = r["result"]["sessionId"].as_str().expect("sid").to_owned();
    a.session_id = Some(sid.clone());
    a.wait_for("the server ready", |f| {
        ns(&f["params"]["update"])["mcp"][0]["status"] == "ready"
    });
    assert_eq!(a.prompt_stop("use the server"), "end_turn");
    let live = tool_calls(&a.updates());
    assert_eq!(
        live.iter().map(|(_, t, _)| t.as_str()).collect::<Vec<_>>(),
        ["py: noop", "py: pid"],
        "{live:?}"
    );
    assert!(a.finish().success());

    let mut b = scripted(&dir, &script, &[]);
    initialize(&mut b);
    let before = b.seen.len();
    let r = b.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd_of(&dir), "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    let replay: Vec<Value> = b.seen[before..]
        .iter()
        .filter(|f| f["method"] == "session/update")
        .map(|f| f["params"]["update"].clone())
        .collect();
    assert_eq!(tool_calls(&replay), live);
}

/// The one session file of the child under `sid`'s artifacts.
fn child_file(dir: &TempDir, sid: &str) -> PathBuf {
    let artifacts = sessions::artifacts(dir, sid);
    let files: Vec<PathBuf> = std::fs::read_dir(&artifacts)
        .unwrap_or_else(|e| panic!("{}: {e}", artifacts.display()))
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("sub-"))
        .flat_map(|e| std::fs::read_dir(e.path()).unwrap().flatten())
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// A child started after a resume thinks at the session's restored level ("else the
/// parent's", §4.3), not at the start-up default.
#[test]
fn a_subagent_of_a_continued_session_thinks_at_the_restored_level() {
    let dir = TempDir::new("resume-subagent-level");
    let first = dir.write("first.jsonl", "{\"text\":\"ok\"}\n");
    let mut a = scripted(&dir, &first.display().to_string(), &["--thinking", "low"]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("remember low"), "end_turn");
    assert!(a.finish().success());

    let script = rlm_script(&dir);
    let mut b = scripted(&dir, &script, &["-c"]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("delegate"), "end_turn");
    child_done(&mut b, "scribe");
    assert!(b.finish().success());
    let levels: Vec<Value> = lines_of(&child_file(&dir, &sid))
        .into_iter()
        .filter(|l| l["type"] == "thinking_level_change")
        .map(|l| l["thinkingLevel"].clone())
        .collect();
    assert_eq!(levels, ["low"]);
}
