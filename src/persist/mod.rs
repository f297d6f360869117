//! Sessions that survive the process (behaviour spec §5.6): one append-only JSONL file per
//! session, `<sessions dir>/<session id>.jsonl`.
//!
//! - `entry.rs`: the file format (pure conversions between lines and typed entries).
//! - `load.rs`: reading a file back (`Loaded`: the newest branch, a torn last line skipped).
//! - `recorder.rs`: the `Recorder` a session's conversation carries (its turn worker appends
//!   after each message, so the main loop never waits on the disk).
//! - `claim.rs`: one owner per session file (an advisory lock).
//! - `index.rs`: what listing needs of each file, from a small index and header + tail reads.
//! - `store.rs`: the sessions directory (`Store`: list, resolve, open and lock, fork, and the
//!   session `--continue` / `--resume` chose for the next `session/new`).
//! - `schedule/`: heartbeats (the grammar, the jobs).

mod claim;
pub(crate) mod entry;
mod index;
mod load;
mod manage;
mod recorder;
pub(crate) mod schedule;
mod store;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use serde_json::Value;

/// Defined in the leaf `content` (a prompt carries one); kept here under its old name.
pub(crate) use crate::base::content::Custom;
pub(crate) use claim::{Claim, ClaimError};
pub(crate) use load::{load, LoadError, Loaded};
pub(crate) use recorder::{Recorder, Release};
pub(crate) use store::{page, sessions_dir, OpenError, Pick, Store};

/// A new session's id: a UUIDv7, so ids sort by creation time (behaviour spec §5.6).
pub(crate) fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A fresh entry id: 8 hex digits, as upstream.
pub(super) fn entry_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

pub(crate) fn create_dir_private(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

pub(super) fn open_append(path: &Path, create_new: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.append(true).mode(0o600);
    if create_new {
        o.create_new(true);
    }
    o.open(path)
}

/// Where `path` is written before it is renamed into place: `<name>.tmp`. Listing, loading
/// and resolving never read a `*.tmp` name (a session file ends in `.jsonl`), so a crash
/// mid-write leaves an orphan that nothing mistakes for the real file.
pub(crate) fn tmp_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes a file atomically: `fill` writes the temporary file (`tmp_path`, created new and
/// private), which is flushed to the disk (`sync_data`) and renamed over `path`; on any error
/// the temporary file is removed. A reader sees the old file or the whole new one, never half
/// of one, whatever kills the process when.
pub(crate) fn write_atomic<T>(
    path: &Path,
    fill: impl FnOnce(&mut File) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let tmp = tmp_path(path);
    let write = || {
        // A leftover of a crashed write is ours to replace.
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let value = fill(&mut f)?;
        f.sync_data()?;
        fs::rename(&tmp, path)?;
        // The rename itself is durable once the directory is (best effort: some file systems
        // refuse to sync a directory).
        if let Some(dir) = path.parent() {
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(value)
    };
    write().inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// One line, written with one `write` so a crash leaves at most this line torn.
pub(super) fn write_line(file: &mut File, v: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    file.write_all(&bytes)
}
