//! Model resolution from `--provider` / `--model` (§6.2).

use super::{Api, ModelDef, ProviderDef, Registry};

/// The provider and model a run uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Selection {
    pub provider: ProviderDef,
    pub model: ModelDef,
    pub api: Api,
    /// The model is not in the catalogue and the server is the user's own: `model` holds
    /// `ModelDef::assumed` defaults, and the client is told so.
    pub assumed_defaults: bool,
}

/// The spec's texts (behaviour spec §1.1); `prime-agent model list` shows what there is.
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
            cost: None,
            api: None,
        },
    }
}

/// The wire API `m` of `p` is called with, if this build speaks it.
pub(crate) fn api_of(p: &ProviderDef, m: &ModelDef) -> Result<Api, String> {
    let name = m.api_name(p);
    Api::parse(name).ok_or_else(|| {
        format!(
            "Provider \"{}\" uses API \"{name}\", which this build does not support (supported: {}).",
            p.name,
            Api::NAMES
        )
    })
}

/// Resolves `--provider` / `--model` (§6.2). `has_key` tells auto-selection which providers
/// are usable.
pub(crate) fn select(
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
    let api = api_of(p, &m)?;
    Ok(Selection {
        provider: p.clone(),
        model: m,
        api,
        assumed_defaults: false,
    })
}
