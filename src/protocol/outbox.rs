//! The protocol stream's outbox: the main loop appends whole frames to one shared byte buffer,
//! and the `acp-writer` thread swaps that buffer for its spare one and writes it out.
//!
//! Why not a channel of `Vec<u8>` frames: with one heap buffer per frame, a streamed token
//! costs an allocation on the main loop and a free on the writer. glibc's allocator hides that;
//! musl's (the static build, which constrained environments run) takes a global lock per call
//! and unmaps a group of slots whenever the writer has freed all of them, so the static build
//! streamed at a third of the glibc build's rate. Two buffers swapped back and forth cost
//! nothing per frame once they have grown to a burst's size: a frame is one short critical
//! section (an append) on the main loop and the writer makes one `write` per batch.
//!
//! Order is the order of `push` calls: there is one producer (the main loop, the only code that
//! talks to the client) and one consumer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A batch buffer larger than this after a burst is given back rather than kept.
const KEEP_CAPACITY: usize = 1024 * 1024;

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// The producer is gone: the writer drains what is left and stops.
    closed: bool,
    /// The writer is gone (the client closed its end): frames are dropped, not kept.
    dead: bool,
    /// The writer is parked on `ready` and needs a wake-up.
    parked: bool,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    ready: Condvar,
    /// Set with every append, so the writer can poll for the next frame without the lock.
    nonempty: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // Nothing that holds the lock can panic half-way through an update that matters.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The producer's end. Dropping it ends the stream once the writer has drained it.
pub struct Outbox(Arc<Shared>);

/// The writer's end.
pub(crate) struct Drain {
    shared: Arc<Shared>,
    spare: Vec<u8>,
}

/// An outbox and its drain.
pub(crate) fn outbox() -> (Outbox, Drain) {
    let shared = Arc::new(Shared::default());
    (
        Outbox(shared.clone()),
        Drain {
            shared,
            spare: Vec::new(),
        },
    )
}

impl Outbox {
    /// Appends one frame, which `write` puts at the end of the buffer it is given, followed by
    /// a newline. `write` returns whether it wrote a frame; when it returns false, whatever it
    /// appended is taken back. `write` runs with the outbox locked, so whatever it counts
    /// happens before the writer can take the frame. Returns the frame's length (0 when none
    /// was written or the writer is gone, and then `write` was not called).
    pub(crate) fn push(&self, write: impl FnOnce(&mut Vec<u8>) -> bool) -> usize {
        let mut pending = self.0.lock();
        if pending.dead {
            return 0;
        }
        let start = pending.bytes.len();
        if !write(&mut pending.bytes) {
            pending.bytes.truncate(start);
            return 0;
        }
        pending.bytes.push(b'\n');
        let len = pending.bytes.len() - start;
        self.0.nonempty.store(true, Ordering::Release);
        if pending.parked {
            pending.parked = false;
            self.0.ready.notify_one();
        }
        len
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let mut pending = self.0.lock();
        pending.closed = true;
        self.0.ready.notify_one();
    }
}

impl Drain {
    /// Waits for frames (polling for `spin` first: while a reply streams, the next frame
    /// usually comes within microseconds, and a futex wake-up per frame costs more than that)
    /// and returns every byte queued so far, whole frames only. `None` once the producer is
    /// gone and everything has been handed out.
    pub(crate) fn next_batch(&mut self, spin: Duration) -> Option<&[u8]> {
        self.spare.clear();
        if self.spare.capacity() > KEEP_CAPACITY {
            self.spare = Vec::new();
        }
        let until = Instant::now() + spin;
        while !self.shared.nonempty.load(Ordering::Acquire) && Instant::now() < until {
            std::hint::spin_loop();
        }
        let mut pending = self.shared.lock();
        while pending.bytes.is_empty() {
            if pending.closed {
                return None;
            }
            pending.parked = true;
            pending = self
                .shared
                .ready
                .wait(pending)
                .unwrap_or_else(|e| e.into_inner());
        }
        std::mem::swap(&mut pending.bytes, &mut self.spare);
        self.shared.nonempty.store(false, Ordering::Release);
        drop(pending);
        Some(&self.spare)
    }

    /// The writer has failed: from now on frames are dropped, so memory stays bounded.
    pub(crate) fn fail(&self) {
        let mut pending = self.shared.lock();
        pending.dead = true;
        pending.bytes = Vec::new();
        self.shared.nonempty.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push_str(out: &Outbox, s: &str) -> usize {
        out.push(|buf| {
            buf.extend_from_slice(s.as_bytes());
            true
        })
    }

    #[test]
    fn frames_come_out_in_order_each_on_its_line() {
        let (out, mut drain) = outbox();
        assert_eq!(push_str(&out, "a"), 2);
        push_str(&out, "bc");
        assert_eq!(drain.next_batch(Duration::ZERO), Some(&b"a\nbc\n"[..]));
        push_str(&out, "d");
        drop(out);
        assert_eq!(drain.next_batch(Duration::ZERO), Some(&b"d\n"[..]));
        assert_eq!(drain.next_batch(Duration::ZERO), None);
    }

    #[test]
    fn a_frame_its_writer_gives_up_on_leaves_nothing_behind() {
        let (out, mut drain) = outbox();
        push_str(&out, "kept");
        let len = out.push(|buf| {
            buf.extend_from_slice(b"half a fr");
            false
        });
        assert_eq!(len, 0);
        drop(out);
        assert_eq!(drain.next_batch(Duration::ZERO), Some(&b"kept\n"[..]));
    }

    #[test]
    fn a_dead_writer_drops_frames() {
        let (out, drain) = outbox();
        push_str(&out, "lost");
        drain.fail();
        assert_eq!(push_str(&out, "never kept"), 0);
        assert!(drain.shared.lock().bytes.is_empty());
    }

    #[test]
    fn a_parked_writer_wakes_for_a_frame_from_another_thread() {
        let (out, mut drain) = outbox();
        let writer = std::thread::spawn(move || {
            let mut got = Vec::new();
            while let Some(batch) = drain.next_batch(Duration::ZERO) {
                got.extend_from_slice(batch);
            }
            got
        });
        for i in 0..1000 {
            push_str(&out, &i.to_string());
        }
        drop(out);
        let got = String::from_utf8(writer.join().unwrap()).unwrap();
        let want: String = (0..1000).map(|i| format!("{i}\n")).collect();
        assert_eq!(got, want);
    }
}
