"""A run's schedule time: the instant a scheduler names, the period it is floored to, the interval it covers.

Asked before anything else of a run (``trib etl run``, ``submit``, the Airflow operator's interval),
so it lives apart from the steps in :mod:`tributary_read.etl.run`, which re-exports it.
"""

from __future__ import annotations

from datetime import datetime

from tributary_read.errors import InvalidInputError
from tributary_read.etl.job import InputMode, InputSpec, Job
from tributary_read.etl.report import iso_z
from tributary_read.read.window import Schedule, TimeWindow


def schedule_time_ms(value: str | int | datetime, job: Job) -> tuple[int, int]:
    """(aligned, given) epoch ms: ``value`` floored to the job's period in its zone.

    ISO-8601 with an offset (``2024-01-01T05:00:00Z``, ``+02:00``) or epoch ms,
    read by the one instant parser (:mod:`tributary_read.timespec`): a time
    without an offset is refused, as in every front end. A cron job started a
    few seconds late still names its hour: the run for 05:00:07 is the run for
    05:00, one transaction per period (:meth:`Schedule.run_time`).
    """
    given = _instant_ms(value, job, "schedule_time", "schedule time")
    return Schedule(job.period_ms, tz=job.tz).run_time(given), given


def check_interval(job: Job, start: str | int | datetime, schedule_time: str | int | datetime) -> None:
    """Refuse a scheduler's data interval ``[start, schedule_time)`` unless it is exactly one of the job's
    periods ending at a boundary (:meth:`Schedule.check_interval`): a run reads the period before its
    schedule time, so any other interval would be read in part, or twice."""
    end = _instant_ms(schedule_time, job, "schedule_time", "schedule time")
    Schedule(job.period_ms, tz=job.tz).check_interval(
        _instant_ms(start, job, "interval_start", "data interval start"), end)


def _instant_ms(value: str | int | datetime, job: Job | None, param: str, what: str) -> int:
    """``value`` in epoch ms; a time without an offset is refused (``job``: its zones are named then)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInputError(f"{what} {value.isoformat()} has no UTC offset: give an aware datetime",
                                    **{param: what})
        return int(value.timestamp() * 1000)
    from datetime import timezone

    from tributary_read.read.window import _instant

    try:
        return _instant(value, job.tz if job else timezone.utc, param, what)
    except InvalidInputError:
        if job is not None:
            # The same refusal, naming the zones of the job's tables too: a table created in Asia/Shanghai
            # under a job left in UTC is the case where "06:00" means two things. Looked up on refusal only.
            _instant(value, job_zones(job), param, what)
        raise


def job_zones(job: Job) -> list:
    """The job's zone, then each input's and the output's (those that can be read; the run reports the rest)."""
    from tributary_read.etl.job_inputs import zone_of

    tables = [(i.root, i.storage_options, i.layout) for i in job.inputs]
    tables.append((job.output.root, job.output.storage_options, None))
    return [job.tz, *(z for z in (zone_of(*t) for t in tables) if z is not None)]


def window_for(job: Job, spec: InputSpec, schedule_ms: int) -> TimeWindow:
    """The window an mtime or manifest input reads in the run of ``schedule_ms``: the job's :class:`Schedule`."""
    return job.schedule(spec).window(schedule_ms)


def check_not_ahead(job: Job, schedule_ms: int, now_ms: int) -> None:
    """Refuse a run whose data cannot all be there yet.

    A run commits its schedule time once: a later rerun finds the commit and
    reads nothing more. So an mtime or manifest window that ends after now (its
    files may still arrive) would lose them for good; a consumer loses nothing
    (what arrives later is the next run's), but a time more than a period ahead
    is a typo, not a schedule.
    """
    def refuse(msg: str) -> InvalidInputError:
        return InvalidInputError(msg, schedule_time="the schedule time")

    if schedule_ms - job.period_ms > now_ms:
        raise refuse(f"the schedule time {iso_z(schedule_ms)} is more than a period ahead of the clock "
                     f"({iso_z(now_ms)})")
    for spec in job.inputs:
        if spec.mode is InputMode.CONSUMER:
            continue
        end = window_for(job, spec, schedule_ms).end_ms + 1
        if end > now_ms:
            raise refuse(f"the window of input {spec.view} ends at {iso_z(end)}, after now ({iso_z(now_ms)}): its "
                         "files may still arrive, and a committed hour is never read again; run it later "
                         "(or give the input a lag)")
