//! Kernel latency and memory, measured on the real `python3`: cold start, per-cell overhead
//! of `pass`, time to abort a busy cell, idle RSS. Run with
//! `cargo run --release --example kernel_bench` (set `PRIME_AGENT_KERNEL_IPYTHON=0` for the
//! plain engine, `PRIME_AGENT_KERNEL_PYTHON` to pick the interpreter).

use std::io::Write;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use prime_agent::{find_python, AbortFlag, CellEnd, DefaultHostHandler, Kernel, KernelConfig};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() -> Result<(), String> {
    let python = find_python().ok_or("no python3")?;
    let cfg = KernelConfig::new(python.clone(), std::env::temp_dir(), Vec::new());
    let start =
        |abort: &AbortFlag| Kernel::start(&cfg, Arc::new(DefaultHostHandler::default()), abort);
    let mut out = std::io::stdout();
    let idle = AbortFlag::new();

    let mut cold = Vec::new();
    let mut engine = String::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut k = start(&idle)?;
        let run = k.execute("pass", &idle, &mut |_, _| {});
        assert_eq!(run.end, CellEnd::Done { ok: true });
        cold.push(t.elapsed());
        engine = k.engine().to_owned();
    }

    let mut k = start(&idle)?;
    let mut cells = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        k.execute("pass", &idle, &mut |_, _| {});
        cells.push(t.elapsed());
    }
    let rss = std::fs::read_to_string(format!("/proc/{}/status", k.pid()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.trim_start_matches("VmRSS:").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());

    let mut aborts = Vec::new();
    for _ in 0..5 {
        let abort = AbortFlag::new();
        let flag = abort.clone();
        let at = Arc::new(std::sync::Mutex::new(None));
        let at2 = at.clone();
        let trigger = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            *at2.lock().unwrap() = Some(Instant::now());
            flag.abort();
        });
        let run = k.execute("while True: pass", &abort, &mut |_, _| {});
        let done = Instant::now();
        trigger.join().map_err(|_| "trigger panicked")?;
        assert_eq!(run.end, CellEnd::Interrupted);
        let set = at.lock().unwrap().ok_or("abort not set")?;
        aborts.push(done - set);
    }

    writeln!(out, "python: {} (engine: {engine})", python.display()).map_err(|e| e.to_string())?;
    writeln!(
        out,
        "cold start + first cell (median of 5): {}",
        ms(median(cold))
    )
    .map_err(|e| e.to_string())?;
    writeln!(
        out,
        "per-cell `pass` (median of 100): {}",
        ms(median(cells))
    )
    .map_err(|e| e.to_string())?;
    writeln!(
        out,
        "abort of a busy cell (median of 5): {}",
        ms(median(aborts))
    )
    .map_err(|e| e.to_string())?;
    writeln!(out, "idle kernel RSS: {rss}").map_err(|e| e.to_string())?;
    Ok(())
}
