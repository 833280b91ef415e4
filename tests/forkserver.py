"""Real ``trib`` processes for the signal trials, forked from a warm interpreter instead of started cold.

A kill trial signals a live ``trib ingest`` at a random moment of its work; what it proves lives in that
work (reading, writing, committing), not in the interpreter's start-up. Each cold start imported trib
(pyarrow, numpy) again: 0.3-0.5 CPU-seconds idle and a few seconds on CI's loaded cores, for each of the
~150 trials of tests/test_crash.py and tests/test_commit_faults.py. A :class:`ForkServer` is one Python
process that imports the CLI once, then forks a child per run; the child is a process like any other
(its own pid, real signals, its exit status), and runs what ``python -m tributary_read.cli.main ARGS``
runs (``main()``, ``sys.argv`` set) in the state a new interpreter has then: the default signal dispositions, exit through interpreter shutdown (atexit handlers, an uncaught KeyboardInterrupt re-raised
as SIGINT), stdout to /dev/null and stderr to a file of its own.

The test talks to the server over its stdin/stdout, one JSON line a request; the server is the parent,
so it reaps the children and reports their exit status, as ``Popen.poll`` would.

The server freezes its imported heap (``gc.freeze``, as pre-forking servers do): a child's interpreter
shutdown skips those module objects, which are never garbage; the objects of the run are collected as in
any process, and atexit handlers, buffered streams' flushes and the exit status are the same.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Runs in the server process (python -c); the modules a run imports, then the request loop.
_SERVER = r"""
import gc, importlib, json, os, signal, sys, time
from tributary_read.cli.main import main
for name in sys.argv[1:]:  # the modules the runs import: the start-up each would pay
    importlib.import_module(name)
# The imported modules' objects out of the cyclic collector: a child's exit no longer walks and frees
# them (0.2-0.4 s of each run's shutdown under CI's load, most of a stop's time), and a fork no longer
# copies the pages a collection would touch. What the run itself creates is collected as before.
gc.freeze()
defaults = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
out = os.fdopen(os.dup(1), "w", buffering=1)
children = set()
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "spawn":
        pid = os.fork()
        if pid == 0:
            sys.stdin.close()
            out.close()
            if req.get("env") is not None:  # the whole environment a cold start would have been given
                os.environ.clear()
                os.environ.update(req["env"])
                time.tzset()
            if req.get("cwd"):
                os.chdir(req["cwd"])
            null = os.open(os.devnull, os.O_RDWR)
            err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            std = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if req["stdout"] else null
            os.dup2(null, 0); os.dup2(std, 1); os.dup2(err, 2)
            os.close(null); os.close(err)
            if std != null:
                os.close(std)
            sys.stdin = open(0, "r", closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False, buffering=1)
            for s, h in defaults.items():
                signal.signal(s, h)
            sys.argv = [sys.argv[0], *req["args"]]
            main(req["args"])  # what ``python -m tributary_read.cli.main`` runs; it exits through sys.exit
            sys.exit(0)
        children.add(pid)
        out.write(f"{pid}\n")
    elif req["op"] == "poll":
        pid, status = os.waitpid(req["pid"], os.WNOHANG)
        code = None if pid == 0 else os.waitstatus_to_exitcode(status)
        if code is not None:
            children.discard(pid)
        out.write(json.dumps(code) + "\n")
for pid in children:  # the test ended (or failed) with runs still going: none outlives it
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass
"""


class ForkServer:
    """``with ForkServer(env) as fs: p = fs.spawn(args)``: ``p`` behaves as the ``Popen`` of
    ``[*TRIB, *args]`` with ``stdout=DEVNULL, stderr=PIPE`` would, for :func:`helpers.signal_loop`."""

    #: What every ``trib ingest`` imports (the CLI's lazy group loads a command's module on use).
    PRELOAD = ("tributary_read.cli.ingest", "tributary_read.write.ingest", "tributary_read.io.storage")

    def __init__(self, env: dict | None = None, preload: tuple[str, ...] = PRELOAD):
        from conftest import REPO

        env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
        self._tmp = tempfile.TemporaryDirectory(prefix="trib-forks-")
        self._count = 0
        self._lock = threading.Lock()
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER, *preload], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=env, bufsize=1)

    def _ask(self, req: dict) -> str:
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise AssertionError(f"the fork server exited ({self._proc.poll()})")
        return line

    def spawn(self, cmd, stdout: bool = False, env: dict | None = None, cwd=None) -> Forked:
        """Run ``cmd`` (``[*conftest.TRIB, ARGS...]``) in a forked child; its stdout is kept with ``stdout``.
        ``env``: the child's whole environment (the server's own without it); ``cwd``: its directory."""
        from conftest import TRIB

        assert list(cmd[:len(TRIB)]) == TRIB, cmd
        args = cmd[len(TRIB):]
        with self._lock:  # one request at a time on the pipe: tests run trib from several threads
            self._count += 1
            err = Path(self._tmp.name) / f"{self._count}.err"
            out = Path(self._tmp.name) / f"{self._count}.out" if stdout else None
            pid = int(self._ask({"op": "spawn", "args": [str(a) for a in args], "stderr": str(err),
                                 "stdout": str(out) if out else None, "env": env,
                                 "cwd": str(cwd) if cwd is not None else None}))
        return Forked(self, pid, err, out)

    def run(self, args, env: dict, cwd=None) -> subprocess.CompletedProcess:
        """``subprocess.run([*TRIB, *args], capture_output=True, text=True, env=env, cwd=cwd)``, forked."""
        from conftest import TRIB

        p = self.spawn([*TRIB, *args], stdout=True, env=env, cwd=cwd if cwd is not None else os.getcwd())
        code = p.wait()
        try:
            out, err = p.stdout.read().decode(), p.stderr.read().decode()  # type: ignore[union-attr]
        finally:
            for f in (p.stdout, p.stderr):
                f.path.unlink(missing_ok=True)  # type: ignore[union-attr]
        return subprocess.CompletedProcess([*TRIB, *args], code, out, err)

    def alive(self) -> bool:
        return self._proc.poll() is None

    def poll(self, pid: int) -> int | None:
        with self._lock:
            return json.loads(self._ask({"op": "poll", "pid": pid}))

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()  # type: ignore[union-attr]
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._tmp.cleanup()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Forked:
    """A forked ``trib`` run, with the part of ``subprocess.Popen``'s interface the signal trials use."""

    def __init__(self, server: ForkServer, pid: int, err: Path, out: Path | None = None):
        self.server, self.pid, self.returncode = server, pid, None
        self.stderr = _LazyFile(err)
        self.stdout = _LazyFile(out) if out else None

    def poll(self) -> int | None:
        # A live child is seen in /proc (as fast as Popen's waitpid: a second signal follows the first
        # within milliseconds); one that has ended is reaped by the server, which reports its status.
        if self.returncode is None and not self._running():
            self.returncode = self.server.poll(self.pid)
        return self.returncode

    def _running(self) -> bool:
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.returncode is None:
            self._sleep_until_exit(timeout)
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"trib (pid {self.pid})", timeout)  # type: ignore[arg-type]
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]

    def _sleep_until_exit(self, timeout: float | None) -> None:
        """Block until the child ends (or ``timeout``), without polling: a pidfd is readable once the
        process has exited, child of this process or not. Polling every 5 ms cost the test process
        CPU for the whole of each run it waited on. The child stays a zombie until the server reaps
        it at :meth:`poll`, so its pid cannot be reused meanwhile."""
        import select

        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd (old kernel), or already reaped: poll as before
            return
        try:
            select.select([fd], [], [], timeout)
        finally:
            os.close(fd)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _LazyFile:
    """The child's stderr file, read once it has ended (``Popen.stderr.read()`` after ``wait``)."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> bytes:
        return self.path.read_bytes()

    def close(self) -> None:
        pass
