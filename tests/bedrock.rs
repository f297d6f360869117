//! The built-in `amazon-bedrock` provider (`bedrock-converse-stream`) against the loopback
//! Bedrock mock (`support::aws`), which recomputes every SigV4 signature and frames its
//! answers as AWS's event stream: a signed tool turn, a wrong secret refused and reported as
//! an auth failure without a retry, a corrupted frame, temporary credentials, a profile from
//! the shared files, the bearer token, throttling retried, a models.json provider with an
//! inference profile ARN, and a cancel that closes the socket mid-stream.

use std::process::Stdio;

use serde_json::json;

use crate::support::aws::{Account, BedrockMock, Reply, SIGNATURE_MISMATCH};
use crate::support::model::*;
use crate::support::*;

const SONNET: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

fn account(region: &str) -> Account {
    Account {
        access_key_id: KEY_ID.into(),
        secret_access_key: SECRET.into(),
        session_token: None,
        region: region.into(),
    }
}

/// An ACP agent on `amazon-bedrock/<model>` whose runtime endpoint is `mock`.
fn bedrock(mock: &BedrockMock, model: &str, env: &[(&str, &str)], dir: &TempDir) -> Agent {
    let args = [
        "--provider",
        "amazon-bedrock",
        "--model",
        model,
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    let url = mock.url();
    let mut all = vec![
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", url.as_str()),
        ("RUST_LOG", "trace"),
    ];
    all.extend_from_slice(env);
    spawn_plain_env(&args, dir, &all)
}

fn env_keys(secret: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", KEY_ID.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", secret.to_owned()),
        ("AWS_REGION", "us-west-2".to_owned()),
    ]
}

fn as_refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn thoughts(a: &Agent) -> String {
    a.updates_of("agent_thought_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_signed_bedrock_tool_turn_runs_the_tool_and_replays_the_signed_reasoning() {
    let mock = BedrockMock::start(
        vec![account("us-west-2")],
        None,
        vec![
            Reply::stream("tool-turn.jsonl"),
            Reply::stream("after-tool.jsonl"),
        ],
    );
    let dir = TempDir::new("bedrock-tool");
    let env = env_keys(SECRET);
    let mut a = bedrock(&mock, SONNET, &as_refs(&env), &dir);
    let r = ask(&mut a, "run the check");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(thoughts(&a), "The user wants the check run. I'll use bash.");
    assert_eq!(a.text(), "I'll run it.It printed bedrock-ok. Wörld ✓");
    let done = a
        .updates()
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed");
    assert!(done.is_some(), "the bash call ran");

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.verdict, Ok(()), "the mock accepted the signature");
        assert_eq!(
            r.path,
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
        );
        assert!(r.header("x-amz-security-token").is_none());
    }
    let auth = reqs[0].header("authorization").expect("signed");
    assert!(
        auth.contains("/us-west-2/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature="),
        "{auth}"
    );
    let b = &reqs[0].body;
    assert_eq!(b["system"][1], json!({"cachePoint": {"type": "default"}}));
    assert!(b["system"][0]["text"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    assert_eq!(
        b["messages"],
        json!([{"role": "user", "content": [{"text": "run the check"},
                                            {"cachePoint": {"type": "default"}}]}])
    );
    assert_eq!(b["inferenceConfig"], json!({"maxTokens": 32000}));
    assert_eq!(
        b["additionalModelRequestFields"]["thinking"],
        json!({"type": "enabled", "budget_tokens": 8192, "display": "summarized"})
    );
    let tools = b["toolConfig"]["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["toolSpec"]["name"] == "bash"
        && t["toolSpec"]["inputSchema"]["json"]["type"] == "object"));

    // The next request: the reply with its signed reasoning, then the tool's result.
    let messages = reqs[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {
                "text": "The user wants the check run. I'll use bash.",
                "signature": "EqoBCkgIBxABGAIiQL2bedrock-test-signature"}}},
            {"text": "I'll run it."},
            {"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": "bash",
                         "input": {"command": "echo bedrock-ok"}}}]})
    );
    let result = &messages[2]["content"][0]["toolResult"];
    assert_eq!(result["toolUseId"], "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q");
    assert_eq!(result["status"], "success");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("bedrock-ok")),
        "{result}"
    );
    // Neither the secret nor a signature reaches the log, even at trace level.
    let log = a.stderr_text();
    let squashed: String = log.split_whitespace().collect();
    assert!(!squashed.contains(SECRET), "the secret was logged");
    assert!(!log.contains("Signature="), "a signature was logged");
    assert!(a.finish().success());
}

#[test]
fn a_wrong_secret_is_refused_by_the_mock_and_reported_as_an_auth_failure_once() {
    let mock = BedrockMock::start(
        vec![account("us-west-2")],
        None,
        vec![Reply::stream("hello.jsonl")],
    );
    let dir = TempDir::new("bedrock-wrong-key");
    let env = env_keys("not-the-secret-key");
    let mut a = bedrock(&mock, SONNET, &as_refs(&env), &dir);
    let r = ask(&mut a, "hi");
    assert_eq!(r["error"]["data"]["kind"], "model_http", "{r}");
    let details = failure(&r);
    assert!(
        details.contains(&format!(
            "403 AWS authentication failed: {SIGNATURE_MISMATCH}"
        )),
        "{details}"
    );
    assert!(
        details.contains("credentials from the environment (AWS_ACCESS_KEY_ID)"),
        "{details}"
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1, "an auth failure is not retried");
    assert_eq!(reqs[0].verdict, Err(SIGNATURE_MISMATCH.to_owned()));
    assert!(a.finish().success());
}

#[test]
fn a_corrupted_frame_is_a_clear_error_and_not_retried() {
    let mock = BedrockMock::start(
        vec![account("us-west-2")],
        None,
        vec![Reply::corrupted("hello.jsonl", 1)],
    );
    let dir = TempDir::new("bedrock-crc");
    let env = env_keys(SECRET);
    let mut a = bedrock(&mock, SONNET, &as_refs(&env), &dir);
    let r = ask(&mut a, "hi");
    assert_eq!(r["error"]["data"]["kind"], "model_protocol", "{r}");
    let details = failure(&r);
    assert!(
        details.contains("The Bedrock event stream is corrupt: message checksum mismatch"),
        "{details}"
    );
    assert_eq!(mock.requests().len(), 1);
    assert!(a.finish().success());
}

#[test]
fn throttling_is_retried_as_an_answer_and_inside_the_stream() {
    let mock = BedrockMock::start(
        vec![account("us-west-2")],
        None,
        vec![
            Reply::Error(
                429,
                "ThrottlingException",
                "Too many requests, please wait before trying again.",
            ),
            Reply::stream("throttled-mid-stream.jsonl"),
            Reply::stream("hello.jsonl"),
        ],
    );
    let dir = TempDir::new("bedrock-throttle");
    let env = env_keys(SECRET);
    let mut a = bedrock(&mock, SONNET, &as_refs(&env), &dir);
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert!(a.text().ends_with("Hello from Bedrock"), "{}", a.text());
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    // Each attempt is signed anew, and accepted.
    assert!(reqs.iter().all(|r| r.verdict.is_ok()));
    assert!(a.finish().success());
}

#[test]
fn temporary_credentials_send_and_sign_their_session_token() {
    let mut temporary = account("eu-central-1");
    temporary.access_key_id = "ASIAIOSFODNN7EXAMPLE".into();
    temporary.session_token = Some("FwoGZXIvYXdzEXAMPLE//token+with/slashes=".into());
    let mock = BedrockMock::start(vec![temporary], None, vec![Reply::stream("hello.jsonl")]);
    let dir = TempDir::new("bedrock-token");
    let env = [
        ("AWS_ACCESS_KEY_ID", "ASIAIOSFODNN7EXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        (
            "AWS_SESSION_TOKEN",
            "FwoGZXIvYXdzEXAMPLE//token+with/slashes=",
        ),
        ("AWS_DEFAULT_REGION", "eu-central-1"),
    ];
    let mut a = bedrock(
        &mock,
        "eu.anthropic.claude-haiku-4-5-20251001-v1:0",
        &env,
        &dir,
    );
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let reqs = mock.requests();
    assert_eq!(reqs[0].verdict, Ok(()));
    assert_eq!(
        reqs[0].header("x-amz-security-token"),
        Some("FwoGZXIvYXdzEXAMPLE//token+with/slashes=")
    );
    assert!(reqs[0].header("authorization").is_some_and(
        |h| h.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token")
    ));
    assert!(
        !a.stderr_text().contains("token+with"),
        "the token was logged"
    );
    assert!(a.finish().success());

    // Without the token the mock does not know the temporary key.
    let mock = BedrockMock::start(
        vec![Account {
            session_token: Some("t".into()),
            ..account("eu-central-1")
        }],
        None,
        vec![Reply::stream("hello.jsonl")],
    );
    let dir = TempDir::new("bedrock-no-token");
    let env = [
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "eu-central-1"),
    ];
    let mut a = bedrock(&mock, SONNET, &env, &dir);
    let details = failure(&ask(&mut a, "hi"));
    assert!(
        details.contains(
            "403 AWS authentication failed: The security token included in the request is invalid."
        ),
        "{details}"
    );
    assert_eq!(mock.requests().len(), 1);
}

/// `prime-agent -p` with a profile of the shared files: the profile's keys and region sign
/// the call (the mock checks the credential scope's region).
#[test]
fn a_print_run_signs_with_a_profile_from_the_shared_files() {
    let mock = BedrockMock::start(
        vec![account("eu-west-3")],
        None,
        vec![Reply::stream("hello.jsonl")],
    );
    let dir = TempDir::new("bedrock-profile");
    let aws = dir.path().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        format!(
            "[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n\n[work]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        "[default]\nregion = us-east-1\n\n[profile work]\nregion = eu-west-3\n",
    )
    .unwrap();
    let child = agent_command(dir.path())
        .args([
            "-p",
            "--no-session",
            "--offline",
            "--no-context-files",
            "--model",
            &format!("amazon-bedrock/{SONNET}"),
            "say hello",
        ])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("AWS_PROFILE", "work")
        .env("AWS_ENDPOINT_URL", mock.url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Hello from Bedrock"
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].verdict, Ok(()));
    assert!(reqs[0].header("authorization").is_some_and(|h| h
        .contains(&format!("Credential={KEY_ID}/"))
        && h.contains("/eu-west-3/bedrock/")));
}

#[test]
fn the_bearer_token_is_sent_instead_of_a_signature() {
    let mock = BedrockMock::start(
        vec![],
        Some("ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"),
        vec![Reply::stream("hello.jsonl")],
    );
    let dir = TempDir::new("bedrock-bearer");
    let env = [
        (
            "AWS_BEARER_TOKEN_BEDROCK",
            "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl",
        ),
        // Keys in the environment do not matter once there is a bearer token.
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", "unused"),
    ];
    let mut a = bedrock(&mock, SONNET, &env, &dir);
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let reqs = mock.requests();
    assert_eq!(reqs[0].verdict, Ok(()));
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl")
    );
    assert!(reqs[0].header("x-amz-date").is_none());
    assert!(!a.stderr_text().contains("ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"));
    assert!(a.finish().success());
}

#[test]
fn without_credentials_each_prompt_says_what_to_set() {
    let mock = BedrockMock::start(vec![], None, vec![Reply::stream("hello.jsonl")]);
    let dir = TempDir::new("bedrock-none");
    let mut a = bedrock(&mock, SONNET, &[], &dir);
    let r = ask(&mut a, "hi");
    assert_eq!(r["error"]["data"]["kind"], "model_config", "{r}");
    let details = failure(&r);
    assert!(
        details.contains(
            "No API key found for amazon-bedrock. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ),
        "{details}"
    );
    assert!(mock.requests().is_empty());
}

/// A models.json provider on `bedrock-converse-stream`: its `baseUrl` is the endpoint, and an
/// application inference profile's ARN is one path segment (`:` and `/` encoded, and signed
/// encoded once more, as the service recomputes it).
#[test]
fn a_models_json_provider_signs_an_inference_profile_arn() {
    let mock = BedrockMock::start(
        vec![account("eu-west-1")],
        None,
        vec![Reply::stream("hello.jsonl")],
    );
    let dir = TempDir::new("bedrock-models-json");
    let arn = "arn:aws:bedrock:eu-west-1:123456789012:application-inference-profile/abc123";
    std::fs::write(
        dir.path().join("models.json"),
        json!({"providers": {"corp-bedrock": {
            "baseUrl": mock.url(), "api": "bedrock-converse-stream",
            "models": [{"id": arn, "name": "Claude Sonnet 4.5 (corp profile)", "reasoning": true,
                        "input": ["text", "image"], "contextWindow": 200000, "maxTokens": 64000}]}}})
        .to_string(),
    )
    .unwrap();
    let env = [
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "eu-west-1"),
        // The provider's baseUrl wins over the variable.
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
    ];
    let env: Vec<(&str, &str)> = env.into_iter().chain([("RUST_LOG", "debug")]).collect();
    let args = [
        "--provider",
        "corp-bedrock",
        "--model",
        arn,
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    let mut a = spawn_plain_env(&args, &dir, &env);
    let r = ask(&mut a, "hi");
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(a.text(), "Hello from Bedrock");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].verdict, Ok(()));
    assert_eq!(
        reqs[0].path,
        "/model/arn%3Aaws%3Abedrock%3Aeu-west-1%3A123456789012%3Aapplication-inference-profile%2Fabc123/converse-stream"
    );
    // Claude by its name: cache points and thinking.
    assert_eq!(
        reqs[0].body["system"][1],
        json!({"cachePoint": {"type": "default"}})
    );
    assert_eq!(
        reqs[0].body["additionalModelRequestFields"]["thinking"]["type"],
        "enabled"
    );
    assert!(a.finish().success());
}

#[test]
fn cancel_during_a_bedrock_stream_answers_cancelled_and_closes_the_socket() {
    let mut frames = crate::support::aws::frames_of("hello.jsonl");
    frames.truncate(2);
    let mock = BedrockMock::start(vec![account("us-west-2")], None, vec![Reply::Stall(frames)]);
    let dir = TempDir::new("bedrock-cancel");
    let env = env_keys(SECRET);
    let mut a = bedrock(&mock, SONNET, &as_refs(&env), &dir);
    a.handshake();
    let id = a.prompt("hi");
    a.wait_for("the first delta", |f| {
        f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    a.cancel();
    let r = a.response(&id);
    assert_eq!(r["result"], json!({"stopReason": "cancelled"}), "{r}");
    assert!(
        mock.wait_closed(TIMEOUT),
        "the mock sees the connection closed"
    );
    assert_eq!(a.text(), "Hello from Bedrock");
}
