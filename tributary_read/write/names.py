"""The names a writer gives: its id and a data file's staged (hidden) name.

Apart from :mod:`tributary_read.write.writer` so that a caller that only needs a name (the Spark
write's client side, which runs the writer in its tasks, not in itself) does not import the writer
and pyarrow's Parquet module with it: tens of milliseconds of every warm ``trib etl run``.
"""

from __future__ import annotations

import posixpath
import uuid
from datetime import datetime, timezone


def new_writer_id() -> str:
    """A writer's id: its start time (UTC, to the second, so ids sort by start) and 8 random hex digits."""
    return f"{datetime.now(timezone.utc):%Y%m%d%H%M%S}-{uuid.uuid4().hex[:8]}"


def staged_name(path: str) -> str:
    """The hidden name a data file is written under before the commit names it (the ``rename`` protocol):
    a leading dot, which Hive, Spark and trib's directory listings skip, and an ``.inprogress`` suffix."""
    d, name = posixpath.split(path)
    return posixpath.join(d, f".{name}.inprogress")
