//! Refine (behaviour spec §5.4): the model plans edits to the continual-harness store
//! (`rlm.harness`: prompt notes, memories, skills, subagent notes) from what the session
//! showed, and the agent applies them through the kernel, which owns the store. Here: the
//! pure parts (the `/refine` command, the planner's prompt, the plan's parsing, the result's
//! shape for `_meta…refinement`, and the kernel calls' code). `turn/refining.rs` runs it.

use serde_json::Value;

/// What `/refine …` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// `/refine [--global] [instructions]`.
    Run {
        global: bool,
        instructions: Option<String>,
    },
    /// `/refine rollback <id>`.
    Rollback { id: String },
}

/// `/refine [--global] [instructions]` or `/refine rollback <id>`; `None` for anything else.
pub(crate) fn command(text: &str) -> Option<Result<Command, String>> {
    let rest = text.trim().strip_prefix("/refine")?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim();
    if let Some(id) = rest.strip_prefix("rollback") {
        if id.is_empty() || id.starts_with(char::is_whitespace) {
            let id = id.trim();
            if id.is_empty() {
                return Some(Err("Usage: /refine rollback <refinement id>".to_owned()));
            }
            return Some(Ok(Command::Rollback { id: id.to_owned() }));
        }
    }
    let (global, rest) = match rest.strip_prefix("--global") {
        Some(r) if r.is_empty() || r.starts_with(char::is_whitespace) => (true, r.trim()),
        _ => (false, rest),
    };
    Some(Ok(Command::Run {
        global,
        instructions: (!rest.is_empty()).then(|| rest.to_owned()),
    }))
}

/// The planner's role (our words; the output shape is §5.4's edit plan).
pub(crate) const PLANNER_SYSTEM: &str = "You improve the working harness of an AI coding agent: the persistent notes, memories, skills and subagent descriptions it carries from one task to the next. You read what happened in a session and the harness's current contents, and you propose a few precise edits that would make the agent work better next time: record what was learned the hard way, correct notes that proved wrong, remove ones that no longer help.

Reply with one JSON object and nothing else:
{\"summary\": \"<one sentence: what the edits do>\", \"rationale\": \"<why, from the session>\", \"expectedOutcome\": \"<what should go better>\", \"edits\": [{\"action\": \"create\" | \"update\" | \"delete\", \"kind\": \"prompt\" | \"memory\" | \"skill\" | \"subagent\", \"id\": \"<entry id; required for update and delete>\", \"title\": \"...\", \"content\": \"...\", \"path\": \"general\", \"reason\": \"...\"}]}
A skill entry also needs \"reference\": {\"type\": \"python\", \"import\": \"<module>\", \"callable\": \"<name>\"}. Keep the list short; an empty list is the right answer when nothing is worth changing.";

/// The review gate's role (automatic refine, §5.4; our words, the spec's output shape).
pub(crate) const GATE_SYSTEM: &str = "You review a working session of an AI coding agent and decide whether its harness (the persistent notes, memories, skills and subagent descriptions it carries from one task to the next) should be edited now. Say yes only when the session taught something that would make later work better: a fact learned the hard way, a note that proved wrong, a repeated procedure worth a skill. Say no when nothing stands out.

Reply with one JSON object and nothing else:
{\"shouldRefine\": true | false, \"rationale\": \"<why, from the session>\", \"instructions\": \"<when true: what the edits should capture>\"}";

/// The review gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gate {
    pub should_refine: bool,
    pub rationale: String,
    pub instructions: Option<String>,
}

/// The gate's user text: the same material as the planner's, with the gate's ask.
pub(crate) fn gate_text(overview: &str, conversation: &str) -> String {
    let text = planner_text(overview, conversation, None);
    let ask = "\n\nPropose the harness edits now, as the JSON object described.";
    format!(
        "{}\n\nShould the harness be refined now? Answer with the JSON object described.",
        text.strip_suffix(ask).unwrap_or(&text)
    )
}

/// The gate's answer in its reply (the outermost `{…}`): `shouldRefine` must be a boolean;
/// anything else is an error (no refine).
pub(crate) fn parse_gate(reply: &str) -> Result<Gate, String> {
    let (Some(start), Some(end)) = (reply.find('{'), reply.rfind('}')) else {
        return Err("the review gate's reply holds no JSON object".to_owned());
    };
    if end < start {
        return Err("the review gate's reply holds no JSON object".to_owned());
    }
    let v: Value = serde_json::from_str(&reply[start..=end])
        .map_err(|e| format!("the review gate's reply is not valid JSON: {e}"))?;
    let should_refine = v
        .get("shouldRefine")
        .and_then(Value::as_bool)
        .ok_or("the review gate's reply has no boolean \"shouldRefine\"")?;
    let text = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    Ok(Gate {
        should_refine,
        rationale: text("rationale").unwrap_or_default(),
        instructions: text("instructions"),
    })
}

/// Messages of the conversation the planner sees at most (the newest part).
pub(crate) const CONVERSATION_CHARS: usize = 60_000;

/// The planner's user text.
pub(crate) fn planner_text(
    overview: &str,
    conversation: &str,
    instructions: Option<&str>,
) -> String {
    let start = conversation
        .char_indices()
        .rev()
        .nth(CONVERSATION_CHARS - 1)
        .map_or(0, |(i, _)| i);
    let mut out = format!(
        "<harness>\n{overview}\n</harness>\n\n<conversation>\n{}\n</conversation>",
        &conversation[start..]
    );
    if let Some(i) = instructions.filter(|i| !i.trim().is_empty()) {
        out.push_str(&format!(
            "\n\n<user-instructions>\n{}\n</user-instructions>",
            i.trim()
        ));
    }
    out.push_str("\n\nPropose the harness edits now, as the JSON object described.");
    out
}

/// The edit plan in the planner's reply: the outermost `{…}` (code fences and prose around it
/// are tolerated), which must hold an `edits` array.
pub(crate) fn parse_plan(reply: &str) -> Result<Value, String> {
    let (Some(start), Some(end)) = (reply.find('{'), reply.rfind('}')) else {
        return Err("the planner's reply holds no JSON object".to_owned());
    };
    if end < start {
        return Err("the planner's reply holds no JSON object".to_owned());
    }
    let plan: Value = serde_json::from_str(&reply[start..=end])
        .map_err(|e| format!("the planner's reply is not valid JSON: {e}"))?;
    if !plan.get("edits").is_some_and(Value::is_array) {
        return Err("the planner's plan has no \"edits\" list".to_owned());
    }
    Ok(plan)
}

/// A Python string literal holding `text` (JSON string syntax is valid Python).
fn py_str(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "''".to_owned())
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// The kernel code that prints the harness overview of a scope.
pub(crate) fn overview_code(global: bool) -> String {
    format!(
        "print(__import__('json').dumps(__import__('sys').modules['rlm']._refine_overview({})))",
        py_bool(global)
    )
}

/// The kernel code that applies `plan` and prints the result as JSON.
pub(crate) fn apply_code(plan: &Value, global: bool, trigger: &str) -> String {
    format!(
        "print(__import__('json').dumps(__import__('sys').modules['rlm']._refine_apply({}, {}, {})))",
        py_str(&plan.to_string()),
        py_bool(global),
        py_str(trigger)
    )
}

/// The kernel code that undoes the applied edits of `result` and prints the new result.
pub(crate) fn rollback_code(result: &Value) -> String {
    format!(
        "print(__import__('json').dumps(__import__('sys').modules['rlm']._refine_rollback({})))",
        py_str(&result.to_string())
    )
}

/// One applied (or refused) edit of a result, for `_meta…refinement.changes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    pub action: String,
    pub kind: String,
    pub id: String,
    pub applied: bool,
}

/// The summary and edits of a result (`{summary, appliedEdits: [{action, kind, id, applied}]}`).
pub(crate) fn result_edits(result: &Value) -> (Option<String>, Vec<Edit>) {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let edits = result
        .get("appliedEdits")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Edit {
                    action: s(e, "action"),
                    kind: s(e, "kind"),
                    id: s(e, "id"),
                    applied: e.get("applied").and_then(Value::as_bool).unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    (
        result
            .get("summary")
            .and_then(Value::as_str)
            .map(str::to_owned),
        edits,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    #[test]
    fn commands() {
        let run = |global, i: Option<&str>| {
            Some(Ok(Command::Run {
                global,
                instructions: i.map(str::to_owned),
            }))
        };
        assert_eq!(command("/refine"), run(false, None));
        assert_eq!(command("/refine  be terse "), run(false, Some("be terse")));
        assert_eq!(command("/refine --global"), run(true, None));
        assert_eq!(
            command("/refine --global note the build"),
            run(true, Some("note the build"))
        );
        assert_eq!(command("/refine --globalx"), run(false, Some("--globalx")));
        assert_eq!(
            command("/refine rollback refine_0001"),
            Some(Ok(Command::Rollback {
                id: "refine_0001".into()
            }))
        );
        assert_eq!(
            command("/refine rollback"),
            Some(Err("Usage: /refine rollback <refinement id>".into()))
        );
        assert_eq!(
            command("/refine rollbacks x"),
            run(false, Some("rollbacks x"))
        );
        assert_eq!(command("/refined"), None);
        assert_eq!(command("do /refine"), None);
    }

    #[test]
    fn plans_and_results() {
        let plan = parse_plan("Here:\n```json\n{\"summary\": \"s\", \"edits\": []}\n```").unwrap();
        assert_eq!(plan["summary"], "s");
        assert!(parse_plan("no json").is_err());
        assert!(parse_plan("{\"summary\": 1}")
            .unwrap_err()
            .contains("edits"));
        assert!(parse_plan("{oops}").unwrap_err().contains("not valid JSON"));

        let result = json!({"summary": "s", "appliedEdits": [
            {"action": "create", "kind": "memory", "id": "m1", "applied": true},
            {"action": "delete", "kind": "skill", "id": "k", "applied": false, "error": "no"}
        ]});
        let (summary, edits) = result_edits(&result);
        assert_eq!(summary.as_deref(), Some("s"));
        assert_eq!(
            edits[0],
            Edit {
                action: "create".into(),
                kind: "memory".into(),
                id: "m1".into(),
                applied: true
            }
        );
        assert!(!edits[1].applied);
    }

    #[test]
    fn gate_answers() {
        let g = parse_gate("```json\n{\"shouldRefine\": true, \"rationale\": \"r\", \"instructions\": \" note x \"}\n```").unwrap();
        assert_eq!(
            g,
            Gate {
                should_refine: true,
                rationale: "r".into(),
                instructions: Some("note x".into())
            }
        );
        let no = parse_gate("{\"shouldRefine\": false}").unwrap();
        assert!(!no.should_refine && no.instructions.is_none());
        assert!(parse_gate("{\"shouldRefine\": \"yes\"}").is_err());
        assert!(parse_gate("nothing").is_err());
        let t = gate_text("(empty)", "[User]: hi");
        assert!(t.starts_with("<harness>\n(empty)\n</harness>"));
        assert!(t.ends_with(
            "Should the harness be refined now? Answer with the JSON object described."
        ));
    }

    #[test]
    fn planner_text_and_kernel_code() {
        let t = planner_text("(empty harness)", "[User]: hi", Some(" keep it short "));
        assert!(t.starts_with(
            "<harness>\n(empty harness)\n</harness>\n\n<conversation>\n[User]: hi\n</conversation>"
        ));
        assert!(t.contains("<user-instructions>\nkeep it short\n</user-instructions>"));
        let long = "é".repeat(CONVERSATION_CHARS + 10);
        assert!(planner_text("", &long, None).contains(&"é".repeat(CONVERSATION_CHARS)));
        assert!(!planner_text("", &long, None).contains(&"é".repeat(CONVERSATION_CHARS + 1)));
        let code = apply_code(
            &json!({"edits": [{"content": "it's \"q\"\n"}]}),
            true,
            "manual",
        );
        assert!(code.contains("_refine_apply(\"{\\\"edits\\\":"));
        assert!(code.ends_with(", True, \"manual\")))"));
    }
}
