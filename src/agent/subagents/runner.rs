//! A child's life: admission (`rlm.run`), its run on a `subagent-<id>` thread (its task, then
//! whatever its inbox collects), and its end (status, completion notice, revival).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::json::json;
use serde_json::Value;

use super::{preview, subagent_root, Family, Node, State};
use crate::agent::family::{self, ChildStatus};
use crate::agent::turn::guard::Guard;
use crate::agent::turn::{run_turn, AgentCtx, Conversation, TurnInput, TurnModel, TurnOutcome};
use crate::base::abort::AbortFlag;
use crate::base::content::UserPrompt;
use crate::provider::{Message, Thinking};

impl Family {
    /// The model of a new child and its label: `rlm(..., model=)` may name the session's
    /// model or settings `subagentDefaultModel`; with none, the latter if set (`Some`), else
    /// the session's (`None`: whatever the session runs when the child starts).
    fn child_model(
        &self,
        payload: &Value,
    ) -> Result<(Option<Arc<dyn crate::provider::Provider>>, String), String> {
        let session = self.model_label();
        let default = self.agent.side_models.subagent.clone();
        let asked = payload
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty());
        match (asked, default) {
            (Some(m), Some(d)) if m == d.label() => Ok((Some(d), m.to_owned())),
            (Some(m), _) if session.as_deref() == Some(m) => Ok((None, m.to_owned())),
            (None, Some(d)) => {
                let label = d.label();
                Ok((Some(d), label))
            }
            (None, None) => Ok((None, session.ok_or("no model is configured for subagents")?)),
            (Some(m), _) => Err(format!(
                "Model \"{m}\" is not available in this session; rlm.find_models() lists what is (\"{}\")",
                self.child_models().join("\", \"")
            )),
        }
    }

    /// The labels `rlm(..., model=)` accepts: the session's model, then settings
    /// `subagentDefaultModel`.
    pub(super) fn child_models(&self) -> Vec<String> {
        let mut labels: Vec<String> = self.model_label().into_iter().collect();
        if let Some(d) = &self.agent.side_models.subagent {
            if !labels.contains(&d.label()) {
                labels.push(d.label());
            }
        }
        labels
    }

    pub(super) fn spawn_child(&self, parent: &str, payload: &Value) -> Result<Value, String> {
        if self.closed.load(Ordering::SeqCst) {
            return Err("the session is closing".to_owned());
        }
        let prompt = payload
            .get("prompt")
            .and_then(Value::as_str)
            .ok_or("rlm.run prompt must be a string")?;
        let (model, label) = self.child_model(payload)?;
        let mut state = self.lock();
        let depth = self.depth_of(&state, parent);
        if let Some(refusal) = family::depth_refusal(depth, self.max_depth()) {
            return Err(refusal);
        }
        let id = format!("sub-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let siblings: Vec<&str> = state
            .nodes
            .values()
            .filter(|n| n.parent == parent)
            .map(|n| n.name.as_str())
            .collect();
        let name = match payload.get("name").and_then(Value::as_str) {
            Some(name) => family::validate_child_name(name, &siblings)?,
            None => family::default_child_name(prompt, &id),
        };
        // With sessions on disk the child's directory is under the root session's artifacts
        // and holds its conversation, kept after the session ends (a crashed run's subagent
        // work can be read there); without, a temp dir that goes with the family.
        let store = self.agent.store.as_ref();
        let artifacts = store.and_then(|s| s.artifacts_of(&self.main_id));
        let session_dir = match &artifacts {
            Some(dir) => dir.join(&id),
            None => subagent_root().join(&id),
        };
        let created = match artifacts {
            Some(_) => crate::persist::create_dir_private(&session_dir),
            None => std::fs::create_dir_all(&session_dir),
        };
        if let Err(e) = created {
            log::warn!("cannot create subagent dir {}: {e}", session_dir.display());
        }
        let conversation = Conversation {
            recorder: store.map(|s| s.child_recorder(&self.main_id, &session_dir, &self.agent.cwd)),
            ..Conversation::default()
        };
        // "Else the parent's" (§4.3): the session's level for a top-level child, its
        // parent's own for a nested one.
        let inherited = state
            .nodes
            .get(parent)
            .map_or_else(|| self.thinking(), |n| n.thinking);
        let node = Node {
            id: id.clone(),
            name: name.clone(),
            parent: parent.to_owned(),
            depth: depth + 1,
            status: ChildStatus::Queued,
            inbox: Arc::default(),
            abort: AbortFlag::new(),
            thread: None,
            replied: false,
            error: None,
            token_count: 0,
            session_dir: session_dir.clone(),
            kept: store.is_some(),
            conversation: Arc::new(std::sync::Mutex::new(conversation)),
            ctx: None,
            thinking: payload
                .get("thinking")
                .and_then(Value::as_str)
                .and_then(Thinking::parse)
                .unwrap_or(inherited),
            model,
            pool: Arc::default(),
        };
        self.notify_child(&node);
        self.edges().spawned(parent, &id);
        state.order.push(id.clone());
        state.nodes.insert(id.clone(), node);
        let task = format!("[task from parent]\n\n{prompt}");
        self.start(
            &mut state,
            &id,
            TurnInput::Prompt(UserPrompt {
                text: task,
                images: Vec::new(),
                // Admitted on a host request's thread, which runs under the cell's span.
                trace_parent: crate::base::telemetry::current(),
                // The task comes from the parent model, not a user: never a shell command.
                typed: false,
                custom: None,
            }),
        )?;
        Ok(json!({
            "rlm_child_id": id,
            "name": name,
            "session_dir": session_dir.display().to_string(),
            "model": label,
        }))
    }

    /// Runs a child's turn(s) on its thread: its task, then whatever its inbox collects while
    /// it works. It reports `running` now and its terminal status at the end.
    pub(super) fn start(
        &self,
        state: &mut State,
        id: &str,
        input: TurnInput,
    ) -> Result<(), String> {
        let parent_name = {
            let parent = state
                .nodes
                .get(id)
                .map(|n| n.parent.clone())
                .unwrap_or_default();
            self.name_of(state, &parent)
        };
        let links = self.links_of(state, id);
        let node = state.nodes.get_mut(id).ok_or("unknown subagent")?;
        if let Some(old) = node.thread.take() {
            // A revived child: its previous run has ended (it reported a terminal status).
            let _ = old.join();
        }
        let ctx = match &node.ctx {
            Some(ctx) => ctx.clone(),
            None => {
                let ctx = self.child_ctx(id, node, &parent_name, links);
                node.ctx = Some(ctx.clone());
                ctx
            }
        };
        node.status = ChildStatus::Running;
        node.error = None;
        self.notify_child(node);
        let abort = node.abort.clone();
        let conversation = node.conversation.clone();
        // The session's model now (a switch reaches a child from its next run on).
        let model = TurnModel {
            provider: node.model.clone().map_or_else(|| self.provider(), Ok),
            thinking: node.thinking,
            // A child asks for settings' tier (`/fast` switches the session's own calls).
            service_tier: self.agent.service_tier.clone(),
        };
        let family = self.me.clone();
        let child_id = id.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("subagent-{id}"))
            .spawn(move || {
                run_child(
                    &ctx,
                    &model,
                    &conversation,
                    &abort,
                    &family,
                    &child_id,
                    input,
                )
            })
            .map_err(|e| format!("cannot start the subagent thread: {e}"));
        match thread {
            Ok(thread) => {
                node.thread = Some(thread);
                Ok(())
            }
            Err(e) => {
                node.status = ChildStatus::Error;
                node.error = Some(e.clone());
                self.notify_child(node);
                Err(e)
            }
        }
    }

    /// A child's context, built at its first run and kept: its tools and kernel host, its
    /// system prompt (the session's context files, read when it opened), its usage links.
    fn child_ctx(
        &self,
        id: &str,
        node: &Node,
        parent_name: &str,
        links: crate::agent::turn::attribution::Links,
    ) -> Arc<AgentCtx> {
        let compaction = Arc::<crate::agent::compaction::Control>::default();
        let mut host = self.kernel_host(id, node.depth, &compaction);
        host.session_dir = Some(node.session_dir.clone());
        let tools = self.agent.tools.build(&self.agent.kernel_env, Some(host));
        let names = tools.names();
        let log = node
            .conversation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recorder
            .as_ref()
            .map(|r| r.path().to_path_buf());
        let system_prompt = self
            .agent
            .system_prompt_for(&crate::config::prompt::AgentFacts {
                cwd: &self.agent.cwd,
                tool_names: &names,
                kernel: names.iter().any(|n| n == crate::tools::ipython::NAME),
                depth: node.depth,
                max_depth: self.max_depth(),
                log: log.as_deref(),
                child: Some((&node.name, parent_name)),
                harness: None,
                context: self.context(),
            });
        Arc::new(AgentCtx {
            agent: self.agent.clone(),
            tools,
            system_prompt: crate::config::prompt::LivePrompt::fixed(system_prompt),
            name: node.name.clone(),
            inbox: node.inbox.clone(),
            compaction,
            mcp: self.mcp(),
            trace: self.tracer(id),
            session_span: self.span.context(),
            usage: links,
            settled: None,
        })
    }

    /// A child's run ended: record its status, tell the main loop, and tell its parent when it
    /// did not reply itself (§4.3 completion notices). Returns true when the child must run
    /// again instead, because messages reached its inbox after its last model call.
    fn finish_child(&self, id: &str, outcome: TurnOutcome, last_text: String, tokens: u64) -> bool {
        let mut state = self.lock();
        let Some(node) = state.nodes.get_mut(id) else {
            return false;
        };
        let aborted = node.abort.is_aborted();
        let (status, detail) = match outcome {
            TurnOutcome::Cancelled => (ChildStatus::Cancelled, "cancelled".to_owned()),
            _ if aborted => (ChildStatus::Cancelled, "cancelled".to_owned()),
            TurnOutcome::Completed(_) if !node.inbox.is_empty() => return true,
            TurnOutcome::Completed(_) => {
                self.edges().returned(id, &node.parent);
                (ChildStatus::Done, preview(&last_text))
            }
            TurnOutcome::Failed(e) => (ChildStatus::Error, e.text),
            TurnOutcome::Panicked(e) => (ChildStatus::Error, e),
        };
        node.status = status;
        node.token_count = tokens;
        if status == ChildStatus::Error {
            node.error = Some(detail.clone());
        }
        let notice = (!node.replied && status != ChildStatus::Cancelled).then(|| {
            (
                node.parent.clone(),
                family::completion_notice(&node.name, id, status, &detail),
            )
        });
        node.replied = false;
        self.notify_child(node);
        if let Some((parent, text)) = notice {
            self.push_to(&mut state, &parent, text);
        }
        false
    }
}

/// The `subagent-<id>` thread: runs the child's turns, one per batch of its inbox, writing its
/// own session file, until the family says it has nothing more (or is gone).
fn run_child(
    ctx: &Arc<AgentCtx>,
    model: &TurnModel,
    conversation: &Arc<std::sync::Mutex<Conversation>>,
    abort: &AbortFlag,
    family: &std::sync::Weak<Family>,
    child_id: &str,
    input: TurnInput,
) {
    let mut input = input;
    loop {
        // Each run under its own span: the first under the cell that admitted the child, a
        // later one (its inbox) under the session's. It ends before the family hears the run
        // ended, so it is queued before the session can finish.
        let mut span = crate::agent::turn::agent_span(ctx, &input);
        let current = crate::base::telemetry::enter(span.context());
        let (outcome, last_text, tokens) = {
            let mut conv = conversation.lock().unwrap_or_else(|e| e.into_inner());
            // The child's own session file, written by this thread as the main agent's is by
            // its turn worker.
            if let (Some(r), Ok(p)) = (conv.recorder.as_mut(), &model.provider) {
                r.note_model(&p.label(), model.thinking.as_str());
            }
            let outcome = run_turn(
                ctx,
                model,
                &mut conv,
                input,
                abort,
                &|_| {},
                &mut Guard::default(),
            );
            // Descendants' calls that ended after this run's last model call.
            crate::agent::turn::attribution::fold(&ctx.usage, &mut conv, None);
            conv.persist();
            let last_text = conv
                .messages
                .iter()
                .rev()
                .find_map(|m| match m {
                    Message::Assistant(a) if !a.text.is_empty() => Some(a.text.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            (outcome, last_text, conv.usage.input + conv.usage.output)
        };
        crate::agent::turn::end_agent_span(&mut span, &outcome);
        drop(current);
        drop(span);
        let Some(family) = family.upgrade() else {
            break;
        };
        // Messages that arrived during the last model call get a turn of their own; the
        // check happens under the family lock, so none is stranded.
        if !family.finish_child(child_id, outcome, last_text, tokens) {
            break;
        }
        input = TurnInput::Inbox;
    }
}
