"""A Kafka-protocol fault proxy for the tests: topic retention on a broker that has none.

Why: issue 20 wants a tested answer to "the committed offset is older than the
topic's retention" (offset out of range), but the test broker, Tansu, never
deletes a record (no DeleteRecords, no retention: docs/kafka-broker-notes.md).
This proxy sits on 127.0.0.1 between the client (librdkafka) and the real
broker, relays every frame, and pretends that retention deleted the head of the
partitions it is given: ``log_start={("topic", 0): 50}`` makes offsets 0..49 of
``topic/0`` gone, as a Kafka broker whose log start offset is 50 would say:

- **Fetch** of such a partition from an offset below its log start is answered
  for that partition with ``OFFSET_OUT_OF_RANGE`` (1) and no records (Kafka's
  answer; librdkafka with ``auto.offset.reset=error`` then hands the
  application ``_AUTO_OFFSET_RESET``). So is a fetch past its end (the high
  watermark of the broker's own answer, which is right on Tansu), as Kafka
  does and Tansu does not (it answers nothing, with no error). The other
  partitions of the response are relayed as the broker sent them.
- **ListOffsets** ``earliest`` (-2) answers the log start; ``latest`` and a
  time never answer less than it (Tansu's ``latest`` is only a hint anyway).
- **ListOffsets by time** (``offsets_for_times``): Tansu answers from the
  storage time of its batches, not from record timestamps, and 0 instead of
  -1 past the end. Given ``time_index={("topic", 0): [(offset, ts), ...]}`` (the
  records the test produced), the proxy answers as Kafka's time index does: the
  first offset whose timestamp is at or after the time, else -1.

Only the requests that matter are parsed. To keep them easy to parse and
rebuild, the proxy lowers the broker's ApiVersions answer (the maxima, rewritten
in place) to non-flexible versions: Fetch v4 (the first with record batches
v2) and ListOffsets v1. Everything else is relayed byte for byte.

The broker must advertise the proxy, or clients would follow the broker's
metadata past it: start Tansu with ``Broker(..., advertised=proxy.bootstrap)``
(its ``--advertised-listener-url``). Every address the broker hands out,
Metadata and FindCoordinator alike, is then the proxy's, and no response needs
an address rewritten. ``log_start`` may be changed while clients run; a
partition missing from it is untouched.

Frames (https://kafka.apache.org/protocol): int32 size, then the payload. A
request starts with api_key int16, api_version int16, correlation_id int32,
client_id (int16-length string); a response with the correlation_id. Responses
come back per connection in request order, but clients pipeline, so each
connection keeps correlation_id -> request.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Mapping

from faultproxy import _listener, accept_each

FETCH, LIST_OFFSETS, API_VERSIONS = 1, 2, 18
#: The highest version of each parsed API the client may use (the proxy lowers the broker's maxima).
CLAMP = {FETCH: 4, LIST_OFFSETS: 1}
OFFSET_OUT_OF_RANGE = 1
EARLIEST, LATEST = -2, -1


class ProtocolProblem(Exception):
    """A frame the proxy cannot handle: recorded in ``problems`` and the connection closed."""


class _Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i8(self) -> int: return self.take(">b")
    def i16(self) -> int: return self.take(">h")
    def i32(self) -> int: return self.take(">i")
    def i64(self) -> int: return self.take(">q")

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolProblem(f"{n} bytes at {self.pos} of a {len(self.data)}-byte frame")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def uvarint(self) -> int:
        shift = out = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())

    def array(self, item):
        n = self.i32()
        return None if n < 0 else [item() for _ in range(n)]


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class KafkaRetentionProxy:
    """``with KafkaRetentionProxy("127.0.0.1:9092", {("t", 0): 50}) as proxy: … proxy.bootstrap``.

    ``log_start[(topic, partition)] = 0`` fakes no retention but still gives Kafka's answer
    past the end. ``faked`` lists every ``(topic, partition, fetch offset)`` answered out of
    range; ``requests`` counts ``(api_key, api_version)``; ``problems`` names
    frames the proxy could not handle (a test should assert it stays empty).
    """

    def __init__(self, upstream: str, log_start: Mapping[tuple[str, int], int] | None = None,
                 time_index: Mapping[tuple[str, int], list[tuple[int, int]]] | None = None):
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.log_start: dict[tuple[str, int], int] = dict(log_start or {})
        self.time_index: dict[tuple[str, int], list[tuple[int, int]]] = dict(time_index or {})
        self.faked: list[tuple[str, int, int]] = []
        self.requests: Counter = Counter()
        self.problems: list[str] = []
        self._sock, self.port = _listener(64)
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> KafkaRetentionProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        for c in list(self._conns):
            _close(c)
        self._sock.close()

    def _start_of(self, topic: str, partition: int) -> int | None:
        with self._lock:
            return self.log_start.get((topic, partition))

    # -- relaying ------------------------------------------------------------------------
    def _accept(self) -> None:
        accept_each(self._sock, self._stop, self._relay)

    def _relay(self, client) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()  # the broker is down: so is the proxy, as the client sees it
            return
        server.settimeout(None)
        self._conns += [client, server]
        pending: dict[int, tuple[int, int, object]] = {}
        threading.Thread(target=self._requests, args=(client, server, pending), daemon=True).start()
        threading.Thread(target=self._responses, args=(server, client, pending), daemon=True).start()

    def _requests(self, client, server, pending: dict) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                r = _Reader(frame)
                key, version, corr = r.i16(), r.i16(), r.i32()
                self.requests[(key, version)] += 1
                asked = None
                if key in CLAMP and version > CLAMP[key]:
                    raise ProtocolProblem(f"api {key} v{version} asked, above the advertised v{CLAMP[key]}")
                if key in (FETCH, LIST_OFFSETS):
                    r.string()  # client_id
                    asked = _fetch_request(r) if key == FETCH else _list_offsets_request(r)
                pending[corr] = (key, version, asked)
                server.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ProtocolProblem, struct.error, IndexError) as e:
            self._fail(e, client, server)
        finally:
            _close(server)

    def _responses(self, server, client, pending: dict) -> None:
        try:
            while (frame := _read_frame(server)) is not None:
                corr = struct.unpack_from(">i", frame)[0]
                key, version, asked = pending.pop(corr, (None, None, None))
                if key == API_VERSIONS:
                    frame = _clamp_versions(frame, version)
                elif key == FETCH:
                    frame = self._fetch_response(frame, asked)
                elif key == LIST_OFFSETS:
                    frame = self._list_offsets_response(frame, asked)
                client.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ProtocolProblem, struct.error, IndexError) as e:
            self._fail(e, server, client)
        finally:
            _close(client)

    def _fail(self, e: Exception, *conns) -> None:
        if not isinstance(e, OSError) and not self._stop.is_set():
            self.problems.append(f"{type(e).__name__}: {e}")
        for c in conns:
            _close(c)

    # -- the faked answers -----------------------------------------------------------------
    def _fetch_response(self, frame: bytes, asked: dict) -> bytes:
        """Fetch v4: throttle, [topic, [partition, error, high watermark, last stable offset,
        aborted transactions (nullable [producer id, first offset]), records (nullable bytes)]]."""
        starts = {tp: start for tp in asked if (start := self._start_of(*tp)) is not None}
        if not starts:
            return frame
        r = _Reader(frame, 4)
        out = [frame[:8]]  # correlation id, throttle time
        r.i32()
        topics = r.i32()
        out.append(struct.pack(">i", topics))
        for _ in range(topics):
            topic = r.string()
            parts = r.i32()
            out.append(_string(topic) + struct.pack(">i", parts))
            for _ in range(parts):
                begin = r.pos
                partition, err, hw, _lso = r.i32(), r.i16(), r.i64(), r.i64()
                aborted = r.i32()
                r.raw(16 * max(0, aborted))
                r.raw(max(0, r.i32()))  # records
                tp = (topic, partition)
                if tp in starts and not err and not starts[tp] <= asked[tp] <= hw:
                    # Kafka's answer for an offset before the log start or past the end: the
                    # error, -1 marks, no records (an empty record set: librdkafka refuses null).
                    out.append(struct.pack(">ihqqii", partition, OFFSET_OUT_OF_RANGE, -1, -1, -1, 0))
                    with self._lock:
                        self.faked.append((topic, partition, asked[tp]))
                else:
                    out.append(frame[begin:r.pos])
        if r.pos != len(frame):
            raise ProtocolProblem(f"Fetch v4 response: {len(frame) - r.pos} bytes left over")
        return b"".join(out)

    def _list_offsets_response(self, frame: bytes, asked: dict) -> bytes:
        """ListOffsets v1: [topic, [partition, error, timestamp, offset]]: offsets rewritten in place."""
        out = bytearray(frame)
        r = _Reader(frame, 4)
        for _ in range(r.i32()):
            topic = r.string()
            for _ in range(r.i32()):
                partition, err = r.i32(), r.i16()
                at_ts = r.pos
                r.i64()
                at = r.pos
                offset = r.i64()
                when = asked.get((topic, partition))
                with self._lock:
                    index = self.time_index.get((topic, partition))
                if index is not None and when is not None and when >= 0 and not err:
                    hit = min((o for o, ts in index if ts >= when), default=-1)
                    found = next((ts for o, ts in index if o == hit), -1)
                    struct.pack_into(">qq", out, at_ts, found, hit)
                    offset = hit
                start = self._start_of(topic, partition)
                if start is None or err:
                    continue
                if when == EARLIEST:
                    offset = start
                elif when is not None and offset != -1:
                    offset = max(offset, start)  # latest, or the first at/after a time
                struct.pack_into(">q", out, at, offset)
        return bytes(out)


def _fetch_request(r: _Reader) -> dict[tuple[str, int], int]:
    """Fetch v4: replica, max wait, min bytes, max bytes, isolation, [topic, [partition, offset, max bytes]]."""
    r.i32(), r.i32(), r.i32(), r.i32(), r.i8()
    out = {}
    for _ in range(r.i32()):
        topic = r.string()
        for _ in range(r.i32()):
            partition, offset, _max = r.i32(), r.i64(), r.i32()
            out[(topic, partition)] = offset
    return out


def _list_offsets_request(r: _Reader) -> dict[tuple[str, int], int]:
    """ListOffsets v1: replica, [topic, [partition, timestamp]] (-2 earliest, -1 latest)."""
    r.i32()
    out = {}
    for _ in range(r.i32()):
        topic = r.string()
        for _ in range(r.i32()):
            partition, ts = r.i32(), r.i64()
            out[(topic, partition)] = ts
    return out


def _clamp_versions(frame: bytes, version: int) -> bytes:
    """ApiVersions: lower the max version of each API in CLAMP, in place (int16s stay int16s).

    v0-2: error, [api key, min, max] (+ throttle); v3+: error, compact array of the same with
    tagged fields. The response header is v0 (no tagged fields) even for v3.
    """
    out = bytearray(frame)
    r = _Reader(frame, 4)
    if r.i16() != 0:
        return frame  # e.g. UNSUPPORTED_VERSION: the client asks again with a lower version
    n = r.uvarint() - 1 if version >= 3 else r.i32()
    for _ in range(n):
        key, low = r.i16(), r.i16()
        at = r.pos
        high = r.i16()
        if version >= 3:
            r.tags()
        if key in CLAMP and high > CLAMP[key]:
            if low > CLAMP[key]:
                raise ProtocolProblem(f"the broker needs api {key} v{low} or later; the proxy parses v{CLAMP[key]}")
            struct.pack_into(">h", out, at, CLAMP[key])
    return bytes(out)


def _read_frame(sock) -> bytes | None:
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    size = struct.unpack(">i", head)[0]
    body = _read_exactly(sock, size)
    if body is None:
        raise ProtocolProblem(f"the connection closed inside a {size}-byte frame")
    return body


def _read_exactly(sock, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            if buf:
                raise ProtocolProblem(f"the connection closed after {len(buf)} of {n} bytes")
            return None
        buf += chunk
    return bytes(buf)


def _close(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
