//! Long-running client behaviour: many prompt/cancel and session new/close cycles on one
//! connection must not leak threads, file descriptors, child processes or memory.

use serde_json::json;

use std::io::Write;

use crate::support::procs::{settle_to, snapshot};
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

/// Processes whose command line contains `marker` (any owner): orphans a leak would leave.
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| {
                            String::from_utf8_lossy(&c)
                                .replace('\0', " ")
                                .contains(marker)
                        })
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// Prompt/cancel cycles that each cancel a *running* `bash` call (a shell and a background
/// child): threads, fds and children return to the baseline and no process of the calls
/// survives. `LEAK_CYCLES` sets the count (100 here, 1000 in `make reliability`).
#[test]
fn prompt_cancel_cycles_with_a_running_bash_call_leak_nothing() {
    let cycles: usize = std::env::var("LEAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = TempDir::new("leaks-bash");
    // A distinctive sleep length marks the calls' processes in /proc.
    let marker = "sleep 3141";
    let command = format!("echo started; {marker} & wait");
    let lines: Vec<serde_json::Value> = (0..=cycles)
        .map(|_| json!({"steps":[{"tool_call":{"name":"bash","arguments":{"command": command}}}]}))
        .collect();
    let script = script_file(&dir, &lines);
    let mut a = agent_in(&dir, &script, &[]);
    let run_and_cancel = |a: &mut Agent, i: usize| {
        let id = a.prompt("work");
        a.wait_for("the command's first output", |f| {
            let u = &f["params"]["update"];
            u["sessionUpdate"] == "tool_call_update"
                && u["status"] == "in_progress"
                && u["content"][0]["content"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("started"))
        });
        a.cancel();
        assert_eq!(
            a.response(&id)["result"]["stopReason"],
            "cancelled",
            "cycle {i}"
        );
        a.seen.clear();
    };
    // Warm up one cycle so lazily created things exist in the baseline.
    run_and_cancel(&mut a, 0);
    let pid = a.pid();
    let base = settle_to(pid, &snapshot(pid));
    for i in 1..=cycles {
        run_and_cancel(&mut a, i);
    }
    let after = settle_to(pid, &base);
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut orphans = processes_with(marker);
    while orphans > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        orphans = processes_with(marker);
    }
    let _ = writeln!(
        std::io::stderr(),
        "leaks (bash, {cycles} cycles): threads {}/{}, fds {}/{}, children {}/{}, rss KiB {}/{}, orphans {orphans}",
        base.threads, after.threads, base.fds, after.fds, base.children, after.children,
        base.rss_kib, after.rss_kib
    );
    let grew = [
        after.threads > base.threads,
        after.fds > base.fds,
        after.children > base.children,
        after.rss_kib >= base.rss_kib + 4096,
        orphans > 0,
    ];
    a.report(
        "leaks_prompt_cancel_running_bash",
        cycles as u64,
        grew.iter().filter(|g| **g).count() as u64,
    );
    assert!(
        after.threads <= base.threads,
        "threads grew: {} → {}",
        base.threads,
        after.threads
    );
    assert!(
        after.fds <= base.fds,
        "fds grew: {} → {}",
        base.fds,
        after.fds
    );
    assert!(
        after.children <= base.children,
        "children grew: {} → {}",
        base.children,
        after.children
    );
    assert_eq!(orphans, 0, "processes of cancelled calls survive");
    assert!(
        after.rss_kib < base.rss_kib + 4096,
        "RSS grew from {} to {} KiB",
        base.rss_kib,
        after.rss_kib
    );
    assert!(a.finish().success());
}

/// A client that stops reading stdout while a turn streams 300,000 deltas: the turn pauses
/// once the writer's backlog passes its bound, so the agent's memory stays bounded, and every
/// delta arrives, in order, once the client reads again.
#[test]
fn a_client_that_stops_reading_holds_the_turn_not_the_memory() {
    const DELTAS: usize = 300_000;
    let dir = TempDir::new("stall");
    let script = script_file(
        &dir,
        // 1.2 MB of reply is ~300,000 estimated tokens: a window that holds them, so the turn
        // ends without a (threshold) compaction.
        &[
            json!({"config":{"context_window": 1_000_000}}),
            json!({"steps":[{"repeat":{"text":"tok ","count":DELTAS}}]}),
        ],
    );
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        // 300,000 frames through the schema validator of a debug build take minutes; the
        // frames are the same two shapes every other test validates.
        skip_schema: true,
        ..Spawn::scripted(&script, &[])
    });
    a.handshake();
    let pid = a.pid();
    let base = crate::support::procs::vm_kib(pid, "VmRSS");
    a.pause_reading();
    let id = a.prompt("stream a lot");
    // Long enough for an unthrottled turn to have produced every delta many times over.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let peak_stalled = crate::support::procs::vm_kib(pid, "VmHWM");
    a.resume_reading();
    let mut chunks = 0usize;
    let mut bytes = 0usize;
    let response = loop {
        let frame = a
            .next_frame(TIMEOUT)
            .unwrap_or_else(|| panic!("stalled after {chunks} chunks\n{}", a.stderr_text()));
        a.seen.clear();
        if frame["method"] == "session/update"
            && frame["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        {
            assert_eq!(frame["params"]["update"]["content"]["text"], "tok ");
            chunks += 1;
            bytes += 4;
        }
        if frame["id"] == id {
            break frame;
        }
    };
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(
        (chunks, bytes),
        (DELTAS, DELTAS * 4),
        "every delta delivered"
    );
    let _ = writeln!(
        std::io::stderr(),
        "stall: rss KiB before {base}, peak while the client did not read {peak_stalled}"
    );
    assert!(
        peak_stalled < 48 * 1024,
        "agent RSS peaked at {peak_stalled} KiB while the client was not reading"
    );
    a.report("client_stops_reading_stdout", 1, 0);
}
