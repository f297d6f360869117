#!/usr/bin/env python3
"""`make harness-check`: one rollout of the prime-agent binary through each harness's own code.

1. verifiers 0.4.0: its `Agent` runs `PrimeAgentHarness` (the exact argv, env and models.json it
   writes) on a subprocess runtime; its ACP runner (`verifiers/v1/acp/runner.py`, run by the
   runtime through uv as in any rollout) drives the agent, and its interception proxy relays the
   agent's model calls to the loopback model below and records them in the trace. Only the
   harness is this repository's `integrations/verifiers` subclass, which installs this build
   from a release archive (sha256-checked, unpacked in the sandbox) instead of upstream's Node
   release. Asserted: every model call reached the trace with its
   `X-ACP-Model-Request-ID`; a retried call repeated its id, its `Idempotency-Key` and counted
   `x-stainless-retry-count` up, and the proxy recorded it once; the semantic edges were
   accepted by verifiers' own `SemanticEdgeSet` and `Trace.add_semantic_edges` (which rejects
   an edge naming an unseen request) and link the calls of the tool loop; the harness saw the
   turn's `terminalQuiescence` update (status `ok`). Then `HARNESS_CHECK_ROLLOUTS` (100) more
   rollouts, four at a time: all succeed and none is `unverified`.
2. Harbor 0.25.0: its ACP runner script (`harbor/agents/installed/acp_runner.py`, run as Harbor
   runs it in a task container) starts the agent from a launcher, sets the model through the
   session's config option and records `acp-events.jsonl`; Harbor's `AcpAgent` then converts
   it to an ATIF trajectory (`populate_context_post_run`). Asserted: the one-tool turn is
   exactly two agent steps, one per model response, each with its one usage update; the first
   holds its text, the call (named, with its arguments) and the call's output once as its
   observation, the second its text only; no orphaned usage; every model request carried the
   headers.

3. Harbor from the registry entry: the entry scripts/registry_entry.py writes for archives of
   this build (URLs on a loopback HTTPS server, `--check-loopback`) given to Harbor's
   `AcpAgent` as `registry_entry_path`; its setup/install (binary download, unpack, launcher)
   and one trial run in a bind-mount container (`ChrootEnvironment`, root), its runner bootstrap
   (apt-get, uv, Python 3.12: network) left out. Asserted: the binary distribution, the
   archive fetched from the entry's URL, the launcher, no other install, the trajectory's shape.
4. Harbor's source agents: packaging/harbor/harbor-agent.json through Harbor's manifest model,
   source checks and launcher, and one trial with that launcher (trajectory shape again).

Usage: harness_check.py PRIME_AGENT_BINARY (run with the `.deps/harness` venv's Python);
HARNESS_CHECK_ONLY=name,... runs only those cases (verifiers, harbor, harbor-registry,
harbor-source).
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath

import typing_extensions

# litellm (imported by Harbor) fetches a price list from the network unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# Harbor 0.25 wants Python 3.12 (`typing.override`; pydantic refuses `typing.TypedDict` on
# 3.11); the Debian machines here have 3.11. These two names are all its ACP agent needs.
if sys.version_info < (3, 12):
    typing.override = typing_extensions.override
    typing.TypedDict = typing_extensions.TypedDict

ROOT = Path(__file__).resolve().parent.parent
MODEL = "test-model"
TOOL_OUTPUT = "harness-ok"


class Loopback:
    """An OpenAI chat-completions server on 127.0.0.1 that streams a tool loop: a request
    whose last message is not a tool result gets text and one `bash` call; one after a tool
    result gets the final text. `fail_first` answers the first request 500 once (a retry)."""

    def __init__(self, fail_first=False):
        self.requests = []
        self.lock = threading.Lock()
        self.fail_first = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": headers, "body": body})
                    fail = outer.fail_first
                    outer.fail_first = False
                if fail:
                    data = b'{"error":{"message":"injected 500","type":"server_error"}}'
                    self.send_response(500)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                last = body["messages"][-1]
                if last.get("role") == "tool":
                    stream = outer.sse("Done: " + TOOL_OUTPUT, [])
                else:
                    n = len(outer.requests)
                    call = ("call_%d" % n, "bash", {"command": "echo " + TOOL_OUTPUT})
                    stream = outer.sse("Let me check.", [call])
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(stream)))
                self.end_headers()
                self.wfile.write(stream)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/v1" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def sse(text, calls):
        out = []

        def event(choices, **extra):
            chunk = {"id": "chatcmpl-loop", "object": "chat.completion.chunk", "created": 0,
                     "model": MODEL, "choices": choices, **extra}
            out.append("data: " + json.dumps(chunk) + "\n\n")

        event([{"index": 0, "delta": {"role": "assistant", "content": text},
                "finish_reason": None}])
        for i, (cid, name, args) in enumerate(calls):
            event([{"index": 0, "delta": {"tool_calls": [{"index": i, "id": cid, "type": "function",
                   "function": {"name": name, "arguments": json.dumps(args)}}]},
                    "finish_reason": None}])
        event([{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}])
        event([], usage={"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48})
        out.append("data: [DONE]\n\n")
        return "".join(out).encode()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("  ok: " + what)


def model_requests(server):
    return [r for r in server.requests if r["path"].endswith("/chat/completions")]


# ---------------------------------------------------------------------------------------------
# verifiers


async def verifiers_rollout(binary, server, seen):
    from verifiers.v1.semantic import ACP_SEMANTIC_EDGES_METADATA_KEY, SemanticEdgeSet

    import verifiers.v1.interception.server as interception

    edge_sets = []
    # Observe (not replace) the proxy's header parsing: the headers of each request the agent
    # sent to the proxy, which consumes the ACP id and the Idempotency-Key before relaying.
    parse = interception.extract_acp_info

    def observed(headers):
        seen.append({k.lower(): v for k, v in headers.items()})
        return parse(headers)

    interception.extract_acp_info = observed

    class EdgeRecordingHarness(local_harness_class(binary)):
        def _consume_protocol_metadata(self, trace, response_metadata):
            if ACP_SEMANTIC_EDGES_METADATA_KEY in response_metadata:
                edge_sets.append(response_metadata[ACP_SEMANTIC_EDGES_METADATA_KEY])
            super()._consume_protocol_metadata(trace, response_metadata)

    agent = verifiers_agent(server, EdgeRecordingHarness)
    try:
        async with agent:
            trace = await agent.run(rollout_task(0))
    finally:
        interception.extract_acp_info = parse
    return trace, edge_sets, SemanticEdgeSet


def local_harness_class(binary):
    """This repository's installable harness (`integrations/verifiers`): it installs the
    binary from a release archive made of this build (sha256-checked, unpacked in the
    sandbox, `--version` run there), with no Node, npm or network. It runs on verifiers'
    subprocess runtime (no container engine here), which the harness's container requirement
    would refuse; its paths are all under /tmp and /var/tmp."""
    sys.path.insert(0, str(ROOT / "integrations" / "verifiers"))
    from prime_agent_static import StaticPrimeAgentHarness

    class LocalStaticHarness(StaticPrimeAgentHarness):
        NEEDS_CONTAINER = False

    return LocalStaticHarness


def release_archive(binary):
    """A release archive of `binary` (scripts/dist.sh package, as `make dist` makes them) in a
    fresh directory; returns its path and sha256."""
    out = Path(tempfile.mkdtemp(prefix="harness-archive."))
    subprocess.run(["bash", str(ROOT / "scripts" / "dist.sh"), "package",
                    "x86_64-unknown-linux-gnu", str(binary), str(out), "harness"],
                   check=True, stdout=subprocess.DEVNULL)
    archive = next(out.glob("*.tar.gz"))
    sha = archive.with_name(archive.name + ".sha256").read_text().split()[0]
    return archive, sha


def verifiers_agent(server, harness_class):
    import verifiers.v1 as vf
    from verifiers.v1.runtimes.subprocess import SubprocessConfig
    from verifiers.v1.harnesses.prime_agent.harness import PrimeAgentHarnessConfig

    os.environ["HARNESS_CHECK_KEY"] = "loopback-key"
    config = vf.AgentConfig(
        model=MODEL,
        harness=PrimeAgentHarnessConfig(id="prime_agent"),
        runtime=SubprocessConfig(),
        client=vf.EvalClientConfig(base_url=server.url, api_key_var="HARNESS_CHECK_KEY"),
    )
    agent = vf.Agent(config)
    agent.harness = harness_class.from_config(
        agent.config.harness, archive=str(ARCHIVE[0]), sha256=ARCHIVE[1],
        install_root=str(ARCHIVE[0].parent / "installed"),
    )
    return agent


# The archive every verifiers rollout installs from (made once in `main`).
ARCHIVE = [None, None]


def rollout_task(idx):
    import verifiers.v1 as vf

    return vf.Task(vf.TaskData(idx=idx, prompt="Run `echo %s` and report." % TOOL_OUTPUT))


def lifecycle(trace):
    """PrimeAgentHarness's lifecycle status of each turn of a rollout's trace."""
    return trace.info.get("acp_lifecycle", {}).get("ai.primeintellect.prime-agent", [])


async def verifiers_rollouts(binary, server, count, concurrency):
    """`count` rollouts of the tool loop through the harness, `concurrency` at a time; returns
    per rollout whether it succeeded and its turns' lifecycle statuses."""
    agent = verifiers_agent(server, local_harness_class(binary))
    gate = asyncio.Semaphore(concurrency)
    results = []

    async def one(idx):
        async with gate:
            trace = await agent.run(rollout_task(idx))
            results.append((trace.ok and not trace.errors,
                            [x["infrastructure_status"] for x in lifecycle(trace)]))

    async with agent:
        await asyncio.gather(*(one(i) for i in range(count)))
    return results


def check_verifiers(binary, work):
    print("verifiers %s: PrimeAgentHarness + ACP runner + interception proxy" % _version("verifiers"))
    server = Loopback(fail_first=True)
    try:
        seen = []
        trace, edge_sets, SemanticEdgeSet = asyncio.run(verifiers_rollout(binary, server, seen))
    finally:
        server.close()
    posts = model_requests(server)
    errors = [e.model_dump() if hasattr(e, "model_dump") else e for e in trace.errors]
    check(trace.ok and not errors, "the rollout succeeded (errors: %s)" % errors)
    calls = [c for c in trace.calls if c.node is not None]
    ids = [c.acp.request_id if c.acp else None for c in calls]
    check(len(calls) == 2, "the trace holds the tool loop's 2 model calls (%d)" % len(calls))
    check(all(ids) and len(set(ids)) == 2, "each call carried its own X-ACP-Model-Request-ID: %s" % ids)
    check(len(posts) == 3 and len(seen) == 3,
          "the proxy and the model saw 3 requests: a 500, its retry, the call after the tool")
    marks = [(h.get("x-acp-model-request-id"), h.get("idempotency-key"),
              h.get("x-stainless-retry-count")) for h in seen]
    check(marks[0] == (ids[0], marks[0][1], "0") and marks[1] == (ids[0], marks[0][1], "1"),
          "the retry repeated the call's request id and Idempotency-Key, retry count 0 then 1")
    check(marks[2][0] == ids[1] and marks[2][1] not in (None, marks[0][1]) and marks[2][2] == "0",
          "the next call has a new id and key, retry count 0")
    check(not any("x-acp-model-request-id" in p["headers"] or "idempotency-key" in p["headers"]
                  for p in posts),
          "the proxy consumed X-ACP-Model-Request-ID and Idempotency-Key (not sent upstream)")
    for s in edge_sets:
        SemanticEdgeSet.model_validate(s)
    edges = [(e["source_request_id"], e["target_request_id"], e["type"])
             for s in edge_sets for e in s["edges"]]
    check(edges == [(ids[0], ids[1], "continuation")],
          "SemanticEdgeSet accepted the edges; the tool loop is one continuation: %s" % edges)
    linked = [n for n in trace.nodes if getattr(n, "semantic_parents", None)]
    check(len(linked) == 1 and linked[0].semantic_parents[0].type == "continuation",
          "Trace.add_semantic_edges linked the second call's node to the first")
    # PrimeAgentHarness looks for the turn's `terminalQuiescence` among the updates its runner
    # has handled when the prompt response arrives; a settled turn sends it just before the
    # response (docs/harnesses.md, lifecycle order).
    statuses = [(x["infrastructure_status"], x["terminal_quiescence_observed"])
                for x in lifecycle(trace)]
    check(statuses == [("ok", True)],
          "PrimeAgentHarness saw the terminalQuiescence update: %s" % statuses)

    # Many rollouts, four at a time on the machine's cores, so the runners are busy when the
    # responses come: none may be unverified.
    count = int(os.environ.get("HARNESS_CHECK_ROLLOUTS", "100"))
    start = time.monotonic()
    server = Loopback()
    try:
        results = asyncio.run(verifiers_rollouts(binary, server, count, concurrency=4))
    finally:
        server.close()
    failed = [r for r in results if not r[0]]
    unverified = [r for r in results if r[1] != ["ok"]]
    check(len(results) == count and not failed,
          "%d more rollouts succeeded (%.0f s, 4 at a time)" % (count, time.monotonic() - start))
    check(not unverified, "none of the %d is unverified: %s" % (count, unverified[:5]))


# ---------------------------------------------------------------------------------------------
# Harbor


def check_harbor(binary, work):
    import harbor.agents.installed.acp as harbor_acp
    from harbor.models.agent.context import AgentContext

    print("Harbor %s: acp_runner.py + AcpAgent ACP -> ATIF conversion" % _version("harbor"))
    server = Loopback()
    agent_dir = work / "harbor-agent"
    logs = work / "harbor-logs"
    workspace = work / "harbor-workspace"
    for d in (agent_dir, logs, workspace):
        d.mkdir(parents=True)
    (agent_dir / "models.json").write_text(json.dumps({"providers": {"loop": {
        "baseUrl": server.url, "api": "openai-completions", "apiKey": "LOOP_KEY",
        "models": [{"id": MODEL}]}}}))
    # Harbor's own launcher installs the registry entry's distribution in a task container;
    # here the entry's local command is this binary, exec'd the same way.
    entry = {"id": "prime-agent", "name": "Prime Agent", "version": "0.1.0",
             "description": "prime-agent over ACP",
             "distribution": {"local": {"cmd": str(binary),
                                        "args": ["--mode", "acp", "--no-session"], "env": {}}}}
    launcher = work / "acp-launch.sh"
    launcher.write_text("#!/bin/sh\nexec %s --mode acp --no-session --provider loop\n" % binary)
    launcher.chmod(0o755)
    env = dict(os.environ, PRIME_AGENT_CODING_AGENT_DIR=str(agent_dir), LOOP_KEY="k",
               HARBOR_ACP_PERMISSION_MODE="allow", HARBOR_ACP_AUTH_POLICY="auto",
               HARBOR_ACP_AGENT_ID="prime-agent", HARBOR_ACP_AGENT_VERSION="0.1.0",
               HARBOR_ACP_REQUESTED_MODEL="loop/" + MODEL, HARBOR_ACP_MCP_SERVERS_JSON="[]")
    instruction = "Run `echo %s` and report." % TOOL_OUTPUT
    # Harbor copies the runner alone into the container (`/installed-agent/acp_runner.py`);
    # run beside its package, `import acp` would find Harbor's own `acp.py`.
    runner = work / "acp_runner.py"
    shutil.copy(Path(harbor_acp.__file__).with_name("acp_runner.py"), runner)
    try:
        done = subprocess.run([sys.executable, str(runner), "--instruction", instruction,
                               "--logs-dir", str(logs), "--launcher", str(launcher)],
                              cwd=workspace, env=env, timeout=120)
    finally:
        server.close()
    summary = json.loads((logs / "acp-summary.json").read_text())
    check(done.returncode == 0 and "error" not in summary,
          "Harbor's runner finished (%s)" % summary.get("error"))
    check(summary.get("resolved_session_model_id") is not None,
          "the model was set through the session (%s, via %s)"
          % (summary.get("resolved_session_model_id"), summary.get("set_model_mechanism")))
    posts = model_requests(server)
    check(len(posts) == 2, "the model saw the tool loop's 2 requests (%d)" % len(posts))
    ids = [p["headers"].get("x-acp-model-request-id") for p in posts]
    check(all(ids) and len(set(ids)) == 2, "each carried its own X-ACP-Model-Request-ID")
    check(all(p["headers"].get("x-stainless-retry-count") == "0"
              and p["headers"].get("idempotency-key") for p in posts),
          "each carried an Idempotency-Key and x-stainless-retry-count: 0")
    meta = (summary.get("prompt_response") or {}).get("_meta") or {}
    edges = meta.get("ai.prime.acp/semantic-edges-v1", {}).get("edges", [])
    check([(e["source_request_id"], e["target_request_id"], e["type"]) for e in edges]
          == [(ids[0], ids[1], "continuation")], "the prompt response links the two calls")

    agent = harbor_acp.AcpAgent(logs_dir=logs, model_name="loop/" + MODEL, registry_entry=entry)
    agent.populate_context_post_run(AgentContext())
    check_trajectory(logs)


def check_trajectory(logs):
    """Harbor's ATIF trajectory of the one-tool turn (`logs/trajectory.json`): exactly two
    agent steps, one per model response; the first holds its text, the call (named, with its
    arguments) and the call's output once as its observation, the second its text only."""
    trajectory = json.loads((logs / "trajectory.json").read_text())
    steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
    print("  steps: " + ", ".join(
        "%s(%s%s)" % (s["source"], "usage" if (s.get("extra") or {}).get("usage_updates") else "",
                      "+obs" if s.get("observation") else "") for s in trajectory["steps"]))
    extra = trajectory.get("extra") or {}
    check("orphan_usage_updates" not in extra, "no orphaned usage_update")
    # The one-tool turn is exactly two agent steps, one per model response, each closed by
    # its own usage_update (docs/harnesses.md, event order).
    check(len(steps) == 2, "the one-tool turn is exactly 2 agent steps (%d)" % len(steps))
    check(all(len((s.get("extra") or {}).get("usage_updates") or []) == 1 for s in steps),
          "each agent step holds its response's one usage_update")
    first, last = steps
    calls = first.get("tool_calls") or []
    check(first["message"] == "Let me check." and len(calls) == 1
          and calls[0]["function_name"] == "execute"
          and calls[0]["arguments"] == {"command": "echo " + TOOL_OUTPUT},
          "the first step holds its text and its tool call, named and with its arguments")
    results = (first.get("observation") or {}).get("results") or []
    check(len(results) == 1 and results[0]["source_call_id"] == calls[0]["tool_call_id"]
          and results[0]["content"] == TOOL_OUTPUT + "\n",
          "the first step holds the call's output once, as its observation: %r"
          % [r["content"] for r in results])
    check(last["message"] == "Done: " + TOOL_OUTPUT and not last.get("tool_calls")
          and not last.get("observation"), "the last step holds its text only")


# ---------------------------------------------------------------------------------------------
# Harbor, from the registry entry: resolve, install (binary download), one trial


class ChrootEnvironment:
    """A task container made of bind mounts, for Harbor's installer and runner (no container
    engine here): each `exec` runs in a private mount namespace (`unshare --mount`) chrooted
    into a tmpfs holding the host's top-level directories, except /opt, /installed-agent, /logs
    and /app (the task's working directory), which are this environment's own directories. What Harbor installs stays in them;
    the host's /opt is untouched. It has what Harbor's `BaseEnvironment` offers the agent:
    exec, upload_file, upload_dir, default_user. `env` is the container's environment."""

    SETUP = r"""
set -e
N=$1; R=$2; shift 2
mount -t tmpfs tmpfs "$N"
for d in /*; do
  name=${d#/}
  case "$name" in opt|installed-agent|logs|app|proc|sys|dev) continue ;; esac
  if [ -L "$d" ]; then ln -s "$(readlink "$d")" "$N/$name"
  elif [ -d "$d" ]; then mkdir "$N/$name" && mount --rbind "$d" "$N/$name"
  fi
done
for d in proc sys dev; do mkdir "$N/$d" && mount --rbind "/$d" "$N/$d"; done
for d in opt installed-agent logs app; do mkdir "$N/$d" && mount --bind "$R/$d" "$N/$d"; done
exec chroot "$N" /bin/bash -c 'cd "$1" && eval "$2"' bash "$@"
"""

    def __init__(self, work, env):
        self.root = work / "container"
        self.newroot = work / "newroot"
        for d in ("opt", "installed-agent", "logs/agent", "app"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.newroot.mkdir()
        self.env = env
        self.default_user = None
        self.commands = []

    def host_path(self, path):
        """Where a container path of this environment's own directories is on the host."""
        top = PurePosixPath(path).parts[1]
        if top not in ("opt", "installed-agent", "logs", "app"):
            raise ValueError("%s is not under this environment's own directories" % path)
        return self.root / str(path).lstrip("/")

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None):
        from harbor.environments.base import ExecResult

        self.commands.append(command)
        proc = await asyncio.create_subprocess_exec(
            "unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", self.SETUP,
            "setup", str(self.newroot), str(self.root), cwd or "/app", command,
            env=dict(self.env, **(env or {})),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), timeout_sec or 300)
        return ExecResult(stdout=out.decode(), stderr=err.decode(), return_code=proc.returncode)

    async def upload_file(self, source_path, target_path):
        dst = self.host_path(target_path)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_path, dst)

    async def upload_dir(self, source_dir, target_dir):
        shutil.copytree(source_dir, self.host_path(target_dir), dirs_exist_ok=True)


class LoopbackHttps:
    """Serves `root` over HTTPS on 127.0.0.1 with a self-signed certificate (`ca` is the file
    a client trusts: curl reads it from CURL_CA_BUNDLE); records each request's path."""

    def __init__(self, root, tls_dir):
        import functools
        import ssl
        from http.server import SimpleHTTPRequestHandler

        tls_dir.mkdir()
        self.ca = tls_dir / "cert.pem"
        key = tls_dir / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(self.ca)],
                       check=True, capture_output=True)
        self.requests = []
        outer = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, fmt, *args):
                outer.requests.append((self.command, self.path))

        self.server = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.origin = "https://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def registry_entry_for(binary, work, origin, served):
    """The registry entry of this build: release archives of `binary` for the entry's two
    platforms (as `make dist` names them, version from Cargo.toml), written by
    scripts/registry_entry.py with --check-loopback (archive URLs on `origin`, under
    /test-only/), the archives linked where those URLs point in `served`."""
    import tomllib

    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]
    dist = work / "dist"
    for target in cargo["metadata"]["acp-registry"]["platforms"].values():
        subprocess.run(["bash", str(ROOT / "scripts" / "dist.sh"), "package", target,
                        str(binary), str(dist), cargo["version"]],
                       check=True, stdout=subprocess.DEVNULL)
    out = work / "registry"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "registry_entry.py"), "--dist",
                    str(dist), "--out", str(out), "--check-loopback", origin],
                   check=True, stdout=subprocess.DEVNULL)
    entry_path = out / cargo["metadata"]["acp-registry"]["id"] / "agent.json"
    entry = json.loads(entry_path.read_text())
    for target in entry["distribution"]["binary"].values():
        dst = served / target["archive"].split("/", 3)[3]
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.symlink_to(dist / dst.name)
    return entry_path, entry


def check_harbor_registry(binary, work):
    import harbor.agents.installed.acp as harbor_acp
    from harbor.models.agent.context import AgentContext

    print("Harbor %s: the registry entry resolved from a local file, installed by AcpAgent"
          " (binary download), one trial to a trajectory" % _version("harbor"))
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        raise RuntimeError("skipped: needs root and mount namespaces (unshare --mount) to"
                           " stand in for Harbor's task container")
    served = work / "harbor-served"
    served.mkdir()
    https = LoopbackHttps(served, work / "harbor-tls")
    server = Loopback()
    try:
        entry_path, entry = registry_entry_for(binary, work / "harbor-registry", https.origin,
                                               served)
        agent_dir = work / "harbor-reg-agent"
        agent_dir.mkdir()
        (agent_dir / "models.json").write_text(json.dumps({"providers": {"loop": {
            "baseUrl": server.url, "api": "openai-completions", "apiKey": "LOOP_KEY",
            "models": [{"id": MODEL}]}}}))
        env = ChrootEnvironment(work / "harbor-env", dict(
            os.environ, CURL_CA_BUNDLE=str(https.ca), LOOP_KEY="k",
            PRIME_AGENT_CODING_AGENT_DIR=str(agent_dir)))
        logs = env.root / "logs" / "agent"

        class OfflineAcpAgent(harbor_acp.AcpAgent):
            """Harbor's AcpAgent, its runner's bootstrap left out: that step (apt-get of
            python3, curl and tar; uv from astral.sh; Python 3.12; agent-client-protocol) is
            Harbor's own, needs the network, and is the same for every ACP agent; this machine
            has curl and tar, and Harbor's venv (.deps/harness) runs the runner."""

            _RUNNER_VENV_PATH = sys.prefix

            def _build_dependencies_command(self, kind):
                return ":"

        # What `harbor run --agent acp --agent-kwarg registry_entry_path=FILE` builds (its
        # AgentFactory, whose module needs Python 3.12 to import, maps `acp` to AcpAgent).
        agent = OfflineAcpAgent(logs_dir=logs, model_name="loop/" + MODEL,
                                registry_entry_path=str(entry_path))
        instruction = "Run `echo %s` and report." % TOOL_OUTPUT
        context = AgentContext()

        async def trial():
            await agent.setup(env)
            await agent.run(instruction, env, context)

        asyncio.run(trial())
        agent.populate_context_post_run(context)
    finally:
        server.close()
        https.close()
    check(agent._selected_distribution_kind == "binary",
          "AcpAgent chose the entry's binary distribution for linux-%s" % os.uname().machine)
    archive = "/" + entry["distribution"]["binary"]["linux-" + os.uname().machine][
        "archive"].split("/", 3)[3]
    check(("GET", archive) in https.requests,
          "its installer downloaded the archive from the entry's URL: %s" % https.requests)
    launcher = (env.root / "installed-agent" / "acp-launch.sh").read_text()
    check("exec /opt/harbor-acp-agent/dist/prime-agent --mode acp --multi-session" in launcher
          and (env.root / "opt/harbor-acp-agent/dist/prime-agent").is_file(),
          "it unpacked the archive and its launcher runs the entry's cmd with its args")
    # What ran in the container: Harbor's setup and installer (with its runner's bootstrap
    # left out, above) and the trial; no package manager, and one download: the archive.
    installs = [c for c in env.commands
                if any(w in c for w in ("apt-get", "apk ", "dnf ", "yum ", "npm ", "npx ",
                                        "pip install", "uv ", "astral.sh"))]
    downloads = [c for c in env.commands if "curl " in c]
    check(not installs and len(downloads) == 1 and "tar -xzf" in downloads[0],
          "nothing was installed beyond downloading and unpacking the archive (%d commands: %s)"
          % (len(env.commands), installs))
    posts = model_requests(server)
    check(len(posts) == 2, "the trial made the tool loop's 2 model requests (%d)" % len(posts))
    summary = json.loads((logs / "acp-summary.json").read_text())
    info = summary.get("agent_info") or {}
    check("error" not in summary and info.get("version") == entry["version"]
          and (summary.get("prompt_response") or {}).get("stopReason") == "end_turn",
          "Harbor's runner finished the prompt with the installed agent %s %s (%s)"
          % (info.get("name"), info.get("version"), summary.get("error")))
    check_trajectory(logs)


def check_harbor_source(binary, work):
    """Hosted Harbor's custom agents: packaging/harbor (harbor-agent.json, a uv project,
    launch.py) as `make harbor-source` stages it, through Harbor's own source checks, its
    launcher, and one trial."""
    import tomllib

    import harbor.agents.installed.acp as harbor_acp
    from harbor.models.agent.acp_source import AcpSourceManifest
    from harbor.models.agent.context import AgentContext

    print("Harbor %s: packaging/harbor/harbor-agent.json as a source agent" % _version("harbor"))
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        raise RuntimeError("skipped: needs root and mount namespaces (unshare --mount)")
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]
    package = ROOT / "packaging" / "harbor"
    manifest = AcpSourceManifest.model_validate_json((package / "harbor-agent.json").read_text())
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    check(manifest.version == cargo["version"] == project["version"]
          and manifest.id == cargo["metadata"]["acp-registry"]["id"],
          "harbor-agent.json passes Harbor's AcpSourceManifest; id %s, version %s (Cargo.toml's)"
          % (manifest.id, manifest.version))
    # The tree `make harbor-source` stages, with this build as the binary for this machine.
    checkout = work / "harbor-source"
    for name in ("harbor-agent.json", "pyproject.toml", "uv.lock", "launch.py"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(package / name, checkout / name)
    exe = checkout / "bin" / os.uname().machine / "prime-agent"
    exe.parent.mkdir(parents=True)
    shutil.copyfile(binary, exe)
    exe.chmod(0o755)

    server = Loopback()
    agent_dir = work / "harbor-src-agent"
    agent_dir.mkdir()
    (agent_dir / "models.json").write_text(json.dumps({"providers": {"loop": {
        "baseUrl": server.url, "api": "openai-completions", "apiKey": "LOOP_KEY",
        "models": [{"id": MODEL}]}}}))
    # `python` on PATH stands in for the venv `uv sync --frozen --python 3.12` makes in
    # Harbor's container: there is no Python 3.12 here, and uv would download it.
    env = ChrootEnvironment(work / "harbor-src-env", dict(
        os.environ, LOOP_KEY="k", PRIME_AGENT_CODING_AGENT_DIR=str(agent_dir),
        PATH=str(Path(sys.executable).parent) + ":" + os.environ.get("PATH", "")))
    logs = env.root / "logs" / "agent"
    # The source is never fetched here (example.com, RFC 2606): Harbor's checks run on the tree.
    agent = harbor_acp.AcpAgent(logs_dir=logs, model_name="loop/" + MODEL, source={
        "repo_url": "https://example.com/test-only/prime-agent-rs.git", "ref": "main"})
    try:
        loaded, digest = agent._load_verified_manifest(agent._source, checkout)
        agent._source_manifest = loaded
        _, _, remote_project, _ = agent._source_paths(checkout)
        launcher = agent._build_source_launcher_script(loaded, remote_project)
        check(loaded == manifest and "exec python launch.py" in launcher,
              "Harbor's source checks passed (no symlinks, pyproject.toml, uv.lock; manifest"
              " sha256 %s…) and its launcher runs launch.py" % digest[:12])
        instruction = "Run `echo %s` and report." % TOOL_OUTPUT
        context = AgentContext()

        async def trial():
            await env.upload_dir(checkout, "/installed-agent/source")
            launch = work / "acp-launch-source.sh"
            launch.write_text(launcher)
            await env.upload_file(launch, agent._LAUNCHER_REMOTE_PATH)
            await env.upload_file(Path(harbor_acp.__file__).with_name("acp_runner.py"),
                                  agent._RUNNER_REMOTE_PATH)
            await env.exec("chmod +x %s" % agent._LAUNCHER_REMOTE_PATH)
            agent._RUNNER_VENV_PATH = sys.prefix
            await agent.run(instruction, env, context)

        asyncio.run(trial())
        agent.populate_context_post_run(context)
    finally:
        server.close()
    summary = json.loads((logs / "acp-summary.json").read_text())
    info = summary.get("agent_info") or {}
    check("error" not in summary and info.get("version") == manifest.version,
          "Harbor's runner started the agent through launch.py: %s %s (%s)"
          % (info.get("name"), info.get("version"), summary.get("error")))
    check(len(model_requests(server)) == 2, "the trial made the tool loop's 2 model requests")
    check_trajectory(logs)


def _version(name):
    from importlib.metadata import version

    return version(name)


def main():
    binary = Path(sys.argv[1]).resolve()
    work = Path(tempfile.mkdtemp(prefix="harness-check."))
    ARCHIVE[0], ARCHIVE[1] = release_archive(binary)
    failed = 0
    cases = (("verifiers", check_verifiers), ("harbor", check_harbor),
             ("harbor-registry", check_harbor_registry), ("harbor-source", check_harbor_source))
    only = os.environ.get("HARNESS_CHECK_ONLY")  # e.g. "harbor-registry": one case alone
    if only:
        cases = tuple(c for c in cases if c[0] in only.split(","))
    for name, fn in cases:
        start = time.monotonic()
        try:
            fn(binary, work)
            print("%s: passed (%.1f s)" % (name, time.monotonic() - start))
        except Exception as e:  # noqa: BLE001 - report each harness on its own
            failed += 1
            print("%s: FAILED: %s: %s" % (name, type(e).__name__, e))
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(ARCHIVE[0].parent, ignore_errors=True)
    print("harness-check: %d passed, %d failed" % (len(cases) - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
