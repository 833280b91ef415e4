"""Every sample of a set of tables: each table, then each of its consumers (issue 31's ``trib metrics``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from tributary_read.errors import TributaryError
from tributary_read.metrics.probe import consumer_samples, etl_samples, table_samples
from tributary_read.metrics.sample import Sample


@dataclass
class Reading:
    samples: list[Sample] = field(default_factory=list)
    #: root -> the error that kept it from being read (the others are read all the same)
    errors: dict[str, TributaryError] = field(default_factory=dict)


def read_tables(tables: Sequence[tuple[str, Mapping[str, str] | None]], state_dirs: Sequence[str] = (),
                now_ms: int | None = None, listing: bool = False) -> Reading:
    """``tables``: (root, storage options) pairs; ``state_dirs``: where consumers kept outside their
    tables live (those of other tables there are left out); ``listing``: list the tables of listing
    consumers to count their pending files (each such consumer costs a listing)."""
    from tributary_read.read.consumer import consumers_of
    from tributary_read.read.resolve import Source
    from tributary_read.table.config import Table

    now = now_ms if now_ms is not None else int(time.time() * 1000)
    out = Reading()
    for root, options in tables:
        try:
            table = Table.load(root, options)
            out.samples += table_samples(table)
            out.samples += etl_samples(table)
            src = Source.of(root, options)
            consumers = consumers_of(src, None, options)
            for d in state_dirs:
                consumers += [c for c in consumers_of(src, d, options) if c.exists()]
        except TributaryError as e:
            out.errors[root] = e
            continue
        for c in consumers:
            try:
                out.samples += consumer_samples(table, c, lambda: now, listing)
            except TributaryError as e:  # one unreadable consumer (or another table's, in a state dir)
                out.errors[f"{root} consumer {c.name}"] = e
    out.samples.append(Sample("trib_metrics_generated_timestamp_seconds", {}, now / 1000))
    return out
