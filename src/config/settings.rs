//! `settings.json` (behaviour spec §6.5): the global `<agent dir>/settings.json` with the
//! project's `<cwd>/.prime/agent/settings.json` merged over it (nested objects merged key by
//! key, the project wins). Read once at start-up; a file that exists but is not a JSON object
//! is a start-up error naming it, and keys we do not act on are ignored.
//!
//! `compaction.*` keeps its own reader (`compaction::Settings`, per agent and cwd); this one
//! holds the keys start-up acts on.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::thinking::Thinking;
use crate::protocol::acp::{self, McpServer};

/// `retry.*` (§5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retry {
    pub enabled: bool,
    pub max_retries: u32,
    pub base_delay_ms: u64,
    /// `retry.provider.maxRetryDelayMs`: the longest server-requested wait (`Retry-After`)
    /// a retry honours; a longer one ends the retries (0: no cap).
    pub max_retry_delay_ms: u64,
    /// `retry.provider.waitForUsage.*`.
    pub wait_for_usage: WaitForUsage,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            enabled: true,
            max_retries: 3,
            base_delay_ms: 2_000,
            max_retry_delay_ms: 60_000,
            wait_for_usage: WaitForUsage::default(),
        }
    }
}

/// `retry.provider.waitForUsage.*`: once a usage or rate limit (429) outlasts the retries, the
/// call waits for the limit to reset (the time the provider names, or pings with growing
/// delays) within these bounds (`provider::http::usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitForUsage {
    pub enabled: bool,
    /// The first blind ping's delay, doubled for each next one.
    pub base_delay_ms: u64,
    /// The longest blind ping delay.
    pub max_delay_ms: u64,
    pub max_attempts: u32,
    /// The longest total wait.
    pub max_wait_ms: u64,
}

impl Default for WaitForUsage {
    fn default() -> WaitForUsage {
        WaitForUsage {
            enabled: true,
            base_delay_ms: 1_000,
            max_delay_ms: 300_000,
            max_attempts: 30,
            max_wait_ms: 900_000,
        }
    }
}

/// `images.*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Images {
    /// `images.blockImages`: no image reaches the model (prompt images and kernel attachments
    /// are refused with a clear text).
    pub block: bool,
    /// `images.autoResize` (default on): the kernel shrinks a large `attach_image` input
    /// when Pillow is importable there.
    pub auto_resize: bool,
}

impl Default for Images {
    fn default() -> Images {
        Images {
            block: false,
            auto_resize: true,
        }
    }
}

/// `autoRefine.*` (§5.4): when the main agent reviews its session by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AutoRefine {
    pub enabled: bool,
    /// Assistant turns (model calls) between reviews; 0: none by count.
    pub turn_interval: u64,
    /// A review after a compaction.
    pub compact: bool,
    /// The least time between two automatic reviews.
    pub cooldown_ms: u64,
}

impl Default for AutoRefine {
    fn default() -> AutoRefine {
        AutoRefine {
            enabled: true,
            turn_interval: 25,
            compact: true,
            cooldown_ms: 1_200_000,
        }
    }
}

/// The `autoRefine` keys of merged settings; a value of the wrong type keeps its default
/// and is reported in `w`.
pub(crate) fn auto_refine(v: &Value, w: &mut Vec<String>) -> AutoRefine {
    let mut a = AutoRefine::default();
    if let Some(b) = flag(v, "autoRefine.enabled", w) {
        a.enabled = b;
    }
    if let Some(n) = count(v, "autoRefine.turnInterval", w) {
        a.turn_interval = n;
    }
    if let Some(b) = flag(v, "autoRefine.compact", w) {
        a.compact = b;
    }
    if let Some(n) = count(v, "autoRefine.cooldownMs", w) {
        a.cooldown_ms = n;
    }
    a
}

/// `thinkingBudgets`: thinking tokens per level for the APIs that take a token budget
/// (Anthropic Messages, Gemini 2.5); `None`: the API's default for that level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ThinkingBudgets {
    pub minimal: Option<u64>,
    pub low: Option<u64>,
    pub medium: Option<u64>,
    pub high: Option<u64>,
}

impl ThinkingBudgets {
    /// The configured budget of level `t` (`xhigh` and `max` have none: upstream's four).
    pub(crate) fn of(&self, t: Thinking) -> Option<u64> {
        match t {
            Thinking::Minimal => self.minimal,
            Thinking::Low => self.low,
            Thinking::Medium => self.medium,
            Thinking::High => self.high,
            Thinking::Off | Thinking::XHigh | Thinking::Max => None,
        }
    }
}

fn thinking_budgets(v: &Value, w: &mut Vec<String>) -> ThinkingBudgets {
    let mut level = |name: &str| {
        let key = format!("thinkingBudgets.{name}");
        match count(v, &key, w)? {
            0 => {
                w.push(wrong(&key, "a positive integer"));
                None
            }
            n => Some(n),
        }
    };
    if at(v, "thinkingBudgets").is_some_and(|b| !b.is_object()) {
        w.push(wrong(
            "thinkingBudgets",
            "an object of token budgets by level",
        ));
        return ThinkingBudgets::default();
    }
    ThinkingBudgets {
        minimal: level("minimal"),
        low: level("low"),
        medium: level("medium"),
        high: level("high"),
    }
}

/// A limit of `autonomous.*`: a positive integer, or `"unlimited"` (`u64::MAX`, never reached).
pub(crate) const UNLIMITED: u64 = u64::MAX;

/// `autonomous.*` (ours: upstream has no settings key for autonomous mode): what a session
/// starts with when the matching `--autonomous-*` flag is not given. `None`: not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Autonomous {
    /// `autonomous.enabled`: every session starts in autonomous mode, as with `--autonomous`.
    pub enabled: Option<bool>,
    pub max_continuations: Option<u64>,
    pub max_turns: Option<u64>,
    pub max_tokens: Option<u64>,
    pub timeout_ms: Option<u64>,
    /// `autonomous.gates.commands`: the gate commands (`--autonomous-gate`, which does not
    /// enable the mode from settings).
    pub gate_commands: Option<Vec<String>>,
    pub gate_max_retries: Option<u64>,
    pub gate_timeout_ms: Option<u64>,
}

/// The `autonomous` keys of merged settings; a bad value keeps its default, reported in `w`.
fn autonomous(v: &Value, w: &mut Vec<String>) -> Autonomous {
    let limit = |key: &str, w: &mut Vec<String>| match at(v, key)? {
        Value::String(s) if s == "unlimited" => Some(UNLIMITED),
        x => match x.as_u64().filter(|n| *n > 0) {
            Some(n) => Some(n),
            None => {
                w.push(wrong(key, "a positive integer or \"unlimited\""));
                None
            }
        },
    };
    let positive = |key: &str, w: &mut Vec<String>| match count(v, key, w)? {
        0 => {
            w.push(wrong(key, "a positive integer"));
            None
        }
        n => Some(n),
    };
    let gate_commands = match at(v, "autonomous.gates.commands") {
        None => None,
        Some(Value::Array(items))
            if items
                .iter()
                .all(|c| c.as_str().is_some_and(|c| !c.trim().is_empty())) =>
        {
            Some(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            )
        }
        Some(_) => {
            w.push(wrong(
                "autonomous.gates.commands",
                "a list of shell commands",
            ));
            None
        }
    };
    Autonomous {
        enabled: flag(v, "autonomous.enabled", w),
        max_continuations: limit("autonomous.maxContinuations", w),
        max_turns: limit("autonomous.maxTurns", w),
        max_tokens: limit("autonomous.maxTokens", w),
        timeout_ms: limit("autonomous.timeoutMs", w),
        gate_commands,
        gate_max_retries: positive("autonomous.gates.maxRetries", w),
        gate_timeout_ms: positive("autonomous.gates.timeoutMs", w),
    }
}

/// `sandbox`: a mode string, or `{"mode", "writable": [paths], "network": bool}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SandboxSettings {
    /// As written: start-up validates it (a bad mode fails start-up).
    pub mode: Option<String>,
    pub writable: Vec<PathBuf>,
    pub network: Option<bool>,
}

/// The `sandbox` key of one file's object.
fn sandbox_of(v: &Value, w: &mut Vec<String>) -> SandboxSettings {
    let mut s = SandboxSettings::default();
    match v.get("sandbox") {
        None | Some(Value::Null) => {}
        Some(Value::String(mode)) => s.mode = Some(mode.clone()),
        Some(Value::Object(_)) => {
            s.mode = string(v, "sandbox.mode", w);
            s.network = flag(v, "sandbox.network", w);
            match at(v, "sandbox.writable") {
                None => {}
                Some(Value::Array(items)) => s
                    .writable
                    .extend(items.iter().filter_map(Value::as_str).map(PathBuf::from)),
                Some(_) => w.push(wrong("sandbox.writable", "a list of paths")),
            }
        }
        Some(_) => w.push(wrong("sandbox", "a mode or an object")),
    }
    s
}

/// The keys start-up acts on, after the merge.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Settings {
    pub default_provider: Option<String>,
    pub default_model: Option<String>,
    pub default_thinking: Option<Thinking>,
    pub retry: Retry,
    pub rlm_max_depth: Option<u32>,
    pub shell_path: Option<String>,
    pub shell_command_prefix: Option<String>,
    pub session_dir: Option<PathBuf>,
    pub enabled_models: Option<Vec<String>>,
    pub images: Images,
    /// `kernel.prewarm` (default on): warm the kernel zygote when a session with `ipython` is
    /// built; off, Python starts at the first cell (`PRIME_AGENT_KERNEL_PREWARM` wins).
    pub kernel_prewarm: Option<bool>,
    pub auto_refine: AutoRefine,
    /// `sandbox`, from the global file only (a project's file cannot loosen it).
    pub sandbox: SandboxSettings,
    /// `mcpServers` (`{"<name>": {...}}`): started in every session beside the client's
    /// (whose servers win on a name clash). An entry that does not validate is a warning.
    pub mcp_servers: Vec<McpServer>,
    /// `providerBackupModel` (`provider/id` or a bare id): takes a model call the session's
    /// model failed for good (`provider::failover`).
    pub backup_model: Option<String>,
    /// `subagentDefaultModel` (`provider/id` or a bare id): the model of an `rlm(...)` child
    /// whose call names none (else the session's model).
    pub subagent_model: Option<String>,
    /// `auxiliaryModel` (`provider/id` or a bare id): the model of the side calls (compaction
    /// summaries, refine's review gate and planner; else the session's model).
    pub auxiliary_model: Option<String>,
    /// `autonomous.*`.
    pub autonomous: Autonomous,
    /// `thinkingBudgets`.
    pub thinking_budgets: ThinkingBudgets,
    /// `defaultServiceTier`: the OpenAI service tier every session starts with (`None`: none
    /// is sent).
    pub default_service_tier: Option<String>,
    /// `cacheKeepAlive`: the interval of the prompt-cache keep-alive while tools run (`None`:
    /// off, the default).
    pub cache_keep_alive_ms: Option<u64>,
    /// `steeringMode` (`queueMode`, its old name, when it is absent) is `"all"`.
    pub steering_all: bool,
    /// `followUpMode` is `"all"`.
    pub follow_ups_all: bool,
    /// `skills` of both files (the project's first), each resolved against its file's base
    /// dir (`<cwd>/.prime/agent`, the agent dir); `~/` is the home directory.
    pub skill_paths: Vec<PathBuf>,
    /// `prompts`, the same way: template files or directories of them.
    pub prompt_paths: Vec<PathBuf>,
    /// `enableSkillCommands` (default on): each skill is a `skill:<name>` command.
    pub enable_skill_commands: Option<bool>,
    /// `enableBuiltinSkills` (default on): the kernel's built-in skills (`skill_creator`, the
    /// stubs of upstream's service skills).
    pub enable_builtin_skills: Option<bool>,
    /// Values of known keys that had the wrong type (ignored), for start-up warnings.
    pub warnings: Vec<String>,
}

/// The two files, global first.
pub(crate) fn paths(agent_dir: &Path, cwd: &Path) -> [PathBuf; 2] {
    [
        agent_dir.join("settings.json"),
        cwd.join(".prime").join("agent").join("settings.json"),
    ]
}

/// Reads and merges both files; a missing file counts as `{}`.
pub(crate) fn load(agent_dir: &Path, cwd: &Path) -> Result<Settings, String> {
    let (merged, [global, project]) = read_files(agent_dir, cwd)?;
    let mut settings = from_value(&merged);
    let mut w = Vec::new();
    // Resource paths are relative to the file that names them (upstream's rule), so each
    // file's list is read on its own: the project's first, then the global one.
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let bases = [
        (project.as_ref(), cwd.join(".prime").join("agent")),
        (global.as_ref(), agent_dir.to_path_buf()),
    ];
    for (file, base) in bases {
        let Some(file) = file else { continue };
        let home = home.as_deref();
        settings
            .skill_paths
            .extend(resource_paths(file, "skills", &base, home, &mut w));
        settings
            .prompt_paths
            .extend(resource_paths(file, "prompts", &base, home, &mut w));
    }
    // The sandbox is the user's: a repository's project file does not decide it.
    settings.sandbox = global.map_or_else(SandboxSettings::default, |g| sandbox_of(&g, &mut w));
    settings.warnings.extend(w);
    Ok(settings)
}

/// One file's `skills` or `prompts` list, resolved against `base` (`~/` against `home`).
/// Upstream's patterns (globs, `!`, `+`, `-` entries) are not taken: each is a warning.
fn resource_paths(
    file: &Value,
    key: &str,
    base: &Path,
    home: Option<&Path>,
    w: &mut Vec<String>,
) -> Vec<PathBuf> {
    let items = match at(file, key) {
        None => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => {
            w.push(wrong(key, "a list of paths"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for item in items {
        match item.as_str().map(str::trim) {
            Some(p) if p.starts_with(['!', '+', '-']) || p.contains(['*', '?', '[']) => {
                w.push(format!(
                    "Ignoring settings key {key}: the pattern {p} is not supported (give a file or directory)"
                ))
            }
            Some("") | None => w.push(wrong(key, "a list of paths")),
            Some(p) => out.push(match (p.strip_prefix("~/"), home) {
                (Some(rest), Some(home)) => home.join(rest),
                _ => base.join(p),
            }),
        }
    }
    out
}

/// The one reader of `settings.json`: both files, bounded (`untrusted`), merged, the project's
/// over the global one. Start-up (`load`) fails on its error; a session in another cwd
/// (`compaction::Settings::load`) logs it and goes on with the defaults.
pub(crate) fn read_merged(agent_dir: &Path, cwd: &Path) -> Result<Value, String> {
    read_files(agent_dir, cwd).map(|(merged, _)| merged)
}

/// Both files merged, and each alone (global, project; `None`: there is none).
type Files = (Value, [Option<Value>; 2]);

fn read_files(agent_dir: &Path, cwd: &Path) -> Result<Files, String> {
    let mut merged = Value::Object(Default::default());
    let mut each = [None, None];
    for (i, path) in paths(agent_dir, cwd).into_iter().enumerate() {
        // Bounded: the project's file comes from whatever repository the cwd is in.
        let text = match crate::base::untrusted::read_text(&path, crate::base::untrusted::JSON_CAP)
        {
            Ok(t) => t,
            Err(crate::base::untrusted::Skip::NotFound) => continue,
            Err(e) => return Err(format!("Cannot read settings file {}: {e}", path.display())),
        };
        let value = parse_file(&path, &text)?;
        each[i] = Some(value.clone());
        merge(&mut merged, value);
    }
    Ok((merged, each))
}

/// One file's text as a JSON object, or the start-up error naming the file.
pub(crate) fn parse_file(path: &Path, text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(format!(
            "Invalid settings file {}: expected a JSON object",
            path.display()
        )),
        Err(e) => Err(format!("Invalid settings file {}: {e}", path.display())),
    }
}

/// `over` merged into `base`: objects key by key (recursively), anything else replaced.
pub(crate) fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// The typed view of the merged settings. A known key of the wrong type keeps its default
/// and is reported in `warnings`.
pub(crate) fn from_value(v: &Value) -> Settings {
    let mut s = Settings::default();
    let mut w = Vec::new();
    s.default_provider = string(v, "defaultProvider", &mut w);
    s.default_model = string(v, "defaultModel", &mut w);
    if let Some(level) = string(v, "defaultThinkingLevel", &mut w) {
        match Thinking::parse(&level) {
            Some(t) => s.default_thinking = Some(t),
            None => w.push(format!(
                "Invalid thinking level \"{level}\". Valid values: {}",
                Thinking::NAMES
            )),
        }
    }
    s.shell_path = string(v, "shellPath", &mut w);
    // A prefix is used as written (it may end in a newline on purpose).
    match v.get("shellCommandPrefix") {
        None | Some(Value::Null) => {}
        Some(Value::String(p)) => {
            s.shell_command_prefix = Some(p.clone()).filter(|p| !p.is_empty())
        }
        Some(_) => w.push(wrong("shellCommandPrefix", "a string")),
    }
    s.session_dir = string(v, "sessionDir", &mut w).map(PathBuf::from);
    s.rlm_max_depth = count(v, "rlmMaxDepth", &mut w).map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    match v.get("enabledModels") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            s.enabled_models = Some(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect(),
            )
        }
        Some(_) => w.push(wrong("enabledModels", "a list of model patterns")),
    }
    if let Some(b) = flag(v, "retry.enabled", &mut w) {
        s.retry.enabled = b;
    }
    if let Some(n) = count(v, "retry.maxRetries", &mut w) {
        s.retry.max_retries = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(n) = count(v, "retry.baseDelayMs", &mut w) {
        s.retry.base_delay_ms = n;
    }
    provider_retry(v, &mut s.retry, &mut w);
    if let Some(b) = flag(v, "images.blockImages", &mut w) {
        s.images.block = b;
    }
    if let Some(b) = flag(v, "images.autoResize", &mut w) {
        s.images.auto_resize = b;
    }
    s.kernel_prewarm = flag(v, "kernel.prewarm", &mut w);
    s.auto_refine = auto_refine(v, &mut w);
    s.mcp_servers = mcp_servers(v, &|name| std::env::var(name).ok(), &mut w);
    s.backup_model = string(v, "providerBackupModel", &mut w);
    s.subagent_model = string(v, "subagentDefaultModel", &mut w);
    s.auxiliary_model = string(v, "auxiliaryModel", &mut w);
    s.autonomous = autonomous(v, &mut w);
    s.thinking_budgets = thinking_budgets(v, &mut w);
    let steering = if at(v, "steeringMode").is_none() && at(v, "queueMode").is_some() {
        "queueMode"
    } else {
        "steeringMode"
    };
    s.steering_all = delivery_all(v, steering, &mut w);
    s.follow_ups_all = delivery_all(v, "followUpMode", &mut w);
    s.cache_keep_alive_ms = cache_keep_alive(v, &mut w);
    s.default_service_tier = string(v, "defaultServiceTier", &mut w).and_then(|t| {
        let ok = SERVICE_TIERS.contains(&t.as_str());
        if !ok {
            w.push(wrong(
                "defaultServiceTier",
                &format!("one of {}", SERVICE_TIERS.join(", ")),
            ));
        }
        ok.then_some(t)
    });
    s.enable_skill_commands = flag(v, "enableSkillCommands", &mut w);
    s.enable_builtin_skills = flag(v, "enableBuiltinSkills", &mut w);
    s.warnings = w;
    s
}

/// `retry.provider.maxRetryDelayMs` and `retry.provider.waitForUsage.*`. (Upstream's
/// `timeoutMs`, `maxRetries` and the `waitForUsage` park keys are not read; docs/providers.md.)
fn provider_retry(v: &Value, r: &mut Retry, w: &mut Vec<String>) {
    if let Some(n) = count(v, "retry.provider.maxRetryDelayMs", w) {
        r.max_retry_delay_ms = n;
    }
    let u = &mut r.wait_for_usage;
    if let Some(b) = flag(v, "retry.provider.waitForUsage.enabled", w) {
        u.enabled = b;
    }
    if let Some(n) = count(v, "retry.provider.waitForUsage.baseDelayMs", w) {
        u.base_delay_ms = n;
    }
    if let Some(n) = count(v, "retry.provider.waitForUsage.maxDelayMs", w) {
        u.max_delay_ms = n;
    }
    if let Some(n) = count(v, "retry.provider.waitForUsage.maxAttempts", w) {
        u.max_attempts = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(n) = count(v, "retry.provider.waitForUsage.maxWaitMs", w) {
        u.max_wait_ms = n;
    }
}

/// `mcpServers`, in the files' order (global first); `var` reads `bearerTokenEnvVar`s.
fn mcp_servers(
    v: &Value,
    var: &dyn Fn(&str) -> Option<String>,
    w: &mut Vec<String>,
) -> Vec<McpServer> {
    let entries = match at(v, "mcpServers") {
        None => return Vec::new(),
        Some(Value::Object(entries)) => entries,
        Some(_) => {
            w.push(wrong("mcpServers", "an object of servers by name"));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (name, entry) in entries {
        match acp::mcp_server_from_settings(name, entry, var, &mut |x| w.push(x)) {
            Ok(server) => out.push(server),
            Err(why) => w.push(format!("Ignoring settings key mcpServers.{name}: {why}")),
        }
    }
    out
}

/// OpenAI's service tiers (`service_tier`), as upstream names them.
pub(crate) const SERVICE_TIERS: [&str; 5] = ["auto", "default", "flex", "scale", "priority"];

/// The keep-alive interval when `cacheKeepAlive` is `true`: under the five minutes of
/// inactivity after which OpenAI's prefix cache may drop a prompt.
pub(crate) const KEEP_ALIVE_DEFAULT_MS: u64 = 240_000;

/// `cacheKeepAlive`: `true` / `false`, or `{"enabled", "intervalMs"}`.
fn cache_keep_alive(v: &Value, w: &mut Vec<String>) -> Option<u64> {
    match at(v, "cacheKeepAlive")? {
        Value::Bool(on) => on.then_some(KEEP_ALIVE_DEFAULT_MS),
        Value::Object(_) => {
            let on = flag(v, "cacheKeepAlive.enabled", w).unwrap_or(true);
            let interval = match count(v, "cacheKeepAlive.intervalMs", w) {
                Some(0) => {
                    w.push(wrong("cacheKeepAlive.intervalMs", "a positive integer"));
                    None
                }
                n => n,
            };
            on.then(|| interval.unwrap_or(KEEP_ALIVE_DEFAULT_MS))
        }
        _ => {
            w.push(wrong(
                "cacheKeepAlive",
                "true, false or {\"enabled\", \"intervalMs\"}",
            ));
            None
        }
    }
}

/// `steeringMode` / `followUpMode`: `"all"` (true) or `"one-at-a-time"` (the default).
fn delivery_all(v: &Value, key: &str, w: &mut Vec<String>) -> bool {
    match at(v, key) {
        None => false,
        Some(Value::String(m)) if m == "all" => true,
        Some(Value::String(m)) if m == "one-at-a-time" => false,
        Some(_) => {
            w.push(wrong(key, "\"all\" or \"one-at-a-time\""));
            false
        }
    }
}

fn wrong(key: &str, want: &str) -> String {
    format!("Ignoring settings key {key}: expected {want}")
}

/// The value at a dotted `key` (`retry.maxRetries`), `None` when absent or null.
fn at<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    let mut cur = v;
    for part in key.split('.') {
        cur = cur.get(part)?;
    }
    (!cur.is_null()).then_some(cur)
}

fn string(v: &Value, key: &str, w: &mut Vec<String>) -> Option<String> {
    match at(v, key)? {
        Value::String(x) if !x.trim().is_empty() => Some(x.trim().to_owned()),
        _ => {
            w.push(wrong(key, "a non-empty string"));
            None
        }
    }
}

fn flag(v: &Value, key: &str, w: &mut Vec<String>) -> Option<bool> {
    let b = at(v, key)?.as_bool();
    if b.is_none() {
        w.push(wrong(key, "true or false"));
    }
    b
}

fn count(v: &Value, key: &str, w: &mut Vec<String>) -> Option<u64> {
    let n = at(v, key)?.as_u64();
    if n.is_none() {
        w.push(wrong(key, "a non-negative integer"));
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    #[test]
    fn nested_objects_merge_and_the_project_wins() {
        let mut base =
            json!({"retry": {"enabled": true, "maxRetries": 5}, "defaultModel": "a", "x": [1]});
        merge(
            &mut base,
            json!({"retry": {"maxRetries": 1}, "defaultModel": "b", "x": {"y": 1}}),
        );
        assert_eq!(
            base,
            json!({"retry": {"enabled": true, "maxRetries": 1}, "defaultModel": "b", "x": {"y": 1}})
        );
    }

    #[test]
    fn keys_and_their_meanings() {
        let s = from_value(&json!({
            "defaultProvider": "anthropic",
            "defaultModel": "claude-opus-4-7",
            "defaultThinkingLevel": "high",
            "retry": {"enabled": false, "maxRetries": 7, "baseDelayMs": 10},
            "rlmMaxDepth": 3,
            "shellPath": "/bin/zsh",
            "shellCommandPrefix": "set -e",
            "sessionDir": "/tmp/s",
            "enabledModels": ["openai/*", " claude* "],
            "images": {"blockImages": true, "autoResize": false},
            "subagentDefaultModel": "openai/gpt-5-mini",
            "auxiliaryModel": " haiku ",
            "kernel": {"prewarm": false},
            "somethingElse": {"ignored": true}
        }));
        assert_eq!(s.subagent_model.as_deref(), Some("openai/gpt-5-mini"));
        assert_eq!(s.auxiliary_model.as_deref(), Some("haiku"));
        assert_eq!(s.default_provider.as_deref(), Some("anthropic"));
        assert_eq!(s.default_model.as_deref(), Some("claude-opus-4-7"));
        assert_eq!(s.default_thinking, Some(Thinking::High));
        assert_eq!(
            s.retry,
            Retry {
                enabled: false,
                max_retries: 7,
                base_delay_ms: 10,
                ..Retry::default()
            }
        );
        assert_eq!(s.rlm_max_depth, Some(3));
        assert_eq!(s.shell_path.as_deref(), Some("/bin/zsh"));
        assert_eq!(s.shell_command_prefix.as_deref(), Some("set -e"));
        assert_eq!(s.session_dir, Some(PathBuf::from("/tmp/s")));
        assert_eq!(
            s.enabled_models,
            Some(vec!["openai/*".to_owned(), "claude*".to_owned()])
        );
        assert_eq!(
            s.images,
            Images {
                block: true,
                auto_resize: false
            }
        );
        assert_eq!(s.kernel_prewarm, Some(false));
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert_eq!(from_value(&json!({})), Settings::default());
    }

    #[test]
    fn wrong_types_keep_defaults_with_a_warning() {
        let s = from_value(&json!({
            "defaultModel": 5,
            "defaultThinkingLevel": "huge",
            "retry": {"maxRetries": -1, "enabled": "no"},
            "rlmMaxDepth": "two",
            "images": {"autoResize": 1},
            "subagentDefaultModel": "",
            "auxiliaryModel": ["x"],
            "kernel": {"prewarm": "no"}
        }));
        assert_eq!(s.default_model, None);
        assert_eq!(s.default_thinking, None);
        assert_eq!(s.retry, Retry::default());
        assert_eq!(s.rlm_max_depth, None);
        assert!(s.images.auto_resize);
        assert_eq!(s.kernel_prewarm, None);
        assert_eq!(
            s.warnings,
            vec![
                "Ignoring settings key defaultModel: expected a non-empty string".to_owned(),
                "Invalid thinking level \"huge\". Valid values: off, minimal, low, medium, high, xhigh, max".to_owned(),
                "Ignoring settings key rlmMaxDepth: expected a non-negative integer".to_owned(),
                "Ignoring settings key retry.enabled: expected true or false".to_owned(),
                "Ignoring settings key retry.maxRetries: expected a non-negative integer".to_owned(),
                "Ignoring settings key images.autoResize: expected true or false".to_owned(),
                "Ignoring settings key kernel.prewarm: expected true or false".to_owned(),
                "Ignoring settings key subagentDefaultModel: expected a non-empty string".to_owned(),
                "Ignoring settings key auxiliaryModel: expected a non-empty string".to_owned(),
            ]
        );
    }

    #[test]
    fn autonomous_keys_take_unlimited_and_refuse_non_positive_values() {
        let s = from_value(
            &json!({"autonomous": {"enabled": true, "maxContinuations": 2,
            "maxTurns": "unlimited", "maxTokens": 9, "timeoutMs": "unlimited",
            "gates": {"commands": ["make test"], "maxRetries": 1, "timeoutMs": 5}}}),
        );
        assert_eq!(
            s.autonomous,
            Autonomous {
                enabled: Some(true),
                max_continuations: Some(2),
                max_turns: Some(UNLIMITED),
                max_tokens: Some(9),
                timeout_ms: Some(UNLIMITED),
                gate_commands: Some(vec!["make test".to_owned()]),
                gate_max_retries: Some(1),
                gate_timeout_ms: Some(5),
            }
        );
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        // (value, warning) for a limit key; gate keys take no "unlimited".
        let limit = "expected a positive integer or \"unlimited\"";
        for (bad, want) in [
            (json!(0), limit),
            (json!(-3), limit),
            (json!("lots"), limit),
            (json!(1.5), limit),
        ] {
            let s = from_value(&json!({"autonomous": {"maxTokens": bad}}));
            assert_eq!(s.autonomous, Autonomous::default());
            assert_eq!(
                s.warnings,
                [format!(
                    "Ignoring settings key autonomous.maxTokens: {want}"
                )]
            );
        }
        let s = from_value(
            &json!({"autonomous": {"enabled": 1, "gates": {"maxRetries": "unlimited",
            "timeoutMs": 0, "commands": ["ok", ""]}}}),
        );
        assert_eq!(s.autonomous, Autonomous::default());
        assert_eq!(
            s.warnings,
            [
                "Ignoring settings key autonomous.gates.commands: expected a list of shell commands",
                "Ignoring settings key autonomous.enabled: expected true or false",
                "Ignoring settings key autonomous.gates.maxRetries: expected a non-negative integer",
                "Ignoring settings key autonomous.gates.timeoutMs: expected a positive integer",
            ]
        );
    }

    #[test]
    fn resource_paths_resolve_against_their_file_and_refuse_patterns() {
        let (base, home) = (Path::new("/p/.prime/agent"), Path::new("/home/u"));
        let file = json!({"skills": ["skills-extra", "/abs/s", "~/.claude/skills", "!x", "a/*", ""],
            "prompts": "p"});
        let mut w = Vec::new();
        assert_eq!(
            resource_paths(&file, "skills", base, Some(home), &mut w),
            [
                PathBuf::from("/p/.prime/agent/skills-extra"),
                PathBuf::from("/abs/s"),
                PathBuf::from("/home/u/.claude/skills"),
            ]
        );
        assert!(resource_paths(&file, "prompts", base, Some(home), &mut w).is_empty());
        assert_eq!(
            w,
            [
                "Ignoring settings key skills: the pattern !x is not supported (give a file or directory)",
                "Ignoring settings key skills: the pattern a/* is not supported (give a file or directory)",
                "Ignoring settings key skills: expected a list of paths",
                "Ignoring settings key prompts: expected a list of paths",
            ]
        );
        let s = from_value(&json!({"enableSkillCommands": false, "enableBuiltinSkills": "no"}));
        assert_eq!(s.enable_skill_commands, Some(false));
        assert_eq!(s.enable_builtin_skills, None);
        assert_eq!(
            s.warnings,
            ["Ignoring settings key enableBuiltinSkills: expected true or false"]
        );
    }

    #[test]
    fn thinking_budgets_by_level() {
        let s = from_value(&json!({"thinkingBudgets": {"minimal": 512, "high": 40000}}));
        assert_eq!(s.thinking_budgets.of(Thinking::Minimal), Some(512));
        assert_eq!(s.thinking_budgets.of(Thinking::High), Some(40_000));
        assert_eq!(s.thinking_budgets.of(Thinking::Medium), None);
        assert_eq!(s.thinking_budgets.of(Thinking::XHigh), None);
        let s = from_value(&json!({"thinkingBudgets": {"low": 0, "medium": "big"}}));
        assert_eq!(s.thinking_budgets, ThinkingBudgets::default());
        assert_eq!(
            s.warnings,
            [
                "Ignoring settings key thinkingBudgets.low: expected a positive integer",
                "Ignoring settings key thinkingBudgets.medium: expected a non-negative integer",
            ]
        );
        let s = from_value(&json!({"thinkingBudgets": 4096}));
        assert_eq!(
            s.warnings,
            ["Ignoring settings key thinkingBudgets: expected an object of token budgets by level"]
        );
    }

    #[test]
    fn delivery_modes() {
        // (settings, steering all, follow-ups all, warnings)
        let cases = [
            (json!({}), false, false, vec![]),
            (
                json!({"steeringMode": "all", "followUpMode": "one-at-a-time"}),
                true,
                false,
                vec![],
            ),
            (json!({"queueMode": "all"}), true, false, vec![]),
            (
                json!({"queueMode": "all", "steeringMode": "one-at-a-time"}),
                false,
                false,
                vec![],
            ),
            (
                json!({"steeringMode": "each", "followUpMode": 1}),
                false,
                false,
                vec![
                    "Ignoring settings key steeringMode: expected \"all\" or \"one-at-a-time\"",
                    "Ignoring settings key followUpMode: expected \"all\" or \"one-at-a-time\"",
                ],
            ),
        ];
        for (v, steering, follow_ups, warnings) in cases {
            let s = from_value(&v);
            assert_eq!(
                (s.steering_all, s.follow_ups_all),
                (steering, follow_ups),
                "{v}"
            );
            assert_eq!(s.warnings, warnings, "{v}");
        }
    }

    #[test]
    fn default_service_tier_is_one_of_upstreams() {
        assert_eq!(
            from_value(&json!({"defaultServiceTier": "flex"}))
                .default_service_tier
                .as_deref(),
            Some("flex")
        );
        let s = from_value(&json!({"defaultServiceTier": "turbo"}));
        assert_eq!(s.default_service_tier, None);
        assert_eq!(
            s.warnings,
            ["Ignoring settings key defaultServiceTier: expected one of auto, default, flex, scale, priority"]
        );
    }

    #[test]
    fn cache_keep_alive_values() {
        // (value, interval, warnings)
        let cases = [
            (json!(null), None, vec![]),
            (json!(true), Some(KEEP_ALIVE_DEFAULT_MS), vec![]),
            (json!(false), None, vec![]),
            (json!({"intervalMs": 500}), Some(500), vec![]),
            (json!({"enabled": false, "intervalMs": 500}), None, vec![]),
            (
                json!({"intervalMs": 0}),
                Some(KEEP_ALIVE_DEFAULT_MS),
                vec!["Ignoring settings key cacheKeepAlive.intervalMs: expected a positive integer"],
            ),
            (
                json!("often"),
                None,
                vec!["Ignoring settings key cacheKeepAlive: expected true, false or {\"enabled\", \"intervalMs\"}"],
            ),
        ];
        for (value, want, warnings) in cases {
            let s = from_value(&json!({ "cacheKeepAlive": value }));
            assert_eq!(s.cache_keep_alive_ms, want, "{value}");
            assert_eq!(s.warnings, warnings, "{value}");
        }
    }

    #[test]
    fn provider_retry_keys() {
        let s = from_value(&json!({"retry": {"provider": {
            "maxRetryDelayMs": 0,
            "waitForUsage": {"enabled": false, "baseDelayMs": 5, "maxDelayMs": 50,
                             "maxAttempts": 4, "maxWaitMs": 200, "pauseUntilReset": true}}}}));
        assert_eq!(s.retry.max_retry_delay_ms, 0);
        assert_eq!(
            s.retry.wait_for_usage,
            WaitForUsage {
                enabled: false,
                base_delay_ms: 5,
                max_delay_ms: 50,
                max_attempts: 4,
                max_wait_ms: 200
            }
        );
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        let s = from_value(&json!({"retry": {"provider": {
            "maxRetryDelayMs": "1m", "waitForUsage": {"enabled": 1, "maxWaitMs": -5}}}}));
        assert_eq!(s.retry, Retry::default());
        assert_eq!(
            s.warnings,
            vec![
                "Ignoring settings key retry.provider.maxRetryDelayMs: expected a non-negative integer".to_owned(),
                "Ignoring settings key retry.provider.waitForUsage.enabled: expected true or false".to_owned(),
                "Ignoring settings key retry.provider.waitForUsage.maxWaitMs: expected a non-negative integer".to_owned(),
            ]
        );
    }

    #[test]
    fn auto_refine_keys() {
        let s = from_value(&json!({"autoRefine": {"turnInterval": 3, "cooldownMs": 0}}));
        assert_eq!(
            s.auto_refine,
            AutoRefine {
                enabled: true,
                turn_interval: 3,
                compact: true,
                cooldown_ms: 0
            }
        );
        let s = from_value(&json!({"autoRefine": {"enabled": "yes", "turnInterval": -2}}));
        assert_eq!(s.auto_refine, AutoRefine::default());
        assert_eq!(
            s.warnings,
            [
                "Ignoring settings key autoRefine.enabled: expected true or false",
                "Ignoring settings key autoRefine.turnInterval: expected a non-negative integer"
            ]
        );
    }

    #[test]
    fn mcp_servers_from_both_files_merge_by_name() {
        let mut merged = json!({"mcpServers": {"a": {"command": "one", "disabledTools": ["x"]},
            "b": {"url": "https://b.example/mcp"}}});
        merge(
            &mut merged,
            json!({"mcpServers": {"a": {"command": "two"}, "bad": {"url": 1}}}),
        );
        let mut w = Vec::new();
        let got = mcp_servers(&merged, &|_| None, &mut w);
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], McpServer::Stdio { command, limits, .. }
            if command == "two" && !limits.allows("x")));
        assert_eq!(got[1].name(), "b");
        assert_eq!(
            w,
            ["Ignoring settings key mcpServers.bad: MCP server bad has an invalid HTTP URL"]
        );
    }

    #[test]
    fn an_unparsable_file_is_an_error_naming_it() {
        let p = Path::new("/p/settings.json");
        assert_eq!(
            parse_file(p, "[1]").unwrap_err(),
            "Invalid settings file /p/settings.json: expected a JSON object"
        );
        let err = parse_file(p, "{\"a\": ").unwrap_err();
        assert!(
            err.starts_with("Invalid settings file /p/settings.json: EOF"),
            "{err}"
        );
        assert_eq!(parse_file(p, "  \n").unwrap(), json!({}));
    }
}
