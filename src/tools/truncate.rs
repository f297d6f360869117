//! Output truncation shared by `bash` (keeps the tail) and `read` (keeps the head), plus the
//! size formatting their notices use. Pure functions: the notices built from these results are
//! protocol-visible (behaviour spec §3.3/§3.5), so the arithmetic mirrors the reference
//! implementation exactly: a "line" is a piece of `text.split('\n')`, sizes are UTF-8 bytes.

use crate::base::content::tail_bytes;

/// Line limit of a tool result.
pub(crate) const MAX_LINES: usize = 2000;
/// Byte limit of a tool result (50 KB).
pub(crate) const MAX_BYTES: usize = 50 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Truncation {
    pub content: String,
    pub truncated: bool,
    /// `true`: the line limit cut the output; `false`: the byte limit did (when `truncated`).
    pub by_lines: bool,
    pub total_lines: usize,
    pub output_lines: usize,
    pub output_bytes: usize,
    /// Tail only: the last line alone exceeded the byte limit, so only its end is kept.
    pub last_line_partial: bool,
    /// Head only: the first line alone exceeded the byte limit, so nothing is kept.
    pub first_line_exceeds_limit: bool,
}

impl Truncation {
    fn whole(content: &str, total_lines: usize) -> Truncation {
        Truncation {
            content: content.to_owned(),
            truncated: false,
            by_lines: false,
            total_lines,
            output_lines: total_lines,
            output_bytes: content.len(),
            last_line_partial: false,
            first_line_exceeds_limit: false,
        }
    }
}

/// `1023B`, `50.0KB`, `1.5MB` (the reference `formatSize`).
pub(crate) fn format_size(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes}B")
    } else if bytes < 1024 * 1024 {
        format!("{:.1}KB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1}MB", bytes as f64 / (1024.0 * 1024.0))
    }
}

/// Keeps whole lines from the start until either limit is hit (`read` streams its own; this
/// in-memory form is its reference in the tests).
#[cfg(test)]
pub(crate) fn truncate_head(content: &str, max_lines: usize, max_bytes: usize) -> Truncation {
    let lines: Vec<&str> = content.split('\n').collect();
    let total_lines = lines.len();
    if total_lines <= max_lines && content.len() <= max_bytes {
        return Truncation::whole(content, total_lines);
    }
    let mut out = Truncation {
        content: String::new(),
        truncated: true,
        by_lines: false,
        total_lines,
        output_lines: 0,
        output_bytes: 0,
        last_line_partial: false,
        first_line_exceeds_limit: false,
    };
    if lines[0].len() > max_bytes {
        out.first_line_exceeds_limit = true;
        return out;
    }
    let mut kept = 0usize;
    let mut bytes = 0usize;
    let mut by_lines = true;
    for (i, line) in lines.iter().enumerate().take(max_lines) {
        let cost = line.len() + usize::from(i > 0);
        if bytes + cost > max_bytes {
            by_lines = false;
            break;
        }
        kept += 1;
        bytes += cost;
    }
    if kept >= max_lines && bytes <= max_bytes {
        by_lines = true;
    }
    out.content = lines[..kept].join("\n");
    out.by_lines = by_lines;
    out.output_lines = kept;
    out.output_bytes = out.content.len();
    out
}

/// Keeps whole lines from the end until either limit is hit (for `bash`). When the last
/// non-empty line alone is too long, keeps the end of it (cut at a char boundary) so that the
/// model always sees some output: empty pieces after it (a final newline) do not count as
/// "something kept" and take their share of the byte budget.
pub(crate) fn truncate_tail(content: &str, max_lines: usize, max_bytes: usize) -> Truncation {
    let lines: Vec<&str> = content.split('\n').collect();
    let total_lines = lines.len();
    if total_lines <= max_lines && content.len() <= max_bytes {
        return Truncation::whole(content, total_lines);
    }
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0usize;
    let mut by_lines = true;
    let mut last_line_partial = false;
    for line in lines.iter().rev() {
        if kept.len() >= max_lines {
            break;
        }
        let cost = line.len() + usize::from(!kept.is_empty());
        if bytes + cost > max_bytes {
            by_lines = false;
            // Only empty pieces so far (`"…\n"` ends in one): without the end of this line
            // the model would see nothing at all.
            if kept.iter().all(|l| l.is_empty()) {
                let separator = usize::from(!kept.is_empty());
                let budget = max_bytes.saturating_sub(bytes + separator);
                let end = tail_bytes(line, budget);
                kept.push(end);
                bytes += end.len() + separator;
                last_line_partial = true;
            }
            break;
        }
        kept.push(line);
        bytes += cost;
    }
    if kept.len() >= max_lines && bytes <= max_bytes {
        by_lines = true;
    }
    kept.reverse();
    let content = kept.join("\n");
    Truncation {
        output_bytes: content.len(),
        content,
        truncated: true,
        by_lines,
        total_lines,
        output_lines: kept.len(),
        last_line_partial,
        first_line_exceeds_limit: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_format_like_the_reference() {
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(1023), "1023B");
        assert_eq!(format_size(1024), "1.0KB");
        assert_eq!(format_size(51200), "50.0KB");
        assert_eq!(format_size(1536 * 1024), "1.5MB");
    }

    #[test]
    fn small_content_is_untouched() {
        for f in [truncate_head, truncate_tail] {
            let t = f("a\nb\n", 3, 100);
            assert!(!t.truncated);
            assert_eq!(t.content, "a\nb\n");
            assert_eq!(t.total_lines, 3);
        }
    }

    #[test]
    fn head_by_lines_and_by_bytes() {
        let t = truncate_head("1\n2\n3\n4", 2, 100);
        assert_eq!(
            (t.content.as_str(), t.by_lines, t.output_lines),
            ("1\n2", true, 2)
        );
        assert_eq!(t.total_lines, 4);
        let t = truncate_head("aaaa\nbbbb\ncccc", 10, 9);
        assert_eq!((t.content.as_str(), t.by_lines), ("aaaa\nbbbb", false));
        let t = truncate_head("aaaaaaaaaaaa\nb", 10, 5);
        assert!(t.first_line_exceeds_limit);
        assert_eq!(t.content, "");
    }

    #[test]
    fn tail_by_lines_and_by_bytes() {
        let t = truncate_tail("1\n2\n3\n4", 2, 100);
        assert_eq!(
            (t.content.as_str(), t.by_lines, t.output_lines),
            ("3\n4", true, 2)
        );
        let t = truncate_tail("aaaa\nbbbb\ncccc", 10, 9);
        assert_eq!((t.content.as_str(), t.by_lines), ("bbbb\ncccc", false));
    }

    #[test]
    fn tail_always_keeps_the_end_of_the_last_non_empty_line() {
        // (input, max_lines, max_bytes) → (content, output_lines, by_lines, last_line_partial)
        let cases: &[(&str, usize, usize, &str, usize, bool, bool)] = &[
            // No final newline: the last line itself is cut.
            ("x\nabcdefgh", 10, 4, "efgh", 1, false, true),
            // A final newline must not hide the line before it (it used to leave nothing).
            ("x\nabcdefgh\n", 10, 4, "fgh\n", 2, false, true),
            ("short\nabcdefgh\n", 10, 4, "fgh\n", 2, false, true),
            // Several empty lines at the end: each keeps its newline inside the budget.
            ("abcdefgh\n\n", 10, 5, "fgh\n\n", 3, false, true),
            // A char boundary is respected inside the remaining budget.
            ("x\nxéé\n", 10, 4, "é\n", 2, false, true),
            // Something non-empty fits: whole lines only, nothing partial.
            ("aaaa\nbbbb\n", 10, 6, "bbbb\n", 2, false, false),
            ("aaaaaaaa\nbb\n", 10, 4, "bb\n", 2, false, false),
            // The line limit still counts the final empty piece, as the reference does.
            ("1\n2\n3\n", 2, 100, "3\n", 2, true, false),
        ];
        for &(input, lines, bytes, content, out_lines, by_lines, partial) in cases {
            let t = truncate_tail(input, lines, bytes);
            assert!(t.truncated, "{input:?}");
            assert_eq!(
                (
                    t.content.as_str(),
                    t.output_lines,
                    t.by_lines,
                    t.last_line_partial
                ),
                (content, out_lines, by_lines, partial),
                "{input:?}"
            );
            assert_eq!(t.output_bytes, t.content.len(), "{input:?}");
            assert!(t.output_bytes <= bytes, "{input:?}");
        }
    }

    #[test]
    fn tail_keeps_the_end_of_an_overlong_last_line() {
        let t = truncate_tail("x\nabcdéfgh", 10, 4);
        assert!(t.last_line_partial);
        assert_eq!(t.content, "fgh".to_owned() + "");
        assert_eq!(tail_bytes("abcdéfgh", 4), "fgh");
        assert_eq!(tail_bytes("abcdéfgh", 5), "éfgh");
    }
}
