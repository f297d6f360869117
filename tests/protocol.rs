//! Handshake, JSON-RPC front end and session lifecycle, driven over stdio.

use serde_json::{json, Value};

use crate::support::*;

#[test]
fn initialize_shape_and_version() {
    let mut a = Agent::scripted("hello.jsonl", &[]);
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    let res = &r["result"];
    assert_eq!(res["protocolVersion"], 1);
    assert_eq!(
        res["agentInfo"],
        json!({"name":"prime-agent","title":"Prime Agent","version":env!("CARGO_PKG_VERSION")})
    );
    assert_eq!(
        res["agentCapabilities"]["promptCapabilities"],
        json!({"image":true,"embeddedContext":true})
    );
    assert_eq!(
        res["agentCapabilities"]["sessionCapabilities"],
        json!({"close":{},"list":{},"resume":{},"delete":{},"fork":{},"title":{},
            "additionalDirectories":{},"systemPrompt":{"mode":{"override":{}}}})
    );
    assert_eq!(res["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        res["_meta"],
        json!({NS:{}, "steering": {"supported": true}})
    );
    assert!(a.finish().success());
}

use std::time::Duration;

/// A UUIDv7 (behaviour spec §5.6: session ids sort by creation time).
fn is_uuid_v7(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && b[14] == b'7'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
        && s.chars()
            .filter(|c| *c != '-')
            .all(|c| c.is_ascii_hexdigit())
}

#[test]
fn session_ids_are_v7_uuids_in_creation_order_and_symlinked_cwds_match() {
    let dir = TempDir::new("cwd");
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut a = Agent::spawn(Spawn {
        args: vec![
            "--provider".into(),
            "scripted".into(),
            "--script".into(),
            fixture("scripts/hello.jsonl").display().to_string(),
        ],
        cwd: Some(real.clone()),
        ..Default::default()
    });
    let r = a.call(
        "session/new",
        json!({"cwd": link.display().to_string(), "mcpServers": []}),
    );
    assert!(
        is_uuid_v7(r["result"]["sessionId"].as_str().unwrap()),
        "{r}"
    );

    assert!(
        r["result"].get("_meta").is_none(),
        "a symlink alias is not a mismatch: {r}"
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    a.call("session/close", json!({"sessionId": sid}));
    let later = a.call(
        "session/new",
        json!({"cwd": real.display().to_string(), "mcpServers": []}),
    );
    let later = later["result"]["sessionId"].as_str().unwrap().to_owned();
    assert!(is_uuid_v7(&later) && later > sid, "{later} follows {sid}");
    a.call("session/close", json!({"sessionId": later}));
    // A missing path is a mismatch that reports the original string and the real cwd.
    let missing = dir.path().join("missing").display().to_string();
    let r = a.call("session/new", json!({"cwd": missing, "mcpServers": []}));
    assert_eq!(
        ns(&r["result"])["cwd"],
        json!({"requested": missing, "actual": real.display().to_string()})
    );
}

#[test]
fn stray_writes_to_fd1_land_on_stderr() {
    let mut a = Agent::scripted("content.jsonl", &[]);
    a.handshake();
    let sid = a.sid();
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type":"text","text":"what is this?"},
            {"type":"image","data":"aGVsbG8=","mimeType":"image/png"},
            {"type":"resource","resource":{"uri":"file:///notes.txt","text":"context line"}},
            {"type":"resource_link","uri":"file:///b.txt","name":"b.txt"}]}),
    );
    assert_eq!(a.response(&id)["result"]["stopReason"], "end_turn");
    assert!(a.finish().success());
    // The harness already panics on any non-JSON stdout line; the text must be on stderr.
    assert!(
        a.stderr_text().contains("STRAY-STDOUT-LINE"),
        "stderr: {}",
        a.stderr_text()
    );
}

#[test]
fn no_update_after_a_cancelled_response() {
    let mut a = Agent::scripted("stream_forever.jsonl", &[]);
    a.handshake();
    let id = a.prompt("go");
    a.wait_for("a few chunks", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    a.cancel();
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    let after = a.drain_for(Duration::from_millis(300));
    assert!(
        after.is_empty(),
        "updates after the cancelled response: {after:?}"
    );
    // Sequences stay strictly increasing and the next turn works.
    let id = a.prompt("again");
    assert_eq!(a.response(&id)["result"]["stopReason"], "end_turn");
    let seqs: Vec<u64> = a
        .updates()
        .iter()
        .map(|u| ns(u)["eventSequence"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(a.text().ends_with("after cancel"));
}

#[test]
fn stdin_eof_mid_turn_exits_zero() {
    let mut a = Agent::scripted("wait_for_cancel.jsonl", &[]);
    a.handshake();
    let id = a.prompt("work");
    a.wait_for("the first chunk", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    let status = a.finish();
    assert!(status.success(), "{status}");
    // A pipe-driven client may still read stdout after closing stdin: the prompt in flight
    // got its answer before the exit.
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
}

fn signal_mid_turn(sig: libc::c_int) {
    let mut a = Agent::scripted("wait_for_cancel.jsonl", &[]);
    a.handshake();
    let id = a.prompt("work");
    a.wait_for("the first chunk", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    #[allow(unsafe_code)]
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(a.pid() as libc::pid_t, sig);
    }
    // The client may still be listening: the running prompt is answered before exit.
    assert_eq!(a.response(&id)["result"]["stopReason"], "cancelled");
    let status = a.wait_exit(TIMEOUT).expect("exits after the signal");
    assert!(status.success(), "{status}");
}

#[test]
fn sigterm_mid_turn_answers_and_exits_zero() {
    signal_mid_turn(libc::SIGTERM);
}

#[test]
fn sigint_mid_turn_answers_and_exits_zero() {
    signal_mid_turn(libc::SIGINT);
}

#[test]
fn an_overlong_line_is_refused_and_the_connection_survives() {
    let mut a = Agent::scripted("hello.jsonl", &[]);
    // A 1 MiB image prompt line is fine (the limit is 64 MiB)…
    a.handshake();
    let sid = a.sid();
    let big = "A".repeat(1 << 20);
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type":"image","data": big, "mimeType":"image/png"}]}),
    );
    assert_eq!(a.response(&id)["result"]["stopReason"], "end_turn");
    // …a line over 64 MiB is skipped with an error, without killing the connection.
    let mut line =
        br#"{"jsonrpc":"2.0","id":99,"method":"initialize","params":{"protocolVersion":1,"pad":""#
            .to_vec();
    line.extend(std::iter::repeat_n(b'x', 64 * 1024 * 1024 + 10));
    line.extend_from_slice(b"\"}}\n");
    a.send_raw(&line);
    let err = a.wait_for("the overlong-line error", |f| f.get("error").is_some());
    assert_eq!(err["error"]["code"], -32600);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("line limit"),
        "{err}"
    );
    let r = a.call("initialize", json!({"protocolVersion":1}));
    assert_eq!(r["result"]["protocolVersion"], 1);
}

fn run_cli(args: &[&str]) -> (i32, String, String) {
    let dir = TempDir::new("cli");
    let out = agent_command(dir.path()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn cli_help_version_and_errors() {
    let (code, out, _) = run_cli(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--mode <text|json|rpc|acp|daemon>"), "{out}");
    let (code, out, _) = run_cli(&["-v"]);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            format!("prime-agent {}", env!("CARGO_PKG_VERSION")).as_str()
        )
    );
    let (code, out, err) = run_cli(&["-x"]);
    assert_eq!(
        (code, out.as_str(), err.trim()),
        (1, "", "Error: Unknown option: -x")
    );
    // A mistyped long option stops start-up instead of being skipped with its value.
    let (code, out, err) = run_cli(&["--modle", "x"]);
    assert_eq!(
        (code, out.as_str(), err.trim()),
        (
            1,
            "",
            "Error: Unknown option: --modle (did you mean --model?)"
        )
    );
    let (code, _, err) = run_cli(&["--thinking", "ultra"]);
    assert_eq!(
        (code, err.trim()),
        (
            1,
            "Error: Invalid thinking level \"ultra\". Valid values: off, minimal, low, medium, high, xhigh, max"
        )
    );
    let (code, _, err) = run_cli(&["--mode", "rpc"]);
    assert_eq!(code, 1);
    assert!(err.contains("not supported"), "{err}");
    let (code, _, err) = run_cli(&["--provider", "scripted"]);
    assert_eq!(
        (code, err.trim()),
        (1, "Error: --provider scripted requires --script FILE")
    );
    let (code, _, err) = run_cli(&[
        "--provider",
        "scripted",
        "--script",
        "/nonexistent/script.jsonl",
    ]);
    assert_eq!(code, 1);
    assert!(err.starts_with("Error: Cannot read script"), "{err}");
}

#[test]
fn a_prompt_without_any_model_fails_clearly_but_the_agent_starts() {
    let mut a = Agent::spawn(Spawn {
        args: vec!["--mode".into(), "acp".into()],
        env: vec![("OPENAI_API_KEY".into(), String::new())],
        ..Default::default()
    });
    a.handshake();
    let id = a.prompt("hello");
    let r = a.response(&id);
    assert_eq!(r["error"]["code"], -32603);
    let details = r["error"]["data"]["details"].as_str().unwrap();
    assert!(
        details.starts_with("prime-agent turn failed: No API key found for openai."),
        "{details}"
    );
    assert!(
        details.contains("OPENAI_API_KEY"),
        "the error says what to set: {details}"
    );
    assert!(a.finish().success());
}

#[test]
fn stdin_closed_mid_frame_gets_a_parse_error_and_a_clean_exit() {
    let mut a = Agent::scripted("hello.jsonl", &[]);
    a.handshake();
    a.send_raw(br#"{"jsonrpc":"2.0","id":77,"method":"session/prom"#);
    a.close_stdin();
    let err = a.wait_for("the parse error for the cut frame", |f| {
        f.get("error").is_some()
    });
    assert_eq!(err["error"]["code"], -32700);
    assert_eq!(err["id"], serde_json::Value::Null);
    let status = a.wait_exit(TIMEOUT).expect("exits after EOF");
    assert!(status.success(), "{status}");
}

/// The schema check can fail: one corrupted frame (the prompt's stop reason) fails the test
/// through the ordinary helpers, on the test's own thread.
#[test]
#[should_panic(expected = "frame is not valid ACP")]
fn a_corrupted_frame_fails_the_schema_check() {
    fn corrupt(frame: &mut Value) {
        if let Some(stop) = frame.pointer_mut("/result/stopReason") {
            *stop = json!("hello");
        }
    }
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = Agent::spawn(Spawn {
        corrupt: Some(corrupt),
        ..Spawn::scripted(&hello, &[])
    });
    a.handshake();
    a.prompt_stop("hi");
}

/// Frames after the last one a test awaits are checked as well: here the corrupted frame is
/// the response to `session/close`, which the test never reads; dropping the agent finds it.
#[test]
#[should_panic(expected = "frame is not valid ACP")]
fn a_corrupted_frame_nobody_awaited_still_fails() {
    fn corrupt(frame: &mut Value) {
        if frame["id"] == 3 {
            frame["result"] = json!("hello");
        }
    }
    let hello = fixture("scripts/hello.jsonl").display().to_string();
    let mut a = Agent::spawn(Spawn {
        corrupt: Some(corrupt),
        ..Spawn::scripted(&hello, &[])
    });
    a.handshake();
    let sid = a.sid();
    a.request("session/close", json!({"sessionId": sid}));
}

/// A new pseudo-terminal: (the controlling side, the terminal a child gets as stdin).
fn pty() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut controller, mut terminal) = (-1, -1);
    #[allow(unsafe_code)]
    // SAFETY: openpty writes two new descriptors, which we own from here on.
    let (rc, files) = unsafe {
        let rc = libc::openpty(
            &mut controller,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        );
        (
            rc,
            (rc == 0).then(|| {
                (
                    std::fs::File::from_raw_fd(controller),
                    std::os::fd::OwnedFd::from_raw_fd(terminal),
                )
            }),
        )
    };
    files.unwrap_or_else(|| panic!("openpty failed ({rc})"))
}

#[test]
fn a_start_on_a_terminal_prints_a_one_line_hint_then_serves_acp() {
    use std::io::{BufRead, Write};
    let dir = TempDir::new("tty-hint");
    let (mut controller, terminal) = pty();
    let mut child = agent_command(&dir.path().join("agent"))
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::from(terminal))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Typed at the terminal, the protocol still works as today.
    controller
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n")
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["result"]["protocolVersion"], 1, "{line}");
    // ctrl-d at the start of a line: end of input, a clean exit.
    controller.write_all(b"\x04").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let hint = err.lines().next().unwrap_or_default();
    assert!(
        hint.starts_with("prime-agent: waiting for ACP") && hint.contains("prime-agent -p"),
        "{err}"
    );
    // A pipe (every other test, every editor) gets no hint.
    let (_, _, err) = run_cli(&["--provider", "scripted", "--script", "/nonexistent"]);
    assert!(!err.contains("waiting for ACP"), "{err}");
}
