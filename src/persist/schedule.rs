//! The schedule grammar of heartbeats (behaviour spec §5.5), pure: `in <n> <unit>` (once),
//! `every|each <n> <unit>` (an interval of at least 10 s), `at <ISO date>` (once, in the
//! future), else a five-field cron expression or one of its aliases; a bare duration (`10m`)
//! means `every 10m`. Times are milliseconds since the epoch, given by the caller.

pub(crate) const MIN_INTERVAL: &str = "Recurring interval must be at least 10 seconds";

/// How much faster than the wall clock schedules run: `PRIME_AGENT_SCHEDULE_TIME_SCALE`
/// (a test hook, default 1), read once, counted from the first reading, so a test can see an
/// `every 10s` job fire without waiting ten seconds while the grammar and its limits stay
/// the real ones.
fn clock() -> (u64, u64) {
    static CLOCK: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
    *CLOCK.get_or_init(|| {
        let scale = std::env::var("PRIME_AGENT_SCHEDULE_TIME_SCALE")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|s| (1..=1000).contains(s))
            .unwrap_or(1);
        (super::now_ms(), scale)
    })
}

/// The time schedules are set and fired by (milliseconds since the epoch).
pub(crate) fn now_ms() -> u64 {
    let (start, scale) = clock();
    start + super::now_ms().saturating_sub(start) * scale
}

/// The real wait until schedule time `due_ms`.
pub(crate) fn wait_until(due_ms: u64) -> std::time::Duration {
    let (_, scale) = clock();
    std::time::Duration::from_millis(due_ms.saturating_sub(now_ms()).div_ceil(scale))
}

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Schedule {
    /// Fires once, at this time.
    Once {
        at_ms: u64,
    },
    /// Fires every `ms`, first `ms` after it was set.
    Interval {
        ms: u64,
    },
    Cron(Cron),
}

/// The `kind` of a job record's `schedule`.
impl Schedule {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Schedule::Once { .. } => "once",
            Schedule::Interval { .. } => "interval",
            Schedule::Cron(_) => "cron",
        }
    }

    /// The first firing strictly after `after_ms` (`None`: it never fires again). Missed ticks
    /// coalesce: an interval counts from `after_ms`, not from when it was due.
    pub(crate) fn next_after(&self, after_ms: u64) -> Option<u64> {
        match self {
            Schedule::Once { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
            Schedule::Interval { ms } => Some(after_ms + ms),
            Schedule::Cron(c) => c.next_after(after_ms),
        }
    }
}

/// Five cron fields as sets of allowed values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cron {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    /// Both day fields restricted: either may match (cron's rule).
    day_or: bool,
}

fn duration_ms(n: &str, unit: &str) -> Option<u64> {
    let n: u64 = n.parse().ok()?;
    let unit_ms = match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "w" | "wk" | "week" | "weeks" => 604_800_000,
        _ => return None,
    };
    n.checked_mul(unit_ms).filter(|ms| *ms > 0)
}

/// `10m`, `10 m`, `1 hour` → milliseconds.
fn parse_duration(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = t.split_at(split);
    duration_ms(n, unit.trim())
}

fn interval(text: &str) -> Result<Schedule, String> {
    let ms = parse_duration(text).ok_or_else(|| format!("Invalid interval: {text}"))?;
    if ms < 10_000 {
        return Err(MIN_INTERVAL.to_owned());
    }
    Ok(Schedule::Interval { ms })
}

/// Parses a schedule at `now_ms`.
pub(crate) fn parse(text: &str, now_ms: u64) -> Result<Schedule, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("in ") {
        let ms =
            parse_duration(rest).ok_or_else(|| format!("Invalid duration: {}", rest.trim()))?;
        return Ok(Schedule::Once { at_ms: now_ms + ms });
    }
    if let Some(rest) = lower
        .strip_prefix("every ")
        .or_else(|| lower.strip_prefix("each "))
    {
        return interval(rest);
    }
    if let Some(rest) = t.strip_prefix("at ").or_else(|| t.strip_prefix("AT ")) {
        let rest = rest.trim();
        let at_ms = super::parse_iso_millis(rest)
            .or_else(|| super::parse_iso_millis(&format!("{rest}:00Z")))
            .or_else(|| super::parse_iso_millis(&format!("{rest}T00:00:00Z")))
            .ok_or_else(|| format!("Invalid date: {rest}"))?;
        if at_ms <= now_ms {
            return Err(format!("Scheduled time is in the past: {rest}"));
        }
        return Ok(Schedule::Once { at_ms });
    }
    if parse_duration(&lower).is_some() {
        return interval(&lower);
    }
    parse_cron(&lower).map(Schedule::Cron)
}

fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Option<Vec<bool>> {
    let mut set = vec![false; max as usize + 1];
    let value = |s: &str| -> Option<u32> {
        if let Some(i) = names.iter().position(|n| *n == s) {
            return Some(min + i as u32);
        }
        s.parse().ok().filter(|v| (min..=max).contains(v))
    };
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None => {
                    let v = value(r)?;
                    (v, if part.contains('/') { max } else { v })
                }
            },
        };
        if lo > hi {
            return None;
        }
        for v in (lo..=hi).step_by(step as usize) {
            set[v as usize] = true;
        }
    }
    Some(set)
}

pub(crate) fn parse_cron(text: &str) -> Result<Cron, String> {
    let expanded = match text.trim() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other => other,
    };
    let invalid = || format!("Invalid schedule: {text}");
    let f: Vec<&str> = expanded.split_whitespace().collect();
    if f.len() != 5 {
        return Err(invalid());
    }
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let mut weekdays = field(f[4], 0, 7, &DAYS).ok_or_else(invalid)?;
    if weekdays[7] {
        weekdays[0] = true; // 7 is Sunday too.
    }
    Ok(Cron {
        minutes: field(f[0], 0, 59, &[]).ok_or_else(invalid)?,
        hours: field(f[1], 0, 23, &[]).ok_or_else(invalid)?,
        days: field(f[2], 1, 31, &[]).ok_or_else(invalid)?,
        months: field(f[3], 1, 12, &MONTHS).ok_or_else(invalid)?,
        weekdays,
        day_or: f[2] != "*" && f[4] != "*",
    })
}

impl Cron {
    /// The first whole minute (UTC) strictly after `after_ms` that matches, within 5 years.
    pub(crate) fn next_after(&self, after_ms: u64) -> Option<u64> {
        let mut minute = after_ms / 60_000 + 1;
        let limit = minute + 5 * 366 * 24 * 60;
        while minute < limit {
            let days = (minute / 1440) as i64;
            let (_, month, day) = crate::prompt::civil_from_days(days);
            let weekday = (days + 4).rem_euclid(7) as usize; // 1970-01-01 was a Thursday.
            let day_ok = match (self.day_or, self.days[day as usize], self.weekdays[weekday]) {
                (true, d, w) => d || w,
                (false, d, w) => d && w,
            };
            if !self.months[month as usize] || !day_ok {
                minute = (days as u64 + 1) * 1440; // The next day.
                continue;
            }
            let (hour, min) = ((minute % 1440) / 60, minute % 60);
            if self.hours[hour as usize] && self.minutes[min as usize] {
                return Some(minute * 60_000);
            }
            minute += 1;
        }
        None
    }
}

/// The schedule a `/heartbeat` without one gets.
pub(crate) const DEFAULT_HEARTBEAT: &str = "every 5m";
/// What a heartbeat without a prompt of its own asks (our words).
pub(crate) const DEFAULT_HEARTBEAT_PROMPT: &str =
    "Heartbeat: check on your work so far and continue with whatever still needs doing.";

/// `/heartbeat [every 5m|off|status] [prompt]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HeartbeatCommand {
    Status,
    Off,
    Set { schedule: String, prompt: String },
}

/// The `/heartbeat` command of a prompt (`None`: not one).
pub(crate) fn heartbeat_command(text: &str) -> Option<HeartbeatCommand> {
    let rest = text.trim().strip_prefix("/heartbeat")?;
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    let rest = rest.trim();
    let words: Vec<&str> = rest.split_whitespace().collect();
    let (schedule, taken) = match words.as_slice() {
        [] | ["status"] => return Some(HeartbeatCommand::Status),
        ["off"] => return Some(HeartbeatCommand::Off),
        [kw, n, unit, ..]
            if matches!(*kw, "every" | "each" | "in") && duration_ms(n, unit).is_some() =>
        {
            (format!("{kw} {n}{unit}"), 3)
        }
        [kw, d, ..] if matches!(*kw, "every" | "each" | "in") => (format!("{kw} {d}"), 2),
        [d, ..] if parse_duration(d).is_some() => (format!("every {d}"), 1),
        _ => (DEFAULT_HEARTBEAT.to_owned(), 0),
    };
    let prompt = words[taken..].join(" ");
    Some(HeartbeatCommand::Set {
        schedule,
        prompt: if prompt.is_empty() {
            DEFAULT_HEARTBEAT_PROMPT.to_owned()
        } else {
            prompt
        },
    })
}

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
    pub prompt: String,
    pub delivery: Delivery,
    /// The job after this firing: `{jobId, schedule, status, runCount, nextRunAt, lastRunAt}`.
    pub details: serde_json::Value,
    /// The firing finished the job (a one-shot completed): its status changed.
    pub completed: bool,
}

impl Due {
    /// How the prompt is kept in the session file: a shown `custom_message` with the details.
    pub(crate) fn custom(&self) -> super::Custom {
        super::Custom {
            custom_type: PROMPT_TYPE,
            display: true,
            details: Some(self.details.clone()),
        }
    }
}

/// A job's `schedule` field: `{kind, expression, intervalMs?}`.
fn schedule_json(j: &Job) -> serde_json::Value {
    let mut schedule = serde_json::json!({ "kind": j.schedule.kind(), "expression": j.expression });
    if let Schedule::Interval { ms } = j.schedule {
        schedule["intervalMs"] = serde_json::json!(ms);
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
    /// returns their deliveries; a one-shot job is completed.
    pub(crate) fn take_due(&mut self, now_ms: u64) -> Vec<Due> {
        let mut due = Vec::new();
        for j in self.jobs.iter_mut().filter(|j| j.status == "active") {
            if j.next_run_ms.is_some_and(|t| t <= now_ms) {
                j.run_count += 1;
                j.last_run_ms = Some(now_ms);
                j.updated_ms = now_ms;
                j.next_run_ms = j.schedule.next_after(now_ms);
                let completed = j.next_run_ms.is_none();
                if completed {
                    j.status = "completed".to_owned();
                }
                let iso = |ms: Option<u64>| ms.map(super::iso_of_millis);
                due.push(Due {
                    prompt: j.prompt.clone(),
                    delivery: j.delivery,
                    details: serde_json::json!({
                        "jobId": j.id, "schedule": schedule_json(j), "status": j.status,
                        "runCount": j.run_count, "nextRunAt": iso(j.next_run_ms),
                        "lastRunAt": iso(j.last_run_ms),
                    }),
                    completed,
                });
            }
        }
        if !due.is_empty() {
            self.prune();
        }
        due
    }

    /// One job record (behaviour spec §5.5).
    fn record(&self, j: &Job) -> serde_json::Value {
        let schedule = schedule_json(j);
        let mut r = serde_json::json!({
            "id": j.id, "status": j.status, "source": j.source.as_str(),
            "deliveryMode": j.delivery.as_str(),
            "activeSessionId": self.owner.session_id, "sessionId": self.owner.session_id,
            "sessionFile": self.owner.session_file, "cwd": self.owner.cwd,
            "prompt": j.prompt, "schedule": schedule,
            "createdAt": super::iso_of_millis(j.created_ms),
            "updatedAt": super::iso_of_millis(j.updated_ms),
            "runCount": j.run_count,
        });
        let optional = [
            ("label", j.label.clone()),
            ("nextRunAt", j.next_run_ms.map(super::iso_of_millis)),
            ("lastRunAt", j.last_run_ms.map(super::iso_of_millis)),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                r[key] = serde_json::json!(v);
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
        let ms = |j: &serde_json::Value, k: &str| j[k].as_str().and_then(super::parse_iso_millis);
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
                    (_, Some(t)) => format!("next at {}", super::iso_of_millis(t)),
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
        use serde_json::json;
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
    use crate::persist::{iso_of_millis, parse_iso_millis};
    use serde_json::{json, Value};

    const NOW: u64 = 1_764_583_200_000; // 2025-12-01T10:00:00Z, a Monday.

    #[test]
    fn the_grammar() {
        let cases: Vec<(&str, Result<Schedule, String>)> = vec![
            (
                "in 5 m",
                Ok(Schedule::Once {
                    at_ms: NOW + 300_000,
                }),
            ),
            (
                "in 2h",
                Ok(Schedule::Once {
                    at_ms: NOW + 7_200_000,
                }),
            ),
            (
                "in 1 day",
                Ok(Schedule::Once {
                    at_ms: NOW + 86_400_000,
                }),
            ),
            ("every 10s", Ok(Schedule::Interval { ms: 10_000 })),
            ("each 5 min", Ok(Schedule::Interval { ms: 300_000 })),
            ("Every 1 hour", Ok(Schedule::Interval { ms: 3_600_000 })),
            ("10m", Ok(Schedule::Interval { ms: 600_000 })),
            ("every 9s", Err(MIN_INTERVAL.into())),
            ("5s", Err(MIN_INTERVAL.into())),
            ("every 0m", Err("Invalid interval: 0m".into())),
            ("every soon", Err("Invalid interval: soon".into())),
            ("in forever", Err("Invalid duration: forever".into())),
            (
                "at 2025-12-02T08:30:00Z",
                Ok(Schedule::Once {
                    at_ms: parse_iso_millis("2025-12-02T08:30:00Z").unwrap(),
                }),
            ),
            (
                "at 2025-12-02T08:30",
                Ok(Schedule::Once {
                    at_ms: parse_iso_millis("2025-12-02T08:30:00Z").unwrap(),
                }),
            ),
            (
                "at 2025-12-25",
                Ok(Schedule::Once {
                    at_ms: parse_iso_millis("2025-12-25T00:00:00Z").unwrap(),
                }),
            ),
            (
                "at 2020-01-01T00:00:00Z",
                Err("Scheduled time is in the past: 2020-01-01T00:00:00Z".into()),
            ),
            ("at tomorrow", Err("Invalid date: tomorrow".into())),
            (
                "not a schedule",
                Err("Invalid schedule: not a schedule".into()),
            ),
            ("61 * * * *", Err("Invalid schedule: 61 * * * *".into())),
            ("* * *", Err("Invalid schedule: * * *".into())),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text, NOW), want, "{text}");
        }
    }

    #[test]
    fn cron_expressions_and_aliases_find_their_next_minute() {
        let next = |expr: &str| {
            let Schedule::Cron(c) = parse(expr, NOW).unwrap() else {
                panic!("{expr}")
            };
            iso_of_millis(c.next_after(NOW).unwrap())
        };
        let cases = [
            ("* * * * *", "2025-12-01T10:01:00.000Z"),
            ("*/15 * * * *", "2025-12-01T10:15:00.000Z"),
            ("30 9 * * *", "2025-12-02T09:30:00.000Z"),
            ("0 12 * * mon-fri", "2025-12-01T12:00:00.000Z"),
            ("0 0 * * sun", "2025-12-07T00:00:00.000Z"),
            ("0 0 * * 7", "2025-12-07T00:00:00.000Z"),
            ("0 0 1 jan *", "2026-01-01T00:00:00.000Z"),
            ("0 8 13 * fri", "2025-12-05T08:00:00.000Z"),
            ("5,10 10 1 12 *", "2025-12-01T10:05:00.000Z"),
            ("@hourly", "2025-12-01T11:00:00.000Z"),
            ("@daily", "2025-12-02T00:00:00.000Z"),
            ("@midnight", "2025-12-02T00:00:00.000Z"),
            ("@weekly", "2025-12-07T00:00:00.000Z"),
            ("@monthly", "2026-01-01T00:00:00.000Z"),
            ("@yearly", "2026-01-01T00:00:00.000Z"),
            ("@annually", "2026-01-01T00:00:00.000Z"),
        ];
        for (expr, want) in cases {
            assert_eq!(next(expr), want, "{expr}");
        }
        let Schedule::Cron(c) = parse("0 0 30 2 *", NOW).unwrap() else {
            panic!()
        };
        assert_eq!(c.next_after(NOW), None, "February 30th never comes");
    }

    #[test]
    fn next_firings_coalesce_missed_ticks() {
        let every = Schedule::Interval { ms: 60_000 };
        assert_eq!(every.next_after(NOW + 3_600_000), Some(NOW + 3_660_000));
        let once = Schedule::Once { at_ms: NOW + 5 };
        assert_eq!(once.next_after(NOW), Some(NOW + 5));
        assert_eq!(once.next_after(NOW + 5), None);
        assert_eq!((once.kind(), every.kind()), ("once", "interval"));
    }

    #[test]
    fn heartbeat_commands() {
        let set = |schedule: &str, prompt: &str| {
            Some(HeartbeatCommand::Set {
                schedule: schedule.into(),
                prompt: prompt.into(),
            })
        };
        let cases = vec![
            ("/heartbeat", Some(HeartbeatCommand::Status)),
            ("/heartbeat status", Some(HeartbeatCommand::Status)),
            (" /heartbeat off ", Some(HeartbeatCommand::Off)),
            (
                "/heartbeat every 10s check the build",
                set("every 10s", "check the build"),
            ),
            ("/heartbeat every 10 s check", set("every 10s", "check")),
            (
                "/heartbeat each 2h",
                set("each 2h", DEFAULT_HEARTBEAT_PROMPT),
            ),
            ("/heartbeat 10m look again", set("every 10m", "look again")),
            ("/heartbeat look around", set("every 5m", "look around")),
            ("/heartbeats", None),
            ("hello /heartbeat", None),
        ];
        for (text, want) in cases {
            assert_eq!(heartbeat_command(text), want, "{text}");
        }
    }

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
        use serde_json::json;
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
        let sources: Vec<&str> = listed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["source"].as_str().unwrap())
            .collect();
        assert_eq!(sources, ["heartbeat", "rlm_heartbeat", "rlm_heartbeat"]);
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
            .take_due(NOW + 20_000)
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
            let payload = serde_json::json!({"instruction": format!("p{i}"), "interval": "in 1m", "delivery_mode": "follow_up"});
            request(&mut jobs, "create", payload, NOW).unwrap();
        }
        let due = jobs.take_due(NOW + 60_000);
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
            serde_json::json!({"instruction": "late", "interval": "in 1m"}),
            NOW,
        )
        .unwrap();
        let id = created["job"]["id"].clone();
        request(
            &mut jobs,
            "update",
            serde_json::json!({"id": id, "status": "pause"}),
            NOW,
        )
        .unwrap();
        assert!(jobs.take_due(NOW + 120_000).is_empty());
        request(
            &mut jobs,
            "update",
            serde_json::json!({"id": id, "status": "resume"}),
            NOW + 120_000,
        )
        .unwrap();
        assert_eq!(fired(jobs.take_due(NOW + 120_000)), vec![steer("late")]);
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
        assert!(jobs.take_due(NOW + 9_999).is_empty());
        // An hour late: one firing, then the next tick counts from now.
        let tick = jobs.take_due(NOW + 3_600_000);
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
        let once = jobs.take_due(NOW + 60_000);
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
}
