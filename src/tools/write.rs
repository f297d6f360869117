//! The `write` tool (behaviour spec §3.5): creates or overwrites a file, creating parent
//! directories, and reports a `diff` (old text `None` for a new file) for ACP clients.

use std::io::{Read as _, Write as _};
use std::path::Path;

use crate::base::json::json;
use serde_json::Value;

use super::read::path_location;
use super::{
    file_diff, io_error_code, io_error_text, open_regular, resolve_path, FileError, Tool,
    ToolContext, ToolOutput, DIFF_MAX_BYTES,
};
use crate::base::content::ToolSpec;

pub(crate) struct Write;

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
        // The sandbox's write rule, as its commands are held to it (base/sandbox.rs).
        if let Err(e) = ctx.sandbox.may_write(ctx.cwd, &abs) {
            return ToolOutput::error(format!("Cannot write '{path}': {e}"));
        }
        let fail = |op: &str, e: std::io::Error, target: &Path| {
            ToolOutput::error(format!(
                "{}: {}, {op} '{}'",
                io_error_code(&e),
                io_error_text(&e),
                target.display()
            ))
        };
        let refuse = |kind: &str| {
            ToolOutput::error(format!(
                "Cannot write '{}': it is a {kind}, not a regular file. write only writes regular files.",
                abs.display()
            ))
        };
        // A client that writes files: the file lands in its editor (which creates it and its
        // directories); the old text for the diff comes from it too when it reads.
        if let Some(files) = ctx.files.filter(|f| f.can().1) {
            let old = match files.can().0 {
                // A file the client cannot read is taken as new.
                true => Some(files.read_text(&abs, ctx.abort).ok()),
                false => previous_text(&abs).ok().flatten(),
            };
            if let Err(e) = files.write_text(&abs, content, ctx.abort) {
                return ToolOutput::error(e);
            }
            let units = content.encode_utf16().count();
            return ToolOutput {
                text: format!("Successfully wrote {units} bytes to {path}"),
                diff: old.and_then(|old| file_diff(&abs, old, content)),
                ..Default::default()
            };
        }
        let old = match previous_text(&abs) {
            Ok(old) => old,
            Err(kind) => return refuse(kind),
        };
        if let Some(dir) = abs.parent() {
            if let Err(e) = std::fs::create_dir_all(dir) {
                return fail("mkdir", e, dir);
            }
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        let mut file = match open_regular(&abs, &mut options) {
            Ok((f, _)) => f,
            // A new file: nothing to check before creating it (non-blocking, as above).
            Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                use std::os::unix::fs::OpenOptionsExt;
                match options.custom_flags(libc::O_NONBLOCK).open(&abs) {
                    Ok(f) => f,
                    Err(e) => return fail("open", e, &abs),
                }
            }
            Err(FileError::Io(e)) => return fail("open", e, &abs),
            Err(FileError::NotRegular(kind)) => return refuse(kind),
        };
        if let Err(e) = file.write_all(content.as_bytes()) {
            return fail("write", e, &abs);
        }
        // The reference reports JavaScript's `content.length`: UTF-16 code units, not bytes.
        let units = content.encode_utf16().count();
        ToolOutput {
            text: format!("Successfully wrote {units} bytes to {path}"),
            diff: old.and_then(|old| file_diff(&abs, old, content)),
            ..Default::default()
        }
    }

    fn locations(&self, args: &Value, cwd: &Path) -> Vec<String> {
        path_location(args, cwd)
    }
}

/// The file's previous text for the diff: `Some(None)` when it is new (or not UTF-8, shown
/// as new, as always), `None` when it is too large for a diff (it is not read at all then).
/// `Err`: it exists but is not a regular file.
fn previous_text(abs: &Path) -> Result<Option<Option<String>>, &'static str> {
    match open_regular(abs, std::fs::OpenOptions::new().read(true)) {
        Ok((file, meta)) if meta.len() <= DIFF_MAX_BYTES as u64 => {
            let mut bytes = Vec::new();
            // `take`: a file that grows after the `stat` is still read only up to the limit.
            let read = file.take(DIFF_MAX_BYTES as u64 + 1).read_to_end(&mut bytes);
            if read.is_err() || bytes.len() > DIFF_MAX_BYTES {
                return Ok(None);
            }
            Ok(Some(String::from_utf8(bytes).ok()))
        }
        Ok(_) => Ok(None),
        Err(FileError::NotRegular(kind)) => Err(kind),
        Err(FileError::Io(_)) => Ok(Some(None)),
    }
}
