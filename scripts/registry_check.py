#!/usr/bin/env python3
"""`make registry-check`: the ACP registry entry checked by the registry's own scripts, offline.

    scripts/registry_check.py [--dist dist]   (run with a Python that has jsonschema:
                                               .deps/py/bin/python, `make test-deps`)

The registry's build and verify scripts and its schemas are vendored unmodified in
fixtures/acp-registry/ (agentclientprotocol/registry at commit 3de1678, Apache-2.0; the
checksums below pin them). This script:

1. lays out a temporary registry tree as the registry's repository has it (the schemas at its
   root, the scripts in .github/workflows/) and serves the release archives of DIST on a
   loopback HTTP server, under the path the entry names;
2. has scripts/registry_entry.py write the entry into that tree, with --check-loopback (the
   entry's repository and archive URLs are the loopback server's, under /test-only/: this
   project has no public repository, and no entry naming one is written anywhere else);
3. runs the registry's build script (build_registry.py) as CI runs it: the only error it may
   report is the one this entry knowingly fails at that commit, a binary distribution without
   builds for every OS family (darwin and windows: only the Linux builds have been run);
4. runs the same build with that one rule relaxed (REQUIRED_OS_FAMILIES set to linux on the
   imported, unmodified module), so every later check of its pipeline runs on the entry: the
   archive URLs' version, each URL answering (HEAD, on the loopback server), the icon, and
   registry.json written with the entry;
5. runs the registry's verify script (verify_agents.py) on the entry, the launch test and the
   auth check (--auth-check): each downloads this machine's archive from the loopback
   server, unpacks it and runs its `cmd` with the entry's `args`.

Prints one line per check and `registry-check: N passed, M failed`; exits 1 on a failure.
Nothing leaves the machine: the children's proxies are unset and the server is on 127.0.0.1.
"""

import argparse
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDORED = ROOT / "fixtures" / "acp-registry"
COMMIT = "3de1678346d1b37b6c3f07de503043ebcbb9cbdb"
# The vendored files, unmodified (fixtures/acp-registry/README.md lists the same).
PINNED = {
    "LICENSE": "7f0f022815d9ffe57a2b9a717d49893f77bfed052f16af179dcb99dbbb6f6ab8",
    "agent.schema.json": "17056bae2fb3acf4b5be809a2796772385170bae73a54f61bcb619682524efbd",
    "registry.schema.json": "6361d75fba7a57e806ae648fe5fd4c55d8f888ee0e5af5c908f3145774ee16c5",
    ".github/workflows/build_registry.py":
        "cf6103a6627d88a077497adde5f5b82d1c3f17cf684c6e9efa85523ffc6eda42",
    ".github/workflows/client.py":
        "9ec73c70d3dc91be662f952e8044196294efd1c6f00790c3dff9235652e9a0ff",
    ".github/workflows/verify_agents.py":
        "0f9c82ead3cb017cae16178ed04bfcebe1fb92dffdd42c37621e110321b857e2",
}
# What build_registry.py at COMMIT says of an entry with Linux builds only.
OS_FAMILY_ERROR = ("Binary distribution must include builds for all operating systems."
                   " Missing: darwin, windows")
# The build with that one rule relaxed, on the unmodified module.
RELAXED_BUILD = """
import sys
sys.path.insert(0, sys.argv[1])
import build_registry
build_registry.REQUIRED_OS_FAMILIES = {"linux"}
build_registry.build_registry()
"""


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("  ok: " + what)
        else:
            self.failed += 1
            print("  FAILED: " + what + ("\n" + detail if detail else ""))
        return cond


def sha256_of(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Served:
    """The loopback HTTP server over `root`, recording each request's method and path."""

    def __init__(self, root):
        self.requests = []
        outer = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, fmt, *args):
                outer.requests.append((self.command, self.path))

        handler = functools.partial(Handler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def offline_env(work):
    """The children's environment: no proxy (the server is local), a throw-away home."""
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
           and k != "SKIP_URL_VALIDATION"}
    home = work / "home"
    home.mkdir(exist_ok=True)
    env.update(NO_PROXY="127.0.0.1,localhost", HOME=str(home),
               PRIME_AGENT_CODING_AGENT_DIR=str(home / ".prime" / "agent"))
    return env


def run(args, cwd, env):
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout + out.stderr


def lay_out(work, checks):
    """The registry tree (vendored files, checked unmodified) in `work/registry`."""
    registry = work / "registry"
    for rel, sha in PINNED.items():
        src = VENDORED / rel
        if not checks.check(src.is_file() and sha256_of(src) == sha,
                            "%s is the registry's file at %s" % (rel, COMMIT[:7])):
            continue
        dst = registry / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return registry


def serve_archives(dist, served_root, entry):
    """Links the archives the entry names (and their .sha256) under the server's root."""
    for target in entry["distribution"]["binary"].values():
        path = target["archive"].split("/", 3)[3]
        dst = served_root / path
        dst.parent.mkdir(parents=True, exist_ok=True)
        for name in (dst.name, dst.name + ".sha256"):
            (dst.parent / name).symlink_to((dist / name).resolve())


def check_build(registry, env, checks):
    """Step 3: the build script as CI runs it; its only error is the OS-family rule."""
    script = registry / ".github" / "workflows" / "build_registry.py"
    code, out = run([sys.executable, str(script)], registry, env)
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    expected = ["Error: prime-agent-rs/agent.json validation failed:",
                "Error:   - " + OS_FAMILY_ERROR]
    checks.check("jsonschema not installed" not in out,
                 "build_registry.py validated the entry against agent.schema.json", out)
    checks.check(code == 1 and errors == expected,
                 "build_registry.py's only error is the OS-family rule (Linux builds only)",
                 out)


def check_relaxed_build(registry, env, served, entry, checks):
    """Step 4: the build's whole pipeline, the OS-family rule relaxed."""
    workflows = registry / ".github" / "workflows"
    shutil.rmtree(registry / "dist", ignore_errors=True)
    before = len(served.requests)
    code, out = run([sys.executable, "-c", RELAXED_BUILD, str(workflows)], registry, env)
    checks.check(code == 0 and "Added agent: prime-agent-rs v%s" % entry["version"] in out,
                 "build_registry.py (OS-family rule relaxed) added the entry", out)
    built = registry / "dist" / "registry.json"
    agents = json.loads(built.read_text())["agents"] if built.is_file() else []
    ours = [a for a in agents if a["id"] == entry["id"]]
    checks.check(len(ours) == 1 and ours[0]["distribution"] == entry["distribution"]
                 and ours[0]["icon"].endswith("/prime-agent-rs.svg")
                 and (registry / "dist" / "prime-agent-rs.svg").is_file(),
                 "registry.json holds the entry, its icon validated and published", out)
    urls = {t["archive"].split("/", 3)[3] for t in entry["distribution"]["binary"].values()}
    heads = {path.lstrip("/") for method, path in served.requests[before:] if method == "HEAD"}
    checks.check(urls and urls <= heads,
                 "its URL check asked the loopback server for every archive (%d HEAD)"
                 % len(heads), str(served.requests[before:]))


def check_verify(registry, env, served, checks):
    """Step 5: the verify script's launch test and auth check on this machine's archive."""
    script = registry / ".github" / "workflows" / "verify_agents.py"
    before = len(served.requests)
    code, out = run([sys.executable, str(script), "--agent", "prime-agent-rs"], registry, env)
    gets = [p for m, p in served.requests[before:] if m == "GET"]
    checks.check(code == 0 and "Passed:  1" in out and "Failed:  0" in out,
                 "verify_agents.py: the archive downloaded (%d GET), unpacked, and its cmd ran"
                 % len(gets), out)
    code, out = run([sys.executable, str(script), "--agent", "prime-agent-rs", "--auth-check",
                     "--clean"], registry, env)
    checks.check(code == 0 and "Auth OK:" in out and "Passed:  1" in out,
                 "verify_agents.py --auth-check: initialize offers an agent auth method", out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dist", type=Path, default=ROOT / "dist")
    args = p.parse_args()
    print("registry-check: agentclientprotocol/registry %s, %s on %s"
          % (COMMIT[:7], args.dist, platform.machine()))
    checks = Checks()
    try:
        import jsonschema  # noqa: F401 - the build script validates with it
    except ImportError:
        print("registry-check: %s has no jsonschema (make test-deps installs it into"
              " .deps/py)" % sys.executable)
        return 1
    work = Path(tempfile.mkdtemp(prefix="registry-check."))
    (work / "served").mkdir()
    served = Served(work / "served")
    try:
        env = offline_env(work)
        registry = lay_out(work, checks)
        code, out = run([sys.executable, str(ROOT / "scripts" / "registry_entry.py"),
                         "--dist", str(args.dist), "--out", str(registry),
                         "--check-loopback", served.origin], ROOT, env)
        entry_file = registry / "prime-agent-rs" / "agent.json"
        if checks.check(code == 0 and entry_file.is_file(),
                        "registry_entry.py wrote the entry (archive URLs on %s/test-only/)"
                        % served.origin, out):
            entry = json.loads(entry_file.read_text())
            serve_archives(args.dist, work / "served", entry)
            check_build(registry, env, checks)
            check_relaxed_build(registry, env, served, entry, checks)
            check_verify(registry, env, served, checks)
    finally:
        served.close()
        shutil.rmtree(work, ignore_errors=True)
    print("registry-check: %d passed, %d failed" % (checks.passed, checks.failed))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
