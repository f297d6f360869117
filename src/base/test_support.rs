//! Helpers for the crate's unit tests (compiled only for them).

use std::path::PathBuf;

/// A fresh directory of one test's own under the OS temp dir (`pa-<tag>-<pid>-<uuid>`), so
/// tests running at once never share files; the test removes it when it is done.
pub(crate) fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "pa-{tag}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The string at `key` of each element of the JSON array `list` (a test's view of a listing,
/// such as the kinds of permission options or the sources of jobs).
pub(crate) fn strs<'a>(list: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| item[key].as_str().unwrap())
        .collect()
}
