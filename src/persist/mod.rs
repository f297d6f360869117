//! Sessions that survive the process (behaviour spec §5.6): one append-only JSONL file per
//! session, `<sessions dir>/<session id>.jsonl`.
//!
//! `entry.rs` is the file format (pure), `replay.rs` the pure mapping from a loaded session to
//! the `session/update`s of `session/load`, `schedule.rs` the schedule grammar. This file holds
//! the IO: the `Recorder` a session's conversation carries (its turn worker appends after each
//! message, so the main loop never waits on the disk), loading with a torn last line skipped,
//! and the `Store` (the sessions directory: list, find, fork, and the session `--continue` /
//! `--resume` chose for the next `session/new`).

pub(crate) mod entry;
mod manage;
pub(crate) mod replay;
pub(crate) mod schedule;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::provider::Message;
use entry::{BashRun, Entry, EntryKind, Header, Record};

/// The current UTC time as ISO 8601 with milliseconds (`2026-12-01T10:00:00.250Z`).
pub(crate) fn now_iso() -> String {
    iso_of_millis(now_ms())
}

/// Wall-clock milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(crate) fn iso_of_millis(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = crate::prompt::civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60,
        ms % 1000
    )
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fff]Z` (also `+00:00`).
pub(crate) fn parse_iso_millis(iso: &str) -> Option<u64> {
    let b = iso.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| iso.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, s) = (n(11..13)?, n(14..16)?, n(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &iso[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(char::is_ascii_digit).collect();
        rest = &frac[digits.len()..];
        let padded = format!("{digits:0<3}");
        ms = padded.get(..3)?.parse::<i64>().ok()?;
    }
    if !matches!(rest, "Z" | "+00:00" | "") {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    let total = ((days * 86_400 + h * 3600 + mi * 60 + s) * 1000) + ms;
    u64::try_from(total).ok()
}

/// Howard Hinnant's civil-to-days algorithm (the inverse of `prompt::civil_from_days`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A fresh entry id: 8 hex digits, as upstream.
fn entry_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

pub(crate) fn create_dir_private(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn open_append(path: &Path, create_new: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.append(true).mode(0o600);
    if create_new {
        o.create_new(true);
    }
    o.open(path)
}

/// One line, written with one `write` so a crash leaves at most this line torn.
fn write_line(file: &mut File, v: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    file.write_all(&bytes)
}

/// A session read from its file: the header and the entries on the path from the root to the
/// newest entry (the file is a tree; we continue its newest branch).
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub path: PathBuf,
    pub header: Header,
    pub entries: Vec<Entry>,
    /// Bytes up to the end of the last line that parsed (a torn tail is cut here before
    /// appending again).
    good_len: u64,
    /// Whether the good part ends with a newline.
    ends_with_newline: bool,
}

impl Loaded {
    /// The conversation the model sees, in order; tool calls a crash cut off before their
    /// result get one (`close_dangling_calls`), so the next model call is valid.
    pub(crate) fn messages(&self) -> Vec<Message> {
        close_dangling_calls(self.stored_messages())
    }

    fn stored_messages(&self) -> Vec<Message> {
        self.stored().into_iter().map(|(_, m)| m).collect()
    }

    /// The model's context with the entry id of each message: a `compaction` entry replaces
    /// what came before its `firstKeptEntryId` with its summary message.
    fn stored(&self) -> Vec<(Option<String>, Message)> {
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
                EntryKind::Other(v) if v["type"] == "custom_message" => out.push((
                    id,
                    Message::User {
                        text: custom_message_text(&v["content"]),
                        images: Vec::new(),
                    },
                )),
                EntryKind::Other(v) if v["type"] == "compaction" => {
                    let kept = v["firstKeptEntryId"].as_str();
                    let from = kept
                        .and_then(|k| out.iter().position(|(i, _)| i.as_deref() == Some(k)))
                        .unwrap_or(out.len());
                    let text = v["primeAgentContext"]
                        .as_str()
                        .or(v["summary"].as_str())
                        .unwrap_or_default()
                        .to_owned();
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

    pub(crate) fn title(&self) -> Option<String> {
        self.entries.iter().rev().find_map(|e| match &e.kind {
            EntryKind::SessionInfo { name } if !name.is_empty() => Some(name.clone()),
            _ => None,
        })
    }

    pub(crate) fn updated_at(&self) -> String {
        self.entries
            .last()
            .map(|e| e.timestamp.clone())
            .unwrap_or_else(|| self.header.timestamp.clone())
    }
}

/// A `custom_message`'s content (a string, or text blocks) as one text.
fn custom_message_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
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
            out.push(Message::ToolResult {
                call_id,
                name,
                text: CALL_CUT_OFF.to_owned(),
                is_error: true,
                images: Vec::new(),
            });
        }
    };
    for m in messages {
        match &m {
            Message::ToolResult { call_id, .. } => open.retain(|(id, _)| id != call_id),
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

/// Writes a session's entries as its conversation grows. Lives in the `Conversation`, so the
/// turn worker (which owns the conversation while it runs) does the IO, never the main loop.
pub(crate) struct Recorder {
    path: PathBuf,
    header: Header,
    /// `None` until the first assistant message exists (then the file is created).
    file: Option<File>,
    /// Messages of the conversation already written.
    written: usize,
    /// The entry id of each written message (a compaction's summary: the compaction entry).
    ids: Vec<Option<String>>,
    last_id: Option<String>,
    /// Entries waiting for the next write (model and thinking changes, the title).
    pending: Vec<EntryKind>,
    /// Tool-call id → what the client was shown of its result beyond the text.
    details: HashMap<String, Value>,
    /// Message index → the user shell run it holds.
    bash: HashMap<usize, BashRun>,
    /// Message index → how a user message is written as a `custom_message`.
    custom: HashMap<usize, Custom>,
    model: Option<(String, String)>,
    thinking: Option<String>,
    titled: bool,
    /// The title the first prompt gives, written after the first answer.
    title: Option<String>,
    /// A write failed: logged once, then the session goes on in memory.
    failed: bool,
    /// The session was deleted (`session/delete`, set by the main loop): nothing more is
    /// written, so a turn still finishing cannot bring the file back.
    gone: Arc<AtomicBool>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A new session's recorder; nothing is written until the first assistant message.
    pub(crate) fn create(path: PathBuf, header: Header) -> Recorder {
        Recorder {
            path,
            header,
            file: None,
            written: 0,
            ids: Vec::new(),
            last_id: None,
            pending: Vec::new(),
            details: HashMap::new(),
            bash: HashMap::new(),
            custom: HashMap::new(),
            model: None,
            thinking: None,
            titled: false,
            title: None,
            failed: false,
            gone: Arc::default(),
        }
    }

    /// Continues a loaded session's file: a torn tail is cut off, new entries hang below the
    /// newest one.
    pub(crate) fn resume(loaded: &Loaded) -> Recorder {
        let mut r = Recorder::create(loaded.path.clone(), loaded.header.clone());
        // The recorder counts the conversation the session starts with (dangling calls
        // closed); the closing results are written with the next sync.
        r.ids = loaded.stored().into_iter().map(|(id, _)| id).collect();
        r.written = r.ids.len();
        r.last_id = loaded.entries.last().map(|e| e.id.clone());
        r.titled = loaded.title().is_some();
        (r.model, r.thinking) = loaded.model();
        let opened = OpenOptions::new()
            .write(true)
            .open(&loaded.path)
            .and_then(|f| {
                if f.metadata()?.len() > loaded.good_len {
                    log::warn!(
                        "{}: cutting a torn last line before appending",
                        loaded.path.display()
                    );
                    f.set_len(loaded.good_len)?;
                }
                Ok(f)
            })
            .and_then(|_| open_append(&loaded.path, false))
            .and_then(|mut f| {
                if !loaded.ends_with_newline {
                    f.write_all(b"\n")?;
                }
                Ok(f)
            });
        match opened {
            Ok(f) => r.file = Some(f),
            Err(e) => r.fail(&e),
        }
        r
    }

    /// Creates the file with its header; false when that failed (logged).
    fn create_file(&mut self) -> bool {
        if let Some(dir) = self.path.parent() {
            if let Err(e) = create_dir_private(dir) {
                self.fail(&e);
                return false;
            }
        }
        match open_append(&self.path, true) {
            Ok(mut f) => match write_line(&mut f, &entry::header_line(&self.header)) {
                Ok(()) => {
                    self.file = Some(f);
                    true
                }
                Err(e) => {
                    self.fail(&e);
                    false
                }
            },
            Err(e) => {
                self.fail(&e);
                false
            }
        }
    }

    fn fail(&mut self, e: &std::io::Error) {
        if !self.failed {
            log::error!(
                "cannot write the session file {}: {e}; the session goes on in memory only",
                self.path.display()
            );
        }
        self.failed = true;
    }

    /// The model a turn starts with: a change is recorded before that turn's messages.
    pub(crate) fn note_model(&mut self, label: &str, thinking: &str) {
        let (provider, model_id) = label.split_once('/').unwrap_or(("", label));
        let model = (provider.to_owned(), model_id.to_owned());
        if self.model.as_ref() != Some(&model) {
            self.pending.push(EntryKind::ModelChange {
                provider: model.0.clone(),
                model_id: model.1.clone(),
            });
            self.model = Some(model);
        }
        if self.thinking.as_deref() != Some(thinking) {
            self.pending
                .push(EntryKind::ThinkingLevelChange(thinking.to_owned()));
            self.thinking = Some(thinking.to_owned());
        }
    }

    /// What the client was shown of a tool result, written with the result.
    pub(crate) fn note_tool_details(&mut self, call_id: &str, details: Option<Value>) {
        if let Some(d) = details {
            self.details.insert(call_id.to_owned(), d);
        }
    }

    /// The message about to be pushed at `index` is this user shell run.
    pub(crate) fn note_bash(&mut self, index: usize, run: BashRun) {
        self.bash.insert(index, run);
    }

    /// The user message about to be pushed at `index` is hidden context for the model: it is
    /// written as a `custom_message` with `display: false`, which a replay skips.
    pub(crate) fn note_hidden(&mut self, index: usize, custom_type: &'static str) {
        self.note_custom(
            index,
            Custom {
                custom_type,
                display: false,
                details: None,
            },
        );
    }

    /// The user message about to be pushed at `index` is written as this `custom_message`.
    pub(crate) fn note_custom(&mut self, index: usize, custom: Custom) {
        self.custom.insert(index, custom);
    }

    /// The unwritten message at `index` was taken back out of the conversation: what was
    /// noted of the later ones moves down with them.
    pub(crate) fn removed(&mut self, index: usize) {
        self.custom = std::mem::take(&mut self.custom)
            .into_iter()
            .filter(|(i, _)| *i != index)
            .map(|(i, c)| (if i > index { i - 1 } else { i }, c))
            .collect();
    }

    fn append(&mut self, kind: EntryKind) {
        if self.gone.load(Ordering::Relaxed) {
            return;
        }
        let entry = Entry {
            id: entry_id(),
            parent_id: self.last_id.clone(),
            timestamp: now_iso(),
            kind,
        };
        let Some(file) = self.file.as_mut() else {
            return;
        };
        match write_line(file, &entry::entry_line(&entry)) {
            Ok(()) => self.last_id = Some(entry.id),
            Err(e) => self.fail(&e),
        }
    }

    /// Writes every message not yet written (and what waits before them). The file is
    /// created with the first assistant message.
    pub(crate) fn sync(&mut self, messages: &[Message]) {
        if self.failed || self.gone.load(Ordering::Relaxed) {
            return;
        }
        if messages.len() < self.written {
            // The conversation was rewritten in memory without `compacted` (never expected).
            self.written = messages.len();
        }
        self.ids.truncate(self.written);
        if self.file.is_none() {
            if !messages.iter().any(|m| matches!(m, Message::Assistant(_))) {
                return;
            }
            if !self.create_file() {
                return;
            }
        }
        for kind in std::mem::take(&mut self.pending) {
            self.append(kind);
        }
        for (i, m) in messages.iter().enumerate().skip(self.written) {
            if let (Some(custom), Message::User { text, .. }) = (self.custom.remove(&i), m) {
                let mut entry = serde_json::json!({
                    "type": "custom_message",
                    "customType": custom.custom_type,
                    "content": text,
                    "display": custom.display,
                });
                if let Some(details) = custom.details {
                    entry["details"] = details;
                }
                self.append(EntryKind::Other(entry));
                self.ids.push(self.last_id.clone());
                continue;
            }
            let record = if let Some(run) = self.bash.remove(&i) {
                Record::Bash(run)
            } else if let Message::ToolResult { call_id, .. } = m {
                Record::ToolResult {
                    message: m.clone(),
                    details: self.details.remove(call_id),
                }
            } else {
                Record::Chat(m.clone())
            };
            if let (false, None, Message::User { text, .. }) = (self.titled, &self.title, m) {
                self.title = crate::meta::session_title(text);
            }
            self.append(EntryKind::Message(record));
            self.ids.push(self.last_id.clone());
            // Titled after the first exchange, from its prompt.
            if matches!(m, Message::Assistant(_)) {
                if let Some(name) = self.title.take() {
                    self.titled = true;
                    self.append(EntryKind::SessionInfo { name });
                }
            }
        }
        self.written = messages.len();
    }

    /// The conversation was compacted: `messages[0]` is the summary of the old messages
    /// before `first_kept_old`, the rest are the kept ones. Written as upstream's `compaction`
    /// entry (`summary`, `firstKeptEntryId`, `tokensBefore`) plus the exact summary message
    /// (`primeAgentContext`), so a load rebuilds the same context.
    pub(crate) fn compacted(
        &mut self,
        messages: &[Message],
        first_kept_old: usize,
        tokens_before: u64,
        summary: &str,
    ) {
        if self.file.is_none() || self.failed {
            // Nothing on disk yet: the compacted conversation is written as it stands.
            self.ids.clear();
            self.written = 0;
            return;
        }
        let first_kept_id = self.ids.get(first_kept_old).cloned().flatten();
        let context = match messages.first() {
            Some(Message::User { text, .. }) => text.clone(),
            _ => String::new(),
        };
        let kept_written = self.written.saturating_sub(first_kept_old);
        let kept: Vec<Option<String>> = self
            .ids
            .iter()
            .skip(first_kept_old)
            .take(kept_written)
            .cloned()
            .collect();
        self.append(EntryKind::Other(serde_json::json!({
            "type": "compaction",
            "summary": summary,
            "firstKeptEntryId": first_kept_id,
            "tokensBefore": tokens_before,
            "primeAgentContext": context,
        })));
        self.ids = std::iter::once(self.last_id.clone()).chain(kept).collect();
        self.written = self.ids.len();
        self.bash.clear();
        self.custom.clear();
    }
}

/// One row of `session/list`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    pub id: String,
    pub cwd: String,
    pub title: Option<String>,
    pub updated_at: String,
    pub path: PathBuf,
}

/// The sessions directory of the process, and the session `--continue`, `--resume` or
/// `--fork` picked for the next `session/new`.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    /// `<agent dir>/session-artifacts`: per session, `scheduled-jobs.json` and its
    /// subagents' conversations (`sub-xxxxxxxx/`).
    artifacts: PathBuf,
    next: Mutex<Option<Loaded>>,
}

/// How the command line chose a session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pick {
    Continue,
    Resume(String),
    Fork(String),
}

impl Store {
    pub(crate) fn new(dir: PathBuf, artifacts: PathBuf) -> Store {
        Store {
            dir,
            artifacts,
            next: Mutex::new(None),
        }
    }

    fn jobs_file(&self, session_id: &str) -> Option<PathBuf> {
        Some(self.artifacts_of(session_id)?.join("scheduled-jobs.json"))
    }

    /// Stores a session's schedules (`<artifacts>/<id>/scheduled-jobs.json`, replaced
    /// atomically).
    pub(crate) fn save_jobs(&self, session_id: &str, jobs: &Value) {
        let Some(path) = self.jobs_file(session_id) else {
            return;
        };
        let tmp = path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            create_dir_private(path.parent().unwrap_or(&self.artifacts))?;
            let _ = fs::remove_file(&tmp);
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec(&serde_json::json!({ "jobs": jobs }))?)?;
            f.sync_data()?;
            fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            log::error!("cannot store the schedules in {}: {e}", path.display());
        }
    }

    /// A session's stored schedules.
    pub(crate) fn load_jobs(&self, session_id: &str) -> Option<Value> {
        let text = fs::read_to_string(self.jobs_file(session_id)?).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        Some(v["jobs"].clone())
    }

    /// The file of session `id`, if `id` can name one (no path separators).
    pub(crate) fn path_of(&self, id: &str) -> Option<PathBuf> {
        let plain = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        plain.then(|| self.dir.join(format!("{id}.jsonl")))
    }

    /// `<agent dir>/session-artifacts/<id>/`: what belongs to a session beside its
    /// conversation (schedules, the kernel's namespace snapshot, its subagents'
    /// conversations); `None` for an id that cannot name a session.
    pub(crate) fn artifacts_of(&self, id: &str) -> Option<PathBuf> {
        self.path_of(id)?;
        Some(self.artifacts.join(id))
    }

    /// A fork starts with its parent's kernel state (a copy: the two go their own ways).
    fn copy_kernel_state(&self, from: &str, to: &str) {
        let (Some(src), Some(dst)) = (self.artifacts_of(from), self.artifacts_of(to)) else {
            return;
        };
        for name in [
            crate::kernel::state::PICKLE_FILE,
            crate::kernel::state::MANIFEST_FILE,
        ] {
            let from = src.join(name);
            if !from.is_file() {
                continue;
            }
            let copied = create_dir_private(&dst).and_then(|_| fs::copy(&from, dst.join(name)));
            if let Err(e) = copied {
                log::warn!("--fork: cannot copy {}: {e}", from.display());
            }
        }
    }

    /// A recorder for a new session in `cwd`.
    pub(crate) fn recorder(&self, id: &str, cwd: &Path) -> Recorder {
        let header = Header {
            id: id.to_owned(),
            timestamp: now_iso(),
            cwd: cwd.display().to_string(),
            parent_session: None,
        };
        Recorder::create(self.dir.join(format!("{id}.jsonl")), header)
    }

    /// A recorder for a subagent of session `root_id`: a session file of its own (same
    /// format, a new id, `parentSession` naming the root's file) in `dir`, the child's
    /// directory under the root's artifacts.
    pub(crate) fn child_recorder(&self, root_id: &str, dir: &Path, cwd: &Path) -> Recorder {
        let id = uuid::Uuid::new_v4().to_string();
        let header = Header {
            id: id.clone(),
            timestamp: now_iso(),
            cwd: cwd.display().to_string(),
            parent_session: Some(
                self.dir
                    .join(format!("{root_id}.jsonl"))
                    .display()
                    .to_string(),
            ),
        };
        Recorder::create(dir.join(format!("{id}.jsonl")), header)
    }

    /// The session the command line picked, taken by the first `session/new`.
    pub(crate) fn take_next(&self) -> Option<Loaded> {
        self.next.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Applies `-c`, `-r` or `--fork` at start-up; an `Err` is the CLI error text.
    pub(crate) fn pick(&self, pick: &Pick, cwd: &Path) -> Result<(), String> {
        let loaded = match pick {
            Pick::Continue => {
                let cwd = cwd.display().to_string();
                match self.list().into_iter().find(|s| s.cwd == cwd) {
                    Some(s) => Some(self.read(&s.path)?),
                    None => {
                        log::info!("--continue: no earlier session for {cwd}; starting a new one");
                        None
                    }
                }
            }
            Pick::Resume(arg) => Some(self.read(&self.resolve(arg)?)?),
            Pick::Fork(arg) => Some(self.fork(&self.resolve(arg)?, cwd)?),
        };
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(())
    }

    fn read(&self, path: &Path) -> Result<Loaded, String> {
        load(path).map_err(|e| format!("Cannot read session {}: {e}", path.display()))
    }

    /// `<id|path>`: a path to a file, else a session id (or a unique id prefix) in the dir.
    fn resolve(&self, arg: &str) -> Result<PathBuf, String> {
        let as_path = Path::new(arg);
        if arg.ends_with(".jsonl") || arg.contains('/') {
            if as_path.is_file() {
                return Ok(as_path.to_path_buf());
            }
        } else {
            let matches: Vec<Summary> = self
                .list()
                .into_iter()
                .filter(|s| s.id.starts_with(arg))
                .collect();
            if let Some(exact) = matches.iter().find(|s| s.id == arg) {
                return Ok(exact.path.clone());
            }
            if matches.len() == 1 {
                return Ok(matches[0].path.clone());
            }
        }
        Err(format!("No session found matching '{arg}'"))
    }

    /// A copy of the session at `source` under a new id, with `parentSession`.
    fn fork(&self, source: &Path, cwd: &Path) -> Result<Loaded, String> {
        let original = self.read(source)?;
        let id = uuid::Uuid::new_v4().to_string();
        let path = self.dir.join(format!("{id}.jsonl"));
        let header = Header {
            id,
            timestamp: now_iso(),
            cwd: cwd.display().to_string(),
            parent_session: Some(source.display().to_string()),
        };
        let write = || -> std::io::Result<()> {
            create_dir_private(&self.dir)?;
            let mut f = open_append(&path, true)?;
            write_line(&mut f, &entry::header_line(&header))?;
            for e in &original.entries {
                write_line(&mut f, &entry::entry_line(e))?;
            }
            f.sync_data()
        };
        write().map_err(|e| format!("Cannot fork into {}: {e}", path.display()))?;
        self.copy_kernel_state(&original.header.id, &header.id);
        self.read(&path)
    }

    /// Every readable session, newest first.
    pub(crate) fn list(&self) -> Vec<Summary> {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<Summary> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .filter_map(|p| match load(&p) {
                Ok(l) => Some(Summary {
                    id: l.header.id.clone(),
                    cwd: l.header.cwd.clone(),
                    title: l.title(),
                    updated_at: l.updated_at(),
                    path: p,
                }),
                Err(e) => {
                    log::warn!("skipping session file {}: {e}", p.display());
                    None
                }
            })
            .collect();
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
        out
    }
}

/// The sessions directory: `--session-dir` > `PRIME_AGENT_SESSION_DIR` >
/// `PRIME_AGENT_CODING_AGENT_SESSION_DIR` > `<agent dir>/sessions`.
pub(crate) fn sessions_dir(flag: Option<&Path>, agent_dir: &Path) -> PathBuf {
    if let Some(dir) = flag {
        return dir.to_path_buf();
    }
    for var in [
        "PRIME_AGENT_SESSION_DIR",
        "PRIME_AGENT_CODING_AGENT_SESSION_DIR",
    ] {
        if let Some(dir) = std::env::var_os(var).filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
    }
    agent_dir.join("sessions")
}

/// One page of `session/list`: rows from `cursor` on and the next cursor, or `None` for a
/// cursor that is not one of ours.
pub(crate) fn page(
    rows: &[Summary],
    cwd: Option<&str>,
    cursor: Option<&str>,
    size: usize,
) -> Option<(Vec<Summary>, Option<String>)> {
    let start = match cursor {
        None => 0,
        Some(c) => c.strip_prefix("offset:")?.parse::<usize>().ok()?,
    };
    let matching: Vec<&Summary> = rows
        .iter()
        .filter(|s| cwd.is_none_or(|c| crate::acp::same_cwd(c, Path::new(&s.cwd))))
        .collect();
    if start > matching.len() {
        return None;
    }
    let end = (start + size).min(matching.len());
    let next = (end < matching.len()).then(|| format!("offset:{end}"));
    Some((
        matching[start..end].iter().map(|s| (*s).clone()).collect(),
        next,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{AssistantMessage, ToolCall};

    #[test]
    fn iso_timestamps_round_trip_and_bad_ones_are_refused() {
        for ms in [0, 1_764_583_200_250, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(parse_iso_millis(&iso_of_millis(ms)), Some(ms), "{ms}");
        }
        assert_eq!(iso_of_millis(1_764_583_200_250), "2025-12-01T10:00:00.250Z");
        assert_eq!(
            parse_iso_millis("2025-12-01T10:00:00Z"),
            Some(1_764_583_200_000)
        );
        assert_eq!(
            parse_iso_millis("2025-12-01T10:00:00.5+00:00"),
            Some(1_764_583_200_500)
        );
        for bad in [
            "",
            "2025-13-01T10:00:00Z",
            "yesterday",
            "2025-12-01T10:00:00+02:00",
        ] {
            assert_eq!(parse_iso_millis(bad), None, "{bad}");
        }
    }

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
                        arguments: serde_json::json!({}),
                    })
                    .collect(),
                ..Default::default()
            })
        };
        let result = |id: &str, text: &str, is_error: bool| Message::ToolResult {
            call_id: id.into(),
            name: "bash".into(),
            text: text.into(),
            is_error,
            images: vec![],
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

    fn summary(id: &str, cwd: &str) -> Summary {
        Summary {
            id: id.into(),
            cwd: cwd.into(),
            title: None,
            updated_at: String::new(),
            path: PathBuf::new(),
        }
    }

    #[test]
    fn pages_filter_by_cwd_and_walk_with_opaque_cursors() {
        let rows: Vec<Summary> = (0..5)
            .map(|i| summary(&format!("s{i}"), if i % 2 == 0 { "/a" } else { "/b" }))
            .collect();
        let ids = |p: &[Summary]| p.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        let (p, next) = page(&rows, None, None, 2).unwrap();
        assert_eq!(
            (ids(&p), next.as_deref()),
            (vec!["s0".into(), "s1".into()], Some("offset:2"))
        );
        let (p, next) = page(&rows, None, next.as_deref(), 2).unwrap();
        assert_eq!(ids(&p), ["s2", "s3"]);
        let (p, next) = page(&rows, None, next.as_deref(), 2).unwrap();
        assert_eq!((ids(&p), next), (vec!["s4".into()], None));
        let (p, next) = page(&rows, Some("/a"), None, 10).unwrap();
        assert_eq!(
            (ids(&p), next),
            (vec!["s0".into(), "s2".into(), "s4".into()], None)
        );
        assert_eq!(page(&rows, Some("/none"), None, 10).unwrap().0, vec![]);
        for bad in ["x", "offset:-1", "offset:99"] {
            assert!(page(&rows, None, Some(bad), 2).is_none(), "{bad}");
        }
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pa-persist-{tag}-{}", uuid::Uuid::new_v4()));
        d
    }

    #[test]
    fn a_recorder_writes_once_the_model_answered_and_a_torn_tail_is_skipped_and_cut() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tmp("rec").join("sessions");
        let store = Store::new(dir.clone(), dir.join("artifacts"));
        let mut r = store.recorder("s1", Path::new("/w"));
        let mut messages = vec![Message::User {
            text: "hello there".into(),
            images: vec![],
        }];
        r.note_model("scripted/test", "off");
        r.sync(&messages);
        assert!(
            !dir.join("s1.jsonl").exists(),
            "nothing before the first answer"
        );
        messages.push(Message::Assistant(AssistantMessage {
            text: "hi".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "ls"}),
            }],
            ..Default::default()
        }));
        r.sync(&messages);
        r.note_tool_details("c1", Some(serde_json::json!({"locations": ["x"]})));
        messages.push(Message::ToolResult {
            call_id: "c1".into(),
            name: "bash".into(),
            text: "x".into(),
            is_error: false,
            images: vec![],
        });
        r.sync(&messages);
        let path = dir.join("s1.jsonl");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let text = fs::read_to_string(&path).unwrap();
        let types: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| {
                format!(
                    "{}{}",
                    v["type"].as_str().unwrap(),
                    v["message"]["role"]
                        .as_str()
                        .map(|r| format!(":{r}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        assert_eq!(
            types,
            [
                "session",
                "model_change",
                "thinking_level_change",
                "message:user",
                "message:assistant",
                "session_info",
                "message:toolResult"
            ]
        );
        // Every entry hangs below the one before.
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[1]["parentId"], Value::Null);
        for w in lines[1..].windows(2) {
            assert_eq!(w[1]["parentId"], w[0]["id"]);
        }
        // A crash mid-write tears the last line: it is skipped, then cut before appending.
        let mut f = open_append(&path, false).unwrap();
        f.write_all(br#"{"type":"message","id":"dead"#).unwrap();
        let loaded = load(&path).unwrap();
        assert_eq!(loaded.messages(), messages);
        assert_eq!(loaded.title().as_deref(), Some("hello there"));
        assert_eq!(
            loaded.model(),
            (Some(("scripted".into(), "test".into())), Some("off".into())),
            "what a continued session restores"
        );
        assert_eq!(loaded.header.cwd, "/w");
        let mut again = Recorder::resume(&loaded);
        messages.push(Message::User {
            text: "more".into(),
            images: vec![],
        });
        again.sync(&messages);
        let reloaded = load(&path).unwrap();
        assert_eq!(reloaded.messages(), messages);
        assert!(!fs::read_to_string(&path).unwrap().contains("dead"));
        let listed = store.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, "s1");
        assert_eq!(listed[0].title.as_deref(), Some("hello there"));
        fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_hidden_message_is_a_custom_message_the_model_gets_back_on_load() {
        let dir = tmp("hidden");
        let store = Store::new(dir.clone(), dir.join("artifacts"));
        let mut r = store.recorder("h1", Path::new("/w"));
        let user = |t: &str| Message::User {
            text: t.into(),
            images: vec![],
        };
        let mut messages = vec![
            user("q"),
            Message::Assistant(AssistantMessage {
                text: "a".into(),
                ..Default::default()
            }),
        ];
        r.note_hidden(2, "ipython_state_restored");
        messages.push(user(
            "<ipython_state_restored>\nx\n</ipython_state_restored>",
        ));
        messages.push(user("next"));
        r.sync(&messages);
        let path = dir.join("h1.jsonl");
        let lines: Vec<Value> = fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let hidden: Vec<&Value> = lines
            .iter()
            .filter(|l| l["type"] == "custom_message")
            .collect();
        assert_eq!(hidden.len(), 1);
        assert_eq!(hidden[0]["customType"], "ipython_state_restored");
        assert_eq!(hidden[0]["display"], false);
        assert_eq!(
            hidden[0]["content"],
            "<ipython_state_restored>\nx\n</ipython_state_restored>"
        );
        let loaded = load(&path).unwrap();
        assert_eq!(loaded.messages(), messages);
        // Resuming continues after it: the ids line up with the messages.
        let mut again = Recorder::resume(&loaded);
        messages.push(user("more"));
        again.sync(&messages);
        assert_eq!(load(&path).unwrap().messages(), messages);
        // Upstream's text blocks read too.
        assert_eq!(
            custom_message_text(
                &serde_json::json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
            ),
            "a\nb"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_shown_custom_message_keeps_its_details_and_a_taken_back_prompt_moves_the_notes() {
        let dir = tmp("custom");
        let store = Store::new(dir.clone(), dir.join("artifacts"));
        let mut r = store.recorder("k1", Path::new("/w"));
        let user = |t: &str| Message::User {
            text: t.into(),
            images: vec![],
        };
        let beat = |n: u64| Custom {
            custom_type: "heartbeat_prompt",
            display: true,
            details: Some(serde_json::json!({"jobId": "hb-1", "runCount": n})),
        };
        // A prompt at 0 that failed before any model answered is taken back out: the firing
        // noted at 1 is now at 0, and a note for the removed one is gone.
        r.note_custom(0, beat(0));
        r.note_custom(1, beat(1));
        r.removed(0);
        let messages = vec![
            user("BEAT"),
            Message::Assistant(AssistantMessage {
                text: "a".into(),
                ..Default::default()
            }),
            user("plain"),
        ];
        r.sync(&messages);
        let path = dir.join("k1.jsonl");
        let lines: Vec<Value> = fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let custom: Vec<&Value> = lines
            .iter()
            .filter(|l| l["type"] == "custom_message")
            .collect();
        assert_eq!(custom.len(), 1, "{lines:?}");
        assert_eq!(custom[0]["customType"], "heartbeat_prompt");
        assert_eq!(custom[0]["display"], true);
        assert_eq!(custom[0]["content"], "BEAT");
        assert_eq!(
            custom[0]["details"],
            serde_json::json!({"jobId": "hb-1", "runCount": 1})
        );
        assert_eq!(lines.iter().filter(|l| l["type"] == "message").count(), 2);
        assert_eq!(load(&path).unwrap().messages(), messages);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_compaction_is_recorded_and_a_load_rebuilds_the_compacted_context() {
        let dir = tmp("compact");
        let store = Store::new(dir.clone(), dir.join("artifacts"));
        let mut r = store.recorder("c1", Path::new("/w"));
        let user = |t: &str| Message::User {
            text: t.into(),
            images: vec![],
        };
        let answer = |t: &str| {
            Message::Assistant(AssistantMessage {
                text: t.into(),
                ..Default::default()
            })
        };
        let mut messages = vec![user("q1"), answer("a1"), user("q2"), answer("a2")];
        r.sync(&messages);
        // Keep from index 2 on; the summary takes the place of q1/a1.
        messages.splice(0..2, std::iter::once(user("SUMMARY of q1 a1")));
        r.compacted(&messages, 2, 1234, "the summary");
        messages.push(user("q3"));
        messages.push(answer("a3"));
        r.sync(&messages);
        let path = dir.join("c1.jsonl");
        let loaded = load(&path).unwrap();
        assert_eq!(loaded.messages(), messages);
        let compaction: Vec<Value> = fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "compaction")
            .collect();
        assert_eq!(compaction.len(), 1);
        assert_eq!(compaction[0]["tokensBefore"], 1234);
        assert_eq!(compaction[0]["summary"], "the summary");
        // A resumed recorder continues after it, and a second compaction keeps working.
        let mut again = Recorder::resume(&loaded);
        messages.splice(0..3, std::iter::once(user("SUMMARY 2")));
        again.compacted(&messages, 3, 99, "second");
        messages.push(user("q4"));
        again.sync(&messages);
        assert_eq!(load(&path).unwrap().messages(), messages);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn picks_resolve_ids_prefixes_and_paths_and_forks_name_their_parent() {
        let dir = tmp("pick");
        let store = Store::new(dir.clone(), dir.join("artifacts"));
        let mut r = store.recorder("0190aaaa-0000", Path::new("/w"));
        let messages = vec![
            Message::User {
                text: "q".into(),
                images: vec![],
            },
            Message::Assistant(AssistantMessage {
                text: "a".into(),
                ..Default::default()
            }),
        ];
        r.sync(&messages);
        for arg in [
            "0190aaaa-0000",
            "0190a",
            &dir.join("0190aaaa-0000.jsonl").display().to_string(),
        ] {
            store
                .pick(&Pick::Resume(arg.to_owned()), Path::new("/w"))
                .unwrap();
            let next = store.take_next().unwrap();
            assert_eq!(next.header.id, "0190aaaa-0000", "{arg}");
            assert!(store.take_next().is_none(), "taken once");
        }
        assert_eq!(
            store.pick(&Pick::Resume("nope".into()), Path::new("/w")),
            Err("No session found matching 'nope'".to_owned())
        );
        store
            .pick(&Pick::Continue, Path::new("/elsewhere"))
            .unwrap();
        assert!(store.take_next().is_none(), "no session for that cwd");
        store.pick(&Pick::Continue, Path::new("/w")).unwrap();
        assert_eq!(store.take_next().unwrap().messages(), messages);
        store
            .pick(&Pick::Fork("0190aaaa-0000".into()), Path::new("/w"))
            .unwrap();
        let fork = store.take_next().unwrap();
        assert_ne!(fork.header.id, "0190aaaa-0000");
        assert_eq!(
            fork.header.parent_session,
            Some(dir.join("0190aaaa-0000.jsonl").display().to_string())
        );
        assert_eq!(fork.messages(), messages);
        assert_eq!(store.list().len(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
