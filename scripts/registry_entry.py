#!/usr/bin/env python3
"""The ACP registry entry (agent.json and icon.svg) of this project's release archives.

    scripts/registry_entry.py [--manifest Cargo.toml] [--dist dist] [--out DIR]
                              [--icon packaging/acp-registry/icon.svg] [--if-repository]
                              [--check-loopback http://127.0.0.1:PORT --out DIR]

Everything comes from the manifest and the archives, nothing is typed in by hand:
  - `[package]`: version, description, license, repository, authors (authors optional);
  - `[package.metadata.acp-registry]`: `id`, `name`, `release-url` (the directory the
    archives are served from, with `{repository}` and `{version}` filled in) and `platforms`
    (registry platform -> Rust target: only the targets that have been run);
  - `DIST/prime-agent-<version>-<target>.tar.gz` with its `.sha256` for every platform: the
    checksum must match the archive, and the archive of this machine's architecture must hold
    a `bin/prime-agent` whose `--version` is `prime-agent <version>` (the version the agent
    reports as `agentInfo.version`).
It writes OUT/<id>/agent.json and OUT/<id>/icon.svg (OUT defaults to DIST/acp-registry).

With no `repository` in `[package]` there is no URL the archives could be fetched from: it
says so and exits 1 (with --if-repository, as `make dist` runs it: says so and exits 0),
instead of naming anyone else's repository. Any other problem exits 1.

--check-loopback URL is for checks alone (scripts/registry_check.py, `make registry-check`;
scripts/harness_check.py's Harbor install): the entry's repository is URL/test-only/<id> and
its archives are served from under it, as the check's loopback HTTP(S) server serves them. It
is refused unless URL is an http:// or https:// address on this machine's loopback interface
and --out is given, so an entry made with it can never name a place anyone could download
from, nor land in dist/.

The registry's agent.schema.json (fixtures/acp-registry/agent.schema.json) has no
`sha256` field and forbids unknown ones, so the checksums are verified here and printed, not
written into agent.json; the `.sha256` files are served beside the archives.
"""

import argparse
import hashlib
import ipaddress
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = {
    "darwin-aarch64",
    "darwin-x86_64",
    "linux-aarch64",
    "linux-x86_64",
    "windows-aarch64",
    "windows-x86_64",
}
# At the archive's root (a hard link to bin/prime-agent), as registry entries name it: Harbor
# runs the basename of `cmd` from where it unpacked the archive.
CMD = "./prime-agent"
# Editors run every thread over one process.
ARGS = ["--mode", "acp", "--multi-session"]


class Refused(Exception):
    """A reason not to write an entry, said to the user as is."""


class NoRepository(Refused):
    def __init__(self, manifest: Path):
        super().__init__(
            f"{manifest} sets no [package] repository: this project has no public repository"
            " yet, so there is no URL its release archives would be served from. No ACP"
            " registry entry is written (an entry naming another project's repository would"
            " install that project's files). Set `repository` and"
            " [package.metadata.acp-registry] release-url once the archives are published."
        )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checked_sha256(archive: Path) -> str:
    """The archive's sha256, which must be the one its `.sha256` file (sha256sum format) gives."""
    if not archive.is_file():
        raise Refused(f"no archive {archive} (make dist builds it)")
    sums = archive.with_name(archive.name + ".sha256")
    if not sums.is_file():
        raise Refused(f"no checksum file {sums}")
    fields = sums.read_text().split()
    if len(fields) != 2 or fields[1].lstrip("*") != archive.name:
        raise Refused(f"{sums}: not one '<sha256>  {archive.name}' line")
    actual = sha256_of(archive)
    if fields[0].lower() != actual:
        raise Refused(f"{archive}: sha256 {actual}, but {sums} says {fields[0]}")
    return actual


def check_binary_version(archive: Path, version: str) -> None:
    """Runs `bin/prime-agent --version` from the archive; it must print `prime-agent <version>`."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        exe = Path(tmp) / CMD
        if not exe.is_file():
            raise Refused(f"{archive} holds no {CMD[2:]}")
        try:
            out = subprocess.run(
                [exe, "--version"], capture_output=True, text=True, timeout=30
            )
        except OSError as e:
            raise Refused(f"{archive}: {CMD[2:]} does not run here: {e}")
        if out.returncode != 0 or out.stdout.strip() != f"prime-agent {version}":
            raise Refused(
                f"{archive}: {CMD[2:]} --version says {out.stdout.strip()!r}"
                f" (exit {out.returncode}), not 'prime-agent {version}'"
            )


def host_platform() -> str:
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return f"{sys.platform.replace('win32', 'windows')}-{machine}"


def loopback_origin(url: str) -> str:
    """`url` (http://<loopback address>:<port>, nothing after it) as the check's origin."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if (
        parsed.scheme not in ("http", "https")
        or not loopback
        or parsed.path not in ("", "/")
        or parsed.query
    ):
        raise Refused(
            f"--check-loopback {url!r}: a check's URL must be http(s)://<loopback"
            " address>:<port> (an entry made with it is for that check alone)"
        )
    return url.rstrip("/")


def entry_of(manifest: Path, dist: Path, loopback: str | None = None) -> tuple[dict, dict]:
    """(agent.json, {archive name: sha256}) from the manifest and the archives in `dist`;
    with `loopback` (the registry check's origin), the repository and release URL are the
    check's, under URL/test-only/."""
    cargo = tomllib.loads(manifest.read_text())
    package = cargo.get("package", {})
    meta = package.get("metadata", {}).get("acp-registry")
    if meta is None:
        raise Refused(f"{manifest} has no [package.metadata.acp-registry] table")
    repository = package.get("repository")
    if loopback is not None:
        repository = f"{loopback}/test-only/{meta.get('id', 'agent')}"
        meta = dict(meta, **{"release-url": "{repository}/releases/download/v{version}"})
    elif not repository:
        raise NoRepository(manifest)
    for key in ("version", "description", "license"):
        if not package.get(key):
            raise Refused(f"{manifest}: [package] has no {key}")
    for key in ("id", "name", "release-url", "platforms"):
        if not meta.get(key):
            raise Refused(f"{manifest}: [package.metadata.acp-registry] has no {key}")
    version = package["version"]
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        raise Refused(f"{manifest}: version {version!r} is not x.y.z")
    agent_id = meta["id"]
    if not re.fullmatch(r"[a-z][a-z0-9-]*", agent_id):
        raise Refused(f"{manifest}: id {agent_id!r} is not lowercase letters, digits and '-'")
    base = meta["release-url"].format(repository=repository.rstrip("/"), version=version)
    for url in (repository, base):
        if not url.startswith("https://") and loopback is None:
            raise Refused(f"{manifest}: {url!r} is not an https:// URL")
    if "/latest/" in base + "/":
        raise Refused(f"{manifest}: release-url {base!r} must name the version, not latest")

    binary, sums = {}, {}
    host = host_platform()
    ran = False
    for plat, target in sorted(meta["platforms"].items()):
        if plat not in PLATFORMS:
            raise Refused(f"{manifest}: unknown registry platform {plat!r}")
        name = f"{package['name']}-{version}-{target}.tar.gz"
        archive = dist / name
        sums[name] = checked_sha256(archive)
        if plat == host:
            check_binary_version(archive, version)
            ran = True
        binary[plat] = {"archive": f"{base.rstrip('/')}/{name}", "cmd": CMD, "args": ARGS}
    if not ran:
        raise Refused(
            f"no archive for this machine ({host}) among the platforms, so no binary's"
            f" --version could be checked against {version}"
        )

    entry = {
        "id": agent_id,
        "name": meta["name"],
        "version": version,
        "description": package["description"],
        "repository": repository,
    }
    if package.get("authors"):
        entry["authors"] = list(package["authors"])
    entry["license"] = package["license"]
    entry["icon"] = "./icon.svg"
    entry["distribution"] = {"binary": binary}
    return entry, sums


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", type=Path, default=ROOT / "Cargo.toml")
    p.add_argument("--dist", type=Path, default=ROOT / "dist")
    p.add_argument("--out", type=Path, help="default: DIST/acp-registry")
    p.add_argument("--icon", type=Path, default=ROOT / "packaging/acp-registry/icon.svg")
    p.add_argument(
        "--if-repository",
        action="store_true",
        help="with no repository set, say so and exit 0 (make dist)",
    )
    p.add_argument(
        "--check-loopback",
        metavar="URL",
        help="checks only: archives served at http(s)://<loopback>:<port> (needs --out)",
    )
    args = p.parse_args()
    out_root = args.out or args.dist / "acp-registry"
    try:
        loopback = None
        if args.check_loopback is not None:
            loopback = loopback_origin(args.check_loopback)
            if args.out is None:
                raise Refused("--check-loopback needs --out (its entry never goes to dist/)")
        entry, sums = entry_of(args.manifest, args.dist, loopback)
    except NoRepository as e:
        print(f"registry-entry: not written: {e}", file=sys.stderr)
        return 0 if args.if_repository else 1
    except Refused as e:
        print(f"registry-entry: {e}", file=sys.stderr)
        return 1
    out = out_root / entry["id"]
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "agent.json.tmp"
    tmp.write_text(json.dumps(entry, indent=2) + "\n")
    os.replace(tmp, out / "agent.json")
    shutil.copyfile(args.icon, out / "icon.svg")
    print(f"registry-entry: {out}/agent.json ({entry['id']} {entry['version']})")
    for name, sha in sums.items():
        print(f"  {sha}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
