//! Autonomous gates: running the commands, their exit texts and captured output, the
//! "workspace unchanged" skip, and the gate-failure continuation (behaviour spec §5.1).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::agent::autonomy::GateConfig;
use crate::base::abort::AbortFlag;
use crate::tools::process::{self, SplitEnding};

/// Characters kept of each of a gate's stdout and stderr.
pub(crate) const OUTPUT_CHARS: usize = 6000;
pub(crate) const TRUNCATED_SUFFIX: &str = "\n... [truncated]";
pub(crate) const UNCHANGED_EXIT: &str = "not rerun: workspace unchanged since previous failed gate";
pub(crate) const UNCHANGED_OUTPUT: &str = "The autonomous gate was not rerun because the workspace has not changed since this failure. Edit source files, tests, or a blocker artifact before attempting to finish again.";
/// Paths the workspace snapshot ignores (build output and harness files).
pub(crate) const SNAPSHOT_EXCLUDES: [&str; 6] = [
    "verification",
    "target",
    ".vf-prime-agent",
    "Cargo.lock",
    "submission.tar.gz",
    "runner_args.log",
];
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);

/// The last failed gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GateFailure {
    pub command: String,
    pub attempt: u64,
    pub exit_text: String,
    pub output: String,
}

/// What gates remember across runs (session-cumulative, like the counters).
#[derive(Debug, Clone, Default)]
pub(crate) struct GateBook {
    /// Failed attempts per command since it last passed.
    pub attempts: HashMap<String, u64>,
    /// The workspace snapshot taken when each command last failed (`None`: no git).
    pub snapshots: HashMap<String, Option<String>>,
    pub last_failure: Option<GateFailure>,
}

impl GateBook {
    /// `gateAttempt`: the highest attempt known (0 = none).
    pub(crate) fn max_attempt(&self) -> u64 {
        let last = self.last_failure.as_ref().map_or(0, |f| f.attempt);
        self.attempts.values().copied().fold(last, u64::max)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateOutcome {
    Passed,
    /// A gate failed and may be retried: `last_failure` says which and how.
    Failed,
    /// A gate failed more than `max_retries` times.
    RetryExhausted,
    /// The turn was cancelled while a gate ran.
    Aborted,
}

/// The result of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandResult {
    pub passed: bool,
    pub exit_text: String,
    pub output: String,
}

/// Runs the gates in order; the first failure decides. A command that failed last time is
/// rerun only if the workspace changed since (git snapshot).
pub(crate) fn run_gates(
    config: &GateConfig,
    book: &mut GateBook,
    cwd: &Path,
    abort: &AbortFlag,
) -> GateOutcome {
    for command in &config.commands {
        let previous = book.attempts.get(command).copied().unwrap_or(0);
        if previous > 0 {
            let now = snapshot(cwd, abort);
            if abort.is_aborted() {
                return GateOutcome::Aborted;
            }
            let before = book.snapshots.get(command).cloned().flatten();
            if now.is_some() && now == before {
                return fail(
                    book,
                    config,
                    command,
                    CommandResult {
                        passed: false,
                        exit_text: UNCHANGED_EXIT.to_owned(),
                        output: UNCHANGED_OUTPUT.to_owned(),
                    },
                    now,
                );
            }
        }
        let result = run_command(command, cwd, config.timeout, abort);
        if abort.is_aborted() {
            return GateOutcome::Aborted;
        }
        if result.passed {
            book.attempts.remove(command);
            book.snapshots.remove(command);
            continue;
        }
        let snap = snapshot(cwd, abort);
        return fail(book, config, command, result, snap);
    }
    book.last_failure = None;
    GateOutcome::Passed
}

fn fail(
    book: &mut GateBook,
    config: &GateConfig,
    command: &str,
    result: CommandResult,
    snapshot: Option<String>,
) -> GateOutcome {
    let attempt = book.attempts.get(command).copied().unwrap_or(0) + 1;
    book.attempts.insert(command.to_owned(), attempt);
    book.snapshots.insert(command.to_owned(), snapshot);
    book.last_failure = Some(GateFailure {
        command: command.to_owned(),
        attempt,
        exit_text: result.exit_text,
        output: result.output,
    });
    if attempt > config.max_retries {
        GateOutcome::RetryExhausted
    } else {
        GateOutcome::Failed
    }
}

/// Runs one gate command in `cwd` (its own process group, killed on timeout or abort).
pub(crate) fn run_command(
    command: &str,
    cwd: &Path,
    timeout: Duration,
    abort: &AbortFlag,
) -> CommandResult {
    // Enough bytes for OUTPUT_CHARS characters of any width, and one more to see a cut.
    let keep = OUTPUT_CHARS * 4 + 1;
    match process::run_split(command, cwd, timeout, keep, abort) {
        Err(e) => CommandResult {
            passed: false,
            exit_text: e,
            output: String::new(),
        },
        Ok(run) => CommandResult {
            passed: run.ending == SplitEnding::Exited(0),
            exit_text: exit_text(run.ending),
            output: join_output(&run.stdout, &run.stderr),
        },
    }
}

/// `timed out` | `terminated by <SIGNAL>` | `exited <code>` (a cancelled run reads as
/// terminated by SIGKILL, which is what ended it).
pub(crate) fn exit_text(ending: SplitEnding) -> String {
    match ending {
        SplitEnding::TimedOut => "timed out".to_owned(),
        SplitEnding::Exited(code) => format!("exited {code}"),
        SplitEnding::Signaled(sig) => format!("terminated by {}", signal_name(sig)),
        SplitEnding::Aborted => format!("terminated by {}", signal_name(libc::SIGKILL)),
    }
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// Each stream cut to `OUTPUT_CHARS` characters (with the suffix), joined with a newline,
/// trimmed.
pub(crate) fn join_output(stdout: &str, stderr: &str) -> String {
    let parts: Vec<String> = [stdout, stderr]
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| cap(s))
        .collect();
    parts.join("\n").trim().to_owned()
}

fn cap(s: &str) -> String {
    match s.char_indices().nth(OUTPUT_CHARS) {
        Some((cut, _)) => format!("{}{TRUNCATED_SUFFIX}", &s[..cut]),
        None => s.to_owned(),
    }
}

/// The gate-failure continuation (the spec's template: harness logs parse it).
pub(crate) fn failure_prompt(f: &GateFailure, max_retries: u64, timestamp: &str) -> String {
    let output = if f.output.is_empty() {
        "\n".to_owned()
    } else {
        format!("\nOutput:\n{}\n", f.output)
    };
    format!(
        "Autonomous quality gate failed (attempt {}/{max_retries}): `{}` {}.{output}\nContinue working. Fix the failure, then produce terminal evidence. Timestamp: {timestamp}.",
        f.attempt, f.command, f.exit_text
    )
}

/// A fingerprint of the git worktree in `cwd` (status, diff against HEAD, and the contents of
/// untracked files, without the excluded paths); `None` outside a git worktree.
pub(crate) fn snapshot(cwd: &Path, abort: &AbortFlag) -> Option<String> {
    let excludes: String = SNAPSHOT_EXCLUDES
        .iter()
        .map(|p| format!(" ':(exclude){p}'"))
        .collect();
    let script = format!(
        "git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 3\n\
         {{ git status --porcelain=v1 -z -uall --no-renames -- .{excludes}; printf '\\0--\\0';\n\
         git diff --binary HEAD -- .{excludes} 2>/dev/null; printf '\\0--\\0';\n\
         git ls-files -z -o --exclude-standard -- .{excludes} | xargs -0 -r git hash-object -- 2>/dev/null;\n\
         }} | git hash-object --stdin"
    );
    let run = process::run_split(&script, cwd, SNAPSHOT_TIMEOUT, 4096, abort).ok()?;
    (run.ending == SplitEnding::Exited(0)).then(|| run.stdout.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("pa-gate-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn exit_texts() {
        let cases = [
            (SplitEnding::TimedOut, "timed out"),
            (SplitEnding::Exited(0), "exited 0"),
            (SplitEnding::Exited(2), "exited 2"),
            (
                SplitEnding::Signaled(libc::SIGTERM),
                "terminated by SIGTERM",
            ),
            (
                SplitEnding::Signaled(libc::SIGSEGV),
                "terminated by SIGSEGV",
            ),
            (SplitEnding::Aborted, "terminated by SIGKILL"),
        ];
        for (ending, want) in cases {
            assert_eq!(exit_text(ending), want, "{ending:?}");
        }
    }

    #[test]
    fn output_is_capped_per_stream_joined_and_trimmed() {
        let cases = [
            ("", "", ""),
            ("out\n", "", "out"),
            ("", "  err\n", "err"),
            ("a\n", "b\n", "a\n\nb"),
        ];
        for (out, err, want) in cases {
            assert_eq!(join_output(out, err), want, "{out:?} {err:?}");
        }
        let long = "é".repeat(OUTPUT_CHARS + 5);
        let got = join_output(&long, "tail");
        let want = format!("{}{TRUNCATED_SUFFIX}\ntail", "é".repeat(OUTPUT_CHARS));
        assert_eq!(got, want);
        assert_eq!(
            join_output(&"x".repeat(OUTPUT_CHARS), ""),
            "x".repeat(OUTPUT_CHARS)
        );
    }

    #[test]
    fn the_failure_template_with_and_without_output() {
        let mut f = GateFailure {
            command: "cargo test".into(),
            attempt: 2,
            exit_text: "exited 101".into(),
            output: "boom".into(),
        };
        assert_eq!(
            failure_prompt(&f, 3, "2026-01-02T03:04:05.006Z"),
            "Autonomous quality gate failed (attempt 2/3): `cargo test` exited 101.\nOutput:\nboom\n\nContinue working. Fix the failure, then produce terminal evidence. Timestamp: 2026-01-02T03:04:05.006Z."
        );
        f.output.clear();
        assert_eq!(
            failure_prompt(&f, 3, "T"),
            "Autonomous quality gate failed (attempt 2/3): `cargo test` exited 101.\n\nContinue working. Fix the failure, then produce terminal evidence. Timestamp: T."
        );
    }

    #[test]
    fn commands_run_in_the_cwd_with_split_output_and_exit_texts() {
        let d = dir("run");
        let abort = AbortFlag::new();
        let t = Duration::from_secs(20);
        let r = run_command("pwd; echo oops >&2; exit 3", &d, t, &abort);
        assert!(!r.passed);
        assert_eq!(r.exit_text, "exited 3");
        assert_eq!(r.output, format!("{}\n\noops", d.display()));
        let r = run_command("true", &d, t, &abort);
        assert!(r.passed && r.output.is_empty());
        let r = run_command("kill -TERM $$", &d, t, &abort);
        assert_eq!(r.exit_text, "terminated by SIGTERM");
        let r = run_command("sleep 30", &d, Duration::from_millis(100), &abort);
        assert_eq!(r.exit_text, "timed out");
        let r = run_command("yes | head -c 100000", &d, t, &abort);
        assert!(r.output.ends_with(TRUNCATED_SUFFIX), "{}", r.output.len());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn an_unchanged_workspace_skips_the_rerun_until_retries_run_out() {
        let d = dir("snap");
        let git = |args: &str| {
            let r = run_command(
                &format!("git {args}"),
                &d,
                Duration::from_secs(20),
                &AbortFlag::new(),
            );
            assert!(r.passed, "git {args}: {}", r.output);
        };
        git("init -q");
        git("-c user.email=t@t -c user.name=t commit -q --allow-empty -m init");
        let config = GateConfig {
            commands: vec!["test -f done.txt".into()],
            max_retries: 2,
            timeout: Duration::from_secs(20),
        };
        let abort = AbortFlag::new();
        let mut book = GateBook::default();
        assert_eq!(
            run_gates(&config, &mut book, &d, &abort),
            GateOutcome::Failed
        );
        assert_eq!(book.last_failure.as_ref().unwrap().exit_text, "exited 1");
        // Nothing changed: not rerun, and the attempt counts.
        assert_eq!(
            run_gates(&config, &mut book, &d, &abort),
            GateOutcome::Failed
        );
        let f = book.last_failure.clone().unwrap();
        assert_eq!((f.attempt, f.exit_text.as_str()), (2, UNCHANGED_EXIT));
        assert_eq!(f.output, UNCHANGED_OUTPUT);
        // An excluded path does not count as a change.
        std::fs::create_dir_all(d.join("target")).unwrap();
        std::fs::write(d.join("target/x"), "build").unwrap();
        assert_eq!(
            run_gates(&config, &mut book, &d, &abort),
            GateOutcome::RetryExhausted
        );
        assert_eq!(book.max_attempt(), 3);
        // A real change reruns it, and a pass clears the record.
        std::fs::write(d.join("done.txt"), "ok").unwrap();
        assert_eq!(
            run_gates(&config, &mut book, &d, &abort),
            GateOutcome::Passed
        );
        assert_eq!(book.max_attempt(), 0);
        assert!(book.last_failure.is_none());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn outside_git_every_failure_reruns() {
        let d = dir("nogit");
        assert_eq!(snapshot(&d, &AbortFlag::new()), None);
        let config = GateConfig {
            commands: vec!["false".into()],
            max_retries: 3,
            timeout: Duration::from_secs(20),
        };
        let mut book = GateBook::default();
        let abort = AbortFlag::new();
        run_gates(&config, &mut book, &d, &abort);
        run_gates(&config, &mut book, &d, &abort);
        assert_eq!(book.last_failure.unwrap().exit_text, "exited 1");
        let _ = std::fs::remove_dir_all(d);
    }
}
