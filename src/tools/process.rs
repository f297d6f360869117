//! The child-process runner behind the `bash` tool, user shell commands (`!cmd`) and
//! `!command` config values (`run_stdout`).
//!
//! It owns everything about a shell child's life: spawning `bash -c` (or `sh -c`) in its own
//! process group, draining stdout/stderr on named threads (so a full pipe never deadlocks the
//! child), bounding memory for any amount of output, reporting progress, and killing the
//! whole group: at once on cancel (an abort hook) or timeout, after a short grace when the shell
//! has exited but something it left behind still holds our pipes, and in any case when the call
//! ends: no process outlives its tool call (a deliberate daemon must `setsid` itself away).
//!
//! Memory stays bounded whatever the command prints: only a rolling tail is kept in memory
//! (enough for the 2000-line / 50 KB truncation); once the output exceeds either limit the full
//! output is streamed to a private temp file (mode 0600) whose path the truncation notice names.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, RecvTimeoutError, Sender};

use crate::base::abort::{AbortFlag, HookGuard};
use crate::base::content::tail_bytes;
use crate::base::spawn;
use crate::tools::truncate::{format_size, truncate_tail, MAX_BYTES, MAX_LINES};

/// In-memory tail: twice the byte limit is always kept, so the tail truncation never reaches
/// the (possibly cut) first line of the buffer; trimming happens in batches up to 4x.
const TAIL_KEEP: usize = 2 * MAX_BYTES;
const TAIL_TRIM_AT: usize = 4 * MAX_BYTES;
/// Read size of the drain threads; with the channel depth this bounds bytes in flight.
const READ_CHUNK: usize = 64 * 1024;
const CHANNEL_DEPTH: usize = 16;
/// How often the runner wakes to check the child, the deadline and the abort flag.
const POLL: Duration = Duration::from_millis(10);
/// The same once every pipe is closed and only the exit status is missing.
const CLOSED_POLL: Duration = Duration::from_millis(1);
/// Just above the turn's 100 ms progress throttle, so every report we make gets through, and
/// output that arrives before a quiet spell is still shown during the spell.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_millis(110);
/// After the shell exits, how long its leftovers may keep our pipes open before the group is
/// killed; and after a kill, how long we wait for pipes that something outside the group holds.
const PIPE_GRACE: Duration = Duration::from_millis(200);
/// Bytes of new output carried by one report (the rest is counted in `skipped`).
const REPORT_NEW_MAX: usize = 8 * 1024;
/// Bytes of output-so-far passed to a report (the turn caps it further).
const REPORT_TAIL_MAX: usize = 16 * 1024;

/// What to run.
pub(crate) struct RunSpec<'a> {
    pub command: &'a str,
    pub cwd: &'a Path,
    pub timeout: Option<Duration>,
    pub abort: &'a AbortFlag,
    /// The sandbox the command runs in (`None`: the user's full rights).
    pub sandbox: Option<&'a crate::base::sandbox::Policy>,
}

/// A progress report, at most every `REPORT_INTERVAL` while output arrives.
pub(crate) struct Report<'a> {
    /// Output since the previous report (lossy UTF-8, never splitting a character).
    pub new_text: &'a str,
    /// Bytes of new output dropped before `new_text` because too much arrived at once.
    pub skipped: u64,
    /// The tail of all output so far.
    pub tail: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Exit code; death by signal `n` is reported as `128 + n`, as shells do.
    Exited(i32),
    TimedOut,
    Aborted,
}

#[derive(Debug)]
pub(crate) struct RunResult {
    pub ending: Ending,
    pub output: Captured,
}

/// Bounded capture of a command's combined output.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    /// Never write the output to a file (it may be a secret, e.g. a key command's stdout).
    no_spill: bool,
    tail: Vec<u8>,
    total_bytes: u64,
    newlines: u64,
    /// Bytes since the last `\n`: the full size of the last line, even if the tail lost its start.
    last_line_bytes: u64,
    /// Size of the last complete non-empty line: the line a final newline follows.
    last_full_line_bytes: u64,
    full: Option<FullOutput>,
}

#[derive(Debug)]
enum FullOutput {
    File {
        path: PathBuf,
        writer: Option<BufWriter<File>>,
        /// A write failed (disk full…): the file holds only part of the output.
        error: Option<String>,
    },
    Failed(String),
}

impl Captured {
    fn total_lines(&self) -> u64 {
        self.newlines + 1
    }

    fn over_limit(&self) -> bool {
        self.total_bytes > MAX_BYTES as u64 || self.total_lines() > MAX_LINES as u64
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total_bytes += bytes.len() as u64;
        self.count_lines(bytes);
        self.tail.extend_from_slice(bytes);
        if self.full.is_none() && !self.no_spill && self.over_limit() {
            // Nothing was trimmed yet (trimming starts far above the limit), so the buffer
            // holds everything so far.
            self.full = Some(open_full_output(&self.tail));
        } else if let Some(FullOutput::File {
            writer,
            path,
            error,
        }) = &mut self.full
        {
            if let Some(w) = writer {
                if let Err(e) = w.write_all(bytes) {
                    log::warn!("writing {} failed: {e}", path.display());
                    *writer = None;
                    *error = Some(e.to_string());
                }
            }
        }
        if self.tail.len() > TAIL_TRIM_AT {
            let cut = self.tail.len() - TAIL_KEEP;
            self.tail.drain(..cut);
        }
    }

    /// Line counts from one chunk. Every byte of a command's output passes here, so the
    /// newlines are counted a word at a time and only the chunk's last lines are walked
    /// (a per-byte loop cost 10 s per 200 MB in a debug build, most of a flood test's time).
    fn count_lines(&mut self, bytes: &[u8]) {
        let newlines = count_newlines(bytes);
        let Some(last) = (newlines > 0)
            .then(|| bytes.iter().rposition(|&b| b == b'\n'))
            .flatten()
        else {
            self.last_line_bytes += bytes.len() as u64;
            return;
        };
        self.newlines += newlines;
        // The last non-empty line that ends in this chunk, walking back over empty ones; the
        // first line of the chunk continues the previous chunk's last line.
        let mut end = last;
        loop {
            let start = bytes[..end]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            let carried = if start == 0 { self.last_line_bytes } else { 0 };
            let line = carried + (end - start) as u64;
            if line > 0 {
                self.last_full_line_bytes = line;
                break;
            }
            if start == 0 {
                break;
            }
            end = start - 1;
        }
        self.last_line_bytes = (bytes.len() - last - 1) as u64;
    }

    fn finish(&mut self) {
        if let Some(FullOutput::File {
            writer,
            path,
            error,
        }) = &mut self.full
        {
            if let Some(mut w) = writer.take() {
                if let Err(e) = w.flush() {
                    log::warn!("writing {} failed: {e}", path.display());
                    *error = Some(e.to_string());
                }
            }
        }
    }

    /// All of the output, unless the in-memory tail has lost its start.
    pub(crate) fn whole(&self) -> Option<&[u8]> {
        (self.tail.len() as u64 == self.total_bytes).then_some(self.tail.as_slice())
    }

    /// The path of the full-output file, once the output exceeded a limit.
    #[cfg(test)]
    fn full_output_path(&self) -> Option<&Path> {
        match &self.full {
            Some(FullOutput::File { path, .. }) => Some(path),
            _ => None,
        }
    }

    fn full_output_label(&self) -> String {
        match &self.full {
            Some(FullOutput::File {
                path, error: None, ..
            }) => path.display().to_string(),
            // The notice must not promise a full output the file does not hold.
            Some(FullOutput::File {
                path,
                error: Some(why),
                ..
            }) => format!("{} (incomplete: {why})", path.display()),
            Some(FullOutput::Failed(why)) => format!("(not saved: {why})"),
            None => "(not saved)".to_owned(),
        }
    }

    /// The tail-truncated output plus the spec's notice (§3.3); empty when there was no output.
    pub(crate) fn render(&self) -> String {
        let text = String::from_utf8_lossy(&self.tail);
        let t = truncate_tail(&text, MAX_LINES, MAX_BYTES);
        let mut out = t.content;
        if !t.truncated {
            return out;
        }
        // Totals come from the stream, not the in-memory tail, which may have lost its start.
        let total = self.total_lines();
        let end = total;
        let start = total + 1 - t.output_lines as u64;
        let path = self.full_output_label();
        if t.last_line_partial {
            // The cut line is the first one shown; only empty lines (a final newline) follow.
            let line_bytes = if self.last_line_bytes > 0 {
                self.last_line_bytes
            } else {
                self.last_full_line_bytes
            };
            out.push_str(&format!(
                "\n\n[Showing last {} of line {start} (line is {}). Full output: {path}]",
                format_size(t.output_bytes as u64),
                format_size(line_bytes)
            ));
        } else if t.by_lines {
            out.push_str(&format!(
                "\n\n[Showing lines {start}-{end} of {total}. Full output: {path}]"
            ));
        } else {
            out.push_str(&format!(
                "\n\n[Showing lines {start}-{end} of {total} ({} limit). Full output: {path}]",
                format_size(MAX_BYTES as u64)
            ));
        }
        out
    }
}

/// How many bytes of `bytes` are `\n`, eight at a time.
fn count_newlines(bytes: &[u8]) -> u64 {
    const LOW7: u64 = u64::from_ne_bytes([0x7f; 8]);
    const NL: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut n = 0;
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let x = u64::from_ne_bytes(w) ^ NL;
        // Bit 7 of a byte ends up set exactly when that byte of `x` is zero (a `\n` byte):
        // the sum cannot carry into the next byte.
        let zero = !(((x & LOW7) + LOW7) | x | LOW7);
        n += u64::from(zero.count_ones());
    }
    n + words.remainder().iter().filter(|&&b| b == b'\n').count() as u64
}

/// A finished text capped like command output: the tail within the limits, the spec's notice
/// and the whole text in a private temp file (MCP tool results use it).
pub(crate) fn capped_text(text: &str) -> String {
    let mut c = Captured::default();
    c.push(text.as_bytes());
    c.render()
}

fn open_full_output(so_far: &[u8]) -> FullOutput {
    let path = std::env::temp_dir().join(format!(
        "prime-agent-bash-{}.log",
        &uuid::Uuid::new_v4().simple().to_string()[..16]
    ));
    // 0600: command output can hold secrets; other users must not read it.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    match file {
        Ok(f) => {
            let mut w = BufWriter::with_capacity(READ_CHUNK, f);
            if let Err(e) = w.write_all(so_far) {
                log::warn!("writing {} failed: {e}", path.display());
                return FullOutput::File {
                    path,
                    writer: None,
                    error: Some(e.to_string()),
                };
            }
            FullOutput::File {
                path,
                writer: Some(w),
                error: None,
            }
        }
        Err(e) => {
            log::warn!("cannot create {}: {e}", path.display());
            FullOutput::Failed(e.to_string())
        }
    }
}

/// `/bin/bash`, else `bash` on PATH, else `sh`.
fn shell() -> &'static str {
    static SHELL: OnceLock<&'static str> = OnceLock::new();
    SHELL.get_or_init(|| {
        if Path::new("/bin/bash").exists() {
            return "/bin/bash";
        }
        let on_path = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|dir| dir.join("bash").is_file()));
        if on_path {
            "bash"
        } else {
            "sh"
        }
    })
}

/// Sends SIGKILL to a whole process group.
fn kill_group(pgid: i32) {
    match spawn::signal_group(pgid, libc::SIGKILL) {
        // A refused id (0, 1, negative) is no group of ours.
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
        // ESRCH: the group is already gone, which is the goal.
        Err(e) => log::debug!("killpg({pgid}) failed: {e}"),
        Ok(()) => {}
    }
}

/// Kills the group if the runner unwinds or returns early, so no child outlives a tool call.
struct GroupGuard(i32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

enum Msg {
    Data(Vec<u8>),
    Eof,
}

fn drain(
    name: &str,
    mut pipe: impl Read + Send + 'static,
    tx: Sender<Msg>,
) -> Option<JoinHandle<()>> {
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let mut buf = vec![0u8; READ_CHUNK];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.send(Msg::Data(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = tx.send(Msg::Eof);
        })
        .map_err(|e| log::warn!("cannot start {name} thread: {e}"))
        .ok()
}

/// Runs `spec.command` to completion, timeout or abort. `Err` only when it could not start.
pub(crate) fn run(
    spec: &RunSpec<'_>,
    on_report: &mut dyn FnMut(&Report<'_>),
) -> Result<RunResult, String> {
    if !spec.abort.is_aborted() && !spec.cwd.is_dir() {
        return Err(format!(
            "Working directory does not exist: {}\nCannot execute bash commands.",
            spec.cwd.display()
        ));
    }
    launch(spec, shell(), true, Captured::default(), on_report)
}

/// Runs `sh -c command` for its stdout alone (stderr is discarded), with the same group
/// discipline as `run`: the whole group dies on timeout, on abort, and when the shell has
/// exited but a process it left behind still holds the pipe. The output stays in memory
/// only (never spilled to a file, since it may be a secret); `Captured::whole` is `None`
/// when it was too large to keep whole. For `!command` config values.
pub(crate) fn run_stdout(
    command: &str,
    timeout: Duration,
    abort: &AbortFlag,
) -> Result<RunResult, String> {
    let spec = RunSpec {
        command,
        cwd: Path::new("."),
        timeout: Some(timeout),
        abort,
        sandbox: None,
    };
    let captured = Captured {
        no_spill: true,
        ..Default::default()
    };
    launch(&spec, "sh", false, captured, &mut |_| {})
}

fn launch(
    spec: &RunSpec<'_>,
    program: &str,
    with_stderr: bool,
    captured: Captured,
    on_report: &mut dyn FnMut(&Report<'_>),
) -> Result<RunResult, String> {
    if spec.abort.is_aborted() {
        return Ok(RunResult {
            ending: Ending::Aborted,
            output: captured,
        });
    }
    let mut cmd = shell_command(program, spec.command, spec.cwd, with_stderr);
    let mut started = Started::spawn(&mut cmd, spec.abort, spec.sandbox)
        .map_err(|e| format!("Cannot run {program}: {e}"))?;
    // One channel for both pipes: the output interleaves as it arrives, like a terminal's.
    let (tx, rx) = bounded(CHANNEL_DEPTH);
    let mut drains = Vec::new();
    if let Some(out) = started.child.stdout.take() {
        drains.extend(drain("bash-stdout", out, tx.clone()));
    }
    if let Some(err) = started.child.stderr.take() {
        drains.extend(drain("bash-stderr", err, tx.clone()));
    }
    drop(tx);
    let mut sink = Combined {
        rx,
        // A drain thread that failed to start dropped its pipe; the count must not wait for it.
        open_pipes: drains.len(),
        captured,
        pending: Vec::new(),
        skipped: 0,
        last_report: None,
        on_report,
    };
    let exit = supervise(&mut started, spec.timeout, spec.abort, &mut sink);
    started.end(drains);
    sink.flush_report();
    sink.captured.finish();
    let ending = match exit.stop {
        Some(Stop::TimedOut) => Ending::TimedOut,
        Some(Stop::Aborted) => Ending::Aborted,
        None => Ending::Exited(exit.status.map_or(0, |s| {
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
        })),
    };
    Ok(RunResult {
        ending,
        output: sink.captured,
    })
}

/// `program -c command` in `cwd`, stdin from `/dev/null`, stdout (and stderr) piped.
fn shell_command(program: &str, command: &str, cwd: &Path, with_stderr: bool) -> Command {
    let mut cmd = Command::new(program);
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if with_stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    cmd
}

/// A child in its own process group, with what kills that group: the guard when the run
/// ends (or unwinds) and the abort hook at once on cancel.
struct Started {
    child: Child,
    pgid: i32,
    group: GroupGuard,
    hook: HookGuard,
}

impl Started {
    fn spawn(
        cmd: &mut Command,
        abort: &AbortFlag,
        sandbox: Option<&crate::base::sandbox::Policy>,
    ) -> std::io::Result<Started> {
        // Its own group: one signal reaches the shell and everything it started.
        let (child, pgid) = spawn::spawn_group(cmd, None, sandbox)?;
        let group = GroupGuard(pgid);
        // Cancel kills at once, from the thread that sets the flag, instead of at our next poll.
        let hook = abort.on_abort(move || kill_group(pgid));
        Ok(Started {
            child,
            pgid,
            group,
            hook,
        })
    }

    /// Kills whatever is left of the group (see `supervise` for who is left) and joins the
    /// drain threads that are done.
    fn end(self, drains: Vec<JoinHandle<()>>) {
        drop(self.hook);
        drop(self.group);
        for d in drains {
            if d.is_finished() {
                let _ = d.join();
            }
            // Otherwise a process outside our group holds the pipe; the thread ends when it
            // closes, and a dropped handle detaches it.
        }
    }
}

/// Why `supervise` ended a run before the command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    TimedOut,
    Aborted,
}

/// How a supervised child ended: its status (if it was reaped) and whether we stopped it.
struct Exit {
    status: Option<ExitStatus>,
    stop: Option<Stop>,
}

/// Where a supervised child's output goes: `Combined` (one capture of both pipes, with
/// progress reports) or `Split` (each pipe kept apart, capped).
trait Sink {
    /// Whether some pipe is still open.
    fn open(&self) -> bool;
    /// Waits at most `poll` for one chunk or end of a pipe, and takes it.
    fn receive(&mut self, poll: Duration);
    /// Called once per round of the loop (progress reports).
    fn tick(&mut self) {}
    /// Takes the chunks already queued when the loop ends: they are part of the output.
    fn take_queued(&mut self);
}

/// The one supervision loop: waits for the child and its pipes, and kills its group on
/// abort, on timeout, and when the shell has exited but something it left behind still holds
/// the pipes. Returns once the child is reaped and its pipes are closed, or, after a kill, once
/// `PIPE_GRACE` has passed for pipes held by a process outside the group.
fn supervise(
    started: &mut Started,
    timeout: Option<Duration>,
    abort: &AbortFlag,
    sink: &mut dyn Sink,
) -> Exit {
    let pgid = started.pgid;
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut status: Option<ExitStatus> = None;
    let mut exited_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    let mut stop: Option<Stop> = None;
    loop {
        let open = sink.open();
        if status.is_some() && !open {
            break;
        }
        if open {
            sink.receive(POLL);
        } else {
            // Only the exit status is missing: poll quickly, the run's end is on the path to
            // the next model call.
            thread::sleep(CLOSED_POLL);
        }
        if status.is_none() {
            match started.child.try_wait() {
                Ok(Some(s)) => {
                    status = Some(s);
                    exited_at = Some(Instant::now());
                }
                Ok(None) => {}
                Err(e) => {
                    log::warn!("waiting for the shell failed: {e}");
                    kill_group(pgid);
                    let _ = started.child.wait();
                    // Unknown status: report a failure (exit 255), never a success.
                    status = Some(ExitStatus::from_raw(255 << 8));
                    killed_at = Some(Instant::now());
                }
            }
        }
        if stop.is_none() {
            if abort.is_aborted() {
                stop = Some(Stop::Aborted);
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                stop = Some(Stop::TimedOut);
            }
            if stop.is_some() {
                kill_group(pgid);
                killed_at = Some(Instant::now());
            }
        }
        // The shell is gone but something it started keeps our pipes open (e.g.
        // `sleep 30 &`): waiting for EOF would hang the turn, so the group goes.
        if killed_at.is_none()
            && sink.open()
            && exited_at.is_some_and(|t| t.elapsed() >= PIPE_GRACE)
        {
            log::debug!("shell exited but its pipes stay open; killing group {pgid}");
            kill_group(pgid);
            killed_at = Some(Instant::now());
        }
        // Killed, yet the pipes are still open: a process that left our group holds them.
        if status.is_some() && killed_at.is_some_and(|t| t.elapsed() >= PIPE_GRACE) {
            break;
        }
        sink.tick();
    }
    sink.take_queued();
    Exit { status, stop }
}

/// Both pipes into one `Captured`, with throttled progress reports (`run`, `run_stdout`).
struct Combined<'r> {
    rx: Receiver<Msg>,
    open_pipes: usize,
    captured: Captured,
    /// New bytes not yet reported (capped at `REPORT_NEW_MAX`).
    pending: Vec<u8>,
    skipped: u64,
    last_report: Option<Instant>,
    on_report: &'r mut dyn FnMut(&Report<'_>),
}

impl Sink for Combined<'_> {
    fn open(&self) -> bool {
        self.open_pipes > 0
    }

    fn receive(&mut self, poll: Duration) {
        match self.rx.recv_timeout(poll) {
            Ok(Msg::Data(bytes)) => self.take(&bytes),
            Ok(Msg::Eof) => self.open_pipes = self.open_pipes.saturating_sub(1),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => self.open_pipes = 0,
        }
    }

    fn tick(&mut self) {
        if self
            .last_report
            .is_none_or(|t| t.elapsed() >= REPORT_INTERVAL)
        {
            self.flush_report();
        }
    }

    fn take_queued(&mut self) {
        while let Ok(Msg::Data(bytes)) = self.rx.try_recv() {
            self.take(&bytes);
        }
    }
}

impl Combined<'_> {
    fn take(&mut self, bytes: &[u8]) {
        self.captured.push(bytes);
        self.pending.extend_from_slice(bytes);
        if self.pending.len() > 2 * REPORT_NEW_MAX {
            let cut = self.pending.len() - REPORT_NEW_MAX;
            self.skipped += cut as u64;
            self.pending.drain(..cut);
        }
    }

    /// Reports pending output, if any. An incomplete UTF-8 sequence at the end waits for the
    /// next chunk so that a character split across reads is not mangled.
    fn flush_report(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut complete = complete_utf8_prefix(&self.pending);
        if complete == 0 {
            if self.pending.len() < 4 {
                return;
            }
            complete = self.pending.len();
        }
        self.last_report = Some(Instant::now());
        let new_text = String::from_utf8_lossy(&self.pending[..complete]).into_owned();
        self.pending.drain(..complete);
        let tail_start = self.captured.tail.len().saturating_sub(REPORT_TAIL_MAX);
        let tail_text = String::from_utf8_lossy(&self.captured.tail[tail_start..]);
        let report = Report {
            new_text: &new_text,
            skipped: std::mem::take(&mut self.skipped),
            tail: tail_bytes(&tail_text, REPORT_TAIL_MAX),
        };
        (self.on_report)(&report);
    }
}

/// Each pipe on its own channel into its own buffer, the first `keep` bytes of each
/// (`run_split`).
struct Split {
    streams: [SplitStream; 2],
    keep: usize,
}

struct SplitStream {
    rx: Receiver<Msg>,
    kept: Vec<u8>,
    closed: bool,
}

impl SplitStream {
    fn take(&mut self, bytes: &[u8], keep: usize) {
        let room = keep.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

impl Sink for Split {
    fn open(&self) -> bool {
        self.streams.iter().any(|s| !s.closed)
    }

    fn receive(&mut self, poll: Duration) {
        let never = crossbeam_channel::never();
        let [out, err] = &self.streams;
        let rx0 = if out.closed { &never } else { &out.rx };
        let rx1 = if err.closed { &never } else { &err.rx };
        let got = select! {
            recv(rx0) -> m => Some((0, m.ok())),
            recv(rx1) -> m => Some((1, m.ok())),
            default(poll) => None,
        };
        if let Some((i, m)) = got {
            let stream = &mut self.streams[i];
            match m {
                Some(Msg::Data(bytes)) => stream.take(&bytes, self.keep),
                Some(Msg::Eof) | None => stream.closed = true,
            }
        }
    }

    fn take_queued(&mut self) {
        for stream in &mut self.streams {
            while let Ok(Msg::Data(bytes)) = stream.rx.try_recv() {
                stream.take(&bytes, self.keep);
            }
        }
    }
}

/// How a command run by `run_split` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitEnding {
    Exited(i32),
    /// Killed by this signal (not by us).
    Signaled(i32),
    TimedOut,
    Aborted,
}

/// A command's stdout and stderr kept apart, each at most `keep` bytes (the start of it).
#[derive(Debug)]
pub(crate) struct SplitRun {
    pub ending: SplitEnding,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` with the shell in `cwd` for its two streams separately (autonomous gates):
/// the same group discipline as `run` (its own group, killed on timeout, on abort, and when
/// the shell has exited but something it left behind keeps the pipes open), but only the
/// first `keep` bytes of each stream are kept and nothing is spilled. `Err` when it could not
/// start (the spawn error's text).
pub(crate) fn run_split(
    command: &str,
    cwd: &Path,
    timeout: Duration,
    keep: usize,
    abort: &AbortFlag,
) -> Result<SplitRun, String> {
    if abort.is_aborted() {
        return Ok(SplitRun {
            ending: SplitEnding::Aborted,
            stdout: String::new(),
            stderr: String::new(),
        });
    }
    let mut cmd = shell_command(shell(), command, cwd, true);
    let mut started = Started::spawn(&mut cmd, abort, None).map_err(|e| e.to_string())?;
    let mut drains = Vec::new();
    let pipes = [
        started
            .child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        started
            .child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    let streams = pipes.map(|pipe| {
        let (tx, rx) = bounded(CHANNEL_DEPTH);
        if let Some(pipe) = pipe {
            drains.extend(drain("gate-output", pipe, tx));
        }
        SplitStream {
            rx,
            kept: Vec::new(),
            closed: false,
        }
    });
    let mut sink = Split { streams, keep };
    let exit = supervise(&mut started, Some(timeout), abort, &mut sink);
    started.end(drains);
    let ending = match (exit.stop, exit.status) {
        (Some(Stop::TimedOut), _) => SplitEnding::TimedOut,
        (Some(Stop::Aborted), _) => SplitEnding::Aborted,
        (None, Some(s)) => match (s.code(), s.signal()) {
            (Some(code), _) => SplitEnding::Exited(code),
            (None, Some(sig)) => SplitEnding::Signaled(sig),
            (None, None) => SplitEnding::Exited(255),
        },
        (None, None) => SplitEnding::Exited(255),
    };
    let [stdout, stderr] = sink
        .streams
        .map(|s| String::from_utf8_lossy(&s.kept).into_owned());
    Ok(SplitRun {
        ending,
        stdout,
        stderr,
    })
}

/// Length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence.
fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // A sequence is at most 4 bytes: look back at most 3 for its lead byte.
    for back in 1..=len.min(4) {
        let b = bytes[len - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte
        }
        let need = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1, // invalid lead byte: lossy decoding handles it
        };
        return if back < need { len - back } else { len };
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run_stdout` on another thread, waited for at most 10 s (`None`: still running).
    fn run_stdout_within(command: &'static str, timeout: Duration) -> Option<RunResult> {
        let (tx, rx) = bounded(1);
        thread::spawn(move || {
            let _ = tx.send(run_stdout(command, timeout, &AbortFlag::new()));
        });
        rx.recv_timeout(Duration::from_secs(10))
            .ok()
            .map(|r| r.expect("sh starts"))
    }

    /// Waits (bounded) for `pid` to be gone or a zombie.
    fn dies(pid: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => return true,
                Ok(stat)
                    if stat
                        .rsplit(')')
                        .next()
                        .is_some_and(|s| s.trim_start().starts_with('Z')) =>
                {
                    return true
                }
                Ok(_) => thread::sleep(Duration::from_millis(10)),
            }
        }
        false
    }

    #[test]
    fn run_stdout_kills_the_whole_group_on_timeout_and_for_leftover_pipe_holders() {
        // A child still running at the deadline: timed out, its stdout so far kept.
        let r = run_stdout_within("echo $$; sleep 30; echo k", Duration::from_millis(300))
            .expect("the timeout did not end the run");
        assert_eq!(r.ending, Ending::TimedOut);
        let out = String::from_utf8_lossy(r.output.whole().unwrap()).into_owned();
        assert!(dies(out.trim()), "the shell survived its timeout");
        // The shell exits but a background child holds the pipe: the run ends with what was
        // printed, and the holder dies with the group.
        let r = run_stdout_within("sleep 30 & echo $!; echo k", Duration::from_secs(60))
            .expect("a leftover pipe holder stalled the run");
        assert_eq!(r.ending, Ending::Exited(0));
        let out = String::from_utf8_lossy(r.output.whole().unwrap()).into_owned();
        let (pid, rest) = out.split_once('\n').unwrap();
        assert_eq!(rest, "k\n");
        assert!(dies(pid), "the background child survived the run");
        // Stderr is not part of the output, and nothing is spilled to a file.
        let r = run_stdout_within(
            "echo err >&2; yes key | head -c 100000",
            Duration::from_secs(60),
        )
        .expect("run ends");
        assert_eq!(r.output.whole().map(<[u8]>::len), Some(100_000));
        assert!(r.output.full_output_path().is_none());
    }

    #[test]
    fn line_counts_match_a_byte_by_byte_count_over_any_chunking() {
        // The reference: the per-byte walk `count_lines` replaces.
        fn reference(chunks: &[&[u8]]) -> (u64, u64, u64) {
            let (mut newlines, mut last, mut full) = (0, 0, 0);
            for &b in chunks.iter().flat_map(|c| c.iter()) {
                if b == b'\n' {
                    if last > 0 {
                        full = last;
                    }
                    newlines += 1;
                    last = 0;
                } else {
                    last += 1;
                }
            }
            (newlines, last, full)
        }
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..300 {
            let len = (next() % 200) as usize;
            // Dense, sparse and no newlines; empty lines and runs of them included.
            let every = [2, 3, 9, 70, u64::MAX][round % 5];
            let data: Vec<u8> = (0..len)
                .map(|_| if next() % every == 0 { b'\n' } else { b'x' })
                .collect();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut rest = data.as_slice();
            while !rest.is_empty() {
                let n = ((next() % 20) as usize).min(rest.len());
                let (a, b) = rest.split_at(n);
                chunks.push(a);
                rest = b;
            }
            let mut c = Captured::default();
            for chunk in &chunks {
                c.count_lines(chunk);
            }
            let got = (c.newlines, c.last_line_bytes, c.last_full_line_bytes);
            assert_eq!(
                got,
                reference(&chunks),
                "{:?}",
                String::from_utf8_lossy(&data)
            );
        }
        assert_eq!(count_newlines(b"\n\n\n\n\n\n\n\n\n"), 9);
        assert_eq!(count_newlines(&[0x8a; 16]), 0);
    }

    #[test]
    fn utf8_prefix_holds_back_split_characters() {
        assert_eq!(complete_utf8_prefix(b"abc"), 3);
        assert_eq!(complete_utf8_prefix("aé".as_bytes()), 3);
        assert_eq!(complete_utf8_prefix(&"aé".as_bytes()[..2]), 1);
        assert_eq!(complete_utf8_prefix(&"a€".as_bytes()[..3]), 1);
        assert_eq!(complete_utf8_prefix(b""), 0);
    }

    #[test]
    fn capture_counts_lines_and_spills_to_a_private_file() {
        let mut c = Captured::default();
        c.push(b"one\ntwo\n");
        assert_eq!(c.total_lines(), 3);
        assert_eq!(c.render(), "one\ntwo\n");
        assert!(c.full_output_path().is_none());
        for _ in 0..3000 {
            c.push(b"line\n");
        }
        c.finish();
        let path = c.full_output_path().expect("spilled").to_path_buf();
        let text = c.render();
        assert!(
            text.ends_with(&format!(
                "\n\n[Showing lines 1004-3003 of 3003. Full output: {}]",
                path.display()
            )),
            "{}",
            &text[text.len() - 120..]
        );
        let full = std::fs::read(&path).unwrap();
        assert_eq!(full.len() as u64, c.total_bytes);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_full_output_file_that_cannot_be_written_is_called_incomplete() {
        let Ok(dev_full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            return; // not Linux
        };
        let mut c = Captured {
            full: Some(FullOutput::File {
                path: PathBuf::from("/dev/full"),
                writer: Some(BufWriter::with_capacity(READ_CHUNK, dev_full)),
                error: None,
            }),
            ..Default::default()
        };
        for _ in 0..3000 {
            c.push(&[b'x'; 99]);
            c.push(b"\n");
        }
        c.finish();
        let text = c.render();
        assert!(
            text.ends_with(
                "Full output: /dev/full (incomplete: No space left on device (os error 28))]"
            ),
            "{}",
            &text[text.len() - 150..]
        );
    }

    #[test]
    fn capture_tail_stays_bounded_and_notices_bytes_and_partial_lines() {
        let mut c = Captured::default();
        let line = [b'y'; 99];
        for _ in 0..20_000 {
            c.push(&line);
            c.push(b"\n");
        }
        assert!(c.tail.len() <= TAIL_TRIM_AT);
        let text = c.render();
        // The empty last line plus 512 lines of 100 bytes fill the 50 KB exactly.
        assert!(
            text.contains("[Showing lines 19489-20001 of 20001 (50.0KB limit). Full output: "),
            "{}",
            &text[text.len() - 150..]
        );
        if let Some(p) = c.full_output_path() {
            let _ = std::fs::remove_file(p);
        }
        let mut c = Captured::default();
        for _ in 0..10 {
            c.push(&[b'z'; 100_000]);
        }
        let text = c.render();
        assert!(
            text.contains("[Showing last 50.0KB of line 1 (line is 976.6KB). Full output: "),
            "{}",
            &text[text.len() - 150..]
        );
        if let Some(p) = c.full_output_path() {
            let _ = std::fs::remove_file(p);
        }
    }

    #[test]
    fn an_overlong_last_line_before_a_final_newline_still_reaches_the_model() {
        // Two lines, the second 60 KB, then a newline: the model must see the end of line 2,
        // not an empty result with "[Showing lines 3-3 of 3 …]".
        let mut c = Captured::default();
        c.push(b"short\n");
        for _ in 0..60 {
            c.push(&[b'q'; 1024]);
        }
        c.push(b"END\n");
        c.finish();
        let text = c.render();
        let (body, notice) = text.rsplit_once("\n\n").expect("a notice");
        assert!(body.ends_with("qqqEND\n"), "{:?}", &body[body.len() - 20..]);
        assert_eq!(body.len(), MAX_BYTES);
        let path = c.full_output_path().expect("spilled").display().to_string();
        assert_eq!(
            notice,
            format!("[Showing last 50.0KB of line 2 (line is 60.0KB). Full output: {path}]")
        );
        let _ = std::fs::remove_file(path);
    }
}
