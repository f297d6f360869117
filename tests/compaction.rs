//! Compaction end to end (behaviour spec §5.2, issue 12): the real binary on scripted replies
//! whose `expect` steps check what the model receives: the summary request, and after it the
//! summary message in place of the old history. Settings come from the agent dir's
//! `settings.json`, with a small `keepRecentTokens` so short scripts have history to cut.

use serde_json::{json, Value};

use crate::support::model::{ask_again, failure};
use crate::support::*;

/// The turn-failure text after a second overflow (§5.2), exactly.
const RECOVERY_FAILED: &str = "Context overflow recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model.";

/// An agent on `lines` in `dir`, with `settings.json` compaction settings (keep 30 recent
/// tokens, reserve 1000) and a scratch agent dir and global harness.
fn compacting_agent(dir: &TempDir, lines: &[Value]) -> Agent {
    let agent_dir = dir.path().join("agent-dir");
    std::fs::create_dir_all(&agent_dir).unwrap();
    std::fs::write(
        agent_dir.join("settings.json"),
        // Automatic refine after a compaction would take a script line: off here (tests/refine.rs).
        json!({"compaction": {"keepRecentTokens": 30, "reserveTokens": 1000}, "autoRefine": {"enabled": false}}).to_string(),
    )
    .unwrap();
    let script = script_file(dir, lines);
    let agent_dir = agent_dir.display().to_string();
    let harness = dir.path().join("global-harness").display().to_string();
    agent_in_env(
        dir,
        &script,
        &[],
        &[
            ("PRIME_AGENT_CODING_AGENT_DIR", &agent_dir),
            ("RLM_GLOBAL_HARNESS_STATE_DIR", &harness),
        ],
    )
}

/// The `_meta…compaction` payloads the client saw, in order.
fn compactions(a: &Agent) -> Vec<Value> {
    a.updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)["compaction"].clone())
        .filter(|c| !c.is_null())
        .collect()
}

/// The update kinds after the first compaction meta: the next must be a `usage_update`.
fn kind_after_compaction(a: &Agent) -> (Value, Value) {
    let updates = a.updates();
    let i = updates
        .iter()
        .position(|u| !ns(u)["compaction"].is_null())
        .expect("a compaction update");
    (updates[i].clone(), updates[i + 1].clone())
}

/// Over 30 estimated tokens with a marker: a message that alone fills the kept part.
fn long(marker: &str) -> String {
    format!("{marker} {}", "lorem ipsum ".repeat(12))
}

#[test]
fn threshold_compaction_summarises_the_old_turn_and_the_kernel_keeps_its_names() {
    let dir = TempDir::new("compact-threshold");
    let second = long("SECONDMARK");
    let lines = vec![
        json!({"config": {"context_window": 10000}}),
        // Turn 1: defines a kernel variable.
        json!({"steps": [{"tool_call": {"id": "t1", "name": "ipython", "arguments": {"code": "df = 41"}}}, {"usage": {"input": 100}}]}),
        json!({"steps": [{"expect": ["tool_result ipython error=false"]}, {"text": "defined df"}, {"usage": {"input": 200, "output": 10}}]}),
        // Turn 2: ends above the threshold (10000 - 1000).
        json!({"steps": [{"tool_call": {"id": "t2", "name": "ipython", "arguments": {"code": "print(df + 1)"}}}, {"usage": {"input": 300}}]}),
        json!({"steps": [{"expect": ["42"]}, {"text": "done"}, {"usage": {"input": 9500}}]}),
        // The summary request: turn 1 with its tool call and result, not turn 2.
        json!({"steps": [
            {"expect": ["<conversation>\n[User]: first\n\n[Assistant tool calls]: ipython(code=\"df = 41\")\n\n[Tool result]:", "## Goal", "IPython kernel", "[Assistant]: defined df"]},
            {"expect_none": ["SECONDMARK"]},
            {"expect_system": ["hand-over notes"]},
            {"text": "SUMMARY: df holds 41"}
        ]}),
        // Turn 3 sees the summary first, the kept turn 2 whole, and turn 1 gone.
        json!({"steps": [
            {"expect_first": ["compacted into the following summary", "<summary>\nSUMMARY: df holds 41\n</summary>", "These names are still defined: df."]},
            {"expect_none": ["user: first", "defined df"]},
            {"expect": ["user: third"]},
            {"tool_call": {"id": "t3", "name": "ipython", "arguments": {"code": "print(df)"}}}
        ]}),
        json!({"steps": [{"expect": ["error=false: 41"]}, {"text": "still 41"}]}),
    ];
    let mut a = compacting_agent(&dir, &lines);
    assert_eq!(a.prompt_stop("first"), "end_turn");
    assert!(
        compactions(&a).is_empty(),
        "210 tokens are far from the threshold"
    );
    assert_eq!(a.prompt_stop(&second), "end_turn");
    assert_eq!(
        compactions(&a),
        vec![
            json!({"tokensBefore": 9500, "summary": "SUMMARY: df holds 41", "reason": "threshold"})
        ]
    );
    let (info, next) = kind_after_compaction(&a);
    assert_eq!(info["sessionUpdate"], "session_info_update");
    assert_eq!(next["sessionUpdate"], "usage_update", "{next}");
    let used = next["used"].as_u64().unwrap();
    assert!(
        used > 0 && used < 9500,
        "after compaction the estimate is small: {next}"
    );
    assert_eq!(next["size"], 10000);
    assert_eq!(a.prompt_stop("third"), "end_turn");
    assert!(a.text().ends_with("still 41"), "{}", a.text());
    assert_eq!(compactions(&a).len(), 1);
}

#[test]
fn a_failed_summary_fails_the_turn_and_loses_nothing() {
    let dir = TempDir::new("compact-failed");
    let lines = vec![
        json!({"config": {"context_window": 10000}}),
        json!({"steps": [{"text": long("ONE")}, {"usage": {"input": 100}}]}),
        json!({"steps": [{"text": "big"}, {"usage": {"input": 9500}}]}),
        json!({"error": "503 summariser overloaded"}),
        // Still over the threshold, the next prompt compacts before its model call: the
        // summariser sees the whole conversation, as it was.
        json!({"steps": [{"expect_first": ["[User]: hello\n\n[Assistant]: ONE"]}, {"text": "the summary"}]}),
        json!({"steps": [{"expect_first": ["<summary>\nthe summary"]}, {"text": "intact"}, {"usage": {"input": 50}}]}),
    ];
    let mut a = compacting_agent(&dir, &lines);
    assert_eq!(a.prompt_stop("hello"), "end_turn");
    let r = ask_again(&mut a, &long("TWO"));
    assert_eq!(
        failure(&r),
        "prime-agent turn failed: Summarization failed: 503 summariser overloaded"
    );
    assert_eq!(compactions(&a), vec![json!({"reason": "threshold"})]);
    assert_eq!(a.prompt_stop("again"), "end_turn");
    assert!(a.text().ends_with("intact"));
    assert_eq!(compactions(&a).len(), 2);
    assert_eq!(compactions(&a)[1]["reason"], "threshold");
}

#[test]
fn an_overflow_compacts_and_retries_the_same_request_once() {
    let dir = TempDir::new("compact-overflow");
    let lines = vec![
        json!({"steps": [{"text": long("OLD")}, {"usage": {"input": 100}}]}),
        json!({"error": "prompt is too long: 213462 tokens > 200000 maximum"}),
        json!({"steps": [{"expect": ["[User]: hello", "OLD"]}, {"text": "short summary"}]}),
        json!({"steps": [{"expect_first": ["<summary>\nshort summary\n</summary>"]}, {"expect": [&format!("user: {}", long("NEW"))]}, {"text": "recovered"}]}),
    ];
    let mut a = compacting_agent(&dir, &lines);
    assert_eq!(a.prompt_stop("hello"), "end_turn");
    assert_eq!(a.prompt_stop(&long("NEW")), "end_turn");
    assert!(a.text().ends_with("recovered"));
    let c = compactions(&a);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["reason"], "overflow");
    assert_eq!(c[0]["summary"], "short summary");
}

#[test]
fn a_second_overflow_gives_the_exact_failure_text() {
    let dir = TempDir::new("compact-overflow-twice");
    let lines = vec![
        json!({"steps": [{"text": long("OLD")}]}),
        json!({"error": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."}),
        json!({"text": "short summary"}),
        json!({"error": "the request exceeds the available context size, try increasing it"}),
        // The failed prompt was taken back out: a retry does not send it twice.
        json!({"steps": [{"expect_first": ["<summary>"]}, {"expect_none": ["NEW"]}, {"text": "ok"}]}),
    ];
    let mut a = compacting_agent(&dir, &lines);
    assert_eq!(a.prompt_stop("hello"), "end_turn");
    let r = ask_again(&mut a, &long("NEW"));
    assert_eq!(
        failure(&r),
        format!("prime-agent turn failed: {RECOVERY_FAILED}")
    );
    assert_eq!(a.prompt_stop("later"), "end_turn");
}

#[test]
fn slash_compact_passes_its_instructions_into_the_summary_request() {
    let dir = TempDir::new("compact-manual");
    let lines = vec![
        json!({"steps": [{"text": long("OLD")}]}),
        json!({"steps": [{"text": "RECENT"}]}),
        json!({"steps": [
            {"expect": ["<user-instructions>\nfocus on the parser\n</user-instructions>", "[User]: one"]},
            {"expect_none": ["RECENT"]},
            {"text": "parser summary"}
        ]}),
        json!({"steps": [{"expect_first": ["parser summary"]}, {"text": "next"}]}),
    ];
    let mut a = compacting_agent(&dir, &lines);
    // Nothing to compact yet: no model call, a notice, end_turn.
    assert_eq!(a.prompt_stop("/compact"), "end_turn");
    assert!(compactions(&a).is_empty());
    assert_eq!(a.prompt_stop("one"), "end_turn");
    assert_eq!(a.prompt_stop(&long("two")), "end_turn");
    assert_eq!(a.prompt_stop("/compact focus on the parser"), "end_turn");
    let c = compactions(&a);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["reason"], "manual");
    assert_eq!(c[0]["summary"], "parser summary");
    assert!(c[0]["tokensBefore"].as_u64().unwrap() > 0);
    assert_eq!(a.prompt_stop("three"), "end_turn");
}

#[test]
fn compact_run_from_the_kernel_compacts_at_the_turn_boundary() {
    let dir = TempDir::new("compact-requested");
    let lines = vec![
        json!({"steps": [{"text": long("OLD")}, {"usage": {"input": 100}}]}),
        json!({"steps": [{"tool_call": {"id": "k1", "name": "ipython", "arguments": {"code": "print(await compact.status())\nprint(await compact.run('keep the numbers'))\nprint((await compact.status())['scheduled'])"}}}, {"usage": {"input": 120}}]}),
        json!({"steps": [
            {"expect": ["'tokens': 120", "'context_window': 128000", "'percent': 0.1", "'scheduled': False", "{'scheduled': True}\nTrue"]},
            {"text": "done"}
        ]}),
        // The cut falls inside this turn: the history and the turn's start are summarised
        // apart, both with the instructions.
        json!({"steps": [{"expect": ["<user-instructions>\nkeep the numbers\n</user-instructions>", "[User]: hello"]}, {"expect_none": ["compact yourself"]}, {"text": "requested summary"}]}),
        json!({"steps": [{"expect": ["## Original Request", "[User]: compact yourself", "keep the numbers"]}, {"text": "prefix summary"}]}),
        json!({"steps": [{"expect_first": ["<summary>\nrequested summary\n\n---\n\n**Turn Context (split turn):**\n\nprefix summary\n</summary>"]}, {"text": "after"}]}),
    ];
    let mut a = compacting_agent(&dir, &lines);
    assert_eq!(a.prompt_stop("hello"), "end_turn");
    assert_eq!(a.prompt_stop("compact yourself"), "end_turn");
    let c = compactions(&a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["reason"], "requested");
    assert_eq!(a.prompt_stop("next"), "end_turn");
}

#[test]
fn usage_update_reports_reported_usage_plus_estimates_and_the_cost() {
    let dir = TempDir::new("compact-usage");
    let lines = vec![
        json!({"config": {"cost": {"input": 3.0, "output": 15.0, "cacheRead": 0.3}}}),
        json!({"steps": [{"tool_call": {"id": "b1", "name": "bash", "arguments": {"command": "echo hi"}}}, {"usage": {"input": 1000, "output": 20, "cache_read": 200}}]}),
        json!({"steps": [{"text": "done"}, {"usage": {"input": 2000, "output": 100}}]}),
    ];
    let script = script_file(&dir, &lines);
    let mut a = agent_in(&dir, &script, &["--tools", "bash"]);
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let usage = a.updates_of("usage_update");
    assert_eq!(usage.len(), 2, "{usage:?}");
    // Not cumulative: each is what the context holds after that call.
    assert_eq!(usage[0]["used"], 1220);
    assert_eq!(usage[1]["used"], 2100);
    let cost = |u: &Value| u["cost"]["amount"].as_f64().unwrap();
    let first = (1000.0 * 3.0 + 20.0 * 15.0 + 200.0 * 0.3) / 1e6;
    assert!((cost(&usage[0]) - first).abs() < 1e-12, "{}", usage[0]);
    let second = first + (2000.0 * 3.0 + 100.0 * 15.0) / 1e6;
    assert!((cost(&usage[1]) - second).abs() < 1e-12, "{}", usage[1]);
    assert_eq!(usage[1]["cost"]["currency"], "USD");
}

// --- the real providers against the loopback model server --------------------------------

mod loopback {
    use serde_json::{json, Value};

    use super::{compactions, long, RECOVERY_FAILED};
    use crate::support::llm_server::{Canned, End, LlmServer};
    use crate::support::model::{ask, ask_again, failure, spawn_with, stop_reason, Setup};

    /// A JSON error answer with `status`.
    fn refusal(status: u16, body: Value) -> Canned {
        Canned {
            status,
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
            sse: false,
            end: End::Complete,
            pace: None,
        }
    }

    /// An agent on `api` at the server, keeping 30 recent tokens when it compacts.
    fn agent(server: &LlmServer, api: &str, model: &str) -> Setup {
        let s = spawn_with(server, api, model, &[]);
        // Read at the first turn's end, so writing it now is in time.
        s._dir.write(
            "settings.json",
            &json!({"compaction": {"keepRecentTokens": 30}, "autoRefine": {"enabled": false}})
                .to_string(),
        );
        s
    }

    /// The text of a request message, whether a string or content blocks.
    fn content_text(message: &Value) -> String {
        match &message["content"] {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    #[test]
    fn openai_context_length_exceeded_compacts_and_retries_once() {
        let server = LlmServer::start(vec![
            Canned::sse("openai-text.sse"),
            refusal(
                400,
                json!({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "code": "context_length_exceeded"}}),
            ),
            Canned::sse("openai-text.sse"),
            Canned::sse("openai-text.sse"),
        ]);
        let mut s = agent(&server, "openai-completions", "cold/test-model");
        assert_eq!(stop_reason(&ask(&mut s.agent, &long("FIRST"))), "end_turn");
        let r = ask_again(&mut s.agent, &long("SECOND"));
        assert_eq!(stop_reason(&r), "end_turn", "{r}");
        let posts = server.posts();
        assert_eq!(posts.len(), 4, "turn, refused call, summary, retry");
        // The summary request: the session's model, our prompt, no tools, the output budget.
        let summary = &posts[2].body;
        assert_eq!(summary["model"], "cold/test-model");
        assert!(summary.get("tools").is_none());
        assert_eq!(summary["max_completion_tokens"], 13_107);
        let messages = summary["messages"].as_array().unwrap();
        assert!(content_text(&messages[0]).contains("hand-over notes"));
        assert!(content_text(&messages[1]).contains("[User]: FIRST"));
        assert!(!content_text(&messages[1]).contains("SECOND"));
        // The retry: the system prompt, the summary, the prompt that overflowed.
        let retry = posts[3].body["messages"].as_array().unwrap();
        assert_eq!(retry.len(), 3, "{retry:?}");
        assert!(content_text(&retry[1]).starts_with(
            "The conversation history before this point was compacted into the following summary:\n\n<summary>\nHello, wörld!\n</summary>"
        ));
        assert_eq!(content_text(&retry[2]), long("SECOND"));
        assert_eq!(posts[3].body["messages"][0], posts[1].body["messages"][0]);
        let c = compactions(&s.agent);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["reason"], "overflow");
        assert!(s.agent.finish().success());
    }

    #[test]
    fn anthropic_prompt_is_too_long_compacts_and_retries_once() {
        let server = LlmServer::start(vec![
            Canned::sse("anthropic-text.sse"),
            refusal(
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 213462 tokens > 200000 maximum"}}),
            ),
            Canned::sse("anthropic-text.sse"),
            Canned::sse("anthropic-text.sse"),
        ]);
        let mut s = agent(&server, "anthropic-messages", "claude-test");
        assert_eq!(stop_reason(&ask(&mut s.agent, &long("FIRST"))), "end_turn");
        let r = ask_again(&mut s.agent, &long("SECOND"));
        assert_eq!(stop_reason(&r), "end_turn", "{r}");
        let posts = server.posts();
        assert_eq!(posts.len(), 4);
        assert!(posts[2].body["system"]
            .as_str()
            .unwrap()
            .contains("hand-over notes"));
        assert!(posts[2].body.get("tools").is_none());
        let retry = content_text(&posts[3].body["messages"][0]);
        assert!(
            retry.contains("compacted into the following summary"),
            "{retry}"
        );
        assert!(
            retry.contains("SECOND") && !retry.contains("FIRST"),
            "{retry}"
        );
        assert_eq!(compactions(&s.agent)[0]["reason"], "overflow");
        assert!(s.agent.finish().success());
    }

    #[test]
    fn llama_cpp_context_size_twice_gives_the_recovery_failure() {
        let too_big = || {
            refusal(
                400,
                json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}),
            )
        };
        let server = LlmServer::start(vec![
            Canned::sse("openai-text.sse"),
            too_big(),
            Canned::sse("openai-text.sse"),
            too_big(),
        ]);
        let mut s = agent(&server, "openai-completions", "cold/test-model");
        assert_eq!(stop_reason(&ask(&mut s.agent, &long("FIRST"))), "end_turn");
        let r = ask_again(&mut s.agent, &long("SECOND"));
        assert_eq!(
            failure(&r),
            format!("prime-agent turn failed: {RECOVERY_FAILED}")
        );
        assert_eq!(
            server.posts().len(),
            4,
            "one compaction, one retry, no more"
        );
        assert!(s.agent.finish().success());
    }
}

#[test]
fn settings_turn_the_automatic_triggers_and_the_kernel_skill_off() {
    let dir = TempDir::new("compact-off");
    let agent_dir = dir.path().join("agent-dir");
    std::fs::create_dir_all(&agent_dir).unwrap();
    // The project's settings override the global ones.
    std::fs::write(
        agent_dir.join("settings.json"),
        json!({"compaction": {"keepRecentTokens": 30, "enabled": true}}).to_string(),
    )
    .unwrap();
    dir.write(
        ".prime/agent/settings.json",
        &json!({"compaction": {"enabled": false, "agentCallable": false}}).to_string(),
    );
    let lines = vec![
        json!({"steps": [{"text": long("OLD")}, {"usage": {"input": 100}}]}),
        // Far over the threshold, yet no summary request follows.
        json!({"steps": [{"tool_call": {"id": "k", "name": "ipython", "arguments": {"code": "await compact.status()"}}}, {"usage": {"input": 127_000}}]}),
        json!({"steps": [{"expect": ["error=true", "host request type \"compact.status\" is not available in this session"]}, {"text": "fine"}, {"usage": {"input": 127_500}}]}),
        json!({"steps": [{"expect_first": ["user: hello"]}, {"text": "still whole"}]}),
    ];
    let script = script_file(&dir, &lines);
    let agent_dir = agent_dir.display().to_string();
    let harness = dir.path().join("global-harness").display().to_string();
    let mut a = agent_in_env(
        &dir,
        &script,
        &[],
        &[
            ("PRIME_AGENT_CODING_AGENT_DIR", &agent_dir),
            ("RLM_GLOBAL_HARNESS_STATE_DIR", &harness),
        ],
    );
    assert_eq!(a.prompt_stop("hello"), "end_turn");
    assert_eq!(a.prompt_stop(&long("NEW")), "end_turn");
    assert_eq!(a.prompt_stop("again"), "end_turn");
    assert!(compactions(&a).is_empty());
}
