//! Kernels forked from the agent's zygote (`src/kernel/zygote.rs`): each kernel is a fork of one
//! warmed Python per agent process, in its own process group, with its own namespace and cwd,
//! and it dies with the agent. `PRIME_AGENT_KERNEL_ZYGOTE=0` starts kernels on their own.
//! (Interrupt, restart after a kill, snapshots and subagents run through the zygote in
//! `kernel.rs`, `kernel_state.rs` and `subagents.rs`.)

use serde_json::{json, Value};

use crate::support::procs::{alive, assert_dies, pgid_of, wait_for_file};
use crate::support::*;

/// One cell that records the kernel's process facts in `<cwd>/facts.json`, then sets `x`.
const FACTS: &str = "import os, json\nopen(os.path.join(os.getcwd(), 'facts.json'), 'w').write(json.dumps({'pid': os.getpid(), 'pgrp': os.getpgrp(), 'ppid': os.getppid(), 'had_x': 'x' in globals(), 'cwd': os.getcwd()}) + '\\n')\nx = 1";

fn script(dir: &TempDir, prompts: usize) -> String {
    let mut text = String::new();
    for i in 0..prompts {
        let cell = json!({"steps": [{"tool_call": {"id": format!("c{i}"), "name": "ipython", "arguments": {"code": FACTS}}}]});
        text.push_str(&format!("{cell}\n{}\n", json!({"text": "ok"})));
    }
    dir.write("facts.jsonl", &text).display().to_string()
}

fn facts(dir: &std::path::Path) -> Value {
    serde_json::from_str(&wait_for_file(&dir.join("facts.json"))).unwrap()
}

fn cmdline(pid: i64) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn agent(dir: &TempDir, extra: &[&str], env: &[(&str, &str)]) -> Agent {
    let s = script(dir, 2);
    let mut spawn = Spawn::scripted(&s, extra);
    spawn.cwd = Some(dir.path().to_path_buf());
    spawn.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    spawn.env.push((
        "RLM_GLOBAL_HARNESS_STATE_DIR".into(),
        dir.path().join("global-harness").display().to_string(),
    ));
    Agent::spawn(spawn)
}

#[test]
fn a_kernel_is_forked_from_the_zygote_in_its_own_group_and_dies_with_a_killed_agent() {
    let dir = TempDir::new("zygote-kill");
    let mut a = agent(&dir, &[], &[]);
    a.handshake();
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let f = facts(dir.path());
    let (pid, ppid) = (f["pid"].as_i64().unwrap(), f["ppid"].as_i64().unwrap());
    assert_eq!(
        f["pgrp"], f["pid"],
        "the kernel leads its own process group: {f}"
    );
    assert_ne!(
        ppid,
        i64::from(a.pid()),
        "forked by the zygote, not started by the agent"
    );
    assert!(
        cmdline(ppid).contains("driver.py --zygote"),
        "{}",
        cmdline(ppid)
    );
    assert_eq!(f["had_x"], false);

    // SAFETY-free: kill(1) on our own child, the agent.
    let _ = std::process::Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status();
    let _ = a.child.wait();
    assert_dies(&pid.to_string());
    assert_dies(&ppid.to_string());
}

#[test]
fn sessions_fork_their_kernels_from_one_zygote_each_with_its_own_namespace_and_cwd() {
    let home = TempDir::new("zygote-multi");
    let one = TempDir::new("zygote-one");
    let two = TempDir::new("zygote-two");
    let mut a = agent(&home, &["--multi-session"], &[]);
    a.call("initialize", json!({"protocolVersion": 1}));
    let mut seen = Vec::new();
    for dir in [&one, &two] {
        let r = a.call(
            "session/new",
            json!({"cwd": dir.path().display().to_string(), "mcpServers": []}),
        );
        a.session_id = Some(r["result"]["sessionId"].as_str().unwrap().to_owned());
        assert_eq!(a.prompt_stop("go"), "end_turn");
        seen.push(facts(dir.path()));
    }
    let (f1, f2) = (&seen[0], &seen[1]);
    assert_eq!(f1["ppid"], f2["ppid"], "one zygote: {f1} {f2}");
    assert_ne!(f1["pid"], f2["pid"]);
    assert_eq!(f1["cwd"], one.path().display().to_string());
    assert_eq!(f2["cwd"], two.path().display().to_string());
    // The second session's kernel does not see the first one's `x`.
    assert_eq!(
        (f1["had_x"].clone(), f2["had_x"].clone()),
        (json!(false), json!(false))
    );
    assert!(alive(&f1["pid"].to_string()) && alive(&f2["pid"].to_string()));
    assert!(a.finish().success());
    assert_dies(&f1["pid"].to_string());
    assert_dies(&f2["pid"].to_string());
    assert_dies(&f1["ppid"].to_string());
}

#[test]
fn without_the_zygote_kernels_start_on_their_own() {
    let dir = TempDir::new("zygote-off");
    let mut a = agent(&dir, &[], &[("PRIME_AGENT_KERNEL_ZYGOTE", "0")]);
    a.handshake();
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let f = facts(dir.path());
    assert_eq!(f["ppid"].as_i64(), Some(i64::from(a.pid())), "{f}");
    assert_eq!(f["pgrp"], f["pid"]);
    assert!(a.finish().success());
    assert_dies(&f["pid"].to_string());
}

/// The live children of `pid` (any of its threads'), from `/proc/<pid>/task/*/children`.
fn children(pid: i64) -> Vec<i64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<i64>>()
        })
        .filter(|c| alive(&c.to_string()))
        .collect()
}

/// Waits (bounded) for `find` to return something.
fn wait_for<T>(what: &str, mut find: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = find() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "no {what}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The agent's zygote, once it runs.
fn zygote_of(agent: &Agent) -> i64 {
    wait_for("zygote", || {
        children(i64::from(agent.pid()))
            .into_iter()
            .find(|c| cmdline(*c).contains("driver.py --zygote"))
    })
}

/// The zygote's spare kernel: a fork of the zygote that leads its own process group (so not
/// its group's guard, nor a program its imports start, caught between fork and exec) and is
/// none of the kernels in `taken`, once it is there.
fn spare_of(zygote: i64, taken: &[i64]) -> i64 {
    wait_for("spare kernel", || {
        children(zygote).into_iter().find(|c| {
            !taken.contains(c)
                && cmdline(*c).contains("driver.py --zygote")
                && i64::from(pgid_of(&c.to_string())) == *c
        })
    })
}

/// A pid that no longer exists at all: dead and reaped (no zombie left), bounded wait.
fn assert_reaped(pid: i64) {
    wait_for(&format!("reaping of {pid}"), || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
}

#[test]
fn each_first_cell_takes_a_spare_kernel_that_holds_nothing_of_an_earlier_session() {
    let home = TempDir::new("zygote-spare");
    let one = TempDir::new("zygote-spare-one");
    let two = TempDir::new("zygote-spare-two");
    let mut a = agent(&home, &["--multi-session"], &[]);
    a.call("initialize", json!({"protocolVersion": 1}));
    let mut kernels = Vec::new();
    let mut zygote = None;
    for dir in [&one, &two] {
        let r = a.call(
            "session/new",
            json!({"cwd": dir.path().display().to_string(), "mcpServers": []}),
        );
        a.session_id = Some(r["result"]["sessionId"].as_str().unwrap().to_owned());
        let z = *zygote.get_or_insert_with(|| zygote_of(&a));
        // Forked before the prompt: the spare this session's first cell will take.
        let spare = spare_of(z, &kernels);
        assert_eq!(a.prompt_stop("go"), "end_turn");
        let f = facts(dir.path());
        assert_eq!(
            f["pid"].as_i64(),
            Some(spare),
            "the first cell took the spare: {f}"
        );
        assert_eq!(f["ppid"].as_i64(), Some(z), "{f}");
        assert_eq!(f["pgrp"], f["pid"], "the spare leads its own group: {f}");
        assert_eq!(f["cwd"], dir.path().display().to_string());
        // Session one's cell set `x`; the spare session two got has never seen it.
        assert_eq!(f["had_x"], false, "{f}");
        kernels.push(spare);
    }
    let spare = spare_of(zygote.unwrap(), &kernels);
    assert!(kernels.iter().all(|k| alive(&k.to_string())));
    assert!(a.finish().success());
    for k in &kernels {
        assert_dies(&k.to_string());
    }
    // A clean exit stops the zygote, which kills and reaps its spare first.
    assert_reaped(spare);
    assert_reaped(zygote.unwrap());
}

#[test]
fn the_spare_kernel_dies_with_a_killed_agent() {
    let dir = TempDir::new("zygote-spare-kill");
    let mut a = agent(&dir, &[], &[]);
    a.handshake();
    let z = zygote_of(&a);
    let spare = spare_of(z, &[]);
    let _ = std::process::Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status();
    let _ = a.child.wait();
    assert_dies(&spare.to_string());
    assert_dies(&z.to_string());
}

/// A cancel while the first cell waits for a zygote that is still importing ends the wait and
/// starts nothing. Before, the wait saw the cancel only at its next 50 ms poll and then started
/// a kernel on its own, which saw the cancel and was killed: 50-60 ms per such cancel, the
/// outliers of the busy-cell cancel bench. (Without the fix this fails in most runs, not all:
/// the standalone start is sometimes killed before the wrapper logs it.) The "python" here
/// logs each start and, as a zygote, imports forever.
#[test]
fn a_cancel_while_the_zygote_imports_starts_no_kernel() {
    let dir = TempDir::new("zygote-cancel");
    let log = dir.path().join("starts.log");
    let python = dir.write(
        "slow-python",
        &format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in *--zygote*) exec sleep 30;; esac\nexec python3 \"$@\"\n",
            log.display()
        ),
    );
    let _ = std::process::Command::new("chmod")
        .arg("+x")
        .arg(&python)
        .status();
    let cell = json!({"steps": [{"tool_call": {"id": "c0", "name": "ipython", "arguments": {"code": "1"}}}]});
    let s = dir.write("cell.jsonl", &format!("{cell}\n"));
    let mut spawn = Spawn::scripted(&s.display().to_string(), &[]);
    spawn.cwd = Some(dir.path().to_path_buf());
    spawn.env = vec![(
        "PRIME_AGENT_KERNEL_PYTHON".into(),
        python.display().to_string(),
    )];
    let mut a = Agent::spawn(spawn);
    a.handshake();
    // The zygote starts in the background after session/new; under load the first cell could
    // come first and (rightly) start a kernel of its own. This test is about the wait for a
    // zygote that is importing, so it waits until the zygote has started.
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("--zygote")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the zygote never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let id = a.prompt("go");
    a.wait_for("the cell's tool call", |f| {
        f["params"]["update"]["sessionUpdate"] == "tool_call"
    });
    // Let the tool reach its wait for the zygote (which never becomes ready).
    std::thread::sleep(std::time::Duration::from_millis(300));
    a.cancel();
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    assert!(a.finish().success());
    let starts = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = starts.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].contains("--zygote"),
        "only the zygote was started: {starts:?}"
    );
}

/// A "python" that logs each start's arguments to `<dir>/starts.log`, then runs python3.
fn logging_python(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let log = dir.path().join("starts.log");
    let python = dir.write(
        "logging-python",
        &format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec python3 \"$@\"\n",
            log.display()
        ),
    );
    let _ = std::process::Command::new("chmod")
        .arg("+x")
        .arg(&python)
        .status();
    (python, log)
}

/// An agent in `dir` whose Python logs its starts, with `kernel.prewarm` in the project's
/// settings as given and `env` added; its script answers a text turn, then runs `FACTS`.
fn prewarm_agent(
    dir: &TempDir,
    setting: Option<bool>,
    env: &[(&str, &str)],
) -> (Agent, std::path::PathBuf) {
    if let Some(on) = setting {
        dir.write(
            ".prime/agent/settings.json",
            &json!({"kernel": {"prewarm": on}}).to_string(),
        );
    }
    let (python, log) = logging_python(dir);
    let cell = json!({"steps": [{"tool_call": {"id": "c0", "name": "ipython", "arguments": {"code": FACTS}}}]});
    let text = format!(
        "{}\n{cell}\n{}\n",
        json!({"text": "hi"}),
        json!({"text": "ok"})
    );
    let s = dir.write("prewarm.jsonl", &text);
    let mut spawn = Spawn::scripted(&s.display().to_string(), &[]);
    spawn.cwd = Some(dir.path().to_path_buf());
    spawn.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([(
            "PRIME_AGENT_KERNEL_PYTHON".to_owned(),
            python.display().to_string(),
        )])
        .collect();
    (Agent::spawn(spawn), log)
}

/// Python started by the agent so far, as the wrapper logged it.
fn starts(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// After `session/new` and a whole text turn (and a second more), nothing was started: with
/// prewarm on, the zygote's start follows `session/new` within milliseconds.
fn assert_no_python_yet(a: &mut Agent, log: &std::path::Path) {
    assert_eq!(a.prompt_stop("hello"), "end_turn");
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(starts(log).is_empty(), "{:?}", starts(log));
    let pythons: Vec<i64> = children(i64::from(a.pid()))
        .into_iter()
        .filter(|c| cmdline(*c).contains("driver.py"))
        .collect();
    assert!(pythons.is_empty(), "no Python process: {pythons:?}");
}

#[test]
fn with_prewarm_off_the_first_cell_starts_the_zygote_and_forks_its_kernel() {
    let dir = TempDir::new("zygote-lazy");
    let (mut a, log) = prewarm_agent(&dir, Some(false), &[]);
    a.handshake();
    assert_no_python_yet(&mut a, &log);
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let f = facts(dir.path());
    let ppid = f["ppid"].as_i64().unwrap();
    assert_ne!(ppid, i64::from(a.pid()), "forked by a zygote: {f}");
    assert!(
        cmdline(ppid).contains("driver.py --zygote"),
        "{}",
        cmdline(ppid)
    );
    let started = starts(&log);
    assert!(
        started.len() == 1 && started[0].contains("--zygote"),
        "the cell started the zygote, and only it: {started:?}"
    );
    assert!(a.finish().success());
    assert_dies(&f["pid"].to_string());
    assert_reaped(ppid);
}

#[test]
fn prime_agent_kernel_prewarm_wins_over_the_setting() {
    let dir = TempDir::new("zygote-prewarm-env-off");
    let (mut a, log) = prewarm_agent(&dir, Some(true), &[("PRIME_AGENT_KERNEL_PREWARM", "0")]);
    a.handshake();
    assert_no_python_yet(&mut a, &log);
    assert!(a.finish().success());

    let dir = TempDir::new("zygote-prewarm-env-on");
    let (mut a, log) = prewarm_agent(&dir, Some(false), &[("PRIME_AGENT_KERNEL_PREWARM", "1")]);
    a.handshake();
    let z = zygote_of(&a);
    // The zygote is found by its command line, which the logging shell has before its `echo`
    // has run: wait for the line too.
    wait_for("the zygote's start in the log", || {
        starts(&log)
            .iter()
            .any(|s| s.contains("--zygote"))
            .then_some(())
    });
    assert!(a.finish().success());
    assert_reaped(z);
}
