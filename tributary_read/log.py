"""The manifest log: numbered commit files under ``ROOT/_tributary/log/``.

Creating ``<version>.json`` with create-if-absent is the only commit point.
Versions are contiguous because a committer only ever tries ``latest + 1``.
Checkpoints every N commits fold the state so that "latest state" and "last
transaction of app X" read one checkpoint plus fewer than N commits.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from .errors import CommitConflictError, ManifestCorruptError, StorageError
from .manifest import FORMAT, FORMAT_VERSION, Commit, FileEntry, Transaction, load_document
from .storage import Storage

META_DIR = "_tributary"
LOG_DIR = f"{META_DIR}/log"
LAST_CHECKPOINT = f"{META_DIR}/_last_checkpoint"
_WIDTH = 20  # zero-padded so lexical order is version order on every store


def commit_path(version: int) -> str:
    return f"{LOG_DIR}/{version:0{_WIDTH}d}.json"


def checkpoint_path(version: int) -> str:
    return f"{LOG_DIR}/{version:0{_WIDTH}d}.checkpoint.json"


@dataclass(frozen=True)
class AppState:
    """The last committed transaction of one app id."""

    version: int
    transaction: Transaction


@dataclass(frozen=True)
class TableState:
    """All committed files and the last transaction per app, as of ``version``."""

    version: int
    files: Mapping[str, FileEntry] = field(default_factory=dict, hash=False)
    apps: Mapping[str, AppState] = field(default_factory=dict, hash=False)

    def apply(self, c: Commit) -> TableState:
        files = dict(self.files)
        apps = dict(self.apps)
        for f in c.files:
            files[f.path] = f
        if c.transaction is not None:
            apps[c.transaction.app_id] = AppState(c.version, c.transaction)
        return TableState(c.version, files, apps)

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "kind": "checkpoint",
            "version": self.version,
            "files": [f.to_json() for f in self.files.values()],
            "apps": {a: {"version": s.version, "transaction": s.transaction.to_json()}
                     for a, s in self.apps.items()},
        }

    @classmethod
    def from_json(cls, data: bytes, where: str) -> TableState:
        d = load_document(data, where)
        try:
            files = {f.path: f for f in (FileEntry.from_json(x) for x in d["files"])}
            apps = {a: AppState(int(s["version"]), Transaction.from_json(s["transaction"]))
                    for a, s in d["apps"].items()}
            return cls(int(d["version"]), files, apps)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ManifestCorruptError(f"corrupt checkpoint {where}: {e}") from None


class ManifestLog:
    """Reads and appends the log of one table.

    Args:
        storage: the table's storage (rooted at ROOT).
        checkpoint_interval: write a checkpoint at every version divisible by this.
    """

    def __init__(self, storage: Storage, checkpoint_interval: int = 100):
        self.storage = storage
        self.checkpoint_interval = max(1, int(checkpoint_interval))

    # -- reading -----------------------------------------------------------
    def read_commit(self, version: int) -> Commit | None:
        """The commit at ``version``, or None when it does not exist (yet)."""
        path = commit_path(version)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            return None
        return Commit.decode(data, self.storage.uri_for(path), expect_version=version)

    def _exists(self, version: int) -> bool:
        return self.storage.exists(commit_path(version))

    def last_checkpoint(self) -> int:
        """Version of the newest checkpoint the hint names (0 if none, or the hint is bad).

        The hint is overwritten non-atomically and is only a starting point:
        readers always probe forward from it, so a stale hint costs reads, never data.
        """
        try:
            v = int(json.loads(self.storage.read(LAST_CHECKPOINT))["version"])
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError):
            return self._scan_checkpoints()
        return v if v > 0 and self.storage.exists(checkpoint_path(v)) else self._scan_checkpoints()

    def _scan_checkpoints(self) -> int:
        names = [f.path.rsplit("/", 1)[-1] for f in self.storage.list(LOG_DIR, recursive=False)]
        cps = [int(n.split(".")[0]) for n in names if n.endswith(".checkpoint.json") and n[:_WIDTH].isdigit()]
        return max(cps, default=0)

    def latest_version(self, start: int | None = None) -> int:
        """The newest committed version (0 for an empty log).

        Probes forward from a known version with exponential steps, then bisects:
        O(log n) existence checks, no listing of the log directory.
        """
        lo = self.last_checkpoint() if start is None else start  # known to exist (or 0)
        step = 1
        hi = lo + step
        while self._exists(hi):
            lo, step = hi, step * 2
            hi = lo + step
        while hi - lo > 1:  # invariant: lo exists (or 0), hi does not
            mid = (lo + hi) // 2
            if self._exists(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def commits(self, since: int = 0, until: int | None = None) -> Iterator[Commit]:
        """Commits with ``since < version <= until`` (until defaults to the latest)."""
        v = since + 1
        while until is None or v <= until:
            c = self.read_commit(v)
            if c is None:
                if until is not None:
                    raise ManifestCorruptError(
                        f"commit {v} is missing from {self.storage.uri}/{LOG_DIR} (log has a gap)"
                    )
                return
            yield c
            v += 1

    def state(self, version: int | None = None) -> TableState:
        """The table state at ``version`` (default: latest), from a checkpoint plus commits."""
        cp = self.last_checkpoint()
        if version is not None and cp > version:
            cp = max((v for v in range(0, version + 1, self.checkpoint_interval)
                      if v == 0 or self.storage.exists(checkpoint_path(v))), default=0)
        st = self._read_checkpoint(cp) if cp else TableState(0)
        for c in self.commits(st.version, version):
            st = st.apply(c)
        return st

    def _read_checkpoint(self, version: int) -> TableState:
        path = checkpoint_path(version)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            raise ManifestCorruptError(f"checkpoint {self.storage.uri_for(path)} vanished") from None
        st = TableState.from_json(data, self.storage.uri_for(path))
        if st.version != version:
            raise ManifestCorruptError(f"checkpoint {path} says version {st.version}")
        return st

    def last_transaction(self, app_id: str) -> AppState | None:
        return self.state().apps.get(app_id)

    # -- writing -----------------------------------------------------------
    def commit(
        self,
        files: Sequence[FileEntry],
        transaction: Transaction | None = None,
        *,
        base_version: int | None = None,
        protocol: str = "direct",
        writer: str | None = None,
        max_attempts: int = 200,
    ) -> Commit:
        """Append one commit, retrying on lost races.

        ``base_version`` is the version the caller's view was read at. A commit
        that carries a transaction must not land on top of another commit of the
        same app made after that view: that writer would have consumed the same
        source records, so this raises :class:`CommitConflictError` instead of
        duplicating them. Commits of other apps are simply skipped over.
        """
        v = (self.latest_version() if base_version is None else base_version) + 1
        for attempt in range(max_attempts):
            commit = Commit(
                version=v,
                timestamp_ms=int(time.time() * 1000),
                files=tuple(files),
                transaction=transaction,
                protocol=protocol,
                writer=writer,
            )
            if self.storage.create_if_absent(commit_path(v), commit.encode()):
                self._maybe_checkpoint(v)
                return commit
            winner = self.read_commit(v)
            if winner is None:
                # A concurrent conditional PUT that failed (S3 409): retry the same slot.
                time.sleep(random.uniform(0, 0.005 * (attempt + 1)))
                continue
            if (transaction is not None and winner.transaction is not None
                    and winner.transaction.app_id == transaction.app_id):
                raise CommitConflictError(
                    f"version {v} was committed by another writer of app {transaction.app_id!r} "
                    f"(offsets {dict(winner.transaction.offsets)}); is a second copy running?"
                )
            v += 1
        raise CommitConflictError(f"gave up after {max_attempts} lost commit races at version {v}")

    def _maybe_checkpoint(self, version: int) -> None:
        if version % self.checkpoint_interval:
            return
        try:
            st = self.state(version)
            data = json.dumps(st.to_json(), separators=(",", ":")).encode()
            self.storage.create_if_absent(checkpoint_path(version), data)
            self.storage.write(LAST_CHECKPOINT, json.dumps({"version": version}).encode())
        except StorageError:
            # A checkpoint is an optimisation; the commit itself already landed.
            pass
