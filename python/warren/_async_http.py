"""The asyncio transport: HTTP/1.1 over asyncio streams, keep-alive connections from a pool.

Real non-blocking I/O (no threads): one event loop drives as many calls at once as the pool
has connections (``max_connections``); further calls wait for a free one.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from contextlib import asynccontextmanager
from typing import IO, Any, AsyncIterator, Awaitable, Dict, List, Optional, Tuple, TypeVar, Union

from ._keepalive import keep_seconds
from ._ndjson import LineSplitter
from ._retry import Retry
from ._endpoint import Endpoint
from ._sync_http import _json_or_none
from ._wire import Request, parse_json
from .errors import TransportError, WarrenError, error_from_wire

MAX_HEAD_BYTES = 64 * 1024
CHUNK = 65536

# A deadline without a task of its own per call (Python 3.11+); wait_for before that.
_timeout = getattr(asyncio, "timeout", None)
T = TypeVar("T")


async def _within(aw: Awaitable[T], seconds: Optional[float]) -> T:
    """``aw``, or asyncio.TimeoutError once ``seconds`` have passed (None: no deadline)."""
    if _timeout is None:
        return await asyncio.wait_for(aw, seconds)
    async with _timeout(seconds):
        return await aw


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r = reader
        self.w = writer
        self.used = False
        #: Until when (time.monotonic) it may carry another request: the server's Keep-Alive timeout, less a margin.
        self.keep_until = 0.0

    def close(self) -> None:
        self.w.close()


class _Response:
    """A response whose head is read; its body is read with :meth:`chunks` (once)."""

    def __init__(self, conn: _Conn, status: int, headers: Dict[str, str], method: str) -> None:
        self.conn = conn
        self.status = status
        self.headers = headers
        te = headers.get("transfer-encoding", "").lower()
        self.chunked = "chunked" in te
        cl = headers.get("content-length")
        self.length: Optional[int] = int(cl) if cl is not None and not self.chunked else None
        if method == "HEAD" or status in (204, 304):
            self.length = 0
        self.keep = headers.get("connection", "").lower() != "close" and (self.chunked or self.length is not None)
        self.done = False

    async def _exactly(self, n: int) -> AsyncIterator[bytes]:
        """The next ``n`` bytes of the body, as they come."""
        while n > 0:
            b = await self.conn.r.read(min(n, CHUNK))
            if not b:
                raise EOFError("the answer ended early")
            n -= len(b)
            yield b

    async def chunks(self) -> AsyncIterator[bytes]:
        r = self.conn.r
        if self.length is not None:
            async for b in self._exactly(self.length):
                yield b
        elif self.chunked:
            while True:
                size_line = await r.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    # Trailers, to the blank line.
                    while (await r.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    break
                async for b in self._exactly(size):
                    yield b
                if await r.readexactly(2) != b"\r\n":
                    raise ValueError("bad chunk framing")
        else:
            while True:
                b = await r.read(CHUNK)
                if not b:
                    break
                yield b
        self.done = True

    async def read(self) -> bytes:
        if self.length is not None:
            # Most answers: one read of a known length.
            data = await self.conn.r.readexactly(self.length) if self.length else b""
            self.done = True
            return data
        parts = [b async for b in self.chunks()]
        return b"".join(parts)


class AsyncTransport:
    def __init__(self, endpoint: Endpoint, *, timeout: float, retry: Retry, max_connections: int = 256) -> None:
        self.e = endpoint
        self.timeout = timeout
        self.retry = retry
        self.idle: List[_Conn] = []
        self.max_connections = max_connections
        self._slots: Optional[asyncio.Semaphore] = None
        self.ssl = ssl.create_default_context() if endpoint.tls else None
        self.closed = False

    @property
    def slots(self) -> asyncio.Semaphore:
        # Made on first use, in the loop that uses it: before Python 3.10 a semaphore belongs to
        # the loop current when it was made, and a client may be made before asyncio.run.
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        return self._slots

    async def _connect(self) -> _Conn:
        now = time.monotonic()
        while self.idle:
            c = self.idle.pop()
            if now < c.keep_until and not c.r.at_eof() and not c.w.is_closing():
                return c
            c.close()
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection(self.e.host, self.e.port, ssl=self.ssl, limit=MAX_HEAD_BYTES), self.timeout
            )
        except (OSError, asyncio.TimeoutError) as e:
            err = TransportError(f"cannot reach Warren at {self.e.url}: {e!r}", cause=e)
            err.details["sent"] = False
            raise err from e
        return _Conn(r, w)

    def _release(self, c: _Conn, resp: _Response) -> None:
        if resp.done and resp.keep and not self.closed and not c.r.at_eof():
            c.used = True
            c.keep_until = time.monotonic() + keep_seconds(resp.headers.get("keep-alive"))
            self.idle.append(c)
        else:
            c.close()

    async def close(self) -> None:
        self.closed = True
        conns, self.idle = self.idle, []
        for c in conns:
            c.close()

    async def _head(self, c: _Conn, method: str) -> _Response:
        # The whole head in one read (the stream's limit bounds it: LimitOverrunError past it).
        head = await c.r.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            raise ValueError("the answer's head is too long")
        lines = head[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return _Response(c, int(parts[1]), headers, method)

    async def _send_once(self, req: Request) -> _Response:
        body, headers = req.payload()
        head = f"{req.method} {self.e.base}{req.target()} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in {**self.e.headers, **headers}.items()
        )
        data = head.encode("latin-1") + b"\r\n"
        for fresh_try in (False, True):
            c = await self._connect()
            reused = c.used
            sent = False
            try:
                c.w.write(data + (body if isinstance(body, bytes) else b""))
                if body is not None and not isinstance(body, bytes):
                    await _send_file(c.w, body)
                await c.w.drain()
                sent = True
                wait = req.timeout if req.timeout is not None or req.accept == "application/x-ndjson" else self.timeout
                return await _within(self._head(c, req.method), wait)
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                c.close()
                # A kept-alive connection the server had closed: sent again on a new one if none of
                # it went, or if the call may run twice; a call that may not is not sent again (the
                # server may have taken it), as Node's agent does, and the retry policy decides.
                if reused and not fresh_try and (not sent or req.idempotent and isinstance(e, asyncio.IncompleteReadError) and not e.partial):
                    continue
                broke = TransportError(f"the connection to Warren at {self.e.url} broke: {e!r}", cause=e)
                broke.details["sent"] = sent
                raise broke from e
            except (OSError, ValueError, asyncio.TimeoutError, asyncio.LimitOverrunError) as e:
                c.close()
                err = TransportError(f"no answer from Warren at {self.e.url}: {e!r}", cause=e)
                err.details["sent"] = sent
                raise err from e
            except BaseException:
                c.close()
                raise
        raise AssertionError("unreachable")

    async def _with_retry(self, req: Request) -> _Response:
        attempt = 1
        while True:
            try:
                resp = await self._send_once(req)
                if resp.status >= 400:
                    data = await self._read_all(resp)
                    raise error_from_wire(resp.status, _json_or_none(data))
                return resp
            except WarrenError as e:
                wait = self.retry.delay(attempt, e, req.idempotent)
                if wait is None:
                    raise
                await self.retry.async_sleep(wait)
                attempt += 1

    async def _read_all(self, resp: _Response) -> bytes:
        try:
            return await _within(resp.read(), self.timeout)
        except (OSError, ValueError, EOFError, asyncio.IncompleteReadError, asyncio.TimeoutError, asyncio.LimitOverrunError) as e:
            raise TransportError(f"the answer from Warren at {self.e.url} broke off: {e!r}", cause=e) from e
        finally:
            self._release(resp.conn, resp)

    async def raw(self, req: Request) -> bytes:
        async with self.slots:
            return await self._read_all(await self._with_retry(req))

    async def call(self, req: Request) -> Any:
        return parse_json(200, await self.raw(req))

    @asynccontextmanager
    async def stream(self, req: Request) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self.slots:
            resp = await self._with_retry(req)

            async def chunks() -> AsyncIterator[bytes]:
                try:
                    async for b in resp.chunks():
                        yield b
                except (OSError, ValueError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                    raise TransportError(f"the stream from Warren at {self.e.url} broke off: {e!r}", cause=e) from e

            try:
                yield chunks()
            finally:
                self._release(resp.conn, resp)

    async def lines(self, req: Request) -> AsyncIterator[Any]:
        async with self.stream(req) as chunks:
            sp = LineSplitter()
            async for chunk in chunks:
                for v in sp.feed(chunk):
                    yield v
            for v in sp.end():
                yield v


async def _send_file(w: asyncio.StreamWriter, f: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        b = await loop.run_in_executor(None, f.read, 1 << 20)
        if not b:
            return
        w.write(b)
        await w.drain()
