//! The system prompt, written in our own words, plus project context files.
//!
//! Order: base prompt (or `--system-prompt`), environment facts, context files
//! (`AGENTS.md`/`CLAUDE.md` from the agent dir, then filesystem root down to the cwd), then
//! `--append-system-prompt` texts.

use std::path::{Path, PathBuf};

const BASE: &str = "\
You are Prime Agent, a coding agent working in the user's project through tools.
Work in small steps: look before you change things, make one change at a time, and check the result by running it.
Prefer reading files and running commands over guessing. Keep changes minimal and in the style of the surrounding code.
When a command fails, read the error, fix the cause, and try again; do not repeat the same failing call.
Do not start long-running servers or watchers in the foreground; they block the turn.
When the task is done, stop calling tools and reply with a short summary of what you did and anything left open.";

/// Inputs to the system prompt.
/// The user's part of the system prompt, kept to build it again for another cwd.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PromptSpec {
    pub custom: Option<String>,
    pub append: Vec<String>,
    /// `None` disables context files (`--no-context-files`).
    pub agent_dir: Option<std::path::PathBuf>,
}

pub(crate) struct PromptInputs<'a> {
    pub cwd: &'a Path,
    pub tool_names: &'a [String],
    pub custom: Option<&'a str>,
    pub append: &'a [String],
    /// `None` disables context files (`--no-context-files`).
    pub agent_dir: Option<&'a Path>,
    pub today: String,
}

pub(crate) fn build_system_prompt(inputs: &PromptInputs<'_>) -> String {
    let mut out = String::new();
    out.push_str(inputs.custom.unwrap_or(BASE));
    out.push_str("\n\n# Environment\n");
    out.push_str(&format!("Current date: {}\n", inputs.today));
    out.push_str(&format!(
        "Current working directory: {}\n",
        inputs.cwd.display()
    ));
    if inputs.tool_names.is_empty() {
        out.push_str("You have no tools in this session; answer from what you know.\n");
    } else {
        out.push_str(&format!("Tools: {}\n", inputs.tool_names.join(", ")));
        out.push_str("Relative paths are resolved against the working directory.\n");
    }
    if let Some(agent_dir) = inputs.agent_dir {
        let files = context_files(agent_dir, inputs.cwd);
        if !files.is_empty() {
            out.push_str("\n# Project Context\n\nThe user keeps these instructions for this project; follow them.\n");
            for (path, content) in files {
                out.push_str(&format!(
                    "\n## {}\n\n{}\n",
                    path.display(),
                    content.trim_end()
                ));
            }
        }
    }
    for extra in inputs.append {
        out.push_str("\n\n");
        out.push_str(extra);
    }
    out
}

/// Context files: the global one in the agent dir, then one per directory from the root down
/// to `cwd` (the first of `AGENTS.md`, `AGENTS.MD`, `CLAUDE.md`, `CLAUDE.MD`).
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
            if let Ok(content) = std::fs::read_to_string(&path) {
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
    fn context_files_root_to_cwd_and_custom_prompt() {
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
        let names = vec!["bash".to_string()];
        let append = vec!["Extra.".to_string()];
        let p = build_system_prompt(&PromptInputs {
            cwd: &sub,
            tool_names: &names,
            custom: Some("Custom base."),
            append: &append,
            agent_dir: Some(&agent),
            today: "2026-11-29".into(),
        });
        assert!(p.starts_with("Custom base."));
        assert!(p.contains("Current date: 2026-11-29"));
        assert!(p.contains("project rules") && p.ends_with("Extra."));
        let none = build_system_prompt(&PromptInputs {
            agent_dir: None,
            custom: None,
            ..PromptInputs {
                cwd: &sub,
                tool_names: &names,
                custom: None,
                append: &[],
                agent_dir: None,
                today: String::new(),
            }
        });
        assert!(!none.contains("project rules"));
        let _ = std::fs::remove_dir_all(&base);
    }
}
