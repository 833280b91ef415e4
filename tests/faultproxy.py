"""A fault-injecting HTTP proxy for the S3 server: commits land, their replies are lost.

It sits on 127.0.0.1 in front of the real S3-protocol server and relays every
request unchanged, except the first N commit PUTs (a PUT of
``…/_tributary/log/<20 digits>.json`` carrying ``If-None-Match``): those are
relayed, the server's response is read in full (so the PUT has been applied),
and then the client's connection is closed without a byte of that response.
That is a network blip at the worst moment, as the client sees it: botocore
gets no reply, retries, and the store answers 412 to its own landed commit.

It can also refuse the upload of data files (a PUT of a key outside
``_tributary/``), as a store does whose bucket was deleted (404
``NoSuchBucket``), whose policy denies the write (403) or that fails (5xx):
``refuse_data_puts=(status, code, times)``, ``times`` None for every one. It
counts every request it relays or refuses (``requests``: method and path).
"""

from __future__ import annotations

import http.client
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

_COMMIT_KEY = re.compile(r"/_tributary/log/[0-9]{20}\.json(\?|$)")
_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "content-length", "proxy-connection"}


class FaultProxy:
    """``with FaultProxy(upstream_url, drop_commit_replies=7) as proxy: … proxy.url``."""

    def __init__(self, upstream: str, drop_commit_replies: int = 0,
                 refuse_data_puts: tuple[int, str, int | None] | None = None):
        u = urlparse(upstream)
        self.upstream = (u.hostname, u.port or 80)
        self.remaining = drop_commit_replies
        self.dropped: list[int] = []  # the HTTP status of every reply we swallowed
        self.refuse = refuse_data_puts
        self.refused: list[str] = []  # the path of every PUT we refused
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, in order
        self._lock = threading.Lock()
        proxy = self

        class Handler(_Relay):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _take_drop(self, method: str, path: str, headers) -> bool:
        if method != "PUT" or "If-None-Match" not in headers or not _COMMIT_KEY.search(path):
            return False
        with self._lock:
            if self.remaining <= 0:
                return False
            self.remaining -= 1
            return True

    def _take_refusal(self, method: str, path: str) -> tuple[int, str] | None:
        key = path.split("?", 1)[0]
        if self.refuse is None or method != "PUT" or "/_tributary/" in key or key.endswith("/"):
            return None
        status, code, times = self.refuse
        with self._lock:
            if times is not None and len(self.refused) >= times:
                return None
            self.refused.append(key)
        return status, code


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue answered for us
    owner: FaultProxy

    def log_message(self, *args) -> None:
        pass

    def _body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = self.headers.get("Content-Length")
        return self.rfile.read(int(n)) if n is not None else None

    def _relay(self) -> None:
        body = self._body()
        self.owner.requests.append((self.command, self.path))
        refusal = self.owner._take_refusal(self.command, self.path)
        if refusal is not None:
            status, code = refusal
            data = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>refused by the " \
                   f"test proxy</Message></Error>".encode()
            self.send_response_only(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        drop = self.owner._take_drop(self.command, self.path, self.headers)
        up = http.client.HTTPConnection(*self.owner.upstream, timeout=120)
        try:
            # The Host header goes through untouched: it is part of the signature.
            up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in self.headers.items():
                if k.lower() not in _HOP:
                    up.putheader(k, v)
            if body is not None:
                up.putheader("Content-Length", str(len(body)))
            up.endheaders(body)
            resp = up.getresponse()
            data = resp.read()
        finally:
            up.close()
        if drop:
            self.owner.dropped.append(resp.status)
            self.close_connection = True  # the store applied it; the client hears nothing
            return
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP or (k.lower() == "content-length" and self.command == "HEAD"):
                self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay


def _listener(backlog: int):
    """A listening TCP socket on a free 127.0.0.1 port, and the port."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    return sock, sock.getsockname()[1]


def accept_each(sock, stop: threading.Event, handle) -> None:
    """Accept connections on ``sock`` until ``stop`` is set, handing each to ``handle(conn)``."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except OSError:
            continue
        handle(conn)


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte.

    A metastore or HiveServer2 that hangs (a full GC, a deadlocked handler, a
    half-dead load balancer) looks exactly like this to a client: the connect
    succeeds, every read waits. ``with SilentServer() as s: … s.port``.
    """

    def __init__(self):
        self._sock, self.port = _listener(64)
        self.accepted: list = []  # held open, unread, until the server closes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        accept_each(self._sock, self._stop, self.accepted.append)

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.accepted:
            c.close()
        self._sock.close()


class StallingRelay:
    """A TCP relay to ``127.0.0.1:upstream`` that relays faithfully until :meth:`stall`, then
    swallows every reply: a metastore that hangs in the middle of a session, after the connect,
    the handshake and the first calls went through (``SilentServer`` hangs from the first byte).
    """

    def __init__(self, upstream: int):
        self.upstream = upstream
        self._sock, self.port = _listener(16)
        self._stalled = threading.Event()
        self._stop = threading.Event()
        self._conns: list = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def stall(self) -> None:
        self._stalled.set()

    def _accept(self) -> None:
        accept_each(self._sock, self._stop, self._relay)

    def _relay(self, client) -> None:
        import socket

        server = socket.create_connection(("127.0.0.1", self.upstream))
        self._conns += [client, server]
        threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src, dst, reply: bool) -> None:
        while not self._stop.is_set():
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if reply and self._stalled.is_set():
                continue  # read and dropped: the client waits for an answer that never comes
            try:
                dst.sendall(data)
            except OSError:
                return

    def __enter__(self) -> StallingRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
        self._sock.close()
