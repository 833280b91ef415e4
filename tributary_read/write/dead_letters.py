"""Dead letters: the records ingest could not place, listed and replayed exactly once.

A dead-letter file (``_tributary/dead_letter/dl-*.jsonl``) is committed like data,
in the same commit as the source offsets past its records, and never changes
afterwards. That makes it a source like any other: replay ingests it with
:func:`~tributary_read.write.ingest.ingest`, keyed by its path in the replaying
app's offsets. Each replay commit records, atomically with the records it
writes, which lines of which dead-letter file it has taken, so a replay killed
at any instant (kill -9 included) and run again resumes after the last line
committed, never taking one twice. Records that are still bad go to new dead
letters, committed with the replay.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from tributary_read.errors import InvalidInputError, VerificationError
from tributary_read.table.config import Table
from tributary_read.table.manifest import KIND_DEAD_LETTER
from tributary_read.write.ingest import IngestResult, StopRequest, ingest
from tributary_read.write.lines import reason_kind

#: The app id replay commits under unless told otherwise.
REPLAY_APP = "trib-dead-letters"


@dataclass(frozen=True)
class DeadLetterFile:
    """One committed dead-letter file, what it holds, and how much of it was replayed."""

    path: str
    records: int
    size: int
    sources: dict[str, int] = field(default_factory=dict)  # source name -> records
    reasons: list[dict] = field(default_factory=list)  # [{"reason": first of its kind, "count": n}], most first
    replayed: int = 0  # lines taken by a replay (its offsets + 1)
    replayed_by: str | None = None

    def to_json(self) -> dict:
        return {**self.__dict__, "pending": self.records - self.replayed}


def unwrap(line: bytes) -> bytes:
    """The original record of a dead-letter line: its exact bytes, kept as text or base64."""
    try:
        doc = json.loads(line)
        if isinstance(doc.get("line"), str):
            return doc["line"].encode("utf-8")
        return base64.b64decode(doc["line_b64"], validate=True)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError("not a dead-letter record (line or line_b64)") from None


def replays(table: Table) -> dict[str, tuple[str, int]]:
    """Dead-letter path -> (app id, last line replayed), from every app's committed offsets."""
    out: dict[str, tuple[str, int]] = {}
    for app_id, app in table.log.state().apps.items():
        for key, offset in app.transaction.offsets.items():
            if key.startswith("_tributary/dead_letter/"):
                prev = out.get(key)
                if prev is not None and prev[0] != app_id:
                    # Two apps replayed one file: list it under the one further on; replay refuses both.
                    offset = max(offset, prev[1])
                out[key] = (app_id, offset)
    return out


def list_dead_letters(table: Table) -> list[DeadLetterFile]:
    """Every committed dead-letter file, oldest first (names start with the writer's UTC time)."""
    done = replays(table)
    out = []
    for entry in sorted((f for f in table.log.state().files.values() if f.kind == KIND_DEAD_LETTER),
                        key=lambda f: f.path):
        try:
            data = table.storage.read(entry.path)
        except FileNotFoundError:
            raise VerificationError(f"committed dead-letter file {entry.path} is missing "
                                       f"(see: trib verify)") from None
        sources: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        first: dict[str, str] = {}
        for raw in data.splitlines():
            try:
                doc = json.loads(raw)
                source, reason = str(doc.get("source", "?")), str(doc.get("reason", "?"))
            except (ValueError, AttributeError):
                source, reason = "?", "not a dead-letter record"
            sources[source] += 1
            k = reason_kind(reason)
            kinds[k] += 1
            first.setdefault(k, reason)
        app, last = done.get(entry.path, (None, -1))
        out.append(DeadLetterFile(entry.path, entry.records, entry.size, dict(sources),
                                  [{"reason": first[k], "count": n} for k, n in kinds.most_common()],
                                  last + 1, app))
    return out


def replay(table: Table, app_id: str = REPLAY_APP, *, stop: StopRequest | None = None,
           on_file: Callable[[IngestResult], None] | None = None, **ingest_options) -> list[IngestResult]:
    """Ingest every dead letter not yet replayed, file by file, exactly once.

    ``ingest_options`` are :func:`ingest`'s (``time_spec``, ``commit_every``,
    ``max_bad_fraction``...), typically the fixed options of the failed run.
    A file another app id has started replaying is refused: two apps hold
    separate offsets, so both would take its records.
    """
    done = replays(table)
    todo = []
    for f in list_dead_letters(table):
        by = done.get(f.path)
        if by is not None and by[0] != app_id:
            raise InvalidInputError(f"dead letters {f.path} were replayed by app {by[0]!r}: replay them with "
                                    f"the app id {by[0]}, or no record would be taken exactly once",
                                    app_id="the app id")
        if f.replayed < f.records:
            todo.append(f)
    results = []
    with tempfile.TemporaryDirectory(prefix="trib-replay-") as tmp:
        for f in todo:
            local = os.path.join(tmp, os.path.basename(f.path))
            with open(local, "wb") as out:  # committed and never changed: a copy is the file
                out.write(table.storage.read(f.path))
            result = ingest(table, local, app_id, source_name=f.path, final=True, unwrap=unwrap, stop=stop,
                            **ingest_options)
            os.unlink(local)
            results.append(result)
            if on_file:
                on_file(result)
            if result.stopped_by:
                break
    return results
