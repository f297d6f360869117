//! What the model sees of Prime Agent (issue 20): the system prompt (behaviour spec §5.8) with
//! the kernel's API, skills, prompt templates, `SYSTEM.md` / `APPEND_SYSTEM.md`, settings.json
//! and the model selector. The scripted provider's `expect_system` / `expect_system_none`
//! steps check the prompt each model call received; the loopback model server checks what a
//! real provider sends (the harness's argv).

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, LlmServer};
use crate::support::model::{env_for, models_json_with_key};
use crate::support::*;

/// A scripted agent on `fixtures/scripts/prompt/<script>` in `dir`, with its own agent dir
/// (`<dir>/agent`) and harness dirs, after the handshake.
fn prompt_agent(dir: &TempDir, script: &str, extra: &[&str], env: &[(&str, &str)]) -> Agent {
    let agent_dir = dir.path().join("agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let agent_dir = agent_dir.display().to_string();
    let harness = dir.path().join("global-harness").display().to_string();
    let mut all: Vec<(&str, &str)> = vec![
        ("PRIME_AGENT_CODING_AGENT_DIR", &agent_dir),
        ("RLM_GLOBAL_HARNESS_STATE_DIR", &harness),
    ];
    all.extend_from_slice(env);
    agent_in_env(
        dir,
        &fixture(&format!("scripts/prompt/{script}"))
            .display()
            .to_string(),
        extra,
        &all,
    )
}

/// The prompt answered `end_turn`: every scripted expectation held.
fn ok(a: &mut Agent, text: &str) {
    let id = a.prompt(text);
    let r = a.response(&id);
    assert_eq!(
        r["result"]["stopReason"],
        "end_turn",
        "{r}\nstderr: {}",
        a.stderr_text()
    );
}

#[test]
fn the_root_prompt_describes_the_kernel_api() {
    let dir = TempDir::new("prompt-kernel");
    let mut a = prompt_agent(&dir, "kernel_prompt.jsonl", &["--no-session"], &[]);
    ok(&mut a, "hi");
}

#[test]
fn without_ipython_the_prompt_has_no_kernel_api() {
    let dir = TempDir::new("prompt-nokernel");
    let mut a = prompt_agent(&dir, "no_kernel.jsonl", &["--tools", "bash,read"], &[]);
    ok(&mut a, "hi");
}

#[test]
fn a_child_gets_the_child_doctrine_and_its_depth() {
    let dir = TempDir::new("prompt-child");
    let mut a = prompt_agent(&dir, "child_prompt.jsonl", &["--no-session"], &[]);
    ok(&mut a, "start a worker");
    // The worker's reply starts an unsolicited turn that expects it (and fails if the
    // worker's expectations failed first, since then nothing arrives).
    let done = a.wait_for("the main agent's answer to the worker", |f| {
        f["params"]["update"]["content"]["text"] == "The worker counted."
    });
    assert!(done.is_object());
}

/// The skill dirs of the fixtures and one discovered in the project.
fn skills_dir(dir: &TempDir) {
    dir.write(
        ".agents/skills/proj-skill/SKILL.md",
        "---\nname: proj-skill\ndescription: Found in the project\n---\nProject skill body.\n",
    );
}

#[test]
fn skills_reach_the_prompt_and_become_commands_and_messages() {
    let dir = TempDir::new("prompt-skills");
    skills_dir(&dir);
    let review = fixture("skills/review").display().to_string();
    let nodesc = fixture("skills/nodesc").display().to_string();
    let fix = fixture("prompts/fix.md").display().to_string();
    let mut a = prompt_agent(
        &dir,
        "skills.jsonl",
        &[
            "--skill",
            &review,
            "--skill",
            &nodesc,
            "--prompt-template",
            &fix,
        ],
        &[],
    );
    // The skill without a description: a warning on stderr, not a failed start-up.
    assert!(
        stderr_has(&a, "Skipping skill") && a.stderr_text().contains("no description"),
        "{}",
        a.stderr_text()
    );
    let commands = a.wait_for("available_commands_update", |f| {
        f["params"]["update"]["sessionUpdate"] == "available_commands_update"
    });
    let names: Vec<&str> = commands["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for want in ["skill:review", "skill:proj-skill", "fix", "help"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    assert!(!names.contains(&"skill:nodesc"));
    ok(&mut a, "what skills do you have?");
    ok(&mut a, "/skill:review the auth change");
    ok(&mut a, "/fix 42 quickly");
}

#[test]
fn no_skills_turns_discovery_off_but_keeps_explicit_skills() {
    let dir = TempDir::new("prompt-ns");
    skills_dir(&dir);
    let review = fixture("skills/review").display().to_string();
    let mut a = prompt_agent(&dir, "no_skills.jsonl", &["-ns", "--skill", &review], &[]);
    ok(&mut a, "hi");
}

#[test]
fn system_md_replaces_the_base_and_append_system_md_goes_last() {
    let dir = TempDir::new("prompt-system-md");
    dir.write(".prime/agent/SYSTEM.md", "CUSTOM-BASE from the project\n");
    dir.write("agent/SYSTEM.md", "SHADOWED-BASE\n");
    dir.write("agent/APPEND_SYSTEM.md", "APPENDED-LAST\n");
    let mut a = prompt_agent(
        &dir,
        "system_md.jsonl",
        &["--append-system-prompt", "FLAG-APPEND"],
        &[],
    );
    ok(&mut a, "hi");
}

#[test]
fn kernel_skills_and_settings_reach_the_kernel() {
    let dir = TempDir::new("prompt-kernel-skills");
    dir.write(
        ".prime/agent/settings.json",
        r#"{"shellCommandPrefix": "export PA_PREFIX=on", "rlmMaxDepth": 0, "someFutureKey": {"x": 1}}"#,
    );
    let greet = fixture("skills/greet").display().to_string();
    let mut a = prompt_agent(
        &dir,
        "kernel_skills.jsonl",
        &["--no-session", "--skill", &greet],
        &[("SERPER_API_KEY", "")],
    );
    ok(&mut a, "go");
    let made = dir.path().join(".agents/skills/made/SKILL.md");
    let text = std::fs::read_to_string(&made).expect("skill_creator wrote SKILL.md");
    assert!(text.starts_with("---\nname: made\ndescription: \"A made skill\"\n---\nBody text"));
}

#[test]
fn a_transcript_lists_skills_and_templates_as_commands() {
    // The exact list is in fixtures/transcripts/10_skills_and_templates.txt (run by
    // transcripts::all); this checks the fixture is there and names both kinds.
    let text = std::fs::read_to_string(fixture("transcripts/10_skills_and_templates.txt")).unwrap();
    assert!(text.contains("\"name\":\"skill:review\"") && text.contains("\"name\":\"fix\""));
}

fn stderr_has(a: &Agent, needle: &str) -> bool {
    crate::support::model::stderr_eventually(a, needle)
}

// --- settings and the model selector, on the loopback model server ------------------------------

/// An agent on the `intercept` provider of `models.json` in `dir` (the agent dir), with
/// `args` only (no `--provider` / `--model` unless given).
fn intercept_agent(
    dir: &TempDir,
    server: &LlmServer,
    args: &[&str],
    env: &[(&str, &str)],
) -> Agent {
    dir.write(
        "models.json",
        &models_json_with_key(server, "openai-completions", "test-key"),
    );
    let mut all = vec!["--mode", "acp", "--no-session", "--offline"];
    all.extend_from_slice(args);
    Agent::spawn(Spawn {
        args: all.iter().map(|s| s.to_string()).collect(),
        env: env_for(dir, env),
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    })
}

/// Handshake; the `configOptions` of `session/new`.
fn config_options(a: &mut Agent) -> Value {
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

fn current(options: &Value, id: &str) -> Value {
    options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .map(|o| o["currentValue"].clone())
        .unwrap_or(Value::Null)
}

fn menu(options: &Value) -> Vec<String> {
    let model = options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "model")
        .unwrap();
    model["options"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["options"].as_array().cloned().unwrap_or_default())
        .map(|o| o["value"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn settings_choose_the_default_model_and_level() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("settings-default");
    dir.write(
        "settings.json",
        r#"{"defaultProvider": "intercept", "defaultModel": "vision-model", "defaultThinkingLevel": "low", "unknownKey": true}"#,
    );
    // The project's file wins over the global one, key by key.
    dir.write(
        ".prime/agent/settings.json",
        r#"{"defaultModel": "claude-test"}"#,
    );
    let mut a = intercept_agent(&dir, &server, &[], &[]);
    let options = config_options(&mut a);
    assert_eq!(current(&options, "model"), "intercept/claude-test");
    assert_eq!(current(&options, "thought_level"), "low");
}

#[test]
fn an_unparsable_settings_file_stops_start_up_naming_it() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("settings-bad");
    let bad = dir.write(".prime/agent/settings.json", "{\"defaultModel\": ");
    let mut a = intercept_agent(&dir, &server, &[], &[]);
    let status = a.wait_exit(TIMEOUT).expect("the agent exits");
    assert_eq!(status.code(), Some(1));
    let err = a.stderr_text();
    assert!(
        err.contains(&format!("Error: Invalid settings file {}:", bad.display())),
        "{err}"
    );
}

#[test]
fn the_model_suffix_sets_the_level_unless_thinking_is_given() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("model-level");
    let mut a = intercept_agent(
        &dir,
        &server,
        &["--model", "intercept/claude-test:high"],
        &[],
    );
    let options = config_options(&mut a);
    assert_eq!(current(&options, "model"), "intercept/claude-test");
    assert_eq!(current(&options, "thought_level"), "high");
    let mut b = intercept_agent(
        &dir,
        &server,
        &[
            "--model",
            "intercept/claude-test:high",
            "--thinking",
            "minimal",
        ],
        &[],
    );
    let options = config_options(&mut b);
    assert_eq!(current(&options, "thought_level"), "minimal");
}

#[test]
fn models_scope_the_menu_and_the_first_is_the_default() {
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("models-scope");
    let mut a = intercept_agent(
        &dir,
        &server,
        &[
            "--models",
            "intercept/vision*:high,intercept/nope,claude-test",
        ],
        &[],
    );
    let options = config_options(&mut a);
    assert_eq!(
        menu(&options),
        vec!["intercept/vision-model", "intercept/claude-test"]
    );
    assert_eq!(current(&options, "model"), "intercept/vision-model");
    assert!(
        stderr_has(
            &a,
            "Model \"nope\" not found for provider \"intercept\". Using custom model id."
        ),
        "{}",
        a.stderr_text()
    );
    // settings enabledModels does the same when --models is not given.
    let dir = TempDir::new("models-settings");
    dir.write("settings.json", r#"{"enabledModels": ["claude*"]}"#);
    let mut b = intercept_agent(&dir, &server, &[], &[]);
    let options = config_options(&mut b);
    assert_eq!(menu(&options), vec!["intercept/claude-test"]);
    assert_eq!(current(&options, "model"), "intercept/claude-test");
}

#[test]
fn settings_retry_max_retries_zero_fails_at_the_first_error() {
    let server = LlmServer::start(vec![
        Canned::error(500, "error-500.json"),
        Canned::sse("openai-text.sse"),
    ]);
    let dir = TempDir::new("settings-retry");
    dir.write("settings.json", r#"{"retry": {"maxRetries": 0}}"#);
    let mut a = intercept_agent(
        &dir,
        &server,
        &["--provider", "intercept", "--model", "cold/test-model"],
        &[],
    );
    a.handshake();
    let id = a.prompt("hi");
    let r = a.response(&id);
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_eq!(server.posts().len(), 1, "no retry");
}

// --- verifiers' Prime Agent harness ---------------------------------------------------------------

/// The system prompt of a recorded Chat Completions request.
fn system_of(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body["messages"][0]["content"].to_string())
}

#[test]
fn the_harness_argv_loads_the_skill_into_the_system_prompt() {
    // Verifiers' Prime Agent harness: `--mode acp --provider intercept --model <id>
    // --daemon-socket <path> --offline --skill <dir> --append-system-prompt <text>`, with a
    // models.json whose apiKey names an environment variable.
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let dir = TempDir::new("harness-argv");
    dir.write(
        "models.json",
        &models_json_with_key(&server, "openai-completions", "PA_HARNESS_INTERCEPT_KEY"),
    );
    let skill = fixture("skills/review").display().to_string();
    let socket = dir.path().join("daemon.sock").display().to_string();
    let args = [
        "--mode",
        "acp",
        "--provider",
        "intercept",
        "--model",
        "cold/test-model",
        "--daemon-socket",
        &socket,
        "--offline",
        "--skill",
        &skill,
        "--append-system-prompt",
        "HARNESS-APPEND: answer in one line.",
    ];
    let mut a = Agent::spawn(Spawn {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: env_for(
            &dir,
            &[
                ("PA_HARNESS_INTERCEPT_KEY", "key-from-env"),
                (
                    "RLM_GLOBAL_HARNESS_STATE_DIR",
                    &dir.path().join("h").display().to_string(),
                ),
            ],
        ),
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    });
    let sid = a.handshake();
    for text in ["first", "second"] {
        let id = a.prompt(text);
        let r = a.response(&id);
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    let posts = server.posts();
    assert_eq!(posts.len(), 2);
    assert_eq!(
        posts[0].header("authorization"),
        Some("Bearer key-from-env")
    );
    let system = system_of(&posts[0].body);
    assert!(system.contains("<available_skills>"), "{system}");
    assert!(system.contains("<name>review</name>"));
    assert!(system.contains(&format!(
        "<location>{}/SKILL.md</location>",
        std::fs::canonicalize(&skill).unwrap().display()
    )));
    assert!(system.ends_with("HARNESS-APPEND: answer in one line."));
    // The conversation log is the session file of this session.
    assert!(
        system.contains(&format!(
            "Conversation log: {}\n",
            dir.path()
                .join("sessions")
                .join(format!("{sid}.jsonl"))
                .display()
        )),
        "{system}"
    );
    // The same prompt on every call (the provider's prefix cache).
    assert_eq!(system, system_of(&posts[1].body));
    let err = a.stderr_text();
    assert!(!err.contains("Ignoring unknown option"), "{err}");
    a.close_stdin();
    assert!(a.wait_exit(Duration::from_secs(10)).is_some());
}

/// A Python with Pillow for the kernel: `PRIME_AGENT_TEST_PILLOW_PYTHON`, else `python3` if it
/// has it.
fn pillow_python() -> Option<String> {
    let candidates = std::env::var("PRIME_AGENT_TEST_PILLOW_PYTHON")
        .ok()
        .into_iter()
        .chain(["python3".to_owned()]);
    for python in candidates {
        let ok = std::process::Command::new(&python)
            .args(["-c", "import PIL"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    None
}

#[test]
fn images_auto_resize_shrinks_large_attachments_when_pillow_is_there() {
    let Some(python) = pillow_python() else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: images_auto_resize: no Python with Pillow (set PRIME_AGENT_TEST_PILLOW_PYTHON)"
        );
        return;
    };
    let dir = TempDir::new("auto-resize");
    let mut a = prompt_agent(
        &dir,
        "auto_resize.jsonl",
        &["--no-session"],
        &[("PRIME_AGENT_KERNEL_PYTHON", &python)],
    );
    ok(&mut a, "look");
    let image = a
        .updates_of("tool_call_update")
        .into_iter()
        .flat_map(|u| u["content"].as_array().cloned().unwrap_or_default())
        .find(|c| c["content"]["type"] == "image")
        .expect("the resized image in the tool call");
    assert_eq!(image["content"]["mimeType"], "image/jpeg");
    assert!(image["content"]["data"].as_str().unwrap().len() <= 350_000);
    // Off in the settings: the clear refusal.
    let dir = TempDir::new("no-resize");
    dir.write(
        "agent/settings.json",
        r#"{"images": {"autoResize": false}}"#,
    );
    let mut b = prompt_agent(
        &dir,
        "no_resize.jsonl",
        &["--no-session"],
        &[("PRIME_AGENT_KERNEL_PYTHON", &python)],
    );
    ok(&mut b, "look");
}

#[test]
fn settings_shell_images_and_session_dir() {
    let dir = TempDir::new("settings-shell");
    dir.write(
        "agent/settings.json",
        r#"{"shellPath": "/bin/sh", "shellCommandPrefix": "export PA_PREFIX=on", "images": {"blockImages": true}, "sessionDir": "mysessions"}"#,
    );
    let mut a = prompt_agent(&dir, "settings_shell.jsonl", &[], &[]);
    ok(&mut a, "go");
    let sid = a.sid();
    let file = dir
        .path()
        .join("agent/mysessions")
        .join(format!("{sid}.jsonl"));
    assert!(
        file.is_file(),
        "the session file in sessionDir: {}",
        file.display()
    );
}
