//! The end of a session's system prompt that its ACP client decides: the
//! `additionalDirectories` named to the model and a `systemPrompt` `append` text, last so it
//! has the final word (the schema asks for system-level precedence). Pure; the builder
//! (`prompt.rs`) knows nothing of it, `setup::session_system_prompt` calls it after the build.

use std::path::PathBuf;

/// `prompt` with the additional directories section and the client's text appended.
pub(crate) fn finish(mut prompt: String, dirs: &[PathBuf], append: Option<&str>) -> String {
    if !dirs.is_empty() {
        prompt.push_str("\n\n# Additional directories\n");
        prompt.push_str(
            "Besides the working directory, the user gave you these directories to work in; read and change files there with absolute paths:\n",
        );
        for dir in dirs {
            prompt.push_str(&format!("- {}\n", dir.display()));
        }
    }
    if let Some(text) = append.filter(|t| !t.trim().is_empty()) {
        prompt.push_str("\n\n");
        prompt.push_str(text);
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_in_order() {
        let dirs = [PathBuf::from("/data/a"), PathBuf::from("/b")];
        let cases: [(&[PathBuf], Option<&str>, &str); 4] = [
            (&[], None, "BASE"),
            (&[], Some("Be brief."), "BASE\n\nBe brief."),
            (&[], Some("  "), "BASE"),
            (
                &dirs,
                Some("Be brief."),
                "BASE\n\n# Additional directories\nBesides the working directory, the user gave you these directories to work in; read and change files there with absolute paths:\n- /data/a\n- /b\n\n\nBe brief.",
            ),
        ];
        for (dirs, append, want) in cases {
            assert_eq!(finish("BASE".to_owned(), dirs, append), want);
        }
    }
}
