#!/usr/bin/env python3
"""Writes `scripts/startup.order`: the functions an unstripped release binary runs from spawn through
`initialize` and `session/new` (as the benchmark drives it), then those a first scripted prompt
turn adds, for lld's --symbol-ordering-file.

Usage: scripts/startup_order.py BINARY [OUT]   (`make startup-order` builds BINARY and runs it)

Why: the code the start-up path runs is spread over the whole .text, and the kernel maps a
file-backed page fault's whole 64 KiB neighbourhood, so the scattered ~190 pages it runs used
to cost about 2.4 MiB of resident text. Linked together they cost a few windows.

The binary runs under callgrind (valgrind), which lists every function that executed, on every
thread, including the paths where the main loop and the IO threads park waiting for input.
Names that are gone from a later build are skipped by the linker (--no-warn-symbol-ordering),
so a stale file costs RSS, never a failed build; regenerate it after larger changes or a
toolchain update (symbol hashes change then).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def drive(binary, out_file, work, prompt):
    script = os.path.join(work, "hello.jsonl")
    with open(script, "w") as f:
        f.write('{"text":"hi"}\n')
    cmd = [
        "valgrind", "--tool=callgrind", "--demangle=no", "--compress-strings=no",
        "--callgrind-out-file=" + out_file,
        binary, "--mode", "acp", "--provider", "scripted", "--script", script,
    ]
    env = dict(os.environ, PRIME_AGENT_SESSION_DIR=os.path.join(work, "sessions"))
    env.pop("RUST_LOG", None)
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, cwd=work, env=env)

    session = [None]

    def request(i, method, params):
        line = json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        p.stdin.write((line + "\n").encode())
        p.stdin.flush()
        while True:
            raw = p.stdout.readline()
            if not raw:
                sys.exit("the agent exited before answering " + method)
            msg = json.loads(raw)
            if msg.get("id") == i:
                session[0] = (msg.get("result") or {}).get("sessionId", session[0])
                return

    # One request at a time, as the benchmark does: the loop parks between them.
    request(1, "initialize", {"protocolVersion": 1})
    time.sleep(0.3)
    request(2, "session/new", {"cwd": work, "mcpServers": []})
    time.sleep(0.5)
    if prompt:
        request(3, "session/prompt", {"sessionId": session[0], "prompt": [{"type": "text", "text": "hi"}]})
        time.sleep(0.3)
    p.stdin.close()
    p.wait(timeout=60)


def functions(out_file, binary):
    """Mangled names of the functions in `binary`, in the order callgrind first met them."""
    names, seen, obj = [], set(), None
    real = os.path.realpath(binary)
    with open(out_file, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                obj = os.path.realpath(line[3:].strip())
            elif line.startswith("fn=") and obj == real:
                name = line[3:].strip()
                if name.startswith("_ZN") or name.startswith("_R") or name == "main":
                    if name not in seen:
                        seen.add(name)
                        names.append(name)
    return names


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed; startup.order is unchanged")
    out = sys.argv[2] if len(sys.argv) > 2 else "scripts/startup.order"
    # Start-up first (the budget's path, packed densely), then what a first prompt turn adds.
    names = []
    for prompt in (False, True):
        with tempfile.TemporaryDirectory(prefix="prime-agent-order-") as work:
            cg = os.path.join(work, "callgrind.out")
            drive(binary, cg, work, prompt)
            seen = set(names)
            names += [n for n in functions(cg, binary) if n not in seen]
    if len(names) < 50:
        sys.exit("only %d functions found: is %s unstripped?" % (len(names), binary))
    with open(out, "w") as f:
        f.write("".join(n + "\n" for n in names))
    print("%s: %d functions" % (out, len(names)))


if __name__ == "__main__":
    main()
