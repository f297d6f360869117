//! The agent itself, below the protocol surface: the turn loop (`turn`), unattended runs and goals
//! (`autonomy`), compaction, refine, permissions, slash commands, and the subagent family. Knows
//! nothing of JSON-RPC; reports `AgentEvent`s.

pub(crate) mod autonomy;
pub(crate) mod commands;
pub(crate) mod compaction;
pub(crate) mod family;
pub(crate) mod permissions;
pub(crate) mod refine;
pub(crate) mod subagents;
pub(crate) mod turn;
