//! The system prompt (behaviour spec §5.8), written in our own words.
//!
//! Order: the base prompt (or its override: `--system-prompt`, `SYSTEM.md`) with the agent's
//! facts (working directory, conversation log, recursion depth, date); with the `ipython`
//! tool, the kernel's model-facing API; the child doctrine (depth > 0); sub-agent delegation
//! (when the depth allows a child); the harness (refine available: the main agent at depth
//! 0); context files (`# Project Context`); the skills block; the appended texts
//! (`--append-system-prompt`, then `APPEND_SYSTEM.md`) last. The MCP section is added by the
//! turn after all of this, since the servers' state changes as they connect.
//!
//! A prompt is built once per agent (`session/new`, a child's first run) and then reused for
//! every call, so the provider's prefix cache keeps it; only a refine builds the main agent's
//! again (`LivePrompt`), since the harness overview it quotes changed, and a sandbox switch
//! changes its sandbox passage from the next call on (`PromptSpec::for_sandbox`).

use std::path::{Path, PathBuf};

use crate::base::untrusted::{read_or_warn, JSON_CAP, TEXT_CAP};
use crate::config::skills::Skill;

/// The base prompt when there is no `ipython` tool (the classic coding tools).
const BASE: &str = "\
You are Prime Agent, a coding agent working in the user's project through tools.
Work in small steps: look before you change things, make one change at a time, and check the result by running it.
Prefer reading files and running commands over guessing. Keep changes minimal and in the style of the surrounding code.
When a command fails, read the error, fix the cause, and try again; do not repeat the same failing call.
Do not start long-running servers or watchers in the foreground; they block the turn.
When the task is done, stop calling tools and reply with a short summary of what you did and anything left open.";

/// The base prompt when the agent works through the `ipython` kernel.
const KERNEL_BASE: &str = "\
You are Prime Agent, a general-purpose agent that solves tasks by writing and running code.
Break a problem into steps, run code for each, look at the result, and go on one step at a time. When you are done, stop calling tools and give your final answer.
Long-running work (builds, servers, sub-agents): start it, keep its handle or output file, and end your turn; do not poll with sleep loops. You hear back when it finishes.
Write plainly and briefly; say what you did, what you found and what is left.";

/// The root agent tells the user how it is doing on long tasks.
const ROOT_PROGRESS: &str =
    "On a long task, tell the user in a sentence what you are doing before each larger step.";

/// The kernel's model-facing API, shown when the `ipython` tool is offered. Lean on purpose:
/// this is sent with every model call.
const KERNEL_API: &str = "\
# The ipython kernel
Your `ipython` tool runs cells in one persistent Python kernel: variables, imports and loaded data stay between calls. Use plain Python (`open`, `pathlib`, `subprocess`) for files and processes.
- `%%bash` must be the very first line of a cell to run the rest as a shell script. Each such cell is a fresh subshell, so `cd` and `export` do not carry over; `os.chdir` and `os.environ` in Python do.
- Run the project's code, tests and tools through the project's own environment (a `%%bash` cell with its venv or tool chain); do not install its dependencies into the kernel. If the kernel itself lacks a package, install it with `sys.executable -m pip install <pkg>` (via `subprocess`).
- Pre-imported helpers (await them in a cell):
  - `await edit(path, old_str, new_str)` replaces one unique snippet of a file.
  - `attach_image(path, ...)` loads image files into your context so you can see them.
  - `await goal.get()`, `await goal.create(objective, token_budget=None)`, `await goal.complete()` read and set the session's goal; mark it complete only when it is done.
  - `await compact.run(instructions=None)` summarises older conversation to free context once this turn ends; `await compact.status()` shows the numbers.
  - `await agent_message.send(text, receiver_role=\"parent\"|\"child\"|\"sibling\", receiver_name=None)` and `await agent_message.list_agents()` talk to your agent family (parent, children, siblings) only.
  - `await agent_observe.list()`, `await agent_observe.get(name)` and `await agent_observe.recent(name, limit=5)` show what the agents of your family are doing.
  - `await mcp.list_tools(server)` and `await mcp.call_tool(server, tool, arguments)` reach the session's MCP servers.";

/// The built-in `skill_creator` (settings `enableBuiltinSkills` turns it off).
const SKILL_CREATOR: &str = "  - `print(skill_creator.INSTRUCTIONS)` explains how to write a new skill; `skill_creator.create(...)` writes one.";

/// Scheduling, for the session's own agent (a child's schedules would outlive its task).
const HEARTBEATS: &str = "  - `await rlm_heartbeat.create(instruction, interval=\"every 30m\")` (also `\"in 10m\"`, `\"at 09:00\"`, cron), `.list()`, `.update(id, ...)`, `.delete(id)` schedule prompts to yourself for later.";

/// Facts about one agent that its prompt states.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AgentFacts<'a> {
    pub cwd: &'a Path,
    /// The tools this agent is offered, by name.
    pub tool_names: &'a [String],
    /// The `ipython` tool is one of them: the prompt explains the kernel.
    pub kernel: bool,
    /// `RLM_DEPTH` of this agent (0 at the root).
    pub depth: u32,
    /// `RLM_MAX_DEPTH`: children may be started while `depth < max_depth`.
    pub max_depth: u32,
    /// The session file this agent's conversation is written to (`None`: not persisted).
    pub log: Option<&'a Path>,
    /// A child agent: its name and its parent's.
    pub child: Option<(&'a str, &'a str)>,
    /// The harness overview when refine is available (the main agent at depth 0 with a
    /// kernel); `None` leaves the harness paragraph out.
    pub harness: Option<&'a str>,
    /// The context files (`context_files`), read before: building a prompt reads nothing.
    pub context: &'a [(PathBuf, String)],
}

/// What a session's system prompt quotes from disk, read off the main loop (the store
/// worker's open job) through `untrusted`: the context files and the harness overview.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SessionFiles {
    pub context: Vec<(PathBuf, String)>,
    pub harness: String,
}

/// A running agent's system prompt. Each model call takes the current text once (`current`),
/// so a call's prompt never changes under it; a refine replaces it between calls (`rebuild`)
/// with the harness overview it quotes read again.
pub(crate) struct LivePrompt {
    text: std::sync::Mutex<std::sync::Arc<str>>,
    /// Builds the prompt again from disk (`None`: it quotes nothing that changes).
    rebuild: Option<Box<dyn Fn() -> String + Send + Sync>>,
}

impl LivePrompt {
    pub(crate) fn fixed(text: String) -> LivePrompt {
        LivePrompt {
            text: std::sync::Mutex::new(text.into()),
            rebuild: None,
        }
    }

    pub(crate) fn rebuilt_by(
        text: String,
        rebuild: Box<dyn Fn() -> String + Send + Sync>,
    ) -> LivePrompt {
        LivePrompt {
            text: std::sync::Mutex::new(text.into()),
            rebuild: Some(rebuild),
        }
    }

    /// The prompt for the next model call.
    pub(crate) fn current(&self) -> std::sync::Arc<str> {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Builds the prompt again (after a refine): the next call sees it.
    pub(crate) fn rebuild(&self) {
        if let Some(build) = &self.rebuild {
            let text = build();
            *self.text.lock().unwrap_or_else(|e| e.into_inner()) = text.into();
        }
    }
}

/// The user's part of the system prompt, fixed at start-up (one per process, or per
/// session once an ACP client adds its own parts with `with_client`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PromptSpec {
    /// The base override: `--system-prompt`, else `SYSTEM.md` (project, then agent dir).
    pub custom: Option<String>,
    /// Texts that go last, in order: `--append-system-prompt`s, then `APPEND_SYSTEM.md`.
    pub append: Vec<String>,
    /// `None` disables context files (`--no-context-files`).
    pub agent_dir: Option<std::path::PathBuf>,
    /// The skills listed in `<available_skills>`.
    pub skills: Vec<Skill>,
    /// `YYYY-MM-DD`, fixed when the spec is made so the prompt stays the same for the process.
    pub today: String,
    /// Settings `enableBuiltinSkills: false`: the kernel has no `skill_creator` to mention.
    pub no_builtin_skills: bool,
    /// The start-up sandbox: one passage says what it lets commands write (`None`, or off and
    /// not offered: none). A switch rewrites the passage at the next call (`for_sandbox`).
    pub sandbox: Option<crate::base::sandbox::Sandbox>,
}

impl PromptSpec {
    /// This spec with a client's own parts (ACP `systemPrompt` on `session/new`): `base`
    /// replaces the base prompt, `append` goes after every other appended text.
    pub(crate) fn with_client(&self, base: Option<String>, append: Option<String>) -> PromptSpec {
        let mut spec = self.clone();
        if base.is_some() {
            spec.custom = base;
        }
        spec.append.extend(append);
        spec
    }

    /// The system prompt of one agent.
    pub(crate) fn build(&self, facts: &AgentFacts<'_>) -> String {
        build(self, facts)
    }

    /// `built` (this spec's prompt of an agent in `cwd`) with its sandbox passage describing
    /// `now`, the sandbox the session's calls run in at this model call (its `sandbox` option
    /// or permission mode may have switched it since the prompt was built). `None` when the
    /// passage already says so, or the prompt has none (no tools, no sandbox offered).
    pub(crate) fn for_sandbox(
        &self,
        built: &str,
        now: &crate::base::sandbox::Sandbox,
        cwd: &Path,
    ) -> Option<String> {
        let then = self.sandbox.as_ref()?.prompt_passage(cwd)?;
        let current = now.prompt_passage(cwd).unwrap_or_default();
        (then != current && built.contains(&then)).then(|| built.replacen(&then, &current, 1))
    }
}

fn push_section(out: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(text.trim_end());
}

/// Builds the prompt in §5.8's order (see the module docs).
pub(crate) fn build(spec: &PromptSpec, f: &AgentFacts<'_>) -> String {
    let kernel = f.kernel;
    let log = match f.log {
        Some(p) => p.display().to_string(),
        None => "not persisted".to_owned(),
    };
    let mut facts = String::new();
    facts.push_str(&format!("Working directory: {}\n", f.cwd.display()));
    facts.push_str(&format!("Conversation log: {log}\n"));
    facts.push_str(&format!("Recursive agent depth: {}\n", f.depth));
    facts.push_str(&format!("Current date: {}\n", spec.today));
    if f.tool_names.is_empty() {
        facts.push_str("You have no tools in this session; answer from what you know.");
    } else {
        facts.push_str(&format!("Tools: {}. ", f.tool_names.join(", ")));
        facts.push_str("Relative paths are resolved against the working directory.");
        if let Some(passage) = spec.sandbox.as_ref().and_then(|s| s.prompt_passage(f.cwd)) {
            facts.push('\n');
            facts.push_str(&passage);
        }
    }
    let mut out = String::new();
    match &spec.custom {
        Some(custom) => {
            // The custom variant: the user's base, then the facts.
            push_section(&mut out, custom);
            push_section(&mut out, &facts);
        }
        None => {
            let mut base = String::from(if kernel { KERNEL_BASE } else { BASE });
            if f.depth == 0 && f.child.is_none() {
                base.push('\n');
                base.push_str(ROOT_PROGRESS);
            }
            push_section(&mut out, &base);
            push_section(&mut out, &facts);
        }
    }
    if kernel {
        let mut api = String::from(KERNEL_API);
        if !spec.no_builtin_skills {
            api.push('\n');
            api.push_str(SKILL_CREATOR);
        }
        if f.child.is_none() {
            api.push('\n');
            api.push_str(HEARTBEATS);
        }
        push_section(&mut out, &api);
    }
    if let Some((name, parent)) = f.child {
        push_section(&mut out, &child_doctrine(name, parent, f.depth));
    }
    if kernel && f.depth < f.max_depth {
        push_section(&mut out, &delegation(f.depth, f.max_depth));
    }
    if let (true, Some(overview)) = (kernel, f.harness) {
        push_section(&mut out, &harness(overview));
    }
    if spec.agent_dir.is_some() {
        let files = f.context;
        if !files.is_empty() {
            let mut ctx = String::from(
                "# Project Context\n\nThe user keeps these instructions for this project; follow them.\n",
            );
            for (path, content) in files {
                ctx.push_str(&format!(
                    "\n## {}\n\n{}\n",
                    path.display(),
                    content.trim_end()
                ));
            }
            push_section(&mut out, &ctx);
        }
    }
    push_section(&mut out, &crate::config::skills::prompt_block(&spec.skills));
    for extra in &spec.append {
        push_section(&mut out, extra);
    }
    out
}

/// What a child agent is told about its place in the family.
fn child_doctrine(name: &str, parent: &str, depth: u32) -> String {
    format!(
        "# Your role: a child agent\n\
         You are `{name}`, a child agent at depth {depth}, started by `{parent}` for one task. The task comes in a user message that begins with `[task from parent]`.\n\
         Your final text does not reach your parent. When the task is done (or you are stuck), send the result with `await agent_message.send(result, receiver_role=\"parent\")` in a cell, then end your turn. Put large results in files and send their paths.\n\
         Messages from your family arrive as user messages that say who sent them; answer the ones that ask you something."
    )
}

/// When to start sub-agents and how (only offered while the depth allows a child).
fn delegation(depth: u32, max_depth: u32) -> String {
    format!(
        "# Delegating to sub-agents\n\
         `handle = await rlm(prompt, name=None, model=None, thinking=None)` starts a child agent with its own kernel and context on a self-contained task, and returns at once with a handle, not the answer. Give it everything it needs in the prompt: it sees nothing of your conversation.\n\
         Children report back through `agent_message`; their messages (or a notice when one ends without replying) arrive here as new user messages, so end your turn after starting them rather than waiting.\n\
         `await rlm.list_subagents()`, `await rlm.delete_subagent(name)` and `await rlm.find_models(query)` (for `model=\"provider/id\"`) manage them.\n\
         Delegate independent parts of a larger job, or work whose output would flood your context; do small things yourself. You are at depth {depth}; agents can nest to depth {max_depth}."
    )
}

/// The refine paragraph with the harness store's current overview.
fn harness(overview: &str) -> String {
    format!(
        "# Harness\n\
         The harness keeps what you learn across sessions: prompt notes, memories, skills and sub-agent recipes, in `rlm.harness` (`create_memory(title, content)`, `list(kind)`, `get(kind, id)`, `update(kind, id, ...)`, `delete(kind, id)`; `global_=True` for the store every session shares). Record what will help next time; keep entries short.\n\
         `await refine.run(instructions=None)` reviews this session and edits the harness after the turn ends (the user can also type `/refine`); `await refine.status()` shows the results.\n\
         Current harness:\n{}",
        overview.trim_end()
    )
}

/// A short overview of the harness stores (`harness_state.json`, §4.5): each kind's entry
/// ids and titles, prompt notes with their text (capped). `(empty)` when both are empty.
pub(crate) fn harness_overview(stores: &[(&str, PathBuf)]) -> String {
    const PER_KIND: usize = 20;
    const NOTE_CHARS: usize = 400;
    let mut lines = Vec::new();
    for (scope, dir) in stores {
        let path = dir.join("harness_state.json");
        let Some(text) = read_or_warn(&path, JSON_CAP, "the harness state") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        for kind in ["prompt", "memory", "skill", "subagent"] {
            let Some(entries) = v
                .pointer(&format!("/entries/{kind}"))
                .and_then(|e| e.as_object())
            else {
                continue;
            };
            if entries.is_empty() {
                continue;
            }
            lines.push(format!("{scope} {kind}:"));
            for (id, e) in entries.iter().take(PER_KIND) {
                let title = e.get("title").and_then(|t| t.as_str()).unwrap_or("");
                let mut line = format!("- {id}: {title}");
                if kind == "prompt" {
                    if let Some(c) = e.get("content").and_then(|c| c.as_str()) {
                        let c: String = c.chars().take(NOTE_CHARS).collect();
                        line.push_str(&format!(" ({})", c.replace('\n', " ")));
                    }
                }
                lines.push(line);
            }
            if entries.len() > PER_KIND {
                lines.push(format!("- … {} more", entries.len() - PER_KIND));
            }
        }
    }
    if lines.is_empty() {
        "(empty)".to_owned()
    } else {
        lines.join("\n")
    }
}

/// `SYSTEM.md` and `APPEND_SYSTEM.md`: the project's `<cwd>/.prime/agent/` copy first, else
/// the agent dir's. An empty file counts as absent.
pub(crate) fn system_files(cwd: &Path, agent_dir: &Path) -> (Option<String>, Option<String>) {
    let find = |name: &str| {
        [
            cwd.join(".prime").join("agent").join(name),
            agent_dir.join(name),
        ]
        .iter()
        .find_map(|p| {
            read_or_warn(p, TEXT_CAP, "the system prompt file").filter(|t| !t.trim().is_empty())
        })
        .map(|t| t.trim_end().to_owned())
    };
    (find("SYSTEM.md"), find("APPEND_SYSTEM.md"))
}

/// Context files: the global one in the agent dir, then one per directory from the root down
/// to `cwd` (the first of `AGENTS.md`, `AGENTS.MD`, `CLAUDE.md`, `CLAUDE.MD`). Read through
/// `untrusted::read_text`: a FIFO, a device or a file over `TEXT_CAP` under one of those names
/// (a cloned repository can hold any) is skipped with a warning, and the next name is tried.
pub(crate) fn context_files(agent_dir: &Path, cwd: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut dirs = vec![agent_dir.to_path_buf()];
    let mut chain: Vec<PathBuf> = cwd.ancestors().map(Path::to_path_buf).collect();
    chain.reverse();
    dirs.extend(chain);
    for dir in dirs {
        for name in ["AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD"] {
            let path = dir.join(name);
            if let Some(content) = read_or_warn(&path, TEXT_CAP, "the context file") {
                let canon = std::fs::canonicalize(&path).unwrap_or(path.clone());
                if !seen.contains(&canon) {
                    seen.push(canon);
                    out.push((path, content));
                }
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_files_root_to_cwd() {
        let base = std::env::temp_dir().join(format!("pa-ctx-{}", std::process::id()));
        let agent = base.join("agent");
        let proj = base.join("proj");
        let sub = proj.join("sub");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(agent.join("AGENTS.md"), "global rules").unwrap();
        std::fs::write(proj.join("CLAUDE.md"), "project rules").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "sub rules").unwrap();
        let files = context_files(&agent, &sub);
        let contents: Vec<&str> = files.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(contents, vec!["global rules", "project rules", "sub rules"]);
        let spec = PromptSpec {
            custom: Some("Custom base.".into()),
            append: vec!["Extra.".into()],
            agent_dir: Some(agent.clone()),
            skills: Vec::new(),
            today: "2026-11-29".into(),
            no_builtin_skills: false,
            sandbox: None,
        };
        let names = vec!["bash".to_string()];
        let p = spec.build(&AgentFacts {
            context: &files,
            ..facts(&sub, &names)
        });
        assert!(p.starts_with("Custom base."));
        assert!(p.contains("Current date: 2026-11-29"));
        assert!(p.contains("project rules") && p.ends_with("Extra."));
        let none = PromptSpec {
            agent_dir: None,
            ..spec.clone()
        }
        .build(&AgentFacts {
            context: &files,
            ..facts(&sub, &names)
        });
        assert!(!none.contains("project rules"));
        assert!(!none.contains("Sandbox:"));
        let sandboxed = PromptSpec {
            sandbox: Some(crate::base::sandbox::Sandbox {
                mode: crate::base::sandbox::Mode::WorkspaceWrite,
                ..Default::default()
            }),
            ..spec
        }
        .build(&facts(&sub, &names));
        let passage = format!(
            "workspace-write OS sandbox. They may read any file but write only under {}, a private temporary directory ($TMPDIR)",
            sub.display()
        );
        assert!(sandboxed.contains(&passage), "{sandboxed}");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A switch of the session's sandbox rewrites the prompt's passage, and nothing else;
    /// without a passage (no sandbox offered) there is nothing to rewrite.
    #[test]
    fn a_sandbox_switch_rewrites_the_passage() {
        use crate::base::sandbox::{Mode, Sandbox};
        let cwd = Path::new("/work/project");
        let names = vec!["bash".to_string()];
        let off = Sandbox {
            offered: true,
            ..Sandbox::default()
        };
        let spec = PromptSpec {
            sandbox: Some(off.clone()),
            ..PromptSpec::default()
        };
        let built = spec.build(&facts(cwd, &names));
        let off_line = off.prompt_passage(cwd).unwrap();
        assert!(built.contains(&off_line), "{built}");
        assert_eq!(spec.for_sandbox(&built, &off, cwd), None);
        let ws = off.with_mode(Mode::WorkspaceWrite);
        let now = spec.for_sandbox(&built, &ws, cwd).unwrap();
        assert!(
            now.contains("the workspace-write OS sandbox")
                && now.contains("write only under /work/project, a private")
                && !now.contains(&off_line),
            "{now}"
        );
        assert_eq!(
            now.replace(&ws.prompt_passage(cwd).unwrap(), &off_line),
            built
        );
        // Built in workspace-write, narrowed to read-only (permission mode) or switched off.
        let spec = PromptSpec {
            sandbox: Some(ws.clone()),
            ..PromptSpec::default()
        };
        let built = spec.build(&facts(cwd, &names));
        let ro = spec
            .for_sandbox(&built, &ws.with_mode(Mode::ReadOnly), cwd)
            .unwrap();
        assert!(ro.contains("the read-only OS sandbox") && !ro.contains("/work/project,"));
        assert!(spec
            .for_sandbox(&built, &off, cwd)
            .unwrap()
            .contains(&off_line));
        let plain = PromptSpec {
            sandbox: Some(Sandbox::default()),
            ..PromptSpec::default()
        };
        let built = plain.build(&facts(cwd, &names));
        assert!(!built.contains("Sandbox:"));
        assert_eq!(plain.for_sandbox(&built, &ws, cwd), None);
    }

    fn facts<'a>(cwd: &'a Path, names: &'a [String]) -> AgentFacts<'a> {
        AgentFacts {
            cwd,
            tool_names: names,
            kernel: names.iter().any(|n| n == "ipython"),
            depth: 0,
            max_depth: 1,
            log: None,
            child: None,
            harness: None,
            context: &[],
        }
    }

    /// Every name of the kernel API the model must learn, and what it must not see without
    /// the kernel.
    const KERNEL_NAMES: [&str; 7] = [
        "rlm(",
        "agent_message",
        "goal",
        "compact",
        "rlm_heartbeat",
        "attach_image",
        "%%bash",
    ];

    #[test]
    fn the_kernel_api_only_with_ipython_and_in_section_order() {
        let cwd = Path::new("/w");
        let spec = PromptSpec {
            append: vec!["APPENDED".into()],
            skills: vec![Skill {
                name: "deploy".into(),
                description: "Ship it".into(),
                path: PathBuf::from("/s/deploy/SKILL.md"),
                body: String::new(),
                python_import: None,
            }],
            today: "2026-01-02".into(),
            sandbox: None,
            ..Default::default()
        };
        let with = vec!["ipython".to_string()];
        let root = spec.build(&AgentFacts {
            harness: Some("(empty)"),
            log: Some(Path::new("/s/abc.jsonl")),
            ..facts(cwd, &with)
        });
        for name in KERNEL_NAMES {
            assert!(root.contains(name), "{name}");
        }
        assert!(root.contains("Recursive agent depth: 0\n"));
        assert!(root.contains("Conversation log: /s/abc.jsonl\n"));
        let order = [
            "You are Prime Agent",
            "Working directory: /w",
            "# The ipython kernel",
            "# Delegating to sub-agents",
            "# Harness",
            "<available_skills>",
            "APPENDED",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|s| root.find(s).unwrap_or_else(|| panic!("{s}")))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
        assert!(!root.contains("child agent at depth"));
        // The same inputs, the same bytes (the provider's prefix cache).
        assert_eq!(
            root,
            spec.build(&AgentFacts {
                harness: Some("(empty)"),
                log: Some(Path::new("/s/abc.jsonl")),
                ..facts(cwd, &with)
            })
        );
        let without = vec!["bash".to_string(), "read".to_string()];
        let plain = spec.build(&facts(cwd, &without));
        for name in [
            "rlm",
            "agent_message",
            "rlm_heartbeat",
            "attach_image",
            "%%bash",
            "# Harness",
            "compact.run",
        ] {
            assert!(!plain.contains(name), "{name} without ipython");
        }
        assert!(plain.contains("Conversation log: not persisted"));
        // A child: the doctrine, its depth, no heartbeats, no delegation at the depth limit.
        let child = spec.build(&AgentFacts {
            depth: 1,
            child: Some(("worker", "main")),
            ..facts(cwd, &with)
        });
        assert!(child.contains("You are `worker`, a child agent at depth 1, started by `main`"));
        assert!(child.contains("[task from parent]"));
        assert!(child.contains("Recursive agent depth: 1"));
        assert!(!child.contains("rlm_heartbeat") && !child.contains("# Delegating"));
        // SYSTEM.md / --system-prompt: the custom variant keeps facts, kernel API, skills.
        let custom = spec.with_client(Some("MY BASE".into()), Some("CLIENT".into()));
        let p = custom.build(&facts(cwd, &with));
        assert!(p.starts_with("MY BASE\n\nWorking directory: /w"));
        assert!(p.contains("Current date: 2026-01-02") && p.contains("<available_skills>"));
        assert!(p.ends_with("APPENDED\n\nCLIENT"));
    }

    #[test]
    fn harness_overview_lists_entries() {
        let dir = std::env::temp_dir().join(format!("pa-harness-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("harness_state.json"),
            r#"{"schema":1,"entries":{"prompt":{"tests":{"title":"Run tests","content":"Always run make test."}},"memory":{"m1":{"title":"Uses uv"}},"skill":{},"subagent":{}}}"#,
        )
        .unwrap();
        assert_eq!(
            harness_overview(&[("global", dir.clone())]),
            "global prompt:\n- tests: Run tests (Always run make test.)\nglobal memory:\n- m1: Uses uv"
        );
        assert_eq!(harness_overview(&[("local", dir.join("none"))]), "(empty)");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
