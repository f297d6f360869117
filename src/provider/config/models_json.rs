//! `<agentDir>/models.json` merged over the built-ins (Prime Agent's format).

use std::path::Path;

use serde_json::Value;

use super::{Compat, ModelDef, ProviderDef};

/// All known providers: built-ins with models.json merged over them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Registry {
    pub providers: Vec<ProviderDef>,
}

impl Registry {
    /// Built-ins plus `<agent_dir>/models.json` when it exists.
    pub(crate) fn load(agent_dir: &Path) -> Result<Registry, String> {
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

    pub(crate) fn find(&self, name: &str) -> Option<&ProviderDef> {
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
    pub(crate) fn merge_models_json(&mut self, json: &Value) -> Result<(), String> {
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
                // The user names the API the server speaks: it wins over the built-in
                // models' own (a models.json model may still set one).
                for m in &mut p.models {
                    m.api = None;
                }
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
        cost: m
            .get("cost")
            .and_then(crate::provider::Prices::from_json)
            .or_else(|| base.and_then(|b| b.cost)),
        api: m
            .get("api")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| base.and_then(|b| b.api.clone())),
    }
}
