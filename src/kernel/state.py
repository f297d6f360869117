"""Namespace snapshots of a persistent session's kernel (behaviour spec §4.1).

The driver (driver.py) calls `snapshot` between cells, once a successful cell has been followed
by a quiet `DEBOUNCE` period, and `restore` once at start-up before its `ready` frame. Both run on
the driver's main thread, so the namespace cannot change under them. `Definitions` watches every
cell for the functions and classes it defines.

Files, in the session's artifacts directory (0700, files 0600, each replaced atomically):
- `kernel-state.dill` (the spec's name; before, `kernel-state.pkl`, still read when there is no
  `.dill`): one pickle of a dict (`FORMAT`), which `dill` loads too: `saved` {name: bytes}, each value's own
  pickle (std `pickle`, or `dill` for the names listed in `dill`); `modules` {name: module};
  `definitions`, the source of the cells' `def`/`class` statements still bound; `after`, the
  saved names that refer to those definitions; `skipped` {name: reason}. Variables are pickled
  one by one, so one that cannot be pickled (or unpickled later) costs only itself.
- `kernel-state.json`: the manifest (names saved with their sizes and how, names skipped with
  the reason), for people and tools; restoring does not need it.

Functions and classes defined in cells: stdlib pickle keeps them by reference to `__main__`,
which a fresh kernel does not have. When the kernel's Python can import `dill`, they are pickled
by value with it. Otherwise (or when dill fails on one) they come back from source: the
`def`/`class` statement (decorators included) that bound the object, taken from its cell with
`ast` and run again, alone, in the new namespace. Only that statement runs again, never the rest
of its cell, so a cell's other side effects (writes, prints, network calls) do not repeat; the
statement's own (its decorators, a class body) do. Values that refer to such definitions (an
instance of a cell-defined class) are pickled by reference and loaded after the definitions.
Modules come back by importing them again by name.
"""

import ast
import importlib
import io
import json
import linecache
import os
import pickle
import signal
import sys
import time
import types

FORMAT = 2
PICKLE_NAME = "kernel-state.dill"
LEGACY_PICKLE_NAME = "kernel-state.pkl"
MANIFEST_NAME = "kernel-state.json"
MAX_VAR_BYTES = 16 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024
TIME_LIMIT = 5.0
DEBOUNCE = 1.5
REASON_CHARS = 200
NO_SOURCE = "defined in a cell, not by a top-level def or class statement, and dill is not installed"
NO_SOURCE_DILL = "defined in a cell, not by a top-level def or class statement, and dill failed: %s"
REFERS = "refers to %s, defined in a cell, which cannot be restored"


_GONE = object()


class Preempted(Exception):
    """A cell is waiting: the snapshot gives way and is tried again later."""


class _Stop(Exception):
    """This variable's pickling must stop; the argument says why."""


class _Limit(str):
    """Why a value was skipped, when a limit (size, total, time) was the reason."""


class _Sink:
    """One variable's pickle, stopped as soon as it passes a limit or a cell is waiting."""

    def __init__(self, limit, deadline, preempt):
        self.buf = io.BytesIO()
        self.limit = limit
        self.deadline = deadline
        self.preempt = preempt

    def write(self, data):
        n = self.buf.write(data)
        if self.buf.tell() > self.limit:
            raise _Stop("size")
        if time.monotonic() > self.deadline:
            raise _Stop("time")
        if self.preempt():
            raise Preempted()
        return n


def cell_defined(obj):
    """A function or class whose home is the namespace (`__main__`): a cell made it."""
    return isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__"


class _CarefulPickler(pickle.Pickler):
    """Notes every cell-defined function or class the value refers to (pickled by name)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.refs = []

    def reducer_override(self, obj):
        if cell_defined(obj):
            self.refs.append(obj)
        return NotImplemented


def _pickle_one(value, limit, deadline, preempt):
    """The value's pickle, and the cell-defined functions and classes it refers to by name."""
    sink = _Sink(limit, deadline, preempt)
    pickle.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    data = sink.buf.getvalue()
    # Most data never mentions `__main__`; when the bytes do, a slower pass decides whether
    # that is a reference to something defined in a cell or just a string.
    if b"__main__" not in data:
        return data, []
    careful = _CarefulPickler(_Sink(limit, deadline, preempt), protocol=pickle.HIGHEST_PROTOCOL)
    careful.dump(value)
    return data, careful.refs


_DILL = []


def _dill():
    """The `dill` module when the kernel's Python has it, else None (imported once, lazily)."""
    if not _DILL:
        try:
            import dill
        except Exception:  # noqa: B902 - absent or broken: the source path is used
            dill = None
        _DILL.append(dill)
    return _DILL[0]


def _dill_one(dill, value, limit, deadline, preempt):
    sink = _Sink(limit, deadline, preempt)
    dill.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return sink.buf.getvalue()


def _short(text):
    text = " ".join(str(text).split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _mib(n):
    return "%d MiB" % (n // (1024 * 1024)) if n >= 1024 * 1024 else "%d bytes" % n


def user_names(ns, baseline):
    """The names a snapshot considers: what cells defined, without `_`-names and the bootstrap's."""
    return sorted(n for n in list(ns) if isinstance(n, str) and not n.startswith("_") and n not in baseline)


def manifest(saved, skipped, total, python, saved_at, serializer="pickle"):
    """The manifest: `saved` is [(name, type, bytes, how)], `skipped` is [(name, type, reason)]."""
    return {
        "format": FORMAT,
        "file": PICKLE_NAME,
        "savedAt": saved_at,
        "python": python,
        "serializer": serializer,
        "totalBytes": total,
        "limits": {"variableBytes": MAX_VAR_BYTES, "totalBytes": MAX_TOTAL_BYTES, "seconds": TIME_LIMIT},
        "saved": [{"name": n, "type": t, "bytes": b, "how": h} for n, t, b, h in saved],
        "skipped": [{"name": n, "type": t, "reason": r} for n, t, r in skipped],
    }


class Definitions:
    """What the cells defined: per name bound by a top-level `def`/`class` statement (or a
    lambda assigned to one name), the statement's source and the object it made. Only the
    newest definition of a name is kept. `before` and `after` bracket every cell."""

    def __init__(self):
        self.records = {}  # name -> (seq, source, object)
        self.seq = 0

    def before(self, ns, code):
        """The definitions `code` makes, with what their names hold now (None: not Python)."""
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
            return None
        lines = code.splitlines(True)
        found = []
        for node in tree.body:
            name = _defined_name(node)
            if name is not None:
                found.append((name, _statement(lines, node), ns.get(name, _GONE)))
        return found

    def after(self, ns, found):
        """Keeps each definition whose name now holds a new object: the statement ran."""
        for name, source, old in found or ():
            obj = ns.get(name, _GONE)
            if obj is _GONE or obj is old or not _made_by(obj, name):
                continue
            self.seq += 1
            self.records[name] = (self.seq, source, obj)

    def index(self):
        """{id(object): (seq, name, source)} of the definitions kept."""
        return {id(made): (seq, name, source) for name, (seq, source, made) in self.records.items()}


def _made_by(obj, name):
    """Whether `obj` is what a `def name`/`class name` (or `name = lambda`) statement in a cell
    made, decorated or not, and not some other object the cell bound to that name later."""
    try:
        return getattr(obj, "__module__", None) == "__main__" and getattr(obj, "__name__", None) in (name, "<lambda>")
    except Exception:  # noqa: B902 - a hostile __getattr__
        return False


def _defined_name(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Lambda)
    ):
        return node.targets[0].id
    return None


def _statement(lines, node):
    """The statement's source lines, its decorators included."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "".join(lines[first - 1 : node.end_lineno])


class _Alarm:
    """A backstop for the time limit: user `__reduce__` code that never writes is cut off too."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.active = False
        self.old = None

    def _fire(self, signum, frame):
        if self.active:
            raise _Stop("time")

    def __enter__(self):
        try:
            if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
                return self  # A cell's own alarm is pending: leave it alone.
            self.old = signal.signal(signal.SIGALRM, self._fire)
            self.active = True
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        except (ValueError, OSError, AttributeError):
            self.active = False
        return self

    def __exit__(self, *exc):
        if self.active:
            self.active = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old or signal.SIG_DFL)
        return False


class _Snapshot:
    """One snapshot being taken: what is saved so far, and how."""

    def __init__(self, ns, definitions, preempt):
        self.ns = ns
        self.definitions = definitions
        self.preempt = preempt
        self.deadline = time.monotonic() + TIME_LIMIT
        self.dill = _dill()
        self.saved = {}
        self.rows = []
        self.skipped = []
        self.total = 0
        self.dilled = []
        self.dill_definitions = []
        self.after = []
        self.modules = {}
        self.sources = {}  # definition name -> [seq, source, [bound names]]
        self.made = definitions.index() if definitions is not None else {}

    def room(self):
        return min(MAX_VAR_BYTES, MAX_TOTAL_BYTES - self.total)

    def keep(self, name, kind, data, how):
        self.saved[name] = data
        self.rows.append((name, kind, len(data), how))
        self.total += len(data)
        if how == "dill":
            self.dilled.append(name)

    def limit_reason(self, stop, room):
        if stop.args[0] == "time":
            return "the %g s snapshot time limit was reached" % TIME_LIMIT
        if room < MAX_VAR_BYTES:
            return "the snapshot's %s total was reached" % _mib(MAX_TOTAL_BYTES)
        return "larger than %s pickled" % _mib(MAX_VAR_BYTES)

    def bounded(self, pickle_it):
        """`pickle_it(room)` under the limits: `(result, None)`, or `(None, why)` where `why` is
        a `_Limit` when a limit stopped it."""
        if time.monotonic() > self.deadline:
            return None, _Limit("the %g s snapshot time limit was reached" % TIME_LIMIT)
        room = self.room()
        try:
            return pickle_it(room), None
        except Preempted:
            raise
        except _Stop as e:
            return None, _Limit(self.limit_reason(e, room))
        except RecursionError:
            return None, "too deeply nested to pickle"
        except BaseException as e:  # noqa: B902 - user __reduce__ code may raise anything
            return None, _short("%s: %s" % (type(e).__name__, e))

    def module(self, name, value):
        target = getattr(value, "__name__", None)
        if isinstance(target, str) and sys.modules.get(target) is value:
            self.modules[name] = target
            self.rows.append((name, "module", 0, "import"))
        else:
            self.skipped.append((name, "module", "a module that cannot be imported by name; import it again"))

    def definition(self, name, value):
        """A function or class a cell defined: dill when it can, else its statement's source."""
        kind = type(value).__name__
        dill_error = None
        if self.dill is not None:
            data, why = self.bounded(lambda room: _dill_one(self.dill, value, room, self.deadline, self.preempt))
            if data is not None:
                self.keep(name, kind, data, "dill")
                self.dill_definitions.append(name)
                return
            if isinstance(why, _Limit):
                self.skipped.append((name, kind, why))
                return
            dill_error = why
        made = self.made.get(id(value))
        if made is None or made[2] is None:
            self.skipped.append((name, kind, NO_SOURCE if dill_error is None else NO_SOURCE_DILL % dill_error))
            return
        seq, defined, source = made
        entry = self.sources.setdefault(defined, [seq, source, []])
        entry[2].append(name)
        self.rows.append((name, kind, len(source.encode()), "source"))
        self.total += len(source.encode())

    def restorable(self, obj):
        """Whether a reference by name to `obj` (`__main__.<qualname>`) resolves after a restore:
        the name it starts with is saved and leads to `obj` now."""
        parts = str(getattr(obj, "__qualname__", "")).split(".")
        if parts[0] not in self.saved and parts[0] not in self.sources:
            return False
        found = self.ns.get(parts[0], _GONE)
        for part in parts[1:]:
            found = getattr(found, part, _GONE)
        return found is obj

    def value(self, name, value):
        """Any other value: std pickle (after the definitions it refers to), else dill."""
        kind = type(value).__name__
        result, why = self.bounded(lambda room: _pickle_one(value, room, self.deadline, self.preempt))
        if result is not None:
            data, refs = result
            missing = [r for r in refs if not self.restorable(r)]
            if not missing:
                self.keep(name, kind, data, "pickle")
                if refs:
                    self.after.append(name)
                return
            why = REFERS % (getattr(missing[0], "__qualname__", None) or repr(missing[0]))
        if isinstance(why, _Limit) or self.dill is None:
            self.skipped.append((name, kind, why))
            return
        data, dill_why = self.bounded(lambda room: _dill_one(self.dill, value, room, self.deadline, self.preempt))
        if data is None:
            self.skipped.append((name, kind, dill_why if isinstance(dill_why, _Limit) else why))
            return
        self.keep(name, kind, data, "dill")
        self.after.append(name)

    def payload(self):
        definitions = sorted(self.sources.items(), key=lambda kv: kv[1][0])
        return {
            "format": FORMAT,
            "saved": self.saved,
            "dill": self.dilled,
            "dillDefinitions": self.dill_definitions,
            "after": self.after,
            "modules": self.modules,
            "definitions": [{"name": d, "source": src, "names": names} for d, (_, src, names) in definitions],
            "skipped": {n: r for n, _, r in self.skipped},
        }


def snapshot(ns, baseline, directory, preempt, definitions=None):
    """Pickles the user namespace into `directory`; returns the manifest. Raises `Preempted`
    when a cell is waiting (nothing is written then), `OSError` when the files cannot be written."""
    snap = _Snapshot(ns, definitions, preempt)
    names = []
    for name in user_names(ns, baseline):
        value = ns.get(name, _GONE)
        if value is not _GONE:  # (A background thread of a cell may have removed it.)
            names.append((name, value))
    made = lambda v: id(v) in snap.made  # noqa: E731
    with _Alarm(TIME_LIMIT + 0.5):
        # Definitions first: a value that refers to one is kept only if it comes back.
        for name, value in names:
            if isinstance(value, types.ModuleType):
                snap.module(name, value)
            elif cell_defined(value) or made(value):
                snap.definition(name, value)
        for name, value in names:
            if not (isinstance(value, types.ModuleType) or cell_defined(value) or made(value)):
                snap.value(name, value)
    rows = sorted(snap.rows)
    info = manifest(rows, sorted(snap.skipped), snap.total, sys.version.split()[0], _iso_now(),
                    "dill" if snap.dill is not None else "pickle")
    _make_private_dir(directory)
    payload = snap.payload()
    _replace(os.path.join(directory, PICKLE_NAME), lambda f: pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL))
    _replace(os.path.join(directory, MANIFEST_NAME), lambda f: f.write(json.dumps(info, indent=1).encode()))
    try:
        os.unlink(os.path.join(directory, LEGACY_PICKLE_NAME))  # superseded: never read again
    except OSError:
        pass
    return info


def _read(directory):
    """The payload on disk (`kernel-state.dill`, else an older agent's `kernel-state.pkl`):
    None when there is none; raises when it cannot be read."""
    for name in (PICKLE_NAME, LEGACY_PICKLE_NAME):
        path = os.path.join(directory, name)
        try:
            size = os.path.getsize(path)
            break
        except OSError:
            continue
    else:
        return None
    if size > MAX_TOTAL_BYTES + MAX_VAR_BYTES:
        raise ValueError("%d bytes, more than a snapshot can hold" % size)
    with open(path, "rb") as f:
        payload = pickle.load(f)
    if not isinstance(payload, dict) or payload.get("format") not in (1, FORMAT):
        raise ValueError("not a kernel-state file of format %d" % FORMAT)
    for key, kind in (("saved", dict), ("skipped", dict), ("dill", list), ("after", list),
                      ("modules", dict), ("definitions", list), ("dillDefinitions", list)):
        payload.setdefault(key, kind())  # (format 1 had only `saved` and `skipped`)
        if not isinstance(payload[key], kind):
            raise ValueError("the file's sections are missing")
    return payload


class _Restore:
    """One restore under way: the report, and the deadline it keeps."""

    def __init__(self, ns, baseline, payload):
        self.ns = ns
        self.baseline = baseline
        self.payload = payload
        self.deadline = time.monotonic() + TIME_LIMIT
        self.report = {"restored": [], "redefined": [], "failed": [], "skipped": []}

    def wanted(self, name):
        return isinstance(name, str) and not name.startswith("_") and name not in self.baseline

    def attempt(self, name, load):
        if time.monotonic() > self.deadline:
            self.report["failed"].append({"name": name, "reason": "the %g s restore time limit was reached" % TIME_LIMIT})
            return False
        try:
            load()
            return True
        except BaseException as e:  # noqa: B902 - unpickling and definitions run user code
            self.report["failed"].append({"name": name, "reason": _short("%s: %s" % (type(e).__name__, e))})
            return False

    def modules(self):
        for name, module in sorted(self.payload["modules"].items()):
            if self.wanted(name) and isinstance(module, str):
                if self.attempt(name, lambda: self.ns.__setitem__(name, importlib.import_module(module))):
                    self.report["restored"].append(name)

    def values(self, later, tracker=None):
        dilled = set(self.payload["dill"])
        definitions = set(self.payload["dillDefinitions"])
        saved = self.payload["saved"]
        for name in sorted(n for n in saved if self.wanted(n) and (n in self.payload["after"]) == later):
            data = saved[name]
            if not isinstance(data, (bytes, bytearray)):
                continue
            if name in dilled and _dill() is None:
                self.report["failed"].append({"name": name, "reason": "saved with dill, which this kernel's Python cannot import"})
                continue
            loads = _dill().loads if name in dilled else pickle.loads
            if self.attempt(name, lambda: self.ns.__setitem__(name, loads(data))):
                self.report["restored"].append(name)
                if name in definitions and tracker is not None:
                    # A definition again for the next snapshot (its source is not known).
                    tracker.seq += 1
                    tracker.records[name] = (tracker.seq, None, self.ns[name])

    def definitions(self, tracker):
        for i, d in enumerate(self.payload["definitions"]):
            if not isinstance(d, dict) or not isinstance(d.get("source"), str):
                continue
            defined, source = d.get("name"), d["source"]
            names = [n for n in d.get("names") or [] if self.wanted(n)]
            if not isinstance(defined, str) or not names:
                continue
            filename = "<restored definition %d>" % (i + 1)
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)

            def define():
                exec(compile(source, filename, "exec"), self.ns)
                made = self.ns[defined]
                for n in names:
                    self.ns[n] = made
                if tracker is not None:
                    tracker.seq += 1
                    tracker.records[defined] = (tracker.seq, source, made)

            if self.attempt(names[0], define):
                self.report["restored"].extend(names)
                self.report["redefined"].extend(names)
            else:
                why = self.report["failed"][-1]["reason"]
                self.report["failed"].extend({"name": n, "reason": why} for n in names[1:])


def restore(ns, baseline, directory, definitions=None):
    """Loads a snapshot into `ns`: modules, then plain values, then the cells' definitions,
    then the values that refer to them. Returns None when there is none, else the report
    `{"restored": [names], "redefined": [names], "failed": [{name, reason}],
    "skipped": [{name, reason}]}` or `{"error": text}` for a file that cannot be read. Never
    raises. `definitions` (a `Definitions`) learns what was defined again."""
    try:
        payload = _read(directory)
    except BaseException as e:  # noqa: B902 - a corrupt file must never stop the kernel
        return {"error": _short("%s: %s" % (type(e).__name__, e))}
    if payload is None:
        return None
    run = _Restore(ns, baseline, payload)
    run.modules()
    run.values(later=False, tracker=definitions)
    run.definitions(definitions)
    run.values(later=True)
    run.report["restored"].sort()
    run.report["redefined"].sort()
    skipped = payload["skipped"]
    for name in sorted(n for n in skipped if isinstance(n, str)):
        run.report["skipped"].append({"name": name, "reason": _short(skipped[name])})
    return run.report


def _iso_now():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


def _make_private_dir(directory):
    """Creates `directory` and any missing parent with mode 0700."""
    missing = []
    d = os.path.abspath(directory)
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


def _replace(path, write):
    """Writes a file through a private temp file and a rename, so a reader sees old or new."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        os.unlink(tmp)
    except OSError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Snapshotter:
    """The debounce: `touch` after a successful cell; `due_in` says how long the driver may wait
    for the next cell before `run` is due (None: nothing to save)."""

    def __init__(self, ns, baseline, directory, preempt, send_log, definitions=None):
        self.ns = ns
        self.definitions = definitions
        self.baseline = baseline
        self.directory = directory
        self.preempt = preempt
        self.send_log = send_log
        self.due = None

    def touch(self):
        self.due = time.monotonic() + DEBOUNCE

    def due_in(self):
        if self.due is None:
            return None
        return max(0.0, self.due - time.monotonic())

    def flush(self):
        """Saves at once if a snapshot is pending; whether one was written."""
        if self.due is None:
            return False
        self.run()
        return self.due is None

    def run(self):
        try:
            info = snapshot(self.ns, self.baseline, self.directory, self.preempt, self.definitions)
        except Preempted:
            # The next cell goes first; the snapshot waits for the next quiet moment.
            self.touch()
            return
        except BaseException as e:  # noqa: B902 - a failed snapshot is a log line, never a failed cell
            self.due = None
            self.send_log("warn", "cannot save the kernel state in %s: %s: %s" % (self.directory, type(e).__name__, e))
            return
        self.due = None
        self.send_log(
            "debug",
            "kernel state saved in %s: %d names, %d bytes, %d skipped"
            % (self.directory, len(info["saved"]), info["totalBytes"], len(info["skipped"])),
        )
