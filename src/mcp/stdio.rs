//! The stdio transport: the server is a child in its own process group (`spawn::spawn_group`),
//! in the session's cwd, with a scrubbed environment plus the client's `env`. One NDJSON line
//! per message each way: a writer thread owns the server's stdin and takes lines from a
//! bounded queue (so a server that stops reading blocks that thread, never a turn or the main
//! loop), a reader thread routes answers by id and queues replies to the server's pings on the
//! same writer, another drains stderr to the log at debug. Closing kills the whole group.

use std::io::{BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender, TrySendError};
use serde_json::Value;

use super::client::{McpError, Router, Sent, Transport};
use crate::base::abort::AbortFlag;
use crate::base::lines::{read_line_limited, LineRead};
use crate::{base::reaper, base::spawn};

/// The variables a server inherits from us (§1.17); everything else comes from the client.
const KEPT_ENV: &[&str] = &["HOME", "PATH", "TMPDIR", "TEMP", "TMP"];

/// The longest line we read from a server (a tool result with images can be large).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// Messages queued for a server's writer thread at most; a server that stops reading holds
/// the writer, then fills this, then makes `send` wait (bounded, abortable).
const QUEUE: usize = 16;
/// How long the reaper waits for the IO threads once the group is killed.
const THREADS_GRACE: Duration = Duration::from_millis(200);

/// No lock here is ever held across IO: the server's stdin belongs to the writer thread, and
/// `close` only kills the group and hands what is left to the reaper.
pub(crate) struct StdioTransport {
    name: String,
    /// Lines for the writer thread (`mcp-<name>-in`), the only code that writes to stdin.
    lines: Sender<Vec<u8>>,
    /// Set by `close`: a `send` waiting for room gives up.
    closing: AbortFlag,
    /// Dropped by `close`: the idle writer stops (a busy one fails once the group is dead).
    stop: Mutex<Option<Sender<()>>>,
    child: Mutex<Option<Child>>,
    pgid: i32,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What happens when the server's stdout ends (the server exited or was killed).
pub(crate) type OnExit = Box<dyn FnOnce(String) + Send>;

impl StdioTransport {
    pub(crate) fn spawn(
        name: &str,
        command: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: &Path,
        router: Arc<Router>,
        on_exit: OnExit,
    ) -> Result<StdioTransport, McpError> {
        let mut cmd = server_command(command, args, env, cwd);
        let (mut child, pgid) = spawn::spawn_group(&mut cmd, None, None)
            .map_err(|e| McpError::Transport(format!("cannot start {command}: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let (lines, queued) = bounded::<Vec<u8>>(QUEUE);
        let (stop, stopped) = bounded::<()>(0);
        let transport = StdioTransport {
            name: name.to_owned(),
            lines: lines.clone(),
            closing: AbortFlag::new(),
            stop: Mutex::new(Some(stop)),
            child: Mutex::new(Some(child)),
            pgid,
            threads: Mutex::default(),
        };
        let server = name.to_owned();
        let writer = std::thread::Builder::new()
            .name(format!("mcp-{name}-in"))
            .spawn(move || write_lines(stdin, queued, stopped, &server));
        transport.keep(writer)?;
        // The reader answers the server's own requests (`ping`) through the same writer.
        let server = name.to_owned();
        let reader = std::thread::Builder::new()
            .name(format!("mcp-{name}-out"))
            .spawn(move || read_lines(stdout, router, lines, &server, on_exit));
        transport.keep(reader)?;
        let server = name.to_owned();
        let drain = std::thread::Builder::new()
            .name(format!("mcp-{name}-err"))
            .spawn(move || drain_stderr(stderr, &server));
        transport.keep(drain)?;
        Ok(transport)
    }

    /// Keeps a thread just started to join at `close`; one that could not start closes the
    /// transport (killing the server) and is the spawn's error.
    fn keep(&self, thread: std::io::Result<JoinHandle<()>>) -> Result<(), McpError> {
        match thread {
            Ok(t) => {
                self.threads
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(t);
                Ok(())
            }
            Err(e) => {
                self.close();
                Err(McpError::Transport(format!("cannot start a thread: {e}")))
            }
        }
    }
}

/// The server's command: its own environment only (`KEPT_ENV` and what the config gives),
/// all three pipes.
fn server_command(command: &str, args: &[String], env: &[(String, String)], cwd: &Path) -> Command {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for key in KEPT_ENV {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The `mcp-<name>-in` thread: writes each queued line to the server's stdin. Ends at `close`
/// or when the pipe breaks (the group was killed).
fn write_lines(
    mut stdin: std::process::ChildStdin,
    queued: Receiver<Vec<u8>>,
    stopped: Receiver<()>,
    server: &str,
) {
    loop {
        let line = select! {
            recv(queued) -> line => match line {
                Ok(line) => line,
                Err(_) => break,
            },
            recv(stopped) -> _ => break,
        };
        if let Err(e) = stdin.write_all(&line).and_then(|()| stdin.flush()) {
            log::debug!("MCP server {server}: writing failed: {e}");
            break;
        }
    }
}

/// The `mcp-<name>-out` thread: delivers each line from the server's stdout to the router,
/// and queues its answers to the server's own requests without waiting for room (a server
/// that does not read gets no pong). At EOF the router and `on_exit` hear why.
fn read_lines(
    stdout: std::process::ChildStdout,
    router: Arc<Router>,
    replies: Sender<Vec<u8>>,
    server: &str,
    on_exit: OnExit,
) {
    let mut r = BufReader::new(stdout);
    let mut buf = Vec::new();
    let why = loop {
        match read_line_limited(&mut r, &mut buf, MAX_LINE) {
            Ok(LineRead::Line) => {}
            Ok(LineRead::Eof) => break "the server exited".to_owned(),
            Ok(LineRead::TooLong(n)) => {
                log::warn!("MCP server {server}: skipped a {n}-byte line");
                continue;
            }
            Err(e) => break format!("reading from the server failed: {e}"),
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&buf) else {
            log::debug!("MCP server {server}: a line that is not JSON on stdout");
            continue;
        };
        if let Some(answer) = router.deliver(msg) {
            if replies.try_send(line_of(&answer)).is_err() {
                log::debug!("MCP server {server}: a reply dropped (queue full)");
            }
        }
    };
    router.close(&why);
    on_exit(why);
}

/// The `mcp-<name>-err` thread: the server's stderr, line by line, to the debug log.
fn drain_stderr(stderr: std::process::ChildStderr, server: &str) {
    let mut r = BufReader::new(stderr);
    let mut buf = Vec::new();
    while let Ok(LineRead::Line | LineRead::TooLong(_)) =
        read_line_limited(&mut r, &mut buf, 64 * 1024)
    {
        log::debug!(
            "MCP server {server} stderr: {}",
            String::from_utf8_lossy(&buf)
        );
    }
}

fn line_of(msg: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(msg).expect("a JSON value always serialises");
    bytes.push(b'\n');
    bytes
}

impl Transport for StdioTransport {
    /// Waits until the line is queued for the writer, the caller is aborted, the transport
    /// closes, or `timeout` passes: never on the pipe itself.
    fn send(&self, msg: Value, id: Option<u64>, abort: &AbortFlag, timeout: Duration) -> Sent {
        let line = line_of(&msg);
        let line = match self.lines.try_send(line) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(_)) => {
                return Err(McpError::Closed("the server is gone".into()))
            }
            // Nobody waits for a notification or a reply, and a server that is not reading
            // would not read it either: it is dropped rather than waited for.
            Err(TrySendError::Full(_)) if id.is_none() => {
                return Err(McpError::Transport("the server is not reading".into()))
            }
            Err(TrySendError::Full(line)) => line,
        };
        // The queue is full: the server is not reading. Wait for room, but not on the pipe.
        let (woken, wake) = bounded::<()>(2);
        let w = woken.clone();
        let _abort = abort.on_abort(move || {
            let _ = w.try_send(());
        });
        let _closing = self.closing.on_abort(move || {
            let _ = woken.try_send(());
        });
        select! {
            send(self.lines, line) -> sent => sent.map_err(|_| McpError::Closed("the server is gone".into())),
            recv(wake) -> _ => Err(if self.closing.is_aborted() {
                McpError::Closed("the connection is closed".into())
            } else {
                McpError::Aborted
            }),
            default(timeout) => Err(McpError::Timeout(timeout)),
        }
    }

    /// Kills the group first (the writer blocked on a full pipe then fails with EPIPE), and
    /// hands the reap and the joins to the reaper: it returns at once and takes no lock that
    /// any IO holds.
    fn close(&self) {
        self.closing.abort();
        let _ = spawn::signal_group(self.pgid, libc::SIGKILL);
        drop(self.stop.lock().unwrap_or_else(|e| e.into_inner()).take());
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        if child.is_none() && threads.is_empty() {
            return;
        }
        let name = self.name.clone();
        reaper::later(move || {
            if let Some(mut child) = child {
                let _ = child.wait();
            }
            // The pipes close with the group; a grandchild that left the group and kept them
            // open must not hold the reaper, so the joins are bounded.
            let deadline = Instant::now() + THREADS_GRACE;
            for t in threads {
                reaper::join_or_leave(t, deadline, &format!("MCP server {name}: an IO thread"));
            }
        });
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}
