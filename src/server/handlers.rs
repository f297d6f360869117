//! Client requests and notifications: parse, validate, and hand each to the session (or
//! answer it here). Runs on the main loop's thread; answers go through `MainLoop::respond`.

// The main loop does no IO (clippy.toml lists what that excludes; `make io-ban` checks it).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::base::json::json;
use serde_json::Value;

use crate::agent::autonomy;
use crate::agent::commands::{self, Command};
use crate::agent::permissions::{self, Mode};
use crate::agent::subagents::{Family, FamilyMsg};
use crate::agent::turn::{Agent, Conversation, Local, TurnInput};
use crate::base::sandbox;
use crate::mcp::McpHub;
use crate::persist::{self, schedule};
use crate::protocol::acp;
use crate::protocol::meta;
use crate::protocol::rpc::{RequestId, RpcError};
use crate::server::client_host::{ClientCaps, ClientHost};
use crate::server::config_options::{self, Choice};
use crate::server::main_loop::{MainLoop, OpenKind, Opening};
use crate::server::session::{FamilyWorkers, Session};
use crate::server::store_worker::{
    self, DirRole, ListJob, OpenJob, Ready, Refusals, Source, StoreJob,
};

mod manage;

pub(crate) const ONE_SESSION: &str =
    "prime-agent ACP mode hosts one session per connection; start another prime-agent process for a second session";

impl MainLoop {
    pub(crate) fn on_request(&mut self, id: RequestId, method: &str, params: Value) {
        let result = match method {
            acp::INITIALIZE => acp::parse_initialize(&params).map(|()| {
                // What the client serves decides whether tools use its files (`client_host`).
                self.client_caps = ClientCaps::from_initialize(&params);
                meta::initialize_result(&self.version, crate::protocol::auth::methods())
            }),
            acp::SESSION_NEW => match self.session_new(id.clone(), &params) {
                // Answered once the store worker has read what the session needs.
                Ok(()) => return,
                Err(e) => Err(e),
            },
            acp::SESSION_LOAD | acp::SESSION_RESUME | acp::SESSION_FORK => {
                let started = if method == acp::SESSION_FORK {
                    self.session_fork(id.clone(), &params)
                } else {
                    self.session_load(id.clone(), &params, method == acp::SESSION_LOAD)
                };
                // Answered once the store worker has read (or copied) it: `finish_open`.
                let Err(refused) = started else {
                    return;
                };
                Err(refused)
            }
            acp::SESSION_LIST => match self.session_list(id.clone(), &params) {
                // The worker's answer comes back through the loop.
                Ok(()) => return,
                Err(e) => Err(e),
            },
            acp::SESSION_DELETE => match self.session_delete(id.clone(), &params) {
                // The open session is closed first and answers once deleted.
                Ok(None) => return,
                other => other.map(Option::unwrap_or_default),
            },
            acp::SESSION_SET_TITLE => match self.set_title(id.clone(), &params) {
                Ok(None) => return,
                other => other.map(Option::unwrap_or_default),
            },
            acp::AUTHENTICATE => self.authenticate(&params),
            acp::LOGOUT => self.logout(&params),
            acp::SESSION_PROMPT => match self.session_prompt(id.clone(), &params) {
                // The session answers (when the turn finishes, or at once if it refuses).
                Ok(()) => return,
                Err(e) => Err(e),
            },
            acp::SESSION_STEERING => match self.session_steering(id.clone(), &params) {
                Ok(()) => return,
                Err(e) => Err(e),
            },
            acp::SESSION_CLOSE => match self.session_close(id.clone(), &params) {
                Ok(()) => return,
                Err(e) => Err(e),
            },
            acp::SESSION_SET_CONFIG_OPTION => {
                match self.set_config_option(id.clone(), &params, method, false) {
                    // The session answered (a mode switch, with its update after the answer).
                    Ok(None) => return,
                    Ok(Some(v)) => Ok(v),
                    Err(e) => Err(e),
                }
            }
            acp::SESSION_SET_MODE => match self.set_mode(id.clone(), &params) {
                Ok(()) => return,
                Err(e) => Err(e),
            },
            // Legacy: the same switch, answered `{}` (its unstable response had no fields).
            acp::SESSION_SET_MODEL => self
                .set_config_option(id.clone(), &params, method, false)
                .map(|_| json!({})),
            acp::SESSION_CANCEL => {
                // A notification sent as a request: honour it and answer, so nothing hangs.
                self.session_cancel(&params);
                Ok(json!({}))
            }
            // Includes ACP methods this agent does not serve (`session/archive`, …).
            _ => Err(RpcError::method_not_found(method)),
        };
        self.respond(&id, result);
    }

    /// Answers a request that opened a session (`session/new`, `session/fork`), then, so the
    /// client knows the session the updates name, its command list and opening notices.
    fn answer_new_session(&mut self, id: &RequestId, result: Result<Value, RpcError>) {
        let sid = result
            .as_ref()
            .ok()
            .and_then(|r| r["sessionId"].as_str())
            .map(str::to_owned);
        self.respond(id, result);
        if let Some(sid) = sid {
            let extra = self.agent.resources.commands(&commands::names());
            let commands = commands::available_commands_update(&extra);
            self.with_session(&sid, |s, _, out| {
                s.announce(commands, out);
                s.publish_opening_notices(out);
            });
        }
    }

    pub(crate) fn on_notification(&mut self, method: &str, params: &Value) {
        match method {
            acp::SESSION_CANCEL => self.session_cancel(params),
            acp::CANCEL_REQUEST => {
                let target = params.get("requestId").cloned().unwrap_or(Value::Null);
                // Request ids are the connection's: whichever session has it acts.
                self.for_each_session(|s, now, out| s.cancel_request(&target, now, out));
            }
            other => log::debug!("ignoring notification {other}"),
        }
    }

    /// `session/new`: opened once the store worker has read what it needs (its context files
    /// and harness state, the directories its params name, and the session `-c`, `-r` or
    /// `--fork` picked at start-up, which the first `session/new` gets); `finish_open`
    /// answers. `Err`: refused before any IO.
    fn session_new(&mut self, request: RequestId, params: &Value) -> Result<(), RpcError> {
        let p = acp::parse_new_session(params)?;
        if !self.agent.multi_session && !self.sessions.is_empty() {
            return Err(RpcError::internal(ONE_SESSION));
        }
        self.start_open(request, String::new(), p, Source::New, None);
        Ok(())
    }

    /// `session/load` (with the replay) and `session/resume` (without): the stored session
    /// becomes the open one, under its own id. Its file is claimed and read on the store
    /// worker (`store_worker::OpenJob`), never here; `finish_open` opens it and answers when
    /// the worker reports back, and meanwhile what depends on it waits (`main_loop::waits`).
    /// `Err`: refused before any IO.
    fn session_load(
        &mut self,
        request: RequestId,
        params: &Value,
        replay: bool,
    ) -> Result<(), RpcError> {
        let method = if replay {
            acp::SESSION_LOAD
        } else {
            acp::SESSION_RESUME
        };
        let (session_id, p) = acp::parse_load_session(params, method)?;
        // A remote client taking over a session open here (its connection went away): the
        // session stays as it is, MCP servers and kernel included (docs/remote.md).
        if self.reattach && !replay {
            if let Some(i) = self.session_index(&session_id) {
                let s = &self.sessions[i];
                let answer = json!({ "modes": s.modes(), "configOptions": s.config_options() });
                self.respond(&request, Ok(answer));
                return Ok(());
            }
        }
        let unknown = || RpcError::invalid_params(format!("Unknown ACP session: {session_id}"));
        let store = self.agent.store.as_ref().ok_or_else(unknown)?;
        store.path_of(&session_id).ok_or_else(unknown)?;
        // Decided from the loop's state now; the worker says them in their old order (an
        // unknown session is unknown first, a bad cwd comes after the file's own refusals).
        let refuse = if !self.agent.multi_session && !self.sessions.is_empty() {
            Some(RpcError::internal(ONE_SESSION))
        } else if self.session_index(&session_id).is_some() {
            let why = persist::ClaimError::InThisProcess.text(&session_id);
            Some(RpcError::internal(why))
        } else {
            None
        };
        let source = Source::Stored { replay };
        self.start_open(request, session_id, p, source, refuse);
        Ok(())
    }

    /// Hands an open to the store worker and keeps what the loop needs to finish it
    /// (`opening`); the params' own refusal (`session_agent`, and the directories they name,
    /// which the worker checks) is the worker's to say, after the file's.
    pub(crate) fn start_open(
        &mut self,
        request: RequestId,
        session_id: String,
        p: acp::NewSessionParams,
        source: Source,
        refuse: Option<RpcError>,
    ) {
        let (agent, after_open) = match self.session_agent(&p) {
            Ok(agent) => (Some(agent), None),
            Err(e) => (None, Some(e)),
        };
        let mut dirs = Vec::new();
        if let Some(agent) = agent.as_ref().filter(|_| self.agent.multi_session) {
            dirs.push((agent.cwd.clone(), DirRole::Cwd));
        }
        dirs.extend(
            p.additional_directories
                .iter()
                .map(|d| (d.clone(), DirRole::Additional)),
        );
        let refusals = Refusals {
            before_open: refuse,
            after_open,
        };
        let kind = match source {
            Source::New => OpenKind::New,
            Source::Fork { .. } => OpenKind::Fork,
            Source::Stored { .. } => OpenKind::Stored,
        };
        let job = OpenJob {
            request: request.clone(),
            session_id: session_id.clone(),
            source,
            refusals,
            agent: agent.clone(),
            dirs,
        };
        self.opening = Some(Opening {
            request,
            session_id,
            params: p,
            agent,
            kind,
        });
        self.store_job(StoreJob::Open(Box::new(job)));
    }

    /// The store worker has read a session for `session/load` / `session/resume` (opened with
    /// the replay before the answer) or copied one for `session/fork` (answered like
    /// `session/new`), or the request is refused; then what waited for it runs.
    pub(crate) fn finish_open(&mut self, request: RequestId, result: Result<Box<Ready>, RpcError>) {
        let opening = self.opening.take().filter(|o| o.request == request);
        let kind = opening.as_ref().map_or(OpenKind::Stored, |o| o.kind);
        let result = result.and_then(|ready| self.open_read(opening, *ready));
        let sid = result.as_ref().ok().map(|(_, sid)| sid.clone());
        let result = result.map(|(answer, _)| answer);
        if kind != OpenKind::Stored {
            // A new session (a fork is one to the client): its commands and notices follow.
            self.answer_new_session(&request, result);
        } else {
            self.respond(&request, result);
            if let Some(sid) = sid {
                self.with_session(&sid, |s, _, out| s.publish_opening_notices(out));
            }
        }
        self.run_deferred();
    }

    /// Opens what the store worker made ready (`opening`: what the loop kept of the request);
    /// returns the answer and the session's id.
    fn open_read(
        &mut self,
        opening: Option<Opening>,
        mut ready: Ready,
    ) -> Result<(Value, String), RpcError> {
        let Some(Opening {
            params,
            agent: Some(agent),
            kind,
            ..
        }) = opening
        else {
            return Err(RpcError::internal(
                "a session was made ready, but its open was lost".to_owned(),
            ));
        };
        let updates = ready
            .stored
            .as_mut()
            .map(|o| std::mem::take(&mut o.updates))
            .unwrap_or_default();
        let fork_id = ready.stored.as_ref().map(|o| o.loaded.header.id.clone());
        let result = self.open_session(params, agent, ready, kind != OpenKind::New);
        match kind {
            OpenKind::New => {
                let id = result
                    .as_ref()
                    .ok()
                    .and_then(|r| r["sessionId"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                result.map(|answer| (answer, id))
            }
            OpenKind::Fork => {
                let id = fork_id.unwrap_or_default();
                if result.is_err() {
                    // Nothing the client was told of: the copy goes again (on the store worker).
                    if let Some(store) = self.agent.store.clone() {
                        store_worker::discard_fork(store, id.clone());
                    }
                }
                result.map(|answer| (answer, id))
            }
            OpenKind::Stored => {
                let id = fork_id.unwrap_or_default();
                let mut result = result?;
                if let Some(i) = self.session_index(&id) {
                    self.with_session_at(i, |s, _, out| s.replay(updates, out));
                }
                if let Some(obj) = result.as_object_mut() {
                    obj.remove("sessionId");
                }
                Ok((result, id))
            }
        }
    }

    /// `session/list`: the stored sessions, newest first, a page at a time, read by the
    /// `session-store` worker (`store_worker.rs`) and answered when it reports back.
    fn session_list(&mut self, id: RequestId, params: &Value) -> Result<(), RpcError> {
        let (cwd, cursor) = acp::parse_list_sessions(params)?;
        if self.agent.store.is_none() {
            self.respond(&id, store_worker::empty_page(cursor.as_deref()));
            return Ok(());
        }
        self.store_job(StoreJob::List(ListJob {
            request: id,
            cwd,
            cursor,
        }));
        Ok(())
    }

    /// Opens a session for `agent` (`session_agent`), new or continued from `opened`, and
    /// builds the `session/new` answer.
    pub(crate) fn open_session(
        &mut self,
        p: acp::NewSessionParams,
        mut agent: Agent,
        ready: Ready,
        loading: bool,
    ) -> Result<Value, RpcError> {
        let Ready {
            stored: opened,
            files,
        } = ready;
        let multi = self.agent.multi_session;
        if !multi && !self.sessions.is_empty() {
            return Err(RpcError::internal(ONE_SESSION));
        }
        let (id, conversation, stored) = match opened {
            Some(o) => (
                o.loaded.header.id.clone(),
                o.conversation,
                Some((o.loaded, o.jobs)),
            ),
            None => {
                let id = crate::persist::new_session_id();
                let conversation = conversation_of(&agent, &id);
                (id, conversation, None)
            }
        };
        let (resumed, stored_jobs) = match stored {
            Some((loaded, jobs)) => (Some(loaded), jobs),
            None => (None, None),
        };
        let client = self.client_host(&id, &agent, &p);
        agent.host = client.clone();
        let mcp_servers = acp::with_settings_servers(p.mcp_servers.clone(), &agent.mcp_servers);
        // The session's own `/rlm-max-depth` wins over settings and the environment (§4.3).
        if let Some(n) = resumed.as_ref().and_then(|l| l.rlm_max_depth()) {
            agent.kernel_env.set_session_max_depth(n);
        }
        self.next_generation += 1;
        let family = Family::new(
            self.next_generation,
            Arc::new(agent),
            id.clone(),
            self.family_tx.clone(),
        );
        self.start_mcp(&family, &mcp_servers);
        let log = conversation
            .recorder
            .as_ref()
            .map(|r| r.path().to_path_buf());
        let ctx = Arc::new(family.main_ctx(log.as_deref(), &files));
        let workers = Box::new(FamilyWorkers {
            family: family.clone(),
            ctx: ctx.clone(),
        });
        let mut session = Session::new(
            id.clone(),
            self.next_generation,
            ctx,
            workers,
            client,
            mcp_servers,
            self.timing,
        );
        let titled = resumed.as_ref().is_some_and(|l| l.title().is_some());
        session.restore(conversation, titled);
        if let Some(loaded) = &resumed {
            self.restore_model(&mut session, loaded);
        }
        self.restore_schedules(&mut session, &family, resumed.as_ref(), stored_jobs);
        self.restore_unattended(&mut session, &family, resumed.as_ref());
        if let Some(loaded) = resumed {
            // All of it is in the session now; a big file's entries are freed off the loop.
            crate::base::reaper::later(move || drop(loaded));
        }
        let mut result = json!({
            "sessionId": id,
            "modes": session.modes(),
            "configOptions": session.config_options(),
        });
        self.sessions
            .push(crate::base::reaper::Reaped::new(session));
        if let Some(cwd) = self.cwd_meta(&p.cwd, loading) {
            result["_meta"] = cwd;
        }
        Ok(result)
    }

    /// The new session's agent: where it runs, and the client's part of its prompt.
    fn session_agent(&self, p: &acp::NewSessionParams) -> Result<Agent, RpcError> {
        // With several sessions each runs where its client says; alone, the process cwd is
        // the session's and a different request is reported (as upstream).
        let mut agent = if self.agent.multi_session {
            agent_in_cwd(&self.agent, session_cwd(&p.cwd)?)
        } else {
            (*self.agent).clone()
        };
        // What the client asked for goes last, after the agent's own prompt.
        apply_client_prompt(
            &mut agent,
            p.system_prompt.as_ref(),
            &p.additional_directories,
        );
        Ok(agent)
    }

    /// The session's tools reach its client (approvals, files) through this.
    fn client_host(&self, id: &str, agent: &Agent, p: &acp::NewSessionParams) -> Arc<ClientHost> {
        let mut caps = self.client_caps;
        // Client terminals only when asked for: they change where commands run.
        caps.terminal &= agent.client_terminal;
        Arc::new(
            ClientHost::new(
                id.to_owned(),
                Some(self.client_link()),
                caps,
                agent.permission_mode,
            )
            .with_roots(p.additional_directories.clone())
            .with_sandbox(agent.kernel_env.sandbox.clone()),
        )
    }

    /// The session's MCP servers connect in the background: the response is not delayed by a
    /// slow server; the family hears when they are up.
    fn start_mcp(&self, family: &Family, servers: &[acp::McpServer]) {
        if servers.is_empty() {
            return;
        }
        let tx = self.family_tx.clone();
        let generation = self.next_generation;
        let hub = McpHub::start(
            servers.to_vec(),
            family.cwd().to_path_buf(),
            Box::new(move |servers| {
                let _ = tx.send(FamilyMsg::Mcp {
                    generation,
                    servers,
                });
            }),
        );
        family.set_mcp(hub);
    }

    /// A continued session's stored jobs come back; every session's jobs name their owner
    /// (the session, its file, its cwd) so a firing knows where it belongs.
    fn restore_schedules(
        &self,
        session: &mut Session,
        family: &Family,
        resumed: Option<&persist::Loaded>,
        stored_jobs: Option<Value>,
    ) {
        let id = session.id().to_owned();
        if let Some(jobs) = stored_jobs {
            session.restore_heartbeats(schedule::Jobs::from_json(
                &jobs,
                crate::base::time::schedule_now_ms(),
            ));
        }
        let session_file = match resumed {
            Some(l) => Some(l.path.clone()),
            None => self.agent.store.as_ref().and_then(|s| s.path_of(&id)),
        };
        {
            let mut jobs = session
                .heartbeats()
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            jobs.owner = schedule::Owner {
                session_id: id,
                session_file: session_file.map(|p| p.display().to_string()),
                cwd: family.cwd().display().to_string(),
            };
        }
        family.set_heartbeats(session.heartbeats().clone());
    }

    /// The session's unattended state, shared with its family; a continued session's goal
    /// (active, paused, …) comes back as its file last said.
    fn restore_unattended(
        &self,
        session: &mut Session,
        family: &Family,
        resumed: Option<&persist::Loaded>,
    ) {
        let unattended = unattended_of(&self.agent);
        if let Some(record) = resumed.and_then(|l| l.goal_state()) {
            autonomy::lock(&unattended).restore_goal(record, Instant::now());
        }
        family.set_unattended(unattended.clone());
        session.set_unattended(unattended);
    }

    /// Alone, a session runs in the process cwd: a new session that asked for another one is
    /// told where it really runs (`_meta…cwd`). A load says nothing: its cwd is the file's.
    fn cwd_meta(&self, requested: &str, loading: bool) -> Option<Value> {
        if loading
            || self.agent.multi_session
            || requested.is_empty()
            || acp::same_cwd(requested, &self.agent.cwd)
        {
            return None;
        }
        let actual = self.agent.cwd.display().to_string();
        Some(meta::namespaced(
            json!({ "cwd": { "requested": requested, "actual": actual } }),
        ))
    }

    /// A continued session runs the model and reasoning level its file last names
    /// (`config_options::restore_model`: unless `--model` / `--thinking` said otherwise); a
    /// model this agent cannot run is kept out with a warning, logged and shown to the client
    /// after the response.
    fn restore_model(&self, session: &mut Session, loaded: &persist::Loaded) {
        let mut model = session.model().clone();
        let (stored, thinking) = loaded.model();
        if let Some(tier) = loaded.service_tier() {
            model.service_tier = Some(tier);
        }
        model.thinking = config_options::restore_thinking(
            thinking.as_deref(),
            self.agent.thinking_explicit,
            model.thinking,
        );
        if let Ok(provider) = &model.provider {
            let menu = self.agent.models.as_ref().map(|m| m.models());
            let current = config_options::current_model(
                &provider.label(),
                provider.reasoning(),
                menu.as_deref().unwrap_or_default(),
            );
            let stored = stored.as_ref().map(|(p, id)| (p.as_str(), id.as_str()));
            let decided = config_options::restore_model(
                menu.as_deref(),
                &current,
                stored,
                self.agent.model_explicit,
            );
            let built = match decided {
                config_options::Restore::Keep => None,
                // On the menu but not buildable: the same as not on it.
                config_options::Restore::Switch(m) => Some(
                    self.agent
                        .models
                        .as_ref()
                        .and_then(|menu| menu.build(&m))
                        .ok_or_else(|| m.value()),
                ),
                config_options::Restore::Unknown(label) => Some(Err(label)),
            };
            match built {
                Some(Ok(provider)) => model.provider = Ok(provider),
                Some(Err(label)) => {
                    let why = config_options::not_restored(&label, &current.value());
                    log::warn!("session {}: {why}", session.id());
                    session.notice_when_open(why);
                }
                None => {}
            }
        }
        session.set_model(model);
    }

    /// `_session/steering`: the session answers (`injected`, `promptRequired`, or
    /// `startedNewTurn`).
    fn session_steering(&mut self, id: RequestId, params: &Value) -> Result<(), RpcError> {
        let (session_id, prompt, idle) = acp::parse_steering(params)?;
        let Some(i) = self.session_index(&session_id) else {
            return Err(unknown_session(&session_id));
        };
        self.with_session_at(i, |s, _, out| s.steer(id, prompt.text, idle, out));
        Ok(())
    }

    /// The session answers the prompt; an error here is answered by the caller.
    fn session_prompt(&mut self, id: RequestId, params: &Value) -> Result<(), RpcError> {
        let (session_id, mut prompt) = acp::parse_prompt(params)?;
        // `/skill:<name> args` and `/<template> args` become the message they stand for (a
        // name of one of our commands stays ours).
        if prompt.typed && commands::parse(&prompt.text).is_none() {
            if let Some(text) = self
                .agent
                .resources
                .expand(&prompt.text, &commands::names())
            {
                prompt.text = text;
            }
        }
        let Some(i) = self.session_index(&session_id) else {
            return Err(unknown_session(&session_id));
        };
        // A `/heartbeat` command (never with images: they would be lost).
        if let Some(command) = (prompt.typed && prompt.images.is_empty())
            .then(|| schedule::heartbeat_command(&prompt.text))
            .flatten()
        {
            let now = crate::base::time::schedule_now_ms();
            self.with_session_at(i, |s, _, out| s.heartbeat_command(id, command, now, out));
            return Ok(());
        }
        if let Ok(provider) = &self.sessions[i].model().provider {
            // Blocked images never reach the model (the turn says so): nothing to refuse.
            let blocked = self.agent.kernel_env.images.block;
            if !prompt.images.is_empty() && !provider.accepts_images() && !blocked {
                return Err(RpcError::invalid_params(format!(
                    "the prompt has {} image(s), but the model {} does not accept images; send text only or choose a model with image input",
                    prompt.images.len(),
                    provider.label()
                )));
            }
        }
        // A prompt with images is never a command: they would be lost.
        let plain = prompt.typed && prompt.images.is_empty();
        if let Some(command) = plain.then(|| commands::parse(&prompt.text)).flatten() {
            if let Some(why) = self.sessions[i].refusal() {
                return Err(RpcError::internal(why));
            }
            let local = self.run_command(i, &command);
            let input = TurnInput::Local(local);
            self.with_session_at(i, |s, now, out| s.prompt_input(id, input, now, out));
            return Ok(());
        }
        self.with_session_at(i, |s, now, out| s.prompt(id, prompt, now, out));
        Ok(())
    }

    /// Carries out a slash command for session `i`; what its turn shows (no model call).
    fn run_command(&mut self, i: usize, command: &Command) -> Local {
        match command {
            Command::Compact(instructions) => Local::Compact(instructions.clone()),
            Command::Rename(None) => Local::Reply(commands::RENAME_USAGE.to_owned()),
            Command::Rename(Some(title)) => {
                let title = title.clone();
                let reply = format!("Session renamed: {title}");
                self.with_session_at(i, |s, _, out| s.set_title(title, out));
                Local::Reply(reply)
            }
            Command::Model(None) => Local::Reply(match &self.sessions[i].model().provider {
                Ok(p) => format!("Model: {}", p.label()),
                Err(why) => format!("No model is usable: {why}"),
            }),
            Command::Model(Some(choice)) => {
                let params = json!({
                    "sessionId": self.sessions[i].id(),
                    "configId": config_options::MODEL,
                    "value": choice,
                });
                // The same path as the client's own switch (the model menu, then set_model).
                Local::Reply(
                    match self.set_config_option(
                        RequestId::null(),
                        &params,
                        acp::SESSION_SET_CONFIG_OPTION,
                        true,
                    ) {
                        Ok(_) => format!("Model: {choice} (from the next prompt on)"),
                        Err(e) => e.message,
                    },
                )
            }
            Command::RlmMaxDepth(arg) => self.rlm_max_depth(i, arg),
            Command::Fast(plain) => Local::Reply(self.fast(i, *plain)),
            other => {
                let state = self.sessions[i].unattended().clone();
                let text = commands::run_on(other, &mut autonomy::lock(&state), Instant::now());
                Local::Reply(text)
            }
        }
    }

    /// `/fast`: the session's service tier between `priority` and `default`, on the models
    /// upstream offers Fast mode for; from the next model call on, kept with the session
    /// (`service_tier_change`, written by the next turn).
    fn fast(&mut self, i: usize, plain: bool) -> String {
        if !plain {
            return "Usage: /fast".to_owned();
        }
        let mut model = self.sessions[i].model().clone();
        let fast = model
            .provider
            .as_ref()
            .is_ok_and(|p| commands::supports_fast_mode(&p.label()));
        if !fast {
            return commands::FAST_UNAVAILABLE.to_owned();
        }
        let on = model.service_tier.as_deref() != Some("priority");
        model.service_tier = Some(if on { "priority" } else { "default" }.to_owned());
        self.sessions[i].set_model(model);
        commands::fast_reply(on)
    }

    /// `/rlm-max-depth [n]`: a new depth applies at once (the family's spawn check, kernels
    /// started after it) and is kept with the session by its turn.
    fn rlm_max_depth(&mut self, i: usize, arg: &commands::DepthCommand) -> Local {
        let workers = self.sessions[i].workers();
        let Some((now, from)) = workers.max_depth() else {
            return Local::Reply("This session starts no subagents.".to_owned());
        };
        match arg {
            commands::DepthCommand::Show => Local::Reply(commands::depth_status(now, from)),
            commands::DepthCommand::Invalid(usage) => Local::Reply(usage.clone()),
            commands::DepthCommand::Set(n) => {
                workers.set_max_depth(*n);
                Local::MaxDepth {
                    max_depth: *n,
                    reply: commands::depth_set(*n, now),
                }
            }
        }
    }

    /// `session/set_config_option` (and legacy `session/set_model`): validates the choice,
    /// switches the session's model or reasoning level from its next turn on, and answers
    /// with the complete option list.
    /// `Ok(None)`: the session answered itself.
    /// `announce`: the switch did not come from the client (`/model`), so the client hears of
    /// it as `config_option_update` (`Session::switch_model`).
    fn set_config_option(
        &mut self,
        request: RequestId,
        params: &Value,
        method: &str,
        announce: bool,
    ) -> Result<Option<Value>, RpcError> {
        let (session_id, config_id, value) = acp::parse_set_config_option(params, method)?;
        let Some(i) = self.session_index(&session_id) else {
            return Err(unknown_session(&session_id));
        };
        if config_id == sandbox::OPTION && method != acp::SESSION_SET_MODEL {
            let mode = match &value {
                Value::String(id) => sandbox::choose(id).map_err(RpcError::invalid_params)?,
                other => {
                    return Err(RpcError::invalid_params(format!(
                        "Invalid value for ACP config option {config_id}: {other}"
                    )))
                }
            };
            self.with_session_at(i, |s, _, out| s.set_sandbox(request, mode, out));
            return Ok(None);
        }
        if config_id == permissions::MODE && method != acp::SESSION_SET_MODEL {
            let mode = value_mode(&config_id, &value)?;
            self.with_session_at(i, |s, _, out| s.set_mode(request, mode, true, out));
            return Ok(None);
        }
        let mut model = self.sessions[i].model().clone();
        let Ok(provider) = &model.provider else {
            return Err(RpcError::invalid_params(config_options::unknown_option(
                &config_id,
            )));
        };
        let menu = self.agent.models.as_ref().map(|m| m.models());
        let menu = menu.as_deref().unwrap_or_default();
        let current = config_options::current_model(&provider.label(), provider.reasoning(), menu);
        let Value::String(value) = value else {
            return Err(RpcError::invalid_params(format!(
                "Invalid value for ACP config option {config_id}: {value}"
            )));
        };
        match config_options::choose(menu, &current, &config_id, &value)
            .map_err(RpcError::invalid_params)?
        {
            Choice::Model(m) if m.value() == current.value() => {}
            Choice::Model(m) => {
                let built = self.agent.models.as_ref().and_then(|menu| menu.build(&m));
                let Some(provider) = built else {
                    return Err(RpcError::invalid_params(format!(
                        "Model is not available: {value}"
                    )));
                };
                model.provider = Ok(provider);
            }
            Choice::Thinking(t) => model.thinking = t,
        }
        if announce {
            self.with_session_at(i, |s, _, out| s.switch_model(model, out));
        } else {
            self.sessions[i].set_model(model);
        }
        Ok(Some(
            json!({ "configOptions": self.sessions[i].config_options() }),
        ))
    }

    /// `session/set_mode {sessionId, modeId}`: answered `{}` by the session.
    fn set_mode(&mut self, request: RequestId, params: &Value) -> Result<(), RpcError> {
        let (session_id, mode_id) = acp::parse_set_mode(params)?;
        let Some(i) = self.session_index(&session_id) else {
            return Err(unknown_session(&session_id));
        };
        let mode = value_mode("modeId", &Value::String(mode_id))?;
        self.with_session_at(i, |s, _, out| s.set_mode(request, mode, false, out));
        Ok(())
    }

    fn session_cancel(&mut self, params: &Value) {
        let Ok(session_id) = acp::parse_session_id(params, acp::SESSION_CANCEL) else {
            log::warn!("ignoring session/cancel without a sessionId");
            return;
        };
        // Never cancel another session's work; with nothing running it is a no-op, and
        // duplicates coalesce.
        self.with_session(&session_id, |s, now, out| s.cancel(now, out));
    }

    fn session_close(&mut self, id: RequestId, params: &Value) -> Result<(), RpcError> {
        let session_id = acp::parse_session_id(params, acp::SESSION_CLOSE)?;
        let Some(i) = self.session_index(&session_id) else {
            return Err(unknown_session(&session_id));
        };
        self.with_session_at(i, |s, now, out| s.close(id, now, out));
        Ok(())
    }
}

/// The permission mode a `set_mode` / `set_config_option` value names (`-32602` otherwise).
fn value_mode(config_id: &str, value: &Value) -> Result<Mode, RpcError> {
    match value {
        Value::String(id) => Mode::parse(id)
            .ok_or_else(|| RpcError::invalid_params(permissions::mode_not_available(id))),
        other => Err(RpcError::invalid_params(format!(
            "Invalid value for ACP config option {config_id}: {other}"
        ))),
    }
}

/// A new session's conversation, with a recorder writing to its file unless sessions are in
/// memory only (a continued one's is `Conversation::continued`).
fn conversation_of(agent: &Agent, id: &str) -> Conversation {
    Conversation {
        recorder: agent
            .store
            .as_ref()
            .map(|store| store.recorder(id, &agent.cwd)),
        ..Conversation::default()
    }
}

/// A new session's autonomous mode and goal, from the start-up flags; the wall clock of
/// `--autonomous-timeout-ms` starts now.
fn unattended_of(agent: &Agent) -> autonomy::Shared {
    let now = std::time::Instant::now();
    let shared = autonomy::Unattended::shared(agent.autonomy.clone(), now);
    // Root sessions only: a subagent process (RLM_DEPTH > 0) does not inherit the goal.
    if let Some((objective, budget)) = agent
        .goal
        .as_ref()
        .filter(|_| agent.kernel_env.root_depth == 0)
    {
        autonomy::lock(&shared).set_goal(objective, *budget, now);
    }
    shared
}

/// Puts what a session's client asked for into its agent's prompt: an `override` replaces the
/// base instructions (the environment facts, context files and skills stay), then
/// `client_prompt::tail` (the additional directories, an `append` text) goes after every other
/// appended text. Each agent of the session builds its prompt from the spec (`prompt.rs`).
pub(crate) fn apply_client_prompt(
    agent: &mut Agent,
    client: Option<&crate::protocol::acp::ClientPrompt>,
    dirs: &[PathBuf],
) {
    use crate::protocol::acp::PromptMode;
    let base = client
        .filter(|c| c.mode == PromptMode::Override)
        .map(|c| c.text.clone());
    let append = client
        .filter(|c| c.mode == PromptMode::Append)
        .map(|c| c.text.as_str());
    let tail = crate::config::client_prompt::tail(dirs, append);
    match &agent.prompt_spec {
        Some(spec) => agent.prompt_spec = Some(spec.with_client(base, tail)),
        // An agent built without prompt inputs (in-process tests): the text alone.
        None => {
            let mut prompt = base.unwrap_or_else(|| agent.system_prompt.clone());
            if let Some(tail) = tail {
                if !prompt.is_empty() {
                    prompt.push_str("\n\n");
                }
                prompt.push_str(&tail);
            }
            agent.system_prompt = prompt;
        }
    }
}

/// The process's agent moved to another cwd (a `--multi-session` session's own): the same
/// provider, tools and resources; each agent's prompt is built for its cwd when it starts.
pub(crate) fn agent_in_cwd(base: &Agent, cwd: PathBuf) -> Agent {
    let mut agent = base.clone();
    agent.cwd = cwd;
    agent
}

/// A `--multi-session` session's cwd: an absolute path (that it is an existing directory is
/// the store worker's check, `store_worker::DirRole`: no `stat` on the loop).
pub(crate) fn session_cwd(cwd: &str) -> Result<PathBuf, RpcError> {
    let path = Path::new(cwd);
    if !path.is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "cwd must be an absolute path: {cwd:?}"
        )));
    }
    Ok(path.to_path_buf())
}

fn unknown_session(session_id: &str) -> RpcError {
    RpcError::internal(format!("Unknown ACP session: {session_id}"))
}
