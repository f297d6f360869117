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

/// Issue 33, item 5: `--mode json` prints upstream's session-event stream: the session header,
/// then `agent_start` … `agent_end`, each tool call's execution with its id, name, args and
/// result, and each message as the session file holds it.
#[test]
fn json_mode_prints_upstreams_event_stream() {
    let dir = TempDir::new("json-upstream");
    dir.write("notes.txt", "alpha");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"text":"Looking."},
                {"tool_call":{"id":"c1","name":"read","arguments":{"path":"notes.txt"}}}]}),
            json!({"steps":[{"text":"It says alpha."}]}),
        ],
    );
    let (code, out, err) = run(&dir, &scripted(&script, &["--mode", "json", "go"]), None);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let header = &lines[0];
    assert_eq!(
        (&header["type"], &header["version"]),
        (&json!("session"), &json!(3))
    );
    assert!(header["id"].is_string() && header["timestamp"].is_string());
    assert_eq!(header["cwd"], json!(dir.path().display().to_string()));
    let known = [
        "agent_start",
        "agent_end",
        "turn_start",
        "turn_end",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "compaction_start",
        "compaction_end",
        "auto_retry_start",
        "auto_retry_end",
    ];
    let types: Vec<&str> = lines[1..]
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(types.iter().all(|t| known.contains(t)), "{types:?}");
    assert_eq!(
        (types[0], *types.last().unwrap()),
        ("agent_start", "agent_end")
    );
    assert_eq!(
        types.iter().filter(|t| **t == "turn_start").count(),
        2,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| **t == "turn_end").count(),
        2,
        "{types:?}"
    );
    let of = |t: &'static str| lines.iter().filter(move |e| e["type"] == t);
    let start = of("tool_execution_start").next().unwrap();
    assert_eq!(
        start,
        &json!({"type":"tool_execution_start","toolCallId":"c1","toolName":"read",
            "args":{"path":"notes.txt"}})
    );
    let end = of("tool_execution_end").next().unwrap();
    assert_eq!(
        (&end["toolCallId"], &end["toolName"]),
        (&json!("c1"), &json!("read"))
    );
    assert_eq!(end["isError"], false);
    assert!(end["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("alpha"));
    let ended: Vec<&Value> = of("message_end").map(|e| &e["message"]).collect();
    let roles: Vec<&str> = ended.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "toolResult", "assistant"]);
    assert_eq!(ended[0]["content"], "go");
    assert_eq!(ended[1]["stopReason"], "toolUse");
    assert_eq!(ended[1]["content"][1]["type"], "toolCall");
    assert_eq!(ended[2]["toolCallId"], "c1");
    assert_eq!(ended[3]["content"][0]["text"], "It says alpha.");
    assert!(
        of("message_update").any(|e| e["assistantMessageEvent"]["type"] == "text_delta"
            && e["assistantMessageEvent"]["delta"] == "Looking.")
    );
    assert_eq!(
        lines.last().unwrap()["messages"].as_array().unwrap().len(),
        4
    );
}

#[test]
fn acp_json_mode_prints_each_update_then_the_result_line() {
    let dir = TempDir::new("json");
    let script = script_file(
        &dir,
        &[json!({"steps":[{"text":"hello"},{"usage":{"input":7,"output":3}}]})],
    );
    let (code, out, err) = run(
        &dir,
        &scripted(&script, &["--mode", "acp-json", "go"]),
        None,
    );
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
    let (code, out, _) = run(
        &dir,
        &scripted(&failing, &["--mode", "acp-json", "go"]),
        None,
    );
    assert_eq!(code, 1);
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result");
    assert!(last["error"].as_str().unwrap().contains("503 overloaded"));
    // Upstream's stream ends the run with an assistant message that says the error.
    let (code, out, _) = run(&dir, &scripted(&failing, &["--mode", "json", "go"]), None);
    assert_eq!(code, 1);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["type"], "agent_end");
    let error = lines
        .iter()
        .rev()
        .find(|e| e["type"] == "message_end")
        .unwrap();
    assert_eq!(error["message"]["stopReason"], "error");
    assert!(error["message"]["errorMessage"]
        .as_str()
        .unwrap()
        .contains("503 overloaded"));

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
    for mode in [&["-p"][..], &["--mode", "json"], &["--mode", "acp-json"]] {
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
