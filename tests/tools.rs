//! Built-in tools end to end: the scripted model calls `bash`, `write`, `edit` and `read` in a
//! temp dir; files must really change, the ACP tool-call updates must carry the right shape,
//! and (through scripted `expect` steps) every result must really go back to the model.
//! Also: bash progress, cancel and timeout kill the whole process group, huge output stays
//! bounded, and `!cmd` user shell commands run without any model call.

use serde_json::{json, Value};

use crate::support::procs::{alive, assert_dies, vm_kib, wait_for_file};
use crate::support::*;

/// The updates of one tool call, in order.
fn call_updates(a: &Agent, id: &str) -> Vec<Value> {
    a.updates()
        .into_iter()
        .filter(|u| u["toolCallId"] == id)
        .collect()
}

fn start_of(a: &Agent, id: &str) -> Value {
    a.tool_starts()
        .into_iter()
        .find(|u| u["toolCallId"] == id)
        .unwrap_or_else(|| panic!("no tool_call for {id}"))
}

fn end_of(a: &Agent, id: &str) -> Value {
    call_updates(a, id)
        .into_iter()
        .rfind(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] != "in_progress")
        .unwrap_or_else(|| panic!("no final tool_call_update for {id}"))
}

fn text_of(update: &Value) -> String {
    update["content"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn model_calls_bash_write_edit_and_read_in_one_prompt() {
    let dir = TempDir::new("tools");
    dir.write("notes.txt", "alpha\nbeta\n");
    let mut a = agent_in(&dir, "tools_roundtrip.jsonl", &[]);
    assert_eq!(a.prompt_stop("use the tools"), "end_turn");
    assert_eq!(a.text(), "Running tools.All done.");

    // The files really changed.
    let root = dir.path();
    assert_eq!(
        std::fs::read_to_string(root.join("made.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("sub/dir/new.txt")).unwrap(),
        "héllo\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "alpha\ngamma\n"
    );

    // bash: execute, titled by its command, no locations.
    let s = start_of(&a, "t_bash");
    assert_eq!(s["kind"], "execute");
    assert_eq!(s["title"], "echo made > made.txt && cat made.txt");
    // Announced with its reply, before it runs (docs/harnesses.md).
    assert_eq!(s["status"], "pending");
    assert_eq!(
        s["rawInput"],
        json!({"command":"echo made > made.txt && cat made.txt"})
    );
    assert!(s.get("locations").is_none());
    let e = end_of(&a, "t_bash");
    assert_eq!(e["status"], "completed");
    assert_eq!(text_of(&e), "made\n");

    // write: edit kind, absolute location, diff of a new file (oldText null).
    let new_abs = root.join("sub/dir/new.txt").display().to_string();
    let s = start_of(&a, "t_write");
    assert_eq!(
        (s["kind"].as_str(), s["title"].as_str()),
        (Some("edit"), Some("Write sub/dir/new.txt"))
    );
    assert_eq!(s["locations"], json!([{ "path": new_abs }]));
    assert_eq!(
        s["rawInput"],
        json!({"path":"sub/dir/new.txt","content":"héllo\n"})
    );
    let e = end_of(&a, "t_write");
    assert_eq!(e["status"], "completed");
    assert_eq!(text_of(&e), "Successfully wrote 6 bytes to sub/dir/new.txt");
    assert_eq!(
        e["content"][1],
        json!({"type":"diff","path":new_abs,"oldText":null,"newText":"héllo\n"})
    );

    // edit: old and new text in the diff.
    let notes_abs = root.join("notes.txt").display().to_string();
    let s = start_of(&a, "t_edit");
    assert_eq!(
        (s["kind"].as_str(), s["title"].as_str()),
        (Some("edit"), Some("Edit notes.txt"))
    );
    assert_eq!(s["locations"], json!([{ "path": notes_abs }]));
    let e = end_of(&a, "t_edit");
    assert_eq!(
        text_of(&e),
        "Successfully replaced 1 block(s) in notes.txt."
    );
    assert_eq!(
        e["content"][1],
        json!({"type":"diff","path":notes_abs,"oldText":"alpha\nbeta\n","newText":"alpha\ngamma\n"})
    );

    // read: read kind, location, the text as the result.
    let s = start_of(&a, "t_read");
    assert_eq!(
        (s["kind"].as_str(), s["title"].as_str()),
        (Some("read"), Some("Read notes.txt"))
    );
    assert_eq!(s["locations"], json!([{ "path": notes_abs }]));
    let e = end_of(&a, "t_read");
    assert_eq!(e["status"], "completed");
    assert_eq!(text_of(&e), "alpha\ngamma\n");
    assert!(a.finish().success());
}

#[test]
fn failing_tools_are_failed_calls_and_the_model_sees_why() {
    let dir = TempDir::new("tool-errors");
    dir.write("one.txt", "xx");
    let mut a = agent_in(&dir, "tool_errors.jsonl", &[]);
    assert_eq!(a.prompt_stop("break things"), "end_turn");
    assert_eq!(a.text(), "Handled.");
    let cases = [
        ("e_exit", "oops\n\n\nCommand exited with code 3"),
        (
            "e_edit",
            "Could not edit file: missing.txt. Error code: ENOENT.",
        ),
        (
            "e_dup",
            "Found 2 occurrences of the text in one.txt. The text must be unique. Please provide more context to make it unique.",
        ),
        ("e_read", "Offset 9 is beyond end of file (1 lines total)"),
        ("e_timeout", "start\n\n\nCommand timed out after 0.5 seconds"),
    ];
    for (id, want) in cases {
        let e = end_of(&a, id);
        assert_eq!(e["status"], "failed", "{id}");
        assert_eq!(text_of(&e), want, "{id}");
    }
    assert!(!dir.path().join("missing.txt").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("one.txt")).unwrap(),
        "xx"
    );
}

#[test]
fn slow_bash_streams_output_so_far() {
    let dir = TempDir::new("bash-progress");
    let mut a = agent_in(&dir, "bash_progress.jsonl", &[]);
    assert_eq!(a.prompt_stop("count"), "end_turn");
    let progress: Vec<String> = call_updates(&a, "p_slow")
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && u["status"] == "in_progress"
                && u.get("content").is_some()
        })
        .map(text_of)
        .collect();
    assert!(!progress.is_empty(), "no in_progress update");
    // Each is the output so far: a prefix of the final output.
    for p in &progress {
        assert!("1\n2\n3\n".starts_with(p.as_str()), "{p:?}");
    }
    assert!(progress[0].starts_with('1'));
    assert_eq!(text_of(&end_of(&a, "p_slow")), "1\n2\n3\n");
}

#[test]
fn cancel_kills_the_running_command_and_its_children() {
    let dir = TempDir::new("bash-cancel");
    let mut a = agent_in(&dir, "bash_cancel.jsonl", &[]);
    let id = a.prompt("sleep");
    let shell = wait_for_file(&dir.path().join("shell.pid"));
    let child = wait_for_file(&dir.path().join("child.pid"));
    assert!(alive(&shell) && alive(&child));
    a.cancel();
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    assert_dies(&shell);
    assert_dies(&child);
    // The cancelled call is closed for the client before the prompt is answered: its last
    // update is `failed`, never left `in_progress` (and never `completed`).
    let updates = call_updates(&a, "c_sleep");
    assert_eq!(
        updates.last().map(|u| u["status"].clone()),
        Some(json!("failed")),
        "{updates:?}"
    );
    assert!(updates.iter().all(|u| u["status"] != "completed"));
    assert!(a.finish().success());
}

#[test]
fn timeout_and_orphaned_pipes_kill_the_whole_group() {
    let dir = TempDir::new("bash-kill");
    let mut a = agent_in(&dir, "bash_kill.jsonl", &[]);
    assert_eq!(a.prompt_stop("kill"), "end_turn");
    assert_eq!(a.text(), "Killed.");
    for pidfile in ["shell.pid", "child.pid", "orphan.pid"] {
        assert_dies(&wait_for_file(&dir.path().join(pidfile)));
    }
    assert_eq!(text_of(&end_of(&a, "k_orphan")), "(no output)");
}

#[test]
fn huge_output_is_truncated_to_a_file_with_bounded_memory() {
    let dir = TempDir::new("bash-huge");
    let mut a = agent_in(&dir, "bash_huge.jsonl", &[]);
    assert_eq!(a.prompt_stop("flood"), "end_turn");
    let status = std::fs::read_to_string(format!("/proc/{}/status", a.pid())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(hwm_kb < 150 * 1024, "agent peak RSS {hwm_kb} kB");
    let text = text_of(&end_of(&a, "h_yes"));
    assert!(text.len() < 60 * 1024);
    let notice = text.rsplit("\n\n").next().unwrap();
    // `y\n` lines are tiny: the 2000-line limit cuts first.
    let prefix = "[Showing lines 99998002-100000001 of 100000001. Full output: ";
    assert!(notice.starts_with(prefix), "{notice}");
    let path = notice[prefix.len()..].trim_end_matches(']');
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.len(), 200_000_000);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    std::fs::remove_file(path).unwrap();
    // Progress updates stay small however much is printed.
    for u in call_updates(&a, "h_yes") {
        assert!(text_of(&u).len() <= 60 * 1024);
    }
}

#[test]
fn user_shell_command_streams_a_synthetic_bash_call_without_the_model() {
    let dir = TempDir::new("user-shell");
    // The script has no replies: any model call would fail the prompt.
    let mut a = agent_in(&dir, "no_replies.jsonl", &[]);
    assert_eq!(a.prompt_stop("!echo hi"), "end_turn");
    let ups = a.updates();
    let start = ups
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .expect("tool_call");
    let id = start["toolCallId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("prime-agent-bash-") && id.len() > "prime-agent-bash-".len());
    assert_eq!(start["title"], "echo hi");
    assert_eq!(start["kind"], "execute");
    assert_eq!(start["rawInput"], json!({"command":"echo hi"}));
    let calls = call_updates(&a, &id);
    let streamed: String = calls
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && u["status"] == "in_progress"
                && u.get("content").is_some()
        })
        .map(text_of)
        .collect();
    assert_eq!(streamed, "hi\n");
    assert_eq!(calls.last().unwrap()["status"], "completed");

    // `!!` too; a failing command still ends the turn normally, with a failed call.
    assert_eq!(a.prompt_stop("!!echo quiet; exit 4"), "end_turn");
    let last = a
        .updates()
        .into_iter()
        .rfind(|u| u["sessionUpdate"] == "tool_call_update")
        .unwrap();
    assert_eq!(last["status"], "failed");
    assert_ne!(last["toolCallId"], json!(id), "each run has its own id");
    // A real prompt does reach the (empty) script and fails: the model was never called before.
    let id = a.prompt("hello");
    let r = a.response(&id);
    assert!(
        r.to_string().contains("model call 1"),
        "first model call expected: {r}"
    );
}

#[test]
fn cancel_stops_a_user_shell_command() {
    let dir = TempDir::new("user-shell-cancel");
    let mut a = agent_in(&dir, "no_replies.jsonl", &[]);
    let id = a.prompt("!echo $$ > shell.pid; sleep 30");
    let shell = wait_for_file(&dir.path().join("shell.pid"));
    a.cancel();
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    assert_dies(&shell);
    let bash_updates: Vec<_> = a
        .updates()
        .into_iter()
        .filter(|u| {
            u["toolCallId"]
                .as_str()
                .is_some_and(|i| i.starts_with("prime-agent-bash-"))
        })
        .collect();
    assert_eq!(
        bash_updates.last().map(|u| u["status"].clone()),
        Some(json!("failed")),
        "{bash_updates:?}"
    );
}

#[test]
fn tools_flag_filters_the_builtins() {
    let dir = TempDir::new("tools-flag");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"name":"write","arguments":{"path":"x","content":"y"}}}]}),
            json!({"steps":[{"expect":["Tool write not found. Available tools: read, bash"]},{"text":"ok"}]}),
        ],
    );
    let mut a = Agent::spawn(Spawn {
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &["--tools", "bash,read"])
    });
    a.handshake();
    assert_eq!(a.prompt_stop("write"), "end_turn");
    assert!(!dir.path().join("x").exists());
}

#[test]
fn read_returns_images_as_attachments() {
    let dir = TempDir::new("read-image");
    // Any bytes will do: the type comes from the extension, the payload is base64 of the file.
    std::fs::write(
        dir.path().join("dot.png"),
        [0x89, b'P', b'N', b'G', 0, 1, 2],
    )
    .unwrap();
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"id":"img","name":"read","arguments":{"path":"dot.png"}}}]}),
            json!({"steps":[{"expect":["tool_result read error=false: Read image file [image/png]"]},{"text":"seen"}]}),
        ],
    );
    let mut a = Agent::spawn(Spawn {
        args: [
            "--mode",
            "acp",
            "--provider",
            "scripted",
            "--script",
            &script,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    });
    a.handshake();
    assert_eq!(a.prompt_stop("look"), "end_turn");
    let e = end_of(&a, "img");
    assert_eq!(e["status"], "completed");
    assert_eq!(
        e["content"][1],
        json!({"type":"content","content":{"type":"image","data":"iVBORwABAg==","mimeType":"image/png"}})
    );
}

#[test]
fn only_typed_text_runs_as_a_user_shell_command() {
    // See: review of `!cmd` provenance — an embedded resource or a link that starts with `!`
    // is content for the model, never a command.
    let dir = TempDir::new("bang-resource");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"expect":["!touch pwned"]},{"text":"read it"}]})],
    );
    let mut a = agent_in(&dir, &script, &[]);
    let sid = a.sid();
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type":"resource","resource":{"uri":"","text":"!touch pwned"}}]}),
    );
    assert_eq!(a.response(&id)["result"]["stopReason"], "end_turn");
    assert!(
        !dir.path().join("pwned").exists(),
        "a resource ran as a shell command"
    );
    assert_eq!(a.text(), "read it");
}

#[test]
fn bash_output_whose_last_line_alone_is_too_long_still_reaches_the_model() {
    // Regression (issue 9): a 60 KB last line followed by a newline used to reach the model as
    // an empty text plus `[Showing lines 3-3 of 3 (50.0KB limit). …]`.
    let dir = TempDir::new("bash-long-line");
    let command = "echo short; head -c 61440 /dev/zero | tr '\\0' q; echo END";
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"id":"long","name":"bash","arguments":{"command":command}}}]}),
            json!({"steps":[{"expect":["qqqqEND\n\n\n[Showing last 50.0KB of line 2 (line is 60.0KB). Full output: "]},{"text":"saw it"}]}),
        ],
    );
    let mut a = agent_in(&dir, &script, &[]);
    assert_eq!(a.prompt_stop("print a long line"), "end_turn");
    assert_eq!(a.text(), "saw it");
    let text = text_of(&end_of(&a, "long"));
    let (body, notice) = text.rsplit_once("\n\n").expect("a notice");
    assert_eq!(body.len(), 50 * 1024, "the end of the long line is shown");
    assert!(body.ends_with("qqqqEND\n"));
    let prefix = "[Showing last 50.0KB of line 2 (line is 60.0KB). Full output: ";
    assert!(notice.starts_with(prefix), "{notice}");
    let _ = std::fs::remove_file(notice[prefix.len()..].trim_end_matches(']'));
}

/// An agent whose model calls `read` with `args` once, expects a result containing `want`,
/// answers `"read it"`, and then `"again"` to a second prompt.
fn read_agent(dir: &TempDir, args: Value, want: &str) -> Agent {
    let script = script_file(
        dir,
        &[
            json!({"steps":[{"tool_call":{"id":"r","name":"read","arguments":args}}]}),
            json!({"steps":[{"expect":[want]},{"text":"read it"}]}),
            json!({"steps":[{"text":"again"}]}),
        ],
    );
    agent_in(dir, &script, &[])
}

/// The second prompt on the same connection is answered normally.
fn second_prompt_works(a: &mut Agent) {
    a.seen.clear();
    assert_eq!(a.prompt_stop("still there?"), "end_turn");
    assert_eq!(a.text(), "again");
}

#[test]
fn read_of_a_fifo_is_a_prompt_error_and_the_next_prompt_works() {
    // Regression (issue 9): `read` used to block for ever in `fs::read` on a named pipe.
    let dir = TempDir::new("read-fifo");
    let ok = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe"))
        .status()
        .expect("mkfifo")
        .success();
    assert!(ok);
    let want = format!(
        "tool_result read error=true: Cannot read '{}': it is a named pipe (FIFO), not a regular file.",
        dir.path().join("pipe").display()
    );
    let mut a = read_agent(&dir, json!({"path": "pipe"}), &want);
    assert_eq!(a.prompt_stop("read the pipe"), "end_turn");
    assert_eq!(a.text(), "read it");
    assert_eq!(end_of(&a, "r")["status"], "failed");
    second_prompt_works(&mut a);
    a.report("tool_reads_a_fifo", 1, 0);
    assert!(a.finish().success());
}

#[test]
fn read_of_dev_zero_is_an_error_and_memory_stays_small() {
    // Regression (issue 9): `read` of `/dev/zero` used to grow without end.
    let dir = TempDir::new("read-zero");
    let want = "tool_result read error=true: Cannot read '/dev/zero': it is a character device, not a regular file.";
    let mut a = read_agent(&dir, json!({"path": "/dev/zero"}), want);
    assert_eq!(a.prompt_stop("read zeros"), "end_turn");
    assert_eq!(end_of(&a, "r")["status"], "failed");
    let hwm = vm_kib(a.pid(), "VmHWM:");
    assert!(hwm > 0 && hwm < 64 * 1024, "agent peak RSS {hwm} kB");
    second_prompt_works(&mut a);
    a.report("tool_reads_dev_zero", 1, 0);
    assert!(a.finish().success());
}

#[test]
fn read_of_a_200mb_file_is_capped_with_bounded_memory() {
    // A sparse file: 3000 short lines, then zeros up to 200 MB (one huge last line).
    let dir = TempDir::new("read-huge");
    let text: String = (1..=3000).map(|i| format!("line{i}\n")).collect();
    let path = dir.write("big.log", &text);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(200 << 20))
        .expect("sparse file");
    let mut a = read_agent(
        &dir,
        json!({"path": "big.log"}),
        "line2000\n\n[Showing lines 1-2000 of 3001. Use offset=2001 to continue.]",
    );
    assert_eq!(a.prompt_stop("read the log"), "end_turn");
    let e = end_of(&a, "r");
    assert_eq!(e["status"], "completed");
    let out = text_of(&e);
    assert!(out.starts_with("line1\nline2\n"), "{}", &out[..40]);
    assert!(out.len() < 50 * 1024);
    let hwm = vm_kib(a.pid(), "VmHWM:");
    assert!(hwm > 0 && hwm < 64 * 1024, "agent peak RSS {hwm} kB");
    second_prompt_works(&mut a);
}
