//! Subagents over ACP: `rlm(...)` children with their own kernels, agent messages, lifecycle
//! metadata, unsolicited turns and terminal quiescence (behaviour spec §1.5.3, §1.15, §4.3).

use serde_json::Value;

use crate::support::*;

fn agent(script: &str) -> (TempDir, Agent) {
    agent_env(script, &[])
}

/// `agent` with extra environment variables.
fn agent_env(script: &str, env: &[(&str, &str)]) -> (TempDir, Agent) {
    let dir = TempDir::new("subagents");
    let path = fixture(&format!("scripts/subagents/{script}"));
    let a = Agent::spawn(Spawn {
        args: vec![
            "--provider".into(),
            "scripted".into(),
            "--script".into(),
            path.display().to_string(),
        ],
        cwd: Some(dir.path().to_path_buf()),
        env: [("RLM_MAX_DEPTH", "1")]
            .iter()
            .chain(env)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    });
    (dir, a)
}

fn subagent_statuses(a: &Agent, name: &str) -> Vec<(String, u64)> {
    a.updates()
        .iter()
        .filter_map(|u| {
            let sub = ns(u)["subagents"].get(0)?;
            (sub["sessionName"] == name).then(|| {
                (
                    sub["status"].as_str().unwrap().to_owned(),
                    ns(u)["promptTurnId"].as_u64().unwrap(),
                )
            })
        })
        .collect()
}

fn phase_index(a: &Agent, phase: &str, turn: u64) -> Option<usize> {
    a.updates()
        .iter()
        .position(|u| ns(u)["phase"] == phase && ns(u)["promptTurnId"] == turn)
}

#[test]
fn a_child_replies_by_agent_message_and_the_parent_answers_unprompted() {
    // The order below holds once the child has replied; a loaded machine (python start-up of
    // two kernels) may need longer than the default 3 s quiescence wait for that.
    let (_dir, mut a) = agent_env(
        "reply.jsonl",
        &[("PRIME_AGENT_QUIESCENCE_WAIT_MS", "60000")],
    );
    a.handshake();
    let first = a.prompt("delegate the review");
    let r = a.response(&first);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // The next prompt waits for turn 1 to settle: the child finishes, its reply starts an
    // unsolicited turn, then turn 1's terminal update is published.
    let second = a.prompt("and now?");
    let r = a.response(&second);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );

    let statuses = subagent_statuses(&a, "reviewer");
    let names: Vec<&str> = statuses.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, ["queued", "running", "done"], "{statuses:?}");
    assert!(
        statuses.iter().all(|(_, turn)| *turn == 1),
        "attributed to the spawning turn: {statuses:?}"
    );

    // The reply reached the main agent and its answer streamed at promptTurnId 0.
    let unsolicited: Vec<Value> = a
        .updates()
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk" && ns(u)["promptTurnId"] == 0)
        .collect();
    assert_eq!(unsolicited.len(), 1, "{unsolicited:?}");
    assert_eq!(
        unsolicited[0]["content"]["text"],
        "The reviewer says it looks good."
    );

    // Exactly one terminal per prompt turn, turn 1's after the child settled and before turn 2.
    let t1 = phase_index(&a, "terminalQuiescence", 1).expect("terminal for turn 1");
    let done = a
        .updates()
        .iter()
        .position(|u| ns(u)["subagents"][0]["status"] == "done")
        .unwrap();
    let t2_start = a
        .updates()
        .iter()
        .position(|u| ns(u)["promptTurnId"] == 2)
        .unwrap();
    assert!(
        done < t1 && t1 < t2_start,
        "done {done}, terminal {t1}, turn 2 starts {t2_start}"
    );
    // Turn 2, settled when answered, has its terminal too.
    a.terminal(2);
    let terminals = a
        .updates()
        .iter()
        .filter(|u| ns(u)["phase"] == "terminalQuiescence")
        .count();
    assert_eq!(terminals, 2);
    let boundary = a
        .updates()
        .into_iter()
        .find(|u| ns(u)["phase"] == "responseBoundary")
        .unwrap();
    assert_eq!(boundary["_meta"][NS]["terminalQuiescenceExpected"], true);
    let completion = a
        .updates()
        .into_iter()
        .find(|u| {
            ns(u)["promptTurnId"] == 1
                && ns(u)["phase"] == "event"
                && ns(u).get("quiescence").is_some()
        })
        .unwrap();
    assert_eq!(
        ns(&completion)["quiescence"]["outstandingSubagents"],
        1,
        "the reviewer was still running"
    );
    let seqs: Vec<u64> = a
        .updates()
        .iter()
        .map(|u| ns(u)["eventSequence"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(a.finish().success());
}

#[test]
fn session_cancel_cancels_every_child_and_suppresses_the_terminal() {
    let (_dir, mut a) = agent("cancel.jsonl");
    a.handshake();
    assert_eq!(a.prompt_stop("start a worker"), "end_turn");
    if !subagent_statuses(&a, "worker")
        .iter()
        .any(|(s, _)| s == "running")
    {
        a.wait_for("the worker running", |f| {
            ns(&f["params"]["update"])["subagents"][0]["status"] == "running"
        });
    }
    a.cancel();
    a.wait_for("the worker cancelled", |f| {
        ns(&f["params"]["update"])["subagents"][0]["status"] == "cancelled"
    });
    assert_eq!(a.prompt_stop("next"), "end_turn");
    a.terminal(2);
    assert_eq!(
        phase_index(&a, "terminalQuiescence", 1),
        None,
        "no terminal after cancellation"
    );
    assert!(phase_index(&a, "terminalQuiescence", 2).is_some());
    assert!(a.text().ends_with("after cancel"));
    assert!(a.finish().success());
}

#[test]
fn family_apis_answer_from_the_kernel() {
    let (_dir, mut a) = agent("apis.jsonl");
    a.handshake();
    let id = a.prompt("exercise the APIs");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    assert_eq!(a.text(), "apis ok");
    // The message the main agent's cell sent is visible to the client (§1.12 agentMessage).
    let sent: Vec<Value> = a
        .updates()
        .iter()
        .filter_map(|u| ns(u).get("agentMessage").cloned())
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["target"], "reviewer");
    assert_eq!(sent[0]["deliveryStatus"], "queued");
    let call = a
        .updates()
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(sent[0]["toolCallId"], call["toolCallId"]);
    let statuses = subagent_statuses(&a, "reviewer");
    assert_eq!(
        statuses.last().map(|(s, _)| s.as_str()),
        Some("cancelled"),
        "{statuses:?}"
    );
    assert!(a.finish().success());
}

#[test]
fn the_next_prompt_waits_for_quiescence_but_not_forever() {
    let (_dir, mut a) = agent("slow_child.jsonl");
    a.handshake();
    assert_eq!(a.prompt_stop("start"), "end_turn");
    assert_eq!(a.prompt_stop("next"), "end_turn");
    // Turn 1's terminal was published before turn 2 began, honestly reporting the child
    // still running.
    let t1 = phase_index(&a, "terminalQuiescence", 1).expect("terminal for turn 1");
    let t2 = a
        .updates()
        .iter()
        .position(|u| ns(u)["promptTurnId"] == 2)
        .unwrap();
    assert!(t1 < t2);
    assert_eq!(
        ns(&a.updates()[t1])["quiescence"]["outstandingSubagents"],
        1
    );
    assert!(a.finish().success());
}

#[test]
fn session_close_stops_children_and_sends_nothing_after() {
    let (_dir, mut a) = agent("slow_child.jsonl");
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("start"), "end_turn");
    let r = a.call("session/close", serde_json::json!({"sessionId": sid}));
    assert_eq!(r["result"], serde_json::json!({}));
    let after = a.drain_for(std::time::Duration::from_millis(300));
    assert!(after.is_empty(), "frames after close: {after:?}");
    // The slot is free again.
    let r = a.call(
        "session/new",
        serde_json::json!({"cwd": "/", "mcpServers": []}),
    );
    assert!(r["result"]["sessionId"].is_string(), "{r}");
    assert!(a.finish().success());
}

#[test]
fn a_cancel_with_nothing_running_leaves_finished_children_reachable() {
    let (_dir, mut a) = agent("wake_after_cancel.jsonl");
    a.handshake();
    assert_eq!(a.prompt_stop("spawn"), "end_turn");
    // Nothing runs once turn 1's terminal update is out: the unsolicited turn that read the
    // child's answer has ended (its text alone can arrive before it ends, and a cancel then
    // cancels it, so the next prompt would meet a cancelling session).
    a.terminal(1);
    assert!(a.text().contains("noted"), "{}", a.text());
    a.cancel();
    let id = a.prompt("message the child again");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    if !a.text().contains("got it") {
        a.wait_for("the child's second answer", |f| {
            f["params"]["update"]["content"]["text"] == "got it"
        });
    }
    if subagent_statuses(&a, "c").len() < 5 {
        a.wait_for("the revived child's end", |f| {
            ns(&f["params"]["update"])["subagents"][0]["status"] == "done"
        });
    }
    let statuses: Vec<String> = subagent_statuses(&a, "c")
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(
        statuses,
        ["queued", "running", "done", "running", "done"],
        "{statuses:?}"
    );
    assert!(a.finish().success());
}

/// A script whose main agent spawns the child `name`, waits in the same cell until it is
/// done, then answers; the child answers with `child` usage (issue 33, item 1).
fn attribution_script(dir: &TempDir, name: &str, main: [u64; 2], child: Value) -> String {
    let code = format!(
        "import asyncio\nh = await rlm(\"Count to three\", name=\"{name}\")\nfor _ in range(600):\n    s = [c.status for c in await rlm.list_subagents() if c.session_name == \"{name}\"]\n    if s and s[0] != \"running\":\n        break\n    await asyncio.sleep(0.05)\nprint(\"child\", s)"
    );
    script_file(
        dir,
        &[
            serde_json::json!({"steps":[{"tool_call":{"name":"ipython","arguments":{"code":code}}},{"usage":{"input":main[0],"output":main[1]}}]}),
            serde_json::json!({"agent":name,"steps":[{"text":"one two three"},{"usage":child}]}),
            serde_json::json!({"steps":[{"expect_history":["child ['completed']"]},{"text":"The child counted."},{"usage":{"input":main[0] * 2,"output":main[1] * 2}}]}),
        ],
    )
}

/// Issue 33, item 1: a child's model usage is counted into its parent's prompt `usage`
/// (to the token), shown as `_meta…childUsage`, written as `child_usage_attributed` entries,
/// and the session's children's total survives `-c`.
#[test]
fn a_childs_usage_is_counted_into_the_parents_prompt_before_and_after_a_resume() {
    use crate::support::sessions;
    let dir = TempDir::new("child-usage");
    let env = [("RLM_MAX_DEPTH", "1")];
    let script = attribution_script(
        &dir,
        "counter",
        [100, 10],
        serde_json::json!({"input":1000,"output":50,"cache_read":7}),
    );
    let mut a = sessions::in_dir(&dir, &script, &[], &env);
    let sid = a.handshake();
    let id = a.prompt("delegate the count");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    // Parent 100+200 in, 10+20 out; child 1000 in, 50 out, 7 cache reads.
    assert_eq!(
        r["result"]["usage"],
        serde_json::json!({"inputTokens":1300,"outputTokens":80,"totalTokens":1387,"cachedReadTokens":7}),
        "{r}"
    );
    let child = serde_json::json!({"inputTokens":1000,"outputTokens":50,"totalTokens":1057,"cachedReadTokens":7});
    assert_eq!(
        r["result"]["_meta"][NS]["childUsage"]["prompt"], child,
        "{r}"
    );
    assert_eq!(
        r["result"]["_meta"][NS]["childUsage"]["session"], child,
        "{r}"
    );
    let last_usage = a.updates_of("usage_update").last().cloned().unwrap();
    assert_eq!(
        ns(&last_usage)["childUsage"]["totalTokens"],
        1057,
        "{last_usage}"
    );
    assert!(a.finish().success());
    let entries: Vec<Value> = sessions::lines_of(&sessions::session_file(&dir, &sid))
        .into_iter()
        .filter(|l| l["type"] == "child_usage_attributed")
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["childName"], "counter");
    assert_eq!(
        (
            &entries[0]["usage"]["input"],
            &entries[0]["usage"]["output"]
        ),
        (&serde_json::json!(1000), &serde_json::json!(50))
    );

    // Resumed: a new child counts into the new prompt, and the session's total keeps the first.
    let script = attribution_script(
        &dir,
        "recounter",
        [30, 3],
        serde_json::json!({"input":400,"output":40}),
    );
    let mut b = sessions::in_dir(&dir, &script, &["-c"], &env);
    assert_eq!(b.handshake(), sid);
    let id = b.prompt("once more");
    let r = b.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        b.stderr_text()
    );
    assert_eq!(
        r["result"]["usage"],
        serde_json::json!({"inputTokens":490,"outputTokens":49,"totalTokens":539}),
        "{r}"
    );
    let meta = &r["result"]["_meta"][NS]["childUsage"];
    assert_eq!(
        meta["prompt"],
        serde_json::json!({"inputTokens":400,"outputTokens":40,"totalTokens":440}),
        "{r}"
    );
    assert_eq!(
        meta["session"],
        serde_json::json!({"inputTokens":1400,"outputTokens":90,"totalTokens":1497,"cachedReadTokens":7}),
        "{r}"
    );
    assert!(b.finish().success());
}
