"""prime-agent kernel driver: runs Python cells for the host over private pipes.

The host (src/kernel/mod.rs) starts `python3 -u driver.py` in its own process group. This file
owns the kernel side of the wire protocol described there: it moves the protocol pipes off the
fds that user code can see, runs one cell at a time with IPython's InteractiveShell when it is
installed (else a plain-exec engine that supports top-level `await`), and reports results,
displays, errors and the end of each cell as NDJSON frames. In a persistent session it also
saves the namespace between cells and loads it at start-up (state.py). Standard library only.
"""

import _thread
import ast
import asyncio
import builtins
import importlib.util
import inspect
import json
import linecache
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER_FILES = {os.path.abspath(__file__)}


class _Wire:
    """Frames to the host on a private fd; SIGINT never tears a frame (see `on_sigint`)."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()
        self.critical = 0
        self.interruptible = False
        self.pending_interrupt = False

    def send(self, frame):
        data = (json.dumps(frame, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
        # A KeyboardInterrupt between two partial writes would corrupt the stream, so the
        # signal handler defers interrupts while a frame is being written.
        self.critical += 1
        try:
            with self.lock:
                view = memoryview(data)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
        finally:
            self.critical -= 1
        if self.pending_interrupt and self.interruptible and threading.current_thread() is threading.main_thread():
            self.pending_interrupt = False
            raise KeyboardInterrupt


WIRE = None
STATE_MODULE = "_prime_agent_state"
STATE = {"cell": None, "token": "", "engine": "plain"}


def on_sigint(signum, frame):
    # The host interrupts a busy cell with SIGINT. While the driver itself is working for a
    # cell (writing a frame, setting up) the interrupt is deferred to the next point where user
    # code runs; when idle between cells it is stale and ignored.
    if WIRE is None:
        return
    if WIRE.interruptible and not WIRE.critical:
        raise KeyboardInterrupt
    if STATE["cell"] is not None:
        WIRE.pending_interrupt = True


def run_user(fn, *args):
    """Runs user code with interrupts enabled (raising at once if one is pending)."""
    if WIRE.pending_interrupt:
        WIRE.pending_interrupt = False
        raise KeyboardInterrupt
    WIRE.interruptible = True
    try:
        return fn(*args)
    finally:
        WIRE.interruptible = False


def send_cell(frame):
    if STATE["cell"] is not None:
        frame["id"] = STATE["cell"]
    WIRE.send(frame)


def report_error(ename, evalue, tb_lines):
    send_cell({"op": "error", "ename": ename, "evalue": evalue, "traceback": tb_lines})


def report_result(text):
    send_cell({"op": "result", "text": text})


# --- host replies ------------------------------------------------------------------------------

_replies = {}
_replies_lock = threading.Lock()
_next_rid = [0]
_exec_queue = []
_exec_cond = threading.Condition()


def new_request(kind, payload):
    """Sends a host request; returns a concurrent future resolved by the reader thread."""
    import concurrent.futures

    fut = concurrent.futures.Future()
    with _replies_lock:
        _next_rid[0] += 1
        rid = _next_rid[0]
        _replies[rid] = fut
    WIRE.send({"op": "host_request", "rid": rid, "type": kind, "payload": payload})
    return fut


def _reader(fd):
    """Host → kernel frames: `execute` is queued for the main thread, replies resolve futures."""
    stream = os.fdopen(fd, "rb", buffering=0)
    buf = b""
    while True:
        try:
            chunk = stream.read(65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            op = msg.get("op")
            if op in ("execute", "flush"):
                with _exec_cond:
                    _exec_queue.append(msg)
                    _exec_cond.notify()
            elif op == "host_reply":
                with _replies_lock:
                    fut = _replies.pop(msg.get("rid"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
    # The host is gone: take the whole process group down with us so nothing is orphaned.
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _next_execute(timeout=None):
    """The next queued `execute`, or None once `timeout` seconds passed without one."""
    with _exec_cond:
        if timeout is None:
            while not _exec_queue:
                _exec_cond.wait()
        elif not _exec_queue:
            _exec_cond.wait(timeout)
        return _exec_queue.pop(0) if _exec_queue else None


def send_log(level, message):
    """A line for the host's log (`warn`, `info` or `debug`), outside any cell."""
    WIRE.send({"op": "log", "level": level, "message": message})


# --- engines -----------------------------------------------------------------------------------

def _internal_frame(frame):
    """A frame of the driver or of IPython itself, not of the cell."""
    path = os.path.abspath(frame.f_code.co_filename)
    ipython = sys.modules.get("IPython")
    root = os.path.dirname(os.path.abspath(ipython.__file__)) if ipython is not None else None
    return path in DRIVER_FILES or (root is not None and path.startswith(root + os.sep))


def _clean_traceback(etype, value, tb):
    """Formats an exception without the driver's own frames."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in DRIVER_FILES:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(etype, value, tb)).rstrip("\n")
    return [text]


async def _capture(coro):
    """Awaits a cell; an exception is returned, not raised, because a task's exception loses
    the cell's frames on the way out of `run_until_complete`."""
    try:
        return True, await coro
    except BaseException as e:  # noqa: B902 - re-raised by the caller
        return False, e


class PlainEngine:
    """`exec` with IPython-like touches: last-expression value, top-level await, `_`."""

    name = "plain"

    def __init__(self, ns):
        self.ns = ns
        self.count = 0
        self.loop = asyncio.new_event_loop()

    def _run_code(self, code):
        asyncio.set_event_loop(self.loop)
        value = eval(code, self.ns)
        if inspect.CO_COROUTINE & code.co_flags:
            task = self.loop.create_task(_capture(value))
            try:
                ok, value = self.loop.run_until_complete(task)
            except BaseException:
                # Interrupted inside the event loop itself: stop the cell's task too.
                task.cancel()
                try:
                    self.loop.run_until_complete(task)
                except BaseException:
                    pass
                raise
            if not ok:
                raise value
        return value

    def warm(self):
        """Nothing is lazy here beyond what compiling any cell costs."""

    def transform(self, code):
        """The cell as plain Python (it is already)."""
        return code

    def run(self, code):
        self.count += 1
        filename = "<cell-%d>" % self.count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            tree = compile(code, filename, "exec", flags | ast.PyCF_ONLY_AST)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            body = compile(tree, filename, "exec", flags)
            tail = compile(last, filename, "eval", flags) if last is not None else None
        except (SyntaxError, ValueError, OverflowError) as e:
            lines = traceback.format_exception_only(type(e), e)
            report_error(type(e).__name__, str(e), ["".join(lines).rstrip("\n")])
            return "error"
        try:
            run_user(self._run_code, body)
            if tail is not None:
                value = run_user(self._run_code, tail)
                if value is not None:
                    self.ns["_"] = value
                    report_result(repr(value))
        except BaseException as e:  # noqa: B902 - user code may raise anything, incl. SystemExit
            report_error(type(e).__name__, str(e), _clean_traceback(type(e), e, e.__traceback__))
            return "error"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return "ok"


def _import_ipython_core():
    """Makes `IPython` importable without running its package `__init__`, which imports the
    terminal front end (prompt_toolkit, the debugger's UI, `embed`) that a kernel never uses:
    about half of IPython's import time and a third of its memory. The package module gets the
    one name IPython's own modules import from it (`get_ipython`); any other attribute a cell
    asks for runs the real `__init__` into the same module object, or imports the submodule of
    that name (`from IPython import display`). When IPython is missing, or this fails in any
    way, it leaves nothing behind and the caller's ordinary import decides."""
    import importlib.util

    if "IPython" in sys.modules:
        return
    spec = importlib.util.find_spec("IPython")
    if spec is None or spec.submodule_search_locations is None:
        return
    before = set(sys.modules)
    package = importlib.util.module_from_spec(spec)

    def __getattr__(name):
        if importlib.util.find_spec("IPython." + name) is not None:
            return importlib.import_module("IPython." + name)
        package.__dict__.pop("__getattr__", None)
        spec.loader.exec_module(package)
        return getattr(package, name)

    sys.modules["IPython"] = package
    try:
        from IPython.core.getipython import get_ipython

        package.get_ipython = get_ipython
        from IPython.core.interactiveshell import InteractiveShell  # noqa: F401
    except Exception:
        for name in set(sys.modules) - before:
            del sys.modules[name]
        return
    package.__getattr__ = __getattr__


def make_ipython_engine(ns_module):
    """IPython's InteractiveShell with results, displays and tracebacks sent as frames."""
    _import_ipython_core()
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.profiledir import ProfileDir
    from traitlets import Type
    from traitlets.config import Config

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            report_result(format_dict.get("text/plain", ""))

        def finish_displayhook(self):
            sys.stdout.flush()

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kw):
            display_bundle(data)

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        def _showtraceback(self, etype, evalue, stb):
            report_error(getattr(etype, "__name__", str(etype)), str(evalue), list(stb))

        def showtraceback(self, exc_tuple=None, *args, **kwargs):
            etype, value, tb = exc_tuple or sys.exc_info()
            if etype is None or not issubclass(etype, KeyboardInterrupt):
                return super().showtraceback(exc_tuple, *args, **kwargs)
            # The host's interrupt. IPython's first traceback parses source files (stack_data):
            # about 0.2 s of CPU, which a loaded machine stretches past the host's 1 s grace,
            # and the host then kills and resets the kernel. The stdlib's format costs ~1 ms.
            sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
            while tb is not None and _internal_frame(tb.tb_frame):
                tb = tb.tb_next
            text = "".join(traceback.format_exception(etype, value, tb)).rstrip("\n")
            report_error(etype.__name__, str(value), [text])

        def enable_gui(self, gui=None):
            pass

        # Completion (IPython's completer and jedi: a fifth of the shell's start-up) is made
        # on first use, which a kernel that only runs cells never reaches.
        def init_completer(self):
            pass

        @property
        def Completer(self):
            if self.__dict__.get("_completer") is None:
                InteractiveShell.init_completer(self)
            return self.__dict__["_completer"]

        @Completer.setter
        def Completer(self, value):
            self.__dict__["_completer"] = value

    cfg = Config()
    cfg.HistoryManager.enabled = False
    cfg.InteractiveShell.colors = "NoColor"
    # A private IPython dir: the kernel must not create or read ~/.ipython on the user's machine.
    # Beside the driver, unless that is not writable (a sandboxed kernel may write only its
    # roots and its private TMPDIR): then a fresh one in TMPDIR.
    ipdir = os.path.join(HERE, "ipython")
    try:
        os.makedirs(ipdir, exist_ok=True)
    except OSError:
        import tempfile

        ipdir = tempfile.mkdtemp(prefix="prime-agent-ipython-")
    shell = Shell.instance(
        config=cfg,
        ipython_dir=ipdir,
        profile_dir=ProfileDir(location=os.path.join(ipdir, "profile_default")),
        user_module=ns_module,
    )

    class Engine:
        name = "ipython"

        def __init__(self):
            self.ns = shell.user_ns

        def warm(self):
            """The one-time work of IPython's first cell, done without running one: the
            tokenizer's regular expressions (input transformers) and the display formatters
            (created at the first result). About 15 ms of a fork's first cell otherwise, paid
            again by every kernel; done in the zygote, the pages are shared. Neither touches the
            user namespace, the history or the execution count. IPython 9 also makes its session
            logger at the first cell and imports `hashlib` there to name the cell's code: about
            15 ms of every first cell, done here too."""
            import hashlib  # noqa: F401

            shell.transform_cell("import os\nos.getpid()\n")
            shell.display_formatter.format(0)
            getattr(shell, "logger", None)

        def transform(self, code):
            """The cell as plain Python: magics become calls."""
            return shell.transform_cell(code)

        def run(self, code):
            res = run_user(shell.run_cell, code, True)
            sys.stdout.flush()
            sys.stderr.flush()
            return "ok" if res.success else "error"

    return Engine()


# --- displays and %%bash -----------------------------------------------------------------------

# MIME types the host understands; everything else is shown as text on stdout.
HOST_MIMES = (
    "application/vnd.prime-agent.diff+json",
    "application/vnd.prime-agent.attachment+json",
    "application/vnd.prime-agent.agent-message+json",
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
)


def display_bundle(data):
    """Sends a display bundle to the host, or prints its text like a terminal would."""
    if not isinstance(data, dict):
        return
    if any(m in data for m in HOST_MIMES):
        send_cell({"op": "display", "data": {k: v for k, v in data.items() if k in HOST_MIMES}})
        return
    text = data.get("text/plain")
    if isinstance(text, str):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def bash_body(code):
    lines = code.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if line.strip() == "%%bash" or line.startswith("%%bash "):
            return "\n".join(lines[i + 1:])
        return None
    return None


SHELL = {"path": "bash", "prefix": ""}


def run_bash(body):
    """A fresh shell per cell (`bash`, or settings `shellPath`; settings `shellCommandPrefix`
    first), writing straight to the kernel's stdout/stderr pipes."""
    if SHELL["prefix"]:
        body = SHELL["prefix"] + "\n" + body
    try:
        proc = subprocess.Popen([SHELL["path"], "-c", body], stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        report_error(type(e).__name__, str(e), ["%s: %s" % (type(e).__name__, e)])
        return "error"
    # The host kills this group too if it has to kill the kernel.
    send_cell({"op": "child_group", "pgid": proc.pid})
    try:
        rc = run_user(proc.wait)
    except KeyboardInterrupt:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        report_error("KeyboardInterrupt", "", ["KeyboardInterrupt"])
        return "error"
    if rc != 0:
        evalue = "Command '%s' returned non-zero exit status %d." % (os.path.basename(SHELL["path"]), rc)
        report_error("CalledProcessError", evalue, ["CalledProcessError: " + evalue])
        return "error"
    return "ok"


# --- start-up ----------------------------------------------------------------------------------

def _load_module(name, filename):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, filename))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _sync_marker(cell):
    return ("\x00%s:%s\x00" % (STATE["token"], cell)).encode()


def bootstrap(want_ipython):
    """Everything a kernel needs before its protocol fds: the user namespace, `rlm` and the
    engine. A kernel runs it at start; a zygote (below) runs it once and forks kernels after it,
    so each forked kernel starts with all of this done and its pages shared."""
    # The driver's directory must not shadow user imports; the cwd does, as in Jupyter.
    if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:
        sys.path[0] = ""
    sys.argv = [""]

    user = types.ModuleType("__main__")
    user.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = user
    for name in ("harness", "rlm"):
        DRIVER_FILES.add(os.path.join(HERE, name + ".py"))
    _load_module("rlm.harness", "harness.py")
    rlm = _load_module("rlm", "rlm.py")
    rlm._install(
        send_display=lambda data: send_cell({"op": "display", "data": data}),
        new_request=new_request,
        namespace=user.__dict__,
    )

    engine = None
    if want_ipython:
        try:
            engine = make_ipython_engine(user)
        except ImportError:
            engine = None
        except Exception as e:  # IPython present but broken: the plain engine still works.
            sys.stderr.write("prime-agent: IPython unusable (%s); using the plain engine\n" % e)
    if engine is None:
        user.__dict__["display"] = rlm.display
        engine = PlainEngine(user.__dict__)
    STATE["engine"] = engine.name
    return user, engine


def main():
    want_ipython = os.environ.pop("PRIME_AGENT_KERNEL_IPYTHON", "1") != "0"
    user, engine = bootstrap(want_ipython)
    serve(user, engine)


def serve(user, engine):
    """The kernel proper, from the protocol fds on (fd 0 host → kernel, fd 3 kernel → host)."""
    global WIRE
    STATE["token"] = os.environ.pop("PRIME_AGENT_KERNEL_TOKEN", "")
    SHELL["path"] = os.environ.pop("PRIME_AGENT_SHELL_PATH", "") or "bash"
    SHELL["prefix"] = os.environ.pop("PRIME_AGENT_SHELL_COMMAND_PREFIX", "")
    # Protocol fds: host → kernel arrives on fd 0 and kernel → host leaves on fd 3. Both move to
    # private non-inheritable fds so user code and its subprocesses never see them; fd 0
    # becomes /dev/null (cells have no stdin).
    proto_in = os.dup(0)
    proto_out = os.dup(3)
    os.close(3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    WIRE = _Wire(proto_out)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    signal.signal(signal.SIGINT, on_sigint)

    # A persistent session's main kernel saves its namespace after successful cells and, on
    # its first start in a resumed session, loads what was saved (see state.py).
    state_dir = os.environ.pop("PRIME_AGENT_KERNEL_STATE_DIR", "")
    want_restore = os.environ.pop("PRIME_AGENT_KERNEL_STATE_RESTORE", "") == "1"
    snapshots = None
    restored = None
    # A zygote has loaded the snapshot code already (see `zygote`); a kernel that takes no
    # snapshots does not keep it, as if it had never been loaded.
    preloaded = sys.modules.pop(STATE_MODULE, None)
    if state_dir:
        DRIVER_FILES.add(os.path.join(HERE, "state.py"))
        try:
            if preloaded is not None:
                sys.modules[STATE_MODULE] = state = preloaded
            else:
                state = _load_module(STATE_MODULE, "state.py")
            # Everything the bootstrap and the engine put into the namespace is theirs.
            baseline = frozenset(user.__dict__)
            definitions = state.Definitions()
            if want_restore:
                restored = state.restore(user.__dict__, baseline, state_dir, definitions)
            snapshots = state.Snapshotter(
                user.__dict__, baseline, state_dir, lambda: bool(_exec_queue), send_log, definitions
            )
        except Exception as e:  # The kernel works without snapshots; the host logs why.
            if want_restore:
                restored = {"error": "the snapshot code failed: %s: %s" % (type(e).__name__, e)}
            else:
                send_log("warn", "kernel state snapshots are off: %s: %s" % (type(e).__name__, e))

    # `_thread`, not `threading.Thread(...).start()`: the latter waits until the new thread has
    # run, which on a loaded machine held `ready` (and the first cell) back by up to 10 ms. The
    # reader needs no head start: frames wait in the pipe until it reads them.
    _thread.start_new_thread(_reader, (proto_in,))
    WIRE.send({"op": "ready", "pid": os.getpid(), "engine": engine.name, "python": sys.version.split()[0], "restore": restored})

    while True:
        msg = _next_execute(snapshots.due_in() if snapshots is not None else None)
        if msg is None:
            # A quiet moment after successful cells: save the namespace (off the turn's path;
            # it gives way to the next cell as soon as one is queued).
            snapshots.run()
            continue
        if msg.get("op") == "flush":
            # The agent is exiting: a snapshot still waiting for its quiet moment is due now.
            saved = snapshots.flush() if snapshots is not None else False
            WIRE.send({"op": "flushed", "saved": saved})
            continue
        cell = msg.get("id")
        code = msg.get("code", "")
        STATE["cell"] = cell
        WIRE.pending_interrupt = False
        status = "error"
        body = None
        found = None
        try:
            body = bash_body(code)
            if body is None and snapshots is not None:
                found = _definitions_before(snapshots.definitions, user.__dict__, engine, code)
            status = run_bash(body) if body is not None else engine.run(code)
        except KeyboardInterrupt:
            report_error("KeyboardInterrupt", "", ["KeyboardInterrupt"])
            status = "error"
        except BaseException as e:  # A driver bug must end the cell, not the kernel.
            report_error(type(e).__name__, str(e), _clean_traceback(type(e), e, e.__traceback__))
            status = "error"
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            # The marker tells the host that everything written to fd 1/2 before it has arrived.
            marker = _sync_marker(cell)
            for fd in (1, 2):
                try:
                    os.write(fd, marker)
                except OSError:
                    pass  # user code closed it; the host stops waiting for the marker
            STATE["cell"] = None
            WIRE.send({"op": "done", "id": cell, "status": status})
        if found:
            # Even after an error: what the cell defined before it stays defined.
            try:
                snapshots.definitions.after(user.__dict__, found)
            except Exception as e:
                send_log("debug", "cannot note the cell's definitions: %s: %s" % (type(e).__name__, e))
        if snapshots is not None and status == "ok" and body is None:
            snapshots.touch()


def _definitions_before(definitions, ns, engine, code):
    """The `def`/`class` statements a cell is about to run (state.py `Definitions`), or None.
    The driver's own work: a failure here never touches the cell."""
    try:
        return definitions.before(ns, engine.transform(code))
    except Exception:
        return None




# --- zygote ------------------------------------------------------------------------------------
#
# `driver.py --zygote` (fd 3: a SOCK_SEQPACKET socket to the host, fd 0: a pipe whose EOF means
# the agent is gone) pre-imports everything a kernel uses, runs `bootstrap`, and then forks one
# kernel per request. A request is one packet `{"op": "fork", "seq", "cwd", "env"}` carrying
# four fds (the kernel's fd 0, 1, 2 and 3); the answer is `{"op": "forked", "seq", "pid"}` or
# `{"op": "fork_failed", "seq", "error"}`. The zygote reaps its children and reports each as
# `{"op": "exited", "pid", "status"}` (the raw wait status), so the host, which is not their
# parent, still learns how a kernel ended. Single-threaded, so a fork copies no lock held by
# another thread, and `forked` always precedes that pid's `exited`.
#
# The spare: the zygote keeps one kernel forked ahead of any request, in its own group, with
# the parent-death signal set, blocked on a socket of its own. A request hands the spare the
# request's packet and fds and is answered at once, so neither the fork (a few ms of copying
# page tables) nor the new process's first scheduling is on the first cell's path; the spare
# then does only what needs the session (fds, env, cwd, skills, `serve`). A spare is used once:
# it holds nothing of any session before its request (the zygote never runs a cell). The next
# spare is forked once no request came for `SPARE_REFILL_DELAY` (off a first cell's heels: the
# fork competes with it for the CPU); a request that finds no spare forks as before. The
# host does not know the spare until it is handed out, so the zygote reports its exit only
# then; at the zygote's own exit the spare is killed and reaped.

_PR_SET_PDEATHSIG = 1
SPARE_REFILL_DELAY = 0.1


def _die_with_parent(parent):
    """SIGKILL when `parent` dies (prctl(2)); if it is already gone, exit now."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass  # not Linux, or no libc to load: the pipes' EOF still ends us
    if os.getppid() != parent:
        os._exit(1)


def _child_setup(zygote, inherited):
    """The first thing in any fork of the zygote: drop the zygote's own fds and signal set-up,
    lead a process group (the host kills kernel and children with one killpg), die with it."""
    for fd in inherited:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpgid(0, 0)
    _die_with_parent(zygote)


def _become_kernel(msg, fds, user, engine):
    """What depends on the request: the protocol fds, env, cwd, the user's Python skills (the
    zygote's bootstrap ran without them); then the kernel proper."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 3:
            os.close(fd)
    os.environ.update(msg.get("env") or {})
    os.chdir(msg.get("cwd") or "/")
    rlm = sys.modules["rlm"]
    rlm._install_user_skills(user.__dict__)
    rlm._BASELINE = frozenset(user.__dict__)
    serve(user, engine)


def _lead_group(pid):
    """The parent's half of the child's `setpgid`: whichever runs first, the kernel leads its
    group by the time the host hears its pid (and may kill the group)."""
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child got there first


def _in_child(body):
    """Runs `body` in a fork and never returns: a failure is a traceback on the kernel's
    stderr (the host shows it as a failed start) and exit code 1."""
    code = 1
    try:
        body()
        code = 0
    except BaseException:
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    os._exit(code)


def _fork_kernel(inherited, msg, fds, user, engine):
    """A kernel forked for a request (no spare was ready)."""
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        _lead_group(pid)
        return pid

    def body():
        _child_setup(zygote, inherited)
        _become_kernel(msg, fds, user, engine)

    _in_child(body)


def _fork_spare(inherited, user, engine):
    """A spare kernel: forked and set up now, made a session's kernel by `_hand_over`.
    Returns its pid and the zygote's end of its socket."""
    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = os.getpid()
    try:
        pid = os.fork()
    except BaseException:
        ours.close()
        theirs.close()
        raise
    if pid:
        theirs.close()
        _lead_group(pid)
        return pid, ours

    def body():
        _child_setup(zygote, list(inherited) + [ours.detach()])
        data, fds, _, _ = socket.recv_fds(theirs, 1 << 20, 4)
        if not data:
            os._exit(0)  # the zygote is gone, or dropped us
        theirs.close()
        if len(fds) != 4:
            raise ValueError("a fork request needs 4 fds, got %d" % len(fds))
        _become_kernel(json.loads(data), fds, user, engine)

    _in_child(body)


def _hand_over(spare, data, fds):
    """Gives the spare kernel a request's packet and fds; its pid (raises if it is gone)."""
    import socket

    pid, sock = spare
    try:
        socket.send_fds(sock, [data], fds)
    finally:
        sock.close()
    return pid


def _drop_spare(spare):
    pid, sock = spare
    sock.close()
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def zygote():
    import gc
    import select
    import socket

    agent = os.getppid()
    _die_with_parent(agent)
    want_ipython = os.environ.pop("PRIME_AGENT_KERNEL_IPYTHON", "1") != "0"
    # What cells commonly reach for first, imported once here for every kernel.
    import concurrent.futures  # noqa: F401  (host requests)

    user, engine = bootstrap(want_ipython)
    # A persistent session's kernel loads state.py before its `ready`: compiled here once
    # (`serve` drops it again in a kernel without snapshots).
    _load_module(STATE_MODULE, "state.py")
    engine.warm()
    sock = socket.socket(fileno=3)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    # Freeze what start-up allocated: the collector then never touches (and so never copies)
    # those pages in a forked kernel. No collection first: it found a few dozen objects for
    # about 10 ms of CPU (IPython 8.12), and what start-up left behind is shared anyway.
    gc.freeze()

    def send(frame):
        sock.sendall(json.dumps(frame).encode())

    # The zygote's fds that no kernel may keep (its spare's socket is added per fork).
    own = (sock.fileno(), wake_r, wake_w)
    spare = None
    refill_at = 0.0  # the first spare is forked right away, before `zygote_ready`

    def exit_now():
        if spare is not None:
            _drop_spare(spare)
        os._exit(0)  # the agent is gone; PR_SET_PDEATHSIG ends the kernels

    def refill():
        try:
            return _fork_spare(own, user, engine)
        except Exception as e:  # requests fork directly meanwhile
            send({"op": "spare_failed", "error": "%s: %s" % (type(e).__name__, e)})
            return None

    spare = refill()
    send({"op": "zygote_ready", "pid": os.getpid(), "engine": engine.name, "python": sys.version.split()[0]})
    while True:
        timeout = None
        if spare is None:
            timeout = max(0.0, refill_at - time.monotonic())
        ready, _, _ = select.select([sock, wake_r, 0], [], [], timeout)
        if not ready and spare is None:
            spare = refill()
            if spare is None:
                refill_at = time.monotonic() + 1.0
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if spare is not None and pid == spare[0]:
                    spare[1].close()  # it died unused: the host never knew it
                    spare = None
                    refill_at = time.monotonic() + SPARE_REFILL_DELAY
                    continue
                send({"op": "exited", "pid": pid, "status": status})
        if 0 in ready and not os.read(0, 4096):
            exit_now()
        if sock in ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
            except OSError:
                exit_now()
            if not data:
                exit_now()
            msg = json.loads(data)
            seq = msg.get("seq")
            try:
                if len(fds) != 4:
                    raise ValueError("a fork request needs 4 fds, got %d" % len(fds))
                pid = None
                if spare is not None:
                    taken, spare = spare, None
                    try:
                        pid = _hand_over(taken, data, fds)
                    except OSError:
                        _drop_spare(taken)  # it died meanwhile: fork one instead
                if pid is None:
                    inherited = own if spare is None else own + (spare[1].fileno(),)
                    pid = _fork_kernel(inherited, msg, fds, user, engine)
                send({"op": "forked", "seq": seq, "pid": pid})
            except Exception as e:
                send({"op": "fork_failed", "seq": seq, "error": "%s: %s" % (type(e).__name__, e)})
            finally:
                for fd in fds:
                    os.close(fd)
                refill_at = time.monotonic() + SPARE_REFILL_DELAY


if __name__ == "__main__":
    if sys.argv[1:] == ["--zygote"]:
        zygote()
    else:
        main()
