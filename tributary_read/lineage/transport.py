"""Sending events: through openlineage-python's own transport, configured the client's usual way, or not at all.

With nothing configured the client would print every event to its log with a warning, so trib asks
first, with the client's own lookup order and without importing it (about 265 ms): nothing
configured, nothing imported, nothing sent. A send never fails a run: a transport error is one
warning line, and the caller keeps the event to send again (the outbox).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from tributary_read.errors import missing_extra


def configured(env: Mapping[str, str] | None = None, cwd: str | None = None) -> bool:
    """Whether openlineage-python would find a transport: ``OPENLINEAGE_DISABLED`` off, and
    ``OPENLINEAGE_URL``, an ``OPENLINEAGE__TRANSPORT__*`` variable or an ``openlineage.yml``
    (``$OPENLINEAGE_CONFIG``, the working directory, ``~/.openlineage/``)."""
    env = os.environ if env is None else env
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OPENLINEAGE_URL") or any(k.upper().startswith("OPENLINEAGE__TRANSPORT") for k in env):
        return True
    candidates = [env.get("OPENLINEAGE_CONFIG"), os.path.join(cwd or os.getcwd(), "openlineage.yml"),
                  os.path.expanduser("~/.openlineage/openlineage.yml")]
    return any(p and os.path.isfile(p) and os.access(p, os.R_OK) for p in candidates)


def error_text(e: BaseException) -> str:
    """An error in a lineage warning: its class and one line of its message (a transport's can run long)."""
    from tributary_read.exits import one_line

    return f"{type(e).__name__}: {one_line(e)[:200]}"


class Emitter:
    """Sends events through the configured transport; ``warn`` gets one line, at the first failure.

    After a failure the emitter sends nothing more: the client's HTTP transport retries each event
    (five times with back-off, a 5 s timeout each: about 9 s against a refused port, longer against one
    that never answers), and a run with three events would pay that three times for one dead endpoint.
    What is kept in an outbox goes with the next run.
    """

    def __init__(self, warn: Callable[[str], None], env: Mapping[str, str] | None = None):
        self.warn = warn
        self.enabled = configured(env)
        self.failed = False
        self._transport: Any = None  # the client's Transport, opened at the first send

    def _open(self):
        if self._transport is None:
            try:
                from openlineage.client import OpenLineageClient
            except ImportError:
                raise missing_extra("openlineage-python", "lineage") from None
            self._transport = OpenLineageClient().transport
        return self._transport

    def send(self, event: dict) -> bool:
        """True once the transport took ``event``; False (and one warning) when it did not."""
        if not self.enabled or self.failed:
            return False
        try:
            self._open().emit(event)
            return True
        except Exception as e:  # noqa: BLE001 - lineage never fails the run; the outbox sends it again
            self.failed = True
            self.warn(f"lineage: {event.get('eventType')} of {event.get('job', {}).get('name')} not sent: "
                      f"{error_text(e)} (no more events this run; kept ones are sent by the next)")
            return False
