//! Long-running client behaviour: many prompt/cancel and session new/close cycles on one
//! connection must not leak threads, file descriptors, child processes or memory.

use serde_json::json;

use crate::support::procs::snapshot;
use crate::support::*;

#[test]
fn a_thousand_prompt_cancel_and_new_close_cycles_leak_nothing() {
    let dir = TempDir::new("leaks");
    let cycles = 1000;
    let lines: Vec<serde_json::Value> = (0..cycles)
        .map(|_| json!({"steps":[{"text":"go"},{"wait_for_cancel":true}]}))
        .collect();
    let script = script_file(&dir, &lines);
    let mut a = Agent::scripted(&script, &[]);
    a.handshake();
    // Warm up one cycle so lazily created things exist in the baseline.
    let id = a.prompt("warm up");
    a.wait_for("a chunk", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    a.cancel();
    a.response(&id);
    let pid = a.pid();
    let base = snapshot(pid);
    for i in 1..cycles {
        let id = a.prompt("work");
        a.wait_for("a chunk", |f| {
            f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        });
        a.cancel();
        assert_eq!(
            a.response(&id)["result"]["stopReason"],
            "cancelled",
            "cycle {i}"
        );
        a.seen.clear();
    }
    let after_prompts = snapshot(pid);
    for _ in 0..cycles {
        let sid = a.sid();
        let r = a.call("session/close", json!({"sessionId": sid}));
        assert_eq!(r["result"], json!({}));
        let r = a.call(
            "session/new",
            json!({"cwd": dir.path().display().to_string(), "mcpServers": []}),
        );
        a.session_id = Some(r["result"]["sessionId"].as_str().unwrap().to_owned());
        a.seen.clear();
    }
    let after_sessions = snapshot(pid);
    let mut err = std::io::stderr();
    use std::io::Write;
    let _ = writeln!(
        err,
        "leaks: threads {}/{}/{}, fds {}/{}/{}, children {}/{}/{}, rss KiB {}/{}/{}",
        base.threads,
        after_prompts.threads,
        after_sessions.threads,
        base.fds,
        after_prompts.fds,
        after_sessions.fds,
        base.children,
        after_prompts.children,
        after_sessions.children,
        base.rss_kib,
        after_prompts.rss_kib,
        after_sessions.rss_kib
    );
    for (name, b, p, s) in [
        (
            "threads",
            base.threads,
            after_prompts.threads,
            after_sessions.threads,
        ),
        ("fds", base.fds, after_prompts.fds, after_sessions.fds),
        (
            "children",
            base.children,
            after_prompts.children,
            after_sessions.children,
        ),
    ] {
        assert!(
            p <= b && s <= b,
            "{name} grew: baseline {b}, after prompts {p}, after sessions {s}"
        );
    }
    let grew = [
        after_prompts.threads.max(after_sessions.threads) > base.threads,
        after_prompts.fds.max(after_sessions.fds) > base.fds,
        after_prompts.children.max(after_sessions.children) > base.children,
        after_sessions.rss_kib >= base.rss_kib + 4096,
    ];
    // Faults: every cycle cancels a running turn or closes a session.
    a.report(
        "leaks_prompt_cancel_new_close",
        2 * cycles as u64 - 1,
        grew.iter().filter(|g| **g).count() as u64,
    );
    // RSS stays flat: allow allocator noise, not per-cycle growth.
    assert!(
        after_sessions.rss_kib < base.rss_kib + 4096,
        "RSS grew from {} to {} KiB",
        base.rss_kib,
        after_sessions.rss_kib
    );
    assert!(a.finish().success());
}
