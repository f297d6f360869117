//! Start-up: `Config` → `Agent` (provider, tools, system prompt, cwd).
//!
//! An explicit misconfiguration is an `Err` (printed, exit 1, before `initialize` is answered).
//! A merely missing model or key is not: the agent starts and each prompt explains what to set.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cli::Config;
use crate::persist::{self, Pick, Store};
use crate::prompt::{build_system_prompt, PromptInputs, PromptSpec};
use crate::provider::config;
use crate::provider::menu::ModelMenu;
use crate::provider::remote::RemoteProvider;
use crate::provider::scripted::ScriptedProvider;
use crate::provider::{Provider, ProviderChoice, Thinking};
use crate::time::today_utc;
use crate::tools::{KernelEnv, ToolChoice};
use crate::turn::Agent;

/// The agent directory: `PRIME_AGENT_CODING_AGENT_DIR`, else `~/.prime/agent`.
fn agent_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PRIME_AGENT_CODING_AGENT_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    home.join(".prime").join("agent")
}

/// What the kernels take from the environment, read here once: `RLM_DEPTH` (else 0) and
/// `RLM_MAX_DEPTH` (else 1) as trimmed integers, the harness overrides when non-empty.
fn kernel_env(agent_dir: PathBuf) -> KernelEnv {
    let depth = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse().ok());
    let dir = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    KernelEnv {
        agent_dir,
        root_depth: depth("RLM_DEPTH").unwrap_or(0),
        max_depth: depth("RLM_MAX_DEPTH").unwrap_or(1),
        global_harness_dir: dir("RLM_GLOBAL_HARNESS_STATE_DIR"),
        harness_dir: dir("RLM_HARNESS_STATE_DIR"),
    }
}

pub(crate) fn build_agent(cfg: &Config) -> Result<Agent, String> {
    if let Some(dir) = &cfg.cwd {
        std::env::set_current_dir(dir)
            .map_err(|e| format!("Cannot use cwd {}: {e}", dir.display()))?;
    }
    let cwd =
        std::env::current_dir().map_err(|e| format!("Cannot read the current directory: {e}"))?;
    let dir = agent_dir();
    let (provider, models) = build_provider(cfg, &dir)?;
    let tools = tool_choice(cfg)?;
    let kernel_env = kernel_env(dir.clone());
    let spec = PromptSpec {
        custom: cfg.system_prompt.clone(),
        append: cfg.append_system_prompt.clone(),
        agent_dir: (!cfg.no_context_files).then(|| dir.clone()),
    };
    let system_prompt = system_prompt(&tools, &kernel_env, &spec, &cwd);
    let multi_session = cfg.multi_session
        || std::env::var("PRIME_AGENT_MULTI_SESSION").is_ok_and(|v| v.trim() == "1");
    let store = session_store(cfg, &dir, &cwd)?;
    Ok(Agent {
        provider,
        tools,
        kernel_env,
        system_prompt,
        prompt_spec: Some(spec),
        cwd,
        thinking: cfg.thinking.unwrap_or(Thinking::Medium),
        model_explicit: cfg.model.is_some(),
        thinking_explicit: cfg.thinking.is_some(),
        models,
        multi_session,
        client_terminal: cfg.client_terminal,
        permission_mode: cfg
            .permission_mode
            .as_deref()
            .and_then(crate::permissions::Mode::parse)
            .unwrap_or_default(),
        host: Arc::new(crate::tools::host::LocalHost),
        store,
        autonomy: cfg.autonomy.clone(),
        goal: cfg.goal.clone().map(|g| (g, cfg.goal_token_budget)),
    })
}

/// The sessions directory (none with `--no-session`), with the session `-c`, `-r` or
/// `--fork` picked for the first `session/new`.
fn session_store(cfg: &Config, agent_dir: &Path, cwd: &Path) -> Result<Option<Arc<Store>>, String> {
    let pick = if let Some(arg) = &cfg.fork {
        Some(Pick::Fork(arg.clone()))
    } else if let Some(arg) = &cfg.resume {
        Some(Pick::Resume(arg.clone()))
    } else {
        cfg.continue_session.then_some(Pick::Continue)
    };
    if cfg.no_session {
        if pick.is_some() {
            return Err(
                "--no-session cannot be combined with --continue, --resume or --fork".to_owned(),
            );
        }
        return Ok(None);
    }
    let store = Store::new(
        persist::sessions_dir(cfg.session_dir.as_deref(), agent_dir),
        agent_dir.join("session-artifacts"),
    );
    if let Some(pick) = pick {
        store.pick(&pick, cwd)?;
    }
    Ok(Some(Arc::new(store)))
}

fn system_prompt(tools: &ToolChoice, env: &KernelEnv, spec: &PromptSpec, cwd: &Path) -> String {
    // The prompt names what an agent will get; building one set just for the names is cheap
    // (no kernel starts until the first cell).
    let names = tools.build(env, None).names();
    build_system_prompt(&PromptInputs {
        cwd,
        tool_names: &names,
        custom: spec.custom.as_deref(),
        append: &spec.append,
        agent_dir: spec.agent_dir.as_deref(),
        today: today_utc(),
    })
}

/// The process's agent moved to another cwd (a `--multi-session` session's own): the same
/// provider and tools, the system prompt built again for that cwd and its context files.
pub(crate) fn agent_in_cwd(base: &Agent, cwd: PathBuf) -> Agent {
    let mut agent = base.clone();
    if let Some(spec) = &base.prompt_spec {
        agent.system_prompt = system_prompt(&base.tools, &base.kernel_env, spec, &cwd);
    }
    agent.cwd = cwd;
    agent
}

/// The start-up provider and, for a real one, the menu of models a session may switch to.
fn build_provider(
    cfg: &Config,
    agent_dir: &Path,
) -> Result<(ProviderChoice, Option<Arc<ModelMenu>>), String> {
    let scripted = cfg.provider.as_deref() == Some("scripted")
        || (cfg.provider.is_none() && cfg.script.is_some());
    if scripted {
        let Some(script) = &cfg.script else {
            return Err("--provider scripted requires --script FILE".to_owned());
        };
        let provider = ScriptedProvider::load(script)?;
        return Ok((Ok(Arc::new(provider)), None));
    }
    let resolved = config::resolve(
        cfg.provider.as_deref(),
        cfg.model.as_deref(),
        cfg.api_key.as_deref(),
        cfg.base_url.as_deref(),
        config::ModelOverrides {
            context_window: cfg.context_window,
            thinking_requested: cfg.thinking.is_some_and(|t| t != Thinking::Off),
        },
        agent_dir,
    )?;
    let key_optional = cfg.base_url.is_some()
        || (resolved.selection.provider.custom && resolved.selection.provider.api_key.is_none());
    let menu = ModelMenu::new(resolved.registry, resolved.credentials.clone());
    let provider: Arc<dyn Provider> = Arc::new(RemoteProvider::new(
        resolved.selection,
        resolved.credentials,
        key_optional,
    ));
    Ok((Ok(provider), Some(Arc::new(menu))))
}

fn tool_choice(cfg: &Config) -> Result<ToolChoice, String> {
    if cfg.no_tools {
        return Ok(ToolChoice::None);
    }
    let Some(list) = &cfg.tools else {
        return Ok(ToolChoice::All);
    };
    if let Some(unknown) = list
        .iter()
        .find(|n| !crate::tools::BUILTIN.contains(&n.as_str()))
    {
        return Err(format!(
            "Unknown built-in tool(s): {unknown}. Available built-in tools: {}",
            crate::tools::BUILTIN.join(", ")
        ));
    }
    Ok(ToolChoice::Only(list.clone()))
}

/// A session's system prompt with what its client asked for, applied after the builder: an
/// `override` replaces the base instructions (rebuilt with it as the custom prompt, so the
/// environment facts and context files stay), then `client_prompt::finish` names the
/// additional directories and appends an `append` text last.
pub(crate) fn session_system_prompt(
    agent: &Agent,
    client: Option<&crate::acp::ClientPrompt>,
    dirs: &[PathBuf],
) -> String {
    use crate::acp::PromptMode;
    let built = match (client, &agent.prompt_spec) {
        (Some(c), Some(spec)) if c.mode == PromptMode::Override => {
            let spec = PromptSpec {
                custom: Some(c.text.clone()),
                ..spec.clone()
            };
            system_prompt(&agent.tools, &agent.kernel_env, &spec, &agent.cwd)
        }
        // An agent built without prompt inputs (in-process tests): the text alone.
        (Some(c), None) if c.mode == PromptMode::Override => c.text.clone(),
        _ => agent.system_prompt.clone(),
    };
    let append = client
        .filter(|c| c.mode == PromptMode::Append)
        .map(|c| c.text.as_str());
    crate::client_prompt::finish(built, dirs, append)
}
