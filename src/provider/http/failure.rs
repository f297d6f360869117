//! Why an attempt failed and whether to try again: status, transport and read errors
//! classified into retryable or not (with per-kind limits), and the provider's own words
//! extracted from an error body.

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::socket::CallSlot;
use crate::provider::ProviderError;

/// Why one attempt failed, and whether another attempt may help.
pub(crate) struct AttemptError {
    pub(super) error: ProviderError,
    pub(super) retryable: bool,
    pub(super) retry_after: Option<Duration>,
    /// A lower retry limit than the settings' for this kind of failure.
    pub(super) max_retries: Option<u32>,
    /// The `autoRetry` reason: `rate_limited`, `server_error`, `connection`, `stream_dropped`,
    /// `stream_error`.
    pub(super) reason: &'static str,
    /// Whether a retry is worth it even after deltas reached the client: the server itself
    /// voided the reply (a transient error event inside the stream), so the partial reply is
    /// dropped and the call made again, as upstream retries an errored assistant message.
    pub(super) restarts: bool,
}

impl AttemptError {
    pub(super) fn fatal(error: ProviderError) -> AttemptError {
        AttemptError {
            error,
            retryable: false,
            retry_after: None,
            max_retries: None,
            reason: "fatal",
            restarts: false,
        }
    }

    pub(super) fn retryable(error: ProviderError, reason: &'static str) -> AttemptError {
        AttemptError {
            error,
            retryable: true,
            retry_after: None,
            max_retries: None,
            reason,
            restarts: false,
        }
    }

    /// What a decoder's error means for the attempt: a transient error event the server sent
    /// inside the stream (a 5xx or 429 code, `ProviderError::Status` from the decoder) is
    /// retried, even after a partial reply (`restarts`); anything else the decoder rejects
    /// (unreadable JSON, a refusal, an unknown error event) is final.
    pub(super) fn from_decoder(error: ProviderError) -> AttemptError {
        match error {
            // Classified like the same status as an answer (not an overflow, not a request the
            // server could not parse), then marked as one that voids a partial reply.
            // The error keeps the event's own words (and `data.kind` "model_protocol").
            ProviderError::Status { status, message } => {
                let classified = classify_status(status, &message, None);
                AttemptError {
                    error: ProviderError::Stream(message),
                    restarts: classified.retryable,
                    reason: "stream_error",
                    ..classified
                }
            }
            other => AttemptError::fatal(other),
        }
    }
}

/// A transient server failure announced by an error event inside a stream, as the status it
/// stands for, or `None` for any other error event. `code` is the event's numeric `code`
/// (llama.cpp, vLLM, OpenAI-compatible gateways: `{"error":{"code":500,…}}`) and `kind` its
/// `type` (`server_error`; Anthropic's `overloaded_error`, `api_error`, `rate_limit_error`).
pub(crate) fn transient_event_status(code: Option<u64>, kind: Option<&str>) -> Option<u16> {
    match (code, kind) {
        (Some(c), _) if (500..600).contains(&c) || c == 429 => u16::try_from(c).ok(),
        (_, Some("server_error" | "api_error")) => Some(500),
        (_, Some("overloaded_error")) => Some(529),
        (_, Some("rate_limit_error")) => Some(429),
        _ => None,
    }
}

const MAX_ERROR_BODY: u64 = 64 * 1024;
const MAX_ERROR_TEXT: usize = 500;
/// An error answer, classified, with the wait its headers name: `retry-after-ms` (OpenAI's),
/// else `retry-after` in seconds. Not capped here: `retry.provider.maxRetryDelayMs` decides
/// what a retry honours, and a usage wait what it may wait.
pub(super) fn status_error(
    status: u16,
    response: ureq::http::Response<ureq::Body>,
) -> AttemptError {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(super::usage::retry_after_header)
    };
    let retry_after = header("retry-after-ms")
        .map(|d| d / 1000)
        .or_else(|| header("retry-after"));
    let mut body = Vec::new();
    // Best effort: the status alone is still a useful error if the body is unreadable.
    let _ = response
        .into_body()
        .into_reader()
        .take(MAX_ERROR_BODY)
        .read_to_end(&mut body);
    classify_status(status, &String::from_utf8_lossy(&body), retry_after)
}

/// An error answer's status and body, classified (pure: the table tests' entry point).
pub(crate) fn classify_status(
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
) -> AttemptError {
    let message = error_text(body, status);
    // A server that cannot take this kind of input (images for a text-only llama.cpp answer
    // 500) answers the same way every time: retrying only makes the user wait.
    let unsupported = is_unsupported_input(&message);
    // Nor does a request too long for the window get shorter by waiting (some local servers
    // answer it with a 500); the turn compacts and retries it instead.
    let overflow = is_context_overflow(&message);
    // Nor one the server could not parse (llama.cpp answers a tool call with invalid JSON
    // arguments in the history with a 500): the same bytes fail the same way.
    let unparsable = is_unparsable_request(&message);
    // A usage limit's answer may name its reset in the body (Google's `RetryInfo`, "try again
    // in ~N min") rather than in a header.
    let retry_after = retry_after.or_else(|| {
        (status == 429)
            .then(|| super::usage::reset_in_body(body))
            .flatten()
    });
    AttemptError {
        error: ProviderError::Status { status, message },
        retryable: (status == 429 || status >= 500) && !unsupported && !overflow && !unparsable,
        retry_after,
        max_retries: None,
        reason: if status == 429 {
            "rate_limited"
        } else {
            "server_error"
        },
        restarts: false,
    }
}

/// Whether an error text says the request's input type is unsupported ("image input is not
/// supported", "this model does not support image input", "multimodal ... unsupported").
pub(crate) fn is_unsupported_input(message: &str) -> bool {
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

/// Whether an error text says the server could not parse the request or a tool call in it
/// (llama.cpp's `Failed to parse tool call arguments as JSON`, its `[json.exception.parse_error…]`,
/// vLLM's and Ollama's JSON decode errors): a request that will fail the same way every time.
pub(crate) fn is_unparsable_request(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    const PHRASES: &[&str] = &[
        "failed to parse",
        "could not parse",
        "unable to parse",
        "cannot parse",
        "parse error",
        "json.exception",
        "invalid json",
        "jsondecodeerror",
        "json decode error",
        "cannot unmarshal",
        "invalid character",
    ];
    PHRASES.iter().any(|p| m.contains(p))
}

/// Whether an error text says the request exceeds the model's context window, in the words
/// of OpenAI-compatible APIs (OpenAI, OpenRouter, Groq, xAI, vLLM), Anthropic, Google, and the
/// local servers (llama.cpp, LM Studio, Ollama).
pub(crate) fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    const PHRASES: &[&str] = &[
        // Anthropic; Bedrock.
        "prompt is too long",
        "input is too long",
        // OpenAI (`context_length_exceeded`), OpenRouter, vLLM.
        "context_length_exceeded",
        "context length exceeded",
        "maximum context length",
        "exceeds the context window",
        "longer than the maximum model length",
        "longer than the model's context length",
        // Groq; xAI; Google.
        "reduce the length of the messages",
        "maximum prompt length",
        "input token count",
        // llama.cpp; LM Studio; Ollama.
        "exceeds the available context size",
        "exceed_context_size_error",
        "greater than the context length",
        "exceeded max context length",
        "exceeds the context length",
        // Kimi, MiniMax, others.
        "exceeded model token limit",
        "context window exceeds limit",
        "too many tokens",
        "token limit exceeded",
    ];
    // Rate limits count tokens too (Bedrock's throttling: "Too many tokens, please wait
    // before trying again."): waiting helps them, compacting does not.
    const RATE: &[&str] = &["rate limit", "per minute", "please wait", "throttl"];
    PHRASES.iter().any(|p| m.contains(p)) && !RATE.iter().any(|r| m.contains(r))
}

/// The provider's own words from an error body (`{"error":{"message":…}}`, `{"message":…}`,
/// `{"error":"…"}`, or plain text), on one line and bounded.
pub(crate) fn error_text(body: &str, status: u16) -> String {
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

/// A stream's error event in words: `message (code)`, or whichever of the two there is, with
/// `fallback` for a missing message; on one line.
pub(crate) fn message_and_code(
    message: Option<&str>,
    code: Option<String>,
    fallback: &str,
) -> String {
    one_line(&match (message, code) {
        (Some(m), Some(c)) => format!("{m} ({c})"),
        (Some(m), None) => m.to_owned(),
        (None, Some(c)) => format!("{fallback} ({c})"),
        (None, None) => fallback.to_owned(),
    })
}

/// Collapses whitespace runs (including newlines) and truncates at a char boundary.
pub(crate) fn one_line(text: &str) -> String {
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

pub(super) fn classify_ureq_error(e: &ureq::Error, url: &str, slot: &CallSlot) -> AttemptError {
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
        restarts: false,
    }
}

pub(super) fn read_error(e: &io::Error, slot: &CallSlot, idle: Duration) -> AttemptError {
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
pub(crate) fn is_local_host(host: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_events_inside_a_stream_are_transient_or_final() {
        let cases: &[(Option<u64>, Option<&str>, Option<u16>)] = &[
            // llama.cpp's parser failure, gateways' upstream errors.
            (Some(500), Some("server_error"), Some(500)),
            (Some(502), None, Some(502)),
            (Some(429), None, Some(429)),
            (None, Some("server_error"), Some(500)),
            (None, Some("api_error"), Some(500)),
            (None, Some("overloaded_error"), Some(529)),
            (None, Some("rate_limit_error"), Some(429)),
            // Final: the request or the content is at fault, or nothing says otherwise.
            (Some(400), Some("invalid_request_error"), None),
            (None, Some("invalid_request_error"), None),
            (Some(7), None, None),
            (None, None, None),
        ];
        for &(code, kind, want) in cases {
            assert_eq!(
                transient_event_status(code, kind),
                want,
                "{code:?} {kind:?}"
            );
        }
        // A transient status voids a partial reply; an overflow or an unparsable request
        // inside the stream does not get better by asking again.
        let restarts = |status, message: &str| {
            AttemptError::from_decoder(ProviderError::Status {
                status,
                message: message.to_owned(),
            })
            .restarts
        };
        assert!(restarts(
            500,
            "does not match the expected peg-native format"
        ));
        assert!(!restarts(
            500,
            "request (6638 tokens) exceeds the available context size (4096 tokens)"
        ));
        assert!(!restarts(
            500,
            "Failed to parse tool call arguments as JSON"
        ));
        assert!(!AttemptError::from_decoder(ProviderError::Stream("bad".into())).retryable);
    }

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
    fn error_answers_whole_bodies() {
        // (status, body, retried, a context overflow)
        let cases: &[(u16, &str, bool, bool)] = &[
            // llama.cpp: the overflow (400) and the cut tool call in the history (500).
            (
                400,
                r#"{"error":{"code":400,"message":"request (6638 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":6638,"n_ctx":4096}}"#,
                false,
                true,
            ),
            (
                500,
                r#"{"error":{"code":500,"message":"Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, column 30: syntax error while parsing value - invalid string: missing closing quote; last read: '"print('Hello, World!'","type":"server_error"}}"#,
                false,
                false,
            ),
            // vLLM: its overflow is a 400 with the OpenAI shape.
            (
                400,
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
                false,
                true,
            ),
            // Ollama's OpenAI-compatible endpoint, and a plain-text 500 from it.
            (
                400,
                r#"{"error":{"message":"the input length exceeds the context length","type":"invalid_request_error","param":null,"code":null}}"#,
                false,
                true,
            ),
            (
                500,
                "json: cannot unmarshal number into Go value of type string",
                false,
                false,
            ),
            // Transient: retried.
            (
                503,
                r#"{"error":{"message":"Loading model","type":"unavailable_error"}}"#,
                true,
                false,
            ),
            (500, "internal error in test", true, false),
            (429, r#"{"error":{"message":"slow down"}}"#, true, false),
        ];
        for (status, body, retried, overflow) in cases {
            let e = classify_status(*status, body, None);
            assert_eq!(e.retryable, *retried, "{status} {body}");
            assert_eq!(e.error.is_context_overflow(), *overflow, "{status} {body}");
        }
        // A usage limit's reset named in the body becomes its wait; a header wins; only a
        // 429's body is read for one.
        let gemini = r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"17s"}]}}"#;
        let s = Duration::from_secs;
        assert_eq!(classify_status(429, gemini, None).retry_after, Some(s(17)));
        assert_eq!(
            classify_status(429, gemini, Some(s(3))).retry_after,
            Some(s(3))
        );
        assert_eq!(classify_status(503, gemini, None).retry_after, None);
    }

    #[test]
    fn unparsable_request_texts() {
        // (text, unparsable)
        let cases: &[(&str, bool)] = &[
            // llama.cpp, the 500 a cut tool call in the history gets.
            ("Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, column 29: syntax error while parsing value - invalid string: missing closing quote; last read: '\"print('Hello, World!'", true),
            ("[json.exception.parse_error.101] parse error at line 1, column 1", true),
            // vLLM (Python's json module); Ollama (Go's).
            ("JSONDecodeError: Unterminated string starting at: line 1 column 10 (char 9)", true),
            ("json: cannot unmarshal string into Go struct field Message.messages.tool_calls", true),
            ("invalid character '}' looking for beginning of object key string", true),
            ("Could not parse the request body", true),
            // Transient or unrelated: retried as before.
            ("internal error in test", false),
            ("model overloaded, try again", false),
            ("Service Unavailable", false),
        ];
        for (text, want) in cases {
            assert_eq!(is_unparsable_request(text), *want, "{text}");
        }
    }

    #[test]
    fn context_overflow_texts() {
        for text in [
            // Anthropic.
            "prompt is too long: 213462 tokens > 200000 maximum",
            // OpenAI.
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.",
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "context_length_exceeded",
            // vLLM.
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).",
            "The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.",
            // llama.cpp (older and current wording; the body's `type` too).
            "the request exceeds the available context size, try increasing it",
            "request (6638 tokens) exceeds the available context size (4096 tokens), try increasing it",
            "exceed_context_size_error",
            // vLLM (current wording, with max_tokens).
            "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum context length is 4096 tokens and your request has 3000 input tokens (2000 > 4096 - 3000).",
            "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.",
            // Ollama (native and OpenAI-compatible endpoints).
            "input length exceeds the context length",
            "the input length exceeds the context length",
            // LM Studio.
            "The number of tokens to keep from the initial prompt is greater than the context length.",
            // Ollama.
            "prompt too long; exceeded max context length by 120 tokens",
            // Google; xAI; Groq.
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            "This model's maximum prompt length is 131072 but the request contains 140000 tokens.",
            "Please reduce the length of the messages or completion.",
        ] {
            assert!(is_context_overflow(text), "{text}");
        }
        for text in [
            "Rate limit reached for gpt-4o: Limit 30000, Used 29000, Requested 2000 tokens per minute",
            // Bedrock's ThrottlingException (an answer or an exception event).
            "Too many tokens, please wait before trying again.",
            "Too many tokens, please wait before trying again. (throttlingException)",
            "internal error in test",
            "401 invalid api key",
            "image input is not supported",
        ] {
            assert!(!is_context_overflow(text), "{text}");
        }
        assert!(ProviderError::Status {
            status: 400,
            message: "prompt is too long: 5 tokens > 4 maximum".into()
        }
        .is_context_overflow());
        assert!(!ProviderError::Config("prompt is too long".into()).is_context_overflow());
    }

    #[test]
    fn host_of_urls() {
        assert_eq!(host_of("http://127.0.0.1:9/v1/chat"), "127.0.0.1:9");
        assert_eq!(host_of("https://api.openai.com"), "api.openai.com");
    }
}
