//! The `bash` tool (behaviour spec §3.3): runs a command through `process::run` and turns the
//! outcome into the spec's exact result texts.

use std::time::Duration;

use crate::base::json::json;
use serde_json::Value;

use super::process::{self, Ending, RunResult, RunSpec};
use super::truncate::{truncate_tail, MAX_BYTES, MAX_LINES};
use super::{Tool, ToolContext, ToolOutput};
use crate::base::content::ToolSpec;

pub(crate) struct Bash {
    /// Settings `shellCommandPrefix`, put on its own line before every command (§3.3).
    pub prefix: Option<String>,
}

const DESCRIPTION: &str = "Execute a bash command in the current working directory. Returns stdout and stderr. Output is truncated to last 2000 lines or 50KB (whichever is hit first). If truncated, full output is saved to a temp file. Optionally provide a timeout in seconds.";

impl Tool for Bash {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "bash".to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": { "type": "string", "description": "Bash command to execute" },
                    "timeout": {
                        "type": "number",
                        "description": "Timeout in seconds (optional, no default timeout)"
                    }
                },
                "required": ["command"]
            }),
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput {
        let Some(command) = args.get("command").and_then(Value::as_str) else {
            return ToolOutput::error(
                "Validation failed for tool \"bash\": command must be a string.",
            );
        };
        let prefixed;
        let command = match &self.prefix {
            Some(prefix) => {
                prefixed = format!("{prefix}\n{command}");
                prefixed.as_str()
            }
            None => command,
        };
        let timeout_secs = match args.get("timeout") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(s) => Some(s),
                None => {
                    return ToolOutput::error(
                        "Validation failed for tool \"bash\": timeout must be a number.",
                    )
                }
            },
        };
        // Like the reference: only a positive timeout arms the timer. An absurd value cannot
        // be represented as a Duration and simply means "no timeout".
        let timeout = timeout_secs
            .filter(|s| *s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        // A sandboxed command runs here, inside the sandbox, never in the client's terminal.
        let policy = match ctx.sandbox.policy(ctx.cwd, &[]) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(format!("Cannot run the command: {e}")),
        };
        if let Some(terminal) = ctx.terminal.filter(|_| policy.is_none()) {
            let mut shown = None;
            let on_terminal = &mut *ctx.on_terminal;
            let ran = terminal.run(command, ctx.cwd, timeout, ctx.abort, &mut |id| {
                shown = Some(id.to_owned());
                on_terminal(id);
            });
            let mut output = match ran {
                Ok((text, ending)) => {
                    ending_output(tail(&text), ending, timeout_secs.unwrap_or(0.0))
                }
                Err(e) => ToolOutput::error(e),
            };
            output.terminal = shown;
            return output;
        }
        let spec = RunSpec {
            command,
            cwd: ctx.cwd,
            timeout,
            abort: ctx.abort,
            sandbox: policy.as_ref(),
        };
        let progress = &mut *ctx.progress;
        match process::run(&spec, &mut |r| progress(r.tail)) {
            Ok(result) => result_output(&result, timeout_secs.unwrap_or(0.0)),
            Err(e) => ToolOutput::error(e),
        }
    }
}

/// The tool result for a finished run (§3.3 texts).
pub(crate) fn result_output(result: &RunResult, timeout_secs: f64) -> ToolOutput {
    ending_output(result.output.render(), result.ending, timeout_secs)
}

/// The output a client terminal kept, cut as a local run's is (no spill file: the full output
/// stays in the client's terminal).
fn tail(text: &str) -> String {
    let cut = truncate_tail(text, MAX_LINES, MAX_BYTES);
    if !cut.truncated {
        return cut.content;
    }
    format!(
        "[Showing the last {} of {} lines; the client's terminal holds the rest]\n{}",
        cut.output_lines, cut.total_lines, cut.content
    )
}

/// The result texts (§3.3) for `body` and how the command ended.
fn ending_output(body: String, ending: Ending, timeout_secs: f64) -> ToolOutput {
    let with_suffix = |suffix: &str| {
        if body.is_empty() {
            suffix.to_owned()
        } else {
            format!("{body}\n\n{suffix}")
        }
    };
    match ending {
        Ending::Exited(0) => ToolOutput::ok(if body.is_empty() {
            "(no output)".to_owned()
        } else {
            body
        }),
        Ending::Exited(code) => ToolOutput::error(format!(
            "{}\n\nCommand exited with code {code}",
            if body.is_empty() {
                "(no output)"
            } else {
                &body
            }
        )),
        Ending::TimedOut => ToolOutput::error(with_suffix(&format!(
            "Command timed out after {} seconds",
            js_number(timeout_secs)
        ))),
        Ending::Aborted => ToolOutput::error(with_suffix("Command aborted")),
    }
}

/// A number as JavaScript prints it for the common cases: `2`, not `2.0`; `1.5` stays.
pub(crate) fn js_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_javascript() {
        assert_eq!(js_number(2.0), "2");
        assert_eq!(js_number(1.5), "1.5");
        assert_eq!(js_number(0.25), "0.25");
    }
}
