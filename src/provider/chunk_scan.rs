//! The OpenAI chat stream's common chunk, read by hand: a text or reasoning delta in the first
//! choice and maybe a finish reason. This is the per-delta hot path of streaming; serde's
//! derived deserialiser for the same shape is generic code, compiled in this crate, and at the
//! static build's opt-level s it made the turn thread the stream's bottleneck.
//!
//! The scanner accepts only what the general path (`serde_json::Value`) reads the same way and
//! says `None` for everything else: another shape (usage, an error, tool calls, a field of
//! another type, a duplicate field), invalid JSON, and whatever it does not need to be sure of
//! (an escape in a key or in a string it skips, a number with a fraction or an exponent, deep
//! nesting). The caller then takes the general path, which reads anything and reports what is
//! wrong. Strings it keeps borrow from the input unless they have escapes, which serde_json
//! decodes.

use std::borrow::Cow;

/// What the fast path needs of a chunk.
#[derive(Debug, Default, PartialEq)]
pub(super) struct SimpleChunk<'a> {
    pub content: Option<Cow<'a, str>>,
    pub reasoning_content: Option<Cow<'a, str>>,
    pub reasoning: Option<Cow<'a, str>>,
    pub finish_reason: Option<Cow<'a, str>>,
}

/// The chunk, or `None` when it is not of the simple shape (see the module doc).
pub(super) fn scan(data: &str) -> Option<SimpleChunk<'_>> {
    let mut s = Scanner { src: data, i: 0 };
    let mut out = SimpleChunk::default();
    let (mut choices, mut usage, mut error) = (false, false, false);
    s.object(|s, key| match key {
        "choices" => {
            once(&mut choices)?;
            s.choices(&mut out)
        }
        // Present and not null: not the simple shape.
        "usage" => {
            once(&mut usage)?;
            s.null()
        }
        "error" => {
            once(&mut error)?;
            s.null()
        }
        _ => s.skip(0),
    })?;
    s.ws();
    (choices && s.i == data.len()).then_some(out)
}

/// A field seen for the first time; a duplicate is not the simple shape.
fn once(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

/// Deeper than this, a skipped value goes the general way.
const MAX_DEPTH: usize = 32;

struct Scanner<'a> {
    src: &'a str,
    i: usize,
}

// The three tiny helpers are called per byte of a chunk: forced inline, so the scanner's speed
// does not hang on the inliner's budget (at opt-level z they became calls: 10% of the static
// stream's samples).
impl<'a> Scanner<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.i).copied()
    }

    #[inline(always)]
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.i += 1;
        }
    }

    #[inline(always)]
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.ws();
        (self.peek() == Some(byte)).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.i + word.len();
        (self.src.as_bytes().get(self.i..end) == Some(word.as_bytes())).then(|| self.i = end)
    }

    /// `null`, or not the simple shape.
    fn null(&mut self) -> Option<()> {
        self.ws();
        self.literal("null")
    }

    /// An object, each value handed to `field` with its key (which must have no escape).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.ws();
            let key = self.plain_string()?;
            self.eat(b':')?;
            self.ws();
            field(self, key)?;
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    /// The string at the cursor if it has no escape (`None` otherwise, or if invalid).
    fn plain_string(&mut self) -> Option<&'a str> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let start = self.i + 1;
        let bytes = self.src.as_bytes();
        let len = bytes[start..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        let end = start + len;
        if bytes[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        // `"` is ASCII, so `start..end` lies on character boundaries.
        Some(&self.src[start..end])
    }

    /// A string value, borrowed unless it has escapes (which serde_json decodes and checks,
    /// lone surrogates included, exactly as the general path does).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        if let Some(s) = self.plain_string() {
            return Some(Cow::Borrowed(s));
        }
        if self.peek() != Some(b'"') {
            return None;
        }
        let start = self.i;
        let bytes = self.src.as_bytes();
        let mut j = start + 1;
        loop {
            match *bytes.get(j)? {
                b'"' => break,
                b'\\' => j += 2,
                b if b < 0x20 => return None,
                _ => j += 1,
            }
        }
        let text: String = serde_json::from_str(self.src.get(start..=j)?).ok()?;
        self.i = j + 1;
        Some(Cow::Owned(text))
    }

    /// `null` or a string; anything else is not the simple shape.
    fn opt_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        self.ws();
        if self.peek() == Some(b'n') {
            return self.null().map(|()| None);
        }
        self.string().map(Some)
    }

    /// `choices`: an array whose first element (if any) is the choice read here; the rest
    /// are skipped.
    fn choices(&mut self, out: &mut SimpleChunk<'a>) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        self.ws();
        self.choice(out)?;
        while self.eat(b',').is_some() {
            self.ws();
            self.skip(1)?;
        }
        self.eat(b']')
    }

    fn choice(&mut self, out: &mut SimpleChunk<'a>) -> Option<()> {
        let (mut delta, mut finish) = (false, false);
        self.object(|s, key| match key {
            "delta" => {
                once(&mut delta)?;
                s.ws();
                if s.peek() == Some(b'n') {
                    return s.null();
                }
                s.delta(out)
            }
            "finish_reason" => {
                once(&mut finish)?;
                out.finish_reason = s.opt_string()?;
                Some(())
            }
            _ => s.skip(1),
        })
    }

    fn delta(&mut self, out: &mut SimpleChunk<'a>) -> Option<()> {
        let mut seen = [false; 4];
        self.object(|s, key| {
            let (slot, field) = match key {
                "content" => (0, &mut out.content),
                "reasoning_content" => (1, &mut out.reasoning_content),
                "reasoning" => (2, &mut out.reasoning),
                // Tool calls go the general way; a null is no call.
                "tool_calls" => {
                    once(&mut seen[3])?;
                    return s.null();
                }
                _ => return s.skip(2),
            };
            once(&mut seen[slot])?;
            *field = s.opt_string()?;
            Some(())
        })
    }

    /// Skips one value of any type at nesting `depth`.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'"' => self.plain_string().map(drop),
            b'{' => self.object(|s, _| s.skip(depth + 1)),
            b'[' => {
                self.i += 1;
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    if self.eat(b',').is_none() {
                        return self.eat(b']');
                    }
                }
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    /// An integer as JSON writes it, short enough to be exact in the general path's `Value`;
    /// a fraction or an exponent goes the general way.
    fn integer(&mut self) -> Option<()> {
        let bytes = self.src.as_bytes();
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        let digits = self.i - start;
        let leading_zero = digits > 1 && bytes[start] == b'0';
        let more = matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (digits > 0 && digits <= 18 && !leading_zero && !more).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk<'a>(
        content: Option<&'a str>,
        reasoning_content: Option<&'a str>,
        reasoning: Option<&'a str>,
        finish_reason: Option<&'a str>,
    ) -> SimpleChunk<'a> {
        SimpleChunk {
            content: content.map(Cow::Borrowed),
            reasoning_content: reasoning_content.map(Cow::Borrowed),
            reasoning: reasoning.map(Cow::Borrowed),
            finish_reason: finish_reason.map(Cow::Borrowed),
        }
    }

    /// What the scanner reads, and what it leaves to the general path (`None`).
    #[test]
    fn scans_the_simple_shape_and_declines_the_rest() {
        let accepted: &[(&str, SimpleChunk<'_>)] = &[
            (
                r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"tok"},"logprobs":null,"finish_reason":null}]}"#,
                chunk(Some("tok"), None, None, None),
            ),
            (
                " { \"choices\" : [ { \"delta\" : { \"content\" : \"a b\" } , \"finish_reason\" : \"stop\" } ] } ",
                chunk(Some("a b"), None, None, Some("stop")),
            ),
            (
                r#"{"choices":[{"delta":{"reasoning_content":"r","reasoning":"s","tool_calls":null}}],"usage":null,"error":null}"#,
                chunk(None, Some("r"), Some("s"), None),
            ),
            (
                r#"{"choices":[{"delta":null,"finish_reason":"length"}]}"#,
                chunk(None, None, None, Some("length")),
            ),
            (
                r#"{"choices":[{"delta":{},"x":[1,-2,{"y":[true,false,null,"z",{}]},[]]},{"delta":7},"s",null]}"#,
                chunk(None, None, None, None),
            ),
            (
                r#"{"choices":[{"delta":{"content":null}}]}"#,
                chunk(None, None, None, None),
            ),
            (
                r#"{"choices":[]}"#,
                SimpleChunk::default(),
            ),
        ];
        for (data, want) in accepted {
            assert_eq!(scan(data).as_ref(), Some(want), "{data}");
        }
        let declined = [
            "",
            "[]",
            r#""s""#,
            "{}",
            r#"{"id":"x"}"#,
            r#"{"choices":null}"#,
            r#"{"choices":{}}"#,
            r#"{"choices":[null]}"#,
            r#"{"choices":[[]]}"#,
            r#"{"choices":[{"delta":[]}]}"#,
            r#"{"choices":[{"delta":{"content":1}}]}"#,
            r#"{"choices":[{"delta":{"content":true}}]}"#,
            r#"{"choices":[{"finish_reason":0}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[],"usage":{}}"#,
            r#"{"choices":[],"usage":0}"#,
            r#"{"error":{"message":"boom"},"choices":[]}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"choices":[{"delta":null,"delta":null}]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":null,"tool_calls":null}}]}"#,
            r#"{"choices":[]} x"#,
            r#"{"choices":[],}"#,
            r#"{"choices":[{"delta":{}},]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}"#,
            r#"{"choi\u0063es":[]}"#,
            r#"{"choices":[],"id":"a\"b"}"#,
            r#"{"choices":[],"n":1.5}"#,
            r#"{"choices":[],"n":1e3}"#,
            r#"{"choices":[],"n":0123}"#,
            r#"{"choices":[],"n":-}"#,
            r#"{"choices":[],"n":1234567890123456789}"#,
            r#"{"choices":[],"n":tru}"#,
            r#"{"choices":[],"n":nul}"#,
            r#"{"choices":[],"n":undefined}"#,
            "{\"choices\":[],\"s\":\"a\u{1}b\"}",
            "{\"choices\":[{\"delta\":{\"content\":\"a\nb\"}}]}",
            r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\q"}}]}"#,
            r#"{"choices":[{"delta":{"content":"unterminated}}]}"#,
        ];
        for data in declined {
            assert_eq!(scan(data), None, "{data}");
        }
        let deep = format!(
            r#"{{"choices":[],"x":{}{}}}"#,
            "[".repeat(MAX_DEPTH + 2),
            "]".repeat(MAX_DEPTH + 2)
        );
        assert_eq!(scan(&deep), None);
        let shallow = format!(r#"{{"choices":[],"x":{}{}}}"#, "[".repeat(8), "]".repeat(8));
        assert!(scan(&shallow).is_some());
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        let c = scan(r#"{"choices":[{"delta":{"content":"tok ","reasoning":"a\nb \u00e9 \"q\""},"finish_reason":"stop"}]}"#)
            .expect("simple");
        assert!(matches!(c.content, Some(Cow::Borrowed("tok "))));
        assert!(matches!(c.reasoning, Some(Cow::Owned(ref s)) if s == "a\nb é \"q\""));
        assert!(matches!(c.finish_reason, Some(Cow::Borrowed("stop"))));
        let c = scan(r#"{"choices":[{"delta":{"content":"😀 é \\"}}]}"#).expect("simple");
        assert_eq!(c.content.as_deref(), Some("😀 é \\"));
    }
}
