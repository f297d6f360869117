//! Upstream's remaining settings and `models.json` keys, each honoured end to end against the
//! loopback model server: the request the server sees is the proof (issue 34, item 6).

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, LlmServer, Recorded};
use crate::support::model::{self, Setup};
use crate::support::*;

/// An OpenAI chat-completions stream of one text reply.
pub fn openai_text(text: &str) -> Canned {
    let delta = json!({"choices":[{"index":0,"delta":{"content":text},"finish_reason":null}]});
    let stop = json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]});
    let usage = json!({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":5}});
    Canned::sse_bytes(
        format!("data: {delta}\n\ndata: {stop}\n\ndata: {usage}\n\ndata: [DONE]\n\n").into_bytes(),
    )
}

/// An OpenAI chat-completions stream of one call of `tool` with `args`.
pub fn openai_tool_call(tool: &str, args: &Value) -> Canned {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1",
        "type":"function","function":{"name":tool,"arguments":args.to_string()}}]},"finish_reason":null}]});
    let stop = json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]});
    let usage = json!({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":5}});
    Canned::sse_bytes(
        format!("data: {call}\n\ndata: {stop}\n\ndata: {usage}\n\ndata: [DONE]\n\n").into_bytes(),
    )
}

/// Whether a chat-completions request carries a tool result already.
fn has_tool_result(r: &Recorded) -> bool {
    r.body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
}

/// An agent on `intercept/<model>` with `settings` as its global `settings.json`.
fn agent_with_settings(server: &LlmServer, model: &str, settings: &Value) -> Setup {
    let dir = TempDir::new("settings");
    dir.write(
        "models.json",
        &model::models_json(server, "openai-completions"),
    );
    dir.write("settings.json", &settings.to_string());
    model::spawn_in(dir, model, &[("RLM_MAX_DEPTH", "1")], false)
}

/// `subagentDefaultModel` runs a child whose `rlm(...)` names no model; `auxiliaryModel`
/// writes the compaction summary; the session's own calls stay on its model.
#[test]
fn subagent_default_model_and_auxiliary_model_take_their_calls() {
    let code = "import asyncio\nh = await rlm(\"Count to three\", name=\"kid\")\nfor _ in range(600):\n    s = [c for c in await rlm.list_subagents() if c.session_name == \"kid\"]\n    if s and s[0].status != \"running\":\n        break\n    await asyncio.sleep(0.05)\nprint(\"child\", s[0].status, h.model)";
    let server =
        LlmServer::start_responding(move |r, _| match r.body["model"].as_str().unwrap_or("") {
            "vision-model" => openai_text("one two three"),
            "claude-test" => openai_text("SUMMARY: a child counted"),
            _ if has_tool_result(r) => openai_text("delegated"),
            _ => openai_tool_call("ipython", &json!({ "code": code })),
        });
    let settings = json!({
        "subagentDefaultModel": "intercept/vision-model",
        "auxiliaryModel": "claude-test",
        "compaction": {"keepRecentTokens": 1},
        "autoRefine": {"enabled": false}
    });
    let mut s = agent_with_settings(&server, "cold/test-model", &settings);
    let a = &mut s.agent;
    let r = model::ask(a, "delegate the count");
    assert_eq!(model::stop_reason(&r), "end_turn", "{r}");
    let r = model::ask_again(a, "/compact");
    assert!(r.get("result").is_some(), "{r}");
    let models: Vec<String> = server
        .posts()
        .iter()
        .map(|p| p.body["model"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        models,
        [
            "cold/test-model",
            "vision-model",
            "cold/test-model",
            "claude-test"
        ],
        "main call, the child's, main again, then the summary"
    );
    let tool_result = &server.posts()[2].body["messages"];
    assert!(
        tool_result
            .to_string()
            .contains("child completed intercept/vision-model"),
        "{tool_result}"
    );
    assert!(a.finish().success());
}

/// A settings model that names nothing with credentials is a warning naming the key, and the
/// calls stay on the session's model.
#[test]
fn an_unknown_settings_model_is_a_warning_naming_the_key() {
    let server = LlmServer::start(vec![openai_text("hi")]);
    let settings = json!({"subagentDefaultModel": "nope/none", "auxiliaryModel": 7});
    let mut s = agent_with_settings(&server, "cold/test-model", &settings);
    let a = &mut s.agent;
    model::ask(a, "hello");
    assert!(model::stderr_eventually(
        a,
        "Ignoring settings key subagentDefaultModel: nope/none is not a model with credentials"
    ));
    assert!(model::stderr_eventually(
        a,
        "Ignoring settings key auxiliaryModel: expected a non-empty string"
    ));
    assert!(a.finish().success());
}

/// The text a slash command streamed (it answers `end_turn` without a model call).
fn command(a: &mut Agent, text: &str) -> String {
    let before = a.text().len();
    assert_eq!(a.prompt_stop(text), "end_turn", "{text}");
    a.text()[before..].to_owned()
}

/// A scripted agent in `dir` with `settings` as the project's `settings.json`.
fn scripted_with_settings(
    dir: &TempDir,
    settings: &Value,
    lines: &[Value],
    flags: &[&str],
) -> Agent {
    dir.write(".prime/agent/settings.json", &settings.to_string());
    let script = script_file(dir, lines);
    agent_in(dir, &script, flags)
}

/// `autonomous.*`: limits from settings (`"unlimited"` included) apply once the mode is on,
/// and each `--autonomous-*` flag given wins over its key.
#[test]
fn autonomous_limits_come_from_settings_and_flags_win() {
    let dir = TempDir::new("settings-autonomous");
    let settings = json!({"autonomous": {"maxTurns": "unlimited", "maxTokens": 500,
        "maxContinuations": 9, "timeoutMs": "unlimited"}});
    let mut a = scripted_with_settings(&dir, &settings, &[json!({"text":"x"})], &[]);
    // Limits alone do not turn the mode on.
    assert_eq!(
        command(&mut a, "/autonomous status"),
        "Autonomous mode: off. Continuations: 0/9. Turns: 0/unlimited. Tokens: 0/500."
    );
    drop(a);
    let mut a = scripted_with_settings(
        &dir,
        &settings,
        &[json!({"text":"x"})],
        &["--autonomous-max-tokens", "700"],
    );
    assert_eq!(
        command(&mut a, "/autonomous status"),
        "Autonomous mode: on. Continuations: 0/9. Turns: 0/unlimited. Tokens: 0/700."
    );
}

/// `autonomous.enabled` starts every session in autonomous mode: the default continuation
/// runs until settings' continuation limit stops the run.
#[test]
fn autonomous_enabled_in_settings_runs_continuations_to_the_settings_limit() {
    let dir = TempDir::new("settings-autonomous-on");
    let settings = json!({"autonomous": {"enabled": true, "maxContinuations": 1}});
    let lines = [
        json!({"text":"first"}),
        json!({"text":"second"}),
        json!({"text":"never asked"}),
    ];
    let mut a = scripted_with_settings(&dir, &settings, &lines, &[]);
    assert_eq!(a.prompt_stop("go"), "max_turn_requests");
    assert_eq!(a.text(), "firstsecond");
}

/// A bad `autonomous.*` value is a warning naming the key, and the default stays.
#[test]
fn a_bad_autonomous_value_is_a_warning_naming_the_key() {
    let dir = TempDir::new("settings-autonomous-bad");
    let settings = json!({"autonomous": {"maxTurns": 0, "gates": {"commands": "make test"}}});
    let mut a = scripted_with_settings(&dir, &settings, &[json!({"text":"x"})], &[]);
    assert_eq!(
        command(&mut a, "/autonomous status"),
        "Autonomous mode: off. Continuations: 0/3. Turns: 0/12. Tokens: 0/80000."
    );
    for warning in [
        "Ignoring settings key autonomous.maxTurns: expected a positive integer or \"unlimited\"",
        "Ignoring settings key autonomous.gates.commands: expected a list of shell commands",
    ] {
        assert!(model::stderr_eventually(&a, warning), "{warning}");
    }
}

/// Settings `skills` / `prompts` add paths (relative to the agent dir for the global file);
/// `enableSkillCommands: false` leaves skills out of the commands (they stay in the system
/// prompt); `enableBuiltinSkills: false` takes `skill_creator` and the service stubs out of
/// the kernel and the prompt.
#[test]
fn skill_and_prompt_paths_and_the_enable_flags() {
    let dir = TempDir::new("settings-skills");
    let agent_dir = dir.path().join("agent");
    dir.write(
        "agent/settings.json",
        &json!({"skills": ["more-skills"], "prompts": ["more-prompts"],
            "enableSkillCommands": false, "enableBuiltinSkills": false})
        .to_string(),
    );
    dir.write(
        "agent/more-skills/delta/SKILL.md",
        "---\ndescription: Found through settings\n---\nDelta body.\n",
    );
    dir.write(
        "agent/more-prompts/ship.md",
        "---\ndescription: Ship it\n---\nShip $1 now.",
    );
    let code = "print(sorted(n for n in ('skill_creator', 'websearch', 'agent_observe') if n in globals()))";
    let script = script_file(
        &dir,
        &[
            json!({"steps":[
                {"expect_system":["<name>delta</name>", "agent_observe"]},
                {"expect_system_none":["skill_creator"]},
                {"tool_call":{"name":"ipython","arguments":{"code":code}}}]}),
            json!({"steps":[{"expect":["['agent_observe']"]},{"text":"checked"}]}),
            json!({"steps":[{"expect":["user: Ship v2 now."]},{"text":"shipped"}]}),
            json!({"steps":[{"expect":["user: /skill:delta go"]},{"text":"as typed"}]}),
        ],
    );
    let agent_dir = agent_dir.display().to_string();
    let mut a = agent_in_env(
        &dir,
        &script,
        &["--no-session"],
        &[("PRIME_AGENT_CODING_AGENT_DIR", &agent_dir)],
    );
    let commands = a.wait_for("the commands", |f| {
        f["params"]["update"]["sessionUpdate"] == "available_commands_update"
    });
    let names: Vec<&str> = commands["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(names.contains(&"ship"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("skill:")), "{names:?}");
    for text in ["check the kernel", "/ship v2", "/skill:delta go"] {
        assert_eq!(
            a.prompt_stop(text),
            "end_turn",
            "{text}\n{}",
            a.stderr_text()
        );
    }
}

/// models.json `authHeader` sends the key as a bearer token beside the API's own header;
/// `thinkingLevelMap` clamps an unsupported level and sends the mapped value;
/// `modelOverrides` changes a built-in model (its headers, its map) without listing it.
#[test]
fn models_json_auth_header_level_map_and_overrides_reach_the_request() {
    let server = LlmServer::start(vec![Canned::sse("anthropic-text.sse")]);
    let dir = TempDir::new("settings-models-json");
    dir.write(
        "models.json",
        &json!({"providers": {"intercept": {"baseUrl": server.url(), "api": "anthropic-messages",
            "apiKey": "test-key", "authHeader": true, "models": [{"id": "claude-test"}]}}})
        .to_string(),
    );
    let mut s = model::spawn_in(dir, "claude-test", &[], false);
    model::ask(&mut s.agent, "hi");
    let post = &server.posts()[0];
    assert_eq!(post.header("x-api-key"), Some("test-key"));
    assert_eq!(post.header("authorization"), Some("Bearer test-key"));

    let server = LlmServer::start(vec![openai_text("ok")]);
    let dir = TempDir::new("settings-model-overrides");
    dir.write(
        "models.json",
        &json!({"providers": {
            "intercept": {"baseUrl": format!("{}/v1", server.url()), "api": "openai-completions",
                "apiKey": "k", "models": [{"id": "deep", "reasoning": true,
                "thinkingLevelMap": {"medium": null, "high": "max"}}]},
            "openai": {"baseUrl": format!("{}/v1", server.url()), "api": "openai-completions",
                "apiKey": "k", "modelOverrides": {"gpt-5-mini": {"headers": {"X-Route": "r1"},
                "thinkingLevelMap": {"low": "minimal"}}}}}})
        .to_string(),
    );
    let args = |model: &str, level: &str| {
        [
            "--mode",
            "acp",
            "--model",
            model,
            "--thinking",
            level,
            "--no-session",
            "--offline",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    for (model, level) in [("intercept/deep", "medium"), ("openai/gpt-5-mini", "low")] {
        let mut a = Agent::spawn(Spawn {
            args: args(model, level),
            env: model::env_for(&dir, &[]),
            ..Default::default()
        });
        let r = model::ask(&mut a, "hi");
        assert_eq!(model::stop_reason(&r), "end_turn", "{r}");
    }
    let posts = server.posts();
    // `medium` is not the model's: the call runs at `high`, sent as `max`.
    assert_eq!(posts[0].body["reasoning_effort"], "max");
    assert_eq!(posts[0].header("x-route"), None);
    assert_eq!(posts[1].body["model"], "gpt-5-mini");
    assert_eq!(posts[1].body["reasoning_effort"], "minimal");
    assert_eq!(posts[1].header("x-route"), Some("r1"));
}

/// `thinkingBudgets` sets the thinking tokens of a level for an API that takes a budget.
#[test]
fn thinking_budgets_set_the_anthropic_budget_of_the_level() {
    let server = LlmServer::start(vec![Canned::sse("anthropic-text.sse")]);
    let dir = TempDir::new("settings-budgets");
    dir.write(
        "models.json",
        &model::models_json(&server, "anthropic-messages"),
    );
    dir.write(
        "settings.json",
        &json!({"thinkingBudgets": {"medium": 3000}}).to_string(),
    );
    let mut s = model::spawn_in(dir, "claude-test", &[], false);
    model::ask(&mut s.agent, "hi");
    assert_eq!(
        server.posts()[0].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 3000})
    );
}

/// A reply that streams its words slowly (each event `pace` after the last): steers sent
/// while it streams are all waiting when it ends.
fn slow_text(words: &[&str]) -> Canned {
    let mut body = String::new();
    for w in words {
        let delta = json!({"choices":[{"index":0,"delta":{"content":w},"finish_reason":null}]});
        body.push_str(&format!("data: {delta}\n\n"));
    }
    let stop = json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]});
    body.push_str(&format!("data: {stop}\n\ndata: [DONE]\n\n"));
    Canned::sse_bytes(body.into_bytes()).paced(std::time::Duration::from_millis(250))
}

/// `steeringMode`: two steers sent during one model call reach the model one per call
/// (`one-at-a-time`, the default) or together in the next call (`all`).
#[test]
fn steering_mode_decides_how_many_steers_a_model_call_takes() {
    for (mode, calls) in [(None, 3), (Some("all"), 2)] {
        let words = [
            "one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight ",
        ];
        let server = LlmServer::start(vec![slow_text(&words), openai_text("ok")]);
        let settings = mode.map_or_else(|| json!({}), |m| json!({"steeringMode": m}));
        let mut s = agent_with_settings(&server, "cold/test-model", &settings);
        let a = &mut s.agent;
        let sid = a.handshake();
        let prompt = a.prompt("count");
        a.wait_for("the reply streams", |f| {
            f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        });
        for text in ["first steer", "second steer"] {
            let steer = a.call(
                "_session/steering",
                json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
            );
            assert_eq!(steer["result"]["outcome"], "injected", "{steer}");
        }
        let r = a.response(&prompt);
        assert_eq!(model::stop_reason(&r), "end_turn", "{r}");
        let posts = server.posts();
        assert_eq!(posts.len(), calls, "{mode:?}");
        let users = |i: usize| -> Vec<String> {
            posts[i].body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "user")
                .map(|m| m["content"].as_str().unwrap_or("").to_owned())
                .collect()
        };
        let last = users(calls - 1);
        assert_eq!(
            last[last.len() - 2..],
            ["first steer", "second steer"],
            "{mode:?}"
        );
        if calls == 3 {
            assert_eq!(users(1).last().map(String::as_str), Some("first steer"));
        }
    }
}

/// `cacheKeepAlive`: while a tool runs past the interval, one request of the last call's
/// shape with an output budget of one token re-arms the server's prompt cache. The tool waits
/// until the server has seen that request (a file the server writes), so the assertion is on
/// requests, not on time; its usage joins the prompt's.
#[test]
fn cache_keep_alive_repeats_the_last_request_with_one_output_token() {
    let dir = TempDir::new("settings-keepalive");
    let go = dir.path().join("go");
    let go_server = go.clone();
    let command = format!(
        "while [ ! -f {0} ]; do sleep 0.02; done; echo tool done",
        go.display()
    );
    let server = LlmServer::start_responding(move |r, _| {
        if r.body["max_completion_tokens"] == 1 {
            std::fs::write(&go_server, "").unwrap();
            openai_text("k")
        } else if has_tool_result(r) {
            openai_text("done")
        } else {
            openai_tool_call("bash", &json!({ "command": command }))
        }
    });
    let settings = json!({"cacheKeepAlive": {"enabled": true, "intervalMs": 1000}});
    let mut s = agent_with_settings(&server, "cold/test-model", &settings);
    let r = model::ask(&mut s.agent, "wait for it");
    assert_eq!(model::stop_reason(&r), "end_turn", "{r}");
    let posts = server.posts();
    assert_eq!(
        posts.len(),
        3,
        "the call, one keep-alive, the call after the tool"
    );
    let (call, keep_alive) = (&posts[0].body, &posts[1].body);
    assert_eq!(keep_alive["max_completion_tokens"], 1);
    // The same shape as the call before it: everything but the output budget.
    let without_budget = |b: &Value| {
        let mut b = b.clone();
        b.as_object_mut().unwrap().remove("max_completion_tokens");
        b
    };
    assert_eq!(without_budget(keep_alive), without_budget(call));
    assert_ne!(posts[2].body["max_completion_tokens"], 1);
    // Three replies of 40 + 5 tokens each: the keep-alive's usage is counted too.
    assert_eq!(r["result"]["usage"]["inputTokens"], 120, "{r}");
}

/// `defaultServiceTier` goes with every Responses call as `service_tier`; `/fast` switches the
/// session to `priority` (a `service_tier_change` entry in its file) and `-c` keeps it; on a
/// model without Fast mode `/fast` says so and changes nothing.
#[test]
fn service_tier_from_settings_fast_and_a_continued_session() {
    let server = LlmServer::start(vec![Canned::sse("responses-after-tool.sse")]);
    let dir = TempDir::new("settings-service-tier");
    dir.write(
        "models.json",
        &json!({"providers": {"openai": {"baseUrl": format!("{}/v1", server.url()), "apiKey": "k"}}})
            .to_string(),
    );
    dir.write(
        "settings.json",
        &json!({"defaultServiceTier": "flex"}).to_string(),
    );
    let spawn = |extra: &[&str]| {
        let mut args: Vec<String> = ["--mode", "acp", "--model", "openai/gpt-5.4", "--offline"]
            .map(str::to_owned)
            .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        Agent::spawn(Spawn {
            args,
            env: model::env_for(&dir, &[]),
            ..Default::default()
        })
    };
    let mut a = spawn(&[]);
    model::ask(&mut a, "one");
    assert_eq!(
        command(&mut a, "/fast"),
        "Fast mode on: model calls ask for the priority service tier from the next one on."
    );
    model::ask_again(&mut a, "two");
    assert!(a.finish().success());
    let mut b = spawn(&["--continue"]);
    model::ask(&mut b, "three");
    assert!(b.finish().success());
    let tiers: Vec<Value> = server
        .posts()
        .iter()
        .map(|p| p.body["service_tier"].clone())
        .collect();
    assert_eq!(tiers, [json!("flex"), json!("priority"), json!("priority")]);
    let sessions = std::fs::read_dir(dir.path().join("sessions")).unwrap();
    let file = sessions
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let changes: Vec<String> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "service_tier_change")
        .map(|e| e["serviceTier"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(changes, ["flex", "priority"]);

    let scripted = TempDir::new("settings-fast-scripted");
    let script = script_file(&scripted, &[json!({"text":"x"})]);
    let mut c = agent_in(&scripted, &script, &[]);
    assert_eq!(
        command(&mut c, "/fast"),
        "Fast mode requires GPT-5.4, GPT-5.5, or GPT-5.6 with ChatGPT or OpenAI API key authentication"
    );
    assert_eq!(command(&mut c, "/fast now"), "Usage: /fast");
}
