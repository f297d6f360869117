//! A loopback Amazon Bedrock runtime that checks what AWS checks before it answers: the
//! bearer token, or the SigV4 signature recomputed from the request as received (the
//! canonical request from the raw path, query, signed headers and body hash; the string to
//! sign; the derived signing key), the credential scope's region and service, the date, and
//! the session token of temporary credentials. A refusal is Bedrock's own 403 body. An
//! accepted `ConverseStream` call is answered with an event stream framed here (prelude,
//! CRC32s, headers) from the JSON-lines fixtures in fixtures/bedrock/.
//!
//! Independent of the agent's code on purpose: its own canonicalisation, framing and CRC.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use ring::{digest, hmac};
use serde_json::Value;

use super::fixture;

/// What AWS answers a signature it recomputes differently (status 403).
pub const SIGNATURE_MISMATCH: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";
/// What AWS answers an access key or session token it does not know (status 403).
pub const UNRECOGNIZED_CLIENT: &str = "The security token included in the request is invalid.";

/// Credentials the mock accepts, and the region their requests must be scoped to.
#[derive(Clone, Debug)]
pub struct Account {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    pub region: String,
}

/// One answer to an accepted call.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A 200 event stream of these frames (one chunk each).
    Stream(Vec<Vec<u8>>),
    /// An error answer: status, `x-amzn-ErrorType`, `{"message": …}`.
    Error(u16, &'static str, &'static str),
    /// These frames, then nothing until the client closes the connection (a model that
    /// stalls mid-reply); the close is reported to `BedrockMock::wait_closed`.
    Stall(Vec<Vec<u8>>),
}

impl Reply {
    /// The stream of `fixtures/bedrock/<name>`.
    pub fn stream(name: &str) -> Reply {
        Reply::Stream(frames_of(name))
    }

    /// The stream of `name` with one payload byte of frame `index` flipped (its CRC now wrong).
    pub fn corrupted(name: &str, index: usize) -> Reply {
        let mut frames = frames_of(name);
        let frame = &mut frames[index];
        let at = frame.len() - 6;
        frame[at] ^= 0x20;
        Reply::Stream(frames)
    }
}

/// A request as the mock received it, with its verdict.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// `Err(message)` when the mock refused it.
    pub verdict: Result<(), String>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct BedrockMock {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    closed: crossbeam_channel::Receiver<()>,
}

struct Config {
    accounts: Vec<Account>,
    bearer: Option<String>,
    replies: Vec<Reply>,
    next: AtomicUsize,
    closed: crossbeam_channel::Sender<()>,
}

impl BedrockMock {
    /// Accepts `accounts`' signatures and the `bearer` token; answers accepted calls with
    /// `replies` in order (the last repeats).
    pub fn start(accounts: Vec<Account>, bearer: Option<&str>, replies: Vec<Reply>) -> BedrockMock {
        assert!(!replies.is_empty());
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind loopback");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (closed_tx, closed) = crossbeam_channel::unbounded();
        let config = Arc::new(Config {
            accounts,
            bearer: bearer.map(str::to_owned),
            replies,
            next: AtomicUsize::new(0),
            closed: closed_tx,
        });
        let (seen2, stop2) = (seen.clone(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (config, seen) = (config.clone(), seen2.clone());
                thread::spawn(move || serve(conn, &config, &seen));
            }
        });
        BedrockMock {
            port,
            seen,
            stop,
            closed,
        }
    }

    /// Waits until the client closes a stalled connection.
    pub fn wait_closed(&self, timeout: std::time::Duration) -> bool {
        self.closed.recv_timeout(timeout).is_ok()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for BedrockMock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One request off the wire: method, target, headers (lower-cased names), raw body.
struct Raw {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn read_raw(reader: &mut BufReader<TcpStream>) -> Option<Raw> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Raw {
        method,
        target,
        headers,
        body,
    })
}

fn serve(conn: TcpStream, config: &Config, seen: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut conn = conn;
    while let Some(raw) = read_raw(&mut reader) {
        let verdict = check(&raw, config);
        seen.lock().unwrap().push(Seen {
            path: raw.target.clone(),
            headers: raw.headers.clone(),
            body: serde_json::from_slice(&raw.body).unwrap_or(Value::Null),
            verdict: verdict.map_err(|(_, m)| m.to_owned()),
        });
        let written = match verdict {
            Err((kind, message)) => write_error(&mut conn, 403, kind, message),
            Ok(()) => {
                let i = config.next.fetch_add(1, Ordering::SeqCst);
                match &config.replies[i.min(config.replies.len() - 1)] {
                    Reply::Stream(frames) => write_stream(&mut conn, frames),
                    Reply::Error(status, kind, message) => {
                        write_error(&mut conn, *status, kind, message)
                    }
                    Reply::Stall(frames) => {
                        stall(&mut conn, &mut reader, frames);
                        let _ = config.closed.send(());
                        return;
                    }
                }
            }
        };
        if written.is_err() {
            return;
        }
    }
}

/// Bedrock's checks, in its order; the refusal's error type and message.
fn check(raw: &Raw, config: &Config) -> Result<(), (&'static str, &'static str)> {
    let path = raw.target.split('?').next().unwrap_or("");
    let ok_path = raw.method == "POST"
        && path.starts_with("/model/")
        && path.ends_with("/converse-stream")
        && path.matches('/').count() == 3;
    if !ok_path {
        return Err(("UnknownOperationException", "Unknown operation"));
    }
    let Some(auth) = raw.header("authorization") else {
        return Err((
            "MissingAuthenticationTokenException",
            "Missing Authentication Token",
        ));
    };
    if let Some(token) = auth.strip_prefix("Bearer ") {
        return match &config.bearer {
            Some(want) if want == token => Ok(()),
            _ => Err(("UnrecognizedClientException", UNRECOGNIZED_CLIENT)),
        };
    }
    check_signature(raw, auth, config)
}

fn check_signature(
    raw: &Raw,
    auth: &str,
    config: &Config,
) -> Result<(), (&'static str, &'static str)> {
    let mismatch = ("InvalidSignatureException", SIGNATURE_MISMATCH);
    let unknown = ("UnrecognizedClientException", UNRECOGNIZED_CLIENT);
    let rest = auth.strip_prefix("AWS4-HMAC-SHA256 ").ok_or(mismatch)?;
    let field = |name: &str| {
        rest.split(", ")
            .find_map(|f| f.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
    };
    let (credential, signed_names, signature) = (
        field("Credential").ok_or(mismatch)?,
        field("SignedHeaders").ok_or(mismatch)?,
        field("Signature").ok_or(mismatch)?,
    );
    let scope: Vec<&str> = credential.split('/').collect();
    let [akid, date, region, service, "aws4_request"] = scope[..] else {
        return Err(mismatch);
    };
    let account = config
        .accounts
        .iter()
        .find(|a| a.access_key_id == akid)
        .ok_or(unknown)?;
    if account.session_token.as_deref() != raw.header("x-amz-security-token") {
        return Err(unknown);
    }
    if region != account.region || service != "bedrock" {
        return Err(mismatch);
    }
    let amz_date = raw.header("x-amz-date").ok_or(mismatch)?;
    // A signature made more than 15 minutes away from the server's clock is refused.
    let skew = epoch_secs(amz_date).ok_or(mismatch)?.abs_diff(now_secs());
    if skew > 15 * 60 {
        return Err(("InvalidSignatureException", "Signature expired"));
    }
    let names: Vec<&str> = signed_names.split(';').collect();
    let must_sign = ["host", "x-amz-date"].into_iter().chain(
        raw.header("x-amz-security-token")
            .map(|_| "x-amz-security-token"),
    );
    if !amz_date.starts_with(date) || must_sign.into_iter().any(|h| !names.contains(&h)) {
        return Err(mismatch);
    }
    // A header sent twice is signed as both values joined: one `Host` is what a client means.
    if raw.headers.iter().filter(|(n, _)| n == "host").count() != 1 {
        return Err(mismatch);
    }
    let canonical = canonical_request(raw, &names).ok_or(mismatch)?;
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let mut key = format!("AWS4{}", account.secret_access_key).into_bytes();
    for part in [date, region, service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let expected = hex(&hmac_sha256(&key, string_to_sign.as_bytes()));
    if expected == signature {
        Ok(())
    } else {
        Err(mismatch)
    }
}

/// The canonical request AWS builds from what it received (`None`: a signed header is
/// missing).
fn canonical_request(raw: &Raw, names: &[&str]) -> Option<String> {
    let (path, query) = raw.target.split_once('?').unwrap_or((&raw.target, ""));
    let uri: String = path
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut pairs: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    pairs.sort_unstable();
    let mut headers = String::new();
    for name in names {
        let value = raw.header(name)?;
        headers.push_str(&format!(
            "{name}:{}\n",
            value.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    let payload = hex(digest::digest(&digest::SHA256, &raw.body).as_ref());
    Some(format!(
        "{}\n{uri}\n{}\n{headers}\n{}\n{payload}",
        raw.method,
        pairs.join("&"),
        names.join(";")
    ))
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `YYYYMMDDTHHMMSSZ` as seconds since the epoch.
fn epoch_secs(amz: &str) -> Option<u64> {
    let n = |r: std::ops::Range<usize>| amz.get(r)?.parse::<i64>().ok();
    if amz.len() != 16 || &amz[8..9] != "T" || !amz.ends_with('Z') {
        return None;
    }
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = days * 86_400 + n(9..11)? * 3600 + n(11..13)? * 60 + n(13..15)?;
    u64::try_from(secs).ok()
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_error(
    conn: &mut TcpStream,
    status: u16,
    kind: &str,
    message: &str,
) -> std::io::Result<()> {
    let body = serde_json::json!({ "message": message }).to_string();
    let head = format!(
        "HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\nx-amzn-ErrorType: {kind}:http://internal.amazon.com/coral/com.amazon.coral.service/\r\nx-amzn-RequestId: 00000000-0000-4000-8000-000000000000\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body.as_bytes())?;
    conn.flush()
}

fn write_stream(conn: &mut TcpStream, frames: &[Vec<u8>]) -> std::io::Result<()> {
    conn.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\nx-amzn-RequestId: 00000000-0000-4000-8000-000000000001\r\ntransfer-encoding: chunked\r\n\r\n",
    )?;
    for frame in frames {
        conn.write_all(format!("{:x}\r\n", frame.len()).as_bytes())?;
        conn.write_all(frame)?;
        conn.write_all(b"\r\n")?;
        conn.flush()?;
    }
    conn.write_all(b"0\r\n\r\n")?;
    conn.flush()
}

/// Sends `frames` as a chunked event stream left open, then reads until the client closes
/// the connection (at most a minute, so a broken client cannot leak the thread).
fn stall(conn: &mut TcpStream, reader: &mut BufReader<TcpStream>, frames: &[Vec<u8>]) {
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\ntransfer-encoding: chunked\r\n\r\n";
    if conn.write_all(head).is_err() {
        return;
    }
    for frame in frames {
        let chunk = [
            format!("{:x}\r\n", frame.len()).into_bytes(),
            frame.clone(),
            b"\r\n".to_vec(),
        ]
        .concat();
        if conn.write_all(&chunk).and_then(|_| conn.flush()).is_err() {
            return;
        }
    }
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(60)));
    let mut buf = [0u8; 256];
    while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
}

/// The frames of `fixtures/bedrock/<name>` (see its README for the line format).
pub fn frames_of(name: &str) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(fixture(&format!("bedrock/{name}"))).expect("fixture");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            let payload = v["payload"].to_string();
            let headers = match v["exception"].as_str() {
                Some(kind) => [
                    (":exception-type", kind),
                    (":content-type", "application/json"),
                    (":message-type", "exception"),
                ],
                None => [
                    (":event-type", v["event"].as_str().expect("event")),
                    (":content-type", "application/json"),
                    (":message-type", "event"),
                ],
            };
            frame(&headers, payload.as_bytes())
        })
        .collect()
}

/// One event-stream message with string headers.
fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let total = (12 + h.len() + payload.len() + 4) as u32;
    let mut out = total.to_be_bytes().to_vec();
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let message_crc = crc32(&out);
    out.extend_from_slice(&message_crc.to_be_bytes());
    out
}

/// CRC-32 (IEEE), bit by bit.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}
