//! The session's MCP servers as native tools: per server `mcp_list_tools_<server>` and
//! `mcp_call_<server>` (as upstream), and, for a ready server with at most
//! `wire::DIRECT_TOOL_LIMIT` tools, each tool as `mcp__<server>__<tool>` with its own schema.
//! Names are fitted to `^[a-zA-Z0-9_-]{1,64}$`; collisions get `_2`, `_3`, … in listing order.

use std::sync::Arc;

use crate::base::json::json;
use serde_json::Value;

use super::wire::{self, Status, ToolInfo};
use super::McpHub;
use crate::base::content::ToolSpec;
use crate::tools::process::capped_text;
use crate::tools::{Tool, ToolContext, ToolDisplay, ToolOutput};

#[derive(Clone)]
enum Kind {
    List,
    Call,
    Direct(ToolInfo),
}

/// One native tool backed by a server of the hub.
pub(crate) struct McpTool {
    hub: Arc<McpHub>,
    name: String,
    server: String,
    kind: Kind,
}

/// Every native tool of `hub`, in a stable order: per server (the client's order) the two
/// generic tools, then its direct tools. `builtin` names are taken already.
fn table(hub: &Arc<McpHub>, builtin: &[String]) -> Vec<McpTool> {
    let mut taken: Vec<String> = builtin.to_vec();
    let mut out = Vec::new();
    for (server, status) in hub.statuses() {
        for (base, kind) in [
            (format!("mcp_list_tools_{server}"), Kind::List),
            (format!("mcp_call_{server}"), Kind::Call),
        ] {
            let name = wire::direct_names_raw(&base, &mut taken);
            out.push(McpTool {
                hub: hub.clone(),
                name,
                server: server.clone(),
                kind,
            });
        }
        if !matches!(status, Status::Ready { .. }) {
            continue;
        }
        let tools = hub.tools_of(&server);
        if tools.len() > wire::DIRECT_TOOL_LIMIT {
            continue;
        }
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let direct = wire::direct_names(&server, &names, &mut taken);
        for (name, info) in direct.into_iter().zip(tools) {
            out.push(McpTool {
                hub: hub.clone(),
                name,
                server: server.clone(),
                kind: Kind::Direct(info),
            });
        }
    }
    out
}

/// The specs the model gets for the hub's servers.
pub(crate) fn specs(hub: &Arc<McpHub>, builtin: &[String]) -> Vec<ToolSpec> {
    table(hub, builtin).iter().map(Tool::spec).collect()
}

/// The native tool called `name`, if the hub has one.
pub(crate) fn find(hub: &Arc<McpHub>, builtin: &[String], name: &str) -> Option<Box<dyn Tool>> {
    table(hub, builtin)
        .into_iter()
        .find(|t| t.name == name)
        .map(|t| Box::new(t) as Box<dyn Tool>)
}

/// How a call of the native MCP tool `name` was shown, read back from the name alone (for a
/// replayed call whose result stored no display, e.g. one a crash cut off): the title the live
/// tool gives, kind `other` (the annotations are the server's, not in the name). Names fitted
/// or suffixed when they were made keep that form in the title.
pub(crate) fn display_from_name(name: &str, args: &Value) -> Option<ToolDisplay> {
    let title = if let Some(server) = name.strip_prefix("mcp_list_tools_") {
        format!("{server}: list tools")
    } else if let Some(server) = name.strip_prefix("mcp_call_") {
        let tool = args.get("tool").and_then(Value::as_str).unwrap_or("?");
        format!("{server}: {tool}")
    } else {
        let (server, tool) = name.strip_prefix("mcp__")?.split_once("__")?;
        format!("{server}: {tool}")
    };
    Some(ToolDisplay {
        title,
        kind: "other",
    })
}

/// A tool list as the model reads it: name, description, input schema.
fn listing(server: &str, tools: &[ToolInfo]) -> String {
    if tools.is_empty() {
        return format!("MCP server {server} offers no tools.");
    }
    let mut s = format!("MCP server {server} offers {} tool(s):\n", tools.len());
    for t in tools {
        s.push_str(&format!(
            "\n## {}\n{}\nInput schema: {}\n",
            t.name,
            t.description.trim(),
            t.input_schema
        ));
    }
    s
}

fn output(result: Result<Value, String>) -> ToolOutput {
    match result {
        Ok(v) => {
            let r = wire::call_result(&v);
            ToolOutput {
                text: capped_text(&r.text),
                is_error: r.is_error,
                images: r.images,
                ..ToolOutput::default()
            }
        }
        Err(why) => ToolOutput::error(why),
    }
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        let server = &self.server;
        match &self.kind {
            Kind::List => ToolSpec {
                name: self.name.clone(),
                description: format!(
                    "List the tools of the MCP server `{server}` with their descriptions and input schemas."
                ),
                parameters: json!({ "type": "object", "properties": {} }),
            },
            Kind::Call => ToolSpec {
                name: self.name.clone(),
                description: format!(
                    "Call a tool of the MCP server `{server}` by its name with its arguments (see mcp_list_tools_{server})."
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "tool": { "type": "string", "description": "The tool's name on the server." },
                        "arguments": { "type": "object", "description": "The tool's arguments." }
                    },
                    "required": ["tool"]
                }),
            },
            Kind::Direct(info) => ToolSpec {
                name: self.name.clone(),
                description: format!(
                    "(MCP server `{server}`, tool `{}`) {}",
                    info.name,
                    info.description.trim()
                ),
                parameters: info.input_schema.clone(),
            },
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> ToolOutput {
        let hub = &self.hub;
        match &self.kind {
            Kind::List => match hub.usable(&self.server, ctx.abort) {
                super::Usable::Ready(_) => {
                    ToolOutput::ok(listing(&self.server, &hub.tools_of(&self.server)))
                }
                super::Usable::No(why) => {
                    ToolOutput::error(wire::not_available(&self.server, &why))
                }
            },
            Kind::Call => {
                let Some(tool) = args.get("tool").and_then(Value::as_str) else {
                    return ToolOutput::error(format!(
                        "mcp_call_{} needs `tool`: the name of one of the server's tools",
                        self.server
                    ));
                };
                let arguments = match args.get("arguments") {
                    None | Some(Value::Null) => json!({}),
                    Some(a) => a.clone(),
                };
                output(hub.call(&self.server, tool, arguments, ctx.abort))
            }
            Kind::Direct(info) => {
                output(hub.call(&self.server, &info.name, args.clone(), ctx.abort))
            }
        }
    }

    fn display(&self, args: &Value) -> Option<ToolDisplay> {
        let server = &self.server;
        Some(match &self.kind {
            Kind::List => ToolDisplay {
                title: format!("{server}: list tools"),
                kind: "other",
            },
            Kind::Call => {
                let tool = args.get("tool").and_then(Value::as_str).unwrap_or("?");
                let kind = self
                    .hub
                    .tools_of(server)
                    .iter()
                    .find(|t| t.name == tool)
                    .map_or("other", |t| t.kind);
                ToolDisplay {
                    title: format!("{server}: {tool}"),
                    kind,
                }
            }
            Kind::Direct(info) => ToolDisplay {
                title: format!("{server}: {}", info.name),
                kind: info.kind,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_read_back_from_native_tool_names() {
        let args = json!({"tool": "echo", "arguments": {}});
        let cases = [
            ("mcp__fx__echo", json!({}), Some("fx: echo")),
            (
                "mcp__my-srv__get_weather_2",
                json!({}),
                Some("my-srv: get_weather_2"),
            ),
            ("mcp_call_fx", args, Some("fx: echo")),
            ("mcp_call_fx", json!({}), Some("fx: ?")),
            ("mcp_list_tools_fx", json!({}), Some("fx: list tools")),
            ("mcp__nodelimiter", json!({}), None),
            ("bash", json!({}), None),
            ("ipython", json!({}), None),
        ];
        for (name, args, want) in cases {
            let got = display_from_name(name, &args);
            assert_eq!(got.as_ref().map(|d| d.title.as_str()), want, "{name}");
            assert!(got.is_none_or(|d| d.kind == "other"), "{name}");
        }
    }
}
