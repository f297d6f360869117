//! JSON-RPC 2.0 data: classifying incoming lines, building responses and errors.
//!
//! Messages are classified by key presence rather than by `#[serde(untagged)]`, so every
//! malformed frame gets a precise error. This module is pure: no threads, no channels, no IO.

use crate::base::json::json;
use serde_json::{Map, Value};

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// A request id: a JSON number or string, echoed back exactly as received.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestId(pub Value);

impl RequestId {
    pub fn null() -> RequestId {
        RequestId(Value::Null)
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One classified incoming frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// A response to a request of ours (`client_requests`): its result, or the client's error.
    Response {
        id: RequestId,
        result: Result<Value, RpcError>,
    },
    /// A frame that must be answered with an error (`id` is null when unknown).
    Invalid {
        id: RequestId,
        error: RpcError,
    },
}

/// An error object as sent to the client.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn parse_error(detail: &str) -> RpcError {
        RpcError {
            code: PARSE_ERROR,
            message: format!("Parse error: {detail}"),
            data: Some(json!({ "details": detail })),
        }
    }

    pub fn invalid_request(reason: &str) -> RpcError {
        RpcError {
            code: INVALID_REQUEST,
            message: format!("Invalid Request: {reason}"),
            data: Some(json!({ "reason": reason })),
        }
    }

    /// The ACP SDK's shape: `"Method not found": <method>` with `data.method`.
    pub fn method_not_found(method: &str) -> RpcError {
        RpcError {
            code: METHOD_NOT_FOUND,
            message: format!("\"Method not found\": {method}"),
            data: Some(json!({ "method": method })),
        }
    }

    /// `-32602` with `data.reason`; the reason also rides in `message` for editors.
    pub fn invalid_params(reason: impl Into<String>) -> RpcError {
        let reason = reason.into();
        RpcError {
            code: INVALID_PARAMS,
            message: format!("Invalid params: {reason}"),
            data: Some(json!({ "reason": reason })),
        }
    }

    /// `-32603` with `data.details` = the catalogue text, which is also the message.
    pub fn internal(details: impl Into<String>) -> RpcError {
        let details = details.into();
        RpcError {
            code: INTERNAL_ERROR,
            message: details.clone(),
            data: Some(json!({ "details": details })),
        }
    }

    pub fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), json!(self.code));
        obj.insert("message".into(), json!(self.message));
        if let Some(data) = &self.data {
            obj.insert("data".into(), data.clone());
        }
        Value::Object(obj)
    }
}

/// Classifies one NDJSON line. Never fails: problems become `Incoming::Invalid`.
pub fn classify_line(line: &[u8]) -> Option<Incoming> {
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(e) => {
            return Some(Incoming::Invalid {
                id: RequestId::null(),
                error: RpcError::parse_error(&format!("line is not valid UTF-8 ({e})")),
            })
        }
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) => Some(classify(value)),
        Err(e) => Some(Incoming::Invalid {
            id: RequestId::null(),
            error: RpcError::parse_error(&e.to_string()),
        }),
    }
}

/// Classifies a parsed JSON value by key presence.
pub(crate) fn classify(value: Value) -> Incoming {
    let mut obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => return invalid(RequestId::null(), "batch requests are not supported"),
        _ => return invalid(RequestId::null(), "a message must be a JSON object"),
    };
    let id = match obj.remove("id") {
        None => None,
        Some(v @ Value::String(_)) => Some(RequestId(v)),
        // ACP ids are int64: a fractional or out-of-range number cannot be echoed faithfully.
        Some(Value::Number(n)) if n.is_i64() => Some(RequestId(Value::Number(n))),
        Some(Value::Number(_)) => {
            return invalid(RequestId::null(), "id must be an integer or a string")
        }
        Some(Value::Null) => Some(RequestId::null()),
        Some(_) => return invalid(RequestId::null(), "id must be an integer or a string"),
    };
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        None => {}
        Some(_) => {
            return invalid(
                id.unwrap_or_else(RequestId::null),
                "jsonrpc must be \"2.0\"",
            )
        }
    }
    let params = obj.remove("params").unwrap_or(Value::Null);
    match (obj.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            if id.0.is_null() {
                return invalid(id, "id must be an integer or a string");
            }
            if !(params.is_object() || params.is_array() || params.is_null()) {
                return invalid(id, "params must be an object or an array");
            }
            Incoming::Request { id, method, params }
        }
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (Some(_), id) => invalid(
            id.unwrap_or_else(RequestId::null),
            "method must be a string",
        ),
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            let result = match obj.remove("error") {
                Some(error) => Err(response_error(&error)),
                None => Ok(obj.remove("result").unwrap_or(Value::Null)),
            };
            Incoming::Response { id, result }
        }
        (None, id) => invalid(id.unwrap_or_else(RequestId::null), "message has no method"),
    }
}

/// The error object of a response from the client, read leniently (a malformed one is still
/// an error).
fn response_error(error: &Value) -> RpcError {
    RpcError {
        code: error
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(INTERNAL_ERROR),
        message: match error.get("message").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            None => error.to_string(),
        },
        data: error.get("data").cloned(),
    }
}

fn invalid(id: RequestId, reason: &str) -> Incoming {
    Incoming::Invalid {
        id,
        error: RpcError::invalid_request(reason),
    }
}

/// Serialises a success response as one line (no trailing newline).
pub(crate) fn response_ok(id: &RequestId, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id.0, "result": result })
}

pub(crate) fn response_err(id: &RequestId, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id.0, "error": error.to_value() })
}

pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": method, "params": params })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(line: &str) -> Option<i64> {
        match classify_line(line.as_bytes()) {
            Some(Incoming::Invalid { error, .. }) => Some(error.code),
            _ => None,
        }
    }

    #[test]
    fn classification_table() {
        let cases: &[(&str, Option<i64>)] = &[
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
                None,
            ),
            (r#"{"jsonrpc":"2.0","id":"a","method":"x"}"#, None),
            (
                r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#,
                None,
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, None),
            ("{not json", Some(PARSE_ERROR)),
            ("[1,2]", Some(INVALID_REQUEST)),
            ("42", Some(INVALID_REQUEST)),
            (r#"{"jsonrpc":"2.0","id":1}"#, Some(INVALID_REQUEST)),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
                Some(INVALID_REQUEST),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
                Some(INVALID_REQUEST),
            ),
            (
                r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
                Some(INVALID_REQUEST),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
                Some(INVALID_REQUEST),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#,
                Some(INVALID_REQUEST),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(code_of(line), *want, "line: {line}");
        }
        assert_eq!(classify_line(b"   "), None);
        assert_eq!(
            code_of_bytes(b"{\"id\":1,\"method\":\"\xff\"}"),
            Some(PARSE_ERROR)
        );
    }

    fn code_of_bytes(line: &[u8]) -> Option<i64> {
        match classify_line(line) {
            Some(Incoming::Invalid { error, .. }) => Some(error.code),
            _ => None,
        }
    }

    #[test]
    fn responses_carry_their_result_or_error() {
        let r = classify_line(br#"{"jsonrpc":"2.0","id":3,"result":{"content":"x"}}"#);
        assert_eq!(
            r,
            Some(Incoming::Response {
                id: RequestId(json!(3)),
                result: Ok(json!({"content":"x"}))
            })
        );
        let r = classify_line(
            br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32800,"message":"cancelled"}}"#,
        );
        let Some(Incoming::Response { result: Err(e), .. }) = r else {
            panic!("{r:?}")
        };
        assert_eq!((e.code, e.message.as_str()), (-32800, "cancelled"));
        let r = classify_line(br#"{"jsonrpc":"2.0","id":5,"error":"nope"}"#);
        let Some(Incoming::Response { result: Err(e), .. }) = r else {
            panic!("{r:?}")
        };
        assert_eq!((e.code, e.message.as_str()), (INTERNAL_ERROR, "\"nope\""));
    }

    #[test]
    fn invalid_keeps_the_id_when_known() {
        match classify_line(br#"{"jsonrpc":"2.0","id":"q"}"#) {
            Some(Incoming::Invalid { id, .. }) => assert_eq!(id.0, json!("q")),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn error_shapes() {
        let e = RpcError::internal("Unknown ACP session: x");
        assert_eq!(
            e.to_value(),
            json!({"code":-32603,"message":"Unknown ACP session: x","data":{"details":"Unknown ACP session: x"}})
        );
        let e = RpcError::method_not_found("foo/bar");
        assert_eq!(
            e.to_value()["message"],
            json!("\"Method not found\": foo/bar")
        );
        assert_eq!(e.to_value()["data"], json!({"method":"foo/bar"}));
        let e = RpcError::invalid_params("sessionId must be a string");
        assert_eq!(
            e.to_value()["message"],
            json!("Invalid params: sessionId must be a string")
        );
    }
}
