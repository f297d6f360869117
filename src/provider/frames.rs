//! How a streamed answer's body is cut into events: server-sent events for most wire APIs,
//! AWS's binary event-stream for Bedrock. Either way a wire API's decoder receives `SseEvent`s
//! (an event name and its text), so one streaming loop (`http::HttpClient::stream`) serves all.

use super::bedrock::event_stream::{FrameDecoder, Message};
use super::sse::{SseDecoder, SseEvent, MAX_EVENT_BYTES};
use super::ProviderError;
use crate::base::json::json;

/// The framing of an answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `text/event-stream`.
    Sse,
    /// `application/vnd.amazon.eventstream`: each message becomes an event named by its
    /// `:event-type` header (`contentBlockDelta`, …) with its payload as the data; an
    /// exception message is named by its `:exception-type` (`throttlingException`, …), and an
    /// error message is the event `error` with `{"code", "message"}` from its headers.
    AwsEventStream,
}

/// One answer's decoder.
pub(crate) enum Frames {
    Sse(SseDecoder),
    Aws(FrameDecoder, Vec<Message>),
}

impl Frames {
    pub(crate) fn new(framing: Framing) -> Frames {
        match framing {
            Framing::Sse => Frames::Sse(SseDecoder::new()),
            Framing::AwsEventStream => Frames::Aws(FrameDecoder::new(), Vec::new()),
        }
    }

    /// Feeds one read's bytes; complete events are appended to `out`. An error is final: the
    /// stream cannot be read on.
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<SseEvent>,
    ) -> Result<(), ProviderError> {
        match self {
            Frames::Sse(sse) => {
                sse.feed(bytes, out);
                if sse.overflowed() {
                    return Err(ProviderError::Stream(format!(
                        "the model server sent a stream event larger than {} MiB",
                        MAX_EVENT_BYTES >> 20
                    )));
                }
                Ok(())
            }
            Frames::Aws(frames, messages) => {
                let result = frames.feed(bytes, messages);
                out.extend(messages.drain(..).map(aws_event));
                result.map_err(|e| ProviderError::Stream(e.to_string()))
            }
        }
    }

    /// The body ended: the events still pending, or an error for a message cut off.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        match self {
            Frames::Sse(sse) => {
                sse.finish(out);
                Ok(())
            }
            Frames::Aws(frames, _) => frames
                .finish()
                .map_err(|e| ProviderError::Stream(e.to_string())),
        }
    }

    /// Hands a delivered event back for reuse (SSE only).
    pub(crate) fn recycle(&mut self, event: SseEvent) {
        if let Frames::Sse(sse) = self {
            sse.recycle(event);
        }
    }
}

/// One event-stream message as an event (see `Framing::AwsEventStream`).
fn aws_event(m: Message) -> SseEvent {
    let text = |bytes: Vec<u8>| {
        String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    };
    match m.header(":message-type") {
        Some("exception") => SseEvent {
            event: m
                .header(":exception-type")
                .unwrap_or("exception")
                .to_owned(),
            data: text(m.payload),
        },
        Some("error") => SseEvent {
            event: "error".to_owned(),
            data: json!({"code": m.header(":error-code"), "message": m.header(":error-message")})
                .to_string(),
        },
        _ => SseEvent {
            event: m.header(":event-type").unwrap_or("").to_owned(),
            data: text(m.payload),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::bedrock::event_stream::encode;

    #[test]
    fn event_stream_messages_become_named_events() {
        let body = [
            encode(
                &[
                    (":event-type", "contentBlockDelta"),
                    (":content-type", "application/json"),
                    (":message-type", "event"),
                ],
                br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
            ),
            encode(
                &[
                    (":exception-type", "throttlingException"),
                    (":message-type", "exception"),
                ],
                br#"{"message":"slow down"}"#,
            ),
            encode(
                &[
                    (":message-type", "error"),
                    (":error-code", "InternalFailure"),
                    (":error-message", "broke"),
                ],
                b"",
            ),
        ]
        .concat();
        let mut frames = Frames::new(Framing::AwsEventStream);
        let mut out = Vec::new();
        frames.feed(&body, &mut out).expect("decodes");
        frames.finish(&mut out).expect("whole");
        let got: Vec<(&str, &str)> = out
            .iter()
            .map(|e| (e.event.as_str(), e.data.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "contentBlockDelta",
                    r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#
                ),
                ("throttlingException", r#"{"message":"slow down"}"#),
                ("error", r#"{"code":"InternalFailure","message":"broke"}"#),
            ]
        );
        let mut cut = Frames::new(Framing::AwsEventStream);
        cut.feed(&body[..5], &mut out).expect("partial");
        assert!(cut
            .finish(&mut out)
            .unwrap_err()
            .to_string()
            .contains("ended inside a message"));
    }
}
