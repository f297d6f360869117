//! Bounded reads of files the user did not hand us: context files found by walking up from
//! the cwd (`AGENTS.md`, `CLAUDE.md`), `SYSTEM.md`, the harness state, settings, skills and
//! templates. A cloned repository is untrusted input: a FIFO under one of those names would
//! block a plain `read_to_string` for good, and a symlink to `/dev/zero` would grow it without
//! bound. So the file is opened non-blocking, `fstat` must say it is a regular file, and at
//! most `cap` bytes are read; anything else is a `Skip` the caller logs and passes over.
//!
//! A leaf: no other module of the crate.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The cap on a context file, `SYSTEM.md`, a skill or a template (upstream-like: a prompt file
/// larger than this is a mistake, not instructions).
pub(crate) const TEXT_CAP: u64 = 256 * 1024;

/// The cap on a settings or harness-state file (JSON the agent itself may have written).
pub(crate) const JSON_CAP: u64 = 4 * 1024 * 1024;

/// Why a file was not read (`NotFound` is the one callers usually pass over silently).
#[derive(Debug, PartialEq)]
pub(crate) enum Skip {
    /// Nothing under that name (or a dangling symlink).
    NotFound,
    /// Not a regular file: a FIFO, a device, a socket or a directory.
    NotRegular(&'static str),
    /// Larger than the cap (its size, the cap).
    TooLarge(u64, u64),
    /// Not UTF-8 text.
    NotText,
    /// Any other error opening or reading it.
    Io(String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NotFound => f.write_str("not found"),
            Skip::NotRegular(kind) => write!(f, "not a regular file but a {kind}"),
            Skip::TooLarge(size, cap) => write!(f, "{size} bytes, over the {cap}-byte cap"),
            Skip::NotText => f.write_str("not UTF-8 text"),
            Skip::Io(e) => f.write_str(e),
        }
    }
}

/// The text of `path` if it is a regular file of at most `cap` bytes. Never blocks on a FIFO
/// or a device and never reads more than `cap + 1` bytes.
pub(crate) fn read_text(path: &Path, cap: u64) -> Result<String, Skip> {
    let file = open(path)?;
    let meta = file.metadata().map_err(|e| Skip::Io(e.to_string()))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "directory"
        } else {
            special_kind(kind)
        };
        return Err(Skip::NotRegular(what));
    }
    if meta.len() > cap {
        return Err(Skip::TooLarge(meta.len(), cap));
    }
    // The file may grow between the `fstat` and the read: never more than the cap.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Skip::Io(e.to_string()))?;
    if bytes.len() as u64 > cap {
        return Err(Skip::TooLarge(bytes.len() as u64, cap));
    }
    String::from_utf8(bytes).map_err(|_| Skip::NotText)
}

/// What a file that is neither a regular file nor a directory is, in words (the `read` tool's
/// refusal and `Skip::NotRegular`'s).
pub(crate) fn special_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "named pipe (FIFO)"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// `read_text`, with anything but "not found" logged as a warning naming the file and what
/// it is for; `None` for any skip.
pub(crate) fn read_or_warn(path: &Path, cap: u64, what: &str) -> Option<String> {
    match read_text(path, cap) {
        Ok(text) => Some(text),
        Err(Skip::NotFound) => None,
        Err(why) => {
            log::warn!("skipping {what} {}: {why}", path.display());
            None
        }
    }
}

/// Opens for reading without blocking: `O_NONBLOCK` makes the open of a FIFO with no writer
/// return at once (a plain open waits for a writer), and `O_NOCTTY` keeps a terminal device
/// from becoming ours.
fn open(path: &Path) -> Result<File, Skip> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => Skip::NotFound,
            _ => Skip::Io(e.to_string()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("untrusted-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn reads_regular_files_and_skips_everything_else_without_blocking() {
        let dir = temp();
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        std::fs::write(dir.join("ok.md"), "hello").unwrap();
        std::fs::write(dir.join("big.md"), vec![b'a'; 11]).unwrap();
        std::fs::write(dir.join("bin"), [0xff, 0xfe]).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
        std::os::unix::fs::symlink(dir.join("ok.md"), dir.join("link.md")).unwrap();
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        let cases: [(&str, Result<String, Skip>); 8] = [
            ("ok.md", Ok("hello".into())),
            ("link.md", Ok("hello".into())),
            ("fifo", Err(Skip::NotRegular("named pipe (FIFO)"))),
            ("zero", Err(Skip::NotRegular("character device"))),
            ("big.md", Err(Skip::TooLarge(11, 10))),
            ("bin", Err(Skip::NotText)),
            ("dangling", Err(Skip::NotFound)),
            (".", Err(Skip::NotRegular("directory"))),
        ];
        for (name, want) in cases {
            assert_eq!(read_text(&dir.join(name), 10), want, "{name}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
