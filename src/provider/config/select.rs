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
            level_map: Vec::new(),
            headers: Vec::new(),
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

/// `*` and `?` wildcards, case-insensitive.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((c, rest)) => text
            .split_first()
            .is_some_and(|(t, tail)| (*c == b'?' || c.eq_ignore_ascii_case(t)) && glob(rest, tail)),
    }
}

/// The models a pattern names (§6.2), best first: a glob (`*`, `?`) against `provider/id`
/// and `id`; `provider/rest` within that provider (case-insensitive); else an exact id
/// (case-insensitive), else every model whose id or name contains the pattern.
pub(crate) fn matches<'r>(
    registry: &'r Registry,
    pattern: &str,
) -> Vec<(&'r ProviderDef, &'r ModelDef)> {
    let all = || {
        registry
            .providers
            .iter()
            .flat_map(|p| p.models.iter().map(move |m| (p, m)))
    };
    let lower = pattern.to_ascii_lowercase();
    if pattern.contains(['*', '?']) {
        return all()
            .filter(|(p, m)| {
                glob(lower.as_bytes(), format!("{}/{}", p.name, m.id).as_bytes())
                    || glob(lower.as_bytes(), m.id.as_bytes())
            })
            .collect();
    }
    if let Some((prefix, rest)) = pattern.split_once('/') {
        if let Some(p) = registry.find(prefix) {
            let exact: Vec<_> = p
                .models
                .iter()
                .filter(|m| m.id.eq_ignore_ascii_case(rest))
                .map(|m| (p, m))
                .collect();
            if !exact.is_empty() {
                return exact;
            }
            let rest = rest.to_ascii_lowercase();
            return p
                .models
                .iter()
                .filter(|m| m.id.to_ascii_lowercase().contains(&rest))
                .map(|m| (p, m))
                .collect();
        }
    }
    let exact: Vec<_> = all()
        .filter(|(_, m)| m.id.eq_ignore_ascii_case(pattern))
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    all()
        .filter(|(_, m)| {
            m.id.to_ascii_lowercase().contains(&lower)
                || m.name.to_ascii_lowercase().contains(&lower)
        })
        .collect()
}

/// `--models a,b` / settings `enabledModels`: each pattern's models (a pattern may end in
/// `:<level>`), in pattern order without repeats, with each pattern's level. A pattern that
/// names nothing is a warning: the spec's text for an unknown id of a known provider, else
/// ours.
pub(crate) fn scope(
    registry: &Registry,
    patterns: &[String],
    warn: &mut dyn FnMut(String),
) -> Vec<(String, String, Option<crate::provider::Thinking>)> {
    let mut out: Vec<(String, String, Option<crate::provider::Thinking>)> = Vec::new();
    for raw in patterns {
        let (pattern, level) = split_level(raw);
        let hits = matches(registry, pattern);
        if hits.is_empty() {
            match pattern
                .split_once('/')
                .and_then(|(p, id)| registry.find(p).map(|p| (p, id)))
            {
                Some((p, id)) => warn(format!(
                    "Model \"{id}\" not found for provider \"{}\". Using custom model id.",
                    p.name
                )),
                None => warn(format!("No models match pattern \"{pattern}\"")),
            }
            continue;
        }
        for (p, m) in hits {
            if !out.iter().any(|(op, om, _)| *op == p.name && *om == m.id) {
                out.push((p.name.clone(), m.id.clone(), level));
            }
        }
    }
    out
}

/// `id:<level>` → (`id`, level), when the suffix is a thinking level; anything else (a
/// model id with a colon, `qwen3:8b`) is left whole.
pub(crate) fn split_level(model: &str) -> (&str, Option<crate::provider::Thinking>) {
    match model.rsplit_once(':') {
        Some((id, level)) if !id.is_empty() => match crate::provider::Thinking::parse(level) {
            Some(t) => (id, Some(t)),
            None => (model, None),
        },
        _ => (model, None),
    }
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
                let fuzzy;
                let hits = if hits.is_empty() {
                    // No exact id: a pattern (`sonnet`, `gpt-5*`), the best match first.
                    fuzzy = matches(registry, id);
                    &fuzzy
                } else {
                    &hits
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Thinking;

    #[test]
    fn levels_and_patterns() {
        assert_eq!(
            split_level("openai/gpt-5.4:high"),
            ("openai/gpt-5.4", Some(Thinking::High))
        );
        assert_eq!(split_level("qwen3:8b"), ("qwen3:8b", None));
        assert_eq!(split_level(":high"), (":high", None));
        assert!(glob(b"gpt-5*", b"GPT-5.4"));
        assert!(glob(b"a?c", b"abc") && !glob(b"a?c", b"ac"));
        let registry = Registry::builtin();
        let ids = |pattern: &str| -> Vec<String> {
            matches(&registry, pattern)
                .iter()
                .map(|(p, m)| format!("{}/{}", p.name, m.id))
                .collect()
        };
        assert_eq!(ids("OpenAI/GPT-5.4"), vec!["openai/gpt-5.4"]);
        // A glob names `provider/id` or the id alone (gateways' ids such as
        // `vercel-ai-gateway/anthropic/…` match too).
        assert!(ids("anthropic/*")
            .iter()
            .all(|v| v.starts_with("anthropic/") || v.contains("/anthropic/")));
        assert!(!ids("anthropic/*").is_empty());
        assert!(ids("opus").iter().all(|v| v.contains("opus")));
        assert!(ids("no-such-model-anywhere").is_empty());
        // A bare --model pattern without an exact id: the best match.
        let picked = select(&registry, None, Some("OPUS"), &|_| false).expect("a match");
        assert!(picked.model.id.contains("opus"), "{}", picked.model.id);
        assert!(select(&registry, None, Some("no-such-model-anywhere"), &|_| false).is_err());
        let mut warnings = Vec::new();
        let scoped = scope(
            &registry,
            &[
                "openai/gpt-5.4:low".into(),
                "openai/nope".into(),
                "zzz".into(),
                "openai/gpt-5.4".into(),
            ],
            &mut |w| warnings.push(w),
        );
        assert_eq!(
            scoped,
            vec![("openai".into(), "gpt-5.4".into(), Some(Thinking::Low))]
        );
        assert_eq!(
            warnings,
            vec![
                "Model \"nope\" not found for provider \"openai\". Using custom model id."
                    .to_owned(),
                "No models match pattern \"zzz\"".to_owned(),
            ]
        );
    }
}
