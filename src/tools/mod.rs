//! The tools the model can call. A tool is data in (JSON arguments), data out (`ToolOutput`):
//! a failing tool is a result with `is_error`, fed back to the model, never a failed turn.
//!
//! Tools know nothing about ACP. Long-running tools report progress through the context and
//! stop promptly when the turn's `AbortFlag` is set.
//!
//! Built-ins, one file each: `read`, `bash` (over the `process` runner), `edit`, `write`;
//! `truncate` holds the output limits they share.

pub(crate) mod bash;
pub(crate) mod edit;
pub(crate) mod host;
pub(crate) mod process;
pub(crate) mod read;
pub(crate) mod todo;
pub(crate) mod truncate;
pub(crate) mod write;

pub(crate) mod ipython;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::base::abort::AbortFlag;
use crate::base::content::{FileDiff, Image, IpythonDetails, PlanEntry, ToolSpec};

/// What a tool needs from its turn.
pub(crate) struct ToolContext<'a> {
    pub cwd: &'a Path,
    pub abort: &'a AbortFlag,
    /// Output so far, for `in_progress` updates; the turn throttles and tail-caps it.
    pub progress: &'a mut dyn FnMut(&str),
    /// The client's files, when it offers them (`read`, `edit`, `write` go through them).
    pub files: Option<&'a dyn host::RemoteFiles>,
    /// The client's terminal for `bash` (`--client-terminal`), and where to say which one a
    /// call runs in.
    pub terminal: Option<&'a dyn host::RemoteTerminal>,
    pub on_terminal: &'a mut dyn FnMut(&str),
    /// The OS sandbox this call's processes and writes are held to (docs/sandbox.md).
    pub sandbox: &'a crate::base::sandbox::Sandbox,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    pub diff: Option<FileDiff>,
    pub images: Vec<Image>,
    pub ipython: Option<IpythonDetails>,
    /// The whole todo list after a `todo` call, for the client's plan.
    pub plan: Option<Vec<PlanEntry>>,
    /// The client terminal the command ran in (its tool call keeps showing it).
    pub terminal: Option<String>,
}

impl ToolOutput {
    pub(crate) fn ok(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            ..Default::default()
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: true,
            ..Default::default()
        }
    }
}

pub(crate) trait Tool: Send + Sync {
    fn spec(&self) -> ToolSpec;

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput;

    /// Absolute paths this call touches, for ACP `locations`.
    fn locations(&self, _args: &Value, _cwd: &Path) -> Vec<String> {
        Vec::new()
    }

    /// The names a running kernel holds that the model defined (the ipython tool; others
    /// have none). Asked after a compaction, so the model knows what is still there; never
    /// starts a kernel.
    fn kernel_names(&self, _abort: &AbortFlag) -> Vec<String> {
        Vec::new()
    }

    /// The agent is exiting: save what must survive it (the ipython tool's pending namespace
    /// snapshot), waiting at most until `deadline`.
    fn save_state(&self, _deadline: std::time::Instant) {}

    /// Hidden messages the tool has for the model, taken once (the ipython tool's notice of a
    /// restored kernel state). The turn adds them before its next model call.
    fn take_notices(&self) -> Vec<Notice> {
        Vec::new()
    }

    /// Runs host-written `code` in this tool's kernel (started if need be) and returns what
    /// it printed, or why it failed; `None` for tools without a kernel. Refine uses it: the
    /// kernel owns the harness store.
    fn kernel_eval(
        &self,
        _code: &str,
        _cwd: &Path,
        _abort: &AbortFlag,
    ) -> Option<Result<String, String>> {
        None
    }
    /// The ACP title and kind of this call, when the tool's name does not decide them
    /// (MCP tools: `<server>: <tool>`, kind from annotations).
    fn display(&self, _args: &Value) -> Option<ToolDisplay> {
        None
    }
}

/// A message for the model that the client does not see (a `custom_message` entry with
/// `display: false` in the session file).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Notice {
    pub custom_type: &'static str,
    pub text: String,
}

/// A tool call's ACP `title` and `kind`, decided by the tool itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolDisplay {
    pub title: String,
    pub kind: &'static str,
}

/// The ACP `ToolKind` values; a stored kind is read back as one of them (else `other`).
const ACP_KINDS: [&str; 10] = [
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
];

impl ToolDisplay {
    /// A display read back from the session file: the kind as one of ACP's, `other` when
    /// the file names none we know.
    pub(crate) fn stored(title: &str, kind: &str) -> ToolDisplay {
        ToolDisplay {
            title: title.to_owned(),
            kind: ACP_KINDS
                .iter()
                .find(|k| **k == kind)
                .copied()
                .unwrap_or("other"),
        }
    }
}

/// The tools offered in this process.
#[derive(Default)]
pub(crate) struct ToolSet {
    tools: Vec<Box<dyn Tool>>,
}

impl ToolSet {
    pub(crate) fn new(tools: Vec<Box<dyn Tool>>) -> ToolSet {
        ToolSet { tools }
    }

    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec()).collect()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|t| t.spec().name == name)
            .map(|t| t.as_ref())
    }

    /// The first tool's `kernel_eval` that has a kernel.
    pub(crate) fn kernel_eval(
        &self,
        code: &str,
        cwd: &Path,
        abort: &AbortFlag,
    ) -> Option<Result<String, String>> {
        self.tools
            .iter()
            .find_map(|t| t.kernel_eval(code, cwd, abort))
    }

    /// Every tool's `kernel_names`, in tool order.
    pub(crate) fn kernel_names(&self, abort: &AbortFlag) -> Vec<String> {
        self.tools
            .iter()
            .flat_map(|t| t.kernel_names(abort))
            .collect()
    }

    /// Every tool's `save_state`.
    pub(crate) fn save_state(&self, deadline: std::time::Instant) {
        for t in &self.tools {
            t.save_state(deadline);
        }
    }

    /// Every tool's `take_notices`, in tool order.
    pub(crate) fn take_notices(&self) -> Vec<Notice> {
        self.tools.iter().flat_map(|t| t.take_notices()).collect()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.spec().name).collect()
    }
}

/// Resolves a model-supplied path against the session cwd (`~` means the home directory).
pub(crate) fn resolve_path(cwd: &Path, path: &str) -> PathBuf {
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
pub(crate) fn io_error_code(e: &std::io::Error) -> String {
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
pub(crate) fn io_error_text(e: &std::io::Error) -> String {
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

/// Why a file tool cannot use a path.
#[derive(Debug)]
pub(crate) enum FileError {
    Io(std::io::Error),
    /// It exists but is not a regular file: the kind, for the message (`named pipe (FIFO)`…).
    NotRegular(&'static str),
}

/// Opens `abs` with `options` only if it is a regular file (symlinks are followed). A FIFO,
/// a device (`/dev/zero`), a socket would block the call for ever or feed it without end, so
/// the type is checked with `stat` before opening, the open is non-blocking (a path swapped
/// for a FIFO in between cannot block it either), and the type is checked again on the open
/// descriptor. A directory stays the plain `EISDIR` error the tools always gave.
pub(crate) fn open_regular(
    abs: &Path,
    options: &mut std::fs::OpenOptions,
) -> Result<(std::fs::File, std::fs::Metadata), FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    fn check(meta: &std::fs::Metadata) -> Result<(), FileError> {
        let t = meta.file_type();
        if t.is_file() {
            Ok(())
        } else if t.is_dir() {
            Err(FileError::Io(std::io::Error::from_raw_os_error(
                libc::EISDIR,
            )))
        } else {
            Err(FileError::NotRegular(crate::base::untrusted::special_kind(
                t,
            )))
        }
    }
    check(&std::fs::metadata(abs).map_err(FileError::Io)?)?;
    let file = options
        .custom_flags(libc::O_NONBLOCK)
        .open(abs)
        .map_err(FileError::Io)?;
    let meta = file.metadata().map_err(FileError::Io)?;
    check(&meta)?;
    Ok((file, meta))
}

/// Above this size a `diff` is left out: clients render it whole and the wire carries it twice.
pub(crate) const DIFF_MAX_BYTES: usize = 2 * 1024 * 1024;

/// The ACP `diff` of a file change (`old` is `None` for a new file), unless a side is huge.
pub(crate) fn file_diff(abs: &Path, old: Option<String>, new: &str) -> Option<FileDiff> {
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
pub(crate) const BUILTIN: &[&str] = &[ipython::NAME, "read", "bash", "edit", "write", todo::NAME];

/// Which built-in tools an agent gets.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolChoice {
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
pub(crate) struct KernelHost {
    pub handler: std::sync::Arc<dyn crate::kernel::host::HostHandler>,
    pub depth: u32,
    /// Where the kernel saves its namespace and loads it from at its first start (the main
    /// agent of a persistent session: `<agent dir>/session-artifacts/<id>`; `None`: never).
    pub state_dir: Option<PathBuf>,
    /// The agent's `RLM_SESSION_DIR` (§4.1): its session's artifacts directory (a child's
    /// `sub-xxxxxxxx` under it), or a temp dir of its own when `None`.
    pub session_dir: Option<PathBuf>,
    /// The session's `RLM_MAX_DEPTH` as it is when a kernel starts (`/rlm-max-depth` changes
    /// it); `None`: `KernelEnv::max_depth`.
    pub max_depth: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
}

/// What the agents' kernels take from the process environment, read once at start-up
/// (`setup::kernel_env`) and passed down, so no tool reads it itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelEnv {
    /// The agent directory (`PRIME_AGENT_CODING_AGENT_DIR`, else `~/.prime/agent`).
    pub agent_dir: PathBuf,
    /// `RLM_DEPTH` of the session's main agent (a nested prime-agent), else 0.
    pub root_depth: u32,
    /// `RLM_MAX_DEPTH`, else 1 (§4.3).
    pub max_depth: u32,
    /// Where `max_depth` came from (`DEPTH_FROM_*`).
    pub max_depth_from: &'static str,
    /// `RLM_GLOBAL_HARNESS_STATE_DIR` when set (else `<agent_dir>/harness`).
    pub global_harness_dir: Option<String>,
    /// `RLM_HARNESS_STATE_DIR` when set (else a per-session dir under the OS temp dir).
    pub harness_dir: Option<String>,
    /// Settings `shellPath`: `%%bash` cells run in this shell.
    pub shell_path: Option<String>,
    /// Settings `shellCommandPrefix`: prepended to every `%%bash` cell and `bash` command.
    pub shell_command_prefix: Option<String>,
    /// User skills with a Python package (`python_import`), imported into every kernel.
    pub python_skills: Vec<PythonSkill>,
    /// Settings `images.*` (the kernel's `attach_image`).
    pub images: crate::config::settings::Images,
    /// Settings `enableBuiltinSkills: false`: no `skill_creator` and no stubs of upstream's
    /// service skills in the kernel.
    pub no_builtin_skills: bool,
    /// `--sandbox*` and settings `sandbox` (a session's `sandbox` option switches the mode).
    pub sandbox: crate::base::sandbox::Sandbox,
    /// Settings `kernel.prewarm` / `PRIME_AGENT_KERNEL_PREWARM`: warm the kernel zygote when
    /// a tool set with `ipython` is built (else the first cell starts it).
    pub prewarm: bool,
}

/// Where the session's maximum depth comes from (§4.3: `/rlm-max-depth`, then settings
/// `rlmMaxDepth`, then the environment's `RLM_MAX_DEPTH`, then 1).
pub(crate) const DEPTH_FROM_SESSION: &str = "this session's /rlm-max-depth";
pub(crate) const DEPTH_FROM_SETTINGS: &str = "settings rlmMaxDepth";
pub(crate) const DEPTH_FROM_ENV: &str = "the environment's RLM_MAX_DEPTH";
pub(crate) const DEPTH_FROM_DEFAULT: &str = "the default";

impl KernelEnv {
    /// The session's own `/rlm-max-depth`, kept with it, wins over settings and environment.
    pub(crate) fn set_session_max_depth(&mut self, max_depth: u32) {
        self.max_depth = max_depth;
        self.max_depth_from = DEPTH_FROM_SESSION;
    }
}

/// A skill whose Python package the kernel imports (behaviour spec §3.6).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PythonSkill {
    pub name: String,
    /// The import name (`python_import`).
    pub module: String,
    /// The skill's directory: on the kernel's `sys.path` (and its `src/` when present).
    pub dir: PathBuf,
}

impl Default for KernelEnv {
    /// The values of an empty environment, with no agent directory (for agents without tools).
    fn default() -> KernelEnv {
        KernelEnv {
            agent_dir: PathBuf::new(),
            root_depth: 0,
            max_depth: 1,
            max_depth_from: DEPTH_FROM_DEFAULT,
            global_harness_dir: None,
            harness_dir: None,
            shell_path: None,
            shell_command_prefix: None,
            python_skills: Vec::new(),
            images: crate::config::settings::Images::default(),
            no_builtin_skills: false,
            sandbox: crate::base::sandbox::Sandbox::default(),
            prewarm: true,
        }
    }
}

impl ToolChoice {
    /// Fresh tool instances for one agent (each gets its own kernel). Without a `host` the
    /// kernel answers only `model.info` and runs at `env.root_depth`.
    pub(crate) fn build(&self, env: &KernelEnv, host: Option<KernelHost>) -> ToolSet {
        let only = match self {
            ToolChoice::None => return ToolSet::default(),
            ToolChoice::All => None,
            ToolChoice::Only(names) => Some(names.as_slice()),
        };
        let mut all: Vec<Box<dyn Tool>> = Vec::new();
        all.extend(ipython::IpythonTool::detect(env, host).map(|t| Box::new(t) as Box<dyn Tool>));
        all.push(Box::new(read::Read));
        all.push(Box::new(bash::Bash {
            prefix: env.shell_command_prefix.clone(),
        }));
        all.push(Box::new(edit::Edit));
        all.push(Box::new(write::Write));
        all.push(Box::new(todo::Todo));
        let tools: Vec<Box<dyn Tool>> = all
            .into_iter()
            .filter(|t| only.is_none_or(|names| names.iter().any(|n| *n == t.spec().name)))
            .collect();
        // An agent with a kernel: warm this process's zygote now, in the background, so the
        // first cell forks a ready kernel instead of starting Python (kernel/zygote.rs).
        // A sandboxed kernel never comes from the zygote (zygote.rs): no warming then.
        // With `kernel.prewarm` off, the first cell starts it (`zygote::for_kernel`).
        if env.prewarm
            && !env.sandbox.is_on()
            && tools.iter().any(|t| t.spec().name == ipython::NAME)
        {
            if let Some(python) = crate::kernel::find_python() {
                crate::kernel::zygote::prewarm(&python);
            }
        }
        ToolSet::new(tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;
    use std::time::Duration;

    /// A fresh private directory for one test.
    fn temp_dir(name: &str) -> PathBuf {
        crate::base::test_support::temp_dir(&format!("tools-{name}"))
    }

    /// Runs built-in tool `name` on another thread, waited for at most 10 s: a tool that
    /// blocks (on a FIFO…) fails the test instead of hanging it.
    fn run_tool(name: &'static str, args: Value, cwd: &Path) -> ToolOutput {
        let cwd = cwd.to_path_buf();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let tool: Box<dyn Tool> = match name {
                "read" => Box::new(read::Read),
                "write" => Box::new(write::Write),
                "edit" => Box::new(edit::Edit),
                _ => unreachable!(),
            };
            let abort = AbortFlag::new();
            let mut progress = |_: &str| {};
            let mut ctx = ToolContext {
                cwd: &cwd,
                abort: &abort,
                progress: &mut progress,
                files: None,
                terminal: None,
                on_terminal: &mut |_| {},
                sandbox: &crate::base::sandbox::Sandbox::default(),
            };
            let _ = tx.send(tool.run(&args, &mut ctx));
        });
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{name} blocked"))
    }

    fn mkfifo(path: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo failed");
    }

    #[test]
    fn file_tools_refuse_fifos_and_devices_without_blocking() {
        let dir = temp_dir("special");
        mkfifo(&dir.join("pipe"));
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
        let pipe = dir.join("pipe").display().to_string();
        let cases = [
            (
                "read",
                json!({"path": "pipe"}),
                format!("Cannot read '{pipe}': it is a named pipe (FIFO), not a regular file. read only reads regular files."),
            ),
            (
                "read",
                json!({"path": "/dev/zero"}),
                "Cannot read '/dev/zero': it is a character device, not a regular file. read only reads regular files.".to_owned(),
            ),
            (
                // Through a symlink: the target's type decides.
                "read",
                json!({"path": "zero", "limit": 1}),
                format!("Cannot read '{}': it is a character device, not a regular file. read only reads regular files.", dir.join("zero").display()),
            ),
            (
                "write",
                json!({"path": "pipe", "content": "x"}),
                format!("Cannot write '{pipe}': it is a named pipe (FIFO), not a regular file. write only writes regular files."),
            ),
            (
                "edit",
                json!({"path": "pipe", "edits": [{"oldText": "a", "newText": "b"}]}),
                "Could not edit file: pipe. It is a named pipe (FIFO), not a regular file.".to_owned(),
            ),
            (
                // A directory stays the plain error it always was.
                "read",
                json!({"path": "."}),
                format!("EISDIR: is a directory, access '{}'", dir.join(".").display()),
            ),
        ];
        for (tool, args, want) in cases {
            let out = run_tool(tool, args.clone(), &dir);
            assert!(out.is_error, "{tool} {args}");
            assert_eq!(out.text, want, "{tool} {args}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn edit_refuses_files_too_large_to_edit_in_memory() {
        let dir = temp_dir("edit-large");
        let big = std::fs::File::create(dir.join("big")).unwrap();
        big.set_len(edit::EDIT_MAX_BYTES + 1).unwrap();
        let out = run_tool(
            "edit",
            json!({"path": "big", "edits": [{"oldText": "a", "newText": "b"}]}),
            &dir,
        );
        assert!(out.is_error);
        assert_eq!(
            out.text,
            "Could not edit file: big. It is larger than the 16.0MB edit limit; use bash (e.g. sed) for files this large."
        );
        assert_eq!(
            std::fs::metadata(dir.join("big")).unwrap().len(),
            edit::EDIT_MAX_BYTES + 1
        );
        // Just under the limit is edited as usual (and written through the same descriptor).
        std::fs::write(dir.join("small"), "one\ntwo\n").unwrap();
        let out = run_tool(
            "edit",
            json!({"path": "small", "edits": [{"oldText": "two", "newText": "2"}]}),
            &dir,
        );
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(
            std::fs::read_to_string(dir.join("small")).unwrap(),
            "one\n2\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn write_diffs_only_files_small_enough_and_overwrites_large_ones() {
        let dir = temp_dir("write-diff");
        std::fs::write(dir.join("small"), "old\n").unwrap();
        let out = run_tool("write", json!({"path": "small", "content": "new\n"}), &dir);
        assert!(!out.is_error, "{}", out.text);
        let diff = out.diff.expect("a diff for a small file");
        assert_eq!(diff.old_text.as_deref(), Some("old\n"));
        // Above the diff limit the old text is not read, and no diff claims the file is new.
        let big = std::fs::File::create(dir.join("big")).unwrap();
        big.set_len(DIFF_MAX_BYTES as u64 + 1).unwrap();
        let out = run_tool("write", json!({"path": "big", "content": "short\n"}), &dir);
        assert!(!out.is_error, "{}", out.text);
        assert!(out.diff.is_none());
        assert_eq!(std::fs::read_to_string(dir.join("big")).unwrap(), "short\n");
        // A new file, in a new directory: oldText null.
        let out = run_tool("write", json!({"path": "d/new", "content": "x"}), &dir);
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(out.diff.expect("diff").old_text, None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn read_streams_a_large_sparse_file() {
        let dir = temp_dir("read-large");
        let mut text = String::new();
        for i in 1..=3000 {
            text.push_str(&format!("line{i}\n"));
        }
        std::fs::write(dir.join("big"), &text).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("big"))
            .unwrap();
        f.set_len(64 << 20).unwrap();
        let out = run_tool("read", json!({"path": "big"}), &dir);
        assert!(!out.is_error, "{}", out.text);
        assert!(out.text.starts_with("line1\nline2\n"));
        assert!(
            out.text.ends_with(
                "line2000\n\n[Showing lines 1-2000 of 3001. Use offset=2001 to continue.]"
            ),
            "{}",
            &out.text[out.text.len() - 100..]
        );
        // The zero-filled rest is one 64 MB line: the notice says so instead of loading it.
        let out = run_tool("read", json!({"path": "big", "offset": 3001}), &dir);
        assert_eq!(
            out.text,
            "[Line 3001 is 64.0MB, exceeds 50.0KB limit. Use bash: sed -n '3001p' big | head -c 51200]"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
