"""Reading what a metastore answers: partition names, DESCRIBE FORMATTED rows, statistics.

Pure parsing, no connection: Spark and Hive print the same facts in different
shapes (``Key``/value rows vs ``Key:``/padded rows, ``[a=1, b=2]`` maps vs one
row per parameter), and both backends read them through these functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence
from urllib.parse import unquote

from tributary_read.errors import MetastoreError
from tributary_read.hive.model import PartitionStats

_STATS = re.compile(r"^\s*(\d+)\s+bytes(?:,\s*(\d+)\s+rows)?")


def parse_partition_name(name: str) -> dict[str, str]:
    """``dt=2024010100/hr=01`` (Hive-escaped) -> values."""
    out = {}
    for part in name.split("/"):
        k, sep, v = part.partition("=")
        if not sep:
            raise MetastoreError(f"unexpected partition name {name!r}")
        out[unquote(k)] = unquote(v)
    return out


# -- DESCRIBE FORMATTED ----------------------------------------------------------
_ALIASES = {
    "location": "location", "type": "table_type", "table type": "table_type", "provider": "provider",
    "serde library": "serde", "inputformat": "input_format", "outputformat": "output_format",
    "created time": "created", "createtime": "created", "partition statistics": "statistics",
    "statistics": "statistics", "partition parameters": "params", "table parameters": "params",
    "partition values": "values", "partition value": "values",
    # SerDe parameters (field.delim, ...): Spark prints one ``[k=v, ...]`` map,
    # Hive a header row followed by one row per parameter.
    "storage properties": "serde_params", "storage desc params": "serde_params",
    "table properties": "table_params",
}


@dataclass
class Described:
    columns: list[tuple[str, str]] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    info: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    #: Partition columns with their types, in key order.
    partition_columns: list[tuple[str, str]] = field(default_factory=list)
    #: SerDe parameters, values exactly as stored: a tab or space delimiter must survive.
    serde_params: dict[str, str] = field(default_factory=dict)
    #: Spark's ``Table Properties`` (Hive's land in ``params``).
    table_params: dict[str, str] = field(default_factory=dict)


def parse_describe(rows: Sequence[Sequence]) -> Described:
    """Parse DESCRIBE FORMATTED output from Spark (``Key``/value) or Hive (``Key:``/padded).

    Only the first value of each key after the detailed header counts: a
    partition's own Location comes before the table's.
    """
    d = Described()
    section = "columns"
    last_key = None
    for row in rows:
        raw = [("" if x is None else str(x)) for x in (list(row) + ["", ""])[:3]]
        a, b, c = (x.strip() for x in raw)
        if a.startswith("#"):
            head = a.lower()
            if "detailed" in head:
                section = "detail"
            elif "partition information" in head:
                section = "partition_keys"
            elif "storage information" in head or "statistics" in head:
                section = "other" if section == "detail" else section
            continue
        if not a and not b:
            continue
        if section == "columns" and a:
            d.columns.append((a, b))
        elif section == "partition_keys" and a:
            d.partition_keys.append(a)
            d.partition_columns.append((a, b))
        elif section in ("detail", "other"):
            if not a and b and last_key == "params":  # Hive: one row per parameter
                d.params.setdefault(b, c)
                continue
            if not a and b and last_key == "serde_params":
                # Hive pads its cells: a whitespace-only value is the delimiter itself.
                d.serde_params.setdefault(b, c or raw[2][:1])
                continue
            key = _ALIASES.get(a.rstrip(":").strip().lower())
            last_key = key
            if key == "params" and b:
                d.params.update(parse_bracket_map(b))
            elif key == "serde_params" and b and not d.serde_params:
                d.serde_params.update(parse_bracket_map(raw[1].strip("\n\r"), strip_values=False))
            elif key == "table_params" and b:
                d.table_params.update(parse_bracket_map(b))
            elif key and key not in d.info and (section == "detail" or key in ("serde", "input_format",
                                                                                "output_format")):
                d.info[key] = b
    keys = {k.lower() for k in d.partition_keys}
    d.columns = [c for c in d.columns if c[0].lower() not in keys]
    return d


def parse_bracket_map(text: str, strip_values: bool = True) -> dict[str, str]:
    """``[a=1, b=2]`` or ``{a=1, b=2}`` -> dict (Spark's rendering of a Map).

    ``strip_values=False`` keeps values as printed, for SerDe parameters whose
    value may be whitespace itself (``field.delim`` of a tab).
    """
    body = text.strip() if strip_values else text
    if body[:1] in "[{" and body[-1:] in "]}":
        body = body[1:-1]
    out = {}
    for item in body.split(", "):
        k, sep, v = item.partition("=")
        if sep:
            out[k.strip()] = v.strip() if strip_values else v
    return out


def stats_from(info: Mapping[str, str], params: Mapping[str, str]) -> PartitionStats:
    def num(v):
        try:
            return int(v)
        except (TypeError, ValueError):
            return None

    m = _STATS.match(info.get("statistics", ""))
    size = int(m.group(1)) if m else num(params.get("totalSize"))
    rows = (int(m.group(2)) if m.group(2) else None) if m else num(params.get("numRows"))
    return PartitionStats(size, rows if rows is None or rows >= 0 else None,
                          num(params.get("numFiles")), num(params.get("totalSize")))



def table_type(text: str | None) -> str | None:
    """``EXTERNAL``/``MANAGED`` from however the engine spells the table type (``EXTERNAL_TABLE``, …)."""
    if not text:
        return None
    t = text.upper()
    return "EXTERNAL" if t.startswith("EXTERNAL") else "MANAGED" if t.startswith("MANAGED") else t
