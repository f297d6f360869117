//! `providerBackupModel`: when a model call fails for good in a way another model may not
//! (the provider is rate- or quota-limited, down, or unreachable, after its own retries), the
//! same request goes to the backup model once. The client hears it as an `autoRetry` wait with
//! `reason: "failover"` and a notice naming the backup; the next call tries the primary again.

use std::sync::Arc;
use std::time::Duration;

use super::{ChatRequest, Notice, Prices, Provider, ProviderError, Reply, RetryWait, StreamEvent};
use crate::base::abort::AbortFlag;

/// A model with a backup for its final failures.
pub(crate) struct Failover {
    pub primary: Arc<dyn Provider>,
    pub backup: Arc<dyn Provider>,
}

/// Whether `error` is one upstream fails over on: a quota or rate limit (429), the provider
/// unavailable (5xx, 529 overloaded, 408, or 404 for a route that vanished), or the connection
/// failing. Not: a refused key or request, a context overflow, a cancel, a stream we could
/// not read.
pub(crate) fn eligible(error: &ProviderError) -> bool {
    match error {
        ProviderError::Status { status, .. } => {
            matches!(status, 404 | 408 | 429 | 500..=599) && !error.is_context_overflow()
        }
        ProviderError::Transport(_) => true,
        ProviderError::Stream(_) | ProviderError::Config(_) | ProviderError::Aborted => false,
    }
}

impl Provider for Failover {
    fn label(&self) -> String {
        self.primary.label()
    }

    fn context_window(&self) -> Option<u64> {
        self.primary.context_window()
    }

    fn prices(&self) -> Option<Prices> {
        self.primary.prices()
    }

    fn accepts_images(&self) -> bool {
        self.primary.accepts_images()
    }

    fn reasoning(&self) -> bool {
        self.primary.reasoning()
    }

    fn caches_prompts(&self) -> bool {
        self.primary.caches_prompts()
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
        abort: &AbortFlag,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, ProviderError> {
        // Whether the primary's last attempt showed anything: the backup's reply replaces it.
        let mut shown = false;
        let first = self.primary.stream(request, abort, &mut |ev| {
            shown = match &ev {
                StreamEvent::Retrying(_) | StreamEvent::Restarted => false,
                StreamEvent::Text(_)
                | StreamEvent::Thinking(_)
                | StreamEvent::ToolCallStart { .. }
                | StreamEvent::ToolCallDelta { .. } => true,
                _ => shown,
            };
            on_event(ev);
        });
        let error = match first {
            Err(e) if eligible(&e) && !abort.is_aborted() => e,
            other => return other,
        };
        let (from, to) = (self.primary.label(), self.backup.label());
        log::warn!("{from}: {error}; retrying on backup model {to}");
        if shown {
            on_event(StreamEvent::Restarted);
        }
        on_event(StreamEvent::Notice(Notice {
            severity: "warning",
            title: format!("Retrying on backup model {to}"),
            description: Some(format!("{from} failed: {error}")),
        }));
        on_event(StreamEvent::Retrying(RetryWait {
            attempt: 1,
            max_attempts: 1,
            delay: Duration::ZERO,
            reason: "failover",
            error: format!("{error}; retrying on backup model {to}"),
        }));
        let reply = self.backup.stream(request, abort, on_event)?;
        on_event(StreamEvent::Recovered { attempt: 1 });
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_final_failures_go_to_the_backup() {
        let status = |status: u16, message: &str| ProviderError::Status {
            status,
            message: message.to_owned(),
        };
        let cases = [
            (status(429, "quota exceeded"), true),
            (status(503, "unavailable"), true),
            (status(529, "overloaded"), true),
            (status(404, "no route"), true),
            (ProviderError::Transport("connection refused".into()), true),
            (status(401, "bad key"), false),
            (status(400, "bad request"), false),
            (
                status(400, "prompt is too long: maximum context length"),
                false,
            ),
            (ProviderError::Stream("refused".into()), false),
            (ProviderError::Config("no key".into()), false),
            (ProviderError::Aborted, false),
        ];
        for (error, want) in cases {
            assert_eq!(eligible(&error), want, "{error}");
        }
    }
}
