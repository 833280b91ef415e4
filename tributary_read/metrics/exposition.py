"""Samples as Prometheus sees them: the text format, node_exporter's textfile, or an HTTP endpoint.

prometheus_client is the ``[metrics]`` extra, imported here only. A custom collector reads fresh
values at every scrape, so a series never outlives what it measures (no Gauge children to forget).
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

from tributary_read.errors import missing_extra
from tributary_read.metrics.sample import FAMILIES, Kind, Sample

Collect = Callable[[], Iterable[Sample]]


def _client():
    try:
        import prometheus_client
        from prometheus_client import core
    except ImportError:
        raise missing_extra("prometheus_client", "metrics") from None
    return prometheus_client, core


def registry(collect: Collect):
    """A fresh registry holding only trib's families, each filled by ``collect()`` at every scrape."""
    client, core = _client()

    class TribCollector:
        def collect(self):
            by_family: dict[str, list[Sample]] = {}
            for s in collect():
                by_family.setdefault(s.family, []).append(s)
            for name, family in FAMILIES.items():
                samples = by_family.get(name)
                if not samples:
                    continue
                cls = core.CounterMetricFamily if family.kind is Kind.COUNTER else core.GaugeMetricFamily
                m = cls(name, family.help, labels=list(family.labels))
                for s in samples:
                    m.add_metric([s.labels[k] for k in family.labels], s.value)
                yield m

    reg = client.CollectorRegistry(auto_describe=False)
    reg.register(TribCollector())
    return reg


def text(collect: Collect) -> str:
    client, _ = _client()
    return client.generate_latest(registry(collect)).decode()


def write_textfile(directory: str, collect: Collect) -> str:
    """``DIR/trib.prom``, replaced atomically (prometheus_client writes a temporary file and renames it)."""
    client, _ = _client()
    path = os.path.join(directory, "trib.prom")
    client.write_to_textfile(path, registry(collect))
    return path


def serve(host: str, port: int, collect: Collect):
    """Serve ``/metrics`` on ``host:port`` in a background thread; returns (server, thread)."""
    client, _ = _client()
    return client.start_http_server(port, addr=host, registry=registry(collect))
