//! Slash commands typed as prompts (`/autonomous`, `/goal`, `/model`, `/compact`, `/help`).
pub(crate) const COMPACT_UNAVAILABLE: &str =
    "Compaction is not available yet in this build: the conversation was left as it is.";
