//! Start-up: `Config` → `Agent` (provider, tools, system prompt, cwd).
//!
//! An explicit misconfiguration is an `Err` (printed, exit 1, before `initialize` is answered).
//! A merely missing model or key is not: the agent starts and each prompt explains what to set.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agent::turn::Agent;
use crate::app::cli::Config;
use crate::base::sandbox::{self, Sandbox};
use crate::base::time::today_utc;
use crate::config::prompt::PromptSpec;
use crate::config::settings::{self, Settings};
use crate::config::skills::{self, Resources};
use crate::persist::{self, Pick, Store};
use crate::provider::config;
use crate::provider::menu::ModelMenu;
use crate::provider::remote::RemoteProvider;
use crate::provider::scripted::ScriptedProvider;
use crate::provider::{Provider, ProviderChoice, Thinking};
use crate::tools::{KernelEnv, PythonSkill, ToolChoice};

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

/// What the kernels take from the environment, read here once: `RLM_DEPTH` (else 0) and
/// `RLM_MAX_DEPTH` (else 1; settings `rlmMaxDepth` wins over it, §4.3) as trimmed integers,
/// the harness overrides when non-empty; and what the settings say about shells and images.
fn kernel_env(agent_dir: PathBuf, settings: &Settings, resources: &Resources) -> KernelEnv {
    let depth = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse().ok());
    let dir = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    use crate::tools::{DEPTH_FROM_DEFAULT, DEPTH_FROM_ENV, DEPTH_FROM_SETTINGS};
    let (max_depth, max_depth_from) = match (settings.rlm_max_depth, depth("RLM_MAX_DEPTH")) {
        (Some(n), _) => (n, DEPTH_FROM_SETTINGS),
        (None, Some(n)) => (n, DEPTH_FROM_ENV),
        (None, None) => (1, DEPTH_FROM_DEFAULT),
    };
    KernelEnv {
        agent_dir,
        root_depth: depth("RLM_DEPTH").unwrap_or(0),
        max_depth,
        max_depth_from,
        global_harness_dir: dir("RLM_GLOBAL_HARNESS_STATE_DIR"),
        harness_dir: dir("RLM_HARNESS_STATE_DIR"),
        shell_path: settings.shell_path.clone(),
        shell_command_prefix: settings.shell_command_prefix.clone(),
        python_skills: resources
            .skills
            .iter()
            .filter_map(|s| {
                Some(PythonSkill {
                    name: s.name.clone(),
                    module: s.python_import.clone()?,
                    dir: s.dir().to_path_buf(),
                })
            })
            .collect(),
        images: settings.images,
        no_builtin_skills: settings.enable_builtin_skills == Some(false),
        // Set by `build_agent` from the flags and settings (`sandbox_config`).
        sandbox: Sandbox::default(),
        prewarm: prewarm(
            std::env::var("PRIME_AGENT_KERNEL_PREWARM").ok().as_deref(),
            settings.kernel_prewarm,
        ),
    }
}

/// Whether to warm the kernel zygote at session creation: `PRIME_AGENT_KERNEL_PREWARM`
/// (`0` or `1`; anything else is ignored with a warning), else settings `kernel.prewarm`,
/// else on.
fn prewarm(env: Option<&str>, setting: Option<bool>) -> bool {
    match env.map(str::trim) {
        Some("0") => false,
        Some("1") => true,
        Some(other) => {
            if !other.is_empty() {
                log::warn!("Ignoring PRIME_AGENT_KERNEL_PREWARM={other}: expected 0 or 1");
            }
            setting.unwrap_or(true)
        }
        None => setting.unwrap_or(true),
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
    let settings = settings::load(&dir, &cwd)?;
    for w in &settings.warnings {
        log::warn!("{w}");
    }
    crate::provider::http::set_retry(settings.retry);
    crate::provider::set_thinking_budgets(settings.thinking_budgets);
    // A bad certificate file fails start-up naming it (`trust`).
    let roots = crate::provider::http::trust::from_env(&|name| std::env::var(name).ok())?;
    crate::provider::http::set_roots(roots);
    let resources = Arc::new(resources(cfg, &settings, &cwd, &dir));
    let no_builtin_skills = settings.enable_builtin_skills == Some(false);
    // Before the provider: a sandbox that cannot be had is the first thing to hear of.
    let sandbox = sandbox_config(cfg, &settings, &dir, &cwd)?;
    let (provider, models, level) = build_provider(cfg, &dir, &settings)?;
    let side_models = side_models(&settings, models.as_deref());
    let tools = tool_choice(cfg)?;
    let mut kernel_env = kernel_env(dir.clone(), &settings, &resources);
    kernel_env.sandbox = sandbox;
    let permission_mode = cfg
        .permission_mode
        .as_deref()
        .and_then(crate::agent::permissions::Mode::parse)
        .unwrap_or_default();
    let (system_md, append_md) = crate::config::prompt::system_files(&cwd, &dir);
    let mut append = cfg.append_system_prompt.clone();
    append.extend(append_md);
    let spec = PromptSpec {
        custom: cfg.system_prompt.clone().or(system_md),
        append,
        agent_dir: (!cfg.no_context_files).then(|| dir.clone()),
        skills: resources.skills.clone(),
        today: today_utc(),
        no_builtin_skills,
        // What the first call runs in (permission mode `read-only` narrows a sandbox).
        sandbox: Some(match permission_mode {
            crate::agent::permissions::Mode::ReadOnly if kernel_env.sandbox.is_on() => kernel_env
                .sandbox
                .with_mode(crate::base::sandbox::Mode::ReadOnly),
            _ => kernel_env.sandbox.clone(),
        }),
    };
    let multi_session = cfg.multi_session
        || std::env::var("PRIME_AGENT_MULTI_SESSION").is_ok_and(|v| v.trim() == "1");
    let store = session_store(cfg, &dir, &cwd, settings.session_dir.as_deref())?;
    Ok(Agent {
        provider,
        tools,
        kernel_env,
        // Built per agent from `prompt_spec` (`AgentCtx`); this one is for agents without it.
        system_prompt: String::new(),
        prompt_spec: Some(spec),
        resources,
        cwd,
        thinking: level,
        model_explicit: cfg.model.is_some(),
        thinking_explicit: cfg.thinking.is_some(),
        models,
        multi_session,
        client_terminal: cfg.client_terminal,
        permission_mode,
        host: Arc::new(crate::tools::host::LocalHost),
        store,
        autonomy: crate::agent::autonomy::Config {
            max_model_calls: max_model_calls(cfg),
            ..autonomy_config(cfg, &settings.autonomous)
        },
        goal: cfg.goal.clone().map(|g| (g, cfg.goal_token_budget)),
        mcp_servers: settings.mcp_servers,
        side_models,
        service_tier: settings.default_service_tier.clone(),
        cache_keep_alive: settings
            .cache_keep_alive_ms
            .map(std::time::Duration::from_millis),
        message_delivery: crate::agent::turn::MessageDelivery {
            all_steers: settings.steering_all,
            all_follow_ups: settings.follow_ups_all,
        },
    })
}

/// Skills and templates: the flags', the settings' paths and discovery; settings
/// `enableSkillCommands`.
fn resources(cfg: &Config, settings: &Settings, cwd: &Path, agent_dir: &Path) -> Resources {
    let mut resources = skills::load(
        &skills::Sources {
            cwd,
            agent_dir,
            skills: &cfg.skills,
            no_skills: cfg.no_skills,
            templates: &cfg.prompt_templates,
            no_templates: cfg.no_prompt_templates,
            settings_skills: &settings.skill_paths,
            settings_templates: &settings.prompt_paths,
        },
        &mut |w| log::warn!("{w}"),
    );
    resources.no_skill_commands = settings.enable_skill_commands == Some(false);
    resources
}

/// Autonomous mode: each `--autonomous*` flag given wins over its settings key
/// (`autonomous.*`), which wins over the default. Settings enable the mode only with
/// `autonomous.enabled` (limits alone wait for a flag or `/autonomous on`).
fn autonomy_config(cfg: &Config, s: &settings::Autonomous) -> crate::agent::autonomy::Config {
    let mut a = cfg.autonomy.clone();
    let given = |flag: &str| cfg.autonomy_flags.iter().any(|f| f == flag);
    let set = |flag: &str, from: Option<u64>, slot: &mut u64| {
        if let Some(n) = from.filter(|_| !given(flag)) {
            *slot = n;
        }
    };
    set(
        "--autonomous-max-continuations",
        s.max_continuations,
        &mut a.max_continuations,
    );
    set("--autonomous-max-turns", s.max_turns, &mut a.max_turns);
    set("--autonomous-max-tokens", s.max_tokens, &mut a.max_tokens);
    set(
        "--autonomous-gate-retries",
        s.gate_max_retries,
        &mut a.gates.max_retries,
    );
    let ms = |flag: &str, from: Option<u64>, slot: &mut std::time::Duration| {
        if let Some(n) = from.filter(|_| !given(flag)) {
            *slot = std::time::Duration::from_millis(n);
        }
    };
    ms("--autonomous-timeout-ms", s.timeout_ms, &mut a.timeout);
    ms(
        "--autonomous-gate-timeout-ms",
        s.gate_timeout_ms,
        &mut a.gates.timeout,
    );
    if let Some(commands) = s
        .gate_commands
        .as_ref()
        .filter(|_| !given("--autonomous-gate"))
    {
        a.gates.commands = commands.clone();
    }
    a.enabled |= s.enabled == Some(true);
    a
}

/// Settings `subagentDefaultModel` and `auxiliaryModel`, built from the menu's registry and
/// credentials; without a menu (the scripted provider) there is no other model to name.
fn side_models(settings: &Settings, menu: Option<&ModelMenu>) -> crate::agent::turn::SideModels {
    let keys = [
        ("subagentDefaultModel", settings.subagent_model.as_deref()),
        ("auxiliaryModel", settings.auxiliary_model.as_deref()),
    ];
    let [subagent, auxiliary] = keys.map(|(key, reference)| match menu {
        Some(menu) => menu.setting_model(key, reference),
        None => {
            if reference.is_some() {
                log::warn!("Ignoring settings key {key}: this provider offers no other model");
            }
            None
        }
    });
    crate::agent::turn::SideModels {
        subagent,
        auxiliary,
    }
}

/// The sandbox: `--sandbox*` over the global settings' `sandbox`. A sandbox asked for where
/// Landlock is unavailable, or a writable root that does not exist, fails start-up: never a
/// silent fallback to no sandbox.
fn sandbox_config(
    cfg: &Config,
    settings: &Settings,
    agent_dir: &Path,
    cwd: &Path,
) -> Result<Sandbox, String> {
    let from_settings = &settings.sandbox;
    let id = cfg.sandbox.clone().or_else(|| from_settings.mode.clone());
    let mode = match &id {
        None => sandbox::Mode::Off,
        Some(id) => sandbox::Mode::parse(id).ok_or_else(|| sandbox::unknown_mode(id))?,
    };
    let mut writable = Vec::new();
    for root in cfg.sandbox_writable.iter().chain(&from_settings.writable) {
        let abs = cwd.join(root);
        if !abs.exists() {
            return Err(format!(
                "--sandbox-writable {}: no such file or directory",
                root.display()
            ));
        }
        writable.push(abs);
    }
    let sandbox = Sandbox {
        mode,
        writable,
        network: cfg
            .sandbox_network
            .or(from_settings.network)
            .unwrap_or(false),
        agent_dir: agent_dir.to_path_buf(),
        offered: id.is_some(),
    };
    if sandbox.is_on() {
        // A policy built now proves that this kernel takes one (and makes the temp dir).
        sandbox.policy(cwd, &[])?;
        log::info!("sandbox {}: {}", mode.id(), sandbox::abi_report());
    }
    Ok(sandbox)
}

/// The per-prompt model-call cap: `--max-model-calls` (0 lifts it), else a default for the
/// headless modes, which nobody watches, and none over ACP, whose client can cancel.
fn max_model_calls(cfg: &Config) -> Option<u64> {
    match cfg.max_model_calls {
        Some(0) => None,
        Some(n) => Some(n),
        None if cfg.headless() => Some(crate::agent::turn::guard::HEADLESS_MAX_MODEL_CALLS),
        None => None,
    }
}

/// The sessions directory (none with `--no-session`), with the session `-c`, `-r` or
/// `--fork` picked for the first `session/new`.
fn session_store(
    cfg: &Config,
    agent_dir: &Path,
    cwd: &Path,
    settings_dir: Option<&Path>,
) -> Result<Option<Arc<Store>>, String> {
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
        persist::sessions_dir(cfg.session_dir.as_deref(), settings_dir, agent_dir),
        agent_dir.join("session-artifacts"),
    );
    if let Some(pick) = pick {
        store.pick(&pick, cwd)?;
    }
    Ok(Some(Arc::new(store)))
}

/// The start-up provider, its reasoning level and, for a real one, the menu of models a
/// session may switch to. Which model (§6.2): `--provider` / `--model`, else the first of
/// `--models` (or settings `enabledModels`) unless a session is continued, else settings
/// `defaultProvider` / `defaultModel`, else the first with a key. The level: `--thinking`,
/// else the `:level` of the chosen model, else settings `defaultThinkingLevel`, else medium.
fn build_provider(
    cfg: &Config,
    agent_dir: &Path,
    settings: &Settings,
) -> Result<(ProviderChoice, Option<Arc<ModelMenu>>, Thinking), String> {
    let explicit = cfg.thinking.or(cfg.model_thinking);
    let scripted = cfg.provider.as_deref() == Some("scripted")
        || (cfg.provider.is_none() && cfg.script.is_some());
    if scripted {
        let Some(script) = &cfg.script else {
            return Err("--provider scripted requires --script FILE".to_owned());
        };
        let provider = ScriptedProvider::load(script)?;
        let level = explicit
            .or(settings.default_thinking)
            .unwrap_or(Thinking::Medium);
        return Ok((Ok(Arc::new(provider)), None, level));
    }
    let patterns = if cfg.models.is_empty() {
        settings.enabled_models.clone().unwrap_or_default()
    } else {
        cfg.models.clone()
    };
    let scoped = if patterns.is_empty() {
        Vec::new()
    } else {
        // Only models that can run are in scope (as the menu shows only those).
        let registry = config::Registry::load(agent_dir)?;
        let credentials = config::Credentials::new(cfg.api_key.clone(), agent_dir.to_path_buf());
        let mut scoped = config::scope(&registry, &patterns, &mut |w| log::warn!("{w}"));
        scoped.retain(|(p, _, _)| {
            registry
                .find(p)
                .is_some_and(|p| credentials.has_key(p) || (p.custom && p.api_key.is_none()))
        });
        scoped
    };
    let continuing = cfg.continue_session || cfg.resume.is_some() || cfg.fork.is_some();
    let (provider, model, level) = if cfg.provider.is_some() || cfg.model.is_some() {
        (cfg.provider.clone(), cfg.model.clone(), None)
    } else if let Some((p, id, level)) = scoped.first().filter(|_| !continuing) {
        (Some(p.clone()), Some(id.clone()), *level)
    } else {
        (
            settings.default_provider.clone(),
            settings.default_model.clone(),
            None,
        )
    };
    let level = explicit
        .or(level)
        .or(settings.default_thinking)
        .unwrap_or(Thinking::Medium);
    let resolved = config::resolve(
        provider.as_deref(),
        model.as_deref(),
        cfg.api_key.as_deref(),
        cfg.base_url.as_deref(),
        config::ModelOverrides {
            context_window: cfg.context_window,
            thinking_requested: explicit.is_some_and(|t| t != Thinking::Off),
        },
        agent_dir,
    )?;
    let key_optional = cfg.base_url.is_some()
        || (resolved.selection.provider.custom && resolved.selection.provider.api_key.is_none());
    let menu = ModelMenu::new(resolved.registry, resolved.credentials.clone())
        .scoped(scoped.into_iter().map(|(p, id, _)| (p, id)).collect())
        .with_backup(settings.backup_model.as_deref());
    let provider: Arc<dyn Provider> = menu.with_failover(Arc::new(RemoteProvider::new(
        resolved.selection,
        resolved.credentials,
        key_optional,
    )));
    Ok((Ok(provider), Some(Arc::new(menu)), level))
}

fn tool_choice(cfg: &Config) -> Result<ToolChoice, String> {
    // `-nbt` leaves only the tools `--tools` names (MCP tools are not built-ins and stay).
    if cfg.no_tools || (cfg.no_builtin_tools && cfg.tools.is_none()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_over_settings_kernel_prewarm() {
        let cases = [
            (None, None, true),
            (None, Some(false), false),
            (Some("0"), Some(true), false),
            (Some(" 1 "), Some(false), true),
            (Some("no"), Some(false), false),
            (Some(""), None, true),
        ];
        for (env, setting, want) in cases {
            assert_eq!(prewarm(env, setting), want, "{env:?} {setting:?}");
        }
    }

    #[test]
    fn no_builtin_tools_leaves_only_what_tools_names() {
        let cfg = |nbt: bool, tools: Option<&[&str]>| Config {
            no_builtin_tools: nbt,
            tools: tools.map(|t| t.iter().map(|s| s.to_string()).collect()),
            ..Config::default()
        };
        assert!(matches!(
            tool_choice(&cfg(true, None)),
            Ok(ToolChoice::None)
        ));
        assert!(matches!(
            tool_choice(&cfg(false, None)),
            Ok(ToolChoice::All)
        ));
        match tool_choice(&cfg(true, Some(&["bash"]))) {
            Ok(ToolChoice::Only(list)) => assert_eq!(list, ["bash"]),
            _ => panic!("--tools wins over -nbt"),
        }
    }
}
