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
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            enabled: true,
            max_retries: 3,
            base_delay_ms: 2_000,
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
    let (merged, global) = read_files(agent_dir, cwd)?;
    let mut settings = from_value(&merged);
    // The sandbox is the user's: a repository's project file does not decide it.
    let mut w = Vec::new();
    settings.sandbox = global.map_or_else(SandboxSettings::default, |g| sandbox_of(&g, &mut w));
    settings.warnings.extend(w);
    Ok(settings)
}

/// The one reader of `settings.json`: both files, bounded (`untrusted`), merged, the project's
/// over the global one. Start-up (`load`) fails on its error; a session in another cwd
/// (`compaction::Settings::load`) logs it and goes on with the defaults.
pub(crate) fn read_merged(agent_dir: &Path, cwd: &Path) -> Result<Value, String> {
    read_files(agent_dir, cwd).map(|(merged, _)| merged)
}

/// Both files merged, and the global one alone (`None`: there is none).
fn read_files(agent_dir: &Path, cwd: &Path) -> Result<(Value, Option<Value>), String> {
    let mut merged = Value::Object(Default::default());
    let mut global = None;
    for (i, path) in paths(agent_dir, cwd).into_iter().enumerate() {
        // Bounded: the project's file comes from whatever repository the cwd is in.
        let text = match crate::base::untrusted::read_text(&path, crate::base::untrusted::JSON_CAP)
        {
            Ok(t) => t,
            Err(crate::base::untrusted::Skip::NotFound) => continue,
            Err(e) => return Err(format!("Cannot read settings file {}: {e}", path.display())),
        };
        let value = parse_file(&path, &text)?;
        if i == 0 {
            global = Some(value.clone());
        }
        merge(&mut merged, value);
    }
    Ok((merged, global))
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
    s.warnings = w;
    s
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
            "kernel": {"prewarm": false},
            "somethingElse": {"ignored": true}
        }));
        assert_eq!(s.default_provider.as_deref(), Some("anthropic"));
        assert_eq!(s.default_model.as_deref(), Some("claude-opus-4-7"));
        assert_eq!(s.default_thinking, Some(Thinking::High));
        assert_eq!(
            s.retry,
            Retry {
                enabled: false,
                max_retries: 7,
                base_delay_ms: 10
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
