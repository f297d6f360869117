//! The agent family of one ACP session: subagent bookkeeping that is pure data.
//!
//! Names, statuses, turn attribution (behaviour spec §1.15), message formatting and limits
//! (§4.4). The threads that run children and the channels that carry their news live in
//! `subagents/`; everything here is testable without them.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Lifecycle of a child: `queued → running → done | error | cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildStatus {
    Queued,
    Running,
    Done,
    Error,
    Cancelled,
}

impl ChildStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ChildStatus::Queued => "queued",
            ChildStatus::Running => "running",
            ChildStatus::Done => "done",
            ChildStatus::Error => "error",
            ChildStatus::Cancelled => "cancelled",
        }
    }

    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            ChildStatus::Done | ChildStatus::Error | ChildStatus::Cancelled
        )
    }

    /// The coarser status `rlm.list_subagents()` reports.
    pub(crate) fn list_status(self) -> &'static str {
        match self {
            ChildStatus::Queued | ChildStatus::Running => "running",
            ChildStatus::Done | ChildStatus::Cancelled => "completed",
            ChildStatus::Error => "error",
        }
    }
}

/// Names that would be ambiguous as message targets.
const RESERVED_NAMES: &[&str] = &["*", "all", "broadcast"];

/// Validates an explicit `rlm.run(name=…)` against the texts of §4.3.
pub(crate) fn validate_child_name(name: &str, siblings: &[&str]) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err("rlm.run name must not be empty".to_owned());
    }
    if name.chars().count() > 64 {
        return Err("rlm.run name must be at most 64 characters".to_owned());
    }
    if RESERVED_NAMES.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!("rlm.run name \"{name}\" is reserved"));
    }
    if siblings.contains(&name) {
        return Err(format!(
            "rlm.run name \"{name}\" is already used by another subagent"
        ));
    }
    Ok(name.to_owned())
}

/// `subagent-<prompt-slug>-<id suffix>`, at most 64 characters.
pub(crate) fn default_child_name(prompt: &str, child_id: &str) -> String {
    let mut slug = String::new();
    for c in prompt.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
        if slug.len() >= 32 {
            break;
        }
    }
    let slug = slug.trim_matches('-');
    let suffix: String = child_id
        .chars()
        .rev()
        .take(6)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let name = if slug.is_empty() {
        format!("subagent-{suffix}")
    } else {
        format!("subagent-{slug}-{suffix}")
    };
    name.chars().take(64).collect()
}

/// Which prompt turn a child's updates belong to (§1.15).
#[derive(Debug, Default)]
pub(crate) struct Attribution {
    origins: HashMap<String, u64>,
    sealed: HashSet<u64>,
}

impl Attribution {
    /// The `promptTurnId` for a child update with `status`, given the active prompt turn
    /// (0 when none). The origin is remembered at the first non-terminal update; once its
    /// turn has published terminal quiescence the child's updates move to turn 0; a terminal
    /// status forgets the child.
    pub(crate) fn turn_for_child(
        &mut self,
        child: &str,
        status: ChildStatus,
        active_turn: u64,
    ) -> u64 {
        let origin = *self.origins.entry(child.to_owned()).or_insert(active_turn);
        if status.is_terminal() {
            self.origins.remove(child);
        }
        if self.sealed.contains(&origin) {
            0
        } else {
            origin
        }
    }

    /// Turn `turn` published its terminal quiescence.
    pub(crate) fn seal(&mut self, turn: u64) {
        if turn != 0 {
            self.sealed.insert(turn);
        }
    }

    /// Children whose updates are attributed to `turn` and not settled.
    #[cfg(test)]
    fn outstanding_for(&self, turn: u64) -> usize {
        self.origins.values().filter(|t| **t == turn).count()
    }
}

/// Limits on agent-to-agent messages (§4.4).
pub(crate) const MAX_MESSAGE_CHARS: usize = 16_384;
pub(crate) const MAX_PENDING_PER_TARGET: usize = 20;

pub(crate) fn check_message(
    message: &str,
    pending_at_target: usize,
    target: &str,
) -> Result<(), String> {
    let n = message.chars().count();
    if n > MAX_MESSAGE_CHARS {
        return Err(format!(
            "Agent session message is too long: {n} chars exceeds {MAX_MESSAGE_CHARS}"
        ));
    }
    if pending_at_target >= MAX_PENDING_PER_TARGET {
        return Err(format!(
            "Target session has too many pending messages: {target} has {pending_at_target} (limit {MAX_PENDING_PER_TARGET})"
        ));
    }
    Ok(())
}

/// A token bucket: `capacity` messages, refilled one per `refill`.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    capacity: f64,
    tokens: f64,
    refill: Duration,
    last: Instant,
}

impl TokenBucket {
    pub(crate) fn new(capacity: u32, refill: Duration) -> TokenBucket {
        TokenBucket {
            capacity: capacity as f64,
            tokens: capacity as f64,
            refill,
            last: Instant::now(),
        }
    }

    /// The messaging default: 3 messages, one more per second.
    pub(crate) fn messaging() -> TokenBucket {
        TokenBucket::new(3, Duration::from_millis(1000))
    }

    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed / self.refill.as_secs_f64()).min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Who is who in a message header.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Party {
    pub name: String,
    pub id: String,
}

/// The LLM-visible text of a delivered agent message (§4.4).
pub(crate) fn format_agent_message(
    relationship: Option<&str>,
    from: &Party,
    to: &Party,
    message_id: &str,
    message: &str,
) -> String {
    let mut out = String::new();
    if let Some(rel) = relationship {
        if rel == "parent" {
            out.push_str("[from parent]\n");
        } else {
            out.push_str(&format!("[from {rel}:{}]\n", from.name));
        }
    }
    out.push_str("Agent-to-agent message received.\nSource: agent_message\n");
    out.push_str(&format!(
        "From: {}, active {}, session {}\n",
        from.name, from.id, from.id
    ));
    out.push_str(&format!(
        "To: {}, active {}, session {}\n",
        to.name, to.id, to.id
    ));
    out.push_str(&format!("Message id: {message_id}\n\n{message}"));
    out
}

/// The notice a parent gets when a child ends without replying, fails, or is cancelled (§4.3).
pub(crate) fn completion_notice(name: &str, id: &str, status: ChildStatus, detail: &str) -> String {
    match status {
        ChildStatus::Error => format!("RLM child {name} ({id}) failed: {detail}"),
        ChildStatus::Cancelled => format!("RLM child {name} ({id}) was cancelled: {detail}"),
        _ => format!("RLM child {name} ({id}) completed without sending a reply. Last assistant text: {detail}"),
    }
}

/// The depth refusal of §4.3, verbatim.
pub(crate) fn depth_refusal(depth: u32, max_depth: u32) -> Option<String> {
    (depth >= max_depth).then(|| {
        format!("RLM recursion depth limit reached (RLM_DEPTH={depth}, RLM_MAX_DEPTH={max_depth})")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            default_child_name("Summarize shard 1!", "sub-1a2b3c4d"),
            "subagent-summarize-shard-1-2b3c4d"
        );
        assert_eq!(default_child_name("???", "sub-abcdef12"), "subagent-cdef12");
        assert!(default_child_name(&"word ".repeat(40), "sub-12345678").len() <= 64);
        assert_eq!(
            validate_child_name("  reviewer ", &[]),
            Ok("reviewer".into())
        );
        assert_eq!(
            validate_child_name(" ", &[]),
            Err("rlm.run name must not be empty".into())
        );
        assert_eq!(
            validate_child_name(&"x".repeat(65), &[]),
            Err("rlm.run name must be at most 64 characters".into())
        );
        assert!(validate_child_name("all", &[]).is_err());
        assert!(validate_child_name("reviewer", &["reviewer"]).is_err());
    }

    #[test]
    fn attribution_follows_the_origin_turn_then_moves_to_zero() {
        let mut a = Attribution::default();
        // Case §2.7 #18: started in turn 1, done after turn 1's terminal → [1, 0].
        assert_eq!(a.turn_for_child("c", ChildStatus::Running, 1), 1);
        assert_eq!(a.outstanding_for(1), 1);
        a.seal(1);
        assert_eq!(a.turn_for_child("c", ChildStatus::Done, 0), 0);
        assert_eq!(a.outstanding_for(1), 0);
        // A child first seen without an active prompt stays at 0 (§2.7 #15).
        assert_eq!(a.turn_for_child("d", ChildStatus::Running, 0), 0);
        assert_eq!(a.turn_for_child("d", ChildStatus::Done, 2), 0);
        // A later update keeps its origin even while another turn is active.
        assert_eq!(a.turn_for_child("e", ChildStatus::Queued, 2), 2);
        assert_eq!(a.turn_for_child("e", ChildStatus::Running, 3), 2);
    }

    #[test]
    fn message_limits_and_bucket() {
        assert!(check_message("hi", 0, "t").is_ok());
        assert_eq!(
            check_message(&"x".repeat(16_385), 0, "t").unwrap_err(),
            "Agent session message is too long: 16385 chars exceeds 16384"
        );
        assert!(check_message("hi", 20, "t")
            .unwrap_err()
            .starts_with("Target session has too many pending messages: "));
        let mut b = TokenBucket::messaging();
        let t0 = Instant::now();
        assert!(b.try_take(t0) && b.try_take(t0) && b.try_take(t0));
        assert!(!b.try_take(t0));
        assert!(b.try_take(t0 + Duration::from_millis(1000)));
    }

    #[test]
    fn texts() {
        let from = Party {
            name: "reviewer".into(),
            id: "s1".into(),
        };
        let to = Party {
            name: "root".into(),
            id: "s0".into(),
        };
        let m = format_agent_message(Some("child"), &from, &to, "agentmsg_1", "done");
        assert!(m.starts_with(
            "[from child:reviewer]\nAgent-to-agent message received.\nSource: agent_message\n"
        ));
        assert!(m.ends_with("Message id: agentmsg_1\n\ndone"));
        assert_eq!(
            completion_notice("r", "sub-1", ChildStatus::Done, "all good"),
            "RLM child r (sub-1) completed without sending a reply. Last assistant text: all good"
        );
        assert_eq!(
            depth_refusal(1, 1).unwrap(),
            "RLM recursion depth limit reached (RLM_DEPTH=1, RLM_MAX_DEPTH=1)"
        );
        assert_eq!(depth_refusal(0, 1), None);
    }
}
