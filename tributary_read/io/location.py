"""Partition locations as a metastore stores them: checked, and compared as Hadoop spells them.

A location is a URI string the engine resolves (``hdfs://nn:8020/x``,
``s3a://b/x``, ``file:/x``); trib never opens it, it only renders it into DDL
and compares it with what the metastore reports. So the check is about what is
safe to render, and the comparison forgives spellings Hadoop treats as one.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlparse

from tributary_read.errors import InvalidInputError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_location(location: str) -> str:
    """``location`` itself, if it is a URI with a scheme and no control characters.

    A one-letter scheme is refused: ``C:/x`` is a Windows path, not a URI.
    """
    u = urlparse(location or "")
    if not u.scheme or len(u.scheme) < 2 or _CONTROL.search(location):
        raise InvalidInputError(f"partition location must be a URI with a scheme: {location!r}")
    return location


def same_location(a: str | None, b: str | None) -> bool:
    """Equal up to how Hadoop spells them (``file:/x`` == ``file:///x``, trailing slash)."""
    if a is None or b is None:
        return False
    return a == b or _norm_location(a) == _norm_location(b)


def _norm_location(loc: str) -> tuple[str, str, str]:
    u = urlparse(loc.strip())
    path = unquote(u.path).rstrip("/") or "/"
    if u.scheme in ("", "file"):
        return ("file", "", path)
    return (u.scheme.lower(), u.netloc.lower(), path)


def local_path(location: str) -> str | None:
    """The local path ``location`` names (a bare path or a ``file:`` URI), or None for any other store."""
    u = urlparse(location)
    if not u.scheme or len(u.scheme) < 2:
        return location
    return unquote(u.path) or "/" if u.scheme == "file" else None


#: Hadoop's spellings of one object store -> the scheme OpenLineage's naming gives it.
_SCHEME = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
#: Object stores: a location is a key, with no leading slash; file systems keep their absolute paths.
_OBJECT_STORES = {"s3", "gs", "wasbs", "abfss", "oss"}


def namespace_and_name(location: str) -> tuple[str, str]:
    """``location`` as OpenLineage names a dataset (spec/naming.md): ``file`` + path, ``s3://bucket`` +
    key (``s3a`` is S3), ``hdfs://host:port`` + path; no trailing slash."""
    local = local_path(location)
    if local is not None:
        return "file", local.rstrip("/") or "/"
    u = urlparse(location)
    scheme = _SCHEME.get(u.scheme.lower(), u.scheme.lower())
    path = unquote(u.path).rstrip("/")
    if scheme in _OBJECT_STORES:
        return f"{scheme}://{u.netloc}", path.lstrip("/")
    return f"{scheme}://{u.netloc}", path or "/"
