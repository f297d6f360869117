//! SIGINT and SIGTERM (and SIGHUP) as a channel the main loop selects on.
//!
//! On Linux (and everywhere but Apple's systems) this is the `ctrlc` crate. On macOS `ctrlc`
//! waits on a libdispatch semaphore, which links Apple's Foundation framework, and a build
//! made on Linux (the release archives, `cargo zigbuild`) has no macOS SDK to link it with. So
//! there the same thing is done with `sigaction` and the self-pipe trick: the handler writes
//! one byte to a pipe (async-signal-safe), and a named thread turns each byte into a message.

use crossbeam_channel::{bounded, Receiver};

/// A channel that receives `()` for each SIGINT, SIGTERM or SIGHUP (at most a few queued).
pub(crate) fn interrupts() -> Result<Receiver<()>, String> {
    let (tx, rx) = bounded(4);
    install(move || {
        let _ = tx.try_send(());
    })
    .map_err(|e| format!("Cannot install the signal handler: {e}"))?;
    Ok(rx)
}

#[cfg(not(target_vendor = "apple"))]
fn install(on_signal: impl FnMut() + Send + 'static) -> Result<(), String> {
    ctrlc::set_handler(on_signal).map_err(|e| e.to_string())
}

#[cfg(target_vendor = "apple")]
fn install(mut on_signal: impl FnMut() + Send + 'static) -> Result<(), String> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The pipe's write end, for the handler (set once, before any handler runs).
    static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn handler(_: libc::c_int) {
        let fd = WRITE_FD.load(Ordering::Relaxed);
        let byte = 1u8;
        #[allow(unsafe_code)]
        // SAFETY: write(2) is async-signal-safe; the byte lives on this frame. A full pipe
        // drops the byte, which only merges two signals into one.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }

    let mut fds = [-1; 2];
    #[allow(unsafe_code)]
    // SAFETY: pipe(2) fills the array we own; fcntl(2) and sigaction(2) take plain values and
    // a zeroed, then filled, sigaction struct that lives across the calls.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        for fd in fds {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
        WRITE_FD.store(fds[1], Ordering::Relaxed);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().to_string());
            }
        }
    }
    #[allow(unsafe_code)]
    // SAFETY: a fresh fd from pipe(2), owned by nobody else.
    let mut read_end = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || {
            let mut byte = [0u8; 1];
            while matches!(read_end.read(&mut byte), Ok(1)) {
                on_signal();
            }
        })
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sigterm_arrives_on_the_channel() {
        let rx = super::interrupts().unwrap();
        let me = std::process::id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &me])
            .status()
            .unwrap();
        assert!(sent.success());
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok());
    }
}
