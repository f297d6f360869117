"""verifiers' `PrimeAgentHarness`, set up from this project's static release archive.

Upstream's harness installs Prime Agent at first use with Node >= 22.8, npm, curl and network
access (four npm tarballs from a GitHub release, a kernel venv bootstrap). This binary needs
none of that: `StaticPrimeAgentHarness` unpacks one `prime-agent-<version>-<target>.tar.gz`
(from a path on the machine that runs verifiers, or a URL it downloads once) into the sandbox,
after checking its sha256, and runs `bin/prime-agent --version` there before using it.
Everything else (argv, environment, models.json, the ACP runner, the lifecycle statuses) is
verifiers' own harness.

    from prime_agent_static import StaticPrimeAgentHarness
    from verifiers.v1.harnesses.prime_agent.harness import PrimeAgentHarnessConfig

    config = vf.AgentConfig(model=..., harness=PrimeAgentHarnessConfig(id="prime_agent"),
                            runtime=..., client=...)
    agent = vf.Agent(config)
    agent.harness = StaticPrimeAgentHarness.from_config(
        agent.config.harness,
        archive="dist/prime-agent-0.1.0-x86_64-unknown-linux-musl.tar.gz",
        sha256="<the archive's .sha256>",
    )

(`AgentConfig` validates its harness as verifiers' own config, which has no archive fields;
the harness instance carries the extended one.)
"""

import hashlib
import shlex
import urllib.request
from pathlib import Path

from verifiers.v1.acp import ACPHarness
from verifiers.v1.harnesses.prime_agent.harness import (
    PrimeAgentHarness,
    PrimeAgentHarnessConfig,
)

# Where archives are unpacked in the sandbox: one directory per archive digest, so two
# versions never mix and a second rollout finds its binary already there.
INSTALL_ROOT = "/var/tmp/vf-prime-agent-static"


class StaticPrimeAgentHarnessConfig(PrimeAgentHarnessConfig):
    archive: str = ""
    """The release archive: a local path, or an http(s) URL fetched once by this process."""

    sha256: str = ""
    """The archive's SHA-256 (hex); the archive is refused when it differs."""

    install_root: str = INSTALL_ROOT
    """Where the archive is unpacked inside the sandbox."""


def archive_bytes(archive: str, sha256: str) -> bytes:
    """The archive's bytes, checked against `sha256`."""
    if not archive or not sha256:
        raise ValueError("StaticPrimeAgentHarnessConfig needs archive and sha256")
    if archive.startswith(("http://", "https://")):
        with urllib.request.urlopen(archive, timeout=60) as response:
            data = response.read()
    else:
        data = Path(archive).expanduser().read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256.strip().lower():
        raise ValueError(f"{archive}: sha256 is {digest}, not {sha256}")
    return data


def install_script(prefix: str, archive_path: str) -> str:
    """POSIX sh that unpacks the archive into `prefix` and checks the binary runs there."""
    p, a = shlex.quote(prefix), shlex.quote(archive_path)
    return (
        "set -eu\n"
        f"[ -x {p}/bin/prime-agent ] && exit 0\n"
        f"tmp=$(mktemp -d {p}.XXXXXX)\n"
        f"tar -xzf {a} -C \"$tmp\"\n"
        "\"$tmp/bin/prime-agent\" --version | grep -q '^prime-agent '\n"
        f"rm -rf {p} && mv \"$tmp\" {p}\n"
    )


class StaticPrimeAgentHarness(PrimeAgentHarness):
    """`PrimeAgentHarness` whose set-up installs the static binary: no Node, npm, uv, git or
    network inside the sandbox (verifiers' own ACP runner still comes through its runtime)."""

    config: StaticPrimeAgentHarnessConfig

    @classmethod
    def from_config(cls, base: PrimeAgentHarnessConfig, **static) -> "StaticPrimeAgentHarness":
        """This harness for an agent whose config names verifiers' `prime_agent` harness, with
        `archive`, `sha256` (and optionally `install_root`) added."""
        return cls(StaticPrimeAgentHarnessConfig(**base.model_dump(), **static))

    def _prefix(self) -> str:
        return f"{self.config.install_root}/{self.config.sha256.strip().lower()}"

    async def setup(self, runtime) -> None:
        prefix = self._prefix()
        present = await runtime.run(["test", "-x", f"{prefix}/bin/prime-agent"], {})
        if present.exit_code != 0:
            data = archive_bytes(self.config.archive, self.config.sha256)
            made = await runtime.run(["mkdir", "-p", self.config.install_root], {})
            if made.exit_code != 0:
                raise RuntimeError(f"prime-agent install root: {made.stderr.strip()[-500:]}")
            archive_path = f"{prefix}.tar.gz"
            await runtime.write(archive_path, data)
            done = await runtime.run(["sh", "-c", install_script(prefix, archive_path)], {})
            await runtime.run(["rm", "-f", archive_path], {})
            if done.exit_code != 0:
                raise RuntimeError(
                    f"prime-agent install failed: {(done.stderr or done.stdout).strip()[-500:]}"
                )
        # The ACP runner's own set-up; upstream's Node and npm install is skipped.
        await ACPHarness.setup(self, runtime)

    def _bin(self) -> str:
        return f"{self._prefix()}/bin/prime-agent"
