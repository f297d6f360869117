//! The sandbox section of `make bench` (`BENCH_ONLY=sandbox`): a scripted `bash` turn and a
//! session's first cell with `--sandbox off` and `--sandbox workspace-write`, side by side.
//! A sandboxed kernel never comes from the zygote (a zygote fork does not exec, so it could not
//! enter a new Landlock domain), so the first cell is also measured off without the zygote: the
//! sandbox's own cost is the difference to that row, the zygote's loss the rest. Included by
//! `acp.rs` (`#[path]`), which owns `Proc`, `Bench` and the report.

use super::*;

/// The modes compared, as `--sandbox` values.
const MODES: [&str; 2] = ["off", "workspace-write"];

impl Bench {
    pub(crate) fn sandbox(&mut self) {
        self.sandbox_turns();
        self.sandbox_cells();
    }

    /// Prompt round trips of one `bash` call (`echo ok`) and the answer, one connection per
    /// mode: with the sandbox each command's fork builds a Landlock ruleset and enters it.
    fn sandbox_turns(&mut self) {
        let turns = self.runs(50, 5);
        let mut lines = Vec::new();
        for i in 0..turns {
            lines.push(json!({"steps": [{"tool_call": {"id": format!("b{i}"), "name": "bash", "arguments": {"command": "echo ok"}}}]}));
            lines.push(json!({ "text": format!("done {i}") }));
        }
        let script = write_script(&self.work, "sandbox-bash.jsonl", &lines);
        let script_s = script.display().to_string();
        for mode in MODES {
            let args = [
                "--provider",
                "scripted",
                "--script",
                script_s.as_str(),
                "--no-session",
                "--tools",
                "bash",
                "--sandbox",
                mode,
            ];
            let mut p = self.agent(&self.bin, &args, &[]);
            let sid = p.handshake(&self.work);
            let per_turn = timed_prompts(&mut p, &sid, turns, || {});
            p.finish();
            self.report.add(
                &format!("sandbox: bash call + answer, round trip ({mode})"),
                "ms",
                per_turn,
            );
        }
    }

    /// A fresh session's first cell, 1 s after `session/new` (tool call → result): off with
    /// the zygote (the default), off without it, and workspace-write; runs interleaved.
    fn sandbox_cells(&mut self) {
        let script = scale::cell_script(&self.work, "sandbox-cell.jsonl", 1);
        let script_s = script.display().to_string();
        let no_zygote = vec![("PRIME_AGENT_KERNEL_ZYGOTE", "0".to_owned())];
        let cases = [
            ("off", "off", vec![]),
            ("off, no zygote", "off", no_zygote),
            ("workspace-write", "workspace-write", vec![]),
        ];
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
        for _ in 0..self.runs(10, 2) {
            for (i, (_, mode, env)) in cases.iter().enumerate() {
                let args = [
                    "--provider",
                    "scripted",
                    "--script",
                    &script_s,
                    "--sandbox",
                    mode,
                ];
                let mut p = self.agent(&self.bin, &args, env);
                let sid = p.handshake(&self.work);
                std::thread::sleep(Duration::from_secs(1));
                if let Some(d) = p.cell_turn(3, &sid) {
                    lat[i].push(ms(d));
                }
                p.finish();
            }
        }
        for ((label, _, _), samples) in cases.iter().zip(lat) {
            self.report.add(
                &format!("sandbox: first cell, tool call → result ({label})"),
                "ms",
                samples,
            );
        }
    }
}
