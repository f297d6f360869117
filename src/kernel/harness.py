"""`rlm.harness`: the continual-harness store (prompts, memories, skills, subagents).

A JSON file `harness_state.json` per scope: local (`$RLM_HARNESS_STATE_DIR`, else
`$RLM_SESSION_DIR/harness`) or global (`global_=True`: `$RLM_GLOBAL_HARNESS_STATE_DIR`, else
`<agent dir>/harness`). The file is re-read whenever its mtime changes, so edits by other
processes (the host's `/refine`) are never clobbered by a stale copy. Writes are atomic
(temp file + rename). Behaviour spec §4.5. Standard library only.
"""

import dataclasses
import datetime
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

KINDS = ("prompt", "memory", "skill", "subagent")
STATE_FILE = "harness_state.json"
LOCAL_MISSING = (
    "Local harness state requires RLM_HARNESS_STATE_DIR or RLM_SESSION_DIR. Set one of them, "
    "or pass global_=True to persist across sessions."
)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclasses.dataclass
class HarnessEntry:
    id: str
    kind: str
    title: str
    content: str
    path: str = "general"
    scope: str = "local"
    reference: Dict[str, Any] = dataclasses.field(default_factory=dict)
    arguments: Dict[str, Any] = dataclasses.field(default_factory=dict)
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)
    source: str = "agent"
    created_at: str = dataclasses.field(default_factory=_now)
    updated_at: str = dataclasses.field(default_factory=_now)
    version: int = 1


@dataclasses.dataclass
class RefinementEvent:
    id: str
    trigger: str
    changes: List[str]
    evidence: str = ""
    outcome: str = ""
    created_at: str = dataclasses.field(default_factory=_now)


def _agent_dir():
    for var in ("PRIME_AGENT_CODING_AGENT_DIR", "PI_CODING_AGENT_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path.home() / ".prime" / "agent"


def state_dir(global_=False):
    """The store directory of a scope, or None when the local scope has none."""
    if global_:
        explicit = os.environ.get("RLM_GLOBAL_HARNESS_STATE_DIR")
        return Path(explicit) if explicit else _agent_dir() / "harness"
    if os.environ.get("RLM_HARNESS_STATE_DIR"):
        return Path(os.environ["RLM_HARNESS_STATE_DIR"])
    if os.environ.get("RLM_SESSION_DIR"):
        return Path(os.environ["RLM_SESSION_DIR"]) / "harness"
    return None


def slug(title, fallback):
    """Lower-case alphanumerics joined by `_`, at most 80 chars."""
    text = re.sub(r"[^a-z0-9]+", "_", str(title).lower()).strip("_")
    return (text or fallback)[:80]


def _split_id(entry_id, global_):
    """`local:`/`global:` prefixes on ids choose the scope."""
    if isinstance(entry_id, str):
        scope, sep, rest = entry_id.partition(":")
        if sep and rest and scope in ("local", "global"):
            return rest, scope == "global"
    return entry_id, global_


def _check_kind(kind):
    if kind not in KINDS:
        raise ValueError("unknown harness kind %r; expected one of: %s" % (kind, ", ".join(KINDS)))


def _check_skill_reference(reference):
    if not isinstance(reference, dict) or reference.get("type") != "python":
        raise ValueError('skill entries require reference={"type": "python", "import": ..., "callable": ...}')
    if not any(isinstance(reference.get(k), str) and reference[k] for k in ("import", "python_import")):
        raise ValueError("skill reference requires a Python import")
    if not any(isinstance(reference.get(k), str) and reference[k] for k in ("callable", "call_pattern")):
        raise ValueError("skill reference requires a callable or call_pattern")
    return dict(reference)


class _Store:
    """One scope's file, cached until its mtime changes."""

    def __init__(self):
        self.path = None
        self.mtime = None
        self.entries = {k: {} for k in KINDS}
        self.refinements = []

    def sync(self, directory):
        path = directory / STATE_FILE if directory is not None else None
        try:
            mtime = path.stat().st_mtime_ns if path is not None else None
        except OSError:
            mtime = None
        if path == self.path and mtime == self.mtime and mtime is not None:
            return self
        self.path, self.mtime = path, mtime
        self.entries = {k: {} for k in KINDS}
        self.refinements = []
        if mtime is None:
            return self
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        raw_entries = data.get("entries") if isinstance(data, dict) else None
        for kind in KINDS:
            records = raw_entries.get(kind) if isinstance(raw_entries, dict) else None
            for eid, raw in (records or {}).items():
                if isinstance(raw, dict):
                    self.entries[kind][str(eid)] = _entry_from(raw, kind, str(eid))
        for raw in (data.get("refinements") if isinstance(data, dict) else None) or []:
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                fields = {f.name for f in dataclasses.fields(RefinementEvent)}
                self.refinements.append(RefinementEvent(**{k: v for k, v in raw.items() if k in fields}))
        return self

    def save(self):
        data = {
            "schema": 1,
            "entries": {k: {i: dataclasses.asdict(e) for i, e in v.items()} for k, v in self.entries.items()},
            "refinements": [dataclasses.asdict(r) for r in self.refinements],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=str(self.path.parent), prefix=".harness-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2, ensure_ascii=False)
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.mtime = self.path.stat().st_mtime_ns


def _entry_from(raw, kind, eid):
    fields = {f.name for f in dataclasses.fields(HarnessEntry)}
    values = {k: v for k, v in raw.items() if k in fields}
    values.update(id=eid, kind=kind)
    values.setdefault("title", "")
    values.setdefault("content", "")
    return HarnessEntry(**values)


_stores = {False: _Store(), True: _Store()}


def _store(global_, writing):
    directory = state_dir(global_)
    if directory is None and writing:
        raise RuntimeError(LOCAL_MISSING)
    return _stores[bool(global_)].sync(directory)


def create(kind, title, content, *, id=None, path="general", reference=None, arguments=None,
           metadata=None, source="agent", global_=False):
    """Creates a new entry; an existing id is an error (use `upsert` to overwrite)."""
    _check_kind(kind)
    entry_id, global_ = _split_id(id, global_)
    store = _store(global_, writing=True)
    entry_id = entry_id or slug(title, kind)
    if entry_id in store.entries[kind]:
        raise ValueError("%s entry '%s' already exists" % (kind, entry_id))
    if kind == "skill":
        reference = _check_skill_reference(reference)
    entry = HarnessEntry(
        id=entry_id, kind=kind, title=str(title), content=str(content), path=path,
        scope="global" if global_ else "local", reference=dict(reference or {}),
        arguments=dict(arguments or {}), metadata=dict(metadata or {}), source=source,
    )
    store.entries[kind][entry_id] = entry
    store.save()
    return entry


def update(kind, id, title=None, content=None, *, path=None, reference=None, arguments=None,
           metadata=None, source=None, global_=False):
    """Changes the given fields of an existing entry; omitted (None) fields are kept."""
    _check_kind(kind)
    entry_id, global_ = _split_id(id, global_)
    store = _store(global_, writing=True)
    entry = store.entries[kind].get(entry_id)
    if entry is None:
        raise ValueError("%s entry '%s' does not exist" % (kind, entry_id))
    if kind == "skill" and reference is not None:
        reference = _check_skill_reference(reference)
    for name, value in (("title", title), ("content", content), ("path", path), ("source", source)):
        if value is not None:
            setattr(entry, name, str(value))
    for name, value in (("reference", reference), ("arguments", arguments), ("metadata", metadata)):
        if value is not None:
            setattr(entry, name, dict(value))
    entry.updated_at = _now()
    entry.version += 1
    store.save()
    return entry


def upsert(kind, title, content, *, id=None, global_=False, **fields):
    """Updates the entry if it exists, else creates it."""
    _check_kind(kind)
    entry_id, global_ = _split_id(id, global_)
    entry_id = entry_id or slug(title, kind)
    if get(kind, entry_id, global_=global_) is not None:
        return update(kind, entry_id, title, content, global_=global_, **fields)
    return create(kind, title, content, id=entry_id, global_=global_, **fields)


def get(kind, id, *, global_=False):
    """The entry, or None."""
    _check_kind(kind)
    entry_id, global_ = _split_id(id, global_)
    return _store(global_, writing=False).entries[kind].get(entry_id)


def delete(kind, id, *, global_=False):
    """Removes an entry; returns whether it existed."""
    _check_kind(kind)
    entry_id, global_ = _split_id(id, global_)
    store = _store(global_, writing=True)
    if store.entries[kind].pop(entry_id, None) is None:
        return False
    store.save()
    return True


def list(kind=None, *, global_=False):  # noqa: A001 - the upstream API name
    """Entries of one kind, or of all kinds, in kind then id order."""
    if kind is not None:
        _check_kind(kind)
    store = _store(global_, writing=False)
    kinds = [kind] if kind is not None else KINDS
    return [store.entries[k][i] for k in kinds for i in sorted(store.entries[k])]


def record_refinement(trigger, changes, evidence="", outcome="", *, global_=False):
    """Appends a refinement event (`refine_0001`, …) to the store."""
    store = _store(global_, writing=True)
    if isinstance(changes, str):
        changes = [changes]
    event = RefinementEvent(
        id="refine_%04d" % (len(store.refinements) + 1), trigger=str(trigger),
        changes=[str(c) for c in changes], evidence=str(evidence), outcome=str(outcome),
    )
    store.refinements.append(event)
    store.save()
    return event


def overview(max_entries_per_kind=20, *, global_=False):
    """A short text listing of the store, for prompts."""
    store = _store(global_, writing=False)
    lines = []
    for kind in KINDS:
        ids = sorted(store.entries[kind])
        if not ids:
            continue
        lines.append("%s:" % kind)
        for eid in ids[:max_entries_per_kind]:
            lines.append("- %s: %s" % (eid, store.entries[kind][eid].title))
        if len(ids) > max_entries_per_kind:
            lines.append("- … %d more" % (len(ids) - max_entries_per_kind))
    return "\n".join(lines) or "(empty harness)"


def snapshot(*, global_=False):
    """The store as plain data."""
    store = _store(global_, writing=False)
    return {
        "schema": 1,
        "entries": {k: {i: dataclasses.asdict(e) for i, e in v.items()} for k, v in store.entries.items()},
        "refinements": [dataclasses.asdict(r) for r in store.refinements],
    }


def _kind_helpers(kind, label):
    def create_(title, content, **kw):
        return create(kind, title, content, **kw)

    def update_(id, title=None, content=None, **kw):
        return update(kind, id, title, content, **kw)

    def upsert_(title, content, **kw):
        return upsert(kind, title, content, **kw)

    def get_(id, **kw):
        return get(kind, id, **kw)

    def delete_(id, **kw):
        return delete(kind, id, **kw)

    def list_(**kw):
        return list(kind, **kw)

    for verb, fn in (("create", create_), ("update", update_), ("upsert", upsert_), ("get", get_),
                     ("delete", delete_), ("list", list_)):
        fn.__name__ = "%s_%s" % (verb, label)
        fn.__doc__ = "`%s` for %s entries." % (verb, kind)
        globals()[fn.__name__] = fn


for _kind, _label in (("memory", "memory"), ("prompt", "prompt_note"), ("skill", "skill"), ("subagent", "subagent")):
    _kind_helpers(_kind, _label)
