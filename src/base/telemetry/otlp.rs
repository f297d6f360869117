//! The OTLP `ExportTraceServiceRequest`, encoded by hand: protobuf (the OTLP/HTTP default)
//! and OTLP/JSON. Pure functions over finished spans; the field numbers are those of
//! `opentelemetry/proto/{collector/trace,trace,common,resource}/v1/*.proto`.

use super::{to_hex, Attr, SpanData};
use crate::base::json::json;
use serde_json::Value;

/// Who made the spans: the resource's attributes (`service.name` first) and the scope.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Origin {
    pub resource: Vec<(String, String)>,
    pub scope_name: &'static str,
    pub scope_version: &'static str,
}

/// A minimal protobuf writer: the wire types OTLP traces use.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub buf: Vec<u8>,
}

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

impl Writer {
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn tag(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    /// A varint field (int64, uint32, bool, enum); zero is the default and is left out.
    pub(crate) fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.tag(field, VARINT);
            self.varint(v);
        }
    }

    pub(crate) fn fixed64(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.tag(field, FIXED64);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    pub(crate) fn fixed32(&mut self, field: u32, v: u32) {
        if v != 0 {
            self.tag(field, FIXED32);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// A `bytes` or `string` field; empty is the default and is left out.
    pub(crate) fn bytes(&mut self, field: u32, v: &[u8]) {
        if !v.is_empty() {
            self.tag(field, LEN);
            self.varint(v.len() as u64);
            self.buf.extend_from_slice(v);
        }
    }

    /// An embedded message, written by `body` (present even when empty: a oneof's choice).
    pub(crate) fn message(&mut self, field: u32, body: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        body(&mut inner);
        self.tag(field, LEN);
        self.varint(inner.buf.len() as u64);
        self.buf.extend_from_slice(&inner.buf);
    }
}

/// `KeyValue { key = 1; AnyValue value = 2 }`, `AnyValue { string_value = 1; bool_value = 2;
/// int_value = 3 }`.
fn key_value(w: &mut Writer, field: u32, key: &str, value: &Attr) {
    w.message(field, |kv| {
        kv.bytes(1, key.as_bytes());
        kv.message(2, |any| match value {
            Attr::Str(s) => {
                // An empty string is still this oneof's choice: write the tag and length.
                any.tag(1, LEN);
                any.varint(s.len() as u64);
                any.buf.extend_from_slice(s.as_bytes());
            }
            Attr::Bool(b) => {
                any.tag(2, VARINT);
                any.varint(u64::from(*b));
            }
            Attr::Int(i) => {
                any.tag(3, VARINT);
                any.varint(*i as u64);
            }
        });
    });
}

/// `Span` (trace.proto): ids 1, 2, trace_state 3, parent 4, name 5, kind 6, times 7 and 8,
/// attributes 9, status 15 (`message` 2, `code` 3), flags 16.
fn span(w: &mut Writer, s: &SpanData) {
    w.bytes(1, &s.context.trace_id);
    w.bytes(2, &s.context.span_id);
    w.bytes(3, s.context.state.as_deref().unwrap_or("").as_bytes());
    w.bytes(4, s.parent.as_ref().map_or(&[][..], |p| &p[..]));
    w.bytes(5, s.name.as_bytes());
    w.uint(6, s.kind as u64);
    w.fixed64(7, s.start_ns);
    w.fixed64(8, s.end_ns.max(s.start_ns));
    for (key, value) in &s.attrs {
        key_value(w, 9, key, value);
    }
    if let Some(message) = &s.error {
        w.message(15, |st| {
            st.bytes(2, message.as_bytes());
            st.uint(3, 2);
        });
    }
    // The W3C trace flags (the low byte of `SpanFlags`).
    w.fixed32(16, u32::from(s.context.flags));
}

/// The protobuf body of an `ExportTraceServiceRequest`: `resource_spans` 1 → `resource` 1
/// (attributes 1), `scope_spans` 2 → `scope` 1 (name 1, version 2), `spans` 2.
pub(crate) fn encode_protobuf(origin: &Origin, spans: &[SpanData]) -> Vec<u8> {
    let mut w = Writer::default();
    w.message(1, |rs| {
        rs.message(1, |res| {
            for (k, v) in &origin.resource {
                key_value(res, 1, k, &Attr::Str(v.clone()));
            }
        });
        rs.message(2, |ss| {
            ss.message(1, |scope| {
                scope.bytes(1, origin.scope_name.as_bytes());
                scope.bytes(2, origin.scope_version.as_bytes());
            });
            for s in spans {
                ss.message(2, |sp| span(sp, s));
            }
        });
    });
    w.buf
}

fn json_value(value: &Attr) -> Value {
    match value {
        Attr::Str(s) => json!({ "stringValue": s }),
        // OTLP/JSON follows the protobuf JSON mapping: 64-bit integers are strings.
        Attr::Int(i) => json!({ "intValue": i.to_string() }),
        Attr::Bool(b) => json!({ "boolValue": b }),
    }
}

/// The OTLP/JSON body: lowerCamelCase names, ids as hex (not base64), enums as numbers.
pub(crate) fn encode_json(origin: &Origin, spans: &[SpanData]) -> Vec<u8> {
    let resource: Vec<Value> = origin
        .resource
        .iter()
        .map(|(k, v)| json!({ "key": k, "value": { "stringValue": v } }))
        .collect();
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            let mut v = json!({
                "traceId": to_hex(&s.context.trace_id),
                "spanId": to_hex(&s.context.span_id),
                "name": s.name,
                "kind": s.kind as u8,
                "startTimeUnixNano": s.start_ns.to_string(),
                "endTimeUnixNano": s.end_ns.max(s.start_ns).to_string(),
                "attributes": s.attrs.iter()
                    .map(|(k, a)| json!({ "key": k, "value": json_value(a) }))
                    .collect::<Vec<_>>(),
                "flags": s.context.flags,
            });
            if let Some(parent) = &s.parent {
                v["parentSpanId"] = json!(to_hex(parent));
            }
            if let Some(state) = &s.context.state {
                v["traceState"] = json!(state);
            }
            if let Some(message) = &s.error {
                v["status"] = json!({ "code": 2, "message": message });
            }
            v
        })
        .collect();
    let body = json!({ "resourceSpans": [{
        "resource": { "attributes": resource },
        "scopeSpans": [{
            "scope": { "name": origin.scope_name, "version": origin.scope_version },
            "spans": spans,
        }],
    }]});
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::{Kind, SpanContext};
    use super::*;

    #[test]
    fn writer_encodes_each_wire_type() {
        type Case = (&'static str, fn(&mut Writer), &'static [u8]);
        let cases: &[Case] = &[
            ("varint 1", |w| w.uint(1, 1), &[0x08, 0x01]),
            ("varint 300", |w| w.uint(2, 300), &[0x10, 0xac, 0x02]),
            ("zero is left out", |w| w.uint(1, 0), &[]),
            (
                "negative int64 (ten bytes)",
                |w| w.uint(3, -1i64 as u64),
                &[
                    0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
            ),
            ("string", |w| w.bytes(5, b"hi"), &[0x2a, 0x02, b'h', b'i']),
            ("empty string left out", |w| w.bytes(5, b""), &[]),
            (
                "fixed64",
                |w| w.fixed64(7, 0x0102),
                &[0x39, 0x02, 0x01, 0, 0, 0, 0, 0, 0],
            ),
            (
                "fixed32 field 16",
                |w| w.fixed32(16, 0x101),
                &[0x85, 0x01, 0x01, 0x01, 0, 0],
            ),
            (
                "nested",
                |w| w.message(1, |m| m.uint(1, 150)),
                &[0x0a, 0x03, 0x08, 0x96, 0x01],
            ),
            ("empty nested kept", |w| w.message(2, |_| {}), &[0x12, 0x00]),
        ];
        for (what, write, want) in cases {
            let mut w = Writer::default();
            write(&mut w);
            assert_eq!(w.buf, *want, "{what}");
        }
    }

    fn sample() -> (Origin, SpanData) {
        let origin = Origin {
            resource: vec![("service.name".into(), "svc".into())],
            scope_name: "prime-agent",
            scope_version: "0.1.0",
        };
        let span = SpanData {
            context: SpanContext {
                trace_id: [1; 16],
                span_id: [2; 8],
                flags: 1,
                state: None,
                baggage: None,
            },
            parent: Some([3; 8]),
            name: "chat m".into(),
            kind: Kind::Client,
            start_ns: 10,
            end_ns: 20,
            attrs: vec![
                ("gen_ai.request.model", Attr::Str("m".into())),
                ("gen_ai.usage.input_tokens", Attr::Int(5)),
                ("error", Attr::Bool(true)),
            ],
            error: Some("boom".into()),
        };
        (origin, span)
    }

    #[test]
    fn a_span_in_protobuf() {
        let (origin, s) = sample();
        let mut w = Writer::default();
        span(&mut w, &s);
        let mut want = vec![0x0a, 16];
        want.extend([1; 16]);
        want.extend([0x12, 8]);
        want.extend([2; 8]);
        want.extend([0x22, 8]);
        want.extend([3; 8]);
        want.extend([0x2a, 6]);
        want.extend(b"chat m");
        want.extend([0x30, 3]);
        want.extend([0x39, 10, 0, 0, 0, 0, 0, 0, 0]);
        want.extend([0x41, 20, 0, 0, 0, 0, 0, 0, 0]);
        // KeyValue{key "gen_ai.request.model", value AnyValue{string_value "m"}}.
        want.extend([0x4a, 27, 0x0a, 20]);
        want.extend(b"gen_ai.request.model");
        want.extend([0x12, 3, 0x0a, 1, b'm']);
        want.extend([0x4a, 31, 0x0a, 25]);
        want.extend(b"gen_ai.usage.input_tokens");
        want.extend([0x12, 2, 0x18, 5]);
        want.extend([0x4a, 11, 0x0a, 5]);
        want.extend(b"error");
        want.extend([0x12, 2, 0x10, 1]);
        // Status{message "boom", code ERROR}: field 15, then fixed32 flags, field 16.
        want.extend([0x7a, 8, 0x12, 4]);
        want.extend(b"boom");
        want.extend([0x18, 2]);
        want.extend([0x85, 0x01, 0x01, 0, 0, 0]);
        assert_eq!(w.buf, want);
        let body = encode_protobuf(&origin, &[s]);
        assert_eq!(body[0], 0x0a, "resource_spans is field 1");
        assert!(body.ends_with(&want));
    }

    #[test]
    fn a_span_in_json() {
        let (origin, s) = sample();
        let body: Value = serde_json::from_slice(&encode_json(&origin, &[s])).unwrap();
        let rs = &body["resourceSpans"][0];
        assert_eq!(
            rs["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "svc"}})
        );
        let span = &rs["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], json!("01".repeat(16)));
        assert_eq!(span["spanId"], json!("02".repeat(8)));
        assert_eq!(span["parentSpanId"], json!("03".repeat(8)));
        assert_eq!(span["kind"], json!(3));
        assert_eq!(span["startTimeUnixNano"], json!("10"));
        assert_eq!(
            span["attributes"][1],
            json!({"key": "gen_ai.usage.input_tokens", "value": {"intValue": "5"}})
        );
        assert_eq!(span["status"], json!({"code": 2, "message": "boom"}));
    }
}
