//! Process facts read from `/proc`: liveness, thread / fd / child counts and memory of the
//! agent, for the kill, leak and bounded-memory tests.

use std::path::Path;
use std::time::{Duration, Instant};

use super::TIMEOUT;

/// Waits (bounded) for a file a command writes, and returns its trimmed content.
pub fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s.trim().to_owned();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` is a live process (a zombie awaiting its reaper counts as dead).
pub fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
    }
}

/// Asserts `pid` dies (bounded wait: the kill is immediate, reaping may lag on a busy box).
pub fn assert_dies(pid: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still alive");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `threads`, `fds` or `children` (direct children of any of the process's threads).
pub fn proc_count(pid: u32, what: &str) -> usize {
    match what {
        "threads" => std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count())
            .unwrap_or(0),
        "fds" => std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0),
        "children" => std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(|t| t.ok())
                    .map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default())
                    .map(|c| c.split_whitespace().count())
                    .sum()
            })
            .unwrap_or(0),
        _ => unreachable!(),
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), 0 when unreadable.
pub fn vm_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub threads: usize,
    pub fds: usize,
    pub children: usize,
    pub rss_kib: u64,
}

pub fn snapshot(pid: u32) -> Snapshot {
    // Turn workers exit right after their last message; give the last one a moment.
    std::thread::sleep(Duration::from_millis(50));
    Snapshot {
        threads: proc_count(pid, "threads"),
        fds: proc_count(pid, "fds"),
        children: proc_count(pid, "children"),
        rss_kib: vm_kib(pid, "VmRSS:"),
    }
}

/// Like `snapshot`, but waits (bounded) until threads, fds and children are back at `base`:
/// the kill is immediate, reaping and thread exit may lag on a busy machine. Returns the
/// last snapshot either way; the caller asserts.
pub fn settle_to(pid: u32, base: &Snapshot) -> Snapshot {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let s = snapshot(pid);
        let settled = s.threads <= base.threads && s.fds <= base.fds && s.children <= base.children;
        if settled || Instant::now() > deadline {
            return s;
        }
    }
}

/// The process group of `pid` (0 when unreadable).
pub fn pgid_of(pid: &str) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // After the `(comm)`: state, ppid, pgrp.
            let rest = stat.rsplit(')').next()?.to_owned();
            rest.split_whitespace().nth(2)?.parse().ok()
        })
        .unwrap_or(0)
}

/// The live processes (zombies excluded) of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| pgid_of(pid) == pgid && alive(pid))
        .collect()
}
