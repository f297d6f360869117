//! The host side of the kernel's host bridge: `HostHandler`, the trait the session implements
//! to answer `rlm.host_request(type, payload)` from Python, and the default handler used until
//! subagents and messaging exist. Behaviour spec §4.2.
//!
//! Request types and the reply shapes the Python side expects (snake_case or camelCase keys):
//! - `model.info` → `{id, provider, input: ["text", "image"?]}`
//! - `rlm.run` `{prompt, name?, model?, thinking?}` → `{rlm_child_id, name, session_dir, model}`
//! - `rlm.find_models` `{query, limit}` → `{models: [{provider, id, name, selector}]}`
//! - `rlm.list_subagents` `{}` → `{subagents: [{rlm_child_id, active_session_id, session_id,
//!   session_name, session_dir, status}]}`
//! - `rlm.delete_subagent` `{target}` → `{subagent: {…}}`
//! - `agent_message.list_agents` `{}` → `{current, entries}`
//! - `agent_message.send` `{message, receiver_role, receiver_name?}` or `{target: "all", message}`
//!   → a receipt, or `{receipts: [...]}`
//! - `rlm_heartbeat.list` `{include_inactive}` → `{jobs: [job record]}`;
//!   `rlm_heartbeat.create` `{instruction, interval?, label?, delivery_mode?}`,
//!   `rlm_heartbeat.update` `{id, instruction?, interval?, label?, status?, delivery_mode?}`,
//!   `rlm_heartbeat.delete` `{id}` → `{job}` (the main agent only; `persist/schedule.rs`)
//! - `mcp.config` `{}` / `mcp.refresh` `{}` → `{servers: [{name, type, status, tools?, error?}]}`
//! - `mcp.list_tools` `{server}` → `{tools: [{name, description, inputSchema}]}`
//! - `mcp.call_tool` `{server, tool, arguments}` → the MCP `tools/call` result
//!
//! Every payload also carries `cellSourceCode`, the source of the cell that asked.

use crate::base::json::json;
use serde_json::Value;

/// Answers host-bridge requests from the kernel. `Ok(v)` becomes the Python return value;
/// `Err(msg)` becomes `RuntimeError(msg)`. Called on a short-lived thread per request, so it may
/// block (e.g. to admit a subagent) without stalling the cell's output.
pub trait HostHandler: Send + Sync {
    fn handle(&self, kind: &str, payload: Value) -> Result<Value, String>;
}

/// The error for a request type this session does not serve.
pub(crate) fn unavailable(kind: &str) -> String {
    format!("host request type \"{kind}\" is not available in this session")
}

/// Answers `model.info` and refuses everything else.
pub struct DefaultHostHandler {
    model_info: Value,
}

impl DefaultHostHandler {
    /// `model_info` is returned as is for `model.info` (`{id, provider, input}`).
    pub fn new(model_info: Value) -> DefaultHostHandler {
        DefaultHostHandler { model_info }
    }
}

impl Default for DefaultHostHandler {
    /// Until the session tells the kernel its model, assume one that reads text and images.
    fn default() -> DefaultHostHandler {
        DefaultHostHandler::new(
            json!({"id": "unknown", "provider": "unknown", "input": ["text", "image"]}),
        )
    }
}

impl HostHandler for DefaultHostHandler {
    fn handle(&self, kind: &str, _payload: Value) -> Result<Value, String> {
        match kind {
            "model.info" => Ok(self.model_info.clone()),
            _ => Err(unavailable(kind)),
        }
    }
}

/// Validates a raw request from the wire, adds `cellSourceCode`, and asks `handler`.
pub(crate) fn answer(
    handler: &dyn HostHandler,
    kind: &Value,
    payload: Value,
    cell_source: &str,
) -> Result<Value, String> {
    let Some(kind) = kind.as_str() else {
        return Err("host request payload must have a string type".to_owned());
    };
    let mut payload = match payload {
        Value::Null => json!({}),
        Value::Object(map) => Value::Object(map),
        _ => return Err("host request payload must be an object".to_owned()),
    };
    payload["cellSourceCode"] = json!(cell_source);
    handler.handle(kind, payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_handler_serves_model_info_only() {
        let h = DefaultHostHandler::default();
        let info = answer(&h, &json!("model.info"), Value::Null, "x").unwrap();
        assert_eq!(info["input"], json!(["text", "image"]));
        assert_eq!(
            answer(&h, &json!("rlm.run"), json!({"prompt": "p"}), "x"),
            Err("host request type \"rlm.run\" is not available in this session".to_owned())
        );
    }

    #[test]
    fn malformed_requests_get_the_spec_texts() {
        let h = DefaultHostHandler::default();
        assert_eq!(
            answer(&h, &json!("model.info"), json!([1]), ""),
            Err("host request payload must be an object".to_owned())
        );
        assert_eq!(
            answer(&h, &Value::Null, json!({}), ""),
            Err("host request payload must have a string type".to_owned())
        );
    }

    #[test]
    fn payload_carries_the_cell_source() {
        struct Echo;
        impl HostHandler for Echo {
            fn handle(&self, _: &str, payload: Value) -> Result<Value, String> {
                Ok(payload)
            }
        }
        let got = answer(&Echo, &json!("t"), json!({"a": 1}), "print(1)").unwrap();
        assert_eq!(got, json!({"a": 1, "cellSourceCode": "print(1)"}));
    }
}
