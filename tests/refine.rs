//! Refine end to end (behaviour spec §5.4, issue 12): `/refine` plans with the scripted model,
//! the kernel applies the plan to the real harness store, `/refine rollback` undoes it, and
//! `_meta…refinement` reports each; the kernel's `refine.run()` refines at the turn's end.

use serde_json::{json, Value};

use crate::support::*;

fn agent(dir: &TempDir, lines: &[Value]) -> Agent {
    let script = script_file(dir, lines);
    let harness = dir.path().join("global-harness").display().to_string();
    let agent_dir = dir.path().join("agent-dir").display().to_string();
    agent_in_env(
        dir,
        &script,
        &[],
        &[
            ("RLM_GLOBAL_HARNESS_STATE_DIR", &harness),
            ("PRIME_AGENT_CODING_AGENT_DIR", &agent_dir),
        ],
    )
}

/// The `_meta…refinement` payloads the client saw, in order.
fn refinements(a: &Agent) -> Vec<Value> {
    a.updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)["refinement"].clone())
        .filter(|r| !r.is_null())
        .collect()
}

fn plan(summary: &str, edits: Value) -> String {
    json!({"summary": summary, "rationale": "seen in the session", "expectedOutcome": "faster builds", "edits": edits})
        .to_string()
}

#[test]
fn refine_applies_a_planned_edit_and_rollback_undoes_it() {
    let dir = TempDir::new("refine-apply");
    let planned = plan(
        "remember how to build",
        json!([
            {"action": "create", "kind": "memory", "id": "m1", "title": "Build", "content": "use make -j2"},
            {"action": "delete", "kind": "skill", "id": "missing"}
        ]),
    );
    let lines = vec![
        json!({"steps": [
            {"expect_system": ["improve the working harness"]},
            {"expect": ["<harness>\n(empty harness)\n</harness>", "<user-instructions>\nremember the build\n</user-instructions>"]},
            {"text": format!("```json\n{planned}\n```")}
        ]}),
        json!({"steps": [{"tool_call": {"id": "c1", "name": "ipython", "arguments": {"code": "print(rlm.harness.get('memory', 'm1').content)"}}}]}),
        json!({"steps": [{"expect": ["error=false: use make -j2"]}, {"text": "stored"}]}),
        json!({"steps": [{"tool_call": {"id": "c2", "name": "ipython", "arguments": {"code": "print(rlm.harness.get('memory', 'm1'), [r['id'] for r in rlm.harness.snapshot()['refinements']])"}}}]}),
        json!({"steps": [{"expect": ["error=false: None ['refine_0001', 'refine_0002']"]}, {"text": "gone"}]}),
    ];
    let mut a = agent(&dir, &lines);
    assert_eq!(a.prompt_stop("/refine remember the build"), "end_turn");
    assert_eq!(
        refinements(&a),
        vec![
            json!({"status": "complete", "summary": "remember how to build", "changes": ["create memory:m1"]})
        ]
    );
    assert_eq!(a.prompt_stop("check the memory"), "end_turn");
    assert_eq!(a.prompt_stop("/refine rollback refine_0001"), "end_turn");
    assert_eq!(
        refinements(&a)[1],
        json!({"status": "complete", "summary": "Rolled back refine_0001", "changes": ["delete memory:m1"]})
    );
    assert_eq!(a.prompt_stop("check again"), "end_turn");
    assert!(a.text().ends_with("gone"));
    // An unknown id and a bad plan fail clearly; the turn still ends normally.
    assert_eq!(a.prompt_stop("/refine rollback refine_0042"), "end_turn");
    assert_eq!(
        refinements(&a)[2],
        json!({"status": "failed", "error": "No refinement refine_0042 in this session"})
    );
}

#[test]
fn a_plan_that_is_not_json_fails_the_refinement_not_the_turn() {
    let dir = TempDir::new("refine-bad");
    let lines = vec![json!({"text": "I would rather chat."})];
    let mut a = agent(&dir, &lines);
    assert_eq!(a.prompt_stop("/refine"), "end_turn");
    assert_eq!(
        refinements(&a),
        vec![json!({"status": "failed", "error": "the planner's reply holds no JSON object"})]
    );
}

#[test]
fn refine_run_from_the_kernel_refines_at_the_turn_boundary() {
    let dir = TempDir::new("refine-requested");
    let planned = plan(
        "note the layout",
        json!([{"action": "create", "kind": "prompt", "title": "Layout", "content": "src/ holds the code"}]),
    );
    let lines = vec![
        json!({"steps": [{"tool_call": {"id": "r1", "name": "ipython", "arguments": {"code": "print(await refine.run('note the layout'))\nprint((await refine.status())['scheduled'])"}}}]}),
        json!({"steps": [{"expect": ["{'scheduled': True}\nTrue"]}, {"text": "asked"}]}),
        json!({"steps": [{"expect": ["<user-instructions>\nnote the layout\n</user-instructions>", "[User]: please refine"]}, {"text": planned}]}),
    ];
    let mut a = agent(&dir, &lines);
    assert_eq!(a.prompt_stop("please refine"), "end_turn");
    assert_eq!(
        refinements(&a),
        vec![
            json!({"status": "complete", "summary": "note the layout", "changes": ["create prompt:layout"]})
        ]
    );
}

/// A scripted agent with its sessions on disk (`sessions::in_dir`) and `settings` as the
/// agent dir's `settings.json`.
fn on_disk(dir: &TempDir, lines: &[Value], settings: Value) -> Agent {
    let script = script_file(dir, lines);
    dir.write("agent/settings.json", &settings.to_string());
    let mut a = sessions::in_dir(dir, &script, &[], &[]);
    a.handshake();
    a
}

/// The `prime-agent.refinement` entries of the session file.
fn refinement_entries(dir: &TempDir, sid: &str) -> Vec<Value> {
    sessions::lines_of(&sessions::session_file(dir, sid))
        .into_iter()
        .filter(|l| l["type"] == "custom" && l["customType"] == "prime-agent.refinement")
        .map(|l| l["data"].clone())
        .collect()
}

#[test]
fn automatic_refine_fires_at_the_interval_is_recorded_and_rebuilds_the_prompt() {
    let dir = TempDir::new("refine-auto");
    let planned = plan(
        "note the layout",
        json!([{"action": "create", "kind": "prompt", "title": "Layout", "content": "src/ holds the code"}]),
    );
    let gate = json!({"shouldRefine": true, "rationale": "the layout was found", "instructions": "note the layout"});
    let lines = vec![
        json!({"steps": [{"expect_system_none": ["Layout (src/ holds the code)"]}, {"text": "one"}]}),
        json!({"text": "two"}),
        // The second assistant turn: the review gate, then the planner with its instructions.
        json!({"steps": [{"expect_system": ["decide whether its harness"]}, {"expect": ["[User]: second", "Should the harness be refined now?"]}, {"text": gate.to_string()}]}),
        json!({"steps": [{"expect_system": ["improve the working harness"]}, {"expect": ["<user-instructions>\nnote the layout\n</user-instructions>"]}, {"text": planned}]}),
        // The next call's system prompt quotes the new harness overview.
        json!({"steps": [{"expect_system": ["local prompt:\n- layout: Layout (src/ holds the code)"]}, {"text": "three"}]}),
        json!({"text": "four"}),
        // Two turns later the interval is reached again, but the cooldown holds the review
        // back: this line answers the fifth prompt, not a gate.
        json!({"steps": [{"expect": ["fifth"]}, {"text": "five"}]}),
    ];
    let mut a = on_disk(&dir, &lines, json!({"autoRefine": {"turnInterval": 2}}));
    for prompt in ["first", "second", "third", "fourth", "fifth"] {
        assert_eq!(a.prompt_stop(prompt), "end_turn", "{prompt}");
    }
    assert!(a.text().ends_with("five"));
    assert_eq!(
        refinements(&a),
        vec![
            json!({"status": "complete", "summary": "note the layout", "changes": ["create prompt:layout"]})
        ]
    );
    let entries = refinement_entries(&dir, &a.sid());
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["summary"], "note the layout");
    assert_eq!(entries[0]["scope"], "local");
    assert_eq!(entries[0]["appliedEdits"][0]["applied"], true);
}

#[test]
fn a_gate_that_says_no_or_answers_nonsense_refines_nothing() {
    let dir = TempDir::new("refine-gate-no");
    let lines = vec![
        json!({"text": "one"}),
        json!({"text": "{\"shouldRefine\": false, \"rationale\": \"nothing new\"}"}),
        json!({"steps": [{"expect": ["second"]}, {"text": "two"}]}),
        json!({"text": "I think so, yes."}),
        json!({"steps": [{"expect": ["third"]}, {"expect_system": ["Current harness:\n(empty)"]}, {"text": "three"}]}),
    ];
    let settings = json!({"autoRefine": {"turnInterval": 1, "cooldownMs": 0, "compact": false}});
    let mut a = on_disk(&dir, &lines, settings);
    for prompt in ["first", "second", "third"] {
        assert_eq!(a.prompt_stop(prompt), "end_turn", "{prompt}");
    }
    assert!(a.text().ends_with("three"));
    assert!(refinements(&a).is_empty());
    assert!(refinement_entries(&dir, &a.sid()).is_empty());
}

#[test]
fn a_global_refine_is_in_the_session_file_and_the_global_history() {
    let dir = TempDir::new("refine-global");
    let planned = plan(
        "remember the build",
        json!([{"action": "create", "kind": "memory", "id": "m1", "title": "Build", "content": "make -j2"}]),
    );
    let lines = vec![
        json!({"text": planned}),
        json!({"steps": [{"expect_system": ["global memory:\n- m1: Build"]}, {"text": "ok"}]}),
    ];
    let mut a = on_disk(&dir, &lines, json!({"autoRefine": {"enabled": false}}));
    assert_eq!(a.prompt_stop("/refine --global"), "end_turn");
    assert_eq!(a.prompt_stop("next"), "end_turn");
    let entries = refinement_entries(&dir, &a.sid());
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["scope"], "global");
    let history = dir.path().join("global-harness/refinements.jsonl");
    let history = sessions::lines_of(&history);
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["id"], entries[0]["id"]);
}

/// A first model call that counts toward `autoRefine.turnInterval` 1, then a tool that runs
/// until the turn is cancelled: the close (or end of input) cancels the turn before its end,
/// where the due review would have run.
fn cancelled_with_a_review_due(gate_line: Value) -> Vec<Value> {
    let planned = plan(
        "note the build",
        json!([{"action": "create", "kind": "memory", "id": "build", "title": "Build", "content": "make -j2"}]),
    );
    vec![
        json!({"steps": [{"text": "building"}, {"tool_call": {"id": "s1", "name": "bash", "arguments": {"command": "sleep 30"}}}]}),
        gate_line,
        json!({"steps": [{"expect_system": ["improve the working harness"]}, {"text": planned}]}),
    ]
}

const DUE_EVERY_CALL: &str =
    r#"{"autoRefine": {"turnInterval": 1, "cooldownMs": 0, "compact": false}}"#;

fn gate_yes() -> Value {
    let gate = json!({"shouldRefine": true, "rationale": "the build was found", "instructions": "note the build"});
    json!({"steps": [{"expect_system": ["decide whether its harness"]}, {"text": gate.to_string()}]})
}

/// Waits until the turn's bash call runs.
fn wait_for_the_tool(a: &mut Agent) {
    a.wait_for("the bash call to run", |f| {
        f["method"] == "session/update"
            && f["params"]["update"]["sessionUpdate"] == "tool_call_update"
            && f["params"]["update"]["status"] == "in_progress"
    });
}

// See: issue 33 (automatic refine is drained at close, behaviour spec §5.4). A review due
// at a turn's end that the close cancelled ran nowhere: now the close runs it on a turn worker
// (bounded), reports it, records it, and then answers.
#[test]
fn a_refine_due_when_the_close_cancels_the_turn_runs_before_the_close_is_answered() {
    let dir = TempDir::new("refine-drain-close");
    let lines = cancelled_with_a_review_due(gate_yes());
    let mut a = on_disk(&dir, &lines, serde_json::from_str(DUE_EVERY_CALL).unwrap());
    let sid = a.sid();
    let prompt = a.prompt("build it");
    wait_for_the_tool(&mut a);
    let close = a.request("session/close", json!({"sessionId": sid}));
    let r = a.response(&close);
    assert_eq!(r["result"], json!({}), "{r}");
    let answered = |a: &Agent, id: &Value| {
        a.seen
            .iter()
            .position(|f| f.get("id") == Some(id) && f.get("method").is_none())
            .unwrap()
    };
    assert_eq!(
        a.seen[answered(&a, &prompt)]["result"]["stopReason"],
        "cancelled"
    );
    let reported = a
        .seen
        .iter()
        .position(|f| {
            f["method"] == "session/update" && !ns(&f["params"]["update"])["refinement"].is_null()
        })
        .unwrap_or_else(|| panic!("no refinement reported; stderr:\n{}", a.stderr_text()));
    assert!(
        reported < answered(&a, &close),
        "reported after the close's answer"
    );
    assert_eq!(
        refinements(&a),
        vec![
            json!({"status": "complete", "summary": "note the build", "changes": ["create memory:build"]})
        ]
    );
    let entries = refinement_entries(&dir, &sid);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["summary"], "note the build");
    assert!(a.finish().success());
}

/// End of input is a close for every session: the due refine is drained before the exit.
#[test]
fn a_refine_due_at_end_of_input_is_drained_before_the_exit() {
    let dir = TempDir::new("refine-drain-eof");
    let lines = cancelled_with_a_review_due(gate_yes());
    let mut a = on_disk(&dir, &lines, serde_json::from_str(DUE_EVERY_CALL).unwrap());
    let sid = a.sid();
    a.prompt("build it");
    wait_for_the_tool(&mut a);
    assert!(a.finish().success(), "{}", a.stderr_text());
    let entries = refinement_entries(&dir, &sid);
    assert_eq!(entries.len(), 1, "{entries:?}\n{}", a.stderr_text());
    assert_eq!(entries[0]["appliedEdits"][0]["applied"], true);
}

/// The drain is bounded (`PRIME_AGENT_REFINE_DRAIN_MS`): a review gate that never answers is
/// aborted and the close is answered; nothing is recorded. With nothing due, a close answers
/// at once and no model call is made.
#[test]
fn a_refine_drain_that_outlives_its_bound_is_aborted_and_the_close_answers() {
    let dir = TempDir::new("refine-drain-bound");
    let lines = cancelled_with_a_review_due(json!({"steps": [{"wait_for_cancel": true}]}));
    dir.write("agent/settings.json", DUE_EVERY_CALL);
    let script = script_file(&dir, &lines);
    let mut a = sessions::in_dir(
        &dir,
        &script,
        &[],
        &[("PRIME_AGENT_REFINE_DRAIN_MS", "300")],
    );
    let sid = a.handshake();
    a.prompt("build it");
    wait_for_the_tool(&mut a);
    let r = a.call("session/close", json!({"sessionId": sid}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(refinements(&a).is_empty());
    assert!(refinement_entries(&dir, &sid).is_empty());
    assert!(
        a.stderr_text().contains("draining the refine due at close"),
        "{}",
        a.stderr_text()
    );

    // Nothing due (the default interval of 25 calls is far off): no drain, no model call.
    let dir = TempDir::new("refine-drain-none");
    let lines = vec![
        json!({"steps": [{"tool_call": {"id": "s1", "name": "bash", "arguments": {"command": "sleep 30"}}}]}),
    ];
    let mut a = on_disk(&dir, &lines, json!({}));
    let sid = a.sid();
    a.prompt("build it");
    wait_for_the_tool(&mut a);
    let r = a.call("session/close", json!({"sessionId": sid}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(
        !a.stderr_text().contains("draining the refine"),
        "{}",
        a.stderr_text()
    );
}
