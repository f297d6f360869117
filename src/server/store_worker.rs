//! The store's reads off the main loop: one `session-store` thread (started by the first job)
//! serves `session/list` (`persist::Store::list`, an index and header + tail reads) and the
//! opens of `session/load` / `session/resume` (claim, whole-file parse, the conversation and
//! its replay, the schedules), and hands each answer back on a channel the loop selects on.
//! The loop stays the only writer to the client, and a list over a big directory or the load
//! of a big session never holds another session's cancel.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::base::json::json;
use crossbeam_channel::{unbounded, Sender};
use serde_json::Value;

use crate::agent::turn::{Agent, Conversation};
use crate::config::prompt::SessionFiles;
use crate::persist::{self, Loaded, Store};
use crate::protocol::rpc::{RequestId, RpcError};

/// Sessions per `session/list` page.
const PAGE: usize = 50;

/// A `session/list` to answer (its params already validated on the loop).
pub(crate) struct ListJob {
    pub request: RequestId,
    pub cwd: Option<String>,
    pub cursor: Option<String>,
}

/// A session to open (its params already validated on the loop, as far as no IO is needed).
pub(crate) struct OpenJob {
    pub request: RequestId,
    /// The stored session to continue, or the one to fork (`session/new`: empty).
    pub session_id: String,
    pub source: Source,
    pub refusals: Refusals,
    /// The session's agent (`None`: its params were refused): its context files and harness
    /// state are read here, off the loop.
    pub agent: Option<Agent>,
    /// Directories the params name that must exist (the cwd, `additionalDirectories`):
    /// checked here, as part of the params' refusal.
    pub dirs: Vec<(PathBuf, DirRole)>,
}

/// What a directory of the params is for (its refusal's words).
#[derive(Clone, Copy)]
pub(crate) enum DirRole {
    Cwd,
    Additional,
}

impl OpenJob {
    /// The params' refusal: the loop's, else a directory that does not exist.
    fn refused_after_open(&self) -> Option<RpcError> {
        if let Some(refusal) = &self.refusals.after_open {
            return Some(refusal.clone());
        }
        self.dirs
            .iter()
            .find_map(|(dir, role)| check_dir(dir, *role).err())
    }
}

/// A directory the params name must exist and be one (`-32602` otherwise).
fn check_dir(dir: &Path, role: DirRole) -> Result<(), RpcError> {
    let (not_dir, unusable) = match role {
        DirRole::Cwd => ("cwd is not a directory: ", "cwd "),
        DirRole::Additional => (
            "additional directory is not a directory: ",
            "additional directory ",
        ),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(RpcError::invalid_params(format!(
            "{not_dir}{}",
            dir.display()
        ))),
        Err(e) => Err(RpcError::invalid_params(format!(
            "{unusable}{} cannot be used: {e}",
            dir.display()
        ))),
    }
}

/// The loop's refusals of an open, decided from its own state, which the worker says in
/// their old order.
#[derive(Default)]
pub(crate) struct Refusals {
    /// One session per connection, already open here: said once the file is known to exist
    /// (an unknown session is unknown first).
    pub before_open: Option<RpcError>,
    /// The params' cwd or directories: said once the file is claimed and read (a fork:
    /// copied, then removed again), before anything is written to it.
    pub after_open: Option<RpcError>,
}

/// Where an opened session comes from.
pub(crate) enum Source {
    /// `session/new`: a new session, or the one `-c`/`-r`/`--fork` picked at start-up.
    New,
    /// `session/load` (`replay`: with the updates that replay it) or `session/resume`.
    Stored { replay: bool },
    /// `session/fork`: a copy under a new id, beside the original (`open`: the original is
    /// open here, so a fork of one with nothing written yet starts empty).
    Fork { cwd: std::path::PathBuf, open: bool },
}

/// What the worker is asked to do.
pub(crate) enum StoreJob {
    List(ListJob),
    Open(Box<OpenJob>),
    /// `session/delete` of a session not open here: its file (under its claim, which may
    /// mean waiting for another process's grace) and its artifacts; answered `{}`.
    Delete {
        request: RequestId,
        session_id: String,
    },
    /// `session/set_title` of a session not open here: the title appended under its claim;
    /// answered `{title}`.
    Rename {
        request: RequestId,
        session_id: String,
        title: String,
    },
    /// A session's schedules replaced on disk (atomically and durably); `Saved { barrier }`
    /// says it is done (the loop holds the client's frames until then).
    WriteJobs {
        session_id: String,
        jobs: Value,
        barrier: u64,
    },
}

/// A stored session made ready to open: the conversation (with the recorder that continues
/// its file), its stored schedules and, for a load, its replay.
pub(crate) struct Opened {
    pub loaded: Loaded,
    pub conversation: Conversation,
    pub updates: Vec<Value>,
    pub jobs: Option<Value>,
}

/// A session made ready to open: what was read of it (`None`: a new session) and the files
/// its system prompt quotes.
pub(crate) struct Ready {
    pub stored: Option<Opened>,
    pub files: SessionFiles,
}

/// The worker's answer, for the loop to send (a list) or to finish (an open).
pub(crate) enum StoreAnswer {
    /// A request answered as it is (a delete, a rename).
    Done {
        request: RequestId,
        result: Result<Value, RpcError>,
    },
    /// The schedule write `barrier` is done (or failed, logged).
    Saved { barrier: u64 },
    Listed {
        request: RequestId,
        result: Result<Value, RpcError>,
    },
    Opened {
        request: RequestId,
        result: Result<Box<Ready>, RpcError>,
    },
}

pub(crate) struct StoreWorker {
    jobs: Sender<StoreJob>,
    thread: JoinHandle<()>,
}

impl StoreWorker {
    pub(crate) fn spawn(
        store: Option<Arc<Store>>,
        answers: Sender<StoreAnswer>,
    ) -> std::io::Result<StoreWorker> {
        let (jobs, rx) = unbounded::<StoreJob>();
        let thread = std::thread::Builder::new()
            .name("session-store".to_owned())
            .spawn(move || {
                for job in rx {
                    if answers.send(run(store.as_deref(), job)).is_err() {
                        break; // The loop is gone.
                    }
                }
            })?;
        Ok(StoreWorker { jobs, thread })
    }

    /// Queues a job; `Err` gives it back when the worker is gone.
    pub(crate) fn send(&self, job: StoreJob) -> Result<(), StoreJob> {
        self.jobs.send(job).map_err(|e| e.into_inner())
    }

    /// Stops taking jobs and waits for the one in progress until `deadline`.
    pub(crate) fn stop(self, deadline: Instant) {
        drop(self.jobs);
        crate::base::reaper::join_or_leave(self.thread, deadline, "the store worker");
    }
}

/// A job the worker cannot take, answered with `why` (a schedule write is logged).
pub(crate) fn refuse(job: StoreJob, why: &str) -> StoreAnswer {
    let result = Err(RpcError::internal(why));
    match job {
        StoreJob::List(job) => StoreAnswer::Listed {
            request: job.request,
            result,
        },
        StoreJob::Open(job) => StoreAnswer::Opened {
            request: job.request,
            result: Err(RpcError::internal(why)),
        },
        StoreJob::Delete { request, .. } | StoreJob::Rename { request, .. } => {
            StoreAnswer::Done { request, result }
        }
        StoreJob::WriteJobs {
            session_id,
            barrier,
            ..
        } => {
            log::error!("the schedules of session {session_id} were not stored: {why}");
            StoreAnswer::Saved { barrier }
        }
    }
}

/// Does one job (on the worker). Only an open for `session/new` needs no sessions directory;
/// the loop sends nothing else without one.
pub(crate) fn run(store: Option<&Store>, job: StoreJob) -> StoreAnswer {
    let Some(store) = store else {
        return match job {
            StoreJob::Open(job) if matches!(job.source, Source::New) => StoreAnswer::Opened {
                result: open_new(None, &job).map(Box::new),
                request: job.request,
            },
            job => refuse(job, "this agent keeps no sessions on disk (--no-session)"),
        };
    };
    match job {
        StoreJob::List(job) => StoreAnswer::Listed {
            result: list_page(store, job.cwd.as_deref(), job.cursor.as_deref()),
            request: job.request,
        },
        StoreJob::Delete {
            request,
            session_id,
        } => StoreAnswer::Done {
            result: store
                .delete(&session_id)
                .map(|()| json!({}))
                .map_err(RpcError::internal),
            request,
        },
        StoreJob::Rename {
            request,
            session_id,
            title,
        } => StoreAnswer::Done {
            result: rename(store, &session_id, title),
            request,
        },
        StoreJob::WriteJobs {
            session_id,
            jobs,
            barrier,
        } => {
            if let Err(e) = store.write_jobs(&session_id, &jobs) {
                log::error!("{e}");
            }
            StoreAnswer::Saved { barrier }
        }
        StoreJob::Open(job) => StoreAnswer::Opened {
            result: match &job.source {
                Source::New => open_new(Some(store), &job),
                Source::Stored { replay } => {
                    open(store, &job, *replay).map(|o| ready(&job, Some(o)))
                }
                Source::Fork { cwd, open } => {
                    fork(store, &job, cwd, *open).map(|o| ready(&job, Some(o)))
                }
            }
            .map(Box::new),
            request: job.request,
        },
    }
}

/// `session/new`: refused as the loop and the directories say, else the session `-c`/`-r`/
/// `--fork` picked (if no `session/new` took it yet) made ready, and the session's files read.
fn open_new(store: Option<&Store>, job: &OpenJob) -> Result<Ready, RpcError> {
    if let Some(refusal) = &job.refusals.before_open {
        return Err(refusal.clone());
    }
    if let Some(refusal) = job.refused_after_open() {
        return Err(refusal);
    }
    let stored = store.and_then(|store| {
        let loaded = store.take_next()?;
        Some(prepare(store, loaded, false))
    });
    Ok(ready(job, stored))
}

/// What the session's system prompt quotes, read for its agent (nothing for a refused one,
/// which never opens).
fn ready(job: &OpenJob, stored: Option<Opened>) -> Ready {
    let files = job
        .agent
        .as_ref()
        .map(crate::agent::subagents::session_files)
        .unwrap_or_default();
    Ready { stored, files }
}

/// The open session `id` deleted once the reaper has torn it down (its kernel can no longer
/// write a snapshot into its artifacts): its file, whose claim this process held, and its
/// artifacts. Runs on the reaper.
pub(crate) fn delete_torn_down(store: Option<&Store>, id: &str) -> Result<Value, RpcError> {
    match store {
        Some(store) => store
            .delete_owned(id)
            .map(|()| json!({}))
            .map_err(RpcError::internal),
        None => Ok(json!({})),
    }
}

/// A fork the client was never told of (its open failed) goes again, on the reaper.
pub(crate) fn discard_fork(store: Arc<Store>, id: String) {
    crate::base::reaper::later(move || drop(store.delete(&id)));
}

/// `session/set_title` of a stored session that is not open: appended under its claim.
fn rename(store: &Store, session_id: &str, title: String) -> Result<Value, RpcError> {
    match store.rename(session_id, title.clone()) {
        Ok(()) => Ok(json!({ "title": title })),
        Err(persist::OpenError::Unknown) => Err(RpcError::invalid_params(format!(
            "Unknown ACP session: {session_id}"
        ))),
        Err(persist::OpenError::Unreadable(why) | persist::OpenError::Claimed(why)) => {
            Err(RpcError::internal(why))
        }
    }
}

/// Opens stored session `job.session_id` to continue it, in the order the refusals have
/// always come in: unknown, then the loop's refusal, then claimed elsewhere or unreadable,
/// then the params. The session `-r`/`-c` picked is this process's already (loading it opens
/// that one); any other is claimed first, and refused when another process (or another
/// session here) records it.
fn open(store: &Store, job: &OpenJob, replay: bool) -> Result<Opened, RpcError> {
    let id = &job.session_id;
    let unknown = || RpcError::invalid_params(format!("Unknown ACP session: {id}"));
    let path = store.path_of(id).ok_or_else(unknown)?;
    if !path.is_file() {
        return Err(unknown());
    }
    if let Some(refusal) = &job.refusals.before_open {
        return Err(refusal.clone());
    }
    let loaded = match store.take_next_if(id) {
        Some(l) => l,
        None => store.open(id).map_err(|e| match e {
            persist::OpenError::Unknown => unknown(),
            persist::OpenError::Unreadable(why) | persist::OpenError::Claimed(why) => {
                RpcError::internal(why)
            }
        })?,
    };
    if let Some(refusal) = job.refused_after_open() {
        return Err(refusal);
    }
    Ok(prepare(store, loaded, replay))
}

/// Copies stored session `job.session_id` under a new id (the `--fork` machinery) and makes
/// the copy ready to open; a copy the params refuse goes again (nothing the client was told of).
fn fork(
    store: &Store,
    job: &OpenJob,
    cwd: &std::path::Path,
    source_open: bool,
) -> Result<Opened, RpcError> {
    let source = &job.session_id;
    let loaded = match store.fork_stored(source, cwd) {
        Ok(Some(l)) => l,
        // Open but nothing written yet: the fork starts as empty as the original.
        Ok(None) if source_open => store.fork_empty(cwd).map_err(RpcError::internal)?,
        Ok(None) => {
            return Err(RpcError::invalid_params(format!(
                "Unknown ACP session: {source}"
            )))
        }
        Err(e) => return Err(RpcError::internal(e)),
    };
    let fork_id = loaded.header.id.clone();
    log::info!("forked session {source} into {fork_id}");
    if let Some(refusal) = job.refused_after_open() {
        drop(loaded);
        let _ = store.delete(&fork_id);
        return Err(refusal);
    }
    Ok(prepare(store, loaded, false))
}

/// A loaded session made ready to open (`Opened`); also what `session/new` does with the
/// session `-c`/`-r`/`--fork` picked.
pub(crate) fn prepare(store: &Store, mut loaded: Loaded, replay: bool) -> Opened {
    let conversation = Conversation::continued(&mut loaded);
    let updates = if replay {
        crate::server::replay::replay(&loaded.entries)
    } else {
        Vec::new()
    };
    let jobs = store.load_jobs(&loaded.header.id);
    Opened {
        loaded,
        conversation,
        updates,
        jobs,
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
