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
