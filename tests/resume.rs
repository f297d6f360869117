//! Resuming sessions beyond their conversation: the model and reasoning level a session last
//! ran are restored (unless `--model` / `--thinking` say otherwise, or this agent cannot run
//! that model, which the client is told), each `rlm(...)` child records its conversation under
//! the session's artifact directory, and a replayed MCP call looks as it did live.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::*;
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

fn session_file(dir: &TempDir, sid: &str) -> PathBuf {
    dir.path().join("sessions").join(format!("{sid}.jsonl"))
}

fn lines_of(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
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
    let answered = e.seen.iter().position(|f| {
        f.get("result")
            .is_some_and(|r| r.get("configOptions").is_some())
    });
    let noticed = e
        .seen
        .iter()
        .position(|f| !ns(&f["params"]["update"])["notice"].is_null());
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
