"""Moving a consumer by hand: ``reset`` to a target, ``replay`` of one partition.

Both forget or skip data, so neither has a default: the caller names the
target, and nothing is written without ``execute`` (a preview says what would
change), the way Kafka's ``--reset-offsets`` works. A mixin of
:class:`~tributary_read.read.consumer.Consumer`, kept apart so the consumer
model stays about plan and ack.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tributary_read.choice import Choice
from tributary_read.errors import (CommitConflictError, ConsumerStateCorruptError, InvalidInputError,
                                   LogRetentionError, PartitionsHeldError)
from tributary_read.read.consumer_state import ConsumerState, Plan, skip_command
from tributary_read.read.consumer_tracking import PlanOptions, tracking_for
from tributary_read.read.ledger import apply_delta
from tributary_read.read.listing import Progress
from tributary_read.table.config import Tracking

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.errors import NoSuchConsumerError
    from tributary_read.read.resolve import Source


class ResetTarget(Choice):
    """Where ``trib consumer reset`` moves a consumer (there is no default: each forgets or skips data)."""

    EARLIEST = "earliest"
    LATEST = "latest"
    VERSION = "version"
    DISCARD_PLAN = "discard-plan"


@dataclass(frozen=True)
class ResetResult:
    """What a reset changes (``applied``: it was committed; otherwise a preview)."""

    consumer: str
    target: ResetTarget
    before: ConsumerState | None
    after: ConsumerState
    discarded_plan: str | None
    effect: str
    applied: bool

    def to_json(self) -> dict:
        return {"consumer": self.consumer, "target": str(self.target), "applied": self.applied,
                "effect": self.effect, "discarded_plan": self.discarded_plan,
                "before": self.before.summary() if self.before else None, "after": self.after.summary()}


class Moves:
    """``reset`` and ``replay``, over the consumer's numbered state files."""

    name: str
    source: Source
    external: bool

    if TYPE_CHECKING:  # the consumer's own storage of states and plans (Consumer defines them)
        from tributary_read.io.storage import Storage

        storage: Storage
        prefix: str

        def exists(self) -> bool: ...
        def _no_such(self) -> NoSuchConsumerError: ...
        def _versions(self) -> tuple[list[int], list[int]]: ...
        def current(self) -> ConsumerState | None: ...
        def _read_plan(self, base: int) -> Plan | None: ...
        def _create_state(self, v: int, state: ConsumerState) -> bool: ...
        def _prune(self, current: int) -> None: ...
        def _compute(self, state: ConsumerState | None, opts: PlanOptions, now_ms: int | None) -> Plan: ...
        def _apply(self, state: ConsumerState | None, plan: Plan, now: int, note: str | None = None
                   ) -> ConsumerState: ...

    def reset(self, target: ResetTarget | str, *, execute: bool, to_version: int | None = None,
              now_ms: int | None = None, progress: Progress | None = None) -> ResetResult:
        """Move the consumer to ``target``; with ``execute=False``, only say what would change.

        Targets (:class:`ResetTarget`): ``earliest`` forgets everything delivered
        (the next plan delivers every file again), ``latest`` takes everything
        visible now as delivered, ``version`` (manifest and both consumers)
        continues after table version ``to_version``, ``discard-plan`` keeps the
        position and drops only the pending plan. There is no default target and
        ``execute`` has no default: a reset forgets or skips data, so the caller
        names what it means, as with Kafka's ``--reset-offsets``. Applied, every
        pending plan becomes stale.
        """
        target = ResetTarget.parse(target, "reset target")
        if (to_version is not None) != (target is ResetTarget.VERSION):
            raise InvalidInputError("a version to reset to goes with the version target, and only there",
                                    to_version="a version to reset to")
        if not self.exists():
            raise self._no_such()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        states, _ = self._versions()
        cur = states[-1] if states else 0
        try:
            state = self.current()
        except ConsumerStateCorruptError:
            if target in (ResetTarget.DISCARD_PLAN, ResetTarget.LATEST):
                raise
            state = None
        pend = self._read_plan(cur)
        new, effect = self._reset_to(target, state, cur, pend, to_version, now, progress)
        if not new.created_ms:
            new = replace(new, created_ms=now)
        if execute:
            if not self._create_state(cur + 1, new):
                raise CommitConflictError(f"consumer {self.name!r} changed during the reset; look and retry")
            self._prune(cur + 1)
        return ResetResult(self.name, target, state, new, pend.plan_id if pend else None, effect, execute)

    def _reset_to(self, target: ResetTarget, state: ConsumerState | None, cur: int, pend: Plan | None,
                  to_version: int | None, now: int, progress: Progress | None) -> tuple[ConsumerState, str]:
        """The state a reset would commit, and what it means for delivery, in words."""
        keep: dict[str, Any] = dict(lookback_ms=state.lookback_ms, layout=state.layout, created_ms=state.created_ms,
                    delivered_files=state.delivered_files, delivered_bytes=state.delivered_bytes,
                    full_scan_every_ms=state.full_scan_every_ms, initial_position=state.initial_position) if state else {}
        dropped = f"; pending plan {pend.plan_id} ({_files(len(pend.files))}) is dropped" if pend else ""
        if target is ResetTarget.DISCARD_PLAN:
            note = f"discarded plan {pend.plan_id if pend else '-'}"
            new = (ConsumerState(self.name, cur + 1, self.source.uri, created_ms=now, updated_ms=now, note=note)
                   if state is None else replace(state, version=cur + 1, plan_id=None, updated_ms=now, note=note))
            return new, ("the position stays" + dropped + "; the next plan is made afresh" if pend
                         else "no plan is pending: only the state version moves")
        if target is ResetTarget.VERSION:
            assert to_version is not None
            if self.source.table is None:
                raise InvalidInputError("a version to reset to applies to manifest and both consumers only",
                                        to_version="a version to reset to")
            mode = state.mode if state is not None and state.mode else Tracking.MANIFEST
            new = tracking_for(mode, self.source, self.name).reset_to_version(state, cur + 1, to_version, now, keep)
            was = state.manifest_version if state else 0
            how = ("table versions up to it are taken as delivered" if to_version >= was else
                   f"versions {to_version + 1}..{was} are delivered again")
            return new, f"continues after table version {to_version} (it was after {was}): {how}{dropped}"
        if target is ResetTarget.LATEST:
            opts = PlanOptions(min_age_ms=0, full_scan=True, progress=progress, max_files=0)  # all of it, never capped
            try:
                plan = self._compute(state, opts, now)
            except LogRetentionError:
                # Behind the retained log: the versions it missed can only be skipped, not listed.
                if state is None or self.source.table is None:
                    raise
                at_latest = replace(state, manifest_version=self.source.table.log.latest_version())
                plan = self._compute(at_latest, opts, now)
            new = self._apply(state, plan, now, note="reset to latest")
            new = replace(new, version=cur + 1, plan_id=None, delivered_files=state.delivered_files if state else 0,
                          delivered_bytes=state.delivered_bytes if state else 0)
            return new, (f"takes everything visible now as delivered: {_files(len(plan.files))} not delivered yet "
                         f"({plan.bytes} bytes) are skipped and never delivered{dropped}")
        new = ConsumerState(self.name, cur + 1, self.source.uri, mode=state.mode if state else None,
                            updated_ms=now, note="reset to earliest", **keep)
        n = state.delivered_files if state else 0
        return new, (f"forgets everything delivered ({_files(n)} so far): the next plan delivers every file again"
                     f"{dropped}")

    def replay(self, partitions: str | list[str] | tuple[str, ...], *, execute: bool, redeliver: bool = False,
               now_ms: int | None = None) -> dict:
        """Resolve held partitions: take each as it is now, or, with ``redeliver``, deliver it again.

        Without ``redeliver`` nothing delivered is delivered again and nothing is
        left undelivered: each partition is listed now and compared with the
        files the consumer delivered there; a removed file is taken as removed, a
        rewritten one as it is now (its new bytes are not delivered: say
        ``redeliver`` for that), and files never delivered (and the new lines of
        files that grew) are left for the next plan, which delivers them once. A
        partition sealed by an older trib into a digest only, whose change cannot
        be told apart, is refused here: which of its files were delivered is not
        known. ``redeliver`` forgets what was delivered there, so the next plan
        delivers every file the partition holds; the result counts the files and
        bytes that repeats. Applied only with ``execute``; a pending plan becomes stale.
        """
        from tributary_read.read.consumer_state import replay_command
        from tributary_read.read.consumer_tracking import judge_partition

        parts = [partitions] if isinstance(partitions, str) else list(partitions)
        state = self.current()
        known = set(state.ledger) | set(state.sealed) if state is not None else set()
        wanted = list(dict.fromkeys(d for p in parts for d in _named((p or "").strip().strip("/"), known)))
        if state is not None and state.mode == "manifest":
            raise InvalidInputError(
                f"consumer {self.name!r} tracks table versions, not a listing: replay forgets a partition's "
                f"listed files, and it has none. To read the partition's committed files again: "
                f"trib files ROOT --partitions 'SPEC' (or move the consumer with trib consumer reset)",
                replay_partition="the partition")
        for d in wanted:
            if state is None or (d not in state.ledger and d not in state.sealed):
                raise InvalidInputError(
                    f"consumer {self.name!r} has delivered nothing of partition {d!r} (give the partition directory "
                    "as the error named it, e.g. 2024_01_01/02; a partition it has not seen is delivered anyway)",
                    replay_partition="the partition")
        assert state is not None
        now = int(time.time() * 1000) if now_ms is None else now_ms
        delta: dict[str, Any] = {"put": {}, "seal": {}, "drop": []}
        lines, repeats, fresh, digest_only = [], [0, 0], 0, False
        for d in wanted:
            planner, part, listed, r = judge_partition(self.source, state, self.name, d, now)
            delivered = _delivered(state, d)
            if redeliver:
                again = [f for f in listed if delivered is None or _base(f.path) in delivered]
                digest_only = digest_only or delivered is None  # an older seal: at most what it counted
                repeats[0] += len(again) if delivered is not None else min(len(again), state.sealed[d]["count"])
                repeats[1] += sum(f.size for f in again)
                fresh += len(listed) - len(again) if delivered is not None else 0
                delta["drop"].append(d)
                continue
            if r is None:
                lines.append(f"{d}: its directory is gone (the next plan forgets it)")
                continue
            if r.hold is not None:
                raise InvalidInputError(
                    f"consumer {self.name!r}: partition {d} {r.hold.changes[0]}: it cannot be taken as it is without "
                    "losing or repeating data; to see what delivering it again repeats: "
                    f"{replay_command(self.source.uri, self.name, d, self._state_dir(), redeliver=True)}",
                    replay_partition="the partition")
            entry, later = _acknowledged(planner, d, r)
            if d in planner.sealed or r.seal is not None:
                delta["seal"][d] = {**entry, "mtime_ms": None, "listed_ms": None}
            else:
                delta["put"][d] = {**entry, "mtime_ms": None, "listed_ms": None}
            took = [f"{c.path.rpartition('/')[2]} {c.reason}" for c in r.conflicts]
            lines.append(f"{d}: " + (", ".join(took) + ": taken as it is now" if took else "no change to take")
                         + (f"; the next plan delivers what it holds that was never delivered ({_files(later)})"
                            if later else ""))
            fresh += later
        ledger, sealed = apply_delta(state.ledger, state.sealed, delta)
        new = replace(state, version=state.version + 1, plan_id=None, updated_ms=now, ledger=ledger, sealed=sealed,
                      note=("replay (redelivered) " if redeliver else "replay ") + " ".join(wanted),
                      held=tuple(h for h in state.held if h.path not in wanted))
        pend = self._read_plan(state.version)
        if execute:
            if not self._create_state(new.version, new):
                raise CommitConflictError(f"consumer {self.name!r} changed during the replay; look and retry")
            self._prune(new.version)
        dropped = f"; pending plan {pend.plan_id} is dropped" if pend else ""
        if redeliver:
            which = ("every file other tools wrote there (files trib committed are tracked by table version and "
                     "are not delivered again)" if state.mode == "both" else "every file they hold")
            effect = (f"forgets what it delivered of {', '.join(wanted)}: the next plan delivers {which} then, "
                      f"repeating {'up to ' if digest_only else ''}{_files(repeats[0])} ({repeats[1]} bytes) already "
                      "delivered, and seals them "
                      f"again if they are past the lookback{dropped}")
        else:
            effect = ("nothing delivered is delivered again, nothing is left undelivered (a rewritten file's new "
                      "bytes are not delivered: a replay that redelivers the partition delivers them): "
                      + "; ".join(lines)
                      + dropped)
        return {"consumer": self.name, "partition": wanted[0], "partitions": wanted, "applied": execute,
                "version": new.version, "redeliver": redeliver, "effect": effect,
                "repeats": {"files": repeats[0], "bytes": repeats[1]}, "new_files": fresh}

    def _state_dir(self) -> str | None:
        return self.storage.uri if self.external else None

    def held_error(self, held, plan_id: str) -> PartitionsHeldError:
        """The one line for an acked plan that held partitions back: every one of them, what changed, the way out."""
        from tributary_read.read.consumer_state import replay_command

        named = "; ".join(f"{h.path} ({', '.join(h.changes)})" for h in held)
        exact = [h.path for h in held if h.exact]
        digest = [h.path for h in held if not h.exact]
        ways = []
        if exact:
            ways.append("look at the files, then take them as they are now (nothing delivered is delivered again; "
                        "files never delivered there are delivered by the next run): "
                        + replay_command(self.source.uri, self.name, exact, self._state_dir()))
        if digest:
            ways.append("which files are new cannot be told where an older trib kept only a digest; to see what "
                        "delivering them again repeats: "
                        + replay_command(self.source.uri, self.name, digest, self._state_dir(), redeliver=True))
        return PartitionsHeldError(
            f"consumer {self.name!r}: plan {plan_id} delivered everything but {len(held)} partition"
            f"{'s' * (len(held) != 1)} held back: {named}; "
            + "; ".join(ways))

    # -- skip: one planned file that cannot be read -----------------------------------------
    def _skips(self, base: int):
        """The skip documents of the plan made at state ``base``: ``skip-<base>-<n>.json``, one per skip."""
        from tributary_read.table.docstore import DocumentSeries, DocumentStore

        return DocumentStore(self.storage, DocumentSeries(self.prefix, f"skip-{base:020d}-"))

    def skipped(self, plan: Plan | None = None, *, base: int | None = None, plan_id: str | None = None
                ) -> tuple[str, ...]:
        """The files of ``plan`` (or of the plan ``plan_id`` made at state ``base``) skipped with :meth:`skip`."""
        if plan is not None:
            base, plan_id = plan.base_version, plan.plan_id
        if base is None or base < 0 or plan_id is None:
            return ()
        store = self._skips(base)
        out: list[str] = []
        for n in store.numbers():
            d = store.read(n) or {}
            if d.get("plan_id") == plan_id and isinstance(d.get("path"), str) and d["path"] not in out:
                out.append(d["path"])
        return tuple(out)

    def skip(self, path: str, *, execute: bool, now_ms: int | None = None) -> dict:
        """Leave one file of the pending plan unread: the way past a planned file that is gone or corrupt.

        The plan stays the same plan (its id, its files): a run reads its files
        but the skipped ones, commits, and acks it, so the skipped file counts as
        delivered, exactly once, like every file of an acked plan, and no later
        plan offers it again. A skip is a document of its own, created once
        (create-if-absent, the commit primitive of every store), named by the
        plan's base version, so it is durable and a second skip of the same file
        changes nothing. Applied only with ``execute``; the run that reads the
        plan records the skip in its commit (the ETL run record).
        """
        state = self.current()
        base = state.version if state else 0
        plan = self._read_plan(base)
        st = self.source.storage
        rel = _relative(path, (st.uri, getattr(st, "root", "")))
        if plan is None:
            raise InvalidInputError(f"consumer {self.name!r} has no pending plan: there is nothing to skip "
                                    f"(a file not planned yet is planned, and read, as usual)", skip_file="the file")
        if rel not in {f.path for f in plan.files}:
            eg = ", ".join(f.path for f in plan.files[:3]) + (", ..." if len(plan.files) > 3 else "")
            raise InvalidInputError(f"{rel!r} is not a file of consumer {self.name!r}'s pending plan {plan.plan_id} "
                                    f"(give the path the error named, relative to the table: {eg or 'no files'})",
                                    skip_file="the file")
        done = rel in self.skipped(plan)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        store = self._skips(base)
        if execute and not done:
            from tributary_read.table.docstore import header

            doc = {**header("consumer_skip"), "consumer": self.name, "plan_id": plan.plan_id, "path": rel,
                   "at_ms": now}
            for _ in range(20):
                if store.create(store.latest() + 1, doc):
                    break
                if rel in self.skipped(plan):  # a concurrent skip of the same file landed first
                    break
            else:
                raise CommitConflictError(f"consumer {self.name!r}: cannot record the skip of {rel}; retry")
        effect = (f"the next run reads plan {plan.plan_id} without {rel} ({_files(len(plan.files) - 1)} left) and "
                  "acks it: the file counts as delivered and is never read")
        return {"consumer": self.name, "plan_id": plan.plan_id, "path": rel, "applied": execute and not done,
                "already_skipped": done, "effect": effect, "version": base}

    def skip_command(self, path: str) -> str:
        return skip_command(self.source.uri, self.name, path, self.storage.uri if self.external else None)


def _relative(path: str, roots: tuple[str, ...]) -> str:
    """``path`` relative to the table root (a path as an error names it, or a full path or URI under the root)."""
    p = (path or "").strip()
    for base in roots:
        if base and p.startswith(base.rstrip("/") + "/"):
            return p[len(base.rstrip("/")) + 1:]
    return p.strip("/") if not p.startswith("/") else p


def _named(text: str, known: set[str]) -> list[str]:
    """The partitions one argument names: itself, or a comma-separated list (as messages print several)."""
    if text in known or "," not in text:
        return [text]
    return [p.strip().strip("/") for p in text.split(",") if p.strip()]


def _base(path: str) -> str:
    return path.rpartition("/")[2]


def _delivered(state: ConsumerState, d: str) -> set[str] | None:
    """The names of the files the consumer delivered in ``d`` and that were present then (None: not known,
    a seal an older trib wrote holds a digest only)."""
    if d in state.ledger:
        body: Any = state.ledger[d]
    else:
        seg = getattr(state.sealed, "segment", None)
        body = seg(d) if seg is not None else (state.sealed[d] if "files" in state.sealed[d] else None)
    if body is None:
        return None
    return {n for n, v in body["files"].items() if len(v) < 4 or v[3] != 0}


def _acknowledged(planner, d: str, r) -> tuple[dict, int]:
    """The ledger entry (or seal) of ``d`` after a replay takes its changes as they are, and how many of the
    files the next plan will deliver it leaves out of it (new files, and growth since delivered)."""
    from tributary_read.read.ledger import _dec, _seal

    entry = dict(r.seal if r.seal is not None else r.put if r.put is not None else {})
    if entry and "files" not in entry:  # a seal unchanged (its segment named): it stays as it is
        return {k: v for k, v in entry.items() if k not in ("mtime_ms", "listed_ms")}, 0
    if not entry:  # unchanged: the entry stays as it is
        base = planner.ledger[d] if d in planner.ledger else planner.sealed[d]
        return {k: v for k, v in base.items() if k not in ("mtime_ms", "listed_ms")}, 0
    old = planner.ledger[d] if d in planner.ledger else (planner.seal_files(d) or {"files": {}})
    files, ranges = dict(entry["files"]), dict(entry.get("ranges") or {})
    for f in r.files:  # the next plan delivers these: leave them as the ledger had them
        name = _base(f.path)
        if name in old["files"]:
            files[name] = old["files"][name]
            if name in (old.get("ranges") or {}):
                ranges[name] = old["ranges"][name]
            else:
                ranges.pop(name, None)
        else:
            files.pop(name, None)
    entry.update(files=files)
    entry.pop("ranges", None)
    if ranges:
        entry["ranges"] = ranges
    if r.seal is not None:
        present = [(n, _dec(v)[0]) for n, v in files.items() if _dec(v)[1]]
        entry.update({k: v for k, v in _seal(present, None, None).items() if k in ("count", "digest", "max_mtime_ms")})
    return entry, len(r.files)


def _files(n: int) -> str:
    return f"{n} file" + "s" * (n != 1)
