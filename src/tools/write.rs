//! The `write` tool (behaviour spec §3.5): creates or overwrites a file, creating parent
//! directories, and reports a `diff` (old text `None` for a new file) for ACP clients.

use std::path::Path;

use serde_json::{json, Value};

use super::read::path_location;
use super::{file_diff, io_error_code, io_error_text, resolve_path, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

pub struct Write;

const DESCRIPTION: &str = "Write content to a file. Creates the file if it doesn't exist, overwrites if it does. Automatically creates parent directories.";

impl Tool for Write {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write".to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Path to the file to write (relative or absolute)"
                    },
                    "content": { "type": "string", "description": "Content to write to the file" }
                },
                "required": ["path", "content"]
            }),
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput {
        if ctx.abort.is_aborted() {
            return ToolOutput::error("Operation aborted");
        }
        let (Some(path), Some(content)) = (
            args.get("path").and_then(Value::as_str),
            args.get("content").and_then(Value::as_str),
        ) else {
            return ToolOutput::error(
                "Validation failed for tool \"write\": path and content must be strings.",
            );
        };
        let abs = resolve_path(ctx.cwd, path);
        // The previous text, for the diff; `None` when the file is new (or not text).
        let old = std::fs::read(&abs)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        let fail = |op: &str, e: std::io::Error, target: &Path| {
            ToolOutput::error(format!(
                "{}: {}, {op} '{}'",
                io_error_code(&e),
                io_error_text(&e),
                target.display()
            ))
        };
        if let Some(dir) = abs.parent() {
            if let Err(e) = std::fs::create_dir_all(dir) {
                return fail("mkdir", e, dir);
            }
        }
        if let Err(e) = std::fs::write(&abs, content) {
            return fail("open", e, &abs);
        }
        // The reference reports JavaScript's `content.length`: UTF-16 code units, not bytes.
        let units = content.encode_utf16().count();
        ToolOutput {
            text: format!("Successfully wrote {units} bytes to {path}"),
            diff: file_diff(&abs, old, content),
            ..Default::default()
        }
    }

    fn locations(&self, args: &Value, cwd: &Path) -> Vec<String> {
        path_location(args, cwd)
    }
}
