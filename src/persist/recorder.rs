//! The `Recorder`: writes a session's entries as its conversation grows, one line per
//! `write`, strictly in conversation order.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::claim::Claim;
use super::entry::{self, BashRun, Entry, EntryKind, Header, Record};
use super::{create_dir_private, entry_id, open_append, write_line, Loaded};
use crate::base::content::Custom;
use crate::base::time::now_iso;
use crate::provider::{Message, ToolResultMessage};

/// How the turn said an unwritten message is to be written, beyond its plain shape.
#[derive(Debug)]
enum Note {
    /// A user shell run (`bashExecution`).
    Bash(BashRun),
    /// A user-role message kept as a `custom_message`.
    Custom(Custom),
}

/// Everything noted about messages not yet written, in one place: the notes by the index the
/// message will have (they move together when one is taken back, and go together at a
/// compaction), and a tool result's details by its call id.
#[derive(Debug, Default)]
struct Notes {
    by_index: BTreeMap<usize, Note>,
    /// Tool-call id → what the client was shown of its result beyond the text.
    details: HashMap<String, Value>,
}

impl Notes {
    fn take(&mut self, index: usize) -> Option<Note> {
        self.by_index.remove(&index)
    }
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
    /// What the turn said about messages not yet written.
    notes: Notes,
    model: Option<(String, String)>,
    thinking: Option<String>,
    /// The service tier last written (`service_tier_change`).
    service_tier: Option<String>,
    titled: bool,
    /// The title the first prompt gives, written after the first answer.
    title: Option<String>,
    /// A write failed: logged once, then the session goes on in memory.
    failed: bool,
    /// The lock on the file (`claim.rs`): nothing is appended without it. Shared with the
    /// session's `Release`, which can let it go while a stuck turn holds this recorder; each
    /// write holds this mutex, so a released claim never has a write of ours in flight.
    pub(super) claim: Arc<Mutex<Option<Claim>>>,
    /// The session was deleted (`session/delete`, set by the main loop): nothing more is
    /// written, so a turn still finishing cannot bring the file back.
    pub(super) gone: Arc<AtomicBool>,
    /// Something that must be on disk now (the goal's state) waits: the file is created even
    /// before the first assistant message.
    flush: bool,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

/// A session's hold on its recorder from outside the conversation (`release_handle`).
#[derive(Clone, Debug)]
pub(crate) struct Release {
    gone: Arc<AtomicBool>,
    claim: Arc<Mutex<Option<Claim>>>,
}

impl Release {
    /// Nothing more is written (the session was deleted); the claim stays until `release`.
    pub(crate) fn stop_writing(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }

    /// Nothing more is written and the claim goes, so another process can open the session.
    /// Waits for a write in flight (one line), so it runs on the reaper, not the loop.
    pub(crate) fn release(&self) {
        self.stop_writing();
        drop(lock(&self.claim).take());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    /// The session file this recorder writes (the prompt's conversation log).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

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
            notes: Notes::default(),
            model: None,
            thinking: None,
            service_tier: None,
            titled: false,
            title: None,
            failed: false,
            claim: Arc::default(),
            gone: Arc::default(),
            flush: false,
        }
    }

    /// Continues a loaded session's file: a torn tail is cut off, new entries hang below the
    /// newest one. It holds the file's lock (the one `Store::open` took, else its own); a
    /// file another process holds is never appended to.
    pub(crate) fn resume(loaded: &mut Loaded) -> Recorder {
        let mut r = Recorder::create(loaded.path.clone(), loaded.header.clone());
        let claim = match loaded.claim.take() {
            Some(c) => Ok(c),
            None => Claim::take(&loaded.path),
        };
        match claim {
            Ok(c) => *lock(&r.claim) = Some(c),
            Err(e) => {
                r.fail(&std::io::Error::other(e.text(&loaded.header.id)));
                return r;
            }
        }
        // The recorder counts the conversation the session starts with (dangling calls
        // closed); the closing results are written with the next sync.
        r.ids = loaded.stored().into_iter().map(|(id, _)| id).collect();
        r.written = r.ids.len();
        r.last_id = loaded.entries.last().map(|e| e.id.clone());
        r.titled = loaded.title().is_some();
        (r.model, r.thinking) = loaded.model();
        r.service_tier = loaded.service_tier();
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

    /// Names the session now (`session/set_title`, `/rename`): a `session_info {name}` entry,
    /// written at once (the file is created for it if the session has none yet, as the spec
    /// allows for `session_info`). The title the first prompt would give is not written after.
    pub(crate) fn set_title(&mut self, name: String) {
        self.titled = true;
        self.title = None;
        if self.failed || self.gone.load(Ordering::Relaxed) {
            return;
        }
        if self.file.is_none() && !self.create_file() {
            return;
        }
        self.append(EntryKind::SessionInfo { name });
    }

    /// What lets the session stop this recorder's writes and give up its claim without the
    /// conversation's lock (a turn still finishing holds that; the main loop holds this).
    pub(crate) fn release_handle(&self) -> Release {
        Release {
            gone: self.gone.clone(),
            claim: self.claim.clone(),
        }
    }

    /// Creates the file with its header and takes its claim; false when that failed (logged).
    pub(super) fn create_file(&mut self) -> bool {
        if let Some(dir) = self.path.parent() {
            if let Err(e) = create_dir_private(dir) {
                self.fail(&e);
                return false;
            }
        }
        // Created new (an existing file is someone else's), then locked before anything
        // but the header is written.
        let created = open_append(&self.path, true).and_then(|mut f| {
            write_line(&mut f, &entry::header_line(&self.header))?;
            let claim = Claim::take(&self.path)
                .map_err(|e| std::io::Error::other(e.text(&self.header.id)))?;
            Ok((f, claim))
        });
        match created {
            Ok((f, claim)) => {
                let slot = self.claim.clone();
                let mut slot = lock(&slot);
                if self.gone.load(Ordering::Relaxed) {
                    // Released while the file was being made: it is not ours to write.
                    return false;
                }
                self.file = Some(f);
                *slot = Some(claim);
                true
            }
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

    /// The session's service tier (`/fast`, settings `defaultServiceTier`): a
    /// `service_tier_change` entry when it differs from the last one written (none: nothing).
    pub(crate) fn note_service_tier(&mut self, tier: Option<&str>) {
        let Some(tier) = tier else { return };
        if self.service_tier.as_deref() != Some(tier) {
            self.pending
                .push(EntryKind::ServiceTierChange(tier.to_owned()));
            self.service_tier = Some(tier.to_owned());
        }
    }

    /// The goal changed: its state (`thread_goal_state`) is written with the next sync, which
    /// creates the file if need be (the spec's explicit flush).
    pub(crate) fn note_goal(&mut self, state: Value) {
        self.pending.push(EntryKind::Custom(entry::CustomData {
            custom_type: entry::GOAL_STATE.to_owned(),
            data: state,
            rest: entry::Rest::new(),
        }));
        self.flush = true;
    }

    /// `/rlm-max-depth <n>`: kept with the session (`rlm_max_depth_state`), written with the
    /// next sync, which creates the file if need be.
    pub(crate) fn note_max_depth(&mut self, max_depth: u32) {
        self.pending.push(EntryKind::Custom(entry::CustomData {
            custom_type: entry::RLM_MAX_DEPTH_STATE.to_owned(),
            data: crate::base::json::json!({ "maxDepth": max_depth }),
            rest: entry::Rest::new(),
        }));
        self.flush = true;
    }

    /// A refinement's result (`prime-agent.refinement`, §5.4), written with the next sync,
    /// which creates the file if need be.
    pub(crate) fn note_refinement(&mut self, result: Value) {
        self.pending.push(EntryKind::Custom(entry::CustomData {
            custom_type: entry::REFINEMENT.to_owned(),
            data: result,
            rest: entry::Rest::new(),
        }));
        self.flush = true;
    }

    /// A child's model usage was counted into this session's (`child_usage_attributed`,
    /// behaviour spec §5.6), written with the next sync.
    pub(crate) fn note_child_usage(
        &mut self,
        child_id: &str,
        child_name: &str,
        usage: crate::provider::Usage,
        cost: f64,
    ) {
        self.pending.push(EntryKind::Other(entry::child_usage(
            child_id, child_name, usage, cost,
        )));
    }

    /// What the client was shown of a tool result, written with the result.
    pub(crate) fn note_tool_details(&mut self, call_id: &str, details: Option<Value>) {
        if let Some(d) = details {
            self.notes.details.insert(call_id.to_owned(), d);
        }
    }

    /// The message about to be pushed at `index` is this user shell run.
    pub(crate) fn note_bash(&mut self, index: usize, run: BashRun) {
        self.notes.by_index.insert(index, Note::Bash(run));
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
        self.notes.by_index.insert(index, Note::Custom(custom));
    }

    /// The unwritten message at `index` was taken back out of the conversation: what was
    /// noted of the later ones moves down with them.
    pub(crate) fn removed(&mut self, index: usize) {
        self.notes.by_index = std::mem::take(&mut self.notes.by_index)
            .into_iter()
            .filter(|(i, _)| *i != index)
            .map(|(i, n)| (if i > index { i - 1 } else { i }, n))
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
        let slot = self.claim.clone();
        let slot = lock(&slot);
        if slot.is_none() || self.gone.load(Ordering::Relaxed) {
            return;
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let written = write_line(file, &entry::entry_line(&entry));
        drop(slot);
        match written {
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
            if !self.flush && !messages.iter().any(|m| matches!(m, Message::Assistant(_))) {
                return;
            }
            if !self.create_file() {
                return;
            }
            // The title goes right after the header, where a listing finds it without
            // reading the conversation (`index.rs`).
            if !self.titled {
                let first = messages.iter().find_map(|m| match m {
                    Message::User { text, .. } => Some(text),
                    _ => None,
                });
                if let Some(name) = first.and_then(|t| crate::protocol::meta::session_title(t)) {
                    self.titled = true;
                    self.pending.push(EntryKind::SessionInfo { name });
                }
            }
        }
        for kind in std::mem::take(&mut self.pending) {
            self.append(kind);
        }
        for (i, m) in messages.iter().enumerate().skip(self.written) {
            let record = match (self.notes.take(i), m) {
                (Some(Note::Custom(custom)), Message::User { text, .. }) => {
                    self.append(EntryKind::CustomMessage(entry::CustomMessage {
                        custom_type: custom.custom_type.to_owned(),
                        content: Value::String(text.clone()),
                        display: custom.display,
                        details: custom.details,
                        rest: entry::Rest::new(),
                    }));
                    self.ids.push(self.last_id.clone());
                    continue;
                }
                (Some(Note::Bash(run)), _) => Record::Bash(run),
                (_, Message::ToolResult(ToolResultMessage { call_id, .. })) => Record::ToolResult {
                    message: m.clone(),
                    details: self.notes.details.remove(call_id),
                },
                _ => Record::Chat(m.clone()),
            };
            if let (false, None, Message::User { text, .. }) = (self.titled, &self.title, m) {
                self.title = crate::protocol::meta::session_title(text);
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
        self.append(EntryKind::Compaction(entry::Compaction {
            summary: summary.to_owned(),
            first_kept_entry_id: first_kept_id,
            tokens_before,
            context: Some(context),
            rest: entry::Rest::new(),
        }));
        self.ids = std::iter::once(self.last_id.clone()).chain(kept).collect();
        self.written = self.ids.len();
        self.notes.by_index.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::{load, Pick, Store};
    use crate::provider::tests_support::{answer, user};
    use crate::provider::{AssistantMessage, ToolCall};
    use std::fs;
    use std::path::Path;

    fn tmp(tag: &str) -> PathBuf {
        crate::base::test_support::temp_dir(&format!("persist-{tag}"))
    }

    /// A store whose sessions (and artifacts) live in `dir`.
    fn store_in(dir: &Path) -> Store {
        Store::new(dir.to_owned(), dir.join("artifacts"))
    }

    /// A store in a fresh directory (returned), and a recorder of session `id` in `/w`.
    fn recording(tag: &str, id: &str) -> (PathBuf, Store, Recorder) {
        let dir = tmp(tag);
        let store = store_in(&dir);
        let r = store.recorder(id, Path::new("/w"));
        (dir, store, r)
    }

    /// The entries of a session file, one JSON value a line.
    fn entries(path: &Path) -> Vec<Value> {
        fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The entries of one `type`.
    fn entries_of(path: &Path, kind: &str) -> Vec<Value> {
        entries(path)
            .into_iter()
            .filter(|v| v["type"] == kind)
            .collect()
    }

    /// Resumes `loaded` (once its recorder is gone), records one more prompt, and checks that
    /// loading the file gives `messages` with it: the resumed ids line up with the old ones.
    fn assert_resume_continues(loaded: &mut Loaded, path: &Path, messages: &mut Vec<Message>) {
        let mut again = Recorder::resume(loaded);
        messages.push(user("more"));
        again.sync(messages);
        assert_eq!(load(path).unwrap().messages(), *messages);
    }

    #[test]
    fn a_recorder_writes_once_the_model_answered_and_a_torn_tail_is_skipped_and_cut() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tmp("rec").join("sessions");
        let store = store_in(&dir);
        let mut r = store.recorder("s1", Path::new("/w"));
        let mut messages = vec![user("hello there")];
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
                arguments: crate::base::json::json!({"command": "ls"}),
            }],
            ..Default::default()
        }));
        r.sync(&messages);
        r.note_tool_details("c1", Some(crate::base::json::json!({"locations": ["x"]})));
        messages.push(Message::ToolResult(ToolResultMessage {
            call_id: "c1".into(),
            name: "bash".into(),
            text: "x".into(),
            is_error: false,
            images: vec![],
        }));
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
        let lines = entries(&path);
        let types: Vec<String> = lines
            .iter()
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
                "session_info",
                "message:user",
                "message:assistant",
                "message:toolResult"
            ]
        );
        // Every entry hangs below the one before.
        assert_eq!(lines[1]["parentId"], Value::Null);
        for w in lines[1..].windows(2) {
            assert_eq!(w[1]["parentId"], w[0]["id"]);
        }
        // A crash mid-write tears the last line: it is skipped, then cut before appending.
        let mut f = open_append(&path, false).unwrap();
        f.write_all(br#"{"type":"message","id":"dead"#).unwrap();
        let mut loaded = load(&path).unwrap();
        assert_eq!(loaded.messages(), messages);
        assert_eq!(loaded.title().as_deref(), Some("hello there"));
        assert_eq!(
            loaded.model(),
            (Some(("scripted".into(), "test".into())), Some("off".into())),
            "what a continued session restores"
        );
        assert_eq!(loaded.header.cwd, "/w");
        drop(r);
        assert_resume_continues(&mut loaded, &path, &mut messages);
        assert!(!fs::read_to_string(&path).unwrap().contains("dead"));
        let listed = store.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, "s1");
        assert_eq!(listed[0].title.as_deref(), Some("hello there"));
        fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_hidden_message_is_a_custom_message_the_model_gets_back_on_load() {
        let (dir, _store, mut r) = recording("hidden", "h1");
        let mut messages = vec![user("q"), answer("a")];
        r.note_hidden(2, "ipython_state_restored");
        messages.push(user(
            "<ipython_state_restored>\nx\n</ipython_state_restored>",
        ));
        messages.push(user("next"));
        r.sync(&messages);
        let path = dir.join("h1.jsonl");
        let hidden = entries_of(&path, "custom_message");
        assert_eq!(hidden.len(), 1);
        assert_eq!(hidden[0]["customType"], "ipython_state_restored");
        assert_eq!(hidden[0]["display"], false);
        assert_eq!(
            hidden[0]["content"],
            "<ipython_state_restored>\nx\n</ipython_state_restored>"
        );
        let mut loaded = load(&path).unwrap();
        assert_eq!(loaded.messages(), messages);
        // Resuming continues after it.
        drop(r);
        assert_resume_continues(&mut loaded, &path, &mut messages);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_shown_custom_message_keeps_its_details_and_a_taken_back_prompt_moves_the_notes() {
        let (dir, _store, mut r) = recording("custom", "k1");
        let beat = |n: u64| Custom {
            custom_type: "heartbeat_prompt",
            display: true,
            details: Some(crate::base::json::json!({"jobId": "hb-1", "runCount": n})),
        };
        // A prompt at 0 that failed before any model answered is taken back out: the firing
        // noted at 1 is now at 0, and a note for the removed one is gone.
        r.note_custom(0, beat(0));
        r.note_custom(1, beat(1));
        r.removed(0);
        let messages = vec![user("BEAT"), answer("a"), user("plain")];
        r.sync(&messages);
        let path = dir.join("k1.jsonl");
        let custom = entries_of(&path, "custom_message");
        assert_eq!(custom.len(), 1, "{custom:?}");
        assert_eq!(custom[0]["customType"], "heartbeat_prompt");
        assert_eq!(custom[0]["display"], true);
        assert_eq!(custom[0]["content"], "BEAT");
        assert_eq!(
            custom[0]["details"],
            crate::base::json::json!({"jobId": "hb-1", "runCount": 1})
        );
        assert_eq!(entries_of(&path, "message").len(), 2);
        assert_eq!(load(&path).unwrap().messages(), messages);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_compaction_is_recorded_and_a_load_rebuilds_the_compacted_context() {
        let (dir, _store, mut r) = recording("compact", "c1");
        let mut messages = vec![user("q1"), answer("a1"), user("q2"), answer("a2")];
        r.sync(&messages);
        // Keep from index 2 on; the summary takes the place of q1/a1.
        messages.splice(0..2, std::iter::once(user("SUMMARY of q1 a1")));
        r.compacted(&messages, 2, 1234, "the summary");
        messages.push(user("q3"));
        messages.push(answer("a3"));
        r.sync(&messages);
        let path = dir.join("c1.jsonl");
        let mut loaded = load(&path).unwrap();
        assert_eq!(loaded.messages(), messages);
        let compaction = entries_of(&path, "compaction");
        assert_eq!(compaction.len(), 1);
        assert_eq!(compaction[0]["tokensBefore"], 1234);
        assert_eq!(compaction[0]["summary"], "the summary");
        // A resumed recorder continues after it, and a second compaction keeps working.
        drop(r);
        let mut again = Recorder::resume(&mut loaded);
        messages.splice(0..3, std::iter::once(user("SUMMARY 2")));
        again.compacted(&messages, 3, 99, "second");
        messages.push(user("q4"));
        again.sync(&messages);
        assert_eq!(load(&path).unwrap().messages(), messages);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn picks_resolve_ids_prefixes_and_paths_and_forks_name_their_parent() {
        let (dir, store, mut r) = recording("pick", "0190aaaa-0000");
        let messages = vec![user("q"), answer("a")];
        r.sync(&messages);
        // The recorder owns the file: picking it is refused until it is gone.
        assert_eq!(
            store.pick(&Pick::Resume("0190a".into()), Path::new("/w")),
            Err(crate::persist::ClaimError::InThisProcess.text("0190aaaa-0000"))
        );
        drop(r);
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
        // A fork inherits its parent's schedules (and kernel state).
        let jobs = crate::base::json::json!([{"id": "hb-1", "status": "active"}]);
        store.write_jobs("0190aaaa-0000", &jobs).unwrap();
        store
            .pick(&Pick::Fork("0190aaaa-0000".into()), Path::new("/w"))
            .unwrap();
        let fork = store.take_next().unwrap();
        assert_eq!(store.load_jobs(&fork.header.id), Some(jobs));
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
