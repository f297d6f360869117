//! The kernel's `rlm_heartbeat` API end to end (behaviour spec §5.5, §4.2): the real binary, a
//! real Python kernel, scripted model replies. A cell creates, lists, pauses and deletes
//! schedules; a firing runs an unsolicited turn that streams to the client and is kept in the
//! session file as a `heartbeat_prompt` custom message; every change (a one-shot's completion
//! too, but not a plain interval tick) sends `heartbeatsChanged`; `steer` joins the running turn
//! while `follow_up` waits for it; the jobs are stored with the session and come back on
//! `--continue`.
//!
//! `PRIME_AGENT_SCHEDULE_TIME_SCALE` runs the schedule clock faster, so `every 10s` fires
//! without waiting ten seconds; no test asserts a duration, each waits (bounded) for an event.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::sessions;
use crate::support::*;

/// An agent with its sessions and agent dir in `dir`, on `script` (a file in `dir`).
fn agent(dir: &TempDir, script: &str, extra: &[&str], env: &[(&str, &str)]) -> Agent {
    sessions::in_dir(dir, script, extra, env)
}

/// A script file named `name` in `dir`, one reply per line.
fn script(dir: &TempDir, name: &str, replies: &[Value]) -> String {
    let text: String = replies.iter().map(|l| format!("{l}\n")).collect();
    dir.write(name, &text).display().to_string()
}

fn cell(code: &str) -> Value {
    json!({"tool_call": {"name": "ipython", "arguments": {"code": code}}})
}

/// The `heartbeatsChanged` updates so far (each checked to be session-scoped, turn 0).
fn changes(a: &Agent) -> usize {
    a.updates()
        .iter()
        .filter(|u| ns(u)["heartbeatsChanged"] == true)
        .inspect(|u| assert_eq!(ns(u)["promptTurnId"], 0, "{u}"))
        .count()
}

/// Where in `a.seen` the first frame matching `pred` is.
fn position(a: &Agent, what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    a.seen
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no {what} in {:#?}", a.seen))
}

fn chunk_with(frame: &Value, text: &str) -> bool {
    frame["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        && frame["params"]["update"]["content"]["text"] == text
}

fn jobs_file(dir: &TempDir, sid: &str) -> PathBuf {
    sessions::artifacts(dir, sid).join("scheduled-jobs.json")
}

fn session_lines(dir: &TempDir, sid: &str) -> Vec<Value> {
    sessions::lines_of(&sessions::session_file(dir, sid))
}

/// The session file's `custom_message` entries, in order.
fn custom_messages(dir: &TempDir, sid: &str) -> Vec<Value> {
    session_lines(dir, sid)
        .into_iter()
        .filter(|l| l["type"] == "custom_message")
        .collect()
}

#[test]
fn an_every_10s_heartbeat_from_a_cell_fires_an_unsolicited_turn_then_is_paused_and_deleted() {
    let dir = TempDir::new("heartbeats-every");
    let create = "j = await rlm_heartbeat.create('TICK' + ' FROM THE KERNEL', interval='every 10s', label='ci')\n\
                  print(j['source'], j['status'], j['schedule'], j['deliveryMode'], j['label'], j['runCount'])";
    // The firing's turn pauses the job (so no second tick joins it), then deletes it.
    let manage = "jobs = await rlm_heartbeat.list()\n\
                  j = jobs[0]\n\
                  print(len(jobs), j['runCount'] >= 1, j['status'], 'lastRunAt' in j)\n\
                  p = await rlm_heartbeat.update(j['id'], status='pause')\n\
                  print(p['status'], len(await rlm_heartbeat.list()))\n\
                  d = await rlm_heartbeat.delete(j['id'])\n\
                  print(d['status'], len(await rlm_heartbeat.list()), len(await rlm_heartbeat.list(include_inactive=True)))";
    let s = script(
        &dir,
        "every.jsonl",
        &[
            json!({"steps": [cell(create)]}),
            json!({"steps": [
                {"expect_history": ["error=false: rlm_heartbeat active {'expression': 'every 10s', 'intervalMs': 10000, 'kind': 'interval'} steer ci 0"]},
                {"text": "created"}
            ]}),
            json!({"steps": [{"expect_history": ["user: TICK FROM THE KERNEL"]}, cell(manage)]}),
            json!({"steps": [
                {"expect_history": ["error=false: 1 True active True\npaused 1\ncancelled 0 1"]},
                {"text": "tick handled"}
            ]}),
        ],
    );
    // 10 s of schedule time in 2 s of real time.
    let mut a = agent(&dir, &s, &[], &[("PRIME_AGENT_SCHEDULE_TIME_SCALE", "5")]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("set up a heartbeat"), "end_turn");
    assert_eq!(changes(&a), 1, "create");
    // Nobody prompts the firing's turn: it streams at promptTurnId 0.
    let tick = a.wait_for("the heartbeat's turn", |f| chunk_with(f, "tick handled"));
    assert_eq!(ns(&tick["params"]["update"])["promptTurnId"], 0);
    let calls: Vec<Value> = a
        .updates_of("tool_call_update")
        .into_iter()
        .filter(|u| u["status"] == "completed")
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(ns(&calls[1])["promptTurnId"], 0);
    assert_eq!(changes(&a), 3, "create, pause, delete");
    // The deleted job is stored as cancelled, with the session's fields.
    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(jobs_file(&dir, &sid)).unwrap()).unwrap();
    let job = &stored["jobs"][0];
    assert_eq!(job["status"], "cancelled");
    assert_eq!(job["source"], "rlm_heartbeat");
    assert_eq!(
        (&job["sessionId"], &job["activeSessionId"]),
        (&json!(sid), &json!(sid))
    );
    let session_file = dir.path().join("sessions").join(format!("{sid}.jsonl"));
    assert_eq!(job["sessionFile"], session_file.display().to_string());
    assert_eq!(job["cwd"], dir.path().display().to_string());
    assert!(job["runCount"].as_u64().unwrap() >= 1, "{job}");
}

#[test]
fn bad_arguments_and_the_users_heartbeat_get_clear_errors() {
    let dir = TempDir::new("heartbeats-errors");
    let code = "async def err(coro):\n    try:\n        await coro\n        print('no error')\n    except Exception as e:\n        print(type(e).__name__ + ': ' + str(e))\n\
                await err(rlm_heartbeat.create('x', interval='every 9s'))\n\
                await err(rlm_heartbeat.create('x', interval='in forever'))\n\
                await err(rlm_heartbeat.create(''))\n\
                await err(rlm_heartbeat.create('x', delivery_mode='later'))\n\
                await err(rlm_heartbeat.update('hb-nope', status='pause'))\n\
                await err(rlm_heartbeat.update('hb-nope', status='stop'))\n\
                await err(rlm_heartbeat.update('hb-nope'))\n\
                await err(rlm_heartbeat.delete('hb-nope'))\n\
                await err(rlm.host_request('rlm_heartbeat.create', {'instruction': 'x', 'interval': 'every 9s'}))\n\
                await err(rlm.host_request('rlm_heartbeat.run', {}))\n\
                mine = (await rlm_heartbeat.list())[0]\n\
                print(mine['source'], mine['prompt'])\n\
                await err(rlm_heartbeat.delete(mine['id']))";
    let want = [
        "RuntimeError: Recurring interval must be at least 10 seconds",
        "RuntimeError: Invalid duration: forever",
        "ValueError: rlm_heartbeat.create instruction must be a non-empty string",
        "ValueError: rlm_heartbeat.create delivery_mode must be \"steer\" or \"follow_up\"",
        "RuntimeError: No heartbeat with id \"hb-nope\"",
        "ValueError: rlm_heartbeat.update status must be \"pause\" or \"resume\"",
        "ValueError: rlm_heartbeat.update needs at least one of instruction, interval, label, status, delivery_mode",
        "RuntimeError: No heartbeat with id \"hb-nope\"",
        "RuntimeError: Recurring interval must be at least 10 seconds",
        "RuntimeError: host request type \"rlm_heartbeat.run\" is not available in this session",
        "heartbeat look at the logs",
        "RuntimeError: Heartbeat \"",
        "was set by the user with /heartbeat; only they can change it",
    ];
    let s = script(
        &dir,
        "errors.jsonl",
        &[
            json!({"steps": [cell(code)]}),
            json!({"steps": [{"expect": want}, {"text": "errors seen"}]}),
        ],
    );
    let mut a = agent(&dir, &s, &[], &[]);
    a.handshake();
    assert_eq!(
        a.prompt_stop("/heartbeat every 1h look at the logs"),
        "end_turn"
    );
    assert_eq!(changes(&a), 1);
    let id = a.prompt("try the API");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    assert!(a.text().ends_with("errors seen"), "{}", a.text());
    assert_eq!(changes(&a), 1, "nothing the cell tried changed a schedule");
}

#[test]
fn a_subagent_has_no_heartbeats() {
    let dir = TempDir::new("heartbeats-child");
    // The parent waits (bounded) for the kid to finish, so the kid's message is in its inbox
    // before its next model call.
    let spawn = "import asyncio\nh = await rlm('try a heartbeat', name='kid')\n\
                 for _ in range(400):\n    if all(c.status != 'running' for c in await rlm.list_subagents()):\n        break\n    await asyncio.sleep(0.05)\n\
                 print(h.name, [c.status for c in await rlm.list_subagents()])";
    let kid = "try:\n    await rlm_heartbeat.list()\nexcept RuntimeError as e:\n    await agent_message.send(str(e), receiver_role='parent')";
    let s = script(
        &dir,
        "child.jsonl",
        &[
            json!({"steps": [cell(spawn)]}),
            json!({"steps": [
                {"expect_history": ["error=false: kid ['completed']", "host request type \"rlm_heartbeat.list\" is not available in this session"]},
                {"text": "the kid has none"}
            ]}),
            json!({"agent": "kid", "steps": [cell(kid)]}),
            json!({"agent": "kid", "text": "reported"}),
        ],
    );
    let mut a = agent(&dir, &s, &[], &[("RLM_MAX_DEPTH", "1")]);
    a.handshake();
    let id = a.prompt("spawn");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    assert!(a.text().ends_with("the kid has none"), "{}", a.text());
    assert_eq!(changes(&a), 0);
}

#[test]
fn steer_joins_the_running_turn_and_follow_up_runs_after_it() {
    let dir = TempDir::new("heartbeats-delivery");
    // Both fire while the cell waits for them (bounded); the prompts are built at run time so
    // the cell's own source never contains them.
    let code = "import asyncio\n\
                await rlm_heartbeat.create('STEER' + ' PROMPT', interval='in 1s')\n\
                await rlm_heartbeat.create('FOLLOW' + ' PROMPT', interval='in 1s', delivery_mode='follow_up')\n\
                for _ in range(400):\n    fired = [j for j in await rlm_heartbeat.list(include_inactive=True) if j['runCount'] >= 1]\n    if len(fired) == 2:\n        break\n    await asyncio.sleep(0.05)\n\
                print('fired', len(fired), sorted(j['status'] for j in fired))";
    let s = script(
        &dir,
        "delivery.jsonl",
        &[
            json!({"steps": [cell(code)]}),
            // Steer: the prompt reached this turn's next model call; follow-up: not yet.
            json!({"steps": [
                {"expect_history": ["fired 2 ['completed', 'completed']", "user: STEER PROMPT"]},
                {"expect_none": ["FOLLOW PROMPT"]},
                {"text": "turn one done"}
            ]}),
            json!({"steps": [{"expect": ["FOLLOW PROMPT"]}, {"text": "follow-up answered"}]}),
        ],
    );
    let mut a = agent(&dir, &s, &[], &[]);
    let sid = a.handshake();
    let id = a.prompt("go");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    a.wait_for("the follow-up turn", |f| {
        chunk_with(f, "follow-up answered")
    });
    let answered = position(&a, "the prompt's response", |f| f.get("id") == Some(&id));
    let one = position(&a, "turn one's text", |f| chunk_with(f, "turn one done"));
    let follow = position(&a, "the follow-up's text", |f| {
        chunk_with(f, "follow-up answered")
    });
    assert!(
        one < answered && answered < follow,
        "{one} {answered} {follow}"
    );
    assert_eq!(ns(&a.seen[one]["params"]["update"])["promptTurnId"], 1);
    assert_eq!(ns(&a.seen[follow]["params"]["update"])["promptTurnId"], 0);
    // Two creates, then the two completions: in one timer tick or in two.
    let n = changes(&a);
    assert!((3..=4).contains(&n), "{n}");
    // Both deliveries are kept as the firing's custom message, not as a user's prompt. The
    // follow-up's is written when its turn syncs, which can be after its text streamed.
    let deadline = std::time::Instant::now() + TIMEOUT;
    while custom_messages(&dir, &sid).len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kept: Vec<String> = custom_messages(&dir, &sid)
        .iter()
        .map(|m| {
            format!(
                "{} {} {}",
                m["customType"], m["content"], m["details"]["status"]
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            "\"heartbeat_prompt\" \"STEER PROMPT\" \"completed\"",
            "\"heartbeat_prompt\" \"FOLLOW PROMPT\" \"completed\""
        ]
    );
}

#[test]
fn jobs_survive_a_resume_with_their_status_count_and_delivery() {
    let dir = TempDir::new("heartbeats-resume");
    let plan = "import asyncio\n\
                await rlm_heartbeat.create('HOURLY', interval='every 1h', label='hourly')\n\
                b = await rlm_heartbeat.create('PAUSED', interval='every 2h', delivery_mode='follow_up')\n\
                await rlm_heartbeat.update(b['id'], status='pause')\n\
                await rlm_heartbeat.create('LATER', interval='in 1m', delivery_mode='follow_up')\n\
                await rlm_heartbeat.create('ONCE', interval='in 1s')\n\
                for _ in range(400):\n    if any(j['runCount'] for j in await rlm_heartbeat.list(include_inactive=True)):\n        break\n    await asyncio.sleep(0.05)\n\
                print('planned')";
    let first = script(
        &dir,
        "first.jsonl",
        &[
            json!({"steps": [cell(plan)]}),
            json!({"steps": [{"expect_history": ["error=false: planned", "user: ONCE"]}, {"text": "planned"}]}),
        ],
    );
    let mut a = agent(&dir, &first, &[], &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("plan"), "end_turn");
    assert_eq!(changes(&a), 6, "four creates, a pause, ONCE completed");
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(jobs_file(&dir, &sid)).unwrap()).unwrap();
    let summary: Vec<String> = stored["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            format!(
                "{} {} {} {}",
                j["prompt"].as_str().unwrap(),
                j["status"].as_str().unwrap(),
                j["runCount"],
                j["deliveryMode"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "HOURLY active 0 steer",
            "PAUSED paused 0 follow_up",
            "LATER active 0 follow_up",
            "ONCE completed 1 steer"
        ]
    );

    // Continued with a clock 60 times faster: the minute LATER waits for passes in about a
    // second, and it fires in the new process as its own unsolicited turn.
    let list = "for j in sorted(await rlm_heartbeat.list(include_inactive=True), key=lambda j: j['prompt']):\n    print(j['prompt'], j['status'], j['runCount'], j['deliveryMode'], j.get('label'))";
    let second = script(
        &dir,
        "second.jsonl",
        &[
            json!({"steps": [{"expect": ["LATER"]}, cell(list)]}),
            json!({"steps": [
                {"expect": ["HOURLY active 0 steer hourly\nLATER completed 1 follow_up None\nONCE completed 1 steer None\nPAUSED paused 0 follow_up None"]},
                {"text": "resumed fine"}
            ]}),
        ],
    );
    let mut b = agent(
        &dir,
        &second,
        &["-c"],
        &[("PRIME_AGENT_SCHEDULE_TIME_SCALE", "60")],
    );
    assert_eq!(b.handshake(), sid);
    let done = b.wait_for("the resumed job's turn", |f| chunk_with(f, "resumed fine"));
    assert_eq!(ns(&done["params"]["update"])["promptTurnId"], 0);
    assert_eq!(changes(&b), 1, "LATER completed");
    assert_eq!(b.prompt_stop("/heartbeat status"), "end_turn");
    let status = b.text();
    assert!(
        status.contains("Agent heartbeat") && status.contains("(every 2h), paused"),
        "{status}"
    );
}

#[test]
fn a_firing_is_kept_as_a_heartbeat_prompt_that_a_resume_gives_back_and_a_replay_does_not_show() {
    let dir = TempDir::new("heartbeats-custom");
    // The prompt is built at run time, so only the firing can put it in the conversation.
    let code = "import asyncio\n\
                j = await rlm_heartbeat.create('ONE' + ' SHOT', interval='in 1s')\n\
                for _ in range(400):\n    if (await rlm_heartbeat.list(include_inactive=True))[0]['runCount']:\n        break\n    await asyncio.sleep(0.05)\n\
                print('fired')";
    let first = script(
        &dir,
        "first.jsonl",
        &[
            json!({"steps": [cell(code)]}),
            json!({"steps": [{"expect_history": ["error=false: fired", "user: ONE SHOT"]}, {"text": "saw the beat"}]}),
        ],
    );
    let mut a = agent(&dir, &first, &[], &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("beat once"), "end_turn");
    // The create, then the firing that completed the one-shot.
    assert_eq!(changes(&a), 2);
    // Live, the client is shown no message for the prompt itself.
    let shown = |updates: &[Value]| {
        updates
            .iter()
            .filter(|u| u.to_string().contains("ONE SHOT"))
            .count()
    };
    assert_eq!(shown(&a.updates()), 0, "{:#?}", a.updates());
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(jobs_file(&dir, &sid)).unwrap()).unwrap();
    let job = &stored["jobs"][0];
    assert_eq!(job["status"], "completed", "{stored}");
    let custom = custom_messages(&dir, &sid);
    assert_eq!(custom.len(), 1, "{custom:?}");
    let m = &custom[0];
    assert_eq!(
        (&m["customType"], &m["content"], &m["display"]),
        (&json!("heartbeat_prompt"), &json!("ONE SHOT"), &json!(true))
    );
    assert_eq!(
        m["details"],
        json!({
            "jobId": job["id"], "status": "completed", "runCount": 1,
            "schedule": {"kind": "once", "expression": "in 1s"},
            "nextRunAt": null, "lastRunAt": job["lastRunAt"],
        })
    );
    assert!(job["lastRunAt"].is_string(), "{job}");
    // Only as that entry: no user message holds the prompt too.
    let holding: Vec<Value> = session_lines(&dir, &sid)
        .into_iter()
        .filter(|l| l.to_string().contains("ONE SHOT"))
        .collect();
    assert_eq!(holding.len(), 1, "{holding:?}");

    // `-c`: the model gets the firing back in its history, where it was.
    let second = script(
        &dir,
        "second.jsonl",
        &[json!({"steps": [
            {"expect_history": ["user: ONE SHOT", "saw the beat", "user: and now"]},
            {"text": "still remembered"}
        ]})],
    );
    let mut b = agent(&dir, &second, &["-c"], &[]);
    assert_eq!(b.handshake(), sid);
    assert_eq!(b.prompt_stop("and now"), "end_turn");
    assert!(
        b.text().ends_with("still remembered"),
        "{}",
        b.stderr_text()
    );
    drop(b);

    // `session/load` replays the conversation as it was shown live: the answer, not the
    // firing's prompt.
    let third = script(&dir, "third.jsonl", &[]);
    let mut c = agent(&dir, &third, &[], &[]);
    c.call("initialize", json!({"protocolVersion": 1}));
    let cwd = dir.path().display().to_string();
    let r = c.call(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    assert!(r["result"].is_object(), "{r}");
    let replay = c.updates();
    assert!(
        replay
            .iter()
            .any(|u| chunk_with(&json!({"params": {"update": u}}), "saw the beat")),
        "{replay:#?}"
    );
    assert_eq!(shown(&replay), 0, "{replay:#?}");
}

/// Defect: ticks that fell due while the agent was busy piled up (one long tool call, a job
/// every 10 s: 29 identical prompts at the next model call). Now a job with a firing still
/// waiting skips its ticks (`lastSkippedAt`), so the model call after the long cell sees one.
#[test]
fn a_heartbeat_due_many_times_during_one_long_tool_call_puts_one_prompt_in() {
    let dir = TempDir::new("heartbeats-pileup");
    // Schedule time runs 100 times faster: `every 10s` is due every 100 ms, so the cell's
    // 3.2 s of sleep spans about 30 ticks.
    let long = "import time\n\
                await rlm_heartbeat.create('BEAT' + ' NOW', interval='every 10s')\n\
                time.sleep(3.2)\n\
                print('slept')";
    let stop = "for j in await rlm_heartbeat.list():\n    \
                print(j['runCount'], 'lastSkippedAt' in j)\n    \
                await rlm_heartbeat.delete(j['id'])";
    let s = script(
        &dir,
        "pileup.jsonl",
        &[
            json!({"steps": [cell(long)]}),
            json!({"steps": [{"expect_history": ["error=false: slept", "user: BEAT NOW"]}, cell(stop)]}),
            json!({"steps": [{"text": "done"}]}),
        ],
    );
    let mut a = agent(&dir, &s, &[], &[("PRIME_AGENT_SCHEDULE_TIME_SCALE", "100")]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("go"), "end_turn", "{}", a.stderr_text());
    // The prompts between the long cell's result and the next model call's answer.
    let lines = session_lines(&dir, &sid);
    let role = |l: &Value| l["message"]["role"].as_str().unwrap_or_default().to_owned();
    let result = lines
        .iter()
        .position(|l| role(l) == "toolResult")
        .expect("the long cell's result");
    let next = result
        + lines[result..]
            .iter()
            .position(|l| role(l) == "assistant")
            .expect("the next answer");
    let beats = lines[result..next]
        .iter()
        .filter(|l| l["type"] == "custom_message" && l["content"] == "BEAT NOW")
        .count();
    assert_eq!(beats, 1, "{:#?}", &lines[result..next]);
    // The stop cell saw the job skip ticks (one firing, the rest recorded as skipped).
    let stopped = lines
        .iter()
        .filter(|l| role(l) == "toolResult")
        .nth(1)
        .expect("the stop cell's result");
    let text = stopped["message"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("True"), "no lastSkippedAt: {text}");
    let all = custom_messages(&dir, &sid).len();
    reliability_line(
        "heartbeat_due_30_times_during_one_tool_call",
        1,
        30,
        1,
        (all as u64).saturating_sub(2),
    );
}
