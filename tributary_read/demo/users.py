"""The demo's hourly ``count(DISTINCT user)``, computed three ways, against the exact answer.

A distinct count is the aggregate late data breaks worst: two partial counts of one hour cannot be
added (a user in both is counted twice), so the only right row is one computed from all of the hour's
files. Each cycle of :mod:`.run` computes it three ways over the same raw table:

* **naive**: ``sql/warehouse/hourly_users_naive.sql``, what a hand-rolled hourly script does: count the
  previous hour's partition once and overwrite its row. A file that lands later is never counted.
* **append**: ``trib etl run`` with a consumer input and ``[output] mode = "append"``: every file
  counted exactly once, but each run adds its own partial row per hour its new files touch.
* **restate**: the same job with ``mode = "restate"``: each run recomputes every hour its new files
  touch from all of the hour's files, and replaces the hour's row.

The exact answer is counted at the end from every raw file. An hour is *right* for a way when its
rows' users add up to the exact count: the sum is what a reader of the table gets for the hour.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tributary_read.demo.mix import Mix

#: The two trib jobs' SQL: one row per event hour of the rows they read.
SQL = ("SELECT CAST(event_time - event_time % 3600000 AS BIGINT) AS event_time,\n"
       "       count(DISTINCT user_id) AS users, count(1) AS events\n"
       "FROM raw GROUP BY 1\n")
COLUMNS = "event_time BIGINT, users BIGINT, events BIGINT"
MODES = ("append", "restate")
WAYS = ("naive", *MODES)

#: (users, events) of one row
Row = tuple[int, int]


def compare(mix: Mix, exact: Mapping[str, Row], rows: Mapping[str, Mapping[str, Sequence[Row]]]) -> dict[str, Any]:
    """Each hour of ``mix`` three ways against ``exact``: ``rows[way][dt]`` are the rows a way's table holds.

    Returns ``hours`` (per hour: ``dt``, ``exact`` and each way's rows as ``[users, events]``, the
    patterns of its late files), a summary per way (``right``, ``wrong``, ``rows``, ``wrong_hours``) and
    ``example``: the first hour with a late file where naive and append are both wrong (None if none).
    """
    late: dict[int, list[str]] = {}
    for d in mix.drops:
        if mix.late(d):
            late.setdefault(d.hour, []).append(d.pattern)
    hours: list[dict[str, Any]] = []
    summary = {way: {"right": 0, "wrong": 0, "rows": 0, "wrong_hours": []} for way in WAYS}
    for h in range(mix.hours):
        dt = mix.dt(h)
        want = exact.get(dt, (0, 0))
        entry: dict[str, Any] = {"hour": h, "dt": dt, "exact": list(want), "late_files": sorted(late.get(h, []))}
        for way in WAYS:
            got = sorted(rows.get(way, {}).get(dt, ()), reverse=True)
            entry[way] = [list(r) for r in got]
            s = summary[way]
            s["rows"] += len(got)
            if sum(u for u, _ in got) == want[0]:
                s["right"] += 1
            else:
                s["wrong"] += 1
                s["wrong_hours"].append(h)
        hours.append(entry)
    example = next((e["hour"] for e in hours if e["late_files"] and e["hour"] in summary["naive"]["wrong_hours"]
                    and e["hour"] in summary["append"]["wrong_hours"]), None)
    return {"hours": hours, **summary, "example": example}
