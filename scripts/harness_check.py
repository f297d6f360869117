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

Usage: harness_check.py PRIME_AGENT_BINARY (run with the `.deps/harness` venv's Python).
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
from pathlib import Path

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


def _version(name):
    from importlib.metadata import version

    return version(name)


def main():
    binary = Path(sys.argv[1]).resolve()
    work = Path(tempfile.mkdtemp(prefix="harness-check."))
    ARCHIVE[0], ARCHIVE[1] = release_archive(binary)
    failed = 0
    for name, fn in (("verifiers", check_verifiers), ("harbor", check_harbor)):
        start = time.monotonic()
        try:
            fn(binary, work)
            print("%s: passed (%.1f s)" % (name, time.monotonic() - start))
        except Exception as e:  # noqa: BLE001 - report each harness on its own
            failed += 1
            print("%s: FAILED: %s: %s" % (name, type(e).__name__, e))
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(ARCHIVE[0].parent, ignore_errors=True)
    print("harness-check: %d passed, %d failed" % (2 - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
