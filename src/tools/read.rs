//! The `read` tool (behaviour spec §3.5): text files with head truncation and continuation
//! notices, images (jpg/png/gif/webp) as base64 attachments. Also the std-only base64 encoder.

use std::path::Path;

use serde_json::{json, Value};

use super::truncate::{format_size, truncate_head, MAX_BYTES, MAX_LINES};
use super::{io_error_code, io_error_text, resolve_path, Tool, ToolContext, ToolOutput};
use crate::events::Image;
use crate::provider::ToolSpec;

pub struct Read;

const DESCRIPTION: &str = "Read the contents of a file. Supports text files and images (jpg, png, gif, webp). Images are sent as attachments. For text files, output is truncated to 2000 lines or 50KB (whichever is hit first). Use offset/limit for large files. When you need the full file, continue with offset until complete.";

impl Tool for Read {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read".to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Path to the file to read (relative or absolute)"
                    },
                    "offset": {
                        "type": "number",
                        "description": "Line number to start reading from (1-indexed)"
                    },
                    "limit": { "type": "number", "description": "Maximum number of lines to read" }
                },
                "required": ["path"]
            }),
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput {
        if ctx.abort.is_aborted() {
            return ToolOutput::error("Operation aborted");
        }
        let Some(path) = args.get("path").and_then(Value::as_str) else {
            return ToolOutput::error(
                "Validation failed for tool \"read\": path must be a string.",
            );
        };
        let number = |key: &str| -> Result<Option<f64>, String> {
            match args.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                    format!("Validation failed for tool \"read\": {key} must be a number.")
                }),
            }
        };
        let (offset, limit) = match (number("offset"), number("limit")) {
            (Ok(o), Ok(l)) => (o, l),
            (Err(e), _) | (_, Err(e)) => return ToolOutput::error(e),
        };
        let abs = resolve_path(ctx.cwd, path);
        let bytes = match std::fs::read(&abs) {
            Ok(b) => b,
            Err(e) => {
                return ToolOutput::error(format!(
                    "{}: {}, access '{}'",
                    io_error_code(&e),
                    io_error_text(&e),
                    abs.display()
                ))
            }
        };
        if let Some(mime) = image_mime(&abs) {
            return ToolOutput {
                text: format!("Read image file [{mime}]"),
                images: vec![Image {
                    data: base64_encode(&bytes),
                    mime_type: mime.to_owned(),
                }],
                ..Default::default()
            };
        }
        let text = String::from_utf8_lossy(&bytes);
        match read_text(&text, path, offset, limit) {
            Ok(out) => ToolOutput::ok(out),
            Err(e) => ToolOutput::error(e),
        }
    }

    fn locations(&self, args: &Value, cwd: &Path) -> Vec<String> {
        path_location(args, cwd)
    }
}

/// The `path` argument as an absolute path, for ACP `locations`.
pub fn path_location(args: &Value, cwd: &Path) -> Vec<String> {
    args.get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(|p| vec![resolve_path(cwd, p).display().to_string()])
        .unwrap_or_default()
}

fn image_mime(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    })
}

/// The pure text part of `read`: offset/limit selection, head truncation, exact notices.
/// `offset`/`limit` are the raw numbers the model sent (fractions are floored, as slicing does).
pub fn read_text(
    text: &str,
    path: &str,
    offset: Option<f64>,
    limit: Option<f64>,
) -> Result<String, String> {
    let all: Vec<&str> = text.split('\n').collect();
    let total = all.len();
    // `offset` is 1-indexed; 0 or absent means the start.
    let start = match offset {
        Some(o) if o.is_finite() && o >= 1.0 => (o.floor() as usize).saturating_sub(1),
        Some(o) if o.is_nan() => 0,
        Some(o) if o == f64::INFINITY => usize::MAX,
        _ => 0,
    };
    if start >= total {
        let shown = offset.map(super::bash::js_number).unwrap_or_default();
        return Err(format!(
            "Offset {shown} is beyond end of file ({total} lines total)"
        ));
    }
    let (selected, user_limited) = match limit {
        Some(l) => {
            let l = if l.is_finite() && l > 0.0 {
                l.floor() as usize
            } else if l == f64::INFINITY {
                usize::MAX
            } else {
                0
            };
            let end = start.saturating_add(l).min(total);
            (all[start..end].join("\n"), Some(end - start))
        }
        None => (all[start..].join("\n"), None),
    };
    let t = truncate_head(&selected, MAX_LINES, MAX_BYTES);
    let first = start + 1;
    let limit_size = format_size(MAX_BYTES as u64);
    if t.first_line_exceeds_limit {
        let size = format_size(all[start].len() as u64);
        return Ok(format!(
            "[Line {first} is {size}, exceeds {limit_size} limit. Use bash: sed -n '{first}p' {path} | head -c {MAX_BYTES}]"
        ));
    }
    let mut out = t.content;
    if t.truncated {
        let last = first + t.output_lines - 1;
        let next = last + 1;
        if t.by_lines {
            out.push_str(&format!(
                "\n\n[Showing lines {first}-{last} of {total}. Use offset={next} to continue.]"
            ));
        } else {
            out.push_str(&format!(
                "\n\n[Showing lines {first}-{last} of {total} ({limit_size} limit). Use offset={next} to continue.]"
            ));
        }
    } else if let Some(n) = user_limited.filter(|n| start + n < total) {
        let remaining = total - (start + n);
        let next = start + n + 1;
        out.push_str(&format!(
            "\n\n[{remaining} more lines in file. Use offset={next} to continue.]"
        ));
    }
    Ok(out)
}

/// Standard base64 with padding (RFC 4648 §4).
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3F) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, want) in cases {
            assert_eq!(base64_encode(input.as_bytes()), want, "{input}");
        }
        assert_eq!(base64_encode(&[0xFF, 0xFE, 0x00]), "//4A");
    }

    fn lines(n: usize) -> String {
        (1..=n)
            .map(|i| format!("line{i}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn reads_whole_small_files() {
        assert_eq!(read_text("a\nb", "f", None, None).unwrap(), "a\nb");
        assert_eq!(read_text("a\nb\nc", "f", Some(2.0), None).unwrap(), "b\nc");
        assert_eq!(read_text("a\nb", "f", Some(0.0), None).unwrap(), "a\nb");
    }

    #[test]
    fn notices_are_exact() {
        let text = lines(2500);
        let out = read_text(&text, "f", None, None).unwrap();
        assert!(out
            .ends_with("line2000\n\n[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]"));
        let out = read_text(&text, "f", Some(2001.0), None).unwrap();
        assert!(out.starts_with("line2001\n"));
        assert!(out.ends_with("line2500"));
        let out = read_text(&text, "f", Some(10.0), Some(5.0)).unwrap();
        assert_eq!(
            out,
            "line10\nline11\nline12\nline13\nline14\n\n[2486 more lines in file. Use offset=15 to continue.]"
        );
        let wide = vec!["x".repeat(100); 1000].join("\n");
        let out = read_text(&wide, "f", None, None).unwrap();
        assert!(
            out.ends_with(
                "\n\n[Showing lines 1-506 of 1000 (50.0KB limit). Use offset=507 to continue.]"
            ),
            "{}",
            &out[out.len() - 100..]
        );
        let long = format!("short\n{}", "y".repeat(60 * 1024));
        assert_eq!(
            read_text(&long, "big.txt", Some(2.0), None).unwrap(),
            "[Line 2 is 60.0KB, exceeds 50.0KB limit. Use bash: sed -n '2p' big.txt | head -c 51200]"
        );
    }

    #[test]
    fn offset_beyond_end_is_an_error() {
        assert_eq!(
            read_text("a\nb", "f", Some(5.0), None).unwrap_err(),
            "Offset 5 is beyond end of file (2 lines total)"
        );
    }
}
