//! Command-line arguments → `Config`. Hand-written: the flag set is small and the error texts
//! are protocol-adjacent (harnesses read them), so we keep full control.

use std::path::PathBuf;

use crate::provider::Thinking;

pub const HELP: &str = "\
prime-agent: a coding agent that speaks the Agent Client Protocol (ACP) on stdin/stdout

Usage: prime-agent [--mode acp] [options]

Options:
  --mode <text|json|rpc|acp|daemon>  Front end; only acp is built (default: acp)
  --provider <name>                  Model provider (e.g. openai, anthropic, scripted)
  --model <provider/id | id>         Model to use
  --api-key <key>                    API key for the provider (highest precedence)
  --base-url <url>                   Point the provider at a compatible server (vLLM, llama.cpp, ...)
  --thinking <level>                 off, minimal, low, medium, high, xhigh, max (default: medium)
  --context-window <tokens>          The model's context window (default: the catalogue's, or
                                     what a --base-url server reports, else 32768)
  --script <file>                    Replies for --provider scripted (JSONL, see README)
  --cwd <dir>                        Change to this directory before starting
  -t, --tools <a,b>                  Tools to offer the model (default: all built-in tools)
  -nt, --no-tools                    Offer no tools
  --system-prompt <text>             Replace the built-in system prompt
  --append-system-prompt <text>      Append text to the system prompt (repeatable)
  -nc, --no-context-files            Do not load AGENTS.md / CLAUDE.md files
  --multi-session                    Host several sessions on one connection, each in the cwd
                                     its session/new names (PRIME_AGENT_MULTI_SESSION=1)
  --no-session                       Keep the conversation in memory only (write no session file)
  --session-dir <dir>                Where session files live (default <agent dir>/sessions)
  -c, --continue                     The next session/new continues the newest session of this cwd
  -r, --resume <id|path>             The next session/new continues this session
  --fork <id|path>                   The next session/new continues a copy of this session
  --offline                          Make no network request except model calls
  --daemon-socket <path>             Accepted for compatibility and ignored (no daemon)
  -h, --help                         Show this help
  -v, --version                      Show the version

Environment:
  RUST_LOG                           Log filter for stderr (e.g. debug logs every frame)
  PRIME_AGENT_CODING_AGENT_DIR       Agent directory (default ~/.prime/agent)
  PRIME_AGENT_SESSION_DIR            Sessions directory (below --session-dir)
  PRIME_AGENT_MULTI_SESSION=1        Same as --multi-session
";

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    pub thinking: Option<Thinking>,
    pub context_window: Option<u64>,
    pub script: Option<PathBuf>,
    pub cwd: Option<PathBuf>,
    pub tools: Option<Vec<String>>,
    pub no_tools: bool,
    pub system_prompt: Option<String>,
    pub append_system_prompt: Vec<String>,
    pub no_context_files: bool,
    /// Several sessions per connection (`--multi-session`, `PRIME_AGENT_MULTI_SESSION=1`).
    pub multi_session: bool,
    pub no_session: bool,
    /// `--session-dir`.
    pub session_dir: Option<PathBuf>,
    /// `-c/--continue`.
    pub continue_session: bool,
    /// `-r/--resume <id|path>`.
    pub resume: Option<String>,
    /// `--fork <id|path>`.
    pub fork: Option<String>,
    pub offline: bool,
    pub daemon_socket: Option<PathBuf>,
    /// Non-fatal diagnostics (unknown long flags, bad thinking level) to log at start-up.
    pub warnings: Vec<String>,
}

#[derive(Debug, PartialEq)]
pub enum Command {
    Run(Box<Config>),
    Help,
    Version,
}

/// Parses `args` (without the program name). `Err` is the text after `Error: `.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut cfg = Config::default();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        // `--flag=value` is accepted for every flag that takes a value.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg, None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            match args.get(i) {
                Some(v) if !v.starts_with("--") => Ok(v.clone()),
                _ => Err(format!("{name} requires a value")),
            }
        };
        match flag {
            "-h" | "--help" => return Ok(Command::Help),
            "-v" | "--version" => return Ok(Command::Version),
            "--mode" => {
                let mode = value("--mode")?;
                match mode.as_str() {
                    "acp" => {}
                    "text" | "json" | "rpc" | "daemon" => {
                        return Err(format!(
                            "--mode {mode} is not supported by this build; use --mode acp"
                        ))
                    }
                    other => {
                        return Err(format!(
                            "Unknown mode \"{other}\". Valid modes: text, json, rpc, acp, daemon"
                        ))
                    }
                }
            }
            "--provider" => cfg.provider = Some(value("--provider")?),
            "--model" => cfg.model = Some(value("--model")?),
            "--api-key" => cfg.api_key = Some(value("--api-key")?),
            "--base-url" => cfg.base_url = Some(value("--base-url")?),
            "--thinking" => {
                let level = value("--thinking")?;
                match Thinking::parse(&level) {
                    Some(t) => cfg.thinking = Some(t),
                    None => cfg.warnings.push(format!(
                        "Invalid thinking level \"{level}\". Valid values: {}",
                        Thinking::NAMES
                    )),
                }
            }
            "--context-window" => {
                let raw = value("--context-window")?;
                match raw.trim().parse::<u64>() {
                    Ok(n) if n > 0 => cfg.context_window = Some(n),
                    _ => return Err("--context-window must be a positive integer".to_owned()),
                }
            }
            "--script" => cfg.script = Some(PathBuf::from(value("--script")?)),
            "--multi-session" => cfg.multi_session = true,
            "--cwd" => cfg.cwd = Some(PathBuf::from(value("--cwd")?)),
            "-t" | "--tools" => {
                let list = value("--tools")?;
                cfg.tools = Some(
                    list.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                );
            }
            "-nt" | "--no-tools" => cfg.no_tools = true,
            "--system-prompt" => cfg.system_prompt = Some(value("--system-prompt")?),
            "--append-system-prompt" => cfg
                .append_system_prompt
                .push(value("--append-system-prompt")?),
            "-nc" | "--no-context-files" => cfg.no_context_files = true,
            "--no-session" => cfg.no_session = true,
            "--session-dir" => cfg.session_dir = Some(PathBuf::from(value("--session-dir")?)),
            "-c" | "--continue" => cfg.continue_session = true,
            "-r" | "--resume" => cfg.resume = Some(value("--resume")?),
            "--fork" => cfg.fork = Some(value("--fork")?),
            "--offline" => cfg.offline = true,
            "--daemon-socket" => cfg.daemon_socket = Some(PathBuf::from(value("--daemon-socket")?)),
            _ if flag.starts_with("--") => {
                // Upstream keeps unknown long flags for extensions; we have none, so we say so
                // and skip the flag (and its value, if it has one).
                cfg.warnings.push(format!("Ignoring unknown option {flag}"));
                if inline.is_none() && args.get(i + 1).is_some_and(|v| !v.starts_with('-')) {
                    i += 1;
                }
            }
            _ if flag.starts_with('-') => return Err(format!("Unknown option: {flag}")),
            _ => cfg.warnings.push(format!(
                "Ignoring positional argument {flag:?}: ACP prompts arrive over stdin"
            )),
        }
        i += 1;
    }
    Ok(Command::Run(Box::new(cfg)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_the_cold_cli_invocation() {
        let got = p(&[
            "--mode",
            "acp",
            "--provider",
            "intercept",
            "--model",
            "cold/test-model",
            "--no-session",
            "--offline",
            "--daemon-socket",
            "/tmp/d.sock",
        ]);
        let Ok(Command::Run(cfg)) = got else {
            panic!("{got:?}")
        };
        assert_eq!(cfg.provider.as_deref(), Some("intercept"));
        assert_eq!(cfg.model.as_deref(), Some("cold/test-model"));
        assert!(cfg.no_session && cfg.offline);
        assert!(cfg.warnings.is_empty());
    }

    #[test]
    fn errors_and_specials() {
        assert_eq!(p(&["-x"]), Err("Unknown option: -x".into()));
        assert_eq!(p(&["--model"]), Err("--model requires a value".into()));
        assert_eq!(
            p(&["--mode", "rpc"]).unwrap_err(),
            "--mode rpc is not supported by this build; use --mode acp"
        );
        assert!(p(&["--mode", "bogus"])
            .unwrap_err()
            .starts_with("Unknown mode"));
        for bad in ["0", "-5", "lots", "1.5", ""] {
            assert_eq!(
                p(&[&format!("--context-window={bad}")]),
                Err("--context-window must be a positive integer".into()),
                "{bad:?}"
            );
        }
        assert_eq!(
            p(&["--context-window"]),
            Err("--context-window requires a value".into())
        );
        let Ok(Command::Run(cfg)) = p(&["--context-window", "4096"]) else {
            panic!()
        };
        assert_eq!(cfg.context_window, Some(4096));
        assert_eq!(p(&["--help"]), Ok(Command::Help));
        assert_eq!(p(&["-v"]), Ok(Command::Version));
    }

    #[test]
    fn lists_inline_values_and_unknown_long_flags() {
        let Ok(Command::Run(cfg)) = p(&[
            "--tools=bash, read",
            "--autonomous-max-turns",
            "3",
            "--thinking",
            "huge",
            "--append-system-prompt",
            "a",
            "--append-system-prompt",
            "b",
        ]) else {
            panic!()
        };
        assert_eq!(cfg.tools, Some(vec!["bash".into(), "read".into()]));
        assert_eq!(
            cfg.append_system_prompt,
            vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(cfg.warnings.len(), 2);
        assert!(cfg.thinking.is_none());
    }

    #[test]
    fn session_selection_flags() {
        let Ok(Command::Run(cfg)) =
            p(&["-c", "--session-dir", "/s", "-r", "abc", "--fork=/x.jsonl"])
        else {
            panic!()
        };
        assert!(cfg.continue_session);
        assert_eq!(cfg.session_dir, Some(PathBuf::from("/s")));
        assert_eq!(cfg.resume.as_deref(), Some("abc"));
        assert_eq!(cfg.fork.as_deref(), Some("/x.jsonl"));
        let Ok(Command::Run(cfg)) = p(&["--continue"]) else {
            panic!()
        };
        assert!(cfg.continue_session);
        assert_eq!(p(&["-r"]), Err("--resume requires a value".into()));
        assert_eq!(p(&["--fork"]), Err("--fork requires a value".into()));
        assert_eq!(
            p(&["--session-dir"]),
            Err("--session-dir requires a value".into())
        );
    }
}
