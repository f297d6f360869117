//! What ACP's session management does to the store: `session/delete`, `session/fork` and
//! titles (`session/set_title`, `/rename`). Small functions over `Store` and `Recorder`; the
//! main loop calls them (each is a few file operations, never a wait on a turn).

use std::fs;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::entry::EntryKind;
use super::{load, Loaded, Recorder, Store};

/// Removes `path` (a file or a directory tree); one that is not there is no error.
fn remove(path: &Path) -> std::io::Result<()> {
    let result = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    match result {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Store {
    /// Deletes session `id` for good: its file and its artifacts directory (schedules, the
    /// kernel's namespace snapshot, its subagents' conversations). An id that names no
    /// session is no error: ACP asks that deleting what is gone succeeds.
    pub(crate) fn delete(&self, id: &str) -> Result<(), String> {
        let Some(path) = self.path_of(id) else {
            return Ok(());
        };
        {
            // The session `-c`/`-r`/`--fork` picked, not yet taken by a `session/new`.
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            if next.as_ref().is_some_and(|l| l.header.id == id) {
                *next = None;
            }
        }
        // A file under this name that belongs to another session is not this one's.
        if let Ok(l) = load(&path) {
            if l.header.id != id {
                return Ok(());
            }
        }
        remove(&path).map_err(|e| format!("Cannot delete {}: {e}", path.display()))?;
        if let Some(dir) = self.artifacts_of(id) {
            remove(&dir).map_err(|e| format!("Cannot delete {}: {e}", dir.display()))?;
        }
        log::info!("deleted session {id}");
        Ok(())
    }

    /// `session/fork`: a copy of stored session `id` under a new id, in `cwd` (the `--fork`
    /// machinery: every entry, `parentSession`, the kernel state). `Ok(None)`: `id` has no
    /// file (unknown, or open but not yet written).
    pub(crate) fn fork_stored(&self, id: &str, cwd: &Path) -> Result<Option<Loaded>, String> {
        let Some(path) = self.path_of(id) else {
            return Ok(None);
        };
        match load(&path) {
            Ok(l) if l.header.id == id => self.fork(&path, cwd).map(Some),
            Ok(_) | Err(super::LoadError::Missing) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A fork of a session that has nothing on disk yet: a file with only its header, so the
    /// fork is listed (and loadable) from its response on.
    pub(crate) fn fork_empty(&self, cwd: &Path) -> Result<Loaded, String> {
        let id = uuid::Uuid::new_v4().to_string();
        let mut recorder = self.recorder(&id, cwd);
        if !recorder.create_file() {
            return Err(format!("Cannot create the session file of fork {id}"));
        }
        drop(recorder);
        let path = self.path_of(&id).expect("a uuid names a session");
        load(&path).map_err(|e| e.to_string())
    }
}

impl Recorder {
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

    /// Set when the session is deleted: the recorder writes nothing from then on (a turn
    /// still finishing holds the conversation; the main loop holds this).
    pub(crate) fn gone_flag(&self) -> Arc<AtomicBool> {
        self.gone.clone()
    }
}
