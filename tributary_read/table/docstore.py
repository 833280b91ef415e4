"""Numbered JSON documents: the one store behind the manifest log, consumer state and Hive sync state.

A document lives at ``<directory>/<prefix><number><suffix>``, the number
zero-padded to 20 digits so that lexical order is number order on every store
(an S3 listing is lexical). Numbered files rather than one overwritten file:
creating a new name is atomic on every store trib supports (an overwrite is not,
on local disk or HDFS), so a reader sees a whole document or none, and of two
writers creating the same number exactly one wins; the loser learns it and
never overwrites.

The store knows names, the common header and the create-if-absent primitive.
What a lost race means (a lost commit, an already-acked plan, a concurrent
sync) is its callers' business: the manifest log reads the slot back and
recognises its own ``commit_id``, a consumer reads the winner's plan.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from tributary_read.io.storage import Storage
from tributary_read.table.manifest import FORMAT, FORMAT_VERSION, READABLE_VERSIONS, load_document

#: Digits of a document number; every numbered document trib writes uses it.
WIDTH = 20


def header(kind: str | None = None) -> dict:
    """The common header every document starts with (docs/manifest.md), plus its ``kind``."""
    d: dict = {"format": FORMAT, "format_version": FORMAT_VERSION}
    if kind is not None:
        d["kind"] = kind
    return d


def encode(doc: Mapping) -> bytes:
    """Compact JSON, keys in the document's own order (how states and checkpoints are written)."""
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True)
class DocumentSeries:
    """One family of numbered names in one directory, e.g. ``_tributary/log/<n>.json``.

    Several series may share a directory (commits and checkpoints; consumer
    states and plans): a name belongs to a series only if it matches exactly,
    so they never see each other's files.
    """

    directory: str
    prefix: str = ""
    suffix: str = ".json"
    _pattern: re.Pattern = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        rx = re.compile(rf"^{re.escape(self.prefix)}([0-9]{{{WIDTH}}}){re.escape(self.suffix)}$")
        object.__setattr__(self, "_pattern", rx)

    @staticmethod
    def valid(number: int) -> bool:
        """Whether ``number`` can name a document (a negative one, as a user may ask for, cannot)."""
        return 0 <= number < 10**WIDTH

    def name(self, number: int) -> str:
        if not self.valid(number):
            raise ValueError(f"document number {number} does not fit {WIDTH} digits")
        return f"{self.prefix}{number:0{WIDTH}d}{self.suffix}"

    def path(self, number: int) -> str:
        return f"{self.directory}/{self.name(number)}" if self.directory else self.name(number)

    def number(self, name: str) -> int | None:
        """The number a file name (last path segment) carries, or None when not of this series."""
        m = self._pattern.match(name.rpartition("/")[2])
        return int(m.group(1)) if m else None

    def numbers(self, names: Iterable[str]) -> list[int]:
        """The numbers among ``names`` that belong to this series, ascending."""
        return sorted(n for n in map(self.number, names) if n is not None)


class DocumentStore:
    """The documents of one :class:`DocumentSeries` on one :class:`Storage`.

    Args:
        storage: where the documents live (a table root, or a state directory).
        series: their names.
    """

    def __init__(self, storage: Storage, series: DocumentSeries):
        self.storage = storage
        self.series = series

    @property
    def directory(self) -> str:
        return self.series.directory

    def path(self, number: int) -> str:
        return self.series.path(number)

    def uri(self, number: int) -> str:
        """The document's full URI, for messages."""
        return self.storage.uri_for(self.path(number))

    # -- listing -------------------------------------------------------------
    def names(self) -> list[str]:
        """The file names in the directory (one listing; a missing directory is empty).

        Passed to :meth:`numbers` / :meth:`prune` of sibling series, one listing serves them all.
        """
        return [f.path.rpartition("/")[2] for f in self.storage.list(self.directory, recursive=False)]

    def numbers(self, names: Iterable[str] | None = None) -> list[int]:
        """The numbers present, ascending (from ``names`` when given, else one listing)."""
        return self.series.numbers(self.names() if names is None else names)

    def latest(self, names: Iterable[str] | None = None) -> int:
        """The highest number present; 0 when there is none (numbers start at 1)."""
        nums = self.numbers(names)
        return nums[-1] if nums else 0

    def exists(self, number: int) -> bool:
        """One existence check, no listing (the manifest log probes versions this way)."""
        return self.series.valid(number) and self.storage.file_exists(self.path(number))

    # -- reading -------------------------------------------------------------
    def read_bytes(self, number: int) -> bytes | None:
        """The document's bytes, or None when it does not exist (any other failure raises)."""
        if not self.series.valid(number):
            return None
        try:
            return self.storage.read(self.path(number))
        except FileNotFoundError:
            return None

    def read(self, number: int) -> dict | None:
        """The parsed document, its header checked; None when it does not exist.

        Raises:
            ManifestCorruptError: not JSON, or not a trib document.
            UnsupportedFormatVersionError: a ``format_version`` this build cannot read.
        """
        data = self.read_bytes(number)
        return None if data is None else load_document(data, self.uri(number))

    # -- writing -------------------------------------------------------------
    def create(self, number: int, doc: Mapping | bytes) -> bool:
        """Create document ``number`` unless it exists: True when this call created it.

        Exclusive on every store (the storage's create-if-absent, the commit
        primitive): of concurrent creators of one number exactly one gets
        True, and nothing is ever overwritten. A mapping is checked for the
        common header and written as compact JSON; bytes are written as given
        (a commit has its own canonical encoding). Errors propagate: a create
        that raised may still have landed, which only the caller can judge.
        """
        if not isinstance(doc, (bytes, bytearray)):
            # any version a reader of this build takes (manifest.READABLE_VERSIONS): a checkpoint of a restated
            # table is version 3, and refusing it here left such a table without checkpoints
            if doc.get("format") != FORMAT or doc.get("format_version") not in READABLE_VERSIONS:
                raise ValueError(f"{self.path(number)}: a document must start with the common header")
            doc = encode(doc)
        return self.storage.create_if_absent(self.path(number), bytes(doc))

    def prune(self, keep: int, newest: int, names: Iterable[str] | None = None) -> list[int]:
        """Delete the documents numbered ``newest - keep`` and below; the numbers deleted.

        ``newest`` is the number the caller just created, so the newest
        ``keep`` (at least 1) survive and the current document never goes,
        even if a concurrent writer has moved past it meanwhile. Errors
        propagate; a caller for whom old documents only cost space ignores them.
        """
        if keep < 1:
            raise ValueError("prune must keep at least the newest document")
        gone = [n for n in self.numbers(names) if n <= newest - keep]
        for n in gone:
            self.storage.delete(self.path(n))
        return gone
