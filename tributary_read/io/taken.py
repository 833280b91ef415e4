"""Bytes already taken from a file, and the check that they are still there before reading on.

A reader that resumes after a position (the spool source's offset in a log file, the consumer's
delivered length) cannot tell growth from change by the name, the inode or the length: logrotate's
copytruncate keeps the name and the inode and the program writes on, so the file is soon longer than
what was read; a file rewritten in place with longer content keeps its name and grows. Only the bytes
tell. So a position is kept with two digests, computed once when the bytes are taken: of the file's
first bytes (its *head*) and of the bytes just before the position (its *tail*), each at most
:data:`SPAN` bytes. Before reading on, both are read again (two small reads) and compared; a mismatch
is a changed file, never growth.

This module is the one owner of that rule: the spool source and the consumer both call it, so a
resumed position means the same thing everywhere.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Callable

#: Bytes of a file's start, and bytes before a position, that each digest covers.
SPAN = 1024

#: ``read_at(pos, n)``: up to ``n`` bytes at ``pos`` (fewer only at the file's end).
ReadAt = Callable[[int, int], bytes]


class Changed(Exception):
    """The bytes a position was taken after are not there any more: the file was truncated, replaced or
    rewritten since. Whatever was read after the position must not be taken as its continuation."""


def digest(data: bytes) -> bytes:
    """8 bytes of BLAKE2b: among the files of one directory a collision is not a practical concern."""
    return hashlib.blake2b(data, digest_size=8).digest()


def pread_of(fd: int) -> ReadAt:
    """``read_at`` over an open file descriptor: positioned reads, so a reader's own offset never moves."""

    def read_at(pos: int, n: int) -> bytes:
        out = b""
        while len(out) < n:
            got = os.pread(fd, n - len(out), pos + len(out))
            if not got:
                break
            out += got
        return out

    return read_at


@dataclass(frozen=True)
class Taken:
    """The first ``length`` bytes of a file, known by the digest of its first ``hlen`` bytes (``head``) and
    of the ``min(SPAN, length)`` bytes before ``length`` (``tail``)."""

    length: int
    head: bytes
    hlen: int
    tail: bytes

    @classmethod
    def of(cls, read_at: ReadAt, length: int, before: bytes = b"") -> Taken:
        """What a reader keeps when it has taken ``length`` bytes. ``before``: the bytes just before ``length``
        where the caller has read them already; they spare the read of the tail (and of the head, when they
        are the whole file)."""
        n = min(SPAN, length)
        tail = before[len(before) - n:] if len(before) >= n else read_at(length - n, n)
        head = before[:n] if len(before) >= length else read_at(0, n)
        return cls(length, digest(head), n, digest(tail))

    def head_holds(self, read_at: ReadAt) -> bool:
        """Does the file still start with the bytes it started with? (One read of ``hlen`` bytes.)"""
        got = read_at(0, self.hlen)
        return len(got) == self.hlen and digest(got) == self.head

    def tail_holds(self, data: bytes) -> bool:
        """Are ``data``, the bytes just before ``length`` as read again, the ones taken?"""
        n = min(SPAN, self.length)
        return len(data) >= n and digest(data[len(data) - n:]) == self.tail

    def holds(self, read_at: ReadAt) -> bool:
        """Are the bytes taken still there: the same head, and the same bytes just before ``length``?"""
        if self.length == 0:
            return True
        n = min(SPAN, self.length)
        return self.head_holds(read_at) and self.tail_holds(read_at(self.length - n, n))

    def to_json(self) -> list:
        """``[hlen, head, tail]`` (hex digests): what a record keeps beside the length it already holds."""
        return [self.hlen, self.head.hex(), self.tail.hex()]

    @classmethod
    def from_json(cls, length: int, v: list) -> Taken:
        return cls(length, bytes.fromhex(v[1]), int(v[0]), bytes.fromhex(v[2]))
