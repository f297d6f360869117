//! Goals (behaviour spec §5.3): an objective the model pursues across turns until it calls
//! `goal.complete()` or its token budget runs out.

use std::time::Instant;

use crate::provider::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GoalStatus {
    Active,
    Paused,
    BudgetLimited,
    Complete,
    Error,
}

/// A session's goal.
#[derive(Debug, Clone)]
pub(crate) struct Goal {
    pub status: GoalStatus,
    pub objective: String,
    pub token_budget: Option<u64>,
    pub tokens_used: u64,
    /// While active: since when time accrues.
    pub active_since: Option<Instant>,
}

impl Goal {
    /// Counts a model call's tokens (input + output) while the goal is active.
    pub(crate) fn record(&mut self, usage: Usage, _now: Instant) {
        if self.status == GoalStatus::Active {
            self.tokens_used += usage.input + usage.output;
        }
    }
}
