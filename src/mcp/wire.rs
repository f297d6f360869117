//! The MCP messages and mappings that need no IO: version negotiation, the `initialize`
//! request, tool lists, tool results, native tool names and the status `_meta` payload.
//! Pure functions, table-tested.

use crate::base::json::json;
use serde_json::{Map, Value};

use crate::base::content::Image;

/// The versions this client speaks, newest first; `initialize` offers the first.
pub(crate) const PROTOCOL_VERSIONS: &[&str] =
    &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Servers with more tools than this get only the two generic native tools.
pub(crate) const DIRECT_TOOL_LIMIT: usize = 40;

/// Most pages of `tools/list` we follow (a server whose cursor never ends must not hang us).
pub(crate) const MAX_LIST_PAGES: usize = 100;

pub(crate) fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSIONS[0],
        "capabilities": {},
        "clientInfo": { "name": "prime-agent", "version": crate::VERSION },
    })
}

/// The version the server chose, if we speak it.
pub(crate) fn negotiated_version(result: &Value) -> Result<&'static str, String> {
    let got = result.get("protocolVersion").and_then(Value::as_str);
    match got.and_then(|v| PROTOCOL_VERSIONS.iter().find(|p| **p == v)) {
        Some(v) => Ok(v),
        None => Err(format!(
            "unsupported MCP protocol version {}",
            got.map_or_else(|| "(none)".to_owned(), |v| format!("{v:?}"))
        )),
    }
}

/// One tool a server offers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolInfo {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// The ACP tool kind its annotations suggest.
    pub kind: &'static str,
}

/// The tools of one `tools/list` page and its `nextCursor`.
pub(crate) fn parse_tools_page(result: &Value) -> Result<(Vec<ToolInfo>, Option<String>), String> {
    let Some(items) = result.get("tools").and_then(Value::as_array) else {
        return Err("tools/list answered without a tools array".to_owned());
    };
    let tools = items
        .iter()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?.to_owned();
            let description = t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let input_schema = match t.get("inputSchema") {
                Some(s @ Value::Object(_)) => s.clone(),
                _ => json!({ "type": "object", "properties": {} }),
            };
            Some(ToolInfo {
                name,
                description,
                input_schema,
                kind: kind_of(t.get("annotations")),
            })
        })
        .collect();
    let cursor = result
        .get("nextCursor")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    Ok((tools, cursor))
}

/// `readOnlyHint` → `read`; `openWorldHint` without it → `fetch`; a destructive or
/// non-read-only hint → `edit`; none → `other`.
fn kind_of(annotations: Option<&Value>) -> &'static str {
    let hint = |k: &str| annotations.and_then(|a| a.get(k)).and_then(Value::as_bool);
    match (
        hint("readOnlyHint"),
        hint("openWorldHint"),
        hint("destructiveHint"),
    ) {
        (Some(true), _, _) => "read",
        (_, Some(true), _) => "fetch",
        (Some(false), _, _) | (_, _, Some(true)) => "edit",
        _ => "other",
    }
}

/// What a `tools/call` result gives the model: its text (text blocks, and a line for each
/// other block), its images, and whether the tool failed.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct CallResult {
    pub text: String,
    pub images: Vec<Image>,
    pub is_error: bool,
}

pub(crate) fn call_result(result: &Value) -> CallResult {
    let mut out = CallResult {
        is_error: result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        ..CallResult::default()
    };
    let mut parts: Vec<String> = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |k: &str| block.get(k).and_then(Value::as_str);
        match s("type") {
            Some("text") => parts.push(s("text").unwrap_or("").to_owned()),
            Some("image") => match (s("data"), s("mimeType")) {
                (Some(data), Some(mime)) => out.images.push(Image {
                    data: data.to_owned(),
                    mime_type: mime.to_owned(),
                }),
                _ => parts.push("[image without data]".to_owned()),
            },
            Some("resource") => {
                let r = block.get("resource");
                let uri = r
                    .and_then(|r| r.get("uri"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match r.and_then(|r| r.get("text")).and_then(Value::as_str) {
                    Some(text) => parts.push(format!("[resource {uri}]\n{text}")),
                    None => parts.push(format!("[binary resource {uri}]")),
                }
            }
            Some("resource_link") => {
                parts.push(format!("[resource link {}]", s("uri").unwrap_or("")))
            }
            Some(other) => parts.push(format!("[{other} content]")),
            None => {}
        }
    }
    if parts.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            parts.push(structured.to_string());
        }
    }
    out.text = parts.join("\n");
    out
}

/// `name` made fit for every provider's tool names (`^[a-zA-Z0-9_-]{1,64}$`): other characters
/// become `_`, and the whole is cut to 64 bytes.
pub(crate) fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out.truncate(64);
    out
}

/// The direct tool names `mcp__<server>__<tool>` for one server's tools, in order. A name
/// that collides with one already `taken` (or an earlier tool's) gets `_2`, `_3`, … (cut to
/// fit), so the same list always yields the same names.
pub(crate) fn direct_names(server: &str, tools: &[&str], taken: &mut Vec<String>) -> Vec<String> {
    tools
        .iter()
        .map(|tool| direct_names_raw(&format!("mcp__{server}__{tool}"), taken))
        .collect()
}

/// `base` sanitised and made unique against `taken` (which then holds it too).
pub(crate) fn direct_names_raw(base: &str, taken: &mut Vec<String>) -> String {
    let base = sanitize(base);
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        let suffix = format!("_{n}");
        let mut stem = base.clone();
        stem.truncate(64 - suffix.len());
        name = stem + &suffix;
        n += 1;
    }
    taken.push(name.clone());
    name
}

/// A server's state as the client sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Status {
    Connecting,
    Ready { tools: usize },
    Failed(String),
}

/// `[{name, status, tools?, error?}]` for `_meta[ns].mcp`.
pub(crate) fn status_payload(servers: &[(String, Status)]) -> Value {
    servers
        .iter()
        .map(|(name, status)| {
            let mut o = Map::new();
            o.insert("name".into(), json!(name));
            match status {
                Status::Connecting => {
                    o.insert("status".into(), json!("connecting"));
                }
                Status::Ready { tools } => {
                    o.insert("status".into(), json!("ready"));
                    o.insert("tools".into(), json!(tools));
                }
                Status::Failed(why) => {
                    o.insert("status".into(), json!("failed"));
                    o.insert("error".into(), json!(why));
                }
            }
            Value::Object(o)
        })
        .collect()
}

/// The tool error when a server cannot be used.
pub(crate) fn not_available(server: &str, why: &str) -> String {
    format!("MCP server {server} is not available: {why}")
}

/// The system prompt's section on the session's servers (our own words).
pub(crate) fn prompt_section(servers: &[(String, Status)]) -> String {
    let mut s = String::from(
        "# Generic MCP Connections\n\nThe client connected these MCP servers for this session:\n",
    );
    for (name, status) in servers {
        let state = match status {
            Status::Connecting => "still connecting".to_owned(),
            Status::Ready { tools } => format!("{tools} tool(s)"),
            Status::Failed(why) => format!("not available: {why}"),
        };
        s.push_str(&format!("- `{name}` ({state})\n"));
    }
    s.push_str(
        "\nCall their tools directly (`mcp__<server>__<tool>` when listed), or list a server's tools with `mcp_list_tools_<server>` and call one with `mcp_call_<server>` (`tool`, `arguments`). In the ipython kernel the same is `await mcp.list_tools(\"<server>\")` and `await mcp.call_tool(\"<server>\", \"<tool>\", {...})`.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation_accepts_only_versions_we_speak() {
        let cases = [
            (json!({"protocolVersion":"2025-11-25"}), Ok("2025-11-25")),
            (json!({"protocolVersion":"2025-06-18"}), Ok("2025-06-18")),
            (json!({"protocolVersion":"2024-11-05"}), Ok("2024-11-05")),
            (
                json!({"protocolVersion":"1999-01-01"}),
                Err("unsupported MCP protocol version \"1999-01-01\"".to_owned()),
            ),
            (
                json!({}),
                Err("unsupported MCP protocol version (none)".to_owned()),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(negotiated_version(&input), want, "{input}");
        }
        assert_eq!(initialize_params()["protocolVersion"], PROTOCOL_VERSIONS[0]);
    }

    #[test]
    fn tools_pages_and_kinds() {
        let page = json!({"tools":[
            {"name":"echo","description":"Echo","inputSchema":{"type":"object","properties":{"m":{"type":"string"}}}},
            {"name":"ro","annotations":{"readOnlyHint":true}},
            {"name":"web","annotations":{"openWorldHint":true}},
            {"name":"rm","annotations":{"readOnlyHint":false,"destructiveHint":true}},
            {"description":"nameless, skipped"}
        ],"nextCursor":"c2"});
        let (tools, cursor) = parse_tools_page(&page).unwrap();
        assert_eq!(cursor.as_deref(), Some("c2"));
        let kinds: Vec<_> = tools.iter().map(|t| (t.name.as_str(), t.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("echo", "other"),
                ("ro", "read"),
                ("web", "fetch"),
                ("rm", "edit")
            ]
        );
        assert_eq!(
            tools[1].input_schema,
            json!({"type":"object","properties":{}})
        );
        assert_eq!(
            parse_tools_page(&json!({"tools":[],"nextCursor":""}))
                .unwrap()
                .1,
            None
        );
        assert!(parse_tools_page(&json!({})).is_err());
    }

    #[test]
    fn call_results_map_text_images_and_errors() {
        let r = call_result(&json!({"content":[
            {"type":"text","text":"a"},
            {"type":"image","data":"AAAA","mimeType":"image/png"},
            {"type":"resource","resource":{"uri":"file:///x","text":"body"}},
            {"type":"audio","data":"..","mimeType":"audio/wav"}
        ],"isError":true}));
        assert_eq!(r.text, "a\n[resource file:///x]\nbody\n[audio content]");
        assert_eq!(
            r.images,
            vec![Image {
                data: "AAAA".into(),
                mime_type: "image/png".into()
            }]
        );
        assert!(r.is_error);
        let s = call_result(&json!({"content":[],"structuredContent":{"n":1}}));
        assert_eq!((s.text.as_str(), s.is_error), ("{\"n\":1}", false));
    }

    #[test]
    fn direct_names_are_sanitised_and_deterministic() {
        let mut taken = vec!["mcp_call_s".to_owned()];
        let long = "x".repeat(80);
        let names = direct_names(
            "s",
            &["get.weather", "get weather", "ok", &long],
            &mut taken,
        );
        assert_eq!(names[0], "mcp__s__get_weather");
        assert_eq!(names[1], "mcp__s__get_weather_2");
        assert_eq!(names[2], "mcp__s__ok");
        assert_eq!(names[3].len(), 64);
        for n in &names {
            assert!(n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
        }
        let mut again = vec!["mcp_call_s".to_owned()];
        assert_eq!(
            direct_names(
                "s",
                &["get.weather", "get weather", "ok", &long],
                &mut again
            ),
            names
        );
    }

    #[test]
    fn status_payload_shapes() {
        let got = status_payload(&[
            ("a".into(), Status::Connecting),
            ("b".into(), Status::Ready { tools: 3 }),
            ("c".into(), Status::Failed("boom".into())),
        ]);
        assert_eq!(
            got,
            json!([
                {"name":"a","status":"connecting"},
                {"name":"b","status":"ready","tools":3},
                {"name":"c","status":"failed","error":"boom"}
            ])
        );
        assert_eq!(
            not_available("x", "it died"),
            "MCP server x is not available: it died"
        );
    }
}
