//! The reaper: one long-lived `reaper` thread that owns what closing sessions leave behind
//! (families, MCP hubs and transports, kernels, turn workers) and the few writes nobody waits
//! for, so the main loop never joins, waits or writes to disk itself. Jobs run one after
//! another in the order they were handed over; each of them is bounded (every join here has a
//! deadline), so one slow teardown delays the next teardown, never the loop.
//!
//! `Reaped<T>` is how the structure enforces it: a value whose teardown may block is held by
//! the loop only as a `Reaped<T>`, whose `Drop` sends the value here instead of dropping it in
//! place. `join_by` is the one bounded join of the crate.
//!
//! Depends only on `abort` (a join may be cut short by an abort).

use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Sender};

use crate::base::abort::AbortFlag;

type Job = Box<dyn FnOnce() + Send>;

fn reaper() -> Option<&'static Sender<Job>> {
    static REAPER: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = unbounded::<Job>();
            let started = std::thread::Builder::new()
                .name("reaper".to_owned())
                .spawn(move || {
                    // Lives as long as the process: the static sender is never dropped.
                    for job in rx {
                        // A panicking teardown is logged and the reaper goes on with the next.
                        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                            log::error!("a teardown job panicked");
                        }
                    }
                });
            match started {
                Ok(_detached) => Some(tx),
                Err(e) => {
                    log::error!("cannot start the reaper thread ({e}); teardown runs in place");
                    None
                }
            }
        })
        .as_ref()
}

/// Starts the reaper now (the main loop does at its start, so the thread count is steady
/// from then on, not grown by the first close).
pub(crate) fn start() {
    let _ = reaper();
}

/// Runs `job` on the reaper thread, after the jobs handed over before it (a job may hand over
/// more: they queue behind it). Returns at once; in place only if the reaper could not start.
pub(crate) fn later(job: impl FnOnce() + Send + 'static) {
    match reaper() {
        Some(tx) => {
            if let Err(crossbeam_channel::SendError(job)) = tx.send(Box::new(job)) {
                job();
            }
        }
        None => job(),
    }
}

/// At process exit: waits until the jobs handed over so far have run, at most until
/// `deadline`. Returns whether they all ran. Never called from a job (it would wait for
/// itself until the deadline).
pub(crate) fn drain(deadline: Instant) -> bool {
    let (tx, rx) = bounded::<()>(1);
    later(move || {
        let _ = tx.send(());
    });
    rx.recv_deadline(deadline).is_ok()
}

/// A value whose teardown may block (joins, kills and reaps, network, disk): dropping the
/// wrapper hands the value to the reaper thread. Otherwise it is the value (`Deref`).
pub(crate) struct Reaped<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Reaped<T> {
    pub(crate) fn new(value: T) -> Reaped<T> {
        Reaped(Some(value))
    }
}

impl<T: Send + 'static> Deref for Reaped<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("present until dropped")
    }
}

impl<T: Send + 'static> DerefMut for Reaped<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("present until dropped")
    }
}

impl<T: Send + 'static> Drop for Reaped<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            later(move || drop(value));
        }
    }
}

/// How a bounded join ended.
#[derive(Debug)]
pub(crate) enum Joined<T> {
    /// The thread finished and was joined: its result (`Err` if it panicked).
    Done(std::thread::Result<T>),
    /// Still running at the deadline (or the abort): the handle, to leave or to log.
    Running(JoinHandle<T>),
}

/// How often a bounded join looks again: std offers no timed join, so it polls.
const POLL: Duration = Duration::from_millis(2);

/// Joins `thread` if it finishes by `deadline` (or before `abort` is set, when given). A
/// thread never joins itself: that is `Running` at once (a thread dropping the last handle
/// on what it belongs to).
pub(crate) fn join_by<T>(
    thread: JoinHandle<T>,
    deadline: Instant,
    abort: Option<&AbortFlag>,
) -> Joined<T> {
    if thread.thread().id() == std::thread::current().id() {
        return Joined::Running(thread);
    }
    while !thread.is_finished()
        && Instant::now() < deadline
        && !abort.is_some_and(AbortFlag::is_aborted)
    {
        match abort {
            Some(a) => {
                let _ = a.sleep(POLL);
            }
            None => std::thread::sleep(POLL),
        }
    }
    if thread.is_finished() {
        Joined::Done(thread.join())
    } else {
        Joined::Running(thread)
    }
}

/// `join_by` for teardown: a thread still running at the deadline is logged (as `what`) and
/// left to end on its own.
pub(crate) fn join_or_leave<T>(thread: JoinHandle<T>, deadline: Instant, what: &str) {
    if let Joined::Running(t) = join_by(thread, deadline, None) {
        if t.thread().id() != std::thread::current().id() {
            log::warn!(
                "{what} ({}) is still running; left to finish alone",
                t.thread().name().unwrap_or("?")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn jobs_run_off_the_caller_in_order_and_drain_waits_for_them() {
        let (tx, rx) = unbounded();
        for i in 0..3 {
            let tx = tx.clone();
            later(move || {
                let name = std::thread::current().name().map(str::to_owned);
                tx.send((i, name)).unwrap();
            });
        }
        assert!(drain(Instant::now() + Duration::from_secs(10)));
        let got: Vec<_> = rx.try_iter().collect();
        assert_eq!(
            got,
            (0..3)
                .map(|i| (i, Some("reaper".to_owned())))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_reaped_value_is_dropped_on_the_reaper() {
        struct Marks(Sender<Option<String>>);
        impl Drop for Marks {
            fn drop(&mut self) {
                let _ = self
                    .0
                    .send(std::thread::current().name().map(str::to_owned));
            }
        }
        let (tx, rx) = unbounded();
        let r = Reaped::new(Marks(tx));
        drop(r);
        let on = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(on.as_deref(), Some("reaper"));
    }

    #[test]
    fn join_by_joins_a_finished_thread_and_returns_a_running_one() {
        let t = std::thread::spawn(|| 7);
        match join_by(t, Instant::now() + Duration::from_secs(10), None) {
            Joined::Done(Ok(7)) => {}
            other => panic!("{other:?}"),
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let t = match join_by(t, Instant::now() + Duration::from_millis(10), None) {
            Joined::Running(t) => t,
            other => panic!("{other:?}"),
        };
        let abort = AbortFlag::new();
        abort.abort();
        let t = match join_by(t, Instant::now() + Duration::from_secs(60), Some(&abort)) {
            Joined::Running(t) => t,
            other => panic!("{other:?}"),
        };
        stop.store(true, Ordering::SeqCst);
        assert!(matches!(
            join_by(t, Instant::now() + Duration::from_secs(10), None),
            Joined::Done(Ok(()))
        ));
    }
}
