//! `prime-agent schedule add|list|remove`: the heartbeat jobs of stored sessions, read and
//! written in `<agent dir>/session-artifacts/<id>/scheduled-jobs.json` with the same job list
//! (`persist::schedule::Jobs`) the open session uses, without starting the session. A job
//! fires once its session is open in an agent; the session's own saves (a firing, a
//! `/heartbeat`) rewrite the file, so change a session's jobs while it is not open.

use std::fmt::Write as _;

use crate::persist::schedule::{Job, Jobs, Owner};
use crate::persist::{self, Claim, Loaded, Store};

/// The session `arg` names, loaded (for its id, cwd and file).
fn session(store: &Store, arg: &str) -> Result<Loaded, String> {
    let path = store.resolve(arg)?;
    persist::load(&path).map_err(|e| format!("Cannot read session {}: {e}", path.display()))
}

/// The session's claim for the time of a change, or why another process has it.
fn claim(loaded: &Loaded) -> Result<Claim, String> {
    Claim::take(&loaded.path).map_err(|e| e.text(&loaded.header.id))
}

/// A session's stored jobs, with the session's fields for the records.
fn jobs_of(store: &Store, loaded: &Loaded) -> Jobs {
    let mut jobs = store
        .load_jobs(&loaded.header.id)
        .map(|v| Jobs::from_json(&v, crate::base::time::schedule_now_ms()))
        .unwrap_or_default();
    jobs.owner = Owner {
        session_id: loaded.header.id.clone(),
        // Absolute: the record outlives this command's working directory.
        session_file: Some(
            std::fs::canonicalize(&loaded.path)
                .unwrap_or_else(|_| loaded.path.clone())
                .display()
                .to_string(),
        ),
        cwd: loaded.header.cwd.clone(),
    };
    jobs
}

pub(super) fn add(store: &Store, arg: &str, when: &str, prompt: &str) -> Result<String, String> {
    let loaded = session(store, arg)?;
    let _claim = claim(&loaded)?;
    let mut jobs = jobs_of(store, &loaded);
    let job = jobs
        .add_scheduled(when, prompt, crate::base::time::schedule_now_ms())?
        .clone();
    store.write_jobs(&loaded.header.id, &jobs.to_json())?;
    Ok(format!(
        "Scheduled {} for session {}: {}\n",
        job.id,
        loaded.header.id,
        describe(&job)
    ))
}

/// `<expression>, next at <time>` (or why it never runs again).
fn describe(j: &Job) -> String {
    let next = match (j.status.as_str(), j.next_run_ms) {
        ("active", Some(t)) => format!("next at {}", crate::base::time::iso_of_millis(t)),
        ("paused", _) => "paused".to_owned(),
        (status, _) => status.to_owned(),
    };
    format!("{}, {next}", j.expression)
}

pub(super) fn list(store: &Store, arg: Option<&str>, all: bool) -> Result<String, String> {
    let sessions: Vec<Loaded> = match arg {
        Some(arg) => vec![session(store, arg)?],
        None => store
            .list()
            .iter()
            .filter_map(|s| persist::load(&s.path).ok())
            .collect(),
    };
    let mut out = String::new();
    for loaded in &sessions {
        let jobs = jobs_of(store, loaded);
        for j in jobs
            .jobs
            .iter()
            .filter(|j| all || matches!(j.status.as_str(), "active" | "paused"))
        {
            let _ = writeln!(
                out,
                "{}  {}  session {}  {}  ran {} time(s): {}",
                j.id,
                j.status,
                loaded.header.id,
                describe(j),
                j.run_count,
                j.prompt.replace('\n', " ")
            );
        }
    }
    if out.is_empty() {
        out = if all {
            "No scheduled jobs.\n".to_owned()
        } else {
            "No scheduled jobs (--all also shows finished ones).\n".to_owned()
        };
    }
    Ok(out)
}

pub(super) fn remove(store: &Store, id: &str) -> Result<String, String> {
    for summary in store.list() {
        let Ok(loaded) = persist::load(&summary.path) else {
            continue;
        };
        let jobs = jobs_of(store, &loaded);
        if jobs.jobs.iter().any(|j| j.id == id) {
            let _claim = claim(&loaded)?;
            // Read again under the claim: the agent that just let go may have saved.
            let mut jobs = jobs_of(store, &loaded);
            jobs.remove(id);
            store.write_jobs(&loaded.header.id, &jobs.to_json())?;
            return Ok(format!("Removed {id} from session {}\n", loaded.header.id));
        }
    }
    Err(format!("No scheduled job with id \"{id}\""))
}
