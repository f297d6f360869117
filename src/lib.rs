//! prime-agent: a coding agent that speaks the Agent Client Protocol over stdio.
//!
//! Modules in reading order: the wire (`rpc`, `transport`, `acp`, `meta`, `events`,
//! `stop_reason`), the loop (`main_loop`), the work (`turn`, `provider`, `tools`), and start-up
//! (`cli`, `setup`, `prompt`). See ARCHITECTURE.md for the map and the invariants.

pub mod abort;
pub mod acp;
pub mod cli;
pub mod events;
pub mod family;
mod handlers;
pub mod kernel;
pub mod main_loop;
pub mod meta;
pub mod prompt;
pub mod provider;
pub mod rpc;
mod session;
pub mod setup;
pub mod stop_reason;
pub mod subagents;
pub mod tools;
pub mod transport;
pub mod turn;

use std::sync::Arc;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs ACP over the process's stdio until stdin closes or a signal arrives.
pub fn run_stdio(cfg: &cli::Config) -> Result<main_loop::Exit, String> {
    for warning in &cfg.warnings {
        log::warn!("{warning}");
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
