//! Waiting out a usage limit (settings `retry.provider.waitForUsage.*`, as upstream): when a
//! 429 outlasts the ordinary retries, or names a wait longer than `maxRetryDelayMs`, the call
//! waits for the limit to reset, within hard bounds, so an unattended run survives a spent
//! quota window. Pure: when to wait and for how long, the texts, and the reset time a server
//! names in its answer. `HttpClient::stream` does the waiting (`AbortFlag::sleep`, which a
//! cancel ends at once).
//!
//! Not built: upstream's parking of a session until a reset beyond the bound
//! (`pauseUntilReset`, `maxPauseMs`, `maxParks`); such a limit fails the call (or fails it over
//! to `providerBackupModel`).

use std::time::Duration;

use serde_json::Value;

use crate::config::settings::WaitForUsage;

/// After a failed ping, what the wait does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    Wait(Duration),
    /// The bound is reached: the text says which (upstream's words).
    GiveUp(String),
}

/// The decision for ping `ping` (1-based) after `elapsed` of waiting, when the provider named
/// `reset` (or did not): the named time if it fits the bound, else blind pings that double from
/// `baseDelayMs` up to `maxDelayMs`, never past the bound.
pub(crate) fn decide(
    ping: u32,
    elapsed: Duration,
    reset: Option<Duration>,
    policy: &WaitForUsage,
) -> Decision {
    if ping > policy.max_attempts {
        return Decision::GiveUp(format!(
            "Provider recovery wait gave up after {} pings (retry.provider.waitForUsage.maxAttempts)",
            policy.max_attempts
        ));
    }
    let bound = Duration::from_millis(policy.max_wait_ms);
    let Some(remaining) = bound.checked_sub(elapsed).filter(|r| !r.is_zero()) else {
        return Decision::GiveUp(format!(
            "Provider recovery wait exceeded its bound of {} (retry.provider.waitForUsage.maxWaitMs)",
            duration_text(bound)
        ));
    };
    if let Some(reset) = reset {
        if reset > remaining {
            return Decision::GiveUp(format!(
                "Provider reported recovery in {}, beyond the configured wait bound of {} (retry.provider.waitForUsage.maxWaitMs)",
                duration_text(reset),
                duration_text(bound)
            ));
        }
        return Decision::Wait(reset);
    }
    let ping_delay = Duration::from_millis(policy.base_delay_ms)
        .checked_mul(2u32.saturating_pow(ping - 1))
        .unwrap_or(Duration::MAX)
        .min(Duration::from_millis(policy.max_delay_ms));
    Decision::Wait(ping_delay.min(remaining))
}

/// A wait as upstream writes it: `45s` (at least 1 s), `12m`, `2.5h`.
pub(crate) fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 60_000 {
        format!("{}s", ((ms as f64 / 1000.0).round() as u64).max(1))
    } else if ms < 3_600_000 {
        format!("{}m", (ms as f64 / 60_000.0).round() as u64)
    } else {
        format!("{:.1}h", ms as f64 / 3_600_000.0)
    }
}

/// The reset time a 429's body names: Google's `RetryInfo` (`"retryDelay": "17s"`), else
/// words such as ChatGPT's `Try again in ~7272 min.` or `resets in 5 hours`.
pub(crate) fn reset_in_body(body: &str) -> Option<Duration> {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let details = v.pointer("/error/details").and_then(Value::as_array);
        let delay = details
            .into_iter()
            .flatten()
            .find_map(|d| d.get("retryDelay").and_then(Value::as_str));
        if let Some(secs) = delay.and_then(|d| d.strip_suffix('s')?.parse::<f64>().ok()) {
            return Duration::try_from_secs_f64(secs).ok();
        }
    }
    reset_in_text(body)
}

/// `try again in ~N min`, `resets in N hours`, `available in N seconds` (a number and a unit
/// within a sentence after one of those words).
pub(crate) fn reset_in_text(text: &str) -> Option<Duration> {
    let lower = text.to_ascii_lowercase();
    let start = ["try again", "reset", "available"]
        .iter()
        .filter_map(|k| lower.find(k))
        .min()?;
    let sentence = lower[start..].split('.').next().unwrap_or("");
    let mut rest = sentence;
    while let Some(at) = rest.find(|c: char| c.is_ascii_digit()) {
        let digits = &rest[at..];
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        let n: u64 = digits[..end].parse().ok()?;
        let unit: String = digits[end..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        let secs = match unit.trim_end_matches('s') {
            "second" | "sec" => Some(1),
            "minute" | "min" => Some(60),
            "hour" | "hr" => Some(3600),
            "day" => Some(86_400),
            _ => None,
        };
        if let Some(secs) = secs {
            return Some(Duration::from_secs(n.saturating_mul(secs)));
        }
        rest = &digits[end..];
    }
    None
}

/// The wait a `Retry-After` header names: seconds (`120`, `0.5`); an HTTP date is not read.
pub(crate) fn retry_after_header(value: &str) -> Option<Duration> {
    let secs = value.trim().parse::<f64>().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: WaitForUsage = WaitForUsage {
        enabled: true,
        base_delay_ms: 1_000,
        max_delay_ms: 300_000,
        max_attempts: 30,
        max_wait_ms: 900_000,
    };

    #[test]
    fn decisions_within_the_bounds() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let cases = [
            (1, ms(0), Some(ms(50)), Decision::Wait(ms(50))),
            (1, ms(0), None, Decision::Wait(s(1))),
            (3, ms(0), None, Decision::Wait(s(4))),
            (20, ms(0), None, Decision::Wait(s(300))),
            (2, s(899), None, Decision::Wait(s(1))),
            (1, ms(0), Some(s(3600)), Decision::GiveUp(
                "Provider reported recovery in 1.0h, beyond the configured wait bound of 15m (retry.provider.waitForUsage.maxWaitMs)".into())),
            (1, s(900), None, Decision::GiveUp(
                "Provider recovery wait exceeded its bound of 15m (retry.provider.waitForUsage.maxWaitMs)".into())),
            (31, ms(0), Some(ms(1)), Decision::GiveUp(
                "Provider recovery wait gave up after 30 pings (retry.provider.waitForUsage.maxAttempts)".into())),
        ];
        for (ping, elapsed, reset, want) in cases {
            assert_eq!(
                decide(ping, elapsed, reset, &POLICY),
                want,
                "{ping} {elapsed:?} {reset:?}"
            );
        }
        let huge = WaitForUsage {
            base_delay_ms: u64::MAX,
            max_delay_ms: u64::MAX,
            max_wait_ms: u64::MAX,
            ..POLICY
        };
        assert!(matches!(decide(30, ms(0), None, &huge), Decision::Wait(_)));
    }

    #[test]
    fn durations_and_named_resets() {
        let s = Duration::from_secs;
        assert_eq!(duration_text(Duration::from_millis(200)), "1s");
        assert_eq!(duration_text(s(45)), "45s");
        assert_eq!(duration_text(s(720)), "12m");
        assert_eq!(duration_text(s(9000)), "2.5h");
        let cases = [
            (
                r#"{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"17s"}]}}"#,
                Some(s(17)),
            ),
            (
                r#"{"error":{"message":"You have hit your ChatGPT usage limit (plus plan). Try again in ~7272 min."}}"#,
                Some(s(7272 * 60)),
            ),
            ("Your quota resets in 5 hours.", Some(s(5 * 3600))),
            (
                "limit of 100 requests per minute; try again in 30 seconds",
                Some(s(30)),
            ),
            ("rate limited in test", None),
            ("available in 3 apples", None),
        ];
        for (body, want) in cases {
            assert_eq!(reset_in_body(body), want, "{body}");
        }
        assert_eq!(retry_after_header(" 120 "), Some(s(120)));
        assert_eq!(retry_after_header("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(retry_after_header("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after_header("-1"), None);
    }
}
