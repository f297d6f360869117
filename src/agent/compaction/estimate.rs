//! Token estimates: chars/4, an image as 4,800 chars (behaviour spec §5.2). Used for what the
//! provider has not counted yet and for choosing the cut point.

use crate::base::content::ToolSpec;
use crate::provider::{Message, ToolResultMessage};

/// What an image costs in the estimate, in chars.
pub(crate) const IMAGE_CHARS: u64 = 4800;

/// Characters of a message as the model sees them (text, thinking, tool calls, images).
pub(crate) fn message_chars(message: &Message) -> u64 {
    let chars = |s: &str| s.chars().count() as u64;
    match message {
        Message::User { text, images } => chars(text) + images.len() as u64 * IMAGE_CHARS,
        Message::Assistant(a) => {
            let calls: u64 = a
                .tool_calls
                .iter()
                .map(|c| chars(&c.name) + chars(&c.arguments.to_string()))
                .sum();
            chars(&a.text) + chars(&a.thinking) + calls
        }
        Message::ToolResult(ToolResultMessage { text, images, .. }) => {
            chars(text) + images.len() as u64 * IMAGE_CHARS
        }
    }
}

/// Estimated tokens of a message: chars/4, rounded up.
pub(crate) fn message_tokens(message: &Message) -> u64 {
    message_chars(message).div_ceil(4)
}

/// Estimated tokens of plain text.
pub(crate) fn text_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// Estimated tokens of what every request carries besides its messages: the system prompt
/// and each tool's name, description and parameter schema (as JSON).
pub(crate) fn fixed_tokens(system: &str, tools: &[ToolSpec]) -> u64 {
    let chars = |s: &str| s.chars().count() as u64;
    let tools: u64 = tools
        .iter()
        .map(|t| chars(&t.name) + chars(&t.description) + chars(&t.parameters.to_string()))
        .sum();
    (chars(system) + tools).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::content::Image;
    use crate::base::json::json;
    use crate::provider::{AssistantMessage, ToolCall};

    #[test]
    fn estimates_per_kind() {
        let image = Image {
            mime_type: "image/png".into(),
            data: "AAAA".into(),
        };
        let cases: Vec<(Message, u64)> = vec![
            (
                Message::User {
                    text: "abcd".repeat(10),
                    images: vec![],
                },
                10,
            ),
            (
                Message::User {
                    text: "abc".into(),
                    images: vec![image.clone()],
                },
                (3 + 4800_u64).div_ceil(4),
            ),
            (
                Message::Assistant(AssistantMessage {
                    text: "hi".into(),
                    thinking: "hmm".into(),
                    tool_calls: vec![ToolCall {
                        id: "c".into(),
                        name: "read".into(),
                        arguments: json!({"path": "a"}),
                    }],
                    ..Default::default()
                }),
                (2 + 3 + 4 + r#"{"path":"a"}"#.len() as u64).div_ceil(4),
            ),
            (
                Message::ToolResult(ToolResultMessage {
                    call_id: "c".into(),
                    name: "read".into(),
                    text: "é".repeat(8),
                    is_error: false,
                    images: vec![image],
                }),
                (8 + 4800_u64) / 4,
            ),
        ];
        for (message, want) in cases {
            assert_eq!(message_tokens(&message), want, "{message:?}");
        }
        assert_eq!(text_tokens("12345"), 2);
    }

    #[test]
    fn the_fixed_part_counts_the_tool_definitions() {
        let tool = |name: &str, description: &str, parameters| ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        };
        // 8 chars of system prompt; "bash" + "Run it" + `{"type":"object"}` = 4 + 6 + 17.
        let tools = [tool("bash", "Run it", json!({"type": "object"}))];
        assert_eq!(fixed_tokens("é1234567", &[]), 2);
        assert_eq!(
            fixed_tokens("é1234567", &tools),
            (8_u64 + 4 + 6 + 17).div_ceil(4)
        );
        let two = [tools[0].clone(), tool("read", "", json!({}))];
        assert_eq!(fixed_tokens("", &two), (27_u64 + 4 + 2).div_ceil(4));
    }
}
