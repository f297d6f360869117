//! ACP config options: the `model` and `thought_level` selects of `session/new`, switching
//! them with `session/set_config_option` (and legacy `session/set_model`), and the errors.
//! The models are the `intercept` provider's (its key is in models.json) on the loopback server,
//! so which model a prompt used is visible in the recorded request. A `-32602` carries the
//! spec's text as `data.reason` (the message is `Invalid params: <reason>`, as everywhere).

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::*;
use crate::support::*;

const COLD: &str = "intercept/cold/test-model";
const VISION: &str = "intercept/vision-model";
const CLAUDE: &str = "intercept/claude-test";

fn option<'a>(options: &'a Value, id: &str) -> Option<&'a Value> {
    options.as_array()?.iter().find(|o| o["id"] == id)
}

/// The values of the model select's `intercept` group.
fn intercept_models(options: &Value) -> Vec<String> {
    let model = option(options, "model").expect("a model option");
    model["options"]
        .as_array()
        .expect("groups")
        .iter()
        .filter(|g| g["group"] == "intercept")
        .flat_map(|g| g["options"].as_array().expect("options").iter())
        .map(|o| o["value"].as_str().expect("value").to_owned())
        .collect()
}

/// Handshake; returns the `configOptions` of `session/new`.
fn new_session(a: &mut Agent) -> Value {
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let cwd = std::env::current_dir().unwrap().display().to_string();
    let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    a.session_id = Some(r["result"]["sessionId"].as_str().expect("sid").to_owned());
    r["result"]["configOptions"].clone()
}

fn set(a: &mut Agent, config_id: &str, value: Value) -> Value {
    let sid = a.sid();
    a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": config_id, "value": value}),
    )
}

#[test]
fn session_new_offers_the_models_with_credentials_and_a_level_only_for_reasoning_ones() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    let options = new_session(&mut s.agent);
    let model = option(&options, "model").expect("model");
    assert_eq!(model["name"], "Model");
    assert_eq!(model["category"], "model");
    assert_eq!(model["type"], "select");
    assert_eq!(model["currentValue"], COLD);
    assert_eq!(intercept_models(&options), [COLD, VISION, CLAUDE]);
    // No other provider has a key in the test environment.
    assert_eq!(model["options"].as_array().unwrap().len(), 1, "{options}");
    assert_eq!(
        model["options"][0]["options"][0]["name"],
        "cold/test-model (intercept)"
    );
    assert!(
        option(&options, "thought_level").is_none(),
        "not a reasoning model"
    );
    assert!(s.agent.finish().success());

    let mut s = spawn_with(&server, "anthropic-messages", "claude-test", &[]);
    let options = new_session(&mut s.agent);
    assert_eq!(option(&options, "model").unwrap()["currentValue"], CLAUDE);
    let level = option(&options, "thought_level").expect("a reasoning model has levels");
    assert_eq!(level["category"], "thought_level");
    assert_eq!(level["currentValue"], "medium");
    let values: Vec<&str> = level["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(
        values,
        ["off", "minimal", "low", "medium", "high", "xhigh", "max"]
    );
    assert!(s.agent.finish().success());
}

#[test]
fn set_config_option_switches_the_model_and_level_of_the_next_prompt() {
    let server = LlmServer::start(vec![
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    new_session(&mut s.agent);
    assert_eq!(stop_reason(&ask_again(&mut s.agent, "one")), "end_turn");

    let r = set(&mut s.agent, "model", json!(VISION));
    let options = &r["result"]["configOptions"];
    assert_eq!(
        option(options, "model").unwrap()["currentValue"],
        VISION,
        "{r}"
    );
    assert!(option(options, "thought_level").is_none());
    assert_eq!(stop_reason(&ask_again(&mut s.agent, "two")), "end_turn");

    // A reasoning model brings the level along; setting it changes only the level.
    let r = set(&mut s.agent, "model", json!(CLAUDE));
    let level = option(&r["result"]["configOptions"], "thought_level").expect("levels");
    assert_eq!(level["currentValue"], "medium");
    let r = set(&mut s.agent, "thought_level", json!("high"));
    let options = &r["result"]["configOptions"];
    assert_eq!(option(options, "model").unwrap()["currentValue"], CLAUDE);
    assert_eq!(
        option(options, "thought_level").unwrap()["currentValue"],
        "high"
    );
    assert_eq!(stop_reason(&ask_again(&mut s.agent, "three")), "end_turn");

    let reqs = server.requests();
    let models: Vec<&Value> = reqs.iter().map(|q| &q.body["model"]).collect();
    assert_eq!(models, ["cold/test-model", "vision-model", "claude-test"]);
    assert!(reqs[0].body.get("reasoning_effort").is_none());
    assert_eq!(reqs[2].body["reasoning_effort"], "high");

    // Back to a plain model: the level is no longer offered, nor settable.
    let r = set(&mut s.agent, "model", json!(COLD));
    assert!(option(&r["result"]["configOptions"], "thought_level").is_none());
    let r = set(&mut s.agent, "thought_level", json!("low"));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(
        r["error"]["data"]["reason"],
        "Unknown ACP config option: thought_level"
    );
    assert!(s.agent.finish().success());
}

#[test]
fn bad_config_ids_values_and_sessions_are_refused_with_the_spec_texts() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let mut s = spawn_with(&server, "anthropic-messages", "claude-test", &[]);
    new_session(&mut s.agent);
    let cases = [
        (
            "fast_mode",
            json!("x"),
            "Unknown ACP config option: fast_mode",
        ),
        ("mode", json!("x"), "Permission mode is not available: x"),
        (
            "model",
            json!("intercept/nope"),
            "Model is not available: intercept/nope",
        ),
        (
            "model",
            json!("openai/gpt-5"),
            "Model is not available: openai/gpt-5",
        ),
        (
            "thought_level",
            json!("extreme"),
            "Reasoning level is not available: extreme",
        ),
        (
            "model",
            json!(true),
            "Invalid value for ACP config option model: true",
        ),
    ];
    for (id, value, message) in cases {
        let r = set(&mut s.agent, id, value);
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert_eq!(r["error"]["data"]["reason"], message, "{r}");
        assert_eq!(r["error"]["message"], format!("Invalid params: {message}"));
    }
    let r = s.agent.call(
        "session/set_config_option",
        json!({"sessionId": "nope", "configId": "model", "value": COLD}),
    );
    assert_eq!(r["error"]["message"], "Unknown ACP session: nope", "{r}");
    assert!(s.agent.finish().success());
}

#[test]
fn legacy_set_model_switches_the_model_and_answers_empty() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    new_session(&mut s.agent);
    let sid = s.agent.sid();
    let r = s.agent.call(
        "session/set_model",
        json!({"sessionId": sid, "modelId": VISION}),
    );
    assert_eq!(r["result"], json!({}), "{r}");
    let r = s.agent.call(
        "session/set_model",
        json!({"sessionId": sid, "modelId": "vision-model"}),
    );
    assert_eq!(
        r["error"]["data"]["reason"],
        "Model is not available: vision-model"
    );
    assert_eq!(stop_reason(&ask_again(&mut s.agent, "hi")), "end_turn");
    assert_eq!(server.requests()[0].body["model"], "vision-model");
    assert!(s.agent.finish().success());
}

#[test]
fn a_scripted_session_offers_its_script_as_the_one_model() {
    let mut a = Agent::scripted("hello.jsonl", &[]);
    let options = new_session(&mut a);
    let model = option(&options, "model").expect("model");
    assert_eq!(model["currentValue"], "scripted/hello.jsonl");
    // The permission mode, then the model.
    assert_eq!(options.as_array().unwrap().len(), 2);
    assert_eq!(options[0]["id"], "mode");
    let r = set(&mut a, "model", json!("scripted/hello.jsonl"));
    assert_eq!(r["result"]["configOptions"], options, "{r}");
    assert!(a.finish().success());
}

#[test]
fn a_model_command_tells_the_client_with_config_option_update() {
    // See: issue 14 ("config_option_update when the model changes by other means (/model)").
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    new_session(&mut s.agent);
    assert_eq!(
        stop_reason(&ask_again(&mut s.agent, &format!("/model {VISION}"))),
        "end_turn"
    );
    let updates = s.agent.updates_of("config_option_update");
    assert_eq!(updates.len(), 1, "{updates:?}");
    let model = option(&updates[0]["configOptions"], "model").expect("model");
    assert_eq!(model["currentValue"], VISION);
    // A client's own switch is answered with the list, not announced.
    set(&mut s.agent, "model", json!(COLD));
    assert_eq!(s.agent.updates_of("config_option_update").len(), 1);
    assert!(s.agent.finish().success());
}
