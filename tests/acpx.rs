//! A real ACP client drives the agent: acpx (pinned in `.deps/`, see `scripts/test-deps.sh`)
//! selects a model through the `model` config option and runs a prompt, once against the
//! loopback model server (two models, so the switch is visible in the request the server
//! records) and once against the scripted provider. Every frame the agent wrote (acpx's
//! `--format json` prints both directions) is checked against the ACP schema.
//! See: issue 14 ("acpx selects a model through the config option").

use std::collections::HashMap;
use std::process::Command;

use serde_json::Value;

use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::{env_for, models_json};
use crate::support::*;

/// Methods acpx sends the agent: its frames are not the agent's and are not checked.
const CLIENT_METHODS: &[&str] = &[
    "initialize",
    "session/new",
    "session/prompt",
    "session/set_config_option",
    "session/set_model",
    "session/set_mode",
    "session/cancel",
    "session/close",
];

/// Runs `acpx --format json --approve-all --agent <agent_args> <extra> exec <prompt>` in `dir`
/// with `env`; returns every JSON frame it printed, after checking the agent's.
fn acpx(
    acpx: &std::path::Path,
    dir: &TempDir,
    env: &[(String, String)],
    agent_args: &[&str],
    extra: &[&str],
    prompt: &str,
) -> Vec<Value> {
    let agent = std::iter::once(bin())
        .chain(agent_args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let mut args = vec![
        "--format",
        "json",
        "--approve-all",
        "--timeout",
        "60",
        "--agent",
        &agent,
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["exec", prompt]);
    let out = Command::new(acpx)
        .args(&args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("HOME", dir.path())
        .current_dir(dir.path())
        .output()
        .expect("run acpx");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "acpx failed ({:?}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let frames: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let mut methods = HashMap::new();
    for f in &frames {
        match f["method"].as_str() {
            Some(m) if CLIENT_METHODS.contains(&m) => {
                methods.insert(f["id"].to_string(), m.to_owned());
            }
            _ => assert_schema_valid(f, &methods),
        }
    }
    frames
}

fn request<'a>(frames: &'a [Value], method: &str) -> Option<&'a Value> {
    frames
        .iter()
        .find(|f| f["method"] == method && f.get("id").is_some())
}

fn response<'a>(frames: &'a [Value], request: &Value) -> &'a Value {
    frames
        .iter()
        .find(|f| f["id"] == request["id"] && f.get("method").is_none())
        .unwrap_or_else(|| panic!("no response to {request}"))
}

fn text(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|f| f["params"]["update"]["content"]["text"].as_str())
        .collect()
}

#[test]
fn acpx_selects_a_model_through_the_config_option_and_runs_a_prompt() {
    let Some(acpx_bin) = deps::npm_bin(
        "acpx",
        "acpx_selects_a_model_through_the_config_option_and_runs_a_prompt",
    ) else {
        return;
    };
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("acpx");
    dir.write("models.json", &models_json(&server, "openai-completions"));
    let env = env_for(&dir, &[]);
    let frames = acpx(
        &acpx_bin,
        &dir,
        &env,
        &[
            "--mode",
            "acp",
            "--provider",
            "intercept",
            "--model",
            "cold/test-model",
            "--no-context-files",
        ],
        &["--model", "intercept/vision-model"],
        "say hi",
    );
    let set = request(&frames, "session/set_config_option").expect("acpx switched the model");
    assert_eq!(set["params"]["configId"], "model");
    assert_eq!(set["params"]["value"], "intercept/vision-model");
    let options = &response(&frames, set)["result"]["configOptions"];
    let model = options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "model")
        .unwrap();
    assert_eq!(model["currentValue"], "intercept/vision-model");
    let prompt = request(&frames, "session/prompt").unwrap();
    assert_eq!(
        response(&frames, prompt)["result"]["stopReason"],
        "end_turn"
    );
    assert_eq!(text(&frames), "Hello, wörld!");
    // The prompt really went to the selected model.
    let posts = server.posts();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].body["model"], "vision-model");
}

#[test]
fn acpx_runs_a_scripted_prompt_on_its_one_model() {
    let Some(acpx_bin) = deps::npm_bin("acpx", "acpx_runs_a_scripted_prompt_on_its_one_model")
    else {
        return;
    };
    let dir = TempDir::new("acpx-scripted");
    let script = fixture("scripts/hello.jsonl").display().to_string();
    let frames = acpx(
        &acpx_bin,
        &dir,
        &[],
        &[
            "--mode",
            "acp",
            "--provider",
            "scripted",
            "--script",
            &script,
        ],
        &["--model", "scripted/hello.jsonl"],
        "say hi",
    );
    // Already the current model: nothing to switch.
    assert!(request(&frames, "session/set_config_option").is_none());
    let prompt = request(&frames, "session/prompt").unwrap();
    assert_eq!(
        response(&frames, prompt)["result"]["stopReason"],
        "end_turn"
    );
    assert_eq!(text(&frames), "Hello, world");
}
