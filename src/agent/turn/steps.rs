//! The steps of a turn's model loop, which `Worker::run` lists in order, and the pure
//! decisions between them (what a failed model call leads to, what follows a reply, what
//! happens to one tool call), each tested table-style. Every step returns a `Step`: `Err` is
//! the outcome the turn ends with, so `run` reads as the steps joined by `?`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use super::guard::{Stop, Verdict};
use super::streaming::Announcer;
use super::{
    set_aside_unusable, AgentEvent, Conversation, DeltaKind, RetryPhase, TurnFailure, TurnInput,
    TurnOutcome, Worker, CALL_DROPPED, CALL_FAILED, CALL_VOIDED,
};
use crate::agent::compaction::{self, Compacted, Reason};
use crate::base::content::ToolSpec;
use crate::base::telemetry::{self, Kind, Span};
use crate::protocol::stop_reason::StopReason;
use crate::provider::{
    ChatRequest, FinishReason, Message, Provider, ProviderError, Reply, StreamEvent, ToolCall,
    ToolResultMessage, Usage,
};

/// A step of a turn: `Ok` goes on to the next step, `Err` is the turn's outcome (a completed
/// turn too: any step may be the last).
pub(super) type Step<T> = Result<T, TurnOutcome>;

/// The result of a call not run because the turn was cancelled before it.
const CANCELLED_BEFORE_RUN: &str = "Cancelled by the user before it ran.";
/// … because the reply that holds it was cut off at the output limit.
const CUT_NOT_RUN: &str = "Not executed: the reply hit the output token limit.";

/// What a turn carries from one model call to the next.
pub(super) struct Turn<'a> {
    provider: Arc<dyn Provider>,
    /// The tools and system prompt the model sees, the same for every call of the turn.
    specs: Vec<ToolSpec>,
    system: Cow<'a, str>,
    /// Where this turn's prompt sits, so a failure before any model answered can take it
    /// back out (messages from the inbox stay: nobody would send them again).
    prompt_at: Option<usize>,
    /// Model calls of this turn that answered.
    answered: usize,
    /// An overflow gets one compaction and one retry (behaviour spec §5.2).
    overflow_compacted: bool,
}

impl Turn<'_> {
    /// A compaction rewrote the history: the prompt moved with it (or was summarised).
    fn compacted(&mut self, done: &Compacted) {
        self.prompt_at = self.prompt_at.and_then(|at| done.moved(at));
    }
}

/// One streamed model call: its id (the semantic chain names it), its result, and the calls
/// the client was shown while it streamed.
pub(super) struct ModelCall {
    pub request_id: String,
    pub result: Result<Reply, ProviderError>,
    pub announcer: Announcer,
}

/// An answered reply, now in the history: its tool calls, and whether it was cut off at the
/// output limit.
pub(super) struct Kept {
    pub calls: Vec<ToolCall>,
    /// Calls whose arguments are unusable, with the result each gets instead (by call id).
    unusable: Vec<(String, String)>,
    pub cut: bool,
    /// The reply's `ContextUsage`, measured when the reply joined the history and sent once
    /// its calls have ended (`Worker::run`): trajectory builders close a step at each
    /// `usage_update`, so one reply's step holds its text, its calls and their results.
    pub usage: AgentEvent,
}

impl Kept {
    fn unusable_text(&self, id: &str) -> Option<String> {
        self.unusable
            .iter()
            .find(|(u, _)| u == id)
            .map(|(_, text)| text.clone())
    }
}

/// What a failed model call leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnModelError {
    /// The cancel caused it: the turn is cancelled, not failed.
    Cancelled,
    /// The request did not fit the window: compact, then make the call again.
    CompactAndRetry,
    /// The turn fails with the provider's error.
    Fail,
    /// The window overflowed again after the turn's one overflow compaction.
    OverflowUnrecovered,
}

/// Decides what a failed model call leads to: a cancel wins over any error; an overflow gets
/// one compaction and one retry while automatic compaction is on; anything else fails.
pub(super) fn on_model_error(
    error: &ProviderError,
    aborted: bool,
    auto_compaction: bool,
    overflow_compacted: bool,
) -> OnModelError {
    if aborted || matches!(error, ProviderError::Aborted) {
        OnModelError::Cancelled
    } else if !(error.is_context_overflow() && auto_compaction) {
        OnModelError::Fail
    } else if overflow_compacted {
        OnModelError::OverflowUnrecovered
    } else {
        OnModelError::CompactAndRetry
    }
}

/// What follows a reply the history now holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterReply {
    /// Call the model again: a steer arrived during this call.
    CallAgain,
    /// The turn is over.
    End(StopReason),
    /// The reply hit the output limit with calls in it: their arguments may be cut off, so
    /// none runs and the turn ends `max_tokens`.
    RefuseCut,
    /// Run the calls, then call the model with their results.
    RunCalls,
}

/// Decides whether the turn goes on after a reply with `calls` tool calls (`cut`: it hit the
/// output limit; `steer_waiting`: a steer came during the call and the turn is not cancelled).
pub(super) fn after_reply(calls: usize, cut: bool, steer_waiting: bool) -> AfterReply {
    match (calls, cut) {
        (0, _) if steer_waiting => AfterReply::CallAgain,
        (0, false) => AfterReply::End(StopReason::EndTurn),
        (0, true) => AfterReply::End(StopReason::MaxTokens),
        (_, true) => AfterReply::RefuseCut,
        (_, false) => AfterReply::RunCalls,
    }
}

/// What happens to one call of a reply: the guard's verdict first (it counts every call it
/// sees), then a call it lets through whose arguments are unusable is refused with `unusable`.
pub(super) fn call_plan(verdict: Verdict, unusable: Option<String>) -> Verdict {
    match (verdict, unusable) {
        (Verdict::Run, Some(text)) => Verdict::Refuse(text),
        (verdict, _) => verdict,
    }
}

/// Tokens in context after a reply: what the model saw plus what it wrote.
fn context_after(usage: &Usage) -> u64 {
    usage.input + usage.cache_read + usage.cache_write + usage.output
}

/// Shows the client what a model call streams, as it comes: text and reasoning as message
/// deltas (the hot path: one per token), tool calls as soon as they are named and their
/// arguments rate-limited (`Announcer`), retries as `autoRetry`, and each provider notice
/// once per conversation (`shown` holds the titles already shown).
pub(super) fn forward(
    event: StreamEvent,
    announcer: &mut Announcer,
    shown: &mut Vec<String>,
    emit: &dyn Fn(AgentEvent),
) {
    let (kind, delta) = match event {
        StreamEvent::Text(t) => (DeltaKind::Text, t),
        StreamEvent::Thinking(t) => (DeltaKind::Thinking, t),
        StreamEvent::ToolCallStart { id, name } => {
            if let Some(e) = announcer.started(&id, &name) {
                emit(e);
            }
            return;
        }
        StreamEvent::ToolCallDelta { id, delta } => {
            if let Some(e) = announcer.arguments(&id, &delta, Instant::now()) {
                emit(e);
            }
            return;
        }
        StreamEvent::Restarted => {
            announcer.void(CALL_VOIDED).into_iter().for_each(emit);
            return;
        }
        StreamEvent::Retrying(wait) => {
            return emit(AgentEvent::AutoRetry(RetryPhase::Waiting {
                attempt: wait.attempt,
                max_attempts: wait.max_attempts,
                delay_ms: u64::try_from(wait.delay.as_millis()).unwrap_or(u64::MAX),
                reason: wait.reason.to_owned(),
                error_message: wait.error,
            }))
        }
        StreamEvent::Recovered { attempt } => {
            return emit(AgentEvent::AutoRetry(RetryPhase::Recovered { attempt }))
        }
        StreamEvent::RetriesExhausted { attempt, error } => {
            return emit(AgentEvent::AutoRetry(RetryPhase::Exhausted {
                attempt,
                error_message: error,
            }))
        }
        StreamEvent::Notice(notice) => {
            if !shown.contains(&notice.title) {
                shown.push(notice.title.clone());
                emit(AgentEvent::Notice {
                    severity: notice.severity.to_owned(),
                    title: notice.title,
                    description: notice.description,
                });
            }
            return;
        }
    };
    emit(AgentEvent::MessageDelta {
        assistant: true,
        kind,
        delta,
    });
}

impl<'a> Worker<'a> {
    /// The cancel checkpoint (before the turn, before each model call).
    pub(super) fn checkpoint(&self) -> Step<()> {
        match self.abort.is_aborted() {
            true => Err(TurnOutcome::Cancelled),
            false => Ok(()),
        }
    }

    /// What the turn starts from: its input taken (or the whole turn answered without a
    /// model: `!cmd`, a local reply), then the model, and the tools and system prompt every
    /// call of the turn sees.
    pub(super) fn begin(&mut self, conv: &mut Conversation, input: TurnInput) -> Step<Turn<'a>> {
        let prompt_at = self.take_input(conv, input)?;
        let provider = match &self.model.provider {
            Ok(p) => p.clone(),
            Err(why) => {
                return Err(TurnOutcome::Failed(TurnFailure::new(
                    why.clone(),
                    "model_config",
                )))
            }
        };
        let (specs, system) = self.tools_and_system();
        conv.compaction.fixed_tokens =
            crate::agent::compaction::estimate::fixed_tokens(&system, &specs);
        Ok(Turn {
            provider,
            specs,
            system,
            prompt_at,
            answered: 0,
            overflow_compacted: false,
        })
    }

    /// Before each model call: the cancel checkpoint, the prompt's bounds (autonomous limits,
    /// the per-prompt cap), the window (compact once the context is over the threshold, also
    /// inside a tool loop, whose results can fill a small window in one turn), and then what
    /// waits for the model (agent messages, steers, tool notices) joins the history.
    pub(super) fn before_model_call(
        &mut self,
        conv: &mut Conversation,
        turn: &mut Turn<'_>,
    ) -> Step<()> {
        self.checkpoint()?;
        if let Some(stop) = self.guard.before_model_call(Instant::now()) {
            self.stop_notice(&stop);
            return Err(TurnOutcome::Completed(stop.reason));
        }
        if let Some(done) = self.compact_before_call(conv, &*turn.provider)? {
            turn.compacted(&done);
        }
        self.deliver_waiting(conv);
        Ok(())
    }

    /// One model call over the history, streamed to the client as it comes (`forward`).
    pub(super) fn call_model(&self, conv: &mut Conversation, turn: &Turn<'_>) -> ModelCall {
        let request_id = crate::protocol::semantic::new_request_id();
        let request = ChatRequest {
            system: &turn.system,
            messages: &conv.messages,
            tools: &turn.specs,
            thinking: self.model.thinking,
            agent: &self.ctx.name,
            max_tokens: None,
            request_id: &request_id,
            service_tier: self.model.service_tier.as_deref(),
        };
        let emit = self.emit;
        emit(AgentEvent::AssistantMessageStart);
        let shown = &mut conv.notices_shown;
        let mut announcer = Announcer::default();
        let result =
            crate::provider::traced_stream(&*turn.provider, &request, self.abort, &mut |event| {
                forward(event, &mut announcer, shown, emit)
            });
        ModelCall {
            request_id,
            result,
            announcer,
        }
    }

    /// A failed model call (`on_model_error` decides): `Ok` after an overflow's compaction,
    /// when the call is made again; else the turn ends cancelled or failed, and the calls
    /// shown while the call streamed end failed.
    pub(super) fn recover(
        &self,
        conv: &mut Conversation,
        turn: &mut Turn<'_>,
        announcer: &Announcer,
        error: ProviderError,
    ) -> Step<()> {
        let plan = on_model_error(
            &error,
            self.abort.is_aborted(),
            self.auto_compaction(),
            turn.overflow_compacted,
        );
        if plan == OnModelError::Cancelled {
            return Err(TurnOutcome::Cancelled);
        }
        self.close_announced(announcer, &[], CALL_FAILED);
        let own = || TurnFailure::new(error.to_string(), error.kind());
        let failure = match plan {
            OnModelError::CompactAndRetry => {
                match self.compact(conv, &*turn.provider, Reason::Overflow, None) {
                    Ok(Some(done)) => {
                        turn.overflow_compacted = true;
                        turn.compacted(&done);
                        return Ok(());
                    }
                    Ok(None) => own(),
                    Err(TurnOutcome::Failed(f)) => f,
                    Err(other) => return Err(other),
                }
            }
            OnModelError::OverflowUnrecovered => TurnFailure::new(
                compaction::OVERFLOW_RECOVERY_FAILED,
                "model_context_overflow",
            ),
            OnModelError::Fail | OnModelError::Cancelled => own(),
        };
        Err(self.fail(conv, turn, failure))
    }

    /// The turn fails. When nothing of its prompt reached a model that answered, the prompt is
    /// taken back out, so a retry by the client does not send it twice.
    fn fail(&self, conv: &mut Conversation, turn: &Turn<'_>, failure: TurnFailure) -> TurnOutcome {
        if let Some(at) = turn.prompt_at.filter(|_| turn.answered == 0) {
            conv.messages.remove(at);
            if let Some(r) = conv.recorder.as_mut() {
                r.removed(at);
            }
        }
        TurnOutcome::Failed(failure)
    }

    /// A model call answered: counted into the session's usage and cost, the prompt's bounds
    /// and the semantic chain (`request_id` is now its last answered call).
    pub(super) fn count_answer(
        &mut self,
        conv: &mut Conversation,
        turn: &mut Turn<'_>,
        request_id: &str,
        usage: Usage,
    ) {
        turn.answered += 1;
        self.ctx.trace.committed(request_id);
        self.guard.model_call_done(usage, Instant::now());
        conv.usage.add(usage);
        conv.model_calls += 1;
        let cost = turn.provider.prices().map_or(0.0, |p| p.cost(&usage));
        conv.compaction.cost += cost;
        // Our ancestors count this call too, and we count what our descendants used.
        self.ctx.usage.report(&self.ctx.name, usage, cost);
        super::attribution::fold(&self.ctx.usage, conv, self.guard.unattended());
    }

    /// The reply joins the history and the file. Its calls are shown (`pending`, with their
    /// arguments) before any of them runs, and calls shown while it streamed that it does not
    /// hold end failed. Its usage is measured now and sent by the caller after its calls end.
    pub(super) fn keep_reply(
        &self,
        conv: &mut Conversation,
        turn: &Turn<'_>,
        reply: Reply,
        announcer: &Announcer,
    ) -> Kept {
        let cut = reply.finish == FinishReason::Length;
        let mut message = reply.message;
        let unusable = set_aside_unusable(&mut message.tool_calls, cut);
        let calls = message.tool_calls.clone();
        conv.messages.push(Message::Assistant(message));
        conv.compaction
            .record_reply(context_after(&reply.usage), &conv.messages);
        if !cut {
            for call in &calls {
                self.announce(call);
            }
        }
        let usage = self.measure_usage(conv, &*turn.provider);
        conv.persist();
        self.close_announced(announcer, &calls, CALL_DROPPED);
        Kept {
            calls,
            unusable,
            cut,
            usage,
        }
    }

    /// Whether a steer waits for a model call after a reply without calls (then the turn goes
    /// on with it, unless cancelled).
    pub(super) fn steer_waiting(&self, kept: &Kept) -> bool {
        kept.calls.is_empty() && self.ctx.inbox.has_steers() && !self.abort.is_aborted()
    }

    /// A reply cut off at the output limit: no call of it runs, each is answered with why.
    pub(super) fn refuse_cut(
        &self,
        conv: &mut Conversation,
        announcer: &mut Announcer,
        kept: &Kept,
    ) -> TurnOutcome {
        for call in &kept.calls {
            let text = kept
                .unusable_text(&call.id)
                .unwrap_or_else(|| CUT_NOT_RUN.to_owned());
            self.refuse_call(conv, announcer, call, text);
        }
        TurnOutcome::Completed(StopReason::MaxTokens)
    }

    /// `run_calls` with the prompt-cache keep-alive running beside it (settings
    /// `cacheKeepAlive`, for a provider whose server caches prompts). What the keep-alive
    /// requests used counts into the session's usage and cost like a reply's, not as a model
    /// call (the autonomous and per-prompt call limits do not see it).
    pub(super) fn run_calls_kept_alive(
        &mut self,
        conv: &mut Conversation,
        turn: &Turn<'_>,
        announcer: &mut Announcer,
        kept: &Kept,
    ) -> Step<()> {
        let keep_alive = match self.ctx.agent.cache_keep_alive {
            Some(interval) if turn.provider.caches_prompts() => {
                // The last call's request: the history before the reply just kept.
                let asked = conv.messages.len().saturating_sub(1);
                let shape = super::keep_alive::Shape {
                    system: turn.system.to_string(),
                    messages: conv.messages[..asked].to_vec(),
                    tools: turn.specs.clone(),
                    thinking: self.model.thinking,
                    agent: self.ctx.name.clone(),
                    service_tier: self.model.service_tier.clone(),
                };
                let provider = turn.provider.clone();
                super::keep_alive::KeepAlive::start(provider, shape, interval, self.abort.clone())
            }
            _ => None,
        };
        let step = self.run_calls(conv, announcer, kept);
        if let Some((sent, usage)) = keep_alive.map(|k| k.finish()).filter(|(n, _)| *n > 0) {
            log::info!("cache keep-alive: {sent} request(s) while tools ran");
            conv.usage.add(usage);
            let cost = turn.provider.prices().map_or(0.0, |p| p.cost(&usage));
            conv.compaction.cost += cost;
            self.ctx.usage.report(&self.ctx.name, usage, cost);
        }
        step
    }

    /// The reply's calls, one at a time and in order (`call_plan` decides each), every result
    /// into the history and the file as it comes. `Ok`: all are answered and the model sees
    /// the results next; `Err`: a cancel, or a bound that ended the prompt.
    pub(super) fn run_calls(
        &mut self,
        conv: &mut Conversation,
        announcer: &mut Announcer,
        kept: &Kept,
    ) -> Step<()> {
        let calls = &kept.calls;
        for (i, call) in calls.iter().enumerate() {
            // Checkpoint: before each tool.
            self.cancel_rest(conv, &calls[i..])?;
            match call_plan(
                self.guard.before_tool_call(call),
                kept.unusable_text(&call.id),
            ) {
                Verdict::Run => self.run_and_keep(conv, call),
                Verdict::Refuse(text) => {
                    self.refuse_call(conv, announcer, call, text);
                    continue;
                }
                Verdict::Stop(stop) => {
                    return Err(self.stop_calls(conv, announcer, &calls[i..], &stop))
                }
            }
            self.cancel_rest(conv, &calls[i + 1..])?;
        }
        Ok(())
    }

    /// A cancel checkpoint inside the tool loop: the calls not yet run (`rest`) are answered
    /// without running, so the conversation stays valid for the next model call.
    fn cancel_rest(&self, conv: &mut Conversation, rest: &[ToolCall]) -> Step<()> {
        if !self.abort.is_aborted() {
            return Ok(());
        }
        self.not_run(conv, rest, CANCELLED_BEFORE_RUN);
        Err(TurnOutcome::Cancelled)
    }

    /// A bound ends the prompt at a tool call: it and the calls after it are refused with the
    /// bound's description, and the client is told why.
    fn stop_calls(
        &self,
        conv: &mut Conversation,
        announcer: &mut Announcer,
        rest: &[ToolCall],
        stop: &Stop,
    ) -> TurnOutcome {
        let text = format!("Not run: {}", stop.description);
        for call in rest {
            self.refuse_call(conv, announcer, call, text.clone());
        }
        self.stop_notice(stop);
        TurnOutcome::Completed(stop.reason)
    }

    /// Runs one call and keeps its result, with how it was shown (the replay shows it so).
    fn run_and_keep(&self, conv: &mut Conversation, call: &ToolCall) {
        let mut span = tool_span(call);
        let (output, shown) = {
            // A subagent the call admits and an HTTP MCP call it makes are the span's children.
            let _current = telemetry::enter(span.context());
            self.run_tool(call)
        };
        if output.is_error {
            span.set("error.type", "tool_error");
            span.fail(crate::base::telemetry::first_line(&output.text));
        }
        drop(span);
        if let Some(r) = conv.recorder.as_mut() {
            let details = crate::persist::entry::tool_details(
                &shown.locations,
                output.diff.as_ref(),
                output.ipython.as_ref(),
                shown.display.as_ref(),
            );
            r.note_tool_details(&call.id, details);
        }
        conv.messages.push(Message::ToolResult(ToolResultMessage {
            call_id: call.id.clone(),
            name: call.name.clone(),
            text: output.text,
            is_error: output.is_error,
            images: output.images,
        }));
        conv.persist();
    }
}

/// A tool call's span (`execute_tool {name}`, GenAI semantic conventions).
fn tool_span(call: &ToolCall) -> Span {
    if !telemetry::recording() {
        return Span::child("execute_tool", Kind::Internal);
    }
    let mut span = Span::child(&format!("execute_tool {}", call.name), Kind::Internal);
    span.set("gen_ai.operation.name", "execute_tool");
    span.set("gen_ai.tool.name", call.name.as_str());
    span.set("gen_ai.tool.call.id", call.id.as_str());
    span
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::time::Duration;

    use super::*;
    use crate::provider::{Notice, RetryWait};

    #[test]
    fn a_failed_model_call_is_cancelled_retried_after_compaction_once_or_failed() {
        let overflow = ProviderError::Status {
            status: 400,
            message: "prompt is too long: 250000 tokens > 200000 maximum".to_owned(),
        };
        assert!(overflow.is_context_overflow());
        let other = ProviderError::Status {
            status: 500,
            message: "internal".to_owned(),
        };
        use OnModelError::*;
        // (error, aborted, auto compaction, compacted already) → plan
        let cases = [
            (&ProviderError::Aborted, false, true, false, Cancelled),
            (&other, true, true, false, Cancelled),
            (&overflow, true, true, false, Cancelled),
            (&other, false, true, false, Fail),
            (&other, false, true, true, Fail),
            (&overflow, false, false, false, Fail),
            (&overflow, false, true, false, CompactAndRetry),
            (&overflow, false, true, true, OverflowUnrecovered),
            (
                &ProviderError::Config("no key".into()),
                false,
                true,
                false,
                Fail,
            ),
        ];
        for (error, aborted, auto, compacted, want) in cases {
            assert_eq!(
                on_model_error(error, aborted, auto, compacted),
                want,
                "{error:?} aborted={aborted} auto={auto} compacted={compacted}"
            );
        }
    }

    #[test]
    fn after_a_reply_the_turn_ends_runs_its_calls_refuses_them_or_takes_a_steer() {
        use AfterReply::*;
        // (calls, cut, steer waiting) → next
        let cases = [
            (0, false, false, End(StopReason::EndTurn)),
            (0, true, false, End(StopReason::MaxTokens)),
            (0, false, true, CallAgain),
            (0, true, true, CallAgain),
            (2, false, false, RunCalls),
            (2, false, true, RunCalls),
            (1, true, false, RefuseCut),
            (1, true, true, RefuseCut),
        ];
        for (calls, cut, steer, want) in cases {
            assert_eq!(
                after_reply(calls, cut, steer),
                want,
                "calls={calls} cut={cut} steer={steer}"
            );
        }
    }

    #[test]
    fn a_call_the_guard_lets_through_is_still_refused_when_its_arguments_are_unusable() {
        let stop = Stop {
            reason: StopReason::MaxTurnRequests,
            title: "t".into(),
            description: "d".into(),
        };
        let unusable = || Some("unusable".to_owned());
        let cases = [
            (Verdict::Run, None, Verdict::Run),
            (Verdict::Run, unusable(), Verdict::Refuse("unusable".into())),
            (
                Verdict::Refuse("repeat".into()),
                None,
                Verdict::Refuse("repeat".into()),
            ),
            (
                Verdict::Refuse("repeat".into()),
                unusable(),
                Verdict::Refuse("repeat".into()),
            ),
            (
                Verdict::Stop(stop.clone()),
                unusable(),
                Verdict::Stop(stop.clone()),
            ),
        ];
        for (verdict, unusable, want) in cases {
            assert_eq!(
                call_plan(verdict.clone(), unusable.clone()),
                want,
                "{verdict:?} {unusable:?}"
            );
        }
    }

    #[test]
    fn a_stream_is_shown_as_deltas_pending_calls_retries_and_each_notice_once() {
        let notice = || {
            StreamEvent::Notice(Notice {
                severity: "warning",
                title: "Unknown model".into(),
                description: Some("defaults".into()),
            })
        };
        let failed = |id: &str, text: &str| AgentEvent::ToolEnd {
            id: id.into(),
            name: String::new(),
            result: super::super::ToolResultView {
                text: Some(text.into()),
                is_error: true,
                ..Default::default()
            },
        };
        let delta = |kind, text: &str| AgentEvent::MessageDelta {
            assistant: true,
            kind,
            delta: text.into(),
        };
        // Each stream event, and what the client is shown for it (in order).
        let cases: Vec<(StreamEvent, Vec<AgentEvent>)> = vec![
            (
                StreamEvent::Text("hi".into()),
                vec![delta(DeltaKind::Text, "hi")],
            ),
            (
                StreamEvent::Thinking("hm".into()),
                vec![delta(DeltaKind::Thinking, "hm")],
            ),
            (
                StreamEvent::Retrying(RetryWait {
                    attempt: 1,
                    max_attempts: 3,
                    delay: Duration::from_millis(1500),
                    reason: "rate_limited",
                    error: "429".into(),
                }),
                vec![AgentEvent::AutoRetry(RetryPhase::Waiting {
                    attempt: 1,
                    max_attempts: 3,
                    delay_ms: 1500,
                    reason: "rate_limited".into(),
                    error_message: "429".into(),
                })],
            ),
            (
                StreamEvent::Recovered { attempt: 1 },
                vec![AgentEvent::AutoRetry(RetryPhase::Recovered { attempt: 1 })],
            ),
            (
                notice(),
                vec![AgentEvent::Notice {
                    severity: "warning".into(),
                    title: "Unknown model".into(),
                    description: Some("defaults".into()),
                }],
            ),
            (notice(), vec![]),
            (
                StreamEvent::ToolCallStart {
                    id: "c1".into(),
                    name: "read".into(),
                },
                vec![AgentEvent::ToolPending {
                    id: "c1".into(),
                    name: "read".into(),
                    args: None,
                }],
            ),
            (StreamEvent::Restarted, vec![failed("c1", CALL_VOIDED)]),
            (
                StreamEvent::RetriesExhausted {
                    attempt: 3,
                    error: "503".into(),
                },
                vec![AgentEvent::AutoRetry(RetryPhase::Exhausted {
                    attempt: 3,
                    error_message: "503".into(),
                })],
            ),
        ];
        let mut announcer = Announcer::default();
        let mut shown = Vec::new();
        for (event, want) in cases {
            let seen = RefCell::new(Vec::new());
            let label = format!("{event:?}");
            forward(event, &mut announcer, &mut shown, &|e| {
                seen.borrow_mut().push(e)
            });
            assert_eq!(seen.into_inner(), want, "{label}");
        }
        assert_eq!(shown, vec!["Unknown model".to_owned()]);
    }
}
