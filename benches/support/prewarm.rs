//! The per-sandbox cost of the kernel prewarm (`BENCH_ONLY=prewarm`): harnesses run one agent
//! per sandbox, so what one agent process costs matters even when its session never runs a
//! cell. For settings `kernel.prewarm` on (the default) and off (`PRIME_AGENT_KERNEL_PREWARM=0`),
//! interleaved: (a) a session that never runs a cell, (b) one whose first prompt, 1 s after
//! `session/new`, runs one cell; each agent's CPU time over its whole life (spawn → exit, its
//! reaped descendants included: zygote, spare and kernel) and the tree's PSS at the end (3 s
//! after `session/new`, or 2 s after the cell), plus the first cell's latency. Included by
//! `acp.rs` (`#[path]`), which owns `Proc`, `Bench` and the report.

use super::*;

/// CPU time (user + system) of this process's reaped children so far.
fn children_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_CHILDREN is a valid `who`.
    #[allow(unsafe_code)]
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One agent's figures: CPU over its life (ms), tree PSS at the end (MiB), the first cell (ms).
struct Life {
    cpu_ms: f64,
    pss_mib: f64,
    cell_ms: Option<f64>,
}

impl Bench {
    pub(crate) fn prewarm(&mut self) {
        let script = scale::cell_script(&self.work, "prewarm-cell.jsonl", 1);
        let script_s = script.display().to_string();
        let args = ["--provider", "scripted", "--script", &script_s];
        let modes = [("on", "1"), ("off", "0")];
        let mut idle: Vec<Vec<Life>> = vec![Vec::new(), Vec::new()];
        let mut cell: Vec<Vec<Life>> = vec![Vec::new(), Vec::new()];
        for _ in 0..self.runs(5, 1) {
            for (i, (_, value)) in modes.iter().enumerate() {
                let env = [("PRIME_AGENT_KERNEL_PREWARM", value.to_string())];
                idle[i].push(self.one_life(&args, &env, false));
                cell[i].push(self.one_life(&args, &env, true));
            }
        }
        for (i, (mode, _)) in modes.iter().enumerate() {
            for (what, lives) in [("no cell", &idle[i]), ("one cell", &cell[i])] {
                self.report.add(
                    &format!("per sandbox, {what}: CPU spawn → exit (prewarm {mode})"),
                    "ms",
                    lives.iter().map(|l| l.cpu_ms).collect(),
                );
                self.report.add(
                    &format!("per sandbox, {what}: tree PSS (prewarm {mode})"),
                    "MiB",
                    lives.iter().map(|l| l.pss_mib).collect(),
                );
            }
            self.report.add(
                &format!("per sandbox: first cell 1 s after session/new (prewarm {mode})"),
                "ms",
                cell[i].iter().filter_map(|l| l.cell_ms).collect(),
            );
        }
    }

    /// Spawns an agent, opens a session and (with `run_cell`) prompts one cell 1 s later;
    /// measures the tree's PSS a while after, then lets it exit and takes its CPU time.
    fn one_life(&self, args: &[&str], env: &[(&str, String)], run_cell: bool) -> Life {
        let before = children_cpu();
        let mut p = self.agent(&self.bin, args, env);
        let sid = p.handshake(&self.work);
        let mut cell_ms = None;
        if run_cell {
            std::thread::sleep(Duration::from_secs(1));
            cell_ms = p.cell_turn(3, &sid).map(ms);
            // The kernel's snapshot debounce and the next spare's fork settle meanwhile.
            std::thread::sleep(Duration::from_secs(2));
        } else {
            // Long enough for a warming zygote to finish its imports on a loaded machine.
            std::thread::sleep(Duration::from_secs(3));
        }
        let pss_kib: u64 = scale::tree(p.child.id())
            .into_iter()
            .map(scale::pss_kib)
            .sum();
        p.finish();
        Life {
            cpu_ms: ms(children_cpu().saturating_sub(before)),
            pss_mib: pss_kib as f64 / 1024.0,
            cell_ms,
        }
    }
}
