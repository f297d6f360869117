//! Start-up: `Config` → `Agent` (provider, tools, system prompt, cwd).
//!
//! An explicit misconfiguration is an `Err` (printed, exit 1, before `initialize` is answered).
//! A merely missing model or key is not: the agent starts and each prompt explains what to set.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::Config;
use crate::prompt::{build_system_prompt, today_utc, PromptInputs};
use crate::provider::config;
use crate::provider::remote::RemoteProvider;
use crate::provider::scripted::ScriptedProvider;
use crate::provider::{Provider, Thinking};
use crate::tools::ToolChoice;
use crate::turn::Agent;

/// The agent directory: `PRIME_AGENT_CODING_AGENT_DIR`, else `~/.prime/agent`.
pub(crate) fn agent_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PRIME_AGENT_CODING_AGENT_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    home.join(".prime").join("agent")
}

pub(crate) fn build_agent(cfg: &Config) -> Result<Agent, String> {
    if let Some(dir) = &cfg.cwd {
        std::env::set_current_dir(dir)
            .map_err(|e| format!("Cannot use cwd {}: {e}", dir.display()))?;
    }
    let cwd =
        std::env::current_dir().map_err(|e| format!("Cannot read the current directory: {e}"))?;
    let provider = build_provider(cfg)?;
    let tools = tool_choice(cfg)?;
    // The prompt names what an agent will get; building one set just for the names is cheap
    // (no kernel starts until the first cell).
    let names = tools.build(None).names();
    let dir = agent_dir();
    let system_prompt = build_system_prompt(&PromptInputs {
        cwd: &cwd,
        tool_names: &names,
        custom: cfg.system_prompt.as_deref(),
        append: &cfg.append_system_prompt,
        agent_dir: (!cfg.no_context_files).then_some(dir.as_path()),
        today: today_utc(),
    });
    Ok(Agent {
        provider,
        tools,
        system_prompt,
        cwd,
        thinking: cfg.thinking.unwrap_or(Thinking::Medium),
    })
}

type ProviderChoice = Result<Arc<dyn Provider>, String>;

fn build_provider(cfg: &Config) -> Result<ProviderChoice, String> {
    let scripted = cfg.provider.as_deref() == Some("scripted")
        || (cfg.provider.is_none() && cfg.script.is_some());
    if scripted {
        let Some(script) = &cfg.script else {
            return Err("--provider scripted requires --script FILE".to_owned());
        };
        let provider = ScriptedProvider::load(script)?;
        return Ok(Ok(Arc::new(provider)));
    }
    let dir = agent_dir();
    let resolved = config::resolve(
        cfg.provider.as_deref(),
        cfg.model.as_deref(),
        cfg.api_key.as_deref(),
        cfg.base_url.as_deref(),
        config::ModelOverrides {
            context_window: cfg.context_window,
            thinking_requested: cfg.thinking.is_some_and(|t| t != Thinking::Off),
        },
        &dir,
    )?;
    let key_optional = cfg.base_url.is_some()
        || (resolved.selection.provider.custom && resolved.selection.provider.api_key.is_none());
    Ok(Ok(Arc::new(RemoteProvider::new(
        resolved.selection,
        resolved.credentials,
        key_optional,
    ))))
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
