//! `make demo` must keep working: run the demo driver against the built binary.

use std::process::Command;

use crate::support::*;

#[test]
fn the_readme_demo_runs_end_to_end() {
    let out = Command::new("python3")
        .arg(fixture("demo.py"))
        .arg(bin())
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
}
