//! The `ipython` tool (behaviour spec §3.2): runs a cell in the persistent Python kernel of
//! `crate::kernel` and turns what it produced into a `ToolOutput` — result text, diffs from the
//! `edit` skill, image attachments.
//!
//! Policy lives here, mechanism in `kernel`: the kernel starts lazily on the first cell, a
//! kernel that died or had to be killed is replaced on the next cell, and that cell's result
//! starts with the kernel-reset notice so the model knows its variables are gone.
//!
//! In a persistent session the main agent's kernel saves its namespace after successful cells
//! (`kernel/state.py`), and the first kernel this tool starts loads it back. The model learns
//! what came back from a hidden `<ipython_state_restored>` message (`take_notices`), which the
//! turn adds before its next model call, right after the result of the cell that started the
//! kernel. A kernel started again after a crash or a kill starts empty, as the reset notice says.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::base::json::json;
use serde_json::{Map, Value};

use super::{KernelEnv, KernelHost, Notice, Tool, ToolContext, ToolOutput};
use crate::base::abort::AbortFlag;
use crate::base::content::{Attachment, FileDiff, Image, IpythonDetails, ToolSpec};
use crate::base::sandbox::Sandbox;
use crate::kernel::state::{self, RestoreReport};
use crate::kernel::{
    find_python, Capture, CellEnd, CellRun, DefaultHostHandler, HostHandler, Kernel, KernelConfig,
};

pub(crate) const NAME: &str = "ipython";

/// Behaviour spec §3.2, verbatim.
const DESCRIPTION: &str = "Execute Python scratchpad code and `%%bash` shell cells in a persistent IPython kernel. Variables, imports, and loaded data persist across calls, and are revived on a best-effort basis when a session is resumed (objects that cannot be serialized are dropped and reported). Project imports, tests, scripts, CLIs, and dependency checks should run through the target project's own environment.";

const CODE_DESCRIPTION: &str = "Python scratchpad code or `%%bash` shell cells to execute in the agent kernel. Use the target project's own environment for project imports, tests, scripts, CLIs, and dependency checks instead of direct kernel imports.";

/// Prefixed to the first result after the kernel was restarted (spec §3.2, verbatim).
pub(crate) const KERNEL_RESET_NOTICE: &str = "<ipython_kernel_reset>\nThe IPython kernel was restarted after a previous interrupted cell kept running. Variables, imports, async tasks, and open resources from before the restart are no longer available; recreate them before using them.\n</ipython_kernel_reset>\n\n";

/// Each of stdout, stderr, result and traceback is capped at this many chars.
pub(crate) const OUTPUT_CAP_CHARS: usize = 65_536;
const TRUNCATION_SUFFIX: &str = "\n[... output truncated at 65536 chars ...]";

/// One attachment's base64 payload above this is dropped (spec §3.2).
const MAX_ATTACHMENT_CHARS: usize = 10_000_000;

const DIFF_MIME: &str = "application/vnd.prime-agent.diff+json";
const ATTACHMENT_MIME: &str = "application/vnd.prime-agent.attachment+json";

/// `in_progress` output is rebuilt at most this often (the turn throttles too, but building
/// the text for every chunk of a chatty cell would cost O(n²)).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// The kernel slot: at most one kernel, used by one cell at a time.
#[derive(Default)]
struct Slot {
    kernel: Option<Kernel>,
    /// The previous kernel died or was killed: the next start is a restart.
    lost: bool,
    /// A kernel was started before: only the first start loads the saved namespace.
    started: bool,
    /// The sandbox the running kernel was started in: another one restarts it.
    sandbox: Sandbox,
}

pub(crate) struct IpythonTool {
    python: PathBuf,
    handler: Arc<dyn HostHandler>,
    /// `RLM_DEPTH` of this agent's kernel (0 for the session's main agent).
    depth: u32,
    slot: Mutex<Slot>,
    /// This session's local harness dir (`RLM_HARNESS_STATE_DIR`), under the OS temp dir.
    harness_dir: PathBuf,
    /// The agent dir, the depth limit and the harness overrides, as start-up resolved them.
    env: KernelEnv,
    /// Where the namespace is saved and loaded from (`KernelHost::state_dir`).
    state_dir: Option<PathBuf>,
    /// `RLM_SESSION_DIR` (`KernelHost::session_dir`; else the temp dir `harness_dir` is in).
    session_dir: Option<PathBuf>,
    /// The session's current `RLM_MAX_DEPTH` (`KernelHost::max_depth`).
    max_depth: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// The restored-state notice, until the turn takes it.
    notices: Mutex<Vec<Notice>>,
}

impl IpythonTool {
    /// A tool running `python` that answers host requests with `handler`.
    pub(crate) fn new(
        python: PathBuf,
        handler: Arc<dyn HostHandler>,
        depth: u32,
        env: &KernelEnv,
    ) -> IpythonTool {
        let harness_dir = std::env::temp_dir().join(format!(
            "prime-agent-session-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        IpythonTool {
            python,
            handler,
            depth,
            slot: Mutex::new(Slot::default()),
            harness_dir: harness_dir.join("harness"),
            env: env.clone(),
            state_dir: None,
            session_dir: None,
            max_depth: None,
            notices: Mutex::new(Vec::new()),
        }
    }

    /// The tool for an agent whose kernel talks to `host` (default: `model.info` only, at
    /// `env.root_depth`), or `None` (and a warning, once per process) when no Python is
    /// installed.
    pub(crate) fn detect(env: &KernelEnv, host: Option<KernelHost>) -> Option<IpythonTool> {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let host = host.unwrap_or_else(|| KernelHost {
            handler: Arc::new(DefaultHostHandler::default()),
            depth: env.root_depth,
            state_dir: None,
            session_dir: None,
            max_depth: None,
        });
        match find_python() {
            Some(python) => {
                let mut tool = IpythonTool::new(python, host.handler, host.depth, env);
                tool.state_dir = host.state_dir;
                tool.session_dir = host.session_dir;
                tool.max_depth = host.max_depth;
                Some(tool)
            }
            None => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    log::warn!("No python3 found (PRIME_AGENT_KERNEL_PYTHON, the kernel environment of prime-agent kernel setup, python3 or python on PATH): the ipython tool is not offered.");
                }
                None
            }
        }
    }

    /// What a kernel sandboxed by `sandbox` may write beside its roots: its own state (the
    /// session's snapshot directory, the harness directories), made here if missing.
    fn own_dirs(&self) -> Vec<PathBuf> {
        let env = &self.env;
        let mut dirs = vec![
            env.global_harness_dir
                .as_ref()
                .map_or_else(|| env.agent_dir.join("harness"), PathBuf::from),
            env.harness_dir
                .as_ref()
                .map_or_else(|| self.local_harness_dir(), PathBuf::from),
        ];
        dirs.extend(self.state_dir.clone());
        dirs.push(self.session_dir());
        // Private, as the kernel makes them (tests/secrets.rs).
        dirs.retain(|d| {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
                .is_ok()
        });
        dirs
    }

    /// The local harness store without `RLM_HARNESS_STATE_DIR`: `<artifacts>/harness` of a
    /// session on disk (§5.6, where the prompt's overview reads it), else under the temp dir.
    fn local_harness_dir(&self) -> PathBuf {
        self.session_dir
            .as_ref()
            .map_or_else(|| self.harness_dir.clone(), |d| d.join("harness"))
    }

    /// `RLM_SESSION_DIR`: the session's own directory, made (private) if missing.
    fn session_dir(&self) -> PathBuf {
        let dir = self.session_dir.clone().unwrap_or_else(|| {
            self.harness_dir
                .parent()
                .map_or_else(std::env::temp_dir, Path::to_path_buf)
        });
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir);
        dir
    }

    fn config(&self, cwd: &Path, restore: bool, sandbox: &Sandbox) -> Result<KernelConfig, String> {
        let policy = match sandbox.is_on() {
            true => sandbox.policy(cwd, &self.own_dirs())?.map(Arc::new),
            false => None,
        };
        let env = &self.env;
        let path = |p: &Path| p.display().to_string();
        let max_depth = self
            .max_depth
            .as_ref()
            .map_or(env.max_depth, |d| d.load(Ordering::SeqCst));
        let mut cfg = KernelConfig {
            python: self.python.clone(),
            cwd: cwd.to_path_buf(),
            env: vec![
                ("RLM_DEPTH".into(), self.depth.to_string()),
                ("RLM_MAX_DEPTH".into(), max_depth.to_string()),
                ("RLM_SESSION_DIR".into(), path(&self.session_dir())),
                (
                    "RLM_GLOBAL_HARNESS_STATE_DIR".into(),
                    env.global_harness_dir
                        .clone()
                        .unwrap_or_else(|| path(&env.agent_dir.join("harness"))),
                ),
                (
                    "RLM_HARNESS_STATE_DIR".into(),
                    env.harness_dir
                        .clone()
                        .unwrap_or_else(|| path(&self.local_harness_dir())),
                ),
                ("PRIME_AGENT_CODING_AGENT_DIR".into(), path(&env.agent_dir)),
                ("NO_COLOR".into(), "1".into()),
                (
                    "PRIME_AGENT_IMAGES_AUTO_RESIZE".into(),
                    if env.images.auto_resize { "1" } else { "0" }.into(),
                ),
                (
                    "PRIME_AGENT_IMAGES_BLOCK".into(),
                    if env.images.block { "1" } else { "0" }.into(),
                ),
            ],
            sandbox: policy,
        };
        if env.no_builtin_skills {
            cfg.env
                .push(("PRIME_AGENT_BUILTIN_SKILLS".into(), "0".into()));
        }
        if let Some(shell) = &env.shell_path {
            cfg.env
                .push(("PRIME_AGENT_SHELL_PATH".into(), shell.clone()));
        }
        if let Some(prefix) = &env.shell_command_prefix {
            cfg.env
                .push(("PRIME_AGENT_SHELL_COMMAND_PREFIX".into(), prefix.clone()));
        }
        if !env.python_skills.is_empty() {
            let skills: Vec<serde_json::Value> = env
                .python_skills
                .iter()
                .map(|s| {
                    crate::base::json::json!({
                        "name": s.name,
                        "module": s.module,
                        "paths": [path(&s.dir), path(&s.dir.join("src"))],
                    })
                })
                .collect();
            cfg.env.push((
                "PRIME_AGENT_PYTHON_SKILLS".into(),
                serde_json::Value::Array(skills).to_string(),
            ));
        }
        if let Some(dir) = &self.state_dir {
            cfg.env.push((state::STATE_DIR_ENV.into(), path(dir)));
            cfg.env.push((
                state::RESTORE_ENV.into(),
                if restore { "1" } else { "0" }.into(),
            ));
        }
        Ok(cfg)
    }

    /// Starts the kernel for `slot` (loading the saved namespace at the tool's first start) and
    /// keeps the notice of what came back for the turn.
    fn start(
        &self,
        slot: &mut Slot,
        cwd: &Path,
        sandbox: &Sandbox,
        abort: &AbortFlag,
    ) -> Result<(), String> {
        let restore = !slot.started;
        let cfg = self.config(cwd, restore, sandbox)?;
        let mut kernel = Kernel::start(&cfg, self.handler.clone(), abort)?;
        slot.started = true;
        slot.sandbox = sandbox.clone();
        if let Some(report) = kernel.take_restore_report() {
            self.note_restored(&report);
        }
        slot.kernel = Some(kernel);
        Ok(())
    }

    fn note_restored(&self, report: &Value) {
        let Some(report) = RestoreReport::from_json(report) else {
            return;
        };
        let dir = self
            .state_dir
            .as_deref()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        match &report.error {
            Some(error) => log::warn!(
                "the saved kernel state in {dir} cannot be read ({error}); the kernel starts with an empty namespace"
            ),
            None => log::info!(
                "kernel state restored from {dir}: {} name(s) back, {} not",
                report.restored.len(),
                report.missing().count()
            ),
        }
        if let Some(text) = state::notice(&report) {
            self.notices
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Notice {
                    custom_type: state::NOTICE_TYPE,
                    text,
                });
        }
    }
}

impl Drop for IpythonTool {
    fn drop(&mut self) {
        // The session-local harness lives only as long as the session (spec §4.1 "ephemeral").
        if let Some(session_dir) = self.harness_dir.parent() {
            let _ = std::fs::remove_dir_all(session_dir);
        }
    }
}

impl Tool for IpythonTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: json!({
                "type": "object",
                "required": ["code"],
                "properties": { "code": { "type": "string", "description": CODE_DESCRIPTION } },
            }),
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput {
        let Some(code) = args.get("code").and_then(Value::as_str) else {
            return ToolOutput::error("The ipython tool needs a string argument \"code\".");
        };
        // Cells are serialised per kernel (spec §3.2); a poisoned lock only means an earlier
        // cell panicked, and the slot is still consistent.
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.kernel.as_mut().is_some_and(|k| !k.is_alive()) {
            slot.kernel = None;
            slot.lost = true;
        }
        // The session switched its sandbox: a kernel cannot change its own, so a new one starts.
        let mut resandboxed = false;
        if slot.kernel.is_some() && slot.sandbox != *ctx.sandbox {
            slot.kernel = None;
            resandboxed = true;
        }
        let mut restarted = false;
        if slot.kernel.is_none() {
            if let Err(e) = self.start(&mut slot, ctx.cwd, ctx.sandbox, ctx.abort) {
                return ToolOutput::error(format!("Failed to start the Python kernel: {e}"));
            }
            restarted = std::mem::take(&mut slot.lost);
        }
        let Some(kernel) = slot.kernel.as_mut() else {
            return ToolOutput::error("Failed to start the Python kernel: no kernel");
        };
        let abort = ctx.abort;
        let progress = &mut *ctx.progress;
        let mut last: Option<Instant> = None;
        let run = kernel.execute(code, abort, &mut |out, err| {
            if last.is_some_and(|t| t.elapsed() < PROGRESS_INTERVAL) {
                return;
            }
            last = Some(Instant::now());
            progress(&progress_text(out, err));
        });
        if matches!(run.end, CellEnd::Killed | CellEnd::Died(_)) {
            slot.kernel = None;
            slot.lost = true;
        }
        let mut output = cell_output(run, restarted);
        if resandboxed {
            output.text = format!("{}{}", sandbox_notice(ctx.sandbox.mode.id()), output.text);
        }
        output
    }

    fn kernel_eval(
        &self,
        code: &str,
        cwd: &Path,
        abort: &AbortFlag,
    ) -> Option<Result<String, String>> {
        let mut progress = |_: &str| {};
        // In the running kernel's sandbox (the start-up one if none runs yet).
        let sandbox = {
            let slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            match slot.kernel {
                Some(_) => slot.sandbox.clone(),
                None => self.env.sandbox.clone(),
            }
        };
        let mut ctx = ToolContext {
            cwd,
            abort,
            progress: &mut progress,
            files: None,
            terminal: None,
            on_terminal: &mut |_| {},
            sandbox: &sandbox,
        };
        let out = self.run(&json!({ "code": code }), &mut ctx);
        Some(if out.is_error {
            Err(out.text)
        } else {
            Ok(out.text)
        })
    }

    fn kernel_names(&self, abort: &AbortFlag) -> Vec<String> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if !slot.kernel.as_mut().is_some_and(|k| k.is_alive()) {
            return Vec::new();
        }
        let Some(kernel) = slot.kernel.as_mut() else {
            return Vec::new();
        };
        let run = kernel.execute(
            "print(__import__('json').dumps(__import__('sys').modules['rlm']._defined_names()))",
            abort,
            &mut |_, _| {},
        );
        if matches!(run.end, CellEnd::Killed | CellEnd::Died(_)) {
            slot.kernel = None;
            slot.lost = true;
            return Vec::new();
        }
        run.stdout
            .text()
            .lines()
            .last()
            .and_then(|line| serde_json::from_str(line).ok())
            .unwrap_or_default()
    }

    fn save_state(&self, deadline: Instant) {
        if self.state_dir.is_none() {
            return;
        }
        // A turn still holding the kernel (stuck past its cancel) keeps it; no waiting here.
        let mut slot = match self.slot.try_lock() {
            Ok(slot) => slot,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if let Some(kernel) = slot.kernel.as_mut() {
            if kernel.is_alive() && kernel.flush_state(deadline) {
                log::debug!("kernel state saved on exit");
            }
        }
    }

    fn take_notices(&self) -> Vec<Notice> {
        std::mem::take(&mut *self.notices.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Prefixed to the first result of a kernel restarted because the sandbox changed.
fn sandbox_notice(mode: &str) -> String {
    format!("<ipython_kernel_reset>\nThe IPython kernel was restarted because the session's sandbox changed (now: {mode}). Variables and imports from before are no longer available.\n</ipython_kernel_reset>\n\n")
}

fn progress_text(out: &Capture, err: &Capture) -> String {
    let (out, err) = (out.text(), err.text());
    if err.is_empty() {
        out
    } else if out.is_empty() {
        err
    } else {
        format!("{out}\n{err}")
    }
}

/// Caps `text` at `OUTPUT_CAP_CHARS` chars with the spec's suffix; `truncated` forces the
/// suffix when bytes were already dropped while capturing.
pub(crate) fn cap(text: &str, truncated: bool) -> String {
    match text.char_indices().nth(OUTPUT_CAP_CHARS) {
        Some((at, _)) => format!("{}{TRUNCATION_SUFFIX}", &text[..at]),
        None if truncated => format!("{text}{TRUNCATION_SUFFIX}"),
        None => text.to_owned(),
    }
}

/// The result text (spec §3.2): stdout, then stderr, then the last expression's value, then
/// the traceback, each on its own line. Empty parts are skipped, so a cell that only has a
/// value does not start with a blank line.
pub(crate) fn result_text(parts: &[&str]) -> String {
    let mut text = String::new();
    for part in parts.iter().filter(|p| !p.is_empty()) {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(part);
    }
    text
}

/// What the tool returns for a finished cell.
/// A cell's displays: the attachments (images and `attach_image` files), the file diffs the
/// kernel's edit helpers showed, and how many attachments were dropped as too big.
fn displays(run: &CellRun) -> (Vec<Attachment>, Vec<&Map<String, Value>>, usize) {
    let mut attachments = Vec::new();
    let mut diffs: Vec<&Map<String, Value>> = Vec::new();
    let mut too_big = 0;
    for bundle in &run.displays {
        for (mime, payload) in bundle {
            let (mime_type, data, path) = match mime.as_str() {
                DIFF_MIME => {
                    if let Some(d) = payload.as_object() {
                        diffs.push(d);
                    }
                    continue;
                }
                ATTACHMENT_MIME => (
                    payload
                        .get("mime_type")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    payload.get("data").and_then(Value::as_str),
                    payload
                        .get("path")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                ),
                m if m.starts_with("image/") => (Some(m.to_owned()), payload.as_str(), None),
                _ => continue,
            };
            let Some(data) = data else { continue };
            if data.len() > MAX_ATTACHMENT_CHARS {
                too_big += 1;
                continue;
            }
            attachments.push(Attachment {
                mime_type,
                path,
                data: Some(data.to_owned()),
            });
        }
    }
    (attachments, diffs, too_big)
}

fn cell_output(run: CellRun, restarted: bool) -> ToolOutput {
    let (attachments, diffs, too_big) = displays(&run);
    let mut stderr_extra = Vec::new();
    let mut failed = too_big > 0;
    stderr_extra.extend(std::iter::repeat_n(
        "attachment dropped: exceeds 10000000 base64 chars",
        too_big,
    ));
    let mut traceback = run
        .error
        .as_ref()
        .map(|e| e.traceback.join("\n"))
        .unwrap_or_default();
    let mut note = |line: &str| {
        if !traceback.is_empty() {
            traceback.push('\n');
        }
        traceback.push_str(line);
    };
    let aborted = match &run.end {
        CellEnd::Done { ok } => {
            failed |= !ok || run.error.is_some();
            false
        }
        CellEnd::Interrupted => true,
        CellEnd::Killed => {
            note("The cell did not stop within 1 s of the interrupt, so the Python kernel was killed. It restarts on the next cell.");
            true
        }
        CellEnd::Died(how) => {
            note(&format!("{how} It restarts on the next cell."));
            failed = true;
            false
        }
    };
    let dropped = (run.displays_dropped > 0).then(|| {
        format!(
            "{} display(s) dropped: the cell's displays exceed {} MiB",
            run.displays_dropped,
            crate::kernel::DISPLAY_LIMIT / (1024 * 1024)
        )
    });
    stderr_extra.extend(dropped.as_deref());
    let mut stderr = run.stderr.text();
    for line in stderr_extra {
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(line);
    }
    let stdout = cap(&run.stdout.text(), run.stdout.truncated);
    let stderr = cap(&stderr, run.stderr.truncated);
    let result = cap(run.result.as_deref().unwrap_or(""), false);
    let traceback = cap(&traceback, false);
    let mut text = result_text(&[&stdout, &stderr, &result, &traceback]);
    if restarted {
        text.insert_str(0, KERNEL_RESET_NOTICE);
    }
    let images = attachments
        .iter()
        .filter_map(|a| {
            let mime = a.mime_type.as_deref().filter(|m| m.starts_with("image/"))?;
            Some(Image {
                data: a.data.clone()?,
                mime_type: mime.to_owned(),
            })
        })
        .collect();
    ToolOutput {
        text,
        is_error: failed || aborted,
        diff: file_diff(&diffs),
        images,
        ipython: Some(IpythonDetails {
            diff_count: diffs.len(),
            attachments,
        }),
        plan: None,
        terminal: None,
    }
}

/// One ACP diff for the first edited file: its text before the first edit and after the last.
/// Without full texts (large files), the edited snippets stand in.
fn file_diff(diffs: &[&Map<String, Value>]) -> Option<FileDiff> {
    let s = |d: &Map<String, Value>, k: &str| d.get(k).and_then(Value::as_str).map(str::to_owned);
    let first = diffs.first()?;
    let path = s(first, "path")?;
    let last = diffs
        .iter()
        .rev()
        .find(|d| s(d, "path").as_deref() == Some(path.as_str()))?;
    Some(FileDiff {
        old_text: s(first, "old_text").or_else(|| s(first, "old_str")),
        new_text: s(last, "new_text")
            .or_else(|| s(last, "new_str"))
            .unwrap_or_default(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::CellError;

    fn run(stdout: &str, end: CellEnd) -> CellRun {
        CellRun {
            stdout: Capture {
                bytes: stdout.as_bytes().to_vec(),
                truncated: false,
            },
            stderr: Capture::default(),
            result: None,
            error: None,
            displays: Vec::new(),
            displays_dropped: 0,
            end,
        }
    }

    #[test]
    fn spec_is_exact() {
        let tool = IpythonTool::new(
            "python3".into(),
            Arc::new(DefaultHostHandler::default()),
            0,
            &KernelEnv::default(),
        );
        let spec = tool.spec();
        assert_eq!(spec.name, "ipython");
        assert!(spec
            .description
            .starts_with("Execute Python scratchpad code and `%%bash`"));
        assert!(spec.description.contains("and are revived on a best-effort basis when a session is resumed (objects that cannot be serialized are dropped and reported)."));
        assert_eq!(spec.parameters["required"], json!(["code"]));
        assert_eq!(
            spec.parameters["properties"]["code"]["description"],
            CODE_DESCRIPTION
        );
    }

    #[test]
    fn text_layout_and_caps() {
        assert_eq!(
            result_text(&["out\n", "err\n", "42", "Traceback"]),
            "out\n\nerr\n\n42\nTraceback"
        );
        assert_eq!(result_text(&["", "", "2", ""]), "2");
        assert_eq!(result_text(&["", "", "", ""]), "");
        let long = "é".repeat(OUTPUT_CAP_CHARS + 1);
        let capped = cap(&long, false);
        assert!(capped.ends_with("\n[... output truncated at 65536 chars ...]"));
        assert_eq!(
            capped.chars().count(),
            OUTPUT_CAP_CHARS + TRUNCATION_SUFFIX.chars().count()
        );
        assert_eq!(cap("short", false), "short");
        assert_eq!(cap("short", true), format!("short{TRUNCATION_SUFFIX}"));
    }

    #[test]
    fn statuses_and_notices() {
        let ok = cell_output(run("42\n", CellEnd::Done { ok: true }), false);
        assert_eq!((ok.text.as_str(), ok.is_error), ("42\n", false));
        let restarted = cell_output(run("1\n", CellEnd::Done { ok: true }), true);
        assert_eq!(restarted.text, format!("{KERNEL_RESET_NOTICE}1\n"));
        assert!(KERNEL_RESET_NOTICE.starts_with("<ipython_kernel_reset>\nThe IPython kernel was restarted after a previous interrupted cell kept running."));
        let mut failed = run("", CellEnd::Done { ok: false });
        failed.error = Some(CellError {
            ename: "ZeroDivisionError".into(),
            evalue: "division by zero".into(),
            traceback: vec!["a".into(), "ZeroDivisionError: division by zero".into()],
        });
        let failed = cell_output(failed, false);
        assert!(failed.is_error);
        assert_eq!(failed.text, "a\nZeroDivisionError: division by zero");
        assert!(cell_output(run("", CellEnd::Interrupted), false).is_error);
        let killed = cell_output(run("x", CellEnd::Killed), false);
        assert!(killed.is_error && killed.text.contains("kernel was killed"));
        let died = cell_output(
            run(
                "",
                CellEnd::Died("The Python kernel died (killed by signal 9, SIGKILL).".into()),
            ),
            false,
        );
        assert!(died.is_error && died.text.starts_with("The Python kernel died"));
    }

    #[test]
    fn dropped_displays_are_reported_on_stderr() {
        let mut r = run("", CellEnd::Done { ok: true });
        r.displays_dropped = 3;
        let out = cell_output(r, false);
        assert!(
            out.text
                .ends_with("3 display(s) dropped: the cell's displays exceed 64 MiB"),
            "{}",
            out.text
        );
    }

    #[test]
    fn displays_become_diffs_and_attachments() {
        let mut r = run("", CellEnd::Done { ok: true });
        let bundle = |v: Value| v.as_object().cloned().unwrap();
        r.displays = vec![
            bundle(
                json!({DIFF_MIME: {"path": "/p/a.txt", "old_str": "a", "new_str": "b", "start_line": 1, "old_text": "a\n", "new_text": "b\n"}}),
            ),
            bundle(
                json!({DIFF_MIME: {"path": "/p/a.txt", "old_str": "b", "new_str": "c", "start_line": 1, "old_text": "b\n", "new_text": "c\n"}}),
            ),
            bundle(
                json!({ATTACHMENT_MIME: {"mime_type": "image/png", "data": "aGVsbG8=", "path": "/p/x.png"}}),
            ),
            bundle(
                json!({ATTACHMENT_MIME: {"mime_type": "image/png", "data": "A".repeat(MAX_ATTACHMENT_CHARS + 4)}}),
            ),
        ];
        let out = cell_output(r, false);
        let details = out.ipython.clone().unwrap();
        assert_eq!(details.diff_count, 2);
        assert_eq!(details.attachments.len(), 1);
        assert_eq!(
            crate::base::content::base64_decoded_len(
                details.attachments[0].data.as_deref().unwrap()
            ),
            5
        );
        assert_eq!(
            out.diff,
            Some(FileDiff {
                path: "/p/a.txt".into(),
                old_text: Some("a\n".into()),
                new_text: "c\n".into()
            })
        );
        assert_eq!(
            out.images,
            vec![Image {
                data: "aGVsbG8=".into(),
                mime_type: "image/png".into()
            }]
        );
        assert!(out.is_error);
        assert_eq!(
            out.text,
            "attachment dropped: exceeds 10000000 base64 chars"
        );
    }
}
