//! The wire facing the client: JSON-RPC framing and errors (`rpc`), ACP's parameters (`acp`), the
//! `_meta` envelope (`meta`), stop reasons, semantic edges, auth texts, requests to the client
//! (`client_requests`), the stdio transport with its outbox, and the remote one (`remote`:
//! Streamable HTTP and WebSocket). No session state and no agent
//! logic.

pub(crate) mod acp;
pub(crate) mod auth;
pub(crate) mod client_requests;
pub(crate) mod meta;
pub(crate) mod outbox;
pub(crate) mod remote;
pub(crate) mod rpc;
pub(crate) mod semantic;
pub(crate) mod stop_reason;
pub(crate) mod transport;
