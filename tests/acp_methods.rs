//! The ACP surface of issue 22: `session/delete`, `session/fork` (unstable),
//! `session/set_title` (unstable) and `/rename`, `authMethods` with `authenticate` and
//! `logout`, `systemPrompt` and `additionalDirectories`, and the standard `notice` and
//! `compaction_update` updates for clients that opt in. Every frame is checked against the
//! vendored schema (the answers of the unstable methods against the unstable one).

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::{ask, ask_again, failure, spawn_plain, spawn_with, stop_reason};
use crate::support::sessions::{self, artifacts, lines_of, session_file};
use crate::support::*;

fn cwd(dir: &TempDir) -> String {
    dir.path().display().to_string()
}

/// A scripted agent on `lines` keeping its sessions in `dir`, initialized with `caps`.
fn start_with(dir: &TempDir, lines: &[Value], args: &[&str], caps: Value) -> Agent {
    let script = script_file(dir, lines);
    let mut a = sessions::in_dir(dir, &script, args, &[]);
    let r = a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    assert!(r.get("result").is_some(), "{r}");
    a
}

fn start(dir: &TempDir, lines: &[Value], args: &[&str]) -> Agent {
    start_with(dir, lines, args, json!({}))
}

/// `session/new` in `dir` with `extra` params; the response.
fn open(a: &mut Agent, dir: &TempDir, extra: Value) -> Value {
    let mut params = json!({"cwd": cwd(dir), "mcpServers": []});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    a.call("session/new", params)
}

fn new_session(a: &mut Agent, dir: &TempDir) -> String {
    let r = open(a, dir, json!({}));
    r["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session/new failed: {r}"))
        .to_owned()
}

fn ask_in(a: &mut Agent, sid: &str, text: &str) -> Value {
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
    );
    a.response(&id)
}

fn ended(r: &Value) {
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
}

/// `session/list`, first page: the session ids and titles, newest first.
fn listed(a: &mut Agent) -> Vec<(String, Value)> {
    let r = a.call("session/list", json!({}));
    r["result"]["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|s| {
            (
                s["sessionId"].as_str().unwrap().to_owned(),
                s["title"].clone(),
            )
        })
        .collect()
}

fn listed_ids(a: &mut Agent) -> Vec<String> {
    listed(a).into_iter().map(|(id, _)| id).collect()
}

/// Where the response to request `id` is among the frames seen.
fn answered_at(a: &Agent, id: &Value) -> usize {
    a.seen
        .iter()
        .position(|f| f["id"] == *id && f.get("method").is_none())
        .expect("answered")
}

fn titles_sent(a: &Agent, sid: &str) -> Vec<Value> {
    a.seen
        .iter()
        .filter(|f| f["params"]["sessionId"] == sid)
        .map(|f| &f["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "session_info_update" && u.get("title").is_some())
        .map(|u| u["title"].clone())
        .collect()
}

#[test]
fn initialize_advertises_the_new_methods_and_honest_auth_methods() {
    let dir = TempDir::new("acpm-init");
    let mut a = start(&dir, &[json!({"text": "hi"})], &[]);
    let r = a.call("initialize", json!({"protocolVersion": 1}));
    let result = &r["result"];
    // The stable schema checked it already; it carries unstable capabilities too.
    schema::check_unstable("InitializeResponse", result).unwrap();
    let caps = &result["agentCapabilities"];
    for key in [
        "close",
        "list",
        "resume",
        "delete",
        "fork",
        "title",
        "additionalDirectories",
    ] {
        assert_eq!(caps["sessionCapabilities"][key], json!({}), "{key}");
    }
    assert_eq!(
        caps["sessionCapabilities"]["systemPrompt"],
        json!({"mode": {"override": {}}})
    );
    assert_eq!(caps["auth"]["logout"], json!({}));
    let methods = result["authMethods"].as_array().unwrap();
    assert!(!methods.is_empty());
    for m in methods {
        // `agent` methods: the client calls `authenticate`, nothing runs in a terminal.
        assert!(m.get("type").is_none(), "{m}");
        assert!(m["description"]
            .as_str()
            .unwrap()
            .contains("There is no login"));
        // A scripted model needs no key: every listed method succeeds.
        let r = a.call("authenticate", json!({"methodId": m["id"]}));
        assert_eq!(r["result"], json!({}), "{r}");
    }
    let r = a.call("authenticate", json!({"methodId": "oauth"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Unknown auth method: oauth"));
    assert_eq!(a.call("logout", json!({}))["result"], json!({}));
    // None of it stands in the way: the session works without any of it.
    let sid = new_session(&mut a, &dir);
    ended(&ask_in(&mut a, &sid, "hello"));
}

#[test]
fn deleting_a_stored_session_removes_it_its_file_and_its_artifacts() {
    let dir = TempDir::new("acpm-delete");
    let lines = [json!({"text": "one"}), json!({"text": "two"})];
    let mut a = start(&dir, &lines, &["--multi-session"]);
    let keep = new_session(&mut a, &dir);
    ended(&ask_in(&mut a, &keep, "keep me"));
    let gone = new_session(&mut a, &dir);
    ended(&ask_in(&mut a, &gone, "delete me"));
    // Something in its artifacts: a schedule stored with the session.
    ended(&ask_in(
        &mut a,
        &gone,
        "/heartbeat every 5m check the build",
    ));
    let jobs = artifacts(&dir, &gone).join("scheduled-jobs.json");
    assert!(jobs.is_file());
    assert_eq!(
        a.call("session/close", json!({"sessionId": gone}))["result"],
        json!({})
    );
    assert!(session_file(&dir, &gone).is_file());
    let mut ids = listed_ids(&mut a);
    ids.sort();
    let mut both = vec![keep.clone(), gone.clone()];
    both.sort();
    assert_eq!(ids, both);

    let r = a.call("session/delete", json!({"sessionId": gone}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(!session_file(&dir, &gone).exists());
    assert!(!artifacts(&dir, &gone).exists());
    assert_eq!(listed_ids(&mut a), vec![keep.clone()]);
    for method in ["session/load", "session/resume"] {
        let r = a.call(
            method,
            json!({"sessionId": gone, "cwd": cwd(&dir), "mcpServers": []}),
        );
        assert_eq!(r["error"]["code"], -32602, "{method}: {r}");
    }
    // Deleting what is gone, or never was, succeeds quietly.
    for id in [gone.as_str(), "no-such-session", "../escape"] {
        let r = a.call("session/delete", json!({"sessionId": id}));
        assert_eq!(r["result"], json!({}), "{id}: {r}");
    }
    let r = a.call("session/delete", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(session_file(&dir, &keep).is_file());
}

#[test]
fn deleting_the_open_session_cancels_and_closes_it_first() {
    let dir = TempDir::new("acpm-delete-open");
    let mut a = start(&dir, &[json!({"text": "hi"})], &[]);
    let sid = new_session(&mut a, &dir);
    ended(&ask_in(&mut a, &sid, "hello"));
    assert!(session_file(&dir, &sid).is_file());
    let long = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "!sleep 30"}]}),
    );
    a.wait_for("the command", |f| {
        f["params"]["update"]["sessionUpdate"] == "tool_call"
    });
    let delete = a.request("session/delete", json!({"sessionId": sid}));
    assert_eq!(a.response(&long)["result"]["stopReason"], "cancelled");
    assert_eq!(a.response(&delete)["result"], json!({}));
    assert!(answered_at(&a, &long) < answered_at(&a, &delete));
    // Nothing of the session comes back, not even from the turn that was cut short.
    a.drain_for(std::time::Duration::from_millis(300));
    assert!(!session_file(&dir, &sid).exists());
    assert!(listed_ids(&mut a).is_empty());
    let r = ask_in(&mut a, &sid, "still there?");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Unknown ACP session"),
        "{r}"
    );
    // The slot is free again.
    new_session(&mut a, &dir);
}

#[test]
fn a_fork_copies_the_conversation_and_leaves_the_original_alone() {
    let dir = TempDir::new("acpm-fork");
    let lines = [
        json!({"text": "answer one"}),
        json!({"steps": [
            {"expect_history": ["first question", "answer one", "in the fork"]},
            {"text": "fork answer"}
        ]}),
        json!({"steps": [
            {"expect_history": ["first question", "answer one", "back in the original"]},
            {"expect_none": ["in the fork", "fork answer"]},
            {"text": "original answer"}
        ]}),
    ];
    let mut a = start(&dir, &lines, &["--multi-session"]);
    let source = new_session(&mut a, &dir);
    ended(&ask_in(&mut a, &source, "first question"));

    let fork = a.request(
        "session/fork",
        json!({"sessionId": source, "cwd": cwd(&dir), "mcpServers": []}),
    );
    let list = a.request("session/list", json!({}));
    let forked = a.response(&fork);
    let fid = forked["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{forked}"))
        .to_owned();
    assert_ne!(fid, source);
    assert!(forked["result"]["configOptions"].is_array(), "{forked}");
    // The list asked right after the fork is answered after it, and has it.
    let listing = a.response(&list);
    assert!(answered_at(&a, &fork) < answered_at(&a, &list));
    let ids: Vec<&str> = listing["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&fid.as_str()) && ids.contains(&source.as_str()),
        "{listing}"
    );

    ended(&ask_in(&mut a, &fid, "in the fork"));
    ended(&ask_in(&mut a, &source, "back in the original"));
    let original = std::fs::read_to_string(session_file(&dir, &source)).unwrap();
    assert!(!original.contains("in the fork"));
    let copy = lines_of(&session_file(&dir, &fid));
    assert_eq!(
        copy[0]["parentSession"],
        session_file(&dir, &source).display().to_string()
    );
    let copy = serde_json::to_string(&copy).unwrap();
    assert!(copy.contains("first question") && copy.contains("in the fork"));
    assert!(!copy.contains("back in the original"));

    let r = a.call(
        "session/fork",
        json!({"sessionId": "no-such-session", "cwd": cwd(&dir)}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn without_multi_session_a_fork_waits_for_the_open_session_to_close() {
    let dir = TempDir::new("acpm-fork-one");
    let lines = [
        json!({"text": "stored answer"}),
        json!({"steps": [{"expect_history": ["remember this", "stored answer"]}, {"text": "ok"}]}),
    ];
    let mut a = start(&dir, &lines, &[]);
    let source = new_session(&mut a, &dir);
    ended(&ask_in(&mut a, &source, "remember this"));
    let params = json!({"sessionId": source, "cwd": cwd(&dir), "mcpServers": []});
    let r = a.call("session/fork", params.clone());
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("one session per connection"),
        "{r}"
    );
    a.call("session/close", json!({"sessionId": source}));
    let r = a.call("session/fork", params);
    let fid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    ended(&ask_in(&mut a, &fid, "what did I say?"));
}

#[test]
fn titles_from_set_title_and_rename_are_shown_listed_and_survive_a_restart() {
    let dir = TempDir::new("acpm-title");
    let lines = [json!({"text": "hello back"}), json!({"text": "again"})];
    let mut a = start(&dir, &lines, &[]);
    let sid = new_session(&mut a, &dir);
    // Before any prompt: the session is named, and listed with the name.
    let r = a.call(
        "session/set_title",
        json!({"sessionId": sid, "title": "  Early name "}),
    );
    assert_eq!(r["result"], json!({"title": "Early name"}), "{r}");
    a.wait_for("the title update", |f| {
        f["params"]["update"]["title"] == "Early name"
    });
    assert_eq!(titles_sent(&a, &sid), vec![json!("Early name")]);
    assert_eq!(listed(&mut a), vec![(sid.clone(), json!("Early name"))]);
    // The first prompt does not rename it.
    ended(&ask_in(&mut a, &sid, "first prompt"));
    assert_eq!(titles_sent(&a, &sid), vec![json!("Early name")]);
    assert_eq!(listed(&mut a)[0].1, json!("Early name"));

    ended(&ask_in(&mut a, &sid, "/rename Release notes"));
    assert!(a.text().contains("Session renamed: Release notes"));
    assert_eq!(
        titles_sent(&a, &sid),
        vec![json!("Early name"), json!("Release notes")]
    );
    assert_eq!(listed(&mut a)[0].1, json!("Release notes"));
    ended(&ask_in(&mut a, &sid, "/rename"));
    assert!(a.text().contains("Usage: /rename <title>"));

    for params in [
        json!({"sessionId": "no-such-session", "title": "x"}),
        json!({"sessionId": sid, "title": "   "}),
        json!({"sessionId": sid}),
    ] {
        let r = a.call("session/set_title", params.clone());
        assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
    }
    assert!(a.finish().success());

    let mut b = start(&dir, &lines, &[]);
    assert_eq!(listed(&mut b), vec![(sid.clone(), json!("Release notes"))]);
    // A stored session that is not open is renamed in its file.
    let r = b.call(
        "session/set_title",
        json!({"sessionId": sid, "title": "From the list"}),
    );
    assert_eq!(r["result"], json!({"title": "From the list"}), "{r}");
    assert_eq!(listed(&mut b)[0].1, json!("From the list"));
    let names: Vec<Value> = lines_of(&session_file(&dir, &sid))
        .into_iter()
        .filter(|l| l["type"] == "session_info")
        .map(|l| l["name"].clone())
        .collect();
    assert_eq!(
        names,
        vec![
            json!("Early name"),
            json!("Release notes"),
            json!("From the list")
        ]
    );
}

#[test]
fn the_client_system_prompt_and_additional_directories_reach_the_model() {
    let dir = TempDir::new("acpm-prompt");
    let extra = TempDir::new("acpm-extra");
    let notes = extra.path().join("notes.txt").display().to_string();
    let extra_dir = cwd(&extra);
    let lines = [
        json!({"steps": [
            {"expect_system": ["You are Prime Agent", "Answer in French.", "# Additional directories", &extra_dir]},
            {"tool_call": {"name": "write", "arguments": {"path": notes, "content": "from the model"}}}
        ]}),
        json!({"steps": [
            {"tool_call": {"name": "read", "arguments": {"path": notes}}}
        ]}),
        json!({"steps": [{"expect": ["from the model"]}, {"text": "written and read"}]}),
        json!({"steps": [
            {"expect_system": ["You are a terse release bot.", "Working directory:"]},
            {"expect_system_none": ["You are Prime Agent"]},
            {"text": "ok"}
        ]}),
    ];
    let mut a = start(&dir, &lines, &["--multi-session"]);
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    let r = open(
        &mut a,
        &dir,
        json!({
            "systemPrompt": {"mode": "append", "content": text("Answer in French.")},
            "additionalDirectories": [extra_dir],
        }),
    );
    let first = r["result"]["sessionId"].as_str().unwrap().to_owned();
    ended(&ask_in(&mut a, &first, "write the notes"));
    assert_eq!(
        std::fs::read_to_string(extra.path().join("notes.txt")).unwrap(),
        "from the model"
    );
    let r = open(
        &mut a,
        &dir,
        json!({"systemPrompt": {"mode": "override", "content": text("You are a terse release bot.")}}),
    );
    let second = r["result"]["sessionId"].as_str().unwrap().to_owned();
    ended(&ask_in(&mut a, &second, "status?"));

    // What the agent cannot apply is refused, and no session is opened for it.
    for (extra_params, needle) in [
        (
            json!({"systemPrompt": {"mode": "replace", "content": text("x")}}),
            "systemPrompt.mode \"replace\" is not supported",
        ),
        (
            json!({"systemPrompt": {"mode": "append", "content": []}}),
            "must not be empty",
        ),
        (
            json!({"systemPrompt": {"mode": "append", "content": [{"type": "image", "data": "", "mimeType": "image/png"}]}}),
            "systemPrompt.content[0] must be a text block",
        ),
        (
            json!({"additionalDirectories": ["relative/dir"]}),
            "must be an absolute path",
        ),
        (
            json!({"additionalDirectories": [notes]}),
            "is not a directory",
        ),
    ] {
        let r = open(&mut a, &dir, extra_params.clone());
        assert_eq!(r["error"]["code"], -32602, "{extra_params}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }
    // Resuming takes them too.
    a.call("session/close", json!({"sessionId": first}));
    let r = a.call(
        "session/resume",
        json!({"sessionId": first, "cwd": cwd(&dir), "systemPrompt": {"mode": "bogus", "content": text("x")}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

/// Over 30 estimated tokens: a message that alone fills the part a compaction keeps.
fn long(marker: &str) -> String {
    format!("{marker} {}", "lorem ipsum ".repeat(12))
}

#[test]
fn standard_notices_and_compaction_updates_go_to_clients_that_take_them() {
    let lines = [
        json!({"steps": [
            {"notice": {"severity": "warning", "title": "Assumed defaults", "description": "no window known"}},
            {"text": long("OLD")}
        ]}),
        json!({"steps": [{"text": "RECENT"}]}),
        json!({"steps": [{"text": "the summary"}]}),
    ];
    for standard in [true, false] {
        let dir = TempDir::new("acpm-standard");
        let agent_dir = dir.path().join("agent");
        std::fs::create_dir_all(&agent_dir).unwrap();
        std::fs::write(
            agent_dir.join("settings.json"),
            json!({"compaction": {"keepRecentTokens": 30, "reserveTokens": 1000}}).to_string(),
        )
        .unwrap();
        let caps = match standard {
            true => json!({"session": {"notices": {}, "compaction": {}}}),
            false => json!({"session": {"notices": null}}),
        };
        let mut a = start_with(&dir, &lines, &[], caps);
        let sid = new_session(&mut a, &dir);
        ended(&ask_in(&mut a, &sid, "one"));
        ended(&ask_in(&mut a, &sid, &long("two")));
        ended(&ask_in(&mut a, &sid, "/compact"));
        let meta_of = |key: &str| -> Vec<Value> {
            a.updates_of("session_info_update")
                .iter()
                .map(|u| ns(u)[key].clone())
                .filter(|v| !v.is_null())
                .collect()
        };
        let notices = a.updates_of("notice");
        let compactions = a.updates_of("compaction_update");
        if standard {
            assert_eq!(notices.len(), 1, "{notices:?}");
            assert_eq!(notices[0]["severity"], "warning");
            assert_eq!(notices[0]["title"], "Assumed defaults");
            assert_eq!(notices[0]["description"], "no window known");
            assert_eq!(compactions.len(), 2, "{compactions:?}");
            assert_eq!(compactions[0]["status"], "in_progress");
            assert_eq!(compactions[1]["status"], "completed");
            assert_eq!(
                compactions[0]["compactionId"],
                compactions[1]["compactionId"]
            );
            assert_eq!(
                compactions[1]["summary"],
                json!([{"type": "text", "text": "the summary"}])
            );
            assert_eq!(ns(&compactions[1])["reason"], "manual");
            assert!(meta_of("notice").is_empty() && meta_of("compaction").is_empty());
        } else {
            assert!(notices.is_empty() && compactions.is_empty());
            assert_eq!(
                meta_of("notice"),
                vec![
                    json!({"severity": "warning", "title": "Assumed defaults", "description": "no window known"})
                ]
            );
            let c = meta_of("compaction");
            assert_eq!(c.len(), 1);
            assert_eq!(c[0]["summary"], "the summary");
        }
    }
}

#[test]
fn logout_stops_the_keys_until_authenticate_and_a_missing_key_says_what_to_set() {
    let server = LlmServer::start(vec![
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    let a = &mut s.agent;
    assert_eq!(stop_reason(&ask(a, "hi")), "end_turn");
    assert_eq!(a.call("logout", json!({}))["result"], json!({}));
    let details = failure(&ask_again(a, "again"));
    assert!(details.contains("Signed out"), "{details}");
    assert_eq!(server.posts().len(), 1, "no request is made signed out");
    let r = a.call("authenticate", json!({"methodId": "provider-env-key"}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(stop_reason(&ask_again(a, "once more")), "end_turn");

    // No key anywhere: authenticate says where to put one (and nothing else is blocked).
    let dir = TempDir::new("acpm-nokey");
    let mut b = spawn_plain(&["--mode", "acp", "--provider", "openai"], &dir);
    b.handshake();
    let r = b.call("authenticate", json!({"methodId": "provider-env-key"}));
    assert_eq!(r["error"]["code"], -32000, "{r}");
    let details = r["error"]["data"]["details"].as_str().unwrap();
    assert!(details.contains("Set OPENAI_API_KEY"), "{details}");
    let r = b.call("authenticate", json!({"methodId": "provider-auth-file"}));
    let details = r["error"]["data"]["details"].as_str().unwrap();
    assert!(details.contains("auth.json"), "{details}");
}

#[test]
fn an_additional_directory_is_one_permission_scope_in_ask_mode() {
    let dir = TempDir::new("acpm-scope");
    let extra = TempDir::new("acpm-scope-extra");
    let in_extra = |name: &str| extra.path().join(name).display().to_string();
    let write = |path: String| json!({"steps": [{"tool_call": {"name": "write", "arguments": {"path": path, "content": "x"}}}]});
    let lines = [
        write(in_extra("a.txt")),
        write(in_extra("deep/b.txt")),
        write(dir.path().join("c.txt").display().to_string()),
        json!({"text": "done"}),
    ];
    let mut a = start(&dir, &lines, &["--permission-mode", "ask"]);
    let r = open(
        &mut a,
        &dir,
        json!({"additionalDirectories": [cwd(&extra)]}),
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "write them"}]}),
    );
    let first = a.client_request("session/request_permission");
    let always = &first["params"]["options"][1];
    assert_eq!(always["optionId"], "allow_always");
    assert_eq!(
        always["name"],
        format!("Always allow changes in {}", cwd(&extra))
    );
    a.select_option(&first, "allow_always");
    // The next change in the directory runs unasked; one in the cwd asks again.
    let second = a.wait_for("the next permission request", |f| {
        f["method"] == "session/request_permission" && f["id"] != first["id"]
    });
    assert!(second["params"]["options"][1]["name"]
        .as_str()
        .unwrap()
        .contains("c.txt"));
    a.select_option(&second, "allow_once");
    ended(&a.response(&prompt));
    assert_eq!(a.client_requests("session/request_permission").len(), 2);
    assert!(extra.path().join("deep/b.txt").is_file());
    assert!(dir.path().join("c.txt").is_file());
}

#[test]
fn a_session_another_process_records_is_not_deleted() {
    let dir = TempDir::new("acpm-owned");
    let lines = [json!({"text": "mine"})];
    let mut owner = start(&dir, &lines, &[]);
    let sid = new_session(&mut owner, &dir);
    ended(&ask_in(&mut owner, &sid, "hold it"));
    let mut other = start(&dir, &lines, &[]);
    let r = other.call("session/delete", json!({"sessionId": sid}));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert!(session_file(&dir, &sid).is_file());
    // Once the owner is gone, the delete goes through.
    assert!(owner.finish().success());
    let r = other.call("session/delete", json!({"sessionId": sid}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(!session_file(&dir, &sid).exists());
}
