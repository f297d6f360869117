//! The code's shape, checked so it stays that way: the crate's top-level modules import each
//! other without a cycle (`scripts/module_graph.py`).

use std::io::Write;
use std::process::Command;

use crate::support::root;

#[test]
fn the_module_graph_has_no_cycle() {
    let out = match Command::new("python3")
        .arg(root().join("scripts/module_graph.py"))
        .arg(root().join("src"))
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the_module_graph_has_no_cycle: no python3 ({e})"
            );
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("no cycle"), "{text}");
}
