"""A restated partition reaches directory readers whole: its new files are staged in a hidden sibling
directory, and after the commit the two directories swap names in one step.

Why a directory swap, not per-file renames: a restate replaces a partition's whole file set
and may change its records (late data corrected an aggregate). Renaming new files in one by
one and the old ones out lets a directory reader (Hive, Spark over a partition, ``ls``) list
the old files and some new ones together, or neither; an aggregate read then is wrong
without any error. ``renameat2(RENAME_EXCHANGE)`` swaps ``base/2026_11_28/06`` with
``base/2026_11_28/.06.restate-RUN`` atomically: every listing sees the old partition or the
new one. The hidden directory then holds the old files, set aside for readers behind the
restate until ``trib clean``.

Each staging directory holds a hidden marker file named for it, so whether a swap was made is
one look: the marker is in the partition's directory once it was. The look and the swap run
under one lock (:meth:`~tributary_read.io.storage.Storage.exchange_dirs`), so two processes
finishing the same commit (the writer and a reader rolling forward) never swap it back.

Where the store cannot swap directories (object stores), a restate is refused before any
work (:func:`tributary_read.table.restatement.check_storage`).
"""

from __future__ import annotations

import posixpath
from typing import Sequence

from tributary_read.errors import InvalidInputError, VerificationError
from tributary_read.faults import crash_point
from tributary_read.table.manifest import Commit, FileEntry

#: The staging directory's name: ``.<partition leaf>.restate-<run id>`` beside the partition's directory.
STAGING_INFIX = ".restate-"
#: The marker file in a staging directory: ``.trib-<its name without the dot>``.
MARKER_PREFIX = ".trib-"


def staging_dir(directory: str, run_id: str) -> str:
    """The hidden sibling of partition ``directory`` that run ``run_id`` stages its new files in."""
    parent, _, leaf = directory.rpartition("/")
    if not leaf:
        raise InvalidInputError("a restated partition needs a directory of its own, not the table's root")
    return posixpath.join(parent, f".{leaf}{STAGING_INFIX}{run_id}")


def marker(staging: str) -> str:
    """The marker's name (not its path) for ``staging``."""
    return MARKER_PREFIX + posixpath.basename(staging).lstrip(".")


def in_staging(staging: str, path: str) -> str:
    """``path``'s name in ``staging``: where a restate writes a new file of the partition, and where the swap
    leaves a file it removed (set aside)."""
    return posixpath.join(staging, posixpath.basename(path))


def is_marker_name(name: str) -> bool:
    """Whether ``name`` is a restate's marker file (trib's own, never another tool's file)."""
    return name.startswith(MARKER_PREFIX) and STAGING_INFIX in name


def is_staging_name(name: str) -> bool:
    """Whether ``name`` (a directory's base name) is a restate's staging directory (``trib clean``'s to judge)."""
    return name.startswith(".") and STAGING_INFIX in name


def logical_path(path: str) -> str:
    """``path`` with a staging directory named as the partition it stages (or set aside): a file a reader
    is handed from there is judged by the name it has in the table (visible, its partition)."""
    parent, _, name = path.rpartition("/")
    grand, _, leaf = parent.rpartition("/")
    if not is_staging_name(leaf):
        return path
    return posixpath.join(grand, leaf[1:leaf.index(STAGING_INFIX)], name)


def logical_dir(path: str) -> str:
    """The partition directory a file lies in, by its name in the table (:func:`logical_path`)."""
    return posixpath.dirname(logical_path(path))


def prepare(storage, staging: str) -> str:
    """Make ``staging`` with its marker; returns the marker's path, for the caller to make durable with the files."""
    storage.makedirs(staging)
    path = posixpath.join(staging, marker(staging))
    storage.write(path, b"")
    return path


def swap(table, directory: str, staging: str) -> bool:
    """Swap ``staging`` in as ``directory``, unless it was already; True if this call swapped it.

    The marker under neither name means a later restate of the partition was swapped in since
    (its staging directory now holds this one's content, marker included): nothing left to do. With
    no later restate's marker in the partition either, the committed restate's files are gone: a
    verification failure, never silently skipped.
    """
    st = table.storage
    done = posixpath.join(directory, marker(staging))
    if st.file_exists(done):
        return False
    if not st.file_exists(posixpath.join(staging, marker(staging))):
        if st.file_exists(done):  # swapped between the two looks
            return False
        if any(is_marker_name(f.path.rpartition("/")[2]) for f in st.list(directory, recursive=False)):
            return False  # superseded: a later restate holds the partition
        raise VerificationError(f"restated partition {st.uri}/{directory}: neither it nor its staging directory "
                                f"{staging} holds the restate's marker {marker(staging)}; run `trib verify`")
    crash_point("restate.before_swap")
    swapped = st.exchange_dirs(staging, directory, unless=done)
    crash_point("restate.after_swap")
    return swapped


def finish_restate(table, commit: Commit) -> list[str]:
    """After a restate commit: swap each restated partition in (idempotent); returns the directories swapped."""
    return [r.directory for r in commit.restated if swap(table, r.directory, r.staging)]


def restaged(files: Sequence[FileEntry]) -> dict[tuple[str, str], list[FileEntry]]:
    """The files among ``files`` staged in a restate's staging directory, by (directory, staging).

    Such a file reaches its final name only with its whole partition (:func:`swap`), never alone:
    the rename protocol's staged files sit beside their final name, a restate's in a sibling directory.
    """
    out: dict[tuple[str, str], list[FileEntry]] = {}
    for f in files:
        if f.staged and posixpath.dirname(f.staged) != posixpath.dirname(f.path) \
                and is_staging_name(posixpath.basename(posixpath.dirname(f.staged))):
            out.setdefault((posixpath.dirname(f.path), posixpath.dirname(f.staged)), []).append(f)
    return out
