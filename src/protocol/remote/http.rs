//! The HTTP/1.1 this transport needs, by hand: a request head, a body of known length,
//! responses with a length, and an SSE stream that ends with the TCP connection.
//!
//! Only what ACP's remote transport uses is here (no chunked request bodies, no pipelining
//! beyond reading the next request once an answer is written, no `Expect`).

use std::io::{self, BufRead, Read, Write};

/// A request head larger than this is refused (431) and the connection closed.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// A parsed request line and its headers.
#[derive(Debug, PartialEq)]
pub(crate) struct Head {
    pub method: String,
    /// The path without its query.
    pub path: String,
    /// Names as sent; `header` compares them without case.
    pub headers: Vec<(String, String)>,
    /// HTTP/1.0 (closes after one answer unless it asks for keep-alive).
    pub http10: bool,
}

/// Why a head could not be read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The peer closed (or timed out) before a request began: a normal end.
    Closed,
    /// Not an HTTP/1.x request head, or larger than `MAX_HEAD`.
    Bad(&'static str),
    Io(io::Error),
}

impl Head {
    /// The first value of header `name` (case-insensitive), trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// Whether the client asked to keep the connection open after the answer.
    pub(crate) fn keep_alive(&self) -> bool {
        let says = |token: &str| {
            self.header("connection")
                .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        };
        if self.http10 {
            says("keep-alive")
        } else {
            !says("close")
        }
    }

    /// Whether this GET asks to become a WebSocket.
    pub(crate) fn wants_websocket(&self) -> bool {
        self.header("upgrade")
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
    }
}

/// Reads one request head (request line and headers, up to the blank line).
pub(crate) fn read_head(reader: &mut impl BufRead) -> Result<Head, HeadError> {
    let mut raw = Vec::new();
    let mut limited = reader.take(MAX_HEAD as u64);
    loop {
        let before = raw.len();
        let n = limited
            .read_until(b'\n', &mut raw)
            .map_err(|e| match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut if before == 0 => {
                    HeadError::Closed
                }
                _ => HeadError::Io(e),
            })?;
        if n == 0 {
            return Err(if raw.is_empty() {
                HeadError::Closed
            } else {
                HeadError::Bad("the request head is cut off or too large")
            });
        }
        // A blank line ends the head (RFC 9112 also lets a server skip blank lines before the
        // request line, which clients send after a body by mistake).
        if raw[before..] == *b"\r\n" || raw[before..] == *b"\n" {
            if before == 0 {
                raw.clear();
                continue;
            }
            break;
        }
    }
    parse_head(&raw)
}

/// Parses a complete head (pure; see `read_head`).
pub(crate) fn parse_head(raw: &[u8]) -> Result<Head, HeadError> {
    let text = std::str::from_utf8(raw).map_err(|_| HeadError::Bad("the head is not UTF-8"))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Bad("malformed request line"));
    };
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(HeadError::Bad("only HTTP/1.1 is served")),
    };
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HeadError::Bad("malformed header line"));
        };
        if name.is_empty() || name.contains([' ', '\t']) {
            return Err(HeadError::Bad("malformed header name"));
        }
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let path = target
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .to_owned();
    Ok(Head {
        method: method.to_owned(),
        path,
        headers,
        http10,
    })
}

/// What a request's body is, from its head.
#[derive(Debug, PartialEq)]
pub(crate) enum BodyLength {
    Known(usize),
    /// No `Content-Length` (a chunked body is refused: 411).
    Missing,
    /// Larger than the limit (413).
    TooLarge,
    Invalid,
}

/// The body length `head` announces, checked against `limit`.
pub(crate) fn body_length(head: &Head, limit: usize) -> BodyLength {
    if head.header("transfer-encoding").is_some() {
        return BodyLength::Missing;
    }
    match head.header("content-length") {
        None => BodyLength::Missing,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n > limit as u64 => BodyLength::TooLarge,
            Ok(n) => BodyLength::Known(n as usize),
            Err(_) => BodyLength::Invalid,
        },
    }
}

/// Whether the request carries `Authorization: Bearer <token>`, compared in time that does not
/// depend on where the two first differ.
pub(crate) fn authorized(head: &Head, token: &[u8]) -> bool {
    let given = head
        .header("authorization")
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
        })
        .unwrap_or_default();
    same_bytes(given.as_bytes(), token)
}

/// Constant-time equality: every byte of the longer input is looked at whatever the content.
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// Whether an `Origin` header names this machine (a browser page elsewhere must not drive
/// a loopback agent: DNS rebinding). No header (a program, not a browser) is fine.
pub(crate) fn origin_allowed(head: &Head) -> bool {
    let Some(origin) = head.header("origin") else {
        return true;
    };
    let host = origin
        .split_once("://")
        .map_or(origin, |(_, rest)| rest)
        .trim_end_matches('/');
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// The reason phrase of the statuses this transport sends.
fn reason(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        411 => "Length Required",
        413 => "Content Too Large",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// Writes a complete response with a `Content-Length` (JSON when there is a body).
pub(crate) fn respond(
    out: &mut impl Write,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    keep_alive: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut all = head.into_bytes();
    all.extend_from_slice(body);
    out.write_all(&all)?;
    out.flush()
}

/// An error answer: `{"error": why}`, as the SDK's server words them.
pub(crate) fn refuse(
    out: &mut impl Write,
    status: u16,
    why: &str,
    keep_alive: bool,
) -> io::Result<()> {
    let body = serde_json::to_vec(&crate::base::json::json!({ "error": why })).unwrap_or_default();
    let auth = [("WWW-Authenticate", "Bearer")];
    let headers: &[(&str, &str)] = if status == 401 { &auth } else { &[] };
    respond(out, status, headers, &body, keep_alive)
}

/// The head of an SSE stream; its body runs until the connection closes.
pub(crate) const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\nX-Accel-Buffering: no\r\n\r\n";

/// An SSE comment that keeps proxies from closing a quiet stream.
pub(crate) const SSE_KEEPALIVE: &[u8] = b": keepalive\n\n";

/// Appends one SSE event carrying a JSON-RPC message (one line of JSON: `data:` then a blank
/// line).
pub(crate) fn sse_event(out: &mut Vec<u8>, json: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> Head {
        parse_head(raw.as_bytes()).unwrap()
    }

    #[test]
    fn heads_parse_with_headers_found_without_case() {
        let h = head("POST /acp?x=1 HTTP/1.1\r\nHost: a\r\nacp-connection-id:  c1 \r\n\r\n");
        assert_eq!(h.method, "POST");
        assert_eq!(h.path, "/acp");
        assert_eq!(h.header("Acp-Connection-Id"), Some("c1"));
        assert!(h.keep_alive());
        assert!(!head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive());
        assert!(!head("GET / HTTP/1.0\r\n\r\n").keep_alive());
        for bad in [
            "GET /\r\n\r\n",
            "GET / HTTP/2\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "GET / HTTP/1.1\r\nbad name: x\r\n\r\n",
        ] {
            assert!(parse_head(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_head_is_read_up_to_its_blank_line_and_no_further() {
        let raw = b"\r\nPOST /acp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        let mut reader = std::io::BufReader::new(&raw[..]);
        let h = read_head(&mut reader).unwrap();
        assert_eq!(body_length(&h, 10), BodyLength::Known(2));
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"{}");
        let mut empty = std::io::BufReader::new(&b""[..]);
        assert!(matches!(read_head(&mut empty), Err(HeadError::Closed)));
        let huge = vec![b'a'; MAX_HEAD + 10];
        assert!(matches!(
            read_head(&mut std::io::BufReader::new(&huge[..])),
            Err(HeadError::Bad(_))
        ));
    }

    #[test]
    fn body_lengths() {
        let cases = [
            ("Content-Length: 5", BodyLength::Known(5)),
            ("Content-Length: 11", BodyLength::TooLarge),
            ("Content-Length: x", BodyLength::Invalid),
            ("Transfer-Encoding: chunked", BodyLength::Missing),
            ("X: y", BodyLength::Missing),
        ];
        for (header, want) in cases {
            let h = head(&format!("POST /acp HTTP/1.1\r\n{header}\r\n\r\n"));
            assert_eq!(body_length(&h, 10), want, "{header}");
        }
    }

    #[test]
    fn the_token_must_match_exactly() {
        let with = |v: &str| head(&format!("GET / HTTP/1.1\r\nAuthorization: {v}\r\n\r\n"));
        assert!(authorized(&with("Bearer s3cret"), b"s3cret"));
        assert!(authorized(&with("bearer  s3cret "), b"s3cret"));
        for wrong in [
            "Bearer s3cre",
            "Bearer s3cretx",
            "Basic s3cret",
            "s3cret",
            "Bearer ",
        ] {
            assert!(!authorized(&with(wrong), b"s3cret"), "{wrong}");
        }
        assert!(!authorized(&head("GET / HTTP/1.1\r\n\r\n"), b"s3cret"));
    }

    #[test]
    fn only_local_origins_may_drive_the_agent() {
        let with = |v: &str| head(&format!("GET / HTTP/1.1\r\nOrigin: {v}\r\n\r\n"));
        assert!(origin_allowed(&head("GET / HTTP/1.1\r\n\r\n")));
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "http://[::1]:8080",
        ] {
            assert!(origin_allowed(&with(ok)), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "http://localhost.evil.example",
            "null",
        ] {
            assert!(!origin_allowed(&with(bad)), "{bad}");
        }
    }
}
