//! The only unsafe code of the kernel: sending signals and placing the frame pipe on fd 3 in the
//! child. Each function is a one-line libc call whose preconditions are checked here, so callers
//! stay safe.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

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

/// Sends `sig` to every process of group `pgid` (> 0).
pub(crate) fn signal_group(pgid: i32, sig: i32) -> bool {
    if pgid <= 0 {
        return false;
    }
    #[allow(unsafe_code)]
    // SAFETY: killpg(2) takes plain integers and touches no memory of ours; pgid > 0 names one
    // group (never ours: kernels are started in their own group).
    let rc = unsafe { libc::killpg(pgid, sig) };
    rc == 0
}

/// Makes `fd` (open in the parent, close-on-exec) appear as `target` in the child.
pub(crate) fn inherit_fd_as(cmd: &mut Command, fd: RawFd, target: RawFd) {
    #[allow(unsafe_code)]
    // SAFETY: the closure runs between fork and exec, where only async-signal-safe calls are
    // allowed: dup2(2) and fcntl(2) are, and the closure neither allocates nor locks. `fd` stays
    // open in the parent until `spawn` returns, so it is valid in the forked child.
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
