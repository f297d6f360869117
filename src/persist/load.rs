//! Reading a session file back: the header and the newest branch of its entry tree, a line
//! torn by a crash skipped (and remembered, so the recorder cuts it before appending).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::claim::Claim;
use super::entry::{self, Entry, EntryKind, Header, Record};
use crate::provider::{Message, ToolResultMessage};

/// A session read from its file: the header and the entries on the path from the root to the
/// newest entry (the file is a tree; we continue its newest branch).
#[derive(Debug)]
pub(crate) struct Loaded {
    pub path: PathBuf,
    pub header: Header,
    pub entries: Vec<Entry>,
    /// Bytes up to the end of the last line that parsed (a torn tail is cut here before
    /// appending again).
    pub(super) good_len: u64,
    /// Whether the good part ends with a newline.
    pub(super) ends_with_newline: bool,
    /// The lock on the file when it was opened to be continued (`Store::open`); the recorder
    /// takes it over.
    pub(super) claim: Option<Claim>,
}

impl Loaded {
    /// The conversation the model sees, in order; tool calls a crash cut off before their
    /// result get one (`close_dangling_calls`), so the next model call is valid.
    pub(crate) fn messages(&self) -> Vec<Message> {
        let mut messages = close_dangling_calls(self.stored_messages());
        // A call whose arguments a reply cut off (a file written before the turn replaced them)
        // would make every later request fail on a server that parses them.
        let repaired = crate::provider::arguments::repair(&mut messages);
        if repaired > 0 {
            log::warn!("{repaired} tool call(s) with unusable arguments replayed as {{}}");
        }
        messages
    }

    fn stored_messages(&self) -> Vec<Message> {
        self.stored().into_iter().map(|(_, m)| m).collect()
    }

    /// The model's context with the entry id of each message: a `compaction` entry replaces
    /// what came before its `firstKeptEntryId` with its summary message.
    pub(super) fn stored(&self) -> Vec<(Option<String>, Message)> {
        let mut out: Vec<(Option<String>, Message)> = Vec::new();
        for e in &self.entries {
            let id = Some(e.id.clone());
            match &e.kind {
                EntryKind::Message(Record::Chat(m)) => out.push((id, m.clone())),
                EntryKind::Message(Record::ToolResult { message, .. }) => {
                    out.push((id, message.clone()))
                }
                EntryKind::Message(Record::Bash(b)) => out.push((
                    id,
                    Message::User {
                        text: b.context_text(),
                        images: Vec::new(),
                    },
                )),
                // Custom messages (the restored kernel state, a heartbeat's prompt): the model
                // sees them as user messages, a replay not (live, the client saw none either).
                EntryKind::CustomMessage(m) => out.push((
                    id,
                    Message::User {
                        text: m.text(),
                        images: Vec::new(),
                    },
                )),
                EntryKind::Compaction(c) => {
                    let kept = c.first_kept_entry_id.as_deref();
                    let from = kept
                        .and_then(|k| out.iter().position(|(i, _)| i.as_deref() == Some(k)))
                        .unwrap_or(out.len());
                    let text = c.context_text().to_owned();
                    let kept: Vec<_> = out.drain(from..).collect();
                    out.clear();
                    out.push((
                        id,
                        Message::User {
                            text,
                            images: Vec::new(),
                        },
                    ));
                    out.extend(kept);
                }
                _ => {}
            }
        }
        out
    }

    /// The model the session last ran (`model_change`: provider, model id) and its
    /// reasoning level (`thinking_level_change`), each the newest on the branch.
    pub(crate) fn model(&self) -> (Option<(String, String)>, Option<String>) {
        let (mut model, mut thinking) = (None, None);
        for e in &self.entries {
            match &e.kind {
                EntryKind::ModelChange { provider, model_id } => {
                    model = Some((provider.clone(), model_id.clone()))
                }
                EntryKind::ThinkingLevelChange(t) => thinking = Some(t.clone()),
                _ => {}
            }
        }
        (model, thinking)
    }

    /// The service tier the session last asked for (`service_tier_change`), newest on the
    /// branch.
    pub(crate) fn service_tier(&self) -> Option<String> {
        self.entries.iter().rev().find_map(|e| match &e.kind {
            EntryKind::ServiceTierChange(t) if !t.is_empty() => Some(t.clone()),
            _ => None,
        })
    }

    /// The goal's state as last written (`custom` `thread_goal_state`), newest on the branch.
    pub(crate) fn goal_state(&self) -> Option<&Value> {
        self.entries.iter().rev().find_map(|e| match &e.kind {
            EntryKind::Custom(c) if c.custom_type == entry::GOAL_STATE => Some(&c.data),
            _ => None,
        })
    }

    /// The session's own maximum subagent depth (`/rlm-max-depth`), newest valid on the branch.
    pub(crate) fn rlm_max_depth(&self) -> Option<u32> {
        self.entries.iter().rev().find_map(|e| match &e.kind {
            EntryKind::Custom(c) if c.custom_type == entry::RLM_MAX_DEPTH_STATE => c.data
                ["maxDepth"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok()),
            _ => None,
        })
    }

    /// The children's usage and cost recorded on the branch (`child_usage_attributed`).
    pub(crate) fn child_usage(&self) -> (crate::provider::Usage, f64) {
        let mut total = (crate::provider::Usage::default(), 0.0);
        for e in &self.entries {
            if let Some((u, cost)) = match &e.kind {
                EntryKind::Other(v) => entry::child_usage_of(v),
                _ => None,
            } {
                total.0.add(u);
                total.1 += cost;
            }
        }
        total
    }

    pub(crate) fn title(&self) -> Option<String> {
        self.entries.iter().rev().find_map(|e| match &e.kind {
            EntryKind::SessionInfo { name } if !name.is_empty() => Some(name.clone()),
            _ => None,
        })
    }

    #[cfg(test)]
    pub(crate) fn updated_at(&self) -> String {
        self.entries
            .last()
            .map(|e| e.timestamp.clone())
            .unwrap_or_else(|| self.header.timestamp.clone())
    }
}

/// The result a tool call gets when the process died before its own result was written.
pub(crate) const CALL_CUT_OFF: &str =
    "Not completed: the agent stopped before this call's result was saved.";

/// Every tool call answered: a call without a result before the next non-result message (or
/// the end) gets an error result right there.
pub(crate) fn close_dangling_calls(messages: Vec<Message>) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    let mut open: Vec<(String, String)> = Vec::new();
    let close = |open: &mut Vec<(String, String)>, out: &mut Vec<Message>| {
        for (call_id, name) in open.drain(..) {
            out.push(Message::ToolResult(ToolResultMessage {
                call_id,
                name,
                text: CALL_CUT_OFF.to_owned(),
                is_error: true,
                images: Vec::new(),
            }));
        }
    };
    for m in messages {
        match &m {
            Message::ToolResult(ToolResultMessage { call_id, .. }) => {
                open.retain(|(id, _)| id != call_id)
            }
            _ => close(&mut open, &mut out),
        }
        if let Message::Assistant(a) = &m {
            open.extend(a.tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())));
        }
        out.push(m);
    }
    close(&mut open, &mut out);
    out
}

/// Why a session file could not be read.
#[derive(Debug)]
pub(crate) enum LoadError {
    Missing,
    Unreadable(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Missing => f.write_str("no such session file"),
            LoadError::Unreadable(why) => f.write_str(why),
        }
    }
}

/// Reads a session file. Lines that do not parse are skipped with a warning (a crash tears at
/// most the last one); a file without a readable header is an error.
pub(crate) fn load(path: &Path) -> Result<Loaded, LoadError> {
    let file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LoadError::Missing,
        _ => LoadError::Unreadable(format!("{}: {e}", path.display())),
    })?;
    let mut reader = BufReader::new(file);
    let mut header = None;
    let mut all: Vec<Entry> = Vec::new();
    let (mut offset, mut good_len, mut ends_with_newline) = (0u64, 0u64, true);
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| LoadError::Unreadable(format!("{}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        number += 1;
        offset += n as u64;
        let newline = line.last() == Some(&b'\n');
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<Value>(text.trim()).map_err(|e| e.to_string());
        let ok = match (&header, parsed) {
            (None, Ok(v)) => match entry::parse_header(&v) {
                Ok(h) => {
                    header = Some(h);
                    Ok(())
                }
                Err(e) => return Err(LoadError::Unreadable(format!("{}: {e}", path.display()))),
            },
            (None, Err(e)) => {
                return Err(LoadError::Unreadable(format!(
                    "{}: the session header does not parse: {e}",
                    path.display()
                )))
            }
            (Some(_), Ok(v)) => entry::parse_entry(&v).map(|e| all.push(e)),
            (Some(_), Err(e)) => Err(e),
        };
        match ok {
            Ok(()) => {
                good_len = offset;
                ends_with_newline = newline;
            }
            Err(why) => log::warn!(
                "{}: skipping line {number} ({}): {why}",
                path.display(),
                if newline {
                    "unreadable"
                } else {
                    "torn by a crash mid-write"
                }
            ),
        }
    }
    let Some(header) = header else {
        return Err(LoadError::Unreadable(format!(
            "{}: the file is empty",
            path.display()
        )));
    };
    Ok(Loaded {
        path: path.to_path_buf(),
        header,
        entries: branch_to_leaf(all),
        good_len,
        ends_with_newline,
        claim: None,
    })
}

/// The entries from the root to the newest entry, following `parentId`.
fn branch_to_leaf(all: Vec<Entry>) -> Vec<Entry> {
    let Some(leaf) = all.last() else {
        return all;
    };
    let index: HashMap<&str, usize> = all
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id.as_str(), i))
        .collect();
    let mut path = Vec::new();
    let mut at = Some(all.len() - 1);
    let _ = leaf;
    while let Some(i) = at {
        if path.len() > all.len() {
            break; // A cycle in a hand-edited file.
        }
        path.push(i);
        at = all[i]
            .parent_id
            .as_deref()
            .and_then(|p| index.get(p).copied());
    }
    let keep: std::collections::HashSet<usize> = path.into_iter().collect();
    all.into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, e)| e)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{AssistantMessage, ToolCall};

    #[test]
    fn calls_cut_off_by_a_crash_get_a_result() {
        let user = |t: &str| Message::User {
            text: t.into(),
            images: vec![],
        };
        let calls = |ids: &[&str]| {
            Message::Assistant(AssistantMessage {
                tool_calls: ids
                    .iter()
                    .map(|id| ToolCall {
                        id: (*id).into(),
                        name: "bash".into(),
                        arguments: crate::base::json::json!({}),
                    })
                    .collect(),
                ..Default::default()
            })
        };
        let result = |id: &str, text: &str, is_error: bool| {
            Message::ToolResult(ToolResultMessage {
                call_id: id.into(),
                name: "bash".into(),
                text: text.into(),
                is_error,
                images: vec![],
            })
        };
        let cases = vec![
            (vec![user("a")], vec![user("a")]),
            (
                vec![user("a"), calls(&["1", "2"]), result("1", "ok", false)],
                vec![
                    user("a"),
                    calls(&["1", "2"]),
                    result("1", "ok", false),
                    result("2", CALL_CUT_OFF, true),
                ],
            ),
            (
                vec![calls(&["1"]), user("b")],
                vec![calls(&["1"]), result("1", CALL_CUT_OFF, true), user("b")],
            ),
            (
                vec![calls(&["1"]), result("1", "ok", false), user("b")],
                vec![calls(&["1"]), result("1", "ok", false), user("b")],
            ),
        ];
        for (input, want) in cases {
            assert_eq!(close_dangling_calls(input.clone()), want, "{input:?}");
        }
    }
}
