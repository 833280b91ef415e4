"""The manifest log: numbered commit files under ``ROOT/_tributary/log/``.

Creating ``<version>.json`` with create-if-absent is the only commit point.
Versions are contiguous because a committer only ever tries ``latest + 1``.
Checkpoints every N commits fold the state so that "latest state" and "last
transaction of app X" read one checkpoint plus fewer than N commits.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import random
import time
import uuid
from typing import Callable, Iterator, Sequence, Union

from tributary_read.errors import AlreadyCommittedError, CommitConflictError, CommitStateUnknownError, FencedError, LogRetentionError, ManifestCorruptError, SettingsDriftError, StorageError, VerificationError
from tributary_read.faults import wall_ms
from tributary_read.table.docstore import DocumentSeries, DocumentStore
from tributary_read.table.manifest import (
    MAX_TIMESTAMP_MS, OP_APPEND, OP_EXPIRE, OP_REPLACE, OP_RESTATE, Commit, FileEntry, Placement, Restatement,
    KIND_DATA, Transaction, check_replace, check_restate,
)
from tributary_read.table import statememo
from tributary_read.table.placement import check_placement, pin
from tributary_read.table.state import AppState, TableState, same_transaction
from tributary_read.io.storage import Storage

META_DIR = "_tributary"
LOG_DIR = f"{META_DIR}/log"
LAST_CHECKPOINT = f"{META_DIR}/_last_checkpoint"
#: Created (if absent) by a table's first replace commit, before it is claimed: from then on
#: mtime readers judge compacted files by the span their names carry (read/visibility.py).
#: One stat per windowed read spares tables that never compacted the per-name check.
COMPACTED_MARKER = f"{META_DIR}/compacted"
#: Created (if absent) by a table's first restate commit, before it is claimed: readers that go by
#: listings and mtimes (not the log) must then not take a restated partition's new files for new data.
RESTATED_MARKER = f"{META_DIR}/restated"
#: ``<version>.json`` and ``<version>.checkpoint.json`` share the log directory.
COMMITS = DocumentSeries(LOG_DIR)
CHECKPOINTS = DocumentSeries(LOG_DIR, suffix=".checkpoint.json")
#: Tries at one slot whose outcome stays unknown before CommitStateUnknownError.
SLOT_ATTEMPTS = 6
#: Lost races never make a committer give up under honest contention; time does.
COMMIT_TIMEOUT_S = 600.0
#: Default ``log_retention`` (Delta's logRetentionDuration): commit files older
#: than this and older than the newest checkpoint may be removed by ``trib clean``.
DEFAULT_LOG_RETENTION_MS = 30 * 86_400_000


def commit_path(version: int) -> str:
    return COMMITS.path(version)


def checkpoint_path(version: int) -> str:
    return CHECKPOINTS.path(version)


def new_commit_id(writer: str | None) -> str:
    """Writer id plus a nonce: unique per commit, so a committer can recognise its own."""
    return f"{writer or 'anonymous'}-{uuid.uuid4().hex}"


def backoff(attempt: int, *, base: float, cap: float, floor: float = 0.0) -> None:
    """Sleep before retry ``attempt``: exponential from ``base`` up to ``cap``, jittered down to ``floor`` of it.

    The one retry pause of the log (lost races, doubtful slots) and everything that commits through it:
    jitter spreads writers that lost together, so they do not collide again at the same moment.
    """
    time.sleep(min(cap, base * 2 ** min(attempt, 30)) * random.uniform(floor, 1.0))


#: What a commit removes: fixed entries, or a function of the state the commit would land on
#: (``expire`` decides its removals on that state, so a lost race never removes a file twice).
Removals = Union[Sequence[FileEntry], Callable[["TableState"], Sequence[FileEntry]]]


def commit_time(version: int, previous: Commit | None, wall: int) -> tuple[int, int]:
    """The time commit ``version`` is stamped with, and where its run of rising times starts.

    A writer's clock may be hours off; a time at least the previous commit's
    + 1 ms keeps times rising with versions whatever the clocks say (Delta's
    in-commit timestamps), so a reader may binary-search them. The run is
    inherited from the previous commit: it starts at that commit when it was
    stamped by an older trib (its own time is still below ours), and here when
    the previous commit cannot be read (nothing is known about it).
    """
    if version <= 1:
        return wall, 1
    if previous is None or previous.timestamp_ms >= MAX_TIMESTAMP_MS:
        return wall, version
    since = previous.monotonic_since if previous.monotonic_since is not None else version - 1
    return max(wall, previous.timestamp_ms + 1), since


def _check_other_app(transaction: Transaction | None, c: Commit, claims: frozenset[str] | None = None) -> None:
    """A commit of our app after our view: this very transaction (a concurrent copy finished
    first: AlreadyCommittedError, nothing to redo) or another one (a conflict).

    With ``claims`` (the offset keys this writer owns: a Kafka worker's partitions), a commit of
    the app conflicts only when it carries one of them, and then as :class:`FencedError`: another
    process read the same partitions, and whichever commits second would duplicate its records.
    """
    if claims is not None and transaction is not None and c.transaction is not None \
            and c.transaction.app_id == transaction.app_id:
        taken = sorted(claims & set(c.transaction.offsets))
        if taken:
            raise FencedError(
                f"version {c.version} of app {transaction.app_id!r} committed {', '.join(taken[:5])}"
                f"{' …' if len(taken) > 5 else ''}, which this writer also read: another process claims "
                "them. This writer's records are not committed; stop the other one (or give each worker "
                "its own partitions) and run again: it resumes from the table", version=c.version)
        return
    if transaction is not None and c.transaction is not None and c.transaction.app_id == transaction.app_id:
        if same_transaction(c.transaction, transaction):
            raise AlreadyCommittedError(
                f"transaction of {transaction.app_id!r} with offsets {dict(transaction.offsets)} was committed "
                f"as version {c.version} by a concurrent copy", version=c.version)
        raise CommitConflictError(
            f"version {c.version} was committed by another writer of app {transaction.app_id!r} "
            f"(offsets {dict(c.transaction.offsets)}); is a second copy running?"
        )


def _check_replace(added: tuple[FileEntry, ...], files: tuple[FileEntry, ...], state: TableState) -> None:
    """A replace keeps every record (else VerificationError), and lands only on a state that still
    holds every file it replaces, as it read them (else a conflict)."""
    try:
        check_replace(added, files)
    except ValueError as e:
        raise VerificationError(f"compaction refused, nothing committed: {e}") from None
    for f in files:
        live = state.files.get(f.path)
        if live is not None and (live.size, live.records) == (f.size, f.records):
            continue
        gone = state.removed.get(f.path)
        how = ("another compaction replaced it" if gone is not None and gone.by else
               "trib expire removed it" if gone is not None else "it is not in the table")
        at = f" at version {gone.version}" if gone is not None else ""
        raise CommitConflictError(f"cannot replace {f.path}: {how}{at} (as of version {state.version}); "
                                  "nothing was committed, run the compaction again")


def restatement(state: TableState, restated: Sequence[Restatement]
                ) -> tuple[tuple[FileEntry, ...], tuple[Restatement, ...]]:
    """What a restate of ``restated`` removes from ``state``: every data file in each partition's
    directory, and each partition's records before, counted from those files.

    Decided on the state the commit lands on, not the one the run read: a compaction of the
    partition that landed meanwhile holds the same records in other files, and a restate that
    named the files it read would leave the compacted copy beside the new files.
    """
    from tributary_read.table.restate_swap import logical_dir  # a moved partition's files lie in its own directory

    dirs = {r.directory for r in restated}
    gone = tuple(f for f in state.files.values() if f.kind == KIND_DATA and logical_dir(f.path) in dirs)
    records: dict[str, int] = {}
    for f in gone:
        d = logical_dir(f.path)
        records[d] = records.get(d, 0) + f.records
    return gone, tuple(dataclasses.replace(r, records_before=records.get(r.directory, 0)) for r in restated)


def _check_restate(added: tuple[FileEntry, ...], gone: tuple[FileEntry, ...], now: tuple[Restatement, ...]) -> None:
    try:
        check_restate(added, gone, now)
    except ValueError as e:
        raise VerificationError(f"restatement refused, nothing committed: {e}") from None


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


class ManifestLog:
    """Reads and appends the log of one table.

    Args:
        storage: the table's storage (rooted at ROOT).
        checkpoint_interval: write a checkpoint at every version divisible by this.
        settings: the table's layout and format (its table.json's). Every commit appended
            records them (the first one also pins them), and every commit and checkpoint read
            is checked against them (:func:`~tributary_read.table.placement.check_placement`):
            a table.json edited to another layout is refused, nothing committed under it.
        properties: where those settings come from, for the refusal's message.
    """

    def __init__(self, storage: Storage, checkpoint_interval: int = 100, settings: Placement | None = None,
                 properties: str = "table.json"):
        self.storage = storage
        self.checkpoint_interval = max(1, int(checkpoint_interval))
        self.settings = settings
        self.properties = properties
        #: Whether ``settings`` are known to be pinned (:mod:`tributary_read.table.placement`): set by
        #: Table.load when it found the pin, else by the first commit, which pins them.
        self.pinned = False

    @property
    def storage(self) -> Storage:
        return self._storage

    @storage.setter
    def storage(self, storage: Storage) -> None:
        # A property so that the document stores follow a swapped storage (fault injection does that).
        self._storage = storage
        self._commits = DocumentStore(storage, COMMITS)
        self._checkpoints = DocumentStore(storage, CHECKPOINTS)

    @property
    def _memo_key(self) -> str:
        """This log's name in the process's state memo (:mod:`tributary_read.table.statememo`)."""
        return self.storage.uri_for(LOG_DIR)

    # -- reading -----------------------------------------------------------
    def read_commit(self, version: int) -> Commit | None:
        """The commit at ``version``, or None when it does not exist (yet)."""
        data = self._commits.read_bytes(version)
        if data is None:
            return None
        where = self._commits.uri(version)
        commit = Commit.decode(data, where, expect_version=version)
        check_placement(self.settings, commit.settings, commit.files, where, self.properties)
        return commit

    def _exists(self, version: int) -> bool:
        return self._commits.exists(version)

    def last_checkpoint(self) -> int:
        """Version of the newest checkpoint the hint names (0 if none, or the hint is bad).

        The hint is overwritten non-atomically and is only a starting point:
        readers always probe forward from it, so a stale hint costs reads, never data.
        """
        try:
            v = int(json.loads(self.storage.read(LAST_CHECKPOINT))["version"])
        except FileNotFoundError:
            # Without a hint, version 0 is a safe start only while commit 1 exists:
            # log retention may have removed the commits below a checkpoint.
            return 0 if self._exists(1) else self._scan_checkpoints()
        except (ValueError, KeyError, TypeError, RecursionError):
            return self._scan_checkpoints()
        return v if v > 0 and self._checkpoints.exists(v) else self._scan_checkpoints()

    def _scan_checkpoints(self) -> int:
        return self._checkpoints.latest()

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
        """Commits with ``since < version <= until`` (until defaults to the latest).

        A missing commit at or below the newest checkpoint is never "the end of
        the log": log retention removed it (or the log has a gap), and stopping
        there would silently drop every later commit.
        """
        v = since + 1
        while until is None or v <= until:
            c = self.read_commit(v)
            if c is None:
                if until is not None or self._below_checkpoint(v):
                    raise self._absent(v)
                return
            yield c
            v += 1

    def _below_checkpoint(self, v: int) -> bool:
        """Whether the missing commit ``v`` lies at or below the newest checkpoint.

        While commit 1 exists, log retention never ran and a miss is the end of
        the log (one existence check). Otherwise the hint is read afresh: a
        stale starting point may have been trimmed away while it was read.
        """
        return not self._exists(1) and v <= self.last_checkpoint()

    def oldest_version(self) -> int:
        """The oldest commit still in the log (1 unless log retention removed some; 0 if none)."""
        if self._exists(1):
            return 1
        versions = self._commits.numbers()
        return versions[0] if versions else 0

    def _absent(self, v: int) -> Exception:
        oldest = self.oldest_version()
        if 0 < v < oldest:
            return LogRetentionError(
                f"commit {v} of {self.storage.uri} was removed by log retention (the log keeps versions "
                f"{oldest} on; older state lives in the checkpoints): read from version {oldest - 1} on, "
                "or the whole current state")
        return ManifestCorruptError(f"commit {v} is missing from {self.storage.uri}/{LOG_DIR} (log has a gap)")

    def state(self, version: int | None = None) -> TableState:
        """The table state at ``version`` (default: latest), from a checkpoint plus commits, or from the
        state this process read last plus the commits since (:mod:`~tributary_read.table.statememo`).

        The latest state is read a second time when log retention removed what a
        stale checkpoint hint pointed at while it was being read.
        """
        memo = statememo.recall(self._memo_key, self._commits.read_bytes)
        if memo is not None and (version is None or version >= memo.version):
            check_placement(self.settings, memo.settings, memo.files.values(), self._memo_key, self.properties)
            try:
                st = memo.apply_all(self.commits(memo.version, version))
            except LogRetentionError:
                statememo.forget(self._memo_key)
            else:
                statememo.remember(self._memo_key, st, self._commits.read_bytes)
                return st
        for attempt in range(2):
            try:
                cp = self.last_checkpoint()
                if version is not None and cp > version:
                    cp = max((v for v in range(0, version + 1, self.checkpoint_interval)
                              if v == 0 or self._checkpoints.exists(v)), default=0)
                st = self._read_checkpoint(cp) if cp else TableState(0)
                st = st.apply_all(self.commits(st.version, version))
                statememo.remember(self._memo_key, st, self._commits.read_bytes)
                return st
            except LogRetentionError:
                if version is not None or attempt:
                    raise
        raise AssertionError("unreachable")

    def _read_checkpoint(self, version: int) -> TableState:
        data = self._checkpoints.read_bytes(version)
        if data is None:
            # It existed a moment ago (the caller checked): only log retention deletes checkpoints.
            raise LogRetentionError(f"checkpoint {self._checkpoints.uri(version)} was removed while being read; "
                                    "run again")
        where = self._checkpoints.uri(version)
        st = TableState.from_json(data, where)
        if st.version != version:
            raise ManifestCorruptError(f"checkpoint {checkpoint_path(version)} says version {st.version}")
        check_placement(self.settings, st.settings, st.files.values(), where, self.properties)
        return st

    def last_transaction(self, app_id: str) -> AppState | None:
        return self.state().apps.get(app_id)

    def transaction_version(self, transaction: Transaction) -> int | None:
        """The version of the commit that holds ``transaction`` (same app id and
        offsets), or None when no commit does.

        The state answers the usual cases at once: an app never seen, its last
        transaction (a re-run of the newest schedule time), or offsets beyond
        every offset the app ever committed (``AppState.high``: a new run). Only
        a re-run of an older position (a backfill) reads the app's commits,
        newest first. When log retention removed commits that might hold it,
        this raises LogRetentionError rather than guess.
        """
        app = self.state().apps.get(transaction.app_id)
        if app is None:
            return None
        if same_transaction(app.transaction, transaction):
            return app.version
        high = app.high
        if high is not None and any(k not in high or v > high[k] for k, v in transaction.offsets.items()):
            return None
        oldest = self.oldest_version()
        for c in self._commits_newest_first(app.version - 1, max(oldest, 1)):
            if c.transaction is not None and same_transaction(c.transaction, transaction):
                return c.version
        if oldest > 1:
            raise LogRetentionError(
                f"cannot tell whether {transaction.app_id!r} with offsets {dict(transaction.offsets)} was "
                f"committed: it is not in the log's commits {oldest} on, and log retention removed the older "
                f"ones of {self.storage.uri}. Look with `trib log`; keep the log longer (the table's "
                "log retention) than the oldest run you may repeat")
        return None

    def find_transaction(self, transaction: Transaction) -> Commit | None:
        """The commit that holds ``transaction``, or None (see :meth:`transaction_version`)."""
        v = self.transaction_version(transaction)
        if v is None:
            return None
        c = self.read_commit(v)
        if c is None:
            raise self._absent(v)
        return c

    def _commits_newest_first(self, top: int, bottom: int, batch: int = 32) -> Iterator[Commit]:
        """Commits ``top`` down to ``bottom``, read ``batch`` at a time in parallel
        (an object store answers each read in tens of milliseconds)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8, "trib-log-scan") as pool:
            hi = top
            while hi >= bottom:
                lo = max(bottom, hi - batch + 1)
                for v, c in zip(range(hi, lo - 1, -1), pool.map(self.read_commit, range(hi, lo - 1, -1))):
                    if c is None:
                        raise self._absent(v)
                    yield c
                hi = lo - 1

    # -- writing -----------------------------------------------------------
    def commit(
        self,
        files: Sequence[FileEntry],
        transaction: Transaction | None = None,
        *,
        base_version: int | None = None,
        protocol: str = "direct",
        writer: str | None = None,
        timeout_s: float = COMMIT_TIMEOUT_S,
        removed: Removals = (),
        claims: frozenset[str] | None = None,
        replace: bool = False,
        restated: Sequence[Restatement] = (),
    ) -> Commit:
        """Append one commit, retrying on lost races.

        ``base_version`` is the version the caller's view was read at. A commit
        that carries a transaction must not land on top of another commit of the
        same app made after that view: that writer would have consumed the same
        source records, so this raises :class:`CommitConflictError` instead of
        duplicating them, or :class:`AlreadyCommittedError` (with its ``version``)
        when that commit holds this very transaction: the caller's answer to
        "is it committed?" comes from the race itself, with no extra read.
        Commits of other apps are simply skipped over.

        A loser jumps to the newest version (checking every commit it jumps over
        for its app) rather than stepping one slot per lost race, and backs off
        with jitter; under honest contention every lost race means somebody else
        made progress, so only ``timeout_s`` ends the attempts, never a count.
        An outcome that stays unknown raises :class:`CommitStateUnknownError`
        without ever moving to a higher slot: our commit might be in this one.

        ``removed`` makes the commit an ``expire``: files leaving the state. A
        function is asked again on the state under each slot tried, so what is
        removed is decided on the state the commit lands on.

        ``claims``: the offset keys this writer owns (see :func:`_check_other_app`); commits of the
        same app on other keys are then skipped over like other apps' (several Kafka workers).

        ``replace``: ``files`` are compacted copies of ``removed`` (``trib compact``). Under each
        slot tried, every file it removes must still be in the state: one that another
        compaction replaced or ``trib expire`` removed meanwhile makes this a conflict, so
        two compactions never both land and an expired partition is never resurrected.

        ``restated``: a restate (``[output] mode = "restate"``): ``files`` are the complete new file
        sets of these partitions, and the commit removes every data file each of them holds in the
        state under the slot it lands on (a compaction of the partition meanwhile included), with
        the records before counted from those files (:func:`restatement`).
        """
        base = self.latest_version() if base_version is None else base_version
        if self.settings is not None and not self.pinned:  # the table's first commit, or a log from before pins
            pin(self.storage, self.settings, self.properties)
            self.pinned = True
        if replace:  # whoever commits a replace, the readers that need to know do
            self.storage.create_if_absent(COMPACTED_MARKER, b"{}\n")
        if restated:
            self.storage.create_if_absent(RESTATED_MARKER, b"{}\n")
        # an append into a partition a restate moved would be invisible to Hive (restate_swap.check_not_moved)
        appends = bool(files) and not (restated or replace or removed) and self.storage.exists(RESTATED_MARKER)
        commit_id = new_commit_id(writer)
        deadline = time.monotonic() + timeout_s
        v, losses = base + 1, 0
        previous: Commit | None = None  # after a lost race: commit v - 1, the last one the race read
        while True:
            now: tuple[Restatement, ...] = ()
            if restated:
                gone, now = restatement(self.state(v - 1), restated)
                _check_restate(tuple(files), gone, now)
            else:
                gone = tuple(removed(self.state(v - 1)) if callable(removed) else removed)
            if appends:
                from tributary_read.table.restate_swap import check_not_moved

                check_not_moved(self.state(v - 1), files, self.storage.uri)
            if replace:
                _check_replace(tuple(files), gone, self.state(v - 1))
            # Against the commit this slot follows (a lost race has just read it; commits never change).
            stamp, since = commit_time(v, previous if previous is not None else self._previous(v), wall_ms())
            commit = Commit(
                version=v,
                timestamp_ms=stamp,
                monotonic_since=since,
                files=tuple(files),
                transaction=transaction,
                operation=OP_RESTATE if restated else OP_REPLACE if replace else
                OP_EXPIRE if gone or callable(removed) else OP_APPEND,
                protocol=protocol,
                writer=writer,
                commit_id=commit_id,
                removed=gone,
                settings=self.settings,
                restated=now,
            )
            winner = self._claim(commit)
            if winner is None:
                self._maybe_checkpoint(v)
                return commit
            # Lost at v. Every commit after our view, up to the newest, must not
            # be our app's: those records would be committed twice. Reading forward
            # from the winner both checks each commit and finds the first free slot:
            # one read per commit jumped over, no existence probes (on an object
            # store each request is a round trip, and under contention they add up).
            _check_other_app(transaction, winner, claims)
            previous = winner
            while (c := self.read_commit(previous.version + 1)) is not None:
                _check_other_app(transaction, c, claims)
                previous = c
            v, losses = previous.version + 1, losses + 1
            if time.monotonic() >= deadline:
                raise CommitConflictError(
                    f"gave up after {losses} lost commit races in {timeout_s:.0f} s (newest version {v - 1})"
                )
            backoff(min(losses, 8), base=0.001, cap=0.25)

    def _previous(self, v: int) -> Commit | None:
        """Commit ``v - 1``, or None when it is missing or unreadable (the new commit then starts a new run).

        Only a gap or a corrupt file makes it so (log retention keeps the newest
        checkpoint's commit and every later one); ``verify`` reports those.
        """
        if v <= 1:
            return None
        try:
            return self.read_commit(v - 1)
        except SettingsDriftError:
            raise  # not an unreadable commit: this writer's table.json is not the table's
        except (ManifestCorruptError, StorageError):
            return None

    def _claim(self, commit: Commit) -> Commit | None:
        """Create ``commit``'s slot; None when our commit is there, else the winner.

        Whenever the create does not plainly succeed (it answers "exists", or
        raises after the request may have reached the store), the slot is read:
        our ``commit_id`` there is success, whatever the create said. An empty or
        unreadable slot is retried with the same bytes, which is idempotent: it
        either lands or finds ours. Only then is the outcome declared unknown.
        The document store only creates; recognising our own commit is the log's.
        """
        data = commit.encode()
        doubt: BaseException | None = None
        for attempt in range(SLOT_ATTEMPTS):
            if attempt:
                backoff(attempt, base=0.05, cap=2.0, floor=0.5)
            try:
                if self._commits.create(commit.version, data):
                    return None
            except Exception as e:  # noqa: BLE001 - any failure after sending is "maybe landed"
                doubt = e
            try:
                there = self.read_commit(commit.version)
            except (StorageError, OSError) as e:
                doubt = e
                continue
            if there is not None:
                return None if there.commit_id == commit.commit_id else there
        why = f": {_first_line(doubt)}" if doubt else ""
        raise CommitStateUnknownError(
            f"commit {commit.version} of {self.storage.uri} may or may not have landed{why}; its files are kept. "
            f"Run again (offsets are re-read from the log) or look with `trib log`"
        )

    def _maybe_checkpoint(self, version: int) -> None:
        if version % self.checkpoint_interval:
            return
        try:
            self._checkpoints.create(version, self.state(version).to_json())
            self.storage.write(LAST_CHECKPOINT, json.dumps({"version": version}).encode())
        except Exception:  # noqa: BLE001
            # A checkpoint is an optimisation; the commit itself already landed and
            # must be reported as such, whatever went wrong here.
            pass
