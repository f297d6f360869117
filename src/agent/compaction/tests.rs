//! `compact` against a recording fake model; the pure parts are tested in their own files.

use std::sync::Mutex;

use crate::base::json::json;

use super::*;
use crate::provider::{
    AssistantMessage, FinishReason, Reply, StreamEvent, ToolCall, ToolResultMessage, Usage,
};

/// Answers each request with the next of `answers` (`Err` text: the call fails) and keeps the
/// requests' system prompt, user text and output budget.
struct Fake {
    answers: Mutex<Vec<Result<String, String>>>,
    seen: Mutex<Vec<(String, String, Option<u64>)>>,
}

impl Fake {
    fn new(answers: Vec<Result<&str, &str>>) -> Fake {
        Fake {
            answers: Mutex::new(
                answers
                    .into_iter()
                    .rev()
                    .map(|a| a.map(str::to_owned).map_err(str::to_owned))
                    .collect(),
            ),
            seen: Mutex::default(),
        }
    }
}

impl Provider for Fake {
    fn label(&self) -> String {
        "fake/fake".into()
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
        _abort: &AbortFlag,
        _on_event: &mut dyn FnMut(StreamEvent),
    ) -> Result<Reply, ProviderError> {
        let Some(Message::User { text, .. }) = request.messages.last() else {
            panic!("a summary request is one user message");
        };
        assert_eq!(request.messages.len(), 1);
        assert!(request.tools.is_empty());
        self.seen.lock().unwrap().push((
            request.system.to_owned(),
            text.clone(),
            request.max_tokens,
        ));
        match self.answers.lock().unwrap().pop().expect("an answer") {
            Ok(text) => Ok(Reply {
                message: AssistantMessage {
                    text,
                    ..Default::default()
                },
                usage: Usage::default(),
                finish: FinishReason::Stop,
            }),
            Err(e) => Err(ProviderError::Stream(e)),
        }
    }
}

fn user(text: &str) -> Message {
    Message::User {
        text: text.to_owned(),
        images: vec![],
    }
}

fn assistant(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        text: text.to_owned(),
        ..Default::default()
    })
}

/// 40 chars of `tag` repeated: 10 tokens.
fn t10(tag: char) -> String {
    tag.to_string().repeat(40)
}

fn settings(keep: u64) -> Settings {
    Settings {
        keep_recent_tokens: keep,
        reserve_tokens: 1000,
        ..Settings::default()
    }
}

fn job<'a>(
    fake: &'a Fake,
    abort: &'a AbortFlag,
    keep: u64,
    instructions: Option<&'a str>,
) -> Job<'a> {
    Job {
        provider: fake,
        agent: "main",
        thinking: Thinking::Off,
        settings: settings(keep),
        instructions,
        abort,
        trace: None,
    }
}

#[test]
fn compacts_the_old_part_and_keeps_the_recent_one() {
    let fake = Fake::new(vec![Ok("SUMMARY ONE"), Ok("SUMMARY TWO")]);
    let abort = AbortFlag::new();
    let mut messages = vec![
        user(&t10('a')),
        Message::Assistant(AssistantMessage {
            text: t10('b'),
            tool_calls: vec![ToolCall {
                id: "1".into(),
                name: "write".into(),
                arguments: json!({"path": "src/x.rs", "content": ""}),
            }],
            ..Default::default()
        }),
        Message::ToolResult(ToolResultMessage {
            call_id: "1".into(),
            name: "write".into(),
            text: "ok".into(),
            is_error: false,
            images: vec![],
        }),
        assistant(&t10('c')),
        user(&t10('d')),
        assistant(&t10('e')),
    ];
    let mut history = History {
        last_usage: Some((999, 6)),
        ..History::default()
    };
    let done = compact(
        &job(&fake, &abort, 20, Some("focus on the parser")),
        &mut messages,
        &mut history,
        1234,
        &mut || vec!["df".to_owned()],
    )
    .unwrap();
    assert_eq!(done.tokens_before, 1234);
    assert_eq!(done.first_kept_old, 4);
    assert_eq!(done.moved(5), Some(2));
    assert_eq!(done.moved(3), None);
    assert_eq!(
        done.summary,
        "SUMMARY ONE\n\n<modified-files>\nsrc/x.rs\n</modified-files>"
    );
    assert_eq!(messages.len(), 3);
    let Message::User { text, .. } = &messages[0] else {
        panic!()
    };
    assert!(text.starts_with("The conversation history before this point was compacted into the following summary:\n\n<summary>\nSUMMARY ONE\n"));
    assert!(text.contains("These names are still defined: df."));
    assert_eq!(messages[1], user(&t10('d')));
    assert_eq!(history.last_usage, None);
    {
        let seen = fake.seen.lock().unwrap();
        let (system, text, budget) = &seen[0];
        assert_eq!(system, prompt::SYSTEM);
        assert_eq!(*budget, Some(800));
        assert!(text.starts_with(&format!("<conversation>\n[User]: {}", t10('a'))));
        assert!(text.contains("[Assistant tool calls]: write("));
        assert!(text.contains("<user-instructions>\nfocus on the parser\n</user-instructions>"));
        assert!(
            !text.contains(&t10('d')),
            "kept messages are not summarised"
        );
    }

    // A second compaction builds on the first summary and keeps its file list.
    messages.push(user(&t10('f')));
    messages.push(assistant(&t10('g')));
    let done = compact(
        &job(&fake, &abort, 20, None),
        &mut messages,
        &mut history,
        50,
        &mut Vec::new,
    )
    .unwrap();
    assert_eq!(done.first_kept_old, 3);
    assert!(done.summary.starts_with("SUMMARY TWO") && done.summary.contains("src/x.rs"));
    let seen = fake.seen.lock().unwrap();
    let (_, text, _) = &seen[1];
    assert!(text.contains("<previous-summary>\nSUMMARY ONE\n\n<modified-files>"));
    assert!(text.contains(&format!("[User]: {}", t10('d'))));
    assert!(
        !text.contains("compacted into the following summary"),
        "the old summary message is not re-serialised"
    );
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1], user(&t10('f')));
}

#[test]
fn a_split_turn_is_summarised_in_two_parts() {
    let fake = Fake::new(vec![Ok("HISTORY"), Ok("PREFIX")]);
    let abort = AbortFlag::new();
    let mut messages = vec![
        user(&t10('a')),
        assistant(&t10('b')),
        user(&t10('c')),
        assistant(&t10('d')),
        assistant(&t10('e')),
    ];
    let mut history = History::default();
    let done = compact(
        &job(&fake, &abort, 20, None),
        &mut messages,
        &mut history,
        0,
        &mut Vec::new,
    )
    .unwrap();
    assert_eq!(done.first_kept_old, 3);
    assert_eq!(
        done.summary,
        "HISTORY\n\n---\n\n**Turn Context (split turn):**\n\nPREFIX"
    );
    let seen = fake.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].1.contains(&t10('a')) && !seen[0].1.contains(&t10('c')));
    assert!(seen[1].1.contains(&t10('c')) && seen[1].1.contains("## Original Request"));
    assert_eq!(seen[1].2, Some(500));
    assert_eq!(messages[1], assistant(&t10('d')));
}

#[test]
fn a_failed_summary_leaves_the_conversation_as_it_was() {
    let fake = Fake::new(vec![Err("503 overloaded")]);
    let abort = AbortFlag::new();
    let mut messages = vec![
        user(&t10('a')),
        assistant(&t10('b')),
        user(&t10('c')),
        assistant(&t10('d')),
    ];
    let before = messages.clone();
    let mut history = History {
        last_usage: Some((7, 4)),
        ..History::default()
    };
    let err = compact(
        &job(&fake, &abort, 20, None),
        &mut messages,
        &mut history,
        0,
        &mut Vec::new,
    )
    .unwrap_err();
    assert_eq!(
        err,
        Failure::Summary("503 overloaded".into(), "model_protocol")
    );
    assert_eq!(messages, before);
    assert_eq!(history.last_usage, Some((7, 4)));
    assert!(history.summary.is_none());

    // Nothing old enough: no model call at all.
    let err = compact(
        &job(&fake, &abort, 1000, None),
        &mut messages,
        &mut history,
        0,
        &mut Vec::new,
    )
    .unwrap_err();
    assert_eq!(err, Failure::Nothing);
}

#[test]
fn accounting_settings_and_commands() {
    let messages = vec![user(&t10('a')), assistant(&t10('b')), user(&t10('c'))];
    let mut history = History {
        fixed_tokens: 7,
        ..History::default()
    };
    // No reply counted yet: the fixed part (system prompt and tools) and every message are
    // estimated.
    assert_eq!(context_tokens(&history, &messages), 7 + 30);
    history.record_reply(500, &messages[..2]);
    assert_eq!(context_tokens(&history, &messages), 510);
    history.record_reply(0, &messages);
    assert_eq!(
        history.last_usage,
        Some((500, 2)),
        "a reply without usage keeps the count"
    );
    // The server counted 500 where chars/4 says 7 + 20: the scale, capped at MAX_SCALE, is
    // what the estimate uses once the reported count is gone (after a compaction).
    assert_eq!(history.scale(), MAX_SCALE);
    history.last_usage = None;
    assert_eq!(context_tokens(&history, &messages), 2 * 37);
    // (reported, fixed, messages counted) -> scale: never below 1, none without a fixed part.
    let cases: &[(u64, u64, usize, Option<f64>)] = &[
        (54, 7, 2, Some(2.0)),
        (34, 7, 2, Some(34.0 / 27.0)),
        (10, 7, 2, Some(1.0)),
        (34, 0, 2, None),
        (0, 7, 2, None),
    ];
    for &(reported, fixed, n, want) in cases {
        let mut h = History {
            fixed_tokens: fixed,
            ..History::default()
        };
        h.record_reply(reported, &messages[..n]);
        assert_eq!(h.scale, want, "{reported} {fixed} {n}");
    }

    let s = Settings::default();
    assert!(!s.over_threshold(128_000 - 16_384, Some(128_000)));
    assert!(s.over_threshold(128_000 - 16_383, Some(128_000)));
    assert!(!s.over_threshold(1_000_000, None));
    let mut s = Settings::default();
    s.apply(
        &json!({"compaction": {"enabled": false, "reserveTokens": 5, "keepRecentTokens": "x"}}),
    );
    assert_eq!(
        (s.enabled, s.reserve_tokens, s.keep_recent_tokens),
        (false, 5, 20_000)
    );
    assert!(!s.over_threshold(1_000_000, Some(10)));
}

#[test]
fn control_schedules_only_during_a_turn() {
    let c = Control::default();
    assert_eq!(
        c.request(None),
        json!({"scheduled": false, "reason": NO_ACTIVE_TURN})
    );
    c.set_running(true);
    c.set_usage(250, Some(1000));
    assert_eq!(c.request(Some("x".into())), json!({"scheduled": true}));
    assert_eq!(
        c.status(),
        json!({"tokens": 250, "context_window": 1000, "percent": 25.0, "scheduled": true})
    );
    assert_eq!(c.take_scheduled(), Some(Some("x".into())));
    assert_eq!(c.take_scheduled(), None);
}

#[test]
fn the_window_and_the_fixed_part_bound_what_a_compaction_keeps() {
    // (window, fixed tokens) -> (reserveTokens, keepRecentTokens) from the defaults
    // (16,384 and 20,000).
    // (window, fixed, scale, (reserve, keep))
    type Case = (Option<u64>, u64, f64, (u64, u64));
    let cases: &[Case] = &[
        // Large windows: the configured values.
        (Some(200_000), 3_000, 1.0, (16_384, 20_000)),
        (Some(128_000), 3_000, 1.0, (16_384, 20_000)),
        // A 32k window: a fifth of it.
        (Some(32_768), 2_300, 1.0, (8_192, 6_553)),
        // A 4k window with six tools and the kernel section (measured: about 2,300 tokens):
        // half of what is left after the fixed part and the reserve.
        (Some(4_096), 2_300, 1.0, (1_024, 386)),
        (Some(4_096), 0, 1.0, (1_024, 819)),
        // A fixed part that fills the window keeps nothing but the newest message.
        (Some(4_096), 3_500, 1.0, (1_024, 0)),
        (Some(2_048), 2_300, 1.0, (512, 0)),
        // A server that counts a third more than the estimate (Qwen on llama.cpp): the kept
        // part, in estimated tokens, shrinks by as much.
        (Some(4_096), 2_100, 1.3, (1_024, 131)),
        (Some(32_768), 2_300, 1.3, (8_192, 5_040)),
        // No window known: as configured.
        (None, 2_300, 1.0, (16_384, 20_000)),
        (Some(0), 2_300, 1.0, (16_384, 20_000)),
    ];
    for &(window, fixed, scale, want) in cases {
        let s = Settings::default().for_window(window, fixed, scale);
        assert_eq!(
            (s.reserve_tokens, s.keep_recent_tokens),
            want,
            "{window:?} {fixed} {scale}"
        );
    }
}

#[test]
fn automatic_refine_is_due_by_count_or_compaction_and_waits_out_the_cooldown() {
    use crate::config::settings::AutoRefine;
    use std::time::{Duration, Instant};
    let s = AutoRefine {
        turn_interval: 2,
        cooldown_ms: 1_000,
        ..AutoRefine::default()
    };
    let c = Control::default();
    let t0 = Instant::now();
    // Not the main agent at depth 0 with the kernel: never.
    assert_eq!(c.take_auto_refine(&s, 5, t0), None);
    c.set_refine_home();
    assert_eq!(c.take_auto_refine(&s, 1, t0), None);
    assert_eq!(c.take_auto_refine(&s, 2, t0), Some(AutoTrigger::Interval));
    // Due again, held back by the cooldown, then taken once it is over.
    assert_eq!(c.take_auto_refine(&s, 4, t0), None);
    let later = t0 + Duration::from_millis(1_000);
    assert_eq!(
        c.take_auto_refine(&s, 4, later),
        Some(AutoTrigger::Interval)
    );
    // A compaction makes one due; a refine of any trigger starts the counts again.
    c.note_compacted();
    let much_later = later + Duration::from_secs(5);
    assert_eq!(
        c.take_auto_refine(&s, 4, much_later),
        Some(AutoTrigger::Compaction)
    );
    c.note_refined(10);
    let latest = much_later + Duration::from_secs(5);
    assert_eq!(c.take_auto_refine(&s, 11, latest), None);
    let off = AutoRefine {
        enabled: false,
        ..s
    };
    assert_eq!(c.take_auto_refine(&off, 20, latest), None);
}
