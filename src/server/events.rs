//! The pure mapping from one `AgentEvent` (the agent's internal event vocabulary, defined in
//! `turn`) to zero or more ACP `session/update` payloads (`update` objects, before the `_meta`
//! envelope).
//!
//! Every client-visible shape of an event is decided here and nowhere else. The mapping follows
//! the Prime Agent table (behaviour spec §1.12/§1.13), with two deliberate additions asked for by
//! our users: human tool titles (not just the tool name) and tool-call `locations`/`diff` content.

use crate::base::json::json;
use serde_json::{Map, Value};

use crate::agent::turn::{AgentEvent, DeltaKind, RetryPhase, ToolResultView};
use crate::base::content::{base64_decoded_len, tail_bytes, IpythonDetails};
use crate::protocol::meta::{namespaced, Envelope};
use crate::tools::ToolDisplay;

/// Per-session mapping state (§1.13): which user shell run `BashOutput` belongs to, and that
/// run's output so far.
#[derive(Debug, Default)]
pub(crate) struct MappingState {
    active_bash_run_id: Option<String>,
    /// ACP `tool_call_update.content` replaces the previous content, so each update carries the
    /// output so far (tail-capped), not just the newest chunk (acp-peers: "PA's bash stream").
    bash_output: String,
    /// Assistant messages started so far; chunks carry `messageId: prime-agent-assistant-<n>`.
    assistant_messages: u64,
    /// The client takes ACP's standard forms (`clientCapabilities.session`): `notice` updates
    /// instead of `_meta…notice`, `compaction_update` instead of `_meta…compaction`.
    standard: Standard,
    /// Compactions started so far (`compactionId: prime-agent-compaction-<n>`), and whether
    /// the newest one has not ended yet.
    compactions: u64,
    compaction_open: bool,
    /// Tool calls already sent as `tool_call` and not yet ended: every later event of one
    /// refines it (`tool_call_update`), so each id is announced exactly once, whichever event
    /// comes first (`ToolAnnounced`, `ToolAwaitingApproval`, `ToolStart`).
    announced: std::collections::HashSet<String>,
    /// Of those, the calls shown with everything their start would say (`ToolAnnounced`,
    /// `ToolAwaitingApproval`, `ToolStart`): a later start only moves the status. A call shown
    /// by name alone while it streamed (`ToolPending`) gets its details with its start.
    detailed: std::collections::HashSet<String>,
}

/// Which standard session updates the client opted into.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Standard {
    pub notices: bool,
    pub compaction: bool,
}

impl MappingState {
    /// The state of a session whose client opted into `standard` updates.
    pub(crate) fn for_client(standard: Standard) -> MappingState {
        MappingState {
            standard,
            ..MappingState::default()
        }
    }

    /// The id of the compaction `CompactionStart` opens (or a lone `CompactionEnd` is).
    fn compaction_id(&mut self, starting: bool) -> String {
        if starting || !self.compaction_open {
            self.compactions += 1;
        }
        self.compaction_open = starting;
        format!("prime-agent-compaction-{}", self.compactions)
    }

    /// The current assistant message number, once one has started (for `messageId`).
    pub(crate) fn assistant_message(&self) -> Option<u64> {
        (self.assistant_messages > 0).then_some(self.assistant_messages)
    }
}

/// How much of a user shell run's output each update repeats.
pub(crate) const BASH_TAIL_BYTES: usize = 8 * 1024;

/// Appends `chunk` to `buf`, keeping only the last `max` bytes (at a char boundary).
fn push_tail(buf: &mut String, chunk: &str, max: usize) {
    buf.push_str(chunk);
    let cut = buf.len() - tail_bytes(buf, max).len();
    buf.drain(..cut);
}

/// ACP tool kind for a tool name.
pub(crate) fn tool_kind(name: &str) -> &'static str {
    match name {
        "ipython" | "bash" => "execute",
        "read" => "read",
        "edit" | "write" => "edit",
        "todo" => "think",
        _ => "other",
    }
}

/// The synthetic tool-call id of a user shell run.
pub(crate) fn bash_tool_call_id(run_id: Option<&str>) -> String {
    match run_id {
        Some(id) if !id.is_empty() => format!("prime-agent-bash-{id}"),
        _ => "prime-agent-bash".to_owned(),
    }
}

/// A title that says what the call does: the command, `Read src/main.rs`, the cell's first
/// comment or line. Falls back to the tool name.
pub(crate) fn tool_title(name: &str, args: &Value) -> String {
    let s = |key: &str| {
        args.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let title = match name {
        "bash" => s("command").map(one_line),
        "read" => s("path").map(|p| format!("Read {p}")),
        "write" => s("path").map(|p| format!("Write {p}")),
        "edit" => s("path").map(|p| format!("Edit {p}")),
        "ipython" => s("code").and_then(cell_title),
        "todo" => Some("Update the plan".to_owned()),
        _ => None,
    };
    title.unwrap_or_else(|| name.to_owned())
}

fn one_line(text: &str) -> String {
    const MAX: usize = 120;
    let first = text.lines().next().unwrap_or("").trim();
    let mut out: String = first.chars().take(MAX).collect();
    if out.len() < first.len() || text.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// The first comment (without `#`) or else the first non-blank line of a Python cell.
fn cell_title(code: &str) -> Option<String> {
    let mut lines = code.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next()?;
    if let Some(rest) = first.strip_prefix("%%bash") {
        let body = lines.next().unwrap_or(rest.trim());
        return Some(format!("bash: {}", one_line(body)));
    }
    let comment = code
        .lines()
        .map(str::trim)
        .find_map(|l| {
            l.strip_prefix('#')
                .map(|c| c.trim_start_matches('#').trim())
        })
        .filter(|c| !c.is_empty());
    Some(one_line(comment.unwrap_or(first)))
}

fn text_content(text: &str) -> Value {
    json!({ "type": "content", "content": { "type": "text", "text": text } })
}

fn info_update(payload: Value) -> Value {
    json!({ "sessionUpdate": "session_info_update", "_meta": namespaced(payload) })
}

/// Inserts `key: value` when `value` is `Some`.
fn put<T: Into<Value>>(obj: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(v) = value {
        obj.insert(key.to_owned(), v.into());
    }
}

/// The whole `session/update` frame of an assistant message delta, serialised directly: the
/// streaming hot path (one per model token). Byte for byte what the general path writes
/// (`to_session_updates` → `meta::apply_envelope` → `rpc::notification` → `serde_json`, whose
/// maps sort their keys), without building and dropping a `Value` tree per delta; a unit test
/// holds the two equal. Appends to `out` (the outbox's batch buffer, so a delta allocates
/// nothing) and returns whether it wrote a frame: false where the general path writes nothing
/// (the caller then takes back whatever was appended).
pub(crate) fn message_chunk_frame(
    out: &mut Vec<u8>,
    session_id: &str,
    kind: DeltaKind,
    delta: &str,
    message: Option<u64>,
    env: Envelope,
) -> bool {
    let update = match kind {
        _ if delta.is_empty() => return false,
        DeltaKind::Text => "agent_message_chunk",
        DeltaKind::Thinking => "agent_thought_chunk",
        DeltaKind::ToolCall => return false,
    };
    chunk_frame(out, session_id, update, delta, message, env).is_ok()
}

fn chunk_frame(
    out: &mut Vec<u8>,
    session_id: &str,
    update: &str,
    delta: &str,
    message: Option<u64>,
    env: Envelope,
) -> std::io::Result<()> {
    // Few copy calls, no `core::fmt`, and nothing left to the inliner: the static build runs
    // against musl, whose `memcpy` pays a `rep movsq` start-up (tens of cycles) on every call
    // however short, and `write!` or one `extend_from_slice` per piece made a frame some twenty
    // such calls; pushing byte by byte was as slow once opt-level z stopped inlining
    // `Vec::push`. So the frame is written through a `Frame` cursor into a tail of `out` sized
    // once for the worst case (every string byte escaped as `\u00xx`) and cut to length after:
    // the constant text in runs as long as the frame allows, short pieces byte by byte.
    let phase = env.phase.as_str();
    let worst =
        FRAME_TEXT + 6 * (session_id.len() + delta.len()) + phase.len() + update.len() + 3 * 20;
    let start = out.len();
    out.resize(start + worst, 0);
    let mut f = Frame {
        buf: &mut out[start..],
        at: 0,
    };
    f.put(b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":");
    f.json_str(session_id);
    f.put(UPDATE_META.as_bytes());
    f.u64(env.event_sequence);
    match env.outcome_ok {
        Some(true) => f.put(b",\"outcome\":\"result\",\"phase\":\""),
        Some(false) => f.put(b",\"outcome\":\"error\",\"phase\":\""),
        None => f.put(b",\"phase\":\""),
    }
    f.put(phase.as_bytes());
    f.put(b"\",\"promptTurnId\":");
    f.u64(env.prompt_turn_id);
    f.put(b"}},\"content\":{\"text\":");
    f.json_str(delta);
    match message {
        Some(n) => {
            f.put(b",\"type\":\"text\"},\"messageId\":\"prime-agent-assistant-");
            f.u64(n);
            f.put(b"\",\"sessionUpdate\":\"");
        }
        None => f.put(b",\"type\":\"text\"},\"sessionUpdate\":\""),
    }
    f.put(update.as_bytes());
    f.put(b"\"}}}");
    let end = start + f.at;
    out.truncate(end);
    Ok(())
}

/// More than the constant text of a delta frame (about 330 bytes; a unit test holds it).
const FRAME_TEXT: usize = 400;

/// What follows the session id in a delta frame, up to the event sequence number: the
/// namespace spelled out, so the run is one copy (a unit test holds it to `NAMESPACE`).
const UPDATE_META: &str =
    ",\"update\":{\"_meta\":{\"ai.primeintellect.prime-agent\":{\"eventSequence\":";

/// A write cursor over a tail of the output already sized for what goes in (`chunk_frame`).
/// Its helpers are forced inline so the frame is written by straight-line code at any
/// opt-level.
struct Frame<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Frame<'_> {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.buf[self.at] = b;
        self.at += 1;
    }

    /// `bytes`: one copy call for a long run, byte by byte for a short one (cheaper than a
    /// `memcpy` call under musl, see `chunk_frame`).
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        if bytes.len() >= 64 {
            self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
            self.at += bytes.len();
        } else {
            for &b in bytes {
                self.byte(b);
            }
        }
    }

    /// `s` as a JSON string, escaped exactly as `serde_json` escapes it (a unit test compares
    /// the two over every ASCII byte): `"` and `\\` with a backslash, the control characters
    /// with their short forms or `\u00xx`, everything else as it is. At most `6 * s.len() + 2`
    /// bytes.
    fn json_str(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = s.as_bytes();
        self.byte(b'"');
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let short = match b {
                b'"' => b'"',
                b'\\' => b'\\',
                0x08 => b'b',
                0x09 => b't',
                0x0a => b'n',
                0x0c => b'f',
                0x0d => b'r',
                0x00..=0x1f => b'u',
                _ => continue,
            };
            self.put(&bytes[start..i]);
            self.byte(b'\\');
            self.byte(short);
            if short == b'u' {
                self.put(b"00");
                self.byte(HEX[usize::from(b >> 4)]);
                self.byte(HEX[usize::from(b & 0xf)]);
            }
            start = i + 1;
        }
        self.put(&bytes[start..]);
        self.byte(b'"');
    }

    /// `n` in decimal, as `Display` writes it, without the formatting machinery (at most 20
    /// bytes).
    fn u64(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.put(&digits[at..]);
    }
}

/// The pure mapping: one event → zero or more `update` objects.
pub(crate) fn to_session_updates(event: &AgentEvent, state: &mut MappingState) -> Vec<Value> {
    match event {
        AgentEvent::MessageDelta {
            assistant: true,
            kind,
            delta,
        } if !delta.is_empty() => message_chunk(*kind, delta, state).into_iter().collect(),
        AgentEvent::AssistantMessageStart => {
            state.assistant_messages += 1;
            vec![]
        }
        AgentEvent::ContextUsage {
            used,
            size: Some(size),
            cost,
            children,
        } if *used > 0 => vec![usage_update(*used, *size, *cost, children.as_ref())],
        AgentEvent::ContextUsage { .. } | AgentEvent::MessageDelta { .. } => vec![],
        AgentEvent::ToolPending { id, name, args } => {
            vec![tool_pending(id, name, args.as_ref(), state)]
        }
        AgentEvent::ToolStart { id, .. } if state.detailed.contains(id) => {
            vec![tool_status(id, "in_progress")]
        }
        // Announced calls are shown `pending` already; the permission request names the call.
        AgentEvent::ToolAwaitingApproval { id, .. } if state.detailed.contains(id) => vec![],
        AgentEvent::ToolAnnounced {
            id,
            name,
            args,
            locations,
            display,
        }
        | AgentEvent::ToolStart {
            id,
            name,
            args,
            locations,
            display,
        }
        | AgentEvent::ToolAwaitingApproval {
            id,
            name,
            args,
            locations,
            display,
        } => {
            let status = if matches!(event, AgentEvent::ToolStart { .. }) {
                "in_progress"
            } else {
                "pending"
            };
            vec![tool_shown(
                state,
                ToolShown {
                    id,
                    name,
                    args,
                    locations,
                    display: display.as_ref(),
                    status,
                },
            )]
        }
        AgentEvent::Plan(entries) => vec![plan_update(entries)],
        AgentEvent::ToolTerminal { id, terminal_id } => vec![json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": id,
            "status": "in_progress",
            "content": [{ "type": "terminal", "terminalId": terminal_id }],
        })],
        AgentEvent::ToolApproved { id } => vec![tool_status(id, "in_progress")],
        AgentEvent::ToolProgress { id, output } => vec![tool_progress(id, output)],
        AgentEvent::ToolEnd { id, name, result } => {
            state.announced.remove(id);
            state.detailed.remove(id);
            vec![tool_end(id, name, result)]
        }
        AgentEvent::BashStart { run_id, command } => vec![bash_start(run_id, command, state)],
        AgentEvent::BashOutput { chunk } => vec![bash_output(chunk, state)],
        AgentEvent::BashEnd {
            run_id,
            exit_code,
            cancelled,
        } => vec![bash_end(run_id, *exit_code, *cancelled, state)],
        AgentEvent::CompactionStart if state.standard.compaction => {
            vec![json!({
                "sessionUpdate": "compaction_update",
                "compactionId": state.compaction_id(true),
                "status": "in_progress",
            })]
        }
        AgentEvent::CompactionStart => vec![],
        AgentEvent::CompactionEnd {
            error,
            tokens_before,
            summary,
            reason,
        } if state.standard.compaction => vec![compaction_update(
            error.as_deref(),
            *tokens_before,
            summary.as_deref(),
            reason.as_deref(),
            state,
        )],
        AgentEvent::CompactionEnd {
            error: _,
            tokens_before,
            summary,
            reason,
        } => {
            let mut c = Map::new();
            put(&mut c, "tokensBefore", *tokens_before);
            put(&mut c, "summary", summary.clone());
            put(&mut c, "reason", reason.clone());
            vec![info_update(json!({ "compaction": c }))]
        }
        AgentEvent::ChildUpdate(child) => vec![child_info(child)],
        AgentEvent::GoalUpdate {
            status,
            objective,
            token_budget,
            tokens_used,
        } => {
            let mut g = Map::new();
            g.insert("status".into(), json!(status));
            put(&mut g, "objective", objective.clone());
            put(&mut g, "tokenBudget", *token_budget);
            put(&mut g, "tokensUsed", *tokens_used);
            vec![info_update(json!({ "goal": g }))]
        }
        AgentEvent::RefineComplete { summary, edits } => vec![refine_info(summary, edits)],
        AgentEvent::RefineFailed { error } => {
            vec![info_update(
                json!({ "refinement": { "status": "failed", "error": error } }),
            )]
        }
        AgentEvent::AgentMessageSent {
            tool_call_id,
            target,
            delivery_status,
        } => {
            let mut m = Map::new();
            m.insert("toolCallId".into(), json!(tool_call_id));
            put(&mut m, "target", target.clone());
            put(&mut m, "deliveryStatus", delivery_status.clone());
            vec![info_update(json!({ "agentMessage": m }))]
        }
        AgentEvent::HeartbeatsChanged => vec![info_update(json!({ "heartbeatsChanged": true }))],
        AgentEvent::AutoRetry(phase) => vec![info_update(json!({ "autoRetry": retry(phase) }))],
        AgentEvent::Notice {
            severity,
            title,
            description,
        } if state.standard.notices && !title.is_empty() => {
            let mut n = json!({ "sessionUpdate": "notice", "severity": severity, "title": title });
            if let Some(d) = description {
                n["description"] = json!(d);
            }
            vec![n]
        }
        AgentEvent::Notice {
            severity,
            title,
            description,
        } => {
            let mut n = Map::new();
            n.insert("severity".into(), json!(severity));
            n.insert("title".into(), json!(title));
            put(&mut n, "description", description.clone());
            vec![info_update(json!({ "notice": n }))]
        }
        AgentEvent::McpStatus(servers) => vec![info_update(json!({ "mcp": servers }))],
    }
}

/// An assistant text or thought chunk, tagged with its message; a tool call's streamed
/// arguments are shown through `ToolPending`, not as a chunk.
fn message_chunk(kind: DeltaKind, delta: &str, state: &MappingState) -> Option<Value> {
    let update = match kind {
        DeltaKind::Text => "agent_message_chunk",
        DeltaKind::Thinking => "agent_thought_chunk",
        DeltaKind::ToolCall => return None,
    };
    let mut chunk =
        json!({ "sessionUpdate": update, "content": { "type": "text", "text": delta } });
    if state.assistant_messages > 0 {
        chunk["messageId"] = json!(format!(
            "prime-agent-assistant-{}",
            state.assistant_messages
        ));
    }
    Some(chunk)
}

/// `_meta[ns].childUsage`: the session's descendants' part of its usage, in the prompt
/// response's `usage` shape, with their cost in USD.
fn child_usage(c: &crate::agent::turn::attribution::ChildTotals) -> Value {
    let u = &c.usage;
    json!({
        "inputTokens": u.input,
        "outputTokens": u.output,
        "cachedReadTokens": u.cache_read,
        "cachedWriteTokens": u.cache_write,
        "totalTokens": u.input + u.output + u.cache_read + u.cache_write,
        "cost": c.cost,
    })
}

fn usage_update(
    used: u64,
    size: u64,
    cost: Option<f64>,
    children: Option<&crate::agent::turn::attribution::ChildTotals>,
) -> Value {
    let mut update = json!({ "sessionUpdate": "usage_update", "used": used, "size": size });
    if let Some(c) = children {
        update["_meta"] = namespaced(json!({ "childUsage": child_usage(c) }));
    }
    if let Some(amount) = cost {
        update["cost"] = json!({ "amount": amount, "currency": "USD" });
    }
    update
}

/// A call the model is still writing: first shown by name, then refined as its arguments
/// stream.
fn tool_pending(id: &str, name: &str, args: Option<&Value>, state: &mut MappingState) -> Value {
    if !state.announced.insert(id.to_owned()) {
        let mut update = json!({ "sessionUpdate": "tool_call_update", "toolCallId": id });
        if let Some(args) = args {
            update["title"] = json!(tool_title(name, args));
            update["rawInput"] = raw_input(name, args);
        }
        return update;
    }
    let mut update = json!({
        "sessionUpdate": "tool_call",
        "toolCallId": id,
        "title": tool_title(name, args.unwrap_or(&Value::Null)),
        "kind": tool_kind(name),
        "status": "pending",
    });
    if let Some(args) = args {
        update["rawInput"] = raw_input(name, args);
    }
    update
}

/// What `tool_shown` shows of a call.
struct ToolShown<'a> {
    id: &'a str,
    name: &'a str,
    args: &'a Value,
    locations: &'a [String],
    display: Option<&'a ToolDisplay>,
    status: &'a str,
}

/// A call shown with all that is known of it (announced, started, awaiting approval). A call
/// the client knows already (shown by name while it streamed) gets it as an update.
fn tool_shown(state: &mut MappingState, call: ToolShown<'_>) -> Value {
    let mut update = tool_call(
        call.id,
        call.name,
        call.args,
        call.locations,
        call.display,
        call.status,
    );
    state.detailed.insert(call.id.to_owned());
    if !state.announced.insert(call.id.to_owned()) {
        update["sessionUpdate"] = json!("tool_call_update");
    }
    update
}

fn tool_status(id: &str, status: &str) -> Value {
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": id,
        "status": status,
    })
}

fn plan_update(entries: &[crate::base::content::PlanEntry]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|e| json!({ "content": e.content, "status": e.status, "priority": e.priority }))
        .collect();
    json!({ "sessionUpdate": "plan", "entries": entries })
}

fn bash_start(run_id: &Option<String>, command: &str, state: &mut MappingState) -> Value {
    state.active_bash_run_id = run_id.clone();
    state.bash_output.clear();
    json!({
        "sessionUpdate": "tool_call",
        "toolCallId": bash_tool_call_id(run_id.as_deref()),
        "title": command,
        "kind": "execute",
        "status": "in_progress",
        "rawInput": { "command": command },
    })
}

fn bash_output(chunk: &str, state: &mut MappingState) -> Value {
    push_tail(&mut state.bash_output, chunk, BASH_TAIL_BYTES);
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": bash_tool_call_id(state.active_bash_run_id.as_deref()),
        "status": "in_progress",
        "content": [text_content(&state.bash_output)],
    })
}

fn bash_end(
    run_id: &Option<String>,
    exit_code: Option<i32>,
    cancelled: bool,
    state: &mut MappingState,
) -> Value {
    let output = if state.active_bash_run_id == *run_id {
        state.active_bash_run_id = None;
        std::mem::take(&mut state.bash_output)
    } else {
        String::new()
    };
    let ok = exit_code == Some(0) && !cancelled;
    let mut update = json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": bash_tool_call_id(run_id.as_deref()),
        "status": if ok { "completed" } else { "failed" },
    });
    // The final output rides along so a client that missed updates still shows it.
    if !output.is_empty() {
        update["content"] = json!([text_content(&output)]);
    }
    update
}

/// The standard `compaction_update` that ends a compaction.
fn compaction_update(
    error: Option<&str>,
    tokens_before: Option<u64>,
    summary: Option<&str>,
    reason: Option<&str>,
    state: &mut MappingState,
) -> Value {
    let status = match (summary, error) {
        (Some(_), _) => "completed",
        (None, Some(_)) => "failed",
        (None, None) => "cancelled",
    };
    let mut update = json!({
        "sessionUpdate": "compaction_update",
        "compactionId": state.compaction_id(false),
        "status": status,
    });
    if let Some(s) = summary {
        update["summary"] = json!([{ "type": "text", "text": s }]);
    }
    if let Some(e) = error {
        update["error"] = json!(e);
    }
    // What only we report (as in the `_meta` form): the size before, and why.
    let mut ours = Map::new();
    put(&mut ours, "tokensBefore", tokens_before);
    put(&mut ours, "reason", reason.map(str::to_owned));
    if !ours.is_empty() {
        update["_meta"] = namespaced(Value::Object(ours));
    }
    update
}

fn child_info(child: &crate::agent::turn::ChildSnapshot) -> Value {
    let mut c = Map::new();
    c.insert("id".into(), json!(child.id));
    put(&mut c, "sessionName", child.session_name.clone());
    c.insert("status".into(), json!(child.status));
    put(&mut c, "model", child.model.clone());
    put(&mut c, "tokenCount", child.token_count);
    put(&mut c, "error", child.error.clone());
    info_update(json!({ "subagents": [c] }))
}

fn refine_info(summary: &Option<String>, edits: &[crate::agent::turn::RefineEdit]) -> Value {
    let mut r = Map::new();
    r.insert("status".into(), json!("complete"));
    put(&mut r, "summary", summary.clone());
    let changes: Vec<String> = edits
        .iter()
        .filter(|e| e.applied)
        .map(|e| format!("{} {}:{}", e.action, e.kind, e.id))
        .collect();
    r.insert("changes".into(), json!(changes));
    info_update(json!({ "refinement": r }))
}

fn retry(phase: &RetryPhase) -> Value {
    match phase {
        RetryPhase::Waiting {
            attempt,
            max_attempts,
            delay_ms,
            reason,
            error_message,
        } => json!({
            "phase": "waiting",
            "attempt": attempt,
            "maxAttempts": max_attempts,
            "delayMs": delay_ms,
            "reason": reason,
            "errorMessage": error_message,
        }),
        RetryPhase::Recovered { attempt } => {
            json!({ "phase": "recovered", "attempt": attempt })
        }
        RetryPhase::Exhausted {
            attempt,
            error_message,
        } => {
            json!({ "phase": "exhausted", "attempt": attempt, "errorMessage": error_message })
        }
    }
}

/// What `rawInput` shows of a call's arguments: an IPython cell's code alone.
fn raw_input(name: &str, args: &Value) -> Value {
    match (name, args.get("code")) {
        ("ipython", Some(Value::String(code))) => json!({ "code": code }),
        _ => args.clone(),
    }
}

fn tool_call(
    id: &str,
    name: &str,
    args: &Value,
    locations: &[String],
    display: Option<&ToolDisplay>,
    status: &str,
) -> Value {
    let raw_input = raw_input(name, args);
    let mut update = json!({
        "sessionUpdate": "tool_call",
        "toolCallId": id,
        "title": display.map_or_else(|| tool_title(name, args), |d| d.title.clone()),
        "kind": display.map_or_else(|| tool_kind(name), |d| d.kind),
        "status": status,
        "rawInput": raw_input,
    });
    if !locations.is_empty() {
        update["locations"] = locations.iter().map(|p| json!({ "path": p })).collect();
    }
    update
}

/// A running call's output so far, shown live in `content` (which each update replaces). Its
/// `rawOutput` is the empty string: the model has been given nothing yet. Trajectory builders
/// read `rawOutput` before `content` and count every update's output into the call's
/// observation (Harbor's ACP → ATIF conversion does, `_stringify_tool_output`), so an empty
/// one keeps the live tail out of it: the final update's `rawOutput.output` is the
/// observation, once (docs/harnesses.md).
fn tool_progress(id: &str, output: &str) -> Value {
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": id,
        "status": "in_progress",
        "content": [text_content(output)],
        "rawOutput": "",
    })
}

fn tool_end(id: &str, name: &str, result: &ToolResultView) -> Value {
    let mut update = json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": id,
        "status": if result.is_error { "failed" } else { "completed" },
    });
    let mut content = Vec::new();
    // `content` replaces the call's content: the terminal stays in it, first.
    if let Some(terminal_id) = &result.terminal {
        content.push(json!({ "type": "terminal", "terminalId": terminal_id }));
    }
    if let Some(text) = result.text.as_deref().filter(|t| !t.is_empty()) {
        content.push(text_content(text));
    }
    for image in &result.images {
        content.push(json!({
            "type": "content",
            "content": { "type": "image", "data": image.data, "mimeType": image.mime_type },
        }));
    }
    if let Some(diff) = &result.diff {
        content.push(json!({
            "type": "diff",
            "path": diff.path,
            "oldText": diff.old_text,
            "newText": diff.new_text,
        }));
    }
    if !content.is_empty() {
        update["content"] = Value::Array(content);
    }
    // What the model got back, for trajectory builders (docs/harnesses.md): Harbor reads
    // `rawOutput.output` as the step's observation.
    update["rawOutput"] = json!({
        "output": result.text.as_deref().unwrap_or(""),
        "isError": result.is_error,
    });
    if name == "ipython" {
        if let Some(meta) = result.ipython.as_ref().and_then(ipython_meta) {
            update["_meta"] = namespaced(json!({ "ipython": meta }));
        }
    }
    update
}

fn ipython_meta(details: &IpythonDetails) -> Option<Value> {
    let mut m = Map::new();
    if !details.attachments.is_empty() {
        let attachments: Vec<Value> = details
            .attachments
            .iter()
            .map(|a| {
                let mut o = Map::new();
                put(&mut o, "mimeType", a.mime_type.clone());
                put(&mut o, "path", a.path.clone());
                put(&mut o, "bytes", a.data.as_deref().map(base64_decoded_len));
                Value::Object(o)
            })
            .collect();
        m.insert("attachments".into(), Value::Array(attachments));
    }
    if details.diff_count > 0 {
        m.insert("diffCount".into(), json!(details.diff_count));
    }
    (!m.is_empty()).then_some(Value::Object(m))
}

#[cfg(test)]
mod tests {
    //! The 17 cases of the upstream `acp-events.test.ts` (behaviour spec §2.1), plus ours.
    use super::*;
    use crate::agent::turn::{ChildSnapshot, RefineEdit};
    use crate::base::content::{Attachment, FileDiff};
    use crate::protocol::meta::NAMESPACE;

    /// The hot-path serialiser writes exactly what the general path writes.
    #[test]
    fn a_call_shown_while_it_streams_is_one_call_from_pending_to_its_end() {
        let mut st = MappingState::default();
        let pending = |args: Option<Value>| AgentEvent::ToolPending {
            id: "c1".into(),
            name: "bash".into(),
            args,
        };
        // (event, updates): the name alone opens the call; arguments update it; its start
        // completes it; its end closes it, and a later call with a new id is new again.
        let cases: Vec<(AgentEvent, Vec<Value>)> = vec![
            (
                pending(None),
                vec![
                    json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"bash","kind":"execute","status":"pending"}),
                ],
            ),
            (
                pending(Some(json!({"command": "ec"}))),
                vec![
                    json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","title":"ec","rawInput":{"command":"ec"}}),
                ],
            ),
            (
                AgentEvent::ToolStart {
                    id: "c1".into(),
                    name: "bash".into(),
                    args: json!({"command": "echo hi"}),
                    locations: vec![],
                    display: None,
                },
                vec![
                    json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","title":"echo hi","kind":"execute","status":"in_progress","rawInput":{"command":"echo hi"}}),
                ],
            ),
            (
                AgentEvent::ToolProgress {
                    id: "c1".into(),
                    output: "hi\n".into(),
                },
                vec![
                    json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","content":[{"type":"content","content":{"type":"text","text":"hi\n"}}],"rawOutput":""}),
                ],
            ),
            (
                AgentEvent::ToolEnd {
                    id: "c1".into(),
                    name: "bash".into(),
                    result: ToolResultView::default(),
                },
                vec![
                    json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"isError":false,"output":""}}),
                ],
            ),
            (
                AgentEvent::ToolStart {
                    id: "c2".into(),
                    name: "read".into(),
                    args: json!({"path": "a"}),
                    locations: vec![],
                    display: None,
                },
                vec![
                    json!({"sessionUpdate":"tool_call","toolCallId":"c2","title":"Read a","kind":"read","status":"in_progress","rawInput":{"path":"a"}}),
                ],
            ),
        ];
        for (i, (event, want)) in cases.into_iter().enumerate() {
            assert_eq!(to_session_updates(&event, &mut st), want, "case {i}");
        }
        // The ended call is forgotten; the started one is remembered until it ends.
        assert!(!st.announced.contains("c1") && !st.detailed.contains("c1"));
        assert!(st.announced.contains("c2"));
        // A call that ends without starting (cut off, refused) is forgotten too.
        to_session_updates(&pending(None), &mut st);
        to_session_updates(
            &AgentEvent::ToolEnd {
                id: "c1".into(),
                name: String::new(),
                result: ToolResultView::default(),
            },
            &mut st,
        );
        assert!(!st.announced.contains("c1") && !st.detailed.contains("c1"));
    }

    /// Harbor's reading of a tool update's output (`_stringify_tool_output` in
    /// `harbor.agents.installed.acp`, 0.25): `rawOutput.output` when a non-empty string, any
    /// other non-object `rawOutput` as a string, else the text of `content`; every non-empty
    /// one joins the call's observation.
    fn harbor_output(update: &Value) -> Option<String> {
        let text = match &update["rawOutput"] {
            Value::Object(raw) => match raw.get("output") {
                Some(Value::String(s)) if !s.is_empty() => return Some(s.clone()),
                _ => None,
            },
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        let text = text.unwrap_or_else(|| {
            update["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["content"]["text"].as_str())
                .collect()
        });
        (!text.is_empty()).then_some(text)
    }

    #[test]
    fn a_call_s_output_reaches_a_trajectory_builder_once_and_an_editor_live() {
        let mut st = MappingState::default();
        let progress = |output: &str| AgentEvent::ToolProgress {
            id: "c1".into(),
            output: output.into(),
        };
        let text = |t: &str| ToolResultView {
            text: Some(t.into()),
            ..ToolResultView::default()
        };
        // (events of one call, what Harbor's observation of it holds): live output in
        // `content` for editors, the model's result once.
        let cases: Vec<(Vec<AgentEvent>, Vec<&str>)> = vec![
            (vec![progress("a\n"), progress("a\nb\n")], vec!["a\nb\n"]),
            (vec![progress("partial")], vec!["partial, then cut"]),
            (vec![], vec!["no progress"]),
            (vec![progress("x")], vec![]),
        ];
        for (i, (events, want)) in cases.into_iter().enumerate() {
            let end = AgentEvent::ToolEnd {
                id: "c1".into(),
                name: "bash".into(),
                result: match want.first() {
                    Some(t) => text(t),
                    None => ToolResultView::default(),
                },
            };
            let updates: Vec<Value> = events
                .iter()
                .chain([&end])
                .flat_map(|e| to_session_updates(e, &mut st))
                .collect();
            for (update, event) in updates.iter().zip(&events) {
                let AgentEvent::ToolProgress { output, .. } = event else {
                    unreachable!()
                };
                assert_eq!(update["content"][0]["content"]["text"], *output, "case {i}");
            }
            let seen: Vec<String> = updates.iter().filter_map(harbor_output).collect();
            assert_eq!(seen, want, "case {i}: {updates:?}");
        }
    }

    #[test]
    fn json_str_escapes_as_serde_json_does() {
        let mut cases: Vec<String> = (0u8..0x80).map(|b| char::from(b).to_string()).collect();
        cases.extend(
            [
                "",
                "tok ",
                "a \"quoted\" \\ path\n\ttab\r\u{7f}\u{1}",
                "é ✓ 😀 mixed\u{1f}",
                &"x".repeat(200),
                &format!("{}\n{}", "y".repeat(70), "z".repeat(63)),
            ]
            .map(str::to_owned),
        );
        for s in cases {
            let out = framed(&s, |f| f.json_str(&s));
            let want = format!("x{}", serde_json::to_string(&s).unwrap());
            assert_eq!(String::from_utf8(out).unwrap(), want, "{s:?}");
        }
    }

    /// `x` and what `write` puts through a `Frame` sized for a frame around `s`.
    fn framed(s: &str, write: impl FnOnce(&mut Frame<'_>)) -> Vec<u8> {
        let mut out = b"x".to_vec();
        out.resize(1 + 6 * s.len() + 22, 0);
        let mut f = Frame {
            buf: &mut out[1..],
            at: 0,
        };
        write(&mut f);
        let end = 1 + f.at;
        out.truncate(end);
        out
    }

    #[test]
    fn the_worst_case_frame_fits_its_room() {
        use crate::protocol::meta::Phase;
        // Every string byte escaped to six, every number at its longest, the longer update.
        let worst = "\u{1}".repeat(50);
        for (phase, outcome_ok) in [
            (Phase::Event, None),
            (Phase::ResponseBoundary, Some(true)),
            (Phase::ResponseBoundary, Some(false)),
        ] {
            let env = Envelope {
                prompt_turn_id: u64::MAX,
                event_sequence: u64::MAX,
                phase,
                outcome_ok,
            };
            let mut buf = Vec::new();
            assert!(message_chunk_frame(
                &mut buf,
                &worst,
                DeltaKind::Thinking,
                &worst,
                Some(u64::MAX),
                env
            ));
            let frame: Value = serde_json::from_slice(&buf).unwrap();
            assert_eq!(frame["params"]["update"]["content"]["text"], worst.as_str());
            // The constant text alone stays under `FRAME_TEXT`.
            let escaped = 2 * (6 * worst.len() + 2);
            assert!(buf.len() - escaped - 3 * 20 < FRAME_TEXT, "{}", buf.len());
        }
    }

    #[test]
    fn update_meta_spells_the_namespace() {
        assert_eq!(
            UPDATE_META,
            format!(",\"update\":{{\"_meta\":{{\"{NAMESPACE}\":{{\"eventSequence\":")
        );
    }

    #[test]
    fn u64_writes_what_display_writes() {
        for n in [0, 7, 9, 10, 99, 100, 123_456_789_012, u64::MAX] {
            let out = framed("", |f| f.u64(n));
            assert_eq!(out, format!("x{n}").into_bytes());
        }
    }

    #[test]
    fn message_chunk_frame_matches_the_general_path() {
        use crate::protocol::meta::{apply_envelope, Phase};
        let texts = [
            "tok ",
            "",
            "a\"b\\c\n\r\t\u{0}\u{1f}\u{7f}",
            "héllo ✓ 😀 \u{2028}\u{2029} </script>",
            "{\"json\": [1, 2]}",
        ];
        let kinds = [DeltaKind::Text, DeltaKind::Thinking, DeltaKind::ToolCall];
        let phases = [Phase::Event, Phase::ResponseBoundary];
        for text in texts {
            for kind in kinds {
                for message in [None, Some(3)] {
                    for (phase, outcome_ok) in phases.into_iter().zip([None, Some(false)]) {
                        let env = Envelope {
                            prompt_turn_id: 7,
                            event_sequence: 123_456_789_012,
                            phase,
                            outcome_ok,
                        };
                        let mut state = MappingState::default();
                        for _ in 0..message.unwrap_or(0) {
                            to_session_updates(&AgentEvent::AssistantMessageStart, &mut state);
                        }
                        assert_eq!(state.assistant_message(), message);
                        let event = AgentEvent::MessageDelta {
                            assistant: true,
                            kind,
                            delta: text.to_owned(),
                        };
                        let general: Vec<String> = to_session_updates(&event, &mut state)
                            .into_iter()
                            .map(|mut update| {
                                apply_envelope(&mut update, env);
                                let frame = crate::protocol::rpc::notification(
                                    crate::protocol::acp::SESSION_UPDATE,
                                    json!({ "sessionId": "s-1\"x", "update": update }),
                                );
                                serde_json::to_string(&frame).unwrap()
                            })
                            .collect();
                        // Appended after what the buffer already holds, as in the outbox.
                        let mut buf = b"earlier frame\n".to_vec();
                        let wrote =
                            message_chunk_frame(&mut buf, "s-1\"x", kind, text, message, env);
                        let fast: Vec<String> = wrote
                            .then(|| String::from_utf8(buf[14..].to_vec()).unwrap())
                            .into_iter()
                            .collect();
                        assert_eq!(fast, general, "{kind:?} {text:?} {message:?} {phase:?}");
                    }
                }
            }
        }
    }

    fn map(event: AgentEvent) -> Vec<Value> {
        to_session_updates(&event, &mut MappingState::default())
    }

    fn text(delta: &str) -> AgentEvent {
        AgentEvent::MessageDelta {
            assistant: true,
            kind: DeltaKind::Text,
            delta: delta.into(),
        }
    }

    fn meta(update: &Value) -> &Value {
        &update["_meta"][NAMESPACE]
    }

    #[test]
    fn c01_text_delta_is_agent_message_chunk() {
        assert_eq!(
            map(text("hello")),
            vec![
                json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"}})
            ]
        );
    }

    #[test]
    fn c02_thinking_delta_is_agent_thought_chunk() {
        let ev = AgentEvent::MessageDelta {
            assistant: true,
            kind: DeltaKind::Thinking,
            delta: "hmm".into(),
        };
        assert_eq!(map(ev)[0]["sessionUpdate"], "agent_thought_chunk");
    }

    #[test]
    fn c03_ignores_empty_deltas_and_non_assistant_messages() {
        assert!(map(text("")).is_empty());
        let user = AgentEvent::MessageDelta {
            assistant: false,
            kind: DeltaKind::Text,
            delta: "x".into(),
        };
        assert!(map(user).is_empty());
        let tc = AgentEvent::MessageDelta {
            assistant: true,
            kind: DeltaKind::ToolCall,
            delta: "{".into(),
        };
        assert!(map(tc).is_empty());
    }

    #[test]
    fn c04_ipython_is_an_execute_call_carrying_its_source() {
        assert_eq!(tool_kind("ipython"), "execute");
        let ev = AgentEvent::ToolStart {
            id: "call-1".into(),
            name: "ipython".into(),
            args: json!({"code":"print(1)"}),
            locations: vec![],
            display: None,
        };
        // Title: the cell's first line, not the constant "IPython cell" (upstream issue #1307).
        assert_eq!(
            map(ev),
            vec![
                json!({"sessionUpdate":"tool_call","toolCallId":"call-1","title":"print(1)",
                "kind":"execute","status":"in_progress","rawInput":{"code":"print(1)"}})
            ]
        );
    }

    #[test]
    fn c05_rich_ipython_output() {
        let ev = AgentEvent::ToolEnd {
            id: "call-1".into(),
            name: "ipython".into(),
            result: ToolResultView {
                text: Some("done".into()),
                ipython: Some(IpythonDetails {
                    attachments: vec![Attachment {
                        mime_type: Some("image/png".into()),
                        path: Some("/tmp/plot.png".into()),
                        data: Some("aGVsbG8=".into()),
                    }],
                    diff_count: 1,
                }),
                ..Default::default()
            },
        };
        let u = &map(ev)[0];
        assert_eq!(u["status"], "completed");
        assert_eq!(u["content"][0]["content"]["text"], "done");
        assert_eq!(
            u["_meta"],
            json!({NAMESPACE: {"ipython":{"attachments":[{"mimeType":"image/png","path":"/tmp/plot.png","bytes":5}],"diffCount":1}}})
        );
    }

    #[test]
    fn c06_omits_ipython_meta_when_cell_produced_none() {
        let ev = AgentEvent::ToolEnd {
            id: "c".into(),
            name: "ipython".into(),
            result: ToolResultView {
                text: Some("x".into()),
                ipython: Some(IpythonDetails::default()),
                ..Default::default()
            },
        };
        assert!(map(ev)[0].get("_meta").is_none());
    }

    #[test]
    fn c07_failed_tool_calls_are_failed() {
        let ev = AgentEvent::ToolEnd {
            id: "c".into(),
            name: "custom".into(),
            result: ToolResultView {
                text: Some("boom".into()),
                is_error: true,
                ..Default::default()
            },
        };
        assert_eq!(map(ev)[0]["status"], "failed");
    }

    #[test]
    fn c08_bash_has_a_stable_synthetic_id() {
        let mut st = MappingState::default();
        let start = AgentEvent::BashStart {
            run_id: Some("r1".into()),
            command: "ls".into(),
        };
        let out = AgentEvent::BashOutput {
            chunk: "a\n".into(),
        };
        let end = AgentEvent::BashEnd {
            run_id: Some("r1".into()),
            exit_code: Some(0),
            cancelled: false,
        };
        let s = to_session_updates(&start, &mut st);
        let o = to_session_updates(&out, &mut st);
        let e = to_session_updates(&end, &mut st);
        let id = bash_tool_call_id(Some("r1"));
        assert_eq!(id, "prime-agent-bash-r1");
        for u in [&s[0], &o[0], &e[0]] {
            assert_eq!(u["toolCallId"], json!(id));
        }
        assert_eq!(s[0]["kind"], "execute");
        assert_eq!(s[0]["status"], "in_progress");
        assert_eq!(s[0]["rawInput"], json!({"command":"ls"}));
        assert_eq!(e[0]["status"], "completed");
        assert!(st.active_bash_run_id.is_none());
    }

    #[test]
    fn bash_updates_carry_the_output_so_far() {
        let mut st = MappingState::default();
        let run = Some("r".to_string());
        to_session_updates(
            &AgentEvent::BashStart {
                run_id: run.clone(),
                command: "x".into(),
            },
            &mut st,
        );
        to_session_updates(
            &AgentEvent::BashOutput {
                chunk: "a\n".into(),
            },
            &mut st,
        );
        let second = to_session_updates(
            &AgentEvent::BashOutput {
                chunk: "b\n".into(),
            },
            &mut st,
        );
        assert_eq!(second[0]["content"][0]["content"]["text"], "a\nb\n");
        let big = "é".repeat(BASH_TAIL_BYTES);
        let capped = to_session_updates(&AgentEvent::BashOutput { chunk: big }, &mut st);
        assert!(
            capped[0]["content"][0]["content"]["text"]
                .as_str()
                .unwrap()
                .len()
                <= BASH_TAIL_BYTES
        );
        let end = to_session_updates(
            &AgentEvent::BashEnd {
                run_id: run,
                exit_code: Some(0),
                cancelled: false,
            },
            &mut st,
        );
        assert!(end[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .ends_with("é"));
    }

    #[test]
    fn c09_bash_non_zero_exit_fails() {
        let ev = AgentEvent::BashEnd {
            run_id: Some("r".into()),
            exit_code: Some(1),
            cancelled: false,
        };
        assert_eq!(map(ev)[0]["status"], "failed");
    }

    #[test]
    fn c10_subagent_updates_are_namespaced_meta() {
        let ev = AgentEvent::ChildUpdate(ChildSnapshot {
            id: "sub-1".into(),
            session_name: Some("reviewer".into()),
            status: "running".into(),
            ..Default::default()
        });
        let u = &map(ev)[0];
        assert_eq!(u["sessionUpdate"], "session_info_update");
        assert_eq!(
            meta(u)["subagents"],
            json!([{"id":"sub-1","sessionName":"reviewer","status":"running"}])
        );
    }

    #[test]
    fn c11_compaction_is_meta() {
        let ev = AgentEvent::CompactionEnd {
            error: None,
            tokens_before: Some(1234),
            summary: Some("compacted".into()),
            reason: None,
        };
        assert_eq!(
            meta(&map(ev)[0])["compaction"],
            json!({"tokensBefore":1234,"summary":"compacted"})
        );
        let aborted = AgentEvent::CompactionEnd {
            error: None,
            tokens_before: None,
            summary: None,
            reason: None,
        };
        assert_eq!(meta(&map(aborted)[0])["compaction"], json!({}));
        // Ours, additive: why it ran.
        let failed = AgentEvent::CompactionEnd {
            error: None,
            tokens_before: None,
            summary: None,
            reason: Some("overflow".into()),
        };
        assert_eq!(
            meta(&map(failed)[0])["compaction"],
            json!({"reason":"overflow"})
        );
    }

    #[test]
    fn c12_goal_state_is_meta() {
        let ev = AgentEvent::GoalUpdate {
            status: "active".into(),
            objective: Some("ship ACP".into()),
            token_budget: Some(1000),
            tokens_used: Some(25),
        };
        assert_eq!(
            meta(&map(ev)[0])["goal"],
            json!({"status":"active","objective":"ship ACP","tokenBudget":1000,"tokensUsed":25})
        );
    }

    #[test]
    fn c13_refinement_reports_applied_edits_only() {
        let ev = AgentEvent::RefineComplete {
            summary: Some("s".into()),
            edits: vec![
                RefineEdit {
                    action: "create".into(),
                    kind: "memory".into(),
                    id: "m1".into(),
                    applied: true,
                },
                RefineEdit {
                    action: "delete".into(),
                    kind: "skill".into(),
                    id: "s1".into(),
                    applied: false,
                },
            ],
        };
        assert_eq!(
            meta(&map(ev)[0])["refinement"]["changes"],
            json!(["create memory:m1"])
        );
        let failed = AgentEvent::RefineFailed {
            error: "budget exhausted".into(),
        };
        assert_eq!(
            meta(&map(failed)[0])["refinement"],
            json!({"status":"failed","error":"budget exhausted"})
        );
    }

    #[test]
    fn c14_agent_messages_sent_from_the_kernel() {
        let ev = AgentEvent::AgentMessageSent {
            tool_call_id: "cell-9".into(),
            target: Some("reviewer".into()),
            delivery_status: Some("queued".into()),
        };
        assert_eq!(
            meta(&map(ev)[0])["agentMessage"],
            json!({"toolCallId":"cell-9","target":"reviewer","deliveryStatus":"queued"})
        );
    }

    #[test]
    fn c15_stateless_bash_output_and_compaction() {
        let mut st = MappingState::default();
        let s = to_session_updates(
            &AgentEvent::BashStart {
                run_id: None,
                command: "echo hi".into(),
            },
            &mut st,
        );
        let o = to_session_updates(
            &AgentEvent::BashOutput {
                chunk: "hi\n".into(),
            },
            &mut st,
        );
        let e = to_session_updates(
            &AgentEvent::BashEnd {
                run_id: None,
                exit_code: Some(0),
                cancelled: false,
            },
            &mut st,
        );
        assert_eq!(s[0]["kind"], "execute");
        assert_eq!(s[0]["toolCallId"], "prime-agent-bash");
        assert!(o[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("hi"));
        assert_eq!(e[0]["status"], "completed");
        let c = AgentEvent::CompactionEnd {
            error: None,
            tokens_before: Some(90000),
            summary: Some("kept the last turns".into()),
            reason: None,
        };
        assert_eq!(
            meta(&map(c)[0])["compaction"],
            json!({"tokensBefore":90000,"summary":"kept the last turns"})
        );
    }

    #[test]
    fn c16_cancelled_bash_run_fails() {
        let ev = AgentEvent::BashEnd {
            run_id: Some("r".into()),
            exit_code: None,
            cancelled: true,
        };
        assert_eq!(map(ev)[0]["status"], "failed");
    }

    // Upstream case 17 (lifecycle events with no ACP place map to nothing) has no variant
    // here: nothing produces such events, so the type does not carry them.

    #[test]
    fn chunks_carry_a_message_id_per_assistant_message_and_usage_is_reported() {
        let mut st = MappingState::default();
        assert!(to_session_updates(&text("a"), &mut st)[0]
            .get("messageId")
            .is_none());
        to_session_updates(&AgentEvent::AssistantMessageStart, &mut st);
        assert_eq!(
            to_session_updates(&text("b"), &mut st)[0]["messageId"],
            "prime-agent-assistant-1"
        );
        to_session_updates(&AgentEvent::AssistantMessageStart, &mut st);
        assert_eq!(
            to_session_updates(&text("c"), &mut st)[0]["messageId"],
            "prime-agent-assistant-2"
        );
        let usage = AgentEvent::ContextUsage {
            used: 1200,
            size: Some(128_000),
            cost: None,
            children: None,
        };
        assert_eq!(
            to_session_updates(&usage, &mut st),
            vec![json!({"sessionUpdate":"usage_update","used":1200,"size":128000})]
        );
        let priced = AgentEvent::ContextUsage {
            used: 1200,
            size: Some(128_000),
            cost: Some(0.25),
            children: None,
        };
        assert_eq!(
            to_session_updates(&priced, &mut st),
            vec![
                json!({"sessionUpdate":"usage_update","used":1200,"size":128000,"cost":{"amount":0.25,"currency":"USD"}})
            ]
        );
        let with_children = AgentEvent::ContextUsage {
            used: 1200,
            size: Some(128_000),
            cost: Some(0.25),
            children: Some(crate::agent::turn::attribution::ChildTotals {
                usage: crate::provider::Usage {
                    input: 100,
                    output: 10,
                    cache_read: 5,
                    cache_write: 0,
                },
                cost: 0.125,
            }),
        };
        assert_eq!(
            to_session_updates(&with_children, &mut st),
            vec![
                json!({"sessionUpdate":"usage_update","used":1200,"size":128000,"cost":{"amount":0.25,"currency":"USD"},
                    "_meta":{NAMESPACE:{"childUsage":{"inputTokens":100,"outputTokens":10,"cachedReadTokens":5,"cachedWriteTokens":0,"totalTokens":115,"cost":0.125}}}})
            ]
        );
        assert!(to_session_updates(
            &AgentEvent::ContextUsage {
                used: 0,
                size: Some(1),
                cost: None,
                children: None,
            },
            &mut st
        )
        .is_empty());
        assert!(to_session_updates(
            &AgentEvent::ContextUsage {
                used: 5,
                size: None,
                cost: None,
                children: None,
            },
            &mut st
        )
        .is_empty());
    }

    #[test]
    fn a_todo_list_is_the_whole_plan() {
        let entry = |content: &str, status: &str| crate::base::content::PlanEntry {
            content: content.into(),
            status: status.into(),
            priority: "high".into(),
        };
        let ev = AgentEvent::Plan(vec![entry("a", "completed"), entry("b", "pending")]);
        assert_eq!(
            map(ev),
            vec![json!({"sessionUpdate": "plan", "entries": [
                {"content": "a", "status": "completed", "priority": "high"},
                {"content": "b", "status": "pending", "priority": "high"},
            ]})]
        );
        assert_eq!(
            map(AgentEvent::Plan(Vec::new())),
            vec![json!({"sessionUpdate": "plan", "entries": []})]
        );
        assert_eq!(tool_kind("todo"), "think");
        assert_eq!(tool_title("todo", &json!({})), "Update the plan");
    }

    #[test]
    fn heartbeats_changed_is_meta() {
        assert_eq!(
            meta(&map(AgentEvent::HeartbeatsChanged)[0]),
            &json!({"heartbeatsChanged": true})
        );
    }

    #[test]
    fn titles_say_what_the_call_does() {
        let cases = [
            ("bash", json!({"command":"cargo test"}), "cargo test"),
            ("read", json!({"path":"src/main.rs"}), "Read src/main.rs"),
            ("write", json!({"path":"a.txt","content":""}), "Write a.txt"),
            ("edit", json!({"path":"a.txt"}), "Edit a.txt"),
            (
                "ipython",
                json!({"code":"# Load the data\nimport pandas"}),
                "Load the data",
            ),
            ("ipython", json!({"code":"\n\nx = 1\ny = 2"}), "x = 1"),
            ("ipython", json!({"code":"%%bash\nls -la"}), "bash: ls -la"),
            ("ipython", json!({}), "ipython"),
            ("mystery", json!({}), "mystery"),
        ];
        for (name, args, want) in cases {
            assert_eq!(tool_title(name, &args), want, "{name} {args}");
        }
        assert_eq!(tool_title("bash", &json!({"command":"a\nb"})), "a…");
    }

    #[test]
    fn file_tools_carry_locations_and_diffs() {
        let start = AgentEvent::ToolStart {
            id: "t".into(),
            name: "edit".into(),
            args: json!({"path":"a.txt"}),
            locations: vec!["/p/a.txt".into()],
            display: None,
        };
        assert_eq!(map(start)[0]["locations"], json!([{"path":"/p/a.txt"}]));
        let end = AgentEvent::ToolEnd {
            id: "t".into(),
            name: "edit".into(),
            result: ToolResultView {
                text: Some("ok".into()),
                diff: Some(FileDiff {
                    path: "/p/a.txt".into(),
                    old_text: Some("a".into()),
                    new_text: "b".into(),
                }),
                ..Default::default()
            },
        };
        assert_eq!(
            map(end)[0]["content"][1],
            json!({"type":"diff","path":"/p/a.txt","oldText":"a","newText":"b"})
        );
    }

    /// §7.3: `autoRetry` rides on `session_info_update` with exactly the upstream fields.
    #[test]
    fn auto_retry_phases_are_session_info_meta() {
        let waiting = AgentEvent::AutoRetry(RetryPhase::Waiting {
            attempt: 1,
            max_attempts: 3,
            delay_ms: 2000,
            reason: "server_error".into(),
            error_message: "500 boom".into(),
        });
        assert_eq!(
            map(waiting),
            vec![
                json!({"sessionUpdate":"session_info_update","_meta":{NAMESPACE:{"autoRetry":{
                "phase":"waiting","attempt":1,"maxAttempts":3,"delayMs":2000,
                "reason":"server_error","errorMessage":"500 boom"}}}})
            ]
        );
        let recovered = map(AgentEvent::AutoRetry(RetryPhase::Recovered { attempt: 2 }));
        assert_eq!(
            meta(&recovered[0]),
            &json!({"autoRetry":{"phase":"recovered","attempt":2}})
        );
        let exhausted = map(AgentEvent::AutoRetry(RetryPhase::Exhausted {
            attempt: 3,
            error_message: "429 slow down".into(),
        }));
        assert_eq!(
            meta(&exhausted[0]),
            &json!({"autoRetry":{"phase":"exhausted","attempt":3,"errorMessage":"429 slow down"}})
        );
    }

    /// MCP server states go out whole under `_meta[ns].mcp`; an MCP tool's own title and
    /// kind replace the name-based ones.
    #[test]
    fn mcp_status_and_tool_display() {
        let servers = json!([{"name":"a","status":"ready","tools":2}]);
        let updates = map(AgentEvent::McpStatus(servers.clone()));
        assert_eq!(updates[0]["sessionUpdate"], "session_info_update");
        assert_eq!(meta(&updates[0]), &json!({ "mcp": servers }));
        let start = map(AgentEvent::ToolStart {
            id: "m".into(),
            name: "mcp__a__get".into(),
            args: json!({"q": 1}),
            locations: vec![],
            display: Some(crate::tools::ToolDisplay {
                title: "a: get".into(),
                kind: "fetch",
            }),
        });
        assert_eq!(
            (&start[0]["title"], &start[0]["kind"], &start[0]["rawInput"]),
            (&json!("a: get"), &json!("fetch"), &json!({"q": 1}))
        );
    }

    /// A notice has ACP's `notice` fields, under `_meta[ns].notice` of a `session_info_update`
    /// (not an `agent_message_chunk`: it is not the model's words).
    #[test]
    fn notice_is_session_info_meta() {
        let ev = AgentEvent::Notice {
            severity: "warning".into(),
            title: "t".into(),
            description: Some("d".into()),
        };
        let updates = map(ev);
        assert_eq!(updates[0]["sessionUpdate"], "session_info_update");
        assert_eq!(
            meta(&updates[0]),
            &json!({"notice":{"severity":"warning","title":"t","description":"d"}})
        );
        let bare = map(AgentEvent::Notice {
            severity: "info".into(),
            title: "t".into(),
            description: None,
        });
        assert_eq!(
            meta(&bare[0]),
            &json!({"notice":{"severity":"info","title":"t"}})
        );
    }
}
