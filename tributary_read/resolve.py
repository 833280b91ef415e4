"""Resolve the exact set of files a run should read.

This module answers "which files" and nothing else, returning a typed
:class:`FileSet` that the CLI prints and engines consume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import InvalidInputError
from .manifest import KIND_DATA
from .table import Table


@dataclass(frozen=True)
class ResolvedFile:
    path: str
    size: int
    partition: Mapping[str, str] = field(hash=False)
    mtime_ms: int | None = None
    records: int | None = None
    version: int | None = None
    valid_length: int | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "mtime_ms": self.mtime_ms,
                             "partition": dict(self.partition)}
        for k in ("records", "version", "valid_length"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d


@dataclass(frozen=True)
class FileSet:
    """The resolved files plus how they were chosen (mode and window/plan)."""

    mode: str
    files: tuple[ResolvedFile, ...]
    plan: Mapping[str, Any] = field(default_factory=dict, hash=False)
    root: str = ""

    def uris(self, storage) -> list[str]:
        return [storage.uri_for(f.path) for f in self.files]

    def to_json(self) -> dict:
        return {"mode": self.mode, "root": self.root, **dict(self.plan),
                "count": len(self.files), "bytes": sum(f.size for f in self.files),
                "files": [f.to_json() for f in self.files]}


def manifest_files(table: Table, since_version: int = 0, until_version: int | None = None) -> FileSet:
    """Files of commits with ``since_version < version <= until_version``.

    The full range reads one checkpoint plus its tail; a narrow range reads
    only its own commit files, which keeps "the newest hour" cheap on long logs.
    """
    if since_version < 0 or (until_version is not None and until_version < since_version):
        raise InvalidInputError("version range must satisfy 0 <= since <= until")
    log = table.log
    latest = log.latest_version()
    until = latest if until_version is None else min(until_version, latest)
    out: list[ResolvedFile] = []
    if since_version == 0 and until == latest:
        state = log.state()
        until = state.version
        entries = [(e, None) for e in state.files.values()]
    else:
        entries = [(e, c.version) for c in log.commits(since_version, until) for e in c.files]
    for e, v in entries:
        if e.kind == KIND_DATA:
            out.append(ResolvedFile(e.path, e.size, e.partition, records=e.records, version=v))
    out.sort(key=lambda f: f.path)
    return FileSet("manifest", tuple(out), {"since_version": since_version, "until_version": until},
                   table.uri)
