//! What ACP's session management does to the store: `session/delete`, `session/fork` and
//! titles of sessions that are not open (`session/set_title`). Small functions over
//! `Store`; the main loop calls them (each is a few file operations, never a wait on a turn).
//! Every change to a file is made under its claim (`claim.rs`), so a session another process
//! records is never deleted or appended to.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use super::{load, Claim, ClaimError, LoadError, Loaded, OpenError, Recorder, Store};

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
    /// Deletes stored session `id` for good: its file and its artifacts directory
    /// (schedules, the kernel's namespace snapshot, its subagents' conversations), under its
    /// claim. An id that names no session is no error (ACP: deleting what is gone succeeds);
    /// a session another owner records is refused with the claim's text.
    pub(crate) fn delete(&self, id: &str) -> Result<(), String> {
        let Some(path) = self.path_of(id) else {
            return Ok(());
        };
        // The session `-c`/`-r` picked and no `session/new` took yet: its claim goes with it.
        drop(self.take_next_if(id));
        let claim = match Claim::take(&path) {
            Ok(c) => Some(c),
            Err(ClaimError::Missing) => None,
            Err(e) => return Err(e.text(id)),
        };
        // A file under this name that belongs to another session is not this one's.
        if matches!(load(&path), Ok(l) if l.header.id != id) {
            return Ok(());
        }
        self.delete_owned(id)?;
        drop(claim);
        Ok(())
    }

    /// Deletes session `id`, whose claim this process holds (the open session being deleted:
    /// its recorder has the lock and has been told to stop writing).
    pub(crate) fn delete_owned(&self, id: &str) -> Result<(), String> {
        let Some(path) = self.path_of(id) else {
            return Ok(());
        };
        remove(&path).map_err(|e| format!("Cannot delete {}: {e}", path.display()))?;
        if let Some(dir) = self.artifacts_of(id) {
            remove(&dir).map_err(|e| format!("Cannot delete {}: {e}", dir.display()))?;
        }
        log::info!("deleted session {id}");
        Ok(())
    }

    /// `session/fork`: a copy of stored session `id` under a new id, in `cwd` (the `--fork`
    /// machinery: every entry, `parentSession`, the kernel state and schedules), claimed for
    /// this process. `Ok(None)`: `id` has no file (unknown, or open but not yet written).
    pub(crate) fn fork_stored(&self, id: &str, cwd: &Path) -> Result<Option<Loaded>, String> {
        let Some(path) = self.path_of(id) else {
            return Ok(None);
        };
        match load(&path) {
            Ok(l) if l.header.id == id => self.fork(&path, cwd).map(Some),
            Ok(_) | Err(LoadError::Missing) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A fork of a session that has nothing on disk yet: a file with only its header, so the
    /// fork is listed (and loadable) from its response on.
    pub(crate) fn fork_empty(&self, cwd: &Path) -> Result<Loaded, String> {
        let id = crate::persist::new_session_id();
        let mut recorder = self.recorder(&id, cwd);
        if !recorder.create_file() {
            return Err(format!("Cannot create the session file of fork {id}"));
        }
        let path = self.path_of(&id).expect("a uuid names a session");
        let mut loaded = load(&path).map_err(|e| e.to_string())?;
        loaded.claim = recorder
            .claim
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        Ok(loaded)
    }

    /// Names stored session `id`, which is not open, in its file (under its claim).
    pub(crate) fn rename(&self, id: &str, title: String) -> Result<(), OpenError> {
        let mut loaded = self.open(id)?;
        Recorder::resume(&mut loaded).set_title(title);
        Ok(())
    }
}
