//! Agents on real providers pointed at the loopback model server (`llm_server`): the
//! environment, `models.json`, and the assertions every provider and fault test shares.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::llm_server::LlmServer;
use super::{Agent, Spawn, TempDir, NETWORK_VARS, PROVIDER_KEY_VARS, TIMEOUT};

/// An agent and the agent dir (`models.json`, `auth.json`, `HOME`) it was started with.
pub struct Setup {
    pub agent: Agent,
    pub _dir: TempDir,
}

/// The environment of a provider test: every provider key variable set empty (= missing) so
/// the developer's own keys never leak into a test, `dir` as agent dir and `HOME`, fast retries.
pub fn env_for(dir: &TempDir, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = PROVIDER_KEY_VARS
        .iter()
        .chain(NETWORK_VARS)
        .map(|k| (k.to_string(), String::new()))
        .collect();
    let d = dir.path().display().to_string();
    env.push(("PRIME_AGENT_CODING_AGENT_DIR".into(), d.clone()));
    env.push(("HOME".into(), d));
    env.push(("PRIME_AGENT_RETRY_BASE_MS".into(), "10".into()));
    for (k, v) in extra {
        env.push((k.to_string(), v.to_string()));
    }
    env
}

/// `models.json` with the cold-CLI `intercept` provider pointing at `server`.
pub fn models_json(server: &LlmServer, api: &str) -> String {
    models_json_with_key(server, api, "test-key")
}

/// `models.json` as `models_json`, with `api_key` as the provider's `apiKey` config value.
pub fn models_json_with_key(server: &LlmServer, api: &str, api_key: &str) -> String {
    let base = if api == "anthropic-messages" {
        server.url()
    } else {
        format!("{}/v1", server.url())
    };
    json!({"providers": {"intercept": {
    "baseUrl": base, "api": api, "apiKey": api_key,
    "models": [
        {"id": "cold/test-model", "reasoning": false, "input": ["text"]},
        {"id": "vision-model", "input": ["text", "image"]},
        {"id": "claude-test", "reasoning": true, "input": ["text", "image"], "maxTokens": 32000}
    ]}}})
    .to_string()
}

pub fn spawn_with(server: &LlmServer, api: &str, model: &str, extra_env: &[(&str, &str)]) -> Setup {
    spawn_full(server, api, model, extra_env, false)
}

pub fn spawn_full(
    server: &LlmServer,
    api: &str,
    model: &str,
    extra_env: &[(&str, &str)],
    skip_schema: bool,
) -> Setup {
    let dir = TempDir::new("provider");
    dir.write("models.json", &models_json(server, api));
    spawn_in(dir, model, extra_env, skip_schema)
}

/// An agent on the `intercept` provider of the `models.json` already written in `dir`.
pub fn spawn_in(dir: TempDir, model: &str, extra_env: &[(&str, &str)], skip_schema: bool) -> Setup {
    let args = [
        "--mode",
        "acp",
        "--provider",
        "intercept",
        "--model",
        model,
        "--no-session",
        "--offline",
        "--no-context-files",
    ];
    let agent = Agent::spawn(Spawn {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: env_for(&dir, extra_env),
        skip_schema,
        ..Default::default()
    });
    Setup { agent, _dir: dir }
}

pub fn spawn_plain(args: &[&str], dir: &TempDir) -> Agent {
    spawn_plain_env(args, dir, &[])
}

pub fn spawn_plain_env(args: &[&str], dir: &TempDir, env: &[(&str, &str)]) -> Agent {
    Agent::spawn(Spawn {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: env_for(dir, env),
        ..Default::default()
    })
}

/// Handshake, then a text prompt; returns its response frame.
pub fn ask(a: &mut Agent, text: &str) -> Value {
    a.handshake();
    let id = a.prompt(text);
    a.response(&id)
}

/// A text prompt on the open session; returns its response frame.
pub fn ask_again(a: &mut Agent, text: &str) -> Value {
    let id = a.prompt(text);
    a.response(&id)
}

pub fn stop_reason(r: &Value) -> &str {
    r["result"]["stopReason"].as_str().unwrap_or("")
}

/// Asserts a failed prompt and returns its `data.details`.
pub fn failure(r: &Value) -> String {
    assert_eq!(r["error"]["code"], -32603, "expected a failed prompt: {r}");
    let details = r["error"]["data"]["details"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        details.starts_with("prime-agent turn failed:"),
        "details: {details}"
    );
    details
}

/// The stderr reader thread may lag behind the agent; wait for `needle` (bounded).
pub fn stderr_eventually(a: &Agent, needle: &str) -> bool {
    let deadline = Instant::now() + TIMEOUT;
    while !a.stderr_text().contains(needle) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}
