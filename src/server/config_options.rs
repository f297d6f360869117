//! ACP session config options (`configOptions`): the `model` select and, for a reasoning
//! model, the `thought_level` select, built from plain data; and the validation of
//! `session/set_config_option` / `session/set_model`. Pure: no IO, no provider calls.

use crate::base::json::json;
use serde_json::Value;

use crate::provider::menu::MenuModel;
use crate::provider::Thinking;

pub(crate) const MODEL: &str = "model";
pub(crate) const THOUGHT_LEVEL: &str = "thought_level";

/// The reasoning levels a reasoning model is offered, lowest first.
const LEVELS: [(Thinking, &str); 7] = [
    (Thinking::Off, "Off"),
    (Thinking::Minimal, "Minimal"),
    (Thinking::Low, "Low"),
    (Thinking::Medium, "Medium"),
    (Thinking::High, "High"),
    (Thinking::XHigh, "Extra high"),
    (Thinking::Max, "Max"),
];

/// The current model as a menu entry, from its provider's `provider/id` label: its menu
/// entry when it has one, else its id as its name.
pub(crate) fn current_model(label: &str, reasoning: bool, menu: &[MenuModel]) -> MenuModel {
    let (provider, id) = label.split_once('/').unwrap_or(("", label));
    menu.iter()
        .find(|m| m.provider == provider && m.id == id)
        .cloned()
        .unwrap_or_else(|| MenuModel {
            provider: provider.to_owned(),
            id: id.to_owned(),
            name: id.to_owned(),
            reasoning,
        })
}

/// The menu with the current model in it (first, when the menu lacks it).
fn with_current(menu: &[MenuModel], current: &MenuModel) -> Vec<MenuModel> {
    let mut all = Vec::with_capacity(menu.len() + 1);
    if !menu.iter().any(|m| m.value() == current.value()) {
        all.push(current.clone());
    }
    all.extend(menu.iter().cloned());
    all
}

/// The complete `configOptions` list: the model select grouped by provider (in menu order),
/// then the reasoning level when the current model reasons.
pub(crate) fn options(menu: &[MenuModel], current: &MenuModel, thinking: Thinking) -> Value {
    let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
    for m in with_current(menu, current) {
        let option = json!({ "value": m.value(), "name": format!("{} ({})", m.name, m.provider) });
        match groups.iter_mut().find(|(p, _)| *p == m.provider) {
            Some((_, options)) => options.push(option),
            None => groups.push((m.provider.clone(), vec![option])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(provider, options)| json!({ "group": provider, "name": provider, "options": options }))
        .collect();
    let mut list = vec![json!({
        "id": MODEL,
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": current.value(),
        "options": groups,
    })];
    if current.reasoning {
        let levels: Vec<Value> = LEVELS
            .iter()
            .map(|(t, name)| json!({ "value": t.as_str(), "name": name }))
            .collect();
        list.push(json!({
            "id": THOUGHT_LEVEL,
            "name": "Reasoning level",
            "category": "thought_level",
            "type": "select",
            "currentValue": thinking.as_str(),
            "options": levels,
        }));
    }
    Value::Array(list)
}

/// What a valid `session/set_config_option` changes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Choice {
    Model(MenuModel),
    Thinking(Thinking),
}

/// Validates `config_id` = `value` against the options `options` would list; the error is the
/// `-32602` message.
pub(crate) fn choose(
    menu: &[MenuModel],
    current: &MenuModel,
    config_id: &str,
    value: &str,
) -> Result<Choice, String> {
    match config_id {
        MODEL => with_current(menu, current)
            .into_iter()
            .find(|m| m.value() == value)
            .map(Choice::Model)
            .ok_or_else(|| format!("Model is not available: {value}")),
        THOUGHT_LEVEL if current.reasoning => Thinking::parse(value)
            .map(Choice::Thinking)
            .ok_or_else(|| format!("Reasoning level is not available: {value}")),
        other => Err(unknown_option(other)),
    }
}

/// What a continued session (`-c`, `-r`, `--fork`, `session/load`, `session/resume`) does
/// with the model its file last names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Restore {
    /// Run the current model: it is the stored one, the file names none, `--model` chose it
    /// explicitly (the command line wins, as upstream), or this agent cannot switch models.
    Keep,
    /// Switch to the stored model, which is on the menu.
    Switch(MenuModel),
    /// The stored model (`provider/id`) is not one this agent can run: keep the current one
    /// and say so.
    Unknown(String),
}

/// Decides `Restore` for the stored `(provider, id)`. `menu` is `None` for an agent without
/// a model menu (the scripted provider: its script is the only model).
pub(crate) fn restore_model(
    menu: Option<&[MenuModel]>,
    current: &MenuModel,
    stored: Option<(&str, &str)>,
    explicit: bool,
) -> Restore {
    let (Some((provider, id)), Some(menu), false) = (stored, menu, explicit) else {
        return Restore::Keep;
    };
    if current.provider == provider && current.id == id {
        return Restore::Keep;
    }
    match menu.iter().find(|m| m.provider == provider && m.id == id) {
        Some(m) => Restore::Switch(m.clone()),
        None => Restore::Unknown(format!("{provider}/{id}")),
    }
}

/// The reasoning level of a continued session: `--thinking` when given, else the stored one
/// when it is a level, else `current`.
pub(crate) fn restore_thinking(
    stored: Option<&str>,
    explicit: bool,
    current: Thinking,
) -> Thinking {
    match stored.and_then(Thinking::parse) {
        Some(t) if !explicit => t,
        _ => current,
    }
}

/// The warning for `Restore::Unknown` (upstream's words).
pub(crate) fn not_restored(stored: &str, current: &str) -> String {
    format!("Could not restore model {stored}. Using {current}")
}

pub(crate) fn unknown_option(config_id: &str) -> String {
    format!("Unknown ACP config option: {config_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(provider: &str, id: &str, reasoning: bool) -> MenuModel {
        MenuModel {
            provider: provider.to_owned(),
            id: id.to_owned(),
            name: id.to_uppercase(),
            reasoning,
        }
    }

    fn menu() -> Vec<MenuModel> {
        vec![
            model("a", "one", false),
            model("b", "two", true),
            model("a", "three/x", true),
        ]
    }

    #[test]
    fn the_current_model_comes_from_its_label() {
        let m = menu();
        let cases = [
            ("b/two", false, model("b", "two", true)),
            ("a/three/x", false, model("a", "three/x", true)),
            (
                "scripted/s.jsonl",
                false,
                MenuModel {
                    provider: "scripted".into(),
                    id: "s.jsonl".into(),
                    name: "s.jsonl".into(),
                    reasoning: false,
                },
            ),
            (
                "c/new",
                true,
                MenuModel {
                    provider: "c".into(),
                    id: "new".into(),
                    name: "new".into(),
                    reasoning: true,
                },
            ),
        ];
        for (label, reasoning, want) in cases {
            assert_eq!(current_model(label, reasoning, &m), want, "{label}");
        }
    }

    #[test]
    fn options_group_by_provider_and_offer_levels_only_for_reasoning_models() {
        let m = menu();
        // (current, menu, group names in order, option values, thought_level offered)
        let scripted = current_model("scripted/s.jsonl", false, &[]);
        type Case<'a> = (MenuModel, Vec<MenuModel>, Vec<&'a str>, Vec<&'a str>, bool);
        let cases: Vec<Case<'_>> = vec![
            (
                m[0].clone(),
                m.clone(),
                vec!["a", "b"],
                vec!["a/one", "a/three/x", "b/two"],
                false,
            ),
            (
                m[1].clone(),
                m.clone(),
                vec!["a", "b"],
                vec!["a/one", "a/three/x", "b/two"],
                true,
            ),
            // A current model the menu lacks (no key, or scripted) is listed first.
            (
                scripted.clone(),
                m.clone(),
                vec!["scripted", "a", "b"],
                vec!["scripted/s.jsonl", "a/one", "a/three/x", "b/two"],
                false,
            ),
            (
                scripted,
                Vec::new(),
                vec!["scripted"],
                vec!["scripted/s.jsonl"],
                false,
            ),
        ];
        for (current, menu, groups, values, levels) in cases {
            let list = options(&menu, &current, Thinking::High);
            let list = list.as_array().unwrap();
            let select = &list[0];
            assert_eq!(select["id"], "model");
            assert_eq!(select["category"], "model");
            assert_eq!(select["type"], "select");
            assert_eq!(select["currentValue"], current.value());
            assert_eq!(
                crate::base::test_support::strs(&select["options"], "group"),
                groups
            );
            let got_values: Vec<&str> = select["options"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["options"].as_array().unwrap())
                .map(|o| o["value"].as_str().unwrap())
                .collect();
            assert_eq!(got_values, values);
            assert_eq!(list.len() == 2, levels, "{current:?}");
            if levels {
                assert_eq!(list[1]["id"], "thought_level");
                assert_eq!(list[1]["category"], "thought_level");
                assert_eq!(list[1]["currentValue"], "high");
                assert_eq!(list[1]["options"].as_array().unwrap().len(), 7);
            }
        }
        let list = options(&m, &m[1], Thinking::Off);
        assert_eq!(list[0]["options"][1]["options"][0]["name"], "TWO (b)");
    }

    #[test]
    fn a_continued_session_restores_its_model_unless_told_otherwise() {
        let m = menu();
        let cur = m[0].clone();
        // (menu, stored model, --model given, decision)
        type Case<'a> = (
            Option<&'a [MenuModel]>,
            Option<(&'a str, &'a str)>,
            bool,
            Restore,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                Some(&m),
                Some(("b", "two")),
                false,
                Restore::Switch(m[1].clone()),
            ),
            (
                Some(&m),
                Some(("a", "three/x")),
                false,
                Restore::Switch(m[2].clone()),
            ),
            (Some(&m), Some(("a", "one")), false, Restore::Keep),
            (Some(&m), None, false, Restore::Keep),
            // `--model` on the command line wins over the file.
            (Some(&m), Some(("b", "two")), true, Restore::Keep),
            (
                Some(&m),
                Some(("gone", "old")),
                false,
                Restore::Unknown("gone/old".into()),
            ),
            (
                Some(&m),
                Some(("b", "one")),
                false,
                Restore::Unknown("b/one".into()),
            ),
            (Some(&m), Some(("gone", "old")), true, Restore::Keep),
            // No menu: the agent cannot switch (a scripted run).
            (None, Some(("b", "two")), false, Restore::Keep),
        ];
        for (menu, stored, explicit, want) in cases {
            assert_eq!(
                restore_model(menu, &cur, stored, explicit),
                want,
                "{stored:?} explicit={explicit}"
            );
        }
        let levels = [
            (Some("high"), false, Thinking::High),
            (Some("high"), true, Thinking::Low),
            (Some("extreme"), false, Thinking::Low),
            (None, false, Thinking::Low),
        ];
        for (stored, explicit, want) in levels {
            assert_eq!(
                restore_thinking(stored, explicit, Thinking::Low),
                want,
                "{stored:?}"
            );
        }
        assert_eq!(
            not_restored("gone/old", "a/one"),
            "Could not restore model gone/old. Using a/one"
        );
    }

    #[test]
    fn choices_are_validated_with_the_spec_texts() {
        let m = menu();
        let plain = m[0].clone();
        let reasoning = m[1].clone();
        let cases: Vec<(&MenuModel, &str, &str, Result<Choice, String>)> = vec![
            (&plain, "model", "b/two", Ok(Choice::Model(m[1].clone()))),
            (
                &plain,
                "model",
                "a/three/x",
                Ok(Choice::Model(m[2].clone())),
            ),
            (&plain, "model", "a/one", Ok(Choice::Model(m[0].clone()))),
            (
                &plain,
                "model",
                "two",
                Err("Model is not available: two".into()),
            ),
            (
                &plain,
                "thought_level",
                "high",
                Err("Unknown ACP config option: thought_level".into()),
            ),
            (
                &reasoning,
                "thought_level",
                "xhigh",
                Ok(Choice::Thinking(Thinking::XHigh)),
            ),
            (
                &reasoning,
                "thought_level",
                "extreme",
                Err("Reasoning level is not available: extreme".into()),
            ),
            (
                &reasoning,
                "mode",
                "x",
                Err("Unknown ACP config option: mode".into()),
            ),
        ];
        for (current, id, value, want) in cases {
            assert_eq!(choose(&m, current, id, value), want, "{id}={value}");
        }
    }
}
