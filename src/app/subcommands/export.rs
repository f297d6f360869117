//! `prime-agent session export <id|path> [out.html]`: a stored session as one self-contained
//! HTML page (inline CSS, images as data URIs, no script), read through `persist::load`.
//! `render` is pure; every text that came from the session goes through `escape`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::base::content::{escape_markup, Image};
use crate::persist::entry::{content_text, EntryKind, Record};
use crate::persist::{self, Loaded, Store};
use crate::provider::Message;

pub(super) fn export(store: &Store, session: &str, out: Option<&Path>) -> Result<String, String> {
    let path = store.resolve(session)?;
    let loaded =
        persist::load(&path).map_err(|e| format!("Cannot read session {}: {e}", path.display()))?;
    let out: PathBuf = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(format!("{}.html", loaded.header.id)));
    std::fs::write(&out, render(&loaded))
        .map_err(|e| format!("Cannot write {}: {e}", out.display()))?;
    Ok(format!(
        "Exported session {} to {}\n",
        loaded.header.id,
        out.display()
    ))
}

/// HTML-escapes text for element content and quoted attribute values alike.
pub(super) fn escape(text: &str) -> String {
    escape_markup(text, "&#39;")
}

/// An image as an `<img>` with a data URI, when its type and data are what they claim (a
/// hand-edited file cannot smuggle markup through either).
fn image_html(image: &Image) -> String {
    let mime_ok = image.mime_type.strip_prefix("image/").is_some_and(|sub| {
        !sub.is_empty()
            && sub
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    });
    let data_ok = image
        .data
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c));
    if mime_ok && data_ok {
        format!(
            "<img alt=\"image\" src=\"data:{};base64,{}\">",
            image.mime_type, image.data
        )
    } else {
        format!(
            "<p class=\"note\">[an image of type {} that is not shown]</p>",
            escape(&image.mime_type)
        )
    }
}

fn block(out: &mut String, class: &str, title: &str, body: &str) {
    let _ = writeln!(
        out,
        "<section class=\"{class}\"><h2>{}</h2>{body}</section>",
        escape(title)
    );
}

fn pre(text: &str) -> String {
    format!("<pre>{}</pre>", escape(text))
}

fn json_pre(v: &Value) -> String {
    pre(&serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()))
}

fn message_html(out: &mut String, m: &Message, details: Option<&Value>) {
    match m {
        Message::User { text, images } => {
            let mut body = pre(text);
            body.extend(images.iter().map(image_html));
            block(out, "user", "User", &body);
        }
        Message::Assistant(a) => {
            let mut body = String::new();
            if !a.thinking.is_empty() {
                let _ = write!(
                    body,
                    "<details class=\"thinking\"><summary>Thinking</summary>{}</details>",
                    pre(&a.thinking)
                );
            }
            if !a.text.is_empty() {
                body.push_str(&pre(&a.text));
            }
            for c in &a.tool_calls {
                let _ = write!(
                    body,
                    "<div class=\"call\"><h3>Tool call {} <code>{}</code></h3>{}</div>",
                    escape(&c.name),
                    escape(&c.id),
                    json_pre(&c.arguments)
                );
            }
            block(out, "assistant", "Assistant", &body);
        }
        Message::ToolResult(r) => {
            let mut body = format!(
                "<p class=\"note\">call <code>{}</code></p>",
                escape(&r.call_id)
            );
            body.push_str(&pre(&r.text));
            body.extend(r.images.iter().map(image_html));
            if let Some(d) = details.filter(|d| !d.is_null()) {
                let _ = write!(
                    body,
                    "<details><summary>Details</summary>{}</details>",
                    json_pre(d)
                );
            }
            let title = if r.is_error {
                format!("Tool result {} (error)", r.name)
            } else {
                format!("Tool result {}", r.name)
            };
            block(
                out,
                if r.is_error { "result error" } else { "result" },
                &title,
                &body,
            );
        }
    }
}

/// The whole page.
pub(crate) fn render(loaded: &Loaded) -> String {
    let h = &loaded.header;
    let title = loaded
        .title()
        .unwrap_or_else(|| format!("Session {}", h.id));
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<header><h1>{}</h1><p>Session <code>{}</code>, started {}, in <code>{}</code>{}</p></header>",
        escape(&title),
        escape(&h.id),
        escape(&h.timestamp),
        escape(&h.cwd),
        h.parent_session
            .as_deref()
            .map(|p| format!(", forked from <code>{}</code>", escape(p)))
            .unwrap_or_default()
    );
    for e in &loaded.entries {
        match &e.kind {
            EntryKind::Message(Record::Chat(m)) => message_html(&mut body, m, None),
            EntryKind::Message(Record::ToolResult { message, details }) => {
                message_html(&mut body, message, details.as_ref())
            }
            EntryKind::Message(Record::Bash(run)) => {
                let status = match (run.cancelled, run.exit_code) {
                    (true, _) => "cancelled".to_owned(),
                    (false, Some(code)) => format!("exit code {code}"),
                    (false, None) => "no exit code".to_owned(),
                };
                block(
                    &mut body,
                    "bash",
                    &format!("Shell command ({status})"),
                    &format!("{}{}", pre(&format!("$ {}", run.command)), pre(&run.output)),
                );
            }
            EntryKind::Message(Record::Other(v)) => {
                let role = v["role"].as_str().unwrap_or("message");
                let text = [&v["summary"], &v["content"]]
                    .into_iter()
                    .map(content_text)
                    .find(|t| !t.is_empty())
                    .unwrap_or_default();
                block(&mut body, "other", role, &pre(&text));
            }
            EntryKind::ModelChange { provider, model_id } => {
                let _ = writeln!(
                    body,
                    "<p class=\"note\">Model: {}/{}</p>",
                    escape(provider),
                    escape(model_id)
                );
            }
            EntryKind::ThinkingLevelChange(level) => {
                let _ = writeln!(
                    body,
                    "<p class=\"note\">Thinking level: {}</p>",
                    escape(level)
                );
            }
            EntryKind::SessionInfo { name } => {
                let _ = writeln!(body, "<p class=\"note\">Title: {}</p>", escape(name));
            }
            EntryKind::Other(v) => other_entry(&mut body, v),
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n",
        escape(&title)
    )
}

/// Entries beyond messages that say something to a reader: summaries and custom messages.
fn other_entry(body: &mut String, v: &Value) {
    match v["type"].as_str() {
        Some("compaction") => block(
            body,
            "other",
            "Compaction summary",
            &pre(v["summary"].as_str().unwrap_or_default()),
        ),
        Some("branch_summary") => block(
            body,
            "other",
            "Branch summary",
            &pre(v["summary"].as_str().unwrap_or_default()),
        ),
        Some("custom_message") if v["display"].as_bool() != Some(false) => {
            let kind = v["customType"].as_str().unwrap_or("custom message");
            let title = if kind == crate::persist::schedule::PROMPT_TYPE {
                "Scheduled prompt".to_owned()
            } else {
                kind.to_owned()
            };
            block(body, "user", &title, &pre(&content_text(&v["content"])));
        }
        _ => {}
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}\
header{border-bottom:1px solid #ccc;margin-bottom:1rem}\
section{border:1px solid #ddd;border-radius:6px;margin:.8rem 0;padding:.4rem .8rem}\
section h2{font-size:.85rem;margin:.2rem 0;color:#555;text-transform:uppercase}\
.user{background:#eef5ff}.assistant{background:#fff}.result{background:#f6f6f6}\
.error{background:#fff0f0}.bash{background:#f3f0ff}.other{background:#fffbe8}\
pre{white-space:pre-wrap;word-wrap:break-word;font-size:.9rem;margin:.3rem 0}\
.call h3{font-size:.9rem;margin:.4rem 0 0}.note{color:#666;font-size:.85rem}\
img{max-width:100%}details summary{cursor:pointer;color:#555}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_every_markup_character() {
        assert_eq!(
            escape("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
        let ok = Image {
            data: "AAAA".into(),
            mime_type: "image/png".into(),
        };
        assert_eq!(
            image_html(&ok),
            "<img alt=\"image\" src=\"data:image/png;base64,AAAA\">"
        );
        let bad = Image {
            data: "AA\"><script>".into(),
            mime_type: "image/png".into(),
        };
        assert!(!image_html(&bad).contains("<script"));
        let bad_type = Image {
            data: "AAAA".into(),
            mime_type: "text/html\"><b>".into(),
        };
        assert!(!image_html(&bad_type).contains("<b>"));
    }
}
