//! The host's half of kernel namespace snapshots (behaviour spec §4.1), pure: the names of the
//! files, the environment that switches snapshots on, the restore report a kernel sends with
//! `ready`, and the hidden message that tells the model what came back.
//!
//! The work itself happens in the kernel (`state.py`): pickling needs the live objects, and
//! doing it between cells in the kernel's own process keeps it off the host's threads. The
//! host only says where (`STATE_DIR_ENV`) and whether to load first (`RESTORE_ENV`).

use serde_json::Value;

/// The snapshot and its manifest, in the session's artifacts directory.
pub(crate) const PICKLE_FILE: &str = "kernel-state.dill";
/// The snapshot's name before it took the spec's (still restored when there is no `.dill`).
pub(crate) const LEGACY_PICKLE_FILE: &str = "kernel-state.pkl";
pub(crate) const MANIFEST_FILE: &str = "kernel-state.json";

/// The directory the driver saves the namespace into (unset: no snapshots).
pub(crate) const STATE_DIR_ENV: &str = "PRIME_AGENT_KERNEL_STATE_DIR";
/// `1`: load the snapshot before `ready`.
pub(crate) const RESTORE_ENV: &str = "PRIME_AGENT_KERNEL_STATE_RESTORE";

/// The custom type of the hidden message (the session file's `custom_message`).
pub(crate) const NOTICE_TYPE: &str = "ipython_state_restored";

/// At most this many names are listed per group in the notice; the rest are counted.
const LISTED: usize = 60;

/// What a kernel start loaded from the snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RestoreReport {
    pub restored: Vec<String>,
    /// Those of `restored` that came back by running their `def`/`class` statement again.
    pub redefined: Vec<String>,
    /// Saved names that did not load, with why.
    pub failed: Vec<(String, String)>,
    /// Names the snapshot could not save, with why.
    pub skipped: Vec<(String, String)>,
    /// The snapshot could not be read at all.
    pub error: Option<String>,
}

impl RestoreReport {
    /// The `restore` value of a `ready` frame; `None` when there was nothing to restore.
    pub(crate) fn from_json(v: &Value) -> Option<RestoreReport> {
        if !v.is_object() {
            return None;
        }
        let names = |k: &str| -> Vec<String> {
            v[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let reasons = |k: &str| -> Vec<(String, String)> {
            v[k].as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| {
                            let name = e["name"].as_str()?;
                            let why = e["reason"].as_str().unwrap_or("unknown");
                            Some((name.to_owned(), why.to_owned()))
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        Some(RestoreReport {
            restored: names("restored"),
            redefined: names("redefined"),
            failed: reasons("failed"),
            skipped: reasons("skipped"),
            error: v["error"].as_str().map(str::to_owned),
        })
    }

    /// Every name that did not come back, with why (failed loads first).
    pub(crate) fn missing(&self) -> impl Iterator<Item = &(String, String)> {
        self.failed.iter().chain(&self.skipped)
    }
}

fn list<T>(items: &[T], show: impl Fn(&T) -> String, sep: &str) -> String {
    let mut text: Vec<String> = items.iter().take(LISTED).map(show).collect();
    if items.len() > LISTED {
        text.push(format!("and {} more", items.len() - LISTED));
    }
    text.join(sep)
}

/// The hidden message for the model, or `None` when the snapshot held nothing to mention.
pub(crate) fn notice(report: &RestoreReport) -> Option<String> {
    let body = if let Some(error) = &report.error {
        format!("The IPython state saved for this session could not be read ({error}), so the kernel started with an empty namespace; variables from earlier cells are gone.")
    } else {
        let missing: Vec<&(String, String)> = report.missing().collect();
        if report.restored.is_empty() && missing.is_empty() {
            return None;
        }
        let mut parts =
            vec!["The IPython kernel of this resumed session was started again and loaded the namespace saved from earlier cells.".to_owned()];
        if !report.restored.is_empty() {
            parts.push(format!(
                "These names are available again: {}.",
                list(&report.restored, String::clone, ", ")
            ));
        }
        if !report.redefined.is_empty() {
            parts.push(format!(
                "Of these, {} came back by running their def or class statement again (only that statement, not the rest of its cell).",
                list(&report.redefined, String::clone, ", ")
            ));
        }
        if !missing.is_empty() {
            parts.push(format!(
                "These could not be restored: {}. Define them again before using them.",
                list(&missing, |(n, why)| format!("{n} ({why})"), "; ")
            ));
        }
        parts.join(" ")
    };
    Some(format!(
        "<ipython_state_restored>\n{body}\n</ipython_state_restored>"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;

    #[test]
    fn reports_parse_from_the_ready_frame() {
        let v = json!({
            "restored": ["x", "y"],
            "failed": [{"name": "df", "reason": "ModuleNotFoundError: No module named 'pandas'"}],
            "skipped": [{"name": "f", "reason": "defined in a cell"}, {"bad": 1}],
        });
        assert_eq!(
            RestoreReport::from_json(&v),
            Some(RestoreReport {
                restored: vec!["x".into(), "y".into()],
                redefined: vec![],
                failed: vec![(
                    "df".into(),
                    "ModuleNotFoundError: No module named 'pandas'".into()
                )],
                skipped: vec![("f".into(), "defined in a cell".into())],
                error: None,
            })
        );
        assert_eq!(RestoreReport::from_json(&Value::Null), None);
        assert_eq!(
            RestoreReport::from_json(&json!({"error": "UnpicklingError: truncated"}))
                .and_then(|r| r.error),
            Some("UnpicklingError: truncated".into())
        );
    }

    #[test]
    fn the_notice_lists_what_came_back_and_what_did_not() {
        let report = |restored: &[&str], missing: &[(&str, &str)]| RestoreReport {
            restored: restored.iter().map(|s| (*s).to_owned()).collect(),
            skipped: missing
                .iter()
                .map(|(n, w)| ((*n).to_owned(), (*w).to_owned()))
                .collect(),
            ..Default::default()
        };
        let cases = [
            (report(&[], &[]), None),
            (
                report(&["a", "b"], &[]),
                Some("<ipython_state_restored>\nThe IPython kernel of this resumed session was started again and loaded the namespace saved from earlier cells. These names are available again: a, b.\n</ipython_state_restored>".to_owned()),
            ),
            (
                report(&["a"], &[("f", "defined in a cell"), ("json", "a module; import it again")]),
                Some("<ipython_state_restored>\nThe IPython kernel of this resumed session was started again and loaded the namespace saved from earlier cells. These names are available again: a. These could not be restored: f (defined in a cell); json (a module; import it again). Define them again before using them.\n</ipython_state_restored>".to_owned()),
            ),
            (
                RestoreReport {
                    restored: vec!["Point".into(), "f".into(), "x".into()],
                    redefined: vec!["Point".into(), "f".into()],
                    ..Default::default()
                },
                Some("<ipython_state_restored>\nThe IPython kernel of this resumed session was started again and loaded the namespace saved from earlier cells. These names are available again: Point, f, x. Of these, Point, f came back by running their def or class statement again (only that statement, not the rest of its cell).\n</ipython_state_restored>".to_owned()),
            ),
            (
                report(&[], &[("f", "why")]),
                Some("<ipython_state_restored>\nThe IPython kernel of this resumed session was started again and loaded the namespace saved from earlier cells. These could not be restored: f (why). Define them again before using them.\n</ipython_state_restored>".to_owned()),
            ),
            (
                RestoreReport {
                    error: Some("UnpicklingError: truncated".into()),
                    ..Default::default()
                },
                Some("<ipython_state_restored>\nThe IPython state saved for this session could not be read (UnpicklingError: truncated), so the kernel started with an empty namespace; variables from earlier cells are gone.\n</ipython_state_restored>".to_owned()),
            ),
        ];
        for (r, want) in cases {
            assert_eq!(notice(&r), want, "{r:?}");
        }
    }

    #[test]
    fn long_lists_are_cut_and_counted() {
        let names: Vec<String> = (0..LISTED + 5).map(|i| format!("v{i}")).collect();
        let text = notice(&RestoreReport {
            restored: names,
            ..Default::default()
        })
        .unwrap();
        assert!(text.contains(", v59, and 5 more."), "{text}");
        assert!(!text.contains("v60"), "{text}");
    }
}

/// `state.py` itself, driven by a small Python program: what a snapshot saves and skips (and
/// why), the limits, giving way to a waiting cell, and loading back.
#[cfg(test)]
mod python_tests {
    use serde_json::Value;

    fn run_python(program: &str) -> Value {
        let dir = std::env::temp_dir().join(format!("pa-kstate-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("state.py"), super::super::STATE_PY).unwrap();
        let python = crate::kernel::find_python().expect("the kernel tests need python3");
        let out = std::process::Command::new(python)
            .arg("-c")
            .arg(program)
            .current_dir(&dir)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    const PRELUDE: &str = r#"
import json, os, sys, types
sys.path.insert(0, os.getcwd())
import state
state._DILL[:] = [None]  # the source path, even where dill is installed (see the dill test)
main = types.ModuleType("__main__")
sys.modules["__main__"] = main
ns = main.__dict__
baseline = frozenset(ns) | {"rlm"}
ns["rlm"] = object()
"#;

    #[test]
    fn the_manifest_lists_what_was_saved_and_why_the_rest_was_not() {
        let out = run_python(&format!(
            "{PRELUDE}
defs = state.Definitions()
def cell(code):
    found = defs.before(ns, code)
    exec(code, ns)
    defs.after(ns, found)
cell('''import json
x = 41
text = 'mentions __main__ but is data'
f = lambda: 1
def g(): return x + 1
class C: pass
c = C()
nested = {{'k': [C]}}
fh = open(__import__('os').devnull)
big = b'a' * (16 * 1024 * 1024 + 1)
_private = 1
def make():
    def inner(): pass
    return inner
inner = make()
lambdas = [lambda: 2]
''')
cell('''def g(): return x + 2
''')
m = state.snapshot(ns, baseline, 'out/artifacts', lambda: False, defs)
main2 = types.ModuleType('__main__')
sys.modules['__main__'] = main2
back = main2.__dict__
r = state.restore(back, frozenset(), 'out/artifacts')
print(json.dumps({{'manifest': m, 'restore': r, 'back': sorted(k for k in back if not k.startswith('_')), 'x': back.get('x'),
    'g': back['g'](), 'f': back['f'](), 'c': type(back['c']) is back['C'], 'nested': back['nested']['k'][0] is back['C'],
    'modes': [oct(os.stat(p).st_mode & 0o777) for p in ('out', 'out/artifacts', 'out/artifacts/kernel-state.dill', 'out/artifacts/kernel-state.json')],
    'on_disk': json.load(open('out/artifacts/kernel-state.json')) == m}}))
"
        ));
        let m = &out["manifest"];
        let rows = |k: &str| -> Vec<(String, String)> {
            m[k].as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let detail = e.get("reason").cloned().unwrap_or(e["type"].clone());
                    (
                        e["name"].as_str().unwrap().to_owned(),
                        detail.as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        };
        let no_source = "defined in a cell, not by a top-level def or class statement, and dill is not installed";
        let want_skipped: Vec<(String, String)> = [
            ("big", "larger than 16 MiB pickled"),
            ("fh", "TypeError: cannot pickle '_io.TextIOWrapper' object"),
            ("inner", no_source),
        ]
        .into_iter()
        .map(|(n, r)| (n.to_owned(), r.to_owned()))
        .chain([("lambdas".to_owned(), rows("skipped")[3].1.clone())])
        .collect();
        assert_eq!(rows("skipped"), want_skipped, "{m}");
        assert!(want_skipped[3]
            .1
            .starts_with("PicklingError: Can't pickle <function <lambda>"));
        let how: Vec<(String, String)> = m["saved"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["how"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let want_how: Vec<(String, String)> = [
            ("C", "source"),
            ("c", "pickle"),
            ("f", "source"),
            ("g", "source"),
            ("json", "import"),
            ("make", "source"),
            ("nested", "pickle"),
            ("text", "pickle"),
            ("x", "pickle"),
        ]
        .into_iter()
        .map(|(n, h)| (n.to_owned(), h.to_owned()))
        .collect();
        assert_eq!(how, want_how, "{m}");
        let bytes: u64 = m["saved"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(m["totalBytes"].as_u64(), Some(bytes));
        assert_eq!(m["format"], 2);
        assert_eq!(m["serializer"], "pickle");
        assert_eq!(m["file"], "kernel-state.dill");
        assert_eq!(m["limits"]["variableBytes"], 16 * 1024 * 1024);
        assert_eq!(m["limits"]["totalBytes"], 256 * 1024 * 1024);
        assert!(m["savedAt"].as_str().unwrap().ends_with('Z'));
        assert_eq!(out["on_disk"], true);
        assert_eq!(
            out["modes"],
            crate::base::json::json!(["0o700", "0o700", "0o600", "0o600"])
        );
        let names: Vec<&str> = want_how.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(out["back"], crate::base::json::json!(names));
        assert_eq!(out["x"], 41);
        // The newest `def g` came back, running against the restored `x`; the instance and
        // the container refer to the restored class itself.
        assert_eq!(out["g"], 43);
        assert_eq!(out["f"], 1);
        assert_eq!(out["c"], true);
        assert_eq!(out["nested"], true);
        let report = super::RestoreReport::from_json(&out["restore"]).unwrap();
        assert_eq!(report.restored, names);
        assert_eq!(report.redefined, ["C", "f", "g", "make"]);
        assert_eq!(report.skipped, want_skipped);
        assert!(report.failed.is_empty());
    }

    /// With dill in the kernel's Python, cell definitions are pickled by value, closures and
    /// lambdas in containers included. Skipped where the kernel's Python has no dill.
    #[test]
    #[allow(clippy::print_stderr)] // The skip notice (`skipped: <reason>`) `make test` counts.
    fn with_dill_definitions_are_pickled_by_value() {
        let out = run_python(&format!(
            "{PRELUDE}
state._DILL[:] = []
if state._dill() is None:
    print(json.dumps({{'skipped': True}}))
    raise SystemExit(0)
defs = state.Definitions()
code = '''x = 41
def g(): return x + 1
class C:
    def twice(self): return 2 * x
c = C()
def make(k):
    def add(v): return v + k
    return add
add2 = make(2)
lambdas = [lambda: 3]
'''
found = defs.before(ns, code)
exec(code, ns)
defs.after(ns, found)
m = state.snapshot(ns, baseline, 'out', lambda: False, defs)
main2 = types.ModuleType('__main__')
sys.modules['__main__'] = main2
back = main2.__dict__
r = state.restore(back, frozenset(), 'out', state.Definitions())
print(json.dumps({{'how': {{e['name']: e['how'] for e in m['saved']}}, 'skipped': m['skipped'], 'restore': r,
    'g': back['g'](), 'twice': back['c'].twice(), 'same': type(back['c']) is back['C'],
    'add2': back['add2'](5), 'lambda': back['lambdas'][0]()}}))
"
        ));
        if out["skipped"] == true {
            eprintln!("skipped: the kernel's Python cannot import dill");
            return;
        }
        assert_eq!(out["skipped"], crate::base::json::json!([]), "{out}");
        assert_eq!(
            out["how"],
            crate::base::json::json!({"C": "dill", "add2": "dill", "c": "pickle", "g": "dill",
                "lambdas": "dill", "make": "dill", "x": "pickle"})
        );
        assert_eq!(
            (&out["g"], &out["twice"], &out["same"]),
            (
                &crate::base::json::json!(42),
                &crate::base::json::json!(82),
                &crate::base::json::json!(true)
            )
        );
        assert_eq!(
            (&out["add2"], &out["lambda"]),
            (&crate::base::json::json!(7), &crate::base::json::json!(3))
        );
    }

    #[test]
    fn a_value_that_hangs_its_pickling_is_cut_off_at_the_time_limit() {
        let out = run_python(&format!(
            "{PRELUDE}
open('slow.py', 'w').write('import time\\nclass Slow:\\n    def __reduce__(self):\\n        time.sleep(60)\\n')
import slow
state.TIME_LIMIT = 0.2
ns['a'] = 1
ns['hang'] = slow.Slow()
ns['z'] = 2
m = state.snapshot(ns, baseline, 'out', lambda: False)
print(json.dumps(m))
"
        ));
        let names = |k: &str| -> Vec<String> {
            out[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names("saved"), ["a"]);
        assert_eq!(names("skipped"), ["hang", "z"]);
        for row in out["skipped"].as_array().unwrap() {
            assert_eq!(
                row["reason"], "the 0.2 s snapshot time limit was reached",
                "{out}"
            );
        }
    }

    #[test]
    fn the_total_limit_a_waiting_cell_and_a_bad_file() {
        let out = run_python(&format!(
            "{PRELUDE}
state.MAX_TOTAL_BYTES = 3000
ns['a'] = b'a' * 2000
ns['b'] = b'b' * 2000
ns['c'] = 7
m = state.snapshot(ns, baseline, 'out', lambda: False)
try:
    state.snapshot(ns, baseline, 'other', lambda: True)
    preempted = False
except state.Preempted:
    preempted = True
os.makedirs('bad')
open('bad/kernel-state.dill', 'wb').write(b'junk')
print(json.dumps({{'manifest': m, 'preempted': preempted, 'wrote': os.path.exists('other/kernel-state.dill'),
    'bad': state.restore({{}}, frozenset(), 'bad'), 'none': state.restore({{}}, frozenset(), 'nothing')}}))
"
        ));
        let m = &out["manifest"];
        let names = |k: &str| -> Vec<String> {
            m[k].as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names("saved"), ["a", "c"]);
        assert_eq!(
            m["skipped"][0],
            crate::base::json::json!({"name": "b", "type": "bytes", "reason": "the snapshot's 3000 bytes total was reached"})
        );
        assert_eq!(out["preempted"], true);
        assert_eq!(out["wrote"], false, "a preempted snapshot writes nothing");
        assert!(out["bad"]["error"]
            .as_str()
            .unwrap()
            .starts_with("UnpicklingError"));
        assert_eq!(out["none"], Value::Null);
    }
}
