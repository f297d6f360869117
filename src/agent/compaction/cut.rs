//! Where to cut: how much of the history is summarised and what is kept (behaviour spec §5.2).
//!
//! Walking back from the newest message, estimated tokens add up until `keep_recent` is
//! reached; the cut then moves to the nearest message at or after that point that may start the
//! kept part: a user or an assistant message, never a tool result, so a tool call always keeps
//! its result. A cut at an assistant message falls inside a turn (a *split turn*): the turn's
//! start (its user message) is before the cut, and the part of the turn before the cut is
//! summarised on its own.

use super::estimate::message_tokens;
use crate::provider::Message;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// The first message kept; `start..first_kept` is summarised (empty: nothing to do).
    pub first_kept: usize,
    /// For a split turn: where the turn that the cut falls into starts (`start <= t < first_kept`).
    pub turn_start: Option<usize>,
}

fn may_start_kept(message: &Message) -> bool {
    !matches!(message, Message::ToolResult(_))
}

/// The cut for `messages[start..]` keeping about `keep_recent` estimated tokens.
pub(crate) fn find_cut(messages: &[Message], start: usize, keep_recent: u64) -> Cut {
    let end = messages.len();
    let start = start.min(end);
    let mut kept = 0u64;
    let mut reached = None;
    for i in (start..end).rev() {
        kept += message_tokens(&messages[i]);
        if kept >= keep_recent {
            reached = Some(i);
            break;
        }
    }
    let Some(i) = reached else {
        // Everything fits in the recent budget: nothing to summarise.
        return Cut {
            first_kept: start,
            turn_start: None,
        };
    };
    // A message that alone takes the kept part far past the budget (a small model's
    // runaway reply, one huge tool result) is summarised rather than kept: keeping it could
    // leave the compacted context as large as before, and at a small window still over it.
    // The cut then moves past it, to the next valid start, or keeps nothing.
    if keep_recent > 0 && kept > keep_recent.saturating_mul(OVERSIZE) {
        let first_kept = (i + 1..end)
            .find(|&c| may_start_kept(&messages[c]))
            .unwrap_or(end);
        return Cut {
            first_kept,
            turn_start: turn_start_of(messages, start, first_kept),
        };
    }
    // The nearest valid start at or after `i`; if only tool results follow, keep a little more.
    let first_kept = (i..end)
        .find(|&c| may_start_kept(&messages[c]))
        .or_else(|| (start..i).rev().find(|&c| may_start_kept(&messages[c])))
        .unwrap_or(start);
    Cut {
        first_kept,
        turn_start: turn_start_of(messages, start, first_kept),
    }
}

/// How far past `keep_recent` the kept part may reach because of the one message that
/// reached the budget (upstream keeps it whatever its size; past this it is summarised).
const OVERSIZE: u64 = 2;

/// For a cut at an assistant message: where its turn starts (a split turn).
fn turn_start_of(messages: &[Message], start: usize, first_kept: usize) -> Option<usize> {
    match messages.get(first_kept) {
        Some(Message::Assistant(_)) => (start..first_kept)
            .rev()
            .find(|&c| matches!(messages[c], Message::User { .. })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{AssistantMessage, ToolCall, ToolResultMessage};

    /// `u`, `a`, `c` (assistant with a tool call) and `r` (tool result), each 40 chars = 10 tokens;
    /// `A` and `R`, an assistant reply and a tool result of 400 chars = 100 tokens.
    fn conv(shape: &str) -> Vec<Message> {
        let text = "x".repeat(40);
        shape
            .chars()
            .map(|k| match k {
                'u' => Message::User {
                    text: text.clone(),
                    images: vec![],
                },
                'a' => Message::Assistant(AssistantMessage {
                    text: text.clone(),
                    ..Default::default()
                }),
                'c' => Message::Assistant(AssistantMessage {
                    text: "x".repeat(40 - 4 - 2),
                    tool_calls: vec![ToolCall {
                        id: "1".into(),
                        name: "bash".into(),
                        arguments: crate::base::json::json!({}),
                    }],
                    ..Default::default()
                }),
                'U' => Message::User {
                    text: "x".repeat(400),
                    images: vec![],
                },
                'A' => Message::Assistant(AssistantMessage {
                    text: "x".repeat(400),
                    ..Default::default()
                }),
                'r' | 'R' => Message::ToolResult(ToolResultMessage {
                    call_id: "1".into(),
                    name: "bash".into(),
                    text: if k == 'R' {
                        "x".repeat(400)
                    } else {
                        text.clone()
                    },
                    is_error: false,
                    images: vec![],
                }),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn cut_points() {
        // (shape, start, keep_recent, first_kept, turn_start)
        let cases: &[(&str, usize, u64, usize, Option<usize>)] = &[
            // Everything fits: nothing to summarise.
            ("uaua", 0, 100, 0, None),
            ("", 0, 10, 0, None),
            // The last turn alone is 20 tokens: cut at its user message.
            ("uaua", 0, 20, 2, None),
            // 30 tokens reach back into the first turn's assistant: a split turn.
            ("uaua", 0, 30, 1, Some(0)),
            // The budget ends on a tool result: the cut moves forward to the next assistant,
            // never between a call and its result.
            ("ucrcra", 0, 30, 3, Some(0)),
            ("ucrcra", 0, 20, 5, Some(0)),
            // Only tool results after the point: keep more instead (back to the call).
            ("ucrr", 0, 10, 1, Some(0)),
            // A repeated compaction starts after the summary message (index 0).
            ("uuaua", 1, 20, 3, None),
            ("uuaua", 1, 30, 2, Some(1)),
            // No user message in range before an assistant cut: not a split turn.
            ("uaua", 1, 30, 1, None),
            // One message takes the kept part past twice the budget: it is summarised too,
            // and the cut moves to the next valid start (here the newest user message)...
            ("uAu", 0, 8, 2, None),
            // ... or keeps nothing when none follows (a huge last tool result).
            ("ucR", 0, 8, 3, None),
            // A run-on reply inside a turn: the cut moves to the assistant after it.
            ("ucrAa", 0, 15, 4, Some(0)),
            // Keeping nothing but the newest message (an overflow's compaction): the newest
            // user message stays, whatever its size.
            ("uaU", 0, 0, 2, None),
            ("uAu", 0, 0, 2, None),
        ];
        for &(shape, start, keep, first_kept, turn_start) in cases {
            let got = find_cut(&conv(shape), start, keep);
            assert_eq!(
                got,
                Cut {
                    first_kept,
                    turn_start
                },
                "{shape} start={start} keep={keep}"
            );
        }
    }
}
