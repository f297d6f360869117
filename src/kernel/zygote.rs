//! The kernel zygote: one warmed Python per agent process that forks kernels on request, so a
//! session's first cell does not pay for Python's start-up and imports, and each kernel beyond
//! the first shares the zygote's pages copy-on-write instead of importing everything again.
//!
//! `driver.py --zygote` (see its zygote section) runs the same `bootstrap` a kernel runs
//! (namespace, `rlm`, IPython's shell when installed), then waits on a `SOCK_SEQPACKET`
//! socket (its fd 3). A fork request carries the kernel's four fds (0: host → kernel frames,
//! 1 and 2: output, 3: kernel → host frames) by `SCM_RIGHTS`, and the cwd and extra env; the
//! forked child puts them in place and runs the driver's `serve`, the same kernel a direct
//! start runs. The zygote reaps its children and reports each exit, so `Kernel` learns the
//! wait status of a kernel that is not the agent's child.
//!
//! The zygote keeps one spare kernel forked and set up ahead of any request (its own group, the
//! parent-death signal, blocked on a socket of its own); a request hands the spare its fds, cwd
//! and env and is answered at once, so the fork and the new process's first scheduling are off
//! the first cell's path. The next spare is forked once the zygote saw no request for 100 ms; a
//! request that finds none forks as before. A spare holds nothing of any session (the zygote
//! never runs a cell) and is used once. Nothing changes on this side: the answer is the same
//! `forked {pid}`, and a spare the host never heard of is never reported.
//!
//! Lifetime: `prewarm` starts it off the critical path (after a session with the `ipython`
//! tool is built, never before `initialize`). With settings `kernel.prewarm` off
//! (`PRIME_AGENT_KERNEL_PREWARM=0`) nothing starts until a kernel is wanted: the first one
//! starts the zygote and waits for it (`for_kernel`), so an agent that never runs a cell never
//! starts Python. It dies with the agent (its fd 0 and its socket reach EOF; it also asks for
//! SIGKILL on its parent's death), and every kernel it forked dies with it (PR_SET_PDEATHSIG),
//! besides each kernel's own EOF on its fd 0; at its own exit it kills and reaps its spare,
//! which also dies with it (PR_SET_PDEATHSIG). If it fails to start, kernels start directly as
//! before (`Kernel::start`); one that dies after it was ready is started again by the next
//! `prewarm` or kernel start. `PRIME_AGENT_KERNEL_ZYGOTE=0` turns it off.
//!
//! The sandbox (`base/sandbox.rs`): the zygote runs unsandboxed and forks only unsandboxed
//! kernels. A fork does not exec, so a kernel forked from it could not enter a sandbox of its
//! own between fork and exec; a sandboxed kernel therefore starts on its own (`Kernel::start`),
//! and sandboxed sessions do not warm a zygote.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::base::json::json;
use serde_json::Value;

use crate::base::abort::AbortFlag;
use crate::base::spawn;

/// How long a kernel start waits for a zygote that is still importing, and for a fork's answer.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const FORK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `wait_exit` waits for the zygote's report after a SIGKILL.
pub(crate) const EXIT_REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// The wait status of a process killed by SIGKILL (for kernels whose zygote died with them).
const KILLED_STATUS: i32 = libc::SIGKILL;

#[derive(Default)]
struct State {
    /// `None` while the zygote imports; then whether it came up.
    ready: Option<Result<(), String>>,
    next_seq: u64,
    replies: HashMap<u64, Result<i32, String>>,
    /// Raw wait statuses of forked kernels, until `Kernel` takes them.
    exits: HashMap<i32, i32>,
    /// The control socket reached EOF: the zygote is gone, and so are its kernels.
    closed: bool,
}

pub(crate) struct Zygote {
    python: PathBuf,
    ctl: UnixStream,
    state: Mutex<State>,
    changed: Condvar,
    /// Held so the zygote's fd 0 reaches EOF only when we are gone (or `stop` closes it).
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
    pid: i32,
    dir: PathBuf,
}

static CURRENT: Mutex<Option<Arc<Zygote>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn enabled() -> bool {
    std::env::var("PRIME_AGENT_KERNEL_ZYGOTE").map_or(true, |v| v != "0")
}

/// Starts this process's zygote for `python` in the background, unless one runs (or starts).
/// Returns at once: the spawn happens on a short-lived thread.
pub(crate) fn prewarm(python: &Path) {
    if !enabled() {
        return;
    }
    {
        let current = lock(&CURRENT);
        if current.as_ref().is_some_and(|z| !z.is_closed()) {
            return;
        }
    }
    let python = python.to_path_buf();
    let spawned = thread::Builder::new()
        .name("kernel-zygote-start".to_owned())
        .spawn(move || {
            let mut current = lock(&CURRENT);
            if current.as_ref().is_some_and(|z| !z.is_closed()) {
                return;
            }
            match Zygote::spawn(&python) {
                Ok(z) => *current = Some(z),
                Err(e) => log::info!("kernel zygote not started ({e}); kernels start on their own"),
            }
        });
    if let Err(e) = spawned {
        log::debug!("cannot start the kernel zygote thread: {e}");
    }
}

/// At the agent's exit, once its kernels are gone: a ready zygote is told to go (EOF on its
/// fd 0: it kills and reaps its spare kernel, then exits) and waited for up to `timeout`; one
/// still importing, or slower than that, is killed. Either way it is reaped here, and its
/// spare dies with it (its parent-death signal), so the exit leaves no process behind.
pub(crate) fn stop(timeout: Duration) {
    let Some(z) = lock(&CURRENT).take() else {
        return;
    };
    if matches!(lock(&z.state).ready, Some(Ok(()))) {
        drop(lock(&z.stdin).take());
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if lock(&z.child).try_wait().ok().flatten().is_some() {
                break;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
    z.shut_down();
}

/// The zygote a kernel for `python` forks from, once it is ready (waiting for it while it
/// imports, cut short by `abort`). When none runs (settings `kernel.prewarm` off, or the last
/// one died after it was ready), one is started here and waited for: the first cell pays
/// Python's start-up once, and later kernels fork. `None` when the zygote is off, failed to
/// start, or runs another Python: the kernel then starts on its own.
pub(crate) fn for_kernel(python: &Path, abort: &AbortFlag) -> Option<Arc<Zygote>> {
    if !enabled() {
        return None;
    }
    let z = {
        let mut current = lock(&CURRENT);
        match current.as_ref() {
            Some(z) if !z.died_after_ready() => z.clone(),
            _ => match Zygote::spawn(python) {
                Ok(z) => current.insert(z).clone(),
                Err(e) => {
                    log::info!("kernel zygote not started ({e}); the kernel starts on its own");
                    return None;
                }
            },
        }
    };
    if z.python != python {
        return None;
    }
    z.wait_ready(abort).then_some(z)
}

impl Zygote {
    fn spawn(python: &Path) -> Result<Arc<Zygote>, String> {
        let dir = super::write_driver_dir()?;
        let (ours, theirs) = spawn::seqpacket_pair().map_err(|e| format!("socketpair: {e}"))?;
        let mut cmd = Command::new(python);
        cmd.arg("-u")
            .arg(dir.join("driver.py"))
            .arg("--zygote")
            .current_dir(&dir)
            // Pipes, not /dev/null: a forked kernel keeps Python's stdout and stderr objects
            // and only gets new fds under them, so they must be of the kind a kernel's are
            // (a /dev/null file object thinks it can seek). The zygote itself writes nothing.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let (mut child, pid) = match spawn::spawn_group(&mut cmd, Some((theirs.as_fd(), 3)), None) {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(format!("cannot run {}: {e}", python.display()));
            }
        };
        drop(theirs);
        drop((child.stdout.take(), child.stderr.take()));
        let Some(stdin) = child.stdin.take() else {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            return Err("no stdin pipe".to_owned());
        };
        let ctl = UnixStream::from(ours);
        let reader = ctl.try_clone().map_err(|e| format!("socket clone: {e}"))?;
        let z = Arc::new(Zygote {
            python: python.to_path_buf(),
            ctl,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stdin: Mutex::new(Some(stdin)),
            child: Mutex::new(child),
            pid,
            dir,
        });
        let weak = Arc::downgrade(&z);
        thread::Builder::new()
            .name("kernel-zygote".to_owned())
            .spawn(move || read_replies(reader, weak))
            .map_err(|e| {
                z.shut_down();
                format!("cannot start the zygote's reader: {e}")
            })?;
        Ok(z)
    }

    fn is_closed(&self) -> bool {
        let s = lock(&self.state);
        s.closed || matches!(s.ready, Some(Err(_)))
    }

    /// It came up and is gone since: worth starting again (one that never came up is not).
    fn died_after_ready(&self) -> bool {
        let s = lock(&self.state);
        s.closed && matches!(s.ready, Some(Ok(())))
    }

    fn wait_ready(self: &Arc<Self>, abort: &AbortFlag) -> bool {
        // A cancel wakes the wait at once. The hook takes the state lock, which every holder
        // keeps only for a few field updates (never across IO), so the notify cannot fall
        // between this loop's check of the flag and its wait.
        let z = Arc::clone(self);
        let _hook = abort.on_abort(move || {
            let _s = lock(&z.state);
            z.changed.notify_all();
        });
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut s = lock(&self.state);
        loop {
            match &s.ready {
                Some(r) => return r.is_ok() && !s.closed,
                None if s.closed => return false,
                None => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || abort.is_aborted() {
                return false;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Forks a kernel with these fds as its 0..=3, in `cwd` with `env` added; its pid (also
    /// its process group).
    pub(crate) fn fork(
        &self,
        fds: [BorrowedFd<'_>; 4],
        cwd: &Path,
        env: &[(String, String)],
    ) -> Result<i32, String> {
        let seq = {
            let mut s = lock(&self.state);
            s.next_seq += 1;
            s.next_seq
        };
        let env: serde_json::Map<String, Value> = env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let msg = json!({"op": "fork", "seq": seq, "cwd": cwd.display().to_string(), "env": env});
        spawn::send_with_fds(self.ctl.as_fd(), msg.to_string().as_bytes(), &fds)
            .map_err(|e| format!("cannot reach the zygote: {e}"))?;
        let deadline = Instant::now() + FORK_TIMEOUT;
        let mut s = lock(&self.state);
        loop {
            if let Some(r) = s.replies.remove(&seq) {
                return r;
            }
            if s.closed {
                return Err("the zygote exited".to_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("the zygote did not answer".to_owned());
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// How forked kernel `pid` ended, if it has (a dead zygote took its kernels with it).
    pub(crate) fn try_exit(&self, pid: i32) -> Option<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let mut s = lock(&self.state);
        match s.exits.remove(&pid) {
            Some(raw) => Some(ExitStatus::from_raw(raw)),
            None if s.closed => Some(ExitStatus::from_raw(KILLED_STATUS)),
            None => None,
        }
    }

    /// Waits (at most `timeout`) for kernel `pid`'s exit report.
    pub(crate) fn wait_exit(&self, pid: i32, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit(pid) {
                return Some(status);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let s = lock(&self.state);
            if s.exits.contains_key(&pid) || s.closed {
                continue;
            }
            drop(
                self.changed
                    .wait_timeout(s, left)
                    .unwrap_or_else(|e| e.into_inner()),
            );
        }
    }

    /// Kills the zygote's group (itself and its guard) unless it is reaped already (then the
    /// guard goes by itself, and the pid may be another process's), and reaps it.
    fn shut_down(&self) {
        let mut child = lock(&self.child);
        if child.try_wait().ok().flatten().is_none() {
            let _ = spawn::signal_group(self.pid, libc::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// The zygote's answers: `zygote_ready`, `forked` / `fork_failed`, `exited`; EOF closes it.
fn read_replies(mut sock: UnixStream, zygote: std::sync::Weak<Zygote>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = sock.read(&mut buf).unwrap_or(0);
        let Some(z) = zygote.upgrade() else { return };
        let mut s = lock(&z.state);
        if n == 0 {
            s.closed = true;
            if s.ready.is_none() {
                s.ready = Some(Err("the zygote exited while starting".to_owned()));
                log::info!("kernel zygote {} exited while starting", z.pid);
            }
            z.changed.notify_all();
            drop(s);
            // Reap it (and remove its files) without waiting for the process to end.
            if let Ok(mut child) = z.child.try_lock() {
                let _ = child.try_wait();
            }
            return;
        }
        match serde_json::from_slice::<Value>(&buf[..n]) {
            Ok(frame) => apply(&mut s, &frame, z.pid),
            Err(e) => log::warn!("kernel zygote sent a bad frame: {e}"),
        }
        z.changed.notify_all();
    }
}

/// One frame from the zygote, applied to the state (pure apart from logging).
fn apply(s: &mut State, frame: &Value, zygote_pid: i32) {
    let int = |k: &str| frame.get(k).and_then(Value::as_i64);
    match frame.get("op").and_then(Value::as_str) {
        Some("zygote_ready") => {
            log::debug!(
                "kernel zygote {zygote_pid} ready: {} on Python {}",
                frame["engine"].as_str().unwrap_or("?"),
                frame["python"].as_str().unwrap_or("?")
            );
            s.ready = Some(Ok(()));
        }
        Some("forked") => {
            if let (Some(seq), Some(pid)) = (int("seq"), int("pid")) {
                let pid = i32::try_from(pid).unwrap_or(0);
                s.replies.insert(seq as u64, Ok(pid));
            }
        }
        Some("fork_failed") => {
            if let Some(seq) = int("seq") {
                let error = frame["error"].as_str().unwrap_or("fork failed").to_owned();
                s.replies.insert(seq as u64, Err(error));
            }
        }
        Some("exited") => {
            if let (Some(pid), Some(status)) = (int("pid"), int("status")) {
                if let (Ok(pid), Ok(status)) = (i32::try_from(pid), i32::try_from(status)) {
                    s.exits.insert(pid, status);
                }
            }
        }
        Some("spare_failed") => log::info!(
            "kernel zygote {zygote_pid}: no spare kernel ({}); kernels are forked on request",
            frame["error"].as_str().unwrap_or("?")
        ),
        other => log::debug!("kernel zygote: ignoring frame {other:?}"),
    }
}

/// Pipes for a forked kernel: the kernel's ends (fd 0, 1, 2, 3 order) and ours.
pub(crate) struct KernelPipes {
    pub(crate) theirs: [OwnedFd; 4],
    pub(crate) stdin: std::io::PipeWriter,
    pub(crate) stdout: std::io::PipeReader,
    pub(crate) stderr: std::io::PipeReader,
    pub(crate) frames: std::io::PipeReader,
}

impl KernelPipes {
    pub(crate) fn new() -> std::io::Result<KernelPipes> {
        let (in_r, in_w) = std::io::pipe()?;
        let (out_r, out_w) = std::io::pipe()?;
        let (err_r, err_w) = std::io::pipe()?;
        let (fr_r, fr_w) = std::io::pipe()?;
        Ok(KernelPipes {
            theirs: [in_r.into(), out_w.into(), err_w.into(), fr_w.into()],
            stdin: in_w,
            stdout: out_r,
            stderr: err_r,
            frames: fr_r,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_fill_the_state() {
        let mut s = State::default();
        apply(
            &mut s,
            &json!({"op": "zygote_ready", "engine": "plain", "python": "3"}),
            1,
        );
        assert_eq!(s.ready, Some(Ok(())));
        apply(&mut s, &json!({"op": "forked", "seq": 1, "pid": 42}), 1);
        apply(
            &mut s,
            &json!({"op": "fork_failed", "seq": 2, "error": "OSError: no"}),
            1,
        );
        apply(&mut s, &json!({"op": "exited", "pid": 42, "status": 9}), 1);
        apply(&mut s, &json!({"op": "what"}), 1);
        assert_eq!(s.replies.get(&1), Some(&Ok(42)));
        assert_eq!(s.replies.get(&2), Some(&Err("OSError: no".to_owned())));
        assert_eq!(s.exits.get(&42), Some(&9));
    }
}
