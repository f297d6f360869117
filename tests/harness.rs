//! What RL and evaluation harnesses rely on (issue 21, docs/harnesses.md), against the
//! loopback model server: request ids and retry markers on every model call, semantic edges in
//! the prompt and close responses, error kinds, the event order trajectory builders read
//! (checked with Harbor's ACP → ATIF step rule), `rawOutput`, and steering.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, End, LlmServer, Recorded};
use crate::support::model::*;
use crate::support::*;

/// One OpenAI chat-completions stream: optional text, tool calls `(id, name, arguments)`,
/// then usage.
fn reply(text: &str, calls: &[(&str, &str, Value)]) -> Canned {
    let mut body = String::new();
    let mut event = |v: Value| body.push_str(&format!("data: {v}\n\n"));
    if !text.is_empty() {
        event(
            json!({"choices":[{"index":0,"delta":{"role":"assistant","content":text},"finish_reason":null}]}),
        );
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        event(
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"id":id,"type":"function","function":{"name":name,"arguments":args.to_string()}}]},"finish_reason":null}]}),
        );
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    event(json!({"choices":[{"index":0,"delta":{},"finish_reason":finish}]}));
    event(json!({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":8}}));
    body.push_str("data: [DONE]\n\n");
    Canned::sse_bytes(body.into_bytes())
}

fn bash(id: &str, command: &str) -> (&'static str, &'static str, Value) {
    let id: &'static str = Box::leak(id.to_owned().into_boxed_str());
    (id, "bash", json!({ "command": command }))
}

/// An agent on `server` (openai-completions) with `args` added and `settings` as the agent
/// dir's `settings.json`.
fn agent(server: &LlmServer, args: &[&str], settings: Option<Value>) -> (TempDir, Agent) {
    let dir = TempDir::new("harness");
    dir.write("models.json", &models_json(server, "openai-completions"));
    if let Some(s) = settings {
        dir.write("settings.json", &s.to_string());
    }
    let mut all = vec![
        "--mode",
        "acp",
        "--provider",
        "intercept",
        "--model",
        "cold/test-model",
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    all.extend_from_slice(args);
    let a = Agent::spawn(Spawn {
        args: all.iter().map(|s| s.to_string()).collect(),
        env: env_for(&dir, &[("RLM_MAX_DEPTH", "1")]),
        ..Default::default()
    });
    (dir, a)
}

fn request_id(r: &Recorded) -> String {
    r.header("x-acp-model-request-id")
        .unwrap_or_else(|| panic!("no request id: {:?}", r.headers))
        .to_owned()
}

fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
}

/// `(source, target, type)` of a response's semantic edges.
fn edges(response: &Value) -> Vec<(String, String, String)> {
    let meta = &response["result"]["_meta"]["ai.prime.acp/semantic-edges-v1"];
    meta["edges"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|e| {
                    (
                        e["source_request_id"].as_str().unwrap().to_owned(),
                        e["target_request_id"].as_str().unwrap().to_owned(),
                        e["type"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn edge(s: &str, t: &str, k: &str) -> (String, String, String) {
    (s.to_owned(), t.to_owned(), k.to_owned())
}

/// Checks each response's edge set with verifiers' own `SemanticEdgeSet` (pydantic, strict:
/// the request-id and label patterns, no self-edges) when `make harness-check` installed it;
/// otherwise says it skipped. The module is loaded from its file, without importing the rest
/// of verifiers (seconds of imports per test).
fn verifiers_accepts(test: &str, responses: &[&Value]) {
    let Some(python) = crate::support::deps::harness_python(test) else {
        return;
    };
    let sets: Vec<Value> = responses
        .iter()
        .filter_map(|r| {
            r["result"]["_meta"]
                .get("ai.prime.acp/semantic-edges-v1")
                .cloned()
        })
        .collect();
    assert!(!sets.is_empty());
    let code = "import importlib.util, json, sys\n\
        root = importlib.util.find_spec('verifiers').submodule_search_locations[0]\n\
        spec = importlib.util.spec_from_file_location('semantic', root + '/v1/semantic.py')\n\
        m = importlib.util.module_from_spec(spec); sys.modules['semantic'] = m\n\
        spec.loader.exec_module(m)\n\
        for s in json.loads(sys.argv[1]):\n    m.SemanticEdgeSet.model_validate(s)\n";
    let out = std::process::Command::new(python)
        .args(["-c", code, &Value::Array(sets).to_string()])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "verifiers rejects the edges: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn no_self_or_duplicate(list: &[(String, String, String)]) {
    let mut seen = std::collections::HashSet::new();
    for e in list {
        assert_ne!(e.0, e.1, "self-edge {e:?}");
        assert!(seen.insert(e.clone()), "duplicate {e:?}");
    }
}

#[test]
fn every_attempt_carries_the_call_s_id_and_its_retry_count_and_a_tool_loop_is_linked() {
    let server = LlmServer::start(vec![
        Canned::error(500, "error-500.json"),
        reply("", &[bash("t1", "echo one")]),
        reply("done", &[]),
    ]);
    let (_dir, mut a) = agent(&server, &["--tools", "bash"], None);
    a.handshake();
    let id = a.prompt("go");
    let r = a.response(&id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let posts = server.posts();
    assert_eq!(posts.len(), 3);
    let ids: Vec<String> = posts.iter().map(request_id).collect();
    assert!(ids.iter().all(|i| valid_id(i)), "{ids:?}");
    // The 500 and its retry are one logical call: the same id and key, counted attempts.
    assert_eq!(ids[0], ids[1]);
    assert_ne!(ids[1], ids[2]);
    for (p, (key, count)) in posts
        .iter()
        .zip([(&ids[0], "0"), (&ids[0], "1"), (&ids[2], "0")])
    {
        assert_eq!(p.header("idempotency-key"), Some(key.as_str()));
        assert_eq!(p.header("x-stainless-retry-count"), Some(count));
    }
    let list = edges(&r);
    assert_eq!(list, [edge(&ids[1], &ids[2], "continuation")]);
    verifiers_accepts("harness::tool_loop", &[&r]);
    // A new prompt starts a new chain: its one call has no edge.
    let id = a.prompt("again");
    let r = a.response(&id);
    assert!(edges(&r).is_empty(), "{r}");
    let ids: Vec<String> = server.posts().iter().map(request_id).collect();
    assert_eq!(ids.len(), 4);
    assert!(!ids[..3].contains(&ids[3]));
}

#[test]
fn autonomous_continuations_are_linked() {
    let server = LlmServer::start(vec![reply("step", &[])]);
    let (_dir, mut a) = agent(
        &server,
        &[
            "--tools",
            "bash",
            "--autonomous",
            "--autonomous-max-turns",
            "2",
        ],
        None,
    );
    a.handshake();
    let id = a.prompt("work alone");
    let r = a.response(&id);
    let ids: Vec<String> = server.posts().iter().map(request_id).collect();
    assert_eq!(ids.len(), 2, "{r}");
    assert_eq!(edges(&r), [edge(&ids[0], &ids[1], "continuation")]);
}

#[test]
fn a_compaction_links_its_summary_to_the_work_before_and_the_call_after() {
    let server = LlmServer::start(vec![
        reply(
            "",
            &[bash(
                "t1",
                "echo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            )],
        ),
        reply(
            "first answer, long enough to be old history by the time we compact",
            &[],
        ),
        reply("a summary of it all", &[]),
        reply("after", &[]),
    ]);
    let settings = json!({"compaction": {"keepRecentTokens": 10, "reserveTokens": 1000}});
    let (_dir, mut a) = agent(&server, &["--tools", "bash"], Some(settings));
    a.handshake();
    let id = a.prompt("first");
    let first = a.response(&id);
    assert_eq!(stop_reason(&first), "end_turn", "{first}");
    let id = a.prompt("/compact");
    let compacted = a.response(&id);
    assert_eq!(stop_reason(&compacted), "end_turn", "{compacted}");
    let id = a.prompt("more");
    let after = a.response(&id);
    let ids: Vec<String> = server.posts().iter().map(request_id).collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(edges(&first), [edge(&ids[0], &ids[1], "continuation")]);
    assert_eq!(
        edges(&compacted),
        [edge(&ids[1], &ids[2], "compaction_attempt")]
    );
    assert_eq!(edges(&after), [edge(&ids[2], &ids[3], "compaction")]);
    verifiers_accepts("harness::compaction", &[&first, &compacted, &after]);
}

/// The child's model calls and the parent's interleave (the child's reply and its end reach
/// the parent at a call of the running prompt or of an unsolicited turn after it), so the
/// server answers by who asks:
/// the subagent's system prompt says it is one, and the number of replies so far says which
/// of its calls this is.
fn family_responder(r: &Recorded, _: usize) -> Canned {
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    let answered = messages.iter().filter(|m| m["role"] == "assistant").count();
    let child = system.contains("# Your role: a child agent");
    let code = |c: &str| ("c", "ipython", json!({ "code": c }));
    match (child, answered) {
        (false, 0) => {
            let (id, name, args) = code("h = await rlm('say hi', name='kid')\nprint(h.name)");
            reply("", &[(id, name, args)])
        }
        (false, _) => reply("parent done", &[]),
        (true, 0) => {
            let (_, name, args) =
                code("await agent_message.send('hi from kid', receiver_role='parent')");
            reply("", &[("k", name, args)])
        }
        (true, _) => reply("kid done", &[]),
    }
}

#[test]
fn an_rlm_child_is_linked_to_the_call_that_started_it_and_the_call_it_returned_to() {
    let server = LlmServer::start_responding(family_responder);
    let (_dir, mut a) = agent(&server, &["--tools", "ipython"], None);
    a.handshake();
    let id = a.prompt("delegate");
    let r = a.response(&id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}\n{}", a.stderr_text());
    // Settled: the child finished and the parent has taken its reply and its end.
    a.terminal(1);
    // The child replied, so its end wakes nobody: the return feeds the parent's next call,
    // here the next prompt's.
    let id = a.prompt("and now?");
    let next = a.response(&id);
    let close = a.call("session/close", json!({"sessionId": a.sid()}));
    let posts = server.posts();
    let is_child = |p: &Recorded| {
        p.body["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .contains("# Your role: a child agent")
    };
    let parent: Vec<String> = posts
        .iter()
        .filter(|p| !is_child(p))
        .map(request_id)
        .collect();
    let child: Vec<String> = posts
        .iter()
        .filter(|p| is_child(p))
        .map(request_id)
        .collect();
    assert_eq!(child.len(), 2, "{posts:?}");
    assert!(parent.len() >= 2, "{posts:?}");
    let mut all = edges(&r);
    all.extend(edges(&next));
    all.extend(edges(&close));
    no_self_or_duplicate(&all);
    for want in [
        edge(&parent[0], &parent[1], "continuation"),
        edge(&parent[0], &child[0], "subagent_call"),
        edge(&child[0], &child[1], "continuation"),
    ] {
        assert!(all.contains(&want), "{want:?} missing from {all:?}");
    }
    // The reply and the end feed a later call of the parent.
    for (source, kind) in [(&child[0], "agent_message"), (&child[1], "subagent_return")] {
        let fed: Vec<&(String, String, String)> = all
            .iter()
            .filter(|e| e.0 == *source && e.2 == kind)
            .collect();
        assert_eq!(fed.len(), 1, "{kind}: {all:?}");
        assert!(parent[1..].contains(&fed[0].1), "{kind} feeds {:?}", fed[0]);
    }
    verifiers_accepts("harness::rlm_child", &[&r, &next, &close]);
    // Every edge names calls the server saw.
    let seen: Vec<String> = posts.iter().map(request_id).collect();
    assert!(all
        .iter()
        .all(|e| seen.contains(&e.0) && seen.contains(&e.1)));
}

#[test]
fn transport_failures_say_model_transport_and_others_say_their_kind() {
    // Refused: nobody listens on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let dead = LlmServer::start(vec![reply("x", &[])]);
    let dir = TempDir::new("harness-refused");
    let models = models_json(&dead, "openai-completions")
        .replace(&dead.url(), &format!("http://127.0.0.1:{port}"));
    dir.write("models.json", &models);
    let mut setup = spawn_in(dir, "cold/test-model", &[], false);
    let r = ask(&mut setup.agent, "hi");
    failure(&r);
    assert_eq!(r["error"]["data"]["kind"], "model_transport", "{r}");

    // A stream that drops before it finishes, on every attempt.
    let (server, mut s) = {
        let server = LlmServer::start(vec![Canned::sse_bytes(
            b"data: {\"choices\":[]}\n\n".to_vec(),
        )
        .ending(End::Drop)]);
        let s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
        (server, s)
    };
    let r = ask(&mut s.agent, "hi");
    assert_eq!(r["error"]["data"]["kind"], "model_transport", "{r}");
    assert!(server.posts().len() > 1, "dropped streams are retried");

    // An error status is not a transport failure.
    let server = LlmServer::start(vec![Canned::error(401, "error-401.json")]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(r["error"]["data"]["kind"], "model_http", "{r}");
    assert!(r["error"]["data"]["details"].is_string());
}

/// One agent step of Harbor's ATIF trajectory, as `harbor_steps` builds it.
#[derive(Debug, Default)]
struct HarborStep {
    text: String,
    /// Per tool call, in order: its id, the name Harbor gives it (the first update's `kind`
    /// unless `other`, else its title's first line, else `tool`), its arguments (the last
    /// `rawInput`, `{}` without one) and its observation chunks.
    calls: Vec<HarborCall>,
    usage: bool,
    /// A call of the step reported `completed` (Harbor's `has_completed_tool_cycle`).
    cycle: bool,
}

#[derive(Debug)]
struct HarborCall {
    id: String,
    name: String,
    args: Value,
    observation: Vec<String>,
}

/// Harbor's reading of one tool update's output (`_stringify_tool_output`): `rawOutput.output`
/// when a non-empty string, any other non-object `rawOutput` as a string, else the text of
/// `content`. Every non-empty one is a chunk of the call's observation.
fn harbor_output(u: &Value) -> Option<String> {
    let text = match &u["rawOutput"] {
        Value::Object(raw) => match raw.get("output") {
            Some(Value::String(s)) if !s.is_empty() => return Some(s.clone()),
            _ => None,
        },
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    let text = text.unwrap_or_else(|| {
        u["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["content"]["text"].as_str())
            .collect()
    });
    (!text.is_empty()).then_some(text)
}

/// Harbor 0.25's ACP → ATIF step rule (`AcpAgent._convert_events_to_trajectory` in
/// `harbor.agents.installed.acp`), ported: text and thoughts join the open step (a new one
/// after a finished tool cycle), a `usage_update` closes the open step or is orphaned when
/// there is none, tool updates join the open step unless it finished a tool cycle and does not
/// know the call (a call new to a step is named by that update). Returns the agent steps and
/// the orphaned usage count.
fn harbor_steps(updates: &[Value]) -> (Vec<HarborStep>, usize) {
    let mut steps = Vec::new();
    let mut orphans = 0;
    let mut cur: Option<HarborStep> = None;
    let flush = |cur: &mut Option<HarborStep>, steps: &mut Vec<HarborStep>| {
        if let Some(step) = cur.take() {
            if !step.text.is_empty() || !step.calls.is_empty() {
                steps.push(step);
            }
        }
    };
    for u in updates {
        match u["sessionUpdate"].as_str().unwrap_or("") {
            "agent_message_chunk" | "agent_thought_chunk" => {
                if cur.as_ref().is_some_and(|c| c.cycle) {
                    flush(&mut cur, &mut steps);
                }
                let c = cur.get_or_insert_with(Default::default);
                c.text.push_str(u["content"]["text"].as_str().unwrap_or(""));
            }
            "usage_update" => match cur.as_mut() {
                Some(c) if !c.text.is_empty() || !c.calls.is_empty() => {
                    c.usage = true;
                    flush(&mut cur, &mut steps);
                }
                _ => orphans += 1,
            },
            "tool_call" | "tool_call_update" => {
                let id = u["toolCallId"].as_str().unwrap_or("").to_owned();
                let known = |c: &HarborStep| c.calls.iter().any(|call| call.id == id);
                if cur.as_ref().is_some_and(|c| c.cycle && !known(c)) {
                    flush(&mut cur, &mut steps);
                }
                let c = cur.get_or_insert_with(Default::default);
                if !known(c) {
                    let title = u["title"].as_str().and_then(|t| t.lines().next());
                    let name = match u["kind"].as_str() {
                        Some(k) if !k.is_empty() && k != "other" => k,
                        _ => title.filter(|t| !t.trim().is_empty()).unwrap_or("tool"),
                    };
                    c.calls.push(HarborCall {
                        id: id.clone(),
                        name: name.trim().to_owned(),
                        args: json!({}),
                        observation: Vec::new(),
                    });
                }
                let call = c.calls.iter_mut().find(|call| call.id == id).unwrap();
                if !u["rawInput"].is_null() {
                    call.args = u["rawInput"].clone();
                }
                call.observation.extend(harbor_output(u));
                if u["status"] == "completed" {
                    c.cycle = true;
                }
            }
            _ => {}
        }
    }
    flush(&mut cur, &mut steps);
    (steps, orphans)
}

/// The scripted one-tool turn: the agent's updates, in order.
fn one_tool_turn(command: &str) -> Vec<Value> {
    let server = LlmServer::start(vec![
        reply("Let me check.", &[bash("t1", command)]),
        reply("Done.", &[]),
    ]);
    let (_dir, mut a) = agent(&server, &["--tools", "bash"], None);
    a.handshake();
    let id = a.prompt("go");
    assert_eq!(stop_reason(&a.response(&id)), "end_turn");
    a.updates()
}

#[test]
fn a_one_tool_turn_is_two_harbor_steps_the_first_holding_the_call_and_its_output_once() {
    // A command that streams (its output comes in two parts, so the tool reports progress).
    let updates = one_tool_turn("echo first; sleep 0.3; echo second");
    let kinds: Vec<(&str, &str)> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] != "session_info_update")
        .map(|u| {
            (
                u["sessionUpdate"].as_str().unwrap(),
                u["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    // The update order: the reply's text, its call shown with its arguments, run, live output,
    // its end, then the reply's usage; the next reply's text and usage.
    let usage = kinds.iter().position(|k| k.0 == "usage_update").unwrap();
    let end = kinds
        .iter()
        .position(|k| k.0 == "tool_call_update" && k.1 == "completed")
        .unwrap();
    assert!(end < usage, "the usage follows the call's end: {kinds:?}");
    assert!(
        kinds[..end].contains(&("tool_call_update", "in_progress")),
        "{kinds:?}"
    );
    assert_eq!(
        kinds[usage + 1..],
        [("agent_message_chunk", ""), ("usage_update", "")],
        "{kinds:?}"
    );
    // Live output reached the client while the call ran.
    assert!(
        updates.iter().any(|u| u["status"] == "in_progress"
            && u["content"][0]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("first"))),
        "{updates:?}"
    );
    let (steps, orphans) = harbor_steps(&updates);
    assert_eq!(orphans, 0, "{steps:?}");
    assert_eq!(steps.len(), 2, "{steps:#?}");
    assert!(steps.iter().all(|s| s.usage), "{steps:#?}");
    assert_eq!(steps[0].text, "Let me check.");
    let [call] = &steps[0].calls[..] else {
        panic!("{steps:#?}")
    };
    assert_eq!(call.id, "t1");
    assert_eq!(call.name, "execute");
    assert_eq!(
        call.args,
        json!({"command": "echo first; sleep 0.3; echo second"})
    );
    assert_eq!(call.observation, ["first\nsecond\n"], "once: {steps:#?}");
    assert_eq!(steps[1].text, "Done.");
    assert!(steps[1].calls.is_empty());
}

#[test]
fn a_reply_s_calls_are_announced_then_run_and_end_with_raw_output_before_its_usage() {
    let server = LlmServer::start(vec![
        reply("", &[bash("t1", "echo one"), bash("t2", "echo two")]),
        reply("Checking once more.", &[bash("t3", "echo three")]),
        reply("all done", &[]),
    ]);
    let (_dir, mut a) = agent(&server, &["--tools", "bash"], None);
    a.handshake();
    let id = a.prompt("go");
    assert_eq!(stop_reason(&a.response(&id)), "end_turn");
    let updates = a.updates();
    let at = |pred: &dyn Fn(&Value) -> bool| {
        updates
            .iter()
            .position(pred)
            .unwrap_or_else(|| panic!("missing in {updates:?}"))
    };
    let usage: Vec<usize> = updates
        .iter()
        .enumerate()
        .filter(|(_, u)| u["sessionUpdate"] == "usage_update")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(usage.len(), 3, "one per model call");
    for (call, reply_usage) in [("t1", usage[0]), ("t2", usage[0]), ("t3", usage[1])] {
        // Shown `pending` (by name while it streams), with its arguments before any call of
        // its reply runs; run and ended before its reply's usage.
        let announced = at(&|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == call);
        assert_eq!(updates[announced]["status"], "pending");
        let detailed = at(&|u| {
            u["toolCallId"] == call
                && u["status"] == "pending"
                && u["rawInput"]["command"].is_string()
        });
        let first_run = at(&|u| u["status"] == "in_progress");
        assert!(
            call == "t3" || detailed < first_run,
            "{call} announced after a call ran"
        );
        let end = updates
            .iter()
            .rposition(|u| u["toolCallId"] == call)
            .unwrap();
        assert!(end < reply_usage, "{call} ended after its reply's usage");
        let end = &updates[end];
        assert_eq!(end["status"], "completed");
        assert_eq!(end["rawOutput"]["isError"], false, "{end}");
        let out = end["rawOutput"]["output"].as_str().unwrap();
        assert!(!out.is_empty(), "{end}");
    }
    assert!(updates
        .iter()
        .any(|u| u["rawOutput"]["output"].as_str() == Some("two\n")));
    // Harbor: exactly one agent step per model reply, each with its usage, its calls with
    // their arguments and each call's output once; none orphaned.
    let (steps, orphans) = harbor_steps(&updates);
    assert_eq!(orphans, 0, "{steps:#?}");
    assert_eq!(steps.len(), 3, "{steps:#?}");
    assert!(steps.iter().all(|s| s.usage), "{steps:#?}");
    let ids = |s: &HarborStep| s.calls.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&steps[0]), ["t1", "t2"]);
    assert_eq!(steps[1].text, "Checking once more.");
    assert_eq!(ids(&steps[1]), ["t3"]);
    assert_eq!(steps[2].text, "all done");
    for (step, call, out) in [(0, 0, "one\n"), (0, 1, "two\n"), (1, 0, "three\n")] {
        let call = &steps[step].calls[call];
        assert_eq!(call.name, "execute");
        assert!(call.args["command"].is_string(), "{call:?}");
        assert_eq!(call.observation, [out], "{call:?}");
    }
}

#[test]
fn a_steer_joins_the_running_prompt_before_its_next_model_call() {
    let dir = TempDir::new("harness-steer");
    let go = dir.path().join("go");
    let wait = format!(
        "while [ ! -f {} ]; do sleep 0.05; done; echo slept",
        go.display()
    );
    let server = LlmServer::start(vec![
        reply("", &[bash("s1", &wait)]),
        reply("ok, bananas", &[]),
    ]);
    let (_dir, mut a) = agent(&server, &["--tools", "bash"], None);
    let init = a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(init["result"]["_meta"]["steering"]["supported"], true);
    let sid = a.handshake();
    // Idle: nothing runs, so the client is told to prompt.
    let idle = a.call(
        "_session/steering",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "early"}],
               "_meta": {"steering": {"idleBehavior": "promptRequired"}}}),
    );
    assert_eq!(
        idle["result"],
        json!({"outcome": "promptRequired", "reason": "noRunningTurn"})
    );
    let bad = a.call("_session/steering", json!({"sessionId": sid, "prompt": []}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    let prompt = a.prompt("sleep a bit");
    a.wait_for("the sleep runs", |f| {
        let u = &f["params"]["update"];
        u["toolCallId"] == "s1" && u["status"] == "in_progress"
    });
    let steer = a.call(
        "_session/steering",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "also say banana"}],
               "messageId": "m-1", "_meta": {"steering": {"idleBehavior": "promptRequired"}}}),
    );
    assert_eq!(steer["result"]["outcome"], "injected", "{steer}");
    std::fs::write(&go, "").unwrap();
    let r = a.response(&prompt);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let posts = server.posts();
    assert_eq!(posts.len(), 2);
    let messages = posts[1].body["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{messages:?}");
    assert_eq!(last["content"], "also say banana");
    assert!(!posts[0].body.to_string().contains("banana"));
}

#[test]
fn a_steer_during_the_last_model_call_gets_a_call_of_its_own_before_the_prompt_answers() {
    // The final reply streams slowly; the steer lands while it streams (claude-agent-acp #934
    // answered the prompt at once and left the steer behind).
    let slow = {
        let mut body = String::new();
        for w in [
            "one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight ",
        ] {
            body.push_str(&format!(
                "data: {}\n\n",
                json!({"choices":[{"index":0,"delta":{"content":w},"finish_reason":null}]})
            ));
        }
        body.push_str(&format!(
            "data: {}\n\ndata: [DONE]\n\n",
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})
        ));
        Canned::sse_bytes(body.into_bytes()).paced(Duration::from_millis(250))
    };
    let server = LlmServer::start(vec![slow, reply("steered answer", &[])]);
    let (_dir, mut a) = agent(&server, &["--tools", "bash"], None);
    let sid = a.handshake();
    let prompt = a.prompt("count");
    a.wait_for("the reply streams", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    let steer = a.call(
        "_session/steering",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "stop counting"}]}),
    );
    assert_eq!(steer["result"]["outcome"], "injected", "{steer}");
    let r = a.response(&prompt);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let posts = server.posts();
    assert_eq!(
        posts.len(),
        2,
        "the prompt answered before the steer reached a model"
    );
    let last = posts[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "stop counting");
    assert!(a.text().ends_with("steered answer"), "{}", a.text());
    // Its edges: the steered call continues the counting one.
    let ids: Vec<String> = posts.iter().map(request_id).collect();
    assert_eq!(edges(&r), [edge(&ids[0], &ids[1], "continuation")]);
}
