//! HTTP for model calls: a lazily built ureq agent per provider whose sockets the turn's
//! `AbortFlag` can shut down, connect/idle-read timeouts, retries with backoff, and the
//! streaming loop that feeds SSE events to a wire-API decoder.
//!
//! Cancellation: ureq is blocking, so a cancel must unblock a read that is parked in the
//! kernel. Our connector builds its own socket transport; every time a transport does I/O on
//! behalf of a call it hands its socket to that call's `CallSlot` (found through a thread
//! local, since ureq runs a call entirely on the calling thread). The call registers an abort
//! hook that shuts the slot's socket down, which wakes the blocked read at once. Connecting
//! and DNS run on short-lived helper threads the caller stops waiting for when aborted.

pub(crate) mod failure;
mod socket;
pub(crate) mod trust;
pub(crate) mod usage;

pub(crate) use failure::{error_text, message_and_code, one_line, transient_event_status};

use failure::{classify_ureq_error, read_error, status_error, AttemptError};
use socket::{AbortableResolver, AbortableTcpConnector, CallSlot, CurrentSlot};

use std::io::{self, Read};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ureq::unversioned::transport::{ConnectProxyConnector, Connector, RustlsConnector};

pub(crate) use super::frames::Framing;

use super::frames::Frames;
use super::sse::SseEvent;
use super::{Notice, ProviderError, Reply, RetryWait, StreamEvent};
use crate::base::abort::AbortFlag;
use crate::base::telemetry;
use crate::config::settings::WaitForUsage;

/// At trace level the HTTP stack hex-dumps raw request bytes, `Authorization` and
/// `x-api-key` included. When any trace logging is asked for, cap those crates at debug (where
/// ureq redacts sensitive headers) so no log level ever prints a key.
pub fn cap_wire_logging(logger: &mut env_logger::Builder) {
    let wants_trace = std::env::var("RUST_LOG")
        .map(|v| v.to_ascii_lowercase().contains("trace"))
        .unwrap_or(false);
    if wants_trace {
        for module in ["ureq", "ureq_proto"] {
            logger.filter_module(module, log::LevelFilter::Debug);
        }
    }
}

/// Timeouts and retry policy; the environment overrides exist so tests run in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HttpSettings {
    pub connect_timeout: Duration,
    /// Longest silence between two reads before the call fails as stalled.
    pub idle_timeout: Duration,
    pub retry_base: Duration,
    pub max_retries: u32,
    /// `retry.provider.maxRetryDelayMs`: the longest `Retry-After` a retry honours (`None`:
    /// no cap).
    pub max_retry_delay: Option<Duration>,
    /// `retry.provider.waitForUsage.*` (`usage`).
    pub usage: WaitForUsage,
}

/// Settings `retry.*`, set once at start-up (`setup`): every provider the process builds,
/// the start-up one and each a model switch makes, reads it here.
static RETRY: std::sync::OnceLock<crate::config::settings::Retry> = std::sync::OnceLock::new();

/// Records the settings' retry policy (the first call wins).
pub(crate) fn set_retry(retry: crate::config::settings::Retry) {
    let _ = RETRY.set(retry);
}

/// The certificate authorities model calls trust (`trust::from_env`), set once at start-up.
static ROOTS: OnceLock<trust::Roots> = OnceLock::new();

/// Records the trusted roots (the first call wins).
pub(crate) fn set_roots(roots: trust::Roots) {
    let _ = ROOTS.set(roots);
}

/// The proxy for `scheme` (`https` or `http`) as curl picks it: `HTTPS_PROXY` (or
/// `HTTP_PROXY` for plain http), then `ALL_PROXY`, each also in lower case; hosts in
/// `NO_PROXY` go direct (ureq reads it). `None`: no proxy.
fn proxy_for(scheme: &str) -> Option<ureq::Proxy> {
    let own = if scheme == "http" {
        "HTTP_PROXY"
    } else {
        "HTTPS_PROXY"
    };
    let names = [own, "ALL_PROXY"];
    let value = names.iter().find_map(|n| {
        [n.to_string(), n.to_ascii_lowercase()]
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
    })?;
    match build_proxy(value.trim()) {
        Ok(p) => Some(p),
        Err(e) => {
            log::warn!("ignoring the proxy {value}: {e}");
            None
        }
    }
}

/// A proxy from its URL, with the hosts of `NO_PROXY` (comma-separated, as ureq reads it)
/// exempt.
fn build_proxy(url: &str) -> Result<ureq::Proxy, ureq::Error> {
    let parsed = ureq::Proxy::new(url)?;
    let mut builder = ureq::Proxy::builder(parsed.protocol())
        .host(parsed.host())
        .port(parsed.port());
    if let Some(user) = parsed.username() {
        builder = builder.username(user);
    }
    if let Some(password) = parsed.password() {
        builder = builder.password(password);
    }
    let no_proxy = ["NO_PROXY", "no_proxy"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
        .unwrap_or_default();
    for host in no_proxy.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        builder = builder.no_proxy(host);
    }
    builder.build()
}

impl HttpSettings {
    pub(crate) fn from_env() -> HttpSettings {
        let retry = RETRY.get().copied().unwrap_or_default();
        let ms = |name: &str, default: u64| {
            Duration::from_millis(
                std::env::var(name)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(default),
            )
        };
        HttpSettings {
            connect_timeout: ms("PRIME_AGENT_CONNECT_TIMEOUT_MS", 10_000),
            idle_timeout: ms("PRIME_AGENT_IDLE_TIMEOUT_MS", 120_000),
            // The environment (a test hook) wins over the settings' base delay.
            retry_base: ms("PRIME_AGENT_RETRY_BASE_MS", retry.base_delay_ms),
            max_retries: if retry.enabled { retry.max_retries } else { 0 },
            max_retry_delay: Some(Duration::from_millis(retry.max_retry_delay_ms))
                .filter(|d| !d.is_zero()),
            // No retries (`retry.enabled: false`) means no usage waits either.
            usage: WaitForUsage {
                enabled: retry.enabled && retry.wait_for_usage.enabled,
                ..retry.wait_for_usage
            },
        }
    }
}

/// The longest wait between two attempts, whatever `retry.baseDelayMs` says: a base of hours
/// is a typo, and `Duration`'s multiplication panics on overflow.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// The wait before retry `attempt + 1`: `base · 2^attempt`, at most `MAX_RETRY_DELAY`.
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    base.checked_mul(2u32.saturating_pow(attempt))
        .unwrap_or(MAX_RETRY_DELAY)
        .min(MAX_RETRY_DELAY)
}

/// The title of the notice a usage wait starts with (once per wait).
pub(crate) const USAGE_WAIT_TITLE: &str = "Waiting for the provider's usage limit to reset";

/// What follows a failed attempt.
enum Next {
    /// Wait, then try again; a notice to show first (when a usage wait begins).
    Retry(RetryWait, Option<Notice>),
    /// Fail with `error`; `exhausted`: the text that ends the retries' story, when retries
    /// were announced.
    Fail {
        error: ProviderError,
        exhausted: Option<String>,
    },
}

/// `error` with a note on why it was not retried (or waited for) longer.
fn with_note(error: ProviderError, note: &str) -> ProviderError {
    match error {
        ProviderError::Status { status, message } => ProviderError::Status {
            status,
            message: format!("{message}; {note}"),
        },
        other => other,
    }
}

/// Where a decoder hands each decoded piece of the reply, as it arrives.
pub(crate) type Emit<'a> = &'a mut dyn FnMut(StreamEvent);

/// What a wire API does with the events of one streamed reply.
pub(crate) trait StreamDecoder {
    /// Handles one SSE event; `Ok(true)` means the reply is complete (no need to read on).
    fn on_event(&mut self, event: &SseEvent, emit: Emit<'_>) -> Result<bool, ProviderError>;

    /// The body ended: the assembled reply, or an error if no finish was ever seen. (Boxed,
    /// as the client holds its decoder: one copy of the client's stream loop serves every API.)
    fn finish(self: Box<Self>) -> Result<Reply, ProviderError>;
}

/// The JSON of one stream event, for decoders whose every event is one; `None` for an empty
/// event or the `[DONE]` some compatible servers end with although the API has none.
pub(crate) fn event_json<'a, T: serde::Deserialize<'a>>(
    event: &'a SseEvent,
) -> Result<Option<T>, ProviderError> {
    let data = event.data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(None);
    }
    serde_json::from_str(data)
        .map(Some)
        .map_err(|err| ProviderError::invalid_json(&err))
}

/// One POST of a model call.
pub(crate) struct PostRequest<'a> {
    /// `provider/model`, for log lines.
    pub label: &'a str,
    pub url: &'a str,
    /// Sent as is; they may carry secrets, so they are never logged.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    /// The logical call's id: sent with every attempt (`call_headers`), so a proxy can link
    /// the call to semantic edges and tell a retry from a new call.
    pub request_id: Option<&'a str>,
    /// How the answer's body is framed.
    pub framing: Framing,
    /// Headers computed again for every attempt (Bedrock's SigV4 signature, which carries
    /// the time it was made), sent after `headers`.
    pub sign: Option<&'a dyn Fn() -> Vec<(String, String)>>,
}

/// Correlation and retry headers of one model call (issue 21): `X-ACP-Model-Request-ID`
/// (the id semantic edges name; verifiers' interception proxy strips it), `Idempotency-Key`
/// (the same id on every attempt, so a proxy replays instead of recording a second turn) and
/// `x-stainless-retry-count` (0 for the first attempt; the retry marker the stainless SDKs
/// send). Ours replace any configured header of the same name.
pub(crate) const CALL_HEADERS: [&str; 3] = [
    "X-ACP-Model-Request-ID",
    "Idempotency-Key",
    "x-stainless-retry-count",
];

fn call_headers(request_id: &str, attempt: u32) -> [(&'static str, String); 3] {
    [
        (CALL_HEADERS[0], request_id.to_owned()),
        (CALL_HEADERS[1], request_id.to_owned()),
        (CALL_HEADERS[2], attempt.to_string()),
    ]
}

/// A provider's HTTP client: the ureq agent is built on the first call, so start-up pays
/// nothing for TLS roots or connection pools.
pub(crate) struct HttpClient {
    settings: HttpSettings,
    /// For `https` URLs and for `http` ones: each may have its own proxy.
    agents: [OnceLock<ureq::Agent>; 2],
}

/// Bound on a server's self-description (`/v1/models` lists can be long on routers).
const MAX_INFO_BODY: u64 = 4 * 1024 * 1024;

impl HttpClient {
    pub(crate) fn new(settings: HttpSettings) -> HttpClient {
        HttpClient {
            settings,
            agents: [OnceLock::new(), OnceLock::new()],
        }
    }

    /// The agent for `url`'s scheme: the trusted roots (`set_roots`) and the scheme's proxy.
    fn agent(&self, url: &str) -> &ureq::Agent {
        let scheme = if url.starts_with("http://") {
            "http"
        } else {
            "https"
        };
        self.agents[usize::from(scheme == "http")].get_or_init(|| {
            let mut tls = ureq::tls::TlsConfig::builder();
            if let Some(Some(roots)) = ROOTS.get() {
                tls = tls.root_certs(roots.clone());
            }
            let config = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(self.settings.connect_timeout))
                .timeout_per_read(Some(self.settings.idle_timeout))
                .user_agent(format!("prime-agent/{}", crate::VERSION))
                .tls_config(tls.build())
                .proxy(proxy_for(scheme))
                .build();
            let connector =
                ().chain(ConnectProxyConnector::default())
                    .chain(AbortableTcpConnector)
                    .chain(RustlsConnector::default());
            ureq::Agent::with_parts(config, connector, AbortableResolver)
        })
    }

    /// POSTs `request` and streams the SSE reply through a fresh decoder per attempt.
    /// Retries 429, 5xx and connection failures (once a delta reached the client only a
    /// transient error event inside the stream, which voids the partial reply), and
    /// reports each wait and its end through `on_event` (`Retrying`, `Recovered`,
    /// `RetriesExhausted`).
    pub(crate) fn stream(
        &self,
        request: &PostRequest<'_>,
        abort: &AbortFlag,
        new_decoder: &mut dyn FnMut() -> Box<dyn StreamDecoder>,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, ProviderError> {
        let mut attempt = 0u32;
        // Set once a usage limit outlasted the retries (`usage`): since when, and pings made.
        let mut usage_wait: Option<(Instant, u32)> = None;
        loop {
            abort.check().map_err(|_| ProviderError::Aborted)?;
            let mut streamed = false;
            // A retried call has recovered once its first delta arrives (the client hears
            // so before the text), or when it completes without any.
            let result = self.attempt(request, attempt, abort, new_decoder(), &mut |ev| {
                if !streamed && attempt > 0 {
                    on_event(StreamEvent::Recovered { attempt });
                }
                streamed = true;
                on_event(ev);
            });
            let failure = match result {
                Ok(reply) => {
                    if attempt > 0 && !streamed {
                        on_event(StreamEvent::Recovered { attempt });
                    }
                    return Ok(reply);
                }
                Err(_) if abort.is_aborted() => return Err(ProviderError::Aborted),
                Err(f) => f,
            };
            let wait = match self.after_failure(failure, streamed, attempt, &mut usage_wait) {
                Next::Retry(wait, notice) => {
                    if let Some(notice) = notice {
                        on_event(StreamEvent::Notice(notice));
                    }
                    wait
                }
                Next::Fail { error, exhausted } => {
                    if let Some(error_text) = exhausted {
                        on_event(StreamEvent::RetriesExhausted {
                            attempt,
                            error: error_text,
                        });
                    }
                    return Err(error);
                }
            };
            if streamed {
                // The server voided the reply it was streaming: the client hears so before
                // the wait, and the next attempt's reply replaces it (`StreamEvent::Restarted`).
                on_event(StreamEvent::Restarted);
            }
            attempt += 1;
            log::warn!(
                "{}: {}; {} {}/{} in {:.1} s",
                request.label,
                wait.error,
                if wait.reason == "usage" {
                    "usage-limit wait"
                } else {
                    "retry"
                },
                wait.attempt,
                wait.max_attempts,
                wait.delay.as_secs_f64()
            );
            let delay = wait.delay;
            on_event(StreamEvent::Retrying(wait));
            abort.sleep(delay).map_err(|_| ProviderError::Aborted)?;
        }
    }

    /// After a failed attempt (number `attempt`, 0-based): a retry of the ladder (429, 5xx,
    /// connections; `Retry-After` honoured up to `max_retry_delay`), else a usage wait for a
    /// 429 (`usage`), else the failure.
    fn after_failure(
        &self,
        failure: AttemptError,
        streamed: bool,
        attempt: u32,
        usage_wait: &mut Option<(Instant, u32)>,
    ) -> Next {
        let max_attempts = failure
            .max_retries
            .unwrap_or(self.settings.max_retries)
            .min(self.settings.max_retries);
        let cap = self.settings.max_retry_delay;
        let over_cap = failure
            .retry_after
            .filter(|asked| cap.is_some_and(|cap| *asked > cap));
        let ladder = failure.retryable
            && (!streamed || failure.restarts)
            && attempt < max_attempts
            && over_cap.is_none()
            && usage_wait.is_none();
        if ladder {
            let delay = failure
                .retry_after
                .unwrap_or_else(|| backoff(self.settings.retry_base, attempt));
            let wait = RetryWait {
                attempt: attempt + 1,
                max_attempts,
                delay,
                reason: failure.reason,
                error: failure.error.to_string(),
            };
            return Next::Retry(wait, None);
        }
        if failure.retryable
            && failure.reason == "rate_limited"
            && !streamed
            && self.settings.usage.enabled
        {
            return self.usage_wait(failure, attempt, usage_wait);
        }
        // (An attempt that streamed and then failed for good said nothing of retries,
        // unless its failure is one that voids what it streamed.)
        let announced = attempt > 0 && (!streamed || failure.restarts);
        let error = match (over_cap, cap) {
            (Some(asked), Some(cap)) if failure.retryable => with_note(
                failure.error,
                &format!(
                    "the server asked to wait {} before a retry, longer than retry.provider.maxRetryDelayMs ({})",
                    usage::duration_text(asked),
                    usage::duration_text(cap)
                ),
            ),
            _ => failure.error,
        };
        Next::Fail {
            exhausted: announced.then(|| error.to_string()),
            error,
        }
    }

    /// One more ping of a usage wait (`usage::decide`), or its end.
    fn usage_wait(
        &self,
        failure: AttemptError,
        attempt: u32,
        state: &mut Option<(Instant, u32)>,
    ) -> Next {
        let first = state.is_none();
        let (since, pings) = state.get_or_insert((Instant::now(), 0));
        *pings += 1;
        let policy = &self.settings.usage;
        match usage::decide(*pings, since.elapsed(), failure.retry_after, policy) {
            usage::Decision::Wait(delay) => {
                let error = failure.error.to_string();
                let notice = first.then(|| Notice {
                    severity: "warning",
                    title: USAGE_WAIT_TITLE.to_owned(),
                    description: Some(format!(
                        "{error}. Waiting for the limit to reset: at most {} in all (retry.provider.waitForUsage.maxWaitMs); cancel the prompt to stop waiting.",
                        usage::duration_text(Duration::from_millis(policy.max_wait_ms))
                    )),
                });
                let wait = RetryWait {
                    attempt: *pings,
                    max_attempts: policy.max_attempts,
                    delay,
                    reason: "usage",
                    error,
                };
                Next::Retry(wait, notice)
            }
            usage::Decision::GiveUp(why) => {
                let text = format!("{why}: {}", failure.error);
                Next::Fail {
                    error: with_note(failure.error, &why),
                    exhausted: (attempt > 0).then_some(text),
                }
            }
        }
    }

    /// GETs `url` and parses a JSON body, for facts a server tells about itself (the model's
    /// context window). Best effort: `None` on any failure, never retried, bounded by
    /// `timeout` as a whole, and cut short by `abort`.
    pub(crate) fn get_json(
        &self,
        url: &str,
        headers: &[(String, String)],
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Option<serde_json::Value> {
        let slot = Arc::new(CallSlot::default());
        let hook_slot = slot.clone();
        let _hook = abort.on_abort(move || hook_slot.abort());
        let _current = CurrentSlot::enter(slot.clone());
        log::debug!("GET {url}");
        let mut builder = self.agent(url).get(url);
        for (name, value) in headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let response = builder
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(|e| log::debug!("GET {url} failed: {e}"))
            .ok()?;
        if response.status().as_u16() != 200 {
            log::debug!("GET {url}: status {}", response.status().as_u16());
            return None;
        }
        let body = read_info_body(response).ok()?;
        serde_json::from_slice(&body).ok()
    }

    /// POSTs a form (`application/x-www-form-urlencoded`) and returns the status and the body
    /// (at most `MAX_INFO_BODY`), for a credential exchange (`google_auth`). One attempt,
    /// bounded by `timeout` as a whole and cut short by `abort`; the body may carry a secret,
    /// so neither it nor the answer is logged.
    pub(crate) fn post_form(
        &self,
        url: &str,
        form: &[u8],
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Result<(u16, Vec<u8>), ProviderError> {
        let slot = Arc::new(CallSlot::default());
        let hook_slot = slot.clone();
        let _hook = abort.on_abort(move || hook_slot.abort());
        let _current = CurrentSlot::enter(slot.clone());
        log::debug!("POST {url} (credential exchange)");
        let response = self
            .agent(url)
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(form)
            .map_err(|e| match classify_ureq_error(&e, url, &slot).error {
                _ if abort.is_aborted() => ProviderError::Aborted,
                error => error,
            })?;
        let status = response.status().as_u16();
        let body = read_info_body(response).map_err(|e| {
            if abort.is_aborted() {
                ProviderError::Aborted
            } else {
                ProviderError::Transport(format!("Reading the answer of {url} failed: {e}"))
            }
        })?;
        Ok((status, body))
    }

    fn attempt(
        &self,
        request: &PostRequest<'_>,
        attempt: u32,
        abort: &AbortFlag,
        mut decoder: Box<dyn StreamDecoder>,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, AttemptError> {
        let slot = Arc::new(CallSlot::default());
        let hook_slot = slot.clone();
        // Both guards live until this attempt returns, which is also when the socket is
        // dropped (or pooled): a later cancel must not touch a connection another call uses.
        let _hook = abort.on_abort(move || hook_slot.abort());
        let _current = CurrentSlot::enter(slot.clone());

        log::debug!("{}: POST {}", request.label, request.url);
        let mut builder = self.agent(request.url).post(request.url);
        // The model call's span (`provider::traced_stream`), when tracing is on or the prompt
        // carried a trace context: W3C `traceparent` (and `tracestate`, `baggage`).
        let trace = telemetry::propagation_headers();
        let ours = |name: &str| {
            (request.request_id.is_some()
                && CALL_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name)))
                || trace.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        // Headers made for this attempt (a request signature with its time) replace any of
        // the same name.
        let signed = request.sign.map(|sign| sign()).unwrap_or_default();
        let replaced = |name: &str| signed.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        for (name, value) in request
            .headers
            .iter()
            .filter(|(n, _)| !ours(n) && !replaced(n))
        {
            builder = builder.header(name.as_str(), value.as_str());
        }
        for (name, value) in &signed {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let Some(id) = request.request_id {
            for (name, value) in call_headers(id, attempt) {
                builder = builder.header(name, value);
            }
        }
        for (name, value) in trace {
            builder = builder.header(name, value);
        }
        let response = builder
            .send(request.body)
            .map_err(|e| classify_ureq_error(&e, request.url, &slot))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(status_error(status, response));
        }
        let mut reader = response.into_body().into_reader();
        let mut frames = Frames::new(request.framing);
        let mut events = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted && !abort.is_aborted() => continue,
                Err(e) => return Err(read_error(&e, &slot, self.settings.idle_timeout)),
            };
            // A body that cannot be decoded is final: the same server sends the same bytes.
            if n == 0 {
                frames.finish(&mut events).map_err(AttemptError::fatal)?;
            } else {
                frames
                    .feed(&buf[..n], &mut events)
                    .map_err(AttemptError::fatal)?;
            }
            for event in events.drain(..) {
                abort
                    .check()
                    .map_err(|_| AttemptError::fatal(ProviderError::Aborted))?;
                if decoder
                    .on_event(&event, emit)
                    .map_err(AttemptError::from_decoder)?
                {
                    return decoder.finish().map_err(AttemptError::fatal);
                }
                frames.recycle(event);
            }
            if n == 0 {
                // A body that ends without a finish is a dropped connection, not an answer.
                // (A transport failure: the connection ended, whatever the decoder says.)
                return decoder.finish().map_err(|error| {
                    AttemptError::retryable(
                        ProviderError::Transport(error.to_string()),
                        "stream_dropped",
                    )
                });
            }
        }
    }
}

/// The body of a small answer (a model list, a credential exchange), at most `MAX_INFO_BODY`.
fn read_info_body(response: ureq::http::Response<ureq::Body>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(MAX_INFO_BODY)
        .read_to_end(&mut body)?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    // See: issue 32 (a huge `retry.baseDelayMs` panicked the turn).
    #[test]
    fn backoff_doubles_and_never_overflows() {
        let s = Duration::from_secs;
        let cases = [
            (s(2), 0, s(2)),
            (s(2), 2, s(8)),
            (s(1), 40, MAX_RETRY_DELAY),
            (Duration::from_millis(u64::MAX), 0, MAX_RETRY_DELAY),
            (Duration::from_millis(u64::MAX), 3, MAX_RETRY_DELAY),
            (Duration::ZERO, 5, Duration::ZERO),
        ];
        for (base, attempt, want) in cases {
            assert_eq!(backoff(base, attempt), want, "{base:?} {attempt}");
        }
    }
}
