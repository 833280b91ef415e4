"""Where a table's committed files lie and how their bytes are encoded: settings that never change.

Every committed file sits in the directory the layout names for its events' period in the
table's zone, under the partition values the partition template gives, in the table's format.
A ``table.json`` edited by hand to another zone or template would make the next run file the
same event hour somewhere else beside the committed one (``2026_11_26/19/`` beside ``…/10/``,
``day=`` beside ``dt=``), and every reader would take the old files by the new rules.

So the table keeps what it was committed with, and :func:`check_placement` is the one owner of
the rule that ``table.json`` must still say it:

* each commit records the placement it was written with (``settings``, folded into checkpoints,
  as Delta keeps a table's metadata in its log), and every commit or checkpoint read is checked:
  free, as the reader reads that document anyway;
* the first commit also pins it in ``_tributary/placement.json`` (created once, never replaced),
  which :meth:`~tributary_read.table.config.Table.load` reads: one small read per open, so that
  a command that reads no commit (a listing, ``trib table show``, a Hive DDL) is refused too.

A table whose commits predate this (no ``settings``, no pin) is checked by what its log already
tells: a committed data file's directory and partition values must be the ones the layout gives
(a changed directory or partition template is caught; a changed zone or format is not until
pinned), and its next commit records and pins the settings.
"""

from __future__ import annotations

import json
import posixpath
from functools import lru_cache
from typing import Iterable

from tributary_read.errors import ManifestCorruptError, SettingsDriftError
from tributary_read.io.storage import Storage
from tributary_read.table.layout import Layout
from tributary_read.table.manifest import FORMAT, FORMAT_VERSION, KIND_DATA, FileEntry, Placement, load_document

#: The settings the table's first commit was written with (log.py's META_DIR, spelled out: log.py imports this).
PINNED = "_tributary/placement.json"
#: What ``trib table set`` may change: every other setting defines what committed files mean.
SETTABLE = "tracking, protocol, ingest's and compact's defaults, and the Iceberg mirror"


def check_placement(expected: Placement | None, recorded: Placement | None, files: Iterable[FileEntry],
                    where: str, properties: str) -> None:
    """Refuse (SettingsDriftError, exit 6) a ``table.json`` whose placement (``expected``) is not the
    one ``where`` (a commit, a checkpoint, the pin) was written with (``recorded``). ``files``: its
    data files, asked only when it records none (a log of an older trib). ``properties``:
    table.json's address, for the message. ``expected`` None: a log opened without its table.
    """
    if expected is None:
        return
    if recorded is not None:
        if recorded == expected:  # every read of a commit asks: the usual answer costs one comparison
            return
        now_fields = expected.fields()
        for key, committed in recorded.fields().items():
            now = now_fields[key]
            if now != committed:
                raise SettingsDriftError(
                    f"{properties} says {key} {now!r}, but the table's commits were written with {committed!r} "
                    f"({where}): a table's layout, zone, partition template and format never change (trib table "
                    f"set changes only {SETTABLE}); restore {key} to {committed!r}, or create another table "
                    "for another layout")
        return
    entry = next((f for f in files if f.kind == KIND_DATA and f.partition), None)
    if entry is None:
        return
    found = _layout(expected.directory, expected.partition, expected.timezone).try_parse(
        posixpath.dirname(entry.path))
    if found is None or dict(found.values) != dict(entry.partition):
        committed = "/".join(f"{k}={v}" for k, v in entry.partition.items())
        raise SettingsDriftError(
            f"{properties} says layout {expected.directory!r} -> {expected.partition!r}, but the table's committed "
            f"file {entry.path} is in partition {committed} ({where}): a table's layout and partition template never "
            f"change (trib table set changes only {SETTABLE}); restore the layout table.json was created with, or "
            "create another table for another layout")


def read_pinned(storage: Storage) -> Placement | None:
    """The pinned placement, or None when no commit of this trib pinned it yet."""
    where = storage.uri_for(PINNED)
    try:
        d = load_document(storage.read(PINNED), where)
        return Placement.from_json(d.get("settings"))
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise ManifestCorruptError(f"corrupt file {where}: {e}") from None


def pin(storage: Storage, placement: Placement, properties: str) -> None:
    """Pin ``placement`` unless pinned already; a pin another writer made first must be the same."""
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": "placement", "settings": placement.to_json()}
    if not storage.create_if_absent(PINNED, json.dumps(doc, indent=2, sort_keys=True).encode()):
        check_placement(placement, read_pinned(storage), (), storage.uri_for(PINNED), properties)


@lru_cache(maxsize=8)
def _layout(directory: str, partition: str, timezone: str) -> Layout:
    return Layout(directory, partition, timezone)
