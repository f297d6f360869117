//! The Converse body and the stream decoder, table-tested; the frames come from the
//! fixtures in fixtures/bedrock/, encoded as the service frames them.

use super::*;
use crate::provider::frames::{Frames, Framing};
use crate::provider::tests_support::{model, request, tool, tool_round_messages, user};

/// A fixture's events framed as `application/vnd.amazon.eventstream`.
fn framed(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/bedrock")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        let payload = v["payload"].to_string();
        let headers: Vec<(&str, &str)> = match v["exception"].as_str() {
            Some(kind) => vec![
                (":exception-type", kind),
                (":content-type", "application/json"),
                (":message-type", "exception"),
            ],
            None => vec![
                (":event-type", v["event"].as_str().expect("event")),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
        };
        out.extend(event_stream::encode(&headers, payload.as_bytes()));
    }
    out
}

/// Replays a fixture through the framing and the decoder in 7-byte reads.
fn run(name: &str) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
    let bytes = framed(name);
    let mut frames = Frames::new(Framing::AwsEventStream);
    let mut decoder: Box<dyn StreamDecoder> = Box::new(Decoder::new());
    let mut seen = Vec::new();
    let mut events = Vec::new();
    for chunk in bytes.chunks(7) {
        frames.feed(chunk, &mut events).expect("frames");
        for e in events.drain(..) {
            match decoder.on_event(&e, &mut |ev| seen.push(ev)) {
                Ok(true) => return (decoder.finish(), seen),
                Ok(false) => {}
                Err(err) => return (Err(err), seen),
            }
        }
    }
    frames.finish(&mut events).expect("whole");
    (decoder.finish(), seen)
}

#[test]
fn a_tool_turn_decodes_with_signed_reasoning_and_usage() {
    let (reply, events) = run("tool-turn.jsonl");
    let reply = reply.expect("a reply");
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    assert_eq!(reply.message.text, "I'll run it.");
    assert_eq!(
        reply.message.thinking,
        "The user wants the check run. I'll use bash."
    );
    assert_eq!(
        reply.message.reasoning_blocks,
        vec![ReasoningBlock::Signed {
            thinking: "The user wants the check run. I'll use bash.".into(),
            signature: "EqoBCkgIBxABGAIiQL2bedrock-test-signature".into()
        }]
    );
    assert_eq!(
        reply.message.tool_calls,
        vec![ToolCall {
            id: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q".into(),
            name: "bash".into(),
            arguments: json!({"command": "echo bedrock-ok"}),
        }]
    );
    assert_eq!(
        reply.usage,
        Usage {
            input: 1520,
            output: 88,
            cache_read: 0,
            cache_write: 1404
        }
    );
    let id = "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q".to_owned();
    assert_eq!(
        events,
        vec![
            StreamEvent::Thinking("The user wants the check run.".into()),
            StreamEvent::Thinking(" I'll use bash.".into()),
            StreamEvent::Text("I'll run it.".into()),
            StreamEvent::ToolCallStart {
                id: id.clone(),
                name: "bash".into()
            },
            StreamEvent::ToolCallDelta {
                id: id.clone(),
                delta: "{\"command\": \"echo".into()
            },
            StreamEvent::ToolCallDelta {
                id,
                delta: " bedrock-ok\"}".into()
            },
        ]
    );
}

#[test]
fn stops_errors_and_exceptions() {
    let r = run("redacted-max-tokens.jsonl").0.expect("a reply");
    assert_eq!(r.finish, FinishReason::Length);
    assert_eq!(
        r.message.reasoning_blocks,
        vec![ReasoningBlock::Redacted {
            data: "RW1zS0FoZ0JFZ3kzdmEzcHppeA==".into()
        }]
    );
    assert_eq!(
        run("after-tool.jsonl").0.expect("reply").message.text,
        "It printed bedrock-ok. Wörld ✓"
    );
    // A throttling exception mid-stream is transient: the HTTP layer makes the call again.
    assert_eq!(
        run("throttled-mid-stream.jsonl").0.unwrap_err(),
        ProviderError::Status {
            status: 429,
            message: "Too many tokens, please wait before trying again. (throttlingException)"
                .into()
        }
    );
    // (event, payload, the error)
    let cases: &[(&str, &str, ProviderError)] = &[
        (
            "validationException",
            r#"{"message":"messages.1: bad"}"#,
            ProviderError::Stream("messages.1: bad (validationException)".into()),
        ),
        (
            "modelStreamErrorException",
            r#"{"message":"stream broke"}"#,
            ProviderError::Status {
                status: 500,
                message: "stream broke (modelStreamErrorException)".into(),
            },
        ),
        (
            "serviceUnavailableException",
            r#"{"message":"down"}"#,
            ProviderError::Status {
                status: 503,
                message: "down (serviceUnavailableException)".into(),
            },
        ),
        (
            "error",
            r#"{"code":"InternalFailure","message":"broke"}"#,
            ProviderError::Stream("broke (InternalFailure)".into()),
        ),
        (
            "contentBlockDelta",
            "{not json",
            ProviderError::Stream(String::new()),
        ),
    ];
    for (event, data, want) in cases {
        let mut d = Decoder::new();
        let e = SseEvent {
            event: (*event).into(),
            data: (*data).into(),
        };
        let got = d.on_event(&e, &mut |_| {}).unwrap_err();
        match want {
            ProviderError::Stream(m) if m.is_empty() => {
                assert!(got.to_string().contains("invalid JSON"), "{got}")
            }
            _ => assert_eq!(&got, want, "{event}"),
        }
    }
    // A stream cut before messageStop, and a stop for a guardrail.
    let mut d = Box::new(Decoder::new());
    let start = SseEvent {
        event: "messageStart".into(),
        data: r#"{"role":"assistant"}"#.into(),
    };
    assert_eq!(d.on_event(&start, &mut |_| {}), Ok(false));
    assert_eq!(d.finish().unwrap_err(), ProviderError::ended_early());
    let mut d = Box::new(Decoder::new());
    let stop = SseEvent {
        event: "messageStop".into(),
        data: r#"{"stopReason":"guardrail_intervened"}"#.into(),
    };
    d.on_event(&stop, &mut |_| {}).expect("stop");
    assert_eq!(
        d.finish().unwrap_err(),
        ProviderError::Stream("Bedrock stopped the reply: guardrail_intervened".into())
    );
}

#[test]
fn the_converse_body() {
    let claude = |id: &str| ModelDef {
        id: id.into(),
        ..model(id, true, true)
    };
    let mut messages = tool_round_messages();
    let Message::Assistant(a) = &mut messages[1] else {
        panic!("the reply")
    };
    a.reasoning_blocks = vec![
        ReasoningBlock::Signed {
            thinking: "hmm".into(),
            signature: "sig".into(),
        },
        ReasoningBlock::Redacted { data: "b64".into() },
    ];
    a.tool_calls[0].id = "call_1|fc_2".into();
    let tools = [tool(json!({"type": "object"}))];
    let sonnet = claude("us.anthropic.claude-sonnet-4-5-20250929-v1:0");
    let b = body(&sonnet, &request(&messages, &tools, Thinking::Medium));
    assert_eq!(
        b["system"],
        json!([{"text": "sys"}, {"cachePoint": {"type": "default"}}])
    );
    assert_eq!(
        b["toolConfig"],
        json!({"tools": [{"toolSpec": {"name": "t", "description": "d",
                                        "inputSchema": {"json": {"type": "object"}}}}]})
    );
    assert_eq!(b["inferenceConfig"], json!({"maxTokens": 32000}));
    assert_eq!(
        b["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 8192, "display": "summarized"},
               "anthropic_beta": ["interleaved-thinking-2025-05-14"]})
    );
    let msgs = b["messages"].as_array().expect("messages");
    assert_eq!(
        msgs.len(),
        3,
        "results and the next prompt are one user turn"
    );
    assert_eq!(
        msgs[0]["content"][0],
        json!({"image": {"format": "png", "source": {"bytes": "AAAA"}}})
    );
    let reply = &msgs[1]["content"];
    assert_eq!(
        reply[0],
        json!({"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig"}}})
    );
    assert_eq!(
        reply[1],
        json!({"reasoningContent": {"redactedContent": "b64"}})
    );
    assert_eq!(reply[2], json!({"text": "calling"}));
    assert_eq!(
        reply[3],
        json!({"toolUse": {"toolUseId": "call_1_fc_2", "name": "t", "input": {"x": 1}}})
    );
    assert_eq!(
        reply[4]["toolUse"]["input"],
        json!({}),
        "malformed arguments"
    );
    let results = &msgs[2]["content"];
    assert_eq!(results[0]["toolResult"]["toolUseId"], "c1");
    assert_eq!(results[0]["toolResult"]["status"], "success");
    assert_eq!(
        results[0]["toolResult"]["content"][1]["image"]["format"],
        "png"
    );
    assert_eq!(results[1]["toolResult"]["status"], "error");
    assert_eq!(
        results[1]["toolResult"]["content"],
        json!([{"text": "(tool error)"}])
    );
    assert_eq!(results[2], json!({"text": "next"}));
    assert_eq!(
        results[3],
        json!({"cachePoint": {"type": "default"}}),
        "the newest user message ends with a cache point"
    );

    // (model, thinking, additionalModelRequestFields, maxTokens)
    let cases = [
        (
            claude("us.anthropic.claude-opus-4-6-v1"),
            Thinking::High,
            json!({"thinking": {"type": "adaptive", "display": "summarized"},
                   "output_config": {"effort": "high"}}),
            32000,
        ),
        (
            claude("global.anthropic.claude-sonnet-4-6"),
            Thinking::Minimal,
            json!({"thinking": {"type": "adaptive", "display": "summarized"},
                   "output_config": {"effort": "low"}}),
            32000,
        ),
        (
            claude("us.anthropic.claude-haiku-4-5-20251001-v1:0"),
            Thinking::Off,
            Value::Null,
            32000,
        ),
        (
            model("amazon.nova-pro-v1:0", true, true),
            Thinking::High,
            Value::Null,
            32000,
        ),
    ];
    for (m, t, fields, max) in cases {
        let b = body(&m, &request(&[user("hi")], &[], t));
        assert_eq!(b["additionalModelRequestFields"], fields, "{} {t:?}", m.id);
        assert_eq!(b["inferenceConfig"]["maxTokens"], max, "{}", m.id);
        assert!(b.get("toolConfig").is_none());
    }
    // A Nova model: no cache points; a summary's budget.
    let nova = model("amazon.nova-pro-v1:0", false, false);
    let mut req = request(&messages, &[], Thinking::Off);
    req.max_tokens = Some(500);
    let b = body(&nova, &req);
    assert_eq!(b["system"], json!([{"text": "sys"}]));
    assert_eq!(b["inferenceConfig"]["maxTokens"], 500);
    assert!(!b.to_string().contains("cachePoint"));
    assert!(
        b["messages"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("omitted")),
        "a text-only model reads a placeholder: {}",
        b["messages"][0]
    );
    // Tool calls in the conversation but no tools in the request: Bedrock still wants them
    // declared.
    assert_eq!(
        b["toolConfig"]["tools"][0]["toolSpec"]["name"], "t",
        "{}",
        b["toolConfig"]
    );
}

#[test]
fn urls_signatures_and_auth_failures() {
    for (id, want) in [
        ("tooluse_kZJM-x", "tooluse_kZJM-x"),
        ("call_1|fc_2", "call_1_fc_2"),
        ("", "_"),
    ] {
        assert_eq!(tool_use_id(id), want);
    }
    assert_eq!(tool_use_id(&"x".repeat(80)).len(), 64);
    assert_eq!(
        url(
            "https://bedrock-runtime.us-east-1.amazonaws.com/",
            "us.anthropic.claude-haiku-4-5-20251001-v1:0"
        ),
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/converse-stream"
    );
    assert_eq!(
        url("http://127.0.0.1:9", "arn:aws:bedrock:us-east-1:1:application-inference-profile/x"),
        "http://127.0.0.1:9/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fx/converse-stream"
    );
    assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
    assert_eq!(
        split_url("https://h.example:443/a/b?x=1"),
        ("h.example".into(), "/a/b".into(), "x=1".into())
    );
    assert_eq!(
        split_url("http://127.0.0.1:8080/m"),
        ("127.0.0.1:8080".into(), "/m".into(), String::new())
    );
    let credentials = AwsCredentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: Some("tok".into()),
    };
    let h = signature_headers(
        "http://127.0.0.1:8080/model/m%3A0/converse-stream",
        b"{}",
        &credentials,
        "eu-west-3",
        1_440_938_160,
    );
    let names: Vec<&str> = h.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "host",
            "x-amz-date",
            "x-amz-security-token",
            "authorization"
        ]
    );
    assert_eq!(h[0].1, "127.0.0.1:8080");
    let auth = &h[3].1;
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/eu-west-3/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature="),
        "{auth}"
    );
    // Another body is another signature.
    let other = signature_headers(
        "http://127.0.0.1:8080/model/m%3A0/converse-stream",
        b"{ }",
        &credentials,
        "eu-west-3",
        1_440_938_160,
    );
    assert_ne!(other[3], h[3]);
    assert!(!headers(&Auth::Bearer("k".into()))
        .iter()
        .any(|(n, _)| n == "x-amz-date"));
    assert!(
        headers(&Auth::Bearer("k".into())).contains(&("authorization".into(), "Bearer k".into()))
    );

    let refused = ProviderError::Status {
        status: 403,
        message: "The security token included in the request is invalid.".into(),
    };
    let sig = Auth::SigV4 {
        credentials,
        source: "the environment (AWS_ACCESS_KEY_ID)".into(),
    };
    assert_eq!(
        auth_failure(refused.clone(), &sig).to_string(),
        "403 AWS authentication failed: The security token included in the request is invalid. (credentials from the environment (AWS_ACCESS_KEY_ID))"
    );
    let throttled = ProviderError::Status {
        status: 429,
        message: "slow".into(),
    };
    assert_eq!(auth_failure(throttled.clone(), &sig), throttled);
}

#[test]
fn settings_thinking_budgets_win_for_their_levels() {
    let configured = crate::config::settings::ThinkingBudgets {
        low: Some(3000),
        high: Some(50_000),
        ..Default::default()
    };
    // (level, budget with the settings, budget without)
    let cases = [
        (Thinking::Off, None, None),
        (Thinking::Minimal, Some(1024), Some(1024)),
        (Thinking::Low, Some(3000), Some(2048)),
        (Thinking::High, Some(50_000), Some(16_384)),
        (Thinking::Max, Some(16_384), Some(16_384)),
    ];
    for (t, with, without) in cases {
        assert_eq!(super::budget(t, &configured), with, "{t:?}");
        assert_eq!(super::budget(t, &Default::default()), without, "{t:?}");
    }
}
