//! The schedule grammar of heartbeats (behaviour spec §5.5), pure: `in <n> <unit>` (once),
//! `every|each <n> <unit>` (an interval of at least 10 s), `at <ISO date>` (once, in the
//! future), else a five-field cron expression or one of its aliases; a bare duration (`10m`)
//! means `every 10m`. Times are milliseconds since the epoch, given by the caller.

pub(crate) const MIN_INTERVAL: &str = "Recurring interval must be at least 10 seconds";

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
        let at_ms = crate::base::time::parse_iso_millis(rest)
            .or_else(|| crate::base::time::parse_iso_millis(&format!("{rest}:00Z")))
            .or_else(|| crate::base::time::parse_iso_millis(&format!("{rest}T00:00:00Z")))
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
            let (_, month, day) = crate::base::time::civil_from_days(days);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::time::{iso_of_millis, parse_iso_millis};

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
}
