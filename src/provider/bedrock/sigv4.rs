//! AWS Signature Version 4 for request headers, pure: the canonical request, the string to
//! sign, the derived signing key and the `Authorization` header, with SHA-256 and HMAC-SHA256
//! from `ring` (already in the binary through rustls). Table-tested against AWS's published
//! signing test suite (fixtures/sigv4/, whose SOURCE.md names it).
//!
//! What the Bedrock runtime needs, and no more: header signing (no presigned URLs, no chunked
//! payload signing) and the non-S3 rules (each path segment URI-encoded once more, as the
//! service does with the path it receives; no path normalisation, which Bedrock's paths never
//! need).

use ring::{digest, hmac};

/// The signing algorithm's name, in the string to sign and the header.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// A key pair, and the session token temporary credentials come with.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    /// Never the secret or the token: a `{:?}` of a config must not leak them into a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("session_token", &self.session_token.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

/// One request as signed: its method, its path and query as sent on the wire (already
/// percent-encoded), the headers to sign (`host` and `x-amz-date` among them; names in any
/// case), and the hex SHA-256 of its body.
pub(crate) struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a [(String, String)],
    pub payload_sha256: &'a str,
}

/// Where and when: `amz_date` is `YYYYMMDDTHHMMSSZ`; the scope's date is its first 8 bytes.
pub(crate) struct Scope<'a> {
    pub amz_date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
}

/// Every intermediate value, so the tests can compare each with AWS's published one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Signed {
    pub canonical_request: String,
    pub string_to_sign: String,
    pub signature: String,
    pub authorization: String,
}

/// Signs `request` for `scope` with `credentials`.
pub(crate) fn sign(
    request: &Request<'_>,
    scope: &Scope<'_>,
    credentials: &AwsCredentials,
) -> Signed {
    let (canonical_headers, signed_headers) = canonical_headers(request.headers);
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method,
        canonical_uri(request.path),
        canonical_query(request.query),
        canonical_headers,
        signed_headers,
        request.payload_sha256
    );
    let date = scope.amz_date.get(..8).unwrap_or(scope.amz_date);
    let credential_scope = format!("{date}/{}/{}/aws4_request", scope.region, scope.service);
    let string_to_sign = format!(
        "{ALGORITHM}\n{}\n{credential_scope}\n{}",
        scope.amz_date,
        sha256_hex(canonical_request.as_bytes())
    );
    let key = signing_key(
        &credentials.secret_access_key,
        date,
        scope.region,
        scope.service,
    );
    let signature = hex(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());
    let authorization = format!(
        "{ALGORITHM} Credential={}/{credential_scope}, SignedHeaders={signed_headers}, Signature={signature}",
        credentials.access_key_id
    );
    Signed {
        canonical_request,
        string_to_sign,
        signature,
        authorization,
    }
}

/// The hex SHA-256 of `bytes` (the payload hash, and the canonical request's).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, bytes).as_ref())
}

/// `kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")`.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let step = |key: &[u8], data: &str| {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes());
        tag.as_ref().to_vec()
    };
    let k_date = step(format!("AWS4{secret}").as_bytes(), date);
    let k_region = step(&k_date, region);
    let k_service = step(&k_region, service);
    let k_signing = step(&k_service, "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, &k_signing)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

/// RFC 3986 percent-encoding of everything but the unreserved characters (and `/` when
/// `keep_slash`), upper-case hex, as SigV4 wants it.
pub(crate) fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The path as the service sees it, encoded once more (non-S3 services sign the encoding of
/// the path they received: `%3A` in a model id is signed as `%253A`).
fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    uri_encode(path, true)
}

/// `%XX` sequences decoded (the query's keys and values are re-encoded canonically).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex_pair = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (
            bytes[i],
            hex_pair.and_then(|h| u8::from_str_radix(h, 16).ok()),
        ) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query's pairs, each side decoded and re-encoded, sorted by key then value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                uri_encode(&percent_decode(k), false),
                uri_encode(&percent_decode(v), false),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// `name:value\n` per header (lower-case names, sorted; values trimmed with inner runs of
/// spaces collapsed; a repeated name's values joined by commas), and the signed names.
fn canonical_headers(headers: &[(String, String)]) -> (String, String) {
    let mut merged: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        match merged.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push(',');
                v.push_str(&value);
            }
            None => merged.push((name, value)),
        }
    }
    merged.sort_by(|a, b| a.0.cmp(&b.0));
    let canonical: String = merged.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let signed = merged
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(";");
    (canonical, signed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// One vector of AWS's signing test suite as fixtures/sigv4/<name>/ holds it.
    struct Vector {
        name: &'static str,
        dir: PathBuf,
    }

    impl Vector {
        fn read(&self, file: &str) -> String {
            std::fs::read_to_string(self.dir.join(file))
                .unwrap_or_else(|e| panic!("{}/{file}: {e}", self.name))
        }
    }

    /// `request.txt`: the request line, `Name:value` header lines, a blank line, the body.
    fn parse_request(text: &str) -> (String, String, Vec<(String, String)>, String) {
        let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
        let mut lines = head.lines();
        let line = lines.next().expect("request line");
        let mut parts = line.split(' ');
        let method = parts.next().expect("method").to_owned();
        let target = parts.next().expect("target").to_owned();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        (method, target, headers, body.to_owned())
    }

    #[test]
    fn the_published_signing_test_suite() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/sigv4");
        let names = [
            "get-vanilla",
            "post-vanilla",
            "get-vanilla-query-order-key-case",
            "post-header-key-sort",
            "get-vanilla-with-session-token",
            "post-x-www-form-urlencoded",
        ];
        for name in names {
            let v = Vector {
                name,
                dir: root.join(name),
            };
            let context: serde_json::Value =
                serde_json::from_str(&v.read("context.json")).expect("context");
            let c = &context["credentials"];
            let credentials = AwsCredentials {
                access_key_id: c["access_key_id"].as_str().expect("id").to_owned(),
                secret_access_key: c["secret_access_key"].as_str().expect("secret").to_owned(),
                session_token: c["token"].as_str().map(str::to_owned),
            };
            let (method, target, mut headers, body) = parse_request(&v.read("request.txt"));
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            // The signer adds these; the suite's context says which.
            headers.push(("X-Amz-Date".into(), "20150830T123600Z".into()));
            if let Some(token) = &credentials.session_token {
                headers.push(("X-Amz-Security-Token".into(), token.clone()));
            }
            let payload = sha256_hex(body.as_bytes());
            if context["sign_body"] == true {
                headers.push(("x-amz-content-sha256".into(), payload.clone()));
            }
            let signed = sign(
                &Request {
                    method: &method,
                    path,
                    query,
                    headers: &headers,
                    payload_sha256: &payload,
                },
                &Scope {
                    amz_date: "20150830T123600Z",
                    region: context["region"].as_str().expect("region"),
                    service: context["service"].as_str().expect("service"),
                },
                &credentials,
            );
            assert_eq!(
                signed.canonical_request,
                v.read("header-canonical-request.txt"),
                "{name}"
            );
            assert_eq!(
                signed.string_to_sign,
                v.read("header-string-to-sign.txt"),
                "{name}"
            );
            assert_eq!(signed.signature, v.read("header-signature.txt"), "{name}");
            let published = v.read("header-signed-request.txt");
            assert!(
                published.contains(&format!("Authorization:{}\n", signed.authorization)),
                "{name}: {}",
                signed.authorization
            );
        }
    }

    #[test]
    fn model_ids_are_encoded_once_more_in_the_canonical_uri() {
        let cases = [
            ("/", "/"),
            ("", "/"),
            (
                "/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/converse-stream",
                "/model/us.anthropic.claude-haiku-4-5-20251001-v1%253A0/converse-stream",
            ),
            ("/a b/~x", "/a%20b/~x"),
        ];
        for (path, want) in cases {
            assert_eq!(canonical_uri(path), want, "{path}");
        }
        assert_eq!(uri_encode("arn:aws/x y", false), "arn%3Aaws%2Fx%20y");
        assert_eq!(canonical_query("b=2&a=%7e&a=1"), "a=1&a=~&b=2");
        let (canonical, signed) = canonical_headers(&[
            ("X-B".into(), "  two   words ".into()),
            ("x-a".into(), "1".into()),
            ("X-A".into(), "2".into()),
        ]);
        assert_eq!(canonical, "x-a:1,2\nx-b:two words\n");
        assert_eq!(signed, "x-a;x-b");
        let debug = format!(
            "{:?}",
            AwsCredentials {
                access_key_id: "AKID".into(),
                secret_access_key: "very-secret".into(),
                session_token: Some("token-secret".into()),
            }
        );
        assert!(
            debug.contains("AKID") && !debug.contains("secret"),
            "{debug}"
        );
    }
}
