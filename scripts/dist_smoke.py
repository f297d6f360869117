#!/usr/bin/env python3
"""Smoke test of the release archives, as a user or a registry client receives them.

Usage: dist_smoke.py SCRIPT_JSONL ARCHIVE...

For each dist/prime-agent-<version>-<target>.tar.gz: its `.sha256` file matches, it unpacks to
bin/prime-agent and its hard link prime-agent (plus LICENSE and README.md, nothing else),
`file` calls the binary statically linked for the target's architecture, and the binary runs a scripted turn (scripts/static_smoke.py): the
host's own architecture alone in an empty root under chroot, another one under its qemu user
emulator (`qemu-aarch64`) when installed, else that run is skipped, saying so. Prints
`dist-smoke: N passed, M failed` and exits non-zero on any failure.
"""
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# target triple's architecture -> (what `file` says, the qemu user emulator, uname -m)
ARCHES = {
    "x86_64": ("x86-64", "qemu-x86_64", "x86_64"),
    "aarch64": ("ARM aarch64", "qemu-aarch64", "aarch64"),
}


def check_archive(archive, script, checks):
    name = os.path.basename(archive)
    m = re.fullmatch(r"prime-agent-(\d+\.\d+\.\d+)-(([a-z0-9_]+)-unknown-linux-musl)\.tar\.gz", name)
    if not m:
        checks.append((f"{name}: named prime-agent-<version>-<target>.tar.gz", False, name))
        return
    arch = m.group(3)
    file_arch, emulator, uname = ARCHES[arch]
    with open(archive + ".sha256") as f:
        want = f.read().split()
    got = hashlib.sha256(open(archive, "rb").read()).hexdigest()
    checks.append((f"{name}: sha256 file matches", want == [got, name], {"want": want, "got": got}))
    work = tempfile.mkdtemp(prefix="pa-dist-")
    try:
        with tarfile.open(archive) as tf:
            members = sorted(m.name for m in tf.getmembers())
            tf.extractall(work, filter="data")
        checks.append((f"{name}: holds bin/prime-agent (and prime-agent), LICENSE and README.md",
                       members == ["LICENSE", "README.md", "bin", "bin/prime-agent",
                                   "prime-agent"], members))
        binary = os.path.join(work, "bin", "prime-agent")
        desc = subprocess.run(["file", "-b", binary], capture_output=True, text=True).stdout
        static = "statically linked" in desc or "static-pie linked" in desc
        checks.append((f"{name}: `file` says static {file_arch}", static and file_arch in desc, desc))
        if platform.machine() == uname:
            cmd = [sys.executable, os.path.join(HERE, "static_smoke.py"), "--label", f"dist-smoke {arch}"]
        elif shutil.which(emulator):
            cmd = [sys.executable, os.path.join(HERE, "static_smoke.py"), "--label", f"dist-smoke {arch}",
                   "--emulator", shutil.which(emulator)]
        else:
            print(f"dist-smoke: skipped: running the {arch} binary needs {emulator} "
                  "(apt-get install qemu-user)", flush=True)
            return
        r = subprocess.run(cmd + [binary, script], capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        checks.append((f"{name}: a scripted turn" + ("" if platform.machine() == uname else f" under {emulator}"),
                       r.returncode == 0, r.stderr[-2000:]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    script, archives = sys.argv[1], sys.argv[2:]
    checks = []
    if not archives:
        checks.append(("archives given", False, "none"))
    for archive in archives:
        try:
            check_archive(archive, script, checks)
        except Exception as e:  # a broken archive is a failed check, not a traceback
            checks.append((f"{os.path.basename(archive)}: readable", False, repr(e)))
    failed = [c for c in checks if not c[1]]
    for name, ok, detail in checks:
        print(f"dist-smoke: {'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"))
    print(f"dist-smoke: {len(checks) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
