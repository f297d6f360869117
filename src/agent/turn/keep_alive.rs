//! The prompt-cache keep-alive (settings `cacheKeepAlive`): while a reply's tool calls run,
//! each time the interval passes a request of the same shape as the last model call (its
//! system prompt, messages, tools and level) with an output budget of one token goes to the
//! same model, so the server's prefix cache does not expire before the next real call. Its
//! reply is dropped; its usage is handed back to the turn, which counts it.
//!
//! The requests run on a `cache-keepalive` thread that the turn stops (and joins) when the
//! batch ends; a request in flight then finishes first, so its usage is not lost.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};

use crate::base::abort::AbortFlag;
use crate::base::content::ToolSpec;
use crate::provider::{ChatRequest, Message, Provider, Thinking, Usage};

/// What the keep-alive requests repeat: the last model call's request, owned.
pub(super) struct Shape {
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub thinking: Thinking,
    pub agent: String,
    pub service_tier: Option<String>,
}

/// A running keep-alive; `finish` ends it.
pub(super) struct KeepAlive {
    stop: Sender<()>,
    thread: JoinHandle<(u64, Usage)>,
}

impl KeepAlive {
    /// Starts sending a keep-alive each `interval` (`None`: the thread cannot start).
    pub(super) fn start(
        provider: Arc<dyn Provider>,
        shape: Shape,
        interval: Duration,
        abort: AbortFlag,
    ) -> Option<KeepAlive> {
        let (stop, stopped) = bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name("cache-keepalive".to_owned())
            .spawn(move || {
                let (mut sent, mut usage) = (0, Usage::default());
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    let request_id = crate::protocol::semantic::new_request_id();
                    let request = ChatRequest {
                        system: &shape.system,
                        messages: &shape.messages,
                        tools: &shape.tools,
                        thinking: shape.thinking,
                        agent: &shape.agent,
                        max_tokens: Some(1),
                        request_id: &request_id,
                        service_tier: shape.service_tier.as_deref(),
                    };
                    sent += 1;
                    match provider.stream(&request, &abort, &mut |_| {}) {
                        Ok(reply) => usage.add(reply.usage),
                        // The turn was cancelled: the batch ends too.
                        Err(_) if abort.is_aborted() => break,
                        Err(e) => {
                            // A keep-alive is an optimisation: its failure ends only it.
                            log::warn!("cache keep-alive request failed: {e}");
                            break;
                        }
                    }
                }
                (sent, usage)
            })
            .map_err(|e| log::warn!("cannot start the cache keep-alive: {e}"))
            .ok()?;
        Some(KeepAlive { stop, thread })
    }

    /// Stops it and returns how many keep-alive requests it sent and their usage.
    pub(super) fn finish(self) -> (u64, Usage) {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}
