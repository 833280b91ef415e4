"""Which names a reader sees: hidden and in-progress names, valid-length sidecars, compacted spans.

Hive and Hadoop skip names starting with ``_`` or ``.``; writers that stage a
file under a temporary name (Flink, ``hadoop fs -put``) add suffixes that mark
it unfinished. Every reader (listing, manifests, tracking) applies the same rule,
so it lives here once.
"""

from __future__ import annotations

from tributary_read.errors import CompactedAwayError
from tributary_read.read.window import TimeWindow, iso
from tributary_read.table.names import mtime_span

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


def span_in_window(rel: str, window: TimeWindow) -> bool:
    """Whether a compacted file belongs to ``window``: all the files it merged were modified in it.

    None of them: it does not (it was read in an earlier window, as its originals). Some: no
    answer is exact (a file cannot be read in part), so the read is refused, naming the file.
    """
    span = mtime_span(rel)
    if span is None:
        return True  # the mark without a span: an ordinary file, judged by its mtime already
    lo, hi = span
    if window.start_ms <= lo and hi <= window.end_ms:
        return True
    if hi < window.start_ms or lo > window.end_ms:
        return False
    raise CompactedAwayError(
        f"{rel} is a compacted file of files modified {iso(lo)} .. {iso(hi)}, and the window "
        f"{iso(window.start_ms)} .. {iso(window.end_ms)} holds only part of that: read windows aligned "
        "to the table's compaction period (compact.period, docs/compaction.md)")
