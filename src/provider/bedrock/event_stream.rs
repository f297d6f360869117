//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`), the body of a
//! Bedrock `ConverseStream` answer: a pure decoder fed raw bytes in whatever pieces the socket
//! delivers, yielding whole messages, with both checksums verified.
//!
//! One message, all integers big-endian:
//!
//! ```text
//! total length u32 | headers length u32 | prelude CRC32 u32    (the 12-byte prelude)
//! headers (headers length bytes)       | payload               | message CRC32 u32
//! ```
//!
//! The prelude CRC covers the first 8 bytes, the message CRC everything before it. A header is
//! a name (u8 length, bytes), a type byte and a value of that type (booleans carry none, the
//! integers are 1, 2, 4 or 8 bytes, byte arrays and strings a u16 length, timestamps 8 bytes,
//! UUIDs 16). Specification: the AWS SDKs' `aws-c-event-stream` and the Transcribe streaming
//! guide's "event stream encoding" page.

use std::fmt;

/// The largest message accepted: AWS caps a message at 16 MiB of payload and 128 KiB of
/// headers; anything larger is a corrupt length, and must not grow memory.
pub(crate) const MAX_MESSAGE: u32 = 16 * 1024 * 1024 + 128 * 1024 + 16;

/// Prelude (12 bytes) and the trailing message CRC (4): the smallest message.
const OVERHEAD: u32 = 16;

/// One decoded message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Message {
    pub headers: Vec<(String, HeaderValue)>,
    pub payload: Vec<u8>,
}

impl Message {
    /// The string value of header `name` (`:event-type`, `:message-type`, …), if there is one.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|(n, v)| match v {
            HeaderValue::String(s) if n == name => Some(s.as_str()),
            _ => None,
        })
    }
}

/// A header's value, by the type byte that precedes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HeaderValue {
    Bool(bool),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Bytes(Vec<u8>),
    String(String),
    /// Milliseconds since the epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
}

/// Why the stream cannot be read on. Every variant is final: a corrupt frame leaves no way to
/// find the next one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FrameError {
    PreludeCrc {
        expected: u32,
        computed: u32,
    },
    MessageCrc {
        expected: u32,
        computed: u32,
    },
    /// A total or headers length that cannot be (too small, too large, or headers longer than
    /// the message).
    Length {
        total: u32,
        headers: u32,
    },
    /// The headers section does not parse (a truncated value or an unknown type byte).
    Header(String),
    /// The body ended inside a message (`buffered` bytes of it).
    Truncated {
        buffered: usize,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("The Bedrock event stream is corrupt: ")?;
        match self {
            FrameError::PreludeCrc { expected, computed } => write!(
                f,
                "prelude checksum mismatch (CRC32 {computed:#010x}, the frame says {expected:#010x})"
            ),
            FrameError::MessageCrc { expected, computed } => write!(
                f,
                "message checksum mismatch (CRC32 {computed:#010x}, the frame says {expected:#010x})"
            ),
            FrameError::Length { total, headers } => write!(
                f,
                "impossible frame lengths (total {total} bytes, headers {headers} bytes)"
            ),
            FrameError::Header(why) => write!(f, "unreadable headers ({why})"),
            FrameError::Truncated { buffered } => write!(
                f,
                "the body ended inside a message ({buffered} bytes of it received)"
            ),
        }
    }
}

/// The decoder: bytes in, messages out.
#[derive(Debug, Default)]
pub(crate) struct FrameDecoder {
    /// Bytes of messages not yet complete.
    buf: Vec<u8>,
    /// A frame failed: nothing more is decoded.
    failed: bool,
}

impl FrameDecoder {
    pub(crate) fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Feeds one read's bytes; complete messages are appended to `out`. After an error the
    /// decoder stays failed.
    pub(crate) fn feed(&mut self, bytes: &[u8], out: &mut Vec<Message>) -> Result<(), FrameError> {
        if self.failed {
            return Ok(());
        }
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        let result = loop {
            match frame_at(&self.buf[at..]) {
                Ok(Some((message, used))) => {
                    out.push(message);
                    at += used;
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.buf.drain(..at);
        if result.is_err() {
            self.failed = true;
            self.buf = Vec::new();
        }
        result
    }

    /// The body ended: an error if it ended inside a message.
    pub(crate) fn finish(&self) -> Result<(), FrameError> {
        if self.failed || self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated {
                buffered: self.buf.len(),
            })
        }
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The message at the start of `buf` and the bytes it took, `None` while it is incomplete.
fn frame_at(buf: &[u8]) -> Result<Option<(Message, usize)>, FrameError> {
    if buf.len() < 12 {
        return Ok(None);
    }
    let (total, headers_len) = (be32(&buf[0..4]), be32(&buf[4..8]));
    let prelude_crc = be32(&buf[8..12]);
    let computed = crc32(&buf[0..8]);
    if computed != prelude_crc {
        return Err(FrameError::PreludeCrc {
            expected: prelude_crc,
            computed,
        });
    }
    if !(OVERHEAD..=MAX_MESSAGE).contains(&total) || headers_len > total - OVERHEAD {
        return Err(FrameError::Length {
            total,
            headers: headers_len,
        });
    }
    let total = total as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let message_crc = be32(&buf[total - 4..total]);
    let computed = crc32(&buf[..total - 4]);
    if computed != message_crc {
        return Err(FrameError::MessageCrc {
            expected: message_crc,
            computed,
        });
    }
    let headers_end = 12 + headers_len as usize;
    let headers = parse_headers(&buf[12..headers_end]).map_err(FrameError::Header)?;
    let payload = buf[headers_end..total - 4].to_vec();
    Ok(Some((Message { headers, payload }, total)))
}

/// A cursor over the headers section.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("{n} bytes wanted, {} left", self.bytes.len()));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn sized(&mut self) -> Result<&'a [u8], String> {
        let n = u16::from_be_bytes(self.array()?) as usize;
        self.take(n)
    }
}

fn parse_headers(bytes: &[u8]) -> Result<Vec<(String, HeaderValue)>, String> {
    let mut r = Reader { bytes };
    let mut headers = Vec::new();
    while !r.bytes.is_empty() {
        let name_len = r.take(1)?[0] as usize;
        let name = std::str::from_utf8(r.take(name_len)?)
            .map_err(|_| "a header name is not UTF-8".to_owned())?
            .to_owned();
        let value = match r.take(1)?[0] {
            0 => HeaderValue::Bool(true),
            1 => HeaderValue::Bool(false),
            2 => HeaderValue::Byte(i8::from_be_bytes(r.array()?)),
            3 => HeaderValue::Short(i16::from_be_bytes(r.array()?)),
            4 => HeaderValue::Int(i32::from_be_bytes(r.array()?)),
            5 => HeaderValue::Long(i64::from_be_bytes(r.array()?)),
            6 => HeaderValue::Bytes(r.sized()?.to_vec()),
            7 => HeaderValue::String(
                std::str::from_utf8(r.sized()?)
                    .map_err(|_| format!("header {name} is not UTF-8"))?
                    .to_owned(),
            ),
            8 => HeaderValue::Timestamp(i64::from_be_bytes(r.array()?)),
            9 => HeaderValue::Uuid(r.array()?),
            t => return Err(format!("header {name} has unknown type {t}")),
        };
        headers.push((name, value));
    }
    Ok(headers)
}

/// CRC-32 as zlib computes it (IEEE 802.3, reflected polynomial `0xEDB88320`), the checksum
/// the event-stream frames carry.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        t
    });
    !bytes.iter().fold(!0u32, |c, &b| {
        table[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// Encodes a message with string headers (the unit tests' frames).
#[cfg(test)]
pub(crate) fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let total = (h.len() + payload.len()) as u32 + OVERHEAD;
    let mut out = Vec::new();
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32(&out[..8]).to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn crc32_check_values() {
        // The standard check value, and zlib's for the empty input.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    /// The frames of `aws-c-event-stream`'s own decoder tests (awslabs/aws-c-event-stream,
    /// `tests/message_deserializer_test.c` at d47b14c6, Apache-2.0): no message, a payload
    /// without headers, one string header.
    #[test]
    fn published_vectors_decode() {
        let empty = unhex("00000010 00000000 05c248eb 7d98c8ff");
        let payload_only =
            unhex("0000001d 00000000 fd528c5a 7b27666f 6f273a27 62617227 7d c3653936");
        let one_string = unhex(
            "0000003d 00000020 07fd8396 0c636f6e 74656e74 2d747970 65070010 6170706c
             69636174 696f6e2f 6a736f6e 7b27666f 6f273a27 62617227 7d 8d9c08b1",
        );
        let cases: Vec<(Vec<u8>, Message)> = vec![
            (
                empty,
                Message {
                    headers: vec![],
                    payload: vec![],
                },
            ),
            (
                payload_only,
                Message {
                    headers: vec![],
                    payload: b"{'foo':'bar'}".to_vec(),
                },
            ),
            (
                one_string,
                Message {
                    headers: vec![(
                        "content-type".into(),
                        HeaderValue::String("application/json".into()),
                    )],
                    payload: b"{'foo':'bar'}".to_vec(),
                },
            ),
        ];
        for (bytes, want) in cases {
            let mut d = FrameDecoder::new();
            let mut out = Vec::new();
            d.feed(&bytes, &mut out).expect("decodes");
            assert_eq!(out, vec![want.clone()]);
            assert_eq!(d.finish(), Ok(()));
            // Byte by byte, the same message.
            let mut d = FrameDecoder::new();
            let mut out = Vec::new();
            for b in &bytes {
                d.feed(std::slice::from_ref(b), &mut out).expect("decodes");
            }
            assert_eq!(out, vec![want]);
        }
    }

    #[test]
    fn every_header_type_decodes() {
        let mut h = Vec::new();
        let mut put = |name: &str, t: u8, value: &[u8]| {
            h.push(name.len() as u8);
            h.extend_from_slice(name.as_bytes());
            h.push(t);
            h.extend_from_slice(value);
        };
        put("t", 0, &[]);
        put("f", 1, &[]);
        put("b", 2, &[0xff]);
        put("s", 3, &[0x01, 0x02]);
        put("i", 4, &[0, 0, 1, 0]);
        put("l", 5, &[0, 0, 0, 0, 0, 0, 0, 7]);
        put("y", 6, &[0, 2, 0xab, 0xcd]);
        put("z", 7, &[0, 2, b'o', b'k']);
        put("ts", 8, &[0, 0, 0, 0, 0, 0, 3, 0xe8]);
        put("u", 9, &[7; 16]);
        assert_eq!(
            parse_headers(&h).expect("parses"),
            vec![
                ("t".into(), HeaderValue::Bool(true)),
                ("f".into(), HeaderValue::Bool(false)),
                ("b".into(), HeaderValue::Byte(-1)),
                ("s".into(), HeaderValue::Short(258)),
                ("i".into(), HeaderValue::Int(256)),
                ("l".into(), HeaderValue::Long(7)),
                ("y".into(), HeaderValue::Bytes(vec![0xab, 0xcd])),
                ("z".into(), HeaderValue::String("ok".into())),
                ("ts".into(), HeaderValue::Timestamp(1000)),
                ("u".into(), HeaderValue::Uuid([7; 16])),
            ]
        );
        assert!(parse_headers(&[1, b'x', 42])
            .unwrap_err()
            .contains("unknown type 42"));
        assert!(
            parse_headers(&[1, b'x', 7, 0, 9, b'a']).is_err(),
            "truncated"
        );
    }

    #[test]
    fn messages_split_anywhere_and_errors_are_final() {
        let a = encode(
            &[(":event-type", "messageStart")],
            br#"{"role":"assistant"}"#,
        );
        let b = encode(
            &[(":event-type", "messageStop")],
            br#"{"stopReason":"end_turn"}"#,
        );
        let stream = [a.clone(), b.clone()].concat();
        for cut in 0..=stream.len() {
            let mut d = FrameDecoder::new();
            let mut out = Vec::new();
            d.feed(&stream[..cut], &mut out).expect("first part");
            d.feed(&stream[cut..], &mut out).expect("second part");
            assert_eq!(out.len(), 2, "cut at {cut}");
            assert_eq!(out[1].header(":event-type"), Some("messageStop"));
            assert_eq!(d.finish(), Ok(()));
        }

        // (the bytes, the error) for each way a frame can be bad.
        let mut payload_flip = a.clone();
        payload_flip[a.len() - 6] ^= 0x01;
        let mut prelude_flip = a.clone();
        prelude_flip[3] ^= 0x01;
        let mut crc_flip = a.clone();
        let last = crc_flip.len() - 1;
        crc_flip[last] ^= 0xff;
        let mut short = a[..8].to_vec();
        short.extend_from_slice(&crc32(&[0, 0, 0, 8, 0, 0, 0, 0]).to_be_bytes());
        short[..8].copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
        short[8..12].copy_from_slice(&crc32(&[0, 0, 0, 8, 0, 0, 0, 0]).to_be_bytes());
        let big = {
            let mut p = (MAX_MESSAGE + 1).to_be_bytes().to_vec();
            p.extend_from_slice(&[0, 0, 0, 0]);
            let c = crc32(&p);
            p.extend_from_slice(&c.to_be_bytes());
            p
        };
        type Case = (&'static str, Vec<u8>, fn(&FrameError) -> bool);
        let cases: Vec<Case> = vec![
            ("payload bit", payload_flip, |e| {
                matches!(e, FrameError::MessageCrc { .. })
            }),
            ("prelude bit", prelude_flip, |e| {
                matches!(e, FrameError::PreludeCrc { .. })
            }),
            ("message crc", crc_flip, |e| {
                matches!(e, FrameError::MessageCrc { .. })
            }),
            ("shorter than a frame", short, |e| {
                matches!(e, FrameError::Length { total: 8, .. })
            }),
            ("over the cap", big, |e| {
                matches!(e, FrameError::Length { .. })
            }),
        ];
        for (what, bytes, want) in cases {
            let mut d = FrameDecoder::new();
            let mut out = Vec::new();
            let err = d.feed(&bytes, &mut out).expect_err(what);
            assert!(want(&err), "{what}: {err:?}");
            assert!(out.is_empty(), "{what}");
            assert!(
                err.to_string()
                    .starts_with("The Bedrock event stream is corrupt: "),
                "{err}"
            );
            // Failed for good: a good frame after it is not decoded.
            d.feed(&b, &mut out).expect("ignored");
            assert!(out.is_empty(), "{what}");
        }

        let mut d = FrameDecoder::new();
        d.feed(&a[..a.len() - 1], &mut Vec::new()).expect("partial");
        assert_eq!(
            d.finish(),
            Err(FrameError::Truncated {
                buffered: a.len() - 1
            })
        );
    }
}
