//! Unattended runs: autonomous mode (behaviour spec §5.1) and goals (§5.3).
//!
//! A session's `Unattended` state is shared (`Shared`) by the session, which reads it for the
//! stop reason, `_meta…autonomous` and the slash commands, and by its prompt turns' workers,
//! which count every model call into it and ask it, after each clean assistant turn, whether
//! to stop or continue with which message. The continuation loop itself runs in the turn
//! worker (`turn::run_prompt`), inside the one `session/prompt`; this module decides and runs
//! the gates, and knows nothing of turns or ACP. The lock is never held while a gate runs.

pub(crate) mod gate;
pub(crate) mod goal;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::base::json::json;
use serde_json::{Map, Value};

use crate::protocol::stop_reason::{acp_stop_reason, AutonomousStatus, StopReason};
use crate::provider::Usage;

pub(crate) use gate::{GateBook, GateOutcome};
pub(crate) use goal::{Goal, GoalStatus};

/// What `_meta…goal` shows of the goal (`status` "idle" once cleared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GoalMeta {
    pub status: String,
    pub objective: Option<String>,
    pub token_budget: Option<u64>,
    pub tokens_used: Option<u64>,
}

/// The autonomous gates: shell commands that decide when the run is done.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GateConfig {
    pub commands: Vec<String>,
    pub max_retries: u64,
    pub timeout: Duration,
}

/// Autonomous-mode configuration (the `--autonomous*` flags).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub enabled: bool,
    pub max_continuations: u64,
    pub max_turns: u64,
    pub max_tokens: u64,
    pub timeout: Duration,
    pub gates: GateConfig,
    /// Model calls one prompt may make whether autonomous or not (`--max-model-calls`; `-p`
    /// and `--mode json` default to `turn::guard::HEADLESS_MAX_MODEL_CALLS`; `None`: no cap).
    pub max_model_calls: Option<u64>,
}

impl Default for Config {
    /// The spec's defaults, disabled.
    fn default() -> Config {
        Config {
            enabled: false,
            max_continuations: 3,
            max_turns: 12,
            max_tokens: 80_000,
            timeout: Duration::from_millis(1_800_000),
            gates: GateConfig {
                commands: Vec::new(),
                max_retries: 3,
                timeout: Duration::from_millis(300_000),
            },
            max_model_calls: None,
        }
    }
}

/// Session-cumulative counters: not reset per prompt, so a later prompt can stop at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub continuations_used: u64,
    pub turns_used: u64,
    pub tokens_used: u64,
}

/// Which limit stopped the run (checked in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    MaxContinuations,
    MaxTurns,
    MaxTokens,
    Timeout,
}

/// What a prompt turn does after a clean assistant turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    Stop,
    /// Run another turn with this user message.
    Continue(String),
}

/// The default continuation, upstream's words (behaviour spec §5.1, verbatim).
pub(crate) const DEFAULT_CONTINUATION: &str = "No human input is available in autonomous mode. Continue working until the host evaluator, verifier, or configured autonomous limits stop the run. If you were asking the user a question, make a reasonable assumption and verify it. If you believe you are blocked, prove it with host-observable evidence, preserve that evidence, and keep looking for safe progress while budget remains. Do not end the session yourself; the verifier/evaluator decides completion when configured gates pass.";

/// A limit as `/autonomous status` shows it: settings' `"unlimited"` is `u64::MAX`.
fn shown(limit: u64) -> String {
    match limit {
        u64::MAX => "unlimited".to_owned(),
        n => n.to_string(),
    }
}

/// A session's unattended-run state.
#[derive(Debug)]
pub(crate) struct Unattended {
    pub config: Config,
    pub counters: Counters,
    /// When autonomous mode was enabled (session creation, or `/autonomous on`).
    pub started_at: Option<Instant>,
    pub gates: GateBook,
    /// Token usage of the last prompt that finished, for its response.
    pub prompt_usage: Option<Usage>,
    /// The children's part of it and the session's children's total, once children have
    /// used any (`turn::attribution`).
    pub prompt_children: Option<(Usage, Usage)>,
    /// The session's goal, if one is set.
    pub goal: Option<Goal>,
    /// Bumped on every goal change; `goal_reported` is the version last shown to the client.
    goal_version: u64,
    goal_reported: u64,
    /// The version last written to the session file.
    goal_saved: u64,
}

pub(crate) type Shared = Arc<Mutex<Unattended>>;

/// Locks `shared`; a panic elsewhere does not make the counters unusable.
pub(crate) fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Unattended> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl Unattended {
    pub(crate) fn new(config: Config, now: Instant) -> Unattended {
        Unattended {
            started_at: config.enabled.then_some(now),
            config,
            counters: Counters::default(),
            gates: GateBook::default(),
            prompt_usage: None,
            prompt_children: None,
            goal: None,
            goal_version: 0,
            goal_reported: 0,
            goal_saved: 0,
        }
    }

    /// Autonomous mode off, no goal (a session before its configuration is applied).
    pub(crate) fn disabled() -> Unattended {
        Unattended {
            config: Config::default(),
            counters: Counters::default(),
            started_at: None,
            gates: GateBook::default(),
            prompt_usage: None,
            prompt_children: None,
            goal: None,
            goal_version: 0,
            goal_reported: 0,
            goal_saved: 0,
        }
    }

    pub(crate) fn shared(config: Config, now: Instant) -> Shared {
        Arc::new(Mutex::new(Unattended::new(config, now)))
    }

    #[cfg(test)]
    pub(crate) fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// `/autonomous on`: enables the mode and starts its counters and clock afresh.
    pub(crate) fn enable(&mut self, now: Instant) {
        self.config.enabled = true;
        self.counters = Counters::default();
        self.gates = GateBook::default();
        self.started_at = Some(now);
    }

    pub(crate) fn disable(&mut self) {
        self.config.enabled = false;
    }

    /// Counts `calls` model calls that used `usage` (cache reads excluded, as upstream): into
    /// the autonomous counters while enabled, and into an active goal.
    pub(crate) fn record(&mut self, calls: u64, usage: Usage, now: Instant) {
        if self.config.enabled {
            self.counters.turns_used += calls;
            self.counters.tokens_used += usage.input + usage.output + usage.cache_write;
        }
        if let Some(goal) = self.goal.as_mut() {
            if goal.record(usage, now, &crate::base::time::now_iso()) {
                self.goal_version += 1;
            }
        }
    }

    /// Sets a new goal (replacing any), active from now.
    pub(crate) fn set_goal(&mut self, objective: &str, token_budget: Option<u64>, now: Instant) {
        self.goal = Some(Goal::new(
            objective,
            token_budget,
            now,
            &crate::base::time::now_iso(),
        ));
        self.goal_version += 1;
    }

    /// Moves the goal to `status` (`false`: there is no goal).
    pub(crate) fn set_goal_status(&mut self, status: GoalStatus, now: Instant) -> bool {
        let Some(goal) = self.goal.as_mut() else {
            return false;
        };
        goal.set_status(status, now, &crate::base::time::now_iso());
        self.goal_version += 1;
        true
    }

    pub(crate) fn clear_goal(&mut self) -> bool {
        let had = self.goal.take().is_some();
        if had {
            self.goal_version += 1;
        }
        had
    }

    /// A model or provider failure while the goal was active makes it `error`.
    pub(crate) fn goal_failed(&mut self, why: &str, now: Instant) {
        if self
            .goal
            .as_ref()
            .is_some_and(|g| g.status == GoalStatus::Active)
        {
            self.set_goal_status(GoalStatus::Error, now);
            if let Some(g) = self.goal.as_mut() {
                g.last_error = Some(why.to_owned());
            }
        }
    }

    /// The goal's state for the session file (`thread_goal_state`), once per change: the
    /// record, or `idle` once cleared.
    pub(crate) fn take_goal_to_save(&mut self, now: Instant) -> Option<Value> {
        if self.goal_version == self.goal_saved {
            return None;
        }
        self.goal_saved = self.goal_version;
        Some(match &self.goal {
            Some(g) => g.to_record(now),
            None => json!({ "active": false, "status": "idle" }),
        })
    }

    /// A continued session's goal, as its file last recorded it (shown to the client as a
    /// change, not written again).
    pub(crate) fn restore_goal(&mut self, record: &Value, now: Instant) {
        self.goal = Goal::from_record(record, now);
        self.goal_version += 1;
        self.goal_saved = self.goal_version;
    }

    /// The goal's state for the client, once per change.
    pub(crate) fn take_goal_meta(&mut self) -> Option<GoalMeta> {
        if self.goal_version == self.goal_reported {
            return None;
        }
        self.goal_reported = self.goal_version;
        Some(match &self.goal {
            Some(g) => GoalMeta {
                status: g.status.as_str().to_owned(),
                objective: Some(g.objective.clone()),
                token_budget: g.token_budget,
                tokens_used: Some(g.tokens_used),
            },
            None => GoalMeta {
                status: "idle".to_owned(),
                objective: None,
                token_budget: None,
                tokens_used: None,
            },
        })
    }

    /// Whether a goal is active (its continuation is due after a clean assistant turn).
    pub(crate) fn goal_active(&self) -> bool {
        self.goal
            .as_ref()
            .is_some_and(|g| g.status == GoalStatus::Active)
    }

    /// After a clean assistant turn: the goal continuation while the goal is active (it goes
    /// before any autonomous continuation, and has no limit but the token budget).
    pub(crate) fn goal_continuation(&mut self) -> Option<String> {
        let goal = self
            .goal
            .as_mut()
            .filter(|g| g.status == GoalStatus::Active)?;
        goal.continuations_used += 1;
        Some(goal.continuation())
    }

    /// The kernel's `goal.get` / `goal.create` / `goal.complete` (the host bridge).
    pub(crate) fn goal_request(
        &mut self,
        kind: &str,
        payload: &Value,
        now: Instant,
    ) -> Result<Value, String> {
        match kind {
            "goal.get" => {}
            "goal.create" => {
                let objective = payload["objective"].as_str().unwrap_or_default();
                if objective.trim().is_empty() {
                    return Err("goal.create needs a non-empty objective".to_owned());
                }
                let budget = match &payload["token_budget"] {
                    Value::Null => None,
                    v => match v.as_u64().filter(|n| *n > 0) {
                        Some(n) => Some(n),
                        None => return Err("token_budget must be a positive integer".to_owned()),
                    },
                };
                if let Some(why) = self
                    .goal
                    .as_ref()
                    .and_then(|g| goal::create_refusal(g.status))
                {
                    return Err(why.to_owned());
                }
                self.set_goal(objective, budget, now);
            }
            "goal.complete" => match self.goal.as_ref().map(|g| g.status) {
                None => return Err("there is no goal to complete".to_owned()),
                Some(GoalStatus::Complete) => {}
                Some(_) => {
                    self.set_goal_status(GoalStatus::Complete, now);
                }
            },
            other => return Err(crate::kernel::host::unavailable(other)),
        }
        Ok(self.goal_value(now))
    }

    /// `goal.get()`'s result.
    pub(crate) fn goal_value(&self, now: Instant) -> Value {
        match &self.goal {
            None => {
                json!({"goal": null, "remaining_tokens": null, "completion_budget_report": null})
            }
            Some(g) => json!({
                "goal": g.to_value(now),
                "remaining_tokens": g.remaining_tokens(),
                "completion_budget_report": g.completion_report(now),
            }),
        }
    }

    /// The first limit reached, in the spec's order.
    pub(crate) fn limit(&self, now: Instant) -> Option<Limit> {
        // The continuation limit comes first in the spec's order; the rest are the call limits.
        if self.counters.continuations_used >= self.config.max_continuations {
            Some(Limit::MaxContinuations)
        } else {
            self.call_limit(now)
        }
    }

    /// The first limit a model call must not pass (model calls, tokens, wall clock; checked
    /// before every call). The continuation limit is not one of them: it bounds
    /// continuations, not the calls of the turn that runs.
    pub(crate) fn call_limit(&self, now: Instant) -> Option<Limit> {
        let (c, l) = (&self.counters, &self.config);
        if c.turns_used >= l.max_turns {
            Some(Limit::MaxTurns)
        } else if c.tokens_used >= l.max_tokens {
            Some(Limit::MaxTokens)
        } else if self
            .started_at
            .is_some_and(|t| now.saturating_duration_since(t) >= l.timeout)
        {
            Some(Limit::Timeout)
        } else {
            None
        }
    }

    /// What the stop-reason mapper needs.
    pub(crate) fn status(&self, now: Instant) -> AutonomousStatus {
        AutonomousStatus {
            enabled: self.config.enabled,
            continuations_used: self.counters.continuations_used,
            turns_used: self.counters.turns_used,
            tokens_used: self.counters.tokens_used,
            max_continuations: self.config.max_continuations,
            max_turns: self.config.max_turns,
            max_tokens: self.config.max_tokens,
            elapsed: self.started_at.map(|t| now.saturating_duration_since(t)),
            timeout: self.config.timeout,
        }
    }

    /// The prompt's stop reason: a hit limit wins over the turn's own (never a clean
    /// `end_turn` for a stopped autonomous run); otherwise the turn's.
    pub(crate) fn stop_reason(&self, turn: StopReason, now: Instant) -> StopReason {
        match acp_stop_reason(false, Some(&self.status(now))) {
            StopReason::EndTurn => turn,
            hit => hit,
        }
    }

    /// `quiescence.remainingAutonomousContinuations`.
    pub(crate) fn remaining_continuations(&self) -> u64 {
        if self.config.enabled {
            self.config
                .max_continuations
                .saturating_sub(self.counters.continuations_used)
        } else {
            0
        }
    }

    /// `_meta[ns].autonomous`, only while enabled.
    pub(crate) fn meta(&self) -> Option<Value> {
        if !self.config.enabled {
            return None;
        }
        let mut m = Map::new();
        m.insert("enabled".into(), json!(true));
        m.insert(
            "continuationsUsed".into(),
            json!(self.counters.continuations_used),
        );
        m.insert("turnsUsed".into(), json!(self.counters.turns_used));
        m.insert("tokensUsed".into(), json!(self.counters.tokens_used));
        let attempt = self.gates.max_attempt();
        if attempt > 0 {
            m.insert("gateAttempt".into(), json!(attempt));
        }
        if let Some(f) = &self.gates.last_failure {
            m.insert("gateFailure".into(), json!(f.exit_text));
        }
        Some(Value::Object(m))
    }

    /// The `/autonomous status` line (spec text).
    pub(crate) fn status_line(&self) -> String {
        let (c, l) = (&self.counters, &self.config);
        format!(
            "Autonomous mode: {}. Continuations: {}/{}. Turns: {}/{}. Tokens: {}/{}.",
            if l.enabled { "on" } else { "off" },
            c.continuations_used,
            shown(l.max_continuations),
            c.turns_used,
            shown(l.max_turns),
            c.tokens_used,
            shown(l.max_tokens)
        )
    }

    /// Takes what a gate run needs out of the state, so the lock is not held while gates
    /// run: `None` when autonomous mode is off or has no gates.
    pub(crate) fn take_gates(&mut self) -> Option<(GateConfig, GateBook)> {
        if !self.config.enabled || self.config.gates.commands.is_empty() {
            return None;
        }
        Some((self.config.gates.clone(), std::mem::take(&mut self.gates)))
    }

    /// After a clean assistant turn (and its gates, if any, whose book is handed back): stop,
    /// or continue with the gate-failure or the default continuation, counting it.
    pub(crate) fn after_turn(
        &mut self,
        gates: Option<(GateBook, GateOutcome)>,
        now: Instant,
        timestamp: &str,
    ) -> Next {
        let outcome = gates.map(|(book, outcome)| {
            self.gates = book;
            outcome
        });
        if !self.config.enabled {
            return Next::Stop;
        }
        let text = match outcome {
            Some(GateOutcome::Passed | GateOutcome::RetryExhausted | GateOutcome::Aborted) => {
                return Next::Stop
            }
            Some(GateOutcome::Failed) => match &self.gates.last_failure {
                Some(f) => gate::failure_prompt(f, self.config.gates.max_retries, timestamp),
                None => return Next::Stop,
            },
            None => DEFAULT_CONTINUATION.to_owned(),
        };
        if self.limit(now).is_some() {
            return Next::Stop;
        }
        self.counters.continuations_used += 1;
        Next::Continue(text)
    }
}

/// The prompt response's `usage` (the newer ACP schema's unstable field): every model call of
/// the prompt, continuations included.
pub(crate) fn usage_value(u: Usage) -> Value {
    let mut m = Map::new();
    m.insert("inputTokens".into(), json!(u.input));
    m.insert("outputTokens".into(), json!(u.output));
    m.insert(
        "totalTokens".into(),
        json!(u.input + u.output + u.cache_read + u.cache_write),
    );
    if u.cache_read > 0 {
        m.insert("cachedReadTokens".into(), json!(u.cache_read));
    }
    if u.cache_write > 0 {
        m.insert("cachedWriteTokens".into(), json!(u.cache_write));
    }
    Value::Object(m)
}

/// Adds `_meta[ns].autonomous` (while enabled) to a completion or terminal update.
pub(crate) fn annotate(update: &mut Value, state: &Unattended) {
    if let Some(a) = state.meta() {
        if let Some(ns) = update
            .pointer_mut(&format!("/_meta/{}", crate::protocol::meta::NAMESPACE))
            .and_then(Value::as_object_mut)
        {
            ns.insert("autonomous".into(), a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::autonomy::gate::GateFailure;

    #[test]
    fn usage_sums_and_omits_unknown_cache_counts() {
        assert_eq!(
            usage_value(usage(10, 5, 0, 0)),
            json!({"inputTokens":10,"outputTokens":5,"totalTokens":15})
        );
        assert_eq!(
            usage_value(usage(10, 5, 100, 2)),
            json!({"inputTokens":10,"outputTokens":5,"totalTokens":117,"cachedReadTokens":100,"cachedWriteTokens":2})
        );
    }

    fn enabled() -> Unattended {
        Unattended::new(
            Config {
                enabled: true,
                ..Config::default()
            },
            Instant::now(),
        )
    }

    fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
        Usage {
            input,
            output,
            cache_read,
            cache_write,
        }
    }

    #[test]
    fn defaults_are_the_spec_s() {
        let c = Config::default();
        assert!(!c.enabled);
        assert_eq!(
            (c.max_continuations, c.max_turns, c.max_tokens),
            (3, 12, 80_000)
        );
        assert_eq!(c.timeout, Duration::from_secs(30 * 60));
        assert_eq!(c.gates.max_retries, 3);
        assert_eq!(c.gates.timeout, Duration::from_secs(300));
    }

    #[test]
    fn counters_count_calls_and_tokens_without_cache_reads_only_while_enabled() {
        let now = Instant::now();
        let mut off = Unattended::new(Config::default(), now);
        off.record(2, usage(10, 5, 100, 1), now);
        assert_eq!(off.counters, Counters::default());
        let mut on = enabled();
        on.record(2, usage(10, 5, 100, 1), now);
        on.record(1, usage(1, 1, 0, 0), now);
        assert_eq!(on.counters.turns_used, 3);
        assert_eq!(on.counters.tokens_used, 18);
    }

    #[test]
    fn limits_are_checked_in_the_spec_s_order() {
        let now = Instant::now();
        let mut u = enabled();
        assert_eq!(u.limit(now), None);
        u.counters.tokens_used = 80_000;
        assert_eq!(u.limit(now), Some(Limit::MaxTokens));
        u.counters.turns_used = 12;
        assert_eq!(u.limit(now), Some(Limit::MaxTurns));
        u.counters.continuations_used = 3;
        assert_eq!(u.limit(now), Some(Limit::MaxContinuations));
        let mut late = enabled();
        assert_eq!(
            late.limit(now + Duration::from_secs(1801)),
            Some(Limit::Timeout)
        );
        late.disable();
        assert_eq!(late.meta(), None);
    }

    #[test]
    fn stop_reasons_follow_the_limits_and_keep_the_turn_s_own_otherwise() {
        let now = Instant::now();
        let mut u = enabled();
        assert_eq!(u.stop_reason(StopReason::EndTurn, now), StopReason::EndTurn);
        assert_eq!(
            u.stop_reason(StopReason::MaxTokens, now),
            StopReason::MaxTokens
        );
        u.counters.turns_used = 12;
        assert_eq!(
            u.stop_reason(StopReason::EndTurn, now),
            StopReason::MaxTurnRequests
        );
        u.counters.turns_used = 0;
        u.counters.tokens_used = 90_000;
        assert_eq!(
            u.stop_reason(StopReason::EndTurn, now),
            StopReason::MaxTokens
        );
    }

    #[test]
    fn after_turn_decides_stop_or_which_continuation() {
        let now = Instant::now();
        // No gates: the default continuation until a limit.
        let mut u = enabled();
        for _ in 0..3 {
            assert_eq!(
                u.after_turn(None, now, "T"),
                Next::Continue(DEFAULT_CONTINUATION.to_owned())
            );
        }
        assert_eq!(u.after_turn(None, now, "T"), Next::Stop);
        assert_eq!(u.counters.continuations_used, 3);
        assert_eq!(u.remaining_continuations(), 0);

        // Gates: passed or exhausted stop; a failure continues with its template.
        let mut u = enabled();
        let mut book = GateBook::default();
        assert_eq!(
            u.after_turn(Some((book.clone(), GateOutcome::Passed)), now, "T"),
            Next::Stop
        );
        book.last_failure = Some(GateFailure {
            command: "make test".into(),
            attempt: 1,
            exit_text: "exited 2".into(),
            output: String::new(),
        });
        book.attempts.insert("make test".into(), 1);
        let Next::Continue(text) =
            u.after_turn(Some((book.clone(), GateOutcome::Failed)), now, "T")
        else {
            panic!()
        };
        assert!(
            text.starts_with("Autonomous quality gate failed (attempt 1/3): `make test` exited 2.")
        );
        assert_eq!(u.remaining_continuations(), 2);
        assert_eq!(
            u.meta(),
            Some(
                json!({"enabled":true,"continuationsUsed":1,"turnsUsed":0,"tokensUsed":0,"gateAttempt":1,"gateFailure":"exited 2"})
            )
        );
        assert_eq!(
            u.after_turn(Some((book.clone(), GateOutcome::RetryExhausted)), now, "T"),
            Next::Stop
        );
        // A failure with a limit reached stops.
        u.counters.turns_used = 12;
        assert_eq!(
            u.after_turn(Some((book, GateOutcome::Failed)), now, "T"),
            Next::Stop
        );
        // Disabled: always stop.
        let mut off = Unattended::new(Config::default(), now);
        assert_eq!(off.after_turn(None, now, "T"), Next::Stop);
        assert_eq!(off.remaining_continuations(), 0);
    }

    #[test]
    fn status_line_and_enable_reset() {
        let now = Instant::now();
        let mut u = Unattended::new(Config::default(), now);
        assert_eq!(
            u.status_line(),
            "Autonomous mode: off. Continuations: 0/3. Turns: 0/12. Tokens: 0/80000."
        );
        u.enable(now);
        u.record(2, usage(100, 20, 0, 0), now);
        assert_eq!(
            u.status_line(),
            "Autonomous mode: on. Continuations: 0/3. Turns: 2/12. Tokens: 120/80000."
        );
        u.enable(now);
        assert_eq!(u.counters, Counters::default());
    }
}
