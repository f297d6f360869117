//! `make demo` must keep working: run the demo driver against the built binary.

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
