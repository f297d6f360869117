//! Black-box integration tests: the real binary over stdio.

mod support;

mod config_options;
mod demo;
mod faults;
mod fuzz;
mod kernel;
mod persist;
mod protocol;
mod provider;
mod reliability;
mod secrets;
mod sessions;
mod subagents;
mod tools;
mod transcripts;
