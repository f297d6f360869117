//! `prime-agent model list`, `session export` and `schedule` run as a user runs them, against
//! the fixtures in `fixtures/cli/` (a session file and the expected outputs;
//! `UPDATE_FIXTURES=1` rewrites the expected ones, `make fixtures` does so), and the start-up
//! flags that now exit with a reason. Every run keeps stdin open and unread: a command that
//! read it would hang and fail the test.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::sessions;
use crate::support::*;

const SESSION_ID: &str = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary in `dir` (agent dir `dir/agent`, no provider keys but `env`), stdin open.
fn run_in(dir: &TempDir, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = agent_command(&dir.path().join("agent"));
    cmd.args(args)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("HOME", dir.path())
        .env_remove("PRIME_AGENT_SESSION_DIR")
        .env_remove("PRIME_AGENT_CODING_AGENT_SESSION_DIR")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn");
    let _stdin = child.stdin.take();
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }),
    );
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("prime-agent {args:?} did not exit (waiting on stdin?)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: readers.0.join().expect("stdout reader"),
        stderr: readers.1.join().expect("stderr reader"),
    }
}

/// Compares `actual` with `fixtures/cli/<name>`, or rewrites it under `UPDATE_FIXTURES`.
fn matches_fixture(name: &str, actual: &str) {
    let path = fixture(&format!("cli/{name}"));
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, actual).expect("write fixture");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_FIXTURES=1 writes it)", path.display()));
    assert_eq!(actual, want, "output differs from {}", path.display());
}

/// `dir/sessions/<id>.jsonl` from the fixture session.
fn with_session(dir: &TempDir) {
    let text = std::fs::read_to_string(fixture("cli/session.jsonl")).expect("fixture");
    dir.write(&format!("sessions/{SESSION_ID}.jsonl"), &text);
}

#[test]
fn model_list_prints_the_models_that_have_credentials() {
    let dir = TempDir::new("model-list");
    dir.write(
        "agent/models.json",
        r#"{"providers": {"local": {"baseUrl": "http://127.0.0.1:1/v1", "api": "openai-completions",
            "models": [{"id": "qwen-coder", "contextWindow": 32768, "maxTokens": 8192}]}}}"#,
    );
    let r = run_in(&dir, &["model", "list"], &[("GEMINI_API_KEY", "g-key")]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
    matches_fixture("model-list.txt", &r.stdout);
    assert!(!r.stdout.contains("g-key"));

    let r = run_in(
        &dir,
        &["model", "list", "gem pro"],
        &[("GEMINI_API_KEY", "g-key")],
    );
    assert_eq!(r.code, 0);
    matches_fixture("model-list-search.txt", &r.stdout);

    let r = run_in(&dir, &["model", "list", "zzz"], &[("GEMINI_API_KEY", "k")]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "No models matching \"zzz\"\n")
    );

    let empty = TempDir::new("model-list-none");
    let r = run_in(&empty, &["model", "list"], &[]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("No models available."), "{}", r.stdout);

    let r = run_in(&empty, &["model", "lst"], &[]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        "Error: Unknown model command: lst. Usage: prime-agent model list [search]\n"
    );
}

#[test]
fn session_export_writes_one_self_contained_escaped_page() {
    let dir = TempDir::new("export");
    with_session(&dir);
    // A unique id prefix names the session, as for --resume.
    let r = run_in(
        &dir,
        &[
            "session",
            "export",
            "0193a1b2",
            "out.html",
            "--session-dir",
            "sessions",
        ],
        &[],
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(
        r.stdout,
        format!("Exported session {SESSION_ID} to out.html\n")
    );
    let html = std::fs::read_to_string(dir.path().join("out.html")).expect("written");
    matches_fixture("session-export.html", &html);
    // Every prompt, answer, thought and tool call, escaped; nothing fetched from elsewhere.
    for needle in [
        "Why does &lt;b&gt;bold&lt;/b&gt; &amp; &quot;quoted&quot; text break my page?",
        "The user means unescaped &lt;tags&gt;.",
        "Tool call bash",
        "grep -n &#39;&lt;b&gt;&#39; page.html",
        "3:&lt;p&gt;&lt;b&gt;bold&lt;/b&gt;&lt;/p&gt;",
        "escape it as &amp;lt;b&amp;gt;.",
        "<title>Escaping &lt;b&gt; in pages</title>",
        "src=\"data:image/png;base64,iVBORw0KGgo=\"",
    ] {
        assert!(html.contains(needle), "missing {needle:?}");
    }
    assert!(!html.contains("<b>"), "unescaped markup from the session");
    assert!(
        !html.contains("<script") && !html.contains("http"),
        "not self-contained"
    );

    // By path, to the default name in the current directory.
    let path = dir.path().join(format!("sessions/{SESSION_ID}.jsonl"));
    let r = run_in(
        &dir,
        &["session", "export", &path.display().to_string()],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let default = dir.path().join(format!("{SESSION_ID}.html"));
    assert_eq!(
        std::fs::read_to_string(default).expect("default output"),
        html
    );

    let r = run_in(
        &dir,
        &["session", "export", "nope", "--session-dir", "sessions"],
        &[],
    );
    assert_eq!(r.code, 1);
    assert_eq!(r.stderr, "Error: No session found matching 'nope'\n");
}

fn jobs_file(dir: &TempDir) -> std::path::PathBuf {
    dir.path().join(format!(
        "agent/session-artifacts/{SESSION_ID}/scheduled-jobs.json"
    ))
}

fn stored_jobs(dir: &TempDir) -> Vec<Value> {
    let text = std::fs::read_to_string(jobs_file(dir)).expect("jobs file");
    let v: Value = serde_json::from_str(&text).expect("json");
    v["jobs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn schedule_add_list_and_remove_the_jobs_of_a_stored_session() {
    let dir = TempDir::new("schedule");
    with_session(&dir);
    let sd = ["--session-dir", "sessions"];
    let add = |when: &str, prompt: &str| {
        let mut args = vec!["schedule", "add", SESSION_ID, when];
        args.extend(sd);
        args.extend(["--", prompt]);
        run_in(&dir, &args, &[])
    };
    let r = add("every 10m", "-- check the <build>");
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let jobs = stored_jobs(&dir);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    let id = job["id"].as_str().expect("id").to_owned();
    assert!(
        r.stdout.starts_with(&format!(
            "Scheduled {id} for session {SESSION_ID}: every 10m, next at 20"
        )),
        "{}",
        r.stdout
    );
    assert_eq!(job["source"], "cron");
    assert_eq!(job["status"], "active");
    assert_eq!(job["prompt"], "-- check the <build>");
    assert_eq!(job["sessionId"], SESSION_ID);
    assert_eq!(job["cwd"], "/work/demo");
    assert_eq!(
        job["schedule"],
        serde_json::json!({"kind": "interval", "expression": "every 10m", "intervalMs": 600000})
    );
    assert!(job["nextRunAt"].as_str().is_some());
    assert!(Path::new(job["sessionFile"].as_str().unwrap()).is_file());

    // The grammar's own errors, and nothing stored for them.
    for (when, error) in [
        ("every 5s", "Recurring interval must be at least 10 seconds"),
        (
            "at 2001-01-01T00:00:00Z",
            "Scheduled time is in the past: 2001-01-01T00:00:00Z",
        ),
    ] {
        let r = add(when, "x");
        assert_eq!(
            (r.code, r.stderr.trim_end()),
            (1, format!("Error: {error}").as_str())
        );
    }
    let r = add("0 9 * * 1-5", "weekday standup");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(stored_jobs(&dir).len(), 2);

    let mut list = vec!["schedule", "list"];
    list.extend(sd);
    let r = run_in(&dir, &list, &[]);
    assert_eq!(r.code, 0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    assert!(lines[0].starts_with(&format!(
        "{id}  active  session {SESSION_ID}  every 10m, next at "
    )));
    assert!(
        lines[0].ends_with("ran 0 time(s): -- check the <build>"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("0 9 * * 1-5") && lines[1].ends_with("weekday standup"));
    // Named by its id prefix, the same.
    let r = run_in(
        &dir,
        &["schedule", "list", "0193", "--session-dir", "sessions"],
        &[],
    );
    assert_eq!(r.stdout.lines().count(), 2);

    let r = run_in(
        &dir,
        &["schedule", "remove", &id, "--session-dir", "sessions"],
        &[],
    );
    assert_eq!(
        (r.code, r.stdout.clone()),
        (0, format!("Removed {id} from session {SESSION_ID}\n"))
    );
    assert_eq!(stored_jobs(&dir).len(), 1);
    let r = run_in(
        &dir,
        &["schedule", "remove", &id, "--session-dir", "sessions"],
        &[],
    );
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!("Error: No scheduled job with id \"{id}\"\n")
    );

    // The session file itself is untouched.
    let original = std::fs::read_to_string(fixture("cli/session.jsonl")).unwrap();
    let now = std::fs::read_to_string(dir.path().join(format!("sessions/{SESSION_ID}.jsonl")));
    assert_eq!(now.unwrap(), original);
}

#[test]
fn upstream_flags_exit_with_their_reason_before_reading_stdin() {
    let dir = TempDir::new("flags");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--list-models"],
            "Error: --list-models was removed. Use \"prime-agent model list [search]\".\n",
        ),
        (
            &["--export", "s.jsonl"],
            "Error: --export was removed. Use \"prime-agent session export <file> [output]\".\n",
        ),
        (
            &["-e", "./ext.ts"],
            "Error: extensions are not supported by this build: they run in a JavaScript host, which prime-agent does not include\n",
        ),
        (&["-x"], "Error: Unknown option: -x\n"),
    ];
    for (args, want) in cases {
        let r = run_in(&dir, args, &[]);
        assert_eq!(
            (r.code, r.stderr.as_str(), r.stdout.as_str()),
            (1, *want, ""),
            "{args:?}"
        );
    }
    // `-ne` asks for no extensions, which is all this build has: accepted (issue 33).
    let r = run_in(&dir, &["-ne", "--version"], &[]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
}

#[test]
fn a_job_scheduled_from_the_command_line_fires_when_its_session_is_open_again() {
    let dir = TempDir::new("schedule-fires");
    let first = dir
        .write("first.jsonl", "{\"steps\":[{\"text\":\"noted\"}]}\n")
        .display()
        .to_string();
    let mut a = sessions::in_dir(&dir, &first, &[], &[]);
    let sid = a.handshake();
    assert_eq!(a.prompt_stop("remember me"), "end_turn");
    a.close_stdin();
    assert!(a.finish().success());

    let r = run_in(
        &dir,
        &[
            "schedule",
            "add",
            &sid,
            "in 1m",
            "--session-dir",
            "sessions",
            "--",
            "CLI JOB",
        ],
        &[],
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));

    // Continued with the schedule clock 60 times faster: the minute passes in about a second
    // and the job runs as the session's own unsolicited turn.
    let second = dir
        .write(
            "second.jsonl",
            "{\"steps\":[{\"expect\":[\"CLI JOB\"]},{\"text\":\"fired from the CLI\"}]}\n",
        )
        .display()
        .to_string();
    let mut b = sessions::in_dir(
        &dir,
        &second,
        &["-c"],
        &[("PRIME_AGENT_SCHEDULE_TIME_SCALE", "60")],
    );
    assert_eq!(b.handshake(), sid);
    let done = b.wait_for("the scheduled turn", |f| {
        f["params"]["update"]["content"]["text"] == "fired from the CLI"
    });
    assert_eq!(ns(&done["params"]["update"])["promptTurnId"], 0);
    // While an agent has the session open, its jobs are that agent's to change.
    let r = run_in(
        &dir,
        &[
            "schedule",
            "add",
            &sid,
            "in 1h",
            "--session-dir",
            "sessions",
            "--",
            "later",
        ],
        &[],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(&format!(
            "Session {sid} is open in another prime-agent process"
        )),
        "{}",
        r.stderr
    );
    b.close_stdin();
    assert!(b.finish().success());

    let r = run_in(
        &dir,
        &["schedule", "list", "--all", "--session-dir", "sessions"],
        &[],
    );
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains("  completed  ") && r.stdout.contains("ran 1 time(s): CLI JOB"),
        "{}",
        r.stdout
    );
}
