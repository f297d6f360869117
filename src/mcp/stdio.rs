//! The stdio transport: the server is a child in its own process group (`spawn::spawn_group`),
//! in the session's cwd, with a scrubbed environment plus the client's `env`. One NDJSON line
//! per message each way; a reader thread routes answers by id, another drains stderr to the
//! log at debug. Closing kills the whole group.

use std::io::{BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{McpError, Router, Transport};
use crate::lines::{read_line_limited, LineRead};
use crate::spawn;

/// The variables a server inherits from us (§1.17); everything else comes from the client.
const KEPT_ENV: &[&str] = &["HOME", "PATH", "TMPDIR", "TEMP", "TMP"];

/// The longest line we read from a server (a tool result with images can be large).
const MAX_LINE: usize = 64 * 1024 * 1024;

pub(crate) struct StdioTransport {
    name: String,
    stdin: Mutex<Option<ChildStdin>>,
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
        let (mut child, pgid) = spawn::spawn_group(&mut cmd, None)
            .map_err(|e| McpError::Transport(format!("cannot start {command}: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let transport = StdioTransport {
            name: name.to_owned(),
            stdin: Mutex::new(Some(stdin)),
            child: Mutex::new(Some(child)),
            pgid,
            threads: Mutex::default(),
        };
        let reader_router = router.clone();
        // The reader answers the server's own requests (`ping`) on this pipe.
        let reply_pipe = transport.stdin_clone();
        let server = name.to_owned();
        let reader = std::thread::Builder::new()
            .name(format!("mcp-{name}-out"))
            .spawn(move || {
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
                    if let Some(answer) = reader_router.deliver(msg) {
                        if let Some(pipe) = &reply_pipe {
                            let _ = write_line(&mut &*pipe, &answer);
                        }
                    }
                };
                reader_router.close(&why);
                on_exit(why);
            })
            .map_err(|e| McpError::Transport(format!("cannot start a thread: {e}")))?;
        let server = name.to_owned();
        let drain = std::thread::Builder::new()
            .name(format!("mcp-{name}-err"))
            .spawn(move || {
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
            })
            .map_err(|e| McpError::Transport(format!("cannot start a thread: {e}")))?;
        transport.threads.lock().unwrap().extend([reader, drain]);
        Ok(transport)
    }

    /// A second handle on the server's stdin for the reader's replies (a dup of the pipe).
    fn stdin_clone(&self) -> Option<std::fs::File> {
        use std::os::fd::AsFd;
        let guard = self.stdin.lock().ok()?;
        let fd = guard.as_ref()?.as_fd().try_clone_to_owned().ok()?;
        Some(std::fs::File::from(fd))
    }
}

fn write_line(w: &mut impl Write, msg: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(msg).expect("a JSON value always serialises");
    bytes.push(b'\n');
    w.write_all(&bytes)?;
    w.flush()
}

impl Transport for StdioTransport {
    fn send(&self, msg: Value, _id: Option<u64>) -> Result<(), McpError> {
        let mut guard = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        let Some(stdin) = guard.as_mut() else {
            return Err(McpError::Closed("the connection is closed".into()));
        };
        write_line(stdin, &msg).map_err(|e| McpError::Closed(format!("the server is gone ({e})")))
    }

    fn close(&self) {
        // Closing stdin first lets a well-behaved server see EOF; the group is killed anyway,
        // so nothing it started outlives the session.
        drop(self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take());
        let _ = spawn::signal_group(self.pgid, libc::SIGKILL);
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.wait();
        }
        // The pipes close with the group; a grandchild that left the group and kept them open
        // must not hold us, so the join is bounded.
        let deadline = Instant::now() + Duration::from_millis(200);
        let threads: Vec<_> =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            if t.thread().id() == std::thread::current().id() {
                continue; // The reader itself, closing after the server exited: it ends next.
            }
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                log::warn!(
                    "MCP server {}: a reader thread outlived the server",
                    self.name
                );
            }
        }
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}
