//! The MCP servers of one ACP session (`session/new.mcpServers`): a synchronous client of our
//! own (`client.rs` over `stdio.rs` or `http.rs`, pure mappings in `wire.rs`) and the `McpHub`
//! that connects them in the background, reports every status change, and offers their tools
//! to the model (`tools.rs`) and to the kernel (host requests `mcp.*`).
//!
//! Knows nothing of ACP: status changes leave through the `on_status` callback the session's
//! creator passes in (the main loop turns them into `session_info_update`s).

pub(crate) mod client;
pub(crate) mod http;
pub(crate) mod stdio;
pub(crate) mod tools;
pub(crate) mod wire;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base::json::json;
use serde_json::Value;

use crate::base::abort::AbortFlag;
use crate::protocol::acp::McpServer;
use client::{Client, McpError, Router};
use wire::{Status, ToolInfo};

/// How long a server may take to connect and list its tools (§1.17).
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one tool call may take (§1.17).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Receives the whole status list (`_meta[ns].mcp`) after every change.
pub(crate) type OnStatus = Box<dyn Fn(Value) + Send + Sync>;

pub(crate) struct McpHub {
    servers: Vec<Arc<Server>>,
    on_status: OnStatus,
    /// Set by `close`: connects in progress give up, late news is dropped.
    closing: AbortFlag,
    closed: AtomicBool,
    started: Instant,
    /// Notified on every status change (readiness waits).
    changed: Condvar,
    gate: Mutex<()>,
    launcher: Mutex<Option<JoinHandle<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Server {
    name: String,
    config: McpServer,
    state: Mutex<State>,
}

struct State {
    status: Status,
    client: Option<Arc<Client>>,
    tools: Vec<ToolInfo>,
}

impl Server {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long it may take to connect and list its tools (settings `startupTimeoutMs`).
    fn start_timeout(&self) -> Duration {
        self.config
            .limits()
            .startup_timeout_ms
            .map_or(START_TIMEOUT, Duration::from_millis)
    }

    /// How long one tool call may take (settings `callTimeoutMs`).
    fn call_timeout(&self) -> Duration {
        self.config
            .limits()
            .call_timeout_ms
            .map_or(CALL_TIMEOUT, Duration::from_millis)
    }
}

/// A timeout as people say it: whole seconds, else milliseconds.
fn spoken(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{} s", d.as_secs()),
        _ => format!("{} ms", d.as_millis()),
    }
}

/// What a tool or kernel request may do with a server right now.
pub(crate) enum Usable {
    Ready(Arc<Client>),
    /// Not connected: the reason, for `MCP server <name> is not available: <reason>`.
    No(String),
}

impl McpHub {
    /// Starts connecting every server on its own thread; returns at once. `cwd` is the
    /// session's (stdio servers run there).
    pub(crate) fn start(servers: Vec<McpServer>, cwd: PathBuf, on_status: OnStatus) -> Arc<McpHub> {
        let hub = Arc::new(McpHub {
            servers: servers
                .into_iter()
                .map(|config| {
                    Arc::new(Server {
                        name: server_name(&config).to_owned(),
                        config,
                        state: Mutex::new(State {
                            status: Status::Connecting,
                            client: None,
                            tools: Vec::new(),
                        }),
                    })
                })
                .collect(),
            on_status,
            closing: AbortFlag::new(),
            closed: AtomicBool::new(false),
            started: Instant::now(),
            changed: Condvar::new(),
            gate: Mutex::new(()),
            launcher: Mutex::default(),
            threads: Mutex::default(),
        });
        if hub.servers.is_empty() {
            return hub;
        }
        hub.publish();
        // One launcher thread starts the per-server threads, so `session/new` pays for a
        // single thread start whatever the number of servers.
        let weak = Arc::downgrade(&hub);
        let launched = std::thread::Builder::new()
            .name("mcp-start".to_owned())
            .spawn(move || {
                if let Some(hub) = weak.upgrade() {
                    hub.launch(&cwd);
                }
            });
        match launched {
            Ok(t) => *hub.launcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(t),
            Err(e) => {
                for server in &hub.servers {
                    hub.set(
                        server,
                        Status::Failed(format!("cannot start a thread: {e}")),
                        None,
                        Vec::new(),
                    );
                }
            }
        }
        hub
    }

    /// Starts one connect thread per server (on the launcher thread).
    fn launch(self: &Arc<Self>, cwd: &std::path::Path) {
        for server in &self.servers {
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            let weak = Arc::downgrade(self);
            let mine = server.clone();
            let cwd = cwd.to_path_buf();
            let closing = self.closing.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("mcp-{}", server.name))
                .spawn(move || connect(&weak, &mine, &cwd, &closing));
            match spawned {
                Ok(t) => self
                    .threads
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(t),
                Err(e) => self.set(
                    server,
                    Status::Failed(format!("cannot start a thread: {e}")),
                    None,
                    Vec::new(),
                ),
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    fn server(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// The names and states, in the client's order.
    pub(crate) fn statuses(&self) -> Vec<(String, Status)> {
        self.servers
            .iter()
            .map(|s| (s.name.clone(), s.lock().status.clone()))
            .collect()
    }

    fn publish(&self) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let statuses = self.statuses();
        for (name, status) in &statuses {
            match status {
                Status::Failed(why) => log::warn!("MCP server {name}: failed: {why}"),
                other => log::info!("MCP server {name}: {other:?}"),
            }
        }
        (self.on_status)(wire::status_payload(&statuses));
    }

    fn set(
        &self,
        server: &Server,
        status: Status,
        client: Option<Arc<Client>>,
        tools: Vec<ToolInfo>,
    ) {
        // Settings' `enabledTools` / `disabledTools`: the rest are not offered at all.
        let limits = server.config.limits();
        let tools: Vec<ToolInfo> = tools
            .into_iter()
            .filter(|t| limits.allows(&t.name))
            .collect();
        let status = match status {
            Status::Ready { .. } => Status::Ready { tools: tools.len() },
            other => other,
        };
        let dead = {
            let mut st = server.lock();
            if st.status == status && client.is_none() && st.tools == tools {
                return;
            }
            let failed = matches!(status, Status::Failed(_));
            st.status = status;
            st.tools = tools;
            match client {
                Some(c) => st.client.replace(c),
                None if failed => st.client.take(),
                None => None,
            }
        };
        // A failed server's connection is ended (its child reaped) outside the lock.
        if let Some(c) = dead {
            c.close();
        }
        let _gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
        drop(_gate);
        self.publish();
    }

    /// Waits until no server is still connecting, the start timeout has run out, or `abort`
    /// is set. Returns at once once every server has settled.
    pub(crate) fn wait_ready(&self, abort: &AbortFlag) {
        let longest = self.servers.iter().map(|s| s.start_timeout()).max();
        let deadline = self.started + longest.unwrap_or(START_TIMEOUT);
        let mut gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let connecting = self
                .servers
                .iter()
                .any(|s| s.lock().status == Status::Connecting);
            let now = Instant::now();
            if !connecting
                || now >= deadline
                || abort.is_aborted()
                || self.closed.load(Ordering::SeqCst)
            {
                return;
            }
            // Short slices so an abort is seen promptly without a hook on the condvar.
            let slice = (deadline - now).min(Duration::from_millis(20));
            gate = match self.changed.wait_timeout(gate, slice) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// The client of `name` if it is ready; refreshes the tool list first when the server
    /// said it changed.
    pub(crate) fn usable(&self, name: &str, abort: &AbortFlag) -> Usable {
        let Some(server) = self.server(name) else {
            return Usable::No("no such server in this session".to_owned());
        };
        let (status, client) = {
            let st = server.lock();
            (st.status.clone(), st.client.clone())
        };
        match (status, client) {
            (Status::Ready { .. }, Some(client)) => {
                if client.router().tools_changed.load(Ordering::SeqCst) {
                    self.refresh_server(server, &client, abort);
                }
                Usable::Ready(client)
            }
            (Status::Failed(why), _) => Usable::No(why),
            (Status::Connecting, _) => Usable::No("it is still connecting".to_owned()),
            (Status::Ready { .. }, None) => Usable::No("it is not connected".to_owned()),
        }
    }

    fn refresh_server(&self, server: &Server, client: &Arc<Client>, abort: &AbortFlag) {
        match client.list_tools(server.start_timeout(), abort) {
            Ok(tools) => self.set(server, Status::Ready { tools: tools.len() }, None, tools),
            Err(e) => log::warn!("MCP server {}: refreshing tools failed: {e}", server.name),
        }
    }

    /// Lists the tools of every ready server again (`mcp.refresh`, `list_changed`).
    pub(crate) fn refresh(&self, abort: &AbortFlag) {
        for server in &self.servers {
            let client = server.lock().client.clone();
            if let (Some(client), Status::Ready { .. }) = (client, server.lock().status.clone()) {
                self.refresh_server(server, &client, abort);
            }
        }
    }

    /// Refreshes the servers that announced `list_changed` (before a model call).
    pub(crate) fn refresh_changed(&self, abort: &AbortFlag) {
        for server in &self.servers {
            let client = server.lock().client.clone();
            if let Some(client) = client.filter(|c| c.router().tools_changed.load(Ordering::SeqCst))
            {
                self.refresh_server(server, &client, abort);
            }
        }
    }

    /// The tools `name` offers (as last listed).
    pub(crate) fn tools_of(&self, name: &str) -> Vec<ToolInfo> {
        self.server(name)
            .map(|s| s.lock().tools.clone())
            .unwrap_or_default()
    }

    /// `tools/call` on server `name`; `Err` is the text the model or kernel gets.
    pub(crate) fn call(
        &self,
        name: &str,
        tool: &str,
        args: Value,
        abort: &AbortFlag,
    ) -> Result<Value, String> {
        let client = match self.usable(name, abort) {
            Usable::Ready(c) => c,
            Usable::No(why) => return Err(wire::not_available(name, &why)),
        };
        let server = self.server(name);
        if server.is_some_and(|s| !s.config.limits().allows(tool)) {
            return Err(format!(
                "MCP tool {tool} on server {name} is disabled (settings enabledTools/disabledTools)"
            ));
        }
        let timeout = server.map_or(CALL_TIMEOUT, |s| s.call_timeout());
        client
            .call_tool(tool, args, timeout, abort)
            .map_err(|e| match e {
                McpError::Closed(why) => wire::not_available(name, &why),
                McpError::Aborted => "Cancelled by the user.".to_owned(),
                McpError::Timeout(_) => format!(
                    "MCP tool {tool} on server {name} gave no answer within {}",
                    spoken(timeout)
                ),
                other => format!("MCP tool {tool} on server {name} failed: {other}"),
            })
    }

    /// `mcp.config` for the kernel: names, transports and states, never URLs' headers or env.
    pub(crate) fn config(&self) -> Value {
        let servers: Vec<Value> = self
            .servers
            .iter()
            .zip(
                wire::status_payload(&self.statuses())
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            )
            .map(|(s, mut status)| {
                status["type"] = json!(match s.config {
                    McpServer::Stdio { .. } => "stdio",
                    McpServer::Http { .. } => "http",
                });
                status
            })
            .collect();
        json!({ "servers": servers })
    }

    /// Ends every connection: stdio groups are killed, HTTP sessions DELETEd. Idempotent, and
    /// returns at once: the connect threads are joined (bounded) by the reaper, which also
    /// closes a connection that a connect finishes meanwhile.
    pub(crate) fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.closing.abort();
        {
            let _gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
            self.changed.notify_all();
        }
        for server in &self.servers {
            let client = server.lock().client.take();
            if let Some(c) = client {
                c.close();
            }
        }
        let launcher = self
            .launcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let threads: Vec<JoinHandle<()>> = launcher
            .into_iter()
            .chain(std::mem::take(
                &mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()),
            ))
            .collect();
        let servers = self.servers.clone();
        crate::base::reaper::later(move || {
            // Connect threads see `closing` at once; a spawn under way ends quickly.
            let deadline = Instant::now() + Duration::from_millis(500);
            for t in threads {
                crate::base::reaper::join_or_leave(t, deadline, "an MCP connect thread");
            }
            // A connect that finished after we took its client.
            for server in &servers {
                let client = server.lock().client.take();
                if let Some(c) = client {
                    c.close();
                }
            }
        });
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.close();
    }
}

/// The kernel's `mcp.*` host requests (§4.2), answered here so the kernel never holds a
/// server's URL, headers or env. `hub` is `None` when the client gave no servers.
pub(crate) fn host_request(
    hub: Option<&McpHub>,
    kind: &str,
    payload: &Value,
) -> Result<Value, String> {
    let server = || {
        payload
            .get("server")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{kind} needs a server name"))
    };
    let Some(hub) = hub else {
        return match kind {
            "mcp.config" | "mcp.refresh" => Ok(json!({ "servers": [] })),
            _ => Err(wire::not_available(
                server()?,
                "no such server in this session",
            )),
        };
    };
    // Cut short when the session closes (a kernel call has no turn abort of its own).
    let abort = &hub.closing;
    match kind {
        "mcp.config" => Ok(hub.config()),
        "mcp.refresh" => {
            hub.wait_ready(abort);
            hub.refresh(abort);
            Ok(hub.config())
        }
        "mcp.list_tools" => {
            let name = server()?;
            hub.wait_ready(abort);
            match hub.usable(name, abort) {
                Usable::Ready(_) => {}
                Usable::No(why) => return Err(wire::not_available(name, &why)),
            }
            let tools: Vec<Value> = hub
                .tools_of(name)
                .into_iter()
                .map(|t| json!({ "name": t.name, "description": t.description, "inputSchema": t.input_schema }))
                .collect();
            Ok(json!({ "tools": tools }))
        }
        "mcp.call_tool" => {
            let name = server()?;
            let tool = payload
                .get("tool")
                .and_then(Value::as_str)
                .ok_or("mcp.call_tool needs a tool name")?;
            let arguments = payload
                .get("arguments")
                .cloned()
                .unwrap_or_else(|| json!({}));
            hub.wait_ready(abort);
            hub.call(name, tool, arguments, abort)
        }
        other => Err(crate::kernel::host::unavailable(other)),
    }
}

fn server_name(s: &McpServer) -> &str {
    match s {
        McpServer::Stdio { name, .. } | McpServer::Http { name, .. } => name,
    }
}

/// A connect thread: transport, `initialize`, `tools/list`, then ready (or failed).
fn connect(hub: &Weak<McpHub>, server: &Arc<Server>, cwd: &std::path::Path, closing: &AbortFlag) {
    let router = Arc::new(Router::default());
    let name = server.name.clone();
    let transport: Result<Box<dyn client::Transport>, McpError> = match &server.config {
        McpServer::Stdio {
            command, args, env, ..
        } => {
            let weak = hub.clone();
            let on_exit_server = server.clone();
            let on_exit = Box::new(move |why: String| {
                if let Some(hub) = weak.upgrade() {
                    // A server that dies during start-up fails its connect instead.
                    let was_ready = matches!(on_exit_server.lock().status, Status::Ready { .. });
                    if was_ready && !hub.closed.load(Ordering::SeqCst) {
                        hub.set(&on_exit_server, Status::Failed(why), None, Vec::new());
                    }
                }
            });
            stdio::StdioTransport::spawn(&name, command, args, env, cwd, router.clone(), on_exit)
                .map(|t| Box::new(t) as Box<dyn client::Transport>)
        }
        McpServer::Http { url, headers, .. } => Ok(Box::new(http::HttpTransport::new(
            &name,
            url,
            headers,
            router.clone(),
        ))),
    };
    let result = transport.and_then(|t| {
        let client = Arc::new(Client::new(t, router));
        let started = hub.upgrade().map_or_else(Instant::now, |h| h.started);
        let left = |started: Instant| server.start_timeout().saturating_sub(started.elapsed());
        let outcome = client
            .initialize(left(started), closing)
            .and_then(|_| client.list_tools(left(started), closing));
        match outcome {
            Ok(tools) => Ok((client, tools)),
            Err(e) => {
                client.close();
                Err(e)
            }
        }
    });
    let Some(hub) = hub.upgrade() else {
        return;
    };
    match result {
        Ok((client, tools)) if !hub.closed.load(Ordering::SeqCst) => {
            hub.set(
                server,
                Status::Ready { tools: tools.len() },
                Some(client),
                tools,
            );
        }
        Ok((client, _)) => client.close(),
        Err(_) if hub.closed.load(Ordering::SeqCst) => {}
        Err(e) => {
            let why = match e {
                McpError::Timeout(_) => {
                    format!("it did not start within {}", spoken(server.start_timeout()))
                }
                McpError::Closed(why) => format!("{why} during start-up"),
                other => other.to_string(),
            };
            hub.set(server, Status::Failed(why), None, Vec::new());
        }
    }
}
