#!/usr/bin/env python3
"""Collects the `reliability:` lines (and test results) of a `make reliability` log and prints
the report table: faults injected, inputs tried, requests answered, leaks found, nothing lost.

Usage: reliability_table.py target/reliability.log
"""
import re
import sys

LINE = re.compile(
    r"reliability: (?P<name>[\w.-]+): faults=(?P<faults>\d+), inputs=(?P<inputs>\d+), "
    r"answered=(?P<answered>\d+), leaks=(?P<leaks>\d+), lost=(?P<lost>\d+)"
)
RESULT = re.compile(r"^test (?P<test>\S+) \.\.\. (?P<status>ok|FAILED|ignored)")
# Fault cases covered by tests that predate `tests/faults.rs` (they print no line of their
# own): one fault each, counted when the test passed.
EXISTING = {
    "provider::a_500_is_retried_and_the_second_attempt_succeeds": "model_server_500_then_200",
    "provider::cancel_while_the_server_stalls_answers_cancelled_and_closes_the_socket": "model_server_stall_then_cancel",
    "tools::timeout_and_orphaned_pipes_kill_the_whole_group": "tool_sigterm_ignored_and_grandchildren",
    "tools::huge_output_is_truncated_to_a_file_with_bounded_memory": "tool_prints_200mb",
    "kernel::a_kernel_killed_mid_cell_is_an_error_and_the_next_cell_recovers": "kernel_kills_itself_mid_cell",
    "protocol::stdin_closed_mid_frame_gets_a_parse_error_and_a_clean_exit": "client_closes_stdin_mid_frame",
    "protocol::stdin_eof_mid_turn_exits_zero": "client_closes_stdin_mid_turn",
    "protocol::sigterm_mid_turn_answers_and_exits_zero": "client_sigterm_mid_turn",
    "protocol::an_overlong_line_is_refused_and_the_connection_survives": "client_sends_64mb_line",
}


def main() -> int:
    text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    rows = {}
    for m in LINE.finditer(text):
        d = m.groupdict()
        rows[d["name"]] = [int(d[k]) for k in ("faults", "inputs", "answered", "leaks", "lost")]
    results = {}
    for line in text.splitlines():
        m = RESULT.match(line.strip())
        if m:
            results[m["test"]] = m["status"]
    for test, name in EXISTING.items():
        if results.get(test) == "ok" and name not in rows:
            rows[name] = [1, None, None, 0, 0]
    failed = sorted(t for t, s in results.items() if s == "FAILED")

    header = ("case", "faults injected", "inputs tried", "requests answered", "leaks found", "lost")
    body = []
    total = [0, 0, 0, 0, 0]
    for name in sorted(rows):
        vals = rows[name]
        for i, v in enumerate(vals):
            total[i] += v or 0
        body.append((name, *["-" if v is None else str(v) for v in vals]))
    body.append(("TOTAL", *[str(v) for v in total]))
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def fmt(r):
        return "| " + " | ".join(
            c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)
        ) + " |"

    print(fmt(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in body[:-1]:
        print(fmt(r))
    print(fmt(body[-1]))
    for line in re.findall(r"^leaks.*$", text, re.M):
        print(line)
    for line in re.findall(r"^(?:gigabyte|stall):.*$", text, re.M):
        print(line)
    ok = sum(1 for s in results.values() if s == "ok")
    print(f"tests: {ok} passed, {len(failed)} failed")
    nothing_lost = not failed and total[4] == 0
    print("nothing lost: " + ("yes" if nothing_lost else "NO"))
    for t in failed:
        print(f"FAILED: {t}")
    return 0 if nothing_lost and total[3] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
