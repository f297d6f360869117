//! Skills (behaviour spec §5.8, §3.6) and prompt templates: Markdown files with YAML front
//! matter that the user keeps, found at start-up.
//!
//! A skill is a directory with a `SKILL.md` (`name:`, `description:`, optionally
//! `python_import:` for a Python package beside it that the kernel imports). The system prompt
//! lists them (`<available_skills>`), and each is a `skill:<name>` command whose prompt
//! carries the SKILL.md body. A template is `<name>.md` with a `description:`; `/<name> a b`
//! becomes its body with `$1`, `$2`, `$@`, `$ARGUMENTS` filled in.
//!
//! Loading reads only the filesystem and never fails start-up: a file that cannot be used is
//! skipped with a warning (logged to stderr).

use std::path::{Path, PathBuf};

/// A loaded skill.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Skill {
    pub name: String,
    pub description: String,
    /// The `SKILL.md` file.
    pub path: PathBuf,
    /// The SKILL.md text without its front matter.
    pub body: String,
    /// `python_import`: the module the kernel imports for this skill (`None`: instructions only).
    pub python_import: Option<String>,
}

impl Skill {
    /// The skill's directory (where a Python package beside SKILL.md lives).
    pub(crate) fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }
}

/// A loaded prompt template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template {
    pub name: String,
    pub description: String,
    pub path: PathBuf,
    pub body: String,
}

/// Everything the user's resources add to a session: skills and templates, in load order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Resources {
    pub skills: Vec<Skill>,
    pub templates: Vec<Template>,
    /// Settings `enableSkillCommands: false`: skills are in the system prompt only, not
    /// `skill:<name>` commands (a `/skill:<name>` prompt reaches the model as typed).
    pub no_skill_commands: bool,
}

/// Where resources come from (the start-up flags, resolved).
#[derive(Debug, Clone)]
pub(crate) struct Sources<'a> {
    pub cwd: &'a Path,
    pub agent_dir: &'a Path,
    /// `--skill` paths (a skill dir, a SKILL.md, or a dir of skill dirs), loaded always.
    pub skills: &'a [PathBuf],
    /// `-ns/--no-skills`: no discovery.
    pub no_skills: bool,
    /// `--prompt-template` files, loaded always.
    pub templates: &'a [PathBuf],
    /// `-np/--no-prompt-templates`: no discovery.
    pub no_templates: bool,
    /// Settings `skills` (resolved): like `--skill` paths, but off with `-ns`.
    pub settings_skills: &'a [PathBuf],
    /// Settings `prompts` (resolved): template files or directories of them, off with `-np`.
    pub settings_templates: &'a [PathBuf],
}

/// The skill discovery dirs, in order: the project's, then the agent dir's.
fn skill_dirs(cwd: &Path, agent_dir: &Path) -> [PathBuf; 3] {
    [
        cwd.join(".agents").join("skills"),
        cwd.join(".prime").join("agent").join("skills"),
        agent_dir.join("skills"),
    ]
}

/// Loads skills and templates; `warn` gets one line per skipped file.
pub(crate) fn load(src: &Sources<'_>, warn: &mut dyn FnMut(String)) -> Resources {
    let mut skill_files: Vec<PathBuf> = Vec::new();
    let from_settings = if src.no_skills {
        &[][..]
    } else {
        src.settings_skills
    };
    for path in src.skills.iter().chain(from_settings) {
        let path = src.cwd.join(path);
        if path.is_file() {
            skill_files.push(path);
        } else if path.join("SKILL.md").is_file() {
            skill_files.push(path.join("SKILL.md"));
        } else if path.is_dir() {
            let found = children_with(&path, "SKILL.md");
            if found.is_empty() {
                warn(format!(
                    "Skipping skill {}: no SKILL.md in it",
                    path.display()
                ));
            }
            skill_files.extend(found);
        } else {
            warn(format!("Skipping skill {}: no such file", path.display()));
        }
    }
    if !src.no_skills {
        for dir in skill_dirs(src.cwd, src.agent_dir) {
            skill_files.extend(children_with(&dir, "SKILL.md"));
        }
    }
    let mut skills: Vec<Skill> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for file in skill_files {
        let canon = std::fs::canonicalize(&file).unwrap_or(file.clone());
        if seen.contains(&canon) {
            continue;
        }
        seen.push(canon);
        match read_skill(&file) {
            Ok(skill) => {
                if let Some(first) = skills.iter().find(|s| s.name == skill.name) {
                    warn(format!(
                        "Skipping skill {}: the name \"{}\" is taken by {}",
                        file.display(),
                        skill.name,
                        first.path.display()
                    ));
                } else {
                    skills.push(skill);
                }
            }
            Err(why) => warn(format!("Skipping skill {}: {why}", file.display())),
        }
    }
    let mut template_files: Vec<PathBuf> = src.templates.iter().map(|p| src.cwd.join(p)).collect();
    if !src.no_templates {
        for path in src.settings_templates {
            if path.is_dir() {
                template_files.extend(markdown_files(path));
            } else if path.is_file() {
                template_files.push(path.clone());
            } else {
                warn(format!(
                    "Skipping prompt template {}: no such file",
                    path.display()
                ));
            }
        }
        for dir in [
            src.agent_dir.join("prompts"),
            src.cwd.join(".prime").join("agent").join("prompts"),
        ] {
            template_files.extend(markdown_files(&dir));
        }
    }
    let mut templates: Vec<Template> = Vec::new();
    for file in template_files {
        match read_template(&file) {
            Ok(t) => {
                // A later template of the same name (the project's) replaces an earlier one.
                templates.retain(|o| o.name != t.name);
                templates.push(t);
            }
            Err(why) => warn(format!(
                "Skipping prompt template {}: {why}",
                file.display()
            )),
        }
    }
    Resources {
        skills,
        templates,
        no_skill_commands: false,
    }
}

/// `<dir>/*/<name>` files, sorted by directory name.
fn children_with(dir: &Path, name: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path().join(name))
        .filter(|p| p.is_file())
        .collect();
    out.sort_unstable();
    out
}

/// `<dir>/*.md`, sorted.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "md"))
        .collect();
    out.sort_unstable();
    out
}

fn read_skill(file: &Path) -> Result<Skill, String> {
    let text = crate::base::untrusted::read_text(file, crate::base::untrusted::TEXT_CAP)
        .map_err(|e| e.to_string())?;
    let (fields, body) = front_matter(&text);
    let get = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let dir_name = file
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = get("name").unwrap_or(dir_name);
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(format!("invalid skill name {name:?}"));
    }
    let description = get("description").ok_or("it has no description in its front matter")?;
    let python_import = get("python_import").or_else(|| get("import"));
    if let Some(module) = &python_import {
        if !module
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
        {
            return Err(format!("python_import {module:?} is not a module name"));
        }
    }
    Ok(Skill {
        name,
        description,
        path: std::fs::canonicalize(file).unwrap_or(file.to_path_buf()),
        body: body.trim().to_owned(),
        python_import,
    })
}

fn read_template(file: &Path) -> Result<Template, String> {
    let text = crate::base::untrusted::read_text(file, crate::base::untrusted::TEXT_CAP)
        .map_err(|e| e.to_string())?;
    let (fields, body) = front_matter(&text);
    let name = file
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!("invalid template name {name:?}"));
    }
    let description = fields
        .iter()
        .find(|(k, _)| k == "description")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        // Without one, the first line of the body says what it is.
        .unwrap_or_else(|| {
            body.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .chars()
                .take(80)
                .collect()
        });
    Ok(Template {
        name,
        description,
        path: file.to_path_buf(),
        body: body.to_owned(),
    })
}

/// Splits YAML front matter (`---` … `---` at the top) into `key: value` pairs and the body.
/// A subset of YAML, enough for these files: plain and quoted scalars, and `|` / `>` blocks.
pub(crate) fn front_matter(text: &str) -> (Vec<(String, String)>, &str) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (Vec::new(), text);
    };
    let mut end = None;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            end = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let Some((yaml_end, body_start)) = end else {
        return (Vec::new(), text);
    };
    let yaml = &rest[..yaml_end];
    let body = &rest[body_start..];
    let mut fields: Vec<(String, String)> = Vec::new();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.starts_with([' ', '\t']) || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let value = if value.starts_with('|') || value.starts_with('>') {
            let folded = value.starts_with('>');
            let mut block = Vec::new();
            while i < lines.len() && (lines[i].starts_with([' ', '\t']) || lines[i].is_empty()) {
                block.push(lines[i].trim());
                i += 1;
            }
            block
                .join(if folded { " " } else { "\n" })
                .trim()
                .to_owned()
        } else {
            unquote(value)
        };
        fields.push((key.trim().to_owned(), value));
    }
    (fields, body)
}

fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            let inner = &v[1..v.len() - 1];
            return if q == '"' {
                inner.replace("\\\"", "\"").replace("\\n", "\n")
            } else {
                inner.replace("''", "'")
            };
        }
    }
    v.to_owned()
}

/// Escapes text for the `<available_skills>` block.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The system prompt's skills block (§5.8), empty without skills.
pub(crate) fn prompt_block(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "The following skills provide specialized instructions for specific tasks. \
         When a task matches a skill's description, read its SKILL.md at the location given \
         before you start, and follow it. Relative paths in a skill are relative to its directory.\n\n<available_skills>\n",
    );
    for s in skills {
        out.push_str("<skill>\n");
        out.push_str(&format!("<name>{}</name>\n", xml(&s.name)));
        match &s.python_import {
            Some(module) => {
                out.push_str("<type>python</type>\n");
                out.push_str(&format!("<python_import>{}</python_import>\n", xml(module)));
            }
            None => out.push_str("<type>instructions</type>\n"),
        }
        out.push_str(&format!(
            "<description>{}</description>\n",
            xml(&s.description)
        ));
        out.push_str(&format!(
            "<location>{}</location>\n",
            xml(&s.path.display().to_string())
        ));
        out.push_str("</skill>\n");
    }
    out.push_str("</available_skills>");
    out
}

impl Resources {
    /// The commands these resources add to `available_commands_update`: `skill:<name>` for
    /// each skill, then each template by name, skipping names the session's own commands use.
    pub(crate) fn commands(&self, taken: &[&str]) -> Vec<(String, String, Option<String>)> {
        let commands = if self.no_skill_commands {
            &[][..]
        } else {
            &self.skills[..]
        };
        let mut out: Vec<(String, String, Option<String>)> = commands
            .iter()
            .map(|s| {
                (
                    format!("skill:{}", s.name),
                    s.description.clone(),
                    Some("[arguments]".to_owned()),
                )
            })
            .collect();
        for t in &self.templates {
            if taken.contains(&t.name.as_str()) {
                continue;
            }
            let hint = uses_arguments(&t.body).then(|| "[arguments]".to_owned());
            out.push((t.name.clone(), t.description.clone(), hint));
        }
        out
    }

    /// The user message a `/skill:<name> args` or `/<template> args` prompt becomes, if
    /// `text` is one of them (`None`: not ours, the text goes on as it is).
    /// A template named like one of the session's own commands (`taken`) is never expanded.
    pub(crate) fn expand(&self, text: &str, taken: &[&str]) -> Option<String> {
        let rest = text.trim_start().strip_prefix('/')?;
        let (name, args) = match rest.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (rest.trim_end(), ""),
        };
        if let Some(skill) = name
            .strip_prefix("skill:")
            .filter(|_| !self.no_skill_commands)
        {
            let s = self.skills.iter().find(|s| s.name == skill)?;
            return Some(skill_message(s, args));
        }
        if taken.contains(&name) {
            return None;
        }
        let t = self.templates.iter().find(|t| t.name == name)?;
        Some(expand_template(&t.body, &split_args(args)))
    }
}

/// The one user message `/skill:<name> args` sends: the skill's instructions, then the args.
pub(crate) fn skill_message(s: &Skill, args: &str) -> String {
    let mut out = format!(
        "<skill name=\"{}\" location=\"{}\">\nReferences are relative to {}.\n\n{}\n</skill>",
        xml(&s.name),
        xml(&s.path.display().to_string()),
        s.dir().display(),
        s.body
    );
    if !args.is_empty() {
        out.push_str("\n\n");
        out.push_str(args);
    }
    out
}

fn uses_arguments(body: &str) -> bool {
    body.contains("$ARGUMENTS")
        || body.contains("$@")
        || body
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'$' && w[1].is_ascii_digit())
}

/// Splits template arguments like a shell would for plain words: whitespace separates, and
/// `"…"` or `'…'` keep spaces inside one argument.
pub(crate) fn split_args(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in args.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                any = true;
            }
            None if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            None => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A template's body with its arguments: `$1`…`$9` (and beyond: `$10`) positional, `$@` and
/// `$ARGUMENTS` all of them joined by spaces; a missing positional is empty.
pub(crate) fn expand_template(body: &str, args: &[String]) -> String {
    let all = args.join(" ");
    let mut out = String::with_capacity(body.len() + all.len());
    let mut rest = body;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(&all);
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('@') {
            out.push_str(&all);
            rest = tail;
        } else {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                let n: usize = after[..digits].parse().unwrap_or(0);
                if n > 0 {
                    if let Some(a) = args.get(n - 1) {
                        out.push_str(a);
                    }
                } else {
                    out.push_str("$0");
                }
                rest = &after[digits..];
            } else {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_fields_and_body() {
        let text = "---\nname: review\ndescription: \"Review a diff: carefully\"\nlong: >\n  one\n  two\n# comment\nlit: |\n  a\n  b\n---\n# Body\n\nText.\n";
        let (fields, body) = front_matter(text);
        let get = |k: &str| fields.iter().find(|(f, _)| f == k).unwrap().1.clone();
        assert_eq!(get("name"), "review");
        assert_eq!(get("description"), "Review a diff: carefully");
        assert_eq!(get("long"), "one two");
        assert_eq!(get("lit"), "a\nb");
        assert_eq!(body, "# Body\n\nText.\n");
        assert_eq!(front_matter("no front matter").1, "no front matter");
        // An unterminated block is body, not front matter.
        assert_eq!(front_matter("---\nname: x\n").0, vec![]);
    }

    #[test]
    fn template_arguments() {
        let args = split_args("one \"two words\" 'three'");
        assert_eq!(args, vec!["one", "two words", "three"]);
        let cases = [
            ("Fix $1 in $2.", "Fix one in two words."),
            ("All: $@", "All: one two words three"),
            ("All: $ARGUMENTS!", "All: one two words three!"),
            ("Missing: [$4] cost $ and $0", "Missing: [] cost $ and $0"),
        ];
        for (body, want) in cases {
            assert_eq!(expand_template(body, &args), want, "{body}");
        }
        assert_eq!(split_args("  "), Vec::<String>::new());
        assert_eq!(split_args("a \"\" b"), vec!["a", "", "b"]);
    }

    fn temp(name: &str) -> PathBuf {
        crate::base::test_support::temp_dir(&format!("skills-{name}"))
    }

    #[test]
    fn discovery_flags_and_skips() {
        let base = temp("load");
        let cwd = base.join("proj");
        let agent = base.join("agent");
        let write = |rel: &str, text: &str| {
            let p = base.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            "proj/.agents/skills/alpha/SKILL.md",
            "---\nname: alpha\ndescription: First skill\n---\nDo alpha.",
        );
        write(
            "proj/.prime/agent/skills/beta/SKILL.md",
            "---\ndescription: Second skill\npython_import: beta_pkg\n---\nDo beta.",
        );
        write(
            "agent/skills/nodesc/SKILL.md",
            "---\nname: nodesc\n---\nNo description.",
        );
        write(
            "explicit/SKILL.md",
            "---\nname: gamma\ndescription: Given on the command line\n---\nGamma body.",
        );
        write(
            "agent/prompts/fix.md",
            "---\ndescription: Fix an issue\n---\nFix issue $1 ($@).",
        );
        write(
            "proj/.prime/agent/prompts/plain.md",
            "Plain words first.\nMore.",
        );
        let explicit = vec![base.join("explicit")];
        let mut warnings = Vec::new();
        let res = load(
            &Sources {
                cwd: &cwd,
                agent_dir: &agent,
                skills: &explicit,
                no_skills: false,
                templates: &[],
                no_templates: false,
                settings_skills: &[],
                settings_templates: &[],
            },
            &mut |w| warnings.push(w),
        );
        let names: Vec<&str> = res.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["gamma", "alpha", "beta"]);
        assert_eq!(res.skills[2].python_import.as_deref(), Some("beta_pkg"));
        assert_eq!(res.skills[0].body, "Gamma body.");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("nodesc") && warnings[0].contains("no description"),
            "{warnings:?}"
        );
        let tnames: Vec<&str> = res.templates.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tnames, vec!["fix", "plain"]);
        assert_eq!(res.templates[1].description, "Plain words first.");
        // Commands: skills first, then templates; a template named like one of ours is skipped.
        let cmds = res.commands(&["plain"]);
        let cnames: Vec<&str> = cmds.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(
            cnames,
            vec!["skill:gamma", "skill:alpha", "skill:beta", "fix"]
        );
        assert_eq!(
            res.expand("/fix 42 now", &[]).as_deref(),
            Some("Fix issue 42 (42 now).")
        );
        let msg = res.expand("/skill:alpha please hurry", &[]).unwrap();
        assert!(
            msg.contains("Do alpha.") && msg.ends_with("\n\nplease hurry"),
            "{msg}"
        );
        assert!(!msg.contains("description: First skill"));
        assert_eq!(res.expand("/skill:nope x", &[]), None);
        assert_eq!(res.expand("/unknown", &[]), None);
        assert_eq!(res.expand("/plain", &["plain"]), None);
        assert_eq!(res.expand("not a command", &[]), None);
        // -ns and -np: discovery off, explicit ones still load.
        let res = load(
            &Sources {
                cwd: &cwd,
                agent_dir: &agent,
                skills: &explicit,
                no_skills: true,
                templates: &[base.join("agent/prompts/fix.md")],
                no_templates: true,
                settings_skills: &[base.join("more-skills")],
                settings_templates: &[base.join("more-prompts")],
            },
            &mut |_| {},
        );
        assert_eq!(res.skills.len(), 1);
        assert_eq!(res.templates.len(), 1);
        // Settings `skills` / `prompts`: a skill dir, a dir of skill dirs, a template dir or
        // file; off with -ns / -np (above); a missing path is a warning.
        write(
            "more-skills/delta/SKILL.md",
            "---\ndescription: From settings\n---\nDo delta.",
        );
        write(
            "more-prompts/ship.md",
            "---\ndescription: Ship it\n---\nShip $1.",
        );
        write("one.md", "Single file template.");
        let mut warnings = Vec::new();
        let mut more = load(
            &Sources {
                cwd: &cwd,
                agent_dir: &base.join("none"),
                skills: &[],
                no_skills: false,
                templates: &[],
                no_templates: false,
                settings_skills: &[base.join("more-skills"), base.join("gone")],
                settings_templates: &[base.join("more-prompts"), base.join("one.md")],
            },
            &mut |w| warnings.push(w),
        );
        let names: Vec<&str> = more.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["delta", "alpha", "beta"]);
        let tnames: Vec<&str> = more.templates.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tnames, ["ship", "one", "plain"]);
        assert_eq!(
            warnings,
            [format!(
                "Skipping skill {}: no such file",
                base.join("gone").display()
            )]
        );
        // enableSkillCommands false: no `skill:` commands, `/skill:` is not expanded.
        more.no_skill_commands = true;
        let cmds: Vec<String> = more.commands(&[]).into_iter().map(|c| c.0).collect();
        assert_eq!(cmds, ["ship", "one", "plain"]);
        assert_eq!(more.expand("/skill:delta go", &[]), None);
        let block = prompt_block(&res.skills);
        assert!(block.contains("<available_skills>\n<skill>\n<name>gamma</name>\n<type>instructions</type>\n<description>Given on the command line</description>\n<location>"));
        let _ = std::fs::remove_dir_all(&base);
    }
}
