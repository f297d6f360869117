//! The `mcp` section of `make bench`: what MCP servers cost a session, against the Python SDK
//! fixture server (`fixtures/mcp/server.py` on `.deps/py`): the `session/new` answer with two
//! servers configured (they connect in the background), the time until a stdio server is
//! `ready`, and the agent's overhead on a no-op tool call against a direct MCP round trip from
//! this program to the same server.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

use super::{ms, stats, write_script, Bench};

impl Bench {
    pub(super) fn mcp(&mut self) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = root.join(".deps/py/bin/python");
        let server = root.join("fixtures/mcp/server.py");
        if !python.exists() {
            self.report.note(format!(
                "mcp section skipped: {} is not installed (make test-deps)",
                python.display()
            ));
            return;
        }
        let (python, server) = (python.display().to_string(), server.display().to_string());
        let entry = |name: &str| json!({"name": name, "command": python, "args": [server, "stdio"], "env": []});
        let work = self.work.display().to_string();

        // session/new with two servers, then the time until both are ready, per fresh session.
        let hello = write_script(&self.work, "mcp-hello.jsonl", &[json!({"text":"hi"})]);
        let hello_s = hello.display().to_string();
        let mut p = self.agent(
            &self.bin,
            &["--provider", "scripted", "--script", &hello_s],
            &[],
        );
        p.request(1, "initialize", json!({"protocolVersion":1}));
        p.response(1);
        let (mut bare, mut new, mut ready) = (vec![], vec![], vec![]);
        let mut id = 10;
        for _ in 0..self.runs(10, 2) {
            // The same request without servers, on the same process: the baseline.
            id += 1;
            let t0 = Instant::now();
            p.request(id, "session/new", json!({"cwd": work, "mcpServers": []}));
            p.response(id);
            bare.push(ms(t0.elapsed()));
            let v: Value = serde_json::from_str(&p.line).unwrap();
            let sid = v["result"]["sessionId"].as_str().unwrap().to_owned();
            id += 1;
            p.request(id, "session/close", json!({"sessionId": sid}));
            p.response(id);
            id += 1;
            let t0 = Instant::now();
            p.request(
                id,
                "session/new",
                json!({"cwd": work, "mcpServers": [entry("a"), entry("b")]}),
            );
            p.response(id);
            new.push(ms(t0.elapsed()));
            let v: Value = serde_json::from_str(&p.line).unwrap();
            let sid = v["result"]["sessionId"].as_str().unwrap().to_owned();
            loop {
                let f = p.frame("both MCP servers ready");
                let list = &f["params"]["update"]["_meta"]["ai.primeintellect.prime-agent"]["mcp"];
                if list
                    .as_array()
                    .is_some_and(|l| l.iter().all(|s| s["status"] == "ready"))
                {
                    break;
                }
                assert!(
                    !list.to_string().contains("failed"),
                    "an MCP server failed: {list}"
                );
            }
            ready.push(ms(t0.elapsed()));
            id += 1;
            p.request(id, "session/close", json!({"sessionId": sid}));
            p.response(id);
        }
        p.finish();
        let r = &mut self.report;
        r.add(
            "mcp: session/new response, no servers (baseline)",
            "ms",
            bare,
        );
        r.add(
            "mcp: session/new response, 2 stdio servers configured",
            "ms",
            new,
        );
        r.add(
            "mcp: session/new → both stdio servers ready (Python SDK)",
            "ms",
            ready,
        );

        // A no-op tool called N times in one turn: tool_call → completed, as the client sees it.
        let calls = self.runs(300, 30);
        let steps: Vec<Value> = (0..calls)
            .map(|i| json!({"tool_call": {"id": format!("n{i}"), "name": "mcp__py__noop", "arguments": {}}}))
            .collect();
        let script = write_script(
            &self.work,
            "mcp-noop.jsonl",
            &[json!({ "steps": steps }), json!({"text":"done"})],
        );
        let script_s = script.display().to_string();
        let mut p = self.agent(
            &self.bin,
            &["--provider", "scripted", "--script", &script_s],
            &[],
        );
        p.request(1, "initialize", json!({"protocolVersion":1}));
        p.response(1);
        p.request(
            2,
            "session/new",
            json!({"cwd": work, "mcpServers": [entry("py")]}),
        );
        p.response(2);
        let v: Value = serde_json::from_str(&p.line).unwrap();
        let sid = v["result"]["sessionId"].as_str().unwrap().to_owned();
        p.read_until("\"status\":\"ready\"");
        p.prompt(3, &sid);
        // Calls run one after another, so the gap between two completions is one call's full
        // cycle through the agent (tool_call out, the MCP round trip, the result out).
        let mut agent_calls = Vec::with_capacity(calls);
        let mut last = None;
        let mut first = None;
        loop {
            p.next_line("the no-op calls");
            if p.line.contains("\"sessionUpdate\":\"tool_call\"") && first.is_none() {
                first = Some(Instant::now());
            } else if p.line.contains("\"status\":\"completed\"") {
                let now = Instant::now();
                if let Some(t) = last.replace(now).or(first) {
                    agent_calls.push(ms(now.duration_since(t)));
                }
            } else if p.line.contains("\"id\":3,") && !p.line.contains("\"method\"") {
                break;
            }
        }
        p.finish();
        assert_eq!(agent_calls.len(), calls, "every no-op call completed");

        // The same calls straight from here to the server over its stdio.
        let direct = direct_calls(&python, &server, calls);
        let agent_median = median(&agent_calls);
        let direct_median = median(&direct);
        let r = &mut self.report;
        r.add(
            "mcp: no-op tool call through the agent (tool_call → completed)",
            "ms",
            agent_calls,
        );
        r.add(
            "mcp: no-op tool call direct to the server (stdio round trip)",
            "ms",
            direct,
        );
        r.note(format!(
            "mcp: the agent adds {:.3} ms to a no-op call (median through the agent − median direct)",
            agent_median - direct_median
        ));
    }
}

fn median(xs: &[f64]) -> f64 {
    stats(xs.to_vec())["median"].as_f64().unwrap_or(0.0)
}

/// `calls` round trips of `tools/call noop` from this program to a fresh server.
fn direct_calls(python: &str, server: &str, calls: usize) -> Vec<f64> {
    let mut child = Command::new(python)
        .args([server, "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the MCP server");
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let send = |v: Value, stdin: &mut std::process::ChildStdin| {
        let mut b = serde_json::to_vec(&v).unwrap();
        b.push(b'\n');
        stdin.write_all(&b).unwrap();
        stdin.flush().unwrap();
    };
    let answer = |id: u64, out: &mut BufReader<std::process::ChildStdout>, line: &mut String| loop {
        line.clear();
        assert!(out.read_line(line).unwrap() > 0, "the server exited");
        let v: Value = serde_json::from_str(line).unwrap();
        if v["id"] == id {
            return;
        }
    };
    send(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}),
        &mut stdin,
    );
    answer(0, &mut out, &mut line);
    send(
        json!({"jsonrpc":"2.0","method":"notifications/initialized","params":{}}),
        &mut stdin,
    );
    let mut times = Vec::with_capacity(calls);
    for i in 1..=calls as u64 {
        let t = Instant::now();
        send(
            json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"noop","arguments":{}}}),
            &mut stdin,
        );
        answer(i, &mut out, &mut line);
        times.push(ms(t.elapsed()));
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    times
}
