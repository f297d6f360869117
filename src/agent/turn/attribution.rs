//! Child usage attribution (behaviour spec §4.3 `child_usage_attributed`): every model call of
//! a subagent is counted into its parent's usage and, through it, every ancestor's.
//!
//! A child's worker reports each answered call into the `Pool` of every ancestor
//! (`Links::report`); an ancestor's own worker takes its pool (`fold`) after each of its model
//! calls and at the end of a prompt or child run. Taking it adds the usage to its
//! `Conversation` (so the prompt's `usage` and `usage_update`'s cost include it), to the
//! autonomous and goal counters of a client prompt, and writes one `child_usage_attributed`
//! entry per child to its session file, from which a load restores the children's totals.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Conversation;
use crate::agent::autonomy;
use crate::provider::Usage;

/// One child's model usage, waiting for an ancestor to count it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attribution {
    pub child_id: String,
    pub child_name: String,
    pub usage: Usage,
    /// USD, 0 when the model's prices are unknown.
    pub cost: f64,
}

/// Usage of an agent's descendants not yet counted into its own.
#[derive(Debug, Default)]
pub(crate) struct Pool(Mutex<Vec<Attribution>>);

impl Pool {
    fn push(&self, a: Attribution) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // One entry per child between two folds.
        match v.iter_mut().find(|b| b.child_id == a.child_id) {
            Some(b) => {
                b.usage.add(a.usage);
                b.cost += a.cost;
            }
            None => v.push(a),
        }
    }

    fn take(&self) -> Vec<Attribution> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// An agent's place in the attribution chain.
#[derive(Debug, Default, Clone)]
pub(crate) struct Links {
    /// This agent's id in its family (a child's `sub-…`; the main agent's session id).
    pub id: String,
    /// Usage of this agent's descendants, waiting for its worker.
    pub own: Arc<Pool>,
    /// The pools of this agent's ancestors, parent first (empty for the main agent).
    pub up: Vec<Arc<Pool>>,
}

impl Links {
    /// A model call of this agent (`name`) answered: its usage goes to every ancestor.
    pub(crate) fn report(&self, name: &str, usage: Usage, cost: f64) {
        for pool in &self.up {
            pool.push(Attribution {
                child_id: self.id.clone(),
                child_name: name.to_owned(),
                usage,
                cost,
            });
        }
    }
}

/// The children's part of a session's figures: this process's attributions plus what its
/// session file recorded before (a load restores `session`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct ChildTotals {
    pub usage: Usage,
    pub cost: f64,
}

impl ChildTotals {
    pub(crate) fn is_empty(&self) -> bool {
        self.usage == Usage::default()
    }
}

/// Counts the usage waiting in `links.own` into `conv` (and into `unattended`, for a client
/// prompt), writing an attribution entry per child. Returns whether there was any.
pub(crate) fn fold(
    links: &Links,
    conv: &mut Conversation,
    unattended: Option<&autonomy::Shared>,
) -> bool {
    let taken = links.own.take();
    for a in &taken {
        conv.usage.add(a.usage);
        conv.children.usage.add(a.usage);
        conv.children.cost += a.cost;
        conv.compaction.cost += a.cost;
        if let Some(u) = unattended {
            autonomy::lock(u).record(0, a.usage, Instant::now());
        }
        if let Some(r) = conv.recorder.as_mut() {
            r.note_child_usage(&a.child_id, &a.child_name, a.usage, a.cost);
        }
    }
    !taken.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input,
            output,
            ..Usage::default()
        }
    }

    #[test]
    fn a_grandchild_counts_into_every_ancestor_and_a_fold_takes_it_once() {
        let main = Links::default();
        let child = Links {
            id: "sub-1".into(),
            own: Arc::default(),
            up: vec![main.own.clone()],
        };
        let grandchild = Links {
            id: "sub-2".into(),
            own: Arc::default(),
            up: vec![child.own.clone(), main.own.clone()],
        };
        child.report("c", usage(10, 1), 0.5);
        grandchild.report("g", usage(100, 10), 0.0);
        grandchild.report("g", usage(100, 10), 0.0);
        let mut conv = Conversation::default();
        assert!(fold(&main, &mut conv, None));
        assert_eq!(conv.usage, usage(210, 21));
        assert_eq!(conv.children.usage, usage(210, 21));
        assert!((conv.children.cost - 0.5).abs() < 1e-12);
        assert!(!fold(&main, &mut conv, None), "taken once");
        let mut mid = Conversation::default();
        assert!(fold(&child, &mut mid, None));
        assert_eq!(mid.usage, usage(200, 20));
    }

    #[test]
    fn a_client_prompt_counts_children_into_its_autonomous_tokens() {
        let shared = autonomy::Unattended::shared(
            autonomy::Config {
                enabled: true,
                ..autonomy::Config::default()
            },
            Instant::now(),
        );
        let main = Links::default();
        let child = Links {
            id: "sub-1".into(),
            own: Arc::default(),
            up: vec![main.own.clone()],
        };
        child.report("c", usage(40, 2), 0.0);
        fold(&main, &mut Conversation::default(), Some(&shared));
        let state = autonomy::lock(&shared);
        assert_eq!(state.counters.tokens_used, 42);
        assert_eq!(
            state.counters.turns_used, 0,
            "a child's call is not a turn of ours"
        );
    }
}
