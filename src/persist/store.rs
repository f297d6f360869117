//! The sessions directory: listing, resolving `-r` arguments, forking, and the session the
//! command line picked for the next `session/new`.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use super::entry::{self, Header};
use super::index::Summary;
use super::{create_dir_private, load, Claim, ClaimError};
use super::{LoadError, Loaded, Recorder};
use crate::base::time::now_iso;

/// A session's schedules beside its conversation (`<artifacts>/<id>/`).
const JOBS_FILE: &str = "scheduled-jobs.json";

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

/// Why `Store::open` could not open a session to continue it.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// No such session (no file, or its header names another id).
    Unknown,
    /// Its file does not read.
    Unreadable(String),
    /// Another owner records it (`claim.rs`).
    Claimed(String),
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
        Some(self.artifacts_of(session_id)?.join(JOBS_FILE))
    }

    /// Stores a session's schedules (`<artifacts>/<id>/scheduled-jobs.json`, replaced
    /// atomically and durably by `write_atomic`; the store worker's job, never the loop's).
    pub(crate) fn write_jobs(&self, session_id: &str, jobs: &Value) -> Result<PathBuf, String> {
        let Some(path) = self.jobs_file(session_id) else {
            return Err(format!("\"{session_id}\" cannot name a session"));
        };
        create_dir_private(path.parent().unwrap_or(&self.artifacts))
            .and_then(|()| {
                super::write_atomic(&path, |f| {
                    f.write_all(&serde_json::to_vec(
                        &crate::base::json::json!({ "jobs": jobs }),
                    )?)
                })
            })
            .map(|()| path.clone())
            .map_err(|e| format!("cannot store the schedules in {}: {e}", path.display()))
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

    /// A fork starts with its parent's kernel state and schedules (copies: the two go their
    /// own ways; the jobs' session fields become the fork's when it opens).
    fn copy_artifacts(&self, from: &str, to: &str) -> std::io::Result<()> {
        let (Some(src), Some(dst)) = (self.artifacts_of(from), self.artifacts_of(to)) else {
            return Ok(());
        };
        for name in [
            crate::kernel::state::PICKLE_FILE,
            crate::kernel::state::LEGACY_PICKLE_FILE,
            crate::kernel::state::MANIFEST_FILE,
            JOBS_FILE,
        ] {
            let from = src.join(name);
            if !from.is_file() {
                continue;
            }
            create_dir_private(&dst)?;
            super::write_atomic(&dst.join(name), |f| {
                std::io::copy(&mut File::open(&from)?, f)
            })?;
        }
        Ok(())
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
        let id = crate::persist::new_session_id();
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

    /// The session the command line picked, if it is `id`: a `session/load` of it opens that
    /// one (it holds the claim), so a later `session/new` cannot open it a second time.
    pub(crate) fn take_next_if(&self, id: &str) -> Option<Loaded> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        if next.as_ref().is_some_and(|l| l.header.id == id) {
            return next.take();
        }
        None
    }

    /// Opens stored session `id` to continue it (`session/load`, `session/resume`): claims
    /// its file first (so nobody appends while it is read), then reads it.
    pub(crate) fn open(&self, id: &str) -> Result<Loaded, OpenError> {
        let path = self.path_of(id).ok_or(OpenError::Unknown)?;
        let claim = Claim::take(&path).map_err(|e| match e {
            ClaimError::Missing => OpenError::Unknown,
            e => OpenError::Claimed(e.text(id)),
        })?;
        let mut loaded = match load(&path) {
            Ok(l) if l.header.id == id => l,
            Ok(_) | Err(LoadError::Missing) => return Err(OpenError::Unknown),
            Err(e) => return Err(OpenError::Unreadable(e.to_string())),
        };
        loaded.claim = Some(claim);
        Ok(loaded)
    }

    /// The CLI's open of the session file at `path`: claimed, then read.
    fn open_path(&self, path: &Path) -> Result<Loaded, String> {
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let claim = Claim::take(path).map_err(|e| e.text(&id))?;
        let mut loaded = self.read(path)?;
        loaded.claim = Some(claim);
        Ok(loaded)
    }

    /// Applies `-c`, `-r` or `--fork` at start-up; an `Err` is the CLI error text.
    pub(crate) fn pick(&self, pick: &Pick, cwd: &Path) -> Result<(), String> {
        let loaded = match pick {
            Pick::Continue => {
                let cwd = cwd.display().to_string();
                match self.list().into_iter().find(|s| s.cwd == cwd) {
                    Some(s) => Some(self.open_path(&s.path)?),
                    None => {
                        log::info!("--continue: no earlier session for {cwd}; starting a new one");
                        None
                    }
                }
            }
            Pick::Resume(arg) => Some(self.open_path(&self.resolve(arg)?)?),
            Pick::Fork(arg) => Some(self.fork(&self.resolve(arg)?, cwd)?),
        };
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(())
    }

    fn read(&self, path: &Path) -> Result<Loaded, String> {
        load(path).map_err(|e| format!("Cannot read session {}: {e}", path.display()))
    }

    /// `<id|path>`: a path to a file, else a session id (or a unique id prefix) in the dir.
    pub(crate) fn resolve(&self, arg: &str) -> Result<PathBuf, String> {
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
    pub(super) fn fork(&self, source: &Path, cwd: &Path) -> Result<Loaded, String> {
        let original = self.read(source)?;
        let id = crate::persist::new_session_id();
        let path = self.dir.join(format!("{id}.jsonl"));
        let header = Header {
            id,
            timestamp: now_iso(),
            cwd: cwd.display().to_string(),
            parent_session: Some(source.display().to_string()),
        };
        // Atomic (`write_atomic`): the copy is written and flushed under a temporary name, its
        // artifacts copied, and only then renamed into place, so a crash or a write error
        // mid-copy never leaves a partial fork that lists and loads as a session. The claim is
        // taken on the temporary file: the lock is the inode's and moves with the rename.
        create_dir_private(&self.dir)
            .map_err(|e| format!("Cannot fork into {}: {e}", path.display()))?;
        let claim = super::write_atomic(&path, |f| {
            let claim = Claim::take(&super::tmp_path(&path))
                .map_err(|e| std::io::Error::other(e.text(&header.id)))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut *f);
            write_buffered(&mut out, &entry::header_line(&header))?;
            for e in &original.entries {
                write_buffered(&mut out, &entry::entry_line(e))?;
            }
            out.flush()?;
            drop(out);
            self.copy_artifacts(&original.header.id, &header.id)?;
            Ok(claim)
        })
        .map_err(|e| format!("Cannot fork into {}: {e}", path.display()))?;
        let mut loaded = self.read(&path)?;
        loaded.claim = Some(claim);
        Ok(loaded)
    }

    /// Every readable session, newest first (`index.rs`: no whole file is parsed).
    pub(crate) fn list(&self) -> Vec<Summary> {
        super::index::list(&self.dir)
    }
}

/// One line into a buffered writer (a fork writes a whole file; a line torn by a crash is in
/// a temporary file nobody reads).
fn write_buffered(out: &mut impl Write, v: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, v).map_err(std::io::Error::other)?;
    out.write_all(b"\n")
}

/// The sessions directory: `--session-dir` > `PRIME_AGENT_SESSION_DIR` >
/// `PRIME_AGENT_CODING_AGENT_SESSION_DIR` > `<agent dir>/sessions`.
pub(crate) fn sessions_dir(
    flag: Option<&Path>,
    settings: Option<&Path>,
    agent_dir: &Path,
) -> PathBuf {
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
    // Settings `sessionDir` (a relative one is the agent dir's).
    if let Some(dir) = settings {
        return agent_dir.join(dir);
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
        .filter(|s| cwd.is_none_or(|c| crate::protocol::acp::same_cwd(c, Path::new(&s.cwd))))
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
}
