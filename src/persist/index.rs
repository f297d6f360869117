//! What `session/list`, `--continue` and `--resume <prefix>` need of each session file (id,
//! cwd, title, last update) without parsing whole files: a small index, validated against each
//! file's size and modification time, built from header + tail reads.
//!
//! Why both: header + tail reads make a file's first summary cost two small reads however big
//! the file is (the header names id and cwd; this binary writes the title right after it, and
//! the last line carries the last update); the index (`<sessions dir>/.prime-agent-index.json`,
//! a cache any process may rewrite, never trusted beyond size + mtime) makes every later
//! listing one `stat` per file, and a file that grew is read only from where the index stopped
//! (the file is append-only). Only a file whose title is in neither window (written by older
//! versions or other tools, the title after a long first message) is scanned in between,
//! once, line by line without parsing lines that cannot be a title.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::base::json::json;
use serde_json::Value;

use super::entry;

/// How much of a file's head and tail a first summary reads.
const WINDOW: u64 = 16 * 1024;
/// The index file, in the sessions directory.
pub(crate) const INDEX_FILE: &str = ".prime-agent-index.json";
const VERSION: u64 = 1;

/// One row of `session/list`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    pub id: String,
    pub cwd: String,
    pub title: Option<String>,
    pub updated_at: String,
    pub path: PathBuf,
}

/// What the index keeps of one file.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    len: u64,
    mtime_ns: i128,
    /// Bytes of complete lines summarised (a file that grew is read from here on).
    scanned: u64,
    id: String,
    cwd: String,
    title: Option<String>,
    /// The newest entry's timestamp (`None`: only the header so far).
    updated_at: Option<String>,
    header_timestamp: String,
}

impl Row {
    fn summary(&self, path: PathBuf) -> Summary {
        Summary {
            id: self.id.clone(),
            cwd: self.cwd.clone(),
            title: self.title.clone(),
            updated_at: self
                .updated_at
                .clone()
                .unwrap_or_else(|| self.header_timestamp.clone()),
            path,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "len": self.len, "mtimeNs": self.mtime_ns.to_string(), "scanned": self.scanned,
            "id": self.id, "cwd": self.cwd, "title": self.title, "updatedAt": self.updated_at,
            "headerTimestamp": self.header_timestamp,
        })
    }

    fn from_json(v: &Value) -> Option<Row> {
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        Some(Row {
            len: v["len"].as_u64()?,
            mtime_ns: v["mtimeNs"].as_str()?.parse().ok()?,
            scanned: v["scanned"].as_u64()?,
            id: s("id")?,
            cwd: s("cwd")?,
            title: s("title"),
            updated_at: s("updatedAt"),
            header_timestamp: s("headerTimestamp").unwrap_or_default(),
        })
    }
}

fn mtime_ns(meta: &fs::Metadata) -> i128 {
    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec())
}

/// Every readable session in `dir`, newest first, from the index where it is current; the
/// index is rewritten when anything changed.
pub(crate) fn list(dir: &Path) -> Vec<Summary> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let index_path = dir.join(INDEX_FILE);
    let mut index = read_index(&index_path);
    let mut changed = false;
    // A set: `retain` below asks it once per indexed file (a `Vec` made listing quadratic).
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if name.ends_with(".tmp") {
            remove_if_stale(&path);
            continue;
        }
        if !name.ends_with(".jsonl") {
            continue;
        }
        // Regular files only: opening a FIFO named `x.jsonl` would block the listing.
        let Some(meta) = fs::metadata(&path).ok().filter(fs::Metadata::is_file) else {
            continue;
        };
        seen.insert(name.clone());
        let cached = index.get(&name);
        if let Some(row) = cached.filter(|r| r.len == meta.len() && r.mtime_ns == mtime_ns(&meta)) {
            out.push(row.summary(path));
            continue;
        }
        match summarise(&path, &meta, cached) {
            Ok(row) => {
                out.push(row.summary(path));
                index.insert(name, row);
            }
            Err(why) => {
                log::warn!("skipping session file {}: {why}", path.display());
                index.remove(&name);
            }
        }
        changed = true;
    }
    let before = index.len();
    index.retain(|name, _| seen.contains(name));
    if changed || index.len() != before {
        write_index(&index_path, &index);
    }
    out.sort_unstable_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
    out
}

/// How old a `*.tmp` file (`persist::write_atomic`'s) must be before a listing removes it:
/// a write still in progress, in this process or another, is never that old.
const STALE_TMP: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes what a write killed mid-way left behind (a fork's partial copy can be large).
fn remove_if_stale(path: &Path) {
    let age = fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok());
    if age.is_some_and(|age| age > STALE_TMP) && fs::remove_file(path).is_ok() {
        log::info!(
            "removed {}, left by a write that did not finish",
            path.display()
        );
    }
}

fn read_index(path: &Path) -> HashMap<String, Row> {
    let Ok(text) = fs::read_to_string(path) else {
        return HashMap::new();
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return HashMap::new();
    };
    if v["version"].as_u64() != Some(VERSION) {
        return HashMap::new();
    }
    v["files"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(name, row)| Some((name.clone(), Row::from_json(row)?)))
        .collect()
}

/// Best effort (it is a cache): a unique temporary file renamed over the index, so a reader
/// never sees half of one and two writers only lose each other's news.
fn write_index(path: &Path, index: &HashMap<String, Row>) {
    let files: serde_json::Map<String, Value> = index
        .iter()
        .map(|(name, row)| (name.clone(), row.to_json()))
        .collect();
    let body = json!({ "version": VERSION, "files": files });
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = serde_json::to_vec(&body)
        .map_err(std::io::Error::other)
        .and_then(|bytes| fs::write(&tmp, bytes))
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        log::debug!("cannot write the session index {}: {e}", path.display());
    }
}

/// A file's summary: extended from `cached` when the file only grew, else from its head and
/// tail.
fn summarise(path: &Path, meta: &fs::Metadata, cached: Option<&Row>) -> Result<Row, String> {
    let mut file = File::open(path).map_err(|e| e.to_string())?;
    let len = meta.len();
    let grown = cached.filter(|r| r.scanned <= len && r.len <= len);
    let mut row = match grown {
        Some(r) => {
            let mut row = r.clone();
            let found = scan(&mut file, r.scanned, len)?;
            row.scanned = found.end;
            row.title = found.title.or(row.title);
            row.updated_at = found.last_timestamp.or(row.updated_at);
            row
        }
        None => first_summary(&mut file, len)?,
    };
    row.len = len;
    row.mtime_ns = mtime_ns(meta);
    Ok(row)
}

/// What a read of some complete lines found.
#[derive(Debug, Default)]
struct Found {
    /// The newest title among them.
    title: Option<String>,
    /// The timestamp of the last of them.
    last_timestamp: Option<String>,
    /// The offset after the last complete line.
    end: u64,
}

/// Whether a line may be a `session_info` entry (our lines end with `"type":"session_info"}`,
/// upstream's start with it): only such lines are parsed.
fn maybe_title(line: &[u8]) -> bool {
    let near = |part: &[u8]| part.windows(12).any(|w| w == b"session_info");
    near(&line[..line.len().min(48)]) || near(&line[line.len().saturating_sub(48)..])
}

/// The title a line names, if it is a `session_info` entry.
fn title_of(line: &[u8]) -> Option<Option<String>> {
    let v: Value = serde_json::from_slice(line).ok()?;
    match entry::parse_entry(&v).ok()?.kind {
        entry::EntryKind::SessionInfo { name } => Some((!name.is_empty()).then_some(name)),
        _ => None,
    }
}

/// The top-level `timestamp` of an entry line (a full tokenisation, no tree).
fn timestamp_of(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Stamp {
        timestamp: Option<String>,
    }
    serde_json::from_slice::<Stamp>(line).ok()?.timestamp
}

/// Notes one complete line (without its newline).
fn visit(found: &mut Found, line: &[u8]) {
    if maybe_title(line) {
        if let Some(t) = title_of(line) {
            found.title = t.or(found.title.take());
        }
    }
}

/// Reads the complete lines in `[from, to)` (`from` is a line start), line by line.
fn scan(file: &mut File, from: u64, to: u64) -> Result<Found, String> {
    file.seek(SeekFrom::Start(from))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::with_capacity(64 * 1024, file.take(to - from));
    let mut found = Found {
        end: from,
        ..Found::default()
    };
    let mut line = Vec::new();
    let mut last_line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| e.to_string())?;
        if n == 0 || line.last() != Some(&b'\n') {
            break; // The end, or a line still being written (or torn): not yet counted.
        }
        found.end += n as u64;
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        visit(&mut found, text);
        std::mem::swap(&mut line, &mut last_line);
    }
    found.last_timestamp = timestamp_of(last_line.trim_ascii());
    Ok(found)
}

/// The complete lines of `bytes` (which start at a line start).
fn scan_bytes(bytes: &[u8]) -> Found {
    let mut found = Found::default();
    let mut last: &[u8] = &[];
    let mut at = 0;
    while let Some(i) = bytes[at..].iter().position(|b| *b == b'\n') {
        let text = bytes[at..at + i].trim_ascii();
        at += i + 1;
        if !text.is_empty() {
            visit(&mut found, text);
            last = text;
        }
    }
    found.end = at as u64;
    found.last_timestamp = timestamp_of(last);
    found
}

/// The top-level `timestamp` near the end of an entry line whose start was not read: this
/// binary writes keys in order, so a line ends `"timestamp":"…","type":"…"}`.
fn timestamp_at_end(line_end: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"timestamp\":\"";
    let window = &line_end[line_end.len().saturating_sub(160)..];
    let at = window.windows(KEY.len()).rposition(|w| w == KEY)? + KEY.len();
    let len = window[at..].iter().position(|b| *b == b'"')?;
    let stamp = std::str::from_utf8(&window[at..at + len]).ok()?;
    crate::base::time::parse_iso_millis(stamp).map(|_| stamp.to_owned())
}

/// A file never summarised: the header and what follows it in the head window, the last
/// complete lines in the tail window, and the middle only when neither window names a title.
fn first_summary(file: &mut File, len: u64) -> Result<Row, String> {
    let mut head = Vec::new();
    file.by_ref()
        .take(WINDOW)
        .read_to_end(&mut head)
        .map_err(|e| e.to_string())?;
    if !head.contains(&b'\n') {
        // A header longer than the window (never ours): read the whole first line.
        file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        head.clear();
        BufReader::new(&mut *file)
            .read_until(b'\n', &mut head)
            .map_err(|e| e.to_string())?;
    }
    let header_end = head
        .iter()
        .position(|b| *b == b'\n')
        .map_or(head.len(), |i| i + 1);
    let header: Value = serde_json::from_slice(head[..header_end].trim_ascii())
        .map_err(|e| format!("the session header does not parse: {e}"))?;
    let header = entry::parse_header(&header)?;
    let mut in_head = scan_bytes(&head[header_end..]);
    in_head.end += header_end as u64;
    // The tail window, from the first line that starts in it.
    let tail_start = len.saturating_sub(WINDOW).max(in_head.end);
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(tail_start))
        .map_err(|e| e.to_string())?;
    file.by_ref()
        .take(len - tail_start)
        .read_to_end(&mut tail)
        .map_err(|e| e.to_string())?;
    let skip = if tail_start == in_head.end {
        0
    } else {
        // `tail_start - 1` may be the newline that ends the line before.
        let mut before = [0u8; 1];
        file.seek(SeekFrom::Start(tail_start - 1))
            .and_then(|_| file.read_exact(&mut before))
            .map_err(|e| e.to_string())?;
        match before[0] {
            b'\n' => 0,
            _ => tail
                .iter()
                .position(|b| *b == b'\n')
                .map_or(tail.len(), |i| i + 1),
        }
    };
    let in_tail = scan_bytes(&tail[skip..]);
    let tail_from = tail_start + skip as u64;
    let mut title = in_tail.title.clone().or(in_head.title.clone());
    if title.is_none() && tail_from > in_head.end {
        title = scan(file, in_head.end, tail_from)?.title;
    }
    let last_complete = tail.iter().rposition(|b| *b == b'\n');
    // Everything up to the last newline is summarised; a line after it is not complete yet.
    let scanned = last_complete.map_or(in_head.end, |i| in_head.end.max(tail_start + i as u64 + 1));
    let updated_at = match (&in_tail.last_timestamp, last_complete) {
        (Some(t), _) => Some(t.clone()),
        // The last line began before the tail window: its stamp is at its end (else when
        // the file last changed).
        (None, Some(end)) if tail_from > in_head.end || skip > 0 => timestamp_at_end(&tail[..end])
            .or_else(|| {
                let meta = file.metadata().ok()?;
                let ms = u64::try_from(mtime_ns(&meta) / 1_000_000).ok()?;
                Some(crate::base::time::iso_of_millis(ms))
            }),
        _ => in_head.last_timestamp.clone(),
    };
    Ok(Row {
        len,
        mtime_ns: 0,
        scanned,
        id: header.id,
        cwd: header.cwd,
        title,
        updated_at,
        header_timestamp: header.timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The line of entry `body` with its `id`, `parentId` and `timestamp`.
    fn line(body: &Value, id: &str, parent: Value, timestamp: &str) -> String {
        let mut v = body.clone();
        v["id"] = json!(id);
        v["parentId"] = parent;
        v["timestamp"] = json!(timestamp);
        format!("{v}\n")
    }

    /// A session file: the header, then `entries` chained by `parentId`, written on January
    /// `day`, 2026, a second apart.
    fn file(id: &str, cwd: &str, day: u32, entries: &[Value]) -> String {
        let mut out = format!(
            "{}\n",
            json!({"type": "session", "version": 3, "id": id, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": cwd})
        );
        let mut parent = Value::Null;
        for (i, body) in entries.iter().enumerate() {
            let eid = format!("{i:08x}");
            let ts = format!("2026-01-{day:02}T00:00:{:02}.000Z", i + 1);
            out.push_str(&line(body, &eid, parent, &ts));
            parent = json!(eid);
        }
        out
    }

    fn big(kb: usize) -> Value {
        let text = "x".repeat(kb * 1024);
        json!({"type": "message", "message": {"role": "user", "content": text, "timestamp": 1}})
    }

    fn title(name: &str) -> Value {
        json!({"type": "session_info", "name": name})
    }

    #[test]
    fn a_listing_removes_only_stale_temporary_files() {
        let dir = crate::base::test_support::temp_dir("index-tmp");
        let fresh = dir.join("a.jsonl.tmp");
        let stale = dir.join("b.jsonl.tmp");
        fs::write(&fresh, "partial").unwrap();
        fs::write(&stale, "partial").unwrap();
        let old = std::time::SystemTime::now() - 2 * STALE_TMP;
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert!(list(&dir).is_empty());
        assert!(fresh.exists(), "a write in progress is left alone");
        assert!(!stale.exists(), "a write killed an hour ago is removed");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn summaries_from_head_and_tail_agree_with_a_full_load_and_the_index_follows_growth() {
        let dir = crate::base::test_support::temp_dir("index");
        let cases: Vec<(&str, String)> = vec![
            // Ours: the title right after the header, a long conversation after it.
            (
                "ours",
                file("ours", "/a", 1, &[title("Ours"), big(100), big(100)]),
            ),
            // Older layout: the title after a long first message, in the middle.
            (
                "legacy",
                file("legacy", "/b", 2, &[big(100), title("Legacy"), big(100)]),
            ),
            // Renamed at the end; a torn last line is not an entry.
            (
                "renamed",
                file("renamed", "/a", 3, &[title("Old"), big(40), title("New")])
                    + r#"{"type":"message","id":"dead"#,
            ),
            // Only a header.
            ("bare", file("bare", "/c", 0, &[])),
            // The last line longer than the tail window.
            (
                "long-last",
                file("long-last", "/c", 4, &[title("Long"), big(40)]),
            ),
        ];
        for (id, text) in &cases {
            fs::write(dir.join(format!("{id}.jsonl")), text).unwrap();
        }
        fs::write(dir.join("broken.jsonl"), "not json\n").unwrap();
        let rows = list(&dir);
        for (id, _) in &cases {
            let row = rows.iter().find(|r| r.id == *id).expect(id);
            let loaded = super::super::load(&row.path).unwrap();
            assert_eq!(row.title, loaded.title(), "{id}");
            assert_eq!(row.cwd, loaded.header.cwd, "{id}");
            assert_eq!(row.updated_at, loaded.updated_at(), "{id}");
        }
        assert_eq!(rows.len(), cases.len(), "the broken file is skipped");
        assert_eq!(rows[0].id, "long-last", "newest first");
        // The index answers the next listing; a file that grows is read from where it stopped.
        assert!(dir.join(INDEX_FILE).is_file());
        assert_eq!(list(&dir), rows);
        let path = dir.join("ours.jsonl");
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        let later = line(
            &title("Renamed later"),
            "feedf00d",
            json!("00000002"),
            "2026-02-01T00:00:00.000Z",
        );
        f.write_all(later.as_bytes()).unwrap();
        drop(f);
        let rows = list(&dir);
        assert_eq!(rows[0].id, "ours");
        assert_eq!(rows[0].title.as_deref(), Some("Renamed later"));
        assert_eq!(rows[0].updated_at, "2026-02-01T00:00:00.000Z");
        // A file rewritten shorter is summarised afresh; a deleted one leaves the index.
        fs::write(&path, file("ours", "/z", 0, &[])).unwrap();
        fs::remove_file(dir.join("bare.jsonl")).unwrap();
        let rows = list(&dir);
        let ours = rows.iter().find(|r| r.id == "ours").unwrap();
        assert_eq!((ours.cwd.as_str(), ours.title.as_deref()), ("/z", None));
        assert!(rows.iter().all(|r| r.id != "bare"));
        let index = fs::read_to_string(dir.join(INDEX_FILE)).unwrap();
        assert!(!index.contains("bare.jsonl"), "{index}");
        // A corrupt index is only a cache.
        fs::write(dir.join(INDEX_FILE), "{").unwrap();
        assert_eq!(list(&dir), rows);
        fs::remove_dir_all(&dir).unwrap();
    }
}
