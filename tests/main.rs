//! Black-box integration tests: the real binary over stdio.

mod support;

mod acp_methods;
mod acpx;
mod autonomy;
mod client_fs;
mod commands;
mod compaction;
mod config_options;
mod demo;
mod faults;
mod fuzz;
mod goals;
mod headless;
mod heartbeats;
mod kernel;
mod kernel_state;
mod mcp;
mod owners;
mod permissions;
mod persist;
mod protocol;
mod provider;
mod refine;
mod reliability;
mod responses;
mod resume;
mod secrets;
mod sessions;
mod subagents;
mod tools;
mod transcripts;
