//! Slash commands typed as prompts, on the real binary: advertised right after `session/new`,
//! answered as an `agent_message_chunk` with `end_turn` and no model call (the scripts have
//! no reply for one, so a model call would fail the prompt); unknown `/words` reach the model.

use serde_json::{json, Value};

use crate::support::sessions;
use crate::support::*;

/// Sends `text`, expects `end_turn`, and returns the text the prompt streamed.
fn command(a: &mut Agent, text: &str) -> String {
    let before = a.text().len();
    assert_eq!(a.prompt_stop(text), "end_turn", "{text}");
    a.text()[before..].to_owned()
}

fn goal_metas(a: &Agent) -> Vec<Value> {
    a.updates()
        .iter()
        .filter_map(|u| ns(u).get("goal").cloned())
        .collect()
}

#[test]
fn commands_are_advertised_right_after_session_new() {
    let mut a = Agent::scripted("no_replies.jsonl", &[]);
    a.handshake();
    let first = a.wait_for("an update", |f| f["method"] == "session/update");
    let u = &first["params"]["update"];
    assert_eq!(u["sessionUpdate"], "available_commands_update");
    assert_eq!(ns(u)["promptTurnId"], 0);
    let names: Vec<&str> = u["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "autonomous",
            "goal",
            "model",
            "compact",
            "rename",
            "rlm-max-depth",
            "refine",
            "heartbeat",
            "help"
        ]
    );
}

#[test]
fn autonomous_commands_switch_the_mode_without_a_model_call() {
    let mut a = Agent::scripted("no_replies.jsonl", &[]);
    a.handshake();
    assert_eq!(
        command(&mut a, "/autonomous status"),
        "Autonomous mode: off. Continuations: 0/3. Turns: 0/12. Tokens: 0/80000."
    );
    assert_eq!(
        command(&mut a, "/autonomous on"),
        "Autonomous mode: on. Continuations: 0/3. Turns: 0/12. Tokens: 0/80000."
    );
    // Now on: the completion update carries the autonomous state.
    let completion = a
        .updates()
        .into_iter()
        .rfind(|u| ns(u).get("quiescence").is_some() && ns(u)["phase"] == "event")
        .unwrap();
    assert_eq!(ns(&completion)["autonomous"]["enabled"], true);
    assert!(command(&mut a, "/autonomous off").starts_with("Autonomous mode: off."));
    assert_eq!(
        command(&mut a, "/autonomous sideways"),
        "Usage: /autonomous on|off|status"
    );
}

#[test]
fn help_model_and_compact_answer_without_a_model_call() {
    let mut a = Agent::scripted("no_replies.jsonl", &[]);
    a.handshake();
    let help = command(&mut a, "/help");
    assert!(
        help.starts_with("Commands:\n/autonomous on | off | status: "),
        "{help}"
    );
    assert_eq!(
        command(&mut a, "/model"),
        "Model: scripted/no_replies.jsonl"
    );
    let switch = command(&mut a, "/model nowhere/nothing");
    assert!(switch.contains("nowhere/nothing"), "{switch}");
    // Compaction (the compaction engine's manual path) reports itself; here there is
    // nothing to compact yet, and no model call.
    assert_eq!(command(&mut a, "/compact keep the plan"), "");
}

#[test]
fn compact_after_a_failed_turn_ends_the_turn() {
    // §2.8 case 21: an earlier failure does not fail a later prompt that calls no model.
    let mut a = Agent::scripted("no_replies.jsonl", &[]);
    a.handshake();
    let id = a.prompt("needs the model");
    assert!(a.response(&id).get("error").is_some());
    assert_eq!(a.prompt_stop("/compact"), "end_turn");
}

#[test]
fn unknown_slash_words_go_to_the_model_unchanged() {
    let dir = TempDir::new("cmd-unknown");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"expect":["user: /deploy now"]},{"text":"deployed"}]})],
    );
    let mut a = agent_in(&dir, &script, &[]);
    assert_eq!(a.prompt_stop("/deploy now"), "end_turn");
    assert_eq!(a.text(), "deployed");
}

#[test]
fn goal_commands_set_show_and_clear_the_goal_with_meta_on_each_change() {
    let mut a = Agent::scripted("no_replies.jsonl", &[]);
    a.handshake();
    let set = command(&mut a, "/goal --token-budget 1000 ship ACP");
    assert!(
        set.starts_with("Goal: ship ACP. Status: active. Tokens: 0/1000."),
        "{set}"
    );
    assert_eq!(
        goal_metas(&a).last(),
        Some(&json!({"status":"active","objective":"ship ACP","tokenBudget":1000,"tokensUsed":0}))
    );
    assert!(command(&mut a, "/goal pause").contains("Status: paused."));
    assert_eq!(goal_metas(&a).last().unwrap()["status"], "paused");
    assert!(command(&mut a, "/goal status").starts_with("Goal: ship ACP. Status: paused."));
    assert_eq!(command(&mut a, "/goal clear"), "Goal cleared.");
    assert_eq!(goal_metas(&a).last(), Some(&json!({"status":"idle"})));
}

#[test]
fn a_command_with_an_image_goes_to_the_model_so_the_image_is_not_lost() {
    let dir = TempDir::new("cmd-image");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"expect":["user: /help [1 image(s)] aGVsbG8="]},{"text":"seen"}]})],
    );
    let mut a = agent_in(&dir, &script, &[]);
    let id = a.prompt_blocks(json!([
        {"type":"text","text":"/help"},
        {"type":"image","mimeType":"image/png","data":"aGVsbG8="}
    ]));
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(a.text(), "seen");
}

/// `/rlm-max-depth` (behaviour spec §4.3): shows the depth and where it comes from (settings
/// `rlmMaxDepth` over the environment's `RLM_MAX_DEPTH`), sets it for the session at once (the
/// next `rlm(...)` is refused at it, a kernel started after it has it in `RLM_MAX_DEPTH`), and a
/// `-c` keeps it, over settings.
#[test]
fn rlm_max_depth_shows_sets_and_survives_a_continue() {
    let dir = TempDir::new("cmd-depth");
    let cell = |id: &str, code: &str| json!({"tool_call": {"id": id, "name": "ipython", "arguments": {"code": code}}});
    let spawn = "try:\n    await rlm('Count to three')\nexcept RuntimeError as e:\n    print(e)\nimport os\nprint(os.environ['RLM_MAX_DEPTH'])";
    let first = dir.write(
        "first.jsonl",
        &[
            json!({"steps": [cell("c1", spawn)]}),
            json!({"steps": [
                {"expect": ["tool_result ipython error=false: RLM recursion depth limit reached (RLM_DEPTH=0, RLM_MAX_DEPTH=0)\n0"]},
                {"text": "Refused."}
            ]}),
        ]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>(),
    );
    let env = [("RLM_MAX_DEPTH", "2")];
    let mut a = sessions::in_dir(
        &dir,
        &first.display().to_string(),
        &["--tools", "ipython"],
        &env,
    );
    let sid = a.handshake();
    assert_eq!(
        command(&mut a, "/rlm-max-depth"),
        "RLM max depth: 2 (from the environment's RLM_MAX_DEPTH)."
    );
    assert_eq!(
        command(&mut a, "/rlm-max-depth -1"),
        "Usage: /rlm-max-depth [n] (n: a non-negative integer; 0 lets no agent start subagents)"
    );
    assert_eq!(
        command(&mut a, "/rlm-max-depth 0"),
        "RLM max depth: 0 for this session (was 2); subagents started from now on are held to it."
    );
    assert_eq!(
        command(&mut a, "/rlm-max-depth"),
        "RLM max depth: 0 (from this session's /rlm-max-depth)."
    );
    assert_eq!(a.prompt_stop("spawn one"), "end_turn");
    drop(a);
    let states: Vec<Value> = sessions::lines_of(&sessions::session_file(&dir, &sid))
        .into_iter()
        .filter(|l| l["customType"] == "rlm_max_depth_state")
        .map(|l| l["data"].clone())
        .collect();
    assert_eq!(states, [json!({"maxDepth": 0})]);

    // Settings win over the environment for a new session; the session's own depth wins over
    // both when it is continued.
    std::fs::write(
        dir.path().join("agent/settings.json"),
        json!({"rlmMaxDepth": 3}).to_string(),
    )
    .unwrap();
    let none = dir.write("none.jsonl", "");
    let none = none.display().to_string();
    let mut b = sessions::in_dir(&dir, &none, &["--no-session"], &env);
    b.handshake();
    assert_eq!(
        command(&mut b, "/rlm-max-depth"),
        "RLM max depth: 3 (from settings rlmMaxDepth)."
    );
    drop(b);
    let mut c = sessions::in_dir(&dir, &none, &["-c"], &env);
    assert_eq!(c.handshake(), sid);
    assert_eq!(
        command(&mut c, "/rlm-max-depth"),
        "RLM max depth: 0 (from this session's /rlm-max-depth)."
    );
}
