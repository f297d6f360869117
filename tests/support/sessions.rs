//! Agents that keep everything in a test's own directory: session files in `dir/sessions`
//! (`--session-dir`), the agent dir `dir/agent` (artifacts under `dir/agent/session-artifacts`),
//! the global harness state in `dir/global-harness`, and `dir` as the cwd. Shared by the tests
//! of sessions on disk, heartbeats, the kernel's namespace and resuming.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Agent, Spawn, TempDir};

/// A scripted agent in `dir` (see the module), with `args` after `--session-dir` and `env`
/// added to the environment.
pub fn in_dir(dir: &TempDir, script: &str, args: &[&str], env: &[(&str, &str)]) -> Agent {
    let sessions = dir.path().join("sessions").display().to_string();
    let mut all = vec!["--session-dir", sessions.as_str()];
    all.extend_from_slice(args);
    let mut spawn = Spawn::scripted(script, &all);
    spawn.cwd = Some(dir.path().to_path_buf());
    spawn.env = vec![
        (
            "PRIME_AGENT_CODING_AGENT_DIR".into(),
            dir.path().join("agent").display().to_string(),
        ),
        (
            "RLM_GLOBAL_HARNESS_STATE_DIR".into(),
            dir.path().join("global-harness").display().to_string(),
        ),
    ];
    spawn
        .env
        .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Agent::spawn(spawn)
}

/// The file of session `sid`.
pub fn session_file(dir: &TempDir, sid: &str) -> PathBuf {
    dir.path().join("sessions").join(format!("{sid}.jsonl"))
}

/// The artifacts directory of session `sid`.
pub fn artifacts(dir: &TempDir, sid: &str) -> PathBuf {
    dir.path().join("agent/session-artifacts").join(sid)
}

/// Every line of a session file, parsed (a line that is not JSON fails the test).
pub fn lines_of(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
