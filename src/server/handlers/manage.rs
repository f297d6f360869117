//! Session management and authentication methods: `session/delete`, `session/fork`
//! (unstable), `session/set_title` (unstable) and `/rename`, `authenticate`, `logout`.
//! Parsing is `acp.rs`'s, the store's side `persist/manage.rs`'s, the texts `auth.rs`'s.

// The main loop does no IO (clippy.toml lists what that excludes; `make io-ban` checks it).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::base::json::json;
use serde_json::Value;

use crate::protocol::acp;
use crate::protocol::auth;
use crate::protocol::rpc::{RequestId, RpcError};
use crate::server::main_loop::MainLoop;
use crate::server::session::Action;
use crate::server::store_worker::{Source, StoreJob};

use super::{session_cwd, ONE_SESSION};

impl MainLoop {
    /// `session/delete {sessionId}`: an open session is closed first (as `session/close`,
    /// its running turn cancelled) and answered once its teardown has deleted it; a stored one
    /// is deleted by the store worker (its claim may wait on another process); an unknown one
    /// is answered `{}` (ACP: deleting what is gone succeeds). `Ok(None)`: answered later.
    pub(crate) fn session_delete(
        &mut self,
        request: RequestId,
        params: &Value,
    ) -> Result<Option<Value>, RpcError> {
        let session_id = acp::parse_session_id(params, acp::SESSION_DELETE)?;
        if let Some(i) = self.session_index(&session_id) {
            self.with_session_at(i, |s, now, out| s.close_and_delete(request, now, out));
            return Ok(None);
        }
        if self.agent.store.is_none() {
            return Ok(Some(json!({})));
        }
        self.store_job(StoreJob::Delete {
            request,
            session_id,
        });
        Ok(None)
    }

    /// `session/fork {sessionId, cwd, mcpServers?, additionalDirectories?, systemPrompt?}`:
    /// a copy of the session's stored conversation (the `--fork` machinery) opened as a new
    /// session beside the original, which is not touched. The copy is made on the store
    /// worker (`store_worker::Source::Fork`); `finish_open` answers it like `session/new`.
    /// `Err`: refused before any IO.
    pub(crate) fn session_fork(
        &mut self,
        request: RequestId,
        params: &Value,
    ) -> Result<(), RpcError> {
        let (source, p) = acp::parse_load_session(params, acp::SESSION_FORK)?;
        if self.agent.store.is_none() {
            return Err(RpcError::invalid_params(
                "session/fork needs sessions on disk, and this agent runs with --no-session",
            ));
        }
        if !self.agent.multi_session && !self.sessions.is_empty() {
            return Err(RpcError::internal(ONE_SESSION));
        }
        let cwd = if self.agent.multi_session {
            session_cwd(&p.cwd)?
        } else {
            self.agent.cwd.clone()
        };
        let open = self.session_index(&source).is_some();
        let fork = Source::Fork { cwd, open };
        self.start_open(request, source.clone(), p, fork, None);
        Ok(())
    }

    /// `session/set_title {sessionId, title}`: an open session is renamed live
    /// (`session_info_update`), a stored one in its file; both show in `session/list`.
    /// `Ok(None)`: the session answered.
    pub(crate) fn set_title(
        &mut self,
        request: RequestId,
        params: &Value,
    ) -> Result<Option<Value>, RpcError> {
        let (session_id, title) = acp::parse_set_title(params)?;
        if let Some(i) = self.session_index(&session_id) {
            // The answer names the title as stored (trimmed), which clients show.
            let answer = json!({ "title": title });
            self.with_session_at(i, |s, _, out| {
                out.push(Action::Respond(request, Ok(answer)));
                s.set_title(title, out);
            });
            return Ok(None);
        }
        let unknown = || RpcError::invalid_params(format!("Unknown ACP session: {session_id}"));
        let store = self.agent.store.as_ref().ok_or_else(unknown)?;
        store.path_of(&session_id).ok_or_else(unknown)?;
        // Claimed and appended to by the store worker, never here.
        self.store_job(StoreJob::Rename {
            request,
            session_id,
            title,
        });
        Ok(None)
    }

    /// `authenticate {methodId}`: one of `auth::methods`; lifts a `logout` and checks that the
    /// start-up model's provider has a key (from any source), else says how to add one
    /// through the source the method names.
    pub(crate) fn authenticate(&mut self, params: &Value) -> Result<Value, RpcError> {
        let method = acp::parse_authenticate(params)?;
        let source = auth::Source::parse(&method)
            .ok_or_else(|| RpcError::invalid_params(auth::unknown_method(&method)))?;
        let Some(menu) = self.agent.models.as_ref() else {
            // A scripted model needs no key.
            return Ok(json!({}));
        };
        let credentials = menu.credentials();
        credentials.sign_in();
        let label = match &self.agent.provider {
            Ok(p) => p.label(),
            Err(_) => return Ok(json!({})),
        };
        let provider = label.split_once('/').map_or(label.as_str(), |(p, _)| p);
        let Some(def) = menu.provider_def(provider) else {
            return Ok(json!({}));
        };
        // Any source will do: the method only says where the user would put a missing key.
        if credentials.has_key(def) || credentials.cli_key.is_some() {
            return Ok(json!({}));
        }
        Err(auth::required(&auth::missing(
            source,
            provider,
            &def.env_keys,
            &credentials.agent_dir.join("auth.json"),
        )))
    }

    /// `logout`: this process stops using provider keys until `authenticate` (nothing is
    /// deleted: the keys in the environment and auth.json are the user's).
    pub(crate) fn logout(&mut self, params: &Value) -> Result<Value, RpcError> {
        if !(params.is_null() || params.is_object()) {
            return Err(RpcError::invalid_params("logout params must be an object"));
        }
        if let Some(menu) = self.agent.models.as_ref() {
            menu.credentials().sign_out();
        }
        Ok(json!({}))
    }
}
