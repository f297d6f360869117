//! Goals (behaviour spec §5.3): an objective the model pursues across turns until it calls
//! `goal.complete()`, its token budget runs out, or the user pauses or clears it.

use std::time::Instant;

use crate::base::json::json;
use serde_json::Value;

use crate::base::content::escape_markup;
use crate::provider::Usage;

/// The longest objective kept (characters).
pub(crate) const MAX_OBJECTIVE_CHARS: usize = 4000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GoalStatus {
    Active,
    Paused,
    BudgetLimited,
    Complete,
    Error,
}

impl GoalStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            GoalStatus::Active => "active",
            GoalStatus::Paused => "paused",
            GoalStatus::BudgetLimited => "budget_limited",
            GoalStatus::Complete => "complete",
            GoalStatus::Error => "error",
        }
    }
}

/// A session's goal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Goal {
    pub goal_id: String,
    pub status: GoalStatus,
    pub objective: String,
    pub token_budget: Option<u64>,
    pub tokens_used: u64,
    pub continuations_used: u64,
    /// Seconds accrued while active, up to `active_since`.
    pub accrued_secs: f64,
    /// While active: since when time accrues.
    pub active_since: Option<Instant>,
    pub created_at: String,
    pub updated_at: String,
    pub last_reason: Option<String>,
    pub last_error: Option<String>,
}

/// The objective as kept: trimmed, at most `MAX_OBJECTIVE_CHARS`.
pub(crate) fn clean_objective(objective: &str) -> String {
    objective.trim().chars().take(MAX_OBJECTIVE_CHARS).collect()
}

impl Goal {
    pub(crate) fn new(
        objective: &str,
        token_budget: Option<u64>,
        now: Instant,
        wall: &str,
    ) -> Goal {
        Goal {
            goal_id: uuid::Uuid::new_v4().to_string(),
            status: GoalStatus::Active,
            objective: clean_objective(objective),
            token_budget,
            tokens_used: 0,
            continuations_used: 0,
            accrued_secs: 0.0,
            active_since: Some(now),
            created_at: wall.to_owned(),
            updated_at: wall.to_owned(),
            last_reason: None,
            last_error: None,
        }
    }

    pub(crate) fn time_used_secs(&self, now: Instant) -> u64 {
        let running = self
            .active_since
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        (self.accrued_secs + running) as u64
    }

    /// Moves to `status`, folding the active time into the total.
    pub(crate) fn set_status(&mut self, status: GoalStatus, now: Instant, wall: &str) {
        if let Some(t) = self.active_since.take() {
            self.accrued_secs += now.saturating_duration_since(t).as_secs_f64();
        }
        if status == GoalStatus::Active {
            self.active_since = Some(now);
        }
        self.status = status;
        self.updated_at = wall.to_owned();
    }

    /// Counts a model call's tokens (input + output) while active; a reached budget makes the
    /// goal `budget_limited`. Returns whether anything changed.
    pub(crate) fn record(&mut self, usage: Usage, now: Instant, wall: &str) -> bool {
        if self.status != GoalStatus::Active {
            return false;
        }
        let added = usage.input + usage.output;
        self.tokens_used += added;
        if let Some(budget) = self.token_budget.filter(|b| self.tokens_used >= *b) {
            self.set_status(GoalStatus::BudgetLimited, now, wall);
            self.last_reason = Some(format!("Reached {budget} token goal budget"));
            return true;
        }
        if added > 0 {
            self.updated_at = wall.to_owned();
        }
        added > 0
    }

    /// The goal's state as the session file keeps it (`thread_goal_state`, the spec's
    /// fields), with the time used so far.
    pub(crate) fn to_record(&self, now: Instant) -> Value {
        let mut v = json!({
            "active": self.status == GoalStatus::Active,
            "status": self.status.as_str(),
            "goalId": self.goal_id,
            "objective": self.objective,
            "tokensUsed": self.tokens_used,
            "timeUsedSeconds": self.time_used_secs(now),
            "continuationsUsed": self.continuations_used,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        });
        let optional = [
            ("tokenBudget", self.token_budget.map(|b| json!(b))),
            ("lastReason", self.last_reason.as_ref().map(|r| json!(r))),
            ("lastError", self.last_error.as_ref().map(|e| json!(e))),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                v[key] = value;
            }
        }
        v
    }

    /// A goal read back from its record (`None`: no goal, a cleared one is `idle`); an
    /// active goal's time accrues again from `now`.
    pub(crate) fn from_record(v: &Value, now: Instant) -> Option<Goal> {
        let status = match v["status"].as_str()? {
            "active" => GoalStatus::Active,
            "paused" => GoalStatus::Paused,
            "budget_limited" => GoalStatus::BudgetLimited,
            "complete" => GoalStatus::Complete,
            "error" => GoalStatus::Error,
            _ => return None,
        };
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        Some(Goal {
            goal_id: s("goalId").unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            status,
            objective: clean_objective(v["objective"].as_str()?),
            token_budget: v["tokenBudget"].as_u64(),
            tokens_used: v["tokensUsed"].as_u64().unwrap_or(0),
            continuations_used: v["continuationsUsed"].as_u64().unwrap_or(0),
            accrued_secs: v["timeUsedSeconds"].as_f64().unwrap_or(0.0),
            active_since: (status == GoalStatus::Active).then_some(now),
            created_at: s("createdAt").unwrap_or_default(),
            updated_at: s("updatedAt").unwrap_or_default(),
            last_reason: s("lastReason"),
            last_error: s("lastError"),
        })
    }

    pub(crate) fn remaining_tokens(&self) -> Option<u64> {
        self.token_budget
            .map(|b| b.saturating_sub(self.tokens_used))
    }

    /// The `completion_budget_report` of a completed goal.
    pub(crate) fn completion_report(&self, now: Instant) -> Option<String> {
        if self.status != GoalStatus::Complete {
            return None;
        }
        let tokens = match self.token_budget {
            Some(b) => format!("{} of {b}", self.tokens_used),
            None => self.tokens_used.to_string(),
        };
        Some(format!(
            "Goal achieved. Report final budget usage to the user: tokens used: {tokens}; time used: {} seconds.",
            self.time_used_secs(now)
        ))
    }

    /// `goal` of `goal.get()` (snake_case: the kernel API's shape).
    pub(crate) fn to_value(&self, now: Instant) -> Value {
        json!({
            "goal_id": self.goal_id,
            "objective": self.objective,
            "status": self.status.as_str(),
            "token_budget": self.token_budget,
            "tokens_used": self.tokens_used,
            "time_used_seconds": self.time_used_secs(now),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        })
    }

    /// The LLM-visible continuation while the goal is active (our words, the spec's fields).
    pub(crate) fn continuation(&self) -> String {
        let budget = self
            .token_budget
            .map_or_else(|| "none".to_owned(), |b| b.to_string());
        let remaining = self
            .remaining_tokens()
            .map_or_else(|| "unlimited".to_owned(), |r| r.to_string());
        format!(
            "<goal_context>\nContinue working toward the active thread goal.\n\n<objective>{}</objective>\n\nGoal state:\n- status: {}\n- tokens used: {}\n- token budget: {budget}\n- remaining tokens: {remaining}\n\nWhen the objective is achieved, run `await goal.complete()` in ipython, then report the final budget usage to the user. Until then, keep making progress; nobody will answer questions.\n</goal_context>",
            escape_markup(&self.objective, "&apos;"),
            self.status.as_str(),
            self.tokens_used,
        )
    }
}

/// Why `goal.create` refuses while a goal exists in `status` (`None`: it may replace it).
pub(crate) fn create_refusal(status: GoalStatus) -> Option<&'static str> {
    match status {
        GoalStatus::Active => Some("cannot create a new goal because a goal is already active; finish it with `await goal.complete()` first"),
        GoalStatus::Paused => Some("cannot create a new goal because the current goal is paused; the user can resume or clear it with /goal"),
        GoalStatus::BudgetLimited => Some("cannot create a new goal because the current goal reached its token budget; the user can clear it with /goal clear"),
        GoalStatus::Complete | GoalStatus::Error => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input,
            output,
            cache_read: 500,
            cache_write: 7,
        }
    }

    #[test]
    fn tokens_accrue_while_active_until_the_budget() {
        let now = Instant::now();
        let mut g = Goal::new("  ship it  ", Some(100), now, "T0");
        assert_eq!(g.objective, "ship it");
        assert!(g.record(usage(30, 10), now, "T1"));
        assert_eq!((g.tokens_used, g.remaining_tokens()), (40, Some(60)));
        assert!(g.record(usage(50, 20), now, "T2"));
        assert_eq!(g.status, GoalStatus::BudgetLimited);
        assert_eq!(
            g.last_reason.as_deref(),
            Some("Reached 100 token goal budget")
        );
        assert_eq!(g.remaining_tokens(), Some(0));
        // No longer active: nothing counts.
        assert!(!g.record(usage(5, 5), now, "T3"));
        assert_eq!(g.tokens_used, 110);
    }

    #[test]
    fn a_goal_round_trips_through_its_record_with_status_objective_and_tokens() {
        let t0 = Instant::now();
        let mut g = Goal::new("ship <it>", Some(500), t0, "T0");
        g.record(usage(30, 12), t0, "T1");
        g.continuations_used = 2;
        g.set_status(GoalStatus::Paused, t0 + Duration::from_secs(7), "T2");
        g.last_reason = Some("why".into());
        let record = g.to_record(t0 + Duration::from_secs(9));
        assert_eq!(
            record,
            json!({"active": false, "status": "paused", "goalId": g.goal_id, "objective": "ship <it>",
                "tokenBudget": 500, "tokensUsed": 42, "timeUsedSeconds": 7, "continuationsUsed": 2,
                "createdAt": "T0", "updatedAt": "T2", "lastReason": "why"})
        );
        let back = Goal::from_record(&record, t0).unwrap();
        assert_eq!(
            (
                back.status,
                back.objective.as_str(),
                back.tokens_used,
                back.token_budget
            ),
            (GoalStatus::Paused, "ship <it>", 42, Some(500))
        );
        assert_eq!(
            (back.goal_id.as_str(), back.continuations_used),
            (g.goal_id.as_str(), 2)
        );
        assert_eq!(
            back.time_used_secs(t0 + Duration::from_secs(100)),
            7,
            "paused: no time"
        );
        // Active again: time accrues from the restore on.
        let mut active = g.clone();
        active.set_status(GoalStatus::Active, t0, "T3");
        let back = Goal::from_record(&active.to_record(t0), t0).unwrap();
        assert_eq!(back.status, GoalStatus::Active);
        assert_eq!(back.time_used_secs(t0 + Duration::from_secs(3)), 10);
        for none in [
            json!({"active": false, "status": "idle"}),
            json!({}),
            json!({"status": "active"}),
        ] {
            assert!(Goal::from_record(&none, t0).is_none(), "{none}");
        }
    }

    #[test]
    fn time_accrues_only_while_active() {
        let t0 = Instant::now();
        let mut g = Goal::new("x", None, t0, "T");
        g.set_status(GoalStatus::Paused, t0 + Duration::from_secs(10), "T");
        assert_eq!(g.time_used_secs(t0 + Duration::from_secs(100)), 10);
        g.set_status(GoalStatus::Active, t0 + Duration::from_secs(100), "T");
        assert_eq!(g.time_used_secs(t0 + Duration::from_secs(105)), 15);
    }

    #[test]
    fn completion_report_and_get_shape() {
        let t0 = Instant::now();
        let mut g = Goal::new("x", Some(1000), t0, "T");
        g.record(usage(20, 5), t0, "T");
        assert_eq!(g.completion_report(t0), None);
        g.set_status(GoalStatus::Complete, t0 + Duration::from_secs(3), "T9");
        assert_eq!(
            g.completion_report(t0).as_deref(),
            Some("Goal achieved. Report final budget usage to the user: tokens used: 25 of 1000; time used: 3 seconds.")
        );
        let v = g.to_value(t0);
        assert_eq!(v["status"], "complete");
        assert_eq!(v["tokens_used"], 25);
        assert_eq!(v["token_budget"], 1000);
        assert_eq!(v["time_used_seconds"], 3);
        assert_eq!(v["updated_at"], "T9");
    }

    #[test]
    fn the_continuation_escapes_the_objective_and_states_the_budget() {
        let g = Goal::new("fix <b> & \"c\" 'd'", None, Instant::now(), "T");
        let text = g.continuation();
        assert!(text.starts_with("<goal_context>\n"));
        assert!(text.ends_with("\n</goal_context>"));
        assert!(
            text.contains("<objective>fix &lt;b&gt; &amp; &quot;c&quot; &apos;d&apos;</objective>")
        );
        assert!(text.contains("- token budget: none\n- remaining tokens: unlimited"));
        assert!(text.contains("await goal.complete()"));
    }

    #[test]
    fn create_refusals() {
        for s in [
            GoalStatus::Active,
            GoalStatus::Paused,
            GoalStatus::BudgetLimited,
        ] {
            assert!(create_refusal(s)
                .unwrap()
                .starts_with("cannot create a new goal because "));
        }
        assert_eq!(create_refusal(GoalStatus::Complete), None);
        assert_eq!(clean_objective(&"y".repeat(5000)).chars().count(), 4000);
    }
}
