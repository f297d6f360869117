//! The code's shape, checked so it stays that way: the crate's top-level modules import each
//! other without a cycle and exactly as ARCHITECTURE.md's `module-graph` block says
//! (`scripts/module_graph.py`), ARCHITECTURE.md stays short and wrapped, and the crate builds
//! JSON with its own `json!`.

use std::io::Write;
use std::process::Command;

use crate::support::root;

/// Runs `scripts/module_graph.py` with `args` and the `src` dir: its exit status and its
/// output, or `None` (after a `skipped:` line) when there is no python3.
fn module_graph(test: &str, args: &[&str]) -> Option<(bool, String)> {
    let out = match Command::new("python3")
        .arg(root().join("scripts/module_graph.py"))
        .args(args)
        .arg(root().join("src"))
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "skipped: {test}: no python3 ({e})");
            return None;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text))
}

#[test]
fn the_module_graph_has_no_cycle() {
    let Some((ok, text)) = module_graph("the_module_graph_has_no_cycle", &[]) else {
        return;
    };
    assert!(ok, "{text}");
    assert!(text.contains("no cycle"), "{text}");
}

/// `src/`'s directories are its layers (issue 32): a module uses only its own layer and the
/// ones below it (`LAYERS` in `scripts/module_graph.py`, lowest first).
#[test]
fn every_module_uses_only_its_layer_and_those_below() {
    let Some((ok, text)) = module_graph(
        "every_module_uses_only_its_layer_and_those_below",
        &["--layers"],
    ) else {
        return;
    };
    assert!(ok, "a module uses a higher layer:\n{text}");
    assert!(text.contains("every use points down"), "{text}");
}

/// Every dependency statement of ARCHITECTURE.md is its `module-graph` block, and the block is
/// the real graph: each module's line lists exactly the modules its files name, bottom-up.
#[test]
fn architecture_md_states_the_real_module_graph() {
    let doc = root().join("ARCHITECTURE.md");
    let doc = doc.to_str().expect("utf-8 path");
    let Some((ok, text)) = module_graph(
        "architecture_md_states_the_real_module_graph",
        &["--check-doc", doc],
    ) else {
        return;
    };
    assert!(
        ok,
        "ARCHITECTURE.md's module-graph block and src/ disagree:\n{text}"
    );
}

/// ARCHITECTURE.md is a codemap a newcomer reads in one sitting: at most 3,000 words, and
/// prose lines wrapped (no line over 120 characters outside code blocks).
#[test]
fn architecture_md_is_short_and_wrapped() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let words = text.split_whitespace().count();
    assert!(
        words <= 3000,
        "ARCHITECTURE.md has {words} words, over 3,000: move detail to docs/ or drop it"
    );
    let mut in_code = false;
    let mut long = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.chars().count() > 120 {
            long.push(format!(
                "ARCHITECTURE.md:{}: {} chars",
                i + 1,
                line.chars().count()
            ));
        }
    }
    assert!(long.is_empty(), "wrap these lines:\n{}", long.join("\n"));
}

/// The crate builds JSON with its own `json!` (`src/base/json.rs`, a smaller expansion that keeps
/// the static binary under its size budget): serde_json's macro, used again here and there,
/// would bring the cost back one site at a time.
#[test]
fn the_crate_builds_json_with_its_own_macro() {
    let mut uses = Vec::new();
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path.ends_with("src/base/json.rs")
            {
                let text = std::fs::read_to_string(&path).expect("source");
                for (i, line) in text.lines().enumerate() {
                    let listed = ["{json,", " json,", " json}"];
                    let imports = line.contains("serde_json::json")
                        || (line.trim_start().starts_with("use serde_json::{")
                            && listed.iter().any(|l| line.contains(l)));
                    if imports {
                        uses.push(format!("{}:{}: {line}", path.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(
        uses.is_empty(),
        "serde_json's json! used:\n{}",
        uses.join("\n")
    );
}

/// Tests start the binary only through `support::agent_command` or `Agent::spawn`, which give
/// it a temporary agent directory: a test that ran it bare wrote sessions into the
/// developer's `~/.prime/agent`.
#[test]
fn tests_start_the_binary_only_with_an_isolated_agent_dir() {
    let mut bare = Vec::new();
    let mut stack = vec![root().join("tests")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("tests") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("tests/structure.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("test source");
            // The function each line is in, by the last top-level `pub fn` above it.
            let mut in_fn = "";
            for (i, line) in text.lines().enumerate() {
                if line.starts_with("pub fn ") {
                    in_fn = line;
                }
                let is_helper =
                    path.ends_with("support/mod.rs") && in_fn.starts_with("pub fn agent_command");
                if line.contains("Command::new(bin())") && !is_helper {
                    bare.push(format!("{}:{}", path.display(), i + 1));
                }
            }
        }
    }
    assert!(
        bare.is_empty(),
        "start the binary with support::agent_command: {bare:?}"
    );
}

/// The main loop does no IO (issue 32): its modules deny clippy's `disallowed_methods` and
/// `disallowed_types`, whose lists (`clippy.toml`) name the file system, joins, sleeps, child
/// waits and the store's blocking methods; `make io-ban` (in `make test`) compiles them under
/// clippy. This keeps the attribute and the key entries from being dropped quietly.
#[test]
fn the_main_loops_modules_deny_io() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let deny = "#![deny(clippy::disallowed_methods, clippy::disallowed_types)]";
    for module in [
        "src/server/main_loop.rs",
        "src/server/handlers.rs",
        "src/server/handlers/manage.rs",
        "src/server/session.rs",
    ] {
        let text = std::fs::read_to_string(root.join(module)).unwrap();
        assert!(text.contains(deny), "{module} lost its IO ban: {deny}");
    }
    let config = std::fs::read_to_string(root.join("clippy.toml")).unwrap();
    for banned in [
        "\"std::fs::read\"",
        "\"std::fs::File\"",
        "\"std::thread::JoinHandle::join\"",
        "\"prime_agent::persist::Claim\"",
        "\"prime_agent::persist::load\"",
        "\"prime_agent::persist::Store::delete\"",
        "\"prime_agent::base::untrusted::read_text\"",
    ] {
        assert!(
            config.contains(banned),
            "clippy.toml no longer bans {banned}"
        );
    }
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();
    assert!(
        makefile.contains("@$(MAKE) --no-print-directory io-ban"),
        "make test no longer runs make io-ban"
    );
}

/// No production function over 100 lines but the debts `scripts/long_functions.txt` records,
/// each held to its recorded length (issue 32: an orchestrating function reads as a list of
/// named steps).
#[test]
fn no_production_function_grows_past_100_lines() {
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/fn_lengths.py"))
        .arg(root().join("src"))
        .output();
    let Ok(out) = out else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no python3 to run fn_lengths.py"
        );
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
}

/// `.ci/run` is valid shell and ends by running exactly the README's test command (a broken
/// line there fails CI before any test runs, and nothing else would say why).
#[test]
fn ci_run_parses_and_ends_with_the_readmes_test_command() {
    let path = root().join(".ci/run");
    let syntax = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let last = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or_default();
    assert_eq!(last, "make test");
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains("\nmake test "),
        "the README no longer names `make test`"
    );
}
