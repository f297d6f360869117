//! Traces (issue 35, docs/tracing.md): a prompt's `_meta.traceparent` parents its turn's span,
//! model requests carry the W3C `traceparent` of their span, and the spans reach a local OTLP
//! receiver (a loopback HTTP server here) as protobuf, decoded by the real
//! `opentelemetry-proto` package, or as OTLP/JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{json, Value};

use crate::support::llm_server::{Canned, LlmServer, Recorded};
use crate::support::model::*;
use crate::support::*;

/// The client's span: the trace id and parent span id a traced prompt names.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{PARENT_ID}-01")
}

/// One request the receiver took.
#[derive(Debug, Clone)]
struct Export {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Export {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A loopback OTLP/HTTP receiver: answers every POST `200 {}` and keeps it.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Export>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let sink = sink.clone();
                thread::spawn(move || serve(stream, &sink));
            }
        });
        Receiver { port, got }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn exports(&self) -> Vec<Export> {
        self.got.lock().unwrap().clone()
    }
}

/// HTTP/1.1 requests on one connection (keep-alive), `Content-Length` or chunked bodies.
fn serve(stream: TcpStream, sink: &Mutex<Vec<Export>>) {
    let mut out = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(n, 0);
            if r.read_exact(&mut body).is_err() {
                return;
            }
        } else if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let mut size = String::new();
                r.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        sink.lock().unwrap().push(Export {
            path,
            headers,
            body,
        });
        let reply =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// One reply that runs `bash` (`echo traced`), with usage.
fn bash_call() -> Canned {
    Canned::sse_bytes(
        concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_t\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"command\\\": \\\"echo traced\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":20}}\n\n",
            "data: [DONE]\n\n"
        )
        .as_bytes()
        .to_vec(),
    )
}

/// A prompt with `meta` as its `_meta`; returns the response.
fn prompt_with_meta(a: &mut Agent, text: &str, meta: Value) -> Value {
    let sid = a.sid();
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}], "_meta": meta}),
    );
    a.response(&id)
}

/// Every span of every export request, by name, with the resource of its request.
fn spans(exports: &[Value]) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    for e in exports {
        for rs in e["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                assert_eq!(ss["scope"]["name"], "prime-agent");
                for s in ss["spans"].as_array().unwrap() {
                    out.push((s.clone(), rs["resource"].clone()));
                }
            }
        }
    }
    out
}

/// A span's attribute, whatever its type, as JSON text (`intValue`s are strings in OTLP/JSON).
fn attr(span: &Value, key: &str) -> Option<Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| {
            let v = &a["value"];
            v.get("stringValue")
                .or_else(|| v.get("intValue"))
                .or_else(|| v.get("boolValue"))
                .cloned()
                .unwrap_or(Value::Null)
        })
}

fn named<'a>(spans: &'a [(Value, Value)], prefix: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .map(|(s, _)| s)
        .filter(|s| s["name"].as_str().unwrap_or("").starts_with(prefix))
        .collect()
}

/// The agent on `server` exporting to `receiver` with `otel` variables; settings keep little
/// history so `/compact` has something to summarise.
fn traced_agent(server: &LlmServer, otel: &[(&str, &str)]) -> Setup {
    let s = spawn_with(server, "openai-completions", "cold/test-model", otel);
    s._dir.write(
        "settings.json",
        &json!({"compaction": {"keepRecentTokens": 30}, "autoRefine": {"enabled": false}})
            .to_string(),
    );
    s
}

/// Runs the scripted session every export test checks: a traced prompt whose model runs
/// `bash` then answers, then `/compact` (a compaction span with its summary call) without a
/// trace context; then stdin closes and the agent flushes its spans on the way out.
fn run_traced_session(otel: &[(&str, &str)], receiver: &Receiver) -> (String, Vec<Recorded>) {
    let server = LlmServer::start(vec![
        bash_call(),
        Canned::sse("openai-after-tool.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let mut s = traced_agent(&server, otel);
    let sid = s.agent.handshake();
    let long = format!("FIRST {}", "lorem ipsum ".repeat(20));
    let r = prompt_with_meta(
        &mut s.agent,
        &long,
        json!({"traceparent": traceparent(), "tracestate": "client=1"}),
    );
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    assert_eq!(s.agent.prompt_stop("/compact"), "end_turn");
    assert!(s.agent.finish().success());
    assert!(
        !receiver.exports().is_empty(),
        "nothing exported; stderr:\n{}",
        s.agent.stderr_text()
    );
    (sid, server.posts())
}

/// The span tree of `run_traced_session`, from the decoded export requests.
fn check_tree(exports: &[Value], sid: &str, posts: &[Recorded], service: &str) {
    let all = spans(exports);
    let (_, resource) = &all[0];
    let service_name = resource["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "service.name")
        .map(|a| a["value"]["stringValue"].clone());
    assert_eq!(service_name, Some(json!(service)));
    let by_id = |id: &Value| all.iter().map(|(s, _)| s).find(|s| s["spanId"] == *id);

    // The traced turn: the client's span is its parent, in the client's trace.
    let turns = named(&all, "invoke_agent main");
    assert_eq!(turns.len(), 2, "two prompt turns: {turns:#?}");
    let turn = turns
        .iter()
        .find(|t| t["traceId"] == TRACE_ID)
        .expect("the traced turn is in the client's trace");
    assert_eq!(turn["parentSpanId"], PARENT_ID);
    assert_eq!(attr(turn, "gen_ai.conversation.id"), Some(json!(sid)));
    assert_eq!(
        attr(turn, "prime_agent.stop_reason"),
        Some(json!("end_turn"))
    );
    assert_eq!(turn["traceState"], "client=1");

    // One span per model call, each carrying its request id, and the request carrying the
    // span's traceparent.
    let chats = named(&all, "chat ");
    assert_eq!(chats.len(), posts.len(), "{chats:#?}");
    for post in posts {
        let rid = post.header("x-acp-model-request-id").expect("request id");
        let chat = chats
            .iter()
            .find(|c| attr(c, "prime_agent.model_request_id") == Some(json!(rid)))
            .unwrap_or_else(|| panic!("no span for model request {rid}"));
        let want = format!(
            "00-{}-{}-01",
            chat["traceId"].as_str().unwrap(),
            chat["spanId"].as_str().unwrap()
        );
        assert_eq!(post.header("traceparent"), Some(want.as_str()));
        assert_eq!(chat["kind"], 3, "a client span");
        assert_eq!(attr(chat, "gen_ai.operation.name"), Some(json!("chat")));
        assert_eq!(attr(chat, "gen_ai.provider.name"), Some(json!("intercept")));
        assert_eq!(
            attr(chat, "gen_ai.request.model"),
            Some(json!("cold/test-model"))
        );
        assert_eq!(attr(chat, "prime_agent.retries"), Some(json!("0")));
    }
    let in_turn: Vec<_> = chats
        .iter()
        .filter(|c| c["parentSpanId"] == turn["spanId"])
        .collect();
    assert_eq!(in_turn.len(), 2, "the tool call and the answer");
    assert!(in_turn.iter().all(|c| c["traceId"] == TRACE_ID));
    assert!(in_turn.iter().any(
        |c| attr(c, "gen_ai.usage.input_tokens") == Some(json!("50"))
            && attr(c, "gen_ai.usage.output_tokens") == Some(json!("20"))
    ));

    // The tool call, under the turn.
    let tools = named(&all, "execute_tool bash");
    assert_eq!(tools.len(), 1, "{tools:#?}");
    assert_eq!(tools[0]["parentSpanId"], turn["spanId"]);
    assert_eq!(attr(tools[0], "gen_ai.tool.call.id"), Some(json!("call_t")));

    // `/compact`: a turn without trace context hangs under the session's span; the
    // compaction is its child and the summary call the compaction's.
    let session = named(&all, "session");
    assert_eq!(session.len(), 1, "{session:#?}");
    assert_eq!(attr(session[0], "gen_ai.conversation.id"), Some(json!(sid)));
    assert!(session[0].get("parentSpanId").is_none_or(|p| p == ""));
    let other = turns.iter().find(|t| t["traceId"] != TRACE_ID).unwrap();
    assert_eq!(other["parentSpanId"], session[0]["spanId"]);
    let compaction = named(&all, "compaction");
    assert_eq!(compaction.len(), 1, "{compaction:#?}");
    assert_eq!(compaction[0]["parentSpanId"], other["spanId"]);
    assert_eq!(
        attr(compaction[0], "prime_agent.compaction.reason"),
        Some(json!("manual"))
    );
    let summary: Vec<_> = chats
        .iter()
        .filter(|c| c["parentSpanId"] == compaction[0]["spanId"])
        .collect();
    assert_eq!(summary.len(), 1, "the summary call");
    for (s, _) in &all {
        assert!(
            s["parentSpanId"].as_str().unwrap_or("").is_empty()
                || s["parentSpanId"] == PARENT_ID
                || by_id(&s["parentSpanId"]).is_some(),
            "a span whose parent was not exported: {s}"
        );
    }
}

#[test]
fn a_traced_turn_exports_its_span_tree_as_otlp_json() {
    let receiver = Receiver::start();
    let endpoint = format!("{}/custom/traces", receiver.url());
    let (sid, posts) = run_traced_session(
        &[
            // The signal's own endpoint is taken as is: no `/v1/traces` appended.
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9/unused"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-token=se%20cret"),
            ("OTEL_SERVICE_NAME", "traced-json"),
        ],
        &receiver,
    );
    let exports = receiver.exports();
    let mut decoded = Vec::new();
    for e in &exports {
        assert_eq!(e.path, "/custom/traces");
        assert_eq!(e.header("content-type"), Some("application/json"));
        assert_eq!(e.header("x-collector-token"), Some("se cret"));
        assert!(
            e.header("traceparent").is_none(),
            "the export is not traced"
        );
        decoded.push(serde_json::from_slice::<Value>(&e.body).expect("OTLP/JSON"));
    }
    check_tree(&decoded, &sid, &posts, "traced-json");
}

/// The protobuf body as JSON, decoded by `opentelemetry-proto` (ids as hex, enums as numbers,
/// like OTLP/JSON); `None` (skipped) without the test deps.
fn decode_protobuf(body: &[u8]) -> Option<Value> {
    let python = crate::support::deps::python("tracing::protobuf")?;
    let script = r#"
import base64, json, sys
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
request = ExportTraceServiceRequest()
request.ParseFromString(sys.stdin.buffer.read())
out = MessageToDict(request, use_integers_for_enums=True)
for rs in out.get("resourceSpans", []):
    for ss in rs.get("scopeSpans", []):
        for s in ss.get("spans", []):
            for k in ("traceId", "spanId", "parentSpanId"):
                if k in s:
                    s[k] = base64.b64decode(s[k]).hex()
print(json.dumps(out))
"#;
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "opentelemetry-proto could not decode the body"
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn a_traced_turn_exports_protobuf_that_opentelemetry_proto_decodes() {
    let receiver = Receiver::start();
    let (sid, posts) = run_traced_session(
        &[
            // The generic endpoint gets `/v1/traces`; protobuf is the default protocol.
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("{}/", receiver.url()),
            ),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
        ],
        &receiver,
    );
    let exports = receiver.exports();
    let mut decoded = Vec::new();
    for e in &exports {
        assert_eq!(e.path, "/v1/traces");
        assert_eq!(e.header("content-type"), Some("application/x-protobuf"));
        match decode_protobuf(&e.body) {
            Some(v) => decoded.push(v),
            None => return,
        }
    }
    check_tree(&decoded, &sid, &posts, "prime-agent");
    let env = decoded[0]["resourceSpans"][0]["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["key"] == "deployment.environment" && a["value"]["stringValue"] == "test");
    assert!(env, "OTEL_RESOURCE_ATTRIBUTES reach the resource");
}

/// The agent's thread names, from `/proc` (Linux).
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

// See: W3C Trace Context §3.2 (an invalid traceparent is ignored) and docs/tracing.md (without
// an exporter the client's context is passed on unchanged).
#[test]
fn without_otel_variables_the_prompts_traceparent_still_reaches_the_model_server() {
    let server = LlmServer::start(vec![
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let mut s = spawn_with(&server, "openai-completions", "cold/test-model", &[]);
    s.agent.handshake();
    let meta = json!({"traceparent": traceparent(), "tracestate": "client=1", "baggage": "user=7"});
    assert_eq!(
        stop_reason(&prompt_with_meta(&mut s.agent, "one", meta)),
        "end_turn"
    );
    // Invalid values are no error: the turn runs, untraced.
    let bad = json!({"traceparent": format!("00-{TRACE_ID}-0000000000000000-01")});
    assert_eq!(
        stop_reason(&prompt_with_meta(&mut s.agent, "two", bad)),
        "end_turn"
    );
    assert_eq!(s.agent.prompt_stop("three"), "end_turn");
    let threads = thread_names(s.agent.child.id());
    assert!(!threads.is_empty(), "no /proc?");
    assert!(
        !threads.iter().any(|t| t == "otel-export"),
        "no exporter thread without OTEL_* variables: {threads:?}"
    );
    assert!(s.agent.finish().success());
    let posts = server.posts();
    assert_eq!(posts.len(), 3);
    assert_eq!(posts[0].header("traceparent"), Some(traceparent().as_str()));
    assert_eq!(posts[0].header("tracestate"), Some("client=1"));
    assert_eq!(posts[0].header("baggage"), Some("user=7"));
    for p in &posts[1..] {
        assert_eq!(p.header("traceparent"), None, "no context, no header");
        assert_eq!(p.header("tracestate"), None);
    }
}

#[test]
fn otel_sdk_disabled_exports_nothing_and_starts_no_thread() {
    let receiver = Receiver::start();
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let endpoint = receiver.url();
    let mut s = spawn_with(
        &server,
        "openai-completions",
        "cold/test-model",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    );
    assert_eq!(stop_reason(&ask(&mut s.agent, "hi")), "end_turn");
    let threads = thread_names(s.agent.child.id());
    assert!(!threads.iter().any(|t| t == "otel-export"), "{threads:?}");
    assert!(s.agent.finish().success());
    assert_eq!(server.posts()[0].header("traceparent"), None);
    assert!(receiver.exports().is_empty(), "{:?}", receiver.exports());
}

/// The contrast that makes the two tests above mean something: with an endpoint, the thread
/// runs and a plain (untraced) prompt's model request carries our span's context.
#[test]
fn with_an_endpoint_the_exporter_runs_and_requests_carry_our_spans() {
    let receiver = Receiver::start();
    let server = LlmServer::start(vec![Canned::sse("openai-text.sse")]);
    let endpoint = receiver.url();
    let mut s = spawn_with(
        &server,
        "openai-completions",
        "cold/test-model",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
    );
    assert_eq!(stop_reason(&ask(&mut s.agent, "hi")), "end_turn");
    let threads = thread_names(s.agent.child.id());
    assert!(threads.iter().any(|t| t == "otel-export"), "{threads:?}");
    assert!(s.agent.finish().success());
    let header = server.posts()[0]
        .header("traceparent")
        .map(str::to_owned)
        .expect("a traceparent");
    assert!(
        header.starts_with("00-") && header.ends_with("-01"),
        "{header}"
    );
    assert!(!receiver.exports().is_empty());
}

/// An HTTP MCP call carries the `traceparent` of the tool call that makes it: the fixture
/// server's `headers` tool echoes what the request arrived with.
#[test]
fn an_http_mcp_call_carries_its_tool_spans_traceparent() {
    let test = "tracing::an_http_mcp_call_carries_its_tool_spans_traceparent";
    let Some(python) = crate::support::deps::python(test) else {
        return;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut mcp = Command::new(&python)
        .args([
            fixture("mcp/server.py").display().to_string(),
            "http".to_owned(),
            port.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the MCP server never listened"
        );
        thread::sleep(std::time::Duration::from_millis(50));
    }
    let receiver = Receiver::start();
    let dir = TempDir::new("trace-mcp");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"id":"h1","name":"mcp__task__headers","arguments":{}}}]}),
            json!({"text":"done"}),
        ],
    );
    let endpoint = receiver.url();
    let mut a = Agent::spawn(Spawn {
        env: vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/json".into()),
        ],
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &[])
    });
    a.call(
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{}}),
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    a.new_session_in(
        dir.path(),
        json!([{"name":"task","type":"http","url": url, "headers": []}]),
    );
    a.wait_for("MCP servers settled", |f| {
        ns(&f["params"]["update"])["mcp"]
            .as_array()
            .is_some_and(|l| l.iter().all(|s| s["status"] != "connecting"))
    });
    let r = prompt_with_meta(&mut a, "go", json!({"traceparent": traceparent()}));
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    let end = a
        .updates_of("tool_call_update")
        .into_iter()
        .rev()
        .find(|u| u["toolCallId"] == "h1" && u["status"] == "completed")
        .unwrap_or_else(|| panic!("no completed h1: {:?}", a.updates()));
    let echoed: Value =
        serde_json::from_str(end["content"][0]["content"]["text"].as_str().unwrap()).unwrap();
    assert!(a.finish().success());
    let _ = mcp.kill();
    let _ = mcp.wait();
    let decoded: Vec<Value> = receiver
        .exports()
        .iter()
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    let all = spans(&decoded);
    let tool = named(&all, "execute_tool mcp__task__headers");
    assert_eq!(tool.len(), 1, "{all:#?}");
    assert_eq!(tool[0]["traceId"], TRACE_ID);
    let want = format!("00-{TRACE_ID}-{}-01", tool[0]["spanId"].as_str().unwrap());
    assert_eq!(echoed["traceparent"], json!(want), "{echoed}");
}

/// A subagent admitted by a cell runs under the span of the tool call that ran the cell, in
/// the client's trace; its model calls are its children.
#[test]
fn a_subagent_runs_under_the_tool_call_that_admitted_it() {
    let receiver = Receiver::start();
    let dir = TempDir::new("trace-subagent");
    let script = script_file(
        &dir,
        &[
            json!({"steps":[{"tool_call":{"id":"spawn","name":"ipython","arguments":{"code":"h = await rlm(\"Check the plan\", name=\"helper\")\nprint(h.name)"}}}]}),
            json!({"steps":[{"expect":["helper"]},{"text":"Spawned."}]}),
            json!({"agent":"helper","steps":[{"text":"child done"}]}),
            json!({"text":"noted"}),
            json!({"text":"second prompt answered"}),
        ],
    );
    let endpoint = receiver.url();
    let mut a = Agent::spawn(Spawn {
        env: vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/json".into()),
            ("RLM_MAX_DEPTH".into(), "1".into()),
            ("PRIME_AGENT_QUIESCENCE_WAIT_MS".into(), "60000".into()),
        ],
        cwd: Some(dir.path().to_path_buf()),
        ..Spawn::scripted(&script, &[])
    });
    a.handshake();
    let r = prompt_with_meta(&mut a, "delegate", json!({"traceparent": traceparent()}));
    assert_eq!(stop_reason(&r), "end_turn", "{r}");
    // The next prompt is answered once the family is quiet: the child has finished.
    assert_eq!(a.prompt_stop("and now?"), "end_turn");
    assert!(a.finish().success());
    let decoded: Vec<Value> = receiver
        .exports()
        .iter()
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    let all = spans(&decoded);
    let cell = named(&all, "execute_tool ipython");
    assert_eq!(cell.len(), 1, "{all:#?}");
    let child = named(&all, "invoke_agent helper");
    assert_eq!(child.len(), 1, "{all:#?}");
    assert_eq!(child[0]["parentSpanId"], cell[0]["spanId"]);
    assert_eq!(child[0]["traceId"], TRACE_ID);
    let child_id = attr(child[0], "gen_ai.agent.id").unwrap_or_else(|| panic!("{:#}", child[0]));
    assert!(child_id.as_str().unwrap().starts_with("sub-"), "{child_id}");
    let calls: Vec<_> = named(&all, "chat ")
        .into_iter()
        .filter(|c| c["parentSpanId"] == child[0]["spanId"])
        .collect();
    assert_eq!(calls.len(), 1, "the child's one model call");
    assert_eq!(attr(calls[0], "gen_ai.agent.name"), Some(json!("helper")));
}

/// A collector that accepts connections and never answers: the exporter's thread is stuck in
/// its first request, the queue (one span here) fills, and later spans are dropped and counted;
/// the turns never wait for any of it, and the exit gives up on the flush at its bound.
#[test]
fn a_stalled_collector_drops_and_counts_spans_and_blocks_no_turn() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            keep.lock().unwrap().push(stream);
        }
    });
    let server = LlmServer::start(vec![
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
        Canned::sse("openai-text.sse"),
    ]);
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut s = spawn_with(
        &server,
        "openai-completions",
        "cold/test-model",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "600000"),
        ],
    );
    assert_eq!(stop_reason(&ask(&mut s.agent, "one")), "end_turn");
    assert_eq!(stop_reason(&ask_again(&mut s.agent, "two")), "end_turn");
    assert_eq!(stop_reason(&ask_again(&mut s.agent, "three")), "end_turn");
    assert!(s.agent.finish().success());
    let log = s.agent.stderr_text();
    assert!(
        log.contains("trace export did not finish within 2s"),
        "{log}"
    );
    let counts = log
        .lines()
        .find(|l| l.contains("traces: "))
        .unwrap_or_else(|| panic!("no drop count at exit: {log}"));
    let dropped: u64 = counts
        .split("spans exported, ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{counts}"));
    // Six spans (three turns, three model calls) and the session's: one is in flight, one
    // waits in the queue, the rest are dropped.
    assert!(dropped >= 4, "{counts}");
    assert!(!held.lock().unwrap().is_empty(), "the exporter connected");
}
