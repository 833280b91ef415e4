"""Every sample of a set of tables: each table, then each of its consumers (issue 31's ``trib metrics``).

A ROOT that is a plain directory (no ``_tributary/table.json``: the most common ETL input) has no log
to sample, only the listing consumers that read it: their state under ``ROOT/_tributary/consumers``
or in a ``--state-dir``. Those are sampled like a table's, with the same labels and families.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from tributary_read.errors import InvalidInputError, NoSuchTableError, TributaryError
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

    now = now_ms if now_ms is not None else int(time.time() * 1000)
    out = Reading()
    for root, options in tables:
        try:
            src = Source.open(root, options)  # a trib table, or a plain directory (a missing one: exit 4)
            table = src.table
            if table is not None:
                out.samples += table_samples(table)
                out.samples += etl_samples(table)
            consumers = consumers_of(src, None, options)
            for d in state_dirs:
                consumers += [c for c in consumers_of(src, d, options) if c.exists() and not _anothers(c)]
            if table is None and not consumers:
                where = (" or in the state directories given" if state_dirs
                         else " (for a consumer whose state is kept elsewhere, give its state directory)")
                raise NoSuchTableError(f"no trib table at {src.uri}, and no consumer of it under "
                                       f"_tributary/consumers{where}", state_dir="its state directory")
        except TributaryError as e:
            out.errors[root] = e
            continue
        for c in consumers:
            try:
                out.samples += consumer_samples(src, c, lambda: now, listing)
            except TributaryError as e:  # one unreadable consumer
                out.errors[f"{root} consumer {c.name}"] = e
    out.samples.append(Sample("trib_metrics_generated_timestamp_seconds", {}, now / 1000))
    return out


def _anothers(consumer) -> bool:
    """A consumer in a state directory that reads another table (its state or plan names it): left out.

    One state directory often keeps the consumers of several inputs of a job; each ROOT shows its own.
    """
    try:
        consumer.current()  # refuses a state recorded for another table
    except InvalidInputError:
        return True
    plan = consumer.pending()
    return plan is not None and plan.table != consumer.source.uri
