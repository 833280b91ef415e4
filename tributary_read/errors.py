"""One exception root; each subclass is named for what the caller should do next.

The CLI maps ``exit_code`` straight to the process exit status, so a scheduler can
tell "retry later" (conflict, storage) from "fix the input" (invalid) from
"someone must look at the table" (corrupt).
"""

from __future__ import annotations


class TributaryError(Exception):
    """Root of every error trib raises on purpose."""

    exit_code = 1


class InvalidInputError(TributaryError, ValueError):
    """The caller passed something malformed: fix the argument and run again."""

    exit_code = 3


class InvalidLayoutError(InvalidInputError):
    """A layout or partition template cannot be parsed or does not fit a path."""


class BadRecordError(InvalidInputError):
    """A source record cannot be placed (e.g. its time field is missing)."""


class NoSuchTableError(TributaryError):
    """ROOT holds no trib table: create it first or check the path/alias."""

    exit_code = 4


class TableExistsError(TributaryError):
    """``table create`` on a ROOT that already has a table."""

    exit_code = 4


class CommitConflictError(TributaryError):
    """Another writer committed first in a way that cannot be merged: re-read and retry."""

    exit_code = 5


class ManifestCorruptError(TributaryError):
    """A committed log file cannot be read: repair by hand, never overwrite."""

    exit_code = 6


class UnsupportedFormatVersionError(ManifestCorruptError):
    """The log was written by a newer trib: upgrade before touching it."""


class StorageError(TributaryError):
    """The file system refused or failed an operation: check permissions and retry."""

    exit_code = 7


class MetastoreError(TributaryError):
    """The Hive metastore or HiveServer2 failed or is unreachable."""

    exit_code = 8


class VerificationError(TributaryError):
    """The table does not match its log (missing or resized committed files)."""

    exit_code = 9


class MissingDependencyError(TributaryError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""

    exit_code = 10


def missing_extra(module: str, extra: str) -> MissingDependencyError:
    return MissingDependencyError(
        f"{module} is not installed: pip install 'tributary-read[{extra}]'"
    )
