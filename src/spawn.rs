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

/// A connected pair of `AF_UNIX` `SOCK_SEQPACKET` sockets (close-on-exec): message boundaries
/// are kept, descriptors travel with a message (`send_with_fds`), and either end sees EOF when
/// the other closes. The kernel zygote's control channel.
pub(crate) fn seqpacket_pair() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1 as RawFd; 2];
    #[allow(unsafe_code)]
    // SAFETY: socketpair(2) writes two fds into the array we own; on success both are fresh,
    // owned by nobody else, so each becomes an OwnedFd exactly once.
    unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok((
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        ))
    }
}

/// Sends `data` as one message on the socket `sock` with `fds` attached (`SCM_RIGHTS`): the
/// receiver gets its own copies of the descriptors; ours stay open.
pub(crate) fn send_with_fds(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let fd_bytes = std::mem::size_of_val(raw.as_slice());
    #[allow(unsafe_code)]
    // SAFETY: CMSG_SPACE / CMSG_LEN are pure size computations. The control buffer is sized by
    // CMSG_SPACE for `raw` and zeroed; CMSG_FIRSTHDR of a msghdr whose control buffer is that
    // large is non-null and points into it, and CMSG_DATA has room for `fd_bytes` bytes. The
    // iovec points at `data`, which outlives the call; sendmsg(2) only reads these buffers.
    unsafe {
        let space = libc::CMSG_SPACE(fd_bytes as u32) as usize;
        let mut control = vec![0u8; space];
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !raw.is_empty() {
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = space as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
        loop {
            let n = libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if n >= 0 {
                return if n as usize == data.len() {
                    Ok(())
                } else {
                    Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"))
                };
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}
