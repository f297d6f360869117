//! The end of a session's system prompt that its ACP client decides: the
//! `additionalDirectories` named to the model, then a `systemPrompt` `append` text, last so it
//! has the final word (the schema asks for system-level precedence). Pure; the builder
//! (`prompt.rs`) takes it as the last appended text (`PromptSpec::with_client`).

use std::path::PathBuf;

/// What goes after everything the agent builds: the directories section, then the client's
/// text (`None`: nothing).
pub(crate) fn tail(dirs: &[PathBuf], append: Option<&str>) -> Option<String> {
    let mut out = String::new();
    if !dirs.is_empty() {
        out.push_str("# Additional directories\n");
        out.push_str(
            "Besides the working directory, the user gave you these directories to work in; read and change files there with absolute paths:",
        );
        for dir in dirs {
            out.push_str(&format!("\n- {}", dir.display()));
        }
    }
    if let Some(text) = append.filter(|t| !t.trim().is_empty()) {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(text);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_in_order() {
        let dirs = [PathBuf::from("/data/a"), PathBuf::from("/b")];
        let cases: [(&[PathBuf], Option<&str>, Option<&str>); 4] = [
            (&[], None, None),
            (&[], Some("Be brief."), Some("Be brief.")),
            (&[], Some("  "), None),
            (
                &dirs,
                Some("Be brief."),
                Some("# Additional directories\nBesides the working directory, the user gave you these directories to work in; read and change files there with absolute paths:\n- /data/a\n- /b\n\nBe brief."),
            ),
        ];
        for (dirs, append, want) in cases {
            assert_eq!(tail(dirs, append).as_deref(), want);
        }
    }
}
