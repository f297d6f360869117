//! Slash commands typed as prompts: `/autonomous`, `/goal`, `/model`, `/compact`, `/rename`,
//! `/rlm-max-depth`, `/fast`, `/help`.
//!
//! `parse` is pure: a prompt that is not one of these commands (including an unknown `/word`)
//! is `None` and goes to the model unchanged. The results reach the client as an
//! `agent_message_chunk` (upstream shows the client nothing) through a turn that makes no
//! model call and ends `end_turn`; `handlers.rs` carries out `/model`, `run_on` the rest.

use std::time::Instant;

use crate::base::json::json;
use serde_json::Value;

use crate::agent::autonomy::{GoalStatus, Unattended};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Autonomous(Switch),
    Goal(GoalCommand),
    /// Show the model, or switch to `provider/id`.
    Model(Option<String>),
    Compact(Option<String>),
    /// Name the session (`session_info_update`, stored, shown by `session/list`).
    Rename(Option<String>),
    /// Show or set the session's maximum subagent depth (behaviour spec §4.3).
    RlmMaxDepth(DepthCommand),
    /// Toggle OpenAI's priority service tier (`false`: it came with arguments, its usage).
    Fast(bool),
    Help,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DepthCommand {
    Show,
    Set(u32),
    Invalid(String),
}

const DEPTH_USAGE: &str =
    "Usage: /rlm-max-depth [n] (n: a non-negative integer; 0 lets no agent start subagents)";

/// `/fast` on a model without Fast mode (upstream's words).
pub(crate) const FAST_UNAVAILABLE: &str =
    "Fast mode requires GPT-5.4, GPT-5.5, or GPT-5.6 with ChatGPT or OpenAI API key authentication";

/// Upstream's Fast-mode models: GPT-5.4, 5.5 and 5.6 of `openai` (or `openai-codex`), whose
/// Responses API takes `service_tier`.
pub(crate) fn supports_fast_mode(label: &str) -> bool {
    let Some((provider, id)) = label.split_once('/') else {
        return false;
    };
    matches!(provider, "openai" | "openai-codex")
        && (matches!(id, "gpt-5.4" | "gpt-5.5" | "gpt-5.6") || id.starts_with("gpt-5.6-"))
}

/// The reply to a `/fast` that switched the tier.
pub(crate) fn fast_reply(on: bool) -> String {
    if on {
        "Fast mode on: model calls ask for the priority service tier from the next one on."
            .to_owned()
    } else {
        "Fast mode off: model calls ask for the default service tier from the next one on."
            .to_owned()
    }
}

/// The reply to `/rlm-max-depth` without a number.
pub(crate) fn depth_status(max_depth: u32, from: &str) -> String {
    format!("RLM max depth: {max_depth} (from {from}).")
}

/// The reply to `/rlm-max-depth <n>`, which takes effect at once and is kept with the session.
pub(crate) fn depth_set(max_depth: u32, was: u32) -> String {
    format!("RLM max depth: {max_depth} for this session (was {was}); subagents started from now on are held to it.")
}

fn parse_depth(arg: &str) -> DepthCommand {
    if arg.is_empty() || arg == "status" {
        return DepthCommand::Show;
    }
    match arg.parse::<u32>() {
        Ok(n) if arg.bytes().all(|b| b.is_ascii_digit()) => DepthCommand::Set(n),
        _ => DepthCommand::Invalid(DEPTH_USAGE.to_owned()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Switch {
    On,
    Off,
    Status,
    /// Not a valid argument: the usage text.
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GoalCommand {
    Status,
    Pause,
    Resume,
    Clear,
    Set {
        objective: String,
        token_budget: Option<u64>,
    },
    Invalid(String),
}

pub(crate) const RENAME_USAGE: &str = "Usage: /rename <title>";
const AUTONOMOUS_USAGE: &str = "Usage: /autonomous on|off|status";
const GOAL_USAGE: &str =
    "Usage: /goal [--token-budget N] <objective>, or /goal status|pause|resume|clear";

/// The commands with their descriptions and input hints (`available_commands_update`).
pub(crate) const COMMANDS: [(&str, &str, Option<&str>); 10] = [
    (
        "autonomous",
        "Turn autonomous mode on or off, or show its counters",
        Some("on | off | status"),
    ),
    (
        "goal",
        "Set a goal the agent pursues across turns, or show, pause, resume or clear it",
        Some("[--token-budget N] <objective> | status | pause | resume | clear"),
    ),
    (
        "model",
        "Show the session's model, or switch to another",
        Some("[provider/id]"),
    ),
    (
        "compact",
        "Summarise the conversation to free context",
        Some("[instructions]"),
    ),
    ("rename", "Give the session a title", Some("<title>")),
    (
        "rlm-max-depth",
        "Show or set this session's maximum subagent depth",
        Some("[n]"),
    ),
    // Parsed where they run (`refine::command` in the turn, `schedule::heartbeat_command` in
    // the handlers); listed here so clients and `/help` show them.
    (
        "refine",
        "Improve the agent's harness from this session, or roll a refinement back",
        Some("[--global] [instructions] | rollback <id>"),
    ),
    (
        "heartbeat",
        "Schedule a recurring prompt, or show or stop it",
        Some("[every 5m | in 10m] [prompt] | off | status"),
    ),
    (
        "fast",
        "Toggle OpenAI Fast mode (the priority service tier) for this session",
        None,
    ),
    ("help", "List these commands", None),
];

/// The names of our commands (a user template with one of them is not listed or expanded).
pub(crate) fn names() -> Vec<&'static str> {
    COMMANDS.iter().map(|(n, _, _)| *n).collect()
}

/// The slash command `text` is, if it is one of ours.
pub(crate) fn parse(text: &str) -> Option<Command> {
    let rest = text.trim().strip_prefix('/')?;
    let (name, arg) = match rest.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (rest, ""),
    };
    Some(match name {
        "autonomous" => Command::Autonomous(match arg {
            "on" => Switch::On,
            "off" => Switch::Off,
            "" | "status" => Switch::Status,
            _ => Switch::Invalid(AUTONOMOUS_USAGE.to_owned()),
        }),
        "goal" => Command::Goal(parse_goal(arg)),
        "model" => Command::Model((!arg.is_empty()).then(|| arg.to_owned())),
        "compact" => Command::Compact((!arg.is_empty()).then(|| arg.to_owned())),
        "rename" => Command::Rename((!arg.is_empty()).then(|| arg.to_owned())),
        "rlm-max-depth" => Command::RlmMaxDepth(parse_depth(arg)),
        "fast" => Command::Fast(arg.is_empty()),
        "help" => Command::Help,
        _ => return None,
    })
}

fn parse_goal(arg: &str) -> GoalCommand {
    match arg {
        "" | "status" => return GoalCommand::Status,
        "pause" => return GoalCommand::Pause,
        "resume" => return GoalCommand::Resume,
        "clear" | "stop" => return GoalCommand::Clear,
        _ => {}
    }
    let mut token_budget = None;
    let mut rest = arg;
    for flag in ["--token-budget", "--budget"] {
        if let Some(after) = rest.strip_prefix(flag) {
            let after = after.strip_prefix('=').unwrap_or(after).trim_start();
            let (n, tail) = after.split_once(char::is_whitespace).unwrap_or((after, ""));
            match n.parse::<u64>() {
                Ok(n) if n > 0 => token_budget = Some(n),
                _ => return GoalCommand::Invalid(format!("{flag} must be a positive integer")),
            }
            rest = tail.trim();
            break;
        }
    }
    if rest.is_empty() {
        return GoalCommand::Invalid(GOAL_USAGE.to_owned());
    }
    GoalCommand::Set {
        objective: rest.to_owned(),
        token_budget,
    }
}

/// Carries out `/autonomous`, `/goal` and `/help` on the session's state; the text to show.
/// (`/model` and `/compact` are carried out elsewhere.)
pub(crate) fn run_on(command: &Command, state: &mut Unattended, now: Instant) -> String {
    match command {
        Command::Autonomous(Switch::Invalid(usage))
        | Command::Goal(GoalCommand::Invalid(usage)) => usage.clone(),
        Command::Autonomous(switch) => {
            match switch {
                Switch::On => state.enable(now),
                Switch::Off => state.disable(),
                _ => {}
            }
            state.status_line()
        }
        Command::Goal(goal) => run_goal(goal, state, now),
        Command::Help => help_text(),
        Command::Model(_)
        | Command::Compact(_)
        | Command::Rename(_)
        | Command::RlmMaxDepth(_)
        | Command::Fast(_) => String::new(),
    }
}

fn run_goal(command: &GoalCommand, state: &mut Unattended, now: Instant) -> String {
    let none = "No goal is set. Set one with /goal <objective>.".to_owned();
    match command {
        GoalCommand::Status => goal_status(state, now).unwrap_or(none),
        GoalCommand::Set {
            objective,
            token_budget,
        } => {
            state.set_goal(objective, *token_budget, now);
            let mut text = goal_status(state, now).unwrap_or_default();
            text.push_str(" The agent works toward it from the next prompt on.");
            text
        }
        GoalCommand::Pause | GoalCommand::Resume => {
            let (from, to) = match command {
                GoalCommand::Pause => (GoalStatus::Active, GoalStatus::Paused),
                _ => (GoalStatus::Paused, GoalStatus::Active),
            };
            match state.goal.as_ref().map(|g| g.status) {
                None => none,
                Some(s)
                    if s == from
                        || (to == GoalStatus::Active && s == GoalStatus::BudgetLimited) =>
                {
                    state.set_goal_status(to, now);
                    goal_status(state, now).unwrap_or_default()
                }
                Some(s) => format!("The goal is {}; nothing to change.", s.as_str()),
            }
        }
        GoalCommand::Clear => {
            if state.clear_goal() {
                "Goal cleared.".to_owned()
            } else {
                none
            }
        }
        GoalCommand::Invalid(usage) => usage.clone(),
    }
}

/// `Goal: <objective>. Status: active. Tokens: 25/1000. Time: 3 s.`
fn goal_status(state: &Unattended, now: Instant) -> Option<String> {
    let g = state.goal.as_ref()?;
    let budget = g
        .token_budget
        .map_or_else(|| "no budget".to_owned(), |b| b.to_string());
    Some(format!(
        "Goal: {}. Status: {}. Tokens: {}/{budget}. Time: {} s.",
        g.objective,
        g.status.as_str(),
        g.tokens_used,
        g.time_used_secs(now)
    ))
}

fn help_text() -> String {
    let mut text = String::from("Commands:");
    for (name, description, hint) in COMMANDS {
        match hint {
            Some(h) => text.push_str(&format!("\n/{name} {h}: {description}")),
            None => text.push_str(&format!("\n/{name}: {description}")),
        }
    }
    text.push_str("\nAnything else, including other /words, goes to the model.");
    text
}

/// The `available_commands_update` sent right after `session/new`.
/// `extra`: the user's skills and templates (`skills::Resources::commands`), after ours.
/// `/fast` is not offered: it does something on a few OpenAI models only (upstream hides it
/// elsewhere too); `/help` lists it.
pub(crate) fn available_commands_update(extra: &[(String, String, Option<String>)]) -> Value {
    let ours = COMMANDS
        .iter()
        .filter(|(name, _, _)| *name != "fast")
        .map(|(name, description, hint)| (*name, *description, *hint));
    let theirs = extra
        .iter()
        .map(|(n, d, h)| (n.as_str(), d.as_str(), h.as_deref()));
    let commands: Vec<Value> = ours
        .chain(theirs)
        .map(|(name, description, hint)| {
            let mut c = json!({"name": name, "description": description});
            if let Some(h) = hint {
                c["input"] = json!({"hint": h});
            }
            c
        })
        .collect();
    json!({"sessionUpdate": "available_commands_update", "availableCommands": commands})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_mode_models_and_the_command() {
        // (label, Fast mode)
        let cases = [
            ("openai/gpt-5.4", true),
            ("openai/gpt-5.5", true),
            ("openai-codex/gpt-5.6-codex", true),
            ("openai/gpt-5-mini", false),
            ("azure-openai-responses/gpt-5.4", false),
            ("scripted/x", false),
            ("gpt-5.4", false),
        ];
        for (label, want) in cases {
            assert_eq!(supports_fast_mode(label), want, "{label}");
        }
        assert_eq!(parse("/fast"), Some(Command::Fast(true)));
        assert_eq!(parse("/fast please"), Some(Command::Fast(false)));
    }
    use crate::agent::autonomy::Config;

    #[test]
    fn parses_our_commands_and_leaves_everything_else_to_the_model() {
        let cases: Vec<(&str, Option<Command>)> = vec![
            ("/autonomous on", Some(Command::Autonomous(Switch::On))),
            (
                "  /autonomous   off ",
                Some(Command::Autonomous(Switch::Off)),
            ),
            ("/autonomous", Some(Command::Autonomous(Switch::Status))),
            (
                "/autonomous status",
                Some(Command::Autonomous(Switch::Status)),
            ),
            (
                "/autonomous maybe",
                Some(Command::Autonomous(Switch::Invalid(
                    AUTONOMOUS_USAGE.into(),
                ))),
            ),
            (
                "/rlm-max-depth",
                Some(Command::RlmMaxDepth(DepthCommand::Show)),
            ),
            (
                "/rlm-max-depth 3",
                Some(Command::RlmMaxDepth(DepthCommand::Set(3))),
            ),
            (
                "/rlm-max-depth +3",
                Some(Command::RlmMaxDepth(DepthCommand::Invalid(
                    DEPTH_USAGE.to_owned(),
                ))),
            ),
            ("/goal", Some(Command::Goal(GoalCommand::Status))),
            ("/goal pause", Some(Command::Goal(GoalCommand::Pause))),
            ("/goal resume", Some(Command::Goal(GoalCommand::Resume))),
            ("/goal clear", Some(Command::Goal(GoalCommand::Clear))),
            ("/goal stop", Some(Command::Goal(GoalCommand::Clear))),
            (
                "/goal ship the ACP mode",
                Some(Command::Goal(GoalCommand::Set {
                    objective: "ship the ACP mode".into(),
                    token_budget: None,
                })),
            ),
            (
                "/goal --token-budget 500 fix it",
                Some(Command::Goal(GoalCommand::Set {
                    objective: "fix it".into(),
                    token_budget: Some(500),
                })),
            ),
            (
                "/goal --budget=7 x",
                Some(Command::Goal(GoalCommand::Set {
                    objective: "x".into(),
                    token_budget: Some(7),
                })),
            ),
            (
                "/goal --token-budget zero x",
                Some(Command::Goal(GoalCommand::Invalid(
                    "--token-budget must be a positive integer".into(),
                ))),
            ),
            (
                "/goal --token-budget 5",
                Some(Command::Goal(GoalCommand::Invalid(GOAL_USAGE.into()))),
            ),
            ("/model", Some(Command::Model(None))),
            (
                "/model openai/gpt-5",
                Some(Command::Model(Some("openai/gpt-5".into()))),
            ),
            ("/compact", Some(Command::Compact(None))),
            (
                "/compact keep the plan",
                Some(Command::Compact(Some("keep the plan".into()))),
            ),
            ("/help", Some(Command::Help)),
            ("/rename", Some(Command::Rename(None))),
            (
                "/rename  Release notes ",
                Some(Command::Rename(Some("Release notes".into()))),
            ),
            ("/skill:foo", None),
            ("/unknown word", None),
            ("/", None),
            ("hello /help", None),
            ("autonomous on", None),
            ("/autonomousX on", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn autonomous_commands_switch_and_report() {
        let now = Instant::now();
        let mut state = Unattended::new(Config::default(), now);
        let on = run_on(&Command::Autonomous(Switch::On), &mut state, now);
        assert_eq!(
            on,
            "Autonomous mode: on. Continuations: 0/3. Turns: 0/12. Tokens: 0/80000."
        );
        assert!(state.enabled());
        let off = run_on(&Command::Autonomous(Switch::Off), &mut state, now);
        assert!(off.starts_with("Autonomous mode: off."));
        let bad = parse("/autonomous x").unwrap();
        assert_eq!(run_on(&bad, &mut state, now), AUTONOMOUS_USAGE);
    }

    #[test]
    fn goal_commands_change_the_goal() {
        let now = Instant::now();
        let mut state = Unattended::new(Config::default(), now);
        let run = |state: &mut Unattended, t: &str| run_on(&parse(t).unwrap(), state, now);
        assert_eq!(
            run(&mut state, "/goal status"),
            "No goal is set. Set one with /goal <objective>."
        );
        let set = run(&mut state, "/goal --token-budget 100 ship it");
        assert!(
            set.starts_with("Goal: ship it. Status: active. Tokens: 0/100. Time: 0 s."),
            "{set}"
        );
        assert!(run(&mut state, "/goal pause").contains("Status: paused."));
        assert_eq!(
            run(&mut state, "/goal pause"),
            "The goal is paused; nothing to change."
        );
        assert!(run(&mut state, "/goal resume").contains("Status: active."));
        assert_eq!(run(&mut state, "/goal clear"), "Goal cleared.");
        assert!(state.goal.is_none());
    }

    #[test]
    fn help_and_the_advertised_commands() {
        let help = run_on(&Command::Help, &mut Unattended::disabled(), Instant::now());
        for (name, _, _) in COMMANDS {
            assert!(help.contains(&format!("\n/{name}")), "{help}");
        }
        let u = available_commands_update(&[]);
        assert_eq!(u["sessionUpdate"], "available_commands_update");
        let list = u["availableCommands"].as_array().unwrap();
        assert_eq!(list.len(), 9);
        assert_eq!(list[0]["name"], "autonomous");
        assert_eq!(list[0]["input"], json!({"hint": "on | off | status"}));
        assert!(list[8].get("input").is_none());
        assert!(!list.iter().any(|c| c["name"] == "fast"));
    }
}
