//! Kernels forked from the agent's zygote (`src/kernel/zygote.rs`): each kernel is a fork of one
//! warmed Python per agent process, in its own process group, with its own namespace and cwd,
//! and it dies with the agent. `PRIME_AGENT_KERNEL_ZYGOTE=0` starts kernels on their own.
//! (Interrupt, restart after a kill, snapshots and subagents run through the zygote in
//! `kernel.rs`, `kernel_state.rs` and `subagents.rs`.)

use serde_json::{json, Value};

use crate::support::procs::{alive, assert_dies, wait_for_file};
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
