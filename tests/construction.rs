//! Safe by construction (issue 32): what a hostile working directory or another process can do
//! to the agent, and the store's atomicity. Each test is a regression test for one defect the
//! review reproduced; each prints a `reliability:` line for `make reliability`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::procs::vm_kib;
use crate::support::sessions;
use crate::support::*;

/// A measurement line on stderr (shown by `make reliability`).
fn note(line: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "construction: {line}");
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// `initialize` and `session/new` in `cwd`; returns how long `session/new` took.
fn open_in(a: &mut Agent, cwd: &Path) -> Duration {
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let start = Instant::now();
    a.new_session_in(cwd, json!([]));
    start.elapsed()
}

// See: issue 32, defect 1. A FIFO named `AGENTS.md` in the cwd hung `session/new` for good (a
// plain `read_to_string` on the main loop), and stdin EOF and SIGTERM with it.
#[test]
fn a_fifo_named_agents_md_is_skipped_and_the_agent_still_answers_and_exits() {
    let dir = TempDir::new("fifo-agents");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    mkfifo(&project.join("AGENTS.md"));
    // One directory up, a `CLAUDE.md` FIFO too: every ancestor is walked.
    mkfifo(&dir.path().join("CLAUDE.md"));
    let mut a = Agent::spawn(Spawn {
        cwd: Some(project.clone()),
        ..Spawn::scripted(&fixture("scripts/hello.jsonl").display().to_string(), &[])
    });
    let took = open_in(&mut a, &project);
    let stop = a.prompt_stop("hi");
    assert_eq!(stop, "end_turn");
    let err = a.stderr_text();
    assert!(
        err.contains("AGENTS.md: not a regular file (a FIFO)"),
        "no warning naming the FIFO:\n{err}"
    );
    let status = a.finish();
    assert!(status.success(), "{status:?}");
    note(format!("session/new beside two FIFOs took {took:?}"));
    a.report("fifo_named_agents_md", 2, 0);
}

// See: issue 32, defect 1. A symlink `AGENTS.md -> /dev/zero` grew the agent's memory without
// bound (600 MB in 4 s); an oversized regular file is skipped too.
#[test]
fn a_dev_zero_agents_md_and_an_oversized_one_are_skipped_with_bounded_memory() {
    let dir = TempDir::new("zero-agents");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::os::unix::fs::symlink("/dev/zero", project.join("AGENTS.md")).unwrap();
    // 8 MiB of text one level up: over the cap, so skipped rather than put in every request.
    std::fs::write(dir.path().join("AGENTS.md"), "x".repeat(8 << 20)).unwrap();
    let mut a = Agent::spawn(Spawn {
        cwd: Some(project.clone()),
        ..Spawn::scripted(&fixture("scripts/hello.jsonl").display().to_string(), &[])
    });
    let took = open_in(&mut a, &project);
    let rss_kib = vm_kib(a.pid(), "VmHWM:");
    assert_eq!(a.prompt_stop("hi"), "end_turn");
    let err = a.stderr_text();
    assert!(err.contains("a character device"), "{err}");
    assert!(err.contains("over the 262144-byte cap"), "{err}");
    // The agent alone is a few MiB; the 8 MiB file was never read whole, nor /dev/zero at all.
    assert!(rss_kib < 64 * 1024, "peak RSS {rss_kib} KiB");
    assert!(a.finish().success());
    note(format!(
        "session/new beside /dev/zero took {took:?}, peak RSS {rss_kib} KiB"
    ));
    a.report("dev_zero_agents_md", 2, 0);
}

/// `n` small stored sessions in `dir/sessions`: a header and one exchange each.
fn many_sessions(dir: &TempDir, n: usize) {
    use std::io::Write;
    let store = dir.path().join("sessions");
    std::fs::create_dir_all(&store).unwrap();
    let cwd = dir.path().display().to_string();
    for i in 0..n {
        let id = format!("0190{i:04x}-0000-7000-8000-{i:012x}");
        let mut f = std::fs::File::create(store.join(format!("{id}.jsonl"))).unwrap();
        let ts = format!("2026-01-01T00:{:02}:{:02}.000Z", i / 60 % 60, i % 60);
        writeln!(
            f,
            r#"{{"cwd":"{cwd}","id":"{id}","timestamp":"{ts}","type":"session","version":3}}"#
        )
        .unwrap();
        writeln!(f, r#"{{"id":"00000001","message":{{"content":"hi {i}","role":"user","timestamp":1}},"parentId":null,"timestamp":"{ts}","type":"message"}}"#).unwrap();
    }
}

// See: issue 32, defect 5. Listing was quadratic in the number of session files (1.1-1.3 s per
// list at 20,000 files). A `make reliability` row: the warm list is under 200 ms, and every
// page is right.
#[test]
#[ignore = "20,000 files: make reliability"]
fn session_list_over_20000_files_is_fast_when_warm() {
    const N: usize = 20_000;
    let dir = TempDir::new("list-20k");
    many_sessions(&dir, N);
    let script = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = sessions::in_dir(&dir, &script, &[], &[]);
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let list = |a: &mut Agent| {
        let start = Instant::now();
        let r = a.call("session/list", json!({}));
        (start.elapsed(), r)
    };
    let (cold, first) = list(&mut a);
    let (warm, again) = list(&mut a);
    assert_eq!(first["result"], again["result"]);
    let rows = first["result"]["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 50, "{first}");
    assert!(first["result"]["nextCursor"].is_string(), "{first}");
    note(format!(
        "session/list over {N} files: cold {cold:?}, warm {warm:?}"
    ));
    assert!(warm < Duration::from_millis(200), "warm list took {warm:?}");
    assert!(a.finish().success());
    a.report("session_list_20000_files", 0, 0);
}
