"""Which files one run reads: a durable consumer's next batch, or a window or version range.

``trib files``, an ETL input and ``read_incremental`` each describe one run's
read. They used to make the choice, and check which options go with which, each
in its own words; now each builds a :class:`ReadRequest` and calls
:func:`select`, so a job spelled in any of them reads the same files, and an
option one of them refuses the others refuse too (``tests/test_architecture.py``
keeps consumers' plans and window resolution out of the front ends).

Messages name parameters in words (``a lookback``); a front end rewords them
into its own spelling (``--lookback``) with :meth:`TributaryError.reword`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.read.fileset import FileSet, origin
from tributary_read.read.listing import DirectoryLister, Progress
from tributary_read.read.window import TimeWindow

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.read.consumer import Consumer
    from tributary_read.read.consumer_state import Plan
    from tributary_read.read.partition_filter import PartitionFilter
    from tributary_read.read.resolve import Source

#: Options only a consumer's plan takes: field -> (the parameter errors name, its words in messages).
CONSUMER_ONLY = {"lookback_ms": ("lookback", "a lookback"), "min_age_ms": ("min_age", "a minimum age"),
                 "full_scan": ("full_scan", "a full scan"),
                 "full_scan_every_ms": ("full_scan_every", "a full-scan interval"),
                 "state_dir": ("state_dir", "a state directory"), "now_ms": ("now_ms", "a clock"),
                 "owner": ("owner", "an owning job"),
                 "initial_position": ("initial_position", "an initial position"),
                 "allow_beyond_horizon": ("allow_beyond_horizon", "an opt-out for changes beyond the horizon"),
                 "allow_changed": ("allow_changed", "the changed-file opt-out"),
                 "max_files": ("max_files", "a file cap")}
#: Options a consumer's batch cannot take (its batch is whatever it has not delivered yet), likewise.
NOT_WITH_CONSUMER = {"window": ("read_window", "a time window"), "all_files": ("all_files", "all files"),
                     "since_version": ("since_version", "a since version"),
                     "until_version": ("until_version", "an until version"),
                     "partitions": ("partitions", "a partition range")}


@dataclass(frozen=True)
class ReadRequest:
    """What one run asks to read. With ``consumer``: its next batch; otherwise a window or version range.

    ``mode`` is ``trib files --mode``'s (for a consumer: how it tracks the
    table). ``allow_untracked`` delivers a manifest answer that leaves files
    other tools wrote behind (tracking.refuse_untracked). ``initial_position``
    (a consumer's first plan: ``earliest``, ``latest`` or an instant, parsed
    by consumer_state.InitialPosition) and ``allow_beyond_horizon`` (deliver a
    plan that leaves a changed sealed partition's files behind) are the
    consumer's (Consumer.plan). A request that mixes
    a consumer with a window, or gives consumer options without a consumer, is
    refused when it is made.
    """

    mode: str = "auto"
    consumer: str | None = None
    state_dir: str | None = None
    window: TimeWindow | None = None
    since_version: int | None = None
    until_version: int | None = None
    partitions: PartitionFilter | str | None = None
    lookback_ms: int | None = None
    min_age_ms: int | None = None
    full_scan: bool = False
    full_scan_every_ms: int | None = None
    now_ms: int | None = None
    parallel: int | None = None
    allow_untracked: bool = False
    #: The job and output a consumer's batch is for, ``{"job": ..., "output": ...}`` (Consumer.plan).
    owner: Mapping[str, str] | None = None
    #: Every file, on purpose: a read with no bound returns everything on every run, which an hourly
    #: job written from "the files of ROOT for this run" would reprocess each hour.
    all_files: bool = False
    initial_position: str | int | None = None
    allow_beyond_horizon: bool = False
    #: Take delivered files that changed in a way no byte range delivers as acknowledged (reported in
    #: ``conflicts``); without it their partitions are held back (tributary_read.read.ledger, ``held``).
    allow_changed: bool = False
    #: At most this many files in a consumer's batch, oldest partitions first (an integer, or ``off``/0;
    #: None: consumer_state.DEFAULT_MAX_FILES); the rest is its backlog, delivered by the next runs.
    max_files: int | str | None = None
    #: The reader recomputes whole partitions (a restate job): a restate in its range delivers the restated
    #: partitions' files and names them (``stats["restated"]``); without it such a range is refused, exit 3.
    restatements: bool = False

    def __post_init__(self) -> None:
        if self.parallel is not None and self.parallel < 1:
            raise InvalidInputError("the listing parallelism must be >= 1", parallel="the listing parallelism")
        if self.consumer is None:
            for name, (param, words) in CONSUMER_ONLY.items():
                if _given(getattr(self, name)):
                    raise InvalidInputError(f"{words} goes with a consumer", **{param: words},
                                            consumer="a consumer")
            bounded = (self.window is not None or self.since_version is not None or self.until_version is not None
                       or self.partitions is not None)
            if bounded and self.all_files:
                raise InvalidInputError("all files cannot be combined with a bound", all_files="all files")
            if not bounded and not self.all_files:
                raise InvalidInputError(
                    "a read with no bound returns every file, on every run: give a consumer, a time window, "
                    "a version range or a partition range, or ask for all files", consumer="a consumer",
                    read_window="a time window", versions="a version range", partitions="a partition range",
                    all_files="all files")
            return
        for name, (param, words) in NOT_WITH_CONSUMER.items():
            if _given(getattr(self, name)):
                raise InvalidInputError(f"{words} cannot be combined with a consumer: a consumer's batch is "
                                        "whatever it has not delivered yet", **{param: words},
                                        consumer="a consumer")


def _given(value: Any) -> bool:
    """Whether an option was set: None and an unset flag are not; 0 (``--min-age 0s``) is."""
    return value is not None and value is not False


@dataclass(frozen=True)
class Selection:
    """The files a run reads; for a consumer also the plan to ack once its output is committed."""

    fileset: FileSet
    plan: Plan | None = None
    consumer: Consumer | None = None


def select(source: Source, request: ReadRequest, *, options: Mapping[str, str] | None = None,
           progress: Progress | None = None, lister: DirectoryLister | None = None) -> Selection:
    """The exact files of ``request`` on ``source``: the one answer every front end gives.

    A consumer's plan is saved before it is returned, so a run that crashes and
    asks again gets the same plan. ``lister`` runs a window's listings
    elsewhere (Spark executors); a consumer lists only what changed since its
    last batch, here.
    """
    r = request
    if r.consumer is None:
        from tributary_read.read.resolve import resolve

        fs = resolve(source, mode=r.mode, since_version=r.since_version or 0, until_version=r.until_version,
                     window=r.window, partitions=r.partitions, parallel=r.parallel, progress=progress,
                     lister=lister, allow_untracked=r.allow_untracked,
                     restated=set() if r.restatements else None)
        return Selection(fs)
    if lister is not None:
        raise InvalidInputError("a lister cannot be combined with a consumer: its plan lists only what "
                                "changed since its last batch, here", lister="a lister", consumer="a consumer")
    from tributary_read.read.consumer import Consumer

    c = Consumer(source, r.consumer, r.state_dir, options)
    plan = c.plan(mode=r.mode, lookback_ms=r.lookback_ms, min_age_ms=r.min_age_ms, full_scan=r.full_scan,
                  now_ms=r.now_ms, progress=progress, parallel=r.parallel,
                  full_scan_every_ms=r.full_scan_every_ms, allow_untracked=r.allow_untracked, owner=r.owner,
                  initial_position=r.initial_position, allow_beyond_horizon=r.allow_beyond_horizon,
                  allow_changed=r.allow_changed, max_files=r.max_files)
    if plan.stats.get("restated") and not r.restatements:  # the plan stays pending for a reader that takes it
        from tributary_read.read.changes import refuse_restated

        raise refuse_restated(source.uri, None, plan.stats["restated"])
    return Selection(plan.fileset(origin(source.storage, source.table, source.layout)), plan, c)

