//! The `azure-openai-responses` wire API: OpenAI's Responses API on an Azure OpenAI resource.
//! The body and the stream are `responses.rs`'s; what differs is where the request goes
//! (`<endpoint>/responses?api-version=<v>`), the `api-key` header, and the `model` field,
//! which names the Azure deployment (`AZURE_OPENAI_DEPLOYMENT_NAME_MAP`, `model=deployment`
//! pairs separated by commas; a model without an entry is its own deployment name).
//!
//! The endpoint: `--base-url` or a models.json `baseUrl`, else `AZURE_OPENAI_BASE_URL`, else
//! `https://<AZURE_OPENAI_RESOURCE_NAME>.openai.azure.com/openai/v1`. An Azure host given
//! without a path gets `/openai/v1`, as the resource's portal shows it without one.

use serde_json::Value;

use super::config::ModelDef;
use super::{responses, ChatRequest};

/// The version the v1 API answers to (`AZURE_OPENAI_API_VERSION` overrides).
pub(crate) const DEFAULT_API_VERSION: &str = "v1";

/// The Azure settings of the environment, read at each request like the key.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AzureEnv {
    pub base_url: Option<String>,
    pub resource: Option<String>,
    pub api_version: Option<String>,
    pub deployments: Option<String>,
}

impl AzureEnv {
    pub(crate) fn from_env() -> AzureEnv {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        AzureEnv {
            base_url: var("AZURE_OPENAI_BASE_URL"),
            resource: var("AZURE_OPENAI_RESOURCE_NAME"),
            api_version: var("AZURE_OPENAI_API_VERSION"),
            deployments: var("AZURE_OPENAI_DEPLOYMENT_NAME_MAP"),
        }
    }
}

pub(crate) const NO_ENDPOINT: &str = "Azure OpenAI needs its endpoint: set AZURE_OPENAI_BASE_URL (https://<resource>.openai.azure.com/openai/v1) or AZURE_OPENAI_RESOURCE_NAME, or pass --base-url.";

/// The endpoint for requests (see the module), without a trailing slash.
pub(crate) fn endpoint(configured: &str, env: &AzureEnv) -> Result<String, String> {
    let raw = if !configured.trim().is_empty() {
        configured.trim().to_owned()
    } else if let Some(url) = &env.base_url {
        url.clone()
    } else if let Some(resource) = &env.resource {
        format!("https://{resource}.openai.azure.com/openai/v1")
    } else {
        return Err(NO_ENDPOINT.to_owned());
    };
    let trimmed = raw.trim_end_matches('/');
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        return Err(format!("Invalid Azure OpenAI base URL: {raw}"));
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let azure_host =
        host.ends_with(".openai.azure.com") || host.ends_with(".cognitiveservices.azure.com");
    if azure_host && (path.is_empty() || path == "/openai") {
        return Ok(format!("{scheme}://{host}/openai/v1"));
    }
    Ok(trimmed.to_owned())
}

pub(crate) fn url(endpoint: &str, env: &AzureEnv) -> String {
    let version = env.api_version.as_deref().unwrap_or(DEFAULT_API_VERSION);
    format!("{endpoint}/responses?api-version={version}")
}

pub(crate) fn headers(key: Option<&str>) -> Vec<(String, String)> {
    super::parts::stream_headers(key.map(|k| ("api-key", k.to_owned())))
}

/// The deployment serving `model` (`a=b,c=d`; blanks and malformed pairs are skipped).
pub(crate) fn deployment(model: &str, map: Option<&str>) -> String {
    map.into_iter()
        .flat_map(|m| m.split(','))
        .filter_map(|pair| pair.split_once('='))
        .map(|(m, d)| (m.trim(), d.trim()))
        .find(|(m, d)| *m == model && !d.is_empty())
        .map_or_else(|| model.to_owned(), |(_, d)| d.to_owned())
}

/// The Responses body, addressed to the deployment.
pub(crate) fn body(model: &ModelDef, req: &ChatRequest<'_>, env: &AzureEnv) -> Value {
    let mut body = responses::body(model, req);
    body["model"] = Value::String(deployment(&model.id, env.deployments.as_deref()));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_by_precedence_and_normalised() {
        let env = |base: Option<&str>, res: Option<&str>| AzureEnv {
            base_url: base.map(str::to_owned),
            resource: res.map(str::to_owned),
            ..AzureEnv::default()
        };
        let cases = [
            (
                "",
                env(None, Some("acme")),
                Ok("https://acme.openai.azure.com/openai/v1"),
            ),
            (
                "",
                env(Some("https://x.openai.azure.com/"), Some("acme")),
                Ok("https://x.openai.azure.com/openai/v1"),
            ),
            (
                "",
                env(Some("https://x.cognitiveservices.azure.com/openai"), None),
                Ok("https://x.cognitiveservices.azure.com/openai/v1"),
            ),
            (
                "http://127.0.0.1:9/openai/v1/",
                env(Some("https://ignored.openai.azure.com"), None),
                Ok("http://127.0.0.1:9/openai/v1"),
            ),
            (
                "",
                env(Some("https://gw.example.com/azure"), None),
                Ok("https://gw.example.com/azure"),
            ),
            ("", env(None, None), Err(NO_ENDPOINT.to_owned())),
            (
                "",
                env(Some("acme.openai.azure.com"), None),
                Err("Invalid Azure OpenAI base URL: acme.openai.azure.com".to_owned()),
            ),
        ];
        for (configured, env, want) in cases {
            assert_eq!(
                endpoint(configured, &env),
                want.map(str::to_owned),
                "{configured:?} {env:?}"
            );
        }
        let mut e = AzureEnv::default();
        assert_eq!(
            url("https://h/openai/v1", &e),
            "https://h/openai/v1/responses?api-version=v1"
        );
        e.api_version = Some("2025-04-01-preview".into());
        assert_eq!(
            url("https://h/openai/v1", &e),
            "https://h/openai/v1/responses?api-version=2025-04-01-preview"
        );
    }

    #[test]
    fn deployments_and_the_key_header() {
        let map = Some(" gpt-5.4 = prod-gpt54 , bad, gpt-4.1=, =x, gpt-5-mini=mini ");
        assert_eq!(deployment("gpt-5.4", map), "prod-gpt54");
        assert_eq!(deployment("gpt-5-mini", map), "mini");
        assert_eq!(
            deployment("gpt-4.1", map),
            "gpt-4.1",
            "an empty deployment is no entry"
        );
        assert_eq!(deployment("other", None), "other");
        let h = headers(Some("az-key"));
        assert!(h.contains(&("api-key".to_owned(), "az-key".to_owned())));
        assert!(!h.iter().any(|(n, _)| n == "authorization"));
    }
}
