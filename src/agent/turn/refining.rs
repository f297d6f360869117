//! The turn's side of refine (behaviour spec §5.4): `/refine [--global] [instructions]`,
//! `/refine rollback <id>`, and a `refine.run()` from the kernel at the turn's end. The planner
//! call uses the session's model; the kernel applies the plan to its harness store (it owns
//! the store's files and their format); the client sees `RefineComplete` or `RefineFailed`.
//! A refinement that fails is reported, and the turn still ends normally.

use serde_json::Value;

use super::{AgentEvent, Conversation, RefineEdit, TurnOutcome, Worker};
use crate::agent::compaction::serialize::serialize;
use crate::agent::refine::{self, Command};
use crate::protocol::stop_reason::StopReason;
use crate::provider::{ChatRequest, Message, ProviderError};

/// The planner's output budget (`min(model.maxTokens, 32000)`; the provider applies its own).
const PLANNER_MAX_TOKENS: u64 = 32_000;

enum Stop {
    Aborted,
    Failed(String),
}

impl Worker<'_> {
    /// Runs `command` and reports the outcome; `trigger` is recorded with the refinement.
    pub(super) fn refine(
        &self,
        conv: &Conversation,
        command: Command,
        trigger: &str,
    ) -> TurnOutcome {
        let result = match command {
            Command::Run {
                global,
                instructions,
            } => self.plan_and_apply(conv, global, instructions.as_deref(), trigger),
            Command::Rollback { id } => self.roll_back(&id),
        };
        match result {
            Ok(result) => {
                let (summary, edits) = refine::result_edits(&result);
                log::info!(
                    "refinement {} applied ({} edits)",
                    result.get("id").and_then(Value::as_str).unwrap_or("?"),
                    edits.iter().filter(|e| e.applied).count()
                );
                self.ctx.compaction.record_refinement(result);
                self.emit(AgentEvent::RefineComplete {
                    summary,
                    edits: edits
                        .into_iter()
                        .map(|e| RefineEdit {
                            action: e.action,
                            kind: e.kind,
                            id: e.id,
                            applied: e.applied,
                        })
                        .collect(),
                });
                TurnOutcome::Completed(StopReason::EndTurn)
            }
            Err(Stop::Aborted) => TurnOutcome::Cancelled,
            Err(Stop::Failed(error)) => {
                self.refine_failed(error);
                TurnOutcome::Completed(StopReason::EndTurn)
            }
        }
    }

    pub(super) fn refine_failed(&self, error: String) {
        log::warn!("refine failed: {error}");
        self.emit(AgentEvent::RefineFailed { error });
    }

    fn plan_and_apply(
        &self,
        conv: &Conversation,
        global: bool,
        instructions: Option<&str>,
        trigger: &str,
    ) -> Result<Value, Stop> {
        let provider = match &self.model.provider {
            Ok(p) => p.clone(),
            Err(why) => return Err(Stop::Failed(why.clone())),
        };
        let overview = self.kernel_json(&refine::overview_code(global))?;
        let text = refine::planner_text(
            overview.as_str().unwrap_or(""),
            &serialize(&conv.messages),
            instructions,
        );
        let messages = [Message::User {
            text,
            images: Vec::new(),
        }];
        let request_id = crate::protocol::semantic::new_request_id();
        let request = ChatRequest {
            system: refine::PLANNER_SYSTEM,
            messages: &messages,
            tools: &[],
            thinking: self.model.thinking,
            agent: &self.ctx.name,
            max_tokens: Some(PLANNER_MAX_TOKENS),
            request_id: &request_id,
        };
        let reply = match provider.stream(&request, self.abort, &mut |_| {}) {
            Ok(reply) => reply,
            Err(_) if self.abort.is_aborted() => return Err(Stop::Aborted),
            Err(ProviderError::Aborted) => return Err(Stop::Aborted),
            Err(e) => return Err(Stop::Failed(format!("the planner request failed: {e}"))),
        };
        let plan = refine::parse_plan(&reply.message.text).map_err(Stop::Failed)?;
        self.kernel_json(&refine::apply_code(&plan, global, trigger))
    }

    fn roll_back(&self, id: &str) -> Result<Value, Stop> {
        let result = self
            .ctx
            .compaction
            .refinement(id)
            .ok_or_else(|| Stop::Failed(format!("No refinement {id} in this session")))?;
        self.kernel_json(&refine::rollback_code(&result))
    }

    /// Runs host code in the agent's kernel and reads the JSON it printed last.
    fn kernel_json(&self, code: &str) -> Result<Value, Stop> {
        let out = match self
            .ctx
            .tools
            .kernel_eval(code, &self.agent.cwd, self.abort)
        {
            None => return Err(Stop::Failed(
                "refine needs the Python kernel (the ipython tool), which this agent does not have"
                    .to_owned(),
            )),
            Some(_) if self.abort.is_aborted() => return Err(Stop::Aborted),
            Some(Err(e)) => return Err(Stop::Failed(format!("the harness update failed: {e}"))),
            Some(Ok(out)) => out,
        };
        out.lines()
            .rev()
            .find_map(|line| serde_json::from_str(line.trim()).ok())
            .ok_or_else(|| Stop::Failed(format!("the kernel gave no result: {out}")))
    }
}
