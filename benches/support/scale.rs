//! The kernel and scale sections of `make bench` (`BENCH_ONLY=kernel,scale`): a session's first
//! cell, per-kernel proportional memory (PSS) through the zygote, and many sessions and agent
//! processes at once. Included by `acp.rs` (`#[path]`, under support/ so cargo does not take it for a bench of its own), which owns `Proc`, `Bench` and the
//! report.

use super::*;

/// Every pid in the process tree under `root` (it included), from `/proc/<pid>/task/*/children`.
pub(crate) fn tree(root: u32) -> Vec<u32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let pid = out[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                out.extend(
                    kids.split_whitespace()
                        .filter_map(|k| k.parse::<u32>().ok()),
                );
            }
        }
        i += 1;
    }
    out
}

/// Proportional set size of one process, in KiB (`/proc/<pid>/smaps_rollup`), 0 if gone.
pub(crate) fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn tree_pss_mib(roots: &[u32]) -> f64 {
    let kib: u64 = roots.iter().flat_map(|r| tree(*r)).map(pss_kib).sum();
    kib as f64 / 1024.0
}

/// One cell then a text reply, `n` times: each session's first prompt runs one cell.
pub(crate) fn cell_script(work: &Path, name: &str, n: usize) -> PathBuf {
    let mut lines = Vec::new();
    for i in 0..n {
        lines.push(json!({"steps": [{"tool_call": {"id": format!("c{i}"), "name": "ipython", "arguments": {"code": "import os\nos.getpid()"}}}]}));
        lines.push(json!({"text": "ok"}));
    }
    write_script(work, name, &lines)
}

impl Proc {
    /// Prompts `sid` (request `id`) and returns the time from reading the `tool_call` frame to
    /// reading its completed `tool_call_update`: the cell as the client sees it.
    pub(crate) fn cell_turn(&mut self, id: u64, sid: &str) -> Option<Duration> {
        self.prompt(id, sid);
        let done = format!("\"id\":{id},");
        let mut start = None;
        let mut took = None;
        loop {
            self.next_line(&done);
            if self.line.contains("\"sessionUpdate\":\"tool_call\"") {
                start = Some(Instant::now());
            } else if self.line.contains("\"sessionUpdate\":\"tool_call_update\"")
                && self.line.contains("\"status\":\"completed\"")
            {
                took = start.map(|s| s.elapsed());
            } else if self.line.contains(&done) && !self.line.contains("\"method\"") {
                return took;
            }
        }
    }
}

impl Bench {
    /// The first cell of a fresh session prompted 1 s after `session/new` (the zygote has had
    /// time to warm), with the zygote and without it (`PRIME_AGENT_KERNEL_ZYGOTE=0`: Python
    /// starts on the call, as before the zygote).
    pub(crate) fn kernel(&mut self) {
        let script = cell_script(&self.work, "cell.jsonl", 1);
        let script_s = script.display().to_string();
        let args = ["--provider", "scripted", "--script", &script_s];
        let runs = self.runs(10, 2);
        for (label, env) in [
            ("zygote", vec![]),
            (
                "no zygote",
                vec![("PRIME_AGENT_KERNEL_ZYGOTE", "0".to_owned())],
            ),
        ] {
            let mut lat = Vec::new();
            for _ in 0..runs {
                let mut p = self.agent(&self.bin, &args, &env);
                let sid = p.handshake(&self.work);
                std::thread::sleep(Duration::from_secs(1));
                if let Some(d) = p.cell_turn(3, &sid) {
                    lat.push(ms(d));
                }
                p.finish();
            }
            self.report.add(
                &format!("kernel: first cell 1 s after session/new, tool call → result ({label})"),
                "ms",
                lat,
            );
        }
    }

    /// One `--multi-session` process with 1, 10 and 100 sessions, each with a kernel (one cell
    /// run per session, one session after another); 10 agent processes with a kernel each; 100
    /// sessions prompted at once on one process (plain replies: the agent's own turn overhead).
    pub(crate) fn scale(&mut self) {
        let n = self.runs(100, 10);
        let dirs: Vec<PathBuf> = (0..n)
            .map(|i| {
                let d = self.work.join(format!("scale-{i}"));
                std::fs::create_dir_all(&d).unwrap();
                d.canonicalize().unwrap()
            })
            .collect();
        let script = cell_script(&self.work, "cells.jsonl", n);
        let script_s = script.display().to_string();
        let args = [
            "--multi-session",
            "--provider",
            "scripted",
            "--script",
            &script_s,
        ];
        let mut p = Proc::spawn_env(&self.bin, &args, &self.work, &[]);
        let sids = open_sessions(&mut p, &dirs);
        let root = p.child.id();
        let mut at = Vec::new();
        let mut agent_only = Vec::new();
        for (i, sid) in sids.iter().enumerate() {
            let ran = p.cell_turn(1000 + i as u64, sid).is_some();
            assert!(ran, "session {i}'s cell did not complete: {}", p.line);
            if [1, 10, 100].contains(&(i + 1)) {
                // Let the kernels settle (the first snapshot debounce, page faults of the cell).
                std::thread::sleep(Duration::from_millis(300));
                at.push((i + 1, tree_pss_mib(&[root])));
                agent_only.push((i + 1, pss_kib(root) as f64 / 1024.0));
            }
        }
        p.finish();
        for (k, mib) in &at {
            self.report.add(
                &format!("scale: PSS, one process with {k} sessions × kernel (tree)"),
                "MiB",
                vec![*mib],
            );
        }
        for (k, mib) in &agent_only {
            self.report.add(
                &format!("scale: PSS of the agent alone with {k} sessions × kernel"),
                "MiB",
                vec![*mib],
            );
        }
        if let (Some((k1, p1)), Some((kn, pn))) = (at.first(), at.last()) {
            if kn > k1 {
                self.report.add(
                    "kernel: PSS added per kernel beyond the first (zygote forks)",
                    "MiB",
                    vec![(pn - p1) / (kn - k1) as f64],
                );
            }
        }

        // Ten agent processes, a kernel each.
        let one = cell_script(&self.work, "cell.jsonl", 1);
        let one_s = one.display().to_string();
        let args = ["--provider", "scripted", "--script", &one_s];
        let mut procs: Vec<Proc> = (0..10).map(|_| self.agent(&self.bin, &args, &[])).collect();
        for p in procs.iter_mut() {
            let sid = p.handshake(&self.work);
            assert!(p.cell_turn(3, &sid).is_some(), "cell did not complete");
        }
        std::thread::sleep(Duration::from_millis(300));
        let roots: Vec<u32> = procs.iter().map(|p| p.child.id()).collect();
        self.report.add(
            "scale: PSS, 10 agent processes × kernel (trees, total)",
            "MiB",
            vec![tree_pss_mib(&roots)],
        );
        for p in procs {
            p.finish();
        }

        // 100 sessions prompted at once on one process.
        let lines: Vec<Value> = (0..n).map(|_| json!({"text": "hi"})).collect();
        let script = write_script(&self.work, "hundred.jsonl", &lines);
        let script_s = script.display().to_string();
        let args = [
            "--multi-session",
            "--provider",
            "scripted",
            "--script",
            &script_s,
        ];
        let mut p = Proc::spawn_env(&self.bin, &args, &self.work, &[]);
        let sids = open_sessions(&mut p, &dirs);
        let mut sent = Vec::with_capacity(n);
        for (i, sid) in sids.iter().enumerate() {
            p.prompt_text(5000 + i as u64, sid, "go");
            sent.push(Instant::now());
        }
        let (mut lat, mut errors, mut left) = (Vec::new(), 0usize, n);
        while left > 0 {
            let v = p.frame("a prompt response");
            if v.get("method").is_some() {
                continue;
            }
            let Some(id) = v["id"]
                .as_u64()
                .filter(|id| (5000..5000 + n as u64).contains(id))
            else {
                continue;
            };
            left -= 1;
            if v["result"]["stopReason"] == "end_turn" {
                lat.push(ms(sent[(id - 5000) as usize].elapsed()));
            } else {
                errors += 1;
            }
        }
        p.finish();
        self.report.add(
            &format!("scale: {n} concurrent scripted sessions, prompt → response"),
            "ms",
            lat,
        );
        self.report.add(
            &format!("scale: {n} concurrent scripted sessions, failed prompts"),
            "count",
            vec![errors as f64],
        );
    }
}
