//! What keeps a prompt bounded whatever the model does: checked before every model call and
//! every tool call, inside a turn's tool loop as well as between autonomous continuations.
//!
//! - The autonomous limits (model calls, tokens, wall clock; `--autonomous-max-*`), before
//!   every model call; the continuation limit stays with `autonomy::Unattended::after_turn`.
//! - A cap on model calls per prompt (`--max-model-calls`; on by default for `-p` and
//!   `--mode json`, which nobody watches).
//! - A repeat guard in every mode: the same call (name and arguments) several times in a row is
//!   a loop. The `REPEAT_REFUSED`th identical call in a row is not run and gets a tool error
//!   that says so; one more ends the prompt (`max_turn_requests`, with a notice), as does a
//!   refused call made again after other calls.
//!
//! One `Guard` lives for one prompt (all its continuations) or one unprompted turn. It counts
//! every model call into the session's autonomous state as the call ends, so the counters are
//! right at every check. The decisions and texts are pure and table-tested here.

use std::time::Instant;

use serde_json::Value;

use crate::agent::autonomy::{self, Limit};
use crate::protocol::stop_reason::StopReason;
use crate::provider::{ToolCall, Usage};

/// The identical call in a row that is refused (not run) with a tool error.
pub(crate) const REPEAT_REFUSED: u32 = 3;
/// The identical call in a row that ends the prompt.
pub(crate) const REPEAT_STOPS: u32 = REPEAT_REFUSED + 1;

/// The default cap on model calls per prompt for `-p` / `--mode json`.
pub(crate) const HEADLESS_MAX_MODEL_CALLS: u64 = 100;

/// Why a prompt was stopped: its stop reason and the notice that says why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stop {
    pub reason: StopReason,
    pub title: String,
    pub description: String,
}

/// What to do with one tool call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Run,
    /// Do not run it; this is its (error) result.
    Refuse(String),
    /// End the prompt.
    Stop(Stop),
}

/// Consecutive identical calls, and the calls already refused as repeats.
#[derive(Debug, Default)]
struct Repeats {
    last: Option<(String, Value)>,
    count: u32,
    /// Calls refused in this prompt. Made again later, even after other calls, such a call
    /// ends the prompt: a small model (Qwen2.5-Coder-0.5B on llama.cpp) answered each refusal
    /// with one slightly different call and then went back to the refused one, over and over,
    /// so a count of calls in a row alone never reached the stop.
    refused: Vec<(String, Value)>,
}

impl Repeats {
    fn observe(&mut self, name: &str, arguments: &Value) -> Verdict {
        let is = |(n, a): &(String, Value)| n == name && a == arguments;
        if self.last.as_ref().is_some_and(is) {
            self.count += 1;
        } else {
            self.last = Some((name.to_owned(), arguments.clone()));
            self.count = 1;
            if self.refused.iter().any(is) {
                return Verdict::Stop(refused_again_stop(name));
            }
        }
        match self.count {
            n if n >= REPEAT_STOPS => Verdict::Stop(repeat_stop(name, n)),
            n if n >= REPEAT_REFUSED => {
                if n == REPEAT_REFUSED {
                    self.refused.push((name.to_owned(), arguments.clone()));
                }
                Verdict::Refuse(repeat_refusal(name, n))
            }
            _ => Verdict::Run,
        }
    }
}

/// The tool error of a refused repeat.
pub(crate) fn repeat_refusal(name: &str, n: u32) -> String {
    format!(
        "Not run: this is call {n} in a row of `{name}` with exactly the same arguments, and its result would not change. Do something different: read the previous result, fix its cause, or try another approach. If the task is done, stop calling tools and answer. The same call once more ends this prompt."
    )
}

fn repeat_stop(name: &str, n: u32) -> Stop {
    Stop {
        reason: StopReason::MaxTurnRequests,
        title: "Stopped a repeating tool call".to_owned(),
        description: format!(
            "The model made the same `{name}` call with the same arguments {n} times in a row, after being told the repeat would not run; the prompt was ended so the loop does not run on."
        ),
    }
}

fn refused_again_stop(name: &str) -> Stop {
    Stop {
        reason: StopReason::MaxTurnRequests,
        title: "Stopped a repeating tool call".to_owned(),
        description: format!(
            "The model went back to a `{name}` call it had been told would not run again (the same arguments, refused as a repeat earlier in this prompt); the prompt was ended so the loop does not run on."
        ),
    }
}

/// The notice when the per-prompt cap stops a prompt.
pub(crate) fn cap_stop(cap: u64) -> Stop {
    Stop {
        reason: StopReason::MaxTurnRequests,
        title: "Model call limit reached".to_owned(),
        description: format!(
            "This prompt made {cap} model calls, the limit per prompt (--max-model-calls; 0 lifts it); it was stopped before the next one."
        ),
    }
}

/// The notice when an autonomous limit stops a prompt before its next model call.
pub(crate) fn limit_stop(limit: Limit, status: &autonomy::Unattended, reason: StopReason) -> Stop {
    let (c, l) = (&status.counters, &status.config);
    let description = match limit {
        Limit::MaxTurns => format!(
            "{} of {} model calls used (--autonomous-max-turns); stopped before the next one.",
            c.turns_used, l.max_turns
        ),
        Limit::MaxTokens => format!(
            "{} of {} tokens used (--autonomous-max-tokens); stopped before the next model call.",
            c.tokens_used, l.max_tokens
        ),
        Limit::Timeout => format!(
            "The run's time limit of {} ms passed (--autonomous-timeout-ms); stopped before the next model call.",
            l.timeout.as_millis()
        ),
        Limit::MaxContinuations => format!(
            "{} of {} continuations used (--autonomous-max-continuations).",
            c.continuations_used, l.max_continuations
        ),
    };
    Stop {
        reason,
        title: "Autonomous limit reached".to_owned(),
        description,
    }
}

/// One prompt's bounds.
#[derive(Debug, Default)]
pub(crate) struct Guard {
    /// The session's autonomous state (client prompts only).
    unattended: Option<autonomy::Shared>,
    /// Model calls this prompt may make (`None`: no cap).
    cap: Option<u64>,
    calls: u64,
    repeats: Repeats,
    stopped: Option<Stop>,
}

impl Guard {
    /// The bounds of a client prompt: the session's autonomous limits and its cap.
    pub(crate) fn for_prompt(unattended: &autonomy::Shared) -> Guard {
        let cap = autonomy::lock(unattended).config.max_model_calls;
        Guard {
            unattended: Some(unattended.clone()),
            cap,
            ..Guard::default()
        }
    }

    /// The session's autonomous state, for a client prompt.
    pub(crate) fn unattended(&self) -> Option<&autonomy::Shared> {
        self.unattended.as_ref()
    }

    /// Whether the prompt was stopped (then nothing continues it).
    pub(crate) fn stopped(&self) -> Option<&Stop> {
        self.stopped.as_ref()
    }

    /// Before a model call: `Some` ends the prompt instead.
    pub(crate) fn before_model_call(&mut self, now: Instant) -> Option<Stop> {
        let stop = self.check(now)?;
        self.stopped = Some(stop.clone());
        Some(stop)
    }

    fn check(&self, now: Instant) -> Option<Stop> {
        if let Some(cap) = self.cap.filter(|&cap| self.calls >= cap) {
            return Some(cap_stop(cap));
        }
        let state = autonomy::lock(self.unattended.as_ref()?);
        if !state.config.enabled {
            return None;
        }
        let limit = state.call_limit(now)?;
        let reason = state.stop_reason(StopReason::EndTurn, now);
        Some(limit_stop(limit, &state, reason))
    }

    /// A model call answered with `usage`: counted now, so the next check sees it.
    pub(crate) fn model_call_done(&mut self, usage: Usage, now: Instant) {
        self.calls += 1;
        if let Some(u) = &self.unattended {
            autonomy::lock(u).record(1, usage, now);
        }
    }

    /// Before a tool call: run it, refuse it, or end the prompt.
    pub(crate) fn before_tool_call(&mut self, call: &ToolCall) -> Verdict {
        let verdict = self.repeats.observe(&call.name, &call.arguments);
        if let Verdict::Stop(stop) = &verdict {
            self.stopped = Some(stop.clone());
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::autonomy::{Config, Unattended};
    use crate::base::json::json;
    use std::time::Duration;

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args,
        }
    }

    #[test]
    fn repeats_are_refused_then_stop_and_anything_else_resets_them() {
        let mut g = Guard::default();
        let a = call("bash", json!({"command": "echo hi"}));
        let b = call("bash", json!({"command": "echo ho"}));
        // (call, verdict kind): 'r' run, 'x' refused, 's' stop.
        let seq = [
            (&a, 'r'),
            (&a, 'r'),
            (&b, 'r'),
            (&a, 'r'),
            (&a, 'r'),
            (&a, 'x'),
            (&a, 's'),
        ];
        for (i, (c, want)) in seq.iter().enumerate() {
            let got = match g.before_tool_call(c) {
                Verdict::Run => 'r',
                Verdict::Refuse(text) => {
                    assert!(text.starts_with("Not run: this is call 3 in a row of `bash`"));
                    'x'
                }
                Verdict::Stop(stop) => {
                    assert_eq!(stop.reason, StopReason::MaxTurnRequests);
                    assert!(stop.description.contains("4 times in a row"));
                    's'
                }
            };
            assert_eq!(got, *want, "call {i}");
        }
        assert!(g.stopped().is_some());
        // A refused call made again after other calls ends the prompt too (the loop a real
        // small model ran: the refused write, then a read, then the same write again).
        let w = call("write", json!({"path": "a.py", "content": "x"}));
        let r = call("read", json!({"path": "a.py"}));
        let seq = [(&w, 'r'), (&w, 'r'), (&w, 'x'), (&r, 'r'), (&w, 's')];
        let mut g = Guard::default();
        for (i, (c, want)) in seq.iter().enumerate() {
            let got = match g.before_tool_call(c) {
                Verdict::Run => 'r',
                Verdict::Refuse(_) => 'x',
                Verdict::Stop(stop) => {
                    assert!(stop.description.contains("went back to a `write` call"));
                    's'
                }
            };
            assert_eq!(got, *want, "call {i}");
        }
        // Calls never refused may come back as often as they like.
        let mut g = Guard::default();
        for _ in 0..5 {
            for c in [&w, &r] {
                assert_eq!(g.before_tool_call(c), Verdict::Run);
            }
        }
        // The same name with other arguments is another call.
        let mut g = Guard::default();
        for n in 0..10 {
            let c = call("bash", json!({"command": format!("echo {n}")}));
            assert_eq!(g.before_tool_call(&c), Verdict::Run);
        }
    }

    #[test]
    fn the_cap_counts_model_calls_of_the_prompt() {
        let u = Unattended::shared(
            Config {
                max_model_calls: Some(2),
                ..Config::default()
            },
            Instant::now(),
        );
        let mut g = Guard::for_prompt(&u);
        let now = Instant::now();
        assert_eq!(g.before_model_call(now), None);
        g.model_call_done(Usage::default(), now);
        assert_eq!(g.before_model_call(now), None);
        g.model_call_done(Usage::default(), now);
        let stop = g.before_model_call(now).expect("capped");
        assert_eq!(stop, cap_stop(2));
        assert_eq!(stop.reason, StopReason::MaxTurnRequests);
        // No cap, no autonomy: never stops.
        let mut free = Guard::default();
        for _ in 0..1000 {
            free.model_call_done(Usage::default(), now);
        }
        assert_eq!(free.before_model_call(now), None);
    }

    #[test]
    fn autonomous_limits_are_checked_before_each_model_call() {
        let now = Instant::now();
        let usage = Usage {
            input: 600,
            output: 50,
            ..Usage::default()
        };
        // (max_turns, max_tokens, timeout_ms, calls made, stop reason before the next)
        let cases: &[(u64, u64, u64, u64, Option<StopReason>)] = &[
            (10, 80_000, 1_800_000, 9, None),
            (10, 80_000, 1_800_000, 10, Some(StopReason::MaxTurnRequests)),
            (100, 1_000, 1_800_000, 1, None),
            (100, 1_000, 1_800_000, 2, Some(StopReason::MaxTokens)),
            (100, 80_000, 0, 0, Some(StopReason::MaxTurnRequests)),
        ];
        for &(max_turns, max_tokens, timeout, calls, want) in cases {
            let u = Unattended::shared(
                Config {
                    enabled: true,
                    max_turns,
                    max_tokens,
                    timeout: Duration::from_millis(timeout),
                    ..Config::default()
                },
                now,
            );
            let mut g = Guard::for_prompt(&u);
            for _ in 0..calls {
                g.model_call_done(usage, now);
            }
            let got = g.before_model_call(now).map(|s| s.reason);
            assert_eq!(got, want, "{max_turns} {max_tokens} {timeout} {calls}");
            assert_eq!(autonomy::lock(&u).counters.turns_used, calls);
        }
        // Disabled: the same counts never stop.
        let u = Unattended::shared(Config::default(), now);
        let mut g = Guard::for_prompt(&u);
        for _ in 0..50 {
            g.model_call_done(usage, now);
        }
        assert_eq!(g.before_model_call(now), None);
    }

    #[test]
    fn limit_notices_say_which_limit() {
        let mut u = Unattended::new(
            Config {
                enabled: true,
                max_turns: 10,
                ..Config::default()
            },
            Instant::now(),
        );
        u.counters.turns_used = 10;
        let stop = limit_stop(Limit::MaxTurns, &u, StopReason::MaxTurnRequests);
        assert_eq!(
            stop.description,
            "10 of 10 model calls used (--autonomous-max-turns); stopped before the next one."
        );
    }
}
