//! `session/list` off the main loop: one `session-store` thread (started by the first list)
//! reads the sessions directory (`persist::Store::list`, an index and header + tail reads) and
//! hands each answer back on a channel the loop selects on, so the loop stays the only writer
//! to the client and a list over a big directory never holds another session's cancel.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{unbounded, Sender};
use serde_json::{json, Value};

use crate::persist::{self, Store};
use crate::rpc::{RequestId, RpcError};

/// Sessions per `session/list` page.
const PAGE: usize = 50;

/// A `session/list` to answer (its params already validated on the loop).
pub(crate) struct ListJob {
    pub request: RequestId,
    pub cwd: Option<String>,
    pub cursor: Option<String>,
}

/// The worker's answer, for the loop to send.
pub(crate) struct StoreAnswer {
    pub request: RequestId,
    pub result: Result<Value, RpcError>,
}

pub(crate) struct StoreWorker {
    jobs: Sender<ListJob>,
    thread: JoinHandle<()>,
}

impl StoreWorker {
    pub(crate) fn spawn(
        store: Arc<Store>,
        answers: Sender<StoreAnswer>,
    ) -> std::io::Result<StoreWorker> {
        let (jobs, rx) = unbounded::<ListJob>();
        let thread = std::thread::Builder::new()
            .name("session-store".to_owned())
            .spawn(move || {
                for job in rx {
                    let result = list_page(&store, job.cwd.as_deref(), job.cursor.as_deref());
                    if answers
                        .send(StoreAnswer {
                            request: job.request,
                            result,
                        })
                        .is_err()
                    {
                        break; // The loop is gone.
                    }
                }
            })?;
        Ok(StoreWorker { jobs, thread })
    }

    /// Queues a list; `Err` gives the job back when the worker is gone.
    pub(crate) fn send(&self, job: ListJob) -> Result<(), ListJob> {
        self.jobs.send(job).map_err(|e| e.into_inner())
    }

    /// Stops taking jobs and waits for the one in progress until `deadline`.
    pub(crate) fn stop(self, deadline: Instant) {
        drop(self.jobs);
        crate::reaper::join_or_leave(self.thread, deadline, "the store worker");
    }
}

/// One `session/list` page (behaviour as before, now off the loop): newest first, filtered
/// by `cwd`, `PAGE` rows from `cursor` on.
pub(crate) fn list_page(
    store: &Store,
    cwd: Option<&str>,
    cursor: Option<&str>,
) -> Result<Value, RpcError> {
    let rows = store.list();
    let Some((rows, next)) = persist::page(&rows, cwd, cursor, PAGE) else {
        return Err(RpcError::invalid_params(format!(
            "Invalid session/list cursor: {}",
            cursor.unwrap_or_default()
        )));
    };
    let sessions: Vec<Value> = rows
        .into_iter()
        .map(|s| {
            let mut v = json!({ "sessionId": s.id, "cwd": s.cwd, "updatedAt": s.updated_at });
            if let Some(t) = s.title {
                v["title"] = json!(t);
            }
            v
        })
        .collect();
    let mut result = json!({ "sessions": sessions });
    if let Some(next) = next {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}

/// The answer without a sessions directory (`--no-session`): nothing stored, no IO.
pub(crate) fn empty_page(cursor: Option<&str>) -> Result<Value, RpcError> {
    match persist::page(&[], None, cursor, PAGE) {
        Some(_) => Ok(json!({ "sessions": [] })),
        None => Err(RpcError::invalid_params(format!(
            "Invalid session/list cursor: {}",
            cursor.unwrap_or_default()
        ))),
    }
}
