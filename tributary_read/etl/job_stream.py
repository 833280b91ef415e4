"""A job file's ``[stream]`` section: the streaming input of ``trib etl stream`` (docs/streaming.md)."""

from __future__ import annotations

import re
from typing import Any

from tributary_read.errors import InvalidInputError
from tributary_read.etl.spec import _STREAM_KEYS, STREAM_FORMATS, StreamSource, StreamSpec


def parse_stream(parser, x: Any) -> StreamSpec:
    """``[stream]`` of a job file; ``parser``: the job file's parser (its helpers and messages)."""
    d = parser.table_of(x, "stream")
    parser.check_keys(d, _STREAM_KEYS, "stream")
    raw = parser.string(d, "source", "stream", required=True)
    try:
        source = StreamSource.parse(raw, "stream.source")
    except InvalidInputError as e:
        raise parser.fail(str(e)) from None
    view = parser.string(d, "view", "stream") or "stream"
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", view):
        raise parser.fail(f"stream.view {view!r} must be a SQL identifier")
    checkpoint = parser.string(d, "checkpoint", "stream", required=True)
    trigger = d.get("trigger")
    now = trigger == "available-now"
    trigger_ms = None if trigger is None or now else parser.duration(d, "trigger", "stream")
    path, fmt, schema = (parser.string(d, k, "stream") for k in ("path", "format", "schema"))
    most = d.get("max_files_per_trigger")
    if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
        raise parser.fail(f"stream.max_files_per_trigger must be a whole number >= 1, not {most!r}")
    if source is StreamSource.FILES:
        for key, value in (("path", path), ("format", fmt), ("schema", schema)):
            if value is None:
                raise parser.fail(f"[stream] source = \"files\" needs {key!r}"
                                + (" (a stream cannot infer its columns: DDL such as 'id BIGINT, ts TIMESTAMP')"
                                   if key == "schema" else ""))
        if fmt not in STREAM_FORMATS:
            raise parser.fail(f"stream.format {fmt!r}: choose {', '.join(STREAM_FORMATS)}")
    else:
        extra = [k for k, v in (("path", path), ("format", fmt), ("max_files_per_trigger", most)) if v is not None]
        if extra:
            raise parser.fail(f"stream.{extra[0]} is for source = \"files\", not {str(source)!r}")
    options = parser.str_map(d.get("options", {}), "stream.options")
    return StreamSpec(source, parser.path_of(checkpoint), view, trigger_ms, now,
                      parser.path_of(path) if path else None, fmt, schema, most, options)
