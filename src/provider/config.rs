//! Provider configuration, compatible with Prime Agent: the built-in providers, the user's
//! `<agentDir>/models.json` merged over them, credentials (`--api-key` > `auth.json` > the
//! provider's environment variable > `models.json` `apiKey`), and model resolution from
//! `--provider` / `--model`.
//!
//! Resolution errors that mean the user asked for something that does not exist are start-up
//! errors. A missing key is not: keys are looked up per request, so the agent starts and each
//! prompt says what to set (and adding the key to `auth.json` later works without a restart).

mod catalogue;
mod models_json;
mod select;

pub(crate) use catalogue::{Api, Compat, ModelDef, ProviderDef};
pub(crate) use models_json::Registry;
pub(crate) use select::{scope, select, split_level, Selection};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::base::abort::AbortFlag;

/// Where keys come from; built once at start-up and consulted on every request.
#[derive(Debug)]
pub(crate) struct Credentials {
    pub cli_key: Option<String>,
    pub agent_dir: PathBuf,
    /// `!cmd` results from auth.json, cached for the life of the process.
    command_cache: Mutex<HashMap<String, String>>,
    /// ACP `logout`: no key is used until the next `authenticate`.
    signed_out: std::sync::atomic::AtomicBool,
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
    pub(crate) fn new(cli_key: Option<String>, agent_dir: PathBuf) -> Credentials {
        Credentials {
            cli_key: cli_key.filter(|k| !k.is_empty()),
            agent_dir,
            command_cache: Mutex::new(HashMap::new()),
            signed_out: Default::default(),
        }
    }

    /// ACP `logout`: requests fail (`auth::SIGNED_OUT`) until `sign_in`; cached `!command`
    /// results are forgotten, so the next use runs the command again.
    pub(crate) fn sign_out(&self) {
        self.signed_out
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.command_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// ACP `authenticate`: keys are used again.
    pub(crate) fn sign_in(&self) {
        self.signed_out
            .store(false, std::sync::atomic::Ordering::Relaxed);
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
    pub(crate) fn has_key(&self, p: &ProviderDef) -> bool {
        self.auth_json_entry(&p.name).is_some()
            || p.env_keys.iter().any(|k| env_nonempty(k).is_some())
            || p.api_key.is_some()
            // Vertex's OAuth credentials are no key (upstream counts them the same way).
            || (p.api == "google-vertex" && crate::provider::vertex::env().configured())
            // Bedrock signs with AWS credentials instead (checked without reading files).
            || (p.api == "bedrock-converse-stream"
                && super::bedrock::aws_config::configured(&|k| {
                    env_nonempty(k).filter(|v| !v.trim().is_empty())
                }))
    }

    /// The key for `p`, by precedence. `Ok(None)`: no key is configured anywhere. A key
    /// command stops when `abort` is set (the turn was cancelled).
    pub(crate) fn key_for(
        &self,
        p: &ProviderDef,
        abort: &AbortFlag,
    ) -> Result<Option<String>, String> {
        if self.signed_out.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(crate::protocol::auth::SIGNED_OUT.to_owned());
        }
        if let Some(k) = &self.cli_key {
            return Ok(Some(k.clone()));
        }
        if let Some(raw) = self.auth_json_entry(&p.name) {
            if let Some(cmd) = raw.strip_prefix('!') {
                let mut cache = self.command_cache.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(hit) = cache.get(cmd) {
                    return Ok(Some(hit.clone()));
                }
                let value = run_command(cmd, abort)?;
                cache.insert(cmd.to_owned(), value.clone());
                return Ok(Some(value));
            }
            return Ok(Some(resolve_value(&raw, abort)?));
        }
        if let Some(v) = p.env_keys.iter().find_map(|k| env_nonempty(k)) {
            return Ok(Some(v));
        }
        match &p.api_key {
            Some(raw) => resolve_value(raw, abort).map(Some),
            None => Ok(None),
        }
    }

    /// The text of the per-prompt error when no key is found.
    pub(crate) fn missing_key_message(&self, p: &ProviderDef) -> String {
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
pub(crate) fn resolve_value(raw: &str, abort: &AbortFlag) -> Result<String, String> {
    if let Some(cmd) = raw.strip_prefix('!') {
        return run_command(cmd, abort);
    }
    Ok(env_nonempty(raw).unwrap_or_else(|| raw.to_owned()))
}

const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `sh -c cmd` with a 10 s limit, through the tools' process runner: its own process
/// group, killed whole on timeout, so a grandchild that holds the pipe cannot outlast the
/// limit, and at once when `abort` is set. The command text is not logged: it may embed a
/// secret.
fn run_command(cmd: &str, abort: &AbortFlag) -> Result<String, String> {
    use crate::tools::process::{run_stdout, Ending};
    let run = run_stdout(cmd, COMMAND_TIMEOUT, abort)
        .map_err(|e| format!("Cannot run a key command: {e}"))?;
    match run.ending {
        Ending::Exited(0) => {}
        Ending::Exited(code) => return Err(format!("A key command failed (exit status: {code})")),
        Ending::Aborted => return Err("A key command was cancelled".to_owned()),
        Ending::TimedOut => {
            return Err(format!(
                "A key command did not finish within {} s",
                COMMAND_TIMEOUT.as_secs()
            ))
        }
    }
    let Some(out) = run.output.whole() else {
        return Err("A key command printed too much".to_owned());
    };
    let value = String::from_utf8_lossy(out).trim().to_owned();
    if value.is_empty() {
        return Err("A key command printed nothing".to_owned());
    }
    Ok(value)
}

/// Everything a remote provider needs at request time.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub selection: Selection,
    pub credentials: Arc<Credentials>,
    /// Every provider the run knows (for the session's model menu).
    pub registry: Registry,
}

/// What the command line says about the model beyond its name.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ModelOverrides {
    /// `--context-window N`: wins over the catalogue and over what a server reports.
    pub context_window: Option<u64>,
    /// `--thinking` other than `off` was given: an unknown model is then asked to reason.
    pub thinking_requested: bool,
}

/// Resolves a run's provider from the CLI flags and the agent directory.
pub(crate) fn resolve(
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
        if !selection.provider.custom && selection.model.api.is_some() {
            // Another server behind a built-in provider is spoken to in the provider's API
            // (Chat Completions for openai, which every compatible server has), not in the
            // one the catalogue picked for the provider's own server. A models.json `api`
            // on the provider says otherwise.
            selection.model.api = None;
            selection.api = select::api_of(&selection.provider, &selection.model)?;
        }
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
        // The provider's API, not the one the template model may have had.
        selection.api = select::api_of(&selection.provider, &selection.model)?;
        selection.assumed_defaults = true;
    }
    if let Some(window) = overrides.context_window {
        selection.model.context_window = window;
    }
    log::info!(
        "Model: {}/{} ({}, {})",
        selection.provider.name,
        selection.model.id,
        selection.model.api_name(&selection.provider),
        selection.provider.base_url
    );
    Ok(Resolved {
        selection,
        credentials,
        registry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    fn resolve_value_now(raw: &str) -> Result<String, String> {
        resolve_value(raw, &AbortFlag::new())
    }

    #[test]
    fn a_cancelled_turn_stops_its_key_command() {
        let abort = AbortFlag::new();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let flag = abort.clone();
        std::thread::spawn(move || {
            let _ = tx.send(resolve_value("!sleep 30; echo k", &flag));
        });
        std::thread::sleep(Duration::from_millis(100));
        abort.abort();
        // Bounded below the command's own 10 s limit: only the abort can end it in time.
        let got = rx
            .recv_timeout(COMMAND_TIMEOUT / 2)
            .expect("the key command ignored the abort");
        assert_eq!(got, Err("A key command was cancelled".to_owned()));
    }

    /// `resolve_value` on another thread, waited for at most `bound` (`None`: still running).
    fn resolve_within(raw: &'static str, bound: Duration) -> Option<Result<String, String>> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(resolve_value_now(raw));
        });
        rx.recv_timeout(bound).ok()
    }

    #[test]
    fn key_commands_cannot_outlast_their_limit_through_a_grandchild() {
        // `sleep` keeps the stdout pipe open after `sh` exits: the value is what was printed,
        // and the leftover is killed with its group instead of holding the call for 30 s.
        let got = resolve_within("!sleep 30 & echo k", COMMAND_TIMEOUT)
            .expect("a key command hung on a pipe its grandchild holds");
        assert_eq!(got.as_deref(), Ok("k"));
        // Still running at the limit: a clear error (after 10 s, not after the sleep's 30 s).
        let got = resolve_within("!sleep 30; echo k", 2 * COMMAND_TIMEOUT)
            .expect("a key command outlasted its 10 s limit");
        assert_eq!(
            got,
            Err("A key command did not finish within 10 s".to_owned())
        );
    }

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
    fn responses_api_for_openai_reasoning_models_and_wherever_models_json_says() {
        let r = Registry::builtin();
        let api = |p: &str, m: &str| select(&r, Some(p), Some(m), &none).map(|s| s.api);
        assert_eq!(api("openai", "gpt-5.4"), Ok(Api::OpenAiResponses));
        assert_eq!(api("openai", "gpt-5-mini"), Ok(Api::OpenAiResponses));
        assert_eq!(api("openai", "gpt-4.1"), Ok(Api::OpenAiCompletions));
        assert_eq!(
            api("openai", "gpt-5.3-codex"),
            Ok(Api::OpenAiResponses),
            "a new OpenAI id copies the default model"
        );
        assert_eq!(api("openrouter", "x/y"), Ok(Api::OpenAiCompletions));
        // An unknown model on the user's own server: the provider's API.
        let dir = std::env::temp_dir().join(format!("pa-responses-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let own = resolve(
            Some("openai"),
            Some("local-llama"),
            None,
            Some("http://127.0.0.1:8080/v1"),
            ModelOverrides::default(),
            &dir,
        )
        .expect("resolves");
        assert_eq!(own.selection.api, Api::OpenAiCompletions);
        // `--base-url` behind a built-in provider: the provider's API for known models too.
        let rerouted = resolve(
            Some("openai"),
            Some("gpt-5.4"),
            None,
            Some("http://127.0.0.1:8080/v1"),
            ModelOverrides::default(),
            &dir,
        )
        .expect("resolves");
        assert_eq!(rerouted.selection.api, Api::OpenAiCompletions);
        assert!(!rerouted.selection.assumed_defaults);
        std::fs::write(
            dir.join("models.json"),
            r#"{"providers": {"openai": {"api": "openai-responses"}}}"#,
        )
        .expect("write");
        let named = resolve(
            Some("openai"),
            Some("gpt-4.1"),
            None,
            Some("http://127.0.0.1:8080/v1"),
            ModelOverrides::default(),
            &dir,
        )
        .expect("resolves");
        assert_eq!(named.selection.api, Api::OpenAiResponses);
        let _ = std::fs::remove_dir_all(&dir);

        let mut r = Registry::builtin();
        r.merge_models_json(&json!({"providers": {
            "openai": {"baseUrl": "http://proxy/v1", "api": "openai-completions",
                       "models": [{"id": "gpt-5.4-pro", "api": "openai-responses"}]},
            "local": {"baseUrl": "http://127.0.0.1:1/v1", "api": "openai-responses",
                      "models": [{"id": "gpt-oss"}, {"id": "old", "api": "openai-completions"},
                                 {"id": "odd", "api": "openai-codex-responses"}]}
        }}))
        .expect("merge");
        let api = |p: &str, m: &str| select(&r, Some(p), Some(m), &none).map(|s| s.api);
        assert_eq!(
            api("openai", "gpt-5.4"),
            Ok(Api::OpenAiCompletions),
            "the provider's api named in models.json wins over the built-in one"
        );
        assert_eq!(api("openai", "gpt-5.4-pro"), Ok(Api::OpenAiResponses));
        assert_eq!(api("local", "gpt-oss"), Ok(Api::OpenAiResponses));
        assert_eq!(api("local", "old"), Ok(Api::OpenAiCompletions));
        assert_eq!(
            api("local", "odd"),
            Err("Provider \"local\" uses API \"openai-codex-responses\", which this build does not support (supported: openai-completions, openai-responses, anthropic-messages, google-generative-ai, azure-openai-responses, google-vertex, bedrock-converse-stream).".into())
        );
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
    fn amazon_bedrock_resolves_like_any_provider_and_counts_aws_credentials_as_a_key() {
        let r = Registry::builtin();
        let s = select(&r, Some("amazon-bedrock"), None, &none).expect("default");
        assert_eq!(s.model.id, "us.anthropic.claude-opus-4-6-v1");
        assert_eq!(s.api, Api::BedrockConverseStream);
        let id = "amazon-bedrock/us.anthropic.claude-haiku-4-5-20251001-v1:0";
        let s = select(&r, None, Some(split_level(id).0), &none).expect("prefixed");
        assert_eq!(s.model.id, "us.anthropic.claude-haiku-4-5-20251001-v1:0");
        assert!(s.model.reasoning && s.model.supports_images());
        // Only Bedrock has its credentials as a key: auto-selection picks it (last in the
        // preference order) when nothing else has one.
        let s = select(&r, None, None, &|p| p.api == "bedrock-converse-stream").expect("auto");
        assert_eq!(s.provider.name, "amazon-bedrock");
        assert_eq!(
            r.providers.last().map(|p| p.name.as_str()),
            Some("amazon-bedrock")
        );
    }

    #[test]
    fn unsupported_api_is_an_error_only_when_chosen() {
        let mut r = Registry::builtin();
        r.merge_models_json(&json!({"providers":{"g":{"baseUrl":"http://x","api":"mistral-conversations","models":[{"id":"m"}]}}}))
            .expect("merge");
        assert!(select(&r, Some("g"), None, &none)
            .unwrap_err()
            .contains("does not support"));
        assert!(select(&r, Some("openai"), None, &none).is_ok());
    }

    #[test]
    fn config_values_and_precedence() {
        assert_eq!(resolve_value_now("!printf ' k1 \\n'").expect("cmd"), "k1");
        assert_eq!(
            resolve_value_now("literal-key").expect("lit"),
            "literal-key"
        );
        assert_eq!(
            resolve_value_now("PATH").expect("env"),
            std::env::var("PATH").unwrap_or_default()
        );
        assert!(resolve_value_now("!exit 3").is_err());

        let dir = std::env::temp_dir().join(format!("pa-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let r = registry_with_intercept();
        let p = r.find("intercept").expect("p").clone();
        let c = Credentials::new(None, dir.clone());
        assert_eq!(
            c.key_for(&p, &AbortFlag::new()).expect("k").as_deref(),
            Some("test-key")
        );
        std::fs::write(
            dir.join("auth.json"),
            r#"{"intercept":{"type":"api_key","key":"from-auth"}}"#,
        )
        .expect("write");
        assert_eq!(
            c.key_for(&p, &AbortFlag::new()).expect("k").as_deref(),
            Some("from-auth")
        );
        let c = Credentials::new(Some("cli".into()), dir.clone());
        assert_eq!(
            c.key_for(&p, &AbortFlag::new()).expect("k").as_deref(),
            Some("cli")
        );
        let mut bare = p.clone();
        bare.name = "other".into();
        bare.api_key = None;
        let c = Credentials::new(None, dir.clone());
        assert_eq!(c.key_for(&bare, &AbortFlag::new()).expect("k"), None);
        assert!(!c.has_key(&bare));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
