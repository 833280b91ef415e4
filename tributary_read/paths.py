"""Where trib keeps what belongs to this machine's user and to no table: its state directory.

``$XDG_STATE_HOME/trib`` (default ``~/.local/state/trib``), the XDG base-directory rule for state that
outlives a run but is not worth backing up: the ETL's locks on remote tables, the embedded Spark
metastore, the default Iceberg catalog. One owner, so every command finds the same place.
"""

from __future__ import annotations

import os


def state_dir(*parts: str) -> str:
    """``$XDG_STATE_HOME/trib/PARTS`` (default ``~/.local/state/trib/PARTS``); not created here."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "trib", *parts)
