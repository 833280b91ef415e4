"""File formats the writer produces, held as data rather than if-chains.

Text formats (text, jsonl, csv) are newline-delimited records compressed as a
stream; Hadoop and Spark pick the codec from the extension. Parquet compresses
per column chunk. Snappy is offered for Parquet only: a raw snappy stream is
not the block framing Hadoop's SnappyCodec reads, so a ``.snappy`` text file
would be unreadable by the engines trib feeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from tributary_read.errors import InvalidInputError


@dataclass(frozen=True)
class FormatSpec:
    name: str
    extension: str
    compressions: tuple[str, ...]
    line_based: bool
    #: Hive's STORED AS clause, used by the Hive integration.
    hive_stored_as: str


FORMATS: dict[str, FormatSpec] = {
    "text": FormatSpec("text", "txt", ("none", "gzip", "zstd"), True, "TEXTFILE"),
    "jsonl": FormatSpec("jsonl", "jsonl", ("none", "gzip", "zstd"), True, "TEXTFILE"),
    "csv": FormatSpec("csv", "csv", ("none", "gzip", "zstd"), True, "TEXTFILE"),
    "parquet": FormatSpec("parquet", "parquet", ("none", "gzip", "zstd", "snappy"), False, "PARQUET"),
}

@dataclass(frozen=True)
class DataFormat:
    """A table's data format and compression (table.json's ``file_format`` and ``compression``).

    What an engine needs to read a table's files, carried on every
    :class:`~tributary_read.read.fileset.FileSet` resolved from a trib table.
    """

    format: str
    compression: str = "none"

    @property
    def spec(self) -> FormatSpec:
        return check_format(self.format, self.compression)

    def to_json(self) -> dict:
        return {"format": self.format, "compression": self.compression}


#: compression -> (suffix for text files, pyarrow codec name)
COMPRESSIONS: dict[str, tuple[str, str | None]] = {
    "none": ("", None),
    "gzip": (".gz", "gzip"),
    "zstd": (".zst", "zstd"),
    "snappy": ("", "snappy"),
}


def check_format(fmt: str, compression: str) -> FormatSpec:
    spec = FORMATS.get(fmt)
    if spec is None:
        raise InvalidInputError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if compression not in spec.compressions:
        raise InvalidInputError(
            f"compression {compression!r} is not available for {fmt}; choose one of {', '.join(spec.compressions)}"
        )
    return spec


def file_suffix(fmt: str, compression: str) -> str:
    spec = check_format(fmt, compression)
    if spec.line_based:
        return f".{spec.extension}{COMPRESSIONS[compression][0]}"
    return f".{spec.extension}"
