//! Real providers against a loopback model server: the request the agent sends, the stream it
//! relays, and every way a model call can fail (HTTP errors, drops, stalls, cancellation).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, End, LlmServer};
use crate::support::model::*;
use crate::support::*;

fn openai(replies: Vec<Canned>) -> (LlmServer, Setup) {
    let server = LlmServer::start(replies);
    let setup = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    (server, setup)
}

fn anthropic(replies: Vec<Canned>) -> (LlmServer, Setup) {
    let server = LlmServer::start(replies);
    let setup = spawn_with(&server, "anthropic-messages", "claude-test", &[]);
    (server, setup)
}

fn thoughts(a: &Agent) -> String {
    a.updates()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn openai_text_streams_as_message_chunks_and_the_request_is_complete() {
    let (server, mut s) = openai(vec![Canned::sse("openai-text.sse")]);
    let r = ask(&mut s.agent, "say hello");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.text(), "Hello, wörld!");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let q = &reqs[0];
    assert_eq!(q.method, "POST");
    assert_eq!(q.path, "/v1/chat/completions");
    assert_eq!(q.header("authorization"), Some("Bearer test-key"));
    assert_eq!(q.body["model"], "cold/test-model");
    assert_eq!(q.body["stream"], true);
    assert_eq!(q.body["stream_options"]["include_usage"], true);
    assert!(q.body["max_completion_tokens"].as_u64().is_some());
    let messages = q.body["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages.last().expect("user")["role"], "user");
    assert_eq!(messages.last().expect("user")["content"], "say hello");
    // Tools are offered as function tools whenever the agent has any.
    if let Some(tools) = q.body.get("tools") {
        assert!(tools
            .as_array()
            .expect("array")
            .iter()
            .all(|t| t["type"] == "function"));
    }
    assert!(s.agent.finish().success());
}

#[test]
fn openai_reasoning_arrives_as_thought_chunks() {
    let (_server, mut s) = openai(vec![Canned::sse("openai-reasoning.sse")]);
    let r = ask(&mut s.agent, "2+2?");
    assert_eq!(stop_reason(&r), "end_turn");
    assert_eq!(thoughts(&s.agent), "Let me think.");
    assert_eq!(s.agent.text(), "Answer: 4");
}

#[test]
fn image_prompt_reaches_the_server_as_a_data_uri() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let mut s = spawn_with(&server, "openai-completions", "vision-model", &[]);
    s.agent.handshake();
    let id = s.agent.prompt_blocks(json!([
        {"type": "text", "text": "what is this?"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    ]));
    let r = s.agent.response(&id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let body = &server.requests()[0].body;
    let user = body["messages"]
        .as_array()
        .expect("m")
        .last()
        .cloned()
        .expect("user");
    let parts = user["content"].as_array().expect("content parts");
    assert!(
        parts.iter().any(|p| p["type"] == "image_url"
            && p["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="),
        "{user}"
    );
}

#[test]
fn http_401_fails_the_prompt_with_the_providers_words_and_exits_cleanly() {
    let (server, mut s) = openai(vec![Canned::error(401, "error-401.json")]);
    let r = ask(&mut s.agent, "hi");
    let details = failure(&r);
    assert!(details.contains("401"), "{details}");
    assert!(details.contains("unauthorized in test"), "{details}");
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
    s.agent.close_stdin();
    let status = s
        .agent
        .wait_exit(Duration::from_secs(10))
        .expect("exits within 10 s after stdin closes");
    assert!(status.success());
}

#[test]
fn a_500_is_retried_and_the_second_attempt_succeeds() {
    let (server, mut s) = openai(vec![
        Canned::error(500, "error-500.json"),
        Canned::sse("openai-text.sse"),
    ]);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(server.requests().len(), 2);
    assert!(stderr_eventually(&s.agent, "retry 1/3"));
}

#[test]
fn a_429_honours_retry_after_and_gives_up_after_three_retries() {
    let server = LlmServer::start(vec![
        Canned::error(429, "error-429.json").header("retry-after", "0")
    ]);
    let dir = TempDir::new("provider-429");
    dir.write("models.json", &models_json(&server, "openai-completions"));
    // Without the usage wait (on by default) the retries' end is the call's end.
    let off = json!({"retry": {"provider": {"waitForUsage": {"enabled": false}}}});
    dir.write("settings.json", &off.to_string());
    let mut s = spawn_in(dir, "cold/test-model", &[], false);
    let r = ask(&mut s.agent, "hi");
    let details = failure(&r);
    assert!(details.contains("429 rate limited in test"), "{details}");
    assert_eq!(server.requests().len(), 4, "one call plus three retries");
}

/// An agent on `intercept` at `server` with `settings` (and `models` more providers).
fn with_settings(server: &LlmServer, settings: Value, models: Option<Value>) -> Setup {
    let dir = TempDir::new("provider-usage");
    let models = models.unwrap_or_else(|| {
        serde_json::from_str(&models_json(server, "openai-completions")).expect("json")
    });
    dir.write("models.json", &models.to_string());
    dir.write("settings.json", &settings.to_string());
    spawn_in(dir, "cold/test-model", &[], false)
}

fn is_usage_notice(u: &Value) -> bool {
    let title = "Waiting for the provider's usage limit to reset";
    u["title"] == title || ns(u)["notice"]["title"] == title
}

/// `retry.provider.waitForUsage`: a 429 that names a reset longer than
/// `retry.provider.maxRetryDelayMs` is waited for (within `maxWaitMs`), and the client hears
/// so before the answer: a notice, then an `autoRetry` wait with reason `usage`.
#[test]
fn a_usage_limit_is_waited_out_and_the_client_is_told_before_the_answer() {
    let server = LlmServer::start(vec![
        Canned::error(429, "error-429.json").header("retry-after", "0.05"),
        Canned::sse("openai-text.sse"),
    ]);
    let settings = json!({"retry": {"provider": {"maxRetryDelayMs": 10}}});
    let mut s = with_settings(&server, settings, None);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.text(), "Hello, wörld!");
    assert_eq!(server.posts().len(), 2);
    let updates = s.agent.updates();
    let at = |pred: &dyn Fn(&Value) -> bool| {
        updates
            .iter()
            .position(pred)
            .unwrap_or_else(|| panic!("missing update: {updates:?}"))
    };
    let notice = at(&is_usage_notice);
    let waiting = at(&|u| ns(u)["autoRetry"]["reason"] == "usage");
    let recovered = at(&|u| ns(u)["autoRetry"]["phase"] == "recovered");
    let text = at(&|u| u["sessionUpdate"] == "agent_message_chunk");
    assert!(
        notice < waiting && waiting < recovered && recovered < text,
        "{updates:?}"
    );
    let wait = &ns(&updates[waiting])["autoRetry"];
    assert_eq!(
        (
            &wait["phase"],
            &wait["attempt"],
            &wait["maxAttempts"],
            &wait["delayMs"]
        ),
        (&json!("waiting"), &json!(1), &json!(30), &json!(50)),
        "{wait}"
    );
    assert!(wait["errorMessage"]
        .as_str()
        .unwrap()
        .contains("429 rate limited in test"));
}

/// A cancel during a usage wait ends the prompt at once: the wait is a sleep the cancel's
/// hook wakes (the server's ten minutes would outlast the test's own timeout otherwise).
#[test]
fn a_cancel_during_a_usage_wait_ends_the_prompt() {
    let server = LlmServer::start(vec![
        Canned::error(429, "error-429.json").header("retry-after", "600"),
        Canned::sse("openai-text.sse"),
    ]);
    let mut s = with_settings(&server, json!({}), None);
    let a = &mut s.agent;
    a.handshake();
    let id = a.prompt("hi");
    a.wait_for("the usage wait", |f| {
        ns(&f["params"]["update"])["autoRetry"]["reason"] == "usage"
    });
    a.cancel();
    let r = a.response(&id);
    assert_eq!(stop_reason(&r), "cancelled", "{r}");
    assert_eq!(server.posts().len(), 1, "no call after the cancel");
}

/// A reset beyond `maxWaitMs` is not waited for: the call fails at once saying why, or goes to
/// the backup model when one is set.
#[test]
fn a_usage_limit_beyond_the_bound_fails_at_once_or_fails_over() {
    let limited = || Canned::error(429, "error-429.json").header("retry-after", "7200");
    let server = LlmServer::start(vec![limited()]);
    let mut s = with_settings(&server, json!({}), None);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(
        details.contains("429 rate limited in test; Provider reported recovery in 2.0h, beyond the configured wait bound of 15m (retry.provider.waitForUsage.maxWaitMs)"),
        "{details}"
    );
    assert_eq!(server.posts().len(), 1, "neither retried nor waited for");

    let primary = LlmServer::start(vec![limited()]);
    let backup = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let provider = |server: &LlmServer, id: &str| {
        json!({"baseUrl": format!("{}/v1", server.url()), "api": "openai-completions",
            "apiKey": "test-key", "models": [{"id": id, "input": ["text"]}]})
    };
    let models = json!({"providers": {"intercept": provider(&primary, "cold/test-model"),
        "backup": provider(&backup, "b-model")}});
    let settings = json!({"providerBackupModel": "backup/b-model"});
    let mut s = with_settings(&primary, settings, Some(models));
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.text(), "Hello, wörld!");
    assert_eq!((primary.posts().len(), backup.posts().len()), (1, 1));
}

/// `retry.enabled: false`: no retry and no usage wait, one call.
#[test]
fn without_retries_a_usage_limit_is_not_waited_for_either() {
    let server = LlmServer::start(vec![
        Canned::error(429, "error-429.json").header("retry-after", "0")
    ]);
    let mut s = with_settings(&server, json!({"retry": {"enabled": false}}), None);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.contains("429 rate limited in test"), "{details}");
    assert_eq!(server.posts().len(), 1);
}

/// Without a named reset the wait pings with growing delays, and gives up after
/// `maxAttempts` pings with upstream's words.
#[test]
fn blind_usage_pings_stop_at_their_attempt_bound() {
    let server = LlmServer::start(vec![Canned::error(429, "error-429.json")]);
    let settings = json!({"retry": {"maxRetries": 1, "provider": {"waitForUsage": {
        "baseDelayMs": 1, "maxAttempts": 2}}}});
    let mut s = with_settings(&server, settings, None);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(
        details.contains("Provider recovery wait gave up after 2 pings (retry.provider.waitForUsage.maxAttempts)"),
        "{details}"
    );
    assert_eq!(server.posts().len(), 4, "a call, a retry, two pings");
    let updates = s.agent.updates();
    let phases: Vec<(String, String)> = updates
        .iter()
        .map(|u| &ns(u)["autoRetry"])
        .filter(|a| a.is_object())
        .map(|a| {
            (
                a["phase"].as_str().unwrap().to_owned(),
                a["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let want = [
        ("waiting", "rate_limited"),
        ("waiting", "usage"),
        ("waiting", "usage"),
        ("exhausted", ""),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, r)| (p.to_string(), r.to_string()))
        .collect();
    assert_eq!(phases, want);
    let exhausted = updates
        .iter()
        .map(|u| &ns(u)["autoRetry"])
        .find(|a| a["phase"] == "exhausted")
        .unwrap();
    assert!(
        exhausted["errorMessage"]
            .as_str()
            .unwrap()
            .starts_with("Provider recovery wait gave up after 2 pings"),
        "{exhausted}"
    );
}

#[test]
fn a_mid_stream_drop_fails_the_prompt() {
    let (server, mut s) = openai(vec![Canned::sse("openai-partial.sse").ending(End::Drop)]);
    let r = ask(&mut s.agent, "hi");
    let details = failure(&r);
    assert_ne!(stop_reason(&r), "end_turn");
    assert!(
        details.contains("dropped") || details.contains("ended before"),
        "{details}"
    );
    assert_eq!(s.agent.text(), "Partial answer");
    assert_eq!(
        server.requests().len(),
        1,
        "no retry once deltas were streamed"
    );
}

#[test]
fn an_error_object_in_the_stream_is_made_again_then_fails_the_prompt() {
    // A 5xx error event inside the stream voids the reply: the call is made again (three
    // retries), and when every attempt breaks off the prompt fails with the server's words.
    let (server, mut s) = openai(vec![Canned::sse("openai-error-event.sse")]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.contains("upstream overloaded in test"), "{details}");
    assert_eq!(server.posts().len(), 4, "one call plus three retries");
    let retries = info_meta(&s.agent, "autoRetry");
    assert_eq!(retries[0]["reason"], "stream_error", "{retries:?}");
    assert_eq!(retries.last().unwrap()["phase"], "exhausted", "{retries:?}");
}

#[test]
fn an_error_event_that_is_not_transient_is_not_retried() {
    let server = LlmServer::start(vec![Canned::sse_bytes(concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"error\":{\"message\":\"content policy in test\",\"type\":\"invalid_request_error\"}}\n\n"
    )
    .as_bytes()
    .to_vec())]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.contains("content policy in test"), "{details}");
    assert_eq!(server.posts().len(), 1);
}

/// llama.cpp's parser rejecting what the model wrote, after text and a named call streamed:
/// the call shown from the void attempt ends failed, the same logical call (same request id,
/// retry count 1) is made again, and its reply is the one that counts.
#[test]
fn a_reply_the_server_voids_mid_stream_is_made_again_and_its_calls_closed() {
    let (server, mut s) = openai(vec![
        Canned::sse("openai-voided.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let posts = server.posts();
    assert_eq!(posts.len(), 2);
    let id = |p: &crate::support::llm_server::Recorded| {
        p.header("x-acp-model-request-id").map(str::to_owned)
    };
    assert!(id(&posts[0]).is_some());
    assert_eq!(id(&posts[0]), id(&posts[1]), "one logical call");
    assert_eq!(posts[1].header("x-stainless-retry-count"), Some("1"));
    // The retry's request is the first one's: nothing of the void reply entered the history.
    assert_eq!(posts[0].body["messages"], posts[1].body["messages"]);
    let updates = s.agent.updates();
    let of_call: Vec<&Value> = updates
        .iter()
        .filter(|u| u["toolCallId"] == "void-call-1")
        .collect();
    assert_eq!(of_call[0]["sessionUpdate"], "tool_call", "{of_call:?}");
    let last = of_call.last().unwrap();
    assert_eq!(last["status"], "failed", "{of_call:?}");
    assert!(
        last["content"][0]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("broke off")),
        "{last}"
    );
    let retries = info_meta(&s.agent, "autoRetry");
    assert_eq!(retries[0]["phase"], "waiting", "{retries:?}");
    assert_eq!(retries[0]["reason"], "stream_error");
    assert!(retries[0]["errorMessage"]
        .as_str()
        .is_some_and(|m| m.contains("peg-native")));
    // The retried reply's text follows what the void one had shown.
    assert!(
        s.agent.text().ends_with("Hello, wörld!"),
        "{}",
        s.agent.text()
    );
}

#[test]
fn a_stalled_stream_fails_the_prompt_after_the_idle_timeout() {
    let server = LlmServer::start(vec![Canned::sse("openai-partial.sse").ending(End::Stall)]);
    let mut s = spawn_with(
        &server,
        "openai-completions",
        "cold/test-model",
        &[("PRIME_AGENT_IDLE_TIMEOUT_MS", "300")],
    );
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.contains("stalled"), "{details}");
}

#[test]
fn a_server_that_never_answers_fails_the_prompt_without_retrying() {
    let server = LlmServer::start(vec![Canned::silent()]);
    let mut s = spawn_with(
        &server,
        "openai-completions",
        "cold/test-model",
        &[("PRIME_AGENT_IDLE_TIMEOUT_MS", "300")],
    );
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.contains("timed out"), "{details}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_refused_connection_is_retried_then_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let dir = TempDir::new("refused");
    let base = format!("http://127.0.0.1:{port}/v1");
    let mut a = spawn_plain(
        &[
            "--provider",
            "openai",
            "--api-key",
            "k",
            "--base-url",
            &base,
        ],
        &dir,
    );
    let details = failure(&ask(&mut a, "hi"));
    assert!(details.contains(&format!("127.0.0.1:{port}")), "{details}");
    assert!(details.to_lowercase().contains("refused"), "{details}");
    // A local server that is down stays down for the backoff: one retry, not three.
    let retries = info_meta(&a, "autoRetry");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(retries[0]["phase"], "waiting");
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["maxAttempts"], 1);
    assert_eq!(retries[0]["reason"], "connection");
    assert!(retries[0]["errorMessage"]
        .as_str()
        .is_some_and(|m| m.contains("refused")));
    assert_eq!(retries[1]["phase"], "exhausted");
    assert_eq!(retries[1]["attempt"], 1);
    assert!(stderr_eventually(&a, "retry 1/1"), "{}", a.stderr_text());
    assert!(!a.stderr_text().contains("retry 2/"));
}

#[test]
fn cancel_while_the_server_stalls_answers_cancelled_and_closes_the_socket() {
    let (server, mut s) = openai(vec![Canned::sse("openai-partial.sse").ending(End::Stall)]);
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
}

#[test]
fn finish_reason_length_ends_the_turn_with_max_tokens() {
    let (_server, mut s) = openai(vec![Canned::sse("openai-length.sse")]);
    assert_eq!(stop_reason(&ask(&mut s.agent, "hi")), "max_tokens");
}

#[test]
fn unknown_tool_calls_go_back_to_the_model_as_error_results() {
    let (server, mut s) = openai(vec![
        Canned::sse("openai-tools.sse"),
        Canned::sse("openai-after-tool.sse"),
    ]);
    let r = ask(&mut s.agent, "use tools");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.text(), "Checking.Done after tools.");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let messages = reqs[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    let assistant = messages
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("assistant turn replayed");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_aaa");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        "{\"query\":\"rust\"}"
    );
    let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(results.len(), 2, "{messages:?}");
    assert_eq!(results[0]["tool_call_id"], "call_aaa");
    assert!(results[0]["content"]
        .as_str()
        .expect("text")
        .contains("not found"));
}

#[test]
fn anthropic_text_request_shape_and_usage() {
    let (server, mut s) = anthropic(vec![Canned::sse("anthropic-text.sse")]);
    let r = ask(&mut s.agent, "hello");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.text(), "Hello from Claude");
    let q = &server.requests()[0];
    assert_eq!(q.path, "/v1/messages");
    assert_eq!(q.header("x-api-key"), Some("test-key"));
    assert_eq!(q.header("anthropic-version"), Some("2023-06-01"));
    assert!(q.header("authorization").is_none());
    assert_eq!(q.body["stream"], true);
    assert!(q.body["system"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(q.body["messages"][0]["role"], "user");
    assert_eq!(q.body["messages"][0]["content"][0]["text"], "hello");
    assert_eq!(
        q.body["thinking"]["type"], "enabled",
        "reasoning model, medium"
    );
}

#[test]
fn anthropic_thinking_and_tool_use_round_trip() {
    let (server, mut s) = anthropic(vec![
        Canned::sse("anthropic-thinking.sse"),
        Canned::sse("anthropic-tools.sse"),
        Canned::sse("anthropic-after-tool.sse"),
    ]);
    let r = ask(&mut s.agent, "think");
    assert_eq!(stop_reason(&r), "end_turn");
    assert_eq!(thoughts(&s.agent), "Two plus two is four.");
    let id = s.agent.prompt("now use tools");
    let r = s.agent.response(&id);
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    let messages = reqs[2].body["messages"].as_array().expect("m").clone();
    // user, assistant(thinking+text), user, assistant(tool_use), user(tool_results)
    assert_eq!(messages.len(), 5, "{messages:?}");
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "thinking", "thinking": "Two plus two is four.",
               "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
        "thinking is replayed with its signature"
    );
    let assistant = &messages[3];
    let tool_use = assistant["content"]
        .as_array()
        .expect("blocks")
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("tool_use")
        .clone();
    assert_eq!(tool_use["input"], json!({"query": "rust", "limit": 3}));
    let results = &messages[messages.len() - 1];
    assert_eq!(results["role"], "user");
    assert_eq!(results["content"][0]["type"], "tool_result");
    assert_eq!(results["content"][0]["tool_use_id"], "toolu_01");
    assert_eq!(results["content"][0]["is_error"], true);
    assert_eq!(results["content"][1]["tool_use_id"], "toolu_02");
}

#[test]
fn anthropic_error_event_and_401_fail_the_prompt() {
    // `overloaded_error` mid-stream is transient: made again, then the prompt fails.
    let (server, mut s) = anthropic(vec![Canned::sse("anthropic-error-event.sse")]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(details.contains("Overloaded in test"), "{details}");
    assert_eq!(server.posts().len(), 4, "one call plus three retries");
    let (_server, mut s) = anthropic(vec![Canned::error(401, "anthropic-error-401.json")]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(
        details.contains("401 invalid x-api-key in test"),
        "{details}"
    );
}

#[test]
fn anthropic_max_tokens_stop_reason() {
    let (_server, mut s) = anthropic(vec![Canned::sse("anthropic-max-tokens.sse")]);
    assert_eq!(stop_reason(&ask(&mut s.agent, "hi")), "max_tokens");
}

#[test]
fn a_missing_key_fails_each_prompt_with_what_to_set() {
    let dir = TempDir::new("nokey");
    for args in [&["--mode", "acp"][..], &["--provider", "openai"][..]] {
        let mut a = spawn_plain(args, &dir);
        let details = failure(&ask(&mut a, "hi"));
        assert!(
            details.contains("No API key found for openai. Set OPENAI_API_KEY"),
            "{details}"
        );
    }
    let mut a = spawn_plain(&["--provider", "anthropic"], &dir);
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details.contains("No API key found for anthropic."),
        "{details}"
    );
}

#[test]
fn unknown_provider_and_model_exit_1_before_initialize() {
    let dir = TempDir::new("unknown");
    let cases: [(&[&str], &str); 2] = [
        (
            &["--provider", "nope"],
            "Error: Unknown provider \"nope\". Use \"prime-agent model list\" to see available providers/models.",
        ),
        (
            &["--model", "no-such-model"],
            "Error: Model \"no-such-model\" not found. Use \"prime-agent model list\" to see available models.",
        ),
    ];
    for (args, want) in cases {
        let mut a = spawn_plain(args, &dir);
        let status = a.wait_exit(TIMEOUT).expect("exits");
        assert_eq!(status.code(), Some(1));
        assert!(
            a.next_frame(Duration::from_millis(100)).is_none(),
            "nothing on stdout"
        );
        assert!(stderr_eventually(&a, want), "{}", a.stderr_text());
    }
}

#[test]
fn base_url_reroutes_a_builtin_provider() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("baseurl");
    let base = format!("{}/v1", server.url());
    // Trace level logs everything ureq and rustls log: the key must still not appear.
    let mut a = spawn_plain_env(
        &[
            "--provider",
            "openai",
            "--model",
            "gpt-4.1",
            "--api-key",
            "cli-key",
            "--base-url",
            &base,
        ],
        &dir,
        &[("RUST_LOG", "trace")],
    );
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let q = &server.requests()[0];
    assert_eq!(q.header("authorization"), Some("Bearer cli-key"));
    assert_eq!(q.body["model"], "gpt-4.1");
    assert!(a.finish().success());
    assert!(stderr_eventually(&a, "DEBUG"), "verbose logging is on");
    let log = a.stderr_text();
    // A hex dump can split a string across lines: check the whitespace-free text as well.
    let squashed: String = log.split_whitespace().collect();
    assert!(
        !log.contains("cli-key") && !squashed.contains("cli-key") && !log.contains("636c 692d"),
        "the key is never logged"
    );
}

#[test]
fn auth_json_beats_models_json_and_is_read_per_request() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    s._dir.write(
        "auth.json",
        r#"{"intercept":{"type":"api_key","key":"from-auth-json"}}"#,
    );
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer from-auth-json")
    );
}

/// Cancel latency while the model streams: run with
/// `cargo test --release --test integration provider::bench_cancel_latency -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_cancel_latency() {
    let mut samples = Vec::new();
    for _ in 0..20 {
        let (_server, mut s) = openai(vec![Canned::sse("openai-partial.sse").ending(End::Stall)]);
        s.agent.handshake();
        let id = s.agent.prompt("hi");
        s.agent.wait_for("a delta", |f| {
            f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        });
        let t = Instant::now();
        s.agent.cancel();
        let r = s.agent.response(&id);
        samples.push(t.elapsed());
        assert_eq!(stop_reason(&r), "cancelled");
    }
    samples.sort();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "cancel latency over 20 runs: median {:?}, worst {:?}\n",
            samples[10], samples[19]
        )
        .as_bytes(),
    );
}

/// Throughput of a 20,000-delta stream to the client's stdout: run with
/// `cargo test --release --test integration provider::bench_stream_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_stream_throughput() {
    const N: usize = 20_000;
    let mut body = String::new();
    for i in 0..N {
        body.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i} \"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    let server = LlmServer::start(vec![Canned::sse_bytes(body.into_bytes())]);
    // Schema validation of 20,000 frames would measure the test harness, not the agent.
    let mut s = spawn_full(&server, "openai-completions", "cold/test-model", &[], true);
    s.agent.handshake();
    let t = Instant::now();
    let id = s.agent.prompt("go");
    let r = s.agent.response(&id);
    let elapsed = t.elapsed();
    assert_eq!(stop_reason(&r), "end_turn");
    let chunks = s
        .agent
        .updates()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .count();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "{N} deltas ({chunks} chunks on stdout) in {elapsed:?}: {:.0} deltas/s\n",
            N as f64 / elapsed.as_secs_f64()
        )
        .as_bytes(),
    );
}

/// `_meta[ns][key]` of every `session_info_update` that carries `key`.
fn info_meta(a: &Agent, key: &str) -> Vec<Value> {
    a.updates_of("session_info_update")
        .iter()
        .map(|u| ns(u)[key].clone())
        .filter(|v| !v.is_null())
        .collect()
}

/// An agent on the built-in openai provider rerouted to `server` with a model id the
/// catalogue does not have (a llama.cpp or vLLM server).
fn unknown_model_agent(server: &LlmServer, extra: &[&str]) -> (Agent, TempDir) {
    let dir = TempDir::new("unknown-model");
    let base = format!("{}/v1", server.url());
    let mut args = vec![
        "--provider",
        "openai",
        "--model",
        "local-llama",
        "--api-key",
        "k",
        "--base-url",
        &base,
    ];
    args.extend_from_slice(extra);
    let a = spawn_plain(&args, &dir);
    (a, dir)
}

fn usage_sizes(a: &Agent) -> Vec<Value> {
    a.updates_of("usage_update")
        .iter()
        .map(|u| u["size"].clone())
        .collect()
}

#[test]
fn an_unknown_model_on_a_custom_server_gets_conservative_defaults_and_one_notice() {
    let server = LlmServer::start_routed(
        0,
        vec![Canned::sse("openai-text.sse")],
        vec![(
            "/v1/models".into(),
            json!({"object": "list", "data": [
                {"id": "other", "max_model_len": 999_999},
                {"id": "local-llama", "object": "model", "max_model_len": 4096}
            ]}),
        )],
    );
    let (mut a, _dir) = unknown_model_agent(&server, &[]);
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let posts = server.posts();
    assert_eq!(posts.len(), 1);
    let body = &posts[0].body;
    assert_eq!(body["model"], "local-llama");
    assert_eq!(body["messages"][0]["role"], "system", "{body}");
    for field in ["reasoning_effort", "store", "max_tokens"] {
        assert!(body.get(field).is_none(), "{field} sent: {body}");
    }
    // The server's window is known before the body is built: replies get the quarter of it
    // that compaction reserves, so a model that runs on cannot fill the window.
    assert_eq!(body["max_completion_tokens"], 1024, "{body}");
    // The window is the server's, not the flagship's 400,000.
    assert_eq!(usage_sizes(&a), vec![json!(4096)]);
    let gets: Vec<String> = server
        .requests()
        .iter()
        .filter(|q| q.method == "GET")
        .map(|q| q.path.clone())
        .collect();
    assert_eq!(gets, ["/v1/models"], "asked once; /props not needed");
    // The warning reaches the client as a notice, not as the model's words.
    assert_eq!(a.text(), "Hello, wörld!");
    let notices = info_meta(&a, "notice");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["severity"], "warning");
    assert!(
        notices[0]["title"]
            .as_str()
            .is_some_and(|t| t.contains("local-llama")),
        "{notices:?}"
    );
    let description = notices[0]["description"].as_str().expect("description");
    assert!(
        description.contains("\"system\"") && description.contains("4096"),
        "{description}"
    );
    // Once per session: a second prompt does not repeat it, nor ask the server again.
    let r = ask_again(&mut a, "again");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(info_meta(&a, "notice").len(), 1);
    assert_eq!(server.requests().len(), 3, "two POSTs, one GET");
    // Text-only input: an image is refused up front instead of sent.
    let id = a.prompt_blocks(json!([
        {"type": "text", "text": "what is this?"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    ]));
    let r = a.response(&id);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(server.posts().len(), 2, "no image reached the server");
    assert!(a.finish().success());
}

#[test]
fn an_unknown_models_window_comes_from_llama_cpp_props() {
    let server = LlmServer::start_routed(
        0,
        vec![Canned::sse("openai-text.sse")],
        vec![(
            "/props".into(),
            json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}),
        )],
    );
    let (mut a, _dir) = unknown_model_agent(&server, &[]);
    assert_eq!(stop_reason(&ask(&mut a, "hi")), "end_turn");
    assert_eq!(usage_sizes(&a), vec![json!(4096)]);
    let notices = info_meta(&a, "notice");
    assert!(
        notices[0]["description"]
            .as_str()
            .is_some_and(|d| d.contains("/props")),
        "{notices:?}"
    );
}

#[test]
fn an_unknown_model_on_a_silent_server_assumes_32768() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let (mut a, _dir) = unknown_model_agent(&server, &[]);
    assert_eq!(stop_reason(&ask(&mut a, "hi")), "end_turn");
    assert_eq!(usage_sizes(&a), vec![json!(32_768)]);
    let notices = info_meta(&a, "notice");
    let description = notices[0]["description"].as_str().unwrap_or_default();
    assert!(
        description.contains("--context-window") && description.contains("no output limit"),
        "{notices:?}"
    );
    // A guessed window could be larger than the real one: no output limit is sent.
    let body = &server.posts()[0].body;
    assert!(body.get("max_completion_tokens").is_none(), "{body}");
}

#[test]
fn context_window_flag_wins_and_thinking_flag_asks_for_effort() {
    let server = LlmServer::start_routed(
        0,
        vec![Canned::sse("openai-text.sse")],
        vec![(
            "/v1/models".into(),
            json!({"data": [{"id": "local-llama", "max_model_len": 4096}]}),
        )],
    );
    let (mut a, _dir) =
        unknown_model_agent(&server, &["--context-window", "8192", "--thinking", "high"]);
    assert_eq!(stop_reason(&ask(&mut a, "hi")), "end_turn");
    assert_eq!(usage_sizes(&a), vec![json!(8192)]);
    assert!(
        server.requests().iter().all(|q| q.method == "POST"),
        "nothing to ask the server"
    );
    let body = &server.posts()[0].body;
    assert_eq!(body["reasoning_effort"], "high", "--thinking asked for it");
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(body.get("store").is_none());
}

#[test]
fn context_window_flag_overrides_a_known_model() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("window-flag");
    dir.write("models.json", &models_json(&server, "openai-completions"));
    let mut a = spawn_plain(
        &[
            "--provider",
            "intercept",
            "--model",
            "cold/test-model",
            "--context-window",
            "5000",
        ],
        &dir,
    );
    assert_eq!(stop_reason(&ask(&mut a, "hi")), "end_turn");
    assert_eq!(usage_sizes(&a), vec![json!(5000)]);
    assert!(
        info_meta(&a, "notice").is_empty(),
        "a known model: no notice"
    );
}

#[test]
fn a_bad_context_window_exits_1_before_initialize() {
    let dir = TempDir::new("bad-window");
    let mut a = spawn_plain(&["--context-window", "many"], &dir);
    assert_eq!(a.wait_exit(TIMEOUT).expect("exits").code(), Some(1));
    assert!(stderr_eventually(
        &a,
        "Error: --context-window must be a positive integer"
    ));
}

#[test]
fn unsupported_input_errors_are_not_retried() {
    let (server, mut s) = openai(vec![
        Canned::error(500, "error-500-image.json"),
        Canned::sse("openai-text.sse"),
    ]);
    let details = failure(&ask(&mut s.agent, "hi"));
    assert!(
        details.contains("image input is not supported"),
        "{details}"
    );
    assert_eq!(
        server.posts().len(),
        1,
        "the same request fails the same way"
    );
    assert!(info_meta(&s.agent, "autoRetry").is_empty());
}

#[test]
fn a_retry_is_visible_as_waiting_then_recovered() {
    let (server, mut s) = openai(vec![
        Canned::error(500, "error-500.json"),
        Canned::sse("openai-text.sse"),
    ]);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(server.posts().len(), 2);
    assert_eq!(
        info_meta(&s.agent, "autoRetry"),
        vec![
            json!({"phase": "waiting", "attempt": 1, "maxAttempts": 3, "delayMs": 10,
                   "reason": "server_error", "errorMessage": "500 internal error in test"}),
            json!({"phase": "recovered", "attempt": 1}),
        ]
    );
    // The client hears of the recovery before the recovered reply's text.
    let updates = s.agent.updates();
    let recovered = updates
        .iter()
        .position(|u| ns(u)["autoRetry"]["phase"] == "recovered")
        .expect("recovered");
    let first_text = updates
        .iter()
        .position(|u| u["sessionUpdate"] == "agent_message_chunk")
        .expect("text");
    assert!(recovered < first_text);
}

#[test]
fn anthropic_redacted_and_signed_empty_thinking_go_back_before_the_tool_use() {
    let (server, mut s) = anthropic(vec![
        Canned::sse("anthropic-redacted-tools.sse"),
        Canned::sse("anthropic-after-tool.sse"),
    ]);
    let r = ask(&mut s.agent, "use tools");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let reqs = server.posts();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].body["thinking"]["type"], "enabled");
    let messages = reqs[1].body["messages"].as_array().expect("m").clone();
    let assistant = &messages[1];
    assert_eq!(assistant["role"], "assistant");
    let blocks = assistant["content"].as_array().expect("blocks");
    assert_eq!(
        blocks[0],
        json!({"type": "redacted_thinking",
               "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj"})
    );
    assert_eq!(
        blocks[1],
        json!({"type": "thinking", "thinking": "", "signature": "ErUBCkYIBhgCIkBsig-empty"})
    );
    assert_eq!(blocks[2]["type"], "tool_use");
    assert_eq!(blocks[2]["id"], "toolu_09");
    assert_eq!(blocks.len(), 3);
}

/// Settings `providerBackupModel`: once the primary's retries are spent on a 503, the same
/// request goes to the backup model on a second server, and the client is told so (an
/// `autoRetry` wait with reason `failover`, and a notice naming the backup).
#[test]
fn a_failing_primary_fails_over_to_the_backup_model_on_another_server() {
    let primary = LlmServer::start(vec![Canned::error(503, "error-500.json")]);
    let backup = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("failover");
    let provider = |server: &LlmServer, id: &str| {
        json!({"baseUrl": format!("{}/v1", server.url()), "api": "openai-completions",
            "apiKey": "test-key", "models": [{"id": id, "input": ["text"]}]})
    };
    let models = json!({"providers": {"intercept": provider(&primary, "cold/test-model"),
        "backup": provider(&backup, "b-model")}});
    dir.write("models.json", &models.to_string());
    dir.write(
        "settings.json",
        &json!({"providerBackupModel": "backup/b-model"}).to_string(),
    );
    let mut s = spawn_in(dir, "cold/test-model", &[], false);
    let r = ask(&mut s.agent, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.text(), "Hello, wörld!");
    assert_eq!(
        primary.posts().len(),
        4,
        "the primary's own retries come first"
    );
    let sent = backup.posts();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["model"], "b-model");
    assert_eq!(
        sent[0].body["messages"].as_array().unwrap().last().unwrap()["content"],
        "hi"
    );
    let updates = s.agent.updates();
    let failover = updates
        .iter()
        .map(|u| &ns(u)["autoRetry"])
        .find(|a| a["reason"] == "failover")
        .unwrap_or_else(|| panic!("no failover autoRetry: {updates:?}"));
    assert_eq!(failover["phase"], "waiting");
    assert!(
        failover["errorMessage"]
            .as_str()
            .unwrap()
            .ends_with("; retrying on backup model backup/b-model"),
        "{failover}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u["title"] == "Retrying on backup model backup/b-model"
                || ns(u)["notice"]["title"] == "Retrying on backup model backup/b-model"),
        "{updates:?}"
    );
}

/// Without a backup a final failure stays a failed prompt (the setting is off by default).
#[test]
fn a_backup_that_names_no_model_is_a_warning_and_no_failover() {
    let primary = LlmServer::start(vec![Canned::error(503, "error-500.json")]);
    let dir = TempDir::new("failover-none");
    dir.write("models.json", &models_json(&primary, "openai-completions"));
    dir.write(
        "settings.json",
        &json!({"providerBackupModel": "nowhere/none"}).to_string(),
    );
    let mut s = spawn_in(dir, "cold/test-model", &[], false);
    failure(&ask(&mut s.agent, "hi"));
    assert!(stderr_eventually(
        &s.agent,
        "Ignoring settings key providerBackupModel: nowhere/none is not a model with credentials"
    ));
}
