//! The Streamable HTTP transport: every message is a POST to the server's one endpoint, with
//! the client's headers exactly as given; the answer is `application/json` or a
//! `text/event-stream` that carries it (decoded by `provider::sse`). The `Mcp-Session-Id` the
//! server assigns at `initialize` goes on every later request, with `MCP-Protocol-Version`,
//! and closing DELETEs the session. Header values are never logged: they carry credentials.
//!
//! Each POST runs on its own short thread, so the caller waits on the router, where an abort
//! reaches it at once; the thread ends with its request (bounded by the request timeout).

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{McpError, Router, Sent, Transport};
use crate::base::abort::AbortFlag;
use crate::base::reaper;
use crate::base::telemetry;
use crate::provider::sse::{SseDecoder, SseEvent};

/// A request's whole life on the wire; the caller's own timeout (60 s) fires first.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(75);
/// The DELETE at close: best effort, on its own thread, joined by the reaper.
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes of one JSON answer.
const MAX_BODY: u64 = 64 * 1024 * 1024;

pub(crate) struct HttpTransport {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Inner {
    name: String,
    url: String,
    headers: Vec<(String, String)>,
    agent: ureq::Agent,
    router: Arc<Router>,
    session: Mutex<Option<String>>,
    version: Mutex<Option<&'static str>>,
}

impl HttpTransport {
    pub(crate) fn new(
        name: &str,
        url: &str,
        headers: &[(String, String)],
        router: Arc<Router>,
    ) -> HttpTransport {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .user_agent(format!("prime-agent/{}", crate::VERSION))
            .build();
        HttpTransport {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                url: url.to_owned(),
                headers: headers.to_vec(),
                agent: ureq::Agent::new_with_config(config),
                router,
                session: Mutex::default(),
                version: Mutex::default(),
            }),
            threads: Mutex::default(),
        }
    }

    /// Joins the POST threads that have finished (the rest end with their request).
    fn reap(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *threads)
            .into_iter()
            .partition(|t| t.is_finished());
        for t in done {
            let _ = t.join();
        }
        *threads = running;
        threads
    }
}

impl Inner {
    fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    }

    fn builder<B>(&self, mut b: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        // The span making the call (the tool call's), when tracing or the client's prompt
        // gave one: its `traceparent` replaces a configured one.
        let trace = telemetry::propagation_headers();
        let ours = |name: &str| trace.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        for (k, v) in self.headers.iter().filter(|(k, _)| !ours(k)) {
            b = b.header(k.as_str(), v.as_str());
        }
        for (k, v) in trace {
            b = b.header(k, v);
        }
        if let Some(id) = self
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
        {
            b = b.header("Mcp-Session-Id", id);
        }
        if let Some(v) = *self.version.lock().unwrap_or_else(|e| e.into_inner()) {
            b = b.header("MCP-Protocol-Version", v);
        }
        b
    }

    /// One POST and its answer(s), delivered to the router. Errors fail request `id`.
    fn post(&self, msg: &Value, id: Option<u64>) -> Sent {
        let mut b = self.builder(self.agent.post(&self.url));
        if !self.has_header("content-type") {
            b = b.header("Content-Type", "application/json");
        }
        if !self.has_header("accept") {
            b = b.header("Accept", "application/json, text/event-stream");
        }
        let body = serde_json::to_vec(msg).expect("a JSON value always serialises");
        log::debug!("MCP server {}: POST {}", self.name, self.url);
        let response = b
            .config()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .send(&body[..])
            .map_err(|e| McpError::Transport(format!("HTTP request failed: {e}")))?;
        let status = response.status().as_u16();
        if let Some(sid) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
            if session.is_none() {
                *session = Some(sid.to_owned());
            }
        }
        if status == 404 && self.session.lock().map(|s| s.is_some()).unwrap_or(false) {
            return Err(McpError::Closed(
                "the server ended the MCP session (HTTP 404)".into(),
            ));
        }
        if !(200..300).contains(&status) {
            return Err(McpError::Transport(format!("HTTP status {status}")));
        }
        if id.is_none() || status == 202 {
            return Ok(());
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let mut reader = response.into_body().into_reader();
        if content_type.starts_with("text/event-stream") {
            self.read_events(&mut reader, id)
        } else {
            let mut bytes = Vec::new();
            reader
                .take(MAX_BODY)
                .read_to_end(&mut bytes)
                .map_err(|e| McpError::Transport(format!("reading the answer failed: {e}")))?;
            let value: Value = serde_json::from_slice(&bytes)
                .map_err(|_| McpError::Transport("the answer is not JSON".into()))?;
            // A batch answer is an array of messages.
            match value {
                Value::Array(items) => items.into_iter().for_each(|m| self.deliver(m)),
                m => self.deliver(m),
            }
            Ok(())
        }
    }

    fn deliver(&self, msg: Value) {
        if let Some(answer) = self.router.deliver(msg) {
            // The server asked something (a ping) on this stream: answer with a POST.
            if let Err(e) = self.post(&answer, None) {
                log::debug!("MCP server {}: reply not sent: {e}", self.name);
            }
        }
    }

    /// Reads SSE events until the answer to `id` arrived or the stream ends.
    fn read_events(&self, reader: &mut impl Read, id: Option<u64>) -> Sent {
        let mut sse = SseDecoder::new();
        let mut events: Vec<SseEvent> = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = reader
                .read(&mut buf)
                .map_err(|e| McpError::Transport(format!("the event stream failed: {e}")))?;
            if n == 0 {
                sse.finish(&mut events);
            } else {
                sse.feed(&buf[..n], &mut events);
            }
            if sse.overflowed() {
                return Err(McpError::Transport("an event over the size limit".into()));
            }
            for e in events.drain(..) {
                let Ok(msg) = serde_json::from_str::<Value>(&e.data) else {
                    continue;
                };
                let ours =
                    msg.get("method").is_none() && msg.get("id").and_then(Value::as_u64) == id;
                self.deliver(msg);
                if ours {
                    return Ok(());
                }
            }
            if n == 0 {
                return Err(McpError::Transport(
                    "the event stream ended without an answer".into(),
                ));
            }
        }
    }
}

impl Transport for HttpTransport {
    /// Starts the POST on its own thread and returns: the wait is on the router.
    fn send(&self, msg: Value, id: Option<u64>, _abort: &AbortFlag, _timeout: Duration) -> Sent {
        // The handshake's end must reach the server before the first request after it; it is
        // sent during connect, where nobody waits to cancel.
        if msg["method"] == "notifications/initialized" {
            return self.inner.post(&msg, None);
        }
        let inner = self.inner.clone();
        let span = telemetry::current();
        let t = std::thread::Builder::new()
            .name(format!("mcp-{}-http", self.inner.name))
            .spawn(move || {
                let _span = telemetry::enter(span);
                if let Err(e) = inner.post(&msg, id) {
                    match id {
                        Some(id) => inner.router.fail(id, e),
                        None => log::debug!("MCP server {}: {e}", inner.name),
                    }
                }
            })
            .map_err(|e| McpError::Transport(format!("cannot start a thread: {e}")))?;
        self.reap().push(t);
        Ok(())
    }

    fn set_version(&self, version: &'static str) {
        *self.inner.version.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
    }

    /// Starts the DELETE of the MCP session on its own thread and hands it, with the POSTs
    /// still running, to the reaper; returns at once.
    fn close(&self) {
        let session = self
            .inner
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let mut threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.reap());
        if let Some(sid) = session {
            let inner = self.inner.clone();
            let deleting = std::thread::Builder::new()
                .name(format!("mcp-{}-delete", self.inner.name))
                .spawn(move || inner.delete(&sid));
            match deleting {
                Ok(t) => threads.push(t),
                Err(e) => log::debug!("MCP server {}: no DELETE ({e})", self.inner.name),
            }
        }
        if threads.is_empty() {
            return;
        }
        let name = self.inner.name.clone();
        reaper::later(move || {
            // Running POSTs end with their request (their callers were told already); the
            // DELETE ends by its own timeout.
            let deadline = Instant::now() + DELETE_TIMEOUT + Duration::from_millis(100);
            for t in threads {
                reaper::join_or_leave(t, deadline, &format!("MCP server {name}: a request"));
            }
        });
    }
}

impl Inner {
    /// `DELETE` of the MCP session (best effort, `DELETE_TIMEOUT`).
    fn delete(&self, sid: &str) {
        let mut b = self.agent.delete(&self.url);
        for (k, v) in &self.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        b = b.header("Mcp-Session-Id", sid);
        if let Some(v) = *self.version.lock().unwrap_or_else(|e| e.into_inner()) {
            b = b.header("MCP-Protocol-Version", v);
        }
        match b
            .config()
            .timeout_global(Some(DELETE_TIMEOUT))
            .build()
            .call()
        {
            Ok(r) => log::debug!("MCP server {}: DELETE → {}", self.name, r.status().as_u16()),
            Err(e) => log::debug!("MCP server {}: DELETE failed: {e}", self.name),
        }
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        self.close();
    }
}
