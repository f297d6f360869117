//! The pure half of the host–kernel protocol: frame types, their encoding, and the scanner that
//! finds end-of-cell markers in the kernel's stdout/stderr bytes. No IO, no threads.

use crate::base::json::json;
use serde_json::{Map, Value};

/// A kernel → host frame (one JSON object per line on fd 3, tagged by `op`). Fields marked
/// "may be absent" default when they are; other fields must be there with their type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KernelFrame {
    /// The driver is up; `engine` is `ipython` or `plain`.
    Ready {
        pid: i64,
        engine: String,
        /// May be absent.
        python: String,
        /// What loading the session's saved namespace gave (`kernel::state`), when asked to.
        restore: Option<Value>,
    },
    /// The value of the cell's last expression (`repr`, like IPython's `execute_result`).
    Result { id: u64, text: String },
    Error {
        id: u64,
        ename: String,
        evalue: String,
        traceback: Vec<String>,
    },
    /// A display bundle (`{mime: payload}`) of MIME types the host understands.
    Display {
        id: Option<u64>,
        data: Map<String, Value>,
    },
    /// A `%%bash` subprocess group the host must kill along with the kernel.
    ChildGroup { id: u64, pgid: i64 },
    /// The cell finished; `status` is `ok` or `error`.
    Done { id: u64, status: String },
    /// The answer to `flush`: `saved` says whether a pending snapshot was written.
    Flushed {
        /// May be absent (false).
        saved: bool,
    },
    /// A line for the agent's log from the driver itself (e.g. a failed namespace snapshot).
    Log {
        /// Both may be absent.
        level: String,
        message: String,
    },
    /// A host-bridge request from Python; answered with a `host_reply` carrying the same `rid`.
    HostRequest {
        rid: u64,
        /// The frame's `type`; both may be absent (null).
        kind: Value,
        payload: Value,
    },
}

impl KernelFrame {
    /// Reads one frame. By hand rather than derived: serde's derive for an internally tagged
    /// enum buffers the object and reads it again per variant, 27 KB of the static binary.
    pub(crate) fn parse(line: &[u8]) -> Result<KernelFrame, String> {
        let object: Map<String, Value> = serde_json::from_slice(line).map_err(|e| e.to_string())?;
        let mut f = Fields(object);
        let frame = match f.string("op")?.as_str() {
            "ready" => KernelFrame::Ready {
                pid: f.int("pid")?,
                engine: f.string("engine")?,
                python: f.or_default("python", Fields::string)?,
                restore: f.take("restore"),
            },
            "result" => KernelFrame::Result {
                id: f.id("id")?,
                text: f.string("text")?,
            },
            "error" => KernelFrame::Error {
                id: f.id("id")?,
                ename: f.string("ename")?,
                evalue: f.string("evalue")?,
                traceback: f.strings("traceback")?,
            },
            "display" => KernelFrame::Display {
                id: f.or_default("id", |f, k| f.id(k).map(Some))?,
                data: match f.take("data") {
                    Some(Value::Object(data)) => data,
                    _ => return Err(Fields::invalid("data", "an object")),
                },
            },
            "child_group" => KernelFrame::ChildGroup {
                id: f.id("id")?,
                pgid: f.int("pgid")?,
            },
            "done" => KernelFrame::Done {
                id: f.id("id")?,
                status: f.string("status")?,
            },
            "flushed" => KernelFrame::Flushed {
                saved: f.or_default("saved", |f, k| match f.take(k) {
                    Some(Value::Bool(b)) => Ok(b),
                    _ => Err(Fields::invalid(k, "a boolean")),
                })?,
            },
            "log" => KernelFrame::Log {
                level: f.or_default("level", Fields::string)?,
                message: f.or_default("message", Fields::string)?,
            },
            "host_request" => KernelFrame::HostRequest {
                rid: f.id("rid")?,
                kind: f.take("type").unwrap_or_default(),
                payload: f.take("payload").unwrap_or_default(),
            },
            other => return Err(format!("unknown frame op `{other}`")),
        };
        Ok(frame)
    }
}

/// A frame's fields, taken out one by one.
struct Fields(Map<String, Value>);

impl Fields {
    /// A field that is there and not null.
    fn take(&mut self, key: &str) -> Option<Value> {
        self.0.remove(key).filter(|v| !v.is_null())
    }

    fn invalid(key: &str, what: &str) -> String {
        format!("field `{key}` missing or not {what}")
    }

    /// A field that may be absent (or null): its type's default then.
    fn or_default<T: Default>(
        &mut self,
        key: &str,
        read: fn(&mut Fields, &str) -> Result<T, String>,
    ) -> Result<T, String> {
        if self.0.get(key).is_none_or(Value::is_null) {
            return Ok(T::default());
        }
        read(self, key)
    }

    fn string(&mut self, key: &str) -> Result<String, String> {
        match self.take(key) {
            Some(Value::String(s)) => Ok(s),
            _ => Err(Fields::invalid(key, "a string")),
        }
    }

    fn id(&mut self, key: &str) -> Result<u64, String> {
        self.take(key)
            .and_then(|v| v.as_u64())
            .ok_or_else(|| Fields::invalid(key, "a non-negative integer"))
    }

    fn int(&mut self, key: &str) -> Result<i64, String> {
        self.take(key)
            .and_then(|v| v.as_i64())
            .ok_or_else(|| Fields::invalid(key, "an integer"))
    }

    fn strings(&mut self, key: &str) -> Result<Vec<String>, String> {
        let invalid = || Fields::invalid(key, "a list of strings");
        let Some(Value::Array(items)) = self.take(key) else {
            return Err(invalid());
        };
        items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                _ => Err(invalid()),
            })
            .collect()
    }
}

/// `execute {id, code}`: runs one cell.
pub(crate) fn execute_frame(id: u64, code: &str) -> String {
    json!({ "op": "execute", "id": id, "code": code }).to_string()
}

/// `flush`: write a pending namespace snapshot now (the agent is exiting).
pub(crate) fn flush_frame() -> String {
    json!({ "op": "flush" }).to_string()
}

/// `host_reply {rid, status: "ok", result}` or `{rid, status: "error", error}`.
pub(crate) fn reply_frame(rid: u64, reply: &Result<Value, String>) -> String {
    match reply {
        Ok(result) => json!({ "op": "host_reply", "rid": rid, "status": "ok", "result": result }),
        Err(error) => json!({ "op": "host_reply", "rid": rid, "status": "error", "error": error }),
    }
    .to_string()
}

/// What a stdout/stderr read turned into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Chunk {
    Output(Vec<u8>),
    Marker(u64),
}

/// Splits a byte stream into output and markers. A marker may arrive split across reads, so
/// bytes that could start one are held back until the next read decides.
#[derive(Debug)]
pub(crate) struct MarkerScanner {
    needle: Vec<u8>,
    buf: Vec<u8>,
}

/// Cell ids are u64: at most 20 digits.
const MAX_ID_DIGITS: usize = 20;

impl MarkerScanner {
    pub(crate) fn new(token: &str) -> MarkerScanner {
        MarkerScanner {
            needle: format!("\0{token}:").into_bytes(),
            buf: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) -> Vec<Chunk> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        let emit = |out: &mut Vec<Chunk>, bytes: Vec<u8>| {
            if !bytes.is_empty() {
                out.push(Chunk::Output(bytes));
            }
        };
        loop {
            let Some(start) = find(&self.buf, &self.needle) else {
                let keep = held_back(&self.buf, &self.needle);
                let rest = self.buf.split_off(self.buf.len() - keep);
                emit(&mut out, std::mem::replace(&mut self.buf, rest));
                return out;
            };
            let digits_at = start + self.needle.len();
            let digits = &self.buf[digits_at..];
            let end = digits.iter().position(|b| !b.is_ascii_digit());
            match end {
                Some(n) if n > 0 && n <= MAX_ID_DIGITS && digits[n] == 0 => {
                    let id = std::str::from_utf8(&digits[..n])
                        .ok()
                        .and_then(|s| s.parse().ok());
                    let tail = self.buf.split_off(digits_at + n + 1);
                    let mut head = std::mem::replace(&mut self.buf, tail);
                    head.truncate(start);
                    emit(&mut out, head);
                    if let Some(id) = id {
                        out.push(Chunk::Marker(id));
                    }
                }
                None if digits.len() <= MAX_ID_DIGITS => {
                    // Possibly a marker still arriving: keep it for the next read.
                    let rest = self.buf.split_off(start);
                    emit(&mut out, std::mem::replace(&mut self.buf, rest));
                    return out;
                }
                _ => {
                    // Looked like a marker but is not one: pass its first byte through as output.
                    let rest = self.buf.split_off(start + 1);
                    emit(&mut out, std::mem::replace(&mut self.buf, rest));
                }
            }
        }
    }

    /// Whatever is held back, at end of stream.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Length of the longest suffix of `buf` that is a proper prefix of `needle`.
fn held_back(buf: &[u8], needle: &[u8]) -> usize {
    (1..needle.len().min(buf.len() + 1))
        .rev()
        .find(|&k| buf.ends_with(&needle[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(pieces: &[&[u8]]) -> (Vec<u8>, Vec<u64>) {
        let mut s = MarkerScanner::new("tok");
        let mut out = Vec::new();
        let mut marks = Vec::new();
        for p in pieces {
            for c in s.push(p) {
                match c {
                    Chunk::Output(b) => out.extend(b),
                    Chunk::Marker(id) => marks.push(id),
                }
            }
        }
        out.extend(s.finish());
        (out, marks)
    }

    #[test]
    fn finds_markers_even_when_split_across_reads() {
        let whole = b"hello\n\0tok:7\0after";
        for cut in 0..whole.len() {
            let (out, marks) = feed(&[&whole[..cut], &whole[cut..]]);
            assert_eq!(out, b"hello\nafter", "cut at {cut}");
            assert_eq!(marks, vec![7], "cut at {cut}");
        }
    }

    #[test]
    fn passes_look_alikes_through() {
        let (out, marks) = feed(&[b"a\0tok:x\0b", b"\0tok", b"!"]);
        assert_eq!(out, b"a\0tok:x\0b\0tok!");
        assert!(marks.is_empty());
        let (out, marks) = feed(&[b"\0tok:1\0\0tok:2\0"]);
        assert!(out.is_empty());
        assert_eq!(marks, vec![1, 2]);
    }

    #[test]
    fn output_is_not_held_back_needlessly() {
        let mut s = MarkerScanner::new("tok");
        assert_eq!(
            s.push(b"progress 10%"),
            vec![Chunk::Output(b"progress 10%".to_vec())]
        );
        assert_eq!(s.push(b"x\0t"), vec![Chunk::Output(b"x".to_vec())]);
    }

    /// Every op, with its fields present, absent where they may be, and of the wrong type.
    #[test]
    fn frames_parse_by_op() {
        let ok: &[(&str, KernelFrame)] = &[
            (
                r#"{"op":"ready","pid":7,"engine":"ipython","python":"3.11","restore":{"n":1}}"#,
                KernelFrame::Ready {
                    pid: 7,
                    engine: "ipython".into(),
                    python: "3.11".into(),
                    restore: Some(json!({"n": 1})),
                },
            ),
            (
                r#"{"op":"ready","pid":-1,"engine":"plain","restore":null,"extra":true}"#,
                KernelFrame::Ready {
                    pid: -1,
                    engine: "plain".into(),
                    python: String::new(),
                    restore: None,
                },
            ),
            (
                r#"{"op":"result","id":2,"text":"4"}"#,
                KernelFrame::Result {
                    id: 2,
                    text: "4".into(),
                },
            ),
            (
                r#"{"op":"error","id":2,"ename":"E","evalue":"v","traceback":["a","b"]}"#,
                KernelFrame::Error {
                    id: 2,
                    ename: "E".into(),
                    evalue: "v".into(),
                    traceback: vec!["a".into(), "b".into()],
                },
            ),
            (
                r#"{"op":"display","data":{"text/plain":"x"}}"#,
                KernelFrame::Display {
                    id: None,
                    data: json!({"text/plain": "x"}).as_object().unwrap().clone(),
                },
            ),
            (
                r#"{"op":"display","id":5,"data":{}}"#,
                KernelFrame::Display {
                    id: Some(5),
                    data: Map::new(),
                },
            ),
            (
                r#"{"op":"child_group","id":1,"pgid":300}"#,
                KernelFrame::ChildGroup { id: 1, pgid: 300 },
            ),
            (
                r#"{"op":"flushed","saved":true}"#,
                KernelFrame::Flushed { saved: true },
            ),
            (r#"{"op":"flushed"}"#, KernelFrame::Flushed { saved: false }),
            (
                r#"{"op":"log","level":"warning","message":"m"}"#,
                KernelFrame::Log {
                    level: "warning".into(),
                    message: "m".into(),
                },
            ),
            (
                r#"{"op":"log"}"#,
                KernelFrame::Log {
                    level: String::new(),
                    message: String::new(),
                },
            ),
            (
                r#"{"op":"host_request","rid":9,"type":"llm","payload":{"p":1}}"#,
                KernelFrame::HostRequest {
                    rid: 9,
                    kind: json!("llm"),
                    payload: json!({"p": 1}),
                },
            ),
        ];
        for (line, frame) in ok {
            assert_eq!(
                KernelFrame::parse(line.as_bytes()).as_ref(),
                Ok(frame),
                "{line}"
            );
        }
        let bad = [
            (r#"[1]"#, "invalid type"),
            (r#"{"id":1}"#, "field `op` missing or not a string"),
            (r#"{"op":"nope"}"#, "unknown frame op `nope`"),
            (r#"{"op":"done","status":"ok"}"#, "field `id` missing"),
            (
                r#"{"op":"done","id":-1,"status":"ok"}"#,
                "field `id` missing or not a non-negative integer",
            ),
            (
                r#"{"op":"done","id":1,"status":2}"#,
                "field `status` missing or not a string",
            ),
            (
                r#"{"op":"ready","pid":1.5,"engine":"x"}"#,
                "field `pid` missing or not an integer",
            ),
            (
                r#"{"op":"ready","pid":1,"engine":"x","python":3}"#,
                "field `python`",
            ),
            (
                r#"{"op":"error","id":1,"ename":"E","evalue":"v","traceback":["a",1]}"#,
                "a list of strings",
            ),
            (
                r#"{"op":"display","data":[]}"#,
                "field `data` missing or not an object",
            ),
            (
                r#"{"op":"flushed","saved":"yes"}"#,
                "field `saved` missing or not a boolean",
            ),
        ];
        for (line, error) in bad {
            let got = KernelFrame::parse(line.as_bytes()).expect_err(line);
            assert!(got.contains(error), "{line}: {got}");
        }
    }

    #[test]
    fn frames_round_trip() {
        let f = KernelFrame::parse(br#"{"op":"done","id":3,"status":"ok"}"#).unwrap();
        assert_eq!(
            f,
            KernelFrame::Done {
                id: 3,
                status: "ok".into()
            }
        );
        let f = KernelFrame::parse(br#"{"op":"host_request","rid":1,"payload":[]}"#).unwrap();
        assert!(matches!(
            f,
            KernelFrame::HostRequest {
                rid: 1,
                kind: Value::Null,
                ..
            }
        ));
        assert!(KernelFrame::parse(b"not json").is_err());
        let v: Value = serde_json::from_str(&execute_frame(1, "print(1)")).unwrap();
        assert_eq!(v, json!({"op":"execute","id":1,"code":"print(1)"}));
        let v: Value = serde_json::from_str(&reply_frame(2, &Err("no".into()))).unwrap();
        assert_eq!(
            v,
            json!({"op":"host_reply","rid":2,"status":"error","error":"no"})
        );
    }
}
