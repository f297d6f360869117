//! The sandbox (`--sandbox`, docs/sandbox.md) on the real binary, each attempt a scripted tool
//! call: the escape suite (every way out fails with a clear error inside `workspace-write` and
//! succeeds with `--sandbox off`), the usual work inside it (a real `pytest`, the repository's own
//! scripted fixtures), and the honest refusals.
//! Skipped (with a `skipped:` line) where this kernel has no Landlock.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

/// Whether this kernel offers Landlock (`prime-agent sandbox` says); prints the skip if not.
fn landlock(test: &str) -> bool {
    let out = agent_command(Path::new("/nonexistent-agent-dir"))
        .arg("sandbox")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let _ = writeln!(std::io::stderr(), "skipped: {test}: {}", text.trim());
        return false;
    }
    assert!(text.starts_with("sandbox: Landlock ABI "), "{text}");
    true
}

/// One finished tool call: its error flag and output text.
#[derive(Debug)]
struct Call {
    is_error: bool,
    text: String,
}

/// Runs one scripted prompt (`--mode json`) in `cwd` whose model makes `calls`, one per
/// model call, with `flags`; returns the exit code, the finished calls in order, and stderr.
fn run_calls(
    dir: &TempDir,
    cwd: &Path,
    calls: &[Value],
    flags: &[&str],
) -> (i32, Vec<Call>, String) {
    let mut lines: Vec<Value> = calls
        .iter()
        .map(|c| json!({"steps": [{"tool_call": c}]}))
        .collect();
    lines.push(json!({"text": "done"}));
    let script = script_file(dir, &lines);
    let mut child = agent_command(&dir.path().join("agent"))
        .args([
            "--provider",
            "scripted",
            "--script",
            &script,
            "--mode",
            "acp-json",
        ])
        .args(flags)
        .arg("go")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    let done = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && (u["status"] == "completed" || u["status"] == "failed")
        })
        .map(|u| Call {
            is_error: u["status"] == "failed",
            text: u["rawOutput"]["output"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| u["content"].to_string()),
        })
        .collect();
    (code, done, err)
}

fn bash(command: &str) -> Value {
    json!({"name": "bash", "arguments": {"command": command}})
}

fn cell(code: &str) -> Value {
    json!({"name": "ipython", "arguments": {"code": code}})
}

/// A project dir (the cwd) beside an `outside` dir holding two files to steal.
struct Layout {
    dir: TempDir,
    work: std::path::PathBuf,
    out: std::path::PathBuf,
}

fn layout(tag: &str) -> Layout {
    let dir = TempDir::new(tag);
    let work = dir.path().join("work");
    let out = dir.path().join("outside");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("victim.txt"), "original\n").unwrap();
    std::fs::write(out.join("victim2.txt"), "original\n").unwrap();
    Layout { dir, work, out }
}

/// Every escape attempt, as (name, tool call, whether it got out: a check on the outside dir).
type Escaped = Box<dyn Fn(&Path) -> bool>;

fn attempts(out: &Path, port: u16) -> Vec<(&'static str, Value, Escaped)> {
    let o = out.display().to_string();
    let exists =
        |name: &'static str| -> Escaped { Box::new(move |out: &Path| out.join(name).exists()) };
    vec![
        ("a command", bash(&format!("echo x > {o}/cmd.txt")), exists("cmd.txt")),
        (
            "a Python open",
            cell(&format!("open('{o}/py.txt', 'w').write('x')")),
            exists("py.txt"),
        ),
        (
            "a %%bash cell",
            cell(&format!("%%bash\nset -e\necho x > {o}/cell.txt")),
            exists("cell.txt"),
        ),
        (
            "a symlink inside the cwd pointing out",
            bash(&format!("ln -s {o} link && echo x > link/sym.txt")),
            exists("sym.txt"),
        ),
        (
            "a rename of an outside file",
            bash(&format!("mv {o}/victim.txt ./moved.txt")),
            Box::new(|out: &Path| !out.join("victim.txt").exists()),
        ),
        (
            "a hard link of an outside file",
            bash(&format!("ln {o}/victim2.txt ./hl && echo changed >> ./hl")),
            Box::new(|out: &Path| {
                std::fs::read_to_string(out.join("victim2.txt")).unwrap() != "original\n"
            }),
        ),
        (
            "/proc/self/root",
            bash(&format!("echo x > /proc/self/root{o}/proc.txt")),
            exists("proc.txt"),
        ),
        (
            "a setuid program",
            bash(&format!(
                "cp \"$(command -v touch)\" ./suid-touch && chmod u+s ./suid-touch && ./suid-touch {o}/suid.txt"
            )),
            exists("suid.txt"),
        ),
        (
            "prctl from inside",
            cell(&format!(
                "import ctypes\nlibc = ctypes.CDLL(None)\nprint('prctl', libc.prctl(38, 0, 0, 0, 0))\nopen('{o}/prctl.txt', 'w').write('x')"
            )),
            exists("prctl.txt"),
        ),
        (
            "unshare from inside",
            bash(&format!("unshare -U -r sh -c 'echo x > {o}/ns.txt'")),
            exists("ns.txt"),
        ),
        (
            "a TCP connection to a local listener",
            bash(&format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected > {o}/../work/tcp.txt && cat tcp.txt"
            )),
            Box::new(|out: &Path| out.join("../work/tcp.txt").exists()),
        ),
        (
            "the write tool",
            json!({"name": "write", "arguments": {"path": format!("{o}/tool.txt"), "content": "x"}}),
            exists("tool.txt"),
        ),
    ]
}

/// A listener that accepts (and drops) connections until the test ends.
fn listener() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in l.incoming() {});
    port
}

/// Each attempt alone (so one that gets out cannot help the next), under `flags`; returns
/// per attempt: the call's error flag, its text, and whether it got out.
fn try_each(tag: &str, port: u16, flags: &[&str]) -> Vec<(&'static str, bool, String, bool)> {
    let mut results = Vec::new();
    for i in 0..attempts(Path::new("/"), port).len() {
        let l = layout(&format!("{tag}{i}"));
        let (name, call, escaped) = attempts(&l.out, port).swap_remove(i);
        let (code, calls, err) = run_calls(&l.dir, &l.work, &[call], flags);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(calls.len(), 1, "{name}: {calls:?} {err}");
        let got_out = escaped(&l.out);
        results.push((name, calls[0].is_error, calls[0].text.clone(), got_out));
    }
    results
}

#[test]
fn every_escape_fails_inside_the_sandbox_and_works_without_it() {
    if !landlock("every_escape_fails_inside_the_sandbox_and_works_without_it") {
        return;
    }
    let port = listener();
    for (name, is_error, text, got_out) in
        try_each("escape-in", port, &["--sandbox", "workspace-write"])
    {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let _ = writeln!(
            std::io::stderr(),
            "sandbox escape: {name}: blocked ({first})"
        );
        assert!(!got_out, "{name} got out of the sandbox: {text}");
        // The clear error: the OS's "Permission denied" (or the write tool's sandbox text).
        assert!(
            text.contains("Permission denied")
                // Landlock's answer to a link or rename across its rules (`REFER`).
                || text.contains("Invalid cross-device link")
                || text.contains("outside the workspace-write sandbox"),
            "{name}: {text}"
        );
        assert!(
            is_error || text.contains("Permission denied"),
            "{name}: {text}"
        );
    }
    for (name, is_error, text, got_out) in try_each("escape-off", port, &["--sandbox", "off"]) {
        let _ = writeln!(
            std::io::stderr(),
            "sandbox escape: {name}: got out with --sandbox off: {got_out}"
        );
        assert!(got_out, "{name} did not work without the sandbox: {text}");
        assert!(!is_error, "{name}: {text}");
    }
}

/// A process left running in the background (`setsid`: out of the command's group, so it
/// outlives the turn and the agent) is still inside the sandbox when it writes.
#[test]
fn a_background_process_stays_inside_after_the_turn() {
    if !landlock("a_background_process_stays_inside_after_the_turn") {
        return;
    }
    for (flags, inside) in [
        (["--sandbox", "workspace-write"], true),
        (["--sandbox", "off"], false),
    ] {
        let l = layout(if inside { "bg-in" } else { "bg-off" });
        let o = l.out.display();
        // It has left the group before the command ends (else the group's kill gets it first).
        let command = format!(
            "setsid sh -c 'touch up; sleep 1; echo x > {o}/bg.txt' > bg.log 2>&1 < /dev/null & while [ ! -e up ]; do sleep 0.02; done; echo started"
        );
        let (code, calls, err) = run_calls(&l.dir, &l.work, &[bash(&command)], &flags);
        assert_eq!((code, calls.len()), (0, 1), "{err}");
        // The agent has exited: wait for the background write (or its failure).
        let deadline = Instant::now() + Duration::from_secs(10);
        let log = l.work.join("bg.log");
        while Instant::now() < deadline
            && !l.out.join("bg.txt").exists()
            && std::fs::read_to_string(&log).map_or(true, |t| t.is_empty())
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if inside {
            assert!(
                !l.out.join("bg.txt").exists(),
                "the background write got out"
            );
            let listing: Vec<_> = std::fs::read_dir(&l.work)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(
                text.contains("Permission denied"),
                "{text:?} {listing:?} {calls:?} {err}"
            );
        } else {
            assert!(l.out.join("bg.txt").exists(), "{text}");
        }
    }
}

/// No new privileges in the sandbox (a setuid program gains nothing), none added without it.
#[test]
fn sandboxed_commands_have_no_new_privileges() {
    if !landlock("sandboxed_commands_have_no_new_privileges") {
        return;
    }
    let l = layout("nnp");
    let call = bash("grep NoNewPrivs /proc/self/status");
    let (_, calls, err) = run_calls(
        &l.dir,
        &l.work,
        std::slice::from_ref(&call),
        &["--sandbox", "read-only"],
    );
    assert!(calls[0].text.contains("NoNewPrivs:\t1"), "{calls:?} {err}");
    let (_, calls, err) = run_calls(&l.dir, &l.work, &[call], &[]);
    assert!(calls[0].text.contains("NoNewPrivs:\t0"), "{calls:?} {err}");
}

/// The usual work inside workspace-write: write, edit and read a small project, run its tests
/// with a command and from a cell, import it in the kernel; TMPDIR is writable.
#[test]
fn the_usual_work_passes_inside_workspace_write() {
    if !landlock("the_usual_work_passes_inside_workspace_write") {
        return;
    }
    let l = layout("work");
    let calls = [
        json!({"name": "write", "arguments": {"path": "calc.py", "content": "def add(a, b):\n    return a - b\n"}}),
        json!({"name": "write", "arguments": {"path": "test_calc.py", "content": "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\nif __name__ == '__main__':\n    unittest.main()\n"}}),
        bash("python3 -m unittest -q test_calc 2>&1 | tail -1; true"),
        json!({"name": "edit", "arguments": {"path": "calc.py", "edits": [{"oldText": "a - b", "newText": "a + b"}]}}),
        json!({"name": "read", "arguments": {"path": "calc.py"}}),
        bash("python3 -m unittest -q test_calc && mkdir -p build && echo ok > build/out && f=$(mktemp) && echo tmp > $f && cat $f"),
        cell("import calc\nprint(calc.add(2, 3))\nopen('from_cell.txt', 'w').write('cell')"),
        cell("%%bash\npython3 -m unittest -q test_calc 2>&1 | tail -1\ngit init -q repo && echo git-ok"),
    ];
    let (code, done, err) = run_calls(&l.dir, &l.work, &calls, &["--sandbox", "workspace-write"]);
    assert_eq!(code, 0, "{err}");
    let texts: Vec<&str> = done.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(done.len(), calls.len(), "{texts:?} {err}");
    for (i, c) in done.iter().enumerate() {
        assert!(!c.is_error, "call {i}: {}", c.text);
    }
    assert!(texts[2].contains("FAILED"), "{}", texts[2]);
    assert!(texts[4].contains("a + b"), "{}", texts[4]);
    assert!(texts[5].contains("tmp"), "{}", texts[5]);
    assert!(texts[6].contains('5'), "{}", texts[6]);
    assert!(
        texts[7].contains("OK") && texts[7].contains("git-ok"),
        "{}",
        texts[7]
    );
    assert_eq!(
        std::fs::read_to_string(l.work.join("build/out")).unwrap(),
        "ok\n"
    );
    assert!(l.work.join("from_cell.txt").exists());
}

/// The permission mode `read-only` with a sandbox runs commands inside the read-only sandbox
/// (they read, they cannot write) instead of refusing them.
#[test]
fn read_only_permission_mode_runs_commands_in_the_read_only_sandbox() {
    if !landlock("read_only_permission_mode_runs_commands_in_the_read_only_sandbox") {
        return;
    }
    let l = layout("ro-mode");
    std::fs::write(l.work.join("notes.txt"), "hello\n").unwrap();
    let calls = [
        bash("cat notes.txt; echo x > new.txt"),
        cell("print(open('notes.txt').read())"),
    ];
    let flags = [
        "--sandbox",
        "workspace-write",
        "--permission-mode",
        "read-only",
    ];
    let (code, done, err) = run_calls(&l.dir, &l.work, &calls, &flags);
    assert_eq!((code, done.len()), (0, 2), "{done:?} {err}");
    assert!(
        done[0].text.contains("hello") && done[0].text.contains("Permission denied"),
        "{:?}",
        done[0]
    );
    assert!(!l.work.join("new.txt").exists());
    assert!(done[1].text.contains("hello"), "{:?}", done[1]);
    // Without a sandbox the mode refuses them, as before.
    let (_, done, _) = run_calls(
        &l.dir,
        &l.work,
        &calls[..1],
        &["--permission-mode", "read-only"],
    );
    assert!(
        done[0].is_error && done[0].text.contains("read-only mode"),
        "{:?}",
        done[0]
    );
}

/// The read-only sandbox: reads and the private TMPDIR work, the cwd is not writable.
#[test]
fn read_only_sandbox_writes_only_its_temporary_directory() {
    if !landlock("read_only_sandbox_writes_only_its_temporary_directory") {
        return;
    }
    let l = layout("ro");
    let calls = [
        bash("echo t > $TMPDIR/t && cat $TMPDIR/t && echo x > here.txt"),
        json!({"name": "write", "arguments": {"path": "here2.txt", "content": "x"}}),
    ];
    let (_, done, err) = run_calls(&l.dir, &l.work, &calls, &["--sandbox", "read-only"]);
    assert_eq!(done.len(), 2, "{err}");
    assert!(
        done[0].text.lines().any(|l| l == "t") && done[0].text.contains("Permission denied"),
        "{:?}",
        done[0]
    );
    assert!(
        done[1].is_error && done[1].text.contains("outside the read-only sandbox"),
        "{:?}",
        done[1]
    );
    assert!(!l.work.join("here.txt").exists() && !l.work.join("here2.txt").exists());
}

/// `--sandbox-writable` adds a root; the agent directory stays out even inside the cwd; the
/// network flag lets TCP through.
#[test]
fn writable_roots_the_agent_directory_and_the_network_flag() {
    if !landlock("writable_roots_the_agent_directory_and_the_network_flag") {
        return;
    }
    let l = layout("roots");
    let extra = l.dir.path().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let port = listener();
    let calls = [
        bash(&format!("echo x > {}/e.txt && echo wrote", extra.display())),
        bash(&format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        )),
    ];
    let flags = [
        "--sandbox",
        "workspace-write",
        "--sandbox-writable",
        extra.to_str().unwrap(),
        "--sandbox-network",
        "on",
    ];
    let (_, done, err) = run_calls(&l.dir, &l.work, &calls, &flags);
    assert!(
        done[0].text.contains("wrote") && done[1].text.contains("connected"),
        "{done:?} {err}"
    );
    // An agent directory inside the cwd: its files stay unwritable, its neighbours are not.
    let agent = l.work.join(".prime-agent-dir");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("auth.json"), "{}").unwrap();
    std::fs::write(l.work.join("neighbour.txt"), "").unwrap();
    let script = script_file(
        &l.dir,
        &[
            json!({"steps": [{"tool_call": bash("echo x > .prime-agent-dir/auth.json; echo y > neighbour.txt && echo neighbour-ok")}]}),
            json!({"text": "done"}),
        ],
    );
    let out = agent_command(&agent)
        .args([
            "--provider",
            "scripted",
            "--script",
            &script,
            "--mode",
            "acp-json",
        ])
        .args(["--sandbox", "workspace-write", "go"])
        .current_dir(&l.work)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("neighbour-ok") && text.contains("Permission denied"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(agent.join("auth.json")).unwrap(),
        "{}"
    );
}

/// Bad sandbox arguments fail start-up (exit 1) with the cause; `prime-agent sandbox` names
/// the ABI.
#[test]
fn sandbox_misconfiguration_fails_start_up() {
    let dir = TempDir::new("sandbox-cli");
    let run = |args: &[&str]| {
        let out = agent_command(&dir.path().join("agent"))
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--sandbox", "strict", "-p", "x"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Unknown sandbox mode \"strict\""), "{err}");
    let (code, err) = run(&["--sandbox-network", "maybe", "-p", "x"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--sandbox-network"), "{err}");
    let (code, err) = run(&[
        "--sandbox",
        "workspace-write",
        "--sandbox-writable",
        "/no/such/dir",
        "--provider",
        "scripted",
        "-p",
        "x",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("/no/such/dir"), "{err}");
}

/// The `sandbox` config option (offered when the agent was started with `--sandbox`): a
/// switch applies from the next call, and a running kernel is replaced by one in the new
/// sandbox (its result says so). The system prompt's sandbox passage follows the switch
/// (the scripted model's `expect_system` steps), as it does a permission mode narrowing it.
#[test]
fn the_sandbox_option_switches_the_next_call() {
    if !landlock("the_sandbox_option_switches_the_next_call") {
        return;
    }
    let l = layout("option");
    let o = l.out.display().to_string();
    let write = |name: &str| bash(&format!("echo x > {o}/{name} && echo wrote"));
    let off = "Sandbox: off; your commands";
    let ws = format!(
        "run in the workspace-write OS sandbox. They may read any file but write only under {}, a private temporary directory",
        l.work.display()
    );
    let ro = "run in the read-only OS sandbox. They may read any file but write only under a private temporary directory";
    let lines = [
        json!({"steps": [{"expect_system": [off]}, {"tool_call": write("first.txt")}]}),
        json!({"steps": [{"tool_call": cell("x = 1")}]}),
        json!({"text": "one"}),
        json!({"steps": [{"expect_system": [ws]}, {"expect_system_none": [off]}, {"tool_call": write("second.txt")}]}),
        json!({"steps": [{"tool_call": cell(&format!("open('{o}/cell.txt', 'w').write('x')"))}]}),
        json!({"text": "two"}),
        json!({"steps": [{"expect_system": [ro]}, {"expect_system_none": [ws, off]}, {"text": "three"}]}),
    ];
    let script = script_file(&l.dir, &lines);
    let mut a = Agent::spawn(Spawn {
        cwd: Some(l.work.clone()),
        ..Spawn::scripted(&script, &["--sandbox", "off"])
    });
    a.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = l.work.display().to_string();
    let r = a.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_owned();
    a.session_id = Some(sid.clone());
    let option = r["result"]["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "sandbox")
        .cloned()
        .unwrap_or_else(|| panic!("no sandbox option: {r}"));
    assert_eq!(option["currentValue"], "off");
    assert_eq!(option["options"].as_array().unwrap().len(), 3, "{option}");
    assert_eq!(a.prompt_stop("one"), "end_turn");
    assert!(l.out.join("first.txt").exists());
    let r = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "sandbox", "value": "workspace-write"}),
    );
    let current = r["result"]["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "sandbox")
        .map(|o| o["currentValue"].clone());
    assert_eq!(current, Some(json!("workspace-write")), "{r}");
    let r = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "sandbox", "value": "strict"}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(a.prompt_stop("two"), "end_turn");
    // The permission mode read-only narrows the sandbox: the passage says so.
    let r = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "mode", "value": "read-only"}),
    );
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(a.prompt_stop("three"), "end_turn");
    assert!(!l.out.join("second.txt").exists());
    assert!(!l.out.join("cell.txt").exists());
    let results: Vec<String> = a
        .seen
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "tool_call_update")
        .filter_map(|f| f["params"]["update"]["rawOutput"]["output"].as_str())
        .map(str::to_owned)
        .collect();
    assert!(
        results.iter().any(
            |t| t.contains("restarted because the session's sandbox changed")
                && t.contains("Permission denied")
        ),
        "{results:?}"
    );
}

/// A real `pytest` (pinned in `.deps/py`, `make test-deps`) of a small package in the cwd, run
/// by the model's `bash` inside workspace-write: it writes `.pytest_cache` and `__pycache__`
/// in the cwd and its `tmp_path` under `$TMPDIR`, and passes (after a failing first run, as
/// in a real fix-the-bug turn).
#[test]
fn a_real_pytest_passes_inside_workspace_write() {
    let test = "a_real_pytest_passes_inside_workspace_write";
    if !landlock(test) {
        return;
    }
    let Some(python) = deps::python(test) else {
        return;
    };
    let l = layout("pytest");
    std::fs::create_dir_all(l.work.join("calc")).unwrap();
    std::fs::create_dir_all(l.work.join("tests")).unwrap();
    std::fs::write(l.work.join("calc/__init__.py"), "").unwrap();
    std::fs::write(
        l.work.join("calc/ops.py"),
        "def add(a, b):\n    return a - b\n\n\ndef save(path, value):\n    path.write_text(str(value))\n",
    )
    .unwrap();
    std::fs::write(
        l.work.join("tests/test_ops.py"),
        "import os\n\nimport pytest\n\nfrom calc.ops import add, save\n\n\n@pytest.mark.parametrize('a,b,want', [(2, 3, 5), (0, 0, 0), (-1, 1, 0)])\ndef test_add(a, b, want):\n    assert add(a, b) == want\n\n\ndef test_save_in_tmp_path(tmp_path):\n    assert str(tmp_path).startswith(os.path.realpath(os.environ['TMPDIR']))\n    save(tmp_path / 'x.txt', 7)\n    assert (tmp_path / 'x.txt').read_text() == '7'\n",
    )
    .unwrap();
    std::fs::write(
        l.work.join("pyproject.toml"),
        "[tool.pytest.ini_options]\npythonpath = [\".\"]\n",
    )
    .unwrap();
    // Bytecode is written as on a developer's machine (this environment may turn it off).
    let pytest = format!(
        "unset PYTHONDONTWRITEBYTECODE; {} -m pytest -q 2>&1; echo exit=$?",
        python.display()
    );
    let calls = [
        bash(&pytest),
        // A fix of another length: Python's bytecode cache trusts a source whose size and
        // mtime second are unchanged, and the first run cached `__pycache__` the same second.
        json!({"name": "edit", "arguments": {"path": "calc/ops.py", "edits": [{"oldText": "a - b", "newText": "b + a  # fixed"}]}}),
        bash(&pytest),
        // And it was inside: outside the cwd nothing may be written.
        bash(&format!("echo x > {}/proof.txt", l.out.display())),
    ];
    let (code, done, err) = run_calls(&l.dir, &l.work, &calls, &["--sandbox", "workspace-write"]);
    assert_eq!((code, done.len()), (0, 4), "{done:?} {err}");
    assert!(
        done[3].text.contains("Permission denied"),
        "{}",
        done[3].text
    );
    assert!(
        done[0].text.contains("2 failed, 2 passed") && done[0].text.contains("exit=1"),
        "{}",
        done[0].text
    );
    assert!(
        done[2].text.contains("4 passed") && done[2].text.contains("exit=0"),
        "{}",
        done[2].text
    );
    assert!(
        !done[2].text.contains("PytestCacheWarning"),
        "{}",
        done[2].text
    );
    assert!(l.work.join(".pytest_cache").is_dir());
    assert!(l.work.join("calc/__pycache__").is_dir());
    assert!(l.work.join("tests/__pycache__").is_dir());
}

/// The repository's own scripted coding fixtures once more, inside workspace-write: read,
/// write, edit and bash in one prompt (`tools_roundtrip`), and kernel cells (state across
/// cells, `%%bash` and top-level await, the `edit` helper). Each fixture's `expect` steps
/// check that every result reached the model.
#[test]
fn the_repository_fixtures_pass_inside_workspace_write() {
    if !landlock("the_repository_fixtures_pass_inside_workspace_write") {
        return;
    }
    for script in [
        "tools_roundtrip.jsonl",
        "kernel/state.jsonl",
        "kernel/bash_await.jsonl",
        "kernel/edit.jsonl",
    ] {
        let dir = TempDir::new("fixture-in");
        dir.write("notes.txt", "alpha\nbeta\nhello world\n");
        let harness = dir.path().join("global-harness").display().to_string();
        let mut a = agent_in_env(
            &dir,
            script,
            &["--sandbox", "workspace-write"],
            &[("RLM_GLOBAL_HARNESS_STATE_DIR", &harness)],
        );
        assert_eq!(a.prompt_stop("go"), "end_turn", "{script}");
        let failed: Vec<Value> = a
            .updates()
            .into_iter()
            .filter(|u| u["status"] == "failed")
            .collect();
        assert!(failed.is_empty(), "{script}: {failed:?}");
        let notes = std::fs::read_to_string(dir.path().join("notes.txt")).unwrap();
        match script {
            "tools_roundtrip.jsonl" => {
                assert_eq!(notes, "alpha\ngamma\nhello world\n");
                assert_eq!(
                    std::fs::read_to_string(dir.path().join("sub/dir/new.txt")).unwrap(),
                    "héllo\n"
                );
            }
            "kernel/edit.jsonl" => assert_eq!(notes, "alpha\nbeta\nhello there\n"),
            _ => {}
        }
        assert!(a.finish().success(), "{script}");
    }
}
