//! prime-agent: a coding agent that speaks the Agent Client Protocol over stdio.
//!
//! The directories are the layers, lowest first; a module uses only its own layer and the
//! ones below it (`scripts/module_graph.py` checks it): `base` (the leaves), `protocol` (the
//! wire facing the client), `config` (settings, skills, the prompt), `kernel`, `tools`,
//! `provider` and `mcp` (what a turn drives), `persist` (session files), `agent` (the turn
//! loop, autonomy, compaction, subagents), `server` (the main loop and the ACP session
//! surface) and `app` (the process: arguments, start-up, print mode, subcommands). See
//! ARCHITECTURE.md for the map and the invariants.

// Everything is `pub(crate)` unless it is part of the public surface below.
#![warn(unreachable_pub)]

mod agent;
mod app;
mod base;
mod config;
mod kernel;
mod mcp;
mod persist;
mod protocol;
mod provider;
mod server;
mod tools;

// The public surface, and all of it: what the binary, the in-process tests (fuzz), the
// benchmarks and the kernel example use. Everything else is `pub(crate)` (the
// `unreachable_pub` lint keeps it so).
pub use agent::turn::Agent;
pub use app::cli::{parse as parse_args, Command, Config, HELP};
pub use app::subcommands::Subcommand;
pub use base::abort::AbortFlag;
pub use kernel::{
    find_python, CellEnd, CellRun, DefaultHostHandler, HostHandler, Kernel, KernelConfig,
};
pub use protocol::rpc::{classify_line, Incoming, RequestId};
pub use protocol::transport::{spawn as spawn_transport, Connection, IoThreads, MAX_LINE_BYTES};
pub use provider::http::cap_wire_logging;
pub use server::main_loop::{run, Exit};

use std::sync::Arc;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs one prompt without an ACP client (`-p/--print`, `--mode json`); returns the exit code
/// (0 `end_turn`, 1 failure, 2 a hit limit).
pub fn run_headless(cfg: &Config) -> Result<u8, String> {
    base::telemetry::init_from_env();
    let code = app::headless::run(cfg, VERSION);
    base::telemetry::shutdown();
    base::sandbox::remove_private_tmp();
    code
}

/// Runs `prime-agent model|session|schedule …` (stdout, no ACP); returns the exit code.
pub fn run_subcommand(sub: &Subcommand) -> Result<u8, String> {
    app::subcommands::run(sub, &app::setup::agent_dir(), &mut std::io::stdout().lock())
}

/// What a person who starts the agent in a terminal sees: ACP waits silently for JSON-RPC,
/// which looks like a hang to someone who expected a prompt.
pub const TERMINAL_HINT: &str = "prime-agent: waiting for ACP (JSON-RPC, one message per line) on stdin; for one prompt run prime-agent -p \"<prompt>\", for an editor see prime-agent --help";

/// Runs ACP over the process's stdio until stdin closes or a signal arrives.
pub fn run_stdio(cfg: &Config) -> Result<Exit, String> {
    for warning in &cfg.warnings {
        log::warn!("{warning}");
    }
    if let Some(addr) = cfg.listen {
        return run_listen(cfg, addr);
    }
    // Editors and harnesses give a pipe; a terminal means a person is at the keyboard.
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{TERMINAL_HINT}");
    }
    // Before anything makes a span; without `OTEL_*` variables this starts nothing.
    base::telemetry::init_from_env();
    let agent = app::setup::build_agent(cfg)?;
    let signal_rx = crate::base::signals::interrupts()?;
    let (conn, io_threads) =
        protocol::transport::stdio().map_err(|e| format!("Cannot set up stdio: {e}"))?;
    let exit = server::main_loop::run(conn, Arc::new(agent), signal_rx, VERSION);
    if let Err(e) = io_threads.join() {
        log::debug!("writer ended with {e}");
    }
    // After the loop has ended every turn and session: their spans are queued.
    base::telemetry::shutdown();
    base::sandbox::remove_private_tmp();
    Ok(exit)
}

/// Runs ACP over the remote transport (`--listen`) until a signal arrives.
fn run_listen(cfg: &Config, addr: std::net::SocketAddr) -> Result<Exit, String> {
    use std::io::Write;
    let token = match &cfg.listen_token_file {
        Some(path) => Some(read_token(path)?),
        None => None,
    };
    let agent = app::setup::build_agent(cfg)?;
    let signal_rx = crate::base::signals::interrupts()?;
    let (conn, remote) = protocol::remote::listen(protocol::remote::ListenConfig { addr, token })
        .map_err(|e| format!("Cannot listen on {addr}: {e}"))?;
    let bound = remote.local_addr();
    // The one line a harness reads to find the port (`--listen 127.0.0.1:0` picks one).
    let _ = writeln!(
        std::io::stderr(),
        "prime-agent: serving ACP at http://{bound}{} (Streamable HTTP and WebSocket)",
        protocol::remote::ENDPOINT
    );
    let exit = server::main_loop::run(conn, Arc::new(agent), signal_rx, VERSION);
    remote.join();
    base::sandbox::remove_private_tmp();
    Ok(exit)
}

/// The bearer token of `--listen-token-file`: the file's text without surrounding whitespace.
fn read_token(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Cannot read --listen-token-file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("--listen-token-file {} is empty", path.display()));
    }
    Ok(token.as_bytes().to_vec())
}
