"""What a file in a spool directory is: its content, not its name.

A log shipper that knows files by name or by inode goes wrong at every rotation
tool's corner: a rename looks like a new file, a reused inode like an old one,
and a compressed copy of a file already shipped is shipped again. Here a file
is known by a digest of its first :data:`HEAD` bytes (the whole file if
shorter), of the decompressed content for a gzip or zstd file, so ``app.log``
renamed to ``app.log.1`` and compressed to ``app.log.1.gz`` stays one file throughout.
(device, inode) is only a hint: it tells a truncated file (copytruncate) from a
new one. Two files whose heads agree are told apart by a second digest, of the
bytes just before the position read so far (the *tail*).
"""

from __future__ import annotations

import os
import stat
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from tributary_read.io.taken import SPAN, Changed, Taken, digest, pread_of

#: Bytes of content that identify a file (the span of :mod:`tributary_read.io.taken`'s digests).
HEAD = SPAN
#: The bytes a gzip file starts with: compression is told by content, not by a ``.gz`` name.
GZIP_MAGIC = b"\x1f\x8b"
#: The bytes a zstd frame starts with (RFC 8878), likewise told by content, not by a ``.zst`` name.
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK = 1 << 20

__all__ = ["HEAD", "GZIP_MAGIC", "ZSTD_MAGIC", "Changed", "Found", "Moved", "Taken", "chunks", "content_length", "digest", "look"]


@dataclass(frozen=True)
class Found:
    """A file a scan found: where, its stat, how it is compressed, and the head of its content."""

    path: str
    name: str
    dev: int
    ino: int
    size: int  # bytes on disk (compressed for gzip and zstd)
    mtime_ns: int
    codec: str  # "" (plain), "gzip" or "zstd"
    head: bytes  # the first min(HEAD, content) bytes; for a compressed file still being written, what decompresses so far

    @property
    def compressed(self) -> bool:
        """A compressed stream: never a logger's open log, read from its start, ended only by its trailer."""
        return bool(self.codec)

    @property
    def key(self) -> bytes:
        return digest(self.head)

    def prefix_key(self, n: int) -> bytes | None:
        """The digest of the first ``n`` content bytes (None: the file holds fewer)."""
        return digest(self.head[:n]) if len(self.head) >= n else None

    def tail_key(self, pos: int) -> bytes:
        """The digest of the content bytes just before ``pos`` (b"": it holds fewer). A compressed file is
        decompressed up to ``pos``: the format cannot be read from the middle.

        Raises :class:`Moved` when the name no longer leads to this file (a rotation since the scan).
        """
        n = min(HEAD, pos)
        if self.compressed:
            data = b""
            for c in chunks(self, pos - n):
                data += c[:n - len(data)]
                if len(data) >= n:
                    break
        else:
            with self.open() as f:
                data = os.pread(f.fileno(), n, pos - n)
        return digest(data) if len(data) == n else b""

    def open(self) -> BinaryIO:
        """The file itself, never another one that took its name since the scan (that raises Moved)."""
        try:
            f = open(self.path, "rb")
        except OSError:
            raise Moved(self.path) from None
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            f.close()
            raise Moved(self.path)
        return f


class Moved(Exception):
    """A name found by a scan leads to another file now, or to none: the next scan tells what happened."""


def look(path: str, name: str) -> Found | None:
    """The file at ``path`` as a scan sees it (None: it went away, is not a regular file, or cannot be told
    yet). Stat and head come from one open file, so a rename between the two cannot mix two files."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            first = f.read(HEAD)
            codec = "gzip" if first[:2] == GZIP_MAGIC else "zstd" if first[:4] == ZSTD_MAGIC else ""
            head = _compressed_head(codec, first + f.read(64 * 1024)) if codec else first
    except OSError:
        return None
    if head is None:
        return None  # a compressed file being written, too short yet to tell what it is a copy of
    return Found(path, name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, codec, head)


def _compressed_head(codec: str, raw: bytes) -> bytes | None:
    """The first HEAD bytes of the content of the compressed data ``raw`` begins with (fewer if the content is
    shorter); None while a shorter head may still grow: the compressor is still writing the file."""
    if codec == "zstd":
        import io

        status: dict = {}
        head = b""
        for chunk in _unzstd(io.BytesIO(raw), status, HEAD):
            head += chunk
            if len(head) >= HEAD:
                return head[:HEAD]
        return head if status.get("ended") else None
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        head = d.decompress(raw, HEAD)
    except zlib.error:
        return b""  # not gzip after all: no content, so it matches nothing
    return head if len(head) >= HEAD or d.eof else None


def chunks(found: Found, pos: int, end: int | None = None, taken: Taken | None = None,
           status: dict | None = None) -> Iterator[bytes]:
    """The content of ``found`` from content position ``pos`` on, in chunks, up to its current end (or
    ``end``, for a plain file).

    A compressed file is decompressed from its start (the format cannot seek) and
    the first ``pos`` bytes are dropped; a stream cut short (still being written)
    yields what decompresses so far and stops, so the rest is read next time:
    ``status["ended"]`` is then False, and True once the last member's trailer was
    read (left unset if the caller stops early). ``taken``: the content read so far,
    whose head is checked again after every read of a plain file (and against the
    decompressed start of a compressed one): a file truncated in place and written again
    between two reads raises :class:`Changed` before a byte of its new content is
    yielded as the old one's continuation. (Its tail is the caller's to check: the
    bytes before ``taken.length`` are the first it gets.)
    Raises :class:`Moved` if the name leads to another file than the scan found.
    """
    with found.open() as f:
        if not found.compressed:
            read_at = pread_of(f.fileno())
            f.seek(pos)
            left = None if end is None else max(0, end - pos)
            while left is None or left > 0:
                chunk = f.read(CHUNK if left is None else min(CHUNK, left))
                if not chunk:
                    return
                if taken is not None and taken.hlen and not taken.head_holds(read_at):
                    raise Changed(f"{found.name} no longer starts with the bytes read from it")
                if left is not None:
                    left -= len(chunk)
                yield chunk
            return
        out = (_gunzip if found.codec == "gzip" else _unzstd)(f, {} if status is None else status)
        yield from _skip(_head_checked(out, taken, found.name) if taken is not None and taken.hlen else out, pos)


def content_length(found: Found) -> tuple[int, bool]:
    """A compressed file's content bytes now (decompressed), and whether its stream reached its end (a gzip
    trailer, a zstd frame's end; a stream without one is still being written). Asked of compressed files
    only: a plain file's content is its size. Raises :class:`Moved` as :func:`chunks` does."""
    status: dict = {}
    n = sum(len(c) for c in chunks(found, 0, status=status))
    return n, bool(status.get("ended"))


def _gunzip(f: BinaryIO, status: dict) -> Iterator[bytes]:
    """The decompressed content of every member; ``status["ended"]``: the last one was read to its trailer."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    members, fed = 0, False  # members read to their trailer; bytes given to the member being read
    while True:
        raw = f.read(CHUNK)
        if not raw:
            break
        while raw:
            fed = True
            out = d.decompress(raw)
            if out:
                yield out
            if not d.eof:
                break
            members += 1
            raw = d.unused_data  # a multi-member file: the next member starts here
            d, fed = zlib.decompressobj(16 + zlib.MAX_WBITS), False
            if raw and raw[:2] != GZIP_MAGIC:
                status["ended"] = True
                return  # trailing garbage (padding) after the last member
    status["ended"] = members > 0 and not fed


def _unzstd(f: BinaryIO, status: dict, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """The decompressed content of every zstd frame (Arrow's decompressor, a dependency already);
    ``status["ended"]``: the last frame was read to its end. A frame cut short (the compressor still writing)
    yields what decompresses so far, less the last ``chunk`` at most (Arrow fails a read it cannot fill),
    and stops."""
    import pyarrow as pa

    stream = pa.CompressedInputStream(pa.PythonFile(f, mode="r"), "zstd")
    while True:
        try:
            out = stream.read(chunk)
        except OSError:  # "Truncated compressed stream": no frame end yet
            status["ended"] = False
            return
        if not out:
            status["ended"] = True
            return
        yield out


def _head_checked(it: Iterator[bytes], taken: Taken, name: str) -> Iterator[bytes]:
    """``it`` (decompressed content from its start), checked to start with the head ``taken`` was read after."""
    head = b""
    for chunk in it:
        if len(head) < taken.hlen:
            head += chunk[:taken.hlen - len(head)]
            if len(head) == taken.hlen and digest(head) != taken.head:
                raise Changed(f"{name} no longer starts with the bytes read from it")
        yield chunk


def _skip(it: Iterator[bytes], pos: int) -> Iterator[bytes]:
    for chunk in it:
        if pos >= len(chunk):
            pos -= len(chunk)
            continue
        yield chunk[pos:] if pos else chunk
        pos = 0
