"""Airflow assets for trib tables: ``trib://`` URIs, and the partition keys of a run's commit.

A table's asset URI is its root behind ``trib://``: ``/data/events`` is ``trib:///data/events``,
``s3://bucket/events`` is ``trib://s3/bucket/events``. The operator emits partitioned events only on
outlets that name the run's output table this way, so an outlet that names another table is an error,
never a silent "no events".
"""

from __future__ import annotations

import posixpath

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
