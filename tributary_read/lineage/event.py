"""OpenLineage RunEvents as plain JSON: the table is the dataset, the exact files are its subset facet.

Built without the client (its import costs about 265 ms and most runs send nothing). Every facet's
schema URL comes from :data:`FACETS`, one table, so an event names exactly the spec versions the
tests validate against (tests/data/openlineage).
"""

from __future__ import annotations

import hashlib
import posixpath
import uuid
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
PRODUCER = "https://github.com/tributary-read/tributary-read"
_BASE = "https://openlineage.io/spec/facets"

#: facet key -> (schema document, definition): the spec versions trib writes.
FACETS: dict[str, tuple[str, str]] = {
    "nominalTime": (f"{_BASE}/1-0-1/NominalTimeRunFacet.json", "NominalTimeRunFacet"),
    "errorMessage": (f"{_BASE}/1-0-1/ErrorMessageRunFacet.json", "ErrorMessageRunFacet"),
    "jobType": (f"{_BASE}/2-0-4/JobTypeJobFacet.json", "JobTypeJobFacet"),
    "symlinks": (f"{_BASE}/1-0-1/SymlinksDatasetFacet.json", "SymlinksDatasetFacet"),
    "schema": (f"{_BASE}/1-2-0/SchemaDatasetFacet.json", "SchemaDatasetFacet"),
    "dataSource": (f"{_BASE}/1-0-1/DatasourceDatasetFacet.json", "DatasourceDatasetFacet"),
    "version": (f"{_BASE}/1-0-1/DatasetVersionDatasetFacet.json", "DatasetVersionDatasetFacet"),
    "inputStatistics": (f"{_BASE}/1-0-0/InputStatisticsInputDatasetFacet.json", "InputStatisticsInputDatasetFacet"),
    "outputStatistics": (f"{_BASE}/1-0-2/OutputStatisticsOutputDatasetFacet.json",
                         "OutputStatisticsOutputDatasetFacet"),
    "subset/input": (f"{_BASE}/1-0-0/BaseSubsetDatasetFacet.json", "InputSubsetInputDatasetFacet"),
    "subset/output": (f"{_BASE}/1-0-0/BaseSubsetDatasetFacet.json", "OutputSubsetOutputDatasetFacet"),
    # trib's own: its schema is tributary_read/lineage/TributaryRestatedOutputDatasetFacet.json, in the package
    "tributary_restated": (f"{PRODUCER}/raw/main/tributary_read/lineage/TributaryRestatedOutputDatasetFacet.json",
                           "TributaryRestatedOutputDatasetFacet"),
    "tributary_backfill": (f"{PRODUCER}/raw/main/tributary_read/lineage/TributaryBackfillRunFacet.json",
                           "TributaryBackfillRunFacet"),
}
#: Above this many files, an input's subset lists its partitions instead (an event stays far below 1 MB).
MAX_LOCATIONS = 1000
_NS = uuid.UUID("6f1c1c3e-3d59-5d39-9d2b-7472696272ea")


def facet(key: str, **fields: Any) -> dict:
    doc, name = FACETS[key]
    return {"_producer": PRODUCER, "_schemaURL": f"{doc}#/$defs/{name}", **fields}


def run_id(kind: str, name: str, instant_ms: int) -> str:
    """The same run id for every try of one (job, schedule time): a UUIDv7 shape, its 48-bit time the
    schedule time (runs sort by the hour they are for), its other bits a SHA-256 of the identity.

    Not the client's ``generate_static_uuid``: its docstring reserves the right to change the scheme,
    which would give old hours new ids after an upgrade.
    """
    digest = hashlib.sha256(f"{kind}\0{name}\0{instant_ms}".encode()).digest()
    b = bytearray((instant_ms & (2**48 - 1)).to_bytes(6, "big") + digest[:10])
    b[6] = 0x70 | (b[6] & 0x0F)  # version 7
    b[8] = 0x80 | (b[8] & 0x3F)  # RFC 4122 variant
    return str(uuid.UUID(bytes=bytes(b)))


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a table at ``uri``, per the spec's naming, so that lineage from Spark, Hive
    and trib links (:func:`tributary_read.io.location.namespace_and_name`)."""
    from tributary_read.io.location import namespace_and_name

    return namespace_and_name(uri)


def iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def dataset(uri: str, *, hive_table: str | None = None, hive_namespace: str | None = None,
            version: str | None = None, columns: Sequence[tuple] | None = None) -> dict:
    """The table at ``uri``; ``columns``: (name, type, ...) as Spark names them (the schema facet)."""
    ns, name = dataset_name(uri)
    facets: dict[str, Any] = {"dataSource": facet("dataSource", name=ns, uri=uri)}
    if hive_table:
        facets["symlinks"] = facet("symlinks", identifiers=[
            {"namespace": hive_namespace or "hive", "name": hive_table, "type": "TABLE"}])
    if columns:
        facets["schema"] = facet("schema", fields=[
            {"name": c[0], "type": c[1], "ordinal_position": i} for i, c in enumerate(columns, 1)])
    if version is not None:
        facets["version"] = facet("version", datasetVersion=str(version))
    return {"namespace": ns, "name": name, "facets": facets}


def input_dataset(uri: str, files: Sequence[str], *, size: int | None = None, rows: int | None = None,
                  partitions: Mapping[str, int] | None = None, max_locations: int = MAX_LOCATIONS,
                  **kw: Any) -> dict:
    """The table as an input: the exact files read (``subset``: table-relative ``files`` become full
    URIs), or above ``max_locations`` files the directories they are in with the files read in each
    (``partitions``: directory -> files; by default the files' own directories), with statistics.

    Directories are merged into their parents until at most ``max_locations`` are left (a year's
    backfill of hourly partitions lists its days), so that an event stays far below 1 MB whatever
    the run read.
    """
    d = dataset(uri, **kw)
    base = uri.rstrip("/")

    def full(p: str) -> str:
        return p if "://" in p or p.startswith("/") else f"{base}/{p}" if p else base

    if len(files) <= max_locations:  # each a full URI: an event stands on its own
        condition: dict[str, Any] = {"type": "location", "locations": [full(f) for f in files]}
    else:
        dirs = Counter(partitions) if partitions else Counter(posixpath.dirname(f) for f in files)
        while len(dirs) > max_locations:
            up: Counter = Counter()
            for p, n in dirs.items():
                up[posixpath.dirname(p.rstrip("/"))] += n
            if len(up) == len(dirs):
                break
            dirs = up
        condition = {"type": "partition", "partitions": [
            {"identifier": full(p), "dimensions": {"files": str(n)}} for p, n in sorted(dirs.items())]}
    stats = {k: v for k, v in (("rowCount", rows), ("size", size), ("fileCount", len(files))) if v is not None}
    d["inputFacets"] = {"subset": facet("subset/input", inputCondition=condition),
                        "inputStatistics": facet("inputStatistics", **stats)}
    return d


def output_dataset(uri: str, *, version: int, files: int, rows: int, size: int | None,
                   partitions: Sequence[Mapping[str, str]] = (), restated: Sequence[Mapping[str, Any]] = (),
                   **kw: Any) -> dict:
    """``restated``: the partitions a restate commit recomputed (tributary_read/etl/restated.py), as the
    ``tributary_restated`` facet, so a lineage consumer sees which partitions were replaced and why."""
    d = dataset(uri, version=str(version), **kw)
    stats = {k: v for k, v in (("rowCount", rows), ("size", size), ("fileCount", files)) if v is not None}
    d["outputFacets"] = {"outputStatistics": facet("outputStatistics", **stats)}
    if partitions:
        d["outputFacets"]["subset"] = facet("subset/output", outputCondition={
            "type": "partition", "partitions": [{"dimensions": dict(p)} for p in partitions]})
    if restated:
        d["outputFacets"]["tributary_restated"] = facet("tributary_restated", partitions=[dict(r) for r in restated])
    return d


def table_output(table, commits: Sequence, **kw: Any) -> dict:
    """A trib ``table`` as a run's output: the version of the last of ``commits``, the data files, rows and
    bytes of them all (not dead letters), the partitions they wrote. No commits: zero statistics, no version
    (a run with nothing new). ``kw``: :func:`dataset`'s (the Hive table, the columns)."""
    from tributary_read.table.manifest import KIND_DATA

    if not commits:
        kw.pop("restated", None)
        d = dataset(table.uri, **kw)
        d["outputFacets"] = {"outputStatistics": facet("outputStatistics", rowCount=0, size=0, fileCount=0)}
        return d
    files = [f for c in commits for f in c.files if f.kind == KIND_DATA]
    dirs = sorted({posixpath.dirname(f.path) for f in files})
    parts = [p.values for p in (table.layout.try_parse(d) for d in dirs) if p is not None]
    return output_dataset(table.uri, version=commits[-1].version, files=len(files),
                          rows=sum(f.records or 0 for f in files), size=sum(f.size for f in files),
                          partitions=parts, **kw)


def run_event(event_type: str, *, run: str, namespace: str, job: str, event_ms: int,
              nominal: tuple[int, int] | None = None, inputs: Sequence[dict] = (), outputs: Sequence[dict] = (),
              error: str | None = None, facets: Mapping[str, Any] | None = None) -> dict:
    """``facets``: more facets of the run (trib's own, e.g. ``tributary_backfill``)."""
    run_facets: dict[str, Any] = dict(facets or {})
    if nominal:
        run_facets["nominalTime"] = facet("nominalTime", nominalStartTime=iso_ms(nominal[0]),
                                          nominalEndTime=iso_ms(nominal[1]))
    if error is not None:
        run_facets["errorMessage"] = facet("errorMessage", message=error, programmingLanguage="PYTHON")
    return {"eventType": event_type, "eventTime": iso_ms(event_ms), "producer": PRODUCER, "schemaURL": SPEC,
            "run": {"runId": run, "facets": run_facets},
            "job": {"namespace": namespace, "name": job,
                    "facets": {"jobType": facet("jobType", processingType="BATCH", integration="TRIBUTARY_READ",
                                                jobType="JOB")}},
            "inputs": list(inputs), "outputs": list(outputs)}
