//! Permission modes and the approval policy, as pure data and functions: which calls a mode
//! lets run, refuses or asks about; what an `allow_always` / `reject_always` answer covers
//! (its scope) and how it is remembered; the ACP shapes (`modes`, the `mode` config option,
//! the four permission options) and the texts the model reads when a call does not run.
//!
//! No IO and no channels: `client_host.rs` asks the client and keeps the remembered rules.
//! See ACP `session/request_permission` and `session/set_mode`.

use std::path::{Component, Path, PathBuf};

use crate::base::json::json;
use serde_json::Value;

use crate::base::sandbox::Sandbox;
use crate::tools::resolve_path;

/// The config option id (and category) of the permission mode.
pub(crate) const MODE: &str = "mode";

/// How much a session's tools may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    /// Every tool runs without asking (upstream's only behaviour, the default).
    #[default]
    FullAccess,
    /// Writes, edits, commands and MCP calls ask the client first.
    Ask,
    /// Writes, edits, commands and MCP calls are refused; reading and planning still work.
    ReadOnly,
}

/// Every mode: id, name, description, in the order clients list them.
const MODES: [(Mode, &str, &str, &str); 3] = [
    (
        Mode::FullAccess,
        "full-access",
        "Full access",
        "Tools read, write and run commands without asking.",
    ),
    (
        Mode::Ask,
        "ask",
        "Ask",
        "Writes, edits, commands and MCP calls ask for approval first.",
    ),
    (
        Mode::ReadOnly,
        "read-only",
        "Read only",
        "Tools may read files; writes, edits, commands and MCP calls are refused.",
    ),
];

impl Mode {
    pub(crate) fn parse(id: &str) -> Option<Mode> {
        MODES.iter().find(|m| m.1 == id).map(|m| m.0)
    }

    pub(crate) fn id(self) -> &'static str {
        MODES.iter().find(|m| m.0 == self).map_or("", |m| m.1)
    }
}

/// The `--permission-mode` error text.
pub(crate) fn unknown_mode(id: &str) -> String {
    format!("Unknown permission mode \"{id}\". Valid modes: full-access, ask, read-only")
}

/// `modes` of a session response (`SessionModeState`).
pub(crate) fn modes_state(current: Mode) -> Value {
    let available: Vec<Value> = MODES
        .iter()
        .map(|(_, id, name, description)| json!({ "id": id, "name": name, "description": description }))
        .collect();
    json!({ "currentModeId": current.id(), "availableModes": available })
}

/// The `mode` select of `configOptions`, kept in step with `modes`.
pub(crate) fn mode_option(current: Mode) -> Value {
    let options: Vec<Value> = MODES
        .iter()
        .map(|(_, id, name, description)| json!({ "value": id, "name": name, "description": description }))
        .collect();
    json!({
        "id": MODE,
        "name": "Permissions",
        "category": "mode",
        "type": "select",
        "currentValue": current.id(),
        "options": options,
    })
}

/// The `-32602` reason for a mode id that is not offered.
pub(crate) fn mode_not_available(id: &str) -> String {
    format!("Permission mode is not available: {id}")
}

/// What an "always" answer covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Bash commands that start with this word.
    Command(String),
    /// Edits and writes of this absolute path.
    Path(String),
    /// Edits and writes anywhere under this directory: one the client gave the session
    /// (`additionalDirectories`), which it granted as a whole.
    Dir(String),
    /// Every call of this tool (Python cells, an MCP tool).
    Tool(String),
}

impl Scope {
    /// How the scope reads in option names and texts.
    fn describe(&self) -> String {
        match self {
            Scope::Command(word) => format!("`{word}` commands"),
            Scope::Path(path) => format!("changes to {path}"),
            Scope::Dir(dir) => format!("changes in {dir}"),
            Scope::Tool(name) => format!("{name} calls"),
        }
    }
}

/// Whether a call needs approval, and under which scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Guarded {
    pub scope: Scope,
    /// A bash command with more than one command in it (`;`, `&&`, `|`, `$(…)`, redirections,
    /// several lines): a remembered `allow_always` for its first word does not cover it, since
    /// the words after the first could run anything.
    pub compound: bool,
}

/// `None`: the call only reads (or plans) and runs in every mode. `roots`: the session's
/// additional directories; a change inside one is scoped to the directory.
pub(crate) fn guard(name: &str, args: &Value, cwd: &Path, roots: &[PathBuf]) -> Option<Guarded> {
    let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or("");
    let scope = match name {
        "read" | "todo" => return None,
        "bash" => {
            let command = text("command");
            let word = command.split_whitespace().next().unwrap_or("").to_owned();
            return Some(Guarded {
                scope: Scope::Command(word),
                compound: is_compound(command),
            });
        }
        "edit" | "write" => path_scope(&resolve_path(cwd, text("path")), roots),
        // Listing a server's tools only reads.
        n if n.starts_with("mcp_list_tools_") => return None,
        // The generic MCP proxy: the server's tool it calls is the scope.
        n if n.starts_with("mcp_call_") => Scope::Tool(format!("{n} {}", text("tool"))),
        // Python cells, MCP tools and any other tool: the tool is the scope.
        other => Scope::Tool(other.to_owned()),
    };
    Some(Guarded {
        scope,
        compound: false,
    })
}

/// A change of `path`: scoped to the root it lies in, else to the path. A path with `..` is
/// never inside a root (it could climb out of it).
fn path_scope(path: &Path, roots: &[PathBuf]) -> Scope {
    let plain = !path.components().any(|c| c == Component::ParentDir);
    match roots.iter().find(|r| plain && path.starts_with(r)) {
        Some(root) => Scope::Dir(root.display().to_string()),
        None => Scope::Path(path.display().to_string()),
    }
}

fn is_compound(command: &str) -> bool {
    let command = command.trim();
    command.contains(['\n', ';', '&', '|', '<', '>', '`']) || command.contains("$(")
}

/// The answers remembered for a session.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Rules {
    allowed: Vec<Scope>,
    rejected: Vec<Scope>,
}

/// What to do with a call before it runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    Run,
    /// Refused without asking; the text goes to the model as the failed call's result.
    Refuse(String),
    Ask(Scope),
}

/// Whether the call stays inside the session's sandbox (`contained`): a command or a cell
/// (the OS holds them to it, whatever they try), or a write or edit of a path it may write.
/// Every other call (MCP, a write outside) is not.
pub(crate) fn contained(sandbox: &Sandbox, tool: &str, args: &Value, cwd: &Path) -> bool {
    if !sandbox.is_on() {
        return false;
    }
    match tool {
        "bash" | "ipython" => true,
        "write" | "edit" => {
            let path = args.get("path").and_then(Value::as_str).unwrap_or("");
            sandbox.may_write(cwd, &resolve_path(cwd, path)).is_ok()
        }
        _ => false,
    }
}

/// The mode's and the remembered answers' verdict on a call (`guarded` from `guard`).
/// `contained`: the call cannot leave the session's sandbox (`contained`); then `read-only`
/// and `ask` let it run (a rejection remembered for it still holds).
pub(crate) fn decide(
    mode: Mode,
    rules: &Rules,
    tool: &str,
    guarded: Option<&Guarded>,
    contained: bool,
) -> Decision {
    let Some(g) = guarded else {
        return Decision::Run;
    };
    match mode {
        Mode::FullAccess => Decision::Run,
        Mode::ReadOnly if contained => Decision::Run,
        Mode::ReadOnly => Decision::Refuse(format!(
            "{tool} did not run: the session is in read-only mode, where tools may read files but not change them or run commands. Ask the user to switch the permission mode if this is needed."
        )),
        Mode::Ask if rules.rejected.contains(&g.scope) => Decision::Refuse(format!(
            "{tool} did not run: the user rejected {} for the rest of this session.",
            g.scope.describe()
        )),
        Mode::Ask if contained => Decision::Run,
        Mode::Ask if !g.compound && rules.allowed.contains(&g.scope) => Decision::Run,
        Mode::Ask => Decision::Ask(g.scope.clone()),
    }
}

/// The option ids of a permission request (also its kinds).
pub(crate) const ALLOW_ONCE: &str = "allow_once";
pub(crate) const ALLOW_ALWAYS: &str = "allow_always";
pub(crate) const REJECT_ONCE: &str = "reject_once";
pub(crate) const REJECT_ALWAYS: &str = "reject_always";

/// The four options offered for a call of `scope`.
pub(crate) fn options(scope: &Scope) -> Value {
    let what = scope.describe();
    json!([
        { "optionId": ALLOW_ONCE, "name": "Allow once", "kind": ALLOW_ONCE },
        { "optionId": ALLOW_ALWAYS, "name": format!("Always allow {what}"), "kind": ALLOW_ALWAYS },
        { "optionId": REJECT_ONCE, "name": "Reject", "kind": REJECT_ONCE },
        { "optionId": REJECT_ALWAYS, "name": format!("Always reject {what}"), "kind": REJECT_ALWAYS },
    ])
}

/// The client's answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
    /// `{outcome: "cancelled"}`: the client cancelled the turn's requests.
    Cancelled,
    /// Not an answer we offered; the text says what came.
    Invalid(String),
}

/// Reads a `RequestPermissionResponse`.
pub(crate) fn answer(result: &Value) -> Answer {
    let outcome = &result["outcome"];
    match outcome["outcome"].as_str() {
        Some("cancelled") => Answer::Cancelled,
        Some("selected") => match outcome["optionId"].as_str() {
            Some(ALLOW_ONCE) => Answer::AllowOnce,
            Some(ALLOW_ALWAYS) => Answer::AllowAlways,
            Some(REJECT_ONCE) => Answer::RejectOnce,
            Some(REJECT_ALWAYS) => Answer::RejectAlways,
            other => Answer::Invalid(format!("unknown optionId {}", json!(other))),
        },
        _ => Answer::Invalid(format!("no outcome in {result}")),
    }
}

/// Applies `answer` for `scope` to the rules; `Err` is the failed call's text for the model.
pub(crate) fn apply(
    rules: &mut Rules,
    tool: &str,
    scope: &Scope,
    answer: &Answer,
) -> Result<(), String> {
    match answer {
        Answer::AllowOnce => Ok(()),
        Answer::AllowAlways => {
            if !rules.allowed.contains(scope) {
                rules.allowed.push(scope.clone());
            }
            Ok(())
        }
        Answer::RejectOnce => Err(format!(
            "{tool} did not run: the user rejected this call. Do not retry it unchanged; ask the user or try another way."
        )),
        Answer::RejectAlways => {
            if !rules.rejected.contains(scope) {
                rules.rejected.push(scope.clone());
            }
            Err(format!(
                "{tool} did not run: the user rejected {} for the rest of this session.",
                scope.describe()
            ))
        }
        Answer::Cancelled => Err(CANCELLED.to_owned()),
        Answer::Invalid(why) => Err(format!(
            "{tool} did not run: the client's answer to the permission request was not understood ({why})."
        )),
    }
}

/// The result of a call whose approval was cancelled with its turn.
pub(crate) const CANCELLED: &str = "Cancelled by the user before it ran.";

#[cfg(test)]
mod tests {
    use super::*;

    fn g(name: &str, args: Value) -> Option<Guarded> {
        guard(name, &args, Path::new("/w"), &[])
    }

    #[test]
    fn changes_in_an_additional_directory_are_scoped_to_it() {
        let roots = [PathBuf::from("/data/extra")];
        let scope = |path: &str| {
            guard("write", &json!({ "path": path }), Path::new("/w"), &roots).map(|g| g.scope)
        };
        let dir = Some(Scope::Dir("/data/extra".into()));
        let cases = [
            ("/data/extra/a.txt", dir.clone()),
            ("/data/extra/deep/b.txt", dir),
            (
                "/data/extra/../etc/passwd",
                Some(Scope::Path("/data/extra/../etc/passwd".into())),
            ),
            ("/data/extrax/c", Some(Scope::Path("/data/extrax/c".into()))),
            ("src/x.rs", Some(Scope::Path("/w/src/x.rs".into()))),
        ];
        for (path, want) in cases {
            assert_eq!(scope(path), want, "{path}");
        }
        assert_eq!(
            Scope::Dir("/data/extra".into()).describe(),
            "changes in /data/extra"
        );
    }

    #[test]
    fn a_call_contained_by_the_sandbox_runs_in_read_only_and_ask() {
        let sb = Sandbox {
            mode: crate::base::sandbox::Mode::WorkspaceWrite,
            ..Sandbox::default()
        };
        let cwd = std::env::temp_dir();
        let cmd = json!({"command": "rm -rf /"});
        assert!(contained(&sb, "bash", &cmd, &cwd));
        assert!(contained(&sb, "ipython", &json!({"code": "1"}), &cwd));
        assert!(contained(&sb, "write", &json!({"path": "a.txt"}), &cwd));
        assert!(!contained(&sb, "write", &json!({"path": "/etc/x"}), &cwd));
        assert!(!contained(&sb, "mcp_call_web", &json!({}), &cwd));
        assert!(!contained(&Sandbox::default(), "bash", &cmd, &cwd));
        let g = guard("bash", &cmd, &cwd, &[]);
        let mut rules = Rules::default();
        for mode in [Mode::ReadOnly, Mode::Ask, Mode::FullAccess] {
            assert_eq!(
                decide(mode, &rules, "bash", g.as_ref(), true),
                Decision::Run
            );
        }
        assert!(matches!(
            decide(Mode::Ask, &rules, "bash", g.as_ref(), false),
            Decision::Ask(_)
        ));
        let scope = g.as_ref().unwrap().scope.clone();
        let _ = apply(&mut rules, "bash", &scope, &Answer::RejectAlways);
        assert!(matches!(
            decide(Mode::Ask, &rules, "bash", g.as_ref(), true),
            Decision::Refuse(_)
        ));
    }

    #[test]
    fn what_each_tool_is_guarded_by() {
        let cmd = |w: &str, compound| {
            Some(Guarded {
                scope: Scope::Command(w.into()),
                compound,
            })
        };
        let cases = [
            ("read", json!({"path": "a"}), None),
            ("todo", json!({"todos": []}), None),
            ("bash", json!({"command": "git status"}), cmd("git", false)),
            ("bash", json!({"command": "  ls -la  "}), cmd("ls", false)),
            (
                "bash",
                json!({"command": "git log | head"}),
                cmd("git", true),
            ),
            (
                "bash",
                json!({"command": "git st; rm -rf /"}),
                cmd("git", true),
            ),
            ("bash", json!({"command": "echo $(id)"}), cmd("echo", true)),
            ("bash", json!({"command": "echo a > f"}), cmd("echo", true)),
            ("bash", json!({"command": "a\nb"}), cmd("a", true)),
            (
                "edit",
                json!({"path": "src/x.rs"}),
                Some(Guarded {
                    scope: Scope::Path("/w/src/x.rs".into()),
                    compound: false,
                }),
            ),
            (
                "write",
                json!({"path": "/abs"}),
                Some(Guarded {
                    scope: Scope::Path("/abs".into()),
                    compound: false,
                }),
            ),
            (
                "ipython",
                json!({"code": "1"}),
                Some(Guarded {
                    scope: Scope::Tool("ipython".into()),
                    compound: false,
                }),
            ),
            ("mcp_list_tools_web", json!({}), None),
            (
                "mcp_call_web",
                json!({"tool": "echo", "arguments": {}}),
                Some(Guarded {
                    scope: Scope::Tool("mcp_call_web echo".into()),
                    compound: false,
                }),
            ),
            (
                "mcp_docs_search",
                json!({}),
                Some(Guarded {
                    scope: Scope::Tool("mcp_docs_search".into()),
                    compound: false,
                }),
            ),
        ];
        for (name, args, want) in cases {
            assert_eq!(g(name, args.clone()), want, "{name} {args}");
        }
    }

    #[test]
    fn decisions_by_mode_and_remembered_answers() {
        let git = g("bash", json!({"command": "git status"}));
        let git_pipe = g("bash", json!({"command": "git log | sh"}));
        let mut rules = Rules::default();
        assert_eq!(
            decide(Mode::FullAccess, &rules, "bash", git.as_ref(), false),
            Decision::Run
        );
        assert_eq!(
            decide(Mode::Ask, &rules, "read", None, false),
            Decision::Run
        );
        assert_eq!(
            decide(Mode::ReadOnly, &rules, "read", None, false),
            Decision::Run
        );
        let Decision::Refuse(text) = decide(Mode::ReadOnly, &rules, "bash", git.as_ref(), false)
        else {
            panic!()
        };
        assert!(
            text.starts_with("bash did not run: the session is in read-only mode"),
            "{text}"
        );
        let scope = Scope::Command("git".into());
        assert_eq!(
            decide(Mode::Ask, &rules, "bash", git.as_ref(), false),
            Decision::Ask(scope.clone())
        );
        assert_eq!(
            apply(&mut rules, "bash", &scope, &Answer::AllowOnce),
            Ok(())
        );
        assert_eq!(
            decide(Mode::Ask, &rules, "bash", git.as_ref(), false),
            Decision::Ask(scope.clone())
        );
        assert_eq!(
            apply(&mut rules, "bash", &scope, &Answer::AllowAlways),
            Ok(())
        );
        assert_eq!(
            decide(Mode::Ask, &rules, "bash", git.as_ref(), false),
            Decision::Run
        );
        // The first word does not vouch for what follows it.
        assert_eq!(
            decide(Mode::Ask, &rules, "bash", git_pipe.as_ref(), false),
            Decision::Ask(scope.clone())
        );
        // Other commands are still asked about; a rejection for always refuses without asking.
        let rm = g("bash", json!({"command": "rm x"}));
        let rm_scope = Scope::Command("rm".into());
        assert_eq!(
            decide(Mode::Ask, &rules, "bash", rm.as_ref(), false),
            Decision::Ask(rm_scope.clone())
        );
        let err = apply(&mut rules, "bash", &rm_scope, &Answer::RejectAlways).unwrap_err();
        assert_eq!(
            err,
            "bash did not run: the user rejected `rm` commands for the rest of this session."
        );
        assert_eq!(
            decide(Mode::Ask, &rules, "bash", rm.as_ref(), false),
            Decision::Refuse(err)
        );
        let err = apply(&mut rules, "bash", &rm_scope, &Answer::RejectOnce).unwrap_err();
        assert!(
            err.starts_with("bash did not run: the user rejected this call."),
            "{err}"
        );
        assert_eq!(
            apply(&mut rules, "bash", &rm_scope, &Answer::Cancelled),
            Err(CANCELLED.into())
        );
    }

    #[test]
    fn answers_and_shapes() {
        let sel = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
        assert_eq!(answer(&sel("allow_once")), Answer::AllowOnce);
        assert_eq!(answer(&sel("allow_always")), Answer::AllowAlways);
        assert_eq!(answer(&sel("reject_once")), Answer::RejectOnce);
        assert_eq!(answer(&sel("reject_always")), Answer::RejectAlways);
        assert_eq!(
            answer(&json!({"outcome": {"outcome": "cancelled"}})),
            Answer::Cancelled
        );
        assert_eq!(
            answer(&sel("maybe")),
            Answer::Invalid("unknown optionId \"maybe\"".into())
        );
        assert!(matches!(answer(&json!(null)), Answer::Invalid(_)));
        let opts = options(&Scope::Path("/w/a".into()));
        assert_eq!(
            crate::base::test_support::strs(&opts, "kind"),
            [ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE, REJECT_ALWAYS]
        );
        assert_eq!(opts[1]["name"], "Always allow changes to /w/a");
        assert_eq!(Mode::parse("read-only"), Some(Mode::ReadOnly));
        assert_eq!(Mode::parse("yolo"), None);
        assert_eq!(modes_state(Mode::Ask)["currentModeId"], "ask");
        assert_eq!(mode_option(Mode::FullAccess)["currentValue"], "full-access");
        assert_eq!(
            mode_option(Mode::FullAccess)["options"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
}
