//! Traces: W3C trace context in and out, and spans exported over OTLP/HTTP (issue 35,
//! docs/tracing.md).
//!
//! A prompt's `params._meta.traceparent` (with `tracestate` and `baggage`, the root `_meta`
//! keys ACP reserves for them) becomes the parent of its turn's span. The span doing a piece
//! of work is the thread's *current* context (`enter`); the HTTP layers read it
//! (`propagation_headers`) so model requests and HTTP MCP calls carry a `traceparent`.
//!
//! Recording happens only when an OTLP endpoint is configured (`init_from_env`): then every
//! `Span` gets fresh ids, and a finished one goes through a bounded queue to the `otel-export`
//! thread (`export.rs`), which drops and counts when the queue is full. Without an exporter a
//! span records nothing and starts no clock: it only passes its parent's context on
//! unchanged, as the OpenTelemetry API does without an SDK, so a client's trace still links
//! the model server's spans to its own.

mod export;
pub(crate) mod otlp;

pub(crate) use export::{init_from_env, shutdown};

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Whether spans are recorded (an exporter runs): callers skip building names and
/// attributes otherwise.
pub(crate) fn recording() -> bool {
    export::active()
}

/// The W3C trace context of one span: what a `traceparent` carries, and the vendor
/// `tracestate` and `baggage` that travel with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// Trace flags; bit 0 is `sampled`.
    pub flags: u8,
    pub state: Option<String>,
    pub baggage: Option<String>,
}

/// Longest `tracestate` or `baggage` we take and pass on (W3C: 512 and 8,192 bytes is what a
/// vendor must at least propagate; beyond it a header is likely abuse).
const MAX_STATE: usize = 512;
const MAX_BAGGAGE: usize = 8192;

impl SpanContext {
    /// Parses a `traceparent` (W3C Trace Context §3.2): `None` for anything invalid, which
    /// the caller then ignores, as the spec says (an invalid header starts a new trace).
    pub(crate) fn parse(traceparent: &str) -> Option<SpanContext> {
        let s = traceparent.trim();
        let parts: Vec<&str> = s.split('-').collect();
        let [version, trace, span, flags, rest @ ..] = parts.as_slice() else {
            return None;
        };
        // Version ff is invalid; version 00 has exactly four fields; a later version may add
        // fields after the flags, which a version-00 reader ignores.
        let version = hex::<1>(version)?[0];
        if version == 0xff || (version == 0 && !rest.is_empty()) {
            return None;
        }
        let trace_id = hex::<16>(trace)?;
        let span_id = hex::<8>(span)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(SpanContext {
            trace_id,
            span_id,
            flags: hex::<1>(flags)?[0],
            state: None,
            baggage: None,
        })
    }

    /// The context a prompt's `params._meta` names (`traceparent`, `tracestate`, `baggage`);
    /// `None` when there is none or it is invalid.
    pub(crate) fn from_meta(params: &Value) -> Option<SpanContext> {
        let meta = params.get("_meta")?;
        let text = |key: &str, cap: usize| {
            meta.get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.len() <= cap && v.is_ascii())
                .map(str::to_owned)
        };
        let mut ctx = SpanContext::parse(meta.get("traceparent")?.as_str()?)?;
        ctx.state = text("tracestate", MAX_STATE);
        ctx.baggage = text("baggage", MAX_BAGGAGE);
        Some(ctx)
    }

    /// The `traceparent` header value (version 00).
    pub(crate) fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            to_hex(&self.trace_id),
            to_hex(&self.span_id),
            self.flags
        )
    }

    pub(crate) fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// The first line of `text`, at most 200 characters: a status message, not a log.
pub(crate) fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect()
}

/// Lower-case hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly `2 * N` lower-case hex digits (W3C forbids upper case).
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let digits = s.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

thread_local! {
    /// The context of the span this thread works for (`enter`).
    static CURRENT: RefCell<Option<SpanContext>> = const { RefCell::new(None) };
}

/// The context of the span the calling thread works for, if any.
pub(crate) fn current() -> Option<SpanContext> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes `ctx` the thread's current context until the guard drops (then the previous one is
/// back): spans started meanwhile are its children, HTTP requests carry it.
#[must_use = "the context is current only while the guard lives"]
pub(crate) struct Entered(Option<SpanContext>);

pub(crate) fn enter(ctx: Option<SpanContext>) -> Entered {
    Entered(CURRENT.with(|c| c.replace(ctx)))
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// The headers an outgoing request carries for the current context (`traceparent`, then
/// `tracestate` and `baggage` when the context has them); none without a current context.
pub(crate) fn propagation_headers() -> Vec<(&'static str, String)> {
    let Some(ctx) = current() else {
        return Vec::new();
    };
    let mut headers = vec![("traceparent", ctx.traceparent())];
    if let Some(state) = ctx.state {
        headers.push(("tracestate", state));
    }
    if let Some(baggage) = ctx.baggage {
        headers.push(("baggage", baggage));
    }
    headers
}

/// OTLP's `SpanKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Internal = 1,
    Client = 3,
}

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl From<&str> for Attr {
    fn from(v: &str) -> Attr {
        Attr::Str(v.to_owned())
    }
}

impl From<String> for Attr {
    fn from(v: String) -> Attr {
        Attr::Str(v)
    }
}

impl From<u64> for Attr {
    fn from(v: u64) -> Attr {
        Attr::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u32> for Attr {
    fn from(v: u32) -> Attr {
        Attr::Int(i64::from(v))
    }
}

impl From<bool> for Attr {
    fn from(v: bool) -> Attr {
        Attr::Bool(v)
    }
}

/// A finished span, as the exporter encodes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpanData {
    pub context: SpanContext,
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attrs: Vec<(&'static str, Attr)>,
    /// `Some(message)`: the span's status is `ERROR`.
    pub error: Option<String>,
}

/// One operation. Recording (an exporter runs, the parent is sampled) it has its own ids and
/// is queued for export when dropped; otherwise it carries its parent's context unchanged (or
/// nothing) and costs a check of a static.
pub(crate) struct Span {
    context: Option<SpanContext>,
    data: Option<Box<SpanData>>,
}

impl Span {
    /// A span under `parent` (`None`: a new trace's root).
    pub(crate) fn start(name: &str, kind: Kind, parent: Option<&SpanContext>) -> Span {
        let recording = export::active() && parent.is_none_or(SpanContext::sampled);
        if !recording {
            return Span {
                context: parent.cloned(),
                data: None,
            };
        }
        let ids = uuid::Uuid::new_v4();
        let ids = ids.as_bytes();
        let mut span_id = [0u8; 8];
        span_id.copy_from_slice(&ids[8..]);
        span_id[0] |= 1; // Never all zero.
        let context = match parent {
            Some(p) => SpanContext {
                span_id,
                ..p.clone()
            },
            None => {
                let mut trace_id = *uuid::Uuid::new_v4().as_bytes();
                trace_id[0] |= 1;
                SpanContext {
                    trace_id,
                    span_id,
                    flags: 1,
                    state: None,
                    baggage: None,
                }
            }
        };
        Span {
            data: Some(Box::new(SpanData {
                context: context.clone(),
                parent: parent.map(|p| p.span_id),
                name: name.to_owned(),
                kind,
                start_ns: now_ns(),
                end_ns: 0,
                attrs: Vec::new(),
                error: None,
            })),
            context: Some(context),
        }
    }

    /// A span under the thread's current context.
    pub(crate) fn child(name: &str, kind: Kind) -> Span {
        Span::start(name, kind, current().as_ref())
    }

    /// What children and outgoing requests name as their parent.
    pub(crate) fn context(&self) -> Option<SpanContext> {
        self.context.clone()
    }

    /// Whether attributes are kept: callers skip building costly ones otherwise.
    pub(crate) fn is_recording(&self) -> bool {
        self.data.is_some()
    }

    pub(crate) fn set(&mut self, key: &'static str, value: impl Into<Attr>) {
        if let Some(data) = &mut self.data {
            data.attrs.push((key, value.into()));
        }
    }

    /// Marks the span failed (`Status.code = ERROR`).
    pub(crate) fn fail(&mut self, message: impl Into<String>) {
        if let Some(data) = &mut self.data {
            data.error = Some(message.into());
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(mut data) = self.data.take() {
            data.end_ns = now_ns();
            export::submit(*data);
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    // See: W3C Trace Context §3.2 (invalid values are ignored, never an error).
    #[test]
    fn traceparent_parsing() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cases: &[(&str, bool)] = &[
            (good, true),
            (
                "  00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ",
                true,
            ),
            // A later version may add fields; we read the first four.
            (
                "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what",
                true,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                false,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                false,
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
                false,
            ),
            ("", false),
            ("garbage", false),
        ];
        for (text, valid) in cases {
            assert_eq!(SpanContext::parse(text).is_some(), *valid, "{text:?}");
        }
        let ctx = SpanContext::parse(good).unwrap();
        assert_eq!(ctx.traceparent(), good);
        assert!(ctx.sampled());
        assert_eq!(
            ctx.span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
    }

    #[test]
    fn context_from_prompt_meta() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = SpanContext::from_meta(&json!({"_meta": {
            "traceparent": tp, "tracestate": "a=1,b=2", "baggage": "user=x"}}))
        .unwrap();
        assert_eq!(ctx.state.as_deref(), Some("a=1,b=2"));
        assert_eq!(ctx.baggage.as_deref(), Some("user=x"));
        for params in [
            json!({}),
            json!({"_meta": {}}),
            json!({"_meta": {"traceparent": 7}}),
            json!({"_meta": {"traceparent": "00-bad"}}),
            json!({"_meta": {"tracestate": "a=1"}}),
        ] {
            assert_eq!(SpanContext::from_meta(&params), None, "{params}");
        }
        let long = "x".repeat(MAX_STATE + 1);
        let ctx =
            SpanContext::from_meta(&json!({"_meta": {"traceparent": tp, "tracestate": long}}));
        assert_eq!(
            ctx.unwrap().state,
            None,
            "an oversized tracestate is dropped"
        );
    }

    #[test]
    fn without_an_exporter_a_span_passes_its_parent_on() {
        let parent = SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let span = Span::start("turn", Kind::Internal, parent.as_ref());
        assert!(!span.is_recording());
        assert_eq!(span.context(), parent);
        assert!(Span::start("root", Kind::Internal, None)
            .context()
            .is_none());
        let _in = enter(span.context());
        let headers = propagation_headers();
        assert_eq!(
            headers,
            vec![(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()
            )]
        );
        drop(_in);
        assert!(propagation_headers().is_empty(), "the guard restores");
    }
}
