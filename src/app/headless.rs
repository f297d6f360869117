//! Headless front ends for scripts and CI: `-p/--print "<prompt>"` prints the final assistant
//! text (for a `!cmd` prompt, the command's output), `--mode json "<prompt>"` prints upstream's
//! session-event stream (the session header, then `agent_start` … `agent_end`; `upstream`), and
//! `--mode acp-json` every `session/update` payload as one JSON line and then
//! `{"type":"result","stopReason","usage"}`.
//! Output that cannot be written (the reader of stdout went away) is an error exit: a script
//! must not take a lost answer for a delivered one.
//!
//! There is no second agent loop: the real main loop, reader and writer threads run over an
//! in-memory connection, and a client thread here plays the ACP client (initialize,
//! session/new, one session/prompt), so autonomy, goals, slash commands and every stop reason
//! behave exactly as over stdio.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;
use std::thread;

use crate::base::{json::json, time};
use crossbeam_channel::{unbounded, Receiver, Sender};
use serde_json::Value;

use crate::app::cli::Config;
use crate::{app::setup, protocol::transport, server::main_loop};

mod upstream;

/// The exit code for a prompt's outcome: 0 `end_turn`, 1 a failure (or cancel), 2 a hit limit.
pub(crate) fn exit_code(outcome: &Result<Value, String>) -> u8 {
    match outcome {
        Ok(result) => match result["stopReason"].as_str() {
            Some("end_turn") => 0,
            Some("max_tokens" | "max_turn_requests") => 2,
            _ => 1,
        },
        Err(_) => 1,
    }
}

/// Runs one prompt headless; returns the exit code.
pub(crate) fn run(cfg: &Config, version: &str) -> Result<u8, String> {
    for warning in &cfg.warnings {
        log::warn!("{warning}");
    }
    let prompt = prompt_blocks(cfg)?;
    let agent = setup::build_agent(cfg)?;
    let cwd = agent.cwd.display().to_string();
    // Stray writes to fd 1 (a crate, a child) go to stderr, as in ACP mode.
    let out = transport::take_over_stdout().map_err(|e| format!("Cannot set up stdio: {e}"))?;
    let signal_rx = crate::base::signals::interrupts()?;
    let (to_agent, agent_input) = unbounded::<Vec<u8>>();
    let (agent_output, from_agent) = unbounded::<Vec<u8>>();
    let (conn, io_threads) = transport::spawn(
        ChannelReader {
            rx: agent_input,
            buf: Vec::new(),
            at: 0,
        },
        ChannelWriter(agent_output),
        transport::MAX_LINE_BYTES,
    );
    let json_mode = cfg.json;
    let events = (cfg.json && !cfg.acp_json).then(|| upstream::Stream::new(time::now_iso));
    let client = thread::Builder::new()
        .name("headless-client".to_owned())
        .spawn(move || {
            let mut client = Client {
                to_agent,
                from_agent,
                pending: Vec::new(),
                out,
                json: json_mode,
                events,
                last_message: None,
                text: String::new(),
                warning: None,
                session_id: None,
                write_error: None,
            };
            let outcome = client.run(&cwd, &prompt);
            client.finish(&outcome);
            let write_error = client.write_error.take();
            // Dropping the sender closes the agent's input: the loop settles and exits.
            drop(client);
            (outcome, write_error)
        })
        .map_err(|e| format!("Cannot start the headless client: {e}"))?;
    main_loop::run(conn, Arc::new(agent), signal_rx, version);
    let (outcome, write_error) = client
        .join()
        .unwrap_or_else(|_| (Err("the headless client panicked".to_owned()), None));
    if let Err(e) = io_threads.join() {
        log::debug!("writer ended with {e}");
    }
    if let Err(e) = &outcome {
        let _ = writeln!(std::io::stderr(), "Error: {e}");
    }
    if let Some(e) = write_error {
        return Err(format!("Cannot write the output to stdout: {e}"));
    }
    Ok(exit_code(&outcome))
}

/// The prompt's ACP content: `@file` arguments as upstream reads them (a text file inlined as
/// `<file name="PATH">…</file>`, an image attached with an empty `<file>` naming it), then the
/// other arguments joined; with no argument, stdin.
fn prompt_blocks(cfg: &Config) -> Result<Value, String> {
    let (files, words): (Vec<&String>, Vec<&String>) = cfg
        .prompt_args
        .iter()
        .partition(|a| a.starts_with('@') && a.len() > 1);
    let mut text = String::new();
    let mut images = Vec::new();
    for arg in files {
        let path = std::path::absolute(&arg[1..]).unwrap_or_else(|_| arg[1..].into());
        let shown = path.display();
        let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("File not found: {shown}"),
            _ => format!("Could not read file {shown}: {e}"),
        })?;
        if bytes.is_empty() {
            continue;
        }
        match crate::tools::read::image_mime(&path) {
            Some(mime) => {
                text.push_str(&format!("<file name=\"{shown}\"></file>\n"));
                images.push(json!({"type": "image", "mimeType": mime,
                    "data": crate::tools::read::base64_encode(&bytes)}));
            }
            None => {
                let content = String::from_utf8_lossy(&bytes);
                text.push_str(&format!("<file name=\"{shown}\">\n{content}\n</file>\n"));
            }
        }
    }
    let words: Vec<&str> = words.iter().map(|w| w.as_str()).collect();
    let words = words.join(" ");
    let text = if words.trim().is_empty() && text.is_empty() {
        prompt_text()?
    } else {
        text + &words
    };
    let mut blocks = vec![json!({"type": "text", "text": text})];
    blocks.extend(images);
    Ok(Value::Array(blocks))
}

/// Stdin when it is not a terminal.
fn prompt_text() -> Result<String, String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        let mut text = String::new();
        stdin
            .lock()
            .read_to_string(&mut text)
            .map_err(|e| format!("Cannot read the prompt from stdin: {e}"))?;
        if !text.trim().is_empty() {
            return Ok(text);
        }
    }
    Err(
        "a prompt is required: prime-agent -p \"<prompt>\" (or --mode json), or pipe it on stdin"
            .to_owned(),
    )
}

/// The agent's stdin: bytes the client thread sends; EOF once it hangs up.
struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    at: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.buf.len() {
            match self.rx.recv() {
                Ok(bytes) => {
                    self.buf = bytes;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The agent's stdout: bytes for the client thread.
struct ChannelWriter(Sender<Vec<u8>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .send(buf.to_vec())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Client {
    to_agent: Sender<Vec<u8>>,
    from_agent: Receiver<Vec<u8>>,
    /// Bytes of an incomplete line.
    pending: Vec<u8>,
    out: File,
    json: bool,
    /// `--mode json`: upstream's events, made from the updates (else `--mode acp-json` prints
    /// the updates themselves).
    events: Option<upstream::Stream>,
    /// What `--print` prints: the newest assistant message (by `messageId`) or user shell run
    /// (`!cmd`, by its tool call id), and its text so far.
    last_message: Option<String>,
    text: String,
    /// The last warning notice (why a bound stopped the prompt), for stderr.
    warning: Option<String>,
    /// The session once `session/new` answered (to cancel the prompt when stdout is gone).
    session_id: Option<String>,
    /// The first failed write to stdout; later output is dropped.
    write_error: Option<std::io::Error>,
}

impl Client {
    fn send(&self, id: u64, method: &str, params: Value) {
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .expect("a JSON value always serialises");
        line.push(b'\n');
        let _ = self.to_agent.send(line);
    }

    /// The next frame from the agent (`None`: it hung up).
    fn next_frame(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                match serde_json::from_slice(&line[..end]) {
                    Ok(v) => return Some(v),
                    Err(e) => {
                        log::warn!("headless: an unparsable frame from the agent: {e}");
                        continue;
                    }
                }
            }
            let bytes = self.from_agent.recv().ok()?;
            self.pending.extend_from_slice(&bytes);
        }
    }

    /// Sends a request and handles frames until its response: `Ok(result)` or the error text.
    fn call(&mut self, id: u64, method: &str, params: Value) -> Result<Value, String> {
        self.send(id, method, params);
        loop {
            let frame = self
                .next_frame()
                .ok_or_else(|| "the agent stopped before answering".to_owned())?;
            if frame.get("method").is_some() {
                self.on_notification(&frame);
                continue;
            }
            if frame["id"] != json!(id) {
                continue;
            }
            if let Some(error) = frame.get("error") {
                let details = error["data"]["details"].as_str();
                let message = error["message"].as_str().unwrap_or("the request failed");
                return Err(details.unwrap_or(message).to_owned());
            }
            return Ok(frame["result"].clone());
        }
    }

    fn on_notification(&mut self, frame: &Value) {
        if frame["method"] != "session/update" {
            return;
        }
        let update = &frame["params"]["update"];
        let notice = &update["_meta"][crate::protocol::meta::NAMESPACE]["notice"];
        if notice["severity"] == "warning" {
            let title = notice["title"].as_str().unwrap_or_default();
            self.warning = Some(match notice["description"].as_str() {
                Some(d) => format!("{title}: {d}"),
                None => title.to_owned(),
            });
        }
        if let Some(events) = &mut self.events {
            let events = events.update(update);
            self.write_lines(&events);
            return;
        }
        if self.json {
            self.write_lines(std::slice::from_ref(update));
            return;
        }
        if let Some((id, output)) = user_shell_output(update) {
            // Each update carries the run's output so far (its last 8 KB), so it replaces.
            self.last_message = Some(id.to_owned());
            self.text = output.to_owned();
            return;
        }
        if update["sessionUpdate"] != "agent_message_chunk" {
            return;
        }
        let id = update["messageId"].as_str().map(str::to_owned);
        if id != self.last_message {
            self.last_message = id;
            self.text.clear();
        }
        if let Some(t) = update["content"]["text"].as_str() {
            self.text.push_str(t);
        }
    }

    /// Writes each value as a JSON line.
    fn write_lines(&mut self, values: &[Value]) {
        let mut bytes = Vec::new();
        for v in values {
            serde_json::to_writer(&mut bytes, v).expect("a JSON value always serialises");
            bytes.push(b'\n');
        }
        if !bytes.is_empty() {
            self.write_out(&bytes);
        }
    }

    /// Writes to stdout. The first failure is kept for the exit code and, since nobody reads
    /// what the prompt produces any more, cancels it rather than letting it run on unseen.
    fn write_out(&mut self, bytes: &[u8]) {
        if self.write_error.is_some() {
            return;
        }
        if let Err(e) = self.out.write_all(bytes).and_then(|()| self.out.flush()) {
            self.write_error = Some(e);
            if let Some(sid) = &self.session_id {
                let mut line = serde_json::to_vec(&json!({
                    "jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}
                }))
                .expect("a JSON value always serialises");
                line.push(b'\n');
                let _ = self.to_agent.send(line);
            }
        }
    }

    fn run(&mut self, cwd: &str, prompt: &Value) -> Result<Value, String> {
        self.call(
            1,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )?;
        let session = self.call(2, "session/new", json!({"cwd": cwd, "mcpServers": []}))?;
        let sid = session["sessionId"]
            .as_str()
            .ok_or("session/new gave no session id")?
            .to_owned();
        self.session_id = Some(sid.clone());
        if let Some(events) = &mut self.events {
            // Upstream's first line: the session header, as the session file starts.
            let header = crate::persist::entry::header_line(&crate::persist::entry::Header {
                id: sid.clone(),
                timestamp: time::now_iso(),
                cwd: cwd.to_owned(),
                parent_session: None,
            });
            let mut lines = vec![header];
            lines.extend(events.start(prompt));
            self.write_lines(&lines);
        }
        self.call(
            3,
            "session/prompt",
            json!({"sessionId": sid, "prompt": prompt}),
        )
    }

    /// Prints the result: the final text (`--print`), the last events (`--mode json`) or the
    /// result line (`--mode acp-json`).
    fn finish(&mut self, outcome: &Result<Value, String>) {
        if let Some(events) = &mut self.events {
            if self.session_id.is_some() {
                let events = events.finish(outcome);
                self.write_lines(&events);
            }
            return;
        }
        let mut line = if self.json {
            let result = match outcome {
                Ok(r) => {
                    json!({"type": "result", "stopReason": r["stopReason"], "usage": r["usage"]})
                }
                Err(e) => json!({"type": "result", "error": e}),
            };
            serde_json::to_string(&result).expect("a JSON value always serialises")
        } else if outcome.is_ok() {
            // A prompt a bound stopped (exit 2) says why on stderr; stdout keeps the answer.
            if exit_code(outcome) == 2 {
                if let Some(w) = &self.warning {
                    let _ = writeln!(std::io::stderr(), "prime-agent: {w}");
                }
            }
            std::mem::take(&mut self.text)
        } else {
            return;
        };
        if !line.ends_with('\n') {
            line.push('\n');
        }
        self.write_out(line.as_bytes());
    }
}

/// The tool call id and output so far of a user shell run's update (`!cmd`, which the agent
/// streams as its synthetic bash tool call), else `None`: model tool calls are not answers.
fn user_shell_output(update: &Value) -> Option<(&str, &str)> {
    if update["sessionUpdate"] != "tool_call_update" {
        return None;
    }
    let id = update["toolCallId"].as_str()?;
    if !id.starts_with(&crate::server::events::bash_tool_call_id(None)) {
        return None;
    }
    let text = update["content"]
        .as_array()?
        .iter()
        .find_map(|c| c["content"]["text"].as_str())?;
    Some((id, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_user_shell_updates_with_output_are_answers() {
        let text = |t: &str| json!([{"type": "content", "content": {"type": "text", "text": t}}]);
        let cases = [
            (
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "prime-agent-bash-ab",
                       "content": text("hi\n")}),
                Some(("prime-agent-bash-ab", "hi\n")),
            ),
            // The start carries no output yet; a model's tool call is not an answer.
            (
                json!({"sessionUpdate": "tool_call", "toolCallId": "prime-agent-bash-ab"}),
                None,
            ),
            (
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "prime-agent-bash-ab",
                       "status": "completed"}),
                None,
            ),
            (
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_1",
                       "content": text("x")}),
                None,
            ),
        ];
        for (update, want) in cases {
            assert_eq!(user_shell_output(&update), want, "{update}");
        }
    }

    #[test]
    fn exit_codes() {
        let cases = [
            (Ok(json!({"stopReason": "end_turn"})), 0),
            (Ok(json!({"stopReason": "max_tokens"})), 2),
            (Ok(json!({"stopReason": "max_turn_requests"})), 2),
            (Ok(json!({"stopReason": "cancelled"})), 1),
            (Err("boom".to_owned()), 1),
        ];
        for (outcome, code) in cases {
            assert_eq!(exit_code(&outcome), code, "{outcome:?}");
        }
    }
}
