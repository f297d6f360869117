//! Parameters of the ACP methods we serve, validated into plain Rust data; pure functions only.
//!
//! Every failure is an `RpcError::invalid_params` whose reason names the offending field, or
//! one of the verbatim texts of the behaviour spec (§1.17 for MCP servers).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::base::content::{Image, UserPrompt};
use crate::protocol::rpc::RpcError;

pub(crate) const INITIALIZE: &str = "initialize";
pub(crate) const SESSION_NEW: &str = "session/new";
pub(crate) const SESSION_PROMPT: &str = "session/prompt";
pub(crate) const SESSION_CANCEL: &str = "session/cancel";
pub(crate) const SESSION_CLOSE: &str = "session/close";
pub(crate) const SESSION_UPDATE: &str = "session/update";
pub(crate) const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
/// Legacy (never stabilised) model switch, still sent by older clients.
pub(crate) const SESSION_SET_MODEL: &str = "session/set_model";
pub(crate) const SESSION_SET_MODE: &str = "session/set_mode";
pub(crate) const CANCEL_REQUEST: &str = "$/cancel_request";
pub(crate) const SESSION_LOAD: &str = "session/load";
pub(crate) const SESSION_RESUME: &str = "session/resume";
pub(crate) const SESSION_LIST: &str = "session/list";
pub(crate) const SESSION_DELETE: &str = "session/delete";
/// Unstable (`sessionCapabilities.fork`).
pub(crate) const SESSION_FORK: &str = "session/fork";
/// Unstable (`sessionCapabilities.title`).
pub(crate) const SESSION_SET_TITLE: &str = "session/set_title";
pub(crate) const AUTHENTICATE: &str = "authenticate";
pub(crate) const LOGOUT: &str = "logout";

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct NewSessionParams {
    pub cwd: String,
    pub mcp_servers: Vec<McpServer>,
    /// Roots besides `cwd` the session's tools work in (`additionalDirectories`), absolute.
    pub additional_directories: Vec<PathBuf>,
    /// The client's `systemPrompt`.
    pub system_prompt: Option<ClientPrompt>,
}

/// How a client's `systemPrompt` combines with the agent's own instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PromptMode {
    /// Added after everything the agent builds.
    Append,
    /// Replaces the agent's base instructions; the environment facts and context files stay.
    Override,
}

/// A validated `systemPrompt`: its mode and its text blocks joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientPrompt {
    pub mode: PromptMode,
    pub text: String,
}

/// A validated MCP server entry, kept for the kernel's `mcp` object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum McpServer {
    Stdio {
        name: String,
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        limits: McpLimits,
    },
    Http {
        name: String,
        url: String,
        headers: Vec<(String, String)>,
        limits: McpLimits,
    },
}

/// What a `settings.json` entry may add to a server (a client's servers keep the defaults):
/// which of its tools the model sees, and its own start and call timeouts.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct McpLimits {
    /// `enabledTools`: only these (when set).
    pub enabled_tools: Option<Vec<String>>,
    /// `disabledTools`: never these.
    pub disabled_tools: Vec<String>,
    /// `startupTimeoutMs`.
    pub startup_timeout_ms: Option<u64>,
    /// `callTimeoutMs`.
    pub call_timeout_ms: Option<u64>,
}

impl McpLimits {
    /// Whether the model may see and call `tool`.
    pub(crate) fn allows(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|only| only.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }
}

impl McpServer {
    pub(crate) fn name(&self) -> &str {
        match self {
            McpServer::Stdio { name, .. } | McpServer::Http { name, .. } => name,
        }
    }

    pub(crate) fn limits(&self) -> &McpLimits {
        match self {
            McpServer::Stdio { limits, .. } | McpServer::Http { limits, .. } => limits,
        }
    }
}

/// A session's servers: the client's, then those of `settings.json` whose name the client
/// did not use (the client's entry wins a clash).
pub(crate) fn with_settings_servers(
    client: Vec<McpServer>,
    settings: &[McpServer],
) -> Vec<McpServer> {
    let mut out = client;
    for server in settings {
        if out.iter().all(|c| c.name() != server.name()) {
            out.push(server.clone());
        }
    }
    out
}

/// One entry of `settings.json` `mcpServers` (`{"<name>": {...}}`, upstream's keys): stdio
/// (`command`, `args`, `env` as an object) or Streamable HTTP (`url`, `headers`, optional
/// `type: "http"`), validated as a client's entry is, plus `bearerTokenEnvVar` (the variable
/// whose value is sent as `Authorization: Bearer …`) and the `McpLimits` keys. `Err` is why the
/// entry is skipped; `warn` hears each limit key of the wrong type (ignored).
pub(crate) fn mcp_server_from_settings(
    name: &str,
    entry: &Value,
    var: &dyn Fn(&str) -> Option<String>,
    warn: &mut dyn FnMut(String),
) -> Result<McpServer, String> {
    let own = |why: &str| format!("MCP server {name} {why}");
    let reason = |e: RpcError| match e.data.as_ref().and_then(|d| d["reason"].as_str()) {
        Some(r) => r.to_owned(),
        None => e.message,
    };
    let obj = entry.as_object().ok_or_else(|| own("is not an object"))?;
    if !valid_mcp_name(name) {
        return Err(MCP_NAME_RULE.to_owned());
    }
    let mut server = if obj.contains_key("command") {
        stdio_server(name, obj).map_err(reason)?
    } else if obj.contains_key("url") {
        match obj.get("type").and_then(Value::as_str) {
            None | Some("http") | Some("streamable-http") => {}
            Some(kind) => return Err(own(&format!("uses unsupported {kind} transport"))),
        }
        http_server(name, obj).map_err(reason)?
    } else {
        return Err(own("has neither a command nor a url"));
    };
    if let Some(token_var) = obj.get("bearerTokenEnvVar") {
        let token_var = token_var
            .as_str()
            .ok_or_else(|| own("has a bearerTokenEnvVar that is not a string"))?;
        let token = var(token_var)
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                own(&format!(
                    "needs {token_var} (its bearerTokenEnvVar), which is not set"
                ))
            })?;
        match &mut server {
            McpServer::Http { headers, .. } => {
                headers.retain(|(k, _)| !k.eq_ignore_ascii_case("authorization"));
                headers.push((
                    "Authorization".to_owned(),
                    format!("Bearer {}", token.trim()),
                ));
            }
            McpServer::Stdio { .. } => return Err(own("has a bearerTokenEnvVar but no url")),
        }
    }
    let limits = match &mut server {
        McpServer::Stdio { limits, .. } | McpServer::Http { limits, .. } => limits,
    };
    *limits = settings_limits(name, obj, warn);
    Ok(server)
}

fn settings_limits(
    name: &str,
    obj: &Map<String, Value>,
    warn: &mut dyn FnMut(String),
) -> McpLimits {
    let mut bad = |key: &str, want: &str| {
        warn(format!(
            "Ignoring settings key mcpServers.{name}.{key}: expected {want}"
        ))
    };
    let mut names = |key: &str| -> Option<Vec<String>> {
        let v = obj.get(key).filter(|v| !v.is_null())?;
        let list: Option<Vec<String>> = v
            .as_array()
            .and_then(|a| a.iter().map(|t| t.as_str().map(str::to_owned)).collect());
        if list.is_none() {
            bad(key, "a list of tool names");
        }
        list
    };
    let enabled_tools = names("enabledTools");
    let disabled_tools = names("disabledTools").unwrap_or_default();
    let mut ms = |key: &str| -> Option<u64> {
        let v = obj.get(key).filter(|v| !v.is_null())?;
        let n = v.as_u64().filter(|n| *n > 0);
        if n.is_none() {
            bad(key, "a positive integer (milliseconds)");
        }
        n
    };
    McpLimits {
        enabled_tools,
        disabled_tools,
        startup_timeout_ms: ms("startupTimeoutMs"),
        call_timeout_ms: ms("callTimeoutMs"),
    }
}

fn params_object<'a>(params: &'a Value, method: &str) -> Result<&'a Map<String, Value>, RpcError> {
    params
        .as_object()
        .ok_or_else(|| RpcError::invalid_params(format!("{method} params must be an object")))
}

fn required_str<'a>(obj: &'a Map<String, Value>, field: &str) -> Result<&'a str, RpcError> {
    match obj.get(field) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{field} must be a string"
        ))),
        None => Err(RpcError::invalid_params(format!("{field} is required"))),
    }
}

pub(crate) fn parse_initialize(params: &Value) -> Result<(), RpcError> {
    let obj = params_object(params, INITIALIZE)?;
    match obj.get("protocolVersion") {
        Some(Value::Number(_)) => Ok(()),
        Some(_) => Err(RpcError::invalid_params("protocolVersion must be a number")),
        None => Err(RpcError::invalid_params("protocolVersion is required")),
    }
}

/// `sessionId` of `session/prompt`, `session/cancel` and `session/close`.
pub(crate) fn parse_session_id(params: &Value, method: &str) -> Result<String, RpcError> {
    Ok(required_str(params_object(params, method)?, "sessionId")?.to_owned())
}

/// `session/set_mode {sessionId, modeId}`: session id, mode id.
pub(crate) fn parse_set_mode(params: &Value) -> Result<(String, String), RpcError> {
    let obj = params_object(params, SESSION_SET_MODE)?;
    let session_id = required_str(obj, "sessionId")?.to_owned();
    Ok((session_id, required_str(obj, "modeId")?.to_owned()))
}

/// `session/set_config_option {sessionId, configId, value}` (a select's value id) and legacy
/// `session/set_model {sessionId, modelId}` (= `configId: "model"`): session id, config id,
/// value. A value that is not a string is reported by the caller against the option.
pub(crate) fn parse_set_config_option(
    params: &Value,
    method: &str,
) -> Result<(String, String, Value), RpcError> {
    let obj = params_object(params, method)?;
    let session_id = required_str(obj, "sessionId")?.to_owned();
    if method == SESSION_SET_MODEL {
        let model = required_str(obj, "modelId")?;
        return Ok((
            session_id,
            "model".to_owned(),
            Value::String(model.to_owned()),
        ));
    }
    let config_id = required_str(obj, "configId")?.to_owned();
    let value = obj
        .get("value")
        .cloned()
        .ok_or_else(|| RpcError::invalid_params("value is required"))?;
    Ok((session_id, config_id, value))
}

pub(crate) fn parse_new_session(params: &Value) -> Result<NewSessionParams, RpcError> {
    let obj = params_object(params, SESSION_NEW)?;
    let cwd = required_str(obj, "cwd")?.to_owned();
    let mcp_servers = match obj.get("mcpServers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => validate_mcp_servers(items)?,
        Some(_) => return Err(RpcError::invalid_params("mcpServers must be an array")),
    };
    Ok(NewSessionParams {
        cwd,
        mcp_servers,
        additional_directories: parse_additional_directories(obj.get("additionalDirectories"))?,
        system_prompt: parse_system_prompt(obj.get("systemPrompt"))?,
    })
}

/// `additionalDirectories`: absolute paths (whether each is a directory is checked by the
/// caller, which may touch the filesystem); duplicates are dropped.
fn parse_additional_directories(v: Option<&Value>) -> Result<Vec<PathBuf>, RpcError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "additionalDirectories must be an array of absolute paths",
            ))
        }
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = item.as_str().map(Path::new).filter(|p| p.is_absolute());
        let Some(path) = path else {
            return Err(RpcError::invalid_params(format!(
                "additionalDirectories[{i}] must be an absolute path: {item}"
            )));
        };
        if !out.iter().any(|p| p == path) {
            out.push(path.to_path_buf());
        }
    }
    Ok(out)
}

/// `systemPrompt {mode, content}`: `append` or `override`, text blocks only, not empty. Any
/// other mode or block is refused (the schema: an agent MUST NOT treat it as another mode).
fn parse_system_prompt(v: Option<&Value>) -> Result<Option<ClientPrompt>, RpcError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(obj)) => obj,
        Some(_) => return Err(RpcError::invalid_params("systemPrompt must be an object")),
    };
    let mode = match obj.get("mode").and_then(Value::as_str) {
        Some("append") => PromptMode::Append,
        Some("override") => PromptMode::Override,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "systemPrompt.mode \"{other}\" is not supported (append, override)"
            )))
        }
        None => return Err(RpcError::invalid_params("systemPrompt.mode is required")),
    };
    let blocks = match obj.get("content") {
        Some(Value::Array(blocks)) if !blocks.is_empty() => blocks,
        Some(Value::Array(_)) => {
            return Err(RpcError::invalid_params(
                "systemPrompt.content must not be empty",
            ))
        }
        _ => {
            return Err(RpcError::invalid_params(
                "systemPrompt.content must be an array of text blocks",
            ))
        }
    };
    let mut parts = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match (block["type"].as_str(), block["text"].as_str()) {
            (Some("text"), Some(text)) => parts.push(text),
            _ => {
                return Err(RpcError::invalid_params(format!(
                    "systemPrompt.content[{i}] must be a text block"
                )))
            }
        }
    }
    Ok(Some(ClientPrompt {
        mode,
        text: parts.join("\n\n"),
    }))
}

/// `session/set_title {sessionId, title}`: the session id and the trimmed, non-empty title.
pub(crate) fn parse_set_title(params: &Value) -> Result<(String, String), RpcError> {
    let obj = params_object(params, SESSION_SET_TITLE)?;
    let session_id = required_str(obj, "sessionId")?.to_owned();
    let title = required_str(obj, "title")?.trim();
    if title.is_empty() {
        return Err(RpcError::invalid_params("title must not be empty"));
    }
    Ok((session_id, title.to_owned()))
}

/// `authenticate {methodId}`.
pub(crate) fn parse_authenticate(params: &Value) -> Result<String, RpcError> {
    Ok(required_str(params_object(params, AUTHENTICATE)?, "methodId")?.to_owned())
}

/// `session/load` / `session/resume` params: the session id, then what `session/new` takes.
pub(crate) fn parse_load_session(
    params: &Value,
    method: &str,
) -> Result<(String, NewSessionParams), RpcError> {
    let obj = params_object(params, method)?;
    let session_id = required_str(obj, "sessionId")?.to_owned();
    Ok((session_id, parse_new_session(params)?))
}

/// `session/list` params: the optional `cwd` filter and `cursor`.
pub(crate) fn parse_list_sessions(
    params: &Value,
) -> Result<(Option<String>, Option<String>), RpcError> {
    if params.is_null() {
        return Ok((None, None));
    }
    let obj = params_object(params, SESSION_LIST)?;
    let opt = |field: &str| match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{field} must be a string"
        ))),
    };
    Ok((opt("cwd")?, opt("cursor")?))
}

/// The steering extension's method (ACP v2 standardises it as `session/inject`).
pub(crate) const SESSION_STEERING: &str = "_session/steering";

/// What a steer does when no client prompt is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdleBehavior {
    /// `promptRequired`: nothing runs; the client sends the text as a prompt itself.
    PromptRequired,
    /// Absent: the text starts a turn of its own.
    StartTurn,
}

/// `_session/steering` params: `{sessionId, prompt, messageId?, _meta?: {steering:
/// {idleBehavior?}}}` → the session id, the text, the idle behaviour.
pub(crate) fn parse_steering(
    params: &Value,
) -> Result<(String, UserPrompt, IdleBehavior), RpcError> {
    let obj = params_object(params, SESSION_STEERING)?;
    let session_id = required_str(obj, "sessionId")?.to_owned();
    let blocks = match obj.get("prompt") {
        Some(Value::Array(blocks)) if !blocks.is_empty() => blocks,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "prompt must be a non-empty array of content blocks",
            ))
        }
        None => return Err(RpcError::invalid_params("prompt is required")),
    };
    if obj.get("messageId").is_some_and(|m| !m.is_string()) {
        return Err(RpcError::invalid_params("messageId must be a string"));
    }
    let idle = match params.pointer("/_meta/steering/idleBehavior") {
        None | Some(Value::Null) => IdleBehavior::StartTurn,
        Some(Value::String(s)) if s == "promptRequired" => IdleBehavior::PromptRequired,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "_meta.steering.idleBehavior must be \"promptRequired\" (got {other})"
            )))
        }
    };
    let prompt = convert_prompt(blocks)?;
    if !prompt.images.is_empty() {
        return Err(RpcError::invalid_params(
            "a steering prompt takes text only (send images with session/prompt)",
        ));
    }
    if prompt.text.trim().is_empty() {
        return Err(RpcError::invalid_params("the steering prompt has no text"));
    }
    Ok((session_id, prompt, idle))
}

/// `session/prompt` params: the session id and the converted prompt.
pub(crate) fn parse_prompt(params: &Value) -> Result<(String, UserPrompt), RpcError> {
    let obj = params_object(params, SESSION_PROMPT)?;
    let session_id = required_str(obj, "sessionId")?.to_owned();
    let blocks = match obj.get("prompt") {
        Some(Value::Array(blocks)) => blocks,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "prompt must be an array of content blocks",
            ))
        }
        None => return Err(RpcError::invalid_params("prompt is required")),
    };
    let mut prompt = convert_prompt(blocks)?;
    // An invalid or absent `traceparent` is no error: the turn then starts its own trace.
    prompt.trace_parent = crate::base::telemetry::SpanContext::from_meta(params);
    Ok((session_id, prompt))
}

/// Converts content blocks in order. Unlike the original, nothing is dropped silently: content
/// the model cannot receive is refused with an error that says so.
pub(crate) fn convert_prompt(blocks: &[Value]) -> Result<UserPrompt, RpcError> {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let field = |name: &str| format!("prompt[{i}].{name}");
        let obj = block.as_object().ok_or_else(|| {
            RpcError::invalid_params(format!("prompt[{i}] must be a content block object"))
        })?;
        let get_str = |name: &str| -> Result<&str, RpcError> {
            obj.get(name).and_then(Value::as_str).ok_or_else(|| {
                RpcError::invalid_params(format!("{} must be a string", field(name)))
            })
        };
        match get_str("type")? {
            "text" => parts.push(get_str("text")?.to_owned()),
            "image" => images.push(Image { data: get_str("data")?.to_owned(), mime_type: get_str("mimeType")?.to_owned() }),
            "resource_link" => parts.push(get_str("uri")?.to_owned()),
            "resource" => {
                let res = obj
                    .get("resource")
                    .and_then(Value::as_object)
                    .ok_or_else(|| RpcError::invalid_params(format!("{} must be an object", field("resource"))))?;
                let uri = res.get("uri").and_then(Value::as_str).filter(|u| !u.is_empty());
                if let Some(text) = res.get("text").and_then(Value::as_str) {
                    parts.push(match uri {
                        Some(uri) => format!("{uri}\n{text}"),
                        None => text.to_owned(),
                    });
                } else if let Some(blob) = res.get("blob").and_then(Value::as_str) {
                    let mime = res.get("mimeType").and_then(Value::as_str).unwrap_or("");
                    if mime.starts_with("image/") {
                        images.push(Image { data: blob.to_owned(), mime_type: mime.to_owned() });
                    } else {
                        return Err(RpcError::invalid_params(format!(
                            "{} is a binary resource ({}) that this agent cannot pass to the model; send it as text or a resource_link",
                            field("resource"),
                            if mime.is_empty() { "unknown type" } else { mime }
                        )));
                    }
                } else {
                    return Err(RpcError::invalid_params(format!("{} needs text or blob", field("resource"))));
                }
            }
            "audio" => {
                return Err(RpcError::invalid_params(format!(
                    "prompt[{i}] is audio, which this agent does not accept (promptCapabilities.audio is false)"
                )))
            }
            other => {
                return Err(RpcError::invalid_params(format!("prompt[{i}].type \"{other}\" is not a supported content block")))
            }
        }
    }
    let typed = blocks
        .first()
        .and_then(|b| b.get("type"))
        .and_then(Value::as_str)
        == Some("text");
    Ok(UserPrompt {
        text: parts.join("\n"),
        images,
        trace_parent: None,
        typed,
        custom: None,
    })
}

const MCP_NAME_RULE: &str =
    "MCP server names must start with an alphanumeric character and contain at most 64 alphanumeric, underscore, or hyphen characters";

fn valid_mcp_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

/// Validates `mcpServers` with the exact reasons of §1.17.
pub(crate) fn validate_mcp_servers(items: &[Value]) -> Result<Vec<McpServer>, RpcError> {
    let mut out: Vec<McpServer> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let obj = item.as_object().ok_or_else(|| {
            RpcError::invalid_params(format!("mcpServers[{i}] must be an object"))
        })?;
        let name = obj.get("name").and_then(Value::as_str).unwrap_or("");
        if !valid_mcp_name(name) {
            return Err(RpcError::invalid_params(MCP_NAME_RULE));
        }
        if names.iter().any(|n| n == name) {
            return Err(RpcError::invalid_params(format!(
                "duplicate MCP server name: {name}"
            )));
        }
        names.push(name.to_owned());
        let server = if obj.contains_key("command") {
            stdio_server(name, obj)?
        } else {
            let kind = obj.get("type").and_then(Value::as_str).unwrap_or("");
            if kind != "http" {
                return Err(RpcError::invalid_params(format!(
                    "MCP server {name} uses unsupported {kind} transport"
                )));
            }
            http_server(name, obj)?
        };
        out.push(server);
    }
    Ok(out)
}

fn stdio_server(name: &str, obj: &Map<String, Value>) -> Result<McpServer, RpcError> {
    let err = |what: &str| RpcError::invalid_params(format!("MCP server {name} {what}"));
    let command = obj.get("command").and_then(Value::as_str).unwrap_or("");
    if command.trim().is_empty() {
        return Err(err("has no stdio command"));
    }
    let args: Vec<String> = match obj.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| err("has an invalid stdio command"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(err("has an invalid stdio command")),
    };
    if command.contains('\0') || args.iter().any(|a| a.contains('\0')) {
        return Err(err("has an invalid stdio command"));
    }
    let mut env: Vec<(String, String)> = Vec::new();
    for (key, value) in
        name_value_pairs(obj.get("env")).map_err(|_| err("has an invalid environment entry"))?
    {
        if key.is_empty() {
            return Err(err("has an empty environment name"));
        }
        if env.iter().any(|(k, _)| *k == key) {
            return Err(err(&format!("has duplicate environment {key}")));
        }
        if key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(err("has an invalid environment entry"));
        }
        env.push((key, value));
    }
    Ok(McpServer::Stdio {
        name: name.to_owned(),
        command: command.to_owned(),
        args,
        env,
        limits: McpLimits::default(),
    })
}

fn http_server(name: &str, obj: &Map<String, Value>) -> Result<McpServer, RpcError> {
    let err = |what: &str| RpcError::invalid_params(format!("MCP server {name} {what}"));
    let url = obj.get("url").and_then(Value::as_str).unwrap_or("");
    let url = check_http_url(url).map_err(|e| match e {
        UrlProblem::Invalid => err("has an invalid HTTP URL"),
        UrlProblem::NotHttpOrCredentials => {
            err("must use an HTTP(S) URL without embedded credentials")
        }
    })?;
    let mut headers: Vec<(String, String)> = Vec::new();
    for (key, value) in
        name_value_pairs(obj.get("headers")).map_err(|_| err("has an invalid HTTP header"))?
    {
        if key.is_empty() {
            return Err(err("has an empty header name"));
        }
        if headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(&key)) {
            return Err(err(&format!("has duplicate header {key}")));
        }
        let token = key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token || value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(err("has an invalid HTTP header"));
        }
        headers.push((key, value));
    }
    Ok(McpServer::Http {
        name: name.to_owned(),
        url,
        headers,
        limits: McpLimits::default(),
    })
}

/// ACP sends env and headers as `[{name, value}]`; a plain object is accepted too.
fn name_value_pairs(v: Option<&Value>) -> Result<Vec<(String, String)>, ()> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let name = item.get("name").and_then(Value::as_str).ok_or(())?;
                let value = item.get("value").and_then(Value::as_str).ok_or(())?;
                Ok((name.to_owned(), value.to_owned()))
            })
            .collect(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())).ok_or(()))
            .collect(),
        Some(_) => Err(()),
    }
}

#[derive(Debug, PartialEq)]
enum UrlProblem {
    Invalid,
    NotHttpOrCredentials,
}

/// A small URL check: `scheme://authority[/path…]`, scheme http(s), no userinfo.
fn check_http_url(url: &str) -> Result<String, UrlProblem> {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://").ok_or(UrlProblem::Invalid)?;
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return Err(UrlProblem::Invalid);
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty()
        || authority.contains(char::is_whitespace)
        || url.contains(char::is_control)
    {
        return Err(UrlProblem::Invalid);
    }
    let scheme = scheme.to_ascii_lowercase();
    if (scheme != "http" && scheme != "https") || authority.contains('@') {
        return Err(UrlProblem::NotHttpOrCredentials);
    }
    Ok(format!("{scheme}://{rest}"))
}

/// True when `requested` names the same directory as `actual` (realpath, then (dev, ino)).
pub(crate) fn same_cwd(requested: &str, actual: &Path) -> bool {
    let requested_path = absolutize(Path::new(requested));
    let canon_req = std::fs::canonicalize(&requested_path).unwrap_or(requested_path.clone());
    let canon_act = std::fs::canonicalize(actual).unwrap_or_else(|_| actual.to_path_buf());
    if canon_req == canon_act {
        return true;
    }
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::metadata(&requested_path),
        std::fs::metadata(actual),
    ) {
        (Ok(a), Ok(b)) => a.dev() != 0 && a.ino() != 0 && a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn absolutize(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    fn reason(r: Result<Vec<McpServer>, RpcError>) -> String {
        r.unwrap_err().data.unwrap()["reason"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn prompt_conversion() {
        let blocks = json!([
            {"type":"text","text":"what is this?"},
            {"type":"image","data":"aGVsbG8=","mimeType":"image/png"},
            {"type":"resource","resource":{"uri":"file:///a.txt","text":"context line"}},
            {"type":"resource","resource":{"text":"bare"}},
            {"type":"resource_link","uri":"file:///b.txt","name":"b"}
        ]);
        let p = convert_prompt(blocks.as_array().unwrap()).unwrap();
        assert_eq!(
            p.text,
            "what is this?\nfile:///a.txt\ncontext line\nbare\nfile:///b.txt"
        );
        assert_eq!(
            p.images,
            vec![Image {
                data: "aGVsbG8=".into(),
                mime_type: "image/png".into()
            }]
        );
    }

    #[test]
    fn prompt_content_the_model_cannot_take_is_refused_not_dropped() {
        for (block, needle) in [
            (
                json!({"type":"audio","data":"x","mimeType":"audio/wav"}),
                "audio",
            ),
            (
                json!({"type":"resource","resource":{"uri":"u","blob":"AA==","mimeType":"application/pdf"}}),
                "binary resource",
            ),
            (json!({"type":"video"}), "not a supported"),
            (json!({"type":"text"}), "prompt[0].text must be a string"),
            (json!("hi"), "prompt[0] must be"),
        ] {
            let e = convert_prompt(&[block]).unwrap_err();
            assert_eq!(e.code, -32602);
            assert!(e.message.contains(needle), "{} lacks {needle}", e.message);
        }
    }

    #[test]
    fn mcp_validation_texts() {
        let cases = [
            (
                json!([{"name":"bad\"\nname","command":"x"}]),
                MCP_NAME_RULE.to_owned(),
            ),
            (
                json!([{"name":"a","command":"x"},{"name":"a","command":"y"}]),
                "duplicate MCP server name: a".into(),
            ),
            (
                json!([{"name":"a","command":""}]),
                "MCP server a has no stdio command".into(),
            ),
            (
                json!([{"name":"a","command":"x\u{0}"}]),
                "MCP server a has an invalid stdio command".into(),
            ),
            (
                json!([{"name":"a","command":"x","env":[{"name":"","value":"v"}]}]),
                "MCP server a has an empty environment name".into(),
            ),
            (
                json!([{"name":"a","command":"x","env":[{"name":"K","value":"1"},{"name":"K","value":"2"}]}]),
                "MCP server a has duplicate environment K".into(),
            ),
            (
                json!([{"name":"a","command":"x","env":[{"name":"K=1","value":"v"}]}]),
                "MCP server a has an invalid environment entry".into(),
            ),
            (
                json!([{"name":"a","type":"sse","url":"https://x"}]),
                "MCP server a uses unsupported sse transport".into(),
            ),
            (
                json!([{"name":"a","type":"http","url":"not a url"}]),
                "MCP server a has an invalid HTTP URL".into(),
            ),
            (
                json!([{"name":"a","type":"http","url":"https://u:p@x.example/mcp"}]),
                "MCP server a must use an HTTP(S) URL without embedded credentials".into(),
            ),
            (
                json!([{"name":"a","type":"http","url":"ftp://x.example"}]),
                "MCP server a must use an HTTP(S) URL without embedded credentials".into(),
            ),
            (
                json!([{"name":"a","type":"http","url":"https://x","headers":[{"name":"","value":"v"}]}]),
                "MCP server a has an empty header name".into(),
            ),
            (
                json!([{"name":"a","type":"http","url":"https://x","headers":[{"name":"Auth","value":"1"},{"name":"auth","value":"2"}]}]),
                "MCP server a has duplicate header auth".into(),
            ),
            (
                json!([{"name":"a","type":"http","url":"https://x","headers":[{"name":"A b","value":"1"}]}]),
                "MCP server a has an invalid HTTP header".into(),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                reason(validate_mcp_servers(input.as_array().unwrap())),
                want,
                "{input}"
            );
        }
    }

    #[test]
    fn mcp_valid_entries_keep_literal_env_and_headers() {
        let input = json!([
            {"name":"TaskTools","type":"http","url":"https://task.example/mcp","headers":[{"name":"Authorization","value":"Bearer task"}]},
            {"name":"LocalTools","command":"node","args":["server.js"],"env":[{"name":"TASK_TOKEN","value":"task-secret"}]}
        ]);
        let got = validate_mcp_servers(input.as_array().unwrap()).unwrap();
        assert_eq!(
            got,
            vec![
                McpServer::Http {
                    name: "TaskTools".into(),
                    url: "https://task.example/mcp".into(),
                    headers: vec![("Authorization".into(), "Bearer task".into())],
                    limits: McpLimits::default(),
                },
                McpServer::Stdio {
                    name: "LocalTools".into(),
                    command: "node".into(),
                    args: vec!["server.js".into()],
                    env: vec![("TASK_TOKEN".into(), "task-secret".into())],
                    limits: McpLimits::default(),
                },
            ]
        );
    }

    #[test]
    fn the_clients_server_wins_a_name_clash_with_settings() {
        let client = validate_mcp_servers(&[json!({"name": "a", "command": "client"})]).unwrap();
        let mut warn = |_| {};
        let settings: Vec<McpServer> = [("a", "settings"), ("b", "settings")]
            .iter()
            .map(|(n, c)| {
                mcp_server_from_settings(n, &json!({ "command": c }), &|_| None, &mut warn).unwrap()
            })
            .collect();
        let got = with_settings_servers(client, &settings);
        let commands: Vec<_> = got
            .iter()
            .map(|s| match s {
                McpServer::Stdio { name, command, .. } => format!("{name}={command}"),
                McpServer::Http { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(commands, ["a=client", "b=settings"]);
    }

    #[test]
    fn settings_entries_take_upstreams_keys() {
        let var = |n: &str| (n == "TOOLS_TOKEN").then(|| "tok".to_owned());
        let mut warnings = Vec::new();
        let mut warn = |w: String| warnings.push(w);
        let http = json!({"url": "https://x.example/mcp", "headers": {"X-A": "1"},
            "bearerTokenEnvVar": "TOOLS_TOKEN", "enabledTools": ["a", "b"],
            "disabledTools": ["b"], "startupTimeoutMs": 500, "callTimeoutMs": "soon"});
        let got = mcp_server_from_settings("web", &http, &var, &mut warn).unwrap();
        let McpServer::Http {
            headers, limits, ..
        } = &got
        else {
            panic!("{got:?}")
        };
        assert_eq!(
            headers,
            &[
                ("X-A".into(), "1".into()),
                ("Authorization".into(), "Bearer tok".into())
            ]
        );
        assert!(limits.allows("a") && !limits.allows("b") && !limits.allows("c"));
        assert_eq!(
            (limits.startup_timeout_ms, limits.call_timeout_ms),
            (Some(500), None)
        );
        let stdio = json!({"command": "node", "args": ["s.js"], "env": {"K": "v"}});
        let got = mcp_server_from_settings("local", &stdio, &var, &mut warn).unwrap();
        assert!(matches!(&got, McpServer::Stdio { env, .. } if env == &[("K".into(), "v".into())]));
        let errors = [
            (
                json!({"url": "https://x", "bearerTokenEnvVar": "NOPE"}),
                "MCP server s needs NOPE (its bearerTokenEnvVar), which is not set",
            ),
            (
                json!({"url": "https://x", "type": "sse"}),
                "MCP server s uses unsupported sse transport",
            ),
            (
                json!({"args": []}),
                "MCP server s has neither a command nor a url",
            ),
            (json!({"command": ""}), "MCP server s has no stdio command"),
        ];
        for (entry, want) in errors {
            assert_eq!(
                mcp_server_from_settings("s", &entry, &var, &mut warn).unwrap_err(),
                want
            );
        }
        assert_eq!(
            warnings,
            ["Ignoring settings key mcpServers.web.callTimeoutMs: expected a positive integer (milliseconds)"]
        );
    }

    #[test]
    fn cwd_identity() {
        let dir = std::env::temp_dir().join(format!("pa-cwd-{}", std::process::id()));
        let real = dir.join("real");
        std::fs::create_dir_all(&real).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(same_cwd(link.to_str().unwrap(), &real));
        assert!(same_cwd(&format!("{}/.", real.display()), &real));
        assert!(!same_cwd("/definitely/not/the/agent/cwd", &real));
        assert!(!same_cwd(dir.to_str().unwrap(), &real));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
