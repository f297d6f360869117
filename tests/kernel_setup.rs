//! `prime-agent kernel setup` (`src/kernel/venv.rs`): makes the managed kernel environment with
//! `python3 -m venv` and pip, offline here (pip reads a local wheel directory and no index),
//! moves it into place only when complete, and the kernel then runs its Python.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::json;

use crate::support::*;

/// A wheel of `pa_probe` (`VALUE = 42`) in `<dir>/wheels`, written by Python's `zipfile`.
fn probe_wheel(dir: &TempDir) -> PathBuf {
    let wheels = dir.path().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let code = r#"
import base64, hashlib, sys, zipfile
files = {
    'pa_probe/__init__.py': 'VALUE = 42\n',
    'pa_probe-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\nName: pa-probe\nVersion: 1.0\n',
    'pa_probe-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
def digest(text):
    raw = hashlib.sha256(text.encode()).digest()
    return 'sha256=' + base64.urlsafe_b64encode(raw).rstrip(b'=').decode()
record = ''.join('%s,%s,%d\n' % (n, digest(t), len(t.encode())) for n, t in files.items())
files['pa_probe-1.0.dist-info/RECORD'] = record + 'pa_probe-1.0.dist-info/RECORD,,\n'
with zipfile.ZipFile(sys.argv[1] + '/pa_probe-1.0-py3-none-any.whl', 'w') as z:
    for name, text in files.items():
        z.writestr(name, text)
"#;
    let ok = std::process::Command::new("python3")
        .args(["-c", code])
        .arg(&wheels)
        .status()
        .unwrap()
        .success();
    assert!(ok, "could not write the test wheel");
    wheels
}

/// `prime-agent kernel setup <args>` with pip offline: only `wheels`, no index, no config file.
fn setup(dir: &TempDir, wheels: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = agent_command(&dir.path().join("agent"));
    cmd.arg("kernel")
        .arg("setup")
        .args(args)
        .current_dir(dir.path())
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", wheels)
        .env_remove("PRIME_AGENT_KERNEL_PYTHON")
        .env_remove("PRIME_AGENT_KERNEL_VENV");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Names in `dir` that a build leaves beside its target (`.venv.tmp-<pid>`, `.venv.old-<pid>`).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".venv."))
        .collect()
}

/// What a cell printing `sys.prefix` and `pa_probe.VALUE` (or `None`) says, in an agent run
/// with `env`.
fn kernel_sees(dir: &TempDir, name: &str, env: &[(&str, String)]) -> String {
    let code = "import sys\ntry:\n    import pa_probe\n    v = pa_probe.VALUE\nexcept ImportError:\n    v = None\nprint(sys.prefix, v)";
    let cell = json!({"steps": [{"tool_call": {"id": "c1", "name": "ipython", "arguments": {"code": code}}}]});
    let s = dir.write(name, &format!("{cell}\n{}\n", json!({"text": "ok"})));
    let mut spawn = Spawn::scripted(&s.display().to_string(), &["--no-session"]);
    spawn.cwd = Some(dir.path().to_path_buf());
    spawn.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let mut a = Agent::spawn(spawn);
    a.handshake();
    assert_eq!(a.prompt_stop("go"), "end_turn");
    let out = a
        .updates()
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .map(|u| {
            u["content"][0]["content"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    assert!(a.finish().success());
    out
}

#[test]
fn setup_makes_the_environment_offline_and_the_kernel_runs_its_python() {
    let dir = TempDir::new("kernel-setup");
    let wheels = probe_wheel(&dir);
    let venv = dir.path().join("venv");
    let out = setup(&dir, &wheels, &["--venv", "venv", "pa_probe"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(&format!("Kernel environment ready: {}", venv.display())),
        "{}",
        text(&out.stdout)
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    // It was built elsewhere and renamed: its scripts name where it is now.
    let pip = std::fs::read_to_string(venv.join("bin/pip")).unwrap();
    assert!(
        pip.starts_with(&format!("#!{}/bin/python", venv.display())),
        "{pip}"
    );
    let runs = std::process::Command::new(venv.join("bin/pip"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(runs.status.success(), "{}", text(&runs.stderr));

    let venv_s = venv.display().to_string();
    let with_venv = [("PRIME_AGENT_KERNEL_VENV", venv_s.clone())];
    assert_eq!(
        kernel_sees(&dir, "venv.jsonl", &with_venv),
        format!("{venv_s} 42\n")
    );
    // PRIME_AGENT_KERNEL_PYTHON still wins over the environment.
    let both = [
        ("PRIME_AGENT_KERNEL_VENV", venv_s.clone()),
        ("PRIME_AGENT_KERNEL_PYTHON", "python3".to_owned()),
    ];
    let seen = kernel_sees(&dir, "python.jsonl", &both);
    assert!(
        seen.ends_with(" None\n") && !seen.starts_with(&venv_s),
        "{seen}"
    );
}

#[test]
fn a_failed_install_leaves_the_previous_environment_as_it_was() {
    let dir = TempDir::new("kernel-setup-fail");
    let wheels = probe_wheel(&dir);
    let venv = dir.path().join("venv");
    dir.write("venv/bin/previous", "kept");
    let out = setup(&dir, &wheels, &["--venv", "venv", "no-such-package"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("Error: kernel setup: pip could not install the packages")
            && err.contains("Nothing was changed."),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(venv.join("bin/previous")).unwrap(),
        "kept"
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[test]
fn no_python_or_no_venv_module_is_a_clear_error_and_makes_nothing() {
    let dir = TempDir::new("kernel-setup-nopython");
    let wheels = dir.path().join("wheels");
    let out = setup(
        &dir,
        &wheels,
        &["--venv", "venv", "--python", "/nonexistent/python3"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "Error: kernel setup: no Python at /nonexistent/python3\n"
    );
    let out = setup(
        &dir,
        &wheels,
        &["--venv", "venv"],
        &[("PATH", "/nonexistent")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "Error: kernel setup needs python3 on PATH (or --python <path>) to make the environment\n"
    );
    // A Python without the venv module, as Debian's is without python3-venv.
    let python = dir.write(
        "python3",
        "#!/bin/sh\necho 'The virtual environment was not created successfully because ensurepip is not available.' >&2\nexit 1\n",
    );
    let _ = std::process::Command::new("chmod")
        .arg("+x")
        .arg(&python)
        .status();
    let py = python.display().to_string();
    let out = setup(&dir, &wheels, &["--venv", "venv", "--python", &py], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("Error: kernel setup: {py} -m venv failed (exit status: 1): The virtual environment was not created successfully because ensurepip is not available."))
            && err.contains("the python3-venv package"),
        "{err}"
    );
    assert!(!dir.path().join("venv").exists());
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}
