//! Models in long loops (issue 18): every bound holds before each model and tool call, cut
//! tool calls never poison a session, compaction works at a 4k window, and a call is visible
//! (and cancellable) while its arguments stream. Scripted models for the loops, the loopback
//! server for what a real OpenAI-compatible server (llama.cpp) sends and receives.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, End, LlmServer};
use crate::support::model::{env_for, spawn_plain, stop_reason};
use crate::support::sessions::session_file;
use crate::support::*;

/// A reply that makes one `bash` call.
fn bash_call(command: &str) -> Value {
    json!({"steps":[{"tool_call":{"name":"bash","arguments":{"command": command}}}]})
}

/// `n` replies that each make the same `bash` call (a model stuck in a loop).
fn repeating(n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| bash_call("echo again >> count.txt"))
        .collect()
}

/// `n` replies that each make a different call to a tool that does not exist (cheap: no
/// process), so the repeat guard never fires.
fn distinct(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"steps":[{"tool_call":{"name":"nope","arguments":{"n": i}}}]}))
        .collect()
}

fn lines(dir: &TempDir, name: &str) -> usize {
    std::fs::read_to_string(dir.path().join(name))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// The `_meta…notice` payloads the client saw.
fn notices(a: &Agent) -> Vec<Value> {
    a.updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)["notice"].clone())
        .filter(|n| !n.is_null())
        .collect()
}

/// Runs the binary headless in `dir`; (exit code, stdout, stderr).
fn headless(dir: &TempDir, script: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["--provider", "scripted", "--script", script, "--no-session"];
    all.extend_from_slice(args);
    let out = agent_command(&dir.path().join("no-agent-dir"))
        .args(&all)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// --- 1 and 2: bounds ----------------------------------------------------------------------

#[test]
fn a_repeating_call_is_refused_once_then_the_prompt_stops_and_the_next_one_works() {
    let dir = TempDir::new("loops-repeat");
    let mut lines_ = repeating(3);
    // The fourth reply repeats the call again, after seeing the refusal.
    lines_.push(json!({"steps":[
        {"expect":["Not run: this is call 3 in a row of `bash` with exactly the same arguments"]},
        {"tool_call":{"name":"bash","arguments":{"command":"echo again >> count.txt"}}}
    ]}));
    lines_.extend(repeating(20));
    let script = script_file(&dir, &lines_);
    let mut a = agent_in(&dir, &script, &["--tools", "bash"]);
    assert_eq!(a.prompt_stop("count"), "max_turn_requests");
    // Two ran; the third was refused, the fourth ended the prompt.
    assert_eq!(lines(&dir, "count.txt"), 2);
    let n = notices(&a);
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0]["title"], "Stopped a repeating tool call");
    assert_eq!(n[0]["severity"], "warning");
    // Every call the client saw ended: none is left pending. Two started.
    let started = a
        .updates()
        .iter()
        .filter(|u| u["status"] == "in_progress" && !u["toolCallId"].is_null())
        .count();
    assert_eq!(started, 2);
    let mut ids: Vec<Value> = Vec::new();
    for u in a.updates() {
        if !u["toolCallId"].is_null() && !ids.contains(&u["toolCallId"]) {
            ids.push(u["toolCallId"].clone());
        }
    }
    assert_eq!(ids.len(), 4, "{ids:?}");
    for id in &ids {
        let last = a
            .updates()
            .into_iter()
            .rfind(|u| u["toolCallId"] == *id)
            .unwrap();
        assert!(
            last["status"] == "completed" || last["status"] == "failed",
            "{last}"
        );
    }
    // The guard is per prompt: the next one runs the same call again.
    assert_eq!(a.prompt_stop("once more"), "max_turn_requests");
    assert_eq!(lines(&dir, "count.txt"), 4);
    assert!(a.finish().success());
}

#[test]
fn headless_runs_are_bounded_with_and_without_the_limit_flags() {
    let dir = TempDir::new("loops-headless");
    // Without flags: the repeat guard.
    let repeat = script_file(&dir, &repeating(30));
    let (code, _, stderr) = headless(&dir, &repeat, &["-p", "--tools", "bash", "count"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "prime-agent: Stopped a repeating tool call: The model made the same `bash` call"
        ),
        "{stderr}"
    );
    let (code, stdout, _) = headless(
        &dir,
        &repeat,
        &["--mode", "acp-json", "--tools", "bash", "go"],
    );
    assert_eq!(code, 2);
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["stopReason"], "max_turn_requests");

    // A model that never repeats itself: the default cap of 100 model calls.
    let endless = dir
        .write(
            "endless.jsonl",
            &distinct(130)
                .iter()
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
        )
        .display()
        .to_string();
    let (code, _, stderr) = headless(&dir, &endless, &["-p", "go"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr
            .contains("This prompt made 100 model calls, the limit per prompt (--max-model-calls"),
        "{stderr}"
    );
    // The flag moves it.
    let (code, _, stderr) = headless(&dir, &endless, &["-p", "--max-model-calls", "5", "go"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("This prompt made 5 model calls"),
        "{stderr}"
    );
    // The autonomous limit holds inside the tool loop too.
    let (code, _, stderr) = headless(
        &dir,
        &endless,
        &[
            "-p",
            "--autonomous-gate",
            "false",
            "--autonomous-max-turns",
            "10",
            "go",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("10 of 10 model calls used (--autonomous-max-turns)"),
        "{stderr}"
    );
}

#[test]
fn autonomous_limits_hold_inside_a_tool_loop_after_the_gate_failure_reached_the_model() {
    let dir = TempDir::new("loops-auto");
    let mut script = vec![json!({"text":"Done, I think."})];
    // The continuation carries the gate's failure; the model then loops on distinct calls.
    script.push(json!({"steps":[
        {"expect":["Autonomous quality gate failed (attempt 1/3): `test -f done.txt` exited 1."]},
        {"tool_call":{"name":"bash","arguments":{"command":"echo 1 >> calls.txt"}}}
    ]}));
    for i in 2..40 {
        script.push(bash_call(&format!("echo {i} >> calls.txt")));
    }
    let script = script_file(&dir, &script);
    let mut a = agent_in(
        &dir,
        &script,
        &[
            "--tools",
            "bash",
            "--autonomous-gate",
            "test -f done.txt",
            "--autonomous-max-turns",
            "10",
        ],
    );
    let id = a.prompt("make done.txt");
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "max_turn_requests", "{r}");
    // Ten model calls: the first text-only, nine that each ran their call.
    assert_eq!(lines(&dir, "calls.txt"), 9);
    let completion = a
        .updates()
        .into_iter()
        .find(|u| ns(u).get("quiescence").is_some())
        .unwrap();
    assert_eq!(ns(&completion)["autonomous"]["turnsUsed"], 10);
    assert_eq!(ns(&completion)["autonomous"]["continuationsUsed"], 1);
    assert_eq!(notices(&a)[0]["title"], "Autonomous limit reached");
    // The counters are the session's: the next prompt stops before any model call.
    assert_eq!(a.prompt_stop("again"), "max_turn_requests");
    assert_eq!(lines(&dir, "calls.txt"), 9);
    assert!(a.finish().success());
}

// --- 3: cut tool calls ----------------------------------------------------------------------

/// An OpenAI-compatible stream whose one `ipython` call the output limit cut off.
fn cut_call_stream() -> Canned {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id":"c","object":"chat.completion.chunk","model":"qwen","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
        )
    };
    let mut body = String::new();
    body += &chunk(json!({"role":"assistant","content":""}), Value::Null);
    body += &chunk(
        json!({"tool_calls":[{"index":0,"id":"cut1","type":"function","function":{"name":"ipython","arguments":"{\"code\": \"print('Hel"}}]}),
        Value::Null,
    );
    body += &chunk(
        json!({"tool_calls":[{"index":0,"function":{"arguments":"lo, World!"}}]}),
        Value::Null,
    );
    body += &chunk(json!({}), json!("length"));
    body += "data: [DONE]\n\n";
    Canned::sse_bytes(body.into_bytes())
}

/// An agent on the loopback server's `qwen` (OpenAI-compatible), sessions on disk in `dir`.
fn local_model(server: &LlmServer, dir: &TempDir, extra: &[&str]) -> Agent {
    dir.write(
        "agent/models.json",
        &json!({"providers": {"local": {
            "baseUrl": format!("{}/v1", server.url()), "api": "openai-completions", "apiKey": "x",
            "models": [{"id": "qwen", "input": ["text"], "contextWindow": 4096}]}}})
        .to_string(),
    );
    let sessions = dir.path().join("sessions").display().to_string();
    let mut args = vec![
        "--mode",
        "acp",
        "--provider",
        "local",
        "--model",
        "qwen",
        "--offline",
        "--no-context-files",
        "--session-dir",
        &sessions,
    ];
    args.extend_from_slice(extra);
    let agent_dir = dir.path().join("agent");
    // These runs are about compaction: no automatic refine after one (tests/refine.rs).
    dir.write(
        "agent/settings.json",
        &serde_json::json!({"autoRefine": {"enabled": false}}).to_string(),
    );
    let mut env = env_for(dir, &[]);
    env.retain(|(k, _)| k != "PRIME_AGENT_CODING_AGENT_DIR");
    env.push((
        "PRIME_AGENT_CODING_AGENT_DIR".into(),
        agent_dir.display().to_string(),
    ));
    Agent::spawn(Spawn {
        args: args.iter().map(|s| s.to_string()).collect(),
        env,
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    })
}

/// The assistant message of a request body that holds tool call `id`, and that call.
fn replayed_call(body: &Value, id: &str) -> Value {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no call {id} in {body}"))
}

fn tool_message(body: &Value, id: &str) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no result for {id} in {body}"))
}

#[test]
fn a_cut_tool_call_is_never_replayed_invalid_and_a_resumed_session_works() {
    let dir = TempDir::new("loops-cut");
    let server = LlmServer::start(vec![
        cut_call_stream(),
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let mut a = local_model(&server, &dir, &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("print hello"), "max_tokens");
    // Shown while it streamed, and ended as not run.
    let calls: Vec<Value> = a
        .updates()
        .into_iter()
        .filter(|u| u["toolCallId"] == "cut1")
        .collect();
    assert_eq!(calls[0]["sessionUpdate"], "tool_call");
    assert_eq!(calls[0]["status"], "pending");
    assert_eq!(calls.last().unwrap()["status"], "failed");
    assert_eq!(a.prompt_stop("and now?"), "end_turn");
    let posts = server.posts();
    let second = &posts[1].body;
    // Valid JSON for a server that parses it (llama.cpp answers the raw text with a 500).
    assert_eq!(replayed_call(second, "cut1")["function"]["arguments"], "{}");
    let result = tool_message(second, "cut1");
    assert!(
        result.starts_with("Not run: the reply hit the output token limit while this call's arguments were being written: they are not valid JSON"),
        "{result}"
    );
    assert!(
        result.contains("{\"code\": \"print('Hello, World!"),
        "{result}"
    );
    assert!(a.finish().success());

    // A file written before this fix holds the raw text: loading repairs it.
    let path = session_file(&dir, &sid);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"arguments\":{}"), "{text}");
    let old = text.replacen(
        "\"arguments\":{}",
        &format!("\"arguments\":{}", json!("{\"code\": \"print('Hel")),
        1,
    );
    std::fs::write(&path, old).unwrap();
    let mut b = local_model(&server, &dir, &["-c"]);
    b.handshake();
    assert_eq!(b.prompt_stop("resumed"), "end_turn");
    let third = &server.posts()[2].body;
    assert_eq!(replayed_call(third, "cut1")["function"]["arguments"], "{}");
    assert!(b.finish().success());
}

#[test]
fn malformed_arguments_are_not_run_and_the_model_is_told() {
    let dir = TempDir::new("loops-malformed");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call_start":{"name":"bash","id":"m1"}},{"tool_call_args":"{\"command\": \"touch ran.txt\"]"}]}),
            json!({"steps":[{"expect":["tool_result bash error=true: Not run: this call's arguments could not be used: they are not valid JSON"]},{"text":"Sorry."}]}),
        ],
    );
    let mut a = agent_in(&dir, &script, &["--tools", "bash"]);
    assert_eq!(a.prompt_stop("touch it"), "end_turn", "{}", a.stderr_text());
    assert!(!dir.path().join("ran.txt").exists());
    assert!(a.finish().success());
}

// --- 4: compaction at any window ------------------------------------------------------------

#[test]
fn a_4k_window_compacts_before_any_request_exceeds_it_over_long_prompts_and_a_tool_loop() {
    let dir = TempDir::new("loops-4k");
    // The scripted model refuses a request over 4,096 tokens the way llama.cpp does, and
    // answers every summary request itself.
    let mut script = vec![
        json!({"config": {"context_window": 4096, "enforce_window": true, "summary": "Summary: the user sent long notes; a loop printed blocks."}}),
    ];
    for _ in 0..12 {
        script.push(json!({"text":"Noted."}));
    }
    // One prompt whose tool loop alone is larger than the window.
    for i in 0..16 {
        script.push(bash_call(&format!("printf '%016{i:02}d' 0")));
    }
    script.push(json!({"text":"Loop done."}));
    let script = script_file(&dir, &script);
    let mut a = agent_in(&dir, &script, &["--tools", "bash"]);
    for i in 0..12 {
        let prompt = format!("note {i}: {}", "long text ".repeat(480));
        assert_eq!(
            a.prompt_stop(&prompt),
            "end_turn",
            "prompt {i}: {}",
            a.stderr_text()
        );
    }
    assert_eq!(
        a.prompt_stop("run the loop"),
        "end_turn",
        "{}",
        a.stderr_text()
    );
    assert!(a.text().ends_with("Loop done."));
    let compactions: Vec<Value> = a
        .updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)["compaction"].clone())
        .filter(|c| !c.is_null())
        .collect();
    assert!(compactions.len() >= 4, "{compactions:?}");
    // Every one ran on the threshold, before a request got too big: none was an overflow.
    assert!(
        compactions.iter().all(|c| c["reason"] == "threshold"),
        "{compactions:?}"
    );
    // Some ran inside the tool loop (the last prompt).
    let last_turn: Vec<Value> = a
        .updates_of("session_info_update")
        .into_iter()
        .filter(|u| ns(u)["promptTurnId"] == 13 && !ns(u)["compaction"].is_null())
        .collect();
    assert!(!last_turn.is_empty());
    for u in a.updates_of("usage_update") {
        assert!(u["used"].as_u64().unwrap() <= 4096, "{u}");
    }
    assert!(a.finish().success());
}

/// At a 4k window the system prompt and the tool definitions take about half of every
/// request. The estimate counts the tools (a server does: its chat template renders them), and
/// a compaction keeps only what fits beside them, so no request is refused and a tool loop does
/// not compact before every call (both seen on a real 4k llama.cpp run before the fix).
#[test]
fn at_a_4k_window_the_tool_definitions_count_and_compaction_keeps_room_for_them() {
    let dir = TempDir::new("loops-4k-tools");
    let mut script = vec![
        json!({"config": {"context_window": 4096, "enforce_window": true, "summary": "Summary: notes and a loop."}}),
    ];
    for _ in 0..6 {
        script.push(json!({"text":"Noted."}));
    }
    for i in 0..24 {
        // 400 digits a call.
        script.push(bash_call(&format!("printf '%0400d' {i}")));
    }
    script.push(json!({"text":"Loop done."}));
    let script = script_file(&dir, &script);
    // The default tools, ipython's among them, as on the real run.
    let mut a = agent_in(&dir, &script, &[]);
    for i in 0..6 {
        let prompt = format!("note {i}: {}", "long text ".repeat(300));
        assert_eq!(
            a.prompt_stop(&prompt),
            "end_turn",
            "prompt {i}: {}",
            a.stderr_text()
        );
    }
    assert_eq!(
        a.prompt_stop("run the loop"),
        "end_turn",
        "{}",
        a.stderr_text()
    );
    assert!(a.text().ends_with("Loop done."));
    let compactions: Vec<Value> = a
        .updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)["compaction"].clone())
        .filter(|c| !c.is_null())
        .collect();
    assert!(compactions.len() >= 3, "{compactions:?}");
    assert!(
        compactions.iter().all(|c| c["reason"] == "threshold"),
        "no request was refused: {compactions:?}"
    );
    let in_loop = a
        .updates_of("session_info_update")
        .into_iter()
        .filter(|u| ns(u)["promptTurnId"] == 7 && !ns(u)["compaction"].is_null())
        .count();
    assert!(in_loop >= 1, "the loop compacted");
    // The first count, before any reply: the system prompt, the prompt and the six tools'
    // definitions (about 1,000 tokens; without them it would be the first two alone).
    let system_chars: u64 = a
        .stderr_text()
        .split("system prompt: ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the system prompt's size on stderr");
    let first = a.updates_of("usage_update")[0]["used"].as_u64().unwrap();
    let prompt_chars = format!("note 0: {}", "long text ".repeat(300)).len() as u64;
    let without_tools = (system_chars + prompt_chars) / 4;
    assert!(
        first > without_tools + 800,
        "{first} tokens counted; {without_tools} without the tools"
    );
    assert!(a.finish().success());
}

#[test]
fn slash_compact_compacts_at_a_small_window() {
    let dir = TempDir::new("loops-slash");
    let script = script_file(
        &dir,
        &[
            json!({"config": {"context_window": 4096, "summary": "Short summary."}}),
            json!({"text":"one"}),
            json!({"text":"two"}),
        ],
    );
    let mut a = agent_in(&dir, &script, &["--tools", "bash"]);
    assert_eq!(a.prompt_stop(&"first ".repeat(600)), "end_turn");
    assert_eq!(a.prompt_stop(&"second ".repeat(600)), "end_turn");
    assert_eq!(a.prompt_stop("/compact"), "end_turn");
    let c: Vec<Value> = a
        .updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)["compaction"].clone())
        .filter(|c| !c.is_null())
        .collect();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["reason"], "manual");
    assert!(c[0]["summary"]
        .as_str()
        .unwrap()
        .starts_with("Short summary."));
    assert!(a.finish().success());
}

#[test]
fn llama_cpp_s_overflow_answer_at_a_4k_window_is_recovered_by_one_compaction() {
    let dir = TempDir::new("loops-llama-overflow");
    let overflow = Canned {
        status: 400,
        headers: Vec::new(),
        body: json!({"error":{"code":400,"message":"request (6638 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":6638,"n_ctx":4096}}).to_string().into_bytes(),
        sse: false,
        end: End::Complete,
        pace: None,
    };
    let server = LlmServer::start(vec![
        Canned::sse("openai-text.sse"),
        overflow,
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    // No settings: the defaults, scaled to the window, leave something to summarise. The two
    // prompts stay under the threshold by the estimate (about 2,100 tokens of system prompt
    // and tools, 750 per prompt), so it is the server's refusal that compacts.
    let mut a = local_model(&server, &dir, &["--no-session"]);
    a.handshake();
    assert_eq!(
        a.prompt_stop(&format!("FIRST {}", "words ".repeat(500))),
        "end_turn"
    );
    let id = a.prompt(&format!("SECOND {}", "words ".repeat(500)));
    let r = a.response(&id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let posts = server.posts();
    assert_eq!(posts.len(), 4, "turn, refused call, summary, retry");
    assert!(posts[2].body.get("tools").is_none(), "the summary request");
    let c: Vec<Value> = a
        .updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)["compaction"].clone())
        .filter(|c| !c.is_null())
        .collect();
    assert_eq!(c[0]["reason"], "overflow");
    assert!(a.finish().success());
}

/// A small model that degenerates into repeating itself (seen with Qwen2.5-Coder-0.5B on
/// llama.cpp): at a 4k window an unknown model's replies are capped at a quarter of it, and a
/// run-on reply already in the history is summarised, not kept, and cut down to fit the
/// summary request, so every request after it fits the window.
#[test]
fn a_run_on_reply_at_a_4k_window_is_summarised_and_every_request_fits() {
    let dir = TempDir::new("loops-run-on");
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id":"r","object":"chat.completion.chunk","model":"qwen","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
        )
    };
    let mut body = chunk(json!({"role":"assistant","content":""}), Value::Null);
    for i in 0..500 {
        body += &chunk(
            json!({"content": format!("The sea is vast, line {i:03}. ")}),
            Value::Null,
        );
    }
    body += &chunk(json!({}), json!("stop"));
    body += &format!(
        "data: {}\n\n",
        json!({"id":"r","object":"chat.completion.chunk","model":"qwen","choices":[],"usage":{"prompt_tokens":400,"completion_tokens":3500}})
    );
    body += "data: [DONE]\n\n";
    let server = LlmServer::start(vec![
        Canned::sse_bytes(body.into_bytes()),
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let base = format!("{}/v1", server.url());
    // About compaction: no automatic refine after one (the agent dir is `dir`).
    dir.write(
        "settings.json",
        &json!({"autoRefine": {"enabled": false}}).to_string(),
    );
    let mut a = spawn_plain(
        &[
            "--provider",
            "openai",
            "--model",
            "qwen",
            "--api-key",
            "x",
            "--base-url",
            &base,
            "--context-window",
            "4096",
            "--no-session",
            "--offline",
            "--no-context-files",
        ],
        &dir,
    );
    a.handshake();
    assert_eq!(a.prompt_stop("write a poem about the sea"), "end_turn");
    assert_eq!(a.prompt_stop("now count its lines"), "end_turn");
    let posts = server.posts();
    assert_eq!(
        posts.len(),
        3,
        "the run-on reply, the summary, the next call"
    );
    let chars = |b: &Value| b["messages"].to_string().chars().count() as u64;
    // Replies of an unknown model get a quarter of the window.
    assert_eq!(posts[0].body["max_completion_tokens"], 1024);
    assert_eq!(posts[2].body["max_completion_tokens"], 1024);
    // The summary request carries the run-on reply cut to fit the window with its budget.
    let summary = &posts[1].body;
    assert!(
        summary.get("tools").is_none(),
        "the summary request: {summary}"
    );
    let budget = summary["max_completion_tokens"].as_u64().unwrap();
    assert!(
        chars(summary) / 4 + budget < 4096,
        "{} chars + {budget}",
        chars(summary)
    );
    let text = summary["messages"].to_string();
    assert!(
        text.contains("line 000") && text.contains("line 499"),
        "start and end kept"
    );
    assert!(text.contains("left out to fit"));
    // The next call holds the summary and the new prompt, not the run-on reply.
    let next = posts[2].body["messages"].to_string();
    assert!(!next.contains("line 250"), "{next}");
    assert!(next.contains("now count its lines"));
    assert!(chars(&posts[2].body) / 4 < 3072);
    assert!(a.finish().success());
}

/// An overflow answer means the kept part did not fit either: the compaction it triggers
/// keeps only the newest message (at a 4k window the system prompt and tools take half of it;
/// on the real model, every prompt after one filled the window was refused while the last
/// reply stayed kept).
#[test]
fn an_overflow_at_a_4k_window_summarises_the_reply_a_threshold_compaction_would_keep() {
    let dir = TempDir::new("loops-overflow-keep");
    let overflow = Canned {
        status: 400,
        headers: Vec::new(),
        body: json!({"error":{"code":400,"message":"request (4124 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error"}}).to_string().into_bytes(),
        sse: false,
        end: End::Complete,
        pace: None,
    };
    // A reply of about 1,200 tokens: over the 819 a 4k window keeps, under twice that.
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id":"r","object":"chat.completion.chunk","model":"qwen","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
        )
    };
    let mut long = chunk(json!({"role":"assistant","content":""}), Value::Null);
    for i in 0..170 {
        long += &chunk(
            json!({"content": format!("KEPT-REPLY words {i:03}. ")}),
            Value::Null,
        );
    }
    long += &chunk(json!({}), json!("stop"));
    long += "data: [DONE]\n\n";
    let server = LlmServer::start(vec![
        Canned::sse_bytes(long.into_bytes()),
        overflow,
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let mut a = local_model(&server, &dir, &["--no-session"]);
    a.handshake();
    assert_eq!(a.prompt_stop("first"), "end_turn");
    assert_eq!(a.prompt_stop("second"), "end_turn");
    let posts = server.posts();
    assert_eq!(posts.len(), 4, "reply, refused call, summary, retry");
    assert!(posts[2].body.get("tools").is_none(), "the summary request");
    let retry = posts[3].body["messages"].to_string();
    assert!(!retry.contains("KEPT-REPLY"), "{retry}");
    assert!(retry.contains("second"));
    assert!(a.finish().success());
}

// --- 5: tool calls while they stream --------------------------------------------------------

#[test]
fn a_slowly_streamed_call_is_visible_at_once_and_cancel_ends_it() {
    let dir = TempDir::new("loops-stream");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[
                {"tool_call_start":{"name":"bash","id":"slow"}},
                {"tool_call_args":"{\"command\": \"echo wr"},
                {"wait_for_cancel":true}
            ]}),
            json!({"text":"next"}),
        ],
    );
    let mut a = agent_in(&dir, &script, &["--tools", "bash"]);
    let id = a.prompt("write");
    let shown = a.wait_for("the call, pending", |f| {
        f["params"]["update"]["toolCallId"] == "slow"
    });
    let u = &shown["params"]["update"];
    assert_eq!(u["sessionUpdate"], "tool_call");
    assert_eq!(u["status"], "pending");
    assert_eq!(u["title"], "bash");
    assert_eq!(u["kind"], "execute");
    let args = a.wait_for("its arguments so far", |f| {
        f["params"]["update"]["toolCallId"] == "slow"
            && f["params"]["update"].get("rawInput").is_some()
    });
    assert_eq!(
        args["params"]["update"]["rawInput"],
        json!({"command": "echo wr"})
    );
    a.cancel();
    assert_eq!(a.response(&id)["result"]["stopReason"], "cancelled");
    let last = a
        .updates()
        .into_iter()
        .rfind(|u| u["toolCallId"] == "slow")
        .unwrap();
    assert_eq!(last["status"], "failed");
    assert_eq!(a.prompt_stop("again"), "end_turn");
    assert_eq!(a.text(), "next");
    assert!(a.finish().success());
}

#[test]
fn a_call_a_server_streams_slowly_is_shown_pending_and_cancel_stops_it() {
    let dir = TempDir::new("loops-stream-http");
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"id":"c","object":"chat.completion.chunk","model":"qwen","choices":[{"index":0,"delta":delta,"finish_reason":null}]})
        )
    };
    let mut body = chunk(
        json!({"tool_calls":[{"index":0,"id":"w1","type":"function","function":{"name":"write","arguments":""}}]}),
    );
    body += &chunk(
        json!({"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"a.txt\", \"content\": \""}}]}),
    );
    for _ in 0..200 {
        body += &chunk(json!({"tool_calls":[{"index":0,"function":{"arguments":"more text "}}]}));
    }
    let slow = Canned::sse_bytes(body.into_bytes())
        .paced(Duration::from_millis(50))
        .ending(End::Stall);
    let server = LlmServer::start(vec![slow, Canned::sse("openai-text.sse")]);
    let mut a = local_model(&server, &dir, &["--no-session"]);
    a.handshake();
    let id = a.prompt("write a.txt");
    let shown = a.wait_for("the call, pending", |f| {
        f["params"]["update"]["toolCallId"] == "w1"
    });
    assert_eq!(shown["params"]["update"]["status"], "pending");
    assert_eq!(shown["params"]["update"]["kind"], "edit");
    let args = a.wait_for("its arguments so far", |f| {
        f["params"]["update"]["toolCallId"] == "w1"
            && f["params"]["update"]["rawInput"]["path"] == "a.txt"
    });
    assert!(args["params"]["update"]["rawInput"]["content"].is_string());
    a.cancel();
    assert_eq!(a.response(&id)["result"]["stopReason"], "cancelled");
    assert!(!dir.path().join("a.txt").exists());
    assert_eq!(a.prompt_stop("hi"), "end_turn");
    assert!(a.finish().success());
}
