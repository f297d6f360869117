//! Handshake, JSON-RPC front end and session lifecycle, driven over stdio.

use serde_json::json;

use crate::support::*;

#[test]
fn initialize_shape_and_version() {
    let mut a = Agent::scripted("hello.jsonl", &[]);
    let r = a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    let res = &r["result"];
    assert_eq!(res["protocolVersion"], 1);
    assert_eq!(
        res["agentInfo"],
        json!({"name":"prime-agent","title":"Prime Agent","version":env!("CARGO_PKG_VERSION")})
    );
    assert_eq!(
        res["agentCapabilities"]["promptCapabilities"],
        json!({"image":true,"embeddedContext":true})
    );
    assert_eq!(
        res["agentCapabilities"]["sessionCapabilities"],
        json!({"close":{}})
    );
    assert_eq!(res["agentCapabilities"]["loadSession"], false);
    assert_eq!(res["_meta"], json!({NS:{}}));
    assert!(a.finish().success());
}
