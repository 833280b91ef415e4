"""How each run of a job ended, kept beside its lock: ``_tributary/etl/JOB.runs.json`` in the output.

The log says which hours committed, never which runs failed, so a "failed hour" alert had nothing to
read. The book counts runs by outcome and remembers the run in flight: a run killed with -9 leaves
it set, and the next run counts it as ``killed``. It is written under the job's lock (runs never
overlap on one machine) with a whole-file replace; dry runs and refusals before the lock are not
runs. A lost or torn book starts its counts again, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from typing import Any, Iterator

from tributary_read.errors import InvalidInputError, ManifestCorruptError, StorageError, TributaryError
from tributary_read.etl.lock import LOCK_DIR
from tributary_read.exits import Terminated

OUTCOMES = ("success", "already_committed", "failed", "refused", "killed")
#: A restate job's totals over its restate commits (``trib metrics``' ``trib_etl_restated_*``).
RESTATED = ("partitions", "records_before", "records_after")
SUFFIX = ".runs.json"


def book_path(job_name: str) -> str:
    return f"{LOCK_DIR}/{job_name}{SUFFIX}"


def read_book(output, job_name: str) -> dict[str, Any]:
    """The job's book (empty counts when there is none, or it cannot be read)."""
    try:
        d = json.loads(output.storage.read(book_path(job_name)))
        counts = {k: int(d.get("counts", {}).get(k, 0)) for k in OUTCOMES}
        restated = d.get("restated")
        if restated is not None:
            restated = {k: int(restated.get(k, 0)) for k in (*RESTATED, "version")}
        return {"counts": counts, "in_flight": d.get("in_flight"), "last": d.get("last"),
                "last_success_schedule_ms": d.get("last_success_schedule_ms"), "restated": restated}
    except (FileNotFoundError, ValueError, TypeError, AttributeError, ManifestCorruptError):
        return {"counts": dict.fromkeys(OUTCOMES, 0), "in_flight": None, "last": None,
                "last_success_schedule_ms": None, "restated": None}


def _count_restated(book: dict, version: int | None, entries) -> None:
    """Add the partitions a restate commit (``version``) recomputed, ``entries`` as etl/restated.py names them,
    to the book's totals, once per commit: a commit at or below the last version counted was counted (a rerun
    that finds it), one above it was not (its run was killed after its commit, before its book was written)."""
    from tributary_read.etl.restated import totals

    have = book.get("restated") or dict.fromkeys((*RESTATED, "version"), 0)
    if not entries or version is None or version <= have["version"]:
        return
    got = totals(entries)
    book["restated"] = {**{k: have[k] + got[k] for k in RESTATED}, "version": version}


def count_restated(output, job_name: str, version: int, entries) -> None:
    """A backfill's restate commit, into the book (it is not a scheduled run: no outcome is counted)."""
    book = read_book(output, job_name)
    _count_restated(book, version, entries)
    _write(output, job_name, book)


def job_books(output) -> list[str]:
    """The names of the jobs that keep a book in ``output``."""
    try:
        entries = output.storage.list(LOCK_DIR, recursive=False)
    except (FileNotFoundError, StorageError):
        return []
    names = (e.path.rsplit("/", 1)[-1] for e in entries)
    return sorted(n[:-len(SUFFIX)] for n in names if n.endswith(SUFFIX))


class _Entry:
    def __init__(self):
        self.report = None

    def done(self, report):
        self.report = report
        return report


def _write(output, job_name: str, book: dict) -> None:
    try:
        output.storage.replace(book_path(job_name), json.dumps(book).encode())
    except (StorageError, OSError):
        pass  # the book is for monitoring: a run never fails for it


@contextmanager
def recorded(output, job_name: str, schedule_ms: int) -> Iterator[_Entry]:
    """``with recorded(output, job, t) as e: return e.done(run())``: the run's end goes into the book."""
    book = read_book(output, job_name)
    if book["in_flight"]:
        book["counts"]["killed"] += 1
    book["in_flight"] = {"schedule_ms": schedule_ms, "started_ms": int(time.time() * 1000),
                         "host": socket.gethostname(), "pid": os.getpid()}
    _write(output, job_name, book)
    entry = _Entry()
    outcome, error, report = "failed", None, None
    try:
        yield entry
        r = report = entry.report
        outcome = "already_committed" if r is not None and r.already_committed else "success"
    except (Terminated, KeyboardInterrupt):
        outcome = "killed"
        raise
    except InvalidInputError as e:
        outcome, error = "refused", type(e).__name__
        raise
    except TributaryError as e:
        error, report = type(e).__name__, getattr(e, "report", None)  # held partitions: committed all the same
        raise
    except Exception as e:
        error = type(e).__name__
        raise
    finally:
        book["counts"][outcome] += 1
        if report is not None and report.version is not None:
            _count_restated(book, report.version, report.output.restated)
        book["in_flight"] = None
        book["last"] = {"outcome": outcome, "schedule_ms": schedule_ms, "ended_ms": int(time.time() * 1000),
                        "error_class": error}
        if outcome in ("success", "already_committed"):
            prev = book.get("last_success_schedule_ms") or 0
            book["last_success_schedule_ms"] = max(prev, schedule_ms)
        _write(output, job_name, book)
