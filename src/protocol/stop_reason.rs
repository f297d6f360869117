//! The pure stop-reason mapper (behaviour spec §1.19).
//!
//! Provider failures are not stop reasons: they fail the prompt request instead.

use std::time::Duration;

/// Autonomous-mode counters and limits, as far as they decide a stop reason.
#[derive(Debug, Clone, Default)]
pub(crate) struct AutonomousStatus {
    pub enabled: bool,
    pub continuations_used: u64,
    pub turns_used: u64,
    pub tokens_used: u64,
    pub max_continuations: u64,
    pub max_turns: u64,
    pub max_tokens: u64,
    /// Time since autonomous mode started, when it has.
    pub elapsed: Option<Duration>,
    pub timeout: Duration,
}

/// The ACP wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Cancelled,
}

impl StopReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::MaxTurnRequests => "max_turn_requests",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// Cancellation wins over everything; an autonomous run that hit a limit never reports a clean
/// `end_turn`.
pub(crate) fn acp_stop_reason(
    cancelled: bool,
    autonomous: Option<&AutonomousStatus>,
) -> StopReason {
    if cancelled {
        return StopReason::Cancelled;
    }
    let Some(a) = autonomous.filter(|a| a.enabled) else {
        return StopReason::EndTurn;
    };
    if a.continuations_used >= a.max_continuations || a.turns_used >= a.max_turns {
        StopReason::MaxTurnRequests
    } else if a.tokens_used >= a.max_tokens {
        StopReason::MaxTokens
    } else if a.elapsed.is_some_and(|e| e >= a.timeout) {
        StopReason::MaxTurnRequests
    } else {
        StopReason::EndTurn
    }
}

#[cfg(test)]
mod tests {
    //! The cases of upstream `acp-stop-reason.test.ts` (behaviour spec §2.2).
    use super::*;

    fn fixture() -> AutonomousStatus {
        AutonomousStatus {
            enabled: true,
            max_continuations: 3,
            max_turns: 100,
            max_tokens: 80_000,
            timeout: Duration::from_secs(30 * 60),
            elapsed: Some(Duration::from_secs(1)),
            ..Default::default()
        }
    }

    #[test]
    fn cancellation_wins_over_autonomous_state() {
        let s = AutonomousStatus {
            tokens_used: 80_000,
            ..fixture()
        };
        assert_eq!(acp_stop_reason(true, Some(&s)), StopReason::Cancelled);
    }

    #[test]
    fn ends_normally_without_autonomous_mode() {
        assert_eq!(acp_stop_reason(false, None), StopReason::EndTurn);
        let off = AutonomousStatus {
            enabled: false,
            turns_used: 1000,
            ..fixture()
        };
        assert_eq!(acp_stop_reason(false, Some(&off)), StopReason::EndTurn);
    }

    #[test]
    fn token_exhaustion_is_max_tokens() {
        let s = AutonomousStatus {
            tokens_used: 80_000,
            ..fixture()
        };
        assert_eq!(acp_stop_reason(false, Some(&s)).as_str(), "max_tokens");
    }

    #[test]
    fn a_stopped_autonomous_run_is_never_a_clean_end_turn() {
        let cases = [
            AutonomousStatus {
                elapsed: Some(Duration::from_secs(3600)),
                ..fixture()
            },
            AutonomousStatus {
                turns_used: 100,
                ..fixture()
            },
            AutonomousStatus {
                continuations_used: 3,
                ..fixture()
            },
        ];
        for s in cases {
            assert_eq!(
                acp_stop_reason(false, Some(&s)),
                StopReason::MaxTurnRequests,
                "{s:?}"
            );
        }
    }

    #[test]
    fn ends_the_turn_when_no_limit_was_hit() {
        let s = AutonomousStatus {
            turns_used: 1,
            ..fixture()
        };
        assert_eq!(acp_stop_reason(false, Some(&s)), StopReason::EndTurn);
    }
}
