//! Provider configuration, compatible with Prime Agent: the built-in providers, the user's
//! `<agentDir>/models.json` merged over them, credentials (`--api-key` > `auth.json` > the
//! provider's environment variable > `models.json` `apiKey`), and model resolution from
//! `--provider` / `--model`.
//!
//! Resolution errors that mean the user asked for something that does not exist are start-up
//! errors. A missing key is not: keys are looked up per request, so the agent starts and each
//! prompt says what to set (and adding the key to `auth.json` later works without a restart).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// The wire APIs this build speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    OpenAiCompletions,
    AnthropicMessages,
}

impl Api {
    pub fn parse(name: &str) -> Option<Api> {
        match name {
            "openai-completions" => Some(Api::OpenAiCompletions),
            "anthropic-messages" => Some(Api::AnthropicMessages),
            _ => None,
        }
    }
}

/// Per-model quirks of OpenAI-compatible servers (`compat` in models.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compat {
    /// Send `max_tokens` instead of `max_completion_tokens`.
    pub max_tokens_field: bool,
    pub supports_developer_role: bool,
    pub supports_reasoning_effort: bool,
    pub supports_store: bool,
}

impl Default for Compat {
    fn default() -> Compat {
        Compat {
            max_tokens_field: false,
            supports_developer_role: false,
            supports_reasoning_effort: true,
            supports_store: false,
        }
    }
}

impl Compat {
    /// Applies a models.json `compat` object over `self`.
    fn merge(mut self, v: Option<&Value>) -> Compat {
        let Some(v) = v else { return self };
        if let Some(f) = v.get("maxTokensField").and_then(Value::as_str) {
            self.max_tokens_field = f == "max_tokens";
        }
        let flag = |k: &str| v.get(k).and_then(Value::as_bool);
        if let Some(b) = flag("supportsDeveloperRole") {
            self.supports_developer_role = b;
        }
        if let Some(b) = flag("supportsReasoningEffort") {
            self.supports_reasoning_effort = b;
        }
        if let Some(b) = flag("supportsStore") {
            self.supports_store = b;
        }
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelDef {
    pub id: String,
    pub name: String,
    pub reasoning: bool,
    pub input: Vec<String>,
    pub context_window: u64,
    pub max_tokens: u64,
    pub compat: Compat,
}

impl ModelDef {
    pub fn supports_images(&self) -> bool {
        self.input.iter().any(|i| i == "image")
    }

    /// The output budget of one request: `min(maxTokens, 32000)` as upstream does; `None`
    /// when the model's limit is unknown (`max_tokens` 0) and the server should decide.
    pub fn output_budget(&self) -> Option<u64> {
        (self.max_tokens > 0).then(|| self.max_tokens.min(32_000))
    }

    /// What we assume for a model id we do not know on a server we do not know (a llama.cpp
    /// or vLLM behind `--base-url`, a models.json provider that does not list it). Nothing that
    /// only OpenAI's own API accepts: role `system`, no `store`, text-only input, no output
    /// limit (the server caps output at what its window leaves; a guess could exceed a small
    /// window and be refused), and `reasoning_effort` only when `reasoning` (the user asked
    /// for a thinking level). `context_window` 0: ask the server at the first call.
    pub fn assumed(id: &str, reasoning: bool, compat: Compat) -> ModelDef {
        ModelDef {
            id: id.to_owned(),
            name: id.to_owned(),
            reasoning,
            input: vec!["text".into()],
            context_window: 0,
            max_tokens: 0,
            compat: Compat {
                supports_developer_role: false,
                supports_store: false,
                ..compat
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProviderDef {
    pub name: String,
    pub base_url: String,
    /// The configured API name (validated when the provider is chosen).
    pub api: String,
    /// Environment variables that hold the key, in order.
    pub env_keys: Vec<String>,
    /// models.json `apiKey` (a config value: `!cmd`, an env var name, or a literal).
    pub api_key: Option<String>,
    /// models.json `headers` (values are config values).
    pub headers: Vec<(String, String)>,
    pub compat: Compat,
    pub default_model: Option<String>,
    pub models: Vec<ModelDef>,
    /// Defined in models.json rather than built in.
    pub custom: bool,
}

struct Builtin {
    name: &'static str,
    base_url: &'static str,
    api: &'static str,
    env: &'static [&'static str],
    compat: Compat,
    /// `(id, reasoning, context window, max tokens, images)`; the first is the default.
    models: &'static [(&'static str, bool, u64, u64, bool)],
}

const OPENAI_COMPAT: Compat = Compat {
    max_tokens_field: false,
    supports_developer_role: false,
    supports_reasoning_effort: true,
    supports_store: false,
};
const MAX_TOKENS_NO_EFFORT: Compat = Compat {
    max_tokens_field: true,
    supports_developer_role: false,
    supports_reasoning_effort: false,
    supports_store: false,
};

/// Built-in providers in auto-selection preference order (§6.2/§6.3/§6.4).
const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "prime-inference",
        base_url: "https://api.pinference.ai/api/v1",
        api: "openai-completions",
        env: &["PRIME_API_KEY"],
        compat: MAX_TOKENS_NO_EFFORT,
        models: &[("z-ai/glm-5.2", true, 200_000, 32_000, false)],
    },
    Builtin {
        name: "anthropic",
        base_url: "https://api.anthropic.com",
        api: "anthropic-messages",
        env: &["ANTHROPIC_API_KEY"],
        compat: OPENAI_COMPAT,
        models: &[
            ("claude-opus-4-7", true, 200_000, 32_000, true),
            ("claude-sonnet-4-5", true, 200_000, 64_000, true),
            ("claude-haiku-4-5", true, 200_000, 64_000, true),
        ],
    },
    Builtin {
        name: "openai",
        base_url: "https://api.openai.com/v1",
        api: "openai-completions",
        env: &["OPENAI_API_KEY"],
        compat: Compat {
            max_tokens_field: false,
            supports_developer_role: true,
            supports_reasoning_effort: true,
            supports_store: true,
        },
        models: &[
            ("gpt-5.4", true, 400_000, 128_000, true),
            ("gpt-5-mini", true, 400_000, 128_000, true),
            ("gpt-4.1", false, 1_047_576, 32_768, true),
        ],
    },
    Builtin {
        name: "openrouter",
        base_url: "https://openrouter.ai/api/v1",
        api: "openai-completions",
        env: &["OPENROUTER_API_KEY"],
        compat: OPENAI_COMPAT,
        models: &[("moonshotai/kimi-k2.6", true, 262_144, 32_000, true)],
    },
    Builtin {
        name: "deepseek",
        base_url: "https://api.deepseek.com",
        api: "openai-completions",
        env: &["DEEPSEEK_API_KEY"],
        compat: MAX_TOKENS_NO_EFFORT,
        models: &[("deepseek-v4-pro", true, 128_000, 32_000, false)],
    },
    Builtin {
        name: "xai",
        base_url: "https://api.x.ai/v1",
        api: "openai-completions",
        env: &["XAI_API_KEY"],
        compat: Compat {
            supports_reasoning_effort: false,
            ..OPENAI_COMPAT
        },
        models: &[("grok-4.20-0309-reasoning", true, 256_000, 32_000, true)],
    },
    Builtin {
        name: "groq",
        base_url: "https://api.groq.com/openai/v1",
        api: "openai-completions",
        env: &["GROQ_API_KEY"],
        compat: OPENAI_COMPAT,
        models: &[("openai/gpt-oss-120b", true, 131_072, 32_000, false)],
    },
    Builtin {
        name: "zai",
        base_url: "https://api.z.ai/api/coding/paas/v4",
        api: "openai-completions",
        env: &["ZAI_API_KEY"],
        compat: MAX_TOKENS_NO_EFFORT,
        models: &[("glm-5.1", true, 200_000, 32_000, false)],
    },
    Builtin {
        name: "mistral",
        // Mistral's OpenAI-compatible endpoint lives under /v1.
        base_url: "https://api.mistral.ai/v1",
        api: "openai-completions",
        env: &["MISTRAL_API_KEY"],
        compat: MAX_TOKENS_NO_EFFORT,
        models: &[("devstral-medium-latest", false, 128_000, 32_000, false)],
    },
    Builtin {
        name: "cerebras",
        base_url: "https://api.cerebras.ai/v1",
        api: "openai-completions",
        env: &["CEREBRAS_API_KEY"],
        compat: OPENAI_COMPAT,
        models: &[("gpt-oss-120b", true, 131_072, 32_000, false)],
    },
    Builtin {
        name: "moonshotai",
        base_url: "https://api.moonshot.ai/v1",
        api: "openai-completions",
        env: &["MOONSHOT_API_KEY"],
        compat: MAX_TOKENS_NO_EFFORT,
        models: &[("kimi-k2.6", true, 262_144, 32_000, true)],
    },
    Builtin {
        name: "huggingface",
        base_url: "https://router.huggingface.co/v1",
        api: "openai-completions",
        env: &["HF_TOKEN"],
        compat: MAX_TOKENS_NO_EFFORT,
        models: &[("openai/gpt-oss-120b", true, 131_072, 32_000, false)],
    },
    Builtin {
        name: "fireworks",
        // Fireworks' Anthropic-compatible endpoint: POST {base}/v1/messages.
        base_url: "https://api.fireworks.ai/inference",
        api: "anthropic-messages",
        env: &["FIREWORKS_API_KEY"],
        compat: OPENAI_COMPAT,
        models: &[(
            "accounts/fireworks/models/kimi-k2p6",
            true,
            262_144,
            32_000,
            false,
        )],
    },
];

/// All known providers: built-ins with models.json merged over them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registry {
    pub providers: Vec<ProviderDef>,
}

impl Registry {
    pub fn builtin() -> Registry {
        let providers = BUILTINS
            .iter()
            .map(|b| ProviderDef {
                name: b.name.to_owned(),
                base_url: b.base_url.to_owned(),
                api: b.api.to_owned(),
                env_keys: b.env.iter().map(|s| (*s).to_owned()).collect(),
                api_key: None,
                headers: Vec::new(),
                compat: b.compat,
                default_model: b.models.first().map(|m| m.0.to_owned()),
                models: b
                    .models
                    .iter()
                    .map(
                        |&(id, reasoning, context_window, max_tokens, images)| ModelDef {
                            id: id.to_owned(),
                            name: id.to_owned(),
                            reasoning,
                            input: if images {
                                vec!["text".into(), "image".into()]
                            } else {
                                vec!["text".into()]
                            },
                            context_window,
                            max_tokens,
                            compat: b.compat,
                        },
                    )
                    .collect(),
                custom: false,
            })
            .collect();
        Registry { providers }
    }

    /// Built-ins plus `<agent_dir>/models.json` when it exists.
    pub fn load(agent_dir: &Path) -> Result<Registry, String> {
        let mut registry = Registry::builtin();
        let path = agent_dir.join("models.json");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let value: Value = serde_json::from_str(&text)
                    .map_err(|e| format!("Cannot parse {}: {e}", path.display()))?;
                registry
                    .merge_models_json(&value)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("Cannot read {}: {e}", path.display())),
        }
        Ok(registry)
    }

    pub fn find(&self, name: &str) -> Option<&ProviderDef> {
        self.providers
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    fn find_mut(&mut self, name: &str) -> Option<&mut ProviderDef> {
        self.providers
            .iter_mut()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// Merges a parsed models.json: an entry for a built-in overrides what it sets (only
    /// `baseUrl` reroutes it) and upserts its models by id; other entries add providers.
    pub fn merge_models_json(&mut self, json: &Value) -> Result<(), String> {
        let Some(providers) = json.get("providers") else {
            return Ok(());
        };
        let providers = providers
            .as_object()
            .ok_or("\"providers\" must be an object")?;
        for (name, entry) in providers {
            let entry = entry
                .as_object()
                .ok_or_else(|| format!("provider \"{name}\" must be an object"))?;
            let get_str = |k: &str| entry.get(k).and_then(Value::as_str).map(str::to_owned);
            if self.find(name).is_none() {
                self.providers.push(ProviderDef {
                    name: name.clone(),
                    base_url: String::new(),
                    api: "openai-completions".into(),
                    env_keys: Vec::new(),
                    api_key: None,
                    headers: Vec::new(),
                    compat: Compat::default(),
                    default_model: None,
                    models: Vec::new(),
                    custom: true,
                });
            }
            let Some(p) = self.find_mut(name) else {
                continue;
            };
            if let Some(url) = get_str("baseUrl") {
                p.base_url = url;
            }
            if let Some(api) = get_str("api") {
                p.api = api;
            }
            if let Some(key) = get_str("apiKey") {
                p.api_key = Some(key);
            }
            if let Some(headers) = entry.get("headers").and_then(Value::as_object) {
                for (k, v) in headers {
                    if let Some(v) = v.as_str() {
                        p.headers.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
                        p.headers.push((k.clone(), v.to_owned()));
                    }
                }
            }
            p.compat = p.compat.merge(entry.get("compat"));
            let models = match entry.get("models") {
                None => Vec::new(),
                Some(m) => m
                    .as_array()
                    .ok_or_else(|| format!("provider \"{name}\": \"models\" must be an array"))?
                    .clone(),
            };
            for m in &models {
                let id = m
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| format!("provider \"{name}\": every model needs an \"id\""))?;
                let base = p.models.iter().find(|x| x.id == id).cloned();
                let model = parse_model(id, m, base.as_ref(), p.compat);
                match p.models.iter_mut().find(|x| x.id == id) {
                    Some(slot) => *slot = model,
                    None => p.models.push(model),
                }
            }
            if p.default_model.is_none() {
                p.default_model = p.models.first().map(|m| m.id.clone());
            }
            if p.custom && p.base_url.is_empty() {
                return Err(format!("provider \"{name}\" needs a \"baseUrl\""));
            }
        }
        Ok(())
    }
}

fn parse_model(id: &str, m: &Value, base: Option<&ModelDef>, compat: Compat) -> ModelDef {
    let u = |k: &str| m.get(k).and_then(Value::as_u64);
    ModelDef {
        id: id.to_owned(),
        name: m
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| base.map(|b| b.name.clone()))
            .unwrap_or_else(|| id.to_owned()),
        reasoning: m
            .get("reasoning")
            .and_then(Value::as_bool)
            .or_else(|| base.map(|b| b.reasoning))
            .unwrap_or(false),
        input: m
            .get("input")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .or_else(|| base.map(|b| b.input.clone()))
            .unwrap_or_else(|| vec!["text".into()]),
        context_window: u("contextWindow")
            .or_else(|| base.map(|b| b.context_window))
            .unwrap_or(128_000),
        max_tokens: u("maxTokens")
            .or_else(|| base.map(|b| b.max_tokens))
            .unwrap_or(16_384),
        compat: base.map_or(compat, |b| b.compat).merge(m.get("compat")),
    }
}

/// The provider and model a run uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub provider: ProviderDef,
    pub model: ModelDef,
    pub api: Api,
    /// The model is not in the catalogue and the server is the user's own: `model` holds
    /// `ModelDef::assumed` defaults, and the client is told so.
    pub assumed_defaults: bool,
}

fn unknown_provider(name: &str) -> String {
    format!("Unknown provider \"{name}\". Use \"prime-agent model list\" to see available providers/models.")
}

fn unknown_model(id: &str) -> String {
    format!("Model \"{id}\" not found. Use \"prime-agent model list\" to see available models.")
}

/// A model of `p` with this id, or a custom one built from the provider's default model.
fn model_or_custom(p: &ProviderDef, id: &str) -> ModelDef {
    if let Some(m) = p.models.iter().find(|m| m.id == id) {
        return m.clone();
    }
    log::warn!(
        "Model \"{id}\" not found for provider \"{}\". Using custom model id.",
        p.name
    );
    let template = p
        .default_model
        .as_ref()
        .and_then(|d| p.models.iter().find(|m| &m.id == d))
        .or(p.models.first());
    match template {
        Some(t) => ModelDef {
            id: id.to_owned(),
            name: id.to_owned(),
            ..t.clone()
        },
        None => ModelDef {
            id: id.to_owned(),
            name: id.to_owned(),
            reasoning: false,
            input: vec!["text".into()],
            context_window: 128_000,
            max_tokens: 16_384,
            compat: p.compat,
        },
    }
}

/// Resolves `--provider` / `--model` (§6.2). `has_key` tells auto-selection which providers
/// are usable.
pub fn select(
    registry: &Registry,
    provider: Option<&str>,
    model: Option<&str>,
    has_key: &dyn Fn(&ProviderDef) -> bool,
) -> Result<Selection, String> {
    let (p, m) = match (provider, model) {
        (Some(name), model) => {
            let p = registry.find(name).ok_or_else(|| unknown_provider(name))?;
            let m = match model {
                Some(id) => match p.models.iter().find(|m| m.id == id) {
                    Some(m) => m.clone(),
                    None => {
                        // `--provider openai --model openai/gpt-5.4` names the provider twice.
                        let stripped = id
                            .split_once('/')
                            .filter(|(prefix, _)| prefix.eq_ignore_ascii_case(&p.name))
                            .map_or(id, |(_, rest)| rest);
                        model_or_custom(p, stripped)
                    }
                },
                None => {
                    let id = p.default_model.clone().ok_or_else(|| {
                        format!("Provider \"{}\" has no models configured.", p.name)
                    })?;
                    model_or_custom(p, &id)
                }
            };
            (p, m)
        }
        (None, Some(id)) => {
            let prefixed = id
                .split_once('/')
                .and_then(|(prefix, rest)| registry.find(prefix).map(|p| (p, rest)));
            if let Some((p, rest)) = prefixed {
                (p, model_or_custom(p, rest))
            } else {
                let hits: Vec<(&ProviderDef, &ModelDef)> = registry
                    .providers
                    .iter()
                    .flat_map(|p| p.models.iter().map(move |m| (p, m)))
                    .filter(|(_, m)| m.id == id)
                    .collect();
                let (p, m) = hits
                    .iter()
                    .find(|(p, _)| has_key(p))
                    .or(hits.first())
                    .copied()
                    .ok_or_else(|| unknown_model(id))?;
                (p, m.clone())
            }
        }
        (None, None) => {
            // Prefer a provider that has a key; with none anywhere, pick openai so each
            // prompt can explain which key to set.
            let p = registry
                .providers
                .iter()
                .find(|p| has_key(p) && p.default_model.is_some())
                .or_else(|| registry.find("openai"))
                .ok_or_else(|| unknown_provider("openai"))?;
            let id = p.default_model.clone().unwrap_or_default();
            (p, model_or_custom(p, &id))
        }
    };
    let api = Api::parse(&p.api).ok_or_else(|| {
        format!(
            "Provider \"{}\" uses API \"{}\", which this build does not support (supported: openai-completions, anthropic-messages).",
            p.name, p.api
        )
    })?;
    Ok(Selection {
        provider: p.clone(),
        model: m,
        api,
        assumed_defaults: false,
    })
}

/// Where keys come from; built once at start-up and consulted on every request.
#[derive(Debug)]
pub struct Credentials {
    pub cli_key: Option<String>,
    pub agent_dir: PathBuf,
    /// `!cmd` results from auth.json, cached for the life of the process.
    command_cache: Mutex<HashMap<String, String>>,
}

/// Credentials files should be private (mode 0600); say so once if one is not.
fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::warn!(
            "{} is readable by other users (mode {mode:o}); run chmod 600 on it",
            path.display()
        );
    }
}

impl Credentials {
    pub fn new(cli_key: Option<String>, agent_dir: PathBuf) -> Credentials {
        Credentials {
            cli_key: cli_key.filter(|k| !k.is_empty()),
            agent_dir,
            command_cache: Mutex::new(HashMap::new()),
        }
    }

    fn auth_json_entry(&self, provider: &str) -> Option<String> {
        let path = self.agent_dir.join("auth.json");
        let text = std::fs::read_to_string(&path).ok()?;
        warn_if_shared(&path);
        let value: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                log::warn!("Ignoring auth.json: {e}");
                return None;
            }
        };
        let entry = value.get(provider)?;
        if entry.get("type").and_then(Value::as_str) != Some("api_key") {
            return None;
        }
        entry.get("key").and_then(Value::as_str).map(str::to_owned)
    }

    /// Whether a key is configured for `p`, without running any `!command`. Used for
    /// auto-selection, so `--api-key` does not count: it applies to whichever provider is
    /// chosen, not to the first in the preference list.
    pub fn has_key(&self, p: &ProviderDef) -> bool {
        self.auth_json_entry(&p.name).is_some()
            || p.env_keys.iter().any(|k| env_nonempty(k).is_some())
            || p.api_key.is_some()
    }

    /// The key for `p`, by precedence. `Ok(None)`: no key is configured anywhere.
    pub fn key_for(&self, p: &ProviderDef) -> Result<Option<String>, String> {
        if let Some(k) = &self.cli_key {
            return Ok(Some(k.clone()));
        }
        if let Some(raw) = self.auth_json_entry(&p.name) {
            if let Some(cmd) = raw.strip_prefix('!') {
                let mut cache = self.command_cache.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(hit) = cache.get(cmd) {
                    return Ok(Some(hit.clone()));
                }
                let value = run_command(cmd)?;
                cache.insert(cmd.to_owned(), value.clone());
                return Ok(Some(value));
            }
            return Ok(Some(resolve_value(&raw)?));
        }
        if let Some(v) = p.env_keys.iter().find_map(|k| env_nonempty(k)) {
            return Ok(Some(v));
        }
        match &p.api_key {
            Some(raw) => resolve_value(raw).map(Some),
            None => Ok(None),
        }
    }

    /// The text of the per-prompt error when no key is found.
    pub fn missing_key_message(&self, p: &ProviderDef) -> String {
        let auth = self.agent_dir.join("auth.json");
        match p.env_keys.first() {
            Some(var) => format!(
                "No API key found for {}. Set {var}, pass --api-key, or add it to {}.",
                p.name,
                auth.display()
            ),
            None => format!(
                "No API key found for {}. Pass --api-key, add it to {}, or set \"apiKey\" in models.json.",
                p.name,
                auth.display()
            ),
        }
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A models.json config value: `!cmd` runs a shell command (stdout, trimmed); a name of a
/// non-empty environment variable yields its value; anything else is the literal.
pub fn resolve_value(raw: &str) -> Result<String, String> {
    if let Some(cmd) = raw.strip_prefix('!') {
        return run_command(cmd);
    }
    Ok(env_nonempty(raw).unwrap_or_else(|| raw.to_owned()))
}

const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `sh -c cmd` with a 10 s limit. The command text is not logged: it may embed a secret.
fn run_command(cmd: &str) -> Result<String, String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("Cannot run a key command: {e}"))?;
    let Some(mut stdout) = child.stdout.take() else {
        return Err("Cannot read a key command's output".to_owned());
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        let _ = tx.send(out);
    });
    let out = match rx.recv_timeout(COMMAND_TIMEOUT) {
        Ok(out) => out,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            return Err(format!(
                "A key command did not finish within {} s",
                COMMAND_TIMEOUT.as_secs()
            ));
        }
    };
    let _ = reader.join();
    let status = child
        .wait()
        .map_err(|e| format!("Key command failed: {e}"))?;
    if !status.success() {
        return Err(format!("A key command failed ({status})"));
    }
    let value = String::from_utf8_lossy(&out).trim().to_owned();
    if value.is_empty() {
        return Err("A key command printed nothing".to_owned());
    }
    Ok(value)
}

/// Everything a remote provider needs at request time.
#[derive(Debug)]
pub struct Resolved {
    pub selection: Selection,
    pub credentials: Arc<Credentials>,
}

/// What the command line says about the model beyond its name.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelOverrides {
    /// `--context-window N`: wins over the catalogue and over what a server reports.
    pub context_window: Option<u64>,
    /// `--thinking` other than `off` was given: an unknown model is then asked to reason.
    pub thinking_requested: bool,
}

/// Resolves a run's provider from the CLI flags and the agent directory.
pub fn resolve(
    provider: Option<&str>,
    model: Option<&str>,
    api_key: Option<&str>,
    base_url: Option<&str>,
    overrides: ModelOverrides,
    agent_dir: &Path,
) -> Result<Resolved, String> {
    let registry = Registry::load(agent_dir)?;
    let credentials = Arc::new(Credentials::new(
        api_key.map(str::to_owned),
        agent_dir.to_path_buf(),
    ));
    let mut selection = select(&registry, provider, model, &|p| credentials.has_key(p))?;
    let base_url = base_url.filter(|u| !u.is_empty());
    if let Some(url) = base_url {
        selection.provider.base_url = url.to_owned();
    }
    let p = &selection.provider;
    let known = p.models.iter().any(|m| m.id == selection.model.id);
    // A built-in provider's own server knows its new models about as well as its catalogue
    // does; anyone else's server gets nothing OpenAI-specific.
    if !known && (base_url.is_some() || p.custom) {
        let compat = if p.custom {
            p.compat
        } else {
            Compat::default()
        };
        selection.model =
            ModelDef::assumed(&selection.model.id, overrides.thinking_requested, compat);
        selection.assumed_defaults = true;
    }
    if let Some(window) = overrides.context_window {
        selection.model.context_window = window;
    }
    log::info!(
        "Model: {}/{} ({}, {})",
        selection.provider.name,
        selection.model.id,
        selection.provider.api,
        selection.provider.base_url
    );
    Ok(Resolved {
        selection,
        credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn registry_with_intercept() -> Registry {
        let mut r = Registry::builtin();
        r.merge_models_json(&json!({"providers":{
            "intercept":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions","apiKey":"test-key",
                "models":[{"id":"cold/test-model","reasoning":false,"input":["text"]}]},
            "openai":{"baseUrl":"http://proxy.local/v1","models":[{"id":"gpt-5.4","maxTokens":1000},{"id":"my-ft"}]}
        }}))
        .expect("merge");
        r
    }

    fn none(_: &ProviderDef) -> bool {
        false
    }

    #[test]
    fn models_json_adds_reroutes_and_upserts() {
        let r = registry_with_intercept();
        let i = r.find("intercept").expect("intercept");
        assert!(i.custom);
        assert_eq!(i.models[0].context_window, 128_000);
        assert_eq!(i.models[0].max_tokens, 16_384);
        assert_eq!(i.default_model.as_deref(), Some("cold/test-model"));
        let o = r.find("OpenAI").expect("case-insensitive");
        assert_eq!(o.base_url, "http://proxy.local/v1");
        assert_eq!(o.api, "openai-completions");
        let g = o
            .models
            .iter()
            .find(|m| m.id == "gpt-5.4")
            .expect("upserted");
        assert_eq!(g.max_tokens, 1000);
        assert!(g.reasoning, "unset fields keep the built-in values");
        assert!(o.models.iter().any(|m| m.id == "my-ft"));
    }

    #[test]
    fn resolution_rules() {
        let r = registry_with_intercept();
        let s = select(&r, Some("intercept"), Some("cold/test-model"), &none).expect("ok");
        assert_eq!(
            (s.provider.name.as_str(), s.model.id.as_str()),
            ("intercept", "cold/test-model")
        );
        let s = select(&r, None, Some("cold/test-model"), &none).expect("exact id search");
        assert_eq!(s.provider.name, "intercept");
        let s = select(&r, None, Some("anthropic/claude-opus-4-7"), &none).expect("prefix");
        assert_eq!(s.api, Api::AnthropicMessages);
        assert_eq!(s.model.id, "claude-opus-4-7");
        let s = select(&r, Some("openai"), Some("openai/gpt-4.1"), &none).expect("double");
        assert_eq!(s.model.id, "gpt-4.1");
        let s = select(&r, Some("openai"), None, &none).expect("default");
        assert_eq!(s.model.id, "gpt-5.4");
        let s = select(&r, Some("anthropic"), Some("claude-next"), &none).expect("custom");
        assert_eq!(s.model.id, "claude-next");
        assert!(s.model.reasoning, "custom models copy the default template");
        assert_eq!(
            select(&r, Some("nope"), None, &none).unwrap_err(),
            "Unknown provider \"nope\". Use \"prime-agent model list\" to see available providers/models."
        );
        assert_eq!(
            select(&r, None, Some("no-such-model"), &none).unwrap_err(),
            "Model \"no-such-model\" not found. Use \"prime-agent model list\" to see available models."
        );
        let s = select(&r, None, None, &none).expect("fallback");
        assert_eq!(s.provider.name, "openai");
        let s = select(&r, None, None, &|p| p.name == "groq" || p.name == "zai").expect("auto");
        assert_eq!(s.provider.name, "groq", "preference order");
    }

    #[test]
    fn unknown_models_on_own_servers_get_assumed_defaults() {
        let dir = std::env::temp_dir().join(format!("pa-assumed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let none = ModelOverrides::default();
        let r = resolve(
            Some("openai"),
            Some("local-llama"),
            None,
            Some("http://127.0.0.1:8080/v1"),
            none,
            &dir,
        )
        .expect("resolves");
        let m = &r.selection.model;
        assert!(r.selection.assumed_defaults);
        assert!(!m.reasoning && !m.supports_images());
        assert!(!m.compat.supports_developer_role && !m.compat.supports_store);
        assert_eq!((m.context_window, m.output_budget()), (0, None));
        let thinking = ModelOverrides {
            context_window: Some(4096),
            thinking_requested: true,
        };
        let r = resolve(
            Some("openai"),
            Some("local-llama"),
            None,
            Some("http://h/v1"),
            thinking,
            &dir,
        )
        .expect("resolves");
        assert!(r.selection.model.reasoning);
        assert_eq!(r.selection.model.context_window, 4096);
        // Known models keep their catalogue entry, and OpenAI's own server its new models.
        let r = resolve(
            Some("openai"),
            Some("gpt-4.1"),
            None,
            Some("http://h/v1"),
            none,
            &dir,
        )
        .expect("resolves");
        assert!(!r.selection.assumed_defaults);
        assert_eq!(r.selection.model.context_window, 1_047_576);
        let r = resolve(Some("openai"), Some("gpt-6"), None, None, none, &dir).expect("resolves");
        assert!(!r.selection.assumed_defaults);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unsupported_api_is_an_error_only_when_chosen() {
        let mut r = Registry::builtin();
        r.merge_models_json(&json!({"providers":{"g":{"baseUrl":"http://x","api":"google-generative-ai","models":[{"id":"m"}]}}}))
            .expect("merge");
        assert!(select(&r, Some("g"), None, &none)
            .unwrap_err()
            .contains("does not support"));
        assert!(select(&r, Some("openai"), None, &none).is_ok());
    }

    #[test]
    fn config_values_and_precedence() {
        assert_eq!(resolve_value("!printf ' k1 \\n'").expect("cmd"), "k1");
        assert_eq!(resolve_value("literal-key").expect("lit"), "literal-key");
        assert_eq!(
            resolve_value("PATH").expect("env"),
            std::env::var("PATH").unwrap_or_default()
        );
        assert!(resolve_value("!exit 3").is_err());

        let dir = std::env::temp_dir().join(format!("pa-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let r = registry_with_intercept();
        let p = r.find("intercept").expect("p").clone();
        let c = Credentials::new(None, dir.clone());
        assert_eq!(c.key_for(&p).expect("k").as_deref(), Some("test-key"));
        std::fs::write(
            dir.join("auth.json"),
            r#"{"intercept":{"type":"api_key","key":"from-auth"}}"#,
        )
        .expect("write");
        assert_eq!(c.key_for(&p).expect("k").as_deref(), Some("from-auth"));
        let c = Credentials::new(Some("cli".into()), dir.clone());
        assert_eq!(c.key_for(&p).expect("k").as_deref(), Some("cli"));
        let mut bare = p.clone();
        bare.name = "other".into();
        bare.api_key = None;
        let c = Credentials::new(None, dir.clone());
        assert_eq!(c.key_for(&bare).expect("k"), None);
        assert!(!c.has_key(&bare));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
