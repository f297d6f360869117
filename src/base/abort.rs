//! `AbortFlag`: the one cancellation primitive shared by turns, providers and tools.
//!
//! A flag is set once (by `session/cancel`, `session/close`, stdin EOF or a signal) and never
//! cleared. Code that blocks registers an abort hook (kill a process group, shut a socket down)
//! so that setting the flag unblocks it at once instead of at the next poll.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Hook = Box<dyn FnOnce() + Send>;

/// A cloneable, set-once cancellation flag with abort hooks.
#[derive(Clone, Default)]
pub struct AbortFlag(Arc<Inner>);

#[derive(Default)]
struct Inner {
    set: AtomicBool,
    next_hook: AtomicU64,
    hooks: Mutex<HashMap<u64, Hook>>,
}

/// Removes its hook when dropped, so long turns do not accumulate dead hooks.
pub struct HookGuard {
    flag: AbortFlag,
    id: u64,
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        if let Ok(mut hooks) = self.flag.0.hooks.lock() {
            hooks.remove(&self.id);
        }
    }
}

/// Returned by checkpoints when the flag is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted;

impl AbortFlag {
    pub fn new() -> AbortFlag {
        AbortFlag::default()
    }

    /// Sets the flag and runs every registered hook (each at most once).
    pub fn abort(&self) {
        if self.0.set.swap(true, Ordering::SeqCst) {
            return;
        }
        let hooks: Vec<Hook> = match self.0.hooks.lock() {
            Ok(mut hooks) => hooks.drain().map(|(_, hook)| hook).collect(),
            Err(_) => Vec::new(),
        };
        for hook in hooks {
            hook();
        }
    }

    pub fn is_aborted(&self) -> bool {
        self.0.set.load(Ordering::SeqCst)
    }

    /// A named checkpoint: `Err(Aborted)` once the flag is set.
    pub fn check(&self) -> Result<(), Aborted> {
        if self.is_aborted() {
            Err(Aborted)
        } else {
            Ok(())
        }
    }

    /// Registers `hook` to run when the flag is set; runs it now if it already is.
    pub fn on_abort(&self, hook: impl FnOnce() + Send + 'static) -> HookGuard {
        let id = self.0.next_hook.fetch_add(1, Ordering::Relaxed);
        let guard = HookGuard {
            flag: self.clone(),
            id,
        };
        if let Ok(mut hooks) = self.0.hooks.lock() {
            hooks.insert(id, Box::new(hook));
        }
        // The flag may have been set between the caller's check and the insert above.
        if self.is_aborted() {
            let hook = self.0.hooks.lock().ok().and_then(|mut h| h.remove(&id));
            if let Some(hook) = hook {
                hook();
            }
        }
        guard
    }

    /// Sleeps for `duration`; returns `Err(Aborted)` as soon as the flag is set (an abort hook
    /// unparks the sleeping thread, so a cancel does not wait for the sleep to run out).
    pub fn sleep(&self, duration: Duration) -> Result<(), Aborted> {
        let deadline = Instant::now() + duration;
        let me = std::thread::current();
        let _hook = self.on_abort(move || me.unpark());
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            // Spurious and stale wake-ups just go round the loop again.
            std::thread::park_timeout(deadline - now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_wakes_a_sleeper() {
        let flag = AbortFlag::new();
        let f = flag.clone();
        let sleeper = std::thread::spawn(move || f.sleep(Duration::from_secs(300)));
        std::thread::sleep(Duration::from_millis(20));
        flag.abort();
        assert_eq!(sleeper.join().unwrap(), Err(Aborted));
        assert_eq!(flag.sleep(Duration::from_secs(300)), Err(Aborted));
        assert_eq!(AbortFlag::new().sleep(Duration::from_millis(1)), Ok(()));
    }

    #[test]
    fn hooks_run_once_and_late_hooks_run_immediately() {
        let flag = AbortFlag::new();
        let hits = Arc::new(AtomicU64::new(0));
        let h = hits.clone();
        let _g = flag.on_abort(move || {
            h.fetch_add(1, Ordering::SeqCst);
        });
        flag.abort();
        flag.abort();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        let h = hits.clone();
        let _g2 = flag.on_abort(move || {
            h.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(hits.load(Ordering::SeqCst), 11);
        assert_eq!(flag.check(), Err(Aborted));
    }

    #[test]
    fn dropped_guard_unregisters_hook() {
        let flag = AbortFlag::new();
        let hits = Arc::new(AtomicU64::new(0));
        let h = hits.clone();
        drop(flag.on_abort(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        flag.abort();
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }
}
