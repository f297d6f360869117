//! The summarised part of the conversation as plain text for the summary request, and the
//! files it read and modified (behaviour spec §5.2 "Serialization" and "File lists").

use std::collections::BTreeSet;

use serde_json::Value;

use crate::provider::{Message, ToolResultMessage};

/// Tool results are cut to this many chars in the summary request.
pub(crate) const TOOL_RESULT_CHARS: usize = 2000;

/// `[User]: …`, `[Assistant thinking]: …`, `[Assistant]: …`, `[Assistant tool calls]: …`,
/// `[Tool result]: …`, joined by blank lines.
pub(crate) fn serialize(messages: &[Message]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for message in messages {
        match message {
            Message::User { text, images } => {
                let mut part = format!("[User]: {text}");
                for _ in images {
                    part.push_str(" [image]");
                }
                parts.push(part);
            }
            Message::Assistant(a) => {
                if !a.thinking.is_empty() {
                    parts.push(format!("[Assistant thinking]: {}", a.thinking));
                }
                if !a.text.is_empty() {
                    parts.push(format!("[Assistant]: {}", a.text));
                }
                if !a.tool_calls.is_empty() {
                    let calls: Vec<String> = a
                        .tool_calls
                        .iter()
                        .map(|c| format!("{}({})", c.name, call_arguments(&c.arguments)))
                        .collect();
                    parts.push(format!("[Assistant tool calls]: {}", calls.join("; ")));
                }
            }
            Message::ToolResult(ToolResultMessage { text, .. }) => {
                parts.push(format!(
                    "[Tool result]: {}",
                    truncate(text, TOOL_RESULT_CHARS)
                ));
            }
        }
    }
    parts.join("\n\n")
}

/// `k=<json>, …` for an object, else the JSON itself.
fn call_arguments(arguments: &Value) -> String {
    match arguments {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// The first `max` chars, and how many more there were.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let more = text[cut..].chars().count();
            format!("{}\n\n[... {more} more characters truncated]", &text[..cut])
        }
    }
}

/// `text` cut to at most about `max` chars for a summary request that must fit a small
/// window: its start (a quarter: the task as first stated) and its end (the rest: the latest
/// state), with what was left out said in the middle. Unchanged when it fits.
pub(crate) fn fit(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head = max / 4;
    let tail = max - head;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(total - tail)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n\n[... {} characters of the conversation left out to fit the model's context window ...]\n\n{}",
        &text[..head_end],
        total - head - tail,
        &text[tail_start..]
    )
}

/// Files the summarised messages read and modified, carried from one compaction to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FileOps {
    pub read: BTreeSet<String>,
    pub modified: BTreeSet<String>,
}

impl FileOps {
    /// Adds the paths of `read`, `edit` and `write` calls in `messages`.
    pub(crate) fn collect(&mut self, messages: &[Message]) {
        for message in messages {
            let Message::Assistant(a) = message else {
                continue;
            };
            for call in &a.tool_calls {
                let Some(path) = call.arguments.get("path").and_then(Value::as_str) else {
                    continue;
                };
                match call.name.as_str() {
                    "read" => {
                        self.read.insert(path.to_owned());
                    }
                    "edit" | "write" => {
                        self.modified.insert(path.to_owned());
                    }
                    _ => {}
                }
            }
        }
    }

    /// `<read-files>` (files only read) and `<modified-files>`, each when not empty, to
    /// append to a summary.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let read: Vec<&str> = self
            .read
            .iter()
            .filter(|p| !self.modified.contains(*p))
            .map(String::as_str)
            .collect();
        if !read.is_empty() {
            out.push_str(&format!(
                "\n\n<read-files>\n{}\n</read-files>",
                read.join("\n")
            ));
        }
        if !self.modified.is_empty() {
            let modified: Vec<&str> = self.modified.iter().map(String::as_str).collect();
            out.push_str(&format!(
                "\n\n<modified-files>\n{}\n</modified-files>",
                modified.join("\n")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;
    use crate::provider::{AssistantMessage, ToolCall};

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "1".into(),
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn serialization_format() {
        let messages = vec![
            Message::User {
                text: "fix it".into(),
                images: vec![],
            },
            Message::Assistant(AssistantMessage {
                text: "ok".into(),
                thinking: "plan".into(),
                tool_calls: vec![
                    call("read", json!({"path": "a.rs"})),
                    call("bash", json!("raw")),
                ],
                ..Default::default()
            }),
            Message::ToolResult(ToolResultMessage {
                call_id: "1".into(),
                name: "read".into(),
                text: "y".repeat(2003),
                is_error: false,
                images: vec![],
            }),
        ];
        let want = format!(
            "[User]: fix it\n\n[Assistant thinking]: plan\n\n[Assistant]: ok\n\n\
             [Assistant tool calls]: read(path=\"a.rs\"); bash(\"raw\")\n\n\
             [Tool result]: {}\n\n[... 3 more characters truncated]",
            "y".repeat(2000)
        );
        assert_eq!(serialize(&messages), want);
        assert_eq!(truncate("ééé", 3), "ééé");
        assert_eq!(
            truncate("éééé", 3),
            "ééé\n\n[... 1 more characters truncated]"
        );
    }

    #[test]
    fn fit_keeps_the_start_and_the_end() {
        assert_eq!(fit("short", 10), "short");
        let text: String = ('a'..='z').collect();
        let cut = fit(&text, 8);
        assert!(cut.starts_with("ab\n"), "{cut}");
        assert!(cut.ends_with("\nuvwxyz"), "{cut}");
        assert!(cut.contains("[... 18 characters"), "{cut}");
        // Multi-byte text is cut at char boundaries.
        let cut = fit(&"é".repeat(100), 20);
        assert!(cut.starts_with("ééééé\n") && cut.ends_with(&"é".repeat(15)));
    }

    #[test]
    fn file_lists() {
        let messages = vec![Message::Assistant(AssistantMessage {
            tool_calls: vec![
                call("read", json!({"path": "b.rs"})),
                call("read", json!({"path": "a.rs"})),
                call("edit", json!({"path": "a.rs"})),
                call("write", json!({"path": "c.rs"})),
                call("bash", json!({"path": "ignored"})),
            ],
            ..Default::default()
        })];
        let mut ops = FileOps::default();
        ops.collect(&messages);
        assert_eq!(
            ops.render(),
            "\n\n<read-files>\nb.rs\n</read-files>\n\n<modified-files>\na.rs\nc.rs\n</modified-files>"
        );
        assert_eq!(FileOps::default().render(), "");
    }
}
