//! Semantic edges between model calls (issue 21), for trainers that link the calls of one
//! rollout into a graph (verifiers' `ai.prime.acp/semantic-edges-v1`).
//!
//! Every logical model call gets a request id (`new_request_id`), sent with each of its HTTP
//! attempts (`provider/http.rs`). When a call has been answered (committed), the agent that made
//! it tells its `Tracer`, and the session's `Graph` records the edges that end at that call:
//! edges are only ever drawn between calls that both committed, because a consumer rejects an
//! edge naming a request it never saw answered. What is not yet known (the call a compaction
//! or a child's return feeds is the agent's *next* committed call) waits in the agent's chain
//! as `pending` until then; a failed call leaves it waiting for the one after.
//!
//! The edge types, as verifiers' `SemanticEdgeSet` names them:
//! - `continuation`: an agent's previous call → its next call within one client prompt (tool
//!   loop, autonomous and goal continuations); a new `session/prompt` starts a new chain.
//! - `compaction_attempt`: the agent's last call before a compaction → each summary request
//!   that was answered (a dangling branch, trainable only if a `compaction` leaves it).
//! - `compaction`: the summary request of a compaction that succeeded → the agent's first
//!   call after it (which continues from the summary, so it gets no `continuation`).
//! - `subagent_call`: the parent's call whose tool started an `rlm(...)` child → the child's
//!   first call.
//! - `subagent_return`: a child's last call when it finished its task → its parent's next call.
//! - `agent_message`: the sender's call whose tool sent an agent message → the receiver's next
//!   call.
//!
//! No self-edges and no duplicates; `Graph::take` hands out each edge once (the prompt
//! response, or `session/close` for what ran after the last prompt).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::base::json::json;
use serde_json::Value;

/// The `_meta` key of the prompt and close responses.
pub(crate) const META_KEY: &str = "ai.prime.acp/semantic-edges-v1";

/// A fresh id for one logical model call: a UUID (matches `^[A-Za-z0-9._:-]{1,128}$`, and is
/// what `Idempotency-Key` conventionally holds).
pub(crate) fn new_request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EdgeType {
    Continuation,
    CompactionAttempt,
    Compaction,
    SubagentCall,
    SubagentReturn,
    AgentMessage,
}

impl EdgeType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EdgeType::Continuation => "continuation",
            EdgeType::CompactionAttempt => "compaction_attempt",
            EdgeType::Compaction => "compaction",
            EdgeType::SubagentCall => "subagent_call",
            EdgeType::SubagentReturn => "subagent_return",
            EdgeType::AgentMessage => "agent_message",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Edge {
    pub source: String,
    pub target: String,
    pub kind: EdgeType,
}

/// One agent's calls so far.
#[derive(Debug, Default)]
struct Chain {
    /// Its last committed call.
    last: Option<String>,
    /// The next commit starts a new chain (a new client prompt, or a compaction replaced the
    /// context): no `continuation` from `last`.
    fresh: bool,
    /// The last answered summary request of a compaction in progress.
    summary: Option<String>,
    /// Edges that end at this agent's next committed call.
    pending: Vec<(String, EdgeType)>,
}

/// The edges of one session's agents (the main agent and its `rlm(...)` children).
#[derive(Debug, Default)]
pub(crate) struct Graph {
    chains: HashMap<String, Chain>,
    unpublished: Vec<Edge>,
    seen: HashSet<Edge>,
}

impl Graph {
    fn chain(&mut self, agent: &str) -> &mut Chain {
        self.chains.entry(agent.to_owned()).or_default()
    }

    fn add(&mut self, source: String, target: &str, kind: EdgeType) {
        if source == target {
            return;
        }
        let edge = Edge {
            source,
            target: target.to_owned(),
            kind,
        };
        if self.seen.insert(edge.clone()) {
            self.unpublished.push(edge);
        }
    }

    fn wait(&mut self, agent: &str, source: Option<String>, kind: EdgeType) {
        let Some(source) = source else { return };
        let pending = &mut self.chain(agent).pending;
        if !pending.iter().any(|(s, k)| *s == source && *k == kind) {
            pending.push((source, kind));
        }
    }

    /// A client prompt starts: `agent`'s next call begins a new chain.
    pub(crate) fn begin_prompt(&mut self, agent: &str) {
        self.chain(agent).fresh = true;
    }

    /// `agent`'s call `id` was answered.
    pub(crate) fn committed(&mut self, agent: &str, id: &str) {
        let chain = self.chain(agent);
        let pending = std::mem::take(&mut chain.pending);
        let continuation = match (&chain.last, chain.fresh) {
            (Some(last), false) if !pending.iter().any(|(s, _)| s == last) => Some(last.clone()),
            _ => None,
        };
        chain.last = Some(id.to_owned());
        chain.fresh = false;
        chain.summary = None;
        if let Some(last) = continuation {
            self.add(last, id, EdgeType::Continuation);
        }
        for (source, kind) in pending {
            self.add(source, id, kind);
        }
    }

    /// A compaction's summary request `id` of `agent` was answered (it may still fail, e.g.
    /// with an empty summary).
    pub(crate) fn summary_answered(&mut self, agent: &str, id: &str) {
        let chain = self.chain(agent);
        chain.summary = Some(id.to_owned());
        if let Some(last) = chain.last.clone() {
            self.add(last, id, EdgeType::CompactionAttempt);
        }
    }

    /// `agent`'s compaction succeeded: its last answered summary feeds the next call.
    pub(crate) fn compacted(&mut self, agent: &str) {
        let chain = self.chain(agent);
        let Some(summary) = chain.summary.take() else {
            return;
        };
        chain.fresh = true;
        self.wait(agent, Some(summary), EdgeType::Compaction);
    }

    /// `parent`'s tool started the child `child`.
    pub(crate) fn spawned(&mut self, parent: &str, child: &str) {
        let source = self.chain(parent).last.clone();
        self.wait(child, source, EdgeType::SubagentCall);
    }

    /// The child `child` finished its task for `parent`.
    pub(crate) fn returned(&mut self, child: &str, parent: &str) {
        let source = self.chain(child).last.clone();
        self.wait(parent, source, EdgeType::SubagentReturn);
    }

    /// `from`'s tool sent `to` an agent message.
    pub(crate) fn message(&mut self, from: &str, to: &str) {
        let source = self.chain(from).last.clone();
        self.wait(to, source, EdgeType::AgentMessage);
    }

    /// The edges recorded since the last call, each once.
    pub(crate) fn take(&mut self) -> Vec<Edge> {
        std::mem::take(&mut self.unpublished)
    }
}

/// `{"edges": [{source_request_id, target_request_id, type}]}`.
pub(crate) fn edges_value(edges: &[Edge]) -> Value {
    let list: Vec<Value> = edges
        .iter()
        .map(|e| {
            json!({
                "source_request_id": e.source,
                "target_request_id": e.target,
                "type": e.kind.as_str(),
            })
        })
        .collect();
    json!({ "edges": list })
}

/// Puts the unpublished edges into a response's `_meta` (nothing when there are none).
pub(crate) fn annotate(result: &mut Value, edges: &[Edge]) {
    if edges.is_empty() || !result.is_object() {
        return;
    }
    if !result.get("_meta").is_some_and(Value::is_object) {
        result["_meta"] = json!({});
    }
    result["_meta"][META_KEY] = edges_value(edges);
}

/// One agent's view of its session's graph.
#[derive(Debug, Clone)]
pub(crate) struct Tracer {
    graph: Arc<Mutex<Graph>>,
    agent: String,
}

impl Tracer {
    pub(crate) fn new(graph: Arc<Mutex<Graph>>, agent: &str) -> Tracer {
        Tracer {
            graph,
            agent: agent.to_owned(),
        }
    }

    /// A tracer on a graph of its own (tests).
    #[cfg(test)]
    pub(crate) fn alone(agent: &str) -> Tracer {
        Tracer::new(Arc::default(), agent)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Graph, &str) -> T) -> T {
        f(
            &mut self.graph.lock().unwrap_or_else(|e| e.into_inner()),
            &self.agent,
        )
    }

    pub(crate) fn begin_prompt(&self) {
        self.with(|g, a| g.begin_prompt(a));
    }

    pub(crate) fn committed(&self, id: &str) {
        self.with(|g, a| g.committed(a, id));
    }

    pub(crate) fn summary_answered(&self, id: &str) {
        self.with(|g, a| g.summary_answered(a, id));
    }

    pub(crate) fn compacted(&self) {
        self.with(|g, a| g.compacted(a));
    }

    /// Every agent's edges not yet handed out (the session publishes them).
    pub(crate) fn take(&self) -> Vec<Edge> {
        self.with(|g, _| g.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays a scenario on one graph: each row is what happens (steps separated by `;`),
    /// then the edges handed out after it (`source>target type`, separated by `;`), in
    /// order. Steps: `prompt A` (a client prompt starts for A), `A id` (A's call `id` was
    /// answered), `A summary id`, `A compacted`, `A spawned B`, `A returned B` (the child A
    /// finished for B), `A messaged B`.
    fn play(rows: &[(&'static str, &'static str)]) {
        let mut g = Graph::default();
        let words = |list: &'static str| list.split(';').map(str::trim).filter(|s| !s.is_empty());
        for (i, (steps, want)) in rows.iter().enumerate() {
            for step in words(steps) {
                match step.split(' ').collect::<Vec<_>>()[..] {
                    ["prompt", a] => g.begin_prompt(a),
                    [a, "summary", id] => g.summary_answered(a, id),
                    [a, "compacted"] => g.compacted(a),
                    [a, "spawned", b] => g.spawned(a, b),
                    [a, "returned", b] => g.returned(a, b),
                    [a, "messaged", b] => g.message(a, b),
                    [a, id] => g.committed(a, id),
                    _ => panic!("not a step: {step}"),
                }
            }
            let got: Vec<String> = g
                .take()
                .iter()
                .map(|e| format!("{}>{} {}", e.source, e.target, e.kind.as_str()))
                .collect();
            assert_eq!(got, words(want).collect::<Vec<_>>(), "row {i}: {steps}");
        }
    }

    #[test]
    fn request_ids_fit_the_pattern_and_differ() {
        let a = new_request_id();
        assert!(a.len() <= 128 && !a.is_empty());
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c)));
        assert_ne!(a, new_request_id());
    }

    #[test]
    fn continuations_stay_inside_a_prompt() {
        play(&[
            (
                "prompt main; main a; main b; main c",
                "a>b continuation; b>c continuation",
            ),
            // Each edge is handed out once.
            ("", ""),
            // A new prompt starts a new chain.
            ("prompt main; main d", ""),
            // A failed call (never committed) leaves the chain where it was.
            ("main f", "d>f continuation"),
        ]);
    }

    #[test]
    fn a_compaction_links_its_attempts_and_the_call_it_feeds() {
        play(&[
            // A failed compaction: only its attempt; the chain carries on.
            (
                "main work; main summary s1; main next",
                "work>s1 compaction_attempt; work>next continuation",
            ),
            // A split turn: two summaries, the last one feeds the next call.
            (
                "main summary h; main summary p; main compacted; prompt main; main after",
                "next>h compaction_attempt; next>p compaction_attempt; p>after compaction",
            ),
            // Nothing answered: nothing to link.
            ("main compacted; main z", "after>z continuation"),
        ]);
    }

    #[test]
    fn children_and_messages_link_across_agents() {
        play(&[
            (
                "prompt main; main m1; main spawned kid; kid k1; kid messaged main; kid k2; \
                 kid returned main; main m2",
                "m1>k1 subagent_call; k1>k2 continuation; m1>m2 continuation; \
                 k1>m2 agent_message; k2>m2 subagent_return",
            ),
            // No duplicates, no self-edges, no edge from an agent that never called.
            (
                "kid messaged main; kid messaged main; nobody spawned kid2; main m3; main m3; \
                 kid2 c1",
                "m2>m3 continuation; k2>m3 agent_message",
            ),
        ]);
    }

    #[test]
    fn the_meta_shape() {
        let mut result = json!({"stopReason": "end_turn"});
        annotate(&mut result, &[]);
        assert_eq!(result, json!({"stopReason": "end_turn"}));
        let edge = Edge {
            source: "a".into(),
            target: "b".into(),
            kind: EdgeType::Continuation,
        };
        annotate(&mut result, &[edge]);
        assert_eq!(
            result["_meta"][META_KEY],
            json!({"edges": [{"source_request_id": "a", "target_request_id": "b", "type": "continuation"}]})
        );
    }
}
