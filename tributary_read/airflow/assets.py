"""Airflow assets for trib tables: ``trib://`` URIs, and the partition keys of a run's commit.

A table's asset URI is its root behind ``trib://``: ``/data/events`` is ``trib:///data/events``,
``s3://bucket/events`` is ``trib://s3/bucket/events``. The operator emits partitioned events only on
outlets that name the run's output table this way, so an outlet that names another table is an error,
never a silent "no events".
"""

from __future__ import annotations

import posixpath
from typing import Any, Mapping

SCHEME = "trib"


def table_uri(root: str) -> str:
    """``trib://…`` for the table at ``root`` (a local path, ``file://`` or a storage URI)."""
    from tributary_read.io.location import local_path

    local = local_path(root)
    if local is not None:
        return f"{SCHEME}://{posixpath.normpath(posixpath.abspath(local))}"
    scheme, rest = root.split("://", 1)
    return f"{SCHEME}://{scheme}/{rest.rstrip('/')}"


def root_of(uri: str) -> str | None:
    """The table root a ``trib://`` URI names (None: not a trib URI). Airflow normalises
    ``trib:///data/events`` to ``trib:/data/events``; both name ``/data/events``."""
    if not uri.startswith(f"{SCHEME}:"):
        return None
    rest = uri[len(SCHEME) + 1:]
    if rest.startswith("///") or (rest.startswith("/") and not rest.startswith("//")):
        return posixpath.normpath("/" + rest.lstrip("/"))
    scheme, _, path = rest[2:].partition("/")
    return f"{scheme}://{path.rstrip('/')}"


def table_asset(root: str, **kwargs):
    """An Airflow ``Asset`` for the trib table at ``root`` (its ``trib://`` URI)."""
    from airflow.sdk import Asset

    return Asset(table_uri(root), **kwargs)


def partition_key(name: str) -> str:
    """An asset event's ``partition_key`` for a Hive partition name: the value for one key
    (``dt=2024010105`` -> ``2024010105``), the whole name for several (``dt=20240101/hr=05``)."""
    parts = name.split("/")
    return parts[0].split("=", 1)[1] if len(parts) == 1 and "=" in parts[0] else name


def same_table(root_a: str, root_b: str) -> bool:
    return table_uri(root_a) == table_uri(root_b)


def asset_event(report: Mapping[str, Any], storage_options: Mapping[str, str] | None = None
                ) -> tuple[dict[str, Any], list[str]]:
    """The ``extra`` and the partition keys of the asset event for a run's JSON ``report`` (its XCom).

    ``extra``: the commit the event stands for (``job``, ``schedule_time``, ``version``) and, when the run
    was a restate job's and recomputed partitions, ``restated``: each as the report's ``output.restated``
    names it (tributary_read/etl/restated.py), with its ``partition_key``, so a downstream DAG can rerun
    exactly those (their records changed; an emptied one is among the keys too). The input files are left
    to the report: the extra stays small in Airflow's database. Keys: one per output partition the commit
    wrote, its Hive partition value (``2024_01_01/05`` -> ``2024010105``), as the table's layout names it.
    """
    out = report.get("output") or {}
    restated = out.get("restated") or ()
    extra: dict[str, Any] = {"job": report.get("job"), "schedule_time": report.get("schedule_time"),
                             "version": report.get("version")}
    directories = [*(out.get("partitions") or ()), *(r["partition"] for r in restated)]
    if not directories:
        return extra, []
    from tributary_read.table.config import Table

    layout = Table.load(str(out.get("table")), storage_options).layout

    def key(d: str) -> str:
        p = layout.try_parse(d)
        return partition_key(p.spec) if p is not None else d

    if restated:
        extra["restated"] = [{"partition_key": key(r["partition"]), "partition": r["partition"],
                              "records_before": r["records_before"], "records_after": r["records_after"],
                              "cause": r["cause"]} for r in restated]
    return extra, sorted({key(d) for d in directories})
