//! A pure Server-Sent Events decoder: fed raw bytes in whatever pieces the socket delivers,
//! it yields complete events. No IO, so it is table-tested byte by byte.
//!
//! Follows the WHATWG `text/event-stream` rules that matter for model APIs: lines end in CRLF,
//! LF or CR (a CR at the end of one read may be followed by the LF of the next); `:` starts a
//! comment (keep-alive); `data:` lines of one event are joined with `\n`; `event:` names it;
//! a blank line dispatches. Bytes become text only at line boundaries, so a UTF-8 character
//! split across reads is never mangled.

/// One dispatched event. `event` is empty when the stream did not name it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    pub event: String,
    pub data: String,
}

/// The most one event (its pending line plus its data) may hold. Model events are small; a
/// server that streams without ever ending a line or an event must not grow memory forever.
pub(crate) const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// The current event outgrew `MAX_EVENT_BYTES`; the stream is unusable.
    overflow: bool,
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The last byte seen was a CR: a following LF belongs to the same line end.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    /// Delivered events handed back (`recycle`), whose strings the next events reuse.
    spare: Vec<SseEvent>,
    /// The capacity of `spare`'s strings, bounded by `SPARE_BYTES`.
    spare_bytes: usize,
}

/// Recycled events kept at most: all that one 16 KiB read can deliver (an event is at least
/// `data:x` and a blank line), so a fast local server's burst of small events allocates nothing
/// either. Fewer (64 once) left a read of ~100 deltas allocating and freeing a third of its
/// events' strings, and under musl's allocator that emptied and unmapped a page of slots every
/// read: a TLB shootdown across cores per read, a tenth of the static build's turn thread.
const SPARE_EVENTS: usize = 2048;
/// The most the spare strings may hold together, and the largest data string kept.
const SPARE_BYTES: usize = 256 * 1024;
const SPARE_CAPACITY: usize = 64 * 1024;

impl SseDecoder {
    pub(crate) fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// True once an event outgrew `MAX_EVENT_BYTES`; nothing more is decoded.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflow
    }

    /// Feeds one read's worth of bytes; complete events are appended to `out`.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) {
        if self.overflow || self.line.len() + self.data.len() + bytes.len() > MAX_EVENT_BYTES {
            self.overflow = true;
            self.line = Vec::new();
            self.data = String::new();
            return;
        }
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match line_end(bytes) {
                Some(i) => {
                    self.after_cr = bytes[i] == b'\r';
                    if self.line.is_empty() {
                        // The whole line is in this read (the usual case): no copy.
                        self.process_line(&bytes[..i], out);
                    } else {
                        self.line.extend_from_slice(&bytes[..i]);
                        let line = std::mem::take(&mut self.line);
                        self.process_line(&line, out);
                        // Reuse the allocation for the next line.
                        self.line = line;
                        self.line.clear();
                    }
                    bytes = &bytes[i + 1..];
                }
                None => {
                    self.line.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
    }

    /// The stream ended: an unterminated last line and an event without its closing blank line
    /// are still delivered (servers that drop the final blank line exist).
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
        }
        self.dispatch(out);
        self.after_cr = false;
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // A comment, typically a keep-alive.
        }
        // Valid UTF-8 (the norm) is borrowed after a fast check; the lossy path only repairs.
        let text = match std::str::from_utf8(line) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(line),
        };
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            // `id` and `retry` only matter for reconnecting EventSource clients.
            _ => {}
        }
    }

    /// Hands a delivered event back: the next event's strings reuse its allocations, so a
    /// stream of small events allocates nothing per event once warm.
    pub(crate) fn recycle(&mut self, event: SseEvent) {
        let bytes = spare_bytes(&event);
        if self.spare.len() < SPARE_EVENTS
            && event.data.capacity() <= SPARE_CAPACITY
            && self.spare_bytes + bytes <= SPARE_BYTES
        {
            self.spare_bytes += bytes;
            self.spare.push(event);
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.has_data {
            let (event, data) = match self.spare.pop() {
                Some(s) => {
                    self.spare_bytes -= spare_bytes(&s);
                    (s.event, s.data)
                }
                None => (String::new(), String::new()),
            };
            out.push(SseEvent {
                event: std::mem::replace(&mut self.event, event),
                data: std::mem::replace(&mut self.data, data),
            });
        }
        self.event.clear();
        self.data.clear();
        self.has_data = false;
    }
}

/// The index of the first CR or LF in `bytes`. Eight bytes at a time: the static build's
/// opt-level s leaves the byte-at-a-time search unvectorised, and it scans every streamed byte.
fn line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const LF: u64 = u64::from_ne_bytes([b'\n'; 8]);
    const CR: u64 = u64::from_ne_bytes([b'\r'; 8]);
    // A word has a zero byte where `v.wrapping_sub(ONES) & !v & HIGHS` is non-zero.
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS != 0;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let v = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
        if has_zero(v ^ LF) || has_zero(v ^ CR) {
            break;
        }
        at += 8;
    }
    bytes[at..]
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map(|i| at + i)
}

/// What a kept event holds on the heap.
fn spare_bytes(event: &SseEvent) -> usize {
    event.event.capacity() + event.data.capacity()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_end_finds_the_first_cr_or_lf_wherever_it_is() {
        for len in 0..40 {
            for at in 0..=len {
                for end in [b'\n', b'\r'] {
                    let mut bytes: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                    // Bytes one off the line ends, which the word test must not match.
                    bytes.iter_mut().step_by(3).for_each(|b| *b = 0x0b);
                    if at < len {
                        bytes[at] = end;
                    }
                    let want = bytes.iter().position(|&b| b == b'\n' || b == b'\r');
                    assert_eq!(line_end(&bytes), want, "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn a_reads_worth_of_small_events_is_recycled_whole() {
        // One 16 KiB read of 160-byte events, as a fast local server streams them.
        let event = format!("data: {}\n\n", "x".repeat(152));
        let read = event.repeat(16 * 1024 / event.len());
        let mut sse = SseDecoder::new();
        let mut events = Vec::new();
        sse.feed(read.as_bytes(), &mut events);
        let n = events.len();
        assert!(n > 64, "{n} events in one read");
        events.drain(..).for_each(|e| sse.recycle(e));
        assert_eq!(
            sse.spare.len(),
            n,
            "every event of the read is kept for the next"
        );
        // The next read takes its strings from the spares.
        sse.feed(read.as_bytes(), &mut events);
        assert_eq!(events.len(), n);
        assert!(sse.spare.len() <= 1, "{} spares left", sse.spare.len());
        assert!(events.iter().all(|e| e.data.len() == 152));
        // The spares stay bounded in bytes: big events are not all kept.
        let big = SseEvent {
            event: String::new(),
            data: String::with_capacity(SPARE_CAPACITY),
        };
        for _ in 0..(SPARE_BYTES / SPARE_CAPACITY + 2) {
            sse.recycle(big.clone());
        }
        assert!(sse.spare_bytes <= SPARE_BYTES, "{}", sse.spare_bytes);
    }

    #[test]
    fn an_endless_line_overflows_instead_of_growing_forever() {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        let chunk = vec![b'x'; 1024 * 1024];
        for _ in 0..(MAX_EVENT_BYTES / chunk.len() + 1) {
            d.feed(&chunk, &mut out);
        }
        assert!(d.overflowed());
        assert!(out.is_empty());
        assert!(d.line.capacity() < chunk.len(), "the buffer was released");
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.to_owned(),
            data: data.to_owned(),
        }
    }

    fn decode_whole(input: &[u8]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        d.feed(input, &mut out);
        d.finish(&mut out);
        out
    }

    fn decode_bytewise(input: &[u8]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for b in input {
            d.feed(std::slice::from_ref(b), &mut out);
        }
        d.finish(&mut out);
        out
    }

    #[test]
    fn table() {
        let cases: Vec<(&str, &[u8], Vec<SseEvent>)> = vec![
            (
                "lf",
                b"data: a\n\ndata: b\n\n",
                vec![ev("", "a"), ev("", "b")],
            ),
            (
                "crlf",
                b"data: a\r\n\r\ndata: b\r\n\r\n",
                vec![ev("", "a"), ev("", "b")],
            ),
            (
                "cr",
                b"data: a\r\rdata: b\r\r",
                vec![ev("", "a"), ev("", "b")],
            ),
            (
                "mixed",
                b"data: a\r\n\ndata: b\r\r\n",
                vec![ev("", "a"), ev("", "b")],
            ),
            (
                "multi-line data",
                b"data: one\ndata:two\ndata:  three\n\n",
                vec![ev("", "one\ntwo\n three")],
            ),
            (
                "comments and keep-alives",
                b": ping\n\n:\ndata: x\n: mid\n\n",
                vec![ev("", "x")],
            ),
            (
                "named events",
                b"event: message_start\ndata: {}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n",
                vec![ev("message_start", "{}"), ev("ping", "{\"type\":\"ping\"}")],
            ),
            (
                "event name resets",
                b"event: e\n\ndata: d\n\n",
                vec![ev("", "d")],
            ),
            (
                "missing final blank line",
                b"data: last",
                vec![ev("", "last")],
            ),
            (
                "missing done",
                b"data: {\"a\":1}\n",
                vec![ev("", "{\"a\":1}")],
            ),
            ("empty data", b"data\n\n", vec![ev("", "")]),
            (
                "id and retry ignored",
                b"id: 3\nretry: 10\ndata: z\n\n",
                vec![ev("", "z")],
            ),
            (
                "utf8",
                "data: héllo ✓ 😀\n\n".as_bytes(),
                vec![ev("", "héllo ✓ 😀")],
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(decode_whole(input), want, "case {name} (whole)");
            assert_eq!(decode_bytewise(input), want, "case {name} (byte by byte)");
        }
    }

    #[test]
    fn fixture_byte_by_byte_matches_whole() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sse");
        let mut checked = 0;
        for entry in std::fs::read_dir(&root).expect("fixtures/sse exists") {
            let path = entry.expect("dir entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("sse") {
                continue;
            }
            let bytes = std::fs::read(&path).expect("read fixture");
            let whole = decode_whole(&bytes);
            assert!(!whole.is_empty(), "{} decodes to events", path.display());
            assert_eq!(decode_bytewise(&bytes), whole, "{}", path.display());
            checked += 1;
        }
        assert!(checked >= 4, "expected SSE fixtures, found {checked}");
    }

    #[test]
    fn utf8_split_across_reads() {
        let input = "data: 😀é\n\n".as_bytes();
        for cut in 0..input.len() {
            let mut d = SseDecoder::new();
            let mut out = Vec::new();
            d.feed(&input[..cut], &mut out);
            d.feed(&input[cut..], &mut out);
            assert_eq!(out, vec![ev("", "😀é")], "cut at {cut}");
        }
    }
}
