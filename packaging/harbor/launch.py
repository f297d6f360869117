"""Starts prime-agent over ACP for Harbor's source agents (harbor-agent.json's entrypoint).

Harbor runs `python launch.py` in this directory with its ACP runner on the other end of
stdin/stdout. This replaces itself with the static binary for this machine's architecture,
bin/<arch>/prime-agent (staged by `make harbor-source`), run as the ACP registry entry runs it
(`--mode acp --multi-session`), with any arguments Harbor adds. Without that binary it says so
on stderr and exits 1; nothing is downloaded.
"""

import os
import platform
import sys
from pathlib import Path

ARGS = ["--mode", "acp", "--multi-session"]
ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def main() -> None:
    machine = platform.machine().lower()
    binary = Path(__file__).resolve().parent / "bin" / ARCH.get(machine, machine) / "prime-agent"
    if not os.access(binary, os.X_OK):
        sys.exit(f"launch.py: no prime-agent for {machine} at {binary} (make harbor-source stages it)")
    os.execv(binary, [str(binary), *ARGS, *sys.argv[1:]])


if __name__ == "__main__":
    main()
