"""The OpenLineage spec's schemas, offline (tests/data/openlineage), and a two-layer event check.

OpenLineage.json checks a facet only as a BaseFacet (``_producer``, ``_schemaURL``), so each facet is
also checked against the schema its ``_schemaURL`` names, and its key against that document.
"""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMA_DIR = Path(__file__).resolve().parent / "data" / "openlineage"
#: trib's own facets' schemas, shipped in the package (their ``_schemaURL``)
OWN_DIR = Path(__file__).resolve().parent.parent / "tributary_read" / "lineage"
SPEC_ID = "https://openlineage.io/spec/2-0-2/OpenLineage.json"


def load_registry(*roots: Path) -> tuple[Registry, dict[str, dict]]:
    docs = {}
    for p in sorted(p for root in roots for p in root.rglob("*.json")):
        doc = json.loads(p.read_text())
        docs[doc["$id"]] = doc
    reg = Registry().with_resources((i, Resource.from_contents(d, default_specification=DRAFT202012))
                                    for i, d in docs.items())
    return reg, docs


REGISTRY, DOCS = load_registry(SCHEMA_DIR, OWN_DIR)
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
