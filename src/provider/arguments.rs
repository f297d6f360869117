//! Tool-call arguments that are not a JSON object: cut off by the output limit, or malformed.
//!
//! A model call's reply keeps them as `Value::String(raw)`. They must never go back to a
//! server as they came: every wire API sends a call's arguments as JSON text, and a server
//! that parses it (llama.cpp does) refuses the whole request, so one cut call would fail every
//! later request of the session. The turn replaces them by `{}` before the reply joins the
//! conversation (and says so in the call's result); `repair` does the same for a session file
//! written before that, when it is loaded.

use serde_json::{Map, Value};

use super::Message;

/// How much of the raw text a result quotes.
const QUOTE_CHARS: usize = 300;

/// A streamed tool call's argument text as the reply keeps it: `{}` for none, the parsed
/// value, or the raw text as a string when it is not JSON (`invalid` then says why).
pub(crate) fn from_stream(text: String) -> Value {
    if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// Why a call's arguments cannot be used, when they are not a JSON object (`None`: they are).
pub(crate) fn invalid(arguments: &Value) -> Option<String> {
    match arguments {
        Value::Object(_) => None,
        Value::String(raw) => Some(match serde_json::from_str::<Value>(raw) {
            Err(e) => format!("they are not valid JSON ({e})"),
            Ok(_) => "they are JSON but not an object".to_owned(),
        }),
        _ => Some("they are JSON but not an object".to_owned()),
    }
}

/// The tool result of a call that was not run because of its arguments; `cut`: the reply hit
/// the output token limit.
pub(crate) fn not_run_text(arguments: &Value, cut: bool) -> String {
    let why = invalid(arguments).unwrap_or_else(|| "they are incomplete".to_owned());
    let raw = match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    let mut quote: String = raw.chars().take(QUOTE_CHARS).collect();
    if quote.len() < raw.len() {
        quote.push('…');
    }
    let head = if cut {
        "Not run: the reply hit the output token limit while this call's arguments were being written"
    } else {
        "Not run: this call's arguments could not be used"
    };
    let advice = if cut {
        "Make the call again with complete arguments; split large content into several smaller calls."
    } else {
        "Make the call again with the arguments as one JSON object."
    };
    format!(
        "{head}: {why}. The history keeps them as {{}}. What arrived ({} chars): {quote}\n{advice}",
        raw.chars().count()
    )
}

/// Replaces every assistant tool call's unusable arguments by `{}`; returns how many.
pub(crate) fn repair(messages: &mut [Message]) -> usize {
    let mut repaired = 0;
    for m in messages {
        if let Message::Assistant(a) = m {
            for call in &mut a.tool_calls {
                if invalid(&call.arguments).is_some() {
                    call.arguments = Value::Object(Map::new());
                    repaired += 1;
                }
            }
        }
    }
    repaired
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;
    use crate::provider::{AssistantMessage, ToolCall};

    #[test]
    fn which_arguments_are_unusable() {
        // (arguments, unusable)
        let cases = [
            (json!({"code": "print(1)"}), false),
            (json!({}), false),
            (json!("{\"code\": \"print('Hello, World!"), true),
            (json!("not json"), true),
            (json!("[1, 2]"), true),
            (json!([1, 2]), true),
            (json!(null), true),
        ];
        for (args, want) in cases {
            assert_eq!(invalid(&args).is_some(), want, "{args}");
        }
    }

    #[test]
    fn the_not_run_text_says_what_arrived_and_what_to_do() {
        let cut = not_run_text(&json!("{\"code\": \"print('Hi"), true);
        assert!(
            cut.starts_with("Not run: the reply hit the output token limit while this call's arguments were being written: they are not valid JSON (EOF while parsing a string"),
            "{cut}"
        );
        assert!(
            cut.contains(
                "The history keeps them as {}. What arrived (19 chars): {\"code\": \"print('Hi\n"
            ),
            "{cut}"
        );
        let bad = not_run_text(&json!("{oops}"), false);
        assert!(bad.ends_with("Make the call again with the arguments as one JSON object."));
        let long = not_run_text(&json!("x".repeat(1000)), false);
        assert!(long.contains(&format!("(1000 chars): {}…", "x".repeat(300))));
    }

    #[test]
    fn repair_leaves_good_calls_and_replaces_the_rest() {
        let call = |id: &str, arguments: Value| ToolCall {
            id: id.into(),
            name: "ipython".into(),
            arguments,
        };
        let mut messages = vec![
            Message::User {
                text: "hi".into(),
                images: vec![],
            },
            Message::Assistant(AssistantMessage {
                tool_calls: vec![
                    call("a", json!({"code": "1"})),
                    call("b", json!("{\"code\": \"pri")),
                ],
                ..Default::default()
            }),
        ];
        assert_eq!(repair(&mut messages), 1);
        let Message::Assistant(a) = &messages[1] else {
            panic!()
        };
        assert_eq!(a.tool_calls[0].arguments, json!({"code": "1"}));
        assert_eq!(a.tool_calls[1].arguments, json!({}));
        assert_eq!(repair(&mut messages), 0);
    }
}
