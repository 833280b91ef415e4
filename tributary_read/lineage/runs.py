"""What the events of ``trib ingest`` and ``trib consumer ack`` share: the job namespace, a sender that gives
up after one failure (the transport's :class:`Emitter`), and the outbox entry of a run in flight.

* a command sends through an :class:`~tributary_read.lineage.transport.Emitter`, which sends nothing more
  after its first failure: the command keeps its terminal event instead (one warning line per command,
  and the next run sends what was kept).
* :func:`running` / :func:`in_flight`: an outbox entry that stands for a run that has not ended yet. The
  outbox otherwise holds events ready to send (``eventType`` at the top); a run in flight is
  ``{"running": {...}, "event": {...}}``, so whoever finds it after a kill -9 knows that the run never
  ended, and from what it holds can tell what the run did (from the log, or the consumer's state).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable, Mapping


def namespace() -> str:
    """The jobs' namespace: ``OPENLINEAGE_NAMESPACE`` (the client's own variable), else ``trib``."""
    return os.environ.get("OPENLINEAGE_NAMESPACE") or "trib"


def now_ms() -> int:
    return int(time.time() * 1000)


def running(event: dict, **facts: Any) -> dict:
    """The outbox entry of a run in flight: its terminal event so far, and the facts to finish it with."""
    return {"running": {**facts, "host": socket.gethostname(), "pid": os.getpid(), "started_ms": now_ms()},
            "event": event}


def in_flight(entry: Mapping) -> dict | None:
    """The facts of a run-in-flight entry, or None for an event ready to send."""
    r = entry.get("running")
    return r if isinstance(r, dict) and isinstance(entry.get("event"), dict) else None


def alive(facts: Mapping) -> bool:
    """Whether the process that wrote a run-in-flight entry still runs (on this host; elsewhere: unknown, so
    taken as ended: two runs of one app on two hosts at once are refused by the log anyway)."""
    pid = facts.get("pid")
    if facts.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    from tributary_read.processes import pid_alive

    return pid_alive(pid)


def warn_error(warn: Callable[[str], None], what: str, e: BaseException) -> None:
    from tributary_read.lineage.transport import error_text

    warn(f"lineage: {what}: {error_text(e)}")
