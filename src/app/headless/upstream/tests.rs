use super::*;

fn clock() -> String {
    "2024-01-01T00:00:00.000Z".to_owned()
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e["assistantMessageEvent"]["type"] {
            Value::String(t) => format!("message_update:{t}"),
            _ => e["type"].as_str().unwrap().to_owned(),
        })
        .collect()
}

fn text(kind: &str, t: &str) -> Value {
    json!({"sessionUpdate": kind, "content": {"type": "text", "text": t},
        "messageId": "prime-agent-assistant-1"})
}

/// Each kind of ACP update and the upstream events it becomes, after `start`.
#[test]
fn each_update_kind_maps_to_upstream_events() {
    let output = |t: &str| json!([{"type": "content", "content": {"type": "text", "text": t}}]);
    let cases: Vec<(&str, Vec<Value>, Vec<&str>)> = vec![
        (
            "thinking then text",
            vec![
                text("agent_thought_chunk", "hm"),
                text("agent_message_chunk", "hi"),
            ],
            vec![
                "message_start",
                "message_update:thinking_start",
                "message_update:thinking_delta",
                "message_update:thinking_end",
                "message_update:text_start",
                "message_update:text_delta",
            ],
        ),
        (
            "a tool call: announced, run, streamed, ended",
            vec![
                json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls",
                    "kind": "execute", "status": "pending", "rawInput": {"command": "ls"}}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                    "status": "in_progress"}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                    "status": "in_progress", "content": output("a"), "rawOutput": ""}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                    "status": "completed", "content": output("a\n"),
                    "rawOutput": {"output": "a\n", "isError": false}}),
                json!({"sessionUpdate": "usage_update", "used": 10, "size": 100}),
            ],
            vec![
                "message_start",
                "message_update:toolcall_start",
                "message_update:toolcall_end",
                "message_end",
                "tool_execution_start",
                "tool_execution_update",
                "tool_execution_end",
                "message_start",
                "message_end",
                "turn_end",
            ],
        ),
        (
            "a user shell run",
            vec![
                json!({"sessionUpdate": "tool_call", "toolCallId": "prime-agent-bash-1",
                    "status": "in_progress", "rawInput": {"command": "ls"}}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "prime-agent-bash-1",
                    "status": "completed", "content": output("x")}),
            ],
            vec!["message_start", "message_end"],
        ),
        (
            "retries and a compaction",
            vec![
                json!({"sessionUpdate": "session_info_update", "_meta": {NAMESPACE: {"autoRetry":
                    {"phase": "waiting", "attempt": 1, "maxAttempts": 3, "delayMs": 5,
                     "errorMessage": "503"}}}}),
                json!({"sessionUpdate": "session_info_update", "_meta": {NAMESPACE: {"autoRetry":
                    {"phase": "recovered", "attempt": 1}}}}),
                json!({"sessionUpdate": "session_info_update", "_meta": {NAMESPACE: {"compaction":
                    {"tokensBefore": 9, "summary": "s", "reason": "threshold"}}}}),
            ],
            vec![
                "auto_retry_start",
                "auto_retry_end",
                "compaction_start",
                "compaction_end",
            ],
        ),
        (
            "updates upstream has no event for",
            vec![
                json!({"sessionUpdate": "plan", "entries": []}),
                json!({"sessionUpdate": "current_mode_update", "currentModeId": "ask"}),
            ],
            vec![],
        ),
    ];
    for (name, updates, want) in cases {
        let mut s = Stream::new(clock);
        assert_eq!(
            types(&s.start(&json!([{"type": "text", "text": "go"}]))),
            ["agent_start", "turn_start", "message_start", "message_end"],
        );
        let got: Vec<Value> = updates.iter().flat_map(|u| s.update(u)).collect();
        assert_eq!(types(&got), want, "{name}");
    }
}

#[test]
fn a_tool_turn_carries_ids_names_args_results_and_roles() {
    let mut s = Stream::new(clock);
    let mut ev = s.start(&json!([{"type": "text", "text": "go"}]));
    for u in [
        text("agent_message_chunk", "let me look"),
        json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read a",
            "kind": "read", "status": "pending", "rawInput": {"path": "a"}}),
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed",
            "rawOutput": {"output": "no such file", "isError": true}}),
        json!({"sessionUpdate": "usage_update", "used": 10, "size": 100}),
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"},
            "messageId": "prime-agent-assistant-2"}),
        json!({"sessionUpdate": "usage_update", "used": 12, "size": 100}),
    ] {
        ev.extend(s.update(&u));
    }
    ev.extend(s.finish(&Ok(json!({"stopReason": "end_turn"}))));
    let of = |t: &'static str| ev.iter().filter(move |e| e["type"] == t);
    let start = of("tool_execution_start").next().unwrap();
    assert_eq!(
        start,
        &json!({"type": "tool_execution_start", "toolCallId": "c1", "toolName": "read",
            "args": {"path": "a"}})
    );
    let end = of("tool_execution_end").next().unwrap();
    assert_eq!(
        end,
        &json!({"type": "tool_execution_end", "toolCallId": "c1", "toolName": "read",
            "result": {"content": [{"type": "text", "text": "no such file"}]}, "isError": true})
    );
    let roles: Vec<&Value> = of("message_end").map(|e| &e["message"]["role"]).collect();
    assert_eq!(roles, ["user", "assistant", "toolResult", "assistant"]);
    let first = &of("message_end").nth(1).unwrap()["message"];
    assert_eq!(first["stopReason"], "toolUse");
    assert_eq!(
        first["content"],
        json!([{"type": "text", "text": "let me look"},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a"}}])
    );
    let turn_ends: Vec<&Value> = of("turn_end").collect();
    assert_eq!(turn_ends.len(), 2);
    assert_eq!(turn_ends[0]["toolResults"][0]["toolCallId"], "c1");
    assert_eq!(turn_ends[1]["message"]["content"][0]["text"], "done");
    let types = types(&ev);
    assert_eq!(types.iter().filter(|t| *t == "turn_start").count(), 2);
    assert_eq!(types.last().unwrap(), "agent_end");
    assert_eq!(ev.last().unwrap()["messages"].as_array().unwrap().len(), 4);
}

#[test]
fn a_failed_prompt_ends_with_an_error_message() {
    let mut s = Stream::new(clock);
    let mut ev = s.start(&json!([{"type": "text", "text": "go"}]));
    ev.extend(s.finish(&Err("503 overloaded".to_owned())));
    let end = ev
        .iter()
        .rev()
        .find(|e| e["type"] == "message_end")
        .unwrap();
    assert_eq!(end["message"]["stopReason"], "error");
    assert_eq!(end["message"]["errorMessage"], "503 overloaded");
    assert_eq!(
        types(&ev)[ev.len() - 2..],
        ["turn_end".to_owned(), "agent_end".to_owned()]
    );
}

#[test]
fn tool_names_from_what_acp_shows() {
    let cases = [
        (
            json!({"kind": "execute", "rawInput": {"code": "1"}, "title": "1"}),
            "ipython",
        ),
        (
            json!({"kind": "execute", "rawInput": {"command": "ls"}, "title": "ls"}),
            "bash",
        ),
        (
            json!({"kind": "edit", "rawInput": {"path": "a", "content": ""}}),
            "write",
        ),
        (
            json!({"kind": "edit", "rawInput": {"path": "a", "edits": []}}),
            "edit",
        ),
        (json!({"kind": "think", "rawInput": {}}), "todo"),
        (
            json!({"kind": "other", "rawInput": {"x": 1}, "title": "rlm"}),
            "rlm",
        ),
        // Shown by name while its arguments stream.
        (json!({"kind": "execute", "title": "bash"}), "bash"),
    ];
    for (update, want) in cases {
        assert_eq!(tool_name(&update), want, "{update}");
    }
}
