//! The built-in providers and their models (the catalogue), and the types that describe a
//! provider, a model and its wire-API quirks.

use serde_json::Value;

use super::Registry;
use crate::config::thinking::Thinking;

/// The wire APIs this build speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    OpenAiCompletions,
    /// OpenAI's Responses API (`POST /responses`).
    OpenAiResponses,
    AnthropicMessages,
    /// Gemini (`POST /models/{id}:streamGenerateContent`).
    Google,
    /// The Responses API on an Azure OpenAI resource.
    AzureOpenAiResponses,
    /// Gemini (and Claude) on Google Vertex AI, with Google credentials (`provider/vertex.rs`).
    GoogleVertex,
    /// Amazon Bedrock's Converse stream (`POST /model/{id}/converse-stream`), SigV4-signed.
    BedrockConverseStream,
}

impl Api {
    /// The names `models.json` accepts, for the error that lists them.
    pub(crate) const NAMES: &'static str =
        "openai-completions, openai-responses, anthropic-messages, google-generative-ai, azure-openai-responses, google-vertex, bedrock-converse-stream";

    pub(crate) fn parse(name: &str) -> Option<Api> {
        match name {
            "openai-completions" => Some(Api::OpenAiCompletions),
            "openai-responses" => Some(Api::OpenAiResponses),
            "anthropic-messages" => Some(Api::AnthropicMessages),
            "google-generative-ai" => Some(Api::Google),
            "azure-openai-responses" => Some(Api::AzureOpenAiResponses),
            "google-vertex" => Some(Api::GoogleVertex),
            "bedrock-converse-stream" => Some(Api::BedrockConverseStream),
            _ => None,
        }
    }
}

/// Per-model quirks of OpenAI-compatible servers (`compat` in models.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compat {
    /// Send `max_tokens` instead of `max_completion_tokens`.
    pub max_tokens_field: bool,
    pub supports_developer_role: bool,
    pub supports_reasoning_effort: bool,
    pub supports_store: bool,
    /// Assistant messages carry their reasoning back as `reasoning_content` (DeepSeek's
    /// thinking mode refuses a tool-call turn without it).
    pub reasoning_content_on_assistant: bool,
}

impl Default for Compat {
    fn default() -> Compat {
        Compat {
            max_tokens_field: false,
            supports_developer_role: false,
            supports_reasoning_effort: true,
            supports_store: false,
            reasoning_content_on_assistant: false,
        }
    }
}

impl Compat {
    /// Applies a models.json `compat` object over `self`.
    pub(super) fn merge(mut self, v: Option<&Value>) -> Compat {
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
        if let Some(b) = flag("requiresReasoningContentOnAssistantMessages") {
            self.reasoning_content_on_assistant = b;
        }
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModelDef {
    pub id: String,
    pub name: String,
    pub reasoning: bool,
    pub input: Vec<String>,
    pub context_window: u64,
    pub max_tokens: u64,
    pub compat: Compat,
    /// Prices per million tokens, when known (models.json `cost`).
    pub cost: Option<crate::provider::Prices>,
    /// The model's own wire API (models.json model `api`), when it is not its provider's.
    pub api: Option<String>,
    /// models.json `thinkingLevelMap`: per level, the value sent for it (`Some`) or that the
    /// model does not take it (`None`, clamped away). Empty: the API's own mapping.
    pub level_map: Vec<(Thinking, Option<String>)>,
    /// `modelOverrides.<id>.headers` (config values), over the provider's.
    pub headers: Vec<(String, String)>,
}

impl ModelDef {
    /// A model as the catalogue lists it: its id for a name, text (and images when `images`)
    /// in, no prices, and its provider's wire API.
    pub(crate) fn listed(
        id: &str,
        reasoning: bool,
        context_window: u64,
        max_tokens: u64,
        images: bool,
        compat: Compat,
    ) -> ModelDef {
        ModelDef {
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
            compat,
            cost: None,
            api: None,
            level_map: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// The level a call at `t` runs at: `t` unless `thinkingLevelMap` marks it unsupported,
    /// then the nearest supported one above it, else below (upstream's clamp: `xhigh` and
    /// `max` count as supported only when the map names them). No map: `t`.
    pub(crate) fn clamp(&self, t: Thinking) -> Thinking {
        if self.level_map.is_empty() || !self.reasoning {
            return t;
        }
        let supported = |l: Thinking| match self.level_map.iter().find(|(k, _)| *k == l) {
            Some((_, v)) => v.is_some(),
            None => !matches!(l, Thinking::XHigh | Thinking::Max),
        };
        let i = Thinking::ALL.iter().position(|l| *l == t).unwrap_or(0);
        let above = Thinking::ALL[i..].iter().copied().find(|l| supported(*l));
        above
            .or_else(|| {
                Thinking::ALL[..i]
                    .iter()
                    .rev()
                    .copied()
                    .find(|l| supported(*l))
            })
            .unwrap_or(Thinking::Off)
    }

    /// The value `thinkingLevelMap` sends for level `t`, if it names one.
    pub(crate) fn mapped_level(&self, t: Thinking) -> Option<&str> {
        self.level_map
            .iter()
            .find(|(k, _)| *k == t)
            .and_then(|(_, v)| v.as_deref())
    }

    /// The wire API this model is called with: its own, else its provider's.
    pub(crate) fn api_name<'a>(&'a self, provider: &'a ProviderDef) -> &'a str {
        self.api.as_deref().unwrap_or(&provider.api)
    }

    pub(crate) fn supports_images(&self) -> bool {
        self.input.iter().any(|i| i == "image")
    }

    /// The output budget of one request: `min(maxTokens, 32000)` as upstream does; `None`
    /// when the model's limit is unknown (`max_tokens` 0) and the server should decide.
    pub(crate) fn output_budget(&self) -> Option<u64> {
        (self.max_tokens > 0).then(|| self.max_tokens.min(32_000))
    }

    /// What we assume for a model id we do not know on a server we do not know (a llama.cpp
    /// or vLLM behind `--base-url`, a models.json provider that does not list it). Nothing that
    /// only OpenAI's own API accepts: role `system`, no `store`, text-only input, no output
    /// limit (the server caps output at what its window leaves; a guess could exceed a small
    /// window and be refused), and `reasoning_effort` only when `reasoning` (the user asked
    /// for a thinking level). `context_window` 0: ask the server at the first call.
    pub(crate) fn assumed(id: &str, reasoning: bool, compat: Compat) -> ModelDef {
        let compat = Compat {
            supports_developer_role: false,
            supports_store: false,
            ..compat
        };
        ModelDef::listed(id, reasoning, 0, 0, false, compat)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProviderDef {
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
    /// models.json `authHeader`: the key also goes as `Authorization: Bearer <key>`.
    pub auth_header: bool,
}

const OPENAI_COMPAT: Compat = Compat {
    max_tokens_field: false,
    supports_developer_role: false,
    supports_reasoning_effort: true,
    supports_store: false,
    reasoning_content_on_assistant: false,
};
const MAX_TOKENS_NO_EFFORT: Compat = Compat {
    max_tokens_field: true,
    supports_developer_role: false,
    supports_reasoning_effort: false,
    supports_store: false,
    reasoning_content_on_assistant: false,
};
/// OpenAI's own servers (and Azure's): the developer role and `store` as well.
const OPENAI_OWN: Compat = Compat {
    supports_developer_role: true,
    supports_store: true,
    ..OPENAI_COMPAT
};
/// DeepSeek's thinking mode wants its reasoning back on assistant messages.
const DEEPSEEK: Compat = Compat {
    reasoning_content_on_assistant: true,
    ..MAX_TOKENS_NO_EFFORT
};
const NO_EFFORT: Compat = Compat {
    supports_reasoning_effort: false,
    ..OPENAI_COMPAT
};

/// Built-in models called through the Responses API rather than their provider's Chat
/// Completions: OpenAI's reasoning models, whose reasoning survives from one tool call to the
/// next only there (as encrypted reasoning items), and which stream reasoning summaries only
/// there. A custom id on the `openai` provider copies its default model, so OpenAI's newer
/// models (the Responses-only coding models among them) take this API too.
const RESPONSES_MODELS: &[(&str, &str)] = &[("openai", "gpt-5.4"), ("openai", "gpt-5-mini")];

/// Built-in providers in auto-selection preference order (§6.2/§6.3/§6.4):
/// `(name, base URL, API, key variable, quirks)`.
/// - mistral: its OpenAI-compatible endpoint lives under /v1.
/// - fireworks, vercel-ai-gateway, minimax, kimi-coding: their Anthropic-compatible endpoints
///   (`POST {base}/v1/messages`).
/// - google-vertex: `{location}` is filled in from GOOGLE_CLOUD_LOCATION at request time;
///   its key variable is for express mode, OAuth credentials are found apart (vertex.rs).
/// - azure-openai-responses: no base URL of its own; the resource comes from
///   AZURE_OPENAI_BASE_URL or AZURE_OPENAI_RESOURCE_NAME at request time
///   (provider/azure.rs), or --base-url.
/// - amazon-bedrock: no key variable of its own beyond the bearer token; AWS credentials,
///   region and endpoint come from the AWS variables and files at request time
///   (provider/bedrock/aws_config.rs), or --base-url for the endpoint.
#[rustfmt::skip]
const PROVIDERS: &[(&str, &str, &str, &str, Compat)] = &[
    ("prime-inference", "https://api.pinference.ai/api/v1", "openai-completions", "PRIME_API_KEY", MAX_TOKENS_NO_EFFORT),
    ("anthropic", "https://api.anthropic.com", "anthropic-messages", "ANTHROPIC_API_KEY", OPENAI_COMPAT),
    ("openai", "https://api.openai.com/v1", "openai-completions", "OPENAI_API_KEY", OPENAI_OWN),
    ("google", "https://generativelanguage.googleapis.com/v1beta", "google-generative-ai", "GEMINI_API_KEY", OPENAI_COMPAT),
    ("google-vertex", "https://{location}-aiplatform.googleapis.com", "google-vertex", "GOOGLE_CLOUD_API_KEY", OPENAI_COMPAT),
    ("openrouter", "https://openrouter.ai/api/v1", "openai-completions", "OPENROUTER_API_KEY", OPENAI_COMPAT),
    ("deepseek", "https://api.deepseek.com", "openai-completions", "DEEPSEEK_API_KEY", DEEPSEEK),
    ("xai", "https://api.x.ai/v1", "openai-completions", "XAI_API_KEY", NO_EFFORT),
    ("groq", "https://api.groq.com/openai/v1", "openai-completions", "GROQ_API_KEY", OPENAI_COMPAT),
    ("zai", "https://api.z.ai/api/coding/paas/v4", "openai-completions", "ZAI_API_KEY", MAX_TOKENS_NO_EFFORT),
    ("mistral", "https://api.mistral.ai/v1", "openai-completions", "MISTRAL_API_KEY", MAX_TOKENS_NO_EFFORT),
    ("cerebras", "https://api.cerebras.ai/v1", "openai-completions", "CEREBRAS_API_KEY", OPENAI_COMPAT),
    ("moonshotai", "https://api.moonshot.ai/v1", "openai-completions", "MOONSHOT_API_KEY", MAX_TOKENS_NO_EFFORT),
    ("huggingface", "https://router.huggingface.co/v1", "openai-completions", "HF_TOKEN", MAX_TOKENS_NO_EFFORT),
    ("fireworks", "https://api.fireworks.ai/inference", "anthropic-messages", "FIREWORKS_API_KEY", OPENAI_COMPAT),
    ("azure-openai-responses", "", "azure-openai-responses", "AZURE_OPENAI_API_KEY", OPENAI_OWN),
    ("vercel-ai-gateway", "https://ai-gateway.vercel.sh", "anthropic-messages", "AI_GATEWAY_API_KEY", OPENAI_COMPAT),
    ("minimax", "https://api.minimax.io/anthropic", "anthropic-messages", "MINIMAX_API_KEY", OPENAI_COMPAT),
    ("kimi-coding", "https://api.kimi.com/coding", "anthropic-messages", "KIMI_API_KEY", OPENAI_COMPAT),
    ("amazon-bedrock", "", "bedrock-converse-stream", "AWS_BEARER_TOKEN_BEDROCK", OPENAI_COMPAT),
];

/// The built-in providers' models, `(provider, id, reasoning, context window, max tokens,
/// images)`; a provider's first is its default.
#[rustfmt::skip]
const MODELS: &[(&str, &str, bool, u64, u64, bool)] = &[
    ("prime-inference", "z-ai/glm-5.2", true, 200_000, 32_000, false),
    ("anthropic", "claude-opus-4-7", true, 200_000, 32_000, true),
    ("anthropic", "claude-sonnet-4-5", true, 200_000, 64_000, true),
    ("anthropic", "claude-haiku-4-5", true, 200_000, 64_000, true),
    ("openai", "gpt-5.4", true, 400_000, 128_000, true),
    ("openai", "gpt-5-mini", true, 400_000, 128_000, true),
    ("openai", "gpt-4.1", false, 1_047_576, 32_768, true),
    ("google", "gemini-3.1-pro-preview", true, 1_048_576, 65_536, true),
    ("google", "gemini-3-flash-preview", true, 1_048_576, 65_536, true),
    ("google", "gemini-2.5-pro", true, 1_048_576, 65_536, true),
    ("google", "gemini-2.5-flash", true, 1_048_576, 65_536, true),
    ("google", "gemini-2.5-flash-lite", true, 1_048_576, 65_536, true),
    ("google-vertex", "gemini-3.1-pro-preview", true, 1_048_576, 65_536, true),
    ("google-vertex", "gemini-3-pro-preview", true, 1_000_000, 64_000, true),
    ("google-vertex", "gemini-3-flash-preview", true, 1_048_576, 65_536, true),
    ("google-vertex", "gemini-2.5-pro", true, 1_048_576, 65_536, true),
    ("google-vertex", "gemini-2.5-flash", true, 1_048_576, 65_536, true),
    ("google-vertex", "gemini-2.5-flash-lite", true, 1_048_576, 65_536, true),
    ("google-vertex", "gemini-2.0-flash", false, 1_048_576, 8_192, true),
    ("openrouter", "moonshotai/kimi-k2.6", true, 262_144, 32_000, true),
    ("deepseek", "deepseek-v4-pro", true, 128_000, 32_000, false),
    ("xai", "grok-4.20-0309-reasoning", true, 256_000, 32_000, true),
    ("groq", "openai/gpt-oss-120b", true, 131_072, 32_000, false),
    ("zai", "glm-5.1", true, 200_000, 32_000, false),
    ("mistral", "devstral-medium-latest", false, 128_000, 32_000, false),
    ("cerebras", "gpt-oss-120b", true, 131_072, 32_000, false),
    ("moonshotai", "kimi-k2.6", true, 262_144, 32_000, true),
    ("huggingface", "openai/gpt-oss-120b", true, 131_072, 32_000, false),
    ("fireworks", "accounts/fireworks/models/kimi-k2p6", true, 262_144, 32_000, false),
    ("azure-openai-responses", "gpt-5.4", true, 400_000, 128_000, true),
    ("azure-openai-responses", "gpt-5-mini", true, 400_000, 128_000, true),
    ("azure-openai-responses", "gpt-4.1", false, 1_047_576, 32_768, true),
    ("vercel-ai-gateway", "anthropic/claude-opus-4.7", true, 200_000, 32_000, true),
    ("vercel-ai-gateway", "moonshotai/kimi-k2.6", true, 262_144, 32_000, true),
    ("minimax", "MiniMax-M2.7", true, 204_800, 131_072, false),
    ("minimax", "MiniMax-M2.7-highspeed", true, 204_800, 131_072, false),
    ("kimi-coding", "kimi-for-coding", true, 262_144, 32_768, true),
    ("kimi-coding", "k3", true, 1_048_576, 131_072, true),
    // Upstream's Bedrock Claude rows (its default first): the US, EU and global cross-region
    // inference profiles of the current Claude models.
    ("amazon-bedrock", "us.anthropic.claude-opus-4-6-v1", true, 1_000_000, 128_000, true),
    ("amazon-bedrock", "us.anthropic.claude-opus-4-7", true, 1_000_000, 128_000, true),
    ("amazon-bedrock", "us.anthropic.claude-sonnet-4-6", true, 1_000_000, 64_000, true),
    ("amazon-bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", true, 200_000, 64_000, true),
    ("amazon-bedrock", "us.anthropic.claude-haiku-4-5-20251001-v1:0", true, 200_000, 64_000, true),
    ("amazon-bedrock", "eu.anthropic.claude-opus-4-6-v1", true, 1_000_000, 128_000, true),
    ("amazon-bedrock", "eu.anthropic.claude-opus-4-7", true, 1_000_000, 128_000, true),
    ("amazon-bedrock", "eu.anthropic.claude-sonnet-4-6", true, 1_000_000, 64_000, true),
    ("amazon-bedrock", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0", true, 200_000, 64_000, true),
    ("amazon-bedrock", "eu.anthropic.claude-haiku-4-5-20251001-v1:0", true, 200_000, 64_000, true),
    ("amazon-bedrock", "global.anthropic.claude-opus-4-6-v1", true, 1_000_000, 128_000, true),
    ("amazon-bedrock", "global.anthropic.claude-opus-4-7", true, 1_000_000, 128_000, true),
    ("amazon-bedrock", "global.anthropic.claude-sonnet-4-6", true, 1_000_000, 64_000, true),
    ("amazon-bedrock", "global.anthropic.claude-sonnet-4-5-20250929-v1:0", true, 200_000, 64_000, true),
    ("amazon-bedrock", "global.anthropic.claude-haiku-4-5-20251001-v1:0", true, 200_000, 64_000, true),
];

/// Headers a built-in provider's server wants from every client (config values),
/// `(provider, name, value)`: Kimi's coding plan wants its CLI's user agent.
const HEADERS: &[(&str, &str, &str)] = &[("kimi-coding", "User-Agent", "KimiCLI/1.5")];

impl Registry {
    pub(crate) fn builtin() -> Registry {
        let providers = PROVIDERS
            .iter()
            .map(|&(name, base_url, api, env, compat)| {
                let models: Vec<ModelDef> = MODELS
                    .iter()
                    .filter(|m| m.0 == name)
                    .map(|&(_, id, reasoning, window, max_tokens, images)| ModelDef {
                        api: RESPONSES_MODELS
                            .contains(&(name, id))
                            .then(|| "openai-responses".to_owned()),
                        ..ModelDef::listed(id, reasoning, window, max_tokens, images, compat)
                    })
                    .collect();
                ProviderDef {
                    name: name.to_owned(),
                    base_url: base_url.to_owned(),
                    api: api.to_owned(),
                    env_keys: vec![env.to_owned()],
                    api_key: None,
                    headers: HEADERS
                        .iter()
                        .filter(|h| h.0 == name)
                        .map(|&(_, n, v)| (n.to_owned(), v.to_owned()))
                        .collect(),
                    compat,
                    default_model: models.first().map(|m| m.id.clone()),
                    models,
                    custom: false,
                    auth_header: false,
                }
            })
            .collect();
        Registry {
            providers,
            warnings: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables are joined by provider name: a misspelt one would drop its rows silently.
    #[test]
    fn every_model_and_header_row_names_a_provider_and_every_provider_has_a_model() {
        let named = |p: &str| PROVIDERS.iter().any(|row| row.0 == p);
        for (provider, id, ..) in MODELS {
            assert!(named(provider), "{provider}/{id}");
        }
        let headers = HEADERS.iter().map(|h| h.0);
        for provider in headers.chain(RESPONSES_MODELS.iter().map(|r| r.0)) {
            assert!(named(provider), "{provider}");
        }
        for (name, ..) in PROVIDERS {
            assert!(MODELS.iter().any(|m| m.0 == *name), "{name} has no model");
        }
    }
}
