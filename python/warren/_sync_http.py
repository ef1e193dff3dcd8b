"""The blocking transport: HTTP/1.1 keep-alive connections from a pool, safe across threads."""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ._endpoint import Endpoint
from ._keepalive import keep_seconds
from ._ndjson import LineSplitter
from ._retry import Retry
from ._wire import Request, parse_json
from .errors import TransportError, WarrenError, error_from_wire

#: Connection failures that a fresh connection may not see (a kept-alive one the server closed).
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.BadStatusLine)


def _dropped(sock: Any) -> bool:
    """Whether an idle kept connection has anything to read: the server ended it (or broke the protocol).

    ``poll``, not ``select``: select takes no descriptor past 1023, and a busy process has them.
    """
    if getattr(sock, "pending", None) is not None and sock.pending() > 0:
        return True  # TLS bytes already decrypted and waiting: nothing an idle connection should hold
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
            return bool(p.poll(0))
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


class SyncTransport:
    def __init__(self, endpoint: Endpoint, *, timeout: float, retry: Retry, max_idle: int = 32) -> None:
        self.e = endpoint
        self.timeout = timeout
        self.retry = retry
        self.max_idle = max_idle
        #: Kept connections, each with until when (time.monotonic) it may carry another request.
        self.idle: List[Tuple[http.client.HTTPConnection, float]] = []
        self.lock = threading.Lock()
        self.ssl = ssl.create_default_context() if endpoint.tls else None

    def _connect(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        now = time.monotonic()
        while True:
            with self.lock:
                if not self.idle:
                    break
                c, keep_until = self.idle.pop()
            # Past its keep time, or the server closed it meanwhile (it reads as ready: its end, or bytes nobody asked for).
            if now >= keep_until or c.sock is None or _dropped(c.sock):
                c.close()
                continue
            c.timeout = timeout
            if c.sock is not None:
                c.sock.settimeout(timeout)
            return c, True
        if self.ssl is not None:
            return http.client.HTTPSConnection(self.e.host, self.e.port, timeout=timeout, context=self.ssl), False
        return http.client.HTTPConnection(self.e.host, self.e.port, timeout=timeout), False

    def _release(self, c: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        if resp.will_close or c.sock is None:
            c.close()
            return
        keep_until = time.monotonic() + keep_seconds(resp.getheader("keep-alive"))
        with self.lock:
            if len(self.idle) < self.max_idle:
                self.idle.append((c, keep_until))
                return
        c.close()

    def close(self) -> None:
        with self.lock:
            conns, self.idle = self.idle, []
        for c, _ in conns:
            c.close()

    def _send_once(self, req: Request) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        timeout = req.timeout if req.timeout is not None or req.accept == "application/x-ndjson" else self.timeout
        body, headers = req.payload()
        start = body.tell() if body is not None and not isinstance(body, bytes) else 0
        for fresh_try in (False, True):
            c, reused = self._connect(timeout)
            sent = False
            try:
                c.putrequest(req.method, self.e.base + req.target(), skip_host=True, skip_accept_encoding=True)
                for k, v in {**self.e.headers, **headers}.items():
                    c.putheader(k, v)
                c.endheaders()
                sent = True
                if body is not None:
                    if not isinstance(body, bytes):
                        body.seek(start)
                    c.send(body)
                return c, c.getresponse()
            except STALE as e:
                c.close()
                # A kept-alive connection the server had closed: sent again on a new one if none of
                # it went, or if the call may run twice; a call that may not is not sent again (the
                # server may have taken it), and the retry policy decides.
                if reused and not fresh_try and (not sent or req.idempotent):
                    continue
                broke = TransportError(f"the connection to Warren at {self.e.url} broke: {e}", cause=e)
                broke.details["sent"] = sent
                raise broke from e
            except (OSError, http.client.HTTPException) as e:
                c.close()
                err = TransportError(f"cannot reach Warren at {self.e.url}: {e}", cause=e)
                err.details["sent"] = sent
                raise err from e
        raise AssertionError("unreachable")

    def _with_retry(self, req: Request) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        attempt = 1
        while True:
            try:
                c, resp = self._send_once(req)
                if resp.status >= 400:
                    data = resp.read()
                    self._release(c, resp)
                    raise error_from_wire(resp.status, _json_or_none(data))
                return c, resp
            except WarrenError as e:
                wait = self.retry.delay(attempt, e, req.idempotent)
                if wait is None:
                    raise
                self.retry.sleep(wait)
                attempt += 1

    def call(self, req: Request) -> Any:
        """One request; the parsed JSON answer (None for an empty one)."""
        return parse_json(200, self.raw(req))

    def raw(self, req: Request) -> bytes:
        """One request; the answer's bytes."""
        c, resp = self._with_retry(req)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            c.close()
            raise TransportError(f"the answer from Warren at {self.e.url} broke off: {e}", cause=e) from e
        self._release(c, resp)
        return data

    @contextmanager
    def stream(self, req: Request) -> Iterator[Iterator[bytes]]:
        """The answer's body as chunks, as they come; the connection is closed if left unread."""
        c, resp = self._with_retry(req)
        done = False

        def chunks() -> Iterator[bytes]:
            nonlocal done
            while True:
                try:
                    b = resp.read1(65536)
                except (OSError, http.client.HTTPException) as e:
                    raise TransportError(f"the stream from Warren at {self.e.url} broke off: {e}", cause=e) from e
                if not b:
                    done = True
                    return
                yield b

        try:
            yield chunks()
        finally:
            if done:
                self._release(c, resp)
            else:
                c.close()

    def lines(self, req: Request) -> Iterator[Any]:
        """An NDJSON answer, line by line."""
        with self.stream(req) as chunks:
            sp = LineSplitter()
            for chunk in chunks:
                yield from sp.feed(chunk)
            yield from sp.end()


def _json_or_none(data: bytes) -> Optional[Dict[str, Any]]:
    import json

    try:
        v = json.loads(data)
        return v if isinstance(v, dict) else None
    except ValueError:
        return None
