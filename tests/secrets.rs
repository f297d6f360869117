//! Secrets and access (issue 5, item 5): keys never reach the log or the client, files the
//! agent creates are private, MCP entries with credentials are refused (§1.17), and nothing a
//! client sends is ever run as a `!command`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::*;
use crate::support::*;

const SECRET: &str = "sk-faults-7Qx9SECRETzz41";
const HEADER_SECRET: &str = "hdr-faults-SECRET-93kq";

/// Asserts no secret is in the agent's log (also across hex-dump line breaks) or in any frame
/// it wrote.
fn assert_nowhere(a: &Agent, secrets: &[&str]) {
    let log = a.stderr_text();
    let squashed: String = log.split_whitespace().collect();
    let frames: String = a.seen.iter().map(Value::to_string).collect();
    for s in secrets {
        let hex: String = s.bytes().take(6).map(|b| format!("{b:02x}")).collect();
        assert!(!log.contains(s) && !squashed.contains(s), "{s} in the log");
        assert!(!squashed.contains(&hex), "{s} hex-dumped in the log");
        assert!(!frames.contains(s), "{s} sent to the client");
    }
}

/// One agent per key source and wire API; the server answers 401, or 500 until the retries
/// are spent. At `RUST_LOG=trace` neither the key nor a custom auth header value shows up.
#[test]
fn keys_and_auth_headers_never_reach_the_log_or_the_client() {
    let cases: [(&str, &str, Canned, &str); 4] = [
        // models.json apiKey names an environment variable holding the key.
        (
            "openai-completions",
            "env",
            Canned::error(401, "error-401.json"),
            "401",
        ),
        // auth.json holds the key.
        (
            "openai-completions",
            "auth",
            Canned::error(500, "error-500.json"),
            "500",
        ),
        // models.json holds the key literally; Anthropic sends it as x-api-key.
        (
            "anthropic-messages",
            "literal",
            Canned::error(401, "anthropic-error-401.json"),
            "401",
        ),
        // --api-key on the command line.
        (
            "openai-completions",
            "cli",
            Canned::error(500, "error-500.json"),
            "500",
        ),
    ];
    let mut inputs = 0;
    let mut answered = 0;
    for (api, source, reply, status) in cases {
        let server = LlmServer::start(vec![reply]);
        let dir = TempDir::new("secrets");
        let api_key = match source {
            "env" => "FAULTS_SECRET_KEY_VAR",
            "literal" => SECRET,
            _ => "unused-models-json-key",
        };
        let mut models: Value =
            serde_json::from_str(&models_json_with_key(&server, api, api_key)).unwrap();
        models["providers"]["intercept"]["headers"] = json!({"X-Team-Auth": HEADER_SECRET});
        dir.write("models.json", &models.to_string());
        if source == "auth" {
            dir.write(
                "auth.json",
                &json!({"intercept": {"type": "api_key", "key": SECRET}}).to_string(),
            );
        }
        let model = if api == "anthropic-messages" {
            "claude-test"
        } else {
            "cold/test-model"
        };
        let mut args = vec![
            "--provider",
            "intercept",
            "--model",
            model,
            "--no-context-files",
        ];
        if source == "cli" {
            args.extend(["--api-key", SECRET]);
        }
        let mut a = spawn_plain_env(
            &args,
            &dir,
            &[("RUST_LOG", "trace"), ("FAULTS_SECRET_KEY_VAR", SECRET)],
        );
        let details = failure(&ask(&mut a, "hi"));
        assert!(details.contains(status), "{source}: {details}");
        // The key really was sent: the test would prove nothing otherwise.
        let q = &server.requests()[0];
        let sent = q
            .header("authorization")
            .or(q.header("x-api-key"))
            .unwrap_or("");
        assert!(sent.ends_with(SECRET), "{source}: sent {sent:?}");
        assert_eq!(q.header("x-team-auth"), Some(HEADER_SECRET));
        assert!(a.finish().success());
        assert!(stderr_eventually(&a, "DEBUG"), "verbose logging is on");
        assert_nowhere(&a, &[SECRET, HEADER_SECRET]);
        inputs += a.inputs;
        answered += a.answered;
    }
    reliability_line("secrets_keys_not_logged", 4, inputs, answered, 0);
}

fn walk(dir: &Path, out: &mut Vec<(String, u32, bool)>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()) {
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        out.push((
            e.path().display().to_string(),
            meta.permissions().mode() & 0o777,
            meta.is_dir(),
        ));
        if meta.is_dir() {
            walk(&e.path(), out);
        }
    }
}

/// Every file and directory the agent creates under its temp dir (bash full output, the
/// kernel's private files) is readable by its owner only.
#[test]
fn files_the_agent_creates_are_private() {
    let dir = TempDir::new("secrets-files");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"name":"bash","arguments":{"command":"seq 1 3000"}}}]}),
            json!({"steps":[{"expect":["Full output: /"]},{"tool_call":{"name":"ipython","arguments":{"code":"print('kernel up')"}}}]}),
            json!({"steps":[{"expect":["kernel up"]},{"text":"done"}]}),
        ],
    );
    let mut a = agent_in_env(
        &dir,
        &script,
        &[],
        &[
            ("TMPDIR", tmp.to_str().unwrap()),
            (
                "RLM_GLOBAL_HARNESS_STATE_DIR",
                dir.path().join("global").to_str().unwrap(),
            ),
            ("PRIME_AGENT_KERNEL_IPYTHON", "0"),
        ],
    );
    let id = a.prompt("go");
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\n{}",
        a.stderr_text()
    );
    let mut found = Vec::new();
    walk(&tmp, &mut found);
    assert!(
        found
            .iter()
            .any(|(p, _, d)| !d && p.contains("prime-agent-bash-")),
        "{found:?}"
    );
    let public: Vec<_> = found.iter().filter(|(_, m, _)| m & 0o077 != 0).collect();
    assert!(public.is_empty(), "readable by others: {public:?}");
    assert!(a.finish().success());
    a.report("secrets_private_files", 0, 0);
}

/// §1.17 end to end: credentials in an MCP URL and malformed environment entries are refused
/// with the spec's texts, the connection stays usable, and a valid entry's header value never
/// reaches the debug log.
#[test]
fn mcp_entries_with_credentials_are_refused_end_to_end() {
    let mut a = Agent::scripted("hello.jsonl", &[]);
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some());
    let cwd = std::env::current_dir().unwrap().display().to_string();
    let cases = [
        (
            json!([{"name":"docs","type":"http","url":"https://user:pw-SECRET-1@mcp.example/x"}]),
            "MCP server docs must use an HTTP(S) URL without embedded credentials",
        ),
        (
            json!([{"name":"docs","type":"http","url":"ftp://mcp.example/x"}]),
            "MCP server docs must use an HTTP(S) URL without embedded credentials",
        ),
        (
            json!([{"name":"local","command":"node","env":[{"name":"A=B","value":"env-SECRET-2"}]}]),
            "MCP server local has an invalid environment entry",
        ),
        (
            json!([{"name":"local","command":"node","env":[{"name":"","value":"v"}]}]),
            "MCP server local has an empty environment name",
        ),
        (
            json!([{"name":"local","command":"node","env":[{"name":"K","value":"1"},{"name":"K","value":"2"}]}]),
            "MCP server local has duplicate environment K",
        ),
        (
            json!([{"name":"local","command":"node","env":[{"name":"K","value":"nul\u{0}byte"}]}]),
            "MCP server local has an invalid environment entry",
        ),
        (
            json!([{"name":"local","command":"node","env":"not a list"}]),
            "MCP server local has an invalid environment entry",
        ),
    ];
    for (servers, reason) in &cases {
        let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": servers}));
        assert_eq!(r["error"]["code"], -32602, "{servers}: {r}");
        assert_eq!(r["error"]["data"]["reason"], *reason, "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(reason));
    }
    // A valid entry with a credential header is accepted; the session works.
    let r = a.call(
        "session/new",
        json!({"cwd": cwd, "mcpServers": [
            {"name":"TaskTools","type":"http","url":"https://task.example/mcp",
             "headers":[{"name":"Authorization","value":"Bearer hdr-SECRET-3"}]},
            {"name":"LocalTools","command":"node","args":["server.js"],
             "env":[{"name":"TASK_TOKEN","value":"env-SECRET-4"}]}
        ]}),
    );
    let sid = r["result"]["sessionId"]
        .as_str()
        .expect("accepted")
        .to_owned();
    a.session_id = Some(sid);
    let id = a.prompt("hello");
    assert_eq!(a.response(&id)["result"]["stopReason"], "end_turn");
    assert!(a.finish().success());
    assert_nowhere(
        &a,
        &[
            "pw-SECRET-1",
            "env-SECRET-2",
            "hdr-SECRET-3",
            "env-SECRET-4",
        ],
    );
    a.report("secrets_mcp_refused", cases.len() as u64, 0);
}

/// `!command` config values run only from the user's own `models.json` / `auth.json`: values
/// a client sends (MCP env and header values, the session cwd, `_meta`, prompt resources)
/// are data and are never executed.
#[test]
fn nothing_a_client_sends_runs_as_a_command() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("secrets-bang");
    let marker = dir.path().join("ran");
    let bang = format!("!touch {}", marker.display());
    // The user's own models.json may use `!command`: that one runs.
    dir.write(
        "models.json",
        &models_json_with_key(&server, "openai-completions", "!printf from-user-config"),
    );
    let mut s = spawn_in(dir, "cold/test-model", &[], false);
    let a = &mut s.agent;
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some());
    let r = a.call(
        "session/new",
        json!({"cwd": bang, "_meta": {"apiKey": bang}, "mcpServers": [
            {"name":"h","type":"http","url":"https://x.example/mcp",
             "headers":[{"name":"Authorization","value": bang}]},
            {"name":"s","command": bang, "args":[bang],
             "env":[{"name":"OPENAI_API_KEY","value": bang}]}
        ]}),
    );
    let sid = r["result"]["sessionId"]
        .as_str()
        .expect("accepted")
        .to_owned();
    a.session_id = Some(sid.clone());
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "_meta": {"apiKey": bang}, "prompt": [
            {"type":"text","text":"hello"},
            {"type":"resource","resource":{"uri":"file:///k","text": bang}}
        ]}),
    );
    let r = a.response(&id);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer from-user-config")
    );
    assert!(a.finish().success());
    assert!(!marker.exists(), "a client-sent value was run as a command");
    a.report("secrets_no_client_commands", 0, 0);
}
