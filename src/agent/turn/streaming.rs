//! Tool calls while their arguments stream: the client sees a call as soon as the model has
//! named it (`AgentEvent::ToolPending`, a `pending` `tool_call` titled by the tool's name), and
//! then, at most every `RAW_INPUT_INTERVAL`, the arguments so far as `rawInput` while they
//! still parse once closed. A model that writes one call's arguments for minutes is then a
//! visible call, not a frozen agent, and cancelling it works like any other cancel.
//!
//! This is the one place that announces calls: whatever else shows a reply's calls before
//! they run (their full arguments, say) goes through `Announcer::show`, so a call is never
//! announced twice as a new `tool_call`.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{AgentEvent, ToolResultView};

/// The shortest gap between two `rawInput` updates of one streaming call.
pub(crate) const RAW_INPUT_INTERVAL: Duration = Duration::from_millis(500);

struct Streaming {
    id: String,
    name: String,
    raw: String,
    /// When `rawInput` was last shown, and how much of `raw` it showed.
    shown_at: Option<Instant>,
    shown_len: usize,
}

/// The calls of one model call that the client has been shown.
#[derive(Default)]
pub(crate) struct Announcer {
    calls: Vec<Streaming>,
}

impl Announcer {
    /// The model named a call: the event that shows it (`None`: already shown).
    pub(crate) fn started(&mut self, id: &str, name: &str) -> Option<AgentEvent> {
        if self.contains(id) {
            return None;
        }
        self.calls.push(Streaming {
            id: id.to_owned(),
            name: name.to_owned(),
            raw: String::new(),
            shown_at: None,
            shown_len: 0,
        });
        Some(AgentEvent::ToolPending {
            id: id.to_owned(),
            name: name.to_owned(),
            args: None,
        })
    }

    /// More of a call's arguments: a `rawInput` update when one is due and the text so far
    /// parses once closed.
    pub(crate) fn arguments(&mut self, id: &str, delta: &str, now: Instant) -> Option<AgentEvent> {
        let call = self.calls.iter_mut().find(|c| c.id == id)?;
        call.raw.push_str(delta);
        if call.raw.len() == call.shown_len
            || call
                .shown_at
                .is_some_and(|t| now.saturating_duration_since(t) < RAW_INPUT_INTERVAL)
        {
            return None;
        }
        let args = close_partial_json(&call.raw)?;
        call.shown_at = Some(now);
        call.shown_len = call.raw.len();
        Some(AgentEvent::ToolPending {
            id: call.id.clone(),
            name: call.name.clone(),
            args: Some(args),
        })
    }

    /// Shows a call with the arguments it ended with (announcing it if it was not yet).
    pub(crate) fn show(&mut self, id: &str, name: &str, args: &Value) -> AgentEvent {
        let _ = self.started(id, name);
        AgentEvent::ToolPending {
            id: id.to_owned(),
            name: name.to_owned(),
            args: Some(args.clone()),
        }
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.calls.iter().any(|c| c.id == id)
    }

    /// The server voided the reply these calls came from (`StreamEvent::Restarted`): each
    /// shown call ends failed with `text`, and the next attempt's calls start afresh.
    pub(crate) fn void(&mut self, text: &str) -> Vec<AgentEvent> {
        self.calls
            .drain(..)
            .map(|c| AgentEvent::ToolEnd {
                id: c.id,
                name: String::new(),
                result: ToolResultView {
                    text: Some(text.to_owned()),
                    is_error: true,
                    ..ToolResultView::default()
                },
            })
            .collect()
    }

    /// The ids shown so far, for closing the ones the reply did not keep.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.calls.iter().map(|c| c.id.as_str())
    }
}

/// The value of JSON text cut off anywhere, with what is open closed: an open string ends, a
/// dangling key gets `null`, open arrays and objects close. `None` when that does not parse
/// (say, the cut fell inside a key or a number's exponent).
pub(crate) fn close_partial_json(raw: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str(raw) {
        return Some(v);
    }
    let mut closers = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for c in raw.chars() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => closers.push('}'),
            '[' => closers.push(']'),
            '}' | ']' => {
                closers.pop();
            }
            _ => {}
        }
    }
    let mut text = raw.to_owned();
    if in_string {
        if escaped {
            text.pop();
        }
        // A `\u12` cut short cannot be closed.
        if let Some(at) = text.rfind("\\u") {
            if text.len() - at < 6 && !text[..at].ends_with('\\') {
                text.truncate(at);
            }
        }
        text.push('"');
    }
    let trimmed = text.trim_end();
    let mut text = trimmed.strip_suffix(',').unwrap_or(trimmed).to_owned();
    if text.ends_with(':') {
        text.push_str("null");
    }
    text.extend(closers.iter().rev());
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    #[test]
    fn partial_json_closes_where_it_can() {
        // (cut-off text, value)
        let cases: &[(&str, Option<Value>)] = &[
            ("", None),
            ("{", Some(json!({}))),
            (
                r#"{"code": "print('Hel"#,
                Some(json!({"code": "print('Hel"})),
            ),
            (r#"{"code": "a\"#, Some(json!({"code": "a"}))),
            (r#"{"code": "a\u00"#, Some(json!({"code": "a"}))),
            (r#"{"path": "x", "#, Some(json!({"path": "x"}))),
            (
                r#"{"path": "x", "edits": [{"old": "a"#,
                Some(json!({"path": "x", "edits": [{"old": "a"}]})),
            ),
            (r#"{"n":"#, Some(json!({"n": null}))),
            (r#"{"command": "ls"}"#, Some(json!({"command": "ls"}))),
            // Inside a key: a key without a value does not parse.
            (r#"{"co"#, None),
            (r#"{"n": 1e"#, None),
        ];
        for (raw, want) in cases {
            assert_eq!(close_partial_json(raw), *want, "{raw}");
        }
    }

    #[test]
    fn a_call_is_announced_once_and_its_arguments_shown_rate_limited() {
        let mut a = Announcer::default();
        let t0 = Instant::now();
        assert_eq!(
            a.started("c1", "ipython"),
            Some(AgentEvent::ToolPending {
                id: "c1".into(),
                name: "ipython".into(),
                args: None
            })
        );
        assert_eq!(a.started("c1", "ipython"), None);
        let shown = |args: Value| {
            Some(AgentEvent::ToolPending {
                id: "c1".into(),
                name: "ipython".into(),
                args: Some(args),
            })
        };
        assert_eq!(
            a.arguments("c1", "{\"code\": \"pr", t0),
            shown(json!({"code": "pr"}))
        );
        // Too soon for another.
        assert_eq!(
            a.arguments("c1", "int(", t0 + Duration::from_millis(100)),
            None
        );
        assert_eq!(
            a.arguments("c1", "1)", t0 + RAW_INPUT_INTERVAL),
            shown(json!({"code": "print(1)"}))
        );
        // Nothing new: nothing shown.
        assert_eq!(a.arguments("c1", "", t0 + 4 * RAW_INPUT_INTERVAL), None);
        // Unknown calls are ignored.
        assert_eq!(a.arguments("c9", "{}", t0), None);
        assert!(a.contains("c1") && !a.contains("c9"));
        assert_eq!(a.ids().collect::<Vec<_>>(), ["c1"]);
    }
}
