#!/usr/bin/env python3
"""Offline check: hand-written trib-style OpenLineage RunEvents against the spec schemas (issue 31).

Installs nothing. Needs jsonschema >= 4.18 and referencing (both in /work/main/.venv).
Usage: PYTHON ol_validate.py [SCHEMA_DIR]   (default: /work/wt-31/tests/data/openlineage)

Two layers, because OpenLineage.json alone checks facets only as BaseFacet (_producer/_schemaURL,
additionalProperties: true): a wrong `locations` type would pass it.
  1. the event against OpenLineage.json#/$defs/RunEvent;
  2. every facet against the schema its `_schemaURL` names (looked up in the registry, so an
     unknown URL is an error), plus its key against the facet document's top-level property name.
Formats are checked with a FormatChecker; the script prints which of date-time/uri/uuid it can check.
"""
from __future__ import annotations

import copy
import json
import sys
import uuid
from pathlib import Path

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMA_DIR = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/wt-31/tests/data/openlineage")
SPEC_ID = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
PRODUCER = "https://github.com/example/tributary-read/tree/0.0.0"


def load_registry(root: Path) -> tuple[Registry, dict[str, dict]]:
    docs = {}
    for p in sorted(root.rglob("*.json")):
        doc = json.loads(p.read_text())
        docs[doc["$id"]] = doc
    reg = Registry().with_resources((i, Resource.from_contents(d, default_specification=DRAFT202012))
                                    for i, d in docs.items())
    return reg, docs


REGISTRY, DOCS = load_registry(SCHEMA_DIR)
FORMATS = FormatChecker()


def validator(ref: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": ref}, registry=REGISTRY, format_checker=FORMATS)


def facet_errors(where: str, key: str, facet: dict) -> list[str]:
    url = facet.get("_schemaURL", "")
    doc_id = url.split("#", 1)[0]
    doc = DOCS.get(doc_id)
    if doc is None:
        return [f"{where}.{key}: _schemaURL {url!r} names no known schema document"]
    errs = []
    names = set(doc.get("properties", {}))
    if key not in names:
        errs.append(f"{where}.{key}: key not among {sorted(names)} declared by {doc_id}")
    # the facet itself against its fragment, and {key: facet} against the document's root
    for schema_ref, instance in ((url, facet), (doc_id, {key: facet} if key in names else {})):
        errs += [f"{where}.{key}: {e.message} (at {'/'.join(map(str, e.absolute_path))})"
                 for e in validator(schema_ref).iter_errors(instance)]
    return errs


def event_errors(ev: dict) -> list[str]:
    errs = [f"event: {e.message} (at {'/'.join(map(str, e.absolute_path))})"
            for e in validator(f"{SPEC_ID}#/$defs/RunEvent").iter_errors(ev)]
    groups = [("run.facets", ev.get("run", {}).get("facets", {})),
              ("job.facets", ev.get("job", {}).get("facets", {}))]
    for side in ("inputs", "outputs"):
        for i, ds in enumerate(ev.get(side, [])):
            groups.append((f"{side}[{i}].facets", ds.get("facets", {})))
            extra = "inputFacets" if side == "inputs" else "outputFacets"
            groups.append((f"{side}[{i}].{extra}", ds.get(extra, {})))
    for where, facets in groups:
        for key, facet in facets.items():
            errs += facet_errors(where, key, facet)
    return errs


def facet(schema: str, defname: str, /, **fields) -> dict:
    return {"_producer": PRODUCER,
            "_schemaURL": f"https://openlineage.io/spec/facets/{schema}.json#/$defs/{defname}", **fields}


def sample(event_type: str) -> dict:
    job, sched = "hourly_events", "2024-01-01T05:00:00Z"
    run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"trib:etl:{job}:{sched}"))  # stand-in; see the memo
    nominal = facet("1-0-1/NominalTimeRunFacet", "NominalTimeRunFacet",
                    nominalStartTime="2024-01-01T04:00:00Z", nominalEndTime="2024-01-01T05:00:00Z")
    ev = {
        "eventType": event_type, "eventTime": "2024-01-01T05:03:12.345Z",
        "producer": PRODUCER, "schemaURL": f"{SPEC_ID}#/$defs/RunEvent",
        "run": {"runId": run_id, "facets": {"nominalTime": nominal}},
        "job": {"namespace": "trib", "name": job, "facets": {
            "jobType": facet("2-0-4/JobTypeJobFacet", "JobTypeJobFacet",
                             processingType="BATCH", integration="TRIBUTARY_READ", jobType="JOB")}},
        "inputs": [{
            "namespace": "hdfs://nn:8020", "name": "/data/raw/events",
            "facets": {
                "version": facet("1-0-1/DatasetVersionDatasetFacet", "DatasetVersionDatasetFacet",
                                 datasetVersion="41-9f1c2ab4d3e1"),
                "dataSource": facet("1-0-1/DatasourceDatasetFacet", "DatasourceDatasetFacet",
                                    name="hdfs://nn:8020", uri="hdfs://nn:8020/data/raw/events"),
            },
            "inputFacets": {
                "subset": facet("1-0-0/BaseSubsetDatasetFacet", "InputSubsetInputDatasetFacet",
                                inputCondition={"type": "location", "locations": [
                                    "hdfs://nn:8020/data/raw/events/2024_01_01/04/a.jsonl",
                                    "hdfs://nn:8020/data/raw/events/2023_12_31/22/late.jsonl"]}),
                "inputStatistics": facet("1-0-0/InputStatisticsInputDatasetFacet",
                                         "InputStatisticsInputDatasetFacet", rowCount=334, size=81234, fileCount=2),
            },
        }],
        "outputs": [{
            "namespace": "hdfs://nn:8020", "name": "/data/dw/events_hourly",
            "facets": {
                "symlinks": facet("1-0-1/SymlinksDatasetFacet", "SymlinksDatasetFacet", identifiers=[
                    {"namespace": "hive://metastore:9083", "name": "dw.events_hourly", "type": "TABLE"}]),
                "schema": facet("1-2-0/SchemaDatasetFacet", "SchemaDatasetFacet", fields=[
                    {"name": "event_time", "type": "timestamp"}, {"name": "user", "type": "string"}]),
            },
        }],
    }
    if event_type == "COMPLETE":
        out = ev["outputs"][0]
        out["facets"]["version"] = facet("1-0-1/DatasetVersionDatasetFacet", "DatasetVersionDatasetFacet",
                                         datasetVersion="17")
        out["outputFacets"] = {
            "outputStatistics": facet("1-0-2/OutputStatisticsOutputDatasetFacet",
                                      "OutputStatisticsOutputDatasetFacet", rowCount=334, size=40960, fileCount=2),
            # the committed partitions: the spec's output subset, a PartitionSubsetCondition
            "subset": facet("1-0-0/BaseSubsetDatasetFacet", "OutputSubsetOutputDatasetFacet",
                            outputCondition={"type": "partition", "partitions": [
                                {"identifier": "2023_12_31/22", "dimensions": {"dt": "2023123122"}},
                                {"identifier": "2024_01_01/04", "dimensions": {"dt": "2024010104"}}]}),
        }
    return ev


def fail_sample() -> dict:
    ev = sample("FAIL")
    ev["run"]["facets"]["errorMessage"] = facet("1-0-1/ErrorMessageRunFacet", "ErrorMessageRunFacet",
                                                message="exit 7: unreadable input", programmingLanguage="PYTHON")
    return ev


def broken() -> list[tuple[str, dict]]:
    out = []

    def case(name, mutate):
        ev = sample("COMPLETE")
        mutate(ev)
        out.append((name, ev))

    case("runId not a UUID", lambda e: e["run"].update(runId="hourly_events@2024-01-01T05"))
    case("eventType not in enum", lambda e: e.update(eventType="DONE"))
    case("facet without _producer", lambda e: e["inputs"][0]["inputFacets"]["inputStatistics"].pop("_producer"))
    case("locations is a string", lambda e: e["inputs"][0]["inputFacets"]["subset"]["inputCondition"]
         .update(locations="a.jsonl"))
    case("rowCount is a string", lambda e: e["outputs"][0]["outputFacets"]["outputStatistics"].update(rowCount="334"))
    case("nominalStartTime not date-time", lambda e: e["run"]["facets"]["nominalTime"]
         .update(nominalStartTime="2024-01-01 05:00"))
    case("symlink without type", lambda e: e["outputs"][0]["facets"]["symlinks"]["identifiers"][0].pop("type"))
    case("subset under the key inputSubset", lambda e: e["inputs"][0]["inputFacets"].update(
        inputSubset=e["inputs"][0]["inputFacets"].pop("subset")))
    case("unknown _schemaURL", lambda e: e["run"]["facets"]["nominalTime"].update(
        _schemaURL="https://openlineage.io/spec/facets/9-9-9/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet"))
    return out


def main() -> int:
    print(f"schemas: {len(DOCS)} documents from {SCHEMA_DIR}")
    for i in sorted(DOCS):
        print(f"  {i}")
    checkable = {f: f in FORMATS.checkers for f in ("date-time", "uri", "uuid")}
    print(f"formats checked: {checkable}")
    ok = True
    for name, ev in (("START", sample("START")), ("COMPLETE", sample("COMPLETE")), ("FAIL", fail_sample())):
        errs = event_errors(ev)
        print(f"positive {name}: {'valid' if not errs else 'INVALID'} ({len(json.dumps(ev))} bytes)")
        for e in errs:
            print(f"    {e}")
        ok &= not errs
    for name, ev in broken():
        errs = event_errors(ev)
        print(f"negative {name!r}: {'rejected' if errs else 'ACCEPTED (control failed)'}"
              + (f": {errs[0][:150]}" if errs else ""))
        ok &= bool(errs)
    # sanity: the bare RunEvent schema accepts a wrongly shaped facet (why layer 2 exists)
    ev = sample("COMPLETE")
    ev["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["locations"] = "a.jsonl"
    layer1 = list(validator(f"{SPEC_ID}#/$defs/RunEvent").iter_errors(ev))
    print(f"note: OpenLineage.json alone {'accepts' if not layer1 else 'rejects'} a string `locations`")
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
