//! What tools reach outside the process through, as small traits: the approval of a call
//! before it runs (`ToolHost::authorize`), and the client's view of files (`RemoteFiles`).
//!
//! Tools and turns know nothing of ACP: the session side implements these (`client_host.rs`,
//! over `session/request_permission` and `fs/*`); `LocalHost` is the default, which lets every
//! call run and keeps files local, as without a client.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::process::Ending;
use crate::base::abort::AbortFlag;

/// A tool call about to run, as the approval sees it.
pub(crate) struct CallInfo<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub args: &'a Value,
    pub cwd: &'a Path,
    /// Absolute paths it touches (ACP `locations`).
    pub locations: &'a [String],
    /// The title and kind the tool chose (MCP tools), else the name decides.
    pub display: Option<&'a super::ToolDisplay>,
}

/// Whether a call may run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Approval {
    Allowed,
    /// It must not run; the text is the failed call's result for the model.
    Refused(String),
}

pub(crate) trait ToolHost: Send + Sync {
    /// Decides whether `call` may run, asking the user when the session's mode says so (then
    /// `asking` is called first, so the turn can show the call as awaiting approval). Blocks
    /// while asking; `abort` ends the wait at once with a refusal.
    fn authorize(
        &self,
        call: &CallInfo<'_>,
        abort: &AbortFlag,
        asking: &mut dyn FnMut(),
    ) -> Approval;

    /// The client's files, when it offers them (`read`, `edit` and `write` then use them).
    fn files(&self) -> Option<&dyn RemoteFiles> {
        None
    }

    /// A terminal of the client's for `bash`, when it offers one and `--client-terminal` asks
    /// for it.
    fn terminal(&self) -> Option<&dyn RemoteTerminal> {
        None
    }

    /// The sandbox the session's calls run in now, when the host decides it (its `sandbox`
    /// option and permission mode); `None`: the start-up configuration.
    fn sandbox(&self) -> Option<crate::base::sandbox::Sandbox> {
        None
    }
}

/// Commands run in a terminal the client owns (and shows).
pub(crate) trait RemoteTerminal: Send + Sync {
    /// Runs `command` under `bash -c` in `cwd`; `shown` gets the terminal's id as soon as it
    /// exists (the tool call embeds it). Returns the output the client kept and how the
    /// command ended; `Err` is the tool's error text.
    fn run(
        &self,
        command: &str,
        cwd: &Path,
        timeout: Option<Duration>,
        abort: &AbortFlag,
        shown: &mut dyn FnMut(&str),
    ) -> Result<(String, Ending), String>;
}

/// Files as the client sees them (an editor's unsaved buffers included). Errors are texts for
/// the failed tool call.
pub(crate) trait RemoteFiles: Send + Sync {
    /// Which of reading and writing go through the client: `(read, write)`.
    fn can(&self) -> (bool, bool);
    fn read_text(&self, path: &Path, abort: &AbortFlag) -> Result<String, String>;
    fn write_text(&self, path: &Path, content: &str, abort: &AbortFlag) -> Result<(), String>;
}

/// No client behind the tools: everything runs, files are local.
pub(crate) struct LocalHost;

impl ToolHost for LocalHost {
    fn authorize(&self, _: &CallInfo<'_>, _: &AbortFlag, _: &mut dyn FnMut()) -> Approval {
        Approval::Allowed
    }
}
