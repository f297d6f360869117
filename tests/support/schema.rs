//! Precise schema checks for every frame the agent writes.
//!
//! Validating a frame against the schema's top-level `Agent` union proves little: its
//! extension branches (`ExtResponse`, `ExtNotification`) accept any value, so
//! `{"result":"hello"}` passes. Instead each frame is checked against the one definition it
//! must satisfy: a response by the method of the request with that id, a `session/update`
//! against `SessionNotification`, an error against `Error`. Checks run on the test's own thread
//! (see `Agent::next_frame`), so a violation fails the test.
//!
//! Two vendored files (provenance in `fixtures/schema/README.md`): the stable v1 schema for
//! everything stable, the unstable one only for the answers to unstable methods
//! (`session/fork`, `session/set_title`), so a stable frame cannot lean on an unstable field.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{json, Value};

use super::fixture;

/// Which vendored schema a definition is checked against.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Which {
    Stable,
    Unstable,
}

/// The definition (and its schema) a successful response to `method` must satisfy.
fn response_def(method: &str) -> Option<(Which, &'static str)> {
    let unstable = match method {
        "session/fork" => Some("ForkSessionResponse"),
        "session/set_title" => Some("SetSessionTitleResponse"),
        _ => None,
    };
    if let Some(def) = unstable {
        return Some((Which::Unstable, def));
    }
    stable_response_def(method).map(|d| (Which::Stable, d))
}

fn stable_response_def(method: &str) -> Option<&'static str> {
    Some(match method {
        "initialize" => "InitializeResponse",
        "authenticate" => "AuthenticateResponse",
        "logout" => "LogoutResponse",
        "session/delete" => "DeleteSessionResponse",
        "session/new" => "NewSessionResponse",
        "session/load" => "LoadSessionResponse",
        "session/list" => "ListSessionsResponse",
        "session/resume" => "ResumeSessionResponse",
        "session/close" => "CloseSessionResponse",
        "session/set_mode" => "SetSessionModeResponse",
        "session/set_config_option" => "SetSessionConfigOptionResponse",
        "session/prompt" => "PromptResponse",
        _ => return None,
    })
}

/// The definition the params of an agent → client notification must satisfy.
fn notification_def(method: &str) -> Option<&'static str> {
    Some(match method {
        "session/update" => "SessionNotification",
        "$/cancel_request" => "CancelRequestNotification",
        _ => return None,
    })
}

/// The definition the params of an agent → client request must satisfy.
fn request_def(method: &str) -> Option<&'static str> {
    Some(match method {
        "session/request_permission" => "RequestPermissionRequest",
        "fs/read_text_file" => "ReadTextFileRequest",
        "fs/write_text_file" => "WriteTextFileRequest",
        "terminal/create" => "CreateTerminalRequest",
        "terminal/output" => "TerminalOutputRequest",
        "terminal/wait_for_exit" => "WaitForTerminalExitRequest",
        "terminal/kill" => "KillTerminalRequest",
        "terminal/release" => "ReleaseTerminalRequest",
        _ => return None,
    })
}

/// Validators for single definitions of one vendored schema, compiled once each.
struct Defs {
    full: Value,
    compiled: std::sync::Mutex<HashMap<&'static str, &'static jsonschema::Validator>>,
}

fn defs(which: Which) -> &'static Defs {
    static STABLE: OnceLock<Defs> = OnceLock::new();
    static UNSTABLE: OnceLock<Defs> = OnceLock::new();
    let (cell, file) = match which {
        Which::Stable => (&STABLE, "schema/acp-schema.json"),
        Which::Unstable => (&UNSTABLE, "schema/acp-schema.unstable.json"),
    };
    cell.get_or_init(|| {
        let text = std::fs::read_to_string(fixture(file)).unwrap();
        Defs {
            full: serde_json::from_str(&text).unwrap(),
            compiled: Default::default(),
        }
    })
}

fn validator(which: Which, def: &'static str) -> &'static jsonschema::Validator {
    let d = defs(which);
    let mut compiled = d.compiled.lock().unwrap_or_else(|e| e.into_inner());
    compiled.entry(def).or_insert_with(|| {
        assert!(d.full["$defs"].get(def).is_some(), "no definition {def}");
        let schema = json!({
            "$schema": d.full["$schema"],
            "$ref": format!("#/$defs/{def}"),
            "$defs": d.full["$defs"],
        });
        Box::leak(Box::new(
            jsonschema::validator_for(&schema).expect("schema compiles"),
        ))
    })
}

fn check_def(def: &'static str, value: &Value, what: &str) -> Result<(), String> {
    check_in(Which::Stable, def, value, what)
}

fn check_in(which: Which, def: &'static str, value: &Value, what: &str) -> Result<(), String> {
    let v = validator(which, def);
    if v.is_valid(value) {
        return Ok(());
    }
    let errors: Vec<String> = v
        .iter_errors(value)
        .take(5)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    Err(format!(
        "{what} is not a valid {def}:\n{}",
        errors.join("\n")
    ))
}

/// Checks `value` against definition `def` of the unstable schema (for a stable frame that
/// also carries unstable fields, such as the `initialize` result advertising `fork`).
pub fn check_unstable(def: &'static str, value: &Value) -> Result<(), String> {
    check_in(Which::Unstable, def, value, "the value")
}

fn only_keys(frame: &Value, allowed: &[&str]) -> Result<(), String> {
    let obj = frame.as_object().ok_or("a frame must be a JSON object")?;
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("unexpected top-level key {k:?}")),
        None => Ok(()),
    }
}

/// Checks one agent → client frame. `methods` maps the ids of the requests the test sent (as
/// JSON text) to their methods, so a response is checked against its own result type.
pub fn check_frame(frame: &Value, methods: &HashMap<String, String>) -> Result<(), String> {
    if frame["jsonrpc"] != "2.0" {
        return Err("\"jsonrpc\" must be \"2.0\"".to_owned());
    }
    if let Some(method) = frame.get("method") {
        let method = method.as_str().ok_or("\"method\" must be a string")?;
        if let Some(id) = frame.get("id") {
            // The agent's own requests to the client: ids of its own, params by method.
            if !(id.is_string() || id.is_i64() || id.is_u64()) {
                return Err(format!("invalid request id {id}"));
            }
            only_keys(frame, &["jsonrpc", "id", "method", "params"])?;
            let def = request_def(method)
                .ok_or_else(|| format!("the agent sent a request ({method}) no test expects"))?;
            return check_def(def, &frame["params"], "the params");
        }
        only_keys(frame, &["jsonrpc", "method", "params"])?;
        let def = notification_def(method)
            .ok_or_else(|| format!("unknown agent notification {method}"))?;
        return check_def(def, &frame["params"], "the params");
    }
    let id = frame.get("id").ok_or("a response needs an \"id\"")?;
    if !(id.is_null() || id.is_string() || id.is_i64() || id.is_u64()) {
        return Err(format!("invalid id {id}"));
    }
    only_keys(frame, &["jsonrpc", "id", "result", "error"])?;
    match (frame.get("result"), frame.get("error")) {
        (Some(_), Some(_)) => Err("a response has both \"result\" and \"error\"".to_owned()),
        (None, None) => Err("a response has neither \"result\" nor \"error\"".to_owned()),
        (None, Some(error)) => check_def("Error", error, "the error"),
        (Some(result), None) => {
            if id.is_null() {
                return Err("a successful response must echo a request id".to_owned());
            }
            let method = methods.get(&id.to_string());
            match method.and_then(|m| response_def(m)) {
                Some((which, def)) => check_in(which, def, result, "the result"),
                // A request the test sent raw, or one outside ACP: the shape checks above.
                None => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn methods() -> HashMap<String, String> {
        [
            ("1", "session/prompt"),
            ("2", "session/new"),
            ("3", "initialize"),
            ("4", "session/fork"),
            ("5", "session/delete"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn update(update: Value) -> Value {
        json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":update}})
    }

    #[test]
    fn valid_frames_pass() {
        let m = methods();
        for frame in [
            json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}),
            json!({"jsonrpc":"2.0","id":2,"result":{"sessionId":"abc"}}),
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}),
            json!({"jsonrpc":"2.0","id":"x","result":{}}),
            // Unstable methods are checked against the unstable schema.
            json!({"jsonrpc":"2.0","id":4,"result":{"sessionId":"f"}}),
            json!({"jsonrpc":"2.0","id":5,"result":{}}),
            update(
                json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}),
            ),
        ] {
            check_frame(&frame, &m).unwrap_or_else(|e| panic!("{frame}: {e}"));
        }
    }

    /// The checks the old top-level validation let through; each must be caught.
    #[test]
    fn invalid_frames_fail() {
        let m = methods();
        for frame in [
            json!({"jsonrpc":"2.0","id":1,"result":"hello"}),
            json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"finished"}}),
            json!({"jsonrpc":"2.0","id":2,"result":{}}),
            json!({"jsonrpc":"2.0","id":4,"result":{}}),
            json!({"jsonrpc":"2.0","id":5,"result":null}),
            json!({"jsonrpc":"2.0","id":3,"result":{"protocolVersion":"one"}}),
            json!({"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}),
            json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"},"error":{"code":1,"message":"m"}}),
            json!({"jsonrpc":"2.0","id":1}),
            json!({"jsonrpc":"1.0","id":1,"result":{"stopReason":"end_turn"}}),
            json!({"jsonrpc":"2.0","id":null,"result":{}}),
            json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"},"extra":1}),
            update(json!({"sessionUpdate":"agent_message_chunk","content":"hi"})),
            update(json!({"sessionUpdate":"no_such_update"})),
            json!({"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"plan","entries":[]}}}),
            json!({"jsonrpc":"2.0","method":"bogus/notification","params":{}}),
            json!({"jsonrpc":"2.0","id":9,"method":"fs/read_text_file","params":{}}),
        ] {
            assert!(check_frame(&frame, &m).is_err(), "accepted {frame}");
        }
    }
}
