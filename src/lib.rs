//! prime-agent: a coding agent that speaks the Agent Client Protocol over stdio.
//!
//! Modules in reading order: the wire (`rpc`, `transport`, `acp`, `meta`, `events`,
//! `stop_reason`), the loop (`main_loop`), the work (`turn`, `provider`, `tools`), and start-up
//! (`cli`, `setup`, `prompt`). The leaves `content` (shared content types), `abort`, `json` (the crate's `json!`), `lines` (bounded
//! line framing) and `spawn` (starting and signalling children) use no other module. See ARCHITECTURE.md for the map and
//! the invariants.

// Everything is `pub(crate)` unless it is part of the public surface below.
#![warn(unreachable_pub)]

mod abort;
mod acp;
mod auth;
mod autonomy;
mod cli;
mod client_host;
mod client_prompt;
mod client_requests;
mod commands;
mod compaction;
mod config_options;
mod content;
mod events;
mod family;
mod handlers;
mod headless;
mod json;
mod kernel;
mod lines;
mod main_loop;
mod mcp;
mod meta;
mod outbox;
mod permissions;
mod persist;
mod prompt;
mod provider;
mod reaper;
mod refine;
mod replay;
mod rpc;
mod semantic;
mod session;
mod settings;
mod setup;
mod skills;
mod spawn;
mod stop_reason;
mod store_worker;
mod subagents;
mod subcommands;
#[cfg(test)]
mod test_support;
mod thinking;
mod time;
mod tools;
mod transport;
mod turn;
mod untrusted;

// The public surface, and all of it: what the binary, the in-process tests (fuzz), the
// benchmarks and the kernel example use. Everything else is `pub(crate)` (the
// `unreachable_pub` lint keeps it so).
pub use abort::AbortFlag;
pub use cli::{parse as parse_args, Command, Config, HELP};
pub use kernel::{
    find_python, CellEnd, CellRun, DefaultHostHandler, HostHandler, Kernel, KernelConfig,
};
pub use main_loop::{run, Exit};
pub use provider::http::cap_wire_logging;
pub use rpc::{classify_line, Incoming, RequestId};
pub use subcommands::Subcommand;
pub use transport::{spawn as spawn_transport, Connection, IoThreads, MAX_LINE_BYTES};
pub use turn::Agent;

use std::sync::Arc;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs one prompt without an ACP client (`-p/--print`, `--mode json`); returns the exit code
/// (0 `end_turn`, 1 failure, 2 a hit limit).
pub fn run_headless(cfg: &Config) -> Result<u8, String> {
    headless::run(cfg, VERSION)
}

/// Runs `prime-agent model|session|schedule …` (stdout, no ACP); returns the exit code.
pub fn run_subcommand(sub: &Subcommand) -> Result<u8, String> {
    subcommands::run(sub, &setup::agent_dir(), &mut std::io::stdout().lock())
}

/// What a person who starts the agent in a terminal sees: ACP waits silently for JSON-RPC,
/// which looks like a hang to someone who expected a prompt.
pub const TERMINAL_HINT: &str = "prime-agent: waiting for ACP (JSON-RPC, one message per line) on stdin; for one prompt run prime-agent -p \"<prompt>\", for an editor see prime-agent --help";

/// Runs ACP over the process's stdio until stdin closes or a signal arrives.
pub fn run_stdio(cfg: &Config) -> Result<Exit, String> {
    for warning in &cfg.warnings {
        log::warn!("{warning}");
    }
    // Editors and harnesses give a pipe; a terminal means a person is at the keyboard.
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{TERMINAL_HINT}");
    }
    let agent = setup::build_agent(cfg)?;
    let (signal_tx, signal_rx) = crossbeam_channel::bounded(4);
    ctrlc::set_handler(move || {
        let _ = signal_tx.try_send(());
    })
    .map_err(|e| format!("Cannot install the signal handler: {e}"))?;
    let (conn, io_threads) = transport::stdio().map_err(|e| format!("Cannot set up stdio: {e}"))?;
    let exit = main_loop::run(conn, Arc::new(agent), signal_rx, VERSION);
    if let Err(e) = io_threads.join() {
        log::debug!("writer ended with {e}");
    }
    Ok(exit)
}
