#!/usr/bin/env python3
"""Smoke test of the static binary as packagers ship it: alone in an empty root directory.

Usage: static_smoke.py [--emulator CMD] [--label NAME] PATH_TO_STATIC_PRIME_AGENT SCRIPT_JSONL

As root (CI, a container build), the binary and the scripted-provider fixture are copied into
a fresh empty directory and run there under chroot(8): no /etc, no /tmp, no /proc, no libc, no
shell, the way a `FROM scratch` image runs it. Without root it runs in place, and says so. Then
one scripted turn is driven over stdio and checked: initialize, session/new, session/prompt
streams the fixture's text and ends `end_turn`, every stdout line is JSON-RPC, and stdin EOF
exits 0. Prints `<label>: N passed, M failed` (label `static-smoke` unless given) and exits
non-zero on any failure.

With --emulator (e.g. `qemu-aarch64`, for a binary of another architecture) the binary runs in
place under that user-mode emulator, with the same bare environment: the emulator itself is not
static, so it cannot run inside the empty root.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(binary, script, emulator=None):
    root = None
    if emulator:
        cmd = [emulator, os.path.abspath(binary), "--mode", "acp", "--provider", "scripted",
               "--script", os.path.abspath(script)]
        print(f"{LABEL}: running under {emulator}, in place", flush=True)
        return drive(cmd, os.getcwd())
    if os.geteuid() == 0 and shutil.which("chroot"):
        root = tempfile.mkdtemp(prefix="pa-static-root-")
        shutil.copy(binary, os.path.join(root, "prime-agent"))
        shutil.copy(script, os.path.join(root, "script.jsonl"))
        cmd = [shutil.which("chroot"), root, "/prime-agent", "--mode", "acp", "--provider", "scripted",
               "--script", "/script.jsonl"]
        cwd = "/"
        print(f"{LABEL}: running in an empty root ({root}) under chroot", flush=True)
    else:
        cmd = [binary, "--mode", "acp", "--provider", "scripted", "--script", script]
        cwd = os.getcwd()
        print(f"{LABEL}: not root, so no chroot: running the binary in place", flush=True)
    try:
        return drive(cmd, cwd)
    finally:
        if root:
            shutil.rmtree(root, ignore_errors=True)


def drive(cmd, cwd):
    # A bare environment, as in a scratch image: no HOME, no PATH, no TMPDIR.
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={}, text=True)

    def send(frame):
        p.stdin.write(json.dumps(frame) + "\n")
        p.stdin.flush()

    def until(rid):
        frames = []
        for line in p.stdout:
            frame = json.loads(line)  # a non-JSON line fails the smoke test
            assert frame.get("jsonrpc") == "2.0", line
            frames.append(frame)
            if frame.get("id") == rid and "method" not in frame:
                return frames
        raise AssertionError(f"no response to {rid}; stderr: {p.stderr.read()}")

    checks = []
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
    r = until(1)[-1]
    checks.append(("initialize", r.get("result", {}).get("protocolVersion") == 1, r))
    send({"jsonrpc": "2.0", "id": 2, "method": "session/new",
          "params": {"cwd": cwd, "mcpServers": []}})
    r = until(2)[-1]
    sid = r.get("result", {}).get("sessionId")
    checks.append(("session/new", bool(sid), r))
    send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
          "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}})
    frames = until(3)
    text = "".join(f["params"]["update"]["content"]["text"] for f in frames
                   if f.get("method") == "session/update"
                   and f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
    stop = frames[-1].get("result", {}).get("stopReason")
    checks.append(("scripted turn", stop == "end_turn" and text == "Hello, world",
                   {"stopReason": stop, "text": text, "last": frames[-1]}))
    p.stdin.close()
    # The settled turn's terminal-quiescence update comes just before the response
    # (docs/harnesses.md); nothing follows the response.
    phases = [f.get("params", {}).get("update", {}).get("_meta", {})
              .get("ai.primeintellect.prime-agent", {}).get("phase") for f in frames[:-1]]
    rest = [json.loads(line) for line in p.stdout.read().splitlines()]
    code = p.wait(timeout=20)
    checks.append(("exit 0 on stdin EOF, the terminal update before the response",
                   code == 0 and phases[-1:] == ["terminalQuiescence"] and not rest,
                   {"code": code, "phases": phases, "rest": rest}))
    return checks, p.stderr.read()


LABEL = "static-smoke"


def main():
    global LABEL
    args, emulator = sys.argv[1:], None
    while args and args[0].startswith("--"):
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--emulator":
            emulator = value
        elif flag == "--label":
            LABEL = value
        else:
            sys.exit(f"unknown flag {flag}")
    checks, stderr = run(args[0], args[1], emulator)
    failed = [c for c in checks if not c[1]]
    for name, ok, detail in checks:
        print(f"{LABEL}: {'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"))
    if failed:
        print(stderr, file=sys.stderr)
    print(f"{LABEL}: {len(checks) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
