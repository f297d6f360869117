//! Command-line arguments → `Config`. Hand-written: the flag set is small and the error texts
//! are protocol-adjacent (harnesses read them), so we keep full control.

use std::path::PathBuf;
use std::time::Duration;

use crate::provider::Thinking;

pub const HELP: &str = "\
prime-agent: a coding agent that speaks the Agent Client Protocol (ACP) on stdin/stdout

Usage: prime-agent [--mode acp] [options]
       prime-agent -p [options] \"<prompt>\"           (print the final answer)
       prime-agent --mode json [options] \"<prompt>\"  (print upstream's session-event stream,
                                                one JSON line per event)
       prime-agent --mode acp-json [options] \"<prompt>\"  (print every ACP session/update as
                                                one JSON line, then a result line)
       The prompt may come on stdin instead; exit code 0 end_turn, 1 failure, 2 limit hit.
       prime-agent model list [search]                 (the models you have keys for)
       prime-agent session export <id|path> [out.html] (a stored session as one HTML page)
       prime-agent schedule add|list|remove ...        (scheduled prompts of stored sessions)
       prime-agent sandbox                             (the Landlock ABI the sandbox finds)
       prime-agent kernel setup [package ...]          (make the kernel's Python environment)

Options:
  --mode <text|json|rpc|acp|daemon>  Front end: acp (default), json or acp-json (one prompt)
  -p, --print                        Run one prompt and print the final assistant text
  --provider <name>                  Model provider (e.g. openai, anthropic, scripted)
  --model <provider/id[:level]>      Model to use (a bare id or pattern works too; :high etc.
                                     sets the thinking level unless --thinking is given)
  --models <a,b>                     Models the session's menu offers (patterns; the first is
                                     the default unless a session is continued)
  --api-key <key>                    API key for the provider (highest precedence)
  --base-url <url>                   Point the provider at a compatible server (vLLM, llama.cpp, ...)
  --thinking <level>                 off, minimal, low, medium, high, xhigh, max (default: medium)
  --context-window <tokens>          The model's context window (default: the catalogue's, or
                                     what a --base-url server reports, else 32768)
  --script <file>                    Replies for --provider scripted (JSONL, docs/scripted-model.md)
  --cwd <dir>                        Change to this directory before starting
  -t, --tools <a,b>                  Tools to offer the model (default: all built-in tools)
  -nt, --no-tools                    Offer no tools
  -nbt, --no-builtin-tools           Offer no built-in tool unless --tools names it
  --system-prompt <text>             Replace the built-in system prompt
  --append-system-prompt <text>      Append text to the system prompt (repeatable)
  -nc, --no-context-files            Do not load AGENTS.md / CLAUDE.md files
  --skill <dir|SKILL.md>             Load a skill (repeatable; see docs/skills-and-settings.md)
  -ns, --no-skills                   Do not discover skills (--skill ones still load)
  --prompt-template <file.md>        Load a prompt template (repeatable)
  -np, --no-prompt-templates         Do not discover prompt templates
  --permission-mode <mode>           full-access (default), ask (approve writes, edits,
                                     commands and MCP calls in the client), read-only
  --sandbox <mode>                   off (default), read-only or workspace-write: hold the
                                     model's commands, cells and writes to it (Linux Landlock;
                                     docs/sandbox.md)
  --sandbox-writable <path>          Another root workspace-write may write (repeatable)
  --sandbox-network <on|off>         TCP in the sandbox (default: off)
  --client-terminal                  Run bash in the client's terminal when it offers one
  --multi-session                    Host several sessions on one connection, each in the cwd
                                     its session/new names (PRIME_AGENT_MULTI_SESSION=1)
  --listen <addr:port>               Serve ACP over Streamable HTTP and WebSocket at
                                     http://<addr:port>/acp instead of stdio, many clients and
                                     sessions in one process (docs/remote.md; implies
                                     --multi-session; loopback unless a token file is given)
  --listen-token-file <path>         Bearer token every --listen request must carry (required
                                     for an address other than loopback)
  --autonomous                       Keep working unattended within one prompt (see README)
  --autonomous-gate <cmd>            Shell command that must pass before the run ends
                                     (repeatable; implies --autonomous)
  --autonomous-gate-retries <n>      Failed gate runs allowed (default: 3)
  --autonomous-gate-timeout-ms <n>   Time limit per gate run (default: 300000)
  --autonomous-max-continuations <n> Continuations per session (default: 3)
  --autonomous-max-turns <n>         Model calls per session (default: 12)
  --autonomous-max-tokens <n>        Tokens per session (default: 80000)
  --autonomous-timeout-ms <n>        Wall clock from enablement (default: 1800000)
  --max-model-calls <n>              Model calls one prompt may make (default: 100 for -p and
                                     --mode json, no cap otherwise; 0: no cap)
  --goal <objective>                 Start the session with this goal
  --goal-token-budget <n>            Token budget of the --goal
  --no-session                       Keep the conversation in memory only (write no session file)
  --session-dir <dir>                Where session files live (default <agent dir>/sessions)
  -c, --continue                     The next session/new continues the newest session of this cwd
  -r, --resume <id|path>             The next session/new continues this session
  --fork <id|path>                   The next session/new continues a copy of this session
  --offline                          Make no network request except model calls
  --daemon-socket <path>             Accepted for compatibility and ignored (no daemon)
  --verbose                          Log at info level on stderr (unless RUST_LOG is set)
  --                                 End of options: what follows is the prompt
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
    /// `-nbt/--no-builtin-tools`: no built-in tool unless `--tools` names it (MCP tools stay).
    pub no_builtin_tools: bool,
    /// `--verbose`: log at info level unless `RUST_LOG` says otherwise.
    pub verbose: bool,
    pub system_prompt: Option<String>,
    pub append_system_prompt: Vec<String>,
    pub no_context_files: bool,
    /// Several sessions per connection (`--multi-session`, `PRIME_AGENT_MULTI_SESSION=1`).
    pub multi_session: bool,
    /// `--client-terminal`: `bash` runs in the client's terminal when it offers `terminal`.
    pub client_terminal: bool,
    /// `--permission-mode`: the id of a valid mode (`full-access`, `ask`, `read-only`).
    pub permission_mode: Option<String>,
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
    /// `-p/--print`: run one prompt, print the final assistant text.
    pub print: bool,
    /// `--mode json` or `--mode acp-json`: run one prompt, print its events as JSON lines.
    pub json: bool,
    /// `--mode acp-json`: those lines are the ACP `session/update` payloads (else upstream's
    /// session events).
    pub acp_json: bool,
    /// Positional arguments: the prompt of `--print` / `--mode json`.
    pub prompt_args: Vec<String>,
    /// Autonomous mode (`--autonomous*`).
    pub(crate) autonomy: crate::agent::autonomy::Config,
    /// The `--autonomous-*` flags given (each wins over its settings key `autonomous.*`).
    pub(crate) autonomy_flags: Vec<String>,
    /// `--goal`: the objective a new session starts with, and `--goal-token-budget`.
    pub(crate) goal: Option<String>,
    pub(crate) goal_token_budget: Option<u64>,
    /// Resources (issue 20): `--skill` paths, `-ns`, `--prompt-template` files, `-np`.
    pub skills: Vec<PathBuf>,
    pub no_skills: bool,
    pub prompt_templates: Vec<PathBuf>,
    pub no_prompt_templates: bool,
    /// `--models a,b`: the patterns that scope the model menu.
    pub models: Vec<String>,
    /// The `:<level>` suffix of `--model` (used unless `--thinking` is given).
    pub model_thinking: Option<Thinking>,
    /// `--max-model-calls` (`Some(0)`: no cap, even headless).
    pub(crate) max_model_calls: Option<u64>,
    /// `--sandbox`: the id of a valid mode.
    pub sandbox: Option<String>,
    /// `--sandbox-writable` (repeatable).
    pub sandbox_writable: Vec<PathBuf>,
    /// `--sandbox-network on|off`.
    pub sandbox_network: Option<bool>,
    /// Non-fatal diagnostics (positional arguments ACP mode ignores) to log at start-up.
    pub warnings: Vec<String>,
    /// `--listen`: serve ACP remotely on this address instead of stdio.
    pub listen: Option<std::net::SocketAddr>,
    /// `--listen-token-file`.
    pub listen_token_file: Option<PathBuf>,
}

impl Config {
    /// One prompt without an ACP client (`-p/--print`, `--mode json`).
    pub fn headless(&self) -> bool {
        self.print || self.json
    }
}

#[derive(Debug, PartialEq)]
pub enum Command {
    Run(Box<Config>),
    Help,
    Version,
    /// `prime-agent model|session|schedule …`: runs and exits without ACP (`subcommands/`).
    Sub(crate::app::subcommands::Subcommand),
}

/// Upstream's texts for the flags its subcommands replaced.
pub(crate) const LIST_MODELS_REMOVED: &str =
    "--list-models was removed. Use \"prime-agent model list [search]\".";
pub(crate) const EXPORT_REMOVED: &str =
    "--export was removed. Use \"prime-agent session export <file> [output]\".";
/// Why `-e/--extension` stops start-up (`-ne/--no-extensions` is accepted: this build loads
/// none anyway).
pub(crate) const EXTENSIONS_UNSUPPORTED: &str =
    "extensions are not supported by this build: they run in a JavaScript host, which prime-agent does not include";

/// Parses `args` (without the program name). `Err` is the text after `Error: `.
pub fn parse(args: &[String]) -> Result<Command, String> {
    if let Some(sub) = crate::app::subcommands::parse(args)? {
        return Ok(Command::Sub(sub));
    }
    let mut cfg = Config::default();
    let mut cursor = Cursor {
        args,
        at: 0,
        inline: None,
    };
    while let Some(flag) = cursor.next_flag() {
        if flag == "--" && cursor.inline.is_none() {
            // POSIX end of options: the rest is positional, even when it starts with `-`.
            cfg.prompt_args.extend(cursor.rest());
            break;
        }
        if let Some(done) = apply_flag(&mut cfg, &mut cursor, flag)? {
            return Ok(done);
        }
    }
    finish(cfg)
}

/// Where `parse` is in the arguments, and the value the current flag carried inline.
struct Cursor<'a> {
    args: &'a [String],
    /// The next argument to read.
    at: usize,
    inline: Option<String>,
}

impl<'a> Cursor<'a> {
    /// The next flag (or positional argument), without an inline `=value`: `--flag=value` is
    /// accepted for every flag that takes a value.
    fn next_flag(&mut self) -> Option<&'a str> {
        let arg = self.args.get(self.at)?.as_str();
        self.at += 1;
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg, None),
        };
        self.inline = inline;
        Some(flag)
    }

    /// The current flag's value: inline, or the next argument unless that is a long flag.
    fn value(&mut self, name: &str) -> Result<String, String> {
        if let Some(v) = self.inline.clone() {
            return Ok(v);
        }
        match self.args.get(self.at) {
            Some(v) if !v.starts_with("--") => {
                self.at += 1;
                Ok(v.clone())
            }
            _ => Err(format!("{name} requires a value")),
        }
    }

    /// Everything after `--`.
    fn rest(&mut self) -> Vec<String> {
        let rest = self.args[self.at..].to_vec();
        self.at = self.args.len();
        rest
    }
}

/// One flag into `cfg`. `Ok(Some(_))` is a command that ends parsing (`--help`, `--version`).
fn apply_flag(
    cfg: &mut Config,
    cursor: &mut Cursor<'_>,
    flag: &str,
) -> Result<Option<Command>, String> {
    if autonomy_flag(cfg, cursor, flag)? || safety_flag(cfg, cursor, flag)? {
        return Ok(None);
    }
    match flag {
        "-h" | "--help" => return Ok(Some(Command::Help)),
        "-v" | "--version" => return Ok(Some(Command::Version)),
        "--mode" => (cfg.json, cfg.acp_json) = json_mode(&cursor.value("--mode")?)?,
        "-p" | "--print" => cfg.print = true,
        "--provider" => cfg.provider = Some(cursor.value("--provider")?),
        "--model" => {
            let raw = cursor.value("--model")?;
            let (id, level) = crate::provider::config::split_level(&raw);
            cfg.model = Some(id.to_owned());
            cfg.model_thinking = level;
        }
        "--models" => cfg.models.extend(
            cursor
                .value("--models")?
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        ),
        "--skill" => cfg.skills.push(PathBuf::from(cursor.value("--skill")?)),
        "-ns" | "--no-skills" => cfg.no_skills = true,
        "--prompt-template" => cfg
            .prompt_templates
            .push(PathBuf::from(cursor.value("--prompt-template")?)),
        "-np" | "--no-prompt-templates" => cfg.no_prompt_templates = true,
        "--api-key" => cfg.api_key = Some(cursor.value("--api-key")?),
        "--base-url" => cfg.base_url = Some(cursor.value("--base-url")?),
        "--thinking" => {
            let level = cursor.value("--thinking")?;
            cfg.thinking = Some(Thinking::parse(&level).ok_or_else(|| {
                format!(
                    "Invalid thinking level \"{level}\". Valid values: {}",
                    Thinking::NAMES
                )
            })?);
        }
        "--context-window" => {
            let raw = cursor.value("--context-window")?;
            match raw.trim().parse::<u64>() {
                Ok(n) if n > 0 => cfg.context_window = Some(n),
                _ => return Err("--context-window must be a positive integer".to_owned()),
            }
        }
        "--script" => cfg.script = Some(PathBuf::from(cursor.value("--script")?)),
        "--multi-session" => cfg.multi_session = true,
        "--client-terminal" => cfg.client_terminal = true,
        "--cwd" => cfg.cwd = Some(PathBuf::from(cursor.value("--cwd")?)),
        "-t" | "--tools" => {
            let list = cursor.value("--tools")?;
            cfg.tools = Some(
                list.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
            );
        }
        "-nt" | "--no-tools" => cfg.no_tools = true,
        "-nbt" | "--no-builtin-tools" => cfg.no_builtin_tools = true,
        "--verbose" => cfg.verbose = true,
        "--list-models" => return Err(LIST_MODELS_REMOVED.to_owned()),
        "--export" => return Err(EXPORT_REMOVED.to_owned()),
        "-e" | "--extension" => return Err(EXTENSIONS_UNSUPPORTED.to_owned()),
        // No extensions are ever loaded, so turning them off changes nothing.
        "-ne" | "--no-extensions" => {}
        "--system-prompt" => cfg.system_prompt = Some(cursor.value("--system-prompt")?),
        "--append-system-prompt" => cfg
            .append_system_prompt
            .push(cursor.value("--append-system-prompt")?),
        "-nc" | "--no-context-files" => cfg.no_context_files = true,
        "--no-session" => cfg.no_session = true,
        "--session-dir" => cfg.session_dir = Some(PathBuf::from(cursor.value("--session-dir")?)),
        "-c" | "--continue" => cfg.continue_session = true,
        "-r" | "--resume" => cfg.resume = Some(cursor.value("--resume")?),
        "--fork" => cfg.fork = Some(cursor.value("--fork")?),
        "--offline" => cfg.offline = true,
        "--daemon-socket" => {
            cfg.daemon_socket = Some(PathBuf::from(cursor.value("--daemon-socket")?))
        }
        // Upstream keeps unknown long flags for its extensions. This build has none, so a
        // skipped flag could only be a typo whose value silently changes the run (`--modle x`
        // ran the default model): it is an error naming the flag that was probably meant.
        _ if flag.starts_with("--") => return Err(unknown_long(flag)),
        _ if flag.starts_with('-') => return Err(format!("Unknown option: {flag}")),
        _ => cfg.prompt_args.push(flag.to_owned()),
    }
    Ok(None)
}

/// The flags of unattended runs and goals into `cfg`; `false`: `flag` is not one of them.
fn autonomy_flag(cfg: &mut Config, cursor: &mut Cursor<'_>, flag: &str) -> Result<bool, String> {
    match flag {
        "--autonomous" => cfg.autonomy.enabled = true,
        "--autonomous-gate" => {
            let command = cursor.value("--autonomous-gate")?;
            cfg.autonomy_flags.push(flag.to_owned());
            cfg.autonomy.enabled = true;
            cfg.autonomy.gates.commands.push(command);
        }
        "--autonomous-gate-retries"
        | "--autonomous-gate-timeout-ms"
        | "--autonomous-max-continuations"
        | "--autonomous-max-turns"
        | "--autonomous-max-tokens"
        | "--autonomous-timeout-ms" => {
            let n = positive(flag, &cursor.value(flag)?)?;
            cfg.autonomy_flags.push(flag.to_owned());
            let a = &mut cfg.autonomy;
            a.enabled = true;
            match flag {
                "--autonomous-gate-retries" => a.gates.max_retries = n,
                "--autonomous-gate-timeout-ms" => a.gates.timeout = Duration::from_millis(n),
                "--autonomous-max-continuations" => a.max_continuations = n,
                "--autonomous-max-turns" => a.max_turns = n,
                "--autonomous-max-tokens" => a.max_tokens = n,
                _ => a.timeout = Duration::from_millis(n),
            }
        }
        "--goal" => {
            let objective = cursor.value("--goal").unwrap_or_default();
            if objective.trim().is_empty() {
                return Err("--goal requires a non-empty objective".to_owned());
            }
            cfg.goal = Some(objective.trim().to_owned());
        }
        "--max-model-calls" => {
            let raw = cursor.value("--max-model-calls")?;
            cfg.max_model_calls = Some(
                raw.trim()
                    .parse()
                    .map_err(|_| "--max-model-calls must be a non-negative integer".to_owned())?,
            );
        }
        "--goal-token-budget" => {
            let raw = cursor.value("--goal-token-budget")?;
            cfg.goal_token_budget = Some(positive("--goal-token-budget", &raw)?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The permission and sandbox flags into `cfg`; `false`: `flag` is not one of them.
fn safety_flag(cfg: &mut Config, cursor: &mut Cursor<'_>, flag: &str) -> Result<bool, String> {
    match flag {
        "--listen" => cfg.listen = Some(listen_addr(&cursor.value("--listen")?)?),
        "--listen-token-file" => {
            cfg.listen_token_file = Some(PathBuf::from(cursor.value("--listen-token-file")?))
        }
        "--permission-mode" => {
            let mode = cursor.value("--permission-mode")?;
            if crate::agent::permissions::Mode::parse(&mode).is_none() {
                return Err(crate::agent::permissions::unknown_mode(&mode));
            }
            cfg.permission_mode = Some(mode);
        }
        "--sandbox" => {
            let mode = cursor.value("--sandbox")?;
            if crate::base::sandbox::Mode::parse(&mode).is_none() {
                return Err(crate::base::sandbox::unknown_mode(&mode));
            }
            cfg.sandbox = Some(mode);
        }
        "--sandbox-writable" => cfg
            .sandbox_writable
            .push(PathBuf::from(cursor.value("--sandbox-writable")?)),
        "--sandbox-network" => {
            cfg.sandbox_network = Some(match cursor.value("--sandbox-network")?.as_str() {
                "on" => true,
                "off" => false,
                other => {
                    return Err(format!(
                        "Invalid --sandbox-network \"{other}\". Valid values: on, off"
                    ))
                }
            })
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Every long option `apply_flag` accepts, for "did you mean" (a test keeps the two, and
/// `HELP`, in step).
const LONG_FLAGS: &[&str] = &[
    "--help",
    "--version",
    "--mode",
    "--print",
    "--provider",
    "--model",
    "--models",
    "--skill",
    "--no-skills",
    "--prompt-template",
    "--no-prompt-templates",
    "--api-key",
    "--base-url",
    "--thinking",
    "--context-window",
    "--autonomous",
    "--autonomous-gate",
    "--autonomous-gate-retries",
    "--autonomous-gate-timeout-ms",
    "--autonomous-max-continuations",
    "--autonomous-max-turns",
    "--autonomous-max-tokens",
    "--autonomous-timeout-ms",
    "--goal",
    "--max-model-calls",
    "--goal-token-budget",
    "--script",
    "--multi-session",
    "--listen",
    "--listen-token-file",
    "--client-terminal",
    "--permission-mode",
    "--sandbox",
    "--sandbox-writable",
    "--sandbox-network",
    "--cwd",
    "--tools",
    "--no-tools",
    "--no-builtin-tools",
    "--verbose",
    "--system-prompt",
    "--append-system-prompt",
    "--no-context-files",
    "--no-session",
    "--session-dir",
    "--continue",
    "--resume",
    "--fork",
    "--offline",
    "--daemon-socket",
];

/// The error for a long option this build does not know, naming the nearest known one.
fn unknown_long(flag: &str) -> String {
    match nearest(flag, LONG_FLAGS) {
        Some(near) => format!("Unknown option: {flag} (did you mean {near}?)"),
        None => format!("Unknown option: {flag} (see prime-agent --help)"),
    }
}

/// The candidate closest to `word` by edit distance (a swap of two neighbours counts as one
/// edit, the commonest typo), if it is close enough to be the one meant: within 2 edits, or a
/// third of the word for long ones. At equal distance the candidate nearer the word's length
/// wins (`--modle` is one swap from `--model` and one deletion from `--mode`: the user typed
/// seven characters), then the earlier one.
fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let len = word.chars().count();
    let allowed = 2.max(len / 3);
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), c.chars().count().abs_diff(len), *c))
        .filter(|(d, _, _)| *d <= allowed)
        .min_by_key(|(d, len_diff, _)| (*d, *len_diff))
        .map(|(_, _, c)| c)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of
/// adjacent characters, each one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // d[i][j]: the distance between the first i chars of a and the first j of b.
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// `--mode`: whether output is JSON; the modes this build does not have are errors.
/// `--mode`: (a JSON stream, the ACP one).
fn json_mode(mode: &str) -> Result<(bool, bool), String> {
    match mode {
        "acp" => Ok((false, false)),
        "json" => Ok((true, false)),
        "acp-json" => Ok((true, true)),
        "text" | "rpc" | "daemon" => Err(format!(
            "--mode {mode} is not supported by this build; use --mode acp"
        )),
        other => Err(format!(
            "Unknown mode \"{other}\". Valid modes: text, json, acp-json, rpc, acp, daemon"
        )),
    }
}

/// What holds across flags: positional arguments mean something only headless, and a goal
/// budget needs a goal.
fn finish(mut cfg: Config) -> Result<Command, String> {
    if !cfg.headless() {
        for arg in &cfg.prompt_args {
            cfg.warnings.push(format!(
                "Ignoring positional argument {arg:?}: ACP prompts arrive over stdin"
            ));
        }
    }
    if cfg.goal_token_budget.is_some() && cfg.goal.is_none() {
        return Err("--goal-token-budget requires --goal".to_owned());
    }
    check_listen(&mut cfg)?;
    Ok(Command::Run(Box::new(cfg)))
}

/// `--listen`'s address: `host:port` with an IP (IPv6 in brackets) or `localhost`.
fn listen_addr(raw: &str) -> Result<std::net::SocketAddr, String> {
    let bad =
        || format!("Invalid --listen address \"{raw}\": expected ADDR:PORT, e.g. 127.0.0.1:8080");
    if let Some(port) = raw.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok((std::net::Ipv4Addr::LOCALHOST, port).into());
    }
    raw.parse().map_err(|_| bad())
}

/// `--listen` serves ACP: not with a one-prompt mode, and off loopback only with a token.
fn check_listen(cfg: &mut Config) -> Result<(), String> {
    let Some(addr) = cfg.listen else {
        if cfg.listen_token_file.is_some() {
            return Err("--listen-token-file requires --listen".to_owned());
        }
        return Ok(());
    };
    if cfg.headless() {
        return Err(
            "--listen serves ACP; it cannot be combined with -p or --mode json/acp-json".to_owned(),
        );
    }
    if !addr.ip().is_loopback() && cfg.listen_token_file.is_none() {
        return Err(format!(
            "--listen on {addr}, which is not a loopback address, requires --listen-token-file"
        ));
    }
    // Every connection brings its own sessions.
    cfg.multi_session = true;
    Ok(())
}

/// A flag's value as a positive integer, or the spec's error.
fn positive(flag: &str, raw: &str) -> Result<u64, String> {
    match raw.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} must be a positive integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn listen_addresses_and_their_token() {
        let cfg = |args: &[&str]| match p(args) {
            Ok(Command::Run(cfg)) => Ok(cfg),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let c = cfg(&["--listen", "127.0.0.1:8080"]).unwrap();
        assert_eq!(c.listen, Some("127.0.0.1:8080".parse().unwrap()));
        assert!(c.multi_session, "--listen implies --multi-session");
        let c = cfg(&["--mode", "acp", "--listen=localhost:0"]).unwrap();
        assert_eq!(c.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert!(cfg(&["--listen", "[::1]:9"]).is_ok());
        let with_token = ["--listen", "0.0.0.0:80", "--listen-token-file", "t"];
        assert!(cfg(&with_token).unwrap().listen_token_file.is_some());
        let errors = [
            (&["--listen", "8080"][..], "Invalid --listen address \"8080\": expected ADDR:PORT, e.g. 127.0.0.1:8080"),
            (&["--listen", "example.com:80"][..], "Invalid --listen address \"example.com:80\": expected ADDR:PORT, e.g. 127.0.0.1:8080"),
            (&["--listen", "10.0.0.2:80"][..], "--listen on 10.0.0.2:80, which is not a loopback address, requires --listen-token-file"),
            (&["--listen-token-file", "t"][..], "--listen-token-file requires --listen"),
            (&["-p", "--listen", "127.0.0.1:1", "hi"][..], "--listen serves ACP; it cannot be combined with -p or --mode json/acp-json"),
        ];
        for (args, want) in errors {
            assert_eq!(cfg(args).unwrap_err(), want, "{args:?}");
        }
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
        assert_eq!(
            p(&["--mode", "text"]).unwrap_err(),
            "--mode text is not supported by this build; use --mode acp"
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
    fn max_model_calls_takes_zero_and_positive_counts() {
        let cap = |args: &[&str]| match p(args) {
            Ok(Command::Run(cfg)) => Ok(cfg.max_model_calls),
            Ok(_) => unreachable!(),
            Err(e) => Err(e),
        };
        assert_eq!(cap(&[]), Ok(None));
        assert_eq!(cap(&["--max-model-calls", "7"]), Ok(Some(7)));
        assert_eq!(cap(&["--max-model-calls=0"]), Ok(Some(0)));
        assert_eq!(
            cap(&["--max-model-calls", "-1"]),
            Err("--max-model-calls must be a non-negative integer".into())
        );
        assert_eq!(
            cap(&["--max-model-calls"]),
            Err("--max-model-calls requires a value".into())
        );
    }

    #[test]
    fn autonomous_flags_enable_the_mode_and_validate_their_values() {
        let Ok(Command::Run(cfg)) = p(&["--autonomous"]) else {
            panic!()
        };
        assert!(cfg.autonomy.enabled);
        assert_eq!(cfg.autonomy.max_turns, 12);
        let Ok(Command::Run(cfg)) = p(&[
            "--autonomous-gate",
            "make test",
            "--autonomous-gate=test -f ok",
            "--autonomous-gate-retries",
            "5",
            "--autonomous-gate-timeout-ms=1000",
            "--autonomous-max-continuations",
            "7",
            "--autonomous-max-turns",
            "2",
            "--autonomous-max-tokens",
            "900",
            "--autonomous-timeout-ms",
            "60000",
        ]) else {
            panic!()
        };
        let a = &cfg.autonomy;
        assert!(a.enabled);
        assert_eq!(a.gates.commands, ["make test", "test -f ok"]);
        assert_eq!(a.gates.max_retries, 5);
        assert_eq!(a.gates.timeout, Duration::from_secs(1));
        assert_eq!(
            (a.max_continuations, a.max_turns, a.max_tokens),
            (7, 2, 900)
        );
        assert_eq!(a.timeout, Duration::from_secs(60));
        for flag in [
            "--autonomous-gate-retries",
            "--autonomous-gate-timeout-ms",
            "--autonomous-max-continuations",
            "--autonomous-max-turns",
            "--autonomous-max-tokens",
            "--autonomous-timeout-ms",
        ] {
            for bad in ["0", "-1", "x", "1.5"] {
                assert_eq!(
                    p(&[&format!("{flag}={bad}")]),
                    Err(format!("{flag} must be a positive integer")),
                    "{flag} {bad}"
                );
            }
            assert_eq!(p(&[flag]), Err(format!("{flag} requires a value")));
            assert_eq!(
                p(&[flag, "--autonomous"]),
                Err(format!("{flag} requires a value"))
            );
        }
        assert_eq!(
            p(&["--autonomous-gate"]),
            Err("--autonomous-gate requires a value".into())
        );
    }

    #[test]
    fn headless_modes_take_the_prompt_from_positional_arguments() {
        let Ok(Command::Run(cfg)) = p(&["-p", "say", "hi"]) else {
            panic!()
        };
        assert!(cfg.print && !cfg.json && cfg.headless());
        assert_eq!(cfg.prompt_args, ["say", "hi"]);
        assert!(cfg.warnings.is_empty());
        let Ok(Command::Run(cfg)) = p(&["--mode", "json", "go"]) else {
            panic!()
        };
        assert!(cfg.json && cfg.headless());
        let Ok(Command::Run(cfg)) = p(&["stray"]) else {
            panic!()
        };
        assert!(!cfg.headless());
        assert_eq!(cfg.warnings.len(), 1);
    }

    #[test]
    fn upstream_flags_are_accepted_or_refused_with_their_reason() {
        let Ok(Command::Run(cfg)) = p(&["-nbt", "--verbose", "-p", "--", "-x", "--model"]) else {
            panic!()
        };
        assert!(cfg.no_builtin_tools && cfg.verbose);
        assert_eq!(cfg.prompt_args, ["-x", "--model"], "-- ends the options");
        assert_eq!(cfg.model, None);
        assert!(cfg.warnings.is_empty());
        for (args, want) in [
            (&["--list-models"][..], LIST_MODELS_REMOVED),
            (&["--list-models=gpt"], LIST_MODELS_REMOVED),
            (&["--export", "s.jsonl"], EXPORT_REMOVED),
            (&["-e", "./ext.ts"], EXTENSIONS_UNSUPPORTED),
            (&["--extension", "x"], EXTENSIONS_UNSUPPORTED),
        ] {
            assert_eq!(p(args), Err(want.to_owned()), "{args:?}");
        }
        for flag in ["-ne", "--no-extensions"] {
            assert!(
                matches!(p(&[flag]), Ok(Command::Run(_))),
                "{flag} is a no-op"
            );
        }
        assert_eq!(
            LIST_MODELS_REMOVED,
            "--list-models was removed. Use \"prime-agent model list [search]\"."
        );
        assert_eq!(
            EXPORT_REMOVED,
            "--export was removed. Use \"prime-agent session export <file> [output]\"."
        );
        assert_eq!(p(&["-nbx"]), Err("Unknown option: -nbx".into()));
        assert!(matches!(p(&["model", "list"]), Ok(Command::Sub(_))));
    }

    #[test]
    fn goal_flags() {
        let Ok(Command::Run(cfg)) = p(&["--goal", " ship it ", "--goal-token-budget", "500"])
        else {
            panic!()
        };
        assert_eq!(cfg.goal.as_deref(), Some("ship it"));
        assert_eq!(cfg.goal_token_budget, Some(500));
        let err = "--goal requires a non-empty objective";
        assert_eq!(p(&["--goal", "  "]), Err(err.into()));
        assert_eq!(p(&["--goal"]), Err(err.into()));
        assert_eq!(
            p(&["--goal-token-budget", "5"]),
            Err("--goal-token-budget requires --goal".into())
        );
        assert_eq!(
            p(&["--goal", "x", "--goal-token-budget", "0"]),
            Err("--goal-token-budget must be a positive integer".into())
        );
    }

    #[test]
    fn lists_and_inline_values() {
        let Ok(Command::Run(cfg)) = p(&[
            "--tools=bash, read",
            "--thinking",
            "high",
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
        assert_eq!(cfg.thinking, Some(Thinking::High));
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    }

    #[test]
    fn unknown_long_flags_and_bad_values_are_errors_naming_what_was_meant() {
        let levels = "Valid values: off, minimal, low, medium, high, xhigh, max";
        let cases: &[(&[&str], String)] = &[
            (
                &["--modle", "x"],
                "Unknown option: --modle (did you mean --model?)".into(),
            ),
            (
                &["--modle=x"],
                "Unknown option: --modle (did you mean --model?)".into(),
            ),
            (
                &["--thinkng", "high"],
                "Unknown option: --thinkng (did you mean --thinking?)".into(),
            ),
            (
                &["--no-sesion"],
                "Unknown option: --no-sesion (did you mean --no-session?)".into(),
            ),
            (
                &["--autonomous-max-turn", "3"],
                "Unknown option: --autonomous-max-turn (did you mean --autonomous-max-turns?)"
                    .into(),
            ),
            (
                &["--frobnicate"],
                "Unknown option: --frobnicate (see prime-agent --help)".into(),
            ),
            (
                &["--thinking", "ultra"],
                format!("Invalid thinking level \"ultra\". {levels}"),
            ),
            (
                &["--thinking=huge"],
                format!("Invalid thinking level \"huge\". {levels}"),
            ),
        ];
        for (args, want) in cases {
            assert_eq!(p(args).as_ref(), Err(want), "{args:?}");
        }
    }

    #[test]
    fn nearest_and_edit_distance() {
        for (a, b, d) in [
            ("", "", 0),
            ("model", "model", 0),
            ("modle", "model", 1),
            ("mode", "model", 1),
            ("moodel", "model", 1),
            ("mdoel", "model", 1),
            ("kitten", "sitting", 3),
            ("é", "e", 1),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} {b}");
        }
        let flags = &["--mode", "--model", "--models", "--no-session"];
        for (word, want) in [
            ("--modle", Some("--model")),
            ("--mode", Some("--mode")),
            ("--mod", Some("--mode")),
            ("--moder", Some("--model")),
            ("--nosession", Some("--no-session")),
            ("--x", None),
            ("--completely-different", None),
        ] {
            assert_eq!(nearest(word, flags), want, "{word}");
        }
    }

    #[test]
    fn every_long_flag_in_the_help_is_known_and_accepted() {
        let in_help: std::collections::BTreeSet<&str> = HELP
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .collect();
        for flag in &in_help {
            assert!(
                LONG_FLAGS.contains(flag),
                "{flag} is in HELP, not LONG_FLAGS"
            );
        }
        for flag in LONG_FLAGS {
            assert!(in_help.contains(flag), "{flag} is not in HELP");
            // Accepted: whatever its value does, it is not an unknown option.
            for args in [vec![*flag], vec![*flag, "1"]] {
                if let Err(e) = p(&args) {
                    assert!(!e.starts_with("Unknown option"), "{args:?}: {e}");
                }
            }
        }
    }

    #[test]
    fn resource_and_model_flags() {
        let Ok(Command::Run(cfg)) = p(&[
            "--skill",
            "/a",
            "--skill=/b/SKILL.md",
            "-ns",
            "--prompt-template",
            "t.md",
            "-np",
            "--models",
            "openai/*, claude*:high",
            "--model",
            "openai/gpt-5.4:high",
        ]) else {
            panic!()
        };
        assert_eq!(
            cfg.skills,
            vec![PathBuf::from("/a"), PathBuf::from("/b/SKILL.md")]
        );
        assert!(cfg.no_skills && cfg.no_prompt_templates);
        assert_eq!(cfg.prompt_templates, vec![PathBuf::from("t.md")]);
        assert_eq!(cfg.models, vec!["openai/*", "claude*:high"]);
        assert_eq!(cfg.model.as_deref(), Some("openai/gpt-5.4"));
        assert_eq!(cfg.model_thinking, Some(Thinking::High));
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let Ok(Command::Run(cfg)) = p(&["--model", "ollama/qwen3:8b"]) else {
            panic!()
        };
        assert_eq!(cfg.model.as_deref(), Some("ollama/qwen3:8b"));
        assert_eq!(cfg.model_thinking, None);
        assert_eq!(p(&["--skill"]), Err("--skill requires a value".into()));
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
