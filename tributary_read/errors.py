"""One exception root; each subclass is named for what the caller should do next.

The CLI maps ``exit_code`` straight to the process exit status, so a scheduler can
tell "retry later" (conflict, storage) from "fix the input" (invalid) from
"someone must look at the table" (corrupt).
"""

from __future__ import annotations


class TributaryError(Exception):
    """Root of every error trib raises on purpose.

    The library is called from Python, the CLI and Spark, so a message names
    each argument in words (``the schedule time``), never by one front end's
    spelling. ``params`` maps each parameter a message names to those words, so
    a front end can put its own names in their place (:meth:`reword`; ``trib``
    shows ``--schedule-time``).
    """

    exit_code = 1

    def __init__(self, *args, **params: str):
        super().__init__(*args)
        self.params = params

    def reword(self, names) -> str:
        """The message with each parameter's words replaced by ``names[param]`` where given."""
        msg = str(self)
        for param, words in self.params.items():
            if param in names:
                msg = msg.replace(words, names[param], 1)
        return msg


def causes(e: BaseException, limit: int = 6):
    """``e``, then what it wraps, at most ``limit`` in all: a client library's own ``inner`` (Thrift's
    transport errors carry the socket's there), else ``__cause__``, else ``__context__``.

    Thrift, SASL and pyhive each wrap the one failure that says what happened (a timeout, a refused
    login); whoever asks what it was walks this chain.
    """
    cur: BaseException | None = e
    for _ in range(limit):
        if cur is None:
            return
        yield cur
        inner = getattr(cur, "inner", None)
        cur = inner if isinstance(inner, BaseException) else (cur.__cause__ or cur.__context__)


class InvalidInputError(TributaryError, ValueError):
    """The caller passed something malformed: fix the argument and run again."""

    exit_code = 3


class SqlStatementError(InvalidInputError):
    """A statement of a SQL script failed (``trib sql``): the message names it and its line; fix the script."""


class InvalidLayoutError(InvalidInputError):
    """A layout or partition template cannot be parsed or does not fit a path."""


class BadRecordError(InvalidInputError):
    """A source record cannot be placed (e.g. its time field is missing)."""


class TimeOutOfRangeError(BadRecordError):
    """A time has no partition: the layout cannot name its directory, or the end
    of its period, in the table's zone (years 1..9999). The one "cannot be placed"
    class for times that parsed: ``Layout.for_time`` raises it, so ingest sends
    such a record to the dead-letter file like any other bad record.
    """


class ImplausibleTimeError(BadRecordError):
    """An integer event time, taken in its unit, is before 2000-01-01 or more than a
    day ahead of the clock (see :mod:`tributary_read.table.timeunit`): a bad record
    (ingest dead-letters it per its policy; a Spark write refuses the run). Historical
    data: declare the unit and turn the check off (``allow_any_time``).
    """


class TimeUnitError(InvalidInputError):
    """Integer event times with no declared unit do not fit milliseconds but fit
    another unit: the job, not the record, is wrong, so the run is refused (ingest
    too: dead-lettering every record would leave the source behind with exit 0).
    Declare the unit the message suggests.
    """


class SchemaConflictError(BadRecordError):
    """A record has a value its file's column cannot hold without loss (a string
    in a number column, an integer beyond 64 bits): see docs/parquet.md. Raised
    by ``TableWriter.write`` before the record is buffered, so ingest dead-letters
    it with its offset and goes on, like a record with a bad time.
    """


class SchemaChangeError(InvalidInputError):
    """A run's output columns differ from the table's recorded schema in a way no reader of the whole
    table can merge (a changed type, a dropped column, a new column that is not nullable): refused
    before anything is written. Fix the SQL, or say ``schema_change = "allow"`` in the job's [output]."""


class SourceMismatchError(InvalidInputError):
    """The source file is not the one its committed offsets were read from (a
    different file under the same name, or one truncated, rotated or replaced):
    give it another source name to ingest it as a new source.
    """


class CheckpointMismatchError(SourceMismatchError):
    """The table's last micro-batch of this query name was committed by another streaming query (another
    checkpoint, or a second query of the same name running now): restart from that checkpoint, stop the
    other query, or accept the new checkpoint with ``restart=True`` knowing where its source starts."""


class StreamingQueryFailedError(TributaryError):
    """The streaming query stopped on an error of Spark's (a source it cannot read, a failed task past its
    retries): what the batch committed stands, and a restart from the checkpoint runs the failed batch again."""


class NoSuchTableError(TributaryError):
    """ROOT holds no trib table: create it first or check the path/alias."""

    exit_code = 4


class TableExistsError(TributaryError):
    """``table create`` on a ROOT that already has a table."""

    exit_code = 4


class CommitConflictError(TributaryError):
    """Another writer committed first in a way that cannot be merged: re-read and retry."""

    exit_code = 5


class AlreadyCommittedError(CommitConflictError):
    """The transaction is already in the log (a re-run of the same schedule time):
    nothing to redo; go on with the steps after the commit. ``version`` is the
    commit that holds it. The refused copy's files are orphans for ``trib clean``.
    """

    def __init__(self, *args, version: int | None = None, **params: str):
        super().__init__(*args, **params)
        self.version = version


class FencedError(CommitConflictError):
    """Another process committed offsets of partitions this writer also read (two Kafka workers
    claim the same partition): this writer's batch is not committed. Stop one of them; a rerun
    resumes from the table. ``version``: the other process's commit."""

    exit_code = 16

    def __init__(self, *args, version: int | None = None, **params: str):
        super().__init__(*args, **params)
        self.version = version


class ConcurrentRunError(TributaryError):
    """Another run of the same job holds its lock: wait for it to end (or check it is not stuck), then rerun."""

    exit_code = 5


class CommitStateUnknownError(TributaryError):
    """A commit was attempted but its outcome could not be learned (a lost reply,
    a timeout, storage that stopped answering). It may have landed. Do not retry
    blindly and do not delete its files: run again (ingest re-reads its offsets
    from the log) or look with ``trib log``; ``trib clean`` removes the files
    later if the commit never landed. Kept apart from CommitConflictError, as
    pyiceberg keeps CommitStateUnknownException apart from CommitFailedException.
    """

    exit_code = 12


class LogRetentionError(InvalidInputError):
    """The versions asked for are older than the log keeps (log retention removed
    their commit files; the state survives in a checkpoint): read from a newer
    version or the whole current state, or reset the consumer that fell behind.
    """


class CompactedAwayError(LogRetentionError):
    """Files a read needs were compacted and their originals cleaned: the range covers only part of a
    compacted file's sources. Read a range that covers all of them (the message names the compaction),
    or keep replaced files longer (the table's ``compact.retention``). Exit 3.
    """


class RestatedInputError(InvalidInputError):
    """A read of new data reached a restate commit: partitions recomputed whole, whose records may have
    changed. Taking its files as new data would read every record of those partitions twice; skipping it
    would miss the correction. Read the table from a job in restate mode, which recomputes what the
    partitions feed. Exit 3.
    """


class ManifestCorruptError(TributaryError):
    """A committed log file cannot be read: repair by hand, never overwrite."""

    exit_code = 6


class UnsupportedFormatVersionError(ManifestCorruptError):
    """The log was written by a newer trib: upgrade before touching it."""


class SettingsDriftError(ManifestCorruptError):
    """table.json's layout, zone, partition template or format is not what the table's commits were
    written with (an edit by hand): restore it. These never change; another layout is another table."""


class StorageError(TributaryError):
    """The file system refused or failed an operation: check permissions and retry."""

    exit_code = 7


class UnreadableInputError(StorageError):
    """A file a run planned to read is missing or cannot be read (deleted, truncated, corrupt). A consumer's
    plan stays pending, so every rerun would fail the same way: restore the file, or leave it unread with
    ``trib consumer skip ROOT NAME FILE --execute`` (the message names the exact line). Exit 7."""


class MetastoreError(TributaryError):
    """The Hive metastore or HiveServer2 failed or is unreachable."""

    exit_code = 8


class MetastoreAuthError(MetastoreError):
    """The metastore or HiveServer2 refused trib's credentials, or they could not be used: fix what the
    message names (a ticket, a keytab, a password, auth=, a TLS CA); a rerun alone does not help. Exit 8."""


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


# -- read side: consumers -------------------------------------------------------
class NoSuchConsumerError(TributaryError):
    """No consumer of that name: check the name and --state-dir, or start it with ``trib files --consumer``."""

    exit_code = 4


class NoSuchPlanError(InvalidInputError):
    """The plan id was never issued for this consumer: use the id ``trib files --consumer`` printed."""


class StalePlanError(TributaryError):
    """The plan was made on a consumer state that is no longer current: plan again and redo the run."""

    exit_code = 5


class PendingPlanError(TributaryError):
    """A different plan is pending: ack it, or drop it with ``trib consumer reset ROOT NAME --discard-plan --execute``."""

    exit_code = 5


class ConsumerStateCorruptError(TributaryError):
    """A consumer's state or plan file cannot be read: inspect it, or start over with ``trib consumer reset ROOT NAME --to-earliest --execute``."""

    exit_code = 6


class UndeliveredDataError(TributaryError):
    """A run would leave data in its scope unread and still exit 0: read it the way the message names, or
    opt out explicitly (``--allow-untracked``, ``allow_untracked = true``). Exit 13 on its own, so a
    scheduler can tell "data left behind" from every other failure."""

    exit_code = 13


class SourceGapError(UndeliveredDataError):
    """Records the run was to read next are gone from the source (a Kafka topic's retention deleted
    them before they were read). The message names the partitions and offsets; going on past them
    is an explicit choice (``--on-gap skip``), recorded in the commit."""


class UntrackedDataError(UndeliveredDataError):
    """A manifest-tracked table holds files no commit lists (other tools wrote them): track ``both``
    (``trib table set ROOT --tracking both``), or say ``--allow-untracked`` to read the manifest only."""


class BeyondHorizonError(UndeliveredDataError):
    """A pending plan made with the beyond-horizon opt-out (it takes a changed sealed partition's files as
    delivered without delivering them) was handed to a run without it: run with the opt-out
    (``--allow-beyond-horizon``, ``allow_beyond_horizon = true``), or drop the plan
    (``trib consumer reset ROOT NAME --discard-plan --execute``), after which that partition is held
    back instead (PartitionsHeldError). Exit 14."""

    exit_code = 14


class ChangedFileError(UndeliveredDataError):
    """A pending plan made with the changed-file opt-out (it takes delivered files that shrank, were
    rewritten or removed as they are, reported in ``conflicts``) was handed to a run without it: run with
    the opt-out (``--allow-changed``, ``allow_changed = true``), or drop the plan, after which their
    partitions are held back instead (PartitionsHeldError: a changed file stops its partition, never the
    run). Exit 15 on its own."""

    exit_code = 15


class PartitionsHeldError(UndeliveredDataError):
    """A consumer delivered and acked everything but some partitions, held back because a file it had
    delivered there was removed or rewritten, shrank, or grew where no byte range delivers (or, in a partition sealed by an older trib, which files
    are new cannot be told). The line names every held partition and what changed. Look at the named
    files, then ``trib consumer replay ROOT NAME --partition P --execute`` takes each as it is now
    (nothing delivered is delivered again; its files never delivered are delivered by the next run);
    ``--redeliver`` delivers a partition again, and its preview counts what that repeats. Until then
    every run delivers the rest and exits 17 again. Exit 17."""

    exit_code = 17

    def __init__(self, *args, report=None, **params: str):
        super().__init__(*args, **params)
        #: an ETL run's report (``trib etl run`` prints it before the line)
        self.report = report


# -- Hive partitions -----------------------------------------------------------
class HiveTableConflictError(MetastoreError):
    """A Hive table of that name exists and differs from what trib would create; trib never alters it."""

    exit_code = 5


class NoSuchHiveTableError(MetastoreError):
    """The Hive table does not exist: create it (EXTERNAL, partitioned by the layout's keys) or fix --hive-table."""

    exit_code = 4


class UnsafePlanError(TributaryError):
    """A partition plan exceeds a safety limit (e.g. --max-drop-fraction): check the listing, or rerun with --force."""

    exit_code = 11


__all__ = sorted(n for n, v in list(globals().items())
                 if isinstance(v, type) and issubclass(v, TributaryError)) + ["missing_extra"]
