//! One prompt turn on its own worker thread: model call → tool calls (one at a time, in order)
//! → results back to the model → repeat until the model stops calling tools.
//!
//! A turn never talks to the client. `run_turn` reports `AgentEvent`s through a callback and
//! returns a `TurnOutcome`; `spawn_turn` runs it on a worker thread for the session's main agent
//! and forwards both to the main loop as `TurnMsg`s, while subagents call `run_turn` on their
//! own threads. Turns stop at `AbortFlag` checkpoints. Each session worker first joins its
//! predecessor, so turns of a session touch the conversation strictly one after another.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::Value;

pub(crate) mod attribution;
mod compacting;
pub(crate) mod guard;
mod keep_alive;
mod refining;
mod steps;
pub(crate) mod streaming;

use crate::agent::autonomy::{self, Next};
use crate::agent::compaction;
use crate::agent::permissions::Mode;
use crate::base::abort::AbortFlag;
use crate::base::content::{tail_bytes, FileDiff, Image, IpythonDetails, PlanEntry, UserPrompt};
use crate::base::telemetry::{self, Kind, Span};
use crate::config::prompt::PromptSpec;
use crate::persist::Custom;
use crate::protocol::stop_reason::StopReason;
use crate::protocol::transport::Backlog;
use crate::provider::menu::ModelMenu;
use crate::provider::{Message, Provider, Thinking, ToolCall, ToolResultMessage, Usage};
use crate::tools::host::{Approval, CallInfo, LocalHost, ToolHost};
use crate::tools::process::{self, Ending, RunSpec};
use crate::tools::truncate::format_size;
use crate::tools::{bash, KernelEnv, ToolChoice, ToolContext, ToolDisplay, ToolOutput, ToolSet};
use guard::Guard;
use steps::{after_reply, AfterReply, ModelCall, Step};
use streaming::Announcer;

/// Everything fixed for the life of a session: provider, tool choice, prompt, cwd (one per
/// process, or one per session with `--multi-session`).
#[derive(Clone)]
pub struct Agent {
    /// `Err` holds the message that explains why no model is usable (e.g. no API key); each
    /// prompt then fails with it, while `initialize` and `session/new` still work.
    pub(crate) provider: Result<Arc<dyn Provider>, String>,
    /// Which built-in tools each agent of a session gets (each agent gets its own instances,
    /// e.g. its own Python kernel).
    pub(crate) tools: ToolChoice,
    /// The agent dir and the recursion depths every kernel of the process runs with.
    pub(crate) kernel_env: KernelEnv,
    pub(crate) system_prompt: String,
    /// What each agent's system prompt is built from (`AgentCtx`, with that agent's facts);
    /// `None`: every agent uses `system_prompt` as it is.
    pub(crate) prompt_spec: Option<PromptSpec>,
    /// The user's skills and prompt templates (commands, `/skill:` and `/<template>` prompts).
    pub(crate) resources: Arc<crate::config::skills::Resources>,
    pub(crate) cwd: PathBuf,
    pub(crate) thinking: Thinking,
    /// `--model` / `--thinking` were given: a continued session keeps them instead of the
    /// model and level its file names (`config_options::restore_model`).
    pub(crate) model_explicit: bool,
    pub(crate) thinking_explicit: bool,
    /// The models a session may switch to (`None`: only its own, e.g. the scripted provider).
    pub(crate) models: Option<Arc<ModelMenu>>,
    /// Several sessions per connection, each in its own cwd (`--multi-session`).
    pub(crate) multi_session: bool,
    /// `bash` runs in the client's terminal when the client offers one (`--client-terminal`).
    pub(crate) client_terminal: bool,
    /// The permission mode a new session starts in (`--permission-mode`).
    pub(crate) permission_mode: Mode,
    /// Approvals and client files for this session's tools (`LocalHost` until a session
    /// gives the agent its `ClientHost`).
    pub(crate) host: Arc<dyn ToolHost>,
    /// Where sessions are kept on disk (`None`: `--no-session`, memory only).
    pub(crate) store: Option<Arc<crate::persist::Store>>,
    /// Autonomous mode as configured at start-up (each session starts with it).
    pub(crate) autonomy: autonomy::Config,
    /// `--goal` and its token budget: each new session starts with this goal.
    pub(crate) goal: Option<(String, Option<u64>)>,
    /// The MCP servers of `settings.json` (`mcpServers`), started in each session beside the
    /// client's.
    pub(crate) mcp_servers: Vec<crate::protocol::acp::McpServer>,
    /// Settings `subagentDefaultModel` and `auxiliaryModel`, built at start-up.
    pub(crate) side_models: SideModels,
    /// Settings `steeringMode` / `followUpMode`.
    pub(crate) message_delivery: MessageDelivery,
    /// Settings `cacheKeepAlive`: the keep-alive interval while tools run (`None`: off).
    pub(crate) cache_keep_alive: Option<Duration>,
    /// Settings `defaultServiceTier`: the service tier a session starts with.
    pub(crate) service_tier: Option<String>,
}

/// Settings `steeringMode` / `followUpMode`: whether one delivery takes every waiting
/// message (`all`) or one (`one-at-a-time`, upstream's default: `false` here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MessageDelivery {
    /// Every steer waiting joins the next model call (else one per call).
    pub all_steers: bool,
    /// Every follow-up due runs in one turn (else one turn each).
    pub all_follow_ups: bool,
}

/// Models other than the session's: what settings name for children and side calls.
#[derive(Default, Clone)]
pub(crate) struct SideModels {
    /// An `rlm(...)` child whose call names no model runs on this (else the session's).
    pub subagent: Option<Arc<dyn Provider>>,
    /// Compaction summaries and refine's calls go to this (else the session's model).
    pub auxiliary: Option<Arc<dyn Provider>>,
}

impl Agent {
    /// The system prompt of one of this session's agents (`prompt_spec` with its facts).
    pub(crate) fn system_prompt_for(
        &self,
        facts: &crate::config::prompt::AgentFacts<'_>,
    ) -> String {
        match &self.prompt_spec {
            Some(spec) => spec.build(facts),
            None => self.system_prompt.clone(),
        }
    }

    /// The start-up model and reasoning level, what a new session begins with.
    pub(crate) fn turn_model(&self) -> TurnModel {
        TurnModel {
            provider: self.provider.clone(),
            thinking: self.thinking,
            service_tier: self.service_tier.clone(),
        }
    }

    /// An agent with no usable model and no tools, in the temp dir (unit tests).
    #[cfg(test)]
    pub(crate) fn without_model() -> Agent {
        Agent {
            provider: Err("no model".to_owned()),
            tools: ToolChoice::None,
            kernel_env: KernelEnv::default(),
            system_prompt: String::new(),
            prompt_spec: None,
            resources: Arc::default(),
            cwd: std::env::temp_dir(),
            thinking: Thinking::Off,
            model_explicit: false,
            thinking_explicit: false,
            models: None,
            multi_session: false,
            client_terminal: false,
            permission_mode: Mode::FullAccess,
            host: Arc::new(LocalHost),
            store: None,
            autonomy: autonomy::Config::default(),
            goal: None,
            mcp_servers: Vec::new(),
            side_models: SideModels::default(),
            message_delivery: MessageDelivery::default(),
            cache_keep_alive: None,
            service_tier: None,
        }
    }

    /// An agent on the scripted provider with no tools and no system prompt, in `cwd`: the
    /// front end alone, for driving the main loop in-process (the fuzz test).
    pub fn scripted(script: &std::path::Path, cwd: PathBuf) -> Result<Agent, String> {
        Ok(Agent {
            provider: Ok(Arc::new(crate::provider::scripted::ScriptedProvider::load(
                script,
            )?)),
            tools: ToolChoice::None,
            kernel_env: KernelEnv::default(),
            system_prompt: String::new(),
            prompt_spec: None,
            resources: Arc::default(),
            cwd,
            thinking: Thinking::Off,
            model_explicit: false,
            thinking_explicit: false,
            models: None,
            multi_session: false,
            client_terminal: false,
            permission_mode: Mode::FullAccess,
            host: Arc::new(LocalHost),
            store: None,
            autonomy: autonomy::Config::default(),
            goal: None,
            mcp_servers: Vec::new(),
            side_models: SideModels::default(),
            message_delivery: MessageDelivery::default(),
            cache_keep_alive: None,
            service_tier: None,
        })
    }
}

/// One agent of a session (the main agent or a subagent): what its turns run with.
pub(crate) struct AgentCtx {
    pub agent: Arc<Agent>,
    pub tools: ToolSet,
    /// Rebuilt after a refine (the harness overview it quotes changes).
    pub system_prompt: crate::config::prompt::LivePrompt,
    /// `main` for the session's own agent, else the subagent's name (the scripted provider
    /// routes replies by it).
    pub name: String,
    /// Agent-to-agent messages, delivered before the next model call of a running turn.
    pub inbox: Arc<Inbox>,
    /// Compaction requests from this agent's kernel, and the accounting it reads.
    pub compaction: Arc<compaction::Control>,
    /// The session's MCP servers, offered as native tools (`None`: the client gave none).
    pub mcp: Option<Arc<crate::mcp::McpHub>>,
    /// This agent's place in the session's semantic edges (`semantic.rs`).
    pub trace: crate::protocol::semantic::Tracer,
    /// The session's span (`telemetry`): the parent of a turn the client gave no trace
    /// context (`None`: nothing is recorded).
    pub session_span: Option<crate::base::telemetry::SpanContext>,
    /// Where this agent's model usage is attributed, and its descendants' waits
    /// (`attribution.rs`).
    pub usage: attribution::Links,
    /// Whether this agent's children have settled: none queued or running, no message
    /// waiting for one (`None`: an agent without a family). A goal continuation waits for it.
    pub settled: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl AgentCtx {
    /// A context with the process's tools (no subagents, default host bridge), for tests.
    #[cfg(test)]
    pub(crate) fn standalone(agent: Arc<Agent>) -> AgentCtx {
        let tools = agent.tools.build(&agent.kernel_env, None);
        AgentCtx {
            system_prompt: crate::config::prompt::LivePrompt::fixed(agent.system_prompt.clone()),
            agent,
            tools,
            name: "main".to_owned(),
            inbox: Arc::default(),
            compaction: Arc::default(),
            mcp: None,
            trace: crate::protocol::semantic::Tracer::alone("main"),
            session_span: None,
            usage: attribution::Links::default(),
            settled: None,
        }
    }
}

/// Messages waiting for an agent's next model call.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    queue: Mutex<InboxState>,
}

#[derive(Debug, Default)]
struct InboxState {
    /// Each message, the `custom_message` it is kept as (a heartbeat's prompt), and whether
    /// it is a steer (`_session/steering`).
    messages: VecDeque<(String, Option<Custom>, bool)>,
    /// A client prompt runs and takes steers (`_session/steering`).
    steering: bool,
    /// Steered messages not yet taken by a model call: the prompt may not end before they are.
    steers: usize,
}

impl Inbox {
    fn state(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn push(&self, message: String) {
        self.push_message(message, None);
    }

    pub(crate) fn push_message(&self, message: String, custom: Option<Custom>) {
        self.state().messages.push_back((message, custom, false));
    }

    pub(crate) fn drain(&self) -> Vec<String> {
        self.drain_messages().into_iter().map(|(m, _)| m).collect()
    }

    pub(crate) fn drain_messages(&self) -> Vec<(String, Option<Custom>)> {
        self.take_for_call(false)
    }

    /// What the next model call takes: every message but, with `one_steer` (settings
    /// `steeringMode` `one-at-a-time`), only the first steer; later steers wait for the calls
    /// after it (the prompt makes them: `has_steers`).
    pub(crate) fn take_for_call(&self, one_steer: bool) -> Vec<(String, Option<Custom>)> {
        let mut state = self.state();
        let mut taken = Vec::new();
        let mut kept = VecDeque::new();
        let mut steered = false;
        for (text, custom, steer) in state.messages.drain(..) {
            if steer && one_steer && steered {
                kept.push_back((text, custom, steer));
                continue;
            }
            steered |= steer;
            taken.push((text, custom));
        }
        state.steers = kept.len();
        state.messages = kept;
        taken
    }

    /// Whether a firing of schedule `job_id` is still waiting here (not yet taken by a model
    /// call): the schedule skips its ticks meanwhile.
    pub(crate) fn holds_firing(&self, job_id: &str) -> bool {
        self.state()
            .messages
            .iter()
            .filter_map(|(_, custom, _)| custom.as_ref()?.details.as_ref())
            .any(|d| d["jobId"] == job_id)
    }

    pub(crate) fn len(&self) -> usize {
        self.state().messages.len()
    }

    /// A client prompt starts: steers join it from now on.
    pub(crate) fn open_steering(&self) {
        self.state().steering = true;
    }

    /// The prompt is over (answered, cancelled): steers no longer join it.
    pub(crate) fn close_steering(&self) {
        self.state().steering = false;
    }

    /// A steer for the running prompt: queued for its next model call, if the prompt still
    /// takes steers. Decided under the same lock as `finish_steering`, so a steer is either
    /// seen by the prompt or refused, never stranded.
    pub(crate) fn steer(&self, text: &str) -> bool {
        let mut state = self.state();
        if !state.steering {
            return false;
        }
        state.messages.push_back((text.to_owned(), None, true));
        state.steers += 1;
        true
    }

    /// Steered messages are waiting for a model call.
    pub(crate) fn has_steers(&self) -> bool {
        self.state().steers > 0
    }

    /// The prompt's work is done: true (and steering closed) unless steers are waiting, which
    /// the prompt must still take to a model call before it answers.
    pub(crate) fn finish_steering(&self) -> bool {
        let mut state = self.state();
        if state.steers > 0 {
            return false;
        }
        state.steering = false;
        true
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What starts a turn: a user prompt, or the agent's own inbox (a turn nobody prompted,
/// e.g. a subagent's reply arriving while the agent is idle).
#[derive(Debug, Clone)]
pub(crate) enum TurnInput {
    Prompt(UserPrompt),
    Inbox,
    /// A slash command answered without the model (see `commands`).
    Local(Local),
}

/// What a slash-command turn does instead of calling the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Local {
    /// Show this text (the command was already carried out).
    Reply(String),
    /// `/compact [instructions]`.
    Compact(Option<String>),
    /// `/rlm-max-depth <n>` (already in effect): kept with the session, then `reply` shown.
    MaxDepth { max_depth: u32, reply: String },
    /// Only the turn's end: what is due there runs (a requested refine, an automatic one).
    /// A closing session drains its due refine with it (`Session::close_or_drain`).
    Boundary,
}

/// The conversation of one ACP session; it carries across that session's prompts.
#[derive(Debug, Default)]
pub(crate) struct Conversation {
    pub messages: Vec<Message>,
    /// The session's model usage, its descendants' included (`attribution.rs`).
    pub usage: Usage,
    /// The descendants' part of it, with what the session file recorded before.
    pub children: attribution::ChildTotals,
    /// Model calls that answered, over the session (autonomous turns are counted from it).
    pub model_calls: u64,
    /// Provider notices already shown in this session (each is shown once).
    pub notices_shown: Vec<String>,
    /// Accounting and the latest compaction's summary.
    pub compaction: compaction::History,
    /// Writes the conversation to the session file as it grows (`None`: memory only, and
    /// every subagent).
    pub recorder: Option<crate::persist::Recorder>,
}

impl Conversation {
    /// A stored session's conversation (dangling calls closed), with the recorder that
    /// continues its file and takes over its claim.
    pub(crate) fn continued(loaded: &mut crate::persist::Loaded) -> Conversation {
        let (usage, cost) = loaded.child_usage();
        Conversation {
            messages: loaded.messages(),
            children: attribution::ChildTotals { usage, cost },
            recorder: Some(crate::persist::Recorder::resume(loaded)),
            ..Conversation::default()
        }
    }

    /// Appends the messages not yet in the session file (a no-op without a recorder).
    pub(crate) fn persist(&mut self) {
        if let Some(r) = self.recorder.as_mut() {
            r.sync(&self.messages);
        }
    }
}

/// A message from a turn worker to the main loop; `turn` routes it (stale turns are dropped).
#[derive(Debug)]
pub(crate) struct TurnMsg {
    pub turn: u64,
    pub kind: TurnMsgKind,
}

/// Small (56 bytes, a compile-time check below): every streamed token crosses the channel and
/// the main loop in one of these, and the static build's opt-level s copies anything over 64
/// bytes with a `memcpy` call, which musl starts with a `rep movsq` however short the copy.
/// So the assistant's deltas, nearly every message, have their own variant, and the other
/// events (`AgentEvent` is 232 bytes) travel boxed.
#[derive(Debug)]
pub(crate) enum TurnMsgKind {
    /// `AgentEvent::MessageDelta` of the assistant.
    Delta {
        kind: DeltaKind,
        delta: String,
    },
    Event(Box<AgentEvent>),
    Finished(TurnOutcome),
}

const _: () = assert!(std::mem::size_of::<TurnMsg>() <= 64);

impl TurnMsgKind {
    pub(crate) fn event(event: AgentEvent) -> TurnMsgKind {
        match event {
            AgentEvent::MessageDelta {
                assistant: true,
                kind,
                delta,
            } => TurnMsgKind::Delta { kind, delta },
            event => TurnMsgKind::Event(Box::new(event)),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnOutcome {
    Completed(StopReason),
    /// The model or provider failed; the text follows `prime-agent turn failed: `.
    Failed(TurnFailure),
    /// A bug: the turn thread panicked. The process survives.
    Panicked(String),
    Cancelled,
}

/// Why a turn failed: the text (after `prime-agent turn failed: `) and the prompt error's
/// `data.kind` (`ProviderError::kind`, or `model_config`, `model_context_overflow`,
/// `compaction`, `agent_busy`; docs/harnesses.md lists them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TurnFailure {
    pub text: String,
    pub kind: &'static str,
}

impl TurnFailure {
    pub(crate) fn new(text: impl Into<String>, kind: &'static str) -> TurnFailure {
        TurnFailure {
            text: text.into(),
            kind,
        }
    }
}

/// Tail cap and throttle for `in_progress` tool output (issue: bounded bandwidth for huge output).
const PROGRESS_TAIL_BYTES: usize = 8 * 1024;
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// The model a turn calls and how hard it reasons: taken when the turn starts, so a model
/// switch (`session/set_config_option`) applies from the next turn on and the running one keeps
/// its provider.
#[derive(Clone)]
pub(crate) struct TurnModel {
    pub provider: Result<Arc<dyn Provider>, String>,
    pub thinking: Thinking,
    /// The OpenAI service tier its calls ask for (`service_tier`; `/fast` switches it).
    pub service_tier: Option<String>,
}

/// What a session's main-agent turn starts with (the session decides it; the main loop
/// spawns it).
pub(crate) struct TurnStart {
    /// Routing key of the worker's messages.
    pub turn: u64,
    pub ctx: Arc<AgentCtx>,
    pub model: TurnModel,
    pub conversation: Arc<Mutex<Conversation>>,
    pub input: TurnInput,
    /// The worker stops at its checkpoints (and abort hooks fire) once this is set.
    pub abort: AbortFlag,
    /// The session's autonomous-mode and goal state, for a client prompt: the worker counts
    /// its model calls there and continues the turn while it says so (`None`: a plain turn).
    pub unattended: Option<autonomy::Shared>,
}

/// Starts a turn worker for a session's main agent. It joins `previous` (the session's last
/// worker, waiting a bounded time) before touching the conversation, and reports through `tx`.
pub(crate) fn spawn_turn(
    start: TurnStart,
    previous: Option<JoinHandle<()>>,
    tx: Sender<TurnMsg>,
    backlog: Backlog,
) -> std::io::Result<JoinHandle<()>> {
    let TurnStart {
        turn,
        ctx,
        model,
        conversation,
        input,
        abort: flag,
        unattended,
    } = start;
    thread::Builder::new()
        .name(format!("turn-{turn}"))
        .spawn(move || {
            let finished = |outcome| {
                let _ = tx.send(TurnMsg {
                    turn,
                    kind: TurnMsgKind::Finished(outcome),
                });
            };
            // The predecessor was answered (or cancelled and given its grace) before this turn
            // started; one still running is stuck in a call no abort hook reaches. Wait for it
            // a bounded time, then give up on it rather than wedge the session.
            let Some(mut conv) = take_over(previous, &conversation, &flag) else {
                finished(TurnOutcome::Failed(TurnFailure::new(
                    PREDECESSOR_STUCK,
                    "agent_busy",
                )));
                return;
            };
            let emit = |event| {
                // A client that is not reading pauses the turn here instead of growing the
                // writer's queue without limit.
                backlog.wait_until_drained(&flag);
                let _ = tx.send(TurnMsg {
                    turn,
                    kind: TurnMsgKind::event(event),
                });
            };
            if let (Some(r), Ok(p)) = (conv.recorder.as_mut(), &model.provider) {
                r.note_model(&p.label(), model.thinking.as_str());
                r.note_service_tier(model.service_tier.as_deref());
            }
            // The prompt turn's span: model calls, tools and compactions are its children.
            let mut span = agent_span(&ctx, &input);
            span.set("prime_agent.turn", turn);
            let _current = telemetry::enter(span.context());
            // A turn bounded by the repeat guard alone (`run_prompt` bounds a prompt's whole run).
            let turn = |conv: &mut Conversation, input: TurnInput| {
                run_turn(
                    &ctx,
                    &model,
                    conv,
                    input,
                    &flag,
                    &emit,
                    &mut Guard::default(),
                )
            };
            let mut outcome = match &unattended {
                Some(u) if matches!(input, TurnInput::Prompt(_)) => {
                    run_prompt(&ctx, &model, &mut conv, input, &flag, &emit, u)
                }
                Some(u) => {
                    // A slash command may have changed the goal.
                    report_goal(&mut autonomy::lock(u), &emit);
                    turn(&mut conv, input)
                }
                _ => turn(&mut conv, input),
            };
            if let Some(u) = &unattended {
                // A client prompt answers only when its work is really over: a steer that came
                // after its last model call gets a model call of its own first.
                while matches!(outcome, TurnOutcome::Completed(_))
                    && !flag.is_aborted()
                    && !ctx.inbox.finish_steering()
                {
                    outcome = turn(&mut conv, TurnInput::Inbox);
                }
                ctx.inbox.close_steering();
                save_goal(u, &mut conv);
            }
            // Before the outcome is reported: what the client sees acknowledged is written
            // (one `write` per line, no user-space buffer, so a killed process loses nothing).
            conv.persist();
            drop(conv);
            end_agent_span(&mut span, &outcome);
            drop(_current);
            drop(span);
            finished(outcome);
        })
}

/// The span of an agent's run (`invoke_agent`, GenAI semantic conventions): a child of the
/// prompt's trace context when the client sent one, else of the session's span.
pub(crate) fn agent_span(ctx: &AgentCtx, input: &TurnInput) -> Span {
    let parent = match input {
        TurnInput::Prompt(p) => p.trace_parent.as_ref(),
        _ => None,
    }
    .or(ctx.session_span.as_ref());
    if !telemetry::recording() {
        return Span::start("invoke_agent", Kind::Internal, parent);
    }
    let name = format!("invoke_agent {}", ctx.name);
    let mut span = Span::start(&name, Kind::Internal, parent);
    span.set("gen_ai.operation.name", "invoke_agent");
    span.set("gen_ai.agent.name", ctx.name.as_str());
    // The main agent's id is the session's; a subagent's is its own (`sub-…`).
    span.set("gen_ai.agent.id", ctx.usage.id.as_str());
    if ctx.name == "main" {
        span.set("gen_ai.conversation.id", ctx.usage.id.as_str());
    }
    span
}

/// Records how a run ended on its span.
pub(crate) fn end_agent_span(span: &mut Span, outcome: &TurnOutcome) {
    match outcome {
        TurnOutcome::Completed(reason) => span.set("prime_agent.stop_reason", reason.as_str()),
        TurnOutcome::Cancelled => span.set("prime_agent.stop_reason", "cancelled"),
        TurnOutcome::Failed(f) => {
            span.set("error.type", f.kind);
            span.fail(f.text.as_str());
        }
        TurnOutcome::Panicked(why) => {
            span.set("error.type", "panic");
            span.fail(why.as_str());
        }
    }
}

/// What the model and the client read when `images.blockImages` keeps a prompt's images back.
pub(crate) fn images_blocked(n: usize) -> String {
    format!("{n} image(s) of this prompt were not passed to the model: images are turned off by the images.blockImages setting")
}

/// How long a turn waits for its predecessor to let go of the conversation.
const PREDECESSOR_WAIT: Duration = Duration::from_secs(2);

/// The prompt's error when the previous turn never let go of the conversation.
pub(crate) const PREDECESSOR_STUCK: &str = "the previous turn is stuck in a call that cannot be interrupted and still holds the conversation; this prompt was not run (try again later, or start a new session)";

/// Turn workers given up on while stuck (they are left to finish or to die with the process).
static ABANDONED_WORKERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Joins `previous` and locks the conversation, waiting at most `PREDECESSOR_WAIT` (or until
/// this turn is aborted). `None` means the predecessor is stuck: it is not joined but leaked,
/// logged and counted.
fn take_over<'a>(
    previous: Option<JoinHandle<()>>,
    conversation: &'a Mutex<Conversation>,
    abort: &AbortFlag,
) -> Option<std::sync::MutexGuard<'a, Conversation>> {
    let deadline = Instant::now() + PREDECESSOR_WAIT;
    if let Some(previous) = previous {
        if let crate::base::reaper::Joined::Running(previous) =
            crate::base::reaper::join_by(previous, deadline, Some(abort))
        {
            let n = ABANDONED_WORKERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            log::error!(
                "turn worker {:?} is stuck past its cancel and was abandoned ({n} so far)",
                previous.thread().name().unwrap_or("?")
            );
        }
    }
    // An abandoned worker (this one's or an earlier one's) may still hold the lock.
    loop {
        match conversation.try_lock() {
            Ok(guard) => return Some(guard),
            // A panic in an earlier turn poisons the lock; the conversation is still sound.
            Err(std::sync::TryLockError::Poisoned(e)) => return Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                if Instant::now() >= deadline || abort.is_aborted() {
                    return None;
                }
                let _ = abort.sleep(Duration::from_millis(5));
            }
        }
    }
}

/// A client prompt: the turn, then the continuations a goal or autonomous mode asks for after
/// each clean assistant turn (gates run here, on this worker, outside the state's lock), all
/// inside the one `session/prompt`. Every model call is counted into `unattended`, goal
/// changes are reported as they happen at turn boundaries, and the prompt's summed usage is
/// left there for its response.
fn run_prompt(
    ctx: &AgentCtx,
    model: &TurnModel,
    conv: &mut Conversation,
    input: TurnInput,
    abort: &AbortFlag,
    emit: &dyn Fn(AgentEvent),
    unattended: &autonomy::Shared,
) -> TurnOutcome {
    let usage_at_start = conv.usage;
    let children_at_start = conv.children.usage;
    let mut calls_seen = conv.model_calls;
    let mut input = input;
    // Counts every model call into `unattended` as it ends, and bounds the whole prompt.
    let mut guard = Guard::for_prompt(unattended);
    let outcome = loop {
        let outcome = run_turn(ctx, model, conv, input, abort, emit, &mut guard);
        let now = Instant::now();
        let calls = conv.model_calls - calls_seen;
        calls_seen = conv.model_calls;
        let mut state = autonomy::lock(unattended);
        if let TurnOutcome::Failed(why) = &outcome {
            state.goal_failed(&why.text, now);
        }
        report_goal(&mut state, emit);
        drop(state);
        save_goal(unattended, conv);
        let mut state = autonomy::lock(unattended);
        let TurnOutcome::Completed(stop) = outcome else {
            break outcome;
        };
        // A bound stopped the prompt (its reason is the outcome's): nothing continues it.
        if guard.stopped().is_some() {
            break outcome;
        }
        // Only an assistant turn continues (a `!cmd` or an empty inbox made no model call).
        if calls == 0 {
            break outcome;
        }
        if abort.is_aborted() {
            break TurnOutcome::Cancelled;
        }
        // A goal goes first, as upstream, once the children have settled (behaviour spec
        // §5.3): their news reaches the model before it is told to keep going.
        if state.goal_active() && !children_settled(ctx) {
            drop(state);
            if wait_for_children(ctx, abort).is_err() {
                break TurnOutcome::Cancelled;
            }
            state = autonomy::lock(unattended);
        }
        let next = match state.goal_continuation() {
            Some(text) => Next::Continue(text),
            None => {
                let gates = state.take_gates();
                drop(state);
                let gates = gates.map(|(config, mut book)| {
                    let outcome =
                        autonomy::gate::run_gates(&config, &mut book, &ctx.agent.cwd, abort);
                    (book, outcome)
                });
                state = autonomy::lock(unattended);
                state.after_turn(gates, Instant::now(), &crate::base::time::now_iso())
            }
        };
        if abort.is_aborted() {
            break TurnOutcome::Cancelled;
        }
        match next {
            Next::Stop => break TurnOutcome::Completed(state.stop_reason(stop, Instant::now())),
            Next::Continue(text) => {
                drop(state);
                input = TurnInput::Prompt(UserPrompt {
                    text,
                    images: Vec::new(),
                    trace_parent: None,
                    typed: false,
                    custom: None,
                });
            }
        }
    };
    // Children's calls that ended after our last model call count into this prompt too.
    attribution::fold(&ctx.usage, conv, Some(unattended));
    let mut state = autonomy::lock(unattended);
    state.prompt_usage = Some(conv.usage.minus(usage_at_start));
    state.prompt_children = (!conv.children.is_empty()).then(|| {
        (
            conv.children.usage.minus(children_at_start),
            conv.children.usage,
        )
    });
    drop(state);
    outcome
}

/// Whether `ctx`'s children have settled (an agent without a family has none).
fn children_settled(ctx: &AgentCtx) -> bool {
    ctx.settled.as_ref().is_none_or(|settled| settled())
}

/// How often a held goal continuation looks at the children again.
const CHILDREN_POLL: Duration = Duration::from_millis(50);

/// Waits until `ctx`'s children have settled; `Err` once the prompt is cancelled or the
/// session closes (both set `abort`, and both end the children too).
fn wait_for_children(ctx: &AgentCtx, abort: &AbortFlag) -> Result<(), crate::base::abort::Aborted> {
    while !children_settled(ctx) {
        abort.sleep(CHILDREN_POLL)?;
    }
    abort.check()
}

/// Writes the goal's state to the session file if it changed since it was last written
/// (`thread_goal_state`), at once: a resume restores it however the process ends.
/// The lock is held only to take the record: the write (which may create the file and take
/// its claim) happens after it is released, since the main loop takes the same lock.
fn save_goal(unattended: &autonomy::Shared, conv: &mut Conversation) {
    if conv.recorder.is_none() {
        return;
    }
    let record = autonomy::lock(unattended).take_goal_to_save(Instant::now());
    if let (Some(record), Some(r)) = (record, conv.recorder.as_mut()) {
        r.note_goal(record);
        conv.persist();
    }
}

/// Reports the goal's state if it changed since it was last reported (`_meta…goal`).
fn report_goal(state: &mut autonomy::Unattended, emit: &dyn Fn(AgentEvent)) {
    if let Some(g) = state.take_goal_meta() {
        emit(goal_event(g));
    }
}

/// The event that shows a goal's state.
pub(crate) fn goal_event(g: autonomy::GoalMeta) -> AgentEvent {
    AgentEvent::GoalUpdate {
        status: g.status,
        objective: g.objective,
        token_budget: g.token_budget,
        tokens_used: g.tokens_used,
    }
}

/// Runs one turn to its end on the calling thread within `guard`'s bounds: a fresh
/// `Guard::default()` bounds it by the repeat guard alone, a prompt's guard is kept across its
/// continuations. Never panics: a panic inside becomes `TurnOutcome::Panicked`.
pub(crate) fn run_turn(
    ctx: &AgentCtx,
    model: &TurnModel,
    conversation: &mut Conversation,
    input: TurnInput,
    abort: &AbortFlag,
    emit: &dyn Fn(AgentEvent),
    guard: &mut Guard,
) -> TurnOutcome {
    let mut worker = Worker {
        ctx,
        agent: &ctx.agent,
        model,
        abort,
        emit,
        guard,
    };
    // Read now, so the kernel's `compact.*` sees `compaction.agentCallable` from the first cell.
    let _ = ctx
        .compaction
        .settings(&ctx.agent.kernel_env.agent_dir, &ctx.agent.cwd);
    ctx.compaction.set_running(true);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let Err(outcome) = worker.run(conversation, input);
        worker.after_turn(conversation, outcome)
    }))
    .unwrap_or_else(|panic| TurnOutcome::Panicked(panic_text(&*panic)));
    ctx.compaction.set_running(false);
    outcome
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "unknown panic".to_owned())
}

struct Worker<'a> {
    ctx: &'a AgentCtx,
    agent: &'a Agent,
    model: &'a TurnModel,
    abort: &'a AbortFlag,
    emit: &'a dyn Fn(AgentEvent),
    guard: &'a mut Guard,
}

/// Arguments that are not a JSON object (cut off, malformed) never go back to a server as
/// they came: `{}` in the history, and the call's result says why (returned by call id).
fn set_aside_unusable(calls: &mut [ToolCall], cut: bool) -> Vec<(String, String)> {
    let mut unusable = Vec::new();
    for call in calls {
        if crate::provider::arguments::invalid(&call.arguments).is_some() {
            let text = crate::provider::arguments::not_run_text(&call.arguments, cut);
            call.arguments = Value::Object(Default::default());
            unusable.push((call.id.clone(), text));
        }
    }
    unusable
}

impl<'a> Worker<'a> {
    fn emit(&self, event: AgentEvent) {
        (self.emit)(event);
    }

    /// One turn: model call → tool calls → results back to the model, until the model stops
    /// calling tools (or a checkpoint, a bound or a failure ends it). Each line is a step
    /// (`turn/steps.rs`); `Err` is the outcome the turn ends with, a completed one included.
    fn run(&mut self, conv: &mut Conversation, input: TurnInput) -> Step<Infallible> {
        self.checkpoint()?; // cancelled before the turn started
        let mut turn = self.begin(conv, input)?;
        loop {
            self.before_model_call(conv, &mut turn)?;
            let ModelCall {
                request_id,
                result,
                mut announcer,
            } = self.call_model(conv, &turn);
            let reply = match result {
                Ok(reply) => reply,
                Err(error) => {
                    self.recover(conv, &mut turn, &announcer, error)?;
                    continue;
                }
            };
            self.count_answer(conv, &mut turn, &request_id, reply.usage);
            let kept = self.keep_reply(conv, &turn, reply, &announcer);
            let step = match after_reply(kept.calls.len(), kept.cut, self.steer_waiting(&kept)) {
                AfterReply::CallAgain => Ok(()),
                AfterReply::End(stop) => Err(TurnOutcome::Completed(stop)),
                AfterReply::RefuseCut => Err(self.refuse_cut(conv, &mut announcer, &kept)),
                AfterReply::RunCalls => {
                    self.run_calls_kept_alive(conv, &turn, &mut announcer, &kept)
                }
            };
            // The reply's usage closes its step: after its calls ended (run, refused or
            // cancelled), before the next model call or the prompt's answer.
            self.emit(kept.usage);
            step?;
        }
    }

    /// `!cmd` / `!!cmd`: runs a user shell command in the cwd without a model call, streamed
    /// as the synthetic bash tool call. `!cmd` adds the command and its result to the
    /// conversation, so the model sees it next turn; `!!cmd` leaves no trace. A non-zero exit
    /// still ends the turn `end_turn`: the turn did what was asked. `None`: not a shell command.
    fn user_shell(&self, conv: &mut Conversation, text: &str) -> Option<TurnOutcome> {
        let rest = text.strip_prefix('!')?;
        let (keep, command) = match rest.strip_prefix('!') {
            Some(c) => (false, c.trim()),
            None => (true, rest.trim()),
        };
        if command.is_empty() {
            return None;
        }
        let run_id = Some(uuid::Uuid::new_v4().simple().to_string()[..12].to_owned());
        self.emit(AgentEvent::BashStart {
            run_id: run_id.clone(),
            command: command.to_owned(),
        });
        let spec = RunSpec {
            command,
            cwd: &self.agent.cwd,
            timeout: None,
            abort: self.abort,
            // The user's own command (`!cmd`), not the model's: never sandboxed.
            sandbox: None,
        };
        let result = process::run(&spec, &mut |r| {
            let chunk = if r.skipped > 0 {
                format!("[… {} skipped …]\n{}", format_size(r.skipped), r.new_text)
            } else {
                r.new_text.to_owned()
            };
            self.emit(AgentEvent::BashOutput { chunk });
        });
        let (exit_code, cancelled, result_text) = match result {
            Ok(r) => {
                let text = bash::result_output(&r, 0.0).text;
                match r.ending {
                    Ending::Exited(code) => (Some(code), false, text),
                    Ending::Aborted => (None, true, text),
                    Ending::TimedOut => (None, false, text),
                }
            }
            Err(e) => {
                self.emit(AgentEvent::BashOutput { chunk: e.clone() });
                (None, false, e)
            }
        };
        self.emit(AgentEvent::BashEnd {
            run_id,
            exit_code,
            cancelled,
        });
        if keep {
            if let Some(r) = conv.recorder.as_mut() {
                r.note_bash(
                    conv.messages.len(),
                    crate::persist::entry::BashRun {
                        command: command.to_owned(),
                        output: result_text.clone(),
                        exit_code,
                        cancelled,
                    },
                );
            }
            conv.messages.push(Message::User {
                text: format!("Ran `{command}`\n{result_text}"),
                images: Vec::new(),
            });
        }
        Some(if cancelled {
            TurnOutcome::Cancelled
        } else {
            TurnOutcome::Completed(StopReason::EndTurn)
        })
    }

    /// The input, `begin`'s first part: `Ok(at)` goes on to the model, with the prompt's
    /// place in the history when one was added; `Err` is the whole turn, answered without a
    /// model (`!cmd`, `/refine`, a local reply or compaction, an empty inbox).
    fn take_input(&mut self, conv: &mut Conversation, input: TurnInput) -> Step<Option<usize>> {
        match input {
            TurnInput::Prompt(prompt) => {
                // Before the provider: `!cmd` needs no model, so it works without one.
                if prompt.typed {
                    if let Some(outcome) = self.user_shell(conv, &prompt.text) {
                        return Err(outcome);
                    }
                    match crate::agent::refine::command(&prompt.text) {
                        Some(Ok(command)) => return Err(self.refine(conv, command, "manual")),
                        Some(Err(usage)) => {
                            self.refine_failed(usage);
                            return Err(TurnOutcome::Completed(StopReason::EndTurn));
                        }
                        None => {}
                    }
                }
                if self.model.provider.is_ok() {
                    let at = conv.messages.len();
                    if let (Some(r), Some(c)) = (conv.recorder.as_mut(), prompt.custom) {
                        r.note_custom(conv.messages.len(), c);
                    }
                    let (text, images) = self.without_blocked_images(prompt.text, prompt.images);
                    conv.messages.push(Message::User { text, images });
                    return Ok(Some(at));
                }
            }
            TurnInput::Inbox => {
                if self.ctx.inbox.is_empty() {
                    return Err(TurnOutcome::Completed(StopReason::EndTurn));
                }
            }
            TurnInput::Local(local) => {
                let text = match local {
                    Local::Reply(text) => text,
                    Local::MaxDepth { max_depth, reply } => {
                        if let Some(r) = conv.recorder.as_mut() {
                            r.note_max_depth(max_depth);
                            conv.persist();
                        }
                        reply
                    }
                    // Compaction reports itself (`_meta…compaction`, or a notice).
                    Local::Compact(instructions) => {
                        return Err(self.manual_compact(conv, instructions.as_deref()))
                    }
                    Local::Boundary => return Err(TurnOutcome::Completed(StopReason::EndTurn)),
                };
                self.emit(AgentEvent::AssistantMessageStart);
                self.emit(AgentEvent::MessageDelta {
                    assistant: true,
                    kind: DeltaKind::Text,
                    delta: text,
                });
                return Err(TurnOutcome::Completed(StopReason::EndTurn));
            }
        }
        Ok(None)
    }

    /// The tools and system prompt the model sees: the built-ins, plus the session's MCP
    /// servers' tools and their section of the prompt.
    fn tools_and_system(
        &self,
    ) -> (
        Vec<crate::base::content::ToolSpec>,
        std::borrow::Cow<'a, str>,
    ) {
        let mut specs = self.ctx.tools.specs();
        // Taken once: a refine between turns replaces it, never under a call.
        let built = self.ctx.system_prompt.current();
        // The sandbox passage describes the session's sandbox now, not the start-up one.
        let prompt = match (&self.agent.prompt_spec, self.agent.host.sandbox()) {
            (Some(spec), Some(now)) => spec.for_sandbox(&built, &now, &self.agent.cwd),
            _ => None,
        }
        .unwrap_or_else(|| built.to_string());
        let Some(hub) = &self.ctx.mcp else {
            return (specs, std::borrow::Cow::Owned(prompt));
        };
        // The model should see the servers' tools: wait (bounded by the start timeout, cut
        // short by cancel) for the ones still connecting.
        hub.wait_ready(self.abort);
        hub.refresh_changed(self.abort);
        specs.extend(crate::mcp::tools::specs(hub, &self.ctx.tools.names()));
        let system = format!(
            "{prompt}\n\n{}",
            crate::mcp::wire::prompt_section(&hub.statuses())
        );
        (specs, std::borrow::Cow::Owned(system))
    }

    /// `images.blockImages`: a prompt's images stay out of the history; the model reads why
    /// in the prompt and the client gets the same words as a notice.
    fn without_blocked_images(&self, text: String, images: Vec<Image>) -> (String, Vec<Image>) {
        if images.is_empty() || !self.agent.kernel_env.images.block {
            return (text, images);
        }
        let why = images_blocked(images.len());
        self.emit(AgentEvent::Notice {
            severity: "warning".to_owned(),
            title: why.clone(),
            description: None,
        });
        (format!("{text}\n\n[{why}]"), Vec::new())
    }

    /// Before each model call: what waits for the model joins the history.
    fn deliver_waiting(&self, conv: &mut Conversation) {
        // Agent messages that arrived meanwhile reach the model now (mid-turn delivery).
        let one_steer = !self.agent.message_delivery.all_steers;
        for (message, custom) in self.ctx.inbox.take_for_call(one_steer) {
            if let (Some(r), Some(c)) = (conv.recorder.as_mut(), custom) {
                r.note_custom(conv.messages.len(), c);
            }
            conv.messages.push(Message::User {
                text: message,
                images: Vec::new(),
            });
        }
        // What the tools have to tell the model alone (a restored kernel state), after the
        // results of the calls that produced it; recorded as hidden, so no replay shows it.
        for notice in self.ctx.tools.take_notices() {
            let at = conv.messages.len();
            if let Some(r) = conv.recorder.as_mut() {
                r.note_hidden(at, notice.custom_type);
            }
            conv.messages.push(Message::User {
                text: notice.text,
                images: Vec::new(),
            });
        }
    }

    /// The session's MCP servers' tool for a call, when no built-in has the name.
    fn mcp_tool(&self, call: &ToolCall) -> Option<Box<dyn crate::tools::Tool>> {
        match (&self.ctx.mcp, self.ctx.tools.get(&call.name)) {
            (Some(hub), None) => crate::mcp::tools::find(hub, &self.ctx.tools.names(), &call.name),
            _ => None,
        }
    }

    /// Shows a reply's call before it runs (`ToolAnnounced`), as `run_tool` will show it.
    fn announce(&self, call: &ToolCall) {
        let mcp_tool = self.mcp_tool(call);
        let tool = self.ctx.tools.get(&call.name).or(mcp_tool.as_deref());
        self.emit(AgentEvent::ToolAnnounced {
            id: call.id.clone(),
            name: call.name.clone(),
            args: call.arguments.clone(),
            locations: tool
                .map(|t| t.locations(&call.arguments, &self.agent.cwd))
                .unwrap_or_default(),
            display: tool.and_then(|t| t.display(&call.arguments)),
        });
    }

    /// Announced calls that will not run: each gets `why` as its result, in the conversation
    /// and for the client.
    fn not_run(&self, conv: &mut Conversation, calls: &[ToolCall], why: &str) {
        close_calls(&mut conv.messages, calls, why);
        for call in calls {
            self.end_failed(call.id.clone(), call.name.clone(), why);
        }
    }

    /// Shows the client a call ended with an error `text` (not run, dropped, failed).
    fn end_failed(&self, id: String, name: String, text: &str) {
        self.emit(AgentEvent::ToolEnd {
            id,
            name,
            result: ToolResultView {
                text: Some(text.to_owned()),
                is_error: true,
                ..ToolResultView::default()
            },
        });
    }

    /// Answers a call without running it: `text` is its (error) result, for the model and
    /// the client (who is shown the call first if it was not yet).
    fn refuse_call(
        &self,
        conv: &mut Conversation,
        announcer: &mut Announcer,
        call: &ToolCall,
        text: String,
    ) {
        if !announcer.contains(&call.id) {
            self.emit(announcer.show(&call.id, &call.name, &call.arguments));
        }
        self.end_failed(call.id.clone(), call.name.clone(), &text);
        close_calls(&mut conv.messages, std::slice::from_ref(call), &text);
        conv.persist();
    }

    /// Ends the calls shown while they streamed that `kept` (the reply's calls) does not hold.
    fn close_announced(&self, announcer: &Announcer, kept: &[ToolCall], text: &str) {
        for id in announcer
            .ids()
            .filter(|id| !kept.iter().any(|c| c.id == *id))
        {
            self.end_failed(id.to_owned(), String::new(), text);
        }
    }

    /// Tells the client why a bound ended the prompt.
    fn stop_notice(&self, stop: &guard::Stop) {
        log::warn!("{}: {}", stop.title, stop.description);
        self.emit(AgentEvent::Notice {
            severity: "warning".to_owned(),
            title: stop.title.clone(),
            description: Some(stop.description.clone()),
        });
    }

    /// The sandbox a call runs in: the session's (its host's), else the start-up one. A
    /// `write` or `edit` the user approved when asked (in `ask`, only a change outside the
    /// sandbox asks) runs as approved.
    fn call_sandbox(&self, tool: &str, asked: bool) -> crate::base::sandbox::Sandbox {
        let sandbox = self
            .agent
            .host
            .sandbox()
            .unwrap_or_else(|| self.agent.kernel_env.sandbox.clone());
        if asked && matches!(tool, "write" | "edit") {
            return sandbox.with_mode(crate::base::sandbox::Mode::Off);
        }
        sandbox
    }

    /// Runs an allowed call, its progress and terminal shown as they come.
    fn execute(&self, tool: &dyn crate::tools::Tool, call: &ToolCall, asked: bool) -> ToolOutput {
        let mut last_emit: Option<Instant> = None;
        let id = call.id.clone();
        let mut progress = |so_far: &str| {
            if last_emit.is_some_and(|t| t.elapsed() < PROGRESS_INTERVAL) {
                return;
            }
            last_emit = Some(Instant::now());
            self.emit(AgentEvent::ToolProgress {
                id: id.clone(),
                output: tail_bytes(so_far, PROGRESS_TAIL_BYTES).to_owned(),
            });
        };
        let mut on_terminal = |terminal_id: &str| {
            self.emit(AgentEvent::ToolTerminal {
                id: call.id.clone(),
                terminal_id: terminal_id.to_owned(),
            });
        };
        let sandbox = self.call_sandbox(&call.name, asked);
        let mut ctx = ToolContext {
            cwd: &self.agent.cwd,
            abort: self.abort,
            progress: &mut progress,
            files: self.agent.host.files(),
            terminal: self.agent.host.terminal(),
            on_terminal: &mut on_terminal,
            sandbox: &sandbox,
        };
        tool.run(&call.arguments, &mut ctx)
    }

    /// Runs one call; also returns how it was shown (the session file keeps that).
    fn run_tool(&self, call: &ToolCall) -> (ToolOutput, Shown) {
        let mcp_tool = self.mcp_tool(call);
        let tool = self.ctx.tools.get(&call.name).or(mcp_tool.as_deref());
        let locations = tool
            .map(|t| t.locations(&call.arguments, &self.agent.cwd))
            .unwrap_or_default();
        // The session's permission mode decides first; in `ask` the call is shown awaiting
        // approval while the client is asked.
        let mut asked = false;
        let display = tool.and_then(|t| t.display(&call.arguments));
        let approval = match tool {
            None => Approval::Allowed,
            Some(_) => {
                let info = CallInfo {
                    id: &call.id,
                    name: &call.name,
                    args: &call.arguments,
                    cwd: &self.agent.cwd,
                    locations: &locations,
                    display: display.as_ref(),
                };
                self.agent.host.authorize(&info, self.abort, &mut || {
                    asked = true;
                    self.emit(AgentEvent::ToolAwaitingApproval {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        args: call.arguments.clone(),
                        locations: locations.clone(),
                        display: display.clone(),
                    });
                })
            }
        };
        if !asked {
            self.emit(AgentEvent::ToolStart {
                id: call.id.clone(),
                name: call.name.clone(),
                args: call.arguments.clone(),
                locations: locations.clone(),
                display: display.clone(),
            });
        } else if approval == Approval::Allowed {
            self.emit(AgentEvent::ToolApproved {
                id: call.id.clone(),
            });
        }
        let output = match (tool, approval) {
            (_, Approval::Refused(text)) => ToolOutput::error(text),
            (None, _) => ToolOutput::error(format!(
                "Tool {} not found. Available tools: {}",
                call.name,
                self.ctx.tools.names().join(", ")
            )),
            (Some(tool), Approval::Allowed) => self.execute(tool, call, asked),
        };
        if let Some(entries) = &output.plan {
            // The whole list every time: the client replaces its plan (ACP `plan`).
            self.emit(AgentEvent::Plan(entries.clone()));
        }
        self.emit(AgentEvent::ToolEnd {
            id: call.id.clone(),
            name: call.name.clone(),
            result: ToolResultView {
                text: Some(output.text.clone()),
                is_error: output.is_error,
                ipython: output.ipython.clone(),
                diff: output.diff.clone(),
                images: output.images.clone(),
                terminal: output.terminal.clone(),
            },
        });
        (output, Shown { locations, display })
    }
}

/// The result a call shown while it streamed gets when its model call failed.
const CALL_FAILED: &str = "Not run: the model call failed before this tool call was complete.";
const CALL_VOIDED: &str =
    "Not run: the model server broke off the reply this call was in; the call is made again.";
/// … and when the finished reply did not hold it.
const CALL_DROPPED: &str = "Not run: the model's finished reply did not include this tool call.";

/// How a tool call was shown to the client beyond its name and arguments.
struct Shown {
    locations: Vec<String>,
    display: Option<ToolDisplay>,
}

/// Gives every unanswered tool call a result, so the conversation stays valid for the next
/// model call (every API requires one result per call).
fn close_calls(messages: &mut Vec<Message>, calls: &[ToolCall], why: &str) {
    for call in calls {
        messages.push(Message::ToolResult(ToolResultMessage {
            call_id: call.id.clone(),
            name: call.name.clone(),
            text: why.to_owned(),
            is_error: true,
            images: Vec::new(),
        }));
    }
}

// What a turn (and a subagent) reports: the vocabulary `events` maps to `session/update`s.

/// One thing that happened in a session, as produced by turns, tools and (later) subagents.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AgentEvent {
    /// A streamed message delta; only assistant deltas reach the client.
    MessageDelta {
        assistant: bool,
        kind: DeltaKind,
        delta: String,
    },
    /// A model reply's tool call, announced before any of its calls runs (shown `pending`
    /// with `rawInput`); the reply's `ContextUsage` follows once all of them have ended, since
    /// trajectory builders close a step at each `usage_update`. A call may be announced more
    /// than once (while its arguments stream, then complete); the mapping sends `tool_call`
    /// once per id and refines it with `tool_call_update`s.
    ToolAnnounced {
        id: String,
        name: String,
        args: Value,
        locations: Vec<String>,
        display: Option<ToolDisplay>,
    },
    /// The call runs now (`in_progress`).
    ToolStart {
        id: String,
        name: String,
        args: Value,
        locations: Vec<String>,
        /// Title and kind the tool decided (MCP tools); else the name decides.
        display: Option<ToolDisplay>,
    },
    /// A tool call the model is still writing (`args`: `None` while only its name is known,
    /// else its arguments so far): shown `pending` (`turn/streaming.rs` decides when). A
    /// `ToolStart`, `ToolAwaitingApproval` or `ToolEnd` of the same id follows.
    ToolPending {
        id: String,
        name: String,
        args: Option<Value>,
    },
    /// A tool call waiting for the user's approval (`ask` mode): shown `pending`. Either
    /// `ToolApproved` or a failed `ToolEnd` follows.
    ToolAwaitingApproval {
        id: String,
        name: String,
        args: Value,
        locations: Vec<String>,
        display: Option<ToolDisplay>,
    },
    /// The call runs in the client's terminal `terminal_id` (embedded in the tool call).
    ToolTerminal {
        id: String,
        terminal_id: String,
    },
    /// The user approved the call: it runs now.
    ToolApproved {
        id: String,
    },
    /// The model's todo list changed: the whole list (ACP `plan`).
    Plan(Vec<PlanEntry>),
    /// The session's MCP servers changed state: the whole list, for `_meta[ns].mcp`.
    McpStatus(Value),
    /// Output so far of a running tool (already tail-capped and throttled by the producer).
    ToolProgress {
        id: String,
        output: String,
    },
    ToolEnd {
        id: String,
        name: String,
        result: ToolResultView,
    },
    /// A user shell command (`!cmd`) started; `run_id` names its synthetic tool call.
    BashStart {
        run_id: Option<String>,
        command: String,
    },
    BashOutput {
        chunk: String,
    },
    BashEnd {
        run_id: Option<String>,
        exit_code: Option<i32>,
        cancelled: bool,
    },
    /// A compaction starts (shown only to clients that take ACP's `compaction_update`).
    CompactionStart,
    /// A compaction ended: the tokens before it and the summary, both absent when it failed
    /// (`error` says why) or was cancelled; `reason` is `manual`, `threshold`, `overflow` or
    /// `requested`.
    CompactionEnd {
        error: Option<String>,
        tokens_before: Option<u64>,
        summary: Option<String>,
        reason: Option<String>,
    },
    ChildUpdate(ChildSnapshot),
    /// The goal changed (`_meta…goal`).
    GoalUpdate {
        status: String,
        objective: Option<String>,
        token_budget: Option<u64>,
        tokens_used: Option<u64>,
    },
    /// A refinement was applied (`edits`: every planned edit, applied or not).
    RefineComplete {
        summary: Option<String>,
        edits: Vec<RefineEdit>,
    },
    RefineFailed {
        error: String,
    },
    AgentMessageSent {
        tool_call_id: String,
        target: Option<String>,
        delivery_status: Option<String>,
    },
    /// Connection-level: the heartbeat/cron schedule changed (`/heartbeat`).
    HeartbeatsChanged,
    /// A model call starts a new assistant message (its chunks share one `messageId`).
    AssistantMessageStart,
    /// A model call or a compaction finished: tokens now in context (`used`) out of the
    /// window (`size`), and the session's cost so far in USD when the model's prices are known.
    ContextUsage {
        used: u64,
        size: Option<u64>,
        cost: Option<f64>,
        /// The session's descendants' part of its usage and cost, once there is one.
        children: Option<attribution::ChildTotals>,
    },
    /// A model call is being retried, or its retries ended (behaviour spec §7.3 `autoRetry`).
    AutoRetry(RetryPhase),
    /// An advisory for the user (ACP `notice` fields), e.g. defaults assumed for an unknown
    /// model. Producers decide how often; the mapping sends every one it gets.
    Notice {
        severity: String,
        title: String,
        description: Option<String>,
    },
}

/// The phases of `_meta[ns].autoRetry`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RetryPhase {
    Waiting {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        reason: String,
        error_message: String,
    },
    Recovered {
        attempt: u32,
    },
    Exhausted {
        attempt: u32,
        error_message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeltaKind {
    Text,
    Thinking,
    ToolCall,
}

/// What the client may see of a tool result.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ToolResultView {
    pub text: Option<String>,
    pub is_error: bool,
    pub ipython: Option<IpythonDetails>,
    pub diff: Option<FileDiff>,
    pub images: Vec<Image>,
    /// The client terminal the call ran in.
    pub terminal: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ChildSnapshot {
    pub id: String,
    pub session_name: Option<String>,
    pub status: String,
    pub model: Option<String>,
    pub token_count: Option<u64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RefineEdit {
    pub action: String,
    pub kind: String,
    pub id: String,
    pub applied: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `steeringMode`: one-at-a-time takes one steer per model call (agent messages all go);
    /// `all` takes every steer; the steers left keep the prompt going (`has_steers`).
    #[test]
    fn a_model_call_takes_one_steer_or_all_of_them() {
        for one in [true, false] {
            let inbox = Inbox::default();
            inbox.open_steering();
            assert!(inbox.steer("s1") && inbox.steer("s2"));
            inbox.push("from a child".to_owned());
            let texts = |v: Vec<(String, Option<Custom>)>| -> Vec<String> {
                v.into_iter().map(|(t, _)| t).collect()
            };
            if one {
                assert_eq!(texts(inbox.take_for_call(true)), ["s1", "from a child"]);
                assert!(inbox.has_steers() && !inbox.finish_steering());
                assert_eq!(texts(inbox.take_for_call(true)), ["s2"]);
            } else {
                assert_eq!(
                    texts(inbox.take_for_call(false)),
                    ["s1", "s2", "from a child"]
                );
            }
            assert!(!inbox.has_steers() && inbox.finish_steering());
        }
    }

    /// Runs one prompt on an agent with no provider; returns the events and the outcome.
    fn run_prompt(conv: &Arc<Mutex<Conversation>>, text: &str) -> (Vec<AgentEvent>, TurnOutcome) {
        let ctx = Arc::new(AgentCtx::standalone(Arc::new(Agent::without_model())));
        let (tx, rx) = crossbeam_channel::unbounded();
        let prompt = UserPrompt {
            text: text.to_owned(),
            images: Vec::new(),
            trace_parent: None,
            typed: true,
            custom: None,
        };
        let start = TurnStart {
            turn: 1,
            model: ctx.agent.turn_model(),
            ctx,
            conversation: conv.clone(),
            input: TurnInput::Prompt(prompt),
            abort: AbortFlag::new(),
            unattended: None,
        };
        let handle = spawn_turn(start, None, tx, Backlog::default()).unwrap();
        handle.join().unwrap();
        let mut events = Vec::new();
        let mut outcome = None;
        for msg in rx.try_iter() {
            match msg.kind {
                TurnMsgKind::Delta { kind, delta } => events.push(AgentEvent::MessageDelta {
                    assistant: true,
                    kind,
                    delta,
                }),
                TurnMsgKind::Event(e) => events.push(*e),
                TurnMsgKind::Finished(o) => outcome = Some(o),
            }
        }
        (events, outcome.unwrap())
    }

    #[test]
    fn user_shell_commands_need_no_model_and_bang_bang_leaves_no_trace() {
        let conv = Arc::new(Mutex::new(Conversation::default()));
        let (events, outcome) = run_prompt(&conv, "!echo hi; exit 3");
        assert_eq!(outcome, TurnOutcome::Completed(StopReason::EndTurn));
        let AgentEvent::BashStart { run_id, command } = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(command, "echo hi; exit 3");
        assert!(events.contains(&AgentEvent::BashOutput {
            chunk: "hi\n".into()
        }));
        assert_eq!(
            events.last(),
            Some(&AgentEvent::BashEnd {
                run_id: run_id.clone(),
                exit_code: Some(3),
                cancelled: false
            })
        );
        let want = Message::User {
            text: "Ran `echo hi; exit 3`\nhi\n\n\nCommand exited with code 3".into(),
            images: Vec::new(),
        };
        assert_eq!(conv.lock().unwrap().messages, vec![want.clone()]);

        let (events, outcome) = run_prompt(&conv, "!!echo quiet");
        assert_eq!(outcome, TurnOutcome::Completed(StopReason::EndTurn));
        assert!(events.contains(&AgentEvent::BashOutput {
            chunk: "quiet\n".into()
        }));
        assert_eq!(conv.lock().unwrap().messages, vec![want]);

        // Not a shell command: goes to the (missing) model.
        let (_, outcome) = run_prompt(&conv, "!  ");
        assert_eq!(
            outcome,
            TurnOutcome::Failed(TurnFailure::new("no model", "model_config"))
        );
    }
}
