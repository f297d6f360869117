//! Recycled strings for streamed deltas (the per-token hot path).
//!
//! A delta's text is allocated on the turn thread (the provider copies it out of the SSE
//! event) and, after the main loop has serialised it into a frame, dropped on the main
//! thread. Under musl's allocator (the static build) such a cross-thread malloc/free pair per
//! token was what held the static build to about a third of the glibc build's stream rate.
//! So the main loop hands each spent delta back here and the next delta of any turn copies
//! into it: in a steady stream no delta allocates or frees at all. Bounded both in count and
//! in the size of a kept string, so a burst or one huge delta never pins memory; a full or
//! empty pool simply falls back to allocating, so nothing ever waits on it.

use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::OnceLock;

/// Spare strings kept at most: more than the turn queue holds in flight for one session.
const SPARES: usize = 512;
/// A string larger than this is dropped rather than kept (deltas are a few bytes).
const KEEP_CAPACITY: usize = 4096;

struct Pool(Sender<String>, Receiver<String>);

impl Pool {
    fn new() -> Pool {
        let (tx, rx) = bounded(SPARES);
        Pool(tx, rx)
    }

    fn owned(&self, text: &str) -> String {
        match self.1.try_recv() {
            Ok(mut s) => {
                s.clear();
                s.push_str(text);
                s
            }
            Err(_) => text.to_owned(),
        }
    }

    fn give_back(&self, s: String) {
        if s.capacity() != 0 && s.capacity() <= KEEP_CAPACITY {
            let _ = self.0.try_send(s);
        }
    }
}

/// One pool for the process: every session's turns and the main loop share it.
fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Pool::new)
}

/// `text` as an owned string, in a recycled allocation when one is spare.
pub(crate) fn owned(text: &str) -> String {
    pool().owned(text)
}

/// Hands a spent delta back for reuse (dropped when the pool is full or the string is big).
pub(crate) fn give_back(s: String) {
    pool().give_back(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_back_string_is_reused_with_the_new_text() {
        let pool = Pool::new();
        let mut s = String::with_capacity(64);
        s.push_str("old text");
        let ptr = s.as_ptr();
        pool.give_back(s);
        let t = pool.owned("new");
        assert_eq!(t, "new");
        assert_eq!(t.as_ptr(), ptr, "the spare allocation is reused");
        // A big string is not kept; an empty pool allocates.
        pool.give_back(String::with_capacity(KEEP_CAPACITY + 1));
        assert!(pool.1.try_recv().is_err());
        assert_eq!(pool.owned("fresh"), "fresh");
    }
}
