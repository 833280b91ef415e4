"""``TribEtlOperator``: ``trib etl run`` (or ``submit``) for the task's data interval, in its own process group.

Why a subprocess: the worker's venv needs neither pyspark nor Java, and a worker that stops the task
(SIGTERM, then Airflow calls :meth:`on_kill`) reaches trib and its Spark driver through one process
group, so no driver outlives the task and races its retry. The retry is safe because the run is
idempotent per (job, schedule time): the commit is the only point of no return, and a rerun that finds
it skips to the Hive sync and the acks (docs/etl.md). How each exit ends the task is
:mod:`tributary_read.airflow.outcome`'s table.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from typing import Any, Mapping, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from tributary_read.airflow.assets import asset_event, root_of, same_table
from tributary_read.airflow.outcome import Outcome, verdict
from tributary_read.processes import group_pids, reap_group


class TribEtlOperator(BaseOperator):
    """Run trib's ETL job ``job`` (a JOB.toml path) for the task's data interval.

    :param job: the job file, as ``trib etl run`` takes it (templated).
    :param submit: run ``trib etl submit --run`` (spark-submit to the job's cluster) instead of a local run.
    :param trib_bin: the ``trib`` executable (default: the one on PATH).
    :param trib_args: options before the command (``["--config", "trib.toml"]``, ``["--principal", ...]``).
    :param env: variables added to the worker's environment for trib.
    :param kill_grace: seconds between SIGTERM and SIGKILL of trib's process group on kill.
    :param storage_options: the output table's storage options, to read its layout for the asset events.

    The schedule time is the interval's end and the interval must be exactly one of the job's periods
    (``trib etl run --interval-start``): schedule with ``CronDataIntervalTimetable``. The run's JSON report
    is the XCom. Outlets that are trib tables (:func:`~tributary_read.airflow.assets.table_asset`) get one
    partition key per output partition the run committed; a restate job's run marks the partitions it
    recomputed in the event's ``extra["restated"]`` (:func:`~tributary_read.airflow.assets.asset_event`).
    """

    template_fields: Sequence[str] = ("job", "trib_args", "env")
    ui_color = "#d6eaf8"

    def __init__(self, *, job: str, submit: bool = False, trib_bin: str | None = None,
                 trib_args: Sequence[str] = (), env: Mapping[str, str] | None = None, cwd: str | None = None,
                 full_sync: bool = False, kill_grace: float = 30.0, storage_options: Mapping[str, str] | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.job = job
        self.submit = submit
        self.trib_bin = trib_bin
        self.trib_args = list(trib_args)
        self.env = dict(env or {})
        self.cwd = cwd
        self.full_sync = full_sync
        self.kill_grace = kill_grace
        self.storage_options = dict(storage_options) if storage_options else None
        self._proc: subprocess.Popen | None = None

    # -- the command ------------------------------------------------------------------
    def command(self, start, end) -> list[str]:
        trib = self.trib_bin or shutil.which("trib")
        if not trib:
            raise AirflowFailException("trib: no trib executable on PATH: install tributary-read where the task "
                                       "runs, or give trib_bin")
        argv = [trib, *self.trib_args, "etl", "submit" if self.submit else "run", str(self.job),
                "--schedule-time", _iso(end), "--interval-start", _iso(start), "--json"]
        if self.submit:
            argv.append("--run")
        elif self.full_sync:
            argv.append("--full-sync")
        return argv

    def execute(self, context) -> Any:
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None:
            raise AirflowFailException("trib: this DAG run has no data interval: schedule the DAG with "
                                       "CronDataIntervalTimetable (a run covers the interval before its end)")
        argv = self.command(start, end)
        self.log.info("trib: %s", " ".join(argv))
        code, out, last = self._run(argv)
        v = verdict(code, out, last)
        if v.outcome is Outcome.SUCCESS:
            report = json.loads(out)
            what = "already committed" if report.get("already_committed") else "committed"
            out_ = report.get("output") or {}
            self.log.info("trib: job %s @ %s %s as version %s: %s records in %d partitions of %s%s",
                          report.get("job"), report.get("schedule_time"), what, report.get("version"),
                          out_.get("records"), len(out_.get("partitions") or ()), out_.get("table"),
                          " (nothing redone: the Hive sync and the acks ran again)"
                          if report.get("already_committed") else "")
            self._emit(context, report)
            return report
        msg = f"trib exited {code}" + (f" ({v.error_class})" if v.error_class else "") + \
            f": {v.message or 'no message'}; {v.why}"
        if v.outcome is Outcome.FAIL:
            raise AirflowFailException(msg + " (no retry)")
        raise AirflowException(msg + " (retried)")

    def _run(self, argv: list[str]) -> tuple[int, str, str | None]:
        """Run trib in a new session (its own process group); its stderr goes to the task log as it comes."""
        env = {**os.environ, **self.env}
        proc = self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                             cwd=self.cwd, start_new_session=True, text=True, errors="replace")
        last: list[str] = []

        def pump():
            assert proc.stderr is not None
            for line in proc.stderr:
                line = line.rstrip("\n")
                if line:
                    self.log.info("%s", line)
                    if line.startswith("trib: "):
                        last[:] = [line]

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        assert proc.stdout is not None
        out = proc.stdout.read()
        code = proc.wait()
        t.join(10)
        self._reap(proc.pid, 10.0)  # a JVM still shutting down after trib's end
        return code, out, (last[0] if last else None)

    # -- kill -------------------------------------------------------------------------
    def on_kill(self) -> None:
        """SIGTERM to trib's process group (trib ends with one line and 143; its Spark JVM goes with it),
        SIGKILL after ``kill_grace`` to whatever is left. Nothing of the run outlives the task."""
        proc = self._proc
        if proc is None or proc.poll() is not None and not group_pids(proc.pid):
            return
        self.log.info("trib: stopping the run (process group %d)", proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        self._reap(proc.pid, self.kill_grace)

    def _reap(self, pgid: int, grace: float) -> None:
        left = reap_group(pgid, grace)
        if left:
            self.log.warning("trib: process group %d still ran after %.0f s (pids %s): killed", pgid, grace, left)

    # -- asset events -----------------------------------------------------------------
    def _emit(self, context, report: dict) -> None:
        out = report.get("output") or {}
        trib_outlets = [a for a in (self.outlets or []) if root_of(getattr(a, "uri", "") or "")]
        if not trib_outlets:
            return
        extra, keys = asset_event(report, self.storage_options)
        events = context["outlet_events"]
        for asset in trib_outlets:
            root = root_of(asset.uri)
            if not same_table(root, str(out.get("table"))):
                raise AirflowFailException(f"trib: outlet {asset.uri} is not the job's output table "
                                           f"{out.get('table')}: no event is emitted for another table")
            # What the event stands for, in the output's log: the commit a reader can go back to, and the
            # partitions a restate recomputed.
            events[asset].extra.update(extra)
            if keys:
                events[asset].add_partitions(keys)
            self.log.info("trib: asset %s: partitions %s", asset.uri, ", ".join(keys) or "(none: an empty run)")


def _iso(t) -> str:
    return t.isoformat() if hasattr(t, "isoformat") else str(t)
