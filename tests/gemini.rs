//! The built-in `google` (Gemini, `google-generative-ai`) and `azure-openai-responses`
//! providers against the loopback model server replaying recorded-shape streams: a thinking
//! turn with a function call that runs a real tool, the signed parts and the function response
//! in the next request, the key in its header only, and errors.

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, End, LlmServer};
use crate::support::model::*;
use crate::support::*;

const GEMINI_KEY: &str = "gem-test-key-0123";

/// An agent on the built-in `google` provider, pointed at `server` with `--base-url`.
fn gemini(replies: Vec<Canned>, model: &str) -> (LlmServer, Agent, TempDir) {
    let server = LlmServer::start(replies);
    let dir = TempDir::new("gemini");
    let base = format!("{}/v1beta", server.url());
    let args = [
        "--provider",
        "google",
        "--model",
        model,
        "--base-url",
        &base,
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    let agent = spawn_plain_env(
        &args,
        &dir,
        &[("GEMINI_API_KEY", GEMINI_KEY), ("RUST_LOG", "debug")],
    );
    (server, agent, dir)
}

fn thoughts(a: &Agent) -> String {
    a.updates()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_gemini_stream_with_thoughts_a_function_call_and_text_completes_a_turn() {
    let (server, mut a, _dir) = gemini(
        vec![
            Canned::sse("gemini-thinking-tools.sse"),
            Canned::sse("gemini-after-tool.sse"),
        ],
        "gemini-3-flash-preview",
    );
    let r = ask(&mut a, "run the check");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(
        thoughts(&a),
        "**Checking the build**\nI should run the command."
    );
    assert_eq!(a.text(), "I'll run it.It printed gemini-ok. Wörld ✓");
    let updates = a.updates();
    let done = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed");
    assert!(done.is_some(), "the bash call ran: {updates:?}");

    let reqs = server.posts();
    assert_eq!(reqs.len(), 2);
    let first = &reqs[0];
    assert_eq!(
        first.path,
        "/v1beta/models/gemini-3-flash-preview:streamGenerateContent?alt=sse"
    );
    assert_eq!(first.header("x-goog-api-key"), Some(GEMINI_KEY));
    assert_eq!(first.header("authorization"), None);
    let b = &first.body;
    assert!(b["systemInstruction"]["parts"][0]["text"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    assert_eq!(
        b["contents"],
        json!([{"role": "user", "parts": [{"text": "run the check"}]}])
    );
    assert_eq!(
        b["generationConfig"],
        json!({"maxOutputTokens": 32000,
               "thinkingConfig": {"includeThoughts": true, "thinkingLevel": "MEDIUM"}})
    );
    let decls = b["tools"][0]["functionDeclarations"]
        .as_array()
        .expect("declarations");
    assert!(decls
        .iter()
        .any(|d| d["name"] == "bash" && d["parametersJsonSchema"]["type"] == "object"));

    // The next request carries the reply's parts back, the signature on its call, then the
    // function's response.
    let contents = reqs[1].body["contents"]
        .as_array()
        .expect("contents")
        .clone();
    assert_eq!(contents.len(), 3, "{contents:?}");
    assert_eq!(contents[1]["role"], "model");
    let parts = contents[1]["parts"].as_array().expect("parts");
    assert_eq!(parts[0]["thought"], true);
    assert_eq!(
        parts[2],
        json!({"functionCall": {"name": "bash", "args": {"command": "echo gemini-ok"}},
               "thoughtSignature": "c2lnbmVkLXRob3VnaHQtZm9yLXRlc3Q="})
    );
    let response = &contents[2]["parts"][0]["functionResponse"];
    assert_eq!(contents[2]["role"], "user");
    assert_eq!(response["name"], "bash");
    assert!(
        response["response"]["output"]
            .as_str()
            .is_some_and(|o| o.contains("gemini-ok")),
        "{response}"
    );
    // The key is in no URL and no log line, even at debug level.
    assert!(reqs.iter().all(|r| !r.path.contains(GEMINI_KEY)));
    assert!(!a.stderr_text().contains(GEMINI_KEY));
    assert!(a.finish().success());
}

#[test]
fn gemini_errors_fail_the_prompt_with_the_providers_words() {
    let (server, mut a, _dir) = gemini(
        vec![Canned::sse("gemini-error-event.sse")],
        "gemini-2.5-flash",
    );
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details.contains("The model is overloaded in test. (UNAVAILABLE)"),
        "{details}"
    );
    assert_eq!(
        server.posts().len(),
        1,
        "an error in the stream is not retried"
    );
    assert_eq!(
        server.posts()[0].body["generationConfig"]["thinkingConfig"],
        json!({"includeThoughts": true, "thinkingBudget": 8192})
    );

    let (server, mut a, _dir) = gemini(
        vec![Canned::error(400, "error-gemini-400.json")],
        "gemini-2.5-flash",
    );
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details.contains("400 API key not valid in test."),
        "{details}"
    );
    assert_eq!(server.posts().len(), 1);
    let (_server, mut a, _dir) =
        gemini(vec![Canned::sse("gemini-max-tokens.sse")], "gemini-2.5-pro");
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "max_tokens", "{r}");
}

/// An agent on the built-in `azure-openai-responses` provider, its endpoint from the
/// environment.
fn azure(replies: Vec<Canned>, env: &[(&str, &str)]) -> (LlmServer, Agent, TempDir) {
    let server = LlmServer::start(replies);
    let dir = TempDir::new("azure");
    let base = format!("{}/openai/v1", server.url());
    let mut all = vec![
        ("AZURE_OPENAI_API_KEY", "az-test-key"),
        ("AZURE_OPENAI_BASE_URL", base.as_str()),
        (
            "AZURE_OPENAI_DEPLOYMENT_NAME_MAP",
            "gpt-5.4=prod-gpt54, gpt-4.1=old",
        ),
    ];
    all.extend_from_slice(env);
    let args = [
        "--provider",
        "azure-openai-responses",
        "--model",
        "gpt-5.4",
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    let agent = spawn_plain_env(&args, &dir, &all);
    (server, agent, dir)
}

#[test]
fn azure_responses_go_to_the_deployment_with_the_api_key_header_and_replay_reasoning() {
    let (server, mut a, _dir) = azure(
        vec![
            Canned::sse("responses-reasoning-tools.sse"),
            Canned::sse("responses-after-tool.sse"),
        ],
        &[("AZURE_OPENAI_API_VERSION", "2025-04-01-preview")],
    );
    let r = ask(&mut a, "run the check");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(a.text(), "I'll run it.It printed responses-ok. Wörld ✓");
    assert_eq!(
        thoughts(&a),
        "**Planning the check**\n\nI should run the command.\n\nThen report."
    );
    let reqs = server.posts();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].path,
        "/openai/v1/responses?api-version=2025-04-01-preview"
    );
    assert_eq!(reqs[0].header("api-key"), Some("az-test-key"));
    assert_eq!(reqs[0].header("authorization"), None);
    assert_eq!(reqs[0].body["model"], "prod-gpt54");
    assert_eq!(reqs[0].body["store"], false);
    let input = reqs[1].body["input"].as_array().expect("input");
    let reasoning: Vec<&Value> = input.iter().filter(|i| i["type"] == "reasoning").collect();
    assert_eq!(
        reasoning.len(),
        1,
        "the reasoning goes back to the same model"
    );
    assert!(input
        .iter()
        .any(|i| i["type"] == "function_call_output" && i["call_id"] == "call_test1"));
}

#[test]
fn azure_errors_and_a_missing_endpoint() {
    let (server, mut a, _dir) = azure(vec![Canned::sse("responses-failed.sse")], &[]);
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details.contains("The model failed in test (server_error)"),
        "{details}"
    );
    assert_eq!(
        server.posts()[0].path,
        "/openai/v1/responses?api-version=v1"
    );

    let (server, mut a, _dir) = azure(
        vec![Canned::sse("responses-after-tool.sse")],
        &[("AZURE_OPENAI_BASE_URL", "")],
    );
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details.contains("Azure OpenAI needs its endpoint: set AZURE_OPENAI_BASE_URL"),
        "{details}"
    );
    assert!(server.posts().is_empty());
}

#[test]
fn kimi_coding_speaks_messages_with_its_key_and_the_user_agent_its_server_wants() {
    let server = LlmServer::start(vec![Canned::sse("anthropic-text.sse")]);
    let dir = TempDir::new("kimi");
    let url = server.url();
    let args = [
        "--model",
        "kimi-coding/kimi-for-coding",
        "--base-url",
        url.as_str(),
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    let mut a = spawn_plain_env(&args, &dir, &[("KIMI_API_KEY", "kimi-key")]);
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let reqs = server.posts();
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].header("x-api-key"), Some("kimi-key"));
    assert_eq!(reqs[0].header("user-agent"), Some("KimiCLI/1.5"));
    assert_eq!(reqs[0].body["model"], "kimi-for-coding");
}

#[test]
fn cancel_during_a_gemini_stream_answers_cancelled_and_closes_the_socket() {
    let (server, mut a, _dir) = gemini(
        vec![Canned::sse("gemini-partial.sse").ending(End::Stall)],
        "gemini-2.5-flash",
    );
    a.handshake();
    let id = a.prompt("hi");
    a.wait_for("the first delta", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    a.cancel();
    let r = a.response(&id);
    assert_eq!(r["result"], json!({"stopReason": "cancelled"}), "{r}");
    assert!(
        server.wait_closed(TIMEOUT),
        "the server sees the connection closed"
    );
    assert_eq!(a.text(), "Partial answer");
}

#[test]
fn a_gemini_stream_that_ends_without_a_finish_reason_fails_without_a_retry() {
    let (server, mut a, _dir) = gemini(vec![Canned::sse("gemini-partial.sse")], "gemini-2.5-flash");
    let details = failure(&ask(&mut a, "hi"));
    assert!(details.contains("ended before"), "{details}");
    assert_eq!(a.text(), "Partial answer");
    assert_eq!(
        server.posts().len(),
        1,
        "no retry once deltas were streamed"
    );
}

#[test]
fn a_gemini_429_is_retried_and_the_second_attempt_answers() {
    let (server, mut a, _dir) = gemini(
        vec![
            Canned::error(429, "error-429.json"),
            Canned::sse("gemini-after-tool.sse"),
        ],
        "gemini-2.5-flash",
    );
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(a.text(), "It printed gemini-ok. Wörld ✓");
    assert_eq!(server.posts().len(), 2);
    assert!(stderr_eventually(&a, "retry 1/3"));
}
