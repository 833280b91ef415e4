"""The names trib gives the data files it writes.

The writer makes them; the read side (which files are trib's own) and ``clean``
(which files it may ever delete) recognise them. The pattern lives here, not in
the writer, so that reading a table never imports the writer (nor
pyarrow.compute): ``trib files`` starts many times an hour.
"""

from __future__ import annotations

import re

from tributary_read.io.storage import COMPACTED_MARK

#: Names trib's writers produce; only these are ever deleted by ``clean``. A compacted file's
#: name carries the mtime span of the files it merged (:func:`mtime_span`).
WRITTEN_NAME = re.compile(r"^(\.)?(part|dl)-[0-9]{14}-[0-9a-f]{8}-[0-9]{6}(~m[0-9]{1,16}-[0-9]{1,16})?\.[A-Za-z0-9.]+?(\.inprogress)?$")
#: ASCII digits only (``\d`` would take any script's): the jar's path filter parses the same span.
_SPAN = re.compile(re.escape(COMPACTED_MARK) + r"([0-9]{1,16})-([0-9]{1,16})\.")


def compacted_name(name: str, lo_ms: int, hi_ms: int) -> str:
    """``name`` (a writer's ``part-….ext``) marked with the mtime span [lo, hi] of the files it merges.

    mtime readers go by the span, not by the file's own mtime: on S3 that is when
    the compaction ran, and nowhere may a compacted file reappear in a later window
    (docs/compaction.md). The span is in the name so every reader (the listing, its
    Spark executors, the Hadoop path filter) sees it without another request.
    """
    if lo_ms > hi_ms or lo_ms < 0:
        raise ValueError(f"bad mtime span {lo_ms}..{hi_ms}")
    base, dot, ext = name.partition(".")
    return f"{base}{COMPACTED_MARK}{lo_ms}-{hi_ms}{dot}{ext}"


def mtime_span(name: str) -> tuple[int, int] | None:
    """The mtime span a compacted file's name carries, or None for any other file."""
    if COMPACTED_MARK not in name:
        return None
    m = _SPAN.search(name.rpartition("/")[2])
    return (int(m.group(1)), int(m.group(2))) if m else None
