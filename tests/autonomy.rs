//! Autonomous mode end to end (behaviour spec §5.1, §1.19, §2.7 case 3, §2.8 case 2): gates
//! run in the session cwd after each clean assistant turn, the model receives the gate-failure
//! continuation (scripted `expect` steps prove it), limits stop the run with `max_tokens` /
//! `max_turn_requests`, and all of it happens inside one `session/prompt`.

use serde_json::{json, Value};

use crate::support::procs::{assert_dies, wait_for_file};
use crate::support::*;

/// The completion update (phase `event` with `quiescence`) of prompt turn `turn`.
fn completion(a: &Agent, turn: u64) -> Value {
    a.updates()
        .into_iter()
        .find(|u| {
            ns(u)["promptTurnId"] == turn
                && ns(u)["phase"] == "event"
                && ns(u).get("quiescence").is_some()
        })
        .unwrap_or_else(|| panic!("no completion update for turn {turn}"))
}

fn stop_and_result(a: &mut Agent, text: &str) -> Value {
    let id = a.prompt(text);
    let r = a.response(&id);
    assert!(
        r.get("result").is_some(),
        "prompt failed: {r}\n{}",
        a.stderr_text()
    );
    r["result"].clone()
}

#[test]
fn a_failed_gate_continues_with_its_report_until_the_model_fixes_it() {
    let dir = TempDir::new("auto-gate");
    let script = script_file(
        &dir,
        &[
            // The model stops early: done.txt is missing.
            json!({"steps":[{"text":"All done, I think."},{"usage":{"input":100,"output":10}}]}),
            // It receives the gate report as the next user message, and fixes it.
            json!({"steps":[
                {"expect":["Autonomous quality gate failed (attempt 1/3): `test -f done.txt` exited 1.\n\nContinue working. Fix the failure, then produce terminal evidence. Timestamp: 20"]},
                {"tool_call":{"name":"bash","arguments":{"command":"echo ok > done.txt"}}},
                {"usage":{"input":200,"output":20,"cache_read":50}}
            ]}),
            json!({"steps":[{"expect":["tool_result bash"]},{"text":"Created done.txt."},{"usage":{"input":300,"output":30}}]}),
        ],
    );
    let mut a = agent_in(
        &dir,
        &script,
        &["--tools", "bash", "--autonomous-gate", "test -f done.txt"],
    );
    let result = stop_and_result(&mut a, "make done.txt");
    assert_eq!(result["stopReason"], "end_turn", "{}", a.stderr_text());
    assert!(dir.path().join("done.txt").exists());
    // Usage of every model call of the prompt, the continuation included.
    assert_eq!(
        result["usage"],
        json!({"inputTokens":600,"outputTokens":60,"totalTokens":710,"cachedReadTokens":50})
    );
    let c = completion(&a, 1);
    assert_eq!(
        ns(&c)["autonomous"],
        json!({"enabled":true,"continuationsUsed":1,"turnsUsed":3,"tokensUsed":660})
    );
    assert_eq!(
        ns(&c)["quiescence"],
        json!({"outstandingSubagents":0,"remainingAutonomousContinuations":2})
    );
    let terminal = a.terminal(1);
    assert_eq!(ns(&terminal)["autonomous"]["continuationsUsed"], 1);
    // One prompt: one boundary, one response.
    let boundaries = a
        .updates()
        .iter()
        .filter(|u| ns(u)["phase"] == "responseBoundary")
        .count();
    assert_eq!(boundaries, 1);
}

#[test]
fn a_gate_that_always_fails_stops_at_the_turn_limit_with_max_turn_requests() {
    let dir = TempDir::new("auto-turns");
    let script = script_file(
        &dir,
        &[
            json!({"text":"one"}),
            json!({"steps":[{"expect":["`echo nope; exit 7` exited 7.\nOutput:\nnope\n\nContinue working."]},{"text":"two"}]}),
            json!({"text":"never asked"}),
        ],
    );
    let mut a = agent_in(
        &dir,
        &script,
        &[
            "--autonomous-gate",
            "echo nope; exit 7",
            "--autonomous-max-turns",
            "2",
        ],
    );
    let result = stop_and_result(&mut a, "go");
    assert_eq!(result["stopReason"], "max_turn_requests");
    let c = completion(&a, 1);
    let auto = &ns(&c)["autonomous"];
    assert_eq!(auto["turnsUsed"], 2);
    assert_eq!(auto["continuationsUsed"], 1);
    assert_eq!(auto["gateAttempt"], 2);
    assert_eq!(auto["gateFailure"], "exited 7");
    assert_eq!(a.text(), "onetwo");
}

#[test]
fn exhausted_tokens_stop_with_max_tokens() {
    let dir = TempDir::new("auto-tokens");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"text":"big"},{"usage":{"input":90,"output":20,"cache_read":1000}}]})],
    );
    let mut a = agent_in(&dir, &script, &["--autonomous-max-tokens", "100"]);
    assert_eq!(stop_and_result(&mut a, "go")["stopReason"], "max_tokens");
    let c = completion(&a, 1);
    let auto = &ns(&c)["autonomous"];
    // Cache reads do not count.
    assert_eq!(auto["tokensUsed"], 110);
    assert_eq!(auto["continuationsUsed"], 0);
}

#[test]
fn without_gates_the_default_continuation_runs_until_the_continuation_limit() {
    let dir = TempDir::new("auto-default");
    let script = script_file(
        &dir,
        &[
            json!({"text":"first"}),
            // The spec's words, verbatim (§5.1).
            json!({"steps":[{"expect":["user: No human input is available in autonomous mode. Continue working until the host evaluator, verifier, or configured autonomous limits stop the run. If you were asking the user a question, make a reasonable assumption and verify it. If you believe you are blocked, prove it with host-observable evidence, preserve that evidence, and keep looking for safe progress while budget remains. Do not end the session yourself; the verifier/evaluator decides completion when configured gates pass."]},{"text":"second"}]}),
            json!({"text":"never asked"}),
        ],
    );
    let mut a = agent_in(&dir, &script, &["--autonomous-max-continuations", "1"]);
    assert_eq!(
        stop_and_result(&mut a, "go")["stopReason"],
        "max_turn_requests"
    );
    assert_eq!(a.text(), "firstsecond");
    assert_eq!(
        ns(&completion(&a, 1))["quiescence"]["remainingAutonomousContinuations"],
        0
    );
}

#[test]
fn counters_are_session_cumulative_so_a_later_prompt_stops_at_once() {
    // §2.7 case 3: maxTurns 2, gate `true`.
    let dir = TempDir::new("auto-cumulative");
    let script = script_file(&dir, &[json!({"text":"a"}), json!({"text":"b"})]);
    let mut a = agent_in(
        &dir,
        &script,
        &["--autonomous-gate", "true", "--autonomous-max-turns", "2"],
    );
    assert_eq!(stop_and_result(&mut a, "one")["stopReason"], "end_turn");
    assert_eq!(ns(&completion(&a, 1))["autonomous"]["turnsUsed"], 1);
    assert_eq!(
        stop_and_result(&mut a, "two")["stopReason"],
        "max_turn_requests"
    );
}

#[test]
fn without_autonomous_mode_nothing_continues_and_no_autonomous_meta_is_sent() {
    let dir = TempDir::new("auto-off");
    let script = script_file(&dir, &[json!({"text":"hi"})]);
    let mut a = agent_in(&dir, &script, &[]);
    let result = stop_and_result(&mut a, "go");
    assert_eq!(result["stopReason"], "end_turn");
    assert_eq!(
        result["usage"],
        json!({"inputTokens":0,"outputTokens":0,"totalTokens":0})
    );
    let c = completion(&a, 1);
    assert!(ns(&c).get("autonomous").is_none(), "{c}");
    assert_eq!(
        ns(&c)["quiescence"],
        json!({"outstandingSubagents":0,"remainingAutonomousContinuations":0})
    );
}

#[test]
fn cancel_while_a_gate_runs_kills_it_and_answers_cancelled() {
    let dir = TempDir::new("auto-cancel");
    let script = script_file(&dir, &[json!({"text":"done?"})]);
    let mut a = agent_in(
        &dir,
        &script,
        &["--autonomous-gate", "echo $$ > gate.pid; exec sleep 60"],
    );
    let id = a.prompt("go");
    let pid = wait_for_file(&dir.path().join("gate.pid"));
    a.cancel();
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    assert_dies(&pid);
    // The session still works.
    a.drain_for(std::time::Duration::from_millis(50));
}

#[test]
fn retries_run_out_and_the_autonomous_state_stays_observable() {
    // §2.8 case 2: maxContinuations 1, a gate that always exits 1, maxRetries 1.
    let dir = TempDir::new("auto-retries");
    let script = script_file(&dir, &[json!({"text":"a"}), json!({"text":"b"})]);
    let mut a = agent_in(
        &dir,
        &script,
        &[
            "--autonomous-max-continuations",
            "1",
            "--autonomous-gate",
            "exit 1",
            "--autonomous-gate-retries",
            "1",
        ],
    );
    let stop = stop_and_result(&mut a, "go")["stopReason"].clone();
    assert_eq!(stop, "max_turn_requests");
    let autos: Vec<Value> = a
        .updates()
        .iter()
        .filter_map(|u| ns(u).get("autonomous").cloned())
        .collect();
    let last = autos.last().expect("autonomous meta");
    assert_eq!(last["enabled"], true);
    // The second failure exhausted the retries (attempt 2 of 1).
    assert_eq!(last["gateAttempt"], 2);
    assert_eq!(a.text(), "ab");
}
