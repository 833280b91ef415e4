"""Before an engine reads a FileSet: every file still holds the bytes the FileSet says it will read.

A FileSet records each file's size: a committed file's from its manifest
entry, a listed file's from the listing (and, for a file read up to a valid
length or as a byte range, how far it is read). Something outside trib (a
rogue tool, a bad restore, a disk fault) can truncate or rewrite a file
afterwards, and Spark reads whatever bytes are there: a truncated jsonl or
gzip file gives fewer records and exit 0, a Parquet file fails deep in a task.
So every read looks first, with one stat per file (the store's batched
``stat_many``, many batches at once on a remote store), and stops before the
engine starts with one line naming the file, both sizes and where to look.

What a committed file must match is decided by ``verify``'s own comparison
(:func:`tributary_read.table.maintenance.size_problem`): its exact size.
A listed file's whole-file entry must have the size it was listed with; one
read up to a length must still hold that length (it may have grown since:
the bytes past it are not read).

A missing file is left to the engine's own error (Spark's ``PATH_NOT_FOUND``,
which ``trib etl run`` turns into its restore-or-skip line): it is never read
silently, and that line already names the ways forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from tributary_read.errors import ChangedFileError, VerificationError

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.io.storage import FileInfo, Storage
    from tributary_read.read.fileset import FileSet, ResolvedFile

#: Paths per ``stat_many`` call on a remote store, and how many such calls run at once.
REMOTE_BATCH = 64
REMOTE_PARALLEL = 16


def check_sizes(fileset: FileSet, storage: Storage | None = None,
                options: Mapping[str, str] | None = None) -> None:
    """Raise before any byte is read if a file of ``fileset`` no longer holds what it is to be read as.

    ``storage``: the store the FileSet was resolved from, else opened from its
    root with ``options``. A committed file of another size than its manifest
    entry is VerificationError (exit 9: the table does not match its log); any
    other file that changed since it was listed is ChangedFileError (exit 15:
    its bytes are not the ones that were planned).
    """
    if not fileset.files:
        return
    if storage is None:
        from tributary_read.io.storage import open_storage

        storage = open_storage(fileset.root, options)
    found = _stat(storage, [f.path for f in fileset.files])
    committed = _committed(fileset, storage, options)
    bad = [(f, info, committed.get(f.path)) for f, info in zip(fileset.files, found)
           if info is not None and not info.is_dir and _changed(f, info, committed.get(f.path))]
    if not bad:
        return  # missing files: the engine's own error says so
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    look = f"see `trib verify {fileset.root}`" if fileset.format is not None else "look at it"
    f, info, size = next((b for b in bad if b[2] is not None), bad[0])
    if size is not None:
        raise VerificationError(
            f"committed file {fileset.uri(f)} holds {info.size} bytes but its commit says {size}{more} "
            f"(truncated or rewritten outside trib): nothing was read; {look}")
    if f.valid_length is not None:
        raise ChangedFileError(
            f"{fileset.uri(f)} holds {info.size} bytes, fewer than the {f.valid_length} to be read{more} (truncated "
            f"since it was listed): nothing was read; {look}, then plan the files again")
    raise ChangedFileError(
        f"{fileset.uri(f)} holds {info.size} bytes but was listed with {f.size}{more} (truncated, rewritten or "
        f"still being written): nothing was read; {look}, then plan the files again")


def _changed(f: ResolvedFile, info: FileInfo, committed: int | None) -> bool:
    """Whether ``f`` no longer holds what is read of it: a committed file its manifest size (``verify``'s
    own comparison), else a length it is read up to, else the size it was listed with."""
    if committed is not None:
        from tributary_read.table.maintenance import size_problem

        return size_problem(f.path, committed, info) is not None
    return info.size < f.valid_length if f.valid_length is not None else info.size != f.size


def _committed(fileset: FileSet, storage: Storage, options) -> dict[str, int]:
    """The manifest size of each file a commit lists: its entry's, else the table's current state's (a
    consumer plans a table's files from a listing, whose sizes may be a truncated file's already)."""
    sizes = {f.path: f.size for f in fileset.files if f.version is not None and f.valid_length is None}
    if fileset.format is not None and len(sizes) < len(fileset.files):
        from tributary_read.table.config import Table

        state = Table.load(storage.uri, options).log.state()
        sizes.update({f.path: e.size for f in fileset.files if f.path not in sizes
                      and (e := state.files.get(f.path)) is not None})
    return sizes


def _stat(storage: Storage, rels: list[str]) -> list[FileInfo | None]:
    """``stat_many`` of every path, in order; on a remote store in batches, many at once."""
    if not storage.capabilities.remote or len(rels) <= REMOTE_BATCH:
        return storage.stat_many(rels)
    from tributary_read.read.fanout import fan_out

    batches = [rels[i:i + REMOTE_BATCH] for i in range(0, len(rels), REMOTE_BATCH)]
    return [info for batch in fan_out(storage.stat_many, batches, REMOTE_PARALLEL, None, [0, len(batches)])
            for info in batch]
