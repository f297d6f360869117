//! Heartbeats and schedules (behaviour spec §5.5): `grammar.rs` is the schedule grammar and the
//! `/heartbeat` command (pure), `jobs.rs` the session's job list (due times, firings, skips,
//! the spec's job records and the kernel's `rlm_heartbeat` requests). Both are pure; the
//! session holds the jobs and the main loop's timer fires them.

mod grammar;
mod jobs;

pub(crate) use grammar::*;
pub(crate) use jobs::*;
