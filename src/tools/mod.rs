//! The tools the model can call. A tool is data in (JSON arguments), data out (`ToolOutput`):
//! a failing tool is a result with `is_error`, fed back to the model, never a failed turn.
//!
//! Tools know nothing about ACP. Long-running tools report progress through the context and
//! stop promptly when the turn's `AbortFlag` is set.

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

/// Names of the built-in tools, in the order they are offered.
pub const BUILTIN: &[&str] = &[ipython::NAME];

/// The built-in tools, filtered by `--tools` when given.
pub fn builtin(only: Option<&[String]>) -> ToolSet {
    let mut all: Vec<Box<dyn Tool>> = Vec::new();
    all.extend(ipython::IpythonTool::detect().map(|t| Box::new(t) as Box<dyn Tool>));
    ToolSet::new(
        all.into_iter()
            .filter(|t| only.is_none_or(|names| names.iter().any(|n| *n == t.spec().name)))
            .collect(),
    )
}
