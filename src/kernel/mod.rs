//! A persistent Python kernel as a child process: start, run one cell at a time, interrupt,
//! kill. The `ipython` tool (`tools/ipython.rs`) owns the policy (restarts, result text); this
//! module owns the process and the wire.
//!
//! # Host–kernel protocol
//!
//! The kernel is `python3 -u driver.py` (the driver, `rlm.py` and `harness.py` are embedded in
//! the binary and written to a private `0700` temp dir), started in its own process group with
//! cwd = session cwd. Three channels, all pipes:
//!
//! - **fd 0 (host → kernel)**: NDJSON frames `execute {id, code}`,
//!   `host_reply {rid, status: "ok", result} | {rid, status: "error", error}` and `flush`
//!   (write a pending namespace snapshot now; answered `flushed {saved}`).
//! - **fd 3 (kernel → host)**: NDJSON frames tagged by `op`: `ready {pid, engine, python,
//!   restore}` (`restore`: what loading a namespace snapshot gave, see `state`), `log {level,
//!   message}` (the driver's own log lines, between cells), `flushed {saved}`,
//!   `result {id, text}` (repr of the last expression), `error {id, ename, evalue, traceback}`,
//!   `display {id, data: {mime: payload}}` (diff / attachment / agent-message / image MIME
//!   types), `child_group {id, pgid}` (a `%%bash` process group), `done {id, status}`, and
//!   `host_request {rid, type, payload}`.
//! - **fd 1 / fd 2**: the user code's own stdout and stderr, raw bytes, streamed to the host
//!   as they come. Before `done`, the driver writes the marker `\0<token>:<id>\0` to both, so
//!   the host knows it has every byte of the cell (subprocess output included) once it has seen
//!   `done` and both markers. The token is random per kernel and removed from the kernel's env.
//!
//! The driver first moves fd 0 and fd 3 to private close-on-exec fds and puts `/dev/null` on
//! fd 0, so neither user code nor its subprocesses can read or corrupt the protocol.
//!
//! **Cells** run one at a time on the driver's main thread; variables, imports and the cwd
//! persist. **Interrupt** is SIGINT to the Python process, which the driver turns into
//! `KeyboardInterrupt` only while user code runs (never mid-frame, never when idle). The host
//! kills the whole group (and any `%%bash` group) if the cell is not done 1 s after the
//! interrupt. **Host requests** are answered on a thread per request by a `HostHandler`, at any
//! time, even between cells; a handler that panics gets an error reply, never silence. **Lifetime**: started lazily by the tool; killed (process group)
//! on drop; the driver kills its own group when fd 0 reaches EOF, so an agent that dies without
//! cleaning up takes its kernel with it.

pub(crate) mod host;
pub(crate) mod state;
pub(crate) mod venv;
pub(crate) mod wire;
pub(crate) mod zygote;

use std::io::PipeWriter;
use std::io::{BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};

use crate::base::lines::{read_line_limited, LineRead};
use serde_json::{Map, Value};

use crate::base::abort::AbortFlag;
use crate::base::spawn;
pub use host::{DefaultHostHandler, HostHandler};
use wire::{Chunk, KernelFrame, MarkerScanner};

const DRIVER_PY: &str = include_str!("driver.py");
const RLM_PY: &str = include_str!("rlm.py");
const HARNESS_PY: &str = include_str!("harness.py");
const STATE_PY: &str = include_str!("state.py");

/// How long the driver may take to start (IPython imports can be slow on a cold disk).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Why a start ended when its turn was cancelled.
const CANCELLED_WHILE_STARTING: &str = "cancelled while starting";
/// How long an interrupted cell may take to stop before the kernel is killed.
pub(crate) const INTERRUPT_GRACE: Duration = Duration::from_secs(1);
/// After `done`, how long to wait for the stdout/stderr markers before giving up on them.
const MARKER_GRACE: Duration = Duration::from_secs(2);
/// How often a waiting cell checks that the process is still alive.
const LIVENESS_TICK: Duration = Duration::from_millis(100);

/// Per stream, at most this many bytes are kept (the tool shows 65,536 chars, ≤ 4 bytes each).
pub(crate) const CAPTURE_LIMIT: usize = 4 * 65_536;

/// Per cell, display bundles are kept up to this many payload bytes; later ones are dropped
/// and counted (`CellRun::displays_dropped`), so a cell displaying in a loop stays bounded.
pub(crate) const DISPLAY_LIMIT: usize = 64 * 1024 * 1024;

/// The longest fd 3 frame read: one display can never exceed a cell's display budget.
const MAX_FRAME_BYTES: usize = DISPLAY_LIMIT;

/// `Kernel::wanted` when no cell runs: the output readers forward nothing.
const NO_CELL: u64 = u64::MAX;
/// `Kernel::wanted` while the driver starts (its stderr explains a failed start).
const START_UP: u64 = 0;

/// Finds the Python to run: `PRIME_AGENT_KERNEL_PYTHON` (a path, or a name looked up in
/// `PATH`), else the managed environment's once `prime-agent kernel setup` has made it
/// (`venv`), else `python3`, else `python` on `PATH`.
pub fn find_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PRIME_AGENT_KERNEL_PYTHON").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.components().count() > 1 {
            is_executable(&p).then_some(p)
        } else {
            which(&p)
        };
    }
    venv::python()
        .or_else(|| which(Path::new("python3")))
        .or_else(|| which(Path::new("python")))
}

fn which(name: &Path) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What a kernel is started with.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    pub python: PathBuf,
    pub cwd: PathBuf,
    /// Added to (and overriding) the agent's environment.
    pub env: Vec<(String, String)>,
    /// The OS sandbox the kernel and everything it starts run in. A sandboxed kernel starts
    /// on its own, never from the zygote (whose domain, if any, would be another session's).
    pub(crate) sandbox: Option<Arc<crate::base::sandbox::Policy>>,
}

impl KernelConfig {
    /// An unsandboxed kernel's configuration.
    pub fn new(python: PathBuf, cwd: PathBuf, env: Vec<(String, String)>) -> KernelConfig {
        KernelConfig {
            python,
            cwd,
            env,
            sandbox: None,
        }
    }
}

/// One stream's bytes, capped at `CAPTURE_LIMIT`.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    pub bytes: Vec<u8>,
    /// Bytes were dropped at the cap.
    pub truncated: bool,
}

impl Capture {
    fn push(&mut self, data: &[u8]) {
        let room = CAPTURE_LIMIT.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
        self.truncated |= data.len() > room;
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// A Python exception reported by the kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct CellError {
    pub ename: String,
    pub evalue: String,
    pub traceback: Vec<String>,
}

/// How a cell ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CellEnd {
    /// The kernel finished the cell (`ok` or `error`); it is alive.
    Done { ok: bool },
    /// The turn was aborted and the cell stopped within the grace period; the kernel is alive.
    Interrupted,
    /// The turn was aborted and the cell did not stop: the kernel was killed.
    Killed,
    /// The kernel died by itself; the text says how.
    Died(String),
}

/// Everything a cell produced.
#[derive(Debug, Clone)]
pub struct CellRun {
    pub stdout: Capture,
    pub stderr: Capture,
    pub result: Option<String>,
    pub error: Option<CellError>,
    /// Display bundles, in order.
    pub displays: Vec<Map<String, Value>>,
    /// Display bundles dropped at `DISPLAY_LIMIT`.
    pub displays_dropped: usize,
    pub end: CellEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

enum Event {
    Frame(KernelFrame),
    Output(Stream, Vec<u8>),
    /// The reader dropped this cell's bytes beyond `CAPTURE_LIMIT` on the stream.
    Truncated(Stream),
    Marker(Stream, u64),
    OutputClosed(Stream),
    FramesClosed,
    Abort,
}

/// The kernel's process: our child (started directly), or one the zygote forked, whose exit
/// the zygote reports.
enum Proc {
    Child(Child),
    Forked(Arc<zygote::Zygote>),
}

/// A running kernel. Dropping it kills its process group and removes its temp dir.
pub struct Kernel {
    proc: Proc,
    pid: i32,
    stdin: Arc<Mutex<PipeWriter>>,
    events: Receiver<Event>,
    events_tx: Sender<Event>,
    /// The running cell's source and the span it runs for (`telemetry::current` of the
    /// caller): host requests carry the one and run under the other.
    cell_source: Arc<Mutex<CellSource>>,
    /// The cell whose output the reader threads forward (`NO_CELL` between cells).
    wanted: Arc<AtomicU64>,
    next_cell: u64,
    /// `%%bash` process groups, killed with the kernel.
    child_groups: Vec<i32>,
    /// The driver files of a directly started kernel (a forked one uses the zygote's).
    dir: Option<PathBuf>,
    engine: String,
    /// The `restore` report of the `ready` frame, until `take_restore_report`.
    restore: Option<Value>,
    exited: Option<ExitStatus>,
}

impl Kernel {
    /// Starts the driver and waits for its `ready` frame. `abort` cancels the wait. The kernel
    /// is forked from this process's zygote (`zygote::for_kernel`: warmed by `prewarm`, else
    /// started now); without one (or if the fork fails) `python3 driver.py` starts as its own
    /// process.
    pub fn start(
        cfg: &KernelConfig,
        handler: Arc<dyn HostHandler>,
        abort: &AbortFlag,
    ) -> Result<Kernel, String> {
        let zygote = match cfg.sandbox {
            None => zygote::for_kernel(&cfg.python, abort),
            Some(_) => None,
        };
        if let Some(z) = zygote {
            match Kernel::fork(&z, cfg, handler.clone()) {
                Ok(mut kernel) => {
                    kernel.wait_ready(abort)?;
                    return Ok(kernel);
                }
                Err(e) => log::warn!("kernel zygote: {e}; starting the kernel on its own"),
            }
        }
        // The wait for the zygote ends early on a cancel: start nothing then.
        if abort.is_aborted() {
            return Err(CANCELLED_WHILE_STARTING.to_owned());
        }
        let dir = write_driver_dir()?;
        match Kernel::spawn(cfg, handler, abort, &dir) {
            Ok(kernel) => Ok(kernel),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// A kernel forked by the zygote, not yet ready.
    fn fork(
        z: &Arc<zygote::Zygote>,
        cfg: &KernelConfig,
        handler: Arc<dyn HostHandler>,
    ) -> Result<Kernel, String> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let pipes = zygote::KernelPipes::new().map_err(|e| format!("cannot create a pipe: {e}"))?;
        let mut env = cfg.env.clone();
        env.push(("PRIME_AGENT_KERNEL_TOKEN".to_owned(), token.clone()));
        let [a, b, c, d] = &pipes.theirs;
        let pid = z.fork([a.as_fd(), b.as_fd(), c.as_fd(), d.as_fd()], &cfg.cwd, &env)?;
        // Only the kernel may hold its ends now, so its death closes the streams.
        drop(pipes.theirs);
        Kernel::assemble(
            Proc::Forked(z.clone()),
            pid,
            None,
            &token,
            handler,
            pipes.stdin,
            pipes.stdout,
            pipes.stderr,
            pipes.frames,
        )
    }

    fn spawn(
        cfg: &KernelConfig,
        handler: Arc<dyn HostHandler>,
        abort: &AbortFlag,
        dir: &Path,
    ) -> Result<Kernel, String> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (frames_rx, frames_tx) =
            std::io::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
        let mut cmd = Command::new(&cfg.python);
        cmd.arg("-u")
            .arg(dir.join("driver.py"))
            .current_dir(&cfg.cwd)
            .envs(cfg.env.iter().map(|(k, v)| (k, v)))
            .env("PRIME_AGENT_KERNEL_TOKEN", &token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own group: terminal ctrl-c does not reach it, and one killpg ends it all.
        let (mut child, pid) = spawn::spawn_group(
            &mut cmd,
            Some((frames_tx.as_fd(), 3)),
            cfg.sandbox.as_deref(),
        )
        .map_err(|e| format!("cannot run {}: {e}", cfg.python.display()))?;
        // Only the child may hold the write end, so its death closes the frame stream.
        drop(frames_tx);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the kernel's pipes were not set up".to_owned());
        };
        let mut kernel = Kernel::assemble(
            Proc::Child(child),
            pid,
            Some(dir.to_path_buf()),
            &token,
            handler,
            PipeWriter::from(std::os::fd::OwnedFd::from(stdin)),
            stdout,
            stderr,
            frames_rx,
        )?;
        kernel.wait_ready(abort)?;
        Ok(kernel)
    }

    /// The host half around a started process: its reader threads and the `Kernel`.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        proc: Proc,
        pid: i32,
        dir: Option<PathBuf>,
        token: &str,
        handler: Arc<dyn HostHandler>,
        stdin: PipeWriter,
        stdout: impl Read + Send + 'static,
        stderr: impl Read + Send + 'static,
        frames_rx: std::io::PipeReader,
    ) -> Result<Kernel, String> {
        let stdin = Arc::new(Mutex::new(stdin));
        let cell_source = Arc::new(Mutex::new(CellSource::default()));
        let (tx, rx) = unbounded();
        let wanted = Arc::new(AtomicU64::new(START_UP));
        let spawned = spawn_frame_reader(
            frames_rx,
            tx.clone(),
            handler,
            stdin.clone(),
            cell_source.clone(),
        )
        .and_then(|_| {
            spawn_output_reader(stdout, Stream::Stdout, token, tx.clone(), wanted.clone())
        })
        .and_then(|_| {
            spawn_output_reader(stderr, Stream::Stderr, token, tx.clone(), wanted.clone())
        });
        let mut kernel = Kernel {
            proc,
            pid,
            stdin,
            events: rx,
            events_tx: tx,
            cell_source,
            wanted,
            next_cell: 0,
            child_groups: Vec::new(),
            dir,
            engine: String::new(),
            restore: None,
            exited: None,
        };
        if let Err(e) = spawned {
            kernel.kill();
            return Err(format!("cannot start the kernel's reader threads: {e}"));
        }
        Ok(kernel)
    }

    fn wait_ready(&mut self, abort: &AbortFlag) -> Result<(), String> {
        let tx = self.events_tx.clone();
        let _hook = abort.on_abort(move || {
            let _ = tx.send(Event::Abort);
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let mut stderr = Capture::default();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.kill();
                return Err(format!("no answer within {}s", START_TIMEOUT.as_secs()));
            }
            match self.events.recv_timeout(left.min(LIVENESS_TICK)) {
                Ok(Event::Frame(KernelFrame::Ready {
                    engine,
                    python,
                    restore,
                    ..
                })) => {
                    log::debug!("kernel {} ready: {engine} on Python {python}", self.pid);
                    self.engine = engine;
                    self.restore = restore.filter(|r| !r.is_null());
                    self.wanted.store(NO_CELL, Ordering::SeqCst);
                    return Ok(());
                }
                Ok(Event::Abort) => {
                    self.kill();
                    return Err(CANCELLED_WHILE_STARTING.to_owned());
                }
                Ok(Event::Output(Stream::Stderr, bytes)) => stderr.push(&bytes),
                Ok(Event::Truncated(Stream::Stderr)) => stderr.truncated = true,
                Ok(Event::FramesClosed) => return Err(self.start_failure(stderr)),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    if self.reap().is_some() {
                        return Err(self.start_failure(stderr));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.kill();
                    return Err("the kernel's reader threads stopped".to_owned());
                }
            }
        }
    }

    /// `ipython` or `plain`.
    pub fn engine(&self) -> &str {
        &self.engine
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Has the kernel write a pending namespace snapshot now and waits for it until
    /// `deadline`; whether one was written. Only between cells (the agent is exiting).
    pub(crate) fn flush_state(&mut self, deadline: Instant) -> bool {
        while self.events.try_recv().is_ok() {}
        if !self.send_line(&wire::flush_frame()) {
            return false;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                log::warn!("kernel {}: no answer to flush in time", self.pid);
                return false;
            }
            match self.events.recv_timeout(left.min(LIVENESS_TICK)) {
                Ok(Event::Frame(KernelFrame::Flushed { saved })) => return saved,
                Ok(Event::FramesClosed) | Err(RecvTimeoutError::Disconnected) => return false,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    if self.reap().is_some() {
                        return false;
                    }
                }
            }
        }
    }

    /// What the start loaded from a namespace snapshot (`state::RestoreReport`), once.
    pub(crate) fn take_restore_report(&mut self) -> Option<Value> {
        self.restore.take()
    }

    /// Whether the process is still running (a dead kernel must be replaced).
    pub fn is_alive(&mut self) -> bool {
        self.reap().is_none()
    }

    fn reap(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = match &mut self.proc {
                Proc::Child(child) => child.try_wait().ok().flatten(),
                Proc::Forked(z) => z.try_exit(self.pid),
            };
        }
        self.exited
    }

    /// Runs one cell. `on_output` sees stdout and stderr so far whenever more arrives.
    /// Setting `abort` interrupts the cell; if it is still running `INTERRUPT_GRACE` later, the
    /// kernel is killed (`CellEnd::Killed`) and must not be used again.
    pub fn execute(
        &mut self,
        code: &str,
        abort: &AbortFlag,
        on_output: &mut dyn FnMut(&Capture, &Capture),
    ) -> CellRun {
        let run = self.execute_cell(code, abort, on_output);
        // Whatever the kernel prints from now on belongs to no cell: the readers drop it.
        self.wanted.store(NO_CELL, Ordering::SeqCst);
        run
    }

    fn execute_cell(
        &mut self,
        code: &str,
        abort: &AbortFlag,
        on_output: &mut dyn FnMut(&Capture, &Capture),
    ) -> CellRun {
        let mut run = CellRun {
            stdout: Capture::default(),
            stderr: Capture::default(),
            result: None,
            error: None,
            displays: Vec::new(),
            displays_dropped: 0,
            end: CellEnd::Done { ok: false },
        };
        // Frames that arrived between cells belong to no cell (e.g. a background thread of the
        // previous one); only a closed frame stream still matters. (The output readers already
        // dropped the bytes printed between cells.)
        let mut closed = false;
        while let Ok(ev) = self.events.try_recv() {
            closed |= matches!(ev, Event::FramesClosed);
        }
        self.next_cell += 1;
        let id = self.next_cell;
        self.wanted.store(id, Ordering::SeqCst);
        if let Ok(mut source) = self.cell_source.lock() {
            code.clone_into(&mut source.0);
            source.1 = crate::base::telemetry::current();
        }
        if closed || !self.send_line(&wire::execute_frame(id, code)) {
            run.end = self.died(&mut run);
            return run;
        }
        let tx = self.events_tx.clone();
        let _hook = abort.on_abort(move || {
            let _ = tx.send(Event::Abort);
        });
        let mut done: Option<(bool, Instant)> = None;
        let mut markers = (false, false);
        let mut interrupted: Option<Instant> = None;
        let mut display_bytes = 0;
        loop {
            if let Some(end) = self.cell_end(id, done, markers, interrupted) {
                run.end = end;
                return run;
            }
            match self.events.recv_timeout(LIVENESS_TICK) {
                Ok(Event::Frame(frame)) => {
                    if let Some(ok) = self.on_frame(id, frame, &mut run, &mut display_bytes) {
                        done = Some((ok, Instant::now()));
                    }
                }
                Ok(Event::Output(stream, bytes)) => {
                    match stream {
                        Stream::Stdout => run.stdout.push(&bytes),
                        Stream::Stderr => run.stderr.push(&bytes),
                    }
                    on_output(&run.stdout, &run.stderr);
                }
                Ok(Event::Truncated(stream)) => match stream {
                    Stream::Stdout => run.stdout.truncated = true,
                    Stream::Stderr => run.stderr.truncated = true,
                },
                Ok(Event::Marker(stream, i)) if i == id => match stream {
                    Stream::Stdout => markers.0 = true,
                    Stream::Stderr => markers.1 = true,
                },
                Ok(Event::Marker(..)) | Ok(Event::OutputClosed(_)) => {}
                Ok(Event::Abort) => {
                    if interrupted.is_none() && done.is_none() {
                        interrupted = Some(Instant::now());
                        if !spawn::signal_process(self.pid, libc::SIGINT) {
                            log::warn!("kernel {}: cannot send SIGINT", self.pid);
                        }
                    }
                }
                Ok(Event::FramesClosed) | Err(RecvTimeoutError::Disconnected) => {
                    run.end = self.died(&mut run);
                    return run;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.reap().is_some() {
                        run.end = self.died(&mut run);
                        return run;
                    }
                }
            }
        }
    }

    /// Cell `id`'s end once it is due: done, with both output markers seen (or their grace
    /// over), or an interrupt the cell ignored for `INTERRUPT_GRACE` (then the kernel is
    /// killed).
    fn cell_end(
        &mut self,
        id: u64,
        done: Option<(bool, Instant)>,
        markers: (bool, bool),
        interrupted: Option<Instant>,
    ) -> Option<CellEnd> {
        if let Some((ok, at)) = done {
            if markers == (true, true) || at.elapsed() >= MARKER_GRACE {
                if markers != (true, true) {
                    log::warn!("kernel cell {id}: output markers missing after done");
                }
                return Some(match interrupted {
                    Some(_) => CellEnd::Interrupted,
                    None => CellEnd::Done { ok },
                });
            }
        }
        let ignored = interrupted.is_some_and(|at| at.elapsed() >= INTERRUPT_GRACE);
        if done.is_none() && ignored {
            log::info!(
                "kernel {}: cell {id} ignored the interrupt; killing it",
                self.pid
            );
            self.kill();
            return Some(CellEnd::Killed);
        }
        None
    }

    /// One frame of the kernel while cell `id` runs, into `run`; `Some(ok)` when it says the
    /// cell is done.
    fn on_frame(
        &mut self,
        id: u64,
        frame: KernelFrame,
        run: &mut CellRun,
        display_bytes: &mut usize,
    ) -> Option<bool> {
        match frame {
            KernelFrame::Result { id: i, text } if i == id => run.result = Some(text),
            KernelFrame::Error {
                id: i,
                ename,
                evalue,
                traceback,
            } if i == id => {
                run.error = Some(CellError {
                    ename,
                    evalue,
                    traceback,
                })
            }
            KernelFrame::Display { id: Some(i), data } if i == id => {
                *display_bytes += payload_bytes(&data);
                if *display_bytes <= DISPLAY_LIMIT {
                    run.displays.push(data)
                } else {
                    run.displays_dropped += 1;
                }
            }
            KernelFrame::ChildGroup { pgid, .. } => {
                if let Ok(pgid) = i32::try_from(pgid) {
                    self.child_groups.push(pgid);
                }
            }
            KernelFrame::Done { id: i, status } if i == id => return Some(status == "ok"),
            other => log::debug!("kernel cell {id}: ignoring frame {other:?}"),
        }
        None
    }

    /// Why start-up failed, with the kernel's stderr (usually a traceback).
    fn start_failure(&mut self, mut stderr: Capture) -> String {
        self.collect_tail(&mut Capture::default(), &mut stderr);
        let how = self.exit_description();
        let text = stderr.text();
        let text = text.trim_end();
        if text.trim().is_empty() {
            format!("the kernel exited during start-up{how}")
        } else {
            format!("the kernel exited during start-up{how}:\n{text}")
        }
    }

    /// After a death, picks up output still in the pipes (briefly: orphans may hold them open).
    fn collect_tail(&mut self, stdout: &mut Capture, stderr: &mut Capture) {
        let end = Instant::now() + Duration::from_millis(300);
        let mut open = (true, true);
        while open != (false, false) {
            match self
                .events
                .recv_timeout(end.saturating_duration_since(Instant::now()))
            {
                Ok(Event::Output(Stream::Stdout, b)) => stdout.push(&b),
                Ok(Event::Output(Stream::Stderr, b)) => stderr.push(&b),
                Ok(Event::Truncated(Stream::Stdout)) => stdout.truncated = true,
                Ok(Event::Truncated(Stream::Stderr)) => stderr.truncated = true,
                Ok(Event::OutputClosed(Stream::Stdout)) => open.0 = false,
                Ok(Event::OutputClosed(Stream::Stderr)) => open.1 = false,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }

    fn died(&mut self, run: &mut CellRun) -> CellEnd {
        self.collect_tail(&mut run.stdout, &mut run.stderr);
        CellEnd::Died(format!(
            "The Python kernel died{}.",
            self.exit_description()
        ))
    }

    /// How the process ended (e.g. ` (killed by signal 9, SIGKILL)`); kills what is left of it.
    fn exit_description(&mut self) -> String {
        // The frame stream can close a moment before the process is reapable.
        let deadline = Instant::now() + Duration::from_millis(500);
        while self.reap().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let how = self.reap().map(describe_exit).unwrap_or_default();
        self.kill();
        how
    }

    fn send_line(&self, line: &str) -> bool {
        send_line(&self.stdin, line)
    }

    /// Kills the kernel's process group and its `%%bash` groups, and reaps it.
    pub fn kill(&mut self) {
        for pgid in self.child_groups.drain(..) {
            let _ = spawn::signal_group(pgid, libc::SIGKILL);
        }
        let _ = spawn::signal_group(self.pid, libc::SIGKILL);
        if self.exited.is_none() {
            self.exited = match &mut self.proc {
                Proc::Child(child) => {
                    let _ = child.kill();
                    child.wait().ok()
                }
                Proc::Forked(z) => {
                    let _ = spawn::signal_process(self.pid, libc::SIGKILL);
                    z.wait_exit(self.pid, zygote::EXIT_REPORT_TIMEOUT)
                }
            };
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Roughly how many bytes a display bundle holds (its strings, plus a little per value).
fn payload_bytes(data: &Map<String, Value>) -> usize {
    fn size(v: &Value) -> usize {
        match v {
            Value::String(s) => s.len() + 8,
            Value::Array(a) => a.iter().map(size).sum::<usize>() + 8,
            Value::Object(o) => o.iter().map(|(k, v)| k.len() + size(v)).sum::<usize>() + 8,
            _ => 8,
        }
    }
    data.iter().map(|(k, v)| k.len() + size(v)).sum()
}

fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!(" (exit code {code})"),
        (None, Some(sig)) => format!(" (killed by signal {sig}{})", signal_name(sig)),
        _ => String::new(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => ", SIGKILL",
        libc::SIGTERM => ", SIGTERM",
        libc::SIGSEGV => ", SIGSEGV",
        libc::SIGABRT => ", SIGABRT",
        libc::SIGINT => ", SIGINT",
        _ => "",
    }
}

fn send_line(stdin: &Mutex<PipeWriter>, line: &str) -> bool {
    let Ok(mut w) = stdin.lock() else {
        return false;
    };
    w.write_all(line.as_bytes())
        .and_then(|_| w.write_all(b"\n"))
        .and_then(|_| w.flush())
        .is_ok()
}

/// A fresh private directory holding the driver and its modules (a kernel's or the zygote's).
pub(crate) fn write_driver_dir() -> Result<PathBuf, String> {
    let dir = private_dir().map_err(|e| format!("cannot create the kernel directory: {e}"))?;
    for (name, text) in [
        ("driver.py", DRIVER_PY),
        ("rlm.py", RLM_PY),
        ("harness.py", HARNESS_PY),
        ("state.py", STATE_PY),
    ] {
        if let Err(e) = write_private(&dir.join(name), text) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("cannot write the kernel driver: {e}"));
        }
    }
    Ok(dir)
}

/// A fresh `0700` directory under the OS temp dir.
fn private_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "prime-agent-kernel-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(text.as_bytes())
}

/// The running cell's source and its span's context.
type CellSource = (String, Option<crate::base::telemetry::SpanContext>);

/// Reads frames from fd 3; answers host requests on their own threads, forwards the rest.
fn spawn_frame_reader(
    frames: std::io::PipeReader,
    tx: Sender<Event>,
    handler: Arc<dyn HostHandler>,
    stdin: Arc<Mutex<PipeWriter>>,
    cell_source: Arc<Mutex<CellSource>>,
) -> std::io::Result<()> {
    thread::Builder::new()
        .name("kernel-frames".to_owned())
        .spawn(move || {
            let mut reader = BufReader::new(frames);
            let mut line = Vec::new();
            loop {
                // Bounded like the client's stdin: a runaway frame (a display of a huge
                // object) is skipped as it streams instead of growing memory.
                match read_line_limited(&mut reader, &mut line, MAX_FRAME_BYTES) {
                    Ok(LineRead::Line) => {}
                    Ok(LineRead::TooLong(len)) => {
                        log::warn!(
                            "kernel sent a frame of at least {len} bytes (limit {MAX_FRAME_BYTES}); dropped"
                        );
                        continue;
                    }
                    Ok(LineRead::Eof) | Err(_) => break,
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match KernelFrame::parse(&line) {
                    Ok(KernelFrame::HostRequest { rid, kind, payload }) => {
                        let (source, span) =
                            cell_source.lock().map(|s| s.clone()).unwrap_or_default();
                        let handler = handler.clone();
                        let stdin = stdin.clone();
                        let spawned = thread::Builder::new()
                            .name("kernel-host-request".to_owned())
                            .spawn(move || {
                                // A subagent it admits, an MCP call it makes, is the cell's.
                                let _span = crate::base::telemetry::enter(span);
                                let reply = answer_guarded(&*handler, rid, &kind, payload, &source);
                                // A dead kernel cannot take the reply; nothing else to do.
                                send_line(&stdin, &wire::reply_frame(rid, &reply));
                            });
                        if let Err(e) = spawned {
                            log::warn!("cannot answer host request {rid}: {e}");
                        }
                    }
                    Ok(KernelFrame::Log { level, message }) => match level.as_str() {
                        "warn" => log::warn!("kernel: {message}"),
                        "info" => log::info!("kernel: {message}"),
                        _ => log::debug!("kernel: {message}"),
                    },
                    // A display from outside any cell (a background thread between cells)
                    // has no cell to go to; queueing it would only grow memory.
                    Ok(KernelFrame::Display { id: None, .. }) => {}
                    Ok(frame) => {
                        if tx.send(Event::Frame(frame)).is_err() {
                            break;
                        }
                    }
                    Err(e) => log::warn!(
                        "kernel sent a malformed frame ({e}): {}",
                        String::from_utf8_lossy(&line)
                    ),
                }
            }
            let _ = tx.send(Event::FramesClosed);
        })
        .map(|_| ())
}

/// `host::answer`, with a panic in the handler turned into an error reply: Python waits for a
/// reply to every request, so a request must never end without one.
fn answer_guarded(
    handler: &dyn HostHandler,
    rid: u64,
    kind: &Value,
    payload: Value,
    cell_source: &str,
) -> Result<Value, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        host::answer(handler, kind, payload, cell_source)
    }))
    .unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "unknown panic".to_owned());
        let kind = kind.as_str().unwrap_or("?");
        log::error!("kernel host request {rid} ({kind}) panicked: {why}");
        Err(format!(
            "host request \"{kind}\" failed: the agent hit an internal error ({why})"
        ))
    })
}

/// Reads the user code's stdout or stderr, splitting out end-of-cell markers, and forwards
/// only what a cell can use, so memory stays bounded whatever the kernel prints:
///
/// - bytes that arrive while no cell runs (`wanted` is `NO_CELL`), or after the running cell's
///   marker on this stream, are dropped. They come from background threads of earlier cells;
///   no tool call asked for them, and a capped tail shown at the next cell would be stale
///   noise from code the model may have forgotten, attributed to a cell that did not print
///   it. Dropping also matches what the host always did with them (they were discarded when
///   the next cell started), only without queueing them first.
/// - a running cell gets at most `CAPTURE_LIMIT` bytes per stream (what `Capture` keeps);
///   beyond that a single `Truncated` event says bytes were dropped.
fn spawn_output_reader(
    mut pipe: impl Read + Send + 'static,
    stream: Stream,
    token: &str,
    tx: Sender<Event>,
    wanted: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let mut scanner = MarkerScanner::new(token);
    let name = match stream {
        Stream::Stdout => "kernel-stdout",
        Stream::Stderr => "kernel-stderr",
    };
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut gate = OutputGate::default();
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for chunk in scanner.push(&buf[..n]) {
                    let cell = wanted.load(Ordering::SeqCst);
                    let Some(ev) = gate.admit(cell, stream, chunk) else {
                        continue;
                    };
                    if tx.send(ev).is_err() {
                        return;
                    }
                }
            }
            let rest = scanner.finish();
            if let Some(ev) = gate.admit(wanted.load(Ordering::SeqCst), stream, Chunk::Output(rest))
            {
                let _ = tx.send(ev);
            }
            let _ = tx.send(Event::OutputClosed(stream));
        })
        .map(|_| ())
}

/// One output stream's forwarding decision (see `spawn_output_reader`).
#[derive(Default)]
struct OutputGate {
    /// The cell the counts below are for.
    cell: u64,
    /// Bytes forwarded for `cell`.
    sent: usize,
    /// `cell`'s marker was seen: its output on this stream is complete.
    ended: bool,
    /// `Truncated` was sent for `cell`.
    truncated: bool,
    /// Bytes dropped since the last log line (between cells).
    dropped: u64,
}

impl OutputGate {
    fn admit(&mut self, wanted: u64, stream: Stream, chunk: Chunk) -> Option<Event> {
        if wanted != self.cell {
            if self.dropped > 0 {
                log::debug!(
                    "kernel {stream:?}: dropped {} bytes printed between cells",
                    self.dropped
                );
            }
            *self = OutputGate {
                cell: wanted,
                ..OutputGate::default()
            };
        }
        match chunk {
            Chunk::Marker(id) => {
                self.ended |= id == self.cell;
                Some(Event::Marker(stream, id))
            }
            Chunk::Output(bytes) if bytes.is_empty() => None,
            Chunk::Output(bytes) if wanted == NO_CELL || self.ended => {
                self.dropped += bytes.len() as u64;
                None
            }
            // The chunk that crosses the limit goes whole (at most one read, 64 KiB, over it):
            // `Capture::push` keeps what fits and marks the capture truncated.
            Chunk::Output(bytes) if self.sent < CAPTURE_LIMIT => {
                self.sent += bytes.len();
                Some(Event::Output(stream, bytes))
            }
            Chunk::Output(_) if self.truncated => None,
            Chunk::Output(_) => {
                self.truncated = true;
                Some(Event::Truncated(stream))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(n: usize) -> Chunk {
        Chunk::Output(vec![b'x'; n])
    }

    fn forwarded(ev: Option<Event>) -> Option<usize> {
        match ev {
            Some(Event::Output(_, b)) => Some(b.len()),
            Some(Event::Truncated(_)) => Some(0),
            _ => None,
        }
    }

    #[test]
    fn output_between_cells_is_dropped() {
        let mut gate = OutputGate::default();
        assert_eq!(
            forwarded(gate.admit(START_UP, Stream::Stderr, out(10))),
            Some(10)
        );
        assert_eq!(
            forwarded(gate.admit(NO_CELL, Stream::Stderr, out(10))),
            None
        );
        assert_eq!(forwarded(gate.admit(1, Stream::Stderr, out(3))), Some(3));
        assert!(matches!(
            gate.admit(1, Stream::Stderr, Chunk::Marker(1)),
            Some(Event::Marker(Stream::Stderr, 1))
        ));
        // After the cell's marker, its output on this stream is complete.
        assert_eq!(forwarded(gate.admit(1, Stream::Stderr, out(3))), None);
        assert_eq!(forwarded(gate.admit(2, Stream::Stderr, out(3))), Some(3));
    }

    #[test]
    fn a_cell_gets_at_most_the_capture_limit_then_one_truncation_notice() {
        let mut gate = OutputGate::default();
        let chunk = 64 * 1024;
        let mut bytes = 0;
        let mut notices = 0;
        for _ in 0..100 {
            match gate.admit(7, Stream::Stdout, out(chunk)) {
                Some(Event::Output(_, b)) => bytes += b.len(),
                Some(Event::Truncated(_)) => notices += 1,
                _ => {}
            }
        }
        assert_eq!(bytes, CAPTURE_LIMIT);
        assert_eq!(notices, 1);
        // The next cell starts afresh.
        assert_eq!(forwarded(gate.admit(8, Stream::Stdout, out(5))), Some(5));
    }

    fn python_kernel(handler: Arc<dyn HostHandler>) -> Kernel {
        let cfg = KernelConfig {
            python: find_python().expect("the kernel tests need python3"),
            cwd: std::env::temp_dir(),
            env: Vec::new(),
            sandbox: None,
        };
        Kernel::start(&cfg, handler, &AbortFlag::new()).unwrap()
    }

    #[test]
    fn a_cell_keeps_displays_up_to_the_limit_and_counts_the_rest() {
        let mut kernel = python_kernel(Arc::new(DefaultHostHandler::default()));
        let abort = AbortFlag::new();
        let run = kernel.execute(
            "for _ in range(70):\n    rlm.emit({'image/png': 'A' * (1024 * 1024)})",
            &abort,
            &mut |_, _| {},
        );
        assert_eq!(run.end, CellEnd::Done { ok: true }, "{:?}", run.error);
        assert_eq!(run.displays.len(), 63);
        assert_eq!(run.displays_dropped, 7);
    }

    /// The kernel imports IPython's core without its package `__init__` (no terminal front
    /// end) and makes the completer (with IPython 8, jedi) on first use; both still work when
    /// a cell asks. (Also run with `PRIME_AGENT_KERNEL_PYTHON` at an IPython 9 environment.)
    #[test]
    fn ipython_s_front_end_and_completer_load_when_a_cell_asks_for_them() {
        let mut kernel = python_kernel(Arc::new(DefaultHostHandler::default()));
        if kernel.engine() != "ipython" {
            return; // IPython is not installed: the plain engine imports none of it.
        }
        let abort = AbortFlag::new();
        let run = kernel.execute(
            "import sys\n\
             before = [m for m in ('prompt_toolkit', 'jedi', 'IPython.terminal') if m in sys.modules]\n\
             import IPython\n\
             from IPython import display as d\n\
             from IPython.display import Image\n\
             print(before, d.__name__, IPython.__version__ == IPython.core.release.version,\n\
             \x20     IPython.get_ipython() is get_ipython(), type(get_ipython().Completer).__name__,\n\
             \x20     callable(get_ipython().Completer.complete), callable(IPython.embed))",
            &abort,
            &mut |_, _| {},
        );
        assert_eq!(run.end, CellEnd::Done { ok: true }, "{:?}", run.error);
        assert_eq!(
            run.stdout.text(),
            "[] IPython.display True True IPCompleter True True\n"
        );
    }

    /// Panics on `test.panic`, echoes the type of anything else.
    struct Panicky;

    impl HostHandler for Panicky {
        fn handle(&self, kind: &str, _payload: Value) -> Result<Value, String> {
            if kind == "test.panic" {
                panic!("handler exploded");
            }
            Ok(crate::base::json::json!({ "kind": kind }))
        }
    }

    #[test]
    fn a_panicking_host_handler_is_an_error_in_python_and_the_kernel_goes_on() {
        let abort = AbortFlag::new();
        let mut kernel = python_kernel(Arc::new(Panicky));
        // The timeout only bounds the wait if no reply ever comes (the bug).
        let run = kernel.execute(
            "try:\n    rlm.host_request_sync('test.panic', {}, timeout=30)\nexcept RuntimeError as e:\n    print('error:', e)",
            &abort,
            &mut |_, _| {},
        );
        assert_eq!(run.end, CellEnd::Done { ok: true }, "{:?}", run.error);
        assert_eq!(
            run.stdout.text(),
            "error: host request \"test.panic\" failed: the agent hit an internal error (handler exploded)\n"
        );
        let run = kernel.execute(
            "rlm.host_request_sync('test.echo', {}, timeout=30)['kind']",
            &abort,
            &mut |_, _| {},
        );
        assert_eq!(run.end, CellEnd::Done { ok: true }, "{:?}", run.error);
        assert_eq!(run.result.as_deref(), Some("'test.echo'"));
    }
}
