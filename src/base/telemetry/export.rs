//! The OTLP/HTTP exporter: configured by the standard `OTEL_*` variables, fed through a
//! bounded queue by `Span`'s drop, run on the `otel-export` thread, flushed at exit within
//! `FLUSH_BOUND`. Nothing here ever blocks the thread that ends a span: a full queue drops
//! the span and counts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender, TrySendError};

use super::otlp::{encode_json, encode_protobuf, Origin};
use super::SpanData;
use crate::base::reaper::{join_by, Joined};

/// How long the exit waits for the last spans to be sent.
pub(crate) const FLUSH_BOUND: Duration = Duration::from_secs(2);

/// The exporter's settings, from the OpenTelemetry SDK environment variables.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    /// The full URL spans are POSTed to.
    pub endpoint: String,
    /// `http/json` instead of `http/protobuf`.
    pub json: bool,
    pub headers: Vec<(String, String)>,
    /// One export request's bound (`OTEL_EXPORTER_OTLP_TIMEOUT`, default 10 s).
    pub timeout: Duration,
    /// The queue's capacity (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2048).
    pub queue: usize,
    /// Most spans per request (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, default 512).
    pub batch: usize,
    /// Longest a finished span waits for its batch (`OTEL_BSP_SCHEDULE_DELAY`, default 5 s).
    pub delay: Duration,
    pub origin: Origin,
}

impl Config {
    /// `None`: nothing is exported (no endpoint, or `OTEL_SDK_DISABLED=true`, or
    /// `OTEL_TRACES_EXPORTER=none`). `var` reads a variable; empty counts as unset.
    pub(crate) fn from_vars(var: &dyn Fn(&str) -> Option<String>) -> Option<Config> {
        let get = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        if get("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) {
            return None;
        }
        // The signal's own endpoint is used as is; `/v1/traces` is appended only to the
        // generic one (OTLP exporter spec, "Endpoint URLs for OTLP/HTTP").
        let endpoint = match get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => url,
            None => format!(
                "{}/v1/traces",
                get("OTEL_EXPORTER_OTLP_ENDPOINT")?.trim_end_matches('/')
            ),
        };
        let protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| get("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".to_owned());
        let json = match protocol.as_str() {
            "http/protobuf" => false,
            "http/json" => true,
            other => {
                log::warn!("OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported (http/protobuf or http/json); traces are not exported");
                return None;
            }
        };
        let mut headers = parse_pairs(&get("OTEL_EXPORTER_OTLP_HEADERS").unwrap_or_default());
        for (k, v) in parse_pairs(&get("OTEL_EXPORTER_OTLP_TRACES_HEADERS").unwrap_or_default()) {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&k));
            headers.push((k, v));
        }
        let number = |name: &str, default: u64| match get(name) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                log::warn!("{name}={v} is not a number; using {default}");
                default
            }),
        };
        let timeout = number(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000),
        );
        let mut resource = vec![("service.name".to_owned(), "prime-agent".to_owned())];
        for (k, v) in parse_pairs(&get("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default()) {
            resource.retain(|(n, _)| *n != k);
            resource.push((k, v));
        }
        if let Some(name) = get("OTEL_SERVICE_NAME") {
            resource.retain(|(n, _)| n != "service.name");
            resource.insert(0, ("service.name".to_owned(), name));
        }
        resource.push((
            "service.version".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ));
        Some(Config {
            endpoint,
            json,
            headers,
            timeout: Duration::from_millis(timeout.max(1)),
            queue: usize::try_from(number("OTEL_BSP_MAX_QUEUE_SIZE", 2048).max(1)).unwrap_or(2048),
            batch: usize::try_from(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512).max(1))
                .unwrap_or(512),
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)),
            origin: Origin {
                resource,
                scope_name: "prime-agent",
                scope_version: env!("CARGO_PKG_VERSION"),
            },
        })
    }
}

/// `k1=v1,k2=v2` (the W3C baggage octets the OTel spec uses for headers and resource
/// attributes), values percent-decoded; malformed entries are skipped.
pub(crate) fn parse_pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = percent_decode(k.trim());
            (!k.is_empty()).then(|| (k, percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` for a log line: without credentials a collector URL may carry (`user:pass@`, the
/// query).
fn shown(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or("");
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

/// The running exporter.
struct Exporter {
    spans: Sender<SpanData>,
    queue: usize,
    /// Spans not exported: the queue was full, or the exit's bound passed first.
    dropped: Arc<AtomicU64>,
    /// The exit's deadline, to the thread.
    stop: Sender<Instant>,
    thread: Mutex<Option<JoinHandle<Totals>>>,
}

/// What the export thread did, logged at exit.
#[derive(Debug, Default)]
struct Totals {
    exported: u64,
    /// Spans of requests that failed (connection, timeout, non-2xx status).
    failed: u64,
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// Whether spans are recorded: an exporter runs.
pub(super) fn active() -> bool {
    EXPORTER.get().is_some()
}

/// Queues a finished span without waiting; a full queue drops it (counted).
pub(super) fn submit(span: SpanData) {
    let Some(e) = EXPORTER.get() else { return };
    match e.spans.try_send(span) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            e.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Starts the exporter if the environment asks for one; with no `OTEL_*` variable this
/// reads a few variables and starts nothing.
pub(crate) fn init_from_env() {
    if let Some(config) = Config::from_vars(&|name| std::env::var(name).ok()) {
        start(config);
    }
}

fn start(config: Config) {
    let (spans, rx) = bounded(config.queue);
    let (stop, stop_rx) = bounded(1);
    let dropped = Arc::new(AtomicU64::new(0));
    let queue = config.queue;
    log::info!(
        "exporting traces to {} ({})",
        shown(&config.endpoint),
        if config.json {
            "http/json"
        } else {
            "http/protobuf"
        }
    );
    let counter = dropped.clone();
    let thread = std::thread::Builder::new()
        .name("otel-export".to_owned())
        .spawn(move || run(&config, &rx, &stop_rx, &counter));
    match thread {
        Ok(thread) => {
            let _ = EXPORTER.set(Exporter {
                spans,
                queue,
                dropped,
                stop,
                thread: Mutex::new(Some(thread)),
            });
        }
        Err(e) => log::warn!("cannot start the trace exporter: {e}"),
    }
}

/// Sends what is queued and stops the exporter, waiting at most `FLUSH_BOUND`; logs how many
/// spans were dropped. A no-op without an exporter.
pub(crate) fn shutdown() {
    let Some(e) = EXPORTER.get() else { return };
    let Some(thread) = e.thread.lock().ok().and_then(|mut t| t.take()) else {
        return;
    };
    let deadline = Instant::now() + FLUSH_BOUND;
    let _ = e.stop.try_send(deadline);
    let totals = match join_by(thread, deadline + Duration::from_millis(100), None) {
        Joined::Done(Ok(totals)) => totals,
        _ => {
            log::warn!("trace export did not finish within {FLUSH_BOUND:?}; the rest is lost");
            Totals::default()
        }
    };
    let dropped = e.dropped.load(Ordering::Relaxed);
    if dropped > 0 || totals.failed > 0 {
        log::warn!(
            "traces: {} spans exported, {dropped} dropped (the export queue of {} was full or the exit bound passed), {} lost to failed requests",
            totals.exported,
            e.queue,
            totals.failed
        );
    } else {
        log::info!("traces: {} spans exported", totals.exported);
    }
}

/// The `otel-export` thread: batches spans and POSTs each batch when it is full or its
/// oldest span has waited `delay`; on stop, sends what is queued before the deadline.
fn run(
    config: &Config,
    rx: &Receiver<SpanData>,
    stop: &Receiver<Instant>,
    dropped: &AtomicU64,
) -> Totals {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(format!("prime-agent/{}", env!("CARGO_PKG_VERSION")))
            .build(),
    );
    let mut totals = Totals::default();
    let mut batch: Vec<SpanData> = Vec::new();
    let mut due: Option<Instant> = None;
    loop {
        let wait = due.map_or(Duration::from_secs(3600), |d| {
            d.saturating_duration_since(Instant::now())
        });
        select! {
            recv(rx) -> span => match span {
                Ok(span) => {
                    batch.push(span);
                    due.get_or_insert_with(|| Instant::now() + config.delay);
                    if batch.len() >= config.batch {
                        post(&agent, config, &mut batch, config.timeout, &mut totals);
                        due = None;
                    }
                }
                Err(_) => return totals,
            },
            recv(stop) -> deadline => {
                let deadline = deadline.unwrap_or_else(|_| Instant::now() + FLUSH_BOUND);
                batch.extend(rx.try_iter());
                while !batch.is_empty() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        break;
                    }
                    let rest = batch.split_off(batch.len().min(config.batch));
                    post(&agent, config, &mut batch, left.min(config.timeout), &mut totals);
                    batch = rest;
                }
                return totals;
            },
            default(wait) => {
                if !batch.is_empty() {
                    post(&agent, config, &mut batch, config.timeout, &mut totals);
                }
                due = None;
            },
        }
    }
}

/// POSTs `batch` (emptied) as one export request.
fn post(
    agent: &ureq::Agent,
    config: &Config,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
    totals: &mut Totals,
) {
    let n = batch.len() as u64;
    let (body, content_type) = if config.json {
        (encode_json(&config.origin, batch), "application/json")
    } else {
        (
            encode_protobuf(&config.origin, batch),
            "application/x-protobuf",
        )
    };
    batch.clear();
    let mut request = agent
        .post(&config.endpoint)
        .header("Content-Type", content_type);
    for (name, value) in &config.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let result = request
        .config()
        .timeout_global(Some(timeout))
        .build()
        .send(&body[..]);
    match result {
        Ok(r) if r.status().is_success() => totals.exported += n,
        Ok(r) => {
            log::warn!(
                "trace export: {} answered {}",
                shown(&config.endpoint),
                r.status()
            );
            totals.failed += n;
        }
        Err(e) => {
            log::warn!("trace export to {} failed: {e}", shown(&config.endpoint));
            totals.failed += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Option<Config> {
        Config::from_vars(&|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    // See: the OTel spec, "Endpoint URLs for OTLP/HTTP" and `OTEL_SDK_DISABLED`.
    #[test]
    fn endpoints_from_the_environment() {
        type Vars = &'static [(&'static str, &'static str)];
        let cases: &[(Vars, Option<&str>)] = &[
            (&[], None),
            (&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")], None),
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")],
                Some("http://c:4318/v1/traces"),
            ),
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/base/")],
                Some("http://c:4318/base/v1/traces"),
            ),
            (
                &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom")],
                Some("http://c:4318/custom"),
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b/t"),
                ],
                Some("http://b/t"),
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
                    ("OTEL_SDK_DISABLED", "TRUE"),
                ],
                None,
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
                    ("OTEL_SDK_DISABLED", "false"),
                ],
                Some("http://a/v1/traces"),
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
                    ("OTEL_TRACES_EXPORTER", "none"),
                ],
                None,
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                None,
            ),
        ];
        for (vars, want) in cases {
            let got = config(vars).map(|c| c.endpoint);
            assert_eq!(got.as_deref(), *want, "{vars:?}");
        }
    }

    #[test]
    fn protocol_headers_and_resource() {
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a")]).unwrap();
        assert!(!c.json, "protobuf is the default");
        assert_eq!(
            c.origin.resource[0],
            ("service.name".into(), "prime-agent".into())
        );
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "Authorization=Bearer%20x, a=1,bad",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "A=2"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=r,deployment.environment=ci",
            ),
            ("OTEL_SERVICE_NAME", "svc"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "250"),
        ])
        .unwrap();
        assert!(c.json);
        assert_eq!(
            c.headers,
            vec![
                ("Authorization".to_owned(), "Bearer x".to_owned()),
                ("A".to_owned(), "2".to_owned())
            ]
        );
        let resource: Vec<(&str, &str)> = c
            .origin
            .resource
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            resource[..2],
            [("service.name", "svc"), ("deployment.environment", "ci")]
        );
        assert_eq!(c.timeout, Duration::from_millis(250));
    }

    #[test]
    fn logged_urls_lose_their_credentials() {
        for (url, want) in [
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
            ("https://u:secret@c/v1/traces?key=k", "https://c/v1/traces"),
            ("http://c:4318/a@b", "http://c:4318/a@b"),
            ("http://u@c:4318", "http://c:4318"),
        ] {
            assert_eq!(shown(url), want);
        }
    }

    #[test]
    fn percent_decoding() {
        for (raw, want) in [
            ("a%20b", "a b"),
            ("%zz", "%zz"),
            ("100%", "100%"),
            ("%3D", "="),
        ] {
            assert_eq!(percent_decode(raw), want);
        }
    }
}
