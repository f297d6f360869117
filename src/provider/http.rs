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

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    RustlsConnector, Transport,
};

use super::sse::{SseDecoder, SseEvent};
use super::{ProviderError, Reply, RetryWait, StreamEvent};
use crate::abort::AbortFlag;

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
pub struct HttpSettings {
    pub connect_timeout: Duration,
    /// Longest silence between two reads before the call fails as stalled.
    pub idle_timeout: Duration,
    pub retry_base: Duration,
    pub max_retries: u32,
}

impl HttpSettings {
    pub fn from_env() -> HttpSettings {
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
            retry_base: ms("PRIME_AGENT_RETRY_BASE_MS", 2_000),
            max_retries: 3,
        }
    }
}

/// What a wire API does with the events of one streamed reply.
pub trait StreamDecoder {
    /// Handles one SSE event; `Ok(true)` means the reply is complete (no need to read on).
    fn on_event(
        &mut self,
        event: &SseEvent,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, ProviderError>;

    /// The body ended: the assembled reply, or an error if no finish was ever seen.
    fn finish(self) -> Result<Reply, ProviderError>;
}

/// Replays a recorded stream from `fixtures/sse/` through a decoder, as the HTTP loop would;
/// returns the reply and the deltas it emitted. For decoder tests.
#[cfg(test)]
pub(crate) fn replay_fixture<D: StreamDecoder>(
    fixture: &str,
    mut decoder: D,
) -> (Result<Reply, ProviderError>, Vec<StreamEvent>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sse")
        .join(fixture);
    let bytes = std::fs::read(path).expect("fixture");
    let mut sse = super::sse::SseDecoder::new();
    let mut events = Vec::new();
    sse.feed(&bytes, &mut events);
    sse.finish(&mut events);
    let mut out = Vec::new();
    for e in &events {
        match decoder.on_event(e, &mut |ev| out.push(ev)) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => return (Err(e), out),
        }
    }
    (decoder.finish(), out)
}

/// One POST of a model call.
pub struct PostRequest<'a> {
    /// `provider/model`, for log lines.
    pub label: &'a str,
    pub url: &'a str,
    /// Sent as is; they may carry secrets, so they are never logged.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// A provider's HTTP client: the ureq agent is built on the first call, so start-up pays
/// nothing for TLS roots or connection pools.
pub struct HttpClient {
    settings: HttpSettings,
    agent: OnceLock<ureq::Agent>,
}

/// Why one attempt failed, and whether another attempt may help.
struct AttemptError {
    error: ProviderError,
    retryable: bool,
    retry_after: Option<Duration>,
    /// A lower retry limit than the settings' for this kind of failure.
    max_retries: Option<u32>,
    /// The `autoRetry` reason: `rate_limited`, `server_error`, `connection`, `stream_dropped`.
    reason: &'static str,
}

impl AttemptError {
    fn fatal(error: ProviderError) -> AttemptError {
        AttemptError {
            error,
            retryable: false,
            retry_after: None,
            max_retries: None,
            reason: "fatal",
        }
    }

    fn retryable(error: ProviderError, reason: &'static str) -> AttemptError {
        AttemptError {
            error,
            retryable: true,
            retry_after: None,
            max_retries: None,
            reason,
        }
    }
}

const MAX_ERROR_BODY: u64 = 64 * 1024;
/// Bound on a server's self-description (`/v1/models` lists can be long on routers).
const MAX_INFO_BODY: u64 = 4 * 1024 * 1024;
const MAX_ERROR_TEXT: usize = 500;
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

impl HttpClient {
    pub fn new(settings: HttpSettings) -> HttpClient {
        HttpClient {
            settings,
            agent: OnceLock::new(),
        }
    }

    fn agent(&self) -> &ureq::Agent {
        self.agent.get_or_init(|| {
            let config = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(self.settings.connect_timeout))
                .timeout_per_read(Some(self.settings.idle_timeout))
                .user_agent(format!("prime-agent/{}", crate::VERSION))
                .build();
            let connector =
                ().chain(ConnectProxyConnector::default())
                    .chain(AbortableTcpConnector)
                    .chain(RustlsConnector::default());
            ureq::Agent::with_parts(config, connector, AbortableResolver)
        })
    }

    /// POSTs `request` and streams the SSE reply through a fresh decoder per attempt.
    /// Retries 429, 5xx and connection failures (never once a delta reached the client), and
    /// reports each wait and its end through `on_event` (`Retrying`, `Recovered`,
    /// `RetriesExhausted`).
    pub fn stream<D: StreamDecoder>(
        &self,
        request: &PostRequest<'_>,
        abort: &AbortFlag,
        mut new_decoder: impl FnMut() -> D,
        on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, ProviderError> {
        let mut attempt = 0u32;
        loop {
            abort.check().map_err(|_| ProviderError::Aborted)?;
            let mut streamed = false;
            // A retried call has recovered once its first delta arrives (the client hears
            // so before the text), or when it completes without any.
            let result = self.attempt(request, abort, new_decoder(), &mut |ev| {
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
            let max_attempts = failure
                .max_retries
                .unwrap_or(self.settings.max_retries)
                .min(self.settings.max_retries);
            if !failure.retryable || streamed || attempt >= max_attempts {
                if attempt > 0 && !streamed {
                    on_event(StreamEvent::RetriesExhausted {
                        attempt,
                        error: failure.error.to_string(),
                    });
                }
                return Err(failure.error);
            }
            let delay = failure
                .retry_after
                .unwrap_or_else(|| self.settings.retry_base * 2u32.saturating_pow(attempt));
            attempt += 1;
            log::warn!(
                "{}: {}; retry {attempt}/{max_attempts} in {:.1} s",
                request.label,
                failure.error,
                delay.as_secs_f64()
            );
            on_event(StreamEvent::Retrying(RetryWait {
                attempt,
                max_attempts,
                delay,
                reason: failure.reason,
                error: failure.error.to_string(),
            }));
            abort.sleep(delay).map_err(|_| ProviderError::Aborted)?;
        }
    }

    /// GETs `url` and parses a JSON body, for facts a server tells about itself (the model's
    /// context window). Best effort: `None` on any failure, never retried, bounded by
    /// `timeout` as a whole, and cut short by `abort`.
    pub fn get_json(
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
        let mut builder = self.agent().get(url);
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
        let mut body = Vec::new();
        response
            .into_body()
            .into_reader()
            .take(MAX_INFO_BODY)
            .read_to_end(&mut body)
            .ok()?;
        serde_json::from_slice(&body).ok()
    }

    fn attempt<D: StreamDecoder>(
        &self,
        request: &PostRequest<'_>,
        abort: &AbortFlag,
        mut decoder: D,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, AttemptError> {
        let slot = Arc::new(CallSlot::default());
        let hook_slot = slot.clone();
        // Both guards live until this attempt returns, which is also when the socket is
        // dropped (or pooled): a later cancel must not touch a connection another call uses.
        let _hook = abort.on_abort(move || hook_slot.abort());
        let _current = CurrentSlot::enter(slot.clone());

        log::debug!("{}: POST {}", request.label, request.url);
        let mut builder = self.agent().post(request.url);
        for (name, value) in request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let response = builder
            .send(request.body)
            .map_err(|e| classify_ureq_error(&e, request.url, &slot))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(status_error(status, response));
        }
        let mut reader = response.into_body().into_reader();
        let mut sse = SseDecoder::new();
        let mut events = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted && !abort.is_aborted() => continue,
                Err(e) => return Err(read_error(&e, &slot, self.settings.idle_timeout)),
            };
            if n == 0 {
                sse.finish(&mut events);
            } else {
                sse.feed(&buf[..n], &mut events);
                if sse.overflowed() {
                    let why = format!(
                        "the model server sent a stream event larger than {} MiB",
                        crate::provider::sse::MAX_EVENT_BYTES >> 20
                    );
                    return Err(AttemptError::fatal(ProviderError::Stream(why)));
                }
            }
            for event in events.drain(..) {
                abort
                    .check()
                    .map_err(|_| AttemptError::fatal(ProviderError::Aborted))?;
                if decoder
                    .on_event(&event, emit)
                    .map_err(AttemptError::fatal)?
                {
                    return decoder.finish().map_err(AttemptError::fatal);
                }
            }
            if n == 0 {
                // A body that ends without a finish is a dropped connection, not an answer.
                return decoder
                    .finish()
                    .map_err(|error| AttemptError::retryable(error, "stream_dropped"));
            }
        }
    }
}

fn status_error(status: u16, response: ureq::http::Response<ureq::Body>) -> AttemptError {
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s).min(MAX_RETRY_AFTER));
    let mut body = Vec::new();
    // Best effort: the status alone is still a useful error if the body is unreadable.
    let _ = response
        .into_body()
        .into_reader()
        .take(MAX_ERROR_BODY)
        .read_to_end(&mut body);
    let message = error_text(&String::from_utf8_lossy(&body), status);
    // A server that cannot take this kind of input (images for a text-only llama.cpp answer
    // 500) answers the same way every time: retrying only makes the user wait.
    let unsupported = is_unsupported_input(&message);
    AttemptError {
        error: ProviderError::Status { status, message },
        retryable: (status == 429 || status >= 500) && !unsupported,
        retry_after,
        max_retries: None,
        reason: if status == 429 {
            "rate_limited"
        } else {
            "server_error"
        },
    }
}

/// Whether an error text says the request's input type is unsupported ("image input is not
/// supported", "this model does not support image input", "multimodal ... unsupported").
pub fn is_unsupported_input(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    let negative = [
        "not supported",
        "unsupported",
        "does not support",
        "doesn't support",
    ]
    .iter()
    .any(|n| m.contains(n));
    let input = [
        "image",
        "input type",
        "multimodal",
        "vision",
        "audio",
        "content type",
    ]
    .iter()
    .any(|k| m.contains(k));
    negative && input
}

/// The provider's own words from an error body (`{"error":{"message":…}}`, `{"message":…}`,
/// `{"error":"…"}`, or plain text), on one line and bounded.
pub fn error_text(body: &str, status: u16) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let err = v.get("error").unwrap_or(v);
        err.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| err.as_str())
            .or_else(|| v.get("message").and_then(|m| m.as_str()))
            .or_else(|| v.get("detail").and_then(|m| m.as_str()))
            .map(str::to_owned)
    });
    let text = from_json.unwrap_or_else(|| body.to_owned());
    let text = one_line(&text);
    if text.is_empty() {
        return reason_phrase(status).to_owned();
    }
    text
}

/// Collapses whitespace runs (including newlines) and truncates at a char boundary.
pub fn one_line(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.len() > MAX_ERROR_TEXT {
            let mut cut = MAX_ERROR_TEXT;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push('…');
            break;
        }
    }
    out
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "HTTP error",
    }
}

fn classify_ureq_error(e: &ureq::Error, url: &str, slot: &CallSlot) -> AttemptError {
    if slot.aborted.load(Ordering::SeqCst) {
        return AttemptError::fatal(ProviderError::Aborted);
    }
    let host = host_of(url);
    let mut max_retries = None;
    let (retryable, text) = match e {
        ureq::Error::Io(io) => {
            // A local server that refuses connections is down, and will not come up within
            // the backoff: one retry covers a restart, more only keep the user waiting.
            if io.kind() == io::ErrorKind::ConnectionRefused && is_local_host(host) {
                max_retries = Some(1);
            }
            (
                is_connection_error(io.kind()),
                format!("Connection to {host} failed: {io}"),
            )
        }
        // Only a connect timeout is worth another try; the others already waited a full
        // idle timeout for the server.
        ureq::Error::Timeout(t) => (
            *t == ureq::Timeout::Connect,
            format!("Request to {host} timed out ({t})"),
        ),
        ureq::Error::ConnectionFailed => (true, format!("Connection to {host} failed")),
        ureq::Error::HostNotFound => (false, format!("Host not found: {host}")),
        ureq::Error::BadUri(_) | ureq::Error::Http(_) => {
            return AttemptError::fatal(ProviderError::Config(format!(
                "Invalid provider URL {url:?}: {e}"
            )))
        }
        other => (false, format!("Request to {host} failed: {other}")),
    };
    AttemptError {
        error: ProviderError::Transport(one_line(&text)),
        retryable,
        retry_after: None,
        max_retries,
        reason: "connection",
    }
}

fn read_error(e: &io::Error, slot: &CallSlot, idle: Duration) -> AttemptError {
    if slot.aborted.load(Ordering::SeqCst) {
        return AttemptError::fatal(ProviderError::Aborted);
    }
    let text = e.to_string();
    if e.kind() == io::ErrorKind::TimedOut || text.contains("timeout") {
        // Not retried: the user has already waited a full idle timeout.
        return AttemptError::fatal(ProviderError::Transport(format!(
            "The model stream stalled: no data for {:.1} s",
            idle.as_secs_f64()
        )));
    }
    AttemptError::retryable(
        ProviderError::Transport(one_line(&format!(
            "The connection dropped mid-stream: {text}"
        ))),
        "stream_dropped",
    )
}

fn is_connection_error(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::TimedOut
    )
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// Whether `host` (`name`, `name:port`, `[v6]:port`) is this machine or a private network:
/// loopback, RFC 1918, link-local, IPv6 unique-local, `localhost`, `*.local`.
pub fn is_local_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if host.matches(':').count() == 1 {
        host.split(':').next().unwrap_or(host)
    } else {
        host
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") || name.ends_with(".local") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(std::net::IpAddr::V6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_private() || v4.is_link_local())
        }
        Err(_) => false,
    }
}

/// The sockets of one attempt, shut down by the attempt's abort hook.
#[derive(Default)]
struct CallSlot {
    aborted: AtomicBool,
    socket: Mutex<Option<Weak<TcpStream>>>,
}

impl CallSlot {
    fn abort(&self) {
        let mut socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        self.aborted.store(true, Ordering::SeqCst);
        if let Some(stream) = socket.take().and_then(|w| w.upgrade()) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Makes `stream` the socket a cancel shuts down. Under the same lock as `abort`, so a
    /// cancel racing with this either sees the socket or is seen here.
    fn adopt(&self, stream: &Arc<TcpStream>) -> io::Result<()> {
        let mut socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        if self.aborted.load(Ordering::SeqCst) {
            let _ = stream.shutdown(Shutdown::Both);
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "request aborted",
            ));
        }
        *socket = Some(Arc::downgrade(stream));
        Ok(())
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<CallSlot>>> = const { RefCell::new(None) };
}

/// Makes a slot current on this thread for the guard's lifetime.
struct CurrentSlot(Option<Arc<CallSlot>>);

impl CurrentSlot {
    fn enter(slot: Arc<CallSlot>) -> CurrentSlot {
        CurrentSlot(CURRENT.with(|c| c.replace(Some(slot))))
    }
}

impl Drop for CurrentSlot {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

fn current_slot() -> Option<Arc<CallSlot>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Waits for a helper thread's answer, giving up as soon as the current call is aborted. The
/// helper finishes on its own (bounded by the connect or DNS timeout) and its result is dropped.
fn wait_abortable<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ureq::Error> {
    let slot = current_slot();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("http-connect".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(ureq::Error::Io)?;
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Timeout) => {
                if slot
                    .as_ref()
                    .is_some_and(|s| s.aborted.load(Ordering::SeqCst))
                {
                    return Err(ureq::Error::Io(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "request aborted",
                    )));
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(ureq::Error::Io(io::Error::other("connect helper died")))
            }
        }
    }
}

/// DNS on a helper thread so a cancel does not wait for a slow resolver.
#[derive(Debug)]
struct AbortableResolver;

impl Resolver for AbortableResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        // IP literals resolve without a lookup; no thread needed.
        let literal = uri
            .host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .is_some_and(|h| h.parse::<std::net::IpAddr>().is_ok());
        if literal {
            return DefaultResolver::default().resolve(uri, config, timeout);
        }
        let (uri, config) = (uri.clone(), config.clone());
        wait_abortable(move || DefaultResolver::default().resolve(&uri, &config, timeout))?
    }
}

/// Opens plain TCP sockets wrapped in `SocketTransport` (TLS is layered on top by the chain).
#[derive(Debug)]
struct AbortableTcpConnector;

impl<In: Transport> Connector<In> for AbortableTcpConnector {
    type Out = Either<In, SocketTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails<'_>,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(chained) = chained {
            return Ok(Some(Either::A(chained)));
        }
        let addrs: Vec<SocketAddr> = details.addrs.iter().copied().collect();
        let budget = details.timeout.not_zero().map(|t| *t);
        let stream = wait_abortable(move || connect_any(&addrs, budget))??;
        let _ = stream.set_nodelay(true);
        let config = details.config;
        Ok(Some(Either::B(SocketTransport {
            stream: Arc::new(stream),
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
            read_timeout: None,
            write_timeout: None,
            adopted_by: Weak::new(),
        })))
    }
}

fn connect_any(addrs: &[SocketAddr], budget: Option<Duration>) -> Result<TcpStream, ureq::Error> {
    let mut last = io::Error::new(io::ErrorKind::ConnectionRefused, "no address to connect to");
    for addr in addrs {
        let result = match budget {
            Some(t) => TcpStream::connect_timeout(addr, t),
            None => TcpStream::connect(addr),
        };
        match result {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(ureq::Error::Timeout(ureq::Timeout::Connect))
            }
            Err(e) => last = e,
        }
    }
    Err(ureq::Error::Io(last))
}

/// A TCP transport that registers its socket with the current call before every I/O.
struct SocketTransport {
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// The slot this socket was last handed to (compared by identity only).
    adopted_by: Weak<CallSlot>,
}

impl std::fmt::Debug for SocketTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketTransport")
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

impl SocketTransport {
    /// Hands the socket to the call now running on this thread (pooled sockets change calls).
    fn adopt(&mut self) -> Result<(), ureq::Error> {
        if let Some(slot) = current_slot() {
            if !Weak::ptr_eq(&self.adopted_by, &Arc::downgrade(&slot)) {
                slot.adopt(&self.stream)?;
                self.adopted_by = Arc::downgrade(&slot);
            }
        }
        Ok(())
    }
}

fn timeout_io(kind: io::ErrorKind, reason: ureq::Timeout, e: io::Error) -> ureq::Error {
    if kind == io::ErrorKind::TimedOut || kind == io::ErrorKind::WouldBlock {
        ureq::Error::Timeout(reason)
    } else {
        ureq::Error::Io(e)
    }
}

impl Transport for SocketTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.adopt()?;
        let timeout = timeout.for_write();
        if timeout.after.is_zero() {
            return Err(ureq::Error::Timeout(timeout.reason));
        }
        let want = timeout.not_zero().map(|t| *t);
        if want != self.write_timeout {
            self.stream.set_write_timeout(want)?;
            self.write_timeout = want;
        }
        let output = &self.buffers.output()[..amount];
        (&*self.stream)
            .write_all(output)
            .map_err(|e| timeout_io(e.kind(), timeout.reason, e))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.adopt()?;
        let timeout = timeout.for_read();
        if timeout.after.is_zero() {
            return Err(ureq::Error::Timeout(timeout.reason));
        }
        let want = timeout.not_zero().map(|t| *t);
        if want != self.read_timeout {
            self.stream.set_read_timeout(want)?;
            self.read_timeout = want;
        }
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match (&*self.stream).read(input) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(timeout_io(e.kind(), timeout.reason, e)),
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // A pooled socket is reusable only if the peer has sent nothing and not closed it.
        let stream = &*self.stream;
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let open =
            matches!(stream.peek(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).is_ok() && open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_prefers_the_providers_message() {
        assert_eq!(
            error_text(r#"{"error":{"message":"unauthorized in test"}}"#, 401),
            "unauthorized in test"
        );
        assert_eq!(error_text(r#"{"error":"bad key"}"#, 401), "bad key");
        assert_eq!(
            error_text(
                r#"{"type":"error","error":{"type":"x","message":"m"}}"#,
                400
            ),
            "m"
        );
        assert_eq!(error_text("upstream\n  broke", 502), "upstream broke");
        assert_eq!(error_text("", 503), "Service Unavailable");
        let huge = "é".repeat(5000);
        let t = error_text(&huge, 500);
        assert!(t.len() <= MAX_ERROR_TEXT + 4, "{}", t.len());
    }

    #[test]
    fn local_hosts() {
        for h in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "10.1.2.3",
            "192.168.0.9:80",
            "172.16.0.1",
            "[::1]:8000",
            "[fd00::5]",
            "gpu-box.local:8000",
        ] {
            assert!(is_local_host(h), "{h}");
        }
        for h in [
            "api.openai.com",
            "8.8.8.8:443",
            "172.32.0.1",
            "[2001:db8::1]:80",
        ] {
            assert!(!is_local_host(h), "{h}");
        }
    }

    #[test]
    fn unsupported_input_texts() {
        assert!(is_unsupported_input(
            "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
        ));
        assert!(is_unsupported_input(
            "This model does not support image input."
        ));
        assert!(is_unsupported_input("Multimodal content is unsupported"));
        assert!(!is_unsupported_input("internal error in test"));
        assert!(!is_unsupported_input(
            "model overloaded, not supported right now"
        ));
    }

    #[test]
    fn host_of_urls() {
        assert_eq!(host_of("http://127.0.0.1:9/v1/chat"), "127.0.0.1:9");
        assert_eq!(host_of("https://api.openai.com"), "api.openai.com");
    }

    #[test]
    fn abort_before_adopt_shuts_the_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stream = Arc::new(TcpStream::connect(addr).expect("connect"));
        let (mut server, _) = listener.accept().expect("accept");
        let slot = CallSlot::default();
        slot.abort();
        assert!(slot.adopt(&stream).is_err());
        let mut buf = [0u8; 1];
        assert_eq!(server.read(&mut buf).expect("read"), 0, "peer sees EOF");
    }
}
