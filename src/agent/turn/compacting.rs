//! The turn's side of compaction (behaviour spec §5.2): the context accounting after each
//! model call, the four triggers (threshold and model-requested at the turn's end, overflow
//! around a model call, manual `/compact`), and what the client sees (`CompactionEnd`, then a
//! `ContextUsage`). The summarising itself is `crate::agent::compaction`.

use super::{AgentEvent, Conversation, TurnFailure, TurnOutcome, Worker};
use crate::agent::compaction::{self, Compacted, Failure, Job, Reason};
use crate::base::telemetry::{self, Kind, Span};
use crate::protocol::stop_reason::StopReason;
use crate::provider::Provider;

impl Worker<'_> {
    /// Tokens in context now, and the model's window.
    pub(super) fn context_usage(
        &self,
        conv: &Conversation,
        provider: &dyn Provider,
    ) -> (u64, Option<u64>) {
        let used = compaction::context_tokens(&conv.compaction, &conv.messages);
        (used, provider.context_window())
    }

    /// Tells the client (and the kernel's `compact.status()`) what the context holds now.
    pub(super) fn report_usage(&self, conv: &Conversation, provider: &dyn Provider) {
        let usage = self.measure_usage(conv, provider);
        self.emit(usage);
    }

    /// What the context holds now: told to the kernel's `compact.status()` at once, and
    /// returned as the event that tells the client, for the caller to send when it is due (a
    /// reply's usage goes after its tool calls have ended, `Worker::run`).
    pub(super) fn measure_usage(&self, conv: &Conversation, provider: &dyn Provider) -> AgentEvent {
        let (used, size) = self.context_usage(conv, provider);
        self.ctx.compaction.set_usage(used, size);
        AgentEvent::ContextUsage {
            used,
            size,
            cost: provider.prices().map(|_| conv.compaction.cost),
            children: (!conv.children.is_empty()).then_some(conv.children),
        }
    }

    pub(super) fn settings(&self) -> compaction::Settings {
        self.ctx
            .compaction
            .settings(&self.agent.kernel_env.agent_dir, &self.agent.cwd)
    }

    /// The settings scaled to the model's window and the conversation's fixed part
    /// (`Settings::for_window`).
    fn window_settings(
        &self,
        conv: &Conversation,
        provider: &dyn Provider,
    ) -> compaction::Settings {
        self.settings().for_window(
            provider.context_window(),
            conv.compaction.fixed_tokens,
            conv.compaction.scale(),
        )
    }

    /// Before a model call: the threshold, checked after every model call (and the tool
    /// results that followed it), so a tool loop compacts before it fills the window.
    pub(super) fn compact_before_call(
        &self,
        conv: &mut Conversation,
        provider: &dyn Provider,
    ) -> Result<Option<Compacted>, TurnOutcome> {
        let settings = self.window_settings(conv, provider);
        let (used, window) = self.context_usage(conv, provider);
        if !settings.over_threshold(used, window) {
            return Ok(None);
        }
        self.compact(conv, provider, Reason::Threshold, None)
    }

    /// Whether the automatic triggers (threshold, overflow) are on (`compaction.enabled`).
    pub(super) fn auto_compaction(&self) -> bool {
        self.settings().enabled
    }

    /// One compaction, reported to the client. `Ok(None)`: nothing old enough to summarise;
    /// `Err`: the turn ends with that outcome (the conversation is as it was).
    pub(super) fn compact(
        &self,
        conv: &mut Conversation,
        provider: &dyn Provider,
        reason: Reason,
        instructions: Option<&str>,
    ) -> Result<Option<Compacted>, TurnOutcome> {
        let (tokens_before, _) = self.context_usage(conv, provider);
        let mut settings = self.window_settings(conv, provider);
        if reason == Reason::Overflow {
            // The server refused the request as too long, so keeping the recent part as usual
            // may not be enough (at a 4k window the system prompt and tools alone take half):
            // everything before the newest message is summarised (found on a real 4k model,
            // whose every later prompt was refused while the kept part stayed).
            settings.keep_recent_tokens = 0;
        }
        let job = Job {
            // Settings `auxiliaryModel` writes the summary when set; the window measured
            // above stays the session model's.
            provider: self
                .ctx
                .agent
                .side_models
                .auxiliary
                .as_deref()
                .unwrap_or(provider),
            agent: &self.ctx.name,
            thinking: self.model.thinking,
            settings,
            instructions,
            abort: self.abort,
            trace: Some(&self.ctx.trace),
        };
        let (tools, abort) = (&self.ctx.tools, self.abort);
        // The file holds every message the compaction may keep before it records it.
        conv.persist();
        let result = traced(reason, tokens_before, || {
            compaction::compact(
                &job,
                &mut conv.messages,
                &mut conv.compaction,
                tokens_before,
                &mut || tools.kernel_names(abort),
            )
        });
        let ended = |tokens_before, summary, error| AgentEvent::CompactionEnd {
            error,
            tokens_before,
            summary,
            reason: Some(reason.as_str().to_owned()),
        };
        // Clients that take ACP's `compaction_update` see it start (the others see nothing).
        self.emit(AgentEvent::CompactionStart);
        match result {
            Ok(done) => {
                self.ctx.trace.compacted();
                if let Some(r) = conv.recorder.as_mut() {
                    r.compacted(
                        &conv.messages,
                        done.first_kept_old,
                        done.tokens_before,
                        &done.summary,
                    );
                }
                log::info!(
                    "compacted ({}): {} tokens before, {} messages summarised",
                    reason.as_str(),
                    done.tokens_before,
                    done.first_kept_old
                );
                self.ctx.compaction.note_compacted();
                self.emit(ended(
                    Some(done.tokens_before),
                    Some(done.summary.clone()),
                    None,
                ));
                self.report_usage(conv, provider);
                Ok(Some(done))
            }
            Err(Failure::Nothing) => Ok(None),
            Err(Failure::Aborted) => {
                self.emit(ended(None, None, None));
                Err(TurnOutcome::Cancelled)
            }
            Err(Failure::Summary(message, kind)) => {
                self.emit(ended(None, None, Some(message.clone())));
                Err(TurnOutcome::Failed(TurnFailure::new(
                    format!("Summarization failed: {message}"),
                    kind,
                )))
            }
        }
    }

    /// At the turn's end: the compaction the model asked for (`compact.run()`), else the
    /// threshold (`used > window - reserve`). Only after a turn that completed.
    pub(super) fn after_turn(&self, conv: &mut Conversation, outcome: TurnOutcome) -> TurnOutcome {
        // A `refine.run()` runs after any compaction (serialized refine, §5.4). A turn that
        // did not complete leaves it for the next boundary (or the close's drain).
        let outcome = self.compact_after_turn(conv, outcome);
        if !matches!(outcome, TurnOutcome::Completed(_)) || self.abort.is_aborted() {
            return outcome;
        }
        let refine = self.ctx.compaction.take_refine();
        let outcome = match refine {
            Some(r) => {
                let command = crate::agent::refine::Command::Run {
                    global: r.global,
                    instructions: r.instructions,
                };
                match self.refine(conv, command, "requested") {
                    TurnOutcome::Completed(_) => outcome,
                    other => return other,
                }
            }
            None => outcome,
        };
        // Then an automatic one, when due (after the requested one, which resets its counts).
        self.auto_refine(conv, outcome)
    }

    fn compact_after_turn(&self, conv: &mut Conversation, outcome: TurnOutcome) -> TurnOutcome {
        let requested = self.ctx.compaction.take_scheduled();
        if !matches!(outcome, TurnOutcome::Completed(_)) || self.abort.is_aborted() {
            return outcome;
        }
        let Ok(provider) = &self.model.provider else {
            return outcome;
        };
        let (reason, instructions) = match requested {
            Some(instructions) => (Reason::Requested, instructions),
            None => {
                let (used, window) = self.context_usage(conv, &**provider);
                if !self
                    .window_settings(conv, &**provider)
                    .over_threshold(used, window)
                {
                    return outcome;
                }
                (Reason::Threshold, None)
            }
        };
        match self.compact(conv, &**provider, reason, instructions.as_deref()) {
            Ok(_) => outcome,
            Err(failed) => failed,
        }
    }

    /// `/compact [instructions]`: compacts now, with no other model call.
    pub(super) fn manual_compact(
        &self,
        conv: &mut Conversation,
        instructions: Option<&str>,
    ) -> TurnOutcome {
        let provider = match &self.model.provider {
            Ok(p) => p.clone(),
            Err(why) => return TurnOutcome::Failed(TurnFailure::new(why.clone(), "model_config")),
        };
        match self.compact(conv, &*provider, Reason::Manual, instructions) {
            Ok(Some(_)) => TurnOutcome::Completed(StopReason::EndTurn),
            Ok(None) => {
                self.emit(AgentEvent::Notice {
                    severity: "info".to_owned(),
                    title: "Nothing to compact yet".to_owned(),
                    description: Some(
                        "The whole conversation fits in the part that compaction keeps.".to_owned(),
                    ),
                });
                TurnOutcome::Completed(StopReason::EndTurn)
            }
            Err(outcome) => outcome,
        }
    }
}

/// Runs a compaction under its `compaction` span (the summary's model call is its child).
fn traced(
    reason: Reason,
    tokens_before: u64,
    run: impl FnOnce() -> Result<Compacted, Failure>,
) -> Result<Compacted, Failure> {
    let mut span = Span::child("compaction", Kind::Internal);
    span.set("prime_agent.compaction.reason", reason.as_str());
    span.set("prime_agent.compaction.tokens_before", tokens_before);
    let result = {
        let _current = telemetry::enter(span.context());
        run()
    };
    match &result {
        Ok(done) => span.set(
            "prime_agent.compaction.messages_summarised",
            done.first_kept_old as u64,
        ),
        Err(Failure::Summary(text, kind)) => {
            span.set("error.type", *kind);
            span.fail(text.as_str());
        }
        Err(Failure::Nothing) => span.set("prime_agent.compaction.skipped", "nothing old"),
        Err(Failure::Aborted) => span.set("prime_agent.compaction.skipped", "cancelled"),
    }
    result
}
