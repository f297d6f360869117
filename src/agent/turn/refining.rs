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
        conv: &mut Conversation,
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
                self.recorded(conv, result);
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
        if let Err(why) = &self.model.provider {
            return Err(Stop::Failed(why.clone()));
        }
        let overview = self.kernel_json(&refine::overview_code(global))?;
        let text = refine::planner_text(
            overview.as_str().unwrap_or(""),
            &serialize(&conv.messages),
            instructions,
        );
        let reply = self.ask(refine::PLANNER_SYSTEM, text, "planner")?;
        let plan = refine::parse_plan(&reply).map_err(Stop::Failed)?;
        self.kernel_json(&refine::apply_code(&plan, global, trigger))
    }

    /// One model call of refine (the planner, the review gate): with settings
    /// `auxiliaryModel` when set, else the session's model.
    fn ask(&self, system: &str, text: String, who: &str) -> Result<String, Stop> {
        let provider = match (&self.ctx.agent.side_models.auxiliary, &self.model.provider) {
            (Some(p), _) | (None, Ok(p)) => p.clone(),
            (None, Err(why)) => return Err(Stop::Failed(why.clone())),
        };
        let messages = [Message::User {
            text,
            images: Vec::new(),
        }];
        let request_id = crate::protocol::semantic::new_request_id();
        let request = ChatRequest {
            system,
            messages: &messages,
            tools: &[],
            thinking: self.model.thinking,
            agent: &self.ctx.name,
            max_tokens: Some(PLANNER_MAX_TOKENS),
            request_id: &request_id,
            service_tier: None,
        };
        match crate::provider::traced_stream(&*provider, &request, self.abort, &mut |_| {}) {
            Ok(reply) => Ok(reply.message.text),
            Err(_) if self.abort.is_aborted() => Err(Stop::Aborted),
            Err(ProviderError::Aborted) => Err(Stop::Aborted),
            Err(e) => Err(Stop::Failed(format!("the {who} request failed: {e}"))),
        }
    }

    /// A refinement's result is kept: for rollback and `refine.status()`, in the session file
    /// (`prime-agent.refinement`), and the counts of automatic refine start again. The system
    /// prompt is built again, so the next model call sees the new harness overview.
    fn recorded(&self, conv: &mut Conversation, result: Value) {
        if let Some(r) = conv.recorder.as_mut() {
            r.note_refinement(result.clone());
        }
        conv.persist();
        self.ctx.compaction.record_refinement(result);
        self.ctx.compaction.note_refined(conv.model_calls);
        self.ctx.system_prompt.rebuild();
    }

    /// At the turn's boundary (serialized refine, §5.4): an automatic review when one is due
    /// (`autoRefine.*`). The review gate decides; only its yes runs the planner, with the
    /// gate's instructions. A gate that fails or answers malformed JSON refines nothing.
    pub(super) fn auto_refine(&self, conv: &mut Conversation, outcome: TurnOutcome) -> TurnOutcome {
        let settings = self.settings().auto_refine;
        let Some(trigger) = self.ctx.compaction.take_auto_refine(
            &settings,
            conv.model_calls,
            std::time::Instant::now(),
        ) else {
            return outcome;
        };
        log::info!("automatic refine ({trigger:?}): asking the review gate");
        let gate = self
            .kernel_json(&refine::overview_code(false))
            .and_then(|overview| {
                let text =
                    refine::gate_text(overview.as_str().unwrap_or(""), &serialize(&conv.messages));
                let reply = self.ask(refine::GATE_SYSTEM, text, "review gate")?;
                refine::parse_gate(&reply).map_err(Stop::Failed)
            });
        let gate = match gate {
            Ok(gate) => gate,
            Err(Stop::Aborted) => return TurnOutcome::Cancelled,
            Err(Stop::Failed(why)) => {
                log::warn!("automatic refine: no refine ({why})");
                return outcome;
            }
        };
        if !gate.should_refine {
            log::info!(
                "automatic refine: the review gate said no ({})",
                gate.rationale
            );
            return outcome;
        }
        let command = Command::Run {
            global: false,
            instructions: gate.instructions,
        };
        match self.refine(conv, command, "auto") {
            TurnOutcome::Completed(_) => outcome,
            other => other,
        }
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
