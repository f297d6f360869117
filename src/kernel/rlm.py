"""The kernel-side API of prime-agent, pre-imported into every cell's namespace.

Module `rlm` (itself callable: `await rlm(prompt)` == `await rlm.run(prompt)`): the host bridge
(`host_request`), subagent calls (`run`, `find_models`, `list_subagents`, `delete_subagent`)
and `rlm.harness`. Skills: `edit`, `attach_image`, `agent_message`, `agent_observe`, `compact`,
`refine`, `goal`, `rlm_heartbeat`, `skill_creator`, the user's Python skills (PRIME_AGENT_PYTHON_SKILLS)
and stubs for upstream's service-backed ones. Arguments are validated here, before anything reaches the host,
so the model gets Python errors with exact texts. Standard library only.
"""

import asyncio
import base64
import dataclasses
import json
import os
import sys
import types
from pathlib import Path
from typing import Any, List, Optional

# `rlm.harness` is loaded by the driver before this module (it has no package directory).
harness = sys.modules["rlm.harness"]

DIFF_MIME = "application/vnd.prime-agent.diff+json"
ATTACHMENT_MIME = "application/vnd.prime-agent.attachment+json"
AGENT_MESSAGE_MIME = "application/vnd.prime-agent.agent-message+json"
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")

_send_display = None
_new_request = None
# Names the namespace starts with, and the ones IPython adds: not the model's own definitions.
_BASELINE = frozenset()
_IPYTHON_NAMES = frozenset(("In", "Out", "exit", "quit", "get_ipython", "open", "display"))


def _install(send_display, new_request, namespace):
    """Called once by the driver: wires the bridge and fills the user namespace."""
    global _send_display, _new_request
    _send_display = send_display
    _new_request = new_request
    this = sys.modules[__name__]
    this.__class__ = _CallableModule
    sys.modules["edit"] = edit
    sys.modules["attach_image"] = attach_image
    sys.modules["agent_message"] = agent_message
    sys.modules["goal"] = goal
    sys.modules["rlm_heartbeat"] = rlm_heartbeat
    namespace.update(
        rlm=this,
        edit=edit,
        attach_image=attach_image,
        agent_message=agent_message,
        mcp=mcp,
        goal=goal,
        compact=compact,
        refine=refine,
        rlm_heartbeat=rlm_heartbeat,
        agent_observe=agent_observe,
        skill_creator=skill_creator,
    )
    sys.modules["agent_observe"] = agent_observe
    sys.modules["skill_creator"] = skill_creator
    # Skills this build does not bundle: a clear error instead of a NameError (§3.6).
    for name, reason in _third_party_reasons().items():
        namespace[name] = _UnavailableSkill(name, reason)
    _install_user_skills(namespace)
    global _BASELINE
    _BASELINE = frozenset(namespace)


def _defined_names():
    """The names the model's cells defined (the host lists them after a compaction)."""
    ns = sys.modules["__main__"].__dict__
    return sorted(
        n for n in ns if not n.startswith("_") and n not in _BASELINE and n not in _IPYTHON_NAMES
    )


def emit(data):
    """Sends a display bundle (`{mime: payload}`) to the host for the running cell."""
    _send_display(dict(data))


def display(*objs, raw=False):
    """`display()` for the plain engine: raw bundles go to the host, the rest is printed."""
    for obj in objs:
        if raw and isinstance(obj, dict):
            emit(obj)
        else:
            print(repr(obj))


# --- host bridge -------------------------------------------------------------------------------

def _check_request(kind, payload):
    if not isinstance(kind, str):
        raise RuntimeError("host request payload must have a string type")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise RuntimeError("host request payload must be an object")
    return payload


def _reply_value(reply):
    if reply.get("status") == "ok":
        return reply.get("result", {})
    raise RuntimeError(str(reply.get("error", "host request failed")))


async def host_request(kind, payload=None):
    """Asks the host; `{"status":"ok"}` replies return their result, errors raise RuntimeError."""
    payload = _check_request(kind, payload)
    fut = _new_request(kind, payload)
    return _reply_value(await asyncio.wrap_future(fut))


def host_request_sync(kind, payload=None, timeout=None):
    """`host_request` for synchronous code (the reply arrives on another thread)."""
    payload = _check_request(kind, payload)
    return _reply_value(_new_request(kind, payload).result(timeout))


# --- rlm subagents -----------------------------------------------------------------------------

@dataclasses.dataclass
class RLMSpawnHandle:
    rlm_child_id: str
    name: str
    session_dir: Path
    model: str


@dataclasses.dataclass
class RLMModel:
    provider: str
    id: str
    name: str
    selector: str


@dataclasses.dataclass
class RLMSubagent:
    rlm_child_id: str
    active_session_id: Optional[str]
    session_id: Optional[str]
    session_name: str
    session_dir: Path
    status: str


def _field(obj, snake, default=None):
    """Reads a reply field in snake_case or camelCase (the host speaks JSON)."""
    if not isinstance(obj, dict):
        return default
    if snake in obj:
        return obj[snake]
    head, *rest = snake.split("_")
    camel = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return obj.get(camel, default)


def _subagent(obj):
    return RLMSubagent(
        rlm_child_id=str(_field(obj, "rlm_child_id", "")),
        active_session_id=_field(obj, "active_session_id"),
        session_id=_field(obj, "session_id"),
        session_name=str(_field(obj, "session_name", "")),
        session_dir=Path(str(_field(obj, "session_dir", ""))),
        status=str(_field(obj, "status", "")),
    )


def _run_payload(prompt, kwargs):
    unsupported = sorted(k for k in kwargs if k not in ("name", "model", "thinking"))
    if unsupported:
        raise TypeError("Unsupported rlm.run kwargs: " + ", ".join(unsupported))
    if not isinstance(prompt, str):
        raise TypeError("rlm.run prompt must be a string")
    payload = {"prompt": prompt}
    name = kwargs.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise TypeError("rlm.run name must be a string")
        name = name.strip()
        if not name:
            raise ValueError("rlm.run name must not be empty")
        if len(name) > 64:
            raise ValueError("rlm.run name must be at most 64 characters")
        if name.lower() in ("*", "all", "broadcast"):
            raise ValueError('rlm.run name "%s" is reserved' % name)
        payload["name"] = name
    model = kwargs.get("model")
    if model is not None:
        if not isinstance(model, str) or "/" not in model:
            raise ValueError("rlm.run model must be an exact provider/id from rlm.find_models()")
        payload["model"] = model
    thinking = kwargs.get("thinking")
    if thinking is not None:
        if thinking not in THINKING_LEVELS:
            raise ValueError("rlm.run thinking must be one of: " + ", ".join(THINKING_LEVELS))
        payload["thinking"] = thinking
    return payload


async def run(prompt, **kwargs):
    """Spawns a child agent; returns its handle at admission (never the child's answer)."""
    payload = _run_payload(prompt, kwargs)
    # The depth limit is the host's to check: `/rlm-max-depth` can change it after this
    # kernel's `RLM_MAX_DEPTH` was set.
    reply = await host_request("rlm.run", payload)
    return RLMSpawnHandle(
        rlm_child_id=str(_field(reply, "rlm_child_id", "")),
        name=str(_field(reply, "name", "")),
        session_dir=Path(str(_field(reply, "session_dir", ""))),
        model=str(_field(reply, "model", "")),
    )


async def find_models(query="", limit=8):
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 20:
        raise ValueError("rlm.find_models limit must be an integer from 1 to 20")
    reply = await host_request("rlm.find_models", {"query": str(query), "limit": limit})
    return [
        RLMModel(
            provider=str(_field(m, "provider", "")),
            id=str(_field(m, "id", "")),
            name=str(_field(m, "name", "")),
            selector=str(_field(m, "selector", "")),
        )
        for m in _field(reply, "models", []) or []
    ]


async def list_subagents():
    reply = await host_request("rlm.list_subagents", {})
    return [_subagent(s) for s in _field(reply, "subagents", []) or []]


async def delete_subagent(target):
    if isinstance(target, RLMSubagent):
        target = target.rlm_child_id
    if not isinstance(target, str) or not target.strip():
        raise TypeError("rlm.delete_subagent target must be a subagent id, name or RLMSubagent")
    reply = await host_request("rlm.delete_subagent", {"target": target})
    return _subagent(_field(reply, "subagent", reply))


class _CallableModule(types.ModuleType):
    """Makes `rlm(...)` an alias of `rlm.run(...)`."""

    def __call__(self, prompt, **kwargs):
        return run(prompt, **kwargs)


# --- skills ------------------------------------------------------------------------------------

class _Done(str):
    """A skill result that is both a plain value and awaitable, so `edit(...)` and
    `await edit(...)` both work (upstream skills are awaitable-callable)."""

    def __await__(self):
        if False:
            yield
        return str(self)


class _Skill(types.ModuleType):
    """A module whose `run` is also reachable by calling the module itself."""

    def __call__(self, *args, **kwargs):
        return self.run(*args, **kwargs)


def _skill(name, fn, doc):
    module = _Skill(name, doc)
    module.run = fn
    return module


# Full file texts travel with a diff only up to this size; larger files send snippets only.
_DIFF_FULL_TEXT_LIMIT = 1_000_000


def _edit(path, old_str, new_str):
    """Replaces the single occurrence of `old_str` in `path` with `new_str`."""
    target = Path(os.path.expanduser(str(path)))
    if not target.is_file():
        raise FileNotFoundError("%s not found" % path)
    with open(target, "r", encoding="utf-8", newline="") as f:
        text = f.read()
    count = text.count(old_str) if old_str else 0
    if count == 0:
        raise ValueError("string not found in %s" % path)
    if count > 1:
        raise ValueError(
            "found %d occurrences in %s, need exactly 1 — widen the snippet to make it unique" % (count, path)
        )
    start = text.index(old_str)
    new_text = text[:start] + new_str + text[start + len(old_str):]
    with open(target, "w", encoding="utf-8", newline="") as f:
        f.write(new_text)
    resolved = str(target.resolve())
    diff = {
        "path": resolved,
        "old_str": old_str,
        "new_str": new_str,
        "start_line": text.count("\n", 0, start) + 1,
    }
    if len(text) + len(new_text) <= _DIFF_FULL_TEXT_LIMIT:
        diff["old_text"] = text
        diff["new_text"] = new_text
    emit({DIFF_MIME: diff})
    return _Done("Edited %s" % resolved)


_MAX_SOURCE_IMAGE_BYTES = 20_000_000
# Without an image library the kernel cannot resize, so big images are refused instead.
_MAX_ATTACHMENT_DATA_CHARS = 350_000
_IMAGE_SIGNATURES = (
    ("image/png", b"\x89PNG\r\n\x1a\n"),
    ("image/jpeg", b"\xff\xd8\xff"),
    ("image/gif", b"GIF87a"),
    ("image/gif", b"GIF89a"),
)


def _image_mime(head):
    for mime, prefix in _IMAGE_SIGNATURES:
        if head.startswith(prefix):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


_MAX_SIDE = 1200
_MAX_PIXELS = 36_000_000


def _resize(data):
    """`images.autoResize`: the image shrunk to at most 1200 px a side and 350,000 base64
    chars with Pillow, as (mime, bytes); None when Pillow is missing or it cannot get there."""
    try:
        from PIL import Image
    except Exception:
        return None
    import io
    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.width * img.height > _MAX_PIXELS:
                return None
            img.load()
            alpha = img.mode in ("RGBA", "LA", "P")
            img = img.convert("RGBA" if alpha else "RGB")
            side = _MAX_SIDE
            while side >= 100:
                copy = img.copy()
                copy.thumbnail((side, side))
                out = io.BytesIO()
                if alpha:
                    copy.save(out, format="PNG", optimize=True)
                    mime = "image/png"
                else:
                    copy.save(out, format="JPEG", quality=85)
                    mime = "image/jpeg"
                blob = out.getvalue()
                if (len(blob) + 2) // 3 * 4 <= _MAX_ATTACHMENT_DATA_CHARS:
                    return mime, blob
                side = int(side * 0.75)
    except Exception:
        return None
    return None


def _attach_image(*paths):
    """Loads image files into the model's context as attachments."""
    if not paths:
        raise ValueError("attach_image requires at least one image path")
    if os.environ.get("PRIME_AGENT_IMAGES_BLOCK") == "1":
        raise RuntimeError("No image was loaded: images are turned off by the images.blockImages setting.")
    loaded = []
    for path in paths:
        target = Path(os.path.expanduser(str(path)))
        if not target.is_file():
            raise FileNotFoundError("%s is not an existing regular file" % path)
        size = target.stat().st_size
        if size > _MAX_SOURCE_IMAGE_BYTES:
            raise ValueError("%s is %dMB; images must be under 20MB. Resize it first." % (path, size // 1_000_000))
        data = target.read_bytes()
        mime = _image_mime(data[:16])
        if mime is None:
            raise ValueError(
                "%s is not a supported image (PNG, JPEG, GIF, WebP). Only images can be loaded "
                "into context; open other files in the kernel instead." % path
            )
        if (len(data) + 2) // 3 * 4 > _MAX_ATTACHMENT_DATA_CHARS:
            resized = _resize(data) if os.environ.get("PRIME_AGENT_IMAGES_AUTO_RESIZE", "1") == "1" else None
            if resized is None:
                raise ValueError(
                    "%s is too large to attach (%d bytes; at most %d base64 chars). "
                    "Resize or crop it first." % (path, size, _MAX_ATTACHMENT_DATA_CHARS)
                )
            mime, data = resized
        loaded.append((target, mime, data))
    info = host_request_sync("model.info")
    inputs = info.get("input") if isinstance(info, dict) else None
    if isinstance(inputs, list) and "image" not in inputs:
        model = "/".join(p for p in (info.get("provider"), info.get("id")) if p) or "the current model"
        raise RuntimeError(
            "No image was loaded: the model %s cannot see images (it takes text input only). "
            "Tell the user to switch to a vision-capable model to load images into context." % model
        )
    for target, mime, data in loaded:
        emit({ATTACHMENT_MIME: {
            "mime_type": mime,
            "data": base64.b64encode(data).decode("ascii"),
            "path": str(target.resolve()),
        }})
    return _Done("Loaded %d image(s) into context: %s" % (len(loaded), ", ".join(str(p) for p in paths)))


edit = _skill("edit", _edit, "edit(path, old_str, new_str): replace one unique snippet in a file.")
attach_image = _skill("attach_image", _attach_image, "attach_image(*paths): show images to the model.")


# --- unavailable and user skills ---------------------------------------------------------------

class _UnavailableSkill:
    """Stands in for a skill that cannot load here; any use raises the spec's text."""

    def __init__(self, name, reason):
        self._name = name
        self._reason = reason

    def _fail(self):
        raise RuntimeError(
            "Python skill %s is unavailable in this IPython kernel. Import error: %s" % (self._name, self._reason)
        )

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()

    def __call__(self, *args, **kwargs):
        self._fail()

    def __repr__(self):
        return "<unavailable Python skill %s: %s>" % (self._name, self._reason)


def _third_party_reasons():
    """Upstream's service-backed skills, and why each is missing here."""
    def key(var, service):
        if os.environ.get(var):
            return "the %s client is not bundled with this prime-agent build" % service
        return "%s is not set (the %s skill needs a key), and its client is not bundled with this build" % (var, service)
    return {
        "websearch": key("SERPER_API_KEY", "Serper web search"),
        "linear": key("LINEAR_API_KEY", "Linear"),
        "notion": key("NOTION_API_KEY", "Notion"),
        "prime_intellect": key("PRIME_API_KEY", "Prime Intellect"),
    }


def _install_user_skills(namespace):
    """Imports the Python packages of the user's skills (`python_import`), given by the host
    as JSON in PRIME_AGENT_PYTHON_SKILLS; a failed import leaves a stub that says why. Runs
    once the request's environment is in place (a zygote's fork too), so it also removes the
    built-in skills when settings `enableBuiltinSkills` is false (PRIME_AGENT_BUILTIN_SKILLS=0)."""
    if os.environ.pop("PRIME_AGENT_BUILTIN_SKILLS", "1") == "0":
        for name in ["skill_creator", *_third_party_reasons()]:
            namespace.pop(name, None)
        sys.modules.pop("skill_creator", None)
    raw = os.environ.pop("PRIME_AGENT_PYTHON_SKILLS", "")
    try:
        skills = json.loads(raw) if raw else []
    except ValueError:
        skills = []
    import importlib
    for skill in skills:
        module_name = str(skill.get("module", ""))
        short = module_name.rsplit(".", 1)[-1]
        for path in skill.get("paths", []):
            if os.path.isdir(path) and path not in sys.path:
                sys.path.append(path)
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # any failure: the model gets the reason on first use
            namespace[short] = _UnavailableSkill(skill.get("name", short), "%s: %s" % (type(e).__name__, e))
            continue
        # A module with `run` is callable like the bundled skills: `skill(...)` == `skill.run(...)`.
        if callable(getattr(module, "run", None)) and type(module) is types.ModuleType:
            try:
                module.__class__ = _Skill
            except TypeError:
                pass
        namespace[short] = module


# --- agent_observe -----------------------------------------------------------------------------

async def _observe_list():
    """Every agent of this family you may observe, with its status."""
    return await host_request("agent_observe.list", {})


async def _observe_get(target):
    """One family agent's state: status, tokens, last assistant text, session dir."""
    return await host_request("agent_observe.get", {"target": _target(target)})


async def _observe_recent(target, limit=5):
    """The last `limit` (1-50) messages of a family agent's conversation."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
        raise ValueError("agent_observe.recent limit must be an integer from 1 to 50")
    return await host_request("agent_observe.recent", {"target": _target(target), "limit": limit})


def _target(target):
    if isinstance(target, str) and target.strip():
        return target.strip()
    name = getattr(target, "rlm_child_id", None) or getattr(target, "name", None)
    if isinstance(name, str) and name:
        return name
    raise ValueError("agent_observe target must be an agent's name or id")


agent_observe = types.ModuleType("agent_observe", "Look at the other agents of your family, through the host.")
agent_observe.list = _observe_list
agent_observe.get = _observe_get
agent_observe.recent = _observe_recent


# --- skill_creator (instructions) --------------------------------------------------------------

SKILL_CREATOR = """How to write a skill for prime-agent

A skill is a directory with a SKILL.md: YAML front matter, then instructions in Markdown.

    ---
    name: my-skill            # lowercase words joined by '-'; the command is /skill:my-skill
    description: One sentence saying what the skill does and when to use it.
    python_import: my_skill   # optional: a Python package in this directory the kernel imports
    ---
    # My skill
    Steps, commands and checks, written for an agent that has never seen the task.

Where: <project>/.agents/skills/<name>/SKILL.md (this project), or
<agent dir>/skills/<name>/SKILL.md (every project); `--skill <dir>` loads one explicitly.
Skills load when the agent starts, so a new one is there from the next session on.
The description decides when a model reads the skill: make it specific. Keep the body short,
put long references in files beside SKILL.md and name them by relative path.
A Python package (a `my_skill/` directory with `__init__.py`, or `src/my_skill/`) is imported
into the kernel as `my_skill`; a module-level `run(...)` makes `my_skill(...)` call it.
`skill_creator.create(name, description, body, python_import=None, root=None)` writes a new
SKILL.md (under ./.agents/skills by default) and returns its path.
"""


def _create_skill(name, description, body, python_import=None, root=None):
    """Writes `<root>/<name>/SKILL.md` (root: ./.agents/skills) and returns its path."""
    if not isinstance(name, str) or not name.strip() or any(c.isspace() or c in "/\\" for c in name.strip()):
        raise ValueError("skill name must be a non-empty word without spaces or slashes")
    if not isinstance(description, str) or not description.strip():
        raise ValueError("skill description must be a non-empty string")
    name = name.strip()
    folder = Path(root if root is not None else os.path.join(os.getcwd(), ".agents", "skills")) / name
    target = folder / "SKILL.md"
    if target.exists():
        raise FileExistsError("%s already exists" % target)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["---", "name: %s" % name, "description: %s" % json.dumps(description.strip())]
    if python_import:
        lines.append("python_import: %s" % python_import)
    lines += ["---", str(body).strip(), ""]
    target.write_text("\n".join(lines), encoding="utf-8")
    return str(target.resolve())


skill_creator = types.ModuleType("skill_creator", SKILL_CREATOR)
skill_creator.INSTRUCTIONS = SKILL_CREATOR
skill_creator.create = _create_skill


# --- agent_message -------------------------------------------------------------------------------

async def _list_agents():
    """This agent's parent, siblings and children."""
    return await host_request("agent_message.list_agents", {})


async def _send(message, broadcast_message=None, *, receiver_role=None, receiver_name=None):
    """Sends one role-addressed message, or `send("all", text)` to the whole family."""
    if broadcast_message is not None:
        if message != "all":
            raise TypeError("positional agent_message.send targets are not supported; use receiver_role and receiver_name")
        if receiver_role is not None or receiver_name is not None:
            raise TypeError("broadcast cannot be combined with receiver_role/receiver_name")
        payload = {"target": "all", "message": broadcast_message}
    else:
        if receiver_role not in ("parent", "sibling", "child"):
            raise ValueError('receiver_role must be "parent", "sibling", or "child"')
        if not isinstance(message, str):
            raise TypeError("message must be str, got %s" % type(message).__name__)
        if receiver_role == "parent":
            if receiver_name is not None:
                raise ValueError("receiver_name must be omitted for parent messages")
        elif not isinstance(receiver_name, str) or not receiver_name.strip():
            raise ValueError("receiver_name is required for sibling and child messages")
        payload = {"message": message, "receiver_role": receiver_role}
        if receiver_name is not None:
            payload["receiver_name"] = receiver_name
    reply = await host_request("agent_message.send", payload)
    receipts = reply.get("receipts") if isinstance(reply, dict) else None
    for receipt in receipts if isinstance(receipts, list) else [reply]:
        if isinstance(receipt, dict):
            emit({AGENT_MESSAGE_MIME: receipt})
    return reply


agent_message = types.ModuleType("agent_message", "Agent-to-agent messaging through the host.")
agent_message.list_agents = _list_agents
agent_message.send = _send


# --- goal ---------------------------------------------------------------------------------------

async def _goal_get():
    """The session's goal: `{goal: {...} | None, remaining_tokens, completion_budget_report}`."""
    return await host_request("goal.get", {})


async def _goal_create(objective, token_budget=None):
    """Starts a goal the agent pursues across turns (refused while another is unfinished)."""
    if not isinstance(objective, str) or not objective.strip():
        raise ValueError("goal.create objective must be a non-empty string")
    if token_budget is not None and (
        isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget <= 0
    ):
        raise ValueError("goal.create token_budget must be a positive integer or None")
    return await host_request("goal.create", {"objective": objective, "token_budget": token_budget})


async def _goal_complete():
    """Marks the goal achieved; the result carries the budget report for the user."""
    return await host_request("goal.complete", {})


goal = types.ModuleType("goal", "The session's goal, through the host.")
goal.get = _goal_get
goal.create = _goal_create
goal.complete = _goal_complete


# --- rlm_heartbeat -----------------------------------------------------------------------------
# The session's schedules (behaviour spec §5.5): the host keeps the jobs and fires them into
# the main agent's turns; the interval grammar and its error texts are the host's.

_DELIVERY_MODES = ("steer", "follow_up")


def _optional_str(op, name, value):
    if value is not None and not isinstance(value, str):
        raise TypeError("rlm_heartbeat.%s %s must be a string or None" % (op, name))


def _check_delivery(op, delivery_mode):
    if delivery_mode is not None and delivery_mode not in _DELIVERY_MODES:
        raise ValueError('rlm_heartbeat.%s delivery_mode must be "steer" or "follow_up"' % op)


def _check_id(op, id):
    if not isinstance(id, str) or not id.strip():
        raise ValueError("rlm_heartbeat.%s id must be a non-empty string" % op)


async def _heartbeat_list(include_inactive=False):
    """The session's schedules (job records); finished and deleted ones too if asked."""
    if not isinstance(include_inactive, bool):
        raise TypeError("rlm_heartbeat.list include_inactive must be a bool")
    reply = await host_request("rlm_heartbeat.list", {"include_inactive": include_inactive})
    return reply.get("jobs", [])


async def _heartbeat_create(instruction, interval=None, label=None, delivery_mode=None):
    """Schedules `instruction` as a prompt for this session: `interval` is `every 10m`,
    `in 5m`, `at <ISO date>` or a cron expression (default `every 5m`); `delivery_mode`
    `steer` (default: joins a running turn) or `follow_up` (waits for it to end)."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError("rlm_heartbeat.create instruction must be a non-empty string")
    _optional_str("create", "interval", interval)
    _optional_str("create", "label", label)
    _check_delivery("create", delivery_mode)
    payload = {"instruction": instruction, "interval": interval, "label": label,
               "delivery_mode": delivery_mode}
    return (await host_request("rlm_heartbeat.create", payload))["job"]


async def _heartbeat_update(id, instruction=None, interval=None, label=None, status=None,
                            delivery_mode=None):
    """Changes a schedule this agent created; `status` is "pause" or "resume"."""
    _check_id("update", id)
    if instruction is not None and (not isinstance(instruction, str) or not instruction.strip()):
        raise ValueError("rlm_heartbeat.update instruction must be a non-empty string")
    _optional_str("update", "interval", interval)
    _optional_str("update", "label", label)
    if status is not None and status not in ("pause", "resume"):
        raise ValueError('rlm_heartbeat.update status must be "pause" or "resume"')
    _check_delivery("update", delivery_mode)
    if all(v is None for v in (instruction, interval, label, status, delivery_mode)):
        raise ValueError("rlm_heartbeat.update needs at least one of instruction, interval, "
                         "label, status, delivery_mode")
    payload = {"id": id, "instruction": instruction, "interval": interval, "label": label,
               "status": status, "delivery_mode": delivery_mode}
    return (await host_request("rlm_heartbeat.update", payload))["job"]


async def _heartbeat_delete(id):
    """Deletes a schedule this agent created; returns its record (status `cancelled`)."""
    _check_id("delete", id)
    return (await host_request("rlm_heartbeat.delete", {"id": id}))["job"]


rlm_heartbeat = types.ModuleType("rlm_heartbeat", "The session's schedules, through the host.")
rlm_heartbeat.list = _heartbeat_list
rlm_heartbeat.create = _heartbeat_create
rlm_heartbeat.update = _heartbeat_update
rlm_heartbeat.delete = _heartbeat_delete


# --- mcp ------------------------------------------------------------------------------------------
# The session's MCP servers, reached through the host: the kernel never sees their URLs,
# headers or environment. Not put in sys.modules, so `import mcp` still finds the real SDK.

async def _mcp_list_tools(server):
    """The tools of one server: [{name, description, inputSchema}]."""
    reply = await host_request("mcp.list_tools", {"server": server})
    return reply.get("tools", [])


async def _mcp_call_tool(server, tool, arguments=None):
    """Calls one tool; returns the MCP result ({content, isError, structuredContent?})."""
    if arguments is not None and not isinstance(arguments, dict):
        raise TypeError("arguments must be a dict, got %s" % type(arguments).__name__)
    return await host_request("mcp.call_tool", {"server": server, "tool": tool, "arguments": arguments or {}})


async def _mcp_config():
    """The session's servers: [{name, type, status, tools?, error?}]."""
    return (await host_request("mcp.config", {})).get("servers", [])


async def _mcp_refresh():
    """Lists every ready server's tools again; returns the servers as mcp.config() does."""
    return (await host_request("mcp.refresh", {})).get("servers", [])


mcp = types.ModuleType("mcp", "The session's MCP servers (from the ACP client), through the host.")
mcp.list_tools = _mcp_list_tools
mcp.call_tool = _mcp_call_tool
mcp.config = _mcp_config
mcp.refresh = _mcp_refresh


# --- compact / refine (host-side; behaviour spec §5.2, §5.4) ---------------------------------

class _Compact:
    """`await compact.run(instructions=None)` asks for a compaction at the end of the running
    turn; `await compact.status()` reports the context in use."""

    async def run(self, instructions=None):
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError("compact.run instructions must be a string")
        payload = {} if instructions is None else {"instructions": instructions}
        return await host_request("compact.run", payload)

    async def status(self):
        return await host_request("compact.status", {})

    def __repr__(self):
        return "<compact: await compact.run(instructions=None), await compact.status()>"


class _Refine:
    """`await refine.run(instructions=None, global_=False)` asks for a harness refinement at
    the end of the running turn; `await refine.status()` reports the last one."""

    async def run(self, instructions=None, global_=False):
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError("refine.run instructions must be a string")
        payload = {"global": bool(global_)}
        if instructions is not None:
            payload["instructions"] = instructions
        return await host_request("refine.run", payload)

    async def status(self):
        return await host_request("refine.status", {})

    def __repr__(self):
        return "<refine: await refine.run(instructions=None, global_=False), await refine.status()>"


compact = _Compact()
refine = _Refine()


# --- refine: the host applies a planned edit list to the harness store (spec §5.4) -----------

def _refine_overview(global_):
    return harness.overview(global_=global_)


def _edit_fields(edit):
    return dict(
        path=edit.get("path") or None,
        reference=edit.get("reference"),
        arguments=edit.get("arguments"),
        metadata=edit.get("metadata"),
    )


def _apply_edit(edit, global_):
    out = dict(edit)
    action, kind, eid = edit.get("action"), edit.get("kind"), edit.get("id")
    try:
        if action == "create":
            fields = _edit_fields(edit)
            fields["path"] = fields["path"] or "general"
            entry = harness.create(kind, edit.get("title") or eid or kind, edit.get("content") or "",
                                   id=eid, source="refine", global_=global_, **fields)
            out.update(id=entry.id, after=dataclasses.asdict(entry))
        elif action == "update":
            before = harness.get(kind, eid, global_=global_)
            if before is None:
                raise ValueError("%s entry '%s' does not exist" % (kind, eid))
            out["before"] = dataclasses.asdict(before)
            entry = harness.update(kind, eid, edit.get("title"), edit.get("content"),
                                   global_=global_, **_edit_fields(edit))
            out.update(id=entry.id, after=dataclasses.asdict(entry))
        elif action == "delete":
            before = harness.get(kind, eid, global_=global_)
            if before is None:
                raise ValueError("%s entry '%s' does not exist" % (kind, eid))
            out["before"] = dataclasses.asdict(before)
            harness.delete(kind, eid, global_=global_)
        else:
            raise ValueError("unknown refine action %r; expected create, update or delete" % (action,))
        out["applied"] = True
    except Exception as e:  # A refused edit is reported, the others still apply.
        out.update(applied=False, error=str(e))
        out.setdefault("id", eid or "")
    return out


def _refine_result(plan, applied, global_, trigger, rollback_of=None):
    changes = ["%s %s:%s" % (e.get("action"), e.get("kind"), e.get("id")) for e in applied if e.get("applied")]
    event = harness.record_refinement(trigger, changes, evidence=str(plan.get("rationale") or ""),
                                      outcome=str(plan.get("expectedOutcome") or ""), global_=global_)
    result = {
        "id": event.id,
        "summary": plan.get("summary") or "",
        "rationale": plan.get("rationale") or "",
        "expectedOutcome": plan.get("expectedOutcome") or "",
        "appliedEdits": applied,
        "harnessStatePath": str(harness.state_dir(global_) / harness.STATE_FILE),
        "scope": "global" if global_ else "local",
    }
    if rollback_of is not None:
        result["rollbackOf"] = rollback_of
    if global_:
        # The global store's history (spec §5.4: `harness/refinements.jsonl`), one result a line.
        try:
            with open(harness.state_dir(True) / "refinements.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(result, default=str) + "\n")
        except OSError as e:
            result["historyError"] = str(e)
    return result


def _refine_apply(plan_json, global_, trigger):
    plan = json.loads(plan_json)
    applied = [_apply_edit(e if isinstance(e, dict) else {}, global_) for e in plan.get("edits") or []]
    return _refine_result(plan, applied, global_, trigger)


def _refine_rollback(result_json):
    """Undoes the applied edits of a refinement result, newest first."""
    result = json.loads(result_json)
    global_ = result.get("scope") == "global"
    undo = []
    for e in reversed(result.get("appliedEdits") or []):
        if not e.get("applied"):
            continue
        before = e.get("before") or {}
        if e.get("action") == "create":
            undo.append({"action": "delete", "kind": e.get("kind"), "id": e.get("id")})
        elif e.get("action") == "update":
            undo.append(dict(before, action="update"))
        elif e.get("action") == "delete":
            undo.append(dict(before, action="create"))
    applied = [_apply_edit(e, global_) for e in undo]
    plan = {"summary": "Rolled back %s" % result.get("id"),
            "rationale": "rollback of %s" % result.get("id"), "expectedOutcome": ""}
    return _refine_result(plan, applied, global_, "rollback", rollback_of=result.get("id"))
