//! The `read` tool (behaviour spec §3.5): text files with head truncation and continuation
//! notices, images (jpg/png/gif/webp) as base64 attachments. Also the std-only base64 encoder.
//!
//! Only regular files are read (a FIFO would block for ever, `/dev/zero` never ends), and text
//! is streamed: whatever the file's size, memory holds one read buffer, the lines kept for the
//! result (at most `MAX_BYTES`) and the line being read (also capped), while the whole file is
//! scanned for its line count.

use std::io::Read as _;
use std::path::Path;

use crate::base::json::json;
use serde_json::Value;

use super::truncate::{format_size, MAX_BYTES, MAX_LINES};
use super::{
    io_error_code, io_error_text, open_regular, resolve_path, FileError, Tool, ToolContext,
    ToolOutput,
};
use crate::base::abort::AbortFlag;
use crate::base::content::Image;
use crate::base::content::ToolSpec;

/// Bytes read from the file at a time.
const READ_CHUNK: usize = 64 * 1024;
/// The largest image attached whole: its base64 stays within the 10,000,000 characters the
/// `ipython` tool allows one attachment (§3.2).
const IMAGE_MAX_BYTES: u64 = 7_500_000;

pub(crate) struct Read;

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
        // A client that serves files sees unsaved buffers: text comes from it (images, which
        // `fs/read_text_file` cannot carry, stay local). Its errors are the tool's errors.
        if let Some(files) = ctx.files.filter(|f| f.can().0) {
            if image_mime(&abs).is_none() {
                return match files.read_text(&abs, ctx.abort) {
                    Ok(text) => {
                        match read_stream(text.as_bytes(), path, offset, limit, ctx.abort) {
                            Ok(Ok(out)) => ToolOutput::ok(out),
                            Ok(Err(e)) => ToolOutput::error(e),
                            Err(e) => ToolOutput::error(e.to_string()),
                        }
                    }
                    Err(e) => ToolOutput::error(e),
                };
            }
        }
        let io_error = |e: &std::io::Error, op: &str| {
            ToolOutput::error(format!(
                "{}: {}, {op} '{}'",
                io_error_code(e),
                io_error_text(e),
                abs.display()
            ))
        };
        let (file, meta) = match open_regular(&abs, std::fs::OpenOptions::new().read(true)) {
            Ok(f) => f,
            Err(FileError::Io(e)) => return io_error(&e, "access"),
            Err(FileError::NotRegular(kind)) => {
                return ToolOutput::error(format!(
                    "Cannot read '{}': it is a {kind}, not a regular file. read only reads regular files.",
                    abs.display()
                ))
            }
        };
        if let Some(mime) = image_mime(&abs) {
            if meta.len() > IMAGE_MAX_BYTES {
                return ToolOutput::error(format!(
                    "Cannot attach '{}': the image is {}, above the {} limit.",
                    abs.display(),
                    format_size(meta.len()),
                    format_size(IMAGE_MAX_BYTES)
                ));
            }
            let mut bytes = Vec::new();
            // `take`: a file that grows after the `stat` still cannot exceed the limit.
            if let Err(e) = file.take(IMAGE_MAX_BYTES).read_to_end(&mut bytes) {
                return io_error(&e, "read");
            }
            return ToolOutput {
                text: format!("Read image file [{mime}]"),
                images: vec![Image {
                    data: base64_encode(&bytes),
                    mime_type: mime.to_owned(),
                }],
                ..Default::default()
            };
        }
        match read_stream(file, path, offset, limit, ctx.abort) {
            Ok(Ok(out)) => ToolOutput::ok(out),
            Ok(Err(e)) => ToolOutput::error(e),
            Err(e) => io_error(&e, "read"),
        }
    }

    fn locations(&self, args: &Value, cwd: &Path) -> Vec<String> {
        path_location(args, cwd)
    }
}

/// The `path` argument as an absolute path, for ACP `locations`.
pub(crate) fn path_location(args: &Value, cwd: &Path) -> Vec<String> {
    args.get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(|p| vec![resolve_path(cwd, p).display().to_string()])
        .unwrap_or_default()
}

/// The image type of `path` by its extension (`None`: not an image we send).
pub(crate) fn image_mime(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    })
}

/// The notice after a truncated `read`: which lines were shown and where to continue;
/// `limit` names the byte limit when that, not the line limit, cut the output.
fn showing_notice(first: usize, last: usize, total: usize, limit: Option<&str>) -> String {
    let next = last + 1;
    match limit {
        Some(limit) => format!(
            "\n\n[Showing lines {first}-{last} of {total} ({limit} limit). Use offset={next} to continue.]"
        ),
        None => format!(
            "\n\n[Showing lines {first}-{last} of {total}. Use offset={next} to continue.]"
        ),
    }
}

/// The pure text part of `read` over a string: the in-memory form `read_stream` is held
/// equal to.
#[cfg(test)]
fn read_text(
    text: &str,
    path: &str,
    offset: Option<f64>,
    limit: Option<f64>,
) -> Result<String, String> {
    read_stream(text.as_bytes(), path, offset, limit, &AbortFlag::new())
        .unwrap_or_else(|e| Err(e.to_string()))
}

/// The text part of `read`: offset/limit selection, head truncation, exact notices, as if the
/// whole (lossily decoded) file were split on `\n` (the reference's arithmetic), but streamed
/// from `src`. `offset`/`limit` are the raw numbers the model sent (fractions are floored, as
/// slicing does). The outer `Err` is a read error, the inner one the tool's error text.
pub(crate) fn read_stream(
    mut src: impl std::io::Read,
    path: &str,
    offset: Option<f64>,
    limit: Option<f64>,
    abort: &AbortFlag,
) -> std::io::Result<Result<String, String>> {
    // `offset` is 1-indexed; 0 or absent means the start.
    let start = match offset {
        Some(o) if o.is_finite() && o >= 1.0 => (o.floor() as usize).saturating_sub(1),
        Some(o) if o.is_nan() => 0,
        Some(o) if o == f64::INFINITY => usize::MAX,
        _ => 0,
    };
    let count = limit.map(|l| {
        if l.is_finite() && l > 0.0 {
            l.floor() as usize
        } else if l == f64::INFINITY {
            usize::MAX
        } else {
            0
        }
    });
    let mut scan = HeadScan::new(start, count.map_or(usize::MAX, |n| start.saturating_add(n)));
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        if abort.is_aborted() {
            return Ok(Err("Operation aborted".to_owned()));
        }
        match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => scan.feed(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    scan.end_line();
    let total = scan.line;
    if start >= total {
        let shown = offset.map(super::bash::js_number).unwrap_or_default();
        return Ok(Err(format!(
            "Offset {shown} is beyond end of file ({total} lines total)"
        )));
    }
    let user_limited = count.map(|n| start.saturating_add(n).min(total) - start);
    let truncated = scan.selected_lines > MAX_LINES || scan.selected_bytes > MAX_BYTES as u64;
    let first = start + 1;
    let limit_size = format_size(MAX_BYTES as u64);
    if truncated && scan.first_len > MAX_BYTES as u64 {
        let size = format_size(scan.first_len);
        return Ok(Ok(format!(
            "[Line {first} is {size}, exceeds {limit_size} limit. Use bash: sed -n '{first}p' {path} | head -c {MAX_BYTES}]"
        )));
    }
    let mut out = scan.kept;
    if truncated {
        let last = first + scan.kept_lines - 1;
        let limit = scan.byte_limit_hit.then_some(limit_size.as_str());
        out.push_str(&showing_notice(first, last, total, limit));
    } else if let Some(n) = user_limited.filter(|n| start + n < total) {
        let remaining = total - (start + n);
        let next = start + n + 1;
        out.push_str(&format!(
            "\n\n[{remaining} more lines in file. Use offset={next} to continue.]"
        ));
    }
    Ok(Ok(out))
}

/// Streaming head truncation of the lines `start..end` (0-based, `end` exclusive) of a file:
/// the arithmetic of `truncate::truncate_head` on the selection, one line at a time. Sizes are
/// those of the lossily decoded text, like the in-memory version.
struct HeadScan {
    start: usize,
    end: usize,
    /// Index of the line being read; after the last `end_line`, the number of lines.
    line: usize,
    /// The current line's bytes while it could still be kept (at most `MAX_BYTES`).
    cur: Vec<u8>,
    /// The current line outgrew `MAX_BYTES`: it cannot be kept, only its size is counted.
    cur_overflow: Option<LossyLen>,
    /// Lines kept for the result, joined with `\n`, and how many.
    kept: String,
    kept_lines: usize,
    /// Still keeping lines: neither limit was hit yet.
    keeping: bool,
    /// Keeping stopped at the byte limit (else, if at all, at the line limit).
    byte_limit_hit: bool,
    /// Lines and (saturating) decoded bytes of the whole selection, separators included.
    selected_lines: usize,
    selected_bytes: u64,
    /// Decoded size of the first selected line.
    first_len: u64,
}

impl HeadScan {
    fn new(start: usize, end: usize) -> HeadScan {
        HeadScan {
            start,
            end,
            line: 0,
            cur: Vec::new(),
            cur_overflow: None,
            kept: String::new(),
            kept_lines: 0,
            keeping: true,
            byte_limit_hit: false,
            selected_lines: 0,
            selected_bytes: 0,
            first_len: 0,
        }
    }

    /// Whether the current line's bytes matter (else only its end is counted).
    fn wants_bytes(&self) -> bool {
        self.keeping && self.line >= self.start && self.line < self.end
    }

    fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.line < self.start {
                // Before the selection only newlines matter, up to the line it starts at.
                let want = self.start - self.line;
                let mut seen = 0;
                let mut cut = chunk.len();
                for (i, _) in chunk.iter().enumerate().filter(|(_, &b)| b == b'\n') {
                    seen += 1;
                    if seen == want {
                        cut = i + 1;
                        break;
                    }
                }
                self.line += seen;
                chunk = &chunk[cut..];
            } else if !self.wants_bytes() {
                // Past what is kept (the result is already known to be truncated, or the
                // selection has ended): only the line count is left to find.
                self.line += chunk.iter().filter(|&&b| b == b'\n').count();
                return;
            } else if let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                self.bytes(&chunk[..i]);
                self.end_line();
                chunk = &chunk[i + 1..];
            } else {
                self.bytes(chunk);
                return;
            }
        }
    }

    fn bytes(&mut self, seg: &[u8]) {
        if !self.wants_bytes() {
            return;
        }
        if let Some(len) = &mut self.cur_overflow {
            len.feed(seg);
        } else if self.cur.len() + seg.len() <= MAX_BYTES {
            self.cur.extend_from_slice(seg);
        } else {
            // More raw bytes than the limit: its decoded text is longer still, so it cannot
            // be kept. Only its size is counted from here on (for the first-line notice).
            let mut len = LossyLen::default();
            len.feed(&self.cur);
            len.feed(seg);
            self.cur = Vec::new();
            self.cur_overflow = Some(len);
        }
    }

    /// Ends the current line (at a `\n`, or at the end of the file).
    fn end_line(&mut self) {
        if self.line >= self.start && self.line < self.end {
            self.selected_lines += 1;
            let sep = u64::from(self.selected_lines > 1);
            if self.wants_bytes() {
                let (text, len) = match self.cur_overflow.take() {
                    Some(l) => (None, l.finish()),
                    None => {
                        let t = String::from_utf8_lossy(&self.cur).into_owned();
                        let n = t.len() as u64;
                        (Some(t), n)
                    }
                };
                self.cur.clear();
                if self.line == self.start {
                    self.first_len = len;
                }
                self.selected_bytes = self.selected_bytes.saturating_add(len + sep);
                match text {
                    Some(t)
                        if self.kept_lines < MAX_LINES
                            && self.kept.len() as u64 + len + sep <= MAX_BYTES as u64 =>
                    {
                        if sep == 1 {
                            self.kept.push('\n');
                        }
                        self.kept.push_str(&t);
                        self.kept_lines += 1;
                    }
                    _ => {
                        self.keeping = false;
                        self.byte_limit_hit = self.kept_lines < MAX_LINES;
                    }
                }
            } else {
                // Not kept: the limits are already exceeded, the size no longer matters.
                self.selected_bytes = self.selected_bytes.saturating_add(sep);
            }
        }
        self.line += 1;
    }
}
/// The length of `String::from_utf8_lossy` of a byte stream fed in pieces: every maximal
/// invalid sequence counts as one U+FFFD (3 bytes), even when a piece boundary splits it.
#[derive(Default)]
struct LossyLen {
    len: u64,
    /// An incomplete sequence at the end of the last piece (at most 3 bytes).
    carry: Vec<u8>,
}

impl LossyLen {
    fn feed(&mut self, bytes: &[u8]) {
        let joined;
        let mut rest = if self.carry.is_empty() {
            bytes
        } else {
            let mut v = std::mem::take(&mut self.carry);
            v.extend_from_slice(bytes);
            joined = v;
            &joined[..]
        };
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.len += s.len() as u64;
                    return;
                }
                Err(e) => {
                    self.len += e.valid_up_to() as u64;
                    match e.error_len() {
                        Some(n) => {
                            self.len += 3;
                            rest = &rest[e.valid_up_to() + n..];
                        }
                        None => {
                            self.carry = rest[e.valid_up_to()..].to_vec();
                            return;
                        }
                    }
                }
            }
        }
    }

    fn finish(mut self) -> u64 {
        if !self.carry.is_empty() {
            self.len += 3;
            self.carry.clear();
        }
        self.len
    }
}

/// Standard base64 with padding (RFC 4648 §4).
pub(crate) fn base64_encode(data: &[u8]) -> String {
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

    /// The in-memory `read` this module had before streaming: the oracle the streamed one
    /// must agree with, byte for byte.
    fn oracle(
        text: &str,
        path: &str,
        offset: Option<f64>,
        limit: Option<f64>,
    ) -> Result<String, String> {
        use crate::tools::truncate::truncate_head;
        let all: Vec<&str> = text.split('\n').collect();
        let total = all.len();
        let start = match offset {
            Some(o) if o.is_finite() && o >= 1.0 => (o.floor() as usize).saturating_sub(1),
            _ => 0,
        };
        if start >= total {
            let shown = offset
                .map(crate::tools::bash::js_number)
                .unwrap_or_default();
            return Err(format!(
                "Offset {shown} is beyond end of file ({total} lines total)"
            ));
        }
        let (selected, user_limited) = match limit {
            Some(l) => {
                let l = if l > 0.0 { l.floor() as usize } else { 0 };
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
            let limit = (!t.by_lines).then_some(limit_size.as_str());
            out.push_str(&showing_notice(first, last, total, limit));
        } else if let Some(n) = user_limited.filter(|n| start + n < total) {
            out.push_str(&format!(
                "\n\n[{} more lines in file. Use offset={} to continue.]",
                total - (start + n),
                start + n + 1
            ));
        }
        Ok(out)
    }

    /// A reader that hands out at most `piece` bytes per call, to move chunk boundaries.
    struct Pieces<'a> {
        data: &'a [u8],
        piece: usize,
    }

    impl std::io::Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.piece.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// A small deterministic generator (xorshift), so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below.max(1)
        }
    }

    #[test]
    fn streamed_read_agrees_with_the_in_memory_one() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let pieces = [
            b"x".as_slice(),
            "é".as_bytes(),
            "€".as_bytes(),
            b"\xFF",
            b"\xE2\x82",
            b"\r",
        ];
        let mut seen = [0; 6];
        for case in 0..200 {
            let lines = match case % 4 {
                0 => rng.next(8),
                1 => rng.next(3000),
                _ => 1500 + rng.next(1000),
            };
            let wide = case % 5 == 0;
            let mut data = Vec::new();
            for i in 0..lines {
                let len = if wide && i == lines / 2 {
                    60_000
                } else {
                    rng.next(if wide { 400 } else { [3, 40][(case / 4) % 2] })
                };
                for _ in 0..len {
                    data.extend_from_slice(pieces[rng.next(pieces.len() as u64) as usize]);
                }
                if i + 1 < lines || rng.next(2) == 0 {
                    data.push(b'\n');
                }
            }
            let text = String::from_utf8_lossy(&data).into_owned();
            let offset = match rng.next(4) {
                0 => None,
                1 => Some(0.0),
                _ => Some(rng.next(lines + 3) as f64 + 0.5),
            };
            let limit = match rng.next(3) {
                0 => None,
                _ => Some(rng.next(lines + 3) as f64),
            };
            let piece = [1, 3, 7, 4096, 1 << 20][rng.next(5) as usize];
            let got = read_stream(
                Pieces { data: &data, piece },
                "f",
                offset,
                limit,
                &AbortFlag::new(),
            )
            .unwrap();
            let want = oracle(&text, "f", offset, limit);
            assert!(got == want, "case {case} ({lines} lines, offset {offset:?}, limit {limit:?}, piece {piece}): streamed and in-memory reads differ");
            let kind = match &want {
                Err(_) => 0,
                Ok(t) if t.starts_with("[Line ") => 1,
                Ok(t) if t.contains("(50.0KB limit). Use offset=") => 2,
                Ok(t) if t.contains("\n\n[Showing lines ") => 3,
                Ok(t) if t.contains(" more lines in file.") => 4,
                Ok(_) => 5,
            };
            seen[kind] += 1;
        }
        // Every outcome was exercised: offset error, long first line, byte limit, line
        // limit, user limit, whole selection.
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    #[test]
    fn lossy_length_survives_any_split() {
        let data = b"a\xE2\x82\xACb\xE2\x82c\xF0\x9F\x98\x80\xFF\xFE\xC3";
        let want = String::from_utf8_lossy(data).len() as u64;
        for cut in 0..=data.len() {
            for cut2 in cut..=data.len() {
                let mut l = LossyLen::default();
                l.feed(&data[..cut]);
                l.feed(&data[cut..cut2]);
                l.feed(&data[cut2..]);
                assert_eq!(l.finish(), want, "split at {cut}/{cut2}");
            }
        }
    }

    #[test]
    fn a_huge_file_is_read_with_bounded_memory_and_an_abort_stops_the_scan() {
        // An endless source (like /dev/zero behind a regular-looking file): the scan keeps
        // only what the result needs and still stops when the turn is cancelled.
        struct Endless {
            left: u64,
            abort_at: u64,
            abort: AbortFlag,
        }
        impl std::io::Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.left == self.abort_at {
                    self.abort.abort();
                }
                let n = (buf.len() as u64).min(self.left) as usize;
                buf[..n].fill(b'z');
                if n > 0 {
                    buf[0] = b'\n';
                }
                self.left -= n as u64;
                Ok(n)
            }
        }
        let abort = AbortFlag::new();
        let src = Endless {
            left: 1 << 40,
            abort_at: (1 << 40) - (64 << 20),
            abort: abort.clone(),
        };
        let got = read_stream(src, "f", None, None, &abort).unwrap();
        assert_eq!(got, Err("Operation aborted".to_owned()));
        // 64 MiB in 64 KiB reads, each starting with a newline: 1025 lines, the first empty.
        let src = Endless {
            left: 64 << 20,
            abort_at: u64::MAX,
            abort: AbortFlag::new(),
        };
        let out = read_stream(src, "f", None, Some(1.0), &AbortFlag::new())
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            "\n\n[1024 more lines in file. Use offset=2 to continue.]"
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
