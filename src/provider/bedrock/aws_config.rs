//! Where a Bedrock call's credentials, region and endpoint come from, the way the AWS SDKs
//! and CLI find them (read at each request, like a key, so a refreshed profile is picked up):
//!
//! - credentials: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`), unless
//!   `AWS_PROFILE` names a profile (then, as the JavaScript SDK does, the profile alone); else
//!   the profile (`AWS_PROFILE`, or `default`) in the shared credentials file
//!   (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`), then in the config file
//!   (`AWS_CONFIG_FILE`, else `~/.aws/config`, where it is `[profile name]`);
//! - region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, else `us-east-1`;
//! - endpoint: a configured base URL (`--base-url`, models.json `baseUrl`), else
//!   `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else `AWS_ENDPOINT_URL` (both ignored when
//!   `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`), else `https://bedrock-runtime.<region>.amazonaws.com`.
//!
//! Not supported, and said so when a profile relies on them: IAM Identity Center (SSO),
//! `credential_process`, assumed roles (`role_arn`/`source_profile`), web identity, and the
//! container and instance metadata endpoints.
//!
//! Pure over `Sources` (the environment and a file reader), so it is table-tested.

use std::path::{Path, PathBuf};

use super::sigv4::AwsCredentials;

/// The environment and the file system, as the resolution sees them.
pub(crate) struct Sources<'a> {
    /// A variable's value; `None` when unset or empty.
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// A file's text; `None` when it cannot be read.
    pub read: &'a dyn Fn(&Path) -> Option<String>,
}

impl Sources<'_> {
    /// The process's environment and files (bounded reads: `base::untrusted`).
    pub(crate) fn with_process<T>(f: impl FnOnce(&Sources<'_>) -> T) -> T {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let read = |path: &Path| match crate::base::untrusted::read_text(
            path,
            crate::base::untrusted::TEXT_CAP,
        ) {
            Ok(text) => Some(text),
            Err(crate::base::untrusted::Skip::NotFound) => None,
            Err(why) => {
                log::warn!("Ignoring {}: {why}", path.display());
                None
            }
        };
        f(&Sources {
            var: &var,
            read: &read,
        })
    }
}

/// How a request proves who sends it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Auth {
    /// A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`): `Authorization: Bearer`, no signing.
    Bearer(String),
    /// Signature Version 4 with these credentials; `source` says where they came from (for
    /// the error when AWS refuses them).
    SigV4 {
        credentials: AwsCredentials,
        source: String,
    },
}

/// Everything a call needs from the AWS configuration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    pub auth: Auth,
    pub region: String,
    /// Without a trailing slash.
    pub endpoint: String,
}

/// The region when nothing names one (the SDKs have none; upstream takes this one).
pub(crate) const DEFAULT_REGION: &str = "us-east-1";

/// Resolves the call's configuration. `bearer` is the provider's key if one was found
/// (`--api-key`, auth.json, `AWS_BEARER_TOKEN_BEDROCK`, models.json `apiKey`); `provider`
/// names the provider in the error when there are no credentials.
pub(crate) fn resolve(
    configured_base: &str,
    bearer: Option<String>,
    provider: &str,
    src: &Sources<'_>,
) -> Result<Resolved, String> {
    let files = SharedFiles::read(src);
    let profile_name = (src.var)("AWS_PROFILE");
    let profile = files.profile(profile_name.as_deref().unwrap_or("default"));
    let named_region = (src.var)("AWS_REGION").or_else(|| (src.var)("AWS_DEFAULT_REGION"));
    // A configured base URL that is a region's standard endpoint (upstream's catalogue gives
    // every model `https://bedrock-runtime.us-east-1.amazonaws.com`) yields to a region the
    // user names; otherwise its region is the one signed for, as upstream does.
    let standard = regional_endpoint(configured_base);
    let user_named = named_region.is_some() || profile_name.is_some();
    let configured_base = match standard {
        Some(_) if user_named => "",
        _ => configured_base,
    };
    let region = named_region
        .or_else(|| standard.filter(|_| !user_named).map(str::to_owned))
        .or_else(|| profile.get("region"))
        .unwrap_or_else(|| DEFAULT_REGION.to_owned());
    let endpoint = endpoint(configured_base, &region, src);
    let auth = match bearer {
        Some(token) => Auth::Bearer(token),
        None => signing_credentials(profile_name.as_deref(), &profile, &files, provider, src)?,
    };
    Ok(Resolved {
        auth,
        region,
        endpoint,
    })
}

/// Whether any credentials are configured, without reading files: what makes auto-selection
/// and the model menu count the provider as usable (upstream's test).
pub(crate) fn configured(var: &dyn Fn(&str) -> Option<String>) -> bool {
    var("AWS_PROFILE").is_some()
        || (var("AWS_ACCESS_KEY_ID").is_some() && var("AWS_SECRET_ACCESS_KEY").is_some())
        || var("AWS_BEARER_TOKEN_BEDROCK").is_some()
}

/// The region of a standard Bedrock runtime endpoint URL
/// (`https://bedrock-runtime[-fips].<region>.amazonaws.com[.cn]`), if it is one.
fn regional_endpoint(url: &str) -> Option<&str> {
    let rest = url.trim().split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', ':']).next()?;
    let host = host.strip_suffix(".cn").unwrap_or(host);
    let inner = host
        .strip_prefix("bedrock-runtime-fips.")
        .or_else(|| host.strip_prefix("bedrock-runtime."))?
        .strip_suffix(".amazonaws.com")?;
    let valid = !inner.is_empty()
        && inner
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    valid.then_some(inner)
}

fn endpoint(configured: &str, region: &str, src: &Sources<'_>) -> String {
    let configured = configured.trim();
    if !configured.is_empty() {
        return configured.trim_end_matches('/').to_owned();
    }
    let ignore_env = (src.var)("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let from_env = (!ignore_env)
        .then(|| {
            (src.var)("AWS_ENDPOINT_URL_BEDROCK_RUNTIME").or_else(|| (src.var)("AWS_ENDPOINT_URL"))
        })
        .flatten();
    match from_env {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("https://bedrock-runtime.{region}.amazonaws.com"),
    }
}

/// The profile settings that mean credentials come some way this build does not take.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("credential_process", "credential_process"),
    ("sso_session", "IAM Identity Center (SSO)"),
    ("sso_start_url", "IAM Identity Center (SSO)"),
    ("role_arn", "an assumed role (role_arn)"),
    ("web_identity_token_file", "web identity"),
    ("credential_source", "credential_source"),
];

fn signing_credentials(
    profile_name: Option<&str>,
    profile: &Profile,
    files: &SharedFiles,
    provider: &str,
    src: &Sources<'_>,
) -> Result<Auth, String> {
    if profile_name.is_none() {
        if let (Some(id), Some(secret)) = (
            (src.var)("AWS_ACCESS_KEY_ID"),
            (src.var)("AWS_SECRET_ACCESS_KEY"),
        ) {
            return Ok(Auth::SigV4 {
                credentials: AwsCredentials {
                    access_key_id: id,
                    secret_access_key: secret,
                    session_token: (src.var)("AWS_SESSION_TOKEN"),
                },
                source: "the environment (AWS_ACCESS_KEY_ID)".to_owned(),
            });
        }
    }
    let name = profile_name.unwrap_or("default");
    if let Some(auth) = profile.credentials(name) {
        return Ok(auth);
    }
    if let Some((_, how)) = UNSUPPORTED.iter().find(|(k, _)| profile.get(k).is_some()) {
        return Err(format!(
            "The AWS profile \"{name}\" gets its credentials through {how}, which prime-agent does not support. Export plain credentials instead (aws configure export-credentials --profile {name} --format env) or set AWS_BEARER_TOKEN_BEDROCK."
        ));
    }
    if profile_name.is_some() {
        return Err(format!(
            "The AWS profile \"{name}\" has no aws_access_key_id and aws_secret_access_key in {} or {}.",
            files.credentials_path.display(),
            files.config_path.display()
        ));
    }
    Err(format!(
        "No API key found for {provider}. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN for temporary credentials), AWS_PROFILE (a profile in {} or {}), or AWS_BEARER_TOKEN_BEDROCK.",
        files.credentials_path.display(),
        files.config_path.display()
    ))
}

/// The two shared files, read.
struct SharedFiles {
    credentials_path: PathBuf,
    config_path: PathBuf,
    credentials: Vec<Section>,
    config: Vec<Section>,
}

/// One `[section]` of an INI file: its name as written, its `key = value` settings (keys
/// lower-cased).
#[derive(Debug, Default)]
struct Section {
    name: String,
    settings: Vec<(String, String)>,
}

impl SharedFiles {
    fn read(src: &Sources<'_>) -> SharedFiles {
        let home = (src.var)("HOME").unwrap_or_default();
        let path = |var: &str, file: &str| {
            (src.var)(var).map_or_else(|| Path::new(&home).join(".aws").join(file), PathBuf::from)
        };
        let credentials_path = path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let config_path = path("AWS_CONFIG_FILE", "config");
        let parse = |p: &Path| (src.read)(p).map(|t| parse_ini(&t)).unwrap_or_default();
        SharedFiles {
            credentials: parse(&credentials_path),
            config: parse(&config_path),
            credentials_path,
            config_path,
        }
    }

    /// The profile `name`: its section of the credentials file (`[name]`) and of the config
    /// file (`[profile name]`, or `[default]`), where the credentials file wins.
    fn profile(&self, name: &str) -> Profile {
        let in_config = |s: &&Section| {
            s.name == format!("profile {name}") || (name == "default" && s.name == "default")
        };
        let mut settings = Vec::new();
        let mut sources = Vec::new();
        if let Some(s) = self.credentials.iter().find(|s| s.name == name) {
            settings.extend(s.settings.iter().cloned());
            sources.push(self.credentials_path.clone());
        }
        if let Some(s) = self.config.iter().find(in_config) {
            settings.extend(s.settings.iter().cloned());
            sources.push(self.config_path.clone());
        }
        Profile { settings, sources }
    }
}

/// A profile's settings, the credentials file's first.
struct Profile {
    settings: Vec<(String, String)>,
    sources: Vec<PathBuf>,
}

impl Profile {
    fn get(&self, key: &str) -> Option<String> {
        self.settings
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    }

    fn credentials(&self, name: &str) -> Option<Auth> {
        let (id, secret) = (
            self.get("aws_access_key_id")?,
            self.get("aws_secret_access_key")?,
        );
        let files: Vec<String> = self
            .sources
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        Some(Auth::SigV4 {
            credentials: AwsCredentials {
                access_key_id: id,
                secret_access_key: secret,
                session_token: self.get("aws_session_token"),
            },
            source: format!("the AWS profile \"{name}\" ({})", files.join(", ")),
        })
    }
}

/// The AWS flavour of INI: `[section]` lines, `key = value` (or `key=value`), `#` and `;`
/// comment lines; an indented line continues a nested setting (`s3 =` blocks) and is skipped.
fn parse_ini(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push(Section {
                name: name.split_whitespace().collect::<Vec<_>>().join(" "),
                settings: Vec::new(),
            });
            continue;
        }
        if let (Some(section), Some((k, v))) = (sections.last_mut(), line.split_once('=')) {
            section
                .settings
                .push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Resolves with these variables and files (`HOME` is `/home/u`).
    fn resolve_with(
        base: &str,
        bearer: Option<&str>,
        vars: &[(&str, &str)],
        files: &[(&str, &str)],
    ) -> Result<Resolved, String> {
        let mut vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        vars.entry("HOME".into())
            .or_insert_with(|| "/home/u".into());
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        let var = |k: &str| vars.get(k).cloned();
        let read = |p: &Path| files.get(p).cloned();
        resolve(
            base,
            bearer.map(str::to_owned),
            "amazon-bedrock",
            &Sources {
                var: &var,
                read: &read,
            },
        )
    }

    fn keys(id: &str, secret: &str, token: Option<&str>) -> AwsCredentials {
        AwsCredentials {
            access_key_id: id.into(),
            secret_access_key: secret.into(),
            session_token: token.map(str::to_owned),
        }
    }

    const CREDENTIALS: &str = "/home/u/.aws/credentials";
    const CONFIG: &str = "/home/u/.aws/config";
    const SHARED: &str = "# a comment\n[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key=default-secret\n\n[work]\naws_access_key_id = AKIDWORK\naws_secret_access_key = work-secret\naws_session_token = work-token\n";
    const CONFIG_TEXT: &str = "[default]\nregion = eu-west-1\n[profile work]\nregion = eu-central-1\ns3 =\n  max_concurrent_requests = 20\n[profile sso]\nsso_session = corp\nregion = us-west-2\n[profile cfgkeys]\naws_access_key_id = AKIDCFG\naws_secret_access_key = cfg-secret\n";

    #[test]
    fn credentials_by_precedence() {
        let files = [(CREDENTIALS, SHARED), (CONFIG, CONFIG_TEXT)];
        let env_keys = [
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_SESSION_TOKEN", "env-token"),
        ];
        // (variables, the credentials, the region)
        type Case<'a> = (Vec<(&'a str, &'a str)>, AwsCredentials, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (
                env_keys.to_vec(),
                keys("AKIDENV", "env-secret", Some("env-token")),
                "eu-west-1",
            ),
            (
                vec![],
                keys("AKIDDEFAULT", "default-secret", None),
                "eu-west-1",
            ),
            (
                // A named profile wins over keys in the environment.
                [env_keys.as_slice(), &[("AWS_PROFILE", "work")]].concat(),
                keys("AKIDWORK", "work-secret", Some("work-token")),
                "eu-central-1",
            ),
            (
                vec![
                    ("AWS_PROFILE", "cfgkeys"),
                    ("AWS_DEFAULT_REGION", "ap-south-1"),
                ],
                keys("AKIDCFG", "cfg-secret", None),
                "ap-south-1",
            ),
            (
                vec![
                    ("AWS_REGION", "us-west-2"),
                    ("AWS_DEFAULT_REGION", "ap-south-1"),
                ],
                keys("AKIDDEFAULT", "default-secret", None),
                "us-west-2",
            ),
        ];
        for (vars, want, region) in cases {
            let r = resolve_with("", None, &vars, &files).expect("resolves");
            let Auth::SigV4 { credentials, .. } = &r.auth else {
                panic!("{vars:?}: {r:?}")
            };
            assert_eq!(credentials, &want, "{vars:?}");
            assert_eq!(r.region, region, "{vars:?}");
            assert_eq!(
                r.endpoint,
                format!("https://bedrock-runtime.{region}.amazonaws.com")
            );
        }
        // Files named by the variables; the source says which.
        let r = resolve_with(
            "",
            None,
            &[
                ("AWS_SHARED_CREDENTIALS_FILE", "/etc/creds"),
                ("AWS_PROFILE", "work"),
            ],
            &[("/etc/creds", SHARED)],
        )
        .expect("resolves");
        assert_eq!(r.region, DEFAULT_REGION);
        let Auth::SigV4 { source, .. } = r.auth else {
            panic!("signed")
        };
        assert_eq!(source, "the AWS profile \"work\" (/etc/creds)");
    }

    #[test]
    fn bearer_tokens_endpoints_and_errors() {
        let r = resolve_with("", Some("bedrock-api-key"), &[], &[]).expect("bearer");
        assert_eq!(r.auth, Auth::Bearer("bedrock-api-key".into()));
        assert_eq!(
            r.endpoint,
            "https://bedrock-runtime.us-east-1.amazonaws.com"
        );
        let endpoints = [
            ("", vec![("AWS_ENDPOINT_URL", "http://x:1/")], "http://x:1"),
            (
                "",
                vec![
                    ("AWS_ENDPOINT_URL", "http://x:1"),
                    ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://y:2"),
                ],
                "http://y:2",
            ),
            (
                "https://vpce.example/",
                vec![("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://y:2")],
                "https://vpce.example",
            ),
            (
                "",
                vec![
                    ("AWS_ENDPOINT_URL", "http://x:1"),
                    ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
                    ("AWS_REGION", "eu-north-1"),
                ],
                "https://bedrock-runtime.eu-north-1.amazonaws.com",
            ),
        ];
        for (base, vars, want) in endpoints {
            let r = resolve_with(base, Some("t"), &vars, &[]).expect("resolves");
            assert_eq!(r.endpoint, want, "{base} {vars:?}");
        }
        // A standard regional endpoint as the base URL: (vars, endpoint, region).
        let east = "https://bedrock-runtime.us-east-1.amazonaws.com";
        let regional = [
            (vec![], east.to_owned(), "us-east-1"),
            (
                vec![("AWS_REGION", "eu-west-1")],
                "https://bedrock-runtime.eu-west-1.amazonaws.com".to_owned(),
                "eu-west-1",
            ),
            (
                vec![("AWS_PROFILE", "p")],
                "https://bedrock-runtime.us-east-1.amazonaws.com".to_owned(),
                "us-east-1",
            ),
        ];
        for (vars, want, region) in regional {
            let r = resolve_with(east, Some("t"), &vars, &[]).expect("resolves");
            assert_eq!(
                (r.endpoint.as_str(), r.region.as_str()),
                (want.as_str(), region),
                "{vars:?}"
            );
        }
        let r = resolve_with(
            "https://bedrock-runtime-fips.us-gov-west-1.amazonaws.com",
            Some("t"),
            &[],
            &[],
        )
        .expect("resolves");
        assert_eq!(r.region, "us-gov-west-1");
        assert_eq!(
            regional_endpoint("https://bedrock-runtime.cn-north-1.amazonaws.com.cn/"),
            Some("cn-north-1")
        );
        assert_eq!(regional_endpoint("http://127.0.0.1:9"), None);
        assert_eq!(
            regional_endpoint("https://vpce-1.bedrock-runtime.us-east-1.vpce.amazonaws.com"),
            None
        );

        let files = [(CREDENTIALS, SHARED), (CONFIG, CONFIG_TEXT)];
        let errors = [
            (vec![], vec![], "No API key found for amazon-bedrock. Set AWS_ACCESS_KEY_ID"),
            (
                vec![("AWS_ACCESS_KEY_ID", "only-the-id")],
                vec![],
                "No API key found for amazon-bedrock.",
            ),
            (
                vec![("AWS_PROFILE", "sso")],
                files.to_vec(),
                "The AWS profile \"sso\" gets its credentials through IAM Identity Center (SSO), which prime-agent does not support.",
            ),
            (
                vec![("AWS_PROFILE", "nope")],
                files.to_vec(),
                "The AWS profile \"nope\" has no aws_access_key_id and aws_secret_access_key in /home/u/.aws/credentials or /home/u/.aws/config.",
            ),
        ];
        for (vars, files, want) in errors {
            let e = resolve_with("", None, &vars, &files).expect_err("fails");
            assert!(e.starts_with(want), "{vars:?}: {e}");
        }
        let var = |k: &str| (k == "AWS_PROFILE").then(|| "p".to_owned());
        assert!(configured(&var));
        assert!(!configured(
            &|k: &str| (k == "AWS_ACCESS_KEY_ID").then(String::new)
        ));
    }
}
