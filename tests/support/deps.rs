//! The pinned third-party components in `.deps/` (installed by `make test-deps`, which
//! `.ci/run` runs). A test that needs one and finds it missing prints why it skips, on stderr
//! and as a `skipped:` line, so a skip is never silent.

use std::path::PathBuf;

fn deps() -> PathBuf {
    super::root().join(".deps")
}

/// `.deps/node/node_modules/.bin/<name>` if installed, else prints the skip reason.
pub fn npm_bin(name: &str, test: &str) -> Option<PathBuf> {
    let path = deps().join("node/node_modules/.bin").join(name);
    found(path, test, "npm", name, "test-deps")
}

/// The Python of `.deps/py` (a venv with the pinned PyPI packages) if installed.
pub fn python(test: &str) -> Option<PathBuf> {
    let path = deps().join("py/bin/python");
    found(path, test, "pip", "the .deps/py venv", "test-deps")
}

/// The Python of `.deps/harness` (verifiers 0.4.0 and Harbor, installed by
/// `make harness-check`), for checking what the agent sends with their own validators.
pub fn harness_python(test: &str) -> Option<PathBuf> {
    let path = deps().join("harness/bin/python");
    found(path, test, "pip", "verifiers 0.4.0", "harness-check")
}

/// `make` is the target that installs it.
fn found(path: PathBuf, test: &str, kind: &str, what: &str, make: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test}: {kind} component {what} is not installed at {} (run `make {make}`)",
        path.display()
    );
    None
}
