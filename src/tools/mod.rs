//! The tools the model can call. A tool is data in (JSON arguments), data out (`ToolOutput`):
//! a failing tool is a result with `is_error`, fed back to the model, never a failed turn.
//!
//! Tools know nothing about ACP. Long-running tools report progress through the context and
//! stop promptly when the turn's `AbortFlag` is set.
//!
//! Built-ins, one file each: `read`, `bash` (over the `process` runner), `edit`, `write`;
//! `truncate` holds the output limits they share.

pub mod bash;
pub mod edit;
pub mod process;
pub mod read;
pub mod truncate;
pub mod write;

pub mod ipython;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::abort::AbortFlag;
use crate::events::{FileDiff, Image, IpythonDetails};
use crate::provider::ToolSpec;

/// What a tool needs from its turn.
pub struct ToolContext<'a> {
    pub cwd: &'a Path,
    pub abort: &'a AbortFlag,
    /// Output so far, for `in_progress` updates; the turn throttles and tail-caps it.
    pub progress: &'a mut dyn FnMut(&str),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    pub diff: Option<FileDiff>,
    pub images: Vec<Image>,
    pub ipython: Option<IpythonDetails>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            ..Default::default()
        }
    }

    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: true,
            ..Default::default()
        }
    }
}

pub trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput;

    /// Absolute paths this call touches, for ACP `locations`.
    fn locations(&self, _args: &Value, _cwd: &Path) -> Vec<String> {
        Vec::new()
    }
}

/// The tools offered in this process.
#[derive(Default)]
pub struct ToolSet {
    tools: Vec<Box<dyn Tool>>,
}

impl ToolSet {
    pub fn new(tools: Vec<Box<dyn Tool>>) -> ToolSet {
        ToolSet { tools }
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|t| t.spec().name == name)
            .map(|t| t.as_ref())
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.spec().name).collect()
    }
}

/// Resolves a model-supplied path against the session cwd (`~` means the home directory).
pub fn resolve_path(cwd: &Path, path: &str) -> PathBuf {
    if let Some(rest) = path.strip_prefix("~/") {
        if let Some(home) = std::env::var_os("HOME") {
            return PathBuf::from(home).join(rest);
        }
    }
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Node-style error code (`ENOENT`, `EACCES`, …) of an I/O error; result texts use these.
pub fn io_error_code(e: &std::io::Error) -> String {
    let code = match e.raw_os_error() {
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EPERM) => "EPERM",
        Some(libc::EISDIR) => "EISDIR",
        Some(libc::ENOTDIR) => "ENOTDIR",
        Some(libc::EROFS) => "EROFS",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::ELOOP) => "ELOOP",
        Some(libc::ENAMETOOLONG) => "ENAMETOOLONG",
        Some(libc::EEXIST) => "EEXIST",
        Some(n) => return format!("E{n}"),
        None => "EIO",
    };
    code.to_owned()
}

/// The OS message of an I/O error in Node's style: lower-case, without `(os error N)`.
pub fn io_error_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Above this size a `diff` is left out: clients render it whole and the wire carries it twice.
const DIFF_MAX_BYTES: usize = 2 * 1024 * 1024;

/// The ACP `diff` of a file change (`old` is `None` for a new file), unless a side is huge.
pub fn file_diff(abs: &Path, old: Option<String>, new: &str) -> Option<FileDiff> {
    if new.len() > DIFF_MAX_BYTES || old.as_ref().is_some_and(|o| o.len() > DIFF_MAX_BYTES) {
        return None;
    }
    Some(FileDiff {
        path: abs.display().to_string(),
        old_text: old,
        new_text: new.to_owned(),
    })
}

/// Names of the built-in tools, in the order they are offered.
pub const BUILTIN: &[&str] = &[ipython::NAME, "read", "bash", "edit", "write"];

/// Which built-in tools an agent gets.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// `--no-tools`.
    None,
    /// Every built-in tool (the default).
    All,
    /// `--tools a,b`.
    Only(Vec<String>),
}

/// How an agent's `ipython` kernel reaches its host: who answers its host requests, and at
/// which recursion depth it runs.
#[derive(Clone)]
pub struct KernelHost {
    pub handler: std::sync::Arc<dyn crate::kernel::host::HostHandler>,
    pub depth: u32,
}

impl ToolChoice {
    /// Fresh tool instances for one agent (each gets its own kernel). Without a `host` the
    /// kernel answers only `model.info` and runs at depth 0.
    pub fn build(&self, host: Option<KernelHost>) -> ToolSet {
        let only = match self {
            ToolChoice::None => return ToolSet::default(),
            ToolChoice::All => None,
            ToolChoice::Only(names) => Some(names.as_slice()),
        };
        let mut all: Vec<Box<dyn Tool>> = Vec::new();
        all.extend(ipython::IpythonTool::detect(host).map(|t| Box::new(t) as Box<dyn Tool>));
        all.push(Box::new(read::Read));
        all.push(Box::new(bash::Bash));
        all.push(Box::new(edit::Edit));
        all.push(Box::new(write::Write));
        ToolSet::new(
            all.into_iter()
                .filter(|t| only.is_none_or(|names| names.iter().any(|n| *n == t.spec().name)))
                .collect(),
        )
    }
}
