//! Compaction: when the context nears the model's window, the older history is summarised by
//! the session's own model and replaced by one summary message; the recent part is kept as it
//! was (behaviour spec §5.2). Also the context accounting that decides when.
//!
//! - `estimate.rs`: chars/4 token estimates.
//! - `cut.rs`: the cut point (never between a tool call and its result; split turns).
//! - `serialize.rs`: the summarised messages as text, and the files they read and modified.
//! - `prompt.rs`: our summarisation prompts and the summary message the model sees.
//! - here: settings, the per-conversation `History`, the kernel-facing `Control`
//!   (`compact.run/status`), the accounting and `compact` itself.
//!
//! The turn (`turn/compacting.rs`) decides when to compact and reports it to the client; this
//! module knows nothing of events or ACP.

pub(crate) mod cut;
pub(crate) mod estimate;
pub(crate) mod prompt;
pub(crate) mod serialize;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::base::json::json;
use serde_json::Value;

use crate::base::abort::AbortFlag;
use crate::provider::{ChatRequest, Message, Provider, ProviderError, Thinking};
use serialize::FileOps;

/// `compaction.*` settings (behaviour spec §5.2, §6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub enabled: bool,
    pub reserve_tokens: u64,
    pub keep_recent_tokens: u64,
    /// Whether the kernel's `compact` skill works.
    pub agent_callable: bool,
    /// `autoRefine.*`, read with these (`settings::auto_refine`) for the same cwd.
    pub auto_refine: crate::config::settings::AutoRefine,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            enabled: true,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
            agent_callable: true,
            auto_refine: crate::config::settings::AutoRefine::default(),
        }
    }
}

impl Settings {
    /// Applies the `compaction` object of one settings file over these settings; keys of the
    /// wrong type are ignored.
    pub(crate) fn apply(&mut self, settings: &Value) {
        let Some(c) = settings.get("compaction") else {
            return;
        };
        if let Some(v) = c.get("enabled").and_then(Value::as_bool) {
            self.enabled = v;
        }
        if let Some(v) = c.get("reserveTokens").and_then(Value::as_u64) {
            self.reserve_tokens = v;
        }
        if let Some(v) = c.get("keepRecentTokens").and_then(Value::as_u64) {
            self.keep_recent_tokens = v;
        }
        if let Some(v) = c.get("agentCallable").and_then(Value::as_bool) {
            self.agent_callable = v;
        }
    }

    /// The `compaction` keys of the merged settings (`settings::read_merged`, the one reader
    /// of `settings.json`); a file that does not read or parse is logged and the defaults stay.
    pub(crate) fn load(agent_dir: &Path, cwd: &Path) -> Settings {
        let mut settings = Settings::default();
        match crate::config::settings::read_merged(agent_dir, cwd) {
            Ok(merged) => {
                settings.apply(&merged);
                // Start-up warned about a bad value already (`settings::from_value`).
                settings.auto_refine =
                    crate::config::settings::auto_refine(&merged, &mut Vec::new());
            }
            Err(e) => log::warn!("compaction settings: {e}"),
        }
        settings
    }

    /// These settings for a model with `window` tokens whose every request also carries
    /// `fixed` tokens (the system prompt and the tool definitions, `History::fixed_tokens`):
    /// `reserveTokens` at most a quarter of the window, and `keepRecentTokens` at most a fifth
    /// (`RESERVE_SHARE`, `KEEP_SHARE`) and at most half of what the fixed part and the reserve
    /// leave (the other half is the summary's), so that what a compaction keeps ends up under
    /// the threshold even at a small window. From about 100k tokens on the configured values
    /// hold (the spec's defaults, 16,384 and 20,000).
    ///
    /// The fixed part matters at small windows: with six tools and the kernel section it is
    /// about 2,300 tokens, more than half of a 4k window (measured on llama.cpp). Keeping a
    /// fifth of the window on top of it left every compacted request still over the threshold,
    /// so a real 4k run compacted before every call and gained almost nothing each time.
    ///
    /// `scale` is how many tokens the server counts per estimated token (`History::scale`):
    /// the kept part is measured in estimated tokens, so its budget is divided by it.
    pub(crate) fn for_window(self, window: Option<u64>, fixed: u64, scale: f64) -> Settings {
        match window {
            Some(w) if w > 0 => {
                let reserve_tokens = self.reserve_tokens.min(w / RESERVE_SHARE);
                let estimated = |real: u64| (real as f64 / scale.max(1.0)) as u64;
                let room = estimated(w.saturating_sub(reserve_tokens)).saturating_sub(fixed);
                Settings {
                    reserve_tokens,
                    keep_recent_tokens: self
                        .keep_recent_tokens
                        .min(estimated(w / KEEP_SHARE))
                        .min(room / 2),
                    ..self
                }
            }
            _ => self,
        }
    }

    /// The threshold trigger: after a turn, `used > window - reserve`.
    pub(crate) fn over_threshold(&self, used: u64, window: Option<u64>) -> bool {
        match window {
            Some(w) if w > 0 && self.enabled => used > w.saturating_sub(self.reserve_tokens),
            _ => false,
        }
    }
}

/// `reserveTokens` takes at most 1/`RESERVE_SHARE` of the window: room for the next reply and
/// for the summary (0.8 of it).
/// (The provider caps an unknown model's replies at the same share: `provider::REPLY_SHARE`.)
pub(crate) const RESERVE_SHARE: u64 = crate::provider::REPLY_SHARE;
/// `keepRecentTokens` takes at most 1/`KEEP_SHARE` of the window, so what a compaction keeps,
/// the summary and the system prompt stay well under the threshold.
pub(crate) const KEEP_SHARE: u64 = 5;

/// Why a compaction runs (the `reason` of `_meta…compaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    Manual,
    Threshold,
    Overflow,
    Requested,
}

impl Reason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Manual => "manual",
            Reason::Threshold => "threshold",
            Reason::Overflow => "overflow",
            Reason::Requested => "requested",
        }
    }
}

/// The failure text after an overflow that a compaction did not cure (behaviour spec §5.2).
pub(crate) const OVERFLOW_RECOVERY_FAILED: &str = "Context overflow recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model.";

/// The `compact.run()` refusal outside a turn (behaviour spec §5.2).
pub(crate) const NO_ACTIVE_TURN: &str =
    "no active turn; compaction can only be requested while a turn is running";

/// What a conversation remembers for accounting and for the next compaction.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Context tokens the last successful reply reported, and the message count right after
    /// it: what came later is estimated.
    pub last_usage: Option<(u64, usize)>,
    /// The estimated tokens every request carries besides the messages: the system prompt and
    /// the tool definitions (`estimate::fixed_tokens`), set when a turn starts. A server counts
    /// the tools' schemas too, so after a compaction (which forgets the reported usage) an
    /// estimate without them would be a third low at a 4k window.
    pub fixed_tokens: u64,
    /// Tokens the server counted per estimated token at the last reported usage (at least 1,
    /// at most `MAX_SCALE`; `None` before any). Chat templates wrap every message and tool
    /// call in tokens of their own, so a conversation of many small tool calls counts about a
    /// third more than chars/4 says (Qwen2.5-Coder on llama.cpp); the estimate after a
    /// compaction, and what a compaction keeps, use this scale.
    pub scale: Option<f64>,
    /// The latest compaction; while set, `messages[0]` is its summary message.
    pub summary: Option<Summary>,
    /// Session cost so far in USD, when the model's prices are known.
    pub cost: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    /// The summary with its file lists, as the model saw it inside `<summary>`.
    pub text: String,
    /// Read and modified files of everything summarised so far.
    pub files: FileOps,
}

impl History {
    /// Records a successful reply's usage (`reported` tokens in context once `len` messages
    /// exist). A reply that reports nothing leaves the last known count in place.
    pub(crate) fn record_reply(&mut self, reported: u64, messages: &[Message]) {
        if reported > 0 {
            self.last_usage = Some((reported, messages.len()));
            let estimated = self.estimate(messages);
            if self.fixed_tokens > 0 && estimated > 0 {
                self.scale = Some((reported as f64 / estimated as f64).clamp(1.0, MAX_SCALE));
            }
        }
    }

    /// `scale` or 1.
    pub(crate) fn scale(&self) -> f64 {
        self.scale.unwrap_or(1.0)
    }

    /// The fixed part and every message, by chars/4.
    fn estimate(&self, messages: &[Message]) -> u64 {
        self.fixed_tokens + messages.iter().map(estimate::message_tokens).sum::<u64>()
    }
}

/// The most `History::scale` believes: beyond it a reported count is more likely wrong (a
/// server that counts cached or earlier requests' tokens) than the estimate.
pub(crate) const MAX_SCALE: f64 = 2.0;

/// Tokens in context: the last reported usage plus estimates of the messages after it; with
/// no reported usage (none yet, or a compaction since), the fixed part (system prompt and
/// tools) and estimates of every message, at the last known scale.
pub(crate) fn context_tokens(history: &History, messages: &[Message]) -> u64 {
    match history.last_usage {
        Some((reported, at)) if at <= messages.len() => {
            reported
                + messages[at..]
                    .iter()
                    .map(estimate::message_tokens)
                    .sum::<u64>()
        }
        _ => (history.estimate(messages) as f64 * history.scale()).ceil() as u64,
    }
}

/// One agent's compaction switchboard, shared by its turns and its kernel's host bridge:
/// whether a turn runs, a compaction the model asked for, and the latest accounting (for
/// `compact.status()`).
#[derive(Debug, Default)]
pub(crate) struct Control {
    running: AtomicBool,
    /// `Some(instructions)` once `compact.run()` asked for a compaction at the turn's end.
    scheduled: Mutex<Option<Option<String>>>,
    tokens: AtomicU64,
    window: AtomicU64,
    settings: OnceLock<Settings>,
    /// Refine rides on the same switchboard: a `refine.run()` request for the turn's end,
    /// and the session's refinement results (for `refine.status()` and rollback).
    refine_scheduled: Mutex<Option<RefineRequest>>,
    refinements: Mutex<Vec<Value>>,
    /// Refine is this agent's (the main agent at depth 0 with the kernel): automatic refine
    /// may run (`autoRefine.*`).
    refine_home: AtomicBool,
    auto: Mutex<AutoRefineState>,
}

/// When automatic refine last looked (`autoRefine.*`, behaviour spec §5.4).
#[derive(Debug, Default)]
struct AutoRefineState {
    /// The conversation's model calls at the last refine (any trigger).
    calls_at_last: u64,
    /// When the last automatic review ran (the cooldown counts from it).
    last_review: Option<std::time::Instant>,
    /// A compaction happened since the last refine.
    compacted: bool,
}

impl AutoRefineState {
    /// What makes a review due after `calls` (`None`: nothing yet).
    fn trigger(
        &self,
        settings: &crate::config::settings::AutoRefine,
        calls: u64,
    ) -> Option<AutoTrigger> {
        if settings.compact && self.compacted {
            Some(AutoTrigger::Compaction)
        } else if settings.turn_interval > 0
            && calls.saturating_sub(self.calls_at_last) >= settings.turn_interval
        {
            Some(AutoTrigger::Interval)
        } else {
            None
        }
    }

    /// The cooldown since the last review is still running at `now`.
    fn cooling(
        &self,
        settings: &crate::config::settings::AutoRefine,
        now: std::time::Instant,
    ) -> bool {
        let cooldown = std::time::Duration::from_millis(settings.cooldown_ms);
        self.last_review
            .is_some_and(|t| now.saturating_duration_since(t) < cooldown)
    }
}

/// Why an automatic review is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AutoTrigger {
    Interval,
    Compaction,
}

/// `refine.run(instructions, global_)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefineRequest {
    pub instructions: Option<String>,
    pub global: bool,
}

/// The `refine.run()` refusal outside a turn (ours; it mirrors compaction's).
pub(crate) const NO_ACTIVE_TURN_REFINE: &str =
    "no active turn; refinement can only be requested while a turn is running";

impl Control {
    /// The settings, read from disk once per agent.
    pub(crate) fn settings(&self, agent_dir: &Path, cwd: &Path) -> Settings {
        *self.settings.get_or_init(|| Settings::load(agent_dir, cwd))
    }

    /// Whether the kernel may call `compact.*` (`compaction.agentCallable`); before the first
    /// turn read them, the default.
    pub(crate) fn agent_callable(&self) -> bool {
        self.settings.get().is_none_or(|s| s.agent_callable)
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::SeqCst);
    }

    pub(crate) fn set_usage(&self, tokens: u64, window: Option<u64>) {
        self.tokens.store(tokens, Ordering::SeqCst);
        self.window.store(window.unwrap_or(0), Ordering::SeqCst);
    }

    /// `compact.run(instructions)`: scheduled for the running turn's end, or refused.
    pub(crate) fn request(&self, instructions: Option<String>) -> Value {
        if !self.running.load(Ordering::SeqCst) {
            return json!({"scheduled": false, "reason": NO_ACTIVE_TURN});
        }
        *self.scheduled.lock().unwrap_or_else(|e| e.into_inner()) = Some(instructions);
        json!({"scheduled": true})
    }

    /// `compact.status()`: `{tokens, context_window, percent, scheduled}`.
    pub(crate) fn status(&self) -> Value {
        let tokens = self.tokens.load(Ordering::SeqCst);
        let window = self.window.load(Ordering::SeqCst);
        let percent = if window > 0 {
            json!((tokens as f64 * 1000.0 / window as f64).round() / 10.0)
        } else {
            Value::Null
        };
        let scheduled = self
            .scheduled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        json!({
            "tokens": tokens,
            "context_window": (window > 0).then_some(window),
            "percent": percent,
            "scheduled": scheduled,
        })
    }

    /// `refine.run()`: scheduled for the running turn's end, or refused.
    pub(crate) fn request_refine(&self, request: RefineRequest) -> Value {
        if !self.running.load(Ordering::SeqCst) {
            return json!({"scheduled": false, "reason": NO_ACTIVE_TURN_REFINE});
        }
        *self
            .refine_scheduled
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(request);
        json!({"scheduled": true})
    }

    pub(crate) fn take_refine(&self) -> Option<RefineRequest> {
        self.refine_scheduled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Keeps a refinement result (its `id` names it for rollback).
    pub(crate) fn record_refinement(&self, result: Value) {
        self.refinements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(result);
    }

    /// The result of refinement `id` of this session.
    pub(crate) fn refinement(&self, id: &str) -> Option<Value> {
        self.refinements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .rev()
            .find(|r| r.get("id").and_then(Value::as_str) == Some(id))
            .cloned()
    }

    /// `refine.status()`: `{scheduled, count, last}` (`last`: the latest result or null).
    pub(crate) fn refine_status(&self) -> Value {
        let refinements = self.refinements.lock().unwrap_or_else(|e| e.into_inner());
        let scheduled = self
            .refine_scheduled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        json!({
            "scheduled": scheduled,
            "count": refinements.len(),
            "last": refinements.last().cloned(),
        })
    }

    /// Refine is this agent's: the main agent at depth 0 with the kernel (`main_ctx`).
    pub(crate) fn set_refine_home(&self) {
        self.refine_home.store(true, Ordering::SeqCst);
    }

    pub(crate) fn refine_home(&self) -> bool {
        self.refine_home.load(Ordering::SeqCst)
    }

    /// A compaction finished (an `autoRefine.compact` trigger).
    pub(crate) fn note_compacted(&self) {
        self.auto
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .compacted = true;
    }

    /// A refinement ran at `calls` model calls (any trigger): the counts start again.
    pub(crate) fn note_refined(&self, calls: u64) {
        let mut auto = self.auto.lock().unwrap_or_else(|e| e.into_inner());
        auto.calls_at_last = calls;
        auto.compacted = false;
    }

    /// Whether an automatic review is due after `calls` model calls at `now`: a trigger
    /// (`turnInterval` calls since the last refine, or a compaction), and the cooldown since
    /// the last review over. A review held back by the cooldown stays due. Taking it starts
    /// the cooldown and the counts again.
    pub(crate) fn take_auto_refine(
        &self,
        settings: &crate::config::settings::AutoRefine,
        calls: u64,
        now: std::time::Instant,
    ) -> Option<AutoTrigger> {
        if !settings.enabled || !self.refine_home() {
            return None;
        }
        let mut auto = self.auto.lock().unwrap_or_else(|e| e.into_inner());
        let trigger = auto.trigger(settings, calls)?;
        if auto.cooling(settings, now) {
            log::info!("automatic refine ({trigger:?}) held back by autoRefine.cooldownMs");
            return None;
        }
        auto.last_review = Some(now);
        auto.calls_at_last = calls;
        auto.compacted = false;
        Some(trigger)
    }

    /// Whether the turn's end has refine work a closing session should drain (behaviour spec
    /// §5.4): a `refine.run()` request no completed turn took, or an automatic review that is
    /// due after `calls` model calls at `now`. Memory only (the settings as the turns read
    /// them; none read yet, no turn ran): the main loop asks it.
    pub(crate) fn refine_due(&self, calls: u64, now: std::time::Instant) -> bool {
        if !self.refine_home() {
            return false;
        }
        let requested = self
            .refine_scheduled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        let auto = self.settings.get().map(|s| s.auto_refine).is_some_and(|s| {
            let auto = self.auto.lock().unwrap_or_else(|e| e.into_inner());
            s.enabled && auto.trigger(&s, calls).is_some() && !auto.cooling(&s, now)
        });
        requested || auto
    }

    /// The compaction the model asked for, if any (taken: it runs once).
    pub(crate) fn take_scheduled(&self) -> Option<Option<String>> {
        self.scheduled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Answers the kernel's `compact.run` (payload `{instructions?}`), `compact.status`,
/// `refine.run` (`{instructions?, global}`) and `refine.status`.
pub(crate) fn host_request(control: &Control, kind: &str, payload: &Value) -> Value {
    match kind {
        "compact.run" => control.request(
            payload
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        "refine.run" => control.request_refine(RefineRequest {
            instructions: payload
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
            global: payload
                .get("global")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }),
        "refine.status" => control.refine_status(),
        _ => control.status(),
    }
}

/// What one compaction asks of the model.
pub(crate) struct Job<'a> {
    pub provider: &'a dyn Provider,
    /// Which agent asks (the scripted provider routes by it).
    pub agent: &'a str,
    pub thinking: Thinking,
    pub settings: Settings,
    pub instructions: Option<&'a str>,
    pub abort: &'a AbortFlag,
    /// The agent's semantic edges: each answered summary request is a compaction attempt.
    pub trace: Option<&'a crate::protocol::semantic::Tracer>,
}

/// A finished compaction.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Compacted {
    pub tokens_before: u64,
    /// The summary text with its file lists (what `_meta…compaction.summary` carries).
    pub summary: String,
    /// Messages before this index were replaced by the one summary message at index 0.
    pub first_kept_old: usize,
}

impl Compacted {
    /// Where a message that was at `old` is now (`None`: it was summarised).
    pub(crate) fn moved(&self, old: usize) -> Option<usize> {
        (old >= self.first_kept_old).then(|| old - self.first_kept_old + 1)
    }
}

/// Why a compaction did not happen.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// Everything is recent: there is nothing old enough to summarise.
    Nothing,
    Aborted,
    /// The summary request failed; the text follows `Summarization failed: `, and the kind
    /// is the prompt error's `data.kind` (the provider's, or `compaction`).
    Summary(String, &'static str),
}

/// Summarises the old part of `messages` and replaces it with one summary message (the
/// conversation is untouched unless this succeeds). `kernel_names` is asked only once the
/// summary exists.
pub(crate) fn compact(
    job: &Job<'_>,
    messages: &mut Vec<Message>,
    history: &mut History,
    tokens_before: u64,
    kernel_names: &mut dyn FnMut() -> Vec<String>,
) -> Result<Compacted, Failure> {
    let start = usize::from(history.summary.is_some()).min(messages.len());
    let cut = cut::find_cut(messages, start, job.settings.keep_recent_tokens);
    if cut.first_kept <= start {
        return Err(Failure::Nothing);
    }
    let previous = history.summary.as_ref().map(|s| s.text.as_str());
    let budget = job.settings.reserve_tokens * 8 / 10;
    let text = match cut.turn_start {
        Some(turn_start) => {
            let history_text = if turn_start > start {
                summarize(
                    job,
                    &messages[start..turn_start],
                    previous,
                    prompt::Part::History,
                    budget,
                )?
            } else {
                previous.unwrap_or(prompt::NO_PRIOR_HISTORY).to_owned()
            };
            let prefix = summarize(
                job,
                &messages[turn_start..cut.first_kept],
                None,
                prompt::Part::TurnPrefix,
                job.settings.reserve_tokens / 2,
            )?;
            prompt::join_split(&history_text, &prefix)
        }
        None => summarize(
            job,
            &messages[start..cut.first_kept],
            previous,
            prompt::Part::History,
            budget,
        )?,
    };
    let mut files = history
        .summary
        .as_ref()
        .map(|s| s.files.clone())
        .unwrap_or_default();
    files.collect(&messages[start..cut.first_kept]);
    let summary = format!("{text}{}", files.render());
    let names = kernel_names();
    let message = Message::User {
        text: prompt::summary_message(&summary, &names),
        images: Vec::new(),
    };
    // The old messages go (memory is given back), the summary takes their place.
    messages.splice(0..cut.first_kept, std::iter::once(message));
    history.summary = Some(Summary {
        text: summary.clone(),
        files,
    });
    history.last_usage = None;
    Ok(Compacted {
        tokens_before,
        summary,
        first_kept_old: cut.first_kept,
    })
}

/// How many chars of serialised conversation a summary request may carry so that it, the
/// summary prompt around it and the summary's own budget fit `window` (estimated at four
/// chars a token, with a tenth of the window to spare for what the estimate misses). At the
/// windows hosted models have this never cuts anything; at a local model's 4k it keeps a
/// run-on reply from making the summary request itself overflow.
fn summary_room_chars(
    window: u64,
    max_tokens: u64,
    previous: Option<&str>,
    part: prompt::Part,
    instructions: Option<&str>,
) -> usize {
    let frame = estimate::text_tokens(prompt::SYSTEM)
        + estimate::text_tokens(&prompt::request_text("", previous, part, instructions));
    let room = window
        .saturating_sub(max_tokens)
        .saturating_sub(frame)
        .saturating_sub(window / 10);
    // At least something of the conversation, even if the frame alone is too big.
    usize::try_from(room.max(64) * 4).unwrap_or(usize::MAX)
}

/// One summary request with the session's model: no tools, nothing streamed to the client.
fn summarize(
    job: &Job<'_>,
    messages: &[Message],
    previous: Option<&str>,
    part: prompt::Part,
    max_tokens: u64,
) -> Result<String, Failure> {
    let conversation = serialize::serialize(messages);
    let conversation = match job.provider.context_window() {
        Some(window) => serialize::fit(
            &conversation,
            summary_room_chars(window, max_tokens, previous, part, job.instructions),
        ),
        None => conversation,
    };
    let text = prompt::request_text(&conversation, previous, part, job.instructions);
    let request_messages = [Message::User {
        text,
        images: Vec::new(),
    }];
    let request_id = crate::protocol::semantic::new_request_id();
    let request = ChatRequest {
        system: prompt::SYSTEM,
        messages: &request_messages,
        tools: &[],
        thinking: if job.provider.reasoning() {
            job.thinking
        } else {
            Thinking::Off
        },
        agent: job.agent,
        max_tokens: Some(max_tokens.max(1)),
        request_id: &request_id,
        service_tier: None,
    };
    let result = crate::provider::traced_stream(job.provider, &request, job.abort, &mut |_| {});
    if let (Ok(_), Some(trace)) = (&result, job.trace) {
        trace.summary_answered(&request_id);
    }
    match result {
        Ok(reply) if reply.message.text.trim().is_empty() => Err(Failure::Summary(
            "the model returned an empty summary".to_owned(),
            "compaction",
        )),
        Ok(reply) => Ok(reply.message.text.trim().to_owned()),
        Err(_) if job.abort.is_aborted() => Err(Failure::Aborted),
        Err(ProviderError::Aborted) => Err(Failure::Aborted),
        Err(e) => Err(Failure::Summary(e.to_string(), e.kind())),
    }
}

#[cfg(test)]
mod tests;
