//! The managed kernel environment (behaviour spec §4.1): a virtual environment at
//! `PRIME_AGENT_KERNEL_VENV`, else `~/.prime/agent/kernel-venv` (else, when that cannot be
//! made, `$XDG_DATA_HOME/prime/agent/kernel-venv`), made only by the explicit
//! `prime-agent kernel setup`, never at first use. When it exists, the kernel runs its Python
//! (`find_python`: after `PRIME_AGENT_KERNEL_PYTHON`, before `python3` on `PATH`).
//!
//! `setup` runs `python3 -m venv` and the venv's pip, with pip's own configuration (its config
//! files and `PIP_INDEX_URL`, `PIP_FIND_LINKS`, `PIP_NO_INDEX`, …) deciding where packages come
//! from. It builds in a sibling temp directory and renames it into place only once every step
//! worked, so the directory the kernel looks for is never half made: a failure (or an
//! interrupted run) leaves the previous environment, or none, as it was.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The spec's package set (§4.1), for our kernel: IPython itself where upstream installs
/// `ipykernel` (our kernel speaks its own wire, not Jupyter's) and `prime-agent-runtime` (ours is
/// embedded in the binary); `dill` for namespace snapshots; Pillow, which upstream's
/// `attach-image` skill depends on (`images.autoResize`); then the default extra packages.
pub(crate) const PACKAGES: &[&str] = &[
    "ipython",
    "dill",
    "pillow",
    "requests",
    "httpx",
    "pyyaml",
    "tomli",
    "python-dotenv",
    "pandas",
    "numpy",
    "scipy",
    "beautifulsoup4",
    "lxml",
    "pydantic",
    "tyro",
];

/// Written into a finished environment (informational: the directory's existence is what
/// counts, and it only appears complete).
const MARKER: &str = "prime-agent-kernel.json";

/// The places the environment may be, in the order they are used: `(primary, fallback)`.
/// `env` reads a variable (non-empty values only).
pub(crate) fn places(env: &dyn Fn(&str) -> Option<String>) -> (PathBuf, Option<PathBuf>) {
    let home = env("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    if let Some(dir) = env("PRIME_AGENT_KERNEL_VENV") {
        return (expand_home(&dir, &home), None);
    }
    let data = env("XDG_DATA_HOME").map_or_else(|| home.join(".local/share"), PathBuf::from);
    (
        home.join(".prime/agent/kernel-venv"),
        Some(data.join("prime/agent/kernel-venv")),
    )
}

fn expand_home(path: &str, home: &Path) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None if path == "~" => home.to_path_buf(),
        None => PathBuf::from(path),
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The managed environment's Python, when the environment exists.
pub(crate) fn python() -> Option<PathBuf> {
    let (primary, fallback) = places(&env_var);
    std::iter::once(primary)
        .chain(fallback)
        .map(|dir| dir.join("bin").join("python"))
        .find(|p| super::is_executable(p))
}

/// `prime-agent kernel setup`: makes (or remakes) the environment at `venv` (else
/// `PRIME_AGENT_KERNEL_VENV`, else the default place) with `python` (else `python3` on
/// `PATH`), installing `packages` (none: `PACKAGES`); pip's progress goes to `progress`. The
/// text to print on success, or the error (the caller exits 1).
pub(crate) fn setup(
    venv: Option<&Path>,
    python: Option<&Path>,
    packages: &[String],
    progress: &mut dyn Write,
) -> Result<String, String> {
    let base = match python {
        Some(p) if super::is_executable(p) => p.to_path_buf(),
        Some(p) => return Err(format!("kernel setup: no Python at {}", p.display())),
        None => super::which(Path::new("python3")).ok_or(
            "kernel setup needs python3 on PATH (or --python <path>) to make the environment",
        )?,
    };
    let target = match venv {
        Some(dir) => absolute(dir)?,
        None => writable_place()?,
    };
    let packages: Vec<String> = if packages.is_empty() {
        PACKAGES.iter().map(|p| (*p).to_owned()).collect()
    } else {
        packages.to_vec()
    };
    let parent = target
        .parent()
        .ok_or_else(|| format!("kernel setup: {} has no parent directory", target.display()))?;
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("kernel setup: {} has no usable name", target.display()))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("kernel setup: cannot create {}: {e}", parent.display()))?;
    remove_stale_builds(parent, name);
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let built = build(&base, &tmp, &target, &packages, progress);
    let done = built.and_then(|()| swap_in(&tmp, &target));
    if done.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    done?;
    let mut text = format!(
        "Kernel environment ready: {} ({} package(s) from pip, Python from {}).\n",
        target.display(),
        packages.len(),
        base.display()
    );
    if let Some(p) = env_var("PRIME_AGENT_KERNEL_PYTHON") {
        text.push_str(&format!(
            "Note: PRIME_AGENT_KERNEL_PYTHON is set ({p}), and the kernel uses it instead.\n"
        ));
    } else if venv.is_some() && self::python().is_none_or(|p| !p.starts_with(&target)) {
        text.push_str(&format!(
            "Note: the kernel looks for its environment at PRIME_AGENT_KERNEL_VENV or {}; set PRIME_AGENT_KERNEL_VENV={} to use this one.\n",
            places(&env_var).0.display(),
            target.display()
        ));
    }
    Ok(text)
}

fn absolute(dir: &Path) -> Result<PathBuf, String> {
    std::path::absolute(dir).map_err(|e| format!("kernel setup: {}: {e}", dir.display()))
}

/// The default place, or the fallback when the default's parent cannot be made (as upstream
/// does; an explicit `PRIME_AGENT_KERNEL_VENV` has no fallback).
fn writable_place() -> Result<PathBuf, String> {
    let (primary, fallback) = places(&env_var);
    let primary = absolute(&primary)?;
    let parent_ok = |p: &Path| {
        p.parent()
            .is_some_and(|d| std::fs::create_dir_all(d).is_ok())
    };
    if parent_ok(&primary) {
        return Ok(primary);
    }
    match fallback {
        Some(f) if parent_ok(&f) => Ok(f),
        _ => Err(format!(
            "kernel setup: cannot create the directory for {}",
            primary.display()
        )),
    }
}

/// Builds the environment in `tmp` for its final place `target`.
fn build(
    base: &Path,
    tmp: &Path,
    target: &Path,
    packages: &[String],
    progress: &mut dyn Write,
) -> Result<(), String> {
    let _ = writeln!(
        progress,
        "Making a virtual environment with {}",
        base.display()
    );
    let made = Command::new(base)
        .args(["-m", "venv"])
        .arg(tmp)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("kernel setup: cannot run {}: {e}", base.display()))?;
    if !made.status.success() {
        return Err(venv_failed(base, &made.status, &made.stderr));
    }
    let python = tmp.join("bin").join("python");
    let pip = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("kernel setup: cannot run the new environment's Python: {e}"))?;
    if !pip.status.success() {
        return Err(format!(
            "kernel setup: the new environment has no pip ({}); on Debian and Ubuntu install python3-venv",
            last_line(&pip.stderr)
        ));
    }
    let _ = writeln!(progress, "Installing {}", packages.join(" "));
    let _ = progress.flush();
    let status = Command::new(&python)
        .args(["-m", "pip", "install", "--disable-pip-version-check"])
        .args(packages)
        .stdin(Stdio::null())
        // pip's progress is for the person running setup: all of it on stderr.
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| format!("kernel setup: cannot run pip: {e}"))?;
    if !status.success() {
        return Err(format!(
            "kernel setup: pip could not install the packages ({status}; its output is above). Nothing was changed."
        ));
    }
    retarget(tmp, target).map_err(|e| format!("kernel setup: {e}"))?;
    let marker = format!(
        "{{\"packages\": {}, \"python\": {}}}\n",
        serde_json::Value::from(packages.to_vec()),
        serde_json::Value::from(base.display().to_string())
    );
    std::fs::write(tmp.join(MARKER), marker).map_err(|e| format!("kernel setup: {e}"))
}

/// The message for a failed `python -m venv`.
fn venv_failed(base: &Path, status: &std::process::ExitStatus, stderr: &[u8]) -> String {
    let line = last_line(stderr);
    let why = line.trim_end_matches('.');
    let hint = if why.contains("ensurepip") || why.contains("No module named venv") {
        " On Debian and Ubuntu the venv module is the python3-venv package."
    } else {
        ""
    };
    format!(
        "kernel setup: {} -m venv failed ({status}): {why}.{hint}",
        base.display()
    )
}

fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_owned()
}

/// The venv's scripts (`pip`'s `#!` line, `activate`) and `pyvenv.cfg` name the directory
/// they were made in: point them at the place the environment is about to be renamed to.
fn retarget(tmp: &Path, target: &Path) -> std::io::Result<()> {
    let (from, to) = (tmp.display().to_string(), target.display().to_string());
    let mut files = vec![tmp.join("pyvenv.cfg")];
    for entry in std::fs::read_dir(tmp.join("bin"))? {
        files.push(entry?.path());
    }
    for file in files {
        let meta = std::fs::symlink_metadata(&file)?;
        if !meta.is_file() || meta.len() > 1 << 20 {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // a binary
        };
        if text.contains(&from) {
            std::fs::write(&file, replace_path(&text, &from, &to))?;
        }
    }
    Ok(())
}

/// `text` with the path `from` replaced by `to` wherever it stands as a whole path (not as
/// the start of a longer name).
fn replace_path(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let after = &rest[at + from.len()..];
        let whole = !after.starts_with(|c: char| c.is_alphanumeric() || c == '-' || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if whole { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Renames the finished `tmp` to `target`, replacing an environment already there (moved
/// aside first, put back if the rename fails, removed after).
fn swap_in(tmp: &Path, target: &Path) -> Result<(), String> {
    let old = target.with_file_name(format!(
        ".{}.old-{}",
        target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("venv"),
        std::process::id()
    ));
    let had_old = target.exists();
    if had_old {
        std::fs::rename(target, &old)
            .map_err(|e| format!("kernel setup: cannot move {} aside: {e}", target.display()))?;
    }
    if let Err(e) = std::fs::rename(tmp, target) {
        if had_old {
            let _ = std::fs::rename(&old, target);
        }
        return Err(format!(
            "kernel setup: cannot move the new environment to {}: {e}",
            target.display()
        ));
    }
    if had_old {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(())
}

/// Temp and set-aside directories of earlier runs that were interrupted (their process is
/// gone), beside `name` in `parent`.
fn remove_stale_builds(parent: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let pid = [".tmp-", ".old-"].iter().find_map(|mark| {
            file.strip_prefix(&format!(".{name}{mark}"))
                .and_then(|p| p.parse::<u32>().ok())
        });
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_the_environment_lives() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        /// Variables, then the primary and fallback places.
        type Case = (
            &'static [(&'static str, &'static str)],
            &'static str,
            Option<&'static str>,
        );
        let cases: &[Case] = &[
            (
                &[("HOME", "/h")],
                "/h/.prime/agent/kernel-venv",
                Some("/h/.local/share/prime/agent/kernel-venv"),
            ),
            (
                &[("HOME", "/h"), ("XDG_DATA_HOME", "/d")],
                "/h/.prime/agent/kernel-venv",
                Some("/d/prime/agent/kernel-venv"),
            ),
            (
                &[("HOME", "/h"), ("PRIME_AGENT_KERNEL_VENV", "~/v")],
                "/h/v",
                None,
            ),
            (&[("PRIME_AGENT_KERNEL_VENV", "/opt/v")], "/opt/v", None),
        ];
        for (env, primary, fallback) in cases {
            let (p, f) = places(&vars(env));
            assert_eq!(p, PathBuf::from(primary), "{env:?}");
            assert_eq!(f, fallback.map(PathBuf::from), "{env:?}");
        }
    }

    #[test]
    fn only_whole_paths_are_retargeted() {
        let cases = [
            ("#!/a/.v.tmp-1/bin/python\n", "#!/a/v/bin/python\n"),
            ("VIRTUAL_ENV=\"/a/.v.tmp-1\"\n", "VIRTUAL_ENV=\"/a/v\"\n"),
            ("/a/.v.tmp-12/bin", "/a/.v.tmp-12/bin"),
            ("/a/.v.tmp-1x", "/a/.v.tmp-1x"),
            ("no path", "no path"),
        ];
        for (text, want) in cases {
            assert_eq!(replace_path(text, "/a/.v.tmp-1", "/a/v"), want, "{text}");
        }
    }
}
