"""A trib table: its layout, its config, the manifest log and its upkeep.

The names most callers want (``Table``, ``TableConfig``, ``RollPolicy``) are
re-exported lazily so that ``import tributary_read.table.layout`` stays cheap.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "Table": "config", "TableConfig": "config", "RollPolicy": "config",
    "load_config": "config", "resolve_table": "config", "parse_size": "config",
    "Protocol": "config", "Tracking": "config", "PROPERTIES": "config",
    "Layout": "layout", "PartitionDir": "layout",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
