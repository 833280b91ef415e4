"""Files that grew after delivery: the new bytes a byte range can deliver exactly, or why none can.

Log collectors append to a visible file until they roll it (Flume's taildir
source and Filebeat keep byte offsets for this reason). A listing consumer's
ledger remembers how much of each file it delivered; when a file is longer
now, its new bytes ``[offset, end)`` are delivered as a range only where
reading them alone yields exactly the records that were appended:

* an uncompressed line file whose delivered part ended with a line break: the
  range ends at the new bytes' last line break, so a line still being written
  (one of the faults trib names) waits for the next run;
* a gzip file whose new bytes are whole members from the delivered end, as
  each ``cat a.gz b.gz`` append makes: the range ends after the last complete
  member (one still being written waits for the next run) and is decompressed
  alone. The new bytes are decompressed once here to find that end. A zstd
  file likewise by frames, checked by its frame header only (a frame cut short
  fails the read, tributary_read.spark.valid_length).

Anything else is returned as the reason it cannot be delivered (a conflict):
Parquet/ORC (a footer, not lines), a compressed stream appended mid-member, a
file that shrank or was rewritten, a delivered last line that was continued.
Checked: the lengths, the byte (or member header) at the delivered end, the
CRC-32 of the last block before the delivered end, and the digests of the
file's first bytes and of the bytes before the delivered end
(:mod:`tributary_read.io.taken`, the one owner of that check, which the spool
source uses too). The ledger keeps them for every file that could grow, from
its delivery on (:func:`delivered`), so a file rewritten in place with longer
content is a changed file, never growth. An entry an older trib wrote has the
CRC of a range's end only, or nothing for a file delivered whole: such a file
is checked as far as those go (docs/reading.md).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from tributary_read.io.taken import Taken
from tributary_read.read.fileset import Fingerprint

#: The bytes before a delivered end whose CRC-32 the ledger keeps for the next growth's check.
BLOCK = 4096
_SCAN = 1 << 16
_COLUMNAR = {".parquet": "Parquet", ".orc": "ORC", ".avro": "Avro"}
#: Compressions whose members (frames) can be concatenated and read alone: suffix -> header bytes.
MEMBER_MAGIC = {".gz": b"\x1f\x8b\x08", ".zst": b"\x28\xb5\x2f\xfd"}
_STREAMS = (".bz2", ".snappy", ".lz4", ".deflate", ".xz", ".br", ".zip", ".lzo", ".z")


@dataclass(frozen=True)
class Growth:
    """The new bytes to deliver, ``[offset, end)`` (``end == offset``: no whole line yet), and the CRC at ``end``."""

    offset: int
    end: int
    crc: int
    taken: Taken | None = None  # the digests of the file's first ``end`` bytes, for the next growth's check

    def record(self) -> list:
        """What the ledger keeps of it (``ranges``): ``[end, crc]``, then the digests where there are any."""
        return [self.end, self.crc, *(self.taken.to_json() if self.taken is not None else ())]


def can_grow(rel: str, line_based: bool | None) -> bool:
    """Whether a growth of ``rel`` could be delivered as a range (lines, or whole compressed members): only
    for such a file are the digests of its delivered bytes worth taking."""
    name = rel.lower()
    return line_based is not False and not name.endswith(tuple(_COLUMNAR)) and not name.endswith(_STREAMS)


def delivered(storage, rel: str, length: int) -> list | None:
    """The ledger's record of a file delivered whole up to ``length``: ``[length, crc, hlen, head, tail]``, as a
    range's (None: nothing delivered). Two small reads: the file's first bytes, the block before ``length``."""
    if not length:
        return None
    f = storage.open_input(rel)
    try:
        read_at = lambda pos, n: _read_at(f, pos, n)  # noqa: E731
        block = read_at(max(0, length - BLOCK), min(length, BLOCK))
        return Growth(length, length, zlib.crc32(block), Taken.of(read_at, length, block)).record()
    finally:
        f.close()


def readable(fp: Fingerprint | tuple) -> int:
    """The bytes of a fingerprint a reader may see: its valid length (a sidecar's), else its size."""
    return fp[0] if fp[2] is None else fp[2]


def _read_at(f, pos: int, n: int) -> bytes:
    f.seek(pos)
    out = b""
    while len(out) < n:
        chunk = f.read(n - len(out))
        if not chunk:
            break
        out += bytes(chunk)
    return out


def growth(storage, rel: str, old: tuple, new: tuple, delivered: list | None,
           line_based: bool | None) -> Growth | str:
    """How ``rel`` (fingerprint ``old`` when delivered, ``new`` now) can deliver what it gained.

    ``delivered``: the ledger's ``[end, crc]`` or ``[end, crc, hlen, head, tail]``
    (:meth:`Growth.record`; None: the whole readable ``old`` was delivered, by an
    older trib). ``line_based``: the table's format says whether its files are
    lines (None: unknown, a plain directory; the name then tells Parquet/ORC apart).
    """
    was, now = readable(old), readable(new)
    done, crc = (delivered[0], delivered[1]) if delivered else (was, None)
    taken = Taken.from_json(done, delivered[2:]) if delivered and len(delivered) == 5 else None
    if now < was or now < done:
        return f"shrank from {max(was, done)} to {now} bytes after it was delivered"
    if now == done:
        return "rewritten after it was delivered (same length, another modification time)"
    name = rel.lower()
    kind = next((k for ext, k in _COLUMNAR.items() if name.endswith(ext)), None)
    if kind is not None or line_based is False:
        return (f"grew after it was delivered, but a {kind or 'columnar'} file cannot be read from an offset "
                "(only line files can)")
    if name.endswith(_STREAMS):
        return "grew after it was delivered, but its compressed stream cannot be read from an offset"
    magic = next((m for ext, m in MEMBER_MAGIC.items() if name.endswith(ext)), None)
    f = storage.open_input(rel)
    read_at = lambda pos, n: _read_at(f, pos, n)  # noqa: E731
    try:
        before = _read_at(f, max(0, done - BLOCK), min(done, BLOCK))
        offset = done
        if magic is not None:
            if _read_at(f, done, len(magic)) != magic:
                return ("grew after it was delivered, but not by a new compressed member at the delivered end: "
                        "the middle of a compressed stream cannot be read alone")
            end = _after_last_member(f, done, now) if name.endswith(".gz") else now
            if end is None:
                return "grew after it was delivered, but its new bytes are not whole gzip members"
        else:
            if before and before[-1:] not in (b"\n", b"\r"):
                return "grew after it was delivered, but its delivered last line was continued (no line break)"
            if before.endswith(b"\r") and _read_at(f, done, 1) == b"\n":
                offset += 1  # the rest of a "\r\n" split by the last range: not an empty line
            end = _after_last_break(f, offset, now)
        # The bytes delivered, last: the reasons above say more where they apply.
        if (crc is not None and zlib.crc32(before) != crc) or (
                taken is not None and not (taken.tail_holds(before) and taken.head_holds(read_at))):
            return ("rewritten after it was delivered: it is longer, but the bytes delivered are not there any "
                    "more (its first bytes or the bytes before the delivered end differ)")
        tail = _read_at(f, max(0, end - BLOCK), min(end, BLOCK)) if end != done else before
        now_taken = Taken.of(read_at, end, tail)
    finally:
        f.close()
    return Growth(offset, end, zlib.crc32(tail), now_taken)


def _after_last_member(f, start: int, stop: int) -> int | None:
    """The end of the last complete gzip member in ``[start, stop)`` (``start``: none yet); None: not gzip."""
    f.seek(start)
    pos = last = start
    d = zlib.decompressobj(wbits=31)
    pending = b""
    while pos < stop or pending:
        if not pending:
            pending = bytes(f.read(min(_SCAN, stop - pos)))
            if not pending:
                break
            pos += len(pending)
        try:
            d.decompress(pending, _SCAN)
            while d.unconsumed_tail and not d.eof:  # bounded output: a small chunk may inflate a lot
                d.decompress(d.unconsumed_tail, _SCAN)
        except zlib.error:
            return None
        if d.eof:
            rest = d.unused_data
            last = pos - len(rest)
            d = zlib.decompressobj(wbits=31)
            pending = rest
        else:
            pending = b""
    return last


def _after_last_break(f, start: int, stop: int) -> int:
    """The position after the last ``\\n`` or ``\\r`` in ``[start, stop)``; ``start`` if there is none."""
    hi = stop
    while hi > start:
        lo = max(start, hi - _SCAN)
        chunk = _read_at(f, lo, hi - lo)
        i = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if i >= 0:
            return lo + i + 1
        hi = lo
    return start
