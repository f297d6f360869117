//! Headless front ends (`-p/--print`, `--mode json`) on the real binary: stdout, exit codes
//! (0 end_turn, 1 failure, 2 a hit limit) and the prompt from stdin.

use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;

use serde_json::{json, Value};

use crate::support::*;

/// Runs the binary in `dir` with `args` and `stdin`; returns (exit code, stdout, stderr).
fn run(dir: &TempDir, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = agent_command(&dir.path().join("no-agent-dir"))
        .args(args)
        .current_dir(dir.path())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scripted<'a>(script: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--provider", "scripted", "--script", script];
    args.extend_from_slice(extra);
    args
}

#[test]
fn print_writes_the_final_assistant_text_and_exits_0() {
    let dir = TempDir::new("print");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"expect":["user: say hi"]},{"text":"thinking aloud"},{"tool_call":{"name":"nope","arguments":{}}}]}),
            json!({"steps":[{"text":"Hi "},{"text":"there"}]}),
        ],
    );
    let (code, out, err) = run(&dir, &scripted(&script, &["-p", "say", "hi"]), None);
    assert_eq!(code, 0, "{err}");
    // Only the last assistant message, not the one before the tool call.
    assert_eq!(out, "Hi there\n");
}

#[test]
fn the_prompt_may_come_on_stdin() {
    let dir = TempDir::new("print-stdin");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"expect":["user: from a pipe"]},{"text":"ok"}]})],
    );
    let (code, out, err) = run(
        &dir,
        &scripted(&script, &["--print"]),
        Some("from a pipe\n"),
    );
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{err}");
    // No prompt at all: a clear error, exit 1.
    let (code, out, err) = run(&dir, &scripted(&script, &["-p"]), None);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("Error: a prompt is required"), "{err}");
}

#[test]
fn json_mode_prints_each_update_then_the_result_line() {
    let dir = TempDir::new("json");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"text":"hello"},{"usage":{"input":7,"output":3}}]})],
    );
    let (code, out, err) = run(&dir, &scripted(&script, &["--mode", "json", "go"]), None);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (result, updates) = lines.split_last().unwrap();
    assert_eq!(
        *result,
        json!({"type":"result","stopReason":"end_turn","usage":{"inputTokens":7,"outputTokens":3,"totalTokens":10}})
    );
    // Each line is a session/update payload a client would get.
    for u in updates {
        let frame = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":u}});
        assert_schema_valid(&frame, &HashMap::new());
    }
    assert!(updates
        .iter()
        .any(|u| u["sessionUpdate"] == "agent_message_chunk" && u["content"]["text"] == "hello"));
    assert!(updates.iter().any(|u| ns(u)["phase"] == "responseBoundary"));
}

#[test]
fn exit_codes_say_failure_and_hit_limit() {
    let dir = TempDir::new("exit-codes");
    let failing = script_file(&dir, &[json!({"error":"503 overloaded"})]);
    let (code, out, err) = run(&dir, &scripted(&failing, &["-p", "go"]), None);
    assert_eq!(code, 1);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("Error: prime-agent turn failed: 503 overloaded"),
        "{err}"
    );
    let (code, out, _) = run(&dir, &scripted(&failing, &["--mode", "json", "go"]), None);
    assert_eq!(code, 1);
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result");
    assert!(last["error"].as_str().unwrap().contains("503 overloaded"));

    let big = dir
        .write(
            "big.jsonl",
            "{\"steps\":[{\"text\":\"spent\"},{\"usage\":{\"input\":50,\"output\":60}}]}\n",
        )
        .display()
        .to_string();
    let (code, out, err) = run(
        &dir,
        &scripted(&big, &["-p", "--autonomous-max-tokens", "100", "go"]),
        None,
    );
    assert_eq!((code, out.as_str()), (2, "spent\n"), "{err}");
}

#[test]
fn text_mode_keeps_its_clear_error() {
    let dir = TempDir::new("text-mode");
    let (code, _, err) = run(&dir, &["--mode", "text"], None);
    assert_eq!(code, 1);
    assert!(
        err.contains("Error: --mode text is not supported by this build; use --mode acp"),
        "{err}"
    );
}

#[test]
fn print_of_a_user_shell_command_prints_its_output() {
    let dir = TempDir::new("print-bang");
    // No model at all: `!cmd` needs none.
    let (code, out, err) = run(&dir, &["-p", "!echo hi; echo there"], None);
    assert_eq!((code, out.as_str()), (0, "hi\nthere\n"), "{err}");
    let (code, out, err) = run(&dir, &["-p", "!!printf quiet"], None);
    assert_eq!((code, out.as_str()), (0, "quiet\n"), "{err}");
}

#[test]
fn print_to_a_closed_stdout_is_an_error_exit() {
    let dir = TempDir::new("print-epipe");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"text":"an answer nobody reads"}]})],
    );
    for mode in [&["-p"][..], &["--mode", "json"]] {
        let mut args = scripted(&script, mode);
        args.push("go");
        let mut child = agent_command(&dir.path().join("no-agent-dir"))
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the agent writes anything: every write is EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode:?}: {err}");
        assert!(
            err.contains("Error: Cannot write the output to stdout"),
            "{mode:?}: {err}"
        );
    }
}

/// Issue 33, item 5: `@file` arguments, as upstream: a text file is inlined in a `<file>`
/// element, an image is attached (its `<file>` element empty), a missing file fails.
#[test]
fn at_file_arguments_inline_text_and_attach_images() {
    let dir = TempDir::new("print-at-file");
    dir.write("notes.txt", "alpha beta");
    std::fs::write(dir.path().join("shot.png"), [0x89, b'P', b'N', b'G']).unwrap();
    let notes = dir.path().join("notes.txt").display().to_string();
    let shot = dir.path().join("shot.png").display().to_string();
    let script = script_file(
        &dir,
        &[json!({"steps":[
            {"expect":[format!("user: <file name=\"{notes}\">\nalpha beta\n</file>\n<file name=\"{shot}\"></file>\nsummarize these [1 image(s)]")]},
            {"text":"done"}
        ]})],
    );
    let (code, out, err) = run(
        &dir,
        &scripted(
            &script,
            &["-p", "@notes.txt", "summarize", "@shot.png", "these"],
        ),
        None,
    );
    assert_eq!((code, out.as_str()), (0, "done\n"), "{err}");
    let (code, _, err) = run(
        &dir,
        &scripted(&script, &["-p", "@missing.txt", "hi"]),
        None,
    );
    assert_eq!(code, 1);
    assert!(err.contains("Error: File not found: "), "{err}");
}
