//! `<agentDir>/models.json` merged over the built-ins (Prime Agent's format).

use std::path::Path;

use serde_json::Value;

use super::{Compat, ModelDef, ProviderDef};
use crate::config::thinking::Thinking;

/// All known providers: built-ins with models.json merged over them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Registry {
    pub providers: Vec<ProviderDef>,
    /// Values of known models.json keys that were ignored, each naming its key (logged).
    pub warnings: Vec<String>,
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
                for w in &registry.warnings {
                    log::warn!("{}: {w}", path.display());
                }
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
                    auth_header: false,
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
            let mut w = Vec::new();
            match entry.get("authHeader") {
                None | Some(Value::Null) => {}
                Some(Value::Bool(b)) => p.auth_header = *b,
                Some(_) => w.push(format!(
                    "Ignoring providers.{name}.authHeader: expected true or false"
                )),
            }
            p.compat = p.compat.merge(entry.get("compat"));
            apply_overrides(p, entry.get("modelOverrides"), &mut w);
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
                let key = format!("providers.{name}.models.{id}");
                let model = parse_model(id, m, base.as_ref(), p.compat, &key, &mut w);
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
            self.warnings.extend(w);
        }
        Ok(())
    }
}

/// `modelOverrides` (`{"<id>": {...}}`): each merged over the provider's model of that id (a
/// built-in one: this runs before the entry's `models`); an unknown id is a warning.
fn apply_overrides(p: &mut ProviderDef, overrides: Option<&Value>, w: &mut Vec<String>) {
    let name = p.name.clone();
    let overrides = match overrides {
        None | Some(Value::Null) => return,
        Some(Value::Object(o)) => o,
        Some(_) => {
            w.push(format!(
                "Ignoring providers.{name}.modelOverrides: expected an object of models by id"
            ));
            return;
        }
    };
    for (id, o) in overrides {
        let key = format!("providers.{name}.modelOverrides.{id}");
        let Some(slot) = p.models.iter_mut().find(|m| m.id == *id) else {
            w.push(format!("Ignoring {key}: {name} has no model {id}"));
            continue;
        };
        if !o.is_object() {
            w.push(format!("Ignoring {key}: expected an object"));
            continue;
        }
        // A partial `cost` keeps the prices it does not name.
        let mut o = o.clone();
        if let (Some(cost), Some(old)) =
            (o.get_mut("cost").and_then(Value::as_object_mut), slot.cost)
        {
            for (k, v) in [
                ("input", old.input),
                ("output", old.output),
                ("cacheRead", old.cache_read),
                ("cacheWrite", old.cache_write),
            ] {
                cost.entry(k).or_insert(v.into());
            }
        }
        let mut merged = parse_model(id, &o, Some(slot), slot.compat, &key, w);
        // An override's map adds to the model's own (upstream merges them key by key).
        let mut map = slot.level_map.clone();
        for (level, v) in merged.level_map {
            map.retain(|(l, _)| *l != level);
            map.push((level, v));
        }
        merged.level_map = map;
        *slot = merged;
    }
}

/// `thinkingLevelMap` of a model entry: `{level: string | null}`; a bad key or value is a
/// warning naming it.
fn level_map(m: &Value, key: &str, w: &mut Vec<String>) -> Option<Vec<(Thinking, Option<String>)>> {
    let map = match m.get("thinkingLevelMap")? {
        Value::Object(map) => map,
        Value::Null => return None,
        _ => {
            w.push(format!(
                "Ignoring {key}.thinkingLevelMap: expected an object of levels"
            ));
            return None;
        }
    };
    let mut out = Vec::new();
    for (level, v) in map {
        let Some(t) = Thinking::parse(level) else {
            w.push(format!(
                "Ignoring {key}.thinkingLevelMap.{level}: not a thinking level ({})",
                Thinking::NAMES
            ));
            continue;
        };
        match v {
            Value::Null => out.push((t, None)),
            Value::String(s) if !s.trim().is_empty() => out.push((t, Some(s.trim().to_owned()))),
            _ => w.push(format!(
                "Ignoring {key}.thinkingLevelMap.{level}: expected a string or null"
            )),
        }
    }
    Some(out)
}

/// `modelOverrides.<id>.headers` / a model's `headers`: string values only.
fn model_headers(m: &Value, key: &str, w: &mut Vec<String>) -> Option<Vec<(String, String)>> {
    let headers = match m.get("headers")? {
        Value::Object(h) => h,
        _ => {
            w.push(format!(
                "Ignoring {key}.headers: expected an object of strings"
            ));
            return None;
        }
    };
    let mut out = Vec::new();
    for (k, v) in headers {
        match v.as_str() {
            Some(v) => out.push((k.clone(), v.to_owned())),
            None => w.push(format!("Ignoring {key}.headers.{k}: expected a string")),
        }
    }
    Some(out)
}

fn parse_model(
    id: &str,
    m: &Value,
    base: Option<&ModelDef>,
    compat: Compat,
    key: &str,
    w: &mut Vec<String>,
) -> ModelDef {
    let u = |k: &str| m.get(k).and_then(Value::as_u64);
    ModelDef {
        level_map: level_map(m, key, w)
            .or_else(|| base.map(|b| b.level_map.clone()))
            .unwrap_or_default(),
        headers: model_headers(m, key, w)
            .or_else(|| base.map(|b| b.headers.clone()))
            .unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    fn merged(v: Value) -> Registry {
        let mut r = Registry::builtin();
        r.merge_models_json(&v).unwrap();
        r
    }

    #[test]
    fn auth_header_level_maps_and_overrides() {
        let r = merged(json!({"providers": {
            "mine": {"baseUrl": "http://x/v1", "authHeader": true, "models": [
                {"id": "m", "reasoning": true, "thinkingLevelMap": {"low": null, "high": "max"}}]},
            "openai": {"modelOverrides": {"gpt-4.1": {"name": "Routed", "maxTokens": 9,
                "headers": {"X-Route": "r1"}, "thinkingLevelMap": {"off": null}}}}
        }}));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let mine = r.find("mine").unwrap();
        assert!(mine.auth_header);
        assert_eq!(
            mine.models[0].level_map,
            // (in key order: JSON objects are read sorted)
            [
                (Thinking::High, Some("max".to_owned())),
                (Thinking::Low, None)
            ]
        );
        let gpt = r
            .find("openai")
            .unwrap()
            .models
            .iter()
            .find(|m| m.id == "gpt-4.1")
            .unwrap();
        assert_eq!((gpt.name.as_str(), gpt.max_tokens), ("Routed", 9));
        // What the override does not name stays the built-in's.
        assert_eq!(gpt.context_window, 1_047_576);
        assert_eq!(gpt.headers, [("X-Route".to_owned(), "r1".to_owned())]);
        assert_eq!(gpt.level_map, [(Thinking::Off, None)]);
    }

    #[test]
    fn a_partial_cost_override_keeps_the_other_prices() {
        let mut r = merged(
            json!({"providers": {"mine": {"baseUrl": "http://x", "models": [
            {"id": "m", "cost": {"input": 1.0, "output": 2.0, "cacheRead": 0.5}}]}}}),
        );
        r.merge_models_json(
            &json!({"providers": {"mine": {"modelOverrides": {"m": {"cost": {"output": 8.0}}}}}}),
        )
        .unwrap();
        let cost = r.find("mine").unwrap().models[0].cost.unwrap();
        assert_eq!((cost.input, cost.output, cost.cache_read), (1.0, 8.0, 0.5));
    }

    #[test]
    fn bad_values_are_warnings_naming_the_key() {
        let r = merged(json!({"providers": {
            "mine": {"baseUrl": "http://x", "authHeader": "yes", "models": [
                {"id": "m", "thinkingLevelMap": {"huge": "x", "low": 3}, "headers": {"A": 1}}],
                "modelOverrides": {"nope": {}}},
            "openai": {"modelOverrides": ["x"]}
        }}));
        assert_eq!(
            r.warnings,
            [
                "Ignoring providers.mine.authHeader: expected true or false",
                "Ignoring providers.mine.modelOverrides.nope: mine has no model nope",
                "Ignoring providers.mine.models.m.thinkingLevelMap.huge: not a thinking level (off, minimal, low, medium, high, xhigh, max)",
                "Ignoring providers.mine.models.m.thinkingLevelMap.low: expected a string or null",
                "Ignoring providers.mine.models.m.headers.A: expected a string",
                "Ignoring providers.openai.modelOverrides: expected an object of models by id",
            ]
        );
    }

    #[test]
    fn clamping_follows_the_map() {
        let model = |map: Vec<(Thinking, Option<String>)>| ModelDef {
            level_map: map,
            ..ModelDef::listed("m", true, 1000, 100, false, Compat::default())
        };
        use Thinking::*;
        let only_high_max = model(vec![
            (Minimal, None),
            (Low, None),
            (Medium, None),
            (High, Some("high".into())),
            (XHigh, Some("max".into())),
        ]);
        // (map, asked, runs at)
        let no_off = model(vec![(Off, None)]);
        let cases = [
            (&only_high_max, Off, Off),
            (&only_high_max, Low, High),
            (&only_high_max, XHigh, XHigh),
            (&only_high_max, Max, XHigh),
            (&no_off, Off, Minimal),
            (&no_off, XHigh, High),
            (&no_off, Medium, Medium),
        ];
        for (m, asked, want) in cases {
            assert_eq!(m.clamp(asked), want, "{asked:?} {:?}", m.level_map);
        }
        // No map: the level as asked.
        assert_eq!(model(Vec::new()).clamp(Max), Max);
        assert_eq!(only_high_max.mapped_level(XHigh), Some("max"));
        assert_eq!(only_high_max.mapped_level(Medium), None);
    }
}
