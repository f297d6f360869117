//! Requests the agent sends to the client (`session/request_permission`, `fs/*`, `terminal/*`):
//! the worker side (`ClientLink::request`, a blocking call that an abort wakes at once) and the
//! main loop's side (`Pending`, the requests in flight, and the frames).
//!
//! A worker never writes to the client. It hands its request to the main loop as a
//! `ClientMsg` and waits on its own reply channel; the loop, the only writer, sends the frame,
//! keeps the reply channel in `Pending` under the request's id, and routes the client's
//! response (result or error) back. The ids are the agent's own space (integers from 1): JSON-RPC
//! matches a response to the requests of the side that sent them, so they never meet the
//! client's ids. An aborted wait returns at once through an `AbortFlag` hook, which also tells
//! the loop to send `$/cancel_request` for the request; a response that comes later finds no
//! entry and is logged and dropped. What this module does not know: ACP methods and their
//! shapes (the callers build the params and read the result).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::json::json;
use crossbeam_channel::{bounded, select, Sender};
use serde_json::Value;

use crate::base::abort::AbortFlag;
use crate::protocol::rpc::{self, RequestId, RpcError};

pub(crate) const CANCEL_REQUEST: &str = "$/cancel_request";

/// What a worker sends the main loop.
#[derive(Debug)]
pub(crate) enum ClientMsg {
    /// Send this request to the client and route its response to `reply`.
    Request {
        id: u64,
        method: &'static str,
        params: Value,
        reply: Sender<Reply>,
    },
    /// The waiting worker gave up (its turn was aborted): send `$/cancel_request` if the
    /// request is still unanswered.
    Cancel { id: u64 },
}

/// The client's answer as the waiting worker sees it.
pub(crate) type Reply = Result<Value, ClientError>;

/// Why a client request produced no result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClientError {
    /// The client answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// The waiting turn was aborted (cancel, close, exit) before the answer came.
    Cancelled,
    /// No answer will come: the main loop or the connection is gone.
    Gone,
    /// The caller's deadline passed first (the loop sends `$/cancel_request`).
    TimedOut,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Rpc { code, message } => {
                write!(f, "the client answered {code}: {message}")
            }
            ClientError::Cancelled => write!(f, "the request was cancelled"),
            ClientError::Gone => write!(f, "the client connection is gone"),
            ClientError::TimedOut => write!(f, "the client did not answer in time"),
        }
    }
}

/// Agent-side request ids, unique in the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A worker's way to the client, through the main loop. Cheap to clone; any thread may hold one.
#[derive(Clone)]
pub(crate) struct ClientLink {
    tx: Sender<ClientMsg>,
}

impl ClientLink {
    pub(crate) fn new(tx: Sender<ClientMsg>) -> ClientLink {
        ClientLink { tx }
    }

    /// Sends `method` with `params` to the client and waits for its answer, or until `abort`
    /// is set (then `Cancelled` at once, and the loop sends `$/cancel_request`).
    pub(crate) fn request(&self, method: &'static str, params: Value, abort: &AbortFlag) -> Reply {
        self.request_until(method, params, abort, None)
    }

    /// Sends a request whose answer nobody waits for (releasing a client terminal after a
    /// cancel must still happen, and must not hold the cancel up).
    pub(crate) fn send_detached(&self, method: &'static str, params: Value) {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (reply, _) = bounded(1);
        let _ = self.tx.send(ClientMsg::Request {
            id,
            method,
            params,
            reply,
        });
    }

    /// `request`, giving up at `deadline` too (then `TimedOut`, and `$/cancel_request`).
    pub(crate) fn request_until(
        &self,
        method: &'static str,
        params: Value,
        abort: &AbortFlag,
        deadline: Option<std::time::Instant>,
    ) -> Reply {
        // Checkpoint: a cancelled turn asks nothing more.
        if abort.is_aborted() {
            return Err(ClientError::Cancelled);
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // Room for the loop's one answer, so its `try_send` never fails on a full channel.
        let (reply_tx, reply_rx) = bounded(1);
        let request = ClientMsg::Request {
            id,
            method,
            params,
            reply: reply_tx,
        };
        if self.tx.send(request).is_err() {
            return Err(ClientError::Gone);
        }
        let (wake_tx, wake_rx) = bounded(1);
        let loop_tx = self.tx.clone();
        // Runs on the aborting thread (usually the main loop's, inside `session/cancel`): it
        // only queues, so it never blocks the loop.
        let _hook = abort.on_abort(move || {
            let _ = loop_tx.send(ClientMsg::Cancel { id });
            let _ = wake_tx.try_send(());
        });
        let timer = match deadline {
            Some(at) => crossbeam_channel::at(at),
            None => crossbeam_channel::never(),
        };
        let reply = select! {
            recv(reply_rx) -> reply => reply.unwrap_or(Err(ClientError::Gone)),
            recv(wake_rx) -> _ => Err(ClientError::Cancelled),
            recv(timer) -> _ => {
                let _ = self.tx.send(ClientMsg::Cancel { id });
                Err(ClientError::TimedOut)
            }
        };
        settle(reply, abort.is_aborted())
    }
}

/// The loop drops the reply channel when it handles the hook's `Cancel`; if that happens before
/// the waiting thread's `select!`, a disconnected reply and the wake-up are both ready and either
/// may win. An aborted wait is `Cancelled` whichever did.
fn settle(reply: Reply, aborted: bool) -> Reply {
    match reply {
        Err(ClientError::Gone) if aborted => Err(ClientError::Cancelled),
        reply => reply,
    }
}

/// The main loop's requests in flight, by id.
#[derive(Default)]
pub(crate) struct Pending {
    waiting: HashMap<u64, (&'static str, Sender<Reply>)>,
}

impl Pending {
    /// Records a request the loop is about to send; returns its frame.
    pub(crate) fn register(
        &mut self,
        id: u64,
        method: &'static str,
        params: Value,
        reply: Sender<Reply>,
    ) -> Value {
        self.waiting.insert(id, (method, reply));
        request_frame(id, method, params)
    }

    /// Routes the client's response to its waiting worker. `false`: no request of ours has
    /// that id (never sent, already answered or given up on); the caller logs and drops it.
    pub(crate) fn resolve(&mut self, id: &RequestId, result: Result<Value, RpcError>) -> bool {
        let Some((method, reply)) = id.0.as_u64().and_then(|n| self.waiting.remove(&n)) else {
            return false;
        };
        let reply_value = result.map_err(|e| ClientError::Rpc {
            code: e.code,
            message: e.message,
        });
        if let Err(e) = &reply_value {
            log::debug!("the client answered {method} ({id}) with {e}");
        }
        // The worker may have stopped waiting in the meantime: then nobody needs it.
        let _ = reply.try_send(reply_value);
        true
    }

    /// The worker gave up on `id`: forget it and return the `$/cancel_request` frame to send,
    /// if it was still unanswered.
    pub(crate) fn cancel(&mut self, id: u64) -> Option<Value> {
        self.waiting.remove(&id).map(|_| cancel_frame(id))
    }

    /// The connection is closing: every waiting worker gets `Gone` (its reply channel closes).
    pub(crate) fn fail_all(&mut self) {
        self.waiting.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }
}

pub(crate) fn request_frame(id: u64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

pub(crate) fn cancel_frame(id: u64) -> Value {
    rpc::notification(CANCEL_REQUEST, json!({ "requestId": id }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;
    use std::time::Duration;

    /// A fake main loop on another thread: answers each request with `answer(method)`.
    fn serve(answer: fn(&str) -> Option<Result<Value, RpcError>>) -> ClientLink {
        let (tx, rx) = unbounded();
        std::thread::spawn(move || {
            let mut pending = Pending::default();
            for msg in rx {
                match msg {
                    ClientMsg::Request {
                        id,
                        method,
                        params,
                        reply,
                    } => {
                        let frame = pending.register(id, method, params, reply);
                        assert_eq!(frame["method"], method);
                        if let Some(result) = answer(method) {
                            assert!(pending.resolve(&RequestId(json!(id)), result));
                        }
                    }
                    ClientMsg::Cancel { id } => {
                        let frame = pending.cancel(id).expect("still pending");
                        assert_eq!(frame["params"]["requestId"], id);
                    }
                }
            }
        });
        ClientLink::new(tx)
    }

    #[test]
    fn results_and_errors_reach_the_waiting_worker() {
        let link = serve(|m| match m {
            "ok" => Some(Ok(json!({"content": "x"}))),
            _ => Some(Err(RpcError::invalid_params("no such file"))),
        });
        let abort = AbortFlag::new();
        assert_eq!(
            link.request("ok", json!({}), &abort),
            Ok(json!({"content": "x"}))
        );
        assert_eq!(
            link.request("bad", json!({}), &abort),
            Err(ClientError::Rpc {
                code: -32602,
                message: "Invalid params: no such file".into()
            })
        );
    }

    #[test]
    fn an_abort_wakes_the_wait_and_cancels_the_request() {
        let link = serve(|_| None);
        let abort = AbortFlag::new();
        let a = abort.clone();
        let waiter = std::thread::spawn(move || link.request("slow", json!({}), &a));
        std::thread::sleep(Duration::from_millis(20));
        abort.abort();
        assert_eq!(waiter.join().unwrap(), Err(ClientError::Cancelled));
        // Already aborted: nothing is sent.
        let link = serve(|_| panic!("nothing may be sent"));
        assert_eq!(
            link.request("x", json!({}), &abort),
            Err(ClientError::Cancelled)
        );
    }

    #[test]
    fn an_aborted_wait_is_cancelled_even_if_the_disconnect_won_the_select() {
        use ClientError::*;
        let cases: [(Reply, bool, Reply); 5] = [
            (Err(Gone), true, Err(Cancelled)),
            (Err(Gone), false, Err(Gone)),
            (Ok(json!({})), true, Ok(json!({}))),
            (Err(TimedOut), true, Err(TimedOut)),
            (Err(Cancelled), true, Err(Cancelled)),
        ];
        for (reply, aborted, want) in cases {
            assert_eq!(settle(reply.clone(), aborted), want, "{reply:?} {aborted}");
        }
    }

    #[test]
    fn late_unknown_and_failed_requests() {
        let mut pending = Pending::default();
        assert!(!pending.resolve(&RequestId(json!(7)), Ok(json!({}))));
        assert!(!pending.resolve(&RequestId(json!("7")), Ok(json!({}))));
        assert_eq!(pending.cancel(7), None);
        let (tx, rx) = bounded(1);
        pending.register(8, "m", json!({}), tx);
        pending.fail_all();
        assert!(rx.recv().is_err(), "the worker sees Gone");
        // A worker whose link's loop is gone gets Gone, not a hang.
        let (tx, rx) = unbounded::<ClientMsg>();
        drop(rx);
        assert_eq!(
            ClientLink::new(tx).request("m", json!({}), &AbortFlag::new()),
            Err(ClientError::Gone)
        );
        assert_eq!(pending.len(), 0);
    }
}
