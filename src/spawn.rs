//! Starting and signalling child processes: the only code that spawns one (outside tests), and
//! the only unsafe code for children. Every child starts in its own process group, so one
//! `killpg` ends it and everything it started, and a terminal's ctrl-c does not reach it.
//!
//! A leaf: it uses no other module of the crate. Each unsafe block is a libc call whose
//! preconditions are checked here, so callers stay safe.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// Spawns `cmd` as the leader of a new process group; returns the child and its pid, which is
/// also its group id (0 if it does not fit an `i32`, which every signal function refuses).
/// With `inherit = Some((fd, target))`, the parent's `fd` (close-on-exec) appears as `target`
/// in the child.
pub(crate) fn spawn_group(
    cmd: &mut Command,
    inherit: Option<(BorrowedFd<'_>, RawFd)>,
) -> io::Result<(Child, i32)> {
    cmd.process_group(0);
    if let Some((fd, target)) = inherit {
        inherit_fd_as(cmd, fd.as_raw_fd(), target);
    }
    let child = cmd.spawn()?;
    let pid = i32::try_from(child.id()).unwrap_or(0);
    Ok((child, pid))
}

/// Makes `fd` (open in the parent, close-on-exec) appear as `target` in the child.
fn inherit_fd_as(cmd: &mut Command, fd: RawFd, target: RawFd) {
    #[allow(unsafe_code)]
    // SAFETY: the closure runs between fork and exec, where only async-signal-safe calls are
    // allowed: dup2(2) and fcntl(2) are, and the closure neither allocates nor locks. `fd` is
    // borrowed by `spawn_group` until `spawn` returns, so it is valid in the forked child.
    unsafe {
        cmd.pre_exec(move || {
            if fd == target {
                // dup2 onto itself would keep FD_CLOEXEC; clear it so exec keeps the fd.
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(fd, target) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sends `sig` to process `pid`. Refuses `pid <= 0`, which would signal a whole group or every
/// process we may signal.
pub(crate) fn signal_process(pid: i32, sig: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    #[allow(unsafe_code)]
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; pid > 0 targets
    // exactly one process.
    let rc = unsafe { libc::kill(pid, sig) };
    rc == 0
}

/// Sends `sig` to every process of group `pgid`. Refuses `pgid <= 1`: 0 and negative ids would
/// address our own group or every process we may signal, and 1 is init's, never a child's.
pub(crate) fn signal_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    #[allow(unsafe_code)]
    // SAFETY: killpg(2) takes plain integers and touches no memory of ours; pgid > 1 names one
    // group (never ours: children are started in their own group).
    let rc = unsafe { libc::killpg(pgid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
