//! `prime-agent model list [search]`: the models a session could switch to (the same
//! registry, credentials and filter as the ACP model menu), as a table.

use std::path::Path;
use std::sync::Arc;

use crate::provider::config::{Credentials, ModelDef, ProviderDef, Registry};
use crate::provider::menu::ModelMenu;

pub(super) fn list(agent_dir: &Path, pattern: Option<&str>) -> Result<String, String> {
    let registry = Registry::load(agent_dir)?;
    let credentials = Arc::new(Credentials::new(None, agent_dir.to_path_buf()));
    let menu = ModelMenu::new(registry, credentials);
    let usable = menu.usable_models();
    Ok(render(&usable, pattern, agent_dir))
}

/// Whether every word of `pattern` occurs in `text` as a subsequence (case-insensitive).
pub(super) fn fuzzy_match(pattern: &str, text: &str) -> bool {
    let text = text.to_lowercase();
    pattern.split_whitespace().all(|word| {
        let mut chars = text.chars();
        word.to_lowercase().chars().all(|c| chars.any(|t| t == c))
    })
}

/// `200000` → `200K`, `1048576` → `1M`, as upstream prints them; 0 is `unknown`.
fn tokens(n: u64) -> String {
    let scaled = |div: f64, unit: &str| {
        let v = n as f64 / div;
        if v.fract() == 0.0 {
            format!("{v}{unit}")
        } else {
            format!("{v:.1}{unit}")
        }
    };
    match n {
        0 => "unknown".to_owned(),
        n if n >= 1_000_000 => scaled(1_000_000.0, "M"),
        n if n >= 1_000 => scaled(1_000.0, "K"),
        n => n.to_string(),
    }
}

/// The table: a header, then one row per model (provider, model, context, max-out,
/// thinking, images), sorted by provider and id.
pub(super) fn render(
    models: &[(&ProviderDef, &ModelDef)],
    pattern: Option<&str>,
    agent_dir: &Path,
) -> String {
    if models.is_empty() {
        return format!(
            "No models available. Set a provider's key variable (for example OPENAI_API_KEY or GEMINI_API_KEY), add it to {}, or describe a server in {} (see docs/providers.md).\n",
            agent_dir.join("auth.json").display(),
            agent_dir.join("models.json").display()
        );
    }
    let mut rows: Vec<[String; 6]> = models
        .iter()
        .filter(|(p, m)| {
            pattern.is_none_or(|pat| fuzzy_match(pat, &format!("{} {}", p.name, m.id)))
        })
        .map(|(p, m)| {
            let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
            [
                p.name.clone(),
                m.id.clone(),
                tokens(m.context_window),
                tokens(m.max_tokens),
                yes(m.reasoning),
                yes(m.supports_images()),
            ]
        })
        .collect();
    if rows.is_empty() {
        return format!("No models matching \"{}\"\n", pattern.unwrap_or(""));
    }
    rows.sort_unstable();
    let header = [
        "provider", "model", "context", "max-out", "thinking", "images",
    ]
    .map(String::from);
    let mut widths = [0usize; 6];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzzy_words_and_token_counts() {
        for (pat, text, want) in [
            ("gpt", "openai gpt-5.4", true),
            ("oai 5", "openai gpt-5.4", true),
            ("GEMINI pro", "google gemini-2.5-pro", true),
            ("claude", "openai gpt-5.4", false),
            ("5o", "openai gpt-5.4", false),
            ("", "anything", true),
        ] {
            assert_eq!(fuzzy_match(pat, text), want, "{pat:?} in {text:?}");
        }
        assert_eq!(tokens(200_000), "200K");
        assert_eq!(tokens(1_048_576), "1.0M");
        assert_eq!(tokens(1_000_000), "1M");
        assert_eq!(tokens(131_072), "131.1K");
        assert_eq!(tokens(512), "512");
        assert_eq!(tokens(0), "unknown");
    }
}
