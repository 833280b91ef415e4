"""The deferrable sensor's trigger: polls trib's log off the event loop until the condition holds."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tributary_read.airflow.condition import Condition, waits_on
from tributary_read.errors import TributaryError


class TribCompletionTrigger(BaseTrigger):
    """Fires once :class:`~tributary_read.airflow.condition.Condition` holds, or fails, or ``deadline`` (epoch
    seconds) passes: the trigger ends itself at the sensor's timeout, so a triggerer (or ``airflow dags
    test``, which runs triggers inline and without a timeout) never waits past it."""

    def __init__(self, condition: dict[str, Any], poke_interval: float = 30.0, deadline: float | None = None):
        super().__init__()
        self.condition = condition
        self.poke_interval = poke_interval
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"condition": self.condition, "poke_interval": self.poke_interval, "deadline": self.deadline})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        cond = Condition(**{**self.condition, "partitions": tuple(self.condition.get("partitions") or ())})
        while True:
            try:
                met, detail = await asyncio.to_thread(cond.check)  # file reads: off the triggerer's loop
            except TributaryError as e:
                if not waits_on(e):
                    yield TriggerEvent({"status": "error", "error_class": type(e).__name__, "message": str(e)})
                    return
                self.log.warning("trib: %s (%s); polling again", e, type(e).__name__)
                met, detail = False, {}
            if met:
                yield TriggerEvent({"status": "complete", **detail})
                return
            if self.deadline is not None and time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", **detail})
                return
            wait = self.poke_interval
            if self.deadline is not None:
                wait = max(0.0, min(wait, self.deadline - time.time()))
            await asyncio.sleep(wait)
