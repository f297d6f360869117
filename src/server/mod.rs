//! The ACP session surface and the one main loop: `main_loop` (the closed event loop, the only
//! sender to the client), `handlers` (one function per method), `session` (the Sans-IO session
//! state machine), `events` (events to `session/update`), the client host, config options, and the
//! store worker with the replay it sends. The loop's modules do no IO (clippy.toml).

pub(crate) mod client_host;
pub(crate) mod config_options;
pub(crate) mod events;
pub(crate) mod handlers;
pub(crate) mod main_loop;
pub(crate) mod replay;
pub(crate) mod session;
pub(crate) mod store_worker;
