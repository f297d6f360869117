//! One owner per session file: a process that records a session holds an advisory lock on its
//! file (`flock(LOCK_EX | LOCK_NB)`), from the moment it opens the session (`-c`, `-r`,
//! `session/load`, `session/resume`, or the file's creation) until the session is closed or
//! the process ends (the kernel drops the lock with the descriptor, even on `kill -9`). A
//! second process asking for the session is refused with `ClaimError`'s text; two writers
//! never append to one file.
//!
//! The lock is taken on a descriptor of its own (close-on-exec, so no child inherits it);
//! a process-wide list of what this process holds only chooses the words of a refusal.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Files (device, inode) this process holds a claim on.
static HELD: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<(u64, u64)>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lock on one session file, released when dropped.
#[derive(Debug)]
pub(crate) struct Claim {
    key: (u64, u64),
    /// Holds the lock: closing it releases it.
    _file: File,
}

/// Why a session could not be claimed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClaimError {
    /// Another process records it.
    Elsewhere,
    /// This process has it open already (another session, or the one `-c`/`-r` picked).
    InThisProcess,
    /// The file does not exist (nothing to claim yet).
    Missing,
    Io(String),
}

impl ClaimError {
    /// The refusal's text for session `id` (CLI error, JSON-RPC error message).
    pub(crate) fn text(&self, id: &str) -> String {
        match self {
            ClaimError::Elsewhere => format!(
                "Session {id} is open in another prime-agent process (its file is locked); close it there first, or continue a copy of it with --fork {id}"
            ),
            ClaimError::InThisProcess => format!("Session {id} is already open in this process"),
            ClaimError::Missing => format!("Session {id} has no file yet"),
            ClaimError::Io(why) => format!("Cannot lock session {id}: {why}"),
        }
    }
}

impl Claim {
    /// Locks the session file at `path` for this process, or says who has it.
    pub(crate) fn take(path: &Path) -> Result<Claim, ClaimError> {
        let file = File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ClaimError::Missing,
            _ => ClaimError::Io(format!("{}: {e}", path.display())),
        })?;
        let meta = file
            .metadata()
            .map_err(|e| ClaimError::Io(format!("{}: {e}", path.display())))?;
        let key = (meta.dev(), meta.ino());
        let deadline = Instant::now() + RELEASE_GRACE;
        loop {
            #[allow(unsafe_code)]
            // SAFETY: flock(2) takes a descriptor this function owns (`file` outlives the
            // call) and plain flags; it touches no memory of ours.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) if held().contains(&key) => ClaimError::InThisProcess,
                Some(libc::EWOULDBLOCK) if Instant::now() < deadline => {
                    std::thread::sleep(RELEASE_POLL);
                    continue;
                }
                Some(libc::EWOULDBLOCK) => ClaimError::Elsewhere,
                _ => ClaimError::Io(format!("{}: {e}", path.display())),
            });
        }
        held().push(key);
        Ok(Claim { key, _file: file })
    }
}

/// How long a lock held elsewhere is waited for before the claim is refused. A process that
/// was just killed can leave its lock behind for a moment: the descriptor is close-on-exec,
/// not close-on-fork, so a child it forked keeps the lock until that child execs (or dies of
/// its parent's death), which under load can take a scheduler tick or several. A harness that
/// kills an agent and continues its session at once must not be refused for that.
const RELEASE_GRACE: Duration = Duration::from_millis(1500);
const RELEASE_POLL: Duration = Duration::from_millis(20);

impl Drop for Claim {
    fn drop(&mut self) {
        let mut held = held();
        if let Some(i) = held.iter().position(|k| *k == self.key) {
            held.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_per_file_until_it_is_dropped() {
        let dir = crate::base::test_support::temp_dir("claim");
        let path = dir.join("s.jsonl");
        assert_eq!(Claim::take(&path).unwrap_err(), ClaimError::Missing);
        std::fs::write(&path, "{}\n").unwrap();
        let first = Claim::take(&path).unwrap();
        // A second open of the same file (another descriptor) is refused, and this process
        // knows it is its own.
        assert_eq!(Claim::take(&path).unwrap_err(), ClaimError::InThisProcess);
        drop(first);
        let again = Claim::take(&path).unwrap();
        drop(again);
        assert_eq!(
            ClaimError::Elsewhere.text("abc"),
            "Session abc is open in another prime-agent process (its file is locked); close it there first, or continue a copy of it with --fork abc"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Locks `path` on a descriptor of its own (as another process would) until `release`
    /// says so.
    fn hold_elsewhere(
        path: &Path,
        release: crossbeam_channel::Receiver<()>,
    ) -> std::thread::JoinHandle<()> {
        let file = File::open(path).unwrap();
        #[allow(unsafe_code)]
        // SAFETY: flock(2) on a descriptor `file` owns, plain flags.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(rc, 0);
        std::thread::spawn(move || {
            let _ = release.recv();
            drop(file);
        })
    }

    #[test]
    fn a_lock_released_within_the_grace_is_claimed_and_one_kept_is_refused() {
        let dir = crate::base::test_support::temp_dir("claim-grace");
        let path = dir.join("s.jsonl");
        std::fs::write(&path, "{}\n").unwrap();

        // Released soon after the claim starts waiting (a killed agent's forked child
        // execing): the claim gets it.
        let (tx, rx) = crossbeam_channel::bounded(1);
        let holder = hold_elsewhere(&path, rx);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            tx.send(()).unwrap();
        });
        let claim = Claim::take(&path).expect("released within the grace");
        releaser.join().unwrap();
        holder.join().unwrap();
        drop(claim);

        // Kept: refused as held elsewhere once the grace is over.
        let (tx, rx) = crossbeam_channel::bounded(1);
        let holder = hold_elsewhere(&path, rx);
        assert_eq!(Claim::take(&path).unwrap_err(), ClaimError::Elsewhere);
        tx.send(()).unwrap();
        holder.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
