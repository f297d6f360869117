//! Black-box integration tests: the real binary over stdio.

mod support;

mod compaction;
mod config_options;
mod demo;
mod faults;
mod fuzz;
mod kernel;
mod mcp;
mod persist;
mod protocol;
mod provider;
mod refine;
mod reliability;
mod responses;
mod secrets;
mod sessions;
mod subagents;
mod tools;
mod transcripts;
