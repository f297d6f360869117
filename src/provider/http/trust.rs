//! Which certificate authorities a model call trusts, read once at start-up from the variables
//! OpenSSL and Node read: `SSL_CERT_FILE` and `SSL_CERT_DIR` replace the built-in roots
//! (Mozilla's, compiled in through `webpki-roots`), `NODE_EXTRA_CA_CERTS` adds to them.
//!
//! A file named by one of them that cannot be read or holds no certificate is a start-up
//! error naming it: a corporate CA silently ignored would only show up as every call failing.
//!
//! ureq takes extra roots only as certificates, and the built-in roots exist only as trust
//! anchors (subject, key, name constraints), so adding to them wraps each anchor in a minimal
//! unsigned certificate that rustls reads back as the same anchor (a unit test checks every
//! one): an anchor's signature is never verified, only its subject and key are used.

use std::path::Path;

use ureq::tls::{Certificate, PemItem, RootCerts};

/// The roots a model call trusts; `None` = ureq's built-in ones.
pub(crate) type Roots = Option<RootCerts>;

/// Reads the variables through `var` (the environment at start-up).
pub(crate) fn from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<Roots, String> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let mut certs: Vec<Certificate<'static>> = Vec::new();
    let mut replaced = false;
    if let Some(file) = set("SSL_CERT_FILE") {
        certs.extend(read_pem_file(Path::new(&file), "SSL_CERT_FILE")?);
        replaced = true;
    }
    if let Some(dirs) = set("SSL_CERT_DIR") {
        // OpenSSL's form: directories separated by `:`.
        for dir in dirs.split(':').filter(|d| !d.is_empty()) {
            certs.extend(read_pem_dir(Path::new(dir))?);
        }
        replaced = true;
    }
    let extra = match set("NODE_EXTRA_CA_CERTS") {
        Some(file) => read_pem_file(Path::new(&file), "NODE_EXTRA_CA_CERTS")?,
        None => Vec::new(),
    };
    if !replaced && extra.is_empty() {
        return Ok(None);
    }
    if !replaced {
        certs.extend(builtin_roots());
    }
    certs.extend(extra);
    Ok(Some(RootCerts::from(certs)))
}

/// Every certificate in a PEM file; none, or an unreadable file, is an error naming it.
fn read_pem_file(path: &Path, var: &str) -> Result<Vec<Certificate<'static>>, String> {
    let bad = |why: String| format!("{var}={}: {why}", path.display());
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let certs = parse_certs(&bytes).map_err(bad)?;
    if certs.is_empty() {
        return Err(bad(
            "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".to_owned(),
        ));
    }
    Ok(certs)
}

/// The certificates of every regular file in `dir` (OpenSSL's hashed links included); files
/// that hold none are skipped, as OpenSSL does, but the directory must hold at least one.
fn read_pem_dir(dir: &Path) -> Result<Vec<Certificate<'static>>, String> {
    let bad = |why: String| format!("SSL_CERT_DIR={}: {why}", dir.display());
    let entries = std::fs::read_dir(dir).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut names: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    let mut certs = Vec::new();
    for path in names.iter().filter(|p| p.is_file()) {
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        match parse_certs(&bytes) {
            Ok(found) => certs.extend(found),
            Err(why) => log::warn!("SSL_CERT_DIR: skipping {}: {why}", path.display()),
        }
    }
    if certs.is_empty() {
        return Err(bad("no PEM certificate in any file of it".to_owned()));
    }
    Ok(certs)
}

/// The certificates of a PEM text (other sections, such as keys, are ignored). A section that
/// does not decode, or whose content is not a DER sequence, is an error.
fn parse_certs(pem: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let mut out = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        if let PemItem::Certificate(c) = item.map_err(|e| format!("invalid PEM: {e}"))? {
            if c.der().first() != Some(&0x30) || c.der().len() < 64 {
                return Err("a CERTIFICATE section that is not an X.509 certificate".into());
            }
            out.push(c);
        }
    }
    Ok(out)
}

/// ureq's built-in roots as certificates (see the module doc).
fn builtin_roots() -> impl Iterator<Item = Certificate<'static>> {
    webpki_roots::TLS_SERVER_ROOTS.iter().map(|anchor| {
        Certificate::from_der(&anchor_certificate(
            &anchor.subject,
            &anchor.subject_public_key_info,
            anchor.name_constraints.as_deref(),
        ))
        .to_owned()
    })
}

/// A DER element: `tag`, its definite length, `content`.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

const SEQUENCE: u8 = 0x30;

/// An unsigned v3 certificate carrying a trust anchor: `subject` and `spki` are the contents
/// of the Name and SubjectPublicKeyInfo sequences, `constraints` those of NameConstraints.
fn anchor_certificate(subject: &[u8], spki: &[u8], constraints: Option<&[u8]>) -> Vec<u8> {
    // sha256WithRSAEncryption, NULL parameters: any algorithm will do, it is never checked.
    let algorithm = tlv(
        SEQUENCE,
        &[
            &tlv(
                0x06,
                &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b],
            )[..],
            &[0x05, 0x00],
        ]
        .concat(),
    );
    let name = tlv(SEQUENCE, subject);
    let validity = tlv(
        SEQUENCE,
        &[tlv(0x17, b"000101000000Z"), tlv(0x18, b"99991231235959Z")].concat(),
    );
    let mut tbs = [
        tlv(0xa0, &tlv(0x02, &[2])),
        tlv(0x02, &[1]),
        algorithm.clone(),
        name.clone(),
        validity,
        name,
        tlv(SEQUENCE, spki),
    ]
    .concat();
    if let Some(nc) = constraints {
        // id-ce-nameConstraints (2.5.29.30), critical.
        let extension = tlv(
            SEQUENCE,
            &[
                tlv(0x06, &[0x55, 0x1d, 0x1e]),
                tlv(0x01, &[0xff]),
                tlv(0x04, &tlv(SEQUENCE, nc)),
            ]
            .concat(),
        );
        tbs.extend(tlv(0xa3, &tlv(SEQUENCE, &extension)));
    }
    tlv(
        SEQUENCE,
        &[tlv(SEQUENCE, &tbs), algorithm, tlv(0x03, &[0])].concat(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_root_reads_back_as_the_same_anchor() {
        let roots = webpki_roots::TLS_SERVER_ROOTS;
        let constrained = roots
            .iter()
            .filter(|a| a.name_constraints.is_some())
            .count();
        assert!(
            constrained > 0,
            "the list has name-constrained roots to check"
        );
        for (cert, want) in builtin_roots().zip(roots.iter()) {
            let der = rustls_pki_types::CertificateDer::from(cert.der().to_vec());
            let got = webpki::anchor_from_trusted_cert(&der).expect("parses as an anchor");
            assert_eq!(got.subject, want.subject);
            assert_eq!(got.subject_public_key_info, want.subject_public_key_info);
            assert_eq!(got.name_constraints, want.name_constraints);
        }
    }

    #[test]
    fn bad_files_fail_naming_the_variable_and_the_file() {
        let dir = std::env::temp_dir().join(format!("prime-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let garbled = dir.join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let missing = dir.join("missing.pem");
        let env = |name: &'static str, value: &Path| {
            let value = value.display().to_string();
            move |n: &str| (n == name).then(|| value.clone())
        };
        let err = from_env(&env("SSL_CERT_FILE", &empty)).unwrap_err();
        assert!(
            err.starts_with(&format!("SSL_CERT_FILE={}: no PEM", empty.display())),
            "{err}"
        );
        let err = from_env(&env("NODE_EXTRA_CA_CERTS", &garbled)).unwrap_err();
        assert!(err.contains("garbled.pem: invalid PEM"), "{err}");
        let err = from_env(&env("SSL_CERT_FILE", &missing)).unwrap_err();
        assert!(err.contains("missing.pem: cannot read it"), "{err}");
        let err = from_env(&env("SSL_CERT_DIR", &dir.join("nodir"))).unwrap_err();
        assert!(err.starts_with("SSL_CERT_DIR="), "{err}");
        assert!(from_env(&|_| None).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
