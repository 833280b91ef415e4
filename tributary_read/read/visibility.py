"""Which names a reader sees: hidden and in-progress names, valid-length sidecars, compacted spans.

Hive and Hadoop skip names starting with ``_`` or ``.``; writers that stage a
file under a temporary name (Flink, ``hadoop fs -put``) add suffixes that mark
it unfinished. Every reader (listing, manifests, tracking) applies the same rule,
so it lives here once.
"""

from __future__ import annotations

from tributary_read.errors import CompactedAwayError
from tributary_read.read.window import MAX_INSTANT_MS, MAX_MS, MIN_MS, TimeWindow, iso
from tributary_read.table.names import mtime_span
from tributary_read.timespec import MIN_INSTANT_MS

#: Name endings of files that are still being written or staged. Flink's
#: BucketingSink uses ``.in-progress``/``.pending``, Hadoop ``-put`` ``._COPYING_``.
IN_PROGRESS_SUFFIXES = (".tmp", ".inprogress", ".in-progress", ".pending", "._COPYING_")
#: Flink BucketingSink's sidecar: ``_NAME.valid-length`` caps the readable bytes of NAME.
VALID_LENGTH_PREFIX = "_"
VALID_LENGTH_SUFFIX = ".valid-length"


def is_hidden_name(name: str) -> bool:
    """Hive/Hadoop's rule (``_`` and ``.`` prefixes) plus in-progress suffixes."""
    return name[:1] in ("_", ".") or name.endswith(IN_PROGRESS_SUFFIXES)


def is_visible(rel: str) -> bool:
    """True unless some segment of the root-relative path is hidden."""
    return not any(is_hidden_name(seg) for seg in rel.split("/"))


def parse_valid_length(data: bytes) -> int:
    """Decode a ``.valid-length`` sidecar.

    Flink writes it with Java's ``DataOutputStream.writeUTF``: a 2-byte
    big-endian length, then the decimal digits. Plain decimal text (what a
    person or another tool writes) is accepted too.
    """
    body = data
    if len(data) >= 2 and int.from_bytes(data[:2], "big") == len(data) - 2:
        body = data[2:]
    text = body.decode("ascii", "replace").strip()
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"not a decimal byte count: {body[:20]!r}")
    return int(text)


def span_in_window(rel: str, window: TimeWindow, mtime_ms: int | None) -> bool:
    """Whether a file whose path holds the compacted mark belongs to ``window``.

    A compacted file (its name carries a span, :func:`mtime_span`) by the mtimes of the files it
    merged, never by its own ``mtime_ms``: all of them in the window, it belongs; none, it does not
    (it was read in an earlier window, as its originals); some: no answer is exact (a file cannot be
    read in part), so the read is refused, naming the file. A name with the mark but no valid span is
    an ordinary file, judged by its mtime (None: unknown, not in the window). The jar's path filter
    (``trib.udfs.MtimeWindow``) decides alike, in the same words (tests/test_span_filter.py).
    """
    span = mtime_span(rel)
    if span is None:
        return mtime_ms is not None and mtime_ms in window
    lo, hi = span
    if window.start_ms <= lo and hi <= window.end_ms:
        return True
    if hi < window.start_ms or lo > window.end_ms:
        return False
    raise CompactedAwayError(
        f"{rel} is a compacted file of files modified {_instant(lo)} .. {_instant(hi)}, and the window "
        f"{_instant(window.start_ms)} .. {_instant(window.end_ms)} holds only part of that: read windows aligned "
        "to the table's compaction period (compact.period, docs/compaction.md)")


def _instant(ms: int) -> str:
    """ISO-8601 (UTC, ms) where it has a four-digit year, else the epoch ms; an open bound as such."""
    if ms in (MIN_MS, MAX_MS):
        return "(open)"
    if not MIN_INSTANT_MS <= ms <= MAX_INSTANT_MS:
        return f"{ms} ms"
    return iso(ms) or str(ms)
