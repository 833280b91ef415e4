"""How a scan runs its many directory listings: how many at once, in what order they come back.

A listing is mostly waiting (a stat, a LIST request) and releases the GIL, so
listings overlap in threads; their results come back in the order asked, so a
scan's answer does not depend on which finished first. A streaming scan hands
each result on before the next is needed, so only a window of listings runs
ahead of it, never the whole table's.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Any, Callable, Iterator

#: Called with (items done, total or None).
Progress = Callable[[int, "int | None"], None]


def fan_out(fn, items: list, parallel: int, progress: Progress | None, done: list[Any]) -> Iterator:
    """Yield fn(item) for each item, in order, concurrently when parallel > 1.

    At most ``2 * parallel`` results run ahead of the caller. ``done`` is
    ``[items done, total or None]``, advanced as results are taken.
    """
    for r in (map(fn, items) if parallel <= 1 or len(items) <= 1 else _ahead(fn, items, parallel)):
        yield r
        done[0] += 1
        if progress:
            progress(done[0], done[1])


def _ahead(fn, items: list, parallel: int) -> Iterator:
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor  # here: it imports logging, ~5 ms of every start

    todo = iter(items)
    with ThreadPoolExecutor(max_workers=min(parallel, len(items))) as pool:
        ahead = deque(pool.submit(fn, it) for _, it in zip(range(2 * parallel), todo))
        while ahead:
            r = ahead.popleft().result()
            ahead.extend(pool.submit(fn, it) for _, it in zip(range(1), todo))
            yield r


@contextmanager
def gc_paused():
    """No cyclic garbage collection while a listing makes its 10^5 entries.

    They hold no cycles, but every 700 allocations the collector runs, and as
    they pile up into the older generations it keeps re-walking all of them:
    measured, 10-20% of a listing's CPU time. Collection resumes afterwards;
    nested and concurrent pauses leave it to the outermost one.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
