//! The OpenAI Responses API (`api: "openai-responses"`) against the loopback model server
//! playing recorded Responses streams: a reasoning turn with a function call that runs a real
//! tool, the reasoning carried into the next request, errors, retries and cancel.

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, End, LlmServer};
use crate::support::model::*;
use crate::support::*;

/// An agent on a models.json provider speaking the Responses API at `server`, with a
/// reasoning model.
fn responses(replies: Vec<Canned>) -> (LlmServer, Setup) {
    let server = LlmServer::start(replies);
    let dir = TempDir::new("responses");
    let models = json!({"providers": {"intercept": {
        "baseUrl": format!("{}/v1", server.url()), "api": "openai-responses", "apiKey": "test-key",
        "models": [{"id": "gpt-test", "reasoning": true, "input": ["text", "image"],
                    "contextWindow": 400000, "maxTokens": 128000}]}}});
    dir.write("models.json", &models.to_string());
    let setup = spawn_in(dir, "gpt-test", &[], false);
    (server, setup)
}

fn thoughts(a: &Agent) -> String {
    a.updates()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

fn items_of<'a>(input: &'a [Value], kind: &str) -> Vec<&'a Value> {
    input.iter().filter(|i| i["type"] == kind).collect()
}

#[test]
fn a_responses_stream_with_reasoning_a_function_call_and_text_completes_a_turn() {
    let (server, mut s) = responses(vec![
        Canned::sse("responses-reasoning-tools.sse"),
        Canned::sse("responses-after-tool.sse"),
    ]);
    let r = ask(&mut s.agent, "run the check");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(
        thoughts(&s.agent),
        "**Planning the check**\n\nI should run the command.\n\nThen report."
    );
    assert_eq!(
        s.agent.text(),
        "I'll run it.It printed responses-ok. Wörld ✓"
    );
    // The bash call ran and reached the client as a completed tool call.
    let updates = s.agent.updates();
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update"
                && u["toolCallId"] == "call_test1"
                && u["status"] == "completed"),
        "{updates:?}"
    );

    let reqs = server.posts();
    assert_eq!(reqs.len(), 2);
    let first = &reqs[0];
    assert_eq!(first.path, "/v1/responses");
    assert_eq!(first.header("authorization"), Some("Bearer test-key"));
    let b = &first.body;
    assert_eq!(b["model"], "gpt-test");
    assert_eq!(b["stream"], true);
    assert_eq!(b["store"], false);
    assert!(b["instructions"].as_str().is_some_and(|i| !i.is_empty()));
    assert_eq!(
        b["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(b["max_output_tokens"], 32_000);
    let tools = b["tools"].as_array().expect("tools");
    assert!(tools
        .iter()
        .all(|t| t["type"] == "function" && t["strict"] == false));
    assert!(tools.iter().any(|t| t["name"] == "bash"), "{tools:?}");
    assert_eq!(
        b["input"],
        json!([{"role": "user", "content": [{"type": "input_text", "text": "run the check"}]}])
    );

    // The second request replays the reply's items verbatim, then the tool's output.
    let input = reqs[1].body["input"].as_array().expect("input").clone();
    let reasoning = items_of(&input, "reasoning");
    assert_eq!(reasoning.len(), 1, "{input:?}");
    assert_eq!(reasoning[0]["id"], "rs_test1");
    assert_eq!(
        reasoning[0]["encrypted_content"],
        "gAAAAABpTestEncryptedReasoning0123456789abcdefghijklmnopqrstuvwxyz=="
    );
    let call = items_of(&input, "function_call");
    assert_eq!(call.len(), 1);
    assert_eq!(call[0]["id"], "fc_test1");
    assert_eq!(call[0]["call_id"], "call_test1");
    assert_eq!(call[0]["arguments"], "{\"command\":\"echo responses-ok\"}");
    let outputs = items_of(&input, "function_call_output");
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0]["call_id"], "call_test1");
    assert!(
        outputs[0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("responses-ok")),
        "{}",
        outputs[0]
    );
    let position = |v: &Value| input.iter().position(|i| i == v).expect("in input");
    assert!(position(reasoning[0]) < position(call[0]));
    assert!(position(call[0]) < position(outputs[0]));
    assert!(s.agent.finish().success());
}

#[test]
fn responses_errors_fail_the_prompt_with_the_providers_words() {
    let (_server, mut s) = responses(vec![Canned::sse("responses-failed.sse")]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(
        details.contains("The model failed in test (server_error)"),
        "{details}"
    );
    let (server, mut s) = responses(vec![Canned::sse("responses-error-event.sse")]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(
        details.contains("Upstream overloaded in test (server_error)"),
        "{details}"
    );
    assert_eq!(
        server.posts().len(),
        1,
        "an error in the stream is not retried"
    );
    let (server, mut s) = responses(vec![Canned::error(401, "error-401.json")]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.contains("401 unauthorized in test"), "{details}");
    assert_eq!(server.posts().len(), 1);
}

#[test]
fn responses_retries_a_500_and_ends_on_max_output_tokens() {
    let (server, mut s) = responses(vec![
        Canned::error(500, "error-500.json"),
        Canned::sse("responses-incomplete.sse"),
    ]);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "max_tokens", "{r}");
    assert_eq!(s.agent.text(), "Cut sh");
    assert_eq!(server.posts().len(), 2);
    assert!(stderr_eventually(&s.agent, "retry 1/3"));
}

#[test]
fn cancel_during_a_responses_stream_answers_cancelled_and_closes_the_socket() {
    let (server, mut s) = responses(vec![Canned::sse("responses-partial.sse").ending(End::Stall)]);
    s.agent.handshake();
    let id = s.agent.prompt("hi");
    s.agent.wait_for("the first delta", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    s.agent.cancel();
    let r = s.agent.response(&id);
    assert_eq!(r["result"], json!({"stopReason": "cancelled"}), "{r}");
    assert!(
        server.wait_closed(TIMEOUT),
        "the server sees the connection closed"
    );
    assert_eq!(s.agent.text(), "Partial answer");
}

#[test]
fn a_dropped_responses_stream_fails_the_prompt_without_a_retry() {
    let (server, mut s) = responses(vec![Canned::sse("responses-partial.sse").ending(End::Drop)]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(
        details.contains("dropped") || details.contains("ended before"),
        "{details}"
    );
    assert_eq!(s.agent.text(), "Partial answer");
    assert_eq!(
        server.posts().len(),
        1,
        "no retry once deltas were streamed"
    );
}

/// Throughput of a 20,000-delta Responses stream to the client's stdout (compare
/// `provider::bench_stream_throughput` for Chat Completions): run with
/// `cargo test --release --test integration responses::bench_responses_stream_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_responses_stream_throughput() {
    const N: usize = 20_000;
    let mut body = String::new();
    for i in 0..N {
        let delta = json!({"type": "response.output_text.delta", "sequence_number": i,
            "item_id": "msg_1", "output_index": 0, "content_index": 0,
            "delta": format!("t{i} "), "logprobs": []});
        body.push_str(&format!(
            "event: response.output_text.delta\ndata: {delta}\n\n"
        ));
    }
    body.push_str(
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n",
    );
    let server = LlmServer::start(vec![Canned::sse_bytes(body.into_bytes())]);
    let dir = TempDir::new("responses-bench");
    let models = json!({"providers": {"intercept": {
        "baseUrl": format!("{}/v1", server.url()), "api": "openai-responses", "apiKey": "k",
        "models": [{"id": "m"}]}}});
    dir.write("models.json", &models.to_string());
    // Schema validation of 20,000 frames would measure the test harness, not the agent.
    let mut s = spawn_in(dir, "m", &[], true);
    s.agent.handshake();
    let t = std::time::Instant::now();
    let id = s.agent.prompt("go");
    let r = s.agent.response(&id);
    let elapsed = t.elapsed();
    assert_eq!(stop_reason(&r), "end_turn");
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "{N} Responses deltas in {elapsed:?}: {:.0} deltas/s\n",
            N as f64 / elapsed.as_secs_f64()
        )
        .as_bytes(),
    );
}
