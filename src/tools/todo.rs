//! The `todo` tool: the model keeps its task list here, and every call replaces the whole
//! list. The turn forwards the list (`ToolOutput::plan`) as an ACP `plan` update, so editors
//! show the agent's plan; the model gets the list back as text. The schema is ours (issue 14):
//! items with `content`, `status` and `priority`.

use crate::base::json::json;
use serde_json::Value;

use super::{Tool, ToolContext, ToolOutput};
use crate::base::content::{PlanEntry, ToolSpec};

pub(crate) const NAME: &str = "todo";

pub(crate) struct Todo;

const DESCRIPTION: &str = "Keep a todo list for the task at hand, shown to the user as your plan. Each call replaces the whole list: send every item each time, with its current status. Use it for work with several steps; mark an item in_progress when you start it and completed when it is done.";

const STATUSES: [&str; 3] = ["pending", "in_progress", "completed"];
const PRIORITIES: [&str; 3] = ["high", "medium", "low"];

impl Tool for Todo {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "description": "The complete list, in order",
                        "items": {
                            "type": "object",
                            "properties": {
                                "content": { "type": "string", "description": "What to do" },
                                "status": { "type": "string", "enum": STATUSES },
                                "priority": { "type": "string", "enum": PRIORITIES, "description": "Default: medium" }
                            },
                            "required": ["content", "status"]
                        }
                    }
                },
                "required": ["todos"]
            }),
        }
    }

    fn run(&self, args: &Value, _ctx: &mut ToolContext<'_>) -> ToolOutput {
        match parse(args) {
            Ok(entries) => ToolOutput {
                text: summary(&entries),
                plan: Some(entries),
                ..Default::default()
            },
            Err(why) => ToolOutput::error(format!("Validation failed for tool \"todo\": {why}")),
        }
    }
}

fn parse(args: &Value) -> Result<Vec<PlanEntry>, String> {
    let Some(items) = args.get("todos").and_then(Value::as_array) else {
        return Err("todos must be an array of items".to_owned());
    };
    let pick =
        |item: &Value, i: usize, key: &str, allowed: &[&str], default: Option<&str>| match item
            .get(key)
            .and_then(Value::as_str)
            .or(default)
        {
            Some(v) if allowed.contains(&v) => Ok(v.to_owned()),
            _ => Err(format!(
                "todos[{i}].{key} must be one of {}",
                allowed.join(", ")
            )),
        };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let content = item
                .get("content")
                .and_then(Value::as_str)
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| format!("todos[{i}].content must be a non-empty string"))?;
            Ok(PlanEntry {
                content: content.to_owned(),
                status: pick(item, i, "status", &STATUSES, None)?,
                priority: pick(item, i, "priority", &PRIORITIES, Some("medium"))?,
            })
        })
        .collect()
}

/// What the model reads back: the counts and the list.
fn summary(entries: &[PlanEntry]) -> String {
    let count = |s: &str| entries.iter().filter(|e| e.status == s).count();
    let mut text = format!(
        "Todo list updated: {} item(s), {} completed, {} in progress, {} pending.",
        entries.len(),
        count("completed"),
        count("in_progress"),
        count("pending")
    );
    for e in entries {
        let mark = match e.status.as_str() {
            "completed" => "[x]",
            "in_progress" => "[~]",
            _ => "[ ]",
        };
        text.push_str(&format!("\n{mark} {} ({})", e.content, e.priority));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::abort::AbortFlag;

    fn run(args: Value) -> ToolOutput {
        let abort = AbortFlag::new();
        let mut progress = |_: &str| {};
        let mut ctx = ToolContext {
            cwd: std::path::Path::new("/"),
            abort: &abort,
            progress: &mut progress,
            files: None,
            terminal: None,
            on_terminal: &mut |_| {},
            sandbox: &crate::base::sandbox::Sandbox::default(),
        };
        Todo.run(&args, &mut ctx)
    }

    #[test]
    fn a_list_becomes_a_plan_and_a_summary() {
        let out = run(json!({"todos": [
            {"content": "read the code", "status": "completed", "priority": "high"},
            {"content": "fix it", "status": "in_progress"},
        ]}));
        assert!(!out.is_error, "{}", out.text);
        let plan = out.plan.unwrap();
        assert_eq!(plan[1].priority, "medium");
        assert_eq!(
            out.text,
            "Todo list updated: 2 item(s), 1 completed, 1 in progress, 0 pending.\n[x] read the code (high)\n[~] fix it (medium)"
        );
        // An empty list clears the plan.
        assert_eq!(run(json!({"todos": []})).plan, Some(Vec::new()));
    }

    #[test]
    fn bad_items_are_tool_errors() {
        let cases = [
            (json!({}), "todos must be an array of items"),
            (
                json!({"todos": [{"status": "pending"}]}),
                "todos[0].content must be a non-empty string",
            ),
            (
                json!({"todos": [{"content": "a", "status": "done"}]}),
                "todos[0].status must be one of pending, in_progress, completed",
            ),
            (
                json!({"todos": [{"content": "a", "status": "pending", "priority": "urgent"}]}),
                "todos[0].priority must be one of high, medium, low",
            ),
        ];
        for (args, why) in cases {
            let out = run(args);
            assert!(out.is_error);
            assert_eq!(
                out.text,
                format!("Validation failed for tool \"todo\": {why}")
            );
            assert_eq!(out.plan, None);
        }
    }
}
