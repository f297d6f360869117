//! The stdio transport: an `acp-reader` thread that turns stdin lines into classified
//! messages, and an `acp-writer` thread that alone owns the protocol stream.
//!
//! At start-up the real stdout is duplicated into a private file descriptor for protocol
//! frames, and fd 1 is pointed at stderr. A stray write from any code, crate or child process
//! then lands on stderr and can never corrupt the protocol stream.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::protocol::outbox::{outbox, Drain, Outbox};

use crate::base::abort::AbortFlag;
use crate::base::lines::{read_line_limited, LineRead};
use crate::protocol::rpc::{self, Incoming, RequestId, RpcError};

/// Lines up to this size are accepted (image prompts are large); longer ones are refused.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// What the reader thread delivers to the main loop.
#[derive(Debug)]
pub enum Inbound {
    Message(Incoming),
    /// Stdin reached EOF or failed: the client is gone.
    Closed,
}

/// Both ends of a client connection as the main loop sees them.
pub struct Connection {
    /// Where frames for the writer go (see `outbox`: no allocation per frame).
    pub outbox: Outbox,
    pub receiver: Receiver<Inbound>,
    /// Bytes handed to the writer and not yet written: turn workers pause on it.
    pub backlog: Backlog,
    /// The backlog a session's turns pause on when each session has its own client (the
    /// remote transport); `None`: `backlog`.
    pub(crate) turn_backlogs: Option<TurnBacklogs>,
    /// Whether `session/resume` of a session open in this process re-attaches it (the remote
    /// transport, where a new connection takes over a session) instead of refusing.
    pub(crate) reattach: bool,
}

/// A session's own backlog, by session id.
pub(crate) type TurnBacklogs = Arc<dyn Fn(&str) -> Backlog + Send + Sync>;

/// Above this many queued bytes a producer that can wait (a turn worker) pauses.
pub(crate) const BACKLOG_HIGH: usize = 4 * 1024 * 1024;
/// Paused producers resume once the writer has brought the backlog down to this.
pub(crate) const BACKLOG_LOW: usize = 1024 * 1024;

/// Back-pressure for the writer queue without blocking the main loop.
///
/// The main loop never waits: it counts every frame it queues (`add`) and sends it on an
/// unbounded channel. The writer counts each frame it has written (`written`). Turn workers,
/// which produce nearly all the volume (one frame per streamed token), call `wait_until_drained`
/// before each event; while a client is not reading, a worker parks there once the backlog
/// passes `BACKLOG_HIGH`, so its provider stream stops being read too and memory stays bounded.
/// Nothing is dropped, and an abort or a dead writer releases the wait at once.
#[derive(Clone, Default)]
pub struct Backlog(Arc<BacklogInner>);

#[derive(Default)]
struct BacklogInner {
    bytes: AtomicUsize,
    /// The writer is gone: nothing will ever drain, so nobody may wait.
    closed: AtomicBool,
    lock: Mutex<()>,
    drained: Condvar,
    /// A backlog further down the line that a waiter also waits for (a remote session's own
    /// queue, then the loop's outbox to the router).
    parent: Option<Backlog>,
}

impl Backlog {
    /// A backlog whose waiters also wait for `parent`.
    pub(crate) fn chained(parent: Backlog) -> Backlog {
        Backlog(Arc::new(BacklogInner {
            parent: Some(parent),
            ..BacklogInner::default()
        }))
    }

    /// Counts a frame about to be queued for the writer.
    pub fn add(&self, bytes: usize) {
        self.0.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Counts bytes written (or dropped with their stream).
    pub(crate) fn written(&self, bytes: usize) {
        let before = self.0.bytes.fetch_sub(bytes, Ordering::Relaxed);
        // A frame must be counted before the writer can take it: a count that wrapped below
        // zero would park turns for good (debug builds, so the tests catch the order).
        debug_assert!(before >= bytes, "{bytes} bytes written, {before} queued");
        if before > BACKLOG_LOW && before - bytes <= BACKLOG_LOW {
            self.wake();
        }
    }

    fn close(&self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        // Taking the lock orders this wake-up after a waiter's check, so none is lost.
        let _guard = self.0.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.0.drained.notify_all();
    }

    fn must_wait(&self, abort: &AbortFlag) -> bool {
        self.0.bytes.load(Ordering::Relaxed) > BACKLOG_LOW
            && !self.0.closed.load(Ordering::SeqCst)
            && !abort.is_aborted()
    }

    /// Returns at once unless more than `BACKLOG_HIGH` bytes are queued; then waits until the
    /// writer is down to `BACKLOG_LOW`, the writer is gone, or `abort` is set. Returns whether
    /// it waited.
    pub fn wait_until_drained(&self, abort: &AbortFlag) -> bool {
        let waited = self
            .0
            .parent
            .as_ref()
            .is_some_and(|p| p.wait_until_drained(abort));
        if self.0.bytes.load(Ordering::Relaxed) <= BACKLOG_HIGH {
            return waited;
        }
        log::debug!(
            "writer backlog at {} bytes: pausing the turn",
            self.queued()
        );
        let me = self.clone();
        let _hook = abort.on_abort(move || me.wake());
        let mut guard = self.0.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.must_wait(abort) {
            // The timeout only bounds the cost of a wake-up this code failed to foresee.
            guard = match self.0.drained.wait_timeout(guard, Duration::from_secs(1)) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }
}

/// The two IO threads; join them after the main loop has dropped its `Connection`.
pub struct IoThreads {
    reader: JoinHandle<()>,
    writer: JoinHandle<io::Result<()>>,
}

impl IoThreads {
    /// Waits for the writer to drain. The reader is joined only if it has already finished:
    /// on a signal it may be blocked in `read(0)` forever, and the process is about to exit.
    pub fn join(self) -> io::Result<()> {
        let result = self
            .writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("writer panicked")));
        if self.reader.is_finished() {
            let _ = self.reader.join();
        }
        result
    }
}

/// Takes over the process's stdio and starts the reader and writer threads.
pub(crate) fn stdio() -> io::Result<(Connection, IoThreads)> {
    let protocol_out = take_over_stdout()?;
    let stdin = io::stdin();
    Ok(spawn(stdin, protocol_out, MAX_LINE_BYTES))
}

/// Starts the IO threads over any byte source and sink (used by `stdio` and by tests).
pub fn spawn<R, W>(input: R, output: W, max_line: usize) -> (Connection, IoThreads)
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let (in_tx, in_rx) = unbounded();
    let (out, drain) = outbox();
    let backlog = Backlog::default();
    let writer_backlog = backlog.clone();
    let reader = thread::Builder::new()
        .name("acp-reader".to_owned())
        .spawn(move || read_loop(input, max_line, &in_tx))
        .expect("spawn acp-reader");
    let writer = thread::Builder::new()
        .name("acp-writer".to_owned())
        .spawn(move || {
            let mut drain = drain;
            let result = write_loop(output, &mut drain, &writer_backlog);
            // A writer that failed (the client closed stdout) will never drain the queue.
            drain.fail();
            writer_backlog.close();
            result
        })
        .expect("spawn acp-writer");
    (
        Connection {
            outbox: out,
            backlog,
            receiver: in_rx,
            turn_backlogs: None,
            reattach: false,
        },
        IoThreads { reader, writer },
    )
}

/// Duplicates fd 1 for protocol frames and points fd 1 at stderr.
pub(crate) fn take_over_stdout() -> io::Result<File> {
    let private = io::stdout().as_fd().try_clone_to_owned()?;
    // SAFETY: dup2 on two descriptors this process owns; fd 1 is replaced atomically, and
    // `private` keeps the original stdout open for protocol frames.
    #[allow(unsafe_code)] // The only way to retarget fd 1; std has no safe dup2.
    let rc = unsafe { libc::dup2(2, 1) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(File::from(private))
}

/// What the debug log shows of an incoming line: the line itself, except that credentials a
/// client hands over for MCP servers (`env` and `headers` values, user info in `url`) are
/// replaced by `<redacted>`, so `Authorization` headers and tokens never reach the log.
pub(crate) fn redacted_for_log(line: &[u8]) -> std::borrow::Cow<'_, str> {
    let text = String::from_utf8_lossy(line);
    if !text.contains("\"mcpServers\"") {
        return text;
    }
    let Ok(mut frame) = serde_json::from_str::<serde_json::Value>(&text) else {
        return "<an unparsable line naming mcpServers, not logged>".into();
    };
    let redacted = serde_json::Value::from("<redacted>");
    if let Some(servers) = frame
        .pointer_mut("/params/mcpServers")
        .and_then(|v| v.as_array_mut())
    {
        for server in servers {
            for field in ["env", "headers"] {
                match server.get_mut(field) {
                    Some(serde_json::Value::Array(items)) => {
                        for item in items.iter_mut().filter_map(|i| i.as_object_mut()) {
                            if item.contains_key("value") {
                                item.insert("value".into(), redacted.clone());
                            }
                        }
                    }
                    Some(serde_json::Value::Object(map)) => {
                        for v in map.values_mut() {
                            *v = redacted.clone();
                        }
                    }
                    _ => {}
                }
            }
            if let Some(url) = server.get_mut("url") {
                if let Some(u) = url.as_str().filter(|u| u.contains('@')) {
                    *url = match u.split_once("://") {
                        Some((scheme, rest)) => {
                            let (authority, path) =
                                rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
                            match authority.rsplit_once('@') {
                                Some((_, host)) => format!("{scheme}://<redacted>@{host}{path}"),
                                None => u.to_owned(),
                            }
                        }
                        None => "<redacted>".to_owned(),
                    }
                    .into();
                }
            }
        }
    }
    frame.to_string().into()
}

fn read_loop<R: Read>(input: R, max_line: usize, tx: &Sender<Inbound>) {
    let mut reader = BufReader::with_capacity(256 * 1024, input);
    let mut line = Vec::new();
    loop {
        match read_line_limited(&mut reader, &mut line, max_line) {
            Ok(LineRead::Eof) => break,
            Ok(LineRead::Line) => {
                log::debug!("< {}", redacted_for_log(&line));
                if let Some(msg) = rpc::classify_line(&line) {
                    if tx.send(Inbound::Message(msg)).is_err() {
                        return;
                    }
                }
                // Release the memory of a huge line instead of keeping its capacity around.
                if line.capacity() > 1024 * 1024 {
                    line = Vec::new();
                }
            }
            Ok(LineRead::TooLong(len)) => {
                log::warn!("dropped an input line of at least {len} bytes (limit {max_line})");
                let error = RpcError::invalid_request(&format!(
                    "message exceeds the {max_line}-byte line limit and was skipped"
                ));
                if tx
                    .send(Inbound::Message(Incoming::Invalid {
                        id: RequestId::null(),
                        error,
                    }))
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                log::warn!("stdin read failed: {e}");
                break;
            }
        }
    }
    let _ = tx.send(Inbound::Closed);
}

/// Writes every batch the outbox hands out with one `write_all`: ordering is the outbox's, and a
/// burst of deltas costs one syscall instead of one per frame.
fn write_loop<W: Write>(mut output: W, drain: &mut Drain, backlog: &Backlog) -> io::Result<()> {
    while let Some(batch) = drain.next_batch(SPIN) {
        // In pieces the size of a pipe's buffer, counted as they go: a turn paused on the
        // backlog resumes while the rest of a large batch is still being written.
        for piece in batch.chunks(WRITE_PIECE) {
            output.write_all(piece)?;
            backlog.written(piece.len());
        }
        output.flush()?;
    }
    output.flush()
}

/// While frames stream, the next one usually comes within tens of microseconds: the writer polls
/// this long before parking, so a delta does not pay a futex wake-up on this hop.
const SPIN: Duration = Duration::from_micros(50);

/// The usual pipe buffer on Linux.
const WRITE_PIECE: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_credentials_are_redacted_in_the_log() {
        let line = br#"{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[
            {"name":"a","type":"http","url":"https://u:pw-secret@x.example/mcp","headers":[{"name":"Authorization","value":"Bearer hdr-secret"}]},
            {"name":"b","command":"node","env":[{"name":"TOKEN","value":"env-secret"}]},
            {"name":"c","command":"node","env":{"TOKEN":"obj-secret"}}]}}"#;
        let logged = redacted_for_log(line);
        for secret in ["pw-secret", "hdr-secret", "env-secret", "obj-secret"] {
            assert!(!logged.contains(secret), "{logged}");
        }
        assert!(
            logged.contains("https://<redacted>@x.example/mcp"),
            "{logged}"
        );
        assert!(logged.contains("Authorization") && logged.contains("TOKEN"));
        let plain = br#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#;
        assert_eq!(redacted_for_log(plain), String::from_utf8_lossy(plain));
        let cut = br#"{"method":"session/new","params":{"mcpServers":[{"env":[{"value":"s"#;
        assert!(!redacted_for_log(cut).contains("\"s"));
    }
}
