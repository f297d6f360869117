//! The leaves: what every layer uses and that uses no other module of the crate but its own
//! (content types, the abort flag, the crate's `json!`, bounded line framing, child processes,
//! clocks and dates, bounded reads of untrusted files, the reaper thread).

pub(crate) mod abort;
pub(crate) mod content;
pub(crate) mod json;
pub(crate) mod lines;
pub(crate) mod reaper;
pub(crate) mod sandbox;
pub(crate) mod signals;
pub(crate) mod spawn;
pub(crate) mod telemetry;
#[cfg(test)]
pub(crate) mod test_support;
pub(crate) mod time;
pub(crate) mod untrusted;
