//! Time, said once: the wall clock, the schedules' clock (the wall clock sped up by a test
//! hook), ISO 8601 formatting and parsing, and civil dates. A leaf: it uses no other module of
//! the crate, so everything that stamps, parses or schedules agrees on one clock and one format.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Now in UTC as ISO 8601 with milliseconds (`2026-12-01T10:00:00.250Z`): session entries,
/// goal and gate stamps.
pub(crate) fn now_iso() -> String {
    iso_of_millis(now_ms())
}

/// Now in UTC as ISO 8601 to the second (`2026-11-29T16:55:05Z`): subagent receipts.
pub(crate) fn now_iso_secs() -> String {
    let iso = iso_of_millis(now_ms() / 1000 * 1000);
    format!("{}Z", &iso[..19])
}

/// Today's date in UTC as `YYYY-MM-DD` (the system prompt's date).
pub(crate) fn today_utc() -> String {
    iso_of_millis(now_ms())[..10].to_owned()
}

/// `ms` since the epoch as ISO 8601 in UTC with milliseconds.
pub(crate) fn iso_of_millis(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60,
        ms % 1000
    )
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fff]Z` (also `+00:00`, or no zone).
pub(crate) fn parse_iso_millis(iso: &str) -> Option<u64> {
    let b = iso.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| iso.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, s) = (n(11..13)?, n(14..16)?, n(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &iso[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(char::is_ascii_digit).collect();
        rest = &frac[digits.len()..];
        let padded = format!("{digits:0<3}");
        ms = padded.get(..3)?.parse::<i64>().ok()?;
    }
    if !matches!(rest, "Z" | "+00:00" | "") {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    let total = ((days * 86_400 + h * 3600 + mi * 60 + s) * 1000) + ms;
    u64::try_from(total).ok()
}

/// Howard Hinnant's days-to-civil algorithm: (year, month, day) of a day count since
/// 1970-01-01 (proleptic Gregorian).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The inverse of `civil_from_days`.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// How much faster than the wall clock schedules run: `PRIME_AGENT_SCHEDULE_TIME_SCALE`
/// (a test hook, 1 to 1000, default 1), read once and counted from the first reading, so a
/// test sees an `every 10s` job fire without waiting ten seconds while the grammar and its
/// limits stay the real ones.
fn schedule_clock() -> (u64, u64) {
    static CLOCK: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
    *CLOCK.get_or_init(|| {
        let scale = std::env::var("PRIME_AGENT_SCHEDULE_TIME_SCALE")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|s| (1..=1000).contains(s))
            .unwrap_or(1);
        (now_ms(), scale)
    })
}

/// The time schedules are set and fired by (milliseconds since the epoch, scaled).
pub(crate) fn schedule_now_ms() -> u64 {
    let (start, scale) = schedule_clock();
    start + now_ms().saturating_sub(start) * scale
}

/// The real wait until schedule time `due_ms`.
pub(crate) fn schedule_wait(due_ms: u64) -> Duration {
    let (_, scale) = schedule_clock();
    Duration::from_millis(due_ms.saturating_sub(schedule_now_ms()).div_ceil(scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_timestamps_round_trip_and_bad_ones_are_refused() {
        for ms in [0, 1_764_583_200_250, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(parse_iso_millis(&iso_of_millis(ms)), Some(ms), "{ms}");
        }
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_007, "2000-02-29T00:00:00.007Z"),
            (1_764_583_200_250, "2025-12-01T10:00:00.250Z"),
            (1_796_166_912_123, "2026-12-01T23:15:12.123Z"),
        ];
        for (ms, iso) in cases {
            assert_eq!(iso_of_millis(ms), iso);
        }
        assert_eq!(
            parse_iso_millis("2025-12-01T10:00:00Z"),
            Some(1_764_583_200_000)
        );
        assert_eq!(
            parse_iso_millis("2025-12-01T10:00:00.5+00:00"),
            Some(1_764_583_200_500)
        );
        for bad in [
            "",
            "2025-13-01T10:00:00Z",
            "yesterday",
            "2025-12-01T10:00:00+02:00",
        ] {
            assert_eq!(parse_iso_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn civil_dates_both_ways() {
        let cases = [
            (0, (1970, 1, 1)),
            (20_421, (2025, 11, 29)),
            (11_016, (2000, 2, 29)),
            (-1, (1969, 12, 31)),
        ];
        for (days, ymd) in cases {
            assert_eq!(civil_from_days(days), ymd);
            assert_eq!(days_from_civil(ymd.0, ymd.1, ymd.2), days);
        }
    }

    #[test]
    fn now_in_each_format() {
        let (iso, secs, day) = (now_iso(), now_iso_secs(), today_utc());
        assert!(iso.ends_with('Z') && iso.len() == 24, "{iso}");
        assert!(secs.ends_with('Z') && secs.len() == 20, "{secs}");
        assert_eq!(day.len(), 10);
        assert!(schedule_now_ms() >= now_ms() - 1000);
    }
}
