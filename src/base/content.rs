//! Content types shared by the providers, the tools, the turn and the ACP mapping: images, file
//! diffs, kernel attachments, tool specs, the user's prompt, and two text helpers.
//!
//! A leaf: it uses no other module of the crate, so everything may depend on it.

use serde_json::Value;

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct IpythonDetails {
    pub attachments: Vec<Attachment>,
    pub diff_count: usize,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Attachment {
    pub mime_type: Option<String>,
    pub path: Option<String>,
    /// Base64 payload; only its decoded size is reported.
    pub data: Option<String>,
}

/// One item of the model's todo list (ACP `PlanEntry`: status `pending`, `in_progress` or
/// `completed`; priority `high`, `medium` or `low`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlanEntry {
    pub content: String,
    pub status: String,
    pub priority: String,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileDiff {
    pub path: String,
    pub old_text: Option<String>,
    pub new_text: String,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Image {
    pub data: String,
    pub mime_type: String,
}

/// The user's prompt after content conversion (§1.16).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct UserPrompt {
    pub text: String,
    /// The client's trace context (`params._meta.traceparent`): the turn's span is its child.
    pub trace_parent: Option<crate::base::telemetry::SpanContext>,
    pub images: Vec<Image>,
    /// The prompt opens with a text block the user typed: only then may `!cmd` run a shell
    /// command (never from an embedded resource or a link a client attached).
    pub typed: bool,
    /// Kept in the session file as this `custom_message` (a heartbeat's prompt).
    pub custom: Option<Custom>,
}

/// Decoded size of a base64 payload without decoding it.
pub(crate) fn base64_decoded_len(data: &str) -> u64 {
    let padding = if data.ends_with("==") {
        2
    } else if data.ends_with('=') {
        1
    } else {
        0
    };
    ((data.len() as u64) * 3 / 4).saturating_sub(padding)
}

/// `text` with `&`, `<`, `>`, `"` and `'` escaped, for element content and quoted attribute
/// values alike: the HTML export writes `'` as `&#39;`, the goal's XML for the model as
/// `&apos;` (`apostrophe`).
pub(crate) fn escape_markup(text: &str, apostrophe: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str(apostrophe),
            c => out.push(c),
        }
    }
    out
}

/// The last `max` bytes of `s`, moved forward to a char boundary.
pub(crate) fn tail_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A user-role message the session file keeps as a `custom_message` entry rather than a
/// plain user message: the model gets the text back on load, a replay shows nothing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Custom {
    pub custom_type: &'static str,
    /// Upstream's flag: whether its TUI shows the message (a heartbeat's prompt does, the
    /// restored kernel state not).
    pub display: bool,
    pub details: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_sizes() {
        for (data, want) in [("aGVsbG8=", 5), ("aGk=", 2), ("YWJj", 3), ("", 0)] {
            assert_eq!(base64_decoded_len(data), want, "{data}");
        }
    }

    #[test]
    fn tail_bytes_respects_char_boundaries() {
        assert_eq!(tail_bytes("hello", 10), "hello");
        assert_eq!(tail_bytes("hello", 3), "llo");
        assert_eq!(tail_bytes("aé", 1), "");
        assert_eq!(tail_bytes("aéb", 2), "b");
    }
}
