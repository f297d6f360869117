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
        err.contains("AGENTS.md: not a regular file but a named pipe (FIFO)"),
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
    assert!(err.contains("but a character device"), "{err}");
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

/// A script file of its own in `dir`.
fn script(dir: &TempDir, name: &str, lines: &[serde_json::Value]) -> String {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    dir.write(name, &text).display().to_string()
}

/// The index in `a.seen` of the response to request `id`.
fn answered_at(a: &Agent, id: &serde_json::Value) -> usize {
    a.seen
        .iter()
        .position(|f| f.get("id") == Some(id) && f.get("method").is_none())
        .unwrap_or_else(|| panic!("no answer to {id}"))
}

// See: issue 32, defect 2. `session/delete` and `session/set_title` of a stored session that
// is not open claimed (up to 1.5 s of polling when another process holds it) and parsed the
// file on the main loop, so another session's cancel waited behind them. Now the store worker
// does both: the cancel, sent after them, is answered before either.
#[test]
fn delete_and_set_title_of_a_session_held_elsewhere_do_not_hold_another_sessions_cancel() {
    let dir = TempDir::new("held-elsewhere");
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    // Another process records session `held` and keeps it open.
    let mut other = sessions::in_dir(&dir, &hello, &[], &[]);
    let held = other.handshake();
    assert_eq!(other.prompt_stop("hello"), "end_turn");
    let wait = script(
        &dir,
        "wait.jsonl",
        // One model call per prompt (two prompts), each waiting for its cancel: with one
        // line, the second prompt failed whenever its model call began before the cancel.
        &[
            json!({"steps": [{"wait_for_cancel": true}]}),
            json!({"steps": [{"wait_for_cancel": true}]}),
        ],
    );
    let mut a = sessions::in_dir(&dir, &wait, &["--multi-session"], &[]);
    a.handshake();
    for (method, params) in [
        ("session/delete", json!({"sessionId": held})),
        (
            "session/set_title",
            json!({"sessionId": held, "title": "renamed"}),
        ),
    ] {
        let prompt = a.prompt("wait");
        let slow = a.request(method, params);
        let sent = Instant::now();
        a.cancel();
        let r = a.response(&prompt);
        let cancel_took = sent.elapsed();
        assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
        let refused = a.response(&slow);
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("is open in another prime-agent process")),
            "{refused}"
        );
        assert!(
            answered_at(&a, &prompt) < answered_at(&a, &slow),
            "the cancel waited for {method}"
        );
        note(format!(
            "{method} of a session held elsewhere: the other session's cancel answered in {cancel_took:?}"
        ));
    }
    // Nothing was lost: the session is still the other process's, whole and not renamed.
    let lines = sessions::lines_of(&sessions::session_file(&dir, &held));
    assert!(lines.iter().all(|l| l["name"] != "renamed"), "{lines:?}");
    assert!(a.finish().success());
    assert!(other.finish().success());
    a.report("delete_and_set_title_held_elsewhere", 2, 0);
}

// See: issue 32, defect 3. Deleting an open session right after an `ipython` cell brought its
// artifacts back: the reaper's kernel flush and the kernel's debounced snapshot wrote
// `kernel-state.{pkl,json}` (the user's pickled namespace) after the `{}` answer, and they
// stayed after exit. Now the kernel is torn down first and nothing is saved for a deleted
// session; the answer comes once its file and artifacts are gone.
#[test]
fn deleting_an_open_session_right_after_a_cell_leaves_no_artifacts() {
    let dir = TempDir::new("delete-after-cell");
    let cell = json!({"tool_call": {"id": "c1", "name": "ipython", "arguments": {"code": "secret = 'pickled'\nprint(secret)"}}});
    let s = script(
        &dir,
        "cell.jsonl",
        &[
            json!({"steps": [cell]}),
            json!({"steps": [{"text": "Done."}]}),
        ],
    );
    let mut a = sessions::in_dir(&dir, &s, &["--tools", "ipython"], &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("run a cell"), "end_turn");
    let r = a.call("session/delete", json!({"sessionId": sid}));
    assert_eq!(r["result"], json!({}), "{r}");
    let artifacts = sessions::artifacts(&dir, &sid);
    assert!(
        !artifacts.exists(),
        "artifacts at the answer: {}",
        artifacts.display()
    );
    assert!(!sessions::session_file(&dir, &sid).exists());
    assert!(a.finish().success());
    assert!(
        !artifacts.exists(),
        "artifacts came back by the exit: {:?}",
        std::fs::read_dir(&artifacts)
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
}

/// A stored session of about `mb` MiB in `dir/sessions`, as this binary writes them.
fn big_session(dir: &TempDir, mb: usize) -> String {
    use std::io::Write;
    let store = dir.path().join("sessions");
    std::fs::create_dir_all(&store).unwrap();
    let id = "0190aaaa-0000-7000-8000-000000000001".to_owned();
    let cwd = dir.path().display().to_string();
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(store.join(format!("{id}.jsonl"))).unwrap());
    writeln!(f, r#"{{"cwd":"{cwd}","id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","type":"session","version":3}}"#).unwrap();
    let chunk = "z".repeat(64 * 1024);
    let mut parent = "null".to_owned();
    for n in 0..mb * 16 {
        let (role, content) = if n % 2 == 0 {
            ("user", format!(r#""{chunk}""#))
        } else {
            (
                "assistant",
                format!(r#"[{{"text":"{chunk}","type":"text"}}]"#),
            )
        };
        let stop = if role == "assistant" {
            r#","stopReason":"stop""#
        } else {
            ""
        };
        writeln!(f, r#"{{"id":"{n:08x}","message":{{"content":{content},"role":"{role}"{stop},"timestamp":1}},"parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","type":"message"}}"#).unwrap();
        parent = format!(r#""{n:08x}""#);
    }
    id
}

/// The ids `session/list` shows in `dir/sessions`, listed by a fresh agent.
fn listed(dir: &TempDir) -> Vec<String> {
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = sessions::in_dir(dir, &hello, &[], &[]);
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some());
    let r = a.call("session/list", json!({}));
    assert!(a.finish().success());
    r["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_owned())
        .collect()
}

// See: issue 32, defect 4. A fork was written in place, so a crash mid-copy left a partial
// session that listed and loaded as a normal one. The crash here is the kernel's own: a
// file-size limit under the fork's size, so the agent dies of SIGXFSZ mid-copy. Nothing of
// the fork is listed afterwards; without the limit, the same fork is whole.
#[test]
fn a_fork_killed_mid_copy_leaves_no_partial_session() {
    let dir = TempDir::new("fork-crash");
    let source = big_session(&dir, 6);
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let sessions_dir = dir.path().join("sessions").display().to_string();
    let spawn = |wrapper: Vec<String>| {
        let mut spawn =
            Spawn::scripted(&hello, &["--multi-session", "--session-dir", &sessions_dir]);
        spawn.cwd = Some(dir.path().to_path_buf());
        spawn.env = vec![(
            "PRIME_AGENT_CODING_AGENT_DIR".into(),
            dir.path().join("agent").display().to_string(),
        )];
        spawn.wrapper = wrapper;
        Agent::spawn(spawn)
    };
    let fork = |a: &mut Agent| {
        let r = a.call(
            "initialize",
            json!({"protocolVersion":1,"clientCapabilities":{}}),
        );
        assert!(r.get("result").is_some());
        a.request(
            "session/fork",
            json!({"sessionId": source, "cwd": dir.path().display().to_string(), "mcpServers": []}),
        )
    };
    // 2 MiB of file size at most: the 6 MiB copy dies a third of the way in.
    let mut a = spawn(
        ["prlimit", "--fsize=2097152", "--"]
            .map(String::from)
            .to_vec(),
    );
    fork(&mut a);
    let status = a.wait_exit(TIMEOUT).expect("the agent died of SIGXFSZ");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc_sigxfsz()),
        "{status:?}: {}",
        a.stderr_text()
    );
    assert_eq!(listed(&dir), vec![source.clone()]);
    // Without the limit the fork is whole: every entry of the original, and listed.
    let mut b = spawn(Vec::new());
    let id = fork(&mut b);
    let r = b.response(&id);
    let fork_id = r["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    assert!(b.finish().success());
    let copied = sessions::lines_of(&sessions::session_file(&dir, &fork_id));
    let original = sessions::lines_of(&sessions::session_file(&dir, &source));
    assert_eq!(copied.len(), original.len());
    let mut ids = listed(&dir);
    ids.sort();
    let mut want = vec![source, fork_id];
    want.sort();
    assert_eq!(ids, want);
}

/// SIGXFSZ on Linux (x86_64 and aarch64).
fn libc_sigxfsz() -> i32 {
    25
}

// See: issue 32, defect 4, as the review ran it. A `make reliability` row: `kill -9` of the
// agent while it copies a large session for `session/fork` (once its temporary file has grown
// past 16 MiB) leaves nothing that lists or loads: the original alone is listed.
#[test]
#[ignore = "a 200 MiB session: make reliability"]
fn kill_9_during_the_fork_of_a_large_session_leaves_no_partial_session() {
    let dir = TempDir::new("fork-kill9");
    let source = big_session(&dir, 200);
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = sessions::in_dir(&dir, &hello, &["--multi-session"], &[]);
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some());
    a.request(
        "session/fork",
        json!({"sessionId": source, "cwd": dir.path().display().to_string(), "mcpServers": []}),
    );
    let store = dir.path().join("sessions");
    let deadline = Instant::now() + TIMEOUT;
    let copied = loop {
        let partial = std::fs::read_dir(&store)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl.tmp"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .max();
        if let Some(len) = partial.filter(|len| *len > 16 << 20) {
            break len;
        }
        assert!(Instant::now() < deadline, "the fork never started copying");
        std::thread::sleep(Duration::from_millis(1));
    };
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    assert_eq!(listed(&dir), vec![source.clone()]);
    let jsonl: Vec<String> = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    assert_eq!(jsonl, vec![format!("{source}.jsonl")]);
    note(format!(
        "fork killed with {copied} bytes copied: nothing listed but the original"
    ));
    reliability_line("kill_9_during_fork", 1, 2, 1, 0);
}

// See: issue 32 (found by reading). A closed session whose stuck turn still held the
// conversation kept its claim (`release_file` skipped it on `WouldBlock`), so no other process
// could open the session until that turn ended. Now the reaper releases the claim after the
// teardown, and the stuck turn's recorder writes nothing more.
#[test]
fn a_closed_session_with_a_stuck_turn_lets_another_process_open_it() {
    let dir = TempDir::new("stuck-claim");
    let s = script(
        &dir,
        "stuck.jsonl",
        &[
            json!({"steps": [{"text": "first answer"}]}),
            // Deaf to the cancel: a call no abort hook reaches, for longer than the test.
            json!({"steps": [{"stuck_ms": 15000}, {"text": "late"}]}),
        ],
    );
    let mut a = sessions::in_dir(&dir, &s, &[], &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("one"), "end_turn");
    let stuck = a.prompt("two");
    // Let the turn reach its stuck call.
    std::thread::sleep(Duration::from_millis(300));
    let r = a.call("session/close", json!({"sessionId": sid}));
    assert_eq!(r["result"], json!({}), "{r}");
    // Answered before the close (which waits for it).
    let cancelled = &a.seen[answered_at(&a, &stuck)];
    assert_eq!(
        cancelled["result"]["stopReason"], "cancelled",
        "{cancelled}"
    );
    // Another process resumes it while the stuck turn still runs.
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut b = sessions::in_dir(&dir, &hello, &[], &[]);
    let r = b.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some());
    let r = b.call(
        "session/resume",
        json!({"sessionId": sid, "cwd": dir.path().display().to_string(), "mcpServers": []}),
    );
    assert!(r.get("result").is_some(), "the claim was kept: {r}");
    assert!(b.finish().success());
    a.close_stdin();
    let _ = a.wait_exit(TIMEOUT);
}
