"""Namespace snapshots of a persistent session's kernel (behaviour spec §4.1), standard library only.

The driver (driver.py) calls `snapshot` between cells, once a successful cell has been followed
by a quiet `DEBOUNCE` period, and `restore` once at start-up before its `ready` frame. Both run on
the driver's main thread, so the namespace cannot change under them.

Files, in the session's artifacts directory (0700, files 0600, each replaced atomically):
- `kernel-state.pkl`: one pickle of `{"format", "saved": {name: bytes}, "skipped": {name: reason}}`
  where each `bytes` is that variable's own pickle. Variables are pickled one by one, so one that
  cannot be pickled (or unpickled later) costs only itself; the file is self-contained.
- `kernel-state.json`: the manifest (names saved with their sizes, names skipped with the reason),
  for people and tools; restoring does not need it.

Functions and classes defined in cells are refused at snapshot time: pickle stores them by
reference to `__main__`, which a fresh kernel does not have, so they (and instances of such
classes) could never be restored.
"""

import io
import json
import os
import pickle
import signal
import sys
import time
import types

FORMAT = 1
PICKLE_NAME = "kernel-state.pkl"
MANIFEST_NAME = "kernel-state.json"
MAX_VAR_BYTES = 16 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024
TIME_LIMIT = 5.0
DEBOUNCE = 1.5
REASON_CHARS = 200
CELL_DEFINED = "%s (pickle keeps functions and classes by name only)"


_GONE = object()


class Preempted(Exception):
    """A cell is waiting: the snapshot gives way and is tried again later."""


class _Stop(Exception):
    """This variable's pickling must stop; the argument says why."""


class _CellDefined(Exception):
    """The value is, or refers to, a function or class defined in a cell."""


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


class _CarefulPickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
            raise _CellDefined(getattr(obj, "__qualname__", None) or repr(obj))
        return NotImplemented


def _pickle_one(value, limit, deadline, preempt):
    sink = _Sink(limit, deadline, preempt)
    pickle.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    data = sink.buf.getvalue()
    # Most data never mentions `__main__`; when the bytes do, a slower pass decides whether
    # that is a reference to something defined in a cell or just a string.
    if b"__main__" in data:
        _CarefulPickler(_Sink(limit, deadline, preempt), protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return data


def _short(text):
    text = " ".join(str(text).split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _mib(n):
    return "%d MiB" % (n // (1024 * 1024)) if n >= 1024 * 1024 else "%d bytes" % n


def user_names(ns, baseline):
    """The names a snapshot considers: what cells defined, without `_`-names and the bootstrap's."""
    return sorted(n for n in list(ns) if isinstance(n, str) and not n.startswith("_") and n not in baseline)


def manifest(saved, skipped, total, python, saved_at):
    """The manifest: `saved` is [(name, type, bytes)], `skipped` is [(name, type, reason)]."""
    return {
        "format": FORMAT,
        "file": PICKLE_NAME,
        "savedAt": saved_at,
        "python": python,
        "totalBytes": total,
        "limits": {"variableBytes": MAX_VAR_BYTES, "totalBytes": MAX_TOTAL_BYTES, "seconds": TIME_LIMIT},
        "saved": [{"name": n, "type": t, "bytes": b} for n, t, b in saved],
        "skipped": [{"name": n, "type": t, "reason": r} for n, t, r in skipped],
    }


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


def snapshot(ns, baseline, directory, preempt):
    """Pickles the user namespace into `directory`; returns the manifest. Raises `Preempted`
    when a cell is waiting (nothing is written then), `OSError` when the files cannot be written."""
    deadline = time.monotonic() + TIME_LIMIT
    saved, saved_rows, skipped = {}, [], []
    total = 0
    with _Alarm(TIME_LIMIT + 0.5):
        for name in user_names(ns, baseline):
            value = ns.get(name, _GONE)
            if value is _GONE:
                continue  # A background thread of a cell removed it meanwhile.
            kind = type(value).__name__
            if isinstance(value, types.ModuleType):
                skipped.append((name, kind, "a module; import it again"))
                continue
            if isinstance(value, (type, types.FunctionType)) and getattr(value, "__module__", None) == "__main__":
                skipped.append((name, kind, CELL_DEFINED % "defined in a cell"))
                continue
            if time.monotonic() > deadline:
                skipped.append((name, kind, "the %g s snapshot time limit was reached" % TIME_LIMIT))
                continue
            room = min(MAX_VAR_BYTES, MAX_TOTAL_BYTES - total)
            try:
                data = _pickle_one(value, room, deadline, preempt)
            except Preempted:
                raise
            except _Stop as e:
                if e.args[0] == "time":
                    reason = "the %g s snapshot time limit was reached" % TIME_LIMIT
                elif room < MAX_VAR_BYTES:
                    reason = "the snapshot's %s total was reached" % _mib(MAX_TOTAL_BYTES)
                else:
                    reason = "larger than %s pickled" % _mib(MAX_VAR_BYTES)
                skipped.append((name, kind, reason))
                continue
            except _CellDefined as e:
                skipped.append((name, kind, CELL_DEFINED % ("refers to %s, defined in a cell" % e.args[0])))
                continue
            except RecursionError:
                skipped.append((name, kind, "too deeply nested to pickle"))
                continue
            except BaseException as e:  # noqa: B902 - user __reduce__ code may raise anything
                skipped.append((name, kind, _short("%s: %s" % (type(e).__name__, e))))
                continue
            saved[name] = data
            saved_rows.append((name, kind, len(data)))
            total += len(data)
    payload = {"format": FORMAT, "saved": saved, "skipped": {n: r for n, _, r in skipped}}
    info = manifest(saved_rows, skipped, total, sys.version.split()[0], _iso_now())
    _make_private_dir(directory)
    _replace(os.path.join(directory, PICKLE_NAME), lambda f: pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL))
    _replace(os.path.join(directory, MANIFEST_NAME), lambda f: f.write(json.dumps(info, indent=1).encode()))
    return info


def restore(ns, baseline, directory):
    """Loads a snapshot into `ns`. Returns None when there is none, else the report
    `{"restored": [names], "failed": [{name, reason}], "skipped": [{name, reason}]}` or
    `{"error": text}` for a file that cannot be read. Never raises."""
    path = os.path.join(directory, PICKLE_NAME)
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    try:
        if size > MAX_TOTAL_BYTES + MAX_VAR_BYTES:
            raise ValueError("%d bytes, more than a snapshot can hold" % size)
        with open(path, "rb") as f:
            payload = pickle.load(f)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ValueError("not a kernel-state file of format %d" % FORMAT)
        saved = payload.get("saved")
        skipped = payload.get("skipped")
        if not isinstance(saved, dict) or not isinstance(skipped, dict):
            raise ValueError("the file's sections are missing")
    except BaseException as e:  # noqa: B902 - a corrupt file must never stop the kernel
        return {"error": _short("%s: %s" % (type(e).__name__, e))}
    deadline = time.monotonic() + TIME_LIMIT
    report = {"restored": [], "failed": [], "skipped": []}
    for name in sorted(n for n in saved if isinstance(n, str)):
        data = saved[name]
        if name.startswith("_") or name in baseline or not isinstance(data, (bytes, bytearray)):
            continue
        if time.monotonic() > deadline:
            report["failed"].append({"name": name, "reason": "the %g s restore time limit was reached" % TIME_LIMIT})
            continue
        try:
            ns[name] = pickle.loads(data)
            report["restored"].append(name)
        except BaseException as e:  # noqa: B902 - unpickling runs arbitrary reducers
            report["failed"].append({"name": name, "reason": _short("%s: %s" % (type(e).__name__, e))})
    for name in sorted(n for n in skipped if isinstance(n, str)):
        report["skipped"].append({"name": name, "reason": _short(skipped[name])})
    return report


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

    def __init__(self, ns, baseline, directory, preempt, send_log):
        self.ns = ns
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
            info = snapshot(self.ns, self.baseline, self.directory, self.preempt)
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
