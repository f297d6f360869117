//! Starting and signalling child processes: the only code that spawns one (outside tests), and
//! the only unsafe code for children. Every child starts in its own process group, so one
//! `killpg` ends it and everything it started, and a terminal's ctrl-c does not reach it.
//!
//! On Linux every child also gets a parent-death signal (`PR_SET_PDEATHSIG`, SIGKILL), so a
//! `kill -9` of the agent does not leave it running. The kernel sends that signal when the
//! *thread* that forked the child ends, not the process, and turn workers, MCP connect threads
//! and subagent threads all end long before their children should. So every fork happens on
//! one long-lived `spawner` thread (started at the first spawn, never ended: it dies with the
//! process): callers hand it the `Command` and wait for the `Child`, a channel round trip. The
//! child re-checks `getppid()` after `prctl`, so an agent that died between the fork and the
//! `prctl` is noticed too (the child then exits before it execs).
//!
//! That signal reaches only the one process and is cleared in every fork, so a shell's
//! pipeline or `npx`'s node would survive it: each child therefore also forks a guard into its
//! group before its exec (`guard`), which kills the group at the agent's death. Why a guard and
//! not a subreaper or a per-child watcher thread: a thread dies with the agent, and a subreaper
//! only adopts orphans; the guard is a plain process that outlives the agent just long enough.
//!
//! A child given a `sandbox::Policy` enters it last, after the guard's fork (the guard, our
//! code only, stays outside): `PR_SET_NO_NEW_PRIVS` and `landlock_restrict_self` on a ruleset
//! built before the fork, and its `TMPDIR` is the sandbox's private directory.
//!
//! It uses only `sandbox`, its neighbour in `base`. Each unsafe block is a libc call whose
//! preconditions are checked here, so callers stay safe.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::OnceLock;

use crossbeam_channel::{bounded, unbounded, Sender};

use super::sandbox::{self, Policy};

/// A spawn the `spawner` thread carries out: the command (moved there and back) and where
/// the outcome goes.
struct Job {
    cmd: Command,
    reply: Sender<(Command, io::Result<Child>)>,
}

/// Spawns `cmd` as the leader of a new process group; returns the child and its pid, which is
/// also its group id (0 if it does not fit an `i32`, which every signal function refuses).
/// With `inherit = Some((fd, target))`, the parent's `fd` (close-on-exec) appears as `target`
/// in the child. With a `sandbox`, the child (and all it starts) runs inside that Landlock
/// policy. The fork happens on the `spawner` thread (see the module text); this call waits
/// for it.
pub(crate) fn spawn_group(
    cmd: &mut Command,
    inherit: Option<(BorrowedFd<'_>, RawFd)>,
    sandbox: Option<&Policy>,
) -> io::Result<(Child, i32)> {
    cmd.process_group(0);
    if let Some((fd, target)) = inherit {
        // `fd` stays borrowed (so open) until this function returns, after the fork.
        inherit_fd_as(cmd, fd.as_raw_fd(), target);
    }
    die_with_parent(cmd);
    if let Some(policy) = sandbox {
        if let Some(tmp) = &policy.tmp {
            cmd.env("TMPDIR", tmp);
        }
        enter_sandbox(cmd, policy.raw_fd());
    }
    let child = on_spawner(cmd)?;
    let pid = i32::try_from(child.id()).unwrap_or(0);
    Ok((child, pid))
}

/// Runs `cmd.spawn()` on the spawner thread. The command travels there and back by value
/// (a placeholder stands in meanwhile), so the caller keeps its `&mut Command` API.
fn on_spawner(cmd: &mut Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = unbounded::<Job>();
        let started = std::thread::Builder::new()
            .name("spawner".to_owned())
            .spawn(move || {
                // Lives as long as the process: the static sender is never dropped.
                for mut job in rx {
                    let result = job.cmd.spawn();
                    let _ = job.reply.send((job.cmd, result));
                }
            });
        match started {
            Ok(_detached) => Some(tx),
            Err(e) => {
                log::warn!("cannot start the spawner thread ({e}); children are forked by their callers, without a parent-death signal tied to a long-lived thread");
                None
            }
        }
    });
    let Some(spawner) = spawner else {
        return cmd.spawn();
    };
    let (reply, answer) = bounded(1);
    let job = Job {
        cmd: std::mem::replace(cmd, Command::new("/")),
        reply,
    };
    if let Err(crossbeam_channel::SendError(job)) = spawner.send(job) {
        *cmd = job.cmd;
        return cmd.spawn();
    }
    match answer.recv() {
        Ok((back, result)) => {
            *cmd = back;
            result
        }
        // Unreachable unless the spawner panicked (it does not): the command is lost with it.
        Err(_) => Err(io::Error::other("the spawner thread is gone")),
    }
}

/// Linux: the child gets SIGKILL when the spawner thread (that is, the agent) dies, and exits
/// at once if the agent is already gone. The signal reaches only that one process, not what
/// it starts (a shell's pipeline, `npx`'s node), and it is cleared in every fork; so the child
/// also forks a guard into its group (see `guard`), which kills the whole group when the
/// agent dies. Elsewhere there is neither: children end with their group kills and, for the
/// kernel and EOF-honouring MCP servers, at EOF on stdin.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    let guard_fd = guard_pipe();
    #[allow(unsafe_code)]
    // SAFETY: getpid(2) takes nothing. The closure runs between fork and exec, where only
    // async-signal-safe calls are allowed: prctl(2), getppid(2), getpid(2), fork(2) and
    // _exit(2) are (and `guard` keeps to such calls), and the closure neither allocates nor
    // locks. The child is single-threaded here, so forking again is safe.
    unsafe {
        let parent = libc::getpid();
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The agent died before the prctl took effect: the signal will never come.
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            if let Some(fd) = guard_fd {
                let leader = libc::getpid();
                // A failed fork only loses the guard; the leader keeps its own signal.
                if libc::fork() == 0 {
                    guard(fd, leader);
                }
            }
            Ok(())
        });
    }
}

/// The read end of a pipe whose write end only the agent holds (both close-on-exec, never
/// closed): its EOF is the agent's death, however it died. `None` if it cannot be made.
#[cfg(target_os = "linux")]
fn guard_pipe() -> Option<RawFd> {
    static PIPE: OnceLock<Option<RawFd>> = OnceLock::new();
    *PIPE.get_or_init(|| {
        let mut fds = [0 as libc::c_int; 2];
        #[allow(unsafe_code)]
        // SAFETY: pipe2(2) writes two fds into the two-element array it is given.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc == 0 {
            Some(fds[0]) // The write end stays open, unowned, for the life of the process.
        } else {
            log::warn!(
                "no guard pipe ({}): a killed agent leaves its children's children running",
                io::Error::last_os_error()
            );
            None
        }
    })
}

/// The guard: a fork of a child before its exec, in the child's process group, holding only
/// the guard pipe's read end. EOF there is the agent's death (every copy of the write end is
/// close-on-exec, and forks that have not exec'd yet close theirs here): the guard kills its
/// group. While the agent lives the group is the agent's to kill (the guard dies with it);
/// once the leader is gone (it exited, or its exec failed) the guard waits `LEADER_GRACE` for
/// that EOF (the leader may have died of the agent's death a moment before the pipe closed)
/// and otherwise exits. Never returns.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
unsafe fn guard(fd: RawFd, leader: libc::pid_t) -> ! {
    /// How often the guard checks that its leader still lives.
    const LEADER_POLL_MS: libc::c_int = 1000;
    /// How long a guard whose leader is gone waits for the agent's death.
    const LEADER_GRACE_MS: libc::c_int = 2000;
    // SAFETY (for the calls below): all are async-signal-safe system calls on plain integers
    // and stack values; nothing allocates or locks.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"prime-guard".as_ptr() as libc::c_ulong);
        // Only the guard pipe stays: the child's pipes must reach EOF when the child ends.
        if libc::dup2(fd, 0) < 0 {
            libc::_exit(0);
        }
        if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
            for other in 1..4096 {
                libc::close(other);
            }
        }
        // Some(true): the agent is dead; Some(false): the pipe failed; None: no news yet.
        let agent_died = |timeout_ms: libc::c_int| -> Option<bool> {
            let mut p = libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            };
            let n = libc::poll(&mut p, 1, timeout_ms);
            if n <= 0 {
                return None; // Timeout or EINTR.
            }
            let mut byte = 0u8;
            match libc::read(0, (&raw mut byte).cast(), 1) {
                0 => Some(true),
                n if n > 0 => None, // Nobody writes; ignore.
                _ if *libc::__errno_location() == libc::EINTR => None,
                _ => Some(false),
            }
        };
        loop {
            match agent_died(LEADER_POLL_MS) {
                Some(true) => break,
                Some(false) => libc::_exit(0),
                None => {}
            }
            if libc::getppid() != leader {
                if agent_died(LEADER_GRACE_MS) == Some(true) {
                    break;
                }
                libc::_exit(0);
            }
        }
        libc::killpg(0, libc::SIGKILL);
        libc::_exit(0)
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// The child enters the Landlock ruleset `fd` (registered after `die_with_parent`'s closure,
/// so after the guard's fork). `fd` is close-on-exec: the program never holds it.
fn enter_sandbox(cmd: &mut Command, fd: RawFd) {
    #[allow(unsafe_code)]
    // SAFETY: `sandbox::enter` makes two async-signal-safe system calls and neither allocates
    // nor locks. `fd` belongs to the `Policy` that `spawn_group` borrows until after the fork.
    unsafe {
        cmd.pre_exec(move || sandbox::enter(fd));
    }
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
        // Atomic close-on-exec where the kernel offers it (Linux); elsewhere set right after.
        #[cfg(target_os = "linux")]
        let kind = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
        #[cfg(not(target_os = "linux"))]
        let kind = libc::SOCK_SEQPACKET;
        if libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) < 0 {
            return Err(io::Error::last_os_error());
        }
        let pair = (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        );
        #[cfg(not(target_os = "linux"))]
        for fd in fds {
            if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(pair)
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    fn stat_field(pid: &str, n: usize) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = stat.rsplit(')').next()?.to_owned();
        rest.split_whitespace().nth(n).map(str::to_owned)
    }

    /// The live guard of group `pgid`, if any.
    fn guard_of(pgid: i32) -> Option<String> {
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            .find(|p| {
                stat_field(p, 2).and_then(|g| g.parse().ok()) == Some(pgid)
                    && stat_field(p, 0).is_some_and(|s| s != "Z")
                    && std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "prime-guard")
            })
    }

    /// Each child's group holds a guard that keeps only the guard pipe open (so the child's
    /// pipes reach EOF with it) and exits by itself once the leader is gone and the agent lives.
    #[test]
    fn a_child_group_holds_a_guard_that_ends_after_its_leader() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("read x")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let (mut child, pgid) = spawn_group(&mut cmd, None, None).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let guard = loop {
            if let Some(g) = guard_of(pgid) {
                break g;
            }
            assert!(Instant::now() < deadline, "no guard in group {pgid}");
            std::thread::sleep(Duration::from_millis(5));
        };
        // Its descriptors: only the guard pipe, on fd 0 (closing the rest races the check).
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_dir(format!("/proc/{guard}/fd")).map_or(0, |d| d.count()) != 1 {
            assert!(
                Instant::now() < deadline,
                "the guard keeps other descriptors"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(child.stdin.take()); // `read` sees EOF: the leader exits normally.
        child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while guard_of(pgid).is_some() {
            assert!(Instant::now() < deadline, "the guard outlived its leader");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
