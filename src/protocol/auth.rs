//! ACP authentication, as pure data: the `authMethods` of `initialize` and the texts of
//! `authenticate`.
//!
//! prime-agent has no account and no login flow: it calls the model with the provider's API
//! key, found per request in `--api-key`, `<agent dir>/auth.json`, the provider's environment
//! variable or models.json. So each method is an `agent` method naming where a key can come
//! from; `authenticate` checks that the start-up model's provider has a key and, when it has
//! none, says how to add one there. A client that never authenticates loses nothing: keys
//! are used wherever they are found. `logout` makes the process stop using keys until the
//! next `authenticate` (it deletes nothing).

use std::path::Path;

use crate::base::json::json;
use serde_json::Value;

use crate::protocol::rpc::RpcError;

/// Where a provider key can come from, one `authMethods` entry each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The provider's environment variable (`ANTHROPIC_API_KEY`, …) where the agent starts.
    Env,
    /// `<agent dir>/auth.json`, read on every request.
    AuthFile,
}

/// Every method: id, name, description.
const METHODS: [(Source, &str, &str, &str); 2] = [
    (
        Source::Env,
        "provider-env-key",
        "Provider API key in the environment",
        "Set the model provider's key variable (for example ANTHROPIC_API_KEY or OPENAI_API_KEY) in the environment the agent starts in, such as the editor's agent settings, then restart the agent. There is no login: authenticating checks that a key is there.",
    ),
    (
        Source::AuthFile,
        "provider-auth-file",
        "Provider API key in auth.json",
        "Add the key to ~/.prime/agent/auth.json as {\"<provider>\": {\"type\": \"api_key\", \"key\": \"...\"}}; it is read on every request, so no restart is needed. There is no login: authenticating checks that a key is there.",
    ),
];

impl Source {
    pub(crate) fn parse(id: &str) -> Option<Source> {
        METHODS.iter().find(|m| m.1 == id).map(|m| m.0)
    }
}

/// `authMethods` of the `initialize` result.
pub(crate) fn methods() -> Value {
    METHODS
        .iter()
        .map(|(_, id, name, description)| {
            json!({ "id": id, "name": name, "description": description })
        })
        .collect()
}

pub(crate) fn unknown_method(id: &str) -> String {
    let ids: Vec<&str> = METHODS.iter().map(|m| m.1).collect();
    format!(
        "Unknown auth method: {id} (this agent offers {})",
        ids.join(", ")
    )
}

/// ACP's `auth_required` (-32000), with what to do in `data.details` and the message.
pub(crate) fn required(details: &str) -> RpcError {
    RpcError {
        code: -32000,
        message: format!("Authentication required: {details}"),
        data: Some(json!({ "details": details })),
    }
}

/// What to do when `provider` has no key, through `source`.
pub(crate) fn missing(source: Source, provider: &str, env_keys: &[String], auth: &Path) -> String {
    match (source, env_keys.first()) {
        (Source::Env, Some(var)) => format!(
            "No API key found for {provider}. Set {var} in the environment the agent starts in and restart it."
        ),
        (Source::Env, None) => format!(
            "No API key found for {provider}, which has no key variable. Add the key to {} or set \"apiKey\" in models.json.",
            auth.display()
        ),
        (Source::AuthFile, _) => format!(
            "No API key found for {provider}. Add {{\"{provider}\": {{\"type\": \"api_key\", \"key\": \"...\"}}}} to {}.",
            auth.display()
        ),
    }
}

/// The turn's error while the process is signed out (`logout`).
pub(crate) const SIGNED_OUT: &str =
    "Signed out: this agent stopped using provider keys after a logout request. Authenticate again to use them.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_is_an_agent_method_with_id_and_name_and_parses_back() {
        let list = methods();
        let list = list.as_array().unwrap();
        assert!(!list.is_empty());
        for m in list {
            assert!(m.get("type").is_none(), "agent methods carry no type: {m}");
            let id = m["id"].as_str().unwrap();
            assert!(!m["name"].as_str().unwrap().is_empty());
            assert!(Source::parse(id).is_some(), "{id}");
        }
        assert_eq!(Source::parse("terminal"), None);
    }

    #[test]
    fn texts() {
        let auth = Path::new("/h/.prime/agent/auth.json");
        let cases = [
            (
                Source::Env,
                vec!["ANTHROPIC_API_KEY".to_owned()],
                "No API key found for anthropic. Set ANTHROPIC_API_KEY in the environment the agent starts in and restart it.",
            ),
            (
                Source::AuthFile,
                vec!["ANTHROPIC_API_KEY".to_owned()],
                "No API key found for anthropic. Add {\"anthropic\": {\"type\": \"api_key\", \"key\": \"...\"}} to /h/.prime/agent/auth.json.",
            ),
            (
                Source::Env,
                vec![],
                "No API key found for anthropic, which has no key variable. Add the key to /h/.prime/agent/auth.json or set \"apiKey\" in models.json.",
            ),
        ];
        for (source, vars, want) in cases {
            assert_eq!(missing(source, "anthropic", &vars, auth), want);
        }
        let e = required("x");
        assert_eq!(
            (e.code, e.message.as_str()),
            (-32000, "Authentication required: x")
        );
        assert!(unknown_method("nope")
            .starts_with("Unknown auth method: nope (this agent offers provider-env-key, "));
    }
}
