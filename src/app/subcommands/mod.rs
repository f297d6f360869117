//! `prime-agent model list`, `session export`, `schedule add|list|remove` and `kernel setup`:
//! commands that read the agent directory (or, `kernel setup`, make the kernel's environment),
//! print to stdout and exit, without ACP and without reading stdin.
//!
//! `parse` is pure (table-tested below); `run` does the IO through the same code the agent
//! uses: the provider registry and credentials (`model list`), the session store and loader
//! (`session export`), and the heartbeat job list (`schedule`).

mod export;
mod models;
mod schedule;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::persist::{self, Store};

/// One subcommand, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Subcommand {
    /// `-h/--help` after a command word: its usage text.
    Help(&'static str),
    ModelList {
        pattern: Option<String>,
    },
    SessionExport {
        session: String,
        out: Option<PathBuf>,
        session_dir: Option<PathBuf>,
    },
    ScheduleAdd {
        session: String,
        when: String,
        prompt: String,
        session_dir: Option<PathBuf>,
    },
    ScheduleList {
        session: Option<String>,
        all: bool,
        session_dir: Option<PathBuf>,
    },
    ScheduleRemove {
        job: String,
        session_dir: Option<PathBuf>,
    },
    /// `prime-agent sandbox`: the Landlock ABI this kernel offers (exit 1 without one).
    Sandbox,
    /// `prime-agent kernel setup`: makes the managed kernel environment (`kernel::venv`).
    KernelSetup {
        /// `--venv`: else `PRIME_AGENT_KERNEL_VENV`, else the default place.
        venv: Option<PathBuf>,
        /// `--python`: the Python that makes it; else `python3` on `PATH`.
        python: Option<PathBuf>,
        /// Instead of the default set (pip requirement strings).
        packages: Vec<String>,
    },
}

pub(crate) const MODEL_USAGE: &str = "\
Usage: prime-agent model list [search]

List the models this build can call with the credentials it finds (--api-key aside):
one line per model, provider and id first. [search] keeps the lines whose provider and id
contain every word of it, letters in order (\"oai 5\" matches openai/gpt-5.4).
";

pub(crate) const SESSION_USAGE: &str = "\
Usage: prime-agent session export <id|path> [output.html] [--session-dir <dir>]

Write a stored session as one self-contained HTML file (default: <session id>.html in the
current directory): every prompt, answer, thought and tool call, all text HTML-escaped.
";

pub(crate) const SCHEDULE_USAGE: &str = "\
Usage: prime-agent schedule add <session id|path> \"<when>\" -- \"<prompt>\"
       prime-agent schedule list [--all] [<session id|path>]
       prime-agent schedule remove <job id>
       (each also takes --session-dir <dir>)

Scheduled prompts of stored sessions, kept in <agent dir>/session-artifacts/<id>/
scheduled-jobs.json. A job fires while its session is open in an agent (resumed with
-r/--resume, session/load or session/resume); nothing runs them in the background.
<when>: \"in 30m\", \"every 2h\" (at least 10 s), \"at 2026-12-24T09:00:00Z\", \"10m\" (= every
10m), or a cron expression (\"0 9 * * 1-5\", \"@daily\").
";

pub(crate) const KERNEL_USAGE: &str = "\
Usage: prime-agent kernel setup [--venv <dir>] [--python <python3>] [<package> ...]

Make the Python environment the ipython tool's kernel runs in: a virtual environment made with
<python3> -m venv (default: python3 on PATH) at --venv, else PRIME_AGENT_KERNEL_VENV, else
~/.prime/agent/kernel-venv, with pip installing <package>s (default: ipython dill pillow
requests httpx pyyaml tomli python-dotenv pandas numpy scipy beautifulsoup4 lxml pydantic
tyro). pip's own settings decide where packages come from (PIP_INDEX_URL, PIP_FIND_LINKS,
PIP_NO_INDEX, pip.conf). The environment is built beside its place and moved there only when
complete; a failure leaves the previous one (or none). Once it exists the kernel uses its
Python, unless PRIME_AGENT_KERNEL_PYTHON names another. Nothing runs this for you.
";

/// `Some` when `args` starts with a subcommand word; `Err` is the text after `Error: `.
pub(crate) fn parse(args: &[String]) -> Result<Option<Subcommand>, String> {
    let Some(word) = args.first() else {
        return Ok(None);
    };
    if word == "sandbox" && args.len() == 1 {
        return Ok(Some(Subcommand::Sandbox));
    }
    let (usage, children): (&'static str, &[&str]) = match word.as_str() {
        "model" => (MODEL_USAGE, &["list"]),
        "session" => (SESSION_USAGE, &["export"]),
        "schedule" => (SCHEDULE_USAGE, &["add", "list", "remove", "cancel"]),
        "kernel" => (KERNEL_USAGE, &["setup"]),
        _ => return Ok(None),
    };
    let rest = &args[1..];
    // `--` ends the options: what follows is a prompt, never a flag.
    let end = rest.iter().position(|a| a == "--").unwrap_or(rest.len());
    if rest[..end].iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Some(Subcommand::Help(usage)));
    }
    let Some(sub) = rest.first() else {
        return Err(format!(
            "Missing {word} command. {}",
            usage.lines().next().unwrap_or("")
        ));
    };
    if !children.contains(&sub.as_str()) {
        return Err(format!(
            "Unknown {word} command: {sub}. {}",
            usage.lines().next().unwrap_or("")
        ));
    }
    let opts = options(word, sub, &rest[..end])?;
    let after: Vec<String> = rest.get(end + 1..).unwrap_or_default().to_vec();
    let dashes = end < rest.len();
    let usage_error = || format!("Usage: {}", usage_line(usage, sub));
    build(word, sub, opts, dashes, after)
        .ok_or_else(usage_error)
        .map(Some)
}

/// What a subcommand's arguments (before `--`, the words after the subcommand's) said.
struct Options {
    operands: Vec<String>,
    session_dir: Option<PathBuf>,
    all: bool,
    /// `kernel setup --venv`, `--python`.
    venv: Option<PathBuf>,
    python: Option<PathBuf>,
}

/// Reads the flags of `word sub` from `args` (the words after `sub`, up to `--`).
fn options(word: &str, sub: &str, args: &[String]) -> Result<Options, String> {
    let mut opts = Options {
        operands: Vec::new(),
        session_dir: None,
        all: false,
        venv: None,
        python: None,
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (a, None),
        };
        let value = |i: &mut usize| -> Result<PathBuf, String> {
            match inline.clone() {
                Some(v) => Ok(PathBuf::from(v)),
                None => {
                    *i += 1;
                    args.get(*i)
                        .filter(|v| !v.starts_with('-'))
                        .map(PathBuf::from)
                        .ok_or_else(|| format!("{flag} requires a value"))
                }
            }
        };
        match flag {
            "--session-dir" if word != "model" && word != "kernel" => {
                opts.session_dir = Some(value(&mut i)?)
            }
            "--venv" if word == "kernel" => opts.venv = Some(value(&mut i)?),
            "--python" if word == "kernel" => opts.python = Some(value(&mut i)?),
            "-a" | "--all" if word == "schedule" && sub == "list" => opts.all = true,
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("Unknown option for {word} {sub}: {a}"));
            }
            _ => opts.operands.push(a.to_owned()),
        }
        i += 1;
    }
    Ok(opts)
}

/// The subcommand `word sub` with `opts`; `dashes`: a `--` came, `after` what followed it.
/// `None`: its operands do not fit its usage line.
fn build(
    word: &str,
    sub: &str,
    opts: Options,
    dashes: bool,
    after: Vec<String>,
) -> Option<Subcommand> {
    let Options {
        mut operands,
        session_dir,
        all,
        venv,
        python,
    } = opts;
    let parsed = match (word, sub) {
        ("kernel", _) => {
            if dashes {
                return None;
            }
            Subcommand::KernelSetup {
                venv,
                python,
                packages: operands,
            }
        }
        ("model", _) => {
            if dashes {
                return None;
            }
            // `model list gem pro` searches for both words, as `model list "gem pro"` does.
            Subcommand::ModelList {
                pattern: (!operands.is_empty()).then(|| operands.join(" ")),
            }
        }
        ("session", _) => {
            if operands.is_empty() || operands.len() > 2 || dashes {
                return None;
            }
            let mut ops = operands.into_iter();
            Subcommand::SessionExport {
                session: ops.next().unwrap_or_default(),
                out: ops.next().map(PathBuf::from),
                session_dir,
            }
        }
        (_, "add") => {
            // The prompt comes after `--` (as upstream writes it), or as the third operand.
            let (session, when, prompt) = match (operands.as_slice(), after.is_empty()) {
                ([s, w], false) => (s.clone(), w.clone(), after.join(" ")),
                ([s, w, p @ ..], true) if !p.is_empty() => (s.clone(), w.clone(), p.join(" ")),
                _ => return None,
            };
            Subcommand::ScheduleAdd {
                session,
                when,
                prompt,
                session_dir,
            }
        }
        (_, "list") => {
            if operands.len() > 1 || dashes {
                return None;
            }
            Subcommand::ScheduleList {
                session: operands.pop(),
                all,
                session_dir,
            }
        }
        _ => {
            if operands.len() != 1 || dashes {
                return None;
            }
            Subcommand::ScheduleRemove {
                job: operands.pop().unwrap_or_default(),
                session_dir,
            }
        }
    };
    Some(parsed)
}

/// The usage line of `sub` in a usage text.
fn usage_line(usage: &str, sub: &str) -> String {
    usage
        .lines()
        .map(|l| l.trim_start_matches("Usage:").trim())
        .find(|l| l.split_whitespace().nth(2) == Some(sub))
        .unwrap_or_else(|| {
            usage
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("Usage: ")
        })
        .to_owned()
}

/// Runs `sub` on the agent dir `agent_dir`, printing to `out`; the process exit code, or the
/// error text. (The caller resolves the dir, so this module stays below `setup`.)
pub(crate) fn run(sub: &Subcommand, agent_dir: &Path, out: &mut dyn Write) -> Result<u8, String> {
    let agent_dir = agent_dir.to_path_buf();
    let mut code = 0;
    let text = match sub {
        Subcommand::Sandbox => {
            let abi = crate::base::sandbox::abi();
            code = u8::from(abi.is_err());
            format!("sandbox: {}\n", crate::base::sandbox::abi_report())
        }
        Subcommand::Help(usage) => (*usage).to_owned(),
        Subcommand::KernelSetup {
            venv,
            python,
            packages,
        } => crate::kernel::venv::setup(
            venv.as_deref(),
            python.as_deref(),
            packages,
            &mut std::io::stderr(),
        )?,
        Subcommand::ModelList { pattern } => models::list(&agent_dir, pattern.as_deref())?,
        Subcommand::SessionExport {
            session,
            out: path,
            session_dir,
        } => {
            let store = store(&agent_dir, session_dir.as_deref());
            export::export(&store, session, path.as_deref())?
        }
        Subcommand::ScheduleAdd {
            session,
            when,
            prompt,
            session_dir,
        } => schedule::add(
            &store(&agent_dir, session_dir.as_deref()),
            session,
            when,
            prompt,
        )?,
        Subcommand::ScheduleList {
            session,
            all,
            session_dir,
        } => schedule::list(
            &store(&agent_dir, session_dir.as_deref()),
            session.as_deref(),
            *all,
        )?,
        Subcommand::ScheduleRemove { job, session_dir } => {
            schedule::remove(&store(&agent_dir, session_dir.as_deref()), job)?
        }
    };
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| format!("Cannot write the output: {e}"))?;
    Ok(code)
}

/// The sessions of the agent dir (`--session-dir`, the environment and the settings'
/// `sessionDir`, as for the agent; an unreadable settings file leaves the default).
fn store(agent_dir: &Path, session_dir: Option<&Path>) -> Store {
    let cwd = std::env::current_dir().unwrap_or_else(|_| agent_dir.to_path_buf());
    let settings = crate::config::settings::load(agent_dir, &cwd).unwrap_or_default();
    Store::new(
        persist::sessions_dir(session_dir, settings.session_dir.as_deref(), agent_dir),
        agent_dir.join("session-artifacts"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<Subcommand>, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn only_a_leading_command_word_is_a_subcommand() {
        assert_eq!(p(&[]), Ok(None));
        assert_eq!(p(&["--mode", "acp"]), Ok(None));
        assert_eq!(p(&["-p", "model", "list"]), Ok(None));
        assert_eq!(
            p(&["model", "list"]),
            Ok(Some(Subcommand::ModelList { pattern: None }))
        );
        assert_eq!(
            p(&["model", "list", "gpt"]),
            Ok(Some(Subcommand::ModelList {
                pattern: Some("gpt".into())
            }))
        );
        assert_eq!(
            p(&["model", "list", "gem", "pro"]),
            Ok(Some(Subcommand::ModelList {
                pattern: Some("gem pro".into())
            }))
        );
        assert_eq!(
            p(&["model", "list", "--help"]),
            Ok(Some(Subcommand::Help(MODEL_USAGE)))
        );
    }

    #[test]
    fn errors_name_the_command_and_its_usage() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["model"],
                "Missing model command. Usage: prime-agent model list [search]",
            ),
            (
                &["model", "show"],
                "Unknown model command: show. Usage: prime-agent model list [search]",
            ),
            (
                &["model", "list", "--", "x"],
                "Usage: prime-agent model list [search]",
            ),
            (
                &["model", "list", "--json"],
                "Unknown option for model list: --json",
            ),
            (
                &["session", "export"],
                "Usage: prime-agent session export <id|path> [output.html] [--session-dir <dir>]",
            ),
            (
                &["schedule", "add", "s", "in 5m"],
                "Usage: prime-agent schedule add <session id|path> \"<when>\" -- \"<prompt>\"",
            ),
            (
                &["schedule", "remove"],
                "Usage: prime-agent schedule remove <job id>",
            ),
            (
                &["session", "export", "x", "--session-dir"],
                "--session-dir requires a value",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(p(args), Err((*want).to_owned()), "{args:?}");
        }
    }

    #[test]
    fn kernel_setup_forms() {
        let setup = |venv: Option<&str>, python: Option<&str>, packages: &[&str]| {
            Ok(Some(Subcommand::KernelSetup {
                venv: venv.map(PathBuf::from),
                python: python.map(PathBuf::from),
                packages: packages.iter().map(|p| p.to_string()).collect(),
            }))
        };
        assert_eq!(p(&["kernel", "setup"]), setup(None, None, &[]));
        assert_eq!(
            p(&[
                "kernel",
                "setup",
                "--venv",
                "/v",
                "--python=/usr/bin/python3",
                "numpy",
                "ipython>=8"
            ]),
            setup(
                Some("/v"),
                Some("/usr/bin/python3"),
                &["numpy", "ipython>=8"]
            )
        );
        assert_eq!(
            p(&["kernel", "setup", "-h"]),
            Ok(Some(Subcommand::Help(KERNEL_USAGE)))
        );
        let usage =
            "Usage: prime-agent kernel setup [--venv <dir>] [--python <python3>] [<package> ...]";
        let errors: &[(&[&str], String)] = &[
            (&["kernel"], format!("Missing kernel command. {usage}")),
            (
                &["kernel", "install"],
                format!("Unknown kernel command: install. {usage}"),
            ),
            (
                &["kernel", "setup", "--venv"],
                "--venv requires a value".to_owned(),
            ),
            (
                &["kernel", "setup", "--session-dir", "/s"],
                "Unknown option for kernel setup: --session-dir".to_owned(),
            ),
            (&["kernel", "setup", "--", "x"], usage.to_owned()),
        ];
        for (args, want) in errors {
            assert_eq!(p(args), Err(want.clone()), "{args:?}");
        }
    }

    #[test]
    fn schedule_forms() {
        assert_eq!(
            p(&[
                "schedule",
                "add",
                "abc",
                "every 10m",
                "--",
                "--check",
                "the build"
            ]),
            Ok(Some(Subcommand::ScheduleAdd {
                session: "abc".into(),
                when: "every 10m".into(),
                prompt: "--check the build".into(),
                session_dir: None,
            })),
            "after --, a prompt may start with a dash"
        );
        assert_eq!(
            p(&["schedule", "add", "--session-dir=/s", "abc", "in 1h", "go"]),
            Ok(Some(Subcommand::ScheduleAdd {
                session: "abc".into(),
                when: "in 1h".into(),
                prompt: "go".into(),
                session_dir: Some("/s".into()),
            }))
        );
        assert_eq!(
            p(&["schedule", "list", "--all"]),
            Ok(Some(Subcommand::ScheduleList {
                session: None,
                all: true,
                session_dir: None
            }))
        );
        assert_eq!(
            p(&["schedule", "cancel", "hb-1", "--session-dir", "/s"]),
            Ok(Some(Subcommand::ScheduleRemove {
                job: "hb-1".into(),
                session_dir: Some("/s".into())
            }))
        );
        assert_eq!(
            p(&["session", "export", "abc", "out.html"]),
            Ok(Some(Subcommand::SessionExport {
                session: "abc".into(),
                out: Some("out.html".into()),
                session_dir: None
            }))
        );
    }
}
