"""Events not sent yet, kept in the table they describe: ``_tributary/lineage/APP/KEY.json``.

A run writes its COMPLETE event here (all but the output's commit facts) before it commits, so that
what it read survives a kill: the commit itself keeps only counts, and a window's files cannot be
resolved again. After the commit the run sends it and deletes it; a run that finds an entry whose
transaction is committed sends it then (at least once: a kill between the send and the delete sends
it twice, with one run id and event type, which lineage backends take as the same event).
"""

from __future__ import annotations

import json
import re

from tributary_read.errors import ManifestCorruptError, StorageError

ROOT = "_tributary/lineage"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _name(part: str) -> str:
    return _SAFE.sub(lambda m: f"%{ord(m.group()):02X}", part)


class Outbox:
    def __init__(self, storage):
        self.storage = storage

    def path(self, app: str, key: str) -> str:
        return f"{ROOT}/{_name(app)}/{_name(key)}.json"

    def put(self, app: str, key: str, event: dict) -> None:
        self.storage.replace(self.path(app, key), json.dumps(event).encode())

    def get(self, app: str, key: str) -> dict | None:
        try:
            return json.loads(self.storage.read(self.path(app, key)))
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise ManifestCorruptError(f"{self.storage.uri_for(self.path(app, key))}: {e}") from None

    def keys(self, app: str) -> list[str]:
        """The keys of ``app``'s unsent events, oldest name first."""
        try:
            entries = self.storage.list(f"{ROOT}/{_name(app)}", recursive=False)
        except (FileNotFoundError, StorageError):
            return []
        names = sorted(e.path.rsplit("/", 1)[-1] for e in entries)
        return [re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), n[:-5])
                for n in names if n.endswith(".json")]

    def drop(self, app: str, key: str) -> None:
        self.storage.delete(self.path(app, key))
