//! `make demo` and the README's by-hand examples must keep working: run them against the built binary.

use std::process::Command;

use crate::support::*;

#[test]
fn the_readme_demo_runs_end_to_end() {
    // As on a user's machine: no agent dir given, and a home that must stay empty.
    let home = TempDir::new("demo-home");
    let out = Command::new("python3")
        .arg(fixture("demo.py"))
        .arg(bin())
        .env("HOME", home.path())
        .env_remove("PRIME_AGENT_CODING_AGENT_DIR")
        .output()
        .expect("python3 runs the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("stopReason=end_turn"), "{stdout}");
    assert!(
        stdout.contains("Hello from prime-agent, over ACP!"),
        "{stdout}"
    );
    let written: Vec<_> = std::fs::read_dir(home.path()).unwrap().collect();
    assert!(written.is_empty(), "the demo wrote under HOME: {written:?}");
    // Its working directory (and the agent dir beside it) is gone.
    let work = stdout
        .split("(cwd ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the demo names its cwd");
    assert!(!std::path::Path::new(work).exists(), "{work} left behind");
}

/// The fenced block of `doc` whose first line starts with `first`.
fn fenced_block(doc: &str, first: &str) -> String {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let start = text
        .find(&format!("\n{first}"))
        .unwrap_or_else(|| panic!("{doc} has no block starting {first:?}"));
    let block = &text[start + 1..];
    block[..block.find("\n```").unwrap()].to_owned()
}

/// The README's by-hand ACP session, run as written (with this build's binary): the prompt
/// reaches the scripted model, whose reply comes back.
#[test]
fn the_readme_wire_example_sends_a_prompt_the_script_answers() {
    let dir = TempDir::new("readme-wire");
    let script = fenced_block("README.md", "coproc ACP ")
        .replace("./target/release/prime-agent", &format!("'{}'", bin()));
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(root())
        .env("PRIME_AGENT_CODING_AGENT_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frames: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let text: String = frames
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|f| f["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hello, world", "{stdout}");
    let last = frames.last().unwrap();
    assert_eq!(
        (&last["id"], &last["result"]["stopReason"]),
        (&serde_json::json!(3), &serde_json::json!("end_turn"))
    );
}

/// docs/scripted-model.md's example script runs as the page says.
#[test]
fn the_scripted_model_docs_example_runs() {
    let dir = TempDir::new("scripted-doc");
    let script = dir.write(
        "example.jsonl",
        &fenced_block("docs/scripted-model.md", "// a command, then"),
    );
    let out = agent_command(&dir.path().join("agent"))
        .args(["-p", "--no-session", "--provider", "scripted", "--script"])
        .arg(&script)
        .arg("go")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The command printed hi.\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
