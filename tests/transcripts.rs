//! Data-driven transcripts: `fixtures/transcripts/*.txt` hold what a client sends (`>` lines)
//! and exactly what the agent must answer (`<` lines), in order.
//!
//! Format, one item per line:
//! - `# …` comment; blank lines are ignored.
//! - `args: …` extra command-line arguments (before the first frame); `$FIXTURES` expands.
//! - `> {json}` a frame to send (`$CWD` expands to the agent's cwd, `$SID`, `$SID2`, … to the
//!   session ids bound so far).
//! - `>raw text` sends the bytes after `>raw ` as one line, verbatim (for malformed input).
//! - `< {json}` the next frame the agent must write. In expected frames a string `"$SID…"`
//!   binds a session id on first use and must match afterwards, `$CWD` and bound names expand
//!   inside strings, and `"$ANY"` matches any value.
//! - `<none` nothing more arrives within a short window.
//! - `exit` close stdin; the agent must exit with status 0, having written nothing unexpected.
//!
//! `UPDATE_FIXTURES=1 cargo test --test integration transcripts` rewrites the `<` lines from
//! what the agent actually wrote (`make fixtures`): the old `<` lines are dropped and every
//! frame that arrives before the next `>` line (waiting 300 ms for stragglers) is recorded in
//! its place, so added or removed frames land where they belong. Review the diff before
//! committing.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// Placeholder bindings: `$CWD` is preset; `$SID`, `$SID2`, … bind to session ids.
type Vars = Vec<(String, String)>;

fn expand(text: &str, vars: &Vars) -> String {
    // Longest names first, so `$SID2` is not read as `$SID` + "2".
    let mut sorted: Vec<&(String, String)> = vars.iter().collect();
    sorted.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    sorted
        .iter()
        .fold(text.to_owned(), |acc, (k, v)| acc.replace(k.as_str(), v))
}

fn matches(expected: &Value, actual: &Value, vars: &mut Vars) -> bool {
    match (expected, actual) {
        (Value::String(s), _) if s == "$ANY" => true,
        (Value::String(s), Value::String(a)) if s.starts_with("$SID") && !s.contains(' ') => {
            match vars.iter().find(|(k, _)| k == s) {
                Some((_, v)) => v == a,
                None => {
                    vars.push((s.clone(), a.clone()));
                    true
                }
            }
        }
        (Value::String(s), Value::String(a)) => expand(s, vars) == *a,
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len()
                && e.iter()
                    .all(|(k, v)| a.get(k).is_some_and(|av| matches(v, av, vars)))
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(ev, av)| matches(ev, av, vars))
        }
        _ => expected == actual,
    }
}

/// Replaces known values in an actual frame by their placeholders (for UPDATE_FIXTURES).
fn generalise(actual: &Value, vars: &Vars) -> Value {
    match actual {
        Value::String(s) => {
            let mut out = s.clone();
            for (k, v) in vars {
                out = out.replace(v.as_str(), k);
            }
            Value::String(out)
        }
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), generalise(v, vars)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| generalise(v, vars)).collect()),
        other => other.clone(),
    }
}

fn run_transcript(name: &str) {
    let path = fixture(&format!("transcripts/{name}"));
    let text = std::fs::read_to_string(&path).unwrap();
    let update = std::env::var_os("UPDATE_FIXTURES").is_some();
    let dir = TempDir::new("transcript");
    let fixtures = fixture("");
    let fixtures = fixtures.display().to_string();
    let fixtures = fixtures.trim_end_matches('/');
    let mut args: Vec<String> = Vec::new();
    let mut agent: Option<Agent> = None;
    let mut out_lines: Vec<String> = Vec::new();
    let mut vars: Vars = vec![("$CWD".into(), dir.path().display().to_string())];
    for (n, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", n + 1);
        if let Some(rest) = line.strip_prefix("args:") {
            args.extend(
                rest.split_whitespace()
                    .map(|a| a.replace("$FIXTURES", fixtures)),
            );
            out_lines.push(line.to_owned());
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            out_lines.push(line.to_owned());
            continue;
        }
        let a = agent.get_or_insert_with(|| {
            Agent::spawn(Spawn {
                args: args.clone(),
                cwd: Some(dir.path().to_path_buf()),
                ..Default::default()
            })
        });
        // Regenerating: what arrived since the last send belongs before this line.
        if update && !line.starts_with("< ") {
            record(a, Duration::from_millis(300), &mut vars, &mut out_lines);
        }
        if let Some(raw) = line.strip_prefix(">raw ") {
            let mut bytes = raw.as_bytes().to_vec();
            bytes.push(b'\n');
            a.send_raw(&bytes);
            out_lines.push(line.to_owned());
        } else if let Some(frame) = line.strip_prefix("> ") {
            let frame = expand(frame, &vars);
            let _: Value =
                serde_json::from_str(&frame).unwrap_or_else(|e| panic!("{at}: bad frame: {e}"));
            let mut bytes = frame.into_bytes();
            bytes.push(b'\n');
            a.send_raw(&bytes);
            out_lines.push(line.to_owned());
        } else if line.starts_with("< ") && update {
            // Replaced by what `record` finds.
        } else if let Some(expected) = line.strip_prefix("< ") {
            let expected: Value = serde_json::from_str(expected)
                .unwrap_or_else(|e| panic!("{at}: bad expectation: {e}"));
            let actual = a.next_frame(TIMEOUT).unwrap_or_else(|| {
                panic!(
                    "{at}: no frame arrived; expected {expected}\nstderr:\n{}",
                    a.stderr_text()
                )
            });
            if update {
                if let Some(new_sid) = actual["result"]["sessionId"].as_str() {
                    let n = vars.iter().filter(|(k, _)| k.starts_with("$SID")).count();
                    let name = if n == 0 {
                        "$SID".to_owned()
                    } else {
                        format!("$SID{}", n + 1)
                    };
                    vars.push((name, new_sid.to_owned()));
                }
                out_lines.push(format!("< {}", generalise(&actual, &vars)));
            } else {
                assert!(
                    matches(&expected, &actual, &mut vars),
                    "{at}: frame mismatch\nexpected: {expected}\nactual:   {actual}"
                );
                out_lines.push(line.to_owned());
            }
        } else if line.trim() == "<none" {
            let extra = a.drain_for(Duration::from_millis(300));
            assert!(extra.is_empty(), "{at}: unexpected frames: {extra:?}");
            out_lines.push(line.to_owned());
        } else if line.trim() == "exit" {
            let status = a.finish();
            assert!(status.success(), "{at}: exit status {status}");
            if update {
                record(a, Duration::from_millis(100), &mut vars, &mut out_lines);
            }
            // Every frame the agent wrote before exiting must have been expected.
            let rest = a.drain_for(Duration::from_millis(100));
            assert!(
                rest.is_empty(),
                "{at}: unexpected frames before exit: {rest:?}"
            );
            out_lines.push(line.to_owned());
        } else {
            panic!("{at}: unknown transcript line: {line}");
        }
    }
    if update {
        std::fs::write(&path, out_lines.join("\n") + "\n").unwrap();
    }
}

/// Appends the frames that arrive within `window` as `<` lines, binding new session ids.
fn record(a: &mut Agent, window: Duration, vars: &mut Vars, out_lines: &mut Vec<String>) {
    for actual in a.drain_for(window) {
        if let Some(new_sid) = actual["result"]["sessionId"].as_str() {
            let n = vars.iter().filter(|(k, _)| k.starts_with("$SID")).count();
            let name = if n == 0 {
                "$SID".to_owned()
            } else {
                format!("$SID{}", n + 1)
            };
            vars.push((name, new_sid.to_owned()));
        }
        out_lines.push(format!("< {}", generalise(&actual, vars)));
    }
}

#[test]
fn transcripts() {
    let dir = fixture("transcripts");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no transcripts in {}", dir.display());
    for name in names {
        run_transcript(&name);
    }
}
