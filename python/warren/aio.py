"""The asyncio client: :class:`AsyncWarren`, the same surface as :class:`warren.Warren`, awaitable.

Its I/O is asyncio's own (see _async_http): one process drives thousands of sandboxes at once.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from typing import IO, Any, AsyncIterator, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _wire as w
from ._async_http import AsyncTransport
from ._ndjson import LineSplitter
from ._sse import SseSplitter
from ._retry import Retry
from ._endpoint import Endpoint
from ._tarsafe import DEFAULT_MAX_BYTES, extract_safely, pack_dir
from ._turns import AsyncTurns
from .errors import NotFoundError, SandboxEndedError, UnavailableError, WarrenError, error_from_wire
from .leases import AsyncLease, AsyncLeases
from .types import (
    BatchCreateResult,
    ExecEvent,
    ExecResult,
    FileEntry,
    FnResult,
    Image,
    ImageProgress,
    Layer,
    Pool,
    SandboxInfo,
    from_wire,
)


class AsyncWarren:
    """A Warren server, for asyncio code. ``async with AsyncWarren() as w:`` closes its connections.

    ``max_connections`` bounds the calls in flight at once (the rest wait for a free connection).
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 120.0,
        retry: Optional[Retry] = None,
        max_connections: int = 256,
    ) -> None:
        self._t = AsyncTransport(Endpoint.resolve(url, api_key), timeout=timeout, retry=retry or Retry(), max_connections=max_connections)
        self.url = self._t.e.url
        self.sandboxes = AsyncSandboxes(self._t)
        self.batch = AsyncBatch(self._t)
        self.fn = AsyncFn(self._t)
        self.images = AsyncImages(self._t)
        self.snapshots = AsyncSnapshots(self._t)
        self.layers = AsyncLayers(self._t)
        self.pools = AsyncPools(self._t)
        self.keys = AsyncKeys(self._t)
        self.leases = AsyncLeases(self._t)

    async def lease(self, ttl: int, *, on_expiry: Optional[str] = None, labels: Optional[Mapping[str, str]] = None) -> AsyncLease:
        """Takes a lease renewed from a task: ``async with await w.lease(ttl=30) as lease:``."""
        return await self.leases.create(ttl, on_expiry=on_expiry, labels=labels)

    async def events(self, *, since: Optional[int] = None, labels: Optional[Mapping[str, str]] = None) -> AsyncIterator[Dict[str, Any]]:
        """As :meth:`warren.Warren.events`: ``async for ev in w.events(labels=...)``."""
        q = [("since", str(since))] if since is not None else []
        q += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        async with self._t.stream(w.route("events", query=q, accept="text/event-stream")) as chunks:
            sp = SseSplitter()
            async for chunk in chunks:
                for _id, _event, data in sp.feed(chunk):
                    yield json.loads(data)

    async def info(self) -> Dict[str, Any]:
        return await self._t.call(w.route("info", idempotent=True))  # type: ignore[no-any-return]

    async def nodes(self) -> List[Dict[str, Any]]:
        return (await self._t.call(w.route("listNodes", idempotent=True)))["nodes"]  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self._t.close()

    async def __aenter__(self) -> "AsyncWarren":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncSandboxes:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def create(self, image: Optional[str] = None, **opts: Any) -> "AsyncSandbox":
        """As :meth:`warren.client.Sandboxes.create`."""
        body = w.create_body(image, **opts)
        req = w.route("createSandbox", json=body, idempotent="requestId" in body)
        return AsyncSandbox(self._t, SandboxInfo.of(await self._t.call(req)))

    async def batch_create(self, count: int, template: Mapping[str, Any]) -> BatchCreateResult:
        tpl = dict(template)
        body = {"count": count, "template": w.create_body(tpl.pop("image", None), **tpl)}
        r = await self._t.call(w.route("batchCreate", json=body))
        return BatchCreateResult(
            sandboxes=[AsyncSandbox(self._t, SandboxInfo.of(s)) for s in r["sandboxes"]],
            errors=[error_from_wire(None, {"error": e}) for e in r["errors"]],
        )

    async def get(self, sandbox_id: str) -> "AsyncSandbox":
        return AsyncSandbox(self._t, SandboxInfo.of(await self._t.call(w.route("getSandbox", sandbox_id, idempotent=True))))

    async def list(
        self, *, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None, page_size: int = 500
    ) -> List["AsyncSandbox"]:
        return [s async for s in self.iter(labels=labels, state=state, page_size=page_size)]

    async def iter(
        self, *, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None, page_size: int = 500
    ) -> AsyncIterator["AsyncSandbox"]:
        cursor: Optional[str] = None
        while True:
            q = w.list_query(labels, state, page_size, cursor)
            r = await self._t.call(w.route("listSandboxes", query=q, idempotent=True))
            for s in r["sandboxes"]:
                yield AsyncSandbox(self._t, SandboxInfo.of(s))
            cursor = r.get("nextCursor")
            if not cursor:
                return


class AsyncBatch:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def _op(self, op: str, labels: Mapping[str, str]) -> int:
        return int((await self._t.call(w.route(w.BATCH_ROUTES[op], json={"labels": dict(labels)}, idempotent=True)))["count"])

    async def pause(self, labels: Mapping[str, str]) -> int:
        return await self._op("pause", labels)

    async def resume(self, labels: Mapping[str, str]) -> int:
        return await self._op("resume", labels)

    async def delete(self, labels: Mapping[str, str]) -> int:
        return await self._op("delete", labels)


class AsyncSandbox:
    """As :class:`warren.client.Sandbox`; ``async with`` deletes it on exit."""

    def __init__(self, t: AsyncTransport, info: SandboxInfo) -> None:
        self._t = t
        self.info = info
        self.files = AsyncSandboxFiles(t, info.id)

    @property
    def id(self) -> str:
        return self.info.id

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.id!r}, state={self.info.state!r})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()

    async def _info(self, req: w.Request) -> SandboxInfo:
        self.info = SandboxInfo.of(await self._t.call(req))
        return self.info

    async def refresh(self) -> SandboxInfo:
        return await self._info(w.route("getSandbox", self.id, idempotent=True))

    async def exec(self, cmd: w.Cmd, **opts: Any) -> ExecResult:
        """As :meth:`warren.Sandbox.exec`: a command its sandbox's end cut off raises :class:`SandboxEndedError`."""
        body = w.exec_body(cmd, **opts)
        try:
            return from_wire(ExecResult, await self._t.call(w.exec_request(self.id, body, stream=False)))
        except UnavailableError as e:
            raise await self._ended_or(e) from e

    async def exec_stream(self, cmd: w.Cmd, **opts: Any) -> AsyncIterator[ExecEvent]:
        body = w.exec_body(cmd, **opts)
        async for obj in self._t.lines(w.exec_request(self.id, body, stream=True)):
            ev = w.event(obj)
            try:
                w.raise_if_error(ev)
            except UnavailableError as e:
                raise await self._ended_or(e) from e
            yield ev

    async def _ended_or(self, e: UnavailableError) -> UnavailableError:
        deadline = asyncio.get_running_loop().time() + w.END_WAIT_S
        while True:
            try:
                end = (await self.refresh()).end
            except WarrenError:
                return e
            if end:
                return SandboxEndedError(end, cause=e)
            if asyncio.get_running_loop().time() > deadline:
                return e
            await asyncio.sleep(0.1)

    async def exec_background(self, cmd: w.Cmd, **opts: Any) -> "AsyncCommand":
        body = w.exec_body(cmd, **opts)
        async with self._t.stream(w.exec_request(self.id, body, stream=True)) as chunks:
            sp = LineSplitter()
            async for chunk in chunks:
                for obj in sp.feed(chunk):
                    ev = w.event(obj)
                    w.raise_if_error(ev)
                    if ev.type == "start" and ev.command_id:
                        return AsyncCommand(self, ev.command_id)
        raise WarrenError("the command's stream ended before it started", code="unavailable")

    def command(self, command_id: str) -> "AsyncCommand":
        return AsyncCommand(self, command_id)

    async def shell(self, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None, user: Optional[str] = None) -> "AsyncShell":
        body = w.drop_none({"cwd": cwd, "env": dict(env) if env is not None else None, "user": user})
        sid = (await self._t.call(w.route("createSession", self.id, json=body)))["sessionId"]
        return AsyncShell(self, sid)

    async def pause(self) -> None:
        await self._t.call(w.route("pause", self.id, idempotent=True))

    async def resume(self) -> None:
        await self._t.call(w.route("resume", self.id, idempotent=True))

    async def set_timeout(self, ttl_seconds: int) -> SandboxInfo:
        return await self._info(w.route("setTimeout", self.id, json={"ttlSeconds": ttl_seconds}, idempotent=True))

    async def set_network(self, policy: Mapping[str, Any]) -> SandboxInfo:
        return await self._info(w.route("setNetwork", self.id, json=w.wire_keys(policy), idempotent=True))

    async def fork(self, count: int = 1, **opts: Any) -> BatchCreateResult:
        """``count`` new sandboxes with this one's files now (a microVM's memory too); it may be
        running or paused and runs on. Options: ``labels``, ``lifetime`` or ``ttl_seconds``,
        ``lease``, ``resources``. What could not be made comes back as errors, not raised."""
        r = await self._t.call(w.route("forkSandbox", self.id, json=w.fork_body(count, **opts)))
        return BatchCreateResult(
            sandboxes=[AsyncSandbox(self._t, SandboxInfo.of(s)) for s in r["sandboxes"]],
            errors=[error_from_wire(None, {"error": e}) for e in r["errors"]],
        )

    async def snapshot(self, name: Optional[str] = None) -> Image:
        """Keeps this sandbox's files now as a snapshot that outlives it; ``sandboxes.create(snapshot=name)`` starts from it."""
        body = {"name": name} if name is not None else {}
        return from_wire(Image, await self._t.call(w.route("createSnapshot", self.id, json=body, timeout=3600)))

    async def commit(self, name: str, *, exclude: Optional[Sequence[str]] = None) -> Image:
        body = w.drop_none({"name": name, "exclude": list(exclude) if exclude is not None else None})
        return from_wire(Image, await self._t.call(w.route("commit", self.id, json=body, timeout=3600)))

    async def screen(self) -> bytes:
        """A full VM's screen now, as PNG bytes (backend ``vm``)."""
        return await self._t.raw(w.route("screen", self.id, accept="image/png", idempotent=True))

    async def input(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Keys, text and mouse events to a full VM's display, in order (backend ``vm``), e.g.
        ``[{"type": "mouse", "x": 10, "y": 20, "button": "left"}, {"type": "text", "text": "ls"}, {"type": "key", "key": "Return"}]``."""
        await self._t.call(w.route("input", self.id, json={"events": [dict(e) for e in events]}))

    async def delete(self) -> None:
        await self._t.call(w.route("deleteSandbox", self.id, idempotent=True))


class AsyncCommand:
    def __init__(self, sandbox: AsyncSandbox, command_id: str) -> None:
        self.sandbox = sandbox
        self.id = command_id

    @property
    def command_id(self) -> str:
        return self.id

    async def reattach(self, offset: int = 0) -> AsyncIterator[ExecEvent]:
        async for obj in self.sandbox._t.lines(w.attach_request(self.sandbox.id, self.id, offset)):
            ev = w.event(obj)
            w.raise_if_error(ev)
            yield ev

    async def wait(self) -> ExecResult:
        b = w.ResultBuilder(self.id)
        async for ev in self.reattach(0):
            b.add(ev)
        return b.finish()

    async def kill(self, signal: str = "SIGTERM") -> None:
        await self.sandbox._t.call(w.route("killCommand", self.sandbox.id, self.id, json={"signal": signal}, idempotent=True))

    async def write_stdin(self, data: Union[str, bytes], *, eof: bool = False) -> None:
        await self.sandbox._t.call(w.route("commandStdin", self.sandbox.id, self.id, query=[("eof", "1")] if eof else [], body=data))


class AsyncShell:
    """A persistent shell in a sandbox. As an async context manager, it is closed on exit.

    Its commands run one at a time, in the order they were called: ``asyncio.gather`` of many on
    one shell runs them in the order given. Each is sent once the one before it has its place on
    the server, which queues them (see _turns); ``timeout_ms`` counts from a command's start.
    """

    def __init__(self, sandbox: AsyncSandbox, session_id: str) -> None:
        self.sandbox = sandbox
        self.id = session_id
        self._turns = AsyncTurns()

    async def exec(self, cmd: w.Cmd, **opts: Any) -> ExecResult:
        t = self._turns.take()
        try:
            await self._turns.wait(t)
            return await self.sandbox.exec(cmd, session=self.id, **opts)
        finally:
            self._turns.give_back(t)

    async def exec_stream(self, cmd: w.Cmd, **opts: Any) -> AsyncIterator[ExecEvent]:
        """Its place in the order is taken when the stream is first read."""
        t = self._turns.take()
        try:
            await self._turns.wait(t)
            async for ev in self.sandbox.exec_stream(cmd, session=self.id, **opts):
                # The first event says the server has it: the next command may go.
                self._turns.give_back(t)
                yield ev
        finally:
            self._turns.give_back(t)

    async def close(self) -> None:
        await self.sandbox._t.call(w.route("deleteSession", self.sandbox.id, self.id, idempotent=True))

    async def __aenter__(self) -> "AsyncShell":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncSandboxFiles:
    def __init__(self, t: AsyncTransport, sandbox_id: str) -> None:
        self._t = t
        self._id = sandbox_id


    async def read(self, path: str) -> bytes:
        return await self._t.raw(w.route("readFile", self._id, query=[("path", path)], accept="*/*", idempotent=True))

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def write(self, path: str, data: Union[str, bytes, IO[bytes]], *, mode: Optional[int] = None) -> None:
        q = [("path", path)] + w.file_mode(mode)
        await self._t.call(w.route("writeFile", self._id, query=q, body=data, idempotent=not hasattr(data, "read")))

    async def list(self, path: str, depth: int = 1) -> List[FileEntry]:
        q = [("path", path), ("depth", str(depth))]
        r = await self._t.call(w.route("listFiles", self._id, query=q, idempotent=True))
        return [from_wire(FileEntry, e) for e in r["entries"]]

    async def stat(self, path: str) -> FileEntry:
        return from_wire(FileEntry, await self._t.call(w.route("statFile", self._id, query=[("path", path)], idempotent=True)))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
            return True
        except NotFoundError:
            return False

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        q = [("path", path)] + ([("recursive", "1")] if recursive else [])
        await self._t.call(w.route("deleteFile", self._id, query=q, idempotent=True))

    async def mkdir(self, path: str) -> None:
        await self._t.call(w.route("mkdir", self._id, json={"path": path}, idempotent=True))

    async def move(self, src: str, dst: str) -> None:
        await self._t.call(w.route("move", self._id, json={"from": src, "to": dst}))

    async def put_archive(self, path: str, tar: Union[bytes, IO[bytes]]) -> None:
        await self._t.call(w.route("putArchive", self._id, query=[("path", path)], body=tar, content_type="application/x-tar"))

    async def get_archive(self, path: str, out: IO[bytes], *, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
        n = 0
        req = w.route("getArchive", self._id, query=[("path", path)], accept="application/x-tar", idempotent=True)
        async with self._t.stream(req) as chunks:
            async for chunk in chunks:
                n += len(chunk)
                if n > max_bytes:
                    raise WarrenError(f"the archive passed {max_bytes} bytes", code="payload_too_large")
                out.write(chunk)
        return n

    async def upload_dir(self, local: str, remote: str) -> None:
        with tempfile.TemporaryFile() as f:
            await asyncio.get_running_loop().run_in_executor(None, pack_dir, local, f)
            await self.put_archive(remote, f)

    async def download_dir(self, remote: str, local: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
        with tempfile.TemporaryFile() as f:
            await self.get_archive(remote, f, max_bytes=max_bytes)
            f.seek(0)
            return await asyncio.get_running_loop().run_in_executor(None, lambda: extract_safely(f, local, max_bytes=max_bytes))


class AsyncFn:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def run(self, language: str, code: str, **opts: Any) -> FnResult:
        req = w.route("fnRun", json=w.fn_body(language, code, **opts), timeout=w.fn_timeout(opts))
        return from_wire(FnResult, await self._t.call(req))

    async def batch(self, calls: Sequence[Mapping[str, Any]]) -> List[Union[FnResult, WarrenError]]:
        body = {"calls": [w.fn_body(**c) for c in calls]}
        r = await self._t.call(w.route("fnBatch", json=body, timeout=w.fn_timeout({"timeout_ms": 15 * 60_000})))
        return [w.fn_outcome(x) for x in r["results"]]


class AsyncSnapshots:
    """The tenant's snapshots (``Sandbox.snapshot``): images that outlive their sandbox."""

    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def list(self, *, sandbox: Optional[str] = None, name: Optional[str] = None) -> List[Image]:
        """Newest first; ``sandbox``: only those of one sandbox."""
        q = [(k, v) for k, v in (("sandbox", sandbox), ("name", name)) if v is not None]
        return [from_wire(Image, i) for i in (await self._t.call(w.route("listSnapshots", query=q, idempotent=True)))["snapshots"]]

    async def delete(self, name: str, *, force: bool = False) -> None:
        """Refused (ConflictError) while live sandboxes were created from it, unless ``force``."""
        await self._t.call(w.route("deleteSnapshot", name, query=[("force", "1")] if force else [], idempotent=True))


class AsyncImages:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def list(self) -> List[Image]:
        return [from_wire(Image, i) for i in (await self._t.call(w.route("listImages", idempotent=True)))["images"]]

    async def import_tar(self, path: str, *, name: str, on_progress: Optional[Callable[[ImageProgress], None]] = None) -> Image:
        with open(path, "rb") as f:
            req = w.route("importImage", query=[("name", name)], body=f, content_type="application/x-tar", accept="application/x-ndjson")
            return w.image_result([x async for x in self._t.lines(req)], on_progress)

    async def pull(self, ref: str, *, name: Optional[str] = None, auth: Optional[Mapping[str, str]] = None, on_progress: Optional[Callable[[ImageProgress], None]] = None) -> Image:
        body = w.drop_none({"ref": ref, "name": name, "auth": dict(auth) if auth else None})
        req = w.route("pullImage", json=body, accept="application/x-ndjson")
        return w.image_result([x async for x in self._t.lines(req)], on_progress)

    async def delete(self, name: str, *, force: bool = False) -> None:
        """Refused (ConflictError) while live sandboxes were created from it, unless ``force``."""
        await self._t.call(w.route("deleteImage", name, query=[("force", "1")] if force else [], idempotent=True))


class AsyncLayers:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def upload(self, name: str, tar: Union[bytes, IO[bytes]]) -> Layer:
        return from_wire(Layer, await self._t.call(w.route("uploadLayer", query=[("name", name)], body=tar, content_type="application/x-tar")))

    async def list(self) -> List[Layer]:
        return [from_wire(Layer, x) for x in (await self._t.call(w.route("listLayers", idempotent=True)))["layers"]]

    async def publish(self, to: str, *, image: Optional[str] = None, layers: Optional[Sequence[str]] = None, auth: Optional[Mapping[str, str]] = None) -> List[Dict[str, Any]]:
        body = w.drop_none({"to": to, "image": image, "layers": list(layers) if layers else None, "auth": dict(auth) if auth else None})
        return (await self._t.call(w.route("publishLayers", json=body, idempotent=True)))["layers"]  # type: ignore[no-any-return]

    async def delete(self, name: str) -> None:
        await self._t.call(w.route("deleteLayer", name, idempotent=True))


class AsyncPools:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def create(self, image: str, size: int, **opts: Any) -> Pool:
        return from_wire(Pool, await self._t.call(w.route("createPool", json=w.pool_body(image, size, **opts))))

    async def list(self) -> List[Pool]:
        return [from_wire(Pool, p) for p in (await self._t.call(w.route("listPools", idempotent=True)))["pools"]]

    async def delete(self, pool_id: str) -> None:
        await self._t.call(w.route("deletePool", pool_id, idempotent=True))


class AsyncKeys:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def create(self, tenant: str, **opts: Any) -> Dict[str, Any]:
        return await self._t.call(w.route("createKey", json=w.key_body(tenant, **opts)))  # type: ignore[no-any-return]

    async def revoke(self, key_id: str) -> None:
        await self._t.call(w.route("deleteKey", key_id, idempotent=True))
