//! The OS sandbox of everything the model runs (`--sandbox`, docs/sandbox.md): Linux Landlock.
//!
//! Two halves. `Sandbox` is the configuration (mode, extra writable roots, network) and its
//! pure questions: which roots may be written, whether an in-process write may go to a path,
//! the prompt's passage. `Policy` is one child's sandbox, built in the parent before the fork:
//! a Landlock ruleset file descriptor with every rule already added, so the child, between fork
//! and exec (`spawn::spawn_group`), makes only two async-signal-safe system calls:
//! `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self`. The domain is inherited by every
//! process the child starts, forks included, and cannot be left (not by `setuid`, a user
//! namespace or `prctl`).
//!
//! What the running kernel offers decides what is enforced (`abi`): ABI 1 file access, 2 linking
//! and renaming across directories (`REFER`), 3 truncation, 4 TCP bind and connect, 5 device
//! ioctls, 6 abstract unix sockets and signals outside the domain. Without Landlock a sandboxed
//! spawn fails; nothing falls back to running unsandboxed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use crate::base::json::json;

/// How much of the file system the model's processes may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    /// No sandbox (the default): children run with the user's rights.
    #[default]
    Off,
    /// Read everything; write only the private temporary directory and `/dev/null` & co.
    ReadOnly,
    /// As `ReadOnly`, and the session's cwd and every `--sandbox-writable` root.
    WorkspaceWrite,
}

/// Every mode: id and description, in the order the config option lists them.
pub(crate) const MODES: [(Mode, &str, &str); 3] = [
    (Mode::Off, "off", "Commands run with your full rights."),
    (
        Mode::ReadOnly,
        "read-only",
        "Commands and cells may read files but write only a private temporary directory.",
    ),
    (
        Mode::WorkspaceWrite,
        "workspace-write",
        "Commands and cells may also write under the working directory.",
    ),
];

impl Mode {
    pub(crate) fn parse(id: &str) -> Option<Mode> {
        MODES.iter().find(|m| m.1 == id).map(|m| m.0)
    }

    pub(crate) fn id(self) -> &'static str {
        MODES.iter().find(|m| m.0 == self).map_or("", |m| m.1)
    }
}

/// The `--sandbox` error text.
pub(crate) fn unknown_mode(id: &str) -> String {
    format!("Unknown sandbox mode \"{id}\". Valid modes: off, read-only, workspace-write")
}

/// A session's sandbox configuration: start-up fixes all but the mode, which the `sandbox`
/// config option switches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Sandbox {
    pub mode: Mode,
    /// `--sandbox-writable` roots (absolute), writable in `workspace-write`.
    pub writable: Vec<PathBuf>,
    /// `--sandbox-network on`: TCP is not restricted.
    pub network: bool,
    /// The agent directory: never writable unless a `--sandbox-writable` root lies in it.
    pub agent_dir: PathBuf,
    /// `--sandbox` or settings `sandbox` was given: sessions offer the `sandbox` option.
    pub offered: bool,
}

impl Sandbox {
    /// This configuration in `mode` (the permission mode `read-only` narrows a sandbox to it).
    pub(crate) fn with_mode(&self, mode: Mode) -> Sandbox {
        Sandbox {
            mode,
            ..self.clone()
        }
    }

    pub(crate) fn is_on(&self) -> bool {
        self.mode != Mode::Off
    }

    /// The roots a sandboxed child may write under, beside the devices: the private temporary
    /// directory, then (workspace-write) `cwd` and the `--sandbox-writable` roots.
    pub(crate) fn roots(&self, cwd: &Path) -> Vec<PathBuf> {
        let mut roots = Vec::new();
        if let Ok(tmp) = private_tmp() {
            roots.push(tmp.to_path_buf());
        }
        if self.mode == Mode::WorkspaceWrite {
            roots.push(cwd.to_path_buf());
            roots.extend(self.writable.iter().cloned());
        }
        roots.iter().map(|r| canonical(r)).collect()
    }

    /// Whether an in-process tool (`write`, `edit`) may change `path` (absolute): `Err` is the
    /// tool's error text. The same rule as the children's: under a root, and not in the agent
    /// directory unless a named root lies in it. Symlinks are resolved first (for a new file, in
    /// its nearest existing ancestor), so a link inside the cwd pointing out does not pass.
    pub(crate) fn may_write(&self, cwd: &Path, path: &Path) -> Result<(), String> {
        if !self.is_on() {
            return Ok(());
        }
        let real = canonical(path);
        let roots = self.roots(cwd);
        let agent = self.agent();
        let inside = roots.iter().any(|r| {
            real.starts_with(r)
                && agent
                    .as_ref()
                    .is_none_or(|a| !real.starts_with(a) || r.starts_with(a))
        });
        if inside {
            return Ok(());
        }
        Err(format!(
            "{} is outside the {} sandbox: it may write only under {}. Ask the user to allow it (--sandbox-writable) or to change the sandbox.",
            path.display(),
            self.mode.id(),
            list(&roots)
        ))
    }

    /// The system prompt's passage: which sandbox the model's commands run in and what they may
    /// write. `None` when off and not offered (no session can switch one on); off but offered,
    /// a line saying so, which a switch replaces (`PromptSpec::for_sandbox`). Pure (the paths
    /// as configured, nothing resolved).
    pub(crate) fn prompt_passage(&self, cwd: &Path) -> Option<String> {
        let mut roots: Vec<String> = Vec::new();
        match self.mode {
            Mode::Off if self.offered => {
                return Some(
                    "Sandbox: off; your commands, Python cells and file writes run with the user's full rights.".to_owned(),
                )
            }
            Mode::Off => return None,
            Mode::ReadOnly => {}
            Mode::WorkspaceWrite => {
                roots.push(cwd.display().to_string());
                roots.extend(self.writable.iter().map(|p| p.display().to_string()));
            }
        }
        roots.push("a private temporary directory ($TMPDIR)".to_owned());
        let net = if self.network {
            "Network access is allowed."
        } else {
            "Network connections (TCP) are refused."
        };
        Some(format!(
            "Sandbox: your commands, Python cells and file writes run in the {} OS sandbox. They may read any file but write only under {}; a write elsewhere fails with \"Permission denied\". {net} Do not try to work around it; if the task needs more, tell the user.",
            self.mode.id(),
            roots.join(", ")
        ))
    }

    /// The Landlock policy of a child started in `cwd`; `extra` roots are writable too (the
    /// kernel's own state directories). `Ok(None)` when off. An `Err` (no Landlock, a root that
    /// cannot be opened) must stop the spawn: there is no unsandboxed fallback.
    pub(crate) fn policy(&self, cwd: &Path, extra: &[PathBuf]) -> Result<Option<Policy>, String> {
        if !self.is_on() {
            return Ok(None);
        }
        let abi =
            abi().map_err(|e| format!("the {} sandbox is unavailable: {e}", self.mode.id()))?;
        let mut roots = self.roots(cwd);
        roots.extend(extra.iter().map(|r| canonical(r)));
        Policy::build(abi, &roots, self.agent().as_deref(), self.network)
            .map(Some)
            .map_err(|e| format!("cannot set up the {} sandbox: {e}", self.mode.id()))
    }
}

impl Sandbox {
    /// The agent directory, resolved (`None` when there is none).
    fn agent(&self) -> Option<PathBuf> {
        (!self.agent_dir.as_os_str().is_empty()).then(|| canonical(&self.agent_dir))
    }
}

/// The config option id (and, with `_`, its category) of the sandbox mode.
pub(crate) const OPTION: &str = "sandbox";

/// The `sandbox` select of `configOptions`: every mode when Landlock is available, else only
/// `off`, with the cause in its description.
pub(crate) fn option(current: Mode) -> Value {
    let available = abi();
    let options: Vec<Value> = MODES
        .iter()
        .filter(|(m, _, _)| *m == Mode::Off || available.is_ok())
        .map(|(_, id, description)| json!({ "value": id, "name": id, "description": description }))
        .collect();
    let description = match &available {
        Ok(v) => format!("OS sandbox of commands, cells and writes (Landlock ABI {v})."),
        Err(e) => format!("The sandbox is unavailable here: {e}."),
    };
    json!({
        "id": OPTION,
        "name": "Sandbox",
        "description": description,
        "category": "_sandbox",
        "type": "select",
        "currentValue": current.id(),
        "options": options,
    })
}

/// The mode a `sandbox` option value names, if this kernel can enforce it (`Err`: the
/// `-32602` reason).
pub(crate) fn choose(id: &str) -> Result<Mode, String> {
    let mode = Mode::parse(id).ok_or_else(|| format!("Sandbox mode is not available: {id}"))?;
    if mode != Mode::Off {
        abi().map_err(|e| format!("Sandbox mode is not available: {id} ({e})"))?;
    }
    Ok(mode)
}

fn list(roots: &[PathBuf]) -> String {
    let names: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    names.join(", ")
}

/// `path` with symlinks resolved: of the path itself when it exists, else of its nearest
/// existing ancestor with the rest appended (lexically, `..` removed).
fn canonical(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let mut rest = Vec::new();
    let mut at = path;
    while let Some(parent) = at.parent() {
        if let Some(name) = at.file_name() {
            rest.push(name.to_owned());
        } else {
            return path.to_path_buf(); // ends in `..`: keep it as it is (never inside a root)
        }
        if let Ok(mut real) = std::fs::canonicalize(parent) {
            for name in rest.iter().rev() {
                real.push(name);
            }
            return real;
        }
        at = parent;
    }
    path.to_path_buf()
}

/// The private temporary directory of this process's sandboxed children (mode 0700, created
/// at first use, removed by `remove_private_tmp` at exit).
pub(crate) fn private_tmp() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!("prime-agent-sandbox-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir); // a dead process's, with our pid
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(canonical(&dir))
    })
    .as_deref()
    .map_err(Clone::clone)
}

/// Removes the private temporary directory, if it was made (at the agent's exit).
pub(crate) fn remove_private_tmp() {
    let dir = std::env::temp_dir().join(format!("prime-agent-sandbox-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(dir);
}

// --- Landlock ----------------------------------------------------------------------------------

const CREATE_RULESET_VERSION: u32 = 1 << 0;
#[cfg(target_os = "linux")]
const RULE_PATH_BENEATH: libc::c_int = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
/// REMOVE_DIR … MAKE_SYM: the ABI 1 rights that change a directory.
const FS_DIR_CHANGES: u64 = 0b1_1111_1111_0000;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// `struct landlock_ruleset_attr` (ABI 6's size; a kernel that knows fewer fields accepts it
/// when the fields it does not know are zero).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed).
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version the running kernel offers (queried once): `Err` says why there is
/// none (kernel too old, Landlock not enabled at boot, a seccomp filter of a container).
pub(crate) fn abi() -> Result<u32, String> {
    static ABI: OnceLock<Result<u32, String>> = OnceLock::new();
    ABI.get_or_init(|| {
        let e = match sys::create_ruleset(std::ptr::null(), 0, CREATE_RULESET_VERSION) {
            Ok(v) if v >= 1 => {
                return u32::try_from(v).map_err(|_| "bad Landlock version".to_owned())
            }
            Ok(_) => io::Error::from(io::ErrorKind::Unsupported),
            Err(e) => e,
        };
        if e.kind() == io::ErrorKind::Unsupported && !cfg!(target_os = "linux") {
            return Err(format!(
                "Landlock is a Linux feature; this build runs on {} and has no sandbox",
                std::env::consts::OS
            ));
        }
        Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => "this kernel has no Landlock (Linux 5.13 or later is needed, built with CONFIG_SECURITY_LANDLOCK)".to_owned(),
            Some(libc::EOPNOTSUPP) => "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)".to_owned(),
            _ => format!("Landlock is unavailable ({e}; a container's seccomp filter may block it)"),
        })
    })
    .clone()
}

/// What `--version` says about the sandbox.
pub(crate) fn abi_report() -> String {
    match abi() {
        Ok(v) => format!("Landlock ABI {v} ({})", abi_features(v)),
        Err(e) => format!("no sandbox: {e}"),
    }
}

/// What ABI `v` lets the sandbox enforce, in words.
pub(crate) fn abi_features(v: u32) -> String {
    let mut have = vec!["file access"];
    let mut missing = Vec::new();
    let mut add = |min: u32, what: &'static str| {
        if v >= min {
            have.push(what);
        } else {
            missing.push(what);
        }
    };
    add(2, "cross-directory link and rename");
    add(3, "truncation");
    add(4, "TCP bind and connect");
    add(5, "device ioctls");
    add(6, "abstract unix sockets and signals");
    let mut text = have.join(", ");
    if !missing.is_empty() {
        text.push_str("; not enforced: ");
        text.push_str(&missing.join(", "));
    }
    text
}

/// The file-system rights ABI `abi` can restrict (all of them are handled: what no rule
/// allows is denied).
fn fs_rights(abi: u32) -> u64 {
    let mut all = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_DIR_CHANGES;
    if abi >= 2 {
        all |= FS_REFER;
    }
    if abi >= 3 {
        all |= FS_TRUNCATE;
    }
    if abi >= 5 {
        all |= FS_IOCTL_DEV;
    }
    all
}

/// The rights that apply to a file that is not a directory (a rule on one may name no others).
const FILE_ONLY: u64 = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;

/// Devices every sandboxed child may read and write (beside what `/` lets it read).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// One child's sandbox, ready before the fork: a Landlock ruleset holding all its rules.
#[derive(Debug)]
pub(crate) struct Policy {
    ruleset: OwnedFd,
    /// The private temporary directory: the children's `TMPDIR`.
    pub tmp: Option<PathBuf>,
}

impl Policy {
    /// Read (and execute) everything, write `roots` (minus the agent directory `agent`, unless
    /// a root lies in it) and the devices; TCP denied unless `network` (ABI ≥ 4); abstract
    /// unix sockets and signals scoped to the sandbox (ABI ≥ 6).
    fn build(
        abi: u32,
        roots: &[PathBuf],
        agent: Option<&Path>,
        network: bool,
    ) -> io::Result<Policy> {
        let fs = fs_rights(abi);
        let attr = RulesetAttr {
            handled_access_fs: fs,
            handled_access_net: if abi >= 4 && !network {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if abi >= 6 {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
        };
        let fd = sys::create_ruleset(&attr, std::mem::size_of::<RulesetAttr>(), 0)?;
        #[allow(unsafe_code)]
        // SAFETY: a fresh fd, owned by nobody else.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let policy = Policy {
            ruleset,
            tmp: private_tmp().ok().map(Path::to_path_buf),
        };
        policy.allow(Path::new("/"), FS_READ_FILE | FS_READ_DIR | FS_EXECUTE)?;
        for dev in DEVICES {
            let rights = (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV) & fs;
            match policy.allow(Path::new(dev), rights) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
        for root in roots {
            policy.allow_writes(root, agent, fs)?;
        }
        Ok(policy)
    }

    /// Allows every right in `fs` under `root`, except in the agent directory: a root that
    /// holds it is granted entry by entry along the way to it (each directory on that way keeps
    /// only reading, so no new file appears directly in it).
    fn allow_writes(&self, root: &Path, agent: Option<&Path>, fs: u64) -> io::Result<()> {
        let Some(agent) = agent.filter(|a| a.starts_with(root)) else {
            return self.allow(root, fs);
        };
        if agent == root {
            return Ok(());
        }
        for entry in std::fs::read_dir(root)? {
            let path = entry?.path();
            if agent.starts_with(&path) {
                self.allow_writes(&path, Some(agent), fs)?;
            } else {
                match self.allow(&path, fs) {
                    // Gone meanwhile, or a symlink to nowhere: nothing to allow.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    other => other?,
                }
            }
        }
        Ok(())
    }

    /// One rule: `rights` beneath `path` (only the file rights when it is not a directory).
    fn allow(&self, path: &Path, rights: u64) -> io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(sys::O_PATH | libc::O_CLOEXEC)
            .open(path)?;
        let is_dir = file.metadata()?.is_dir();
        let attr = PathBeneath {
            allowed_access: if is_dir { rights } else { rights & FILE_ONLY },
            parent_fd: file.as_raw_fd(),
        };
        sys::add_rule(self.ruleset.as_raw_fd(), &attr)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }

    /// The ruleset's fd, for `enter` in the child.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.ruleset.as_raw_fd()
    }
}

use std::os::unix::fs::OpenOptionsExt;

/// In the child between fork and exec: no new privileges (so no setuid program gains any, and
/// Landlock needs it without CAP_SYS_ADMIN), then the ruleset `fd` restricts this process and
/// everything it will start.
///
/// # Safety
/// Only async-signal-safe calls: two system calls on integers; no allocation, no lock.
#[allow(unsafe_code)]
pub(crate) unsafe fn enter(fd: RawFd) -> io::Result<()> {
    // SAFETY: the caller's promise (between fork and exec), passed on.
    unsafe { sys::restrict_self(fd) }
}

/// Landlock's system calls (Linux). Elsewhere each says `Unsupported`, so `abi()` reports no
/// sandbox and `--sandbox` other than `off` refuses to start.
#[cfg(target_os = "linux")]
mod sys {
    use super::{PathBeneath, RulesetAttr, RULE_PATH_BENEATH};
    use std::io;
    use std::os::fd::RawFd;

    pub(super) const O_PATH: i32 = libc::O_PATH;

    /// landlock_create_ruleset(2): the ABI version (with the VERSION flag) or a new fd.
    pub(super) fn create_ruleset(
        attr: *const RulesetAttr,
        size: usize,
        flags: u32,
    ) -> io::Result<i64> {
        #[allow(unsafe_code)]
        // SAFETY: `attr` is null (with size 0) or points to a struct the caller keeps alive
        // across the call, which only reads it.
        let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, attr, size, flags) };
        if v < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(v)
    }

    /// landlock_add_rule(2) of one path-beneath rule.
    pub(super) fn add_rule(ruleset: RawFd, attr: &PathBeneath) -> io::Result<()> {
        #[allow(unsafe_code)]
        // SAFETY: both fds are open for the call; the attribute struct is only read.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                RULE_PATH_BENEATH,
                attr as *const PathBeneath,
                0u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// No new privileges, then landlock_restrict_self(2).
    ///
    /// # Safety
    /// Async-signal-safe: two system calls on integers.
    #[allow(unsafe_code)]
    pub(super) unsafe fn restrict_self(fd: RawFd) -> io::Result<()> {
        // SAFETY: prctl(2) and landlock_restrict_self(2) take plain integers.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use super::{PathBeneath, RulesetAttr};
    use std::io;
    use std::os::fd::RawFd;

    pub(super) const O_PATH: i32 = 0;

    pub(super) fn create_ruleset(_: *const RulesetAttr, _: usize, _: u32) -> io::Result<i64> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn add_rule(_: RawFd, _: &PathBeneath) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// # Safety
    /// Does nothing.
    #[allow(unsafe_code)]
    pub(super) unsafe fn restrict_self(_: RawFd) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_name_themselves() {
        for (mode, id, _) in MODES {
            assert_eq!(Mode::parse(id), Some(mode));
            assert_eq!(mode.id(), id);
        }
        assert_eq!(Mode::parse("on"), None);
        assert!(unknown_mode("x").contains("workspace-write"));
    }

    #[test]
    fn features_follow_the_abi() {
        assert!(abi_features(1).contains("not enforced: cross-directory"));
        assert!(abi_features(4).contains("TCP bind and connect;"));
        assert!(!abi_features(6).contains("not enforced"));
    }

    #[test]
    fn in_process_writes_follow_the_roots() {
        let base = crate::base::test_support::temp_dir("sandbox-roots");
        let cwd = base.join("work");
        let agent = cwd.join(".prime");
        let named = base.join("named");
        for d in [&cwd, &agent, &named] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(&base, cwd.join("out")).unwrap();
        let sb = Sandbox {
            mode: Mode::WorkspaceWrite,
            writable: vec![named.clone()],
            network: false,
            agent_dir: agent.clone(),
            offered: true,
        };
        assert!(sb.may_write(&cwd, &cwd.join("a/b.txt")).is_ok());
        assert!(sb.may_write(&cwd, &named.join("x")).is_ok());
        assert!(sb.may_write(&cwd, &base.join("x")).is_err());
        assert!(
            sb.may_write(&cwd, &cwd.join("out/x")).is_err(),
            "a symlink out"
        );
        assert!(sb.may_write(&cwd, &cwd.join("../x")).is_err());
        assert!(sb.may_write(&cwd, &agent.join("auth.json")).is_err());
        let ro = sb.with_mode(Mode::ReadOnly);
        let err = ro.may_write(&cwd, &cwd.join("a")).unwrap_err();
        assert!(err.contains("read-only sandbox"), "{err}");
        assert!(ro
            .may_write(&cwd, &private_tmp().unwrap().join("t"))
            .is_ok());
        assert!(sb
            .with_mode(Mode::Off)
            .may_write(&cwd, &base.join("x"))
            .is_ok());
    }
}
