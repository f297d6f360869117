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
