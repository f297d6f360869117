//! Goals end to end (behaviour spec §5.3, §2.8 case 12): `--goal` seeds the session and is
//! shown at once, the model gets the `<goal_context>` continuation while the goal is active,
//! token accounting ends it at its budget, and a provider failure marks it `error`; every
//! change reaches the client as `_meta…goal`. (`goal.*` from the kernel: `kernel.rs`.)

use serde_json::{json, Value};

use crate::support::*;

fn goal_metas(a: &Agent) -> Vec<Value> {
    a.updates()
        .iter()
        .filter_map(|u| ns(u).get("goal").cloned())
        .collect()
}

#[test]
fn a_goal_from_the_command_line_is_shown_right_after_session_new() {
    let mut a = Agent::scripted("no_replies.jsonl", &["--goal", "ship ACP mode"]);
    a.handshake();
    let update = a.wait_for("the goal", |f| {
        ns(&f["params"]["update"]).get("goal").is_some()
    });
    assert_eq!(
        ns(&update["params"]["update"])["goal"],
        json!({"status":"active","objective":"ship ACP mode","tokensUsed":0})
    );
    assert_eq!(ns(&update["params"]["update"])["promptTurnId"], 0);
}

#[test]
fn an_active_goal_continues_until_its_token_budget_is_reached() {
    let dir = TempDir::new("goal-budget");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"text":"started"},{"usage":{"input":20,"output":10,"cache_read":99}}]}),
            json!({"steps":[
                {"expect":["user: <goal_context>\n","<objective>reach &lt;50&gt; tokens</objective>","- tokens used: 30\n- token budget: 50\n- remaining tokens: 20"]},
                {"text":" more"},{"usage":{"input":20,"output":10}}
            ]}),
            json!({"text":"never asked"}),
        ],
    );
    let mut a = agent_in(
        &dir,
        &script,
        &["--goal", "reach <50> tokens", "--goal-token-budget", "50"],
    );
    let id = a.prompt("go");
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(a.text(), "started more");
    let metas = goal_metas(&a);
    assert_eq!(
        metas.last(),
        Some(
            &json!({"status":"budget_limited","objective":"reach <50> tokens","tokenBudget":50,"tokensUsed":60})
        )
    );
    // The intermediate count was shown too.
    assert!(metas
        .iter()
        .any(|g| g["tokensUsed"] == 30 && g["status"] == "active"));
}

#[test]
fn a_provider_failure_marks_the_goal_error() {
    let dir = TempDir::new("goal-error");
    let script = script_file(&dir, &[json!({"error":"503 overloaded"})]);
    let mut a = agent_in(&dir, &script, &["--goal", "x"]);
    let id = a.prompt("go");
    assert!(a.response(&id).get("error").is_some());
    assert_eq!(goal_metas(&a).last().unwrap()["status"], "error");
}

#[test]
fn the_goal_continues_before_autonomy_and_ends_when_the_model_completes_it() {
    let dir = TempDir::new("goal-complete");
    let script = script_file(
        &dir,
        &[
            json!({"text":"starting"}),
            // The goal's continuation, not a gate report (the goal goes first).
            json!({"steps":[
                {"expect":["user: <goal_context>","<objective>write done.txt</objective>"]},
                {"tool_call":{"name":"ipython","arguments":{"code":"open('done.txt', 'w').write('ok')\nr = await goal.complete()\nprint(r['goal']['status'])"}}}
            ]}),
            json!({"steps":[{"expect":["error=false: complete"]},{"text":"finished"}]}),
        ],
    );
    let mut a = agent_in(
        &dir,
        &script,
        &[
            "--goal",
            "write done.txt",
            "--autonomous-gate",
            "test -f done.txt",
        ],
    );
    let id = a.prompt("go");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    assert_eq!(goal_metas(&a).last().unwrap()["status"], "complete");
    // The gate passed on its first run, after the goal was done: no autonomous continuation.
    let completion = a
        .updates()
        .into_iter()
        .rfind(|u| ns(u).get("quiescence").is_some() && ns(u)["phase"] == "event")
        .unwrap();
    assert_eq!(ns(&completion)["autonomous"]["continuationsUsed"], 0);
    assert_eq!(ns(&completion)["autonomous"]["turnsUsed"], 3);
}

/// Defect: goals were never written to the session file, so every way of continuing a
/// session forgot them. The goal's state is kept as `thread_goal_state` and comes back on
/// `-c`, `-r`, `session/load` and `session/resume` with its status, objective and tokens.
#[test]
fn a_goal_survives_every_resume_path_with_its_status_objective_and_tokens() {
    use crate::support::sessions;
    let dir = TempDir::new("goal-resume");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"text":"started"},{"usage":{"input":20,"output":10}}]}),
            json!({"steps":[{"expect":["<goal_context>"]},{"text":" more"},{"usage":{"input":20,"output":10}}]}),
        ],
    );
    let mut a = sessions::in_dir(
        &dir,
        &script,
        &["--goal", "reach <50> tokens", "--goal-token-budget", "50"],
        &[],
    );
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let want = json!({"status":"budget_limited","objective":"reach <50> tokens","tokenBudget":50,"tokensUsed":60});
    assert_eq!(goal_metas(&a).last(), Some(&want));
    assert!(a.finish().success());
    let stored: Vec<Value> = sessions::lines_of(&sessions::session_file(&dir, &sid))
        .into_iter()
        .filter(|l| l["type"] == "custom" && l["customType"] == "thread_goal_state")
        .collect();
    let last = &stored.last().expect("the goal's state is in the file")["data"];
    assert_eq!(
        (
            &last["status"],
            &last["objective"],
            &last["tokensUsed"],
            &last["active"]
        ),
        (
            &json!("budget_limited"),
            &json!("reach <50> tokens"),
            &json!(60),
            &json!(false)
        )
    );
    let idle = script_file(&dir, &[]);
    let goal_after = |a: &mut Agent| -> Value {
        let update = a.wait_for("the restored goal", |f| {
            ns(&f["params"]["update"]).get("goal").is_some()
        });
        ns(&update["params"]["update"])["goal"].clone()
    };
    for args in [vec!["-c"], vec!["-r", &sid[..8]]] {
        let mut b = sessions::in_dir(&dir, &idle, &args, &[]);
        assert_eq!(b.handshake(), sid, "{args:?}");
        assert_eq!(goal_after(&mut b), want, "{args:?}");
        assert!(b.finish().success());
    }
    let cwd = dir.path().display().to_string();
    for method in ["session/load", "session/resume"] {
        let mut c = sessions::in_dir(&dir, &idle, &[], &[]);
        c.call("initialize", json!({"protocolVersion": 1}));
        let r = c.call(
            method,
            json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
        );
        assert!(r["result"].is_object(), "{method}: {r}");
        assert_eq!(goal_after(&mut c), want, "{method}");
        assert!(c.finish().success());
    }
}

/// Issue 33, item 2: a goal continuation waits while an `rlm(...)` child runs, so the child's
/// news (here its completion notice) reaches the model before it is told to keep going.
#[test]
fn a_goal_continuation_waits_for_running_children() {
    let dir = TempDir::new("goal-children");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"name":"ipython","arguments":{"code":"h = await rlm(\"Take your time\", name=\"slow\")\nprint(\"spawned\", h.name)"}}},{"usage":{"input":10,"output":5}}]}),
            json!({"agent":"slow","steps":[{"sleep_ms":1500},{"text":"slow work done"}]}),
            json!({"steps":[{"expect":["spawned slow"]},{"text":"Spawned it."},{"usage":{"input":10,"output":5}}]}),
            json!({"steps":[
                {"expect_history":["<goal_context>","RLM child slow (sub-","completed without sending a reply. Last assistant text: slow work done"]},
                {"text":" Noted."},{"usage":{"input":20,"output":10}}
            ]}),
        ],
    );
    let mut a = agent_in_env(
        &dir,
        &script,
        &["--goal", "wait for the child", "--goal-token-budget", "60"],
        &[("RLM_MAX_DEPTH", "1")],
    );
    let id = a.prompt("go");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    assert_eq!(a.text(), "Spawned it. Noted.");
    assert_eq!(goal_metas(&a).last().unwrap()["status"], "budget_limited");
}

/// A held goal continuation still ends at once on `session/cancel`.
#[test]
fn a_cancel_ends_a_goal_continuation_held_for_children() {
    let dir = TempDir::new("goal-children-cancel");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"name":"ipython","arguments":{"code":"h = await rlm(\"Never finish\", name=\"stuck\")\nprint(\"spawned\")"}}}]}),
            json!({"agent":"stuck","steps":[{"wait_for_cancel":true}]}),
            json!({"steps":[{"text":"Spawned it."}]}),
            json!({"text":"never asked"}),
        ],
    );
    let mut a = agent_in_env(
        &dir,
        &script,
        &["--goal", "wait for the child"],
        &[("RLM_MAX_DEPTH", "1")],
    );
    let sid = a.sid();
    let id = a.prompt("go");
    a.wait_for("the first answer", |f| {
        f["params"]["update"]["content"]["text"] == "Spawned it."
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    a.notify("session/cancel", json!({"sessionId": sid}));
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(a.text(), "Spawned it.");
}
