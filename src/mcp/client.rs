//! One MCP connection: JSON-RPC requests routed by id over a transport (stdio or Streamable
//! HTTP), the `initialize` handshake, `tools/list` paging and `tools/call`. Every wait is
//! bounded by a timeout and cut short by the caller's `AbortFlag` (which then tells the server
//! `notifications/cancelled`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::base::json::json;
use crossbeam_channel::{bounded, select, Sender};
use serde_json::Value;

use super::wire::{self, ToolInfo};
use crate::base::abort::AbortFlag;

/// Why an MCP request did not give a result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum McpError {
    /// The caller's turn was cancelled.
    Aborted,
    Timeout(Duration),
    /// The connection is gone (the server exited, the session closed).
    Closed(String),
    /// The server answered with a JSON-RPC error.
    Rpc {
        code: i64,
        message: String,
    },
    /// The transport failed (HTTP status, IO, an unparsable answer).
    Transport(String),
}

impl std::fmt::Display for McpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpError::Aborted => write!(f, "cancelled"),
            McpError::Timeout(d) => write!(f, "no answer within {} s", d.as_secs()),
            McpError::Closed(why) => write!(f, "{why}"),
            McpError::Rpc { code, message } => write!(f, "{message} (error {code})"),
            McpError::Transport(why) => write!(f, "{why}"),
        }
    }
}

type Reply = Result<Value, McpError>;
/// What sending on a transport answers: the message is on its way, or why it is not.
pub(crate) type Sent = Result<(), McpError>;

/// Where answers go: requests waiting by id, and what the server announced.
#[derive(Default)]
pub(crate) struct Router {
    pending: Mutex<HashMap<u64, Sender<Reply>>>,
    /// Set once: why the connection ended. Later requests fail with it at once.
    closed: Mutex<Option<String>>,
    /// `notifications/tools/list_changed` arrived: the next listing asks again.
    pub(crate) tools_changed: AtomicBool,
}

impl Router {
    fn register(&self, id: u64) -> Result<crossbeam_channel::Receiver<Reply>, McpError> {
        let (tx, rx) = bounded(1);
        let closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = closed.as_ref() {
            return Err(McpError::Closed(why.clone()));
        }
        self.lock().insert(id, tx);
        Ok(rx)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Sender<Reply>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Answers request `id` (a transport failure for that one request).
    pub(crate) fn fail(&self, id: u64, error: McpError) {
        if let Some(tx) = self.lock().remove(&id) {
            let _ = tx.try_send(Err(error));
        }
    }

    /// The connection ended: every waiting request fails with `why`, and so will later ones.
    pub(crate) fn close(&self, why: &str) {
        let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        if closed.is_none() {
            *closed = Some(why.to_owned());
        }
        drop(closed);
        for (_, tx) in self.lock().drain() {
            let _ = tx.try_send(Err(McpError::Closed(why.to_owned())));
        }
    }

    /// One message from the server. Returns the answer to send back for a server request
    /// (`ping` is answered, anything else refused).
    pub(crate) fn deliver(&self, msg: Value) -> Option<Value> {
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        match (method, msg.get("id")) {
            (Some(method), Some(id)) => Some(if method == "ping" {
                json!({ "jsonrpc": "2.0", "id": id, "result": {} })
            } else {
                json!({ "jsonrpc": "2.0", "id": id, "error": { "code": crate::protocol::rpc::METHOD_NOT_FOUND, "message": format!("Method not found: {method}") } })
            }),
            (Some(method), None) => {
                if method == "notifications/tools/list_changed" {
                    self.tools_changed.store(true, Ordering::SeqCst);
                }
                None
            }
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else {
                    log::debug!("MCP answer to an id we never sent: {id}");
                    return None;
                };
                let reply = match (msg.get("result"), msg.get("error")) {
                    (Some(r), _) => Ok(r.clone()),
                    (None, Some(e)) => Err(McpError::Rpc {
                        code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("error")
                            .to_owned(),
                    }),
                    (None, None) => Err(McpError::Transport("an answer without result".into())),
                };
                if let Some(tx) = self.lock().remove(&id) {
                    let _ = tx.try_send(reply);
                }
                None
            }
            (None, None) => None,
        }
    }
}

/// How messages reach a server. `send` does not wait for the answer: it arrives through the
/// router (stdio: the reader thread; HTTP: the POST's own thread).
pub(crate) trait Transport: Send + Sync {
    /// Hands one message over; `id` is the request's (None for a notification or a reply).
    /// Waits at most until the message is queued, `abort` is set, or `timeout` has passed,
    /// never for the server to read it.
    fn send(&self, msg: Value, id: Option<u64>, abort: &AbortFlag, timeout: Duration) -> Sent;
    /// Records the negotiated version (HTTP sends it as a header from then on).
    fn set_version(&self, _version: &'static str) {}
    /// Ends the connection: kills a stdio server's group, DELETEs an HTTP session. Returns at
    /// once; what must be waited for (reaps, joins, the DELETE) goes to the reaper.
    fn close(&self);
}

/// One connected (or connecting) server.
pub(crate) struct Client {
    transport: Box<dyn Transport>,
    router: Arc<Router>,
    next_id: AtomicU64,
}

impl Client {
    pub(crate) fn new(transport: Box<dyn Transport>, router: Arc<Router>) -> Client {
        Client {
            transport,
            router,
            next_id: AtomicU64::new(1),
        }
    }

    pub(crate) fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Sends `method` and waits for its answer, at most `timeout`; an abort (or the timeout)
    /// sends `notifications/cancelled` and returns at once.
    pub(crate) fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let rx = self.router.register(id)?;
        let msg = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        if let Err(e) = self.transport.send(msg, Some(id), abort, timeout) {
            self.router.forget(id);
            if matches!(e, McpError::Aborted | McpError::Timeout(_)) {
                log::debug!("MCP request {method} not sent: {e}");
            }
            return Err(e);
        }
        let (abort_tx, abort_rx) = bounded::<()>(1);
        let _hook = abort.on_abort(move || {
            let _ = abort_tx.try_send(());
        });
        let outcome = select! {
            recv(rx) -> reply => reply.unwrap_or_else(|_| Err(McpError::Closed("the connection ended".into()))),
            recv(abort_rx) -> _ => Err(McpError::Aborted),
            default(timeout) => Err(McpError::Timeout(timeout)),
        };
        if matches!(outcome, Err(McpError::Aborted | McpError::Timeout(_))) {
            self.router.forget(id);
            let reason = if matches!(outcome, Err(McpError::Aborted)) {
                "cancelled by the user"
            } else {
                "timed out"
            };
            self.notify(
                "notifications/cancelled",
                json!({ "requestId": id, "reason": reason }),
            );
        }
        outcome
    }

    /// Sends a notification; a failure is only logged (nothing waits for it).
    pub(crate) fn notify(&self, method: &str, params: Value) {
        let msg = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        // Never waits (a transport drops a notification it cannot queue at once), so it is
        // not tied to the caller's abort: a cancellation notice is sent after one.
        let never = AbortFlag::new();
        if let Err(e) = self.transport.send(msg, None, &never, Duration::ZERO) {
            log::debug!("MCP notification {method} not sent: {e}");
        }
    }

    /// `initialize` + `notifications/initialized`; the negotiated version.
    pub(crate) fn initialize(
        &self,
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Result<&'static str, McpError> {
        let result = self.request("initialize", wire::initialize_params(), timeout, abort)?;
        let version = wire::negotiated_version(&result).map_err(McpError::Transport)?;
        self.transport.set_version(version);
        self.notify("notifications/initialized", json!({}));
        Ok(version)
    }

    /// Every page of `tools/list`.
    pub(crate) fn list_tools(
        &self,
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Result<Vec<ToolInfo>, McpError> {
        self.router.tools_changed.store(false, Ordering::SeqCst);
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..wire::MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let result = self.request("tools/list", params, timeout, abort)?;
            let (page, next) = wire::parse_tools_page(&result).map_err(McpError::Transport)?;
            tools.extend(page);
            match next {
                Some(c) if Some(&c) != cursor.as_ref() => cursor = Some(c),
                _ => return Ok(tools),
            }
        }
        Ok(tools)
    }

    pub(crate) fn call_tool(
        &self,
        tool: &str,
        arguments: Value,
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Result<Value, McpError> {
        self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
            timeout,
            abort,
        )
    }

    pub(crate) fn close(&self) {
        self.transport.close();
        self.router.close("the session closed the connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport that answers from a function on the calling thread.
    struct Echo {
        router: Arc<Router>,
        answer: fn(&Value) -> Option<Value>,
        sent: Mutex<Vec<Value>>,
    }

    impl Transport for Echo {
        fn send(
            &self,
            msg: Value,
            _id: Option<u64>,
            _abort: &AbortFlag,
            _timeout: Duration,
        ) -> Sent {
            if let Some(a) = (self.answer)(&msg) {
                self.router.deliver(a);
            }
            self.sent.lock().unwrap().push(msg);
            Ok(())
        }
        fn close(&self) {}
    }

    fn client(answer: fn(&Value) -> Option<Value>) -> (Client, Arc<Router>) {
        let router = Arc::new(Router::default());
        let t = Echo {
            router: router.clone(),
            answer,
            sent: Mutex::default(),
        };
        (Client::new(Box::new(t), router.clone()), router)
    }

    #[test]
    fn paging_follows_cursors() {
        let (c, _) = client(|m| {
            let id = m.get("id")?.clone();
            let page = match m["params"].get("cursor").and_then(Value::as_str) {
                None => json!({"tools":[{"name":"a"}],"nextCursor":"2"}),
                Some("2") => json!({"tools":[{"name":"b"}],"nextCursor":"3"}),
                _ => json!({"tools":[{"name":"c"}]}),
            };
            Some(json!({"jsonrpc":"2.0","id":id,"result":page}))
        });
        let tools = c
            .list_tools(Duration::from_secs(1), &AbortFlag::new())
            .unwrap();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn errors_timeouts_and_aborts() {
        let (c, router) = client(|m| {
            let id = m.get("id")?.clone();
            (m["method"] == "bad")
                .then(|| json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"nope"}}))
        });
        let abort = AbortFlag::new();
        assert_eq!(
            c.request("bad", json!({}), Duration::from_secs(1), &abort),
            Err(McpError::Rpc {
                code: -32602,
                message: "nope".into()
            })
        );
        assert_eq!(
            c.request("silent", json!({}), Duration::from_millis(10), &abort),
            Err(McpError::Timeout(Duration::from_millis(10)))
        );
        abort.abort();
        assert_eq!(
            c.request("silent", json!({}), Duration::from_secs(60), &abort),
            Err(McpError::Aborted)
        );
        router.close("gone");
        assert_eq!(
            c.request("x", json!({}), Duration::from_secs(1), &AbortFlag::new()),
            Err(McpError::Closed("gone".into()))
        );
    }

    #[test]
    fn server_requests_and_notifications() {
        let r = Router::default();
        assert_eq!(
            r.deliver(json!({"jsonrpc":"2.0","id":7,"method":"ping"})),
            Some(json!({"jsonrpc":"2.0","id":7,"result":{}}))
        );
        let refused =
            r.deliver(json!({"jsonrpc":"2.0","id":"s","method":"sampling/createMessage"}));
        assert_eq!(refused.unwrap()["error"]["code"], -32601);
        assert!(r
            .deliver(json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}))
            .is_none());
        assert!(r.tools_changed.load(Ordering::SeqCst));
    }
}
