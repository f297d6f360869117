//! Pure builders for Prime Agent's `_meta` extensions (namespace `ai.primeintellect.prime-agent`).
//!
//! Non-standard fields never go on ACP object roots, only under `_meta[NAMESPACE]`.

use crate::base::json::json;
use serde_json::{Map, Value};

pub(crate) const NAMESPACE: &str = "ai.primeintellect.prime-agent";

/// `{ NAMESPACE: payload }`.
pub(crate) fn namespaced(payload: Value) -> Value {
    let mut m = Map::new();
    m.insert(NAMESPACE.to_owned(), payload);
    Value::Object(m)
}

/// Where an update sits in a prompt turn's lifecycle (§1.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Event,
    ResponseBoundary,
    TerminalQuiescence,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Event => "event",
            Phase::ResponseBoundary => "responseBoundary",
            Phase::TerminalQuiescence => "terminalQuiescence",
        }
    }
}

/// The correlation envelope merged into every update's `_meta[NAMESPACE]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub prompt_turn_id: u64,
    pub event_sequence: u64,
    pub phase: Phase,
    /// `Some(true)` = "result", `Some(false)` = "error"; only on boundary/terminal updates.
    pub outcome_ok: Option<bool>,
}

/// Merges the envelope over whatever the update already carries in `_meta[NAMESPACE]`.
pub(crate) fn apply_envelope(update: &mut Value, env: Envelope) {
    let Some(obj) = update.as_object_mut() else {
        return;
    };
    let meta = obj.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let ns = meta
        .as_object_mut()
        .expect("checked above")
        .entry(NAMESPACE)
        .or_insert_with(|| json!({}));
    if !ns.is_object() {
        *ns = json!({});
    }
    let ns = ns.as_object_mut().expect("checked above");
    ns.insert("promptTurnId".into(), json!(env.prompt_turn_id));
    ns.insert("eventSequence".into(), json!(env.event_sequence));
    ns.insert("phase".into(), json!(env.phase.as_str()));
    if let Some(ok) = env.outcome_ok {
        ns.insert("outcome".into(), json!(if ok { "result" } else { "error" }));
    }
}

/// Quiescence counters reported on completion and terminal updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Quiescence {
    pub outstanding_subagents: u64,
    pub remaining_autonomous_continuations: u64,
}

fn quiescence_value(q: Quiescence) -> Value {
    json!({
        "outstandingSubagents": q.outstanding_subagents,
        "remainingAutonomousContinuations": q.remaining_autonomous_continuations,
    })
}

/// The `responseBoundary` update (before the envelope is applied).
pub(crate) fn response_boundary(terminal_expected: bool) -> Value {
    json!({
        "sessionUpdate": "session_info_update",
        "_meta": namespaced(json!({ "terminalQuiescenceExpected": terminal_expected })),
    })
}

/// The completion (or terminal) update carrying quiescence counters.
pub(crate) fn quiescence_update(q: Quiescence) -> Value {
    json!({
        "sessionUpdate": "session_info_update",
        "_meta": namespaced(json!({ "quiescence": quiescence_value(q) })),
    })
}

/// A session title from the first prompt: its first non-blank line, at most 80 characters.
pub(crate) fn session_title(prompt: &str) -> Option<String> {
    const MAX: usize = 80;
    let line = prompt.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut title: String = line.chars().take(MAX).collect();
    if line.chars().count() > MAX {
        title.pop();
        title.push('…');
    }
    Some(title)
}

/// The `initialize` result (§1.3); `version` is the crate version, `auth_methods` the
/// `authMethods` (`auth::methods`).
pub(crate) fn initialize_result(version: &str, auth_methods: Value) -> Value {
    json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": { "image": true, "embeddedContext": true },
            "mcpCapabilities": { "http": true },
            // Sessions live on disk (`persist`): listed, loaded with a replay, resumed,
            // deleted, forked (unstable) and renamed (`title`, unstable); the client's
            // `systemPrompt` (append and override) and `additionalDirectories` are taken.
            "sessionCapabilities": {
                "close": {},
                "list": {},
                "resume": {},
                "delete": {},
                "fork": {},
                "title": {},
                "additionalDirectories": {},
                "systemPrompt": { "mode": { "override": {} } },
            },
            "auth": { "logout": {} },
        },
        "authMethods": auth_methods,
        "agentInfo": { "name": "prime-agent", "title": "Prime Agent", "version": version },
        // `_session/steering` joins a running prompt (docs/harnesses.md).
        "_meta": { NAMESPACE: {}, "steering": { "supported": true } },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_merges_after_payload() {
        let mut u = response_boundary(true);
        apply_envelope(
            &mut u,
            Envelope {
                prompt_turn_id: 1,
                event_sequence: 7,
                phase: Phase::ResponseBoundary,
                outcome_ok: Some(true),
            },
        );
        assert_eq!(
            u["_meta"][NAMESPACE],
            json!({"terminalQuiescenceExpected":true,"promptTurnId":1,"eventSequence":7,"phase":"responseBoundary","outcome":"result"})
        );
        let mut plain =
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}});
        apply_envelope(
            &mut plain,
            Envelope {
                prompt_turn_id: 0,
                event_sequence: 1,
                phase: Phase::Event,
                outcome_ok: None,
            },
        );
        assert_eq!(
            plain["_meta"][NAMESPACE],
            json!({"promptTurnId":0,"eventSequence":1,"phase":"event"})
        );
    }

    #[test]
    fn titles() {
        assert_eq!(
            session_title("\n  Fix the bug\nin main.rs"),
            Some("Fix the bug".into())
        );
        assert_eq!(session_title("   "), None);
        let long = session_title(&"x".repeat(100)).unwrap();
        assert_eq!(long.chars().count(), 80);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn initialize_shape() {
        let r = initialize_result("1.2.3", json!([{"id": "a", "name": "A"}]));
        assert_eq!(r["protocolVersion"], 1);
        assert_eq!(
            r["agentInfo"],
            json!({"name":"prime-agent","title":"Prime Agent","version":"1.2.3"})
        );
        assert_eq!(
            r["_meta"],
            json!({NAMESPACE: {}, "steering": {"supported": true}})
        );
        assert!(r["agentCapabilities"].get("subagents").is_none());
    }
}
