"""What a finished ``trib`` process means to a scheduler: success, retry later, or fail for good.

One table, read by :class:`~tributary_read.airflow.operators.TribEtlOperator` and printed in
docs/airflow.md (a test keeps the two equal). It is keyed by error class, not by exit code alone:
an exit code names a family (8: the metastore), and inside a family some failures pass with time (a
metastore restarting) while others never will (a refused password). ``trib ... --json`` names the
class in its ``{"error": {...}}`` line; without that line (a process killed, a crash before the CLI
could print) the exit code decides, by the family's own class.

No Airflow import here: the table is plain data, and the docs test reads it without Airflow.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import Enum

import tributary_read.errors as E
from tributary_read.exits import INTERRUPTED, TERMINATED, code_of, error_classes, error_codes, read_error_object


class Outcome(Enum):
    SUCCESS = "success"
    #: a plain failure: Airflow retries while the task has retries left (up_for_retry)
    RETRY = "retry"
    #: AirflowFailException: no retry, however many the task has
    FAIL = "fail"


@dataclass(frozen=True)
class Rule:
    error: type[E.TributaryError]
    outcome: Outcome
    why: str


#: Most specific first: the first rule whose class the failure's class is (a subclass of) decides.
RULES: tuple[Rule, ...] = (
    Rule(E.MetastoreAuthError, Outcome.FAIL, "credentials were refused or cannot be used: a retry sends the same"),
    Rule(E.HiveTableConflictError, Outcome.FAIL, "the Hive table differs from the job's: trib never alters it"),
    Rule(E.NoSuchHiveTableError, Outcome.FAIL, "the Hive table is missing: create it or set [hive] create"),
    Rule(E.UnreadableInputError, Outcome.FAIL, "a planned file is gone or unreadable: every rerun fails the same way"),
    Rule(E.FencedError, Outcome.FAIL, "two workers claim the same source partitions: stop one"),
    Rule(E.PendingPlanError, Outcome.FAIL, "another plan of the consumer is pending: ack or drop it"),
    Rule(E.ConcurrentRunError, Outcome.RETRY, "another run of the job holds its lock: retry after it ends"),
    Rule(E.StalePlanError, Outcome.RETRY, "the consumer moved on while planning: a rerun plans again"),
    Rule(E.CommitConflictError, Outcome.RETRY, "another writer committed first: a rerun reads the log again"),
    Rule(E.CommitStateUnknownError, Outcome.RETRY, "the commit's outcome is unknown: the rerun reads the log"),
    Rule(E.StorageError, Outcome.RETRY, "storage failed or is unreachable"),
    Rule(E.MetastoreError, Outcome.RETRY, "the metastore failed or is unreachable (the commit, if made, stays)"),
    Rule(E.InvalidInputError, Outcome.FAIL, "the job, its SQL, the interval or an argument must be fixed"),
    Rule(E.NoSuchTableError, Outcome.FAIL, "a table is missing"),
    Rule(E.ManifestCorruptError, Outcome.FAIL, "a log file is corrupt: someone must look"),
    Rule(E.VerificationError, Outcome.FAIL, "the table does not match its log"),
    Rule(E.MissingDependencyError, Outcome.FAIL, "an extra is not installed where trib runs"),
    Rule(E.PartitionsHeldError, Outcome.FAIL, "the rest is committed; partitions whose input changed are held: "
         "replay them, then clear the task (its rerun finds the commit, ends 0 and emits its asset events)"),
    Rule(E.UndeliveredDataError, Outcome.FAIL, "the run would leave data unread: choose how to read it"),
    Rule(E.TributaryError, Outcome.FAIL, "every other refusal: the message says what to do"),
)

#: Ends with no trib error class: a signal (the worker stopped the task) or an unexpected crash.
SIGNAL_WHY = "stopped by a signal (a worker restart): the rerun resumes from the log"
CRASH_WHY = "an unexpected error (exit 1): retried, as Airflow retries any failure"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    code: int
    error_class: str | None
    message: str | None
    why: str


def rule_for(cls: type) -> Rule:
    return next(r for r in RULES if issubclass(cls, r.error))


def verdict(code: int, stdout: str = "", stderr_line: str | None = None) -> Verdict:
    """How a ``trib`` process that exited with ``code`` (negative: killed by that signal) ends its task."""
    if code == 0:
        return Verdict(Outcome.SUCCESS, 0, None, None, "committed, or already committed")
    err = read_error_object(stdout) or {}
    name = err.get("class") if isinstance(err.get("class"), str) else None
    message = err.get("message") if isinstance(err.get("message"), str) else stderr_line
    cls = getattr(E, name, None) if name else None
    if isinstance(cls, type) and issubclass(cls, E.TributaryError):
        r = rule_for(cls)
        return Verdict(r.outcome, code, name, message, r.why)
    if name == "UsageError":  # click refused the command line: the operator's arguments
        return Verdict(Outcome.FAIL, code, name, message, "the command line was refused")
    if code < 0 or code in (TERMINATED, INTERRUPTED, 128 + signal.SIGKILL):
        return Verdict(Outcome.RETRY, code, None, message, SIGNAL_WHY)
    if code in error_codes():  # no class named (a driver's log, a killed CLI): the family's own rule
        cls = next((r.error for r in RULES if r.outcome is Outcome.RETRY and code_of(r.error) == code),
                   E.TributaryError)
        r = rule_for(cls)
        return Verdict(r.outcome, code, None, message, r.why)
    return Verdict(Outcome.RETRY, code, None, message, CRASH_WHY)


def table_rows() -> list[tuple[str, str, str, str]]:
    """(exit code, error class, outcome, why) per rule, then the class-less ends: docs/airflow.md's table."""
    rows = [(str(code_of(r.error)), r.error.__name__, r.outcome.value, r.why) for r in RULES[:-1]]
    last = RULES[-1]
    rest = sorted({code_of(c) for c in error_classes() if rule_for(c) is last} - {1})
    rows.append((", ".join(map(str, rest)), f"other {last.error.__name__}s", last.outcome.value, last.why))
    rows.append((f"{TERMINATED}, {INTERRUPTED}, killed", "(a signal)", Outcome.RETRY.value, SIGNAL_WHY))
    rows.append(("1", "(unexpected)", Outcome.RETRY.value, CRASH_WHY))
    return rows
