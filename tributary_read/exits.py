"""How a failure ends a trib process: one stderr line and the exit status of its class.

One function for every front end that is a process: the ``trib`` CLI and the Spark driver that
``trib etl submit`` hands to spark-submit. A scheduler watching either sees the same line and
the same code for the same failure, SIGTERM included (143, as a shell reports a process it
killed), so "retry later" and "fix the input" never depend on how the job was launched.
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Mapping, NoReturn

from tributary_read.errors import TributaryError

#: Exit statuses of the signals trib turns into one line (128 + the signal number, as shells report).
INTERRUPTED = 128 + signal.SIGINT
TERMINATED = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM turned into an exception, so a long command ends like Ctrl-C: one line, exit 143.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on
    the way up swallows it; committed data needs no cleanup (the log decides).
    """


def raise_on_sigterm():
    """From now on SIGTERM raises :class:`Terminated` in the main thread (:func:`exit_line` maps it).

    Returns the handler it replaced, for a caller that runs inside a host process (tests) to restore.
    """

    def _raise(signum, frame):
        raise Terminated()

    return signal.signal(signal.SIGTERM, _raise)


def until_signal(poll_s: float = 0.5) -> NoReturn:
    """Block the main thread until a signal's handler raises (:class:`Terminated`, KeyboardInterrupt).

    Not a bare ``Event().wait()``: when the kernel hands the signal to another thread (an HTTP
    scrape in flight), the main thread's untimed lock wait is never woken and the Python handler
    never runs, so SIGTERM was ignored (seen: 2 runs in 90 with scrapes in flight). A timed wait
    returns to the interpreter, which runs the pending handler, within ``poll_s``.
    """
    tick = threading.Event()
    while True:
        tick.wait(poll_s)


def one_line(e: BaseException | str) -> str:
    text = str(e).strip() or (type(e).__name__ if isinstance(e, BaseException) else "")
    return " ".join(text.split())


def exit_line(e: BaseException, names: Mapping[str, str] | None = None, prog: str = "trib") -> tuple[str | None, int]:
    """The one stderr line (None: print nothing) and the exit status that end a process failing with ``e``.

    ``names``: the front end's spelling of library parameters (the CLI's flags), put into the message.
    """
    if isinstance(e, Terminated):
        return f"{prog}: terminated", TERMINATED
    if isinstance(e, KeyboardInterrupt):
        return f"{prog}: interrupted", INTERRUPTED
    if isinstance(e, TributaryError):
        return f"{prog}: error: {one_line(e.reword(names or {}))}", e.exit_code
    if isinstance(e, BrokenPipeError):
        return None, 0  # the reader went away (``| head``): not a failure
    if isinstance(e, SystemExit):
        return None, e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return f"{prog}: unexpected {type(e).__name__}: {one_line(e)} (run with -v for details)", 1


def error_object(line: str, code: int, cls: str, prog: str = "trib") -> str:
    """A failure as ``--json`` shows it, one line on stdout after whatever the command printed:
    ``{"error": {"class": ..., "exit_code": N, "message": ...}}``; ``message`` is :func:`exit_line`'s
    stderr line without its ``trib: error: `` (or ``trib: ``) prefix, ``cls`` the error's class name
    (``UsageError`` for a command line click refused)."""
    for prefix in (f"{prog}: error: ", f"{prog}: "):
        if line.startswith(prefix):
            line = line[len(prefix):]
            break
    return json.dumps({"error": {"class": cls, "exit_code": code, "message": line}})


def read_error_object(stdout: str) -> dict | None:
    """The ``{"error": {...}}`` of :func:`error_object`, from a ``--json`` command's stdout (its last
    line), for whoever runs ``trib`` as a process; None when there is none (success, or a kill)."""
    lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    try:
        doc = json.loads(lines[-1])
    except ValueError:
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    return err if isinstance(err, dict) else None


def code_of(error: type[TributaryError]) -> int:
    """The exit status of error class ``error`` (for a table keyed by class, such as a scheduler's)."""
    return error.exit_code


def error_classes() -> list[type[TributaryError]]:
    """Every trib error class, the root first."""
    def walk(cls: type) -> list[type]:
        subs: list[type] = cls.__subclasses__()
        return [cls] + [s for c in subs for s in walk(c)]

    return walk(TributaryError)


def error_codes() -> set[int]:
    """Every exit status a trib error class ends with, except 1 (an unexpected error's too)."""
    return {code_of(c) for c in error_classes()} - {1}
