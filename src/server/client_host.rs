//! A session's tools' way to its client: the permission mode and the answers remembered for
//! the session (`session/request_permission`), and the client's files (`fs/read_text_file`,
//! `fs/write_text_file`) when it advertised them.
//!
//! `ClientHost` implements the tools' `ToolHost` and `RemoteFiles` traits over a
//! `ClientLink`, so tools and turns stay free of ACP. Every agent of the session (the main
//! one and its subagents) shares one, through its `Agent`. The policy itself is pure
//! (`permissions.rs`); this module asks and remembers.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::base::json::json;
use serde_json::Value;

use crate::agent::permissions::{self, Answer, Decision, Mode, Rules};
use crate::base::abort::AbortFlag;
use crate::base::sandbox::{self, Sandbox};
use crate::protocol::client_requests::{ClientError, ClientLink};
use crate::server::events::{tool_kind, tool_title};
use crate::tools::host::{Approval, CallInfo, RemoteFiles, RemoteTerminal, ToolHost};
use crate::tools::process::Ending;

pub(crate) const REQUEST_PERMISSION: &str = "session/request_permission";
pub(crate) const FS_READ: &str = "fs/read_text_file";
pub(crate) const FS_WRITE: &str = "fs/write_text_file";
const TERMINAL_CREATE: &str = "terminal/create";
const TERMINAL_WAIT: &str = "terminal/wait_for_exit";
const TERMINAL_KILL: &str = "terminal/kill";
const TERMINAL_OUTPUT: &str = "terminal/output";
const TERMINAL_RELEASE: &str = "terminal/release";

/// What a client terminal keeps of a command's output at most (it drops the start beyond).
const TERMINAL_OUTPUT_LIMIT: u64 = 1 << 20;

/// How long the agent waits for each of the client's answers after the command ended.
const TERMINAL_ANSWER_WAIT: Duration = Duration::from_secs(10);

/// What the client said it serves, in `initialize`'s `clientCapabilities`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClientCaps {
    pub read_text_file: bool,
    pub write_text_file: bool,
    pub terminal: bool,
    /// `session.notices` / `session.compaction` (objects; `null` or absent: not taken): the
    /// standard `notice` and `compaction_update` updates replace our `_meta` forms.
    pub notices: bool,
    pub compaction: bool,
}

impl ClientCaps {
    /// Read from `initialize` params; anything missing or not `true` is unsupported.
    pub(crate) fn from_initialize(params: &Value) -> ClientCaps {
        let caps = &params["clientCapabilities"];
        ClientCaps {
            read_text_file: caps["fs"]["readTextFile"] == true,
            write_text_file: caps["fs"]["writeTextFile"] == true,
            terminal: caps["terminal"] == true,
            notices: caps["session"]["notices"].is_object(),
            compaction: caps["session"]["compaction"].is_object(),
        }
    }
}

struct Policy {
    mode: Mode,
    rules: Rules,
    /// The session's sandbox (its `sandbox` option switches the mode).
    sandbox: Sandbox,
}

pub(crate) struct ClientHost {
    session_id: String,
    /// `None`: no client to ask (unit tests); `ask` then refuses.
    link: Option<ClientLink>,
    caps: ClientCaps,
    policy: Mutex<Policy>,
    /// The session's additional directories: permission scopes of their own.
    roots: Vec<std::path::PathBuf>,
}

impl ClientHost {
    /// The session's additional directories (`additionalDirectories`), each a permission
    /// scope: an `allow_always` for a change in one covers every change under it.
    pub(crate) fn with_roots(mut self, roots: Vec<std::path::PathBuf>) -> ClientHost {
        self.roots = roots;
        self
    }

    /// The session's sandbox at its start (`--sandbox*`, settings).
    pub(crate) fn with_sandbox(self, sandbox: Sandbox) -> ClientHost {
        self.policy().sandbox = sandbox;
        self
    }

    /// The `sandbox` select of `configOptions`, when the agent was started with a sandbox
    /// setting (`--sandbox`, settings `sandbox`); `None` otherwise.
    pub(crate) fn sandbox_option(&self) -> Option<Value> {
        let policy = self.policy();
        policy
            .sandbox
            .offered
            .then(|| sandbox::option(policy.sandbox.mode))
    }

    /// Switches the sandbox from the next call on (a running kernel restarts at its next cell).
    pub(crate) fn set_sandbox_mode(&self, mode: sandbox::Mode) {
        self.policy().sandbox.mode = mode;
    }

    /// Which standard session updates the client takes.
    pub(crate) fn standard_updates(&self) -> crate::server::events::Standard {
        crate::server::events::Standard {
            notices: self.caps.notices,
            compaction: self.caps.compaction,
        }
    }

    pub(crate) fn new(
        session_id: String,
        link: Option<ClientLink>,
        caps: ClientCaps,
        mode: Mode,
    ) -> ClientHost {
        ClientHost {
            session_id,
            link,
            caps,
            policy: Mutex::new(Policy {
                mode,
                rules: Rules::default(),
                sandbox: Sandbox::default(),
            }),
            roots: Vec::new(),
        }
    }

    fn policy(&self) -> std::sync::MutexGuard<'_, Policy> {
        // The policy is two small values, consistent after any panic.
        self.policy.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn mode(&self) -> Mode {
        self.policy().mode
    }

    /// Switches the mode from the next call on (remembered answers stay).
    pub(crate) fn set_mode(&self, mode: Mode) {
        self.policy().mode = mode;
    }

    fn request(
        &self,
        method: &'static str,
        params: Value,
        abort: &AbortFlag,
    ) -> Result<Value, ClientError> {
        match &self.link {
            Some(link) => link.request(method, params, abort),
            None => Err(ClientError::Gone),
        }
    }
}

impl ToolHost for ClientHost {
    /// The session's sandbox; the permission mode `read-only` narrows one that is on to its
    /// read-only mode (commands then run in it instead of being refused).
    fn sandbox(&self) -> Option<Sandbox> {
        let policy = self.policy();
        Some(match (policy.mode, policy.sandbox.is_on()) {
            (Mode::ReadOnly, true) => policy.sandbox.with_mode(sandbox::Mode::ReadOnly),
            _ => policy.sandbox.clone(),
        })
    }

    fn authorize(
        &self,
        call: &CallInfo<'_>,
        abort: &AbortFlag,
        asking: &mut dyn FnMut(),
    ) -> Approval {
        let guarded = permissions::guard(call.name, call.args, call.cwd, &self.roots);
        let contained = self
            .sandbox()
            .is_some_and(|sb| permissions::contained(&sb, call.name, call.args, call.cwd));
        let decision = {
            let policy = self.policy();
            permissions::decide(
                policy.mode,
                &policy.rules,
                call.name,
                guarded.as_ref(),
                contained,
            )
        };
        let scope = match decision {
            Decision::Run => return Approval::Allowed,
            Decision::Refuse(text) => return Approval::Refused(text),
            Decision::Ask(scope) => scope,
        };
        asking();
        let mut tool_call = json!({
            "toolCallId": call.id,
            "title": call.display.map_or_else(|| tool_title(call.name, call.args), |d| d.title.clone()),
            "kind": call.display.map_or_else(|| tool_kind(call.name), |d| d.kind),
            "status": "pending",
            "rawInput": call.args,
        });
        if !call.locations.is_empty() {
            tool_call["locations"] = call
                .locations
                .iter()
                .map(|p| json!({ "path": p }))
                .collect();
        }
        let params = json!({
            "sessionId": self.session_id,
            "toolCall": tool_call,
            "options": permissions::options(&scope),
        });
        let answer = match self.request(REQUEST_PERMISSION, params, abort) {
            Ok(result) => permissions::answer(&result),
            Err(ClientError::Cancelled) => Answer::Cancelled,
            Err(e) => {
                return Approval::Refused(format!(
                    "{} did not run: the permission request failed ({e}).",
                    call.name
                ))
            }
        };
        match permissions::apply(&mut self.policy().rules, call.name, &scope, &answer) {
            Ok(()) => Approval::Allowed,
            Err(text) => Approval::Refused(text),
        }
    }

    fn files(&self) -> Option<&dyn RemoteFiles> {
        (self.caps.read_text_file || self.caps.write_text_file).then_some(self as &dyn RemoteFiles)
    }

    fn terminal(&self) -> Option<&dyn RemoteTerminal> {
        self.caps.terminal.then_some(self as &dyn RemoteTerminal)
    }
}

impl RemoteTerminal for ClientHost {
    fn run(
        &self,
        command: &str,
        cwd: &Path,
        timeout: Option<Duration>,
        abort: &AbortFlag,
        shown: &mut dyn FnMut(&str),
    ) -> Result<(String, Ending), String> {
        let Some(link) = &self.link else {
            return Err("No client terminal is available".to_owned());
        };
        let sid = &self.session_id;
        let create = json!({
            "sessionId": sid,
            "command": "bash",
            "args": ["-c", command],
            "cwd": cwd.display().to_string(),
            "outputByteLimit": TERMINAL_OUTPUT_LIMIT,
        });
        let created = link
            .request(TERMINAL_CREATE, create, abort)
            .map_err(|e| match e {
                ClientError::Cancelled => "Command aborted".to_owned(),
                e => format!("The client could not start a terminal: {e}"),
            })?;
        let Some(id) = created["terminalId"].as_str().map(str::to_owned) else {
            return Err(format!(
                "The client's terminal/create answer has no terminalId: {created}"
            ));
        };
        shown(&id);
        let terminal = json!({ "sessionId": sid, "terminalId": id });
        // After a cancel the terminal is released without waiting (release kills the command),
        // so the cancel is never held up by the client; each answer is waited for a bounded time.
        let release_now = || link.send_detached(TERMINAL_RELEASE, terminal.clone());
        let soon = || Some(Instant::now() + TERMINAL_ANSWER_WAIT);
        let deadline = timeout.map(|t| Instant::now() + t);
        let ending = match link.request_until(TERMINAL_WAIT, terminal.clone(), abort, deadline) {
            Ok(exit) => Ending::Exited(exit_code(&exit)),
            Err(ClientError::TimedOut) => {
                let _ = link.request_until(TERMINAL_KILL, terminal.clone(), abort, soon());
                Ending::TimedOut
            }
            Err(ClientError::Cancelled) => {
                release_now();
                return Ok((String::new(), Ending::Aborted));
            }
            Err(e) => {
                release_now();
                return Err(format!("The client's terminal failed: {e}"));
            }
        };
        let output = link.request_until(TERMINAL_OUTPUT, terminal.clone(), abort, soon());
        if abort.is_aborted() {
            release_now();
            return Ok((String::new(), Ending::Aborted));
        }
        // The agent must always release its terminals.
        let _ = link.request_until(TERMINAL_RELEASE, terminal.clone(), abort, soon());
        let output =
            output.map_err(|e| format!("The client could not show the terminal's output: {e}"))?;
        Ok((
            output["output"].as_str().unwrap_or_default().to_owned(),
            ending,
        ))
    }
}

/// A terminal's exit status as a shell reports it: the code, or `128 + n` for signal `n`.
fn exit_code(status: &Value) -> i32 {
    if let Some(code) = status["exitCode"].as_i64() {
        return i32::try_from(code).unwrap_or(1);
    }
    let signal = match status["signal"].as_str().unwrap_or("") {
        "SIGHUP" => 1,
        "SIGINT" => 2,
        "SIGQUIT" => 3,
        "SIGABRT" => 6,
        "SIGKILL" => 9,
        "SIGSEGV" => 11,
        "SIGPIPE" => 13,
        "SIGTERM" => 15,
        _ => 0,
    };
    128 + signal
}

impl RemoteFiles for ClientHost {
    fn can(&self) -> (bool, bool) {
        (self.caps.read_text_file, self.caps.write_text_file)
    }

    fn read_text(&self, path: &Path, abort: &AbortFlag) -> Result<String, String> {
        let params = json!({ "sessionId": self.session_id, "path": path.display().to_string() });
        let result = self
            .request(FS_READ, params, abort)
            .map_err(|e| format!("The client could not read {}: {e}", path.display()))?;
        match result["content"].as_str() {
            Some(text) => Ok(text.to_owned()),
            None => Err(format!(
                "The client's answer to reading {} has no content",
                path.display()
            )),
        }
    }

    fn write_text(&self, path: &Path, content: &str, abort: &AbortFlag) -> Result<(), String> {
        let params = json!({
            "sessionId": self.session_id,
            "path": path.display().to_string(),
            "content": content,
        });
        self.request(FS_WRITE, params, abort)
            .map(|_| ())
            .map_err(|e| format!("The client could not write {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_strictly() {
        let caps = |v: Value| ClientCaps::from_initialize(&json!({ "clientCapabilities": v }));
        assert_eq!(caps(json!({})), ClientCaps::default());
        assert_eq!(
            caps(json!({"fs": {"readTextFile": true, "writeTextFile": "yes"}, "terminal": true})),
            ClientCaps {
                read_text_file: true,
                write_text_file: false,
                terminal: true,
                ..ClientCaps::default()
            }
        );
        // The standard session updates are taken with an object, not with `true` or `null`.
        let session = caps(json!({"session": {"notices": {}, "compaction": null}}));
        assert!(session.notices && !session.compaction);
        let session = caps(json!({"session": {"notices": true, "compaction": {}}}));
        assert!(!session.notices && session.compaction);
    }

    #[test]
    fn without_a_client_ask_mode_refuses_and_read_only_never_asks() {
        let host = ClientHost::new("s".into(), None, ClientCaps::default(), Mode::Ask);
        let args = json!({"command": "ls"});
        let call = CallInfo {
            id: "c",
            name: "bash",
            args: &args,
            cwd: Path::new("/"),
            locations: &[],
            display: None,
        };
        let mut asked = 0;
        let approval = host.authorize(&call, &AbortFlag::new(), &mut || asked += 1);
        assert_eq!(asked, 1);
        assert!(
            matches!(approval, Approval::Refused(t) if t.contains("the permission request failed"))
        );
        host.set_mode(Mode::ReadOnly);
        let approval = host.authorize(&call, &AbortFlag::new(), &mut || asked += 1);
        assert_eq!(asked, 1);
        assert!(matches!(approval, Approval::Refused(t) if t.contains("read-only")));
        host.set_mode(Mode::FullAccess);
        assert_eq!(
            host.authorize(&call, &AbortFlag::new(), &mut || asked += 1),
            Approval::Allowed
        );
        assert!(host.files().is_none());
    }
}
