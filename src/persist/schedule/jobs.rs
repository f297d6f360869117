//! A session's scheduled jobs: the user's one `/heartbeat` and the main agent's
//! `rlm_heartbeat` jobs, their due times, firings (at most one in flight per job), the spec's
//! job records, and the kernel's `rlm_heartbeat.list|create|update|delete`. Pure: times are
//! milliseconds given by the caller.

use super::grammar::{parse, parse_cron, Schedule, DEFAULT_HEARTBEAT};

/// Who set a job: the user's `/heartbeat` (one per session), the agent's `rlm_heartbeat`
/// (many), or `prime-agent schedule add` (many; upstream's `cron` source).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Source {
    Heartbeat,
    RlmHeartbeat,
    Cron,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Heartbeat => "heartbeat",
            Source::RlmHeartbeat => "rlm_heartbeat",
            Source::Cron => "cron",
        }
    }
}

/// How a firing reaches the main agent.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) enum Delivery {
    /// Into the running turn (its next model call), else an unsolicited turn of its own.
    #[default]
    Steer,
    /// After the running turn ends, as an unsolicited turn of its own.
    FollowUp,
}

impl Delivery {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Delivery::Steer => "steer",
            Delivery::FollowUp => "follow_up",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Delivery> {
        match text {
            "steer" => Some(Delivery::Steer),
            "follow_up" => Some(Delivery::FollowUp),
            _ => None,
        }
    }
}

/// The schedule a `rlm_heartbeat.create` without an interval gets (as `/heartbeat`).
pub(crate) const DEFAULT_INTERVAL: &str = DEFAULT_HEARTBEAT;
/// Finished and deleted jobs kept for `list(include_inactive=True)`, newest last.
const KEEP_INACTIVE: usize = 20;

/// One scheduled job (the spec's job record).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Job {
    pub id: String,
    pub source: Source,
    pub delivery: Delivery,
    pub label: Option<String>,
    pub prompt: String,
    pub expression: String,
    pub schedule: Schedule,
    /// `active`, `paused`, `completed` or `cancelled`.
    pub status: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Kept while paused, so a resumed one-shot still knows its time.
    pub next_run_ms: Option<u64>,
    pub last_run_ms: Option<u64>,
    /// The last tick that fell due while this job's previous firing was still waiting to be
    /// taken (`lastSkippedAt`): skipped, so firings never pile up.
    pub last_skipped_ms: Option<u64>,
    pub run_count: u64,
}

impl Job {
    fn new(source: Source, expression: &str, prompt: &str, now_ms: u64) -> Result<Job, String> {
        let schedule = parse(expression, now_ms)?;
        Ok(Job {
            id: format!("hb-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
            source,
            delivery: Delivery::Steer,
            label: None,
            prompt: prompt.to_owned(),
            expression: expression.trim().to_owned(),
            next_run_ms: schedule.next_after(now_ms),
            schedule,
            status: "active".to_owned(),
            created_ms: now_ms,
            updated_ms: now_ms,
            last_run_ms: None,
            last_skipped_ms: None,
            run_count: 0,
        })
    }

    fn live(&self) -> bool {
        matches!(self.status.as_str(), "active" | "paused")
    }
}

/// The session a job belongs to: the session fields of its record.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Owner {
    pub session_id: String,
    /// `None` with `--no-session`.
    pub session_file: Option<String>,
    pub cwd: String,
}

/// The `customType` a firing's prompt is kept under in the session file (upstream's).
pub(crate) const PROMPT_TYPE: &str = "heartbeat_prompt";

/// A due job's delivery.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Due {
    pub job_id: String,
    pub prompt: String,
    pub delivery: Delivery,
    /// The job after this firing: `{jobId, schedule, status, runCount, nextRunAt, lastRunAt}`.
    pub details: serde_json::Value,
    /// The firing finished the job (a one-shot completed): its status changed.
    pub completed: bool,
}

impl Due {
    /// How the prompt is kept in the session file: a shown `custom_message` with the details.
    pub(crate) fn custom(&self) -> crate::persist::Custom {
        crate::persist::Custom {
            custom_type: PROMPT_TYPE,
            display: true,
            details: Some(self.details.clone()),
        }
    }
}

/// What `Jobs::take_due` claimed: the firings to deliver, and how many due ticks were skipped
/// because their job's previous firing was still in flight (a change to save, not to announce).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Claimed {
    pub due: Vec<Due>,
    pub skipped: usize,
}

/// A job's `schedule` field: `{kind, expression, intervalMs?}`.
fn schedule_json(j: &Job) -> serde_json::Value {
    let mut schedule =
        crate::base::json::json!({ "kind": j.schedule.kind(), "expression": j.expression });
    if let Schedule::Interval { ms } = j.schedule {
        schedule["intervalMs"] = crate::base::json::json!(ms);
    }
    schedule
}

/// A session's schedules.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Jobs {
    pub jobs: Vec<Job>,
    pub owner: Owner,
}

impl Jobs {
    /// The session's one `/heartbeat` (set again, it replaces the old one; the agent's
    /// `rlm_heartbeat` jobs stay).
    pub(crate) fn set_heartbeat(
        &mut self,
        expression: &str,
        prompt: &str,
        now_ms: u64,
    ) -> Result<&Job, String> {
        let job = Job::new(Source::Heartbeat, expression, prompt, now_ms)?;
        self.jobs
            .retain(|j| !(j.source == Source::Heartbeat && j.live()));
        self.jobs.push(job);
        Ok(self.jobs.last().expect("just pushed"))
    }

    /// Cancels the `/heartbeat`; whether there was one.
    pub(crate) fn off(&mut self, now_ms: u64) -> bool {
        let mut any = false;
        for j in self
            .jobs
            .iter_mut()
            .filter(|j| j.source == Source::Heartbeat && j.live())
        {
            j.status = "cancelled".to_owned();
            j.next_run_ms = None;
            j.updated_ms = now_ms;
            any = true;
        }
        self.prune();
        any
    }

    /// Drops the oldest finished jobs beyond `KEEP_INACTIVE` (the user's finished
    /// heartbeats at once: `/heartbeat` shows only the live one).
    fn prune(&mut self) {
        self.jobs
            .retain(|j| j.live() || j.source != Source::Heartbeat);
        let inactive = self.jobs.iter().filter(|j| !j.live()).count();
        let mut drop = inactive.saturating_sub(KEEP_INACTIVE);
        self.jobs.retain(|j| {
            let gone = drop > 0 && !j.live();
            drop -= usize::from(gone);
            !gone
        });
    }

    /// A job from `prime-agent schedule add` (the session runs it once it is open again).
    pub(crate) fn add_scheduled(
        &mut self,
        expression: &str,
        prompt: &str,
        now_ms: u64,
    ) -> Result<&Job, String> {
        if prompt.trim().is_empty() {
            return Err("The scheduled prompt is empty".to_owned());
        }
        let job = Job::new(Source::Cron, expression, prompt, now_ms)?;
        self.jobs.push(job);
        Ok(self.jobs.last().expect("just pushed"))
    }

    /// Takes job `id` out of the list, whatever its source or status.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Job> {
        let i = self.jobs.iter().position(|j| j.id == id)?;
        Some(self.jobs.remove(i))
    }

    pub(crate) fn active(&self) -> impl Iterator<Item = &Job> {
        self.jobs.iter().filter(|j| j.status == "active")
    }

    /// When the next job is due.
    pub(crate) fn next_due_ms(&self) -> Option<u64> {
        self.active().filter_map(|j| j.next_run_ms).min()
    }

    /// Claims every job due at `now_ms` (once each, however many ticks were missed) and
    /// returns their deliveries; a one-shot job is completed. A job whose previous firing is
    /// still in flight (`in_flight(job id)`: waiting in the inbox or the follow-up queue) does
    /// not fire again: the tick is recorded as skipped (`lastSkippedAt`) and its next run
    /// moves on, so at most one firing per job is ever waiting.
    pub(crate) fn take_due(&mut self, now_ms: u64, in_flight: &dyn Fn(&str) -> bool) -> Claimed {
        let mut claimed = Claimed::default();
        let due = &mut claimed.due;
        for j in self.jobs.iter_mut().filter(|j| j.status == "active") {
            if j.next_run_ms.is_some_and(|t| t <= now_ms) {
                if in_flight(&j.id) {
                    j.last_skipped_ms = Some(now_ms);
                    j.updated_ms = now_ms;
                    // A one-shot cannot be in flight twice; a recurring job moves on.
                    j.next_run_ms = j.schedule.next_after(now_ms);
                    claimed.skipped += 1;
                    continue;
                }
                j.run_count += 1;
                j.last_run_ms = Some(now_ms);
                j.updated_ms = now_ms;
                j.next_run_ms = j.schedule.next_after(now_ms);
                let completed = j.next_run_ms.is_none();
                if completed {
                    j.status = "completed".to_owned();
                }
                let iso = |ms: Option<u64>| ms.map(crate::base::time::iso_of_millis);
                due.push(Due {
                    job_id: j.id.clone(),
                    prompt: j.prompt.clone(),
                    delivery: j.delivery,
                    details: crate::base::json::json!({
                        "jobId": j.id, "schedule": schedule_json(j), "status": j.status,
                        "runCount": j.run_count, "nextRunAt": iso(j.next_run_ms),
                        "lastRunAt": iso(j.last_run_ms),
                    }),
                    completed,
                });
            }
        }
        if !claimed.due.is_empty() {
            self.prune();
        }
        claimed
    }

    /// One job record (behaviour spec §5.5).
    fn record(&self, j: &Job) -> serde_json::Value {
        let schedule = schedule_json(j);
        let mut r = crate::base::json::json!({
            "id": j.id, "status": j.status, "source": j.source.as_str(),
            "deliveryMode": j.delivery.as_str(),
            "activeSessionId": self.owner.session_id, "sessionId": self.owner.session_id,
            "sessionFile": self.owner.session_file, "cwd": self.owner.cwd,
            "prompt": j.prompt, "schedule": schedule,
            "createdAt": crate::base::time::iso_of_millis(j.created_ms),
            "updatedAt": crate::base::time::iso_of_millis(j.updated_ms),
            "runCount": j.run_count,
        });
        let optional = [
            ("label", j.label.clone()),
            (
                "nextRunAt",
                j.next_run_ms.map(crate::base::time::iso_of_millis),
            ),
            (
                "lastRunAt",
                j.last_run_ms.map(crate::base::time::iso_of_millis),
            ),
            (
                "lastSkippedAt",
                j.last_skipped_ms.map(crate::base::time::iso_of_millis),
            ),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                r[key] = crate::base::json::json!(v);
            }
        }
        r
    }

    /// The job records, as stored with the session.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        self.jobs.iter().map(|j| self.record(j)).collect()
    }

    /// Jobs read back from a session file (entries that no longer parse are dropped).
    pub(crate) fn from_json(v: &serde_json::Value, now_ms: u64) -> Jobs {
        let ms = |j: &serde_json::Value, k: &str| {
            j[k].as_str().and_then(crate::base::time::parse_iso_millis)
        };
        let jobs = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|j| {
                let status = j["status"].as_str()?;
                if !matches!(status, "active" | "paused" | "completed" | "cancelled") {
                    return None;
                }
                let expression = j["schedule"]["expression"].as_str()?.to_owned();
                let created = ms(j, "createdAt").unwrap_or(now_ms);
                let schedule = match j["schedule"]["kind"].as_str()? {
                    // A finished one-shot has no next run: its time no longer matters.
                    "once" => match ms(j, "nextRunAt").or(ms(j, "lastRunAt")) {
                        Some(at_ms) => Schedule::Once { at_ms },
                        None if !matches!(status, "active" | "paused") => {
                            Schedule::Once { at_ms: 0 }
                        }
                        None => return None,
                    },
                    "interval" => Schedule::Interval {
                        ms: j["schedule"]["intervalMs"].as_u64()?,
                    },
                    _ => Schedule::Cron(parse_cron(&expression).ok()?),
                };
                let source = match j["source"].as_str() {
                    Some("rlm_heartbeat") => Source::RlmHeartbeat,
                    Some("cron") => Source::Cron,
                    _ => Source::Heartbeat,
                };
                Some(Job {
                    id: j["id"].as_str()?.to_owned(),
                    source,
                    delivery: j["deliveryMode"]
                        .as_str()
                        .and_then(Delivery::parse)
                        .unwrap_or_default(),
                    label: j["label"].as_str().map(str::to_owned),
                    prompt: j["prompt"].as_str()?.to_owned(),
                    expression,
                    schedule,
                    status: status.to_owned(),
                    created_ms: created,
                    updated_ms: ms(j, "updatedAt").unwrap_or(created),
                    next_run_ms: ms(j, "nextRunAt"),
                    last_run_ms: ms(j, "lastRunAt"),
                    last_skipped_ms: ms(j, "lastSkippedAt"),
                    run_count: j["runCount"].as_u64().unwrap_or(0),
                })
            })
            .collect();
        Jobs {
            jobs,
            owner: Owner::default(),
        }
    }

    /// What `/heartbeat status` says: the user's heartbeat, then the agent's live schedules.
    pub(crate) fn status_text(&self) -> String {
        let lines: Vec<String> = self
            .jobs
            .iter()
            .filter(|j| j.live())
            .map(|j| {
                let next = match (j.status.as_str(), j.next_run_ms) {
                    ("paused", _) => "paused".to_owned(),
                    (_, Some(t)) => format!("next at {}", crate::base::time::iso_of_millis(t)),
                    (_, None) => "next at never".to_owned(),
                };
                let who = match j.source {
                    Source::Heartbeat => "Heartbeat",
                    Source::RlmHeartbeat => "Agent heartbeat",
                    Source::Cron => "Scheduled job",
                };
                format!(
                    "{who} {} ({}), {next}, ran {} time(s): {}",
                    j.id, j.expression, j.run_count, j.prompt
                )
            })
            .collect();
        if lines.is_empty() {
            "No heartbeat is set.".to_owned()
        } else {
            lines.join("\n")
        }
    }

    /// The kernel's `rlm_heartbeat.list|create|update|delete` (behaviour spec §5.5) on these
    /// jobs: the result, and whether the jobs changed. The payload was checked in Python; it
    /// is checked again here, since any kernel code can send a host request.
    pub(crate) fn host_request(
        &mut self,
        kind: &str,
        payload: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(serde_json::Value, bool), String> {
        use crate::base::json::json;
        let text = |key: &str| -> Result<Option<&str>, String> {
            match &payload[key] {
                serde_json::Value::Null => Ok(None),
                serde_json::Value::String(s) => Ok(Some(s.as_str())),
                _ => Err(format!("{kind} {key} must be a string")),
            }
        };
        let delivery = match text("delivery_mode")? {
            None => None,
            Some(d) => Some(Delivery::parse(d).ok_or_else(|| {
                format!("{kind} delivery_mode must be \"steer\" or \"follow_up\"")
            })?),
        };
        match kind {
            "rlm_heartbeat.list" => {
                let all = payload["include_inactive"].as_bool().unwrap_or(false);
                let jobs: Vec<serde_json::Value> = self
                    .jobs
                    .iter()
                    .filter(|j| all || j.live())
                    .map(|j| self.record(j))
                    .collect();
                Ok((json!({ "jobs": jobs }), false))
            }
            "rlm_heartbeat.create" => {
                let instruction = text("instruction")?
                    .filter(|s| !s.trim().is_empty())
                    .ok_or(format!("{kind} instruction must be a non-empty string"))?;
                let interval = text("interval")?.unwrap_or(DEFAULT_INTERVAL);
                let mut job = Job::new(Source::RlmHeartbeat, interval, instruction, now_ms)?;
                job.label = text("label")?.filter(|l| !l.is_empty()).map(str::to_owned);
                job.delivery = delivery.unwrap_or_default();
                self.jobs.push(job);
                let record = self.record(self.jobs.last().expect("just pushed"));
                Ok((json!({ "job": record }), true))
            }
            "rlm_heartbeat.update" | "rlm_heartbeat.delete" => {
                let id = text("id")?.unwrap_or("");
                let i = self.agent_job(id)?;
                let j = &mut self.jobs[i];
                if kind == "rlm_heartbeat.delete" {
                    j.status = "cancelled".to_owned();
                    j.next_run_ms = None;
                    j.updated_ms = now_ms;
                    let record = self.record(&self.jobs[i]);
                    self.prune();
                    return Ok((json!({ "job": record }), true));
                }
                if let Some(instruction) = text("instruction")? {
                    if instruction.trim().is_empty() {
                        return Err(format!("{kind} instruction must be a non-empty string"));
                    }
                    j.prompt = instruction.to_owned();
                }
                if let Some(interval) = text("interval")? {
                    j.schedule = parse(interval, now_ms)?;
                    j.expression = interval.trim().to_owned();
                    j.next_run_ms = j.schedule.next_after(now_ms);
                }
                if let Some(label) = text("label")? {
                    j.label = (!label.is_empty()).then(|| label.to_owned());
                }
                if let Some(d) = delivery {
                    j.delivery = d;
                }
                match text("status")? {
                    None => {}
                    Some("pause") => j.status = "paused".to_owned(),
                    Some("resume") if j.status == "paused" => {
                        // A one-shot keeps its time (a missed one runs at once); a
                        // recurring job counts from now.
                        j.next_run_ms = match j.schedule {
                            Schedule::Once { at_ms } => Some(at_ms),
                            _ => j.schedule.next_after(now_ms),
                        };
                        j.status = "active".to_owned();
                    }
                    Some("resume") => {}
                    Some(_) => {
                        return Err(format!("{kind} status must be \"pause\" or \"resume\""))
                    }
                }
                j.updated_ms = now_ms;
                let record = self.record(&self.jobs[i]);
                Ok((json!({ "job": record }), true))
            }
            _ => Err(crate::kernel::host::unavailable(kind)),
        }
    }

    /// The index of the agent's own live job `id`: the user's `/heartbeat` is theirs to change.
    fn agent_job(&self, id: &str) -> Result<usize, String> {
        let i = self
            .jobs
            .iter()
            .position(|j| j.id == id)
            .ok_or_else(|| format!("No heartbeat with id \"{id}\""))?;
        let j = &self.jobs[i];
        if j.source == Source::Cron {
            return Err(format!(
                "Job \"{id}\" was scheduled with prime-agent schedule add; remove it with prime-agent schedule remove {id}"
            ));
        }
        if j.source != Source::RlmHeartbeat {
            return Err(format!(
                "Heartbeat \"{id}\" was set by the user with /heartbeat; only they can change it"
            ));
        }
        if !j.live() {
            return Err(format!(
                "Heartbeat \"{id}\" is {} and cannot be changed",
                j.status
            ));
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::json::json;
    use crate::base::time::iso_of_millis;
    use crate::persist::schedule::MIN_INTERVAL;
    use serde_json::Value;

    /// No firing is in flight.
    fn idle(_: &str) -> bool {
        false
    }

    const NOW: u64 = 1_764_583_200_000; // 2025-12-01T10:00:00Z, a Monday.

    fn steer(prompt: &str) -> (String, Delivery) {
        (prompt.into(), Delivery::Steer)
    }

    /// What each firing delivers, without its details.
    fn fired(due: Vec<Due>) -> Vec<(String, Delivery)> {
        due.into_iter().map(|d| (d.prompt, d.delivery)).collect()
    }

    fn request(
        jobs: &mut Jobs,
        kind: &str,
        payload: serde_json::Value,
        now: u64,
    ) -> Result<(serde_json::Value, bool), String> {
        jobs.host_request(&format!("rlm_heartbeat.{kind}"), &payload, now)
    }

    #[test]
    fn rlm_heartbeat_requests_create_list_update_and_delete_jobs() {
        use crate::base::json::json;
        let mut jobs = Jobs {
            owner: Owner {
                session_id: "s1".into(),
                session_file: Some("/tmp/s1.jsonl".into()),
                cwd: "/w".into(),
            },
            ..Jobs::default()
        };
        jobs.set_heartbeat("every 1h", "user's", NOW).unwrap();
        let (created, changed) = request(
            &mut jobs,
            "create",
            json!({"instruction": "check CI", "interval": "every 10s", "label": "ci", "delivery_mode": "follow_up"}),
            NOW,
        )
        .unwrap();
        assert!(changed);
        let job = &created["job"];
        let id = job["id"].as_str().unwrap().to_owned();
        assert_eq!(
            job,
            &json!({
                "id": id, "status": "active", "source": "rlm_heartbeat", "deliveryMode": "follow_up",
                "activeSessionId": "s1", "sessionId": "s1", "sessionFile": "/tmp/s1.jsonl", "cwd": "/w",
                "label": "ci", "prompt": "check CI",
                "schedule": {"kind": "interval", "expression": "every 10s", "intervalMs": 10000},
                "createdAt": iso_of_millis(NOW), "updatedAt": iso_of_millis(NOW),
                "nextRunAt": iso_of_millis(NOW + 10_000), "runCount": 0,
            })
        );
        // Defaults: every 5m, steer, no label.
        let (plain, _) = request(&mut jobs, "create", json!({"instruction": "x"}), NOW).unwrap();
        assert_eq!(plain["job"]["schedule"]["expression"], DEFAULT_INTERVAL);
        assert_eq!(plain["job"]["deliveryMode"], "steer");
        assert!(plain["job"].get("label").is_none());
        let plain_id = plain["job"]["id"].as_str().unwrap().to_owned();
        // The user's heartbeat is listed with the agent's, and it is the user's.
        let (listed, changed) = request(&mut jobs, "list", json!({}), NOW).unwrap();
        assert!(!changed);
        assert_eq!(
            crate::base::test_support::strs(&listed["jobs"], "source"),
            ["heartbeat", "rlm_heartbeat", "rlm_heartbeat"]
        );
        let user_id = listed["jobs"][0]["id"].as_str().unwrap().to_owned();
        assert_eq!(
            request(&mut jobs, "delete", json!({"id": user_id}), NOW),
            Err(format!("Heartbeat \"{user_id}\" was set by the user with /heartbeat; only they can change it"))
        );
        // Pause: not due, kept with its time; resume counts from then.
        let (paused, _) = request(
            &mut jobs,
            "update",
            json!({"id": id, "status": "pause"}),
            NOW + 1,
        )
        .unwrap();
        assert_eq!(paused["job"]["status"], "paused");
        assert!(jobs
            .take_due(NOW + 20_000, &idle)
            .due
            .iter()
            .all(|d| d.prompt != "check CI"));
        assert!(
            jobs.status_text().contains("paused"),
            "{}",
            jobs.status_text()
        );
        let (resumed, _) = request(
            &mut jobs,
            "update",
            json!({"id": id, "status": "resume", "instruction": "check CI again", "interval": "every 1m", "delivery_mode": "steer", "label": ""}),
            NOW + 30_000,
        )
        .unwrap();
        let r = &resumed["job"];
        assert_eq!(
            (
                r["status"].as_str(),
                r["prompt"].as_str(),
                r["deliveryMode"].as_str()
            ),
            (Some("active"), Some("check CI again"), Some("steer"))
        );
        assert_eq!(r["nextRunAt"], iso_of_millis(NOW + 90_000));
        assert!(r.get("label").is_none());
        // Errors keep the grammar's texts.
        let cases = [
            (
                "create",
                json!({"instruction": "x", "interval": "every 5s"}),
                MIN_INTERVAL.to_owned(),
            ),
            (
                "create",
                json!({"instruction": " "}),
                "rlm_heartbeat.create instruction must be a non-empty string".into(),
            ),
            (
                "create",
                json!({"instruction": "x", "delivery_mode": "later"}),
                "rlm_heartbeat.create delivery_mode must be \"steer\" or \"follow_up\"".into(),
            ),
            (
                "create",
                json!({"instruction": "x", "interval": 10}),
                "rlm_heartbeat.create interval must be a string".into(),
            ),
            (
                "update",
                json!({"id": id, "status": "stop"}),
                "rlm_heartbeat.update status must be \"pause\" or \"resume\"".into(),
            ),
            (
                "update",
                json!({"id": id, "interval": "soon"}),
                "Invalid schedule: soon".into(),
            ),
            (
                "update",
                json!({"id": "hb-nope"}),
                "No heartbeat with id \"hb-nope\"".into(),
            ),
            (
                "delete",
                json!({"id": "hb-nope"}),
                "No heartbeat with id \"hb-nope\"".into(),
            ),
        ];
        for (kind, payload, want) in cases {
            assert_eq!(
                request(&mut jobs, kind, payload.clone(), NOW),
                Err(want),
                "{kind} {payload}"
            );
        }
        // Delete cancels; the record stays for include_inactive, and cannot change again.
        let (deleted, changed) =
            request(&mut jobs, "delete", json!({"id": plain_id}), NOW).unwrap();
        assert!(changed);
        assert_eq!(deleted["job"]["status"], "cancelled");
        assert!(deleted["job"].get("nextRunAt").is_none());
        assert_eq!(
            request(
                &mut jobs,
                "update",
                json!({"id": plain_id, "status": "resume"}),
                NOW
            ),
            Err(format!(
                "Heartbeat \"{plain_id}\" is cancelled and cannot be changed"
            ))
        );
        let count = |jobs: &mut Jobs, all: bool| {
            request(jobs, "list", json!({"include_inactive": all}), NOW)
                .unwrap()
                .0["jobs"]
                .as_array()
                .unwrap()
                .len()
        };
        assert_eq!((count(&mut jobs, false), count(&mut jobs, true)), (2, 3));
        // Everything (paused status, runCount, delivery, label, inactive records) survives
        // the file.
        request(
            &mut jobs,
            "update",
            json!({"id": id, "status": "pause", "label": "ci"}),
            NOW,
        )
        .unwrap();
        jobs.jobs[1].run_count = 3;
        let mut back = Jobs::from_json(&jobs.to_json(), NOW);
        back.owner = jobs.owner.clone();
        assert_eq!(back, jobs);
        assert_eq!(
            request(&mut jobs, "run", json!({}), NOW),
            Err("host request type \"rlm_heartbeat.run\" is not available in this session".into())
        );
    }

    #[test]
    fn a_follow_up_job_is_due_as_a_follow_up_and_finished_jobs_are_bounded() {
        let mut jobs = Jobs::default();
        for i in 0..(KEEP_INACTIVE + 5) {
            let payload = crate::base::json::json!({"instruction": format!("p{i}"), "interval": "in 1m", "delivery_mode": "follow_up"});
            request(&mut jobs, "create", payload, NOW).unwrap();
        }
        let due = jobs.take_due(NOW + 60_000, &idle).due;
        assert_eq!(due.len(), KEEP_INACTIVE + 5);
        assert!(due.iter().all(|d| d.delivery == Delivery::FollowUp));
        assert_eq!(
            jobs.jobs.len(),
            KEEP_INACTIVE,
            "the oldest finished jobs go"
        );
        assert_eq!(jobs.jobs[0].prompt, "p5");
        assert!(jobs
            .jobs
            .iter()
            .all(|j| j.status == "completed" && j.run_count == 1));
        // A paused one-shot resumed after its time runs at once (missed ticks coalesce).
        let (created, _) = request(
            &mut jobs,
            "create",
            crate::base::json::json!({"instruction": "late", "interval": "in 1m"}),
            NOW,
        )
        .unwrap();
        let id = created["job"]["id"].clone();
        request(
            &mut jobs,
            "update",
            crate::base::json::json!({"id": id, "status": "pause"}),
            NOW,
        )
        .unwrap();
        assert!(jobs.take_due(NOW + 120_000, &idle).due.is_empty());
        request(
            &mut jobs,
            "update",
            crate::base::json::json!({"id": id, "status": "resume"}),
            NOW + 120_000,
        )
        .unwrap();
        assert_eq!(
            fired(jobs.take_due(NOW + 120_000, &idle).due),
            vec![steer("late")]
        );
    }

    #[test]
    fn jobs_fire_once_per_due_tick_and_survive_a_round_trip() {
        let mut jobs = Jobs::default();
        assert_eq!(
            jobs.set_heartbeat("every 5s", "p", NOW),
            Err(MIN_INTERVAL.into())
        );
        jobs.set_heartbeat("every 10s", "tick", NOW).unwrap();
        assert_eq!(jobs.next_due_ms(), Some(NOW + 10_000));
        assert!(jobs.take_due(NOW + 9_999, &idle).due.is_empty());
        // An hour late: one firing, then the next tick counts from now.
        let tick = jobs.take_due(NOW + 3_600_000, &idle).due;
        assert_eq!(fired(tick.clone()), vec![steer("tick")]);
        // The firing's details are the job after it; an interval firing finishes nothing.
        let job = &jobs.jobs[0];
        assert_eq!(
            tick[0].details,
            json!({
                "jobId": job.id, "status": "active", "runCount": 1,
                "schedule": {"kind": "interval", "expression": "every 10s", "intervalMs": 10_000},
                "lastRunAt": iso_of_millis(NOW + 3_600_000),
                "nextRunAt": iso_of_millis(NOW + 3_610_000),
            })
        );
        assert!(!tick[0].completed);
        assert_eq!(tick[0].custom().custom_type, "heartbeat_prompt");
        assert!(tick[0].custom().display);
        assert_eq!(jobs.next_due_ms(), Some(NOW + 3_610_000));
        let back = Jobs::from_json(&jobs.to_json(), NOW);
        assert_eq!(back, jobs);
        assert!(jobs.status_text().contains("every 10s"));
        jobs.set_heartbeat("in 1m", "once", NOW).unwrap();
        assert_eq!(jobs.active().count(), 1, "one /heartbeat per session");
        let once = jobs.take_due(NOW + 60_000, &idle).due;
        assert_eq!(fired(once.clone()), vec![steer("once")]);
        assert!(once[0].completed, "a one-shot's firing completes it");
        assert_eq!(once[0].details["status"], "completed");
        assert_eq!(once[0].details["nextRunAt"], Value::Null);
        assert_eq!(jobs.next_due_ms(), None);
        jobs.set_heartbeat("@hourly", "cron", NOW).unwrap();
        assert_eq!(Jobs::from_json(&jobs.to_json(), NOW), jobs);
        assert!(jobs.off(NOW));
        assert!(!jobs.off(NOW));
        assert_eq!(jobs.status_text(), "No heartbeat is set.");
    }

    #[test]
    fn a_job_whose_firing_is_still_in_flight_skips_its_ticks_and_moves_on() {
        let mut jobs = Jobs::default();
        jobs.set_heartbeat("every 10s", "beat", NOW).unwrap();
        let id = jobs.jobs[0].id.clone();
        let first = jobs.take_due(NOW + 10_000, &idle);
        assert_eq!((first.due.len(), first.skipped), (1, 0));
        // The firing waits (a long tool call holds the turn): 29 more ticks fall due, one at a
        // time, and each is skipped, never delivered.
        let waiting = |job: &str| job == id;
        for tick in 2..=30u64 {
            let claimed = jobs.take_due(NOW + tick * 10_000, &waiting);
            assert_eq!((claimed.due.len(), claimed.skipped), (0, 1), "tick {tick}");
        }
        let j = &jobs.jobs[0];
        assert_eq!(j.run_count, 1);
        assert_eq!(j.last_skipped_ms, Some(NOW + 300_000));
        assert_eq!(j.next_run_ms, Some(NOW + 310_000), "the next run moved on");
        let record = jobs.record(&jobs.jobs[0]);
        assert_eq!(record["lastSkippedAt"], iso_of_millis(NOW + 300_000));
        assert_eq!(
            Jobs::from_json(&jobs.to_json(), NOW),
            jobs,
            "kept in the file"
        );
        // Taken: the next tick fires again.
        assert_eq!(jobs.take_due(NOW + 310_000, &idle).due.len(), 1);
        // Other jobs are not held back by one that is in flight.
        let (other, _) = request(
            &mut jobs,
            "create",
            json!({"instruction": "other", "interval": "every 10s"}),
            NOW + 310_000,
        )
        .unwrap();
        let claimed = jobs.take_due(NOW + 320_000, &waiting);
        assert_eq!(fired(claimed.due), vec![steer("other")]);
        assert_eq!(claimed.skipped, 1);
        assert!(other["job"].get("lastSkippedAt").is_none());
    }
}
