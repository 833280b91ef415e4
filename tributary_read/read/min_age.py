"""Files a run held back because they were modified within the minimum age: the one way a run says so.

A consumer's listing leaves files modified within ``min_age`` for a later run, as they may still be
written (:mod:`tributary_read.read.ledger` counts them: the plan's ``deferred``). ``trib compact``
leaves a partition that holds such a file (``compact.min_age``). A run that held files back and
reports "0 files" reads like a run that had nothing to read. So every front end gives the count in
its JSON result (``deferred`` of a consumer plan and of an ETL input, ``held_for_min_age`` of a
compaction) and one line on stderr with these words: ``trib files`` and ``trib etl run`` in either
mode, ``trib compact``.
"""

from __future__ import annotations

from tributary_read.timespec import format_duration_ms


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def why(min_age_ms: int) -> str:
    """Why a consumer held files back (also an ETL input's ``left`` entry)."""
    return f"modified within the last {format_duration_ms(min_age_ms)} (min_age): they may still be written"


def note(files: int, min_age_ms: int) -> str:
    """The stderr line of a consumer run that held ``files`` back."""
    return f"held back {_n(files, 'file')} {why(min_age_ms)}; a later run reads them"


def compaction_note(partitions: int, files: int, min_age_ms: int) -> str:
    """The stderr line of a compaction that left ``partitions`` (holding ``files``) for their minimum age."""
    return (f"held back {_n(partitions, 'partition')} ({_n(files, 'file')}) holding a file modified within the last "
            f"{format_duration_ms(min_age_ms)} (compact.min_age): they may still be written; a later run "
            "compacts them")
