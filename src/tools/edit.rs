//! The `edit` tool (behaviour spec §3.4): exact-text replacements, all matched against the
//! original file, unique and non-overlapping; BOM and line endings preserved.
//!
//! The replacement logic is pure (`apply_edits`, `edit_text`): text in, text or the spec's
//! exact error out. The tool around it only parses arguments and does the file I/O.

use std::path::Path;

use crate::base::json::json;
use serde_json::Value;

use super::read::path_location;
use super::truncate::format_size;
use super::{
    file_diff, io_error_code, open_regular, resolve_path, FileError, Tool, ToolContext, ToolOutput,
};
use crate::base::content::ToolSpec;

/// The largest file `edit` loads. An edit holds the file several times over (the original,
/// its LF- and fuzzy-normalised copies for matching, the result with its line endings
/// restored, the diff), so a cap keeps one call's memory near 100 MiB; files this large are
/// data, not source, and `bash` (`sed`) edits them without loading them.
pub(crate) const EDIT_MAX_BYTES: u64 = 16 * 1024 * 1024;

pub(crate) struct Edit;

const DESCRIPTION: &str = "Edit a single file using exact text replacement. Every edits[].oldText must match a unique, non-overlapping region of the original file. If two changes affect the same block or nearby lines, merge them into one edit instead of emitting overlapping edits. Do not include large unchanged regions just to connect distant changes.";

const INVALID: &str = "Edit tool input is invalid. edits must contain at least one replacement.";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replacement {
    pub old_text: String,
    pub new_text: String,
}

impl Tool for Edit {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "edit".to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Path to the file to edit (relative or absolute)"
                    },
                    "edits": {
                        "type": "array",
                        "description": "One or more targeted replacements. Each edit is matched against the original file, not incrementally. Do not include overlapping or nested edits. If two changes touch the same block or nearby lines, merge them into one edit instead.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "oldText": {
                                    "type": "string",
                                    "description": "Exact text for one targeted replacement. It must be unique in the original file and must not overlap with any other edits[].oldText in the same call."
                                },
                                "newText": {
                                    "type": "string",
                                    "description": "Replacement text for this targeted edit."
                                }
                            },
                            "required": ["oldText", "newText"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["path", "edits"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput {
        if ctx.abort.is_aborted() {
            return ToolOutput::error("Operation aborted");
        }
        let Some(path) = args.get("path").and_then(Value::as_str) else {
            return ToolOutput::error(
                "Validation failed for tool \"edit\": path must be a string.",
            );
        };
        let edits = match parse_edits(args) {
            Ok(e) => e,
            Err(e) => return ToolOutput::error(e),
        };
        let abs = resolve_path(ctx.cwd, path);
        // The sandbox's write rule, as its commands are held to it (base/sandbox.rs).
        if let Err(e) = ctx.sandbox.may_write(ctx.cwd, &abs) {
            return ToolOutput::error(format!("Cannot edit '{path}': {e}"));
        }
        // A client that reads and writes files: the edit applies to what its editor holds and
        // lands there (so it can show and track it).
        if let Some(files) = ctx.files.filter(|f| f.can() == (true, true)) {
            let original = match files.read_text(&abs, ctx.abort) {
                Ok(text) => text,
                Err(e) => return ToolOutput::error(format!("Could not edit file: {path}. {e}.")),
            };
            let updated = match edit_text(&original, &edits, path) {
                Ok(t) => t,
                Err(e) => return ToolOutput::error(e),
            };
            if let Err(e) = files.write_text(&abs, &updated, ctx.abort) {
                return ToolOutput::error(format!("Could not edit file: {path}. {e}."));
            }
            return ToolOutput {
                text: format!("Successfully replaced {} block(s) in {path}.", edits.len()),
                diff: file_diff(&abs, Some(original), &updated),
                ..Default::default()
            };
        }
        let could_not = |e: &std::io::Error| {
            ToolOutput::error(format!(
                "Could not edit file: {path}. Error code: {}.",
                io_error_code(e)
            ))
        };
        // Opened for writing too, so a read-only file fails before any work, like the
        // reference's R_OK|W_OK access check.
        let (mut file, meta) =
            match open_regular(&abs, std::fs::OpenOptions::new().read(true).write(true)) {
                Ok(f) => f,
                Err(FileError::Io(e)) => return could_not(&e),
                Err(FileError::NotRegular(kind)) => {
                    return ToolOutput::error(format!(
                        "Could not edit file: {path}. It is a {kind}, not a regular file."
                    ))
                }
            };
        let too_large = || {
            ToolOutput::error(format!(
                "Could not edit file: {path}. It is larger than the {} edit limit; use bash (e.g. sed) for files this large.",
                format_size(EDIT_MAX_BYTES)
            ))
        };
        if meta.len() > EDIT_MAX_BYTES {
            return too_large();
        }
        let mut bytes = Vec::new();
        // `take`: a file that grows after the `stat` is still read only up to the limit.
        let mut limited = std::io::Read::take(&mut file, EDIT_MAX_BYTES + 1);
        if let Err(e) = std::io::Read::read_to_end(&mut limited, &mut bytes) {
            return could_not(&e);
        }
        if bytes.len() as u64 > EDIT_MAX_BYTES {
            return too_large();
        }
        // Rewriting a non-UTF-8 file through a lossy decode would corrupt it: refuse.
        let Ok(original) = String::from_utf8(bytes) else {
            return ToolOutput::error(format!("Could not edit file: {path}. Error code: EILSEQ."));
        };
        let updated = match edit_text(&original, &edits, path) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(e),
        };
        if ctx.abort.is_aborted() {
            return ToolOutput::error("Operation aborted");
        }
        // Through the descriptor that was checked, never the path again.
        let written = file
            .set_len(0)
            .and_then(|()| std::io::Seek::rewind(&mut file))
            .and_then(|()| std::io::Write::write_all(&mut file, updated.as_bytes()));
        if let Err(e) = written {
            return could_not(&e);
        }
        ToolOutput {
            text: format!("Successfully replaced {} block(s) in {path}.", edits.len()),
            diff: file_diff(&abs, Some(original), &updated),
            ..Default::default()
        }
    }

    fn locations(&self, args: &Value, cwd: &Path) -> Vec<String> {
        path_location(args, cwd)
    }
}

/// `edits` from the arguments: a JSON string is parsed (some models send one), legacy
/// top-level `oldText`/`newText` are appended, and at least one replacement must remain.
pub(crate) fn parse_edits(args: &Value) -> Result<Vec<Replacement>, String> {
    let mut list: Vec<Value> = match args.get("edits") {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(a)) => a,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    if let (Some(Value::String(o)), Some(Value::String(n))) =
        (args.get("oldText"), args.get("newText"))
    {
        list.push(json!({ "oldText": o, "newText": n }));
    }
    if list.is_empty() {
        return Err(INVALID.to_owned());
    }
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            match (
                e.get("oldText").and_then(Value::as_str),
                e.get("newText").and_then(Value::as_str),
            ) {
                (Some(o), Some(n)) => Ok(Replacement {
                    old_text: o.to_owned(),
                    new_text: n.to_owned(),
                }),
                _ => Err(format!(
                    "Edit tool input is invalid. edits[{i}] must have string oldText and newText."
                )),
            }
        })
        .collect()
}

/// Applies `edits` to a whole file's text: strips and restores a BOM, matches on LF-normalised
/// text and writes the original line ending (CRLF if the first line break is CRLF) back.
pub(crate) fn edit_text(raw: &str, edits: &[Replacement], path: &str) -> Result<String, String> {
    let (bom, content) = match raw.strip_prefix('\u{FEFF}') {
        Some(rest) => ("\u{FEFF}", rest),
        None => ("", raw),
    };
    let crlf = content
        .find('\n')
        .is_some_and(|i| i > 0 && content.as_bytes()[i - 1] == b'\r');
    let normalized = normalize_to_lf(content);
    let (_, new) = apply_edits(&normalized, edits, path)?;
    let restored = if crlf { new.replace('\n', "\r\n") } else { new };
    Ok(format!("{bom}{restored}"))
}

fn normalize_to_lf(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// Tolerates what models get wrong most: trailing whitespace, typographic quotes, dashes and
/// exotic spaces. (The reference also applies Unicode NFKC, which std cannot do; not needed
/// for the characters above.)
fn normalize_fuzzy(text: &str) -> String {
    let trimmed: Vec<&str> = text.split('\n').map(str::trim_end).collect();
    trimmed
        .join("\n")
        .chars()
        .map(|c| match c {
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            c => c,
        })
        .collect()
}

/// Where `needle` is in `haystack`: exact first, else in the fuzzy-normalised texts.
/// Returns (index, length, used_fuzzy) in the text the match refers to.
fn find(haystack: &str, needle: &str) -> Option<(usize, usize, bool)> {
    if let Some(i) = haystack.find(needle) {
        return Some((i, needle.len(), false));
    }
    let h = normalize_fuzzy(haystack);
    let n = normalize_fuzzy(needle);
    if n.is_empty() {
        return None;
    }
    h.find(&n).map(|i| (i, n.len(), true))
}

/// The pure core: every edit matched against `content` (already LF-normalised), unique and
/// non-overlapping. Returns (the text the edits were matched against, the new text). When any
/// edit only matches fuzzily, the whole base becomes the fuzzy-normalised text, as in the
/// reference, so that all indices refer to one text.
pub(crate) fn apply_edits(
    content: &str,
    edits: &[Replacement],
    path: &str,
) -> Result<(String, String), String> {
    if edits.is_empty() {
        return Err(INVALID.to_owned());
    }
    let single = edits.len() == 1;
    let edits: Vec<Replacement> = edits
        .iter()
        .map(|e| Replacement {
            old_text: normalize_to_lf(&e.old_text),
            new_text: normalize_to_lf(&e.new_text),
        })
        .collect();
    for (i, e) in edits.iter().enumerate() {
        if e.old_text.is_empty() {
            return Err(if single {
                format!("oldText must not be empty in {path}.")
            } else {
                format!("edits[{i}].oldText must not be empty in {path}.")
            });
        }
    }
    let any_fuzzy = edits
        .iter()
        .any(|e| find(content, &e.old_text).is_some_and(|(_, _, fuzzy)| fuzzy));
    let base = if any_fuzzy {
        normalize_fuzzy(content)
    } else {
        content.to_owned()
    };
    let fuzzy_base = normalize_fuzzy(&base);
    // (match index, match length, edit index)
    let mut matches: Vec<(usize, usize, usize)> = Vec::new();
    for (i, e) in edits.iter().enumerate() {
        let Some((at, len, _)) = find(&base, &e.old_text) else {
            return Err(if single {
                format!("Could not find the exact text in {path}. The old text must match exactly including all whitespace and newlines.")
            } else {
                format!("Could not find edits[{i}] in {path}. The oldText must match exactly including all whitespace and newlines.")
            });
        };
        let needle = normalize_fuzzy(&e.old_text);
        let count = if needle.is_empty() {
            0
        } else {
            fuzzy_base.matches(needle.as_str()).count()
        };
        if count > 1 {
            return Err(if single {
                format!("Found {count} occurrences of the text in {path}. The text must be unique. Please provide more context to make it unique.")
            } else {
                format!("Found {count} occurrences of edits[{i}] in {path}. Each oldText must be unique. Please provide more context to make it unique.")
            });
        }
        matches.push((at, len, i));
    }
    matches.sort_unstable();
    for pair in matches.windows(2) {
        let (prev, cur) = (pair[0], pair[1]);
        if prev.0 + prev.1 > cur.0 {
            return Err(format!(
                "edits[{}] and edits[{}] overlap in {path}. Merge them into one edit or target disjoint regions.",
                prev.2, cur.2
            ));
        }
    }
    let mut new = base.clone();
    for &(at, len, i) in matches.iter().rev() {
        new.replace_range(at..at + len, &edits[i].new_text);
    }
    if new == base {
        return Err(if single {
            format!("No changes made to {path}. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected.")
        } else {
            format!("No changes made to {path}. The replacements produced identical content.")
        });
    }
    Ok((base, new))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(old: &str, new: &str) -> Replacement {
        Replacement {
            old_text: old.into(),
            new_text: new.into(),
        }
    }

    #[test]
    fn applies_edits_against_the_original() {
        let cases: Vec<(&str, Vec<Replacement>, &str)> = vec![
            ("a b c", vec![r("b", "B")], "a B c"),
            // Both matched against the original, applied together; order does not matter.
            (
                "one two three",
                vec![r("three", "3"), r("one", "1")],
                "1 two 3",
            ),
            // The second oldText is what the first newText produces: it is NOT re-matched.
            ("x\ny\n", vec![r("x", "y1"), r("y\n", "z\n")], "y1\nz\n"),
            // `$` has no special meaning.
            ("cost", vec![r("cost", "$1 $&")], "$1 $&"),
            // Adjacent but disjoint regions are fine.
            ("abcd", vec![r("ab", "AB"), r("cd", "CD")], "ABCD"),
            // Fuzzy: typographic quotes and trailing spaces in the file.
            (
                "say “hi”  \nend",
                vec![r("say \"hi\"", "say 'yo'")],
                "say 'yo'\nend",
            ),
        ];
        for (content, edits, want) in cases {
            let (_, got) = apply_edits(content, &edits, "f.txt").unwrap();
            assert_eq!(got, want, "{content:?} {edits:?}");
        }
    }

    #[test]
    fn every_error_text_is_exact() {
        let p = "src/f.rs";
        let err =
            |content: &str, edits: Vec<Replacement>| apply_edits(content, &edits, p).unwrap_err();
        assert_eq!(err("abc", vec![]), INVALID);
        assert_eq!(
            err("abc", vec![r("", "x")]),
            "oldText must not be empty in src/f.rs."
        );
        assert_eq!(
            err("abc", vec![r("a", "x"), r("", "y")]),
            "edits[1].oldText must not be empty in src/f.rs."
        );
        assert_eq!(
            err("abc", vec![r("zz", "x")]),
            "Could not find the exact text in src/f.rs. The old text must match exactly including all whitespace and newlines."
        );
        assert_eq!(
            err("abc", vec![r("a", "x"), r("zz", "y")]),
            "Could not find edits[1] in src/f.rs. The oldText must match exactly including all whitespace and newlines."
        );
        assert_eq!(
            err("a a a", vec![r("a", "b")]),
            "Found 3 occurrences of the text in src/f.rs. The text must be unique. Please provide more context to make it unique."
        );
        assert_eq!(
            err("x a a", vec![r("x", "y"), r("a", "b")]),
            "Found 2 occurrences of edits[1] in src/f.rs. Each oldText must be unique. Please provide more context to make it unique."
        );
        assert_eq!(
            err("abcdef", vec![r("cde", "1"), r("abcd", "2")]),
            "edits[1] and edits[0] overlap in src/f.rs. Merge them into one edit or target disjoint regions."
        );
        assert_eq!(
            err("abc", vec![r("b", "b")]),
            "No changes made to src/f.rs. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected."
        );
        assert_eq!(
            err("abc", vec![r("a", "a"), r("c", "c")]),
            "No changes made to src/f.rs. The replacements produced identical content."
        );
    }

    #[test]
    fn bom_and_crlf_are_preserved() {
        let raw = "\u{FEFF}first\r\nsecond\r\nthird\r\n";
        let got = edit_text(raw, &[r("second\nthird", "2\n3")], "f").unwrap();
        assert_eq!(got, "\u{FEFF}first\r\n2\r\n3\r\n");
        // oldText written with CRLF matches too.
        let got = edit_text(raw, &[r("first\r\n", "1\r\n")], "f").unwrap();
        assert_eq!(got, "\u{FEFF}1\r\nsecond\r\nthird\r\n");
        // LF files stay LF.
        assert_eq!(edit_text("a\nb\n", &[r("b", "c")], "f").unwrap(), "a\nc\n");
    }

    #[test]
    fn arguments_fold_legacy_fields_and_parse_json_strings() {
        let args = json!({"path":"f","oldText":"a","newText":"b"});
        assert_eq!(parse_edits(&args).unwrap(), vec![r("a", "b")]);
        let args = json!({"path":"f","edits":"[{\"oldText\":\"x\",\"newText\":\"y\"}]","oldText":"a","newText":"b"});
        assert_eq!(parse_edits(&args).unwrap(), vec![r("x", "y"), r("a", "b")]);
        assert_eq!(
            parse_edits(&json!({"path":"f","edits":[]})).unwrap_err(),
            INVALID
        );
        assert_eq!(
            parse_edits(&json!({"path":"f","edits":"nope"})).unwrap_err(),
            INVALID
        );
        assert!(parse_edits(&json!({"path":"f","edits":[{"oldText":1}]}))
            .unwrap_err()
            .contains("edits[0]"));
    }
}
