//! Newline-delimited framing with a length limit, shared by the client's stdin
//! (`transport`) and the kernel's fd 3 (`kernel`): a line never holds more than the limit in
//! memory, however long it runs.

use std::io::{self, BufRead};

#[derive(Debug, PartialEq)]
pub(crate) enum LineRead {
    Line,
    Eof,
    /// The line was longer than the limit; it was consumed and discarded.
    TooLong(usize),
}

/// Reads one `\n`-terminated line into `buf` (without the newline), never holding more than
/// `max` bytes. A final line without a newline at EOF still counts as a line.
pub(crate) fn read_line_limited<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<LineRead> {
    buf.clear();
    let mut seen = 0usize;
    let mut discarding = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(if discarding {
                LineRead::TooLong(seen)
            } else if seen == 0 {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        seen += part.len();
        if !discarding {
            if seen > max {
                discarding = true;
                buf.clear();
                buf.shrink_to_fit();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let consumed = done.unwrap_or(chunk.len());
        reader.consume(consumed);
        if done.is_some() {
            return Ok(if discarding {
                LineRead::TooLong(seen)
            } else {
                LineRead::Line
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    fn lines(input: &[u8], max: usize) -> Vec<(LineRead, Vec<u8>)> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let r = read_line_limited(&mut reader, &mut buf, max).unwrap();
            if r == LineRead::Eof {
                return out;
            }
            out.push((r, buf.clone()));
        }
    }

    #[test]
    fn splits_lines_and_keeps_a_final_unterminated_line() {
        let got = lines(b"ab\n\ncdef\ngh", 100);
        let texts: Vec<&[u8]> = got.iter().map(|(_, b)| b.as_slice()).collect();
        assert_eq!(texts, vec![&b"ab"[..], b"", b"cdef", b"gh"]);
    }

    #[test]
    fn skips_an_overlong_line_and_recovers() {
        let got = lines(b"0123456789\nok\n", 5);
        assert_eq!(got[0].0, LineRead::TooLong(10));
        assert!(got[0].1.is_empty());
        assert_eq!(got[1], (LineRead::Line, b"ok".to_vec()));
    }
}
